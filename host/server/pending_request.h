/* A request in flight between two threads: the engine's scheduler thread
 * pushes events into it (ilab_pending_on_event, the engine callback), and the
 * HTTP connection thread pops them (ilab_pending_next) to write a response.
 *
 * Ownership: two references, one per side. The engine side's reference is
 * dropped when the terminal event (FINISH / ERROR) arrives, or by the caller
 * when submit() refuses the request; the connection side's when the response
 * is done or the client went away. Whoever drops the last frees it. */
#ifndef ILAB_SERVER_PENDING_REQUEST_H
#define ILAB_SERVER_PENDING_REQUEST_H

#include <stdbool.h>
#include <stdint.h>

#include "inferlab/inferlab.h"

/* An owned copy of one ilab_event_t. */
typedef struct ilab_pending_event {
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

/* Hooks the server uses to count requests still inside the engine (the
 * in-flight gauge): called on the scheduler thread with the terminal event. */
typedef void (*ilab_pending_done_fn)(void *ctx, const ilab_event_t *terminal);

/* A new request holding both references. */
ilab_pending *ilab_pending_new(ilab_pending_done_fn on_done, void *done_ctx);

/* The engine callback (ilab_event_fn): `user_data` is the ilab_pending.
 * Returns nonzero (cancel) once the connection side has abandoned it. */
int ilab_pending_on_event(void *user_data, const ilab_event_t *event);

/* The engine never accepted the request: drop the engine side's reference. */
void ilab_pending_refused(ilab_pending *p);

/* Wait up to `timeout_ms` for the next event. Returns the event (caller
 * frees with ilab_pending_event_free) or NULL on timeout. Connection thread. */
ilab_pending_event *ilab_pending_next(ilab_pending *p, int timeout_ms);

/* True once the terminal event has been popped by ilab_pending_next. */
bool ilab_pending_finished(const ilab_pending *p);

/* The connection side is done (response written, or the client left): later
 * events are dropped and the callback asks the engine to cancel. Drops the
 * connection side's reference; `p` must not be used afterwards. */
void ilab_pending_abandon(ilab_pending *p);

/* The engine's id for the request, set by the submitter after submit(). */
void ilab_pending_set_id(ilab_pending *p, uint64_t request_id);
uint64_t ilab_pending_id(const ilab_pending *p);

#endif
