#include "matmul_quant.h"

#include <math.h>

#include "matmul_k_avx2.h"
#include "matmul_k_avx512.h"
#include "matmul_q8_0.h"
#include "quant_blocks.h"
#include "simd.h"

#if TL_X86
#include <immintrin.h>
#endif

/* ---- the float path: a block at a time -------------------------------- */

void tl_matmul_dequant(const tl_matrix *w, const float *x, size_t x_stride, int T, float *out,
                       int out_stride, int r0, int r1)
{
    int per = tl_dtype_block_values(w->type), nb = w->cols / per;
    /* a float row of 1 value per "block" would be dequantised a value at
     * a time: take 256 of them instead (cols is a multiple of per) */
    int step = per == 1 ? 256 : per;
    size_t step_bytes = tl_dtype_row_bytes(w->type, per) * (size_t)(step / per);
    float buf[TL_QK_K];
    for (int r = r0; r < r1; r++) {
        const unsigned char *row = tl_matrix_row(w, r);
        for (int t = 0; t < T; t++)
            out[(size_t)t * (size_t)out_stride + (size_t)r] = 0.0f;
        for (int v = 0; v < nb * per; v += step) {
            int n = nb * per - v < step ? nb * per - v : step;
            tl_dequantize_row(w->type, row + (size_t)(v / step) * step_bytes, buf, n);
            for (int t = 0; t < T; t++) {
                const float *xt = x + (size_t)t * x_stride + v;
                float s = 0.0f;
                for (int i = 0; i < n; i++)
                    s += buf[i] * xt[i];
                out[(size_t)t * (size_t)out_stride + (size_t)r] += s;
            }
        }
    }
}

/* ---- activations ------------------------------------------------------- */

tl_act_kind tl_quant_act_kind(tl_dtype t)
{
    switch (t) {
    case TL_DTYPE_Q4_0:
    case TL_DTYPE_Q4_1:
    case TL_DTYPE_Q5_0:
    case TL_DTYPE_Q5_1:
        return TL_ACT_Q8;
    case TL_DTYPE_Q2_K:
    case TL_DTYPE_Q3_K:
    case TL_DTYPE_Q4_K:
    case TL_DTYPE_Q5_K:
    case TL_DTYPE_Q6_K:
        return TL_ACT_Q8K;
    default:
        return TL_ACT_NONE;
    }
}

void tl_quantize_act_q8k(const float *x, int cols, int8_t *q, float *d, int16_t *bsums)
{
    for (int b = 0; b < cols / TL_QK_K; b++) {
        const float *v = x + b * TL_QK_K;
        float amax = 0.0f;
        for (int i = 0; i < TL_QK_K; i++) {
            float a = fabsf(v[i]);
            amax = a > amax ? a : amax;
        }
        float s = amax / 127.0f, id = s != 0.0f ? 1.0f / s : 0.0f;
        for (int g = 0; g < TL_QK_K / 16; g++) {
            int sum = 0;
            for (int i = 0; i < 16; i++) {
                int qi = (int)lrintf(v[16 * g + i] * id);
                q[b * TL_QK_K + 16 * g + i] = (int8_t)qi;
                sum += qi;
            }
            bsums[b * (TL_QK_K / 16) + g] = (int16_t)sum;
        }
        d[b] = s;
    }
}

/* ---- one row against one token ------------------------------------------
 * Every kernel sums a block's integer products exactly (int32; the bounds
 * are in each comment), then takes one float step per block, the same
 * inline code in every copy (and multiply-add contraction is off in this
 * file), so the copies' floats are equal, not merely close. */

/* A block's float step: (dw * dx) * isum - (dmin * dx) * msum. */
static inline float step2(float dw, float dmin, float dx, int32_t isum, int32_t msum)
{
    return (dw * dx) * (float)isum - (dmin * dx) * (float)msum;
}

typedef float (*dot_fn)(const void *row, const int8_t *q, const float *scale, const void *sums,
                        int nb);

