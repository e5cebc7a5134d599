/* The paged KV cache on its own: fork shares blocks without copying, a
 * shared block is copied only when written, truncate and free give blocks
 * back, and handles carry generation counters. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include "ilab_skip.h"

#include "kv_cache.h"

/* Append n positions the way eval does: reserve, then advance. */
static void append(tl_kv_cache *kv, tl_kv_sequence *s, int n, float value)
{
    assert_true(tl_kv_blocks_needed(kv, s, n) <= kv->n_free);
    tl_kv_prepare_append(kv, s, n);
    for (int p = s->length; p < s->length + n; p++)
        tl_kv_keys(kv, s->blocks[p / TL_KV_BLOCK], 0)[(p % TL_KV_BLOCK) * kv->kv_dim] = value;
    s->length += n;
}

static float key_at(const tl_kv_cache *kv, const tl_kv_sequence *s, int p)
{
    return tl_kv_keys(kv, s->blocks[p / TL_KV_BLOCK], 0)[(p % TL_KV_BLOCK) * kv->kv_dim];
}

static void test_fork_shares_and_copies_on_write(void **state)
{
    (void)state;
    tl_kv_cache kv;
    assert_int_equal(tl_kv_init(&kv, 2, 8, 128, 16, 4), ILAB_OK);
    uint64_t hp, hc;
    assert_int_equal(tl_kv_seq_create(&kv, &hp), ILAB_OK);
    tl_kv_sequence *parent = tl_kv_seq_get(&kv, hp);
    append(&kv, parent, 20, 1.0f); /* one full block, one partial */
    assert_int_equal(tl_kv_blocks_in_use(&kv), 2);

    assert_int_equal(tl_kv_seq_fork(&kv, parent, &hc), ILAB_OK);
    tl_kv_sequence *child = tl_kv_seq_get(&kv, hc);
    assert_int_equal(tl_kv_blocks_in_use(&kv), 2); /* shared, not copied */
    assert_int_equal(child->blocks[0], parent->blocks[0]);
    assert_int_equal(kv.refcount[parent->blocks[1]], 2);

    /* writing into the shared partial block copies that block only */
    assert_int_equal(tl_kv_blocks_needed(&kv, child, 1), 1);
    append(&kv, child, 1, 2.0f);
    assert_int_equal(tl_kv_blocks_in_use(&kv), 3);
    assert_int_equal(child->blocks[0], parent->blocks[0]);
    assert_int_not_equal(child->blocks[1], parent->blocks[1]);
    assert_true(key_at(&kv, child, 19) == 1.0f); /* the copy kept the prefix */
    assert_true(key_at(&kv, child, 20) == 2.0f);
    /* the parent now owns its block alone: no copy */
    assert_int_equal(tl_kv_blocks_needed(&kv, parent, 1), 0);
    append(&kv, parent, 1, 3.0f);
    assert_true(key_at(&kv, parent, 20) == 3.0f);
    assert_true(key_at(&kv, child, 20) == 2.0f);
    assert_int_equal(tl_kv_blocks_in_use(&kv), 3);

    tl_kv_seq_free(&kv, parent);
    assert_int_equal(tl_kv_blocks_in_use(&kv), 2); /* block 0 lives on in the child */
    tl_kv_seq_free(&kv, child);
    assert_int_equal(tl_kv_blocks_in_use(&kv), 0);
    tl_kv_destroy(&kv);
}

static void test_truncate_releases_blocks(void **state)
{
    (void)state;
    tl_kv_cache kv;
    assert_int_equal(tl_kv_init(&kv, 1, 4, 128, 8, 2), ILAB_OK);
    uint64_t h;
    tl_kv_seq_create(&kv, &h);
    tl_kv_sequence *s = tl_kv_seq_get(&kv, h);
    append(&kv, s, 50, 1.0f);
    assert_int_equal(tl_kv_blocks_in_use(&kv), 4);
    tl_kv_seq_truncate(&kv, s, 17);
    assert_int_equal(s->length, 17);
    assert_int_equal(tl_kv_blocks_in_use(&kv), 2);
    tl_kv_seq_truncate(&kv, s, 16);
    assert_int_equal(tl_kv_blocks_in_use(&kv), 1);
    tl_kv_seq_truncate(&kv, s, 0);
    assert_int_equal(tl_kv_blocks_in_use(&kv), 0);
    append(&kv, s, 128, 1.0f); /* the whole pool */
    assert_int_equal(kv.n_free, 0);
    assert_true(tl_kv_blocks_needed(&kv, s, 1) > kv.n_free);
    tl_kv_seq_free(&kv, s);
    assert_int_equal(kv.n_free, 8);
    tl_kv_destroy(&kv);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* One slot, reused 10,000 times: every handle it hands out is new (not just
 * different from the first), and while the slot holds a live sequence no
 * earlier handle reaches it. */
static void test_handles_are_never_reused(void **state)
{
    (void)state;
    enum { N = 10000 };
    tl_kv_cache kv;
    assert_int_equal(tl_kv_init(&kv, 1, 4, 32, 2, 1), ILAB_OK);
    uint64_t *seen = malloc((N + 1) * sizeof *seen);
    assert_non_null(seen);
    uint64_t h;
    assert_int_equal(tl_kv_seq_create(&kv, &seen[0]), ILAB_OK);
    assert_int_not_equal(seen[0], 0);
    assert_int_equal(tl_kv_seq_create(&kv, &h), ILAB_OUT_OF_MEMORY); /* one slot */
    tl_kv_seq_free(&kv, tl_kv_seq_get(&kv, seen[0]));
    assert_null(tl_kv_seq_get(&kv, seen[0]));
    for (int i = 1; i <= N; i++) {
        assert_int_equal(tl_kv_seq_create(&kv, &h), ILAB_OK);
        assert_int_not_equal(h, 0);
        seen[i] = h;
        tl_kv_sequence *s = tl_kv_seq_get(&kv, h);
        assert_non_null(s);
        append(&kv, s, 20, 1.0f);
        if (i % 97 == 0) /* earlier handles stay stale while this one is live */
            for (int k = 0; k < i; k += 13)
                if (tl_kv_seq_get(&kv, seen[k]) != NULL)
                    fail_msg("handle #%d (0x%llx) reaches the sequence of handle #%d", k,
                             (unsigned long long)seen[k], i);
        tl_kv_seq_free(&kv, s);
        assert_null(tl_kv_seq_get(&kv, h));
    }
    /* the slot is live again: none of the N + 1 handles reaches it */
    assert_int_equal(tl_kv_seq_create(&kv, &h), ILAB_OK);
    for (int k = 0; k <= N; k++)
        assert_null(tl_kv_seq_get(&kv, seen[k]));
    assert_non_null(tl_kv_seq_get(&kv, h));
    tl_kv_seq_free(&kv, tl_kv_seq_get(&kv, h));
    qsort(seen, N + 1, sizeof *seen, cmp_u64);
    for (int k = 1; k <= N; k++)
        if (seen[k] == seen[k - 1])
            fail_msg("handle 0x%llx was handed out twice", (unsigned long long)seen[k]);
    assert_int_equal(tl_kv_blocks_in_use(&kv), 0);
    assert_null(tl_kv_seq_get(&kv, 0));
    assert_null(tl_kv_seq_get(&kv, 2));
    free(seen);
    tl_kv_destroy(&kv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fork_shares_and_copies_on_write),
        cmocka_unit_test(test_truncate_releases_blocks),
        cmocka_unit_test(test_handles_are_never_reused),
    };
    return ilab_test_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
