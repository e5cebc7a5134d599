/* Text deltas with UTF-8 and stop-string hold-back (see text_stream.h). */
#include "text_stream.h"

#include <stdlib.h>
#include <string.h>

bool ilab_text_stream_init(ilab_text_stream *ts, const char *const *stop, size_t n_stop)
{
    memset(ts, 0, sizeof *ts);
    if (n_stop == 0)
        return true;
    ts->stop = calloc(n_stop, sizeof *ts->stop);
    ts->stop_len = calloc(n_stop, sizeof *ts->stop_len);
    if (!ts->stop || !ts->stop_len)
        return false;
    for (size_t i = 0; i < n_stop; i++) {
        if (!stop[i] || !stop[i][0])
            continue;
        size_t len = strlen(stop[i]);
        char *copy = malloc(len + 1);
        if (!copy)
            return false;
        memcpy(copy, stop[i], len + 1);
        ts->stop[ts->n_stop] = copy;
        ts->stop_len[ts->n_stop] = len;
        ts->n_stop++;
        if (len > ts->max_stop_len)
            ts->max_stop_len = len;
    }
    return true;
}

void ilab_text_stream_free(ilab_text_stream *ts)
{
    if (ts->stop)
        for (size_t i = 0; i < ts->n_stop; i++)
            free(ts->stop[i]);
    free(ts->stop);
    free(ts->stop_len);
    free(ts->pending);
    free(ts->out);
    memset(ts, 0, sizeof *ts);
}

size_t ilab_utf8_incomplete_tail(const char *s, size_t len)
{
    const unsigned char *u = (const unsigned char *)s;
    /* Walk back over at most 3 continuation bytes to the lead byte. */
    size_t back = 0;
    while (back < len && back < 4 && (u[len - 1 - back] & 0xC0) == 0x80)
        back++;
    if (back == len || back >= 4)
        return 0; /* no lead byte in reach: invalid bytes, pass them through */
    unsigned char lead = u[len - 1 - back];
    size_t need;
    if (lead < 0x80)
        return 0;
    else if ((lead & 0xE0) == 0xC0 && lead >= 0xC2)
        need = 2;
    else if ((lead & 0xF0) == 0xE0)
        need = 3;
    else if ((lead & 0xF8) == 0xF0 && lead <= 0xF4)
        need = 4;
    else
        return 0; /* not a lead byte: invalid, pass through */
    return back + 1 < need ? back + 1 : 0;
}

static bool reserve(char **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return true;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    char *p = realloc(*buf, c);
    if (!p)
        return false;
    *buf = p;
    *cap = c;
    return true;
}

/* Move the first n pending bytes to the output buffer. */
static bool take(ilab_text_stream *ts, size_t n, const char **delta, size_t *delta_len)
{
    if (!reserve(&ts->out, &ts->out_cap, n + 1))
        return false;
    memcpy(ts->out, ts->pending, n);
    ts->out[n] = '\0';
    memmove(ts->pending, ts->pending + n, ts->pending_len - n);
    ts->pending_len -= n;
    *delta = ts->out;
    *delta_len = n;
    return true;
}

/* Longest suffix of pending that is a proper prefix of some stop string. */
static size_t stop_prefix_tail(const ilab_text_stream *ts)
{
    size_t best = 0;
    for (size_t i = 0; i < ts->n_stop; i++) {
        size_t sl = ts->stop_len[i];
        size_t max = sl - 1 < ts->pending_len ? sl - 1 : ts->pending_len;
        for (size_t k = max; k > best; k--)
            if (!memcmp(ts->pending + ts->pending_len - k, ts->stop[i], k)) {
                best = k;
                break;
            }
    }
    return best;
}

bool ilab_text_stream_push(ilab_text_stream *ts, const char *bytes, size_t len,
                           bool final, const char **delta, size_t *delta_len)
{
    *delta = "";
    *delta_len = 0;
    if (ts->stopped)
        return true;
    if (!reserve(&ts->pending, &ts->pending_cap, ts->pending_len + len + 1))
        return false;
    memcpy(ts->pending + ts->pending_len, bytes, len);
    ts->pending_len += len;

    /* The stream stops at the shortest text that holds a stop string, cut
     * before the longest occurrence ending there (STR-6): the one ending
     * first wins, not the one starting first, which differs when one push
     * completes a stop string inside another's span ({"abcd", "bc"} on
     * "abcd" cuts at "a"). Held text never contains a whole stop string
     * before this push, so a match always lies within pending. */
    size_t match = (size_t)-1, match_end = (size_t)-1;
    for (size_t i = 0; i < ts->n_stop; i++) {
        size_t sl = ts->stop_len[i];
        for (size_t p = 0; p + sl <= ts->pending_len && p + sl <= match_end; p++)
            if (!memcmp(ts->pending + p, ts->stop[i], sl)) {
                if (p + sl < match_end || p < match) {
                    match = p;
                    match_end = p + sl;
                }
                break;
            }
    }
    if (match != (size_t)-1) {
        ts->stopped = true;
        take(ts, match, delta, delta_len);
        ts->pending_len = 0;
        return true;
    }
    if (final) {
        take(ts, ts->pending_len, delta, delta_len);
        return false;
    }
    size_t hold = stop_prefix_tail(ts);
    size_t utf8 = ilab_utf8_incomplete_tail(ts->pending, ts->pending_len);
    if (utf8 > hold)
        hold = utf8;
    take(ts, ts->pending_len - hold, delta, delta_len);
    return false;
}

void ilab_text_stream_flush(ilab_text_stream *ts, const char **delta, size_t *delta_len)
{
    *delta = "";
    *delta_len = 0;
    if (ts->stopped || ts->pending_len == 0)
        return;
    take(ts, ts->pending_len, delta, delta_len);
}
