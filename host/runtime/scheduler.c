/* The scheduler thread: sleeps until there is work, ends requests cancelled
 * while waiting, admits waiting requests into the running list (up to
 * max_running; with cache.stats, only while the prompt plus the watermark
 * fits the free capacity), and then either runs one host-sampling step
 * (step.c) or, for sampling: backend, starts and reaps generate() workers
 * (generate_worker.c).
 * Decisions are made under `mu`; events and backend calls happen after it
 * is released. */
#include <stdlib.h>

#include "engine_internal.h"
#include "metrics.h"

/* What one pass decided under `mu`, acted on after it is released. */
typedef struct pass {
    ilab_req **done; /* workers that finished, to join and free */
    int n_done;
    ilab_req **spawn; /* admitted, to start a worker for */
    int n_spawn;
    ilab_req **cancelled; /* left the waiting queue cancelled (or stopping) */
    int n_cancelled;
    bool know_room;     /* cache.stats: `room` is the backend's free capacity now */
    bool room_unread;   /* cache.stats, but not read this pass: admit nothing */
    int64_t room;       /* positions, less what this pass admitted */
    bool short_of_room; /* the head waits for capacity, not for a slot */
} pass;

static bool any_worker_done(const ilab_engine *e)
{
    for (int i = 0; i < e->n_running; i++)
        if (atomic_load(&e->running[i]->worker_done))
            return true;
    return false;
}

/* Is there anything for the scheduler to do? Under mu. */
static bool work_pending(const ilab_engine *e)
{
    if (e->stopping) /* with workers still out, sleep until one finishes */
        return !e->backend_sampling || e->n_running == 0 || e->n_waiting > 0 || any_worker_done(e);
    if (e->n_waiting > 0 && e->n_running < e->cfg.max_running)
        return true;
    for (const ilab_req *r = e->wait_head; r; r = r->next)
        if (atomic_load(&r->cancel))
            return true;
    if (!e->backend_sampling)
        return e->n_running > 0;
    return any_worker_done(e);
}

/* Cancelled while waiting: end them now, not when a slot frees; when
 * stopping, everything waiting goes. Under mu. */
static void take_cancelled_waiting(ilab_engine *e, bool stopping, pass *p)
{
    ilab_req **link = &e->wait_head;
    e->wait_tail = NULL;
    while (*link) {
        ilab_req *r = *link;
        if (atomic_load(&r->cancel) || stopping) {
            *link = r->next;
            e->n_waiting--; /* the terminal event takes it off the gauge */
            p->cancelled[p->n_cancelled++] = r;
        } else {
            e->wait_tail = r;
            link = &r->next;
        }
    }
}

/* Does the head request fit the free capacity (with cache.stats)? It needs
 * its prompt (plus generated tokens, when resumed) in whole blocks, and the
 * watermark stays free so that running sequences can still grow. With
 * nothing running it goes in regardless: alone it fits, frees the prefix
 * cache's blocks, or fails naming the capacity (step_eval.c). Under mu. */
static bool fits(ilab_engine *e, ilab_req *r, pass *p)
{
    if (p->room_unread)
        return false; /* arrived after this pass's read was skipped: the next pass reads */
    if (!p->know_room)
        return true;
    int64_t need = ilab_engine_admission_need(e, r);
    if (e->n_running > 0 && need + e->kv_watermark > p->room) {
        p->short_of_room = true;
        return false;
    }
    p->room -= need;
    return true;
}

/* Waiting requests join the running list, oldest first (preempted ones are
 * at the front), while there is room. Under mu. */
static void admit_waiting(ilab_engine *e, pass *p)
{
    /* After a preemption the cache is known to be full: nothing new starts
     * until a running request ends (or none runs). */
    while (e->wait_head && e->n_running < e->cfg.max_running &&
           !(e->admit_hold && e->n_running > 0) && fits(e, e->wait_head, p)) {
        ilab_req *r = e->wait_head;
        e->wait_head = r->next;
        if (!e->wait_head)
            e->wait_tail = NULL;
        r->next = NULL;
        e->n_waiting--;
        e->running[e->n_running++] = r;
        ilab_metrics_move_request(1, -1);
        r->gauge = ILAB_REQ_RUNNING;
        if (e->backend_sampling)
            p->spawn[p->n_spawn++] = r;
    }
}

