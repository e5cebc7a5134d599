/* paced_backend — a test-only plugin for the HTTP server's tests.
 *
 * A byte-level toy language model whose eval() can be slowed down
 * (config step_ms): the server tests need a stream that is still running
 * when the client hangs up, and a queue that fills up, which a model taking
 * microseconds per token cannot give. Logits depend only on the last two
 * tokens (a hashed bigram over printable ASCII), so a sequence decoded in a
 * batch gets exactly the logits it gets alone.
 *
 * Tokens: ids 0..255 are bytes, 256 BOS, 257 EOS. thread_safety: full (one
 * internal mutex). Not shipped: built under the test build directory. */
#include <inferlab/inferlab.h>

#include <pthread.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define VOCAB 258
#define BOS 256
#define EOS 257
#define MAX_CONTEXT 2048
#define MAX_SEQS 128

static const char manifest[] =
    "name: paced_backend\n"
    "version: 0.1.0\n"
    "abi: 1.0\n"
    "description: Test-only byte-level toy model whose steps can be slowed down.\n"
    "capabilities:\n"
    "  tokenizer: true\n"
    "  logits: full\n"
    "  topk_max: 20\n"
    "  sampling: host\n"
    "  cache: {fork: false, truncate: false}\n"
    "  batching: {max_batch: 64}\n"
    "  streaming: false\n"
    "  cancel: false\n"
    "  max_context: 2048\n"
    "  thread_safety: full\n"
    "config:\n"
    "  step_ms:\n"
    "    type: int\n"
    "    default: 0\n"
    "    description: Milliseconds each eval() call sleeps.\n";

typedef struct sequence {
    uint32_t generation;
    int in_use;
    int32_t len;
    int32_t tokens[MAX_CONTEXT];
} sequence;

struct ilab_backend {
    long step_ms;
    pthread_mutex_t mu;
    sequence *seqs; /* MAX_SEQS */
    char error[256];
};

static ilab_status fail(ilab_backend_t *b, ilab_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static ilab_status fail(ilab_backend_t *b, ilab_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->error, sizeof b->error, fmt, ap);
    va_end(ap);
    return st;
}

static long config_step_ms(const ilab_config_entry_t *config, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (config[i].key && !strcmp(config[i].key, "step_ms") && config[i].value)
            return strtol(config[i].value, NULL, 10);
    return 0;
}

static ilab_status pb_probe(const ilab_host_t *host, const ilab_config_entry_t *config,
                            size_t n_config, char *reason, size_t reason_cap)
{
    (void)host;
    (void)config;
    (void)n_config;
    if (reason && reason_cap)
        reason[0] = '\0';
    return ILAB_OK;
}

static ilab_status pb_create(const ilab_host_t *host, const ilab_config_entry_t *config,
                             size_t n_config, char *error, size_t error_cap,
                             ilab_backend_t **out)
{
    (void)host;
    if (!out) {
        snprintf(error, error_cap, "create: out is NULL");
        return ILAB_INVALID_ARGUMENT;
    }
    ilab_backend_t *b = calloc(1, sizeof *b);
    if (b)
        b->seqs = calloc(MAX_SEQS, sizeof *b->seqs);
    if (!b || !b->seqs) {
        if (b)
            free(b);
        snprintf(error, error_cap, "create: out of memory");
        return ILAB_OUT_OF_MEMORY;
    }
    b->step_ms = config_step_ms(config, n_config);
    pthread_mutex_init(&b->mu, NULL);
    *out = b;
    return ILAB_OK;
}

static void pb_destroy(ilab_backend_t *b)
{
    if (!b)
        return;
    pthread_mutex_destroy(&b->mu);
    free(b->seqs);
    free(b);
}

static size_t pb_last_error(const ilab_backend_t *b, char *buf, size_t cap)
{
    ilab_backend_t *mb = (ilab_backend_t *)b;
    pthread_mutex_lock(&mb->mu);
    size_t n = strlen(mb->error);
    if (buf && cap)
        snprintf(buf, cap, "%s", mb->error);
    pthread_mutex_unlock(&mb->mu);
    return n;
}

