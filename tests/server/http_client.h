/* Test helpers: start `inferlab serve` as a child process on a free port and
 * talk to it over loopback with libcurl. Every wait is bounded. */
#ifndef ILAB_TEST_HTTP_CLIENT_H
#define ILAB_TEST_HTTP_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct test_server {
    pid_t pid;
    int port;
    char base[64]; /* "http://127.0.0.1:PORT" */
    double started_at; /* CLOCK_MONOTONIC seconds, taken before the server was started */
} test_server;

/* Start `inferlab serve --port 0 <args...>` (NULL-terminated) and wait (at
 * most 20 s) for its "listening on" line. Returns false on failure. */
bool test_server_start(test_server *s, const char *const *args);

/* SIGTERM and wait (at most 20 s); returns the exit status, -1 if it had to
 * be killed or died of a signal. */
int test_server_stop(test_server *s);

typedef struct http_reply {
    long status;
    char *body;         /* NUL-terminated, malloc'd */
    size_t len;
    char retry_after[16];
    char content_type[64];
} http_reply;

/* One request; `body` NULL = GET. Returns false on a transport error. */
bool http_call(const test_server *s, const char *path, const char *body, http_reply *out);

/* The same with a method ("HEAD", ...; NULL = GET/POST by body) and extra
 * header lines (NULL-terminated, may be NULL). */
bool http_call_ex(const test_server *s, const char *method, const char *path, const char *body,
                  const char *const *headers, http_reply *out);

/* Like test_server_start, with the server's stderr appended to `stderr_path`. */
bool test_server_start_logged(test_server *s, const char *const *args, const char *stderr_path);
void http_reply_free(http_reply *r);

/* Append `n` bytes at `p` to the malloc'd buffer *data of *len bytes, kept
 * NUL-terminated; false (the buffer as it was) when out of memory. For
 * libcurl write callbacks. */
bool http_buf_append(char **data, size_t *len, const char *p, size_t n);

/* The value of an unlabelled or labelled metric line ("name{labels}") in
 * /metrics; -1 when absent. */
double metric_value(const test_server *s, const char *series);

#endif
