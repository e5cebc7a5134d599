/* freshd_backend — a small but complete inferlab plugin, and the source of a
 * held-out set of broken variants.
 *
 * Base (BUG undefined or 0): a correct plugin written from docs/contract.md
 * and the public SDK headers. It grew from sdk/template/template_backend.c
 * and adds what the template leaves out, so that every section of the
 * contract has something to break:
 *   - tokenizer: one token per byte (0..255), BOS 256, EOS 257;
 *   - logits: full; a sequence's state is a rolling hash of its whole
 *     history (one 64-bit state per position, the "KV cache"), and the
 *     logits after a position are a coarse hash of that state (16 levels, so
 *     ties at the maximum are common);
 *   - a paged KV cache: blocks of 16 positions, refcounted, shared by forks
 *     and copied on write; cache.stats (ABI 1.1) reports the pool;
 *   - sampling: backend (generate() with every SMP-5 processor, stop
 *     strings, stop ids, top logprobs) and cancel;
 *   - thread_safety: sequence (slot table and pool under one mutex; the
 *     logits are computed outside it).
 *
 * Variant N is built with -DBUG=N; each `#if BUG == N` below is one bug a
 * plugin author could plausibly write. cases.txt says what each one breaks. */
#include <inferlab/inferlab.h>

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifndef BUG
#define BUG 0
#endif

#define PLUGIN_NAME "freshd_backend"
#define PLUGIN_VERSION "0.3.0"

#define VOCAB 258
#define BOS 256
#define EOS 257
#define MAX_CONTEXT 1024
#define MAX_SEQS 64
#define MAX_BATCH 16
#define BLOCK 16
#define N_BLOCKS 512
#define SEQ_BLOCKS (MAX_CONTEXT / BLOCK)
#define TOPK_MAX 20
#define MAX_RUNNING 64
#define MAX_STOP 16
#define MAX_STOP_LEN 4096
#define INIT_STATE 0x243f6a8885a308d3ull

#if BUG == 6
#define MANIFEST_VERSION "0.3.1"
#else
#define MANIFEST_VERSION PLUGIN_VERSION
#endif
#if BUG == 7
#define MANIFEST_CTX "2048"
#else
#define MANIFEST_CTX "1024"
#endif
#if BUG == 84
#define MANIFEST_CANCEL "false"
#else
#define MANIFEST_CANCEL "true"
#endif

static const char manifest[] =
    "name: " PLUGIN_NAME "\n"
    "version: " MANIFEST_VERSION "\n"
    "abi: 1.1\n"
    "description: >-\n"
    "  Byte tokenizer, rolling-hash logits over a paged KV cache, and its own\n"
    "  sampler; a small complete backend.\n"
    "capabilities:\n"
    "  tokenizer: true\n"
    "  logits: full\n"
    "  topk_max: 20\n"
    "  sampling: backend\n"
    "  cache: {fork: true, truncate: true, stats: true}\n"
    "  batching: {max_batch: 16}\n"
    "  streaming: true\n"
    "  cancel: " MANIFEST_CANCEL "\n"
    "  max_context: " MANIFEST_CTX "\n"
    "  thread_safety: sequence\n"
    "config:\n"
    "  seed:\n"
    "    type: int\n"
    "    default: 0\n"
    "    description: Seed of the hashed model; each seed is a different model.\n"
    "  threads:\n"
    "    type: int\n"
    "    default: 1\n"
    "    description: Worker threads, 1 to 64.\n"
    "  data_dir:\n"
    "    type: string\n"
    "    default: \"\"\n"
    "    description: A folder that must exist; empty means none is needed.\n";

/* --- instance ---------------------------------------------------------------- */

typedef struct kv_block {
    uint64_t state[BLOCK];
    int refs; /* 0 = free */
} kv_block;

typedef struct sequence {
    uint32_t generation;
    int in_use;
    int32_t len;
    int16_t blocks[SEQ_BLOCKS]; /* ceil(len / BLOCK) of them are held */
} sequence;

typedef struct running_req {
    int active;
    int cancelled;
    uint64_t id;
} running_req;

