/* The engine's insides, shared by its files and nothing else (engine.h is
 * the public face). Which file does what:
 *
 *   engine.c          create/destroy, submit, cancel, generate (wait), accessors
 *   request.c         an ilab_request -> a validated, owned ilab_req
 *   request_events.c  a request's timings, metrics and terminal event
 *   scheduler.c       the scheduler thread: the waiting queue, admission
 *   step.c            one host-sampling step: the batch, eval(), retirement
 *   step_eval.c       eval() under pressure: preemption, error isolation
 *   prefix_cache.c    the prefix cache's index: recent prompts, LRU, budget
 *   prefix_reuse.c    forking cached prefixes for new requests, keeping prompts
 *   capacity.c        the backend's cache capacity (cache.stats): admission, usage gauge
 *   logits.c          a sequence's logits -> a sampled token -> a TOKEN event
 *   generate_worker.c the backend-sampling path: one generate() thread each
 *   backend_calls.c   the backend's tokenizer from other threads
 *
 * Locking: `mu` guards the waiting queue, the running list's membership and
 * the flags; the scheduler never holds it while calling the backend or a
 * callback, so callbacks may submit or cancel. `backend_mu` serialises
 * backend calls when the manifest's thread_safety requires it. */
#ifndef ILAB_HOST_ENGINE_INTERNAL_H
#define ILAB_HOST_ENGINE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "engine.h"
#include "prefix_cache.h"
#include "sampler.h"
#include "text_stream.h"

/* A submitted request as the engine tracks it, from submit() to its
 * terminal event. Owned by the engine; the scheduler thread (or, with
 * sampling: backend, the request's worker) is the only one that touches
 * the per-request state; `cancel` and `worker_done` are read across threads. */
typedef struct ilab_req ilab_req;
struct ilab_req {
    ilab_req *next; /* waiting queue */
    uint64_t id;
    int32_t *tokens;   /* the prompt, then every sampled token that continues it */
    size_t n_prompt;   /* tokens[0, n_prompt) is the prompt */
    size_t n_tokens;
    size_t cap_tokens;
    ilab_sampling_t sampling;
    int32_t max_tokens;
    char **stop;
    size_t n_stop;
    int32_t *stop_ids;
    size_t n_stop_ids;
    bool ignore_eos;
    int32_t top_logprobs;
    ilab_event_fn on_event;
    void *user_data;
    ilab_request_metrics *metrics_out; /* filled before the terminal event; may be NULL */
    atomic_int cancel;
    /* The metrics gauge that counts this request until its terminal event
     * counts its finish reason and takes it out (ilab_req_count_end). */
    enum { ILAB_REQ_IN_NO_GAUGE, ILAB_REQ_WAITING, ILAB_REQ_RUNNING } gauge;

    uint64_t t_submit, t_scheduled, t_first, t_last;
    double itl_sum;
    uint32_t completion;

    /* host sampling */
    ilab_sampler *sampler;
    ilab_text_stream ts;
    ilab_seq_t seq;
    bool started;          /* seq created (or forked from the prefix cache) */
    size_t n_fed;          /* tokens[0, n_fed) are in the sequence; the rest are fed next */
    int32_t n_positions;   /* positions held in the backend (== n_fed while started) */
    uint32_t preemptions;  /* times this request gave its sequence up for room */
    int32_t prev_token;    /* for token_piece: the last prompt token, then the last output token */
    float *logits;
    ilab_logprob_t *top;
    char *piece;
    size_t piece_cap;

    /* backend sampling */
    pthread_t worker;
    bool worker_started;
    atomic_bool worker_done;
    bool terminal_sent;
    ilab_engine *engine;
};

struct ilab_engine {
    const ilab_plugin *plugin;
    const ilab_backend_api_t *api;
    ilab_backend_t *backend;
    const ilab_manifest *manifest;
    ilab_model_info_t info;
    int32_t max_context;
    ilab_engine_config cfg;
    bool backend_sampling;
    bool serialize_all;      /* thread_safety != full: one backend call at a time */
    bool serialize_generate; /* thread_safety == none */

    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_mutex_t backend_mu;
    ilab_req *wait_head, *wait_tail;
    int n_waiting;
    ilab_req **running;
    int n_running;
    bool stopping;
    uint64_t next_id;
    pthread_t thread;
    atomic_uint_fast64_t eval_calls;
    atomic_uint_fast64_t preemptions;
    atomic_uint_fast64_t prefix_queried, prefix_hit;
    bool admit_hold; /* a preemption happened: admit nothing new until a running request
                        ends (the cache is known to be full); under mu */
    /* capacity.c: cache.stats declared (and host sampling): admission by free capacity */
    bool cache_stats;
    int64_t kv_block, kv_total, kv_watermark; /* positions, from the first cache_stats() */
    int64_t kv_used_shown, kv_total_shown;    /* this engine's share of the usage gauge */
    int32_t *eog; /* eog.c: the end-of-generation ids (EOS alone without chat) */
    size_t n_eog;
    ilab_prefix_cache *prefix; /* NULL when off or the backend cannot fork and truncate */

    ilab_batch_item_t *items;
    const ilab_batch_item_t **item_ptrs;
    ilab_req **item_req;
    ilab_req **snapshot; /* the scheduler's copy of `running` for one step */
};

static inline uint64_t ilab_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline double ilab_seconds(uint64_t from, uint64_t to)
{
    return to > from ? (double)(to - from) * 1e-9 : 0.0;
}

