/* POST /v1/completions and /v1/chat/completions: parse, check against the
 * backend's manifest, submit one engine request per choice (`n`), then
 * answer with the whole response or stream it as Server-Sent Events.
 *
 * Threads: nothing here blocks a libmicrohttpd thread. Engine events arrive
 * on the scheduler thread and cross over through an ilab_pending queue;
 * when it is empty the connection is suspended (parked) and the next event
 * resumes it. A suspended socket is not watched by libmicrohttpd, so the
 * connection monitor (conn_monitor.c) watches it for a hang-up and cancels
 * the request at once (ilab_engine_cancel), tokens flowing or not. */
#include "server_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_desk.h"
#include "chat_setup.h"
#include "openai_response.h"
#include "sglang_request.h"
#include "sglang_response.h"
#include "bytes.h"

#define JSON_FLAGS (JSON_COMPACT | JSON_REAL_PRECISION(7))

/* Per choice: what has been said so far. */
typedef struct choice_state {
    bool saw_text;          /* a non-empty delta went out (leading-space trim) */
    size_t text_offset;     /* where the next token's text starts (logprobs text_offset) */
    bool had_token;         /* text_offset has counted a token */
    char *text;             /* non-streaming: the accumulated text */
    size_t text_len, text_cap;
    ilab_logprobs_acc lps;  /* non-streaming, with logprobs */
    json_t *token_ids;      /* non-streaming, with return_token_ids */
    ilab_sglang_output sg;  /* SGLang's /generate: the output so far (text in `text`) */
    ilab_finish_reason finish;
    uint32_t completion_tokens;
} choice_state;

struct ilab_generation {
    ilab_server *s;
    ilab_served *v;         /* the backend version it runs on (a reference) */
    ilab_pending *p;
    struct MHD_Connection *conn;
    uint64_t watch_id;      /* the connection monitor's hang-up watch */
    ilab_api_kind kind;
    bool stream, include_usage, logprobs, trim_leading_space;
    bool return_token_ids, tokens_as_ids;
    bool health_only;       /* SGLang's /health_generate: answer 200, not the output */
    int32_t top_logprobs;
    uint32_t n;             /* choices */
    uint32_t n_submitted;   /* handed to the engine so far (see submit_rest) */
    ilab_api_request r;     /* owned: the engine requests borrow its strings */
    bool submit_failed;     /* a later choice was refused: */
    ilab_api_error submit_error; /* why */
    uint32_t prompt_tokens;
    char id[64];
    ilab_response_head head;
    atomic_bool client_gone; /* set on the monitor thread */
    atomic_bool aborted;     /* shutdown gave up waiting for the engine */
    ilab_pending_event *error; /* non-streaming: the first ERROR event */
    ilab_generation *prev, *next; /* the server's list of live generations */

    /* streaming: the bytes of formatted chunks not yet handed to MHD */
    char *out;
    size_t out_len, out_off, out_cap;
    bool roles_sent;        /* chat: each choice's first chunk carries the role */
    bool submit_error_sent;
    bool done;              /* [DONE] is queued */
    choice_state ch[];
};

/* Scheduler thread, terminal event: one choice left the engine. `ctx` is
 * the backend's slot, which outlives every engine. */
static void on_engine_done(void *ctx, const ilab_event_t *ev)
{
    ilab_slot *k = ctx;
    ilab_server *s = k->s;
    pthread_mutex_lock(&s->stats_mu);
    s->inflight--;
    k->inflight--;
    /* An error event ends its request as reason "error", as the engine's
     * own counters count it (inferlab:request_success_total). */
    ilab_finish_reason reason = ev->type == ILAB_EVENT_ERROR ? ILAB_FINISH_ERROR
                                                             : ev->finish_reason;
    if (ev->type == ILAB_EVENT_ERROR) {
        s->errors++;
        k->errors++;
    }
    if (reason >= ILAB_FINISH_STOP && reason <= ILAB_FINISH_ERROR) {
        s->finished_by_reason[reason]++;
        k->finished_by_reason[reason]++;
        k->prompt_tokens += ev->prompt_tokens;
        k->generation_tokens += ev->completion_tokens;
    }
    pthread_cond_broadcast(&s->stats_cond);
    pthread_mutex_unlock(&s->stats_mu);
}

