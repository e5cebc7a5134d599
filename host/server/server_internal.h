/* Shared between the server's files; not part of its API. */
#ifndef ILAB_SERVER_INTERNAL_H
#define ILAB_SERVER_INTERNAL_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>

#include "api_error.h"
#include "openai_request.h"
#include "pending_request.h"
#include "server.h"
#include "token_text.h"

/* HTTP status codes the metrics count one by one; the rest go to "other". */
#define ILAB_SERVER_N_CODES 8

struct ilab_server {
    struct MHD_Daemon *daemon;
    ilab_server_config cfg;
    ilab_server_backend be;
    int port;
    time_t started;
    char model_id[64];
    ilab_model_info_t info;      /* valid when be.engine != NULL */
    ilab_token_text vocab;       /* per-token text for logprobs */

    atomic_bool draining;        /* shutdown began: refuse new generations */
    atomic_bool cancel_all;      /* the grace period ran out: cancel in-flight */

    pthread_mutex_t stats_mu;    /* guards everything below */
    pthread_cond_t stats_cond;   /* signalled when a generation ends */
    int active_generations;      /* connection-side: responses being produced */
    int inflight;                /* engine-side: submitted, no terminal event yet */
    unsigned long long requests_by_code[ILAB_SERVER_N_CODES + 1];
    unsigned long long finished_by_reason[5]; /* ilab_finish_reason */
    unsigned long long errors;   /* ERROR events */
    unsigned long long disconnects; /* clients gone before their response ended */
    unsigned long long next_id;
};

/* Queue `body` (malloc'd, taken) as the response with `content_type`. */
enum MHD_Result ilab_server_send(ilab_server *s, struct MHD_Connection *c, unsigned status,
                                 const char *content_type, char *body);
enum MHD_Result ilab_server_send_error(ilab_server *s, struct MHD_Connection *c,
                                       const ilab_api_error *e);
void ilab_server_count_status(ilab_server *s, unsigned status);

/* True when the client at the other end of `c` has closed its side. */
bool ilab_server_client_gone(struct MHD_Connection *c);

/* POST /v1/completions and /v1/chat/completions (completions.c). */
enum MHD_Result ilab_server_generate(ilab_server *s, struct MHD_Connection *c,
                                     ilab_api_kind kind, const char *body, size_t len);

#endif
