/* Request framing by RFC 9112, checked on a request head as libmicrohttpd
 * 0.9.75 holds it after parsing, before a byte of the body is read:
 *
 *  - every line ends in CRLF: no bare LF, no bare CR, no obsolete line
 *    folding (a line starting with SP or HTAB) -> 400;
 *  - the version is HTTP/1.0 or HTTP/1.1 -> else 505;
 *  - Content-Length at most once -> else 400 (RFC 9112 §6.3: the message
 *    cannot be framed);
 *  - not both Transfer-Encoding and Content-Length, and no
 *    Transfer-Encoding in an HTTP/1.0 request -> else 400 (§6.1, §6.3: the
 *    classic request-smuggling setups);
 *  - Transfer-Encoding, when present, is exactly "chunked" (once) -> else
 *    501 (§6.1: a coding the server does not understand).
 *
 * libmicrohttpd parses the head in place: it overwrites each line's
 * terminator with NULs and leaves every other byte where it was, so a line
 * ended by CRLF leaves its next line starting exactly two bytes after its
 * last byte, and the head's final CRLF CRLF leaves four bytes after the
 * last value. A bare LF leaves one; a folded line is copied elsewhere, so
 * its field is not where the previous line ended; a bare CR stays inside
 * a value. The check is on those positions, which is why it takes the
 * head's extent and the fields in the order they came. This is not a
 * parser: it trusts libmicrohttpd to have split the fields. ADR 0019. */
#ifndef ILAB_SERVER_HTTP_FRAMING_H
#define ILAB_SERVER_HTTP_FRAMING_H

#include <stdbool.h>
#include <stddef.h>

#include "api_error.h"

typedef struct ilab_http_field {
    const char *name;
    size_t name_len;
    const char *value;
    size_t value_len;
} ilab_http_field;

typedef struct ilab_http_head {
    const char *start;           /* the head's first byte (the method's) */
    size_t size;                 /* bytes up to and including the blank line */
    const char *target;          /* the request target as it came (not unescaped) */
    size_t target_len;
    const char *version;         /* inside the head, after the request target */
    size_t version_len;
    const ilab_http_field *fields; /* in the order they came */
    size_t n_fields;
} ilab_http_head;

/* True when `h` is framed as above; else false with `e` filled (400, 501
 * or 505, naming the header and what is wrong). */
bool ilab_http_framing_ok(const ilab_http_head *h, ilab_api_error *e);

#endif
