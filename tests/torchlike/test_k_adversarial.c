/* Adversarial cases for the K-type integer products (Q2_K .. Q6_K):
 * tl_matmul_quant_isa at every ISA level this CPU has, the multi-row copies
 * tl_matmul_k_avx2 and tl_matmul_k_avx512 called directly, and
 * tl_quantize_act_q8k. Written from the headers' contract (matmul_quant.h,
 * matmul_k_avx2.h, matmul_k_avx512.h, quant_blocks.h) and the
 * reference dequantisation (dequant_ref.c), not from the kernels.
 *
 * Every product is checked against:
 *  - a value computed here in double from the dequantised weights and the
 *    quantised activations, sum_i w_i * q_i * d_b(i), within
 *    1e-5 * sum_i m_i (|x_i| + d_b(i) / 2), where m_i is |w_i| for Q3_K and
 *    Q6_K and |d * sc * q| + |dmin * mn| for the types with a min (the two
 *    terms a kernel sums separately, which may cancel in w_i);
 *  - the scalar reference, within 1e-5 * sum_i |w_i| (|x_i| + d_b(i) / 2);
 *  - (scalar) the product with the float activations, within
 *    sum_i |w_i| d_b(i) / 2 plus float slack;
 *  - itself: any split of the rows into [r0, r1) pieces, empty ones
 *    included, gives bit-identical floats, and nothing outside
 *    [r0, r1) x [0, T) (nor the out_stride padding) is ever written.
 * Blocks: all bits set or clear, six-bit scales and mins 63, Q6_K scales
 * -128 and 127, distinct scales per sub-block, fp16 scales at 65504,
 * subnormal, negative and zero, heterogeneous rows (four-row passes);
 * activations at +-max (q = +-127), alternating, zero, tiny, and one hot
 * value in each 16-value sub-block in turn; rows 1..17 with every range,
 * T 1..5 with a padded out_stride, cols 256..2048; matrices and
 * activations against PROT_NONE pages. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "cpu.h"
#include "matmul_k_avx2.h"
#include "matmul_k_avx512.h"
#include "matmul_quant.h"
#include "quant_blocks.h"
#include "weights.h"

/* ---- small helpers ---------------------------------------------------- */

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float unif(void) { return (float)(next() & 0xffffff) / 16777216.0f * 2.0f - 1.0f; }

static const tl_dtype ktypes[] = {TL_DTYPE_Q2_K, TL_DTYPE_Q3_K, TL_DTYPE_Q4_K, TL_DTYPE_Q5_K,
                                  TL_DTYPE_Q6_K};
#define NKTYPES ((int)(sizeof ktypes / sizeof *ktypes))

static int has_min(tl_dtype t)
{
    return t == TL_DTYPE_Q2_K || t == TL_DTYPE_Q4_K || t == TL_DTYPE_Q5_K;
}
static int has_multirow_copy(tl_dtype t)
{
    return t == TL_DTYPE_Q4_K || t == TL_DTYPE_Q5_K || t == TL_DTYPE_Q6_K;
}

static size_t block_bytes(tl_dtype t) { return tl_dtype_row_bytes(t, TL_QK_K); }

static size_t d_offset(tl_dtype t)
{
    switch (t) {
    case TL_DTYPE_Q2_K: return offsetof(tl_block_q2_k, d);
    case TL_DTYPE_Q3_K: return offsetof(tl_block_q3_k, d);
    case TL_DTYPE_Q4_K: return offsetof(tl_block_q4_k, d);
    case TL_DTYPE_Q5_K: return offsetof(tl_block_q5_k, d);
    default: return offsetof(tl_block_q6_k, d);
    }
}
static size_t dmin_offset(tl_dtype t)
{
    switch (t) {
    case TL_DTYPE_Q2_K: return offsetof(tl_block_q2_k, dmin);
    case TL_DTYPE_Q4_K: return offsetof(tl_block_q4_k, dmin);
    default: return offsetof(tl_block_q5_k, dmin);
    }
}

static void put16(unsigned char *p, uint16_t h) { memcpy(p, &h, 2); }

/* failures are printed (up to a limit) and counted; each test fails at its
 * end when any was seen, so one run shows every kind of failure */
static int failures;
static void report(const char *fmt, ...)
{
    if (failures++ >= 25)
        return;
    va_list ap;
    va_start(ap, fmt);
    char buf[512];
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    print_error("%s\n", buf);
}
static void begin_test(void) { failures = 0; }
static void end_test(const char *name)
{
    if (failures)
        fail_msg("%s: %d check(s) failed (first ones printed above)", name, failures);
}

/* ---- kernels under test ----------------------------------------------- */

static tl_isa max_isa;     /* best level of this CPU */
/* The multi-row copies, called directly: each must do Q4_K/Q5_K/Q6_K on a
 * CPU at its level and may decline below it. */
typedef int (*direct_fn)(const tl_matrix *w, const tl_q8k_act *a, int T, float *out, int out_stride,
                         int r0, int r1);
static const struct {
    const char *name;
    direct_fn fn;
    tl_isa needs;
} directs[] = {
    {"tl_matmul_k_avx2", tl_matmul_k_avx2, TL_ISA_AVX2},
    {"tl_matmul_k_avx512", tl_matmul_k_avx512, TL_ISA_AVX512_VNNI},
};
#define K_DIRECT 5 /* kernel index of directs[0]; the ISA levels come first */
#define NDIRECT ((int)(sizeof directs / sizeof directs[0]))
#define NKERNELS (K_DIRECT + NDIRECT)
static int nkernels(void) { return NKERNELS; }
static int kernel_usable(int k) { return k >= K_DIRECT || k <= (int)max_isa; }
static const char *kernel_name(int k)
{
    return k >= K_DIRECT ? directs[k - K_DIRECT].name : tl_isa_name((tl_isa)k);
}
/* the direct kernel must run here (this CPU has its level) */
static int direct_expected(int k) { return max_isa >= directs[k - K_DIRECT].needs; }
/* 1 when the kernel did the product */
static int run_kernel(int k, const tl_matrix *w, const tl_q8k_act *a, int T, float *out, int stride,
                      int r0, int r1)
{
    if (k >= K_DIRECT)
        return directs[k - K_DIRECT].fn(w, a, T, out, stride, r0, r1);
    tl_matmul_quant_isa((tl_isa)k, w, a, T, out, stride, r0, r1);
    return 1;
}

