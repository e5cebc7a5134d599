/* CCH clauses: sequences and their KV cache (capability: logits: full;
 * fork and truncate have their own capabilities). Every comparison is
 * against a full recompute on a fresh sequence. */
#include <stdlib.h>
#include <string.h>

#include "suites.h"

#define NEED_CACHE() CONF_SKIP_UNLESS(env->m->logits == ILAB_LOGITS_FULL, "logits: full")

/* eval `tokens` on `seq` and compare its logits to a fresh recompute of
 * prefix[0..n_prefix) (which must end with `tokens`). */
static bool step_matches(conf_env *env, ilab_seq_t seq, const int32_t *tokens, int32_t n,
                         const int32_t *prefix, int32_t n_prefix, float *got, float *want,
                         const char *what, char *msg, size_t cap)
{
    ilab_status st = conf_eval1(env, seq, tokens, n, 0, got);
    if (st != ILAB_OK) {
        conf_fail_status(env, st, "eval()", msg, cap);
        return false;
    }
    st = conf_fresh_logits(env, prefix, n_prefix, want);
    if (st != ILAB_OK) {
        conf_fail_status(env, st, "eval() of the full recompute", msg, cap);
        return false;
    }
    return conf_logits_close(got, want, env->info.vocab_size, what, msg, cap);
}

typedef struct bufs {
    float *got, *want;
    int32_t toks[64];
} bufs;

static void bufs_init(conf_env *env, bufs *b)
{
    b->got = calloc((size_t)env->info.vocab_size, sizeof(float));
    b->want = calloc((size_t)env->info.vocab_size, sizeof(float));
}

static void bufs_free(bufs *b)
{
    free(b->got);
    free(b->want);
}

conf_result conf_cch1_incremental(conf_env *env, char *msg, size_t cap)
{
    NEED_CACHE();
    bufs b;
    bufs_init(env, &b);
    int32_t n = 8, steps = 8;
    conf_prompt_tokens(env, env->opt->seed + 20, b.toks, n);
    ilab_seq_t s = 0;
    conf_result r = CONF_FAIL;
    ilab_status st = env->api->seq_create(env->be, &s);
    if (st != ILAB_OK) {
        conf_fail_status(env, st, "seq_create()", msg, cap);
        goto out;
    }
    if (!step_matches(env, s, b.toks, n, b.toks, n, b.got, b.want, "prefill", msg, cap))
        goto out;
    for (int32_t i = 0; i < steps; i++) {
        b.toks[n] = conf_argmax(b.got, env->info.vocab_size);
        char what[64];
        snprintf(what, sizeof what, "decode step %d (position %d)", i + 1, n);
        n++;
        if (!step_matches(env, s, &b.toks[n - 1], 1, b.toks, n, b.got, b.want, what, msg, cap))
            goto out;
    }
    int32_t len = 0;
    st = env->api->seq_length(env->be, s, &len);
    if (st != ILAB_OK || len != n) {
        CONF_MSG("seq_length() is %d (%s), want %d", len, ilab_status_name(st), n);
        goto out;
    }
    r = CONF_PASS;
out:
    if (s)
        env->api->seq_free(env->be, s);
    bufs_free(&b);
    return r;
}

conf_result conf_cch2_chunked(conf_env *env, char *msg, size_t cap)
{
    NEED_CACHE();
    bufs b;
    bufs_init(env, &b);
    int32_t n = 24, chunks[3] = {7, 7, 10};
    conf_prompt_tokens(env, env->opt->seed + 21, b.toks, n);
    ilab_seq_t s = 0;
    conf_result r = CONF_FAIL;
    ilab_status st = env->api->seq_create(env->be, &s);
    for (int c = 0, at = 0; c < 3 && st == ILAB_OK; at += chunks[c], c++)
        st = conf_eval1(env, s, b.toks + at, chunks[c], 0, b.got);
    if (st != ILAB_OK) {
        conf_fail_status(env, st, "chunked eval()", msg, cap);
        goto out;
    }
    st = conf_fresh_logits(env, b.toks, n, b.want);
    if (st != ILAB_OK) {
        conf_fail_status(env, st, "eval() in one call", msg, cap);
        goto out;
    }
    if (conf_logits_close(b.got, b.want, env->info.vocab_size, "chunks 7+7+10 vs one call of 24", msg, cap))
        r = CONF_PASS;
out:
    if (s)
        env->api->seq_free(env->be, s);
    bufs_free(&b);
    return r;
}

