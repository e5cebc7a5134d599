/* generate() and cancel(): one streamed HTTP transfer per request.
 *
 * The transfer runs on a private curl multi handle so cancel(), from any
 * thread, can wake it (curl_multi_wakeup) and the transfer is dropped at
 * once, not at the next chunk. The response is Server-Sent Events: each
 * `data:` line is one JSON chunk for the engine's decoder, or `[DONE]`. */
#include "http_backend_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ERROR_BODY_MAX 2048
#define POLL_MS 1000

typedef struct transfer {
    ilab_backend_t *b;
    http_stream *st;
    http_active *active;
    CURL *easy;
    long status;                 /* HTTP status, once the headers are in */
    char *line;                  /* the SSE line being received */
    size_t line_len, line_cap;
    char err_body[ERROR_BODY_MAX + 1]; /* a non-200 answer's body */
    size_t err_len;
    bool done;                   /* nothing more is wanted from the server */
    ilab_status proto_status;    /* a malformed or error chunk */
    char proto_err[768];
} transfer;

/* --- the request ------------------------------------------------------------ */

/* The request and its sampling as this plugin knows them: members past the
 * writer's struct_size are off; members the writer has and this plugin does
 * not must be zero (off), else the request is refused (ADR 0008). */
static ilab_status read_request(ilab_backend_t *b, const ilab_generate_request_t *in,
                                http_gen_args *a, char *err, size_t cap)
{
    const char *plugin = b->engine->plugin;
    if (in->struct_size < offsetof(ilab_generate_request_t, top_logprobs) + sizeof in->top_logprobs) {
        snprintf(err, cap, "%s: generate: request struct_size %u is smaller than ABI 1.0's", plugin,
                 in->struct_size);
        return ILAB_INVALID_ARGUMENT;
    }
    if (!ilab_struct_tail_is_zero(in, sizeof *in)) {
        snprintf(err, cap, "%s: generate: the request sets members this plugin does not know "
                 "(struct_size %u > %zu)", plugin, in->struct_size, sizeof *in);
        return ILAB_INVALID_ARGUMENT;
    }
    const ilab_sampling_t *s = in->sampling;
    if (!s || s->struct_size < offsetof(ilab_sampling_t, seed) + sizeof s->seed) {
        snprintf(err, cap, "%s: generate: no sampling parameters, or struct_size smaller than ABI 1.0's",
                 plugin);
        return ILAB_INVALID_ARGUMENT;
    }
    if (!ilab_struct_tail_is_zero(s, sizeof *s)) {
        snprintf(err, cap, "%s: generate: a sampling parameter this plugin does not know is set "
                 "(struct_size %u > %zu); refused rather than ignored", plugin, s->struct_size,
                 sizeof *s);
        return ILAB_INVALID_ARGUMENT;
    }
    /* SMP-5's ranges, checked here: the engines read some values outside
     * them as "off" (vLLM's top_k -1) instead of refusing them */
    const char *bad = NULL;
    if (!isfinite(s->temperature) || s->temperature < 0.0f)
        bad = "temperature must be finite and >= 0";
    else if (s->top_k < 0)
        bad = "top_k must be >= 0 (0 is off)";
    else if (!(s->top_p > 0.0f && s->top_p <= 1.0f))
        bad = "top_p must be in (0, 1]";
    else if (!(s->min_p >= 0.0f && s->min_p <= 1.0f))
        bad = "min_p must be in [0, 1]";
    else if (!(s->repetition_penalty > 0.0f) || !isfinite(s->repetition_penalty))
        bad = "repetition_penalty must be finite and > 0";
    else if (!(s->presence_penalty >= -2.0f && s->presence_penalty <= 2.0f))
        bad = "presence_penalty must be in [-2, 2]";
    else if (!(s->frequency_penalty >= -2.0f && s->frequency_penalty <= 2.0f))
        bad = "frequency_penalty must be in [-2, 2]";
    if (bad) {
        snprintf(err, cap, "%s: generate: %s", plugin, bad);
        return ILAB_INVALID_ARGUMENT;
    }
    memset(&a->sampling, 0, sizeof a->sampling);
    memcpy(&a->sampling, s, s->struct_size < sizeof *s ? s->struct_size : sizeof *s);
    a->sampling.struct_size = sizeof a->sampling;
    a->req = in;
    a->model = b->model.id;
    if (!in->prompt_tokens || in->n_prompt_tokens == 0 || in->max_tokens <= 0) {
        snprintf(err, cap, "%s: generate: the prompt is empty or max_tokens <= 0", plugin);
        return ILAB_INVALID_ARGUMENT;
    }
    for (size_t i = 0; i < in->n_prompt_tokens; i++)
        if (in->prompt_tokens[i] < 0 || in->prompt_tokens[i] >= b->model.vocab_size) {
            snprintf(err, cap, "%s: generate: prompt token %zu is %d, outside [0, %d)", plugin, i,
                     in->prompt_tokens[i], b->model.vocab_size);
            return ILAB_INVALID_ARGUMENT;
        }
    if (in->top_logprobs < 0 || in->top_logprobs > HTTP_TOPK_MAX) {
        snprintf(err, cap, "%s: generate: top_logprobs %d is outside [0, %d] (topk_max)", plugin,
                 in->top_logprobs, HTTP_TOPK_MAX);
        return ILAB_INVALID_ARGUMENT;
    }
    if ((in->n_stop && !in->stop) || (in->n_stop_token_ids && !in->stop_token_ids)) {
        snprintf(err, cap, "%s: generate: stop strings or stop token ids counted but NULL", plugin);
        return ILAB_INVALID_ARGUMENT;
    }
    return ILAB_OK;
}