static ilab_status pb_model_info(ilab_backend_t *b, ilab_model_info_t *info)
{
    if (!b || !info)
        return ILAB_INVALID_ARGUMENT;
    ilab_model_info_t full = {.struct_size = sizeof full, .vocab_size = VOCAB, .bos_id = BOS,
                              .eos_id = EOS, .max_context = MAX_CONTEXT};
    snprintf(full.name, sizeof full.name, "paced-bigram");
    size_t n = info->struct_size < sizeof full ? info->struct_size : sizeof full;
    memcpy((char *)info + sizeof info->struct_size, (char *)&full + sizeof full.struct_size,
           n - sizeof full.struct_size);
    return ILAB_OK;
}

static ilab_status pb_tokenize(ilab_backend_t *b, const char *text, size_t len, uint32_t flags,
                               int32_t *tokens, size_t cap, size_t *n_tokens)
{
    if (!b || (!text && len) || !n_tokens)
        return ILAB_INVALID_ARGUMENT;
    size_t need = len + !!(flags & ILAB_TOKENIZE_ADD_BOS) + !!(flags & ILAB_TOKENIZE_ADD_EOS);
    if (cap < need || !tokens) {
        *n_tokens = need;
        pthread_mutex_lock(&b->mu);
        fail(b, ILAB_BUFFER_TOO_SMALL, "tokenize: %zu tokens need room, %zu given", need, cap);
        pthread_mutex_unlock(&b->mu);
        return ILAB_BUFFER_TOO_SMALL;
    }
    size_t o = 0;
    if (flags & ILAB_TOKENIZE_ADD_BOS)
        tokens[o++] = BOS;
    for (size_t i = 0; i < len; i++)
        tokens[o++] = (unsigned char)text[i];
    if (flags & ILAB_TOKENIZE_ADD_EOS)
        tokens[o++] = EOS;
    *n_tokens = o;
    return ILAB_OK;
}

static ilab_status pb_detokenize(ilab_backend_t *b, const int32_t *tokens, size_t n,
                                 char *text, size_t cap, size_t *len)
{
    if (!b || (!tokens && n) || !len)
        return ILAB_INVALID_ARGUMENT;
    size_t need = 0;
    for (size_t i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] >= VOCAB) {
            pthread_mutex_lock(&b->mu);
            fail(b, ILAB_INVALID_ARGUMENT, "detokenize: token %d is out of range", tokens[i]);
            pthread_mutex_unlock(&b->mu);
            return ILAB_INVALID_ARGUMENT;
        }
        need += tokens[i] < 256;
    }
    if (!text || cap < need + 1) {
        *len = need;
        return ILAB_BUFFER_TOO_SMALL;
    }
    size_t o = 0;
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 256)
            text[o++] = (char)tokens[i];
    text[o] = '\0';
    *len = o;
    return ILAB_OK;
}

static ilab_status pb_token_piece(ilab_backend_t *b, int32_t prev, int32_t token, char *piece,
                                  size_t cap, size_t *len)
{
    (void)prev;
    if (!b || !len || token < 0 || token >= VOCAB)
        return ILAB_INVALID_ARGUMENT;
    size_t need = token < 256;
    if (!piece || cap < need + 1) {
        *len = need;
        return ILAB_BUFFER_TOO_SMALL;
    }
    if (need)
        piece[0] = (char)token;
    piece[need] = '\0';
    *len = need;
    return ILAB_OK;
}

static sequence *lookup(ilab_backend_t *b, ilab_seq_t h)
{
    uint32_t slot = (uint32_t)(h & 0xffffffffu);
    if (slot == 0 || slot > MAX_SEQS)
        return NULL;
    sequence *s = &b->seqs[slot - 1];
    return s->in_use && s->generation == (uint32_t)(h >> 32) ? s : NULL;
}

