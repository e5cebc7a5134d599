/* The event queue between the scheduler thread and a connection thread. */
#include "pending_request.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct ilab_pending {
    pthread_mutex_t mu;
    pthread_cond_t cond;
    ilab_pending_event *head, *tail; /* queued, not yet popped */
    int refs;                        /* engine side + connection side */
    bool abandoned;                  /* the connection side is gone */
    bool terminal_popped;
    uint64_t request_id;
    ilab_pending_done_fn on_done;
    void *done_ctx;
};

void ilab_pending_event_free(ilab_pending_event *e)
{
    if (!e)
        return;
    free(e->text);
    free(e->top);
    free(e->message);
    free(e);
}

ilab_pending *ilab_pending_new(ilab_pending_done_fn on_done, void *done_ctx)
{
    ilab_pending *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    pthread_mutex_init(&p->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&p->cond, &ca);
    pthread_condattr_destroy(&ca);
    p->refs = 2;
    p->on_done = on_done;
    p->done_ctx = done_ctx;
    return p;
}

static void pending_unref(ilab_pending *p)
{
    pthread_mutex_lock(&p->mu);
    int left = --p->refs;
    pthread_mutex_unlock(&p->mu);
    if (left > 0)
        return;
    while (p->head) {
        ilab_pending_event *next = p->head->next;
        ilab_pending_event_free(p->head);
        p->head = next;
    }
    pthread_cond_destroy(&p->cond);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

static ilab_pending_event *copy_event(const ilab_event_t *ev)
{
    ilab_pending_event *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    e->type = ev->type;
    e->token = ev->token;
    e->logprob = ev->logprob;
    e->finish_reason = ev->finish_reason;
    e->prompt_tokens = ev->prompt_tokens;
    e->completion_tokens = ev->completion_tokens;
    e->status = ev->status;
    /* FINISH carries text too: what the engine held back (a possible stop
     * string prefix, half a code point) when the stream ended on EOS or a
     * stop token id. */
    bool has_text = ev->type == ILAB_EVENT_TOKEN || ev->type == ILAB_EVENT_FINISH;
    size_t tl = has_text && ev->text ? ev->text_len : 0;
    e->text = malloc(tl + 1);
    if (!e->text)
        goto fail;
    if (tl)
        memcpy(e->text, ev->text, tl);
    e->text[tl] = '\0';
    e->text_len = tl;
    if (ev->type == ILAB_EVENT_TOKEN && ev->n_top_logprobs && ev->top_logprobs) {
        e->top = malloc(ev->n_top_logprobs * sizeof *e->top);
        if (!e->top)
            goto fail;
        memcpy(e->top, ev->top_logprobs, ev->n_top_logprobs * sizeof *e->top);
        e->n_top = ev->n_top_logprobs;
    }
    if (ev->type == ILAB_EVENT_ERROR) {
        e->message = strdup(ev->message && ev->message[0] ? ev->message : "generation failed");
        if (!e->message)
            goto fail;
    }
    return e;
fail:
    ilab_pending_event_free(e);
    return NULL;
}

int ilab_pending_on_event(void *user_data, const ilab_event_t *ev)
{
    ilab_pending *p = user_data;
    bool terminal = ev->type == ILAB_EVENT_FINISH || ev->type == ILAB_EVENT_ERROR;
    pthread_mutex_lock(&p->mu);
    bool abandoned = p->abandoned;
    pthread_mutex_unlock(&p->mu);

    ilab_pending_event *copy = abandoned ? NULL : copy_event(ev);
    pthread_mutex_lock(&p->mu);
    if (copy) {
        if (p->tail)
            p->tail->next = copy;
        else
            p->head = copy;
        p->tail = copy;
        pthread_cond_signal(&p->cond);
    }
    pthread_mutex_unlock(&p->mu);

    if (terminal) {
        if (p->on_done)
            p->on_done(p->done_ctx, ev);
        pending_unref(p);
        return 0;
    }
    /* Out of memory copying a token would corrupt the stream: cancel it. */
    return abandoned || !copy;
}

void ilab_pending_refused(ilab_pending *p)
{
    pending_unref(p);
}

ilab_pending_event *ilab_pending_next(ilab_pending *p, int timeout_ms)
{
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += timeout_ms / 1000;
    deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&p->mu);
    while (!p->head) {
        if (pthread_cond_timedwait(&p->cond, &p->mu, &deadline) == ETIMEDOUT)
            break;
    }
    ilab_pending_event *e = p->head;
    if (e) {
        p->head = e->next;
        if (!p->head)
            p->tail = NULL;
        e->next = NULL;
        if (e->type != ILAB_EVENT_TOKEN)
            p->terminal_popped = true;
    }
    pthread_mutex_unlock(&p->mu);
    return e;
}

bool ilab_pending_finished(const ilab_pending *p)
{
    ilab_pending *mp = (ilab_pending *)p;
    pthread_mutex_lock(&mp->mu);
    bool done = mp->terminal_popped;
    pthread_mutex_unlock(&mp->mu);
    return done;
}

void ilab_pending_abandon(ilab_pending *p)
{
    pthread_mutex_lock(&p->mu);
    p->abandoned = true;
    pthread_mutex_unlock(&p->mu);
    pending_unref(p);
}

void ilab_pending_set_id(ilab_pending *p, uint64_t request_id)
{
    pthread_mutex_lock(&p->mu);
    p->request_id = request_id;
    pthread_mutex_unlock(&p->mu);
}

uint64_t ilab_pending_id(const ilab_pending *p)
{
    ilab_pending *mp = (ilab_pending *)p;
    pthread_mutex_lock(&mp->mu);
    uint64_t id = mp->request_id;
    pthread_mutex_unlock(&mp->mu);
    return id;
}
