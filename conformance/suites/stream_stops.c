/* STR-6 against a reference matcher. Sets of stop strings are cut from the
 * greedy output around one span of it: the span, its prefix, its suffix,
 * its inside, near misses sharing its first or last bytes, a second span.
 * Occurrences then nest, overlap, share starts and ends, and complete
 * within one token. Each stream must end where the reference says: at the
 * shortest prefix of the output holding an occurrence of any string of the
 * set, cut before the longest occurrence ending there, FINISH(stop), the
 * completing token emitted and counted; with no occurrence, the whole
 * output and FINISH(length). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "suites.h"

#define STOP_PROMPTS 6
#define STOP_MORE_PROMPTS 6  /* tried while too few sets told the rules apart */
#define STOP_SETS 6          /* per prompt */
#define STOP_MAX_TOKENS 24
#define STOP_FAMILY 7
#define STOP_MAX_LEN 8

typedef struct stop_set {
    char s[STOP_FAMILY][STOP_MAX_LEN + 2];
    const char *ptr[STOP_FAMILY];
    size_t n;
} stop_set;

/* The reference: the cut and the end of the shortest prefix of `text` that
 * holds an occurrence (cut = end = len when none). */
static size_t ref_cut(const char *text, size_t len, const stop_set *set, size_t *end)
{
    for (size_t e = 1; e <= len; e++) {
        size_t cut = e;
        for (size_t i = 0; i < set->n; i++) {
            size_t sl = strlen(set->ptr[i]);
            if (sl <= e && e - sl < cut && memcmp(text + e - sl, set->ptr[i], sl) == 0)
                cut = e - sl;
        }
        if (cut < e) {
            *end = e;
            return cut;
        }
    }
    *end = len;
    return len;
}

/* The cut a matcher makes when it looks only after a whole token and takes
 * the occurrence starting first among those complete by then: it differs
 * from the reference when a token completes one string inside another. */
static size_t earliest_start_cut(const char *text, size_t upto, const stop_set *set)
{
    size_t cut = upto;
    for (size_t i = 0; i < set->n; i++) {
        size_t sl = strlen(set->ptr[i]);
        const char *hit = sl <= upto ? memmem(text, upto, set->ptr[i], sl) : NULL;
        if (hit && (size_t)(hit - text) < cut)
            cut = (size_t)(hit - text);
    }
    return cut;
}

/* A usable stop string: non-empty, no NUL, and whole UTF-8 code points
 * (the HTTP adapters send stop strings as JSON text, docs/adapters.md). */
static bool usable_stop(const char *s, size_t n)
{
    if (n == 0 || memchr(s, '\0', n))
        return false;
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t need = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3
                      : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        if (need == 0 || i + need > n)
            return false;
        unsigned char lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80; /* RFC 3629's table */
        unsigned char hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
        for (size_t k = 1; k < need; k++) {
            unsigned char b = (unsigned char)s[i + k];
            if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF))
                return false;
        }
        i += need;
    }
    return true;
}

/* The family around text[a, a + m): the span and its inside, and each
 * other member with probability 1/2, in a random order. */
static void draw_set(const char *text, size_t len, size_t a, size_t m, uint64_t *rng, stop_set *set)
{
    char fam[STOP_FAMILY][STOP_MAX_LEN + 2];
    size_t fl[STOP_FAMILY] = {0};
    const char *span = text + a;
    memcpy(fam[0], span, m);
    fl[0] = m;                                    /* the span */
    memcpy(fam[1], span + 1, m - 1);
    fl[1] = m - 1;                                /* its suffix: ends with it */
    memcpy(fam[2], span, m - 1);
    fl[2] = m - 1;                                /* its prefix: ends first */
    if (m >= 3) {
        memcpy(fam[3], span + 1, m - 2);
        fl[3] = m - 2;                            /* its inside */
    }
    memcpy(fam[4], span, m - 1);
    fam[4][m - 1] = (char)(span[m - 1] ^ 0x5A);   /* a near miss sharing its start */
    fl[4] = m;
    fam[5][0] = (char)(span[0] ^ 0x5A);           /* ... and one sharing its end */
    memcpy(fam[5] + 1, span + 1, m - 1);
    fl[5] = m;
    size_t b = (size_t)(conf_splitmix64(rng) % len), bl = 2 + (size_t)(conf_splitmix64(rng) % 3);
    if (b + bl <= len) {
        memcpy(fam[6], text + b, bl);             /* another span */
        fl[6] = bl;
    }
    set->n = 0;
    for (int k = 0; k < STOP_FAMILY; k++) {
        bool join = k == 0 || k == 3 || (conf_splitmix64(rng) & 1);
        if (!join || !usable_stop(fam[k], fl[k]))
            continue;
        memcpy(set->s[set->n], fam[k], fl[k]);
        set->s[set->n][fl[k]] = '\0';
        set->n++;
    }
    for (size_t i = set->n; i > 1; i--) {
        size_t j = (size_t)(conf_splitmix64(rng) % i);
        char t[STOP_MAX_LEN + 2];
        memcpy(t, set->s[i - 1], sizeof t);
        memcpy(set->s[i - 1], set->s[j], sizeof t);
        memcpy(set->s[j], t, sizeof t);
    }
    for (size_t i = 0; i < set->n; i++)
        set->ptr[i] = set->s[i];
}

