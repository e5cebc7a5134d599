/* Fuzz target: the OpenAI request parsers, JSON body -> ilab_api_request,
 * as POST /v1/completions and /v1/chat/completions run them.
 *
 * Input: a control byte (bit 0: chat or completions; bit 1: a request head
 * instead of a body, below), then the body.
 * Calls ilab_api_request_parse() and asserts:
 *  - a refusal is a 4xx/5xx with a message, and leaves nothing allocated;
 *  - an accepted request has every value inside the range docs/http-api.md
 *    documents (temperature 0..2, top_p (0, 1], min_p 0..1,
 *    repetition_penalty 0.01..10, presence_penalty and frequency_penalty
 *    -2..2, top_k >= 0, n 1..8, max_tokens >= 1 or the
 *    default, top_logprobs 0..20, at most 8 stop strings of the request's
 *    own, none empty, token ids >= 0, stream_options only with stream);
 *  - its text is what the body said, byte for byte: the prompt, each stop
 *    string and the model are compared with an independent reading of the
 *    JSON, and a chat prompt with this file's rendering of the documented
 *    template (docs/chat-template.md; "developer" is rendered "system", a
 *    message's "name" is not rendered).
 *
 * With bit 1 the rest is a raw request head, and the target checks the
 * server's RFC 9112 framing check (ilab_http_framing_ok): it splits the
 * head the way libmicrohttpd 0.9.75 does, in place (line ends overwritten
 * with NULs, a folded line's field moved elsewhere, a bare CR kept in its
 * value), hands the positions to the check, and asserts that it accepts
 * exactly the heads that an independent reading of the raw bytes frames
 * correctly (CRLF lines only, no folding, HTTP/1.0 or 1.1, one
 * Content-Length at most, Transfer-Encoding alone, once, "chunked", not in
 * HTTP/1.0), refusing the rest with the status that reading expects. Heads
 * libmicrohttpd itself refuses before any callback (no colon in a line, a
 * request line that is not three words) are skipped. */
#include <jansson.h>
#include <stdbool.h>
#include <string.h>

#include <ctype.h>
#include <strings.h>

#include "chat_template.h"
#include "fuzz.h"
#include "http_framing.h"
#include "openai_request.h"

static bool same_text(const char *got, json_t *want)
{
    return got && json_is_string(want) && strlen(got) == json_string_length(want) &&
           !memcmp(got, json_string_value(want), json_string_length(want));
}

/* The documented template, written out again: "<role>: <content>\n" per
 * message, then "assistant:". Returns false when a content is not text. */
static bool render_reference(json_t *messages, char **out, size_t *out_len)
{
    size_t cap = 16, len = 0, i;
    char *buf = malloc(cap);
    json_t *m;
#define APPEND(p, n)                                                       \
    do {                                                                   \
        size_t n_ = (n);                                                   \
        if (len + n_ + 1 > cap) {                                          \
            cap = 2 * (len + n_ + 1);                                      \
            buf = realloc(buf, cap);                                       \
            FUZZ_CHECK(buf, "oom");                                        \
        }                                                                  \
        memcpy(buf + len, (p), n_);                                        \
        len += n_;                                                         \
    } while (0)
    FUZZ_CHECK(buf, "oom");
    json_array_foreach(messages, i, m) {
        json_t *role = json_object_get(m, "role"), *content = json_object_get(m, "content");
        if (!strcmp(json_string_value(role), "developer")) /* OpenAI's name for system */
            APPEND("system", 6);
        else
            APPEND(json_string_value(role), json_string_length(role));
        APPEND(": ", 2);
        if (json_is_string(content)) {
            APPEND(json_string_value(content), json_string_length(content));
        } else {
            size_t k;
            json_t *part;
            json_array_foreach(content, k, part) {
                json_t *t = json_object_get(part, "text");
                APPEND(json_string_value(t), json_string_length(t));
            }
        }
        APPEND("\n", 1);
    }
    APPEND("assistant:", 10);
#undef APPEND
    *out = buf;
    *out_len = len;
    return true;
}

