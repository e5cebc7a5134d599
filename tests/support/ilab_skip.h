/* Skips that ctest sees. cmocka counts a skipped test as passed and its
 * runner returns 0, so a test program whose every test skipped would show
 * as Passed. Test files include this after <cmocka.h>: skip() then counts,
 * and main returns ilab_test_exit(failed), which is ILAB_SKIP_RETURN_CODE
 * (registered as every test's SKIP_RETURN_CODE, cmake/ilab_tests.cmake)
 * when nothing failed but something skipped. Header-only: each test
 * program has its own counter. */
#ifndef ILAB_TESTS_SKIP_H
#define ILAB_TESTS_SKIP_H

#include <stdio.h>

#define ILAB_SKIP_RETURN_CODE 77

static int ilab_skipped_tests;

static inline void ilab_skip_here(const char *file, int line)
{
    ilab_skipped_tests++;
    fprintf(stderr, "%s:%d: test skipped\n", file, line);
    _skip(file, line);
}

#undef skip
#define skip() ilab_skip_here(__FILE__, __LINE__)

/* main's return value: 1 on any failure, else 77 if anything skipped, else 0. */
static inline int ilab_test_exit(int failed)
{
    if (failed)
        return 1;
    return ilab_skipped_tests ? ILAB_SKIP_RETURN_CODE : 0;
}

#endif