/* Legacy blocks: q and scale per 32 values, sums the int32 sum of each
 * block's q. |isum| <= 32 * 31 * 127. */

static float q4_0_ref(const void *row, const int8_t *q, const float *s, const void *sums, int nb)
{
    const tl_block_q4_0 *b = row;
    const int32_t *xs = sums;
    float sum = 0.0f;
    for (int i = 0; i < nb; i++, q += 32) {
        int32_t dot = 0;
        for (int j = 0; j < 16; j++)
            dot += (b[i].qs[j] & 15) * q[j] + (b[i].qs[j] >> 4) * q[j + 16];
        sum += step2(tl_fp16_to_fp32(b[i].d), 0.0f, s[i], dot - 8 * xs[i], 0);
    }
    return sum;
}

static float q4_1_ref(const void *row, const int8_t *q, const float *s, const void *sums, int nb)
{
    const tl_block_q4_1 *b = row;
    const int32_t *xs = sums;
    float sum = 0.0f;
    for (int i = 0; i < nb; i++, q += 32) {
        int32_t dot = 0;
        for (int j = 0; j < 16; j++)
            dot += (b[i].qs[j] & 15) * q[j] + (b[i].qs[j] >> 4) * q[j + 16];
        /* + m * dx * sum(q): a min, as a negated dmin */
        sum += step2(tl_fp16_to_fp32(b[i].d), -tl_fp16_to_fp32(b[i].m), s[i], dot, xs[i]);
    }
    return sum;
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int32_t q5_dot_ref(const uint8_t *qs, const uint8_t *qhb, const int8_t *q)
{
    uint32_t qh = le32(qhb);
    int32_t dot = 0;
    for (int j = 0; j < 16; j++) {
        int lo = (qs[j] & 15) | (int)((qh >> j) & 1) << 4;
        int hi = (qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
        dot += lo * q[j] + hi * q[j + 16];
    }
    return dot;
}

static float q5_0_ref(const void *row, const int8_t *q, const float *s, const void *sums, int nb)
{
    const tl_block_q5_0 *b = row;
    const int32_t *xs = sums;
    float sum = 0.0f;
    for (int i = 0; i < nb; i++, q += 32)
        sum += step2(tl_fp16_to_fp32(b[i].d), 0.0f, s[i], q5_dot_ref(b[i].qs, b[i].qh, q) - 16 * xs[i], 0);
    return sum;
}

static float q5_1_ref(const void *row, const int8_t *q, const float *s, const void *sums, int nb)
{
    const tl_block_q5_1 *b = row;
    const int32_t *xs = sums;
    float sum = 0.0f;
    for (int i = 0; i < nb; i++, q += 32)
        sum += step2(tl_fp16_to_fp32(b[i].d), -tl_fp16_to_fp32(b[i].m), s[i],
                     q5_dot_ref(b[i].qs, b[i].qh, q), xs[i]);
    return sum;
}

/* K blocks: q per 256 values with one scale d, sums the int16 sum of every
 * 16 q. Each kernel's isum is sum over sub-blocks of scale * (u . q) with
 * u the unsigned stored value, and the offsets taken out with the sums:
 * |isum| <= 256 * 63 * 127 * 128 (Q6_K's bound, the largest). */

static float q2_k_ref(const void *row, const int8_t *q, const float *d, const void *sums, int nb)
{
    const tl_block_q2_k *b = row;
    const int16_t *bs = sums;
    float sum = 0.0f;
    for (int i = 0; i < nb; i++, q += 256, bs += 16) {
        int32_t isum = 0, msum = 0;
        for (int j = 0; j < 16; j++) {
            const uint8_t *qs = b[i].qs + 32 * (j / 8);
            int shift = 2 * ((j % 8) / 2), l0 = 16 * (j % 2);
            int32_t dot = 0;
            for (int l = 0; l < 16; l++)
                dot += ((qs[l0 + l] >> shift) & 3) * q[16 * j + l];
            isum += (b[i].scales[j] & 15) * dot;
            msum += (b[i].scales[j] >> 4) * bs[j];
        }
        sum += step2(tl_fp16_to_fp32(b[i].d), tl_fp16_to_fp32(b[i].dmin), d[i], isum, msum);
    }
    return sum;
}

static float q3_k_ref(const void *row, const int8_t *q, const float *d, const void *sums, int nb)
{
    const tl_block_q3_k *b = row;
    const int16_t *bs = sums;
    float sum = 0.0f;
    for (int i = 0; i < nb; i++, q += 256, bs += 16) {
        int sc[16];
        tl_q3k_scales(b[i].scales, sc);
        int32_t isum = 0;
        for (int j = 0; j < 16; j++) {
            const uint8_t *qs = b[i].qs + 32 * (j / 8);
            int shift = 2 * ((j % 8) / 2), l0 = 16 * (j % 2), hbit = j / 2;
            int32_t dot = 0;
            for (int l = 0; l < 16; l++) {
                int u = ((qs[l0 + l] >> shift) & 3) | ((b[i].hmask[l0 + l] >> hbit) & 1) << 2;
                dot += u * q[16 * j + l];
            }
            isum += (sc[j] - 32) * (dot - 4 * bs[j]);
        }
        sum += step2(tl_fp16_to_fp32(b[i].d), 0.0f, d[i], isum, 0);
    }
    return sum;
}

static float q4_k_ref(const void *row, const int8_t *q, const float *d, const void *sums, int nb)
{
    const tl_block_q4_k *b = row;
    const int16_t *bs = sums;
    float sum = 0.0f;
    for (int i = 0; i < nb; i++, q += 256, bs += 16) {
        int32_t isum = 0, msum = 0;
        for (int k = 0; k < 8; k++) {
            int sc, mn;
            tl_k4_scale_min(b[i].scales, k, &sc, &mn);
            const uint8_t *qs = b[i].qs + 32 * (k / 2);
            int32_t dot = 0;
            for (int l = 0; l < 32; l++)
                dot += ((qs[l] >> (4 * (k % 2))) & 15) * q[32 * k + l];
            isum += sc * dot;
            msum += mn * (bs[2 * k] + bs[2 * k + 1]);
        }
        sum += step2(tl_fp16_to_fp32(b[i].d), tl_fp16_to_fp32(b[i].dmin), d[i], isum, msum);
    }
    return sum;
}

static float q5_k_ref(const void *row, const int8_t *q, const float *d, const void *sums, int nb)
{
    const tl_block_q5_k *b = row;
    const int16_t *bs = sums;
    float sum = 0.0f;
    for (int i = 0; i < nb; i++, q += 256, bs += 16) {
        int32_t isum = 0, msum = 0;
        for (int k = 0; k < 8; k++) {
            int sc, mn;
            tl_k4_scale_min(b[i].scales, k, &sc, &mn);
            const uint8_t *qs = b[i].qs + 32 * (k / 2);
            int32_t dot = 0;
            for (int l = 0; l < 32; l++) {
                int u = ((qs[l] >> (4 * (k % 2))) & 15) | ((b[i].qh[l] >> k) & 1) << 4;
                dot += u * q[32 * k + l];
            }
            isum += sc * dot;
            msum += mn * (bs[2 * k] + bs[2 * k + 1]);
        }
        sum += step2(tl_fp16_to_fp32(b[i].d), tl_fp16_to_fp32(b[i].dmin), d[i], isum, msum);
    }
    return sum;
}

static float q6_k_ref(const void *row, const int8_t *q, const float *d, const void *sums, int nb)
{
    const tl_block_q6_k *b = row;
    const int16_t *bs = sums;
    float sum = 0.0f;
    for (int i = 0; i < nb; i++, q += 256, bs += 16) {
        int32_t isum = 0;
        for (int j = 0; j < 16; j++) {
            int half = j / 8, k = (j % 8) / 2, l0 = 16 * (j % 2);
            const uint8_t *ql = b[i].ql + 64 * half + 32 * (k % 2), *qh = b[i].qh + 32 * half;
            int32_t dot = 0;
            for (int l = 0; l < 16; l++) {
                int u = ((ql[l0 + l] >> (4 * (k / 2))) & 15) | ((qh[l0 + l] >> (2 * k)) & 3) << 4;
                dot += u * q[16 * j + l];
            }
            isum += b[i].scales[j] * (dot - 32 * bs[j]);
        }
        sum += step2(tl_fp16_to_fp32(b[i].d), 0.0f, d[i], isum, 0);
    }
    return sum;
}

#if TL_X86
/* ---- AVX2 copies: the unsigned stored values u as bytes, vpmaddubsw with
 * the signed activations (|u| <= 63 and |q| <= 127: a pair fits int16),
 * then vpmaddwd with the sub-block scales (or ones) into int32 lanes. The
 * AVX-512 levels use these copies too. Q4_K, Q5_K and Q6_K have multi-row
 * copies instead (matmul_k_avx2.c, and matmul_k_avx512.c with VNNI; ADR
 * 0024). */

TL_TARGET_AVX2 static inline int32_t hsum_i32(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

TL_TARGET_AVX2 static inline float hsum_f32(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* u . q over 32 bytes, as eight int32 partial sums */
TL_TARGET_AVX2 static inline __m256i dot32(__m256i u, const int8_t *q)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, _mm256_loadu_si256((const __m256i *)(const void *)q)),
                             _mm256_set1_epi16(1));
}

/* u . q over 32 bytes weighted by scale a (first 16 values) and b (last 16) */
TL_TARGET_AVX2 static inline __m256i dot32_scaled(__m256i u, const int8_t *q, int a, int b)
{
    __m256i s = _mm256_set_m128i(_mm_set1_epi16((short)b), _mm_set1_epi16((short)a));
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, _mm256_loadu_si256((const __m256i *)(const void *)q)), s);
}

