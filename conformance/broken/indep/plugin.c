/* The indep toy backends' table and bootstrap entry. Two families from one
 * source: host-sampled (default) and, with INDEP_GEN, a backend that also
 * samples itself through generate() (gen.c). PLUGIN_NAME comes from the
 * build; BREAK_<NAME> breaks one clause (cases.txt). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "toy_backend.h"

#ifndef PLUGIN_NAME
#error "PLUGIN_NAME must be defined by the build"
#endif

#ifdef INDEP_GEN
#define MANIFEST_SAMPLING "backend"
#define MANIFEST_STREAMING "true"
#define MANIFEST_CANCEL "true"
#define DESCRIPTION "Toy one-layer attention model over bytes that samples itself."
#else
#define MANIFEST_SAMPLING "host"
#define MANIFEST_STREAMING "false"
#define MANIFEST_CANCEL "false"
#define DESCRIPTION "Toy one-layer attention model over bytes, sampled by the host."
#endif

#ifdef BREAK_MAX_BATCH
#define EVAL_ITEMS_MAX 8 /* the size of the per-call item table */
#else
#define EVAL_ITEMS_MAX TOY_MAX_BATCH
#endif

static const char manifest[] =
    "name: " PLUGIN_NAME "\n"
    "version: 0.1.0\n"
    "abi: 1.0\n"
    "description: " DESCRIPTION "\n"
    "capabilities:\n"
    "  tokenizer: true\n"
    "  logits: full\n"
    "  topk_max: 8\n"
    "  sampling: " MANIFEST_SAMPLING "\n"
    "  cache: {fork: true, truncate: true}\n"
    "  batching: {max_batch: 16}\n"
    "  streaming: " MANIFEST_STREAMING "\n"
    "  cancel: " MANIFEST_CANCEL "\n"
    "  max_context: 384\n"
    "  thread_safety: sequence\n"
    "config:\n"
    "  threads:\n"
    "    type: int\n"
    "    default: 1\n"
    "    description: Worker threads, 1 to 8 (the toy model uses one).\n";

#ifdef BREAK_WEAK_HOOK
/* Optional diagnostics hook, provided by a tracing build. */
extern void toy_trace_oom(const char *what) __attribute__((weak));
#endif

ilab_status toy_fail(ilab_backend_t *b, ilab_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ilab_last_error_setv(b ? &b->error : NULL, st, fmt, ap);
    va_end(ap);
    return st;
}

static ilab_status oom(ilab_backend_t *b, const char *what)
{
#ifdef BREAK_WEAK_HOOK
    toy_trace_oom(what);
#endif
    return toy_fail(b, ILAB_OUT_OF_MEMORY, "%s: out of memory", what);
}

/* --- lifecycle ---------------------------------------------------------------- */

static ilab_status read_threads(const ilab_config_entry_t *config, size_t n, char *msg, size_t cap,
                                ilab_status bad_status)
{
    if (n && !config) {
        snprintf(msg, cap, PLUGIN_NAME ": config is NULL but n_config is %zu", n);
        return ILAB_INVALID_ARGUMENT;
    }
    for (size_t i = 0; i < n; i++) {
        if (!config[i].key || !config[i].value) {
            snprintf(msg, cap, PLUGIN_NAME ": config entry %zu has a NULL key or value", i);
            return ILAB_INVALID_ARGUMENT;
        }
        if (strcmp(config[i].key, "threads") != 0) {
            snprintf(msg, cap, PLUGIN_NAME ": unknown config key '%s'", config[i].key);
            return ILAB_INVALID_ARGUMENT;
        }
        char *end;
        long v = strtol(config[i].value, &end, 10);
#ifdef BREAK_CFG_MSG
        if (*config[i].value && !*end && (v < 1 || v > 8)) {
            snprintf(msg, cap, PLUGIN_NAME ": value %ld is out of range", v);
            return bad_status;
        }
#endif
        if (!*config[i].value || *end || v < 1 || v > 8) {
            snprintf(msg, cap, PLUGIN_NAME ": config key 'threads' must be an int in 1..8, got '%s'",
                     config[i].value);
            return bad_status;
        }
    }
    return ILAB_OK;
}

