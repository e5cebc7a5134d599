/* The response invariants of response_check.h. */
#include "response_check.h"

#include <inferlab/generate.h>

#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_CHOICES 16

static unsigned failures, replies_checked, metrics_checked, ledgers_checked;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

unsigned rc_failures(void)
{
    pthread_mutex_lock(&mu);
    unsigned n = failures;
    pthread_mutex_unlock(&mu);
    return n;
}

void rc_counts(unsigned *replies, unsigned *metrics)
{
    pthread_mutex_lock(&mu);
    *replies = replies_checked;
    *metrics = metrics_checked;
    pthread_mutex_unlock(&mu);
}

unsigned rc_ledgers_checked(void)
{
    pthread_mutex_lock(&mu);
    unsigned n = ledgers_checked;
    pthread_mutex_unlock(&mu);
    return n;
}

void rc_note_failure(const char *what, const char *path, const char *request_body,
                     const char *why)
{
    pthread_mutex_lock(&mu);
    failures++;
    pthread_mutex_unlock(&mu);
    fprintf(stderr, "RESPONSE CHECK FAILED (%s) on POST %s %s:\n  %s\n", what, path,
            request_body ? request_body : "(no body)", why);
}

static bool fail(char *why, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool fail(char *why, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, cap, fmt, ap);
    va_end(ap);
    return false;
}

bool rc_covers(const char *path)
{
    return path && (!strcmp(path, "/v1/completions") || !strcmp(path, "/v1/chat/completions"));
}

/* --- the error table ---------------------------------------------------------- */

/* Every HTTP status the server answers a completion or chat request with,
 * and the error types it may carry (host/server/api_error.c). */
static const struct {
    long status;
    const char *types[3];
} error_table[] = {
    {400, {"invalid_request_error", "unsupported_error", NULL}},
    {401, {"authentication_error", NULL, NULL}},
    {404, {"not_found_error", NULL, NULL}},
    {405, {"invalid_request_error", NULL, NULL}},
    {408, {"invalid_request_error", NULL, NULL}},
    {413, {"invalid_request_error", NULL, NULL}},
    {414, {"invalid_request_error", NULL, NULL}},
    {415, {"invalid_request_error", NULL, NULL}},
    {429, {"invalid_request_error", NULL, NULL}},
    {431, {"invalid_request_error", NULL, NULL}},
    {500, {"server_error", NULL, NULL}},
    {502, {"server_error", NULL, NULL}},
    {503, {"service_unavailable", NULL, NULL}},
};

bool rc_error_type_allowed(long status, const char *type)
{
    for (size_t i = 0; i < sizeof error_table / sizeof error_table[0]; i++)
        if (error_table[i].status == status) {
            for (size_t k = 0; k < 3 && error_table[i].types[k]; k++)
                if (type && !strcmp(type, error_table[i].types[k]))
                    return true;
            return false;
        }
    return false;
}

static bool check_error_object(json_t *err, long status, char *why, size_t cap)
{
    if (!json_is_object(err))
        return fail(why, cap, "status %ld: no \"error\" object", status);
    json_t *msg = json_object_get(err, "message"), *type = json_object_get(err, "type");
    if (!json_is_string(msg) || json_string_length(msg) == 0)
        return fail(why, cap, "status %ld: the error has no message", status);
    if (json_integer_value(json_object_get(err, "code")) != status)
        return fail(why, cap, "status %ld: error.code is %lld", status,
                    (long long)json_integer_value(json_object_get(err, "code")));
    if (!rc_error_type_allowed(status, json_string_value(type)))
        return fail(why, cap, "status %ld with error type '%s': not what the status maps to "
                    "(%s)", status, json_string_value(type) ? json_string_value(type) : "(none)",
                    json_string_value(msg));
    return true;
}

/* --- what was asked ------------------------------------------------------------- */

typedef struct asked {
    bool chat, stream, include_usage, logprobs, token_ids;
    long n;
    long limit; /* -1: none (a chat request without a limit: the context) */
} asked;

