/* The engine: one backend instance driven by a continuous-batching scheduler
 * thread. Each step admits waiting requests, prefills prompts in chunks under
 * a token budget, decodes one token for every running sequence — all in one
 * eval() call — samples on the host, and emits events. Backends that sample
 * themselves (sampling: backend) run through their generate() instead.
 * docs/runtime.md describes the scheduler; engine_internal.h maps the files. */
#ifndef ILAB_HOST_ENGINE_H
#define ILAB_HOST_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "inferlab/inferlab.h"
#include "../config/engine_config.h"
#include "../loader/plugin_loader.h"

typedef struct ilab_engine ilab_engine;

/* ---- lifecycle ------------------------------------------------------------ */

/* Start an engine on a created backend instance (not owned: destroy the
 * engine first). `cfg` NULL = ilab_engine_config_default(); max_running is
 * capped at the manifest's max_batch. Any thread; starts the engine's
 * scheduler thread. */
ilab_status ilab_engine_create(const ilab_plugin *plugin, ilab_backend_t *backend,
                               const ilab_engine_config *cfg, char *err, size_t err_cap,
                               ilab_engine **out);

/* Cancel everything still running, join the scheduler thread, free. Any
 * thread but the engine's own: not from an event callback (it would wait
 * for itself). */
void ilab_engine_destroy(ilab_engine *engine);

/* ---- requests ------------------------------------------------------------- */

typedef struct ilab_request {
    const char *prompt_text;      /* UTF-8, tokenized by the backend; or NULL */
    size_t prompt_len;
    const int32_t *prompt_tokens; /* used when prompt_text is NULL */
    size_t n_prompt_tokens;
    bool add_bos;                 /* prepend BOS to a text prompt */
    ilab_sampling_t sampling;
    int32_t max_tokens;
    const char *const *stop;      /* stop strings; matched across token boundaries, trimmed */
    size_t n_stop;
    const int32_t *stop_token_ids;
    size_t n_stop_token_ids;
    bool ignore_eos;
    int32_t top_logprobs;         /* 0 = none; <= manifest topk_max */
} ilab_request;
/* Everything in an ilab_request is copied by submit(); the caller may free it
 * when submit() returns. */

/* Queue a request. Events arrive through `on_event`: TOKEN* then exactly one
 * FINISH or ERROR; after the terminal event the request is gone. The
 * callback must return quickly; returning nonzero cancels. Refusals (the
 * request never starts, no event is emitted): ILAB_INVALID_ARGUMENT /
 * ILAB_UNSUPPORTED naming the parameter or capability;
 * ILAB_CONTEXT_OVERFLOW for a prompt longer than max_context;
 * ILAB_UNAVAILABLE with a message starting "overloaded:" when max_waiting
 * requests are queued. Any thread. */
ilab_status ilab_engine_submit(ilab_engine *engine, const ilab_request *req,
                               ilab_event_fn on_event, void *user_data,
                               char *err, size_t err_cap, uint64_t *request_id);

/* End a request with FINISH (cancelled) within one step. Any thread; an
 * unknown or finished id is ILAB_OK. */
ilab_status ilab_engine_cancel(ilab_engine *engine, uint64_t request_id);

/* Per-request timings, in the FINISH event's wake (see ilab_engine_generate). */
typedef struct ilab_request_metrics {
    double queue_seconds;         /* submit -> first scheduled */
    double ttft_seconds;          /* submit -> first TOKEN */
    double e2e_seconds;           /* submit -> terminal event */
    double mean_itl_seconds;      /* mean inter-token latency */
    uint32_t prompt_tokens;
    uint32_t completion_tokens;
} ilab_request_metrics;

/* submit() and wait for the terminal event; events are still delivered on
 * the engine's threads. `metrics` (may be NULL) receives the timings. */
ilab_status ilab_engine_generate(ilab_engine *engine, const ilab_request *req,
                                 ilab_event_fn on_event, void *user_data,
                                 char *err, size_t err_cap,
                                 ilab_request_metrics *metrics);

