/* torchlike — a GGUF file as a checkpoint: the metadata keys and tensor
 * names llama.cpp writes for models of the llama, qwen2, qwen3 and phi3
 * architectures (its llama-arch.cpp and src/models/<arch>.cpp). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "gguf.h"
#include "tokenizer.h"

/* What differs between the architectures at load: the family, and how its
 * rotation pairs features (llama.cpp's llama_model_rope_type). */
static const struct arch_info {
    const char *name;
    tl_arch arch;
    tl_rope_mode rope_mode;
} arches[] = {
    {"llama", TL_ARCH_LLAMA, TL_ROPE_NORM},
    {"qwen2", TL_ARCH_QWEN2, TL_ROPE_NEOX},
    {"qwen3", TL_ARCH_QWEN3, TL_ROPE_NEOX},
    {"phi3", TL_ARCH_PHI3, TL_ROPE_NEOX},
};
#define N_ARCHES (sizeof arches / sizeof *arches)

/* One file being read: where errors go, which tensors were taken. */
typedef struct loader {
    const tl_gguf *g;
    const char *label;
    const char *arch; /* general.architecture, the prefix of the hyper-parameter keys */
    char *err;
    size_t cap;
    unsigned char *used; /* [n_tensors]: taken by the model */
    float *conv;         /* room for every non-F32 vector, widened */
    size_t conv_used;
} loader;

static const char *key(const loader *ld, char *buf, size_t cap, const char *suffix)
{
    snprintf(buf, cap, "%s.%s", ld->arch, suffix);
    return buf;
}

/* A positive integer `<arch>.suffix`; dflt < 0 makes the key required. */
static int get_dim(loader *ld, const char *suffix, int64_t dflt, int32_t *out)
{
    char k[128];
    int64_t v = dflt;
    key(ld, k, sizeof k, suffix);
    if ((dflt < 0 || tl_gguf_find(ld->g, k)) &&
        tl_gguf_get_int(ld->g, k, ld->label, &v, ld->err, ld->cap) != 0)
        return -1;
    if (v < 1 || v > INT32_MAX) {
        snprintf(ld->err, ld->cap, "GGUF %s: metadata key %s is %" PRId64 "; it must be positive",
                 ld->label, k, v);
        return -1;
    }
    *out = (int32_t)v;
    return 0;
}

/* A float `<arch>.suffix`, or dflt when absent. */
static int get_float(loader *ld, const char *suffix, float dflt, int required, float *out)
{
    char k[128];
    key(ld, k, sizeof k, suffix);
    *out = dflt;
    if (!required && !tl_gguf_find(ld->g, k))
        return 0;
    if (tl_gguf_get_f32(ld->g, k, ld->label, out, ld->err, ld->cap) != 0)
        return -1;
    if (!isfinite(*out)) {
        snprintf(ld->err, ld->cap, "GGUF %s: metadata key %s is not a finite number", ld->label, k);
        return -1;
    }
    return 0;
}

static int find_arch(loader *ld, tl_config *cfg)
{
    tl_gguf_string arch;
    if (tl_gguf_get_string(ld->g, "general.architecture", ld->label, &arch, ld->err, ld->cap) != 0)
        return -1;
    for (size_t i = 0; i < N_ARCHES; i++)
        if (arch.len == strlen(arches[i].name) && memcmp(arch.s, arches[i].name, arch.len) == 0) {
            ld->arch = arches[i].name;
            cfg->arch = arches[i].arch;
            cfg->rope_mode = arches[i].rope_mode;
            return 0;
        }
    char known[128] = "";
    for (size_t i = 0; i < N_ARCHES; i++)
        snprintf(known + strlen(known), sizeof known - strlen(known), "%s\"%s\"", i ? ", " : "",
                 arches[i].name);
    snprintf(ld->err, ld->cap, "GGUF %s: general.architecture is \"%.*s\"; torchlike runs %s",
             ld->label, arch.len > 64 ? 64 : (int)arch.len, arch.s, known);
    return -1;
}

/* Rotary scaling as llama.cpp reads it: rope.scaling.type (default
 * "linear") and rope.scaling.factor (or the older rope.scale_linear; 0 or
 * absent = 1). Only none and linear are computed; the others (yarn,
 * longrope) are refused rather than run unscaled. */
