/* inferlab SDK — status codes.
 *
 * Every call across the plugin boundary returns an ilab_status. The set is
 * closed: a plugin never returns a value outside it, and the host treats an
 * unknown value as ILAB_INTERNAL. A non-OK status always comes with a message
 * (the backend's last_error(), or the caller-owned error buffer of calls that
 * run before an instance exists) [ERR-1, docs/contract.md]. */
#ifndef INFERLAB_STATUS_H
#define INFERLAB_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ilab_status {
    ILAB_OK = 0,
    ILAB_INVALID_ARGUMENT = 1, /* NULL, out of range, stale handle, bad text */
    ILAB_UNSUPPORTED = 2,      /* capability not declared in the manifest */
    ILAB_UNAVAILABLE = 3,      /* the backend cannot run here (see probe) [PRB-2, ERR-5] */
    ILAB_BUFFER_TOO_SMALL = 4, /* required size reported through the out-param */
    ILAB_CONTEXT_OVERFLOW = 5, /* a sequence would pass max_context */
    ILAB_OUT_OF_MEMORY = 6,    /* allocation or KV-cache pool exhausted */
    ILAB_CANCELLED = 7,        /* the request was cancelled */
    ILAB_ABI_MISMATCH = 8,     /* versions or struct sizes do not agree [ABI-3] */
    ILAB_IO = 9,               /* file or network failure */
    ILAB_INTERNAL = 10,        /* a bug: an invariant did not hold */
} ilab_status;

#define ILAB_STATUS_COUNT 11

/* Stable upper-case name of a status ("INVALID_ARGUMENT"); "UNKNOWN_STATUS"
 * for a value outside the enum. Header-only so plugins need no host symbol. */
static inline const char *ilab_status_name(int status)
{
    static const char *const names[ILAB_STATUS_COUNT] = {
        "OK", "INVALID_ARGUMENT", "UNSUPPORTED", "UNAVAILABLE",
        "BUFFER_TOO_SMALL", "CONTEXT_OVERFLOW", "OUT_OF_MEMORY",
        "CANCELLED", "ABI_MISMATCH", "IO", "INTERNAL",
    };
    if (status < 0 || status >= ILAB_STATUS_COUNT)
        return "UNKNOWN_STATUS";
    return names[status];
}

#ifdef __cplusplus
}
#endif
#endif