static bool parse_asked(const char *path, json_t *req, asked *a)
{
    memset(a, 0, sizeof *a);
    a->chat = !strcmp(path, "/v1/chat/completions");
    if (!json_is_object(req))
        return false;
    a->stream = json_is_true(json_object_get(req, "stream"));
    a->include_usage =
        json_is_true(json_object_get(json_object_get(req, "stream_options"), "include_usage"));
    json_t *lp = json_object_get(req, "logprobs");
    a->logprobs = a->chat ? json_is_true(lp) : json_is_integer(lp);
    a->token_ids = json_is_true(json_object_get(req, "return_token_ids"));
    json_t *n = json_object_get(req, "n");
    a->n = json_is_integer(n) ? (long)json_integer_value(n) : 1;
    json_t *mt = json_object_get(req, "max_tokens");
    json_t *mct = a->chat ? json_object_get(req, "max_completion_tokens") : NULL;
    if (json_is_integer(mct))
        a->limit = (long)json_integer_value(mct);
    else if (json_is_integer(mt))
        a->limit = (long)json_integer_value(mt);
    else
        a->limit = a->chat ? -1 : 16; /* ILAB_SERVE_DEFAULT_COMPLETION_TOKENS */
    return a->n >= 1 && a->n <= MAX_CHOICES;
}

/* --- what came back --------------------------------------------------------------- */

typedef struct choice {
    char *text;
    size_t len;
    long lp_entries;  /* logprobs entries; -1 when the choice had none */
    long ids;         /* token ids; -1 when none */
    int finishes;
    char finish[32];
    /* Legacy completions' logprobs: each token's text and its text_offset,
     * in order over every chunk, checked against the text once whole. */
    size_t n_off;
    long *off;
    char **tok;
} choice;

typedef struct answer {
    size_t n_seen;    /* highest index + 1 */
    choice ch[MAX_CHOICES];
    bool has_usage;
    long prompt_tokens, completion_tokens, total_tokens;
    bool stream_error; /* an error event inside a 200 stream */
} answer;

/* What the last 200 checked on this thread said, for the /metrics ledger
 * (rc_check_metrics runs on the same thread right after). */
typedef struct reply_facts {
    bool valid;
    long n;                /* choices */
    long prompt_tokens;    /* usage */
    long completion_tokens;
    long by_reason[ILAB_FINISH_ERROR + 1]; /* choices per finish reason */
} reply_facts;
static __thread reply_facts last_facts;

static void note_facts(const asked *a, const answer *ans)
{
    if (ans->stream_error || !ans->has_usage)
        return;
    reply_facts f = {.valid = true, .n = a->n, .prompt_tokens = ans->prompt_tokens,
                     .completion_tokens = ans->completion_tokens};
    for (long i = 0; i < a->n; i++) {
        int r = ILAB_FINISH_STOP;
        while (r <= ILAB_FINISH_ERROR && strcmp(ans->ch[i].finish, ilab_finish_reason_name(r)))
            r++;
        if (r > ILAB_FINISH_ERROR)
            return; /* a reason the engine has no counter for */
        f.by_reason[r]++;
    }
    last_facts = f;
}

static void answer_free(answer *a)
{
    for (size_t i = 0; i < MAX_CHOICES; i++) {
        free(a->ch[i].text);
        for (size_t k = 0; k < a->ch[i].n_off; k++)
            free(a->ch[i].tok[k]);
        free(a->ch[i].off);
        free(a->ch[i].tok);
    }
}

/* Record the (token, text_offset) pairs of one legacy logprobs object. */
static void take_offsets(choice *c, json_t *tokens, json_t *offsets)
{
    size_t n = json_array_size(tokens);
    long *off = realloc(c->off, (c->n_off + n) * sizeof *off);
    char **tok = realloc(c->tok, (c->n_off + n) * sizeof *tok);
    if (!off || !tok)
        abort();
    c->off = off;
    c->tok = tok;
    for (size_t k = 0; k < n; k++) {
        json_t *t = json_array_get(tokens, k), *o = json_array_get(offsets, k);
        c->off[c->n_off] = json_is_integer(o) ? (long)json_integer_value(o) : -1;
        c->tok[c->n_off++] = strdup(json_is_string(t) ? json_string_value(t) : "");
    }
}

/* text_offset is where each token's text starts in the choice's text: the
 * offsets never go back, and a token whose text lies within the text is
 * found there (a stop string may cut the text short of the last tokens). */
static bool check_offsets(size_t i, const choice *c, char *why, size_t cap)
{
    long prev = 0;
    for (size_t k = 0; k < c->n_off; k++) {
        long o = c->off[k];
        size_t len = strlen(c->tok[k]);
        if (o < prev || o > (long)c->len)
            return fail(why, cap, "choice %zu: text_offset[%zu] is %ld (the one before %ld, "
                        "the text %zu bytes)", i, k, o, prev, c->len);
        const char *t = c->tok[k];
        if (k == 0 && t[0] == ' ' && (c->len == 0 || c->text[0] != ' '))
            t++, len--; /* the start of the text drops the first token's space */
        if (len && (size_t)o + len <= c->len && memcmp(c->text + o, t, len))
            return fail(why, cap, "choice %zu: token %zu ('%s') is not at its text_offset %ld "
                        "of the text", i, k, c->tok[k], o);
        prev = o;
    }
    return true;
}

