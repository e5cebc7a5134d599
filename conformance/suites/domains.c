/* The domain table: one entry per numeric or enumerated parameter, its
 * domain as the contract declares it, and the draw every domains.* test
 * takes its values from. Boundaries are always drawn; random values are
 * seeded (--seed), so a failing value is named and reproducible. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "domains.h"
#include "suites.h"

typedef struct dom_draw {
    conf_dom_value *out;
    size_t n;
} dom_draw;

static void put(dom_draw *d, uint64_t u, double f, bool inside, bool boundary)
{
    for (size_t i = 0; i < d->n; i++)
        if (d->out[i].u == u && d->out[i].f == f && d->out[i].inside == inside)
            return; /* small domains repeat boundaries */
    if (d->n < CONF_DOM_MAX_VALUES)
        d->out[d->n++] = (conf_dom_value){u, f, inside, boundary};
}

static uint64_t below(uint64_t *rng, uint64_t n)
{
    return n ? conf_splitmix64(rng) % n : 0;
}

/* integer domain lo..hi with its boundaries and the values just outside */
static void int_range(dom_draw *d, uint64_t lo, uint64_t hi, uint64_t *rng, size_t n_random,
                      bool below_lo_invalid, bool above_hi_invalid)
{
    put(d, lo, 0, true, true);
    put(d, lo + 1 <= hi ? lo + 1 : hi, 0, true, true);
    put(d, hi > lo ? hi - 1 : lo, 0, true, true);
    put(d, hi, 0, true, true);
    for (size_t i = 0; i < n_random; i++)
        put(d, lo + below(rng, hi - lo + 1), 0, true, false);
    if (below_lo_invalid)
        put(d, lo - 1, 0, false, true);
    if (above_hi_invalid)
        put(d, hi + 1, 0, false, true);
}

/* float domain from lo to hi (hi finite), each end closed or open: the
 * ends or, at an open end, the float just inside it; seeded values inside;
 * then outside: the float just past a closed end, an open end itself, NaN
 * and both infinities. Drawn as floats: the API takes floats. */
static void float_range(dom_draw *d, float lo, bool lo_closed, float hi, bool hi_closed, uint64_t *rng,
                        size_t n_random)
{
    float in_lo = lo_closed ? lo : nextafterf(lo, hi), in_hi = hi_closed ? hi : nextafterf(hi, lo);
    put(d, 0, in_lo, true, true);
    put(d, 0, nextafterf(in_lo, hi), true, true);
    put(d, 0, nextafterf(in_hi, lo), true, true);
    put(d, 0, in_hi, true, true);
    for (size_t i = 0; i < n_random; i++)
        put(d, 0, (float)(lo + (double)below(rng, 1000001) / 1e6 * ((double)hi - lo)), true, false);
    put(d, 0, lo_closed ? nextafterf(lo, -INFINITY) : lo, false, true);
    put(d, 0, hi_closed ? nextafterf(hi, INFINITY) : hi, false, true);
    put(d, 0, (double)NAN, false, true);
    put(d, 0, (double)INFINITY, false, true);
    put(d, 0, -(double)INFINITY, false, true);
}

