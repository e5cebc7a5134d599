/* Every weight type's reference dequantisation (dequant_ref.c) against the
 * floats ggml's own to_float made of the same bytes, bit for bit: rows
 * quantised by ggml (normal, edge and wide-range values) and a row of
 * random block bytes (data/quant/, made by
 * scripts/fixtures/make_quant_fixture.c; README there). And the loader's
 * type check: the supported types, and names for the refused ones. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "weights.h"

typedef struct fixture {
    uint32_t type, rows, n, row_bytes;
    unsigned char *blocks;
    float *want;
} fixture;

static int load(const char *name, fixture *f)
{
    char path[512];
    snprintf(path, sizeof path, "%s/quant/%s.bin", TL_TEST_DATA_DIR, name);
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return -1;
    char magic[4];
    uint32_t hdr[4];
    int ok = fread(magic, 1, 4, fp) == 4 && memcmp(magic, "TLQF", 4) == 0 &&
             fread(hdr, 4, 4, fp) == 4;
    if (ok) {
        f->type = hdr[0];
        f->rows = hdr[1];
        f->n = hdr[2];
        f->row_bytes = hdr[3];
        f->blocks = malloc((size_t)f->rows * f->row_bytes);
        f->want = malloc((size_t)f->rows * f->n * sizeof(float));
        ok = f->blocks && f->want &&
             fread(f->blocks, f->row_bytes, f->rows, fp) == f->rows &&
             fread(f->want, sizeof(float), (size_t)f->rows * f->n, fp) == (size_t)f->rows * f->n;
    }
    fclose(fp);
    return ok ? 0 : -1;
}

static const struct {
    const char *file;
    tl_dtype type;
} types[] = {
    {"f32", TL_DTYPE_F32},   {"f16", TL_DTYPE_F16},   {"bf16", TL_DTYPE_BF16},
    {"q4_0", TL_DTYPE_Q4_0}, {"q4_1", TL_DTYPE_Q4_1}, {"q5_0", TL_DTYPE_Q5_0},
    {"q5_1", TL_DTYPE_Q5_1}, {"q8_0", TL_DTYPE_Q8_0}, {"q2_K", TL_DTYPE_Q2_K},
    {"q3_K", TL_DTYPE_Q3_K}, {"q4_K", TL_DTYPE_Q4_K}, {"q5_K", TL_DTYPE_Q5_K},
    {"q6_K", TL_DTYPE_Q6_K},
};

static void test_bit_exact(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof types / sizeof *types; k++) {
        fixture f = {0, 0, 0, 0, NULL, NULL};
        assert_int_equal(load(types[k].file, &f), 0);
        assert_int_equal(f.type, (uint32_t)types[k].type);
        assert_int_equal(tl_dtype_row_bytes(types[k].type, (int)f.n), f.row_bytes);
        float *got = malloc(f.n * sizeof *got);
        size_t mismatches = 0;
        for (uint32_t r = 0; r < f.rows; r++) {
            tl_dequantize_row(types[k].type, f.blocks + (size_t)r * f.row_bytes, got, (int)f.n);
            for (uint32_t i = 0; i < f.n; i++)
                if (memcmp(&got[i], &f.want[(size_t)r * f.n + i], 4) != 0) {
                    if (mismatches++ < 3)
                        printf("%s row %u value %u: %.9g, ggml %.9g\n", types[k].file, r, i,
                               (double)got[i], (double)f.want[(size_t)r * f.n + i]);
                }
        }
        printf("%-5s %u rows of %u: %zu values differ from ggml's\n", types[k].file, f.rows, f.n,
               mismatches);
        assert_int_equal(mismatches, 0);
        /* and through a matrix, as the model reads an embedding row */
        tl_matrix m = {types[k].type, f.blocks, (int)f.rows, (int)f.n};
        tl_matrix_row_f32(&m, 2, got);
        assert_memory_equal(got, f.want + 2 * (size_t)f.n, f.n * sizeof *got);
        free(got);
        free(f.blocks);
        free(f.want);
    }
}

static void test_type_check(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof types / sizeof *types; k++)
        assert_true(tl_weight_type_supported((uint32_t)types[k].type));
    /* IQ*, TQ*, Q8_1/Q8_K (activation types), integers, retired ids, MXFP4 */
    static const uint32_t refused[] = {4, 5, 9, 15, 16, 19, 20, 23, 24, 28, 29, 31, 34, 35, 39, 41,
                                       42, 0x108, 1000, 0xffffffffu};
    for (size_t k = 0; k < sizeof refused / sizeof *refused; k++)
        assert_false(tl_weight_type_supported(refused[k]));
    assert_string_equal(tl_weight_type_name(16), "IQ2_XXS");
    assert_string_equal(tl_weight_type_name(35), "TQ2_0");
    assert_string_equal(tl_weight_type_name(30), "BF16");
    assert_string_equal(tl_weight_type_name(12), "Q4_K");
    assert_string_equal(tl_weight_type_name(99), "unknown");
    assert_int_equal(tl_dtype_row_bytes(TL_DTYPE_Q4_K, 800), 0); /* not whole blocks of 256 */
    assert_int_equal(tl_dtype_row_bytes(TL_DTYPE_Q4_K, 1024), 4 * 144);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bit_exact),
        cmocka_unit_test(test_type_check),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