static void add_text(choice *c, const char *t, size_t n)
{
    char *grown = realloc(c->text, c->len + n + 1);
    if (!grown)
        abort();
    c->text = grown;
    memcpy(c->text + c->len, t, n);
    c->len += n;
    c->text[c->len] = '\0';
}

static void add_count(long *to, long n)
{
    *to = *to < 0 ? n : *to + n;
}

/* One choice object (whole or chunk) into the answer. */
static bool take_choice(const asked *a, json_t *cj, answer *ans, char *why, size_t cap)
{
    json_t *idx = json_object_get(cj, "index");
    if (!json_is_integer(idx) || json_integer_value(idx) < 0 ||
        json_integer_value(idx) >= a->n)
        return fail(why, cap, "a choice with index %lld, %ld asked for",
                    (long long)json_integer_value(idx), a->n);
    size_t i = (size_t)json_integer_value(idx);
    choice *c = &ans->ch[i];
    if (i + 1 > ans->n_seen)
        ans->n_seen = i + 1;
    if (c->finishes)
        return fail(why, cap, "choice %zu goes on after its finish_reason", i);
    json_t *t = a->chat ? json_object_get(json_object_get(cj, a->stream ? "delta" : "message"),
                                          "content")
                        : json_object_get(cj, "text");
    if (json_is_string(t))
        add_text(c, json_string_value(t), json_string_length(t));
    if (!c->text)
        add_text(c, "", 0);
    json_t *lp = json_object_get(cj, "logprobs");
    if (!json_is_null(lp) && lp) {
        if (!a->logprobs)
            return fail(why, cap, "choice %zu has logprobs nobody asked for", i);
        json_t *arr = a->chat ? json_object_get(lp, "content") : json_object_get(lp, "tokens");
        if (!json_is_array(arr))
            return fail(why, cap, "choice %zu: logprobs without its %s array", i,
                        a->chat ? "content" : "tokens");
        if (!a->chat) {
            static const char *const same[] = {"token_logprobs", "top_logprobs", "text_offset"};
            for (size_t k = 0; k < 3; k++)
                if (json_array_size(json_object_get(lp, same[k])) != json_array_size(arr))
                    return fail(why, cap, "choice %zu: logprobs.%s has %zu entries, tokens %zu",
                                i, same[k], json_array_size(json_object_get(lp, same[k])),
                                json_array_size(arr));
            take_offsets(c, arr, json_object_get(lp, "text_offset"));
        }
        add_count(&c->lp_entries, (long)json_array_size(arr));
    }
    json_t *ids = json_object_get(cj, "token_ids");
    if (json_is_array(ids))
        add_count(&c->ids, (long)json_array_size(ids));
    json_t *fr = json_object_get(cj, "finish_reason");
    if (json_is_string(fr)) {
        c->finishes++;
        snprintf(c->finish, sizeof c->finish, "%s", json_string_value(fr));
    } else if (fr && !json_is_null(fr)) {
        return fail(why, cap, "choice %zu: finish_reason is neither a string nor null", i);
    }
    return true;
}

static void take_usage(json_t *u, answer *ans)
{
    ans->has_usage = true;
    ans->prompt_tokens = (long)json_integer_value(json_object_get(u, "prompt_tokens"));
    ans->completion_tokens = (long)json_integer_value(json_object_get(u, "completion_tokens"));
    ans->total_tokens = (long)json_integer_value(json_object_get(u, "total_tokens"));
}

static bool parse_whole(const asked *a, const char *body, answer *ans, char *why, size_t cap)
{
    json_error_t e;
    json_t *j = json_loads(body, 0, &e);
    if (!j)
        return fail(why, cap, "a 200 whose body is not JSON (%s)", e.text);
    bool ok = true;
    const char *object = json_string_value(json_object_get(j, "object"));
    const char *want = a->chat ? "chat.completion" : "text_completion";
    json_t *choices = json_object_get(j, "choices");
    if (!object || strcmp(object, want))
        ok = fail(why, cap, "object is '%s', expected '%s'", object ? object : "(none)", want);
    else if (!json_is_array(choices))
        ok = fail(why, cap, "no choices array");
    for (size_t i = 0; ok && i < json_array_size(choices); i++)
        ok = take_choice(a, json_array_get(choices, i), ans, why, cap);
    json_t *u = json_object_get(j, "usage");
    if (ok && !json_is_object(u))
        ok = fail(why, cap, "no usage");
    if (ok)
        take_usage(u, ans);
    json_decref(j);
    return ok;
}

