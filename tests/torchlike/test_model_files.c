/* torchlike checkpoint validation: truncated and corrupt llama2.c model files
 * give an error naming the file and the header field, never a crash; and the
 * random-model generator is deterministic (the committed fixture is what the
 * build writes today). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include "ilab_skip.h"

#include "checkpoint.h"
#include "random_model.h"

static unsigned char *read_all(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)n);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *size = (size_t)n;
    return buf;
}

static void expect_error(const unsigned char *bytes, size_t size, const char *field)
{
    tl_checkpoint ck;
    char err[512] = "";
    ilab_status st = tl_checkpoint_from_memory(bytes, size, "broken-model.bin", &ck, err, sizeof err);
    assert_int_equal(st, ILAB_INVALID_ARGUMENT);
    if (!strstr(err, "broken-model.bin") || !strstr(err, field))
        fail_msg("message \"%s\" does not name the file and \"%s\"", err, field);
}

static void set_field(unsigned char *bytes, int index, int32_t value)
{
    memcpy(bytes + 4 * index, &value, 4);
}

static void test_good_fixture_loads(void **state)
{
    (void)state;
    tl_checkpoint ck;
    char err[512];
    assert_int_equal(tl_checkpoint_open(TL_TEST_DATA_DIR "/tiny-model.bin", &ck, err, sizeof err),
                     ILAB_OK);
    assert_int_equal(ck.cfg.dim, 48);
    assert_int_equal(ck.cfg.n_kv_heads, 2);
    assert_int_equal(ck.cfg.vocab_size, 384);
    assert_false(ck.cfg.shared_classifier);
    assert_true(ck.w.wcls.data != ck.w.token_embedding.data);
    tl_checkpoint_close(&ck);
}

static void test_truncated_and_corrupt(void **state)
{
    (void)state;
    size_t size;
    unsigned char *good = read_all(TL_TEST_DATA_DIR "/tiny-model.bin", &size);
    unsigned char *b = malloc(size + 8);
    expect_error(good, 0, "header");
    expect_error(good, 27, "header");
    expect_error(good, size - 1, "truncated");
    expect_error(good, size / 2, "truncated");
    memcpy(b, good, size);
    memset(b + size, 0, 8);
    expect_error(b, size + 8, "trailing");

    static const char *const fields[7] = {"dim", "hidden_dim", "n_layers", "n_heads",
                                          "n_kv_heads", "vocab_size", "seq_len"};
    for (int i = 0; i < 7; i++) {
        memcpy(b, good, size);
        set_field(b, i, 0);
        expect_error(b, size, fields[i]);
        if (i != 5) { /* a negative vocab_size is legal: separate classifier */
            set_field(b, i, -3);
            expect_error(b, size, fields[i]);
        }
        set_field(b, i, INT32_MAX);
        expect_error(b, size, fields[i]);
    }
    memcpy(b, good, size);
    set_field(b, 3, 5); /* n_heads 5 does not divide dim 48 */
    expect_error(b, size, "n_heads");
    memcpy(b, good, size);
    set_field(b, 4, 3); /* n_kv_heads 3 does not divide n_heads 4 */
    expect_error(b, size, "n_kv_heads");
    memcpy(b, good, size);
    set_field(b, 4, 8); /* more kv heads than heads */
    expect_error(b, size, "n_kv_heads");
    memcpy(b, good, size);
    set_field(b, 0, 64); /* a plausible but wrong dim: size no longer matches */
    expect_error(b, size, "needs");
    free(b);
    free(good);

    tl_checkpoint ck;
    char err[512];
    assert_int_equal(tl_checkpoint_open("/nonexistent/model.bin", &ck, err, sizeof err), ILAB_IO);
    assert_non_null(strstr(err, "/nonexistent/model.bin"));
    assert_int_equal(tl_checkpoint_open(TL_TEST_DATA_DIR, &ck, err, sizeof err), ILAB_IO);
}

/* The committed fixture (and so the numpy reference logits) is exactly what
 * the generator writes: nothing about it is hand-edited. */
static void test_generator_is_deterministic(void **state)
{
    (void)state;
    char path[512], tok[512], err[256];
    snprintf(path, sizeof path, "%s/regenerated-tiny-model.bin", TL_BUILD_DIR);
    snprintf(tok, sizeof tok, "%s/regenerated-tiny-tokenizer.bin", TL_BUILD_DIR);
    tl_random_shape shape = {48, 96, 2, 4, 2, 384, 64, 1};
    assert_int_equal(tl_write_random_model(path, &shape, 7, err, sizeof err), 0);
    assert_int_equal(tl_write_small_tokenizer(tok, 384, err, sizeof err), 0);
    size_t a_size, b_size;
    unsigned char *a = read_all(path, &a_size), *b = read_all(TL_TEST_DATA_DIR "/tiny-model.bin", &b_size);
    assert_int_equal(a_size, b_size);
    assert_memory_equal(a, b, a_size);
    free(a);
    free(b);
    a = read_all(tok, &a_size);
    b = read_all(TL_TEST_DATA_DIR "/tiny-tokenizer.bin", &b_size);
    assert_int_equal(a_size, b_size);
    assert_memory_equal(a, b, a_size);
    free(a);
    free(b);
    unlink(path);
    unlink(tok);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_fixture_loads),
        cmocka_unit_test(test_truncated_and_corrupt),
        cmocka_unit_test(test_generator_is_deterministic),
    };
    return ilab_test_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
