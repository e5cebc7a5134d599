/* CCH-10 (capability: cache.stats, ABI 1.1): what cache_stats() reports
 * agrees with what the cache does. Free capacity falls by whole blocks as a
 * sequence grows, comes back on truncate and free, the total never moves,
 * and eval() runs out of memory exactly where the free capacity says: an
 * eval that needs the free blocks succeeds, one block more is
 * ILAB_OUT_OF_MEMORY and changes nothing. A backend without cache.stats
 * must refuse the call (ERR-2). */
#include <stdlib.h>
#include <string.h>

#include "cache_stats.h"
#include "resources.h"
#include "suites.h"

/* Positions held by a sequence of `len` positions that shares no block. */
static int64_t held(int64_t len, int64_t block)
{
    return (len + block - 1) / block * block;
}

/* cache_stats() into `*s`, with the invariants every answer keeps and the
 * total of the first answer (`total`, 0 = this is the first). */
static bool read_stats(conf_env *env, ilab_cache_stats_t *s, int64_t total, const char *when,
                       char *msg, size_t cap)
{
    memset(s, 0, sizeof *s);
    s->struct_size = sizeof *s;
    ilab_status st = env->api->cache_stats(env->be, s);
    if (st != ILAB_OK) {
        char what[160];
        snprintf(what, sizeof what, "cache_stats() %s", when);
        conf_fail_status(env, st, what, msg, cap);
        return false;
    }
    const char *bad = s->block_size < 1                    ? "block_size < 1"
                      : s->total_positions < 1             ? "total_positions < 1"
                      : s->total_positions % s->block_size ? "total_positions is not a multiple of block_size"
                      : s->free_positions < 0 || s->free_positions > s->total_positions
                          ? "free_positions outside 0..total_positions"
                      : s->free_positions % s->block_size ? "free_positions is not a multiple of block_size"
                      : total && s->total_positions != total ? "total_positions changed"
                                                              : NULL;
    if (bad)
        snprintf(msg, cap, "cache_stats() %s: %s (block_size %d, total %lld, free %lld; first "
                 "total %lld)", when, bad, (int)s->block_size, (long long)s->total_positions,
                 (long long)s->free_positions, (long long)(total ? total : s->total_positions));
    return bad == NULL;
}

/* Free capacity must now be `want`. */
static bool free_is(conf_env *env, const ilab_cache_stats_t *s0, int64_t want, const char *when,
                    char *msg, size_t cap)
{
    ilab_cache_stats_t s;
    if (!read_stats(env, &s, s0->total_positions, when, msg, cap))
        return false;
    if (s.free_positions != want) {
        snprintf(msg, cap, "cache_stats() %s: free_positions %lld, want %lld (block_size %d, "
                 "%lld free before any sequence)", when, (long long)s.free_positions,
                 (long long)want, (int)s.block_size, (long long)s0->free_positions);
        return false;
    }
    return true;
}

/* Refusals: NULL, a struct_size below ABI 1.1's; and no byte written past
 * the caller's struct_size. */
static bool stats_arguments(conf_env *env, char *msg, size_t cap)
{
    ilab_status st = env->api->cache_stats(env->be, NULL);
    CONF_CHECK_BOOL(st == ILAB_INVALID_ARGUMENT, "cache_stats(NULL) returned %s, want "
               "ILAB_INVALID_ARGUMENT", ilab_status_name(st));
    unsigned char buf[sizeof(ilab_cache_stats_t) + 16];
    memset(buf, 0xA5, sizeof buf);
    uint32_t small = offsetof(ilab_cache_stats_t, free_positions);
    memcpy(buf, &small, sizeof small);
    st = env->api->cache_stats(env->be, (ilab_cache_stats_t *)(void *)buf);
    CONF_CHECK_BOOL(st == ILAB_ABI_MISMATCH, "cache_stats() with struct_size %u (smaller than ABI "
               "1.1's %zu) returned %s, want ILAB_ABI_MISMATCH", small,
               sizeof(ilab_cache_stats_t), ilab_status_name(st));
    for (size_t i = sizeof small; i < sizeof buf; i++)
        CONF_CHECK_BOOL(buf[i] == 0xA5, "cache_stats() refused struct_size %u but wrote byte %zu",
                   small, i);
    uint32_t exact = sizeof(ilab_cache_stats_t);
    memcpy(buf, &exact, sizeof exact);
    st = env->api->cache_stats(env->be, (ilab_cache_stats_t *)(void *)buf);
    if (st != ILAB_OK) {
        conf_fail_status(env, st, "cache_stats()", msg, cap);
        return false;
    }
    for (size_t i = exact; i < sizeof buf; i++)
        CONF_CHECK_BOOL(buf[i] == 0xA5, "cache_stats() with struct_size %u wrote byte %zu, past it",
                   exact, i);
    return true;
}

