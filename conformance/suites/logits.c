/* LOG clauses: the logits eval() writes (capability: logits: full), and the
 * top-k logprobs stream events carry (capability: topk_max > 0). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "suites.h"

#define PROMPT 8

conf_result conf_log1_finite(conf_env *env, char *msg, size_t cap)
{
    CONF_SKIP_UNLESS(env->m->logits == ILAB_LOGITS_FULL, "logits: full");
    int32_t v = env->info.vocab_size, p[PROMPT];
    conf_prompt_tokens(env, env->opt->seed, p, PROMPT);
    /* NaN everywhere: every entry written must become finite, and the
     * guard past vocab_size must stay NaN. */
    float *l = malloc((size_t)(v + 16) * sizeof *l);
    for (int32_t i = 0; i < v + 16; i++)
        l[i] = NAN;
    ilab_status st = conf_fresh_logits(env, p, PROMPT, l);
    int32_t bad = -1, over = -1;
    for (int32_t i = 0; i < v; i++)
        if (!isfinite(l[i]) && bad < 0)
            bad = i;
    for (int32_t i = v; i < v + 16; i++)
        if (!isnan(l[i]) && over < 0)
            over = i;
    float badv = bad >= 0 ? l[bad] : 0;
    free(l);
    CONF_CHECK_OK(env, st, "eval()");
    CONF_CHECK(bad < 0, "logit %d of %d is %g (seed %llu)", bad, v, (double)badv,
               (unsigned long long)env->opt->seed);
    CONF_CHECK(over < 0, "eval() wrote past vocab_size (index %d)", over);
    return CONF_PASS;
}

conf_result conf_log2_identical(conf_env *env, char *msg, size_t cap)
{
    CONF_SKIP_UNLESS(env->m->logits == ILAB_LOGITS_FULL, "logits: full");
    int32_t v = env->info.vocab_size, p[PROMPT];
    conf_prompt_tokens(env, env->opt->seed + 1, p, PROMPT);
    float *a = calloc((size_t)v, sizeof *a), *b = calloc((size_t)v, sizeof *b);
    ilab_status st = conf_fresh_logits(env, p, PROMPT, a);
    if (st == ILAB_OK)
        st = conf_fresh_logits(env, p, PROMPT, b);
    int32_t diff = -1;
    for (int32_t i = 0; i < v && st == ILAB_OK; i++)
        if (memcmp(&a[i], &b[i], sizeof a[i]) != 0) {
            diff = i;
            break;
        }
    double da = diff >= 0 ? a[diff] : 0, db = diff >= 0 ? b[diff] : 0;
    free(a);
    free(b);
    CONF_CHECK_OK(env, st, "eval()");
    CONF_CHECK(diff < 0, "same input, different logits: entry %d is %.9g then %.9g", diff, da, db);
    return CONF_PASS;
}

conf_result conf_log3_batch(conf_env *env, char *msg, size_t cap)
{
    CONF_SKIP_UNLESS(env->m->logits == ILAB_LOGITS_FULL, "logits: full");
    CONF_SKIP_UNLESS(env->m->max_batch >= 2, "batching.max_batch >= 2");
    enum { N = 3 };
    int32_t v = env->info.vocab_size, n_items = env->m->max_batch < N ? env->m->max_batch : N;
    int32_t lens[N] = {5, 9, 1}, p[N][16];
    float *alone[N], *batched[N];
    ilab_seq_t seq[N] = {0};
    ilab_batch_item_t items[N];
    const ilab_batch_item_t *ptrs[N];
    ilab_status st = ILAB_OK;
    for (int i = 0; i < n_items; i++) {
        conf_prompt_tokens(env, env->opt->seed + 10 + (uint64_t)i, p[i], lens[i]);
        alone[i] = calloc((size_t)v, sizeof(float));
        batched[i] = conf_guarded_alloc((size_t)v);
        if (st == ILAB_OK)
            st = conf_fresh_logits(env, p[i], lens[i], alone[i]);
        if (st == ILAB_OK)
            st = env->api->seq_create(env->be, &seq[i]);
        items[i] = (ilab_batch_item_t){.struct_size = sizeof items[i], .seq = seq[i], .tokens = p[i],
                                       .n_tokens = lens[i], .logits = batched[i]};
        ptrs[i] = &items[i];
    }
    if (st == ILAB_OK)
        st = env->api->eval(env->be, ptrs, (size_t)n_items);
    conf_result r = CONF_PASS;
    if (st != ILAB_OK) {
        conf_fail_status(env, st, "eval() of a batch", msg, cap);
        r = CONF_FAIL;
    }
    for (int i = 0; i < n_items && r == CONF_PASS; i++) {
        char what[64];
        snprintf(what, sizeof what, "batch item %d (of %d)", i, n_items);
        if (!conf_guarded_check(batched[i], (size_t)v, what, msg, cap) ||
            !conf_logits_close(batched[i], alone[i], v, what, msg, cap))
            r = CONF_FAIL;
    }
    for (int i = 0; i < n_items; i++) {
        if (seq[i])
            env->api->seq_free(env->be, seq[i]);
        free(alone[i]);
        conf_guarded_free(batched[i]);
    }
    return r;
}

