/* Process-wide Prometheus metrics (see metrics.h). */
#include "metrics.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inferlab/generate.h"

#define MAX_BUCKETS 20

typedef struct histogram {
    const char *name;
    const char *help;
    double le[MAX_BUCKETS]; /* upper bounds, ascending; +Inf is implicit */
    int n_le;
    uint64_t count[MAX_BUCKETS + 1]; /* per bucket, not cumulative */
    double sum;
    uint64_t total;
} histogram;

/* Buckets follow vLLM's, with finer low ends: small models answer in
 * milliseconds. */
static histogram ttft_h = {
    "inferlab:time_to_first_token_seconds", "Time from submit to the first token.",
    {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0},
    16, {0}, 0, 0};
static histogram itl_h = {
    "inferlab:inter_token_latency_seconds", "Time between consecutive tokens of a request.",
    {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5},
    17, {0}, 0, 0};
static histogram e2e_h = {
    "inferlab:e2e_request_latency_seconds", "Time from submit to the end of a request.",
    {0.01, 0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0},
    18, {0}, 0, 0};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t prompt_tokens, generation_tokens;
static uint64_t finished[5];
static uint64_t preemptions, prefix_queries, prefix_hits;
static int64_t running, waiting, kv_positions, kv_capacity;

static void observe(histogram *h, double v)
{
    pthread_mutex_lock(&lock);
    int b = 0;
    while (b < h->n_le && v > h->le[b])
        b++;
    h->count[b]++;
    h->sum += v;
    h->total++;
    pthread_mutex_unlock(&lock);
}

void ilab_metrics_observe_ttft(double s) { observe(&ttft_h, s); }
void ilab_metrics_observe_itl(double s) { observe(&itl_h, s); }
void ilab_metrics_observe_e2e(double s) { observe(&e2e_h, s); }

#define ADD(var, delta)              \
    do {                             \
        pthread_mutex_lock(&lock);   \
        var += (delta);              \
        pthread_mutex_unlock(&lock); \
    } while (0)

void ilab_metrics_add_prompt_tokens(uint64_t n) { ADD(prompt_tokens, n); }
void ilab_metrics_add_generation_tokens(uint64_t n) { ADD(generation_tokens, n); }
void ilab_metrics_move_request(int64_t running_delta, int64_t waiting_delta)
{
    pthread_mutex_lock(&lock);
    running += running_delta;
    waiting += waiting_delta;
    pthread_mutex_unlock(&lock);
}
void ilab_metrics_add_kv_positions(int64_t d) { ADD(kv_positions, d); }
void ilab_metrics_add_kv_capacity(int64_t d) { ADD(kv_capacity, d); }
void ilab_metrics_add_preemptions(uint64_t n) { ADD(preemptions, n); }

void ilab_metrics_add_prefix_cache(uint64_t queried, uint64_t hit)
{
    pthread_mutex_lock(&lock);
    prefix_queries += queried;
    prefix_hits += hit;
    pthread_mutex_unlock(&lock);
}

void ilab_metrics_end_request(int reason, int64_t running_delta, int64_t waiting_delta)
{
    pthread_mutex_lock(&lock);
    if (reason >= 1 && reason <= 4)
        finished[reason]++;
    running += running_delta;
    waiting += waiting_delta;
    pthread_mutex_unlock(&lock);
}

typedef struct text_buf {
    char *s;
    size_t len, cap;
    int oom;
} text_buf;

static void put(text_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text_buf *b, const char *fmt, ...)
{
    if (b->oom)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = 1;
            return;
        }
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap * 2 + (size_t)n + 1;
        char *p = realloc(b->s, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->s = p;
        b->cap = cap;
    }
}

static void render_histogram(text_buf *b, const histogram *h)
{
    put(b, "# HELP %s %s\n# TYPE %s histogram\n", h->name, h->help, h->name);
    uint64_t cum = 0;
    for (int i = 0; i < h->n_le; i++) {
        cum += h->count[i];
        put(b, "%s_bucket{le=\"%g\"} %llu\n", h->name, h->le[i], (unsigned long long)cum);
    }
    cum += h->count[h->n_le];
    put(b, "%s_bucket{le=\"+Inf\"} %llu\n", h->name, (unsigned long long)cum);
    put(b, "%s_sum %.9g\n%s_count %llu\n", h->name, h->sum, h->name,
        (unsigned long long)h->total);
}

