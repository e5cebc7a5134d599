/* The validation layer over sequences and eval(): it keeps each handle this
 * instance issued and each sequence's length, so every call is checked
 * against them — handles never 0 nor repeated and stale ones refused
 * (CCH-6), lengths exact (CCH-9), truncates in range (CCH-4), no eval
 * accepted past max_context (CCH-5) or outside the batch's shape (LOG-6) or
 * with an id outside the vocabulary (TOK-6), logits rows written exactly
 * and finite on OK and untouched otherwise (LOG-1), nothing changed by a
 * refused call (CCH-8). Calls naming one sequence from two threads at once
 * make its length unknown from then on (THR-2's `full` allows that). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "validate_internal.h"

#define R (val_g.real)
#define SENT_HANDLE 0x5a5a5a5a5a5a5a5aULL
#define SENT_LEN ((int32_t)0x5a5a5a5a)

/* The record of handle h, under val_g.mu; never kept across an unlock (the
 * table moves when it grows). */
static val_seq *seq_at(const ilab_backend_t *be, uint64_t h)
{
    val_inst *in = val_inst_find(be);
    return in && !in->foreign ? val_seq_find(in, h) : NULL;
}

/* Marks the sequence as named by a call in flight; true when it is ours. */
static bool seq_begin(const ilab_backend_t *be, uint64_t h, int *state, int32_t *len)
{
    *state = 0;
    *len = -1;
    val_lock();
    val_seq *s = seq_at(be, h);
    if (s) {
        if (s->inflight++)
            s->length = -1;
        *state = s->state;
        *len = s->length;
    }
    val_unlock();
    return s != NULL;
}

static void seq_end(const ilab_backend_t *be, uint64_t h, bool tracked)
{
    if (!tracked)
        return;
    val_lock();
    val_seq *s = seq_at(be, h);
    if (s)
        s->inflight--;
    val_unlock();
}

/* A handle the plugin just issued: never 0, never one it issued before. */
static void issued(ilab_backend_t *be, uint64_t h, int32_t len, const char *call)
{
    val_checked("CCH-6");
    if (h == 0) {
        val_violation("CCH-6", call, "returned OK with handle 0");
        return;
    }
    val_lock();
    val_inst *in = val_inst_find(be);
    if (in && !in->foreign) {
        val_seq *s = val_seq_find(in, h);
        if (s) {
            val_violation("CCH-6", call, "issued handle 0x%llx again (it was %s)", (unsigned long long)h,
                          s->state == VAL_SEQ_LIVE ? "live" : "freed");
            s->state = VAL_SEQ_LIVE;
            s->length = -1;
        } else if ((s = val_seq_add(in, h)) != NULL) {
            s->state = VAL_SEQ_LIVE;
            s->length = len;
            in->live++;
        }
    }
    val_unlock();
}

static void stale_accepted(int state, uint64_t h, const char *call)
{
    val_checked("CCH-6");
    if (state == VAL_SEQ_STALE)
        val_violation("CCH-6", call, "returned OK for the freed handle 0x%llx", (unsigned long long)h);
}

static ilab_status w_seq_create(ilab_backend_t *be, ilab_seq_t *seq)
{
    val_call c;
    val_enter(&c, "seq_create", be);
    ilab_seq_t local = SENT_HANDLE;
    ilab_status st = R->seq_create(be, seq ? &local : NULL);
    if (seq && st == ILAB_OK) {
        *seq = local;
        issued(be, local, 0, "seq_create");
    } else if (seq && local != SENT_HANDLE) {
        val_checked("CCH-6");
        val_violation("CCH-6", "seq_create", "returned %s and wrote *seq", ilab_status_name(st));
    }
    val_leave(&c, st);
    return st;
}

static ilab_status w_seq_fork(ilab_backend_t *be, ilab_seq_t parent, ilab_seq_t *child)
{
    val_call c;
    val_enter(&c, "seq_fork", be);
    int state;
    int32_t len;
    bool s = seq_begin(be, parent, &state, &len);
    ilab_seq_t local = SENT_HANDLE;
    ilab_status st = R->seq_fork(be, parent, child ? &local : NULL);
    seq_end(be, parent, s);
    if (st == ILAB_OK)
        stale_accepted(state, parent, "seq_fork");
    if (child && st == ILAB_OK) {
        *child = local;
        issued(be, local, state == VAL_SEQ_LIVE ? len : -1, "seq_fork");
    } else if (child && local != SENT_HANDLE) {
        val_checked("CCH-6");
        val_violation("CCH-6", "seq_fork", "returned %s and wrote *child", ilab_status_name(st));
    }
    val_leave(&c, st);
    return st;
}

