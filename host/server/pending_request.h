/* A request in flight between threads: the engine's scheduler thread pushes
 * events into it (ilab_pending_on_event, the engine callback), and the HTTP
 * side pops them (ilab_pending_pop_or_park) to write a response. One
 * ilab_pending carries every choice of a request (n >= 1 engine requests);
 * each event says which choice it belongs to.
 *
 * Waiting: the HTTP side never blocks. When no event is queued it "parks"
 * (suspends its libmicrohttpd connection) under the pending's lock, and the
 * next event "wakes" it (resumes the connection) under the same lock, so a
 * wake can never come before its park.
 *
 * Ownership: 1 + n references: the HTTP side's, and one per choice for the
 * engine side, dropped when that choice's terminal event (FINISH / ERROR)
 * arrives or by the caller when submit() refuses it. Whoever drops the last
 * frees it. */
#ifndef ILAB_SERVER_PENDING_REQUEST_H
#define ILAB_SERVER_PENDING_REQUEST_H

#include <stdbool.h>
#include <stdint.h>

#include "inferlab/inferlab.h"

/* An owned copy of one ilab_event_t. */
typedef struct ilab_pending_event {
    uint32_t index;             /* the choice */
    ilab_event_type type;
    int32_t token;
    char *text;                 /* owned, NUL-terminated (may be ""); TOKEN's piece, or
                                   FINISH's held-back tail */
    size_t text_len;
    float logprob;
    ilab_logprob_t *top;        /* owned */
    uint32_t n_top;
    ilab_finish_reason finish_reason;
    uint32_t prompt_tokens;
    uint32_t completion_tokens;
    ilab_status status;
    char *message;              /* owned; ERROR only */
    struct ilab_pending_event *next;
} ilab_pending_event;

void ilab_pending_event_free(ilab_pending_event *e);

typedef struct ilab_pending ilab_pending;

/* Called on the scheduler thread with each choice's terminal event (the
 * server's in-flight gauge and finish counters). */
typedef void (*ilab_pending_done_fn)(void *ctx, const ilab_event_t *terminal);

/* Park and wake hooks (see above); both are called with the pending's lock
 * held and must not call back into it. */
typedef struct ilab_pending_waker {
    void (*park)(void *ctx);
    void (*wake)(void *ctx);
    void *ctx;
} ilab_pending_waker;

/* A new request of `n_choices` (>= 1) holding every reference. */
ilab_pending *ilab_pending_new(uint32_t n_choices, ilab_pending_done_fn on_done,
                               void *done_ctx, const ilab_pending_waker *waker);

/* The engine callback's user_data for choice `index`. */
void *ilab_pending_choice(ilab_pending *p, uint32_t index);

/* The engine callback (ilab_event_fn): `user_data` from ilab_pending_choice.
 * Returns nonzero (cancel) once the HTTP side has abandoned the request. */
int ilab_pending_on_event(void *user_data, const ilab_event_t *event);

/* The engine never accepted choice `index`: drop its reference. */
void ilab_pending_refused(ilab_pending *p, uint32_t index);

/* The next event (the caller frees it with ilab_pending_event_free); or,
 * when none is queued and some choice has not ended, park and return NULL.
 * Returns NULL without parking when every terminal event was popped. HTTP
 * side. */
ilab_pending_event *ilab_pending_pop_or_park(ilab_pending *p);

/* Wake the HTTP side if it is parked (shutdown, or a client that left).
 * Returns whether it was. Any thread. */
bool ilab_pending_unpark(ilab_pending *p);

/* True once every choice's terminal event has been popped. */
bool ilab_pending_finished(const ilab_pending *p);

/* True once choice `index`'s terminal event has been popped. */
bool ilab_pending_choice_finished(const ilab_pending *p, uint32_t index);

/* The HTTP side is done (response written, or the client left): later
 * events are dropped and the callback asks the engine to cancel. Drops the
 * HTTP side's reference; `p` must not be used afterwards. Must not be
 * parked. */
void ilab_pending_abandon(ilab_pending *p);

/* The engine's id for choice `index`, set by the submitter after submit(). */
void ilab_pending_set_id(ilab_pending *p, uint32_t index, uint64_t request_id);
uint64_t ilab_pending_id(const ilab_pending *p, uint32_t index);

#endif
