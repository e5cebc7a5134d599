/* The validation layer over the tokenizer calls: every buffer a test passes
 * is shadowed, so TOK-7's rules hold on every call — OK writes exactly the
 * result and nothing past it, BUFFER_TOO_SMALL writes nothing and reports a
 * size that then works exactly, any other status writes nothing — and ids
 * come out in range (TOK-3) with the flags' specials in place (TOK-8, TOK-9);
 * the end-of-generation ids are in range, once each, EOS first (TOK-12), and
 * the chat template has no NUL inside (TOK-13). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "validate_internal.h"

#define R (val_g.real)
#define SENTINEL ((size_t)0x5a5a5a5a5a5a5a5aULL)
#define SCAN_MAX ((size_t)1 << 24)

typedef struct vocab {
    int32_t v, bos, eos;
    bool known;
} vocab;

static vocab vocab_of(const ilab_backend_t *be)
{
    vocab w = {0, -1, -1, false};
    val_lock();
    val_inst *in = val_inst_find(be);
    if (in && in->info_ok) {
        w.v = in->info.vocab_size;
        w.bos = in->info.bos_id;
        w.eos = in->info.eos_id;
        w.known = w.v > 0;
    }
    val_unlock();
    return w;
}

/* The shadow after the call: nothing written on a status that writes
 * nothing, nothing past `used` bytes on OK; copies `used` bytes back. */
static bool settle(val_buf *b, void *user, size_t used, ilab_status st, const char *call)
{
    bool ok = true;
    val_checked("TOK-7");
    if (!val_buf_guards_ok(b)) {
        val_violation("TOK-7", call, "returned %s and wrote outside the caller's %zu bytes",
                      ilab_status_name(st), b->size);
        ok = false;
    } else if (st != ILAB_OK) {
        size_t at = val_buf_changed_from(b, 0);
        if (at != SIZE_MAX) {
            val_violation("TOK-7", call, "returned %s and wrote byte %zu of the buffer",
                          ilab_status_name(st), at);
            ok = false;
        }
    } else if (used <= b->size) {
        size_t at = val_buf_changed_from(b, used);
        if (at != SIZE_MAX) {
            val_violation("TOK-7", call, "returned OK with %zu bytes of result and wrote byte %zu",
                          used, at);
            ok = false;
        }
    }
    if (st == ILAB_OK && used <= b->size)
        memcpy(user, val_buf_ptr(b), used);
    val_buf_close(b);
    return ok;
}

/* The count out-parameter: written on OK and BUFFER_TOO_SMALL only. */
static void count_out(size_t local, size_t *user, ilab_status st, const char *call)
{
    if (st == ILAB_OK || st == ILAB_BUFFER_TOO_SMALL) {
        if (local == SENTINEL)
            val_violation("TOK-7", call, "returned %s without writing the count", ilab_status_name(st));
        *user = local;
    } else if (local != SENTINEL) {
        val_violation("TOK-7", call, "returned %s and wrote the count out-parameter", ilab_status_name(st));
    }
}

static void tokens_ok(const ilab_backend_t *be, const int32_t *t, size_t n, uint32_t flags)
{
    vocab w = vocab_of(be);
    if (!w.known || n > SCAN_MAX)
        return;
    val_checked("TOK-3");
    val_checked("TOK-9");
    for (size_t i = 0; i < n; i++) {
        if (t[i] < 0 || t[i] >= w.v) {
            val_violation("TOK-3", "tokenize", "id %d at %zu is outside [0, %d)", (int)t[i], i, (int)w.v);
            return;
        }
        if (flags & ILAB_TOKENIZE_PARSE_SPECIAL)
            continue; /* the text may spell BOS or EOS (TOK-11) */
        bool first = i == 0 && (flags & ILAB_TOKENIZE_ADD_BOS) && w.bos >= 0;
        bool last = i + 1 == n && (flags & ILAB_TOKENIZE_ADD_EOS) && w.eos >= 0;
        if (!first && !last && (t[i] == w.bos || t[i] == w.eos)) {
            val_violation("TOK-9", "tokenize", "text gave the special id %d at %zu (flags %u)",
                          (int)t[i], i, (unsigned)flags);
            return;
        }
    }
    val_checked("TOK-8");
    if ((flags & ILAB_TOKENIZE_ADD_BOS) && w.bos >= 0 && (n == 0 || t[0] != w.bos))
        val_violation("TOK-8", "tokenize", "ADD_BOS did not put BOS %d first", (int)w.bos);
    if ((flags & ILAB_TOKENIZE_ADD_EOS) && w.eos >= 0 && (n == 0 || t[n - 1] != w.eos))
        val_violation("TOK-8", "tokenize", "ADD_EOS did not put EOS %d last", (int)w.eos);
}

