/* What vllm_stub and sglang_stub share: an HTTP inference engine reached by
 * URL, probed over GET <base_url>/health with libcurl and short timeouts.
 *
 * The generation adapter over the engine's HTTP API is not written yet, so a
 * reachable server is still reported unavailable (with that reason), and
 * every call that would need it fails closed: nothing here fakes output. */
#ifndef ILAB_HTTP_BACKEND_H
#define ILAB_HTTP_BACKEND_H

#include <inferlab/inferlab.h>

/* Static description of one engine, owned by the plugin. */
typedef struct http_engine {
    const char *plugin;      /* manifest name, e.g. "vllm_stub" */
    const char *label;       /* human name, e.g. "vLLM" */
    const char *env_var;     /* URL fallback, e.g. "INFERLAB_VLLM_URL" */
    const char *health_path; /* e.g. "/health" */
} http_engine;

/* Each plugin that links this code defines its engine under this name; the
 * shared table below reads it (one plugin per .so, so one definition). */
extern const http_engine http_engine_of_plugin;

/* The backend table of every HTTP engine plugin: probe over GET
 * <base_url><health_path> with short timeouts; every other call fails closed
 * (UNAVAILABLE or UNSUPPORTED with a message). Static, any thread. */
extern const ilab_backend_api_t http_backend_api;

#endif