static void check_ranges(const ilab_api_request *r)
{
    const ilab_sampling_t *s = &r->sampling;
    FUZZ_CHECK(s->struct_size == sizeof *s, "sampling struct_size %u", (unsigned)s->struct_size);
    FUZZ_CHECK(s->temperature >= 0.0f && s->temperature <= 2.0f, "temperature %g", s->temperature);
    FUZZ_CHECK(s->top_p > 0.0f && s->top_p <= 1.0f, "top_p %g", s->top_p);
    FUZZ_CHECK(s->min_p >= 0.0f && s->min_p <= 1.0f, "min_p %g", s->min_p);
    FUZZ_CHECK(s->repetition_penalty >= 0.01f && s->repetition_penalty <= 10.0f,
               "repetition_penalty %g", s->repetition_penalty);
    FUZZ_CHECK(s->top_k >= 0, "top_k %d", s->top_k);
    FUZZ_CHECK(r->n >= 1 && r->n <= ILAB_SERVE_MAX_N, "n %d", r->n);
    FUZZ_CHECK(s->presence_penalty >= -2.0f && s->presence_penalty <= 2.0f, "presence_penalty %g",
               s->presence_penalty);
    FUZZ_CHECK(s->frequency_penalty >= -2.0f && s->frequency_penalty <= 2.0f,
               "frequency_penalty %g", s->frequency_penalty);
    if (r->kind == ILAB_API_COMPLETION)
        FUZZ_CHECK(r->max_tokens >= 1, "max_tokens %d", r->max_tokens);
    else
        FUZZ_CHECK(r->max_tokens >= 0, "max_tokens %d", r->max_tokens);
    FUZZ_CHECK(r->top_logprobs >= 0 && r->top_logprobs <= ILAB_SERVE_MAX_TOP_LOGPROBS,
               "top_logprobs %d", r->top_logprobs);
    FUZZ_CHECK(r->logprobs || r->top_logprobs == 0, "top_logprobs without logprobs");
    FUZZ_CHECK(!r->include_usage || r->stream, "include_usage without stream");
    /* A chat request's turn markers are added when its template is known
     * (ilab_api_chat_plain_setup), not by the parser. */
    FUZZ_CHECK(r->n_stop <= ILAB_SERVE_MAX_STOP, "%zu stop strings", r->n_stop);
    for (size_t i = 0; i < r->n_stop; i++)
        FUZZ_CHECK(r->stop[i] && r->stop[i][0], "stop[%zu] empty", i);
    for (size_t i = 0; i < r->n_stop_token_ids; i++)
        FUZZ_CHECK(r->stop_token_ids[i] >= 0, "stop_token_ids[%zu] = %d", i, r->stop_token_ids[i]);
    /* a chat request carries its messages; its prompt is rendered later */
    if (r->kind == ILAB_API_CHAT)
        FUZZ_CHECK(r->n_messages > 0 && !r->prompt_tokens, "a chat request without messages");
    else
        FUZZ_CHECK(!r->prompt != !r->prompt_tokens, "both or neither of prompt and prompt tokens");
    FUZZ_CHECK(!r->prompt_tokens || r->n_prompt_tokens > 0, "empty prompt token list");
    for (size_t i = 0; i < r->n_prompt_tokens; i++)
        FUZZ_CHECK(r->prompt_tokens[i] >= 0, "prompt token %d", r->prompt_tokens[i]);
}

/* A chat request rendered with the plain template: the prompt is the
 * reference rendering, and the turn markers follow the body's stops. */
static void check_plain_render(ilab_api_request *r, json_t *root)
{
    size_t own = r->n_stop;
    ilab_api_error err;
    memset(&err, 0, sizeof err);
    FUZZ_CHECK(ilab_api_chat_plain_setup(r, &err), "plain setup: %s", err.message);
    char *want;
    size_t want_len;
    render_reference(json_object_get(root, "messages"), &want, &want_len);
    FUZZ_CHECK(r->prompt && strlen(r->prompt) == want_len && !memcmp(r->prompt, want, want_len),
               "chat prompt is not the template's rendering");
    free(want);
    FUZZ_CHECK(r->n_stop == own + ilab_chat_n_turn_stops, "%zu stops after setup, %zu before",
               r->n_stop, own);
    for (size_t i = 0; i < ilab_chat_n_turn_stops; i++)
        FUZZ_CHECK(!strcmp(r->stop[own + i], ilab_chat_turn_stops[i]), "turn stop %zu", i);
}

