#include "read_probe.h"

#include <stdint.h>
#include <stdio.h>
#include <time.h>

/* One 512-byte unit per iteration into eight independent accumulators: the
 * loads never wait on an addition, and eight registers (of 16 or 32) leave
 * room so nothing is spilled (check: objdump -d read_probe.c.o, the loop
 * body is eight loads + adds, no stores). */
#define PROBE_BODY(vec, lanes, pf)                                                         \
    {                                                                                      \
        vec a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, a4 = {0}, a5 = {0}, a6 = {0}, a7 = {0}; \
        const float *p = data, *end = p + n_units * 128;                                  \
        for (; p < end; p += 128) {                                                        \
            if (pf) { /* 4 KB ahead, one per 64-byte line */                               \
                __builtin_prefetch(p + 1024); __builtin_prefetch(p + 1040);                \
                __builtin_prefetch(p + 1056); __builtin_prefetch(p + 1072);                \
                __builtin_prefetch(p + 1088); __builtin_prefetch(p + 1104);                \
                __builtin_prefetch(p + 1120); __builtin_prefetch(p + 1136);                \
            }                                                                              \
            const vec *v = (const vec *)p;                                                 \
            int s = (int)(64 / sizeof(float) / (lanes)); /* vectors per 64 bytes */        \
            a0 += v[0 * s]; a1 += v[1 * s]; a2 += v[2 * s]; a3 += v[3 * s];                \
            a4 += v[4 * s]; a5 += v[5 * s]; a6 += v[6 * s]; a7 += v[7 * s];                \
            for (int j = 1; j < s; j++) {                                                  \
                a0 += v[0 * s + j]; a1 += v[1 * s + j]; a2 += v[2 * s + j]; a3 += v[3 * s + j]; \
                a4 += v[4 * s + j]; a5 += v[5 * s + j]; a6 += v[6 * s + j]; a7 += v[7 * s + j]; \
            }                                                                              \
        }                                                                                  \
        vec t = ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7));                         \
        float sum = 0;                                                                     \
        for (int i = 0; i < (lanes); i++)                                                  \
            sum += (float)t[i];                                                            \
        return sum;                                                                        \
    }

/* Integer lanes: the probe also reads Q8_0 bytes, which as floats would
 * include NaNs and subnormals (slow paths on some CPUs); an integer add
 * costs the same on any bits. */
typedef uint32_t v4f __attribute__((vector_size(16)));
typedef uint32_t v8f __attribute__((vector_size(32)));
typedef uint32_t v16f __attribute__((vector_size(64)));

typedef float (*probe_fn)(const float *data, size_t n_units);

#if defined(__x86_64__)
__attribute__((target("avx512f"))) static float sum_avx512(const float *data, size_t n_units)
PROBE_BODY(v16f, 16, 0)
__attribute__((target("avx512f"))) static float pf_avx512(const float *data, size_t n_units)
PROBE_BODY(v16f, 16, 1)
__attribute__((target("avx2"))) static float sum_avx2(const float *data, size_t n_units)
PROBE_BODY(v8f, 8, 0)
__attribute__((target("avx2"))) static float pf_avx2(const float *data, size_t n_units)
PROBE_BODY(v8f, 8, 1)
#endif
static float sum_sse(const float *data, size_t n_units)
PROBE_BODY(v4f, 4, 0)
static float pf_sse(const float *data, size_t n_units)
PROBE_BODY(v4f, 4, 1)

static probe_fn pick(probe_kernel k, const char **isa)
{
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) {
        *isa = "AVX-512";
        return k == PROBE_SUM ? sum_avx512 : pf_avx512;
    }
    if (__builtin_cpu_supports("avx2")) {
        *isa = "AVX2";
        return k == PROBE_SUM ? sum_avx2 : pf_avx2;
    }
    *isa = "SSE2";
#else
    *isa = "generic vectors";
#endif
    return k == PROBE_SUM ? sum_sse : pf_sse;
}

const char *probe_isa(void)
{
    const char *isa;
    pick(PROBE_SUM, &isa);
    return isa;
}

const char *probe_kernel_name(probe_kernel k)
{
    return k == PROBE_SUM ? "sum" : "sum+prefetch";
}

typedef struct probe_job {
    probe_fn fn;
    const float *data;
    float sums[64];
} probe_job;

/* 256 KB chunks handed out first come, first served, as the decode's rows
 * are: a thread that is descheduled on a busy machine does not hold up the
 * read any more than it holds up a decode step. */
#define PROBE_CHUNK_UNITS 512

static void probe_task(void *ctxp, int begin, int end, int thread)
{
    probe_job *job = ctxp;
    job->sums[thread % 64] += job->fn(job->data + (size_t)begin * 128, (size_t)(end - begin));
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double probe_read(probe_kernel k, const void *data, size_t bytes, tl_thread_pool *pool)
{
    const char *isa;
    probe_job job = {pick(k, &isa), data, {0}};
    double t0 = now_s();
    tl_parallel_for(pool, (int)(bytes / 512), PROBE_CHUNK_UNITS, probe_task, &job);
    double dt = now_s() - t0;
    if (job.sums[0] == 12345.678f)
        printf("(unlikely)\n"); /* the sums are observable: the reads cannot be dropped */
    return dt;
}
