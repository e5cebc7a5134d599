/* A small, correct byte-level backend — and, compiled with one -DBREAK_<X>,
 * a deliberately broken one. Each BREAK_ violates exactly one clause of
 * docs/contract.md; conformance/CMakeLists.txt builds one plugin per
 * breakage and asserts the harness reports that clause. With no BREAK_ it must pass.
 *
 * Model: vocabulary = 256 bytes + BOS (256) + EOS (257). The logits are a
 * pure function of the whole token history (recomputed from it on every
 * eval, like a model without a cache), so incremental, chunked, forked and
 * batched evaluation all agree exactly. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <unistd.h>

#include "inferlab/inferlab.h"

#define VOCAB 258
#define BOS 256
#define EOS 257
#define MAX_CONTEXT 64
#define MAX_SEQS 64

#ifndef MOCK_NAME
#define MOCK_NAME "mock_backend"
#endif
#ifdef BREAK_ABI_MAJOR
#define MOCK_ABI_MAJOR 2
#define MOCK_ABI "2.0"
#else
#define MOCK_ABI_MAJOR ILAB_ABI_MAJOR
#ifdef BREAK_MANIFEST_ABI
#define MOCK_ABI "1.2" /* the entry says 1.1 */
#else
#define MOCK_ABI "1.1" /* cache.stats */
#endif
#endif
#ifdef BREAK_MANIFEST_NAME
#define MANIFEST_NAME "someone_else"
#else
#define MANIFEST_NAME MOCK_NAME
#endif
#ifdef MOCK_BACKEND_SAMPLING
#define CAP_TOPK "5"
#define CAP_SAMPLING "backend"
#define CAP_STREAM "true"
#else
#define CAP_TOPK "0"
#define CAP_SAMPLING "host"
#define CAP_STREAM "false"
#endif
/* A text tokenizer (TOK-10): the same byte ids, but text that is whole
 * code points only, as an HTTP engine's tokenizer gives it. */
#ifdef MOCK_TEXT_TOKENIZER
#ifndef MOCK_BACKEND_SAMPLING
#error "tokenizer: text needs sampling: backend (MOCK_BACKEND_SAMPLING)"
#endif
#define CAP_TOKENIZER "text"
#else
#define CAP_TOKENIZER "true"
#endif
#ifdef BREAK_THREAD_RACE
#define CAP_THREADS "sequence"
#else
#define CAP_THREADS "none"
#endif
#ifdef BREAK_SILENT_FALLBACK
#define TRUNCATE_CAP "false"
#else
#define TRUNCATE_CAP "true"
#endif

static const char manifest[] =
    "name: " MANIFEST_NAME "\n"
    "version: 0.1.0\n"
    "abi: " MOCK_ABI "\n"
    "description: Byte-level mock backend for the conformance harness's own tests.\n"
    "capabilities:\n"
    "  tokenizer: " CAP_TOKENIZER "\n"
    "  logits: full\n"
    "  topk_max: " CAP_TOPK "\n"
    "  sampling: " CAP_SAMPLING "\n"
    "  cache:\n"
    "    fork: true\n"
    "    truncate: " TRUNCATE_CAP "\n"
    "    stats: true\n"
    "  batching:\n"
    "    max_batch: 4\n"
    "  streaming: " CAP_STREAM "\n"
    "  cancel: " CAP_STREAM "\n"
    "  max_context: 0\n"
    "  thread_safety: " CAP_THREADS "\n";

typedef struct seq_slot {
    uint32_t gen;   /* bumped on free: stale handles are detected */
    int used;
    int32_t *tokens; /* MAX_CONTEXT */
    int32_t len;
    int leak_to;     /* BREAK_FORK_LEAK: slot + 1 of the parent */
} seq_slot;

struct ilab_backend {
    char err[256];
    seq_slot seqs[MAX_SEQS];
    unsigned calls;
    void *leak;
    ilab_seq_t last_seq;
    const seq_slot *current;       /* BREAK_THREAD_RACE: shared scratch */
    _Atomic uint64_t cancel_id;    /* generate(): the request cancel() named */
};

static ilab_status fail(ilab_backend_t *b, ilab_status st, const char *what)
{
#ifdef BREAK_EMPTY_MESSAGE
    (void)what;
    b->err[0] = '\0';
#else
    snprintf(b->err, sizeof b->err, "%s", what);
#endif
    return st;
}

/* The mock's manifest declares no configuration key: any key is one it does
 * not know, refused naming it (ERR-5). */
static bool unknown_key(const ilab_config_entry_t *c, size_t n, char *msg, size_t cap)
{
    if (n == 0 || !c)
        return false;
    if (cap)
        snprintf(msg, cap, "unknown configuration key '%s' (the mock declares none)",
                 c[0].key ? c[0].key : "(null)");
    return true;
}

static ilab_status mock_probe(const ilab_host_t *host, const ilab_config_entry_t *c, size_t n,
                              char *reason, size_t cap)
{
    (void)host;
    if (unknown_key(c, n, reason, cap))
        return ILAB_INVALID_ARGUMENT;
#ifdef BREAK_PROBE_HANG
    for (;;)
        pause();
#endif
#ifdef BREAK_PROBE_NO_REASON
    reason[0] = '\0';
    return ILAB_UNAVAILABLE;
#endif
#ifdef BREAK_PRETENDS
    snprintf(reason, cap, "mock device not present");
    return ILAB_UNAVAILABLE;
#endif
    if (cap)
        reason[0] = '\0';
    return ILAB_OK;
}

static ilab_status mock_create(const ilab_host_t *host, const ilab_config_entry_t *c, size_t n,
                               char *error, size_t cap, ilab_backend_t **out)
{
    if (!host || !out) {
        if (error && cap)
            snprintf(error, cap, "create: host or out is NULL");
        return ILAB_INVALID_ARGUMENT;
    }
    if (unknown_key(c, n, error, cap))
        return ILAB_INVALID_ARGUMENT;
    ilab_backend_t *b = calloc(1, sizeof *b);
    if (!b) {
        snprintf(error, cap, "out of memory");
        return ILAB_OUT_OF_MEMORY;
    }
#ifdef BREAK_CREATE_LEAK
    b->leak = malloc(1u << 20); /* destroy() never frees it */
    if (b->leak)
        memset(b->leak, 1, 1u << 20);
#endif
    *out = b;
    return ILAB_OK;
}

