/* A small seeded RNG for per-request sampling: xoshiro256** seeded through
 * splitmix64 (Blackman & Vigna). Each request owns one, so the tokens a seed
 * gives never depend on what else runs in the same batch. Header-only. */
#ifndef ILAB_HOST_RNG_H
#define ILAB_HOST_RNG_H

#include <stdint.h>

typedef struct ilab_rng {
    uint64_t s[4];
} ilab_rng;

static inline uint64_t ilab_splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline void ilab_rng_seed(ilab_rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        r->s[i] = ilab_splitmix64(&seed);
}

static inline uint64_t ilab_rng_rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static inline uint64_t ilab_rng_next(ilab_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = ilab_rng_rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = ilab_rng_rotl(s[3], 45);
    return result;
}

/* Uniform in [0, 1) with 53 bits of precision. */
static inline double ilab_rng_uniform(ilab_rng *r)
{
    return (double)(ilab_rng_next(r) >> 11) * 0x1.0p-53;
}

#endif
