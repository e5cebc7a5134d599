/* TOK clauses: the tokenizer, over a corpus of ASCII and UTF-8 text. */
#include <stdlib.h>
#include <string.h>

#include "suites.h"
#include "text_tokens.h"

conf_result conf_tok1_vocab(conf_env *env, char *msg, size_t cap)
{
    const ilab_model_info_t *i = &env->info;
    CONF_CHECK(i->vocab_size > 0, "vocab_size is %d", i->vocab_size);
    CONF_CHECK(i->bos_id >= -1 && i->bos_id < i->vocab_size, "bos_id %d is not in [-1, %d)", i->bos_id,
               i->vocab_size);
    CONF_CHECK(i->eos_id >= -1 && i->eos_id < i->vocab_size, "eos_id %d is not in [-1, %d)", i->eos_id,
               i->vocab_size);
    CONF_CHECK(i->max_context > 0, "max_context is %d", i->max_context);
    CONF_CHECK(memchr(i->name, '\0', sizeof i->name), "model name is not NUL-terminated");
    return CONF_PASS;
}

/* Where two byte strings first differ, for messages. */
static size_t first_diff(const char *a, size_t na, const char *b, size_t nb)
{
    size_t i = 0;
    while (i < na && i < nb && a[i] == b[i])
        i++;
    return i;
}

conf_result conf_tok2_round_trip(conf_env *env, char *msg, size_t cap)
{
    CONF_SKIP_UNLESS(env->m->tokenizer, "tokenizer");
    for (size_t c = 0; c < conf_corpus_count; c++) {
        const char *s = conf_corpus[c];
        size_t n, len;
        int32_t *t = conf_tokenize(env, s, &n, msg, cap);
        if (!t)
            return CONF_FAIL;
        char *back = conf_detokenize(env, t, n, &len, msg, cap);
        free(t);
        if (!back)
            return CONF_FAIL;
        bool same = len == strlen(s) && memcmp(back, s, len) == 0;
        size_t at = first_diff(back, len, s, strlen(s));
        free(back);
        CONF_CHECK(same, "corpus #%zu: detokenize(tokenize(s)) != s (%zu vs %zu bytes, first difference at byte %zu)",
                   c, len, strlen(s), at);
    }
    CONF_MSG("%zu corpus strings round-trip", conf_corpus_count);
    return CONF_PASS;
}

conf_result conf_tok3_deterministic(conf_env *env, char *msg, size_t cap)
{
    CONF_SKIP_UNLESS(env->m->tokenizer, "tokenizer");
    for (size_t c = 0; c < conf_corpus_count; c++) {
        size_t n1, n2;
        int32_t *a = conf_tokenize(env, conf_corpus[c], &n1, msg, cap);
        if (!a)
            return CONF_FAIL;
        int32_t *b = conf_tokenize(env, conf_corpus[c], &n2, msg, cap);
        if (!b) {
            free(a);
            return CONF_FAIL;
        }
        bool same = n1 == n2 && memcmp(a, b, n1 * sizeof *a) == 0;
        int32_t bad = -1;
        for (size_t i = 0; i < n1; i++)
            if (a[i] < 0 || a[i] >= env->info.vocab_size)
                bad = a[i];
        free(a);
        free(b);
        CONF_CHECK(same, "corpus #%zu tokenized twice gives different ids", c);
        CONF_CHECK(bad == -1, "corpus #%zu: id %d is outside [0, %d)", c, bad, env->info.vocab_size);
    }
    return CONF_PASS;
}

/* TOK-4 for every id of the vocabulary (up to 65,536) as the first token
 * and right after BOS: the pieces concatenate to detokenize() of the pair. */