static int read_rope_scaling(loader *ld, tl_config *cfg)
{
    char k[128];
    tl_gguf_string type = {"linear", 6};
    if (tl_gguf_find(ld->g, key(ld, k, sizeof k, "rope.scaling.type")) &&
        tl_gguf_get_string(ld->g, k, ld->label, &type, ld->err, ld->cap) != 0)
        return -1;
    int none = type.len == 4 && memcmp(type.s, "none", 4) == 0;
    if (!none && !(type.len == 6 && memcmp(type.s, "linear", 6) == 0)) {
        snprintf(ld->err, ld->cap, "GGUF %s: %s is \"%.*s\"; torchlike implements \"none\" and "
                 "\"linear\" rotary scaling only", ld->label, k, type.len > 32 ? 32 : (int)type.len,
                 type.s);
        return -1;
    }
    float factor = 0.0f, attn = 1.0f;
    if (get_float(ld, "rope.scaling.factor", 0.0f, 0, &factor) != 0)
        return -1;
    if (factor == 0.0f && get_float(ld, "rope.scale_linear", 0.0f, 0, &factor) != 0)
        return -1;
    if (factor < 0.0f) {
        snprintf(ld->err, ld->cap, "GGUF %s: %s.rope.scaling.factor is %g; it must be positive",
                 ld->label, ld->arch, (double)factor);
        return -1;
    }
    cfg->rope_freq_scale = none || factor == 0.0f ? 1.0f : 1.0f / factor;
    if (get_float(ld, "rope.scaling.attn_factor", 1.0f, 0, &attn) != 0)
        return -1;
    if (attn != 1.0f) {
        snprintf(ld->err, ld->cap, "GGUF %s: %s.rope.scaling.attn_factor is %g; torchlike "
                 "implements 1 only", ld->label, ld->arch, (double)attn);
        return -1;
    }
    return 0;
}

/* Hyper-parameters from the `<arch>.*` keys, with llama.cpp's defaults
 * (llama_model_base::load_hparams) where a key may be absent: head_count_kv
 * = head_count, key_length = embedding_length / head_count,
 * rope.dimension_count = key_length, rope.freq_base = 10000. The RMSNorm
 * epsilon is required, as llama.cpp requires it for these architectures. */
static int read_config(loader *ld, tl_config *cfg)
{
    if (find_arch(ld, cfg) != 0)
        return -1;
    int32_t h[7];
    if (get_dim(ld, "embedding_length", -1, &h[0]) != 0 ||
        get_dim(ld, "feed_forward_length", -1, &h[1]) != 0 ||
        get_dim(ld, "block_count", -1, &h[2]) != 0 ||
        get_dim(ld, "attention.head_count", -1, &h[3]) != 0 ||
        get_dim(ld, "attention.head_count_kv", h[3], &h[4]) != 0 ||
        get_dim(ld, "context_length", -1, &h[6]) != 0)
        return -1;
    const tl_gguf_tensor *emb = tl_gguf_find_tensor(ld->g, "token_embd.weight");
    if (!emb || emb->n_dims != 2 || emb->ne[1] > INT32_MAX) {
        snprintf(ld->err, ld->cap, "GGUF %s: tensor token_embd.weight is missing or not 2-D",
                 ld->label);
        return -1;
    }
    int shared = tl_gguf_find_tensor(ld->g, "output.weight") == NULL;
    h[5] = shared ? (int32_t)emb->ne[1] : -(int32_t)emb->ne[1];
    tl_arch arch = cfg->arch;
    tl_rope_mode mode = cfg->rope_mode;
    if (tl_config_check(h, ld->label, cfg, ld->err, ld->cap) != ILAB_OK)
        return -1;
    cfg->arch = arch;
    cfg->rope_mode = mode;
    int32_t hs, vs, rot;
    if (get_dim(ld, "attention.key_length", cfg->dim / cfg->n_heads, &hs) != 0 ||
        get_dim(ld, "attention.value_length", hs, &vs) != 0 ||
        get_dim(ld, "rope.dimension_count", hs, &rot) != 0)
        return -1;
    /* q_dim = n_heads * key_length within checkpoint.c's largest dimension,
     * so that no product of dimensions overflows. */
    if (vs != hs || (int64_t)hs * cfg->n_heads > 1 << 20 || rot > hs || rot % 2 != 0 ||
        (cfg->arch == TL_ARCH_LLAMA && rot != hs)) {
        snprintf(ld->err, ld->cap, "GGUF %s: %s.attention.key_length %d, value_length %d and "
                 "rope.dimension_count %d: torchlike needs equal key and value lengths (at most "
                 "2^20 over all heads) and an even rotated width no larger than them (all of it "
                 "for llama)", ld->label,
                 ld->arch, (int)hs, (int)vs, (int)rot);
        return -1;
    }
    cfg->head_size = hs;
    cfg->n_rot = rot;
    if (get_float(ld, "rope.freq_base", 10000.0f, 0, &cfg->rope_base) != 0 ||
        get_float(ld, "attention.layer_norm_rms_epsilon", 0.0f, 1, &cfg->rms_eps) != 0 ||
        read_rope_scaling(ld, cfg) != 0)
        return -1;
    if (!(cfg->rope_base > 0.0f) || !(cfg->rms_eps >= 0.0f)) {
        snprintf(ld->err, ld->cap, "GGUF %s: %s.rope.freq_base %g must be positive and "
                 "attention.layer_norm_rms_epsilon %g not negative", ld->label, ld->arch,
                 (double)cfg->rope_base, (double)cfg->rms_eps);
        return -1;
    }
    cfg->context_length = cfg->seq_len;
    return 0;
}

