/* The products with every quantised weight type (matmul_quant.c):
 *  - every ISA copy of each integer kernel agrees with the scalar reference
 *    on random block bytes, at odd row counts and widths, 1-5 tokens:
 *    exactly for the legacy types (integer block sums are exact and the
 *    float steps are the same code), and for the K types, whose SIMD copies
 *    add the blocks' float terms in eight lanes, within
 *    1e-5 * sum_i |w_i| (|x_i| + d_b(i) / 2) (float summation of a few
 *    dozen terms in another order: a few float epsilons of that magnitude);
 *  - tl_matmul / tl_matvec_multi through the thread pool (1, 2, 3 threads)
 *    give the single-thread reference's floats exactly (rows are split,
 *    never a row's sum);
 *  - the quantised product agrees with the product over the dequantised
 *    matrix (dequant_ref.c) within the activation quantisation's bound:
 *    |sum_i w_i (x_i - x^_i)| <= sum_i |w_i| * d_b(i) / 2, with d_b the
 *    activation block's scale (max|x| / 127 per 32 or 256 values) and
 *    rounding to nearest, plus float summation slack (ADR 0024). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cpu.h"
#include "matmul_q8_0.h"
#include "matmul_quant.h"
#include "ops.h"
#include "quant_blocks.h"
#include "thread_pool.h"

static uint64_t rng = 88172645463325252ull;
static uint32_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float unif(void) { return (float)(next() & 0xffffff) / 16777216.0f * 2.0f - 1.0f; }

static const tl_dtype types[] = {TL_DTYPE_Q4_0, TL_DTYPE_Q4_1, TL_DTYPE_Q5_0, TL_DTYPE_Q5_1,
                                 TL_DTYPE_Q2_K, TL_DTYPE_Q3_K, TL_DTYPE_Q4_K, TL_DTYPE_Q5_K,
                                 TL_DTYPE_Q6_K};

/* Byte offsets of a block's fp16 fields (scales and mins). */
static void half_fields(tl_dtype t, int off[2], int *n)
{
    *n = 1;
    off[0] = 0;
    switch (t) {
    case TL_DTYPE_Q4_1: case TL_DTYPE_Q5_1: case TL_DTYPE_Q4_K: case TL_DTYPE_Q5_K:
        *n = 2, off[1] = 2; break;
    case TL_DTYPE_Q2_K: *n = 2, off[0] = offsetof(tl_block_q2_k, d), off[1] = offsetof(tl_block_q2_k, dmin); break;
    case TL_DTYPE_Q3_K: off[0] = offsetof(tl_block_q3_k, d); break;
    case TL_DTYPE_Q6_K: off[0] = offsetof(tl_block_q6_k, d); break;
    default: break;
    }
}

/* rows x cols of random block bytes with finite scales of ordinary size */
static unsigned char *random_matrix(tl_dtype t, int rows, int cols, tl_matrix *m)
{
    size_t rb = tl_dtype_row_bytes(t, cols), bb = tl_dtype_row_bytes(t, tl_dtype_block_values(t));
    unsigned char *p = malloc(rb * (size_t)rows);
    for (size_t i = 0; i < rb * (size_t)rows; i++)
        p[i] = (unsigned char)next();
    int off[2], n;
    half_fields(t, off, &n);
    for (size_t b = 0; b < rb * (size_t)rows / bb; b++)
        for (int k = 0; k < n; k++) {
            uint16_t h = tl_fp32_to_fp16(unif() * 0.05f);
            memcpy(p + b * bb + (size_t)off[k], &h, 2);
        }
    *m = (tl_matrix){t, p, rows, cols};
    return p;
}

typedef struct acts {
    int8_t *q;
    float *scale;
    int32_t *sum;
} acts;

