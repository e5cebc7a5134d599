/* `inferlab serve` with a faulty backend beside a good one: each backend
 * runs in a worker process (host/isolation), so the faulty one's crash or
 * hang costs only its own requests. The good backend is paced_backend with
 * streams in flight; the faulty one is counting_backend with its `fault`
 * setting (tests/support/test_backend.c). */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "http_client.h"

/* Under AddressSanitizer a worker's segfault is caught by the sanitizer,
 * which reports it and exits with status 1 instead of dying of the signal. */
#if defined(__SANITIZE_ADDRESS__)
#define SEGV_OUTCOME "exited with status 1"
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SEGV_OUTCOME "exited with status 1"
#endif
#endif
#ifndef SEGV_OUTCOME
#define SEGV_OUTCOME "SIGSEGV"
#endif

#define N_STREAMS 4

typedef struct stream_call {
    const test_server *s;
    const char *body;
    http_reply reply;
    bool ok;
} stream_call;

static void *run_call(void *arg)
{
    stream_call *c = arg;
    c->ok = http_call(c->s, "/v1/completions", c->body, &c->reply);
    return NULL;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Start paced streams, send one request to the faulty backend while they
 * run, and check that it alone failed, with a JSON error naming the
 * backend and `expect`. */
static void fault_beside_streams(const char *fault, const char *expect)
{
    char set_fault[64];
    snprintf(set_fault, sizeof set_fault, "counting_backend.fault=%s", fault);
    const char *args[] = {"--plugin-dir", PACED_PLUGIN_DIR, "--backend", "paced_backend",
                          "--backend", "counting_backend", "--set", "paced_backend.step_ms=10",
                          "--set", set_fault, "--set", "counting_backend.fault_after=1",
                          "--set", "server.backend_call_timeout_seconds=2", NULL};
    test_server s;
    assert_true(test_server_start(&s, args));

    stream_call streams[N_STREAMS];
    pthread_t threads[N_STREAMS];
    const char *body = "{\"model\": \"paced-bigram\", \"prompt\": \"ab\", \"max_tokens\": 60, "
                       "\"ignore_eos\": true, \"stream\": true}";
    for (int i = 0; i < N_STREAMS; i++) {
        streams[i] = (stream_call){.s = &s, .body = body};
        assert_int_equal(pthread_create(&threads[i], NULL, run_call, &streams[i]), 0);
    }
    http_reply bad;
    assert_true(http_call(&s, "/v1/completions",
                          "{\"model\": \"counting\", \"prompt\": \"hello\", \"max_tokens\": 8}",
                          &bad));
    /* Right after, /health says what became of it (until it is back). */
    http_reply h0;
    assert_true(http_call(&s, "/health", NULL, &h0));
    assert_int_equal(h0.status, 200);
    if (!strstr(h0.body, "\"restarting\"") && !strstr(h0.body, "\"status\":\"ok\""))
        fail_msg("/health after the crash: %s", h0.body);
    http_reply_free(&h0);
    /* A 502: the backend behind the server failed (its worker is gone). */
    if (bad.status != 502 || !strstr(bad.body, "\"server_error\"") || !strstr(bad.body, expect) || !strstr(bad.body, "counting_backend") ||
        !strstr(bad.body, "\"error\""))
        fail_msg("the faulty backend's answer (%ld) does not name it and '%s': %s", bad.status,
                 expect, bad.body);
    http_reply_free(&bad);

    for (int i = 0; i < N_STREAMS; i++) {
        pthread_join(threads[i], NULL);
        assert_true(streams[i].ok);
        assert_int_equal(streams[i].reply.status, 200);
        if (!strstr(streams[i].reply.body, "\"finish_reason\":\"length\"") ||
            !strstr(streams[i].reply.body, "data: [DONE]"))
            fail_msg("stream %d did not complete: %s", i, streams[i].reply.body);
        http_reply_free(&streams[i].reply);
    }
    http_reply h;
    assert_true(http_call(&s, "/health", NULL, &h));
    assert_int_equal(h.status, 200);
    http_reply_free(&h);
    /* The faulty backend's worker is restarted after its back-off (1 s). */
    const char *restarts = "inferlab_backend_restarts_total{backend=\"counting_backend\"}";
    const char *up = "inferlab_backend_up{backend=\"counting_backend\"}";
    for (double end = now_s() + 20; now_s() < end; usleep(50000))
        if (metric_value(&s, restarts) >= 1 && metric_value(&s, up) == 1)
            break;
    assert_true(metric_value(&s, restarts) == 1);
    assert_true(metric_value(&s, up) == 1);
    assert_true(metric_value(&s, "inferlab_backend_up{backend=\"paced_backend\"}") == 1);
    /* The good backend still serves new requests. */
    http_reply again;
    assert_true(http_call(&s, "/v1/completions",
                          "{\"model\": \"paced-bigram\", \"prompt\": \"x\", \"max_tokens\": 4}",
                          &again));
    assert_int_equal(again.status, 200);
    http_reply_free(&again);
    assert_int_equal(test_server_stop(&s), 0);
}

static void segfaulting_backend(void **state)
{
    (void)state;
    fault_beside_streams("segv", SEGV_OUTCOME);
}

static void aborting_backend(void **state)
{
    (void)state;
    fault_beside_streams("abort", "SIGABRT");
}

static void exiting_backend(void **state)
{
    (void)state;
    fault_beside_streams("exit", "exited with status 3");
}

static void hanging_backend(void **state)
{
    (void)state;
    fault_beside_streams("hang", "did not answer within 2 s");
}

/* Requests to a hung backend wait for their backend, never for one of the
 * server's HTTP threads (there are two): with three of them stuck, one in
 * the hung eval and two behind it for their prompt's tokenize, /health and
 * the other model still answer at once, long before the call deadline. */
static void hung_backend_holds_no_http_thread(void **state)
{
    (void)state;
    const char *args[] = {"--plugin-dir", PACED_PLUGIN_DIR, "--backend", "paced_backend",
                          "--backend", "counting_backend", "--set", "counting_backend.fault=hang",
                          "--set", "server.backend_call_timeout_seconds=25", "--set",
                          "server.shutdown_grace_seconds=1", NULL};
    test_server s;
    assert_true(test_server_start(&s, args));
    enum { N_HUNG = 3 };
    stream_call hung[N_HUNG];
    pthread_t threads[N_HUNG];
    /* One at a time: a thread that waits on the backend would accept no
     * more connections, so the next request would go to the other one. */
    for (int i = 0; i < N_HUNG; i++) {
        hung[i] = (stream_call){.s = &s, .body = "{\"model\": \"counting\", \"prompt\": "
                                                 "\"hi\", \"max_tokens\": 4}"};
        assert_int_equal(pthread_create(&threads[i], NULL, run_call, &hung[i]), 0);
        if (i == 0) {
            for (double end = now_s() + 20; now_s() < end; usleep(20000))
                if (metric_value(&s, "inferlab:num_requests_running") >= 1)
                    break;
            assert_true(metric_value(&s, "inferlab:num_requests_running") >= 1);
        } else {
            usleep(300000); /* it reaches its prompt's tokenize */
        }
    }
    double t0 = now_s();
    http_reply h, ok;
    assert_true(http_call(&s, "/health", NULL, &h));
    assert_int_equal(h.status, 200);
    http_reply_free(&h);
    assert_true(http_call(&s, "/v1/completions",
                          "{\"model\": \"paced-bigram\", \"prompt\": \"x\", \"max_tokens\": 4}",
                          &ok));
    assert_int_equal(ok.status, 200);
    http_reply_free(&ok);
    double took = now_s() - t0;
    print_message("with %d requests on a hung backend: /health and a completion took %.2f s\n",
                  N_HUNG, took);
    if (took > 10.0)
        fail_msg("/health and another model's completion took %.2f s beside a hung backend", took);
    /* SIGTERM still ends everything in time; the stuck requests get answers. */
    assert_int_equal(test_server_stop(&s), 0);
    for (int i = 0; i < N_HUNG; i++) {
        pthread_join(threads[i], NULL);
        if (!hung[i].ok)
            fail_msg("request %d to the hung backend got no answer", i);
        if (hung[i].reply.status != 200 && !strstr(hung[i].reply.body, "\"error\""))
            fail_msg("a request to the hung backend got %ld without a JSON error: %s",
                     hung[i].reply.status, hung[i].reply.body);
        http_reply_free(&hung[i].reply);
    }
}

/* SIGTERM while a backend hangs: the server still exits within its grace
 * period and one second, taking the hung worker with it. */
static void sigterm_with_a_hung_backend(void **state)
{
    (void)state;
    const char *args[] = {"--plugin-dir", PACED_PLUGIN_DIR, "--backend", "counting_backend",
                          "--set", "counting_backend.fault=hang", "--set",
                          "server.shutdown_grace_seconds=1", NULL};
    test_server s;
    assert_true(test_server_start(&s, args));
    stream_call hung = {.s = &s,
                        .body = "{\"model\": \"counting\", \"prompt\": \"hi\", \"max_tokens\": 4}"};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, run_call, &hung), 0);
    /* The request is inside the hung eval once the engine says it runs. */
    for (double end = now_s() + 20; now_s() < end; usleep(20000))
        if (metric_value(&s, "inferlab:num_requests_running") >= 1)
            break;
    assert_true(metric_value(&s, "inferlab:num_requests_running") >= 1);
    double t0 = now_s();
    kill(s.pid, SIGTERM);
    int status;
    pid_t r;
    while ((r = waitpid(s.pid, &status, WNOHANG)) == 0 && now_s() - t0 < 20)
        usleep(10000);
    double took = now_s() - t0;
    pthread_join(t, NULL);
    if (hung.ok)
        http_reply_free(&hung.reply);
    assert_int_equal(r, s.pid);
    print_message("SIGTERM with a hung backend: exited after %.2f s (grace 1 s)\n", took);
    if (took > 2.0)
        fail_msg("the server took %.2f s to exit after SIGTERM (grace 1 s + 1 s)", took);
}


