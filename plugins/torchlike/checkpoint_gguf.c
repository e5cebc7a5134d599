/* torchlike — a GGUF file of the llama architecture as a checkpoint: the
 * metadata keys and tensor names llama.cpp writes for llama models. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "gguf.h"
#include "tokenizer.h"

static int get_dim(const tl_gguf *g, const char *key, int64_t dflt, int32_t *out,
                   const char *label, char *err, size_t cap)
{
    int64_t v = dflt;
    if ((dflt < 0 || tl_gguf_find(g, key)) && tl_gguf_get_int(g, key, label, &v, err, cap) != 0)
        return -1;
    if (v < 1 || v > INT32_MAX) {
        snprintf(err, cap, "GGUF %s: metadata key %s is %" PRId64 "; it must be positive", label,
                 key, v);
        return -1;
    }
    *out = (int32_t)v;
    return 0;
}

/* A tensor with this name, of these dimensions (innermost first). */
static const tl_gguf_tensor *get_tensor(const tl_gguf *g, const char *name, uint64_t ne0,
                                        uint64_t ne1, int optional, const char *label, char *err,
                                        size_t cap)
{
    const tl_gguf_tensor *t = tl_gguf_find_tensor(g, name);
    if (!t) {
        if (!optional)
            snprintf(err, cap, "GGUF %s: tensor %s is missing", label, name);
        return NULL;
    }
    uint32_t want_dims = ne1 ? 2 : 1;
    if (t->n_dims != want_dims || t->ne[0] != ne0 || (ne1 && t->ne[1] != ne1)) {
        snprintf(err, cap, "GGUF %s: tensor %s has shape [%" PRIu64 ", %" PRIu64 "] (%u dims); "
                 "the metadata needs [%" PRIu64 ", %" PRIu64 "]", label, name, t->ne[0], t->ne[1],
                 t->n_dims, ne0, ne1 ? ne1 : 1);
        return NULL;
    }
    /* Loads of a float or a half from this address must be aligned. */
    size_t align = t->type == TL_DTYPE_F32 ? 4 : 2;
    if ((uintptr_t)t->data % align != 0) {
        snprintf(err, cap, "GGUF %s: tensor %s data is not %zu-byte aligned (general.alignment %s)",
                 label, name, align, "too small");
        return NULL;
    }
    return t;
}

static int get_matrix(const tl_gguf *g, const char *name, int rows, int cols, tl_matrix *m,
                      const char *label, char *err, size_t cap)
{
    const tl_gguf_tensor *t = get_tensor(g, name, (uint64_t)cols, (uint64_t)rows, 0, label, err, cap);
    if (!t)
        return -1;
    *m = (tl_matrix){(tl_dtype)t->type, t->data, rows, cols};
    return 0;
}

/* Norm vectors are read as fp32: an F16 one is widened into `conv` (room
 * for every norm of the model, filled in order at *used). */
static int get_norm(const tl_gguf *g, const char *name, int dim, float *conv, size_t *used,
                    const float **out, const char *label, char *err, size_t cap)
{
    const tl_gguf_tensor *t = get_tensor(g, name, (uint64_t)dim, 0, 0, label, err, cap);
    if (!t)
        return -1;
    if (t->type == TL_DTYPE_F32) {
        *out = t->data;
        return 0;
    }
    if (t->type != TL_DTYPE_F16) {
        snprintf(err, cap, "GGUF %s: tensor %s has type %s; a norm must be F32 or F16", label, name,
                 tl_ggml_type_name(t->type));
        return -1;
    }
    float *dst = conv + *used;
    tl_matrix m = {TL_DTYPE_F16, t->data, 1, dim};
    tl_matrix_row_f32(&m, 0, dst);
    *used += (size_t)dim;
    *out = dst;
    return 0;
}

