#include "matmul_k_avx512.h"

#include "quant_blocks.h"
#include "k_rows.h"
#include "simd.h"

#if TL_X86
#include <immintrin.h>

#define ROWS TL_K_ROWS

/* ---- Q4_K and Q5_K ------------------------------------------------------
 * A block's 128 bytes of nibbles as two 64-byte vectors: qs[32c + l] holds
 * value 64c + l (low nibble) and 64c + 32 + l (high nibble). So the low
 * nibbles of qs[0..63] are values 0..31 and 64..95 (sub-blocks 0 and 2),
 * the high ones 32..63 and 96..127 (sub-blocks 1 and 3), and likewise for
 * qs[64..127] with sub-blocks 4..7. The activations are gathered once per
 * super-block in that order (x[0..3]); vpmaddubsw's int16 lanes 0..15 then
 * belong to the first sub-block of a pair and 16..31 to the second, and
 * vpdpwssd multiplies them by that sub-block's scale. */

/* vpshufb control that spreads scale byte a over int16 lanes 0..15 and b
 * over 16..31 (the high byte of each lane zeroed) */
#define SCALE_PAIR(a, b)                                                                      \
    _mm512_set_epi64(SC16(b), SC16(b), SC16(b), SC16(b), SC16(a), SC16(a), SC16(a), SC16(a))
#define SC16(j) ((long long)((0x8000ull | (j)) * 0x0001000100010001ull))

TL_TARGET_VNNI static inline __m512i load_halves(const int8_t *lo, const int8_t *hi)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(const void *)lo)),
                              _mm256_loadu_si256((const __m256i *)(const void *)hi), 1);
}

TL_TARGET_VNNI static inline __m512i load512(const void *p)
{
    return _mm512_loadu_si512(p);
}

/* 32 bytes of high bits b as [b | b >> 2] (16-bit shifts: each byte's own
 * bits are picked out later with a per-byte mask) */
TL_TARGET_VNNI static inline __m512i high_bits2(const uint8_t *qh)
{
    __m256i b = _mm256_loadu_si256((const __m256i *)(const void *)qh);
    return _mm512_inserti64x4(_mm512_castsi256_si512(b), _mm256_srli_epi16(b, 2), 1);
}

/* One row's super-block: sum over sub-blocks of scale * (u . x), int32
 * lanes; qh5 is a Q5_K block's fifth bits, NULL for Q4_K. */
TL_TARGET_VNNI __attribute__((always_inline)) static inline __m512i
k4_block(const uint8_t *qs, const uint8_t *qh5, uint64_t scales8, const __m512i x[4])
{
    const __m512i m4 = _mm512_set1_epi8(15), one = _mm512_set1_epi8(1);
    __m512i a = load512(qs), b = load512(qs + 64);
    __m512i u[4] = {_mm512_and_si512(a, m4), _mm512_and_si512(_mm512_srli_epi16(a, 4), m4),
                    _mm512_and_si512(b, m4), _mm512_and_si512(_mm512_srli_epi16(b, 4), m4)};
    if (qh5) {
        /* bit k of qh[l] is value 32k + l's fifth bit */
        __m512i h = high_bits2(qh5), h4 = _mm512_srli_epi16(h, 4);
        u[0] = _mm512_or_si512(u[0], _mm512_slli_epi16(_mm512_and_si512(h, one), 4));
        u[1] = _mm512_or_si512(u[1], _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(h, 1), one), 4));
        u[2] = _mm512_or_si512(u[2], _mm512_slli_epi16(_mm512_and_si512(h4, one), 4));
        u[3] = _mm512_or_si512(u[3], _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(h4, 1), one), 4));
    }
    __m512i s = _mm512_set1_epi64((long long)scales8);
    __m512i acc = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_maddubs_epi16(u[0], x[0]),
                                      _mm512_shuffle_epi8(s, SCALE_PAIR(0, 2)));
    acc = _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(u[1], x[1]), _mm512_shuffle_epi8(s, SCALE_PAIR(1, 3)));
    acc = _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(u[2], x[2]), _mm512_shuffle_epi8(s, SCALE_PAIR(4, 6)));
    return _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(u[3], x[3]), _mm512_shuffle_epi8(s, SCALE_PAIR(5, 7)));
}

TL_TARGET_VNNI static inline float hsum128(__m128 v)
{
    v = _mm_add_ps(v, _mm_movehl_ps(v, v));
    return _mm_cvtss_f32(_mm_add_ss(v, _mm_movehdup_ps(v)));
}