static void describe_set(const stop_set *set, char *out, size_t cap)
{
    size_t o = 0;
    out[0] = '\0';
    for (size_t i = 0; i < set->n && o + 8 < cap; i++) {
        o += (size_t)snprintf(out + o, cap - o, "%s\"", i ? ", " : "{");
        for (const unsigned char *c = (const unsigned char *)set->ptr[i]; *c && o + 6 < cap; c++)
            o += (size_t)snprintf(out + o, cap - o, *c >= 0x20 && *c < 0x7f && *c != '"' && *c != '\\' ? "%c"
                                  : "\\x%02x", *c);
        o += (size_t)snprintf(out + o, cap - o, "\"");
    }
    if (o + 2 < cap)
        snprintf(out + o, cap - o, "}");
}

/* The shortest text[x, j) of at most `max` bytes that occurs nowhere
 * before (its first occurrence ends at j), or j when there is none. */
static size_t first_new_at(const char *text, size_t j, size_t max)
{
    for (size_t x = j; x-- > 0 && j - x <= max;)
        if (!memmem(text, j - 1, text + x, j - x))
            return x;
    return j;
}

/* The text end after each emitted token (token_piece after the prompt),
 * when the plugin has a tokenizer and the pieces make up the streamed
 * text; NULL otherwise. */
static size_t *token_ends(conf_env *env, const conf_gen_params *p, const conf_gen *full)
{
    if (!env->m->tokenizer)
        return NULL;
    size_t *ends = malloc((full->n_tokens + 1) * sizeof *ends);
    size_t at = 0;
    char piece[256];
    for (size_t k = 0; k < full->n_tokens; k++) {
        size_t plen = 0;
        int32_t prev = k ? full->tokens[k - 1] : p->prompt[p->n_prompt - 1];
        if (env->api->token_piece(env->be, prev, full->tokens[k], piece, sizeof piece, &plen) != ILAB_OK ||
            plen >= sizeof piece) {
            free(ends);
            return NULL;
        }
        ends[k] = at += plen;
    }
    if (at != full->text_len) { /* STR-2's business */
        free(ends);
        return NULL;
    }
    return ends;
}

/* One set on one prompt: the stream against the reference. */
static conf_result check_set(conf_env *env, conf_gen_params *p, const conf_gen *full, const size_t *ends,
                             const stop_set *set, bool *tells_apart, char *msg, size_t cap)
{
    size_t end = 0, cut = ref_cut(full->text, full->text_len, set, &end);
    bool hit = cut < end;
    size_t want_tokens = full->n_tokens;
    if (hit && ends) {
        want_tokens = 0;
        while (ends[want_tokens] < end)
            want_tokens++;
        want_tokens++;
        *tells_apart = earliest_start_cut(full->text, ends[want_tokens - 1], set) != cut;
    }
    p->stop = set->ptr;
    p->n_stop = set->n;
    conf_gen g;
    conf_result r = conf_stream_run(env, p, &g, msg, cap);
    p->stop = NULL;
    p->n_stop = 0;
    if (r != CONF_PASS)
        return r;
    ilab_finish_reason want_fr = hit ? ILAB_FINISH_STOP : ILAB_FINISH_LENGTH;
    bool ok = g.terminal == ILAB_EVENT_FINISH && g.finish_reason == want_fr && g.text_len == cut &&
              memcmp(g.text, full->text, cut) == 0 && (!ends || g.n_tokens == want_tokens) &&
              g.n_tokens <= full->n_tokens && memcmp(g.tokens, full->tokens, g.n_tokens * sizeof *g.tokens) == 0;
    if (!ok) {
        char desc[256];
        describe_set(set, desc, sizeof desc);
        size_t same = 0;
        while (same < g.text_len && same < full->text_len && g.text[same] == full->text[same])
            same++;
        CONF_MSG("stop strings %s on a greedy output of %zu bytes (seed %" PRIu64 "): %zu TOKENs, %zu bytes "
                 "(the first %zu of the output), finish %s; want %s%zu TOKENs, the %zu bytes before the "
                 "occurrence that ends first (at byte %zu; the longest ending there), %s", desc, full->text_len,
                 env->opt->seed, g.n_tokens, g.text_len, same, ilab_finish_reason_name(g.finish_reason),
                 ends ? "" : "<= ", want_tokens, cut, end, ilab_finish_reason_name(want_fr));
        r = CONF_FAIL;
    }
    conf_gen_free(&g);
    return r;
}