static inline void ilab_engine_lock_backend(ilab_engine *e, bool needed)
{
    if (needed)
        pthread_mutex_lock(&e->backend_mu);
}

static inline void ilab_engine_unlock_backend(ilab_engine *e, bool needed)
{
    if (needed)
        pthread_mutex_unlock(&e->backend_mu);
}

/* The backend's last_error() into `buf` (empty when it has none). Call with
 * the backend lock held, right after the failed call. */
void ilab_engine_backend_error(ilab_engine *e, char *buf, size_t cap);

/* request.c: validate and copy `req` (tokenizing a text prompt); on failure
 * `err` names the parameter and nothing is allocated. Any thread. */
ilab_status ilab_req_build(ilab_engine *e, const ilab_request *req, char *err, size_t err_cap,
                           ilab_req **out);
void ilab_req_free(ilab_req *r);

/* request_events.c. fill_metrics: the caller's ilab_request_metrics, if any.
 * note_token: the token's timing, just before its TOKEN event. count_end:
 * the process-wide metrics of a request that ends with `reason`, just
 * before its terminal event. emit_terminal: FINISH when status == OK, else
 * ERROR, with held-back text `tail`. */
void ilab_req_fill_metrics(ilab_req *r, uint64_t t_end);
void ilab_req_note_token(ilab_req *r);
void ilab_req_count_end(ilab_req *r, ilab_finish_reason reason);
void ilab_req_emit_terminal(ilab_req *r, ilab_finish_reason reason, ilab_status status,
                            const char *message, const char *tail, size_t tail_len);

/* scheduler.c: the scheduler thread's body (arg: the engine). */
void *ilab_engine_scheduler_main(void *arg);

/* step.c. host_step: one continuous-batching step. retire: leave the
 * running list, free the sequence, emit the terminal event, free `r`.
 * Scheduler thread. */
void ilab_engine_host_step(ilab_engine *e);
void ilab_engine_retire(ilab_engine *e, ilab_req *r, ilab_finish_reason reason, ilab_status status,
                        const char *message, const char *tail, size_t tail_len);

/* step.c: the batch's results for items [lo, lo + n): advance each
 * sequence, remember completed prompts, sample those with logits. */
void ilab_engine_apply_results(ilab_engine *e, size_t lo, size_t n);

/* step_eval.c: eval() of the step's n_items items (e->items), with
 * preemption on ILAB_OUT_OF_MEMORY and isolation of failing items. */
void ilab_engine_eval_batch(ilab_engine *e, size_t n_items);

/* prefix_reuse.c. setup (create): the prefix cache when configured and the
 * backend can fork and truncate; false when out of memory. teardown
 * (destroy): release its sequences. start_sequence: r's sequence, forked
 * from a cached prefix when one is long enough (r->n_fed says how much is
 * in), else seq_create (on failure `msg` has the backend's message).
 * remember_prompt: r's prompt is in its sequence: keep a fork of it. */
bool ilab_engine_prefix_setup(ilab_engine *e);
void ilab_engine_prefix_teardown(ilab_engine *e);
ilab_status ilab_engine_start_sequence(ilab_engine *e, ilab_req *r, char *msg, size_t msg_cap);
void ilab_engine_remember_prompt(ilab_engine *e, ilab_req *r);

/* step_eval.c. preempt: give `r`'s sequence up (it must be running and started):
 * it keeps its tokens and sampler and goes back to the front of the waiting
 * queue, to be resumed by prefilling tokens[0, n_tokens). Scheduler thread. */
void ilab_engine_preempt(ilab_engine *e, ilab_req *r);

/* eog.c. setup (create, after model_info): the end-of-generation set. */
ilab_status ilab_engine_eog_setup(ilab_engine *e, char *err, size_t err_cap);
bool ilab_engine_is_eog(const ilab_engine *e, int32_t token);

/* capacity.c. setup (create): read cache_stats() once when declared (a
 * failure refuses the engine, message in err) and publish this engine's
 * share of the usage gauge; teardown (destroy) withdraws it. read: the free
 * positions now, refreshing the gauge; false without cache.stats (or when
 * the call failed: the pass admits as without it). note_positions: the host
 * estimate's delta, ignored with cache.stats. admission_need: positions r
 * takes when it starts (whole blocks, less a cached prefix's shared blocks). */
ilab_status ilab_engine_capacity_setup(ilab_engine *e, char *err, size_t err_cap);
void ilab_engine_capacity_teardown(ilab_engine *e);
bool ilab_engine_capacity_read(ilab_engine *e, int64_t *free_positions);
void ilab_engine_note_positions(ilab_engine *e, int64_t delta);
int64_t ilab_engine_admission_need(ilab_engine *e, ilab_req *r);

/* Append `token` to r->tokens (growing it); false when out of memory. */
bool ilab_req_push_token(ilab_req *r, int32_t token);

/* logits.c: `r`'s logits came back: sample, emit a TOKEN, maybe retire `r`.
 * Scheduler thread. */
void ilab_engine_on_logits(ilab_engine *e, ilab_req *r);

/* generate_worker.c (sampling: backend). start_worker: run `r`'s generate()
 * on a thread of its own, or end `r` with an ERROR when no thread starts.
 * reap_workers (under mu): move finished workers' requests out of the
 * running list into `done`. Scheduler thread. */
void ilab_engine_start_worker(ilab_engine *e, ilab_req *r);
void ilab_engine_reap_workers(ilab_engine *e, ilab_req **done, int *n_done);

#endif