static ilab_status grow(conf_env *env, ilab_seq_t s, int32_t n, uint64_t seed)
{
    int32_t *t = malloc((size_t)(n > 0 ? n : 1) * sizeof *t);
    if (!t)
        return ILAB_OUT_OF_MEMORY;
    conf_prompt_tokens(env, seed, t, n);
    ilab_status st = conf_eval1(env, s, t, n, 0, NULL);
    free(t);
    return st;
}

/* One sequence grown in chunks, truncated, forked; a second beside it. */
static conf_result track(conf_env *env, const ilab_cache_stats_t *s0, ilab_seq_t *seqs,
                         char *msg, size_t cap)
{
    const int64_t B = s0->block_size, F0 = s0->free_positions;
    int32_t ctx = conf_max_context(env);
    if (!free_is(env, s0, F0, "after seq_create() (an empty sequence holds no block)", msg, cap))
        return CONF_FAIL;
    int32_t chunks[] = {1, (int32_t)B - 1, 1, 2 * (int32_t)B + 3, 1, 1};
    int64_t len = 0;
    for (size_t i = 0; i < sizeof chunks / sizeof chunks[0]; i++) {
        int32_t n = chunks[i] > 0 ? chunks[i] : 1;
        if (len + n > ctx || held(len + n, B) > F0 / 2)
            break;
        ilab_status st = grow(env, seqs[0], n, env->opt->seed + 100 + i);
        if (st != ILAB_OK) {
            conf_fail_status(env, st, "eval()", msg, cap);
            return CONF_FAIL;
        }
        len += n;
        char when[96];
        snprintf(when, sizeof when, "after eval() to length %lld", (long long)len);
        if (!free_is(env, s0, F0 - held(len, B), when, msg, cap))
            return CONF_FAIL;
    }
    CONF_CHECK(len > 0, "cache_stats() reports %lld free positions: too few to grow a sequence",
               (long long)F0);
    if (env->m->cache_truncate) {
        int64_t keep = len / 2;
        ilab_status st = env->api->seq_truncate(env->be, seqs[0], (int32_t)keep);
        if (st != ILAB_OK) {
            conf_fail_status(env, st, "seq_truncate()", msg, cap);
            return CONF_FAIL;
        }
        if (!free_is(env, s0, F0 - held(keep, B), "after seq_truncate() to half", msg, cap))
            return CONF_FAIL;
        st = grow(env, seqs[0], (int32_t)(len - keep), env->opt->seed + 120);
        if (st != ILAB_OK) {
            conf_fail_status(env, st, "eval() after seq_truncate()", msg, cap);
            return CONF_FAIL;
        }
        if (!free_is(env, s0, F0 - held(len, B), "after growing back", msg, cap))
            return CONF_FAIL;
    }
    int64_t f = F0 - held(len, B);
    if (env->m->cache_fork) {
        /* A fork may share its parent's blocks or copy them: it takes no
         * more than the parent holds, and gives it all back when freed. */
        ilab_status st = env->api->seq_fork(env->be, seqs[0], &seqs[2]);
        if (st != ILAB_OK) {
            conf_fail_status(env, st, "seq_fork()", msg, cap);
            return CONF_FAIL;
        }
        ilab_cache_stats_t s;
        if (!read_stats(env, &s, s0->total_positions, "after seq_fork()", msg, cap))
            return CONF_FAIL;
        CONF_CHECK(s.free_positions <= f && s.free_positions >= f - held(len, B),
                   "cache_stats() after seq_fork() of a sequence holding %lld positions: free "
                   "%lld, want %lld..%lld", (long long)held(len, B), (long long)s.free_positions,
                   (long long)(f - held(len, B)), (long long)f);
        if (len < ctx) {
            st = grow(env, seqs[2], 1, env->opt->seed + 121);
            if (st != ILAB_OK) {
                conf_fail_status(env, st, "eval() of the fork", msg, cap);
                return CONF_FAIL;
            }
            ilab_cache_stats_t s2;
            if (!read_stats(env, &s2, s0->total_positions, "after the fork grew", msg, cap))
                return CONF_FAIL;
            CONF_CHECK(s2.free_positions <= s.free_positions, "cache_stats(): free rose from %lld "
                       "to %lld when the fork grew by a token", (long long)s.free_positions,
                       (long long)s2.free_positions);
        }
        env->api->seq_free(env->be, seqs[2]);
        seqs[2] = 0;
        if (!free_is(env, s0, f, "after seq_free() of the fork", msg, cap))
            return CONF_FAIL;
    }
    int32_t n2 = (int32_t)(B + 1 < ctx ? B + 1 : ctx);
    ilab_status st = env->api->seq_create(env->be, &seqs[1]);
    if (st == ILAB_OK && held(n2, B) <= f)
        st = grow(env, seqs[1], n2, env->opt->seed + 122);
    else
        n2 = 0;
    if (st != ILAB_OK) {
        conf_fail_status(env, st, "seq_create()/eval() of a second sequence", msg, cap);
        return CONF_FAIL;
    }
    if (!free_is(env, s0, f - held(n2, B), "with a second sequence", msg, cap))
        return CONF_FAIL;
    env->api->seq_free(env->be, seqs[0]);
    seqs[0] = 0;
    if (!free_is(env, s0, F0 - held(n2, B), "after seq_free() of the first", msg, cap))
        return CONF_FAIL;
    env->api->seq_free(env->be, seqs[1]);
    seqs[1] = 0;
    if (!free_is(env, s0, F0, "after every sequence was freed", msg, cap))
        return CONF_FAIL;
    snprintf(msg, cap, "block_size %lld, %lld of %lld positions free; tracked lengths up to %lld",
             (long long)B, (long long)F0, (long long)s0->total_positions, (long long)len);
    return CONF_PASS;
}

