/* SMP clauses, end to end: the sampler the plugin is driven with (the host
 * sampler for `sampling: host`, the plugin's own for `sampling: backend`).
 * The host sampler's unit tests live with the runtime; these check the
 * equivalences a user relies on. Seeds are fixed and printed. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "chi_square.h"
#include "suites.h"

#define PROMPT 6
#define STEPS 8

static conf_result tokens_of(conf_env *env, const conf_gen_params *p, int32_t *out, size_t *n,
                             char *msg, size_t cap)
{
    conf_gen g;
    conf_result r = conf_generate(env, p, &g, msg, cap);
    if (r != CONF_PASS)
        return r;
    if (g.status != ILAB_OK) {
        CONF_MSG("generation failed: %s: %s", ilab_status_name(g.status), g.error);
        conf_gen_free(&g);
        return CONF_FAIL;
    }
    *n = g.n_tokens < STEPS ? g.n_tokens : STEPS;
    memcpy(out, g.tokens, *n * sizeof *out);
    conf_gen_free(&g);
    return CONF_PASS;
}

static void base(conf_env *env, conf_gen_params *p, int32_t *prompt, uint64_t salt)
{
    conf_prompt_tokens(env, env->opt->seed + salt, prompt, PROMPT);
    conf_gen_params_default(p, prompt, PROMPT);
    p->max_tokens = STEPS;
    p->ignore_eos = true;
}

static bool same(const int32_t *a, size_t na, const int32_t *b, size_t nb)
{
    return na == nb && memcmp(a, b, na * sizeof *a) == 0;
}

conf_result conf_smp1_greedy(conf_env *env, char *msg, size_t cap)
{
    int32_t prompt[PROMPT], a[STEPS], b[STEPS];
    size_t na, nb;
    conf_gen_params p;
    base(env, &p, prompt, 50);
    p.sampling.seed = 1;
    conf_result r = tokens_of(env, &p, a, &na, msg, cap);
    if (r != CONF_PASS)
        return r;
    p.sampling.seed = 987654321;
    r = tokens_of(env, &p, b, &nb, msg, cap);
    if (r != CONF_PASS)
        return r;
    CONF_CHECK(same(a, na, b, nb), "temperature 0 gave different tokens for seeds 1 and 987654321");
    if (env->m->logits == ILAB_LOGITS_FULL) {
        /* and it is the argmax of the logits, step by step */
        int32_t v = env->info.vocab_size, seq[PROMPT + STEPS];
        float *l = calloc((size_t)v, sizeof *l);
        memcpy(seq, prompt, sizeof prompt);
        for (size_t i = 0; i < na; i++) {
            ilab_status st = conf_fresh_logits(env, seq, PROMPT + (int32_t)i, l);
            if (st != ILAB_OK) {
                free(l);
                CONF_CHECK_OK(env, st, "eval()");
            }
            int32_t want = conf_argmax(l, v);
            if (a[i] != want) {
                free(l);
                CONF_MSG("greedy step %zu sampled %d, the argmax of the logits is %d", i, a[i], want);
                return CONF_FAIL;
            }
            seq[PROMPT + i] = a[i];
        }
        free(l);
    }
    return CONF_PASS;
}

conf_result conf_smp2_seed(conf_env *env, char *msg, size_t cap)
{
    int32_t prompt[PROMPT], a[STEPS], b[STEPS];
    size_t na, nb;
    conf_gen_params p;
    base(env, &p, prompt, 51);
    p.sampling.temperature = 1.0f;
    p.sampling.top_p = 0.95f;
    /* the run's seed, and 0 and 1: every seed is a seed (none means "pick one") */
    const uint64_t seeds[3] = {env->opt->seed, 0, 1};
    for (int k = 0; k < 3; k++) {
        p.sampling.seed = seeds[k];
        conf_result r = tokens_of(env, &p, a, &na, msg, cap);
        if (r == CONF_PASS)
            r = tokens_of(env, &p, b, &nb, msg, cap);
        if (r != CONF_PASS)
            return r;
        CONF_CHECK(same(a, na, b, nb), "seed %llu, temperature 1, top_p 0.95 gave different tokens twice",
                   (unsigned long long)seeds[k]);
    }
    return CONF_PASS;
}

