#include "thread_pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#define SPIN_ITERATIONS 20000
/* The caller gives its core away sooner: a worker still busy after this long
 * has usually been descheduled, and may be waiting for this very core. */
#define CALLER_SPIN_ITERATIONS 2000

struct tl_thread_pool {
    int n_threads;
    pthread_t *workers;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    atomic_uint job;      /* incremented per parallel_for; workers watch it */
    atomic_int pending;   /* workers still running the current job */
    atomic_int quit;
    /* the current job */
    tl_task_fn fn;
    void *ctx;
    int n, grain;
    atomic_int next; /* first index not yet handed out */
};

typedef struct worker_arg {
    tl_thread_pool *pool;
    int index;
} worker_arg;

/* Chunks of `grain` are handed out first come, first served: on a machine
 * shared with other work a descheduled thread does not hold up the rest.
 * Which thread runs a chunk never changes what the chunk computes. */
static void run_chunks(tl_thread_pool *p, int index)
{
    for (;;) {
        int begin = atomic_fetch_add(&p->next, p->grain);
        if (begin >= p->n)
            return;
        int end = begin + p->grain < p->n ? begin + p->grain : p->n;
        p->fn(p->ctx, begin, end, index);
    }
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
        run_chunks(p, index);
        atomic_fetch_sub(&p->pending, 1);
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

void tl_parallel_for(tl_thread_pool *p, int n, int grain, tl_task_fn fn, void *ctx)
{
    if (grain < 1)
        grain = 1;
    if (!p || p->n_threads == 1 || n <= grain) {
        if (n > 0)
            fn(ctx, 0, n, 0);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    p->grain = grain;
    atomic_store(&p->next, 0);
    atomic_store(&p->pending, p->n_threads - 1);
    pthread_mutex_lock(&p->lock);
    atomic_fetch_add(&p->job, 1);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    run_chunks(p, 0);
    /* Yield after a while: on a busy machine a worker may be descheduled. */
    for (int spins = 0; atomic_load(&p->pending) > 0; spins++)
        if (spins > CALLER_SPIN_ITERATIONS)
            sched_yield();
}
