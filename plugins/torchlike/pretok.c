#include "pretok.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The expressions, as llama.cpp's llama-vocab.cpp lists them for each
 * pre-tokenizer type (read there; written here as PCRE2 patterns). */
#define GPT2_RE "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
#define LLAMA3_RE "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])" \
    "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+" \
    "|\\s+(?!\\S)|\\s+"
#define QWEN2_RE "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])" \
    "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+" \
    "|\\s+(?!\\S)|\\s+"

/* llama.cpp runs the expressions written with literal non-ASCII ranges on
 * text whose non-ASCII white space has been replaced by U+000B: such a
 * range never matches white space (U+3000 is in two of them), hence the
 * (?!\s) in front of them. */
#define CJK_RE "(?:(?!\\s)[\\x{4e00}-\\x{9fa5}\\x{800}-\\x{4e00}\\x{ac00}-\\x{d7ff}])+"

typedef struct rules {
    const char *name;     /* canonical */
    int ignore_merges;
    const char *re[7];    /* NULL-terminated */
} rules;

static const rules k_rules[] = {
    {"default", 0, {"[\\p{P}\\$\\+<=>\\^~\\|]+",
                    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
                    "\\p{N}+", "[0-9][0-9][0-9]", NULL}},
    {"gpt-2", 0, {GPT2_RE, NULL}},
    {"llama-bpe", 1, {LLAMA3_RE, NULL}},
    {"qwen2", 0, {QWEN2_RE, NULL}},
    {"deepseek-llm", 0, {"[\\r\\n]",
        "\\s?[A-Za-z\\x{b5}\\x{c0}-\\x{d6}\\x{d8}-\\x{f6}\\x{f8}-\\x{1ba}\\x{1bc}-\\x{1bf}"
        "\\x{1c4}-\\x{293}\\x{295}-\\x{2af}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37b}-\\x{37d}"
        "\\x{37f}\\x{386}\\x{388}-\\x{38a}\\x{38c}\\x{38e}-\\x{3a1}\\x{3a3}-\\x{3f5}"
        "\\x{3f7}-\\x{481}\\x{48a}-\\x{52f}\\x{531}-\\x{556}\\x{10a0}-\\x{10c5}\\x{13a0}-\\x{13f5}"
        "\\x{13f8}-\\x{13fd}\\x{1c90}-\\x{1cba}\\x{1cbd}-\\x{1cbf}\\x{1d00}-\\x{1d2b}"
        "\\x{1d6b}-\\x{1d77}\\x{1d79}-\\x{1d9a}\\x{1e00}-\\x{1f15}\\x{1f18}-\\x{1f1d}"
        "\\x{1f20}-\\x{1f45}\\x{1f48}-\\x{1f4d}\\x{1f50}-\\x{1f57}\\x{1f59}\\x{1f5b}\\x{1f5d}"
        "\\x{1f5f}-\\x{1f7d}\\x{1f80}-\\x{1fb4}\\x{1fb6}-\\x{1fbc}\\x{1fbe}\\x{1fc2}-\\x{1fc4}"
        "\\x{1fc6}-\\x{1fcc}\\x{1fd0}-\\x{1fd3}\\x{1fd6}-\\x{1fdb}\\x{1fe0}-\\x{1fec}"
        "\\x{1ff2}-\\x{1ff4}\\x{1ff6}-\\x{1ffc}\\x{2102}\\x{2107}\\x{210a}-\\x{2113}\\x{2115}"
        "\\x{2119}-\\x{211d}\\x{2124}\\x{2126}\\x{2128}\\x{212a}-\\x{212d}\\x{212f}-\\x{2134}"
        "\\x{2139}\\x{213c}-\\x{213f}\\x{2145}-\\x{2149}\\x{214e}\\x{2183}\\x{2184}"
        "\\x{2c00}-\\x{2c7b}\\x{2c7e}-\\x{2ce4}\\x{2ceb}-\\x{2cee}\\x{2cf2}\\x{2cf3}"
        "\\x{a640}-\\x{a66d}\\x{a680}-\\x{a69b}\\x{a722}-\\x{a76f}\\x{a771}-\\x{a787}"
        "\\x{a78b}-\\x{a78e}\\x{ab70}-\\x{abbf}\\x{fb00}-\\x{fb06}\\x{fb13}-\\x{fb17}"
        "\\x{ff21}-\\x{ff3a}\\x{ff41}-\\x{ff5a}\\x{10400}-\\x{1044f}\\x{104b0}-\\x{104d3}"
        "\\x{104d8}-\\x{104fb}\\x{10c80}-\\x{10cb2}\\x{10cc0}-\\x{10cf2}\\x{118a0}-\\x{118df}"
        "\\x{1e900}-\\x{1e943}]+",
        "\\s?(?:(?!\\s)[!-/:-~\\x{ff01}-\\x{ff0f}\\x{ff1a}-\\x{ff5e}\\x{2018}-\\x{201f}"
        "\\x{3000}-\\x{3002}])+",
        "\\s+$", CJK_RE, "\\p{N}+", NULL}},
    {"deepseek-coder", 0, {"[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", CJK_RE, "\\p{N}", NULL}},
    {"falcon", 0, {"[\\p{P}\\$\\+<=>\\^~\\|`]+",
                   "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
                   "[0-9][0-9][0-9]", NULL}},
    {"starcoder", 0, {"\\p{N}", GPT2_RE, NULL}},
    {"mpt", 0, {GPT2_RE, NULL}},
};

