/* torchlike — every weight type back to floats, one plain loop per type.
 *
 * This is the definition the product kernels are tested against, and it
 * follows ggml's reference dequantize_row_* (ggml-quants.c) step for step,
 * including the order of float operations (a block's scale times a
 * sub-block's scale first, then times the quantised value, then the min
 * subtracted), so that its floats equal ggml's bit for bit
 * (tests/torchlike/test_quant.c against data ggml produced). The build
 * keeps multiply-add contraction off in this file (ISO C mode), so no
 * fused rounding creeps in. */
#include <string.h>

#include "quant_blocks.h"
#include "weights.h"

static float h2f(uint16_t h)
{
    return tl_fp16_to_fp32(h);
}

static void row_q4_0(const tl_block_q4_0 *x, float *y, int nb)
{
    for (int i = 0; i < nb; i++, y += 32) {
        float d = h2f(x[i].d);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)((x[i].qs[j] & 15) - 8) * d;
            y[j + 16] = (float)((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

static void row_q4_1(const tl_block_q4_1 *x, float *y, int nb)
{
    for (int i = 0; i < nb; i++, y += 32) {
        float d = h2f(x[i].d), m = h2f(x[i].m);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)(x[i].qs[j] & 15) * d + m;
            y[j + 16] = (float)(x[i].qs[j] >> 4) * d + m;
        }
    }
}

/* The fifth bits of a Q5 block: bit j of the little-endian word is value j's. */
static uint32_t q5_high(const uint8_t qh[4])
{
    return (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
}

static void row_q5_0(const tl_block_q5_0 *x, float *y, int nb)
{
    for (int i = 0; i < nb; i++, y += 32) {
        float d = h2f(x[i].d);
        uint32_t qh = q5_high(x[i].qh);
        for (int j = 0; j < 16; j++) {
            int lo = (x[i].qs[j] & 15) | (int)((qh >> j) & 1) << 4;
            int hi = (x[i].qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            y[j] = (float)(lo - 16) * d;
            y[j + 16] = (float)(hi - 16) * d;
        }
    }
}

static void row_q5_1(const tl_block_q5_1 *x, float *y, int nb)
{
    for (int i = 0; i < nb; i++, y += 32) {
        float d = h2f(x[i].d), m = h2f(x[i].m);
        uint32_t qh = q5_high(x[i].qh);
        for (int j = 0; j < 16; j++) {
            int lo = (x[i].qs[j] & 15) | (int)((qh >> j) & 1) << 4;
            int hi = (x[i].qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            y[j] = (float)lo * d + m;
            y[j + 16] = (float)hi * d + m;
        }
    }
}

static void row_q8_0(const tl_block_q8_0 *x, float *y, int nb)
{
    for (int i = 0; i < nb; i++, y += 32) {
        float d = h2f(x[i].d);
        for (int j = 0; j < 32; j++)
            y[j] = (float)x[i].qs[j] * d;
    }
}

static void row_q2_k(const tl_block_q2_k *x, float *y, int nb)
{
    for (int i = 0; i < nb; i++, y += 256) {
        float d = h2f(x[i].d), dmin = h2f(x[i].dmin);
        for (int v = 0; v < 256; v += 16) {
            int sc = x[i].scales[v / 16];
            float dl = d * (float)(sc & 15), ml = dmin * (float)(sc >> 4);
            const uint8_t *q = x[i].qs + 32 * (v / 128);
            int shift = 2 * ((v % 128) / 32), l0 = v % 32;
            for (int l = 0; l < 16; l++)
                y[v + l] = dl * (float)((q[l0 + l] >> shift) & 3) - ml;
        }
    }
}

static void row_q3_k(const tl_block_q3_k *x, float *y, int nb)
{
    for (int i = 0; i < nb; i++, y += 256) {
        float d = h2f(x[i].d);
        int s[16];
        tl_q3k_scales(x[i].scales, s);
        for (int v = 0; v < 256; v += 16) {
            float dl = d * (float)(s[v / 16] - 32);
            const uint8_t *q = x[i].qs + 32 * (v / 128);
            int shift = 2 * ((v % 128) / 32), l0 = v % 32, hbit = v / 32;
            for (int l = 0; l < 16; l++) {
                int lo = (q[l0 + l] >> shift) & 3;
                int high = (x[i].hmask[l0 + l] >> hbit) & 1;
                y[v + l] = dl * (float)(lo - (high ? 0 : 4));
            }
        }
    }
}

static void row_q4_k(const tl_block_q4_k *x, float *y, int nb)
{
    for (int i = 0; i < nb; i++, y += 256) {
        float d = h2f(x[i].d), dmin = h2f(x[i].dmin);
        for (int k = 0; k < 8; k++) {
            int sc, mn;
            tl_k4_scale_min(x[i].scales, k, &sc, &mn);
            float dl = d * (float)sc, ml = dmin * (float)mn;
            const uint8_t *q = x[i].qs + 32 * (k / 2);
            int shift = 4 * (k % 2);
            for (int l = 0; l < 32; l++)
                y[32 * k + l] = dl * (float)((q[l] >> shift) & 15) - ml;
        }
    }
}

static void row_q5_k(const tl_block_q5_k *x, float *y, int nb)
{
    for (int i = 0; i < nb; i++, y += 256) {
        float d = h2f(x[i].d), dmin = h2f(x[i].dmin);
        for (int k = 0; k < 8; k++) {
            int sc, mn;
            tl_k4_scale_min(x[i].scales, k, &sc, &mn);
            float dl = d * (float)sc, ml = dmin * (float)mn;
            const uint8_t *q = x[i].qs + 32 * (k / 2);
            int shift = 4 * (k % 2);
            for (int l = 0; l < 32; l++) {
                int v = ((q[l] >> shift) & 15) | ((x[i].qh[l] >> k) & 1) << 4;
                y[32 * k + l] = dl * (float)v - ml;
            }
        }
    }
}

static void row_q6_k(const tl_block_q6_k *x, float *y, int nb)
{
    for (int i = 0; i < nb; i++, y += 256) {
        float d = h2f(x[i].d);
        for (int v = 0; v < 256; v++) {
            int half = v / 128, k = (v % 128) / 32, l = v % 32;
            const uint8_t *ql = x[i].ql + 64 * half, *qh = x[i].qh + 32 * half;
            int lo = (ql[l + 32 * (k % 2)] >> (4 * (k / 2))) & 15;
            int hi = (qh[l] >> (2 * k)) & 3;
            int q = (lo | hi << 4) - 32;
            y[v] = d * (float)x[i].scales[v / 16] * (float)q;
        }
    }
}

static void row_bf16(const uint16_t *x, float *y, int n)
{
    for (int i = 0; i < n; i++) {
        uint32_t bits = (uint32_t)x[i] << 16;
        memcpy(&y[i], &bits, 4);
    }
}

void tl_dequantize_row(tl_dtype t, const void *src, float *dst, int n)
{
    int nb = n / tl_dtype_block_values(t);
    switch (t) {
    case TL_DTYPE_F32: memcpy(dst, src, (size_t)n * sizeof(float)); return;
    case TL_DTYPE_F16:
        for (int i = 0; i < n; i++)
            dst[i] = h2f(((const uint16_t *)src)[i]);
        return;
    case TL_DTYPE_BF16: row_bf16(src, dst, n); return;
    case TL_DTYPE_Q4_0: row_q4_0(src, dst, nb); return;
    case TL_DTYPE_Q4_1: row_q4_1(src, dst, nb); return;
    case TL_DTYPE_Q5_0: row_q5_0(src, dst, nb); return;
    case TL_DTYPE_Q5_1: row_q5_1(src, dst, nb); return;
    case TL_DTYPE_Q8_0: row_q8_0(src, dst, nb); return;
    case TL_DTYPE_Q2_K: row_q2_k(src, dst, nb); return;
    case TL_DTYPE_Q3_K: row_q3_k(src, dst, nb); return;
    case TL_DTYPE_Q4_K: row_q4_k(src, dst, nb); return;
    case TL_DTYPE_Q5_K: row_q5_k(src, dst, nb); return;
    case TL_DTYPE_Q6_K: row_q6_k(src, dst, nb); return;
    case TL_DTYPE_Q8_0_R16: return; /* no rows of its own: tl_matrix_row_f32 gathers them */
    }
}
