/* torchlike — a reader of GGUF files (version 3), written from the published
 * specification: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md
 *
 * Layout (little-endian): magic "GGUF", uint32 version, uint64 tensor_count,
 * uint64 metadata_kv_count; the key/value pairs (string key, uint32 value
 * type, value); one info per tensor (string name, uint32 n_dimensions,
 * uint64 dimensions[] innermost first, uint32 ggml type, uint64 offset);
 * padding to general.alignment (default 32); the tensor data, each tensor at
 * its offset from the start of the data. Strings are a uint64 length and
 * that many bytes, not NUL-terminated.
 *
 * tl_gguf_parse checks every count, length, type, offset and size against
 * the buffer before it is used: a truncated or corrupt file is an error
 * naming the field, never a read outside the buffer. Values stay in the
 * buffer; the parsed index points into it. */
#ifndef TORCHLIKE_GGUF_H
#define TORCHLIKE_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "inferlab/status.h"

enum {
    TL_GGUF_UINT8 = 0, TL_GGUF_INT8 = 1, TL_GGUF_UINT16 = 2, TL_GGUF_INT16 = 3,
    TL_GGUF_UINT32 = 4, TL_GGUF_INT32 = 5, TL_GGUF_FLOAT32 = 6, TL_GGUF_BOOL = 7,
    TL_GGUF_STRING = 8, TL_GGUF_ARRAY = 9, TL_GGUF_UINT64 = 10, TL_GGUF_INT64 = 11,
    TL_GGUF_FLOAT64 = 12,
};

#define TL_GGUF_MAX_DIMS 4

typedef struct tl_gguf_string {
    const char *s; /* into the buffer, not NUL-terminated */
    uint64_t len;
} tl_gguf_string;

typedef struct tl_gguf_kv {
    tl_gguf_string key;
    uint32_t type;
    const unsigned char *value; /* the encoded value (after the type) */
    uint32_t elem_type;         /* arrays: element type */
    uint64_t count;             /* arrays: element count */
    const unsigned char *elems; /* arrays: the first element */
} tl_gguf_kv;

typedef struct tl_gguf_tensor {
    tl_gguf_string name;
    uint32_t n_dims;
    uint64_t ne[TL_GGUF_MAX_DIMS]; /* ne[0] is the innermost (contiguous) dimension; unused = 1 */
    uint32_t type;                 /* ggml type id; one of TL_WEIGHT_TYPES_SUPPORTED */
    uint64_t offset;               /* from the start of the data section */
    const void *data;
    uint64_t bytes;
} tl_gguf_tensor;

typedef struct tl_gguf {
    uint32_t version;
    uint64_t n_kv, n_tensors;
    tl_gguf_kv *kv;          /* [n_kv], owned */
    tl_gguf_tensor *tensors; /* [n_tensors], owned */
    uint64_t alignment;
    uint64_t data_offset;
    const unsigned char *bytes; /* the whole file, borrowed */
    size_t size;
} tl_gguf;

/* Parse a GGUF file held in memory (a mapping, or a fuzzer's buffer); the
 * bytes must outlive the result. On error writes a message naming `label`
 * and the field into err and returns ILAB_INVALID_ARGUMENT (or
 * ILAB_OUT_OF_MEMORY). A tensor type outside TL_WEIGHT_TYPES_SUPPORTED
 * (weights.h) is refused, naming the tensor and its type. */
ilab_status tl_gguf_parse(const uint8_t *bytes, size_t size, const char *label, tl_gguf **out,
                          char *err, size_t err_cap);
void tl_gguf_free(tl_gguf *g);

/* Lookups: NULL when absent. */
const tl_gguf_kv *tl_gguf_find(const tl_gguf *g, const char *key);
const tl_gguf_tensor *tl_gguf_find_tensor(const tl_gguf *g, const char *name);

/* Typed reads of a key; each returns 0, or -1 (and writes err) when the key
 * is absent or of another type. Any integer type is accepted for an integer
 * if the value fits. */
int tl_gguf_get_int(const tl_gguf *g, const char *key, const char *label, int64_t *out, char *err,
                    size_t cap);
int tl_gguf_get_f32(const tl_gguf *g, const char *key, const char *label, float *out, char *err,
                    size_t cap);
int tl_gguf_get_string(const tl_gguf *g, const char *key, const char *label, tl_gguf_string *out,
                       char *err, size_t cap);

/* Walk an array of strings: *p starts at kv->elems; each call reads one
 * string and advances *p (the parser checked every length). */
tl_gguf_string tl_gguf_next_string(const unsigned char **p);

const char *tl_ggml_type_name(uint32_t type);

#endif
