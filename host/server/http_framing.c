/* Request framing by RFC 9112 (see http_framing.h for the rules and why
 * positions tell how each line ended). */
#include "http_framing.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* Pointers compared as addresses: a folded field lives in another
 * allocation, and comparing pointers into different objects is undefined. */
static uintptr_t addr(const char *p)
{
    return (uintptr_t)p;
}

static bool has_line_byte(const char *s, size_t n)
{
    return memchr(s, '\r', n) || memchr(s, '\n', n) || memchr(s, '\0', n);
}

static bool name_is(const ilab_http_field *f, const char *name)
{
    return f->name_len == strlen(name) && !strncasecmp(f->name, name, f->name_len);
}

/* Every line ends in CRLF, none is folded, no bare CR or LF anywhere. */
static bool lines_ok(const ilab_http_head *h, ilab_api_error *e)
{
    /* The request line's words (the target as it came: libmicrohttpd
     * unescapes the head's copy in place). */
    if (has_line_byte(h->start, strlen(h->start)) || has_line_byte(h->target, h->target_len) ||
        has_line_byte(h->version, h->version_len))
        return ilab_api_fail(e, 400, NULL, "malformed request line: it holds a bare CR or LF");
    uintptr_t end = addr(h->version) + h->version_len; /* the request line's last byte + 1 */
    for (size_t i = 0; i < h->n_fields; i++) {
        const ilab_http_field *f = &h->fields[i];
        if (addr(f->name) != end + 2 || has_line_byte(f->name, f->name_len) ||
            has_line_byte(f->value, f->value_len) ||
            addr(f->value) < addr(f->name) + f->name_len) {
            char where[96];
            if (i == 0)
                snprintf(where, sizeof where, "the request line");
            else
                snprintf(where, sizeof where, "header '%.*s'",
                         (int)(h->fields[i - 1].name_len > 64 ? 64 : h->fields[i - 1].name_len),
                         h->fields[i - 1].name);
            return ilab_api_fail(e, 400, NULL, "malformed request head: %s does not end in "
                                 "CRLF, or the line after it is folded or holds a bare CR or "
                                 "LF (RFC 9112: every line ends in CRLF; obsolete line folding "
                                 "is not accepted)", where);
        }
        end = addr(f->value) + f->value_len;
    }
    if (end + 4 != addr(h->start) + h->size)
        return ilab_api_fail(e, 400, NULL, "malformed request head: its last line or the "
                             "blank line that ends it does not end in CRLF");
    return true;
}

static bool version_ok(const ilab_http_head *h, ilab_api_error *e)
{
    if ((h->version_len == 8 && !memcmp(h->version, "HTTP/1.1", 8)) ||
        (h->version_len == 8 && !memcmp(h->version, "HTTP/1.0", 8)))
        return true;
    return ilab_api_fail(e, 505, NULL, "HTTP version '%.*s' is not supported (supported: "
                         "HTTP/1.0, HTTP/1.1)", (int)(h->version_len > 32 ? 32 : h->version_len),
                         h->version);
}

/* The value without leading and trailing spaces and tabs. */
static void trim(const char **s, size_t *n)
{
    while (*n && ((*s)[0] == ' ' || (*s)[0] == '\t')) {
        (*s)++;
        (*n)--;
    }
    while (*n && ((*s)[*n - 1] == ' ' || (*s)[*n - 1] == '\t'))
        (*n)--;
}

static bool lengths_ok(const ilab_http_head *h, ilab_api_error *e)
{
    size_t n_cl = 0, n_te = 0;
    const ilab_http_field *te = NULL;
    for (size_t i = 0; i < h->n_fields; i++) {
        if (name_is(&h->fields[i], "Content-Length"))
            n_cl++;
        if (name_is(&h->fields[i], "Transfer-Encoding")) {
            n_te++;
            te = &h->fields[i];
        }
    }
    if (n_cl > 1)
        return ilab_api_fail(e, 400, NULL, "Content-Length is given %zu times; a request may "
                             "carry it once (RFC 9112 section 6.3: its body cannot be framed)",
                             n_cl);
    if (n_te && n_cl)
        return ilab_api_fail(e, 400, NULL, "the request has both Transfer-Encoding and "
                             "Content-Length; send one (RFC 9112 section 6.1)");
    if (n_te && h->version_len == 8 && !memcmp(h->version, "HTTP/1.0", 8))
        return ilab_api_fail(e, 400, NULL, "Transfer-Encoding in an HTTP/1.0 request cannot "
                             "be trusted to frame its body (RFC 9112 section 6.1)");
    if (n_te > 1)
        return ilab_api_fail(e, 501, NULL, "Transfer-Encoding is given %zu times; the only "
                             "transfer coding accepted is a single 'chunked'", n_te);
    if (te) {
        const char *v = te->value;
        size_t n = te->value_len;
        trim(&v, &n);
        if (n != 7 || strncasecmp(v, "chunked", 7))
            return ilab_api_fail(e, 501, NULL, "transfer coding '%.*s' is not implemented; "
                                 "the only one accepted is 'chunked'",
                                 (int)(n > 64 ? 64 : n), v);
    }
    return true;
}

bool ilab_http_framing_ok(const ilab_http_head *h, ilab_api_error *e)
{
    return lines_ok(h, e) && version_ok(h, e) && lengths_ok(h, e);
}
