/* torchlike — products with Q8_0 weights: activations are quantised per
 * block of 32 at run time (int8 with a float scale), each block's dot
 * product is exact integer arithmetic, and the blocks' sums are scaled and
 * added in float.
 *
 * The model runs its Q8_0 matrices repacked with rows interleaved by 16
 * (q8_0_r16.h): one copy per ISA — AVX-512 VNNI (vpdpbusd on 512 bits, 16
 * rows per instruction), AVX-VNNI or AVX2 (256 bits), and the scalar
 * reference. Plain Q8_0 matrices (GGUF's layout) have kernels of their own:
 * the tail rows of a repacked matrix and the tests use them. */
#ifndef TORCHLIKE_MATMUL_Q8_0_H
#define TORCHLIKE_MATMUL_Q8_0_H

#include <stdint.h>

#include "cpu.h"
#include "weights.h"

/* T inputs quantised for Q8_0 products, [T][cols] and [T][cols / 32]. */
typedef struct tl_q8_act {
    const int8_t *q;
    const float *scale;
    const int32_t *sum; /* each block's sum of q (the repacked kernels take
                           their weights' offset of 128 back out with it) */
} tl_q8_act;

/* x[cols] (cols a multiple of 32) -> q[cols], scale and sum [cols / 32]. */
void tl_quantize_act_q8(const float *x, int cols, int8_t *q, float *scale, int32_t *sum);

/* out[t * out_stride + r] = w[r] . x[t] for rows [r0, r1) and tokens
 * [0, T); w is Q8_0 or Q8_0_R16. Each weight row is read once for all
 * tokens. Any thread. */
void tl_matmul_q8_0_isa(tl_isa isa, const tl_matrix *w, const tl_q8_act *x, int T, float *out,
                        int out_stride, int r0, int r1);
void tl_matmul_q8_0(const tl_matrix *w, const tl_q8_act *x, int T, float *out, int out_stride,
                    int r0, int r1);

#endif