/* The text a plugin sees: its `len` bytes, then the same bytes again and an
 * 'x' before any NUL. A text is (pointer, length), never a C string: a
 * plugin that reads past `len` (strlen, an unbounded compare) then reads
 * plausible text, and tokenizes differently from what the test expects. */
static char *unterminated(const char *text, size_t len)
{
    if (!text || len > VAL_SHADOW_MAX / 2)
        return NULL;
    char *t = malloc(2 * len + 2);
    if (!t)
        return NULL;
    memcpy(t, text, len);
    memcpy(t + len, text, len);
    t[2 * len] = 'x';
    t[2 * len + 1] = '\0';
    return t;
}

static ilab_status w_tokenize(ilab_backend_t *be, const char *text, size_t len, uint32_t flags,
                              int32_t *tokens, size_t cap, size_t *n_tokens)
{
    val_call c;
    val_enter(&c, "tokenize", be);
    char *own = unterminated(text, len);
    if (own)
        text = own;
    val_buf b;
    bool shadow = tokens && cap <= VAL_SHADOW_MAX / 4 && val_buf_open(&b, cap * 4);
    size_t local = SENTINEL;
    ilab_status st = R->tokenize(be, text, len, flags, shadow ? val_buf_ptr(&b) : tokens, cap,
                                 n_tokens ? &local : NULL);
    if (n_tokens)
        count_out(local, n_tokens, st, "tokenize");
    size_t n = local;
    if (shadow) {
        bool fits = st == ILAB_OK && n <= cap;
        settle(&b, tokens, fits ? n * 4 : 0, st, "tokenize");
        if (fits)
            tokens_ok(be, tokens, n, flags);
    }
    /* PARSE_SPECIAL is known to a plugin declaring chat (ABI 1.2, TOK-11). */
    uint32_t known = ILAB_TOKENIZE_ADD_BOS | ILAB_TOKENIZE_ADD_EOS |
                     (val_g.m && val_g.m->chat ? ILAB_TOKENIZE_PARSE_SPECIAL : 0u);
    if (st == ILAB_OK && (flags & ~known)) {
        val_checked("TOK-8");
        val_violation("TOK-8", "tokenize", "returned OK for the unknown flag bits 0x%x", (unsigned)flags);
    }
    if (st == ILAB_OK && n_tokens && n != SENTINEL && n > cap)
        val_violation("TOK-7", "tokenize", "returned OK with %zu ids for cap %zu", n, cap);
    if (st == ILAB_BUFFER_TOO_SMALL && n_tokens && n != SENTINEL) {
        /* the size it asked for is exact: it works, and gives that many */
        val_buf e;
        if (n <= cap)
            val_violation("TOK-7", "tokenize", "BUFFER_TOO_SMALL asked for %zu ids, cap was %zu", n, cap);
        else if (val_buf_open(&e, n * 4)) {
            size_t got = SENTINEL;
            ilab_status s2 = R->tokenize(be, text, len, flags, val_buf_ptr(&e), n, &got);
            if (s2 != ILAB_OK || got != n)
                val_violation("TOK-7", "tokenize",
                              "BUFFER_TOO_SMALL asked for %zu ids; cap %zu then gave %s with %zu",
                              n, n, ilab_status_name(s2), got);
            val_buf_close(&e);
        }
    }
    free(own);
    val_leave(&c, st);
    return st;
}

