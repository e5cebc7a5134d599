/* Fuzz target: the streaming text filter (UTF-8 hold-back and stop strings)
 * that turns token pieces into TOKEN event text, against a reference.
 *
 * Input: byte 0 = number of stop strings (mod 5) and flags; each stop is a
 * length byte (mod 8) and its bytes; the rest is the token stream, each
 * token a length byte (mod 16) and its bytes. Flag 0x80: the last token is
 * pushed as `final` (max_tokens reached); otherwise the stream is flushed.
 *
 * The reference is the plain definition (STR-6): after each token, look
 * for the shortest prefix of the whole text so far that holds an
 * occurrence of any stop string; if there is one, the output is the text
 * before the longest occurrence ending there and the stream ends. Otherwise
 * everything may be emitted except the longest suffix that is a proper
 * prefix of a stop string or an incomplete UTF-8 sequence (a lead byte
 * C2..F4 short of its continuation bytes). Asserted after every push:
 * stopped exactly when the reference stops, the emitted text so far equals
 * the reference's, byte for byte; at the end all text (or the text before
 * the stop) has been emitted and nothing more. */
#include <stdbool.h>
#include <string.h>

#include "fuzz.h"
#include "runtime/text_stream.h"

#define MAX_STOP 4

/* memcmp that allows empty NULL buffers. */
static bool same(const char *a, const char *b, size_t n) { return n == 0 || !memcmp(a, b, n); }

typedef struct buf {
    char *p;
    size_t len, cap;
} buf;

static void append(buf *b, const char *p, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        b->cap = 2 * (b->len + n + 1);
        b->p = realloc(b->p, b->cap);
        FUZZ_CHECK(b->p, "oom");
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
}

static size_t utf8_tail(const unsigned char *s, size_t len)
{
    for (size_t k = 1; k <= 3 && k <= len; k++) {
        unsigned char lead = s[len - k];
        size_t need = (lead >= 0xC2 && lead <= 0xDF) ? 2 : (lead >= 0xE0 && lead <= 0xEF) ? 3
                    : (lead >= 0xF0 && lead <= 0xF4) ? 4 : 0;
        if (need) {
            for (size_t j = len - k + 1; j < len; j++)
                if ((s[j] & 0xC0) != 0x80)
                    return 0;
            return k < need ? k : 0;
        }
        if ((lead & 0xC0) != 0x80)
            return 0;
    }
    return 0;
}

/* Where the text is cut for a stop, or (size_t)-1 (docs/contract.md STR-6):
 * the shortest prefix of the text that holds an occurrence of any stop,
 * cut before the longest occurrence ending there. */
static size_t find_stop(const buf *text, char *const *stops, size_t n_stop)
{
    for (size_t end = 1; end <= text->len; end++) {
        size_t cut = (size_t)-1;
        for (size_t i = 0; i < n_stop; i++) {
            size_t sl = strlen(stops[i]);
            if (sl && sl <= end && !memcmp(text->p + end - sl, stops[i], sl) && end - sl < cut)
                cut = end - sl;
        }
        if (cut != (size_t)-1)
            return cut;
    }
    return (size_t)-1;
}

static size_t stop_prefix(const buf *text, char *const *stops, size_t n_stop)
{
    size_t best = 0;
    for (size_t i = 0; i < n_stop; i++) {
        size_t sl = strlen(stops[i]);
        for (size_t k = 1; k < sl && k <= text->len; k++)
            if (!memcmp(text->p + text->len - k, stops[i], k) && k > best)
                best = k;
    }
    return best;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t at = 1, n_stop = data[0] % (MAX_STOP + 1);
    bool final_last = data[0] & 0x80;
    char *stops[MAX_STOP];
    for (size_t i = 0; i < n_stop; i++) {
        size_t len = at < size ? data[at++] % 8 : 0;
        if (len > size - at)
            len = size - at;
        stops[i] = fuzz_strndup(data + at, len); /* a NUL inside ends it, as in C */
        FUZZ_CHECK(stops[i], "oom");
        at += len;
    }
    ilab_text_stream ts;
    FUZZ_CHECK(ilab_text_stream_init(&ts, (const char *const *)stops, n_stop), "init");

    buf text = {0}, out = {0};
    bool stopped = false;
    while (at < size && !stopped) {
        size_t len = data[at++] % 16;
        if (len > size - at)
            len = size - at;
        bool final = final_last && at + len >= size;
        const char *delta;
        size_t delta_len;
        bool got_stop = ilab_text_stream_push(&ts, (const char *)data + at, len, final, &delta,
                                              &delta_len);
        append(&text, (const char *)data + at, len);
        append(&out, delta, delta_len);
        at += len;

        size_t match = find_stop(&text, stops, n_stop);
        size_t want;
        if (match != (size_t)-1) {
            want = match;
            stopped = true;
        } else if (final) {
            want = text.len;
        } else {
            size_t hold = stop_prefix(&text, stops, n_stop);
            size_t u = utf8_tail((const unsigned char *)text.p, text.len);
            want = text.len - (u > hold ? u : hold);
        }
        FUZZ_CHECK(got_stop == stopped, "push says stop=%d, the reference %d", got_stop, stopped);
        FUZZ_CHECK(out.len == want && same(out.p, text.p, want),
                   "emitted %zu bytes, the reference %zu of %zu", out.len, want, text.len);
        if (final)
            break;
    }
    if (!final_last || stopped) {
        const char *delta;
        size_t delta_len;
        ilab_text_stream_flush(&ts, &delta, &delta_len);
        append(&out, delta, delta_len);
        size_t want = stopped ? find_stop(&text, stops, n_stop) : text.len;
        FUZZ_CHECK(out.len == want && same(out.p, text.p, want),
                   "after flush %zu bytes, the reference %zu", out.len, want);
    }
    /* After a stop, nothing more comes out. */
    if (stopped) {
        const char *delta;
        size_t delta_len;
        FUZZ_CHECK(ilab_text_stream_push(&ts, "x", 1, false, &delta, &delta_len) && delta_len == 0,
                   "text after the stop");
    }
    ilab_text_stream_free(&ts);
    for (size_t i = 0; i < n_stop; i++)
        free(stops[i]);
    free(text.p);
    free(out.p);
    return 0;
}
