/* counting_backend — a test-only plugin for the runtime's engine tests.
 *
 * Logits are a hash of the WHOLE sequence so far (not just the last token),
 * so a scheduler that mixed up two sequences' tokens in a batch, skipped a
 * token or fed one twice would get different logits — and different tokens.
 * The tokenizer is byte-level with byte fallback ids (3 + byte), BOS 1,
 * EOS 2, so UTF-8 hold-back is exercised by any multi-byte text.
 *
 * Config (for fault tests):
 *   eos_bias    float  added to EOS's logit (default -100: never ends early)
 *   fail_after  int    eval() fails with ILAB_INTERNAL after this many calls
 *                      (0 = never)
 *   max_batch is 8, so the engine must cap its running batch. */
#include <inferlab/inferlab.h>

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VOCAB 259
#define BOS 1
#define EOS 2
#define BYTE0 3
#define MAX_CONTEXT 512
#define MAX_SEQS 64
#define MAX_BATCH 8

static const char manifest[] =
    "name: counting_backend\n"
    "version: 0.1.0\n"
    "abi: 1.0\n"
    "description: Test backend whose logits hash the whole sequence.\n"
    "capabilities:\n"
    "  tokenizer: true\n"
    "  logits: full\n"
    "  topk_max: 8\n"
    "  sampling: host\n"
    "  cache: {fork: false, truncate: false}\n"
    "  batching: {max_batch: 8}\n"
    "  streaming: false\n"
    "  cancel: false\n"
    "  max_context: 512\n"
    "  thread_safety: none\n"
    "config:\n"
    "  eos_bias:\n"
    "    type: float\n"
    "    default: -100\n"
    "    description: Added to the EOS logit.\n"
    "  fail_after:\n"
    "    type: int\n"
    "    default: 0\n"
    "    description: eval() fails after this many calls; 0 = never.\n";

typedef struct sequence {
    uint32_t generation;
    int in_use;
    int32_t len;
    uint64_t hash;
} sequence;

struct ilab_backend {
    float eos_bias;
    long fail_after;
    long evals;
    sequence seqs[MAX_SEQS];
    pthread_mutex_t error_lock;
    char error[256];
};

static ilab_status fail(ilab_backend_t *b, ilab_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static ilab_status fail(ilab_backend_t *b, ilab_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&b->error_lock);
    vsnprintf(b->error, sizeof b->error, fmt, ap);
    pthread_mutex_unlock(&b->error_lock);
    va_end(ap);
    return st;
}

static uint64_t mix(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void logits_for(const ilab_backend_t *b, uint64_t hash, float *out)
{
    for (int v = 0; v < VOCAB; v++)
        out[v] = (float)(mix(hash ^ ((uint64_t)v * 0x100000001b3ull)) >> 40) / (float)(1 << 24) * 8.0f - 4.0f;
    out[0] = -100.0f; /* <unk> */
    out[BOS] = -100.0f;
    out[EOS] += b->eos_bias;
}

static ilab_status cb_probe(const ilab_host_t *host, const ilab_config_entry_t *config, size_t n,
                            char *reason, size_t cap)
{
    if (reason && cap)
        reason[0] = '\0';
    return ILAB_OK;
}

static ilab_status cb_create(const ilab_host_t *host, const ilab_config_entry_t *config, size_t n,
                             char *error, size_t cap, ilab_backend_t **out)
{
    ilab_backend_t *b = calloc(1, sizeof *b);
    if (!b) {
        snprintf(error, cap, "out of memory");
        return ILAB_OUT_OF_MEMORY;
    }
    b->eos_bias = -100.0f;
    for (size_t i = 0; i < n; i++) {
        if (!strcmp(config[i].key, "eos_bias"))
            b->eos_bias = strtof(config[i].value, NULL);
        else if (!strcmp(config[i].key, "fail_after"))
            b->fail_after = strtol(config[i].value, NULL, 10);
    }
    pthread_mutex_init(&b->error_lock, NULL);
    *out = b;
    return ILAB_OK;
}

static void cb_destroy(ilab_backend_t *b)
{
    if (!b)
        return;
    pthread_mutex_destroy(&b->error_lock);
    free(b);
}

static size_t cb_last_error(const ilab_backend_t *b, char *buf, size_t cap)
{
    ilab_backend_t *m = (ilab_backend_t *)b;
    pthread_mutex_lock(&m->error_lock);
    size_t len = strlen(m->error);
    if (buf && cap)
        snprintf(buf, cap, "%s", m->error);
    pthread_mutex_unlock(&m->error_lock);
    return len;
}

static ilab_status cb_model_info(ilab_backend_t *b, ilab_model_info_t *info)
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
    snprintf(m.name, sizeof m.name, "counting");
    size_t n = info->struct_size < sizeof m ? info->struct_size : sizeof m;
    memcpy((char *)info + sizeof m.struct_size, (char *)&m + sizeof m.struct_size, n - sizeof m.struct_size);
    return ILAB_OK;
}

