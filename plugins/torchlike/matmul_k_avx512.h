/* torchlike — 512-bit copies of the Q4_K, Q5_K and Q6_K products
 * (AVX-512 BW + VNNI), four weight rows a pass.
 *
 * The single-row AVX2 kernels of matmul_quant.c spend a third of their
 * instructions per row on fixed costs: a call, the unpacking of a block's
 * scales, the activations' loads and the final horizontal sum, with rows of
 * only 3 (dim 768) to 8 (hidden 2048) super-blocks. Here each super-block's
 * activations are loaded once for four rows, 64 weights go through one
 * vpmaddubsw and one vpdpwssd, and the scales are spread with one shuffle
 * each (ADR 0024). */
#ifndef TORCHLIKE_MATMUL_K_AVX512_H
#define TORCHLIKE_MATMUL_K_AVX512_H

#include "matmul_quant.h"

/* out[t * out_stride + r] = w[r] . a[t] for rows [r0, r1), tokens [0, T),
 * like tl_matmul_quant_isa. Returns 1 when it did the product, 0 when w's
 * type has no copy here or this CPU lacks AVX-512 BW/VNNI (the caller
 * then uses its own kernels). A row's floats do not depend on which rows
 * share its pass, so any split of rows over threads gives the same output.
 * Any thread. */
int tl_matmul_k_avx512(const tl_matrix *w, const tl_q8k_act *a, int T, float *out, int out_stride,
                       int r0, int r1);

#endif
