/* POST /v1/completions and /v1/chat/completions: parse, check against the
 * backend's manifest, submit to the engine, then either wait for the whole
 * answer or stream it as Server-Sent Events.
 *
 * Threads: the handler and the SSE reader run on the connection's thread
 * (libmicrohttpd, one thread per connection); engine events arrive on the
 * scheduler thread and cross over through an ilab_pending queue. While it
 * waits, the connection thread watches its socket: a client that hangs up
 * gets its request cancelled (ilab_engine_cancel), which frees the sequence. */
#include "server_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "openai_response.h"

/* How long the connection thread waits for an event before it looks at its
 * socket and at the shutdown flags again. */
#define WAIT_SLICE_MS 100
/* After a cancel, how long to wait for the engine's terminal event. */
#define CANCEL_WAIT_NS (5ull * 1000000000ull)

#define JSON_FLAGS (JSON_COMPACT | JSON_REAL_PRECISION(7))

typedef struct generation {
    ilab_server *s;
    ilab_pending *p;
    struct MHD_Connection *conn;
    ilab_api_kind kind;
    bool stream, include_usage, logprobs, trim_leading_space;
    int32_t top_logprobs;
    char id[64];
    ilab_response_head head;

    bool saw_text;          /* a non-empty delta went out (leading-space trim) */
    size_t text_offset;     /* bytes of completion text so far (logprobs text_offset) */
    bool cancel_sent;
    uint64_t cancel_at_ns;

    /* streaming: the bytes of formatted chunks not yet handed to MHD */
    char *out;
    size_t out_len, out_off, out_cap;
    bool role_sent;         /* chat: the first chunk carries the role */
    bool done;              /* [DONE] is queued */
} generation;

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Scheduler thread, terminal event: the request left the engine. */
static void on_engine_done(void *ctx, const ilab_event_t *ev)
{
    ilab_server *s = ctx;
    pthread_mutex_lock(&s->stats_mu);
    s->inflight--;
    if (ev->type == ILAB_EVENT_ERROR)
        s->errors++;
    else if (ev->finish_reason >= ILAB_FINISH_STOP && ev->finish_reason <= ILAB_FINISH_ERROR)
        s->finished_by_reason[ev->finish_reason]++;
    pthread_cond_broadcast(&s->stats_cond);
    pthread_mutex_unlock(&s->stats_mu);
}

static void generation_free(generation *g)
{
    ilab_server *s = g->s;
    bool finished = ilab_pending_finished(g->p);
    if (!finished)
        ilab_engine_cancel(s->be.engine, ilab_pending_id(g->p));
    ilab_pending_abandon(g->p);
    pthread_mutex_lock(&s->stats_mu);
    s->active_generations--;
    if (!finished && !g->cancel_sent)
        s->disconnects++;
    pthread_cond_broadcast(&s->stats_cond);
    pthread_mutex_unlock(&s->stats_mu);
    free(g->out);
    free(g);
}

static void cancel_once(generation *g)
{
    if (g->cancel_sent)
        return;
    g->cancel_sent = true;
    g->cancel_at_ns = mono_ns();
    ilab_engine_cancel(g->s->be.engine, ilab_pending_id(g->p));
}

/* Between events: should we stop waiting? Returns true when the wait is
 * over for good (client gone, or the engine did not answer a cancel). */
static bool check_abort(generation *g)
{
    if (ilab_server_client_gone(g->conn))
        return true;
    if (atomic_load(&g->s->cancel_all))
        cancel_once(g);
    return g->cancel_sent && mono_ns() - g->cancel_at_ns > CANCEL_WAIT_NS;
}

/* The delta text of a TOKEN event, with the chat reply's leading space
 * dropped (the template ends in "assistant:"; the model writes " Hello"). */
static void delta_text(generation *g, const ilab_pending_event *ev, const char **text,
                       size_t *len)
{
    *text = ev->text;
    *len = ev->text_len;
    if (g->trim_leading_space && !g->saw_text && *len > 0 && (*text)[0] == ' ') {
        (*text)++;
        (*len)--;
    }
    if (*len > 0)
        g->saw_text = true;
}

static json_t *event_logprobs(generation *g, const ilab_pending_event *ev)
{
    if (!g->logprobs)
        return NULL;
    return ilab_token_logprobs_json(g->kind, &g->s->vocab, ev, g->top_logprobs,
                                    g->text_offset);
}

