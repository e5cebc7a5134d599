/* The scheduler's settings (the `scheduler:` section of the config file),
 * the type ilab_engine_create() takes. It lives with the configuration so
 * the config library needs nothing from the runtime: the runtime includes
 * config, never the other way round. */
#ifndef ILAB_HOST_ENGINE_CONFIG_H
#define ILAB_HOST_ENGINE_CONFIG_H

typedef struct ilab_engine_config {
    int max_running;       /* sequences in the running batch (<= manifest max_batch) */
    int max_waiting;       /* queued requests beyond free running slots; past it
                              submit() is refused "overloaded" */
    int step_token_budget; /* most tokens (prefill + decode) in one eval() call */
    int prefill_chunk;     /* most prompt tokens of one sequence per step */
    int prefix_cache_positions;  /* positions of recent prompts kept for reuse (backends with
                                    cache.fork and cache.truncate); 0 = no prefix cache */
    int prefix_cache_min_tokens; /* shortest shared prefix worth a fork (>= 1) */
    int kv_watermark_percent;    /* backends with cache.stats: a waiting request is admitted
                                    only while its prompt leaves this share of the cache free
                                    (0..50; vLLM's watermark, 1%) */
} ilab_engine_config;

/* The defaults docs/configuration.md lists. */
void ilab_engine_config_default(ilab_engine_config *cfg);

#endif
