/* `inferlab serve` at the HTTP level: malformed requests get one
 * well-formed response (JSON where inferlab writes it) or a clean close and
 * are counted; library messages are rate-limited; API keys; the refusal to
 * serve a non-loopback address without one; the access log; what the
 * official OpenAI client sends (HEAD, /v1/models/{id}, n > 1). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include "ilab_skip.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "http_client.h"
#include "response_check.h"

#ifndef PACED_PLUGIN_DIR
#error "PACED_PLUGIN_DIR must name the directory holding paced_backend.so"
#endif
#ifndef INFERLAB_EXE
#error "INFERLAB_EXE must name the inferlab executable"
#endif

static const char *const paced_args[] = {"--plugin-dir", PACED_PLUGIN_DIR, "--backend",
                                         "paced_backend", NULL};

/* Send `req` on a fresh connection and read until the server closes (5 s
 * at most). Returns the bytes (malloc'd) and their count in *len. */
static char *raw_exchange(const test_server *s, const char *req, size_t req_len, size_t *len)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s->port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    (void)!send(fd, req, req_len, MSG_NOSIGNAL);
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap + 1);
    for (;;) {
        ssize_t r = recv(fd, buf + n, cap - n, 0);
        if (r <= 0) {
            if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                fail_msg("the server neither answered nor closed within 5 s: '%.60s'", req);
            break;
        }
        n += (size_t)r;
        if (n == cap)
            break;
    }
    close(fd);
    buf[n] = '\0';
    *len = n;
    return buf;
}

/* Exactly one response: a status line, headers with Content-Length, and
 * that many body bytes, nothing after. Returns the status; *body points
 * into `resp`. */
static int one_response(const char *resp, size_t len, const char **body)
{
    int status = 0;
    assert_int_equal(sscanf(resp, "HTTP/1.1 %d ", &status), 1);
    const char *end = strstr(resp, "\r\n\r\n");
    assert_non_null(end);
    const char *cl = strcasestr(resp, "\r\nContent-Length:");
    assert_true(cl && cl < end);
    size_t declared = strtoul(cl + 17, NULL, 10);
    *body = end + 4;
    assert_int_equal(len - (size_t)(*body - resp), declared);
    assert_null(strstr(*body, "HTTP/1.1 ")); /* no second header block */
    return status;
}