char *ilab_metrics_render(void)
{
    text_buf b = {malloc(4096), 0, 4096, 0};
    if (!b.s)
        return NULL;
    b.s[0] = '\0';
    pthread_mutex_lock(&lock);
    put(&b, "# HELP inferlab:num_requests_running Requests in running batches.\n"
            "# TYPE inferlab:num_requests_running gauge\n"
            "inferlab:num_requests_running %lld\n", (long long)running);
    put(&b, "# HELP inferlab:num_requests_waiting Requests queued, not yet running.\n"
            "# TYPE inferlab:num_requests_waiting gauge\n"
            "inferlab:num_requests_waiting %lld\n", (long long)waiting);
    double usage = kv_capacity > 0 ? (double)kv_positions / (double)kv_capacity : 0.0;
    put(&b, "# HELP inferlab:kv_cache_usage_ratio KV-cache positions in use / capacity: the "
            "backend's figures where it declares cache.stats, else the host estimate (positions "
            "held / (max_running * max_context)).\n"
            "# TYPE inferlab:kv_cache_usage_ratio gauge\n"
            "inferlab:kv_cache_usage_ratio %.6g\n", usage);
    put(&b, "# HELP inferlab:num_preemptions_total Running requests preempted for KV-cache "
            "room (recomputed later).\n"
            "# TYPE inferlab:num_preemptions_total counter\n"
            "inferlab:num_preemptions_total %llu\n", (unsigned long long)preemptions);
    put(&b, "# HELP inferlab:prefix_cache_queries_total Tokens looked up in the prefix cache.\n"
            "# TYPE inferlab:prefix_cache_queries_total counter\n"
            "inferlab:prefix_cache_queries_total %llu\n", (unsigned long long)prefix_queries);
    put(&b, "# HELP inferlab:prefix_cache_hits_total Tokens found in the prefix cache (prefill "
            "tokens saved).\n"
            "# TYPE inferlab:prefix_cache_hits_total counter\n"
            "inferlab:prefix_cache_hits_total %llu\n", (unsigned long long)prefix_hits);
    put(&b, "# HELP inferlab:prompt_tokens_total Prompt tokens processed.\n"
            "# TYPE inferlab:prompt_tokens_total counter\n"
            "inferlab:prompt_tokens_total %llu\n", (unsigned long long)prompt_tokens);
    put(&b, "# HELP inferlab:generation_tokens_total Tokens generated.\n"
            "# TYPE inferlab:generation_tokens_total counter\n"
            "inferlab:generation_tokens_total %llu\n", (unsigned long long)generation_tokens);
    put(&b, "# HELP inferlab:request_success_total Requests finished, by reason.\n"
            "# TYPE inferlab:request_success_total counter\n");
    for (int r = 1; r <= 4; r++)
        put(&b, "inferlab:request_success_total{finished_reason=\"%s\"} %llu\n",
            ilab_finish_reason_name(r), (unsigned long long)finished[r]);
    render_histogram(&b, &ttft_h);
    render_histogram(&b, &itl_h);
    render_histogram(&b, &e2e_h);
    pthread_mutex_unlock(&lock);
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    return b.s;
}

static void reset_histogram(histogram *h)
{
    memset(h->count, 0, sizeof h->count);
    h->sum = 0;
    h->total = 0;
}

void ilab_metrics_reset(void)
{
    pthread_mutex_lock(&lock);
    reset_histogram(&ttft_h);
    reset_histogram(&itl_h);
    reset_histogram(&e2e_h);
    prompt_tokens = generation_tokens = 0;
    memset(finished, 0, sizeof finished);
    preemptions = prefix_queries = prefix_hits = 0;
    running = waiting = kv_positions = kv_capacity = 0;
    pthread_mutex_unlock(&lock);
}
