/* `inferlab serve` over a plugin folder: every backend of the folder served
 * at once (the request's model picks one; /v1/models, /health and /metrics
 * name each), and reloading -- SIGHUP and --watch -- with a plugin replaced
 * under continuous load: zero failed requests, requests in flight finish on
 * the version they started on, new ones go to the new version, a bad
 * replacement (corrupt file, manifest the loader refuses) is refused and the
 * old version keeps serving, and no replaced library stays mapped.
 *
 * Every wait is for an event (a version listed, a counter moved) with a
 * generous deadline, never a fixed sleep: the machine may be loaded. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "http_client.h"
#include "response_check.h"

#ifndef RELOAD_PLUGIN_DIR
#error "RELOAD_PLUGIN_DIR must name the directory holding reload_v1.so, reload_v2.so, reload_vbad.so"
#endif

#define DEADLINE_S 60.0 /* for anything awaited: generous, the machine is shared */

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* --- files ------------------------------------------------------------------------ */

static char *make_folder(void)
{
    char *d = strdup("/tmp/ilab-reload-XXXXXX");
    assert_non_null(mkdtemp(d)); /* 0700: the trust rule accepts it */
    return d;
}

static void remove_folder(char *d)
{
    DIR *dir = opendir(d);
    if (dir) {
        for (struct dirent *e; (e = readdir(dir));) {
            if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2])))
                continue;
            char p[1024];
            snprintf(p, sizeof p, "%s/%s", d, e->d_name);
            unlink(p);
        }
        closedir(dir);
    }
    rmdir(d);
    free(d);
}

/* Put a copy of `src` at `dir`/`name` the way an operator should: written
 * under another name (not *.so, so no scan sees it half-written), then
 * renamed over the old file. */
static void install_file(const char *src, const char *dir, const char *name)
{
    char tmp[1024], dst[1024];
    snprintf(tmp, sizeof tmp, "%s/.incoming.tmp", dir);
    snprintf(dst, sizeof dst, "%s/%s", dir, name);
    int in = open(src, O_RDONLY);
    assert_true(in >= 0);
    int out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0755);
    assert_true(out >= 0);
    char buf[65536];
    for (ssize_t n; (n = read(in, buf, sizeof buf)) > 0;)
        assert_int_equal(write(out, buf, (size_t)n), n);
    close(in);
    assert_int_equal(fchmod(out, 0755), 0);
    close(out);
    assert_int_equal(rename(tmp, dst), 0);
}

/* A file that is not a shared object at all, installed the same way. */
static void install_garbage(const char *dir, const char *name)
{
    char tmp[1024], dst[1024];
    snprintf(tmp, sizeof tmp, "%s/.incoming.tmp", dir);
    snprintf(dst, sizeof dst, "%s/%s", dir, name);
    FILE *f = fopen(tmp, "w");
    assert_non_null(f);
    for (int i = 0; i < 4096; i++)
        fputc((i * 131 + 7) & 0xff, f);
    fclose(f);
    assert_int_equal(chmod(tmp, 0755), 0);
    assert_int_equal(rename(tmp, dst), 0);
}

static const char *reload_so(const char *v)
{
    static char p[1024];
    snprintf(p, sizeof p, "%s/reload_v%s.so", RELOAD_PLUGIN_DIR, v);
    return p;
}

/* --- HTTP ------------------------------------------------------------------------- */

static json_t *get_json(const test_server *s, const char *path, long *status)
{
    http_reply r;
    if (!http_call(s, path, NULL, &r)) {
        http_reply_free(&r);
        return NULL;
    }
    *status = r.status;
    json_t *j = json_loads(r.body, 0, NULL);
    http_reply_free(&r);
    return j;
}

/* The version /v1/models lists for `backend`, "" when it is not listed. */
static void listed_version(const test_server *s, const char *backend, char *out, size_t cap)
{
    long status = 0;
    out[0] = '\0';
    json_t *m = get_json(s, "/v1/models", &status);
    json_t *data = json_object_get(m, "data");
    for (size_t i = 0; i < json_array_size(data); i++) {
        json_t *d = json_array_get(data, i);
        if (!strcmp(json_string_value(json_object_get(d, "backend")), backend))
            snprintf(out, cap, "%s", json_string_value(json_object_get(d, "version")));
    }
    json_decref(m);
}

