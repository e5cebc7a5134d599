/* torchlike — the hash tables of the byte-level BPE tokenizer: byte strings
 * to ids, and pairs of ids to merge ranks. Open addressing, linear probing,
 * power-of-two capacities at most half full. */
#ifndef TORCHLIKE_STR_MAP_H
#define TORCHLIKE_STR_MAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct tl_str_map {
    const char **keys; /* borrowed: the caller keeps the bytes alive */
    int *lens;
    int32_t *vals;
    size_t cap;        /* slots; 0 before init */
    size_t used;
} tl_str_map;

/* Room for `n` keys without growing. Returns 0, or -1 when out of memory. */
int tl_str_map_init(tl_str_map *m, size_t n);
void tl_str_map_free(tl_str_map *m);
/* Insert or overwrite (the last value put for a key wins, as in llama.cpp's
 * token_to_id). The key bytes are borrowed. Returns 0, or -1 when out of memory. */
int tl_str_map_put(tl_str_map *m, const char *key, int len, int32_t val);
/* The value for these bytes, or -1. */
int32_t tl_str_map_get(const tl_str_map *m, const char *key, int len);

/* (left id, right id) -> (rank, merged id). */
typedef struct tl_pair_map {
    uint64_t *keys; /* left << 32 | right; UINT64_MAX = empty */
    int32_t *rank, *merged;
    size_t cap;
} tl_pair_map;

int tl_pair_map_init(tl_pair_map *m, size_t n);
void tl_pair_map_free(tl_pair_map *m);
/* Keeps the first (lowest) rank put for a pair. */
void tl_pair_map_put(tl_pair_map *m, int32_t left, int32_t right, int32_t rank, int32_t merged);
/* The rank of the pair (and its merged id in *merged), or -1. */
int32_t tl_pair_map_get(const tl_pair_map *m, int32_t left, int32_t right, int32_t *merged);

#endif
