#include "gguf.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weights.h"

/* Bounds on counts: each key/value takes at least 12 bytes and each tensor
 * info at least 24, so a count larger than the file could hold is refused
 * before anything is allocated for it. */
#define KV_MIN_BYTES 12
#define TENSOR_MIN_BYTES 24

typedef struct cursor {
    const unsigned char *p, *end;
    const char *label;
    char *err;
    size_t cap;
} cursor;

static size_t offset_of(const cursor *c, const unsigned char *base)
{
    return (size_t)(c->p - base);
}

static int take(cursor *c, size_t n, const char *field, const void **out)
{
    if ((size_t)(c->end - c->p) < n) {
        snprintf(c->err, c->cap, "GGUF %s: truncated in %s (needs %zu bytes, %zu left)", c->label,
                 field, n, (size_t)(c->end - c->p));
        return -1;
    }
    *out = c->p;
    c->p += n;
    return 0;
}

static int read_u32(cursor *c, const char *field, uint32_t *v)
{
    const void *p;
    if (take(c, 4, field, &p) != 0)
        return -1;
    memcpy(v, p, 4);
    return 0;
}

static int read_u64(cursor *c, const char *field, uint64_t *v)
{
    const void *p;
    if (take(c, 8, field, &p) != 0)
        return -1;
    memcpy(v, p, 8);
    return 0;
}

static int read_string(cursor *c, const char *field, tl_gguf_string *s)
{
    uint64_t len;
    if (read_u64(c, field, &len) != 0)
        return -1;
    if (len > (uint64_t)(c->end - c->p)) {
        snprintf(c->err, c->cap, "GGUF %s: %s: string length %" PRIu64 " runs past the end of "
                 "the file (%zu bytes left)", c->label, field, len, (size_t)(c->end - c->p));
        return -1;
    }
    s->s = (const char *)c->p;
    s->len = len;
    c->p += len;
    return 0;
}

/* Size of one value of a fixed-size type, or 0 for strings, arrays and
 * unknown types. */
static size_t scalar_size(uint32_t type)
{
    switch (type) {
    case TL_GGUF_UINT8: case TL_GGUF_INT8: case TL_GGUF_BOOL: return 1;
    case TL_GGUF_UINT16: case TL_GGUF_INT16: return 2;
    case TL_GGUF_UINT32: case TL_GGUF_INT32: case TL_GGUF_FLOAT32: return 4;
    case TL_GGUF_UINT64: case TL_GGUF_INT64: case TL_GGUF_FLOAT64: return 8;
    }
    return 0;
}

/* The key is named in every message about its value. */
static int read_value(cursor *c, tl_gguf_kv *kv, int depth)
{
    char field[160];
    snprintf(field, sizeof field, "value of key \"%.*s\"", kv->key.len > 100 ? 100 : (int)kv->key.len,
             kv->key.s);
    size_t sz = scalar_size(kv->type);
    const void *p;
    kv->value = c->p;
    if (sz)
        return take(c, sz, field, &p);
    if (kv->type == TL_GGUF_STRING) {
        tl_gguf_string s;
        return read_string(c, field, &s);
    }
    if (kv->type != TL_GGUF_ARRAY) {
        snprintf(c->err, c->cap, "GGUF %s: key \"%.*s\": value type %u is not a GGUF type (0..12)",
                 c->label, kv->key.len > 100 ? 100 : (int)kv->key.len, kv->key.s, kv->type);
        return -1;
    }
    if (read_u32(c, field, &kv->elem_type) != 0 || read_u64(c, field, &kv->count) != 0)
        return -1;
    kv->elems = c->p;
    size_t esz = scalar_size(kv->elem_type);
    if (esz) {
        if (kv->count > (uint64_t)(c->end - c->p) / esz) {
            snprintf(c->err, c->cap, "GGUF %s: %s: array of %" PRIu64 " elements of %zu bytes runs "
                     "past the end of the file", c->label, field, kv->count, esz);
            return -1;
        }
        c->p += kv->count * esz;
        return 0;
    }
    if (kv->elem_type == TL_GGUF_STRING) {
        for (uint64_t i = 0; i < kv->count; i++) {
            tl_gguf_string s;
            if (read_string(c, field, &s) != 0)
                return -1;
        }
        return 0;
    }
    if (kv->elem_type == TL_GGUF_ARRAY && depth < 2) {
        /* Arrays of arrays: allowed by the format; skipped, not used. */
        for (uint64_t i = 0; i < kv->count; i++) {
            tl_gguf_kv inner = {kv->key, TL_GGUF_ARRAY, NULL, 0, 0, NULL};
            if (read_value(c, &inner, depth + 1) != 0)
                return -1;
        }
        return 0;
    }
    snprintf(c->err, c->cap, "GGUF %s: %s: array element type %u is not supported", c->label,
             field, kv->elem_type);
    return -1;
}