/* --- building the request ------------------------------------------------ */

static bool check_request(ilab_server *s, const ilab_api_request *r, ilab_api_error *e)
{
    const char *plugin_name = ilab_plugin_entry_of(s->be.plugin)->name;
    if (r->model && strcmp(r->model, s->model_id) && strcmp(r->model, plugin_name))
        return ilab_api_fail(e, 404, "model", "model '%s' does not exist; this server serves "
                             "'%s'", r->model, s->model_id);
    const ilab_manifest *m = ilab_plugin_manifest(s->be.plugin);
    if (r->logprobs && m->logits == ILAB_LOGITS_NONE)
        return ilab_api_fail(e, 400, "logprobs", "backend '%s' cannot report logprobs: its "
                             "manifest declares logits: none", plugin_name);
    if (r->top_logprobs > m->topk_max)
        return ilab_api_fail(e, 400, r->kind == ILAB_API_CHAT ? "top_logprobs" : "logprobs",
                             "backend '%s' reports at most %d alternatives per token "
                             "(capability topk_max), %d were asked for",
                             plugin_name, m->topk_max, r->top_logprobs);
    for (size_t i = 0; i < r->n_prompt_tokens; i++)
        if (r->prompt_tokens[i] >= s->info.vocab_size)
            return ilab_api_fail(e, 400, "prompt", "'prompt[%zu]' = %d is not a token id of "
                                 "this model (vocabulary size %d)", i, r->prompt_tokens[i],
                                 s->info.vocab_size);
    for (size_t i = 0; i < r->n_stop_token_ids; i++)
        if (r->stop_token_ids[i] >= s->info.vocab_size)
            return ilab_api_fail(e, 400, "stop_token_ids", "'stop_token_ids[%zu]' = %d is "
                                 "not a token id of this model (vocabulary size %d)", i,
                                 r->stop_token_ids[i], s->info.vocab_size);
    return true;
}

/* Submit; on refusal `e` says why (overload -> 503 + Retry-After). */
static generation *submit(ilab_server *s, struct MHD_Connection *c, const ilab_api_request *r,
                          ilab_api_error *e)
{
    ilab_request req = {0};
    if (r->prompt) {
        req.prompt_text = r->prompt;
        req.prompt_len = strlen(r->prompt);
        req.add_bos = true;
    } else {
        req.prompt_tokens = r->prompt_tokens;
        req.n_prompt_tokens = r->n_prompt_tokens;
    }
    req.sampling = r->sampling;
    /* No max_tokens: the context is the limit (the engine ends with "length"). */
    req.max_tokens = r->max_tokens > 0 ? r->max_tokens : s->info.max_context;
    req.stop = (const char *const *)r->stop;
    req.n_stop = r->n_stop;
    req.stop_token_ids = r->stop_token_ids;
    req.n_stop_token_ids = r->n_stop_token_ids;
    req.ignore_eos = r->ignore_eos;
    req.top_logprobs = r->logprobs ? r->top_logprobs : 0;

    generation *g = calloc(1, sizeof *g);
    ilab_pending *p = g ? ilab_pending_new(on_engine_done, s) : NULL;
    if (!p) {
        free(g);
        ilab_api_fail(e, 500, NULL, "out of memory");
        return NULL;
    }
    g->s = s;
    g->p = p;
    g->conn = c;
    g->kind = r->kind;
    g->stream = r->stream;
    g->include_usage = r->include_usage;
    g->logprobs = r->logprobs;
    g->top_logprobs = r->top_logprobs;
    g->trim_leading_space = r->trim_leading_space;

    pthread_mutex_lock(&s->stats_mu);
    s->inflight++; /* before submit: the terminal event may beat submit()'s return */
    s->active_generations++;
    unsigned long long seq = ++s->next_id;
    pthread_mutex_unlock(&s->stats_mu);

    char err[512] = "";
    uint64_t id = 0;
    ilab_status st = ilab_engine_submit(s->be.engine, &req, ilab_pending_on_event, p, err,
                                        sizeof err, &id);
    if (st != ILAB_OK) {
        ilab_api_error_from_status(e, st, err);
        pthread_mutex_lock(&s->stats_mu);
        s->inflight--;
        pthread_mutex_unlock(&s->stats_mu);
        ilab_pending_refused(p);
        /* The connection side was never used: nothing to cancel, no disconnect. */
        g->cancel_sent = true;
        ilab_pending_abandon(p);
        pthread_mutex_lock(&s->stats_mu);
        s->active_generations--;
        pthread_cond_broadcast(&s->stats_cond);
        pthread_mutex_unlock(&s->stats_mu);
        free(g);
        return NULL;
    }
    ilab_pending_set_id(p, id);
    snprintf(g->id, sizeof g->id, "%s-%lx%04llx", r->kind == ILAB_API_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long)s->started, seq);
    g->head.kind = r->kind;
    g->head.id = g->id;
    g->head.created = time(NULL);
    g->head.model = s->model_id;
    return g;
}