/* A tensor with this name, of these dimensions (innermost first), marked
 * as used. */
static const tl_gguf_tensor *get_tensor(loader *ld, const char *name, uint64_t ne0, uint64_t ne1,
                                        int optional)
{
    const tl_gguf_tensor *t = tl_gguf_find_tensor(ld->g, name);
    if (!t) {
        if (!optional)
            snprintf(ld->err, ld->cap, "GGUF %s: tensor %s is missing", ld->label, name);
        return NULL;
    }
    uint32_t want_dims = ne1 ? 2 : 1;
    if (t->n_dims != want_dims || t->ne[0] != ne0 || (ne1 && t->ne[1] != ne1)) {
        snprintf(ld->err, ld->cap, "GGUF %s: tensor %s has shape [%" PRIu64 ", %" PRIu64 "] "
                 "(%u dims); the metadata needs [%" PRIu64 ", %" PRIu64 "]", ld->label, name,
                 t->ne[0], t->ne[1], t->n_dims, ne0, ne1 ? ne1 : 1);
        ld->err[ld->cap - 1] = '\0';
        return NULL;
    }
    /* Loads of a float or a half from this address must be aligned. */
    size_t align = t->type == TL_DTYPE_F32 ? 4 : 2;
    if ((uintptr_t)t->data % align != 0) {
        snprintf(ld->err, ld->cap, "GGUF %s: tensor %s data is not %zu-byte aligned "
                 "(general.alignment too small)", ld->label, name, align);
        return NULL;
    }
    ld->used[t - ld->g->tensors] = 1;
    return t;
}

static int get_matrix(loader *ld, const char *name, int rows, int cols, tl_matrix *m)
{
    const tl_gguf_tensor *t = get_tensor(ld, name, (uint64_t)cols, (uint64_t)rows, 0);
    if (!t)
        return -1;
    *m = (tl_matrix){(tl_dtype)t->type, t->data, rows, cols};
    return 0;
}

/* Rows [first, first + n) of m, in place: the parts of a fused tensor. */
static tl_matrix rows_of(const tl_matrix *m, int first, int n)
{
    return (tl_matrix){m->type, tl_matrix_row(m, first), n, m->cols};
}

/* Vectors (norms, biases, rotary factors) are read as fp32: another type is
 * widened into the loader's buffer. Absent and optional: *out = NULL. */
static int get_vector(loader *ld, const char *name, int n, int optional, const float **out)
{
    *out = NULL;
    const tl_gguf_tensor *t = get_tensor(ld, name, (uint64_t)n, 0, optional);
    if (!t)
        return optional && !tl_gguf_find_tensor(ld->g, name) ? 0 : -1;
    if (t->type == TL_DTYPE_F32) {
        *out = t->data;
        return 0;
    }
    if (tl_dtype_row_bytes((tl_dtype)t->type, n) == 0) {
        snprintf(ld->err, ld->cap, "GGUF %s: tensor %s has type %s, which cannot hold a vector "
                 "of %d values", ld->label, name, tl_ggml_type_name(t->type), n);
        return -1;
    }
    float *dst = ld->conv + ld->conv_used;
    tl_matrix m = {(tl_dtype)t->type, t->data, 1, n};
    tl_matrix_row_f32(&m, 0, dst);
    ld->conv_used += (size_t)n;
    *out = dst;
    return 0;
}

#define NAME(buf, l, suffix) (snprintf(buf, sizeof buf, "blk.%d." suffix, l), buf)

/* Q, K and V: separate tensors, or one fused attn_qkv (phi3) whose rows are
 * Q's, then K's, then V's; the same for their optional biases. */
