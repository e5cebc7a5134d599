/* domains.*: generation parameters swept over their domains (domains.c) —
 * top_logprobs, seed, temperature, top_k and stop-string lengths. Each value
 * inside must run, each value outside must be refused with no TOKEN; what
 * every stream owes besides (grammar, usage, top-k lists) the validation
 * layer checks on each of them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "domains.h"
#include "suites.h"

#define PROMPT 6

static void params(conf_env *env, conf_gen_params *p, int32_t *prompt, uint64_t salt, int steps)
{
    conf_prompt_tokens(env, env->opt->seed + salt, prompt, PROMPT);
    conf_gen_params_default(p, prompt, PROMPT);
    p->max_tokens = steps;
    p->ignore_eos = true;
}

/* Runs p; CONF_PASS with g filled (the caller frees it) when it ran. */
static conf_result run(conf_env *env, const conf_gen_params *p, conf_gen *g, char *msg, size_t cap)
{
    conf_result r = conf_generate(env, p, g, msg, cap);
    if (r != CONF_PASS)
        conf_gen_free(g);
    return r;
}

/* SMP-7: a plugin that samples itself through an engine that cannot take
 * a value may refuse it — one ERROR, no TOKEN, the message naming the
 * parameter. Allowed only where real engines stop short of the domain: a
 * seed past 2^63 - 1 (signed seeds), a temperature past 2 (the OpenAI
 * range) and a repetition penalty other than 1 (servers bound it). */
static bool engine_refused(const conf_env *env, const conf_gen *g, const char *param)
{
    return env->m->sampling == ILAB_SAMPLING_BACKEND && g->n_tokens == 0 &&
           (g->status == ILAB_INVALID_ARGUMENT || g->status == ILAB_UNSUPPORTED) &&
           strstr(g->error, param) != NULL;
}

/* A value inside the domain: the stream runs to max_tokens. */
static bool ran(const conf_gen *g, const conf_gen_params *p, const char *what, char *msg, size_t cap)
{
    CONF_CHECK_BOOL(g->status == ILAB_OK && g->terminal == ILAB_EVENT_FINISH,
                    "%s is inside its domain but the request ended with %s: %s", what,
                    ilab_status_name(g->status), g->error);
    CONF_CHECK_BOOL(g->n_tokens == (size_t)p->max_tokens && g->finish_reason == ILAB_FINISH_LENGTH,
                    "%s: %zu TOKEN events and FINISH(%s), want %d and length (ignore_eos)", what,
                    g->n_tokens, ilab_finish_reason_name(g->finish_reason), p->max_tokens);
    return true;
}

/* A value outside: refused, no TOKEN. */
static bool refused(const conf_gen *g, const char *what, char *msg, size_t cap)
{
    CONF_CHECK_BOOL(g->status != ILAB_OK && g->n_tokens == 0,
                    "%s is outside its domain but the request gave %s after %zu TOKEN events", what,
                    ilab_status_name(g->status), g->n_tokens);
    return true;
}

conf_result conf_dom_top_logprobs(conf_env *env, char *msg, size_t cap)
{
    CONF_SKIP_UNLESS(env->m->topk_max > 0, "topk_max > 0");
    conf_dom_value val[CONF_DOM_MAX_VALUES];
    size_t n = conf_dom_draw(CONF_DOM_TOP_LOGPROBS, env, env->opt->seed, 4, val);
    int32_t prompt[PROMPT];
    for (size_t i = 0; i < n; i++) {
        conf_gen_params p;
        params(env, &p, prompt, 70, 3);
        p.top_logprobs = (int32_t)val[i].u;
        conf_gen g;
        conf_result r = run(env, &p, &g, msg, cap);
        if (r != CONF_PASS)
            return r;
        char what[64];
        snprintf(what, sizeof what, "top_logprobs %d (topk_max %d)", (int)p.top_logprobs, env->m->topk_max);
        bool ok = val[i].inside ? ran(&g, &p, what, msg, cap) : refused(&g, what, msg, cap);
        uint32_t want = (uint32_t)(p.top_logprobs < env->info.vocab_size ? p.top_logprobs : env->info.vocab_size);
        for (size_t t = 0; ok && val[i].inside && t < g.n_tokens; t++)
            if (g.n_top[t] != want) {
                CONF_MSG("%s: TOKEN %zu carries %u top logprobs, want %u", what, t, g.n_top[t], want);
                ok = false;
            }
        conf_gen_free(&g);
        if (!ok)
            return CONF_FAIL;
    }
    CONF_MSG("%zu values of top_logprobs, 0..%d and past it", n, env->m->topk_max);
    return CONF_PASS;
}