static void test_protocol_errors(void **state)
{
    (void)state;
    char log_path[] = "/tmp/inferlab-protocol-XXXXXX";
    int lfd = mkstemp(log_path);
    assert_true(lfd >= 0);
    close(lfd);
    test_server s;
    assert_true(test_server_start_logged(&s, paced_args, log_path));
    static char long_uri[70000], long_header[70000], many_params[16000];
    snprintf(long_uri, sizeof long_uri, "GET /%0*d HTTP/1.1\r\nHost: x\r\n\r\n", 65000, 0);
    snprintf(long_header, sizeof long_header,
             "GET /health HTTP/1.1\r\nHost: x\r\nX-Long: %0*d\r\n\r\n", 65000, 0);
    size_t o = (size_t)snprintf(many_params, sizeof many_params, "GET /health?p0=0");
    for (int i = 1; i < 1000; i++)
        o += (size_t)snprintf(many_params + o, sizeof many_params - o, "&p%d=%d", i, i);
    snprintf(many_params + o, sizeof many_params - o, " HTTP/1.1\r\nHost: x\r\n\r\n");
    static const struct {
        const char *req;
        int status;
        bool json; /* inferlab's documented error object (else the library's page) */
    } cases[] = {
        {"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n{}", 400, true},
        {"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999999"
         "\r\n\r\n", 413, true},
        {"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
         "zz\r\nxx\r\n0\r\n\r\n", 400, false},
        {NULL, 414, false}, /* long_uri */
        {NULL, 431, false}, /* long_header */
        {NULL, 414, true},  /* many_params */
    };
    const char *dynamic[] = {NULL, NULL, NULL, long_uri, long_header, many_params};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *req = cases[i].req ? cases[i].req : dynamic[i];
        size_t len;
        char *resp = raw_exchange(&s, req, strlen(req), &len);
        const char *body;
        int status = one_response(resp, len, &body);
        if (status != cases[i].status)
            fail_msg("case %zu: status %d, expected %d: %.200s", i, status, cases[i].status,
                     resp);
        if (cases[i].json) {
            json_error_t e;
            json_t *j = json_loads(body, 0, &e);
            if (!j)
                fail_msg("case %zu: not JSON: %s", i, body);
            assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "error"),
                                                                "code")), status);
            json_decref(j);
        }
        free(resp);
    }
    /* A request line that is no request: a clean close, no hang. */
    size_t len;
    free(raw_exchange(&s, "GARBAGE\r\n\r\n", 11, &len));
    /* Every one of them is counted. */
    double counted = 0;
    const char *codes[] = {"400", "413", "414", "431"};
    for (size_t i = 0; i < 4; i++) {
        char series[96];
        snprintf(series, sizeof series, "inferlab_http_protocol_errors_total{code=\"%s\"}",
                 codes[i]);
        counted += metric_value(&s, series);
    }
    assert_true(counted >= 6);
    /* 300 more bad requests within a second or two: the log stays short. */
    for (int i = 0; i < 300; i++) {
        const char *bad = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: x\r\n\r\n";
        free(raw_exchange(&s, bad, strlen(bad), &len));
    }
    http_reply r;
    assert_true(http_call(&s, "/health", NULL, &r)); /* still serving */
    assert_int_equal(r.status, 200);
    http_reply_free(&r);
    assert_int_equal(test_server_stop(&s), 0);
    FILE *f = fopen(log_path, "r");
    assert_non_null(f);
    int lines = 0;
    bool suppressed = false;
    char line[4096];
    while (fgets(line, sizeof line, f)) {
        lines++;
        suppressed |= strstr(line, "suppressed") != NULL;
    }
    fclose(f);
    unlink(log_path);
    fprintf(stderr, "306 bad requests -> %d log lines\n", lines);
    assert_true(suppressed);
    assert_true(lines < 100);
}

/* --- framing by RFC 9112 ------------------------------------------------------ */

/* The single response of `resp` must carry `Connection: close`. */
static void closes(const char *resp, const char *label)
{
    const char *end = strstr(resp, "\r\n\r\n");
    const char *c = strcasestr(resp, "\r\nConnection: close\r\n");
    if (!c || c > end)
        fail_msg("%s: no 'Connection: close' in the head: %.300s", label, resp);
}

/* Requests whose body cannot be framed (request smuggling), unknown
 * transfer codings, unsupported versions and heads that are not CRLF lines
 * each get one JSON error with Connection: close and a closed connection:
 * a request pipelined after them is never answered. raw_exchange reads to
 * the server's close and fails if it does not come within 5 s, so a server
 * that waits for a body it cannot frame fails here too. */