/* Other names llama.cpp maps to the same rules. */
static const struct { const char *alias, *name; } k_aliases[] = {
    {"llama3", "llama-bpe"}, {"llama-v3", "llama-bpe"}, {"dbrx", "llama-bpe"},
    {"smaug-bpe", "llama-bpe"}, {"deepseek-r1-qwen", "qwen2"}, {"stablelm2", "qwen2"},
    {"refact", "starcoder"}, {"smollm", "starcoder"}, {"command-r", "starcoder"},
    {"codeshell", "starcoder"}, {"exaone", "starcoder"}, {"minerva-7b", "starcoder"},
    {"phi-2", "gpt-2"}, {"olmo", "mpt"}, {"jais", "mpt"}, {"gpt-neox", "default"},
};

struct tl_pretok {
    const rules *r;
    pcre2_code *code[7];
};

const char *tl_pretok_known(void)
{
    return "default, gpt-2, phi-2, llama-bpe, llama3, llama-v3, dbrx, smaug-bpe, qwen2, "
           "deepseek-r1-qwen, stablelm2, deepseek-llm, deepseek-coder, falcon, starcoder, refact, "
           "smollm, command-r, codeshell, exaone, minerva-7b, mpt, olmo, jais, gpt-neox";
}

void tl_pretok_free(tl_pretok *p)
{
    if (!p)
        return;
    for (int i = 0; i < 7; i++)
        pcre2_code_free(p->code[i]);
    free(p);
}

