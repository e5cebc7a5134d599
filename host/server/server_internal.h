/* Shared between the server's files; not part of its API. */
#ifndef ILAB_SERVER_INTERNAL_H
#define ILAB_SERVER_INTERNAL_H

#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>

#include "api_error.h"
#include "auth.h"
#include "conn_monitor.h"
#include "openai_request.h"
#include "pending_request.h"
#include "routes.h"
#include "server_log.h"
#include "server.h"
#include "token_text.h"

#include <sys/types.h>

/* HTTP status codes the metrics count one by one; the rest go to "other". */
#define ILAB_SERVER_N_CODES 12

typedef struct ilab_generation ilab_generation; /* completions.c */
typedef struct ilab_slot ilab_slot;

/* One loaded version of a backend (backends.c). Its fields are fixed once it
 * is published; `refs` and `retired` are guarded by the server's backends_mu. */
typedef struct ilab_served {
    ilab_server_backend be;      /* the caller's; name and reason not kept here */
    ilab_slot *slot;
    char model_id[64];           /* the model's name, else the plugin's */
    char version[64];            /* the plugin's version string */
    char path[512];              /* the file it was loaded from */
    ilab_model_info_t info;
    ilab_token_text vocab;       /* per-token text for logprobs */
    const struct ilab_chat_format *chat_format; /* the chat template (chat_setup.c); NULL:
                                                   none recognised, chat_problem says why */
    char chat_problem[640];
    bool parse_special;          /* the backend declares chat: template text is tokenized
                                    with ILAB_TOKENIZE_PARSE_SPECIAL */
    time_t loaded;
    int refs;                    /* requests running on it, plus 1 while current */
    bool retired;                /* replaced or removed: no new requests */
    struct ilab_desk *desk;      /* makes its requests' backend calls (backend_desk.h) */
    struct ilab_served *next_dead; /* the dead list */
} ilab_served;

/* A backend by name: the version serving it now, or why none does. Slots
 * are never freed before the server (engine callbacks point at them). */
struct ilab_slot {
    ilab_server *s;
    char name[64];               /* the plugin's name */
    ilab_served *current;        /* NULL: not serving (backends_mu) */
    char reason[512];            /* why not serving (backends_mu) */
    char refusal[512];           /* the last refused reload, "" when none (backends_mu) */
    char down_state[16];         /* not serving because its worker died: "restarting" or
                                    "failed"; "" otherwise (backends_mu) */
    bool removed;                /* gone from the folder: not listed (backends_mu) */
    /* under stats_mu */
    int inflight;
    unsigned long long finished_by_reason[5];
    unsigned long long restarts; /* the worker died and a new one serves */
    unsigned long long errors;
    unsigned long long prompt_tokens, generation_tokens;
    unsigned long long reloads, refusals;
};

struct ilab_server {
    struct MHD_Daemon *daemon;
    ilab_conn_monitor *monitor;
    ilab_server_log log;         /* rate-limited stderr lines, the access log */
    bool log_open;
    ilab_server_config cfg;
    char default_backend[64];    /* cfg's, copied; "" = none */
    int port;
    time_t started;

    pthread_mutex_t backends_mu; /* guards the slots' backend fields and the lists */
    ilab_slot **slots;           /* in the order they were added */
    size_t n_slots, cap_slots;
    char *plugins_json;          /* ilab_server_set_plugins's, NULL until then */
    ilab_served *dead;           /* retired, no request left: for ilab_server_reap */
    size_t n_retired;            /* retired, not yet released */
    int reap_fd;                 /* eventfd: readable when `dead` has versions */

    atomic_bool draining;        /* shutdown began: refuse new generations */
    atomic_bool cancelling;      /* the grace period ran out: in-flight requests end */

