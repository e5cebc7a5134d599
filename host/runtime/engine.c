/* The engine: a scheduler thread per backend instance (see engine.h and
 * docs/runtime.md).
 *
 * Host sampling (sampling: host): continuous batching. Each step
 *   1. ends cancelled requests (FINISH cancelled) and admits waiting ones up
 *      to max_running (seq_create);
 *   2. builds ONE eval() batch: one decode token for every sequence that has
 *      a sampled token to feed, then prompt chunks (<= prefill_chunk each)
 *      while step_token_budget lasts;
 *   3. samples every sequence whose logits came back, emits TOKEN, and ends
 *      finished sequences at once (seq_free).
 * Backend sampling (sampling: backend): each admitted request runs
 * generate() on its own worker thread (at most max_running at a time);
 * cancel() goes to the backend.
 *
 * Locking: `mu` guards the waiting queue, the running list's membership and
 * the flags; the scheduler never holds it while calling the backend or a
 * callback, so callbacks may submit or cancel. `backend_mu` serialises
 * backend calls when the manifest's thread_safety requires it. */
#include "engine.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "metrics.h"
#include "sampler.h"
#include "text_stream.h"

typedef struct request request;
struct request {
    request *next; /* waiting queue */
    uint64_t id;
    int32_t *prompt;
    size_t n_prompt;
    ilab_sampling_t sampling;
    int32_t max_tokens;
    char **stop;
    size_t n_stop;
    int32_t *stop_ids;
    size_t n_stop_ids;
    bool ignore_eos;
    int32_t top_logprobs;
    ilab_event_fn on_event;
    void *user_data;
    ilab_request_metrics *metrics_out; /* filled before the terminal event; may be NULL */
    atomic_int cancel;

    uint64_t t_submit, t_scheduled, t_first, t_last;
    double itl_sum;
    uint32_t completion;

    /* host sampling */
    ilab_sampler *sampler;
    ilab_text_stream ts;
    ilab_seq_t seq;
    bool started;          /* seq created */
    size_t n_fed;          /* prompt tokens appended so far */
    int32_t pending_token; /* sampled, not yet appended; -1 none */
    int32_t n_positions;   /* positions held in the backend */
    int32_t prev_token;    /* for token_piece: the last prompt token, then the last output token */
    float *logits;
    ilab_logprob_t *top;
    char *piece;
    size_t piece_cap;

    /* backend sampling */
    pthread_t worker;
    bool worker_started;
    atomic_bool worker_done;
    bool terminal_sent;
    ilab_engine *engine;
};

struct ilab_engine {
    const ilab_plugin *plugin;
    const ilab_backend_api_t *api;
    ilab_backend_t *backend;
    const ilab_manifest *manifest;
    ilab_model_info_t info;
    int32_t max_context;
    ilab_engine_config cfg;
    bool backend_sampling;
    bool serialize_all;      /* thread_safety != full: one backend call at a time */
    bool serialize_generate; /* thread_safety == none */

    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_mutex_t backend_mu;
    request *wait_head, *wait_tail;
    int n_waiting;
    request **running;
    int n_running;
    bool stopping;
    uint64_t next_id;
    pthread_t thread;
    atomic_uint_fast64_t eval_calls;

    ilab_batch_item_t *items;
    const ilab_batch_item_t **item_ptrs;
    request **item_req;
    request **snapshot; /* the scheduler's copy of `running` for one step */
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static double seconds(uint64_t from, uint64_t to) { return to > from ? (double)(to - from) * 1e-9 : 0.0; }

void ilab_engine_config_default(ilab_engine_config *cfg)
{
    cfg->max_running = 16;
    cfg->max_waiting = 64;
    cfg->step_token_budget = 512;
    cfg->prefill_chunk = 256;
}

static void lock_backend(ilab_engine *e, bool needed)
{
    if (needed)
        pthread_mutex_lock(&e->backend_mu);
}

static void unlock_backend(ilab_engine *e, bool needed)
{
    if (needed)
        pthread_mutex_unlock(&e->backend_mu);
}

/* ---- requests ----------------------------------------------------------- */

static void request_free(request *r)
{
    if (!r)
        return;
    free(r->prompt);
    if (r->stop)
        for (size_t i = 0; i < r->n_stop; i++)
            free(r->stop[i]);
    free(r->stop);
    free(r->stop_ids);
    ilab_sampler_free(r->sampler);
    ilab_text_stream_free(&r->ts);
    free(r->logits);
    free(r->top);
    free(r->piece);
    free(r);
}

static void fill_metrics(request *r, uint64_t t_end)
{
    if (!r->metrics_out)
        return;
    ilab_request_metrics *m = r->metrics_out;
    m->queue_seconds = r->t_scheduled ? seconds(r->t_submit, r->t_scheduled) : seconds(r->t_submit, t_end);
    m->ttft_seconds = r->t_first ? seconds(r->t_submit, r->t_first) : 0.0;
    m->e2e_seconds = seconds(r->t_submit, t_end);
    m->mean_itl_seconds = r->completion > 1 ? r->itl_sum / (double)(r->completion - 1) : 0.0;
    m->prompt_tokens = (uint32_t)r->n_prompt;
    m->completion_tokens = r->completion;
}

/* Record the token's timing; call just before emitting a TOKEN event. */
static void note_token(request *r)
{
    uint64_t t = now_ns();
    if (!r->t_first) {
        r->t_first = t;
        ilab_metrics_observe_ttft(seconds(r->t_submit, t));
    } else {
        double itl = seconds(r->t_last, t);
        r->itl_sum += itl;
        ilab_metrics_observe_itl(itl);
    }
    r->t_last = t;
    ilab_metrics_add_generation_tokens(1);
}

/* Emit the terminal event (FINISH when status == OK, else ERROR) and record
 * the request's metrics. `tail` is held-back text released at the end. */
static void emit_terminal(request *r, ilab_finish_reason reason, ilab_status status,
                          const char *message, const char *tail, size_t tail_len)
{
    uint64_t t = now_ns();
    fill_metrics(r, t);
    ilab_metrics_observe_e2e(seconds(r->t_submit, t));
    ilab_metrics_add_prompt_tokens(r->n_prompt);
    ilab_metrics_add_finished(status == ILAB_OK ? (int)reason : ILAB_FINISH_ERROR);
    ilab_event_t ev;
    memset(&ev, 0, sizeof ev);
    ev.struct_size = sizeof ev;
    ev.request_id = r->id;
    ev.prompt_tokens = (uint32_t)r->n_prompt;
    ev.completion_tokens = r->completion;
    ev.text = tail ? tail : "";
    ev.text_len = tail ? tail_len : 0;
    if (status == ILAB_OK) {
        ev.type = ILAB_EVENT_FINISH;
        ev.finish_reason = reason;
        ev.status = ILAB_OK;
    } else {
        ev.type = ILAB_EVENT_ERROR;
        ev.finish_reason = ILAB_FINISH_ERROR;
        ev.status = status;
        ev.message = message && message[0] ? message : ilab_status_name(status);
    }
    r->terminal_sent = true;
    r->on_event(r->user_data, &ev);
}

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p)
        memcpy(p, s, n);
    return p;
}