static int setup(void **state)
{
    (void)state;
    max_isa = tl_cpu_detected();
    printf("CPU level %s\n", tl_isa_name(max_isa));
    for (int k = K_DIRECT; k < NKERNELS; k++)
        printf("%s %s\n", kernel_name(k), direct_expected(k) ? "expected to run" : "may decline");
    return 0;
}

/* ---- weight matrices -------------------------------------------------- */

enum {
    WP_RANDOM,   /* random bytes, ordinary scales */
    WP_ONES,     /* every byte 0xff: nibbles 15, high bits set, scales/mins 63 */
    WP_ZERO,     /* every byte 0 */
    WP_DISTINCT, /* a different scale (and min) in every sub-block */
    WP_EXTREME,  /* scales at their extremes, random quants, extreme fp16 */
    WP_HIGH,     /* every high bit set (or clear), random low bits */
    WP_MIXED,    /* each row and block another of the above */
    WP_CANCEL,   /* d * sc * q == dmin * mn exactly: every w_i is 0 */
    WP_COUNT
};
static const char *wp_name[] = {"random", "all-ones", "all-zero", "distinct-scales",
                                "extreme-scales", "high-bits", "mixed-rows", "cancel"};

/* fp16 scales: max, -max, smallest subnormal, -largest subnormal, smallest
 * normal, -1, 1, ~0.1, 0, -0.5 */
static const uint16_t dlist[] = {0x7bff, 0xfbff, 0x0001, 0x83ff, 0x0400,
                                 0xbc00, 0x3c00, 0x2e66, 0x0000, 0xb800};
#define ND ((int)(sizeof dlist / sizeof *dlist))

/* inverse of tl_k4_scale_min */
static void pack_k4(uint8_t s[12], const int sc[8], const int mn[8])
{
    memset(s, 0, 12);
    for (int k = 0; k < 4; k++) {
        s[k] = (uint8_t)((sc[k] & 63) | ((sc[k + 4] >> 4) << 6));
        s[k + 4] = (uint8_t)((mn[k] & 63) | ((mn[k + 4] >> 4) << 6));
    }
    for (int k = 4; k < 8; k++)
        s[k + 4] = (uint8_t)((sc[k] & 15) | ((mn[k] & 15) << 4));
}
/* inverse of tl_q3k_scales (values 0..63, still offset by 32) */
static void pack_q3(uint8_t s[12], const int v[16])
{
    memset(s, 0, 12);
    for (int k = 0; k < 16; k++) {
        int lo = v[k] & 15, hi = v[k] >> 4;
        if (k < 8)
            s[k] |= (uint8_t)lo;
        else
            s[k - 8] |= (uint8_t)(lo << 4);
        s[8 + k % 4] |= (uint8_t)(hi << (2 * (k / 4)));
    }
}

static void rand_bytes(unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)next();
}

static void fill_block(tl_dtype t, int wp, unsigned char *blk, int r, int b)
{
    size_t bb = block_bytes(t);
    if (wp == WP_MIXED)
        wp = (r * 3 + b * 2 + r / 4) % WP_MIXED;
    uint16_t d = tl_fp32_to_fp16(unif() * 0.05f), dm = tl_fp32_to_fp16(unif() * 0.05f);
    int pick = (r * 7 + b * 3) % ND, pick2 = (r * 5 + b + 1) % ND;
    switch (wp) {
    case WP_RANDOM: rand_bytes(blk, bb); break;
    case WP_ONES:
        memset(blk, 0xff, bb);
        d = dlist[pick];
        dm = dlist[pick2];
        if (d == 0)
            d = 0x3c00;
        break;
    case WP_ZERO:
        memset(blk, 0, bb);
        d = dlist[pick];
        dm = dlist[pick2];
        if (d == 0)
            d = 0xbc00;
        break;
    case WP_DISTINCT: {
        rand_bytes(blk, bb);
        d = tl_fp32_to_fp16((0.01f + 0.04f * fabsf(unif())) * ((r + b) % 3 == 2 ? -1.0f : 1.0f));
        if (t == TL_DTYPE_Q4_K || t == TL_DTYPE_Q5_K) {
            int sc[8], mn[8];
            for (int k = 0; k < 8; k++) {
                sc[k] = 63 - 5 * ((k + b + r) % 8);
                mn[k] = 2 + 8 * ((k * 3 + r) % 8);
            }
            pack_k4(((tl_block_q4_k *)(void *)blk)->scales, sc, mn); /* same offset in Q5_K */
        } else if (t == TL_DTYPE_Q6_K) {
            static const int8_t v[16] = {-128, 127, -1, 1, 0, 64, -64, 100,
                                         -100, 31, -32, 17, -77, 5, 126, -127};
            for (int k = 0; k < 16; k++)
                ((tl_block_q6_k *)(void *)blk)->scales[k] = v[(k + b + r) % 16];
        } else if (t == TL_DTYPE_Q3_K) {
            int v[16];
            for (int k = 0; k < 16; k++)
                v[k] = (k * 23 + 5 * b + 3 * r + 1) % 64;
            pack_q3(((tl_block_q3_k *)(void *)blk)->scales, v);
        } else {
            for (int k = 0; k < 16; k++)
                ((tl_block_q2_k *)(void *)blk)->scales[k] =
                    (uint8_t)((((k * 5 + r + 1) % 16) << 4) | ((k * 7 + b + 3) % 16));
        }
        break;
    }
    case WP_EXTREME: {
        rand_bytes(blk, bb);
        d = dlist[pick];
        dm = dlist[pick2];
        if (t == TL_DTYPE_Q4_K || t == TL_DTYPE_Q5_K) {
            int sc[8], mn[8];
            for (int k = 0; k < 8; k++) {
                sc[k] = 63;
                mn[k] = (b + r) % 2 ? 0 : 63;
            }
            pack_k4(((tl_block_q4_k *)(void *)blk)->scales, sc, mn);
        } else if (t == TL_DTYPE_Q6_K) {
            for (int k = 0; k < 16; k++)
                ((tl_block_q6_k *)(void *)blk)->scales[k] = (int8_t)((k + b + r) % 2 ? 127 : -128);
        } else if (t == TL_DTYPE_Q3_K) {
            int v[16];
            for (int k = 0; k < 16; k++)
                v[k] = (k + b + r) % 2 ? 63 : 0;
            pack_q3(((tl_block_q3_k *)(void *)blk)->scales, v);
        } else {
            static const uint8_t v[3] = {0xff, 0x0f, 0xf0};
            for (int k = 0; k < 16; k++)
                ((tl_block_q2_k *)(void *)blk)->scales[k] = v[(k + b + r) % 3];
        }
        break;
    }
    case WP_HIGH: {
        rand_bytes(blk, bb);
        uint8_t hb = (b + r) % 2 ? 0xff : 0x00;
        if (t == TL_DTYPE_Q5_K)
            memset(((tl_block_q5_k *)(void *)blk)->qh, 0xff, 32);
        else if (t == TL_DTYPE_Q6_K)
            memset(((tl_block_q6_k *)(void *)blk)->qh, hb ? 0xff : 0xaa, 64);
        else if (t == TL_DTYPE_Q3_K)
            memset(((tl_block_q3_k *)(void *)blk)->hmask, hb, 32);
        else if (t == TL_DTYPE_Q4_K)
            for (int i = 0; i < 128; i++)
                ((tl_block_q4_k *)(void *)blk)->qs[i] |= 0x88; /* every nibble >= 8 */
        else
            memset(((tl_block_q2_k *)(void *)blk)->qs, hb ? 0xff : 0xaa, 64);
        break;
    }
    case WP_CANCEL:
        /* all quants at their top, all scales and mins at their top, and
         * dmin = d * q_top so that d * sc * q - dmin * mn is exactly 0 */
        memset(blk, 0xff, bb);
        if (t == TL_DTYPE_Q4_K)
            d = tl_fp32_to_fp16(0.9375f), dm = tl_fp32_to_fp16(0.9375f * 15.0f);
        else if (t == TL_DTYPE_Q5_K)
            d = tl_fp32_to_fp16(0.5f), dm = tl_fp32_to_fp16(0.5f * 31.0f);
        else if (t == TL_DTYPE_Q2_K)
            d = tl_fp32_to_fp16(0.25f), dm = tl_fp32_to_fp16(0.75f);
        break;
    }
    put16(blk + d_offset(t), d);
    if (has_min(t))
        put16(blk + dmin_offset(t), dm);
}

