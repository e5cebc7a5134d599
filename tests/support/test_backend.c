/* test_backend — the test-only plugin of the runtime and server tests.
 *
 * One source, built as two plugins that differ only in the profile below
 * (the manifest's limits, token ids and logits are facts the tests check):
 *
 *   counting_backend (default profile) — logits are a hash of the WHOLE
 *     sequence so far, so a scheduler that mixed up two sequences' tokens in
 *     a batch, skipped a token or fed one twice would get different logits,
 *     and different tokens. Ids: BOS 1, EOS 2, byte b = 3 + b. max_batch 8
 *     (the engine must cap its running batch), thread_safety: none.
 *   pool_backend (-DTEST_BACKEND_POOL) — counting's logits, plus cache.fork
 *     and cache.truncate (the prefix cache's needs; truncate recomputes the
 *     hash, so a wrong truncation changes the logits). max_batch 16,
 *     thread_safety: none.
 *   stats_backend (-DTEST_BACKEND_POOL -DTEST_BACKEND_STATS) — pool_backend
 *     plus cache.stats (ABI 1.1): cache_stats() reports the pool, so the
 *     engine admits by capacity and reports the pool's real usage.
 *   paced_backend (-DTEST_BACKEND_PACED) — logits depend only on the last
 *     two tokens and favour printable ASCII, so text stays one byte a token
 *     and a sequence decoded in a batch gets exactly the logits it gets
 *     alone. Ids: byte b = b, BOS 256, EOS 257. max_batch 64,
 *     thread_safety: full.
 *
 * The reload tests (tests/server) build the paced profile as versions of one
 * plugin: PLUGIN_NAME, MODEL_NAME, PLUGIN_VERSION and LOGIT_SALT (which
 * changes every logit, so two versions write different text) may be given;
 * MANIFEST_VERSION different from PLUGIN_VERSION makes a plugin the loader
 * refuses (its manifest disagrees with its entry).
 *
 * All tokenizers are byte-level, so UTF-8 hold-back is exercised by any
 * multi-byte text.
 *
 * Config (both profiles):
 *   step_ms     int    milliseconds each eval() sleeps (default 0): streams
 *                      still running when a client hangs up, queues that fill
 *   eos_bias    float  added to EOS's logit (default -100: never ends early)
 *   fail_after  int    eval() fails with ILAB_INTERNAL after this many calls
 *                      (0 = never)
 *   fail_token  int    eval() fails with ILAB_INTERNAL when an item holds this
 *                      token id (-1 = never): one bad request in a batch
 *   fault       string what eval() call number fault_after + 1 does instead of
 *                      evaluating: "segv" (a NULL write), "abort", "exit"
 *                      (exit(3)), "hang" (sleeps forever); "none" (default).
 *                      A plugin bug the host must survive (host/isolation).
 *   fault_after int    eval() calls that run normally before the fault
 *   kv_blocks   int    a KV pool of this many blocks of 16 positions (0 =
 *                      unlimited); every sequence, forks too, holds
 *                      ceil(length / 16) blocks of its own, and an eval()
 *                      that needs more than are free fails with
 *                      ILAB_OUT_OF_MEMORY (all-or-nothing)
 *
 * With thread_safety: none, every backend call checks that no other call is
 * running and fails with ILAB_INTERNAL if one is: a host that breaks the
 * contract sees errors, not silent corruption. Not shipped: each test suite
 * builds it under its own build directory. */
#include <inferlab/inferlab.h>

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef TEST_BACKEND_PACED
#ifndef PLUGIN_NAME /* the reload tests build the paced profile under other names */
#define PLUGIN_NAME "paced_backend"
#endif
#ifndef MODEL_NAME
#define MODEL_NAME "paced-bigram"
#endif
#define BYTE0 0
#define BOS 256
#define EOS 257
#define VOCAB 258
#define MAX_CONTEXT 2048
#define MAX_BATCH 64
#define MAX_SEQS 128
#define TOPK_MAX "20"
#define THREAD_SAFETY "full"
#define EXCLUSIVE false
#ifdef DESCRIPTION_INJECTION /* tests/ui: markup in a manifest must show as text */
#define DESCRIPTION "'<img src=x onerror=\"window.__pwned=1\"><script>window.__pwned=2</script>" \
                    "<b id=\"injected\">bold</b> & done'"