/* Wait until /v1/models lists `backend` at `version` ("" = not listed). */
static bool await_version(const test_server *s, const char *backend, const char *version)
{
    char got[64];
    for (double end = now_s() + DEADLINE_S; now_s() < end; nap_ms(2)) {
        listed_version(s, backend, got, sizeof got);
        if (!strcmp(got, version))
            return true;
    }
    fprintf(stderr, "backend %s: waited for version '%s', /v1/models says '%s'\n", backend,
            version, got);
    return false;
}

static bool await_metric(const test_server *s, const char *series, double at_least)
{
    for (double end = now_s() + DEADLINE_S; now_s() < end; nap_ms(10))
        if (metric_value(s, series) >= at_least)
            return true;
    fprintf(stderr, "%s stayed below %g\n", series, at_least);
    return false;
}

static bool await_metric_at_most(const test_server *s, const char *series, double at_most)
{
    for (double end = now_s() + DEADLINE_S; now_s() < end; nap_ms(10)) {
        double v = metric_value(s, series);
        if (v >= 0 && v <= at_most)
            return true;
    }
    fprintf(stderr, "%s stayed above %g\n", series, at_most);
    return false;
}

static void completion_body(char *body, size_t cap, const char *model, bool stream,
                            int max_tokens)
{
    snprintf(body, cap, "{\"model\": \"%s\", \"prompt\": \"Once\", \"max_tokens\": %d, "
                        "\"temperature\": 0, \"ignore_eos\": true, \"stream\": %s}",
             model, max_tokens, stream ? "true" : "false");
}

/* The text of a whole event stream (`body` of `len` bytes), NULL unless it
 * ends with [DONE] and holds no error event. */
static char *stream_text(const char *body, size_t len)
{
    if (!strstr(body, "data: [DONE]\n\n") || strstr(body, "\"error\""))
        return NULL;
    char *text = calloc(1, len + 1);
    for (const char *p = strstr(body, "data: {"); p; p = strstr(p + 1, "data: {")) {
        const char *end = strstr(p, "\n\n");
        json_t *j = end ? json_loadb(p + 6, (size_t)(end - p - 6), 0, NULL) : NULL;
        json_t *t = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "text");
        if (json_is_string(t))
            strcat(text, json_string_value(t));
        json_decref(j);
    }
    return text;
}

/* The text of a completion, streamed or not; NULL (and why, on stderr) when
 * the request failed in any way: transport, status, an error event, a
 * stream that does not end with [DONE]. */
static char *completion_n(const test_server *s, const char *model, bool stream, int max_tokens,
                          long *status)
{
    char body[512];
    completion_body(body, sizeof body, model, stream, max_tokens);
    http_reply r;
    *status = 0;
    if (!http_call(s, "/v1/completions", body, &r)) {
        http_reply_free(&r);
        return NULL;
    }
    *status = r.status;
    char *text = NULL;
    if (r.status != 200) {
        fprintf(stderr, "completion on %s -> %ld: %s\n", model, r.status, r.body);
    } else if (!stream) {
        json_t *j = json_loads(r.body, 0, NULL);
        json_t *t = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "text");
        text = json_is_string(t) ? strdup(json_string_value(t)) : NULL;
        json_decref(j);
    } else if (!(text = stream_text(r.body, r.len))) {
        fprintf(stderr, "stream on %s did not end well: %s\n", model, r.body);
    }
    http_reply_free(&r);
    return text;
}

static char *completion(const test_server *s, const char *model, bool stream, long *status)
{
    return completion_n(s, model, stream, 24, status);
}

/* --- every backend of a folder ------------------------------------------------------ */

static bool log_has(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    char line[4096];
    bool found = false;
    while (!found && fgets(line, sizeof line, f))
        found = strstr(line, needle) != NULL;
    fclose(f);
    return found;
}

/* Wait until a line of the log holds both strings. */
static bool await_log(const char *path, const char *a, const char *b)
{
    for (double end = now_s() + DEADLINE_S; now_s() < end; nap_ms(20)) {
        FILE *f = fopen(path, "r");
        char line[4096];
        bool found = false;
        while (f && !found && fgets(line, sizeof line, f))
            found = strstr(line, a) && strstr(line, b);
        if (f)
            fclose(f);
        if (found)
            return true;
    }
    fprintf(stderr, "no line with '%s' and '%s' in %s\n", a, b, path);
    return false;
}

