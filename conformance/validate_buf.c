/* Shadow buffers for the validation layer: the plugin writes into a copy
 * with guard bytes around it, so a write past the capacity, or any write on
 * a status that allows none, is seen whichever test made the call. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "validate_internal.h"

bool val_buf_open(val_buf *b, size_t size)
{
    b->mem = NULL;
    b->size = size;
    if (size > VAL_SHADOW_MAX)
        return false;
    b->mem = malloc(size + 2 * VAL_GUARD);
    if (!b->mem)
        return false;
    memset(b->mem, VAL_PATTERN, size + 2 * VAL_GUARD);
    return true;
}

void *val_buf_ptr(const val_buf *b)
{
    return b->mem + VAL_GUARD;
}

static bool all_pattern(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != VAL_PATTERN)
            return false;
    return true;
}

bool val_buf_guards_ok(const val_buf *b)
{
    return all_pattern(b->mem, VAL_GUARD) && all_pattern(b->mem + VAL_GUARD + b->size, VAL_GUARD);
}

size_t val_buf_changed_from(const val_buf *b, size_t from)
{
    const unsigned char *p = b->mem + VAL_GUARD;
    for (size_t i = from; i < b->size; i++)
        if (p[i] != VAL_PATTERN)
            return i;
    return SIZE_MAX;
}

void val_buf_close(val_buf *b)
{
    free(b->mem);
    b->mem = NULL;
}
