/* The thread pool from its header alone (thread_pool.h), not from its
 * implementation: tl_parallel_for covers [0, n) exactly once, in chunks
 * that start at multiples of `grain` and, but for the last, are multiples
 * of it in length; thread 0 is the caller and every index is in
 * [0, size); one thread index never runs two chunks at once (per-thread
 * scratch); plain writes made in chunks are visible to the caller when it
 * returns, and the caller's plain writes are visible in the chunks;
 * n_threads counts the caller, so 1 creates no worker. Many sizes (more
 * threads than cores), grains and lengths, thousands of tiny jobs back to
 * back, chunks that sleep, pools made and destroyed over and over, a
 * caller other than the thread that made the pool, n near INT_MAX.
 *
 * The chunk function runs on the pool's threads, where a cmocka assertion
 * must not fire: it counts what it sees wrong in atomics, and the caller
 * asserts after tl_parallel_for returns. Nothing here asserts on time. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>
#include <dirent.h>
#include <unistd.h>

#include <cmocka.h>
#include "ilab_skip.h" /* ilab_test_exit */

#include "thread_pool.h"

#define MAX_THREADS 8
/* Index counts are kept (one atomic per index) up to this n; beyond it the
 * chunk records alone show the tiling. */
#define HITS_LIMIT (1 << 20)

typedef struct chunk_rec {
    int begin, end, thread;
} chunk_rec;

typedef struct job_ctx {
    int n, grain, size;
    pthread_t caller;
    atomic_int active;        /* set while tl_parallel_for runs */
    atomic_int *hits;         /* per index, or NULL */
    int *plain_out;           /* written plainly in chunks, or NULL */
    const int *plain_in;      /* written plainly by the caller, or NULL */
    int gen;                  /* written plainly by the caller before the job */
    int sleep_every;          /* 0: never; k: every k-th call sleeps */
    int sleep_us;
    atomic_int calls;
    atomic_int busy[MAX_THREADS];
    /* things seen wrong on the pool's threads */
    atomic_int bad_thread, same_index_overlap, bad_caller, bad_range, late_call;
    pthread_mutex_t mu;
    chunk_rec *recs;
    size_t n_recs, cap;
} job_ctx;

static void ctx_init(job_ctx *c, int size)
{
    memset(c, 0, sizeof *c);
    c->size = size;
    pthread_mutex_init(&c->mu, NULL);
    atomic_init(&c->active, 0);
    atomic_init(&c->calls, 0);
    for (int t = 0; t < MAX_THREADS; t++)
        atomic_init(&c->busy[t], 0);
    atomic_init(&c->bad_thread, 0);
    atomic_init(&c->same_index_overlap, 0);
    atomic_init(&c->bad_caller, 0);
    atomic_init(&c->bad_range, 0);
    atomic_init(&c->late_call, 0);
}

static void ctx_free(job_ctx *c)
{
    free(c->hits);
    free(c->recs);
    pthread_mutex_destroy(&c->mu);
}

/* Ready the context for a job of n indices (keeps the error counters, so a
 * late call from an earlier job still shows). */
static void ctx_prepare(job_ctx *c, int n, int grain, int want_hits)
{
    c->n = n;
    c->grain = grain;
    c->n_recs = 0;
    atomic_store(&c->calls, 0);
    free(c->hits);
    c->hits = NULL;
    if (want_hits && n > 0 && n <= HITS_LIMIT) {
        c->hits = calloc((size_t)n, sizeof *c->hits);
        assert_non_null(c->hits);
    }
    c->caller = pthread_self();
}

static void sleep_us(int us)
{
    struct timespec ts = {us / 1000000, (long)(us % 1000000) * 1000L};
    nanosleep(&ts, NULL);
}