#else
#define DESCRIPTION "Test-only byte-level bigram model whose steps can be slowed down."
#endif
#elif defined(TEST_BACKEND_POOL)
#ifdef TEST_BACKEND_STATS
#define PLUGIN_NAME "stats_backend"
#define CACHE_STATS "true"
#define HAS_STATS 1
#define ABI "1.1"
#define ABI_MINOR 1
#else
#define PLUGIN_NAME "pool_backend"
#endif
#define MODEL_NAME "counting"
#define BYTE0 3
#define BOS 1
#define EOS 2
#define VOCAB 259
#define MAX_CONTEXT 512
#define MAX_BATCH 16
#define MAX_SEQS 64
#define TOPK_MAX "8"
#define THREAD_SAFETY "none"
#define EXCLUSIVE true
#define CACHE_OPS "true"
#define DESCRIPTION "Test backend with a small KV pool, fork and truncate."
#else
#define PLUGIN_NAME "counting_backend"
#define MODEL_NAME "counting"
#define BYTE0 3
#define BOS 1
#define EOS 2
#define VOCAB 259
#define MAX_CONTEXT 512
#define MAX_BATCH 8
#define MAX_SEQS 64
#define TOPK_MAX "8"
#define THREAD_SAFETY "none"
#define EXCLUSIVE true
#define DESCRIPTION "Test backend whose logits hash the whole sequence."
#endif
#ifndef CACHE_OPS
#define CACHE_OPS "false"
#endif
#ifndef PLUGIN_VERSION
#define PLUGIN_VERSION "0.2.0"
#endif
#ifndef MANIFEST_VERSION
#define MANIFEST_VERSION PLUGIN_VERSION
#endif
#ifndef LOGIT_SALT
#define LOGIT_SALT 0
#endif
#ifndef CACHE_STATS
#define CACHE_STATS "false"
#endif
#ifndef ABI
#define ABI "1.0" /* cache.stats needs 1.1; the others need nothing newer than 1.0 */
#define ABI_MINOR 0
#define HAS_STATS 0
#endif
#define KV_BLOCK 16

#define STR_(x) #x
#define STR(x) STR_(x)

static const char manifest[] =
    "name: " PLUGIN_NAME "\n"
    "version: " MANIFEST_VERSION "\n"
    "abi: " ABI "\n"
    "description: " DESCRIPTION "\n"
    "capabilities:\n"
    "  tokenizer: true\n"
    "  logits: full\n"
    "  topk_max: " TOPK_MAX "\n"
    "  sampling: host\n"
    "  cache: {fork: " CACHE_OPS ", truncate: " CACHE_OPS ", stats: " CACHE_STATS "}\n"
    "  batching: {max_batch: " STR(MAX_BATCH) "}\n"
    "  streaming: false\n"
    "  cancel: false\n"
    "  max_context: " STR(MAX_CONTEXT) "\n"
    "  thread_safety: " THREAD_SAFETY "\n"
    "config:\n"
    "  step_ms:\n"
    "    type: int\n"
    "    default: 0\n"
    "    description: Milliseconds each eval() call sleeps.\n"
    "  eos_bias:\n"
    "    type: float\n"
    "    default: -100\n"
    "    description: Added to the EOS logit.\n"
    "  fail_after:\n"
    "    type: int\n"
    "    default: 0\n"
    "    description: eval() fails after this many calls; 0 = never.\n"
    "  fail_token:\n"
    "    type: int\n"
    "    default: -1\n"
    "    description: eval() fails when an item holds this token id; -1 = never.\n"
    "  fault:\n"
    "    type: string\n"
    "    default: none\n"
    "    description: What eval() does after fault_after calls (none, segv, abort, exit, hang).\n"
    "  fault_after:\n"
    "    type: int\n"
    "    default: 0\n"
    "    description: eval() calls that run normally before the fault.\n"
    "  kv_blocks:\n"
    "    type: int\n"
    "    default: 0\n"
    "    description: KV pool size in blocks of 16 positions; 0 = unlimited.\n";

