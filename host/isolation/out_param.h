/* Out-parameters across the wire, so that the plugin in the worker sees what
 * the caller passed and the caller sees what the plugin wrote, byte for
 * byte: a NULL stays NULL, the capacity stays the caller's, and the caller's
 * bytes travel to the worker and back, so a plugin that writes where it must
 * not (on an error, past a NUL) is seen doing it through the proxy too.
 *
 * A buffer's first ILAB_OUT_WINDOW bytes travel both ways; on success the
 * bytes the call reports as written come back too, however many. The worker
 * gives the plugin a buffer of the caller's capacity (at most
 * ILAB_OUT_CAP_MAX bytes, the one place where a proxied call can differ: a
 * capacity above it is lowered to it). */
#ifndef ILAB_HOST_ISOLATION_OUT_PARAM_H
#define ILAB_HOST_ISOLATION_OUT_PARAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wire.h"

#define ILAB_OUT_WINDOW ((size_t)64 << 10)
#define ILAB_OUT_CAP_MAX ((size_t)256 << 20)

/* Host side: `buf` of `cap` elements of `elem` bytes (buf may be NULL). */
void ilab_out_put(ilab_wire_out *o, const void *buf, size_t cap, size_t elem);
/* Host side, reading the reply: copy what came back into `buf`. */
void ilab_out_copy_back(ilab_wire_in *in, void *buf, size_t cap, size_t elem);

/* Worker side. */
typedef struct ilab_out_buf {
    void *buf;     /* NULL when the caller passed NULL */
    size_t cap;    /* elements, as the plugin is told */
    size_t elem;
    size_t window; /* bytes that came from the caller */
} ilab_out_buf;

bool ilab_out_get(ilab_wire_in *in, size_t elem, ilab_out_buf *b);
/* Reply with the window, or the first `used` elements when more. */
void ilab_out_put_back(ilab_wire_out *o, const ilab_out_buf *b, size_t used);
void ilab_out_free(ilab_out_buf *b);

/* A scalar out-parameter (size_t, int32_t, ilab_seq_t): its NULL-ness and
 * value travel as a u64. */
void ilab_out_put_scalar(ilab_wire_out *o, const void *p, uint64_t value);
/* Worker side: *present, and the value the caller's variable held. */
uint64_t ilab_out_get_scalar(ilab_wire_in *in, bool *present);

#endif