typedef struct mat {
    tl_matrix m;
    void *mem;     /* malloc'd, or NULL when the caller owns the bytes */
    float *deq;    /* rows x cols dequantised (dequant_ref.c) */
    double *tm;    /* rows x cols: |d sc q| + |dmin mn| (|w| without a min) */
} mat;

static void derive(mat *w)
{
    tl_dtype t = w->m.type;
    int rows = w->m.rows, cols = w->m.cols, nb = cols / TL_QK_K;
    size_t rb = tl_dtype_row_bytes(t, cols), bb = block_bytes(t);
    w->deq = malloc((size_t)rows * (size_t)cols * sizeof *w->deq);
    w->tm = malloc((size_t)rows * (size_t)cols * sizeof *w->tm);
    unsigned char *tmp = malloc(rb);
    float *a = malloc((size_t)cols * sizeof *a), *bq = malloc((size_t)cols * sizeof *bq);
    for (int r = 0; r < rows; r++) {
        const unsigned char *row = (const unsigned char *)w->m.data + (size_t)r * rb;
        float *dq = w->deq + (size_t)r * (size_t)cols;
        tl_dequantize_row(t, row, dq, cols);
        double *tm = w->tm + (size_t)r * (size_t)cols;
        if (!has_min(t)) {
            for (int i = 0; i < cols; i++)
                tm[i] = fabs((double)dq[i]);
            continue;
        }
        memcpy(tmp, row, rb);
        for (int b = 0; b < nb; b++)
            put16(tmp + (size_t)b * bb + dmin_offset(t), 0);
        tl_dequantize_row(t, tmp, a, cols); /* d * sc * q */
        memcpy(tmp, row, rb);
        for (int b = 0; b < nb; b++)
            put16(tmp + (size_t)b * bb + d_offset(t), 0);
        tl_dequantize_row(t, tmp, bq, cols); /* -dmin * mn */
        for (int i = 0; i < cols; i++)
            tm[i] = fabs((double)a[i]) + fabs((double)bq[i]);
    }
    free(tmp);
    free(a);
    free(bq);
}

/* into caller-owned bytes p (rows * row_bytes) */
static void make_mat_at(mat *w, tl_dtype t, int wp, int rows, int cols, unsigned char *p)
{
    size_t rb = tl_dtype_row_bytes(t, cols), bb = block_bytes(t);
    int nb = cols / TL_QK_K;
    for (int r = 0; r < rows; r++)
        for (int b = 0; b < nb; b++)
            fill_block(t, wp, p + (size_t)r * rb + (size_t)b * bb, r, b);
    w->m = (tl_matrix){t, p, rows, cols};
    w->mem = NULL;
    derive(w);
}

static void make_mat(mat *w, tl_dtype t, int wp, int rows, int cols)
{
    size_t bytes = tl_dtype_row_bytes(t, cols) * (size_t)rows;
    unsigned char *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    make_mat_at(w, t, wp, rows, cols, p);
    w->mem = p;
}

static void free_mat(mat *w)
{
    free(w->mem);
    free(w->deq);
    free(w->tm);
}

/* ---- activations -------------------------------------------------------- */

