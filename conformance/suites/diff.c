/* DIF-1: two plugins that declare the same model digest agree: greedy
 * tokens identical for 32 steps, top-5 logprobs within 5e-2; and, when
 * both expose full logits, at every position of a sequence as long as the
 * smaller max_context (rows of ILAB_EVAL_ALL_LOGITS, in chunks): the same
 * argmax and each one's top-5 logprobs within 5e-2 of the other's. Runs
 * in one worker that loads both plugins (the supervisor forks it per
 * pair). */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "suites.h"

enum { PROMPT = 6, STEPS = 32, TOP = 5 };

/* Greedy tokens and, per step, the log-softmax of the top TOP tokens. */
static conf_result greedy_run(conf_env *env, const int32_t *prompt, int32_t *tokens, int32_t *top_id,
                              float *top_lp, char *msg, size_t cap)
{
    if (env->m->logits == ILAB_LOGITS_FULL) {
        int32_t v = env->info.vocab_size, seq[PROMPT + STEPS];
        float *l = calloc((size_t)v, sizeof *l);
        memcpy(seq, prompt, PROMPT * sizeof *prompt);
        ilab_seq_t s = 0;
        ilab_status st = env->api->seq_create(env->be, &s);
        if (st == ILAB_OK)
            st = conf_eval1(env, s, seq, PROMPT, 0, l);
        for (int i = 0; i < STEPS && st == ILAB_OK; i++) {
            double mx = l[conf_argmax(l, v)], sum = 0;
            for (int32_t k = 0; k < v; k++)
                sum += exp((double)l[k] - mx);
            for (int k = 0; k < TOP; k++) {
                int32_t best = conf_argmax(l, v);
                top_id[i * TOP + k] = best;
                top_lp[i * TOP + k] = (float)((double)l[best] - mx - log(sum));
                if (k == 0)
                    tokens[i] = best;
                l[best] = -INFINITY;
            }
            if (i + 1 < STEPS)
                st = conf_eval1(env, s, &tokens[i], 1, 0, l);
        }
        if (s)
            env->api->seq_free(env->be, s);
        free(l);
        if (st != ILAB_OK) {
            conf_fail_status(env, st, "eval()", msg, cap);
            return CONF_FAIL;
        }
        return CONF_PASS;
    }
    conf_gen_params p;
    conf_gen_params_default(&p, prompt, PROMPT);
    p.max_tokens = STEPS;
    p.ignore_eos = true;
    p.top_logprobs = env->m->topk_max < TOP ? env->m->topk_max : TOP;
    conf_gen g;
    conf_result r = conf_generate(env, &p, &g, msg, cap);
    if (r != CONF_PASS)
        return r;
    if (g.status != ILAB_OK || g.n_tokens != STEPS) {
        CONF_MSG("greedy generation of %d tokens failed: %s %s (%zu tokens)", STEPS, ilab_status_name(g.status),
                 g.error, g.n_tokens);
        conf_gen_free(&g);
        return CONF_FAIL;
    }
    for (int i = 0; i < STEPS; i++) {
        tokens[i] = g.tokens[i];
        for (int k = 0; k < TOP; k++) {
            top_id[i * TOP + k] = g.top_id[i * CONF_GEN_TOPK + k];
            top_lp[i * TOP + k] = g.top_lp[i * CONF_GEN_TOPK + k];
        }
    }
    conf_gen_free(&g);
    return CONF_PASS;
}

/* a's top TOP tokens against b's logprobs of the same tokens, and a's
 * argmax against b's (a tie within the tolerance is no disagreement). */
static bool row_agrees(const double *la, const double *lb, int32_t v, int32_t pos, const char *na, const char *nb,
                       char *msg, size_t cap)
{
    int32_t top[TOP];
    for (int k = 0; k < TOP; k++) {
        int32_t best = -1;
        for (int32_t t = 0; t < v; t++) {
            bool taken = false;
            for (int j = 0; j < k; j++)
                taken |= top[j] == t;
            if (!taken && (best < 0 || la[t] > la[best]))
                best = t;
        }
        top[k] = best;
        if (fabs(la[best] - lb[best]) > 5e-2) {
            snprintf(msg, cap, "position %d: token %d (top-%d of %s) has logprob %.4f in %s and %.4f in %s (> 5e-2)",
                     pos, best, k + 1, na, la[best], na, lb[best], nb);
            return false;
        }
    }
    int32_t bb = 0;
    for (int32_t t = 1; t < v; t++)
        if (lb[t] > lb[bb])
            bb = t;
    if (bb != top[0] && lb[bb] - lb[top[0]] > 5e-2) {
        snprintf(msg, cap, "position %d: greedy token %d in %s, %d in %s", pos, top[0], na, bb, nb);
        return false;
    }
    return true;
}

/* Every position of one sequence of the smaller max_context (up to 4096)
 * in both plugins, chunk by chunk. */
