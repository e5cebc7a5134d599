/* template_backend — a minimal, complete inferlab plugin to copy.
 *
 * It is a real (if tiny) backend that passes the conformance harness:
 *   - tokenizer: one token per byte (ids 0..255) plus BOS (256) and EOS (257),
 *     so any byte string round-trips;
 *   - logits: full; the logits at a position are a fixed hash of the token
 *     there and the token before it (a "hashed bigram model"). They depend
 *     only on the tokens, so cached and recomputed logits agree exactly;
 *   - sequences with fork and truncate; batched eval;
 *   - sampling: host (generate and cancel return ILAB_UNSUPPORTED);
 *   - ABI 1.0 (TEMPLATE_ABI_MINOR 0, below); built with 1 it implements ABI
 *     1.1's cache_stats and declares cache.stats; built with 2 it also
 *     implements ABI 1.2's eog_ids and chat_template and declares chat (its
 *     end-of-generation set is EOS alone, it has no chat template, and no
 *     token has a text to parse as special);
 *   - thread_safety: none (the host serialises calls; last_error is locked
 *     because it may be called from any thread).
 *
 * Rename it, replace the model, keep the rules: every call validates its
 * arguments, every non-OK status sets a message, nothing crosses the
 * boundary but what backend.h describes. */
#include <inferlab/inferlab.h>

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PLUGIN_NAME "template_backend"
#define PLUGIN_VERSION "0.1.0"

/* The ABI minor this source implements, pinned: the entry's abi_minor and
 * the manifest's `abi` both come from it. Never ILAB_ABI_MINOR: that is the
 * SDK's minor and moves when the SDK is upgraded, which would make this
 * source claim members it does not implement (docs/sdk.md, "Upgrading the
 * SDK"). 0 loads in every 1.x host; 1 adds cache.stats and needs a 1.1 one;
 * 2 adds chat and needs a 1.2 one. tests/abi_compat builds this file with 0
 * against the ABI 1.0 headers and against today's, and with 1 and 2. */
#ifndef TEMPLATE_ABI_MINOR
#define TEMPLATE_ABI_MINOR 0
#endif
#define TEMPLATE_STR(x) #x
#define TEMPLATE_XSTR(x) TEMPLATE_STR(x)

/* The frozen ABI 1.0 sizes come with inferlab/struct_size.h; the headers
 * released with ABI 1.0 predate it, and in them sizeof is 1.0's. So this
 * source builds against every SDK since 1.0. */
#ifndef ILAB_MODEL_INFO_SIZE_1_0
#define ILAB_MODEL_INFO_SIZE_1_0 ((unsigned)sizeof(ilab_model_info_t))
#define ILAB_BATCH_ITEM_SIZE_1_0 ((unsigned)sizeof(ilab_batch_item_t))
#endif

#define VOCAB 258
#define BOS 256
#define EOS 257
#define MAX_CONTEXT 1024
#define MAX_SEQS 256
#define MAX_BATCH 64

static const char manifest[] =
    "name: " PLUGIN_NAME "\n"
    "version: " PLUGIN_VERSION "\n"
    "abi: 1." TEMPLATE_XSTR(TEMPLATE_ABI_MINOR) "\n"
    "description: >-\n"
    "  Template backend: byte-level tokenizer and deterministic hashed-bigram\n"
    "  logits; the starting point for writing a plugin.\n"
    "capabilities:\n"
    "  tokenizer: true\n"
    "  logits: full\n"
    "  topk_max: 20\n"
    "  sampling: host\n"
#if TEMPLATE_ABI_MINOR >= 1
    "  cache: {fork: true, truncate: true, stats: true}\n"
#else
    "  cache: {fork: true, truncate: true}\n"
#endif
    "  batching: {max_batch: 64}\n"
    "  streaming: false\n"
    "  cancel: false\n"
    "  max_context: 1024\n"
    "  thread_safety: none\n"
#if TEMPLATE_ABI_MINOR >= 2
    "  chat: true\n"
#endif
    "config:\n"
    "  seed:\n"
    "    type: int\n"
    "    default: 0\n"
    "    description: Seed of the hashed logits; each seed is a different toy model.\n";

/* A sequence slot. A handle is (generation << 32 | slot + 1); freeing bumps
 * the generation, so an old handle never names a new sequence. */
typedef struct sequence {
    uint32_t generation;
    int in_use;
    int32_t len;
    int32_t *tokens; /* MAX_CONTEXT entries while in use */
} sequence;