static bool parse_stream(const asked *a, const char *body, answer *ans, char *why, size_t cap)
{
    const char *p = body;
    bool done = false, usage_seen = false;
    while (*p) {
        if (done)
            return fail(why, cap, "events after [DONE]");
        if (strncmp(p, "data: ", 6))
            return fail(why, cap, "an event that does not start with 'data: ': %.40s", p);
        const char *end = strstr(p, "\n\n");
        if (!end)
            return fail(why, cap, "an event not ended by a blank line");
        size_t n = (size_t)(end - p - 6);
        if (memchr(p + 6, '\n', n))
            return fail(why, cap, "an event over several lines");
        if (n == 6 && !strncmp(p + 6, "[DONE]", 6)) {
            done = true;
            p = end + 2;
            continue;
        }
        json_error_t e;
        json_t *chunk = json_loadb(p + 6, n, 0, &e);
        if (!chunk)
            return fail(why, cap, "an event that is not JSON (%s)", e.text);
        bool ok = true;
        json_t *err = json_object_get(chunk, "error");
        if (err) {
            /* An error after the 200 went out travels in the stream. */
            ans->stream_error = true;
            ok = check_error_object(err, json_integer_value(json_object_get(err, "code")), why,
                                    cap);
        } else {
            const char *object = json_string_value(json_object_get(chunk, "object"));
            const char *want = a->chat ? "chat.completion.chunk" : "text_completion";
            json_t *choices = json_object_get(chunk, "choices");
            if (!object || strcmp(object, want))
                ok = fail(why, cap, "chunk object '%s', expected '%s'", object ? object : "(none)",
                          want);
            else if (usage_seen)
                ok = fail(why, cap, "a chunk after the usage chunk");
            else if (json_array_size(choices) == 0) {
                json_t *u = json_object_get(chunk, "usage");
                if (!a->include_usage || !json_is_object(u))
                    ok = fail(why, cap, "a chunk without choices that is not the usage asked for");
                else {
                    usage_seen = true;
                    take_usage(u, ans);
                }
            } else {
                for (size_t i = 0; ok && i < json_array_size(choices); i++)
                    ok = take_choice(a, json_array_get(choices, i), ans, why, cap);
                json_t *u = json_object_get(chunk, "usage");
                if (ok && u && !json_is_null(u))
                    ok = fail(why, cap, "usage on a chunk with choices");
            }
        }
        json_decref(chunk);
        if (!ok)
            return false;
        p = end + 2;
    }
    if (!done)
        return fail(why, cap, "the stream does not end with [DONE]");
    if (a->include_usage && !usage_seen && !ans->stream_error)
        return fail(why, cap, "stream_options.include_usage, and no usage chunk");
    return true;
}

/* Per choice: its tokens when they can be counted, else -1. */
static long tokens_of(const asked *a, const choice *c)
{
    if (a->logprobs)
        return c->lp_entries < 0 ? 0 : c->lp_entries;
    if (a->token_ids)
        return c->ids < 0 ? 0 : c->ids;
    return -1;
}

static bool check_answer(const asked *a, const answer *ans, char *why, size_t cap)
{
    if (ans->stream_error)
        return true; /* the stream broke off; what came before is partial */
    if ((long)ans->n_seen != a->n)
        return fail(why, cap, "%zu choices, %ld asked for", ans->n_seen, a->n);
    long counted = 0;
    bool countable = true;
    for (long i = 0; i < a->n; i++) {
        const choice *c = &ans->ch[i];
        if (c->finishes != 1)
            return fail(why, cap, "choice %ld has %d finish_reasons", i, c->finishes);
        if (!check_offsets((size_t)i, c, why, cap))
            return false;
        if (a->logprobs && a->token_ids && c->ids >= 0 && c->ids != c->lp_entries)
            return fail(why, cap, "choice %ld: %ld token ids, %ld logprobs entries", i, c->ids,
                        c->lp_entries);
        long t = tokens_of(a, c);
        if (t < 0)
            countable = false;
        else {
            counted += t;
            if (a->limit >= 0 && t > a->limit)
                return fail(why, cap, "choice %ld returned %ld tokens, the limit is %ld", i, t,
                            a->limit);
        }
    }
    if (!ans->has_usage)
        return true;
    if (ans->prompt_tokens < 0 || ans->completion_tokens < 0 ||
        ans->total_tokens != ans->prompt_tokens + ans->completion_tokens)
        return fail(why, cap, "usage does not add up: prompt %ld + completion %ld != total %ld",
                    ans->prompt_tokens, ans->completion_tokens, ans->total_tokens);
    if (a->limit >= 0 && ans->completion_tokens > a->n * a->limit)
        return fail(why, cap, "usage.completion_tokens %ld over the limit: %ld choice(s) of at "
                    "most %ld", ans->completion_tokens, a->n, a->limit);
    if (countable && counted != ans->completion_tokens)
        return fail(why, cap, "usage.completion_tokens %ld, but %ld tokens came back (%s)",
                    ans->completion_tokens, counted,
                    a->logprobs ? "logprobs entries" : "token ids");
    return true;
}

