#include "str_map.h"

#include <stdlib.h>
#include <string.h>

static uint64_t hash_bytes(const char *s, int len)
{
    uint64_t h = 1469598103934665603u; /* FNV-1a */
    for (int i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211u;
    }
    return h;
}

static size_t slots_for(size_t n)
{
    size_t cap = 16;
    while (cap < 2 * n + 2)
        cap *= 2;
    return cap;
}

int tl_str_map_init(tl_str_map *m, size_t n)
{
    memset(m, 0, sizeof *m);
    m->cap = slots_for(n);
    m->keys = calloc(m->cap, sizeof *m->keys);
    m->lens = calloc(m->cap, sizeof *m->lens);
    m->vals = calloc(m->cap, sizeof *m->vals);
    if (!m->keys || !m->lens || !m->vals) {
        tl_str_map_free(m);
        return -1;
    }
    return 0;
}

void tl_str_map_free(tl_str_map *m)
{
    free(m->keys);
    free(m->lens);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

static size_t find_slot(const tl_str_map *m, const char *key, int len)
{
    size_t i = (size_t)hash_bytes(key, len) & (m->cap - 1);
    while (m->keys[i] && !(m->lens[i] == len && memcmp(m->keys[i], key, (size_t)len) == 0))
        i = (i + 1) & (m->cap - 1);
    return i;
}

static int grow(tl_str_map *m)
{
    tl_str_map bigger;
    if (tl_str_map_init(&bigger, m->cap) != 0) /* cap slots hold cap keys at half load */
        return -1;
    for (size_t i = 0; i < m->cap; i++)
        if (m->keys[i])
            tl_str_map_put(&bigger, m->keys[i], m->lens[i], m->vals[i]);
    tl_str_map_free(m);
    *m = bigger;
    return 0;
}

int tl_str_map_put(tl_str_map *m, const char *key, int len, int32_t val)
{
    if (2 * (m->used + 1) > m->cap && grow(m) != 0)
        return -1;
    size_t i = find_slot(m, key, len);
    if (!m->keys[i]) {
        m->keys[i] = key;
        m->lens[i] = len;
        m->used++;
    }
    m->vals[i] = val;
    return 0;
}

int32_t tl_str_map_get(const tl_str_map *m, const char *key, int len)
{
    if (m->cap == 0)
        return -1;
    size_t i = find_slot(m, key, len);
    return m->keys[i] ? m->vals[i] : -1;
}

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdu;
    x ^= x >> 33;
    return x;
}

int tl_pair_map_init(tl_pair_map *m, size_t n)
{
    memset(m, 0, sizeof *m);
    m->cap = slots_for(n);
    m->keys = malloc(m->cap * sizeof *m->keys);
    m->rank = malloc(m->cap * sizeof *m->rank);
    m->merged = malloc(m->cap * sizeof *m->merged);
    if (!m->keys || !m->rank || !m->merged) {
        tl_pair_map_free(m);
        return -1;
    }
    memset(m->keys, 0xff, m->cap * sizeof *m->keys);
    return 0;
}

void tl_pair_map_free(tl_pair_map *m)
{
    free(m->keys);
    free(m->rank);
    free(m->merged);
    memset(m, 0, sizeof *m);
}

static size_t pair_slot(const tl_pair_map *m, uint64_t key)
{
    size_t i = (size_t)mix64(key) & (m->cap - 1);
    while (m->keys[i] != UINT64_MAX && m->keys[i] != key)
        i = (i + 1) & (m->cap - 1);
    return i;
}

void tl_pair_map_put(tl_pair_map *m, int32_t left, int32_t right, int32_t rank, int32_t merged)
{
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    size_t i = pair_slot(m, key);
    if (m->keys[i] == key)
        return;
    m->keys[i] = key;
    m->rank[i] = rank;
    m->merged[i] = merged;
}

int32_t tl_pair_map_get(const tl_pair_map *m, int32_t left, int32_t right, int32_t *merged)
{
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    size_t i = pair_slot(m, key);
    if (m->keys[i] != key)
        return -1;
    *merged = m->merged[i];
    return m->rank[i];
}