static void record_chunk(void *vctx, int begin, int end, int thread)
{
    job_ctx *c = vctx;
    if (!atomic_load(&c->active))
        atomic_fetch_add(&c->late_call, 1);
    int call = atomic_fetch_add(&c->calls, 1);
    int index_ok = thread >= 0 && thread < c->size && thread < MAX_THREADS;
    if (!index_ok)
        atomic_fetch_add(&c->bad_thread, 1);
    else if (atomic_exchange(&c->busy[thread], 1) != 0)
        atomic_fetch_add(&c->same_index_overlap, 1);
    if ((thread == 0) != (pthread_equal(pthread_self(), c->caller) != 0))
        atomic_fetch_add(&c->bad_caller, 1);
    /* A runaway pool (a cursor that wraps past INT_MAX, say) never returns:
     * end the program with a message rather than hang. A valid tiling has
     * at most ceil(n / grain) non-empty chunks. */
    long most = (long)c->n / c->grain + 1 + 100000;
    if (call > most || atomic_load(&c->bad_range) > 1000) {
        fprintf(stderr,
                "runaway: size %d, n %d, grain %d: call %d is [%d, %d) on thread %d; %d "
                "calls outside [0, n) so far; tl_parallel_for would not return\n",
                c->size, c->n, c->grain, call, begin, end, thread, atomic_load(&c->bad_range));
        fflush(stderr);
        _exit(1);
    }
    if (begin < 0 || end > c->n || begin > end) {
        atomic_fetch_add(&c->bad_range, 1);
    } else {
        if (c->hits)
            for (int i = begin; i < end; i++)
                atomic_fetch_add_explicit(&c->hits[i], 1, memory_order_relaxed);
        if (c->plain_out) {
            int g = c->gen; /* the caller's plain write before the job */
            for (int i = begin; i < end; i++)
                c->plain_out[i] = (c->plain_in ? c->plain_in[i] * 3 : i) + g;
        }
    }
    if (c->sleep_every > 0) {
        if (call % c->sleep_every == 0)
            sleep_us(c->sleep_us);
        else
            sched_yield();
    }
    pthread_mutex_lock(&c->mu);
    if (c->n_recs == c->cap) {
        c->cap = c->cap ? c->cap * 2 : 64;
        c->recs = realloc(c->recs, c->cap * sizeof *c->recs);
        if (!c->recs)
            abort();
    }
    c->recs[c->n_recs++] = (chunk_rec){begin, end, thread};
    pthread_mutex_unlock(&c->mu);
    if (index_ok)
        atomic_store(&c->busy[thread], 0);
}

/* The same as record_chunk through another pointer, so back-to-back jobs
 * alternate fn as well as ctx. */
static void record_chunk_b(void *vctx, int begin, int end, int thread)
{
    record_chunk(vctx, begin, end, thread);
}

static int cmp_rec(const void *a, const void *b)
{
    const chunk_rec *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return (x->end > y->end) - (x->end < y->end);
}

static void run_job(tl_thread_pool *pool, job_ctx *c, tl_task_fn fn)
{
    atomic_store(&c->active, 1);
    tl_parallel_for(pool, c->n, c->grain, fn, c);
    atomic_store(&c->active, 0);
}

/* Checks the job just run against the header's promises; fails with the
 * case spelled out. check_tail: the final chunk is at most `grain` long
 * (the header's "the last ones `grain`"). */