static bool parse_answer(const asked *a, const char *body, answer *ans, char *why, size_t cap)
{
    memset(ans, 0, sizeof *ans);
    for (size_t i = 0; i < MAX_CHOICES; i++)
        ans->ch[i].lp_entries = ans->ch[i].ids = -1;
    return a->stream ? parse_stream(a, body, ans, why, cap) : parse_whole(a, body, ans, why, cap);
}

bool rc_check_reply(const char *path, const char *request_body, const http_reply *r,
                    char *why, size_t cap)
{
    pthread_mutex_lock(&mu);
    replies_checked++;
    pthread_mutex_unlock(&mu);
    last_facts.valid = false;
    if (r->status != 200) {
        json_error_t e;
        json_t *j = json_loads(r->body ? r->body : "", 0, &e);
        if (!j)
            return fail(why, cap, "status %ld whose body is not JSON: %.200s", r->status,
                        r->body ? r->body : "");
        bool ok = check_error_object(json_object_get(j, "error"), r->status, why, cap);
        json_decref(j);
        return ok;
    }
    json_t *req = json_loads(request_body ? request_body : "", 0, NULL);
    asked a;
    bool parsed = parse_asked(path, req, &a);
    json_decref(req);
    if (!parsed)
        return fail(why, cap, "a 200 to a request that is no valid request object");
    answer ans;
    bool ok = parse_answer(&a, r->body, &ans, why, cap) && check_answer(&a, &ans, why, cap);
    if (ok)
        note_facts(&a, &ans);
    answer_free(&ans);
    return ok;
}

/* --- streamed against whole ----------------------------------------------------------- */

bool rc_check_twin(const test_server *s, const char *path, const char *request_body,
                   const http_reply *r, char *why, size_t cap)
{
    if (r->status != 200)
        return true;
    json_t *req = json_loads(request_body, 0, NULL);
    asked a, b;
    if (!parse_asked(path, req, &a)) {
        json_decref(req);
        return fail(why, cap, "twin: the request is no valid request object");
    }
    if (a.stream) {
        json_object_del(req, "stream");
        json_object_del(req, "stream_options");
    } else {
        json_object_set_new(req, "stream", json_true());
        json_object_set_new(req, "stream_options", json_pack("{s:b}", "include_usage", 1));
    }
    char *twin_body = json_dumps(req, JSON_COMPACT);
    parse_asked(path, req, &b);
    json_decref(req);
    http_reply t;
    bool ok = http_call(s, path, twin_body, &t); /* itself checked by the hook */
    if (!ok)
        ok = fail(why, cap, "twin: the request failed: %s", twin_body);
    else if (t.status != 200)
        ok = fail(why, cap, "twin %s: status %ld: %.200s", twin_body, t.status, t.body);
    answer x, y;
    bool px = false, py = false; /* parsed (wholly or in part): to be freed */
    if (ok) {
        px = true;
        ok = parse_answer(&a, r->body, &x, why, cap);
        py = ok;
        ok = ok && parse_answer(&b, t.body, &y, why, cap);
    }
    for (long i = 0; ok && i < a.n; i++) {
        const choice *c = &x.ch[i], *d = &y.ch[i];
        if (c->len != d->len || (c->len && memcmp(c->text, d->text, c->len)))
            ok = fail(why, cap, "choice %ld: %s text \"%s\", %s \"%s\"", i,
                      a.stream ? "streamed" : "whole", c->text ? c->text : "",
                      b.stream ? "streamed" : "whole", d->text ? d->text : "");
        else if (strcmp(c->finish, d->finish))
            ok = fail(why, cap, "choice %ld: finish_reason %s, its twin's %s", i, c->finish,
                      d->finish);
        else if (tokens_of(&a, c) != tokens_of(&b, d))
            ok = fail(why, cap, "choice %ld: %ld tokens, its twin %ld", i, tokens_of(&a, c),
                      tokens_of(&b, d));
    }
    if (ok && x.has_usage && y.has_usage && x.completion_tokens != y.completion_tokens)
        ok = fail(why, cap, "usage.completion_tokens %ld, its twin's %ld", x.completion_tokens,
                  y.completion_tokens);
    if (px)
        answer_free(&x);
    if (py)
        answer_free(&y);
    if (ok)
        ok = rc_check_reply(path, twin_body, &t, why, cap);
    free(twin_body);
    http_reply_free(&t);
    return ok;
}

