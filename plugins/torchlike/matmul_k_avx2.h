/* torchlike — 256-bit copies of the Q4_K, Q5_K and Q6_K products (AVX2 +
 * FMA + F16C), four weight rows a pass (Q6_K: two), for CPUs without
 * AVX-512 VNNI.
 *
 * One row at a time, a row of 3 (dim 768) to 8 (hidden 2048) super-blocks
 * pays a call, the final horizontal sum and the block's activation sums
 * per row; here a super-block's activations and sums serve four rows, and
 * the rows stream with software prefetch (k_rows.h; ADR 0024). */
#ifndef TORCHLIKE_MATMUL_K_AVX2_H
#define TORCHLIKE_MATMUL_K_AVX2_H

#include "matmul_quant.h"

/* out[t * out_stride + r] = w[r] . a[t] for rows [r0, r1), tokens [0, T),
 * like tl_matmul_quant_isa. Returns 1 when it did the product, 0 when w's
 * type has no copy here or this CPU lacks AVX2/FMA/F16C (the caller then
 * uses its own kernels). A row's floats do not depend on which rows share
 * its pass, so any split of rows over threads gives the same output. Any
 * thread. */
int tl_matmul_k_avx2(const tl_matrix *w, const tl_q8k_act *a, int T, float *out, int out_stride,
                     int r0, int r1);

#endif
