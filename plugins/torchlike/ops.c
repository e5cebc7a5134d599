#include "ops.h"

#include "matmul_f16.h"
#include "matmul_q8_0.h"
#include "matmul_quant.h"
#include "matvec_f32.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static tl_matvec_kind matvec_kind = TL_MATVEC_OWN;
static int skinny_limit = TL_SKINNY_BATCH_DEFAULT;

void tl_ops_set_skinny_limit(int max_tokens)
{
    skinny_limit = max_tokens;
}

void tl_ops_set_matvec(tl_matvec_kind kind)
{
    matvec_kind = kind;
}

tl_matvec_kind tl_ops_matvec(void)
{
    return matvec_kind;
}

/* Eight floats: GCC vector extensions give portable SIMD (SSE pairs, or one
 * AVX register in the x86-64-v3 clone) without intrinsics. */
typedef float v8f __attribute__((vector_size(32)));

/* Macros rather than functions: passing vectors by value between functions
 * compiled for different ISAs would change their calling convention. */
#define LOAD8(p) (*(const v8f_unaligned *)(p))
#define HSUM8(v) ((((v)[0] + (v)[4]) + ((v)[1] + (v)[5])) + (((v)[2] + (v)[6]) + ((v)[3] + (v)[7])))
typedef float v8f_unaligned __attribute__((vector_size(32), aligned(4), may_alias));

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TL_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define TL_CLONES
#endif

/* out[t][r] = w[r] . x[t] for rows [r0, r1) and all T tokens of a skinny
 * batch: each weight row is read from memory once and reused from L1 for
 * every token. Two rows by four tokens at a time keep eight accumulators in
 * registers, so six loads feed eight multiply-adds (the batch is bound by
 * arithmetic, not by memory, from a few tokens on). */