conf_result conf_cch3_fork(conf_env *env, char *msg, size_t cap)
{
    NEED_CACHE();
    CONF_SKIP_UNLESS(env->m->cache_fork, "cache.fork");
    bufs b;
    bufs_init(env, &b);
    /* prefix P (8), child appends C (4), parent then appends D (3) */
    int32_t P[8], C[4], D[3], pc[12], pd[11];
    conf_prompt_tokens(env, env->opt->seed + 22, P, 8);
    conf_prompt_tokens(env, env->opt->seed + 23, C, 4);
    conf_prompt_tokens(env, env->opt->seed + 24, D, 3);
    memcpy(pc, P, sizeof P);
    memcpy(pc + 8, C, sizeof C);
    memcpy(pd, P, sizeof P);
    memcpy(pd + 8, D, sizeof D);
    ilab_seq_t parent = 0, child = 0;
    conf_result r = CONF_FAIL;
    ilab_status st = env->api->seq_create(env->be, &parent);
    if (st == ILAB_OK)
        st = conf_eval1(env, parent, P, 8, 0, NULL);
    if (st == ILAB_OK)
        st = env->api->seq_fork(env->be, parent, &child);
    if (st != ILAB_OK) {
        conf_fail_status(env, st, "seq_create/eval/seq_fork", msg, cap);
        goto out;
    }
    if (!step_matches(env, child, C, 4, pc, 12, b.got, b.want, "child after 4 own tokens", msg, cap))
        goto out;
    if (!step_matches(env, parent, D, 3, pd, 11, b.got, b.want,
                      "parent after the child's tokens and 3 of its own", msg, cap))
        goto out;
    int32_t lp = 0, lc = 0;
    env->api->seq_length(env->be, parent, &lp);
    env->api->seq_length(env->be, child, &lc);
    CONF_CHECK(lp == 11 && lc == 12, "lengths parent %d child %d, want 11 and 12", lp, lc);
    /* freeing the parent must leave the child intact */
    env->api->seq_free(env->be, parent);
    parent = 0;
    int32_t more[1] = {P[0]}, pcm[13];
    memcpy(pcm, pc, sizeof pc);
    pcm[12] = more[0];
    if (!step_matches(env, child, more, 1, pcm, 13, b.got, b.want, "child after its parent was freed", msg, cap))
        goto out;
    r = CONF_PASS;
out:
    if (parent)
        env->api->seq_free(env->be, parent);
    if (child)
        env->api->seq_free(env->be, child);
    bufs_free(&b);
    return r;
}

conf_result conf_cch4_truncate(conf_env *env, char *msg, size_t cap)
{
    NEED_CACHE();
    CONF_SKIP_UNLESS(env->m->cache_truncate, "cache.truncate");
    bufs b;
    bufs_init(env, &b);
    int32_t P[12], Q[4], pq[10];
    conf_prompt_tokens(env, env->opt->seed + 25, P, 12);
    conf_prompt_tokens(env, env->opt->seed + 26, Q, 4);
    memcpy(pq, P, 6 * sizeof *P);
    memcpy(pq + 6, Q, sizeof Q);
    ilab_seq_t s = 0;
    conf_result r = CONF_FAIL;
    ilab_status st = env->api->seq_create(env->be, &s);
    if (st == ILAB_OK)
        st = conf_eval1(env, s, P, 12, 0, NULL);
    if (st == ILAB_OK)
        st = env->api->seq_truncate(env->be, s, 6);
    if (st != ILAB_OK) {
        conf_fail_status(env, st, "seq_create/eval/seq_truncate", msg, cap);
        goto out;
    }
    int32_t len = 0;
    env->api->seq_length(env->be, s, &len);
    if (len != 6) {
        CONF_MSG("seq_length() after truncate(6) is %d", len);
        goto out;
    }
    if (!step_matches(env, s, Q, 4, pq, 10, b.got, b.want, "truncate 12->6 then 4 new tokens", msg, cap))
        goto out;
    /* truncating past the end is an invalid argument, not a no-op */
    st = env->api->seq_truncate(env->be, s, 11);
    if (st != ILAB_INVALID_ARGUMENT) {
        CONF_MSG("seq_truncate(n_keep 11 > length 10) returned %s, want INVALID_ARGUMENT", ilab_status_name(st));
        goto out;
    }
    r = CONF_PASS;
out:
    if (s)
        env->api->seq_free(env->be, s);
    bufs_free(&b);
    return r;
}