static conf_result tok4_every_id(conf_env *env, char *msg, size_t cap)
{
    int32_t v = env->info.vocab_size < 65536 ? env->info.vocab_size : 65536;
    int32_t bos = env->info.bos_id;
    for (int32_t id = 0; id < v; id++)
        for (int after_bos = 0; after_bos < (bos >= 0 ? 2 : 1); after_bos++) {
            int32_t t[2] = {after_bos ? bos : id, id};
            size_t n = (size_t)after_bos + 1, len = 0, plen = 0;
            char *whole = conf_detokenize(env, t, n, &len, msg, cap);
            if (!whole)
                return CONF_FAIL;
            char *cat = conf_output_text(env, -1, t, n, &plen, msg, cap);
            bool same = cat && plen == len && memcmp(cat, whole, len) == 0;
            free(whole);
            free(cat);
            if (!cat)
                return CONF_FAIL;
            CONF_CHECK(same, "token %d%s: token_piece() gives %zu bytes, detokenize() %zu", id,
                       after_bos ? " after BOS" : " alone (prev_token -1)", plen, len);
        }
    return CONF_PASS;
}

conf_result conf_tok4_pieces(conf_env *env, char *msg, size_t cap)
{
    CONF_SKIP_UNLESS(env->m->tokenizer, "tokenizer");
    CONF_SKIP_IF_TEXT(env, "tokens.TOK-4.whole_token_runs checks the pieces of whole tokens");
    for (size_t c = 0; c < conf_corpus_count; c++) {
        size_t n, len;
        int32_t *t = conf_tokenize(env, conf_corpus[c], &n, msg, cap);
        if (!t)
            return CONF_FAIL;
        char *whole = conf_detokenize(env, t, n, &len, msg, cap);
        if (!whole) {
            free(t);
            return CONF_FAIL;
        }
        char *cat = malloc(len + 64 * n + 1);
        size_t at = 0;
        ilab_status st = ILAB_OK;
        for (size_t i = 0; i < n && st == ILAB_OK; i++) {
            size_t plen = 0;
            st = env->api->token_piece(env->be, i ? t[i - 1] : -1, t[i], cat + at, 64, &plen);
            if (st == ILAB_OK)
                at += plen;
        }
        bool same = st == ILAB_OK && at == len && memcmp(cat, whole, len) == 0;
        size_t diff = first_diff(cat, at, whole, len);
        free(cat);
        free(whole);
        free(t);
        CONF_CHECK(st == ILAB_OK, "corpus #%zu: token_piece() returned %s", c, ilab_status_name(st));
        CONF_CHECK(same, "corpus #%zu: pieces concatenate to %zu bytes, detokenize gives %zu (first difference at byte %zu)",
                   c, at, len, diff);
    }
    return tok4_every_id(env, msg, cap);
}

/* TOK-5 with TOK-8: empty input under every BOS/EOS flag combination gives
 * exactly the special tokens asked for (none the vocabulary lacks). */
static conf_result tok5_empty_with_flags(conf_env *env, char *msg, size_t cap)
{
    for (uint32_t flags = 0; flags < 4; flags++) {
        int32_t want[2], got[4] = {-7, -7, -7, -7};
        size_t n_want = 0, n = 0;
        if ((flags & ILAB_TOKENIZE_ADD_BOS) && env->info.bos_id >= 0)
            want[n_want++] = env->info.bos_id;
        if ((flags & ILAB_TOKENIZE_ADD_EOS) && env->info.eos_id >= 0)
            want[n_want++] = env->info.eos_id;
        ilab_status st = env->api->tokenize(env->be, "", 0, flags, got, 4, &n);
        CONF_CHECK(st == ILAB_OK, "tokenize(\"\", flags 0x%x) returned %s, want OK", flags, ilab_status_name(st));
        bool same = n == n_want;
        for (size_t k = 0; same && k < n; k++)
            same = got[k] == want[k];
        CONF_CHECK(same, "tokenize(\"\", flags 0x%x) gave %zu id(s) (first %d); want %zu: %s%s", flags, n,
                   n ? got[0] : -1, n_want, n_want ? "the special tokens asked for" : "none",
                   n_want == 2 ? " (BOS then EOS)" : "");
    }
    return CONF_PASS;
}