/* min_p = 1 keeps the tokens tied at the maximum probability: it equals
 * greedy only where the maximum is unique, and draws among the tied tokens
 * otherwise (SMP-3). Each token it gives must carry the maximum logprob of
 * its step, which the event's top logprobs show. (Without top logprobs the
 * caller compares with greedy, right for logits without ties.) */
static conf_result min_p_one_at_the_maximum(conf_env *env, conf_gen_params *p, char *msg,
                                            size_t cap)
{
    conf_gen g;
    p->top_logprobs = 1;
    conf_result r = conf_generate(env, p, &g, msg, cap);
    p->top_logprobs = 0;
    if (r != CONF_PASS)
        return r;
    if (g.status != ILAB_OK) {
        CONF_MSG("min_p = 1: generation failed: %s: %s", ilab_status_name(g.status), g.error);
        conf_gen_free(&g);
        return CONF_FAIL;
    }
    for (size_t i = 0; i < g.n_tokens; i++) {
        float top = g.n_top[i] ? g.top_lp[i * CONF_GEN_TOPK] : -INFINITY;
        /* The token's logprob and the top list's may be computed apart:
         * equal up to rounding for tokens whose logits tie. */
        bool is_top = g.n_top[i] && g.top_id[i * CONF_GEN_TOPK] == g.tokens[i];
        if (!is_top && !(g.logprob[i] >= top - 1e-5f * (1.0f + fabsf(top)))) {
            CONF_MSG("min_p = 1 at temperature 1 (seed %llu): token %zu is %d with logprob %g, "
                     "below the step's maximum %g (id %d)", (unsigned long long)p->sampling.seed,
                     i, g.tokens[i], (double)g.logprob[i], (double)top,
                     g.n_top[i] ? g.top_id[i * CONF_GEN_TOPK] : -1);
            conf_gen_free(&g);
            return CONF_FAIL;
        }
    }
    conf_gen_free(&g);
    return CONF_PASS;
}

conf_result conf_smp3_filters(conf_env *env, char *msg, size_t cap)
{
    int32_t prompt[PROMPT], greedy[STEPS], got[STEPS];
    size_t ng, n;
    conf_gen_params p;
    base(env, &p, prompt, 52);
    conf_result r = tokens_of(env, &p, greedy, &ng, msg, cap);
    if (r != CONF_PASS)
        return r;
    static const char *const names[3] = {"top_k = 1", "top_p = 1e-6", "min_p = 1"};
    for (int c = 0; c < 3; c++) {
        base(env, &p, prompt, 52);
        p.sampling.temperature = 1.0f;
        p.sampling.seed = env->opt->seed + (uint64_t)c;
        if (c == 0)
            p.sampling.top_k = 1;
        else if (c == 1)
            p.sampling.top_p = 1e-6f;
        else
            p.sampling.min_p = 1.0f;
        if (c == 2 && env->m->topk_max >= 1) {
            r = min_p_one_at_the_maximum(env, &p, msg, cap);
            if (r != CONF_PASS)
                return r;
            continue;
        }
        r = tokens_of(env, &p, got, &n, msg, cap);
        if (r != CONF_PASS)
            return r;
        CONF_CHECK(same(greedy, ng, got, n), "%s at temperature 1 (seed %llu) differs from greedy", names[c],
                   (unsigned long long)p.sampling.seed);
    }
    return CONF_PASS;
}

/* Draw the first token `n` times with seeds seed..seed+n-1. */
static conf_result draws(conf_env *env, conf_gen_params *p, int32_t *counts, int n, char *msg, size_t cap)
{
    uint64_t s0 = p->sampling.seed;
    for (int i = 0; i < n; i++) {
        p->sampling.seed = s0 + (uint64_t)i;
        int32_t t[STEPS];
        size_t k;
        conf_result r = tokens_of(env, p, t, &k, msg, cap);
        if (r != CONF_PASS)
            return r;
        if (k < 1 || t[0] < 0 || t[0] >= env->info.vocab_size) {
            CONF_MSG("draw %d gave no valid token", i);
            return CONF_FAIL;
        }
        counts[t[0]]++;
    }
    p->sampling.seed = s0;
    return CONF_PASS;
}