static conf_result all_positions(conf_env *a, conf_env *b, uint64_t seed, char *msg, size_t cap)
{
    enum { CHUNK = 64, LONGEST = 4096 };
    int32_t v = a->info.vocab_size, ca = conf_max_context(a), cb = conf_max_context(b);
    int32_t n = ca < cb ? ca : cb;
    n = n < LONGEST ? n : LONGEST;
    int32_t *tok = malloc((size_t)n * sizeof *tok);
    conf_prompt_tokens(a, seed, tok, n);
    float *ra = malloc((size_t)CHUNK * v * sizeof *ra), *rb = malloc((size_t)CHUNK * v * sizeof *rb);
    double *la = malloc((size_t)v * sizeof *la), *lb = malloc((size_t)v * sizeof *lb);
    ilab_seq_t sa = ILAB_SEQ_NONE, sb = ILAB_SEQ_NONE;
    ilab_status st = a->api->seq_create(a->be, &sa);
    conf_env *failed = a;
    if (st == ILAB_OK) {
        failed = b;
        st = b->api->seq_create(b->be, &sb);
    }
    conf_result r = CONF_PASS;
    char where[512];
    for (int32_t at = 0; at < n && st == ILAB_OK && r == CONF_PASS; at += CHUNK) {
        int32_t len = n - at < CHUNK ? n - at : CHUNK;
        failed = a;
        st = conf_eval1(a, sa, tok + at, len, ILAB_EVAL_ALL_LOGITS, ra);
        if (st == ILAB_OK) {
            failed = b;
            st = conf_eval1(b, sb, tok + at, len, ILAB_EVAL_ALL_LOGITS, rb);
        }
        for (int32_t i = 0; i < len && st == ILAB_OK && r == CONF_PASS; i++) {
            conf_log_softmax(ra + (size_t)i * v, v, la);
            conf_log_softmax(rb + (size_t)i * v, v, lb);
            if (!row_agrees(la, lb, v, at + i, a->m->name, b->m->name, where, sizeof where) ||
                !row_agrees(lb, la, v, at + i, b->m->name, a->m->name, where, sizeof where)) {
                snprintf(msg, cap, "%s (of %d positions of random tokens, seed %" PRIu64 ", evaluated in chunks of %d)",
                         where, n, seed, CHUNK);
                r = CONF_FAIL;
            }
        }
    }
    if (st != ILAB_OK) {
        conf_fail_status(failed, st, "eval() of the long sequence", msg, cap);
        r = CONF_FAIL;
    }
    if (sa != ILAB_SEQ_NONE)
        a->api->seq_free(a->be, sa);
    if (sb != ILAB_SEQ_NONE)
        b->api->seq_free(b->be, sb);
    free(tok);
    free(ra);
    free(rb);
    free(la);
    free(lb);
    if (r == CONF_PASS)
        snprintf(msg, cap, "every one of %d positions agrees", n);
    return r;
}

conf_result conf_diff_pair(const char *path_a, const char *path_b, const conf_options *opt_a,
                           const conf_options *opt_b, char *msg, size_t cap)
{
    conf_env a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    a.path = path_a;
    a.opt = opt_a;
    b.path = path_b;
    b.opt = opt_b;
    char why[1024];
    conf_result r = conf_env_prepare(&a, CONF_NEED_INSTANCE, why, sizeof why);
    if (r == CONF_PASS)
        r = conf_env_prepare(&b, CONF_NEED_INSTANCE, why, sizeof why);
    int32_t ta[STEPS], tb[STEPS], ia[STEPS * TOP], ib[STEPS * TOP];
    float la[STEPS * TOP], lb[STEPS * TOP];
    if (r != CONF_PASS) {
        snprintf(msg, cap, "%s", why);
        goto out;
    }
    if (a.info.vocab_size != b.info.vocab_size) {
        snprintf(msg, cap, "same digest, different vocab_size (%d vs %d)", a.info.vocab_size, b.info.vocab_size);
        r = CONF_FAIL;
        goto out;
    }
    int32_t prompt[PROMPT];
    conf_prompt_tokens(&a, opt_a->seed + 70, prompt, PROMPT);
    r = greedy_run(&a, prompt, ta, ia, la, msg, cap);
    if (r == CONF_PASS)
        r = greedy_run(&b, prompt, tb, ib, lb, msg, cap);
    if (r != CONF_PASS)
        goto out;
    for (int i = 0; i < STEPS; i++) {
        if (ta[i] != tb[i]) {
            snprintf(msg, cap, "greedy step %d: token %d vs %d (seed %llu)", i, ta[i], tb[i],
                     (unsigned long long)opt_a->seed);
            r = CONF_FAIL;
            goto out;
        }
        for (int k = 0; k < TOP; k++) {
            /* compare by token: find k's token in the other's top list */
            int32_t id = ia[i * TOP + k];
            for (int j = 0; j < TOP; j++)
                if (ib[i * TOP + j] == id && fabsf(la[i * TOP + k] - lb[i * TOP + j]) > 5e-2f) {
                    snprintf(msg, cap, "step %d: logprob of token %d is %.4f vs %.4f (> 5e-2)", i, id,
                             (double)la[i * TOP + k], (double)lb[i * TOP + j]);
                    r = CONF_FAIL;
                    goto out;
                }
        }
    }
    if (a.m->logits == ILAB_LOGITS_FULL && b.m->logits == ILAB_LOGITS_FULL) {
        char rest[CONF_MSG_CAP];
        r = all_positions(&a, &b, opt_a->seed + 71, rest, sizeof rest);
        if (r == CONF_PASS)
            snprintf(msg, cap, "%d greedy steps agree; %.900s", STEPS, rest);
        else
            snprintf(msg, cap, "%s", rest);
        goto out;
    }
    snprintf(msg, cap, "%d greedy steps agree", STEPS);
out:
    conf_env_release(&a);
    conf_env_release(&b);
    return r;
}
