/* The generate() path (sampling: backend): each admitted request runs the
 * backend's generate() on a worker thread of its own (at most max_running
 * at a time); events are relayed to the caller from that thread, with the
 * host's timings and metrics, and cancel() goes to the backend. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"
#include "metrics.h"

static int relay_event(void *user_data, const ilab_event_t *ev)
{
    ilab_req *r = user_data;
    if (r->terminal_sent)
        return 1; /* a plugin that emits past its terminal event: drop it */
    if (ev->type == ILAB_EVENT_TOKEN) {
        r->completion++;
        ilab_req_note_token(r);
        int stop = r->on_event(r->user_data, ev);
        return stop || atomic_load(&r->cancel);
    }
    ilab_req_count_end(r, ev->type == ILAB_EVENT_FINISH ? ev->finish_reason : ILAB_FINISH_ERROR);
    r->terminal_sent = true;
    r->on_event(r->user_data, ev);
    return 0;
}

static void *generate_worker(void *arg)
{
    ilab_req *r = arg;
    ilab_engine *e = r->engine;
    ilab_generate_request_t g;
    memset(&g, 0, sizeof g);
    g.struct_size = sizeof g;
    g.request_id = r->id;
    g.prompt_tokens = r->tokens;
    g.n_prompt_tokens = r->n_prompt;
    g.sampling = &r->sampling;
    g.max_tokens = r->max_tokens;
    g.stop = (const char *const *)r->stop;
    g.n_stop = r->n_stop;
    g.stop_token_ids = r->stop_ids;
    g.n_stop_token_ids = r->n_stop_ids;
    /* The plugin knows EOS; the other end-of-generation ids (eog.c) ride
     * along as stop ids, which end the stream the same way [STR-8]. */
    int32_t *ids = NULL;
    if (!r->ignore_eos && e->n_eog > 1 && (ids = malloc((r->n_stop_ids + e->n_eog) * sizeof *ids))) {
        if (r->n_stop_ids)
            memcpy(ids, r->stop_ids, r->n_stop_ids * sizeof *ids);
        memcpy(ids + r->n_stop_ids, e->eog, e->n_eog * sizeof *ids);
        g.stop_token_ids = ids;
        g.n_stop_token_ids = r->n_stop_ids + e->n_eog;
    }
    g.ignore_eos = r->ignore_eos;
    g.top_logprobs = r->top_logprobs;
    r->t_scheduled = ilab_now_ns();
    ilab_engine_lock_backend(e, e->serialize_generate);
    ilab_status st = e->api->generate(e->backend, &g, relay_event, r);
    char msg[512] = "";
    if (st != ILAB_OK)
        ilab_engine_backend_error(e, msg, sizeof msg);
    ilab_engine_unlock_backend(e, e->serialize_generate);
    free(ids);
    if (!r->terminal_sent) {
        /* The plugin returned without a terminal event: the contract says
         * there is always exactly one, so the host supplies it. */
        if (st == ILAB_OK) {
            st = ILAB_INTERNAL;
            snprintf(msg, sizeof msg, "generate returned without a FINISH or ERROR event");
        }
        ilab_req_emit_terminal(r, ILAB_FINISH_ERROR, st, msg, NULL, 0);
    }
    pthread_mutex_lock(&e->mu);
    atomic_store(&r->worker_done, true);
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

/* Join finished workers and drop them from the running list. Under mu. */
void ilab_engine_reap_workers(ilab_engine *e, ilab_req **done, int *n_done)
{
    for (int i = 0; i < e->n_running;) {
        ilab_req *r = e->running[i];
        if (r->worker_started && atomic_load(&r->worker_done)) {
            done[(*n_done)++] = r;
            memmove(&e->running[i], &e->running[i + 1],
                    (size_t)(e->n_running - i - 1) * sizeof *e->running);
            e->n_running--; /* its terminal event took it off the gauge */
        } else {
            i++;
        }
    }
}

void ilab_engine_start_worker(ilab_engine *e, ilab_req *r)
{
    if (pthread_create(&r->worker, NULL, generate_worker, r) == 0) {
        r->worker_started = true;
        return;
    }
    pthread_mutex_lock(&e->mu);
    for (int k = 0; k < e->n_running; k++)
        if (e->running[k] == r) {
            e->running[k] = e->running[--e->n_running];
            break;
        }
    pthread_mutex_unlock(&e->mu);
    ilab_req_emit_terminal(r, ILAB_FINISH_ERROR, ILAB_INTERNAL, "could not start a worker thread",
                           NULL, 0);
    ilab_req_free(r);
}
