/* Fuzz target: torchlike's GGUF reader and the GGUF model and vocabulary
 * loaders — what create() runs on a model file that starts with "GGUF".
 *
 * Input: the file. Calls tl_gguf_parse() on it, then
 * tl_checkpoint_from_gguf() (what tl_checkpoint_open() runs on the mapping)
 * and, on a model it accepts, tl_tokenizer_from_gguf() and tl_model_init()
 * (quantising to Q8_0 when the last byte is odd), as create() does. Asserts:
 *  - refusals name the file;
 *  - in an accepted index every key, string, array and tensor lies inside
 *    the file; keys and tensor names are unique and found by lookup; each
 *    tensor has 1..4 dimensions, at most 2^40 elements counted without
 *    overflow, and exactly the bytes its type and shape need (this file's
 *    own sizes: F32 4, F16 2, Q8_0 34 per 32 values), at an offset aligned
 *    to general.alignment (a power of two), inside the file; the typed
 *    getters agree with the value types;
 *  - an accepted model has a consistent config and every matrix with the
 *    config's shape and its rows inside the file; an accepted vocabulary has
 *    the model's size and BOS/EOS/unk in range, and encoding the file's
 *    bytes with it gives ids in range. */
#include <stdbool.h>
#include <string.h>

#include "checkpoint.h"
#include "fuzz.h"
#include "gguf.h"
#include "model.h"
#include "tokenizer.h"

#define LABEL "fuzz.gguf"

typedef struct file {
    const unsigned char *p;
    size_t n;
} file;

static bool inside(const file *f, const void *p, uint64_t len)
{
    const unsigned char *b = p;
    return b >= f->p && b <= f->p + f->n && len <= (uint64_t)(f->p + f->n - b);
}

/* ggml's block layouts, written here from ggml's type table (values per
 * block, bytes per block) rather than taken from the reader under test:
 * the types torchlike runs. 0 for every other type id. */
static uint64_t type_bytes(uint32_t type, uint64_t ne0, uint64_t rows)
{
    static const struct { uint32_t id, values, bytes; } layout[] = {
        {0, 1, 4},     /* F32 */  {1, 1, 2},     /* F16 */  {30, 1, 2},    /* BF16 */
        {2, 32, 18},   /* Q4_0 */ {3, 32, 20},   /* Q4_1 */ {6, 32, 22},   /* Q5_0 */
        {7, 32, 24},   /* Q5_1 */ {8, 32, 34},   /* Q8_0 */ {10, 256, 84}, /* Q2_K */
        {11, 256, 110}, /* Q3_K */ {12, 256, 144}, /* Q4_K */ {13, 256, 176}, /* Q5_K */
        {14, 256, 210}, /* Q6_K */
    };
    for (size_t i = 0; i < sizeof layout / sizeof *layout; i++)
        if (layout[i].id == type)
            return ne0 % layout[i].values ? 0 : ne0 / layout[i].values * layout[i].bytes * rows;
    return 0;
}

static void check_kv(const file *f, const tl_gguf *g, const tl_gguf_kv *kv)
{
    FUZZ_CHECK(inside(f, kv->key.s, kv->key.len), "key outside the file");
    FUZZ_CHECK(kv->type <= TL_GGUF_FLOAT64, "value type %u", kv->type);
    FUZZ_CHECK(inside(f, kv->value, 1) || kv->type == TL_GGUF_ARRAY, "value outside the file");
    char key[256];
    if (kv->key.len >= sizeof key || memchr(kv->key.s, 0, kv->key.len))
        return;
    memcpy(key, kv->key.s, kv->key.len);
    key[kv->key.len] = '\0';
    FUZZ_CHECK(tl_gguf_find(g, key) == kv, "lookup of key '%s' finds another entry", key);
    char err[512];
    int64_t i;
    float x;
    tl_gguf_string s;
    bool is_int = kv->type <= TL_GGUF_INT32 && kv->type != TL_GGUF_FLOAT32 && kv->type != TL_GGUF_BOOL;
    is_int = is_int || kv->type == TL_GGUF_INT64 || kv->type == TL_GGUF_UINT64;
    int ri = tl_gguf_get_int(g, key, LABEL, &i, err, sizeof err);
    FUZZ_CHECK(ri == 0 ? is_int : (!is_int || kv->type == TL_GGUF_UINT64), "get_int on type %u",
               kv->type);
    int rf = tl_gguf_get_f32(g, key, LABEL, &x, err, sizeof err);
    FUZZ_CHECK((rf == 0) == (kv->type == TL_GGUF_FLOAT32 || kv->type == TL_GGUF_FLOAT64),
               "get_f32 on type %u", kv->type);
    int rs = tl_gguf_get_string(g, key, LABEL, &s, err, sizeof err);
    FUZZ_CHECK((rs == 0) == (kv->type == TL_GGUF_STRING), "get_string on type %u", kv->type);
    if (rs == 0)
        FUZZ_CHECK(inside(f, s.s, s.len), "string value outside the file");
    if (kv->type == TL_GGUF_ARRAY && kv->elem_type == TL_GGUF_STRING) {
        const unsigned char *p = kv->elems;
        for (uint64_t k = 0; k < kv->count; k++) {
            FUZZ_CHECK(inside(f, p, 8), "array string %llu outside the file", (unsigned long long)k);
            tl_gguf_string e = tl_gguf_next_string(&p);
            FUZZ_CHECK(inside(f, e.s, e.len), "array string %llu outside", (unsigned long long)k);
        }
    }
}