struct ilab_backend {
    const ilab_host_t *host;
    uint64_t seed;
    int threads;
    pthread_mutex_t lock; /* slots, pool and the running table */
    sequence seqs[MAX_SEQS];
    kv_block *pool;
    int16_t free_list[N_BLOCKS];
    int n_free;
    running_req running[MAX_RUNNING];
    char digest[80];
#if BUG == 8
    int digest_ready;
#endif
#if BUG == 11
    float *scratch_unused;
#endif
#if BUG == 89
    float scratch[VOCAB];
#endif
#if BUG == 31
    int32_t memo_token;
    float memo[VOCAB];
#endif
#if BUG == 47
    ilab_seq_t fast_seq;
    uint64_t fast_state;
#endif
#if BUG == 45
    int next_slot;
#endif
#if BUG == 70
    int rng_seeded;
    uint64_t rng;
#endif
#if BUG == 91
    char gen_text[8192];
#endif
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

#if BUG == 10
/* An optional profiling hook some builds link in. */
extern void freshd_profile_hook(const char *what) __attribute__((weak));
#endif

#if BUG == 9
/* Left non-static while debugging the model from a test program. */
int freshd_debug_level = 0;
#endif

/* --- the "model" ------------------------------------------------------------- */

static uint64_t mix(uint64_t x) /* splitmix64's finaliser */
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t next_state(uint64_t seed, uint64_t prev, int32_t token)
{
    return mix(prev ^ mix(seed + 0x9e3779b97f4a7c15ull * (uint64_t)(token + 1)));
}

/* The logits after a position whose state is `st`: 16 levels in [-4, 3.5],
 * lowercase letters and space nudged up by 2, so the maximum is often tied. */
static void state_logits(uint64_t st, float *out)
{
    for (int v = 0; v < VOCAB; v++) {
        uint64_t r = mix(st + 0x632be59bd9b4e019ull * (uint64_t)(v + 1));
        float logit = (float)(r >> 60) * 0.5f - 4.0f;
        if ((v >= 'a' && v <= 'z') || v == ' ')
            logit += 2.0f;
        out[v] = logit;
    }
}

/* --- configuration, probe, create ----------------------------------------------- */

typedef struct config {
    uint64_t seed;
    int threads;
    const char *data_dir;
} config;

static int parse_int(const char *s, long long *v)
{
    char *end = NULL;
    if (!s || !*s)
        return 0;
    *v = strtoll(s, &end, 10);
    return *end == '\0';
}

/* Parses and checks the configuration; on failure writes the reason. */
static ilab_status parse_config(const ilab_config_entry_t *cfg, size_t n, config *c, char *msg,
                                size_t cap)
{
    c->seed = 0;
    c->threads = 1;
    c->data_dir = "";
    if (n && !cfg) {
        snprintf(msg, cap, PLUGIN_NAME ": config is NULL with %zu entries", n);
        return ILAB_INVALID_ARGUMENT;
    }
    for (size_t i = 0; i < n; i++) {
        const char *k = cfg[i].key, *v = cfg[i].value;
        long long x;
        if (!k || !v) {
            snprintf(msg, cap, PLUGIN_NAME ": config entry %zu has a NULL key or value", i);
            return ILAB_INVALID_ARGUMENT;
        }
        if (!strcmp(k, "seed")) {
            if (!parse_int(v, &x)) {
                snprintf(msg, cap, PLUGIN_NAME ": config key 'seed' must be an int, got '%s'", v);
                return ILAB_INVALID_ARGUMENT;
            }
            c->seed = (uint64_t)x;
        } else if (!strcmp(k, "threads")) {
            if (!parse_int(v, &x) || x < 1 || x > 64) {
                snprintf(msg, cap, PLUGIN_NAME ": config key 'threads' must be 1..64, got '%s'", v);
#if BUG == 86
                return ILAB_UNAVAILABLE;
#else
                return ILAB_INVALID_ARGUMENT;
#endif
            }
            c->threads = (int)x;
        } else if (!strcmp(k, "data_dir")) {
            c->data_dir = v;
        } else {
#if BUG == 87
            continue; /* the host already checked the keys */
#else
            snprintf(msg, cap, PLUGIN_NAME ": unknown config key '%s'", k);
            return ILAB_INVALID_ARGUMENT;
#endif
        }
    }
    return ILAB_OK;
}

/* "Can it run here": only a data_dir that is missing stops it. */
static int available(const config *c, char *msg, size_t cap)
{
    struct stat st;
    if (!c->data_dir[0])
        return 1;
    if (stat(c->data_dir, &st) == 0 && S_ISDIR(st.st_mode))
        return 1;
#if BUG == 16
    if (cap == (size_t)-1) /* create() passes this: its own wording */
        return 0;
#endif
    snprintf(msg, cap, PLUGIN_NAME ": data_dir '%s' is not a folder here", c->data_dir);
    return 0;
}

#if BUG == 17
static int probe_cached; /* probing twice is wasteful */
static ilab_status probe_cached_status;
static char probe_cached_reason[256];
#endif

/* Writes msg into the caller's reason buffer, truncated and NUL-terminated. */
static void put_reason(char *reason, size_t cap, const char *msg)
{
    if (!reason || !cap)
        return;
#if BUG == 14
    snprintf(reason, strlen(msg) + 1 > cap ? strlen(msg) + 1 : cap, "%s", msg);
#elif BUG == 15
    strncpy(reason, msg, cap);
#else
    snprintf(reason, cap, "%s", msg);
#endif
}

static ilab_status fd_probe(const ilab_host_t *host, const ilab_config_entry_t *cfg, size_t n,
                            char *reason, size_t reason_cap)
{
    (void)host;
    char msg[512] = "";
    config c;
#if BUG == 17
    if (probe_cached) {
        put_reason(reason, reason_cap, probe_cached_reason);
        return probe_cached_status;
    }
#endif
    ilab_status st = parse_config(cfg, n, &c, msg, sizeof msg);
    if (st == ILAB_OK && !available(&c, msg, sizeof msg))
        st = ILAB_UNAVAILABLE;
#if BUG == 17
    probe_cached = 1;
    probe_cached_status = st;
    snprintf(probe_cached_reason, sizeof probe_cached_reason, "%s", msg);
#endif
    put_reason(reason, reason_cap, msg);
    return st;
}

static void fill_digest(ilab_backend_t *b)
{
    uint64_t h = mix(0x5eedull);
#if BUG != 92
    h = mix(h ^ b->seed);
#endif
    char *p = b->digest + snprintf(b->digest, sizeof b->digest, "sha256:");
    for (int i = 0; i < 4; i++) {
        h = mix(h + 0x9e3779b97f4a7c15ull);
        p += snprintf(p, 17, "%016llx", (unsigned long long)h);
    }
}

static ilab_status fd_create(const ilab_host_t *host, const ilab_config_entry_t *cfg, size_t n,
                             char *error, size_t error_cap, ilab_backend_t **out)
{
    char msg[512] = "";
    config c;
#if BUG == 88
    if (out)
        *out = NULL;
#endif
    if (!out) {
        put_reason(error, error_cap, PLUGIN_NAME ": create() needs out");
        return ILAB_INVALID_ARGUMENT;
    }
    ilab_status st = parse_config(cfg, n, &c, msg, sizeof msg);
    if (st != ILAB_OK) {
        put_reason(error, error_cap, msg);
        return st;
    }
#if BUG == 16
    if (!available(&c, msg, (size_t)-1)) {
        snprintf(msg, sizeof msg, PLUGIN_NAME ": cannot create: data_dir '%s' missing", c.data_dir);
        put_reason(error, error_cap, msg);
        return ILAB_UNAVAILABLE;
    }
#else
    if (!available(&c, msg, sizeof msg)) {
        put_reason(error, error_cap, msg);
        return ILAB_UNAVAILABLE;
    }
#endif
    ilab_backend_t *b = calloc(1, sizeof *b);
    kv_block *pool = b ? calloc(N_BLOCKS, sizeof *pool) : NULL;
    if (!pool) {
        free(b);
        put_reason(error, error_cap, PLUGIN_NAME ": out of memory");
        return ILAB_OUT_OF_MEMORY;
    }
    (void)host;
    b->host = host;
    b->seed = c.seed;
    b->threads = c.threads;
    b->pool = pool;
    for (int i = 0; i < N_BLOCKS; i++)
        b->free_list[i] = (int16_t)(N_BLOCKS - 1 - i);
    b->n_free = N_BLOCKS;
    for (int i = 0; i < MAX_SEQS; i++)
        b->seqs[i].generation = 1;
    pthread_mutex_init(&b->lock, NULL);
    ilab_last_error_init(&b->error);
#if BUG != 8
    fill_digest(b);
#endif
#if BUG == 11
    b->scratch_unused = malloc(VOCAB * sizeof(float));
#endif
#if BUG == 10
    if (freshd_profile_hook)
        freshd_profile_hook("create");
#endif
    *out = b;
    return ILAB_OK;
}

static void fd_destroy(ilab_backend_t *b)
{
    if (!b)
        return;
    pthread_mutex_destroy(&b->lock);
    ilab_last_error_destroy(&b->error);
    free(b->pool);
    free(b);
}

static size_t fd_last_error(const ilab_backend_t *b, char *buf, size_t cap)
{
#if BUG == 82
    size_t len = ilab_last_error_copy(b ? &b->error : NULL, buf, cap);
    return cap && len >= cap ? cap - 1 : len;
#elif BUG == 83
    if (buf && cap == 0) {
        buf[0] = '\0';
        return ilab_last_error_copy(b ? &b->error : NULL, NULL, 0);
    }
    return ilab_last_error_copy(b ? &b->error : NULL, buf, cap);
#else
    return ilab_last_error_copy(b ? &b->error : NULL, buf, cap);
#endif
}

static ilab_status fd_model_info(ilab_backend_t *b, ilab_model_info_t *info)
{
    if (!b || !info)
        return fail(b, ILAB_INVALID_ARGUMENT, "model_info: NULL argument");
#if BUG == 2
    { /* start from a clean struct, keeping the caller's size */
        uint32_t size = info->struct_size;
        memset(info, 0, sizeof *info);
        info->struct_size = size;
    }
#endif
    if (info->struct_size < ILAB_MODEL_INFO_SIZE_1_0)
        return fail(b, ILAB_ABI_MISMATCH, "model_info: struct_size %u is smaller than ABI 1.0's %u",
                    info->struct_size, ILAB_MODEL_INFO_SIZE_1_0);
    ilab_model_info_t full;
    memset(&full, 0, sizeof full);
    full.struct_size = info->struct_size;
    full.vocab_size = VOCAB;
    full.bos_id = BOS;
#if BUG == 29
    full.eos_id = VOCAB;
#else
    full.eos_id = EOS;
#endif
#if BUG == 7
    full.max_context = MAX_CONTEXT;
#else
    full.max_context = MAX_CONTEXT;
#endif
    snprintf(full.name, sizeof full.name, "rolling-hash-seed-%llu", (unsigned long long)b->seed);
#if BUG == 8
    if (b->digest_ready)
        snprintf(full.digest, sizeof full.digest, "%s", b->digest);
    else {
        fill_digest(b); /* computed on first use; reported from the next call */
        b->digest_ready = 1;
    }
#else
    snprintf(full.digest, sizeof full.digest, "%s", b->digest);
#endif
#if BUG == 1
    full.struct_size = sizeof full;
#endif
    size_t n = info->struct_size < sizeof full ? info->struct_size : sizeof full;
    memcpy(info, &full, n);
    return ILAB_OK;
}

/* --- tokens ------------------------------------------------------------------- */

#if BUG == 90
static char norm_scratch[1 << 16]; /* the text after normalisation (here: a copy) */
#endif

static ilab_status fd_tokenize(ilab_backend_t *b, const char *text, size_t len, uint32_t flags,
                               int32_t *tokens, size_t cap, size_t *n_tokens)
{
    if (!b || (!text && len) || !n_tokens || (!tokens && cap))
        return fail(b, ILAB_INVALID_ARGUMENT, "tokenize: NULL argument");
#if BUG == 23
    if (flags & ~(uint32_t)(ILAB_TOKENIZE_ADD_BOS | ILAB_TOKENIZE_ADD_EOS | 4u))
#else
    if (flags & ~(uint32_t)(ILAB_TOKENIZE_ADD_BOS | ILAB_TOKENIZE_ADD_EOS))
#endif
        return fail(b, ILAB_INVALID_ARGUMENT, "tokenize: unknown flag bits 0x%x", (unsigned)flags);
#if BUG == 27
    len = strnlen(text ? text : "", len);
#endif
    int add_bos = !!(flags & ILAB_TOKENIZE_ADD_BOS), add_eos = !!(flags & ILAB_TOKENIZE_ADD_EOS);
#if BUG == 22
    if (add_bos)
        add_eos = 0;
#endif
    size_t need = len + (size_t)add_bos + (size_t)add_eos;
#if BUG == 18
    /* Fill while there is room; report the rest. */
    size_t w = 0;
    if (add_bos && w < cap)
        tokens[w++] = BOS;
    for (size_t i = 0; i < len && w < cap; i++)
        tokens[w++] = (unsigned char)text[i];
    if (add_eos && w < cap)
        tokens[w++] = EOS;
    if (need > cap) {
        *n_tokens = need;
        return fail(b, ILAB_BUFFER_TOO_SMALL, "tokenize: %zu tokens needed, room for %zu", need, cap);
    }
    *n_tokens = need;
    return ILAB_OK;
#else
    if (cap < need) {
#if BUG == 21
        *n_tokens = len;
#else
        *n_tokens = need;
#endif
        return fail(b, ILAB_BUFFER_TOO_SMALL, "tokenize: %zu tokens needed, room for %zu", need, cap);
    }
    const char *src = text;
#if BUG == 90
    if (len <= sizeof norm_scratch) {
        for (size_t i = 0; i < len; i++)
            norm_scratch[i] = text[i];
        src = norm_scratch;
    }
#endif
    size_t n = 0;
    if (add_bos)
        tokens[n++] = BOS;
    for (size_t i = 0; i < len; i++)
        tokens[n++] = (unsigned char)src[i];
    if (add_eos)
        tokens[n++] = EOS;
    *n_tokens = n;
    return ILAB_OK;
#endif
}

/* The bytes a token decodes to: one for a byte token, none for BOS/EOS. */
static size_t token_bytes(int32_t token)
{
#if BUG == 24
    return token <= BOS ? 1 : 0;
#else
    return token < BOS ? 1 : 0;
#endif
}

static ilab_status fd_detokenize(ilab_backend_t *b, const int32_t *tokens, size_t n_tokens,
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
#if BUG == 19
    if (cap < need || (cap == 0)) {
#else
    if (cap < need + 1) {
#endif
        *len = need;
        return fail(b, ILAB_BUFFER_TOO_SMALL, "detokenize: %zu bytes + NUL needed, room for %zu",
                    need, cap);
    }
    size_t n = 0;
    for (size_t i = 0; i < n_tokens; i++)
        if (token_bytes(tokens[i]))
            text[n++] = (char)tokens[i];
#if BUG == 19
    if (n < cap)
#endif
        text[n] = '\0';
    *len = n;
    return ILAB_OK;
}

static ilab_status fd_token_piece(ilab_backend_t *b, int32_t prev_token, int32_t token,
                                  char *piece, size_t cap, size_t *len)
{
#if BUG == 20
    if (!b || !len || !piece)
#else
    if (!b || !len || (!piece && cap))
#endif
        return fail(b, ILAB_INVALID_ARGUMENT, "token_piece: NULL argument");
#if BUG == 25
    if (prev_token < -1 || token < 0 || token >= VOCAB)
#else
    if (prev_token < -1 || prev_token >= VOCAB || token < 0 || token >= VOCAB)
#endif
        return fail(b, ILAB_INVALID_ARGUMENT, "token_piece: token %d (after %d) is not in [0, %d)",
                    token, prev_token, VOCAB);
#if BUG == 28
    /* SentencePiece habit: the first piece of a text loses its dummy-prefix space. */
    if (prev_token == -1 && token == ' ') {
        if (cap < 1) {
            *len = 0;
            return fail(b, ILAB_BUFFER_TOO_SMALL, "token_piece: 1 byte needed");
        }
        piece[0] = '\0';
        *len = 0;
        return ILAB_OK;
    }
#endif
    return fd_detokenize(b, &token, 1, piece, cap, len);
}

/* --- the KV pool and sequences (callers hold b->lock) ---------------------------- */

static int held_blocks(int32_t len) { return (len + BLOCK - 1) / BLOCK; }

static int pool_alloc(ilab_backend_t *b)
{
    if (b->n_free == 0)
        return -1;
    int i = b->free_list[--b->n_free];
    b->pool[i].refs = 1;
    return i;
}

static void pool_unref(ilab_backend_t *b, int i)
{
    if (--b->pool[i].refs == 0)
        b->free_list[b->n_free++] = (int16_t)i;
}

static uint64_t make_handle(uint32_t generation, int slot)
{
#if BUG == 43
    return ((uint64_t)(uint16_t)generation << 32) | (uint64_t)(slot + 1);
#else
    return ((uint64_t)generation << 32) | (uint64_t)(slot + 1);
#endif
}

static sequence *lookup(ilab_backend_t *b, ilab_seq_t handle)
{
    uint64_t slot = (handle & 0xffffffffu) - 1;
    if (handle == ILAB_SEQ_NONE || slot >= MAX_SEQS)
        return NULL;
    sequence *s = &b->seqs[slot];
    if (!s->in_use)
        return NULL;
#if BUG == 43
    return (uint16_t)s->generation == (uint32_t)(handle >> 32) ? s : NULL;
#else
    return s->generation == (uint32_t)(handle >> 32) ? s : NULL;
#endif
}

static ilab_status new_sequence(ilab_backend_t *b, ilab_seq_t *out, sequence **seq)
{
#if BUG == 45
    for (int i = b->next_slot; i < MAX_SEQS; i++) {
#else
    for (int i = 0; i < MAX_SEQS; i++) {
#endif
        sequence *s = &b->seqs[i];
        if (s->in_use)
            continue;
#if BUG == 45
        b->next_slot = i + 1;
#endif
        s->in_use = 1;
        s->len = 0;
        *out = make_handle(s->generation, i);
        *seq = s;
        return ILAB_OK;
    }
    return fail(b, ILAB_OUT_OF_MEMORY, "all %d sequence slots are in use", MAX_SEQS);
}

static void release_from(ilab_backend_t *b, sequence *s, int keep_blocks)
{
    for (int i = keep_blocks; i < held_blocks(s->len); i++)
        pool_unref(b, s->blocks[i]);
}

static uint64_t state_at(const ilab_backend_t *b, const sequence *s, int32_t pos)
{
    return b->pool[s->blocks[pos / BLOCK]].state[pos % BLOCK];
}

static ilab_status fd_seq_create(ilab_backend_t *b, ilab_seq_t *seq)
{
    sequence *s;
    if (!b || !seq)
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_create: NULL argument");
    pthread_mutex_lock(&b->lock);
    ilab_status st = new_sequence(b, seq, &s);
    pthread_mutex_unlock(&b->lock);
    return st;
}

static ilab_status fd_seq_free(ilab_backend_t *b, ilab_seq_t seq)
{
    if (!b)
        return ILAB_INVALID_ARGUMENT;
    pthread_mutex_lock(&b->lock);
    sequence *s = lookup(b, seq);
    if (!s) {
        pthread_mutex_unlock(&b->lock);
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_free: stale or unknown sequence %#llx",
                    (unsigned long long)seq);
    }
#if BUG == 51
    for (int i = 0; i < s->len / BLOCK; i++)
        pool_unref(b, s->blocks[i]);
#else
    release_from(b, s, 0);
#endif
    s->in_use = 0;
    s->len = 0;
#if BUG != 44
    s->generation++;
#endif
    pthread_mutex_unlock(&b->lock);
    return ILAB_OK;
}

static ilab_status fd_seq_fork(ilab_backend_t *b, ilab_seq_t parent, ilab_seq_t *child)
{
    if (!b || !child)
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_fork: NULL argument");
    pthread_mutex_lock(&b->lock);
    sequence *p = lookup(b, parent), *c = NULL;
    if (!p) {
        pthread_mutex_unlock(&b->lock);
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_fork: stale or unknown parent %#llx",
                    (unsigned long long)parent);
    }
    ilab_seq_t handle = ILAB_SEQ_NONE;
    ilab_status st = new_sequence(b, &handle, &c);
    if (st == ILAB_OK) {
        /* Share every block; a write into a shared block copies it first. */
        for (int i = 0; i < held_blocks(p->len); i++) {
            c->blocks[i] = p->blocks[i];
            b->pool[p->blocks[i]].refs++;
        }
        c->len = p->len;
        *child = handle;
    }
    pthread_mutex_unlock(&b->lock);
    return st;
}

static ilab_status fd_seq_truncate(ilab_backend_t *b, ilab_seq_t seq, int32_t n_keep)
{
    if (!b)
        return ILAB_INVALID_ARGUMENT;
    pthread_mutex_lock(&b->lock);
    sequence *s = lookup(b, seq);
    ilab_status st = ILAB_OK;
    if (!s)
        st = fail(b, ILAB_INVALID_ARGUMENT, "seq_truncate: stale or unknown sequence");
#if BUG == 39
    else if (n_keep < 0 || n_keep >= s->len)
#else
    else if (n_keep < 0 || n_keep > s->len)
#endif
        st = fail(b, ILAB_INVALID_ARGUMENT, "seq_truncate: n_keep %d not in [0, %d]", n_keep,
                  s->len);
    else {
#if BUG == 40
        release_from(b, s, n_keep / BLOCK);
#else
        release_from(b, s, held_blocks(n_keep));
#endif
        s->len = n_keep;
    }
    pthread_mutex_unlock(&b->lock);
    return st;
}

static ilab_status fd_seq_length(ilab_backend_t *b, ilab_seq_t seq, int32_t *length)
{
#if BUG != 85
    if (!b || !length)
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_length: NULL argument");
#else
    if (!b)
        return ILAB_INVALID_ARGUMENT;
#endif
    pthread_mutex_lock(&b->lock);
    sequence *s = lookup(b, seq);
    int32_t len = s ? s->len : 0;
    pthread_mutex_unlock(&b->lock);
    if (!s)
#if BUG == 81
        return ILAB_INVALID_ARGUMENT;
#else
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_length: stale or unknown sequence %#llx",
                    (unsigned long long)seq);
#endif
    *length = len;
    return ILAB_OK;
}

