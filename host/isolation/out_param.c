/* Out-parameters across the wire (out_param.h). */
#include "out_param.h"

#include <stdlib.h>
#include <string.h>

static size_t window_of(size_t cap, size_t elem)
{
    size_t bytes = cap > ILAB_OUT_WINDOW / elem ? ILAB_OUT_WINDOW : cap * elem;
    return bytes / elem * elem;
}

void ilab_out_put(ilab_wire_out *o, const void *buf, size_t cap, size_t elem)
{
    ilab_wire_put_u32(o, buf != NULL);
    ilab_wire_put_u64(o, cap);
    if (buf)
        ilab_wire_put_opt(o, buf, window_of(cap, elem));
}

void ilab_out_copy_back(ilab_wire_in *in, void *buf, size_t cap, size_t elem)
{
    bool present;
    size_t n;
    const void *p = ilab_wire_get_opt(in, &present, &n);
    if (!buf || !present || in->bad)
        return;
    size_t limit = cap > SIZE_MAX / elem ? SIZE_MAX : cap * elem;
    memcpy(buf, p, n < limit ? n : limit);
}

bool ilab_out_get(ilab_wire_in *in, size_t elem, ilab_out_buf *b)
{
    memset(b, 0, sizeof *b);
    b->elem = elem;
    bool present = ilab_wire_get_u32(in) != 0;
    b->cap = (size_t)ilab_wire_get_u64(in);
    if (in->bad)
        return false;
    if (b->cap > ILAB_OUT_CAP_MAX / elem)
        b->cap = ILAB_OUT_CAP_MAX / elem;
    if (!present)
        return true;
    size_t n;
    const void *p = ilab_wire_get_opt(in, &present, &n);
    if (in->bad || n > b->cap * elem)
        return false;
    /* calloc: the pages of a large, mostly unused capacity stay untouched. */
    b->buf = calloc(b->cap ? b->cap : 1, elem);
    if (!b->buf)
        return false;
    memcpy(b->buf, p, n);
    b->window = n;
    return true;
}

void ilab_out_put_back(ilab_wire_out *o, const ilab_out_buf *b, size_t used)
{
    if (!b->buf) {
        ilab_wire_put_opt(o, NULL, 0);
        return;
    }
    size_t bytes = used <= b->cap ? used * b->elem : b->cap * b->elem;
    ilab_wire_put_opt(o, b->buf, bytes > b->window ? bytes : b->window);
}

void ilab_out_free(ilab_out_buf *b)
{
    free(b->buf);
    b->buf = NULL;
}

void ilab_out_put_scalar(ilab_wire_out *o, const void *p, uint64_t value)
{
    ilab_wire_put_u32(o, p != NULL);
    ilab_wire_put_u64(o, p ? value : 0);
}

uint64_t ilab_out_get_scalar(ilab_wire_in *in, bool *present)
{
    *present = ilab_wire_get_u32(in) != 0;
    return ilab_wire_get_u64(in);
}
