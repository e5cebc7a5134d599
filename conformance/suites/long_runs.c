/* Clauses that hold "after any history": checked over long runs of cheap
 * calls instead of one or two.
 *
 * - LOG-2: a fresh instance's first logits for a few prompts are the
 *   reference; ~1,000 short evaluations later (every 50 of them) the same
 *   prompts must give bit-identical logits, and the test's own instance
 *   (whatever ran on it before) must agree with the fresh one.
 * - CCH-6: live heap bytes by slope over fork/free cycles: forks freed
 *   untouched, forks that grew, forks of forks, all three every cycle. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "suites.h"

enum { REFS = 3, HISTORY_CALLS = 1000, CHECK_EVERY = 50 };

static const int32_t ref_len[REFS] = {3, 7, 16};

/* Bit-identical, or a message naming the first differing entry. */
static bool same_bits(const float *a, const float *b, int32_t v, int32_t *at)
{
    for (int32_t i = 0; i < v; i++)
        if (memcmp(&a[i], &b[i], sizeof a[i]) != 0) {
            *at = i;
            return false;
        }
    return true;
}

/* One cheap call of the history: a sequence of 1..4 tokens evaluated and
 * freed. */
static ilab_status history_call(conf_env *env, int i)
{
    int32_t tok[4];
    conf_prompt_tokens(env, env->opt->seed + 2000 + (uint64_t)i, tok, 4);
    ilab_seq_t s = ILAB_SEQ_NONE;
    ilab_status st = env->api->seq_create(env->be, &s);
    if (st == ILAB_OK)
        st = conf_eval1(env, s, tok, 1 + i % 4, 0, NULL);
    if (s != ILAB_SEQ_NONE) {
        ilab_status fst = env->api->seq_free(env->be, s);
        st = st == ILAB_OK ? fst : st;
    }
    return st;
}

static conf_result long_history(conf_env *env, float *const *ref, float *got, const int32_t (*prompt)[16],
                                char *msg, size_t cap)
{
    int32_t v = env->info.vocab_size;
    int calls = HISTORY_CALLS * (env->opt->deep ? 10 : 1);
    for (int r = 0; r < REFS; r++) {
        ilab_status st = conf_fresh_logits(env, prompt[r], ref_len[r], ref[r]);
        CONF_CHECK_OK(env, st, "eval() on a fresh instance");
    }
    for (int i = 1; i <= calls; i++) {
        ilab_status st = history_call(env, i);
        CONF_CHECK_OK(env, st, "eval() of a short sequence");
        if (i % CHECK_EVERY)
            continue;
        for (int r = 0; r < REFS; r++) {
            st = conf_fresh_logits(env, prompt[r], ref_len[r], got);
            CONF_CHECK_OK(env, st, "eval()");
            int32_t at = -1;
            CONF_CHECK(same_bits(got, ref[r], v, &at),
                       "after %d short evaluations on a fresh instance, a %d-token prompt (seed %" PRIu64
                       ") gives logit %d = %.9g; its first evaluation gave %.9g (LOG-2: bit-identical after any "
                       "history)", i, ref_len[r], env->opt->seed + 1900 + (uint64_t)r, at, (double)got[at],
                       (double)ref[r][at]);
        }
    }
    CONF_MSG("%d prompts bit-identical over %d evaluations of a fresh instance (checked every %d)", REFS, calls,
             CHECK_EVERY);
    return CONF_PASS;
}

