/* The scheduler's defaults (docs/configuration.md). */
#include "engine_config.h"

void ilab_engine_config_default(ilab_engine_config *cfg)
{
    cfg->max_running = 16;
    cfg->max_waiting = 64;
    cfg->step_token_budget = 512;
    cfg->prefill_chunk = 256;
    cfg->prefix_cache_positions = 4096;
    cfg->prefix_cache_min_tokens = 16;
    cfg->kv_watermark_percent = 1;
}
