/* The libmicrohttpd daemon: request bodies, routing, the small endpoints
 * (/health, /v1/models, /metrics, /tokenize, /detokenize) and shutdown.
 * The generation endpoints live in completions.c. */
#include "server_internal.h"

#include <arpa/inet.h>
#include <jansson.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../runtime/metrics.h"


static const unsigned counted_codes[ILAB_SERVER_N_CODES] = {200, 400, 404, 405, 413, 500, 503, 408};

/* Per-connection state while a request body arrives. */
typedef struct request_body {
    char *data;
    size_t len, cap;
    bool too_large;
} request_body;

void ilab_server_count_status(ilab_server *s, unsigned status)
{
    size_t i = 0;
    while (i < ILAB_SERVER_N_CODES && counted_codes[i] != status)
        i++;
    pthread_mutex_lock(&s->stats_mu);
    s->requests_by_code[i]++;
    pthread_mutex_unlock(&s->stats_mu);
}

enum MHD_Result ilab_server_send(ilab_server *s, struct MHD_Connection *c, unsigned status,
                                 const char *content_type, char *body)
{
    if (!body) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":"
                                  "\"server_error\",\"param\":null,\"code\":500}}";
        body = strdup(oom);
        status = 500;
        if (!body)
            return MHD_NO;
    }
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    ilab_server_count_status(s, status);
    return ret;
}

static enum MHD_Result send_json(ilab_server *s, struct MHD_Connection *c, unsigned status,
                                 json_t *root)
{
    char *body = root ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    return ilab_server_send(s, c, status, "application/json", body);
}

enum MHD_Result ilab_server_send_error(ilab_server *s, struct MHD_Connection *c,
                                       const ilab_api_error *e)
{
    char *body = ilab_api_error_json(e);
    if (!body)
        return ilab_server_send(s, c, 500, "application/json", NULL);
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    if (e->retry_after > 0) {
        char ra[16];
        snprintf(ra, sizeof ra, "%d", e->retry_after);
        MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, ra);
    }
    enum MHD_Result ret = MHD_queue_response(c, e->http_status, r);
    MHD_destroy_response(r);
    ilab_server_count_status(s, e->http_status);
    return ret;
}