conf_result conf_log2_long_history(conf_env *env, char *msg, size_t cap)
{
    CONF_SKIP_UNLESS(env->m->logits == ILAB_LOGITS_FULL, "logits: full");
    int32_t v = env->info.vocab_size;
    int32_t prompt[REFS][16];
    float *ref[REFS], *got = malloc((size_t)v * sizeof *got);
    for (int r = 0; r < REFS; r++) {
        conf_prompt_tokens(env, env->opt->seed + 1900 + (uint64_t)r, prompt[r], ref_len[r]);
        ref[r] = malloc((size_t)v * sizeof *ref[r]);
    }
    char err[512] = "";
    ilab_backend_t *fresh = NULL, *own = env->be;
    ilab_status st = env->api->create(env->host, env->config, env->n_config, err, sizeof err, &fresh);
    conf_result r = CONF_FAIL;
    if (st != ILAB_OK) {
        CONF_MSG("a second create() with the same configuration returned %s: %s", ilab_status_name(st), err);
        goto out;
    }
    env->be = fresh;
    r = long_history(env, ref, got, (const int32_t(*)[16])prompt, msg, cap);
    env->be = own;
    /* the test's own instance has its own history; same configuration,
     * same bits */
    for (int k = 0; k < REFS && r == CONF_PASS; k++) {
        st = conf_fresh_logits(env, prompt[k], ref_len[k], got);
        int32_t at = -1;
        if (st != ILAB_OK) {
            conf_fail_status(env, st, "eval()", msg, cap);
            r = CONF_FAIL;
        } else if (!same_bits(got, ref[k], v, &at)) {
            CONF_MSG("the harness's instance (after the tests before this one) gives logit %d = %.9g for a "
                     "%d-token prompt (seed %" PRIu64 "); a fresh instance with the same configuration gives "
                     "%.9g (LOG-2: the same on every instance)", at, (double)got[at], ref_len[k],
                     env->opt->seed + 1900 + (uint64_t)k, (double)ref[k][at]);
            r = CONF_FAIL;
        }
    }
    env->api->destroy(fresh);
out:
    env->be = own;
    for (int k = 0; k < REFS; k++)
        free(ref[k]);
    free(got);
    return r;
}

/* ---- CCH-6: fork/free cycles by slope ---------------------------------- */

typedef struct fork_cycle_ctx {
    ilab_seq_t parent;
    int32_t tok[4];
} fork_cycle_ctx;

/* One fork of the parent, freed: untouched (shape 0), grown by a token
 * (shape 1), or forked again with that grandchild freed first (shape 2). */
static bool fork_shape(conf_env *env, fork_cycle_ctx *c, int shape, int i, char *msg, size_t cap)
{
    ilab_seq_t child = ILAB_SEQ_NONE, grand = ILAB_SEQ_NONE;
    ilab_status st = env->api->seq_fork(env->be, c->parent, &child);
    const char *what = "seq_fork(parent)";
    if (st == ILAB_OK && shape == 1) {
        what = "eval() of the child";
        st = conf_eval1(env, child, &c->tok[i % 4], 1, 0, NULL);
    }
    if (st == ILAB_OK && shape == 2) {
        what = "seq_fork(child)";
        st = env->api->seq_fork(env->be, child, &grand);
        if (st == ILAB_OK) {
            what = "seq_free(grandchild)";
            st = env->api->seq_free(env->be, grand);
        }
    }
    if (child != ILAB_SEQ_NONE) {
        ilab_status fst = env->api->seq_free(env->be, child);
        if (st == ILAB_OK && fst != ILAB_OK) {
            what = "seq_free(child)";
            st = fst;
        }
    }
    if (st != ILAB_OK) {
        CONF_MSG("fork/free cycle %d, shape %d: %s returned %s", i, shape, what, ilab_status_name(st));
        return false;
    }
    return true;
}

/* Every cycle does all three shapes, so a leak on any one of them shows
 * in full per cycle (the sanitizer's counter reports requested bytes,
 * which can be few). */
static bool fork_cycle_once(conf_env *env, int i, void *ctx, char *msg, size_t cap)
{
    for (int shape = 0; shape < 3; shape++)
        if (!fork_shape(env, ctx, shape, i, msg, cap))
            return false;
    return true;
}

conf_result conf_cch6_fork_slope(conf_env *env, char *msg, size_t cap)
{
    CONF_SKIP_UNLESS(env->m->logits == ILAB_LOGITS_FULL, "logits: full");
    CONF_SKIP_UNLESS(env->m->cache_fork, "cache.fork");
    enum { WARMUP = 50, CYCLES = 600 };
    fork_cycle_ctx c = {ILAB_SEQ_NONE, {0}};
    int32_t prompt[9];
    conf_prompt_tokens(env, env->opt->seed + 2100, prompt, 9);
    conf_prompt_tokens(env, env->opt->seed + 2101, c.tok, 4);
    ilab_status st = env->api->seq_create(env->be, &c.parent);
    if (st == ILAB_OK)
        st = conf_eval1(env, c.parent, prompt, 9, 0, NULL);
    conf_result r = CONF_FAIL;
    if (st != ILAB_OK)
        conf_fail_status(env, st, "seq_create/eval of the parent", msg, cap);
    else
        conf_leak_slope(env, "fork/free cycle (a fork freed untouched, one grown by a token, a fork of a fork)", WARMUP,
                        CYCLES, fork_cycle_once, &c, &r, msg, cap);
    if (c.parent != ILAB_SEQ_NONE)
        env->api->seq_free(env->be, c.parent);
    return r;
}
