#include "matvec_f32.h"

#include "simd.h"

/* One row at a time, so the weights are a single sequential stream; four
 * independent accumulators; x stays in L1. The wide copies also prefetch
 * 4 KB ahead in the stream (but for AVX2-only CPUs, below), which measured
 * faster than the hardware prefetcher alone on a shared machine with
 * AVX-512, but never past the rows this call
 * was given: those are usually another thread's, and pulling them into
 * this core's cache would make that core fetch them from here. */
#define MATVEC_BODY(vec, lanes, HSUM, PREFETCH)                                  \
    const float *stop = w + (size_t)r1 * (size_t)d - 1024;                       \
    for (int r = r0; r < r1; r++) {                                              \
        const float *wr = w + (size_t)r * (size_t)d;                             \
        vec a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};                              \
        int i = 0;                                                               \
        for (; i + 4 * (lanes) <= d; i += 4 * (lanes)) {                         \
            if (wr + i < stop) {                                                 \
                PREFETCH                                                         \
            }                                                                    \
            a0 += *(const vec *)(wr + i) * *(const vec *)(x + i);                \
            a1 += *(const vec *)(wr + i + (lanes)) * *(const vec *)(x + i + (lanes)); \
            a2 += *(const vec *)(wr + i + 2 * (lanes)) * *(const vec *)(x + i + 2 * (lanes)); \
            a3 += *(const vec *)(wr + i + 3 * (lanes)) * *(const vec *)(x + i + 3 * (lanes)); \
        }                                                                        \
        for (; i + (lanes) <= d; i += (lanes))                                   \
            a0 += *(const vec *)(wr + i) * *(const vec *)(x + i);                \
        a0 = (a0 + a1) + (a2 + a3);                                              \
        float sum = HSUM(a0);                                                    \
        for (; i < d; i++)                                                       \
            sum += wr[i] * x[i];                                                 \
        out[r] = sum;                                                            \
    }

static void matvec_scalar(const float *w, const float *x, float *out, int d, int r0, int r1)
{
    for (int r = r0; r < r1; r++) {
        const float *wr = w + (size_t)r * (size_t)d;
        float sum = 0.0f;
        for (int i = 0; i < d; i++)
            sum += wr[i] * x[i];
        out[r] = sum;
    }
}

static void matvec_sse(const float *w, const float *x, float *out, int d, int r0, int r1)
{
    MATVEC_BODY(tl_v4f, 4, TL_HSUM4, )
}

#if TL_X86
TL_TARGET_AVX2
static void matvec_avx2(const float *w, const float *x, float *out, int d, int r0, int r1)
{
    MATVEC_BODY(tl_v8f, 8, TL_HSUM8, __builtin_prefetch(wr + i + 1024); __builtin_prefetch(wr + i + 1040);)
}

/* The same without software prefetch, for CPUs whose best level is AVX2.
 * On the AVX2-only CPU measured (a 2-core AMD EPYC Zen 3 guest) the
 * hardware prefetcher alone streamed faster: 110M F32 decode at 30-34
 * against 25 tokens/s with the prefetch at 1 thread, 45-48 against 38-44 at
 * 2 (bench/gguf, three paired rounds; 2, 4 or 8 KB ahead, or into L2 only,
 * made no difference). CPUs with AVX-512 keep the prefetching copy (the
 * note above). */
TL_TARGET_AVX2
static void matvec_avx2_hw_prefetch(const float *w, const float *x, float *out, int d, int r0, int r1)
{
    MATVEC_BODY(tl_v8f, 8, TL_HSUM8, )
}

TL_TARGET_AVX512
static void matvec_avx512(const float *w, const float *x, float *out, int d, int r0, int r1)
{
    MATVEC_BODY(tl_v16f, 16, TL_HSUM16, __builtin_prefetch(wr + i + 1024); __builtin_prefetch(wr + i + 1040);
                __builtin_prefetch(wr + i + 1056); __builtin_prefetch(wr + i + 1072);)
}
#endif

void tl_matvec_f32_isa(tl_isa isa, const float *w, const float *x, float *out, int d, int r0,
                       int r1)
{
    tl_isa have = tl_cpu_detected();
    if (isa > have)
        isa = have;
    switch (isa) {
#if TL_X86
    case TL_ISA_AVX512_VNNI:
    case TL_ISA_AVX512:
        if (tl_cpu_f32_stream_256()) /* the 256-bit copy runs faster here (cpu.h) */
            matvec_avx2(w, x, out, d, r0, r1);
        else
            matvec_avx512(w, x, out, d, r0, r1);
        return;
    case TL_ISA_AVX2:
        matvec_avx2_hw_prefetch(w, x, out, d, r0, r1);
        return;
#endif
    case TL_ISA_SCALAR:
        matvec_scalar(w, x, out, d, r0, r1);
        return;
    default:
        matvec_sse(w, x, out, d, r0, r1);
        return;
    }
}

void tl_matvec_f32(const float *w, const float *x, float *out, int d, int r0, int r1)
{
    tl_matvec_f32_isa(tl_cpu_isa(), w, x, out, d, r0, r1);
}
