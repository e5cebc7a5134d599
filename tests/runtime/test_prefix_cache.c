/* The prefix cache's index alone (host/runtime/prefix_cache.h): which entry
 * a prompt hits, at the min_tokens edge, which entry goes when over budget
 * (least recently used) and what each leaves in the position count. No
 * backend: sequences are plain numbers the release callback records. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include "ilab_skip.h"

#include "runtime/prefix_cache.h"

typedef struct released {
    ilab_seq_t seqs[16];
    int n;
} released;

static void on_release(void *ctx, ilab_seq_t seq)
{
    released *r = ctx;
    assert_true(r->n < 16);
    r->seqs[r->n++] = seq;
}

static void hits_at_min_tokens_and_evicts_the_least_recently_used(void **state)
{
    (void)state;
    released rel = {0};
    ilab_prefix_cache *pc = ilab_prefix_cache_create(10, 3, on_release, &rel);
    assert_non_null(pc);
    const int32_t a[] = {1, 2, 3, 4}, b[] = {5, 6, 7, 8}, c[] = {9, 9, 9};
    assert_true(ilab_prefix_cache_insert(pc, 101, a, 4));
    assert_true(ilab_prefix_cache_insert(pc, 102, b, 4));
    assert_int_equal(ilab_prefix_cache_positions(pc), 8);

    /* Exactly min_tokens shared is a hit; one fewer is not. */
    const int32_t three[] = {1, 2, 3, 0}, two[] = {5, 6, 0};
    ilab_seq_t seq = 0;
    size_t shared = 0;
    assert_true(ilab_prefix_cache_match(pc, three, 4, &seq, &shared));
    assert_int_equal(seq, 101);
    assert_int_equal(shared, 3);
    assert_false(ilab_prefix_cache_match(pc, two, 3, &seq, &shared));

    /* 8 + 3 > 10: one entry goes, the least recently used (102; 101 was
     * just hit), and the count stays within the budget. */
    assert_true(ilab_prefix_cache_wants(pc, c, 3));
    assert_true(ilab_prefix_cache_insert(pc, 103, c, 3));
    assert_int_equal(rel.n, 1);
    assert_int_equal(rel.seqs[0], 102);
    assert_int_equal(ilab_prefix_cache_positions(pc), 7);
    assert_int_equal(ilab_prefix_cache_entries(pc), 2);

    /* Covered prompts and too-short ones add nothing. */
    assert_false(ilab_prefix_cache_wants(pc, a, 3));
    assert_false(ilab_prefix_cache_wants(pc, a, 4));
    assert_false(ilab_prefix_cache_wants(pc, b, 2));

    /* An entry that is a prefix of a new one is replaced by it. */
    const int32_t longer[] = {1, 2, 3, 4, 5};
    assert_true(ilab_prefix_cache_insert(pc, 104, longer, 5));
    assert_int_equal(rel.n, 2);
    assert_int_equal(rel.seqs[1], 101);
    assert_int_equal(ilab_prefix_cache_positions(pc), 8);

    assert_true(ilab_prefix_cache_evict_lru(pc)); /* 103 is older than 104 */
    assert_int_equal(rel.seqs[2], 103);
    ilab_prefix_cache_destroy(pc);
    assert_int_equal(rel.n, 4);
    assert_int_equal(rel.seqs[3], 104);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(hits_at_min_tokens_and_evicts_the_least_recently_used),
    };
    return ilab_test_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