static void park(void *ctx)
{
    MHD_suspend_connection(ctx);
}

static void wake(void *ctx)
{
    MHD_resume_connection(ctx);
}

static void generation_cancel(ilab_generation *g)
{
    for (uint32_t i = 0; i < g->n; i++)
        if (!ilab_pending_choice_finished(g->p, i))
            ilab_engine_cancel(g->v->be.engine, ilab_pending_id(g->p, i));
}

int ilab_server_end_generations(ilab_server *s, bool abort)
{
    int n = 0;
    atomic_store(&s->cancelling, true); /* no staged choice starts from now on */
    pthread_mutex_lock(&s->stats_mu); /* keeps every listed generation alive */
    for (ilab_generation *g = s->generations; g; g = g->next, n++) {
        generation_cancel(g);
        if (abort) {
            atomic_store(&g->aborted, true);
            ilab_pending_unpark(g->p);
        }
    }
    pthread_mutex_unlock(&s->stats_mu);
    return n;
}

/* Monitor thread: the client hung up. Cancel now; wake the connection so it
 * is closed (the engine's FINISH would wake it too, one step later). */
static void on_client_gone(void *ctx)
{
    ilab_generation *g = ctx;
    if (atomic_exchange(&g->client_gone, true))
        return;
    bool finished = ilab_pending_finished(g->p);
    if (!finished) {
        pthread_mutex_lock(&g->s->stats_mu);
        g->s->disconnects++;
        pthread_mutex_unlock(&g->s->stats_mu);
    }
    generation_cancel(g);
    ilab_pending_unpark(g->p);
}

static void generation_free(ilab_generation *g)
{
    ilab_server *s = g->s;
    ilab_conn_unwatch(s->monitor, g->watch_id);
    /* Choices never handed to the engine hold its side's reference. */
    for (uint32_t j = g->n_submitted; j < g->n; j++)
        ilab_pending_refused(g->p, j);
    g->n_submitted = g->n;
    if (!ilab_pending_finished(g->p)) {
        /* The connection closed before the answer ended and neither the
         * monitor nor shutdown said why: libmicrohttpd found the peer gone
         * when a send failed, which can beat the monitor's report. */
        bool by_server = atomic_load(&g->aborted) || atomic_load(&s->cancelling);
        if (!atomic_exchange(&g->client_gone, true) && !by_server) {
            pthread_mutex_lock(&s->stats_mu);
            s->disconnects++;
            pthread_mutex_unlock(&s->stats_mu);
        }
        generation_cancel(g);
    }
    ilab_pending_abandon(g->p);
    pthread_mutex_lock(&s->stats_mu);
    if (g->prev)
        g->prev->next = g->next;
    else if (s->generations == g)
        s->generations = g->next;
    if (g->next)
        g->next->prev = g->prev;
    s->active_generations--;
    pthread_cond_broadcast(&s->stats_cond);
    pthread_mutex_unlock(&s->stats_mu);
    for (uint32_t i = 0; i < g->n; i++) {
        free(g->ch[i].text);
        json_decref(g->ch[i].lps.root);
        json_decref(g->ch[i].token_ids);
        ilab_sglang_output_free(&g->ch[i].sg);
    }
    ilab_api_request_free(&g->r);
    ilab_pending_event_free(g->error);
    free(g->out);
    ilab_served_release(g->v);
    free(g);
}

/* The delta text of an event, with the chat reply's leading space dropped
 * (the template ends in "assistant:"; the model writes " Hello"). */
static void delta_text(ilab_generation *g, const ilab_pending_event *ev, const char **text,
                       size_t *len)
{
    choice_state *c = &g->ch[ev->index];
    *text = ev->text;
    *len = ev->text_len;
    if (g->trim_leading_space && !c->saw_text && *len > 0 && (*text)[0] == ' ') {
        (*text)++;
        (*len)--;
    }
    if (*len > 0)
        c->saw_text = true;
}

/* Move text_offset past the token of `ev`: its piece's bytes, whether or not
 * its text was released yet (a stop string's prefix is held back), less
 * what the start of the text dropped of the first token (the tokenizer's
 * dummy-prefix space, or the trimmed leading space). `released`: the text
 * this event released (`n` bytes at `released`), after the trim. */
