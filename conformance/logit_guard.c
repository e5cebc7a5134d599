/* Guarded logits buffers (LOG-1: eval() writes exactly the rows LOG-5
 * defines and no float outside them). A buffer is its rows with a guard
 * region before and after; every float, the rows included, starts as a
 * canary bit pattern that no finite logit has, so a check after the call
 * sees both a float written outside the rows and one left unwritten (or
 * not finite) inside them. The guard after the rows is a quarter of their
 * size at least: a kernel that pads its last tile of rows overruns into it
 * rather than past the allocation. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "suite.h"

enum { GUARD_BEFORE = 1024, GUARD_AFTER_MIN = 1024 };

/* A negative signalling NaN with a payload no arithmetic produces. */
static const uint32_t CANARY = 0xffa5c3e1u;

typedef struct guard_header {
    size_t n, after;
} guard_header;

static size_t guard_after(size_t n)
{
    return n / 4 > GUARD_AFTER_MIN ? n / 4 : GUARD_AFTER_MIN;
}

static guard_header *header_of(const float *p)
{
    return (guard_header *)((uintptr_t)(p - GUARD_BEFORE) - sizeof(guard_header));
}

static bool is_canary(const float *f)
{
    uint32_t bits;
    memcpy(&bits, f, sizeof bits);
    return bits == CANARY;
}

float *conf_guarded_alloc(size_t n_floats)
{
    size_t after = guard_after(n_floats), total = GUARD_BEFORE + n_floats + after;
    char *block = malloc(sizeof(guard_header) + total * sizeof(float));
    if (!block)
        return NULL;
    guard_header *h = (guard_header *)(void *)block;
    h->n = n_floats;
    h->after = after;
    float *all = (float *)(void *)(block + sizeof *h);
    for (size_t i = 0; i < total; i++)
        memcpy(&all[i], &CANARY, sizeof CANARY);
    return all + GUARD_BEFORE;
}

void conf_guarded_free(float *p)
{
    if (p)
        free(header_of(p));
}

bool conf_guarded_check(const float *p, size_t n_written, const char *what, char *msg, size_t cap)
{
    const guard_header *h = header_of(p);
    for (size_t i = 1; i <= GUARD_BEFORE; i++)
        if (!is_canary(p - i)) {
            snprintf(msg, cap, "%s: eval() wrote the float %zu before the item's first row (LOG-1: no "
                     "float outside the rows LOG-5 defines)", what, i);
            return false;
        }
    for (size_t i = n_written; i < h->n + h->after; i++)
        if (!is_canary(p + i)) {
            snprintf(msg, cap, "%s: eval() wrote the float %zu past the end of the %zu floats of rows "
                     "LOG-5 defines (LOG-1: no float outside them)", what, i - n_written + 1, n_written);
            return false;
        }
    for (size_t i = 0; i < n_written; i++)
        if (!isfinite(p[i])) {
            snprintf(msg, cap, "%s: float %zu of the rows is %s (LOG-1: every float of every row "
                     "written and finite)", what, i, is_canary(p + i) ? "not written" : "not finite");
            return false;
        }
    return true;
}