static int read_config(const tl_gguf *g, const char *label, tl_config *cfg, char *err, size_t cap)
{
    tl_gguf_string arch;
    if (tl_gguf_get_string(g, "general.architecture", label, &arch, err, cap) != 0)
        return -1;
    if (arch.len != 5 || memcmp(arch.s, "llama", 5) != 0) {
        snprintf(err, cap, "GGUF %s: general.architecture is \"%.*s\"; torchlike runs \"llama\"",
                 label, arch.len > 64 ? 64 : (int)arch.len, arch.s);
        return -1;
    }
    int32_t h[7];
    if (get_dim(g, "llama.embedding_length", -1, &h[0], label, err, cap) != 0 ||
        get_dim(g, "llama.feed_forward_length", -1, &h[1], label, err, cap) != 0 ||
        get_dim(g, "llama.block_count", -1, &h[2], label, err, cap) != 0 ||
        get_dim(g, "llama.attention.head_count", -1, &h[3], label, err, cap) != 0 ||
        get_dim(g, "llama.attention.head_count_kv", h[3], &h[4], label, err, cap) != 0 ||
        get_dim(g, "llama.context_length", -1, &h[6], label, err, cap) != 0)
        return -1;
    const tl_gguf_tensor *emb = tl_gguf_find_tensor(g, "token_embd.weight");
    if (!emb || emb->n_dims != 2 || emb->ne[1] > INT32_MAX) {
        snprintf(err, cap, "GGUF %s: tensor token_embd.weight is missing or not 2-D", label);
        return -1;
    }
    int shared = tl_gguf_find_tensor(g, "output.weight") == NULL;
    h[5] = shared ? (int32_t)emb->ne[1] : -(int32_t)emb->ne[1];
    if (tl_config_check(h, label, cfg, err, cap) != ILAB_OK)
        return -1;
    /* What torchlike computes: rotary embeddings over the whole head with
     * base 10000, RMSNorm epsilon 1e-5. Other values are refused, not
     * silently run differently. */
    int64_t rope_dims;
    if (tl_gguf_find(g, "llama.rope.dimension_count")) {
        if (tl_gguf_get_int(g, "llama.rope.dimension_count", label, &rope_dims, err, cap) != 0)
            return -1;
        if (rope_dims != cfg->dim / cfg->n_heads) {
            snprintf(err, cap, "GGUF %s: llama.rope.dimension_count is %" PRId64 "; torchlike "
                     "rotates the whole head (%d)", label, rope_dims, cfg->dim / cfg->n_heads);
            return -1;
        }
    }
    struct { const char *key; float want; } fixed[] = {
        {"llama.rope.freq_base", 10000.0f},
        {"llama.attention.layer_norm_rms_epsilon", 1e-5f},
    };
    for (int i = 0; i < 2; i++) {
        float v;
        if (!tl_gguf_find(g, fixed[i].key))
            continue;
        if (tl_gguf_get_f32(g, fixed[i].key, label, &v, err, cap) != 0)
            return -1;
        if (!(fabsf(v - fixed[i].want) <= 1e-6f * fixed[i].want)) {
            snprintf(err, cap, "GGUF %s: %s is %g; torchlike supports %g only", label, fixed[i].key,
                     (double)v, (double)fixed[i].want);
            return -1;
        }
    }
    return 0;
}