static void advance_offset(ilab_generation *g, choice_state *c, const ilab_pending_event *ev,
                           const char *released, size_t n)
{
    const ilab_token_text *tt = &g->v->vocab;
    if (ev->token < 0 || ev->token >= tt->n)
        return;
    size_t len = tt->lens[ev->token];
    if (!c->had_token && len > 0 && tt->pieces[ev->token][0] == ' ') {
        bool dropped = n > 0 ? released[0] != ' ' : g->trim_leading_space;
        len -= dropped;
    }
    c->text_offset += len;
    c->had_token = true;
}

static json_t *event_logprobs(ilab_generation *g, const ilab_pending_event *ev)
{
    if (!g->logprobs)
        return NULL;
    return ilab_token_logprobs_json(g->kind, &g->v->vocab, ev, g->top_logprobs,
                                    g->ch[ev->index].text_offset, g->tokens_as_ids);
}

/* --- building the request ------------------------------------------------ */

static bool check_request(const ilab_served *v, const ilab_api_request *r, ilab_api_error *e)
{
    const char *plugin_name = ilab_plugin_entry_of(v->be.plugin)->name;
    const ilab_manifest *m = ilab_plugin_manifest(v->be.plugin);
    if (r->logprobs && m->logits == ILAB_LOGITS_NONE)
        return ilab_api_fail(e, 400, "logprobs", "backend '%s' cannot report logprobs: its "
                             "manifest declares logits: none", plugin_name);
    if (r->top_logprobs > m->topk_max)
        return ilab_api_fail(e, 400, r->kind == ILAB_API_CHAT ? "top_logprobs" : "logprobs",
                             "backend '%s' reports at most %d alternatives per token "
                             "(capability topk_max), %d were asked for",
                             plugin_name, m->topk_max, r->top_logprobs);
    for (size_t i = 0; i < r->n_prompt_tokens; i++)
        if (r->prompt_tokens[i] >= v->info.vocab_size)
            return ilab_api_fail(e, 400, "prompt", "'prompt[%zu]' = %d is not a token id of "
                                 "this model (vocabulary size %d)", i, r->prompt_tokens[i],
                                 v->info.vocab_size);
    for (size_t i = 0; i < r->n_stop_token_ids; i++)
        if (r->stop_token_ids[i] >= v->info.vocab_size)
            return ilab_api_fail(e, 400, "stop_token_ids", "'stop_token_ids[%zu]' = %d is "
                                 "not a token id of this model (vocabulary size %d)", i,
                                 r->stop_token_ids[i], v->info.vocab_size);
    return true;
}

static void engine_request(const ilab_served *v, const ilab_api_request *r, ilab_request *req)
{
    memset(req, 0, sizeof *req);
    if (r->prompt) {
        req->prompt_text = r->prompt;
        req->prompt_len = strlen(r->prompt);
        req->add_bos = true;
    } else {
        req->prompt_tokens = r->prompt_tokens;
        req->n_prompt_tokens = r->n_prompt_tokens;
    }
    req->sampling = r->sampling;
    /* No max_tokens: the context is the limit (the engine ends with "length"). */
    req->max_tokens = r->max_tokens > 0 ? r->max_tokens : v->info.max_context;
    req->stop = (const char *const *)r->stop;
    req->n_stop = r->n_stop;
    req->stop_token_ids = r->stop_token_ids;
    req->n_stop_token_ids = r->n_stop_token_ids;
    req->ignore_eos = r->ignore_eos;
    req->top_logprobs = r->logprobs ? r->top_logprobs : 0;
}

