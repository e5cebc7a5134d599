#include "weights.h"

#include <math.h>
#include <string.h>

#include "q8_0_r16.h"
#include "quant_blocks.h"

const char *tl_weight_type_name(uint32_t type)
{
    /* ggml's type ids (ggml.h); the gaps are ids ggml has retired. */
    static const char *const names[] = {
        "F32", "F16", "Q4_0", "Q4_1", "Q4_2", "Q4_3", "Q5_0", "Q5_1", "Q8_0", "Q8_1",
        "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ2_XXS", "IQ2_XS", "IQ3_XXS",
        "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS", "I8", "I16", "I32", "I64", "F64",
        "IQ1_M", "BF16", "Q4_0_4_4", "Q4_0_4_8", "Q4_0_8_8", "TQ1_0", "TQ2_0",
        "IQ4_NL_4_4", "IQ4_NL_4_8", "IQ4_NL_8_8", "MXFP4", "NVFP4", "Q1_0",
    };
    return type < sizeof names / sizeof *names ? names[type] : "unknown";
}

int tl_weight_type_supported(uint32_t type)
{
    return type < 64 && tl_dtype_block_values((tl_dtype)type) != 0;
}

const char *tl_dtype_name(tl_dtype t)
{
    if (t == TL_DTYPE_Q8_0_R16)
        return "Q8_0 (rows interleaved by 16)";
    return tl_weight_type_name((uint32_t)t);
}

int tl_dtype_block_values(tl_dtype t)
{
    switch (t) {
    case TL_DTYPE_F32:
    case TL_DTYPE_F16:
    case TL_DTYPE_BF16:
        return 1;
    case TL_DTYPE_Q4_0:
    case TL_DTYPE_Q4_1:
    case TL_DTYPE_Q5_0:
    case TL_DTYPE_Q5_1:
    case TL_DTYPE_Q8_0:
    case TL_DTYPE_Q8_0_R16:
        return TL_QK_LEGACY;
    case TL_DTYPE_Q2_K:
    case TL_DTYPE_Q3_K:
    case TL_DTYPE_Q4_K:
    case TL_DTYPE_Q5_K:
    case TL_DTYPE_Q6_K:
        return TL_QK_K;
    }
    return 0;
}

static size_t block_bytes(tl_dtype t)
{
    switch (t) {
    case TL_DTYPE_F32: return 4;
    case TL_DTYPE_F16:
    case TL_DTYPE_BF16: return 2;
    case TL_DTYPE_Q4_0: return sizeof(tl_block_q4_0);
    case TL_DTYPE_Q4_1: return sizeof(tl_block_q4_1);
    case TL_DTYPE_Q5_0: return sizeof(tl_block_q5_0);
    case TL_DTYPE_Q5_1: return sizeof(tl_block_q5_1);
    case TL_DTYPE_Q8_0:
    case TL_DTYPE_Q8_0_R16: return sizeof(tl_block_q8_0);
    case TL_DTYPE_Q2_K: return sizeof(tl_block_q2_k);
    case TL_DTYPE_Q3_K: return sizeof(tl_block_q3_k);
    case TL_DTYPE_Q4_K: return sizeof(tl_block_q4_k);
    case TL_DTYPE_Q5_K: return sizeof(tl_block_q5_k);
    case TL_DTYPE_Q6_K: return sizeof(tl_block_q6_k);
    }
    return 0;
}

size_t tl_dtype_row_bytes(tl_dtype t, int cols)
{
    int per = tl_dtype_block_values(t);
    if (per == 0 || cols <= 0 || cols % per != 0)
        return 0;
    return (size_t)(cols / per) * block_bytes(t);
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
    tl_dequantize_row(m->type, tl_matrix_row(m, r), out, m->cols);
}
