/* A backend's front desk: the thread that makes the backend calls an HTTP
 * request needs before its response can start (the prompt's tokenize, the
 * chat prompt's pieces, the engine's submit; /tokenize and /detokenize).
 *
 * Why: a libmicrohttpd thread must never wait on a backend. A backend that
 * hangs in eval() holds its engine's backend lock, and a tokenize() made
 * on an HTTP thread would wait for that lock; two such requests froze the
 * whole server (both HTTP threads) until the call deadline (ADR 0020). With
 * the desk, the request's connection is suspended while its calls run here,
 * so a hung backend costs only its own requests, and each backend's calls
 * still run one after another as they did on the HTTP threads.
 *
 * One desk per loaded version of a backend (backends.c); its thread runs
 * the posted jobs in order. */
#ifndef ILAB_SERVER_BACKEND_DESK_H
#define ILAB_SERVER_BACKEND_DESK_H

#include <microhttpd.h>
#include <stdbool.h>

#include "routes.h"

typedef struct ilab_desk ilab_desk;

/* A desk with its thread running; NULL when no thread could be made. */
ilab_desk *ilab_desk_start(void);

/* Run what is queued, then end the thread and free the desk. */
void ilab_desk_stop(ilab_desk *d);

/* On the desk thread: the request's backend calls. Must not answer the
 * connection (libmicrohttpd wants that on its own threads). */
typedef void (*ilab_desk_work_fn)(void *ctx);

/* Run `work(ctx)` on desk `d` for the request `req` (a route handler's),
 * its connection `c` suspended meanwhile. Once it has run, `answer(s, c,
 * ctx)` runs on an HTTP thread, and again after every later resume of the
 * connection, until it queues a response; `release(ctx)` runs when the
 * request ends. `d` NULL, or a desk that is stopping: `work` runs here and
 * now. Out of memory: `release(ctx)`, then a 500. Returns the handler's
 * result. */
enum MHD_Result ilab_desk_defer(ilab_server *s, struct MHD_Connection *c,
                                const ilab_http_request *req, ilab_desk *d,
                                ilab_desk_work_fn work, ilab_continue_fn answer,
                                void (*release)(void *ctx), void *ctx);

#endif