conf_result conf_cch10_stats_track(conf_env *env, char *msg, size_t cap)
{
    CONF_SKIP_UNLESS(env->m->cache_stats, "cache.stats");
    if (!stats_arguments(env, msg, cap))
        return CONF_FAIL;
    ilab_cache_stats_t s0;
    if (!read_stats(env, &s0, 0, "on a fresh instance", msg, cap))
        return CONF_FAIL;
    ilab_seq_t seqs[3] = {0, 0, 0};
    ilab_status st = env->api->seq_create(env->be, &seqs[0]);
    if (st != ILAB_OK) {
        conf_fail_status(env, st, "seq_create()", msg, cap);
        return CONF_FAIL;
    }
    conf_result r = track(env, &s0, seqs, msg, cap);
    for (int i = 0; i < 3; i++)
        if (seqs[i])
            env->api->seq_free(env->be, seqs[i]);
    return r;
}

/* ---- filling the cache ------------------------------------------------------ */

typedef struct fill {
    ilab_seq_t *seqs;
    int32_t *lens;
    int n, cap;
    int32_t *tokens; /* max_context prompt tokens */
} fill;

static bool fill_push(fill *f, ilab_seq_t s)
{
    if (f->n == f->cap) {
        int ncap = f->cap ? 2 * f->cap : 64;
        ilab_seq_t *ns = realloc(f->seqs, (size_t)ncap * sizeof *ns);
        if (!ns)
            return false;
        f->seqs = ns;
        int32_t *nl = realloc(f->lens, (size_t)ncap * sizeof *nl);
        if (!nl)
            return false;
        f->lens = nl;
        f->cap = ncap;
    }
    f->seqs[f->n] = s;
    f->lens[f->n++] = 0;
    return true;
}

