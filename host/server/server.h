/* The HTTP server behind `inferlab serve`: an OpenAI-compatible API
 * (docs/http-api.md) on libmicrohttpd's epoll event loop (a small thread
 * pool; ADR 0014). Each backend served has its own engine (its continuous
 * batch), shared by every client; a request's "model" picks the backend. */
#ifndef ILAB_SERVER_SERVER_H
#define ILAB_SERVER_SERVER_H

#include <stddef.h>

#include "inferlab/inferlab.h"
#include "../loader/plugin_loader.h"
#include "../runtime/engine.h"

typedef struct ilab_server ilab_server;

/* Zero fields take the documented defaults (docs/http-api.md). */
typedef struct ilab_server_config {
    const char *host;            /* address to bind, e.g. "127.0.0.1" */
    int port;                    /* 0 = any free port (see ilab_server_port) */
    size_t max_body_bytes;       /* larger request bodies get 413 */
    int request_timeout_seconds; /* a connection idle this long while its request
                                    body or response moves is closed */
    double head_timeout_seconds; /* a request head must be complete this long after
                                    the connection opened or its last response ended */
    int max_connections;         /* open connections in all (default 4096) */
    int max_connections_per_client; /* open connections per client address (0 = none) */
    int max_connections_per_loopback_client; /* the same for a loopback address (0 = none:
                                                only max_connections applies) */
    int threads;                 /* event-loop threads (default 2) */
    const char *api_key;         /* NULL/"": no key; else the /v1 routes, /tokenize, /detokenize
                                    need "Authorization: Bearer <api_key>" */
    bool metrics_need_key;       /* /metrics too (when a key is set) */
    bool allow_unauthenticated;  /* serve a non-loopback address without a key */
    const char *access_log;      /* NULL: none; else a file to append a line per request */
    const char *default_backend; /* requests naming no model go to this backend; NULL: to
                                    the only one, and with several they must name one */
    const char *chat_template;   /* NULL/"": each model's own (docs/chat-template.md); else
                                    the named template for every backend (checked by the
                                    caller with ilab_chat_format_named) */
    const char *conformance_reports; /* NULL/"": none; else a folder of inferlab-conformance
                                        JSON reports: GET /v1/status shows each plugin
                                        file's latest result (by its SHA-256) */
    bool several;                /* serving a folder (or a list): /health lists each
                                    backend and answers 200 while any one serves */
} ilab_server_config;

/* One version of one backend, as the caller made it (cmd_serve: a session
 * and its engine). The server serves it until a newer version of the same
 * name replaces it or the backend is removed, lets the requests it is
 * running finish, then calls `release(owner)` -- in ilab_server_reap, or in
 * ilab_server_destroy -- which destroys the engine and closes the library. Requests hold a reference on the version they run on, so a
 * version is never released under a request. ADR 0015. */
typedef struct ilab_server_backend {
    const char *name;                  /* the plugin's name, or the served model's name
                                          (serve --model NAME=FILE) (required; copied) */
    const char *model_id;              /* the id /v1/models lists it under, instead of the
                                          model's own name (may be NULL; copied) */
    ilab_engine *engine;               /* NULL when the backend is not serving */
    const ilab_plugin *plugin;         /* NULL when it could not be opened at all */
    ilab_backend_t *backend;           /* the engine's; not called directly while it runs */
    const ilab_backend_api_t *api;
    const char *unavailable_reason;    /* with no engine: why (copied); /health says it and
                                          the backend's requests get 503 with it */
    void (*release)(void *owner);      /* may be NULL */
    void *owner;
} ilab_server_backend;

/* Bind and start serving `n` backends (the event-loop threads run inside
 * libmicrohttpd). The versions are taken: on failure too, each one with an
 * engine is released. Errors name the address, or the backend whose
 * vocabulary could not be read, and what failed. `cfg` is copied; its
 * strings are borrowed and must outlive the server. Main thread. */
ilab_status ilab_server_start(const ilab_server_config *cfg, const ilab_server_backend *bes,
                              size_t n, char *err, size_t err_cap, ilab_server **out);

/* The bound TCP port (the real one when cfg->port was 0). Any thread. */
int ilab_server_port(const ilab_server *s);

/* What is served, for the start-up line: "model 'paced-bigram'" with one
 * backend, "models 'a' (backend x), 'b' (backend y)" with several, and the
 * backends not serving. Any thread. */
void ilab_server_describe(ilab_server *s, char *out, size_t cap);

/* --- reload: Main thread (the one that loads plugins), never a handler ------- */

/* Serve `be` (which has an engine) as the backend be->name from now on: its
 * vocabulary is read first, and when that fails the version is refused
 * (released, `err` says why) and the previous one keeps serving. Otherwise
 * new requests go to `be` at once and the previous version, if any, is
 * retired: released once its last request ends. Taken, like start's;
 * be->name is copied. */
ilab_status ilab_server_install(ilab_server *s, const ilab_server_backend *be, char *err,
                                size_t err_cap);

/* The backend `name` stops serving (a new one is created when unknown):
 * with `removed` it is gone from the folder (no longer listed; its
 * requests get 404), else it is listed as not serving with `reason` (503).
 * A current version is retired as by ilab_server_install. */
void ilab_server_set_down(ilab_server *s, const char *name, const char *reason, bool removed);

/* The worker process of `name`'s instance died (host/isolation): it stops
 * serving as by ilab_server_set_down, listed in /health with the status
 * "restarting" (a new worker is on its way) or, with `failed`, "failed"
 * (it kept dying: no more restarts until its file changes), and `reason`. */
void ilab_server_set_worker_down(ilab_server *s, const char *name, bool failed,
                                 const char *reason);
/* A new worker serves `name` again after one died: counted in /metrics
 * (inferlab_backend_restarts_total). Call after ilab_server_install. */
void ilab_server_note_restart(ilab_server *s, const char *name);

/* A reload of `name` was refused (the new file failed a check): `reason`
 * is kept for /health and counted in /metrics; the current version is
 * untouched. */
void ilab_server_note_refusal(ilab_server *s, const char *name, const char *reason);

/* The plugin files of the folders as the loader saw them: a JSON array of
 * `inferlab list --json`'s rows, each with "sha256" (copied), shown by
 * GET /v1/status. Call after the start and after each reload. Any thread. */
void ilab_server_set_plugins(ilab_server *s, const char *plugins_json);

/* Versions retired and not yet released (still running requests, or
 * waiting for ilab_server_reap). Any thread. */
size_t ilab_server_retired_count(ilab_server *s);

/* Readable (poll) when a retired version's last request has ended. Owned
 * by the server; any thread. */
int ilab_server_reap_fd(const ilab_server *s);
/* Release every retired version whose requests have all ended; returns
 * how many. Call it on the thread that loads plugins. */
size_t ilab_server_reap(ilab_server *s);

/* Graceful stop: stop accepting connections, let in-flight requests finish
 * for up to `grace_seconds`, then cancel the rest (their streams end with
 * finish_reason "cancelled") and close every connection. Main thread. */
void ilab_server_shutdown(ilab_server *s, double grace_seconds);

/* Stop (if not yet), release every version and free. Main thread, never
 * from a request handler (it stops the event loop). */
void ilab_server_destroy(ilab_server *s);

#endif