static int get_qkv(loader *ld, const tl_config *c, int l, tl_layer_weights *L)
{
    char n[64];
    int D = c->dim, Q = tl_config_q_dim(c), KV = tl_config_kv_dim(c);
    if (tl_gguf_find_tensor(ld->g, NAME(n, l, "attn_qkv.weight"))) {
        tl_matrix qkv;
        const float *b;
        if (get_matrix(ld, n, Q + 2 * KV, D, &qkv) != 0 ||
            get_vector(ld, NAME(n, l, "attn_qkv.bias"), Q + 2 * KV, 1, &b) != 0)
            return -1;
        L->wq = rows_of(&qkv, 0, Q);
        L->wk = rows_of(&qkv, Q, KV);
        L->wv = rows_of(&qkv, Q + KV, KV);
        if (b) {
            L->bq = b;
            L->bk = b + Q;
            L->bv = b + Q + KV;
        }
        return 0;
    }
    /* Biases are optional for every architecture, as in llama.cpp (qwen2's
     * files have them). */
    return get_matrix(ld, NAME(n, l, "attn_q.weight"), Q, D, &L->wq) ||
           get_matrix(ld, NAME(n, l, "attn_k.weight"), KV, D, &L->wk) ||
           get_matrix(ld, NAME(n, l, "attn_v.weight"), KV, D, &L->wv) ||
           get_vector(ld, NAME(n, l, "attn_q.bias"), Q, 1, &L->bq) ||
           get_vector(ld, NAME(n, l, "attn_k.bias"), KV, 1, &L->bk) ||
           get_vector(ld, NAME(n, l, "attn_v.bias"), KV, 1, &L->bv)
               ? -1 : 0;
}

/* Gate and up: separate tensors, or phi3's ffn_up of 2 * hidden rows, the
 * gate's first (llama.cpp's swiglu takes silu of the first half). */
static int get_ffn(loader *ld, const tl_config *c, int l, tl_layer_weights *L)
{
    char n[64];
    int D = c->dim, H = c->hidden_dim;
    if (get_matrix(ld, NAME(n, l, "ffn_down.weight"), D, H, &L->w2) != 0)
        return -1;
    if (c->arch == TL_ARCH_PHI3) {
        tl_matrix up;
        if (get_matrix(ld, NAME(n, l, "ffn_up.weight"), 2 * H, D, &up) != 0)
            return -1;
        L->w1 = rows_of(&up, 0, H);
        L->w3 = rows_of(&up, H, H);
        return 0;
    }
    return get_matrix(ld, NAME(n, l, "ffn_gate.weight"), H, D, &L->w1) ||
           get_matrix(ld, NAME(n, l, "ffn_up.weight"), H, D, &L->w3)
               ? -1 : 0;
}

static int get_layer(loader *ld, const tl_config *c, int l, tl_layer_weights *L)
{
    char n[64];
    int D = c->dim, hs = c->head_size, qk_norm = c->arch == TL_ARCH_QWEN3;
    if (get_vector(ld, NAME(n, l, "attn_norm.weight"), D, 0, &L->rms_att) != 0 ||
        get_qkv(ld, c, l, L) != 0 ||
        (qk_norm && (get_vector(ld, NAME(n, l, "attn_q_norm.weight"), hs, 0, &L->q_norm) != 0 ||
                     get_vector(ld, NAME(n, l, "attn_k_norm.weight"), hs, 0, &L->k_norm) != 0)) ||
        get_matrix(ld, NAME(n, l, "attn_output.weight"), D, tl_config_q_dim(c), &L->wo) != 0 ||
        get_vector(ld, NAME(n, l, "ffn_norm.weight"), D, 0, &L->rms_ffn) != 0 ||
        get_ffn(ld, c, l, L) != 0)
        return -1;
    return 0;
}

/* Every tensor of the file must have been taken: one the model would need
 * but torchlike does not compute (an output bias, Phi-3's long-context
 * rotary factors) is refused, not ignored. */
static int check_all_used(loader *ld)
{
    for (uint64_t i = 0; i < ld->g->n_tensors; i++) {
        if (ld->used[i])
            continue;
        tl_gguf_string nm = ld->g->tensors[i].name;
        int longrope = nm.len >= 12 && memcmp(nm.s, "rope_factors", 12) == 0;
        snprintf(ld->err, ld->cap, "GGUF %s: tensor %.*s is not used by torchlike's %s%s",
                 ld->label, nm.len > 96 ? 96 : (int)nm.len, nm.s, ld->arch,
                 longrope ? " (Phi-3 \"longrope\" scaling of the 128k variants is not implemented; "
                            "the 4k variants run)" : "");
        return -1;
    }
    return 0;
}

/* Values of all non-F32 vectors (1-D tensors) in the file: the room their
 * widened copies may need, bounded by the file itself. */