bool ilab_server_client_gone(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci)
        return true;
    struct pollfd pfd = {.fd = ci->connect_fd, .events = POLLRDHUP};
    if (poll(&pfd, 1, 0) <= 0)
        return false;
    return (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

/* --- the small endpoints ------------------------------------------------ */

static bool unavailable(ilab_server *s, ilab_api_error *e)
{
    if (s->be.engine && !s->be.unavailable_reason)
        return false;
    ilab_api_fail(e, 503, NULL, "backend unavailable: %s",
                  s->be.unavailable_reason ? s->be.unavailable_reason : "not started");
    return true;
}

static enum MHD_Result handle_health(ilab_server *s, struct MHD_Connection *c)
{
    ilab_api_error e;
    if (unavailable(s, &e))
        return ilab_server_send_error(s, c, &e);
    if (atomic_load(&s->draining)) {
        ilab_api_fail(&e, 503, NULL, "shutting down");
        return ilab_server_send_error(s, c, &e);
    }
    return send_json(s, c, 200, json_pack("{s:s}", "status", "ok"));
}

static enum MHD_Result handle_models(ilab_server *s, struct MHD_Connection *c)
{
    json_t *data = json_array();
    const char *root = s->be.plugin ? ilab_plugin_entry_of(s->be.plugin)->name : s->model_id;
    json_t *model = json_pack("{s:s, s:s, s:I, s:s, s:s, s:i}", "id", s->model_id, "object",
                              "model", "created", (json_int_t)s->started, "owned_by",
                              "inferlab", "root", root, "max_model_len",
                              s->be.engine ? s->info.max_context : 0);
    json_array_append_new(data, model);
    return send_json(s, c, 200, json_pack("{s:s, s:o}", "object", "list", "data", data));
}

static enum MHD_Result handle_metrics(ilab_server *s, struct MHD_Connection *c)
{
    /* The runtime's process-wide metrics first, then the HTTP layer's own. */
    char *engine_text = ilab_metrics_render();
    pthread_mutex_lock(&s->stats_mu);
    char *own = NULL;
    size_t own_len = 0;
    FILE *f = open_memstream(&own, &own_len);
    if (f) {
        fprintf(f, "# HELP inferlab_http_requests_total HTTP responses by status code.\n"
                   "# TYPE inferlab_http_requests_total counter\n");
        for (size_t i = 0; i < ILAB_SERVER_N_CODES; i++)
            fprintf(f, "inferlab_http_requests_total{code=\"%u\"} %llu\n", counted_codes[i],
                    s->requests_by_code[i]);
        fprintf(f, "inferlab_http_requests_total{code=\"other\"} %llu\n",
                s->requests_by_code[ILAB_SERVER_N_CODES]);
        fprintf(f, "# HELP inferlab_http_inflight_requests Generation requests inside the "
                   "engine (submitted, not yet finished).\n"
                   "# TYPE inferlab_http_inflight_requests gauge\n"
                   "inferlab_http_inflight_requests %d\n", s->inflight);
        fprintf(f, "# HELP inferlab_http_active_responses Generation responses being "
                   "written.\n# TYPE inferlab_http_active_responses gauge\n"
                   "inferlab_http_active_responses %d\n", s->active_generations);
        fprintf(f, "# HELP inferlab_http_finished_total Generation requests by finish "
                   "reason.\n# TYPE inferlab_http_finished_total counter\n");
        for (int r = ILAB_FINISH_STOP; r <= ILAB_FINISH_ERROR; r++)
            fprintf(f, "inferlab_http_finished_total{reason=\"%s\"} %llu\n",
                    ilab_finish_reason_name(r), s->finished_by_reason[r]);
        fprintf(f, "# HELP inferlab_http_client_disconnects_total Clients that left before "
                   "their response ended (their requests are cancelled).\n"
                   "# TYPE inferlab_http_client_disconnects_total counter\n"
                   "inferlab_http_client_disconnects_total %llu\n", s->disconnects);
        fclose(f);
    }
    pthread_mutex_unlock(&s->stats_mu);
    size_t el = engine_text ? strlen(engine_text) : 0;
    char *body = own ? malloc(el + own_len + 1) : NULL;
    if (body) {
        if (el)
            memcpy(body, engine_text, el);
        memcpy(body + el, own, own_len + 1);
    }
    free(own);
    free(engine_text);
    return ilab_server_send(s, c, 200, "text/plain; version=0.0.4", body);
}

/* Check the body's keys against `allowed`; 400 naming the first stranger. */
static json_t *parse_small_body(const char *body, size_t len, const char *const *allowed,
                                ilab_api_error *e)
{
    json_error_t jerr;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        ilab_api_fail(e, 400, NULL, "malformed JSON at line %d, column %d: %s", jerr.line,
                      jerr.column, jerr.text);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        ilab_api_fail(e, 400, NULL, "the request body must be a JSON object");
        return NULL;
    }
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        bool ok = false;
        for (size_t i = 0; allowed[i]; i++)
            ok |= !strcmp(allowed[i], key);
        if (!ok) {
            ilab_api_fail(e, 400, key, "unknown field '%s'", key);
            json_decref(root);
            return NULL;
        }
    }
    return root;
}