/* --- non-streaming ------------------------------------------------------- */

static enum MHD_Result respond_whole(generation *g)
{
    ilab_server *s = g->s;
    char *text = NULL;
    size_t text_len = 0;
    FILE *acc = open_memstream(&text, &text_len);
    ilab_logprobs_acc lps = {0};
    if (g->logprobs)
        ilab_logprobs_acc_init(&lps, g->kind);
    ilab_pending_event *term = NULL;
    while (!term) {
        ilab_pending_event *ev = ilab_pending_next(g->p, WAIT_SLICE_MS);
        if (!ev) {
            if (check_abort(g))
                break;
            continue;
        }
        const char *t;
        size_t n;
        if (ev->type != ILAB_EVENT_TOKEN) {
            /* FINISH may carry the held-back tail of the text. */
            if (ev->type == ILAB_EVENT_FINISH) {
                delta_text(g, ev, &t, &n);
                if (acc && n)
                    fwrite(t, 1, n, acc);
            }
            term = ev;
            break;
        }
        delta_text(g, ev, &t, &n);
        if (g->logprobs)
            ilab_logprobs_acc_add(&lps, g->kind, event_logprobs(g, ev));
        if (acc && n)
            fwrite(t, 1, n, acc);
        g->text_offset += n;
        ilab_pending_event_free(ev);
    }
    if (acc)
        fclose(acc);
    enum MHD_Result ret;
    if (!term) {
        /* The client left (nothing to answer) or the engine never answered a cancel. */
        json_decref(lps.root);
        free(text);
        if (g->cancel_sent) {
            ilab_api_error e;
            ilab_api_fail(&e, 503, NULL, "the server is shutting down and the request was "
                                         "cancelled");
            ret = ilab_server_send_error(s, g->conn, &e);
        } else {
            ret = MHD_NO;
        }
    } else if (term->type == ILAB_EVENT_ERROR) {
        json_decref(lps.root);
        free(text);
        ilab_api_error e;
        ilab_api_error_from_status(&e, term->status, term->message);
        ret = ilab_server_send_error(s, g->conn, &e);
    } else {
        json_t *body = ilab_response_json(&g->head, ilab_json_text(text, text ? text_len : 0),
                                          lps.root, term->finish_reason, term->prompt_tokens,
                                          term->completion_tokens);
        free(text);
        ret = ilab_server_send(s, g->conn, 200, "application/json",
                               body ? json_dumps(body, JSON_FLAGS) : NULL);
        json_decref(body);
    }
    ilab_pending_event_free(term);
    generation_free(g);
    return ret;
}

/* --- streaming ------------------------------------------------------------ */

static bool out_append(generation *g, const char *data, size_t len)
{
    if (g->out_len + len > g->out_cap) {
        size_t cap = (g->out_len + len) * 2 + 256;
        char *grown = realloc(g->out, cap);
        if (!grown)
            return false;
        g->out = grown;
        g->out_cap = cap;
    }
    memcpy(g->out + g->out_len, data, len);
    g->out_len += len;
    return true;
}

/* Queue one SSE event: "data: <json>\n\n". Takes `chunk`. */
static bool out_event(generation *g, json_t *chunk)
{
    char *json = chunk ? json_dumps(chunk, JSON_FLAGS) : NULL;
    json_decref(chunk);
    if (!json)
        return false;
    bool ok = out_append(g, "data: ", 6) && out_append(g, json, strlen(json)) &&
              out_append(g, "\n\n", 2);
    free(json);
    return ok;
}

