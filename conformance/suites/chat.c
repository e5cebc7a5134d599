/* TOK-11, TOK-12, TOK-13 (capability chat, ABI 1.2): the end-of-generation
 * ids, the chat template text and ILAB_TOKENIZE_PARSE_SPECIAL. */
#include <stdlib.h>
#include <string.h>

#include "suites.h"

#define SENTINEL 0x5A5A5A5A

/* eog_ids() into a fresh array; NULL with the message on failure. */
static int32_t *eog_of(conf_env *env, size_t *n, char *msg, size_t cap)
{
    size_t need = 0;
    ilab_status st = env->api->eog_ids(env->be, NULL, 0, &need);
    if (st != ILAB_OK && st != ILAB_BUFFER_TOO_SMALL) {
        conf_fail_status(env, st, "eog_ids(NULL, 0) (a size query)", msg, cap);
        return NULL;
    }
    int32_t *ids = malloc((need + 1) * sizeof *ids);
    if (!ids) {
        CONF_MSG("out of memory");
        return NULL;
    }
    st = env->api->eog_ids(env->be, ids, need, n);
    if (st != ILAB_OK || *n != need) {
        CONF_MSG("eog_ids with room for the %zu ids the size query gave: %s, %zu ids", need,
                 ilab_status_name(st), *n);
        free(ids);
        return NULL;
    }
    return ids;
}

conf_result conf_tok12_eog_ids(conf_env *env, char *msg, size_t cap)
{
    CONF_SKIP_UNLESS(env->m->chat, "chat");
    size_t n = 0;
    int32_t *ids = eog_of(env, &n, msg, cap);
    if (!ids)
        return CONF_FAIL;
    conf_result r = CONF_PASS;
    int32_t eos = env->info.eos_id;
    for (size_t i = 0; i < n && r == CONF_PASS; i++) {
        if (ids[i] < 0 || ids[i] >= env->info.vocab_size) {
            CONF_MSG("eog_ids()[%zu] = %d is outside the vocabulary (%d)", i, ids[i],
                     env->info.vocab_size);
            r = CONF_FAIL;
        } else if (ids[i] == eos && i != 0) {
            CONF_MSG("EOS (%d) is eog_ids()[%zu], not first", eos, i);
            r = CONF_FAIL;
        } else if (i > 0 && ids[i - 1] != eos && ids[i] <= ids[i - 1]) {
            CONF_MSG("eog_ids() is not EOS then ascending without repeats: [%zu] = %d after %d", i,
                     ids[i], ids[i - 1]);
            r = CONF_FAIL;
        }
    }
    if (r == CONF_PASS && eos >= 0 && (n == 0 || ids[0] != eos)) {
        CONF_MSG("EOS (%d) is not in eog_ids() (it ends every generation)", eos);
        r = CONF_FAIL;
    }
    /* TOK-7's sizes: every smaller capacity is BUFFER_TOO_SMALL, writes nothing. */
    for (size_t c = 0; c < n && r == CONF_PASS; c++) {
        int32_t *buf = malloc((n + 1) * sizeof *buf);
        for (size_t k = 0; buf && k <= n; k++)
            buf[k] = SENTINEL;
        size_t got = 0;
        ilab_status st = buf ? env->api->eog_ids(env->be, buf, c, &got) : ILAB_OUT_OF_MEMORY;
        if (st != ILAB_BUFFER_TOO_SMALL || got != n) {
            CONF_MSG("eog_ids with room for %zu of %zu ids: %s and %zu needed, want BUFFER_TOO_SMALL "
                     "and %zu", c, n, ilab_status_name(st), got, n);
            r = CONF_FAIL;
        }
        for (size_t k = 0; buf && k <= n && r == CONF_PASS; k++)
            if (buf[k] != SENTINEL) {
                CONF_MSG("eog_ids with room for %zu of %zu ids wrote element %zu", c, n, k);
                r = CONF_FAIL;
            }
        free(buf);
    }
    if (r == CONF_PASS)
        CONF_MSG("%zu end-of-generation id(s), EOS first", n);
    free(ids);
    return r;
}

