/* The instance shared by the files of http_common (not for plugins). */
#ifndef ILAB_HTTP_BACKEND_INTERNAL_H
#define ILAB_HTTP_BACKEND_INTERNAL_H

#include <curl/curl.h>
#include <pthread.h>
#include <stdatomic.h>

#include "http_backend.h"
#include "http_client.h"

/* The manifest's topk_max: the most top logprobs a TOKEN event carries. */
#define HTTP_TOPK_MAX 20

/* Configuration as the plugin reads it (manifest `config` keys). */
typedef struct http_settings {
    char base_url[1024];     /* no trailing '/'; "" = not configured */
    char model[256];         /* "" = the server's only model */
    char api_key[1024];
    long connect_timeout_ms;
    long request_timeout_s;
    int32_t vocab_size;      /* 0 = from the server */
    int32_t eos_id;          /* -1 = unknown */
    int32_t max_context;     /* 0 = from the server */
} http_settings;

/* What the server said about the model it serves (from the probe). */
typedef struct http_model {
    char id[256];
    int32_t vocab_size;
    int32_t max_context;
} http_model;

/* One generate() in flight, findable by cancel(). */
typedef struct http_active {
    uint64_t request_id;
    atomic_bool cancel;
    CURLM *multi;               /* woken by cancel() */
    struct http_active *next;
} http_active;

struct ilab_backend {
    const http_engine *engine;
    ilab_last_error_t error;
    http_settings settings;
    http_target target;         /* points into settings */
    http_model model;
    int32_t bos_id, eos_id;

    pthread_mutex_t active_mu;  /* guards `active` */
    http_active *active;
};

/* Record a message for last_error() and return `st`. */
ilab_status http_fail(ilab_backend_t *b, ilab_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* POST `body` (stolen) to `path`; on 2xx `*out` is the parsed answer (new
 * reference), else an error with the server's message. */
ilab_status http_post_json(ilab_backend_t *b, const char *path, json_t *body, json_t **out);

/* The calls each file implements. */
ilab_status http_tokenize(ilab_backend_t *b, const char *text, size_t len, uint32_t flags,
                          int32_t *tokens, size_t cap, size_t *n_tokens);
ilab_status http_detokenize(ilab_backend_t *b, const int32_t *tokens, size_t n, char *text,
                            size_t cap, size_t *len);
ilab_status http_token_piece(ilab_backend_t *b, int32_t prev, int32_t token, char *piece,
                             size_t cap, size_t *len);
ilab_status http_generate(ilab_backend_t *b, const ilab_generate_request_t *req,
                          ilab_event_fn on_event, void *user_data);
ilab_status http_cancel(ilab_backend_t *b, uint64_t request_id);

#endif
