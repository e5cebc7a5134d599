#include "matmul_q8_0.h"

#include <math.h>
#include <string.h>

#include "q8_0_r16.h"
#include "simd.h"

#if TL_X86
#include <immintrin.h>
#endif

/* Compiled with -fno-math-errno (CMakeLists.txt), so lrintf is one
 * instruction; the maximum is a comparison, not fmaxf (a libm call). Every
 * ISA's kernels get the same quantised input. */
void tl_quantize_act_q8(const float *x, int cols, int8_t *q, float *scale, int32_t *sum)
{
    for (int b = 0; b < cols / TL_Q8_0_BLOCK; b++) {
        const float *v = x + b * TL_Q8_0_BLOCK;
        float amax = 0.0f;
        for (int i = 0; i < TL_Q8_0_BLOCK; i++) {
            float a = fabsf(v[i]);
            amax = a > amax ? a : amax;
        }
        float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        int32_t s = 0;
        for (int i = 0; i < TL_Q8_0_BLOCK; i++) {
            int8_t qi = (int8_t)lrintf(v[i] * id);
            q[b * TL_Q8_0_BLOCK + i] = qi;
            s += qi;
        }
        scale[b] = d;
        sum[b] = s;
    }
}

/* ---- plain Q8_0 rows (GGUF's layout): the tail rows of a repacked matrix,
 * and the reference ---------------------------------------------------- */

static void plain_scalar(const tl_matrix *w, const int8_t *xq, const float *xs, int T,
                         float *out, int out_stride, int r0, int r1)
{
    int nb = w->cols / TL_Q8_0_BLOCK;
    for (int r = r0; r < r1; r++) {
        const tl_block_q8_0 *blk = tl_matrix_row(w, r);
        for (int t = 0; t < T; t++) {
            const int8_t *q = xq + (size_t)t * (size_t)w->cols;
            const float *s = xs + (size_t)t * (size_t)nb;
            float sum = 0.0f;
            for (int b = 0; b < nb; b++) {
                int32_t dot = 0;
                for (int i = 0; i < TL_Q8_0_BLOCK; i++)
                    dot += (int32_t)blk[b].qs[i] * (int32_t)q[b * TL_Q8_0_BLOCK + i];
                sum += (float)dot * (tl_fp16_to_fp32(blk[b].d) * s[b]);
            }
            out[(size_t)t * (size_t)out_stride + (size_t)r] = sum;
        }
    }
}

#if TL_X86
/* The products of one block of 32 as eight int32 partial sums. The weights
 * are signed and the activations signed, but both vpmaddubsw and vpdpbusd
 * take one unsigned operand: |x| times (w with x's sign) is the same
 * product. Values are in [-127, 127], so a pair of products fits int16. */
#define Q8_BLOCK_AVX2(wq, xv)                                                      \
    _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8((xv), (xv)),           \
                                           _mm256_sign_epi8((wq), (xv))),          \
                      _mm256_set1_epi16(1))
#define Q8_BLOCK_VNNI(wq, xv)                                                      \
    _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8((xv), (xv)),      \
                        _mm256_sign_epi8((wq), (xv)))

/* Rows outer, tokens inner: a row (816 bytes at dim 768) stays in L1 for
 * every token. Two blocks per step into two accumulators. The prefetch
 * runs 4 KB ahead, within this call's rows only (see matvec_f32.c). */
