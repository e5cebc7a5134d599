/* A growable NUL-terminated byte buffer (bytes.h). */
#include "bytes.h"

#include <stdlib.h>
#include <string.h>

bool ilab_bytes_append(char **data, size_t *len, size_t *cap, const void *src, size_t n)
{
    if (*len + n + 1 > *cap || !*data) {
        size_t grown_cap = (*len + n + 1) * 2;
        char *grown = realloc(*data, grown_cap);
        if (!grown)
            return false;
        *data = grown;
        *cap = grown_cap;
    }
    if (n)
        memcpy(*data + *len, src, n);
    *len += n;
    (*data)[*len] = '\0';
    return true;
}