/* Takes the reference on `v` (also on failure). */
static ilab_generation *generation_new(ilab_server *s, ilab_served *v, struct MHD_Connection *c,
                                       const ilab_api_request *r)
{
    uint32_t n = r->n > 0 ? (uint32_t)r->n : 1;
    ilab_generation *g = calloc(1, sizeof *g + n * sizeof g->ch[0]);
    if (!g) {
        ilab_served_release(v);
        return NULL;
    }
    ilab_pending_waker waker = {.park = park, .wake = wake, .ctx = c};
    g->p = ilab_pending_new(n, on_engine_done, v->slot, &waker);
    if (!g->p) {
        ilab_served_release(v);
        free(g);
        return NULL;
    }
    g->s = s;
    g->v = v;
    g->conn = c;
    g->n = n;
    g->kind = r->kind;
    g->stream = r->stream;
    g->include_usage = r->include_usage;
    g->logprobs = r->logprobs;
    g->top_logprobs = r->top_logprobs;
    g->trim_leading_space = r->trim_leading_space;
    g->return_token_ids = r->return_token_ids;
    g->tokens_as_ids = r->tokens_as_ids;
    atomic_init(&g->client_gone, false);
    atomic_init(&g->aborted, false);
    for (uint32_t i = 0; i < n; i++) {
        if (g->logprobs && !g->stream)
            ilab_logprobs_acc_init(&g->ch[i].lps, g->kind);
        if (g->return_token_ids && !g->stream)
            g->ch[i].token_ids = json_array();
        if (g->kind == ILAB_API_SGLANG)
            ilab_sglang_output_init(&g->ch[i].sg, g->logprobs);
    }
    pthread_mutex_lock(&s->stats_mu);
    s->active_generations++;
    g->next = s->generations;
    if (g->next)
        g->next->prev = g;
    s->generations = g;
    unsigned long long seq = ++s->next_id;
    pthread_mutex_unlock(&s->stats_mu);
    if (r->kind == ILAB_API_SGLANG) /* SGLang's ids are bare hex */
        snprintf(g->id, sizeof g->id, "%lx%04llx", (unsigned long)s->started, seq);
    else
        snprintf(g->id, sizeof g->id, "%s-%lx%04llx", r->kind == ILAB_API_CHAT ? "chatcmpl" : "cmpl",
                 (unsigned long)s->started, seq);
    g->head.kind = r->kind;
    g->head.id = g->id;
    g->head.created = time(NULL);
    g->head.model = v->model_id;
    return g;
}

/* Hand choice `i` to the engine; choice i samples with seed + i. On
 * refusal `e` says why (overload -> 503 + Retry-After) and the choice is
 * counted as ended. */
static bool submit_one(ilab_generation *g, uint32_t i, ilab_api_error *e)
{
    ilab_server *s = g->s;
    ilab_request req;
    engine_request(g->v, &g->r, &req);
    req.sampling.seed = g->r.sampling.seed + i;
    pthread_mutex_lock(&s->stats_mu);
    s->inflight++; /* before submit: the terminal event may beat submit()'s return */
    g->v->slot->inflight++;
    pthread_mutex_unlock(&s->stats_mu);
    char err[512] = "";
    uint64_t id = 0;
    ilab_status st = ilab_engine_submit(g->v->be.engine, &req, ilab_pending_on_event,
                                        ilab_pending_choice(g->p, i), err, sizeof err, &id);
    g->n_submitted = i + 1;
    if (st != ILAB_OK) {
        ilab_served_error(g->v, st, err, e);
        pthread_mutex_lock(&s->stats_mu);
        s->inflight--;
        g->v->slot->inflight--;
        pthread_mutex_unlock(&s->stats_mu);
        ilab_pending_refused(g->p, i);
        return false;
    }
    ilab_pending_set_id(g->p, i, id);
    return true;
}

/* Choices 1..n-1 of a backend that can fork its cache go in once choice 0
 * has been prefilled (its first event): the engine's prefix cache then
 * holds the prompt, and each of them forks it instead of prefilling again.
 * Without cache.fork they go in at once and prefill separately. HTTP side. */
static void submit_rest(ilab_generation *g)
{
    while (g->n_submitted < g->n) {
        ilab_api_error e;
        if (!submit_one(g, g->n_submitted, &e) && !g->submit_failed) {
            g->submit_failed = true;
            g->submit_error = e;
        }
    }
}

/* Submit the request (takes `r` and the reference on `v`); on refusal of
 * its first choice `e` says why and NULL is returned. */
static ilab_generation *submit(ilab_server *s, ilab_served *v, struct MHD_Connection *c,
                               ilab_api_request *r, ilab_conn *k, ilab_api_error *e)
{
    ilab_generation *g = generation_new(s, v, c, r);
    if (!g) {
        ilab_api_request_free(r);
        ilab_api_fail(e, 500, NULL, "out of memory");
        return NULL;
    }
    g->r = *r;
    memset(r, 0, sizeof *r);
    if (!submit_one(g, 0, e)) {
        for (uint32_t j = 1; j < g->n; j++)
            ilab_pending_refused(g->p, j);
        g->n_submitted = g->n;
        generation_free(g);
        return NULL;
    }
    const ilab_manifest *m = ilab_plugin_manifest(v->be.plugin);
    if (!(m->cache_fork && m->cache_truncate))
        submit_rest(g);
    g->watch_id = ilab_conn_watch(s->monitor, k, on_client_gone, g);
    return g;
}