static void test_serves_every_backend(void **state)
{
    (void)state;
    char *dir = make_folder();
    install_file(PACED_PLUGIN_DIR "/paced_backend.so", dir, "paced_backend.so");
    install_file(PACED_PLUGIN_DIR "/counting_backend.so", dir, "counting_backend.so");
    install_garbage(dir, "broken.so");
    char log[1100];
    snprintf(log, sizeof log, "%s/stderr.log", dir);
    test_server s;
    /* Unset: vllm_stub and sglang_stub (built-in folder) must be unavailable. */
    unsetenv("INFERLAB_VLLM_URL");
    unsetenv("INFERLAB_SGLANG_URL");
    const char *args[] = {"--plugin-dir", dir, NULL};
    assert_true(test_server_start_logged(&s, args, log));

    /* Each model, each backend named. */
    long status = 0;
    json_t *m = get_json(&s, "/v1/models", &status);
    assert_int_equal(status, 200);
    json_t *data = json_object_get(m, "data");
    bool paced = false, counting = false, vllm = false;
    for (size_t i = 0; i < json_array_size(data); i++) {
        const char *id = json_string_value(json_object_get(json_array_get(data, i), "id"));
        const char *be = json_string_value(json_object_get(json_array_get(data, i), "backend"));
        paced |= !strcmp(id, "paced-bigram") && !strcmp(be, "paced_backend");
        counting |= !strcmp(id, "counting") && !strcmp(be, "counting_backend");
        vllm |= !strcmp(be, "vllm_stub");
    }
    json_decref(m);
    assert_true(paced);
    assert_true(counting);
    assert_false(vllm); /* not serving: not a model to pick */

    /* The model picks the backend: by model name or by backend name. */
    long st;
    char *a = completion(&s, "paced-bigram", false, &st);
    assert_non_null(a);
    char *b = completion(&s, "counting_backend", true, &st);
    assert_non_null(b);
    assert_string_not_equal(a, b);
    free(a);
    free(b);

    /* An unknown model: 404 naming it and listing the ones served. */
    http_reply r;
    assert_true(http_call(&s, "/v1/completions", "{\"model\": \"gpt-4\", \"prompt\": \"x\"}", &r));
    assert_int_equal(r.status, 404);
    assert_non_null(strstr(r.body, "'gpt-4'"));
    assert_non_null(strstr(r.body, "'paced-bigram' (backend paced_backend)"));
    assert_non_null(strstr(r.body, "'counting' (backend counting_backend)"));
    assert_non_null(strstr(r.body, "\"param\":\"model\""));
    http_reply_free(&r);
    /* A backend that is not serving: 503 with its reason; the others serve. */
    assert_true(http_call(&s, "/v1/completions", "{\"model\": \"vllm_stub\", \"prompt\": \"x\"}",
                          &r));
    assert_int_equal(r.status, 503);
    assert_non_null(strstr(r.body, "vllm_stub"));
    http_reply_free(&r);
    /* /tokenize goes by model too. */
    assert_true(http_call(&s, "/tokenize", "{\"model\": \"counting\", \"prompt\": \"Hi\"}", &r));
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "\"tokens\":[1,")); /* counting's BOS is 1, paced's 256 */
    http_reply_free(&r);

    /* /health: 200 while any serves, each backend listed with its state. */
    json_t *h = get_json(&s, "/health", &status);
    assert_int_equal(status, 200);
    assert_string_equal(json_string_value(json_object_get(h, "status")), "degraded");
    json_t *list = json_object_get(h, "backends");
    bool saw_down = false, saw_ok = false;
    for (size_t i = 0; i < json_array_size(list); i++) {
        json_t *e = json_array_get(list, i);
        const char *be = json_string_value(json_object_get(e, "backend"));
        const char *hs = json_string_value(json_object_get(e, "status"));
        if (!strcmp(be, "vllm_stub")) {
            saw_down = !strcmp(hs, "unavailable") &&
                       strstr(json_string_value(json_object_get(e, "reason")), "vLLM");
        }
        if (!strcmp(be, "counting_backend"))
            saw_ok = !strcmp(hs, "ok") &&
                     !strcmp(json_string_value(json_object_get(e, "version")), "0.2.0");
    }
    json_decref(h);
    assert_true(saw_down);
    assert_true(saw_ok);

    /* Metrics carry the backend. */
    assert_true(metric_value(&s, "inferlab_backend_up{backend=\"paced_backend\"}") == 1);
    assert_true(metric_value(&s, "inferlab_backend_up{backend=\"vllm_stub\"}") == 0);
    assert_true(metric_value(&s, "inferlab_backend_finished_total{backend=\"counting_backend\","
                                 "reason=\"length\"}") == 1);
    assert_true(metric_value(&s, "inferlab_backend_generation_tokens_total{backend=\""
                                 "paced_backend\"}") == 24);
    /* The engines' own figures too, for the backends serving only. */
    assert_true(metric_value(&s, "inferlab_backend_requests_running{backend=\"counting_backend\"}")
                == 0);
    assert_true(metric_value(&s, "inferlab_backend_requests_waiting{backend=\"paced_backend\"}")
                == 0);
    assert_true(metric_value(&s, "inferlab_backend_requests_running{backend=\"vllm_stub\"}") == -1);
    assert_int_equal(test_server_stop(&s), 0);
    /* What did not serve was named, with the reason. */
    assert_true(log_has(log, "not serving backend 'vllm_stub': no vLLM server configured"));
    assert_true(log_has(log, "broken.so: dlopen failed"));

    /* A list instead of the folder: only those, and a wrong name is refused. */
    const char *listed[] = {"--plugin-dir", dir, "--backend", "paced_backend", "--backend",
                            "counting_backend", NULL};
    assert_true(test_server_start(&s, listed));
    h = get_json(&s, "/health", &status);
    assert_int_equal(status, 200);
    assert_string_equal(json_string_value(json_object_get(h, "status")), "ok");
    assert_int_equal(json_array_size(json_object_get(h, "backends")), 2);
    json_decref(h);
    /* No model and no default among them: the request must name one. */
    assert_true(http_call(&s, "/v1/completions", "{\"prompt\": \"x\"}", &r));
    assert_int_equal(r.status, 400);
    assert_non_null(strstr(r.body, "'model' is required"));
    http_reply_free(&r);
    assert_int_equal(test_server_stop(&s), 0);

    /* The same list from the settings (server.backends). */
    char conf[1100];
    snprintf(conf, sizeof conf, "%s/serve.yaml", dir);
    FILE *f = fopen(conf, "w");
    assert_non_null(f);
    fputs("server:\n  backends: [counting_backend]\n", f);
    fclose(f);
    const char *configured[] = {"--plugin-dir", dir, "--config", conf, NULL};
    assert_true(test_server_start(&s, configured));
    char v[64];
    listed_version(&s, "counting_backend", v, sizeof v);
    assert_string_equal(v, "0.2.0");
    listed_version(&s, "paced_backend", v, sizeof v);
    assert_string_equal(v, ""); /* not in the list */
    assert_int_equal(test_server_stop(&s), 0);
    remove_folder(dir);
}

