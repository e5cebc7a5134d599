/* torchlike — llama2.c checkpoint files: header, validation, mmapped weights.
 *
 * Layout (run.c order): 7 x int32 header (dim, hidden_dim, n_layers, n_heads,
 * n_kv_heads, vocab_size, seq_len; a negative vocab_size means a separate
 * classifier follows), then fp32 token_embedding, rms_att, wq, wk, wv, wo,
 * rms_ffn, w1, w2, w3, rms_final, the legacy RoPE table (skipped), wcls. */
#ifndef TORCHLIKE_CHECKPOINT_H
#define TORCHLIKE_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "inferlab/status.h"
#include "weights.h"

/* The decoder families torchlike runs. Each differs from Llama in a few
 * places only (model.c marks each one); the loader (checkpoint_gguf.c) maps
 * a GGUF file's general.architecture onto one of them. */
typedef enum tl_arch {
    TL_ARCH_LLAMA = 0, /* also llama2.c checkpoints */
    TL_ARCH_QWEN2,     /* biases on Q, K and V */
    TL_ARCH_QWEN3,     /* RMSNorm of each head of Q and K before rotation */
    TL_ARCH_PHI3,      /* fused QKV and gate-up tensors (views, see loader) */
} tl_arch;

/* How the rotary embedding pairs a head's features (ggml's rope modes). */
typedef enum tl_rope_mode {
    TL_ROPE_NORM = 0, /* (x[2i], x[2i+1]): llama, llama2.c */
    TL_ROPE_NEOX = 2, /* (x[i], x[i + n_rot/2]): qwen2, qwen3, phi3 */
} tl_rope_mode;

typedef struct tl_config {
    int dim;
    int hidden_dim;
    int n_layers;
    int n_heads;
    int n_kv_heads;
    int vocab_size;
    int seq_len;           /* positions a sequence may hold (the KV cache's width) */
    int shared_classifier; /* 1 when the classifier is the embedding table */
    /* Set by tl_config_check to the llama2.c values; a GGUF file's keys
     * override them. */
    tl_arch arch;
    int head_size;         /* features per head (dim / n_heads unless the file says) */
    int n_rot;             /* leading features of a head that are rotated */
    tl_rope_mode rope_mode;
    float rope_base;       /* theta_i = pos * freq_scale * base^(-2i/n_rot) / factor_i */
    float rope_freq_scale; /* 1 / linear scaling factor */
    float rms_eps;
    int context_length;    /* what the model was trained for (seq_len may be capped below it) */
} tl_config;

/* Features of all query heads, and of all key (or value) heads. */
static inline int tl_config_q_dim(const tl_config *c) { return c->n_heads * c->head_size; }
static inline int tl_config_kv_dim(const tl_config *c) { return c->n_kv_heads * c->head_size; }

/* One decoder layer's weights; matrices row-major [out][in]. Pointers are
 * borrowed from the mapped file (or the checkpoint's converted copies). */
typedef struct tl_layer_weights {
    const float *rms_att, *rms_ffn; /* [dim] */
    tl_matrix wq;                   /* [q_dim][dim] */
    tl_matrix wk, wv;               /* [kv_dim][dim] */
    tl_matrix wo;                   /* [dim][q_dim] */
    const float *bq, *bk, *bv;      /* qwen2: [q_dim], [kv_dim], [kv_dim]; else NULL */
    const float *q_norm, *k_norm;   /* qwen3: [head_size] each; else NULL */
    tl_matrix w1, w3;               /* [hidden][dim] (gate, up) */
    tl_matrix w2;                   /* [dim][hidden] (down) */
} tl_layer_weights;

typedef struct tl_weights {
    tl_matrix token_embedding; /* [vocab][dim] */
    tl_layer_weights *layers;  /* [n_layers], owned by the checkpoint */
    const float *rms_final;    /* [dim] */
    const float *rope_factors; /* [n_rot / 2] divisors of each pair's frequency
                                  (Llama 3's rope_freqs), or NULL */
    tl_matrix wcls;            /* [vocab][dim]; the embedding's data when shared */
} tl_weights;

typedef struct tl_checkpoint {
    tl_config cfg;
    tl_weights w;
    const unsigned char *bytes; /* the whole file (mapped or embedded) */
    size_t size;
    void *mapping;              /* non-NULL when we own an mmap */
    char label[256];            /* path, or "<embedded default>", for messages */
    struct tl_gguf *gguf;       /* owned: the parsed GGUF file, NULL for llama2.c */
    void *converted;            /* owned: fp32 copies of non-F32 vectors, or NULL */
    size_t converted_floats;    /* its room */
} tl_checkpoint;

/* Map and validate `path`: a llama2.c checkpoint, or a GGUF file (told
 * apart by the magic "GGUF" at offset 0). On error writes a message naming the file and the
 * field into `err` and returns ILAB_IO (unreadable) or ILAB_INVALID_ARGUMENT. */
ilab_status tl_checkpoint_open(const char *path, tl_checkpoint *out,
                               char *err, size_t err_cap);

/* Validate llama2.c checkpoint bytes owned by someone else (the embedded
 * default, a fuzzer's buffer); they must outlive the checkpoint. */
ilab_status tl_checkpoint_from_memory(const void *bytes, size_t size, const char *label,
                                      tl_checkpoint *out, char *err, size_t err_cap);

/* Validate a GGUF file of the llama architecture held in memory (the bytes
 * must outlive the checkpoint): hyper-parameters from its metadata, tensors
 * by their llama.cpp names, each checked for shape and type. Matrices are
 * used where they lie (F32, F16 or Q8_0); F16 norm vectors are widened into
 * `converted`. The parsed file stays in `gguf` for its vocabulary. */
ilab_status tl_checkpoint_from_gguf(const void *bytes, size_t size, const char *label,
                                    tl_checkpoint *out, char *err, size_t err_cap);

/* The llama2.c header fields (dim, hidden_dim, n_layers, n_heads,
 * n_kv_heads, vocab_size (negative: separate classifier), seq_len) checked
 * and turned into a config; errors name `label` and the field. */
ilab_status tl_config_check(const int32_t h[7], const char *label, tl_config *cfg, char *err,
                            size_t err_cap);

void tl_checkpoint_close(tl_checkpoint *ck);

/* Bytes of weights one decode step reads (every matrix once), for benchmarks. */
size_t tl_checkpoint_weight_bytes(const tl_config *cfg);

#endif
