/* Live heap bytes, counted exactly.
 *
 * The leak checks (ABI-7, CCH-6, ...) compare the live heap before and after
 * dozens of cycles and fail on a growth of one byte per cycle. glibc's own
 * statistics (mallinfo2) are not exact enough for that: they count chunks
 * parked in a thread's cache and the bookkeeping of the per-thread arenas as
 * "in use", so a correct plugin whose create() starts a thread can show a
 * few hundred bytes of growth over 30 cycles, depending on nothing more than
 * the lengths of the paths it was given.
 *
 * So this executable defines malloc and its family (glibc supports
 * replacing them: "Replacing malloc" in its manual) and forwards each call
 * to glibc's allocator, keeping a running total of the usable size of every
 * live block. Every allocation in the process passes through here, the
 * plugin's and its libraries' included, because the executable's symbols
 * come first in the lookup scope of everything it loads.
 *
 * Under AddressSanitizer the sanitizer owns malloc; this file then defines
 * nothing and the sanitizer's own counter is used (util.c). */
#include "suite.h"

#if defined(__SANITIZE_ADDRESS__)
#define CONF_SANITIZER_OWNS_MALLOC 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(memory_sanitizer) ||                         \
    __has_feature(thread_sanitizer)
#define CONF_SANITIZER_OWNS_MALLOC 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define CONF_SANITIZER_OWNS_MALLOC 1
#endif

#ifndef CONF_SANITIZER_OWNS_MALLOC

#include <errno.h>
#include <malloc.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>

/* glibc's allocator under its exported internal names. */
extern void *__libc_malloc(size_t size);
extern void __libc_free(void *ptr);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *ptr, size_t size);
extern void *__libc_memalign(size_t alignment, size_t size);
extern void *__libc_valloc(size_t size);
extern void *__libc_pvalloc(size_t size);

static atomic_llong live_bytes;

static void *counted(void *p)
{
    if (p)
        atomic_fetch_add_explicit(&live_bytes, (long long)malloc_usable_size(p),
                                  memory_order_relaxed);
    return p;
}

static void uncount(void *p)
{
    if (p)
        atomic_fetch_sub_explicit(&live_bytes, (long long)malloc_usable_size(p),
                                  memory_order_relaxed);
}

void *malloc(size_t size)
{
    return counted(__libc_malloc(size));
}

void free(void *ptr)
{
    uncount(ptr);
    __libc_free(ptr);
}

void *calloc(size_t n, size_t size)
{
    return counted(__libc_calloc(n, size));
}

/* The old block is uncounted before the call: on success it is gone (or
 * reused), on failure it is counted again. */
void *realloc(void *ptr, size_t size)
{
    uncount(ptr);
    void *p = __libc_realloc(ptr, size);
    if (!p && ptr && size != 0)
        counted(ptr);
    return counted(p);
}

void *memalign(size_t alignment, size_t size)
{
    return counted(__libc_memalign(alignment, size));
}

void *aligned_alloc(size_t alignment, size_t size)
{
    return counted(__libc_memalign(alignment, size));
}

int posix_memalign(void **out, size_t alignment, size_t size)
{
    if (alignment < sizeof(void *) || (alignment & (alignment - 1)) != 0)
        return EINVAL;
    void *p = counted(__libc_memalign(alignment, size));
    if (!p)
        return ENOMEM;
    *out = p;
    return 0;
}

void *valloc(size_t size)
{
    return counted(__libc_valloc(size));
}

void *pvalloc(size_t size)
{
    return counted(__libc_pvalloc(size));
}

bool conf_heap_counter_exact(size_t *out)
{
    long long v = atomic_load_explicit(&live_bytes, memory_order_relaxed);
    *out = v > 0 ? (size_t)v : 0;
    return true;
}

#else

bool conf_heap_counter_exact(size_t *out)
{
    (void)out;
    return false;
}

#endif