/* --- replacing a plugin under load ------------------------------------------------- */

#define N_CLIENTS 4
#define MAX_DONE 20000

typedef struct done_request {
    double start, end;
    char *text; /* NULL: failed */
} done_request;

typedef struct load {
    const test_server *s;
    atomic_bool stop;
    pthread_mutex_t mu;
    done_request done[MAX_DONE];
    size_t n_done;
    size_t failed;
} load;

typedef struct client {
    load *l;
    int index;
} client;

static void *client_main(void *arg)
{
    client *c = arg;
    load *l = c->l;
    for (int i = 0; !atomic_load(&l->stop); i++) {
        double t0 = now_s();
        long status;
        /* Streams mostly (each spans several engine steps), whole answers too. */
        char *text = completion(l->s, "reload_backend", (i + c->index) % 4 != 0, &status);
        double t1 = now_s();
        pthread_mutex_lock(&l->mu);
        if (!text)
            l->failed++;
        if (l->n_done < MAX_DONE)
            l->done[l->n_done++] = (done_request){t0, t1, text};
        else
            free(text);
        pthread_mutex_unlock(&l->mu);
    }
    return NULL;
}

/* Wait until `more` requests started after `since` have ended. */
static bool await_requests_after(load *l, double since, size_t more)
{
    for (double end = now_s() + DEADLINE_S; now_s() < end; nap_ms(5)) {
        size_t n = 0;
        pthread_mutex_lock(&l->mu);
        for (size_t i = 0; i < l->n_done; i++)
            n += l->done[i].start > since;
        pthread_mutex_unlock(&l->mu);
        if (n >= more)
            return true;
    }
    return false;
}

/* A long stream that the test starts on one version and swaps the plugin
 * under: it is in flight at the swap once its first token has come (the old
 * version wrote it), and still in flight when the new version was listed if
 * a token came after that. The engine sleeps step_ms a step, so SPAN_TOKENS
 * tokens take at least SPAN_TOKENS x 6 ms, several times a reload. */