static void check_text(const ilab_api_request *r, json_t *root)
{
    json_t *model = json_object_get(root, "model");
    FUZZ_CHECK(json_is_string(model) ? same_text(r->model, model) : !r->model, "model");

    /* The body's own stop strings, in order (a chat template's turn markers
     * are added after parsing). */
    json_t *stop = json_object_get(root, "stop");
    size_t turn = 0, n_own = 0;
    if (json_is_string(stop)) {
        FUZZ_CHECK(r->n_stop > turn && same_text(r->stop[turn], stop), "stop differs from the body");
        n_own = 1;
    } else if (json_is_array(stop)) {
        size_t i;
        json_t *s;
        json_array_foreach(stop, i, s)
            FUZZ_CHECK(turn + i < r->n_stop && same_text(r->stop[turn + i], s), "stop[%zu] differs", i);
        n_own = json_array_size(stop);
    }
    FUZZ_CHECK(r->n_stop == n_own + turn, "%zu stop strings for %zu in the body", r->n_stop, n_own);

    if (r->kind == ILAB_API_CHAT)
        return; /* rendered once its template is known: check_plain_render */
    json_t *prompt = json_object_get(root, "prompt");
    if (json_is_array(prompt) && json_array_size(prompt) == 1 &&
        !json_is_integer(json_array_get(prompt, 0)))
        prompt = json_array_get(prompt, 0);
    if (json_is_string(prompt)) {
        FUZZ_CHECK(same_text(r->prompt, prompt), "prompt differs from the body");
        return;
    }
    FUZZ_CHECK(json_is_array(prompt) && r->n_prompt_tokens == json_array_size(prompt),
               "prompt token count");
    for (size_t i = 0; i < r->n_prompt_tokens; i++)
        FUZZ_CHECK(r->prompt_tokens[i] == json_integer_value(json_array_get(prompt, i)),
                   "prompt token %zu", i);
}

/* --- request heads -------------------------------------------------------- */

#define MAX_FIELDS 64

/* libmicrohttpd 0.9.75's in-place split, as a model: lines end at LF (a CR
 * just before it goes too); each end is overwritten with NULs; a line that
 * starts with SP or HTAB continues the previous field, which is rebuilt
 * ("name", "value SP continuation") in a separate allocation. Returns false
 * for heads it would refuse itself. */
static bool split_like_mhd(char *buf, size_t n, char *moved, ilab_http_head *h,
                           ilab_http_field *f)
{
    size_t pos = 0, line = 0, moved_used = 0;
    h->start = buf;
    h->n_fields = 0;
    for (;;) {
        char *lf = memchr(buf + pos, '\n', n - pos);
        if (!lf)
            return false; /* the head never ends */
        size_t end = (size_t)(lf - buf), len = end - pos;
        if (len > 0 && buf[end - 1] == '\r') {
            buf[end - 1] = '\0';
            len--;
        }
        *lf = '\0';
        char *l = buf + pos;
        pos = end + 1;
        if (line++ == 0) { /* the request line: three words, the version last */
            char *sp1 = memchr(l, ' ', len), *sp2 = sp1 ? memchr(sp1 + 1, ' ', len - (size_t)(sp1 + 1 - l)) : NULL;
            if (!sp1 || !sp2 || memchr(sp2 + 1, ' ', len - (size_t)(sp2 + 1 - l)) || sp2 + 1 == l + len)
                return false;
            *sp1 = *sp2 = '\0';
            h->target = sp1 + 1;
            h->target_len = (size_t)(sp2 - sp1 - 1);
            h->version = sp2 + 1;
            h->version_len = len - (size_t)(sp2 + 1 - l);
            continue;
        }
        if (len == 0)
            break; /* the blank line */
        if (l[0] == ' ' || l[0] == '\t') {
            if (h->n_fields == 0)
                return false;
            ilab_http_field *prev = &f[h->n_fields - 1];
            size_t need = prev->name_len + prev->value_len + len + 3;
            if (moved_used + need > n + 64)
                return false;
            char *name = moved + moved_used;
            memcpy(name, prev->name, prev->name_len);
            name[prev->name_len] = '\0';
            char *value = name + prev->name_len + 1;
            memcpy(value, prev->value, prev->value_len);
            size_t skip = 0;
            while (skip < len && (l[skip] == ' ' || l[skip] == '\t'))
                skip++;
            value[prev->value_len] = ' ';
            memcpy(value + prev->value_len + 1, l + skip, len - skip);
            prev->name = name;
            prev->value = value;
            prev->value_len += 1 + len - skip;
            moved_used += need;
            continue;
        }
        char *colon = memchr(l, ':', len);
        if (!colon || colon == l || h->n_fields == MAX_FIELDS)
            return false;
        *colon = '\0';
        char *v = colon + 1;
        while (v < l + len && (*v == ' ' || *v == '\t'))
            v++;
        f[h->n_fields++] = (ilab_http_field){l, (size_t)(colon - l), v, (size_t)(l + len - v)};
    }
    h->size = pos;
    h->fields = f;
    return true;
}

