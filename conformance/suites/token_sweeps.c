/* Tokenizer and buffer-protocol sweeps (TOK-2..7, ERR-1): every single
 * byte, every flag combination, seeded random strings of valid and invalid
 * UTF-8, and every buffer capacity from 0 to needed + 1 with canary bytes
 * around the buffer. The fixed corpus tests in tokens.c cover the common
 * path; these cover the inputs a fixed corpus never uses. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "suites.h"
#include "text_tokens.h"

#define CANARY 0xA5
#define GUARD 16 /* canary bytes after the capacity */
#define RANDOM_STRINGS 300

/* Append the UTF-8 encoding of code point `cp` (a valid scalar value). */
static size_t put_utf8(char *out, uint32_t cp)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* A random valid UTF-8 string: ASCII words, whitespace and control bytes,
 * long runs, 2-, 3- and 4-byte code points. Returns its length (< cap). */
static size_t random_valid(uint64_t *rng, char *out, size_t cap)
{
    size_t n = 0, want = 1 + conf_splitmix64(rng) % 60;
    while (n + 8 < cap && want--) {
        uint32_t roll = (uint32_t)(conf_splitmix64(rng) % 100), cp;
        if (roll < 40)
            cp = 'a' + (uint32_t)(conf_splitmix64(rng) % 26);
        else if (roll < 50)
            cp = " \t\n\r"[conf_splitmix64(rng) % 4];
        else if (roll < 55)
            cp = 1 + (uint32_t)(conf_splitmix64(rng) % 31); /* control bytes */
        else if (roll < 65) {
            size_t run = 8 + conf_splitmix64(rng) % 40; /* a long run of one byte */
            char c = (char)('!' + conf_splitmix64(rng) % 90);
            while (run-- && n + 8 < cap)
                out[n++] = c;
            continue;
        } else if (roll < 75)
            cp = 0x80 + (uint32_t)(conf_splitmix64(rng) % (0x800 - 0x80));
        else if (roll < 88) {
            do
                cp = 0x800 + (uint32_t)(conf_splitmix64(rng) % (0x10000 - 0x800));
            while (cp >= 0xD800 && cp <= 0xDFFF);
        } else
            cp = 0x10000 + (uint32_t)(conf_splitmix64(rng) % (0x110000 - 0x10000));
        n += put_utf8(out + n, cp);
    }
    return n;
}

/* Random bytes, mostly not UTF-8. */
static size_t random_bytes(uint64_t *rng, char *out, size_t cap)
{
    size_t n = 1 + conf_splitmix64(rng) % (cap - 1 < 40 ? cap - 1 : 40);
    for (size_t i = 0; i < n; i++)
        out[i] = (char)(conf_splitmix64(rng) & 0xFF);
    return n;
}

static void hex_prefix(const char *s, size_t n, char *out, size_t cap)
{
    size_t w = 0;
    for (size_t i = 0; i < n && i < 24 && w + 4 < cap; i++)
        w += (size_t)snprintf(out + w, cap - w, "%02x", (unsigned char)s[i]);
    if (n > 24 && w + 4 < cap)
        snprintf(out + w, cap - w, "...");
}

/* Tokenize into a right-sized buffer; NULL + msg on a non-OK status other
 * than INVALID_ARGUMENT (which sets *refused). */
static int32_t *tokenize_any(conf_env *env, const char *s, size_t len, uint32_t flags, size_t *n,
                             bool *refused, char *msg, size_t cap)
{
    size_t want = len + 8;
    int32_t *t = malloc(want * sizeof *t);
    ilab_status st = env->api->tokenize(env->be, s, len, flags, t, want, n);
    if (st == ILAB_BUFFER_TOO_SMALL && *n > want) {
        free(t);
        want = *n;
        t = malloc(want * sizeof *t);
        st = env->api->tokenize(env->be, s, len, flags, t, want, n);
    }
    *refused = st == ILAB_INVALID_ARGUMENT;
    if (st != ILAB_OK) {
        if (!*refused)
            conf_fail_status(env, st, "tokenize()", msg, cap);
        free(t);
        return NULL;
    }
    return t;
}

