#include "cpu.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif

static int cap = TL_ISA_AVX512_VNNI;
static int avxvnni_allowed = 1;
static int f32_stream_256 = -1;

tl_isa tl_cpu_detected(void)
{
    static int detected = -1;
    if (detected >= 0)
        return (tl_isa)detected;
    int level = TL_ISA_SSE;
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        level = TL_ISA_AVX2;
    if (level == TL_ISA_AVX2 && __builtin_cpu_supports("avx512f") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vl"))
        level = TL_ISA_AVX512;
    if (level == TL_ISA_AVX512 && __builtin_cpu_supports("avx512vnni"))
        level = TL_ISA_AVX512_VNNI;
#endif
    detected = level; /* idempotent: racing first callers store the same value */
    return (tl_isa)level;
}

tl_isa tl_cpu_isa(void)
{
    tl_isa d = tl_cpu_detected();
    return (int)d < cap ? d : (tl_isa)cap;
}

void tl_cpu_cap(tl_isa max)
{
    cap = (int)max;
}

const char *tl_isa_name(tl_isa isa)
{
    switch (isa) {
    case TL_ISA_SCALAR: return "scalar";
    case TL_ISA_SSE: return "sse2";
    case TL_ISA_AVX2: return "avx2";
    case TL_ISA_AVX512: return "avx512";
    case TL_ISA_AVX512_VNNI: return "avx512-vnni";
    }
    return "?";
}

int tl_cpu_avxvnni(void)
{
    static int detected = -1;
    if (detected < 0) {
#if defined(__x86_64__) && defined(__GNUC__)
        /* CPUID leaf 7 subleaf 1, EAX bit 4 (not every compiler's
         * __builtin_cpu_supports knows "avxvnni"); the YMM state it needs
         * is the one AVX2 detection already checked. */
        unsigned a = 0, b = 0, c = 0, d = 0;
        int leaf = __get_cpuid_count(7, 1, &a, &b, &c, &d);
        detected = tl_cpu_detected() >= TL_ISA_AVX2 && leaf && (a >> 4 & 1);
#else
        detected = 0;
#endif
    }
    return detected && avxvnni_allowed;
}

void tl_cpu_allow_avxvnni(int allow)
{
    avxvnni_allowed = allow;
}

int tl_cpu_f32_stream_256(void)
{
    return f32_stream_256 >= 0 ? f32_stream_256 : 1;
}

void tl_cpu_set_f32_stream_256(int choice)
{
    f32_stream_256 = choice;
}
