/* The prefix cache's index (see prefix_cache.h). Entries are few (the
 * budget over the shortest useful prompt), so lookups scan them all: a
 * longest-common-prefix per entry costs less than one token's decode. */
#include "prefix_cache.h"

#include <stdlib.h>
#include <string.h>

typedef struct entry {
    ilab_seq_t seq;
    int32_t *tokens; /* owned copy */
    size_t n;
    uint64_t last_used;
} entry;

struct ilab_prefix_cache {
    entry *entries;
    size_t n_entries, cap_entries;
    size_t positions, budget, min_tokens;
    uint64_t clock;
    ilab_prefix_release_fn release;
    void *ctx;
};

ilab_prefix_cache *ilab_prefix_cache_create(size_t budget, size_t min_tokens,
                                            ilab_prefix_release_fn release, void *ctx)
{
    ilab_prefix_cache *pc = calloc(1, sizeof *pc);
    if (!pc)
        return NULL;
    pc->budget = budget ? budget : 1;
    pc->min_tokens = min_tokens ? min_tokens : 1;
    pc->release = release;
    pc->ctx = ctx;
    return pc;
}

static void drop(ilab_prefix_cache *pc, size_t i)
{
    entry *en = &pc->entries[i];
    pc->release(pc->ctx, en->seq);
    pc->positions -= en->n;
    free(en->tokens);
    pc->entries[i] = pc->entries[--pc->n_entries];
}

void ilab_prefix_cache_destroy(ilab_prefix_cache *pc)
{
    if (!pc)
        return;
    while (pc->n_entries)
        drop(pc, pc->n_entries - 1);
    free(pc->entries);
    free(pc);
}

static size_t common_prefix(const int32_t *a, size_t na, const int32_t *b, size_t nb)
{
    size_t n = na < nb ? na : nb, i = 0;
    while (i < n && a[i] == b[i])
        i++;
    return i;
}

bool ilab_prefix_cache_match(ilab_prefix_cache *pc, const int32_t *tokens, size_t n,
                             ilab_seq_t *seq, size_t *shared)
{
    size_t best = 0, best_i = 0;
    for (size_t i = 0; i < pc->n_entries; i++) {
        size_t k = common_prefix(pc->entries[i].tokens, pc->entries[i].n, tokens, n);
        if (k > best) {
            best = k;
            best_i = i;
        }
    }
    if (best < pc->min_tokens)
        return false;
    pc->entries[best_i].last_used = ++pc->clock;
    *seq = pc->entries[best_i].seq;
    *shared = best;
    return true;
}

bool ilab_prefix_cache_wants(ilab_prefix_cache *pc, const int32_t *tokens, size_t n)
{
    if (n < pc->min_tokens || n > pc->budget)
        return false;
    for (size_t i = 0; i < pc->n_entries; i++) {
        entry *en = &pc->entries[i];
        if (en->n >= n && common_prefix(en->tokens, en->n, tokens, n) == n) {
            en->last_used = ++pc->clock;
            return false;
        }
    }
    return true;
}

static size_t lru_index(const ilab_prefix_cache *pc)
{
    size_t lru = 0;
    for (size_t i = 1; i < pc->n_entries; i++)
        if (pc->entries[i].last_used < pc->entries[lru].last_used)
            lru = i;
    return lru;
}

bool ilab_prefix_cache_insert(ilab_prefix_cache *pc, ilab_seq_t seq, const int32_t *tokens,
                              size_t n)
{
    int32_t *copy = malloc((n ? n : 1) * sizeof *copy);
    if (!copy) {
        free(copy);
        pc->release(pc->ctx, seq);
        return false;
    }
    if (pc->n_entries == pc->cap_entries) {
        size_t cap = pc->cap_entries * 2 + 8;
        entry *grown = realloc(pc->entries, cap * sizeof *grown);
        if (!grown) {
            free(copy);
            pc->release(pc->ctx, seq);
            return false;
        }
        pc->entries = grown;
        pc->cap_entries = cap;
    }
    memcpy(copy, tokens, n * sizeof *copy);
    /* An entry that is a prefix of the new one answers no lookup the new
     * one cannot. */
    for (size_t i = 0; i < pc->n_entries;) {
        entry *en = &pc->entries[i];
        if (en->n <= n && common_prefix(en->tokens, en->n, tokens, n) == en->n)
            drop(pc, i);
        else
            i++;
    }
    while (pc->n_entries && pc->positions + n > pc->budget)
        drop(pc, lru_index(pc));
    pc->entries[pc->n_entries++] =
        (entry){.seq = seq, .tokens = copy, .n = n, .last_used = ++pc->clock};
    pc->positions += n;
    return true;
}

bool ilab_prefix_cache_evict_lru(ilab_prefix_cache *pc)
{
    if (!pc || pc->n_entries == 0)
        return false;
    drop(pc, lru_index(pc));
    return true;
}

size_t ilab_prefix_cache_positions(const ilab_prefix_cache *pc) { return pc ? pc->positions : 0; }

size_t ilab_prefix_cache_entries(const ilab_prefix_cache *pc) { return pc ? pc->n_entries : 0; }
