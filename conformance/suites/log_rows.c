/* LOG-1 and LOG-5 over the shapes a kernel tiles its rows by: every item of
 * the sweep gets a guarded logits buffer (logit_guard.c) and each is checked
 * after its eval() — no float written before, between or after the rows
 * LOG-5 defines, every float of those rows written and finite. n_tokens runs
 * over 1..17 and both sides of every multiple of 8 up to 70, each in both
 * modes (ILAB_EVAL_ALL_LOGITS: n_tokens rows; without: one row), in batches
 * of several items (an ALL_LOGITS and a last-row item of the same tokens
 * side by side), into fresh sequences and after a prefix. The last-row
 * item's row must equal the ALL_LOGITS item's last row within TOL (LOG-5). */
#include <stdlib.h>
#include <string.h>

#include "suites.h"

enum { PREFIX = 5, MAX_TOKENS = 70, PAIRS_PER_EVAL = 2 };

/* Fresh sequences: 1..17, then both sides of every multiple of 8 from 24
 * to 64 (and 32, 64 themselves), 70. After a prefix (rows that start off a
 * tile boundary): 1..9, 15, 17, 33. The ALL_LOGITS rows are what costs on
 * a real model (a vocabulary-wide projection each). */
static int sweep_lengths(bool prefixed, int32_t *out)
{
    static const int32_t after_prefix[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 17, 33};
    int k = 0;
    if (prefixed) {
        for (size_t i = 0; i < sizeof after_prefix / sizeof *after_prefix; i++)
            out[k++] = after_prefix[i];
        return k;
    }
    for (int32_t n = 1; n <= 17; n++)
        out[k++] = n;
    for (int32_t m = 24; m <= 64; m += 8) {
        out[k++] = m - 1;
        if (m == 32 || m == 64)
            out[k++] = m;
        out[k++] = m + 1;
    }
    out[k++] = MAX_TOKENS;
    return k;
}

typedef struct row_item {
    ilab_seq_t seq;
    int32_t n;
    bool all;
    int32_t tokens[MAX_TOKENS];
    float *logits;
    ilab_batch_item_t item;
} row_item;

static void items_release(conf_env *env, row_item *it, int n)
{
    for (int i = 0; i < n; i++) {
        if (it[i].seq)
            env->api->seq_free(env->be, it[i].seq);
        conf_guarded_free(it[i].logits);
        it[i].seq = ILAB_SEQ_NONE;
        it[i].logits = NULL;
    }
}

/* A fresh sequence (holding the prefix when `prefixed`) and a guarded
 * buffer for the item's rows. */
static ilab_status item_prepare(conf_env *env, row_item *it, int32_t n, bool all, bool prefixed)
{
    int32_t pre[PREFIX];
    it->n = n;
    it->all = all;
    conf_prompt_tokens(env, env->opt->seed + 900 + (uint64_t)n, it->tokens, n);
    it->logits = conf_guarded_alloc((size_t)(all ? n : 1) * (size_t)env->info.vocab_size);
    if (!it->logits)
        return ILAB_OUT_OF_MEMORY;
    ilab_status st = env->api->seq_create(env->be, &it->seq);
    if (st == ILAB_OK && prefixed) {
        conf_prompt_tokens(env, env->opt->seed + 899, pre, PREFIX);
        st = conf_eval1(env, it->seq, pre, PREFIX, 0, NULL);
    }
    it->item = (ilab_batch_item_t){.struct_size = sizeof it->item, .seq = it->seq, .tokens = it->tokens,
                                   .n_tokens = n, .flags = all ? ILAB_EVAL_ALL_LOGITS : 0,
                                   .logits = it->logits};
    return st;
}

/* Evaluate items [0, n) in calls of at most `per_call` and check each. */
static conf_result eval_and_check(conf_env *env, row_item *it, int n, int per_call, bool prefixed,
                                  char *msg, size_t cap)
{
    int32_t v = env->info.vocab_size;
    const ilab_batch_item_t *ptrs[2 * PAIRS_PER_EVAL];
    for (int at = 0; at < n; at += per_call) {
        int k = n - at < per_call ? n - at : per_call;
        for (int i = 0; i < k; i++)
            ptrs[i] = &it[at + i].item;
        ilab_status st = env->api->eval(env->be, ptrs, (size_t)k);
        if (st != ILAB_OK) {
            char what[96];
            snprintf(what, sizeof what, "eval() of %d items (first n_tokens %d)", k, it[at].n);
            conf_fail_status(env, st, what, msg, cap);
            return CONF_FAIL;
        }
    }
    for (int i = 0; i < n; i++) {
        char what[160];
        snprintf(what, sizeof what, "item %d of a batch of %d, n_tokens %d, %s%s", i % per_call,
                 per_call, it[i].n, it[i].all ? "ILAB_EVAL_ALL_LOGITS" : "last row only",
                 prefixed ? ", after a 5-token prefix" : ", fresh sequence");
        if (!conf_guarded_check(it[i].logits, (size_t)(it[i].all ? it[i].n : 1) * (size_t)v, what, msg, cap))
            return CONF_FAIL;
    }
    for (int i = 0; i + 1 < n; i += 2) {
        char what[128];
        snprintf(what, sizeof what, "n_tokens %d%s: the last-row item vs row %d of the ALL_LOGITS item (LOG-5)",
                 it[i].n, prefixed ? " after a prefix" : "", it[i].n - 1);
        if (!conf_logits_close(it[i + 1].logits, it[i].logits + (size_t)(it[i].n - 1) * (size_t)v, v, what,
                               msg, cap))
            return CONF_FAIL;
    }
    return CONF_PASS;
}

conf_result conf_log1_rows_sweep(conf_env *env, char *msg, size_t cap)
{
    CONF_SKIP_UNLESS(env->m->logits == ILAB_LOGITS_FULL, "logits: full");
    int32_t lengths[64];
    int checked = 0;
    int32_t ctx = conf_max_context(env);
    int per_call = env->m->max_batch < 2 * PAIRS_PER_EVAL ? env->m->max_batch : 2 * PAIRS_PER_EVAL;
    row_item it[2 * PAIRS_PER_EVAL];
    memset(it, 0, sizeof it);
    for (int prefixed = 0; prefixed < 2; prefixed++) {
        int n_lengths = sweep_lengths(prefixed, lengths);
        for (int l = 0; l < n_lengths; l += PAIRS_PER_EVAL) {
            int n = 0;
            for (int p = 0; p < PAIRS_PER_EVAL && l + p < n_lengths; p++) {
                int32_t len = lengths[l + p];
                if (len + (prefixed ? PREFIX : 0) > ctx)
                    continue;
                for (int all = 1; all >= 0; all--) {
                    ilab_status st = item_prepare(env, &it[n++], len, all, prefixed);
                    if (st != ILAB_OK) {
                        items_release(env, it, n);
                        CONF_CHECK_OK(env, st, "seq_create() or the prefix eval()");
                    }
                }
            }
            conf_result r = n ? eval_and_check(env, it, n, per_call, prefixed, msg, cap) : CONF_PASS;
            items_release(env, it, n);
            if (r != CONF_PASS)
                return r;
            checked += n;
        }
    }
    CONF_MSG("%d items (n_tokens 1..%d, both row modes, batches of %d) wrote exactly their rows", checked,
             MAX_TOKENS, per_call);
    return CONF_PASS;
}
