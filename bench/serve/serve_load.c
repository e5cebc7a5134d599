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
 *              [--max-tokens N] [--prompt TEXT]
 *
 * Exit status: 0 when every request succeeded, 1 otherwise. */
#include <curl/curl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

/* Completion tokens, from the usage chunk (stream_options.include_usage). */
static long count_tokens(const char *body)
{
    const char *p = strstr(body, "\"completion_tokens\":");
    return p ? strtol(p + strlen("\"completion_tokens\":"), NULL, 10) : 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double percentile(double *v, size_t n, double p)
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

static int run_level(const char *url, const char *body, int concurrency, int requests)
{
    CURLM *m = curl_multi_init();
    struct curl_slist *hdrs = curl_slist_append(NULL, "Content-Type: application/json");
    stream *slots = calloc((size_t)concurrency, sizeof *slots);
    double *ttft = calloc((size_t)requests, sizeof *ttft);
    size_t n_ttft = 0;
    long tokens = 0, errors = 0;
    int started = 0, finished = 0;
    double t0 = now_s();
    for (; started < concurrency && started < requests; started++)
        start(m, &slots[started], url, body, hdrs);
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
            tokens += s->body ? count_tokens(s->body) : 0;
            free(s->body);
            s->body = NULL;
            curl_multi_remove_handle(m, msg->easy_handle);
            curl_easy_cleanup(msg->easy_handle);
            finished++;
            if (started < requests) {
                start(m, s, url, body, hdrs);
                started++;
            }
        }
        if (finished < requests)
            curl_multi_poll(m, NULL, 0, 100, NULL);
    }
    double elapsed = now_s() - t0;
    printf("%11d  %8d  %10.1f  %12.1f  %12.1f  %6ld\n", concurrency, requests,
           elapsed > 0 ? (double)tokens / elapsed : 0.0, percentile(ttft, n_ttft, 0.5) * 1e3,
           percentile(ttft, n_ttft, 0.99) * 1e3, errors);
    fflush(stdout);
    free(ttft);
    free(slots);
    curl_slist_free_all(hdrs);
    curl_multi_cleanup(m);
    return errors ? 1 : 0;
}

static void usage(void)
{
    fprintf(stderr, "usage: serve_load --url http://127.0.0.1:8080 [--levels 1,4,8,16] "
                    "[--requests N] [--max-tokens N] [--prompt TEXT]\n");
}

int main(int argc, char **argv)
{
    const char *base = NULL, *levels = "1,4,8,16", *prompt = "It is a truth universally";
    int requests = 32, max_tokens = 64;
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc) {
            usage();
            return 2;
        }
        if (!strcmp(argv[i], "--url"))
            base = argv[++i];
        else if (!strcmp(argv[i], "--levels"))
            levels = argv[++i];
        else if (!strcmp(argv[i], "--requests"))
            requests = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--max-tokens"))
            max_tokens = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--prompt"))
            prompt = argv[++i];
        else {
            usage();
            return 2;
        }
    }
    if (!base || requests < 1 || requests > 100000 || max_tokens < 1 || strchr(prompt, '"') ||
        strchr(prompt, '\\')) {
        usage();
        return 2;
    }
    char url[512], body[1024];
    snprintf(url, sizeof url, "%s/v1/completions", base);
    snprintf(body, sizeof body,
             "{\"prompt\": \"%s\", \"max_tokens\": %d, \"ignore_eos\": true, \"stream\": true, "
             "\"stream_options\": {\"include_usage\": true}}",
             prompt, max_tokens);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    printf("concurrency  requests  tokens/s    TTFT p50 ms   TTFT p99 ms   errors\n");
    int rc = 0;
    char *list = strdup(levels);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        int c = atoi(tok);
        if (c < 1 || c > 1024) {
            fprintf(stderr, "serve_load: bad concurrency '%s'\n", tok);
            rc = 2;
            break;
        }
        rc |= run_level(url, body, c, requests < c ? c : requests);
    }
    free(list);
    curl_global_cleanup();
    return rc;
}