/* An eval of `n` positions into a new sequence that must be refused with
 * ILAB_OUT_OF_MEMORY (it needs one block more than is free) and change
 * nothing: the sequence stays empty and the free capacity where it was. */
static bool one_block_too_many(conf_env *env, const ilab_cache_stats_t *s0, fill *f, int32_t n,
                               int64_t free_now, char *msg, size_t cap)
{
    ilab_seq_t s = f->seqs[f->n - 1];
    ilab_status st = conf_eval1(env, s, f->tokens, n, 0, NULL);
    CONF_CHECK_BOOL(st == ILAB_OUT_OF_MEMORY, "eval() of %d positions (%lld more than the %lld "
               "cache_stats() reports free) returned %s, want ILAB_OUT_OF_MEMORY", (int)n,
               (long long)(n - free_now), (long long)free_now, ilab_status_name(st));
    int32_t len = -1;
    env->api->seq_length(env->be, s, &len);
    CONF_CHECK_BOOL(len == f->lens[f->n - 1], "the refused eval() changed the sequence's length to %d",
               (int)len);
    return free_is(env, s0, free_now, "after an eval() refused for memory", msg, cap);
}

/* The same refusal twenty times more, alone and (max_batch >= 2) in a
 * batch beside another new sequence: a refused eval() changes nothing
 * (CCH-8), its own bookkeeping included, so no heap byte, descriptor or
 * thread stays behind (ABI-7's "leaks nothing" on the OUT_OF_MEMORY path). */
static bool refusals_leave_nothing(conf_env *env, fill *f, char *msg, size_t cap)
{
    conf_engine_release(env); /* no scheduler thread allocating meanwhile */
    ilab_seq_t s = f->seqs[f->n - 1], other = 0;
    size_t n_items = env->m->max_batch >= 2 &&
                     env->api->seq_create(env->be, &other) == ILAB_OK ? 2 : 1;
    ilab_batch_item_t ia = {.struct_size = sizeof ia, .seq = other, .tokens = f->tokens,
                            .n_tokens = 1};
    ilab_batch_item_t ib = {.struct_size = sizeof ib, .seq = s, .tokens = f->tokens, .n_tokens = 1};
    const ilab_batch_item_t *items[2] = {&ia, &ib};
    env->api->eval(env->be, items + 2 - n_items, n_items); /* settles a stored message */
    conf_resources before = conf_resources_now();
    bool ok = true;
    for (int i = 0; i < 20 && ok; i++) {
        ilab_status one = conf_eval1(env, s, f->tokens, 1, 0, NULL);
        ilab_status two = env->api->eval(env->be, items + 2 - n_items, n_items);
        ok = one == ILAB_OUT_OF_MEMORY && two == ILAB_OUT_OF_MEMORY;
        if (!ok)
            snprintf(msg, cap, "with the cache full, refusal %d of one position returned %s and "
                     "of %zu item(s) %s, want ILAB_OUT_OF_MEMORY", i + 1, ilab_status_name(one),
                     n_items, ilab_status_name(two));
    }
    ok = ok && conf_resources_same(before, conf_resources_now(),
                                   "40 evals refused for memory at a full cache", msg, cap);
    if (n_items == 2)
        env->api->seq_free(env->be, other);
    return ok;
}

/* Two items beside each other in one batch — `a` gets n_a positions that
 * fit, `b` a new sequence gets one position that needs a block that is not
 * there — are ILAB_OUT_OF_MEMORY as a whole and change nothing (CCH-8): `a`
 * keeps its length although its item came first. */
