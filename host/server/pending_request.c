/* The event queue between the scheduler thread and the HTTP side. */
#include "pending_request.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct pending_choice {
    ilab_pending *p;
    uint32_t index;
    uint64_t request_id;
    bool terminal_popped;
} pending_choice;

struct ilab_pending {
    pthread_mutex_t mu;
    ilab_pending_event *head, *tail; /* queued, not yet popped */
    int refs;                        /* HTTP side + one per choice still in the engine */
    bool abandoned;                  /* the HTTP side is gone */
    bool parked;                     /* the HTTP side waits for the next event */
    uint32_t n_choices, n_popped;    /* terminal events popped so far */
    ilab_pending_done_fn on_done;
    void *done_ctx;
    ilab_pending_waker waker;
    pending_choice choices[];
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

ilab_pending *ilab_pending_new(uint32_t n_choices, ilab_pending_done_fn on_done,
                               void *done_ctx, const ilab_pending_waker *waker)
{
    if (n_choices == 0)
        return NULL;
    ilab_pending *p = calloc(1, sizeof *p + n_choices * sizeof p->choices[0]);
    if (!p)
        return NULL;
    pthread_mutex_init(&p->mu, NULL);
    p->refs = 1 + (int)n_choices;
    p->n_choices = n_choices;
    p->on_done = on_done;
    p->done_ctx = done_ctx;
    if (waker)
        p->waker = *waker;
    for (uint32_t i = 0; i < n_choices; i++)
        p->choices[i] = (pending_choice){.p = p, .index = i};
    return p;
}

void *ilab_pending_choice(ilab_pending *p, uint32_t index)
{
    return index < p->n_choices ? &p->choices[index] : NULL;
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
    pthread_mutex_destroy(&p->mu);
    free(p);
}

static ilab_pending_event *copy_event(const ilab_event_t *ev, uint32_t index)
{
    ilab_pending_event *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    e->index = index;
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

/* Under p->mu: the parked HTTP side goes on. */
static void wake_locked(ilab_pending *p)
{
    if (!p->parked)
        return;
    p->parked = false;
    if (p->waker.wake)
        p->waker.wake(p->waker.ctx);
}

int ilab_pending_on_event(void *user_data, const ilab_event_t *ev)
{
    pending_choice *ch = user_data;
    ilab_pending *p = ch->p;
    bool terminal = ev->type == ILAB_EVENT_FINISH || ev->type == ILAB_EVENT_ERROR;
    pthread_mutex_lock(&p->mu);
    bool abandoned = p->abandoned;
    pthread_mutex_unlock(&p->mu);

    ilab_pending_event *copy = abandoned ? NULL : copy_event(ev, ch->index);
    pthread_mutex_lock(&p->mu);
    if (copy) {
        if (p->tail)
            p->tail->next = copy;
        else
            p->head = copy;
        p->tail = copy;
    }
    /* A token lost to out-of-memory still wakes the HTTP side: the request
     * is being cancelled and its terminal event will follow. */
    wake_locked(p);
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

void ilab_pending_refused(ilab_pending *p, uint32_t index)
{
    pthread_mutex_lock(&p->mu);
    if (index < p->n_choices && !p->choices[index].terminal_popped) {
        /* Nothing will ever come from it: count it as ended. */
        p->choices[index].terminal_popped = true;
        p->n_popped++;
    }
    pthread_mutex_unlock(&p->mu);
    pending_unref(p);
}

ilab_pending_event *ilab_pending_pop_or_park(ilab_pending *p)
{
    pthread_mutex_lock(&p->mu);
    ilab_pending_event *e = p->head;
    if (e) {
        p->head = e->next;
        if (!p->head)
            p->tail = NULL;
        e->next = NULL;
        if (e->type != ILAB_EVENT_TOKEN && e->index < p->n_choices &&
            !p->choices[e->index].terminal_popped) {
            p->choices[e->index].terminal_popped = true;
            p->n_popped++;
        }
    } else if (p->n_popped < p->n_choices && !p->parked) {
        p->parked = true;
        if (p->waker.park)
            p->waker.park(p->waker.ctx);
    }
    pthread_mutex_unlock(&p->mu);
    return e;
}

bool ilab_pending_unpark(ilab_pending *p)
{
    pthread_mutex_lock(&p->mu);
    bool was = p->parked;
    wake_locked(p);
    pthread_mutex_unlock(&p->mu);
    return was;
}

bool ilab_pending_finished(const ilab_pending *p)
{
    ilab_pending *mp = (ilab_pending *)p;
    pthread_mutex_lock(&mp->mu);
    bool done = mp->n_popped == mp->n_choices;
    pthread_mutex_unlock(&mp->mu);
    return done;
}

bool ilab_pending_choice_finished(const ilab_pending *p, uint32_t index)
{
    ilab_pending *mp = (ilab_pending *)p;
    pthread_mutex_lock(&mp->mu);
    bool done = index >= mp->n_choices || mp->choices[index].terminal_popped;
    pthread_mutex_unlock(&mp->mu);
    return done;
}

void ilab_pending_abandon(ilab_pending *p)
{
    pthread_mutex_lock(&p->mu);
    p->abandoned = true;
    p->parked = false;
    pthread_mutex_unlock(&p->mu);
    pending_unref(p);
}

void ilab_pending_set_id(ilab_pending *p, uint32_t index, uint64_t request_id)
{
    pthread_mutex_lock(&p->mu);
    if (index < p->n_choices)
        p->choices[index].request_id = request_id;
    pthread_mutex_unlock(&p->mu);
}

uint64_t ilab_pending_id(const ilab_pending *p, uint32_t index)
{
    ilab_pending *mp = (ilab_pending *)p;
    pthread_mutex_lock(&mp->mu);
    uint64_t id = index < mp->n_choices ? mp->choices[index].request_id : 0;
    pthread_mutex_unlock(&mp->mu);
    return id;
}