static enum MHD_Result handle_tokenize(ilab_server *s, struct MHD_Connection *c,
                                       const char *body, size_t len)
{
    static const char *const allowed[] = {"model", "prompt", "add_special_tokens", NULL};
    ilab_api_error e;
    if (unavailable(s, &e))
        return ilab_server_send_error(s, c, &e);
    json_t *root = parse_small_body(body, len, allowed, &e);
    if (!root)
        return ilab_server_send_error(s, c, &e);
    json_t *prompt = json_object_get(root, "prompt");
    json_t *special = json_object_get(root, "add_special_tokens");
    if (!json_is_string(prompt)) {
        json_decref(root);
        ilab_api_fail(&e, 400, "prompt", "'prompt' must be a string");
        return ilab_server_send_error(s, c, &e);
    }
    if (special && !json_is_boolean(special) && !json_is_null(special)) {
        json_decref(root);
        ilab_api_fail(&e, 400, "add_special_tokens", "'add_special_tokens' must be a boolean");
        return ilab_server_send_error(s, c, &e);
    }
    /* Like vLLM: special tokens (BOS) are added unless asked not to. */
    uint32_t flags = (!special || json_is_null(special) || json_is_true(special))
                         ? ILAB_TOKENIZE_ADD_BOS : 0;
    const char *text = json_string_value(prompt);
    size_t text_len = json_string_length(prompt);
    /* Through the engine: it serialises with the scheduler's backend calls. */
    int32_t *ids = NULL;
    size_t n = 0;
    char msg[256];
    ilab_status st = ilab_engine_tokenize(s->be.engine, text, text_len, flags, msg, sizeof msg,
                                          &ids, &n);
    json_decref(root);
    if (st != ILAB_OK) {
        free(ids);
        ilab_api_error_from_status(&e, st, msg);
        snprintf(e.param, sizeof e.param, "prompt");
        return ilab_server_send_error(s, c, &e);
    }
    json_t *tokens = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(tokens, json_integer(ids[i]));
    free(ids);
    return send_json(s, c, 200,
                     json_pack("{s:o, s:I, s:i}", "tokens", tokens, "count", (json_int_t)n,
                               "max_model_len", s->info.max_context));
}

static enum MHD_Result handle_detokenize(ilab_server *s, struct MHD_Connection *c,
                                         const char *body, size_t len)
{
    static const char *const allowed[] = {"model", "tokens", NULL};
    ilab_api_error e;
    if (unavailable(s, &e))
        return ilab_server_send_error(s, c, &e);
    json_t *root = parse_small_body(body, len, allowed, &e);
    if (!root)
        return ilab_server_send_error(s, c, &e);
    json_t *tokens = json_object_get(root, "tokens");
    if (!json_is_array(tokens)) {
        json_decref(root);
        ilab_api_fail(&e, 400, "tokens", "'tokens' must be an array of token ids");
        return ilab_server_send_error(s, c, &e);
    }
    size_t n = json_array_size(tokens);
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids) {
        json_decref(root);
        return ilab_server_send(s, c, 500, "application/json", NULL);
    }
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(tokens, i);
        if (!json_is_integer(t) || json_integer_value(t) < 0 ||
            json_integer_value(t) >= s->info.vocab_size) {
            free(ids);
            json_decref(root);
            ilab_api_fail(&e, 400, "tokens",
                          "'tokens[%zu]' must be a token id in [0, %d)", i, s->info.vocab_size);
            return ilab_server_send_error(s, c, &e);
        }
        ids[i] = (int32_t)json_integer_value(t);
    }
    json_decref(root);
    char *text = NULL;
    size_t out_len = 0;
    char msg[256];
    ilab_status st = ilab_engine_detokenize(s->be.engine, ids, n, msg, sizeof msg, &text,
                                            &out_len);
    free(ids);
    if (st != ILAB_OK) {
        free(text);
        ilab_api_error_from_status(&e, st, msg);
        snprintf(e.param, sizeof e.param, "tokens");
        return ilab_server_send_error(s, c, &e);
    }
    json_t *str = json_stringn(text, out_len);
    free(text);
    if (!str) {
        ilab_api_fail(&e, 400, "tokens", "the tokens do not decode to valid UTF-8 text");
        return ilab_server_send_error(s, c, &e);
    }
    return send_json(s, c, 200, json_pack("{s:o}", "prompt", str));
}