enum {
    AP_RANDOM,  /* uniform [-1, 1], a few x8 */
    AP_POSMAX,  /* all +M: q = 127 everywhere */
    AP_NEGMAX,  /* all -M: q = -127 everywhere */
    AP_ALT,     /* +M, -M, +M, ... */
    AP_ALT16,   /* signs alternating by sub-block of 16 */
    AP_ZERO,    /* all zero: d = 0 */
    AP_HOT,     /* one value in sub-block `param` (of 16), all else zero */
    AP_HOTNOISE,/* the same over small noise */
    AP_TINY,    /* random * 1e-20 */
    AP_HOLES,   /* random with the first super-block zero and one -M per block */
    AP_COUNT
};
static const char *ap_name[] = {"random", "+max", "-max", "alternating", "alternating-16",
                                "zero", "hot", "hot+noise", "tiny", "holes"};
#define AM 3.5f

static void make_x(float *x, int cols, int ap, int param)
{
    int ng = cols / 16;
    for (int i = 0; i < cols; i++) {
        float v = 0.0f;
        switch (ap) {
        case AP_RANDOM: v = unif() * (i % 61 == 7 ? 8.0f : 1.0f); break;
        case AP_POSMAX: v = AM; break;
        case AP_NEGMAX: v = -AM; break;
        case AP_ALT: v = i % 2 ? -AM : AM; break;
        case AP_ALT16: v = (i / 16) % 2 ? -AM : AM; break;
        case AP_ZERO: v = 0.0f; break;
        case AP_HOT: v = 0.0f; break;
        case AP_HOTNOISE: v = unif() * 0.01f; break;
        case AP_TINY: v = unif() * 1e-20f; break;
        case AP_HOLES: v = i < TL_QK_K ? 0.0f : unif() * 0.7f; break;
        }
        x[i] = v;
    }
    if (ap == AP_HOT || ap == AP_HOTNOISE) {
        int g = ((param % ng) + ng) % ng;
        x[16 * g + (g * 7) % 16] = g % 2 ? -AM : AM;
    }
    if (ap == AP_HOLES)
        for (int b = TL_QK_K; b < cols; b += TL_QK_K)
            x[b + (b / TL_QK_K * 37) % TL_QK_K] = -AM;
}

typedef struct qact {
    int8_t *q;
    float *d;
    int16_t *bs;
    tl_q8k_act a;
} qact;

static void quant_into(const float *x, int T, int cols, int8_t *q, float *d, int16_t *bs, qact *qa)
{
    for (int t = 0; t < T; t++)
        tl_quantize_act_q8k(x + (size_t)t * (size_t)cols, cols, q + (size_t)t * (size_t)cols,
                            d + (size_t)t * (size_t)(cols / TL_QK_K),
                            bs + (size_t)t * (size_t)(cols / 16));
    qa->q = q;
    qa->d = d;
    qa->bs = bs;
    qa->a = (tl_q8k_act){q, d, bs};
}

static void quant(const float *x, int T, int cols, qact *qa)
{
    quant_into(x, T, cols, malloc((size_t)T * (size_t)cols),
               malloc((size_t)T * (size_t)(cols / TL_QK_K) * sizeof(float)),
               malloc((size_t)T * (size_t)(cols / 16) * sizeof(int16_t)), qa);
}

static void free_qact(qact *qa)
{
    free(qa->q);
    free(qa->d);
    free(qa->bs);
}

/* ---- the checks --------------------------------------------------------- */

#define SENT 0x7fc0deadu
static void fill_sent(float *o, size_t n)
{
    uint32_t s = SENT;
    for (size_t i = 0; i < n; i++)
        memcpy(o + i, &s, 4);
}
static int is_sent(const float *o)
{
    uint32_t u;
    memcpy(&u, o, 4);
    return u == SENT;
}

/* bitwise differences of the SIMD copies from the scalar reference (the
 * header says the copies give the same floats; the bound is what fails) */
static long bit_diffs[NKERNELS][NKTYPES], compared[NKERNELS][NKTYPES];
static double worst_ref[NKERNELS][NKTYPES]; /* largest |copy - scalar| / bound */
static int type_index(tl_dtype t)
{
    for (int i = 0; i < NKTYPES; i++)
        if (ktypes[i] == t)
            return i;
    return 0;
}

enum { SPLIT_SOME, SPLIT_ALL };