/* Take the next event, first handing the remaining choices to the engine
 * once choice 0 has produced one. */
static ilab_pending_event *next_event(ilab_generation *g)
{
    ilab_pending_event *ev = ilab_pending_pop_or_park(g->p);
    if (ev && g->n_submitted < g->n) {
        if (atomic_load(&g->client_gone) || atomic_load(&g->aborted) ||
            atomic_load(&g->s->cancelling)) {
            /* Nobody will read them, or shutdown is ending everything. */
            for (uint32_t j = g->n_submitted; j < g->n; j++)
                ilab_pending_refused(g->p, j);
            g->n_submitted = g->n;
        } else {
            submit_rest(g);
        }
    }
    return ev;
}

/* --- non-streaming ------------------------------------------------------- */

static bool text_append(choice_state *c, const char *t, size_t n)
{
    return ilab_bytes_append(&c->text, &c->text_len, &c->text_cap, t, n);
}

/* SGLang's /generate: a TOKEN or FINISH event into the output so far (kept
 * whole in both modes: every streamed chunk repeats it). */
static void sglang_take(ilab_generation *g, const ilab_pending_event *ev)
{
    choice_state *c = &g->ch[ev->index];
    text_append(c, ev->text, ev->text_len);
    if (ev->type == ILAB_EVENT_TOKEN)
        ilab_sglang_output_add(&c->sg, ev, g->top_logprobs);
    if (ev->type == ILAB_EVENT_FINISH) {
        c->finish = ev->finish_reason;
        g->prompt_tokens = ev->prompt_tokens;
    }
    c->completion_tokens = (uint32_t)json_array_size(c->sg.ids);
}

static json_t *sglang_body(ilab_generation *g, uint32_t i)
{
    choice_state *c = &g->ch[i];
    return ilab_sglang_body_json(g->id, c->text, c->text_len, &c->sg, c->finish,
                                 g->prompt_tokens ? g->prompt_tokens
                                                  : (uint32_t)g->r.n_prompt_tokens,
                                 c->completion_tokens);
}

/* Take one event into the accumulated answer. */
static void whole_take(ilab_generation *g, ilab_pending_event *ev)
{
    choice_state *c = &g->ch[ev->index];
    const char *t;
    size_t n;
    if (ev->type == ILAB_EVENT_ERROR) {
        if (!g->error) {
            g->error = ev;
            return;
        }
    } else if (g->kind == ILAB_API_SGLANG) {
        sglang_take(g, ev);
    } else {
        delta_text(g, ev, &t, &n);
        if (ev->type == ILAB_EVENT_TOKEN && g->logprobs)
            ilab_logprobs_acc_add(&c->lps, g->kind, event_logprobs(g, ev));
        if (ev->type == ILAB_EVENT_TOKEN && c->token_ids)
            json_array_append_new(c->token_ids, json_integer(ev->token));
        text_append(c, t, n);
        if (ev->type == ILAB_EVENT_TOKEN)
            advance_offset(g, c, ev, t, n);
        if (ev->type == ILAB_EVENT_FINISH) {
            c->finish = ev->finish_reason;
            c->completion_tokens = ev->completion_tokens;
            g->prompt_tokens = ev->prompt_tokens;
        }
    }
    ilab_pending_event_free(ev);
}