ilab_status tl_checkpoint_from_gguf(const void *bytes, size_t size, const char *label,
                                    tl_checkpoint *out, char *err, size_t cap)
{
    tl_checkpoint ck;
    memset(&ck, 0, sizeof ck);
    snprintf(ck.label, sizeof ck.label, "%s", label);
    ilab_status st = tl_gguf_parse(bytes, size, label, &ck.gguf, err, cap);
    if (st != ILAB_OK)
        return st;
    const tl_gguf *g = ck.gguf;
    st = ILAB_INVALID_ARGUMENT;
    if (read_config(g, label, &ck.cfg, err, cap) != 0)
        goto fail;
    const tl_config *c = &ck.cfg;
    int D = c->dim, H = c->hidden_dim, KV = c->dim * c->n_kv_heads / c->n_heads, V = c->vocab_size;
    /* The metadata alone must not size an allocation: the 2 * n_layers + 1
     * norms are tensors of dim values of at least 2 bytes each, all in the
     * file, so a file too small for them is refused before anything is
     * reserved for them. */
    if (((uint64_t)c->n_layers * 2 + 1) * (uint64_t)D * 2 > (uint64_t)size) {
        snprintf(err, cap, "GGUF %s: llama.block_count %d and llama.embedding_length %d need "
                 "%d norm tensors of %d values; the %zu-byte file cannot hold them", label,
                 c->n_layers, D, 2 * c->n_layers + 1, D, size);
        goto fail;
    }
    ck.w.layers = calloc((size_t)c->n_layers, sizeof *ck.w.layers);
    ck.converted = malloc(((size_t)c->n_layers * 2 + 1) * (size_t)D * sizeof(float));
    if (!ck.w.layers || !ck.converted) {
        snprintf(err, cap, "GGUF %s: out of memory", label);
        st = ILAB_OUT_OF_MEMORY;
        goto fail;
    }
    size_t used = 0;
    float *conv = ck.converted;
    if (get_matrix(g, "token_embd.weight", V, D, &ck.w.token_embedding, label, err, cap) != 0)
        goto fail;
    for (int l = 0; l < c->n_layers; l++) {
        tl_layer_weights *L = &ck.w.layers[l];
        char n[64];
#define NAME(suffix) (snprintf(n, sizeof n, "blk.%d." suffix, l), n)
        if (get_norm(g, NAME("attn_norm.weight"), D, conv, &used, &L->rms_att, label, err, cap) ||
            get_matrix(g, NAME("attn_q.weight"), D, D, &L->wq, label, err, cap) ||
            get_matrix(g, NAME("attn_k.weight"), KV, D, &L->wk, label, err, cap) ||
            get_matrix(g, NAME("attn_v.weight"), KV, D, &L->wv, label, err, cap) ||
            get_matrix(g, NAME("attn_output.weight"), D, D, &L->wo, label, err, cap) ||
            get_norm(g, NAME("ffn_norm.weight"), D, conv, &used, &L->rms_ffn, label, err, cap) ||
            get_matrix(g, NAME("ffn_gate.weight"), H, D, &L->w1, label, err, cap) ||
            get_matrix(g, NAME("ffn_down.weight"), D, H, &L->w2, label, err, cap) ||
            get_matrix(g, NAME("ffn_up.weight"), H, D, &L->w3, label, err, cap))
            goto fail;
#undef NAME
    }
    if (get_norm(g, "output_norm.weight", D, conv, &used, &ck.w.rms_final, label, err, cap) != 0)
        goto fail;
    if (c->shared_classifier)
        ck.w.wcls = ck.w.token_embedding;
    else if (get_matrix(g, "output.weight", V, D, &ck.w.wcls, label, err, cap) != 0)
        goto fail;
    ck.bytes = bytes;
    ck.size = size;
    *out = ck;
    return ILAB_OK;
fail:
    tl_checkpoint_close(&ck);
    return st;
}

/* SentencePiece writes a word boundary as U+2581; torchlike's pieces (like
 * llama2.c's tokenizer.bin) hold a plain space. */
static int to_spaces(tl_gguf_string s, char *out)
{
    int n = 0;
    for (uint64_t i = 0; i < s.len; i++) {
        if (i + 2 < s.len && (unsigned char)s.s[i] == 0xe2 && (unsigned char)s.s[i + 1] == 0x96 &&
            (unsigned char)s.s[i + 2] == 0x81) {
            out[n++] = ' ';
            i += 2;
        } else {
            out[n++] = s.s[i];
        }
    }
    return n;
}

static const tl_gguf_kv *get_array(const tl_gguf *g, const char *key, uint32_t elem_type,
                                   uint64_t count, const char *label, char *err, size_t cap)
{
    const tl_gguf_kv *kv = tl_gguf_find(g, key);
    if (!kv) {
        snprintf(err, cap, "GGUF %s: metadata key %s is missing", label, key);
        return NULL;
    }
    if (kv->type != TL_GGUF_ARRAY || kv->elem_type != elem_type || kv->count != count) {
        snprintf(err, cap, "GGUF %s: metadata key %s must be an array of %" PRIu64 " elements of "
                 "type %u (found type %u, element type %u, %" PRIu64 " elements)", label, key,
                 count, elem_type, kv->type, kv->elem_type, kv->count);
        return NULL;
    }
    return kv;
}