/* a legacy block's 16 bytes of nibbles as 32 values: low nibbles first */
TL_TARGET_AVX2 static inline __m256i nibbles32(const uint8_t *qs)
{
    __m128i raw = _mm_loadu_si128((const __m128i *)(const void *)qs), m4 = _mm_set1_epi8(15);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), m4), _mm_and_si128(raw, m4));
}

/* 32 bits as 32 bytes of 0x10 (set) or 0 */
TL_TARGET_AVX2 static inline __m256i fifth_bits(const uint8_t *qh)
{
    __m256i v = _mm256_set1_epi32((int)le32(qh));
    v = _mm256_shuffle_epi8(v, _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202,
                                                  0x0303030303030303));
    __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit), _mm256_set1_epi8(16));
}

TL_TARGET_AVX2 static float q4_0_avx2(const void *row, const int8_t *q, const float *s,
                                      const void *sums, int nb)
{
    const tl_block_q4_0 *b = row;
    const int32_t *xs = sums;
    float sum = 0.0f;
    for (int i = 0; i < nb; i++, q += 32)
        sum += step2(_cvtsh_ss(b[i].d), 0.0f, s[i], hsum_i32(dot32(nibbles32(b[i].qs), q)) - 8 * xs[i], 0);
    return sum;
}

TL_TARGET_AVX2 static float q4_1_avx2(const void *row, const int8_t *q, const float *s,
                                      const void *sums, int nb)
{
    const tl_block_q4_1 *b = row;
    const int32_t *xs = sums;
    float sum = 0.0f;
    for (int i = 0; i < nb; i++, q += 32)
        sum += step2(_cvtsh_ss(b[i].d), -_cvtsh_ss(b[i].m), s[i],
                     hsum_i32(dot32(nibbles32(b[i].qs), q)), xs[i]);
    return sum;
}

