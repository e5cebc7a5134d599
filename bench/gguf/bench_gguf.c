/* bench_gguf: torchlike on one GGUF file, timed the way llama-bench times
 * llama.cpp, so run.sh can pair the two on the same file.
 *
 *   bench_gguf FILE [--threads N] [--decode N] [--prefill N] [--reps R]
 *                   [--probe] [--tokens]
 *
 * decode: N single-token steps from an empty cache (llama-bench -n N),
 * tokens/s; prefill: one forward pass over N prompt tokens (llama-bench
 * -p N), tokens/s. Each repeated R times; prints the median as
 * "decode_tps X" / "prefill_tps X". --probe also reads the file's matrix
 * bytes with bench/decode's read probe and prints "weight_bytes" (what one
 * decode step must read: every matrix but the embedding table, of which it
 * reads a row) and "read_gbs" (the faster probe's bandwidth): their ratio is
 * the bytes-read limit on decode tokens/s. --tokens prints the greedy
 * tokens of the decode run (a check that every type runs). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cblas.h>

#include "checkpoint.h"
#include "kv_cache.h"
#include "model.h"
#include "read_probe.h"
#include "thread_pool.h"

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

/* Forward n tokens of one sequence; logits of the last into `logits`. */
static void forward(tl_model *m, tl_kv_cache *kv, tl_kv_sequence *s, const int32_t *tokens, int n,
                    float *logits, tl_thread_pool *pool)
{
    tl_kv_prepare_append(kv, s, n);
    tl_forward_item it = {tokens, n, s->length, s->blocks, 0, logits};
    tl_workspace ws;
    if (tl_workspace_alloc(&ws, m, &it, 1, tl_thread_pool_size(pool)) != ILAB_OK) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    tl_model_forward(m, kv, &it, 1, &ws, pool);
    tl_workspace_free(&ws);
    s->length += n;
}

static int32_t argmax(const float *v, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[best])
            best = i;
    return best;
}

static size_t matrix_bytes(const tl_matrix *w)
{
    return tl_dtype_row_bytes(w->type == TL_DTYPE_Q8_0_R16 ? TL_DTYPE_Q8_0 : w->type, w->cols) *
           (size_t)w->rows;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE [--threads N] [--decode N] [--prefill N] [--reps R] "
                "[--probe] [--tokens]\n", argv[0]);
        return 2;
    }
    int threads = 1, n_decode = 128, n_prefill = 0, reps = 3, probe = 0, show = 0;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--decode") == 0 && i + 1 < argc) n_decode = atoi(argv[++i]);
        else if (strcmp(argv[i], "--prefill") == 0 && i + 1 < argc) n_prefill = atoi(argv[++i]);
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--probe") == 0) probe = 1;
        else if (strcmp(argv[i], "--tokens") == 0) show = 1;
        else {
            fprintf(stderr, "bench_gguf: unknown argument %s\n", argv[i]);
            return 2;
        }
    }
    char err[1024];
    tl_checkpoint ck;
    tl_model m;
    if (tl_checkpoint_open(argv[1], &ck, err, sizeof err) != ILAB_OK ||
        tl_model_init(&m, &ck, TL_DTYPE_F32, err, sizeof err) != ILAB_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    int seq = n_decode > n_prefill ? n_decode : n_prefill;
    if (seq < 1)
        seq = 1; /* a probe-only run still sets up a cache */
    if (seq > m.cfg.seq_len) {
        fprintf(stderr, "bench_gguf: %d tokens exceed the context of %d\n", seq, m.cfg.seq_len);
        return 1;
    }
    tl_kv_cache kv;
    tl_thread_pool *pool;
    int blocks = (seq + TL_KV_BLOCK - 1) / TL_KV_BLOCK;
    if (tl_kv_init(&kv, m.cfg.n_layers, m.kv_dim, m.cfg.seq_len, blocks, 1) != ILAB_OK ||
        tl_thread_pool_create(threads, &pool) != ILAB_OK)
        return 1;
    openblas_set_num_threads(threads);
    uint64_t h;
    tl_kv_seq_create(&kv, &h);
    tl_kv_sequence *s = tl_kv_seq_get(&kv, h);
    int V = m.cfg.vocab_size;
    float *logits = malloc((size_t)V * sizeof *logits);
    int32_t *prompt = malloc((size_t)(seq + 1) * sizeof *prompt);
    double *t = malloc((size_t)(reps > 0 ? reps : 1) * sizeof *t);
    for (int i = 0; i < seq + 1; i++)
        prompt[i] = (int32_t)(3 + (i * 7919) % (V - 3));
    printf("file %s\nthreads %d\n", argv[1], threads);
    if (n_decode > 0) {
        for (int r = 0; r < reps; r++) {
            tl_kv_seq_truncate(&kv, s, 0);
            int32_t tok = 1;
            double t0 = now_s();
            for (int i = 0; i < n_decode; i++) {
                forward(&m, &kv, s, &tok, 1, logits, pool);
                tok = argmax(logits, V);
                if (show && r == 0)
                    printf("%d ", tok);
            }
            t[r] = (double)n_decode / (now_s() - t0);
            if (show && r == 0)
                printf("\n");
        }
        printf("decode_tps %.3f\n", median(t, reps));
    }
    if (n_prefill > 0) {
        for (int r = 0; r < reps; r++) {
            tl_kv_seq_truncate(&kv, s, 0);
            double t0 = now_s();
            forward(&m, &kv, s, prompt, n_prefill, logits, pool);
            t[r] = (double)n_prefill / (now_s() - t0);
        }
        printf("prefill_tps %.3f\n", median(t, reps));
    }
    if (probe) {
        size_t bytes = matrix_bytes(&m.w.wcls);
        for (int l = 0; l < m.cfg.n_layers; l++) {
            const tl_layer_weights *L = &m.w.layers[l];
            const tl_matrix *ms[7] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w1, &L->w2, &L->w3};
            for (int k = 0; k < 7; k++)
                bytes += matrix_bytes(ms[k]);
        }
        /* the probe reads this many bytes of the mapped file (a multiple of
         * 512); the file is larger than the matrices it holds */
        size_t n = bytes & ~(size_t)511;
        if (n > ck.size)
            n = ck.size & ~(size_t)511;
        double best = 1e30;
        for (int k = 0; k < PROBE_KERNELS; k++)
            for (int r = 0; r < 5; r++) {
                double sec = probe_read((probe_kernel)k, ck.bytes, n, pool);
                best = sec < best ? sec : best;
            }
        printf("weight_bytes %zu\nread_gbs %.3f\n", bytes, (double)n / best / 1e9);
    }
    free(t);
    free(prompt);
    free(logits);
    tl_thread_pool_destroy(pool);
    tl_kv_destroy(&kv);
    tl_model_close(&m);
    return 0;
}
