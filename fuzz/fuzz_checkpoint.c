/* Fuzz target: the llama2.c checkpoint loader on an in-memory file.
 *
 * Input: a control byte, then a 28-byte header, then weight bytes. The file
 * handed to tl_checkpoint_from_memory() (what tl_checkpoint_open() runs on
 * the mapping, and what create() runs on the embedded default) is the input
 * as it is, and then — when the header's layout comes to at most 1 MiB — a
 * file of exactly the size the header implies (plus or minus a few bytes,
 * from the control byte), filled with the input's weight bytes repeated, so
 * that acceptance and the header checks are reached, not only size refusals. Then
 * tl_model_init(), as create() does.
 *
 * Asserts: the loader accepts exactly the files this file's own reading of
 * the format (checkpoint.h) accepts; an accepted config has positive fields,
 * n_heads dividing dim, n_kv_heads dividing n_heads and an even head size;
 * every weight array lies inside the file, after the header, in file order,
 * 4-byte aligned; refusals name the file. */
#include <stdbool.h>
#include <string.h>

#include "checkpoint.h"
#include "fuzz.h"
#include "model.h"

#define LABEL "fuzz.bin"
#define MAX_BUILT (1u << 20)

/* The byte size the header's fields imply by the layout alone (0 when a
 * field is not in 1..2^20); *valid says whether the heads are consistent. */
static uint64_t reference_size(const int32_t h[7], bool *valid)
{
    *valid = false;
    int64_t v[7];
    for (int i = 0; i < 7; i++) {
        v[i] = h[i];
        if (i == 5 && v[i] < 0)
            v[i] = -v[i];
        if (v[i] <= 0 || v[i] > (1 << 20))
            return 0;
    }
    uint64_t dim = (uint64_t)v[0], hid = (uint64_t)v[1], L = (uint64_t)v[2];
    uint64_t heads = (uint64_t)v[3], kv = (uint64_t)v[4], vocab = (uint64_t)v[5];
    uint64_t seq = (uint64_t)v[6];
    *valid = !(dim % heads || kv > heads || heads % kv || (dim / heads) % 2);
    uint64_t kv_dim = dim * kv / heads, head = dim / heads;
    uint64_t per_layer = dim /* rms_att */ + 2 * dim * dim /* wq wo */ + 2 * kv_dim * dim +
                         dim /* rms_ffn */ + 3 * hid * dim;
    uint64_t floats = vocab * dim + L * per_layer + dim + seq * head +
                      (h[5] < 0 ? vocab * dim : 0);
    return 28 + 4 * floats;
}

static void check_inside(const tl_checkpoint *ck, const void *p, uint64_t n_floats,
                         const void **prev_end, const char *what)
{
    const unsigned char *b = p, *file = ck->bytes;
    FUZZ_CHECK(b >= file + 28 && b + 4 * n_floats <= file + ck->size,
               "%s [%td, +%llu floats) outside the %zu-byte file", what, b - file,
               (unsigned long long)n_floats, ck->size);
    FUZZ_CHECK(((uintptr_t)b - (uintptr_t)file) % 4 == 0, "%s misaligned", what);
    if (*prev_end)
        FUZZ_CHECK(b >= (const unsigned char *)*prev_end, "%s overlaps the array before it", what);
    *prev_end = b + 4 * n_floats;
}

static void check_matrix(const tl_checkpoint *ck, const tl_matrix *m, int rows, int cols,
                         const void **prev_end, const char *what)
{
    FUZZ_CHECK(m->type == TL_DTYPE_F32 && m->rows == rows && m->cols == cols,
               "%s is %dx%d of type %d, expected %dx%d fp32", what, m->rows, m->cols, (int)m->type,
               rows, cols);
    check_inside(ck, m->data, (uint64_t)rows * (uint64_t)cols, prev_end, what);
}

