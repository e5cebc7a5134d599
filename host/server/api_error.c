/* OpenAI-shaped error bodies and the status -> HTTP mapping. */
#include "api_error.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static const char *type_for(unsigned http_status)
{
    switch (http_status) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 405: return "invalid_request_error";
    case 413: return "invalid_request_error";
    case 503: return "service_unavailable";
    default: return http_status < 500 ? "invalid_request_error" : "server_error";
    }
}

int ilab_api_fail(ilab_api_error *e, unsigned http_status, const char *param,
                  const char *fmt, ...)
{
    memset(e, 0, sizeof *e);
    e->http_status = http_status;
    snprintf(e->type, sizeof e->type, "%s", type_for(http_status));
    if (param)
        snprintf(e->param, sizeof e->param, "%s", param);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return 0;
}

/* The one table from a status to its HTTP answer: every ilab_status has a
 * row (a value outside the enum answers as ILAB_INTERNAL does). The client's
 * errors are 400; what may pass with time (a full queue, memory) 503 with
 * Retry-After; the rest is the server's fault, 500. */
static const struct {
    unsigned http_status;
    const char *type;   /* NULL: the status's default type (type_for) */
    int retry_after;    /* -1: only for an "overloaded:" message */
    bool name_in_text;  /* the message is prefixed with the status name */
} status_table[] = {
    [ILAB_OK] = {500, NULL, 0, true}, /* never an error: a bug if it gets here */
    [ILAB_INVALID_ARGUMENT] = {400, NULL, 0, false},
    [ILAB_UNSUPPORTED] = {400, "unsupported_error", 0, false},
    [ILAB_UNAVAILABLE] = {503, NULL, -1, false},
    [ILAB_BUFFER_TOO_SMALL] = {500, NULL, 0, true},
    [ILAB_CONTEXT_OVERFLOW] = {400, NULL, 0, false},
    [ILAB_OUT_OF_MEMORY] = {503, NULL, 1, false},
    [ILAB_CANCELLED] = {500, NULL, 0, true},
    [ILAB_ABI_MISMATCH] = {500, NULL, 0, true},
    [ILAB_IO] = {500, NULL, 0, true},
    [ILAB_INTERNAL] = {500, NULL, 0, true},
};

void ilab_api_error_from_status(ilab_api_error *e, ilab_status st, const char *message)
{
    const char *msg = message && message[0] ? message : ilab_status_name(st);
    size_t row = (size_t)st < sizeof status_table / sizeof status_table[0] &&
                         status_table[st].http_status ? (size_t)st : (size_t)ILAB_INTERNAL;
    if (status_table[row].name_in_text)
        ilab_api_fail(e, status_table[row].http_status, NULL, "%s: %s", ilab_status_name(st), msg);
    else
        ilab_api_fail(e, status_table[row].http_status, NULL, "%s", msg);
    /* UNAVAILABLE: the engine's queue is full ("overloaded:") and the client
     * should come back shortly; a backend that cannot run here is not going
     * to recover by retrying. */
    int retry = status_table[row].retry_after;
    e->retry_after = retry >= 0 ? retry : !strncmp(msg, "overloaded:", 11);
    if (status_table[row].type)
        snprintf(e->type, sizeof e->type, "%s", status_table[row].type);
}

/* A truncated message may end inside a UTF-8 sequence, which jansson
 * refuses: drop the partial code point rather than lose the whole message. */
static json_t *utf8_string(const char *s)
{
    size_t n = strlen(s);
    for (int tries = 0; tries < 4 && n > 0; tries++, n--) {
        json_t *j = json_stringn(s, n);
        if (j)
            return j;
    }
    return json_string("(message is not valid UTF-8)");
}

char *ilab_api_error_json(const ilab_api_error *e)
{
    json_t *inner = json_pack("{s:o, s:s, s:o, s:i}", "message", utf8_string(e->message),
                              "type", e->type,
                              "param", e->param[0] ? utf8_string(e->param) : json_null(),
                              "code", (int)e->http_status);
    if (!inner)
        return NULL;
    json_t *root = json_pack("{s:o}", "error", inner);
    if (!root)
        return NULL;
    char *s = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return s;
}