static ilab_status w_seq_free(ilab_backend_t *be, ilab_seq_t seq)
{
    val_call c;
    val_enter(&c, "seq_free", be);
    int state;
    int32_t len;
    bool tracked = seq_begin(be, seq, &state, &len);
    ilab_status st = R->seq_free(be, seq);
    if (st == ILAB_OK) {
        stale_accepted(state, seq, "seq_free");
        if (seq == 0)
            val_violation("CCH-6", "seq_free", "returned OK for handle 0");
        val_lock();
        val_seq *s = seq_at(be, seq);
        if (s && s->state == VAL_SEQ_LIVE) {
            s->state = VAL_SEQ_STALE;
            val_inst *in = val_inst_find(be);
            if (in && in->live)
                in->live--;
        }
        val_unlock();
    }
    seq_end(be, seq, tracked);
    val_leave(&c, st);
    return st;
}

static ilab_status w_seq_truncate(ilab_backend_t *be, ilab_seq_t seq, int32_t n_keep)
{
    val_call c;
    val_enter(&c, "seq_truncate", be);
    int state;
    int32_t len;
    bool tracked = seq_begin(be, seq, &state, &len);
    ilab_status st = R->seq_truncate(be, seq, n_keep);
    if (st == ILAB_OK) {
        stale_accepted(state, seq, "seq_truncate");
        val_checked("CCH-4");
        if (n_keep < 0 || (state == VAL_SEQ_LIVE && len >= 0 && n_keep > len))
            val_violation("CCH-4", "seq_truncate", "returned OK for n_keep %d of a sequence of length %d",
                          (int)n_keep, (int)len);
        val_lock();
        val_seq *s = seq_at(be, seq);
        if (s && s->inflight == 1 && s->length >= 0)
            s->length = n_keep;
        val_unlock();
    }
    seq_end(be, seq, tracked);
    val_leave(&c, st);
    return st;
}

static ilab_status w_seq_length(ilab_backend_t *be, ilab_seq_t seq, int32_t *length)
{
    val_call c;
    val_enter(&c, "seq_length", be);
    int state;
    int32_t len;
    bool tracked = seq_begin(be, seq, &state, &len);
    int32_t local = SENT_LEN;
    ilab_status st = R->seq_length(be, seq, length ? &local : NULL);
    seq_end(be, seq, tracked);
    if (length && st == ILAB_OK) {
        *length = local;
        stale_accepted(state, seq, "seq_length");
        if (state == VAL_SEQ_LIVE && len >= 0) {
            val_checked("CCH-9");
            if (local != len)
                val_violation("CCH-9", "seq_length", "says %d; the calls made on it give %d", (int)local,
                              (int)len);
        }
    } else if (length && local != SENT_LEN) {
        val_checked("CCH-9");
        val_violation("CCH-9", "seq_length", "returned %s and wrote *length", ilab_status_name(st));
    }
    val_leave(&c, st);
    return st;
}

/* ---- eval() ----------------------------------------------------------------- */

#define EVAL_MAX_ITEMS 4096

typedef struct eval_view {
    size_t n;
    ilab_batch_item_t *copy;          /* shadowed items */
    const ilab_batch_item_t **pass;   /* what the plugin gets */
    val_buf *buf;
    bool *shadowed;
    bool *tracked;
    int *state;
    int32_t *len;
} eval_view;

static bool view_open(eval_view *v, size_t n)
{
    memset(v, 0, sizeof *v);
    v->n = n;
    v->copy = calloc(n, sizeof *v->copy);
    v->pass = calloc(n, sizeof *v->pass);
    v->buf = calloc(n, sizeof *v->buf);
    v->shadowed = calloc(n, sizeof *v->shadowed);
    v->tracked = calloc(n, sizeof *v->tracked);
    v->state = calloc(n, sizeof *v->state);
    v->len = calloc(n, sizeof *v->len);
    return v->copy && v->pass && v->buf && v->shadowed && v->tracked && v->state && v->len;
}

