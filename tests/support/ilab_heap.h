/* Live heap bytes for tests that a create/free cycle gives everything back.
 * glibc's mallinfo2() in a plain build; under AddressSanitizer the
 * sanitizer's own counter (glibc's statistics stay empty there). Counts, not
 * times: a single-threaded test gets the same figures on a loaded machine.
 *
 * ilab_heap_growth(cycle, ctx, warmup, n) runs cycle() `warmup` times, then
 * 2 * n more, and returns the smaller of the two halves' growth per cycle:
 * a leak grows the heap in both halves, a cache that fills once (stdio
 * buffers, a library's lazy tables) in the first only. */
#ifndef ILAB_TEST_HEAP_H
#define ILAB_TEST_HEAP_H

#include <malloc.h>
#include <stddef.h>

extern size_t __sanitizer_get_current_allocated_bytes(void) __attribute__((weak));

static inline size_t ilab_heap_live_bytes(void)
{
    if (__sanitizer_get_current_allocated_bytes)
        return __sanitizer_get_current_allocated_bytes();
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
}

static inline double ilab_heap_growth(void (*cycle)(void *ctx), void *ctx, int warmup, int n)
{
    for (int i = 0; i < warmup; i++)
        cycle(ctx);
    size_t mark[3];
    mark[0] = ilab_heap_live_bytes();
    for (int i = 0; i < n; i++)
        cycle(ctx);
    mark[1] = ilab_heap_live_bytes();
    for (int i = 0; i < n; i++)
        cycle(ctx);
    mark[2] = ilab_heap_live_bytes();
    double first = ((double)mark[1] - (double)mark[0]) / n;
    double second = ((double)mark[2] - (double)mark[1]) / n;
    return first < second ? first : second;
}

#endif