static void check_job(job_ctx *c, const char *what, int check_tail)
{
    char where[160];
    snprintf(where, sizeof where, "%s: size %d, n %d, grain %d", what, c->size, c->n,
             c->grain);
    if (atomic_load(&c->bad_thread))
        fail_msg("%s: %d chunk(s) with a thread index outside [0, %d)", where,
                 atomic_load(&c->bad_thread), c->size);
    if (atomic_load(&c->bad_caller))
        fail_msg("%s: %d chunk(s) where thread 0 was not the caller (or the caller ran a "
                 "chunk numbered other than 0)",
                 where, atomic_load(&c->bad_caller));
    if (atomic_load(&c->same_index_overlap))
        fail_msg("%s: %d time(s) two chunks ran at once under one thread index", where,
                 atomic_load(&c->same_index_overlap));
    if (atomic_load(&c->bad_range))
        fail_msg("%s: %d chunk(s) outside [0, n) or with begin > end", where,
                 atomic_load(&c->bad_range));
    if (atomic_load(&c->late_call))
        fail_msg("%s: %d chunk call(s) while no tl_parallel_for was running on this ctx",
                 where, atomic_load(&c->late_call));

    /* The records were made under the mutex; tl_parallel_for has returned,
     * so the caller owns them now. */
    if (c->n_recs > 0)
        qsort(c->recs, c->n_recs, sizeof *c->recs, cmp_rec);
    int next = 0; /* the tiling so far covers [0, next) */
    for (size_t k = 0; k < c->n_recs; k++) {
        const chunk_rec *r = &c->recs[k];
        if (r->begin % c->grain != 0)
            fail_msg("%s: chunk [%d, %d) on thread %d does not start at a multiple of the "
                     "grain",
                     where, r->begin, r->end, r->thread);
        if (r->begin == r->end)
            continue; /* an empty chunk covers nothing */
        if (r->begin != next)
            fail_msg("%s: chunk [%d, %d) on thread %d: expected one to start at %d (%s)",
                     where, r->begin, r->end, r->thread, next,
                     r->begin < next ? "overlap" : "gap");
        if (r->end != c->n && (r->end - r->begin) % c->grain != 0)
            fail_msg("%s: chunk [%d, %d) on thread %d is not the last and its length %d "
                     "is not a multiple of the grain",
                     where, r->begin, r->end, r->thread, r->end - r->begin);
        if (check_tail && r->end == c->n && r->end - r->begin > c->grain)
            fail_msg("%s: the final chunk [%d, %d) is longer than the grain", where,
                     r->begin, r->end);
        next = r->end;
    }
    if (next != c->n)
        fail_msg("%s: chunks cover [0, %d) only", where, next);
    if (c->hits)
        for (int i = 0; i < c->n; i++) {
            int h = atomic_load(&c->hits[i]);
            if (h != 1)
                fail_msg("%s: index %d ran %d time(s)", where, i, h);
        }
}

static int task_count(void)
{
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return -1;
    int count = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            count++;
    closedir(d);
    return count;
}

/* A joined thread can linger in /proc/self/task for a moment after
 * pthread_join returns; wait (boundedly) for the count to settle. */
static int task_count_settled(int want)
{
    int count = task_count();
    for (int k = 0; k < 400 && count != want; k++) {
        sleep_us(5000);
        count = task_count();
    }
    return count;
}

static tl_thread_pool *make_pool(int size)
{
    tl_thread_pool *pool = NULL;
    assert_int_equal(tl_thread_pool_create(size, &pool), ILAB_OK);
    assert_non_null(pool);
    assert_int_equal(tl_thread_pool_size(pool), size);
    return pool;
}

/* ---- tests ---------------------------------------------------------- */

static void test_size_counts_the_caller(void **state)
{
    (void)state;
    for (int size = 1; size <= MAX_THREADS; size++) {
        tl_thread_pool *pool = make_pool(size);
        tl_thread_pool_destroy(pool);
    }
}

/* "n_threads includes the calling thread; 1 creates no worker": a pool of
 * size k adds k - 1 threads to the process, and destroy takes them away. */
static void test_worker_threads_exist_as_promised(void **state)
{
    (void)state;
    int base = task_count();
    if (base < 0)
        fail_msg("cannot read /proc/self/task to count the pool's threads");
    tl_thread_pool *one = make_pool(1);
    assert_int_equal(task_count(), base);
    job_ctx c;
    ctx_init(&c, 1);
    ctx_prepare(&c, 100, 7, 1);
    run_job(one, &c, record_chunk);
    check_job(&c, "size 1", 0);
    assert_int_equal(task_count(), base);
    tl_thread_pool_destroy(one);
    ctx_free(&c);

    for (int size = 2; size <= MAX_THREADS; size++) {
        tl_thread_pool *pool = make_pool(size);
        job_ctx d;
        ctx_init(&d, size);
        ctx_prepare(&d, 1000, 4, 1);
        run_job(pool, &d, record_chunk); /* in case workers start lazily */
        check_job(&d, "worker count", 0);
        int with = task_count_settled(base + size - 1);
        if (with != base + size - 1)
            fail_msg("size %d: %d threads besides the %d before, expected %d", size,
                     with - base, base, size - 1);
        tl_thread_pool_destroy(pool);
        int after = task_count_settled(base);
        if (after != base)
            fail_msg("size %d: %d threads left after destroy (%d before)", size, after, base);
        ctx_free(&d);
    }
}

