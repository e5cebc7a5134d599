/* The libmicrohttpd daemon: start, request bodies, hand-off to the router
 * (routes.c), and shutdown. */
#include "server_internal.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <jansson.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../isolation/proxy.h"
#include "../runtime/metrics.h"
#include "bytes.h"
#include "http_framing.h"

/* One request's own state (libmicrohttpd's per-request context): its body
 * as it arrives, and a deferred handler's continuation. */
struct ilab_request_state {
    char *data;
    size_t len, cap;
    bool too_large;
    ilab_conn *conn;            /* the monitor's record of the connection */
    ilab_continue_fn next;      /* set by ilab_http_request_defer */
    void (*release)(void *ctx);
    void *ctx;
    struct timespec began;      /* for the access log */
    char method[16];
    char *path;                 /* owned copy, for the access log */
    struct MHD_Connection *c;
    bool handled;               /* the access handler has been called */
    bool refused;               /* answered on the socket (refuse_on_socket) */
    bool refused_head;          /* answered from its head alone (framing): nothing more */
};

/* The request whose request line this libmicrohttpd thread parsed last
 * (set by on_uri, cleared when that request ends on this same thread): the
 * only way to find the connection behind a library error message. */
static _Thread_local ilab_request_state *tls_last_request;

void ilab_http_request_defer(const ilab_http_request *req, ilab_continue_fn next,
                             void (*release)(void *ctx), void *ctx)
{
    req->state->next = next;
    req->state->release = release;
    req->state->ctx = ctx;
}

ilab_conn *ilab_http_request_conn(const ilab_http_request *req)
{
    return req->state->conn;
}

static ilab_conn *conn_of(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* --- requests -------------------------------------------------------------- */

/* Answer `c` directly on its socket with the documented JSON error and
 * `Connection: close`, then shut the socket down. For the cases where
 * libmicrohttpd 0.9.75 itself would answer wrongly (see mhd_log, on_uri):
 * whatever it then tries to write fails, and it closes the connection. */
static void refuse_fd(int fd, const ilab_api_error *e)
{
    char *body = ilab_api_error_json(e);
    if (body) {
        char head[256];
        int n = snprintf(head, sizeof head, "HTTP/1.1 %u %s\r\nContent-Type: application/json"
                         "\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
                         e->http_status, MHD_get_reason_phrase_for(e->http_status),
                         strlen(body));
        /* A few hundred bytes into an idle socket's buffer: they fit. */
        (void)!send(fd, head, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
        (void)!send(fd, body, strlen(body), MSG_NOSIGNAL | MSG_DONTWAIT);
        shutdown(fd, SHUT_RDWR);
    }
    free(body);
}

static void refuse_on_socket(ilab_request_state *rs, const ilab_api_error *e)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(rs->c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (ci)
        refuse_fd(ci->connect_fd, e);
    rs->refused = true;
}

/* More query parameters than this are refused (414): libmicrohttpd 0.9.75
 * runs out of its per-connection memory parsing a few hundred and then
 * never answers. */
#define MAX_QUERY_PARAMS 128

static size_t query_params(const char *uri)
{
    const char *q = strchr(uri, '?');
    if (!q || !q[1])
        return 0;
    size_t n = 1;
    for (const char *p = q + 1; *p; p++)
        n += *p == '&';
    return n;
}

/* libmicrohttpd's URI callback: the request line has been parsed (before
 * its headers). The request's state starts here. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *c)
{
    ilab_server *s = cls;
    ilab_request_state *rs = calloc(1, sizeof *rs);
    if (!rs)
        return NULL;
    rs->c = c;
    rs->conn = conn_of(c);
    clock_gettime(CLOCK_MONOTONIC, &rs->began);
    rs->path = strdup(uri);
    tls_last_request = rs;
    size_t n = query_params(uri);
    if (n > MAX_QUERY_PARAMS) {
        ilab_api_error e;
        ilab_api_fail(&e, 414, NULL, "the query string has %zu parameters; at most %d are "
                                     "accepted", n, MAX_QUERY_PARAMS);
        ilab_server_count_status(s, 414);
        ilab_server_count_protocol_error(s, 414);
        refuse_on_socket(rs, &e);
    }
    return rs;
}

/* The head's fields in the order they came, for the framing check. */
typedef struct field_list {
    ilab_http_field *v;
    size_t n, cap;
    bool oom;
} field_list;

static enum MHD_Result collect_field(void *cls, enum MHD_ValueKind kind, const char *name,
                                     size_t name_len, const char *value, size_t value_len)
{
    (void)kind;
    field_list *l = cls;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 32;
        ilab_http_field *grown = realloc(l->v, cap * sizeof *grown);
        if (!grown) {
            l->oom = true;
            return MHD_NO;
        }
        l->v = grown;
        l->cap = cap;
    }
    l->v[l->n++] = (ilab_http_field){name, name_len, value ? value : "", value ? value_len : 0};
    return MHD_YES;
}

/* RFC 9112 framing (http_framing.h) on the head libmicrohttpd parsed in
 * place: `method` is its first byte (the request line starts with it). */
static bool framing_ok(struct MHD_Connection *c, const char *method, const char *target,
                       const char *version, ilab_api_error *e)
{
    const union MHD_ConnectionInfo *hs =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
    field_list l = {0};
    MHD_get_connection_values_n(c, MHD_HEADER_KIND, collect_field, &l);
    bool ok;
    if (!hs || l.oom) {
        ok = false;
        ilab_api_fail(e, 500, NULL, l.oom ? "out of memory checking the request head"
                                          : "the request head's size is not known");
    } else {
        ilab_http_head h = {.start = method, .size = hs->header_size,
                            .target = target ? target : "",
                            .target_len = target ? strlen(target) : 0, .version = version,
                            .version_len = strlen(version), .fields = l.v, .n_fields = l.n};
        ok = ilab_http_framing_ok(&h, e);
    }
    free(l.v);
    e->close = !ok;
    return ok;
}

/* The first call for a request: its head is complete. */
static enum MHD_Result request_begin(ilab_server *s, struct MHD_Connection *c,
                                     ilab_request_state *rs, const char *method,
                                     const char *version)
{
    rs->handled = true;
    snprintf(rs->method, sizeof rs->method, "%s", method);
    if (rs->refused)
        return MHD_NO; /* answered already (on_uri) */
    ilab_conn_request_began(s->monitor, rs->conn);
    /* A head that does not frame its body by the RFC is refused before a
     * byte of the body is read, and the connection closed: whatever follows
     * cannot be told apart from the next request (request smuggling). */
    ilab_api_error fe;
    if (!framing_ok(c, method, rs->path, version, &fe)) {
        rs->refused_head = true;
        ilab_server_count_protocol_error(s, fe.http_status);
        return ilab_server_send_error(s, c, &fe);
    }
    /* A declared length over the limit is refused before reading it. */
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl && strtoull(cl, NULL, 10) > s->cfg.max_body_bytes) {
        rs->too_large = true;
        ilab_api_error e;
        ilab_api_fail(&e, 413, NULL, "request body of %s bytes is over the limit of %zu",
                      cl, s->cfg.max_body_bytes);
        return ilab_server_send_error(s, c, &e);
    }
    return MHD_YES;
}

