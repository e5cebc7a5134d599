/* torchlike — the Llama-family decoder (llama, qwen2, qwen3, phi3): one
 * forward pass over a batch of sequences.
 *
 * Every token of every item goes through each weight matrix in one GEMM
 * (one matrix-vector product when the batch is a single token); attention
 * runs per token over its own sequence's cache blocks. */
#ifndef TORCHLIKE_MODEL_H
#define TORCHLIKE_MODEL_H

#include <stdint.h>

#include "checkpoint.h"
#include "kv_cache.h"
#include "ops.h"
#include "tensor.h"
#include "thread_pool.h"

typedef struct tl_model {
    tl_checkpoint ck; /* owned: closed by tl_model_close */
    tl_config cfg;
    tl_weights w;     /* the file's weights, or the quantised copies below */
    int head_size, q_dim, kv_dim;
    float *rope_cos, *rope_sin; /* [seq_len][n_rot / 2], owned */
    tl_layer_weights *layers;   /* owned copy of ck.w.layers when quantised */
    void *quantized;            /* owned: the Q8_0 copies (quantize: q8_0), or NULL */
    size_t quantized_bytes;     /* their weight bytes */
    void *repacked;             /* owned: a GGUF file's Q8_0 matrices repacked, or NULL */
    size_t repacked_bytes;      /* its size */
} tl_model;

/* Takes ownership of ck (also on failure, which closes it). `quantize` is
 * TL_DTYPE_F32 to run the file's weights as they are, or TL_DTYPE_Q8_0 to
 * quantise every fp32/fp16 matrix to Q8_0 at load (norms stay fp32). Q8_0
 * matrices, the file's or quantised, run repacked (Q8_0_R16). On
 * error writes a message naming the model and the reason into `err`. */
ilab_status tl_model_init(tl_model *m, const tl_checkpoint *ck, tl_dtype quantize, char *err,
                          size_t err_cap);
void tl_model_close(tl_model *m);

/* One sequence's share of a forward pass. */
typedef struct tl_forward_item {
    const int32_t *tokens; /* ids already checked to be in range */
    int n_tokens;
    int start_pos;         /* positions already in the cache */
    const int *blocks;     /* block table covering start_pos + n_tokens */
    int all_logits;        /* logits for every token, not only the last */
    float *logits;         /* NULL for none */
} tl_forward_item;

/* Scratch for one forward pass, allocated before any state changes so that a
 * failed allocation leaves every sequence as it was. */
typedef struct tl_workspace {
    int n_tokens, n_logit_rows, n_threads;
    tl_tensor x, xb, xb2, q, k, v, att, hb, hb2, xr, logits; /* att: attention's output [q_dim] */
    tl_tensor scores;  /* [n_threads][seq_len] attention weights */
    int *token_item;   /* [n_tokens] item of each token */
    int *token_pos;    /* [n_tokens] position of each token */
    int *token_id;     /* [n_tokens] */
    tl_act_scratch act; /* quantised activations for Q8_0 products */
} tl_workspace;

ilab_status tl_workspace_alloc(tl_workspace *ws, const tl_model *m,
                               const tl_forward_item *items, int n_items, int n_threads);
void tl_workspace_free(tl_workspace *ws);

/* Run the pass: writes keys/values at each token's position and the logits
 * asked for. Cannot fail once the workspace and the cache blocks exist. */
void tl_model_forward(const tl_model *m, tl_kv_cache *kv, const tl_forward_item *items,
                      int n_items, tl_workspace *ws, tl_thread_pool *pool);

#endif
