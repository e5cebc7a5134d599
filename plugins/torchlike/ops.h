/* torchlike — the operators of a Llama decoder over tl_tensor rows.
 * Activations are [tokens][features]; weights are [out][in] (llama2.c). */
#ifndef TORCHLIKE_OPS_H
#define TORCHLIKE_OPS_H

#include <stdint.h>

#include "tensor.h"
#include "thread_pool.h"
#include "weights.h"

/* How a single row (one decoding token) is multiplied by a weight matrix:
 * a single token's matmul is bound by reading the weights once, so it gets
 * a kernel of its own. Both are kept so bench/decode can compare them. */
typedef enum tl_matvec_kind {
    TL_MATVEC_OWN = 0,  /* the vectorised loop below, rows split over the pool */
    TL_MATVEC_BLAS = 1, /* cblas_sgemv */
} tl_matvec_kind;

void tl_ops_set_matvec(tl_matvec_kind kind); /* process-wide; for benchmarks */
tl_matvec_kind tl_ops_matvec(void);

/* Batches of at most this many tokens (several sequences decoding together)
 * use the skinny kernel: one pass over the weights for all tokens. Larger
 * ones (prefills) use cblas_sgemm. Process-wide; bench/decode compares. */
#define TL_SKINNY_BATCH_DEFAULT 16
void tl_ops_set_skinny_limit(int max_tokens);

/* Room for the activations of a product with Q8_0 weights, quantised once
 * per product (or per group of products sharing an input): q [T][cols],
 * scale [T][cols / 32], for up to `cap` elements. Owned by the caller. */
typedef struct tl_act_scratch {
    int8_t *q;
    float *scale;
    int32_t *sum; /* [T][cols / 32], as scale */
    size_t cap;
} tl_act_scratch;

/* out[T][n] = x[T][d] . w[n][d]^T, one matrix product over every token of a
 * batch. fp32 weights: the matvec path for T == 1, the skinny kernel for T
 * up to the limit above, cblas_sgemm beyond. fp16 and Q8_0 weights: their
 * own kernels, which read each weight row once for all tokens. */
void tl_matmul(tl_tensor *out, const tl_tensor *x, const tl_matrix *w, tl_act_scratch *scratch,
               tl_thread_pool *pool);

/* Several products of the same single row `x` in one parallel loop, so a
 * decode step pays one thread hand-off for q/k/v (or w1/w3) together. */
void tl_matvec_multi(float *const *outs, const tl_matrix *const *ws, int n_products,
                     const float *x, tl_act_scratch *scratch, tl_thread_pool *pool);

/* out = weight * x / sqrt(mean(x^2) + eps), row by row. */
void tl_rmsnorm(tl_tensor *out, const tl_tensor *x, const float *weight, float eps);

/* The same over each of the n / size consecutive slices of x, in place, with
 * one weight vector of `size` for all (qwen3's per-head norm of Q and K). */
void tl_rmsnorm_slices(float *x, int n, int size, const float *weight, float eps);

/* The rotation's parameters: pair i (of n_rot / 2) of a head turns by
 * pos * freq_scale * base^(-2i/n_rot) / factors[i] (factors NULL = 1). */
typedef struct tl_rope_params {
    int n_rot;
    float base, freq_scale;
    const float *factors;
} tl_rope_params;

/* Rotary embedding tables: cos and sin for every position and pair,
 * [seq_len][n_rot / 2] each, computed once (with base 10000 and no scaling,
 * the same float expressions llama2.c evaluates per step). */
ilab_status tl_rope_table(int seq_len, const tl_rope_params *p, float **cos_out, float **sin_out);

/* Rotate the first n_rot features of each head of one row of `n_features`
 * at the row of the tables for its position; `neox` pairs x[i] with
 * x[i + n_rot/2] (ggml's NEOX mode), otherwise x[2i] with x[2i+1]
 * (llama2.c's and ggml's NORM mode). */
void tl_rope_row(float *x, int n_features, int head_size, int n_rot, int neox,
                 const float *cos_row, const float *sin_row);

/* In-place softmax over n values. */
void tl_softmax(float *x, int n);

/* h1 = silu(h1) * h3, element-wise (SwiGLU); tokens shared over the pool. */
void tl_swiglu(tl_tensor *h1, const tl_tensor *h3, tl_thread_pool *pool);

/* x += y, element-wise. */
void tl_add(tl_tensor *x, const tl_tensor *y);

/* out row t = table row ids[t] (widened to fp32). */
void tl_embedding(tl_tensor *out, const tl_matrix *table, const int *ids);

float tl_dot(const float *a, const float *b, int n);
/* y[i] += a * x[i] for i < n. */
void tl_axpy(float *y, float a, const float *x, int n);

#endif
