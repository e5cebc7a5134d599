/* q8_variants MODEL.bin TOKENIZER.bin SPEC...
 *
 * Where Q8_0's greedy continuations part from fp32's: runs the 20 prompts of
 * test_quantized (64 greedy tokens each) with fp32 weights and with each
 * SPEC, three letters for the embedding, the classifier and the decoder
 * layers' matrices:
 *   f  fp32            h  F16
 *   q  Q8_0 (the product: activations quantised too, repacked kernels)
 *   w  Q8_0 weights multiplied with fp32 activations (dequantised copies)
 * and prints, per SPEC: continuations identical to fp32's, how often the
 * variant picks fp32's token along fp32's path, how far it moves the gap
 * between fp32's two best logits (median and 99th percentile), and the
 * log-probability error of fp32's tokens (max, mean). The figures of
 * plugins/torchlike/README.md ("Q8_0") come from it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "greedy_prompts.h"
#include "kv_cache.h"
#include "model.h"
#include "q8_0_r16.h"
#include "thread_pool.h"
#include "tokenizer.h"

#define MAX_OWNED (2 + 7 * 256)

typedef struct runner {
    tl_model model;
    tl_kv_cache kv;
    tl_thread_pool *pool;
    float *logits;
    void *owned[MAX_OWNED];
    int n_owned;
} runner;

/* Matrix m (any type) replaced by an owned copy of kind `how`. */
static int convert(runner *r, tl_matrix *m, char how)
{
    size_t n = (size_t)m->rows * (size_t)m->cols;
    float *row = malloc((size_t)m->cols * sizeof *row);
    tl_dtype to = how == 'h' ? TL_DTYPE_F16 : how == 'q' ? TL_DTYPE_Q8_0 : TL_DTYPE_F32;
    size_t rb = tl_dtype_row_bytes(how == 'w' ? TL_DTYPE_Q8_0 : to, m->cols);
    unsigned char *buf = aligned_alloc(64, (rb * (size_t)m->rows + 63) & ~(size_t)63);
    if (!row || !buf || rb == 0 || r->n_owned == MAX_OWNED) {
        free(row);
        free(buf);
        return -1;
    }
    tl_matrix out = {how == 'w' ? TL_DTYPE_Q8_0 : to, buf, m->rows, m->cols};
    for (int i = 0; i < m->rows; i++) {
        tl_matrix_row_f32(m, i, row);
        unsigned char *dst = buf + rb * (size_t)i;
        if (out.type == TL_DTYPE_F32) {
            memcpy(dst, row, rb);
        } else if (out.type == TL_DTYPE_F16) {
            for (int c = 0; c < m->cols; c++) {
                uint16_t h = tl_fp32_to_fp16(row[c]);
                memcpy(dst + 2 * (size_t)c, &h, 2);
            }
        } else {
            tl_quantize_row_q8_0(row, (tl_block_q8_0 *)(void *)dst, m->cols);
        }
    }
    free(row);
    if (how == 'w') { /* back to fp32, keeping the rounding */
        float *deq = aligned_alloc(64, (n * sizeof *deq + 63) & ~(size_t)63);
        if (!deq) {
            free(buf);
            return -1;
        }
        for (int i = 0; i < m->rows; i++)
            tl_matrix_row_f32(&out, i, deq + (size_t)i * (size_t)m->cols);
        free(buf);
        buf = (unsigned char *)deq;
        out = (tl_matrix){TL_DTYPE_F32, deq, m->rows, m->cols};
    } else if (how == 'q' && tl_r16_repack_inplace(&out) != 0) {
        free(buf);
        return -1;
    }
    r->owned[r->n_owned++] = buf;
    *m = out;
    return 0;
}

