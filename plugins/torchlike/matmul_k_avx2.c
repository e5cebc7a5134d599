#include "matmul_k_avx2.h"

#include "k_rows.h"
#include "quant_blocks.h"
#include "simd.h"

#if TL_X86
#include <immintrin.h>

#define ROWS TL_K_ROWS

TL_TARGET_AVX2 static inline __m256i load256(const void *p)
{
    return _mm256_loadu_si256((const __m256i *)p);
}

/* (u . x) over 32 bytes, the int16 pair sums multiplied by `scales` (an
 * int16 factor per pair) into eight int32 lanes. |u| <= 63 and |x| <= 127:
 * a pair fits int16. */
TL_TARGET_AVX2 static inline __m256i madd_scaled(__m256i u, const int8_t *x, __m256i scales)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, load256(x)), scales);
}

/* vpshufb control: int16 word a of each 128-bit lane in lanes 0..7, word b
 * in lanes 8..15 (so one sub-block's scale, or two halves' scales) */
#define WORD_PAIR(a, b)                                                                       \
    _mm256_setr_epi8(2 * (a), 2 * (a) + 1, 2 * (a), 2 * (a) + 1, 2 * (a), 2 * (a) + 1, 2 * (a),   \
                     2 * (a) + 1, 2 * (a), 2 * (a) + 1, 2 * (a), 2 * (a) + 1, 2 * (a), 2 * (a) + 1, \
                     2 * (a), 2 * (a) + 1, 2 * (b), 2 * (b) + 1, 2 * (b), 2 * (b) + 1, 2 * (b),     \
                     2 * (b) + 1, 2 * (b), 2 * (b) + 1, 2 * (b), 2 * (b) + 1, 2 * (b), 2 * (b) + 1, \
                     2 * (b), 2 * (b) + 1, 2 * (b), 2 * (b) + 1)

/* eight unsigned bytes as int16 words, the same eight in both 128-bit lanes */
TL_TARGET_AVX2 static inline __m256i words8(uint32_t lo, uint32_t hi)
{
    return _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_set_epi32(0, 0, (int)hi, (int)lo)));
}

TL_TARGET_AVX2 static inline float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

TL_TARGET_AVX2 static inline float hsum4(__m128 v)
{
    v = _mm_add_ps(v, _mm_movehl_ps(v, v));
    return _mm_cvtss_f32(_mm_add_ss(v, _mm_movehdup_ps(v)));
}

/* ---- Q4_K and Q5_K ------------------------------------------------------
 * qs[32c + l] holds value 64c + l (low nibble, sub-block 2c) and
 * 64c + 32 + l (high nibble, sub-block 2c + 1), so each 32-byte load gives
 * two whole sub-blocks whose activations lie in order. A Q5_K block's
 * qh[l] bit k is value 32k + l's fifth bit. */

/* One row's super-block: sum over sub-blocks of scale * (u . x), int32
 * lanes; qh5 is a Q5_K block's fifth bits, NULL for Q4_K. */
TL_TARGET_AVX2 __attribute__((always_inline)) static inline __m256i
k4_block(const uint8_t *qs, const uint8_t *qh5, __m256i scales, const int8_t *x)
{
    const __m256i m4 = _mm256_set1_epi8(15), one = _mm256_set1_epi8(1);
    __m256i hb = qh5 ? load256(qh5) : _mm256_setzero_si256();
    __m256i acc = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        __m256i raw = load256(qs + 32 * c);
        __m256i lo = _mm256_and_si256(raw, m4), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
        if (qh5) {
            lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(hb, one), 4));
            hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 1), one), 4));
            hb = _mm256_srli_epi16(hb, 2);
        }
        acc = _mm256_add_epi32(acc, madd_scaled(lo, x + 64 * c, _mm256_shuffle_epi8(scales, WORD_PAIR(2 * c, 2 * c))));
        acc = _mm256_add_epi32(acc, madd_scaled(hi, x + 64 * c + 32,
                                                _mm256_shuffle_epi8(scales, WORD_PAIR(2 * c + 1, 2 * c + 1))));
    }
    return acc;
}

/* nr (1..ROWS, a constant after inlining) rows from `row`, one token.
 * Block sums: d * dx * sum_j sc_j (u_j . x_j) in 8 float lanes, and
 * dmin * dx * sum_j mn_j * (sum of x over sub-block j) in 4. */