/* ---- events ----------------------------------------------------------------
 *
 * Threads: with sampling: host, events arrive on the scheduler thread; with
 * sampling: backend, on the request's worker thread.
 *
 * Held-back text at the end of a stream: text that might have begun a stop
 * string, or bytes of an unfinished UTF-8 code point, is released when the
 * request ends. When the last TOKEN is known to be last (max_tokens, context
 * full) it carries that text. When generation ends on EOS or a stop token id
 * (which are not emitted as TOKEN), the FINISH event's `text`/`text_len`
 * carry it instead (usually empty). Consumers concatenate TOKEN texts and
 * then the FINISH text. */

/* ---- the model ------------------------------------------------------------ */

/* The backend's model facts (filled once at create). Borrowed from the
 * engine; any thread (it does not change). */
const ilab_model_info_t *ilab_engine_model_info(const ilab_engine *engine);

/* Positions per sequence: the manifest's max_context, or model_info's when 0.
 * Any thread. */
int32_t ilab_engine_max_context(const ilab_engine *engine);

/* ---- the backend from other threads ----------------------------------------
 *
 * A server answering /tokenize while the scheduler runs eval() would call the
 * backend from two threads at once, which a plugin declaring thread_safety
 * below "full" forbids. These calls take the same lock the scheduler takes
 * around its backend calls (when the manifest asks for one), so they are safe
 * from any thread while requests run. */

/* Run `fn(ctx, api, backend)` holding the engine's backend lock (when the
 * manifest's thread_safety needs one); returns what `fn` returns. `fn` must
 * only call the backend and return; it must not call back into the engine.
 * Any thread. */
typedef ilab_status (*ilab_engine_backend_fn)(void *ctx, const ilab_backend_api_t *api,
                                              ilab_backend_t *backend);
ilab_status ilab_engine_with_backend(ilab_engine *engine, ilab_engine_backend_fn fn, void *ctx);

/* The backend's tokenize(), serialised as above. `*tokens` is malloc'd (the
 * caller frees it) with `*n_tokens` ids. On failure `err` holds the backend's
 * message and `*tokens` is NULL. Any thread. */
ilab_status ilab_engine_tokenize(ilab_engine *engine, const char *text, size_t len,
                                 uint32_t flags, char *err, size_t err_cap,
                                 int32_t **tokens, size_t *n_tokens);

/* The backend's detokenize(), serialised as above. `*text` is malloc'd and
 * NUL-terminated (the caller frees it), `*text_len` bytes before the NUL.
 * On failure `err` holds the backend's message and `*text` is NULL. Any
 * thread. */
ilab_status ilab_engine_detokenize(ilab_engine *engine, const int32_t *tokens, size_t n_tokens,
                                   char *err, size_t err_cap, char **text, size_t *text_len);

/* The end-of-generation ids (ABI 1.2 eog_ids() when the backend declares
 * chat, else EOS alone): sampling one ends the request with "stop" unless
 * ignore_eos, and its text is never output. Owned by the engine. */
const int32_t *ilab_engine_eog_ids(const ilab_engine *engine, size_t *n);

/* ---- introspection (tests, benchmarks) ------------------------------------ */

/* Number of eval() calls made so far (for tests that check batching). */
uint64_t ilab_engine_eval_calls(const ilab_engine *engine);

/* What this engine did so far (the process-wide metrics sum all engines). */
typedef struct ilab_engine_counters {
    uint64_t eval_calls;
    uint64_t preemptions;          /* running requests that gave their sequence up for room */
    uint64_t prefix_cache_queries; /* tokens looked up in the prefix cache */
    uint64_t prefix_cache_hits;    /* of them found: prefill tokens saved */
    int running;                   /* requests in the running batch now */
    int waiting;                   /* requests queued now */
} ilab_engine_counters;

/* Any thread; the figures are read one by one, not as one snapshot. */
void ilab_engine_get_counters(const ilab_engine *engine, ilab_engine_counters *out);

#endif
