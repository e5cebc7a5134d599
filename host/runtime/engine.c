/* The engine's public face (see engine.h and docs/runtime.md): create and
 * destroy, submit and cancel, generate() that waits, and accessors. The
 * scheduler thread is in scheduler.c; one step of it in step.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"
#include "metrics.h"

void ilab_engine_backend_error(ilab_engine *e, char *buf, size_t cap)
{
    buf[0] = '\0';
    e->api->last_error(e->backend, buf, cap);
}

/* The scheduler settings against the manifest; `c->max_running` is capped
 * at max_batch (the batch holds one item per running sequence). */
static ilab_status check_config(const ilab_manifest *m, ilab_engine_config *c, char *err,
                                size_t err_cap)
{
    if (c->max_running < 1 || c->max_waiting < 0 || c->step_token_budget < 1 ||
        c->prefill_chunk < 1) {
        snprintf(err, err_cap,
                 "scheduler: max_running (%d), step_token_budget (%d) and prefill_chunk (%d) must be "
                 ">= 1 and max_waiting (%d) >= 0",
                 c->max_running, c->step_token_budget, c->prefill_chunk, c->max_waiting);
        return ILAB_INVALID_ARGUMENT;
    }
    if (c->kv_watermark_percent < 0 || c->kv_watermark_percent > 50) {
        snprintf(err, err_cap, "scheduler: kv_watermark_percent (%d) must be 0..50",
                 c->kv_watermark_percent);
        return ILAB_INVALID_ARGUMENT;
    }
    if (c->prefix_cache_positions < 0 || c->prefix_cache_min_tokens < 1) {
        snprintf(err, err_cap,
                 "scheduler: prefix_cache_positions (%d) must be >= 0 and prefix_cache_min_tokens "
                 "(%d) >= 1", c->prefix_cache_positions, c->prefix_cache_min_tokens);
        return ILAB_INVALID_ARGUMENT;
    }
    if (m->sampling == ILAB_SAMPLING_BACKEND)
        return ILAB_OK;
    if (m->logits != ILAB_LOGITS_FULL) {
        snprintf(err, err_cap, "backend '%s' samples on the host but declares no full logits",
                 m->name);
        return ILAB_UNSUPPORTED;
    }
    if (c->max_running > m->max_batch)
        c->max_running = m->max_batch;
    if (c->step_token_budget < c->max_running) {
        snprintf(err, err_cap,
                 "scheduler: step_token_budget (%d) must be >= max_running (%d) so every "
                 "running sequence can decode each step",
                 c->step_token_budget, c->max_running);
        return ILAB_INVALID_ARGUMENT;
    }
    return ILAB_OK;
}

/* model_info() once, and the context the engine will use. */
static ilab_status read_model_info(ilab_engine *e, char *err, size_t err_cap)
{
    const ilab_manifest *m = e->manifest;
    e->info.struct_size = sizeof e->info;
    ilab_status st = e->api->model_info(e->backend, &e->info);
    if (st != ILAB_OK) {
        char msg[256];
        ilab_engine_backend_error(e, msg, sizeof msg);
        snprintf(err, err_cap, "backend '%s' model_info: %s: %s", m->name, ilab_status_name(st), msg);
        return st;
    }
    e->max_context = m->max_context > 0 ? m->max_context : e->info.max_context;
    if (e->info.vocab_size <= 0 || e->max_context <= 0) {
        snprintf(err, err_cap, "backend '%s' reports vocab_size %d and max_context %d; both must be > 0",
                 m->name, e->info.vocab_size, e->max_context);
        return ILAB_INVALID_ARGUMENT;
    }
    return ilab_engine_eog_setup(e, err, err_cap);
}

static void free_lists(ilab_engine *e)
{
    free(e->eog);
    free(e->running);
    free(e->items);
    free(e->item_ptrs);
    free(e->item_req);
    free(e->snapshot);
}

/* The running list and the step's batch arrays, max_running long each. */
static bool alloc_lists(ilab_engine *e)
{
    size_t n = (size_t)e->cfg.max_running;
    e->running = calloc(n, sizeof *e->running);
    e->items = calloc(n, sizeof *e->items);
    e->item_ptrs = calloc(n, sizeof *e->item_ptrs);
    e->item_req = calloc(n, sizeof *e->item_req);
    e->snapshot = calloc(n, sizeof *e->snapshot);
    return e->running && e->items && e->item_ptrs && e->item_req && e->snapshot;
}