static void mock_destroy(ilab_backend_t *b)
{
    if (!b)
        return;
    for (int i = 0; i < MAX_SEQS; i++)
        free(b->seqs[i].tokens);
    free(b);
}

static size_t mock_last_error(const ilab_backend_t *b, char *buf, size_t cap)
{
    if (cap)
        snprintf(buf, cap, "%s", b->err);
    return strlen(b->err);
}

static ilab_status mock_model_info(ilab_backend_t *b, ilab_model_info_t *info)
{
    if (!info)
        return fail(b, ILAB_INVALID_ARGUMENT, "model_info: info is NULL");
#ifndef BREAK_MODEL_INFO_OVERWRITE
    if (info->struct_size < sizeof *info)
        return fail(b, ILAB_ABI_MISMATCH, "model_info: struct_size smaller than ABI 1.0's");
#endif
    ilab_model_info_t m;
    memset(&m, 0, sizeof m);
    m.struct_size = info->struct_size;
    m.vocab_size = VOCAB;
    m.bos_id = BOS;
#ifdef BREAK_BAD_SPECIALS
    m.eos_id = VOCAB + 3;
#else
    m.eos_id = EOS;
#endif
    m.max_context = MAX_CONTEXT;
    snprintf(m.name, sizeof m.name, "mock-bytes");
    snprintf(m.digest, sizeof m.digest, "sha256:mock-bytes-v1");
#ifdef BREAK_MODEL_INFO_OVERWRITE
    memcpy(info, &m, sizeof m);
#else
    size_t n = info->struct_size < sizeof m ? info->struct_size : sizeof m;
    memcpy(info, &m, n);
#endif
    return ILAB_OK;
}

/* ---- tokens ------------------------------------------------------------ */

/* The length of the valid UTF-8 code point at s (RFC 3629), 0 if none. */
__attribute__((unused)) static size_t code_point_len(const unsigned char *s, size_t n)
{
    unsigned char c = s[0], lo = 0x80, hi = 0xBF;
    size_t more;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        more = 1;
    else if (c >= 0xE0 && c <= 0xEF)
        more = 2, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4)
        more = 3, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else
        return 0;
    if (n <= more)
        return 0;
    for (size_t k = 1; k <= more; k++, lo = 0x80, hi = 0xBF)
        if (s[k] < lo || s[k] > hi)
            return 0;
    return more + 1;
}

static ilab_status mock_tokenize(ilab_backend_t *b, const char *text, size_t len, uint32_t flags,
                                 int32_t *tokens, size_t cap, size_t *n_tokens)
{
#ifndef BREAK_NULL_CRASH
    if ((!text && len) || !n_tokens || (!tokens && cap))
        return fail(b, ILAB_INVALID_ARGUMENT, "tokenize: NULL argument");
#endif
    if (flags & ~(uint32_t)(ILAB_TOKENIZE_ADD_BOS | ILAB_TOKENIZE_ADD_EOS))
        return fail(b, ILAB_INVALID_ARGUMENT, "tokenize: unknown flag bits");
#if defined(MOCK_TEXT_TOKENIZER) && !defined(BREAK_TEXT_ACCEPTS_INVALID)
    for (size_t i = 0; i < len;) {
        size_t k = code_point_len((const unsigned char *)text + i, len - i);
        if (!k)
            return fail(b, ILAB_INVALID_ARGUMENT, "tokenize: the text is not valid UTF-8 (tokenizer: text)");
        i += k;
    }
#endif
    size_t n = 0;
    int32_t *tmp = malloc((len + 2) * sizeof *tmp); /* one id per byte, plus BOS and EOS */
    if (!tmp)
        return fail(b, ILAB_OUT_OF_MEMORY, "tokenize: out of memory");
    if (flags & ILAB_TOKENIZE_ADD_BOS)
        tmp[n++] = BOS;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)text[i];
#ifdef BREAK_INVALID_UTF8_CRASH
        if (c == 0xFF)
            *(volatile int *)0 = 1;
#endif
#ifdef BREAK_DROP_BYTE
        if (c == '\t')
            continue;
#endif
#ifdef BREAK_TEXT_DROPS_4BYTE
        if (c >= 0xF0 && c <= 0xF4 && code_point_len((const unsigned char *)text + i, len - i) == 4) {
            i += 3; /* the whole code point is lost */
            continue;
        }
#endif
#ifdef BREAK_OUT_OF_RANGE_ID
        if (c == 'w') {
            tmp[n++] = VOCAB + 1;
            continue;
        }
#endif
#ifdef BREAK_OUT_OF_RANGE_EDGE
        if (c == 'w') {
            tmp[n++] = VOCAB; /* one past the last id */
            continue;
        }
#endif
        tmp[n++] = c;
    }
    if (flags & ILAB_TOKENIZE_ADD_EOS)
        tmp[n++] = EOS;
#ifdef BREAK_BUFFER
    if (n > cap)
        n = cap;
#endif
#ifdef BREAK_BUFFER_COUNT
    if (n > cap) { /* refuses, but reports what fitted, not what is needed */
        free(tmp);
        *n_tokens = cap;
        return fail(b, ILAB_BUFFER_TOO_SMALL, "tokenize: output buffer too small");
    }
#endif
    *n_tokens = n;
    if (n > cap) {
        free(tmp);
        return fail(b, ILAB_BUFFER_TOO_SMALL, "tokenize: output buffer too small");
    }
    if (n)
        memcpy(tokens, tmp, n * sizeof *tokens);
    free(tmp);
    return ILAB_OK;
}