static ilab_status pb_seq_create(ilab_backend_t *b, ilab_seq_t *out)
{
    if (!b || !out)
        return ILAB_INVALID_ARGUMENT;
    pthread_mutex_lock(&b->mu);
    for (uint32_t i = 0; i < MAX_SEQS; i++) {
        sequence *s = &b->seqs[i];
        if (!s->in_use) {
            s->in_use = 1;
            s->generation++;
            s->len = 0;
            *out = ((uint64_t)s->generation << 32) | (i + 1);
            pthread_mutex_unlock(&b->mu);
            return ILAB_OK;
        }
    }
    ilab_status st = fail(b, ILAB_OUT_OF_MEMORY, "seq_create: all %d sequences in use", MAX_SEQS);
    pthread_mutex_unlock(&b->mu);
    return st;
}

static ilab_status pb_seq_free(ilab_backend_t *b, ilab_seq_t h)
{
    if (!b)
        return ILAB_INVALID_ARGUMENT;
    pthread_mutex_lock(&b->mu);
    sequence *s = lookup(b, h);
    ilab_status st = ILAB_OK;
    if (s)
        s->in_use = 0;
    else
        st = fail(b, ILAB_INVALID_ARGUMENT, "seq_free: stale or unknown handle");
    pthread_mutex_unlock(&b->mu);
    return st;
}

static ilab_status pb_seq_fork(ilab_backend_t *b, ilab_seq_t parent, ilab_seq_t *child)
{
    (void)parent;
    (void)child;
    if (!b)
        return ILAB_INVALID_ARGUMENT;
    pthread_mutex_lock(&b->mu);
    fail(b, ILAB_UNSUPPORTED, "seq_fork: capability cache.fork not declared");
    pthread_mutex_unlock(&b->mu);
    return ILAB_UNSUPPORTED;
}

static ilab_status pb_seq_truncate(ilab_backend_t *b, ilab_seq_t seq, int32_t n_keep)
{
    (void)seq;
    (void)n_keep;
    if (!b)
        return ILAB_INVALID_ARGUMENT;
    pthread_mutex_lock(&b->mu);
    fail(b, ILAB_UNSUPPORTED, "seq_truncate: capability cache.truncate not declared");
    pthread_mutex_unlock(&b->mu);
    return ILAB_UNSUPPORTED;
}

static ilab_status pb_seq_length(ilab_backend_t *b, ilab_seq_t h, int32_t *length)
{
    if (!b || !length)
        return ILAB_INVALID_ARGUMENT;
    pthread_mutex_lock(&b->mu);
    sequence *s = lookup(b, h);
    ilab_status st = ILAB_OK;
    if (s)
        *length = s->len;
    else
        st = fail(b, ILAB_INVALID_ARGUMENT, "seq_length: stale or unknown handle");
    pthread_mutex_unlock(&b->mu);
    return st;
}

static uint32_t mix(uint32_t x)
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
static void bigram_logits(int32_t prev, int32_t cur, float *out)
{
    for (int32_t v = 0; v < VOCAB; v++) {
        bool printable = v == ' ' || (v >= 'a' && v <= 'z') || v == '.' || v == ',';
        uint32_t h = mix((uint32_t)(prev + 1) * 0x9E3779B1u ^ mix((uint32_t)cur * 0x85EBCA77u ^
                                                                  (uint32_t)v));
        out[v] = printable ? (float)(h % 4000u) / 1000.0f : -20.0f;
    }
}