static ilab_status fd_cache_stats(ilab_backend_t *b, ilab_cache_stats_t *stats)
{
    if (!b || !stats)
        return fail(b, ILAB_INVALID_ARGUMENT, "cache_stats: NULL argument");
#if BUG == 52
    if (stats->struct_size < 16)
#else
    if (stats->struct_size < ILAB_CACHE_STATS_SIZE_1_1)
#endif
        return fail(b, ILAB_ABI_MISMATCH, "cache_stats: struct_size %u is smaller than ABI 1.1's %u",
                    stats->struct_size, ILAB_CACHE_STATS_SIZE_1_1);
    ilab_cache_stats_t now = {.struct_size = stats->struct_size, .block_size = BLOCK,
                              .total_positions = (int64_t)N_BLOCKS * BLOCK};
    pthread_mutex_lock(&b->lock);
#if BUG == 50
    int64_t used = 0;
    for (int i = 0; i < MAX_SEQS; i++)
        used += b->seqs[i].in_use ? b->seqs[i].len : 0;
    now.free_positions = now.total_positions - used;
#else
    now.free_positions = (int64_t)b->n_free * BLOCK;
#endif
    pthread_mutex_unlock(&b->lock);
    memcpy(stats, &now, stats->struct_size < sizeof now ? stats->struct_size : sizeof now);
    return ILAB_OK;
}