/* one matrix, T tokens of float activations x and their quantisation */
static void check(const char *label, const mat *w, const float *x, const qact *qa, int T,
                  int stride, int split_mode, int cancel)
{
    tl_dtype t = w->m.type;
    int rows = w->m.rows, cols = w->m.cols, nb = cols / TL_QK_K;
    size_t n = (size_t)T * (size_t)stride;
    float *full[NKERNELS] = {0};
    float *buf = malloc(n * sizeof *buf);

    for (int k = 0; k < nkernels(); k++) {
        if (!kernel_usable(k))
            continue;
        full[k] = malloc(n * sizeof(float));
        fill_sent(full[k], n);
        int did = run_kernel(k, &w->m, &qa->a, T, full[k], stride, 0, rows);
        if (k >= K_DIRECT) {
            if (!has_multirow_copy(t)) {
                if (did)
                    report("%s %s: %s returned 1 for a type without a multi-row copy",
                           tl_dtype_name(t), label, kernel_name(k));
                for (size_t i = 0; i < n; i++)
                    if (!is_sent(full[k] + i)) {
                        report("%s %s: %s declined but wrote out[%zu]",
                               tl_dtype_name(t), label, kernel_name(k), i);
                        break;
                    }
                free(full[k]);
                full[k] = NULL;
                continue;
            }
            if (!did) {
                if (direct_expected(k))
                    report("%s %s: %s declined on a CPU at its level",
                           tl_dtype_name(t), label, kernel_name(k));
                free(full[k]);
                full[k] = NULL;
                continue;
            }
        }
        for (int tk = 0; tk < T; tk++)
            for (int c = 0; c < stride; c++) {
                const float *o = full[k] + (size_t)tk * (size_t)stride + (size_t)c;
                if (c >= rows && !is_sent(o))
                    report("%s %s rows=%d cols=%d T=%d: %s wrote out[%d * %d + %d], past the rows",
                           tl_dtype_name(t), label, rows, cols, T, kernel_name(k), tk, stride, c);
                if (c < rows && !isfinite(*o))
                    report("%s %s rows=%d cols=%d T=%d: %s row %d token %d not finite (%g)",
                           tl_dtype_name(t), label, rows, cols, T, kernel_name(k), c, tk,
                           (double)*o);
            }
    }

    /* values */
    for (int r = 0; r < rows; r++) {
        const float *wr = w->deq + (size_t)r * (size_t)cols;
        const double *tm = w->tm + (size_t)r * (size_t)cols;
        for (int tk = 0; tk < T; tk++) {
            const float *xt = x + (size_t)tk * (size_t)cols;
            const int8_t *qt = qa->q + (size_t)tk * (size_t)cols;
            const float *dt = qa->d + (size_t)tk * (size_t)nb;
            double expect = 0, exact = 0, mag = 0, tmag = 0, bound = 0;
            for (int b = 0; b < nb; b++) {
                float amax = 0.0f;
                for (int j = b * TL_QK_K; j < (b + 1) * TL_QK_K; j++)
                    amax = fmaxf(amax, fabsf(xt[j]));
                double half = (double)amax / 254.0;
                for (int j = b * TL_QK_K; j < (b + 1) * TL_QK_K; j++) {
                    double wv = (double)wr[j];
                    expect += wv * (double)qt[j] * (double)dt[b];
                    exact += wv * (double)xt[j];
                    mag += fabs(wv) * (fabs((double)xt[j]) + half);
                    tmag += tm[j] * (fabs((double)xt[j]) + half);
                    bound += fabs(wv) * half;
                }
            }
            size_t o = (size_t)tk * (size_t)stride + (size_t)r;
            double ref = (double)full[TL_ISA_SCALAR][o];
            double tol_ref = 1e-5 * (cancel ? tmag : mag) + 1e-37;
            double tol_exp = 1e-5 * tmag + 1e-37;
            if (fabs(ref - exact) > 1.001 * bound + tol_exp)
                report("%s %s rows=%d cols=%d T=%d row %d token %d: scalar %.9g vs float-x product "
                       "%.9g, more than the activation-rounding bound %g apart",
                       tl_dtype_name(t), label, rows, cols, T, r, tk, ref, exact,
                       1.001 * bound + tol_exp);
            for (int k = 0; k < nkernels(); k++) {
                if (!full[k])
                    continue;
                double got = (double)full[k][o];
                if (!(fabs(got - expect) <= tol_exp))
                    report("%s %s rows=%d cols=%d T=%d row %d token %d: %s gives %.9g, expected "
                           "%.9g (sum w*q*d in double; tolerance %g)",
                           tl_dtype_name(t), label, rows, cols, T, r, tk, kernel_name(k), got,
                           expect, tol_exp);
                if (k != TL_ISA_SCALAR) {
                    if (!(fabs(got - ref) <= tol_ref))
                        report("%s %s rows=%d cols=%d T=%d row %d token %d: %s gives %.9g, scalar "
                               "reference %.9g (> %g apart)",
                               tl_dtype_name(t), label, rows, cols, T, r, tk, kernel_name(k), got,
                               ref, tol_ref);
                    compared[k][type_index(t)]++;
                    worst_ref[k][type_index(t)] =
                        fmax(worst_ref[k][type_index(t)], fabs(got - ref) / tol_ref);
                    if (memcmp(full[k] + o, full[TL_ISA_SCALAR] + o, 4) != 0)
                        bit_diffs[k][type_index(t)]++;
                }
            }
        }
    }

    /* splits: every piece of the same kernel gives the full call's floats,
     * and writes nothing outside its rows */
    for (int k = 0; k < nkernels(); k++) {
        if (!full[k])
            continue;
        /* [r0, r1) alone over a sentinel buffer */
        for (int r0 = 0; r0 <= rows; r0++)
            for (int r1 = r0; r1 <= rows; r1++) {
                if (split_mode == SPLIT_SOME && !(r1 == r0 + 1 || (r0 == 0 && r1 == rows) ||
                                                  r0 == r1 || (r0 == rows / 3 && r1 == rows)))
                    continue;
                fill_sent(buf, n);
                run_kernel(k, &w->m, &qa->a, T, buf, stride, r0, r1);
                for (int tk = 0; tk < T; tk++)
                    for (int c = 0; c < stride; c++) {
                        size_t o = (size_t)tk * (size_t)stride + (size_t)c;
                        if (c >= r0 && c < r1) {
                            if (memcmp(buf + o, full[k] + o, 4) != 0)
                                report("%s %s rows=%d cols=%d T=%d: %s over [%d, %d) gives row %d "
                                       "token %d %.9g, over [0, %d) %.9g",
                                       tl_dtype_name(t), label, rows, cols, T, kernel_name(k), r0,
                                       r1, c, tk, (double)buf[o], rows, (double)full[k][o]);
                        } else if (!is_sent(buf + o)) {
                            report("%s %s rows=%d cols=%d T=%d stride=%d: %s over [%d, %d) wrote "
                                   "out[%d * %d + %d]",
                                   tl_dtype_name(t), label, rows, cols, T, stride, kernel_name(k),
                                   r0, r1, tk, stride, c);
                        }
                    }
            }
        /* uneven pieces covering all rows */
        int cuts[8], nc = 0;
        cuts[nc++] = 0;
        for (int c = 1 + (int)(next() % 3); c < rows && nc < 7; c += 1 + (int)(next() % 5))
            cuts[nc++] = c;
        cuts[nc++] = rows;
        fill_sent(buf, n);
        for (int p = 0; p + 1 < nc; p++)
            run_kernel(k, &w->m, &qa->a, T, buf, stride, cuts[p], cuts[p + 1]);
        if (memcmp(buf, full[k], n * sizeof *buf) != 0)
            report("%s %s rows=%d cols=%d T=%d: %s in %d pieces differs from one call",
                   tl_dtype_name(t), label, rows, cols, T, kernel_name(k), nc - 1);
    }
    for (int k = 0; k < nkernels(); k++)
        free(full[k]);
    free(buf);
}

/* ---- tests -------------------------------------------------------------- */