__attribute__((unused)) static ilab_status piece_of(ilab_backend_t *b, int32_t t, char *out, size_t *n)
{
#ifndef BREAK_NO_RANGE_CHECK
    if (t < 0 || t >= VOCAB)
        return fail(b, ILAB_INVALID_ARGUMENT, "token id out of range");
#endif
    if (t == BOS || t == EOS) {
        *n = 0;
    } else if (t < 0 || t >= VOCAB) {
        out[0] = '?';
        *n = 1;
    } else {
        out[0] = (char)t;
        *n = 1;
    }
    return ILAB_OK;
}

#ifdef MOCK_TEXT_TOKENIZER
/* The text of ids t[0..n): their bytes with every byte that is not part
 * of a whole code point replaced by U+FFFD. *out is malloc'ed. */
static ilab_status text_of(ilab_backend_t *b, const int32_t *t, size_t n, char **out, size_t *len)
{
    *out = NULL;
    unsigned char *bytes = malloc(n + 1);
    char *s = malloc(3 * n + 1);
    size_t nb = 0, at = 0;
    if (!bytes || !s) {
        free(bytes);
        free(s);
        return fail(b, ILAB_OUT_OF_MEMORY, "detokenize: out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        if (t[i] < 0 || t[i] >= VOCAB) {
            free(bytes);
            free(s);
            return fail(b, ILAB_INVALID_ARGUMENT, "token id out of range");
        }
        if (t[i] != BOS && t[i] != EOS)
            bytes[nb++] = (unsigned char)t[i];
    }
    for (size_t i = 0; i < nb;) {
        size_t k = code_point_len(bytes + i, nb - i);
        if (k) {
            memcpy(s + at, bytes + i, k);
            at += k;
            i += k;
        } else {
            memcpy(s + at, "\xEF\xBF\xBD", 3);
            at += 3;
            i++;
        }
    }
    s[at] = '\0';
    free(bytes);
    *out = s;
    *len = at;
    return ILAB_OK;
}

static ilab_status copy_out(ilab_backend_t *b, const char *s, size_t n, char *out, size_t cap, size_t *len)
{
    *len = n;
    if (n + 1 > cap)
        return fail(b, ILAB_BUFFER_TOO_SMALL, "output buffer too small");
    memcpy(out, s, n);
    out[n] = '\0';
    return ILAB_OK;
}

static ilab_status mock_detokenize(ilab_backend_t *b, const int32_t *tokens, size_t n, char *text,
                                   size_t cap, size_t *len)
{
    if ((!tokens && n) || !len || (!text && cap))
        return fail(b, ILAB_INVALID_ARGUMENT, "detokenize: NULL argument");
    char *s = NULL;
    size_t sl = 0;
    ilab_status st = text_of(b, tokens, n, &s, &sl);
    if (st == ILAB_OK)
        st = copy_out(b, s, sl, text, cap, len);
    free(s);
    return st;
}

/* What the token adds to the text of [prev]: the text of [prev, token]
 * past it, or the token's own text where that is not an extension. */
static ilab_status mock_token_piece(ilab_backend_t *b, int32_t prev, int32_t token, char *piece,
                                    size_t cap, size_t *len)
{
    if (!len || (!piece && cap))
        return fail(b, ILAB_INVALID_ARGUMENT, "token_piece: NULL argument");
    if (prev < -1 || prev >= VOCAB)
        return fail(b, ILAB_INVALID_ARGUMENT, "token_piece: prev_token is not -1 or a valid id");
    int32_t pair[2] = {prev, token};
    char *both = NULL, *alone = NULL;
    size_t nb = 0, na = 0;
    ilab_status st = text_of(b, prev < 0 ? pair + 1 : pair, prev < 0 ? 1 : 2, &both, &nb);
    if (st != ILAB_OK)
        return st;
    st = text_of(b, pair, prev < 0 ? 0 : 1, &alone, &na);
    if (st != ILAB_OK) {
        free(both);
        return st;
    }
    const char *p = both + na;
    size_t pl = nb - na;
    if (na > nb || memcmp(both, alone, na) != 0) {
        free(both);
        st = text_of(b, &token, 1, &both, &nb);
        p = both;
        pl = nb;
    }
#ifdef BREAK_TEXT_PIECE
    char wrong[] = "_";
    if (st == ILAB_OK && token == ' ')
        p = wrong;
#endif
    if (st == ILAB_OK)
        st = copy_out(b, p, pl, piece, cap, len);
    free(both);
    free(alone);
    return st;
}
#else
static ilab_status mock_detokenize(ilab_backend_t *b, const int32_t *tokens, size_t n, char *text,
                                   size_t cap, size_t *len)
{
    if ((!tokens && n) || !len || (!text && cap))
        return fail(b, ILAB_INVALID_ARGUMENT, "detokenize: NULL argument");
    size_t at = 0;
    for (size_t i = 0; i < n; i++) { /* the size first: nothing is written unless it fits */
        char p[4];
        size_t k;
        ilab_status st = piece_of(b, tokens[i], p, &k);
        if (st != ILAB_OK)
            return st;
        at += k;
    }
    *len = at;
    if (at + 1 > cap)
        return fail(b, ILAB_BUFFER_TOO_SMALL, "detokenize: output buffer too small");
    at = 0;
    for (size_t i = 0; i < n; i++) {
        char p[4];
        size_t k = 0; /* piece_of() sets it; GCC -O2 cannot see that through the id check */
        piece_of(b, tokens[i], p, &k);
        memcpy(text + at, p, k);
        at += k;
    }
    text[at] = '\0';
    return ILAB_OK;
}