TL_CLONES
static void matmul_skinny_rows(const float *w, const float *x, float *out, int T, int d, int n,
                               int r0, int r1)
{
    int d8 = d & ~7;
    int r = r0;
    for (; r + 2 <= r1; r += 2) {
        const float *wa = w + (size_t)r * d, *wb = wa + d;
        /* Tokens four at a time; a last group of fewer repeats its first
         * token in the spare lanes and drops those results. */
        for (int t = 0; t < T; t += 4) {
            int valid = T - t < 4 ? T - t : 4;
            const float *xs[4];
            for (int k = 0; k < 4; k++)
                xs[k] = x + (size_t)(t + (k < valid ? k : 0)) * d;
            const float *x0 = xs[0], *x1 = xs[1], *x2 = xs[2], *x3 = xs[3];
            /* While the first tokens use these rows, fetch the next pair:
             * the rows are read once from memory, so their latency is
             * what a skinny batch waits on. */
            const float *next = r + 4 <= r1 && t == 0 ? wa + 2 * (size_t)d : NULL;
            v8f a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, b0 = {0}, b1 = {0}, b2 = {0}, b3 = {0};
            for (int i = 0; i < d8; i += 8) {
                if (next && i % 16 == 0) {
                    __builtin_prefetch(next + i);
                    __builtin_prefetch(next + d + i);
                }
                v8f va = LOAD8(wa + i), vb = LOAD8(wb + i);
                v8f y0 = LOAD8(x0 + i), y1 = LOAD8(x1 + i), y2 = LOAD8(x2 + i), y3 = LOAD8(x3 + i);
                a0 += va * y0;
                a1 += va * y1;
                a2 += va * y2;
                a3 += va * y3;
                b0 += vb * y0;
                b1 += vb * y1;
                b2 += vb * y2;
                b3 += vb * y3;
            }
            float sa[4] = {HSUM8(a0), HSUM8(a1), HSUM8(a2), HSUM8(a3)};
            float sb[4] = {HSUM8(b0), HSUM8(b1), HSUM8(b2), HSUM8(b3)};
            for (int k = 0; k < valid; k++) {
                for (int i = d8; i < d; i++) {
                    sa[k] += wa[i] * xs[k][i];
                    sb[k] += wb[i] * xs[k][i];
                }
                out[(size_t)(t + k) * n + r] = sa[k];
                out[(size_t)(t + k) * n + r + 1] = sb[k];
            }
        }
    }
    for (; r < r1; r++) {
        const float *wr = w + (size_t)r * d;
        for (int t = 0; t < T; t++) {
            const float *xt = x + (size_t)t * d;
            v8f a = {0};
            for (int i = 0; i < d8; i += 8)
                a += LOAD8(wr + i) * LOAD8(xt + i);
            float sum = HSUM8(a);
            for (int i = d8; i < d; i++)
                sum += wr[i] * xt[i];
            out[(size_t)t * n + r] = sum;
        }
    }
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TL_HAVE_WIDE_SKINNY 1
/* With AVX-512's 32 vector registers, four rows by four tokens fit: 16
 * accumulators, and eight loads feed sixteen multiply-adds. Same sums, in
 * the same order per output, as matmul_skinny_rows. */
__attribute__((target("arch=x86-64-v4")))
static void matmul_skinny_rows4(const float *w, const float *x, float *out, int T, int d, int n,
                                int r0, int r1)
{
    int d8 = d & ~7;
    for (int r = r0; r + 4 <= r1; r += 4) {
        const float *w0 = w + (size_t)r * d, *w1 = w0 + d, *w2 = w1 + d, *w3 = w2 + d;
        for (int t = 0; t < T; t += 4) {
            int valid = T - t < 4 ? T - t : 4;
            const float *xs[4];
            for (int k = 0; k < 4; k++)
                xs[k] = x + (size_t)(t + (k < valid ? k : 0)) * d;
            const float *x0 = xs[0], *x1 = xs[1], *x2 = xs[2], *x3 = xs[3];
            const float *next = r + 8 <= r1 && t == 0 ? w0 + 4 * (size_t)d : NULL;
            v8f acc[4][4];
            memset(acc, 0, sizeof acc);
            for (int i = 0; i < d8; i += 8) {
                if (next && i % 16 == 0) {
                    __builtin_prefetch(next + i);
                    __builtin_prefetch(next + d + i);
                    __builtin_prefetch(next + 2 * (size_t)d + i);
                    __builtin_prefetch(next + 3 * (size_t)d + i);
                }
                v8f y0 = LOAD8(x0 + i), y1 = LOAD8(x1 + i), y2 = LOAD8(x2 + i), y3 = LOAD8(x3 + i);
                v8f v0 = LOAD8(w0 + i), v1 = LOAD8(w1 + i), v2 = LOAD8(w2 + i), v3 = LOAD8(w3 + i);
                acc[0][0] += v0 * y0; acc[0][1] += v0 * y1; acc[0][2] += v0 * y2; acc[0][3] += v0 * y3;
                acc[1][0] += v1 * y0; acc[1][1] += v1 * y1; acc[1][2] += v1 * y2; acc[1][3] += v1 * y3;
                acc[2][0] += v2 * y0; acc[2][1] += v2 * y1; acc[2][2] += v2 * y2; acc[2][3] += v2 * y3;
                acc[3][0] += v3 * y0; acc[3][1] += v3 * y1; acc[3][2] += v3 * y2; acc[3][3] += v3 * y3;
            }
            const float *ws[4] = {w0, w1, w2, w3};
            for (int j = 0; j < 4; j++)
                for (int k = 0; k < valid; k++) {
                    float sum = HSUM8(acc[j][k]);
                    for (int i = d8; i < d; i++)
                        sum += ws[j][i] * xs[k][i];
                    out[(size_t)(t + k) * n + r + j] = sum;
                }
        }
    }
}
#endif

/* Eight lanes: a decode step takes tens of thousands of these short dot
 * products (query . key per head and position), and one scalar sum is a
 * chain of dependent additions. */
TL_CLONES
float tl_dot(const float *a, const float *b, int n)
{
    v8f acc = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        acc += LOAD8(a + i) * LOAD8(b + i);
    float s = HSUM8(acc);
    for (; i < n; i++)
        s += a[i] * b[i];
    return s;
}

/* y += a * x: attention adds one value row per position this way, as many
 * times a step as it takes dot products; compiled per ISA like tl_dot (the
 * baseline build would give it 128-bit vectors). */
TL_CLONES
void tl_axpy(float *y, float a, const float *x, int n)
{
    for (int i = 0; i < n; i++)
        y[i] += a * x[i];
}

/* The block types other than Q8_0, and bf16: the integer kernels on the
 * activations quantised as the type wants (matmul_quant.h), or the float
 * path for bf16. */
static void quant_rows(const tl_matrix *w, const float *x, size_t x_stride,
                       const tl_act_scratch *xq, int T, float *out, int out_stride, int r0, int r1)
{
    switch (tl_quant_act_kind(w->type)) {
    case TL_ACT_Q8: {
        tl_q8_act a = {xq->q, xq->scale, xq->sum};
        tl_matmul_quant(w, &a, T, out, out_stride, r0, r1);
        return;
    }
    case TL_ACT_Q8K: {
        tl_q8k_act a = {xq->q, xq->scale, (const int16_t *)(const void *)xq->sum};
        tl_matmul_quant(w, &a, T, out, out_stride, r0, r1);
        return;
    }
    case TL_ACT_NONE:
        tl_matmul_dequant(w, x, x_stride, T, out, out_stride, r0, r1);
        return;
    }
}

/* The activations a product of type t needs quantised: Q8_0 shares the
 * per-32 blocks of the legacy types. */
static tl_act_kind act_kind(tl_dtype t)
{
    if (t == TL_DTYPE_Q8_0 || t == TL_DTYPE_Q8_0_R16)
        return TL_ACT_Q8;
    return tl_quant_act_kind(t);
}

/* Rows of several products laid end to end, split evenly over threads. */
typedef struct matvec_job {
    float *const *outs;
    const tl_matrix *const *ws;
    int n_products;
    const float *x;
    const tl_act_scratch *xq; /* x quantised, when a product is Q8_0 */
} matvec_job;

static void matvec_task(void *ctxp, int begin, int end, int thread)
{
    const matvec_job *job = ctxp;
    int base = 0;
    for (int p = 0; p < job->n_products; p++) {
        const tl_matrix *w = job->ws[p];
        int lo = begin > base ? begin - base : 0;
        int hi = end - base < w->rows ? end - base : w->rows;
        if (lo < hi) {
            switch (w->type) {
            case TL_DTYPE_F32:
                tl_matvec_f32(w->data, job->x, job->outs[p], w->cols, lo, hi);
                break;
            case TL_DTYPE_F16:
                tl_matmul_f16(w, job->x, (size_t)w->cols, 1, job->outs[p], 0, lo, hi);
                break;
            case TL_DTYPE_Q8_0:
            case TL_DTYPE_Q8_0_R16: {
                tl_q8_act a = {job->xq->q, job->xq->scale, job->xq->sum};
                tl_matmul_q8_0(w, &a, 1, job->outs[p], 0, lo, hi);
                break;
            }
            default:
                quant_rows(w, job->x, (size_t)w->cols, job->xq, 1, job->outs[p], 0, lo, hi);
                break;
            }
        }
        base += w->rows;
    }
}

/* Quantise T rows of x for the products of one kind. The scratch was
 * sized by the workspace for the widest input of the model; per 256 values
 * (Q8_K) it keeps one scale where Q8 keeps 8, and 16 int16 sums in the room
 * of 8 int32 ones. */
static void quantize_rows(tl_act_kind kind, const float *x, size_t stride, int T, int cols,
                          tl_act_scratch *s)
{
    for (int t = 0; t < T; t++) {
        if (kind == TL_ACT_Q8K)
            tl_quantize_act_q8k(x + (size_t)t * stride, cols, s->q + (size_t)t * (size_t)cols,
                                s->scale + (size_t)t * (size_t)(cols / 256),
                                (int16_t *)(void *)s->sum + (size_t)t * (size_t)(cols / 16));
        else if (kind == TL_ACT_Q8)
            tl_quantize_act_q8(x + (size_t)t * stride, cols, s->q + (size_t)t * (size_t)cols,
                               s->scale + (size_t)t * (size_t)(cols / TL_Q8_0_BLOCK),
                               s->sum + (size_t)t * (size_t)(cols / TL_Q8_0_BLOCK));
    }
}

void tl_matvec_multi(float *const *outs, const tl_matrix *const *ws, int n_products,
                     const float *x, tl_act_scratch *scratch, tl_thread_pool *pool)
{
    int all_f32 = 1, total = 0;
    tl_act_kind kind = TL_ACT_NONE;
    for (int p = 0; p < n_products; p++) {
        all_f32 &= ws[p]->type == TL_DTYPE_F32;
        tl_act_kind k = act_kind(ws[p]->type);
        if (k != TL_ACT_NONE && kind != TL_ACT_NONE && k != kind) {
            /* a mixed file (Q4_K_M's Q4_K and Q8_0 say) with both kinds in
             * one group: one scratch holds one kind, so one product at a time */
            for (int i = 0; i < n_products; i++)
                tl_matvec_multi(&outs[i], &ws[i], 1, x, scratch, pool);
            return;
        }
        if (k != TL_ACT_NONE)
            kind = k;
        total += ws[p]->rows;
    }
    if (matvec_kind == TL_MATVEC_BLAS && all_f32) {
        for (int p = 0; p < n_products; p++)
            cblas_sgemv(CblasRowMajor, CblasNoTrans, ws[p]->rows, ws[p]->cols, 1.0f, ws[p]->data,
                        ws[p]->cols, x, 1, 0.0f, outs[p], 1);
        return;
    }
    quantize_rows(kind, x, 0, 1, ws[0]->cols, scratch);
    matvec_job job = {outs, ws, n_products, x, scratch};
    /* At least 64 rows a chunk: long sequential runs, and few enough hand-offs. */
    tl_parallel_for(pool, total, 64, matvec_task, &job);
}

/* fp16 and Q8_0 products over T tokens: rows shared over the threads, each
 * row read once for all tokens. */
typedef struct typed_job {
    const tl_matrix *w;
    const float *x;
    size_t x_stride;
    const tl_act_scratch *xq;
    float *out;
    int T, out_stride;
} typed_job;

static void typed_task(void *ctxp, int begin, int end, int thread)
{
    const typed_job *j = ctxp;
    if (j->w->type == TL_DTYPE_F16) {
        tl_matmul_f16(j->w, j->x, j->x_stride, j->T, j->out, j->out_stride, begin, end);
    } else if (j->w->type != TL_DTYPE_Q8_0 && j->w->type != TL_DTYPE_Q8_0_R16) {
        quant_rows(j->w, j->x, j->x_stride, j->xq, j->T, j->out, j->out_stride, begin, end);
    } else {
        tl_q8_act a = {j->xq->q, j->xq->scale, j->xq->sum};
        tl_matmul_q8_0(j->w, &a, j->T, j->out, j->out_stride, begin, end);
    }
}

typedef struct skinny_job {
    const float *w, *x;
    float *out;
    int T, d, n;
} skinny_job;

static void skinny_task(void *ctxp, int begin, int end, int thread)
{
    const skinny_job *j = ctxp;
#ifdef TL_HAVE_WIDE_SKINNY
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl")) {
        int four = begin + (end - begin) / 4 * 4;
        matmul_skinny_rows4(j->w, j->x, j->out, j->T, j->d, j->n, begin, four);
        begin = four;
    }
#endif
    matmul_skinny_rows(j->w, j->x, j->out, j->T, j->d, j->n, begin, end);
}

