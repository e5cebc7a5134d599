/* bench_decode: torchlike's single-stream decode speed against the read
 * bandwidth of this machine, and aggregate speed with concurrent sequences.
 *
 *   bench_decode [--steps N] [--keep DIR] [--only 110M|15M|batch] [--blas-core NAME]
 *
 * Generates the 110M and 15M llama2.c shapes (fp32 random weights) into a
 * temporary directory. For each shape and 1 and 2 threads, every round runs
 * one decode step of each variant side by side (torchlike's own single-token
 * kernel, cblas_sgemv), then reads the same weight bytes with both probe
 * kernels (read_probe.h); it reports medians over the rounds, the honest
 * limit (the faster probe's bandwidth / weight bytes per token) and each
 * variant's ratio to it. A variant faster than the limit means the probe is
 * wrong and is reported as a PROBE FAULT, not as a ratio. Then aggregate
 * tokens/s with 1, 4, 8 and 16 sequences decoding together. A benchmark,
 * not a test: numbers depend on the machine and on what else runs on it. */
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
#include "cpu.h"
#include "ops.h"
#include "random_model.h"
#include "read_probe.h"
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

/* ---- decoding -------------------------------------------------------------- */

typedef struct engine {
    tl_model model;
    tl_kv_cache kv;
    tl_thread_pool *pool;
    float *logits;
} engine;

