/* generate_backend — a test-only plugin that samples itself (sampling:
 * backend), for the engine's worker-thread path. generate() emits the
 * alphabet, one byte token at a time, and honours cancel() between tokens.
 * No logits, no sequences: those entry points fail closed. */
#include <inferlab/inferlab.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define VOCAB 259
#define BYTE0 3
#define MAX_ACTIVE 64

/* GENERATE_NO_CANCEL: the same backend declaring cancel: false (cancel()
 * returns ILAB_UNSUPPORTED), so only the event callback's return stops it. */
#ifdef GENERATE_NO_CANCEL
#define PLUGIN_NAME "generate_nocancel_backend"
#define CANCEL "false"
#else
#define PLUGIN_NAME "generate_backend"
#define CANCEL "true"
#endif

static const char manifest[] =
    "name: " PLUGIN_NAME "\n"
    "version: 0.1.0\n"
    "abi: 1.0\n"
    "description: Test backend that generates the alphabet through generate().\n"
    "capabilities:\n"
    "  tokenizer: true\n"
    "  logits: none\n"
    "  topk_max: 0\n"
    "  sampling: backend\n"
    "  cache: {fork: false, truncate: false}\n"
    "  batching: {max_batch: 1}\n"
    "  streaming: true\n"
    "  cancel: " CANCEL "\n"
    "  max_context: 256\n"
    "  thread_safety: full\n"
    "config:\n"
    "  token_ms:\n"
    "    type: int\n"
    "    default: 0\n"
    "    description: Milliseconds generate() sleeps before each token.\n"
    "  stall_after:\n"
    "    type: int\n"
    "    default: 0\n"
    "    description: After this many tokens generate() emits nothing until cancel() (0 = never).\n";

struct ilab_backend {
    pthread_mutex_t mu;
    uint64_t active[MAX_ACTIVE]; /* running request ids; 0 = free slot */
    int cancelled[MAX_ACTIVE];
    long token_ms, stall_after;
    char error[256];
};

static void sleep_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static ilab_status set_error(ilab_backend_t *b, ilab_status st, const char *msg)
{
    pthread_mutex_lock(&b->mu);
    snprintf(b->error, sizeof b->error, "%s", msg);
    pthread_mutex_unlock(&b->mu);
    return st;
}

static ilab_status cb_probe(const ilab_host_t *h, const ilab_config_entry_t *c, size_t n, char *r, size_t cap)
{
    if (r && cap)
        r[0] = '\0';
    return ILAB_OK;
}

static ilab_status cb_create(const ilab_host_t *h, const ilab_config_entry_t *c, size_t n, char *e, size_t cap,
                             ilab_backend_t **out)
{
    ilab_backend_t *b = calloc(1, sizeof *b);
    if (!b)
        return ILAB_OUT_OF_MEMORY;
    pthread_mutex_init(&b->mu, NULL);
    for (size_t i = 0; i < n; i++) {
        if (!strcmp(c[i].key, "token_ms"))
            b->token_ms = strtol(c[i].value, NULL, 10);
        else if (!strcmp(c[i].key, "stall_after"))
            b->stall_after = strtol(c[i].value, NULL, 10);
    }
    *out = b;
    return ILAB_OK;
}

static void cb_destroy(ilab_backend_t *b)
{
    if (b) {
        pthread_mutex_destroy(&b->mu);
        free(b);
    }
}

static size_t cb_last_error(const ilab_backend_t *cb, char *buf, size_t cap)
{
    ilab_backend_t *b = (ilab_backend_t *)cb;
    pthread_mutex_lock(&b->mu);
    size_t n = strlen(b->error);
    if (buf && cap)
        snprintf(buf, cap, "%s", b->error);
    pthread_mutex_unlock(&b->mu);
    return n;
}

static ilab_status cb_model_info(ilab_backend_t *b, ilab_model_info_t *info)
{
    ilab_model_info_t m;
    memset(&m, 0, sizeof m);
    m.struct_size = sizeof m;
    m.vocab_size = VOCAB;
    m.bos_id = 1;
    m.eos_id = 2;
    m.max_context = 256;
    snprintf(m.name, sizeof m.name, "alphabet");
    size_t n = info->struct_size < sizeof m ? info->struct_size : sizeof m;
    memcpy((char *)info + sizeof m.struct_size, (char *)&m + sizeof m.struct_size, n - sizeof m.struct_size);
    return ILAB_OK;
}

static ilab_status cb_tokenize(ilab_backend_t *b, const char *text, size_t len, uint32_t flags, int32_t *tokens,
                               size_t cap, size_t *n_tokens)
{
    size_t need = len + ((flags & ILAB_TOKENIZE_ADD_BOS) ? 1 : 0);
    *n_tokens = need;
    if (cap < need)
        return set_error(b, ILAB_BUFFER_TOO_SMALL, "tokenize: buffer too small");
    size_t k = 0;
    if (flags & ILAB_TOKENIZE_ADD_BOS)
        tokens[k++] = 1;
    for (size_t i = 0; i < len; i++)
        tokens[k++] = BYTE0 + (unsigned char)text[i];
    return ILAB_OK;
}

/* Token 0 is a word longer than any guess a caller makes from the count of
 * ids (real vocabularies have such tokens: runs of code indentation, long
 * words), so a caller's retry on BUFFER_TOO_SMALL is exercised. */
#define LONG_WORD "<|token zero: a piece longer than 32 bytes|>"

static size_t piece_len(int32_t t)
{
    return t == 0 ? strlen(LONG_WORD) : t >= BYTE0 && t < VOCAB;
}