/* --- routing -------------------------------------------------------------- */

static enum MHD_Result route(ilab_server *s, struct MHD_Connection *c, const char *url,
                             const char *method, const char *body, size_t len)
{
    static const struct {
        const char *path, *method;
    } routes[] = {
        {"/health", "GET"},        {"/v1/models", "GET"},
        {"/metrics", "GET"},       {"/v1/completions", "POST"},
        {"/v1/chat/completions", "POST"}, {"/tokenize", "POST"},
        {"/detokenize", "POST"},
    };
    ilab_api_error e;
    size_t i = 0;
    while (i < sizeof routes / sizeof routes[0] && strcmp(routes[i].path, url))
        i++;
    if (i == sizeof routes / sizeof routes[0]) {
        ilab_api_fail(&e, 404, NULL, "no endpoint %s %s", method, url);
        return ilab_server_send_error(s, c, &e);
    }
    if (strcmp(routes[i].method, method)) {
        ilab_api_fail(&e, 405, NULL, "%s takes %s, not %s", url, routes[i].method, method);
        return ilab_server_send_error(s, c, &e);
    }
    switch (i) {
    case 0: return handle_health(s, c);
    case 1: return handle_models(s, c);
    case 2: return handle_metrics(s, c);
    case 3: return ilab_server_generate(s, c, ILAB_API_COMPLETION, body, len);
    case 4: return ilab_server_generate(s, c, ILAB_API_CHAT, body, len);
    case 5: return handle_tokenize(s, c, body, len);
    default: return handle_detokenize(s, c, body, len);
    }
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    ilab_server *s = cls;
    request_body *rb = *con_cls;
    if (!rb) {
        rb = calloc(1, sizeof *rb);
        if (!rb)
            return MHD_NO;
        *con_cls = rb;
        /* A declared length over the limit is refused before reading it. */
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > s->cfg.max_body_bytes) {
            rb->too_large = true;
            ilab_api_error e;
            ilab_api_fail(&e, 413, NULL, "request body of %s bytes is over the limit of %zu",
                          cl, s->cfg.max_body_bytes);
            return ilab_server_send_error(s, c, &e);
        }
        return MHD_YES;
    }
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (rb->too_large || rb->len + n > s->cfg.max_body_bytes) {
            rb->too_large = true; /* keep reading (chunked bodies), keep nothing */
            return MHD_YES;
        }
        if (rb->len + n + 1 > rb->cap) {
            size_t cap = (rb->len + n + 1) * 2;
            char *grown = realloc(rb->data, cap);
            if (!grown)
                return MHD_NO;
            rb->data = grown;
            rb->cap = cap;
        }
        memcpy(rb->data + rb->len, upload_data, n);
        rb->len += n;
        rb->data[rb->len] = '\0';
        return MHD_YES;
    }
    if (rb->too_large) {
        ilab_api_error e;
        ilab_api_fail(&e, 413, NULL, "request body is over the limit of %zu bytes",
                      s->cfg.max_body_bytes);
        return ilab_server_send_error(s, c, &e);
    }
    (void)version;
    return route(s, c, url, method, rb->data ? rb->data : "", rb->len);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)c;
    (void)toe;
    request_body *rb = *con_cls;
    if (rb) {
        free(rb->data);
        free(rb);
        *con_cls = NULL;
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

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    fprintf(stderr, "inferlab serve: http: ");
    vfprintf(stderr, fmt, ap);
}

typedef struct vocab_load {
    ilab_server *s;
    char msg[256]; /* the backend's message on failure */
} vocab_load;

static ilab_status load_vocab(void *ctx, const ilab_backend_api_t *api, ilab_backend_t *backend)
{
    vocab_load *v = ctx;
    ilab_status st = ilab_token_text_load(&v->s->vocab, api, backend, &v->s->info);
    if (st != ILAB_OK)
        api->last_error(backend, v->msg, sizeof v->msg);
    return st;
}

