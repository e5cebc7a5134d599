/* Text tokenizers (`tokenizer: text`, TOK-10): UTF-8 validity, whole
 * tokens, and the TOK-4 / TOK-10 tests that replace the byte-exact piece
 * checks for them. */
#include "text_tokens.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define EVERY_ID_MAX 4096   /* ids checked one by one (byte-fallback ids come first) */
#define ABOVE_SAMPLE 4096   /* and as many drawn from the ids above them */
#define RANDOM_SEQUENCES 200

bool conf_utf8_valid(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned char c = u[i], lo = 0x80, hi = 0xBF;
        size_t more;
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xC2 && c <= 0xDF)
            more = 1;
        else if (c >= 0xE0 && c <= 0xEF) {
            more = 2;
            lo = c == 0xE0 ? 0xA0 : 0x80; /* no overlong 3-byte form */
            hi = c == 0xED ? 0x9F : 0xBF; /* no surrogate */
        } else if (c >= 0xF0 && c <= 0xF4) {
            more = 3;
            lo = c == 0xF0 ? 0x90 : 0x80;
            hi = c == 0xF4 ? 0x8F : 0xBF; /* nothing past U+10FFFF */
        } else
            return false;
        if (n - i - 1 < more)
            return false;
        for (size_t k = 1; k <= more; k++) {
            unsigned char d = u[i + k];
            if (d < (k == 1 ? lo : 0x80) || d > (k == 1 ? hi : 0xBF))
                return false;
        }
        i += 1 + more;
    }
    return true;
}

bool conf_has_replacement(const char *s, size_t n)
{
    for (size_t i = 0; i + 3 <= n; i++)
        if (!memcmp(s + i, "\xEF\xBF\xBD", 3))
            return true;
    return false;
}

bool conf_whole_init(conf_whole *w, conf_env *env)
{
    w->env = env;
    w->known = calloc((size_t)env->info.vocab_size, 1);
    return w->known != NULL;
}

void conf_whole_free(conf_whole *w)
{
    free(w->known);
    w->known = NULL;
}

bool conf_whole_get(conf_whole *w, int32_t t, bool *whole, char *msg, size_t cap)
{
    if (!w->known[t]) {
        size_t len = 0;
        char *s = conf_detokenize(w->env, &t, 1, &len, msg, cap);
        if (!s)
            return false;
        if (!conf_utf8_valid(s, len)) {
            snprintf(msg, cap, "detokenize([%d]) is not valid UTF-8 (%zu bytes; a text tokenizer's text always "
                     "is, TOK-10)", t, len);
            free(s);
            return false;
        }
        w->known[t] = conf_has_replacement(s, len) ? -1 : 1;
        free(s);
    }
    *whole = w->known[t] > 0;
    return true;
}

/* One run t[0..n) of whole ids: pieces concatenate to its text. */
static bool run_concatenates(conf_env *env, const int32_t *t, size_t n, const char *what, size_t at,
                             char *msg, size_t cap)
{
    size_t len = 0, plen = 0;
    char *text = conf_detokenize(env, t, n, &len, msg, cap);
    if (!text)
        return false;
    char *cat = conf_output_text(env, -1, t, n, &plen, msg, cap);
    bool ok = cat && plen == len && memcmp(cat, text, len) == 0;
    if (cat && !ok) {
        size_t d = 0;
        while (d < len && d < plen && cat[d] == text[d])
            d++;
        snprintf(msg, cap, "%s: the %zu whole tokens from token %zu (first id %d): pieces concatenate to %zu bytes, "
                 "detokenize() gives %zu (first difference at byte %zu; TOK-4 for tokenizer: text)", what, n, at,
                 t[0], plen, len, d);
    } else if (cat && !conf_utf8_valid(cat, plen)) {
        snprintf(msg, cap, "%s: the pieces of the %zu whole tokens from token %zu are not valid UTF-8 (TOK-10)",
                 what, n, at);
        ok = false;
    }
    free(cat);
    free(text);
    return ok;
}

bool conf_whole_runs_concatenate(conf_whole *w, const int32_t *t, size_t n, const char *what, size_t *runs,
                                 char *msg, size_t cap)
{
    size_t start = 0;
    for (size_t i = 0; i <= n; i++) {
        bool whole = false;
        if (i < n && !conf_whole_get(w, t[i], &whole, msg, cap))
            return false;
        if (whole)
            continue;
        if (i > start) {
            if (!run_concatenates(w->env, t + start, i - start, what, start, msg, cap))
                return false;
            ++*runs;
        }
        start = i + 1;
    }
    return true;
}

