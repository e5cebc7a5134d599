/* inferlab SDK — reading a size-prefixed struct written by the other side.
 *
 * Every struct that crosses the boundary starts with `uint32_t struct_size`,
 * the writer's sizeof, and grows only by appending members (docs/adr/0008).
 * Two rules follow for the reader, whichever side it is on:
 *
 *  - A member the writer did not have (past its struct_size) is absent: the
 *    reader uses the member's "off" value, which is always all-zero bytes.
 *    ILAB_STRUCT_HAS() tells which members are present.
 *  - A writer newer than the reader may set members the reader does not
 *    know. Ignoring them would silently change what the request means, so
 *    the reader refuses unless every byte past its own sizeof is zero ("off"),
 *    as the Linux kernel does for its extensible syscall structs.
 *    ilab_struct_tail_is_zero() is that check; the refusal is
 *    ILAB_ABI_MISMATCH with a message naming the struct [ABI-3,
 *    docs/contract.md]. */
#ifndef INFERLAB_STRUCT_SIZE_H
#define INFERLAB_STRUCT_SIZE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Frozen sizes: sizeof of every size-prefixed struct as each minor defined
 * it, on LP64 targets (the ones sdk/abi/ records). Use these, never sizeof,
 * wherever a rule means "ABI 1.0's" (the smallest struct_size to accept, the
 * shortest table to load): sizeof is the size of the header at hand and
 * grows when a minor appends a member, so a check written with sizeof would
 * refuse every struct written against an older header. They never change;
 * a new minor adds its own line. tests/abi checks every value against the
 * committed layout records (abi.frozen_sizes), and tests/abi_compat checks
 * the 1.0 values against the ABI 1.0 headers themselves. */
#if defined(__LP64__) || defined(_LP64)
#define ILAB_PLUGIN_ENTRY_SIZE_1_0 48u
#define ILAB_PLUGIN_ENTRY_SIZE_1_1 48u
#define ILAB_PLUGIN_ENTRY_SIZE_1_2 48u
#define ILAB_HOST_SIZE_1_0 40u
#define ILAB_HOST_SIZE_1_1 40u
#define ILAB_HOST_SIZE_1_2 40u
#define ILAB_MODEL_INFO_SIZE_1_0 164u
#define ILAB_MODEL_INFO_SIZE_1_1 164u
#define ILAB_MODEL_INFO_SIZE_1_2 164u
#define ILAB_BATCH_ITEM_SIZE_1_0 40u
#define ILAB_BATCH_ITEM_SIZE_1_1 40u
#define ILAB_BATCH_ITEM_SIZE_1_2 40u
#define ILAB_BACKEND_API_SIZE_1_0 136u /* ends after cancel */
#define ILAB_BACKEND_API_SIZE_1_1 144u /* ends after cache_stats */
#define ILAB_BACKEND_API_SIZE_1_2 160u /* ends after chat_template */
#define ILAB_CACHE_STATS_SIZE_1_1 24u  /* new in 1.1 */
#define ILAB_CACHE_STATS_SIZE_1_2 24u
#define ILAB_SAMPLING_SIZE_1_0 40u
#define ILAB_SAMPLING_SIZE_1_1 40u
#define ILAB_SAMPLING_SIZE_1_2 40u
#define ILAB_GENERATE_REQUEST_SIZE_1_0 88u
#define ILAB_GENERATE_REQUEST_SIZE_1_1 88u
#define ILAB_GENERATE_REQUEST_SIZE_1_2 88u
#define ILAB_EVENT_SIZE_1_0 88u
#define ILAB_EVENT_SIZE_1_1 88u
#define ILAB_EVENT_SIZE_1_2 88u
#endif

/* Nonzero when `ptr` (a pointer to a size-prefixed struct of `type`) was
 * written with room for `member`. */
#define ILAB_STRUCT_HAS(type, ptr, member) \
    ((ptr)->struct_size >= offsetof(type, member) + sizeof((ptr)->member))

/* Nonzero when the bytes of the struct at `s` past `known_size` (the reader's
 * sizeof) up to its struct_size are all zero, i.e. every member the reader
 * does not know is off. A struct no larger than `known_size` passes. */
static inline int ilab_struct_tail_is_zero(const void *s, size_t known_size)
{
    uint32_t size;
    const unsigned char *p = (const unsigned char *)s;
    size = *(const uint32_t *)s;
    for (size_t i = known_size; i < size; i++)
        if (p[i] != 0)
            return 0;
    return 1;
}

#ifdef __cplusplus
}
#endif
#endif