/* Tokenize a text prompt with the backend's tokenizer. */
static ilab_status tokenize_prompt(ilab_engine *e, const ilab_request *req, request *r,
                                   char *err, size_t err_cap)
{
    if (!e->manifest->tokenizer) {
        snprintf(err, err_cap, "backend '%s' declares no tokenizer: send prompt token ids instead of text",
                 e->manifest->name);
        return ILAB_UNSUPPORTED;
    }
    size_t cap = req->prompt_len + 8, n = 0;
    uint32_t flags = req->add_bos ? ILAB_TOKENIZE_ADD_BOS : 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        free(r->prompt);
        r->prompt = malloc(cap * sizeof *r->prompt);
        if (!r->prompt)
            return ILAB_OUT_OF_MEMORY;
        lock_backend(e, e->serialize_all);
        ilab_status st = e->api->tokenize(e->backend, req->prompt_text, req->prompt_len, flags,
                                          r->prompt, cap, &n);
        char msg[256] = "";
        if (st != ILAB_OK && st != ILAB_BUFFER_TOO_SMALL)
            e->api->last_error(e->backend, msg, sizeof msg);
        unlock_backend(e, e->serialize_all);
        if (st == ILAB_OK) {
            r->n_prompt = n;
            return ILAB_OK;
        }
        if (st != ILAB_BUFFER_TOO_SMALL) {
            snprintf(err, err_cap, "prompt: tokenize failed: %s: %s", ilab_status_name(st), msg);
            return st;
        }
        cap = n;
    }
    snprintf(err, err_cap, "prompt: tokenize kept asking for a larger buffer");
    return ILAB_INTERNAL;
}

