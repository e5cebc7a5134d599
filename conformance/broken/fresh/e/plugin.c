/* bpkv — "byte-pair KV" test backend for inferlab (held-out bug corpus base).
 *
 * Design (different from the SDK template on purpose):
 *   - tokenizer: 256 byte tokens, 16 merged multi-byte pieces (some of them
 *     whole multi-byte UTF-8 code points), and 4 special tokens:
 *     <|im_start|>, <|im_end|> (an end-of-generation token), BOS and EOS.
 *     Greedy longest match; byte fallback for anything else (configurable:
 *     byte_fallback=false refuses invalid UTF-8 instead).
 *   - chat (ABI 1.2): eog_ids = [EOS, <|im_end|>], a ChatML template,
 *     ILAB_TOKENIZE_PARSE_SPECIAL spells the two chat control tokens.
 *   - logits: full; sampling: host.  The logits after position i are a
 *     function of a rolling hash of the whole history (the "KV state"),
 *     stored per position in a paged KV cache.
 *   - KV cache: a pool of fixed blocks (BLOCK positions each, cache_blocks of
 *     them), ref-counted, shared by seq_fork() and copied on write;
 *     seq_truncate() returns whole blocks; cache_stats() (ABI 1.1) reports
 *     the pool.
 *   - batching: up to 8 items per eval(); all-or-nothing.
 *   - thread_safety: full (one instance mutex; last_error has its own lock).
 *   - config: seed (int), cache_blocks (int in [8, 4096]), model_name
 *     (string, 1..63 of [a-z0-9._-]), byte_fallback (bool), weights (string:
 *     a file whose first bytes perturb the model; missing file = the backend
 *     is unavailable, which probe() reports).
 *
 * Every deliberate bug lives under `#if BUG == N`; BUG undefined/0 is the
 * correct base. */
#include <inferlab/inferlab.h>

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#ifndef BUG
#define BUG 0
#endif

#define PLUGIN_NAME "bpkv"
#define PLUGIN_VERSION "0.3.1"

#define N_BYTES 256
#define N_MERGES 16
#define IM_START (N_BYTES + N_MERGES) /* 272 */
#define IM_END (IM_START + 1)         /* 273 */
#define BOS (IM_START + 2)            /* 274 */
#define EOS (IM_START + 3)            /* 275 */
#define VOCAB (IM_START + 4)          /* 276 */

#define MAX_CONTEXT 512
#define BLOCK 16
#define MAX_BLK_PER_SEQ (MAX_CONTEXT / BLOCK)
#define MAX_SEQS 64
#define MAX_BATCH 8
#define MIN_CACHE_BLOCKS 8
#define MAX_CACHE_BLOCKS 4096

static const char manifest[] =
    "name: bpkv\n"
#if BUG == 3
    "version: 0.3.0\n"
#else
    "version: 0.3.1\n"
#endif
#if BUG == 4
    "abi: 1.1\n"
#else
    "abi: 1.2\n"
#endif
    "description: >-\n"
    "  Byte-pair tokenizer with chat special tokens, rolling-hash logits and a\n"
    "  paged, copy-on-write KV cache; host sampling.\n"
    "capabilities:\n"
    "  tokenizer: true\n"
    "  logits: full\n"
    "  topk_max: 20\n"
    "  sampling: host\n"
    "  cache: {fork: true, truncate: true, stats: true}\n"
    "  batching: {max_batch: 8}\n"
    "  streaming: false\n"
    "  cancel: false\n"
    "  max_context: 512\n"
    "  thread_safety: full\n"
    "  chat: true\n"
    "config:\n"
    "  seed:\n"
    "    type: int\n"
    "    default: 0\n"
    "    description: Seed of the toy model; each seed is a different model.\n"
    "  cache_blocks:\n"
    "    type: int\n"
    "    default: 256\n"
    "    description: KV-cache blocks of 16 positions in the pool, 8 to 4096.\n"
    "  model_name:\n"
    "    type: string\n"
    "    default: bpkv-tiny\n"
    "    description: Name model_info() reports, 1 to 63 of a-z 0-9 . _ -.\n"
    "  byte_fallback:\n"
    "    type: bool\n"
    "    default: true\n"
    "    description: Encode invalid UTF-8 as byte tokens; false refuses it.\n"
    "  weights:\n"
    "    type: string\n"
    "    default: \"\"\n"
    "    description: Optional weights file; empty = the built-in model.\n";

/* Merged pieces, ids N_BYTES.. */
static const char *const merges[N_MERGES] = {
    " the", "the", "th", "he", "in", "ing", "er", "an",
    " t", " a", "\r\n", "  ", "\xc3\xa9" /* é */, "\xe2\x82\xac" /* € */,
    "\xf0\x9f\x98\x80" /* 😀 */, "ll",
};
#define MAX_MERGE_LEN 4

static const char S_IM_START[] = "<|im_start|>";
static const char S_IM_END[] = "<|im_end|>";

static const char chat_tmpl[] =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}";

#if BUG == 7
/* optional tracing hook, resolved if the host process happens to provide it */
extern void bpkv_trace_hook(const char *what) __attribute__((weak));
#endif

typedef struct config {
    long long seed;
    long cache_blocks;
    char model_name[64];
    int byte_fallback;
    char weights[512];
} config;

typedef struct sequence {
    int in_use;
    uint64_t handle;
    int32_t len;
    int nblk;
    int *blk; /* MAX_BLK_PER_SEQ block ids */
} sequence;