static ilab_status mock_token_piece(ilab_backend_t *b, int32_t prev, int32_t token, char *piece,
                                    size_t cap, size_t *len)
{
    if (!len || (!piece && cap))
        return fail(b, ILAB_INVALID_ARGUMENT, "token_piece: NULL argument");
    if (prev < -1 || prev >= VOCAB)
        return fail(b, ILAB_INVALID_ARGUMENT, "token_piece: prev_token is not -1 or a valid id");
    char p[4];
    size_t k;
    ilab_status st = piece_of(b, token, p, &k);
    if (st != ILAB_OK)
        return st;
#ifdef BREAK_PIECE
    if (token == ' ')
        p[0] = '_';
#endif
    *len = k;
    if (k + 1 > cap)
        return fail(b, ILAB_BUFFER_TOO_SMALL, "token_piece: output buffer too small");
    memcpy(piece, p, k);
    piece[k] = '\0';
    return ILAB_OK;
}
#endif

/* ---- sequences --------------------------------------------------------- */

#define POOL_BLOCK 4
#define POOL_BLOCKS (MAX_SEQS * MAX_CONTEXT / POOL_BLOCK / 2)
static int32_t pool_used(const ilab_backend_t *b);

static seq_slot *slot_of(ilab_backend_t *b, ilab_seq_t s)
{
    uint32_t i = (uint32_t)(s & 0xFFFF), gen = (uint32_t)(s >> 16);
    if (s == ILAB_SEQ_NONE || i >= MAX_SEQS || !b->seqs[i].used)
        return NULL;
#ifndef BREAK_STALE_HANDLE
    if (b->seqs[i].gen != gen)
        return NULL;
#else
    (void)gen;
#endif
    return &b->seqs[i];
}

static ilab_status mock_seq_create(ilab_backend_t *b, ilab_seq_t *out)
{
    if (!out)
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_create: NULL out");
    for (uint32_t i = 0; i < MAX_SEQS; i++) {
        seq_slot *s = &b->seqs[i];
        if (s->used)
            continue;
        if (!s->tokens)
            s->tokens = malloc(MAX_CONTEXT * sizeof *s->tokens);
        s->used = 1;
        s->len = 0;
        s->leak_to = 0;
#ifndef BREAK_STALE_HANDLE
        s->gen++;
#endif
        *out = ((ilab_seq_t)s->gen << 16) | i;
        return ILAB_OK;
    }
    return fail(b, ILAB_OUT_OF_MEMORY, "no sequence slot left");
}

static ilab_status mock_seq_free(ilab_backend_t *b, ilab_seq_t seq)
{
    seq_slot *s = slot_of(b, seq);
#ifdef BREAK_STATUS_OUT_OF_ENUM
    if (!s)
        return fail(b, (ilab_status)42, "seq_free: no such sequence");
#endif
    if (!s)
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_free: stale or unknown sequence handle");
    s->used = 0;
    return ILAB_OK;
}

static ilab_status mock_seq_fork(ilab_backend_t *b, ilab_seq_t parent, ilab_seq_t *child)
{
#ifdef BREAK_MANIFEST_LIES
    (void)parent; (void)child;
    return fail(b, ILAB_UNSUPPORTED, "seq_fork is not implemented");
#else
    seq_slot *p = slot_of(b, parent);
    if (!p || !child)
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_fork: stale or unknown parent");
    if ((p->len + POOL_BLOCK - 1) / POOL_BLOCK > POOL_BLOCKS - pool_used(b))
        return fail(b, ILAB_OUT_OF_MEMORY, "seq_fork: the KV pool has too few free blocks");
    ilab_seq_t c;
    ilab_status st = mock_seq_create(b, &c);
    if (st != ILAB_OK)
        return st;
    p = slot_of(b, parent);
    seq_slot *cs = slot_of(b, c);
#ifdef BREAK_FORK_LEAK
    cs->leak_to = (int)(p - b->seqs) + 1; /* the child's appends reach the parent */
#endif
    memcpy(cs->tokens, p->tokens, (size_t)p->len * sizeof *p->tokens);
    cs->len = p->len;
    *child = c;
    return ILAB_OK;
#endif
}

__attribute__((unused)) static ilab_status mock_seq_truncate(ilab_backend_t *b, ilab_seq_t seq, int32_t n_keep)
{
    seq_slot *s = slot_of(b, seq);
    /* BREAK_SILENT_FALLBACK: the manifest says truncate: false, yet this works */
    if (!s)
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_truncate: stale or unknown sequence handle");
    if (n_keep < 0 || n_keep > s->len)
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_truncate: n_keep outside [0, length]");
#ifndef BREAK_TRUNCATE_STALE
    s->len = n_keep;
#endif
    return ILAB_OK;
}

__attribute__((unused)) static ilab_status mock_seq_length(ilab_backend_t *b, ilab_seq_t seq, int32_t *length)
{
    seq_slot *s = slot_of(b, seq);
    if (!s || !length)
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_length: stale handle or NULL out");
    *length = s->len;
    return ILAB_OK;
}

/* ---- the KV pool (cache.stats) --------------------------------------------
 * POOL_BLOCKS blocks of POOL_BLOCK positions, half of what every slot at
 * full length would take, so the pool and not the slots runs out first.
 * A sequence holds ceil(len / POOL_BLOCK) blocks of its own (a fork copies). */
static int32_t pool_used(const ilab_backend_t *b)
{
    int32_t used = 0;
    for (int i = 0; i < MAX_SEQS; i++)
        if (b->seqs[i].used)
            used += (b->seqs[i].len + POOL_BLOCK - 1) / POOL_BLOCK;
    return used;
}

static ilab_status mock_cache_stats(ilab_backend_t *b, ilab_cache_stats_t *stats)
{
    if (!stats)
        return fail(b, ILAB_INVALID_ARGUMENT, "cache_stats: NULL stats");
    if (stats->struct_size < sizeof *stats)
        return fail(b, ILAB_ABI_MISMATCH, "cache_stats: struct_size smaller than ABI 1.1's");
    int32_t blocks = POOL_BLOCKS;
#ifdef BREAK_CACHE_STATS
    blocks += 1; /* counts a block the pool does not have */
#endif
    stats->block_size = POOL_BLOCK;
    stats->total_positions = (int64_t)blocks * POOL_BLOCK;
    stats->free_positions = (int64_t)(blocks - pool_used(b)) * POOL_BLOCK;
    return ILAB_OK;
}

