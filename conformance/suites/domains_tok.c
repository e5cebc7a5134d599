/* domains.*: batch sizes, tokenize flags with every kind of capacity, and
 * text lengths up to and past max_context, drawn from the domain table
 * (domains.c). The validation layer checks what each call writes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "domains.h"
#include "suites.h"

enum { POOL = 4, L = 2 };

static void free_seqs(conf_env *env, ilab_seq_t *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i])
            env->api->seq_free(env->be, s[i]);
}

/* One batch of b fresh sequences, item i fed prompt i % POOL: OK and each
 * item equal to its prompt alone (LOG-3), or, outside the domain,
 * INVALID_ARGUMENT with every sequence still empty (LOG-6, CCH-8). */
static conf_result one_batch(conf_env *env, size_t b, bool inside, const int32_t *toks, const float *alone,
                             char *msg, size_t cap)
{
    size_t v = (size_t)env->info.vocab_size;
    ilab_seq_t *s = calloc(b + 1, sizeof *s);
    ilab_batch_item_t *items = calloc(b + 1, sizeof *items);
    const ilab_batch_item_t **ptrs = calloc(b + 1, sizeof *ptrs);
    float *got = malloc((b + 1) * v * sizeof *got);
    conf_result r = CONF_PASS;
    size_t made = 0;
    for (; made < b; made++)
        if (env->api->seq_create(env->be, &s[made]) != ILAB_OK)
            break;
    if (made < b) {
        if (inside) {
            CONF_MSG("seq_create() #%zu failed: a batch of %zu (max_batch %d) needs as many sequences",
                     made + 1, b, env->m->max_batch);
            r = CONF_FAIL;
        }
        goto out; /* max_batch + 1 sequences may not exist: nothing to try */
    }
    for (size_t i = 0; i < b; i++) {
        items[i] = (ilab_batch_item_t){.struct_size = sizeof items[i], .seq = s[i],
                                       .tokens = toks + (i % POOL) * L, .n_tokens = L,
                                       .logits = got + i * v};
        ptrs[i] = &items[i];
    }
    ilab_status st = env->api->eval(env->be, ptrs, b);
    if (inside) {
        if (st != ILAB_OK) {
            conf_fail_status(env, st, "eval() of a batch inside 1..max_batch", msg, cap);
            r = CONF_FAIL;
            goto out;
        }
        for (size_t i = 0; i < b; i++) {
            char what[96];
            snprintf(what, sizeof what, "item %zu of a batch of %zu vs alone", i, b);
            if (!conf_logits_close(got + i * v, alone + (i % POOL) * v, (int32_t)v, what, msg, cap)) {
                r = CONF_FAIL;
                goto out;
            }
        }
    } else {
        if (st != ILAB_INVALID_ARGUMENT) {
            CONF_MSG("eval() of %zu items (max_batch %d) returned %s, not INVALID_ARGUMENT", b,
                     env->m->max_batch, ilab_status_name(st));
            r = CONF_FAIL;
            goto out;
        }
        for (size_t i = 0; i < b; i++) {
            int32_t len = -1;
            env->api->seq_length(env->be, s[i], &len);
            if (len != 0) {
                CONF_MSG("a refused eval() of %zu items left sequence %zu at length %d", b, i, (int)len);
                r = CONF_FAIL;
                goto out;
            }
        }
    }
out:
    free_seqs(env, s, made);
    free(s);
    free(items);
    free(ptrs);
    free(got);
    return r;
}