TL_TARGET_AVX2 __attribute__((always_inline)) static inline void
k4_rows(const unsigned char *row, size_t row_bytes, const unsigned char *stop, int nr, int q5,
        const int8_t *q, const float *d, const int16_t *bs, int nb, float *out)
{
    size_t block_bytes = q5 ? sizeof(tl_block_q5_k) : sizeof(tl_block_q4_k);
    __m256 acc[ROWS];
    __m128 accm[ROWS];
#pragma GCC unroll 4
    for (int k = 0; k < nr; k++)
        acc[k] = _mm256_setzero_ps(), accm[k] = _mm_setzero_ps();
    for (int i = 0; i < nb; i++, q += TL_QK_K, bs += 16) {
        /* the activations' sums over each sub-block of 32 */
        __m128i pairs = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)(const void *)bs),
                                       _mm_loadu_si128((const __m128i *)(const void *)(bs + 8)));
#pragma GCC unroll 4
        for (int k = 0; k < nr; k++) {
            const unsigned char *blk = row + (size_t)k * row_bytes + block_bytes * (size_t)i;
            uint16_t dh, mh;
            const uint8_t *scales, *qs, *qh = NULL;
            if (q5) {
                const tl_block_q5_k *b = (const tl_block_q5_k *)(const void *)blk;
                dh = b->d, mh = b->dmin, scales = b->scales, qs = b->qs, qh = b->qh;
            } else {
                const tl_block_q4_k *b = (const tl_block_q4_k *)(const void *)blk;
                dh = b->d, mh = b->dmin, scales = b->scales, qs = b->qs;
            }
            tl_prefetch_block(blk, block_bytes, stop);
            uint32_t sw[4];
            tl_k4_scale_words(scales, sw);
            __m256i isum = k4_block(qs, qh, words8(sw[0], sw[1]), q);
            acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(_cvtsh_ss(dh) * d[i]), acc[k]);
            __m128i mins = _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, (int)sw[3], (int)sw[2]));
            accm[k] = _mm_fmadd_ps(_mm_cvtepi32_ps(_mm_madd_epi16(pairs, mins)),
                                   _mm_set1_ps(_cvtsh_ss(mh) * d[i]), accm[k]);
        }
    }
#pragma GCC unroll 4
    for (int k = 0; k < nr; k++)
        out[k] = hsum8(acc[k]) - hsum4(accm[k]);
}

/* ---- Q6_K ---------------------------------------------------------------
 * Each half block (128 values): ql[0..31]'s low nibbles are values 0..31,
 * ql[32..63]'s 32..63, and their high nibbles 64..95 and 96..127; qh[0..31]
 * gives two bits to each (bits 0-1 for values 0..31, 2-3 for 32..63, 4-5
 * and 6-7 for the next 64). A 32-value vector is two sub-blocks of 16, one
 * per 128-bit lane, whose scales one vpshufb spreads. The stored values are
 * offset by 32: that is taken out once per block as
 * 32 * sum_j sc_j * (sum of x over sub-block j). */

TL_TARGET_AVX2 __attribute__((always_inline)) static inline __m256i
q6_block(const tl_block_q6_k *b, const int8_t *x, __m256i bs)
{
    const __m256i m4 = _mm256_set1_epi8(15), m3 = _mm256_set1_epi8(3);
    __m128i sc = _mm_loadu_si128((const __m128i *)(const void *)b->scales);
    __m256i acc = _mm256_setzero_si256();
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        /* the half's eight scales as words, in both lanes */
        __m256i s = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(h ? _mm_srli_si128(sc, 8) : sc));
        __m256i l0 = load256(b->ql + 64 * h), l1 = load256(b->ql + 64 * h + 32);
        __m256i hb = load256(b->qh + 32 * h);
        __m256i u0 = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(hb, m3), 4));
        __m256i u1 = _mm256_or_si256(_mm256_and_si256(l1, m4),
                                     _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2), m3), 4));
        __m256i u2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                     _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 4), m3), 4));
        __m256i u3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                     _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 6), m3), 4));
        const int8_t *xh = x + 128 * h;
        acc = _mm256_add_epi32(acc, madd_scaled(u0, xh, _mm256_shuffle_epi8(s, WORD_PAIR(0, 1))));
        acc = _mm256_add_epi32(acc, madd_scaled(u1, xh + 32, _mm256_shuffle_epi8(s, WORD_PAIR(2, 3))));
        acc = _mm256_add_epi32(acc, madd_scaled(u2, xh + 64, _mm256_shuffle_epi8(s, WORD_PAIR(4, 5))));
        acc = _mm256_add_epi32(acc, madd_scaled(u3, xh + 96, _mm256_shuffle_epi8(s, WORD_PAIR(6, 7))));
    }
    __m256i off = _mm256_madd_epi16(_mm256_cvtepi8_epi16(sc), bs);
    return _mm256_sub_epi32(acc, _mm256_slli_epi32(off, 5));
}