typedef struct sequence {
    uint32_t generation;
    int in_use;
    int32_t len;
    uint64_t hash;                /* of every token so far (counting) */
    int32_t tokens[MAX_CONTEXT];  /* the last two feed the bigram (paced) */
} sequence;

struct ilab_backend {
    long step_ms;
    float eos_bias;
    long fail_after;
    long fail_token;
    long kv_blocks;
    char fault[8];
    long fault_after;
    long evals;
    atomic_int inside;            /* backend calls running right now */
    pthread_mutex_t mu;           /* guards seqs and evals (thread_safety: full) */
    sequence *seqs;               /* MAX_SEQS */
    ilab_last_error_t error;
};

static ilab_status fail(ilab_backend_t *b, ilab_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static ilab_status fail(ilab_backend_t *b, ilab_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ilab_last_error_setv(b ? &b->error : NULL, st, fmt, ap);
    va_end(ap);
    return st;
}

/* Every call but last_error() is bracketed by enter()/leave(). */
static ilab_status enter(ilab_backend_t *b, const char *call)
{
    int already = atomic_fetch_add(&b->inside, 1);
    if (EXCLUSIVE && already > 0)
        return fail(b, ILAB_INTERNAL, "%s: called while another call was running "
                    "(thread_safety: none)", call);
    return ILAB_OK;
}

static void leave(ilab_backend_t *b)
{
    atomic_fetch_sub(&b->inside, 1);
}

static uint64_t mix(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

#ifdef TEST_BACKEND_PACED
static uint32_t mix32(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    x ^= x >> 16;
    return x;
}

/* Printable ASCII gets hashed scores in [0, 4); everything else, EOS
 * included, is very unlikely, so text stays readable and streams run long. */
static void logits_for(const ilab_backend_t *b, const sequence *s, float *out)
{
    int32_t prev = s->len > 1 ? s->tokens[s->len - 2] : -1, cur = s->tokens[s->len - 1];
    for (int32_t v = 0; v < VOCAB; v++) {
        bool printable = v == ' ' || (v >= 'a' && v <= 'z') || v == '.' || v == ',';
        uint32_t h = mix32(((uint32_t)(prev + 1) + LOGIT_SALT) * 0x9E3779B1u ^
                           mix32((uint32_t)cur * 0x85EBCA77u ^ (uint32_t)v));
        out[v] = printable ? (float)(h % 4000u) / 1000.0f : -20.0f;
    }
    out[EOS] += b->eos_bias;
}
#else
static void logits_for(const ilab_backend_t *b, const sequence *s, float *out)
{
    for (int v = 0; v < VOCAB; v++)
        out[v] = (float)(mix(s->hash ^ ((uint64_t)v * 0x100000001b3ull)) >> 40) /
                     (float)(1 << 24) * 8.0f - 4.0f;
    out[0] = -100.0f; /* <unk> */
    out[BOS] = -100.0f;
    out[EOS] += b->eos_bias;
}
#endif

static ilab_status cb_probe(const ilab_host_t *host, const ilab_config_entry_t *config, size_t n,
                            char *reason, size_t cap)
{
    (void)host;
    (void)config;
    (void)n;
    if (reason && cap)
        reason[0] = '\0';
    return ILAB_OK;
}

static ilab_status cb_create(const ilab_host_t *host, const ilab_config_entry_t *config, size_t n,
                             char *error, size_t cap, ilab_backend_t **out)
{
    (void)host;
    if (!out) {
        snprintf(error, cap, "create: out is NULL");
        return ILAB_INVALID_ARGUMENT;
    }
    ilab_backend_t *b = calloc(1, sizeof *b);
    if (b)
        b->seqs = calloc(MAX_SEQS, sizeof *b->seqs);
    if (!b || !b->seqs) {
        free(b);
        snprintf(error, cap, "create: out of memory");
        return ILAB_OUT_OF_MEMORY;
    }
    b->eos_bias = -100.0f;
    b->fail_token = -1;
    for (size_t i = 0; i < n; i++) {
        if (!config[i].key || !config[i].value)
            continue;
        if (!strcmp(config[i].key, "step_ms"))
            b->step_ms = strtol(config[i].value, NULL, 10);
        else if (!strcmp(config[i].key, "eos_bias"))
            b->eos_bias = strtof(config[i].value, NULL);
        else if (!strcmp(config[i].key, "fail_after"))
            b->fail_after = strtol(config[i].value, NULL, 10);
        else if (!strcmp(config[i].key, "fail_token"))
            b->fail_token = strtol(config[i].value, NULL, 10);
        else if (!strcmp(config[i].key, "fault"))
            snprintf(b->fault, sizeof b->fault, "%s", config[i].value);
        else if (!strcmp(config[i].key, "fault_after"))
            b->fault_after = strtol(config[i].value, NULL, 10);
        else if (!strcmp(config[i].key, "kv_blocks"))
            b->kv_blocks = strtol(config[i].value, NULL, 10);
    }
    if (b->fault[0] && strcmp(b->fault, "none") && strcmp(b->fault, "segv") &&
        strcmp(b->fault, "abort") && strcmp(b->fault, "exit") && strcmp(b->fault, "hang")) {
        snprintf(error, cap, "create: fault '%s' is not one of none, segv, abort, exit, hang",
                 b->fault);
        free(b->seqs);
        free(b);
        return ILAB_INVALID_ARGUMENT;
    }
    atomic_init(&b->inside, 0);
    pthread_mutex_init(&b->mu, NULL);
    ilab_last_error_init(&b->error);
    *out = b;
    return ILAB_OK;
}

static void cb_destroy(ilab_backend_t *b)
{
    if (!b)
        return;
    ilab_last_error_destroy(&b->error);
    pthread_mutex_destroy(&b->mu);
    free(b->seqs);
    free(b);
}

static size_t cb_last_error(const ilab_backend_t *b, char *buf, size_t cap)
{
    return ilab_last_error_copy(b ? &b->error : NULL, buf, cap);
}

static ilab_status model_info(ilab_backend_t *b, ilab_model_info_t *info)
{
    if (!info)
        return fail(b, ILAB_INVALID_ARGUMENT, "model_info: info is NULL");
    ilab_model_info_t m;
    memset(&m, 0, sizeof m);
    m.struct_size = sizeof m;
    m.vocab_size = VOCAB;
    m.bos_id = BOS;
    m.eos_id = EOS;
    m.max_context = MAX_CONTEXT;
    snprintf(m.name, sizeof m.name, "%s", MODEL_NAME);
    size_t n = info->struct_size < sizeof m ? info->struct_size : sizeof m;
    memcpy((char *)info + sizeof m.struct_size, (char *)&m + sizeof m.struct_size,
           n - sizeof m.struct_size);
    return ILAB_OK;
}

static ilab_status tokenize(ilab_backend_t *b, const char *text, size_t len, uint32_t flags,
                            int32_t *tokens, size_t cap, size_t *n_tokens)
{
    if ((!text && len) || !n_tokens)
        return fail(b, ILAB_INVALID_ARGUMENT, "tokenize: NULL argument");
    size_t need = len + ((flags & ILAB_TOKENIZE_ADD_BOS) ? 1 : 0) +
                  ((flags & ILAB_TOKENIZE_ADD_EOS) ? 1 : 0);
    if (cap < need || !tokens) {
        *n_tokens = need;
        return fail(b, ILAB_BUFFER_TOO_SMALL, "tokenize: %zu tokens need room, %zu given",
                    need, cap);
    }
    size_t k = 0;
    if (flags & ILAB_TOKENIZE_ADD_BOS)
        tokens[k++] = BOS;
    for (size_t i = 0; i < len; i++)
        tokens[k++] = BYTE0 + (unsigned char)text[i];
    if (flags & ILAB_TOKENIZE_ADD_EOS)
        tokens[k++] = EOS;
    *n_tokens = k;
    return ILAB_OK;
}

static bool is_byte(int32_t token)
{
    return token >= BYTE0 && token < BYTE0 + 256;
}

static ilab_status token_piece(ilab_backend_t *b, int32_t token, char *piece, size_t cap,
                               size_t *len)
{
    if (!len || token < 0 || token >= VOCAB)
        return fail(b, ILAB_INVALID_ARGUMENT, "token_piece: token %d out of range", token);
    size_t n = is_byte(token) ? 1 : 0;
    *len = n;
    if (!piece || cap < n + 1)
        return fail(b, ILAB_BUFFER_TOO_SMALL, "token_piece: need %zu bytes", n + 1);
    if (n)
        piece[0] = (char)(token - BYTE0);
    piece[n] = '\0';
    return ILAB_OK;
}

static ilab_status detokenize(ilab_backend_t *b, const int32_t *tokens, size_t n, char *text,
                              size_t cap, size_t *len)
{
    if (!len || (!tokens && n))
        return fail(b, ILAB_INVALID_ARGUMENT, "detokenize: NULL argument");
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] >= VOCAB)
            return fail(b, ILAB_INVALID_ARGUMENT, "detokenize: token %d is out of range",
                        tokens[i]);
        if (is_byte(tokens[i]))
            k++;
    }
    *len = k;
    if (!text || cap < k + 1)
        return fail(b, ILAB_BUFFER_TOO_SMALL, "detokenize: need %zu bytes", k + 1);
    k = 0;
    for (size_t i = 0; i < n; i++)
        if (is_byte(tokens[i]))
            text[k++] = (char)(tokens[i] - BYTE0);
    text[k] = '\0';
    return ILAB_OK;
}

