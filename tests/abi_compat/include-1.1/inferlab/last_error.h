/* inferlab SDK — a per-instance last-error message, for backend authors.
 *
 * backend.h asks every instance to keep the message of its most recent
 * non-OK status, readable from any thread through last_error(). Every plugin
 * needs exactly this, so the SDK provides it (header-only; needs pthreads):
 *
 *     struct ilab_backend { ...; ilab_last_error_t error; };
 *     return ilab_last_error_set(&b->error, ILAB_INVALID_ARGUMENT,
 *                                "mybackend: token %d is out of range", id);
 *     static size_t my_last_error(const ilab_backend_t *b, char *buf, size_t cap)
 *     { return ilab_last_error_copy(b ? &b->error : NULL, buf, cap); }
 */
#ifndef INFERLAB_LAST_ERROR_H
#define INFERLAB_LAST_ERROR_H

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "inferlab/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ilab_last_error {
    pthread_mutex_t lock; /* writers are any thread that fails a call; readers any thread */
    char message[1024];   /* NUL-terminated, truncated to fit */
} ilab_last_error_t;

static inline void ilab_last_error_init(ilab_last_error_t *e)
{
    pthread_mutex_init(&e->lock, NULL);
    e->message[0] = '\0';
}

static inline void ilab_last_error_destroy(ilab_last_error_t *e)
{
    pthread_mutex_destroy(&e->lock);
}

/* Record a message and return `status`, so a failing call can end with
 * `return ilab_last_error_setv(...)`. `e` NULL records nothing. */
static inline ilab_status ilab_last_error_setv(ilab_last_error_t *e, ilab_status status,
                                               const char *fmt, va_list ap)
{
    if (!e)
        return status;
    char msg[sizeof e->message];
    vsnprintf(msg, sizeof msg, fmt, ap);
    pthread_mutex_lock(&e->lock);
    memcpy(e->message, msg, sizeof msg);
    pthread_mutex_unlock(&e->lock);
    return status;
}

static inline ilab_status ilab_last_error_set(ilab_last_error_t *e, ilab_status status,
                                              const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static inline ilab_status ilab_last_error_set(ilab_last_error_t *e, ilab_status status,
                                              const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ilab_last_error_setv(e, status, fmt, ap);
    va_end(ap);
    return status;
}

/* The body of a backend's last_error(): copy into caller-owned `buf`
 * (NUL-terminated, truncated to fit) and return the full length [ERR-4]. `e` NULL
 * (no instance) gives "". The lock is not logical state, hence the cast. */
static inline size_t ilab_last_error_copy(const ilab_last_error_t *e, char *buf, size_t cap)
{
    if (!e) {
        if (buf && cap)
            buf[0] = '\0';
        return 0;
    }
    ilab_last_error_t *m = (ilab_last_error_t *)e;
    pthread_mutex_lock(&m->lock);
    size_t len = strlen(m->message);
    if (buf && cap)
        snprintf(buf, cap, "%s", m->message);
    pthread_mutex_unlock(&m->lock);
    return len;
}

#ifdef __cplusplus
}
#endif
#endif