/* The pieces of t[0..n) concatenate to s (TOK-4): byte for byte, or, for
 * a text tokenizer (`whole` not NULL), over each run of whole tokens. */
static bool pieces_match(conf_env *env, conf_whole *whole, const int32_t *t, size_t n, const char *s, size_t len,
                         const char *what, const char *hex, char *msg, size_t cap)
{
    if (whole) {
        char name[160];
        size_t runs = 0;
        snprintf(name, sizeof name, "%s (bytes %s)", what, hex);
        return conf_whole_runs_concatenate(whole, t, n, name, &runs, msg, cap);
    }
    char *cat = malloc(len + 64 * n + 1);
    size_t at = 0;
    bool ok = cat != NULL;
    for (size_t i = 0; ok && i < n; i++) {
        size_t plen = 0;
        ilab_status st = env->api->token_piece(env->be, i ? t[i - 1] : -1, t[i], cat + at, 64, &plen);
        if (st != ILAB_OK) {
            CONF_MSG("%s (bytes %s): token_piece(%d, %d) returned %s", what, hex, i ? t[i - 1] : -1, t[i],
                     ilab_status_name(st));
            ok = false;
        }
        at += plen;
    }
    if (ok && (at != len || memcmp(cat, s, len) != 0)) {
        CONF_MSG("%s (bytes %s): pieces concatenate to %zu bytes, the text has %zu (TOK-4)", what, hex, at,
                 len);
        ok = false;
    }
    free(cat);
    return ok;
}

/* Round trip, ids in range, and the pieces concatenating to the text, for
 * one input. `must_accept`: valid UTF-8 may not be refused. A text
 * tokenizer (`whole` not NULL) must accept exactly the valid UTF-8 and
 * refuse the rest (TOK-5, TOK-10); its pieces are checked over runs of
 * whole tokens, and only when `pieces` (long inputs: the round trip). */
static bool check_one(conf_env *env, conf_whole *whole, const char *s, size_t len, bool must_accept, bool pieces,
                      const char *what, char *msg, size_t cap)
{
    size_t n = 0, back_len = 0;
    bool refused = false;
    char hex[96];
    hex_prefix(s, len, hex, sizeof hex);
    bool valid = conf_utf8_valid(s, len);
    if (whole)
        must_accept = valid;
    else if (memmem(s, len, "\xe2\x96\x81", 3))
        must_accept = false; /* TOK-2: U+2581 may be a SentencePiece vocabulary's space */
    int32_t *t = tokenize_any(env, s, len, 0, &n, &refused, msg, cap);
    if (!t) {
        if (refused && !must_accept) {
            char e[256];
            if (!conf_last_error(env, e, sizeof e)[0]) {
                CONF_MSG("%s (bytes %s): tokenize() refused it without a message", what, hex);
                return false;
            }
            return true;
        }
        if (refused)
            CONF_MSG("%s (bytes %s): tokenize() refused valid UTF-8 with INVALID_ARGUMENT", what, hex);
        return false;
    }
    if (whole && !valid) {
        CONF_MSG("%s (bytes %s): tokenize() accepted invalid UTF-8 (%zu ids); tokenizer: text must refuse it with "
                 "INVALID_ARGUMENT (TOK-5)", what, hex, n);
        free(t);
        return false;
    }
    for (size_t i = 0; i < n; i++)
        if (t[i] < 0 || t[i] >= env->info.vocab_size) {
            CONF_MSG("%s (bytes %s): id %d at %zu is outside [0, %d)", what, hex, t[i], i,
                     env->info.vocab_size);
            free(t);
            return false;
        }
    char *back = conf_detokenize(env, t, n, &back_len, msg, cap);
    bool ok = back && back_len == len && memcmp(back, s, len) == 0;
    if (back && !ok)
        CONF_MSG("%s (bytes %s): detokenize(tokenize(s)) gives %zu bytes, want %zu", what, hex, back_len,
                 len);
    if (ok && (pieces || !whole))
        ok = pieces_match(env, whole, t, n, s, len, what, hex, msg, cap);
    free(back);
    free(t);
    return ok;
}