/* this file's packing helpers are the headers' unpacking read backwards */
static void test_packing_helpers(void **state)
{
    (void)state;
    for (int rep = 0; rep < 200; rep++) {
        int sc[8], mn[8], v[16], got[16];
        uint8_t s[12];
        for (int k = 0; k < 8; k++)
            sc[k] = (int)(next() % 64), mn[k] = (int)(next() % 64);
        pack_k4(s, sc, mn);
        uint32_t words[4];
        tl_k4_scale_words(s, words);
        for (int k = 0; k < 8; k++) {
            int a, b;
            tl_k4_scale_min(s, k, &a, &b);
            assert_int_equal(a, sc[k]);
            assert_int_equal(b, mn[k]);
            assert_int_equal((words[k / 4] >> (8 * (k % 4))) & 0xff, (uint32_t)sc[k]);
            assert_int_equal((words[2 + k / 4] >> (8 * (k % 4))) & 0xff, (uint32_t)mn[k]);
        }
        for (int k = 0; k < 16; k++)
            v[k] = (int)(next() % 64);
        pack_q3(s, v);
        tl_q3k_scales(s, got);
        for (int k = 0; k < 16; k++)
            assert_int_equal(got[k], v[k]);
    }
}

static void test_quantize_act_q8k(void **state)
{
    (void)state;
    begin_test();
    int cols = 1024;
    float *x = malloc((size_t)cols * sizeof *x);
    int8_t *q = malloc((size_t)cols);
    float d[4];
    int16_t bs[64];
    for (int ap = 0; ap < AP_COUNT; ap++)
        for (int param = 0; param < (ap == AP_HOT || ap == AP_HOTNOISE ? cols / 16 : 1); param++) {
            make_x(x, cols, ap, param);
            if (ap == AP_RANDOM && param == 0)
                x[300] = -9.0f; /* a negative value the largest in its block */
            tl_quantize_act_q8k(x, cols, q, d, bs);
            for (int b = 0; b < cols / TL_QK_K; b++) {
                float amax = 0.0f;
                for (int j = 0; j < TL_QK_K; j++)
                    amax = fmaxf(amax, fabsf(x[b * TL_QK_K + j]));
                double want = (double)amax / 127.0;
                if (!(fabs((double)d[b] - want) <= 1e-6 * want))
                    report("q8k %s/%d block %d: d = %.9g, max|x| / 127 = %.9g", ap_name[ap], param,
                           b, (double)d[b], want);
                for (int j = 0; j < TL_QK_K; j++) {
                    int i = b * TL_QK_K + j;
                    if (q[i] == INT8_MIN)
                        report("q8k %s/%d: q[%d] = %d outside [-127, 127]", ap_name[ap], param, i,
                               q[i]);
                    if (amax == 0.0f) {
                        if (q[i] != 0)
                            report("q8k %s/%d: zero block, q[%d] = %d", ap_name[ap], param, i, q[i]);
                        continue;
                    }
                    double r = (double)x[i] / want;
                    if (fabs((double)q[i] - r) > 0.5 + 1e-4)
                        report("q8k %s/%d: q[%d] = %d, x / d = %.6f (not the nearest)", ap_name[ap],
                               param, i, q[i], r);
                    if (fabsf(x[i]) == amax && q[i] != (x[i] > 0 ? 127 : -127))
                        report("q8k %s/%d: q[%d] = %d at the block's max |x|", ap_name[ap], param, i,
                               q[i]);
                }
            }
            for (int g = 0; g < cols / 16; g++) {
                int s = 0;
                for (int j = 0; j < 16; j++)
                    s += q[16 * g + j];
                if (bs[g] != s)
                    report("q8k %s/%d: bsums[%d] = %d, the sum of its 16 q is %d", ap_name[ap],
                           param, g, bs[g], s);
            }
        }
    free(x);
    free(q);
    end_test("tl_quantize_act_q8k");
}

/* every weight pattern against every activation pattern, one type */
static void blocks_for(tl_dtype t)
{
    begin_test();
    int rows = 6, cols = 512, T = 3, stride = rows + 3;
    float *x = malloc((size_t)T * (size_t)cols * sizeof *x);
    for (int wp = 0; wp < WP_MIXED + 1; wp++) {
        mat w;
        make_mat(&w, t, wp, rows, cols);
        for (int ap = 0; ap < AP_COUNT; ap++) {
            for (int tk = 0; tk < T; tk++) /* each token another pattern */
                make_x(x + (size_t)tk * (size_t)cols, cols, tk == 0 ? ap : (ap + 3 * tk) % AP_COUNT,
                       5 * ap + 11 * tk);
            qact qa;
            quant(x, T, cols, &qa);
            char label[96];
            snprintf(label, sizeof label, "weights %s, activations %s", wp_name[wp], ap_name[ap]);
            check(label, &w, x, &qa, T, stride, SPLIT_SOME, 0);
            free_qact(&qa);
        }
        free_mat(&w);
    }
    free(x);
    end_test(tl_dtype_name(t));
}
static void test_blocks_q2_k(void **s) { (void)s; blocks_for(TL_DTYPE_Q2_K); }
static void test_blocks_q3_k(void **s) { (void)s; blocks_for(TL_DTYPE_Q3_K); }
static void test_blocks_q4_k(void **s) { (void)s; blocks_for(TL_DTYPE_Q4_K); }
static void test_blocks_q5_k(void **s) { (void)s; blocks_for(TL_DTYPE_Q5_K); }
static void test_blocks_q6_k(void **s) { (void)s; blocks_for(TL_DTYPE_Q6_K); }

/* a single hot activation in each 16-value sub-block in turn (so each of
 * the 8 Q4_K/Q5_K sub-blocks of 32 twice), over weights whose every
 * sub-block has its own scale and min: a scale, min or bsum taken from the
 * wrong sub-block moves the result by a whole term */