static void check_tensor(const file *f, const tl_gguf *g, const tl_gguf_tensor *t)
{
    FUZZ_CHECK(inside(f, t->name.s, t->name.len), "tensor name outside the file");
    FUZZ_CHECK(t->n_dims >= 1 && t->n_dims <= TL_GGUF_MAX_DIMS, "n_dims %u", t->n_dims);
    unsigned __int128 elems = 1;
    for (uint32_t d = 0; d < TL_GGUF_MAX_DIMS; d++) {
        FUZZ_CHECK(t->ne[d] >= 1 && (d < t->n_dims || t->ne[d] == 1), "ne[%u]", d);
        elems *= t->ne[d];
    }
    FUZZ_CHECK(elems <= (unsigned __int128)1 << 40, "tensor of more than 2^40 elements accepted");
    uint64_t want = type_bytes(t->type, t->ne[0], (uint64_t)(elems / t->ne[0]));
    FUZZ_CHECK(want && t->bytes == want, "tensor type %u, bytes %llu; its type and shape need %llu",
               t->type, (unsigned long long)t->bytes, (unsigned long long)want);
    FUZZ_CHECK(t->offset % g->alignment == 0, "offset not aligned");
    FUZZ_CHECK((const unsigned char *)t->data == f->p + g->data_offset + t->offset, "data address");
    FUZZ_CHECK(inside(f, t->data, t->bytes), "tensor data outside the file");
    char name[256];
    if (t->name.len < sizeof name && !memchr(t->name.s, 0, t->name.len)) {
        memcpy(name, t->name.s, t->name.len);
        name[t->name.len] = '\0';
        FUZZ_CHECK(tl_gguf_find_tensor(g, name) == t, "lookup of tensor '%s'", name);
    }
}

static void check_matrix(const file *f, const tl_matrix *m, int rows, int cols, const char *what)
{
    FUZZ_CHECK(m->rows == rows && m->cols == cols, "%s is %dx%d, the config says %dx%d", what,
               m->rows, m->cols, rows, cols);
    size_t row = tl_dtype_row_bytes(m->type, m->cols);
    FUZZ_CHECK(row > 0 && inside(f, m->data, (uint64_t)row * (uint64_t)rows), "%s outside the file",
               what);
}

static void check_norm(const file *f, const tl_checkpoint *ck, const float *v, int dim,
                       const char *what)
{
    const float *conv = ck->converted;
    size_t n_conv = ck->converted_floats;
    bool in_conv = conv && v >= conv && v + dim <= conv + n_conv;
    FUZZ_CHECK(in_conv || inside(f, v, 4 * (uint64_t)dim), "%s outside the file", what);
}