static conf_result tok2_sweep(conf_env *env, conf_whole *whole, char *msg, size_t cap);
static conf_result tok5_sweep(conf_env *env, conf_whole *whole, char *msg, size_t cap);

/* Run `sweep` with the whole-token table a text tokenizer needs (NULL for
 * a byte-exact one). */
static conf_result with_whole(conf_env *env, conf_result (*sweep)(conf_env *, conf_whole *, char *, size_t),
                              char *msg, size_t cap)
{
    CONF_SKIP_UNLESS(env->m->tokenizer, "tokenizer");
    conf_whole text_form, *whole = NULL;
    if (env->m->tokenizer_text) {
        if (!conf_whole_init(&text_form, env))
            return CONF_ERROR;
        whole = &text_form;
    }
    conf_result r = sweep(env, whole, msg, cap);
    if (whole)
        conf_whole_free(whole);
    return r;
}

/* TOK-2: every single byte, then seeded random valid UTF-8. */
conf_result conf_tok2_sweep(conf_env *env, char *msg, size_t cap)
{
    return with_whole(env, tok2_sweep, msg, cap);
}

static conf_result tok2_sweep(conf_env *env, conf_whole *whole, char *msg, size_t cap)
{
    for (int b = 0; b < 256; b++) {
        char one = (char)b, what[48];
        snprintf(what, sizeof what, "the single byte 0x%02x", b);
        if (!check_one(env, whole, &one, 1, b < 0x80, true, what, msg, cap))
            return CONF_FAIL;
    }
    uint64_t rng = env->opt->seed * 31 + 2;
    char buf[512];
    int count = RANDOM_STRINGS * (env->opt->deep ? 10 : 1);
    for (int i = 0; i < count; i++) {
        size_t len = random_valid(&rng, buf, sizeof buf);
        char what[96];
        snprintf(what, sizeof what, "random UTF-8 string %d (seed %" PRIu64 ")", i, env->opt->seed);
        /* a text tokenizer's pieces on every tenth: each is a call or three
         * to a server, and TOK-4.whole_token_runs covers them too */
        if (!check_one(env, whole, buf, len, true, !whole || i % 10 == 0, what, msg, cap))
            return CONF_FAIL;
    }
    /* Long inputs, past the sizes an encoder might work in windows of. */
    static const size_t longs[] = {1000, 4100, 9000, 17000};
    char *big = malloc(17000 + sizeof buf);
    for (size_t k = 0; big && k < sizeof longs / sizeof longs[0]; k++) {
        size_t len = 0;
        while (len < longs[k]) {
            size_t n = random_valid(&rng, buf, sizeof buf);
            memcpy(big + len, buf, n);
            len += n;
        }
        char what[96];
        snprintf(what, sizeof what, "a random UTF-8 string of %zu bytes (seed %" PRIu64 ")", len, env->opt->seed);
        if (!check_one(env, whole, big, len, true, !whole, what, msg, cap)) {
            free(big);
            return CONF_FAIL;
        }
    }
    free(big);
    CONF_MSG("256 single bytes, %d random UTF-8 strings and 4 of 1,000 to 17,000 bytes round-trip (seed %" PRIu64
             ")%s", count, env->opt->seed,
             whole ? "; tokenizer: text: bytes 0x80-0xFF refused, pieces compared over runs of whole tokens "
                     "(on every tenth random string, not on the long ones)" : "");
    return CONF_PASS;
}

/* TOK-5: random byte strings: refused with a message, or round-tripped. */
conf_result conf_tok5_sweep(conf_env *env, char *msg, size_t cap)
{
    return with_whole(env, tok5_sweep, msg, cap);
}

static conf_result tok5_sweep(conf_env *env, conf_whole *whole, char *msg, size_t cap)
{
    uint64_t rng = env->opt->seed * 31 + 5;
    char buf[64];
    int count = RANDOM_STRINGS * (env->opt->deep ? 10 : 1);
    for (int i = 0; i < count; i++) {
        size_t len = random_bytes(&rng, buf, sizeof buf);
        char what[96];
        snprintf(what, sizeof what, "random byte string %d (seed %" PRIu64 ")", i, env->opt->seed);
        if (!check_one(env, whole, buf, len, false, true, what, msg, cap))
            return CONF_FAIL;
    }
    CONF_MSG("%d random byte strings refused or round-tripped (seed %" PRIu64 ")", count, env->opt->seed);
    return CONF_PASS;
}