static void view_close(eval_view *v)
{
    for (size_t i = 0; i < v->n && v->buf; i++)
        if (v->shadowed && v->shadowed[i])
            val_buf_close(&v->buf[i]);
    free(v->copy);
    free(v->pass);
    free(v->buf);
    free(v->shadowed);
    free(v->tracked);
    free(v->state);
    free(v->len);
}

/* Why this call must be refused ("" when it need not be), and the clause. */
static const char *must_refuse(const eval_view *v, const ilab_batch_item_t *const *items, size_t n,
                               const val_inst *in, const char **clause, char *why, size_t cap)
{
    *clause = "LOG-6";
    int mb = val_g.m ? val_g.m->max_batch : 0;
    if (n == 0)
        return "n_items is 0";
    if (mb > 0 && n > (size_t)mb) {
        snprintf(why, cap, "n_items %zu is over max_batch %d", n, mb);
        return why;
    }
    int32_t vsz = in && in->info_ok ? in->info.vocab_size : 0;
    int32_t mc = in && in->info_ok ? in->info.max_context : 0;
    for (size_t i = 0; i < n; i++) {
        const ilab_batch_item_t *it = items[i];
        *clause = "LOG-6";
        if (!it)
            return "an item is NULL";
        if (it->struct_size < sizeof *it)
            return "";
        if (it->n_tokens < 1 || !it->tokens) {
            snprintf(why, cap, "item %zu has n_tokens %d, tokens %s", i, (int)it->n_tokens,
                     it->tokens ? "set" : "NULL");
            return why;
        }
        if (it->flags & ~(uint32_t)ILAB_EVAL_ALL_LOGITS) {
            snprintf(why, cap, "item %zu has the unknown flag bits 0x%x", i, (unsigned)it->flags);
            return why;
        }
        for (size_t j = 0; j < i; j++)
            if (items[j] && items[j]->seq == it->seq) {
                snprintf(why, cap, "items %zu and %zu name one sequence", j, i);
                return why;
            }
        *clause = "CCH-6";
        if (it->seq == 0 || v->state[i] == VAL_SEQ_STALE) {
            snprintf(why, cap, "item %zu names the %s handle 0x%llx", i, it->seq ? "freed" : "zero",
                     (unsigned long long)it->seq);
            return why;
        }
        *clause = "TOK-6";
        for (int32_t k = 0; vsz > 0 && k < it->n_tokens; k++)
            if (it->tokens[k] < 0 || it->tokens[k] >= vsz) {
                snprintf(why, cap, "item %zu has the id %d at %d", i, (int)it->tokens[k], (int)k);
                return why;
            }
        *clause = "CCH-5";
        if (mc > 0 && v->state[i] == VAL_SEQ_LIVE && v->len[i] >= 0)
            val_checked("CCH-5");
        if (mc > 0 && v->state[i] == VAL_SEQ_LIVE && v->len[i] >= 0 &&
            (int64_t)v->len[i] + it->n_tokens > mc) {
            snprintf(why, cap, "item %zu takes its sequence from %d past max_context %d by %d", i,
                     (int)v->len[i], (int)mc, (int)it->n_tokens);
            return why;
        }
    }
    return "";
}

static void shadow_items(eval_view *v, const ilab_batch_item_t *const *items, int32_t vsz)
{
    for (size_t i = 0; i < v->n; i++) {
        const ilab_batch_item_t *it = items[i];
        v->pass[i] = it;
        if (!it || it->struct_size != sizeof *it || !it->logits || it->n_tokens < 1 || vsz <= 0 ||
            (it->flags & ~(uint32_t)ILAB_EVAL_ALL_LOGITS))
            continue;
        size_t rows = (it->flags & ILAB_EVAL_ALL_LOGITS) ? (size_t)it->n_tokens : 1;
        if (rows > VAL_SHADOW_MAX / 4 / (size_t)vsz || !val_buf_open(&v->buf[i], rows * (size_t)vsz * 4))
            continue;
        v->shadowed[i] = true;
        v->copy[i] = *it;
        v->copy[i].logits = val_buf_ptr(&v->buf[i]);
        v->pass[i] = &v->copy[i];
    }
}

