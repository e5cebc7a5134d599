/* A request's timings and its end: per-token latency, the caller's
 * ilab_request_metrics, process metrics, and the one terminal event. */
#include <string.h>

#include "engine_internal.h"
#include "metrics.h"

void ilab_req_fill_metrics(ilab_req *r, uint64_t t_end)
{
    if (!r->metrics_out)
        return;
    ilab_request_metrics *m = r->metrics_out;
    uint64_t t_scheduled = r->t_scheduled ? r->t_scheduled : t_end;
    m->queue_seconds = ilab_seconds(r->t_submit, t_scheduled);
    m->ttft_seconds = r->t_first ? ilab_seconds(r->t_submit, r->t_first) : 0.0;
    m->e2e_seconds = ilab_seconds(r->t_submit, t_end);
    m->mean_itl_seconds = r->completion > 1 ? r->itl_sum / (double)(r->completion - 1) : 0.0;
    m->prompt_tokens = (uint32_t)r->n_prompt;
    m->completion_tokens = r->completion;
}

/* Record the token's timing; call just before emitting a TOKEN event. */
void ilab_req_note_token(ilab_req *r)
{
    uint64_t t = ilab_now_ns();
    if (!r->t_first) {
        r->t_first = t;
        ilab_metrics_observe_ttft(ilab_seconds(r->t_submit, t));
    } else {
        double itl = ilab_seconds(r->t_last, t);
        r->itl_sum += itl;
        ilab_metrics_observe_itl(itl);
    }
    r->t_last = t;
    ilab_metrics_add_generation_tokens(1);
}

void ilab_req_count_end(ilab_req *r, ilab_finish_reason reason)
{
    uint64_t t = ilab_now_ns();
    ilab_req_fill_metrics(r, t);
    ilab_metrics_observe_e2e(ilab_seconds(r->t_submit, t));
    ilab_metrics_add_prompt_tokens(r->n_prompt);
    ilab_metrics_end_request((int)reason, r->gauge == ILAB_REQ_RUNNING ? -1 : 0,
                             r->gauge == ILAB_REQ_WAITING ? -1 : 0);
    r->gauge = ILAB_REQ_IN_NO_GAUGE;
}

/* Emit the terminal event (FINISH when status == OK, else ERROR) and record
 * the request's metrics. `tail` is held-back text released at the end. */
void ilab_req_emit_terminal(ilab_req *r, ilab_finish_reason reason, ilab_status status,
                            const char *message, const char *tail, size_t tail_len)
{
    /* A request its client already cancelled ends cancelled, whatever became
     * of the step it was cancelled in: a backend that failed then (a worker
     * killed at shutdown, say) does not turn the answer into an error. */
    if (status != ILAB_OK && atomic_load(&r->cancel)) {
        status = ILAB_OK;
        reason = ILAB_FINISH_CANCELLED;
    }
    ilab_req_count_end(r, status == ILAB_OK ? reason : ILAB_FINISH_ERROR);
    ilab_event_t ev;
    memset(&ev, 0, sizeof ev);
    ev.struct_size = sizeof ev;
    ev.request_id = r->id;
    ev.prompt_tokens = (uint32_t)r->n_prompt;
    ev.completion_tokens = r->completion;
    ev.text = tail ? tail : "";
    ev.text_len = tail ? tail_len : 0;
    if (status == ILAB_OK) {
        ev.type = ILAB_EVENT_FINISH;
        ev.finish_reason = reason;
        ev.status = ILAB_OK;
    } else {
        ev.type = ILAB_EVENT_ERROR;
        ev.finish_reason = ILAB_FINISH_ERROR;
        ev.status = status;
        ev.message = message && message[0] ? message : ilab_status_name(status);
    }
    r->terminal_sent = true;
    r->on_event(r->user_data, &ev);
}