static int engine_open(engine *e, const char *path, int threads, int max_seqs, tl_dtype quantize)
{
    char err[512];
    tl_checkpoint ck;
    memset(e, 0, sizeof *e);
    if (tl_checkpoint_open(path, &ck, err, sizeof err) != ILAB_OK) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    if (tl_model_init(&e->model, &ck, quantize, err, sizeof err) != ILAB_OK) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
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

/* One single-stream variant: an engine and the kernel it decodes with. */
typedef struct variant {
    const char *name;
    engine *e;
    tl_matvec_kind kind;
    tl_isa isa; /* kernels capped at this level */
    int stream_256; /* tl_cpu_set_f32_stream_256's choice (-1: by CPU) */
    tl_kv_sequence *seq;
    int32_t token;
    double *dt;
} variant;

/* Paired rounds: per round one decode step of every variant (in a rotating
 * order, so none always runs first after the probe), then one read of the
 * weights with each probe kernel. Medians over the rounds are reported, so
 * every figure saw the same minutes of the machine. */
static void decode_compare(const char *path, int threads, int steps, double weight_bytes)
{
    engine f32, q8;
    if (engine_open(&f32, path, threads, 3, TL_DTYPE_F32) != 0 ||
        engine_open(&q8, path, threads, 1, TL_DTYPE_Q8_0) != 0)
        exit(1);
    /* One pool for both, as in one backend: a second pool's worker,
     * still spinning after its engine's step, holds the core the other
     * engine's worker needs (Q8_0 at 2 threads measured 1.0x its 1-thread
     * speed with two pools, 1.9x alone or with one) */
    tl_thread_pool_destroy(q8.pool);
    q8.pool = f32.pool;
    tl_isa top = tl_cpu_detected();
    int narrow = tl_cpu_f32_stream_256();
    variant vs[] = {
        {"f32 own kernel", &f32, TL_MATVEC_OWN, top, -1, NULL, 1, NULL},
        {"f32 cblas_sgemv", &f32, TL_MATVEC_BLAS, top, -1, NULL, 1, NULL},
        {"q8_0", &q8, TL_MATVEC_OWN, top, -1, NULL, 1, NULL},
        /* the fp32 copy the run-time choice did not take, to show what the
         * choice is worth: the next level down, or (where the AVX-512
         * level streams with 256-bit vectors, cpu.h) the 512-bit copy */
        {narrow ? "f32 own, 512-bit" : "f32 own, avx2", &f32, TL_MATVEC_OWN,
         narrow ? top : TL_ISA_AVX2, narrow ? 0 : -1, NULL, 1, NULL},
    };
    int nv = (int)(sizeof vs / sizeof *vs);
    if (top <= TL_ISA_AVX2)
        nv--;
    for (int v = 0; v < nv; v++) {
        uint64_t h;
        tl_kv_seq_create(&vs[v].e->kv, &h);
        vs[v].seq = tl_kv_seq_get(&vs[v].e->kv, h);
        vs[v].dt = malloc((size_t)steps * sizeof(double));
        tl_ops_set_matvec(vs[v].kind);
        step(vs[v].e, &vs[v].seq, &vs[v].token, 1); /* warm-up: page in the weights */
    }
    /* Each model's own weight bytes are read by the probes: Q8_0's 116 MB
     * (at 110M) can keep a part of itself in a large last-level cache from
     * one step to the next where f32's 438 MB cannot, so a limit for it
     * from a read of the f32 bytes would not bound it. */
    double *rt[PROBE_KERNELS], *rq[PROBE_KERNELS];
    for (int k = 0; k < PROBE_KERNELS; k++) {
        rt[k] = malloc((size_t)steps * sizeof(double));
        rq[k] = malloc((size_t)steps * sizeof(double));
    }
    /* The weights proper: after the 28-byte header, up to the classifier. */
    const unsigned char *weights = f32.model.ck.bytes + 28;
    size_t bytes = (size_t)weight_bytes & ~(size_t)511;
    double q8_weight_bytes = (double)q8.model.quantized_bytes +
                             (double)(q8.model.cfg.n_layers * 2 + 1) * q8.model.cfg.dim * 4.0;
    size_t q8_bytes = q8.model.quantized_bytes & ~(size_t)511;
    int seq_len = f32.model.cfg.seq_len;
    for (int i = 0; i < steps; i++) {
        for (int j = 0; j < nv; j++) {
            variant *v = &vs[(i + j) % nv];
            if (v->seq->length >= seq_len - 1)
                tl_kv_seq_truncate(&v->e->kv, v->seq, 0); /* all variants at once */
            v->token = argmax(v->e->logits, v->e->model.cfg.vocab_size);
            tl_ops_set_matvec(v->kind);
            tl_cpu_cap(v->isa);
            tl_cpu_set_f32_stream_256(v->stream_256);
            double t0 = now_s();
            step(v->e, &v->seq, &v->token, 1);
            v->dt[i] = now_s() - t0;
        }
        for (int k = 0; k < PROBE_KERNELS; k++) {
            probe_kernel pk = (probe_kernel)((i + k) % PROBE_KERNELS);
            rt[pk][i] = probe_read(pk, weights, bytes, f32.pool);
            rq[pk][i] = probe_read(pk, q8.model.quantized, q8_bytes, f32.pool);
        }
    }
    tl_ops_set_matvec(TL_MATVEC_OWN);
    tl_cpu_cap(top);
    tl_cpu_set_f32_stream_256(-1);
    double gbs[PROBE_KERNELS], qgbs[PROBE_KERNELS], best = 0, qbest = 0;
    for (int k = 0; k < PROBE_KERNELS; k++) {
        gbs[k] = (double)bytes / median(rt[k], steps) / 1e9;
        qgbs[k] = (double)q8_bytes / median(rq[k], steps) / 1e9;
        best = gbs[k] > best ? gbs[k] : best;
        qbest = qgbs[k] > qbest ? qgbs[k] : qbest;
        free(rt[k]);
        free(rq[k]);
    }
    double limit = best * 1e9 / weight_bytes;
    /* Q8_0 reads 34 bytes per 32 weights: its limit from the probes' read
     * of those bytes. */
    double q8_limit = qbest * 1e9 / q8_weight_bytes;
    printf("  %d thread%s: read probe %s %.1f GB/s, %s %.1f GB/s -> limit %.1f tok/s\n"
           "             read probe of the Q8_0 weights (%.1f MB) %.1f / %.1f GB/s -> Q8_0 limit %.1f tok/s\n",
           threads, threads > 1 ? "s" : "", probe_kernel_name(PROBE_SUM), gbs[PROBE_SUM],
           probe_kernel_name(PROBE_PREFETCH), gbs[PROBE_PREFETCH], limit, q8_weight_bytes / 1e6,
           qgbs[PROBE_SUM], qgbs[PROBE_PREFETCH], q8_limit);
    double base = 0;
    for (int v = 0; v < nv; v++) {
        double tps = 1.0 / median(vs[v].dt, steps);
        int quant = vs[v].e == &q8;
        double lim = quant ? q8_limit : limit;
        if (v == 0)
            base = tps;
        printf("    %-18s %7.1f tok/s  ", vs[v].name, tps);
        if (tps > lim)
            printf("PROBE FAULT: faster than the read limit (%.2fx); the probe is wrong", tps / lim);
        else
            printf("%.2f of the %slimit", tps / lim, quant ? "Q8_0 " : "");
        if (quant)
            printf("; %.2fx the f32 default (Q8_0 limit %.1f tok/s)", tps / base, lim);
        else if (v > 0)
            printf("; default / this = %.2f", base / tps);
        printf("\n");
        free(vs[v].dt);
    }
    q8.pool = NULL; /* f32's, closed with it */
    engine_close(&q8);
    engine_close(&f32);
}

/* Aggregate tokens/s with n sequences decoding in one batch per step. */
static double aggregate_speed(const char *path, int threads, int n, int steps)
{
    engine e;
    if (engine_open(&e, path, threads, n, TL_DTYPE_F32) != 0)
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
    const char *keep = NULL, *only = NULL, *blas_core = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc)
            steps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc)
            only = argv[++i];
        else if (strcmp(argv[i], "--keep") == 0 && i + 1 < argc)
            keep = argv[++i];
        else if (strcmp(argv[i], "--blas-core") == 0 && i + 1 < argc)
            blas_core = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--steps N] [--keep DIR] [--only 110M|15M|batch] "
                    "[--blas-core NAME]\n", argv[0]);
            return 2;
        }
    }
    /* OpenBLAS reads OPENBLAS_CORETYPE when it is loaded, before main: set
     * it and start again (0.3.21 does not know every CPU and falls back to
     * its SSE3 kernels, which would make cblas_sgemv a straw man). */
    if (blas_core && (!getenv("OPENBLAS_CORETYPE") || strcmp(getenv("OPENBLAS_CORETYPE"), blas_core))) {
        setenv("OPENBLAS_CORETYPE", blas_core, 1);
        execv("/proc/self/exe", argv);
        perror("bench_decode: re-exec with OPENBLAS_CORETYPE");
        return 1;
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
    printf("OpenBLAS core: %s%s; torchlike kernels: %s%s; read probe: %s; online CPUs: %ld\n"
           "load average %.2f %.2f %.2f (other work skews the numbers); rounds: %d\n",
           openblas_get_corename(), getenv("OPENBLAS_CORETYPE") ? " (OPENBLAS_CORETYPE)" : "",
           tl_isa_name(tl_cpu_isa()),
           tl_cpu_isa() >= TL_ISA_AVX512 && tl_cpu_f32_stream_256() ? " (fp32 stream 256-bit)" : "",
           probe_isa(), sysconf(_SC_NPROCESSORS_ONLN), load[0], load[1],
           load[2], steps);
    for (int m = 0; m < 2; m++) {
        if (only && strcmp(only, models[m].name) != 0)
            continue;
        tl_config cfg = {.dim = models[m].shape.dim, .hidden_dim = models[m].shape.hidden_dim,
                         .n_layers = models[m].shape.n_layers, .n_heads = models[m].shape.n_heads,
                         .n_kv_heads = models[m].shape.n_kv_heads,
                         .vocab_size = models[m].shape.vocab_size,
                         .seq_len = models[m].shape.seq_len, .shared_classifier = 1,
                         .head_size = models[m].shape.dim / models[m].shape.n_heads};
        double bytes = (double)tl_checkpoint_weight_bytes(&cfg);
        printf("\n%s shape: %.1f MB of weights read per token\n", models[m].name, bytes / 1e6);
        for (int threads = 1; threads <= 2; threads++)
            decode_compare(paths[m], threads, steps, bytes);
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
