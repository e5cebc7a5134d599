/* serve_load — a bounded load generator for `inferlab serve`.
 *
 * For each concurrency level C (default 1, 4, 8, 16) it keeps C streaming
 * /v1/completions requests in flight (libcurl multi) until `--requests`
 * requests per level have finished, then prints aggregate completion
 * tokens/s (from each stream's usage chunk), time-to-first-token p50/p99
 * (arrival of the first SSE chunk, which carries the first token), and
 * the error count (non-200, transport errors, or a stream without [DONE]).
 *
 *   serve_load --url http://127.0.0.1:8080 [--levels 1,4,8,16] [--requests N]
 *              [--max-tokens N] [--prompt TEXT] [--idle N]
 *
 * With --idle N the levels run twice: alone, then again while N idle
 * connections (each has sent one byte of a request head, from 127.0.0.2,
 * .3, ... at most 200 per address) are held open, so the two tables show
 * what idle clients cost the others.
 *
 *   serve_load --shared-prefix --url ON --url-off OFF [--levels 1,4]
 *              [--requests N] [--max-tokens N]
 *
 * The shared-prefix scenario (chat traffic): every request is the same
 * ~200-token system prompt plus a short user turn of its own, sent to two
 * servers of the same backend, one with the prefix cache on (--url) and one
 * started with scheduler.prefix_cache_positions=0 (--url-off), in
 * alternating rounds so that machine noise falls on both alike. It prints
 * TTFT p50/p99 for each and the ratio, and each server's prefix-cache hit
 * tokens from /metrics (the "off" one must show none).
 *
 * Exit status: 0 when every request succeeded, 1 otherwise. */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve_load.h"

typedef struct stream {
    CURL *easy;
    double t_start, t_first; /* t_first < 0 until the first chunk arrives */
    char *body;              /* the whole SSE body, scanned when it ends */
    size_t len;
} stream;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* On /v1/completions the first SSE chunk already carries the first token's
 * text (there is no role chunk), so its arrival is the time to first token. */
static size_t on_data(char *data, size_t size, size_t nmemb, void *user)
{
    stream *s = user;
    size_t n = size * nmemb;
    char *grown = realloc(s->body, s->len + n + 1);
    if (!grown)
        return 0;
    s->body = grown;
    memcpy(s->body + s->len, data, n);
    s->len += n;
    s->body[s->len] = '\0';
    if (s->t_first < 0)
        s->t_first = now_s();
    return n;
}

/* A count from the usage chunk (stream_options.include_usage): `field` is
 * "completion_tokens" or "prompt_tokens"; 0 without the chunk. */
static long usage_count(const char *body, const char *field)
{
    char key[64];
    snprintf(key, sizeof key, "\"%s\":", field);
    const char *p = strstr(body, key);
    return p ? strtol(p + strlen(key), NULL, 10) : 0;
}