static enum MHD_Result body_append(ilab_server *s, ilab_request_state *rs, const char *data,
                                   size_t n)
{
    if (rs->too_large || rs->len + n > s->cfg.max_body_bytes) {
        rs->too_large = true; /* keep reading (chunked bodies), keep nothing */
        return MHD_YES;
    }
    return ilab_bytes_append(&rs->data, &rs->len, &rs->cap, data, n) ? MHD_YES : MHD_NO;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    ilab_server *s = cls;
    ilab_request_state *rs = *con_cls;
    if (!rs)
        return MHD_NO; /* out of memory in on_uri */
    if (!rs->handled)
        return request_begin(s, c, rs, method, version);
    if (rs->refused_head) { /* its answer is queued; keep nothing, answer nothing more */
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        return body_append(s, rs, upload_data, n);
    }
    if (rs->next)
        return rs->next(s, c, rs->ctx);
    if (rs->too_large) {
        ilab_api_error e;
        ilab_api_fail(&e, 413, NULL, "request body is over the limit of %zu bytes",
                      s->cfg.max_body_bytes);
        return ilab_server_send_error(s, c, &e);
    }
    ilab_http_request req = {.path = url, .method = method, .body = rs->data ? rs->data : "",
                             .body_len = rs->len, .state = rs};
    return ilab_server_route(s, c, &req);
}