static int runner_open(runner *r, const char *path, const char *spec)
{
    char err[512];
    tl_checkpoint ck;
    memset(r, 0, sizeof *r);
    if (tl_checkpoint_open(path, &ck, err, sizeof err) != ILAB_OK ||
        tl_model_init(&r->model, &ck, TL_DTYPE_F32, err, sizeof err) != ILAB_OK) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    tl_weights *w = &r->model.w;
    int L = r->model.cfg.n_layers;
    /* a layer table of our own, as the model's may be the checkpoint's */
    tl_layer_weights *layers = malloc((size_t)L * sizeof *layers);
    if (!layers || L > 256)
        return -1;
    memcpy(layers, w->layers, (size_t)L * sizeof *layers);
    w->layers = layers;
    r->owned[r->n_owned++] = layers;
    int bad = convert(r, &w->token_embedding, spec[0]) | convert(r, &w->wcls, spec[1]);
    for (int l = 0; l < L && !bad; l++) {
        tl_matrix *ms[7] = {&layers[l].wq, &layers[l].wk, &layers[l].wv, &layers[l].wo,
                            &layers[l].w1, &layers[l].w2, &layers[l].w3};
        for (int i = 0; i < 7; i++)
            bad |= convert(r, ms[i], spec[2]);
    }
    int seq = r->model.cfg.seq_len, per = (seq + TL_KV_BLOCK - 1) / TL_KV_BLOCK;
    r->logits = malloc((size_t)seq * (size_t)r->model.cfg.vocab_size * sizeof(float));
    if (bad || !r->logits ||
        tl_kv_init(&r->kv, L, r->model.kv_dim, seq, per, 1) != ILAB_OK ||
        tl_thread_pool_create(1, &r->pool) != ILAB_OK) {
        fprintf(stderr, "%s: out of memory\n", spec);
        return -1;
    }
    return 0;
}

static void runner_close(runner *r)
{
    free(r->logits);
    tl_thread_pool_destroy(r->pool);
    tl_kv_destroy(&r->kv);
    tl_model_close(&r->model);
    for (int i = 0; i < r->n_owned; i++)
        free(r->owned[i]);
}

/* tokens[0..n) appended to sequence s; logits of each of them. */
static void append(runner *r, tl_kv_sequence *s, const int32_t *tokens, int n)
{
    tl_kv_prepare_append(&r->kv, s, n);
    tl_forward_item item = {tokens, n, s->length, s->blocks, 1, r->logits};
    tl_workspace ws;
    if (tl_workspace_alloc(&ws, &r->model, &item, 1, 1) != ILAB_OK) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    tl_model_forward(&r->model, &r->kv, &item, 1, &ws, r->pool);
    tl_workspace_free(&ws);
    s->length += n;
}

static tl_kv_sequence *new_seq(runner *r)
{
    uint64_t h;
    tl_kv_seq_create(&r->kv, &h);
    return tl_kv_seq_get(&r->kv, h);
}

/* A fresh sequence of tokens[0..n) in one pass: logits of every position. */
static void score(runner *r, const int32_t *tokens, int n)
{
    tl_kv_sequence *s = new_seq(r);
    append(r, s, tokens, n);
    tl_kv_seq_free(&r->kv, s);
}

static int argmax(const float *v, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[b])
            b = i;
    return b;
}

static int second_best(const float *v, int n, int best)
{
    int s = best == 0 ? 1 : 0;
    for (int i = 0; i < n; i++)
        if (i != best && v[i] > v[s])
            s = i;
    return s;
}

static double log_softmax_at(const float *v, int n, int k)
{
    double mx = v[argmax(v, n)], s = 0;
    for (int i = 0; i < n; i++)
        s += exp((double)v[i] - mx);
    return (double)v[k] - mx - log(s);
}

/* Greedy continuation of `ids` (n tokens) into gen: the prompt in one pass,
 * then one token at a time, as a decode runs (and as test_quantized does). */
