/* `inferlab serve` under abuse, over loopback with bounded counts:
 *
 *  - 1,000 connections that send part of a request head (some of them a
 *    byte at a time) do not lock other clients out: /health and a short
 *    completion answer while every one of those connections is still open,
 *    none is closed before the head deadline, and after it every one is;
 *  - a per-client-address budget, and loopback's own (none by default);
 *  - a client that leaves cancels its request while tokens are flowing,
 *    streamed or not: it ends "cancelled", long before it could have ended
 *    by itself, and no token is made for it afterwards;
 *  - at the end of the shutdown grace period every in-flight request ends
 *    "cancelled" and the process exits, status 0.
 *
 * No check depends on how fast the machine is: each is an order of events
 * (an answer before a deadline the server keeps, a cancel before the end
 * the request would have reached) that load can delay but not reverse;
 * every wait is bounded far above what an idle machine needs and reports
 * what it waited for. Durations are printed, not asserted.
 *
 * Clients come from several loopback addresses (127.0.0.0/8 is all
 * loopback on Linux) so that the per-address cap does not get in the way. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include "ilab_skip.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "http_client.h"
#include "response_check.h"

#ifndef PACED_PLUGIN_DIR
#error "PACED_PLUGIN_DIR must name the directory holding paced_backend.so"
#endif

/* The bound on every wait: far above what any step takes on an idle
 * machine; reached only when something is wrong. */
enum { WAIT_MS = 30000 };

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* A non-blocking TCP connection to the server from 127.0.0.<src_host>. */
static int connect_from(const test_server *s, int src_host)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in src = {.sin_family = AF_INET, .sin_port = 0};
    src.sin_addr.s_addr = htonl(0x7f000000u | (uint32_t)src_host);
    struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s->port)};
    dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    fcntl(fd, F_SETFL, O_NONBLOCK);
    if (bind(fd, (struct sockaddr *)&src, sizeof src) ||
        (connect(fd, (struct sockaddr *)&dst, sizeof dst) && errno != EINPROGRESS)) {
        close(fd);
        return -1;
    }
    /* A full accept queue would make a blocking connect() retry its SYN
     * for minutes: wait a bounded time and say so instead. */
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    int err = 0;
    socklen_t len = sizeof err;
    if (poll(&p, 1, WAIT_MS) != 1 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) || err) {
        fprintf(stderr, "connect from 127.0.0.%d: %s\n", src_host,
                err ? strerror(err) : "not connected within the wait");
        close(fd);
        return -1;
    }
    return fd;
}

/* Has the server closed `fd` (EOF or reset)? Drains what it sent. */
static bool closed_by_server(int fd)
{
    char buf[4096];
    for (;;) {
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n == 0)
            return true;
        if (n < 0)
            return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
    }
}

/* Seconds one GET or POST takes; -1 when it failed or did not give 200. */
static double timed_call(const test_server *s, const char *path, const char *body)
{
    double t0 = now_s();
    http_reply r;
    bool ok = http_call(s, path, body, &r) && r.status == 200;
    if (!ok)
        fprintf(stderr, "%s -> %ld: %s\n", path, r.status, r.body ? r.body : "");
    http_reply_free(&r);
    return ok ? now_s() - t0 : -1;
}

static bool raise_fd_limit(rlim_t want)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl))
        return false;
    if (rl.rlim_cur >= want)
        return true;
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= want ? want : rl.rlim_max;
    return setrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur >= want;
}

enum { N_IDLE = 1000, N_TRICKLE = 20, PER_SOURCE = 250 };