conf_result conf_tok5_invalid(conf_env *env, char *msg, size_t cap)
{
    CONF_SKIP_UNLESS(env->m->tokenizer, "tokenizer");
    static const struct { const char *s; size_t len; const char *what; } cases[] = {
        {"", 0, "empty input"},
        {"\xff\xfe", 2, "bytes 0xFF 0xFE"},
        {"abc\xc3", 4, "a truncated 2-byte sequence"},
        {"\xed\xa0\x80", 3, "an encoded surrogate"},
        {"\xc0\xaf", 2, "an overlong '/'"},
        {"a\x80z", 3, "a lone continuation byte"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int32_t t[64];
        size_t n = 0;
        ilab_status st = env->api->tokenize(env->be, cases[c].s, cases[c].len, 0, t, 64, &n);
        /* a text tokenizer has no bytes to round-trip them with: it refuses (TOK-10) */
        CONF_CHECK(!env->m->tokenizer_text || cases[c].len == 0 || st == ILAB_INVALID_ARGUMENT,
                   "%s: tokenize() returned %s; tokenizer: text must refuse invalid UTF-8 with "
                   "INVALID_ARGUMENT (TOK-5)", cases[c].what, ilab_status_name(st));
        if (st == ILAB_INVALID_ARGUMENT) {
            char e[256];
            CONF_CHECK(conf_last_error(env, e, sizeof e)[0], "%s: INVALID_ARGUMENT without a message",
                       cases[c].what);
            continue;
        }
        CONF_CHECK(st == ILAB_OK, "%s: tokenize() returned %s; want OK (round trip) or INVALID_ARGUMENT",
                   cases[c].what, ilab_status_name(st));
        char back[64];
        size_t len = 0;
        st = env->api->detokenize(env->be, t, n, back, sizeof back, &len);
        CONF_CHECK(st == ILAB_OK, "%s: detokenize() returned %s", cases[c].what, ilab_status_name(st));
        CONF_CHECK(len == cases[c].len && memcmp(back, cases[c].s, len) == 0,
                   "%s: tokenize() accepted it but it does not round-trip (%zu bytes back, want %zu)",
                   cases[c].what, len, cases[c].len);
    }
    return tok5_empty_with_flags(env, msg, cap);
}

/* TOK-6 in eval(): an id just past the vocabulary (and the others) refused
 * with INVALID_ARGUMENT, alone and after a valid token, appending nothing. */
static conf_result tok6_eval_ids(conf_env *env, const int32_t *bad, int n_bad, char *msg, size_t cap)
{
    if (env->m->logits != ILAB_LOGITS_FULL)
        return CONF_PASS;
    for (int i = 0; i < n_bad; i++)
        for (int at = 0; at < 2; at++) {
            ilab_seq_t seq = ILAB_SEQ_NONE;
            ilab_status st = env->api->seq_create(env->be, &seq);
            CONF_CHECK(st == ILAB_OK, "seq_create() returned %s", ilab_status_name(st));
            int32_t toks[2] = {at ? 0 : bad[i], bad[i]};
            st = conf_eval1(env, seq, toks, at + 1, 0, NULL);
            int32_t len = -1;
            ilab_status lst = env->api->seq_length(env->be, seq, &len);
            env->api->seq_free(env->be, seq);
            CONF_CHECK(st == ILAB_INVALID_ARGUMENT, "eval() of %s%d (vocab_size %d) returned %s, want INVALID_ARGUMENT",
                       at ? "a valid token then " : "", bad[i], env->info.vocab_size, ilab_status_name(st));
            CONF_CHECK(lst == ILAB_OK && len == 0, "eval() refused id %d but the sequence holds %d token(s) (%s)",
                       bad[i], len, ilab_status_name(lst));
        }
    return CONF_PASS;
}

conf_result conf_tok6_out_of_range(conf_env *env, char *msg, size_t cap)
{
    CONF_SKIP_UNLESS(env->m->tokenizer, "tokenizer");
    /* both ends of the id domain: -1 is token_piece's "no previous token",
     * never an id, and a plugin that copies that rule accepts it */
    int32_t bad[] = {env->info.vocab_size, env->info.vocab_size + 1, -1, -2, -5, INT32_MAX, INT32_MIN};
    enum { N_BAD = sizeof bad / sizeof bad[0] };
    char buf[256], e[256];
    size_t len;
    for (int i = 0; i < N_BAD; i++) {
        ilab_status st = env->api->detokenize(env->be, &bad[i], 1, buf, sizeof buf, &len);
        CONF_CHECK(st == ILAB_INVALID_ARGUMENT, "detokenize([%d]) returned %s, want INVALID_ARGUMENT",
                   bad[i], ilab_status_name(st));
        CONF_CHECK(conf_last_error(env, e, sizeof e)[0], "detokenize([%d]) failed without a message", bad[i]);
        st = env->api->token_piece(env->be, -1, bad[i], buf, sizeof buf, &len);
        CONF_CHECK(st == ILAB_INVALID_ARGUMENT, "token_piece(-1, %d) returned %s, want INVALID_ARGUMENT",
                   bad[i], ilab_status_name(st));
    }
    return tok6_eval_ids(env, bad, N_BAD, msg, cap);
}

conf_result conf_tok7_buffer(conf_env *env, char *msg, size_t cap)
{
    CONF_SKIP_UNLESS(env->m->tokenizer, "tokenizer");
    const char *s = conf_corpus[1];
    size_t n_full, len_full;
    int32_t *t = conf_tokenize(env, s, &n_full, msg, cap);
    if (!t)
        return CONF_FAIL;
    char *text = conf_detokenize(env, t, n_full, &len_full, msg, cap);
    if (!text) {
        free(t);
        return CONF_FAIL;
    }
    free(text);
    int32_t small[1];
    size_t n = 0;
    ilab_status st = env->api->tokenize(env->be, s, strlen(s), 0, small, 1, &n);
    conf_result r = CONF_PASS;
    char buf[8];
    size_t len = 0;
    if (n_full > 1 && (st != ILAB_BUFFER_TOO_SMALL || n != n_full)) {
        CONF_MSG("tokenize() into 1 slot returned %s with count %zu; want BUFFER_TOO_SMALL and %zu",
                 ilab_status_name(st), n, n_full);
        r = CONF_FAIL;
    } else if ((st = env->api->detokenize(env->be, t, n_full, buf, sizeof buf, &len)) != ILAB_BUFFER_TOO_SMALL ||
               len != len_full) {
        CONF_MSG("detokenize() into 8 bytes returned %s with length %zu; want BUFFER_TOO_SMALL and %zu",
                 ilab_status_name(st), len, len_full);
        r = CONF_FAIL;
    } else {
        /* exactly len bytes: no room for the NUL, still too small */
        char *exact = malloc(len_full);
        st = env->api->detokenize(env->be, t, n_full, exact, len_full, &len);
        free(exact);
        if (st != ILAB_BUFFER_TOO_SMALL || len != len_full) {
            CONF_MSG("detokenize() into exactly %zu bytes (no room for NUL) returned %s, %zu; want BUFFER_TOO_SMALL",
                     len_full, ilab_status_name(st), len);
            r = CONF_FAIL;
        }
    }
    if (r == CONF_PASS) {
        /* token_piece with no room at all, for a token whose piece is not empty */
        for (size_t i = 0; i < n_full; i++) {
            char piece[64];
            size_t plen = 0;
            if (env->api->token_piece(env->be, i ? t[i - 1] : -1, t[i], piece, sizeof piece, &plen) != ILAB_OK ||
                plen == 0)
                continue;
            size_t need = 0;
            st = env->api->token_piece(env->be, i ? t[i - 1] : -1, t[i], piece, 0, &need);
            if (st != ILAB_BUFFER_TOO_SMALL || need != plen) {
                CONF_MSG("token_piece() with cap 0 returned %s and %zu; want BUFFER_TOO_SMALL and %zu",
                         ilab_status_name(st), need, plen);
                r = CONF_FAIL;
            }
            break;
        }
    }
    free(t);
    return r;
}