#ifdef BREAK_PROBE_CACHED
static int probed; /* the answer never changes: compute it once */
#endif

static ilab_status toy_probe(const ilab_host_t *host, const ilab_config_entry_t *config,
                             size_t n_config, char *reason, size_t reason_cap)
{
    char local[2];
#ifdef BREAK_PROBE_CAP0
    if (!reason) {
#else
    if (!reason || !reason_cap) {
#endif
        reason = local;
        reason_cap = sizeof local;
    }
#ifdef BREAK_PROBE_CACHED
    if (probed)
        return ILAB_OK;
    probed = 1;
#endif
    reason[0] = '\0';
    if (host && host->struct_size < sizeof(ilab_host_t)) {
#ifdef BREAK_PROBE_STRNCPY
        char why[128];
        snprintf(why, sizeof why, PLUGIN_NAME ": host table of %u bytes, ABI 1.0 has %zu",
                 host->struct_size, sizeof(ilab_host_t));
        strncpy(reason, why, reason_cap);
#else
        snprintf(reason, reason_cap, PLUGIN_NAME ": host table of %u bytes, ABI 1.0 has %zu",
                 host->struct_size, sizeof(ilab_host_t));
#endif
        return ILAB_ABI_MISMATCH;
    }
#ifdef BREAK_CREATE_BADCFG
    (void)config, (void)n_config; /* nothing here can make the toy unavailable */
    return ILAB_OK;
#elif defined(BREAK_PROBE_STRNCPY)
    char why[256] = "";
    ilab_status st = read_threads(config, n_config, why, sizeof why, ILAB_INVALID_ARGUMENT);
    if (st != ILAB_OK)
        strncpy(reason, why, reason_cap); /* bounded by the caller's capacity */
    return st;
#else
    return read_threads(config, n_config, reason, reason_cap, ILAB_INVALID_ARGUMENT);
#endif
}

static ilab_status toy_create(const ilab_host_t *host, const ilab_config_entry_t *config,
                              size_t n_config, char *error, size_t error_cap, ilab_backend_t **out)
{
    char local[2];
    if (!error || !error_cap) {
        error = local;
        error_cap = sizeof local;
    }
    error[0] = '\0';
    if (!out) {
        snprintf(error, error_cap, PLUGIN_NAME ": create: out is NULL");
        return ILAB_INVALID_ARGUMENT;
    }
    if (host && host->struct_size < sizeof(ilab_host_t)) {
        snprintf(error, error_cap, PLUGIN_NAME ": host table of %u bytes, ABI 1.0 has %zu",
                 host->struct_size, sizeof(ilab_host_t));
        return ILAB_ABI_MISMATCH;
    }
#ifdef BREAK_CREATE_BADCFG
    ilab_status st = read_threads(config, n_config, error, error_cap, ILAB_UNAVAILABLE);
#else
    ilab_status st = read_threads(config, n_config, error, error_cap, ILAB_INVALID_ARGUMENT);
#endif
    if (st != ILAB_OK)
        return st;
    ilab_backend_t *b = calloc(1, sizeof *b);
    if (!b) {
        snprintf(error, error_cap, PLUGIN_NAME ": out of memory");
        return ILAB_OUT_OF_MEMORY;
    }
    b->host = host;
    pthread_mutex_init(&b->lock, NULL);
    ilab_last_error_init(&b->error);
    toy_cache_init(&b->cache);
#ifdef BREAK_CREATE_LEAK
    b->extra = calloc(1, 2048); /* piece lookup table, rebuilt per instance */
#endif
#ifdef BREAK_CFG_LEAK
    for (size_t i = 0; i < n_config; i++) /* the value as given, for diagnostics */
        b->threads_cfg = strdup(config[i].value);
#endif
    *out = b;
    return ILAB_OK;
}

static void toy_destroy(ilab_backend_t *b)
{
    if (!b)
        return;
    toy_cache_destroy(&b->cache);
#ifndef BREAK_CREATE_LEAK
    free(b->extra);
#endif
    ilab_last_error_destroy(&b->error);
    pthread_mutex_destroy(&b->lock);
    free(b);
}

static size_t toy_last_error(const ilab_backend_t *b, char *buf, size_t cap)
{
#ifdef BREAK_LAST_ERROR_LEN
    size_t len = ilab_last_error_copy(b ? &b->error : NULL, buf, cap);
    if (cap && len >= cap)
        len = cap - 1; /* what the caller got */
    return len;
#elif defined(BREAK_LASTERR_CAP1)
    if (cap == 1) /* no room for any of the message */
        return ilab_last_error_copy(b ? &b->error : NULL, NULL, 0);
    return ilab_last_error_copy(b ? &b->error : NULL, buf, cap);
#else
    return ilab_last_error_copy(b ? &b->error : NULL, buf, cap);
#endif
}

static void fill_digest(char *digest, size_t cap)
{
    int n = snprintf(digest, cap, "sha256:");
    uint64_t h = 0x746f795f6d6f6465ull; /* the toy's parameters are a function of this */
    for (int i = 0; i < 4 && n > 0 && (size_t)n < cap; i++) {
        h = h * 6364136223846793005ull + 1442695040888963407ull;
        n += snprintf(digest + n, cap - (size_t)n, "%016llx", (unsigned long long)h);
    }
}

static ilab_status toy_model_info(ilab_backend_t *b, ilab_model_info_t *info)
{
    if (!b)
        return ILAB_INVALID_ARGUMENT;
    if (!info)
        return toy_fail(b, ILAB_INVALID_ARGUMENT, "model_info: info is NULL");
#ifdef BREAK_MODEL_INFO_SIZE
    if (info->struct_size < offsetof(ilab_model_info_t, name))
#else
    if (info->struct_size < sizeof(ilab_model_info_t))
#endif
        return toy_fail(b, ILAB_ABI_MISMATCH, "model_info: struct_size %u is smaller than ABI 1.0's %zu",
                        info->struct_size, sizeof(ilab_model_info_t));
    ilab_model_info_t full;
    memset(&full, 0, sizeof full);
#ifdef BREAK_INFO_SIZE_WRITEBACK
    full.struct_size = sizeof full; /* tells the caller how much is filled in */
#else
    full.struct_size = info->struct_size;
#endif
    full.vocab_size = TOY_VOCAB;
    full.bos_id = TOY_BOS;
    full.eos_id = TOY_EOS;
    full.max_context = TOY_MAX_CONTEXT;
    snprintf(full.name, sizeof full.name, "toy-attention-16");
    fill_digest(full.digest, sizeof full.digest);
#ifdef BREAK_LASTERR_CLEARED
    ilab_last_error_set(&b->error, ILAB_OK, "%s", ""); /* this call succeeded */
#endif
#ifdef BREAK_MODEL_INFO_SIZE
    memcpy(info, &full, sizeof full);
#else
    memcpy(info, &full, info->struct_size < sizeof full ? info->struct_size : sizeof full);
#endif
#ifdef BREAK_INFO_TAIL_ZERO
    if (info->struct_size > sizeof full) /* members this plugin does not know: zero */
        memset((char *)info + sizeof full, 0, info->struct_size - sizeof full);
#endif
    return ILAB_OK;
}

/* --- tokens ---------------------------------------------------------------------- */

static ilab_status toy_tokenize(ilab_backend_t *b, const char *text, size_t len, uint32_t flags,
                                int32_t *tokens, size_t cap, size_t *n_tokens)
{
    if (!b)
        return ILAB_INVALID_ARGUMENT;
    if ((!text && len) || !n_tokens || (!tokens && cap))
        return toy_fail(b, ILAB_INVALID_ARGUMENT, "tokenize: text, tokens or n_tokens is NULL");
#ifndef BREAK_TOK_FLAGS
    if (flags & ~(uint32_t)(ILAB_TOKENIZE_ADD_BOS | ILAB_TOKENIZE_ADD_EOS))
        return toy_fail(b, ILAB_INVALID_ARGUMENT, "tokenize: unknown flag bits 0x%x", flags);
#endif
#ifdef BREAK_EMPTY_FLAGS
    if (len == 0) { /* nothing to encode */
        *n_tokens = 0;
        return ILAB_OK;
    }
#endif
    if (len > (SIZE_MAX / sizeof(int32_t)) - 4)
        return toy_fail(b, ILAB_INVALID_ARGUMENT, "tokenize: %zu bytes is too long", len);
#ifdef BREAK_RACE_TOKENIZE
    static int32_t shared_ids[8192]; /* reused between calls: no malloc per call */
    int32_t *ids = len + 2 <= 8192 ? shared_ids : malloc((len + 2) * sizeof *ids);
#else
    int32_t *ids = malloc((len + 2) * sizeof *ids);
#endif
    if (!ids)
        return oom(b, "tokenize");
    size_t n = 0;
    if (flags & ILAB_TOKENIZE_ADD_BOS)
        ids[n++] = TOY_BOS;
#ifdef BREAK_TOK_LONG
    n += toy_encode(text, len < 4096 ? len : 4096, ids + n); /* one encoder window */
#else
    n += toy_encode(text, len, ids + n);
#endif
#ifdef BREAK_TOK_EOS_FLAG
    if (flags == ILAB_TOKENIZE_ADD_EOS)
#else
    if (flags & ILAB_TOKENIZE_ADD_EOS)
#endif
        ids[n++] = TOY_EOS;
    *n_tokens = n;
    ilab_status st = ILAB_OK;
    if (n > cap) {
#ifdef BREAK_TOK_PARTIAL
        if (cap)
            memcpy(tokens, ids, cap * sizeof *ids); /* the caller may use what fits */
#endif
        st = toy_fail(b, ILAB_BUFFER_TOO_SMALL, "tokenize: %zu tokens do not fit in %zu", n, cap);
    } else if (n) {
        memcpy(tokens, ids, n * sizeof *ids);
    }
#ifdef BREAK_RACE_TOKENIZE
    if (ids != shared_ids)
#endif
        free(ids);
    return st;
}

static int in_vocab(int32_t t) { return t >= 0 && t < TOY_VOCAB; }

static ilab_status toy_detokenize(ilab_backend_t *b, const int32_t *tokens, size_t n_tokens,
                                  char *text, size_t cap, size_t *len)
{
    if (!b)
        return ILAB_INVALID_ARGUMENT;
    if ((!tokens && n_tokens) || !len || (!text && cap))
        return toy_fail(b, ILAB_INVALID_ARGUMENT, "detokenize: tokens, text or len is NULL");
    size_t need = 0;
    char piece[2];
    for (size_t i = 0; i < n_tokens; i++) {
        if (!in_vocab(tokens[i]))
            return toy_fail(b, ILAB_INVALID_ARGUMENT, "detokenize: token %zu is %d, outside [0, %d)",
                            i, (int)tokens[i], TOY_VOCAB);
        need += toy_piece(tokens[i], piece);
    }
#ifdef BREAK_DETOK_EMPTY_QUERY
    if (need == 0 && cap == 0) { /* nothing to write */
        *len = 0;
        return ILAB_OK;
    }
#endif
    if (cap < need + 1) {
#ifdef BREAK_DETOK_SCRIBBLE
        if (cap)
            text[0] = '\0'; /* leave the caller an empty string */
#endif
        *len = need;
        return toy_fail(b, ILAB_BUFFER_TOO_SMALL, "detokenize: %zu bytes + NUL do not fit in %zu",
                        need, cap);
    }
    size_t at = 0;
    for (size_t i = 0; i < n_tokens; i++)
        at += toy_piece(tokens[i], text + at);
    text[at] = '\0';
    *len = at;
    return ILAB_OK;
}

static ilab_status toy_token_piece(ilab_backend_t *b, int32_t prev_token, int32_t token,
                                   char *piece, size_t cap, size_t *len)
{
    if (!b)
        return ILAB_INVALID_ARGUMENT;
    if (!len || (!piece && cap))
        return toy_fail(b, ILAB_INVALID_ARGUMENT, "token_piece: piece or len is NULL");
#ifdef BREAK_PREV_RANGE
    if (!in_vocab(token)) /* prev_token does not change a byte-level piece */
#elif defined(BREAK_PREV_VOCAB_EDGE)
    if (!in_vocab(token) || (prev_token != -1 && (prev_token < 0 || prev_token > TOY_VOCAB)))
#else
    if (!in_vocab(token) || (prev_token != -1 && !in_vocab(prev_token)))
#endif
        return toy_fail(b, ILAB_INVALID_ARGUMENT, "token_piece: token %d or prev_token %d outside "
                        "[0, %d) (prev_token may be -1)", (int)token, (int)prev_token, TOY_VOCAB);
    char bytes[2];
    size_t n = toy_piece(token, bytes);
#ifdef BREAK_PIECE_LEAD_SPACE
    if ((prev_token == -1 || prev_token == TOY_BOS) && n == 2 && bytes[0] == ' ') {
        bytes[0] = bytes[1]; /* no space before the first word */
        n = 1;
    }
#endif
#ifdef BREAK_PIECE_NUL
    if (cap < n) {
#else
    if (cap < n + 1) {
#endif
        *len = n;
        return toy_fail(b, ILAB_BUFFER_TOO_SMALL, "token_piece: %zu bytes + NUL do not fit in %zu",
                        n, cap);
    }
    if (n)
        memcpy(piece, bytes, n);
    if (cap > n)
        piece[n] = '\0';
    *len = n;
    return ILAB_OK;
}

/* --- sequences ----------------------------------------------------------------------- */

static ilab_status stale(ilab_backend_t *b, const char *call, ilab_seq_t seq)
{
#ifdef BREAK_EMPTY_MESSAGE
    if (!strcmp(call, "seq_length"))
        return toy_fail(b, ILAB_INVALID_ARGUMENT, "%s", "");
#endif
    return toy_fail(b, ILAB_INVALID_ARGUMENT, "%s: sequence 0x%llx is stale or was never issued",
                    call, (unsigned long long)seq);
}

static ilab_status toy_seq_create(ilab_backend_t *b, ilab_seq_t *seq)
{
    if (!b)
        return ILAB_INVALID_ARGUMENT;
    if (!seq)
        return toy_fail(b, ILAB_INVALID_ARGUMENT, "seq_create: seq is NULL");
    pthread_mutex_lock(&b->lock);
    toy_seq *s = toy_seq_new(&b->cache);
    ilab_seq_t h = s ? toy_seq_handle(&b->cache, s) : 0;
    pthread_mutex_unlock(&b->lock);
    if (!s)
        return toy_fail(b, ILAB_OUT_OF_MEMORY, "seq_create: all %d sequence slots are in use",
                        TOY_MAX_SEQS);
    *seq = h;
    return ILAB_OK;
}

static ilab_status toy_seq_free(ilab_backend_t *b, ilab_seq_t seq)
{
    if (!b)
        return ILAB_INVALID_ARGUMENT;
    pthread_mutex_lock(&b->lock);
    toy_seq *s = toy_seq_get(&b->cache, seq);
    if (s)
        toy_seq_release(s);
    pthread_mutex_unlock(&b->lock);
    return s ? ILAB_OK : stale(b, "seq_free", seq);
}

static ilab_status toy_seq_fork_api(ilab_backend_t *b, ilab_seq_t parent, ilab_seq_t *child)
{
    if (!b)
        return ILAB_INVALID_ARGUMENT;
    if (!child)
        return toy_fail(b, ILAB_INVALID_ARGUMENT, "seq_fork: child is NULL");
    pthread_mutex_lock(&b->lock);
    toy_seq *p = toy_seq_get(&b->cache, parent);
    if (!p) {
        pthread_mutex_unlock(&b->lock);
        return stale(b, "seq_fork", parent);
    }
    toy_seq *c = toy_seq_new_for_fork(&b->cache);
    if (!c) {
        pthread_mutex_unlock(&b->lock);
#ifdef BREAK_FORK_OOM_STATUS
        /* no room for the child: the request cannot be honoured as given */
        return toy_fail(b, ILAB_INVALID_ARGUMENT, "seq_fork: all %d sequence slots are in use",
                        TOY_MAX_SEQS);
#else
        return toy_fail(b, ILAB_OUT_OF_MEMORY, "seq_fork: all %d sequence slots are in use",
                        TOY_MAX_SEQS);
#endif
    }
    if (toy_seq_fork(p, c) != 0) {
        toy_seq_release(c);
        pthread_mutex_unlock(&b->lock);
        return oom(b, "seq_fork");
    }
    *child = toy_seq_handle(&b->cache, c);
    pthread_mutex_unlock(&b->lock);
    return ILAB_OK;
}

static ilab_status toy_seq_truncate_api(ilab_backend_t *b, ilab_seq_t seq, int32_t n_keep)
{
    if (!b)
        return ILAB_INVALID_ARGUMENT;
    pthread_mutex_lock(&b->lock);
    toy_seq *s = toy_seq_get(&b->cache, seq);
    int32_t len = s ? s->len : 0;
#ifdef BREAK_TRUNC_OVER
    /* anything inside the allocated blocks is a valid length */
    int ok = s && n_keep >= 0 && n_keep <= (len + TOY_BLOCK - 1) / TOY_BLOCK * TOY_BLOCK;
    if (ok && n_keep <= len)
        toy_seq_truncate(s, n_keep);
#else
    int ok = s && n_keep >= 0 && n_keep <= len;
    if (ok)
        toy_seq_truncate(s, n_keep);
#endif
    pthread_mutex_unlock(&b->lock);
    if (!s)
        return stale(b, "seq_truncate", seq);
#ifdef BREAK_TRUNC_NEG_MSG
    if (!ok && n_keep < 0)
        return toy_fail(b, ILAB_INVALID_ARGUMENT, "%s", "");
#endif
    if (!ok)
        return toy_fail(b, ILAB_INVALID_ARGUMENT, "seq_truncate: n_keep %d is outside 0..%d",
                        (int)n_keep, (int)len);
    return ILAB_OK;
}

static ilab_status toy_seq_length(ilab_backend_t *b, ilab_seq_t seq, int32_t *length)
{
    if (!b)
        return ILAB_INVALID_ARGUMENT;
    if (!length)
        return toy_fail(b, ILAB_INVALID_ARGUMENT, "seq_length: length is NULL");
    pthread_mutex_lock(&b->lock);
    toy_seq *s = toy_seq_get(&b->cache, seq);
    int32_t n = s ? s->len : 0;
    pthread_mutex_unlock(&b->lock);
    if (!s)
        return stale(b, "seq_length", seq);
    *length = n;
    return ILAB_OK;
}

/* --- evaluation ------------------------------------------------------------------------- */

static ilab_status check_item(ilab_backend_t *b, const ilab_batch_item_t *it, size_t i, toy_seq **out)
{
    if (!it)
        return toy_fail(b, ILAB_INVALID_ARGUMENT, "eval: item %zu is NULL", i);
#ifndef BREAK_ITEM_SIZE
    if (it->struct_size < sizeof(ilab_batch_item_t))
        return toy_fail(b, ILAB_ABI_MISMATCH, "eval: item %zu has struct_size %u, ABI 1.0's is %zu",
                        i, it->struct_size, sizeof(ilab_batch_item_t));
#endif
#ifdef BREAK_ITEM_TAIL_FIRST
    if (i == 0 && !ilab_struct_tail_is_zero(it, sizeof *it)) /* one host wrote every item */
#else
    if (!ilab_struct_tail_is_zero(it, sizeof *it))
#endif
        return toy_fail(b, ILAB_ABI_MISMATCH, "eval: item %zu sets members past this plugin's "
                        "ilab_batch_item_t (%zu bytes)", i, sizeof *it);
    toy_seq *s = toy_seq_get(&b->cache, it->seq);
    if (!s)
        return stale(b, "eval", it->seq);
    if (!it->tokens || it->n_tokens < 1)
        return toy_fail(b, ILAB_INVALID_ARGUMENT, "eval: item %zu has no tokens (n_tokens %d)", i,
                        (int)it->n_tokens);
#ifdef BREAK_DECODE_FLAGS
    if (it->n_tokens > 1 && (it->flags & ~(uint32_t)ILAB_EVAL_ALL_LOGITS)) /* one row either way */
#else
    if (it->flags & ~(uint32_t)ILAB_EVAL_ALL_LOGITS)
#endif
        return toy_fail(b, ILAB_INVALID_ARGUMENT, "eval: item %zu has unknown flag bits 0x%x", i,
                        it->flags);
    for (int32_t t = 0; t < it->n_tokens; t++)
#ifdef BREAK_EVAL_VOCAB_EDGE
        if (it->tokens[t] < 0 || it->tokens[t] > TOY_VOCAB)
#else
        if (!in_vocab(it->tokens[t]))
#endif
            return toy_fail(b, ILAB_INVALID_ARGUMENT, "eval: item %zu token %d is %d, outside "
                            "[0, %d)", i, (int)t, (int)it->tokens[t], TOY_VOCAB);
#ifdef BREAK_OVERFLOW_PREFILL
    /* a decode must find room; a prompt must fit the context */
    int over = it->n_tokens == 1 ? s->len >= TOY_MAX_CONTEXT : it->n_tokens > TOY_MAX_CONTEXT;
#elif defined(BREAK_PREFILL_EXACT)
    /* a prefill leaves room for the token its logits predict */
    int over = it->n_tokens > TOY_MAX_CONTEXT - s->len ||
               (it->n_tokens > 1 && it->n_tokens == TOY_MAX_CONTEXT - s->len);
#else
    int over = it->n_tokens > TOY_MAX_CONTEXT - s->len;
#endif
    if (over)
        return toy_fail(b, ILAB_CONTEXT_OVERFLOW, "eval: item %zu: %d positions + %d tokens pass "
                        "max_context %d", i, (int)s->len, (int)it->n_tokens, TOY_MAX_CONTEXT);
    *out = s;
    return ILAB_OK;
}

static ilab_status run_item(ilab_backend_t *b, const ilab_batch_item_t *it, toy_seq *s,
                            size_t n_items)
{
    if (toy_append(&b->cache, s, it->tokens, it->n_tokens,
                   (it->flags & ILAB_EVAL_ALL_LOGITS) != 0, it->logits, b->scratch,
                   (int)n_items) != 0)
        return oom(b, "eval");
    return ILAB_OK;
}

static ilab_status toy_eval(ilab_backend_t *b, const ilab_batch_item_t *const *items,
                            size_t n_items)
{
    if (!b)
        return ILAB_INVALID_ARGUMENT;
    if (!items)
        return toy_fail(b, ILAB_INVALID_ARGUMENT, "eval: items is NULL");
    if (n_items == 0 || n_items > EVAL_ITEMS_MAX)
        return toy_fail(b, ILAB_INVALID_ARGUMENT, "eval: %zu items; 1..%d are allowed", n_items,
                        EVAL_ITEMS_MAX);
    toy_seq *seqs[EVAL_ITEMS_MAX];
    pthread_mutex_lock(&b->lock);
    b->cache.evals++;
    ilab_status st = ILAB_OK;
    for (size_t i = 0; i < n_items && st == ILAB_OK; i++) {
        st = check_item(b, items[i], i, &seqs[i]);
#ifdef BREAK_DUP_ADJACENT
        for (size_t j = i ? i - 1 : 0; st == ILAB_OK && j < i; j++) /* batches come sorted */
#else
        for (size_t j = 0; st == ILAB_OK && j < i; j++)
#endif
            if (seqs[j] == seqs[i])
                st = toy_fail(b, ILAB_INVALID_ARGUMENT, "eval: items %zu and %zu name one sequence",
                              j, i);
#ifdef BREAK_EVAL_NOT_ATOMIC
        if (st == ILAB_OK) /* evaluate as soon as the item is known good */
            st = run_item(b, items[i], seqs[i], n_items);
#endif
    }
#ifndef BREAK_EVAL_NOT_ATOMIC
    /* All-or-nothing: every item checked before any sequence changes. */
    for (size_t i = 0; i < n_items && st == ILAB_OK; i++) {
#ifdef BREAK_RACE
        /* the forward pass needs no lock: each item owns its sequence */
        pthread_mutex_unlock(&b->lock);
        st = run_item(b, items[i], seqs[i], n_items);
        pthread_mutex_lock(&b->lock);
#else
        st = run_item(b, items[i], seqs[i], n_items);
#endif
    }
#endif
    pthread_mutex_unlock(&b->lock);
    return st;
}

ilab_status toy_eval_one(ilab_backend_t *b, toy_seq *s, const int32_t *tokens, int32_t n,
                         float *logits)
{
    pthread_mutex_lock(&b->lock);
    b->cache.evals++;
    int rc = toy_append(&b->cache, s, tokens, n, 0, logits, b->scratch, 1);
    pthread_mutex_unlock(&b->lock);
    return rc == 0 ? ILAB_OK : oom(b, "generate");
}

/* --- generation ----------------------------------------------------------------------------- */

#ifndef INDEP_GEN
static ilab_status toy_generate(ilab_backend_t *b, const ilab_generate_request_t *request,
                                ilab_event_fn on_event, void *user_data)
{
    (void)request, (void)on_event, (void)user_data;
    return toy_fail(b, ILAB_UNSUPPORTED, "generate: capability 'sampling: backend' not declared "
                    "(this backend is sampled by the host)");
}

static ilab_status toy_cancel(ilab_backend_t *b, uint64_t request_id)
{
#ifdef BREAK_CANCEL_OK
    (void)request_id;
    return ILAB_OK; /* no request of this backend is ever running: nothing to cancel */
#else
    return toy_fail(b, ILAB_UNSUPPORTED, "cancel: capability 'cancel' not declared (request %llu)",
                    (unsigned long long)request_id);
#endif
}
#endif

static ilab_status toy_cache_stats(ilab_backend_t *b, ilab_cache_stats_t *stats)
{
#ifdef BREAK_STATS_ANSWER
    if (b && stats && stats->struct_size >= sizeof *stats) { /* the numbers are at hand */
        int64_t held = 0;
        pthread_mutex_lock(&b->lock);
        for (int i = 0; i < TOY_MAX_SEQS; i++)
            if (b->cache.seqs[i].in_use)
                held += b->cache.seqs[i].n_blocks;
        pthread_mutex_unlock(&b->lock);
        stats->block_size = TOY_BLOCK;
        stats->total_positions = (int64_t)TOY_MAX_SEQS * TOY_MAX_CONTEXT;
        stats->free_positions = stats->total_positions - held * TOY_BLOCK;
        return ILAB_OK;
    }
#endif
    (void)stats;
    return toy_fail(b, ILAB_UNSUPPORTED, "cache_stats: capability 'cache.stats' not declared");
}

static const ilab_backend_api_t api = {
    .struct_size = sizeof(ilab_backend_api_t),
    .probe = toy_probe,
    .create = toy_create,
    .destroy = toy_destroy,
    .last_error = toy_last_error,
    .model_info = toy_model_info,
    .tokenize = toy_tokenize,
    .detokenize = toy_detokenize,
    .token_piece = toy_token_piece,
    .seq_create = toy_seq_create,
    .seq_free = toy_seq_free,
    .seq_fork = toy_seq_fork_api,
    .seq_truncate = toy_seq_truncate_api,
    .seq_length = toy_seq_length,
    .eval = toy_eval,
    .generate = toy_generate,
    .cancel = toy_cancel,
    .cache_stats = toy_cache_stats,
};

ILAB_PLUGIN_EXPORT const ilab_plugin_entry_t ilab_plugin_entry = {
    .struct_size = sizeof(ilab_plugin_entry_t),
    .abi_major = ILAB_ABI_MAJOR,
    .abi_minor = 0, /* needs nothing past ABI 1.0 */
    .name = PLUGIN_NAME,
    .version = "0.1.0",
    .manifest_yaml = manifest,
    .backend = &api,
};
