/* bench_decode: torchlike's single-stream decode speed against the read
 * bandwidth of this machine, and aggregate speed with concurrent sequences.
 *
 *   bench_decode [--steps N] [--keep DIR] [--only 110M|15M|batch]
 *
 * Generates the 110M and 15M llama2.c shapes (fp32 random weights) into a
 * temporary directory, then reports for each: the median decode tokens/s
 * over N steps (default 256) at 1 and 2 threads, the read bandwidth measured
 * in the same run (a plain read of the same weights after every step), the
 * ratio to the bandwidth limit (weight bytes read per token), both single-token kernels (own vectorised loop vs cblas_sgemv),
 * aggregate tokens/s with 1, 4, 8 and 16 sequences decoding together, and
 * the OpenBLAS core in use. A benchmark, not a test: numbers depend on the
 * machine and on what else runs on it. */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint.h"
#include "kv_cache.h"
#include "model.h"
#include "ops.h"
#include "random_model.h"
#include "thread_pool.h"

char *openblas_get_corename(void);

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ---- read bandwidth: sum a buffer larger than any cache ------------------ */

typedef float v8f __attribute__((vector_size(32), aligned(4)));

typedef struct sum_job {
    const float *data;
    double partial[64];
} sum_job;

static void sum_task(void *ctxp, int begin, int end, int thread)
{
    sum_job *job = ctxp;
    v8f a = {0}, b = {0}, c = {0}, d = {0};
    /* units of 32 floats */
    for (int u = begin; u < end; u++) {
        const float *p = job->data + (size_t)u * 32;
        a += *(const v8f *)p;
        b += *(const v8f *)(p + 8);
        c += *(const v8f *)(p + 16);
        d += *(const v8f *)(p + 24);
    }
    v8f s = a + b + c + d;
    job->partial[thread] += s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
}

/* Seconds to read `bytes` at `data` once with the pool's threads. */
static double read_pass(const void *data, size_t bytes, tl_thread_pool *pool)
{
    sum_job job = {data, {0}};
    double t0 = now_s();
    tl_parallel_for(pool, (int)(bytes / sizeof(float) / 32), 1024, sum_task, &job);
    double dt = now_s() - t0;
    if (job.partial[0] == 12345.678)
        printf("(unlikely)\n"); /* keeps the sums observable */
    return dt;
}

/* ---- decoding -------------------------------------------------------------- */

typedef struct engine {
    tl_model model;
    tl_kv_cache kv;
    tl_thread_pool *pool;
    float *logits;
} engine;

static int engine_open(engine *e, const char *path, int threads, int max_seqs)
{
    char err[512];
    tl_checkpoint ck;
    memset(e, 0, sizeof *e);
    if (tl_checkpoint_open(path, &ck, err, sizeof err) != ILAB_OK) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    if (tl_model_init(&e->model, &ck) != ILAB_OK)
        return -1;
    int per_seq = (ck.cfg.seq_len + TL_KV_BLOCK - 1) / TL_KV_BLOCK;
    if (tl_kv_init(&e->kv, ck.cfg.n_layers, e->model.kv_dim, ck.cfg.seq_len, per_seq * max_seqs,
                   max_seqs) != ILAB_OK ||
        tl_thread_pool_create(threads, &e->pool) != ILAB_OK)
        return -1;
    openblas_set_num_threads(threads);
    e->logits = malloc((size_t)max_seqs * (size_t)ck.cfg.vocab_size * sizeof(float));
    return e->logits ? 0 : -1;
}

static void engine_close(engine *e)
{
    free(e->logits);
    tl_thread_pool_destroy(e->pool);
    tl_kv_destroy(&e->kv);
    tl_model_close(&e->model);
}

