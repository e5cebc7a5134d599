/* Ties at the maximum (SMP-1, SMP-3): where two or more tokens share the
 * largest logit, greedy gives the lowest of their ids and min_p = 1 keeps
 * all of them, so its draws over many seeds cover every tied id in about
 * equal shares. A plugin whose min_p test is strict (p > min_p * p_max)
 * keeps none and falls back to one token; one whose greedy breaks ties by
 * the higher id or by position differs. These paths run only at a tie, so
 * the harness looks for one: short prompts whose next-token logits (eval,
 * `logits: full`) have a tied maximum. A model whose logits never tie
 * exactly (most float models) is reported as such, not as a pass. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "chi_square.h"
#include "suites.h"

enum { MAX_PROMPT = 3, TRIES = 400, DRAWS = 96, MAX_TIED = 16 };

typedef struct tie {
    int32_t prompt[MAX_PROMPT];
    int32_t n_prompt;
    int32_t ids[MAX_TIED]; /* ascending */
    int n;
} tie;

/* The tied maximum of one row, ids ascending; 1 when it is unique. */
static int tied_max(const float *row, int32_t v, int32_t *ids)
{
    float best = -INFINITY;
    for (int32_t i = 0; i < v; i++)
        if (row[i] > best)
            best = row[i];
    int n = 0;
    for (int32_t i = 0; i < v && n < MAX_TIED; i++)
        if (row[i] == best)
            ids[n++] = i;
    return n;
}

static bool find_tie(conf_env *env, tie *t)
{
    int32_t v = env->info.vocab_size;
    float *row = malloc((size_t)v * sizeof *row);
    uint64_t rng = env->opt->seed ^ 0x7135ULL;
    bool found = false;
    for (int k = 0; row && k < TRIES && !found; k++) {
        t->n_prompt = 1 + (int32_t)(conf_splitmix64(&rng) % MAX_PROMPT);
        conf_prompt_tokens(env, conf_splitmix64(&rng), t->prompt, t->n_prompt);
        if (conf_fresh_logits(env, t->prompt, t->n_prompt, row) != ILAB_OK)
            break;
        t->n = tied_max(row, v, t->ids);
        found = t->n >= 2;
    }
    free(row);
    return found;
}

static conf_result first_token(conf_env *env, const tie *t, float temperature, float min_p, uint64_t seed,
                               int32_t *out, char *msg, size_t cap)
{
    conf_gen_params p;
    conf_gen_params_default(&p, t->prompt, (size_t)t->n_prompt);
    p.max_tokens = 1;
    p.ignore_eos = true;
    p.sampling.temperature = temperature;
    p.sampling.min_p = min_p;
    p.sampling.seed = seed;
    conf_gen g;
    conf_result r = conf_generate(env, &p, &g, msg, cap);
    if (r != CONF_PASS)
        return r;
    bool ok = g.status == ILAB_OK && g.n_tokens == 1;
    if (ok)
        *out = g.tokens[0];
    else
        CONF_MSG("a one-token request (temperature %g, min_p %g) gave %zu TOKENs and %s: %s", (double)temperature,
                 (double)min_p, g.n_tokens, ilab_status_name(g.status), g.error);
    conf_gen_free(&g);
    return ok ? CONF_PASS : CONF_FAIL;
}

static int index_of(const tie *t, int32_t id)
{
    for (int i = 0; i < t->n; i++)
        if (t->ids[i] == id)
            return i;
    return -1;
}

conf_result conf_smp3_ties(conf_env *env, char *msg, size_t cap)
{
    CONF_SKIP_UNLESS(env->m->logits == ILAB_LOGITS_FULL, "logits: full");
    tie t;
    if (!find_tie(env, &t)) {
        snprintf(msg, cap, "no tied maximum in the next-token logits of %d short prompts: the tie rules "
                 "cannot be exercised on this model", TRIES);
        return CONF_SKIP;
    }
    int32_t got = -1;
    conf_result r = first_token(env, &t, 0.0f, 0.0f, env->opt->seed, &got, msg, cap);
    if (r != CONF_PASS)
        return r;
    CONF_CHECK(got == t.ids[0], "greedy after a prompt whose next-token logits tie at the maximum over ids %d "
               "and %d gave %d: ties go to the lowest id (SMP-1)", (int)t.ids[0], (int)t.ids[1], (int)got);
    int32_t counts[MAX_TIED] = {0};
    double share[MAX_TIED];
    for (int i = 0; i < DRAWS; i++) {
        r = first_token(env, &t, 1.0f, 1.0f, env->opt->seed + 1000 + (uint64_t)i, &got, msg, cap);
        if (r != CONF_PASS)
            return r;
        int at = index_of(&t, got);
        CONF_CHECK(at >= 0, "min_p = 1 drew id %d, which is not among the %d ids tied at the maximum "
                   "(%d, %d, ...) (SMP-3)", (int)got, t.n, (int)t.ids[0], (int)t.ids[1]);
        counts[at]++;
    }
    for (int i = 0; i < t.n; i++)
        share[i] = 1.0 / t.n;
    conf_chi_square x = conf_chi_square_by_token(counts, share, t.n, DRAWS);
    double limit = conf_chi_square_quantile(x.bins > 1 ? x.bins - 1 : 1, 3.09); /* p < 0.001 */
    CONF_CHECK(x.chi <= limit, "min_p = 1 over %d seeds drew the %d ids tied at the maximum (%d, %d, ...) "
               "%d, %d, ... times (chi-square %.1f > %.1f): it keeps every tied token and draws among them "
               "(SMP-3)", DRAWS, t.n, (int)t.ids[0], (int)t.ids[1], (int)counts[0], (int)counts[1], x.chi, limit);
    CONF_MSG("a tie of %d ids at the maximum: greedy gave the lowest, min_p = 1 drew among all (chi-square "
             "%.1f <= %.1f)", t.n, x.chi, limit);
    return CONF_PASS;
}