/* The raw head's own reading: the status a correct check gives (0 = none). */
static unsigned expected_status(const char *raw, size_t n)
{
    bool crlf = n >= 4 && !memcmp(raw + n - 4, "\r\n\r\n", 4);
    for (size_t i = 0; i < n; i++) {
        if (raw[i] == '\n' && (i == 0 || raw[i - 1] != '\r'))
            crlf = false;
        if (raw[i] == '\r' && (i + 1 == n || raw[i + 1] != '\n'))
            crlf = false;
        if (raw[i] == '\n' && i + 1 < n && (raw[i + 1] == ' ' || raw[i + 1] == '\t'))
            crlf = false; /* obsolete line folding */
        if (raw[i] == '\0')
            crlf = false;
    }
    if (!crlf)
        return 400;
    const char *eol = strstr(raw, "\r\n");
    const char *ver = eol;
    while (ver > raw && ver[-1] != ' ')
        ver--;
    bool v10 = eol - ver == 8 && !memcmp(ver, "HTTP/1.0", 8);
    if (!(eol - ver == 8 && (v10 || !memcmp(ver, "HTTP/1.1", 8))))
        return 505;
    size_t cl = 0, te = 0;
    bool chunked = false;
    for (const char *l = eol + 2; *l != '\r'; l = strstr(l, "\r\n") + 2) {
        const char *colon = strchr(l, ':');
        size_t name = (size_t)(colon - l);
        if (name == 14 && !strncasecmp(l, "Content-Length", 14))
            cl++;
        if (name == 17 && !strncasecmp(l, "Transfer-Encoding", 17)) {
            te++;
            const char *v = colon + 1, *e = strstr(v, "\r\n");
            while (v < e && (*v == ' ' || *v == '\t'))
                v++;
            while (e > v && (e[-1] == ' ' || e[-1] == '\t'))
                e--;
            chunked = e - v == 7 && !strncasecmp(v, "chunked", 7);
        }
    }
    if (cl > 1 || (te && cl) || (te && v10))
        return 400;
    if (te > 1 || (te && !chunked))
        return 501;
    return 0;
}

static void check_head(const uint8_t *data, size_t size)
{
    /* The head ends at its first blank line, as a server reads it. */
    const char *raw = (const char *)data;
    size_t n = 0;
    for (size_t i = 0; i < size && !n; i++)
        if (raw[i] == '\n' && ((i >= 1 && raw[i - 1] == '\n') ||
                               (i >= 2 && raw[i - 1] == '\r' && raw[i - 2] == '\n')))
            n = i + 1;
    if (!n || memchr(raw, '\0', n))
        return; /* incomplete; or a NUL, which libmicrohttpd reads as the line's end */
    char *buf = calloc(1, n + 16), *moved = calloc(1, n + 64), *copy = fuzz_strndup(data, n);
    FUZZ_CHECK(buf && moved && copy, "oom");
    memcpy(buf, raw, n);
    ilab_http_head h;
    ilab_http_field f[MAX_FIELDS];
    if (split_like_mhd(buf, n, moved, &h, f)) {
        unsigned want = expected_status(copy, n);
        ilab_api_error e;
        memset(&e, 0, sizeof e);
        bool ok = ilab_http_framing_ok(&h, &e);
        FUZZ_CHECK(ok == (want == 0), "framing check says %s, the raw bytes %u: %.200s",
                   ok ? "ok" : e.message, want, copy);
        FUZZ_CHECK(ok || (e.http_status == want && e.message[0]), "status %u for %u: %s",
                   e.http_status, want, e.message);
    }
    free(buf);
    free(moved);
    free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if (data[0] & 2) {
        check_head(data + 1, size - 1);
        return 0;
    }
    ilab_api_kind kind = (data[0] & 1) ? ILAB_API_CHAT : ILAB_API_COMPLETION;
    const char *body = (const char *)data + 1;
    size_t len = size - 1;

    ilab_api_request r;
    ilab_api_error err;
    memset(&err, 0, sizeof err);
    bool ok = ilab_api_request_parse(kind, body, len, &r, &err);
    if (!ok) {
        FUZZ_CHECK(err.http_status >= 400 && err.http_status < 600, "status %u", err.http_status);
        FUZZ_CHECK(err.message[0], "refusal without a message");
        FUZZ_CHECK(!r.prompt && !r.stop && !r.model && !r.prompt_tokens, "refusal kept allocations");
        return 0;
    }
    check_ranges(&r);
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, NULL);
    FUZZ_CHECK(json_is_object(root), "accepted a body that is not a JSON object");
    check_text(&r, root);
    if (r.kind == ILAB_API_CHAT)
        check_plain_render(&r, root);
    json_decref(root);
    ilab_api_request_free(&r);
    return 0;
}