ilab_status tl_pretok_create(const char *name, tl_pretok **out, char *err, size_t cap)
{
    const char *canon = name;
    for (size_t i = 0; i < sizeof k_aliases / sizeof k_aliases[0]; i++)
        if (strcmp(name, k_aliases[i].alias) == 0)
            canon = k_aliases[i].name;
    const rules *r = NULL;
    for (size_t i = 0; i < sizeof k_rules / sizeof k_rules[0]; i++)
        if (strcmp(canon, k_rules[i].name) == 0)
            r = &k_rules[i];
    if (!r) {
        snprintf(err, cap, "pre-tokenizer \"%.64s\" is not known to torchlike (known: %s); set "
                 "torchlike.pre_tokenizer to the name whose rules this vocabulary uses",
                 name, tl_pretok_known());
        return ILAB_INVALID_ARGUMENT;
    }
    tl_pretok *p = calloc(1, sizeof *p);
    if (!p) {
        snprintf(err, cap, "pre-tokenizer %s: out of memory", name);
        return ILAB_OUT_OF_MEMORY;
    }
    p->r = r;
    for (int i = 0; r->re[i]; i++) {
        int ec;
        PCRE2_SIZE off;
        /* $ means the end of the fragment only, as in the ECMAScript regexes
         * llama.cpp runs. */
        p->code[i] = pcre2_compile((PCRE2_SPTR)r->re[i], PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK | PCRE2_DOLLAR_ENDONLY,
                                   &ec, &off, NULL);
        if (!p->code[i]) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(ec, msg, sizeof msg);
            snprintf(err, cap, "pre-tokenizer %s: expression %d does not compile at offset %zu: %s",
                     name, i, (size_t)off, (const char *)msg);
            tl_pretok_free(p);
            return ILAB_INTERNAL;
        }
        pcre2_jit_compile(p->code[i], PCRE2_JIT_COMPLETE); /* falls back to the interpreter */
    }
    *out = p;
    return ILAB_OK;
}

int tl_pretok_ignore_merges(const tl_pretok *p)
{
    return p->r->ignore_merges;
}

const char *tl_pretok_rules(const tl_pretok *p)
{
    return p->r->name;
}

typedef struct ends_buf {
    size_t *v;
    size_t n, cap;
} ends_buf;

static int push_end(ends_buf *b, size_t end)
{
    if (b->n == b->cap) {
        size_t nc = b->cap ? 2 * b->cap : 64;
        size_t *nv = realloc(b->v, nc * sizeof *nv);
        if (!nv)
            return -1;
        b->v = nv;
        b->cap = nc;
    }
    b->v[b->n++] = end;
    return 0;
}

/* Split the fragment [start, end) by one expression into `out`. */
static ilab_status split_fragment(const pcre2_code *code, pcre2_match_data *md, const char *text,
                                  size_t start, size_t end, ends_buf *out, char *err, size_t cap)
{
    PCRE2_SPTR subj = (PCRE2_SPTR)(text + start);
    size_t n = end - start, at = 0;
    while (at < n) {
        int rc = pcre2_match(code, subj, n, at, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        if (rc < 0) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(rc, msg, sizeof msg);
            snprintf(err, cap, "pre-tokenizer: regex match failed: %s", (const char *)msg);
            return ILAB_INTERNAL;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (me == ms) { /* none of the expressions match empty text; never loop */
            at = ms + 1;
            continue;
        }
        if ((ms > at && push_end(out, start + ms) != 0) || push_end(out, start + me) != 0)
            return ILAB_OUT_OF_MEMORY;
        at = me;
    }
    if (at < n && push_end(out, end) != 0)
        return ILAB_OUT_OF_MEMORY;
    return ILAB_OK;
}

ilab_status tl_pretok_split(const tl_pretok *p, const char *text, size_t len, size_t **ends,
                            size_t *n_words, char *err, size_t cap)
{
    ends_buf cur = {0}, next = {0};
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    ilab_status st = ILAB_OK;
    if (!md || (len > 0 && push_end(&cur, len) != 0))
        st = ILAB_OUT_OF_MEMORY;
    for (int i = 0; st == ILAB_OK && p->code[i]; i++) {
        next.n = 0;
        size_t start = 0;
        for (size_t k = 0; st == ILAB_OK && k < cur.n; k++) {
            st = split_fragment(p->code[i], md, text, start, cur.v[k], &next, err, cap);
            start = cur.v[k];
        }
        ends_buf t = cur;
        cur = next;
        next = t;
    }
    pcre2_match_data_free(md);
    free(next.v);
    if (st != ILAB_OK) {
        free(cur.v);
        if (st == ILAB_OUT_OF_MEMORY)
            snprintf(err, cap, "pre-tokenizer: out of memory");
        return st;
    }
    *ends = cur.v;
    *n_words = cur.n;
    return ILAB_OK;
}