/* Where a set nests one occurrence inside another completed by the same
 * token: a token of several bytes ending at e, and the shortest text new
 * one byte before e, starting at x. The span [x - 1, e) holds that text
 * as its inside, which first occurs there. Returns the span's start, or 0. */
static size_t nested_span(const char *text, const size_t *ends, size_t k)
{
    size_t e = ends[k], s0 = k ? ends[k - 1] : 0;
    if (e - s0 < 2 || e < 3)
        return 0;
    size_t x = first_new_at(text, e - 1, 5);
    return x >= 1 && x < e - 1 ? x - 1 : 0;
}

/* One prompt: its greedy output, then STOP_SETS sets: first around every
 * span where a token completes one string inside another (only a token
 * of several bytes can; half the sets at most), then around random spans. */
static conf_result sets_on_prompt(conf_env *env, uint64_t *rng, int *sets, int *apart, char *msg, size_t cap)
{
    int32_t prompt[4];
    conf_gen_params p;
    conf_gen full;
    conf_result r = conf_greedy_stream(env, conf_splitmix64(rng), prompt, 4, STOP_MAX_TOKENS, &p, &full, msg, cap);
    if (r != CONF_PASS)
        return r;
    size_t *ends = token_ends(env, &p, &full), k = 0;
    for (int s = 0; s < STOP_SETS && r == CONF_PASS && full.text_len >= 3; s++) {
        size_t a = 0, e = 0;
        while (ends && s < STOP_SETS / 2 && e == 0 && k < full.n_tokens) {
            a = nested_span(full.text, ends, k);
            e = a ? ends[k] : 0;
            k++;
        }
        if (e == 0) {
            size_t m = 3 + (size_t)(conf_splitmix64(rng) % 5);
            if (m > full.text_len)
                m = full.text_len;
            e = m + (size_t)(conf_splitmix64(rng) % (full.text_len - m + 1));
            a = e - m;
        }
        stop_set set;
        draw_set(full.text, full.text_len, a, e - a, rng, &set);
        bool tells_apart = false;
        r = check_set(env, &p, &full, ends, &set, &tells_apart, msg, cap);
        (*sets)++;
        *apart += tells_apart;
    }
    free(ends);
    conf_gen_free(&full);
    return r;
}

conf_result conf_str6_stop_reference(conf_env *env, char *msg, size_t cap)
{
    CONF_SKIP_UNLESS(env->m->sampling == ILAB_SAMPLING_HOST || env->m->streaming, "streaming");
    uint64_t rng = env->opt->seed * 7 + 16;
    int prompts = STOP_PROMPTS * (env->opt->deep ? 10 : 1), sets = 0, apart = 0, i = 0;
    for (; i < prompts + STOP_MORE_PROMPTS && (i < prompts || apart < 4); i++) {
        conf_result r = sets_on_prompt(env, &rng, &sets, &apart, msg, cap);
        if (r != CONF_PASS)
            return r;
    }
    CONF_MSG("%d stop-string sets on %d greedy outputs matched the reference; in %d a token completed one "
             "string inside another's span (seed %" PRIu64 ")", sets, i, apart, env->opt->seed);
    return CONF_PASS;
}