struct ilab_backend {
    const ilab_host_t *host;
    config cfg;
    uint64_t h0; /* state before the first position */
    pthread_mutex_t mu;
    ilab_last_error_t error;
    /* KV pool */
    int n_blocks;
    uint64_t (*bstate)[BLOCK];
    int *refcnt;
    int *free_stack;
    int n_free;
    /* sequences */
    sequence seqs[MAX_SEQS];
#if BUG == 65
    uint16_t serial;
#else
    uint64_t serial;
#endif
    /* decode fast path: state after the last position of the sequence most
     * recently evaluated on its own */
    uint64_t hot_handle;
    int32_t hot_len;
    uint64_t hot_h;
    /* tokenizer scratch + memo of the last tokenization */
    int32_t *scratch;
    size_t scratch_cap;
    char *memo_text;
    size_t memo_text_cap, memo_ids_cap;
    const char *memo_ptr;
    size_t memo_len;
    uint32_t memo_flags;
    int32_t *memo_ids;
    size_t memo_n;
    int memo_valid;
#if BUG == 51
    int32_t row_memo_tok;
    float *row_memo;
#endif
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

/* --- the model ------------------------------------------------------------- */

static uint64_t mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t step(uint64_t h, int32_t tok)
{
    return mix(h + (uint64_t)(tok + 1) * 0x9e3779b97f4a7c15ull);
}

static void logits_row(uint64_t h, float *out)
{
    for (int v = 0; v < VOCAB; v++) {
        uint64_t r = mix(h ^ ((uint64_t)v * 0xd1b54a32d192ed03ull));
        float x = (float)(r >> 40) / (float)(1u << 24) * 6.0f - 3.0f;
        if (v >= N_BYTES && v < IM_START)
            x += 1.5f; /* merges are likely */
        if ((v >= 'a' && v <= 'z') || v == ' ')
            x += 1.0f;
#if BUG == 50
        if (v == BOS)
            x = -INFINITY; /* BOS never follows anything */
#endif
        out[v] = x;
    }
}

/* --- configuration and availability ------------------------------------------ */

static void put_msg(char *dst, size_t cap, const char *msg)
{
    if (!dst || !cap)
        return;
#if BUG == 15
    size_t n = strlen(msg);
    memcpy(dst, msg, n < cap ? n : cap);
    if (n < cap)
        dst[n] = '\0';
#else
    snprintf(dst, cap, "%s", msg);
#endif
}

static int parse_bool(const char *v, int *out)
{
    static const char *const yes[] = {"true", "1", "yes", "on"}, *const no[] = {"false", "0", "no",
                                                                               "off"};
    for (int i = 0; i < 4; i++) {
        if (!strcasecmp(v, yes[i])) {
            *out = 1;
            return 1;
        }
        if (!strcasecmp(v, no[i])) {
            *out = 0;
            return 1;
        }
    }
    return 0;
}

static ilab_status parse_config(const ilab_config_entry_t *c, size_t n, config *cfg, char *msg,
                                size_t cap)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->cache_blocks = 256;
    strcpy(cfg->model_name, "bpkv-tiny");
    cfg->byte_fallback = 1;
    if (n && !c) {
        snprintf(msg, cap, PLUGIN_NAME ": config is NULL with %zu entries", n);
        return ILAB_INVALID_ARGUMENT;
    }
    for (size_t i = 0; i < n; i++) {
        const char *k = c[i].key, *v = c[i].value;
        if (!k || !v) {
            snprintf(msg, cap, PLUGIN_NAME ": config entry %zu has a NULL key or value", i);
            return ILAB_INVALID_ARGUMENT;
        }
        char *end = NULL;
        if (!strcmp(k, "seed")) {
            errno = 0;
            cfg->seed = strtoll(v, &end, 10);
            if (!*v || *end || errno) {
                snprintf(msg, cap, PLUGIN_NAME ": config key 'seed' must be an int, got '%s'", v);
                return ILAB_INVALID_ARGUMENT;
            }
        } else if (!strcmp(k, "cache_blocks")) {
            errno = 0;
            long x = strtol(v, &end, 10);
#if BUG == 20
            int bad = !*v || *end || errno || x < 0 || x > MAX_CACHE_BLOCKS;
#else
            int bad = !*v || *end || errno || x < MIN_CACHE_BLOCKS || x > MAX_CACHE_BLOCKS;
#endif
            if (bad) {
                snprintf(msg, cap, PLUGIN_NAME ": config key 'cache_blocks' must be an int in "
                         "[%d, %d], got '%s'", MIN_CACHE_BLOCKS, MAX_CACHE_BLOCKS, v);
#if BUG == 21
                return ILAB_UNAVAILABLE;
#else
                return ILAB_INVALID_ARGUMENT;
#endif
            }
            cfg->cache_blocks = x;
        } else if (!strcmp(k, "model_name")) {
            size_t len = strlen(v);
#if BUG == 22
            int bad = len < 1 || len > sizeof cfg->model_name;
#else
            int bad = len < 1 || len >= sizeof cfg->model_name;
#endif
            for (size_t j = 0; j < len && !bad; j++)
                if (!((v[j] >= 'a' && v[j] <= 'z') || (v[j] >= '0' && v[j] <= '9') ||
                      v[j] == '.' || v[j] == '_' || v[j] == '-'))
                    bad = 1;
            if (bad) {
                snprintf(msg, cap, PLUGIN_NAME ": config key 'model_name' must be 1 to 63 of "
                         "a-z 0-9 . _ -, got '%s'", v);
                return ILAB_INVALID_ARGUMENT;
            }
            memcpy(cfg->model_name, v, len);
#if BUG == 22
            if (len < sizeof cfg->model_name)
#endif
                cfg->model_name[len] = '\0';
        } else if (!strcmp(k, "byte_fallback")) {
            if (!parse_bool(v, &cfg->byte_fallback)) {
                snprintf(msg, cap, PLUGIN_NAME ": config key 'byte_fallback' must be a bool, "
                         "got '%s'", v);
                return ILAB_INVALID_ARGUMENT;
            }
        } else if (!strcmp(k, "weights")) {
            if (strlen(v) >= sizeof cfg->weights) {
                snprintf(msg, cap, PLUGIN_NAME ": config key 'weights' is longer than %zu bytes",
                         sizeof cfg->weights - 1);
                return ILAB_INVALID_ARGUMENT;
            }
            strcpy(cfg->weights, v);
        } else {
#if BUG != 19
            snprintf(msg, cap, PLUGIN_NAME ": unknown config key '%s' (known: seed, cache_blocks, "
                     "model_name, byte_fallback, weights)", k);
            return ILAB_INVALID_ARGUMENT;
#endif
        }
    }
    return ILAB_OK;
}

/* Can the configured model be loaded here? */
static ilab_status availability(const config *cfg, char *msg, size_t cap)
{
    if (!cfg->weights[0])
        return ILAB_OK;
    int fd = open(cfg->weights, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        snprintf(msg, cap, PLUGIN_NAME ": weights file '%s' cannot be opened: %s", cfg->weights,
                 strerror(errno));
        return ILAB_UNAVAILABLE;
    }
    close(fd);
    return ILAB_OK;
}

static ilab_status bp_probe(const ilab_host_t *host, const ilab_config_entry_t *c, size_t n,
                            char *reason, size_t reason_cap)
{
    (void)host;
#if BUG == 16
    /* the file check can be slow on network storage: remember the answer */
    static int cached = -1;
    static char cached_msg[600];
    if (cached >= 0) {
        put_msg(reason, reason_cap, cached_msg);
        return (ilab_status)cached;
    }
#endif
    char msg[600] = "";
    config cfg;
    ilab_status st = parse_config(c, n, &cfg, msg, sizeof msg);
    if (st == ILAB_OK)
        st = availability(&cfg, msg, sizeof msg);
#if BUG == 16
    cached = (int)st;
    memcpy(cached_msg, msg, sizeof msg);
#endif
    put_msg(reason, reason_cap, msg);
    return st;
}

static void destroy_parts(ilab_backend_t *b)
{
    for (int i = 0; i < MAX_SEQS; i++)
        free(b->seqs[i].blk);
#if BUG != 9
    free(b->bstate);
#endif
    free(b->refcnt);
    free(b->free_stack);
    free(b->scratch);
    free(b->memo_text);
    free(b->memo_ids);
#if BUG == 51
    free(b->row_memo);
#endif
}