const char *tl_ggml_type_name(uint32_t type)
{
    return tl_weight_type_name(type);
}

static int same(tl_gguf_string a, const char *b)
{
    size_t n = strlen(b);
    return a.len == n && memcmp(a.s, b, n) == 0;
}

static int same_str(tl_gguf_string a, tl_gguf_string b)
{
    return a.len == b.len && memcmp(a.s, b.s, (size_t)a.len) == 0;
}

static int read_tensor_info(cursor *c, tl_gguf_tensor *t, uint64_t index)
{
    char field[96];
    snprintf(field, sizeof field, "name of tensor %" PRIu64, index);
    if (read_string(c, field, &t->name) != 0)
        return -1;
    int nl = t->name.len > 100 ? 100 : (int)t->name.len;
    snprintf(field, sizeof field, "n_dimensions of tensor %" PRIu64, index);
    if (read_u32(c, field, &t->n_dims) != 0)
        return -1;
    if (t->n_dims < 1 || t->n_dims > TL_GGUF_MAX_DIMS) {
        snprintf(c->err, c->cap, "GGUF %s: tensor \"%.*s\": n_dimensions is %u; expected 1..%d",
                 c->label, nl, t->name.s, t->n_dims, TL_GGUF_MAX_DIMS);
        return -1;
    }
    uint64_t elems = 1;
    for (uint32_t d = 0; d < TL_GGUF_MAX_DIMS; d++)
        t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        snprintf(field, sizeof field, "dimensions of tensor %" PRIu64, index);
        if (read_u64(c, field, &t->ne[d]) != 0)
            return -1;
        /* 2^31 per dimension and 2^40 elements in all: far beyond any model
         * torchlike runs, and no product below can overflow. */
        /* Divide rather than multiply: elems * ne[d] can pass 2^64 and wrap. */
        if (t->ne[d] == 0 || t->ne[d] > (1ull << 31) || t->ne[d] > (1ull << 40) / elems) {
            snprintf(c->err, c->cap, "GGUF %s: tensor \"%.*s\": dimension %u is %" PRIu64
                     " (must be 1..2^31, at most 2^40 elements in all)", c->label, nl, t->name.s,
                     d, t->ne[d]);
            return -1;
        }
        elems *= t->ne[d];
    }
    snprintf(field, sizeof field, "type of tensor %" PRIu64, index);
    if (read_u32(c, field, &t->type) != 0)
        return -1;
    snprintf(field, sizeof field, "offset of tensor %" PRIu64, index);
    if (read_u64(c, field, &t->offset) != 0)
        return -1;
    size_t row = 0;
    if (tl_weight_type_supported(t->type))
        row = tl_dtype_row_bytes((tl_dtype)t->type, (int)t->ne[0]);
    else {
        snprintf(c->err, c->cap, "GGUF %s: tensor \"%.*s\" has type %s (%u); torchlike runs "
                 TL_WEIGHT_TYPES_SUPPORTED " only", c->label, nl, t->name.s,
                 tl_weight_type_name(t->type), t->type);
        return -1;
    }
    if (row == 0) {
        snprintf(c->err, c->cap, "GGUF %s: tensor \"%.*s\": %s rows of %" PRIu64 " values are not "
                 "a whole number of %d-value blocks", c->label, nl, t->name.s,
                 tl_weight_type_name(t->type), t->ne[0], tl_dtype_block_values((tl_dtype)t->type));
        return -1;
    }
    t->bytes = (uint64_t)row * (elems / t->ne[0]);
    return 0;
}

