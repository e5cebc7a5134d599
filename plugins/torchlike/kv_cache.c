#include "kv_cache.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static size_t block_floats(const tl_kv_cache *kv)
{
    return (size_t)kv->n_layers * 2 * TL_KV_BLOCK * (size_t)kv->kv_dim;
}

ilab_status tl_kv_init(tl_kv_cache *kv, int n_layers, int kv_dim, int max_positions,
                       int n_blocks, int max_sequences)
{
    memset(kv, 0, sizeof *kv);
    kv->n_layers = n_layers;
    kv->kv_dim = kv_dim;
    kv->max_positions = max_positions;
    kv->n_blocks = n_blocks;
    kv->max_blocks_per_seq = (max_positions + TL_KV_BLOCK - 1) / TL_KV_BLOCK;
    kv->max_sequences = max_sequences;
    kv->mem_bytes = (size_t)n_blocks * block_floats(kv) * sizeof(float);
    /* Reserve address space only: a block costs memory once it is written. */
    void *mem = mmap(NULL, kv->mem_bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (mem == MAP_FAILED) {
        kv->mem = NULL;
        return ILAB_OUT_OF_MEMORY;
    }
    kv->mem = mem;
    kv->refcount = calloc((size_t)n_blocks, sizeof *kv->refcount);
    kv->free_blocks = malloc((size_t)n_blocks * sizeof *kv->free_blocks);
    kv->seqs = calloc((size_t)max_sequences, sizeof *kv->seqs);
    if (!kv->refcount || !kv->free_blocks || !kv->seqs) {
        tl_kv_destroy(kv);
        return ILAB_OUT_OF_MEMORY;
    }
    /* Stack order: block 0 is handed out first. */
    for (int i = 0; i < n_blocks; i++)
        kv->free_blocks[i] = n_blocks - 1 - i;
    kv->n_free = n_blocks;
    for (int i = 0; i < max_sequences; i++) {
        kv->seqs[i].blocks = malloc((size_t)kv->max_blocks_per_seq * sizeof(int));
        if (!kv->seqs[i].blocks) {
            tl_kv_destroy(kv);
            return ILAB_OUT_OF_MEMORY;
        }
    }
    return ILAB_OK;
}

void tl_kv_destroy(tl_kv_cache *kv)
{
    if (kv->mem)
        munmap(kv->mem, kv->mem_bytes);
    if (kv->seqs)
        for (int i = 0; i < kv->max_sequences; i++)
            free(kv->seqs[i].blocks);
    free(kv->seqs);
    free(kv->refcount);
    free(kv->free_blocks);
    memset(kv, 0, sizeof *kv);
}

float *tl_kv_keys(const tl_kv_cache *kv, int block, int layer)
{
    return kv->mem + (size_t)block * block_floats(kv) +
           (size_t)layer * 2 * TL_KV_BLOCK * (size_t)kv->kv_dim;
}

float *tl_kv_values(const tl_kv_cache *kv, int block, int layer)
{
    return tl_kv_keys(kv, block, layer) + TL_KV_BLOCK * (size_t)kv->kv_dim;
}

static int block_alloc(tl_kv_cache *kv)
{
    int b = kv->free_blocks[--kv->n_free];
    kv->refcount[b] = 1;
    return b;
}

static void block_unref(tl_kv_cache *kv, int b)
{
    if (--kv->refcount[b] == 0)
        kv->free_blocks[kv->n_free++] = b;
}

static uint64_t handle_of(const tl_kv_cache *kv, const tl_kv_sequence *s)
{
    return ((uint64_t)s->generation << 32) | (uint64_t)(s - kv->seqs + 1);
}

ilab_status tl_kv_seq_create(tl_kv_cache *kv, uint64_t *handle)
{
    for (int i = 0; i < kv->max_sequences; i++) {
        tl_kv_sequence *s = &kv->seqs[i];
        if (!s->in_use) {
            s->in_use = 1;
            s->length = 0;
            s->n_blocks = 0;
            *handle = handle_of(kv, s);
            return ILAB_OK;
        }
    }
    return ILAB_OUT_OF_MEMORY;
}

tl_kv_sequence *tl_kv_seq_get(tl_kv_cache *kv, uint64_t handle)
{
    uint64_t slot = handle & 0xffffffffu;
    if (slot == 0 || slot > (uint64_t)kv->max_sequences)
        return NULL;
    tl_kv_sequence *s = &kv->seqs[slot - 1];
    if (!s->in_use || s->generation != (uint32_t)(handle >> 32))
        return NULL;
    return s;
}

void tl_kv_seq_free(tl_kv_cache *kv, tl_kv_sequence *s)
{
    for (int i = 0; i < s->n_blocks; i++)
        block_unref(kv, s->blocks[i]);
    s->n_blocks = 0;
    s->length = 0;
    s->in_use = 0;
    s->generation++; /* the old handle is stale from now on */
}

ilab_status tl_kv_seq_fork(tl_kv_cache *kv, tl_kv_sequence *parent, uint64_t *child)
{
    uint64_t h;
    ilab_status st = tl_kv_seq_create(kv, &h);
    if (st != ILAB_OK)
        return st;
    tl_kv_sequence *c = tl_kv_seq_get(kv, h);
    memcpy(c->blocks, parent->blocks, (size_t)parent->n_blocks * sizeof(int));
    c->n_blocks = parent->n_blocks;
    c->length = parent->length;
    for (int i = 0; i < c->n_blocks; i++)
        kv->refcount[c->blocks[i]]++;
    *child = h;
    return ILAB_OK;
}

void tl_kv_seq_truncate(tl_kv_cache *kv, tl_kv_sequence *s, int n_keep)
{
    int keep_blocks = (n_keep + TL_KV_BLOCK - 1) / TL_KV_BLOCK;
    for (int i = keep_blocks; i < s->n_blocks; i++)
        block_unref(kv, s->blocks[i]);
    s->n_blocks = keep_blocks;
    s->length = n_keep;
}

int tl_kv_blocks_needed(const tl_kv_cache *kv, const tl_kv_sequence *s, int n_new)
{
    int end_blocks = (s->length + n_new + TL_KV_BLOCK - 1) / TL_KV_BLOCK;
    int needed = end_blocks - s->n_blocks;
    /* The partly filled last block is written to; shared, it must be copied. */
    if (s->length % TL_KV_BLOCK != 0 && kv->refcount[s->blocks[s->n_blocks - 1]] > 1)
        needed++;
    return needed;
}

void tl_kv_prepare_append(tl_kv_cache *kv, tl_kv_sequence *s, int n_new)
{
    if (s->length % TL_KV_BLOCK != 0) {
        int last = s->blocks[s->n_blocks - 1];
        if (kv->refcount[last] > 1) {
            int copy = block_alloc(kv);
            memcpy(tl_kv_keys(kv, copy, 0), tl_kv_keys(kv, last, 0),
                   block_floats(kv) * sizeof(float));
            block_unref(kv, last);
            s->blocks[s->n_blocks - 1] = copy;
        }
    }
    int end_blocks = (s->length + n_new + TL_KV_BLOCK - 1) / TL_KV_BLOCK;
    while (s->n_blocks < end_blocks)
        s->blocks[s->n_blocks++] = block_alloc(kv);
}

int tl_kv_blocks_in_use(const tl_kv_cache *kv)
{
    return kv->n_blocks - kv->n_free;
}
