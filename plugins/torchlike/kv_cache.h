/* torchlike — the paged KV cache: a pool of fixed-size blocks and the
 * sequences that own block tables into it.
 *
 * A block holds TL_KV_BLOCK positions of keys and values for every layer.
 * Blocks are reference-counted: fork() shares a parent's blocks, and a block
 * is copied only when a sequence writes into one it shares (copy on write).
 * Sequence handles carry a generation counter so that a freed slot's old
 * handle is recognised as stale. Not thread-safe: the backend serialises. */
#ifndef TORCHLIKE_KV_CACHE_H
#define TORCHLIKE_KV_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "inferlab/status.h"

#define TL_KV_BLOCK 16

typedef struct tl_kv_sequence {
    uint32_t generation; /* bumped on free; part of the handle */
    int in_use;
    int length;          /* positions written */
    int n_blocks;        /* entries used in `blocks` */
    int *blocks;         /* [max_blocks_per_seq] block ids */
} tl_kv_sequence;

typedef struct tl_kv_cache {
    int n_layers, kv_dim, max_positions;
    int n_blocks, max_blocks_per_seq;
    float *mem;            /* anonymous mapping; pages are touched lazily */
    size_t mem_bytes;
    int *refcount;         /* [n_blocks] */
    int *free_blocks;      /* stack of free block ids */
    int n_free;
    int max_sequences;
    tl_kv_sequence *seqs;  /* [max_sequences] */
} tl_kv_cache;

ilab_status tl_kv_init(tl_kv_cache *kv, int n_layers, int kv_dim, int max_positions,
                       int n_blocks, int max_sequences);
void tl_kv_destroy(tl_kv_cache *kv);

/* Keys (or values) of `block` in `layer`: [TL_KV_BLOCK][kv_dim]. */
float *tl_kv_keys(const tl_kv_cache *kv, int block, int layer);
float *tl_kv_values(const tl_kv_cache *kv, int block, int layer);

/* Handles: (generation << 32) | (slot + 1), so 0 is never valid. */
ilab_status tl_kv_seq_create(tl_kv_cache *kv, uint64_t *handle);
tl_kv_sequence *tl_kv_seq_get(tl_kv_cache *kv, uint64_t handle); /* NULL when stale */
void tl_kv_seq_free(tl_kv_cache *kv, tl_kv_sequence *s);
ilab_status tl_kv_seq_fork(tl_kv_cache *kv, tl_kv_sequence *parent, uint64_t *child);
void tl_kv_seq_truncate(tl_kv_cache *kv, tl_kv_sequence *s, int n_keep);

/* Blocks that appending `n_new` positions to `s` would take from the pool
 * (new blocks plus copies of shared blocks that would be written). */
int tl_kv_blocks_needed(const tl_kv_cache *kv, const tl_kv_sequence *s, int n_new);

/* Make positions [s->length, s->length + n_new) writable and owned by `s`
 * alone. The caller has checked tl_kv_blocks_needed() against n_free, so
 * this cannot fail. Does not change s->length. */
void tl_kv_prepare_append(tl_kv_cache *kv, tl_kv_sequence *s, int n_new);

int tl_kv_blocks_in_use(const tl_kv_cache *kv);

#endif