size_t conf_dom_draw(conf_dom_id id, const conf_env *env, uint64_t seed, size_t n_random,
                     conf_dom_value *out)
{
    dom_draw d = {out, 0};
    uint64_t rng = seed ^ ((uint64_t)id * 0x9e3779b97f4a7c15ULL);
    uint64_t mb = env->m->max_batch > 0 ? (uint64_t)env->m->max_batch : 1;
    uint64_t v = env->info.vocab_size > 0 ? (uint64_t)env->info.vocab_size : 1;
    uint64_t mc = (uint64_t)conf_max_context(env);
    switch (id) {
    case CONF_DOM_BATCH: /* 1..max_batch; 0 and max_batch + 1 refused (LOG-6) */
        int_range(&d, 1, mb, &rng, n_random, true, true);
        break;
    case CONF_DOM_TOP_LOGPROBS: /* 0..topk_max; -1 and topk_max + 1 refused (STR-9, SMP-7) */
        int_range(&d, 0, (uint64_t)(env->m->topk_max > 0 ? env->m->topk_max : 0), &rng, n_random,
                  false, true);
        put(&d, (uint64_t)-1, 0, false, true);
        break;
    case CONF_DOM_SEED: { /* every 64-bit value (SMP-2) */
        static const uint64_t edges[] = {0, 1, 0x7fffffffULL, 0x80000000ULL, 0xffffffffULL,
                                         0x100000000ULL, 0x8000000000000000ULL, UINT64_MAX};
        for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++)
            put(&d, edges[i], 0, true, true);
        for (size_t i = 0; i < n_random; i++)
            put(&d, conf_splitmix64(&rng), 0, true, false);
        break;
    }
    case CONF_DOM_TEMPERATURE: { /* 0 and [1e-45, FLT_MAX]; negative, NaN, inf refused (SMP-5) */
        static const double edges[] = {0.0, 1e-45, FLT_MIN, 1e-6, 0.07, 1.0, 2.0, 100.0, FLT_MAX};
        for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++)
            put(&d, 0, edges[i], true, true);
        for (size_t i = 0; i < n_random; i++) /* log-uniform over 1e-6..10 */
            put(&d, 0, exp(log(1e-6) + (double)below(&rng, 1000000) / 1e6 * (log(10.0) - log(1e-6))),
                true, false);
        put(&d, 0, -1e-45, false, true);
        put(&d, 0, -1.0, false, true);
        put(&d, 0, (double)NAN, false, true);
        put(&d, 0, (double)INFINITY, false, true);
        break;
    }
    case CONF_DOM_TOP_K: /* 0 (off) and every k >= 1, k past the vocabulary keeping all; -1 refused */
        put(&d, 0, 0, true, true);
        put(&d, 1, 0, true, true);
        put(&d, v - 1, 0, true, true);
        put(&d, v, 0, true, true);
        put(&d, v + 1, 0, true, true);
        for (size_t i = 0; i < n_random; i++)
            put(&d, 2 + below(&rng, v > 3 ? v - 3 : 1), 0, true, false);
        put(&d, (uint64_t)-1, 0, false, true);
        break;
    case CONF_DOM_TEXT_BYTES: /* 0 up to past max_context tokens, in bytes: tens of KB */
        put(&d, 0, 0, true, true);
        put(&d, 1, 0, true, true);
        put(&d, mc > 1 ? mc - 1 : 1, 0, true, true);
        put(&d, mc, 0, true, true);
        put(&d, mc + 1, 0, true, true);
        put(&d, 4 * mc + 3, 0, true, true);
        put(&d, 40000, 0, true, true);
        for (size_t i = 0; i < n_random; i++)
            put(&d, 2 + below(&rng, 65536), 0, true, false);
        break;
    case CONF_DOM_STOP_BYTES: /* 1..4096 bytes, up to 16 strings (STR-6) */
        int_range(&d, 1, 4096, &rng, n_random, false, false);
        put(&d, 2, 0, true, true);
        put(&d, 1024, 0, true, true);
        break;
    case CONF_DOM_TOK_FLAGS: { /* every combination of the known flags; any other bit refused
                                  (TOK-8); PARSE_SPECIAL (bit 2) is known with chat (TOK-11),
                                  whose own ids are TOK-11's to check: here it is left out */
        uint64_t unknown = env->m->chat ? 8 : 4; /* the lowest unknown bit */
        for (uint64_t f = 0; f < 4; f++)
            put(&d, f, 0, true, true);
        put(&d, unknown, 0, false, true);
        put(&d, 1 | unknown, 0, false, true);
        put(&d, 3 | unknown << 1, 0, false, true);
        put(&d, 1u << 31, 0, false, true);
        put(&d, 0xffffffffu, 0, false, true);
        for (size_t i = 0; i < n_random; i++) {
            uint64_t f = (conf_splitmix64(&rng) & 0xffffffffu) |
                         unknown << below(&rng, env->m->chat ? 28 : 29);
            put(&d, f, 0, false, false);
        }
        break;
    }
    case CONF_DOM_TOP_P: /* (0, 1]; 1 off (SMP-5 5.) */
        float_range(&d, 0.0f, false, 1.0f, true, &rng, n_random);
        put(&d, 0, 1e-6, true, true);
        break;
    case CONF_DOM_MIN_P: /* [0, 1]; 0 off, 1 keeps the ties at the maximum (SMP-5 6., SMP-3) */
        float_range(&d, 0.0f, true, 1.0f, true, &rng, n_random);
        break;
    case CONF_DOM_REPETITION: /* r > 0, 1 off (SMP-5 1.); every finite float above 0 */
        float_range(&d, 0.0f, false, FLT_MAX, true, &rng, n_random);
        put(&d, 0, 1.0, true, true);
        put(&d, 0, 1e-30, true, true);
        put(&d, 0, 1e30, true, true);
        break;
    case CONF_DOM_PRESENCE:  /* [-2, 2], 0 off (SMP-5 2.) */
    case CONF_DOM_FREQUENCY: /* [-2, 2], 0 off (SMP-5 2.) */
        float_range(&d, -2.0f, true, 2.0f, true, &rng, n_random);
        put(&d, 0, 0.0, true, true);
        break;
    case CONF_DOM_COUNT:
        break;
    }
    return d.n;
}

const char *conf_dom_name(conf_dom_id id)
{
    static const char *const names[CONF_DOM_COUNT] = {
        "batch size", "top_logprobs", "seed", "temperature", "top_k", "text bytes", "stop-string bytes",
        "tokenize flags", "top_p", "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty",
    };
    return id < CONF_DOM_COUNT ? names[id] : "?";
}