/* One decode step: token[i] appended to seqs[i], logits of each written. */
static void step(engine *e, tl_kv_sequence **seqs, const int32_t *tokens, int n)
{
    tl_forward_item items[64];
    int V = e->model.cfg.vocab_size;
    for (int i = 0; i < n; i++) {
        tl_kv_prepare_append(&e->kv, seqs[i], 1);
        items[i] = (tl_forward_item){&tokens[i], 1, seqs[i]->length, seqs[i]->blocks, 0,
                                     e->logits + (size_t)i * V};
    }
    tl_workspace ws;
    if (tl_workspace_alloc(&ws, &e->model, items, n, tl_thread_pool_size(e->pool)) != ILAB_OK) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    tl_model_forward(&e->model, &e->kv, items, n, &ws, e->pool);
    tl_workspace_free(&ws);
    for (int i = 0; i < n; i++)
        seqs[i]->length++;
}

static int32_t argmax(const float *v, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[best])
            best = i;
    return best;
}

/* Median single-stream tokens/s over `steps` greedy decode steps. Each step
 * is followed by one plain read of the same weight bytes with the same
 * threads, so the bandwidth (`*gbs`, median) is measured under the same
 * conditions as the decode it is compared with. */
static double decode_speed(const char *path, int threads, int steps, double *gbs)
{
    engine e;
    if (engine_open(&e, path, threads, 1) != 0)
        exit(1);
    uint64_t h;
    tl_kv_seq_create(&e.kv, &h);
    tl_kv_sequence *s = tl_kv_seq_get(&e.kv, h);
    int32_t token = 1;
    double *dt = malloc((size_t)steps * sizeof *dt), *rt = malloc((size_t)steps * sizeof *rt);
    /* The weights proper: after the 28-byte header, up to the classifier. */
    const unsigned char *weights = e.model.ck.bytes + 28;
    size_t bytes = tl_checkpoint_weight_bytes(&e.model.cfg) & ~(size_t)127;
    step(&e, &s, &token, 1); /* warm-up: page in the weights */
    for (int i = 0; i < steps; i++) {
        token = argmax(e.logits, e.model.cfg.vocab_size);
        double t0 = now_s();
        step(&e, &s, &token, 1);
        dt[i] = now_s() - t0;
        rt[i] = read_pass(weights, bytes, e.pool);
    }
    double tps = 1.0 / median(dt, steps);
    *gbs = (double)bytes / median(rt, steps) / 1e9;
    free(dt);
    free(rt);
    engine_close(&e);
    return tps;
}

/* Aggregate tokens/s with n sequences decoding in one batch per step. */
static double aggregate_speed(const char *path, int threads, int n, int steps)
{
    engine e;
    if (engine_open(&e, path, threads, n) != 0)
        exit(1);
    tl_kv_sequence *seqs[64];
    int32_t tokens[64];
    for (int i = 0; i < n; i++) {
        uint64_t h;
        tl_kv_seq_create(&e.kv, &h);
        seqs[i] = tl_kv_seq_get(&e.kv, h);
        tokens[i] = 1 + i;
    }
    step(&e, seqs, tokens, n);
    double *dt = malloc((size_t)steps * sizeof *dt);
    for (int s = 0; s < steps; s++) {
        for (int i = 0; i < n; i++)
            tokens[i] = argmax(e.logits + (size_t)i * e.model.cfg.vocab_size, e.model.cfg.vocab_size);
        double t0 = now_s();
        step(&e, seqs, tokens, n);
        dt[s] = now_s() - t0;
    }
    double tps = n / median(dt, steps);
    free(dt);
    engine_close(&e);
    return tps;
}

