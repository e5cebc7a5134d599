#include "weights.h"

#include <math.h>
#include <string.h>

#include "q8_0_r16.h"

const char *tl_dtype_name(tl_dtype t)
{
    switch (t) {
    case TL_DTYPE_F32: return "F32";
    case TL_DTYPE_F16: return "F16";
    case TL_DTYPE_Q8_0: return "Q8_0";
    case TL_DTYPE_Q8_0_R16: return "Q8_0 (rows interleaved by 16)";
    }
    return "?";
}

size_t tl_dtype_row_bytes(tl_dtype t, int cols)
{
    switch (t) {
    case TL_DTYPE_F32: return (size_t)cols * 4;
    case TL_DTYPE_F16: return (size_t)cols * 2;
    case TL_DTYPE_Q8_0:
    case TL_DTYPE_Q8_0_R16:
        return cols % TL_Q8_0_BLOCK ? 0 : (size_t)cols / TL_Q8_0_BLOCK * sizeof(tl_block_q8_0);
    }
    return 0;
}

const void *tl_matrix_row(const tl_matrix *m, int r)
{
    return (const unsigned char *)m->data + (size_t)r * tl_dtype_row_bytes(m->type, m->cols);
}

float tl_fp16_to_fp32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13); /* inf, nan */
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign;
    } else { /* subnormal: value man * 2^-24 */
        float v = (float)man * 0x1p-24f;
        memcpy(&bits, &v, 4);
        bits |= sign;
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t tl_fp32_to_fp16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000, ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* inf or nan */
        return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));
    if (ax >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
        return (uint16_t)(sign | 0x7c00);
    if (ax < 0x38800000u) { /* below 2^-14: subnormal half (or zero) */
        float a;
        memcpy(&a, &ax, 4);
        return (uint16_t)(sign | (uint32_t)lrintf(a * 0x1p24f)); /* ties to even */
    }
    uint32_t exp = (ax >> 23) - 112, man = ax & 0x7fffff;
    uint32_t h = (exp << 10) | (man >> 13), rest = man & 0x1fff;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1)))
        h++; /* may carry into the exponent, which is still correct */
    return (uint16_t)(sign | h);
}

void tl_quantize_row_q8_0(const float *x, tl_block_q8_0 *out, int cols)
{
    for (int b = 0; b < cols / TL_Q8_0_BLOCK; b++) {
        const float *v = x + b * TL_Q8_0_BLOCK;
        float amax = 0.0f;
        for (int i = 0; i < TL_Q8_0_BLOCK; i++)
            amax = fmaxf(amax, fabsf(v[i]));
        float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        out[b].d = tl_fp32_to_fp16(d);
        for (int i = 0; i < TL_Q8_0_BLOCK; i++)
            out[b].qs[i] = (int8_t)lrintf(v[i] * id);
    }
}

void tl_matrix_row_f32(const tl_matrix *m, int r, float *out)
{
    if (m->type == TL_DTYPE_Q8_0_R16) { /* one row gathered from its group */
        for (int b = 0; b < m->cols / TL_Q8_0_BLOCK; b++) {
            float d = tl_fp16_to_fp32(tl_r16_scale(m, r, b));
            for (int i = 0; i < TL_Q8_0_BLOCK; i++)
                out[b * TL_Q8_0_BLOCK + i] = d * (float)tl_r16_weight(m, r, b * TL_Q8_0_BLOCK + i);
        }
        return;
    }
    const void *row = tl_matrix_row(m, r);
    switch (m->type) {
    case TL_DTYPE_F32:
        memcpy(out, row, (size_t)m->cols * sizeof(float));
        return;
    case TL_DTYPE_F16: {
        const uint16_t *h = row;
        for (int i = 0; i < m->cols; i++)
            out[i] = tl_fp16_to_fp32(h[i]);
        return;
    }
    case TL_DTYPE_Q8_0: {
        const tl_block_q8_0 *blk = row;
        for (int b = 0; b < m->cols / TL_Q8_0_BLOCK; b++) {
            float d = tl_fp16_to_fp32(blk[b].d);
            for (int i = 0; i < TL_Q8_0_BLOCK; i++)
                out[b * TL_Q8_0_BLOCK + i] = d * (float)blk[b].qs[i];
        }
        return;
    }
    case TL_DTYPE_Q8_0_R16:
        return; /* above */
    }
}
