/* torchlike — a fixed set of worker threads for the backend's own parallel
 * loops (matrix-vector products, attention heads). OpenBLAS keeps its own
 * threads for GEMM; both use the backend's one `threads` setting.
 *
 * Workers spin briefly before sleeping, because a decode step issues dozens
 * of short parallel loops and a futex wake-up per loop would cost more than
 * the work. One parallel_for at a time: the caller serialises. */
#ifndef TORCHLIKE_THREAD_POOL_H
#define TORCHLIKE_THREAD_POOL_H

#include "inferlab/status.h"

typedef struct tl_thread_pool tl_thread_pool;

/* Runs one chunk [begin, end) on thread `thread` (0 = the caller), so a task
 * can use per-thread scratch space. */
typedef void (*tl_task_fn)(void *ctx, int begin, int end, int thread);

/* n_threads includes the calling thread; 1 creates no worker. */
ilab_status tl_thread_pool_create(int n_threads, tl_thread_pool **out);
void tl_thread_pool_destroy(tl_thread_pool *pool);
int tl_thread_pool_size(const tl_thread_pool *pool);

/* Run fn over [0, n) in chunks, shared out among the threads and the
 * caller, and wait for all of them. Every chunk starts at a multiple of
 * `grain` and, but for the last, is a multiple of it in length: a share of
 * what is left, so the first chunks are long and the last ones `grain`.
 * With one thread, or n <= grain, the one chunk is [0, n). */
void tl_parallel_for(tl_thread_pool *pool, int n, int grain, tl_task_fn fn, void *ctx);

#endif