TL_TARGET_AVX2 static float q5_0_avx2(const void *row, const int8_t *q, const float *s,
                                      const void *sums, int nb)
{
    const tl_block_q5_0 *b = row;
    const int32_t *xs = sums;
    float sum = 0.0f;
    for (int i = 0; i < nb; i++, q += 32) {
        __m256i u = _mm256_or_si256(nibbles32(b[i].qs), fifth_bits(b[i].qh));
        sum += step2(_cvtsh_ss(b[i].d), 0.0f, s[i], hsum_i32(dot32(u, q)) - 16 * xs[i], 0);
    }
    return sum;
}

TL_TARGET_AVX2 static float q5_1_avx2(const void *row, const int8_t *q, const float *s,
                                      const void *sums, int nb)
{
    const tl_block_q5_1 *b = row;
    const int32_t *xs = sums;
    float sum = 0.0f;
    for (int i = 0; i < nb; i++, q += 32) {
        __m256i u = _mm256_or_si256(nibbles32(b[i].qs), fifth_bits(b[i].qh));
        sum += step2(_cvtsh_ss(b[i].d), -_cvtsh_ss(b[i].m), s[i], hsum_i32(dot32(u, q)), xs[i]);
    }
    return sum;
}

TL_TARGET_AVX2 static float q2_k_avx2(const void *row, const int8_t *q, const float *d,
                                      const void *sums, int nb)
{
    const tl_block_q2_k *b = row;
    const int16_t *bs = sums;
    const __m256i m3 = _mm256_set1_epi8(3);
    __m256 accf = _mm256_setzero_ps();
    float sum = 0.0f;
    for (int i = 0; i < nb; i++, q += 256, bs += 16) {
        const uint8_t *sc = b[i].scales;
        __m256i acc = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            __m256i raw = _mm256_loadu_si256((const __m256i *)(const void *)(b[i].qs + 32 * h));
            for (int k = 0; k < 4; k++) {
                __m256i u = _mm256_and_si256(_mm256_srl_epi16(raw, _mm_cvtsi32_si128(2 * k)), m3);
                int j = 8 * h + 2 * k;
                acc = _mm256_add_epi32(acc, dot32_scaled(u, q + 128 * h + 32 * k, sc[j] & 15, sc[j + 1] & 15));
            }
        }
        int32_t msum = 0;
        for (int j = 0; j < 16; j++)
            msum += (sc[j] >> 4) * bs[j];
        accf = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(b[i].d) * d[i]), _mm256_cvtepi32_ps(acc), accf);
        sum -= (_cvtsh_ss(b[i].dmin) * d[i]) * (float)msum;
    }
    return hsum_f32(accf) + sum;
}

