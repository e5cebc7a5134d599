/* torchlike — one row of activations times an fp32 weight matrix, the
 * single-token product that decides decode speed: it is bound by reading the
 * weights once, so each copy streams them with the widest loads its ISA has. */
#ifndef TORCHLIKE_MATVEC_F32_H
#define TORCHLIKE_MATVEC_F32_H

#include "cpu.h"

/* out[r] = w[r] . x for rows [r0, r1) of w ([rows][d], row-major), with the
 * kernel of `isa` (capped at what the CPU supports). Any thread. */
void tl_matvec_f32_isa(tl_isa isa, const float *w, const float *x, float *out, int d, int r0,
                       int r1);
/* The same with tl_cpu_isa()'s kernel. */
void tl_matvec_f32(const float *w, const float *x, float *out, int d, int r0, int r1);

#endif