/* nr (1..ROWS, a constant after inlining) rows from `row`, one token.
 * Block sums: d * dx * sum_j sc_j (u_j . x_j) in 16 float lanes, and
 * dmin * dx * sum_j mn_j * (sum of x over sub-block j) in 4. */
TL_TARGET_VNNI __attribute__((always_inline)) static inline void
k4_rows(const unsigned char *row, size_t row_bytes, const unsigned char *stop, int nr, int q5,
        const int8_t *q, const float *d, const int16_t *bs, int nb, float *out)
{
    __m512 acc[ROWS];
    __m128 accm[ROWS];
#pragma GCC unroll 4
    for (int k = 0; k < nr; k++)
        acc[k] = _mm512_setzero_ps(), accm[k] = _mm_setzero_ps();
    for (int i = 0; i < nb; i++, q += TL_QK_K, bs += 16) {
        __m512i x[4] = {load_halves(q, q + 64), load_halves(q + 32, q + 96),
                        load_halves(q + 128, q + 192), load_halves(q + 160, q + 224)};
        __m128i pairs = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)(const void *)bs),
                                       _mm_loadu_si128((const __m128i *)(const void *)(bs + 8)));
#pragma GCC unroll 4
        for (int k = 0; k < nr; k++) {
            const unsigned char *blk = row + (size_t)k * row_bytes;
            uint16_t dh, mh;
            const uint8_t *scales, *qs, *qh = NULL;
            if (q5) {
                const tl_block_q5_k *b = (const tl_block_q5_k *)(const void *)blk + i;
                dh = b->d, mh = b->dmin, scales = b->scales, qs = b->qs, qh = b->qh;
            } else {
                const tl_block_q4_k *b = (const tl_block_q4_k *)(const void *)blk + i;
                dh = b->d, mh = b->dmin, scales = b->scales, qs = b->qs;
            }
            tl_prefetch_block(blk + (q5 ? sizeof(tl_block_q5_k) : sizeof(tl_block_q4_k)) * (size_t)i,
                              q5 ? sizeof(tl_block_q5_k) : sizeof(tl_block_q4_k), stop);
            uint32_t sw[4];
            tl_k4_scale_words(scales, sw);
            __m512i isum = k4_block(qs, qh, (uint64_t)sw[0] | (uint64_t)sw[1] << 32, x);
            acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(_cvtsh_ss(dh) * d[i]), acc[k]);
            __m128i mins = _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, (int)sw[3], (int)sw[2]));
            accm[k] = _mm_fmadd_ps(_mm_cvtepi32_ps(_mm_madd_epi16(pairs, mins)),
                                   _mm_set1_ps(_cvtsh_ss(mh) * d[i]), accm[k]);
        }
    }
#pragma GCC unroll 4
    for (int k = 0; k < nr; k++)
        out[k] = _mm512_reduce_add_ps(acc[k]) - hsum128(accm[k]);
}

/* ---- Q6_K ---------------------------------------------------------------
 * Each half block (128 values): ql[0..63]'s low nibbles are values 0..63
 * and its high nibbles 64..127, in order, so the activations are read as
 * they lie; qh[0..31] gives two bits to each (bits 0-1 for values 0..31,
 * 2-3 for 32..63, 4-5 and 6-7 for the next 64). Sub-blocks of 16: each
 * 128-bit lane of a vector is one sub-block, so the 16 int8 scales, as
 * int32 lanes holding the scale in both int16 halves, are spread with one
 * vpermd per vector. The stored values are offset by 32: that is taken out
 * once per block as 32 * sum_j sc_j * (sum of x over sub-block j). */

TL_TARGET_VNNI static inline __m512i spread4(__m512i s32, int j)
{
    return _mm512_permutexvar_epi32(_mm512_setr_epi32(j, j, j, j, j + 1, j + 1, j + 1, j + 1, j + 2, j + 2, j + 2,
                                                      j + 2, j + 3, j + 3, j + 3, j + 3),
                                    s32);
}