#define SPAN_TOKENS 400

typedef struct span_request {
    const test_server *s;
    pthread_t thread;
    atomic_bool first_token; /* a token has come */
    _Atomic double last_token; /* when the last data event before [DONE] came */
    char *body;              /* the whole event stream */
    size_t len;
    bool transport_ok;
} span_request;

static size_t span_collect(char *p, size_t size, size_t n, void *arg)
{
    span_request *r = arg;
    size_t from = r->len > 6 ? r->len - 6 : 0; /* an event may start in the last piece */
    if (!http_buf_append(&r->body, &r->len, p, size * n))
        return 0;
    if (memmem(r->body + from, r->len - from, "data: {", 7)) {
        atomic_store(&r->last_token, now_s());
        atomic_store(&r->first_token, true);
    }
    return size * n;
}

static void *span_main(void *arg)
{
    span_request *r = arg;
    char url[128], body[512];
    snprintf(url, sizeof url, "%s/v1/completions", r->s->base);
    completion_body(body, sizeof body, "reload_backend", true, SPAN_TOKENS);
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    CURL *c = curl_easy_init();
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, span_collect);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, (long)DEADLINE_S);
    r->transport_ok = curl_easy_perform(c) == CURLE_OK;
    curl_easy_cleanup(c);
    curl_slist_free_all(h);
    return NULL;
}

static void span_start(span_request *r, const test_server *s)
{
    *r = (span_request){.s = s};
    assert_int_equal(pthread_create(&r->thread, NULL, span_main, r), 0);
    for (double end = now_s() + DEADLINE_S; !atomic_load(&r->first_token); nap_ms(1))
        assert_true(now_s() < end);
}

/* Wait for the stream to end; its text, NULL if it failed. */
static char *span_finish(span_request *r)
{
    pthread_join(r->thread, NULL);
    char *text = r->transport_ok && r->body ? stream_text(r->body, r->len) : NULL;
    if (!text)
        fprintf(stderr, "spanning stream failed: %s\n", r->body ? r->body : "(nothing)");
    free(r->body);
    return text;
}

/* The load's threads, where a failed assertion (a longjmp out of the test)
 * cannot leave them: the teardown stops them. Everything they touch is
 * static or on the heap. */
static load *running_load;
static pthread_t load_threads[N_CLIENTS];
static client load_clients[N_CLIENTS];
static test_server load_server;

static void start_load(load *l)
{
    running_load = l;
    for (int i = 0; i < N_CLIENTS; i++) {
        load_clients[i] = (client){l, i};
        pthread_create(&load_threads[i], NULL, client_main, &load_clients[i]);
    }
}

static void stop_load(void)
{
    if (!running_load)
        return;
    atomic_store(&running_load->stop, true);
    for (int i = 0; i < N_CLIENTS; i++)
        pthread_join(load_threads[i], NULL);
    running_load = NULL;
}

static int teardown_load(void **state)
{
    (void)state;
    stop_load();
    if (load_server.pid)
        test_server_stop(&load_server);
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Lines of /proc/PID/maps naming a file in `dir`; and whether one is a
 * deleted (replaced) file. */
static int mapped_files(pid_t pid, const char *dir, bool *deleted)
{
    char p[64], line[2048];
    snprintf(p, sizeof p, "/proc/%d/maps", (int)pid);
    FILE *f = fopen(p, "r");
    assert_non_null(f);
    int n = 0;
    *deleted = false;
    while (fgets(line, sizeof line, f))
        if (strstr(line, dir)) {
            n++;
            *deleted |= strstr(line, "(deleted)") != NULL;
        }
    fclose(f);
    return n;
}

/* Descriptors of the server open on files in `dir`. */
static int open_files(pid_t pid, const char *dir)
{
    char p[64];
    snprintf(p, sizeof p, "/proc/%d/fd", (int)pid);
    DIR *d = opendir(p);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        char link[1024], target[1024];
        snprintf(link, sizeof link, "%s/%s", p, e->d_name);
        ssize_t len = readlink(link, target, sizeof target - 1);
        if (len > 0) {
            target[len] = '\0';
            n += strstr(target, dir) != NULL;
        }
    }
    closedir(d);
    return n;
}

typedef struct swap {
    const char *file;     /* "1", "2", or "garbage" / "bad" */
    bool good;
    double hup, visible;  /* when SIGHUP went, when the new version was listed */
    char serving[16];     /* the version serving after it */
} swap;