/* The "model": a pure function of the history. */
static void logits_of(ilab_backend_t *b, const int32_t *t, int32_t n, float *out)
{
    (void)b;
    double h = 0;
    for (int32_t i = 0; i < n; i++)
        h = h * 0.61 + (double)t[i] * 0.013 + 0.1;
    int32_t last = n ? t[n - 1] : BOS;
    for (int32_t v = 0; v < VOCAB; v++)
        out[v] = (float)(2.0 * sin(0.37 * v + h) + 1.5 * cos(0.011 * v * (last + 1) + 0.2 * n));
    /* it "speaks" ASCII: streamed text never has a code point to split */
    for (int32_t v = 128; v < 256; v++)
        out[v] = -30.0f;
#ifdef BREAK_NAN_LOGITS
    out[VOCAB / 2] = NAN;
#endif
#ifdef BREAK_NONDETERMINISTIC_LOGITS
    out[7] += (float)(b->calls++ % 3) * 0.5f;
#endif
}

static ilab_status mock_eval(ilab_backend_t *b, const ilab_batch_item_t *const *items, size_t n_items)
{
    if (!items || n_items == 0 || n_items > 4)
        return fail(b, ILAB_INVALID_ARGUMENT, "eval: items NULL, empty or more than max_batch 4");
    for (size_t i = 0; i < n_items; i++) {
        const ilab_batch_item_t *it = items[i];
        if (it && it->struct_size < sizeof *it)
            return fail(b, ILAB_ABI_MISMATCH, "eval: item struct_size smaller than ABI 1.0's");
        if (it && !ilab_struct_tail_is_zero(it, sizeof *it))
            return fail(b, ILAB_ABI_MISMATCH, "eval: an item sets a member past ilab_batch_item_t "
                                              "this plugin cannot read");
        if (it && (it->flags & ~(uint32_t)ILAB_EVAL_ALL_LOGITS))
            return fail(b, ILAB_INVALID_ARGUMENT, "eval: unknown item flag bits");
        seq_slot *s = it ? slot_of(b, it->seq) : NULL;
        if (!s || !it->tokens || it->n_tokens < 1)
            return fail(b, ILAB_INVALID_ARGUMENT, "eval: stale handle, NULL tokens or n_tokens < 1");
        for (size_t j = 0; j < i; j++)
            if (items[j]->seq == it->seq)
                return fail(b, ILAB_INVALID_ARGUMENT, "eval: a sequence appears twice");
        for (int32_t k = 0; k < it->n_tokens; k++)
            if (it->tokens[k] < 0 || it->tokens[k] >= VOCAB)
                return fail(b, ILAB_INVALID_ARGUMENT, "eval: token id out of range");
#ifndef BREAK_WRAP
        if (s->len + it->n_tokens > MAX_CONTEXT)
            return fail(b, ILAB_CONTEXT_OVERFLOW, "eval: the sequence would pass max_context 64");
#endif
    }
    int32_t more = 0;
    for (size_t i = 0; i < n_items; i++) {
        const seq_slot *s = slot_of(b, items[i]->seq);
        int32_t end = s->len + items[i]->n_tokens;
        end = end > MAX_CONTEXT ? MAX_CONTEXT : end; /* BREAK_WRAP */
        more += (end + POOL_BLOCK - 1) / POOL_BLOCK - (s->len + POOL_BLOCK - 1) / POOL_BLOCK;
    }
    if (more > POOL_BLOCKS - pool_used(b))
        return fail(b, ILAB_OUT_OF_MEMORY, "eval: the KV pool has too few free blocks");
    for (size_t i = 0; i < n_items; i++) {
        const ilab_batch_item_t *it = items[i];
        seq_slot *s = slot_of(b, it->seq);
#ifdef BREAK_DECODE_CRASH
        if (s->len > 0 && it->n_tokens == 1)
            *(volatile int *)0 = 1;
#endif
#ifdef BREAK_DECODE_HANG
        if (s->len > 0 && it->n_tokens == 1)
            for (;;)
                pause();
#endif
        int32_t first = 0;
#ifdef BREAK_CHUNK
        if (s->len > 0 && it->n_tokens > 1)
            first = 1; /* forgets the first token of a later chunk */
#endif
        for (int32_t k = first; k < it->n_tokens; k++)
            s->tokens[(s->len++) % MAX_CONTEXT] = it->tokens[k];
        if (s->leak_to && b->seqs[s->leak_to - 1].used) {
            seq_slot *p = &b->seqs[s->leak_to - 1];
            for (int32_t k = 0; k < it->n_tokens && p->len < MAX_CONTEXT; k++)
                p->tokens[p->len++] = it->tokens[k];
        }
        int perturb = 0;
#ifdef BREAK_INTERLEAVE
        /* state left over from whichever sequence ran last */
        perturb = it->seq != b->last_seq && s->len > it->n_tokens;
        b->last_seq = it->seq;
#endif
        if (s->len > MAX_CONTEXT)
            s->len = MAX_CONTEXT; /* BREAK_WRAP: a ring, silently */
        if (!it->logits)
            continue;
        int32_t rows = (it->flags & ILAB_EVAL_ALL_LOGITS) ? it->n_tokens : 1;
        for (int32_t r = 0; r < rows; r++) {
            int32_t upto = s->len - (rows - 1 - r);
#ifdef BREAK_THREAD_RACE
            /* "scratch" shared by every sequence, without a lock */
            (void)upto;
            b->current = s;
            usleep(2000);
            logits_of(b, b->current->tokens, b->current->len - (rows - 1 - r), it->logits + (size_t)r * VOCAB);
#else
            logits_of(b, s->tokens, upto, it->logits + (size_t)r * VOCAB);
#endif
            if (perturb)
                it->logits[(size_t)r * VOCAB + 11] += 0.5f;
#ifdef BREAK_CACHE_DRIFT
            if (it->n_tokens == 1 && s->len > 1)
                it->logits[(size_t)r * VOCAB + 3] += 0.01f * (float)s->len;
#endif
#ifdef BREAK_CACHE_DRIFT_TAIL
            /* A small fixed drift (1e-3, ten times the tolerance, too
             * small to move the argmax) on the vocabulary's last token
             * only: a check that compares part of the logits misses it. */
            if (it->n_tokens == 1 && s->len > 1)
                it->logits[(size_t)r * VOCAB + VOCAB - 1] += 1e-3f;
#endif
#ifdef BREAK_BATCH
            if (n_items > 1)
                it->logits[(size_t)r * VOCAB + 5] += 0.25f;
#endif
#ifdef BREAK_DIFF
            it->logits[(size_t)r * VOCAB + (size_t)(s->len * 7 % VOCAB)] += 6.0f;
#endif
        }
    }
    return ILAB_OK;
}