static ilab_status build_request(ilab_engine *e, const ilab_request *req, char *err, size_t err_cap,
                                 request **out)
{
    if (req->max_tokens <= 0) {
        snprintf(err, err_cap, "max_tokens must be > 0 (got %d)", req->max_tokens);
        return ILAB_INVALID_ARGUMENT;
    }
    if (req->top_logprobs < 0) {
        snprintf(err, err_cap, "top_logprobs must be >= 0 (got %d)", req->top_logprobs);
        return ILAB_INVALID_ARGUMENT;
    }
    if (req->top_logprobs > e->manifest->topk_max) {
        snprintf(err, err_cap, "top_logprobs %d exceeds backend '%s' topk_max %d",
                 req->top_logprobs, e->manifest->name, e->manifest->topk_max);
        return e->manifest->topk_max == 0 ? ILAB_UNSUPPORTED : ILAB_INVALID_ARGUMENT;
    }
    request *r = calloc(1, sizeof *r);
    if (!r)
        return ILAB_OUT_OF_MEMORY;
    r->engine = e;
    r->sampling = req->sampling;
    r->sampling.struct_size = sizeof r->sampling;
    r->max_tokens = req->max_tokens;
    r->ignore_eos = req->ignore_eos;
    r->top_logprobs = req->top_logprobs;
    r->pending_token = -1;
    r->prev_token = -1;
    atomic_init(&r->cancel, 0);
    atomic_init(&r->worker_done, false);
    ilab_status st = ILAB_OK;

    if (req->prompt_text) {
        st = tokenize_prompt(e, req, r, err, err_cap);
    } else if (req->n_prompt_tokens > 0 && req->prompt_tokens) {
        r->prompt = malloc(req->n_prompt_tokens * sizeof *r->prompt);
        if (!r->prompt)
            st = ILAB_OUT_OF_MEMORY;
        else {
            memcpy(r->prompt, req->prompt_tokens, req->n_prompt_tokens * sizeof *r->prompt);
            r->n_prompt = req->n_prompt_tokens;
        }
    }
    if (st == ILAB_OK && r->n_prompt == 0) {
        snprintf(err, err_cap, "prompt is empty (no text and no token ids%s)",
                 req->prompt_text ? "; it tokenized to nothing" : "");
        st = ILAB_INVALID_ARGUMENT;
    }
    for (size_t i = 0; st == ILAB_OK && i < r->n_prompt; i++)
        if (r->prompt[i] < 0 || r->prompt[i] >= e->info.vocab_size) {
            snprintf(err, err_cap, "prompt token %zu is %d, outside the vocabulary [0, %d)",
                     i, r->prompt[i], e->info.vocab_size);
            st = ILAB_INVALID_ARGUMENT;
        }
    /* The output continues the prompt: its first piece follows the last
     * prompt token (so a leading space is kept, not taken for the
     * tokenizer's dummy prefix at the start of a text). */
    if (st == ILAB_OK)
        r->prev_token = r->prompt[r->n_prompt - 1];
    if (st == ILAB_OK && r->n_prompt > (size_t)e->max_context) {
        snprintf(err, err_cap, "prompt is %zu tokens, longer than the context of %d", r->n_prompt,
                 e->max_context);
        st = ILAB_CONTEXT_OVERFLOW;
    }
    if (st == ILAB_OK && req->n_stop > 0) {
        r->stop = calloc(req->n_stop, sizeof *r->stop);
        if (!r->stop)
            st = ILAB_OUT_OF_MEMORY;
        for (size_t i = 0; st == ILAB_OK && i < req->n_stop; i++) {
            if (!req->stop[i]) {
                snprintf(err, err_cap, "stop string %zu is NULL", i);
                st = ILAB_INVALID_ARGUMENT;
                break;
            }
            r->stop[i] = dup_str(req->stop[i]);
            r->n_stop = i + 1;
            if (!r->stop[i])
                st = ILAB_OUT_OF_MEMORY;
        }
    }
    if (st == ILAB_OK && req->n_stop_token_ids > 0) {
        r->stop_ids = malloc(req->n_stop_token_ids * sizeof *r->stop_ids);
        if (!r->stop_ids)
            st = ILAB_OUT_OF_MEMORY;
        for (size_t i = 0; st == ILAB_OK && i < req->n_stop_token_ids; i++) {
            int32_t t = req->stop_token_ids[i];
            if (t < 0 || t >= e->info.vocab_size) {
                snprintf(err, err_cap, "stop token id %d is outside the vocabulary [0, %d)", t,
                         e->info.vocab_size);
                st = ILAB_INVALID_ARGUMENT;
            }
            r->stop_ids[i] = t;
        }
        r->n_stop_ids = req->n_stop_token_ids;
    }
    if (st == ILAB_OK && e->backend_sampling)
        st = ilab_sampling_validate(&r->sampling, err, err_cap); /* same refusals either way */
    if (st == ILAB_OK && !e->backend_sampling) {
        st = ilab_sampler_create(&r->sampling, e->info.vocab_size, err, err_cap, &r->sampler);
        if (st == ILAB_OK) {
            for (size_t i = 0; i < r->n_prompt; i++)
                ilab_sampler_accept(r->sampler, r->prompt[i]);
            r->logits = malloc((size_t)e->info.vocab_size * sizeof *r->logits);
            r->top = calloc((size_t)(r->top_logprobs > 0 ? r->top_logprobs : 1), sizeof *r->top);
            if (!r->logits || !r->top ||
                !ilab_text_stream_init(&r->ts, (const char *const *)r->stop, r->n_stop))
                st = ILAB_OUT_OF_MEMORY;
        }
    }
    if (st == ILAB_OUT_OF_MEMORY && err_cap && !err[0])
        snprintf(err, err_cap, "out of memory while queueing a request");
    if (st != ILAB_OK) {
        request_free(r);
        return st;
    }
    *out = r;
    return ILAB_OK;
}

/* ---- host-sampling scheduler ------------------------------------------- */

static void backend_error(ilab_engine *e, char *buf, size_t cap)
{
    buf[0] = '\0';
    e->api->last_error(e->backend, buf, cap);
}

/* Leave the running list (under mu), free the sequence, emit the terminal
 * event, free the request. Scheduler thread. */
static void retire(ilab_engine *e, request *r, ilab_finish_reason reason, ilab_status status,
                   const char *message, const char *tail, size_t tail_len)
{
    pthread_mutex_lock(&e->mu);
    for (int i = 0; i < e->n_running; i++)
        if (e->running[i] == r) {
            memmove(&e->running[i], &e->running[i + 1],
                    (size_t)(e->n_running - i - 1) * sizeof *e->running);
            e->n_running--;
            ilab_metrics_add_running(-1);
            break;
        }
    pthread_mutex_unlock(&e->mu);
    if (r->started) {
        lock_backend(e, e->serialize_all);
        e->api->seq_free(e->backend, r->seq);
        unlock_backend(e, e->serialize_all);
        ilab_metrics_add_kv_positions(-(int64_t)r->n_positions);
        r->started = false;
    }
    emit_terminal(r, reason, status, message, tail, tail_len);
    request_free(r);
}