/* TOK-3: the flags. ADD_BOS puts bos_id first, ADD_EOS eos_id last, the
 * rest equals the unflagged ids; BOS and EOS decode to ""; an unknown flag
 * bit is refused. */
conf_result conf_tok3_flags(conf_env *env, char *msg, size_t cap)
{
    CONF_SKIP_UNLESS(env->m->tokenizer, "tokenizer");
    const char *s = "Once upon a time";
    size_t len = strlen(s), n0 = 0;
    bool refused;
    int32_t *plain = tokenize_any(env, s, len, 0, &n0, &refused, msg, cap);
    if (!plain)
        return CONF_FAIL;
    conf_result r = CONF_PASS;
    int32_t bos = env->info.bos_id, eos = env->info.eos_id;
    for (uint32_t flags = 1; flags < 4 && r == CONF_PASS; flags++) {
        size_t n = 0;
        int32_t *t = tokenize_any(env, s, len, flags, &n, &refused, msg, cap);
        bool want_bos = (flags & ILAB_TOKENIZE_ADD_BOS) && bos >= 0;
        bool want_eos = (flags & ILAB_TOKENIZE_ADD_EOS) && eos >= 0;
        size_t want_n = n0 + want_bos + want_eos;
        if (!t) {
            CONF_MSG("tokenize(flags 0x%x) returned %s", flags, refused ? "INVALID_ARGUMENT" : "an error");
            r = CONF_FAIL;
        } else if (n != want_n || (want_bos && t[0] != bos) || (want_eos && t[n - 1] != eos) ||
                   memcmp(t + want_bos, plain, n0 * sizeof *plain) != 0) {
            CONF_MSG("tokenize(flags 0x%x%s%s) gives %zu ids (first %d, last %d); want %zu: %s%s the "
                     "unflagged ids%s", flags, flags & 1 ? " ADD_BOS" : "", flags & 2 ? " ADD_EOS" : "",
                     n, n ? t[0] : -1, n ? t[n - 1] : -1, want_n, want_bos ? "bos_id, " : "",
                     want_bos ? "then" : "", want_eos ? ", then eos_id" : "");
            r = CONF_FAIL;
        } else {
            size_t blen = 0;
            char *back = conf_detokenize(env, t, n, &blen, msg, cap);
            if (!back || blen != len || memcmp(back, s, len) != 0) {
                if (back)
                    CONF_MSG("detokenize(tokenize(s, flags 0x%x)) is %zu bytes, want s (%zu): BOS/EOS "
                             "must decode to \"\"", flags, blen, len);
                r = CONF_FAIL;
            }
            free(back);
        }
        free(t);
    }
    /* Every unknown bit on its own: a check that masks the wrong bits
     * misses some of them. PARSE_SPECIAL (bit 2) is known to a plugin that
     * declares chat (ABI 1.2, TOK-11) and unknown to every other. */
    for (unsigned bit = 2; bit < 32 && r == CONF_PASS; bit++) {
        if ((1u << bit) == ILAB_TOKENIZE_PARSE_SPECIAL && env->m->chat)
            continue;
        int32_t t[64];
        size_t n = 0;
        ilab_status st = env->api->tokenize(env->be, s, len, 1u << bit, t, 64, &n);
        if (st != ILAB_INVALID_ARGUMENT) {
            CONF_MSG("tokenize() with an unknown flag bit (0x%x) returned %s, want INVALID_ARGUMENT "
                     "(unknown flags are refused)", 1u << bit, ilab_status_name(st));
            r = CONF_FAIL;
        }
    }
    free(plain);
    return r;
}