static bool ids_in_range(const ilab_backend_t *be, const int32_t *t, size_t n, int32_t prev,
                         bool *all_special)
{
    vocab w = vocab_of(be);
    *all_special = false;
    if (!w.known || !t || n > SCAN_MAX)
        return true;
    if (prev < -1 || prev >= w.v)
        return false;
    bool special = true;
    for (size_t i = 0; i < n; i++) {
        if (t[i] < 0 || t[i] >= w.v)
            return false;
        special &= t[i] == w.bos || t[i] == w.eos;
    }
    *all_special = special;
    return true;
}

/* detokenize and token_piece share TOK-7's byte rules. */
typedef ilab_status (*text_call_fn)(ilab_backend_t *be, const int32_t *t, size_t n, int32_t prev,
                                 char *out, size_t cap, size_t *len);

static ilab_status call_detok(ilab_backend_t *be, const int32_t *t, size_t n, int32_t prev, char *out,
                              size_t cap, size_t *len)
{
    (void)prev;
    return R->detokenize(be, t, n, out, cap, len);
}

static ilab_status call_piece(ilab_backend_t *be, const int32_t *t, size_t n, int32_t prev, char *out,
                              size_t cap, size_t *len)
{
    (void)n;
    return R->token_piece(be, prev, t[0], out, cap, len);
}

static ilab_status text_out(const char *name, text_call_fn fn, ilab_backend_t *be, const int32_t *t,
                            size_t n, int32_t prev, char *text, size_t cap, size_t *len)
{
    val_call c;
    val_enter(&c, name, be);
    val_buf b;
    bool shadow = text && val_buf_open(&b, cap);
    size_t local = SENTINEL;
    ilab_status st = fn(be, t, n, prev, shadow ? val_buf_ptr(&b) : text, cap, len ? &local : NULL);
    if (len)
        count_out(local, len, st, name);
    size_t l = local;
    if (shadow) {
        bool fits = st == ILAB_OK && l != SENTINEL && l < cap;
        if (fits && ((const char *)val_buf_ptr(&b))[l] != '\0')
            val_violation("TOK-7", name, "returned OK with %zu bytes and no NUL after them", l);
        settle(&b, text, fits ? l + 1 : 0, st, name);
    }
    if (st == ILAB_OK && l != SENTINEL && len && l >= cap)
        val_violation("TOK-7", name, "returned OK with %zu bytes for cap %zu (no room for the NUL)", l, cap);
    bool special;
    bool in_range = ids_in_range(be, t, n, prev, &special);
    if (st == ILAB_OK && in_range && special && n > 0 && l != SENTINEL) {
        val_checked("TOK-9");
        if (l != 0)
            val_violation("TOK-9", name, "BOS/EOS decoded to %zu bytes, not \"\"", l);
    }
    if (t && n > 0) {
        val_checked("TOK-6");
        if (st == ILAB_OK && !in_range)
            val_violation("TOK-6", name, "returned OK for an id outside the vocabulary");
    }
    if (st == ILAB_BUFFER_TOO_SMALL && len && l != SENTINEL) {
        val_buf e;
        if (l + 1 <= cap)
            val_violation("TOK-7", name, "BUFFER_TOO_SMALL asked for %zu bytes + NUL, cap was %zu", l, cap);
        else if (val_buf_open(&e, l + 1)) {
            size_t got = SENTINEL;
            ilab_status s2 = fn(be, t, n, prev, val_buf_ptr(&e), l + 1, &got);
            if (s2 != ILAB_OK || got != l)
                val_violation("TOK-7", name,
                              "BUFFER_TOO_SMALL asked for %zu bytes; cap %zu then gave %s with %zu",
                              l, l + 1, ilab_status_name(s2), got);
            val_buf_close(&e);
        }
    }
    val_leave(&c, st);
    return st;
}

