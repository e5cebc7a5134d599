/* The HTTP side of the engine adapters: libcurl requests to one server with
 * bounded timeouts, the API key, and the engines' error bodies turned into
 * messages. Every function may be called from any thread (one easy handle
 * per request at a time, taken from the instance's idle ones; libcurl's
 * global state is set up once). */
#ifndef ILAB_HTTP_CLIENT_H
#define ILAB_HTTP_CLIENT_H

#include <curl/curl.h>
#include <jansson.h>
#include <stddef.h>

#include <inferlab/inferlab.h>

#include "http_handles.h"

/* Where requests go. Strings borrowed; owned by the backend instance. */
typedef struct http_target {
    const char *label;       /* e.g. "vLLM", for messages */
    const char *base_url;    /* without a trailing '/' */
    const char *api_key;     /* "" = none; sent as "Authorization: Bearer" */
    long connect_timeout_ms; /* > 0 */
    http_handles *handles;   /* the instance's idle handles; NULL = a new connection a request */
} http_target;

/* One answer, body owned by the caller (http_reply_free). */
typedef struct http_reply {
    long status;  /* HTTP status; 0 when no answer came */
    char *body;   /* NUL-terminated */
    size_t len;
} http_reply;

/* libcurl's global init, once per process; false if it failed. */
int http_client_ready(void);

/* Common options of every request on `curl`: URL, timeouts, no signals,
 * http/https only, headers (which the caller frees with
 * curl_slist_free_all after the transfer). */
struct curl_slist *http_client_setup(CURL *curl, const http_target *t, const char *url,
                                     long timeout_ms, int json_body);

/* `base_url` + `path` into `url`. */
void http_client_url(const http_target *t, const char *path, char *url, size_t cap);

/* GET (body NULL) or POST a JSON body to `path`, waiting at most
 * `timeout_ms` in all. ILAB_OK when an answer came (any status, see
 * reply->status); ILAB_IO with `err` ("cannot reach URL: why") otherwise. */
ilab_status http_client_request(const http_target *t, const char *path, json_t *body,
                                long timeout_ms, http_reply *reply, char *err, size_t err_cap);
void http_reply_free(http_reply *r);

/* The server's own words from an error body: the "message" of vLLM's and
 * SGLang's error objects ({"error": {"message"}}, {"message"}, {"detail"},
 * {"error": "..."}), else the body's start. Written into `out`. */
void http_client_error_text(const char *body, size_t len, char *out, size_t cap);

/* The status an HTTP error status stands for: 400/404/413/422 bad request
 * (INVALID_ARGUMENT; CONTEXT_OVERFLOW when the server says the context is
 * exceeded), 401/403/408/429/502/503/504 UNAVAILABLE, other 5xx IO. */
ilab_status http_client_status_of(long http_status, const char *server_message);

#endif
