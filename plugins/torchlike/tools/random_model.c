#include "random_model.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* xorshift64*: a fixed sequence from a seed, identical on every machine. */
static uint64_t next_u64(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ULL;
}

static float uniform(uint64_t *s)
{
    return (float)((next_u64(s) >> 40) / 16777216.0) * 2.0f - 1.0f; /* [-1, 1) */
}

/* n floats of center + scale * U(-1, 1), written in chunks. */
static int write_floats(FILE *f, size_t n, float center, float scale, uint64_t *rng)
{
    float buf[4096];
    while (n > 0) {
        size_t k = n < 4096 ? n : 4096;
        for (size_t i = 0; i < k; i++)
            buf[i] = center + scale * uniform(rng);
        if (fwrite(buf, sizeof(float), k, f) != k)
            return -1;
        n -= k;
    }
    return 0;
}

int tl_write_random_model(const char *path, const tl_random_shape *s, uint64_t seed,
                          char *err, size_t cap)
{
    if (s->dim <= 0 || s->n_heads <= 0 || s->dim % s->n_heads || s->n_kv_heads <= 0 ||
        s->n_heads % s->n_kv_heads || s->vocab_size <= 0 || s->n_layers <= 0 ||
        s->hidden_dim <= 0 || s->seq_len <= 0) {
        snprintf(err, cap, "invalid shape");
        return -1;
    }
    FILE *f = fopen(path, "wb");
    if (!f) {
        snprintf(err, cap, "%s: %s", path, strerror(errno));
        return -1;
    }
    int32_t header[7] = {s->dim, s->hidden_dim, s->n_layers, s->n_heads, s->n_kv_heads,
                         s->separate_classifier ? -s->vocab_size : s->vocab_size, s->seq_len};
    uint64_t rng = seed ? seed : 0x9E3779B97F4A7C15ULL;
    size_t dim = (size_t)s->dim, hid = (size_t)s->hidden_dim, L = (size_t)s->n_layers;
    size_t kv_dim = dim * (size_t)s->n_kv_heads / (size_t)s->n_heads;
    size_t head = dim / (size_t)s->n_heads;
    float in_dim = 1.0f / sqrtf((float)dim), in_hid = 1.0f / sqrtf((float)hid);
    int bad = fwrite(header, sizeof header, 1, f) != 1;
    bad = bad || write_floats(f, (size_t)s->vocab_size * dim, 0.0f, 1.0f, &rng); /* embedding */
    bad = bad || write_floats(f, L * dim, 1.0f, 0.1f, &rng);                    /* rms_att */
    bad = bad || write_floats(f, L * dim * dim, 0.0f, in_dim, &rng);            /* wq */
    bad = bad || write_floats(f, L * kv_dim * dim, 0.0f, in_dim, &rng);         /* wk */
    bad = bad || write_floats(f, L * kv_dim * dim, 0.0f, in_dim, &rng);         /* wv */
    bad = bad || write_floats(f, L * dim * dim, 0.0f, in_dim, &rng);            /* wo */
    bad = bad || write_floats(f, L * dim, 1.0f, 0.1f, &rng);                    /* rms_ffn */
    bad = bad || write_floats(f, L * hid * dim, 0.0f, in_dim, &rng);            /* w1 */
    bad = bad || write_floats(f, L * dim * hid, 0.0f, in_hid, &rng);            /* w2 */
    bad = bad || write_floats(f, L * hid * dim, 0.0f, in_dim, &rng);            /* w3 */
    bad = bad || write_floats(f, dim, 1.0f, 0.1f, &rng);                        /* rms_final */
    bad = bad || write_floats(f, (size_t)s->seq_len * head, 0.0f, 0.0f, &rng);  /* legacy RoPE */
    if (s->separate_classifier)
        bad = bad || write_floats(f, (size_t)s->vocab_size * dim, 0.0f, in_dim, &rng);
    if (fclose(f) != 0)
        bad = 1;
    if (bad) {
        snprintf(err, cap, "%s: write failed", path);
        return -1;
    }
    return 0;
}

/* Common English pieces, each buildable from two earlier pieces or chars. */
static const char *const merges[] = {
    " t", "he", " a", "in", " s", " w", "er", "on", " the", "re", "an", "at", " o", "nd",
    "en", " b", "ou", "ed", " h", "is", "it", " c", " f", "ing", " m", "or", "es", " p",
    " d", "ar", "as", "ll", " to", " and", " of", "le", " in", "al", " l", "ic", "ve",
    " n", "ur", "om", "ion", " th", " he", "ent", " e", " re", "ro", " be", "st", " is",
    " I", " T", "ly", " that", "ad", "ct", " g", "ay", " it", " S", "us", "id", "ot",
    "ut", " A", "ce", "im", " on", " y", "ow", " you", "ch", "ver", "ith", " with",
    "ere", " for", " was", "ould", " her", " she", " his", " not", " had", " as", "ir",
    "ter", "ation", "Th", " The", "ss", " we", "ain", "ight", ".\n", ", ", "\n\n",
};

static int put_piece(FILE *f, float score, const char *s, int len)
{
    int32_t n = len;
    return fwrite(&score, 4, 1, f) == 1 && fwrite(&n, 4, 1, f) == 1 &&
           (len == 0 || fwrite(s, 1, (size_t)len, f) == (size_t)len) ? 0 : -1;
}

int tl_write_small_tokenizer(const char *path, int vocab_size, char *err, size_t cap)
{
    const int fixed = 3 + 256 + 95;
    if (vocab_size < fixed) {
        snprintf(err, cap, "vocab_size %d < %d", vocab_size, fixed);
        return -1;
    }
    FILE *f = fopen(path, "wb");
    if (!f) {
        snprintf(err, cap, "%s: %s", path, strerror(errno));
        return -1;
    }
    int32_t max_len = 16;
    int bad = fwrite(&max_len, 4, 1, f) != 1;
    bad = bad || put_piece(f, 0.0f, "<unk>", 5);
    bad = bad || put_piece(f, 0.0f, "\n<s>\n", 5);
    bad = bad || put_piece(f, 0.0f, "\n</s>\n", 6);
    for (int b = 0; b < 256; b++) {
        char s[8];
        snprintf(s, sizeof s, "<0x%02X>", b);
        bad = bad || put_piece(f, 0.0f, s, 6);
    }
    for (int c = 0x20; c < 0x7f; c++) {
        char ch = (char)c;
        bad = bad || put_piece(f, -1e6f, &ch, 1);
    }
    int n = fixed;
    int n_merges = (int)(sizeof merges / sizeof *merges);
    for (int i = 0; i < n_merges && n < vocab_size; i++, n++)
        bad = bad || put_piece(f, (float)-i, merges[i], (int)strlen(merges[i]));
    for (int i = 0; n < vocab_size; i++, n++) {
        char s[32];
        int len = snprintf(s, sizeof s, "<extra_%d>", i);
        bad = bad || put_piece(f, -1e9f, s, len);
    }
    if (fclose(f) != 0)
        bad = 1;
    if (bad) {
        snprintf(err, cap, "%s: write failed", path);
        return -1;
    }
    return 0;
}
