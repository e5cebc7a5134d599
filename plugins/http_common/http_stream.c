/* One generation stream: chunks in, contract events out (http_stream.h). */
#include "http_stream.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bytes.h"

typedef struct pending_token {
    int32_t id;
    float logprob;
    ilab_logprob_t top[HTTP_STREAM_TOPK_MAX];
    uint32_t n_top;
} pending_token;

struct http_stream {
    const ilab_generate_request_t *req; /* borrowed for the generate() call */
    int32_t eos_id;
    ilab_event_fn on_event;
    void *user_data;
    int32_t max_tokens;     /* the request's, or less (http_stream_limit) */

    pending_token *pending; /* received, not yet emitted */
    size_t n_pending, cap_pending;
    size_t tokens_seen;     /* every id the server sent */
    uint32_t emitted;       /* TOKEN events so far */

    char *text;             /* every byte of text received */
    size_t text_len, text_cap;
    size_t text_out;        /* bytes of it emitted */

    bool server_finished;
    ilab_finish_reason server_reason;
    int32_t stop_token;

    bool ended, callback_stopped;
    ilab_status status;
    char message[1024];     /* the ERROR event's */
};

http_stream *http_stream_create(const ilab_generate_request_t *req, int32_t eos_id,
                                ilab_event_fn on_event, void *user_data)
{
    http_stream *st = calloc(1, sizeof *st);
    if (!st)
        return NULL;
    st->req = req;
    st->eos_id = eos_id;
    st->on_event = on_event;
    st->user_data = user_data;
    st->stop_token = -1;
    st->status = ILAB_OK;
    st->max_tokens = req->max_tokens;
    return st;
}

void http_stream_limit(http_stream *st, int32_t max_tokens)
{
    if (max_tokens < st->max_tokens)
        st->max_tokens = max_tokens;
}

void http_stream_destroy(http_stream *st)
{
    if (!st)
        return;
    free(st->pending);
    free(st->text);
    free(st);
}

static int by_logprob_desc(const void *a, const void *b)
{
    const ilab_logprob_t *x = a, *y = b;
    if (x->logprob != y->logprob)
        return x->logprob < y->logprob ? 1 : -1;
    return (x->token > y->token) - (x->token < y->token);
}

void http_stream_token(http_stream *st, int32_t token, float logprob, const ilab_logprob_t *top,
                       size_t n_top)
{
    st->tokens_seen++;
    if (st->n_pending == st->cap_pending) {
        size_t cap = st->cap_pending ? st->cap_pending * 2 : 8;
        pending_token *p = realloc(st->pending, cap * sizeof *p);
        if (!p)
            return; /* the missing token shows as a usage/length mismatch, not a crash */
        st->pending = p;
        st->cap_pending = cap;
    }
    pending_token *p = &st->pending[st->n_pending++];
    memset(p, 0, sizeof *p);
    p->id = token;
    p->logprob = isnan(logprob) ? 0.0f : logprob;
    if (top) {
        p->n_top = (uint32_t)(n_top < HTTP_STREAM_TOPK_MAX ? n_top : HTTP_STREAM_TOPK_MAX);
        memcpy(p->top, top, p->n_top * sizeof *top);
        qsort(p->top, p->n_top, sizeof *p->top, by_logprob_desc);
    }
}

static void text_append(http_stream *st, const char *s, size_t n)
{
    /* out of memory: the text is short, which the stream shows, no crash */
    (void)ilab_bytes_append(&st->text, &st->text_len, &st->text_cap, s, n);
}

void http_stream_text(http_stream *st, const char *text, size_t len)
{
    if (text && len)
        text_append(st, text, len);
}

void http_stream_text_so_far(http_stream *st, const char *text, size_t len)
{
    if (!text)
        return;
    if (len >= st->text_len && memcmp(text, st->text ? st->text : "", st->text_len) == 0) {
        text_append(st, text + st->text_len, len - st->text_len);
        return;
    }
    /* Shorter or different: the server revised text it had sent (a stop
     * string trimmed at the end). What was already emitted cannot be taken
     * back; the rest follows the server. */
    if (len >= st->text_out && memcmp(text, st->text, st->text_out) == 0) {
        st->text_len = st->text_out;
        text_append(st, text + st->text_out, len - st->text_out);
    }
}

size_t http_stream_tokens_seen(const http_stream *st)
{
    return st->tokens_seen;
}

void http_stream_server_finished(http_stream *st, ilab_finish_reason reason, int32_t stop_token)
{
    st->server_finished = true;
    st->server_reason = reason;
    st->stop_token = stop_token;
}

/* Where the output is cut for a stop string, or SIZE_MAX when none occurs
 * after `from` (STR-6): the occurrence that ends first, and of those ending
 * there the longest. Each string's first occurrence is its earliest-ending
 * one, so one memmem per string finds it. */
static size_t find_stop(const http_stream *st, size_t from)
{
    size_t best_end = SIZE_MAX, cut = SIZE_MAX;
    for (size_t i = 0; i < st->req->n_stop; i++) {
        const char *s = st->req->stop[i];
        size_t sl = s ? strlen(s) : 0;
        if (!sl || st->text_len - from < sl)
            continue;
        const char *hit = memmem(st->text + from, st->text_len - from, s, sl);
        if (!hit)
            continue;
        size_t at = (size_t)(hit - st->text), end = at + sl;
        if (end < best_end || (end == best_end && at < cut)) {
            best_end = end;
            cut = at;
        }
    }
    return cut;
}

/* How much of the text can go out now: not a tail that may begin a stop
 * string, not the start of an unfinished UTF-8 code point. */