#ifdef MOCK_BACKEND_SAMPLING
/* ---- backend-owned sampling: HF order (repetition penalty, temperature,
 * top-k, top-p, min-p), splitmix64 seeded per request ------------------- */

static uint64_t mix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int by_desc(const void *a, const void *b)
{
    const double *x = a, *y = b; /* pairs {value, id} */
    return x[0] < y[0] ? 1 : x[0] > y[0] ? -1 : (x[1] > y[1]) - (x[1] < y[1]);
}

static int32_t sample(const float *logits, const int32_t *hist, int32_t n_hist, const ilab_sampling_t *sp,
                      uint64_t *rng, float *logprob)
{
    static double pairs[VOCAB][2];
    double l[VOCAB];
    /* logprobs are of the raw logits, whatever the processors do (SMP-6) */
    double raw_max = logits[0], raw_sum = 0;
    for (int32_t v = 1; v < VOCAB; v++)
        raw_max = logits[v] > raw_max ? logits[v] : raw_max;
    for (int32_t v = 0; v < VOCAB; v++)
        raw_sum += exp(logits[v] - raw_max);
    double raw_lse = raw_max + log(raw_sum);
    for (int32_t v = 0; v < VOCAB; v++) {
        l[v] = logits[v];
        if (sp->repetition_penalty != 1.0f)
            for (int32_t i = 0; i < n_hist; i++)
                if (hist[i] == v) {
                    l[v] = l[v] > 0 ? l[v] / sp->repetition_penalty : l[v] * sp->repetition_penalty;
                    break;
                }
    }
    int32_t best = 0;
    for (int32_t v = 1; v < VOCAB; v++)
        if (l[v] > l[best])
            best = v;
    double T = sp->temperature;
#ifdef BREAK_WRONG_TEMPERATURE
    T = T * T;
#endif
#ifdef BREAK_GREEDY_SEEDED
    if (T <= 0 && (sp->seed & 1))
        T = 1.0;
#endif
    if (T <= 0) {
        *logprob = (float)(logits[best] - raw_lse);
        return best;
    }
#ifdef BREAK_ORDER
    T = 1.0; /* temperature "applied" after the filters: they see the wrong distribution */
#endif
    for (int32_t v = 0; v < VOCAB; v++) {
        pairs[v][0] = l[v] / T;
        pairs[v][1] = v;
    }
    qsort(pairs, VOCAB, sizeof pairs[0], by_desc);
    int32_t k = VOCAB;
#ifndef BREAK_TOPK_IGNORED
    if (sp->top_k > 0 && sp->top_k < VOCAB)
        k = sp->top_k;
#endif
    double sum = 0;
    for (int32_t i = 0; i < k; i++)
        sum += exp(pairs[i][0] - pairs[0][0]);
    double cum = 0;
    int32_t kept = k;
    for (int32_t i = 0; i < k; i++) {
        cum += exp(pairs[i][0] - pairs[0][0]) / sum;
        if (sp->top_p < 1.0f && cum >= sp->top_p) {
            kept = i + 1;
            break;
        }
    }
    double pmax = 1.0 / sum;
    int32_t n = 0;
    double total = 0;
    for (int32_t i = 0; i < kept; i++) {
        double p = exp(pairs[i][0] - pairs[0][0]) / sum;
        if (sp->min_p > 0 && p < sp->min_p * pmax)
            break;
        total += p;
        n = i + 1;
    }
    if (n == 0)
        n = 1, total = pmax;
    double u = (double)(mix(rng) >> 11) * 0x1.0p-53 * total, acc = 0;
    for (int32_t i = 0; i < n; i++) {
        acc += exp(pairs[i][0] - pairs[0][0]) / sum;
        if (u < acc || i == n - 1) {
            *logprob = (float)(logits[(int32_t)pairs[i][1]] - raw_lse);
            return (int32_t)pairs[i][1];
        }
    }
    *logprob = (float)(logits[best] - raw_lse);
    return best;
}

/* A refused request still gets its one ERROR event (STR-9). */
static ilab_status refuse(ilab_backend_t *b, const ilab_generate_request_t *r, ilab_event_fn fn, void *user,
                          ilab_status st, const char *message)
{
    fail(b, st, message);
    ilab_event_t ev;
    memset(&ev, 0, sizeof ev);
    ev.struct_size = sizeof ev;
    ev.type = ILAB_EVENT_ERROR;
    ev.request_id = r->request_id;
    ev.finish_reason = ILAB_FINISH_ERROR;
    ev.status = st;
    ev.message = message;
    fn(user, &ev);
    return st;
}

static bool is_stop_id(const ilab_generate_request_t *r, int32_t t)
{
    for (size_t i = 0; i < r->n_stop_token_ids; i++)
        if (r->stop_token_ids[i] == t)
            return true;
    return false;
}