TL_TARGET_AVX2 static float q3_k_avx2(const void *row, const int8_t *q, const float *d,
                                      const void *sums, int nb)
{
    const tl_block_q3_k *b = row;
    const int16_t *bs = sums;
    const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
    __m256 accf = _mm256_setzero_ps();
    float sum = 0.0f;
    for (int i = 0; i < nb; i++, q += 256, bs += 16) {
        int sc[16];
        tl_q3k_scales(b[i].scales, sc);
        __m256i acc = _mm256_setzero_si256();
        __m256i hm = _mm256_loadu_si256((const __m256i *)(const void *)b[i].hmask);
        for (int h = 0; h < 2; h++) {
            __m256i raw = _mm256_loadu_si256((const __m256i *)(const void *)(b[i].qs + 32 * h));
            for (int k = 0; k < 4; k++) {
                __m256i lo = _mm256_and_si256(_mm256_srl_epi16(raw, _mm_cvtsi32_si128(2 * k)), m3);
                __m256i hi = _mm256_and_si256(_mm256_srl_epi16(hm, _mm_cvtsi32_si128(4 * h + k)), one);
                __m256i u = _mm256_or_si256(lo, _mm256_slli_epi16(hi, 2));
                int j = 8 * h + 2 * k;
                acc = _mm256_add_epi32(acc, dot32_scaled(u, q + 128 * h + 32 * k, sc[j] - 32, sc[j + 1] - 32));
            }
        }
        int32_t off = 0;
        for (int j = 0; j < 16; j++)
            off += (sc[j] - 32) * bs[j];
        float dd = _cvtsh_ss(b[i].d) * d[i];
        accf = _mm256_fmadd_ps(_mm256_set1_ps(dd), _mm256_cvtepi32_ps(acc), accf);
        sum -= dd * (float)(4 * off);
    }
    return hsum_f32(accf) + sum;
}