ilab_status ilab_engine_create(const ilab_plugin *plugin, ilab_backend_t *backend,
                               const ilab_engine_config *cfg, char *err, size_t err_cap,
                               ilab_engine **out)
{
    char dummy[1];
    if (!err || !err_cap) {
        err = dummy;
        err_cap = sizeof dummy;
    }
    err[0] = '\0';
    if (!plugin || !backend || !out) {
        snprintf(err, err_cap, "engine needs a plugin, a backend instance and an out pointer");
        return ILAB_INVALID_ARGUMENT;
    }
    ilab_engine_config c;
    if (cfg)
        c = *cfg;
    else
        ilab_engine_config_default(&c);
    const ilab_manifest *m = ilab_plugin_manifest(plugin);
    ilab_status st = check_config(m, &c, err, err_cap);
    if (st != ILAB_OK)
        return st;
    ilab_engine *e = calloc(1, sizeof *e);
    if (!e) {
        snprintf(err, err_cap, "out of memory creating an engine");
        return ILAB_OUT_OF_MEMORY;
    }
    e->plugin = plugin;
    e->api = ilab_plugin_api(plugin);
    e->backend = backend;
    e->manifest = m;
    e->cfg = c;
    e->backend_sampling = m->sampling == ILAB_SAMPLING_BACKEND;
    e->serialize_all = m->thread_safety != ILAB_THREADS_FULL;
    e->serialize_generate = m->thread_safety == ILAB_THREADS_NONE;
    e->next_id = 1;
    st = read_model_info(e, err, err_cap);
    if (st != ILAB_OK) {
        free(e);
        return st;
    }
    atomic_init(&e->eval_calls, 0);
    atomic_init(&e->preemptions, 0);
    atomic_init(&e->prefix_queried, 0);
    atomic_init(&e->prefix_hit, 0);
    if (!alloc_lists(e) || !ilab_engine_prefix_setup(e)) {
        /* Not destroy(): the mutexes and the thread do not exist yet. */
        snprintf(err, err_cap, "out of memory creating an engine");
        ilab_engine_prefix_teardown(e);
        free_lists(e);
        free(e);
        return ILAB_OUT_OF_MEMORY;
    }
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    pthread_mutex_init(&e->backend_mu, NULL);
    st = ilab_engine_capacity_setup(e, err, err_cap);
    if (st != ILAB_OK) {
        ilab_engine_prefix_teardown(e);
        pthread_mutex_destroy(&e->mu);
        pthread_cond_destroy(&e->cv);
        pthread_mutex_destroy(&e->backend_mu);
        free_lists(e);
        free(e);
        return st;
    }
    if (pthread_create(&e->thread, NULL, ilab_engine_scheduler_main, e) != 0) {
        snprintf(err, err_cap, "could not start the scheduler thread");
        ilab_engine_capacity_teardown(e);
        ilab_engine_prefix_teardown(e);
        pthread_mutex_destroy(&e->mu);
        pthread_cond_destroy(&e->cv);
        pthread_mutex_destroy(&e->backend_mu);
        free_lists(e);
        free(e);
        return ILAB_INTERNAL;
    }
    *out = e;
    return ILAB_OK;
}

void ilab_engine_destroy(ilab_engine *e)
{
    if (!e)
        return;
    if (e->running && e->items) {
        pthread_mutex_lock(&e->mu);
        e->stopping = true;
        for (int i = 0; i < e->n_running; i++) {
            atomic_store(&e->running[i]->cancel, 1);
            if (e->backend_sampling && e->manifest->cancel)
                e->api->cancel(e->backend, e->running[i]->id);
        }
        pthread_cond_broadcast(&e->cv);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->thread, NULL);
        ilab_engine_prefix_teardown(e); /* its sequences, before the backend goes */
        pthread_mutex_destroy(&e->mu);
        pthread_cond_destroy(&e->cv);
        pthread_mutex_destroy(&e->backend_mu);
        ilab_engine_capacity_teardown(e);
    }
    free_lists(e);
    free(e);
}

/* A request that the next step will admit straight into a free running
 * slot is not really waiting, so free slots add to max_waiting. Under mu. */
static bool queue_full(const ilab_engine *e)
{
    int free_slots = e->cfg.max_running - e->n_running;
    return e->n_waiting >= e->cfg.max_waiting + (free_slots > 0 ? free_slots : 0);
}

