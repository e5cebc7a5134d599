/* Model-based random testing of the KV cache (CCH-1..7).
 *
 * A seeded random program of operations — create, eval in random chunk
 * sizes (some with ILAB_EVAL_ALL_LOGITS), batches of random subsets, fork,
 * truncate, free — runs on the plugin while the harness keeps a model: the
 * tokens each sequence holds. Every logits row the plugin returns is
 * compared with a recomputation of the same prefix in one call on a fresh
 * sequence; lengths, statuses (CONTEXT_OVERFLOW when an item would pass
 * max_context, all-or-nothing), stale handles and handle reuse are checked
 * after every step. On a failure the program is shrunk to a minimal one and
 * printed with a command that replays exactly that case.
 *
 * Operations are intents: whether an eval overflows, which length a
 * truncate keeps, is decided when it runs, from the model. So a program with
 * operations removed is still a valid program, which is what makes
 * shrinking simple. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cache_program.h"
#include "suites.h"

#define MAX_SLOTS 6
#define MAX_ITEMS 16

/* ---- the model ---------------------------------------------------------- */

typedef struct slot {
    bool live;
    ilab_seq_t handle;
    int32_t *tokens; /* what the sequence holds, max_context long */
    int32_t len;
    bool may_share;  /* forked from or into: its blocks may be shared (copy on write) */
} slot;

/* Logits of one prefix computed from scratch: the reference. */
typedef struct ref_entry {
    uint64_t hash;
    int32_t len;
    float *logits;
} ref_entry;

typedef struct runner {
    conf_env *env;
    ilab_backend_t *be;
    int32_t vocab, max_ctx, max_batch;
    slot slots[MAX_SLOTS];
    ilab_seq_t *issued; /* every handle ever returned, to catch reuse */
    size_t n_issued, cap_issued;
    ilab_seq_t stale[8];    /* recently freed handles */
    int n_stale;
    ref_entry *refs;
    size_t n_refs, cap_refs;
    double deadline;        /* process CPU seconds (load-independent budget) */
    double wall_deadline;   /* and a wall-clock cap below the per-test timeout */
    int op_index;           /* the op that failed, for the message */
    char *msg;
    size_t cap;
    ilab_backend_t *ref_be; /* a second instance for references, once the program fills the
                               first one's cache (NULL until then) */
} runner;

static uint64_t prefix_hash(const int32_t *t, int32_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (int32_t i = 0; i < n; i++) {
        h ^= (uint32_t)t[i];
        h *= 1099511628211ull;
    }
    return h;
}

static const float *memo_find(const runner *r, const int32_t *t, int32_t n)
{
    uint64_t h = prefix_hash(t, n);
    for (size_t i = 0; i < r->n_refs; i++)
        if (r->refs[i].hash == h && r->refs[i].len == n)
            return r->refs[i].logits;
    return NULL;
}

static bool memo_add(runner *r, const int32_t *t, int32_t n, const float *row)
{
    if (memo_find(r, t, n))
        return true;
    if (r->n_refs == r->cap_refs) {
        size_t cap = r->cap_refs ? 2 * r->cap_refs : 256;
        ref_entry *grown = realloc(r->refs, cap * sizeof *grown);
        if (!grown)
            return false;
        r->refs = grown;
        r->cap_refs = cap;
    }
    float *l = malloc((size_t)r->vocab * sizeof *l);
    if (!l)
        return false;
    memcpy(l, row, (size_t)r->vocab * sizeof *l);
    r->refs[r->n_refs++] = (ref_entry){prefix_hash(t, n), n, l};
    return true;
}

static void memo_clear(runner *r)
{
    for (size_t i = 0; i < r->n_refs; i++)
        free(r->refs[i].logits);
    r->n_refs = 0;
}

/* One eval() of all `full` tokens of t on a fresh sequence, every row into
 * `rows`, on a second instance of the same configuration, which `env` is
 * then pointed at for the checks that follow. Never on the program's
 * instance: it must see exactly the program's calls. A reference eval
 * between two of them would reset what a plugin keeps between calls (a
 * decode fast path's memo of the last sequence, say) and hide a memo that
 * goes stale in the program's own order of calls. */