/* ---- plugin files written over while they serve --------------------------- */

static void copy_file(const char *from, const char *to)
{
    FILE *in = fopen(from, "rb"), *out = fopen(to, "r+b");
    if (!out)
        out = fopen(to, "wb");
    assert_non_null(in);
    assert_non_null(out);
    assert_int_equal(ftruncate(fileno(out), 0), 0); /* cp: same inode, new bytes */
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        assert_int_equal(fwrite(buf, 1, n, out), n);
    fclose(in);
    assert_int_equal(fclose(out), 0);
}

/* cp over served files under load: the identical bytes over one plugin,
 * junk over the other. Nothing that runs changes: the streams complete and
 * both backends go on answering; the next reload takes the good bytes and
 * refuses the junk, naming it. */
static void files_overwritten_under_load(void **state)
{
    (void)state;
    char dir[] = "/tmp/ilab-iso-XXXXXX";
    assert_non_null(mkdtemp(dir));
    assert_int_equal(chmod(dir, 0755), 0);
    char paced[256], counting[256], log[256];
    snprintf(paced, sizeof paced, "%s/paced_backend.so", dir);
    snprintf(counting, sizeof counting, "%s/counting_backend.so", dir);
    snprintf(log, sizeof log, "%s.log", dir);
    copy_file(PACED_PLUGIN_DIR "/paced_backend.so", paced);
    copy_file(PACED_PLUGIN_DIR "/counting_backend.so", counting);
    const char *args[] = {"--plugin-dir", dir, "--set", "paced_backend.step_ms=10", NULL};
    test_server s;
    assert_true(test_server_start_logged(&s, args, log));
    stream_call streams[N_STREAMS];
    pthread_t threads[N_STREAMS];
    const char *body = "{\"model\": \"paced-bigram\", \"prompt\": \"ab\", \"max_tokens\": 60, "
                       "\"ignore_eos\": true, \"stream\": true}";
    for (int i = 0; i < N_STREAMS; i++) {
        streams[i] = (stream_call){.s = &s, .body = body};
        assert_int_equal(pthread_create(&threads[i], NULL, run_call, &streams[i]), 0);
    }
    for (double end = now_s() + 20; now_s() < end; usleep(10000))
        if (metric_value(&s, "inferlab:num_requests_running") >= 1)
            break;
    copy_file(PACED_PLUGIN_DIR "/paced_backend.so", paced);
    FILE *junk = fopen(counting, "r+b");
    assert_non_null(junk);
    assert_int_equal(ftruncate(fileno(junk), 0), 0);
    fputs("not a plugin any more\n", junk);
    assert_int_equal(fclose(junk), 0);
    for (int i = 0; i < N_STREAMS; i++) {
        pthread_join(threads[i], NULL);
        assert_true(streams[i].ok);
        assert_int_equal(streams[i].reply.status, 200);
        if (!strstr(streams[i].reply.body, "data: [DONE]"))
            fail_msg("stream %d did not complete: %s", i, streams[i].reply.body);
        http_reply_free(&streams[i].reply);
    }
    const char *models[] = {"paced-bigram", "counting"};
    for (int round = 0; round < 2; round++) {
        if (round == 1) { /* the reload: good bytes in, junk refused */
            kill(s.pid, SIGHUP);
            /* both verdicts of the reload, whichever comes first */
            for (double end = now_s() + 20; now_s() < end; usleep(20000))
                if (metric_value(&s, "inferlab_backend_reloads_total{backend=\"counting_backend\","
                                     "result=\"refused\"}") >= 1 &&
                    metric_value(&s, "inferlab_backend_reloads_total{backend=\"paced_backend\","
                                     "result=\"ok\"}") >= 1)
                    break;
        }
        for (int m = 0; m < 2; m++) {
            char req[256];
            snprintf(req, sizeof req, "{\"model\": \"%s\", \"prompt\": \"x\", \"max_tokens\": 4}",
                     models[m]);
            http_reply r;
            assert_true(http_call(&s, "/v1/completions", req, &r));
            if (r.status != 200)
                fail_msg("round %d, %s: %ld %s", round, models[m], r.status, r.body);
            http_reply_free(&r);
        }
    }
    assert_true(metric_value(&s, "inferlab_backend_reloads_total{backend=\"counting_backend\","
                                 "result=\"refused\"}") == 1);
    assert_true(metric_value(&s, "inferlab_backend_reloads_total{backend=\"paced_backend\","
                                 "result=\"ok\"}") == 1);
    assert_int_equal(test_server_stop(&s), 0);
    unlink(paced);
    unlink(counting);
    rmdir(dir);
    unlink(log);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(segfaulting_backend),
        cmocka_unit_test(aborting_backend),
        cmocka_unit_test(exiting_backend),
        cmocka_unit_test(hanging_backend),
        cmocka_unit_test(hung_backend_holds_no_http_thread),
        cmocka_unit_test(sigterm_with_a_hung_backend),
        cmocka_unit_test(files_overwritten_under_load),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
