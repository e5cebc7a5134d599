/* What vllm_stub and sglang_stub share: an inference engine reached over
 * HTTP, driven through the backend contract (docs/adapters.md).
 *
 * The shared half (this folder) owns the backend table: configuration,
 * probe (health + model list, within 2 s), model_info, the tokenizer through
 * the server's /tokenize and /detokenize, and generate(): one streamed HTTP
 * transfer per request, turned into TOKEN* then one FINISH or ERROR, with
 * cancel() aborting the transfer from any thread. Each engine's own wire
 * format (request body, stream chunks) lives in its plugin folder behind
 * http_protocol. */
#ifndef ILAB_HTTP_BACKEND_H
#define ILAB_HTTP_BACKEND_H

#include <jansson.h>

#include <inferlab/inferlab.h>

#include "http_stream.h"

/* What the protocol's encoder sees of one request. Borrowed for the call. */
typedef struct http_gen_args {
    const ilab_generate_request_t *req;
    ilab_sampling_t sampling; /* the request's, with absent members set to "off" */
    const char *model;        /* the served model's id */
    int32_t max_tokens;       /* the request's, clamped to what the context holds (> 0) */
} http_gen_args;

/* One engine's wire protocol. Static, owned by the plugin; any thread. */
typedef struct http_protocol {
    const char *generate_path;   /* e.g. "/v1/completions" */
    const char *detokenize_key;  /* member of /detokenize's answer holding the text */
    int tokenize_sends_model;    /* nonzero: /tokenize and /detokenize take "model" */
    /* Positions the engine keeps free past prompt + new tokens: it refuses a
     * request with prompt + max_tokens > its context - context_reserve
     * (vLLM 0; SGLang 1: it wants the sum below its context length).
     * model_info's max_context is the engine's context minus this. */
    int32_t context_reserve;
    /* Build the streamed generation request body for `a` into `*out` (new
     * reference). A request the engine cannot honour is refused here:
     * ILAB_UNSUPPORTED or ILAB_INVALID_ARGUMENT with `err` naming the field. */
    ilab_status (*encode)(const http_gen_args *a, json_t **out, char *err, size_t err_cap);
    /* Feed one parsed stream chunk (an SSE data payload) into `st` through
     * the http_stream_* calls. ILAB_IO with `err` on a malformed chunk. */
    ilab_status (*decode)(http_stream *st, json_t *chunk, char *err, size_t err_cap);
} http_protocol;

/* Static description of one engine, owned by the plugin. */
typedef struct http_engine {
    const char *plugin;      /* manifest name, e.g. "vllm_stub" */
    const char *label;       /* human name, e.g. "vLLM" */
    const char *env_var;     /* URL fallback, e.g. "INFERLAB_VLLM_URL" */
    const char *health_path; /* e.g. "/health" */
    const char *models_path; /* e.g. "/v1/models" */
    const http_protocol *protocol;
} http_engine;

/* Each plugin that links this code defines its engine under this name; the
 * shared table below reads it (one plugin per .so, so one definition). */
extern const http_engine http_engine_of_plugin;

/* The backend table of every HTTP engine plugin. Static, any thread. */
extern const ilab_backend_api_t http_backend_api;

#endif
