/* torchlike — products with fp16 weights (GGUF F16 files): each weight is
 * widened to fp32 as it is loaded (F16C on AVX2 and AVX-512) and multiplied
 * in fp32. */
#ifndef TORCHLIKE_MATMUL_F16_H
#define TORCHLIKE_MATMUL_F16_H

#include "cpu.h"
#include "weights.h"

/* out[t * out_stride + r] = w[r] . x[t] for rows [r0, r1), tokens [0, T),
 * x fp32 with rows `x_stride` floats apart. Each weight row is read once for
 * all tokens. Any thread. */
void tl_matmul_f16_isa(tl_isa isa, const tl_matrix *w, const float *x, size_t x_stride, int T,
                       float *out, int out_stride, int r0, int r1);
void tl_matmul_f16(const tl_matrix *w, const float *x, size_t x_stride, int T, float *out,
                   int out_stride, int r0, int r1);

#endif