struct ilab_backend {
    const ilab_host_t *host;
    uint64_t seed;
    sequence seqs[MAX_SEQS];
    ilab_last_error_t error; /* last_error() may be read from any thread */
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

/* --- the "model" ------------------------------------------------------------ */

static uint64_t mix(uint64_t x) /* splitmix64's finaliser */
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Logits after `token` preceded by `prev` (-1 at the start): a hash in
 * [-4, 4), nudged towards lowercase letters and spaces so greedy output
 * looks vaguely like text. */
static void bigram_logits(uint64_t seed, int32_t prev, int32_t token, float *out)
{
    uint64_t h = mix(seed ^ mix((uint64_t)(prev + 1) * VOCAB + (uint64_t)token));
    for (int v = 0; v < VOCAB; v++) {
        uint64_t r = mix(h + (uint64_t)v);
        float logit = (float)(r >> 40) / (float)(1u << 24) * 8.0f - 4.0f;
        if ((v >= 'a' && v <= 'z') || v == ' ')
            logit += 2.0f;
        out[v] = logit;
    }
}

/* --- lifecycle -------------------------------------------------------------- */

static ilab_status parse_seed(const ilab_config_entry_t *config, size_t n, uint64_t *seed,
                              char *error, size_t cap)
{
    *seed = 0;
    for (size_t i = 0; i < n; i++) {
        if (!config[i].key || !config[i].value || strcmp(config[i].key, "seed")) {
            snprintf(error, cap, PLUGIN_NAME ": unknown config key '%s'",
                     config[i].key ? config[i].key : "(null)");
            return ILAB_INVALID_ARGUMENT;
        }
        char *end = NULL;
        long long v = strtoll(config[i].value, &end, 10);
        if (!*config[i].value || *end) {
            snprintf(error, cap, PLUGIN_NAME ": config key 'seed' must be an int, got '%s'",
                     config[i].value);
            return ILAB_INVALID_ARGUMENT;
        }
        *seed = (uint64_t)v;
    }
    return ILAB_OK;
}

static ilab_status tb_probe(const ilab_host_t *host, const ilab_config_entry_t *config,
                            size_t n_config, char *reason, size_t reason_cap)
{
    (void)host, (void)config, (void)n_config;
    if (reason && reason_cap)
        reason[0] = '\0';
    return ILAB_OK; /* pure CPU code with no files: it always runs */
}

static ilab_status tb_create(const ilab_host_t *host, const ilab_config_entry_t *config,
                             size_t n_config, char *error, size_t error_cap,
                             ilab_backend_t **out)
{
    char scratch[1];
    if (!error || !error_cap) {
        error = scratch;
        error_cap = sizeof scratch;
    }
    error[0] = '\0';
    if (!host || !out || (n_config && !config)) {
        snprintf(error, error_cap, PLUGIN_NAME ": create() needs host and out");
        return ILAB_INVALID_ARGUMENT;
    }
    uint64_t seed;
    ilab_status st = parse_seed(config, n_config, &seed, error, error_cap);
    if (st != ILAB_OK)
        return st;
    ilab_backend_t *b = calloc(1, sizeof *b);
    if (!b) {
        snprintf(error, error_cap, PLUGIN_NAME ": out of memory");
        return ILAB_OUT_OF_MEMORY;
    }
    b->host = host;
    b->seed = seed;
    ilab_last_error_init(&b->error);
    for (int i = 0; i < MAX_SEQS; i++)
        b->seqs[i].generation = 1;
    *out = b;
    return ILAB_OK;
}

static void tb_destroy(ilab_backend_t *b)
{
    if (!b)
        return;
    for (int i = 0; i < MAX_SEQS; i++)
        free(b->seqs[i].tokens);
    ilab_last_error_destroy(&b->error);
    free(b);
}

static size_t tb_last_error(const ilab_backend_t *b, char *buf, size_t cap)
{
    return ilab_last_error_copy(b ? &b->error : NULL, buf, cap);
}

static ilab_status tb_model_info(ilab_backend_t *b, ilab_model_info_t *info)
{
    if (!b || !info)
        return fail(b, ILAB_INVALID_ARGUMENT, "model_info: NULL info");
    if (info->struct_size < ILAB_MODEL_INFO_SIZE_1_0) /* no ABI had a smaller one (ABI-3) */
        return fail(b, ILAB_ABI_MISMATCH, "model_info: struct_size %u is smaller than ABI 1.0's %u",
                    info->struct_size, ILAB_MODEL_INFO_SIZE_1_0);
    ilab_model_info_t full = {.struct_size = info->struct_size, .vocab_size = VOCAB,
                              .bos_id = BOS, .eos_id = EOS, .max_context = MAX_CONTEXT};
    snprintf(full.name, sizeof full.name, "hashed-bigram-seed-%llu", (unsigned long long)b->seed);
    /* Write no byte past the caller's struct (it may be an older, smaller one). */
    size_t n = info->struct_size < sizeof full ? info->struct_size : sizeof full;
    memcpy(info, &full, n);
    return ILAB_OK;
}

/* --- tokens ----------------------------------------------------------------- */

static ilab_status tb_tokenize(ilab_backend_t *b, const char *text, size_t len, uint32_t flags,
                               int32_t *tokens, size_t cap, size_t *n_tokens)
{
    if (!b || (!text && len) || !n_tokens || (!tokens && cap))
        return fail(b, ILAB_INVALID_ARGUMENT, "tokenize: NULL argument");
    uint32_t known = ILAB_TOKENIZE_ADD_BOS | ILAB_TOKENIZE_ADD_EOS;
#if TEMPLATE_ABI_MINOR >= 2
    /* BOS and EOS have no text, so there is nothing to parse as special:
     * the flag is accepted and changes nothing [TOK-11]. */
    known |= ILAB_TOKENIZE_PARSE_SPECIAL;
#endif
    if (flags & ~known)
        return fail(b, ILAB_INVALID_ARGUMENT, "tokenize: unknown flag bits 0x%x", (unsigned)flags);
    size_t need = len + !!(flags & ILAB_TOKENIZE_ADD_BOS) + !!(flags & ILAB_TOKENIZE_ADD_EOS);
    if (cap < need) {
        *n_tokens = need;
        return fail(b, ILAB_BUFFER_TOO_SMALL, "tokenize: %zu tokens needed, room for %zu", need, cap);
    }
    size_t n = 0;
    if (flags & ILAB_TOKENIZE_ADD_BOS)
        tokens[n++] = BOS;
    for (size_t i = 0; i < len; i++)
        tokens[n++] = (unsigned char)text[i];
    if (flags & ILAB_TOKENIZE_ADD_EOS)
        tokens[n++] = EOS;
    *n_tokens = n;
    return ILAB_OK;
}

/* The bytes of one token: 1 for a byte token, 0 for BOS/EOS. */
static size_t token_bytes(int32_t token) { return token < 256 ? 1 : 0; }

static ilab_status tb_detokenize(ilab_backend_t *b, const int32_t *tokens, size_t n_tokens,
                                 char *text, size_t cap, size_t *len)
{
    if (!b || (!tokens && n_tokens) || !len || (!text && cap))
        return fail(b, ILAB_INVALID_ARGUMENT, "detokenize: NULL argument");
    size_t need = 0;
    for (size_t i = 0; i < n_tokens; i++) {
        if (tokens[i] < 0 || tokens[i] >= VOCAB)
            return fail(b, ILAB_INVALID_ARGUMENT, "detokenize: token %d at %zu is not in [0, %d)",
                        tokens[i], i, VOCAB);
        need += token_bytes(tokens[i]);
    }
    if (cap < need + 1) {
        *len = need;
        return fail(b, ILAB_BUFFER_TOO_SMALL, "detokenize: %zu bytes + NUL needed, room for %zu",
                    need, cap);
    }
    size_t n = 0;
    for (size_t i = 0; i < n_tokens; i++)
        if (token_bytes(tokens[i]))
            text[n++] = (char)tokens[i];
    text[n] = '\0';
    *len = n;
    return ILAB_OK;
}

static ilab_status tb_token_piece(ilab_backend_t *b, int32_t prev_token, int32_t token,
                                  char *piece, size_t cap, size_t *len)
{
    if (!b || !len || (!piece && cap))
        return fail(b, ILAB_INVALID_ARGUMENT, "token_piece: NULL argument");
    if (prev_token < -1 || prev_token >= VOCAB || token < 0 || token >= VOCAB)
        return fail(b, ILAB_INVALID_ARGUMENT, "token_piece: token %d (after %d) is not in [0, %d)",
                    token, prev_token, VOCAB);
    return tb_detokenize(b, &token, 1, piece, cap, len);
}

/* --- sequences --------------------------------------------------------------- */

static sequence *lookup(ilab_backend_t *b, ilab_seq_t handle)
{
    uint64_t slot = (handle & 0xffffffffu) - 1;
    if (!b || handle == ILAB_SEQ_NONE || slot >= MAX_SEQS)
        return NULL;
    sequence *s = &b->seqs[slot];
    return s->in_use && s->generation == (uint32_t)(handle >> 32) ? s : NULL;
}

static ilab_status new_sequence(ilab_backend_t *b, ilab_seq_t *out, sequence **seq)
{
    for (int i = 0; i < MAX_SEQS; i++) {
        sequence *s = &b->seqs[i];
        if (s->in_use)
            continue;
        if (!s->tokens && !(s->tokens = malloc(MAX_CONTEXT * sizeof *s->tokens)))
            return fail(b, ILAB_OUT_OF_MEMORY, "out of memory for a sequence");
        s->in_use = 1;
        s->len = 0;
        *out = ((uint64_t)s->generation << 32) | (uint64_t)(i + 1);
        *seq = s;
        return ILAB_OK;
    }
    return fail(b, ILAB_OUT_OF_MEMORY, "all %d sequence slots are in use", MAX_SEQS);
}

static ilab_status tb_seq_create(ilab_backend_t *b, ilab_seq_t *seq)
{
    sequence *s;
    if (!b || !seq)
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_create: NULL argument");
    return new_sequence(b, seq, &s);
}

static ilab_status tb_seq_free(ilab_backend_t *b, ilab_seq_t seq)
{
    sequence *s = lookup(b, seq);
    if (!s)
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_free: stale or unknown sequence %#llx",
                    (unsigned long long)seq);
    s->in_use = 0;
    s->generation++;
    free(s->tokens); /* the memory goes back, as CCH-6 asks */
    s->tokens = NULL;
    return ILAB_OK;
}

