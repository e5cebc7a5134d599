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

#endif
