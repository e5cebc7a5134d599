/* torchlike — vector types and the per-ISA compile switch shared by the
 * kernel files. Kernels are written once as macros over a vector type and
 * instantiated per instruction set with a target attribute, so each copy is
 * compiled for its ISA inside a baseline build; cpu.h picks one at run time.
 * Vectors never cross a call between copies (their calling conventions
 * differ by ISA): each copy is a whole loop. */
#ifndef TORCHLIKE_SIMD_H
#define TORCHLIKE_SIMD_H

#include <stddef.h>
#include <stdint.h>

typedef float tl_v4f __attribute__((vector_size(16), aligned(4), may_alias));
typedef float tl_v8f __attribute__((vector_size(32), aligned(4), may_alias));
typedef float tl_v16f __attribute__((vector_size(64), aligned(4), may_alias));

/* Horizontal sums as halving trees: four shuffle+add pairs for 16 lanes
 * instead of a chain of 15 dependent scalar additions, which a kernel pays
 * once per output. Macros: a vector argument would be passed by value. */
#define TL_HSUM4(v) ((v)[0] + (v)[2] + ((v)[1] + (v)[3]))
#define TL_HSUM8(v) \
    TL_HSUM4(__builtin_shufflevector((v), (v), 0, 1, 2, 3) + __builtin_shufflevector((v), (v), 4, 5, 6, 7))
#define TL_HSUM16(v)                                                                        \
    TL_HSUM8(__builtin_shufflevector((v), (v), 0, 1, 2, 3, 4, 5, 6, 7) +                    \
             __builtin_shufflevector((v), (v), 8, 9, 10, 11, 12, 13, 14, 15))

#if defined(__x86_64__) && defined(__GNUC__)
#define TL_X86 1
#define TL_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#define TL_TARGET_AVX512 \
    __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c")))
#define TL_TARGET_VNNI \
    __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,avx2,fma,f16c")))
#else
#define TL_X86 0
#endif

#endif