/* TOK-6: prev_token is range-checked like token; BOS/EOS pieces are "". */
conf_result conf_tok6_pieces_args(conf_env *env, char *msg, size_t cap)
{
    CONF_SKIP_UNLESS(env->m->tokenizer, "tokenizer");
    int32_t v = env->info.vocab_size, good = v > 3 ? 3 : 0;
    const int32_t bad_prev[] = {v, -2, INT32_MIN, INT32_MAX};
    char piece[64];
    size_t len = 0;
    for (size_t i = 0; i < sizeof bad_prev / sizeof bad_prev[0]; i++) {
        ilab_status st = env->api->token_piece(env->be, bad_prev[i], good, piece, sizeof piece, &len);
        CONF_CHECK(st == ILAB_INVALID_ARGUMENT,
                   "token_piece(prev_token %d, token %d) returned %s, want INVALID_ARGUMENT (prev_token is "
                   "-1 or an id in [0, %d))", bad_prev[i], good, ilab_status_name(st), v);
    }
    const int32_t specials[2] = {env->info.bos_id, env->info.eos_id};
    for (int i = 0; i < 2; i++) {
        if (specials[i] < 0)
            continue;
        ilab_status st = env->api->token_piece(env->be, -1, specials[i], piece, sizeof piece, &len);
        CONF_CHECK(st == ILAB_OK && len == 0, "token_piece(-1, %s %d) returned %s with %zu bytes, want OK "
                   "and \"\"", i ? "eos_id" : "bos_id", specials[i], ilab_status_name(st), len);
        st = env->api->detokenize(env->be, &specials[i], 1, piece, sizeof piece, &len);
        CONF_CHECK(st == ILAB_OK && len == 0 && piece[0] == '\0',
                   "detokenize([%s]) returned %s with %zu bytes, want OK and \"\"", i ? "eos_id" : "bos_id",
                   ilab_status_name(st), len);
    }
    return CONF_PASS;
}

/* ---- buffer protocol ----------------------------------------------------- */

/* Checks one call at every capacity 0 .. need + 1 (in units of `unit`
 * bytes), with GUARD canary units after the capacity. `call` returns the
 * status and writes the reported size; `expect` is the full output. NUL:
 * the output is text and needs room for a NUL (cap >= need + 1). */
typedef ilab_status (*buffer_call_fn)(conf_env *env, const void *arg, void *buf, size_t cap, size_t *size);

static bool sweep_pass(conf_env *env, const char *name, buffer_call_fn call, const void *arg, const void *other,
                       const void *expect, size_t need, size_t unit, bool nul, char *msg, size_t cap);

/* Twice: each capacity right after the last (a plugin's memo of its last
 * input warm, as the host's size-query-then-fill makes it), then each
 * right after a size query of `other`, another input of the same call (a
 * memo cold): a plugin whose slow path differs from its memo's is seen. */
static bool sweep(conf_env *env, const char *name, buffer_call_fn call, const void *arg, const void *other,
                  const void *expect, size_t need, size_t unit, bool nul, char *msg, size_t cap)
{
    if (!sweep_pass(env, name, call, arg, NULL, expect, need, unit, nul, msg, cap))
        return false;
    if (!other)
        return true;
    char cold[200];
    snprintf(cold, sizeof cold, "%s (each call after one on another input)", name);
    return sweep_pass(env, cold, call, arg, other, expect, need, unit, nul, msg, cap);
}