static ilab_status reference_rows(runner *r, conf_env *env, const int32_t *t, int32_t full,
                                  float *rows)
{
    char err[256] = "";
    if (!r->ref_be &&
        env->api->create(env->host, env->config, env->n_config, err, sizeof err, &r->ref_be) != ILAB_OK)
        return ILAB_OUT_OF_MEMORY;
    env->be = r->ref_be;
    ilab_seq_t s = 0;
    ilab_status st = env->api->seq_create(env->be, &s);
    if (st == ILAB_OK)
        st = conf_eval1(env, s, t, full, ILAB_EVAL_ALL_LOGITS, rows);
    if (s)
        env->api->seq_free(env->be, s);
    return st;
}

/* The reference logits after prefix t[0..n), where t holds `full` tokens.
 * Computed from scratch: one eval() of all `full` tokens on a fresh
 * sequence with ILAB_EVAL_ALL_LOGITS, which gives every prefix's row at
 * once, memoised (random programs share prefixes). That path is itself
 * checked each time: its first and one random row must equal the last row
 * of a one-call eval of just that prefix — the one path no cache reuse and
 * no row indexing can reach. */
static const float *reference(runner *r, const int32_t *t, int32_t n, int32_t full)
{
    const float *hit = memo_find(r, t, n);
    if (hit)
        return hit;
    if (r->n_refs > 4096)
        memo_clear(r);
    float *rows = conf_guarded_alloc((size_t)full * (size_t)r->vocab); /* LOG-1 too */
    float *one = malloc((size_t)r->vocab * sizeof *one);
    const float *out = NULL;
    conf_env ref_env = *r->env;
    ilab_status st = rows && one ? reference_rows(r, &ref_env, t, full, rows)
                                 : ILAB_OUT_OF_MEMORY;
    if (st != ILAB_OK) {
        snprintf(r->msg, r->cap, "eval() of the reference (a fresh sequence of %d tokens, ALL_LOGITS) "
                 "returned %s", full, ilab_status_name(st));
        goto out;
    }
    char where[96];
    snprintf(where, sizeof where, "the reference eval() (a fresh sequence of %d tokens, ALL_LOGITS)", full);
    if (!conf_guarded_check(rows, (size_t)full * (size_t)r->vocab, where, r->msg, r->cap))
        goto out;
    int32_t checks[2] = {0, (int32_t)(prefix_hash(t, full) % (uint64_t)full)};
    for (int c = 0; c < 2; c++) {
        int32_t j = checks[c];
        if ((st = conf_fresh_logits(&ref_env, t, j + 1, one)) != ILAB_OK) {
            snprintf(r->msg, r->cap, "eval() of a fresh sequence of %d tokens returned %s", j + 1,
                     ilab_status_name(st));
            goto out;
        }
        char what[160], cmp[CONF_MSG_CAP];
        snprintf(what, sizeof what, "ALL_LOGITS row %d of a fresh one-call eval of %d tokens vs the "
                 "last row of a one-call eval of its first %d", j, full, j + 1);
        if (!conf_logits_close(rows + (size_t)j * (size_t)r->vocab, one, r->vocab, what, cmp, sizeof cmp)) {
            snprintf(r->msg, r->cap, "%s", cmp);
            goto out;
        }
    }
    for (int32_t i = 0; i < full; i++)
        if (!memo_add(r, t, i + 1, rows + (size_t)i * (size_t)r->vocab)) {
            snprintf(r->msg, r->cap, "harness out of memory");
            goto out;
        }
    out = memo_find(r, t, n);
out:
    conf_guarded_free(rows);
    free(one);
    return out;
}

#define FAIL(...)                                            \
    do {                                                     \
        snprintf(r->msg, r->cap, __VA_ARGS__);               \
        return false;                                        \
    } while (0)

static bool issued_before(const runner *r, ilab_seq_t h)
{
    for (size_t i = 0; i < r->n_issued; i++)
        if (r->issued[i] == h)
            return true;
    return false;
}

static bool remember_handle(runner *r, ilab_seq_t h, const char *call)
{
    if (h == ILAB_SEQ_NONE)
        FAIL("%s returned OK with handle 0", call);
    if (issued_before(r, h))
        FAIL("%s returned handle %" PRIu64 ", issued before in this program (handles are never "
             "reused, CCH-6)", call, h);
    if (r->n_issued == r->cap_issued) {
        size_t cap = r->cap_issued ? 2 * r->cap_issued : 64;
        ilab_seq_t *grown = realloc(r->issued, cap * sizeof *grown);
        if (!grown)
            FAIL("harness out of memory");
        r->issued = grown;
        r->cap_issued = cap;
    }
    r->issued[r->n_issued++] = h;
    return true;
}

