/* Automatic prefix caching, the engine's side (the index is prefix_cache.c).
 * For backends declaring cache.fork and cache.truncate: when a request's
 * prompt is in, a fork of its sequence is kept under the prompt's tokens;
 * a later request whose tokens share at least prefix_cache_min_tokens with
 * one forks it, truncates the fork to the shared length and prefills only
 * the rest. The backend computes the same positions either way, so the
 * output does not change. Scheduler thread (create/destroy: the engine's). */
#include <stdio.h>

#include "engine_internal.h"
#include "metrics.h"

static void release_seq(void *ctx, ilab_seq_t seq)
{
    ilab_engine *e = ctx;
    ilab_engine_lock_backend(e, e->serialize_all);
    e->api->seq_free(e->backend, seq);
    ilab_engine_unlock_backend(e, e->serialize_all);
}

bool ilab_engine_prefix_setup(ilab_engine *e)
{
    const ilab_manifest *m = e->manifest;
    if (e->backend_sampling || e->cfg.prefix_cache_positions <= 0 || !m->cache_fork ||
        !m->cache_truncate)
        return true; /* no prefix cache, nothing to set up */
    e->prefix = ilab_prefix_cache_create((size_t)e->cfg.prefix_cache_positions,
                                         (size_t)e->cfg.prefix_cache_min_tokens, release_seq, e);
    return e->prefix != NULL;
}

void ilab_engine_prefix_teardown(ilab_engine *e)
{
    ilab_prefix_cache_destroy(e->prefix);
    e->prefix = NULL;
}

/* Fork `parent` and keep its first `keep` positions; false (nothing
 * allocated) when the backend refuses. */
static bool fork_prefix(ilab_engine *e, ilab_seq_t parent, size_t keep, ilab_seq_t *child)
{
    ilab_engine_lock_backend(e, e->serialize_all);
    ilab_status st = e->api->seq_fork(e->backend, parent, child);
    if (st == ILAB_OK && e->api->seq_truncate(e->backend, *child, (int32_t)keep) != ILAB_OK) {
        e->api->seq_free(e->backend, *child);
        st = ILAB_INTERNAL;
    }
    ilab_engine_unlock_backend(e, e->serialize_all);
    return st == ILAB_OK;
}

/* A cached prefix of r->tokens, forked: r starts with `shared` positions.
 * At least the last token is left to feed: its logits are needed. */
static bool start_from_prefix(ilab_engine *e, ilab_req *r)
{
    ilab_seq_t parent, child;
    size_t shared = 0;
    bool hit = r->n_tokens > 1 &&
               ilab_prefix_cache_match(e->prefix, r->tokens, r->n_tokens - 1, &parent, &shared) &&
               fork_prefix(e, parent, shared, &child);
    if (!hit)
        shared = 0;
    atomic_fetch_add(&e->prefix_queried, r->n_tokens);
    atomic_fetch_add(&e->prefix_hit, shared);
    ilab_metrics_add_prefix_cache(r->n_tokens, shared);
    if (!hit)
        return false;
    r->seq = child;
    r->n_fed = shared;
    r->n_positions = (int32_t)shared;
    ilab_engine_note_positions(e, (int64_t)shared);
    return true;
}

ilab_status ilab_engine_start_sequence(ilab_engine *e, ilab_req *r, char *msg, size_t msg_cap)
{
    r->n_fed = 0;
    r->n_positions = 0;
    if (e->prefix && start_from_prefix(e, r))
        return ILAB_OK;
    ilab_engine_lock_backend(e, e->serialize_all);
    ilab_status st = e->api->seq_create(e->backend, &r->seq);
    if (st != ILAB_OK)
        ilab_engine_backend_error(e, msg, msg_cap);
    ilab_engine_unlock_backend(e, e->serialize_all);
    return st;
}

void ilab_engine_remember_prompt(ilab_engine *e, ilab_req *r)
{
    if (!e->prefix || !ilab_prefix_cache_wants(e->prefix, r->tokens, r->n_prompt))
        return;
    ilab_seq_t copy;
    ilab_engine_lock_backend(e, e->serialize_all);
    ilab_status st = e->api->seq_fork(e->backend, r->seq, &copy);
    ilab_engine_unlock_backend(e, e->serialize_all);
    if (st == ILAB_OK) /* else no slot for a copy: the prompt goes uncached */
        ilab_prefix_cache_insert(e->prefix, copy, r->tokens, r->n_prompt);
}