static ilab_status tb_seq_fork(ilab_backend_t *b, ilab_seq_t parent, ilab_seq_t *child)
{
    sequence *p = lookup(b, parent), *c = NULL;
    if (!p || !child)
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_fork: stale or unknown parent %#llx",
                    (unsigned long long)parent);
    ilab_seq_t handle = ILAB_SEQ_NONE; /* set by new_sequence() when it returns OK */
    ilab_status st = new_sequence(b, &handle, &c);
    if (st != ILAB_OK)
        return st;
    memcpy(c->tokens, p->tokens, (size_t)p->len * sizeof *p->tokens);
    c->len = p->len;
    *child = handle;
    return ILAB_OK;
}

static ilab_status tb_seq_truncate(ilab_backend_t *b, ilab_seq_t seq, int32_t n_keep)
{
    sequence *s = lookup(b, seq);
    if (!s)
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_truncate: stale or unknown sequence");
    if (n_keep < 0 || n_keep > s->len)
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_truncate: n_keep %d not in [0, %d]", n_keep,
                    s->len);
    s->len = n_keep;
    return ILAB_OK;
}

static ilab_status tb_seq_length(ilab_backend_t *b, ilab_seq_t seq, int32_t *length)
{
    sequence *s = lookup(b, seq);
    if (!s || !length)
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_length: stale or unknown sequence");
    *length = s->len;
    return ILAB_OK;
}