static ilab_status mock_generate(ilab_backend_t *b, const ilab_generate_request_t *r, ilab_event_fn fn,
                                 void *user)
{
    if (!r || !fn)
        return fail(b, ILAB_INVALID_ARGUMENT, "generate: NULL request or callback");
    if (r->struct_size < ILAB_GENERATE_REQUEST_SIZE_1_0) {
        /* Too short to read even its request id: answered as request 0. */
        const ilab_generate_request_t unread = {.struct_size = r->struct_size};
        return refuse(b, &unread, fn, user, ILAB_ABI_MISMATCH,
                      "generate: a request struct_size below ABI 1.0's");
    }
    if (!r->prompt_tokens || r->n_prompt_tokens == 0 || r->max_tokens <= 0)
        return refuse(b, r, fn, user, ILAB_INVALID_ARGUMENT, "generate: empty prompt or max_tokens <= 0");
    if (r->n_prompt_tokens > MAX_CONTEXT)
        return refuse(b, r, fn, user, ILAB_CONTEXT_OVERFLOW,
                      "generate: the prompt is longer than max_context 64 (STR-3)");
    if (!r->sampling || r->sampling->struct_size < sizeof *r->sampling ||
        !ilab_struct_tail_is_zero(r->sampling, sizeof *r->sampling))
        return refuse(b, r, fn, user, ILAB_ABI_MISMATCH,
                      "generate: no sampling parameters, or a struct_size this plugin cannot read");
    if (r->sampling->presence_penalty != 0.0f || r->sampling->frequency_penalty != 0.0f)
        return refuse(b, r, fn, user, ILAB_UNSUPPORTED,
                      "generate: presence/frequency penalties are not implemented by this plugin");
    const ilab_sampling_t *sp = r->sampling;
    if (!isfinite(sp->temperature) || sp->temperature < 0.0f || sp->top_k < 0 ||
        !(sp->top_p > 0.0f && sp->top_p <= 1.0f) || !(sp->min_p >= 0.0f && sp->min_p <= 1.0f) ||
        !(sp->repetition_penalty > 0.0f) || !isfinite(sp->repetition_penalty))
        return refuse(b, r, fn, user, ILAB_INVALID_ARGUMENT,
                      "generate: temperature, top_k, top_p, min_p or repetition_penalty is outside "
                      "its range (SMP-5)");
    if (r->n_prompt_tokens + (size_t)r->max_tokens > MAX_CONTEXT + 256)
        return refuse(b, r, fn, user, ILAB_INVALID_ARGUMENT, "generate: request too long");
    if (r->top_logprobs < 0 || r->top_logprobs > atoi(CAP_TOPK)) /* SMP-7: refused, never clamped */
        return refuse(b, r, fn, user, ILAB_INVALID_ARGUMENT,
                      "generate: top_logprobs is negative or above topk_max " CAP_TOPK);
    for (size_t i = 0; i < r->n_prompt_tokens; i++)
        if (r->prompt_tokens[i] < 0 || r->prompt_tokens[i] >= VOCAB)
            return refuse(b, r, fn, user, ILAB_INVALID_ARGUMENT, "generate: prompt token out of range");
    for (size_t i = 0; i < r->n_stop_token_ids; i++)
        if (!r->stop_token_ids || r->stop_token_ids[i] < 0 || r->stop_token_ids[i] >= VOCAB)
            return refuse(b, r, fn, user, ILAB_INVALID_ARGUMENT, "generate: stop token id out of range");
    int32_t hist[MAX_CONTEXT + 512];
    int32_t n = (int32_t)r->n_prompt_tokens;
    memcpy(hist, r->prompt_tokens, (size_t)n * sizeof *hist);
    char text[1024];
    size_t all = 0, sent = 0, maxstop = 0;
    for (size_t i = 0; i < r->n_stop; i++)
        if (strlen(r->stop[i]) > maxstop)
            maxstop = strlen(r->stop[i]);
    uint64_t rng = r->sampling->seed;
#ifdef BREAK_UNSEEDED
    static uint64_t drift;
    rng += ++drift;
#endif
    atomic_store(&b->cancel_id, 0);
    ilab_event_t ev;
    float logits[VOCAB];
    ilab_finish_reason why = ILAB_FINISH_LENGTH;
    bool by_stop_string = false;
    uint32_t emitted = 0;
    for (int32_t step = 0; step < r->max_tokens; step++) {
        if (n >= MAX_CONTEXT) {
            why = ILAB_FINISH_LENGTH;
            break;
        }
#ifndef BREAK_CANCEL_IGNORED
        if (atomic_load(&b->cancel_id) == r->request_id) {
            why = ILAB_FINISH_CANCELLED;
            break;
        }
#endif
        logits_of(b, hist, n, logits);
        float lp = 0;
        int32_t t = sample(logits, hist, n, r->sampling, &rng, &lp);
        if ((t == EOS && !r->ignore_eos) || is_stop_id(r, t)) {
            why = ILAB_FINISH_STOP;
            break;
        }
        hist[n++] = t;
        if (t < 256 && all < sizeof text)
            text[all++] = (char)t;
        size_t upto = all, stop_at = (size_t)-1;
        for (size_t i = 0; i < r->n_stop; i++) {
            const char *hit = memmem(text, all, r->stop[i], strlen(r->stop[i]));
            if (hit && (size_t)(hit - text) < stop_at)
                stop_at = (size_t)(hit - text);
        }
#ifndef BREAK_STOP_UNTRIMMED
        if (stop_at != (size_t)-1)
            upto = stop_at;
        else
#endif
        /* the last token is known (max_tokens, the context full): nothing held (STR-7) */
        if (maxstop > 1 && step + 1 < r->max_tokens && n < MAX_CONTEXT)
            upto = all > maxstop - 1 ? all - (maxstop - 1) : 0;
        if (upto < sent)
            upto = sent;
        memset(&ev, 0, sizeof ev);
        ev.struct_size = sizeof ev;
        ev.type = ILAB_EVENT_TOKEN;
        ev.request_id = r->request_id;
        ev.token = t;
        ev.text = text + sent;
        ev.text_len = upto - sent;
#ifdef BREAK_TEXT_MISMATCH
        if (step == 0 && ev.text_len == 1)
            ev.text = "#"; /* the first token's text is not its piece */
#endif
        sent = upto;
        ev.logprob = lp;
        ilab_logprob_t top[5];
        if (r->top_logprobs > 0) {
            float tmp[VOCAB];
            memcpy(tmp, logits, sizeof tmp);
            double mx = tmp[0], sum = 0;
            for (int32_t v = 1; v < VOCAB; v++)
                if (tmp[v] > mx)
                    mx = tmp[v];
            for (int32_t v = 0; v < VOCAB; v++)
                sum += exp(tmp[v] - mx);
            int32_t k = r->top_logprobs < 5 ? r->top_logprobs : 5;
            for (int32_t i = 0; i < k; i++) {
                int32_t best = 0;
                for (int32_t v = 1; v < VOCAB; v++)
                    if (tmp[v] > tmp[best])
                        best = v;
                top[i].token = best;
                top[i].logprob = (float)(tmp[best] - mx - log(sum));
                tmp[best] = -INFINITY;
            }
#ifdef BREAK_TOPK_UNSORTED
            ilab_logprob_t swap = top[0];
            top[0] = top[k - 1];
            top[k - 1] = swap;
#endif
            ev.top_logprobs = top;
            ev.n_top_logprobs = (uint32_t)k;
        }
        emitted++;
        int stop_asked = fn ? fn(user, &ev) : 0;
        if (stop_at != (size_t)-1) {
            why = ILAB_FINISH_STOP;
            by_stop_string = true;
            break;
        }
#ifndef BREAK_CANCEL_IGNORED
        if (stop_asked) {
            why = ILAB_FINISH_CANCELLED;
            break;
        }
#else
        (void)stop_asked;
#endif
    }
    memset(&ev, 0, sizeof ev);
    ev.struct_size = sizeof ev;
    ev.type = ILAB_EVENT_FINISH;
    ev.request_id = r->request_id;
#ifdef BREAK_FINISH_REASON
    if (why == ILAB_FINISH_LENGTH)
        why = ILAB_FINISH_STOP;
#endif
    ev.finish_reason = why;
    if (why != ILAB_FINISH_CANCELLED && !by_stop_string) { /* held bytes are never lost (STR-2) */
        ev.text = text + sent;
        ev.text_len = all - sent;
    }
    ev.prompt_tokens = (uint32_t)r->n_prompt_tokens;
    ev.completion_tokens = emitted;
#ifdef BREAK_USAGE
    ev.completion_tokens = emitted + 1;
#endif
#ifdef BREAK_NO_FINISH
    return ILAB_OK; /* the stream just stops: no terminal event */
#endif
    if (fn)
        fn(user, &ev);
#ifdef BREAK_EMIT_AFTER_FINISH
    ev.type = ILAB_EVENT_TOKEN;
    ev.text = "!";
    ev.text_len = 1;
    if (fn)
        fn(user, &ev);
#endif
    return ILAB_OK;
}

