/* torchlike's hot kernels at every instruction-set level this CPU has, each
 * against the scalar reference: odd sizes reach every tail loop, and sums of
 * many terms of both signs expose a dropped or doubled block. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include "ilab_skip.h"

#include "cpu.h"
#include "matmul_f16.h"
#include "matmul_q8_0.h"
#include "matvec_f32.h"
#include "q8_0_r16.h"
#include "weights.h"

static uint64_t rng_state = 88172645463325252ull;

static float uniform(void) /* in [-1, 1) */
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static float *random_floats(size_t n)
{
    float *v = malloc(n * sizeof *v);
    assert_non_null(v);
    for (size_t i = 0; i < n; i++)
        v[i] = uniform();
    return v;
}

static const int sizes[] = {1, 3, 15, 16, 17, 31, 63, 64, 65, 100, 127, 129, 288, 300, 768, 1031};

/* A kernel's output got[T][rows] against the reference's: rows below r0
 * untouched (still 0), the others within `tol` (a NaN never is). `kernel`
 * names the kernel and its level for the message. */
static void check_rows(const char *kernel, int d, const float *got, const float *ref, int T,
                       int rows, int r0, double tol)
{
    for (int t = 0; t < T; t++) {
        for (int r = 0; r < r0; r++)
            assert_true(got[t * rows + r] == 0.0f);
        for (int r = r0; r < rows; r++) {
            float g = got[t * rows + r], want = ref[t * rows + r];
            if (!(fabs((double)g - (double)want) <= tol))
                fail_msg("%s d=%d token %d row %d: %.9g, scalar %.9g", kernel, d, t, r, g, want);
        }
    }
}

/* The tolerance for a sum of terms whose magnitudes add up to `bound`: any
 * order of adding them stays well within it. */
static double reorder_tol(double bound)
{
    return 1e-5 * bound + 1e-6;
}

/* Every level up to the detected one, including the ones the CPU has but the
 * dispatcher would not pick. */
static void test_matvec_f32_levels(void **state)
{
    (void)state;
    int top = (int)tl_cpu_detected();
    print_message("kernels: %s detected; testing every level up to it\n",
                  tl_isa_name((tl_isa)top));
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        int d = sizes[s], rows = 7;
        float *w = random_floats((size_t)rows * (size_t)d), *x = random_floats((size_t)d);
        float ref[7], got[7];
        tl_matvec_f32_isa(TL_ISA_SCALAR, w, x, ref, d, 0, rows);
        double bound = 0; /* |sum| of the terms: any reordering stays well within */
        for (int i = 0; i < d; i++)
            bound += fabs(w[i] * x[i]);
        for (int level = TL_ISA_SSE; level <= top; level++)
            for (int narrow = 0; narrow < (level >= TL_ISA_AVX512 ? 2 : 1); narrow++) {
                tl_cpu_set_f32_stream_256(narrow); /* the AVX-512 levels' two copies */
                memset(got, 0, sizeof got);
                tl_matvec_f32_isa((tl_isa)level, w, x, got, d, 2, rows); /* rows from 2 on */
                tl_cpu_set_f32_stream_256(-1);
                char kernel[64];
                snprintf(kernel, sizeof kernel, "matvec %s%s", tl_isa_name((tl_isa)level),
                         narrow ? " (256-bit)" : "");
                check_rows(kernel, d, got, ref, 1, rows, 2, reorder_tol(bound));
            }
        free(w);
        free(x);
    }
}

static const int block_sizes[] = {32, 64, 96, 288, 352, 768, 2048};
static const int token_counts[] = {1, 2, 3, 4, 5, 9};

/* Each level's kernel on one layout against the scalar reference on the
 * plain layout, for rows [r0, rows); rows below r0 must stay untouched. The
 * integer block sums are exact, so the levels differ only in the order the
 * scaled block sums are added. */