static ilab_status bp_create(const ilab_host_t *host, const ilab_config_entry_t *c, size_t n,
                             char *error, size_t error_cap, ilab_backend_t **out)
{
    char msg[600] = "";
#if BUG == 18
    if (out)
        *out = NULL;
#endif
    if (!host || !out) {
        put_msg(error, error_cap, PLUGIN_NAME ": create() needs host and out");
        return ILAB_INVALID_ARGUMENT;
    }
    /* bpkv uses no member of the host table (ABI-3.4: nothing to refuse). */
    config cfg;
    ilab_status st = parse_config(c, n, &cfg, msg, sizeof msg);
    if (st != ILAB_OK) {
        put_msg(error, error_cap, msg);
        return st;
    }
    uint64_t perturb = 0;
    if (cfg.weights[0]) {
        int fd = open(cfg.weights, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
        if (fd < 0) {
#if BUG == 17
            snprintf(msg, sizeof msg, PLUGIN_NAME ": cannot load weights from %s (errno %d)",
                     cfg.weights, errno);
#else
            availability(&cfg, msg, sizeof msg);
#endif
            put_msg(error, error_cap, msg);
            return ILAB_UNAVAILABLE;
        }
        unsigned char head[8] = {0};
        ssize_t got = read(fd, head, sizeof head);
        for (ssize_t i = 0; i < got; i++)
            perturb = perturb * 131 + head[i];
#if BUG != 8
        close(fd);
#endif
    }
#if BUG == 7
    if (bpkv_trace_hook)
        bpkv_trace_hook("create");
#endif
    ilab_backend_t *b = calloc(1, sizeof *b);
    if (!b) {
        put_msg(error, error_cap, PLUGIN_NAME ": out of memory");
        return ILAB_OUT_OF_MEMORY;
    }
    b->host = host;
    b->cfg = cfg;
    b->h0 = mix((uint64_t)cfg.seed ^ 0x5eed5eed5eedull ^ mix(perturb));
    b->n_blocks = (int)cfg.cache_blocks;
    b->bstate = calloc((size_t)b->n_blocks + 1, sizeof *b->bstate);
    b->refcnt = calloc((size_t)b->n_blocks + 1, sizeof *b->refcnt);
    b->free_stack = calloc((size_t)b->n_blocks + 1, sizeof *b->free_stack);
    for (int i = 0; i < MAX_SEQS; i++)
        b->seqs[i].blk = calloc(MAX_BLK_PER_SEQ, sizeof(int));
    int ok = b->bstate && b->refcnt && b->free_stack;
    for (int i = 0; i < MAX_SEQS; i++)
        ok = ok && b->seqs[i].blk;
    if (!ok) {
        destroy_parts(b);
        free(b);
        put_msg(error, error_cap, PLUGIN_NAME ": out of memory");
        return ILAB_OUT_OF_MEMORY;
    }
    for (int i = 0; i < b->n_blocks; i++)
        b->free_stack[i] = b->n_blocks - 1 - i;
    b->n_free = b->n_blocks;
    pthread_mutex_init(&b->mu, NULL);
    ilab_last_error_init(&b->error);
    put_msg(error, error_cap, "");
    *out = b;
    return ILAB_OK;
}

static void bp_destroy(ilab_backend_t *b)
{
    if (!b)
        return;
    destroy_parts(b);
    pthread_mutex_destroy(&b->mu);
    ilab_last_error_destroy(&b->error);
    free(b);
}

static size_t bp_last_error(const ilab_backend_t *b, char *buf, size_t cap)
{
#if BUG == 25
    size_t len = ilab_last_error_copy(b ? &b->error : NULL, buf, cap);
    return cap && len >= cap ? cap - 1 : len; /* what was copied */
#else
    return ilab_last_error_copy(b ? &b->error : NULL, buf, cap);
#endif
}

static void fake_digest(const ilab_backend_t *b, char *out)
{
    int n = snprintf(out, 80, "sha256:");
    for (int i = 0; i < 4; i++)
        n += snprintf(out + n, 80 - (size_t)n, "%016llx",
                      (unsigned long long)mix(b->h0 + (uint64_t)i));
}

static ilab_status bp_model_info(ilab_backend_t *b, ilab_model_info_t *info)
{
    if (!b || !info)
        return fail(b, ILAB_INVALID_ARGUMENT, "model_info: NULL argument");
#if BUG == 12
    info->vocab_size = VOCAB;
    info->bos_id = BOS;
    info->eos_id = EOS;
#endif
    if (info->struct_size < ILAB_MODEL_INFO_SIZE_1_0)
        return fail(b, ILAB_ABI_MISMATCH, "model_info: struct_size %u is smaller than ABI 1.0's %u",
                    info->struct_size, ILAB_MODEL_INFO_SIZE_1_0);
    ilab_model_info_t full;
    memset(&full, 0, sizeof full);
#if BUG == 11
    full.struct_size = sizeof full;
#else
    full.struct_size = info->struct_size;
#endif
#if BUG == 47
    full.vocab_size = N_BYTES + N_MERGES + 2; /* bytes, merges, BOS, EOS */
#else
    full.vocab_size = VOCAB;
#endif
    full.bos_id = BOS;
    full.eos_id = EOS;
#if BUG == 10
    full.max_context = MAX_CONTEXT - 1; /* last valid position */
#else
    full.max_context = MAX_CONTEXT;
#endif
#if BUG == 22
    memcpy(full.name, b->cfg.model_name, sizeof full.name);
#else
    snprintf(full.name, sizeof full.name, "%s", b->cfg.model_name);
#endif
    fake_digest(b, full.digest);
    size_t n = info->struct_size < sizeof full ? info->struct_size : sizeof full;
    memcpy(info, &full, n);
    return ILAB_OK;
}

/* --- tokenizer ----------------------------------------------------------------- */

static size_t merge_len(int i) { return strlen(merges[i]); }

/* The bytes of a token (NULL/0 for BOS and EOS). */
static const char *token_text(int32_t t, size_t *n)
{
    static const char bytes[256][1] = {
#define B(i) {(char)(i)}
#define B4(i) B(i), B(i + 1), B(i + 2), B(i + 3)
#define B16(i) B4(i), B4(i + 4), B4(i + 8), B4(i + 12)
#define B64(i) B16(i), B16(i + 16), B16(i + 32), B16(i + 48)
        B64(0), B64(64), B64(128), B64(192)};
    if (t < N_BYTES) {
        *n = 1;
        return bytes[t];
    }
    if (t < IM_START) {
        *n = merge_len(t - N_BYTES);
        return merges[t - N_BYTES];
    }
    if (t == IM_START) {
        *n = sizeof S_IM_START - 1;
        return S_IM_START;
    }
    if (t == IM_END) {
        *n = sizeof S_IM_END - 1;
        return S_IM_END;
    }
    *n = 0;
    return "";
}

/* Length of the valid UTF-8 sequence at p (max n bytes), 0 if invalid. */
static size_t utf8_len(const unsigned char *p, size_t n)
{
    unsigned c = p[0];
    if (c < 0x80)
        return 1;
    size_t need;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF)
        need = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0)
            lo = 0xA0;
        if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0)
            lo = 0x90;