conf_result conf_cch5_overflow(conf_env *env, char *msg, size_t cap)
{
    NEED_CACHE();
    int32_t ctx = conf_max_context(env);
    CONF_CHECK(ctx > 1, "max_context is %d", ctx);
    if (ctx > 16384) {
        CONF_MSG("max_context %d is too long to fill in a bounded test", ctx);
        return CONF_SKIP;
    }
    int32_t *t = malloc((size_t)(ctx + 1) * sizeof *t);
    conf_prompt_tokens(env, env->opt->seed + 27, t, ctx + 1);
    ilab_seq_t s = 0, s2 = 0;
    conf_result r = CONF_FAIL;
    int32_t len = -1;
    ilab_status st = env->api->seq_create(env->be, &s);
    if (st == ILAB_OK)
        st = conf_eval1(env, s, t, ctx - 1, 0, NULL);
    if (st == ILAB_OK)
        st = conf_eval1(env, s, t + ctx - 1, 1, 0, NULL);
    if (st != ILAB_OK) {
        conf_fail_status(env, st, "filling the sequence to max_context", msg, cap);
        goto out;
    }
    st = conf_eval1(env, s, t + ctx, 1, 0, NULL);
    env->api->seq_length(env->be, s, &len);
    if (st != ILAB_CONTEXT_OVERFLOW || len != ctx) {
        CONF_MSG("one token past max_context %d: %s, length %d; want CONTEXT_OVERFLOW and length unchanged",
                 ctx, ilab_status_name(st), len);
        goto out;
    }
    st = env->api->seq_create(env->be, &s2);
    if (st == ILAB_OK)
        st = conf_eval1(env, s2, t, ctx + 1, 0, NULL);
    len = -1;
    env->api->seq_length(env->be, s2, &len);
    if (st != ILAB_CONTEXT_OVERFLOW || len != 0) {
        CONF_MSG("a prompt of max_context+1 = %d tokens: %s, length %d; want CONTEXT_OVERFLOW and length 0",
                 ctx + 1, ilab_status_name(st), len);
        goto out;
    }
    r = CONF_PASS;
out:
    if (s)
        env->api->seq_free(env->be, s);
    if (s2)
        env->api->seq_free(env->be, s2);
    free(t);
    return r;
}

typedef struct seq_cycle_ctx {
    int32_t tok[4];
    ilab_seq_t *issued; /* every handle seq_create returned, to catch reuse */
    int n_issued;
} seq_cycle_ctx;

static bool seq_cycle_once(conf_env *env, int i, void *ctx, char *msg, size_t cap)
{
    seq_cycle_ctx *c = ctx;
    ilab_seq_t s = 0;
    ilab_status st = env->api->seq_create(env->be, &s);
    /* a few tokens allocate the sequence's first cache block(s) */
    if (st == ILAB_OK)
        st = conf_eval1(env, s, c->tok, 1 + i % 4, 0, NULL);
    if (st != ILAB_OK) {
        CONF_MSG("cycle %d: seq_create/eval returned %s", i, ilab_status_name(st));
        return false;
    }
    for (int k = 0; k < c->n_issued; k++)
        if (c->issued[k] == s || s == ILAB_SEQ_NONE) {
            CONF_MSG("cycle %d: seq_create returned handle %llu, issued before in cycle %d (a handle "
                     "is never reused, CCH-6)", i, (unsigned long long)s, k);
            return false;
        }
    c->issued[c->n_issued++] = s;
    st = env->api->seq_free(env->be, s);
    if (st != ILAB_OK) {
        CONF_MSG("cycle %d: seq_free returned %s", i, ilab_status_name(st));
        return false;
    }
    return true;
}