#define Q8_MATMUL_BODY(BLOCK)                                                       \
    int nb = w->cols / TL_Q8_0_BLOCK;                                               \
    size_t row_bytes = tl_dtype_row_bytes(TL_DTYPE_Q8_0, w->cols);                  \
    const char *stop = (const char *)tl_matrix_row(w, r1) - 4096;                   \
    for (int r = r0; r < r1; r++) {                                                 \
        const tl_block_q8_0 *blk = tl_matrix_row(w, r);                             \
        for (const char *p = (const char *)blk; p < (const char *)blk + row_bytes; p += 64) \
            if (p < stop)                                                           \
                __builtin_prefetch(p + 4096);                                       \
        for (int t = 0; t < T; t++) {                                               \
            const int8_t *q = xq + (size_t)t * (size_t)w->cols;                     \
            const float *s = xs + (size_t)t * (size_t)nb;                           \
            __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();          \
            int b = 0;                                                              \
            for (; b + 2 <= nb; b += 2) {                                           \
                __m256i p0 = BLOCK(_mm256_loadu_si256((const __m256i *)blk[b].qs),  \
                                   _mm256_loadu_si256((const __m256i *)(q + b * 32))); \
                __m256i p1 = BLOCK(_mm256_loadu_si256((const __m256i *)blk[b + 1].qs), \
                                   _mm256_loadu_si256((const __m256i *)(q + b * 32 + 32))); \
                acc0 = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(blk[b].d) * s[b]),  \
                                       _mm256_cvtepi32_ps(p0), acc0);               \
                acc1 = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(blk[b + 1].d) * s[b + 1]), \
                                       _mm256_cvtepi32_ps(p1), acc1);               \
            }                                                                       \
            if (b < nb) {                                                           \
                __m256i p0 = BLOCK(_mm256_loadu_si256((const __m256i *)blk[b].qs),  \
                                   _mm256_loadu_si256((const __m256i *)(q + b * 32))); \
                acc0 = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(blk[b].d) * s[b]),  \
                                       _mm256_cvtepi32_ps(p0), acc0);               \
            }                                                                       \
            acc0 = _mm256_add_ps(acc0, acc1);                                       \
            out[(size_t)t * (size_t)out_stride + (size_t)r] = TL_HSUM8(acc0);       \
        }                                                                           \
    }

TL_TARGET_AVX2
static void plain_avx2(const tl_matrix *w, const int8_t *xq, const float *xs, int T, float *out,
                       int out_stride, int r0, int r1)
{
    Q8_MATMUL_BODY(Q8_BLOCK_AVX2)
}

TL_TARGET_VNNI
static void plain_vnni(const tl_matrix *w, const int8_t *xq, const float *xs, int T, float *out,
                       int out_stride, int r0, int r1)
{
    Q8_MATMUL_BODY(Q8_BLOCK_VNNI)
}
#endif

static void plain_rows(tl_isa isa, const tl_matrix *w, const tl_q8_act *x, int T, float *out,
                       int out_stride, int r0, int r1)
{
    switch (isa) {
#if TL_X86
    case TL_ISA_AVX512_VNNI:
        plain_vnni(w, x->q, x->scale, T, out, out_stride, r0, r1);
        return;
    case TL_ISA_AVX512: /* no VNNI: the AVX2 copy */
    case TL_ISA_AVX2:
        plain_avx2(w, x->q, x->scale, T, out, out_stride, r0, r1);
        return;
#endif
    default: /* SSE2 has no byte multiply-add worth a copy of its own */
        plain_scalar(w, x->q, x->scale, T, out, out_stride, r0, r1);
        return;
    }
}

/* ---- rows interleaved by 16 (q8_0_r16.h) -------------------------------- */

/* The reference, for any rows: the same integer block sums (weights offset
 * by 128 and the offset taken back out) and the same float steps. */
static void r16_scalar(const tl_matrix *w, const tl_q8_act *x, int T, float *out, int out_stride,
                       int r0, int r1)
{
    int nb = w->cols / TL_Q8_0_BLOCK;
    for (int r = r0; r < r1; r++) {
        const unsigned char *grp = tl_r16_group(w, r / TL_R16_ROWS);
        int j = r % TL_R16_ROWS;
        for (int t = 0; t < T; t++) {
            const int8_t *q = x->q + (size_t)t * (size_t)w->cols;
            const float *xs = x->scale + (size_t)t * (size_t)nb;
            const int32_t *xsum = x->sum + (size_t)t * (size_t)nb;
            float sum = 0.0f;
            for (int b = 0; b < nb; b++) {
                const unsigned char *qs = grp + tl_r16_qs_offset(b);
                int32_t dot = -128 * xsum[b];
                for (int i = 0; i < TL_Q8_0_BLOCK; i++)
                    dot += (int32_t)qs[(i / 4) * 64 + j * 4 + i % 4] * (int32_t)q[b * TL_Q8_0_BLOCK + i];
                sum += (float)dot * (tl_fp16_to_fp32(tl_r16_scale(w, r, b)) * xs[b]);
            }
            out[(size_t)t * (size_t)out_stride + (size_t)r] = sum;
        }
    }
}