conf_result conf_dom_batch(conf_env *env, char *msg, size_t cap)
{
    CONF_SKIP_UNLESS(env->m->logits == ILAB_LOGITS_FULL, "logits: full");
    size_t v = (size_t)env->info.vocab_size;
    int32_t toks[POOL * L];
    float *alone = malloc(POOL * v * sizeof *alone);
    for (int i = 0; i < POOL; i++) {
        conf_prompt_tokens(env, env->opt->seed + 400 + (uint64_t)i, toks + i * L, L);
        ilab_status st = conf_fresh_logits(env, toks + i * L, L, alone + (size_t)i * v);
        if (st != ILAB_OK) {
            free(alone);
            CONF_CHECK_OK(env, st, "eval() of one item alone");
        }
    }
    conf_dom_value val[CONF_DOM_MAX_VALUES];
    size_t n = conf_dom_draw(CONF_DOM_BATCH, env, env->opt->seed, 4, val);
    conf_result r = CONF_PASS;
    for (size_t i = 0; i < n && r == CONF_PASS; i++) {
        if (val[i].u == 0) {
            ilab_status st = env->api->eval(env->be, NULL, 0);
            if (st != ILAB_INVALID_ARGUMENT) {
                CONF_MSG("eval() of 0 items returned %s, not INVALID_ARGUMENT", ilab_status_name(st));
                r = CONF_FAIL;
            }
            continue;
        }
        r = one_batch(env, (size_t)val[i].u, val[i].inside, toks, alone, msg, cap);
    }
    free(alone);
    if (r == CONF_PASS)
        CONF_MSG("%zu batch sizes over 1..%d and past it", n, env->m->max_batch);
    return r;
}

/* ---- tokenize flags x capacities ---------------------------------------- */

static bool caps_for(conf_env *env, const char *text, uint32_t flags, bool inside, const int32_t *plain,
                     size_t n_plain, char *msg, size_t cap)
{
    size_t need = (size_t)-1, len = strlen(text);
    ilab_status st = env->api->tokenize(env->be, text, len, flags, NULL, 0, &need);
    if (!inside) {
        CONF_CHECK_BOOL(st == ILAB_INVALID_ARGUMENT,
                        "tokenize(flags 0x%x) size query returned %s, not INVALID_ARGUMENT",
                        (unsigned)flags, ilab_status_name(st));
        int32_t buf[8];
        size_t got = 0;
        st = env->api->tokenize(env->be, text, len, flags, buf, 8, &got);
        if (len < 8) /* room for every id of a short text */
            CONF_CHECK_BOOL(st == ILAB_INVALID_ARGUMENT, "tokenize(flags 0x%x) returned %s, not INVALID_ARGUMENT",
                            (unsigned)flags, ilab_status_name(st));
        return true;
    }
    int32_t bos = env->info.bos_id, eos = env->info.eos_id;
    size_t want = n_plain + ((flags & 1) && bos >= 0) + ((flags & 2) && eos >= 0);
    CONF_CHECK_BOOL(st == (want == 0 ? ILAB_OK : ILAB_BUFFER_TOO_SMALL) && need == want,
                    "tokenize(\"%.20s\", flags %u) size query gave %s and %zu, want %zu ids", text,
                    (unsigned)flags, ilab_status_name(st), need, want);
    size_t caps[] = {0, 1, want > 0 ? want - 1 : 0, want, want + 1};
    int32_t *buf = malloc((want + 2) * sizeof *buf);
    for (size_t c = 0; c < sizeof caps / sizeof caps[0]; c++) {
        size_t got = (size_t)-1;
        st = env->api->tokenize(env->be, text, len, flags, buf, caps[c], &got);
        bool fits = caps[c] >= want;
        bool ok = st == (fits ? ILAB_OK : ILAB_BUFFER_TOO_SMALL) && got == want;
        size_t off = ((flags & 1) && bos >= 0) ? 1 : 0;
        if (ok && fits)
            ok = memcmp(buf + off, plain, n_plain * sizeof *plain) == 0;
        if (!ok) {
            free(buf);
            CONF_MSG("tokenize(\"%.20s\", flags %u, cap %zu) gave %s, %zu ids; want %s, %zu ids around "
                     "those of flags 0",
                     text, (unsigned)flags, caps[c], ilab_status_name(st), got,
                     fits ? "OK" : "BUFFER_TOO_SMALL", want);
            return false;
        }
    }
    free(buf);
    return true;
}