/* llama2.c order: each kind of array for every layer, then the next kind. */
static void check_accepted(const tl_checkpoint *ck)
{
    const tl_config *c = &ck->cfg;
    FUZZ_CHECK(c->dim > 0 && c->hidden_dim > 0 && c->n_layers > 0 && c->n_heads > 0 &&
                   c->n_kv_heads > 0 && c->vocab_size > 0 && c->seq_len > 0,
               "non-positive field");
    FUZZ_CHECK(c->dim % c->n_heads == 0 && c->n_heads % c->n_kv_heads == 0 &&
                   (c->dim / c->n_heads) % 2 == 0, "inconsistent heads");
    int D = c->dim, H = c->hidden_dim, KV = c->dim / c->n_heads * c->n_kv_heads;
    const tl_weights *w = &ck->w;
    const void *end = NULL;
    check_matrix(ck, &w->token_embedding, c->vocab_size, D, &end, "token_embedding");
#define EACH_LAYER(stmt) for (int l = 0; l < c->n_layers; l++) { const tl_layer_weights *L = &w->layers[l]; stmt; }
    EACH_LAYER(check_inside(ck, L->rms_att, (uint64_t)D, &end, "rms_att"))
    EACH_LAYER(check_matrix(ck, &L->wq, D, D, &end, "wq"))
    EACH_LAYER(check_matrix(ck, &L->wk, KV, D, &end, "wk"))
    EACH_LAYER(check_matrix(ck, &L->wv, KV, D, &end, "wv"))
    EACH_LAYER(check_matrix(ck, &L->wo, D, D, &end, "wo"))
    EACH_LAYER(check_inside(ck, L->rms_ffn, (uint64_t)D, &end, "rms_ffn"))
    EACH_LAYER(check_matrix(ck, &L->w1, H, D, &end, "w1"))
    EACH_LAYER(check_matrix(ck, &L->w2, D, H, &end, "w2"))
    EACH_LAYER(check_matrix(ck, &L->w3, H, D, &end, "w3"))
#undef EACH_LAYER
    check_inside(ck, w->rms_final, (uint64_t)D, &end, "rms_final");
    if (c->shared_classifier) {
        FUZZ_CHECK(w->wcls.data == w->token_embedding.data, "shared classifier is not the embedding");
    } else {
        check_matrix(ck, &w->wcls, c->vocab_size, D, &end, "wcls");
        FUZZ_CHECK((const unsigned char *)end == ck->bytes + ck->size, "wcls does not end the file");
    }
}

static void load(const unsigned char *file, size_t size, uint64_t expect, tl_dtype quantize)
{
    tl_checkpoint ck;
    char err[1024] = "";
    ilab_status st = tl_checkpoint_from_memory(file, size, LABEL, &ck, err, sizeof err);
    FUZZ_CHECK(st == ILAB_OK || st == ILAB_INVALID_ARGUMENT, "status %s", ilab_status_name(st));
    FUZZ_CHECK((st == ILAB_OK) == (expect != 0 && expect == size),
               "loader %s a %zu-byte file; the reference expects %llu bytes (%s)",
               st == ILAB_OK ? "accepted" : "refused", size, (unsigned long long)expect, err);
    if (st != ILAB_OK) {
        FUZZ_CHECK(strstr(err, LABEL) != NULL, "refusal '%s' does not name the file", err);
        return;
    }
    check_accepted(&ck);
    tl_model m;
    char why[512];
    if (tl_model_init(&m, &ck, quantize, why, sizeof why) == ILAB_OK) {
        FUZZ_CHECK(m.head_size * m.cfg.n_heads == m.cfg.dim, "head size");
        FUZZ_CHECK(m.kv_dim == m.head_size * m.cfg.n_kv_heads, "kv_dim");
        tl_model_close(&m);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t ctl = data[0];
    const uint8_t *in = data + 1;
    size_t n = size - 1;

    int32_t h[7] = {0};
    if (n >= sizeof h)
        memcpy(h, in, sizeof h);
    bool valid = false;
    uint64_t implied = n >= sizeof h ? reference_size(h, &valid) : 0;
    uint64_t expect = valid ? implied : 0;

    /* The input as a file: a copy, so ASan sees its exact end. */
    unsigned char *raw = malloc(n ? n : 1);
    if (!raw)
        return 0;
    memcpy(raw, in, n);
    tl_dtype quantize = (ctl & 0x20) ? TL_DTYPE_Q8_0 : TL_DTYPE_F32;
    load(raw, n, expect, quantize);
    free(raw);

    /* A file of the implied size (also when the heads are inconsistent, so
     * that those checks are what refuses it), give or take a few bytes. */
    if (!implied || implied > MAX_BUILT)
        return 0;
    int64_t delta = (ctl & 0x08) ? ((int64_t)(ctl & 7) - 4) * ((ctl & 0x10) ? 4 : 1) : 0;
    int64_t want = (int64_t)implied + delta;
    if (want < 0)
        return 0;
    size_t built_size = (size_t)want;
    unsigned char *built = malloc(built_size ? built_size : 1);
    if (!built)
        return 0;
    size_t tail = n - sizeof h;
    for (size_t i = 0; i < built_size; i++)
        built[i] = i < sizeof h ? in[i] : tail ? in[sizeof h + (i - sizeof h) % tail] : 0;
    load(built, built_size, expect, quantize);
    free(built);
    return 0;
}