/* --- evaluation ------------------------------------------------------------------ */

typedef struct row_job {
    float *dst;
    uint64_t state;
    int32_t token;
} row_job;

static ilab_status check_item(ilab_backend_t *b, const ilab_batch_item_t *it, size_t i)
{
    if (!it)
        return fail(b, ILAB_INVALID_ARGUMENT, "eval: item %zu is NULL", i);
#if BUG == 3
    if (it->struct_size < ILAB_BATCH_ITEM_SIZE_1_0)
#else
    if (it->struct_size < ILAB_BATCH_ITEM_SIZE_1_0 || !ilab_struct_tail_is_zero(it, sizeof *it))
#endif
        return fail(b, ILAB_ABI_MISMATCH, "eval: item %zu: ilab_batch_item_t struct_size %u (ABI "
                    "1.0's is %u, this plugin's %zu) or sets members it does not know", i,
                    it->struct_size, ILAB_BATCH_ITEM_SIZE_1_0, sizeof *it);
    if (it->flags & ~(uint32_t)ILAB_EVAL_ALL_LOGITS)
        return fail(b, ILAB_INVALID_ARGUMENT, "eval: item %zu has unknown flag bits 0x%x", i,
                    it->flags);
    sequence *s = lookup(b, it->seq);
#if BUG == 48
    if (!s) /* checked again where the item is appended */
        return ILAB_OK;
#else
    if (!s)
        return fail(b, ILAB_INVALID_ARGUMENT, "eval: item %zu names a stale or unknown sequence", i);
#endif
#if BUG == 35
    if (!it->tokens || it->n_tokens < 0)
#else
    if (!it->tokens || it->n_tokens < 1)
#endif
        return fail(b, ILAB_INVALID_ARGUMENT, "eval: item %zu has no tokens", i);
    for (int32_t t = 0; t < it->n_tokens; t++)
#if BUG == 26
        if (it->tokens[t] < 0 || it->tokens[t] > VOCAB)
#else
        if (it->tokens[t] < 0 || it->tokens[t] >= VOCAB)
#endif
            return fail(b, ILAB_INVALID_ARGUMENT, "eval: item %zu token %d is %d, not in [0, %d)",
                        i, t, it->tokens[t], VOCAB);
#if BUG == 41
    if (s->len + it->n_tokens >= MAX_CONTEXT)
#elif BUG == 42
    if (0)
#else
    if (it->n_tokens > MAX_CONTEXT - s->len)
#endif
        return fail(b, ILAB_CONTEXT_OVERFLOW, "eval: item %zu: %d + %d tokens pass max_context %d",
                    i, s->len, it->n_tokens, MAX_CONTEXT);
    return ILAB_OK;
}

/* Blocks an item takes: new ones for the positions it opens, plus one when
 * its first write lands in a block it shares (copy on write). */