static bool is_stop_token(const ilab_engine *e, const request *r, int32_t token)
{
    if (token == e->info.eos_id && e->info.eos_id >= 0 && !r->ignore_eos)
        return true;
    for (size_t i = 0; i < r->n_stop_ids; i++)
        if (r->stop_ids[i] == token)
            return true;
    return false;
}

/* The bytes `token` adds, into r->piece. */
static ilab_status token_piece(ilab_engine *e, request *r, int32_t token, size_t *len,
                               char *err, size_t err_cap)
{
    for (int attempt = 0; attempt < 2; attempt++) {
        if (!r->piece) {
            r->piece_cap = r->piece_cap ? r->piece_cap : 64;
            r->piece = malloc(r->piece_cap);
            if (!r->piece)
                return ILAB_OUT_OF_MEMORY;
        }
        lock_backend(e, e->serialize_all);
        ilab_status st = e->api->token_piece(e->backend, r->prev_token, token, r->piece,
                                             r->piece_cap, len);
        if (st != ILAB_OK && st != ILAB_BUFFER_TOO_SMALL)
            backend_error(e, err, err_cap);
        unlock_backend(e, e->serialize_all);
        if (st != ILAB_BUFFER_TOO_SMALL)
            return st;
        free(r->piece);
        r->piece = NULL;
        r->piece_cap = *len + 1;
    }
    snprintf(err, err_cap, "token_piece kept asking for a larger buffer");
    return ILAB_INTERNAL;
}

/* A sequence's logits came back: sample, emit, and maybe end it. */
static void on_logits(ilab_engine *e, request *r)
{
    char err[512];
    float logprob = 0.0f;
    int n_top = r->top_logprobs;
    int32_t token = ilab_sampler_sample(r->sampler, r->logits, &logprob, r->top, n_top);
    ilab_sampler_accept(r->sampler, token);

    if (is_stop_token(e, r, token)) {
        const char *tail;
        size_t tail_len;
        ilab_text_stream_flush(&r->ts, &tail, &tail_len);
        retire(e, r, ILAB_FINISH_STOP, ILAB_OK, NULL, tail, tail_len);
        return;
    }
    size_t len = 0;
    ilab_status st = ILAB_OK;
    if (e->manifest->tokenizer) {
        st = token_piece(e, r, token, &len, err, sizeof err);
    }
    if (st != ILAB_OK) {
        char msg[640];
        snprintf(msg, sizeof msg, "token_piece(%d): %s", token, err);
        retire(e, r, ILAB_FINISH_ERROR, st, msg, NULL, 0);
        return;
    }
    r->completion++;
    bool context_full = r->n_positions >= e->max_context;
    bool last = r->completion >= (uint32_t)r->max_tokens || context_full;
    const char *delta = "";
    size_t delta_len = 0;
    bool stopped = false;
    if (len > 0 || last)
        stopped = ilab_text_stream_push(&r->ts, r->piece ? r->piece : "", len, last, &delta, &delta_len);
    r->prev_token = token;

    ilab_event_t ev;
    memset(&ev, 0, sizeof ev);
    ev.struct_size = sizeof ev;
    ev.type = ILAB_EVENT_TOKEN;
    ev.request_id = r->id;
    ev.token = token;
    ev.text = delta;
    ev.text_len = delta_len;
    ev.logprob = logprob;
    ev.top_logprobs = n_top > 0 ? r->top : NULL;
    ev.n_top_logprobs = (uint32_t)(n_top > 0 ? (n_top < e->info.vocab_size ? n_top : e->info.vocab_size) : 0);
    note_token(r);
    int stop_now = r->on_event(r->user_data, &ev);

    if (stop_now || atomic_load(&r->cancel))
        retire(e, r, ILAB_FINISH_CANCELLED, ILAB_OK, NULL, NULL, 0);
    else if (stopped)
        retire(e, r, ILAB_FINISH_STOP, ILAB_OK, NULL, NULL, 0);
    else if (last)
        retire(e, r, ILAB_FINISH_LENGTH, ILAB_OK, NULL, NULL, 0);
    else
        r->pending_token = token;
}

/* Newly admitted requests get their sequence. */
static bool start_request(ilab_engine *e, request *r)
{
    char msg[512];
    lock_backend(e, e->serialize_all);
    ilab_status st = e->api->seq_create(e->backend, &r->seq);
    if (st != ILAB_OK)
        backend_error(e, msg, sizeof msg);
    unlock_backend(e, e->serialize_all);
    if (st != ILAB_OK) {
        char full[640];
        snprintf(full, sizeof full, "seq_create: %s", msg);
        retire(e, r, ILAB_FINISH_ERROR, st, full, NULL, 0);
        return false;
    }
    r->started = true;
    r->t_scheduled = now_ns();
    return true;
}