static void client_address(struct MHD_Connection *c, char *out, size_t cap)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (!ci || !ci->client_addr)
        return;
    const struct sockaddr *a = ci->client_addr;
    if (a->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)a)->sin_addr, out, (socklen_t)cap);
    else if (a->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)a)->sin6_addr, out, (socklen_t)cap);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    ilab_server *s = cls;
    (void)toe;
    ilab_request_state *rs = *con_cls;
    if (!rs)
        return;
    if (tls_last_request == rs)
        tls_last_request = NULL;
    if (rs->release)
        rs->release(rs->ctx);
    ilab_conn_request_ended(s->monitor, rs->conn);
    if (s->log.access) {
        const union MHD_ConnectionInfo *st =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_HTTP_STATUS);
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        double secs = (double)(now.tv_sec - rs->began.tv_sec) +
                      (double)(now.tv_nsec - rs->began.tv_nsec) / 1e9;
        char client[INET6_ADDRSTRLEN] = "-";
        client_address(c, client, sizeof client);
        /* 0: no response was queued (the client left, or the connection
         * was closed on an error). */
        ilab_server_log_access(&s->log, client, rs->method[0] ? rs->method : "-",
                               rs->path ? rs->path : "-",
                               st ? st->http_status : 0, secs);
    }
    free(rs->path);
    free(rs->data);
    free(rs);
    *con_cls = NULL;
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    ilab_server *s = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        const union MHD_ConnectionInfo *ai =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        *socket_context = ci ? ilab_conn_opened(s->monitor, ci->connect_fd,
                                                ai ? ai->client_addr : NULL) : NULL;
    } else {
        ilab_conn_closed(s->monitor, *socket_context);
        *socket_context = NULL;
    }
}

/* --- lifecycle -------------------------------------------------------------- */

static ilab_status resolve(const char *host, int port, struct sockaddr_storage *addr,
                           socklen_t *addr_len, char *err, size_t err_cap)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE};
    struct addrinfo *res = NULL;
    char port_s[16];
    snprintf(port_s, sizeof port_s, "%d", port);
    int rc = getaddrinfo(host, port_s, &hints, &res);
    if (rc != 0 || !res) {
        snprintf(err, err_cap, "cannot resolve --host '%s': %s", host, gai_strerror(rc));
        return ILAB_INVALID_ARGUMENT;
    }
    memcpy(addr, res->ai_addr, res->ai_addrlen);
    *addr_len = res->ai_addrlen;
    freeaddrinfo(res);
    return ILAB_OK;
}

/* libmicrohttpd's messages, rate-limited. Its own error responses (bad
 * request line, header too long, malformed chunked body ...) reach the
 * application only as this log message, whose first argument is the
 * status: that is how they are counted in /metrics. */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    ilab_server *s = cls;
    static const char own_error[] = "Error processing request (HTTP response code is %u";
    if (!strncmp(fmt, own_error, sizeof own_error - 1)) {
        va_list copy;
        va_copy(copy, ap);
        unsigned status = va_arg(copy, unsigned);
        va_end(copy);
        ilab_request_state *rs = tls_last_request;
        /* Not twice: on_uri counted the requests it refused itself. */
        if (!(rs && rs->refused && !rs->handled)) {
            ilab_server_count_status(s, status);
            ilab_server_count_protocol_error(s, status);
        }
        /* Errors found in a complete head (a bad Content-Length) are
         * answered by 0.9.75 with its status line and headers twice. The
         * request is this thread's last one when its head is complete
         * (header size known) and yet no handler ran: answer it properly. */
        if (rs && !rs->handled && !rs->refused &&
            MHD_get_connection_info(rs->c, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE)) {
            ilab_api_error e;
            ilab_api_fail(&e, status, NULL, status == 413
                          ? "the Content-Length header is too large a number"
                          : "malformed request: a header has a value that is not valid "
                            "(e.g. Content-Length is not a number)");
            refuse_on_socket(rs, &e);
        }
        /* An unsupported HTTP version is refused by 0.9.75 before the URI
         * callback, with an HTML page: no callback names the connection,
         * but it is this thread's only one waiting for a head, if only one
         * is (ilab_conn_sole_head_waiter). With several, the page stays. */
        int fd = status == 505 ? ilab_conn_sole_head_waiter(s->monitor) : -1;
        if (fd >= 0) {
            ilab_api_error e;
            ilab_api_fail(&e, 505, NULL, "the request's HTTP version is not supported "
                          "(supported: HTTP/1.0, HTTP/1.1)");
            refuse_fd(fd, &e);
        }
    }
    ilab_server_log_error(&s->log, "http: ", fmt, ap);
}

/* Room for every connection's socket: raise the soft descriptor limit
 * towards the hard one. Returns the connection limit that fits. */
static unsigned fit_fd_limit(unsigned want)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl))
        return want;
    rlim_t need = (rlim_t)want + 64; /* listen socket, epoll, pipes, plugin files */
    if (rl.rlim_cur < need) {
        rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need ? need : rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    if (rl.rlim_cur < need) {
        unsigned fit = rl.rlim_cur > 128 ? (unsigned)(rl.rlim_cur - 64) : 64;
        fprintf(stderr, "inferlab serve: the open-file limit (%llu) allows %u connections, "
                        "not the %u configured\n", (unsigned long long)rl.rlim_cur, fit, want);
        return fit;
    }
    return want;
}