static size_t safe_end(const http_stream *st)
{
    size_t end = st->text_len;
    for (size_t k = st->text_out; k < st->text_len && end == st->text_len; k++)
        for (size_t i = 0; i < st->req->n_stop; i++) {
            const char *s = st->req->stop[i];
            size_t sl = s ? strlen(s) : 0, tail = st->text_len - k;
            if (tail < sl && memcmp(st->text + k, s, tail) == 0) {
                end = k;
                break;
            }
        }
    /* back to the lead byte of the last code point; hold it if incomplete */
    size_t lead = end;
    while (lead > st->text_out && end - lead < 4 &&
           ((unsigned char)st->text[lead - 1] & 0xC0) == 0x80)
        lead--;
    if (lead > st->text_out) {
        unsigned char c = (unsigned char)st->text[lead - 1];
        size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        if (c >= 0xC0 && end - (lead - 1) < need)
            end = lead - 1;
    }
    return end;
}

static bool is_stopping_token(const http_stream *st, int32_t id)
{
    if (id == st->stop_token)
        return true;
    if (id >= 0 && id == st->eos_id && !st->req->ignore_eos)
        return true;
    for (size_t i = 0; i < st->req->n_stop_token_ids; i++)
        if (st->req->stop_token_ids[i] == id)
            return true;
    return false;
}

static void emit_terminal(http_stream *st, ilab_event_t *ev)
{
    st->ended = true;
    st->on_event(st->user_data, ev);
}

void http_stream_finish(http_stream *st, ilab_finish_reason reason)
{
    if (st->ended)
        return;
    size_t end = reason == ILAB_FINISH_STOP ? find_stop(st, st->text_out) : SIZE_MAX;
    if (end == SIZE_MAX)
        end = st->text_len;
    ilab_event_t ev = {.struct_size = sizeof ev, .type = ILAB_EVENT_FINISH,
                       .request_id = st->req->request_id, .finish_reason = reason,
                       .prompt_tokens = (uint32_t)st->req->n_prompt_tokens,
                       .completion_tokens = st->emitted,
                       .text = st->text ? st->text + st->text_out : "",
                       .text_len = end > st->text_out ? end - st->text_out : 0};
    st->text_out = end;
    st->status = ILAB_OK;
    emit_terminal(st, &ev);
}

void http_stream_error(http_stream *st, ilab_status status, const char *message)
{
    if (st->ended)
        return;
    ilab_event_t ev = {.struct_size = sizeof ev, .type = ILAB_EVENT_ERROR,
                       .request_id = st->req->request_id, .finish_reason = ILAB_FINISH_ERROR,
                       .prompt_tokens = (uint32_t)st->req->n_prompt_tokens,
                       .completion_tokens = st->emitted, .status = status,
                       .message = message && *message ? message : ilab_status_name(status)};
    st->status = status;
    snprintf(st->message, sizeof st->message, "%s", ev.message);
    emit_terminal(st, &ev);
}

/* One TOKEN event; false when the callback asked to stop. */
static bool emit_token(http_stream *st, const pending_token *p, const char *text, size_t len)
{
    /* exactly the top_logprobs asked for (LOG-4): an engine asked for 0
     * may still send the sampled token's entry */
    uint32_t n_top = p->n_top;
    if (st->req->top_logprobs >= 0 && n_top > (uint32_t)st->req->top_logprobs)
        n_top = (uint32_t)st->req->top_logprobs;
    ilab_event_t ev = {.struct_size = sizeof ev, .type = ILAB_EVENT_TOKEN,
                       .request_id = st->req->request_id, .token = p->id,
                       .text = text, .text_len = len, .logprob = p->logprob,
                       .top_logprobs = n_top ? p->top : NULL, .n_top_logprobs = n_top};
    st->emitted++;
    return st->on_event(st->user_data, &ev) == 0;
}

bool http_stream_flush(http_stream *st)
{
    if (st->ended)
        return true;
    size_t n = st->n_pending;
    bool server_done = st->server_finished;
    if (server_done && st->server_reason == ILAB_FINISH_STOP && n > 0 &&
        is_stopping_token(st, st->pending[n - 1].id))
        n--; /* EOS / a stop token id: it ends the stream, it is not emitted */
    ilab_finish_reason local = ILAB_FINISH_NONE;
    size_t room = (size_t)(st->max_tokens > 0 ? st->max_tokens : 0) - st->emitted;
    if (n >= room) {
        n = room;
        local = ILAB_FINISH_LENGTH;
    }
    size_t stop_at = find_stop(st, st->text_out), end;
    if (stop_at != SIZE_MAX) {
        end = stop_at;
        local = ILAB_FINISH_STOP;
    } else {
        end = server_done || local != ILAB_FINISH_NONE ? st->text_len : safe_end(st);
    }
    for (size_t i = 0; i < n; i++) {
        bool last = i + 1 == n;
        const char *t = last ? st->text + st->text_out : "";
        size_t len = last && end > st->text_out ? end - st->text_out : 0;
        if (last)
            st->text_out += len;
        if (!emit_token(st, &st->pending[i], t ? t : "", len)) {
            st->callback_stopped = true;
            st->n_pending = 0;
            http_stream_finish(st, ILAB_FINISH_CANCELLED);
            return true;
        }
    }
    st->n_pending = 0;
    if (local != ILAB_FINISH_NONE) {
        http_stream_finish(st, local);
        return true;
    }
    if (server_done) {
        http_stream_finish(st, st->server_reason);
        return true;
    }
    return false;
}

bool http_stream_server_done(const http_stream *st)
{
    return st->server_finished;
}

bool http_stream_ended(const http_stream *st)
{
    return st->ended;
}

ilab_status http_stream_status(const http_stream *st)
{
    return st->status;
}

bool http_stream_callback_stopped(const http_stream *st)
{
    return st->callback_stopped;
}

const char *http_stream_message(const http_stream *st)
{
    return st->message;
}