/* vLLM and SGLang refuse a request whose prompt + max_tokens would pass
 * their context (HTTP 400) instead of stopping when it fills; the contract
 * wants a filling context to end with FINISH(length) (STR-3). So the engine
 * is asked for no more tokens than fit; a prompt that leaves no room ends
 * with FINISH(length) and no TOKEN without a request, a prompt longer than
 * the context is refused here (STR-9). */
static ilab_status fit_context(ilab_backend_t *b, http_gen_args *a, char *err, size_t cap)
{
    int64_t ctx = b->model.max_context, n = (int64_t)a->req->n_prompt_tokens;
    if (n > ctx) {
        snprintf(err, cap, "%s: generate: the prompt has %lld tokens; the model's maximum context "
                 "length is %lld tokens", b->engine->plugin, (long long)n, (long long)ctx);
        return ILAB_CONTEXT_OVERFLOW;
    }
    int64_t room = ctx - n; /* max_context already leaves the engine's reserve */
    a->max_tokens = room < a->req->max_tokens ? (int32_t)(room > 0 ? room : 0) : a->req->max_tokens;
    return ILAB_OK;
}

/* --- the response ------------------------------------------------------------- */

static void proto_error(transfer *x, ilab_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void proto_error(transfer *x, ilab_status st, const char *fmt, ...)
{
    if (x->proto_status != ILAB_OK)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(x->proto_err, sizeof x->proto_err, fmt, ap);
    va_end(ap);
    x->proto_status = st;
    x->done = true;
}

/* An error object sent inside the stream (vLLM and SGLang both may). */
static bool chunk_is_error(transfer *x, json_t *chunk, const char *payload, size_t len)
{
    json_t *e = json_object_get(chunk, "error");
    const char *obj = json_string_value(json_object_get(chunk, "object"));
    if (!e && !(obj && !strcmp(obj, "error")))
        return false;
    char msg[512];
    http_client_error_text(payload, len, msg, sizeof msg);
    json_t *code = json_object_get(json_is_object(e) ? e : chunk, "code");
    long status = json_is_integer(code) ? (long)json_integer_value(code) : 500;
    proto_error(x, http_client_status_of(status, msg), "%s: the server ended the stream with an error: %s",
                x->b->engine->plugin, msg);
    return true;
}

static void on_data(transfer *x, const char *payload, size_t len)
{
    const char *plugin = x->b->engine->plugin;
    if (len == 6 && !memcmp(payload, "[DONE]", 6)) {
        x->done = true;
        return;
    }
    json_error_t jerr;
    json_t *chunk = json_loadb(payload, len, JSON_ALLOW_NUL, &jerr);
    if (!json_is_object(chunk)) {
        proto_error(x, ILAB_IO, "%s: a stream chunk is not a JSON object (%s): %.80s", plugin,
                    jerr.text, payload);
        json_decref(chunk);
        return;
    }
    if (!chunk_is_error(x, chunk, payload, len)) {
        char err[512] = "";
        ilab_status st = x->b->engine->protocol->decode(x->st, chunk, err, sizeof err);
        if (st != ILAB_OK)
            proto_error(x, st, "%s: %s", plugin, err);
        else if (http_stream_flush(x->st))
            x->done = true;
    }
    json_decref(chunk);
}

static void on_line(transfer *x)
{
    size_t n = x->line_len;
    if (n && x->line[n - 1] == '\r')
        n--;
    if (n >= 5 && !memcmp(x->line, "data:", 5)) {
        size_t at = 5 + (n > 5 && x->line[5] == ' ');
        on_data(x, x->line + at, n - at);
    }
    /* other SSE fields (event:, id:, retry:, comments) carry nothing we use */
    x->line_len = 0;
}

static size_t on_bytes(char *data, size_t size, size_t nmemb, void *user)
{
    transfer *x = user;
    size_t n = size * nmemb;
    if (!x->status)
        curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &x->status);
    if (x->status != 200) {
        size_t room = ERROR_BODY_MAX - x->err_len, k = n < room ? n : room;
        memcpy(x->err_body + x->err_len, data, k);
        x->err_len += k;
        x->err_body[x->err_len] = '\0';
        return n;
    }
    for (size_t i = 0; i < n && !x->done; i++) {
        if (atomic_load(&x->active->cancel)) {
            x->done = true;
            break;
        }
        if (data[i] == '\n') {
            on_line(x);
            continue;
        }
        if (x->line_len + 1 >= x->line_cap) {
            size_t cap = x->line_cap ? x->line_cap * 2 : 4096;
            char *l = realloc(x->line, cap);
            if (!l) {
                proto_error(x, ILAB_OUT_OF_MEMORY, "%s: out of memory for a stream line",
                            x->b->engine->plugin);
                break;
            }
            x->line = l;
            x->line_cap = cap;
        }
        x->line[x->line_len++] = data[i];
    }
    return n;
}