static conf_result tokens_for_seed(conf_env *env, uint64_t seed, int32_t *out, size_t *n, char *msg,
                                   size_t cap)
{
    enum { STEPS = 24 };
    int32_t prompt[PROMPT];
    conf_gen_params p;
    params(env, &p, prompt, 71, STEPS);
    p.sampling.temperature = 1.0f;
    p.sampling.seed = seed;
    conf_gen g;
    conf_result r = run(env, &p, &g, msg, cap);
    if (r != CONF_PASS)
        return r;
    char what[64];
    snprintf(what, sizeof what, "seed %llu", (unsigned long long)seed);
    if (seed > (uint64_t)INT64_MAX && engine_refused(env, &g, "seed")) {
        conf_gen_free(&g);
        *n = 0;
        return CONF_SKIP;
    }
    bool ok = ran(&g, &p, what, msg, cap);
    *n = g.n_tokens < STEPS ? g.n_tokens : STEPS;
    if (*n)
        memcpy(out, g.tokens, *n * sizeof *out);
    conf_gen_free(&g);
    return ok ? CONF_PASS : CONF_FAIL;
}

conf_result conf_dom_seed(conf_env *env, char *msg, size_t cap)
{
    conf_dom_value val[CONF_DOM_MAX_VALUES];
    size_t n = conf_dom_draw(CONF_DOM_SEED, env, env->opt->seed, 4, val);
    int32_t a[24], b[24], c[24];
    size_t na, nb, nc, differ = 0, pairs = 0, refused = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t s = val[i].u, high = s ^ (1ULL << (32 + (i * 7) % 32));
        conf_result r = tokens_for_seed(env, s, a, &na, msg, cap);
        if (r == CONF_PASS)
            r = tokens_for_seed(env, s, b, &nb, msg, cap);
        if (r == CONF_SKIP) {
            refused++;
            continue;
        }
        if (r != CONF_PASS)
            return r;
        CONF_CHECK(na == nb && (na == 0 || memcmp(a, b, na * sizeof *a) == 0),
                   "seed %llu gave different tokens on two runs (SMP-2)", (unsigned long long)s);
        r = tokens_for_seed(env, high, c, &nc, msg, cap);
        if (r == CONF_SKIP) {
            refused++;
            continue;
        }
        if (r != CONF_PASS)
            return r;
        pairs++;
        differ += na != nc || (na > 0 && memcmp(a, c, na * sizeof *a) != 0);
    }
    CONF_CHECK(differ > 0,
               "seeds that differ only above bit 31 gave the same 24 tokens at temperature 1 in all "
               "%zu pairs (the seed is cut to 32 bits?)",
               pairs);
    CONF_MSG("%zu seeds over 0..2^64-1 repeat; %zu of %zu pairs differing above bit 31 differ; %zu "
             "past 2^63-1 refused by the engine (SMP-7)",
             n, differ, pairs, refused);
    return CONF_PASS;
}

conf_result conf_dom_temperature(conf_env *env, char *msg, size_t cap)
{
    conf_dom_value val[CONF_DOM_MAX_VALUES];
    size_t n = conf_dom_draw(CONF_DOM_TEMPERATURE, env, env->opt->seed, 3, val);
    int32_t prompt[PROMPT];
    for (size_t i = 0; i < n; i++) {
        conf_gen_params p;
        params(env, &p, prompt, 72, 6);
        p.sampling.temperature = (float)val[i].f;
        p.sampling.seed = env->opt->seed + i;
        bool tiny = val[i].inside && val[i].f > 0 && val[i].f <= 1e-6;
        if (tiny && env->m->topk_max > 0)
            p.top_logprobs = 1;
        conf_gen g;
        conf_result r = run(env, &p, &g, msg, cap);
        if (r != CONF_PASS)
            return r;
        char what[64];
        snprintf(what, sizeof what, "temperature %g", val[i].f);
        if (val[i].inside && val[i].f > 2.0 && engine_refused(env, &g, "temperature")) {
            conf_gen_free(&g);
            continue;
        }
        bool ok = val[i].inside ? ran(&g, &p, what, msg, cap) : refused(&g, what, msg, cap);
        /* near 0 the draw is the argmax: its logprob is the largest listed */
        for (size_t t = 0; ok && tiny && p.top_logprobs > 0 && t < g.n_tokens; t++)
            if (g.n_top[t] >= 1 && g.logprob[t] < g.top_lp[t * CONF_GEN_TOPK] - 1e-4f) {
                CONF_MSG("%s: step %zu drew id %d (logprob %g) though id %d has %g: not the argmax",
                         what, t, g.tokens[t], (double)g.logprob[t], g.top_id[t * CONF_GEN_TOPK],
                         (double)g.top_lp[t * CONF_GEN_TOPK]);
                ok = false;
            }
        conf_gen_free(&g);
        if (!ok)
            return CONF_FAIL;
    }
    CONF_MSG("%zu temperatures from 0 and 1e-45 to FLT_MAX, and outside", n);
    return CONF_PASS;
}

