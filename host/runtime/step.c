/* One continuous-batching step (sampling: host):
 *   1. end cancelled running requests; give newly admitted (or resumed) ones
 *      a sequence, forked from the prefix cache when a prompt shares enough;
 *   2. build ONE eval() batch: a decode token for every sequence that has a
 *      sampled token to feed, then prefill chunks (<= prefill_chunk each)
 *      while step_token_budget lasts;
 *   3. eval() it (step_eval.c: preemption when the KV cache is full, error
 *      isolation when an item fails), then sample every sequence whose
 *      logits came back (logits.c), ending finished ones at once.
 * Scheduler thread. */
#include <stdio.h>
#include <string.h>

#include "engine_internal.h"
#include "metrics.h"

/* Leave the running list (under mu), free the sequence, emit the terminal
 * event, free the request. A started request leaving frees cache room, so
 * admission held back by a preemption may go on. Scheduler thread. */
void ilab_engine_retire(ilab_engine *e, ilab_req *r, ilab_finish_reason reason, ilab_status status,
                        const char *message, const char *tail, size_t tail_len)
{
    pthread_mutex_lock(&e->mu);
    for (int i = 0; i < e->n_running; i++)
        if (e->running[i] == r) {
            memmove(&e->running[i], &e->running[i + 1],
                    (size_t)(e->n_running - i - 1) * sizeof *e->running);
            e->n_running--; /* the terminal event takes it off the gauge */
            break;
        }
    if (r->started)
        e->admit_hold = false;
    pthread_mutex_unlock(&e->mu);
    if (r->started) {
        ilab_engine_lock_backend(e, e->serialize_all);
        e->api->seq_free(e->backend, r->seq);
        ilab_engine_unlock_backend(e, e->serialize_all);
        ilab_engine_note_positions(e, -(int64_t)r->n_positions);
        r->started = false;
    }
    ilab_req_emit_terminal(r, reason, status, message, tail, tail_len);
    ilab_req_free(r);
}

/* Newly admitted or resumed requests get their sequence. */
static bool start_request(ilab_engine *e, ilab_req *r)
{
    char msg[512];
    ilab_status st = ilab_engine_start_sequence(e, r, msg, sizeof msg);
    if (st != ILAB_OK) {
        char full[640];
        snprintf(full, sizeof full, "seq_create: %s", msg);
        ilab_engine_retire(e, r, ILAB_FINISH_ERROR, st, full, NULL, 0);
        return false;
    }
    r->started = true;
    if (!r->t_scheduled)
        r->t_scheduled = ilab_now_ns();
    return true;
}

/* The running requests this step works on, in e->snapshot: cancelled ones
 * end here and newly admitted ones get their sequence. Only this thread
 * changes the running list's membership, so the pointers stay valid until
 * retire() or preempt(). Returns how many. */
static int live_requests(ilab_engine *e)
{
    pthread_mutex_lock(&e->mu);
    int n = e->n_running;
    ilab_req **run = e->snapshot;
    memcpy(run, e->running, (size_t)n * sizeof *run);
    pthread_mutex_unlock(&e->mu);

    int live = 0;
    for (int i = 0; i < n; i++) {
        ilab_req *r = run[i];
        if (atomic_load(&r->cancel)) {
            ilab_engine_retire(e, r, ILAB_FINISH_CANCELLED, ILAB_OK, NULL, NULL, 0);
            continue;
        }
        if (!r->started && !start_request(e, r))
            continue;
        run[live++] = r;
    }
    return live;
}

static void add_item(ilab_engine *e, size_t *n_items, ilab_req *r, size_t n_tokens)
{
    ilab_batch_item_t *it = &e->items[*n_items];
    memset(it, 0, sizeof *it);
    it->struct_size = sizeof *it;
    it->seq = r->seq;
    it->tokens = r->tokens + r->n_fed;
    it->n_tokens = (int32_t)n_tokens;
    /* Logits only where the fed tokens run out: the next token is sampled
     * from them. */
    it->logits = r->n_fed + n_tokens == r->n_tokens ? r->logits : NULL;
    e->item_req[(*n_items)++] = r;
}

/* A decode: one sampled token to feed after the prompt is in. */
static bool decoding(const ilab_req *r)
{
    return r->n_fed >= r->n_prompt && r->n_tokens - r->n_fed == 1;
}

/* One batch over the `live` requests: decodes first (they are cheap and
 * keep latency even), then prefill chunks — a prompt, or a resumed
 * request's prompt and output — while the token budget lasts. Returns the
 * number of items. */
static size_t build_batch(ilab_engine *e, int live)
{
    ilab_req **run = e->snapshot;
    int budget = e->cfg.step_token_budget;
    size_t n_items = 0;
    for (int i = 0; i < live; i++) {
        ilab_req *r = run[i];
        if (!decoding(r) || budget < 1)
            continue;
        add_item(e, &n_items, r, 1);
        budget -= 1;
    }
    for (int i = 0; i < live && budget > 0; i++) {
        ilab_req *r = run[i];
        if (decoding(r) || r->n_fed >= r->n_tokens)
            continue;
        size_t chunk = r->n_tokens - r->n_fed;
        if (chunk > (size_t)e->cfg.prefill_chunk)
            chunk = (size_t)e->cfg.prefill_chunk;
        if (chunk > (size_t)budget)
            chunk = (size_t)budget;
        add_item(e, &n_items, r, chunk);
        budget -= (int)chunk;
    }
    return n_items;
}

void ilab_engine_apply_results(ilab_engine *e, size_t lo, size_t n)
{
    for (size_t i = lo; i < lo + n; i++) {
        ilab_req *r = e->item_req[i];
        if (!r)
            continue; /* preempted or failed */
        const ilab_batch_item_t *it = &e->items[i];
        size_t before = r->n_fed;
        r->n_positions += it->n_tokens;
        r->n_fed += (size_t)it->n_tokens;
        ilab_engine_note_positions(e, it->n_tokens);
        if (before < r->n_prompt && r->n_fed == r->n_prompt)
            ilab_engine_remember_prompt(e, r); /* before sampling can end it */
        e->item_req[i] = NULL; /* on_logits() may free r */
        if (it->logits)
            ilab_engine_on_logits(e, r);
    }
}

void ilab_engine_host_step(ilab_engine *e)
{
    int live = live_requests(e);
    size_t n_items = build_batch(e, live);
    if (n_items > 0)
        ilab_engine_eval_batch(e, n_items);
}