    pthread_mutex_t stats_mu;    /* guards everything below */
    pthread_cond_t stats_cond;   /* signalled when a generation ends */
    int active_generations;      /* connection-side: responses being produced */
    int inflight;                /* engine-side: submitted, no terminal event yet */
    int desk_requests;           /* requests set up on a backend's desk, not yet
                                    ended (backend_desk.c) */
    unsigned long long requests_by_code[ILAB_SERVER_N_CODES + 1];
    unsigned long long finished_by_reason[5]; /* ilab_finish_reason */
    unsigned long long errors;   /* ERROR events */
    unsigned long long disconnects; /* clients gone before their response ended */
    unsigned long long protocol_errors[ILAB_SERVER_N_CODES + 1]; /* malformed HTTP, by code */
    unsigned long long next_id;
    ilab_generation *generations; /* live generation requests (completions.c) */
};

/* --- reply.c: queueing responses ------------------------------------------ */

/* Queue `body` (malloc'd, taken) as the response with `content_type`. */
enum MHD_Result ilab_server_send(ilab_server *s, struct MHD_Connection *c, unsigned status,
                                 const char *content_type, char *body);
/* Queue `root` (taken; NULL = out of memory -> 500) as a JSON body. */
enum MHD_Result ilab_server_send_json(ilab_server *s, struct MHD_Connection *c, unsigned status,
                                      json_t *root);
/* Queue the documented error object, with Retry-After when `e` asks. */
enum MHD_Result ilab_server_send_error(ilab_server *s, struct MHD_Connection *c,
                                       const ilab_api_error *e);
void ilab_server_count_status(ilab_server *s, unsigned status);
/* A request refused at the HTTP level (it never reached a route). */
void ilab_server_count_protocol_error(ilab_server *s, unsigned status);
/* The i-th status code counted on its own (i < ILAB_SERVER_N_CODES). */
unsigned ilab_server_counted_code(size_t i);

/* --- backends.c: the served backends ------------------------------------------ */

ilab_status ilab_backends_init(ilab_server *s);
/* Start-up: install each of `bes` (taken); one without an engine is listed
 * as not serving. A vocabulary that cannot be read fails the start with one
 * backend, and with several only lists that backend as not serving. */
ilab_status ilab_backends_add_initial(ilab_server *s, const ilab_server_backend *bes, size_t n,
                                      char *err, size_t err_cap);
/* Release every version (current and retired) and free the slots. */
void ilab_backends_destroy(ilab_server *s);

/* The version serving `model` (NULL or "" = the default backend), with a
 * reference the caller gives back with ilab_served_release. NULL with `e`
 * filled: 404 for a model nobody serves (the message lists the ones
 * served), 503 for a backend that is not serving (why), 400 when no model
 * is named and there is no default. Any thread. */
ilab_served *ilab_server_acquire(ilab_server *s, const char *model, ilab_api_error *e);
void ilab_served_release(ilab_served *v);
/* The HTTP error for status `st` (message `msg`) from `v`'s backend: the
 * table's (api_error.c), except that an UNAVAILABLE from a backend whose
 * worker process died (crashed, exited, or killed past its call deadline)
 * is a 502 server_error: the gateway's backend failed, which no retry of
 * the same request at once will mend (ADR 0020). Any thread. */
void ilab_served_error(const ilab_served *v, ilab_status st, const char *msg, ilab_api_error *e);

/* The listed slots, each with a reference on its current version (NULL
 * when not serving) and a copy of its state, for /health, /v1/models and
 * /metrics. Free with ilab_backend_views_free. */
typedef struct ilab_backend_view {
    ilab_slot *slot;
    ilab_served *v;              /* referenced; NULL when not serving */
    char id[64];                 /* the id /v1/models lists (unique) */
    char reason[512];
    char refusal[512];
    char down_state[16];
} ilab_backend_view;
size_t ilab_backend_views(ilab_server *s, ilab_backend_view **out);
void ilab_backend_views_free(ilab_backend_view *views, size_t n);

/* --- completions.c: live generations, for shutdown -------------------------- */

/* Every live generation: ask the engine to end it (FINISH cancelled: the
 * client still gets its answer or its last chunk and [DONE]); with `abort`,
 * stop waiting for the engine and end the responses now. Returns how many
 * there were. Any thread. */
int ilab_server_end_generations(ilab_server *s, bool abort);

#endif