/* ---- sequences (callers hold b->mu) ---------------------------------------- */

static sequence *lookup(ilab_backend_t *b, ilab_seq_t h)
{
    uint32_t slot = (uint32_t)(h & 0xffffffffu);
    if (slot == 0 || slot > MAX_SEQS)
        return NULL;
    sequence *s = &b->seqs[slot - 1];
    return s->in_use && s->generation == (uint32_t)(h >> 32) ? s : NULL;
}

static ilab_status seq_create(ilab_backend_t *b, ilab_seq_t *out)
{
    if (!out)
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_create: out is NULL");
    for (uint32_t i = 0; i < MAX_SEQS; i++) {
        sequence *s = &b->seqs[i];
        if (!s->in_use) {
            s->in_use = 1;
            s->generation++;
            s->len = 0;
            s->hash = 0x12345;
            *out = ((uint64_t)s->generation << 32) | (i + 1);
            return ILAB_OK;
        }
    }
    return fail(b, ILAB_OUT_OF_MEMORY, "seq_create: all %d sequence slots in use", MAX_SEQS);
}

static ilab_status seq_free(ilab_backend_t *b, ilab_seq_t h)
{
    sequence *s = lookup(b, h);
    if (!s)
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_free: stale or unknown handle");
    s->in_use = 0;
    return ILAB_OK;
}