int main(int argc, char **argv)
{
    int steps = 256;
    const char *keep = NULL, *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc)
            steps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc)
            only = argv[++i];
        else if (strcmp(argv[i], "--keep") == 0 && i + 1 < argc)
            keep = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--steps N] [--keep DIR] [--only 110M|15M|batch]\n", argv[0]);
            return 2;
        }
    }
    if (steps < 8)
        steps = 8;
    char dir[256];
    if (keep) {
        snprintf(dir, sizeof dir, "%s", keep);
    } else {
        const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
        snprintf(dir, sizeof dir, "%s/bench_decode.XXXXXX", tmp);
        if (!mkdtemp(dir)) {
            perror("mkdtemp");
            return 1;
        }
    }
    struct { const char *name; tl_random_shape shape; } models[2] = {
        {"110M", {768, 2048, 12, 12, 12, 32000, 1024, 0}},
        {"15M", {288, 768, 6, 6, 6, 32000, 256, 0}},
    };
    char paths[2][512];
    for (int m = 0; m < 2; m++) {
        snprintf(paths[m], sizeof paths[m], "%s/%s.bin", dir, models[m].name);
        char err[256];
        if (access(paths[m], R_OK) != 0 &&
            tl_write_random_model(paths[m], &models[m].shape, 42, err, sizeof err) != 0) {
            fprintf(stderr, "bench_decode: %s\n", err);
            return 1;
        }
    }

    double load[3] = {0, 0, 0};
    getloadavg(load, 3);
    printf("OpenBLAS core: %s; online CPUs: %ld; load average %.1f (other work skews the "
           "numbers); decode steps: %d\n", openblas_get_corename(), sysconf(_SC_NPROCESSORS_ONLN),
           load[0], steps);
    for (int m = 0; m < 2; m++) {
        if (only && strcmp(only, models[m].name) != 0)
            continue;
        tl_config cfg = {models[m].shape.dim, models[m].shape.hidden_dim, models[m].shape.n_layers,
                         models[m].shape.n_heads, models[m].shape.n_kv_heads,
                         models[m].shape.vocab_size, models[m].shape.seq_len, 1};
        double bytes = (double)tl_checkpoint_weight_bytes(&cfg);
        printf("\n%s shape: %.1f MB of weights read per token\n", models[m].name, bytes / 1e6);
        for (int threads = 1; threads <= 2; threads++) {
            for (int kind = 0; kind < 2; kind++) {
                tl_ops_set_matvec((tl_matvec_kind)kind);
                double bw;
                double tps = decode_speed(paths[m], threads, steps, &bw);
                double limit = bw * 1e9 / bytes;
                printf("  decode %d thread%s, %-11s: %7.1f tok/s; read bandwidth %5.1f GB/s -> "
                       "limit %6.1f tok/s; ratio %.2f\n", threads, threads > 1 ? "s" : " ",
                       kind == TL_MATVEC_OWN ? "own kernel" : "cblas_sgemv", tps, bw, limit,
                       tps / limit);
            }
        }
        tl_ops_set_matvec(TL_MATVEC_OWN);
    }

    if (only && strcmp(only, "batch") != 0)
        goto done;
    printf("\n110M shape, 2 threads, aggregate over concurrent sequences (one batched step each):\n");
    for (int kernel = 0; kernel < 2; kernel++) {
        /* skinny kernel up to 16 tokens (the default), or cblas_sgemm for any batch */
        tl_ops_set_skinny_limit(kernel == 0 ? TL_SKINNY_BATCH_DEFAULT : 1);
        double single = 0;
        int counts[4] = {1, 4, 8, 16};
        for (int c = 0; c < 4; c++) {
            int agg_steps = steps / 8 < 16 ? 16 : steps / 8;
            double tps = aggregate_speed(paths[0], 2, counts[c], agg_steps);
            if (c == 0)
                single = tps;
            printf("  %-13s %2d sequences: %7.1f tok/s aggregate (%.2fx single)\n",
                   kernel == 0 ? "skinny kernel" : "cblas_sgemm", counts[c], tps, tps / single);
        }
    }
    tl_ops_set_skinny_limit(TL_SKINNY_BATCH_DEFAULT);
done:
    if (!keep) {
        unlink(paths[0]);
        unlink(paths[1]);
        rmdir(dir);
    }
    return 0;
}