static ilab_status mock_cancel(ilab_backend_t *b, uint64_t id)
{
    atomic_store(&b->cancel_id, id);
    return ILAB_OK;
}
#elif defined(MOCK_NULL_UNDECLARED)
/* generate and cancel are not declared and left NULL: the host's shims
 * answer for them (docs/adr/0022), and the harness must accept that. */
#else
static ilab_status mock_generate(ilab_backend_t *b, const ilab_generate_request_t *r, ilab_event_fn fn,
                                 void *user)
{
    (void)r; (void)fn; (void)user;
    return fail(b, ILAB_UNSUPPORTED, "generate: sampling: backend not declared (the host samples)");
}

static ilab_status mock_cancel(ilab_backend_t *b, uint64_t id)
{
    (void)id;
    return fail(b, ILAB_UNSUPPORTED, "cancel: capability cancel not declared");
}
#endif

#ifdef BREAK_UNDEFINED_SYMBOL
extern int ilab_mock_symbol_nobody_defines(void);
static ilab_status mock_truncate_undefined(ilab_backend_t *b, ilab_seq_t s, int32_t n)
{
    (void)b; (void)s;
    return ilab_mock_symbol_nobody_defines() + n ? ILAB_OK : ILAB_INTERNAL;
}
#define TRUNCATE_FN mock_truncate_undefined
#else
#define TRUNCATE_FN mock_seq_truncate
#endif

static const ilab_backend_api_t api = {
    .struct_size = sizeof(ilab_backend_api_t),
    .probe = mock_probe,
    .create = mock_create,
    .destroy = mock_destroy,
    .last_error = mock_last_error,
    .model_info = mock_model_info,
    .tokenize = mock_tokenize,
    .detokenize = mock_detokenize,
    .token_piece = mock_token_piece,
    .seq_create = mock_seq_create,
    .seq_free = mock_seq_free,
    .seq_fork = mock_seq_fork,
    .seq_truncate = TRUNCATE_FN,
#ifdef BREAK_NULL_MEMBER
    .seq_length = NULL,
#else
    .seq_length = mock_seq_length,
#endif
    .eval = mock_eval,
#ifdef MOCK_NULL_UNDECLARED
    .generate = NULL,
    .cancel = NULL,
#else
    .generate = mock_generate,
    .cancel = mock_cancel,
#endif
    .cache_stats = mock_cache_stats,
};

#if defined(MOCK_NULL_UNDECLARED) && defined(MOCK_BACKEND_SAMPLING)
#error "MOCK_NULL_UNDECLARED leaves generate and cancel NULL: not with sampling: backend"
#endif

#ifdef BREAK_NO_ENTRY
/* misspelt: the version script hides it, so no bootstrap symbol is exported */
#define ilab_plugin_entry ilab_plugin_entri
#endif
ILAB_PLUGIN_EXPORT const ilab_plugin_entry_t ilab_plugin_entry = {
    .struct_size = sizeof(ilab_plugin_entry_t),
    .abi_major = MOCK_ABI_MAJOR,
    .abi_minor = 1, /* cache.stats is ABI 1.1's; a number, never ILAB_ABI_MINOR (ADR 0022) */
    .name = MOCK_NAME,
    .version = "0.1.0",
    .manifest_yaml = manifest,
    .backend = &api,
};