static int blocks_needed(const ilab_backend_t *b, const sequence *s, int32_t n)
{
    int need = held_blocks(s->len + n) - held_blocks(s->len);
#if BUG == 53
    if (s->len % BLOCK)
        need++;
#else
    if (s->len % BLOCK && b->pool[s->blocks[s->len / BLOCK]].refs > 1)
        need++;
#endif
    return need;
}

/* Appends one token (the block was reserved by the caller). */
static int append_token(ilab_backend_t *b, sequence *s, uint64_t prev, int32_t token,
                        uint64_t *state)
{
    int32_t pos = s->len;
    if (pos % BLOCK == 0) {
        int nb = pool_alloc(b);
        if (nb < 0)
            return -1;
        s->blocks[pos / BLOCK] = (int16_t)nb;
    }
#if BUG != 38
    else if (b->pool[s->blocks[pos / BLOCK]].refs > 1) {
        int nb = pool_alloc(b);
        if (nb < 0)
            return -1;
        memcpy(b->pool[nb].state, b->pool[s->blocks[pos / BLOCK]].state, sizeof b->pool[nb].state);
        pool_unref(b, s->blocks[pos / BLOCK]);
        s->blocks[pos / BLOCK] = (int16_t)nb;
    }
#endif
    *state = next_state(b->seed, prev, token);
    b->pool[s->blocks[pos / BLOCK]].state[pos % BLOCK] = *state;
    s->len++;
    return 0;
}

static ilab_status fd_eval(ilab_backend_t *b, const ilab_batch_item_t *const *items, size_t n_items)
{
#if BUG == 36
    if (!b || !items || n_items == 0 || n_items >= MAX_BATCH)
#else
    if (!b || !items || n_items == 0 || n_items > MAX_BATCH)
#endif
        return fail(b, ILAB_INVALID_ARGUMENT, "eval: need 1..%d items, got %zu", MAX_BATCH, n_items);
    size_t n_rows = 0;
    for (size_t i = 0; i < n_items; i++)
        if (items[i] && items[i]->logits && items[i]->n_tokens > 0)
            n_rows += (items[i]->flags & ILAB_EVAL_ALL_LOGITS) ? (size_t)items[i]->n_tokens : 1;
    row_job *jobs = malloc((n_rows ? n_rows : 1) * sizeof *jobs);
    if (!jobs)
        return fail(b, ILAB_OUT_OF_MEMORY, "eval: out of memory");
    ilab_status st = ILAB_OK;
    pthread_mutex_lock(&b->lock);
    /* All-or-nothing: check every item, and the blocks they need, first. */
    int need = 0;
    for (size_t i = 0; i < n_items && st == ILAB_OK; i++) {
        st = check_item(b, items[i], i);
        for (size_t j = 0; j < i && st == ILAB_OK; j++)
#if BUG == 34
            if (0)
#else
            if (items[j]->seq == items[i]->seq)
#endif
                st = fail(b, ILAB_INVALID_ARGUMENT, "eval: items %zu and %zu name one sequence", j, i);
#if BUG != 49
        if (st == ILAB_OK && lookup(b, items[i]->seq))
            need += blocks_needed(b, lookup(b, items[i]->seq), items[i]->n_tokens);
#endif
    }
    if (st == ILAB_OK && need > b->n_free)
        st = fail(b, ILAB_OUT_OF_MEMORY, "eval: needs %d cache blocks, %d free", need, b->n_free);
    if (st != ILAB_OK) {
        pthread_mutex_unlock(&b->lock);
#if BUG != 46
        free(jobs);
#endif
        return st;
    }
    size_t r = 0;
    uint64_t prev = INIT_STATE;
    for (size_t i = 0; i < n_items; i++) {
        const ilab_batch_item_t *it = items[i];
        sequence *s = lookup(b, it->seq);
#if BUG == 48
        if (!s) {
            pthread_mutex_unlock(&b->lock);
            free(jobs);
            return fail(b, ILAB_INVALID_ARGUMENT, "eval: item %zu names a stale or unknown sequence", i);
        }
#endif
#if BUG == 32
        if (i == 0)
            prev = s->len ? state_at(b, s, s->len - 1) : INIT_STATE;
#elif BUG == 47
        if (it->seq == b->fast_seq && it->n_tokens == 1)
            prev = b->fast_state; /* decode fast path: the state we just computed */
        else
            prev = s->len ? state_at(b, s, s->len - 1) : INIT_STATE;
#else
        prev = s->len ? state_at(b, s, s->len - 1) : INIT_STATE;
#endif
        int all = (it->flags & ILAB_EVAL_ALL_LOGITS) != 0;
        for (int32_t t = 0; t < it->n_tokens; t++) {
#if BUG == 42
            if (s->len == MAX_CONTEXT) {
                pthread_mutex_unlock(&b->lock);
                free(jobs);
                return fail(b, ILAB_CONTEXT_OVERFLOW, "eval: item %zu passes max_context %d", i,
                            MAX_CONTEXT);
            }
#endif
            uint64_t st_now;
            if (append_token(b, s, prev, it->tokens[t], &st_now) != 0) {
                pthread_mutex_unlock(&b->lock);
                free(jobs);
                return fail(b, ILAB_OUT_OF_MEMORY, "eval: the cache pool is exhausted");
            }
            prev = st_now;
            int last = t == it->n_tokens - 1;
#if BUG == 33
            if (all && t == 0 && it->n_tokens > 1)
                continue; /* the first row repeats the previous call's last one */
#endif
            if (it->logits && (last || all)) {
#if BUG == 30
                jobs[r].dst = it->logits + (size_t)t * VOCAB;
#else
                jobs[r].dst = it->logits + (all ? (size_t)t * VOCAB : 0);
#endif
                jobs[r].state = st_now;
                jobs[r].token = it->tokens[t];
                r++;
            }
        }
#if BUG == 47
        if (n_items == 1) {
            b->fast_seq = it->seq;
            b->fast_state = prev;
        }
#endif
    }
    pthread_mutex_unlock(&b->lock);
    /* The logits are the expensive part: outside the lock, into the
     * caller's rows (each row belongs to one item's sequence). */
    for (size_t k = 0; k < r; k++) {
#if BUG == 89
        state_logits(jobs[k].state, b->scratch);
        memcpy(jobs[k].dst, b->scratch, sizeof b->scratch);
#elif BUG == 31
        if (jobs[k].token != b->memo_token || !b->memo_token) {
            state_logits(jobs[k].state, b->memo);
            b->memo_token = jobs[k].token;
        }
        memcpy(jobs[k].dst, b->memo, sizeof b->memo);
#else
        state_logits(jobs[k].state, jobs[k].dst);
#endif
    }
    free(jobs);
    return ILAB_OK;
}

/* --- sampling ------------------------------------------------------------------- */

typedef struct rng {
    uint64_t s;
} rng;

static uint64_t rng_next(rng *r)
{
    r->s += 0x9e3779b97f4a7c15ull;
    return mix(r->s);
}

static double rng_unit(rng *r) { return (double)(rng_next(r) >> 11) * 0x1.0p-53; }

static uint64_t seed_rng(uint64_t seed)
{
#if BUG == 69
    return mix((uint32_t)seed); /* the engine's seed is an unsigned int */
#else
    return mix(seed ^ 0x6a09e667f3bcc909ull);
#endif
}

typedef struct by_logit {
    float z;
    int id;
} by_logit;

static int cmp_desc(const void *a, const void *b)
{
    const by_logit *x = a, *y = b;
    if (x->z != y->z)
        return x->z > y->z ? -1 : 1;
#if BUG == 75
    return y->id - x->id;
#else
    return x->id - y->id;
#endif
}