static bool sweep_pass(conf_env *env, const char *name, buffer_call_fn call, const void *arg, const void *other,
                       const void *expect, size_t need, size_t unit, bool nul, char *msg, size_t cap)
{
    size_t max = need + 2, room = (max + GUARD) * unit;
    /* the size query: a NULL buffer with capacity 0 answers as capacity 0 */
    size_t qsize = (size_t)-7, osize = 0;
    if (other)
        call(env, other, NULL, 0, &osize);
    ilab_status qst = call(env, arg, NULL, 0, &qsize);
    bool q_fits = nul ? false : need == 0;
    if (qst != (q_fits ? ILAB_OK : ILAB_BUFFER_TOO_SMALL) || qsize != need) {
        CONF_MSG("%s as a size query (NULL, capacity 0; needs %zu%s) returned %s and size %zu; want %s and %zu",
                 name, need, nul ? " + NUL" : "", ilab_status_name(qst), qsize == (size_t)-7 ? 0 : qsize,
                 q_fits ? "OK" : "BUFFER_TOO_SMALL", need);
        return false;
    }
    unsigned char *buf = malloc(room);
    for (size_t c = 0; c <= need + 1; c++) {
        memset(buf, CANARY, room);
        size_t size = (size_t)-7;
        if (other)
            call(env, other, NULL, 0, &osize);
        ilab_status st = call(env, arg, buf, c, &size);
        bool fits = nul ? c >= need + 1 : c >= need;
        if (!fits) {
            if (st != ILAB_BUFFER_TOO_SMALL || size != need) {
                CONF_MSG("%s with capacity %zu (needs %zu%s) returned %s and size %zu; want "
                         "BUFFER_TOO_SMALL and %zu", name, c, need, nul ? " + NUL" : "",
                         ilab_status_name(st), size == (size_t)-7 ? 0 : size, need);
                free(buf);
                return false;
            }
            for (size_t i = 0; i < room; i++)
                if (buf[i] != CANARY) {
                    CONF_MSG("%s with capacity %zu returned BUFFER_TOO_SMALL but wrote byte %zu of the "
                             "buffer (nothing is written on BUFFER_TOO_SMALL)", name, c, i);
                    free(buf);
                    return false;
                }
            continue;
        }
        if (st != ILAB_OK || size != need) {
            CONF_MSG("%s with capacity %zu (needs %zu%s) returned %s and size %zu; want OK and %zu", name, c,
                     need, nul ? " + NUL" : "", ilab_status_name(st), size, need);
            free(buf);
            return false;
        }
        if (memcmp(buf, expect, need * unit) != 0) {
            CONF_MSG("%s with capacity %zu wrote other contents than with a large buffer", name, c);
            free(buf);
            return false;
        }
        size_t used = need * unit;
        if (nul && buf[used++] != '\0') {
            CONF_MSG("%s with capacity %zu (room for the NUL) did not write the NUL after %zu bytes", name, c,
                     need);
            free(buf);
            return false;
        }
        for (size_t i = used; i < room; i++)
            if (buf[i] != CANARY) {
                CONF_MSG("%s with capacity %zu wrote byte %zu, past the %zu it returned%s", name, c, i, need,
                         nul ? " and the NUL" : "");
                free(buf);
                return false;
            }
    }
    free(buf);
    return true;
}

typedef struct text_arg {
    const char *s;
    size_t len;
} text_arg;

typedef struct ids_arg {
    const int32_t *t;
    size_t n;
} ids_arg;

typedef struct piece_arg {
    int32_t prev, token;
} piece_arg;

static ilab_status call_tokenize(conf_env *env, const void *arg, void *buf, size_t cap, size_t *size)
{
    const text_arg *a = arg;
    return env->api->tokenize(env->be, a->s, a->len, 0, buf, cap, size);
}

static ilab_status call_detokenize(conf_env *env, const void *arg, void *buf, size_t cap, size_t *size)
{
    const ids_arg *a = arg;
    return env->api->detokenize(env->be, a->t, a->n, buf, cap, size);
}

static ilab_status call_piece(conf_env *env, const void *arg, void *buf, size_t cap, size_t *size)
{
    const piece_arg *a = arg;
    return env->api->token_piece(env->be, a->prev, a->token, buf, cap, size);
}