/* Four activations of a block as one int32, to broadcast. */
static inline int32_t act4(const int8_t *q, int k)
{
    int32_t v;
    memcpy(&v, q + 4 * k, 4);
    return v;
}

/* Software prefetch of the weight stream PREFETCH_AHEAD bytes ahead of the
 * block being read: the nine lines a 544-byte block (weights and scales)
 * spans on average, straight-line code with one test, and never past the
 * rows of this call (those are usually another thread's; see
 * matvec_f32.c). */
#define PREFETCH_AHEAD 4096
static inline void prefetch_block(const unsigned char *qs, const unsigned char *stop)
{
    const unsigned char *p = qs + PREFETCH_AHEAD;
    if (p + 9 * 64 > stop)
        return;
    __builtin_prefetch(p);
    __builtin_prefetch(p + 64);
    __builtin_prefetch(p + 128);
    __builtin_prefetch(p + 192);
    __builtin_prefetch(p + 256);
    __builtin_prefetch(p + 320);
    __builtin_prefetch(p + 384);
    __builtin_prefetch(p + 448);
    __builtin_prefetch(p + 512);
}

#if TL_X86
/* One group of 16 rows for `nt` (1..4, a constant after inlining) tokens:
 * per block, the eight 64-byte weight vectors are loaded once and each
 * token's eight broadcast activation words go through vpdpbusd, whose 16
 * lanes are the 16 rows. The int32 accumulator starts at -128 * sum(x) (the
 * weights' offset), then one convert and one multiply-add per block and
 * token. */
TL_TARGET_VNNI __attribute__((always_inline)) static inline void
r16_group_vnni(const unsigned char *grp, int nb, const tl_q8_act *x, int cols, int t0, int nt,
               float *out, int out_stride, int row0, const unsigned char *stop)
{
    /* Fully unrolled (the pragmas; -O2 would not): the arrays are registers. */
    __m512 acc[4];
#pragma GCC unroll 4
    for (int j = 0; j < nt; j++)
        acc[j] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const unsigned char *qs = grp + tl_r16_qs_offset(b);
        const uint16_t *d = (const uint16_t *)(const void *)(grp + tl_r16_d_offset(nb, b));
        if (stop)
            prefetch_block(qs, stop);
        __m512i w[8];
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++)
            w[k] = _mm512_loadu_si512((const void *)(qs + 64 * k));
        __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)d));
#pragma GCC unroll 4
        for (int j = 0; j < nt; j++) {
            size_t t = (size_t)(t0 + j);
            const int8_t *q = x->q + t * (size_t)cols + 32 * (size_t)b;
            /* two chains of four: half the latency of one chain of eight */
            __m512i s = _mm512_set1_epi32(-128 * x->sum[t * (size_t)nb + (size_t)b]);
            __m512i s1 = _mm512_setzero_si512();
#pragma GCC unroll 4
            for (int k = 0; k < 8; k += 2) {
                s = _mm512_dpbusd_epi32(s, w[k], _mm512_set1_epi32(act4(q, k)));
                s1 = _mm512_dpbusd_epi32(s1, w[k + 1], _mm512_set1_epi32(act4(q, k + 1)));
            }
            s = _mm512_add_epi32(s, s1);
            __m512 scale = _mm512_mul_ps(dw, _mm512_set1_ps(x->scale[t * (size_t)nb + (size_t)b]));
            acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), scale, acc[j]);
        }
    }
#pragma GCC unroll 4
    for (int j = 0; j < nt; j++)
        _mm512_storeu_ps(out + (size_t)(t0 + j) * (size_t)out_stride + (size_t)row0, acc[j]);
}

