/* LOG-4 against a reference: the top-k list of every TOKEN event must be
 * the k largest entries of log_softmax of the raw logits at that step, not
 * only sorted and normalised. Streams at temperature 1 over several seeds
 * reach many positions; the harness evaluates the prompt and the drawn
 * tokens in one ALL_LOGITS call (row i: after the prompt and tokens
 * 0..i-1) and, at each step, checks the list: exactly k entries, distinct
 * in-range ids, each value log_softmax of the raw logits within TOL, and
 * no id left out whose reference logprob is larger than the smallest
 * listed one by more than TOL (ties within TOL may go either way). Needs
 * full logits for the reference. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "suites.h"

enum { PROMPT = 10, STEPS = 24, SEEDS = 4 };

static double tol(double b) { return 1e-4 + 1e-4 * fabs(b); }

static bool list_is_largest(const conf_gen *g, size_t i, int32_t k, const double *lp, int32_t v,
                            unsigned char *listed, const char *where, char *msg, size_t cap)
{
    const int32_t *id = g->top_id + i * CONF_GEN_TOPK;
    const float *val = g->top_lp + i * CONF_GEN_TOPK;
    CONF_CHECK_BOOL(g->n_top[i] == (uint32_t)k, "%s: %u top-k entries, asked for %d (exactly min(top_logprobs, "
               "vocab_size))", where, g->n_top[i], k);
    memset(listed, 0, (size_t)v);
    double lo = INFINITY;
    for (int32_t e = 0; e < k; e++) {
        CONF_CHECK_BOOL(id[e] >= 0 && id[e] < v && !listed[id[e]], "%s: entry %d has id %d (out of range or listed "
                   "twice)", where, e, id[e]);
        listed[id[e]] = 1;
        CONF_CHECK_BOOL(fabs((double)val[e] - lp[id[e]]) <= tol(lp[id[e]]), "%s: entry %d (id %d) is %.6g; "
                   "log_softmax of the raw logits gives %.6g", where, e, id[e], (double)val[e], lp[id[e]]);
        lo = lp[id[e]] < lo ? lp[id[e]] : lo;
    }
    for (int32_t t = 0; t < v; t++)
        CONF_CHECK_BOOL(listed[t] || lp[t] <= lo + tol(lo), "%s: id %d has logprob %.6g, larger than the smallest "
                   "listed entry (%.6g), but is not in the top-%d list (LOG-4: the largest entries)", where, t,
                   lp[t], lo, k);
    return true;
}

/* Rows after prompt + tokens[0..i) for i in [0, n): one ALL_LOGITS eval. */
static float *replay_rows(conf_env *env, const int32_t *prompt, const conf_gen *g, char *msg, size_t cap)
{
    size_t v = (size_t)env->info.vocab_size, n = PROMPT + g->n_tokens - 1;
    int32_t *toks = malloc(n * sizeof *toks);
    float *rows = malloc(n * v * sizeof *rows);
    memcpy(toks, prompt, PROMPT * sizeof *toks);
    memcpy(toks + PROMPT, g->tokens, (g->n_tokens - 1) * sizeof *toks);
    ilab_seq_t s = ILAB_SEQ_NONE;
    ilab_status st = env->api->seq_create(env->be, &s);
    if (st == ILAB_OK)
        st = conf_eval1(env, s, toks, (int32_t)n, ILAB_EVAL_ALL_LOGITS, rows);
    if (s != ILAB_SEQ_NONE)
        env->api->seq_free(env->be, s);
    free(toks);
    if (st != ILAB_OK) {
        conf_fail_status(env, st, "eval() of the stream's prompt and tokens (ALL_LOGITS)", msg, cap);
        free(rows);
        return NULL;
    }
    return rows;
}

conf_result conf_log4_largest(conf_env *env, char *msg, size_t cap)
{
    CONF_SKIP_UNLESS(env->m->topk_max > 0, "topk_max > 0");
    CONF_SKIP_UNLESS(env->m->logits == ILAB_LOGITS_FULL, "logits: full (the reference)");
    int32_t v = env->info.vocab_size, k = env->m->topk_max < CONF_GEN_TOPK ? env->m->topk_max : CONF_GEN_TOPK;
    k = k < v ? k : v;
    double *lp = malloc((size_t)v * sizeof *lp);
    unsigned char *listed = malloc((size_t)v);
    int checked = 0;
    conf_result r = CONF_PASS;
    for (int seed = 0; seed < SEEDS && r == CONF_PASS; seed++) {
        int32_t prompt[PROMPT];
        conf_prompt_tokens(env, env->opt->seed + 2300 + (uint64_t)seed, prompt, PROMPT);
        conf_gen_params gp;
        conf_gen_params_default(&gp, prompt, PROMPT);
        gp.sampling.temperature = 1.0f;
        gp.sampling.seed = env->opt->seed + (uint64_t)seed;
        gp.max_tokens = STEPS;
        gp.ignore_eos = true;
        gp.top_logprobs = k;
        conf_gen g;
        r = conf_generate(env, &gp, &g, msg, cap);
        if (r != CONF_PASS)
            break;
        if (g.status != ILAB_OK || g.n_tokens == 0) {
            CONF_MSG("generation with top_logprobs %d, seed %" PRIu64 " failed: %s %s", k, gp.sampling.seed,
                     ilab_status_name(g.status), g.error);
            r = CONF_FAIL;
        }
        float *rows = r == CONF_PASS ? replay_rows(env, prompt, &g, msg, cap) : NULL;
        r = rows ? r : CONF_FAIL;
        for (size_t i = 0; i < g.n_tokens && r == CONF_PASS; i++, checked++) {
            char where[96];
            snprintf(where, sizeof where, "seed %" PRIu64 ", TOKEN %zu", gp.sampling.seed, i);
            conf_log_softmax(rows + (PROMPT - 1 + i) * (size_t)v, v, lp);
            if (!list_is_largest(&g, i, k, lp, v, listed, where, msg, cap))
                r = CONF_FAIL;
        }
        free(rows);
        conf_gen_free(&g);
    }
    free(lp);
    free(listed);
    if (r == CONF_PASS)
        CONF_MSG("%d top-%d lists are the largest entries of log_softmax of the raw logits", checked, k);
    return r;
}
