/* The server's logging: error lines to stderr, at most a few per second
 * (a flood of bad requests must not become a flood of lines), and the
 * optional access log (--access-log FILE), one line per request. */
#ifndef ILAB_SERVER_SERVER_LOG_H
#define ILAB_SERVER_SERVER_LOG_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <pthread.h>

/* At most this many error lines per second; the rest are counted and
 * reported as "suppressed K" with the next line after the second ends. */
#define ILAB_SERVER_LOG_LINES_PER_SECOND 10

typedef struct ilab_server_log {
    pthread_mutex_t mu;
    long window;          /* the second being counted (CLOCK_MONOTONIC) */
    int lines;            /* printed in `window` */
    unsigned long long suppressed; /* not printed since the last report */
    FILE *access;         /* NULL: no access log */
} ilab_server_log;

/* `access_path` NULL: no access log. Errors name the file. */
bool ilab_server_log_open(ilab_server_log *l, const char *access_path, char *err,
                          size_t err_cap);
/* Reports what is still suppressed, closes the access log. */
void ilab_server_log_close(ilab_server_log *l);

/* One error line: "inferlab serve: <prefix><fmt...>" (fmt ends in \n or not). */
void ilab_server_log_error(ilab_server_log *l, const char *prefix, const char *fmt, va_list ap);

/* One access-log line (no-op without an access log). */
void ilab_server_log_access(ilab_server_log *l, const char *client, const char *method,
                            const char *path, unsigned status, double seconds);

#endif