static void check_levels(const char *what, const tl_matrix *w, const tl_q8_act *x, int T,
                         const float *ref, int r0)
{
    int top = (int)tl_cpu_detected(), rows = w->rows;
    float *got = malloc((size_t)T * (size_t)rows * sizeof *got);
    assert_non_null(got);
    for (int level = TL_ISA_SCALAR; level <= top; level++) {
        for (int vnni = 0; vnni < (level == TL_ISA_AVX2 ? 2 : 1); vnni++) {
            tl_cpu_allow_avxvnni(!vnni); /* the AVX2 level's two copies */
            memset(got, 0, (size_t)T * (size_t)rows * sizeof *got);
            tl_matmul_q8_0_isa((tl_isa)level, w, x, T, got, rows, r0, rows);
            tl_cpu_allow_avxvnni(1);
            char kernel[64];
            snprintf(kernel, sizeof kernel, "%s %s", what, tl_isa_name((tl_isa)level));
            /* the scalar level on another layout is the reference's own
             * steps: the same floats */
            check_rows(kernel, w->cols, got, ref, T, rows, r0,
                       level == TL_ISA_SCALAR ? 0.0 : reorder_tol(1e3));
        }
    }
    free(got);
}

/* rows x d random weights quantised to Q8_0 (wq, read as `plain`) and the
 * same blocks repacked by 16 rows (wr, read as `r16`); wf the floats. */
typedef struct q8_weights {
    float *wf;
    tl_block_q8_0 *wq, *wr;
    tl_matrix plain, r16;
} q8_weights;

static void q8_weights_make(q8_weights *q, int rows, int d)
{
    int nb = d / TL_Q8_0_BLOCK;
    q->wf = random_floats((size_t)rows * (size_t)d);
    q->wq = malloc((size_t)rows * (size_t)nb * sizeof *q->wq);
    q->wr = malloc((size_t)rows * (size_t)nb * sizeof *q->wr);
    assert_true(q->wq && q->wr);
    for (int r = 0; r < rows; r++)
        tl_quantize_row_q8_0(q->wf + (size_t)r * (size_t)d, q->wq + (size_t)r * (size_t)nb, d);
    memcpy(q->wr, q->wq, (size_t)rows * (size_t)nb * sizeof *q->wr);
    q->plain = (tl_matrix){TL_DTYPE_Q8_0, q->wq, rows, d};
    q->r16 = (tl_matrix){TL_DTYPE_Q8_0, q->wr, rows, d};
    assert_int_equal(tl_r16_repack_inplace(&q->r16), 0);
    assert_int_equal(q->r16.type, TL_DTYPE_Q8_0_R16);
}

static void q8_weights_free(q8_weights *q)
{
    free(q->wf);
    free(q->wq);
    free(q->wr);
}

/* Q8_0 products for 1..9 tokens at every level, plain rows and rows
 * interleaved by 16 (9 rows: all tail; 16: one group; 37: two groups and
 * a tail), from row 0 and from rows that cut a group. */
