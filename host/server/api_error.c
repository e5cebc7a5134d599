/* OpenAI-shaped error bodies and the status -> HTTP mapping. */
#include "api_error.h"

#include <jansson.h>
#include <stdarg.h>
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

void ilab_api_error_from_status(ilab_api_error *e, ilab_status st, const char *message)
{
    const char *msg = message && message[0] ? message : ilab_status_name(st);
    switch (st) {
    case ILAB_UNAVAILABLE:
        ilab_api_fail(e, 503, NULL, "%s", msg);
        /* The engine's queue is full: the client should come back shortly. A
         * backend that cannot run here is not going to recover by retrying. */
        if (!strncmp(msg, "overloaded:", 11))
            e->retry_after = 1;
        break;
    case ILAB_INVALID_ARGUMENT:
    case ILAB_UNSUPPORTED:
    case ILAB_CONTEXT_OVERFLOW:
        ilab_api_fail(e, 400, NULL, "%s", msg);
        break;
    case ILAB_OUT_OF_MEMORY:
        ilab_api_fail(e, 503, NULL, "%s", msg);
        e->retry_after = 1;
        break;
    default:
        ilab_api_fail(e, 500, NULL, "%s: %s", ilab_status_name(st), msg);
        break;
    }
    snprintf(e->type, sizeof e->type, "%s",
             st == ILAB_UNSUPPORTED ? "unsupported_error" : type_for(e->http_status));
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