static void settle_logits(eval_view *v, const ilab_batch_item_t *const *items, ilab_status st, int32_t vsz)
{
    bool told = false;
    val_checked("LOG-1");
    for (size_t i = 0; i < v->n; i++) {
        if (!v->shadowed[i])
            continue;
        val_buf *b = &v->buf[i];
        size_t at;
        if (!told && !val_buf_guards_ok(b)) {
            val_violation("LOG-1", "eval", "item %zu: wrote outside its logits rows", i);
            told = true;
        } else if (!told && st != ILAB_OK && (at = val_buf_changed_from(b, 0)) != SIZE_MAX) {
            val_violation("LOG-1", "eval", "returned %s and wrote float %zu of item %zu's logits",
                          ilab_status_name(st), at / 4, i);
            told = true;
        }
        if (st != ILAB_OK)
            continue;
        const float *f = val_buf_ptr(b);
        size_t nf = b->size / 4;
        for (size_t k = 0; k < nf && !told; k++)
            if (!isfinite(f[k])) {
                val_violation("LOG-1", "eval", "item %zu: logits float %zu (row %zu) is %s", i, k,
                              k / (size_t)vsz,
                              isnan(f[k]) ? "NaN or never written" : "infinite");
                told = true;
            }
        memcpy(items[i]->logits, f, b->size);
    }
}

static ilab_status w_eval(ilab_backend_t *be, const ilab_batch_item_t *const *items, size_t n_items)
{
    val_call c;
    val_enter(&c, "eval", be);
    eval_view v;
    if (!items || n_items > EVAL_MAX_ITEMS || !view_open(&v, n_items)) {
        ilab_status st = R->eval(be, items, n_items);
        if (!items || n_items == 0) {
            val_checked("LOG-6");
            if (st == ILAB_OK)
                val_violation("LOG-6", "eval", "returned OK for %s", items ? "n_items 0" : "items NULL");
        }
        if (items && n_items <= EVAL_MAX_ITEMS)
            view_close(&v);
        val_leave(&c, st);
        return st;
    }
    val_lock();
    val_inst *in = val_inst_find(be);
    val_inst snap = {0};
    if (in)
        snap.info = in->info, snap.info_ok = in->info_ok;
    val_unlock();
    for (size_t i = 0; i < n_items; i++)
        if (items[i] && items[i]->struct_size >= sizeof *items[i])
            v.tracked[i] = seq_begin(be, items[i]->seq, &v.state[i], &v.len[i]);
    const char *clause, *why;
    char because[256];
    why = must_refuse(&v, items, n_items, in ? &snap : NULL, &clause, because, sizeof because);
    shadow_items(&v, items, snap.info_ok ? snap.info.vocab_size : 0);
    ilab_status st = R->eval(be, v.pass, n_items);
    settle_logits(&v, items, st, snap.info_ok ? snap.info.vocab_size : 1);
    if (why[0]) {
        val_checked(clause);
        if (st == ILAB_OK)
            val_violation(clause, "eval", "returned OK though %s", why);
    }
    val_lock();
    for (size_t i = 0; i < n_items; i++) {
        val_seq *s = v.tracked[i] ? seq_at(be, items[i]->seq) : NULL;
        if (st == ILAB_OK && s && s->state == VAL_SEQ_LIVE && s->inflight == 1 && s->length >= 0)
            s->length += items[i]->n_tokens;
        if (s)
            s->inflight--;
    }
    val_unlock();
    view_close(&v);
    val_leave(&c, st);
    return st;
}

void val_fill_seq(ilab_backend_api_t *t)
{
    if (t->seq_create) t->seq_create = w_seq_create;
    if (t->seq_free) t->seq_free = w_seq_free;
    if (t->seq_fork) t->seq_fork = w_seq_fork;
    if (t->seq_truncate) t->seq_truncate = w_seq_truncate;
    if (t->seq_length) t->seq_length = w_seq_length;
    if (t->eval) t->eval = w_eval;
}