static void greedy(runner *r, const int32_t *ids, int n, int32_t *gen)
{
    int V = r->model.cfg.vocab_size;
    tl_kv_sequence *s = new_seq(r);
    append(r, s, ids, n);
    const float *last = r->logits + (size_t)(n - 1) * (size_t)V;
    for (int g = 0; g < TL_GREEDY_TOKENS; g++) {
        gen[g] = argmax(last, V);
        append(r, s, &gen[g], 1);
        last = r->logits;
    }
    tl_kv_seq_free(&r->kv, s);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s MODEL.bin TOKENIZER.bin SPEC... (SPEC: embedding, classifier, "
                "layers as f|h|q|w)\n", argv[0]);
        return 2;
    }
    for (int a = 3; a < argc; a++)
        if (strlen(argv[a]) != 3 || strspn(argv[a], "fhqw") != 3) {
            fprintf(stderr, "%s: a SPEC is three of f, h, q, w (embedding, classifier, layers)\n",
                    argv[a]);
            return 2;
        }
    runner ref;
    if (runner_open(&ref, argv[1], "fff") != 0)
        return 1;
    tl_tokenizer tok;
    char err[512];
    int V = ref.model.cfg.vocab_size;
    if (tl_tokenizer_load_file(argv[2], V, argv[1], &tok, err, sizeof err) != ILAB_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    size_t cap = (size_t)(64 + TL_GREEDY_TOKENS) * (size_t)V;
    float *ref_logits = malloc(cap * sizeof *ref_logits);
    double *gaps = malloc((size_t)TL_GREEDY_PROMPTS * TL_GREEDY_TOKENS * sizeof *gaps);
    if (!ref_logits || !gaps)
        return 1;
    for (int a = 3; a < argc; a++) {
        const char *spec = argv[a];
        runner v;
        if (runner_open(&v, argv[1], spec) != 0)
            return 1;
        int identical = 0, same = 0, npos = 0;
        double max_err = 0, sum_err = 0;
        for (int p = 0; p < TL_GREEDY_PROMPTS; p++) {
            int32_t ids[64], gen[2][TL_GREEDY_TOKENS];
            size_t n;
            const char *text = tl_greedy_prompts[p];
            if (tl_tokenizer_encode(&tok, text, strlen(text), 1, 0, ids, 64, &n) != ILAB_OK)
                return 1;
            greedy(&ref, ids, (int)n, gen[0]);
            greedy(&v, ids, (int)n, gen[1]);
            identical += memcmp(gen[0], gen[1], sizeof gen[0]) == 0;
            /* both scored along fp32's path */
            int32_t path[64 + TL_GREEDY_TOKENS];
            memcpy(path, ids, n * sizeof *path);
            memcpy(path + n, gen[0], sizeof gen[0]);
            int len = (int)n + TL_GREEDY_TOKENS - 1;
            score(&ref, path, len);
            memcpy(ref_logits, ref.logits, (size_t)len * (size_t)V * sizeof *ref_logits);
            score(&v, path, len);
            for (int j = (int)n - 1; j < len; j++) {
                const float *x = ref_logits + (size_t)j * V, *y = v.logits + (size_t)j * V;
                int t1 = path[j + 1], t2 = second_best(x, V, t1);
                double e = fabs(log_softmax_at(x, V, t1) - log_softmax_at(y, V, t1));
                same += argmax(y, V) == t1;
                max_err = e > max_err ? e : max_err;
                sum_err += e;
                gaps[npos++] = fabs(((double)x[t1] - x[t2]) - ((double)y[t1] - y[t2]));
            }
        }
        qsort(gaps, (size_t)npos, sizeof *gaps, cmp_double);
        printf("%s: identical %d of %d; same next token %d of %d (%.1f%%); top-2 gap moved by "
               "median %.4f, p99 %.4f; log-prob error max %.4f, mean %.4f\n", spec, identical,
               TL_GREEDY_PROMPTS, same, npos, 100.0 * same / npos, gaps[npos / 2],
               gaps[npos * 99 / 100], max_err, sum_err / npos);
        runner_close(&v);
    }
    free(ref_logits);
    free(gaps);
    tl_tokenizer_free(&tok);
    runner_close(&ref);
    return 0;
}