/* --- evaluation -------------------------------------------------------------- */

/* Nonzero when every byte of `item` past `known` (this plugin's sizeof) up
 * to its struct_size is zero: a newer host set nothing this plugin would
 * ignore (ABI-3). The SDK's ilab_struct_tail_is_zero() is the same check;
 * the ABI 1.0 headers lack it. */
static int tail_is_zero(const ilab_batch_item_t *item, size_t known)
{
    const unsigned char *p = (const unsigned char *)item;
    for (size_t i = known; i < item->struct_size; i++)
        if (p[i])
            return 0;
    return 1;
}

static ilab_status check_item(ilab_backend_t *b, const ilab_batch_item_t *it, size_t i)
{
    if (!it)
        return fail(b, ILAB_INVALID_ARGUMENT, "eval: item %zu is NULL", i);
    /* No ABI had a smaller item; a larger one from a newer host must not set
     * members this plugin would ignore (ABI-3). */
    if (it->struct_size < ILAB_BATCH_ITEM_SIZE_1_0 || !tail_is_zero(it, sizeof *it))
        return fail(b, ILAB_ABI_MISMATCH, "eval: item %zu has struct_size %u (ABI 1.0's is %u, "
                    "this plugin's %zu) or sets members it does not know", i, it->struct_size,
                    ILAB_BATCH_ITEM_SIZE_1_0, sizeof *it);
    if (it->flags & ~(uint32_t)ILAB_EVAL_ALL_LOGITS)
        return fail(b, ILAB_INVALID_ARGUMENT, "eval: item %zu has unknown flag bits 0x%x", i,
                    it->flags);
    sequence *s = lookup(b, it->seq);
    if (!s)
        return fail(b, ILAB_INVALID_ARGUMENT, "eval: item %zu names a stale or unknown sequence", i);
    if (!it->tokens || it->n_tokens < 1)
        return fail(b, ILAB_INVALID_ARGUMENT, "eval: item %zu has no tokens", i);
    for (int32_t t = 0; t < it->n_tokens; t++)
        if (it->tokens[t] < 0 || it->tokens[t] >= VOCAB)
            return fail(b, ILAB_INVALID_ARGUMENT, "eval: item %zu token %d is %d, not in [0, %d)",
                        i, t, it->tokens[t], VOCAB);
    if (it->n_tokens > MAX_CONTEXT - s->len)
        return fail(b, ILAB_CONTEXT_OVERFLOW, "eval: item %zu: %d + %d tokens pass max_context %d",
                    i, s->len, it->n_tokens, MAX_CONTEXT);
    return ILAB_OK;
}