static void test_idle_flood_does_not_starve(void **state)
{
    (void)state;
    assert_true(raise_fd_limit(N_IDLE + 256));
    test_server s;
    enum { HEAD_TIMEOUT = 6 };
    const char *args[] = {"--plugin-dir", PACED_PLUGIN_DIR, "--backend", "paced_backend",
                          "--set", "server.head_timeout_seconds=6",
                          "--set", "server.max_connections_per_client=300", NULL};
    assert_true(test_server_start(&s, args));
    static int fds[N_IDLE];
    int opened = 0;
    /* Every connection's head deadline runs from its accept, which comes
     * after this instant: none may close before t_start + HEAD_TIMEOUT. */
    double t_start = now_s();
    /* Each sends the start of a request head and then nothing (idle), or,
     * for the first N_TRICKLE, one more byte every 250 ms (slow). */
    for (int i = 0; i < N_IDLE; i++) {
        fds[i] = connect_from(&s, 2 + i / PER_SOURCE);
        if (fds[i] < 0)
            break;
        opened++;
        (void)!send(fds[i], "G", 1, MSG_NOSIGNAL);
    }
    assert_int_equal(opened, N_IDLE);
    double t_opened = now_s();

    /* These connect after the 1,000 (the accept queue is first come, first
     * served), and must be answered while all of those are still open:
     * before any head deadline frees a slot. */
    double health = timed_call(&s, "/health", NULL);
    double completion = timed_call(&s, "/v1/completions",
                                   "{\"prompt\": \"x\", \"max_tokens\": 8, \"ignore_eos\": true}");
    fprintf(stderr, "with %d idle connections: /health %.1f ms, completion %.1f ms\n", N_IDLE,
            health * 1e3, completion * 1e3);
    assert_true(health >= 0);
    assert_true(completion >= 0);
    int closed = 0;
    bool is_closed[N_IDLE] = {false};
    for (int i = 0; i < N_IDLE; i++)
        if (closed_by_server(fds[i])) {
            is_closed[i] = true;
            closed++;
        }
    if (closed)
        fail_msg("%d idle connections were closed before /health and a completion were "
                 "answered (%.2f s after the first connect): the others waited for the head "
                 "deadline", closed, now_s() - t_start);

    /* Trickle until past the 3 s head deadline; every connection must be
     * closed by then (the trickling ones too: each byte resets an idle
     * timeout, not the head deadline). */
    static const char head[] = "ET /health HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaa";
    for (int round = 0; closed < N_IDLE && now_s() - t_opened < HEAD_TIMEOUT + WAIT_MS / 1000;
         round++) {
        for (int i = 0; i < N_TRICKLE; i++)
            if (!is_closed[i] && (size_t)round < sizeof head - 1)
                (void)!send(fds[i], head + round, 1, MSG_NOSIGNAL);
        sleep_ms(250);
        for (int i = 0; i < N_IDLE; i++)
            if (!is_closed[i] && closed_by_server(fds[i])) {
                is_closed[i] = true;
                closed++;
                /* None before its deadline (the server's clock is checked
                 * every few ms: half a second of slack is plenty). */
                if (now_s() - t_start < HEAD_TIMEOUT - 0.5)
                    fail_msg("connection %d closed %.2f s after the first connect, before "
                             "the %d s head deadline", i, now_s() - t_start, HEAD_TIMEOUT);
            }
    }
    fprintf(stderr, "closed at the head deadline: %d of %d (%.2f s after opening)\n", closed,
            N_IDLE, now_s() - t_opened);
    assert_int_equal(closed, N_IDLE);
    for (int i = 0; i < N_IDLE; i++)
        close(fds[i]);
    assert_true(metric_value(&s, "inferlab_http_head_timeouts_total") >= N_IDLE);
    assert_int_equal(test_server_stop(&s), 0);
}

/* Ask /health on an open connection: true when it answers 200, false when
 * the server closed it instead (refused). Waits for the answer (5 s at
 * most), so it does not matter how soon the server got to the accept. */
static bool answers_health(int fd)
{
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    static const char req[] = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    (void)!send(fd, req, sizeof req - 1, MSG_NOSIGNAL);
    char buf[16] = "";
    size_t got = 0;
    while (got < 12) {
        ssize_t n = recv(fd, buf + got, 12 - got, 0);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            fail_msg("the server neither answered nor closed within 5 s");
        if (n <= 0)
            return false;
        got += (size_t)n;
    }
    return !strncmp(buf, "HTTP/1.1 200", 12);
}