static void test_replace_under_load(void **state)
{
    (void)state;
    char *dir = make_folder();
    install_file(reload_so("1"), dir, "reload_backend.so");
    char log[1100];
    snprintf(log, sizeof log, "%s/stderr.log", dir);
    test_server *sp = &load_server, s;
    /* One backend, as serve has always been run; 6 ms a step, so the load's
     * 24-token requests take 150 ms or more and the long streams started
     * before each good swap at least 2.4 s: in flight across the swap. */
    const char *args[] = {"--plugin-dir", dir, "--backend", "reload_backend", "--set",
                          "reload_backend.step_ms=6", NULL};
    assert_true(test_server_start_logged(sp, args, log));
    s = *sp;
    assert_true(await_version(&s, "reload_backend", "1.0.0"));
    long st;
    char *text_v1 = completion(&s, "reload_backend", false, &st);
    assert_non_null(text_v1);
    char *long_v1 = completion_n(&s, "reload_backend", false, SPAN_TOKENS, &st), *long_v2 = NULL;
    assert_non_null(long_v1);
    size_t spans_in_flight = 0; /* spanning streams still running when the swap was listed */

    load *l = calloc(1, sizeof *l);
    l->s = sp;
    pthread_mutex_init(&l->mu, NULL);
    start_load(l);
    /* Ten replacements, two of them bad. */
    swap swaps[] = {
        {"2", true, 0, 0, "2.0.0"}, {"1", true, 0, 0, "1.0.0"}, {"garbage", false, 0, 0, "1.0.0"},
        {"2", true, 0, 0, "2.0.0"}, {"1", true, 0, 0, "1.0.0"}, {"bad", false, 0, 0, "1.0.0"},
        {"2", true, 0, 0, "2.0.0"}, {"1", true, 0, 0, "1.0.0"}, {"2", true, 0, 0, "2.0.0"},
        {"1", true, 0, 0, "1.0.0"},
    };
    const size_t n_swaps = sizeof swaps / sizeof swaps[0];
    char *text_v2 = NULL;
    double refused = 0;
    assert_true(await_requests_after(l, now_s() - 1000, 3));
    for (size_t i = 0; i < n_swaps; i++) {
        swap *w = &swaps[i];
        const char *before = i ? swaps[i - 1].serving : "1.0.0";
        static span_request span;
        if (w->good)
            span_start(&span, &s); /* in flight on `before` */
        if (!strcmp(w->file, "garbage"))
            install_garbage(dir, "reload_backend.so");
        else
            install_file(reload_so(w->file), dir, "reload_backend.so");
        w->hup = now_s();
        assert_int_equal(kill(s.pid, SIGHUP), 0);
        if (w->good) {
            assert_true(await_version(&s, "reload_backend", w->serving));
            w->visible = now_s();
        } else {
            /* Refused: counted, and the old version goes on. */
            assert_true(await_metric(&s, "inferlab_backend_reloads_total{backend=\""
                                         "reload_backend\",result=\"refused\"}", ++refused));
            w->visible = now_s();
            char v[64];
            listed_version(&s, "reload_backend", v, sizeof v);
            assert_string_equal(v, w->serving);
        }
        if (w->good) {
            /* The stream in flight at the swap ends on the version it began
             * on, whole: every token the old version's. */
            char *text = span_finish(&span);
            assert_non_null(text);
            assert_string_equal(text, !strcmp(before, "1.0.0") ? long_v1 : long_v2);
            spans_in_flight += atomic_load(&span.last_token) > w->visible;
            free(text);
        }
        if (!text_v2 && !strcmp(w->serving, "2.0.0")) {
            text_v2 = completion(&s, "reload_backend", true, &st);
            assert_non_null(text_v2);
            assert_string_not_equal(text_v1, text_v2); /* the versions are told apart */
            long_v2 = completion_n(&s, "reload_backend", true, SPAN_TOKENS, &st);
            assert_non_null(long_v2);
            assert_string_not_equal(long_v1, long_v2);
        }
        /* Let the load run on what serves now before the next swap. */
        assert_true(await_requests_after(l, w->visible, 4));
    }
    stop_load();

    /* Every request answered, by one version or the other, and the ones
     * that began after a version was listed by that version. */
    size_t by_v1 = 0, by_v2 = 0, odd = 0, wrong = 0, spanning_old = 0;
    for (size_t i = 0; i < l->n_done; i++) {
        done_request *d = &l->done[i];
        if (!d->text)
            continue;
        bool v1 = !strcmp(d->text, text_v1), v2 = !strcmp(d->text, text_v2);
        by_v1 += v1;
        by_v2 += v2;
        odd += !v1 && !v2;
        for (size_t k = 0; k < n_swaps; k++) {
            double next = k + 1 < n_swaps ? swaps[k + 1].hup : 1e300;
            bool want_v1 = !strcmp(swaps[k].serving, "1.0.0");
            if (d->start > swaps[k].visible && d->end < next && (want_v1 ? !v1 : !v2))
                wrong++;
            /* Began before a good swap, ended after it, on the old text. */
            const char *before = k ? swaps[k - 1].serving : "1.0.0";
            if (swaps[k].good && d->start < swaps[k].hup && d->end > swaps[k].visible &&
                (!strcmp(before, "1.0.0") ? v1 : v2))
                spanning_old++;
        }
    }
    double lat[16];
    size_t n_lat = 0;
    for (size_t k = 0; k < n_swaps; k++)
        if (swaps[k].good)
            lat[n_lat++] = (swaps[k].visible - swaps[k].hup) * 1000.0;
    qsort(lat, n_lat, sizeof lat[0], cmp_double);
    fprintf(stderr, "replace under load: %zu swaps (%zu good, %zu refused), %zu requests: "
                    "%zu failed, %zu by 1.0.0, %zu by 2.0.0, %zu other; %zu in flight at a "
                    "swap finished on the old version; %zu of %zu long streams still ran on "
                    "the old version when the new one was listed; SIGHUP to new version "
                    "listed: median %.1f ms (min %.1f, max %.1f)\n", n_swaps, n_lat,
            n_swaps - n_lat, l->n_done, l->failed, by_v1, by_v2, odd, spanning_old,
            spans_in_flight, n_lat, lat[n_lat / 2], lat[0], lat[n_lat - 1]);
    assert_int_equal(l->failed, 0);
    assert_int_equal(odd, 0);
    assert_int_equal(wrong, 0);
    assert_true(by_v1 > 0 && by_v2 > 0);
    /* Not vacuous: a stream was in flight across a swap. Each lasts at
     * least 2.4 s by the step floor, a reload well under one. */
    assert_true(spans_in_flight > 0);

    /* The replaced versions are retired once their requests are over. The
     * server runs its backends in worker processes, each on a private copy
     * of the plugin's file: the server itself maps no plugin file and holds
     * no descriptor on one, so a file replaced in the folder is nothing to
     * it. */
    assert_true(await_metric_at_most(&s, "inferlab_backend_retired_versions", 0));
    bool deleted = true;
    assert_int_equal(mapped_files(s.pid, dir, &deleted), 0);
    assert_int_equal(open_files(s.pid, dir), 1); /* the stderr log only */
    assert_true(metric_value(&s, "inferlab_backend_retired_versions") == 0);
    /* The refusals said why. */
    json_t *h = get_json(&s, "/health", &st);
    assert_int_equal(st, 200);
    json_decref(h);
    assert_int_equal(test_server_stop(sp), 0);
    assert_true(log_has(log, "refused the new file"));
    assert_true(log_has(log, "invalid ELF header"));
    assert_true(log_has(log, "manifest version '3.0.1' differs from the entry's version '3.0.0'"));
    assert_true(log_has(log, "keeps serving"));
    /* The server's own figure: SIGHUP taken to the reload done. */
    double took[16];
    size_t n_took = 0;
    FILE *f = fopen(log, "r");
    char line[4096];
    while (f && fgets(line, sizeof line, f) && n_took < 16) {
        const char *p = strstr(line, "reload: done in ");
        if (p)
            took[n_took++] = strtod(p + 16, NULL);
    }
    if (f)
        fclose(f);
    assert_int_equal(n_took, n_swaps);
    qsort(took, n_took, sizeof took[0], cmp_double);
    fprintf(stderr, "replace under load: the server's reloads took median %.1f ms (min %.1f, "
                    "max %.1f)\n", took[n_took / 2], took[0], took[n_took - 1]);

    for (size_t i = 0; i < l->n_done; i++)
        free(l->done[i].text);
    pthread_mutex_destroy(&l->mu);
    free(l);
    free(text_v1);
    free(text_v2);
    free(long_v1);
    free(long_v2);
    remove_folder(dir);
}