static void quantize(tl_dtype t, const float *x, int T, int cols, acts *a, void *act_out)
{
    a->q = malloc((size_t)T * (size_t)cols);
    a->scale = malloc((size_t)T * (size_t)(cols / 32) * sizeof(float));
    a->sum = malloc((size_t)T * (size_t)(cols / 32) * sizeof(int32_t));
    for (int i = 0; i < T; i++) {
        if (tl_quant_act_kind(t) == TL_ACT_Q8K)
            tl_quantize_act_q8k(x + (size_t)i * (size_t)cols, cols, a->q + (size_t)i * (size_t)cols,
                                a->scale + (size_t)i * (size_t)(cols / 256),
                                (int16_t *)(void *)a->sum + (size_t)i * (size_t)(cols / 16));
        else
            tl_quantize_act_q8(x + (size_t)i * (size_t)cols, cols, a->q + (size_t)i * (size_t)cols,
                               a->scale + (size_t)i * (size_t)(cols / 32),
                               a->sum + (size_t)i * (size_t)(cols / 32));
    }
    if (tl_quant_act_kind(t) == TL_ACT_Q8K)
        *(tl_q8k_act *)act_out = (tl_q8k_act){a->q, a->scale, (const int16_t *)(void *)a->sum};
    else
        *(tl_q8_act *)act_out = (tl_q8_act){a->q, a->scale, a->sum};
}

static void free_acts(acts *a)
{
    free(a->q);
    free(a->scale);
    free(a->sum);
}

static float *random_x(int T, int cols)
{
    float *x = malloc((size_t)T * (size_t)cols * sizeof *x);
    for (int i = 0; i < T * cols; i++)
        x[i] = unif() * (i % 97 == 0 ? 8.0f : 1.0f);
    for (int i = 0; i < cols && i < 32; i++)
        x[i] = 0.0f; /* an all-zero activation block */
    return x;
}

/* sum_i |w_i| (|x_i| + d_b(i) / 2) over row r, with Q8_K's blocks of 256 */
static double magnitude(const tl_matrix *w, int r, const float *x)
{
    float *row = malloc((size_t)w->cols * sizeof *row);
    tl_matrix_row_f32(w, r, row);
    double m = 0.0;
    for (int b = 0; b < w->cols; b += 256) {
        float amax = 0.0f;
        for (int j = b; j < b + 256; j++)
            amax = fmaxf(amax, fabsf(x[j]));
        for (int j = b; j < b + 256; j++)
            m += fabs((double)row[j]) * (fabs((double)x[j]) + (double)amax / 254.0);
    }
    free(row);
    return m;
}

static void test_isa_copies_equal_reference(void **state)
{
    (void)state;
    static const int shapes[][3] = {{37, 256, 1}, {19, 768, 3}, {5, 1280, 5}, {33, 512, 2}};
    for (size_t k = 0; k < sizeof types / sizeof *types; k++)
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
            tl_dtype t = types[k];
            int rows = shapes[s][0], cols = shapes[s][1], T = shapes[s][2];
            if (tl_quant_act_kind(t) == TL_ACT_Q8)
                cols += 32 * 3; /* odd numbers of legacy blocks too */
            tl_matrix w;
            unsigned char *wp = random_matrix(t, rows, cols, &w);
            float *x = random_x(T, cols);
            acts a;
            union { tl_q8_act q8; tl_q8k_act q8k; } act;
            quantize(t, x, T, cols, &a, &act);
            float *ref = calloc((size_t)T * (size_t)rows, sizeof *ref);
            float *got = calloc((size_t)T * (size_t)rows, sizeof *got);
            tl_matmul_quant_isa(TL_ISA_SCALAR, &w, &act, T, ref, rows, 0, rows);
            for (int isa = TL_ISA_SSE; isa <= TL_ISA_AVX512_VNNI; isa++) {
                memset(got, 0, (size_t)T * (size_t)rows * sizeof *got);
                /* in two uneven pieces, as threads take them */
                tl_matmul_quant_isa((tl_isa)isa, &w, &act, T, got, rows, 0, rows / 3);
                tl_matmul_quant_isa((tl_isa)isa, &w, &act, T, got, rows, rows / 3, rows);
                if (tl_quant_act_kind(t) == TL_ACT_Q8) {
                    if (memcmp(got, ref, (size_t)T * (size_t)rows * sizeof *ref) != 0)
                        fail_msg("%s %dx%d T=%d: %s copy differs from the scalar reference",
                                 tl_dtype_name(t), rows, cols, T, tl_isa_name((tl_isa)isa));
                    continue;
                }
                for (int r = 0; r < rows; r++)
                    for (int i = 0; i < T; i++) {
                        size_t o = (size_t)i * (size_t)rows + (size_t)r;
                        double tol = 1e-5 * magnitude(&w, r, x + (size_t)i * (size_t)cols);
                        if (fabs((double)got[o] - (double)ref[o]) > tol)
                            fail_msg("%s %dx%d T=%d row %d: %s copy %.9g, reference %.9g (> %g apart)",
                                     tl_dtype_name(t), rows, cols, T, r, tl_isa_name((tl_isa)isa),
                                     (double)got[o], (double)ref[o], tol);
                    }
            }
            free(ref);
            free(got);
            free_acts(&a);
            free(x);
            free(wp);
        }
}

