/* CCH-6 when the sequence slots run out: sequences are created (the first
 * holding a few tokens) until seq_create() says ILAB_OUT_OF_MEMORY; then
 * seq_fork() must say ILAB_OUT_OF_MEMORY too, with a message and the child
 * untouched, and freeing one sequence must make room for exactly one more,
 * by seq_create() and (cache.fork) by seq_fork(). A plugin that still has a
 * slot after MAX_TRIED sequences passes with a note: its limit is past what
 * the harness fills. */
#include <stdlib.h>
#include <string.h>

#include "suites.h"

enum { MAX_TRIED = 4096 };

static const ilab_seq_t UNTOUCHED = (ilab_seq_t)0x5eedf00dULL;

/* seq_create() and, with cache.fork, seq_fork(parent) must both say
 * OUT_OF_MEMORY with a message and leave *out as it was. */
static bool both_refuse(conf_env *env, ilab_seq_t parent, int live, const char *when, char *msg, size_t cap)
{
    char e[512];
    ilab_seq_t h = UNTOUCHED;
    ilab_status st = env->api->seq_create(env->be, &h);
    if (st != ILAB_OUT_OF_MEMORY || h != UNTOUCHED || !conf_last_error(env, e, sizeof e)[0]) {
        snprintf(msg, cap, "%s (%d live sequences): seq_create() returned %s%s%s; want ILAB_OUT_OF_MEMORY "
                 "with a message and the handle untouched", when, live, ilab_status_name(st),
                 h != UNTOUCHED ? ", wrote the handle" : "", st == ILAB_OK ? " (a slot came from nowhere)" : "");
        if (st == ILAB_OK)
            env->api->seq_free(env->be, h);
        return false;
    }
    if (!env->m->cache_fork)
        return true;
    st = env->api->seq_fork(env->be, parent, &h);
    if (st != ILAB_OUT_OF_MEMORY || h != UNTOUCHED || !conf_last_error(env, e, sizeof e)[0]) {
        snprintf(msg, cap, "%s (%d live sequences, seq_create() says ILAB_OUT_OF_MEMORY): seq_fork() returned "
                 "%s%s (%s); want ILAB_OUT_OF_MEMORY with a message and the child untouched (CCH-6: no slot "
                 "left is OUT_OF_MEMORY for both)", when, live, ilab_status_name(st),
                 h != UNTOUCHED ? ", wrote the child" : "", e);
        if (st == ILAB_OK)
            env->api->seq_free(env->be, h);
        return false;
    }
    return true;
}

/* Free the last sequence; the freed slot takes exactly one new one. */
static bool room_again(conf_env *env, ilab_seq_t *seqs, int n, bool by_fork, char *msg, size_t cap)
{
    const char *call = by_fork ? "seq_fork()" : "seq_create()";
    ilab_status st = env->api->seq_free(env->be, seqs[n - 1]);
    ilab_seq_t h = ILAB_SEQ_NONE;
    if (st == ILAB_OK)
        st = by_fork ? env->api->seq_fork(env->be, seqs[0], &h) : env->api->seq_create(env->be, &h);
    if (st != ILAB_OK) {
        seqs[n - 1] = ILAB_SEQ_NONE;
        snprintf(msg, cap, "with every slot in use, one seq_free() then %s returned %s; want ILAB_OK (freeing "
                 "one makes room again)", call, ilab_status_name(st));
        return false;
    }
    seqs[n - 1] = h;
    char when[96];
    snprintf(when, sizeof when, "after a seq_free() and a %s that took the freed slot", call);
    return both_refuse(env, seqs[0], n, when, msg, cap);
}

/* cache_stats()'s free positions; -1 without cache.stats or on failure. */
static int64_t free_positions(conf_env *env)
{
    if (!env->m->cache_stats)
        return -1;
    ilab_cache_stats_t cs;
    memset(&cs, 0, sizeof cs);
    cs.struct_size = sizeof cs;
    return env->api->cache_stats(env->be, &cs) == ILAB_OK ? cs.free_positions : -1;
}

conf_result conf_cch6_slots_run_out(conf_env *env, char *msg, size_t cap)
{
    CONF_SKIP_UNLESS(env->m->logits == ILAB_LOGITS_FULL, "logits: full");
    conf_engine_release(env); /* its prefix cache holds blocks of its own */
    int64_t free_before = free_positions(env);
    ilab_seq_t *seqs = calloc(MAX_TRIED, sizeof *seqs);
    int32_t tok[3];
    conf_prompt_tokens(env, env->opt->seed + 2200, tok, 3);
    int n = 0;
    ilab_status st = ILAB_OK;
    conf_result r = CONF_FAIL;
    if ((st = env->api->seq_create(env->be, &seqs[0])) == ILAB_OK) {
        n = 1;
        if ((st = conf_eval1(env, seqs[0], tok, 3, 0, NULL)) != ILAB_OK) {
            conf_fail_status(env, st, "eval() of 3 tokens into the first sequence", msg, cap);
            goto out;
        }
    }
    while (st == ILAB_OK && n < MAX_TRIED)
        if ((st = env->api->seq_create(env->be, &seqs[n])) == ILAB_OK)
            n++;
    if (n == 0 || (st != ILAB_OK && st != ILAB_OUT_OF_MEMORY)) {
        CONF_MSG("seq_create() of sequence %d returned %s; want ILAB_OK, or ILAB_OUT_OF_MEMORY once no slot "
                 "is left", n + 1, ilab_status_name(st));
        goto out;
    }
    if (n == MAX_TRIED) {
        CONF_MSG("%d sequences created without running out; the OUT_OF_MEMORY path is not reached", n);
        r = CONF_PASS;
        goto out;
    }
    if (!both_refuse(env, seqs[0], n, "every sequence slot in use", msg, cap) ||
        !room_again(env, seqs, n, false, msg, cap) ||
        (env->m->cache_fork && !room_again(env, seqs, n, true, msg, cap)))
        goto out;
    CONF_MSG("%d sequences fill the slots; seq_create()%s then say OUT_OF_MEMORY, and a freed slot takes one more",
             n, env->m->cache_fork ? " and seq_fork()" : "");
    r = CONF_PASS;
out:
    for (int i = 0; i < n && i < MAX_TRIED; i++)
        if (seqs[i] != ILAB_SEQ_NONE)
            env->api->seq_free(env->be, seqs[i]);
    free(seqs);
    int64_t free_after = free_positions(env);
    if (r == CONF_PASS && free_after != free_before) {
        CONF_MSG("with every sequence freed after refused seq_create()%s calls, free_positions is %lld, "
                 "not the %lld before the slots were filled: a refused call kept cache blocks (CCH-6, "
                 "CCH-10)", env->m->cache_fork ? " and seq_fork()" : "", (long long)free_after,
                 (long long)free_before);
        r = CONF_FAIL;
    }
    return r;
}