static ilab_status cb_tokenize(ilab_backend_t *b, const char *text, size_t len, uint32_t flags,
                               int32_t *tokens, size_t cap, size_t *n_tokens)
{
    if ((!text && len) || !n_tokens)
        return fail(b, ILAB_INVALID_ARGUMENT, "tokenize: NULL argument");
    size_t need = len + ((flags & ILAB_TOKENIZE_ADD_BOS) ? 1 : 0) + ((flags & ILAB_TOKENIZE_ADD_EOS) ? 1 : 0);
    if (cap < need) {
        *n_tokens = need;
        return fail(b, ILAB_BUFFER_TOO_SMALL, "tokenize: need %zu tokens", need);
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

static ilab_status cb_token_piece(ilab_backend_t *b, int32_t prev, int32_t token, char *piece,
                                  size_t cap, size_t *len)
{
    if (!len || token < 0 || token >= VOCAB)
        return fail(b, ILAB_INVALID_ARGUMENT, "token_piece: token %d out of range", token);
    size_t n = token >= BYTE0 ? 1 : 0;
    *len = n;
    if (cap < n + 1)
        return fail(b, ILAB_BUFFER_TOO_SMALL, "token_piece: need %zu bytes", n + 1);
    if (n)
        piece[0] = (char)(token - BYTE0);
    piece[n] = '\0';
    return ILAB_OK;
}

static ilab_status cb_detokenize(ilab_backend_t *b, const int32_t *tokens, size_t n, char *text,
                                 size_t cap, size_t *len)
{
    if (!len || (!tokens && n))
        return fail(b, ILAB_INVALID_ARGUMENT, "detokenize: NULL argument");
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] >= VOCAB)
            return fail(b, ILAB_INVALID_ARGUMENT, "detokenize: token %d out of range", tokens[i]);
        if (tokens[i] >= BYTE0)
            k++;
    }
    *len = k;
    if (cap < k + 1)
        return fail(b, ILAB_BUFFER_TOO_SMALL, "detokenize: need %zu bytes", k + 1);
    k = 0;
    for (size_t i = 0; i < n; i++)
        if (tokens[i] >= BYTE0)
            text[k++] = (char)(tokens[i] - BYTE0);
    text[k] = '\0';
    return ILAB_OK;
}

static sequence *lookup(ilab_backend_t *b, ilab_seq_t h)
{
    uint32_t slot = (uint32_t)(h & 0xffffffffu);
    uint32_t gen = (uint32_t)(h >> 32);
    if (slot == 0 || slot > MAX_SEQS)
        return NULL;
    sequence *s = &b->seqs[slot - 1];
    return s->in_use && s->generation == gen ? s : NULL;
}

static ilab_status cb_seq_create(ilab_backend_t *b, ilab_seq_t *out)
{
    for (uint32_t i = 0; i < MAX_SEQS; i++)
        if (!b->seqs[i].in_use) {
            sequence *s = &b->seqs[i];
            s->in_use = 1;
            s->generation++;
            s->len = 0;
            s->hash = 0x12345;
            *out = ((uint64_t)s->generation << 32) | (i + 1);
            return ILAB_OK;
        }
    return fail(b, ILAB_OUT_OF_MEMORY, "seq_create: all %d sequence slots in use", MAX_SEQS);
}