static int argmax(const float *z, int n)
{
    int best = 0;
    for (int v = 1; v < n; v++)
#if BUG == 68
        if (z[v] >= z[best])
#else
        if (z[v] > z[best])
#endif
            best = v;
    return best;
}

/* One draw from `raw` under the request's processors, in SMP-5's order. */
static int sample(const ilab_sampling_t *sp, const float *raw, const int *seen,
                  const int *out_count, rng *r)
{
    float z[VOCAB];
    for (int v = 0; v < VOCAB; v++) {
        float x = raw[v];
        if (sp->repetition_penalty != 1.0f && seen[v])
            x = x > 0 ? x / sp->repetition_penalty : x * sp->repetition_penalty;
#if BUG == 74
        if (seen[v])
#else
        if (out_count[v])
#endif
            x -= sp->presence_penalty + sp->frequency_penalty * (float)out_count[v];
        z[v] = x;
    }
    if (sp->temperature == 0.0f)
        return argmax(z, VOCAB);
    static __thread by_logit order[VOCAB];
    for (int v = 0; v < VOCAB; v++)
        order[v] = (by_logit){z[v], v};
#if BUG == 71
    int sorted = sp->top_k > 0; /* only top-k needs the order */
    if (sorted)
        qsort(order, VOCAB, sizeof order[0], cmp_desc);
#else
    qsort(order, VOCAB, sizeof order[0], cmp_desc);
#endif
    int n = VOCAB;
    if (sp->top_k > 0 && sp->top_k < VOCAB)
        n = sp->top_k;
    double p[VOCAB], sum = 0;
    float zmax = order[0].z;
#if BUG == 71
    for (int i = 1; i < n; i++)
        if (order[i].z > zmax)
            zmax = order[i].z;
#endif
    for (int i = 0; i < n; i++) {
#if BUG == 78
        p[i] = exp((double)(order[i].z / sp->temperature) - (double)(zmax / sp->temperature));
#elif BUG == 73
        p[i] = exp((double)((order[i].z - zmax) * sp->temperature));
#else
        p[i] = exp((double)((order[i].z - zmax) / sp->temperature));
#endif
        sum += p[i];
    }
    if (sp->top_p < 1.0f) {
        double cum = 0;
        int keep = n;
        for (int i = 0; i < n; i++) {
            cum += p[i] / sum;
            if (cum >= (double)sp->top_p) {
                keep = i + 1;
                break;
            }
        }
        n = keep;
        sum = 0;
        for (int i = 0; i < n; i++)
            sum += p[i];
    }
    if (sp->min_p > 0.0f) {
        double pmax = 0;
        for (int i = 0; i < n; i++)
            pmax = p[i] > pmax ? p[i] : pmax;
        int m = 0;
        for (int i = 0; i < n; i++)
#if BUG == 72
            if (p[i] > (double)sp->min_p * pmax)
#else
            if (p[i] >= (double)sp->min_p * pmax)
#endif
                order[m] = order[i], p[m++] = p[i];
        if (m == 0)
            return argmax(z, VOCAB);
        n = m;
        sum = 0;
        for (int i = 0; i < n; i++)
            sum += p[i];
    }
    double u = rng_unit(r) * sum;
    for (int i = 0; i < n; i++) {
        if (u < p[i])
            return order[i].id;
        u -= p[i];
    }
    return order[n - 1].id;
}

static void log_softmax(const float *raw, float *out)
{
    float m = raw[0];
    for (int v = 1; v < VOCAB; v++)
        m = raw[v] > m ? raw[v] : m;
    double s = 0;
    for (int v = 0; v < VOCAB; v++)
        s += exp((double)(raw[v] - m));
    float ls = (float)log(s);
    for (int v = 0; v < VOCAB; v++)
        out[v] = raw[v] - m - ls;
}

/* The k largest of lp, sorted descending, ties by lower id. */
static void top_list(const float *lp, int k, ilab_logprob_t *out)
{
    by_logit all[VOCAB];
    for (int v = 0; v < VOCAB; v++)
        all[v] = (by_logit){lp[v], v};
#if BUG == 37
    /* Pick the k largest by threshold, in id order. */
    qsort(all, VOCAB, sizeof all[0], cmp_desc);
    float thr = all[k - 1].z;
    int n = 0;
    for (int v = 0; v < VOCAB && n < k; v++)
        if (lp[v] > thr)
            out[n++] = (ilab_logprob_t){v, lp[v]};
    for (int v = 0; v < VOCAB && n < k; v++)
        if (lp[v] == thr)
            out[n++] = (ilab_logprob_t){v, lp[v]};
#else
    qsort(all, VOCAB, sizeof all[0], cmp_desc);
    for (int i = 0; i < k; i++)
        out[i] = (ilab_logprob_t){all[i].id, all[i].z};
#endif
}

/* --- generate ---------------------------------------------------------------------- */

typedef struct stream {
    ilab_backend_t *b;
    const ilab_generate_request_t *req;
    ilab_event_fn on_event;
    void *user;
    char *text; /* the output text so far */
    size_t len, cap, emitted;
    uint32_t n_tokens;
} stream;