static ilab_status w_detokenize(ilab_backend_t *be, const int32_t *tokens, size_t n_tokens, char *text,
                                size_t cap, size_t *len)
{
    return text_out("detokenize", call_detok, be, tokens, n_tokens, -1, text, cap, len);
}

static ilab_status w_token_piece(ilab_backend_t *be, int32_t prev, int32_t token, char *piece,
                                 size_t cap, size_t *len)
{
    return text_out("token_piece", call_piece, be, &token, 1, prev, piece, cap, len);
}

static ilab_status call_chat(ilab_backend_t *be, const int32_t *t, size_t n, int32_t prev, char *out,
                             size_t cap, size_t *len)
{
    (void)t, (void)n, (void)prev;
    return R->chat_template(be, out, cap, len);
}

/* TOK-13: sizes as detokenize's; no NUL inside the template. */
static ilab_status w_chat_template(ilab_backend_t *be, char *text, size_t cap, size_t *len)
{
    size_t local = SENTINEL;
    ilab_status st = text_out("chat_template", call_chat, be, NULL, 0, -1, text, cap, len ? len : &local);
    size_t l = len ? *len : local;
    if (st == ILAB_OK && text && l < cap && l != SENTINEL) {
        val_checked("TOK-13");
        if (strlen(text) != l)
            val_violation("TOK-13", "chat_template", "returned %zu bytes with a NUL at byte %zu", l,
                          strlen(text));
    }
    return st;
}

/* TOK-12: sizes as tokenize's; each id in range and once, EOS first. */
static void eog_ok(const ilab_backend_t *be, const int32_t *ids, size_t n)
{
    vocab w = vocab_of(be);
    if (!w.known || n > SCAN_MAX)
        return;
    val_checked("TOK-12");
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= w.v) {
            val_violation("TOK-12", "eog_ids", "id %d at %zu is outside [0, %d)", (int)ids[i], i, (int)w.v);
            return;
        }
        for (size_t j = 0; j < i; j++)
            if (ids[j] == ids[i]) {
                val_violation("TOK-12", "eog_ids", "id %d is listed twice (at %zu and %zu)", (int)ids[i], j, i);
                return;
            }
    }
    if (w.eos >= 0 && (n == 0 || ids[0] != w.eos))
        val_violation("TOK-12", "eog_ids", "the first id is %d, not EOS %d", n ? (int)ids[0] : -1, (int)w.eos);
}

static ilab_status w_eog_ids(ilab_backend_t *be, int32_t *ids, size_t cap, size_t *n_ids)
{
    val_call c;
    val_enter(&c, "eog_ids", be);
    val_buf b;
    bool shadow = ids && cap <= VAL_SHADOW_MAX / 4 && val_buf_open(&b, cap * 4);
    size_t local = SENTINEL;
    ilab_status st = R->eog_ids(be, shadow ? val_buf_ptr(&b) : ids, cap, n_ids ? &local : NULL);
    if (n_ids)
        count_out(local, n_ids, st, "eog_ids");
    size_t n = local;
    if (shadow) {
        bool fits = st == ILAB_OK && n <= cap;
        settle(&b, ids, fits ? n * 4 : 0, st, "eog_ids");
        if (fits)
            eog_ok(be, ids, n);
    }
    if (st == ILAB_OK && n_ids && n != SENTINEL && n > cap)
        val_violation("TOK-7", "eog_ids", "returned OK with %zu ids for cap %zu", n, cap);
    if (st == ILAB_BUFFER_TOO_SMALL && n_ids && n != SENTINEL && n <= cap)
        val_violation("TOK-7", "eog_ids", "BUFFER_TOO_SMALL asked for %zu ids, cap was %zu", n, cap);
    val_leave(&c, st);
    return st;
}

void val_fill_tokens(ilab_backend_api_t *t)
{
    if (t->tokenize) t->tokenize = w_tokenize;
    if (t->detokenize) t->detokenize = w_detokenize;
    if (t->token_piece) t->token_piece = w_token_piece;
    if (t->eog_ids) t->eog_ids = w_eog_ids;
    if (t->chat_template) t->chat_template = w_chat_template;
}