ilab_status ilab_server_start(const ilab_server_config *cfg, const ilab_server_backend *be,
                              char *err, size_t err_cap, ilab_server **out)
{
    if (!cfg || !be || !out || (be->engine && (!be->plugin || !be->api || !be->backend))) {
        snprintf(err, err_cap, "ilab_server_start: missing configuration or backend");
        return ILAB_INVALID_ARGUMENT;
    }
    ilab_server *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, err_cap, "out of memory");
        return ILAB_OUT_OF_MEMORY;
    }
    s->cfg = *cfg;
    s->be = *be;
    s->started = time(NULL);
    pthread_mutex_init(&s->stats_mu, NULL);
    pthread_cond_init(&s->stats_cond, NULL);
    atomic_init(&s->draining, false);
    atomic_init(&s->cancel_all, false);
    snprintf(s->model_id, sizeof s->model_id, "%s",
             be->plugin ? ilab_plugin_entry_of(be->plugin)->name : "unavailable");

    if (be->engine) {
        s->info = *ilab_engine_model_info(be->engine);
        /* The vocabulary's pieces are read under the engine's backend lock:
         * the scheduler thread is already running. */
        vocab_load v = {.s = s, .msg = ""};
        ilab_status st = ilab_engine_with_backend(be->engine, load_vocab, &v);
        if (st != ILAB_OK) {
            const char *msg = v.msg;
            snprintf(err, err_cap, "reading the model's vocabulary from backend '%s': %s: %s",
                     s->model_id, ilab_status_name(st), msg);
            ilab_server_destroy(s);
            return st;
        }
        if (s->info.name[0])
            snprintf(s->model_id, sizeof s->model_id, "%s", s->info.name);
    }

    struct sockaddr_storage addr;
    socklen_t addr_len = 0;
    ilab_status st = resolve(cfg->host ? cfg->host : "127.0.0.1", cfg->port, &addr, &addr_len,
                             err, err_cap);
    if (st != ILAB_OK) {
        ilab_server_destroy(s);
        return st;
    }
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_ITC | MHD_USE_ERROR_LOG;
    if (addr.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    int max_conn = cfg->max_connections > 0 ? cfg->max_connections : 64;
    unsigned timeout = cfg->request_timeout_seconds > 0 ? (unsigned)cfg->request_timeout_seconds
                                                        : 60;
    s->daemon = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s,
                                 MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
                                 MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                                 MHD_OPTION_CONNECTION_TIMEOUT, timeout,
                                 MHD_OPTION_CONNECTION_LIMIT, (unsigned)max_conn,
                                 MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                                 MHD_OPTION_END);
    if (!s->daemon) {
        snprintf(err, err_cap, "cannot listen on %s:%d (address in use, or not an address "
                               "of this machine?)", cfg->host ? cfg->host : "127.0.0.1",
                 cfg->port);
        ilab_server_destroy(s);
        return ILAB_IO;
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

const char *ilab_server_model_id(const ilab_server *s)
{
    return s->model_id;
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
    while (s->active_generations > 0 || s->inflight > 0) {
        if (pthread_cond_timedwait(&s->stats_cond, &s->stats_mu, &deadline))
            break;
    }
    bool idle = s->active_generations == 0 && s->inflight == 0;
    pthread_mutex_unlock(&s->stats_mu);
    return idle;
}

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
        fprintf(stderr, "inferlab serve: grace period over, cancelling %d in-flight "
                        "request(s)\n", s->inflight);
        atomic_store(&s->cancel_all, true);
        /* Cancelled streams still get their last chunk and [DONE]. */
        wait_idle(s, 5.0);
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
    ilab_token_text_free(&s->vocab);
    pthread_cond_destroy(&s->stats_cond);
    pthread_mutex_destroy(&s->stats_mu);
    free(s);
}