static bool batch_too_many(conf_env *env, const ilab_cache_stats_t *s0, fill *f, int32_t n_a,
                           int64_t free_now, char *msg, size_t cap)
{
    if (env->m->max_batch < 2)
        return true;
    ilab_seq_t b = 0;
    if (env->api->seq_create(env->be, &b) != ILAB_OK)
        return true; /* no slot for a second sequence: slots are this backend's limit */
    ilab_seq_t a = f->seqs[f->n - 1];
    ilab_batch_item_t ia = {.struct_size = sizeof ia, .seq = a, .tokens = f->tokens, .n_tokens = n_a};
    ilab_batch_item_t ib = {.struct_size = sizeof ib, .seq = b, .tokens = f->tokens, .n_tokens = 1};
    const ilab_batch_item_t *items[2] = {&ia, &ib};
    ilab_status st = env->api->eval(env->be, items, 2);
    int32_t len_a = -1, len_b = -1;
    env->api->seq_length(env->be, a, &len_a);
    env->api->seq_length(env->be, b, &len_b);
    env->api->seq_free(env->be, b);
    CONF_CHECK_BOOL(st == ILAB_OUT_OF_MEMORY, "a batch of %d positions that fit and 1 position into a new "
                    "sequence (one block more than the %lld cache_stats() reports free) returned %s, want "
                    "ILAB_OUT_OF_MEMORY", (int)n_a, (long long)free_now, ilab_status_name(st));
    CONF_CHECK_BOOL(len_a == f->lens[f->n - 1] && len_b == 0, "the refused batch changed the lengths to "
                    "%d and %d (were %d and 0): a refused eval() changes nothing (CCH-8)", (int)len_a,
                    (int)len_b, (int)f->lens[f->n - 1]);
    return free_is(env, s0, free_now, "after a batch refused for memory", msg, cap);
}

/* The last sequence takes exactly the free capacity `n`, in two evals when
 * it can, so that the second appends to a partly filled block (whose room
 * a plugin must count: CCH-10's "evaluations that need, in all, the free
 * blocks succeed"). Before the second: one position more, alone and as a
 * batch, is ILAB_OUT_OF_MEMORY and changes nothing. */
static bool exact_fit(conf_env *env, const ilab_cache_stats_t *s0, fill *f, int32_t n, int64_t *free_now,
                      char *msg, size_t cap)
{
    const int64_t B = s0->block_size;
    int32_t ctx = conf_max_context(env);
    ilab_seq_t s = f->seqs[f->n - 1];
    if (n + 1 <= ctx && !one_block_too_many(env, s0, f, n + 1, *free_now, msg, cap))
        return false;
    uint64_t rng = env->opt->seed ^ 0xF17F17ULL;
    int32_t first = n > 1 ? 1 + (int32_t)(conf_splitmix64(&rng) % (uint64_t)(n - 1)) : 0;
    if (first > 1 && first % B == 0)
        first--; /* a partly filled last block */
    if (first > 0) {
        ilab_status st = conf_eval1(env, s, f->tokens, first, 0, NULL);
        CONF_CHECK_BOOL(st == ILAB_OK, "eval() of %d of the %lld free positions into a new sequence returned %s",
                        (int)first, (long long)*free_now, ilab_status_name(st));
        f->lens[f->n - 1] = first;
        *free_now -= held(first, B);
        if (!free_is(env, s0, *free_now, "after the first part of the last sequence", msg, cap))
            return false;
    }
    int32_t rest = n - first; /* exactly the room left: the partial block's and the free blocks' */
    if (n + 1 <= ctx && first > 0) {
        ilab_status st = conf_eval1(env, s, f->tokens, rest + 1, 0, NULL);
        int32_t len = -1;
        env->api->seq_length(env->be, s, &len);
        CONF_CHECK_BOOL(st == ILAB_OUT_OF_MEMORY && len == first, "appending %d positions to a sequence of %d "
                        "(one more than its last block and the %lld free positions hold) returned %s and left "
                        "length %d, want ILAB_OUT_OF_MEMORY and %d", (int)(rest + 1), (int)first,
                        (long long)*free_now, ilab_status_name(st), (int)len, (int)first);
        if (!free_is(env, s0, *free_now, "after an append refused for memory", msg, cap))
            return false;
    }
    if (!batch_too_many(env, s0, f, rest, *free_now, msg, cap))
        return false;
    ilab_status st = conf_eval1(env, s, f->tokens, rest, 0, NULL);
    CONF_CHECK_BOOL(st == ILAB_OK, "appending %d positions to a sequence of %d, exactly the room its last block "
                    "and the %lld free positions hold, returned %s, want ILAB_OK", (int)rest, (int)first,
                    (long long)*free_now, ilab_status_name(st));
    f->lens[f->n - 1] = n;
    *free_now = 0;
    return free_is(env, s0, 0, "after the cache was filled exactly", msg, cap);
}

