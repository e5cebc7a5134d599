/* serve_load's pieces shared by its scenarios (serve_load.c runs levels of
 * one request body; shared_prefix.c runs the shared-prefix scenario). */
#ifndef ILAB_BENCH_SERVE_LOAD_H
#define ILAB_BENCH_SERVE_LOAD_H

#include <stddef.h>

/* The body of request `i` of a run. */
typedef const char *(*body_fn)(void *ctx, int i);

typedef struct level_result {
    double *ttft; /* seconds, one per successful request (caller frees) */
    size_t n_ttft;
    long tokens, prompt_tokens, errors;
    double elapsed;
} level_result;

/* The body of a streaming /v1/completions request that serve_run_streams
 * measures: the usage chunk on (its token counts), EOS ignored (every
 * request generates max_tokens). `prompt` goes in as JSON string content,
 * so it holds no unescaped quote or backslash. Returns snprintf's count. */
int serve_stream_body(char *out, size_t cap, const char *prompt, int max_tokens);

/* `requests` streaming requests to `url`, `concurrency` in flight, request
 * i's body from `body(ctx, i)`; failures are counted (and printed to stderr). */
void serve_run_streams(const char *url, body_fn body, void *ctx, int concurrency, int requests,
                       level_result *out);

/* One concurrency level of a scenario: `requests` requests, `concurrency`
 * in flight. Returns 0 when every request succeeded. */
typedef int (*level_fn)(void *ctx, int concurrency, int requests);

/* `run(ctx, c, max(requests, c))` for each concurrency c of the
 * comma-separated `levels` (1..1024). Returns the results or'ed, 2 on a bad
 * level (and runs no more). */
int serve_for_each_level(const char *levels, int requests, level_fn run, void *ctx);

/* The p-quantile of v[0, n) (sorts v). */
double serve_percentile(double *v, size_t n, double p);

/* The shared-prefix scenario against two servers, prefix cache on and off.
 * Returns 0 when every request succeeded. */
int serve_shared_prefix(const char *base_on, const char *base_off, const char *levels,
                        int requests, int max_tokens);

#endif