int serve_stream_body(char *out, size_t cap, const char *prompt, int max_tokens)
{
    return snprintf(out, cap,
                    "{\"prompt\": \"%s\", \"max_tokens\": %d, \"ignore_eos\": true, "
                    "\"stream\": true, \"stream_options\": {\"include_usage\": true}}",
                    prompt, max_tokens);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double serve_percentile(double *v, size_t n, double p)
{
    if (n == 0)
        return 0;
    qsort(v, n, sizeof *v, cmp_double);
    size_t i = (size_t)(p * (double)(n - 1) + 0.5);
    return v[i < n ? i : n - 1];
}

static CURL *start(CURLM *m, stream *s, const char *url, const char *body,
                   struct curl_slist *hdrs)
{
    memset(s, 0, sizeof *s);
    s->t_first = -1;
    s->t_start = now_s();
    s->easy = curl_easy_init();
    curl_easy_setopt(s->easy, CURLOPT_URL, url);
    curl_easy_setopt(s->easy, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(s->easy, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(s->easy, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(s->easy, CURLOPT_WRITEDATA, s);
    curl_easy_setopt(s->easy, CURLOPT_PRIVATE, s);
    curl_easy_setopt(s->easy, CURLOPT_TIMEOUT, 120L);
    curl_multi_add_handle(m, s->easy);
    return s->easy;
}


static const char *same_body(void *ctx, int i)
{
    (void)i;
    return ctx;
}


void serve_run_streams(const char *url, body_fn body, void *ctx, int concurrency, int requests,
                        level_result *out)
{
    CURLM *m = curl_multi_init();
    struct curl_slist *hdrs = curl_slist_append(NULL, "Content-Type: application/json");
    stream *slots = calloc((size_t)concurrency, sizeof *slots);
    double *ttft = calloc((size_t)requests, sizeof *ttft);
    size_t n_ttft = 0;
    long tokens = 0, prompt_tokens = 0, errors = 0;
    int started = 0, finished = 0;
    double t0 = now_s();
    for (; started < concurrency && started < requests; started++)
        start(m, &slots[started], url, body(ctx, started), hdrs);
    int running = 1;
    /* Bounded: every request has a 120 s curl timeout and there are
     * `requests` of them. */
    while (finished < requests) {
        curl_multi_perform(m, &running);
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(m, &left))) {
            if (msg->msg != CURLMSG_DONE)
                continue;
            stream *s = NULL;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&s);
            long status = 0;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &status);
            bool done = s->body && strstr(s->body, "data: [DONE]\n\n");
            if (msg->data.result != CURLE_OK || status != 200 || !done) {
                errors++;
                fprintf(stderr, "request failed: %s, HTTP %ld%s\n",
                        curl_easy_strerror(msg->data.result), status,
                        done ? "" : ", no [DONE]");
            } else if (s->t_first >= 0) {
                ttft[n_ttft++] = s->t_first - s->t_start;
            }
            tokens += s->body ? usage_count(s->body, "completion_tokens") : 0;
            prompt_tokens += s->body ? usage_count(s->body, "prompt_tokens") : 0;
            free(s->body);
            s->body = NULL;
            curl_multi_remove_handle(m, msg->easy_handle);
            curl_easy_cleanup(msg->easy_handle);
            finished++;
            if (started < requests) {
                start(m, s, url, body(ctx, started), hdrs);
                started++;
            }
        }
        if (finished < requests)
            curl_multi_poll(m, NULL, 0, 100, NULL);
    }
    out->elapsed = now_s() - t0;
    out->ttft = ttft;
    out->n_ttft = n_ttft;
    out->tokens = tokens;
    out->prompt_tokens = prompt_tokens;
    out->errors = errors;
    free(slots);
    curl_slist_free_all(hdrs);
    curl_multi_cleanup(m);
}

int serve_for_each_level(const char *levels, int requests, level_fn run, void *ctx)
{
    int rc = 0;
    char *list = strdup(levels);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        int c = atoi(tok);
        if (c < 1 || c > 1024) {
            fprintf(stderr, "serve_load: bad concurrency '%s'\n", tok);
            rc = 2;
            break;
        }
        rc |= run(ctx, c, requests < c ? c : requests);
    }
    free(list);
    return rc;
}

typedef struct one_body {
    const char *url, *body;
} one_body;

static int run_level(void *ctx, int concurrency, int requests)
{
    const one_body *ob = ctx;
    level_result r;
    serve_run_streams(ob->url, same_body, (void *)ob->body, concurrency, requests, &r);
    printf("%11d  %8d  %10.1f  %12.1f  %12.1f  %6ld\n", concurrency, requests,
           r.elapsed > 0 ? (double)r.tokens / r.elapsed : 0.0,
           serve_percentile(r.ttft, r.n_ttft, 0.5) * 1e3, serve_percentile(r.ttft, r.n_ttft, 0.99) * 1e3,
           r.errors);
    fflush(stdout);
    free(r.ttft);
    return r.errors ? 1 : 0;
}

static void usage(void)
{
    fprintf(stderr, "usage: serve_load --url http://127.0.0.1:8080 [--levels 1,4,8,16] "
                    "[--requests N] [--max-tokens N] [--prompt TEXT] [--idle N]\n"
                    "       serve_load --shared-prefix --url ON_URL --url-off OFF_URL "
                    "[--levels 1,4] [--requests N] [--max-tokens N]\n");
}