static void test_framing_by_rfc9112(void **state)
{
    (void)state;
    test_server s;
    assert_true(test_server_start(&s, paced_args));
    static const char body[] = "{\"prompt\": \"x\", \"max_tokens\": 1}"; /* 32 bytes */
    static const char next[] = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    static const struct {
        const char *label, *head;
        int status;
    } cases[] = {
        {"conflicting Content-Length",
         "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 32\r\n"
         "Content-Length: 5\r\n\r\n", 400},
        {"duplicate Content-Length",
         "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 32\r\n"
         "Content-Length: 32\r\n\r\n", 400},
        {"Transfer-Encoding with Content-Length",
         "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
         "Content-Length: 32\r\n\r\n", 400},
        {"Transfer-Encoding in HTTP/1.0",
         "POST /v1/completions HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
        {"unknown transfer coding",
         "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 501},
        {"unknown coding before chunked",
         "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
         501},
        {"two Transfer-Encoding fields",
         "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
         "Transfer-Encoding: chunked\r\n\r\n", 501},
        {"HTTP/9.9", "GET /health HTTP/9.9\r\nHost: x\r\n\r\n", 505},
        {"HTTP/2.0", "GET /health HTTP/2.0\r\nHost: x\r\n\r\n", 505},
        {"HTTP/1.5", "GET /health HTTP/1.5\r\nHost: x\r\n\r\n", 505},
        {"obsolete line folding",
         "GET /health HTTP/1.1\r\nHost: x\r\nX-A: a\r\n  b\r\n\r\n", 400},
        {"folding with a tab", "GET /health HTTP/1.1\r\nHost: x\r\nX-A: a\r\n\tb\r\nX-B: c\r\n\r\n",
         400},
        {"bare LF between headers", "GET /health HTTP/1.1\r\nHost: x\nX-A: a\r\n\r\n", 400},
        {"bare LF after the request line", "GET /health HTTP/1.1\nHost: x\r\n\r\n", 400},
        {"bare LF before the blank line", "GET /health HTTP/1.1\r\nHost: x\n\r\n", 400},
        {"LF only", "GET /health HTTP/1.1\nHost: x\n\n", 400},
        {"bare CR in a header", "GET /health HTTP/1.1\r\nHost: x\r\nX-A: a\rX-B: b\r\n\r\n",
         400},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char req[512];
        bool post = !strncmp(cases[i].head, "POST", 4);
        int n = snprintf(req, sizeof req, "%s%s%s", cases[i].head, post ? body : "", next);
        size_t len;
        char *resp = raw_exchange(&s, req, (size_t)n, &len);
        if (len == 0)
            fail_msg("%s: closed without an answer", cases[i].label);
        const char *rbody;
        int status = one_response(resp, len, &rbody); /* the pipelined GET got nothing */
        if (status != cases[i].status)
            fail_msg("%s: status %d, expected %d: %.300s", cases[i].label, status,
                     cases[i].status, resp);
        closes(resp, cases[i].label);
        json_error_t e;
        json_t *j = json_loads(rbody, 0, &e);
        if (!j)
            fail_msg("%s: the body is not JSON: %s", cases[i].label, rbody);
        json_t *err = json_object_get(j, "error");
        assert_int_equal(json_integer_value(json_object_get(err, "code")), status);
        assert_true(strlen(json_string_value(json_object_get(err, "message"))) > 10);
        json_decref(j);
        free(resp);
    }
    /* The same requests framed properly are served, pipelined ones too. */
    char good[512];
    int n = snprintf(good, sizeof good, "POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                     "Content-Type: application/json\r\nContent-Length: 32\r\nX-Pad: a  \r\n"
                     "\r\n%s%s", body, "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close"
                     "\r\n\r\n");
    size_t len;
    char *resp = raw_exchange(&s, good, (size_t)n, &len);
    assert_int_equal(sscanf(resp, "HTTP/1.1 %d ", &(int){0}), 1);
    assert_non_null(strstr(resp, "HTTP/1.1 200 OK"));
    const char *second = strstr(strstr(resp, "HTTP/1.1 200 OK") + 1, "HTTP/1.1 200 OK");
    if (!second)
        fail_msg("a pipelined request after a well-framed one was not answered: %.400s", resp);
    free(resp);
    const char *chunked = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: "
                          "chunked\r\nConnection: close\r\n\r\n20\r\n{\"prompt\": \"x\", "
                          "\"max_tokens\": 1}\r\n0\r\n\r\n";
    resp = raw_exchange(&s, chunked, strlen(chunked), &len);
    const char *rbody;
    assert_int_equal(one_response(resp, len, &rbody), 200);
    free(resp);
    /* Each refusal is counted as a protocol error. */
    assert_true(metric_value(&s, "inferlab_http_protocol_errors_total{code=\"400\"}") >= 11);
    assert_true(metric_value(&s, "inferlab_http_protocol_errors_total{code=\"501\"}") >= 3);
    assert_int_equal(test_server_stop(&s), 0);
}

/* --- API keys ---------------------------------------------------------------- */

static long status_of(const test_server *s, const char *method, const char *path,
                      const char *body, const char *auth)
{
    const char *headers[] = {auth, NULL};
    http_reply r;
    assert_true(http_call_ex(s, method, path, body, auth ? headers : NULL, &r));
    long st = r.status;
    if (st == 401) {
        json_error_t e;
        json_t *j = json_loads(r.body, 0, &e);
        assert_non_null(j);
        json_t *err = json_object_get(j, "error");
        assert_string_equal(json_string_value(json_object_get(err, "type")),
                            "authentication_error");
        assert_int_equal(json_integer_value(json_object_get(err, "code")), 401);
        json_decref(j);
    }
    http_reply_free(&r);
    return st;
}

static void test_api_key(void **state)
{
    (void)state;
    char access[] = "/tmp/inferlab-access-XXXXXX";
    int afd = mkstemp(access);
    assert_true(afd >= 0);
    close(afd);
    test_server s;
    const char *args[] = {"--plugin-dir", PACED_PLUGIN_DIR, "--backend", "paced_backend",
                          "--api-key", "sekret-1", "--access-log", access, NULL};
    assert_true(test_server_start(&s, args));
    const char *good = "Authorization: Bearer sekret-1";
    const char *bad = "Authorization: Bearer sekret-2";
    const char *longer = "Authorization: Bearer sekret-10";
    const char *comp = "{\"prompt\": \"x\", \"max_tokens\": 2}";
    assert_int_equal(status_of(&s, NULL, "/v1/models", NULL, NULL), 401);
    assert_int_equal(status_of(&s, NULL, "/v1/models", NULL, bad), 401);
    assert_int_equal(status_of(&s, NULL, "/v1/models", NULL, longer), 401);
    assert_int_equal(status_of(&s, NULL, "/v1/models", NULL, "Authorization: sekret-1"), 401);
    assert_int_equal(status_of(&s, NULL, "/v1/models", NULL, good), 200);
    /* The scheme is case-insensitive (RFC 9110 11.1); the key is not. */
    assert_int_equal(status_of(&s, NULL, "/v1/models", NULL, "Authorization: bearer sekret-1"), 200);
    assert_int_equal(status_of(&s, NULL, "/v1/models", NULL, "Authorization: BEARER sekret-1"), 200);
    assert_int_equal(status_of(&s, NULL, "/v1/models", NULL, "Authorization: Bearer SEKRET-1"), 401);
    assert_int_equal(status_of(&s, NULL, "/v1/completions", comp, NULL), 401);
    assert_int_equal(status_of(&s, NULL, "/v1/completions", comp, good), 200);
    assert_int_equal(status_of(&s, NULL, "/v1/chat/completions", "{}", NULL), 401);
    assert_int_equal(status_of(&s, NULL, "/tokenize", "{\"prompt\": \"a\"}", NULL), 401);
    assert_int_equal(status_of(&s, NULL, "/detokenize", "{\"tokens\": [65]}", NULL), 401);
    assert_int_equal(status_of(&s, NULL, "/tokenize", "{\"prompt\": \"a\"}", good), 200);
    /* Open: /health always; /metrics unless configured otherwise. */
    assert_int_equal(status_of(&s, NULL, "/health", NULL, NULL), 200);
    assert_int_equal(status_of(&s, NULL, "/metrics", NULL, NULL), 200);
    assert_true(metric_value(&s, "inferlab_http_requests_total{code=\"401\"}") >= 9);
    assert_int_equal(test_server_stop(&s), 0);

    /* The access log has a line per request, with its status. */
    FILE *f = fopen(access, "r");
    assert_non_null(f);
    int lines = 0, unauthorized = 0;
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        lines++;
        if (strstr(line, "\"GET /v1/models\" 401"))
            unauthorized++;
    }
    fclose(f);
    unlink(access);
    assert_true(lines >= 14);
    assert_int_equal(unauthorized, 5);

    /* From the environment, and /metrics behind the key too. */
    setenv("INFERLAB_API_KEY", "from-env", 1);
    const char *args2[] = {"--plugin-dir", PACED_PLUGIN_DIR, "--backend", "paced_backend",
                           "--set", "server.metrics_require_key=1", NULL};
    bool started = test_server_start(&s, args2);
    unsetenv("INFERLAB_API_KEY");
    assert_true(started);
    assert_int_equal(status_of(&s, NULL, "/v1/models", NULL, good), 401);
    assert_int_equal(status_of(&s, NULL, "/v1/models", NULL,
                               "Authorization: Bearer from-env"), 200);
    assert_int_equal(status_of(&s, NULL, "/metrics", NULL, NULL), 401);
    assert_int_equal(status_of(&s, NULL, "/metrics", NULL, "Authorization: Bearer from-env"),
                     200);
    assert_int_equal(status_of(&s, NULL, "/health", NULL, NULL), 200);
    assert_int_equal(test_server_stop(&s), 0);
}

/* Run `inferlab serve ARGS` expecting it to refuse to start: returns its
 * exit status, its stderr in `out`. It never gets to bind. */
static int serve_refuses(const char *args, char *out, size_t cap)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' serve --plugin-dir '%s' --backend paced_backend %s 2>&1 "
             "</dev/null", INFERLAB_EXE, PACED_PLUGIN_DIR, args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_non_loopback_needs_a_key(void **state)
{
    (void)state;
    char out[4096];
    int rc = serve_refuses("--host 0.0.0.0 --port 0", out, sizeof out);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(out, "'0.0.0.0'"));
    assert_non_null(strstr(out, "not a loopback address"));
    assert_non_null(strstr(out, "--allow-unauthenticated"));
    assert_null(strstr(out, "listening"));
    rc = serve_refuses("--api-key ''", out, sizeof out);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(out, "--api-key must not be empty"));
}