static ilab_status parse(tl_gguf *g, cursor *c)
{
    const unsigned char *base = c->p;
    const void *magic;
    if (take(c, 4, "magic", &magic) != 0)
        return ILAB_INVALID_ARGUMENT;
    if (memcmp(magic, "GGUF", 4) != 0) {
        snprintf(c->err, c->cap, "GGUF %s: magic is not \"GGUF\"", c->label);
        return ILAB_INVALID_ARGUMENT;
    }
    if (read_u32(c, "version", &g->version) != 0)
        return ILAB_INVALID_ARGUMENT;
    if (g->version != 3) {
        snprintf(c->err, c->cap, "GGUF %s: version is %u; torchlike reads version 3", c->label,
                 g->version);
        return ILAB_INVALID_ARGUMENT;
    }
    if (read_u64(c, "tensor_count", &g->n_tensors) != 0 ||
        read_u64(c, "metadata_kv_count", &g->n_kv) != 0)
        return ILAB_INVALID_ARGUMENT;
    size_t left = (size_t)(c->end - c->p);
    if (g->n_kv > left / KV_MIN_BYTES) {
        snprintf(c->err, c->cap, "GGUF %s: metadata_kv_count is %" PRIu64 "; %zu bytes cannot hold "
                 "that many", c->label, g->n_kv, left);
        return ILAB_INVALID_ARGUMENT;
    }
    if (g->n_tensors > left / TENSOR_MIN_BYTES) {
        snprintf(c->err, c->cap, "GGUF %s: tensor_count is %" PRIu64 "; %zu bytes cannot hold that "
                 "many", c->label, g->n_tensors, left);
        return ILAB_INVALID_ARGUMENT;
    }
    g->kv = calloc(g->n_kv ? (size_t)g->n_kv : 1, sizeof *g->kv);
    g->tensors = calloc(g->n_tensors ? (size_t)g->n_tensors : 1, sizeof *g->tensors);
    if (!g->kv || !g->tensors) {
        snprintf(c->err, c->cap, "GGUF %s: out of memory", c->label);
        return ILAB_OUT_OF_MEMORY;
    }
    g->alignment = 32;
    for (uint64_t i = 0; i < g->n_kv; i++) {
        tl_gguf_kv *kv = &g->kv[i];
        char field[64];
        snprintf(field, sizeof field, "key of metadata entry %" PRIu64, i);
        if (read_string(c, field, &kv->key) != 0)
            return ILAB_INVALID_ARGUMENT;
        snprintf(field, sizeof field, "value type of metadata entry %" PRIu64, i);
        if (read_u32(c, field, &kv->type) != 0 || read_value(c, kv, 0) != 0)
            return ILAB_INVALID_ARGUMENT;
        for (uint64_t j = 0; j < i; j++) {
            if (same_str(g->kv[j].key, kv->key)) {
                snprintf(c->err, c->cap, "GGUF %s: key \"%.*s\" appears twice", c->label,
                         kv->key.len > 100 ? 100 : (int)kv->key.len, kv->key.s);
                return ILAB_INVALID_ARGUMENT;
            }
        }
        if (same(kv->key, "general.alignment")) {
            uint32_t a;
            if (kv->type != TL_GGUF_UINT32) {
                snprintf(c->err, c->cap, "GGUF %s: general.alignment has value type %u; the "
                         "specification says uint32 (4)", c->label, kv->type);
                return ILAB_INVALID_ARGUMENT;
            }
            memcpy(&a, kv->value, 4);
            if (a == 0 || (a & (a - 1)) != 0 || a > 65536) {
                snprintf(c->err, c->cap, "GGUF %s: general.alignment is %u; expected a power of "
                         "two up to 65536", c->label, a);
                return ILAB_INVALID_ARGUMENT;
            }
            g->alignment = a;
        }
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        if (read_tensor_info(c, &g->tensors[i], i) != 0)
            return ILAB_INVALID_ARGUMENT;
        for (uint64_t j = 0; j < i; j++) {
            if (same_str(g->tensors[j].name, g->tensors[i].name)) {
                snprintf(c->err, c->cap, "GGUF %s: tensor \"%.*s\" appears twice", c->label,
                         g->tensors[i].name.len > 100 ? 100 : (int)g->tensors[i].name.len,
                         g->tensors[i].name.s);
                return ILAB_INVALID_ARGUMENT;
            }
        }
    }
    uint64_t info_end = offset_of(c, base);
    g->data_offset = (info_end + g->alignment - 1) / g->alignment * g->alignment;
    uint64_t data_size = g->data_offset <= g->size ? g->size - g->data_offset : 0;
    if (g->n_tensors > 0 && g->data_offset > g->size) {
        snprintf(c->err, c->cap, "GGUF %s: the tensor data would start at byte %" PRIu64
                 " (tensor infos end at %" PRIu64 ", alignment %" PRIu64 "), past the end of the "
                 "%zu-byte file", c->label, g->data_offset, info_end, g->alignment, g->size);
        return ILAB_INVALID_ARGUMENT;
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        tl_gguf_tensor *t = &g->tensors[i];
        int nl = t->name.len > 100 ? 100 : (int)t->name.len;
        if (t->offset % g->alignment != 0) {
            snprintf(c->err, c->cap, "GGUF %s: tensor \"%.*s\": offset %" PRIu64 " is not a "
                     "multiple of the alignment %" PRIu64, c->label, nl, t->name.s, t->offset,
                     g->alignment);
            return ILAB_INVALID_ARGUMENT;
        }
        if (t->offset > data_size || t->bytes > data_size - t->offset) {
            snprintf(c->err, c->cap, "GGUF %s: tensor \"%.*s\": %" PRIu64 " bytes at offset %" PRIu64
                     " run past the end of the data (%" PRIu64 " bytes; truncated file?)", c->label,
                     nl, t->name.s, t->bytes, t->offset, data_size);
            return ILAB_INVALID_ARGUMENT;
        }
        t->data = g->bytes + g->data_offset + t->offset;
    }
    return ILAB_OK;
}