conf_result conf_tok13_chat_template(conf_env *env, char *msg, size_t cap)
{
    CONF_SKIP_UNLESS(env->m->chat, "chat");
    size_t len = 0;
    ilab_status st = env->api->chat_template(env->be, NULL, 0, &len);
    CONF_CHECK(st == ILAB_BUFFER_TOO_SMALL, "chat_template(NULL, 0) gave %s, want BUFFER_TOO_SMALL "
               "(no room for the NUL)", ilab_status_name(st));
    char *a = malloc(len + 2), *b = malloc(len + 2);
    CONF_CHECK(a && b, "out of memory");
    memset(a, 0x5A, len + 2);
    size_t got = 0;
    st = env->api->chat_template(env->be, a, len, &got);
    conf_result r = CONF_PASS;
    if (st != ILAB_BUFFER_TOO_SMALL || got != len) {
        CONF_MSG("chat_template with cap = len (%zu): %s, len %zu; want BUFFER_TOO_SMALL", len,
                 ilab_status_name(st), got);
        r = CONF_FAIL;
    }
    for (size_t k = 0; k < len + 2 && r == CONF_PASS; k++)
        if ((unsigned char)a[k] != 0x5A) {
            CONF_MSG("chat_template with cap = len wrote byte %zu", k);
            r = CONF_FAIL;
        }
    if (r == CONF_PASS) {
        st = env->api->chat_template(env->be, a, len + 1, &got);
        if (st != ILAB_OK || got != len || a[len] != '\0' || (unsigned char)a[len + 1] != 0x5A ||
            strlen(a) != len) {
            CONF_MSG("chat_template with cap = len + 1: %s, len %zu of %zu, NUL-terminated %d, "
                     "no NUL inside %d, byte past untouched %d", ilab_status_name(st), got, len,
                     a[len] == '\0', strlen(a) == len, (unsigned char)a[len + 1] == 0x5A);
            r = CONF_FAIL;
        }
    }
    if (r == CONF_PASS) {
        st = env->api->chat_template(env->be, b, len + 1, &got);
        if (st != ILAB_OK || got != len || memcmp(a, b, len)) {
            CONF_MSG("chat_template differs between two calls");
            r = CONF_FAIL;
        } else {
            CONF_MSG("a template of %zu bytes", len);
        }
    }
    free(a);
    free(b);
    return r;
}

static int32_t *tokenize_flags(conf_env *env, const char *s, size_t len, uint32_t flags, size_t *n,
                               char *msg, size_t cap)
{
    size_t need = 0;
    ilab_status st = env->api->tokenize(env->be, s, len, flags, NULL, 0, &need);
    if (st != ILAB_OK && st != ILAB_BUFFER_TOO_SMALL) {
        conf_fail_status(env, st, "tokenize (a size query)", msg, cap);
        return NULL;
    }
    int32_t *t = malloc((need + 1) * sizeof *t);
    if (!t || (st = env->api->tokenize(env->be, s, len, flags, t, need, n)) != ILAB_OK) {
        if (t)
            conf_fail_status(env, st, "tokenize", msg, cap);
        free(t);
        return NULL;
    }
    return t;
}

conf_result conf_tok11_parse_special(conf_env *env, char *msg, size_t cap)
{
    CONF_SKIP_UNLESS(env->m->chat, "chat");
    /* Text that spells no special token tokenizes the same either way. */
    static const char *const plain[] = {"Hello, world", "the cat sat on the mat", "12345", ""};
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++) {
        size_t na = 0, nb = 0, len = strlen(plain[i]);
        int32_t *a = tokenize_flags(env, plain[i], len, ILAB_TOKENIZE_PARSE_SPECIAL, &na, msg, cap);
        int32_t *b = a ? tokenize_flags(env, plain[i], len, 0, &nb, msg, cap) : NULL;
        bool same = a && b && na == nb && (!na || !memcmp(a, b, na * sizeof *a));
        free(a);
        free(b);
        CONF_CHECK(same, "\"%s\" tokenizes differently with PARSE_SPECIAL", plain[i]);
    }
    /* The text of every end-of-generation token other than EOS is that token. */
    size_t n = 0, checked = 0;
    int32_t *ids = eog_of(env, &n, msg, cap);
    if (!ids)
        return CONF_FAIL;
    conf_result r = CONF_PASS;
    for (size_t i = 0; i < n && r == CONF_PASS; i++) {
        if (ids[i] == env->info.eos_id)
            continue;
        size_t len = 0;
        char *text = conf_detokenize(env, &ids[i], 1, &len, msg, cap);
        if (!text) {
            r = CONF_FAIL;
            break;
        }
        if (len) {
            size_t nt = 0;
            int32_t *t = tokenize_flags(env, text, len, ILAB_TOKENIZE_PARSE_SPECIAL, &nt, msg, cap);
            if (!t || nt != 1 || t[0] != ids[i]) {
                if (t)
                    CONF_MSG("tokenize(\"%s\", PARSE_SPECIAL) is not the one token %d (%zu ids)",
                             text, ids[i], nt);
                r = CONF_FAIL;
            }
            free(t);
            /* without the flag it is plain text: never the control token */
            t = r == CONF_PASS ? tokenize_flags(env, text, len, 0, &nt, msg, cap) : NULL;
            for (size_t k = 0; t && k < nt && r == CONF_PASS; k++)
                if (t[k] == ids[i]) {
                    CONF_MSG("tokenize(\"%s\") without PARSE_SPECIAL gave the end-of-generation token %d "
                             "at %zu: user text must stay plain text", text, ids[i], k);
                    r = CONF_FAIL;
                }
            if (r == CONF_PASS && !t)
                r = CONF_FAIL;
            free(t);
            checked++;
        }
        free(text);
    }
    free(ids);
    if (r == CONF_PASS)
        CONF_MSG("plain text unchanged; %zu end-of-turn token text(s) parsed as their token with "
                 "PARSE_SPECIAL, and as plain text without it",
                 checked);
    return r;
}