conf_result conf_log4_topk(conf_env *env, char *msg, size_t cap)
{
    CONF_SKIP_UNLESS(env->m->topk_max > 0, "topk_max > 0");
    int32_t p[PROMPT];
    conf_prompt_tokens(env, env->opt->seed + 2, p, PROMPT);
    conf_gen_params gp;
    conf_gen_params_default(&gp, p, PROMPT);
    gp.max_tokens = 6;
    gp.ignore_eos = true;
    gp.top_logprobs = env->m->topk_max < CONF_GEN_TOPK ? env->m->topk_max : CONF_GEN_TOPK;
    conf_gen g;
    conf_result r = conf_generate(env, &gp, &g, msg, cap);
    if (r != CONF_PASS)
        return r;
    r = CONF_FAIL;
    if (g.status != ILAB_OK) {
        CONF_MSG("generation with top_logprobs %d failed: %s %s", gp.top_logprobs,
                 ilab_status_name(g.status), g.error);
        goto out;
    }
    for (size_t i = 0; i < g.n_tokens; i++) {
        uint32_t n = g.n_top[i];
        if (n == 0) {
            CONF_MSG("token %zu carries no top logprobs (asked for %d)", i, gp.top_logprobs);
            goto out;
        }
        bool present = false;
        for (uint32_t k = 0; k < n && k < CONF_GEN_TOPK; k++) {
            float lp = g.top_lp[i * CONF_GEN_TOPK + k];
            if (!(lp <= 1e-6f)) {
                CONF_MSG("token %zu: top logprob %u is %g > 0", i, k, (double)lp);
                goto out;
            }
            if (k > 0 && lp > g.top_lp[i * CONF_GEN_TOPK + k - 1]) {
                CONF_MSG("token %zu: top logprobs not sorted descending at %u", i, k);
                goto out;
            }
            present |= g.top_id[i * CONF_GEN_TOPK + k] == g.tokens[i];
        }
        if (!present) {
            CONF_MSG("token %zu: greedy token %d is not among its top logprobs", i, g.tokens[i]);
            goto out;
        }
    }
    if (env->m->logits == ILAB_LOGITS_FULL && g.n_tokens > 0) {
        /* normalised: the top-1 logprob equals log_softmax of the full logits */
        int32_t v = env->info.vocab_size;
        float *l = calloc((size_t)v, sizeof *l);
        ilab_status st = conf_fresh_logits(env, p, PROMPT, l);
        double mx = l[conf_argmax(l, v)], sum = 0;
        for (int32_t i = 0; i < v; i++)
            sum += exp((double)l[i] - mx);
        double want = (double)l[g.top_id[0]] - mx - log(sum);
        free(l);
        if (st != ILAB_OK) {
            conf_fail_status(env, st, "eval()", msg, cap);
            goto out;
        }
        if (fabs(want - g.top_lp[0]) > 1e-3) {
            CONF_MSG("top-1 logprob %.6f != log_softmax of the full logits %.6f (logsumexp is not 0)",
                     (double)g.top_lp[0], want);
            goto out;
        }
    }
    r = CONF_PASS;
out:
    conf_gen_free(&g);
    return r;
}