/* --- what OpenAI clients send -------------------------------------------------- */

static json_t *get_json(const test_server *s, const char *method, const char *path,
                        const char *body, long want)
{
    http_reply r;
    assert_true(http_call_ex(s, method, path, body, NULL, &r));
    if (r.status != want)
        fprintf(stderr, "%s -> %ld: %s\n", path, r.status, r.body);
    assert_int_equal(r.status, want);
    json_error_t e;
    json_t *j = json_loads(r.body, 0, &e);
    http_reply_free(&r);
    assert_non_null(j);
    return j;
}

static const char *choice_text(json_t *resp, size_t i)
{
    return json_string_value(json_object_get(
        json_array_get(json_object_get(resp, "choices"), i), "text"));
}

static void test_openai_client_shapes(void **state)
{
    (void)state;
    test_server s;
    assert_true(test_server_start(&s, paced_args));
    /* HEAD on a GET route: 200, no body. */
    http_reply r;
    assert_true(http_call_ex(&s, "HEAD", "/health", NULL, NULL, &r));
    assert_int_equal(r.status, 200);
    assert_int_equal(r.len, 0);
    http_reply_free(&r);
    assert_true(http_call_ex(&s, "HEAD", "/v1/models", NULL, NULL, &r));
    assert_int_equal(r.status, 200);
    http_reply_free(&r);
    /* models.retrieve */
    json_t *m = get_json(&s, NULL, "/v1/models/paced-bigram", NULL, 200);
    assert_string_equal(json_string_value(json_object_get(m, "id")), "paced-bigram");
    assert_string_equal(json_string_value(json_object_get(m, "object")), "model");
    json_decref(m);
    m = get_json(&s, NULL, "/v1/models/gpt-4", NULL, 404);
    assert_string_equal(json_string_value(json_object_get(json_object_get(m, "error"), "param")),
                        "model");
    json_decref(m);

    /* n = 3: three choices, indices 0..2; choice i is what n = 1 gives with
     * seed + i. */
    json_t *three = get_json(&s, NULL, "/v1/completions",
                             "{\"prompt\": \"Once\", \"max_tokens\": 12, \"ignore_eos\": true, "
                             "\"seed\": 7, \"n\": 3}", 200);
    json_t *choices = json_object_get(three, "choices");
    assert_int_equal(json_array_size(choices), 3);
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(json_integer_value(json_object_get(json_array_get(choices, i),
                                                            "index")), (json_int_t)i);
        char body[256];
        snprintf(body, sizeof body, "{\"prompt\": \"Once\", \"max_tokens\": 12, "
                 "\"ignore_eos\": true, \"seed\": %zu}", 7 + i);
        json_t *one = get_json(&s, NULL, "/v1/completions", body, 200);
        assert_string_equal(choice_text(three, i), choice_text(one, 0));
        json_decref(one);
    }
    assert_string_not_equal(choice_text(three, 0), choice_text(three, 1));
    json_t *u = json_object_get(three, "usage");
    assert_int_equal(json_integer_value(json_object_get(u, "completion_tokens")), 36);
    assert_int_equal(json_integer_value(json_object_get(u, "prompt_tokens")), 5);
    json_decref(three);

    /* Streamed n = 2: chunks of both indices, each finishing once, one [DONE]. */
    assert_true(http_call(&s, "/v1/chat/completions",
                          "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], "
                          "\"max_tokens\": 5, \"n\": 2, \"ignore_eos\": true, "
                          "\"stream\": true}", &r));
    assert_int_equal(r.status, 200);
    int roles[2] = {0}, finishes[2] = {0}, dones = 0;
    for (char *line = strtok(r.body, "\n"); line; line = strtok(NULL, "\n")) {
        assert_memory_equal(line, "data: ", 6);
        if (!strcmp(line + 6, "[DONE]")) {
            dones++;
            continue;
        }
        assert_int_equal(dones, 0);
        json_error_t e;
        json_t *chunk = json_loads(line + 6, 0, &e);
        assert_non_null(chunk);
        json_t *c0 = json_array_get(json_object_get(chunk, "choices"), 0);
        json_int_t idx = json_integer_value(json_object_get(c0, "index"));
        assert_true(idx == 0 || idx == 1);
        if (json_object_get(json_object_get(c0, "delta"), "role"))
            roles[idx]++;
        if (json_is_string(json_object_get(c0, "finish_reason")))
            finishes[idx]++;
        json_decref(chunk);
    }
    http_reply_free(&r);
    assert_int_equal(dones, 1);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(roles[i], 1);
        assert_int_equal(finishes[i], 1);
    }
    assert_int_equal(test_server_stop(&s), 0);
}