/* Every live sequence's length must be the model's. */
static bool lengths_agree(runner *r)
{
    for (int s = 0; s < MAX_SLOTS; s++) {
        if (!r->slots[s].live)
            continue;
        int32_t len = -1;
        ilab_status st = r->env->api->seq_length(r->be, r->slots[s].handle, &len);
        if (st != ILAB_OK || len != r->slots[s].len)
            FAIL("seq_length(sequence %d) is %d (%s), the model says %d", s, len, ilab_status_name(st),
                 r->slots[s].len);
    }
    return true;
}

/* ---- operations ------------------------------------------------------------ */

static bool op_create(runner *r, const cprog_op *op)
{
    slot *s = &r->slots[op->slot];
    if (s->live)
        return true;
    ilab_seq_t h = 0;
    ilab_status st = r->env->api->seq_create(r->be, &h);
    if (st == ILAB_OUT_OF_MEMORY)
        return true; /* no sequence slot left: allowed, nothing changed */
    if (st != ILAB_OK)
        FAIL("seq_create() returned %s", ilab_status_name(st));
    if (!remember_handle(r, h, "seq_create()"))
        return false;
    s->live = true;
    s->handle = h;
    s->len = 0;
    s->may_share = false;
    return true;
}

static void forget_slot(runner *r, slot *s)
{
    if (r->n_stale < (int)(sizeof r->stale / sizeof r->stale[0]))
        r->stale[r->n_stale++] = s->handle;
    else
        r->stale[r->n_stale - 1] = s->handle;
    s->live = false;
    s->len = 0;
    s->may_share = false;
}

static bool op_free(runner *r, const cprog_op *op)
{
    slot *s = &r->slots[op->slot];
    if (!s->live)
        return true;
    ilab_status st = r->env->api->seq_free(r->be, s->handle);
    if (st != ILAB_OK)
        FAIL("seq_free(sequence %d) returned %s", op->slot, ilab_status_name(st));
    forget_slot(r, s);
    /* the handle is stale now: refused, and touching nothing */
    int32_t len;
    st = r->env->api->seq_length(r->be, r->stale[r->n_stale - 1], &len);
    if (st != ILAB_INVALID_ARGUMENT)
        FAIL("seq_length(just-freed handle) returned %s, want INVALID_ARGUMENT", ilab_status_name(st));
    return true;
}

static bool op_fork(runner *r, const cprog_op *op)
{
    slot *src = &r->slots[op->slot], *dst = &r->slots[op->slot2];
    if (!r->env->m->cache_fork || !src->live || dst->live || op->slot == op->slot2)
        return true;
    ilab_seq_t h = 0;
    ilab_status st = r->env->api->seq_fork(r->be, src->handle, &h);
    if (st == ILAB_OUT_OF_MEMORY)
        return true;
    if (st != ILAB_OK)
        FAIL("seq_fork(sequence %d, length %d) returned %s", op->slot, src->len, ilab_status_name(st));
    if (!remember_handle(r, h, "seq_fork()"))
        return false;
    dst->live = true;
    dst->handle = h;
    dst->len = src->len;
    dst->may_share = src->may_share = true;
    memcpy(dst->tokens, src->tokens, (size_t)src->len * sizeof *src->tokens);
    return true;
}

static bool op_truncate(runner *r, const cprog_op *op)
{
    slot *s = &r->slots[op->slot];
    if (!r->env->m->cache_truncate || !s->live)
        return true;
    int32_t keep = op->n % (s->len + 1); /* 0 ..= len */
    ilab_status st = r->env->api->seq_truncate(r->be, s->handle, keep);
    if (st != ILAB_OK)
        FAIL("seq_truncate(sequence %d, %d of %d) returned %s", op->slot, keep, s->len,
             ilab_status_name(st));
    s->len = keep;
    return true;
}

/* The tokens an eval item appends: a function of the op's token seed and
 * the item's position, so a replayed program feeds the same tokens. */
static void item_tokens(const runner *r, const cprog_op *op, int k, int32_t *out, int32_t n)
{
    conf_prompt_tokens(r->env, ((uint64_t)op->tseed << 8) + (uint64_t)k, out, n);
}

/* Compare the rows eval wrote for one item with the references, and check
 * that it wrote nothing outside them (a guarded buffer, LOG-1). */