static ilab_status pb_eval(ilab_backend_t *b, const ilab_batch_item_t *const *items,
                           size_t n_items)
{
    if (!b || (!items && n_items))
        return ILAB_INVALID_ARGUMENT;
    pthread_mutex_lock(&b->mu);
    for (size_t i = 0; i < n_items; i++) {
        const ilab_batch_item_t *it = items[i];
        sequence *s = it ? lookup(b, it->seq) : NULL;
        if (!s || it->n_tokens < 1 || !it->tokens) {
            ilab_status st = fail(b, ILAB_INVALID_ARGUMENT, "eval: item %zu is invalid", i);
            pthread_mutex_unlock(&b->mu);
            return st;
        }
        if (s->len + it->n_tokens > MAX_CONTEXT) {
            ilab_status st = fail(b, ILAB_CONTEXT_OVERFLOW,
                                  "eval: item %zu would pass max_context %d", i, MAX_CONTEXT);
            pthread_mutex_unlock(&b->mu);
            return st;
        }
        for (int32_t t = 0; t < it->n_tokens; t++)
            if (it->tokens[t] < 0 || it->tokens[t] >= VOCAB) {
                ilab_status st = fail(b, ILAB_INVALID_ARGUMENT, "eval: token %d out of range",
                                      it->tokens[t]);
                pthread_mutex_unlock(&b->mu);
                return st;
            }
    }
    for (size_t i = 0; i < n_items; i++) {
        const ilab_batch_item_t *it = items[i];
        sequence *s = lookup(b, it->seq);
        for (int32_t t = 0; t < it->n_tokens; t++) {
            s->tokens[s->len] = it->tokens[t];
            s->len++;
            bool want = (it->flags & ILAB_EVAL_ALL_LOGITS) || t == it->n_tokens - 1;
            if (want && it->logits) {
                float *row = it->logits + ((it->flags & ILAB_EVAL_ALL_LOGITS) ? t * VOCAB : 0);
                bigram_logits(s->len > 1 ? s->tokens[s->len - 2] : -1, s->tokens[s->len - 1],
                              row);
            }
        }
    }
    long step_ms = b->step_ms;
    pthread_mutex_unlock(&b->mu);
    if (step_ms > 0) {
        struct timespec ts = {.tv_sec = step_ms / 1000, .tv_nsec = (step_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    return ILAB_OK;
}

static ilab_status pb_generate(ilab_backend_t *b, const ilab_generate_request_t *request,
                               ilab_event_fn on_event, void *user_data)
{
    (void)request;
    (void)on_event;
    (void)user_data;
    if (!b)
        return ILAB_INVALID_ARGUMENT;
    pthread_mutex_lock(&b->mu);
    fail(b, ILAB_UNSUPPORTED, "generate: capability sampling: backend not declared");
    pthread_mutex_unlock(&b->mu);
    return ILAB_UNSUPPORTED;
}

static ilab_status pb_cancel(ilab_backend_t *b, uint64_t request_id)
{
    (void)request_id;
    if (!b)
        return ILAB_INVALID_ARGUMENT;
    pthread_mutex_lock(&b->mu);
    fail(b, ILAB_UNSUPPORTED, "cancel: capability cancel not declared");
    pthread_mutex_unlock(&b->mu);
    return ILAB_UNSUPPORTED;
}

static const ilab_backend_api_t api = {
    .struct_size = sizeof(ilab_backend_api_t),
    .probe = pb_probe,
    .create = pb_create,
    .destroy = pb_destroy,
    .last_error = pb_last_error,
    .model_info = pb_model_info,
    .tokenize = pb_tokenize,
    .detokenize = pb_detokenize,
    .token_piece = pb_token_piece,
    .seq_create = pb_seq_create,
    .seq_free = pb_seq_free,
    .seq_fork = pb_seq_fork,
    .seq_truncate = pb_seq_truncate,
    .seq_length = pb_seq_length,
    .eval = pb_eval,
    .generate = pb_generate,
    .cancel = pb_cancel,
};

ILAB_PLUGIN_EXPORT const ilab_plugin_entry_t ilab_plugin_entry = {
    .struct_size = sizeof(ilab_plugin_entry_t),
    .abi_major = ILAB_ABI_MAJOR,
    .abi_minor = ILAB_ABI_MINOR,
    .name = "paced_backend",
    .version = "0.1.0",
    .manifest_yaml = manifest,
    .backend = &api,
};