static void host_step(ilab_engine *e)
{
    /* Snapshot the running list: only this thread changes membership, so
     * the pointers stay valid until retire(). */
    pthread_mutex_lock(&e->mu);
    int n = e->n_running;
    request **run = e->snapshot;
    memcpy(run, e->running, (size_t)n * sizeof *run);
    pthread_mutex_unlock(&e->mu);

    int live = 0;
    for (int i = 0; i < n; i++) {
        request *r = run[i];
        if (atomic_load(&r->cancel)) {
            retire(e, r, ILAB_FINISH_CANCELLED, ILAB_OK, NULL, NULL, 0);
            continue;
        }
        if (!r->started && !start_request(e, r))
            continue;
        run[live++] = r;
    }

    /* One batch: decodes first (they are cheap and keep latency even), then
     * prompt chunks while the token budget lasts. */
    int budget = e->cfg.step_token_budget;
    size_t n_items = 0;
    for (int i = 0; i < live; i++) {
        request *r = run[i];
        if (r->pending_token < 0 || budget < 1)
            continue;
        ilab_batch_item_t *it = &e->items[n_items];
        memset(it, 0, sizeof *it);
        it->struct_size = sizeof *it;
        it->seq = r->seq;
        it->tokens = &r->pending_token;
        it->n_tokens = 1;
        it->logits = r->logits;
        e->item_req[n_items++] = r;
        budget -= 1;
    }
    for (int i = 0; i < live && budget > 0; i++) {
        request *r = run[i];
        if (r->n_fed >= r->n_prompt)
            continue;
        size_t chunk = r->n_prompt - r->n_fed;
        if (chunk > (size_t)e->cfg.prefill_chunk)
            chunk = (size_t)e->cfg.prefill_chunk;
        if (chunk > (size_t)budget)
            chunk = (size_t)budget;
        ilab_batch_item_t *it = &e->items[n_items];
        memset(it, 0, sizeof *it);
        it->struct_size = sizeof *it;
        it->seq = r->seq;
        it->tokens = r->prompt + r->n_fed;
        it->n_tokens = (int32_t)chunk;
        it->logits = r->n_fed + chunk == r->n_prompt ? r->logits : NULL;
        e->item_req[n_items++] = r;
        budget -= (int)chunk;
    }
    if (n_items == 0)
        return;

    for (size_t i = 0; i < n_items; i++)
        e->item_ptrs[i] = &e->items[i];
    char msg[512] = "";
    lock_backend(e, e->serialize_all);
    ilab_status st = e->api->eval(e->backend, e->item_ptrs, n_items);
    if (st != ILAB_OK)
        backend_error(e, msg, sizeof msg);
    unlock_backend(e, e->serialize_all);
    atomic_fetch_add(&e->eval_calls, 1);

    if (st != ILAB_OK) {
        char full[640];
        snprintf(full, sizeof full, "eval: %s", msg[0] ? msg : ilab_status_name(st));
        for (size_t i = 0; i < n_items; i++)
            retire(e, e->item_req[i], ILAB_FINISH_ERROR, st, full, NULL, 0);
        return;
    }
    for (size_t i = 0; i < n_items; i++) {
        request *r = e->item_req[i];
        const ilab_batch_item_t *it = &e->items[i];
        r->n_positions += it->n_tokens;
        ilab_metrics_add_kv_positions(it->n_tokens);
        if (it->tokens == &r->pending_token)
            r->pending_token = -1;
        else
            r->n_fed += (size_t)it->n_tokens;
        if (it->logits)
            on_logits(e, r);
    }
}

/* ---- backend-sampling workers ------------------------------------------- */

static int relay_event(void *user_data, const ilab_event_t *ev)
{
    request *r = user_data;
    if (r->terminal_sent)
        return 1; /* a plugin that emits past its terminal event: drop it */
    if (ev->type == ILAB_EVENT_TOKEN) {
        r->completion++;
        note_token(r);
        int stop = r->on_event(r->user_data, ev);
        return stop || atomic_load(&r->cancel);
    }
    uint64_t t = now_ns();
    fill_metrics(r, t);
    ilab_metrics_observe_e2e(seconds(r->t_submit, t));
    ilab_metrics_add_prompt_tokens(r->n_prompt);
    ilab_metrics_add_finished(ev->type == ILAB_EVENT_FINISH ? (int)ev->finish_reason : ILAB_FINISH_ERROR);
    r->terminal_sent = true;
    r->on_event(r->user_data, ev);
    return 0;
}

