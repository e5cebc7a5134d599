/* The HTTP routes of `inferlab serve`: one table of path, method and handler
 * (routes.c). A handler gets the whole request (body read, limits checked)
 * and queues exactly one response on the connection, or returns MHD_NO to
 * close it. Handlers run on a libmicrohttpd thread. */
#ifndef ILAB_SERVER_ROUTES_H
#define ILAB_SERVER_ROUTES_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct ilab_server ilab_server;
typedef struct ilab_request_state ilab_request_state; /* server.c: one request's own state */

/* One complete request as the router hands it to a handler. Borrowed: valid
 * during the handler call only. */
typedef struct ilab_http_request {
    const char *path;     /* the URL path, without the query string */
    const char *method;   /* "GET", "HEAD", "POST", ... */
    const char *path_arg; /* the tail after a prefix route's '/' ("{id}"), else NULL */
    const char *body;     /* NUL-terminated; "" when there is none */
    size_t body_len;
    ilab_request_state *state;
} ilab_http_request;

/* A handler that cannot answer at once (it waits for the engine) defers:
 * each later call of the access handler for this request (after the
 * connection is resumed) goes to `next(s, c, ctx)` instead of the router,
 * and `release(ctx)` runs when the request ends, answered or not. */
typedef enum MHD_Result (*ilab_continue_fn)(ilab_server *s, struct MHD_Connection *c,
                                            void *ctx);
void ilab_http_request_defer(const ilab_http_request *req, ilab_continue_fn next,
                             void (*release)(void *ctx), void *ctx);

/* The connection monitor's record of the request's connection (may be NULL). */
struct ilab_conn *ilab_http_request_conn(const ilab_http_request *req);

typedef enum MHD_Result (*ilab_route_fn)(ilab_server *s, struct MHD_Connection *c,
                                         const ilab_http_request *req);

/* Who may call a route when the server has an API key. */
typedef enum ilab_route_access {
    ILAB_ROUTE_OPEN,    /* anyone (/health: load balancers carry no key) */
    ILAB_ROUTE_KEY,     /* "Authorization: Bearer KEY" */
    ILAB_ROUTE_METRICS, /* open unless the server is told metrics need the key */
} ilab_route_access;

typedef struct ilab_route {
    const char *path;      /* exact path; with `prefix`, the path up to and with its '/' */
    const char *method;    /* "GET" routes also answer HEAD (libmicrohttpd drops the body) */
    ilab_route_fn handler;
    bool prefix;           /* matches path + one non-empty segment (path_arg) */
    ilab_route_access access;
} ilab_route;

/* Find the route for req->path and req->method and run it (path_arg filled
 * in); 404 for an unknown path, 405 (naming the allowed method) for a known
 * path with another method. */
enum MHD_Result ilab_server_route(ilab_server *s, struct MHD_Connection *c,
                                  const ilab_http_request *req);

/* The handlers, each in the file of its concern. */
enum MHD_Result ilab_handle_health(ilab_server *s, struct MHD_Connection *c,
                                   const ilab_http_request *req);       /* status_endpoints.c */
enum MHD_Result ilab_handle_metrics(ilab_server *s, struct MHD_Connection *c,
                                    const ilab_http_request *req);      /* status_endpoints.c */
enum MHD_Result ilab_handle_status_page(ilab_server *s, struct MHD_Connection *c,
                                        const ilab_http_request *req);  /* status_page.c */
enum MHD_Result ilab_handle_status(ilab_server *s, struct MHD_Connection *c,
                                   const ilab_http_request *req);       /* status_json.c */
enum MHD_Result ilab_handle_models(ilab_server *s, struct MHD_Connection *c,
                                   const ilab_http_request *req);       /* models.c */
enum MHD_Result ilab_handle_model(ilab_server *s, struct MHD_Connection *c,
                                  const ilab_http_request *req);        /* models.c */
enum MHD_Result ilab_handle_completions(ilab_server *s, struct MHD_Connection *c,
                                        const ilab_http_request *req);  /* completions.c */
enum MHD_Result ilab_handle_chat_completions(ilab_server *s, struct MHD_Connection *c,
                                             const ilab_http_request *req); /* completions.c */
enum MHD_Result ilab_handle_sglang_generate(ilab_server *s, struct MHD_Connection *c,
                                            const ilab_http_request *req); /* completions.c */
enum MHD_Result ilab_handle_health_generate(ilab_server *s, struct MHD_Connection *c,
                                            const ilab_http_request *req); /* completions.c */
enum MHD_Result ilab_handle_model_info(ilab_server *s, struct MHD_Connection *c,
                                       const ilab_http_request *req);   /* models.c */
enum MHD_Result ilab_handle_tokenize(ilab_server *s, struct MHD_Connection *c,
                                     const ilab_http_request *req);     /* tokenize.c */
enum MHD_Result ilab_handle_detokenize(ilab_server *s, struct MHD_Connection *c,
                                       const ilab_http_request *req);   /* tokenize.c */

#endif