ilab_status tl_tokenizer_from_gguf(const struct tl_gguf *g, const char *label, int expected_vocab,
                                   tl_tokenizer *out, char *err, size_t cap)
{
    tl_gguf_string model;
    if (tl_gguf_get_string(g, "tokenizer.ggml.model", label, &model, err, cap) != 0)
        return ILAB_INVALID_ARGUMENT;
    if (model.len != 5 || memcmp(model.s, "llama", 5) != 0) {
        snprintf(err, cap, "GGUF %s: tokenizer.ggml.model is \"%.*s\"; torchlike reads the "
                 "SentencePiece \"llama\" vocabulary", label, model.len > 64 ? 64 : (int)model.len,
                 model.s);
        return ILAB_INVALID_ARGUMENT;
    }
    uint64_t n = (uint64_t)expected_vocab;
    const tl_gguf_kv *tokens = get_array(g, "tokenizer.ggml.tokens", TL_GGUF_STRING, n, label, err, cap);
    const tl_gguf_kv *scores = tokens ? get_array(g, "tokenizer.ggml.scores", TL_GGUF_FLOAT32, n,
                                                  label, err, cap) : NULL;
    if (!tokens || !scores)
        return ILAB_INVALID_ARGUMENT;
    static const char *const id_keys[3] = {"tokenizer.ggml.bos_token_id",
                                           "tokenizer.ggml.eos_token_id",
                                           "tokenizer.ggml.unknown_token_id"};
    int64_t ids[3] = {1, 2, 0};
    for (int k = 0; k < 3; k++) {
        if (tl_gguf_find(g, id_keys[k]) &&
            tl_gguf_get_int(g, id_keys[k], label, &ids[k], err, cap) != 0)
            return ILAB_INVALID_ARGUMENT;
        if (ids[k] < 0 || ids[k] >= expected_vocab) {
            snprintf(err, cap, "GGUF %s: %s is %" PRId64 ", outside the %d-token vocabulary", label,
                     id_keys[k], ids[k], expected_vocab);
            return ILAB_INVALID_ARGUMENT;
        }
    }
    char **pieces = calloc((size_t)n, sizeof *pieces);
    int *lens = calloc((size_t)n, sizeof *lens);
    float *sc = malloc((size_t)n * sizeof *sc);
    ilab_status st = ILAB_OK;
    if (!pieces || !lens || !sc)
        st = ILAB_OUT_OF_MEMORY;
    const unsigned char *p = tokens->elems;
    for (uint64_t i = 0; st == ILAB_OK && i < n; i++) {
        tl_gguf_string s = tl_gguf_next_string(&p);
        if (s.len > 65536) {
            snprintf(err, cap, "GGUF %s: tokenizer.ggml.tokens[%" PRIu64 "] is %" PRIu64 " bytes; "
                     "at most 65536", label, i, s.len);
            st = ILAB_INVALID_ARGUMENT;
            break;
        }
        pieces[i] = malloc((size_t)s.len + 1);
        if (!pieces[i]) {
            st = ILAB_OUT_OF_MEMORY;
            break;
        }
        lens[i] = to_spaces(s, pieces[i]);
        memcpy(&sc[i], scores->elems + 4 * i, 4);
    }
    if (st == ILAB_OK)
        st = tl_tokenizer_from_vocab((int)n, (const char *const *)pieces, lens, sc, (int)ids[0],
                                     (int)ids[1], (int)ids[2], label, out, err, cap);
    else if (st == ILAB_OUT_OF_MEMORY)
        snprintf(err, cap, "GGUF %s: out of memory for the vocabulary", label);
    for (uint64_t i = 0; pieces && i < n; i++)
        free(pieces[i]);
    free(pieces);
    free(lens);
    free(sc);
    return st;
}
