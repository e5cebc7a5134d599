/* The backend's KV-cache capacity (capability cache.stats, ABI 1.1), for
 * admission and for inferlab:kv_cache_usage_ratio.
 *
 * With cache.stats the engine asks the backend, once per scheduler pass and
 * after every successful eval(), how many positions are free: a waiting
 * request is admitted only while its prompt plus the watermark fits
 * (scheduler.c), and the usage gauge carries the backend's own figures
 * (blocks shared by forks count once). Without it (an older plugin, or one
 * that cannot tell) the host keeps its estimate: positions it fed, over
 * max_running x max_context, and admission is bounded only by max_running
 * and the hold after a preemption. Scheduler thread, except setup and
 * teardown (the engine's create and destroy). */
#include <stdio.h>
#include <string.h>

#include "engine_internal.h"
#include "metrics.h"

/* cache_stats() under the backend lock; on failure `msg` has why. */
static ilab_status read_stats(ilab_engine *e, ilab_cache_stats_t *s, char *msg, size_t msg_cap)
{
    memset(s, 0, sizeof *s);
    s->struct_size = sizeof *s;
    ilab_engine_lock_backend(e, e->serialize_all);
    ilab_status st = e->api->cache_stats(e->backend, s);
    if (st != ILAB_OK)
        ilab_engine_backend_error(e, msg, msg_cap);
    ilab_engine_unlock_backend(e, e->serialize_all);
    if (st == ILAB_OK && (s->block_size < 1 || s->total_positions < 1 || s->free_positions < 0 ||
                          s->free_positions > s->total_positions)) {
        snprintf(msg, msg_cap, "block_size %d, total %lld, free %lld positions make no sense",
                 (int)s->block_size, (long long)s->total_positions, (long long)s->free_positions);
        st = ILAB_INTERNAL;
    }
    return st;
}

/* The gauge's share of this engine: used = total - free of the last answer. */
static void publish(ilab_engine *e, int64_t used, int64_t total)
{
    ilab_metrics_add_kv_positions(used - e->kv_used_shown);
    ilab_metrics_add_kv_capacity(total - e->kv_total_shown);
    e->kv_used_shown = used;
    e->kv_total_shown = total;
}

ilab_status ilab_engine_capacity_setup(ilab_engine *e, char *err, size_t err_cap)
{
    e->cache_stats = e->manifest->cache_stats && !e->backend_sampling;
    if (!e->cache_stats) {
        publish(e, 0, (int64_t)e->cfg.max_running * e->max_context);
        return ILAB_OK;
    }
    ilab_cache_stats_t s;
    char msg[512] = "";
    ilab_status st = read_stats(e, &s, msg, sizeof msg);
    if (st != ILAB_OK) {
        /* A declared capability that does not work is refused, not guessed around. */
        snprintf(err, err_cap, "backend '%s' declares cache.stats but cache_stats() failed: %s: %s",
                 e->manifest->name, ilab_status_name(st), msg);
        return st;
    }
    e->kv_block = s.block_size;
    e->kv_total = s.total_positions;
    /* vLLM's watermark: a share of the cache, in whole blocks, kept free at admission. */
    int64_t mark = (s.total_positions * e->cfg.kv_watermark_percent + 99) / 100;
    e->kv_watermark = (mark + s.block_size - 1) / s.block_size * s.block_size;
    publish(e, s.total_positions - s.free_positions, s.total_positions);
    return ILAB_OK;
}

void ilab_engine_capacity_teardown(ilab_engine *e)
{
    publish(e, 0, 0);
}

bool ilab_engine_capacity_read(ilab_engine *e, int64_t *free_positions)
{
    if (!e->cache_stats)
        return false;
    ilab_cache_stats_t s;
    char msg[512];
    if (read_stats(e, &s, msg, sizeof msg) != ILAB_OK)
        return false; /* this pass admits as without cache.stats */
    publish(e, s.total_positions - s.free_positions, s.total_positions);
    if (free_positions)
        *free_positions = s.free_positions;
    return true;
}

void ilab_engine_note_positions(ilab_engine *e, int64_t delta)
{
    if (!e->cache_stats) /* else the backend's figures are shown */
        ilab_metrics_add_kv_positions(delta);
}

int64_t ilab_engine_admission_need(ilab_engine *e, ilab_req *r)
{
    int64_t block = e->kv_block;
    int64_t need = ((int64_t)r->n_tokens + block - 1) / block * block;
    ilab_seq_t seq;
    size_t shared = 0;
    /* Whole blocks of a cached prefix are shared by the fork, not taken. */
    if (e->prefix && r->n_tokens > 1 &&
        ilab_prefix_cache_match(e->prefix, r->tokens, r->n_tokens - 1, &seq, &shared))
        need -= (int64_t)shared / block * block;
    return need;
}
