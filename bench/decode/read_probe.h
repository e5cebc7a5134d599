/* bench/decode: the fastest plain read of a buffer this machine can do, the
 * yardstick decode speed is compared with.
 *
 * Two kernels, each compiled for every x86 level and chosen at run time for
 * the CPU it runs on (no -march needed): "sum" adds the buffer into eight
 * vector accumulators held in registers; "prefetch" does the same with a
 * software prefetch a few KB ahead. The caller times both and uses the
 * faster (the lanes are integers, so any bytes read at the same speed): a
 * decode step reads at least as many bytes, so it cannot beat the
 * larger one unless the probe is wrong. */
#ifndef BENCH_READ_PROBE_H
#define BENCH_READ_PROBE_H

#include <stddef.h>

#include "thread_pool.h"

typedef enum probe_kernel { PROBE_SUM = 0, PROBE_PREFETCH = 1, PROBE_KERNELS = 2 } probe_kernel;

/* Name of the instruction set the kernels run with on this CPU. */
const char *probe_isa(void);
const char *probe_kernel_name(probe_kernel k);

/* Seconds to read `bytes` (a multiple of 512) at `data` once with the pool's
 * threads, in 256 KB chunks shared out as they finish. */
double probe_read(probe_kernel k, const void *data, size_t bytes, tl_thread_pool *pool);

#endif