/* TOK-7: tokenize, detokenize and token_piece at every capacity. */
conf_result conf_tok7_sweep(conf_env *env, char *msg, size_t cap)
{
    CONF_SKIP_UNLESS(env->m->tokenizer, "tokenizer");
    static const char *const inputs[] = {"a", "Once upon a time", "caf\xc3\xa9 \xf0\x9f\x98\x80 \xe6\x97\xa5",
                                         "  two  spaces\n"};
    for (size_t k = 0; k < sizeof inputs / sizeof inputs[0]; k++) {
        text_arg ta = {inputs[k], strlen(inputs[k])};
        size_t n = 0, len = 0;
        int32_t *t = conf_tokenize(env, ta.s, &n, msg, cap);
        if (!t)
            return CONF_FAIL;
        char *text = conf_detokenize(env, t, n, &len, msg, cap);
        char name[128];
        snprintf(name, sizeof name, "tokenize(\"%s\")", ta.s);
        /* the other input: the next text, and its first id alone */
        const char *next = inputs[(k + 1) % (sizeof inputs / sizeof inputs[0])];
        text_arg other_text = {next, strlen(next)};
        ids_arg other_ids = {t, n > 1 ? 1 : 0};
        bool ok = text && sweep(env, name, call_tokenize, &ta, &other_text, t, n, sizeof(int32_t), false, msg, cap);
        ids_arg ia = {t, n};
        snprintf(name, sizeof name, "detokenize(%zu ids of \"%s\")", n, ta.s);
        ok = ok && sweep(env, name, call_detokenize, &ia, &other_ids, text, len, 1, true, msg, cap);
        for (size_t i = 0; ok && i < n; i++) {
            piece_arg pa = {i ? t[i - 1] : -1, t[i]};
            char piece[128];
            size_t plen = 0;
            ilab_status st = env->api->token_piece(env->be, pa.prev, pa.token, piece, sizeof piece, &plen);
            if (st != ILAB_OK) {
                conf_fail_status(env, st, "token_piece()", msg, cap);
                ok = false;
                break;
            }
            snprintf(name, sizeof name, "token_piece(%d, %d)", pa.prev, pa.token);
            ok = sweep(env, name, call_piece, &pa, NULL, piece, plen, 1, true, msg, cap);
        }
        free(text);
        free(t);
        if (!ok)
            return CONF_FAIL;
    }
    /* empty text still needs room for its NUL: BOS, EOS, no ids at all */
    int32_t specials[2] = {env->info.bos_id, env->info.eos_id};
    for (int k = 0; k < 3; k++) {
        ids_arg ia = {specials, 0};
        if (k < 2 && specials[k] < 0)
            continue;
        if (k < 2)
            ia = (ids_arg){&specials[k], 1};
        char name[64];
        snprintf(name, sizeof name, "detokenize(%s)", k == 0 ? "[BOS]" : k == 1 ? "[EOS]" : "no ids");
        if (!sweep(env, name, call_detokenize, &ia, NULL, "", 0, 1, true, msg, cap))
            return CONF_FAIL;
        if (k < 2) {
            piece_arg pa = {-1, specials[k]};
            snprintf(name, sizeof name, "token_piece(-1, %s)", k == 0 ? "BOS" : "EOS");
            if (!sweep(env, name, call_piece, &pa, NULL, "", 0, 1, true, msg, cap))
                return CONF_FAIL;
        }
    }
    return CONF_PASS;
}

/* ERR-1: last_error() returns the full length at every capacity and
 * truncates with a NUL, writing nothing past the capacity. */