static ilab_status tb_eval(ilab_backend_t *b, const ilab_batch_item_t *const *items,
                           size_t n_items)
{
    if (!b || !items || n_items == 0 || n_items > MAX_BATCH)
        return fail(b, ILAB_INVALID_ARGUMENT, "eval: need 1..%d items, got %zu", MAX_BATCH, n_items);
    /* All-or-nothing: check every item before changing any sequence. */
    for (size_t i = 0; i < n_items; i++) {
        ilab_status st = check_item(b, items[i], i);
        if (st != ILAB_OK)
            return st;
        for (size_t j = 0; j < i; j++)
            if (items[j]->seq == items[i]->seq)
                return fail(b, ILAB_INVALID_ARGUMENT, "eval: items %zu and %zu name one sequence", j, i);
    }
    for (size_t i = 0; i < n_items; i++) {
        const ilab_batch_item_t *it = items[i];
        sequence *s = lookup(b, it->seq);
        for (int32_t t = 0; t < it->n_tokens; t++) {
            int32_t prev = s->len ? s->tokens[s->len - 1] : -1;
            s->tokens[s->len++] = it->tokens[t];
            int last = t == it->n_tokens - 1;
            if (it->logits && (last || (it->flags & ILAB_EVAL_ALL_LOGITS))) {
                float *row = it->logits + ((it->flags & ILAB_EVAL_ALL_LOGITS) ? (size_t)t * VOCAB : 0);
                bigram_logits(b->seed, prev, it->tokens[t], row);
            }
        }
    }
    return ILAB_OK;
}

/* --- not declared: fail closed ------------------------------------------------ */

static ilab_status tb_generate(ilab_backend_t *b, const ilab_generate_request_t *request,
                               ilab_event_fn on_event, void *user_data)
{
    static const char msg[] = "generate: capability 'sampling: backend' not declared "
                              "(this backend samples on the host)";
    if (on_event) { /* keep the stream grammar: one terminal event */
        ilab_event_t ev = {.struct_size = sizeof ev, .type = ILAB_EVENT_ERROR,
                           .request_id = request ? request->request_id : 0,
                           .finish_reason = ILAB_FINISH_ERROR, .status = ILAB_UNSUPPORTED,
                           .message = msg};
        on_event(user_data, &ev);
    }
    return fail(b, ILAB_UNSUPPORTED, "%s", msg);
}

static ilab_status tb_cancel(ilab_backend_t *b, uint64_t request_id)
{
    (void)request_id;
    return fail(b, ILAB_UNSUPPORTED, "cancel: capability 'cancel' not declared");
}

#if TEMPLATE_ABI_MINOR >= 1
/* ABI 1.1 [CCH-10]. Every slot owns MAX_CONTEXT positions, so the pool is
 * MAX_SEQS * MAX_CONTEXT positions in blocks of one, and a sequence holds
 * its length (a fork copies its parent's tokens). Slots, not positions, run
 * out first: eval() never meets ILAB_OUT_OF_MEMORY, and the free count never
 * says it would. */