static void test_threads_and_bound(void **state)
{
    (void)state;
    int rows = 147, cols = 512, T = 4;
    for (size_t k = 0; k < sizeof types / sizeof *types; k++) {
        tl_dtype t = types[k];
        tl_matrix w;
        unsigned char *wp = random_matrix(t, rows, cols, &w);
        float *x = random_x(T, cols);
        acts a;
        union { tl_q8_act q8; tl_q8k_act q8k; } act;
        quantize(t, x, T, cols, &a, &act);
        float *ref = calloc((size_t)T * (size_t)rows, sizeof *ref);
        float *own = calloc((size_t)T * (size_t)rows, sizeof *own);
        tl_matmul_quant_isa(TL_ISA_SCALAR, &w, &act, T, ref, rows, 0, rows);
        tl_matmul_quant(&w, &act, T, own, rows, 0, rows); /* the running CPU's copy */

        /* through ops.c with 1..3 threads: batched and single-token, equal
         * to one call of the same copy over all rows */
        for (int threads = 1; threads <= 3; threads++) {
            tl_thread_pool *pool;
            assert_int_equal(tl_thread_pool_create(threads, &pool), ILAB_OK);
            tl_act_scratch sc = {malloc((size_t)T * (size_t)cols), malloc((size_t)T * (size_t)cols / 32 * 4),
                                 malloc((size_t)T * (size_t)cols / 32 * 4), (size_t)T * (size_t)cols};
            tl_tensor xt = tl_tensor_view(x, (size_t)T, (size_t)cols), out;
            assert_int_equal(tl_tensor_alloc(&out, (size_t)T, (size_t)rows), ILAB_OK);
            tl_matmul(&out, &xt, &w, &sc, pool);
            assert_memory_equal(out.data, own, (size_t)T * (size_t)rows * sizeof *own);
            for (int i = 0; i < T; i++) {
                float *o = out.data;
                const tl_matrix *wm = &w;
                tl_matvec_multi(&o, &wm, 1, x + (size_t)i * (size_t)cols, &sc, pool);
                assert_memory_equal(o, own + (size_t)i * (size_t)rows, (size_t)rows * sizeof *own);
            }
            tl_tensor_free(&out);
            free(sc.q);
            free(sc.scale);
            free(sc.sum);
            tl_thread_pool_destroy(pool);
        }

        /* against the dequantised matrix, in double */
        int per_act = tl_quant_act_kind(t) == TL_ACT_Q8K ? 256 : 32;
        float *wrow = malloc((size_t)cols * sizeof *wrow);
        double worst = 0.0;
        for (int r = 0; r < rows; r++) {
            tl_matrix_row_f32(&w, r, wrow);
            for (int i = 0; i < T; i++) {
                const float *xi = x + (size_t)i * (size_t)cols;
                double exact = 0.0, bound = 0.0, mag = 0.0;
                for (int b = 0; b < cols; b += per_act) {
                    float amax = 0.0f;
                    for (int j = 0; j < per_act; j++)
                        amax = fmaxf(amax, fabsf(xi[b + j]));
                    for (int j = b; j < b + per_act; j++) {
                        exact += (double)wrow[j] * (double)xi[j];
                        bound += fabs((double)wrow[j]) * (double)amax / 127.0 * 0.5;
                        mag += fabs((double)wrow[j] * (double)xi[j]);
                    }
                }
                double err = fabs((double)ref[(size_t)i * (size_t)rows + (size_t)r] - exact);
                double allowed = 1.001 * bound + 1e-5 * mag + 1e-30;
                if (err > allowed)
                    fail_msg("%s row %d token %d: |quantised - dequantised| = %g > bound %g",
                             tl_dtype_name(t), r, i, err, allowed);
                worst = fmax(worst, err / allowed);
            }
        }
        printf("%-5s quantised vs dequantised product: worst error %.3f of the bound\n",
               tl_dtype_name(t), worst);
        free(wrow);
        free(own);
        free(ref);
        free_acts(&a);
        free(x);
        free(wp);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_isa_copies_equal_reference),
        cmocka_unit_test(test_threads_and_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