static ilab_status cb_seq_free(ilab_backend_t *b, ilab_seq_t h)
{
    sequence *s = lookup(b, h);
    if (!s)
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_free: stale handle");
    s->in_use = 0;
    return ILAB_OK;
}

static ilab_status cb_seq_fork(ilab_backend_t *b, ilab_seq_t p, ilab_seq_t *c)
{
    return fail(b, ILAB_UNSUPPORTED, "seq_fork: capability cache.fork not declared");
}

static ilab_status cb_seq_truncate(ilab_backend_t *b, ilab_seq_t h, int32_t n)
{
    return fail(b, ILAB_UNSUPPORTED, "seq_truncate: capability cache.truncate not declared");
}

static ilab_status cb_seq_length(ilab_backend_t *b, ilab_seq_t h, int32_t *len)
{
    sequence *s = lookup(b, h);
    if (!s || !len)
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_length: stale handle");
    *len = s->len;
    return ILAB_OK;
}

static ilab_status cb_eval(ilab_backend_t *b, const ilab_batch_item_t *const *items, size_t n)
{
    if (!items || n == 0 || n > MAX_BATCH)
        return fail(b, ILAB_INVALID_ARGUMENT, "eval: %zu items (must be 1..%d)", n, MAX_BATCH);
    b->evals++;
    if (b->fail_after > 0 && b->evals > b->fail_after)
        return fail(b, ILAB_INTERNAL, "eval: injected failure after %ld calls", b->fail_after);
    for (size_t i = 0; i < n; i++) {
        sequence *s = lookup(b, items[i]->seq);
        if (!s || items[i]->n_tokens < 1 || !items[i]->tokens)
            return fail(b, ILAB_INVALID_ARGUMENT, "eval: item %zu: stale handle or no tokens", i);
        for (size_t j = 0; j < i; j++)
            if (items[j]->seq == items[i]->seq)
                return fail(b, ILAB_INVALID_ARGUMENT, "eval: sequence appears twice");
        if (s->len + items[i]->n_tokens > MAX_CONTEXT)
            return fail(b, ILAB_CONTEXT_OVERFLOW, "eval: item %zu would pass max_context %d", i, MAX_CONTEXT);
    }
    for (size_t i = 0; i < n; i++) {
        const ilab_batch_item_t *it = items[i];
        sequence *s = lookup(b, it->seq);
        for (int32_t t = 0; t < it->n_tokens; t++) {
            s->hash = mix(s->hash ^ (uint64_t)it->tokens[t]);
            s->len++;
            if (it->logits && ((it->flags & ILAB_EVAL_ALL_LOGITS) || t == it->n_tokens - 1))
                logits_for(b, s->hash, it->logits + ((it->flags & ILAB_EVAL_ALL_LOGITS) ? (size_t)t * VOCAB : 0));
        }
    }
    return ILAB_OK;
}

static ilab_status cb_generate(ilab_backend_t *b, const ilab_generate_request_t *r, ilab_event_fn f, void *u)
{
    return fail(b, ILAB_UNSUPPORTED, "generate: capability sampling: backend not declared");
}

static ilab_status cb_cancel(ilab_backend_t *b, uint64_t id)
{
    return fail(b, ILAB_UNSUPPORTED, "cancel: capability cancel not declared");
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
};

ILAB_PLUGIN_EXPORT const ilab_plugin_entry_t ilab_plugin_entry = {
    .struct_size = sizeof(ilab_plugin_entry_t),
    .abi_major = ILAB_ABI_MAJOR,
    .abi_minor = ILAB_ABI_MINOR,
    .name = "counting_backend",
    .version = "0.1.0",
    .manifest_yaml = manifest,
    .backend = &api,
};
