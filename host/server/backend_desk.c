/* The front desk of a backend (backend_desk.h): one thread, a FIFO of
 * jobs, and the park/wake handshake of a job's connection.
 *
 * The handshake is the one ilab_pending uses for engine events: the HTTP
 * side suspends the connection under the job's lock only while the work is
 * not done, and the desk resumes it under the same lock only if it was
 * suspended, so a resume never comes before its suspend. */
#include "backend_desk.h"

#include <pthread.h>
#include <stdlib.h>

#include "server_internal.h"

typedef struct desk_job {
    ilab_server *s;
    struct MHD_Connection *c;
    ilab_desk_work_fn work;
    ilab_continue_fn answer;
    void (*release)(void *ctx);
    void *ctx;
    pthread_mutex_t mu;       /* guards the three flags */
    bool done;                /* work() has returned */
    bool parked;              /* the connection is suspended, waiting for it */
    bool abandoned;           /* the request ended first: the desk frees the job */
    struct desk_job *next;    /* the desk's queue */
} desk_job;

struct ilab_desk {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    desk_job *head, *tail;    /* queued, not yet running */
    bool stopping;
    pthread_t thread;
};

/* Shutdown waits for these requests as it does for generations: until the
 * request has ended, its answer sent. */
static void requests_add(ilab_server *s, int delta)
{
    pthread_mutex_lock(&s->stats_mu);
    s->desk_requests += delta;
    pthread_cond_broadcast(&s->stats_cond);
    pthread_mutex_unlock(&s->stats_mu);
}

static void job_free(desk_job *j)
{
    if (j->release)
        j->release(j->ctx);
    requests_add(j->s, -1);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

/* Desk thread: the work, then the connection's wake-up. */
static void job_run(desk_job *j)
{
    j->work(j->ctx);
    pthread_mutex_lock(&j->mu);
    j->done = true;
    bool abandoned = j->abandoned;
    if (j->parked) {
        j->parked = false;
        MHD_resume_connection(j->c);
    }
    pthread_mutex_unlock(&j->mu);
    if (abandoned)
        job_free(j);
}

static void *desk_main(void *arg)
{
    ilab_desk *d = arg;
    pthread_mutex_lock(&d->mu);
    for (;;) {
        desk_job *j = d->head;
        if (!j) {
            if (d->stopping)
                break;
            pthread_cond_wait(&d->cv, &d->mu);
            continue;
        }
        d->head = j->next;
        if (!d->head)
            d->tail = NULL;
        pthread_mutex_unlock(&d->mu);
        job_run(j);
        pthread_mutex_lock(&d->mu);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

ilab_desk *ilab_desk_start(void)
{
    ilab_desk *d = calloc(1, sizeof *d);
    if (!d)
        return NULL;
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cv, NULL);
    if (pthread_create(&d->thread, NULL, desk_main, d) != 0) {
        pthread_cond_destroy(&d->cv);
        pthread_mutex_destroy(&d->mu);
        free(d);
        return NULL;
    }
    return d;
}

void ilab_desk_stop(ilab_desk *d)
{
    if (!d)
        return;
    pthread_mutex_lock(&d->mu);
    d->stopping = true;
    pthread_cond_signal(&d->cv);
    pthread_mutex_unlock(&d->mu);
    pthread_join(d->thread, NULL);
    pthread_cond_destroy(&d->cv);
    pthread_mutex_destroy(&d->mu);
    free(d);
}

/* HTTP side, each time the access handler is called for the request. */
static enum MHD_Result job_continue(ilab_server *s, struct MHD_Connection *c, void *ctx)
{
    desk_job *j = ctx;
    pthread_mutex_lock(&j->mu);
    if (!j->done) {
        j->parked = true;
        MHD_suspend_connection(c);
        pthread_mutex_unlock(&j->mu);
        return MHD_YES;
    }
    pthread_mutex_unlock(&j->mu);
    return j->answer(s, c, j->ctx);
}

/* The request ended. Only a daemon stopped with the connection still
 * suspended ends it before the work did; the desk then frees the job. */
static void job_release(void *ctx)
{
    desk_job *j = ctx;
    pthread_mutex_lock(&j->mu);
    bool done = j->done;
    j->abandoned = !done;
    pthread_mutex_unlock(&j->mu);
    if (done)
        job_free(j);
}

static bool desk_post(ilab_desk *d, desk_job *j)
{
    pthread_mutex_lock(&d->mu);
    bool open = !d->stopping;
    if (open) {
        if (d->tail)
            d->tail->next = j;
        else
            d->head = j;
        d->tail = j;
        pthread_cond_signal(&d->cv);
    }
    pthread_mutex_unlock(&d->mu);
    return open;
}

enum MHD_Result ilab_desk_defer(ilab_server *s, struct MHD_Connection *c,
                                const ilab_http_request *req, ilab_desk *d,
                                ilab_desk_work_fn work, ilab_continue_fn answer,
                                void (*release)(void *ctx), void *ctx)
{
    desk_job *j = calloc(1, sizeof *j);
    if (!j) {
        release(ctx);
        ilab_api_error e;
        ilab_api_fail(&e, 500, NULL, "out of memory");
        return ilab_server_send_error(s, c, &e);
    }
    *j = (desk_job){.s = s, .c = c, .work = work, .answer = answer, .release = release,
                    .ctx = ctx};
    pthread_mutex_init(&j->mu, NULL);
    ilab_http_request_defer(req, job_continue, job_release, j);
    requests_add(s, 1);
    if (!d || !desk_post(d, j))
        job_run(j); /* no desk: the work runs on this thread */
    return job_continue(s, c, j);
}