conf_result conf_dom_top_k(conf_env *env, char *msg, size_t cap)
{
    conf_dom_value val[CONF_DOM_MAX_VALUES];
    size_t n = conf_dom_draw(CONF_DOM_TOP_K, env, env->opt->seed, 2, val);
    int32_t prompt[PROMPT], greedy[6];
    conf_gen_params p;
    params(env, &p, prompt, 73, 6);
    conf_gen g;
    conf_result r = run(env, &p, &g, msg, cap);
    if (r != CONF_PASS)
        return r;
    bool ok = ran(&g, &p, "temperature 0", msg, cap);
    if (ok) /* 6 tokens (no memcpy from a NULL array: UBSan) */
        memcpy(greedy, g.tokens, sizeof greedy);
    conf_gen_free(&g);
    if (!ok)
        return CONF_FAIL;
    for (size_t i = 0; i < n; i++) {
        params(env, &p, prompt, 73, 6);
        p.sampling.temperature = 1.0f;
        p.sampling.seed = env->opt->seed + 100 + i;
        p.sampling.top_k = (int32_t)val[i].u;
        r = run(env, &p, &g, msg, cap);
        if (r != CONF_PASS)
            return r;
        char what[80];
        snprintf(what, sizeof what, "top_k %d (vocabulary %d)", (int)p.sampling.top_k, (int)env->info.vocab_size);
        ok = val[i].inside ? ran(&g, &p, what, msg, cap) : refused(&g, what, msg, cap);
        if (ok && p.sampling.top_k == 1 && g.n_tokens == 6 && memcmp(g.tokens, greedy, sizeof greedy) != 0) {
            CONF_MSG("top_k 1 at temperature 1 differs from greedy (SMP-3)");
            ok = false;
        }
        conf_gen_free(&g);
        if (!ok)
            return CONF_FAIL;
    }
    CONF_MSG("%zu values of top_k: 0, 1, vocab-1, vocab, vocab+1, random, -1", n);
    return CONF_PASS;
}

/* SMP-5's ranges of the float sampling parameters, each swept over its
 * domain (ends, floats just inside an open end and just outside a closed
 * one, NaN, infinities) at temperature 1, the others off: inside runs to
 * max_tokens, outside is refused with no TOKEN. */
static float *sampling_field(ilab_sampling_t *s, conf_dom_id id)
{
    switch (id) {
    case CONF_DOM_TOP_P: return &s->top_p;
    case CONF_DOM_MIN_P: return &s->min_p;
    case CONF_DOM_REPETITION: return &s->repetition_penalty;
    case CONF_DOM_PRESENCE: return &s->presence_penalty;
    default: return &s->frequency_penalty;
    }
}

/* The value that turns a processor off, and one well inside its range. */
static float neutral_value(conf_dom_id id)
{
    return id == CONF_DOM_TOP_P ? 1.0f : id == CONF_DOM_REPETITION ? 1.0f : 0.0f;
}

static float middle_value(conf_dom_id id)
{
    return id == CONF_DOM_TOP_P ? 0.9f : id == CONF_DOM_MIN_P ? 0.05f : id == CONF_DOM_REPETITION ? 1.1f : 0.5f;
}

/* One T = 1 request with the field set to v, into p (its prompt in
 * `prompt`); CONF_PASS with g filled. */