/* A refused replacement is shown in /health until a good one comes; one
 * whose constructor crashes is refused too, and the server never ran it. */
static void test_refusal_in_health(void **state)
{
    (void)state;
    char *dir = make_folder();
    install_file(reload_so("1"), dir, "reload_backend.so");
    test_server s;
    const char *args[] = {"--plugin-dir", dir, "--backend", "reload_backend", NULL};
    assert_true(test_server_start(&s, args));
    install_file(CRASH_PLUGIN, dir, "reload_backend.so");
    assert_int_equal(kill(s.pid, SIGHUP), 0);
    assert_true(await_metric(&s, "inferlab_backend_reloads_total{backend=\"reload_backend\","
                                 "result=\"refused\"}", 1));
    long status;
    json_t *h = get_json(&s, "/health", &status);
    assert_int_equal(status, 200);
    json_t *b0 = json_array_get(json_object_get(h, "backends"), 0);
    assert_non_null(strstr(json_string_value(json_object_get(b0, "reload_refused")),
                           "crashed with signal 11 (SIGSEGV) while loading"));
    json_decref(h);
    char *t = completion(&s, "reload_backend", false, &status);
    assert_non_null(t); /* 1.0.0 serves on */
    free(t);
    install_file(reload_so("bad"), dir, "reload_backend.so");
    assert_int_equal(kill(s.pid, SIGHUP), 0);
    assert_true(await_metric(&s, "inferlab_backend_reloads_total{backend=\"reload_backend\","
                                 "result=\"refused\"}", 2));
    h = get_json(&s, "/health", &status);
    assert_int_equal(status, 200);
    b0 = json_array_get(json_object_get(h, "backends"), 0);
    assert_string_equal(json_string_value(json_object_get(b0, "version")), "1.0.0");
    assert_non_null(strstr(json_string_value(json_object_get(b0, "reload_refused")),
                           "manifest version"));
    json_decref(h);
    install_file(reload_so("2"), dir, "reload_backend.so");
    assert_int_equal(kill(s.pid, SIGHUP), 0);
    assert_true(await_version(&s, "reload_backend", "2.0.0"));
    h = get_json(&s, "/health", &status);
    b0 = json_array_get(json_object_get(h, "backends"), 0);
    assert_null(json_object_get(b0, "reload_refused"));
    json_decref(h);
    assert_int_equal(test_server_stop(&s), 0);
    remove_folder(dir);
}