/* A budget per client address: with 8, one of 9 connections from the same
 * address is closed (which one depends on the order of accepts), and
 * other addresses are not affected. Loopback is given its own budget here
 * (server.max_connections_per_loopback_client), the same code path as any
 * address's. */
static void test_per_client_cap(void **state)
{
    (void)state;
    test_server s;
    const char *args[] = {"--plugin-dir", PACED_PLUGIN_DIR, "--backend", "paced_backend",
                          "--set", "server.max_connections_per_loopback_client=8", NULL};
    assert_true(test_server_start(&s, args));
    int fds[9];
    for (int i = 0; i < 9; i++) {
        fds[i] = connect_from(&s, 7);
        assert_true(fds[i] >= 0);
    }
    int answered = 0;
    for (int i = 0; i < 9; i++)
        answered += answers_health(fds[i]);
    assert_int_equal(answered, 8);
    assert_true(metric_value(&s, "inferlab_http_connections_over_limit_total") == 1);
    /* Other addresses are not affected. */
    double health = timed_call(&s, "/health", NULL);
    assert_true(health >= 0);
    for (int i = 0; i < 9; i++)
        close(fds[i]);
    assert_int_equal(test_server_stop(&s), 0);
}

/* Every local process (and every client of a reverse proxy on the host)
 * shares the loopback address, so the per-address budget does not apply
 * to it by default: 60 connections from 127.0.0.1 against a budget of 8
 * all stay open and answer, and so does a health check from the same
 * address. Only server.max_connections bounds them. */
static void test_loopback_has_its_own_budget(void **state)
{
    (void)state;
    test_server s;
    const char *args[] = {"--plugin-dir", PACED_PLUGIN_DIR, "--backend", "paced_backend",
                          "--set", "server.max_connections_per_client=8", NULL};
    assert_true(test_server_start(&s, args));
    enum { N_LOCAL = 60 };
    int fds[N_LOCAL];
    for (int i = 0; i < N_LOCAL; i++) {
        fds[i] = connect_from(&s, 1);
        assert_true(fds[i] >= 0);
    }
    for (int i = 0; i < N_LOCAL; i++)
        if (!answers_health(fds[i]))
            fail_msg("loopback connection %d of %d was closed by the per-address budget", i,
                     N_LOCAL);
    double health = timed_call(&s, "/health", NULL); /* one more, from 127.0.0.1 */
    assert_true(health >= 0);
    assert_true(metric_value(&s, "inferlab_http_connections_over_limit_total") == 0);
    for (int i = 0; i < N_LOCAL; i++)
        close(fds[i]);
    assert_int_equal(test_server_stop(&s), 0);
}

/* --- cancellation ----------------------------------------------------------- */