/* --- /metrics ---------------------------------------------------------------------------- */

typedef struct series {
    char name[200];
    double value;
} series;

typedef struct snapshot {
    int port;
    int pid;
    double read_by; /* monotonic seconds when its reply had arrived */
    series *s;
    size_t n;
} snapshot;

static snapshot last[16];

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static bool parse_metrics(const char *body, series **out, size_t *n)
{
    size_t cap = 64;
    *n = 0;
    *out = malloc(cap * sizeof **out);
    for (const char *line = body; line && *line;) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        if (len && line[0] != '#') {
            const char *sp = memrchr(line, ' ', len);
            if (!sp || (size_t)(sp - line) >= sizeof(*out)->name)
                return false;
            if (*n == cap)
                *out = realloc(*out, (cap *= 2) * sizeof **out);
            series *s = &(*out)[(*n)++];
            memcpy(s->name, line, (size_t)(sp - line));
            s->name[sp - line] = '\0';
            s->value = strtod(sp + 1, NULL);
        }
        line = nl ? nl + 1 : NULL;
    }
    return true;
}

static double get(const series *s, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(s[i].name, name))
            return s[i].value;
    return NAN;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

/* Process-wide series: counters and histogram parts (the per-backend ones
 * start again with each version a reload brings, as documented). */
static bool is_monotonic(const char *name)
{
    if (!strncmp(name, "inferlab_backend_", 17))
        return false;
    const char *brace = strchr(name, '{');
    size_t n = brace ? (size_t)(brace - name) : strlen(name);
    char base[200];
    snprintf(base, sizeof base, "%.*s", (int)n, name);
    return ends_with(base, "_total") || ends_with(base, "_sum") || ends_with(base, "_count") ||
           ends_with(base, "_bucket");
}

static const char *const histograms[] = {"inferlab:time_to_first_token_seconds",
                                         "inferlab:inter_token_latency_seconds",
                                         "inferlab:e2e_request_latency_seconds"};

static bool check_histograms(const series *s, size_t n, double uptime, char *why, size_t cap)
{
    for (size_t h = 0; h < 3; h++) {
        char name[160];
        snprintf(name, sizeof name, "%s_count", histograms[h]);
        double count = get(s, n, name);
        snprintf(name, sizeof name, "%s_sum", histograms[h]);
        double sum = get(s, n, name);
        if (isnan(count) || isnan(sum))
            return fail(why, cap, "/metrics lacks %s_sum or _count", histograms[h]);
        /* Cumulative buckets, +Inf equal to the count. */
        double prev = 0, inf = NAN;
        size_t base = strlen(histograms[h]);
        for (size_t i = 0; i < n; i++) {
            if (strncmp(s[i].name, histograms[h], base) || strncmp(s[i].name + base, "_bucket{", 8))
                continue;
            if (s[i].value < prev)
                return fail(why, cap, "%s: bucket %s (%g) below the one before (%g)",
                            histograms[h], s[i].name, s[i].value, prev);
            prev = s[i].value;
            if (strstr(s[i].name, "le=\"+Inf\""))
                inf = s[i].value;
        }
        if (inf != count)
            return fail(why, cap, "%s: +Inf bucket %g, count %g", histograms[h], inf, count);
        /* In seconds: no observation is longer than the server has been up. */
        if (sum < 0 || sum > count * uptime)
            return fail(why, cap, "%s_sum is %g for %g observations within %.3f s of the "
                        "server's start: not seconds", histograms[h], sum, count, uptime);
    }
    double inflight = get(s, n, "inferlab_http_inflight_requests");
    double ttft = get(s, n, "inferlab:time_to_first_token_seconds_sum");
    double e2e = get(s, n, "inferlab:e2e_request_latency_seconds_sum");
    /* Nothing in flight: every request that had a first token has ended,
     * and each one's TTFT is within its end-to-end time. */
    if (inflight == 0 && ttft > e2e * (1 + 1e-6) + 1e-9)
        return fail(why, cap, "time to first token sums to %g s, more than the end-to-end "
                    "latency (%g s) of the same requests", ttft, e2e);
    return true;
}