static bool rows_match(runner *r, const slot *s, int32_t before, int32_t n, bool all, const float *rows,
                       int sidx)
{
    int32_t n_rows = all ? n : 1;
    char item[160];
    snprintf(item, sizeof item, "sequence %d, an item of %d tokens (%s, after %d cached)", sidx, n,
             all ? "ILAB_EVAL_ALL_LOGITS" : "no flag", before);
    if (!conf_guarded_check(rows, (size_t)n_rows * (size_t)r->vocab, item, r->msg, r->cap))
        return false;
    for (int32_t i = 0; i < n_rows; i++) {
        /* Long ALL_LOGITS chunks: every row near both ends and every
         * seventh one between (each row costs a reference eval). */
        if (n_rows > 16 && i >= 3 && i < n_rows - 3 && (i + before) % 7 != 0)
            continue;
        int32_t upto = all ? before + i + 1 : before + n; /* prefix length this row follows */
        const float *want = reference(r, s->tokens, upto, s->len);
        if (!want)
            return false; /* reference() said why */
        char what[160];
        snprintf(what, sizeof what, "sequence %d, %s row %d of %d (position %d, after %d cached)", sidx,
                 all ? "ALL_LOGITS" : "last", i, n_rows, upto - 1, before);
        char cmp[CONF_MSG_CAP];
        if (!conf_logits_close(rows + (size_t)i * (size_t)r->vocab, want, r->vocab, what, cmp, sizeof cmp))
            FAIL("%s", cmp);
    }
    return true;
}

typedef struct eval_plan {
    int sidx[MAX_ITEMS];
    int32_t n[MAX_ITEMS];
    bool all[MAX_ITEMS];
    int32_t before[MAX_ITEMS];
    int n_items;
    bool overflows;
} eval_plan;

static void plan_eval(const runner *r, const cprog_op *op, eval_plan *p)
{
    memset(p, 0, sizeof *p);
    bool used[MAX_SLOTS] = {false};
    for (int k = 0; k < op->n_items && p->n_items < r->max_batch; k++) {
        int si = op->items[k].slot;
        if (!r->slots[si].live || used[si])
            continue;
        used[si] = true;
        int i = p->n_items++;
        p->sidx[i] = si;
        p->n[i] = op->items[k].n;
        p->all[i] = op->items[k].all_logits;
        p->before[i] = r->slots[si].len;
        if (p->before[i] + p->n[i] > r->max_ctx)
            p->overflows = true;
    }
}