static void test_size_one_runs_everything_on_the_caller(void **state)
{
    (void)state;
    tl_thread_pool *pool = make_pool(1);
    static const int ns[] = {0, 1, 2, 5, 16, 17, 1000, 4099};
    static const int grains[] = {1, 3, 16, 5000};
    job_ctx c;
    ctx_init(&c, 1);
    for (size_t a = 0; a < sizeof ns / sizeof *ns; a++)
        for (size_t b = 0; b < sizeof grains / sizeof *grains; b++) {
            ctx_prepare(&c, ns[a], grains[b], 1);
            run_job(pool, &c, record_chunk);
            check_job(&c, "size 1", 0);
            for (size_t k = 0; k < c.n_recs; k++)
                assert_int_equal(c.recs[k].thread, 0);
        }
    ctx_free(&c);
    tl_thread_pool_destroy(pool);
}

static void add_n(int *ns, int *count, int cap, int n)
{
    if (n < 0 || n > 200003)
        return;
    for (int k = 0; k < *count; k++)
        if (ns[k] == n)
            return;
    if (*count < cap)
        ns[(*count)++] = n;
}

/* Every size 1..8, a spread of grains, and for each grain lengths around
 * its multiples and the pool size times it, small primes and large n. */
static void test_cover_exactly_once_in_grain_aligned_chunks(void **state)
{
    (void)state;
    static const int base_ns[] = {0, 1, 2, 3, 7, 13, 63, 64, 65, 127, 1021, 4099, 65537, 100003};
    static const int grains[] = {1, 2, 3, 7, 16, 64, 1000, 200000};
    for (int size = 1; size <= MAX_THREADS; size++) {
        tl_thread_pool *pool = make_pool(size);
        job_ctx c;
        ctx_init(&c, size);
        for (size_t b = 0; b < sizeof grains / sizeof *grains; b++) {
            int g = grains[b];
            int ns[64], count = 0;
            for (size_t a = 0; a < sizeof base_ns / sizeof *base_ns; a++)
                add_n(ns, &count, 64, base_ns[a]);
            int extra[] = {g - 1, g, g + 1, 2 * g - 1, 2 * g, 2 * g + 1, size * g - 1,
                           size * g, size * g + 1, 3 * size * g + 1, 17 * g + g / 2};
            for (size_t e = 0; e < sizeof extra / sizeof *extra; e++)
                add_n(ns, &count, 64, extra[e]);
            for (int a = 0; a < count; a++) {
                ctx_prepare(&c, ns[a], g, 1);
                run_job(pool, &c, record_chunk);
                check_job(&c, "coverage", 0);
            }
        }
        ctx_free(&c);
        tl_thread_pool_destroy(pool);
    }
}

/* A grain at least n leaves one chunk, [0, n), since every chunk starts
 * at a multiple of the grain. */
static void test_grain_larger_than_n_is_one_chunk(void **state)
{
    (void)state;
    static const int cases[][2] = {{1, 1}, {1, 2}, {5, 5}, {5, 6}, {99, 100}, {1000, 1 << 20}};
    for (int size = 1; size <= MAX_THREADS; size += 3) {
        tl_thread_pool *pool = make_pool(size);
        job_ctx c;
        ctx_init(&c, size);
        for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
            ctx_prepare(&c, cases[k][0], cases[k][1], 1);
            run_job(pool, &c, record_chunk);
            check_job(&c, "grain >= n", 0);
            int nonempty = 0;
            for (size_t r = 0; r < c.n_recs; r++)
                if (c.recs[r].begin < c.recs[r].end) {
                    nonempty++;
                    assert_int_equal(c.recs[r].begin, 0);
                    assert_int_equal(c.recs[r].end, c.n);
                }
            assert_int_equal(nonempty, 1);
        }
        ctx_free(&c);
        tl_thread_pool_destroy(pool);
    }
}

