/* The prefix cache: sequences holding recent prompts, indexed by their
 * tokens, so a request whose prompt starts the same way can fork one and
 * prefill only the rest (backends with cache.fork and cache.truncate).
 *
 * This is the index alone: which entries exist, how long a prefix each
 * shares with a prompt, which to evict (least recently used) to stay within
 * a budget of positions. It makes no backend call itself; an entry's
 * sequence is handed back through `release` when the entry goes, and the
 * engine frees it. Not thread-safe: the scheduler thread owns it. */
#ifndef ILAB_HOST_PREFIX_CACHE_H
#define ILAB_HOST_PREFIX_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "inferlab/inferlab.h"

typedef struct ilab_prefix_cache ilab_prefix_cache;

/* Called once for every entry that leaves the cache (evicted, replaced,
 * cleared); the callee frees `seq`. */
typedef void (*ilab_prefix_release_fn)(void *ctx, ilab_seq_t seq);

/* `budget` positions in all (>= 1); a shared prefix shorter than
 * `min_tokens` is no hit. NULL when out of memory. */
ilab_prefix_cache *ilab_prefix_cache_create(size_t budget, size_t min_tokens,
                                            ilab_prefix_release_fn release, void *ctx);

/* Releases every entry, then frees the index. NULL is a no-op. */
void ilab_prefix_cache_destroy(ilab_prefix_cache *pc);

/* The entry sharing the longest prefix with tokens[0, n) (at least
 * min_tokens long): its sequence and the shared length; it becomes the most
 * recently used. False when none qualifies. The sequence stays the cache's:
 * fork it, do not free or extend it. */
bool ilab_prefix_cache_match(ilab_prefix_cache *pc, const int32_t *tokens, size_t n,
                             ilab_seq_t *seq, size_t *shared);

/* Would an entry for tokens[0, n) add anything? False when it is too short
 * or too long for the budget, or an entry already covers it (which then
 * becomes the most recently used). */
bool ilab_prefix_cache_wants(ilab_prefix_cache *pc, const int32_t *tokens, size_t n);

/* Add `seq` (holding exactly tokens[0, n)); the cache owns it from now on,
 * also on failure (false: out of memory; `seq` was released). Entries that
 * are prefixes of it go, then least recently used ones while over budget. */
bool ilab_prefix_cache_insert(ilab_prefix_cache *pc, ilab_seq_t seq, const int32_t *tokens,
                              size_t n);

/* Release the least recently used entry; false when the cache is empty. */
bool ilab_prefix_cache_evict_lru(ilab_prefix_cache *pc);

/* Positions held by all entries, and their number. */
size_t ilab_prefix_cache_positions(const ilab_prefix_cache *pc);
size_t ilab_prefix_cache_entries(const ilab_prefix_cache *pc);

#endif