/* SMP-4 at one temperature: `n` first tokens drawn with seeds seed.. follow
 * softmax(logits / T) by a chi-square test at p < 0.0005. */
static conf_result smp4_at(conf_env *env, float T, uint64_t seed, int n, char *msg, size_t cap)
{
    int32_t v = env->info.vocab_size, prompt[PROMPT];
    conf_gen_params p;
    base(env, &p, prompt, 53);
    p.max_tokens = 1;
    p.sampling.temperature = T;
    p.sampling.seed = seed;
    float *l = calloc((size_t)v, sizeof *l);
    int32_t *counts = calloc((size_t)v, sizeof *counts);
    double *prob = calloc((size_t)v, sizeof *prob);
    conf_result r = CONF_FAIL;
    ilab_status st = conf_fresh_logits(env, prompt, PROMPT, l);
    if (st != ILAB_OK) {
        conf_fail_status(env, st, "eval()", msg, cap);
        goto out;
    }
    double mx = l[conf_argmax(l, v)], sum = 0;
    for (int32_t i = 0; i < v; i++)
        sum += prob[i] = exp(((double)l[i] - mx) / T);
    for (int32_t i = 0; i < v; i++)
        prob[i] /= sum;
    r = draws(env, &p, counts, n, msg, cap);
    if (r != CONF_PASS)
        goto out;
    conf_chi_square cs = conf_chi_square_by_token(counts, prob, v, n);
    double chi = cs.chi, rest_e = cs.rest_expected, rest_o = cs.rest_observed;
    int bins = cs.bins;
    /* The rare tokens pooled into one bin when it is big enough. Unlike
     * SMP-5's reference (sampling_ref.c), every token has weight under a
     * plain softmax, so a few draws on them are expected: only many more
     * than that fail. */
    r = CONF_FAIL;
    if (rest_e >= 5) {
        chi += (rest_o - rest_e) * (rest_o - rest_e) / rest_e;
        bins++;
    } else if (rest_o > 5 + 4 * rest_e) {
        CONF_MSG("T=%.1f: %.0f draws landed on tokens whose total expected count is %.2f (seed %llu)", (double)T,
                 rest_o, rest_e, (unsigned long long)seed);
        goto out;
    }
    int df = bins - 1;
    double crit = df >= 1 ? conf_chi_square_quantile(df, 3.29) : 0; /* p < 0.0005 */
    if (df >= 1 && chi > crit) {
        CONF_MSG("sampled first tokens do not follow softmax(logits/%.1f): chi-square %.1f > %.1f (df %d, "
                 "p<0.0005, %d draws, seed %llu)", (double)T, chi, crit, df, n, (unsigned long long)seed);
        goto out;
    }
    CONF_MSG("T=%.1f: chi-square %.1f, df %d, critical %.1f", (double)T, chi, df, crit);
    r = CONF_PASS;
out:
    free(l);
    free(counts);
    free(prob);
    return r;
}

/* SMP-4: a temperature below 1 and one above, each its own draws (the two
 * tests share p < 0.001 between them). A temperature applied wrongly in
 * one direction only (squared, inverted, clamped) shows at one of them. */
conf_result conf_smp4_distribution(conf_env *env, char *msg, size_t cap)
{
    CONF_SKIP_UNLESS(env->m->logits == ILAB_LOGITS_FULL, "logits: full");
    enum { N = 600 };
    static const float temps[2] = {0.5f, 1.5f};
    char each[2][CONF_MSG_CAP / 2];
    for (int k = 0; k < 2; k++) {
        uint64_t seed = env->opt->seed + (uint64_t)k * N;
        conf_result r = smp4_at(env, temps[k], seed, N, msg, cap);
        /* A failure is confirmed on fresh draws before it counts: a correct
         * sampler fails both about once in 4 million, a wrong temperature
         * fails both (one correct plugin in 140 seeded runs failed once) */
        if (r == CONF_FAIL) {
            char first[CONF_MSG_CAP];
            snprintf(first, sizeof first, "%s", msg);
            r = smp4_at(env, temps[k], seed + 1000003, N, msg, cap);
            if (r == CONF_FAIL) {
                char again[CONF_MSG_CAP];
                snprintf(again, sizeof again, "%s", msg);
                CONF_MSG("%s; again on fresh draws: %s", first, again);
            }
        }
        if (r != CONF_PASS)
            return r;
        snprintf(each[k], sizeof each[k], "%s", msg);
    }
    CONF_MSG("%s; %s (%d draws each, seed %llu)", each[0], each[1], N, (unsigned long long)env->opt->seed);
    return CONF_PASS;
}