#define IDLE_PER_ADDRESS 200

/* Open `n` connections to 127.0.0.1:`port` that each send one byte of a
 * request head and then nothing. Returns how many are open. */
static int open_idle(int port, int n, int *fds)
{
    struct rlimit rl;
    if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < (rlim_t)n + 256) {
        rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= (rlim_t)n + 256
                          ? (rlim_t)n + 256 : rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    int opened = 0;
    for (; opened < n; opened++) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in src = {.sin_family = AF_INET};
        src.sin_addr.s_addr = htonl(0x7f000002u + (uint32_t)(opened / IDLE_PER_ADDRESS));
        struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (fd < 0 || bind(fd, (struct sockaddr *)&src, sizeof src) ||
            connect(fd, (struct sockaddr *)&dst, sizeof dst) ||
            send(fd, "G", 1, MSG_NOSIGNAL) != 1) {
            perror("serve_load: opening an idle connection");
            if (fd >= 0)
                close(fd);
            break;
        }
        fds[opened] = fd;
    }
    return opened;
}

static int run_levels(const char *url, const char *body, const char *levels, int requests)
{
    printf("concurrency  requests  tokens/s    TTFT p50 ms   TTFT p99 ms   errors\n");
    one_body ob = {url, body};
    return serve_for_each_level(levels, requests, run_level, &ob);
}

int main(int argc, char **argv)
{
    const char *base = NULL, *base_off = NULL, *levels = NULL,
               *prompt = "It is a truth universally";
    int requests = 32, max_tokens = -1, idle = 0;
    bool shared_prefix = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--shared-prefix")) {
            shared_prefix = true;
            continue;
        }
        if (i + 1 >= argc) {
            usage();
            return 2;
        }
        if (!strcmp(argv[i], "--url"))
            base = argv[++i];
        else if (!strcmp(argv[i], "--url-off"))
            base_off = argv[++i];
        else if (!strcmp(argv[i], "--levels"))
            levels = argv[++i];
        else if (!strcmp(argv[i], "--requests"))
            requests = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--max-tokens"))
            max_tokens = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--prompt"))
            prompt = argv[++i];
        else if (!strcmp(argv[i], "--idle"))
            idle = atoi(argv[++i]);
        else {
            usage();
            return 2;
        }
    }
    if (max_tokens < 0)
        max_tokens = shared_prefix ? 16 : 64;
    if (!levels)
        levels = shared_prefix ? "1,4" : "1,4,8,16";
    if (shared_prefix) {
        if (!base || !base_off || requests < 1 || requests > 100000 || max_tokens < 1 || idle) {
            usage();
            return 2;
        }
        curl_global_init(CURL_GLOBAL_DEFAULT);
        int rc = serve_shared_prefix(base, base_off, levels, requests, max_tokens);
        curl_global_cleanup();
        return rc;
    }
    int port = 0;
    if (base)
        sscanf(base, "http://127.0.0.1:%d", &port);
    if (!base || requests < 1 || requests > 100000 || max_tokens < 1 || strchr(prompt, '"') ||
        strchr(prompt, '\\') || idle < 0 || idle > 100000 || (idle && !port)) {
        usage();
        return 2;
    }
    char url[512], body[1024];
    snprintf(url, sizeof url, "%s/v1/completions", base);
    serve_stream_body(body, sizeof body, prompt, max_tokens);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    if (idle)
        printf("# no idle connections\n");
    int rc = run_levels(url, body, levels, requests);
    if (idle) {
        int *fds = calloc((size_t)idle, sizeof *fds);
        int open = fds ? open_idle(port, idle, fds) : 0;
        printf("# with %d idle connections held open\n", open);
        sleep(1); /* let the server accept them */
        rc |= run_levels(url, body, levels, requests);
        for (int i = 0; i < open; i++)
            close(fds[i]);
        free(fds);
        if (open < idle)
            rc |= 1;
    }
    curl_global_cleanup();
    return rc;
}