static void check_model(const file *f, tl_checkpoint *ck)
{
    const tl_config *c = &ck->cfg;
    FUZZ_CHECK(c->dim > 0 && c->n_heads > 0 && c->n_kv_heads > 0 && c->dim % c->n_heads == 0 &&
                   c->n_heads % c->n_kv_heads == 0 && c->head_size > 0 && c->n_rot % 2 == 0 &&
                   c->n_rot <= c->head_size && c->hidden_dim > 0 && c->n_layers > 0 &&
                   c->vocab_size > 0 && c->seq_len > 0,
               "inconsistent config");
    int D = c->dim, H = c->hidden_dim, Q = tl_config_q_dim(c), KV = tl_config_kv_dim(c);
    int V = c->vocab_size;
    check_matrix(f, &ck->w.token_embedding, V, D, "token_embd");
    for (int l = 0; l < c->n_layers; l++) {
        const tl_layer_weights *L = &ck->w.layers[l];
        check_norm(f, ck, L->rms_att, D, "attn_norm");
        check_norm(f, ck, L->rms_ffn, D, "ffn_norm");
        check_matrix(f, &L->wq, Q, D, "attn_q");
        check_matrix(f, &L->wk, KV, D, "attn_k");
        check_matrix(f, &L->wv, KV, D, "attn_v");
        check_matrix(f, &L->wo, D, Q, "attn_output");
        check_matrix(f, &L->w1, H, D, "ffn_gate");
        check_matrix(f, &L->w2, D, H, "ffn_down");
        check_matrix(f, &L->w3, H, D, "ffn_up");
    }
    check_norm(f, ck, ck->w.rms_final, D, "output_norm");
    check_matrix(f, &ck->w.wcls, V, D, "output");

    tl_tokenizer tok;
    char err[1024] = "";
    ilab_status st = tl_tokenizer_from_gguf(ck->gguf, LABEL, V, &tok, err, sizeof err);
    FUZZ_CHECK(st == ILAB_OK || st == ILAB_INVALID_ARGUMENT, "vocabulary status %s",
               ilab_status_name(st));
    if (st == ILAB_OK) {
        FUZZ_CHECK(tok.vocab_size == V, "vocabulary of %d for a model of %d", tok.vocab_size, V);
        FUZZ_CHECK(tok.bos_id >= 0 && tok.bos_id < V && tok.eos_id >= 0 && tok.eos_id < V &&
                       tok.unk_id >= 0 && tok.unk_id < V, "special ids out of range");
        size_t len = f->n < 256 ? f->n : 256, n = 0;
        size_t cap = 3 * len + 5; /* three ids a byte at most, prefix, BOS, EOS */
        int32_t *ids = malloc(cap * sizeof *ids);
        FUZZ_CHECK(ids, "oom");
        FUZZ_CHECK(tl_tokenizer_encode(&tok, (const char *)f->p, len, 1, 1, ids, cap, &n) ==
                       ILAB_OK, "encode");
        FUZZ_CHECK(n <= cap, "%zu ids for %zu bytes", n, len);
        for (size_t i = 0; i < n; i++)
            FUZZ_CHECK(ids[i] >= 0 && ids[i] < V, "id %d out of range", ids[i]);
        free(ids);
        tl_tokenizer_free(&tok);
    } else {
        FUZZ_CHECK(strstr(err, LABEL) != NULL, "vocabulary refusal '%s' does not name the file", err);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    unsigned char *copy = malloc(size ? size : 1); /* exact size, so ASan sees the end */
    FUZZ_CHECK(copy, "oom");
    memcpy(copy, data, size);
    file f = {copy, size};

    tl_gguf *g = NULL;
    char err[1024] = "";
    ilab_status st = tl_gguf_parse(copy, size, LABEL, &g, err, sizeof err);
    FUZZ_CHECK(st == ILAB_OK || st == ILAB_INVALID_ARGUMENT, "parse status %s", ilab_status_name(st));
    if (st != ILAB_OK) {
        FUZZ_CHECK(!g && strstr(err, LABEL), "refusal '%s' does not name the file", err);
    } else {
        FUZZ_CHECK(g->version == 3, "version %u", g->version);
        FUZZ_CHECK(g->alignment && !(g->alignment & (g->alignment - 1)), "alignment %llu",
                   (unsigned long long)g->alignment);
        FUZZ_CHECK(g->n_tensors == 0 || g->data_offset <= size, "data offset past the end");
        for (uint64_t i = 0; i < g->n_kv; i++) {
            check_kv(&f, g, &g->kv[i]);
            for (uint64_t j = 0; j < i; j++)
                FUZZ_CHECK(g->kv[j].key.len != g->kv[i].key.len ||
                               memcmp(g->kv[j].key.s, g->kv[i].key.s, g->kv[i].key.len),
                           "key %llu twice", (unsigned long long)i);
        }
        for (uint64_t i = 0; i < g->n_tensors; i++)
            check_tensor(&f, g, &g->tensors[i]);
        tl_gguf_free(g);
    }

    tl_checkpoint ck;
    st = tl_checkpoint_from_gguf(copy, size, LABEL, &ck, err, sizeof err);
    FUZZ_CHECK(st == ILAB_OK || st == ILAB_INVALID_ARGUMENT, "model status %s", ilab_status_name(st));
    if (st == ILAB_OK) {
        check_model(&f, &ck);
        /* Quantising at load (config quantize: q8_0) reads every matrix. */
        tl_dtype q = (size && (copy[size - 1] & 1)) ? TL_DTYPE_Q8_0 : TL_DTYPE_F32;
        tl_model m;
        if (tl_model_init(&m, &ck, q, err, sizeof err) == ILAB_OK) /* takes ck over */
            tl_model_close(&m);
    } else {
        FUZZ_CHECK(strstr(err, LABEL) != NULL, "model refusal '%s' does not name the file", err);
    }
    free(copy);
    return 0;
}
