/* A growable byte buffer kept NUL-terminated: the append every stream and
 * request body needs. The buffer is the caller's three fields (data, length,
 * capacity), so any struct can hold one; free(data) releases it. Not
 * thread-safe: one owner at a time. */
#ifndef ILAB_BYTES_H
#define ILAB_BYTES_H

#include <stdbool.h>
#include <stddef.h>

/* Append n bytes of src (n may be 0) and keep a NUL after them; the
 * capacity at least doubles when it grows. false when out of memory: the
 * buffer is then unchanged. */
bool ilab_bytes_append(char **data, size_t *len, size_t *cap, const void *src, size_t n);

#endif