/* The header's description of the schedule: "a share of what is left, so
 * the first chunks are long and the last ones `grain`": with threads to
 * share among, the final chunk is at most one grain. (Size 1 is left out:
 * a pool of one has nothing to share, and one chunk [0, n) is all that is
 * left.) */
static void test_final_chunk_is_at_most_one_grain(void **state)
{
    (void)state;
    static const int ns[] = {1, 15, 16, 17, 100, 1021, 4099, 65537, 100003};
    static const int grains[] = {1, 3, 16, 64};
    for (int size = 2; size <= MAX_THREADS; size++) {
        tl_thread_pool *pool = make_pool(size);
        job_ctx c;
        ctx_init(&c, size);
        for (size_t a = 0; a < sizeof ns / sizeof *ns; a++)
            for (size_t b = 0; b < sizeof grains / sizeof *grains; b++) {
                ctx_prepare(&c, ns[a], grains[b], 0);
                run_job(pool, &c, record_chunk);
                check_job(&c, "tail", 1);
            }
        ctx_free(&c);
        tl_thread_pool_destroy(pool);
    }
}

/* Chunks that sleep or yield: a thread descheduled mid-chunk must not have
 * its index handed to another thread, nor its range run twice. */
static void test_sleeping_chunks_keep_thread_indices_exclusive(void **state)
{
    (void)state;
    for (int size = 2; size <= MAX_THREADS; size++) {
        tl_thread_pool *pool = make_pool(size);
        job_ctx c;
        ctx_init(&c, size);
        c.sleep_every = 3;
        c.sleep_us = 200;
        for (int job = 0; job < 4; job++) {
            ctx_prepare(&c, 1500 + 37 * job, 1 + 4 * job, 1);
            run_job(pool, &c, record_chunk);
            check_job(&c, "sleeping chunks", 0);
        }
        ctx_free(&c);
        tl_thread_pool_destroy(pool);
    }
}

/* "shared out among the threads and the caller": with chunks that sleep,
 * the workers get some of them. Not a timing claim: up to 40 jobs for one
 * chunk to land on a worker. */
static void test_workers_take_part(void **state)
{
    (void)state;
    for (int size = 2; size <= 4; size += 2) {
        tl_thread_pool *pool = make_pool(size);
        job_ctx c;
        ctx_init(&c, size);
        c.sleep_every = 1;
        c.sleep_us = 1000;
        int seen_worker = 0;
        for (int job = 0; job < 40 && !seen_worker; job++) {
            ctx_prepare(&c, 64, 1, 1);
            run_job(pool, &c, record_chunk);
            check_job(&c, "workers take part", 0);
            for (size_t k = 0; k < c.n_recs; k++)
                if (c.recs[k].thread != 0 && c.recs[k].begin < c.recs[k].end)
                    seen_worker = 1;
        }
        if (!seen_worker)
            fail_msg("size %d: 40 jobs of 64 sleeping chunks, none ran on a worker", size);
        ctx_free(&c);
        tl_thread_pool_destroy(pool);
    }
}

/* Thousands of tiny jobs back to back, alternating ctx and fn: a worker
 * still finishing one job, or starting it late, would write into the wrong
 * ctx or with the wrong generation. Plain (non-atomic) data both ways: the
 * caller writes gen and the input before the job, the chunks write the
 * output, the caller reads it right after. */