/* Every series once: a family printed twice is not valid exposition text. */
static bool check_unique(const series *s, size_t n, char *why, size_t cap)
{
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++)
            if (!strcmp(s[i].name, s[j].name))
                return fail(why, cap, "/metrics has the series %s twice", s[i].name);
    return true;
}

/* The sum over every series of family `base` whose labels contain `label`
 * (NULL: all of them); NAN when there is none. */
static double sum_family(const series *s, size_t n, const char *base, const char *label)
{
    double sum = NAN;
    size_t len = strlen(base);
    for (size_t i = 0; i < n; i++) {
        if (strncmp(s[i].name, base, len) || (s[i].name[len] != '{' && s[i].name[len]))
            continue;
        if (label && !strstr(s[i].name + len, label))
            continue;
        sum = isnan(sum) ? s[i].value : sum + s[i].value;
    }
    return sum;
}

static bool same_figure(const char *what, double a, const char *a_name, double b,
                        const char *b_name, char *why, size_t cap)
{
    if (isnan(a) || isnan(b) || a == b)
        return true;
    return fail(why, cap, "%s: %s is %g but %s is %g", what, a_name, a, b_name, b);
}

/* The same facts counted in several places agree once nothing is in
 * flight: the HTTP layer's and the engine's finish reasons, and the
 * per-backend series against the process-wide ones (while no backend was
 * replaced or restarted, which starts its series again). */
static bool check_cross(const series *s, size_t n, char *why, size_t cap)
{
    if (get(s, n, "inferlab_http_inflight_requests") != 0 ||
        get(s, n, "inferlab:num_requests_running") != 0 ||
        get(s, n, "inferlab:num_requests_waiting") != 0)
        return true;
    for (int r = ILAB_FINISH_STOP; r <= ILAB_FINISH_ERROR; r++) {
        char http[96], engine[96];
        const char *name = ilab_finish_reason_name(r);
        snprintf(http, sizeof http, "inferlab_http_finished_total{reason=\"%s\"}", name);
        snprintf(engine, sizeof engine, "inferlab:request_success_total{finished_reason=\"%s\"}",
                 name);
        if (!same_figure(name, get(s, n, http), http, get(s, n, engine), engine, why, cap))
            return false;
    }
    if (sum_family(s, n, "inferlab_backend_reloads_total", "result=\"ok\"") > 0 ||
        sum_family(s, n, "inferlab_backend_restarts_total", NULL) > 0)
        return true;
    for (size_t i = 0; i < n; i++)
        if (!strncmp(s[i].name, "inferlab_backend_up{", 20) && s[i].value != 1)
            return true; /* a backend that is down shows no engine series */
    for (int r = ILAB_FINISH_STOP; r <= ILAB_FINISH_ERROR; r++) {
        char http[96], label[48];
        snprintf(http, sizeof http, "inferlab_http_finished_total{reason=\"%s\"}",
                 ilab_finish_reason_name(r));
        snprintf(label, sizeof label, "reason=\"%s\"", ilab_finish_reason_name(r));
        if (!same_figure(ilab_finish_reason_name(r),
                         sum_family(s, n, "inferlab_backend_finished_total", label),
                         "the backends' inferlab_backend_finished_total", get(s, n, http), http,
                         why, cap))
            return false;
    }
    static const char *const pairs[][2] = {
        {"inferlab_backend_prompt_tokens_total", "inferlab:prompt_tokens_total"},
        {"inferlab_backend_generation_tokens_total", "inferlab:generation_tokens_total"},
        {"inferlab_backend_preemptions_total", "inferlab:num_preemptions_total"},
        {"inferlab_backend_prefix_cache_hits_total", "inferlab:prefix_cache_hits_total"},
    };
    for (size_t k = 0; k < sizeof pairs / sizeof pairs[0]; k++)
        if (!same_figure("summed over backends", sum_family(s, n, pairs[k][0], NULL),
                         pairs[k][0], get(s, n, pairs[k][1]), pairs[k][1], why, cap))
            return false;
    return true;
}

static double delta(const series *prev, size_t pn, const series *cur, size_t n,
                    const char *name)
{
    return get(cur, n, name) - get(prev, pn, name);
}

/* When the requests that ended since the last snapshot are exactly this
 * reply's choices, the counters moved by what the reply says: its tokens,
 * its finish reasons, and latencies no longer than the client waited. */
