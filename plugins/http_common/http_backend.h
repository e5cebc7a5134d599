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

/* probe()/create() with the engine's description; any thread. */
ilab_status http_backend_probe(const http_engine *engine, const ilab_config_entry_t *config,
                               size_t n_config, char *reason, size_t reason_cap);
ilab_status http_backend_create(const http_engine *engine, const ilab_config_entry_t *config,
                                size_t n_config, char *error, size_t error_cap,
                                ilab_backend_t **out);

/* The rest of the backend table, identical for every HTTP engine. */
void hb_destroy(ilab_backend_t *b);
size_t hb_last_error(const ilab_backend_t *b, char *buf, size_t cap);
ilab_status hb_model_info(ilab_backend_t *b, ilab_model_info_t *info);
ilab_status hb_tokenize(ilab_backend_t *b, const char *t, size_t l, uint32_t f, int32_t *o,
                        size_t c, size_t *n);
ilab_status hb_detokenize(ilab_backend_t *b, const int32_t *t, size_t n, char *o, size_t c,
                          size_t *l);
ilab_status hb_token_piece(ilab_backend_t *b, int32_t p, int32_t t, char *o, size_t c,
                           size_t *l);
ilab_status hb_seq_create(ilab_backend_t *b, ilab_seq_t *s);
ilab_status hb_seq_free(ilab_backend_t *b, ilab_seq_t s);
ilab_status hb_seq_fork(ilab_backend_t *b, ilab_seq_t p, ilab_seq_t *c);
ilab_status hb_seq_truncate(ilab_backend_t *b, ilab_seq_t s, int32_t n);
ilab_status hb_seq_length(ilab_backend_t *b, ilab_seq_t s, int32_t *l);
ilab_status hb_eval(ilab_backend_t *b, const ilab_batch_item_t *const *items, size_t n);
ilab_status hb_generate(ilab_backend_t *b, const ilab_generate_request_t *req,
                        ilab_event_fn on_event, void *user_data);
ilab_status hb_cancel(ilab_backend_t *b, uint64_t id);

/* The backend table of an HTTP engine plugin, given its probe and create. */
#define HTTP_BACKEND_API(probe_fn, create_fn)                                              \
    {                                                                                      \
        .struct_size = sizeof(ilab_backend_api_t), .probe = probe_fn, .create = create_fn, \
        .destroy = hb_destroy, .last_error = hb_last_error, .model_info = hb_model_info,   \
        .tokenize = hb_tokenize, .detokenize = hb_detokenize,                              \
        .token_piece = hb_token_piece, .seq_create = hb_seq_create,                        \
        .seq_free = hb_seq_free, .seq_fork = hb_seq_fork, .seq_truncate = hb_seq_truncate, \
        .seq_length = hb_seq_length, .eval = hb_eval, .generate = hb_generate,             \
        .cancel = hb_cancel,                                                               \
    }

#endif