static void test_many_tiny_jobs_back_to_back(void **state)
{
    (void)state;
    static const int sizes[] = {2, 3, 8};
    enum { MAXN = 40 };
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        int size = sizes[s];
        int jobs = size == 8 ? 5000 : 10000;
        tl_thread_pool *pool = make_pool(size);
        job_ctx c[2];
        int in[2][MAXN + 1], out[2][MAXN + 1];
        for (int k = 0; k < 2; k++) {
            ctx_init(&c[k], size);
            c[k].plain_in = in[k];
            c[k].plain_out = out[k];
        }
        for (int j = 0; j < jobs; j++) {
            job_ctx *x = &c[j & 1];
            int n = (j * 7) % (j % 5 == 4 ? MAXN + 1 : 6);
            int grain = 1 + (j / 3) % 4;
            for (int i = 0; i <= MAXN; i++) {
                in[j & 1][i] = j * 31 + i;
                out[j & 1][i] = -1;
            }
            x->gen = j;
            ctx_prepare(x, n, grain, 1);
            run_job(pool, x, (j & 1) ? record_chunk_b : record_chunk);
            for (int i = 0; i < n; i++)
                if (out[j & 1][i] != in[j & 1][i] * 3 + j)
                    fail_msg("size %d, job %d (n %d, grain %d): out[%d] = %d, expected %d",
                             size, j, n, grain, i, out[j & 1][i], in[j & 1][i] * 3 + j);
            for (int i = n; i <= MAXN; i++)
                if (out[j & 1][i] != -1)
                    fail_msg("size %d, job %d (n %d): out[%d] written past n", size, j, n, i);
            check_job(x, "back to back", 0);
            /* the other ctx must have seen no call since its own job */
            assert_int_equal(atomic_load(&c[!(j & 1)].late_call), 0);
        }
        tl_thread_pool_destroy(pool);
        for (int k = 0; k < 2; k++) {
            assert_int_equal(atomic_load(&c[k].late_call), 0);
            ctx_free(&c[k]);
        }
    }
}

/* Large plain arrays written in chunks and read by the caller as soon as
 * tl_parallel_for returns, with no synchronisation of its own. */
static void test_plain_results_visible_after_return(void **state)
{
    (void)state;
    enum { N = 100003 };
    int *in = malloc(N * sizeof *in);
    int *out = malloc(N * sizeof *out);
    assert_non_null(in);
    assert_non_null(out);
    for (int size = 2; size <= MAX_THREADS; size += 2) {
        tl_thread_pool *pool = make_pool(size);
        job_ctx c;
        ctx_init(&c, size);
        c.plain_in = in;
        c.plain_out = out;
        for (int j = 0; j < 12; j++) {
            for (int i = 0; i < N; i++)
                in[i] = i ^ (j * 2654435);
            c.gen = 1000 + j;
            int n = N - j * 977;
            ctx_prepare(&c, n, 1 + (j % 4) * 5, 0);
            run_job(pool, &c, record_chunk);
            for (int i = 0; i < n; i++)
                if (out[i] != in[i] * 3 + 1000 + j)
                    fail_msg("size %d, job %d: out[%d] = %d, expected %d", size, j, i, out[i],
                             in[i] * 3 + 1000 + j);
            check_job(&c, "visibility", 0);
        }
        ctx_free(&c);
        tl_thread_pool_destroy(pool);
    }
    free(in);
    free(out);
}

/* Pools made and destroyed over and over: right after create, right after
 * a job (workers perhaps still spinning), after several jobs. */
static void test_create_destroy_repeatedly(void **state)
{
    (void)state;
    int base = task_count();
    job_ctx c;
    ctx_init(&c, MAX_THREADS);
    for (int k = 0; k < 240; k++) {
        int size = 1 + k % MAX_THREADS;
        tl_thread_pool *pool = make_pool(size);
        c.size = size;
        int jobs = (k / MAX_THREADS) % 3; /* 0, 1 or 2 jobs */
        for (int j = 0; j < jobs; j++) {
            ctx_prepare(&c, 50 + k + j, 1 + j, 1);
            run_job(pool, &c, record_chunk);
            check_job(&c, "create/destroy", 0);
        }
        tl_thread_pool_destroy(pool);
    }
    ctx_free(&c);
    if (base >= 0) {
        int after = task_count_settled(base);
        if (after != base)
            fail_msg("%d threads after 240 create/destroy, %d before", after, base);
    }
}

typedef struct other_caller_arg {
    tl_thread_pool *pool;
    job_ctx *c;
} other_caller_arg;