ilab_status tl_gguf_parse(const uint8_t *bytes, size_t size, const char *label, tl_gguf **out,
                          char *err, size_t cap)
{
    *out = NULL;
    tl_gguf *g = calloc(1, sizeof *g);
    if (!g) {
        snprintf(err, cap, "GGUF %s: out of memory", label);
        return ILAB_OUT_OF_MEMORY;
    }
    g->bytes = bytes;
    g->size = size;
    cursor c = {bytes, bytes + size, label, err, cap};
    ilab_status st = parse(g, &c);
    if (st != ILAB_OK) {
        tl_gguf_free(g);
        return st;
    }
    *out = g;
    return ILAB_OK;
}

void tl_gguf_free(tl_gguf *g)
{
    if (!g)
        return;
    free(g->kv);
    free(g->tensors);
    free(g);
}

const tl_gguf_kv *tl_gguf_find(const tl_gguf *g, const char *key)
{
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (same(g->kv[i].key, key))
            return &g->kv[i];
    return NULL;
}

const tl_gguf_tensor *tl_gguf_find_tensor(const tl_gguf *g, const char *name)
{
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (same(g->tensors[i].name, name))
            return &g->tensors[i];
    return NULL;
}

static const tl_gguf_kv *need(const tl_gguf *g, const char *key, const char *label, char *err,
                              size_t cap)
{
    const tl_gguf_kv *kv = tl_gguf_find(g, key);
    if (!kv)
        snprintf(err, cap, "GGUF %s: metadata key %s is missing", label, key);
    return kv;
}

int tl_gguf_get_int(const tl_gguf *g, const char *key, const char *label, int64_t *out, char *err,
                    size_t cap)
{
    const tl_gguf_kv *kv = need(g, key, label, err, cap);
    if (!kv)
        return -1;
    const unsigned char *v = kv->value;
    switch (kv->type) {
    case TL_GGUF_UINT8: *out = v[0]; return 0;
    case TL_GGUF_INT8: *out = (int8_t)v[0]; return 0;
    case TL_GGUF_UINT16: { uint16_t x; memcpy(&x, v, 2); *out = x; return 0; }
    case TL_GGUF_INT16: { int16_t x; memcpy(&x, v, 2); *out = x; return 0; }
    case TL_GGUF_UINT32: { uint32_t x; memcpy(&x, v, 4); *out = x; return 0; }
    case TL_GGUF_INT32: { int32_t x; memcpy(&x, v, 4); *out = x; return 0; }
    case TL_GGUF_INT64: { int64_t x; memcpy(&x, v, 8); *out = x; return 0; }
    case TL_GGUF_UINT64: {
        uint64_t x;
        memcpy(&x, v, 8);
        if (x <= INT64_MAX) {
            *out = (int64_t)x;
            return 0;
        }
        snprintf(err, cap, "GGUF %s: metadata key %s is %" PRIu64 ", too large", label, key, x);
        return -1;
    }
    }
    snprintf(err, cap, "GGUF %s: metadata key %s has value type %u; an integer is needed", label,
             key, kv->type);
    return -1;
}

int tl_gguf_get_f32(const tl_gguf *g, const char *key, const char *label, float *out, char *err,
                    size_t cap)
{
    const tl_gguf_kv *kv = need(g, key, label, err, cap);
    if (!kv)
        return -1;
    if (kv->type == TL_GGUF_FLOAT32) {
        memcpy(out, kv->value, 4);
        return 0;
    }
    if (kv->type == TL_GGUF_FLOAT64) {
        double d;
        memcpy(&d, kv->value, 8);
        *out = (float)d;
        return 0;
    }
    snprintf(err, cap, "GGUF %s: metadata key %s has value type %u; a float is needed", label, key,
             kv->type);
    return -1;
}

int tl_gguf_get_string(const tl_gguf *g, const char *key, const char *label, tl_gguf_string *out,
                       char *err, size_t cap)
{
    const tl_gguf_kv *kv = need(g, key, label, err, cap);
    if (!kv)
        return -1;
    if (kv->type != TL_GGUF_STRING) {
        snprintf(err, cap, "GGUF %s: metadata key %s has value type %u; a string is needed", label,
                 key, kv->type);
        return -1;
    }
    uint64_t len;
    memcpy(&len, kv->value, 8);
    *out = (tl_gguf_string){(const char *)kv->value + 8, len};
    return 0;
}

tl_gguf_string tl_gguf_next_string(const unsigned char **p)
{
    uint64_t len;
    memcpy(&len, *p, 8);
    tl_gguf_string s = {(const char *)*p + 8, len};
    *p += 8 + len;
    return s;
}