TL_TARGET_AVX2 __attribute__((always_inline)) static inline void
q6_rows(const unsigned char *row, size_t row_bytes, const unsigned char *stop, int nr, const int8_t *q,
        const float *d, const int16_t *bs, int nb, float *out)
{
    __m256 acc[ROWS];
#pragma GCC unroll 4
    for (int k = 0; k < nr; k++)
        acc[k] = _mm256_setzero_ps();
    for (int i = 0; i < nb; i++, q += TL_QK_K, bs += 16) {
        __m256i bsv = load256(bs);
#pragma GCC unroll 4
        for (int k = 0; k < nr; k++) {
            const tl_block_q6_k *b = (const tl_block_q6_k *)(const void *)(row + (size_t)k * row_bytes) + i;
            tl_prefetch_block((const unsigned char *)b, sizeof *b, stop);
            __m256i isum = q6_block(b, q, bsv);
            acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(_cvtsh_ss(b->d) * d[i]), acc[k]);
        }
    }
#pragma GCC unroll 4
    for (int k = 0; k < nr; k++)
        out[k] = hsum8(acc[k]);
}

/* ---- a pass -------------------------------------------------------------
 * Q6_K goes two rows at a time: a block's four unpacked vectors, its raw
 * bytes, scales and masks leave no room in 16 ymm registers for four
 * rows' accumulators. Four rows a pass spilled and decoded the 110M Q6_K
 * file 10-15% slower than one row; two were as fast or faster (bench/gguf,
 * AVX2 EPYC, 1 and 2 threads). */

TL_TARGET_AVX2 static void rows_pass(tl_dtype t, const unsigned char *row, size_t row_bytes,
                                     const unsigned char *stop, int nr, const int8_t *q, const float *d,
                                     const int16_t *bs, int nb, float *res)
{
    if (t == TL_DTYPE_Q6_K) {
        for (int k = 0; k < nr; k += 2) {
            if (nr - k >= 2)
                q6_rows(row + (size_t)k * row_bytes, row_bytes, stop, 2, q, d, bs, nb, res + k);
            else
                q6_rows(row + (size_t)k * row_bytes, row_bytes, stop, 1, q, d, bs, nb, res + k);
        }
        return;
    }
    int q5 = t == TL_DTYPE_Q5_K;
    switch (nr) {
    case 4: k4_rows(row, row_bytes, stop, 4, q5, q, d, bs, nb, res); break;
    case 3: k4_rows(row, row_bytes, stop, 3, q5, q, d, bs, nb, res); break;
    case 2: k4_rows(row, row_bytes, stop, 2, q5, q, d, bs, nb, res); break;
    default: k4_rows(row, row_bytes, stop, 1, q5, q, d, bs, nb, res); break;
    }
}

int tl_matmul_k_avx2(const tl_matrix *w, const tl_q8k_act *a, int T, float *out, int out_stride,
                     int r0, int r1)
{
    tl_dtype t = w->type;
    if ((t != TL_DTYPE_Q4_K && t != TL_DTYPE_Q5_K && t != TL_DTYPE_Q6_K) ||
        tl_cpu_detected() < TL_ISA_AVX2)
        return 0;
    tl_k_rows_drive(rows_pass, w, a, T, out, out_stride, r0, r1);
    return 1;
}

#else

int tl_matmul_k_avx2(const tl_matrix *w, const tl_q8k_act *a, int T, float *out, int out_stride,
                     int r0, int r1)
{
    (void)w, (void)a, (void)T, (void)out, (void)out_stride, (void)r0, (void)r1;
    return 0;
}

#endif