static ilab_status seq_length(ilab_backend_t *b, ilab_seq_t h, int32_t *len)
{
    sequence *s = lookup(b, h);
    if (!s || !len)
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_length: stale or unknown handle");
    *len = s->len;
    return ILAB_OK;
}

/* ---- the KV pool (kv_blocks > 0) -------------------------------------------- */

static long blocks_for(long positions)
{
    return (positions + KV_BLOCK - 1) / KV_BLOCK;
}

static long blocks_in_use(const ilab_backend_t *b)
{
    long used = 0;
    for (int i = 0; i < MAX_SEQS; i++)
        if (b->seqs[i].in_use)
            used += blocks_for(b->seqs[i].len);
    return used;
}

/* ILAB_OUT_OF_MEMORY when `more` blocks are not free. */
static ilab_status pool_take(ilab_backend_t *b, const char *call, long more)
{
    if (b->kv_blocks <= 0 || more <= 0)
        return ILAB_OK;
    long free_blocks = b->kv_blocks - blocks_in_use(b);
    if (more > free_blocks)
        return fail(b, ILAB_OUT_OF_MEMORY, "%s: the KV cache needs %ld more blocks but %ld of %ld "
                    "are free (config key kv_blocks)", call, more, free_blocks, b->kv_blocks);
    return ILAB_OK;
}

