/* The HTTP server behind `inferlab serve`: an OpenAI-compatible API
 * (docs/http-api.md) on libmicrohttpd, one thread per connection, sharing
 * one engine (its continuous batch) among every client. */
#ifndef ILAB_SERVER_SERVER_H
#define ILAB_SERVER_SERVER_H

#include <stddef.h>

#include "inferlab/inferlab.h"
#include "../loader/plugin_loader.h"
#include "../runtime/engine.h"

typedef struct ilab_server ilab_server;

typedef struct ilab_server_config {
    const char *host;            /* address to bind, e.g. "127.0.0.1" */
    int port;                    /* 0 = any free port (see ilab_server_port) */
    size_t max_body_bytes;       /* larger request bodies get 413 */
    int request_timeout_seconds; /* a connection idle this long is closed */
    int max_connections;         /* concurrent connections (one thread each) */
} ilab_server_config;

/* What the server serves. Borrowed: everything must outlive the server. */
typedef struct ilab_server_backend {
    ilab_engine *engine;               /* NULL when the backend is unavailable */
    const ilab_plugin *plugin;         /* NULL when it could not be opened at all */
    ilab_backend_t *backend;           /* the engine's; not called directly while it runs */
    const ilab_backend_api_t *api;
    const char *unavailable_reason;    /* non-NULL: /health and every model endpoint
                                          answer 503 with it */
} ilab_server_backend;

/* Bind and start serving (connection threads run inside libmicrohttpd).
 * Errors name the address and what failed. */
ilab_status ilab_server_start(const ilab_server_config *cfg, const ilab_server_backend *be,
                              char *err, size_t err_cap, ilab_server **out);

/* The bound TCP port (the real one when cfg->port was 0). */
int ilab_server_port(const ilab_server *s);

/* The model id clients name in "model" (the model's name, else the plugin's). */
const char *ilab_server_model_id(const ilab_server *s);

/* Graceful stop: stop accepting connections, let in-flight requests finish
 * for up to `grace_seconds`, then cancel the rest (their streams end with
 * finish_reason "cancelled") and close every connection. Main thread. */
void ilab_server_shutdown(ilab_server *s, double grace_seconds);

/* Stop (if not yet) and free. The engine is not touched: destroy it after. */
void ilab_server_destroy(ilab_server *s);

#endif