/* --watch: a plugin dropped into the folder serves, a replaced one is
 * reloaded, a removed one goes -- no signal sent. */
static void test_watch(void **state)
{
    (void)state;
    char *dir = make_folder();
    install_file(reload_so("1"), dir, "reload_backend.so");
    test_server s;
    /* The folder given, and only its plugins: a list would not take new ones. */
    const char *args[] = {"--plugin-dir", dir, "--watch", NULL};
    char log[1100];
    snprintf(log, sizeof log, "%s/stderr.log", dir);
    assert_true(test_server_start_logged(&s, args, log));
    assert_true(await_version(&s, "reload_backend", "1.0.0"));
    install_file(PACED_PLUGIN_DIR "/counting_backend.so", dir, "counting_backend.so");
    assert_true(await_version(&s, "counting_backend", "0.2.0"));
    long st;
    char *t = completion(&s, "counting", false, &st);
    assert_non_null(t);
    free(t);
    install_file(reload_so("2"), dir, "reload_backend.so");
    assert_true(await_version(&s, "reload_backend", "2.0.0"));
    /* A file that does not load is named in the log, with the reason. */
    install_garbage(dir, "broken.so");
    assert_true(await_log(log, "reload: not serving ", "broken.so: dlopen failed"));
    char p[1024];
    snprintf(p, sizeof p, "%s/counting_backend.so", dir);
    assert_int_equal(unlink(p), 0);
    assert_true(await_version(&s, "counting_backend", ""));
    assert_null(completion(&s, "counting_backend", false, &st));
    assert_int_equal(st, 404);
    assert_int_equal(test_server_stop(&s), 0);
    remove_folder(dir);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_serves_every_backend),
        cmocka_unit_test_teardown(test_replace_under_load, teardown_load),
        cmocka_unit_test(test_refusal_in_health),
        cmocka_unit_test(test_watch),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    if (rc_failures())
        fprintf(stderr, "%u response check(s) failed\n", rc_failures());
    return rc || rc_failures() ? 1 : 0;
}
