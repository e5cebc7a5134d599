/* The skip plumbing itself: one test passes, one skips through ilab_skip.h.
 * The program must exit ILAB_SKIP_RETURN_CODE (check_exit.cmake runs it and
 * asserts that), so a skip inside any test program reaches ctest as
 * "Skipped", not "Passed". With --fail it also fails a test: failure wins. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ilab_skip.h"

static int fail_too;

static void passes(void **state)
{
    (void)state;
    assert_int_equal(1 + 1, 2);
}

static void skips(void **state)
{
    (void)state;
    skip();
}

static void fails_when_asked(void **state)
{
    (void)state;
    if (fail_too)
        fail_msg("asked to fail");
}

int main(int argc, char **argv)
{
    fail_too = argc > 1 && strcmp(argv[1], "--fail") == 0;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(passes),
        cmocka_unit_test(skips),
        cmocka_unit_test(fails_when_asked),
    };
    return ilab_test_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