bool conf_output_text_defined(conf_env *env, int32_t prev, const int32_t *t, size_t n, bool *defined,
                              char *msg, size_t cap)
{
    *defined = true;
    if (!env->m->tokenizer_text)
        return true;
    conf_whole w;
    if (!conf_whole_init(&w, env)) {
        snprintf(msg, cap, "out of memory");
        return false;
    }
    bool ok = true, whole = true;
    if (prev >= 0)
        ok = conf_whole_get(&w, prev, &whole, msg, cap);
    for (size_t i = 0; ok && whole && i < n; i++)
        ok = conf_whole_get(&w, t[i], &whole, msg, cap);
    conf_whole_free(&w);
    *defined = whole;
    return ok;
}

/* A token that is not whole: its piece alone is valid UTF-8 and is empty
 * or holds U+FFFD where the bytes would be. */
static bool partial_piece_replaced(conf_env *env, int32_t id, char *msg, size_t cap)
{
    size_t len = 0;
    char *p = conf_output_text(env, -1, &id, 1, &len, msg, cap);
    if (!p)
        return false;
    bool ok = conf_utf8_valid(p, len) && (len == 0 || conf_has_replacement(p, len));
    if (!ok)
        snprintf(msg, cap, "token %d is not whole (detokenize([%d]) holds U+FFFD) but token_piece(-1, %d) gives "
                 "%zu bytes that are %s (TOK-10)", id, id, id, len,
                 conf_utf8_valid(p, len) ? "valid UTF-8 without U+FFFD" : "not valid UTF-8");
    free(p);
    return ok;
}

/* The ids looked at one by one: every id below EVERY_ID_MAX and, for a
 * larger vocabulary, ABOVE_SAMPLE more drawn (seeded) from the rest, so no
 * part of the vocabulary is never looked at. malloc'd; NULL out of memory. */
static int32_t *ids_to_check(const conf_env *env, uint64_t salt, size_t *n)
{
    int32_t vocab = env->info.vocab_size;
    int32_t low = vocab < EVERY_ID_MAX ? vocab : EVERY_ID_MAX;
    size_t above = vocab > EVERY_ID_MAX ? ABOVE_SAMPLE : 0;
    int32_t *ids = malloc(((size_t)low + above) * sizeof *ids);
    if (!ids)
        return NULL;
    for (int32_t id = 0; id < low; id++)
        ids[id] = id;
    uint64_t rng = env->opt->seed * 37 + salt;
    for (size_t k = 0; k < above; k++)
        ids[(size_t)low + k] = EVERY_ID_MAX + (int32_t)(conf_splitmix64(&rng) % (uint64_t)(vocab - EVERY_ID_MAX));
    *n = (size_t)low + above;
    return ids;
}

/* TOK-4 (tokenizer: text): runs of whole tokens in the corpus; every id
 * up to EVERY_ID_MAX, and a sample above, alone and after BOS. */
conf_result conf_tok4_whole_runs(conf_env *env, char *msg, size_t cap)
{
    CONF_SKIP_UNLESS(env->m->tokenizer_text,
                     "tokenizer: text (tokens.TOK-4.pieces_concatenate checks every sequence byte for byte)");
    conf_whole w;
    if (!conf_whole_init(&w, env))
        return CONF_ERROR;
    conf_result r = CONF_FAIL;
    size_t runs = 0, partial = 0;
    for (size_t c = 0; c < conf_corpus_count; c++) {
        size_t n = 0;
        int32_t *t = conf_tokenize(env, conf_corpus[c], &n, msg, cap);
        if (!t)
            goto out;
        char what[32];
        snprintf(what, sizeof what, "corpus #%zu", c);
        bool ok = conf_whole_runs_concatenate(&w, t, n, what, &runs, msg, cap);
        free(t);
        if (!ok)
            goto out;
    }
    size_t n_ids = 0;
    int32_t *ids = ids_to_check(env, 4, &n_ids);
    if (!ids) {
        snprintf(msg, cap, "out of memory");
        r = CONF_ERROR;
        goto out;
    }
    int32_t bos = env->info.bos_id;
    for (size_t k = 0; k < n_ids; k++) {
        int32_t id = ids[k];
        bool whole = false;
        if (!conf_whole_get(&w, id, &whole, msg, cap))
            goto out_ids;
        int32_t pair[2] = {bos, id};
        char what[48];
        snprintf(what, sizeof what, "token %d", id);
        if (!whole) {
            partial++;
            if (!partial_piece_replaced(env, id, msg, cap))
                goto out_ids;
        } else if (!conf_whole_runs_concatenate(&w, &id, 1, what, &runs, msg, cap) ||
                   (bos >= 0 && !conf_whole_runs_concatenate(&w, pair, 2, what, &runs, msg, cap)))
            goto out_ids;
    }
    CONF_MSG("%zu runs of whole tokens concatenate (corpus, %zu ids alone and after BOS: every id below %d, "
             "the rest drawn above, seed %" PRIu64 "); %zu of those ids are not whole and their pieces hold U+FFFD",
             runs, n_ids, EVERY_ID_MAX, env->opt->seed, partial);
    r = CONF_PASS;
out_ids:
    free(ids);
out:
    conf_whole_free(&w);
    return r;
}