/* Positions the harness evaluates to fill a cache (x10 with --deep): always
 * FILL_BUDGET, and up to FILL_BUDGET_MAX while the fill has taken less than
 * FILL_SECONDS, so that a fast plugin's cache of tens of thousands of
 * positions is filled to its OUT_OF_MEMORY boundary and a slow model's is
 * not filled for minutes. A bigger cache is filled this far, free capacity
 * checked all the way, and its boundary left to a run with a smaller cache. */
#define FILL_BUDGET 4096
#define FILL_BUDGET_MAX 65536
#define FILL_SECONDS 2.0

static bool fill_within_budget(const conf_env *env, int64_t filled, double t0)
{
    int64_t scale = env->opt->deep ? 10 : 1;
    if (filled < scale * FILL_BUDGET)
        return true;
    return filled < scale * FILL_BUDGET_MAX && conf_now_seconds() - t0 < (double)scale * FILL_SECONDS;
}

static conf_result fill_up(conf_env *env, const ilab_cache_stats_t *s0, fill *f, char *msg,
                           size_t cap)
{
    const int64_t B = s0->block_size;
    int32_t ctx = conf_max_context(env);
    int32_t full = (int32_t)(ctx / B * B); /* a sequence of whole blocks */
    CONF_CHECK(full > 0, "max_context %d is smaller than a block (%lld positions)", (int)ctx,
               (long long)B);
    int64_t free_now = s0->free_positions;
    double t0 = conf_now_seconds();
    bool boundary = false; /* checked one block more than free at least once */
    while (free_now > 0) {
        if (!fill_within_budget(env, s0->free_positions - free_now, t0)) {
            snprintf(msg, cap, "%d sequences took %lld of %lld free positions exactly; the rest "
                     "is past the harness's fill budget (%d positions, or %d within %.0f s), so the "
                     "OUT_OF_MEMORY boundary was not reached: run CCH-10 with a smaller cache for it",
                     f->n, (long long)(s0->free_positions - free_now), (long long)s0->free_positions,
                     FILL_BUDGET, FILL_BUDGET_MAX, FILL_SECONDS);
            return CONF_PASS;
        }
        ilab_seq_t s = 0;
        ilab_status st = env->api->seq_create(env->be, &s);
        if (st == ILAB_OUT_OF_MEMORY) {
            snprintf(msg, cap, "sequence slots ran out (%d sequences) with %lld positions free: "
                     "the cache cannot fill", f->n, (long long)free_now);
            return CONF_PASS; /* slots, not blocks, are this backend's limit */
        }
        if (st != ILAB_OK || !fill_push(f, s)) {
            if (st == ILAB_OK)
                env->api->seq_free(env->be, s);
            conf_fail_status(env, st, "seq_create()", msg, cap);
            return CONF_FAIL;
        }
        int32_t n = free_now < full ? (int32_t)free_now : full;
        if (n == free_now && !boundary) {
            if (!exact_fit(env, s0, f, n, &free_now, msg, cap))
                return CONF_FAIL;
            boundary = true;
            continue;
        }
        st = conf_eval1(env, s, f->tokens, n, 0, NULL);
        if (st != ILAB_OK) {
            char what[200];
            snprintf(what, sizeof what, "eval() of %d positions into sequence %d, with %lld "
                     "positions free by cache_stats(),", (int)n, f->n, (long long)free_now);
            conf_fail_status(env, st, what, msg, cap);
            return CONF_FAIL;
        }
        f->lens[f->n - 1] = n;
        free_now -= held(n, B);
        char when[96];
        snprintf(when, sizeof when, "after filling sequence %d", f->n);
        if (!free_is(env, s0, free_now, when, msg, cap))
            return CONF_FAIL;
    }
    /* Full: one more position needs a block that is not there. */
    ilab_seq_t s = 0;
    ilab_status st = env->api->seq_create(env->be, &s);
    if (st == ILAB_OK && fill_push(f, s)) {
        if (!one_block_too_many(env, s0, f, 1, 0, msg, cap) ||
            !refusals_leave_nothing(env, f, msg, cap))
            return CONF_FAIL;
        boundary = true;
    } else if (st == ILAB_OK) {
        env->api->seq_free(env->be, s);
    }
    snprintf(msg, cap, "%d sequences filled %lld free positions exactly%s", f->n - (boundary ? 1 : 0),
             (long long)s0->free_positions,
             boundary ? "; one block more was ILAB_OUT_OF_MEMORY and changed nothing, "
                        "41 times, leaving no heap byte, descriptor or thread"
                      : " (no slot left to ask for one block more)");
    return CONF_PASS;
}

