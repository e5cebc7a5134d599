/* A writer of GGUF v3 files (the layout in plugins/torchlike/gguf.h), for
 * the llama2.c converter and for tests that need small, or deliberately
 * broken, GGUF files. It writes what it is told: it does not validate. */
#ifndef TORCHLIKE_GGUF_WRITER_H
#define TORCHLIKE_GGUF_WRITER_H

#include <stddef.h>
#include <stdint.h>

typedef struct tl_gbuf {
    unsigned char *p;
    size_t len, cap;
    int failed; /* an allocation failed; the result is unusable */
} tl_gbuf;

typedef struct tl_gguf_writer {
    tl_gbuf kv, info, data;
    uint64_t n_kv, n_tensors;
    uint32_t version;   /* 3 unless a test says otherwise */
    uint64_t alignment; /* of the data section and each tensor; 32 */
    uint64_t offset_bias; /* added to every tensor offset (tests: misaligned) */
} tl_gguf_writer;

void tl_gw_init(tl_gguf_writer *w);
void tl_gw_free(tl_gguf_writer *w);

void tl_gw_string(tl_gguf_writer *w, const char *key, const char *value);
void tl_gw_u32(tl_gguf_writer *w, const char *key, uint32_t value);
void tl_gw_bool(tl_gguf_writer *w, const char *key, int value);
void tl_gw_f32(tl_gguf_writer *w, const char *key, float value);
/* Arrays: strings (lens[i] bytes each), float32, int32. */
void tl_gw_strings(tl_gguf_writer *w, const char *key, uint64_t n, const char *const *s,
                   const int *lens);
void tl_gw_f32s(tl_gguf_writer *w, const char *key, uint64_t n, const float *v);
void tl_gw_i32s(tl_gguf_writer *w, const char *key, uint64_t n, const int32_t *v);

/* A tensor of dims ne[0..n_dims) (innermost first) and ggml type `type`;
 * `bytes` of data copied and padded to the alignment. */
void tl_gw_tensor(tl_gguf_writer *w, const char *name, uint32_t n_dims, const uint64_t *ne,
                  uint32_t type, const void *data, size_t bytes);

/* The whole file in one malloc'd buffer (caller frees), or -1. */
int tl_gw_finish(const tl_gguf_writer *w, unsigned char **out, size_t *size);
/* Or written to `path`: 0, or -1 with errno set. */
int tl_gw_write(const tl_gguf_writer *w, const char *path);

#endif