static conf_result run_value(conf_env *env, conf_dom_id id, float v, uint64_t seed, conf_gen_params *p,
                             int32_t *prompt, conf_gen *g, char *msg, size_t cap)
{
    params(env, p, prompt, 74 + (uint64_t)id, 4);
    p->sampling.temperature = 1.0f;
    p->sampling.seed = seed;
    *sampling_field(&p->sampling, id) = v;
    return run(env, p, g, msg, cap);
}

/* SMP-7: a processor the plugin does not implement is refused at any value
 * but its neutral one (UNSUPPORTED, no TOKEN). Asked with a value well
 * inside the range. */
static conf_result implemented(conf_env *env, conf_dom_id id, bool *yes, char *msg, size_t cap)
{
    conf_gen g;
    conf_gen_params p;
    int32_t prompt[PROMPT];
    conf_result r = run_value(env, id, middle_value(id), env->opt->seed + 199, &p, prompt, &g, msg, cap);
    if (r != CONF_PASS)
        return r;
    *yes = !(g.status == ILAB_UNSUPPORTED && g.n_tokens == 0);
    conf_gen_free(&g);
    return CONF_PASS;
}

conf_result conf_dom_sampling_ranges(conf_env *env, char *msg, size_t cap)
{
    static const conf_dom_id ids[] = {CONF_DOM_TOP_P, CONF_DOM_MIN_P, CONF_DOM_REPETITION, CONF_DOM_PRESENCE,
                                      CONF_DOM_FREQUENCY};
    size_t total = 0, unimplemented = 0;
    for (size_t k = 0; k < sizeof ids / sizeof ids[0]; k++) {
        bool impl = true;
        conf_result r = implemented(env, ids[k], &impl, msg, cap);
        if (r != CONF_PASS)
            return r;
        unimplemented += !impl;
        conf_dom_value val[CONF_DOM_MAX_VALUES];
        size_t n = conf_dom_draw(ids[k], env, env->opt->seed, 2, val);
        for (size_t i = 0; i < n; i++, total++) {
            float v = (float)val[i].f;
            conf_gen g;
            conf_gen_params p;
            int32_t prompt[PROMPT];
            r = run_value(env, ids[k], v, env->opt->seed + 200 + total, &p, prompt, &g, msg, cap);
            if (r != CONF_PASS)
                return r;
            char what[96];
            snprintf(what, sizeof what, "%s %.9g (%s%s)", conf_dom_name(ids[k]), val[i].f,
                     val[i].inside ? "inside its range" : "outside its range",
                     impl ? "" : "; the plugin refuses it as unimplemented");
            /* engines bound the repetition penalty more tightly than SMP-5
             * (a server may take 0.01 to 10): SMP-7 lets them refuse it */
            bool engine_may_refuse = ids[k] == CONF_DOM_REPETITION && val[i].f != 1.0 &&
                                     engine_refused(env, &g, "repetition_penalty");
            bool must_refuse = !val[i].inside || (!impl && v != neutral_value(ids[k]));
            bool ok = must_refuse         ? refused(&g, what, msg, cap)
                      : engine_may_refuse ? true
                                          : ran(&g, &p, what, msg, cap);
            conf_gen_free(&g);
            if (!ok)
                return CONF_FAIL;
        }
    }
    CONF_MSG("%zu values of top_p, min_p, repetition, presence and frequency penalties, at and past "
             "the ends of their ranges (%zu of the five unimplemented: refused but at their neutral value)",
             total, unimplemented);
    return CONF_PASS;
}

/* A stop string cut from the output text X at [o, o+len): whole code
 * points, no NUL. */
static bool cut_ok(const char *x, size_t nx, size_t o, size_t len)
{
    if (o + len > nx || memchr(x + o, '\0', len))
        return false;
    unsigned char first = (unsigned char)x[o];
    unsigned char next = o + len < nx ? (unsigned char)x[o + len] : 0;
    return (first & 0xc0) != 0x80 && (next & 0xc0) != 0x80;
}

static const char *find_bytes(const char *h, size_t nh, const char *n, size_t nn)
{
    for (size_t i = 0; i + nn <= nh; i++)
        if (memcmp(h + i, n, nn) == 0)
            return h + i;
    return NULL;
}

