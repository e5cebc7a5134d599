/* eval() of one step's batch, under pressure. eval() is all-or-nothing by
 * contract, so a failed call changed nothing and can be tried again:
 *
 *  - ILAB_OUT_OF_MEMORY (the KV cache is full): make room and retry — first
 *    by evicting prefix-cache entries (least recently used), then by
 *    preempting the youngest running request (latest submitted): its
 *    sequence is freed, its tokens and sampler kept, and it waits at the
 *    front of the queue to be recomputed. A request that does not fit even
 *    alone fails with a message naming the capacity.
 *  - any other failure: the batch is split in halves and each is tried on
 *    its own, down to the single item(s) responsible, which fail with the
 *    backend's message; their batch-mates go on.
 *
 * Items of a request that left the batch are marked with item_req[i] =
 * NULL, so index ranges stay valid while halves are being tried. Scheduler
 * thread. */
#include <stdio.h>
#include <string.h>

#include "engine_internal.h"
#include "metrics.h"

/* eval() over the live items of [lo, lo + n); `*n_live` of them. On failure
 * `msg` holds the backend's message. */
static ilab_status run_eval(ilab_engine *e, size_t lo, size_t n, size_t *n_live, char *msg,
                            size_t msg_cap)
{
    size_t k = 0;
    for (size_t i = lo; i < lo + n; i++)
        if (e->item_req[i])
            e->item_ptrs[k++] = &e->items[i];
    *n_live = k;
    msg[0] = '\0';
    if (k == 0)
        return ILAB_OK;
    ilab_engine_lock_backend(e, e->serialize_all);
    ilab_status st = e->api->eval(e->backend, e->item_ptrs, k);
    if (st != ILAB_OK)
        ilab_engine_backend_error(e, msg, msg_cap);
    ilab_engine_unlock_backend(e, e->serialize_all);
    atomic_fetch_add(&e->eval_calls, 1);
    return st;
}

/* Drop `r`'s items from the whole batch (it is no longer in it). */
static void drop_items(ilab_engine *e, const ilab_req *r, size_t n_items)
{
    for (size_t i = 0; i < n_items; i++)
        if (e->item_req[i] == r)
            e->item_req[i] = NULL;
}

void ilab_engine_preempt(ilab_engine *e, ilab_req *r)
{
    ilab_engine_lock_backend(e, e->serialize_all);
    e->api->seq_free(e->backend, r->seq);
    ilab_engine_unlock_backend(e, e->serialize_all);
    ilab_engine_note_positions(e, -(int64_t)r->n_positions);
    r->started = false;
    r->n_fed = 0;
    r->n_positions = 0;
    r->preemptions++;
    atomic_fetch_add(&e->preemptions, 1);
    ilab_metrics_add_preemptions(1);

    pthread_mutex_lock(&e->mu);
    for (int i = 0; i < e->n_running; i++)
        if (e->running[i] == r) {
            memmove(&e->running[i], &e->running[i + 1],
                    (size_t)(e->n_running - i - 1) * sizeof *e->running);
            e->n_running--;
            break;
        }
    r->next = e->wait_head;
    e->wait_head = r;
    if (!e->wait_tail)
        e->wait_tail = r;
    e->n_waiting++;
    e->admit_hold = true;
    pthread_mutex_unlock(&e->mu);
    ilab_metrics_move_request(-1, 1);
    r->gauge = ILAB_REQ_WAITING;
}

/* The youngest running request (latest submitted), or NULL when only `keep`
 * (may be NULL) runs. The oldest request is never preempted for a younger
 * one, so it always makes progress. */
static ilab_req *youngest_running(ilab_engine *e)
{
    ilab_req *young = NULL;
    pthread_mutex_lock(&e->mu);
    if (e->n_running > 1)
        for (int i = 0; i < e->n_running; i++)
            if (e->running[i]->started && (!young || e->running[i]->id > young->id))
                young = e->running[i];
    pthread_mutex_unlock(&e->mu);
    return young;
}

/* Free some KV cache: a prefix-cache entry, else the youngest running
 * request. False when nothing is left to give up. */
static bool make_room(ilab_engine *e, size_t n_items)
{
    if (ilab_prefix_cache_evict_lru(e->prefix))
        return true;
    ilab_req *victim = youngest_running(e);
    if (!victim)
        return false;
    drop_items(e, victim, n_items);
    ilab_engine_preempt(e, victim);
    return true;
}

static void fail_item(ilab_engine *e, size_t lo, size_t n, ilab_status st, const char *msg)
{
    for (size_t i = lo; i < lo + n; i++) {
        ilab_req *r = e->item_req[i];
        if (!r)
            continue;
        char full[768], holds[64] = "";
        if (e->cache_stats)
            snprintf(holds, sizeof holds, "; the cache holds %lld", (long long)e->kv_total);
        if (st == ILAB_OUT_OF_MEMORY)
            snprintf(full, sizeof full,
                     "eval: the KV cache cannot hold this request even alone (%zu positions "
                     "needed%s): %s", r->n_tokens, holds, msg[0] ? msg : ilab_status_name(st));
        else
            snprintf(full, sizeof full, "eval: %s", msg[0] ? msg : ilab_status_name(st));
        e->item_req[i] = NULL;
        ilab_engine_retire(e, r, ILAB_FINISH_ERROR, st, full, NULL, 0);
    }
}

/* Evaluate the live items of [lo, lo + n), isolating failures. */
static void eval_range(ilab_engine *e, size_t lo, size_t n, size_t n_items)
{
    char msg[512];
    for (;;) {
        size_t live;
        ilab_status st = run_eval(e, lo, n, &live, msg, sizeof msg);
        if (live == 0)
            return;
        if (st == ILAB_OK) {
            ilab_engine_capacity_read(e, NULL); /* the gauge follows the backend's figures */
            ilab_engine_apply_results(e, lo, n);
            return;
        }
        if (st == ILAB_OUT_OF_MEMORY && make_room(e, n_items))
            continue;
        if (live == 1) {
            fail_item(e, lo, n, st, msg);
            return;
        }
        /* Someone in here is at fault: try each half on its own. */
        size_t half = n / 2;
        eval_range(e, lo, half, n_items);
        eval_range(e, lo + half, n - half, n_items);
        return;
    }
}

void ilab_engine_eval_batch(ilab_engine *e, size_t n_items)
{
    eval_range(e, 0, n_items, n_items);
}
