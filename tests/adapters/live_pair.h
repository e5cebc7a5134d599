/* One model two ways, for the adapter's differential test and its
 * overhead benchmark: torchlike in this process, and vllm_stub pointed at
 * an `inferlab serve` that runs torchlike. Each side is a host engine over
 * its plugin, so a request goes through the same path `inferlab run`
 * takes. Not thread-safe; one pair per process. */
#ifndef LIVE_PAIR_H
#define LIVE_PAIR_H

#include <stddef.h>
#include <stdint.h>

#include "loader/plugin_loader.h"
#include "runtime/engine.h"

typedef struct live_side {
    ilab_plugin *plugin;
    const ilab_backend_api_t *api;
    ilab_backend_t *backend;
    ilab_engine *engine;
    ilab_model_info_t info;
} live_side;

/* Open the plugin at `path` with `n` "key=value" settings (the plugin's own
 * keys, without its name) and an engine over it. 0, or -1 with `err`. */
int live_open(live_side *s, const char *path, const char *const *sets, size_t n, char *err,
              size_t cap);
void live_close(live_side *s);

/* Generate from `prompt` with `sampling`, ignore_eos, at most `max_tokens`;
 * the TOKEN ids go to `out` (room for max_tokens), their count to `*n_out`.
 * `metrics` may be NULL. 0, or -1 with `err`. */
int live_generate(live_side *s, const int32_t *prompt, size_t n_prompt,
                  const ilab_sampling_t *sampling, int32_t max_tokens, int32_t *out,
                  size_t *n_out, ilab_request_metrics *metrics, char *err, size_t cap);

#endif