static bool format_event(generation *g, ilab_pending_event *ev)
{
    bool ok = true;
    if (ev->type == ILAB_EVENT_TOKEN) {
        const char *t;
        size_t n;
        delta_text(g, ev, &t, &n);
        /* A token whose bytes are held back (half a code point) has no text
         * yet; it gets a chunk only when its logprobs were asked for. */
        if (n > 0 || g->logprobs) {
            json_t *lp = event_logprobs(g, ev);
            if (lp && g->kind == ILAB_API_CHAT)
                lp = json_pack("{s:[o]}", "content", lp);
            ok = out_event(g, ilab_chunk_json(&g->head, false, ilab_json_text(t, n), lp,
                                              ILAB_FINISH_NONE, g->include_usage));
        }
        g->text_offset += n;
    } else if (ev->type == ILAB_EVENT_FINISH) {
        /* The held-back tail (if any) rides on the finish chunk. */
        const char *t;
        size_t n;
        delta_text(g, ev, &t, &n);
        ok = out_event(g, ilab_chunk_json(&g->head, false, n ? ilab_json_text(t, n) : NULL,
                                          NULL, ev->finish_reason, g->include_usage));
        g->text_offset += n;
        if (ok && g->include_usage)
            ok = out_event(g, ilab_usage_chunk_json(&g->head, ev->prompt_tokens,
                                                    ev->completion_tokens));
    } else {
        /* Headers (200) are long gone: the error travels in the stream. */
        ilab_api_error e;
        ilab_api_error_from_status(&e, ev->status, ev->message);
        char *body = ilab_api_error_json(&e);
        ok = body && out_append(g, "data: ", 6) && out_append(g, body, strlen(body)) &&
             out_append(g, "\n\n", 2);
        free(body);
    }
    if (ok && ev->type != ILAB_EVENT_TOKEN) {
        ok = out_append(g, "data: [DONE]\n\n", 14);
        g->done = true;
    }
    return ok;
}

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    generation *g = cls;
    (void)pos;
    for (;;) {
        if (g->out_off < g->out_len) {
            size_t n = g->out_len - g->out_off;
            if (n > max)
                n = max;
            memcpy(buf, g->out + g->out_off, n);
            g->out_off += n;
            return (ssize_t)n;
        }
        g->out_len = g->out_off = 0;
        if (g->done)
            return MHD_CONTENT_READER_END_OF_STREAM;
        if (g->kind == ILAB_API_CHAT && !g->role_sent) {
            g->role_sent = true;
            if (!out_event(g, ilab_chunk_json(&g->head, true, NULL, NULL, ILAB_FINISH_NONE,
                                              g->include_usage)))
                return MHD_CONTENT_READER_END_WITH_ERROR;
            continue;
        }
        ilab_pending_event *ev = ilab_pending_next(g->p, WAIT_SLICE_MS);
        if (!ev) {
            if (check_abort(g))
                return MHD_CONTENT_READER_END_WITH_ERROR;
            continue;
        }
        bool ok = format_event(g, ev);
        ilab_pending_event_free(ev);
        if (!ok)
            return MHD_CONTENT_READER_END_WITH_ERROR;
    }
}

static void sse_free(void *cls)
{
    generation_free(cls);
}

static enum MHD_Result respond_stream(generation *g)
{
    ilab_server *s = g->s;
    struct MHD_Connection *c = g->conn;
    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, sse_read, g, sse_free);
    if (!r) {
        generation_free(g);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    enum MHD_Result ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r); /* sse_free runs when the connection lets go */
    ilab_server_count_status(s, 200);
    return ret;
}

enum MHD_Result ilab_server_generate(ilab_server *s, struct MHD_Connection *c,
                                     ilab_api_kind kind, const char *body, size_t len)
{
    ilab_api_error e;
    if (!s->be.engine || s->be.unavailable_reason) {
        ilab_api_fail(&e, 503, NULL, "backend unavailable: %s",
                      s->be.unavailable_reason ? s->be.unavailable_reason : "not started");
        return ilab_server_send_error(s, c, &e);
    }
    if (atomic_load(&s->draining)) {
        ilab_api_fail(&e, 503, NULL, "the server is shutting down");
        return ilab_server_send_error(s, c, &e);
    }
    ilab_api_request r;
    if (!ilab_api_request_parse(kind, body, len, &r, &e))
        return ilab_server_send_error(s, c, &e);
    generation *g = NULL;
    if (check_request(s, &r, &e))
        g = submit(s, c, &r, &e);
    ilab_api_request_free(&r);
    if (!g)
        return ilab_server_send_error(s, c, &e);
    return g->stream ? respond_stream(g) : respond_whole(g);
}