static bool check_ledger(const snapshot *prev, const series *cur, size_t n, double sent_at,
                         double wall_s, char *why, size_t cap)
{
    reply_facts f = last_facts;
    last_facts.valid = false;
    /* The last snapshot must predate the request (another thread's may have
     * been read after this reply ended). */
    const series *ps = prev->s;
    size_t pn = prev->n;
    if (!f.valid || wall_s < 0 || prev->read_by > sent_at ||
        get(cur, n, "inferlab_http_inflight_requests") != 0 ||
        get(cur, n, "inferlab:num_requests_running") != 0 ||
        get(cur, n, "inferlab:num_requests_waiting") != 0 ||
        delta(ps, pn, cur, n, "inferlab:e2e_request_latency_seconds_count") != (double)f.n)
        return true;
    double gen = delta(ps, pn, cur, n, "inferlab:generation_tokens_total");
    if (gen != (double)f.completion_tokens)
        return fail(why, cap, "inferlab:generation_tokens_total grew by %g for a reply of %ld "
                    "completion tokens", gen, f.completion_tokens);
    for (int r = ILAB_FINISH_STOP; r <= ILAB_FINISH_ERROR; r++) {
        char name[96];
        snprintf(name, sizeof name, "inferlab:request_success_total{finished_reason=\"%s\"}",
                 ilab_finish_reason_name(r));
        double d = delta(ps, pn, cur, n, name);
        if (d != (double)f.by_reason[r])
            return fail(why, cap, "%s grew by %g for a reply with %ld such choice(s)", name, d,
                        f.by_reason[r]);
    }
    if (delta(ps, pn, cur, n, "inferlab:num_preemptions_total") == 0) {
        double p = delta(ps, pn, cur, n, "inferlab:prompt_tokens_total");
        if (p != (double)(f.n * f.prompt_tokens))
            return fail(why, cap, "inferlab:prompt_tokens_total grew by %g for %ld choice(s) of "
                        "a %ld-token prompt", p, f.n, f.prompt_tokens);
    }
    ledgers_checked++; /* mu is held (rc_check_metrics) */
    static const char *const spans[] = {"inferlab:e2e_request_latency_seconds_sum",
                                        "inferlab:time_to_first_token_seconds_sum"};
    for (size_t k = 0; k < 2; k++) {
        double d = delta(ps, pn, cur, n, spans[k]);
        if (d > (double)f.n * wall_s * 1.001 + 1e-3)
            return fail(why, cap, "%s grew by %g s for %ld request(s) the client waited %.4f s "
                        "for", spans[k], d, f.n, wall_s);
    }
    return true;
}

bool rc_check_metrics(const test_server *s, const char *const *headers, double sent_at,
                      double wall_s, bool *checked, char *why, size_t cap)
{
    *checked = false;
    pthread_mutex_lock(&mu); /* one snapshot at a time: each is compared with the last */
    http_reply r;
    bool ok = true;
    if (!http_call_ex(s, NULL, "/metrics", NULL, headers, &r) || r.status != 200) {
        http_reply_free(&r);
        pthread_mutex_unlock(&mu);
        return true;
    }
    double uptime = now_s() - s->started_at;
    series *cur = NULL;
    size_t n = 0;
    if (!parse_metrics(r.body, &cur, &n)) {
        ok = fail(why, cap, "/metrics has a line that is not 'name value'");
        goto out;
    }
    *checked = true;
    metrics_checked++;
    ok = check_unique(cur, n, why, cap) && check_histograms(cur, n, uptime, why, cap) &&
         check_cross(cur, n, why, cap);
    snapshot *prev = NULL;
    for (size_t i = 0; i < sizeof last / sizeof last[0] && !prev; i++)
        if (last[i].port == s->port && last[i].pid == (int)s->pid)
            prev = &last[i];
    if (ok && prev)
        ok = check_ledger(prev, cur, n, sent_at, wall_s, why, cap);
    else
        last_facts.valid = false;
    for (size_t i = 0; ok && prev && i < n; i++) {
        if (!is_monotonic(cur[i].name))
            continue;
        double before = get(prev->s, prev->n, cur[i].name);
        if (!isnan(before) && cur[i].value < before)
            ok = fail(why, cap, "counter %s went down: %g, then %g", cur[i].name, before,
                      cur[i].value);
    }
    if (!prev) { /* a slot: a free one, else the oldest */
        static size_t next;
        prev = &last[next++ % (sizeof last / sizeof last[0])];
    }
    free(prev->s);
    prev->port = s->port;
    prev->pid = (int)s->pid;
    prev->s = cur;
    prev->n = n;
    prev->read_by = now_s();
    cur = NULL;
out:
    free(cur);
    http_reply_free(&r);
    pthread_mutex_unlock(&mu);
    return ok;
}