/* Send a POST by hand on a raw socket (so the test decides when to hang up). */
static int post_raw(const test_server *s, const char *path, const char *body)
{
    int fd = connect_from(s, 1);
    if (fd < 0)
        return -1;
    char req[1024];
    int n = snprintf(req, sizeof req, "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                     path, strlen(body), body);
    if (send(fd, req, (size_t)n, MSG_NOSIGNAL) != n) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Hang up after `after_ms` and measure how long until the engine has
 * cancelled the request. Returns the seconds, or -1 if it never did. The
 * request ends "cancelled", not "length": the hang-up, not its own end,
 * stopped it. */
static double hang_up_and_time_cancel(const test_server *s, const char *body, long after_ms,
                                      double *tokens_after)
{
    const char *cancelled = "inferlab_http_finished_total{reason=\"cancelled\"}";
    const char *length = "inferlab_http_finished_total{reason=\"length\"}";
    double before = metric_value(s, cancelled), length_before = metric_value(s, length);
    double disc_before = metric_value(s, "inferlab_http_client_disconnects_total");
    int fd = post_raw(s, "/v1/completions", body);
    assert_true(fd >= 0);
    /* Hang up only once the request is in the engine (on a loaded machine
     * the head may take a while to be read), and tokens are flowing. */
    bool running = false;
    for (double t0 = now_s(); !running && now_s() - t0 < WAIT_MS / 1000;) {
        running = metric_value(s, "inferlab_http_inflight_requests") >= 1;
        if (!running)
            sleep_ms(5);
    }
    assert_true(running);
    sleep_ms(after_ms);
    close(fd);
    double t0 = now_s();
    double took = -1;
    while (now_s() - t0 < WAIT_MS / 1000) {
        if (metric_value(s, cancelled) >= before + 1) {
            took = now_s() - t0;
            break;
        }
        sleep_ms(5);
    }
    assert_true(metric_value(s, length) == length_before);
    double tokens = metric_value(s, "inferlab:generation_tokens_total");
    sleep_ms(200);
    /* Nothing more is generated for it afterwards. */
    *tokens_after = metric_value(s, "inferlab:generation_tokens_total") - tokens;
    assert_true(metric_value(s, "inferlab_http_client_disconnects_total") >= disc_before + 1);
    assert_true(metric_value(s, "inferlab_http_inflight_requests") == 0);
    return took;
}

static void test_disconnect_cancels_while_tokens_flow(void **state)
{
    (void)state;
    test_server s;
    /* 20 ms per step: 1,000 tokens would take 20 s at the least. */
    const char *args[] = {"--plugin-dir", PACED_PLUGIN_DIR, "--backend", "paced_backend",
                          "--set", "paced_backend.step_ms=20", NULL};
    assert_true(test_server_start(&s, args));
    const char *whole = "{\"prompt\": \"x\", \"max_tokens\": 1000, \"ignore_eos\": true}";
    const char *streamed = "{\"prompt\": \"x\", \"max_tokens\": 1000, \"ignore_eos\": true, "
                           "\"stream\": true}";
    double extra;
    double t_whole = hang_up_and_time_cancel(&s, whole, 50, &extra);
    fprintf(stderr, "non-streamed: disconnect -> cancelled in %.1f ms\n", t_whole * 1e3);
    assert_true(t_whole >= 0);
    assert_true(extra == 0);
    double t_stream = hang_up_and_time_cancel(&s, streamed, 50, &extra);
    fprintf(stderr, "streamed: disconnect -> cancelled in %.1f ms\n", t_stream * 1e3);
    assert_true(t_stream >= 0);
    assert_true(extra == 0);
    assert_int_equal(test_server_stop(&s), 0);
}

/* --- shutdown ---------------------------------------------------------------- */

typedef struct stream_buf {
    char *data;
    size_t len;
} stream_buf;

static size_t into_buf(char *data, size_t size, size_t nmemb, void *user)
{
    stream_buf *b = user;
    return http_buf_append(&b->data, &b->len, data, size * nmemb) ? size * nmemb : 0;
}

static void test_grace_end_cancels_and_exits(void **state)
{
    (void)state;
    test_server s;
    /* 10 ms a step, 2,000 tokens: 20 s of work against a 1 s grace period. */
    const char *args[] = {"--plugin-dir", PACED_PLUGIN_DIR, "--backend", "paced_backend",
                          "--set", "paced_backend.step_ms=10",
                          "--set", "server.shutdown_grace_seconds=1", NULL};
    assert_true(test_server_start(&s, args));
    enum { N = 5 }; /* 4 streams and one whole response */
    CURLM *m = curl_multi_init();
    CURL *easy[N];
    stream_buf out[N];
    char url[128];
    snprintf(url, sizeof url, "%s/v1/completions", s.base);
    for (int i = 0; i < N; i++) {
        memset(&out[i], 0, sizeof out[i]);
        easy[i] = curl_easy_init();
        curl_easy_setopt(easy[i], CURLOPT_URL, url);
        curl_easy_setopt(easy[i], CURLOPT_POSTFIELDS,
                         i < N - 1 ? "{\"prompt\": \"x\", \"max_tokens\": 2000, "
                                     "\"ignore_eos\": true, \"stream\": true}"
                                   : "{\"prompt\": \"x\", \"max_tokens\": 2000, "
                                     "\"ignore_eos\": true}");
        curl_easy_setopt(easy[i], CURLOPT_WRITEFUNCTION, into_buf);
        curl_easy_setopt(easy[i], CURLOPT_WRITEDATA, &out[i]);
        curl_easy_setopt(easy[i], CURLOPT_TIMEOUT, 60L);
        curl_multi_add_handle(m, easy[i]);
    }
    int running = 1;
    double t_signal = 0;
    for (int rounds = 0; running && rounds < 100000; rounds++) {
        curl_multi_perform(m, &running);
        bool all_streaming = true;
        for (int i = 0; i < N - 1; i++)
            all_streaming &= out[i].len > 0;
        if (!t_signal && all_streaming) {
            kill(s.pid, SIGTERM);
            t_signal = now_s();
        }
        if (running)
            curl_multi_poll(m, NULL, 0, 20, NULL);
    }
    assert_true(t_signal > 0);
    for (int i = 0; i < N; i++) {
        long status = 0;
        curl_easy_getinfo(easy[i], CURLINFO_RESPONSE_CODE, &status);
        assert_int_equal(status, 200);
        assert_non_null(out[i].data);
        char why[1024];
        http_reply as_reply = {.status = status, .body = out[i].data, .len = out[i].len};
        const char *body = i < N - 1 ? "{\"prompt\": \"x\", \"max_tokens\": 2000, "
                                       "\"ignore_eos\": true, \"stream\": true}"
                                     : "{\"prompt\": \"x\", \"max_tokens\": 2000, "
                                       "\"ignore_eos\": true}";
        if (!rc_check_reply("/v1/completions", body, &as_reply, why, sizeof why)) {
            rc_note_failure("response", "/v1/completions", body, why);
            fail_msg("%s", why);
        }
        if (i < N - 1) {
            /* Ends with the cancelled chunk and [DONE]. */
            assert_non_null(strstr(out[i].data, "\"finish_reason\":\"cancelled\""));
            size_t n = strlen(out[i].data);
            assert_true(n > 14 && !strcmp(out[i].data + n - 14, "data: [DONE]\n\n"));
        } else {
            json_error_t e;
            json_t *j = json_loads(out[i].data, 0, &e);
            assert_non_null(j);
            json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
            assert_string_equal(json_string_value(json_object_get(c0, "finish_reason")),
                                "cancelled");
            json_decref(j);
        }
        free(out[i].data);
        curl_multi_remove_handle(m, easy[i]);
        curl_easy_cleanup(easy[i]);
    }
    curl_multi_cleanup(m);
    int status = -1;
    double exited = -1;
    for (double t0 = now_s(); now_s() - t0 < WAIT_MS / 1000;) {
        if (waitpid(s.pid, &status, WNOHANG) == s.pid) {
            exited = now_s() - t_signal;
            break;
        }
        sleep_ms(5);
    }
    fprintf(stderr, "SIGTERM -> exit: %.2f s (grace 1 s)\n", exited);
    assert_true(exited >= 0);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    s.pid = 0;
}

/* Several requests on one backend whose every step outlasts the cancel
 * the server sends at the end of the grace period: each still ends
 * "cancelled" (streams with the chunk and [DONE], whole responses with 200)
 * once the engine finishes the step it is in. Nothing here depends on
 * timing: SIGTERM goes only once every request is in the engine, and with
 * 1,000 tokens of 3 s steps to go none can end on its own. */
static void test_shutdown_ends_every_request_on_a_slow_backend(void **state)
{
    (void)state;
    test_server s;
    const char *args[] = {"--plugin-dir", PACED_PLUGIN_DIR, "--backend", "paced_backend",
                          "--set", "paced_backend.step_ms=3000",
                          "--set", "server.shutdown_grace_seconds=1", NULL};
    assert_true(test_server_start(&s, args));
    enum { N = 4, N_STREAMS = 2 };
    CURLM *m = curl_multi_init();
    CURL *easy[N];
    stream_buf out[N];
    char url[128];
    snprintf(url, sizeof url, "%s/v1/completions", s.base);
    for (int i = 0; i < N; i++) {
        memset(&out[i], 0, sizeof out[i]);
        easy[i] = curl_easy_init();
        curl_easy_setopt(easy[i], CURLOPT_URL, url);
        curl_easy_setopt(easy[i], CURLOPT_POSTFIELDS,
                         i < N_STREAMS ? "{\"prompt\": \"x\", \"max_tokens\": 1000, "
                                         "\"ignore_eos\": true, \"stream\": true}"
                                       : "{\"prompt\": \"x\", \"max_tokens\": 1000, "
                                         "\"ignore_eos\": true}");
        curl_easy_setopt(easy[i], CURLOPT_WRITEFUNCTION, into_buf);
        curl_easy_setopt(easy[i], CURLOPT_WRITEDATA, &out[i]);
        curl_easy_setopt(easy[i], CURLOPT_TIMEOUT, 120L);
        curl_multi_add_handle(m, easy[i]);
    }
    int running = 1;
    bool signalled = false;
    for (int rounds = 0; running && rounds < 100000; rounds++) {
        curl_multi_perform(m, &running);
        if (!signalled && metric_value(&s, "inferlab_http_inflight_requests") == N) {
            kill(s.pid, SIGTERM);
            signalled = true;
        }
        if (running)
            curl_multi_poll(m, NULL, 0, 20, NULL);
    }
    assert_true(signalled);
    CURLcode rc[N];
    for (int i = 0; i < N; i++)
        rc[i] = CURLE_GOT_NOTHING;
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(m, &left)))
        for (int i = 0; i < N; i++)
            if (msg->msg == CURLMSG_DONE && msg->easy_handle == easy[i])
                rc[i] = msg->data.result;
    for (int i = 0; i < N; i++) {
        long status = 0;
        curl_easy_getinfo(easy[i], CURLINFO_RESPONSE_CODE, &status);
        /* rc 18 (partial file) is a stream cut short before [DONE]. */
        if (status != 200 || rc[i] != CURLE_OK)
            fail_msg("request %d: status %ld, curl %d: %s", i, status, (int)rc[i],
                     out[i].data ? out[i].data : "(nothing)");
        assert_non_null(out[i].data);
        if (i < N_STREAMS) {
            if (!strstr(out[i].data, "\"finish_reason\":\"cancelled\""))
                fail_msg("stream %d has no cancelled chunk: %s", i, out[i].data);
            size_t n = strlen(out[i].data);
            assert_true(n > 14 && !strcmp(out[i].data + n - 14, "data: [DONE]\n\n"));
        } else {
            json_error_t e;
            json_t *j = json_loads(out[i].data, 0, &e);
            if (!j)
                fail_msg("request %d: not JSON: %s", i, out[i].data);
            json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
            assert_string_equal(json_string_value(json_object_get(c0, "finish_reason")),
                                "cancelled");
            json_decref(j);
        }
        free(out[i].data);
        curl_multi_remove_handle(m, easy[i]);
        curl_easy_cleanup(easy[i]);
    }
    curl_multi_cleanup(m);
    /* The exit, once the engine's step ends; bounded only against a hang. */
    int status = -1;
    bool exited = false;
    for (int i = 0; i < 6000 && !exited; i++) {
        exited = waitpid(s.pid, &status, WNOHANG) == s.pid;
        if (!exited)
            sleep_ms(10);
    }
    assert_true(exited);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    s.pid = 0;
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_idle_flood_does_not_starve),
        cmocka_unit_test(test_per_client_cap),
        cmocka_unit_test(test_loopback_has_its_own_budget),
        cmocka_unit_test(test_disconnect_cancels_while_tokens_flow),
        cmocka_unit_test(test_grace_end_cancels_and_exits),
        cmocka_unit_test(test_shutdown_ends_every_request_on_a_slow_backend),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    if (rc_failures())
        fprintf(stderr, "%u response check(s) failed\n", rc_failures());
    return ilab_test_exit(rc || rc_failures());
}