static ilab_status refuse(ilab_backend_t *b, const ilab_generate_request_t *req, ilab_event_fn fn,
                          void *user, ilab_status st, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

static ilab_status refuse(ilab_backend_t *b, const ilab_generate_request_t *req, ilab_event_fn fn,
                          void *user, ilab_status st, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ilab_event_t ev = {.struct_size = sizeof ev, .type = ILAB_EVENT_ERROR,
                       .request_id = req->request_id, .finish_reason = ILAB_FINISH_ERROR,
                       .status = st, .message = msg};
    fn(user, &ev);
    return fail(b, st, "%s", msg);
}

static const char *check_request(const ilab_generate_request_t *q, ilab_status *st, char *msg,
                                 size_t cap)
{
    const ilab_sampling_t *sp = q->sampling;
    *st = ILAB_INVALID_ARGUMENT;
#if BUG == 4
    if (q->struct_size < sizeof(ilab_sampling_t)) {
#else
    if (q->struct_size < ILAB_GENERATE_REQUEST_SIZE_1_0) {
#endif
        *st = ILAB_ABI_MISMATCH;
        snprintf(msg, cap, "generate: ilab_generate_request_t struct_size %u is smaller than ABI "
                 "1.0's %u", q->struct_size, ILAB_GENERATE_REQUEST_SIZE_1_0);
        return msg;
    }
    if (!ilab_struct_tail_is_zero(q, sizeof *q)) {
        *st = ILAB_ABI_MISMATCH;
        snprintf(msg, cap, "generate: ilab_generate_request_t sets members past this plugin's %zu "
                 "bytes", sizeof *q);
        return msg;
    }
    if (!sp)
        return "generate: sampling is NULL";
#if BUG == 5
    if (sp->struct_size < ILAB_SAMPLING_SIZE_1_0) {
#else
    if (sp->struct_size < ILAB_SAMPLING_SIZE_1_0 || !ilab_struct_tail_is_zero(sp, sizeof *sp)) {
#endif
        *st = ILAB_ABI_MISMATCH;
        snprintf(msg, cap, "generate: ilab_sampling_t struct_size %u is smaller than ABI 1.0's %u "
                 "or sets members past this plugin's %zu bytes", sp->struct_size,
                 ILAB_SAMPLING_SIZE_1_0, sizeof *sp);
        return msg;
    }
    if (!q->prompt_tokens || q->n_prompt_tokens == 0)
        return "generate: the prompt is empty";
#if BUG == 57
    if (q->n_prompt_tokens >= MAX_CONTEXT) {
#else
    if (q->n_prompt_tokens > MAX_CONTEXT) {
#endif
        *st = ILAB_CONTEXT_OVERFLOW;
        snprintf(msg, cap, "generate: the prompt's %zu tokens pass max_context %d",
                 q->n_prompt_tokens, MAX_CONTEXT);
        return msg;
    }
    for (size_t i = 0; i < q->n_prompt_tokens; i++)
        if (q->prompt_tokens[i] < 0 || q->prompt_tokens[i] >= VOCAB) {
            snprintf(msg, cap, "generate: prompt token %zu is %d, not in [0, %d)", i,
                     q->prompt_tokens[i], VOCAB);
            return msg;
        }
#if BUG == 66
    if (q->max_tokens < 0)
#else
    if (q->max_tokens < 1)
#endif
        return "generate: max_tokens must be >= 1";
    if (q->top_logprobs < 0)
        return "generate: top_logprobs must be >= 0";
#if BUG != 80
    if (q->top_logprobs > TOPK_MAX)
        return "generate: top_logprobs is above topk_max 20";
#endif
    if (!(sp->temperature >= 0.0f) || isinf(sp->temperature))
        return "generate: temperature must be finite and >= 0";
    if (sp->top_k < 0)
        return "generate: top_k must be >= 0";
    if (!(sp->top_p > 0.0f && sp->top_p <= 1.0f))
        return "generate: top_p must be in (0, 1]";
    if (!(sp->min_p >= 0.0f && sp->min_p <= 1.0f))
        return "generate: min_p must be in [0, 1]";
#if BUG == 76
    if (!(sp->repetition_penalty >= 0.0f) || isinf(sp->repetition_penalty))
#else
    if (!(sp->repetition_penalty > 0.0f) || isinf(sp->repetition_penalty))
#endif
        return "generate: repetition_penalty must be finite and > 0";
#if BUG == 77
    if (!(sp->presence_penalty > -2.0f && sp->presence_penalty < 2.0f))
#else
    if (!(sp->presence_penalty >= -2.0f && sp->presence_penalty <= 2.0f))
#endif
        return "generate: presence_penalty must be in [-2, 2]";
    if (!(sp->frequency_penalty >= -2.0f && sp->frequency_penalty <= 2.0f))
        return "generate: frequency_penalty must be in [-2, 2]";
    if (q->n_stop && !q->stop)
        return "generate: stop is NULL";
    if (q->n_stop > MAX_STOP)
        return "generate: more than 16 stop strings (the limit is 16)";
    for (size_t i = 0; i < q->n_stop; i++) {
        if (!q->stop[i] || !q->stop[i][0])
            return "generate: a stop string is NULL or empty";
#if BUG == 62
        if (strlen(q->stop[i]) > 1024)
#else
        if (strlen(q->stop[i]) > MAX_STOP_LEN)
#endif
            return "generate: a stop string is longer than the limit of 4096 bytes";
    }
    if (q->n_stop_token_ids && !q->stop_token_ids)
        return "generate: stop_token_ids is NULL";
    for (size_t i = 0; i < q->n_stop_token_ids; i++)
        if (q->stop_token_ids[i] < 0 || q->stop_token_ids[i] >= VOCAB)
            return "generate: a stop token id is not in [0, 258)";
    *st = ILAB_OK;
    return NULL;
}

/* Bytes at the end of text[from..end) that may still become a stop string. */
static size_t stop_hold(const stream *S, size_t end)
{
    size_t hold = 0;
    for (size_t i = 0; i < S->req->n_stop; i++) {
        const char *s = S->req->stop[i];
        size_t sl = strlen(s);
        for (size_t k = sl - 1; k > hold; k--)
            if (k <= end - S->emitted && !memcmp(S->text + end - k, s, k)) {
                hold = k;
                break;
            }
    }
    return hold;
}

/* Where an incomplete UTF-8 code point at the end of text[from..end) starts
 * (end when there is none). */
static size_t utf8_cut(const char *t, size_t from, size_t end)
{
    size_t i = end;
    int back = 0;
    while (i > from && back < 3 && ((unsigned char)t[i - 1] & 0xC0) == 0x80)
        i--, back++;
    if (i == from)
        return end;
    unsigned char c = (unsigned char)t[i - 1];
    size_t need = 1;
#if BUG == 63
    if (c >= 0xC2 && c <= 0xDF)
        need = 2;
#else
    if (c >= 0xC2 && c <= 0xDF)
        need = 2;
    else if (c >= 0xE0 && c <= 0xEF)
        need = 3;
    else if (c >= 0xF0 && c <= 0xF4)
        need = 4;
#endif
    size_t have = end - (i - 1);
    return need > have ? i - 1 : end;
}

static int emit_token(stream *S, int32_t token, const float *lp, size_t upto)
{
    ilab_logprob_t top[TOPK_MAX + 1];
    int k = S->req->top_logprobs;
    if (k > TOPK_MAX)
        k = TOPK_MAX;
    if (k)
        top_list(lp, k, top);
    ilab_event_t ev = {.struct_size = sizeof ev, .type = ILAB_EVENT_TOKEN,
                       .request_id = S->req->request_id, .token = token,
                       .text = S->text + S->emitted, .text_len = upto - S->emitted,
                       .logprob = lp[token], .top_logprobs = k ? top : NULL,
                       .n_top_logprobs = (uint32_t)k};
    S->emitted = upto;
    S->n_tokens++;
    return S->on_event(S->user, &ev);
}

static ilab_status finish(stream *S, ilab_finish_reason why, size_t upto)
{
    ilab_event_t ev = {.struct_size = sizeof ev, .type = ILAB_EVENT_FINISH,
                       .request_id = S->req->request_id, .text = S->text + S->emitted,
                       .text_len = upto - S->emitted, .finish_reason = why,
                       .prompt_tokens = (uint32_t)S->req->n_prompt_tokens,
                       .completion_tokens = S->n_tokens};
#if BUG == 55
    if (why == ILAB_FINISH_STOP)
        ev.text_len = 0;
#endif
    S->on_event(S->user, &ev);
#if BUG == 54
    if (why == ILAB_FINISH_CANCELLED)
        return ILAB_CANCELLED;
#endif
    return ILAB_OK;
}

static int running_add(ilab_backend_t *b, uint64_t id)
{
    int slot = -1;
    pthread_mutex_lock(&b->lock);
    for (int i = 0; i < MAX_RUNNING; i++)
        if (!b->running[i].active) {
#if BUG == 59
            if (b->running[i].id == id && b->running[i].cancelled)
                slot = i;
            else if (slot < 0)
                slot = i;
            continue;
#else
            slot = i;
            break;
#endif
        }
    if (slot >= 0) {
#if BUG == 59
        int keep = b->running[slot].id == id && b->running[slot].cancelled;
        b->running[slot] = (running_req){.active = 1, .cancelled = keep, .id = id};
#elif BUG == 58
        b->running[slot] = (running_req){.active = 1, .id = (uint32_t)id};
#else
        b->running[slot] = (running_req){.active = 1, .id = id};
#endif
    }
    pthread_mutex_unlock(&b->lock);
    return slot;
}

static int running_cancelled(ilab_backend_t *b, int slot)
{
    pthread_mutex_lock(&b->lock);
    int c = b->running[slot].cancelled;
    pthread_mutex_unlock(&b->lock);
    return c;
}

static void running_remove(ilab_backend_t *b, int slot)
{
    pthread_mutex_lock(&b->lock);
    b->running[slot].active = 0;
#if BUG != 59
    b->running[slot].cancelled = 0;
#endif
    pthread_mutex_unlock(&b->lock);
}

static ilab_status fd_cancel(ilab_backend_t *b, uint64_t request_id)
{
    if (!b)
        return ILAB_INVALID_ARGUMENT;
    pthread_mutex_lock(&b->lock);
#if BUG == 59
    int found = 0;
    for (int i = 0; i < MAX_RUNNING; i++)
        if (b->running[i].active && b->running[i].id == request_id)
            b->running[i].cancelled = 1, found = 1;
    if (!found) /* remember it, in case the request is about to start */
        for (int i = 0; i < MAX_RUNNING; i++)
            if (!b->running[i].active) {
                b->running[i].id = request_id;
                b->running[i].cancelled = 1;
                break;
            }
#else
    for (int i = 0; i < MAX_RUNNING; i++)
        if (b->running[i].active && b->running[i].id == request_id)
            b->running[i].cancelled = 1;
#endif
    pthread_mutex_unlock(&b->lock);
    return ILAB_OK;
}

static int is_stop_id(const ilab_generate_request_t *q, int32_t t)
{
    for (size_t i = 0; i < q->n_stop_token_ids; i++)
        if (q->stop_token_ids[i] == t)
            return 1;
    return 0;
}

/* The end of the shortest prefix of text that holds a stop string whose
 * last byte lies in (from, end]; *cut is where the occurrence starts (the
 * longest occurrence ending there). 0 when none. */
static size_t find_stop(const stream *S, size_t from, size_t end, size_t *cut)
{
    for (size_t e = from + 1; e <= end; e++) {
        size_t best = 0;
        for (size_t i = 0; i < S->req->n_stop; i++) {
            size_t sl = strlen(S->req->stop[i]);
            if (sl <= e && sl > best && !memcmp(S->text + e - sl, S->req->stop[i], sl)) {
                best = sl;
#if BUG == 61
                break; /* the first match is enough */
#endif
            }
        }
        if (best) {
            *cut = e - best;
            return e;
        }
    }
    return 0;
}

static ilab_status run_stream(stream *S, int slot)
{
    ilab_backend_t *b = S->b;
    const ilab_generate_request_t *q = S->req;
    const ilab_sampling_t *sp = q->sampling;
    int seen[VOCAB] = {0}, out_count[VOCAB] = {0};
    float raw[VOCAB], lp[VOCAB];
    uint64_t state = INIT_STATE;
    for (size_t i = 0; i < q->n_prompt_tokens; i++) {
        state = next_state(b->seed, state, q->prompt_tokens[i]);
        seen[q->prompt_tokens[i]] = 1;
    }
    rng r = {seed_rng(sp->seed)};
#if BUG == 70
    if (!b->rng_seeded) {
        b->rng = seed_rng(sp->seed);
        b->rng_seeded = 1;
    }
    r.s = b->rng;
#endif
    int32_t pos = (int32_t)q->n_prompt_tokens;
    int stop_after_next = 0;
    for (;;) {
        if (running_cancelled(b, slot))
            return finish(S, ILAB_FINISH_CANCELLED, S->emitted);
        state_logits(state, raw);
        log_softmax(raw, lp);
        int32_t tok = (int32_t)sample(sp, raw, seen, out_count, &r);
#if BUG == 70
        b->rng = r.s;
#endif
#if BUG == 79
        if (sp->temperature > 0) {
            float scaled[VOCAB];
            for (int v = 0; v < VOCAB; v++)
                scaled[v] = raw[v] / sp->temperature;
            log_softmax(scaled, lp);
        }
#endif
#if BUG == 64
        if (tok == EOS || is_stop_id(q, tok)) {
#else
        if ((tok == EOS && !q->ignore_eos) || is_stop_id(q, tok)) {
#endif
#if BUG == 60
            S->n_tokens++;
#endif
#if BUG == 65
            if (tok != EOS)
                emit_token(S, tok, lp, S->emitted);
#endif
            return finish(S, ILAB_FINISH_STOP, S->len);
        }
        size_t old = S->len;
        if (tok < BOS) {
            if (S->len == S->cap) {
                size_t nc = S->cap ? S->cap * 2 : 256;
                char *nt = realloc(S->text, nc);
                if (!nt)
                    return refuse(b, q, S->on_event, S->user, ILAB_OUT_OF_MEMORY,
                                  "generate: out of memory");
                S->text = nt, S->cap = nc;
            }
            S->text[S->len++] = (char)tok;
        }
        out_count[tok]++;
        seen[tok] = 1;
        int last_len = (int32_t)S->n_tokens + 1 == q->max_tokens;
        int last_ctx = pos == MAX_CONTEXT;
#if BUG == 56
        if (last_ctx)
            return refuse(b, q, S->on_event, S->user, ILAB_CONTEXT_OVERFLOW,
                          "generate: the context is full");
#endif
        size_t cut = 0;
        if (find_stop(S, old, S->len, &cut)) {
            emit_token(S, tok, lp, cut);
            return finish(S, ILAB_FINISH_STOP, S->emitted);
        }
        if (last_len || last_ctx) {
            emit_token(S, tok, lp, S->len);
            return finish(S, ILAB_FINISH_LENGTH, S->emitted);
        }
        size_t safe = S->len - stop_hold(S, S->len);
        safe = utf8_cut(S->text, S->emitted, safe);
#if BUG == 67
        /* Honour a stop request on the next step, where cancel() is checked. */
        int rc = emit_token(S, tok, lp, safe);
        if (stop_after_next)
            return finish(S, ILAB_FINISH_CANCELLED, S->emitted);
        stop_after_next = rc;
#else
        (void)stop_after_next;
        if (emit_token(S, tok, lp, safe))
            return finish(S, ILAB_FINISH_CANCELLED, S->emitted);
#endif
        state = next_state(b->seed, state, tok);
        pos++;
    }
}

static ilab_status fd_generate(ilab_backend_t *b, const ilab_generate_request_t *request,
                               ilab_event_fn on_event, void *user_data)
{
    if (!b || !request || !on_event)
        return fail(b, ILAB_INVALID_ARGUMENT, "generate: NULL request or on_event");
    char msg[512];
    ilab_status st;
    const char *why = check_request(request, &st, msg, sizeof msg);
    if (why)
        return refuse(b, request, on_event, user_data, st, "%s", why);
    int slot = running_add(b, request->request_id);
    if (slot < 0)
        return refuse(b, request, on_event, user_data, ILAB_OUT_OF_MEMORY,
                      "generate: more than %d requests running", MAX_RUNNING);
    stream S = {.b = b, .req = request, .on_event = on_event, .user = user_data};
#if BUG == 91
    S.text = b->gen_text;
    S.cap = sizeof b->gen_text;
#endif
    st = run_stream(&S, slot);
    running_remove(b, slot);
#if BUG != 91
    free(S.text);
#endif
    return st;
}

/* --- the exported table ------------------------------------------------------------ */

static const ilab_backend_api_t api = {
#if BUG == 12
    .struct_size = ILAB_BACKEND_API_SIZE_1_0,
#else
    .struct_size = sizeof(ilab_backend_api_t),
#endif
    .probe = fd_probe,
    .create = fd_create,
    .destroy = fd_destroy,
    .last_error = fd_last_error,
    .model_info = fd_model_info,
    .tokenize = fd_tokenize,
    .detokenize = fd_detokenize,
    .token_piece = fd_token_piece,
    .seq_create = fd_seq_create,
    .seq_free = fd_seq_free,
#if BUG != 13
    .seq_fork = fd_seq_fork,
#endif
    .seq_truncate = fd_seq_truncate,
    .seq_length = fd_seq_length,
    .eval = fd_eval,
    .generate = fd_generate,
    .cancel = fd_cancel,
    .cache_stats = fd_cache_stats,
};

ILAB_PLUGIN_EXPORT const ilab_plugin_entry_t ilab_plugin_entry = {
    .struct_size = sizeof(ilab_plugin_entry_t),
    .abi_major = ILAB_ABI_MAJOR,
    .abi_minor = 1, /* implements ABI 1.1: it declares cache.stats */
    .name = PLUGIN_NAME,
    .version = PLUGIN_VERSION,
    .manifest_yaml = manifest,
    .backend = &api,
};