static void test_hot_sub_blocks(void **state)
{
    (void)state;
    begin_test();
    static const int wps[] = {WP_DISTINCT, WP_RANDOM, WP_EXTREME};
    static const int colss[] = {512, 768};
    for (int ti = 0; ti < NKTYPES; ti++)
        for (size_t wi = 0; wi < sizeof wps / sizeof *wps; wi++)
            for (size_t ci = 0; ci < sizeof colss / sizeof *colss; ci++) {
                int cols = colss[ci], rows = 5, T = 2, ng = cols / 16;
                mat w;
                make_mat(&w, ktypes[ti], wps[wi], rows, cols);
                float *x = malloc((size_t)T * (size_t)cols * sizeof *x);
                for (int g = 0; g < ng; g++) {
                    make_x(x, cols, AP_HOT, g);
                    make_x(x + cols, cols, AP_HOTNOISE, ng - 1 - g);
                    qact qa;
                    quant(x, T, cols, &qa);
                    char label[96];
                    snprintf(label, sizeof label, "weights %s, hot in sub-block %d of 16 (and %d)",
                             wp_name[wps[wi]], g, ng - 1 - g);
                    check(label, &w, x, &qa, T, rows + 1, SPLIT_SOME, 0);
                    free_qact(&qa);
                }
                free(x);
                free_mat(&w);
            }
    end_test("hot sub-blocks");
}

/* rows 1..9, 13 and 17 with every [r0, r1) (empty ones too), starting and
 * ending at every offset mod 4 and mod 8; heterogeneous rows so that a row
 * taken from the wrong place in a pass shows */
static void test_row_ranges(void **state)
{
    (void)state;
    begin_test();
    static const int rowss[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 17};
    for (int ti = 0; ti < NKTYPES; ti++)
        for (size_t ri = 0; ri < sizeof rowss / sizeof *rowss; ri++) {
            int rows = rowss[ri], cols = ri % 2 ? 768 : 256, T = 1 + (rows + ti) % 5;
            int stride = rows + 1 + rows % 4;
            mat w;
            make_mat(&w, ktypes[ti], WP_MIXED, rows, cols);
            float *x = malloc((size_t)T * (size_t)cols * sizeof *x);
            for (int tk = 0; tk < T; tk++)
                make_x(x + (size_t)tk * (size_t)cols, cols, (tk * 3 + rows) % AP_COUNT, tk + rows);
            qact qa;
            quant(x, T, cols, &qa);
            check("mixed rows, every range", &w, x, &qa, T, stride, SPLIT_ALL, 0);
            free_qact(&qa);
            free(x);
            free_mat(&w);
        }
    end_test("row ranges");
}

/* cols 256, 512, 768, 2048 x T 1..5 x a few row counts, out_stride > rows */
static void test_shapes(void **state)
{
    (void)state;
    begin_test();
    static const int colss[] = {256, 512, 768, 2048};
    static const int rowss[] = {1, 3, 4, 5, 8, 9};
    for (int ti = 0; ti < NKTYPES; ti++)
        for (size_t ci = 0; ci < sizeof colss / sizeof *colss; ci++)
            for (size_t ri = 0; ri < sizeof rowss / sizeof *rowss; ri++) {
                int rows = rowss[ri], cols = colss[ci];
                mat w;
                make_mat(&w, ktypes[ti], WP_MIXED, rows, cols);
                for (int T = 1; T <= 5; T++) {
                    float *x = malloc((size_t)T * (size_t)cols * sizeof *x);
                    for (int tk = 0; tk < T; tk++)
                        make_x(x + (size_t)tk * (size_t)cols, cols,
                               tk % 2 ? AP_RANDOM : (int)(ri + ci + (size_t)tk) % AP_COUNT, tk * 13);
                    qact qa;
                    quant(x, T, cols, &qa);
                    check("mixed rows, shapes", &w, x, &qa, T, rows + 2 + T % 3, SPLIT_SOME, 0);
                    free_qact(&qa);
                    free(x);
                }
                free_mat(&w);
            }
    end_test("shapes");
}

/* every weight exactly 0 as the sum of two equal large terms: the result
 * must be (near) 0; the error allowed is that of the terms, not of |w| */
static void test_cancellation(void **state)
{
    (void)state;
    begin_test();
    static const tl_dtype ts[] = {TL_DTYPE_Q2_K, TL_DTYPE_Q4_K, TL_DTYPE_Q5_K};
    for (size_t ti = 0; ti < sizeof ts / sizeof *ts; ti++) {
        int rows = 5, cols = 768, T = 4;
        mat w;
        make_mat(&w, ts[ti], WP_CANCEL, rows, cols);
        for (size_t i = 0; i < (size_t)rows * (size_t)cols; i++)
            assert_true(w.deq[i] == 0.0f);
        float *x = malloc((size_t)T * (size_t)cols * sizeof *x);
        for (int ap = 0; ap < AP_COUNT; ap++) {
            for (int tk = 0; tk < T; tk++)
                make_x(x + (size_t)tk * (size_t)cols, cols, (ap + tk) % AP_COUNT, ap * 3 + tk);
            qact qa;
            quant(x, T, cols, &qa);
            char label[64];
            snprintf(label, sizeof label, "cancelling terms, activations %s", ap_name[ap]);
            check(label, &w, x, &qa, T, rows, SPLIT_SOME, 1);
            /* informational: how far from 0 the scalar result is */
            float *o = calloc((size_t)T * (size_t)rows, sizeof *o);
            tl_matmul_quant_isa(TL_ISA_SCALAR, &w.m, &qa.a, T, o, rows, 0, rows);
            float worst = 0.0f;
            for (int i = 0; i < T * rows; i++)
                worst = fmaxf(worst, fabsf(o[i]));
            if (ap == AP_RANDOM || ap == AP_POSMAX)
                printf("%s all-zero weights, activations %s: scalar |out| up to %g\n",
                       tl_dtype_name(ts[ti]), ap_name[ap], (double)worst);
            free(o);
            free_qact(&qa);
        }
        free(x);
        free_mat(&w);
    }
    end_test("cancellation");
}

/* The multi-row copies' own contract: each takes Q4_K, Q5_K and Q6_K on a
 * CPU at its level and declines the other K types without writing */