void tl_matmul(tl_tensor *out, const tl_tensor *x, const tl_matrix *w, tl_act_scratch *scratch,
               tl_thread_pool *pool)
{
    int T = (int)tl_tensor_rows_of(x), d = (int)tl_tensor_cols_of(x);
    int n = w->rows;
    if (T == 1) {
        float *o = out->data;
        tl_matvec_multi(&o, &w, 1, x->data, scratch, pool);
        return;
    }
    if (w->type != TL_DTYPE_F32) {
        quantize_rows(act_kind(w->type), x->data, x->stride[0], T, d, scratch);
        typed_job job = {w, x->data, x->stride[0], scratch, out->data, T, (int)out->stride[0]};
        tl_parallel_for(pool, n, 16, typed_task, &job);
        return;
    }
    if (T <= skinny_limit && x->stride[0] == (size_t)d && out->stride[0] == (size_t)n) {
        skinny_job job = {w->data, x->data, out->data, T, d, n};
        tl_parallel_for(pool, n, 32, skinny_task, &job);
        return;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, n, d, 1.0f, x->data,
                (int)x->stride[0], w->data, w->cols, 0.0f, out->data,
                (int)out->stride[0]);
}

static void rmsnorm_row(float *o, const float *x, const float *weight, size_t d, float eps)
{
    float ss = 0.0f;
    for (size_t i = 0; i < d; i++)
        ss += x[i] * x[i];
    ss /= (float)d;
    ss += eps;
    ss = 1.0f / sqrtf(ss);
    for (size_t i = 0; i < d; i++)
        o[i] = weight[i] * (ss * x[i]);
}