static size_t vector_room(const tl_gguf *g)
{
    size_t n = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (g->tensors[i].n_dims == 1 && g->tensors[i].type != TL_DTYPE_F32)
            n += (size_t)g->tensors[i].ne[0];
    return n;
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
    loader ld = {ck.gguf, label, "", err, cap, NULL, NULL, 0};
    st = ILAB_INVALID_ARGUMENT;
    if (read_config(&ld, &ck.cfg) != 0)
        goto fail;
    const tl_config *c = &ck.cfg;
    int D = c->dim, V = c->vocab_size;
    /* The metadata alone must not size an allocation: the 2 * n_layers + 1
     * norms are tensors of dim values of at least 2 bytes each, all in the
     * file, so a file too small for them is refused before anything is
     * reserved for them. */
    if (((uint64_t)c->n_layers * 2 + 1) * (uint64_t)D * 2 > (uint64_t)size) {
        snprintf(err, cap, "GGUF %s: %s.block_count %d and %s.embedding_length %d need "
                 "%d norm tensors of %d values; the %zu-byte file cannot hold them", label,
                 ld.arch, c->n_layers, ld.arch, D, 2 * c->n_layers + 1, D, size);
        goto fail;
    }
    size_t room = vector_room(ck.gguf);
    ck.w.layers = calloc((size_t)c->n_layers, sizeof *ck.w.layers);
    ck.converted = malloc((room ? room : 1) * sizeof(float));
    ck.converted_floats = room;
    ld.used = calloc((size_t)ck.gguf->n_tensors + 1, 1);
    if (!ck.w.layers || !ck.converted || !ld.used) {
        snprintf(err, cap, "GGUF %s: out of memory", label);
        st = ILAB_OUT_OF_MEMORY;
        goto fail;
    }
    ld.conv = ck.converted;
    if (get_matrix(&ld, "token_embd.weight", V, D, &ck.w.token_embedding) != 0)
        goto fail;
    for (int l = 0; l < c->n_layers; l++)
        if (get_layer(&ld, c, l, &ck.w.layers[l]) != 0)
            goto fail;
    if (get_vector(&ld, "output_norm.weight", D, 0, &ck.w.rms_final) != 0 ||
        (c->arch == TL_ARCH_LLAMA &&
         get_vector(&ld, "rope_freqs.weight", c->n_rot / 2, 1, &ck.w.rope_factors) != 0))
        goto fail;
    if (c->shared_classifier)
        ck.w.wcls = ck.w.token_embedding;
    else if (get_matrix(&ld, "output.weight", V, D, &ck.w.wcls) != 0)
        goto fail;
    if (check_all_used(&ld) != 0)
        goto fail;
    free(ld.used);
    ck.bytes = bytes;
    ck.size = size;
    *out = ck;
    return ILAB_OK;
fail:
    free(ld.used);
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
    /* The tokens as spelled, for the encoder's lookups (owned by the
     * tokenizer once it is made). */
    char **raw = calloc((size_t)n + 1, sizeof *raw);
    int *raw_len = calloc((size_t)n + 1, sizeof *raw_len);
    float *sc = malloc((size_t)n * sizeof *sc);
    ilab_status st = ILAB_OK;
    if (!pieces || !lens || !sc || !raw || !raw_len)
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
        raw[i] = malloc((size_t)s.len + 1);
        if (!raw[i]) {
            st = ILAB_OUT_OF_MEMORY;
            break;
        }
        memcpy(raw[i], s.s, (size_t)s.len);
        raw[i][s.len] = '\0';
        raw_len[i] = (int)s.len;
        memcpy(&sc[i], scores->elems + 4 * i, 4);
    }
    if (st == ILAB_OK)
        st = tl_tokenizer_from_vocab((int)n, (const char *const *)pieces, lens, sc, (int)ids[0],
                                     (int)ids[1], (int)ids[2], label, out, err, cap);
    if (st == ILAB_OK) {
        st = tl_tokenizer_spm_spelling(out, raw, raw_len);
        if (st == ILAB_OK) {
            raw = NULL; /* the tokenizer's now */
            raw_len = NULL;
        } else {
            tl_tokenizer_free(out);
        }
    }
    if (st == ILAB_OUT_OF_MEMORY)
        snprintf(err, cap, "GGUF %s: out of memory for the vocabulary", label);
    for (uint64_t i = 0; pieces && i < n; i++)
        free(pieces[i]);
    free(pieces);
    free(lens);
    free(sc);
    for (uint64_t i = 0; raw && i < n; i++)
        free(raw[i]);
    free(raw);
    free(raw_len);
    return st;
}