/* A stale handle whose slot now holds another sequence must not reach it. */
static conf_result stale_after_reuse(conf_env *env, const int32_t *tok, char *msg, size_t cap)
{
    ilab_seq_t a = 0, b = 0;
    int32_t len = -1;
    ilab_status st = env->api->seq_create(env->be, &a);
    if (st == ILAB_OK)
        st = conf_eval1(env, a, tok, 2, 0, NULL);
    if (st == ILAB_OK)
        st = env->api->seq_free(env->be, a);
    if (st == ILAB_OK)
        st = env->api->seq_create(env->be, &b);
    if (st == ILAB_OK)
        st = conf_eval1(env, b, tok, 3, 0, NULL);
    CONF_CHECK(st == ILAB_OK, "seq_create/eval/seq_free returned %s", ilab_status_name(st));
    conf_result r = CONF_FAIL;
    if ((st = env->api->seq_length(env->be, a, &len)) != ILAB_INVALID_ARGUMENT)
        CONF_MSG("seq_length(freed handle %llu, its slot reused by %llu) returned %s, want INVALID_ARGUMENT",
                 (unsigned long long)a, (unsigned long long)b, ilab_status_name(st));
    else if ((st = conf_eval1(env, a, tok, 1, 0, NULL)) != ILAB_INVALID_ARGUMENT)
        CONF_MSG("eval(freed handle %llu, its slot reused) returned %s, want INVALID_ARGUMENT",
                 (unsigned long long)a, ilab_status_name(st));
    else if ((st = env->api->seq_free(env->be, a)) != ILAB_INVALID_ARGUMENT)
        CONF_MSG("seq_free(freed handle %llu, its slot reused) returned %s, want INVALID_ARGUMENT",
                 (unsigned long long)a, ilab_status_name(st));
    else if ((st = env->api->seq_length(env->be, b, &len)) != ILAB_OK || len != 3)
        CONF_MSG("the live sequence in the reused slot has length %d (%s) after calls on the stale "
                 "handle, want 3", len, ilab_status_name(st));
    else
        r = CONF_PASS;
    env->api->seq_free(env->be, b);
    return r;
}

/* CCH-6: seq_free releases what the sequence held (by slope of the live
 * heap), handles are never reused, stale handles are refused. */
conf_result conf_cch6_free(conf_env *env, char *msg, size_t cap)
{
    NEED_CACHE();
    enum { WARMUP = 50, CYCLES = 400 };
    seq_cycle_ctx c = {.issued = calloc(WARMUP + CYCLES, sizeof(ilab_seq_t))};
    conf_prompt_tokens(env, env->opt->seed + 28, c.tok, 4);
    conf_result r = CONF_FAIL;
    char leak_msg[CONF_MSG_CAP] = "";
    if (!conf_leak_slope(env, "sequence create/eval/free cycle", WARMUP, CYCLES, seq_cycle_once, &c, &r,
                         leak_msg, sizeof leak_msg)) {
        CONF_MSG("%s", leak_msg);
        free(c.issued);
        return r;
    }
    ilab_seq_t last = c.issued[c.n_issued - 1];
    free(c.issued);
    int32_t len;
    ilab_status st = env->api->seq_length(env->be, last, &len);
    CONF_CHECK(st == ILAB_INVALID_ARGUMENT, "seq_length(freed handle) returned %s, want INVALID_ARGUMENT",
               ilab_status_name(st));
    st = conf_eval1(env, last, c.tok, 1, 0, NULL);
    CONF_CHECK(st == ILAB_INVALID_ARGUMENT, "eval(freed handle) returned %s, want INVALID_ARGUMENT",
               ilab_status_name(st));
    st = env->api->seq_free(env->be, last);
    CONF_CHECK(st == ILAB_INVALID_ARGUMENT, "seq_free(freed handle) returned %s, want INVALID_ARGUMENT",
               ilab_status_name(st));
    st = env->api->seq_length(env->be, ILAB_SEQ_NONE, &len);
    CONF_CHECK(st == ILAB_INVALID_ARGUMENT, "seq_length(0) returned %s, want INVALID_ARGUMENT",
               ilab_status_name(st));
    r = stale_after_reuse(env, c.tok, msg, cap);
    if (r == CONF_PASS)
        CONF_MSG("%s", leak_msg);
    return r;
}