static bool one_stop_length(conf_env *env, const conf_gen *base, size_t len, uint64_t *rng,
                            conf_result *r, char *msg, size_t cap)
{
    enum { SET = 16 };
    const char *x = base->text;
    size_t nx = base->text_len;
    char *strs[SET] = {0};
    const char *stop[SET];
    size_t n_stop = 0, want_len = nx;
    bool want_stop = false, ok = true;
    if (len <= nx) {
        /* one string cut from the output: the stream stops at its first occurrence */
        size_t o = SIZE_MAX;
        for (int tries = 0; tries < 32 && o == SIZE_MAX; tries++) {
            size_t at = (size_t)(conf_splitmix64(rng) % (nx - len + 1));
            if (cut_ok(x, nx, at, len))
                o = at;
        }
        if (o == SIZE_MAX)
            return true; /* no clean cut of this length in this output */
        strs[0] = malloc(len + 1);
        memcpy(strs[0], x + o, len);
        strs[0][len] = '\0';
        n_stop = 1;
        want_len = (size_t)(find_bytes(x, nx, strs[0], len) - x);
        want_stop = true;
    } else {
        /* 16 strings longer than the whole output, the first starting with
         * all of it: held back to the very end, then given out */
        if (memchr(x, '\0', nx))
            return true;
        for (size_t i = 0; i < SET; i++) {
            strs[i] = malloc(len + 1);
            for (size_t k = 0; k < len; k++)
                strs[i][k] = (char)('a' + conf_splitmix64(rng) % 26);
            strs[i][len] = '\0';
        }
        memcpy(strs[0], x, nx);
        n_stop = SET;
    }
    for (size_t i = 0; i < n_stop; i++)
        stop[i] = strs[i];
    int32_t prompt[PROMPT];
    conf_gen_params p;
    params(env, &p, prompt, 74, 24);
    p.stop = stop;
    p.n_stop = n_stop;
    conf_gen g;
    *r = run(env, &p, &g, msg, cap);
    if (*r == CONF_PASS) {
        if (g.status != ILAB_OK || g.terminal != ILAB_EVENT_FINISH) {
            CONF_MSG("%zu stop string(s) of %zu bytes were refused (%s: %s); STR-6 says up to 16 of "
                     "up to 4096 bytes must be accepted",
                     n_stop, len, ilab_status_name(g.status), g.error);
            ok = false;
        } else if (want_stop && g.finish_reason != ILAB_FINISH_STOP) {
            CONF_MSG("a %zu-byte stop string cut from the output did not stop the stream (FINISH %s)",
                     len, ilab_finish_reason_name(g.finish_reason));
            ok = false;
        } else if (g.text_len != want_len || (want_len > 0 && memcmp(g.text, x, want_len) != 0)) {
            CONF_MSG("with %zu stop string(s) of %zu bytes the text has %zu bytes, want the output's "
                     "first %zu",
                     n_stop, len, g.text_len, want_len);
            ok = false;
        }
        conf_gen_free(&g);
    } else {
        ok = false;
    }
    for (size_t i = 0; i < SET; i++)
        free(strs[i]);
    if (!ok && *r == CONF_PASS)
        *r = CONF_FAIL;
    return ok;
}

conf_result conf_dom_stop_lengths(conf_env *env, char *msg, size_t cap)
{
    conf_dom_value val[CONF_DOM_MAX_VALUES];
    size_t n = conf_dom_draw(CONF_DOM_STOP_BYTES, env, env->opt->seed, 3, val);
    int32_t prompt[PROMPT];
    conf_gen_params p;
    params(env, &p, prompt, 74, 24);
    conf_gen base;
    conf_result r = run(env, &p, &base, msg, cap);
    if (r != CONF_PASS)
        return r;
    if (!ran(&base, &p, "no stop string", msg, cap)) {
        conf_gen_free(&base);
        return CONF_FAIL;
    }
    uint64_t rng = env->opt->seed ^ 0x5709;
    for (size_t i = 0; i < n; i++) {
        for (size_t short_cut = 0; short_cut < 2; short_cut++) {
            /* each length as a cut of the output when it fits, and longer */
            size_t len = (size_t)val[i].u;
            if (short_cut && len > base.text_len)
                continue;
            if (!short_cut && len <= base.text_len)
                len = base.text_len + len % 64 + 1;
            if (!one_stop_length(env, &base, len, &rng, &r, msg, cap)) {
                conf_gen_free(&base);
                return r;
            }
        }
    }
    CONF_MSG("%zu stop-string lengths from 1 to 4096 bytes, in sets of 1 and 16, on a %zu-byte output",
             n, base.text_len);
    conf_gen_free(&base);
    return CONF_PASS;
}
