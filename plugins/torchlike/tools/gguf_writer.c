#include "gguf_writer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void put(tl_gbuf *b, const void *p, size_t n)
{
    if (b->failed || n == 0)
        return; /* n == 0: b->p may still be NULL, and memcpy's may not be */
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n)
            cap *= 2;
        unsigned char *q = realloc(b->p, cap);
        if (!q) {
            b->failed = 1;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
}

static void put_u32(tl_gbuf *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(tl_gbuf *b, uint64_t v) { put(b, &v, 8); }

static void put_str(tl_gbuf *b, const char *s, size_t n)
{
    put_u64(b, n);
    put(b, s, n);
}

static void key(tl_gguf_writer *w, const char *k, uint32_t type)
{
    put_str(&w->kv, k, strlen(k));
    put_u32(&w->kv, type);
    w->n_kv++;
}

void tl_gw_init(tl_gguf_writer *w)
{
    memset(w, 0, sizeof *w);
    w->version = 3;
    w->alignment = 32;
}

void tl_gw_free(tl_gguf_writer *w)
{
    free(w->kv.p);
    free(w->info.p);
    free(w->data.p);
    memset(w, 0, sizeof *w);
}

void tl_gw_string(tl_gguf_writer *w, const char *k, const char *value)
{
    key(w, k, 8);
    put_str(&w->kv, value, strlen(value));
}

void tl_gw_u32(tl_gguf_writer *w, const char *k, uint32_t value)
{
    key(w, k, 4);
    put_u32(&w->kv, value);
}

void tl_gw_bool(tl_gguf_writer *w, const char *k, int value)
{
    unsigned char b = value != 0;
    key(w, k, 7);
    put(&w->kv, &b, 1);
}

void tl_gw_f32(tl_gguf_writer *w, const char *k, float value)
{
    key(w, k, 6);
    put(&w->kv, &value, 4);
}

void tl_gw_strings(tl_gguf_writer *w, const char *k, uint64_t n, const char *const *s,
                   const int *lens)
{
    key(w, k, 9);
    put_u32(&w->kv, 8);
    put_u64(&w->kv, n);
    for (uint64_t i = 0; i < n; i++)
        put_str(&w->kv, s[i], (size_t)lens[i]);
}

void tl_gw_f32s(tl_gguf_writer *w, const char *k, uint64_t n, const float *v)
{
    key(w, k, 9);
    put_u32(&w->kv, 6);
    put_u64(&w->kv, n);
    put(&w->kv, v, (size_t)n * 4);
}

void tl_gw_i32s(tl_gguf_writer *w, const char *k, uint64_t n, const int32_t *v)
{
    key(w, k, 9);
    put_u32(&w->kv, 5);
    put_u64(&w->kv, n);
    put(&w->kv, v, (size_t)n * 4);
}

void tl_gw_tensor(tl_gguf_writer *w, const char *name, uint32_t n_dims, const uint64_t *ne,
                  uint32_t type, const void *data, size_t bytes)
{
    put_str(&w->info, name, strlen(name));
    put_u32(&w->info, n_dims);
    for (uint32_t d = 0; d < n_dims; d++)
        put_u64(&w->info, ne[d]);
    put_u32(&w->info, type);
    put_u64(&w->info, w->data.len + w->offset_bias);
    put(&w->data, data, bytes);
    static const unsigned char zero;
    while (w->data.len % w->alignment && !w->data.failed)
        put(&w->data, &zero, 1);
    w->n_tensors++;
}

int tl_gw_finish(const tl_gguf_writer *w, unsigned char **out, size_t *size)
{
    if (w->kv.failed || w->info.failed || w->data.failed)
        return -1;
    tl_gbuf f = {0};
    put(&f, "GGUF", 4);
    put_u32(&f, w->version);
    put_u64(&f, w->n_tensors);
    put_u64(&f, w->n_kv);
    put(&f, w->kv.p, w->kv.len);
    put(&f, w->info.p, w->info.len);
    static const unsigned char zeros[64];
    while (f.len % w->alignment && !f.failed)
        put(&f, zeros, 1);
    put(&f, w->data.p, w->data.len);
    if (f.failed) {
        free(f.p);
        return -1;
    }
    *out = f.p;
    *size = f.len;
    return 0;
}

int tl_gw_write(const tl_gguf_writer *w, const char *path)
{
    unsigned char *buf;
    size_t size;
    if (tl_gw_finish(w, &buf, &size) != 0)
        return -1;
    FILE *fp = fopen(path, "wb");
    int ok = fp && fwrite(buf, 1, size, fp) == size;
    if (fp && fclose(fp) != 0)
        ok = 0;
    free(buf);
    return ok ? 0 : -1;
}