/* --- cancel registry ------------------------------------------------------------ */

static void activate(ilab_backend_t *b, http_active *a)
{
    pthread_mutex_lock(&b->active_mu);
    a->next = b->active;
    b->active = a;
    pthread_mutex_unlock(&b->active_mu);
}

static void deactivate(ilab_backend_t *b, http_active *a)
{
    pthread_mutex_lock(&b->active_mu);
    for (http_active **p = &b->active; *p; p = &(*p)->next)
        if (*p == a) {
            *p = a->next;
            break;
        }
    pthread_mutex_unlock(&b->active_mu);
}

ilab_status http_cancel(ilab_backend_t *b, uint64_t request_id)
{
    if (!b)
        return ILAB_INVALID_ARGUMENT;
    pthread_mutex_lock(&b->active_mu);
    for (http_active *a = b->active; a; a = a->next)
        if (a->request_id == request_id) {
            atomic_store(&a->cancel, true);
            curl_multi_wakeup(a->multi);
        }
    pthread_mutex_unlock(&b->active_mu);
    return ILAB_OK; /* an unknown or finished id is fine (benign race) */
}

/* --- the transfer ------------------------------------------------------------- */

/* Run the POST until the stream is over on either side; the curl result. */
static CURLcode run_transfer(transfer *x, CURLM *multi)
{
    CURLcode result = CURLE_OK;
    curl_multi_add_handle(multi, x->easy);
    for (;;) {
        int running = 0;
        if (curl_multi_perform(multi, &running) != CURLM_OK)
            break;
        if (x->done || !running || atomic_load(&x->active->cancel))
            break;
        curl_multi_poll(multi, NULL, 0, POLL_MS, NULL);
    }
    int left = 0;
    CURLMsg *m;
    while ((m = curl_multi_info_read(multi, &left)))
        if (m->msg == CURLMSG_DONE)
            result = m->data.result;
    curl_multi_remove_handle(multi, x->easy);
    return result;
}