void tl_rmsnorm(tl_tensor *out, const tl_tensor *x, const float *weight, float eps)
{
    size_t T = tl_tensor_rows_of(x), d = tl_tensor_cols_of(x);
    for (size_t t = 0; t < T; t++)
        rmsnorm_row(tl_tensor_row(out, t), tl_tensor_row(x, t), weight, d, eps);
}

void tl_rmsnorm_slices(float *x, int n, int size, const float *weight, float eps)
{
    for (int i = 0; i < n; i += size)
        rmsnorm_row(x + i, x + i, weight, (size_t)size, eps);
}

ilab_status tl_rope_table(int seq_len, const tl_rope_params *p, float **cos_out, float **sin_out)
{
    size_t half = (size_t)p->n_rot / 2;
    float *c = malloc((size_t)seq_len * half * sizeof(float) + 1);
    float *s = malloc((size_t)seq_len * half * sizeof(float) + 1);
    if (!c || !s) {
        free(c);
        free(s);
        return ILAB_OUT_OF_MEMORY;
    }
    for (int pos = 0; pos < seq_len; pos++)
        for (int d = 0; d < p->n_rot; d += 2) {
            float freq = 1.0f / powf(p->base, (float)d / (float)p->n_rot);
            if (p->factors)
                freq /= p->factors[d / 2];
            float val = (float)pos * freq * p->freq_scale;
            c[(size_t)pos * half + (size_t)d / 2] = cosf(val);
            s[(size_t)pos * half + (size_t)d / 2] = sinf(val);
        }
    *cos_out = c;
    *sin_out = s;
    return ILAB_OK;
}