static void test_matmul_q8_0_levels(void **state)
{
    (void)state;
    static const int row_counts[] = {9, 16, 37};
    static const int starts[] = {0, 3, 16, 21};
    for (size_t s = 0; s < sizeof block_sizes / sizeof *block_sizes; s++)
        for (size_t rc = 0; rc < sizeof row_counts / sizeof *row_counts; rc++) {
            int d = block_sizes[s], rows = row_counts[rc], nb = d / TL_Q8_0_BLOCK;
            q8_weights q;
            q8_weights_make(&q, rows, d);
            const float *wf = q.wf;
            for (size_t tc = 0; tc < sizeof token_counts / sizeof *token_counts; tc++) {
                int T = token_counts[tc];
                float *x = random_floats((size_t)T * (size_t)d);
                int8_t *xq = malloc((size_t)T * (size_t)d);
                float *xs = malloc((size_t)T * (size_t)nb * sizeof *xs);
                int32_t *xsum = malloc((size_t)T * (size_t)nb * sizeof *xsum);
                float *ref = calloc((size_t)T * (size_t)rows, sizeof *ref);
                assert_true(xq && xs && xsum && ref);
                for (int t = 0; t < T; t++)
                    tl_quantize_act_q8(x + (size_t)t * (size_t)d, d, xq + (size_t)t * (size_t)d,
                                       xs + (size_t)t * (size_t)nb, xsum + (size_t)t * (size_t)nb);
                for (int b = 0; b < T * nb; b++) { /* the block sums the kernels rely on */
                    int32_t sum = 0;
                    for (int i = 0; i < TL_Q8_0_BLOCK; i++)
                        sum += xq[b * TL_Q8_0_BLOCK + i];
                    assert_int_equal(sum, xsum[b]);
                }
                tl_q8_act a = {xq, xs, xsum};
                tl_matmul_q8_0_isa(TL_ISA_SCALAR, &q.plain, &a, T, ref, rows, 0, rows);
                /* the scalar reference itself: within quantisation error of fp32 */
                for (int t = 0; t < T; t++)
                    for (int r = 0; r < rows; r++) {
                        double exact = 0, mag = 0;
                        for (int i = 0; i < d; i++) {
                            exact += (double)wf[(size_t)r * d + i] * x[(size_t)t * d + i];
                            mag += fabs((double)wf[(size_t)r * d + i] * x[(size_t)t * d + i]);
                        }
                        if (fabs(ref[t * rows + r] - exact) > 0.02 * mag + 1e-4)
                            fail_msg("q8_0 scalar d=%d: %.6g, fp32 %.6g", d, ref[t * rows + r], exact);
                    }
                for (size_t st = 0; st < sizeof starts / sizeof *starts; st++) {
                    if (starts[st] >= rows)
                        continue;
                    check_levels("q8_0", &q.plain, &a, T, ref, starts[st]);
                    check_levels("q8_0_r16", &q.r16, &a, T, ref, starts[st]);
                }
                free(x);
                free(xq);
                free(xs);
                free(xsum);
                free(ref);
            }
            q8_weights_free(&q);
        }
}

/* The repacked layout holds every weight and scale of the plain one: each
 * row read back from it (as the embedding lookup does) is the plain row. */
static void test_r16_layout(void **state)
{
    (void)state;
    int rows = 37, d = 96, nb = d / TL_Q8_0_BLOCK;
    q8_weights q;
    q8_weights_make(&q, rows, d);
    const tl_block_q8_0 *wq = q.wq;
    assert_true(memcmp(q.wq, q.wr, (size_t)16 * (size_t)nb * sizeof *q.wq) != 0); /* really moved */
    float a[96], b[96];
    for (int r = 0; r < rows; r++) {
        tl_matrix_row_f32(&q.plain, r, a);
        tl_matrix_row_f32(&q.r16, r, b);
        if (memcmp(a, b, sizeof a) != 0)
            fail_msg("row %d differs after repacking", r);
        for (int bl = 0; bl < nb; bl++) {
            assert_int_equal(tl_r16_scale(&q.r16, r, bl), wq[(size_t)r * nb + (size_t)bl].d);
            for (int i = 0; i < TL_Q8_0_BLOCK; i++)
                assert_int_equal(tl_r16_weight(&q.r16, r, bl * TL_Q8_0_BLOCK + i),
                                 wq[(size_t)r * nb + (size_t)bl].qs[i]);
        }
    }
    q8_weights_free(&q);
}