static void test_k_direct(void **state)
{
    (void)state;
    begin_test();
    int rows = 7, cols = 256, T = 2, stride = 10;
    for (int k = K_DIRECT; k < NKERNELS; k++)
        for (int ti = 0; ti < NKTYPES; ti++) {
            tl_dtype t = ktypes[ti];
            mat w;
            make_mat(&w, t, WP_RANDOM, rows, cols);
            float *x = malloc((size_t)T * (size_t)cols * sizeof *x);
            make_x(x, cols, AP_RANDOM, 0);
            make_x(x + cols, cols, AP_ALT, 0);
            qact qa;
            quant(x, T, cols, &qa);
            float *o = malloc((size_t)T * (size_t)stride * sizeof *o);
            fill_sent(o, (size_t)T * (size_t)stride);
            int did = run_kernel(k, &w.m, &qa.a, T, o, stride, 2, 6);
            if (has_multirow_copy(t) && direct_expected(k) && !did)
                report("%s: %s declined on a CPU at its level", tl_dtype_name(t), kernel_name(k));
            if (!has_multirow_copy(t)) {
                if (did)
                    report("%s: %s took a type it has no copy of", tl_dtype_name(t), kernel_name(k));
                for (int i = 0; i < T * stride; i++)
                    if (!is_sent(o + i)) {
                        report("%s: %s declined but wrote out[%d]", tl_dtype_name(t), kernel_name(k), i);
                        break;
                    }
            }
            free(o);
            free_qact(&qa);
            free(x);
            free_mat(&w);
        }
    end_test("multi-row copies, direct");
}

/* ---- memory against PROT_NONE pages ------------------------------------ */

typedef struct guarded {
    unsigned char *base;
    size_t len;
} guarded;

/* `size` usable bytes between two PROT_NONE pages; tail: the bytes end
 * where the upper guard begins (else they start at the lower one's end),
 * shifted by `skew` bytes away from that guard */
static unsigned char *guarded_alloc(guarded *g, size_t size, int tail, size_t skew)
{
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    size_t body = (size + skew + pg - 1) / pg * pg;
    g->len = body + 2 * pg;
    g->base = mmap(NULL, g->len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(g->base != MAP_FAILED);
    assert_int_equal(mprotect(g->base + pg, body, PROT_READ | PROT_WRITE), 0);
    return tail ? g->base + pg + body - size - skew : g->base + pg + skew;
}
static void guarded_free(guarded *g) { munmap(g->base, g->len); }

static void guard_case(tl_dtype t, int rows, int cols, int T, int tail, size_t wskew, size_t qskew)
{
    size_t wbytes = tl_dtype_row_bytes(t, cols) * (size_t)rows;
    guarded gw, gq, gd, gb;
    unsigned char *wp = guarded_alloc(&gw, wbytes, tail, wskew);
    mat w;
    make_mat_at(&w, t, WP_MIXED, rows, cols, wp);
    float *x = malloc((size_t)T * (size_t)cols * sizeof *x);
    for (int tk = 0; tk < T; tk++)
        make_x(x + (size_t)tk * (size_t)cols, cols, tk % 2 ? AP_ALT : AP_RANDOM, tk);
    size_t nq = (size_t)T * (size_t)cols, nd = (size_t)T * (size_t)(cols / TL_QK_K),
           nbs = (size_t)T * (size_t)(cols / 16);
    int8_t *q = (int8_t *)guarded_alloc(&gq, nq, tail, qskew);
    float *d = (float *)(void *)guarded_alloc(&gd, nd * sizeof(float), tail, 0);
    int16_t *bs = (int16_t *)(void *)guarded_alloc(&gb, nbs * sizeof(int16_t), tail, 0);
    qact qa;
    quant_into(x, T, cols, q, d, bs, &qa);
    char label[96];
    snprintf(label, sizeof label, "guard pages %s, weights +%zu, q +%zu", tail ? "after" : "before",
             wskew, qskew);
    check(label, &w, x, &qa, T, rows + 1, rows <= 9 ? SPLIT_ALL : SPLIT_SOME, 0);
    free(x);
    free(w.deq);
    free(w.tm);
    guarded_free(&gw);
    guarded_free(&gq);
    guarded_free(&gd);
    guarded_free(&gb);
}

/* a four-row pass must not read rows past the matrix (nor before it), and
 * the kernels must take rows at any 2-byte alignment (a Q6_K row is 210
 * bytes a block) and int8 activations at any address */
static void test_guard_pages(void **state)
{
    (void)state;
    begin_test();
    for (int ti = 0; ti < NKTYPES; ti++)
        for (int rows = 1; rows <= 9; rows++)
            for (int tail = 0; tail <= 1; tail++) {
                int cols = rows % 3 == 0 ? 768 : 256, T = 1 + rows % 3;
                guard_case(ktypes[ti], rows, cols, T, tail, 0, 0);
                guard_case(ktypes[ti], rows, cols, T, tail, 2 + 4 * (size_t)(rows % 4),
                           1 + (size_t)rows % 7);
            }
    end_test("guard pages");
}

static void test_summary(void **state)
{
    (void)state;
    for (int k = 1; k < nkernels(); k++)
        for (int ti = 0; ti < NKTYPES; ti++)
            if (compared[k][ti])
                printf("%-4s %-18s: %ld of %ld results not bit-identical to the scalar copy, "
                       "worst %.4f of the bound\n",
                       tl_dtype_name(ktypes[ti]), kernel_name(k), bit_diffs[k][ti], compared[k][ti],
                       worst_ref[k][ti]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_packing_helpers),
        cmocka_unit_test(test_quantize_act_q8k),
        cmocka_unit_test(test_k_direct),
        cmocka_unit_test(test_blocks_q2_k),
        cmocka_unit_test(test_blocks_q3_k),
        cmocka_unit_test(test_blocks_q4_k),
        cmocka_unit_test(test_blocks_q5_k),
        cmocka_unit_test(test_blocks_q6_k),
        cmocka_unit_test(test_hot_sub_blocks),
        cmocka_unit_test(test_row_ranges),
        cmocka_unit_test(test_shapes),
        cmocka_unit_test(test_cancellation),
        cmocka_unit_test(test_guard_pages),
        cmocka_unit_test(test_summary),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