/* cache_stats(): the pool in positions; an unlimited pool is as big as
 * every sequence slot at full length. */
static ilab_status cache_stats(ilab_backend_t *b, ilab_cache_stats_t *out)
{
    if (!HAS_STATS)
        return fail(b, ILAB_UNSUPPORTED, "cache_stats: capability cache.stats not declared");
    if (!out)
        return fail(b, ILAB_INVALID_ARGUMENT, "cache_stats: stats is NULL");
    if (out->struct_size < sizeof *out)
        return fail(b, ILAB_ABI_MISMATCH, "cache_stats: struct_size %u is smaller than ABI 1.1's "
                    "%zu", out->struct_size, sizeof *out);
    long total = b->kv_blocks > 0 ? b->kv_blocks : (long)MAX_SEQS * blocks_for(MAX_CONTEXT);
    out->block_size = KV_BLOCK;
    out->total_positions = (int64_t)total * KV_BLOCK;
    out->free_positions = (int64_t)(total - blocks_in_use(b)) * KV_BLOCK;
    return ILAB_OK;
}

static uint64_t hash_of(const int32_t *tokens, int32_t n)
{
    uint64_t h = 0x12345;
    for (int32_t i = 0; i < n; i++)
        h = mix(h ^ (uint64_t)tokens[i]);
    return h;
}

static ilab_status seq_fork(ilab_backend_t *b, ilab_seq_t parent, ilab_seq_t *child)
{
    sequence *p = lookup(b, parent);
    if (!p || !child)
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_fork: stale or unknown handle");
    ilab_status st = pool_take(b, "seq_fork", blocks_for(p->len));
    if (st != ILAB_OK)
        return st;
    st = seq_create(b, child);
    if (st != ILAB_OK)
        return st;
    sequence *c = lookup(b, *child);
    memcpy(c->tokens, p->tokens, (size_t)p->len * sizeof *c->tokens);
    c->len = p->len;
    c->hash = p->hash;
    return ILAB_OK;
}

static ilab_status seq_truncate(ilab_backend_t *b, ilab_seq_t h, int32_t n_keep)
{
    sequence *s = lookup(b, h);
    if (!s)
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_truncate: stale or unknown handle");
    if (n_keep < 0 || n_keep > s->len)
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_truncate: n_keep %d is outside 0..%d", n_keep,
                    s->len);
    s->len = n_keep;
    s->hash = hash_of(s->tokens, n_keep); /* the logits follow the kept tokens only */
    return ILAB_OK;
}

/* The injected plugin bug of `fault` (config): what a host that runs
 * plugins in its own process cannot survive. */
static void maybe_fault(const ilab_backend_t *b)
{
    if (b->evals <= b->fault_after)
        return;
    if (!strcmp(b->fault, "segv"))
        *(volatile int *)(uintptr_t)b->evals = 1; /* an address nothing maps */
    else if (!strcmp(b->fault, "abort"))
        abort();
    else if (!strcmp(b->fault, "exit"))
        exit(3);
    else if (!strcmp(b->fault, "hang"))
        for (;;)
            pause();
}

