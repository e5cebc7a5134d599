/* torchlike — products with weights of ggml's quantised block types
 * (quant_blocks.h) and bf16, used from the file's own bytes.
 *
 * Two ways, same rows and tokens:
 *  - tl_matmul_dequant: each weight block dequantised (dequant_ref.c) into a
 *    small buffer and dotted in float with every token: any type, and the
 *    definition the integer kernels are compared against.
 *  - tl_matmul_quant (matmul_quant.c's integer kernels): the activations
 *    are quantised once per product and each block's dot product is integer
 *    arithmetic (ADR 0024). */
#ifndef TORCHLIKE_MATMUL_QUANT_H
#define TORCHLIKE_MATMUL_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "cpu.h"
#include "weights.h"

/* out[t * out_stride + r] = w[r] . x[t] for rows [r0, r1), tokens [0, T);
 * each weight row is read once for all tokens. Any thread. */
void tl_matmul_dequant(const tl_matrix *w, const float *x, size_t x_stride, int T, float *out,
                       int out_stride, int r0, int r1);

/* ---- integer kernels ----------------------------------------------------
 * Which quantised activations a weight type's integer kernel takes:
 *  - TL_ACT_Q8 (Q4_0, Q4_1, Q5_0, Q5_1; Q8_0 has matmul_q8_0.c): blocks of
 *    32 as int8 with a float scale and the block's sum of q
 *    (tl_quantize_act_q8, the tl_q8_act of matmul_q8_0.h);
 *  - TL_ACT_Q8K (Q2_K .. Q6_K): super-blocks of 256 as int8 with one float
 *    scale and the sum of every 16 q (tl_quantize_act_q8k);
 *  - TL_ACT_NONE: float kernels (F32, F16, BF16, Q8_0's own path). */
typedef enum tl_act_kind { TL_ACT_NONE = 0, TL_ACT_Q8 = 1, TL_ACT_Q8K = 2 } tl_act_kind;
tl_act_kind tl_quant_act_kind(tl_dtype t);

/* T inputs quantised per 256: q [T][cols], d [T][cols / 256],
 * bsums [T][cols / 16]. */
typedef struct tl_q8k_act {
    const int8_t *q;
    const float *d;
    const int16_t *bsums;
} tl_q8k_act;

/* x[cols] (cols a multiple of 256) -> q[cols], d[cols / 256],
 * bsums[cols / 16]: d = max|x| / 127, q = x / d rounded to nearest. */
void tl_quantize_act_q8k(const float *x, int cols, int8_t *q, float *d, int16_t *bsums);

/* out[t * out_stride + r] = w[r] . x[t] for rows [r0, r1), tokens [0, T),
 * w of a type whose tl_quant_act_kind is TL_ACT_Q8 (act: tl_q8_act) or
 * TL_ACT_Q8K (act: tl_q8k_act). Each row is read once for all tokens. The
 * integer sums of every ISA's copy equal the scalar reference's. For the
 * legacy types the float steps are the same scalar code too, so all copies
 * give the same floats; the K types' vector copies add their block terms in
 * float lanes and differ from the reference in the last bits, within
 * 1e-5 * sum_i |w_i| (|x_i| + d_b/2) (ADR 0024). For one ISA, a row's result
 * never depends on the split of rows over calls. Any thread. */
void tl_matmul_quant_isa(tl_isa isa, const tl_matrix *w, const void *act, int T, float *out,
                         int out_stride, int r0, int r1);
void tl_matmul_quant(const tl_matrix *w, const void *act, int T, float *out, int out_stride,
                     int r0, int r1);

#endif