typedef struct ranked {
    int32_t id;
    double v;
} ranked;

static int by_value_desc(const void *a, const void *b)
{
    const ranked *x = a, *y = b;
    return x->v < y->v ? 1 : x->v > y->v ? -1 : x->id - y->id;
}

conf_result conf_smp5_order(conf_env *env, char *msg, size_t cap)
{
    CONF_SKIP_UNLESS(env->m->logits == ILAB_LOGITS_FULL, "logits: full");
    enum { N = 60 };
    int32_t v = env->info.vocab_size, prompt[PROMPT];
    conf_gen_params p;
    base(env, &p, prompt, 54);
    p.max_tokens = 1;
    ilab_sampling_t *s = &p.sampling;
    s->repetition_penalty = 1.3f;
    s->temperature = 0.5f;
    s->top_k = 20;
    s->top_p = 0.6f;
    s->min_p = 0.05f;
    s->seed = env->opt->seed;
    float *l = calloc((size_t)v, sizeof *l);
    ranked *rk = calloc((size_t)v, sizeof *rk);
    int32_t *counts = calloc((size_t)v, sizeof *counts);
    bool *allowed = calloc((size_t)v, sizeof *allowed);
    conf_result r = CONF_FAIL;
    ilab_status st = conf_fresh_logits(env, prompt, PROMPT, l);
    if (st != ILAB_OK) {
        conf_fail_status(env, st, "eval()", msg, cap);
        goto out;
    }
    /* Hugging Face order: repetition penalty (over the prompt), temperature,
     * top-k, top-p, min-p. The set of tokens that can be drawn: */
    for (int32_t i = 0; i < v; i++) {
        double x = l[i];
        for (int j = 0; j < PROMPT; j++)
            if (prompt[j] == i) {
                x = x > 0 ? x / s->repetition_penalty : x * s->repetition_penalty;
                break;
            }
        rk[i] = (ranked){i, x / s->temperature};
    }
    qsort(rk, (size_t)v, sizeof *rk, by_value_desc);
    int32_t k = s->top_k < v ? s->top_k : v;
    double sum = 0;
    for (int32_t i = 0; i < k; i++)
        sum += exp(rk[i].v - rk[0].v);
    double cum = 0, pmax = 1.0 / sum;
    int32_t kept = 0;
    for (int32_t i = 0; i < k; i++) {
        double pi = exp(rk[i].v - rk[0].v) / sum;
        kept = i + 1;
        cum += pi;
        if (cum >= s->top_p)
            break;
    }
    /* min-p over the renormalised nucleus: p_i / p_max is unchanged by it */
    for (int32_t i = 0; i < kept; i++) {
        double pi = exp(rk[i].v - rk[0].v) / sum;
        if (pi >= s->min_p * pmax)
            allowed[rk[i].id] = true;
    }
    r = draws(env, &p, counts, N, msg, cap);
    if (r != CONF_PASS)
        goto out;
    for (int32_t i = 0; i < v; i++)
        if (counts[i] && !allowed[i]) {
            CONF_MSG("token %d was drawn %d time(s) but is filtered out by repetition penalty -> temperature -> top-k -> top-p -> min-p (seed %llu)",
                     i, counts[i], (unsigned long long)env->opt->seed);
            r = CONF_FAIL;
            goto out;
        }
    r = CONF_PASS;
out:
    free(l);
    free(rk);
    free(counts);
    free(allowed);
    return r;
}
