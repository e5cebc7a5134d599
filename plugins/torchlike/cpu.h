/* torchlike — which instruction set the hot kernels run with.
 *
 * The build targets plain x86-64 (or whatever the compiler defaults to);
 * each hot kernel is also compiled for AVX2 and AVX-512 and one is picked at
 * run time from what this CPU supports, so no -march=native is needed and
 * the same binary runs everywhere. */
#ifndef TORCHLIKE_CPU_H
#define TORCHLIKE_CPU_H

typedef enum tl_isa {
    TL_ISA_SCALAR = 0, /* plain C loops: the reference the others are tested against */
    TL_ISA_SSE = 1,    /* the x86-64 baseline (generic vectors elsewhere) */
    TL_ISA_AVX2 = 2,   /* AVX2 + FMA + F16C */
    TL_ISA_AVX512 = 3, /* AVX-512 F/BW/DQ/VL */
    TL_ISA_AVX512_VNNI = 4,
} tl_isa;

/* The level the kernels use: the best this CPU has, unless capped below.
 * Any thread may call; the value only changes through tl_cpu_cap. */
tl_isa tl_cpu_isa(void);
/* The best level this CPU supports. */
tl_isa tl_cpu_detected(void);
/* Use at most `max` (tests run every level against the scalar reference;
 * bench/decode compares). Process-wide; call while no kernel runs. */
void tl_cpu_cap(tl_isa max);
const char *tl_isa_name(tl_isa isa);

/* AVX-VNNI (256-bit vpdpbusd, VEX-encoded) is not on the ladder above: some
 * CPUs have it without AVX-512, some AVX-512 VNNI without it. The 256-bit
 * Q8_0 kernels use it when this CPU has it, unless turned off here (tests
 * run both copies). Same threading rules as tl_cpu_cap. */
int tl_cpu_avxvnni(void);
void tl_cpu_allow_avxvnni(int allow);

/* Whether the AVX-512 levels stream fp32 weights with the 256-bit copy of
 * the single-token kernel. Measured in bench/decode at 110M, 1 thread:
 * 512-bit loads were 4% faster on one Intel Sapphire Rapids guest (15.1
 * against 14.5 tok/s), 2-15% slower on AMD Zen 5 (five paired runs) and
 * 7-15% slower on another Intel Xeon guest (family 6 model 167, three
 * runs: 25.5-26.5 against 27.6-30.1 tok/s). So the 256-bit copy is the
 * default on every CPU; tl_cpu_set_f32_stream_256(-1) restores that
 * default, 0 or 1 forces it (tests run both). */
int tl_cpu_f32_stream_256(void);
void tl_cpu_set_f32_stream_256(int choice);

#endif