conf_result conf_cch10_capacity_matches_oom(conf_env *env, char *msg, size_t cap)
{
    CONF_SKIP_UNLESS(env->m->cache_stats, "cache.stats");
    ilab_cache_stats_t s0;
    if (!read_stats(env, &s0, 0, "on a fresh instance", msg, cap))
        return CONF_FAIL;
    fill f = {0};
    int32_t ctx = conf_max_context(env);
    f.tokens = malloc((size_t)ctx * sizeof *f.tokens);
    if (!f.tokens) {
        snprintf(msg, cap, "out of memory");
        return CONF_ERROR;
    }
    conf_prompt_tokens(env, env->opt->seed + 130, f.tokens, ctx);
    conf_result r = fill_up(env, &s0, &f, msg, cap);
    for (int i = 0; i < f.n; i++)
        env->api->seq_free(env->be, f.seqs[i]);
    if (r == CONF_PASS) {
        char keep[CONF_MSG_CAP];
        snprintf(keep, sizeof keep, "%s", msg);
        if (!free_is(env, &s0, s0.free_positions, "after every sequence was freed", msg, cap))
            r = CONF_FAIL;
        else
            snprintf(msg, cap, "%s", keep);
    }
    free(f.seqs);
    free(f.lens);
    free(f.tokens);
    return r;
}

/* ---- not declared ------------------------------------------------------------ */

conf_result conf_err2_cache_stats_undeclared(conf_env *env, char *msg, size_t cap)
{
    if (env->m->cache_stats) {
        snprintf(msg, cap, "cache.stats is declared (CCH-10 checks it)");
        return CONF_SKIP;
    }
    ilab_cache_stats_t s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    ilab_status st = env->api->cache_stats(env->be, &s);
    CONF_CHECK(st == ILAB_UNSUPPORTED, "cache_stats() returned %s without cache.stats declared, "
               "want ILAB_UNSUPPORTED", ilab_status_name(st));
    /* A table built against ABI 1.0 ends before cache_stats, and a 1.0
     * source rebuilt against the 1.1 header leaves it NULL: the host's shim
     * answered, and the plugin has nothing to say (ADR 0022). */
    const ilab_backend_api_t *own = ilab_plugin_entry_of(env->plugin)->backend;
    if (conf_member_absent(env, offsetof(ilab_backend_api_t, cache_stats))) {
        snprintf(msg, cap, "ILAB_UNSUPPORTED from the host's shim (the plugin's table, struct_size "
                 "%u, %s)", own->struct_size,
                 own->struct_size < offsetof(ilab_backend_api_t, cache_stats) + sizeof own->cache_stats
                     ? "predates ABI 1.1" : "leaves cache_stats NULL");
        return CONF_PASS;
    }
    char e[512];
    CONF_CHECK(conf_last_error(env, e, sizeof e)[0] != '\0',
               "cache_stats() returned ILAB_UNSUPPORTED with an empty last_error()");
    snprintf(msg, cap, "ILAB_UNSUPPORTED: %s", e);
    return CONF_PASS;
}