/* The terminal event when the stream did not produce one itself. */
static void conclude(transfer *x, CURLcode rc, const char *url, const char *curl_err)
{
    http_stream *st = x->st;
    const char *plugin = x->b->engine->plugin;
    if (http_stream_ended(st))
        return;
    char msg[1024];
    if (atomic_load(&x->active->cancel)) {
        http_stream_finish(st, ILAB_FINISH_CANCELLED);
    } else if (x->proto_status != ILAB_OK) {
        http_stream_error(st, x->proto_status, x->proto_err);
    } else if (x->status && x->status != 200) {
        char server[512];
        http_client_error_text(x->err_body, x->err_len, server, sizeof server);
        snprintf(msg, sizeof msg, "%s: POST %.400s: HTTP %ld: %.400s", plugin, url, x->status, server);
        http_stream_error(st, http_client_status_of(x->status, server), msg);
    } else if (rc != CURLE_OK) {
        snprintf(msg, sizeof msg, "%s: POST %.400s: %.400s", plugin, url,
                 *curl_err ? curl_err : curl_easy_strerror(rc));
        http_stream_error(st, ILAB_IO, msg);
    } else {
        snprintf(msg, sizeof msg, "%s: POST %.400s: the stream ended before the server said the "
                 "request finished", plugin, url);
        http_stream_error(st, ILAB_IO, msg);
    }
}

static ilab_status stream_request(ilab_backend_t *b, const http_gen_args *a, json_t *body,
                                  http_stream *st)
{
    char url[1200], curl_err[CURL_ERROR_SIZE] = "";
    http_client_url(&b->target, b->engine->protocol->generate_path, url, sizeof url);
    char *payload = json_dumps(body, JSON_COMPACT);
    CURL *easy = http_client_ready() ? curl_easy_init() : NULL;
    CURLM *multi = easy ? curl_multi_init() : NULL;
    http_active active = {.request_id = a->req->request_id, .multi = multi};
    atomic_init(&active.cancel, false);
    transfer x = {.b = b, .st = st, .active = &active, .easy = easy};
    if (!payload || !easy || !multi) {
        http_stream_error(st, ILAB_OUT_OF_MEMORY, "could not set up the HTTP transfer");
    } else {
        struct curl_slist *h = http_client_setup(easy, &b->target, url,
                                                 b->settings.request_timeout_s * 1000L, 1);
        curl_easy_setopt(easy, CURLOPT_POSTFIELDS, payload);
        curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, curl_err);
        curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, on_bytes);
        curl_easy_setopt(easy, CURLOPT_WRITEDATA, &x);
        activate(b, &active);
        CURLcode rc = run_transfer(&x, multi);
        deactivate(b, &active);
        conclude(&x, rc, url, curl_err);
        curl_slist_free_all(h);
    }
    if (multi)
        curl_multi_cleanup(multi);
    if (easy)
        curl_easy_cleanup(easy);
    free(payload);
    free(x.line);
    return http_stream_status(st);
}

ilab_status http_generate(ilab_backend_t *b, const ilab_generate_request_t *req,
                          ilab_event_fn on_event, void *user_data)
{
    if (!b || !req || !on_event)
        return http_fail(b, ILAB_INVALID_ARGUMENT, "%s: generate: NULL argument",
                         b ? b->engine->plugin : "http backend");
    http_stream *st = http_stream_create(req, b->eos_id, on_event, user_data);
    if (!st)
        return http_fail(b, ILAB_OUT_OF_MEMORY, "%s: generate: out of memory", b->engine->plugin);
    http_gen_args a;
    char err[768] = "";
    json_t *body = NULL;
    ilab_status st_code = read_request(b, req, &a, err, sizeof err);
    if (st_code == ILAB_OK)
        st_code = fit_context(b, &a, err, sizeof err);
    if (st_code == ILAB_OK && a.max_tokens > 0)
        st_code = b->engine->protocol->encode(&a, &body, err, sizeof err);
    if (st_code != ILAB_OK) {
        http_stream_error(st, st_code, err);
    } else if (a.max_tokens == 0) {
        http_stream_finish(st, ILAB_FINISH_LENGTH); /* the prompt fills the context */
    } else {
        http_stream_limit(st, a.max_tokens);
        st_code = stream_request(b, &a, body, st);
    }
    json_decref(body);
    st_code = http_stream_status(st);
    if (st_code != ILAB_OK)
        http_fail(b, st_code, "%s", http_stream_message(st));
    http_stream_destroy(st);
    return st_code;
}