static ilab_status submit(ilab_engine *e, const ilab_request *req, ilab_event_fn on_event,
                          void *user_data, ilab_request_metrics *metrics, char *err,
                          size_t err_cap, uint64_t *request_id)
{
    char dummy[1];
    if (!err || !err_cap) {
        err = dummy;
        err_cap = sizeof dummy;
    }
    err[0] = '\0';
    if (!e || !req || !on_event) {
        snprintf(err, err_cap, "submit needs an engine, a request and an event callback");
        return ILAB_INVALID_ARGUMENT;
    }
    /* Refuse early, before tokenizing, when the queue is full. */
    pthread_mutex_lock(&e->mu);
    bool full = queue_full(e);
    int waiting = e->n_waiting;
    pthread_mutex_unlock(&e->mu);
    if (full) {
        snprintf(err, err_cap, "overloaded: %d requests waiting (max_waiting %d); retry later",
                 waiting, e->cfg.max_waiting);
        return ILAB_UNAVAILABLE;
    }
    ilab_req *r = NULL;
    ilab_status st = ilab_req_build(e, req, err, err_cap, &r);
    if (st != ILAB_OK)
        return st;
    r->on_event = on_event;
    r->user_data = user_data;
    r->metrics_out = metrics;
    r->t_submit = ilab_now_ns();

    pthread_mutex_lock(&e->mu);
    if (e->stopping || queue_full(e)) {
        waiting = e->n_waiting;
        bool stopping = e->stopping;
        pthread_mutex_unlock(&e->mu);
        if (stopping)
            snprintf(err, err_cap, "engine is shutting down");
        else
            snprintf(err, err_cap, "overloaded: %d requests waiting (max_waiting %d); retry later",
                     waiting, e->cfg.max_waiting);
        ilab_req_free(r);
        return ILAB_UNAVAILABLE;
    }
    r->id = e->next_id++;
    if (e->wait_tail)
        e->wait_tail->next = r;
    else
        e->wait_head = r;
    e->wait_tail = r;
    e->n_waiting++;
    ilab_metrics_move_request(0, 1);
    r->gauge = ILAB_REQ_WAITING;
    if (request_id)
        *request_id = r->id;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return ILAB_OK;
}

ilab_status ilab_engine_submit(ilab_engine *e, const ilab_request *req, ilab_event_fn on_event,
                               void *user_data, char *err, size_t err_cap, uint64_t *request_id)
{
    return submit(e, req, on_event, user_data, NULL, err, err_cap, request_id);
}

ilab_status ilab_engine_cancel(ilab_engine *e, uint64_t request_id)
{
    if (!e)
        return ILAB_INVALID_ARGUMENT;
    pthread_mutex_lock(&e->mu);
    bool found = false;
    for (ilab_req *r = e->wait_head; r && !found; r = r->next)
        if (r->id == request_id) {
            atomic_store(&r->cancel, 1);
            found = true;
        }
    for (int i = 0; i < e->n_running && !found; i++) {
        ilab_req *r = e->running[i];
        if (r->id == request_id) {
            atomic_store(&r->cancel, 1);
            found = true;
            if (e->backend_sampling && e->manifest->cancel)
                e->api->cancel(e->backend, request_id); /* any thread, by contract */
        }
    }
    if (found)
        pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return ILAB_OK;
}

typedef struct waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    ilab_status status;
    char *err;
    size_t err_cap;
    ilab_event_fn on_event;
    void *user_data;
} waiter;

static int waiter_event(void *user_data, const ilab_event_t *ev)
{
    waiter *w = user_data;
    int rc = w->on_event ? w->on_event(w->user_data, ev) : 0;
    if (ev->type == ILAB_EVENT_TOKEN)
        return rc;
    pthread_mutex_lock(&w->mu);
    if (ev->type == ILAB_EVENT_ERROR) {
        w->status = ev->status;
        if (w->err && w->err_cap)
            snprintf(w->err, w->err_cap, "%s", ev->message ? ev->message : "");
    }
    w->done = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return 0;
}

ilab_status ilab_engine_generate(ilab_engine *e, const ilab_request *req, ilab_event_fn on_event,
                                 void *user_data, char *err, size_t err_cap,
                                 ilab_request_metrics *metrics)
{
    waiter w;
    memset(&w, 0, sizeof w);
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    w.status = ILAB_OK;
    w.err = err;
    w.err_cap = err_cap;
    w.on_event = on_event;
    w.user_data = user_data;
    ilab_request_metrics local;
    ilab_status st = submit(e, req, waiter_event, &w, metrics ? metrics : &local, err, err_cap, NULL);
    if (st == ILAB_OK) {
        pthread_mutex_lock(&w.mu);
        while (!w.done)
            pthread_cond_wait(&w.cv, &w.mu);
        pthread_mutex_unlock(&w.mu);
        st = w.status;
    }
    pthread_mutex_destroy(&w.mu);
    pthread_cond_destroy(&w.cv);
    return st;
}

void ilab_engine_get_counters(const ilab_engine *e, ilab_engine_counters *out)
{
    memset(out, 0, sizeof *out);
    if (!e)
        return;
    ilab_engine *m = (ilab_engine *)e; /* atomics are read through a non-const pointer */
    out->eval_calls = atomic_load(&m->eval_calls);
    out->preemptions = atomic_load(&m->preemptions);
    out->prefix_cache_queries = atomic_load(&m->prefix_queried);
    out->prefix_cache_hits = atomic_load(&m->prefix_hit);
    pthread_mutex_lock(&m->mu);
    out->running = m->n_running;
    out->waiting = m->n_waiting;
    pthread_mutex_unlock(&m->mu);
}

uint64_t ilab_engine_eval_calls(const ilab_engine *e)
{
    return e ? atomic_load(&((ilab_engine *)e)->eval_calls) : 0;
}

const ilab_model_info_t *ilab_engine_model_info(const ilab_engine *e) { return &e->info; }

int32_t ilab_engine_max_context(const ilab_engine *e) { return e->max_context; }