conf_result conf_cch7_interleaved(conf_env *env, char *msg, size_t cap)
{
    NEED_CACHE();
    enum { STEPS = 6 };
    int32_t v = env->info.vocab_size;
    int32_t pa[6], pb[9], ta[STEPS], tb[STEPS];
    conf_prompt_tokens(env, env->opt->seed + 29, pa, 6);
    conf_prompt_tokens(env, env->opt->seed + 30, pb, 9);
    conf_prompt_tokens(env, env->opt->seed + 31, ta, STEPS);
    conf_prompt_tokens(env, env->opt->seed + 32, tb, STEPS);
    float *solo_a = calloc((size_t)v * STEPS, sizeof(float)), *solo_b = calloc((size_t)v * STEPS, sizeof(float));
    float *got = calloc((size_t)v, sizeof(float));
    ilab_seq_t a = 0, b = 0;
    conf_result r = CONF_FAIL;
    ilab_status st = ILAB_OK;
    /* alone: a, then b */
    for (int which = 0; which < 2 && st == ILAB_OK; which++) {
        ilab_seq_t s = 0;
        st = env->api->seq_create(env->be, &s);
        if (st == ILAB_OK)
            st = conf_eval1(env, s, which ? pb : pa, which ? 9 : 6, 0, NULL);
        for (int i = 0; i < STEPS && st == ILAB_OK; i++)
            st = conf_eval1(env, s, which ? &tb[i] : &ta[i], 1, 0, (which ? solo_b : solo_a) + (size_t)i * v);
        if (s)
            env->api->seq_free(env->be, s);
    }
    if (st == ILAB_OK)
        st = env->api->seq_create(env->be, &a);
    if (st == ILAB_OK)
        st = env->api->seq_create(env->be, &b);
    if (st == ILAB_OK)
        st = conf_eval1(env, a, pa, 6, 0, NULL);
    if (st == ILAB_OK)
        st = conf_eval1(env, b, pb, 9, 0, NULL);
    if (st != ILAB_OK) {
        conf_fail_status(env, st, "eval()", msg, cap);
        goto out;
    }
    for (int i = 0; i < STEPS; i++) {
        char what[64];
        st = conf_eval1(env, a, &ta[i], 1, 0, got);
        snprintf(what, sizeof what, "sequence A, interleaved step %d", i + 1);
        if (st != ILAB_OK) {
            conf_fail_status(env, st, what, msg, cap);
            goto out;
        }
        if (!conf_logits_close(got, solo_a + (size_t)i * v, v, what, msg, cap))
            goto out;
        st = conf_eval1(env, b, &tb[i], 1, 0, got);
        snprintf(what, sizeof what, "sequence B, interleaved step %d", i + 1);
        if (st != ILAB_OK) {
            conf_fail_status(env, st, what, msg, cap);
            goto out;
        }
        if (!conf_logits_close(got, solo_b + (size_t)i * v, v, what, msg, cap))
            goto out;
    }
    r = CONF_PASS;
out:
    if (a)
        env->api->seq_free(env->be, a);
    if (b)
        env->api->seq_free(env->be, b);
    free(solo_a);
    free(solo_b);
    free(got);
    return r;
}