static ilab_status tb_cache_stats(ilab_backend_t *b, ilab_cache_stats_t *stats)
{
    if (!b || !stats)
        return fail(b, ILAB_INVALID_ARGUMENT, "cache_stats: NULL stats");
    if (stats->struct_size < ILAB_CACHE_STATS_SIZE_1_1)
        return fail(b, ILAB_ABI_MISMATCH, "cache_stats: struct_size %u is smaller than ABI 1.1's %u",
                    stats->struct_size, ILAB_CACHE_STATS_SIZE_1_1);
    ilab_cache_stats_t now = {.struct_size = stats->struct_size, .block_size = 1,
                              .total_positions = (int64_t)MAX_SEQS * MAX_CONTEXT};
    int64_t held = 0;
    for (int i = 0; i < MAX_SEQS; i++)
        held += b->seqs[i].in_use ? b->seqs[i].len : 0;
    now.free_positions = now.total_positions - held;
    /* Write no byte past the caller's struct (it may be an older, smaller one). */
    memcpy(stats, &now, stats->struct_size < sizeof now ? stats->struct_size : sizeof now);
    return ILAB_OK;
}
#endif

#if TEMPLATE_ABI_MINOR >= 2
/* ABI 1.2 [TOK-12]: the vocabulary's one end-of-generation token is EOS. */
static ilab_status tb_eog_ids(ilab_backend_t *b, int32_t *ids, size_t cap, size_t *n_ids)
{
    if (!b || !n_ids || (!ids && cap))
        return fail(b, ILAB_INVALID_ARGUMENT, "eog_ids: NULL argument");
    *n_ids = 1;
    if (cap < 1)
        return fail(b, ILAB_BUFFER_TOO_SMALL, "eog_ids: 1 id needed, room for 0");
    ids[0] = EOS;
    return ILAB_OK;
}

/* ABI 1.2 [TOK-13]: no chat template; the host then uses its plain one. */
static ilab_status tb_chat_template(ilab_backend_t *b, char *text, size_t cap, size_t *len)
{
    if (!b || !len || (!text && cap))
        return fail(b, ILAB_INVALID_ARGUMENT, "chat_template: NULL argument");
    *len = 0;
    if (cap < 1)
        return fail(b, ILAB_BUFFER_TOO_SMALL, "chat_template: 1 byte needed (the NUL), room for 0");
    text[0] = '\0';
    return ILAB_OK;
}
#endif

/* --- the exported table ------------------------------------------------------- */

static const ilab_backend_api_t api = {
    .struct_size = sizeof(ilab_backend_api_t),
    .probe = tb_probe,
    .create = tb_create,
    .destroy = tb_destroy,
    .last_error = tb_last_error,
    .model_info = tb_model_info,
    .tokenize = tb_tokenize,
    .detokenize = tb_detokenize,
    .token_piece = tb_token_piece,
    .seq_create = tb_seq_create,
    .seq_free = tb_seq_free,
    .seq_fork = tb_seq_fork,
    .seq_truncate = tb_seq_truncate,
    .seq_length = tb_seq_length,
    .eval = tb_eval,
    .generate = tb_generate,
    .cancel = tb_cancel,
#if TEMPLATE_ABI_MINOR >= 1
    .cache_stats = tb_cache_stats,
#endif
#if TEMPLATE_ABI_MINOR >= 2
    .eog_ids = tb_eog_ids,
    .chat_template = tb_chat_template,
#endif
    /* At minor 0 this source knows no later member: built against a newer
     * header they are NULL, and the host stands in for them with
     * ILAB_UNSUPPORTED (docs/contract.md ABI-3.5, ABI-6). */
};

ILAB_PLUGIN_EXPORT const ilab_plugin_entry_t ilab_plugin_entry = {
    .struct_size = sizeof(ilab_plugin_entry_t),
    .abi_major = ILAB_ABI_MAJOR,
    /* The minor this source implements, which is the oldest host minor it
     * needs; the manifest's `abi` above says the same. */
    .abi_minor = TEMPLATE_ABI_MINOR,
    .name = PLUGIN_NAME,
    .version = PLUGIN_VERSION,
    .manifest_yaml = manifest,
    .backend = &api,
};