static enum MHD_Result whole_respond(ilab_generation *g)
{
    ilab_server *s = g->s;
    if (g->submit_failed)
        return ilab_server_send_error(s, g->conn, &g->submit_error);
    if (g->error) {
        ilab_api_error e;
        ilab_served_error(g->v, g->error->status, g->error->message, &e);
        return ilab_server_send_error(s, g->conn, &e);
    }
    if (g->health_only) /* SGLang answers a healthy /health_generate with 200, no body */
        return ilab_server_send(s, g->conn, 200, "application/json", strdup(""));
    if (g->kind == ILAB_API_SGLANG) {
        json_t *one = sglang_body(g, 0);
        enum MHD_Result ret = ilab_server_send(s, g->conn, 200, "application/json",
                                               one ? json_dumps(one, JSON_FLAGS) : NULL);
        json_decref(one);
        return ret;
    }
    json_t *choices = json_array();
    unsigned completion = 0;
    for (uint32_t i = 0; i < g->n; i++) {
        choice_state *c = &g->ch[i];
        json_t *choice = ilab_choice_json(g->kind, i, ilab_json_text(c->text, c->text_len),
                                          c->lps.root, c->finish);
        c->lps.root = NULL;
        if (c->token_ids) {
            json_object_set_new(choice, "token_ids", c->token_ids);
            c->token_ids = NULL;
        }
        json_array_append_new(choices, choice);
        completion += c->completion_tokens;
    }
    json_t *body = ilab_response_json(&g->head, choices, g->prompt_tokens, completion);
    enum MHD_Result ret = ilab_server_send(s, g->conn, 200, "application/json",
                                           body ? json_dumps(body, JSON_FLAGS) : NULL);
    json_decref(body);
    return ret;
}

/* The non-streamed request's continuation: called by the access handler
 * each time the connection is resumed, until the answer is queued. */
static enum MHD_Result whole_continue(ilab_server *s, struct MHD_Connection *c, void *ctx)
{
    (void)s;
    (void)c;
    ilab_generation *g = ctx;
    for (;;) {
        if (atomic_load(&g->client_gone))
            return MHD_NO; /* nothing to answer; closes the connection */
        if (atomic_load(&g->aborted)) {
            ilab_api_error e;
            ilab_api_fail(&e, 503, NULL, "the server is shutting down and the request was "
                                         "cancelled");
            return ilab_server_send_error(g->s, g->conn, &e);
        }
        ilab_pending_event *ev = next_event(g);
        if (ev) {
            whole_take(g, ev);
            continue;
        }
        if (!ilab_pending_finished(g->p))
            return MHD_YES; /* parked: the next event resumes us */
        return whole_respond(g);
    }
}

/* --- streaming ------------------------------------------------------------ */

static bool out_append(ilab_generation *g, const char *data, size_t len)
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
static bool out_event(ilab_generation *g, json_t *chunk)
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

/* With return_token_ids, a chunk's choice names its token's id (`token`,
 * or none for the finish chunk): vLLM's "token_ids". */
static json_t *with_token_ids(ilab_generation *g, json_t *chunk, int32_t token)
{
    if (!g->return_token_ids || !chunk)
        return chunk;
    json_t *choice = json_array_get(json_object_get(chunk, "choices"), 0);
    json_object_set_new(choice, "token_ids", token >= 0 ? json_pack("[i]", (int)token)
                                                        : json_array());
    return chunk;
}

static bool format_event(ilab_generation *g, ilab_pending_event *ev)
{
    choice_state *c = &g->ch[ev->index];
    bool ok = true;
    if (g->kind == ILAB_API_SGLANG && ev->type != ILAB_EVENT_ERROR) {
        sglang_take(g, ev);
        ok = out_event(g, sglang_body(g, ev->index));
    } else if (ev->type == ILAB_EVENT_TOKEN) {
        const char *t;
        size_t n;
        delta_text(g, ev, &t, &n);
        /* A token whose bytes are held back (half a code point) has no text
         * yet; it gets a chunk only when its logprobs or id were asked for. */
        if (n > 0 || g->logprobs || g->return_token_ids) {
            json_t *lp = event_logprobs(g, ev);
            if (lp && g->kind == ILAB_API_CHAT)
                lp = json_pack("{s:[o]}", "content", lp);
            ok = out_event(g, with_token_ids(g, ilab_chunk_json(&g->head, ev->index, false,
                                                                ilab_json_text(t, n), lp,
                                                                ILAB_FINISH_NONE,
                                                                g->include_usage),
                                             ev->token));
        }
        advance_offset(g, c, ev, t, n);
    } else if (ev->type == ILAB_EVENT_FINISH) {
        /* The held-back tail (if any) rides on the finish chunk. */
        const char *t;
        size_t n;
        delta_text(g, ev, &t, &n);
        ok = out_event(g, with_token_ids(g, ilab_chunk_json(&g->head, ev->index, false,
                                                            n ? ilab_json_text(t, n) : NULL, NULL,
                                                            ev->finish_reason, g->include_usage),
                                         -1));
        c->completion_tokens = ev->completion_tokens;
        g->prompt_tokens = ev->prompt_tokens;
    } else {
        /* Headers (200) are long gone: the error travels in the stream. */
        ilab_api_error e;
        ilab_served_error(g->v, ev->status, ev->message, &e);
        char *body = ilab_api_error_json(&e);
        ok = body && out_append(g, "data: ", 6) && out_append(g, body, strlen(body)) &&
             out_append(g, "\n\n", 2);
        free(body);
    }
    return ok;
}