static bool text_caps(conf_env *env, const int32_t *t, size_t n, const char *text, char *msg, size_t cap)
{
    size_t len = strlen(text), need = (size_t)-1;
    ilab_status st = env->api->detokenize(env->be, t, n, NULL, 0, &need);
    CONF_CHECK_BOOL(st == ILAB_BUFFER_TOO_SMALL && need == len,
                    "detokenize() size query gave %s and %zu, want BUFFER_TOO_SMALL and %zu", ilab_status_name(st),
                    need, len);
    size_t caps[] = {0, 1, len, len + 1, len + 2};
    char *buf = malloc(len + 3);
    for (size_t c = 0; c < sizeof caps / sizeof caps[0]; c++) {
        size_t got = (size_t)-1;
        st = env->api->detokenize(env->be, t, n, buf, caps[c], &got);
        bool fits = caps[c] >= len + 1;
        if (st != (fits ? ILAB_OK : ILAB_BUFFER_TOO_SMALL) || got != len ||
            (fits && memcmp(buf, text, len + 1) != 0)) {
            free(buf);
            CONF_MSG("detokenize() of %zu bytes at cap %zu gave %s and %zu", len, caps[c],
                     ilab_status_name(st), got);
            return false;
        }
    }
    free(buf);
    return true;
}

conf_result conf_dom_flags_caps(conf_env *env, char *msg, size_t cap)
{
    CONF_SKIP_UNLESS(env->m->tokenizer, "tokenizer");
    conf_dom_value val[CONF_DOM_MAX_VALUES];
    size_t n = conf_dom_draw(CONF_DOM_TOK_FLAGS, env, env->opt->seed, 3, val);
    const char *texts[] = {"", "a", conf_corpus[1 % conf_corpus_count], conf_corpus[3 % conf_corpus_count]};
    for (size_t k = 0; k < sizeof texts / sizeof texts[0]; k++) {
        size_t np = 0;
        int32_t *plain = texts[k][0] ? conf_tokenize(env, texts[k], &np, msg, cap) : calloc(1, sizeof *plain);
        if (!plain)
            return CONF_FAIL;
        bool ok = np == 0 || text_caps(env, plain, np, texts[k], msg, cap);
        for (size_t i = 0; ok && i < n; i++)
            ok = caps_for(env, texts[k], (uint32_t)val[i].u, val[i].inside, plain, np, msg, cap);
        free(plain);
        if (!ok)
            return CONF_FAIL;
    }
    CONF_MSG("%zu flag values x size queries and capacities 0, 1, n-1, n, n+1 on 4 texts", n);
    return CONF_PASS;
}

/* ---- long texts ------------------------------------------------------------ */

/* Valid UTF-8 of exactly `len` bytes: words, spaces, newlines and 2-, 3- and
 * 4-byte code points, from the seed. */
static char *random_text(size_t len, uint64_t *rng)
{
    static const char *const pieces[] = {"the ", "of ", "and ", "é", "ß", "€", "中", "😀", "\n", "  ", "Zz", "\t"};
    char *s = malloc(len + 1);
    size_t at = 0;
    while (at < len) {
        const char *p = pieces[conf_splitmix64(rng) % (sizeof pieces / sizeof pieces[0])];
        size_t pl = strlen(p);
        if (at + pl > len)
            p = "x", pl = 1;
        memcpy(s + at, p, pl);
        at += pl;
    }
    s[len] = '\0';
    return s;
}

conf_result conf_dom_long_texts(conf_env *env, char *msg, size_t cap)
{
    CONF_SKIP_UNLESS(env->m->tokenizer, "tokenizer");
    conf_dom_value val[CONF_DOM_MAX_VALUES];
    size_t n = conf_dom_draw(CONF_DOM_TEXT_BYTES, env, env->opt->seed, 2, val);
    uint64_t rng = env->opt->seed ^ 0x7e47;
    size_t longest = 0;
    for (size_t i = 0; i < n; i++) {
        size_t len = (size_t)val[i].u;
        if (len == 0)
            continue; /* the flags test covers the empty text */
        char *text = random_text(len, &rng);
        size_t nt = 0, back_len = 0;
        int32_t *t = conf_tokenize(env, text, &nt, msg, cap);
        char *back = t ? conf_detokenize(env, t, nt, &back_len, msg, cap) : NULL;
        bool ok = back && back_len == len && memcmp(back, text, len) == 0;
        if (back && !ok)
            CONF_MSG("a random %zu-byte text (%zu ids) came back as %zu bytes", len, nt, back_len);
        free(text);
        free(t);
        free(back);
        if (!ok)
            return CONF_FAIL;
        longest = len > longest ? len : longest;
    }
    CONF_MSG("%zu text lengths up to %zu bytes round-trip (max_context %d)", n, longest, conf_max_context(env));
    return CONF_PASS;
}