void tl_rope_row(float *x, int n_features, int head_size, int n_rot, int neox,
                 const float *cos_row, const float *sin_row)
{
    int half = n_rot / 2;
    for (int h = 0; h < n_features; h += head_size)
        for (int i = 0; i < half; i++) {
            /* The pair's two features: adjacent, or half a rotation apart. */
            float *a = neox ? &x[h + i] : &x[h + 2 * i];
            float *b = neox ? &x[h + i + half] : &x[h + 2 * i + 1];
            float fcr = cos_row[i], fci = sin_row[i], v0 = *a, v1 = *b;
            *a = v0 * fcr - v1 * fci;
            *b = v0 * fci + v1 * fcr;
        }
}

void tl_softmax(float *x, int n)
{
    float max = x[0];
    for (int i = 1; i < n; i++)
        if (x[i] > max)
            max = x[i];
    float sum = 0.0f;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    for (int i = 0; i < n; i++)
        x[i] /= sum;
}

typedef struct swiglu_job {
    tl_tensor *h1;
    const tl_tensor *h3;
} swiglu_job;

static void swiglu_task(void *ctxp, int begin, int end, int thread)
{
    const swiglu_job *job = ctxp;
    for (int t = begin; t < end; t++) {
        float *a = tl_tensor_row(job->h1, (size_t)t);
        const float *b = tl_tensor_row(job->h3, (size_t)t);
        for (size_t i = 0; i < tl_tensor_cols_of(job->h1); i++) {
            float v = a[i];
            v *= 1.0f / (1.0f + expf(-v));
            a[i] = v * b[i];
        }
    }
}

void tl_swiglu(tl_tensor *h1, const tl_tensor *h3, tl_thread_pool *pool)
{
    /* expf over every hidden unit of every token: worth sharing out for batches */
    swiglu_job job = {h1, h3};
    tl_parallel_for(pool, (int)tl_tensor_rows_of(h1), 1, swiglu_task, &job);
}

void tl_add(tl_tensor *x, const tl_tensor *y)
{
    size_t T = tl_tensor_rows_of(x), d = tl_tensor_cols_of(x);
    for (size_t t = 0; t < T; t++) {
        float *a = tl_tensor_row(x, t);
        const float *b = tl_tensor_row(y, t);
        for (size_t i = 0; i < d; i++)
            a[i] += b[i];
    }
}

void tl_embedding(tl_tensor *out, const tl_matrix *table, const int *ids)
{
    size_t T = tl_tensor_rows_of(out);
    for (size_t t = 0; t < T; t++)
        tl_matrix_row_f32(table, ids[t], tl_tensor_row(out, t));
}