static void test_matmul_f16_levels(void **state)
{
    (void)state;
    int top = (int)tl_cpu_detected();
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        int d = sizes[s], rows = 6, T = 3;
        uint16_t *wh = malloc((size_t)rows * (size_t)d * sizeof *wh);
        assert_non_null(wh);
        for (size_t i = 0; i < (size_t)rows * (size_t)d; i++)
            wh[i] = tl_fp32_to_fp16(uniform());
        tl_matrix w = {TL_DTYPE_F16, wh, rows, d};
        size_t stride = (size_t)d + 5; /* rows of x need not be back to back */
        float *x = random_floats((size_t)T * stride);
        float ref[18], got[18];
        tl_matmul_f16_isa(TL_ISA_SCALAR, &w, x, stride, T, ref, rows, 0, rows);
        for (int level = TL_ISA_SSE; level <= top; level++) {
            memset(got, 0, sizeof got);
            tl_matmul_f16_isa((tl_isa)level, &w, x, stride, T, got, rows, 1, rows);
            char kernel[64];
            snprintf(kernel, sizeof kernel, "f16 %s", tl_isa_name((tl_isa)level));
            check_rows(kernel, d, got, ref, T, rows, 1, reorder_tol((double)d));
        }
        free(wh);
        free(x);
    }
}

/* Every half converts to the float it denotes and back to itself. */
static void test_fp16_round_trip(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = tl_fp16_to_fp32((uint16_t)h);
        if (isnan(f))
            continue;
        if (tl_fp32_to_fp16(f) != h)
            fail_msg("half 0x%04x -> %.9g -> 0x%04x", h, f, tl_fp32_to_fp16(f));
    }
    assert_int_equal(tl_fp32_to_fp16(1.0f), 0x3c00);
    assert_int_equal(tl_fp32_to_fp16(-2.0f), 0xc000);
    assert_int_equal(tl_fp32_to_fp16(65504.0f), 0x7bff);
    assert_int_equal(tl_fp32_to_fp16(1e6f), 0x7c00);
    assert_int_equal(tl_fp32_to_fp16(1.0f + 0x1p-11f), 0x3c00); /* tie to even */
    assert_int_equal(tl_fp32_to_fp16(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);
    assert_true(tl_fp16_to_fp32(0x0001) == 0x1p-24f);
}

/* Quantising a row keeps every value within half a step of itself, plus
 * what rounding the step to fp16 (relative error <= 2^-11) moves the
 * largest multiple of it, 127 steps. */
static void test_quantize_row(void **state)
{
    (void)state;
    float *x = random_floats(96);
    x[5] = 0.0f;
    for (int i = 64; i < 96; i++)
        x[i] = 0.0f; /* an all-zero block: scale 0, no division by zero */
    tl_block_q8_0 b[3];
    tl_quantize_row_q8_0(x, b, 96);
    tl_matrix m = {TL_DTYPE_Q8_0, b, 1, 96};
    float back[96];
    tl_matrix_row_f32(&m, 0, back);
    for (int i = 0; i < 96; i++) {
        float d = tl_fp16_to_fp32(b[i / 32].d);
        if (fabsf(back[i] - x[i]) > 0.5f * d + 127.0f * 0x1p-11f * d + 1e-7f)
            fail_msg("value %d: %.6g came back as %.6g (scale %.6g)", i, x[i], back[i], d);
    }
    assert_int_equal(b[2].d, 0);
    free(x);
}

/* The cap really changes the kernel (bench/decode and these tests rely on it). */
static void test_cap(void **state)
{
    (void)state;
    tl_isa top = tl_cpu_detected();
    tl_cpu_cap(TL_ISA_SCALAR);
    assert_int_equal(tl_cpu_isa(), TL_ISA_SCALAR);
    tl_cpu_cap(TL_ISA_AVX512_VNNI);
    assert_int_equal(tl_cpu_isa(), top);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matvec_f32_levels),
        cmocka_unit_test(test_matmul_q8_0_levels),
        cmocka_unit_test(test_r16_layout),
        cmocka_unit_test(test_matmul_f16_levels),
        cmocka_unit_test(test_fp16_round_trip),
        cmocka_unit_test(test_quantize_row),
        cmocka_unit_test(test_cap),
    };
    return ilab_test_exit(cmocka_run_group_tests_name("torchlike kernels", tests, NULL, NULL));
}
