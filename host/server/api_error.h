/* An HTTP API error: the status code and the OpenAI-shaped body
 * {"error": {"message", "type", "param", "code"}} it is rendered to. */
#ifndef ILAB_SERVER_API_ERROR_H
#define ILAB_SERVER_API_ERROR_H

#include <stdbool.h>
#include <stddef.h>

#include "inferlab/status.h"

typedef struct ilab_api_error {
    unsigned http_status;  /* 400, 404, 405, 413, 500, 503 ... */
    char type[48];         /* "invalid_request_error", "server_error", ... */
    char param[64];        /* the offending field ("" when none) */
    char message[512];     /* names the thing and what is wrong */
    int retry_after;       /* seconds for a Retry-After header; 0 = none */
    bool close;            /* answer with Connection: close (the framing is not trusted) */
} ilab_api_error;

/* Fill `e` with printf-style text. `param` may be NULL. Returns 0 so callers
 * can `return ilab_api_fail(...)` from int-returning parsers. */
int ilab_api_fail(ilab_api_error *e, unsigned http_status, const char *param,
                  const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Map a status refused by the engine (submit) or backend to an HTTP error,
 * by one table (api_error.c): INVALID_ARGUMENT and CONTEXT_OVERFLOW -> 400
 * invalid_request_error; UNSUPPORTED -> 400 unsupported_error; UNAVAILABLE
 * -> 503 service_unavailable (+ Retry-After when "overloaded:");
 * OUT_OF_MEMORY -> 503 + Retry-After; every other status (and a value
 * outside the enum) -> 500 server_error, the status named in the message. */
void ilab_api_error_from_status(ilab_api_error *e, ilab_status st, const char *message);

/* The JSON body, malloc'd, NUL-terminated; NULL only when out of memory. */
char *ilab_api_error_json(const ilab_api_error *e);

#endif