TL_TARGET_VNNI
static void r16_vnni(const tl_matrix *w, const tl_q8_act *x, int T, float *out, int out_stride,
                     int g0, int g1)
{
    int nb = w->cols / TL_Q8_0_BLOCK;
    const unsigned char *stop = tl_r16_group(w, g1);
    for (int g = g0; g < g1; g++) {
        const unsigned char *grp = tl_r16_group(w, g);
        int row0 = g * TL_R16_ROWS, t = 0;
        /* the first pass over a group reads it from memory (and prefetches);
         * the next token groups find it in L1/L2 */
        for (; t + 4 <= T; t += 4)
            r16_group_vnni(grp, nb, x, w->cols, t, 4, out, out_stride, row0, t ? NULL : stop);
        switch (T - t) {
        case 3: r16_group_vnni(grp, nb, x, w->cols, t, 3, out, out_stride, row0, t ? NULL : stop); break;
        case 2: r16_group_vnni(grp, nb, x, w->cols, t, 2, out, out_stride, row0, t ? NULL : stop); break;
        case 1: r16_group_vnni(grp, nb, x, w->cols, t, 1, out, out_stride, row0, t ? NULL : stop); break;
        default: break;
        }
    }
}

/* 256-bit copies: the 16 lanes as two halves of 8. With AVX-VNNI (VEX
 * vpdpbusd) the same offset trick; plain AVX2 has only vpmaddubsw, whose
 * int16 pair sums would overflow with offset weights, so it takes the
 * offset off again and uses the sign trick of the plain kernels. */
#define R16_HALVES_BODY(DOT_INIT, DOT_STEP)                                                   \
    int nb = w->cols / TL_Q8_0_BLOCK;                                                        \
    const unsigned char *stop = tl_r16_group(w, g1);                                         \
    for (int g = g0; g < g1; g++) {                                                          \
        const unsigned char *grp = tl_r16_group(w, g);                                       \
        for (int t = 0; t < T; t++) {                                                        \
            const int8_t *qt = x->q + (size_t)t * (size_t)w->cols;                           \
            const float *xs = x->scale + (size_t)t * (size_t)nb;                             \
            const int32_t *xsum = x->sum + (size_t)t * (size_t)nb;                           \
            __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();                   \
            for (int b = 0; b < nb; b++) {                                                   \
                const unsigned char *qs = grp + tl_r16_qs_offset(b);                         \
                const uint16_t *d = (const uint16_t *)(const void *)(grp + tl_r16_d_offset(nb, b)); \
                if (t == 0)                                                                  \
                    prefetch_block(qs, stop);                                                \
                const int8_t *q = qt + 32 * b;                                               \
                __m256i s0, s1;                                                              \
                DOT_INIT                                                                     \
                _Pragma("GCC unroll 8")                                                      \
                for (int k = 0; k < 8; k++) {                                                \
                    __m256i xb = _mm256_set1_epi32(act4(q, k));                              \
                    __m256i w0 = _mm256_loadu_si256((const __m256i *)(const void *)(qs + 64 * k)); \
                    __m256i w1 = _mm256_loadu_si256((const __m256i *)(const void *)(qs + 64 * k + 32)); \
                    DOT_STEP                                                                 \
                }                                                                            \
                __m256 xsb = _mm256_set1_ps(xs[b]);                                          \
                __m256 d0 = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)d)), xsb); \
                __m256 d1 = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(d + 8))), xsb); \
                acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s0), d0, acc0);                    \
                acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s1), d1, acc1);                    \
            }                                                                                \
            float *o = out + (size_t)t * (size_t)out_stride + (size_t)g * TL_R16_ROWS;       \
            _mm256_storeu_ps(o, acc0);                                                       \
            _mm256_storeu_ps(o + 8, acc1);                                                   \
        }                                                                                    \
    }

#define AVXVNNI_INIT s0 = s1 = _mm256_set1_epi32(-128 * xsum[b]);
#define AVXVNNI_STEP                                                                         \
    s0 = _mm256_dpbusd_avx_epi32(s0, w0, xb);                                                \
    s1 = _mm256_dpbusd_avx_epi32(s1, w1, xb);