/* One id sequence: its text and every piece are valid UTF-8. */
static bool sequence_valid(conf_env *env, const int32_t *t, size_t n, char *msg, size_t cap)
{
    size_t len = 0;
    char *text = conf_detokenize(env, t, n, &len, msg, cap);
    if (!text)
        return false;
    bool ok = conf_utf8_valid(text, len);
    free(text);
    if (!ok) {
        snprintf(msg, cap, "detokenize() of %zu ids (first %d) is not valid UTF-8 (%zu bytes; TOK-10)", n, t[0],
                 len);
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        char piece[256];
        size_t plen = 0;
        ilab_status st = env->api->token_piece(env->be, i ? t[i - 1] : -1, t[i], piece, sizeof piece, &plen);
        if (st == ILAB_BUFFER_TOO_SMALL)
            continue; /* a long piece: TOK-7 checks the buffers */
        if (st != ILAB_OK) {
            conf_fail_status(env, st, "token_piece()", msg, cap);
            return false;
        }
        if (!conf_utf8_valid(piece, plen)) {
            snprintf(msg, cap, "token_piece(%d, %d) is not valid UTF-8 (%zu bytes; TOK-10)", i ? t[i - 1] : -1,
                     t[i], plen);
            return false;
        }
    }
    return true;
}

/* TOK-10: seeded random id sequences, most of their ids not whole, give
 * valid UTF-8 from detokenize() and token_piece(). */
conf_result conf_tok10_valid_utf8(conf_env *env, char *msg, size_t cap)
{
    CONF_SKIP_UNLESS(env->m->tokenizer_text, "tokenizer: text");
    conf_whole w;
    if (!conf_whole_init(&w, env))
        return CONF_ERROR;
    size_t n_ids = 0;
    int32_t *ids = ids_to_check(env, 10, &n_ids);
    int32_t *partial = ids ? malloc(n_ids * sizeof *partial) : NULL;
    size_t n_partial = 0;
    conf_result r = CONF_FAIL;
    for (size_t k = 0; partial && k < n_ids; k++) {
        bool whole = false;
        if (!conf_whole_get(&w, ids[k], &whole, msg, cap))
            goto out;
        if (!whole)
            partial[n_partial++] = ids[k];
    }
    uint64_t rng = env->opt->seed * 31 + 10;
    int count = RANDOM_SEQUENCES * (env->opt->deep ? 10 : 1);
    for (int i = 0; partial && i < count; i++) {
        int32_t t[8];
        size_t n = 1 + conf_splitmix64(&rng) % 8;
        for (size_t k = 0; k < n; k++)
            t[k] = n_partial && conf_splitmix64(&rng) % 4 ? partial[conf_splitmix64(&rng) % n_partial]
                                               : (int32_t)(conf_splitmix64(&rng) % (uint64_t)env->info.vocab_size);
        if (!sequence_valid(env, t, n, msg, cap))
            goto out;
    }
    if (partial) {
        CONF_MSG("%d random id sequences (%zu of %zu ids looked at are not whole, 3 in 4 drawn from them) give "
                 "valid UTF-8 (seed %" PRIu64 ")", count, n_partial, n_ids, env->opt->seed);
        r = CONF_PASS;
    } else
        r = CONF_ERROR;
out:
    free(partial);
    free(ids);
    conf_whole_free(&w);
    return r;
}
