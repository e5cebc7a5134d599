/* Turning a stream of token pieces into safe text deltas.
 *
 * Two reasons to hold bytes back instead of emitting them at once:
 *  - UTF-8: a byte-fallback token may carry part of a code point; the bytes
 *    wait until the code point is complete (invalid bytes that can never
 *    complete one are passed through as they are, so the concatenated text
 *    still equals detokenize(), STR-2);
 *  - stop strings: text that might be the start of a stop string waits until
 *    it either completes the stop (trimmed, with everything after it) or can
 *    no longer be one. Matches span token boundaries.
 *
 * One per request; not thread-safe. */
#ifndef ILAB_HOST_TEXT_STREAM_H
#define ILAB_HOST_TEXT_STREAM_H

#include <stdbool.h>
#include <stddef.h>

typedef struct ilab_text_stream {
    char **stop;      /* owned copies */
    size_t *stop_len;
    size_t n_stop;
    size_t max_stop_len;
    char *pending;    /* bytes received but not yet emitted */
    size_t pending_len, pending_cap;
    char *out;        /* the delta handed back by push/flush; owned */
    size_t out_cap;
    bool stopped;     /* a stop string matched; nothing more is emitted */
} ilab_text_stream;

/* Copies the stop strings (empty ones are ignored). Returns false on OOM. */
bool ilab_text_stream_init(ilab_text_stream *ts, const char *const *stop, size_t n_stop);
void ilab_text_stream_free(ilab_text_stream *ts);

/* Add one token's bytes. `*delta`/`*delta_len` receive the text that is now
 * safe to emit (borrowed until the next call). Returns true when a stop
 * string completed: the delta ends just before it, the stream is stopped.
 * `final`: this is the last token (max_tokens, context full): when no stop
 * matched, everything is emitted, held bytes included.
 * Returns false with *delta_len == 0 on OOM (ts->stopped stays false). */
bool ilab_text_stream_push(ilab_text_stream *ts, const char *bytes, size_t len,
                           bool final, const char **delta, size_t *delta_len);

/* The generation ended for another reason: everything held back is emitted
 * (incomplete UTF-8 included — it is what the tokens decode to). */
void ilab_text_stream_flush(ilab_text_stream *ts, const char **delta, size_t *delta_len);

/* Bytes at the end of `s` that begin a UTF-8 sequence that is still
 * incomplete (0..3). Exposed for tests. */
size_t ilab_utf8_incomplete_tail(const char *s, size_t len);

#endif