#define AVX2_INIT (void)xsum; s0 = s1 = _mm256_setzero_si256();
#define AVX2_STEP                                                                            \
    {                                                                                        \
        __m256i ax = _mm256_sign_epi8(xb, xb), off = _mm256_set1_epi8((char)0x80);           \
        __m256i p0 = _mm256_maddubs_epi16(ax, _mm256_sign_epi8(_mm256_xor_si256(w0, off), xb)); \
        __m256i p1 = _mm256_maddubs_epi16(ax, _mm256_sign_epi8(_mm256_xor_si256(w1, off), xb)); \
        s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(p0, _mm256_set1_epi16(1)));              \
        s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(p1, _mm256_set1_epi16(1)));              \
    }

__attribute__((target("avx2,fma,f16c,avxvnni")))
static void r16_avxvnni(const tl_matrix *w, const tl_q8_act *x, int T, float *out, int out_stride,
                        int g0, int g1)
{
    R16_HALVES_BODY(AVXVNNI_INIT, AVXVNNI_STEP)
}

TL_TARGET_AVX2
static void r16_avx2(const tl_matrix *w, const tl_q8_act *x, int T, float *out, int out_stride,
                     int g0, int g1)
{
    R16_HALVES_BODY(AVX2_INIT, AVX2_STEP)
}
#endif

/* Whole groups [g0, g1) with the level's copy. */
static void r16_groups(tl_isa isa, const tl_matrix *w, const tl_q8_act *x, int T, float *out,
                       int out_stride, int g0, int g1)
{
    switch (isa) {
#if TL_X86
    case TL_ISA_AVX512_VNNI:
        r16_vnni(w, x, T, out, out_stride, g0, g1);
        return;
    case TL_ISA_AVX512:
    case TL_ISA_AVX2:
        if (tl_cpu_avxvnni())
            r16_avxvnni(w, x, T, out, out_stride, g0, g1);
        else
            r16_avx2(w, x, T, out, out_stride, g0, g1);
        return;
#endif
    default:
        r16_scalar(w, x, T, out, out_stride, g0 * TL_R16_ROWS, g1 * TL_R16_ROWS);
        return;
    }
}

/* A repacked matrix: whole groups with the level's kernel, rows of a group
 * cut by [r0, r1) with the reference, the plain tail with the plain
 * kernels. Callers hand out rows in multiples of 16, so the middle case is
 * for correctness, not speed. */
static void r16_rows(tl_isa isa, const tl_matrix *w, const tl_q8_act *x, int T, float *out,
                     int out_stride, int r0, int r1)
{
    int grouped = w->rows / TL_R16_ROWS * TL_R16_ROWS;
    if (r1 > grouped) {
        int lo = r0 > grouped ? r0 : grouped;
        plain_rows(isa, w, x, T, out, out_stride, lo, r1);
        r1 = lo;
    }
    if (r0 >= r1)
        return;
    int g0 = (r0 + TL_R16_ROWS - 1) / TL_R16_ROWS, g1 = r1 / TL_R16_ROWS;
    if (g0 >= g1) {
        r16_scalar(w, x, T, out, out_stride, r0, r1);
        return;
    }
    if (r0 < g0 * TL_R16_ROWS)
        r16_scalar(w, x, T, out, out_stride, r0, g0 * TL_R16_ROWS);
    r16_groups(isa, w, x, T, out, out_stride, g0, g1);
    if (r1 > g1 * TL_R16_ROWS)
        r16_scalar(w, x, T, out, out_stride, g1 * TL_R16_ROWS, r1);
}

void tl_matmul_q8_0_isa(tl_isa isa, const tl_matrix *w, const tl_q8_act *x, int T, float *out,
                        int out_stride, int r0, int r1)
{
    tl_isa have = tl_cpu_detected();
    if (isa > have)
        isa = have;
    if (w->type == TL_DTYPE_Q8_0_R16)
        r16_rows(isa, w, x, T, out, out_stride, r0, r1);
    else
        plain_rows(isa, w, x, T, out, out_stride, r0, r1);
}

void tl_matmul_q8_0(const tl_matrix *w, const tl_q8_act *x, int T, float *out, int out_stride,
                    int r0, int r1)
{
    tl_matmul_q8_0_isa(tl_cpu_isa(), w, x, T, out, out_stride, r0, r1);
}