/* How often the usage gauge is refreshed while nothing waits. */
#define GAUGE_REFRESH_NS 50000000ull

/* cache_stats() is a backend call, a round trip when the backend is a
 * worker process: a decode step must not pay it. It is read when a request
 * waits to be admitted, on the pass after one started or ended, and every
 * GAUGE_REFRESH_NS for the gauge. */
static void read_room(ilab_engine *e, pass *p, bool running_changed, uint64_t *last_read)
{
    pthread_mutex_lock(&e->mu);
    bool waiting = e->n_waiting > 0;
    pthread_mutex_unlock(&e->mu);
    uint64_t now = ilab_now_ns();
    p->room_unread = false;
    p->know_room = false;
    if (!e->cache_stats)
        return;
    if (!waiting && !running_changed && now - *last_read < GAUGE_REFRESH_NS) {
        p->room_unread = true;
        return;
    }
    *last_read = now;
    p->know_room = ilab_engine_capacity_read(e, &p->room);
}

/* The pass's decisions, outside the lock. */
static void act_on_pass(ilab_engine *e, pass *p)
{
    for (int i = 0; i < p->n_cancelled; i++) {
        ilab_req *r = p->cancelled[i];
        ilab_req_emit_terminal(r, ILAB_FINISH_CANCELLED, ILAB_OK, NULL, NULL, 0);
        ilab_req_free(r);
    }
    for (int i = 0; i < p->n_done; i++) {
        pthread_join(p->done[i]->worker, NULL);
        ilab_req_free(p->done[i]);
    }
    for (int i = 0; i < p->n_spawn; i++)
        ilab_engine_start_worker(e, p->spawn[i]);
}

/* Stopping with host sampling: end what still runs; retire() removes each
 * from the list. */
static void cancel_running(ilab_engine *e)
{
    for (;;) {
        pthread_mutex_lock(&e->mu);
        ilab_req *r = e->n_running ? e->running[0] : NULL;
        pthread_mutex_unlock(&e->mu);
        if (!r)
            break;
        ilab_engine_retire(e, r, ILAB_FINISH_CANCELLED, ILAB_OK, NULL, NULL, 0);
    }
}

void *ilab_engine_scheduler_main(void *arg)
{
    ilab_engine *e = arg;
    size_t cap = (size_t)e->cfg.max_running + (size_t)e->cfg.max_waiting + 1;
    pass p = {.done = malloc(cap * sizeof *p.done),
              .spawn = malloc(cap * sizeof *p.spawn),
              .cancelled = malloc(cap * sizeof *p.cancelled)};
    /* Nothing sane to do without the lists; leave the queue to destroy(). */
    bool ok = p.done && p.spawn && p.cancelled;
    int last_running = -1;
    uint64_t last_read = 0;
    while (ok) {
        p.n_done = p.n_spawn = p.n_cancelled = 0;
        p.short_of_room = false;
        /* Only this thread changes the backend's cache, so what it says now
         * still holds when admission runs below. */
        pthread_mutex_lock(&e->mu);
        bool running_changed = e->n_running != last_running;
        last_running = e->n_running;
        pthread_mutex_unlock(&e->mu);
        read_room(e, &p, running_changed, &last_read);
        pthread_mutex_lock(&e->mu);
        while (!work_pending(e))
            pthread_cond_wait(&e->cv, &e->mu);
        bool stopping = e->stopping;
        if (e->backend_sampling)
            ilab_engine_reap_workers(e, p.done, &p.n_done);
        take_cancelled_waiting(e, stopping, &p);
        if (!stopping)
            admit_waiting(e, &p);
        bool idle = e->n_running == 0;
        pthread_mutex_unlock(&e->mu);

        act_on_pass(e, &p);
        /* Waiting for room while the prefix cache holds some: it gives way
         * first, one entry a pass, as under OUT_OF_MEMORY. */
        if (p.short_of_room && e->prefix)
            ilab_prefix_cache_evict_lru(e->prefix);
        if (stopping) {
            if (!e->backend_sampling) {
                cancel_running(e);
                break;
            }
            if (idle)
                break;
            continue; /* workers were cancelled by destroy(); wait for them */
        }
        if (!e->backend_sampling && !idle)
            ilab_engine_host_step(e);
    }
    free(p.done);
    free(p.spawn);
    free(p.cancelled);
    return NULL;
}