TL_TARGET_VNNI __attribute__((always_inline)) static inline __m512i
q6_block(const tl_block_q6_k *b, const __m512i x[4], __m256i bs)
{
    const __m512i m4 = _mm512_set1_epi8(15), m3 = _mm512_set1_epi8(3);
    __m128i sc = _mm_loadu_si128((const __m128i *)(const void *)b->scales);
    __m512i s32 = _mm512_cvtepi8_epi32(sc);
    s32 = _mm512_or_si512(_mm512_and_si512(s32, _mm512_set1_epi32(0xffff)), _mm512_slli_epi32(s32, 16));
    __m512i acc = _mm512_setzero_si512();
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        __m512i l = load512(b->ql + 64 * h), hb = high_bits2(b->qh + 32 * h);
        __m512i lo = _mm512_or_si512(_mm512_and_si512(l, m4), _mm512_slli_epi16(_mm512_and_si512(hb, m3), 4));
        __m512i hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4),
                                     _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(hb, 4), m3), 4));
        acc = _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(lo, x[2 * h]), spread4(s32, 8 * h));
        acc = _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(hi, x[2 * h + 1]), spread4(s32, 8 * h + 4));
    }
    __m256i off = _mm256_madd_epi16(_mm256_cvtepi8_epi16(sc), bs);
    return _mm512_sub_epi32(acc, _mm512_zextsi256_si512(_mm256_slli_epi32(off, 5)));
}

TL_TARGET_VNNI __attribute__((always_inline)) static inline void
q6_rows(const unsigned char *row, size_t row_bytes, const unsigned char *stop, int nr, const int8_t *q,
        const float *d, const int16_t *bs, int nb, float *out)
{
    __m512 acc[ROWS];
#pragma GCC unroll 4
    for (int k = 0; k < nr; k++)
        acc[k] = _mm512_setzero_ps();
    for (int i = 0; i < nb; i++, q += TL_QK_K, bs += 16) {
        __m512i x[4] = {load512(q), load512(q + 64), load512(q + 128), load512(q + 192)};
        __m256i bsv = _mm256_loadu_si256((const __m256i *)(const void *)bs);
#pragma GCC unroll 4
        for (int k = 0; k < nr; k++) {
            const tl_block_q6_k *b = (const tl_block_q6_k *)(const void *)(row + (size_t)k * row_bytes) + i;
            tl_prefetch_block((const unsigned char *)b, sizeof *b, stop);
            __m512i isum = q6_block(b, x, bsv);
            acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(_cvtsh_ss(b->d) * d[i]), acc[k]);
        }
    }
#pragma GCC unroll 4
    for (int k = 0; k < nr; k++)
        out[k] = _mm512_reduce_add_ps(acc[k]);
}

/* ---- rows and tokens ---------------------------------------------------- */

/* nr rows of type t against one token; `res` gets the nr results. */
TL_TARGET_VNNI __attribute__((always_inline)) static inline void
rows_once(tl_dtype t, const unsigned char *row, size_t row_bytes, const unsigned char *stop, int nr,
          const int8_t *q, const float *d, const int16_t *bs, int nb, float *res)
{
    if (t == TL_DTYPE_Q6_K)
        q6_rows(row, row_bytes, stop, nr, q, d, bs, nb, res);
    else
        k4_rows(row, row_bytes, stop, nr, t == TL_DTYPE_Q5_K, q, d, bs, nb, res);
}

TL_TARGET_VNNI static void rows_pass(tl_dtype t, const unsigned char *row, size_t row_bytes,
                                     const unsigned char *stop, int nr, const int8_t *q, const float *d,
                                     const int16_t *bs, int nb, float *res)
{
    switch (nr) {
    case 4: rows_once(t, row, row_bytes, stop, 4, q, d, bs, nb, res); break;
    case 3: rows_once(t, row, row_bytes, stop, 3, q, d, bs, nb, res); break;
    case 2: rows_once(t, row, row_bytes, stop, 2, q, d, bs, nb, res); break;
    default: rows_once(t, row, row_bytes, stop, 1, q, d, bs, nb, res); break;
    }
}

int tl_matmul_k_avx512(const tl_matrix *w, const tl_q8k_act *a, int T, float *out, int out_stride,
                       int r0, int r1)
{
    tl_dtype t = w->type;
    if ((t != TL_DTYPE_Q4_K && t != TL_DTYPE_Q5_K && t != TL_DTYPE_Q6_K) ||
        tl_cpu_detected() < TL_ISA_AVX512_VNNI)
        return 0;
    tl_k_rows_drive(rows_pass, w, a, T, out, out_stride, r0, r1);
    return 1;
}

#else

int tl_matmul_k_avx512(const tl_matrix *w, const tl_q8k_act *a, int T, float *out, int out_stride,
                       int r0, int r1)
{
    (void)w, (void)a, (void)T, (void)out, (void)out_stride, (void)r0, (void)r1;
    return 0;
}

#endif