static void *generate_worker(void *arg)
{
    request *r = arg;
    ilab_engine *e = r->engine;
    ilab_generate_request_t g;
    memset(&g, 0, sizeof g);
    g.struct_size = sizeof g;
    g.request_id = r->id;
    g.prompt_tokens = r->prompt;
    g.n_prompt_tokens = r->n_prompt;
    g.sampling = r->sampling;
    g.max_tokens = r->max_tokens;
    g.stop = (const char *const *)r->stop;
    g.n_stop = r->n_stop;
    g.stop_token_ids = r->stop_ids;
    g.n_stop_token_ids = r->n_stop_ids;
    g.ignore_eos = r->ignore_eos;
    g.top_logprobs = r->top_logprobs;
    r->t_scheduled = now_ns();
    lock_backend(e, e->serialize_generate);
    ilab_status st = e->api->generate(e->backend, &g, relay_event, r);
    char msg[512] = "";
    if (st != ILAB_OK)
        backend_error(e, msg, sizeof msg);
    unlock_backend(e, e->serialize_generate);
    if (!r->terminal_sent) {
        /* The plugin returned without a terminal event: the contract says
         * there is always exactly one, so the host supplies it. */
        if (st == ILAB_OK) {
            st = ILAB_INTERNAL;
            snprintf(msg, sizeof msg, "generate returned without a FINISH or ERROR event");
        }
        emit_terminal(r, ILAB_FINISH_ERROR, st, msg, NULL, 0);
    }
    pthread_mutex_lock(&e->mu);
    atomic_store(&r->worker_done, true);
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

/* Join finished workers and drop them from the running list. Under mu. */
static void reap_workers(ilab_engine *e, request **done, int *n_done)
{
    for (int i = 0; i < e->n_running;) {
        request *r = e->running[i];
        if (r->worker_started && atomic_load(&r->worker_done)) {
            done[(*n_done)++] = r;
            memmove(&e->running[i], &e->running[i + 1],
                    (size_t)(e->n_running - i - 1) * sizeof *e->running);
            e->n_running--;
            ilab_metrics_add_running(-1);
        } else {
            i++;
        }
    }
}

/* ---- the scheduler thread ----------------------------------------------- */

static bool any_worker_done(const ilab_engine *e)
{
    for (int i = 0; i < e->n_running; i++)
        if (atomic_load(&e->running[i]->worker_done))
            return true;
    return false;
}

/* Is there anything for the scheduler to do? Under mu. */
static bool work_pending(const ilab_engine *e)
{
    if (e->stopping) /* with workers still out, sleep until one finishes */
        return !e->backend_sampling || e->n_running == 0 || e->n_waiting > 0 || any_worker_done(e);
    if (e->n_waiting > 0 && e->n_running < e->cfg.max_running)
        return true;
    for (const request *r = e->wait_head; r; r = r->next)
        if (atomic_load(&r->cancel))
            return true;
    if (!e->backend_sampling)
        return e->n_running > 0;
    return any_worker_done(e);
}

static void *scheduler_main(void *arg)
{
    ilab_engine *e = arg;
    int cap = e->cfg.max_running + e->cfg.max_waiting + 1;
    request **done = malloc((size_t)cap * sizeof *done);
    request **spawn = malloc((size_t)cap * sizeof *spawn);
    if (!done || !spawn) {
        /* Nothing sane to do without the lists; leave the queue to destroy(). */
        free(done);
        free(spawn);
        return NULL;
    }
    for (;;) {
        int n_done = 0, n_spawn = 0, n_cancelled = 0;
        pthread_mutex_lock(&e->mu);
        while (!work_pending(e))
            pthread_cond_wait(&e->cv, &e->mu);
        bool stopping = e->stopping;
        if (e->backend_sampling)
            reap_workers(e, done, &n_done);
        /* Cancelled while waiting: end them now, not when a slot frees. */
        request **link = &e->wait_head;
        e->wait_tail = NULL;
        while (*link) {
            request *r = *link;
            if (atomic_load(&r->cancel) || stopping) {
                *link = r->next;
                e->n_waiting--;
                ilab_metrics_add_waiting(-1);
                spawn[cap - 1 - n_cancelled++] = r; /* from the end of the array */
            } else {
                e->wait_tail = r;
                link = &r->next;
            }
        }
        while (!stopping && e->wait_head && e->n_running < e->cfg.max_running) {
            request *r = e->wait_head;
            e->wait_head = r->next;
            if (!e->wait_head)
                e->wait_tail = NULL;
            r->next = NULL;
            e->n_waiting--;
            ilab_metrics_add_waiting(-1);
            e->running[e->n_running++] = r;
            ilab_metrics_add_running(1);
            if (e->backend_sampling)
                spawn[n_spawn++] = r;
        }
        bool idle = e->n_running == 0;
        pthread_mutex_unlock(&e->mu);

        for (int i = 0; i < n_cancelled; i++) {
            request *r = spawn[cap - 1 - i];
            emit_terminal(r, ILAB_FINISH_CANCELLED, ILAB_OK, NULL, NULL, 0);
            request_free(r);
        }
        for (int i = 0; i < n_done; i++) {
            pthread_join(done[i]->worker, NULL);
            request_free(done[i]);
        }
        for (int i = 0; i < n_spawn; i++) {
            request *r = spawn[i];
            if (pthread_create(&r->worker, NULL, generate_worker, r) == 0) {
                r->worker_started = true;
            } else {
                pthread_mutex_lock(&e->mu);
                for (int k = 0; k < e->n_running; k++)
                    if (e->running[k] == r) {
                        e->running[k] = e->running[--e->n_running];
                        ilab_metrics_add_running(-1);
                        break;
                    }
                pthread_mutex_unlock(&e->mu);
                emit_terminal(r, ILAB_FINISH_ERROR, ILAB_INTERNAL, "could not start a worker thread",
                              NULL, 0);
                request_free(r);
            }
        }
        if (stopping) {
            if (!e->backend_sampling) {
                /* End what still runs; retire() removes each from the list. */
                for (;;) {
                    pthread_mutex_lock(&e->mu);
                    request *r = e->n_running ? e->running[0] : NULL;
                    pthread_mutex_unlock(&e->mu);
                    if (!r)
                        break;
                    retire(e, r, ILAB_FINISH_CANCELLED, ILAB_OK, NULL, NULL, 0);
                }
                break;
            }
            if (idle)
                break;
            continue; /* workers were cancelled by destroy(); wait for them */
        }
        if (!e->backend_sampling && !idle)
            host_step(e);
    }
    free(done);
    free(spawn);
    return NULL;
}

/* ---- public API ----------------------------------------------------------- */

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
    if (c.max_running < 1 || c.max_waiting < 0 || c.step_token_budget < 1 || c.prefill_chunk < 1) {
        snprintf(err, err_cap,
                 "scheduler: max_running (%d), step_token_budget (%d) and prefill_chunk (%d) must be "
                 ">= 1 and max_waiting (%d) >= 0",
                 c.max_running, c.step_token_budget, c.prefill_chunk, c.max_waiting);
        return ILAB_INVALID_ARGUMENT;
    }
    bool backend_sampling = m->sampling == ILAB_SAMPLING_BACKEND;
    if (!backend_sampling) {
        if (m->logits != ILAB_LOGITS_FULL) {
            snprintf(err, err_cap, "backend '%s' samples on the host but declares no full logits",
                     m->name);
            return ILAB_UNSUPPORTED;
        }
        /* The batch holds one item per running sequence. */
        if (c.max_running > m->max_batch)
            c.max_running = m->max_batch;
        if (c.step_token_budget < c.max_running) {
            snprintf(err, err_cap,
                     "scheduler: step_token_budget (%d) must be >= max_running (%d) so every "
                     "running sequence can decode each step",
                     c.step_token_budget, c.max_running);
            return ILAB_INVALID_ARGUMENT;
        }
    }
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
    e->backend_sampling = backend_sampling;
    e->serialize_all = m->thread_safety != ILAB_THREADS_FULL;
    e->serialize_generate = m->thread_safety == ILAB_THREADS_NONE;
    e->next_id = 1;
    e->info.struct_size = sizeof e->info;
    ilab_status st = e->api->model_info(backend, &e->info);
    if (st != ILAB_OK) {
        char msg[256];
        backend_error(e, msg, sizeof msg);
        snprintf(err, err_cap, "backend '%s' model_info: %s: %s", m->name, ilab_status_name(st), msg);
        free(e);
        return st;
    }
    e->max_context = m->max_context > 0 ? m->max_context : e->info.max_context;
    if (e->info.vocab_size <= 0 || e->max_context <= 0) {
        snprintf(err, err_cap, "backend '%s' reports vocab_size %d and max_context %d; both must be > 0",
                 m->name, e->info.vocab_size, e->max_context);
        free(e);
        return ILAB_INVALID_ARGUMENT;
    }
    atomic_init(&e->eval_calls, 0);
    e->running = calloc((size_t)c.max_running, sizeof *e->running);
    e->items = calloc((size_t)c.max_running, sizeof *e->items);
    e->item_ptrs = calloc((size_t)c.max_running, sizeof *e->item_ptrs);
    e->item_req = calloc((size_t)c.max_running, sizeof *e->item_req);
    e->snapshot = calloc((size_t)c.max_running, sizeof *e->snapshot);
    if (!e->running || !e->items || !e->item_ptrs || !e->item_req || !e->snapshot) {
        snprintf(err, err_cap, "out of memory creating an engine");
        ilab_engine_destroy(e);
        return ILAB_OUT_OF_MEMORY;
    }
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    pthread_mutex_init(&e->backend_mu, NULL);
    if (pthread_create(&e->thread, NULL, scheduler_main, e) != 0) {
        snprintf(err, err_cap, "could not start the scheduler thread");
        pthread_mutex_destroy(&e->mu);
        pthread_cond_destroy(&e->cv);
        pthread_mutex_destroy(&e->backend_mu);
        free(e->running);
        free(e->items);
        free(e->item_ptrs);
        free(e->item_req);
        free(e->snapshot);
        free(e);
        return ILAB_INTERNAL;
    }
    ilab_metrics_add_kv_capacity((int64_t)c.max_running * e->max_context);
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
        pthread_mutex_destroy(&e->mu);
        pthread_cond_destroy(&e->cv);
        pthread_mutex_destroy(&e->backend_mu);
        ilab_metrics_add_kv_capacity(-(int64_t)e->cfg.max_running * e->max_context);
    }
    free(e->running);
    free(e->items);
    free(e->item_ptrs);
    free(e->item_req);
    free(e->snapshot);
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
    request *r = NULL;
    ilab_status st = build_request(e, req, err, err_cap, &r);
    if (st != ILAB_OK)
        return st;
    r->on_event = on_event;
    r->user_data = user_data;
    r->metrics_out = metrics;
    r->t_submit = now_ns();

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
        request_free(r);
        return ILAB_UNAVAILABLE;
    }
    r->id = e->next_id++;
    if (e->wait_tail)
        e->wait_tail->next = r;
    else
        e->wait_head = r;
    e->wait_tail = r;
    e->n_waiting++;
    ilab_metrics_add_waiting(1);
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
    for (request *r = e->wait_head; r && !found; r = r->next)
        if (r->id == request_id) {
            atomic_store(&r->cancel, 1);
            found = true;
        }
    for (int i = 0; i < e->n_running && !found; i++) {
        request *r = e->running[i];
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

uint64_t ilab_engine_eval_calls(const ilab_engine *e)
{
    return e ? atomic_load(&((ilab_engine *)e)->eval_calls) : 0;
}

const ilab_model_info_t *ilab_engine_model_info(const ilab_engine *e) { return &e->info; }

int32_t ilab_engine_max_context(const ilab_engine *e) { return e->max_context; }

/* ---- the tokenizer from other threads ------------------------------------ */

ilab_status ilab_engine_with_backend(ilab_engine *e, ilab_engine_backend_fn fn, void *ctx)
{
    if (!e || !fn)
        return ILAB_INVALID_ARGUMENT;
    lock_backend(e, e->serialize_all);
    ilab_status st = fn(ctx, e->api, e->backend);
    unlock_backend(e, e->serialize_all);
    return st;
}

typedef struct tokenize_call {
    const char *text;
    size_t len;
    uint32_t flags;
    int32_t *tokens;
    size_t n;
    char *err;
    size_t err_cap;
} tokenize_call;

/* Two tries: the first with a guess, the second with the size the backend
 * asked for. The backend's message is read under the same lock. */
static ilab_status tokenize_locked(void *ctx, const ilab_backend_api_t *api, ilab_backend_t *b)
{
    tokenize_call *c = ctx;
    size_t cap = c->len + 8;
    ilab_status st = ILAB_BUFFER_TOO_SMALL;
    for (int attempt = 0; attempt < 2 && st == ILAB_BUFFER_TOO_SMALL; attempt++) {
        int32_t *grown = realloc(c->tokens, (cap ? cap : 1) * sizeof *grown);
        if (!grown) {
            snprintf(c->err, c->err_cap, "out of memory for %zu token ids", cap);
            return ILAB_OUT_OF_MEMORY;
        }
        c->tokens = grown;
        st = api->tokenize(b, c->text, c->len, c->flags, c->tokens, cap, &c->n);
        if (st == ILAB_BUFFER_TOO_SMALL)
            cap = c->n;
    }
    if (st == ILAB_BUFFER_TOO_SMALL)
        snprintf(c->err, c->err_cap, "tokenize kept asking for a larger buffer");
    else if (st != ILAB_OK)
        api->last_error(b, c->err, c->err_cap);
    return st;
}

ilab_status ilab_engine_tokenize(ilab_engine *e, const char *text, size_t len, uint32_t flags,
                                 char *err, size_t err_cap, int32_t **tokens, size_t *n_tokens)
{
    if (err && err_cap)
        err[0] = '\0';
    if (!e || (!text && len) || !tokens || !n_tokens || !err || !err_cap)
        return ILAB_INVALID_ARGUMENT;
    tokenize_call c = {.text = text, .len = len, .flags = flags, .err = err, .err_cap = err_cap};
    ilab_status st = ilab_engine_with_backend(e, tokenize_locked, &c);
    if (st != ILAB_OK) {
        free(c.tokens);
        c.tokens = NULL;
        c.n = 0;
    }
    *tokens = c.tokens;
    *n_tokens = c.n;
    return st;
}

typedef struct detokenize_call {
    const int32_t *tokens;
    size_t n;
    char *text;
    size_t len;
    char *err;
    size_t err_cap;
} detokenize_call;

static ilab_status detokenize_locked(void *ctx, const ilab_backend_api_t *api, ilab_backend_t *b)
{
    detokenize_call *c = ctx;
    size_t cap = c->n * 16 + 16;
    ilab_status st = ILAB_BUFFER_TOO_SMALL;
    for (int attempt = 0; attempt < 2 && st == ILAB_BUFFER_TOO_SMALL; attempt++) {
        char *grown = realloc(c->text, cap);
        if (!grown) {
            snprintf(c->err, c->err_cap, "out of memory for %zu bytes of text", cap);
            return ILAB_OUT_OF_MEMORY;
        }
        c->text = grown;
        st = api->detokenize(b, c->tokens, c->n, c->text, cap, &c->len);
        if (st == ILAB_BUFFER_TOO_SMALL)
            cap = c->len + 1;
    }
    if (st == ILAB_BUFFER_TOO_SMALL)
        snprintf(c->err, c->err_cap, "detokenize kept asking for a larger buffer");
    else if (st != ILAB_OK)
        api->last_error(b, c->err, c->err_cap);
    return st;
}

ilab_status ilab_engine_detokenize(ilab_engine *e, const int32_t *tokens, size_t n_tokens,
                                   char *err, size_t err_cap, char **text, size_t *text_len)
{
    if (err && err_cap)
        err[0] = '\0';
    if (!e || (!tokens && n_tokens) || !text || !text_len || !err || !err_cap)
        return ILAB_INVALID_ARGUMENT;
    detokenize_call c = {.tokens = tokens, .n = n_tokens, .err = err, .err_cap = err_cap};
    ilab_status st = ilab_engine_with_backend(e, detokenize_locked, &c);
    if (st != ILAB_OK) {
        free(c.text);
        c.text = NULL;
        c.len = 0;
    }
    *text = c.text;
    *text_len = c.len;
    return st;
}