static ilab_status start_daemon(ilab_server *s, const struct sockaddr_storage *addr,
                                char *err, size_t err_cap)
{
    const ilab_server_config *cfg = &s->cfg;
    /* epoll event loop on a small thread pool; handlers never block (a
     * generation suspends its connection), so two threads serve thousands
     * of connections. ADR 0014. */
    unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME |
                     MHD_USE_ITC | MHD_USE_ERROR_LOG;
    if (addr->ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    unsigned max_conn = fit_fd_limit(cfg->max_connections > 0 ? (unsigned)cfg->max_connections
                                                              : 4096);
    unsigned idle = cfg->request_timeout_seconds > 0 ? (unsigned)cfg->request_timeout_seconds
                                                     : 60;
    unsigned threads = cfg->threads > 0 ? (unsigned)cfg->threads : 2;
    s->daemon = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s,
                                 MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
                                 MHD_OPTION_SOCK_ADDR, (const struct sockaddr *)addr,
                                 MHD_OPTION_THREAD_POOL_SIZE, threads,
                                 MHD_OPTION_CONNECTION_TIMEOUT, idle,
                                 MHD_OPTION_CONNECTION_LIMIT, max_conn,
                                 MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u,
                                 MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                                 MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                                 MHD_OPTION_URI_LOG_CALLBACK, on_uri, s,
                                 MHD_OPTION_END);
    if (!s->daemon) {
        snprintf(err, err_cap, "cannot listen on %s:%d (address in use, or not an address "
                               "of this machine?)", cfg->host ? cfg->host : "127.0.0.1",
                 cfg->port);
        return ILAB_IO;
    }
    return ILAB_OK;
}

ilab_status ilab_server_start(const ilab_server_config *cfg, const ilab_server_backend *bes,
                              size_t n, char *err, size_t err_cap, ilab_server **out)
{
    bool bad = !cfg || !out || (n && !bes);
    for (size_t i = 0; !bad && i < n; i++)
        bad = !bes[i].name || (bes[i].engine && (!bes[i].plugin || !bes[i].api ||
                                                 !bes[i].backend));
    ilab_server *s = bad ? NULL : calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, err_cap, bad ? "ilab_server_start: missing configuration or backend"
                                   : "out of memory");
        for (size_t i = 0; bes && i < n; i++)
            if (bes[i].release)
                bes[i].release(bes[i].owner);
        return bad ? ILAB_INVALID_ARGUMENT : ILAB_OUT_OF_MEMORY;
    }
    s->cfg = *cfg;
    snprintf(s->default_backend, sizeof s->default_backend, "%s",
             cfg->default_backend ? cfg->default_backend : "");
    s->cfg.default_backend = NULL; /* borrowed: the copy above is used */
    s->started = time(NULL);
    pthread_mutex_init(&s->stats_mu, NULL);
    pthread_cond_init(&s->stats_cond, NULL);
    atomic_init(&s->draining, false);
    atomic_init(&s->cancelling, false);
    ilab_status st = ilab_backends_init(s);
    if (st != ILAB_OK)
        snprintf(err, err_cap, "creating the reaper event: %s", ilab_status_name(st));
    if (st == ILAB_OK)
        st = ilab_backends_add_initial(s, bes, n, err, err_cap);
    else
        for (size_t i = 0; i < n; i++)
            if (bes[i].release)
                bes[i].release(bes[i].owner);
    if (st == ILAB_OK && !ilab_server_log_open(&s->log, cfg->access_log, err, err_cap))
        st = ILAB_IO;
    else if (st == ILAB_OK)
        s->log_open = true;
    if (st != ILAB_OK) {
        ilab_server_destroy(s);
        return st;
    }

    struct sockaddr_storage addr;
    socklen_t addr_len = 0;
    st = resolve(cfg->host ? cfg->host : "127.0.0.1", cfg->port, &addr, &addr_len,
                             err, err_cap);
    if (st == ILAB_OK && !ilab_addr_is_loopback((const struct sockaddr *)&addr) &&
        !(cfg->api_key && cfg->api_key[0]) && !cfg->allow_unauthenticated) {
        snprintf(err, err_cap, "refusing to serve '%s': it is not a loopback address and no "
                               "API key is set, so anyone who can reach it could use it; set "
                               "one (--api-key KEY, INFERLAB_API_KEY or server.api_key) or "
                               "pass --allow-unauthenticated",
                 cfg->host ? cfg->host : "127.0.0.1");
        st = ILAB_INVALID_ARGUMENT;
    }
    if (st == ILAB_OK) {
        double head = cfg->head_timeout_seconds > 0 ? cfg->head_timeout_seconds : 10.0;
        st = ilab_conn_monitor_start(head, &s->monitor);
        if (st != ILAB_OK)
            snprintf(err, err_cap, "starting the connection monitor: %s", ilab_status_name(st));
        else /* the per-address budgets: the monitor's, not libmicrohttpd's (ADR 0019) */
            ilab_conn_monitor_set_limits(s->monitor, cfg->max_connections_per_client,
                                         cfg->max_connections_per_loopback_client);
    }
    if (st == ILAB_OK)
        st = start_daemon(s, &addr, err, err_cap);
    if (st != ILAB_OK) {
        ilab_server_destroy(s);
        return st;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : cfg->port;
    *out = s;
    return ILAB_OK;
}