static ilab_status eval(ilab_backend_t *b, const ilab_batch_item_t *const *items, size_t n)
{
    if (!items || n == 0 || n > MAX_BATCH)
        return fail(b, ILAB_INVALID_ARGUMENT, "eval: %zu items (must be 1..%d)", n, MAX_BATCH);
    b->evals++;
    maybe_fault(b);
    if (b->fail_after > 0 && b->evals > b->fail_after)
        return fail(b, ILAB_INTERNAL, "eval: injected failure after %ld calls", b->fail_after);
    /* Check everything before changing anything: a refused batch leaves
     * every sequence as it was. */
    long more = 0; /* pool blocks the batch takes */
    for (size_t i = 0; i < n; i++) {
        const ilab_batch_item_t *it = items[i];
        sequence *s = it ? lookup(b, it->seq) : NULL;
        if (!s || it->n_tokens < 1 || !it->tokens)
            return fail(b, ILAB_INVALID_ARGUMENT, "eval: item %zu: stale handle or no tokens", i);
        for (size_t j = 0; j < i; j++)
            if (items[j]->seq == it->seq)
                return fail(b, ILAB_INVALID_ARGUMENT, "eval: sequence appears twice");
        if (s->len + it->n_tokens > MAX_CONTEXT)
            return fail(b, ILAB_CONTEXT_OVERFLOW, "eval: item %zu would pass max_context %d", i,
                        MAX_CONTEXT);
        for (int32_t t = 0; t < it->n_tokens; t++) {
            if (it->tokens[t] < 0 || it->tokens[t] >= VOCAB)
                return fail(b, ILAB_INVALID_ARGUMENT, "eval: token %d out of range",
                            it->tokens[t]);
            if (it->tokens[t] == b->fail_token)
                return fail(b, ILAB_INTERNAL, "eval: item %zu holds token %d, which this backend "
                            "fails on (config key fail_token)", i, it->tokens[t]);
        }
        more += blocks_for(s->len + it->n_tokens) - blocks_for(s->len);
    }
    ilab_status st = pool_take(b, "eval", more);
    if (st != ILAB_OK)
        return st;
    for (size_t i = 0; i < n; i++) {
        const ilab_batch_item_t *it = items[i];
        sequence *s = lookup(b, it->seq);
        bool all = (it->flags & ILAB_EVAL_ALL_LOGITS) != 0;
        for (int32_t t = 0; t < it->n_tokens; t++) {
            s->hash = mix(s->hash ^ (uint64_t)it->tokens[t]);
            s->tokens[s->len++] = it->tokens[t];
            if (it->logits && (all || t == it->n_tokens - 1))
                logits_for(b, s, it->logits + (all ? (size_t)t * VOCAB : 0));
        }
    }
    return ILAB_OK;
}

/* ---- the entry points: the contract check, then the state lock ------------ */

static ilab_status cb_model_info(ilab_backend_t *b, ilab_model_info_t *info)
{
    ilab_status st = enter(b, "model_info");
    if (st == ILAB_OK)
        st = model_info(b, info);
    leave(b);
    return st;
}

static ilab_status cb_tokenize(ilab_backend_t *b, const char *text, size_t len, uint32_t flags,
                               int32_t *tokens, size_t cap, size_t *n_tokens)
{
    ilab_status st = enter(b, "tokenize");
    if (st == ILAB_OK)
        st = tokenize(b, text, len, flags, tokens, cap, n_tokens);
    leave(b);
    return st;
}

static ilab_status cb_token_piece(ilab_backend_t *b, int32_t prev, int32_t token, char *piece,
                                  size_t cap, size_t *len)
{
    (void)prev;
    ilab_status st = enter(b, "token_piece");
    if (st == ILAB_OK)
        st = token_piece(b, token, piece, cap, len);
    leave(b);
    return st;
}

static ilab_status cb_detokenize(ilab_backend_t *b, const int32_t *tokens, size_t n, char *text,
                                 size_t cap, size_t *len)
{
    ilab_status st = enter(b, "detokenize");
    if (st == ILAB_OK)
        st = detokenize(b, tokens, n, text, cap, len);
    leave(b);
    return st;
}

static ilab_status cb_seq_create(ilab_backend_t *b, ilab_seq_t *out)
{
    ilab_status st = enter(b, "seq_create");
    if (st == ILAB_OK) {
        pthread_mutex_lock(&b->mu);
        st = seq_create(b, out);
        pthread_mutex_unlock(&b->mu);
    }
    leave(b);
    return st;
}

static ilab_status cb_seq_free(ilab_backend_t *b, ilab_seq_t h)
{
    ilab_status st = enter(b, "seq_free");
    if (st == ILAB_OK) {
        pthread_mutex_lock(&b->mu);
        st = seq_free(b, h);
        pthread_mutex_unlock(&b->mu);
    }
    leave(b);
    return st;
}

static bool cache_ops(void)
{
    return !strcmp(CACHE_OPS, "true");
}