static ilab_status cb_detokenize(ilab_backend_t *b, const int32_t *t, size_t n, char *text, size_t cap, size_t *len)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += piece_len(t[i]);
    *len = k;
    if (cap < k + 1)
        return set_error(b, ILAB_BUFFER_TOO_SMALL, "detokenize: buffer too small");
    k = 0;
    for (size_t i = 0; i < n; i++) {
        if (t[i] == 0)
            memcpy(text + k, LONG_WORD, strlen(LONG_WORD));
        else if (piece_len(t[i]))
            text[k] = (char)(t[i] - BYTE0);
        k += piece_len(t[i]);
    }
    text[k] = '\0';
    return ILAB_OK;
}

static ilab_status cb_token_piece(ilab_backend_t *b, int32_t prev, int32_t t, char *piece, size_t cap, size_t *len)
{
    return cb_detokenize(b, &t, 1, piece, cap, len);
}

static ilab_status unsupported(ilab_backend_t *b, const char *what)
{
    char msg[128];
    snprintf(msg, sizeof msg, "%s: capability not declared (logits: none)", what);
    return set_error(b, ILAB_UNSUPPORTED, msg);
}

static ilab_status cb_seq_create(ilab_backend_t *b, ilab_seq_t *s) { return unsupported(b, "seq_create"); }
static ilab_status cb_seq_free(ilab_backend_t *b, ilab_seq_t s) { return unsupported(b, "seq_free"); }
static ilab_status cb_seq_fork(ilab_backend_t *b, ilab_seq_t p, ilab_seq_t *c) { return unsupported(b, "seq_fork"); }
static ilab_status cb_seq_truncate(ilab_backend_t *b, ilab_seq_t s, int32_t n) { return unsupported(b, "seq_truncate"); }
static ilab_status cb_seq_length(ilab_backend_t *b, ilab_seq_t s, int32_t *n) { return unsupported(b, "seq_length"); }
static ilab_status cb_eval(ilab_backend_t *b, const ilab_batch_item_t *const *i, size_t n) { return unsupported(b, "eval"); }
static ilab_status cb_cache_stats(ilab_backend_t *b, ilab_cache_stats_t *s) { return unsupported(b, "cache_stats"); }

static int slot_of(ilab_backend_t *b, uint64_t id)
{
    for (int i = 0; i < MAX_ACTIVE; i++)
        if (b->active[i] == id)
            return i;
    return -1;
}

static ilab_status cb_generate(ilab_backend_t *b, const ilab_generate_request_t *r, ilab_event_fn fn, void *ud)
{
    pthread_mutex_lock(&b->mu);
    int slot = slot_of(b, 0);
    if (slot >= 0) {
        b->active[slot] = r->request_id;
        b->cancelled[slot] = 0;
    }
    pthread_mutex_unlock(&b->mu);
    if (slot < 0)
        return set_error(b, ILAB_OUT_OF_MEMORY, "generate: too many requests at once");
    ilab_event_t ev;
    memset(&ev, 0, sizeof ev);
    ev.struct_size = sizeof ev;
    ev.request_id = r->request_id;
    ilab_finish_reason reason = ILAB_FINISH_LENGTH;
    uint32_t done = 0;
    for (int32_t i = 0; i < r->max_tokens; i++) {
        pthread_mutex_lock(&b->mu);
        int cancelled = b->cancelled[slot];
        pthread_mutex_unlock(&b->mu);
        /* A stalled stream (a remote engine that went quiet): nothing but
         * cancel() ends it. */
        while (!cancelled && b->stall_after > 0 && done == (uint32_t)b->stall_after) {
            sleep_ms(1);
            pthread_mutex_lock(&b->mu);
            cancelled = b->cancelled[slot];
            pthread_mutex_unlock(&b->mu);
        }
        if (cancelled) {
            reason = ILAB_FINISH_CANCELLED;
            break;
        }
        if (b->token_ms > 0)
            sleep_ms(b->token_ms);
        char c = (char)('a' + i % 26);
        ev.type = ILAB_EVENT_TOKEN;
        ev.token = BYTE0 + c;
        ev.text = &c;
        ev.text_len = 1;
        done++;
        if (fn(ud, &ev)) {
            reason = ILAB_FINISH_CANCELLED;
            break;
        }
    }
    pthread_mutex_lock(&b->mu);
    b->active[slot] = 0;
    pthread_mutex_unlock(&b->mu);
    memset(&ev, 0, sizeof ev);
    ev.struct_size = sizeof ev;
    ev.request_id = r->request_id;
    ev.type = ILAB_EVENT_FINISH;
    ev.finish_reason = reason;
    ev.prompt_tokens = (uint32_t)r->n_prompt_tokens;
    ev.completion_tokens = done;
    fn(ud, &ev);
    return ILAB_OK;
}

static ilab_status cb_cancel(ilab_backend_t *b, uint64_t id)
{
#ifdef GENERATE_NO_CANCEL
    return set_error(b, ILAB_UNSUPPORTED, "cancel: capability not declared");
#endif
    pthread_mutex_lock(&b->mu);
    int slot = slot_of(b, id);
    if (slot >= 0)
        b->cancelled[slot] = 1;
    pthread_mutex_unlock(&b->mu);
    return ILAB_OK;
}

static const ilab_backend_api_t api = {
    .struct_size = sizeof(ilab_backend_api_t),
    .probe = cb_probe, .create = cb_create, .destroy = cb_destroy, .last_error = cb_last_error,
    .model_info = cb_model_info, .tokenize = cb_tokenize, .detokenize = cb_detokenize,
    .token_piece = cb_token_piece, .seq_create = cb_seq_create, .seq_free = cb_seq_free,
    .seq_fork = cb_seq_fork, .seq_truncate = cb_seq_truncate, .seq_length = cb_seq_length,
    .eval = cb_eval, .generate = cb_generate, .cancel = cb_cancel, .cache_stats = cb_cache_stats,
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