conf_result conf_err1_last_error_sweep(conf_env *env, char *msg, size_t cap)
{
    /* Provoke a message: a stale sequence handle is refused by every plugin
     * that has sequences; a bad token by every tokenizer. */
    int32_t len;
    ilab_status st = ILAB_OK;
    if (env->m->logits == ILAB_LOGITS_FULL)
        st = env->api->seq_length(env->be, (ilab_seq_t)0x5eedbadull, &len);
    else if (env->m->tokenizer) {
        int32_t bad = env->info.vocab_size;
        char b[8];
        size_t l;
        st = env->api->detokenize(env->be, &bad, 1, b, sizeof b, &l);
    }
    CONF_SKIP_UNLESS(st != ILAB_OK, "logits or tokenizer (no call to provoke an error with)");
    char full[2048];
    memset(full, 0, sizeof full);
    size_t n = env->api->last_error(env->be, full, sizeof full);
    CONF_CHECK(n > 0 && n < sizeof full && strlen(full) == n,
               "last_error() after %s returned %zu for a %zu-byte message", ilab_status_name(st), n,
               strlen(full));
    unsigned char buf[2048 + GUARD];
    for (size_t c = 0; c <= n + 1; c++) {
        memset(buf, CANARY, sizeof buf);
        size_t got = env->api->last_error(env->be, (char *)buf, c);
        CONF_CHECK(got == n, "last_error() with capacity %zu returned %zu, want the full length %zu", c, got, n);
        if (c == 0) {
            CONF_CHECK(buf[0] == CANARY, "last_error() with capacity 0 wrote into the buffer");
            continue;
        }
        size_t keep = c - 1 < n ? c - 1 : n;
        CONF_CHECK(memcmp(buf, full, keep) == 0 && buf[keep] == '\0',
                   "last_error() with capacity %zu did not write the first %zu bytes and a NUL", c, keep);
        for (size_t i = c; i < sizeof buf; i++)
            CONF_CHECK(buf[i] == CANARY, "last_error() with capacity %zu wrote byte %zu, past the capacity", c,
                       i);
    }
    CONF_CHECK(env->api->last_error(env->be, NULL, 0) == n, "last_error(NULL, 0) did not return the length");
    /* the most recent non-OK status's message: calls that succeed after it
     * leave it as it was */
    ilab_model_info_t info = {.struct_size = sizeof info};
    ilab_status ok = env->api->model_info(env->be, &info);
    char after[2048];
    memset(after, 0, sizeof after);
    env->api->last_error(env->be, after, sizeof after);
    CONF_CHECK(ok != ILAB_OK || strcmp(after, full) == 0,
               "after a successful model_info() last_error() is \"%.200s\"; the last failed call's message was "
               "\"%.200s\" (the most recent non-OK status's message)", after, full);
    return CONF_PASS;
}

/* TOK-9: BOS and EOS decode to "" everywhere, and tokenize(s, 0) never
 * produces them, over the random strings of TOK-2. */
conf_result conf_tok9_specials(conf_env *env, char *msg, size_t cap)
{
    CONF_SKIP_UNLESS(env->m->tokenizer, "tokenizer");
    conf_result r = conf_tok6_pieces_args(env, msg, cap);
    if (r != CONF_PASS)
        return r;
    int32_t bos = env->info.bos_id, eos = env->info.eos_id;
    uint64_t rng = env->opt->seed * 31 + 9;
    char buf[512];
    for (int i = 0; i < RANDOM_STRINGS; i++) {
        size_t len = random_valid(&rng, buf, sizeof buf), n = 0;
        bool refused;
        int32_t *t = tokenize_any(env, buf, len, 0, &n, &refused, msg, cap);
        if (!t && refused)
            continue; /* U+2581 in a SentencePiece vocabulary (TOK-2): says nothing of specials */
        if (!t)
            return CONF_FAIL;
        for (size_t k = 0; k < n; k++)
            if ((bos >= 0 && t[k] == bos) || (eos >= 0 && t[k] == eos)) {
                CONF_MSG("tokenize(random string %d, flags 0) returned %s id %d at %zu (seed %" PRIu64 ")", i,
                         t[k] == bos ? "the BOS" : "the EOS", t[k], k, env->opt->seed);
                free(t);
                return CONF_FAIL;
            }
        free(t);
    }
    /* specials between ordinary tokens decode to nothing too */
    if (bos >= 0 || eos >= 0) {
        size_t n = 0, len = 0;
        int32_t *t = conf_tokenize(env, "ab", &n, msg, cap);
        if (!t)
            return CONF_FAIL;
        int32_t mixed[8];
        size_t m = 0;
        mixed[m++] = bos >= 0 ? bos : eos;
        for (size_t k = 0; k < n && m < 6; k++)
            mixed[m++] = t[k];
        mixed[m++] = eos >= 0 ? eos : bos;
        free(t);
        char *text = conf_detokenize(env, mixed, m, &len, msg, cap);
        if (!text)
            return CONF_FAIL;
        bool ok = len == 2 && memcmp(text, "ab", 2) == 0;
        free(text);
        CONF_CHECK(ok, "detokenize([special, \"ab\"..., special]) gave %zu bytes, want \"ab\"", len);
    }
    return CONF_PASS;
}