static ilab_status cb_seq_fork(ilab_backend_t *b, ilab_seq_t p, ilab_seq_t *c)
{
    if (!cache_ops())
        return fail(b, ILAB_UNSUPPORTED, "seq_fork: capability cache.fork not declared");
    ilab_status st = enter(b, "seq_fork");
    if (st == ILAB_OK) {
        pthread_mutex_lock(&b->mu);
        st = seq_fork(b, p, c);
        pthread_mutex_unlock(&b->mu);
    }
    leave(b);
    return st;
}

static ilab_status cb_seq_truncate(ilab_backend_t *b, ilab_seq_t h, int32_t n)
{
    if (!cache_ops())
        return fail(b, ILAB_UNSUPPORTED, "seq_truncate: capability cache.truncate not declared");
    ilab_status st = enter(b, "seq_truncate");
    if (st == ILAB_OK) {
        pthread_mutex_lock(&b->mu);
        st = seq_truncate(b, h, n);
        pthread_mutex_unlock(&b->mu);
    }
    leave(b);
    return st;
}

static ilab_status cb_seq_length(ilab_backend_t *b, ilab_seq_t h, int32_t *len)
{
    ilab_status st = enter(b, "seq_length");
    if (st == ILAB_OK) {
        pthread_mutex_lock(&b->mu);
        st = seq_length(b, h, len);
        pthread_mutex_unlock(&b->mu);
    }
    leave(b);
    return st;
}

/* The pacing sleep is inside the call (and outside the state lock), as a
 * slow model's would be: a host that overlaps calls is caught here. */
static ilab_status cb_eval(ilab_backend_t *b, const ilab_batch_item_t *const *items, size_t n)
{
    ilab_status st = enter(b, "eval");
    if (st == ILAB_OK) {
        pthread_mutex_lock(&b->mu);
        st = eval(b, items, n);
        pthread_mutex_unlock(&b->mu);
    }
    if (st == ILAB_OK && b->step_ms > 0) {
        struct timespec ts = {.tv_sec = b->step_ms / 1000,
                              .tv_nsec = (b->step_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    leave(b);
    return st;
}

static ilab_status cb_generate(ilab_backend_t *b, const ilab_generate_request_t *r,
                               ilab_event_fn f, void *u)
{
    (void)r;
    (void)f;
    (void)u;
    return fail(b, ILAB_UNSUPPORTED, "generate: capability sampling: backend not declared");
}

static ilab_status cb_cancel(ilab_backend_t *b, uint64_t id)
{
    (void)id;
    return fail(b, ILAB_UNSUPPORTED, "cancel: capability cancel not declared");
}

static ilab_status cb_cache_stats(ilab_backend_t *b, ilab_cache_stats_t *out)
{
    ilab_status st = enter(b, "cache_stats");
    if (st == ILAB_OK) {
        pthread_mutex_lock(&b->mu);
        st = cache_stats(b, out);
        pthread_mutex_unlock(&b->mu);
    }
    leave(b);
    return st;
}

static const ilab_backend_api_t api = {
    .struct_size = sizeof(ilab_backend_api_t),
    .probe = cb_probe,
    .create = cb_create,
    .destroy = cb_destroy,
    .last_error = cb_last_error,
    .model_info = cb_model_info,
    .tokenize = cb_tokenize,
    .detokenize = cb_detokenize,
    .token_piece = cb_token_piece,
    .seq_create = cb_seq_create,
    .seq_free = cb_seq_free,
    .seq_fork = cb_seq_fork,
    .seq_truncate = cb_seq_truncate,
    .seq_length = cb_seq_length,
    .eval = cb_eval,
    .generate = cb_generate,
    .cancel = cb_cancel,
    .cache_stats = cb_cache_stats,
};

ILAB_PLUGIN_EXPORT const ilab_plugin_entry_t ilab_plugin_entry = {
    .struct_size = sizeof(ilab_plugin_entry_t),
    .abi_major = ILAB_ABI_MAJOR,
    .abi_minor = ABI_MINOR, /* the manifest's */
    .name = PLUGIN_NAME,
    .version = PLUGIN_VERSION,
    .manifest_yaml = manifest,
    .backend = &api,
};