static int64_t ceil_div(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

/* Is OUT_OF_MEMORY an answer the contract allows for this batch (within
 * max_context)? With cache.stats (CCH-10): only when the blocks the batch
 * could take exceed the free ones — counted generously, a sequence that may
 * share blocks with a fork counted as copying all it holds, so no correct
 * copy-on-write scheme is called wrong. Without it: never when the batch's
 * one sequence is the only one live (a sequence fills to max_context,
 * CCH-5); otherwise the pool is unknown and the refusal stands. */
static bool oom_permitted(runner *r, const eval_plan *p)
{
    char e[256];
    if (r->env->m->cache_stats && r->env->api->cache_stats) {
        ilab_cache_stats_t cs = {.struct_size = sizeof cs};
        ilab_status st = r->env->api->cache_stats(r->be, &cs);
        if (st != ILAB_OK || cs.block_size < 1)
            FAIL("cache_stats() after an eval() refused with OUT_OF_MEMORY returned %s (block_size %d)",
                 ilab_status_name(st), cs.block_size);
        int64_t bs = cs.block_size, need = 0;
        for (int i = 0; i < p->n_items; i++) {
            const slot *s = &r->slots[p->sidx[i]];
            int64_t before = p->before[i], after = before + p->n[i];
            need += ceil_div(after, bs) - ceil_div(before, bs);
            if (s->may_share)
                need += ceil_div(before, bs); /* every block it holds may need a private copy */
        }
        if (need * bs <= cs.free_positions)
            FAIL("eval() of %d item(s) within max_context returned OUT_OF_MEMORY (%s), though it "
                 "needs at most %lld block(s) of %lld positions and cache_stats() says %lld "
                 "positions are free (CCH-10)", p->n_items, conf_last_error(r->env, e, sizeof e),
                 (long long)need, (long long)bs, (long long)cs.free_positions);
        return true;
    }
    int live = 0;
    for (int s = 0; s < MAX_SLOTS; s++)
        live += r->slots[s].live;
    if (p->n_items == 1 && live == 1)
        FAIL("eval() of %d token(s) into the only live sequence (length %d, max_context %d) returned "
             "OUT_OF_MEMORY (%s): one sequence must fill to max_context (CCH-5)", p->n[0], p->before[0],
             r->max_ctx, conf_last_error(r->env, e, sizeof e));
    return true;
}

/* Free every live sequence the plan does not name. false: none to free. */
static bool free_others(runner *r, const eval_plan *p)
{
    bool freed = false;
    for (int s = 0; s < MAX_SLOTS; s++) {
        bool named = false;
        for (int i = 0; i < p->n_items; i++)
            named |= p->sidx[i] == s;
        if (!r->slots[s].live || named)
            continue;
        if (r->env->api->seq_free(r->be, r->slots[s].handle) != ILAB_OK)
            continue; /* lengths_agree() and the next free report it */
        forget_slot(r, &r->slots[s]);
        freed = true;
    }
    return freed;
}

static bool op_eval(runner *r, const cprog_op *op)
{
    eval_plan p;
    plan_eval(r, op, &p);
    if (p.n_items == 0)
        return true;
    int32_t vocab = r->vocab;
    ilab_batch_item_t items[MAX_ITEMS];
    const ilab_batch_item_t *ptrs[MAX_ITEMS];
    float *rows[MAX_ITEMS] = {NULL};
    int32_t *toks[MAX_ITEMS] = {NULL};
    bool ok = false;
    for (int i = 0; i < p.n_items; i++) {
        int32_t n_rows = p.all[i] ? p.n[i] : 1;
        rows[i] = conf_guarded_alloc((size_t)n_rows * (size_t)vocab);
        toks[i] = malloc((size_t)p.n[i] * sizeof(int32_t));
        if (!rows[i] || !toks[i]) {
            snprintf(r->msg, r->cap, "harness out of memory");
            goto out;
        }
        item_tokens(r, op, i, toks[i], p.n[i]);
        /* One item in six passes logits NULL: nothing written, the tokens
         * still appended (LOG-1), which later rows of the sequence show. */
        bool no_rows = (op->tseed >> (3 * i)) % 6 == 5;
        items[i] = (ilab_batch_item_t){.struct_size = sizeof items[i], .seq = r->slots[p.sidx[i]].handle,
                                       .tokens = toks[i], .n_tokens = p.n[i],
                                       .flags = p.all[i] ? ILAB_EVAL_ALL_LOGITS : 0,
                                       .logits = no_rows ? NULL : rows[i]};
        ptrs[i] = &items[i];
    }
    bool retried = false;
retry:;
    ilab_status st = r->env->api->eval(r->be, ptrs, (size_t)p.n_items);
    if (st == ILAB_OUT_OF_MEMORY && !p.overflows) {
        /* Within max_context a full pool may refuse (CCH-10); a pool with
         * room for the batch may not. Refused, nothing changed (CCH-8); then
         * the other sequences are freed and the batch tried once more, so
         * the program goes on exercising the cache. */
        if (!oom_permitted(r, &p) || !lengths_agree(r))
            goto out;
        if (!retried && free_others(r, &p)) {
            retried = true;
            goto retry;
        }
        ok = true;
        goto out;
    }
    if (p.overflows) {
        if (st != ILAB_CONTEXT_OVERFLOW) {
            snprintf(r->msg, r->cap, "eval() of %d item(s), one passing max_context %d, returned %s, "
                     "want CONTEXT_OVERFLOW (CCH-5)", p.n_items, r->max_ctx, ilab_status_name(st));
            goto out;
        }
        ok = lengths_agree(r); /* all-or-nothing: nothing changed */
        if (!ok)
            snprintf(r->msg + strlen(r->msg), r->cap - strlen(r->msg),
                     " after a refused eval() (all-or-nothing)");
        goto out;
    }
    if (st != ILAB_OK) {
        char e[256];
        snprintf(r->msg, r->cap, "eval() of %d item(s) within max_context returned %s: %s", p.n_items,
                 ilab_status_name(st), conf_last_error(r->env, e, sizeof e));
        goto out;
    }
    for (int i = 0; i < p.n_items; i++) {
        slot *s = &r->slots[p.sidx[i]];
        memcpy(s->tokens + s->len, toks[i], (size_t)p.n[i] * sizeof(int32_t));
        s->len += p.n[i];
    }
    for (int i = 0; i < p.n_items; i++)
        if (items[i].logits && !rows_match(r, &r->slots[p.sidx[i]], p.before[i], p.n[i], p.all[i], rows[i], p.sidx[i]))
            goto out;
    ok = true;
out:
    for (int i = 0; i < p.n_items; i++) {
        conf_guarded_free(rows[i]);
        free(toks[i]);
    }
    return ok;
}

/* Stale handles stay refused whatever happened since, in every call that
 * names a sequence (CCH-6): seq_length, seq_truncate and seq_free for
 * each, seq_fork and eval for the most recent; the live sequences'
 * lengths, checked after, show a refused call that touched a slot's new
 * owner. */
static bool stale_refused(runner *r)
{
    const ilab_backend_api_t *api = r->env->api;
    for (int i = 0; i < r->n_stale; i++) {
        ilab_seq_t h = r->stale[i];
        int32_t len;
        ilab_status st = api->seq_length(r->be, h, &len);
        if (st != ILAB_INVALID_ARGUMENT)
            FAIL("seq_length(handle %" PRIu64 ", freed earlier) returned %s, want INVALID_ARGUMENT "
                 "(CCH-6)", h, ilab_status_name(st));
        if (r->env->m->cache_truncate && (st = api->seq_truncate(r->be, h, 0)) != ILAB_INVALID_ARGUMENT)
            FAIL("seq_truncate(handle %" PRIu64 ", freed earlier, 0) returned %s, want INVALID_ARGUMENT "
                 "(CCH-6)", h, ilab_status_name(st));
        if ((st = api->seq_free(r->be, h)) != ILAB_INVALID_ARGUMENT)
            FAIL("seq_free(handle %" PRIu64 ", freed earlier) returned %s, want INVALID_ARGUMENT (CCH-6)", h,
                 ilab_status_name(st));
        if (i != r->n_stale - 1)
            continue;
        ilab_seq_t child = 0;
        if (r->env->m->cache_fork && (st = api->seq_fork(r->be, h, &child)) != ILAB_INVALID_ARGUMENT)
            FAIL("seq_fork(handle %" PRIu64 ", freed earlier) returned %s, want INVALID_ARGUMENT (CCH-6)", h,
                 ilab_status_name(st));
        int32_t tok = 0;
        conf_prompt_tokens(r->env, h, &tok, 1);
        ilab_batch_item_t item = {.struct_size = sizeof item, .seq = h, .tokens = &tok, .n_tokens = 1};
        const ilab_batch_item_t *items[1] = {&item};
        if ((st = api->eval(r->be, items, 1)) != ILAB_INVALID_ARGUMENT)
            FAIL("eval() of handle %" PRIu64 ", freed earlier, returned %s, want INVALID_ARGUMENT (CCH-6)", h,
                 ilab_status_name(st));
    }
    return lengths_agree(r);
}

static bool run_op(runner *r, const cprog_op *op)
{
    if (op->slot >= MAX_SLOTS || op->slot2 >= MAX_SLOTS)
        return true; /* a replayed program naming more sequences than the runner keeps */
    for (int k = 0; k < op->n_items; k++)
        if (op->items[k].slot >= MAX_SLOTS)
            return true;
    switch (op->kind) {
    case CPROG_CREATE: return op_create(r, op);
    case CPROG_FREE: return op_free(r, op);
    case CPROG_FORK: return op_fork(r, op);
    case CPROG_TRUNCATE: return op_truncate(r, op);
    case CPROG_EVAL: return op_eval(r, op);
    }
    return true;
}

static bool out_of_time(const runner *r)
{
    return conf_cpu_seconds() > r->deadline || conf_now_seconds() > r->wall_deadline;
}

static void runner_reset(runner *r)
{
    for (int s = 0; s < MAX_SLOTS; s++)
        if (r->slots[s].live)
            r->env->api->seq_free(r->be, r->slots[s].handle);
    for (int s = 0; s < MAX_SLOTS; s++) {
        r->slots[s].live = false;
        r->slots[s].len = 0;
    }
    r->n_issued = 0;
    r->n_stale = 0;
}

/* Run one program from a clean slate. false: it failed (msg says how, and
 * r->op_index which operation). */
static bool run_program(runner *r, const cprog *p)
{
    runner_reset(r);
    bool ok = true;
    for (int i = 0; i < p->n && ok && !out_of_time(r); i++) {
        r->op_index = i;
        ok = run_op(r, &p->ops[i]) && lengths_agree(r) && stale_refused(r);
    }
    runner_reset(r);
    return ok;
}

/* ---- shrinking ------------------------------------------------------------- */

/* Remove chunks of operations (halves, then quarters ... then single ops)
 * while the program still fails; then shorten evals. Every candidate runs
 * from a clean slate on the same instance. */
static void shrink(runner *r, cprog *p, char *msg, size_t cap)
{
    cprog trial;
    char trial_msg[CONF_MSG_CAP];
    for (int chunk = p->n / 2; chunk >= 1; chunk /= 2) {
        for (int at = 0; at + chunk <= p->n;) {
            if (out_of_time(r))
                return;
            cprog_remove(p, at, chunk, &trial);
            r->msg = trial_msg;
            r->cap = sizeof trial_msg;
            if (!run_program(r, &trial)) {
                *p = trial;
                snprintf(msg, cap, "%s", trial_msg);
            } else {
                at += chunk;
            }
        }
    }
    for (int i = 0; i < p->n; i++) {
        if (p->ops[i].kind != CPROG_EVAL)
            continue;
        for (int k = 0; k < p->ops[i].n_items && p->ops[i].n_items > 1 && !out_of_time(r);) {
            trial = *p; /* drop item k */
            cprog_op *op = &trial.ops[i];
            memmove(&op->items[k], &op->items[k + 1], (size_t)(op->n_items - k - 1) * sizeof op->items[0]);
            op->n_items--;
            r->msg = trial_msg;
            r->cap = sizeof trial_msg;
            if (!run_program(r, &trial)) {
                *p = trial;
                snprintf(msg, cap, "%s", trial_msg);
            } else {
                k++;
            }
        }
        for (int k = 0; k < p->ops[i].n_items; k++) {
            while (p->ops[i].items[k].n > 1 && !out_of_time(r)) {
                trial = *p;
                trial.ops[i].items[k].n = (trial.ops[i].items[k].n + 1) / 2;
                r->msg = trial_msg;
                r->cap = sizeof trial_msg;
                if (run_program(r, &trial))
                    break;
                *p = trial;
                snprintf(msg, cap, "%s", trial_msg);
            }
        }
    }
}

/* ---- the tests ----------------------------------------------------------- */

static bool runner_init(runner *r, conf_env *env, double seconds)
{
    memset(r, 0, sizeof *r);
    r->env = env;
    r->be = env->be;
    r->vocab = env->info.vocab_size;
    r->max_ctx = conf_max_context(env);
    r->max_batch = env->m->max_batch < MAX_ITEMS ? env->m->max_batch : MAX_ITEMS;
    if (r->max_batch < 1)
        r->max_batch = 1;
    r->deadline = conf_cpu_seconds() + seconds;
    r->wall_deadline = conf_now_seconds() + 0.6 * env->opt->timeout_seconds;
    for (int s = 0; s < MAX_SLOTS; s++) {
        r->slots[s].tokens = malloc((size_t)(r->max_ctx + 1) * sizeof(int32_t));
        if (!r->slots[s].tokens)
            return false;
    }
    return true;
}

static void runner_free(runner *r)
{
    runner_reset(r);
    if (r->ref_be)
        r->env->api->destroy(r->ref_be);
    r->ref_be = NULL;
    for (int s = 0; s < MAX_SLOTS; s++)
        free(r->slots[s].tokens);
    memo_clear(r);
    free(r->refs);
    free(r->issued);
}

/* Run random programs of `mix` until the time budget or the program count is
 * spent (a replay runs exactly the given program). */
static conf_result random_programs(conf_env *env, cprog_mix mix, const char *clause, char *msg, size_t cap)
{
    if (env->m->logits != ILAB_LOGITS_FULL) {
        snprintf(msg, cap, "capability logits: full not declared");
        return CONF_SKIP;
    }
    if (mix == CPROG_MIX_FORK && !env->m->cache_fork) {
        snprintf(msg, cap, "capability cache.fork not declared");
        return CONF_SKIP;
    }
    if (mix == CPROG_MIX_TRUNCATE && !env->m->cache_truncate) {
        snprintf(msg, cap, "capability cache.truncate not declared");
        return CONF_SKIP;
    }
    int deep = env->opt->deep ? 10 : 1;
    runner r;
    if (!runner_init(&r, env, env->opt->random_seconds * deep)) {
        runner_free(&r);
        snprintf(msg, cap, "harness out of memory");
        return CONF_ERROR;
    }
    cprog_shape shape = {r.max_ctx, r.max_batch, MAX_SLOTS, mix};
    int programs = 0, ops = 0, max_programs = CPROG_PROGRAMS * deep;
    conf_result result = CONF_PASS;
    char fail_msg[CONF_MSG_CAP] = "";
    for (int k = 0; k < max_programs; k++) {
        cprog p;
        uint64_t seed = env->opt->seed * 1000003u + prefix_hash((const int32_t *)clause, 1) * 7919u +
                        (uint64_t)mix * 131u + (uint64_t)k;
        if (env->opt->replay) {
            if (!cprog_parse(env->opt->replay, &p, fail_msg, sizeof fail_msg)) {
                snprintf(msg, cap, "--replay: %s", fail_msg);
                result = CONF_ERROR;
                break;
            }
            k = max_programs;
        } else {
            cprog_generate(&shape, seed, &p);
        }
        r.msg = fail_msg;
        r.cap = sizeof fail_msg;
        programs++;
        ops += p.n;
        if (!run_program(&r, &p)) {
            int failed_at = r.op_index, original_ops = p.n;
            char first[CONF_MSG_CAP];
            snprintf(first, sizeof first, "%s", fail_msg);
            r.deadline = conf_cpu_seconds() + 10.0 * deep;
            r.wall_deadline = conf_now_seconds() + 0.3 * env->opt->timeout_seconds;
            shrink(&r, &p, fail_msg, sizeof fail_msg);
            char text[CPROG_TEXT_CAP];
            cprog_format(&p, text, sizeof text);
            snprintf(msg, cap,
                     "%s: %s %d (seed %" PRIu64 ", failed at op %d of %d), shrunk to %d "
                     "op(s): %s | program: %s | replay: --include '%s' --seed %" PRIu64 " --replay '%s'",
                     clause, env->opt->replay ? "replayed program" : "random program", k, seed, failed_at + 1, original_ops, p.n, fail_msg, text, clause,
                     env->opt->seed, text);
            (void)first;
            result = CONF_FAIL;
            break;
        }
        if (k + 1 >= CPROG_MIN_PROGRAMS && out_of_time(&r))
            break;
    }
    if (result == CONF_PASS)
        snprintf(msg, cap, "%d random program(s), %d operations, %zu reference prefixes, max_context %d "
                 "(seed %" PRIu64 ")", programs, ops, r.n_refs, r.max_ctx, env->opt->seed);
    runner_free(&r);
    return result;
}

conf_result conf_cch_random_decode(conf_env *env, char *msg, size_t cap)
{
    return random_programs(env, CPROG_MIX_DECODE, "CCH-1", msg, cap);
}

conf_result conf_cch_random_chunks(conf_env *env, char *msg, size_t cap)
{
    return random_programs(env, CPROG_MIX_CHUNKS, "CCH-2", msg, cap);
}

conf_result conf_cch_random_fork(conf_env *env, char *msg, size_t cap)
{
    return random_programs(env, CPROG_MIX_FORK, "CCH-3", msg, cap);
}

conf_result conf_cch_random_truncate(conf_env *env, char *msg, size_t cap)
{
    return random_programs(env, CPROG_MIX_TRUNCATE, "CCH-4", msg, cap);
}

conf_result conf_cch_random_overflow(conf_env *env, char *msg, size_t cap)
{
    return random_programs(env, CPROG_MIX_OVERFLOW, "CCH-5", msg, cap);
}

conf_result conf_cch_random_lifecycle(conf_env *env, char *msg, size_t cap)
{
    return random_programs(env, CPROG_MIX_LIFECYCLE, "CCH-6", msg, cap);
}

conf_result conf_cch_random_batched(conf_env *env, char *msg, size_t cap)
{
    return random_programs(env, CPROG_MIX_BATCHED, "CCH-7", msg, cap);
}

conf_result conf_log1_random_null_rows(conf_env *env, char *msg, size_t cap)
{
    return random_programs(env, CPROG_MIX_BATCHED, "LOG-1", msg, cap);
}

conf_result conf_log5_random_rows(conf_env *env, char *msg, size_t cap)
{
    return random_programs(env, CPROG_MIX_CHUNKS, "LOG-5", msg, cap);
}

conf_result conf_cch9_random_lengths(conf_env *env, char *msg, size_t cap)
{
    return random_programs(env, CPROG_MIX_LIFECYCLE, "CCH-9", msg, cap);
}