/* After the last choice ended: the usage chunk (when asked) and [DONE]. */
static bool format_end(ilab_generation *g)
{
    bool ok = true;
    if (g->include_usage) {
        unsigned completion = 0;
        for (uint32_t i = 0; i < g->n; i++)
            completion += g->ch[i].completion_tokens;
        ok = out_event(g, ilab_usage_chunk_json(&g->head, g->prompt_tokens, completion));
    }
    g->done = true;
    return ok && out_append(g, "data: [DONE]\n\n", 14);
}

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    ilab_generation *g = cls;
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
        if (atomic_load(&g->client_gone) || atomic_load(&g->aborted))
            return MHD_CONTENT_READER_END_WITH_ERROR;
        if (g->submit_failed && !g->submit_error_sent) {
            /* A later choice was refused after the 200 went out. */
            g->submit_error_sent = true;
            char *err = ilab_api_error_json(&g->submit_error);
            bool ok = err && out_append(g, "data: ", 6) && out_append(g, err, strlen(err)) &&
                      out_append(g, "\n\n", 2);
            free(err);
            if (!ok)
                return MHD_CONTENT_READER_END_WITH_ERROR;
            continue;
        }
        if (g->kind == ILAB_API_CHAT && !g->roles_sent) {
            g->roles_sent = true;
            for (uint32_t i = 0; i < g->n; i++)
                if (!out_event(g, ilab_chunk_json(&g->head, i, true, NULL, NULL,
                                                  ILAB_FINISH_NONE, g->include_usage)))
                    return MHD_CONTENT_READER_END_WITH_ERROR;
            continue;
        }
        ilab_pending_event *ev = next_event(g);
        if (!ev) {
            if (!ilab_pending_finished(g->p))
                return 0; /* parked: the next event resumes the connection */
            if (!format_end(g))
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

static enum MHD_Result respond_stream(ilab_generation *g)
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

/* --- setting a request up: on the backend's desk ---------------------------- */

/* A parsed request on its way to the engine. Its backend calls (the chat
 * prompt's tokenize, the engine's submit, which tokenizes a text prompt)
 * run on the backend's desk, never on an HTTP thread (backend_desk.h). */
typedef struct setup {
    ilab_server *s;
    struct MHD_Connection *c;
    ilab_conn *k;             /* the connection monitor's record */
    ilab_api_kind kind;
    bool health_only;
    ilab_api_request r;       /* owned until submitted */
    ilab_served *v;           /* a reference, until submitted */
    ilab_generation *g;       /* submitted; handed on to a streamed response */
    ilab_api_error e;         /* why not, when `g` is NULL */
} setup;

/* A backend that forks its cache gets choices 1..n-1 after choice 0's first
 * event, from the HTTP side (submit_rest): their prompt goes in as the ids
 * tokenized here, so that no later submit calls the backend. A prompt that
 * fails to tokenize stays text, for the engine to report. */
static void tokenize_for_later_choices(setup *t)
{
    const ilab_manifest *m = ilab_plugin_manifest(t->v->be.plugin);
    if (!t->r.prompt || t->r.n <= 1 || !(m->cache_fork && m->cache_truncate))
        return;
    char err[256];
    int32_t *ids = NULL;
    size_t n = 0;
    if (ilab_engine_tokenize(t->v->be.engine, t->r.prompt, strlen(t->r.prompt),
                             ILAB_TOKENIZE_ADD_BOS, err, sizeof err, &ids, &n) != ILAB_OK ||
        n == 0) {
        free(ids);
        return;
    }
    free(t->r.prompt);
    t->r.prompt = NULL;
    t->r.prompt_tokens = ids;
    t->r.n_prompt_tokens = n;
}

/* Desk thread. */
static void setup_work(void *ctx)
{
    setup *t = ctx;
    if (atomic_load(&t->s->cancelling)) {
        ilab_api_fail(&t->e, 503, NULL, "the server is shutting down");
        return;
    }
    if (!check_request(t->v, &t->r, &t->e) ||
        (t->kind == ILAB_API_CHAT && !ilab_chat_prompt(t->v, &t->r, &t->e)))
        return;
    tokenize_for_later_choices(t);
    ilab_served *v = t->v;
    t->v = NULL;
    t->g = submit(t->s, v, t->c, &t->r, t->k, &t->e); /* takes r and v */
    if (t->g)
        t->g->health_only = t->health_only;
}

/* HTTP side, once the desk is done and after each later resume. */
static enum MHD_Result setup_answer(ilab_server *s, struct MHD_Connection *c, void *ctx)
{
    setup *t = ctx;
    if (!t->g)
        return ilab_server_send_error(s, c, &t->e);
    if (t->g->stream) {
        ilab_generation *g = t->g;
        t->g = NULL; /* the response owns it from here */
        return respond_stream(g);
    }
    return whole_continue(s, c, t->g);
}

static void setup_release(void *ctx)
{
    setup *t = ctx;
    if (t->g)
        generation_free(t->g);
    ilab_served_release(t->v);
    ilab_api_request_free(&t->r);
    free(t);
}

static enum MHD_Result generate(ilab_server *s, struct MHD_Connection *c, ilab_api_kind kind,
                                const ilab_http_request *hr, const char *body, size_t body_len,
                                bool health_only)
{
    ilab_api_error e;
    if (atomic_load(&s->draining)) {
        ilab_api_fail(&e, 503, NULL, "the server is shutting down");
        return ilab_server_send_error(s, c, &e);
    }
    setup *t = calloc(1, sizeof *t);
    if (!t) {
        ilab_api_fail(&e, 500, NULL, "out of memory");
        return ilab_server_send_error(s, c, &e);
    }
    bool parsed = kind == ILAB_API_SGLANG ? ilab_sglang_request_parse(body, body_len, &t->r, &e)
                                          : ilab_api_request_parse(kind, body, body_len, &t->r, &e);
    /* The request's model picks the backend, and the version it runs on
     * stays loaded until its response ends (a reload retires it). */
    t->v = parsed ? ilab_server_acquire(s, t->r.model, &e) : NULL;
    if (!t->v) {
        setup_release(t);
        return ilab_server_send_error(s, c, &e);
    }
    t->s = s;
    t->c = c;
    t->k = ilab_http_request_conn(hr);
    t->kind = kind;
    t->health_only = health_only;
    return ilab_desk_defer(s, c, hr, t->v->desk, setup_work, setup_answer, setup_release, t);
}

enum MHD_Result ilab_handle_completions(ilab_server *s, struct MHD_Connection *c,
                                        const ilab_http_request *req)
{
    return generate(s, c, ILAB_API_COMPLETION, req, req->body, req->body_len, false);
}

enum MHD_Result ilab_handle_chat_completions(ilab_server *s, struct MHD_Connection *c,
                                             const ilab_http_request *req)
{
    return generate(s, c, ILAB_API_CHAT, req, req->body, req->body_len, false);
}

enum MHD_Result ilab_handle_sglang_generate(ilab_server *s, struct MHD_Connection *c,
                                            const ilab_http_request *req)
{
    return generate(s, c, ILAB_API_SGLANG, req, req->body, req->body_len, false);
}

/* SGLang's health check that generates one token: 200 once it is out. */
enum MHD_Result ilab_handle_health_generate(ilab_server *s, struct MHD_Connection *c,
                                            const ilab_http_request *req)
{
    ilab_api_error e;
    ilab_served *v = ilab_server_acquire(s, NULL, &e); /* SGLang names no model: the default */
    if (!v)
        return ilab_server_send_error(s, c, &e);
    int32_t first = v->info.bos_id >= 0 ? v->info.bos_id : 0;
    ilab_served_release(v);
    char body[128];
    snprintf(body, sizeof body, "{\"input_ids\": [%d], \"sampling_params\": "
             "{\"max_new_tokens\": 1, \"ignore_eos\": true}}", (int)first);
    return generate(s, c, ILAB_API_SGLANG, req, body, strlen(body), true);
}