/* n > 1 on a backend with cache.fork: the prompt is prefilled once; the
 * other choices fork it (through the engine's prefix cache), and each
 * choice is still exactly what n = 1 gives with seed + i. */
static void test_n_prefills_the_prompt_once(void **state)
{
    (void)state;
    test_server s;
    const char *args[] = {"--plugin-dir", PACED_PLUGIN_DIR, "--backend", "pool_backend", NULL};
    assert_true(test_server_start(&s, args));
    const char *prompt = "It is a truth universally acknowledged, that a single man";
    double hits_before = metric_value(&s, "inferlab:prefix_cache_hits_total");
    assert_true(hits_before >= 0);
    char body[512];
    snprintf(body, sizeof body, "{\"prompt\": \"%s\", \"max_tokens\": 8, \"ignore_eos\": true, "
             "\"seed\": 7, \"n\": 3}", prompt);
    json_t *three = get_json(&s, NULL, "/v1/completions", body, 200);
    double hits = metric_value(&s, "inferlab:prefix_cache_hits_total") - hits_before;
    json_int_t prompt_tokens =
        json_integer_value(json_object_get(json_object_get(three, "usage"), "prompt_tokens"));
    fprintf(stderr, "n = 3 over a %lld-token prompt: %.0f prefill tokens taken from the cache\n",
            (long long)prompt_tokens, hits);
    /* Choices 1 and 2 each reuse all but the last prompt token. */
    assert_true(hits >= 2.0 * (double)(prompt_tokens - 1));
    for (size_t i = 0; i < 3; i++) {
        snprintf(body, sizeof body, "{\"prompt\": \"%s\", \"max_tokens\": 8, "
                 "\"ignore_eos\": true, \"seed\": %zu}", prompt, 7 + i);
        json_t *one = get_json(&s, NULL, "/v1/completions", body, 200);
        assert_string_equal(choice_text(three, i), choice_text(one, 0));
        json_decref(one);
    }
    json_decref(three);
    assert_int_equal(test_server_stop(&s), 0);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_protocol_errors),
        cmocka_unit_test(test_framing_by_rfc9112),
        cmocka_unit_test(test_api_key),
        cmocka_unit_test(test_non_loopback_needs_a_key),
        cmocka_unit_test(test_openai_client_shapes),
        cmocka_unit_test(test_n_prefills_the_prompt_once),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    if (rc_failures())
        fprintf(stderr, "%u response check(s) failed\n", rc_failures());
    return ilab_test_exit(rc || rc_failures());
}