int ilab_server_port(const ilab_server *s)
{
    return s->port;
}

/* Wait until no generation response is active, or `seconds` pass. */
static bool wait_idle(ilab_server *s, double seconds)
{
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    double whole = (double)(long)seconds;
    deadline.tv_sec += (time_t)whole;
    deadline.tv_nsec += (long)((seconds - whole) * 1e9);
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&s->stats_mu);
    while (s->active_generations > 0 || s->inflight > 0 || s->desk_requests > 0) {
        if (pthread_cond_timedwait(&s->stats_cond, &s->stats_mu, &deadline))
            break;
    }
    bool idle = s->active_generations == 0 && s->inflight == 0 && s->desk_requests == 0;
    pthread_mutex_unlock(&s->stats_mu);
    return idle;
}

/* After the grace period: how long the engines get to end the cancelled
 * requests at the end of their step. Past that, a backend in a worker
 * process that is still inside a call is killed: its requests end at once,
 * cancelled (their cancel came first), so shutdown takes grace + about
 * half a second whatever the backend does (ADR 0020). A backend in this
 * process (--isolation none) cannot be stopped: it gets one step of the
 * slowest backend, up to STEP_WAIT_SECONDS, before the responses are cut
 * short (ADR 0019). */
#define CANCEL_WAIT_SECONDS 0.5
#define KILLED_WAIT_SECONDS 0.4
#define STEP_WAIT_SECONDS 30.0
#define ABORT_WAIT_SECONDS 0.25

void ilab_server_shutdown(ilab_server *s, double grace_seconds)
{
    if (!s || !s->daemon)
        return;
    atomic_store(&s->draining, true);
    /* Stop accepting: the listening socket closes; open connections go on. */
    MHD_socket lsock = MHD_quiesce_daemon(s->daemon);
    if (lsock != MHD_INVALID_SOCKET)
        close(lsock);
    if (!wait_idle(s, grace_seconds > 0 ? grace_seconds : 0)) {
        /* Cancelled requests end with finish_reason "cancelled": streams get
         * their last chunk and [DONE], whole responses their 200. */
        int n = ilab_server_end_generations(s, false);
        fprintf(stderr, "inferlab serve: grace period over, cancelling %d in-flight "
                        "request(s)\n", n);
        if (!wait_idle(s, CANCEL_WAIT_SECONDS)) {
            int killed = ilab_proxy_kill_busy("the server is shutting down");
            if (killed)
                fprintf(stderr, "inferlab serve: killed %d backend worker(s) still inside a "
                                "call; their requests end cancelled\n", killed);
            if (!wait_idle(s, killed ? KILLED_WAIT_SECONDS : STEP_WAIT_SECONDS)) {
                /* Still not over: end the responses anyway, so that no
                 * connection is left suspended when the daemon stops. */
                ilab_server_end_generations(s, true);
                wait_idle(s, ABORT_WAIT_SECONDS);
            }
        }
    }
    MHD_stop_daemon(s->daemon);
    s->daemon = NULL;
}

void ilab_server_destroy(ilab_server *s)
{
    if (!s)
        return;
    if (s->daemon)
        ilab_server_shutdown(s, 0);
    ilab_conn_monitor_stop(s->monitor);
    if (s->log_open)
        ilab_server_log_close(&s->log);
    ilab_backends_destroy(s);
    free(s->plugins_json);
    pthread_cond_destroy(&s->stats_cond);
    pthread_mutex_destroy(&s->stats_mu);
    free(s);
}
