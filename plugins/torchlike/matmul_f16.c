#include "matmul_f16.h"

#include "simd.h"

#if TL_X86
#include <immintrin.h>
#endif

static void matmul_scalar(const tl_matrix *w, const float *x, size_t x_stride, int T, float *out, int out_stride,
                          int r0, int r1)
{
    int d = w->cols;
    for (int r = r0; r < r1; r++) {
        const uint16_t *wr = tl_matrix_row(w, r);
        for (int t = 0; t < T; t++) {
            const float *xt = x + (size_t)t * x_stride;
            float sum = 0.0f;
            for (int i = 0; i < d; i++)
                sum += tl_fp16_to_fp32(wr[i]) * xt[i];
            out[(size_t)t * (size_t)out_stride + (size_t)r] = sum;
        }
    }
}

#if TL_X86
/* LOAD(p) widens `lanes` halves at p to a float vector. */
#define F16_BODY(vec, lanes, LOAD, HSUM)                                                \
    int d = w->cols;                                                                    \
    const char *stop = (const char *)tl_matrix_row(w, r1) - 4096;                       \
    for (int r = r0; r < r1; r++) {                                                     \
        const uint16_t *wr = tl_matrix_row(w, r);                                       \
        for (const char *p = (const char *)wr; p < (const char *)(wr + d); p += 64)     \
            if (p < stop)                                                               \
                __builtin_prefetch(p + 4096);                                           \
        for (int t = 0; t < T; t++) {                                                   \
            const float *xt = x + (size_t)t * x_stride;                                \
            vec a0 = {0}, a1 = {0};                                                     \
            int i = 0;                                                                  \
            for (; i + 2 * (lanes) <= d; i += 2 * (lanes)) {                            \
                a0 += LOAD(wr + i) * *(const vec *)(xt + i);                            \
                a1 += LOAD(wr + i + (lanes)) * *(const vec *)(xt + i + (lanes));        \
            }                                                                           \
            for (; i + (lanes) <= d; i += (lanes))                                      \
                a0 += LOAD(wr + i) * *(const vec *)(xt + i);                            \
            a0 += a1;                                                                   \
            float sum = HSUM(a0);                                                       \
            for (; i < d; i++)                                                          \
                sum += tl_fp16_to_fp32(wr[i]) * xt[i];                                  \
            out[(size_t)t * (size_t)out_stride + (size_t)r] = sum;                      \
        }                                                                               \
    }

#define LOAD_F16X8(p) ((tl_v8f)_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p))))
#define LOAD_F16X16(p) ((tl_v16f)_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p))))

TL_TARGET_AVX2
static void matmul_avx2(const tl_matrix *w, const float *x, size_t x_stride, int T, float *out, int out_stride,
                        int r0, int r1)
{
    F16_BODY(tl_v8f, 8, LOAD_F16X8, TL_HSUM8)
}

TL_TARGET_AVX512
static void matmul_avx512(const tl_matrix *w, const float *x, size_t x_stride, int T, float *out, int out_stride,
                          int r0, int r1)
{
    F16_BODY(tl_v16f, 16, LOAD_F16X16, TL_HSUM16)
}
#endif

void tl_matmul_f16_isa(tl_isa isa, const tl_matrix *w, const float *x, size_t x_stride, int T, float *out,
                       int out_stride, int r0, int r1)
{
    tl_isa have = tl_cpu_detected();
    if (isa > have)
        isa = have;
    switch (isa) {
#if TL_X86
    case TL_ISA_AVX512_VNNI:
    case TL_ISA_AVX512:
        matmul_avx512(w, x, x_stride, T, out, out_stride, r0, r1);
        return;
    case TL_ISA_AVX2:
        matmul_avx2(w, x, x_stride, T, out, out_stride, r0, r1);
        return;
#endif
    default: /* SSE2 cannot widen halves in hardware */
        matmul_scalar(w, x, x_stride, T, out, out_stride, r0, r1);
        return;
    }
}

void tl_matmul_f16(const tl_matrix *w, const float *x, size_t x_stride, int T, float *out, int out_stride,
                   int r0, int r1)
{
    tl_matmul_f16_isa(tl_cpu_isa(), w, x, x_stride, T, out, out_stride, r0, r1);
}