static void *other_caller(void *varg)
{
    other_caller_arg *a = varg;
    for (int j = 0; j < 20; j++) {
        ctx_prepare(a->c, 3000 + j, 1 + j % 5, 1);
        run_job(a->pool, a->c, record_chunk);
        /* checked by the main thread after join: fail_msg must not run here */
        if (a->c->n_recs > 0)
            qsort(a->c->recs, a->c->n_recs, sizeof *a->c->recs, cmp_rec);
        int next = 0;
        for (size_t k = 0; k < a->c->n_recs; k++)
            if (a->c->recs[k].begin < a->c->recs[k].end) {
                if (a->c->recs[k].begin != next)
                    return (void *)1;
                next = a->c->recs[k].end;
            }
        if (next != a->c->n)
            return (void *)1;
        for (int i = 0; i < a->c->n; i++)
            if (atomic_load(&a->c->hits[i]) != 1)
                return (void *)1;
    }
    return NULL;
}

/* The caller is whoever calls tl_parallel_for, not the thread that made
 * the pool: thread 0 is then that thread. Calls stay serialised (the main
 * thread waits). */
static void test_caller_other_than_creator(void **state)
{
    (void)state;
    for (int size = 1; size <= MAX_THREADS; size += 3) {
        tl_thread_pool *pool = make_pool(size);
        job_ctx c;
        ctx_init(&c, size);
        other_caller_arg arg = {pool, &c};
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, other_caller, &arg), 0);
        void *res = NULL;
        assert_int_equal(pthread_join(t, &res), 0);
        if (res != NULL)
            fail_msg("size %d: a job from another caller thread did not tile [0, %d) once",
                     size, c.n);
        /* the counters cover all 20 jobs */
        check_job(&c, "other caller (last job)", 0);
        /* and back on the creating thread */
        ctx_prepare(&c, 777, 3, 1);
        run_job(pool, &c, record_chunk);
        check_job(&c, "creator again", 0);
        ctx_free(&c);
        tl_thread_pool_destroy(pool);
    }
}

/* n near INT_MAX and grains near it: begin + grain, a share times the
 * number of threads and the like must not overflow. The records alone
 * check the tiling (no per-index counts). Last, so a hang here shows
 * after everything else has reported. */
static void test_n_near_int_max(void **state)
{
    (void)state;
    static const int cases[][2] = {
        {INT_MAX, INT_MAX},       {INT_MAX, INT_MAX - 1},   {INT_MAX, 1 << 30},
        {INT_MAX, (1 << 30) + 1}, {INT_MAX, INT_MAX / 2 + 1}, {INT_MAX - 5, 1 << 20},
        {INT_MAX, 1 << 24},       {INT_MAX - 1, INT_MAX},
    };
    for (int size = 1; size <= MAX_THREADS; size += 3) {
        tl_thread_pool *pool = make_pool(size);
        job_ctx c;
        ctx_init(&c, size);
        for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
            ctx_prepare(&c, cases[k][0], cases[k][1], 0);
            run_job(pool, &c, record_chunk);
            check_job(&c, "near INT_MAX", 0);
        }
        ctx_free(&c);
        tl_thread_pool_destroy(pool);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_size_counts_the_caller),
        cmocka_unit_test(test_worker_threads_exist_as_promised),
        cmocka_unit_test(test_size_one_runs_everything_on_the_caller),
        cmocka_unit_test(test_cover_exactly_once_in_grain_aligned_chunks),
        cmocka_unit_test(test_grain_larger_than_n_is_one_chunk),
        cmocka_unit_test(test_final_chunk_is_at_most_one_grain),
        cmocka_unit_test(test_sleeping_chunks_keep_thread_indices_exclusive),
        cmocka_unit_test(test_workers_take_part),
        cmocka_unit_test(test_many_tiny_jobs_back_to_back),
        cmocka_unit_test(test_plain_results_visible_after_return),
        cmocka_unit_test(test_create_destroy_repeatedly),
        cmocka_unit_test(test_caller_other_than_creator),
        cmocka_unit_test(test_n_near_int_max),
    };
    return ilab_test_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