#endif

/* ---- rows and tokens ---------------------------------------------------- */

static dot_fn kernel(tl_isa isa, tl_dtype t)
{
#if TL_X86
    if (isa >= TL_ISA_AVX2) {
        switch (t) {
        case TL_DTYPE_Q4_0: return q4_0_avx2;
        case TL_DTYPE_Q4_1: return q4_1_avx2;
        case TL_DTYPE_Q5_0: return q5_0_avx2;
        case TL_DTYPE_Q5_1: return q5_1_avx2;
        case TL_DTYPE_Q2_K: return q2_k_avx2;
        case TL_DTYPE_Q3_K: return q3_k_avx2;
        default: break; /* Q4_K .. Q6_K: matmul_k_avx2.c */
        }
    }
#else
    (void)isa;
#endif
    switch (t) {
    case TL_DTYPE_Q4_0: return q4_0_ref;
    case TL_DTYPE_Q4_1: return q4_1_ref;
    case TL_DTYPE_Q5_0: return q5_0_ref;
    case TL_DTYPE_Q5_1: return q5_1_ref;
    case TL_DTYPE_Q2_K: return q2_k_ref;
    case TL_DTYPE_Q3_K: return q3_k_ref;
    case TL_DTYPE_Q4_K: return q4_k_ref;
    case TL_DTYPE_Q5_K: return q5_k_ref;
    case TL_DTYPE_Q6_K: return q6_k_ref;
    default: return NULL;
    }
}

void tl_matmul_quant_isa(tl_isa isa, const tl_matrix *w, const void *act, int T, float *out,
                         int out_stride, int r0, int r1)
{
    tl_isa have = tl_cpu_detected();
    if (isa > have)
        isa = have;
    if (tl_quant_act_kind(w->type) == TL_ACT_Q8K &&
        ((isa >= TL_ISA_AVX512_VNNI && tl_matmul_k_avx512(w, act, T, out, out_stride, r0, r1)) ||
         (isa >= TL_ISA_AVX2 && tl_matmul_k_avx2(w, act, T, out, out_stride, r0, r1))))
        return;
    dot_fn f = kernel(isa, w->type);
    int per = tl_dtype_block_values(w->type), nb = w->cols / per;
    const int8_t *q;
    const float *scale;
    const char *sums;
    size_t sums_stride; /* bytes per token */
    if (tl_quant_act_kind(w->type) == TL_ACT_Q8K) {
        const tl_q8k_act *a = act;
        q = a->q, scale = a->d, sums = (const char *)a->bsums;
        sums_stride = (size_t)(w->cols / 16) * sizeof(int16_t);
    } else {
        const tl_q8_act *a = act;
        q = a->q, scale = a->scale, sums = (const char *)a->sum;
        sums_stride = (size_t)nb * sizeof(int32_t);
    }
    size_t row_bytes = tl_dtype_row_bytes(w->type, w->cols);
    for (int r = r0; r < r1; r++) {
        const void *row = (const unsigned char *)w->data + (size_t)r * row_bytes;
        for (int t = 0; t < T; t++)
            out[(size_t)t * (size_t)out_stride + (size_t)r] =
                f(row, q + (size_t)t * (size_t)w->cols, scale + (size_t)t * (size_t)nb,
                  sums + (size_t)t * sums_stride, nb);
    }
}

void tl_matmul_quant(const tl_matrix *w, const void *act, int T, float *out, int out_stride,
                     int r0, int r1)
{
    tl_matmul_quant_isa(tl_cpu_isa(), w, act, T, out, out_stride, r0, r1);
}