#if BUG == 23
        if (c == 0xF4)
            hi = 0x8E;
#else
        if (c == 0xF4)
            hi = 0x8F;
#endif
    } else
        return 0;
    if (n < need)
        return 0;
    if (p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < need; i++)
        if (p[i] < 0x80 || p[i] > 0xBF)
            return 0;
    return need;
}

/* Encode into out (if not NULL); returns the count, or (size_t)-1 on invalid
 * UTF-8 in strict mode. */
static size_t encode(ilab_backend_t *b, const char *text, size_t len, uint32_t flags,
                     int32_t *out)
{
    size_t n = 0;
    const unsigned char *u = (const unsigned char *)text;
    if (!b->cfg.byte_fallback) {
        for (size_t i = 0; i < len;) {
            size_t l = utf8_len(u + i, len - i);
            if (!l)
                return (size_t)-1;
            i += l;
        }
    }
#if BUG == 39
    if (len == 0) {
        if (flags & ILAB_TOKENIZE_ADD_BOS) {
            if (out)
                out[n] = BOS;
            n++;
        }
        return n;
    }
#endif
    if (flags & ILAB_TOKENIZE_ADD_BOS) {
        if (out)
            out[n] = BOS;
        n++;
    }
    size_t i = 0;
#if BUG == 35
    while (i < len && text[i]) {
#else
    while (i < len) {
#endif
        int32_t tok = -1;
        size_t tl = 0;
        if (flags & ILAB_TOKENIZE_PARSE_SPECIAL) {
            static const struct { const char *s; size_t n; int32_t id; } sp[] = {
                {S_IM_START, sizeof S_IM_START - 1, IM_START},
                {S_IM_END, sizeof S_IM_END - 1, IM_END},
            };
            for (int k = 0; k < 2; k++)
#if BUG == 41
                if (i + sp[k].n < len && !memcmp(text + i, sp[k].s, sp[k].n)) {
#else
                if (i + sp[k].n <= len && !memcmp(text + i, sp[k].s, sp[k].n)) {
#endif
                    tok = sp[k].id;
                    tl = sp[k].n;
                }
        }
#if BUG == 42
        /* chat templates spell control tokens: always recognise them */
        if (tok < 0 && i + sizeof S_IM_END - 1 <= len &&
            !memcmp(text + i, S_IM_END, sizeof S_IM_END - 1)) {
            tok = IM_END;
            tl = sizeof S_IM_END - 1;
        }
#endif
        if (tok < 0) {
            for (int m = 0; m < N_MERGES; m++) {
                size_t ml = merge_len(m);
#if BUG == 34
                if (ml > tl && !strncmp(text + i, merges[m], ml)) {
#else
                if (ml > tl && i + ml <= len && !memcmp(text + i, merges[m], ml)) {
#endif
                    tok = N_BYTES + m;
                    tl = ml;
                }
            }
        }
        if (tok < 0) {
#if BUG == 46
            size_t l = utf8_len(u + i, len - i);
            if (!l && u[i] >= 0xC2 && u[i] <= 0xF4 && len - i < 4)
                break; /* incomplete character at the end: wait for more */
#endif
            tok = u[i];
            tl = 1;
        }
        if (out)
            out[n] = tok;
        n++;
        i += tl;
    }
    if (flags & ILAB_TOKENIZE_ADD_EOS) {
        if (out)
            out[n] = EOS;
        n++;
    }
    return n;
}

static int reserve_scratch(ilab_backend_t *b, size_t n)
{
    if (b->scratch_cap >= n)
        return 1;
    size_t cap = n < 64 ? 64 : n;
    int32_t *p = realloc(b->scratch, cap * sizeof *p);
    if (!p)
        return 0;
    b->scratch = p;
    b->scratch_cap = cap;
    return 1;
}

static ilab_status tokenize_locked(ilab_backend_t *b, const char *text, size_t len,
                                   uint32_t flags, int32_t *tokens, size_t cap, size_t *n_tokens)
{
    uint32_t known = ILAB_TOKENIZE_ADD_BOS | ILAB_TOKENIZE_ADD_EOS | ILAB_TOKENIZE_PARSE_SPECIAL;
    if (flags & ~known)
        return fail(b, ILAB_INVALID_ARGUMENT, "tokenize: unknown flag bits 0x%x", (unsigned)flags);
    /* memo: the host often tokenizes the same prompt twice (count, then fill) */
#if BUG == 45
    int hit = b->memo_valid && b->memo_ptr == text && b->memo_len == len && b->memo_flags == flags;
#else
    int hit = b->memo_valid && b->memo_len == len && b->memo_flags == flags &&
              (len == 0 || !memcmp(b->memo_text, text, len));
#endif
    if (!hit) {
        size_t need = encode(b, text, len, flags, NULL);
        if (need == (size_t)-1)
            return fail(b, ILAB_INVALID_ARGUMENT, "tokenize: invalid UTF-8 (byte_fallback is off)");
        if (!reserve_scratch(b, need))
            return fail(b, ILAB_OUT_OF_MEMORY, "tokenize: out of memory");
        encode(b, text, len, flags, b->scratch);
        /* memo storage only grows, so a warmed-up instance allocates nothing */
        if (len > b->memo_text_cap) {
            char *mt = realloc(b->memo_text, len);
            if (mt) {
                b->memo_text = mt;
                b->memo_text_cap = len;
            }
        }
        if (need > b->memo_ids_cap) {
            int32_t *mi = realloc(b->memo_ids, need * sizeof *mi);
            if (mi) {
                b->memo_ids = mi;
                b->memo_ids_cap = need;
            }
        }
        if (len <= b->memo_text_cap && need <= b->memo_ids_cap) {
            if (len)
                memcpy(b->memo_text, text, len);
            if (need)
                memcpy(b->memo_ids, b->scratch, need * sizeof *b->memo_ids);
            b->memo_ptr = text;
            b->memo_len = len;
            b->memo_flags = flags;
            b->memo_n = need;
            b->memo_valid = 1;
        } else {
            b->memo_valid = 0;
        }
        size_t body = need;
#if BUG == 30
        if (flags & ILAB_TOKENIZE_ADD_EOS)
            body--; /* EOS is appended below */
#endif
        if (cap < body) {
#if BUG == 29
            /* fill what fits, so a retry can skip it */
            for (size_t k = 0; k < cap; k++)
                tokens[k] = b->scratch[k];
#endif
            *n_tokens = need;
            return fail(b, ILAB_BUFFER_TOO_SMALL, "tokenize: %zu tokens needed, room for %zu",
                        need, cap);
        }
        if (need)
            memcpy(tokens, b->scratch, need * sizeof *tokens);
        *n_tokens = need;
        return ILAB_OK;
    }
    if (cap < b->memo_n) {
        *n_tokens = b->memo_n;
        return fail(b, ILAB_BUFFER_TOO_SMALL, "tokenize: %zu tokens needed, room for %zu",
                    b->memo_n, cap);
    }
    if (b->memo_n)
        memcpy(tokens, b->memo_ids, b->memo_n * sizeof *tokens);
    *n_tokens = b->memo_n;
    return ILAB_OK;
}

static ilab_status bp_tokenize(ilab_backend_t *b, const char *text, size_t len, uint32_t flags,
                               int32_t *tokens, size_t cap, size_t *n_tokens)
{
    if (!b || (!text && len) || !n_tokens || (!tokens && cap))
        return fail(b, ILAB_INVALID_ARGUMENT, "tokenize: NULL argument");
#if BUG == 79
    /* tokenizing touches no sequence: no need to take the instance lock */
    return tokenize_locked(b, text, len, flags, tokens, cap, n_tokens);
#else
    pthread_mutex_lock(&b->mu);
    ilab_status st = tokenize_locked(b, text, len, flags, tokens, cap, n_tokens);
    pthread_mutex_unlock(&b->mu);
    return st;
#endif
}

static ilab_status bp_detokenize(ilab_backend_t *b, const int32_t *tokens, size_t n_tokens,
                                 char *text, size_t cap, size_t *len)
{
#if BUG == 26
    if (!b || !len || (!text && cap))
#else
    if (!b || (!tokens && n_tokens) || !len || (!text && cap))
#endif
        return fail(b, ILAB_INVALID_ARGUMENT, "detokenize: NULL argument");
    size_t need = 0;
    for (size_t i = 0; i < n_tokens; i++) {
#if BUG == 38
        if (tokens[i] < -1 || tokens[i] >= VOCAB)
#else
        if (tokens[i] < 0 || tokens[i] >= VOCAB)
#endif
            return fail(b, ILAB_INVALID_ARGUMENT, "detokenize: token %d at %zu is not in [0, %d)",
                        tokens[i], i, VOCAB);
        size_t tl = 0;
        if (tokens[i] >= 0)
            token_text(tokens[i], &tl);
        need += tl;
    }
#if BUG == 31
    if (cap < need) {
#else
    if (cap < need + 1) {
#endif
#if BUG == 33
        *len = need + 1;
#else
        *len = need;
#endif
        return fail(b, ILAB_BUFFER_TOO_SMALL, "detokenize: %zu bytes + NUL needed, room for %zu",
                    need, cap);
    }
    size_t n = 0;
    for (size_t i = 0; i < n_tokens; i++) {
        size_t tl = 0;
        const char *s = tokens[i] >= 0 ? token_text(tokens[i], &tl) : "";
        memcpy(text + n, s, tl);
        n += tl;
    }
    if (n < cap)
        text[n] = '\0';
    *len = n;
    return ILAB_OK;
}

static ilab_status bp_token_piece(ilab_backend_t *b, int32_t prev, int32_t token, char *piece,
                                  size_t cap, size_t *len)
{
#if BUG == 32
    if (!b || !len || !piece)
#else
    if (!b || !len || (!piece && cap))
#endif
        return fail(b, ILAB_INVALID_ARGUMENT, "token_piece: NULL argument");
#if BUG == 37
    if (prev < -1 || prev > VOCAB || token < 0 || token >= VOCAB)
#else
    if (prev < -1 || prev >= VOCAB || token < 0 || token >= VOCAB)
#endif
        return fail(b, ILAB_INVALID_ARGUMENT, "token_piece: token %d (after %d) is not in [0, %d)",
                    token, prev, VOCAB);
    size_t tl;
    const char *s = token_text(token, &tl);
#if BUG == 40
    if (token == BOS) {
        s = "<s>";
        tl = 3;
    }
#endif
#if BUG == 36
    /* sentencepiece-style: the first word after BOS has no leading space */
    if (prev == BOS && tl > 0 && s[0] == ' ') {
        s++;
        tl--;
    }
#endif
    if (cap < tl + 1) {
        *len = tl;
        return fail(b, ILAB_BUFFER_TOO_SMALL, "token_piece: %zu bytes + NUL needed, room for %zu",
                    tl, cap);
    }
    memcpy(piece, s, tl);
    piece[tl] = '\0';
    *len = tl;
    return ILAB_OK;
}

/* --- KV pool ----------------------------------------------------------------------- */

static int alloc_block(ilab_backend_t *b)
{
    if (b->n_free == 0)
        return -1;
    int k = b->free_stack[--b->n_free];
    b->refcnt[k] = 1;
    return k;
}

static void release_block(ilab_backend_t *b, int k)
{
#if BUG == 59
    b->refcnt[k] = 0;
    b->free_stack[b->n_free++] = k;
#else
    if (--b->refcnt[k] == 0)
        b->free_stack[b->n_free++] = k;
#endif
}

static int blocks_for(int32_t len) { return (len + BLOCK - 1) / BLOCK; }

static sequence *lookup(ilab_backend_t *b, ilab_seq_t h)
{
    if (!b || h == ILAB_SEQ_NONE)
        return NULL;
    uint64_t slot = (h & 0xff) - 1;
    if (slot >= MAX_SEQS)
        return NULL;
    sequence *s = &b->seqs[slot];
    return s->in_use && s->handle == h ? s : NULL;
}

static uint64_t state_at(ilab_backend_t *b, const sequence *s, int32_t pos)
{
    if (pos < 0)
        return b->h0;
#if BUG == 77
    return b->bstate[s->blk[pos / BLOCK + (pos % BLOCK == BLOCK - 1)]][pos % BLOCK];
#else
    return b->bstate[s->blk[pos / BLOCK]][pos % BLOCK];
#endif
}

static ilab_status new_sequence(ilab_backend_t *b, ilab_seq_t *out, sequence **res)
{
    for (int i = 0; i < MAX_SEQS; i++) {
        sequence *s = &b->seqs[i];
        if (s->in_use)
            continue;
#if BUG == 68
        s->blk = calloc(MAX_BLK_PER_SEQ, sizeof(int)); /* fresh table per sequence */
        if (!s->blk)
            return fail(b, ILAB_OUT_OF_MEMORY, "out of memory");
#endif
        s->in_use = 1;
        s->len = 0;
        s->nblk = 0;
        b->serial++;
#if BUG == 65
        s->handle = ((uint64_t)b->serial << 8) | (uint64_t)(i + 1);
#else
        s->handle = (b->serial << 8) | (uint64_t)(i + 1);
#endif
        *out = s->handle;
        *res = s;
        return ILAB_OK;
    }
    return fail(b, ILAB_OUT_OF_MEMORY, "all %d sequence slots are in use", MAX_SEQS);
}

static ilab_status bp_seq_create(ilab_backend_t *b, ilab_seq_t *seq)
{
    if (!b || !seq)
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_create: NULL argument");
    sequence *s;
#if BUG == 80
    /* find a slot without the lock; only the serial needs it */
    for (int i = 0; i < MAX_SEQS; i++) {
        s = &b->seqs[i];
        if (s->in_use)
            continue;
        s->len = 0;
        s->nblk = 0;
        for (volatile int spin = 0; spin < 200; spin++)
            ;
        s->in_use = 1;
        pthread_mutex_lock(&b->mu);
        b->serial++;
        s->handle = (b->serial << 8) | (uint64_t)(i + 1);
        pthread_mutex_unlock(&b->mu);
        *seq = s->handle;
        return ILAB_OK;
    }
    return fail(b, ILAB_OUT_OF_MEMORY, "all %d sequence slots are in use", MAX_SEQS);
#else
    pthread_mutex_lock(&b->mu);
    ilab_status st = new_sequence(b, seq, &s);
    pthread_mutex_unlock(&b->mu);
    return st;
#endif
}

static ilab_status bp_seq_free(ilab_backend_t *b, ilab_seq_t seq)
{
    if (!b)
        return ILAB_INVALID_ARGUMENT;
    pthread_mutex_lock(&b->mu);
    sequence *s = lookup(b, seq);
    if (!s) {
        pthread_mutex_unlock(&b->mu);
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_free: stale or unknown sequence %#llx",
                    (unsigned long long)seq);
    }
    for (int i = 0; i < s->nblk; i++)
        release_block(b, s->blk[i]);
    s->nblk = 0;
    s->len = 0;
    s->in_use = 0;
    if (b->hot_handle == seq)
        b->hot_handle = 0;
#if BUG == 68
    s->blk = NULL;
#endif
    pthread_mutex_unlock(&b->mu);
    return ILAB_OK;
}

static ilab_status bp_seq_fork(ilab_backend_t *b, ilab_seq_t parent, ilab_seq_t *child)
{
    if (!b || !child)
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_fork: NULL argument");
    pthread_mutex_lock(&b->mu);
    ilab_status st = ILAB_OK;
    sequence *p = lookup(b, parent), *c = NULL;
    ilab_seq_t h = 0;
    if (!p) {
        st = fail(b, ILAB_INVALID_ARGUMENT, "seq_fork: stale or unknown parent %#llx",
                  (unsigned long long)parent);
        goto out;
    }
#if BUG == 60
    if (p->len == 0) {
        st = fail(b, ILAB_INVALID_ARGUMENT, "seq_fork: parent is empty, nothing to share");
        goto out;
    }
#endif
    st = new_sequence(b, &h, &c);
    if (st != ILAB_OK) {
#if BUG == 67
        st = fail(b, ILAB_INVALID_ARGUMENT, "seq_fork: cannot fork %#llx",
                  (unsigned long long)parent);
#endif
        goto out;
    }
    for (int i = 0; i < p->nblk; i++) {
        c->blk[i] = p->blk[i];
        b->refcnt[p->blk[i]]++;
    }
    c->nblk = p->nblk;
#if BUG == 73
    c->len = p->nblk * BLOCK;
    if (c->len > MAX_CONTEXT)
        c->len = MAX_CONTEXT;
#else
    c->len = p->len;
#endif
    *child = h;
out:
    pthread_mutex_unlock(&b->mu);
    return st;
}

static ilab_status bp_seq_truncate(ilab_backend_t *b, ilab_seq_t seq, int32_t n_keep)
{
    if (!b)
        return ILAB_INVALID_ARGUMENT;
    pthread_mutex_lock(&b->mu);
    ilab_status st = ILAB_OK;
    sequence *s = lookup(b, seq);
    if (!s) {
        st = fail(b, ILAB_INVALID_ARGUMENT, "seq_truncate: stale or unknown sequence");
        goto out;
    }
#if BUG == 62
    if (n_keep < 0 || n_keep > s->len + 1 || n_keep > MAX_CONTEXT) {
#else
    if (n_keep < 0 || n_keep > s->len) {
#endif
        st = fail(b, ILAB_INVALID_ARGUMENT, "seq_truncate: n_keep %d not in [0, %d]", n_keep,
                  s->len);
        goto out;
    }
#if BUG == 61
    int keep = n_keep / BLOCK;
#else
    int keep = blocks_for(n_keep);
#endif
#if BUG == 62
    if (keep > s->nblk)
        keep = s->nblk;
#endif
    for (int i = keep; i < s->nblk; i++)
        release_block(b, s->blk[i]);
    s->nblk = keep;
    s->len = n_keep;
    if (b->hot_handle == seq)
        b->hot_handle = 0;
out:
    pthread_mutex_unlock(&b->mu);
    return st;
}

static ilab_status bp_seq_length(ilab_backend_t *b, ilab_seq_t seq, int32_t *length)
{
    if (!b || !length)
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_length: NULL argument");
    pthread_mutex_lock(&b->mu);
#if BUG == 66
    /* fast path: the slot tells us everything */
    uint64_t slot = (seq & 0xff) - 1;
    sequence *s = seq && slot < MAX_SEQS && b->seqs[slot].in_use ? &b->seqs[slot] : NULL;
#else
    sequence *s = lookup(b, seq);
#endif
    if (!s) {
        pthread_mutex_unlock(&b->mu);
#if BUG == 24
        return ILAB_INVALID_ARGUMENT;
#else
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_length: stale or unknown sequence %#llx",
                    (unsigned long long)seq);
#endif
    }
    *length = s->len;
    pthread_mutex_unlock(&b->mu);
    return ILAB_OK;
}

/* --- eval ------------------------------------------------------------------------------ */

static ilab_status check_item(ilab_backend_t *b, const ilab_batch_item_t *it, size_t i)
{
    if (!it)
        return fail(b, ILAB_INVALID_ARGUMENT, "eval: item %zu is NULL", i);
    if (it->struct_size < ILAB_BATCH_ITEM_SIZE_1_0)
#if BUG == 13
        return fail(b, ILAB_INVALID_ARGUMENT, "eval: item %zu struct_size %u too small", i,
                    it->struct_size);
#else
        return fail(b, ILAB_ABI_MISMATCH, "eval: item %zu struct_size %u is smaller than ABI "
                    "1.0's %u", i, it->struct_size, ILAB_BATCH_ITEM_SIZE_1_0);
#endif
#if BUG != 14
    if (!ilab_struct_tail_is_zero(it, sizeof *it))
        return fail(b, ILAB_ABI_MISMATCH, "eval: item %zu (ilab_batch_item_t, struct_size %u) "
                    "sets members past this plugin's %zu bytes", i, it->struct_size, sizeof *it);
#endif
#if BUG == 56
    if (it->flags & ~(uint32_t)0x3)
#else
    if (it->flags & ~(uint32_t)ILAB_EVAL_ALL_LOGITS)
#endif
        return fail(b, ILAB_INVALID_ARGUMENT, "eval: item %zu has unknown flag bits 0x%x", i,
                    it->flags);
    sequence *s = lookup(b, it->seq);
    if (!s)
        return fail(b, ILAB_INVALID_ARGUMENT, "eval: item %zu names a stale or unknown sequence", i);
#if BUG == 57
    if (!it->tokens || it->n_tokens == 0)
#else
    if (!it->tokens || it->n_tokens < 1)
#endif
        return fail(b, ILAB_INVALID_ARGUMENT, "eval: item %zu has no tokens", i);
#if BUG != 71
    for (int32_t t = 0; t < it->n_tokens; t++)
        if (it->tokens[t] < 0 || it->tokens[t] >= VOCAB)
            return fail(b, ILAB_INVALID_ARGUMENT, "eval: item %zu token %d is %d, not in [0, %d)",
                        i, t, it->tokens[t], VOCAB);
#endif
#if BUG == 63
    if ((int64_t)s->len + it->n_tokens >= MAX_CONTEXT)
#elif BUG == 64
    if (0)
#else
    if ((int64_t)s->len + it->n_tokens > MAX_CONTEXT)
#endif
        return fail(b, ILAB_CONTEXT_OVERFLOW, "eval: item %zu: %d + %d positions pass "
                    "max_context %d", i, s->len, it->n_tokens, MAX_CONTEXT);
    return ILAB_OK;
}

/* Blocks an item takes from the pool: new blocks past its last one, plus a
 * copy of a shared, partly filled last block (copy on write). */
static int blocks_needed(ilab_backend_t *b, const sequence *s, int32_t n)
{
    int need = blocks_for(s->len + n) - blocks_for(s->len);
    if (s->len % BLOCK && b->refcnt[s->blk[s->nblk - 1]] > 1)
        need++;
    return need;
}

/* Make block index bi of s exclusively owned (copy on write). */
__attribute__((unused)) static int own_block(ilab_backend_t *b, sequence *s, int bi)
{
    int k = s->blk[bi];
    if (b->refcnt[k] == 1)
        return 1;
    int c = alloc_block(b);
    if (c < 0)
        return 0;
    memcpy(b->bstate[c], b->bstate[k], sizeof b->bstate[c]);
#if BUG != 74
    release_block(b, k);
#endif
    s->blk[bi] = c;
    return 1;
}

static ilab_status bp_eval(ilab_backend_t *b, const ilab_batch_item_t *const *items,
                           size_t n_items)
{
    if (!b)
        return ILAB_INVALID_ARGUMENT;
#if BUG == 54
    if (!items || n_items == 0 || n_items >= MAX_BATCH)
#else
    if (!items || n_items == 0 || n_items > MAX_BATCH)
#endif
        return fail(b, ILAB_INVALID_ARGUMENT, "eval: need 1..%d items, got %zu", MAX_BATCH, n_items);
    pthread_mutex_lock(&b->mu);
    ilab_status st = ILAB_OK;
    int *plan = malloc(n_items * sizeof *plan);
    if (!plan) {
        st = fail(b, ILAB_OUT_OF_MEMORY, "eval: out of memory");
        goto out_unlocked_free;
    }
    int total = 0;
    for (size_t i = 0; i < n_items; i++) {
        st = check_item(b, items[i], i);
        if (st != ILAB_OK)
            goto out;
#if BUG == 55
        if (i > 0 && items[i - 1]->seq == items[i]->seq) {
            st = fail(b, ILAB_INVALID_ARGUMENT, "eval: items %zu and %zu name one sequence", i - 1, i);
            goto out;
        }
#else
        for (size_t j = 0; j < i; j++)
            if (items[j]->seq == items[i]->seq) {
                st = fail(b, ILAB_INVALID_ARGUMENT, "eval: items %zu and %zu name one sequence", j, i);
                goto out;
            }
#endif
        plan[i] = blocks_needed(b, lookup(b, items[i]->seq), items[i]->n_tokens);
#if BUG == 72
        total = plan[i];
        if (total > b->n_free) {
#else
        total += plan[i];
#if BUG == 76
        if (total >= b->n_free && total > 0) {
#else
        if (total > b->n_free) {
#endif
#endif
            st = fail(b, ILAB_OUT_OF_MEMORY, "eval: the batch needs %d more KV blocks, %d free",
                      total, b->n_free);
#if BUG == 69
            pthread_mutex_unlock(&b->mu);
            return st;
#else
            goto out;
#endif
        }
    }
#if BUG == 81
    /* the slow part runs unlocked so other sequences can proceed */
    pthread_mutex_unlock(&b->mu);
#endif
#if BUG == 52
    uint64_t carry = b->h0; /* running state of the batch's prefill stream */
#endif
    for (size_t i = 0; i < n_items; i++) {
        const ilab_batch_item_t *it = items[i];
        sequence *s = lookup(b, it->seq);
        uint64_t h;
#if BUG == 52
        if (s->len == 0)
            h = carry;
        else
#endif
#if BUG == 70
        if (b->hot_handle == it->seq)
#else
        if (b->hot_handle == it->seq && b->hot_len == s->len)
#endif
            h = b->hot_h;
        else
            h = state_at(b, s, s->len - 1);
        int all = (it->flags & ILAB_EVAL_ALL_LOGITS) != 0;
#if BUG == 78
        int cur = s->nblk ? s->blk[s->nblk - 1] : -1;
        int32_t start = s->len;
#endif
#if BUG == 49
        if (!it->logits)
            continue; /* nothing to compute */
#endif
        for (int32_t t = 0; t < it->n_tokens; t++) {
            int32_t pos = s->len;
#if BUG == 71
            if (it->tokens[t] < 0 || it->tokens[t] >= VOCAB) {
                st = fail(b, ILAB_INVALID_ARGUMENT, "eval: item %zu token %d is %d, not in "
                          "[0, %d)", i, t, it->tokens[t], VOCAB);
                goto out;
            }
#endif
#if BUG == 64
            if (pos >= MAX_CONTEXT) {
                st = fail(b, ILAB_CONTEXT_OVERFLOW, "eval: item %zu passes max_context %d", i,
                          MAX_CONTEXT);
                goto out;
            }
#endif
            if (pos % BLOCK == 0) {
                int k = alloc_block(b);
                if (k < 0) { /* cannot happen: planned above */
                    st = fail(b, ILAB_INTERNAL, "eval: KV pool exhausted mid-batch");
                    goto out;
                }
                s->blk[s->nblk++] = k;
#if BUG == 78
                if ((pos - start) % BLOCK == 0)
                    cur = k;
#endif
#if BUG == 58
            } else if (pos != s->len) { /* appending into our own last block */
#else
            } else if (!own_block(b, s, pos / BLOCK)) {
#endif
                st = fail(b, ILAB_OUT_OF_MEMORY, "eval: KV pool exhausted");
                goto out;
            }
#if BUG == 78
            else if (pos == start)
                cur = s->blk[pos / BLOCK];
#endif
            h = step(h, it->tokens[t]);
#if BUG == 78
            b->bstate[cur][pos % BLOCK] = h;
#else
            b->bstate[s->blk[pos / BLOCK]][pos % BLOCK] = h;
#endif
            s->len++;
            int last = t == it->n_tokens - 1;
            if (it->logits && (last || all)) {
#if BUG == 53
                float *row = it->logits + (all ? (size_t)pos * VOCAB : 0);
#else
                float *row = it->logits + (all ? (size_t)t * VOCAB : 0);
#endif
#if BUG == 51
                if (last && !all && b->row_memo && b->row_memo_tok == it->tokens[t]) {
                    memcpy(row, b->row_memo, VOCAB * sizeof *row);
                    continue;
                }
#endif
                logits_row(h, row);
#if BUG == 51
                if (last && !all) {
                    if (!b->row_memo)
                        b->row_memo = malloc(VOCAB * sizeof *b->row_memo);
                    if (b->row_memo) {
                        memcpy(b->row_memo, row, VOCAB * sizeof *row);
                        b->row_memo_tok = it->tokens[t];
                    }
                }
#endif
            }
        }
#if BUG == 48
        if (it->logits && all)
            logits_row(h, it->logits + (size_t)it->n_tokens * VOCAB); /* row "after the last" */
#endif
#if BUG == 52
        carry = h;
#endif
        if (n_items == 1) {
            b->hot_handle = it->seq;
            b->hot_len = s->len;
            b->hot_h = h;
        }
    }
#if BUG == 81
    free(plan);
    return st;
#endif
out:
    pthread_mutex_unlock(&b->mu);
out_unlocked_free:
    free(plan);
    return st;
}

/* --- ABI 1.1 / 1.2 ----------------------------------------------------------------------- */

static ilab_status bp_cache_stats(ilab_backend_t *b, ilab_cache_stats_t *stats)
{
    if (!b || !stats)
        return fail(b, ILAB_INVALID_ARGUMENT, "cache_stats: NULL stats");
    if (stats->struct_size < ILAB_CACHE_STATS_SIZE_1_1)
        return fail(b, ILAB_ABI_MISMATCH, "cache_stats: struct_size %u is smaller than ABI 1.1's %u",
                    stats->struct_size, ILAB_CACHE_STATS_SIZE_1_1);
    pthread_mutex_lock(&b->mu);
    ilab_cache_stats_t now = {.struct_size = stats->struct_size, .block_size = BLOCK,
                              .total_positions = (int64_t)b->n_blocks * BLOCK,
                              .free_positions = (int64_t)b->n_free * BLOCK};
    pthread_mutex_unlock(&b->mu);
    memcpy(stats, &now, stats->struct_size < sizeof now ? stats->struct_size : sizeof now);
    return ILAB_OK;
}

__attribute__((unused)) static ilab_status bp_eog_ids(ilab_backend_t *b, int32_t *ids, size_t cap, size_t *n_ids)
{
    if (!b || !n_ids || (!ids && cap))
        return fail(b, ILAB_INVALID_ARGUMENT, "eog_ids: NULL argument");
#if BUG == 43
    static const int32_t eog[2] = {IM_END, EOS}; /* ascending */
#else
    static const int32_t eog[2] = {EOS, IM_END}; /* EOS first, then ascending */
#endif
    *n_ids = 2;
    if (cap < 2)
        return fail(b, ILAB_BUFFER_TOO_SMALL, "eog_ids: 2 ids needed, room for %zu", cap);
    memcpy(ids, eog, sizeof eog);
    return ILAB_OK;
}

static ilab_status bp_chat_template(ilab_backend_t *b, char *text, size_t cap, size_t *len)
{
    if (!b || !len || (!text && cap))
        return fail(b, ILAB_INVALID_ARGUMENT, "chat_template: NULL argument");
    size_t n = sizeof chat_tmpl - 1;
    *len = n;
    if (cap < n + 1) {
#if BUG == 44
        if (cap) { /* a truncated template is better than nothing */
            memcpy(text, chat_tmpl, cap - 1);
            text[cap - 1] = '\0';
        }
#endif
        return fail(b, ILAB_BUFFER_TOO_SMALL, "chat_template: %zu bytes + NUL needed, room for %zu",
                    n, cap);
    }
    memcpy(text, chat_tmpl, n + 1);
    return ILAB_OK;
}

/* --- not declared: fail closed --------------------------------------------------------- */

static ilab_status bp_generate(ilab_backend_t *b, const ilab_generate_request_t *request,
                               ilab_event_fn on_event, void *user_data)
{
    static const char msg[] = "generate: capability 'sampling: backend' not declared "
                              "(bpkv samples on the host)";
    if (on_event) {
        ilab_event_t ev = {.struct_size = sizeof ev, .type = ILAB_EVENT_ERROR,
                           .request_id = request ? request->request_id : 0,
                           .finish_reason = ILAB_FINISH_ERROR, .status = ILAB_UNSUPPORTED,
#if BUG == 28
                           .message = ""};
#else
                           .message = msg};
#endif
        on_event(user_data, &ev);
    }
    return fail(b, ILAB_UNSUPPORTED, "%s", msg);
}

static ilab_status bp_cancel(ilab_backend_t *b, uint64_t request_id)
{
    (void)request_id;
#if BUG == 27
    (void)b;
    return ILAB_OK; /* nothing runs, so nothing to cancel */
#else
    return fail(b, ILAB_UNSUPPORTED, "cancel: capability 'cancel' not declared");
#endif
}

#if BUG == 6
/* debugging aid: dump the KV pool (call it from gdb) */
ILAB_PLUGIN_EXPORT void bpkv_debug_dump(const ilab_backend_t *b)
{
    if (b)
        fprintf(stderr, "bpkv: %d/%d blocks free\n", b->n_free, b->n_blocks);
}
#endif

static const ilab_backend_api_t api = {
#if BUG == 2
    .struct_size = ILAB_BACKEND_API_SIZE_1_1,
#else
    .struct_size = sizeof(ilab_backend_api_t),
#endif
    .probe = bp_probe,
    .create = bp_create,
    .destroy = bp_destroy,
    .last_error = bp_last_error,
    .model_info = bp_model_info,
    .tokenize = bp_tokenize,
    .detokenize = bp_detokenize,
    .token_piece = bp_token_piece,
    .seq_create = bp_seq_create,
    .seq_free = bp_seq_free,
    .seq_fork = bp_seq_fork,
    .seq_truncate = bp_seq_truncate,
    .seq_length = bp_seq_length,
    .eval = bp_eval,
    .generate = bp_generate,
    .cancel = bp_cancel,
    .cache_stats = bp_cache_stats,
#if BUG != 5
    .eog_ids = bp_eog_ids,
#endif
    .chat_template = bp_chat_template,
};

ILAB_PLUGIN_EXPORT const ilab_plugin_entry_t ilab_plugin_entry = {
#if BUG == 1
    .struct_size = sizeof(ilab_host_t),
#else
    .struct_size = sizeof(ilab_plugin_entry_t),
#endif
    .abi_major = ILAB_ABI_MAJOR,
    .abi_minor = 2,
    .name = PLUGIN_NAME,
    .version = PLUGIN_VERSION,
    .manifest_yaml = manifest,
    .backend = &api,
};
