#include "thread_pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#define SPIN_ITERATIONS 20000
/* The caller gives its core away sooner: a worker still busy after this long
 * has usually been descheduled, and may be waiting for this very core. */
#define CALLER_SPIN_ITERATIONS 2000

/* One parallel_for. Jobs alternate between two slots, so a worker that
 * wakes late for job k can still look at k's slot (and find nothing left)
 * while the caller fills the other slot for k + 1. */
typedef struct job_slot {
    tl_task_fn fn;
    void *ctx;
    int n, grain;
    atomic_int next;   /* first index not yet handed out */
    atomic_int active; /* threads between arriving at this job and leaving it */
} job_slot;

struct tl_thread_pool {
    int n_threads;
    pthread_t *workers;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    atomic_uint job; /* incremented per parallel_for; workers watch it */
    atomic_int quit;
    job_slot slots[2]; /* job k uses slots[k & 1] */
};

typedef struct worker_arg {
    tl_thread_pool *pool;
    int index;
} worker_arg;

/* Chunks are handed out first come, first served: on a machine shared
 * with other work a descheduled thread does not hold up the rest. Each
 * chunk is a share of what is left (a multiple of `grain`, at least one):
 * large at first, so each thread streams long runs of rows (the K kernels'
 * prefetch stops at a chunk's end), and small at the end, so the threads
 * finish together. Which thread runs a chunk never changes what the chunk
 * computes. */
static void run_chunks(job_slot *s, int threads, int index)
{
    int begin = atomic_load(&s->next);
    for (;;) {
        if (begin >= s->n)
            return;
        int left = s->n - begin;
        int size = left / (2 * threads) / s->grain * s->grain;
        if (size < s->grain)
            size = s->grain;
        if (size > left)
            size = left; /* the last chunk; and begin + size stays <= n, so no int overflow */
        if (!atomic_compare_exchange_weak(&s->next, &begin, begin + size))
            continue; /* begin now holds the current value */
        s->fn(s->ctx, begin, begin + size, index);
        begin = atomic_load(&s->next);
    }
}

/* A worker joins job `job` only if it is still the current one once it has
 * announced itself in `active`: the caller waits for `active` to drain, not
 * for every worker to show up, so a worker that is asleep or descheduled
 * when a short job is published costs the caller nothing. */
static void join_job(tl_thread_pool *p, unsigned job, int index)
{
    job_slot *s = &p->slots[job & 1];
    atomic_fetch_add(&s->active, 1);
    if (atomic_load(&p->job) == job)
        run_chunks(s, p->n_threads, index);
    atomic_fetch_sub(&s->active, 1);
}

static void *worker_main(void *argp)
{
    worker_arg *arg = argp;
    tl_thread_pool *p = arg->pool;
    int index = arg->index;
    free(arg);
    unsigned seen = 0;
    for (;;) {
        unsigned job = atomic_load(&p->job);
        for (int i = 0; job == seen && i < SPIN_ITERATIONS; i++) {
            __asm__ __volatile__("" ::: "memory");
            job = atomic_load(&p->job);
        }
        if (job == seen) {
            pthread_mutex_lock(&p->lock);
            while ((job = atomic_load(&p->job)) == seen && !atomic_load(&p->quit))
                pthread_cond_wait(&p->wake, &p->lock);
            pthread_mutex_unlock(&p->lock);
        }
        if (atomic_load(&p->quit))
            return NULL;
        seen = job;
        join_job(p, job, index);
    }
}

ilab_status tl_thread_pool_create(int n_threads, tl_thread_pool **out)
{
    tl_thread_pool *p = calloc(1, sizeof *p);
    if (!p)
        return ILAB_OUT_OF_MEMORY;
    p->n_threads = n_threads < 1 ? 1 : n_threads;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    p->workers = calloc((size_t)p->n_threads, sizeof *p->workers);
    if (!p->workers) {
        free(p);
        return ILAB_OUT_OF_MEMORY;
    }
    for (int i = 1; i < p->n_threads; i++) {
        worker_arg *a = malloc(sizeof *a);
        if (!a || (a->pool = p, a->index = i,
                   pthread_create(&p->workers[i], NULL, worker_main, a) != 0)) {
            free(a);
            p->n_threads = i; /* destroy joins only the ones started */
            tl_thread_pool_destroy(p);
            return ILAB_INTERNAL;
        }
    }
    *out = p;
    return ILAB_OK;
}

void tl_thread_pool_destroy(tl_thread_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    atomic_store(&p->quit, 1);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    for (int i = 1; i < p->n_threads; i++)
        pthread_join(p->workers[i], NULL);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->wake);
    free(p->workers);
    free(p);
}

int tl_thread_pool_size(const tl_thread_pool *p)
{
    return p ? p->n_threads : 1;
}

static void wait_drained(const job_slot *s)
{
    /* Yield after a while: on a busy machine a worker may be descheduled
     * in the middle of its chunk. */
    for (int spins = 0; atomic_load(&s->active) > 0; spins++)
        if (spins > CALLER_SPIN_ITERATIONS)
            sched_yield();
}

void tl_parallel_for(tl_thread_pool *p, int n, int grain, tl_task_fn fn, void *ctx)
{
    if (grain < 1)
        grain = 1;
    if (!p || p->n_threads == 1 || n <= grain) {
        if (n > 0)
            fn(ctx, 0, n, 0);
        return;
    }
    unsigned job = atomic_load(&p->job) + 1;
    job_slot *s = &p->slots[job & 1];
    /* A worker that arrived late for job - 2 may still be checking it. */
    wait_drained(s);
    s->fn = fn;
    s->ctx = ctx;
    s->n = n;
    s->grain = grain;
    atomic_store(&s->next, 0);
    pthread_mutex_lock(&p->lock);
    atomic_store(&p->job, job);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    run_chunks(s, p->n_threads, 0);
    /* Every chunk is handed out; wait for the ones still running. */
    wait_drained(s);
}
