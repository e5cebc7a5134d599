/* fresha — a host-sampled inferlab backend with a tiny attention toy model.
 *
 *   tokenizer: bytes (0..255) + BOS (256) + EOS (257) + 42 byte-pair merges
 *   logits: full; one attention layer over a paged KV cache (blocks of BS
 *           positions, reference-counted, copy-on-write on fork)
 *   cache: fork, truncate, stats (ABI 1.1)
 *   batching: max_batch 12; thread_safety: sequence
 *
 * Every variant is this file compiled with -DBREAK_<NAME>; each #ifdef
 * BREAK_* changes one clause's behaviour (see cases.txt). */
#include <inferlab/inferlab.h>

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PLUGIN_NAME "fresha"
#define PLUGIN_VERSION "0.1.0"
#ifdef BREAK_MANIFEST_VERSION
#define MANIFEST_VERSION "0.1.1"
#else
#define MANIFEST_VERSION PLUGIN_VERSION
#endif

#define N_MERGES 42
#define VOCAB (258 + N_MERGES)
#define BOS 256
#define EOS 257
#define DIM 8
#define BS 16
#define MAX_CONTEXT 128
#define MAX_SEQS 16
#define MAX_BATCH 12
#define DEFAULT_BLOCKS 48
#define MAX_POOL_BLOCKS 4096

static const char manifest[] =
    "name: " PLUGIN_NAME "\n"
    "version: " MANIFEST_VERSION "\n"
    "abi: 1.1\n"
    "description: >-\n"
    "  Toy one-layer attention model over a paged, reference-counted KV cache;\n"
    "  byte tokenizer with a few merges; the host samples.\n"
    "capabilities:\n"
    "  tokenizer: true\n"
    "  logits: full\n"
    "  topk_max: 0\n"
    "  sampling: host\n"
    "  cache: {fork: true, truncate: true, stats: true}\n"
    "  batching: {max_batch: 12}\n"
    "  streaming: false\n"
    "  cancel: false\n"
    "  max_context: 128\n"
    "  thread_safety: sequence\n"
    "config:\n"
    "  seed:\n"
    "    type: int\n"
    "    default: 0\n"
    "    description: Seed of the toy weights; each seed is a different model.\n"
    "  kv_blocks:\n"
    "    type: int\n"
    "    default: 48\n"
    "    description: KV-cache pool size in blocks of 16 positions (1..4096).\n"
    "  device:\n"
    "    type: string\n"
    "    default: cpu\n"
    "    description: Where to run; cpu, or cuda (not available in this build).\n";

static const char merges[N_MERGES][3] = {
    "th", "he", "in", "er", "an", "re", "on", "at", "en", "nd", "ti", "es", "or", "te",
    "of", "ed", "is", "it", "al", "ar", "st", "to", "nt", "ng", "se", "ha", " t", " a",
    " s", " w", "le", "ve", "co", "me", "de", "hi", "ri", "ro", "ic", "ne", "ea", "ce"};

#ifdef BREAK_WEAK_HOOK
/* optional tracing hook a profiler may provide */
extern void fresha_trace_hook(const char *what) __attribute__((weak));
#endif

typedef struct kvblock {
    float k[BS][DIM];
    float v[BS][DIM];
} kvblock;

typedef struct seqslot {
    uint32_t generation;
    int in_use;
    int32_t len;
    int32_t nb;     /* blocks held: ceil(len / BS) */
    int32_t *table; /* block ids, n_blocks entries */
} seqslot;

struct ilab_backend {
    const ilab_host_t *host;
    uint64_t seed;
    int32_t n_blocks;
    kvblock *pool;
    int32_t *ref;
    int32_t *freelist;
    int32_t n_free;
    float *W;    /* VOCAB * DIM */
    float *bias; /* VOCAB */
    seqslot seqs[MAX_SEQS];
    pthread_mutex_t lock;
    ilab_last_error_t error;
#ifdef BREAK_THR_SCRATCH
    float scratch[DIM];
#endif
#ifdef BREAK_TOK_SCRATCH
    int32_t tokscratch[8192];
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

/* --- the model -------------------------------------------------------------- */

static uint64_t mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* A hashed feature in [-1, 1). kind: 0 key, 1 value, 2 query. */
static float feat(uint64_t seed, uint64_t kind, uint64_t tok, uint64_t pos, uint64_t d)
{
    uint64_t h = mix(seed ^ mix(kind * 1000003ull + tok) ^ mix(pos * 131ull + d + 7));
    return (float)(h >> 40) / (float)(1u << 23) - 1.0f;
}

static void row_logits(const ilab_backend_t *b, const seqslot *s, int32_t pos, int32_t limit,
                       int32_t tok, float *out)
{
    float q[DIM], ctx[DIM] = {0};
#ifdef BREAK_THR_SCRATCH
    float *h = ((ilab_backend_t *)b)->scratch; /* saves a stack array per row */
#else
    float h[DIM];
#endif
    for (int d = 0; d < DIM; d++)
        q[d] = feat(b->seed, 2, (uint64_t)tok, (uint64_t)pos, (uint64_t)d);
    float m = -INFINITY;
    for (int32_t j = 0; j < limit; j++) {
        const kvblock *kb = &b->pool[s->table[j / BS]];
        float sc = 0;
        for (int d = 0; d < DIM; d++)
            sc += q[d] * kb->k[j % BS][d];
        if (sc > m)
            m = sc;
    }
    float sum = 0;
    for (int32_t j = 0; j < limit; j++) {
        const kvblock *kb = &b->pool[s->table[j / BS]];
        float sc = 0;
        for (int d = 0; d < DIM; d++)
            sc += q[d] * kb->k[j % BS][d];
        float w = expf(sc - m);
        sum += w;
        for (int d = 0; d < DIM; d++)
            ctx[d] += w * kb->v[j % BS][d];
    }
    for (int d = 0; d < DIM; d++)
        h[d] = ctx[d] / sum + q[d];
    for (int v = 0; v < VOCAB; v++) {
        float acc = b->bias[v];
        for (int d = 0; d < DIM; d++)
            acc += h[d] * b->W[v * DIM + d];
        out[v] = acc;
    }
}

static void write_kv(ilab_backend_t *b, int32_t block, int32_t pos, int32_t tok)
{
    kvblock *kb = &b->pool[block];
    uint64_t p = (uint64_t)pos;
#ifdef BREAK_PHYS_POS
    p = (uint64_t)block * BS + (uint64_t)(pos % BS); /* "position" from the cache layout */
#endif
    for (int d = 0; d < DIM; d++) {
        kb->k[pos % BS][d] = feat(b->seed, 0, (uint64_t)tok, p, (uint64_t)d);
        kb->v[pos % BS][d] = feat(b->seed, 1, (uint64_t)tok, p, (uint64_t)d);
    }
}

/* --- configuration ------------------------------------------------------------ */

typedef struct cfg {
    uint64_t seed;
    int32_t n_blocks;
} cfg_t;

static void put_msg(char *buf, size_t cap, const char *msg)
{
    if (!buf || !cap)
        return;
    size_t n = strlen(msg);
    if (n > cap - 1)
        n = cap - 1;
    memcpy(buf, msg, n);
#ifdef BREAK_PROBE_OVERRUN
    if (n == cap - 1 && strlen(msg) > n)
        n = cap; /* "room for the NUL after the truncated text" */
#endif
    buf[n] = '\0';
}

static int parse_int(const char *s, long long *out)
{
    char *end = NULL;
    if (!s || !*s)
        return 0;
    *out = strtoll(s, &end, 10);
    return *end == '\0';
}

#ifdef BREAK_PROBE_COUNTER
static int probe_attempts;
#endif

static ilab_status parse_config(const ilab_config_entry_t *config, size_t n, cfg_t *cfg,
                                char *msg, size_t cap)
{
    cfg->seed = 0;
    cfg->n_blocks = DEFAULT_BLOCKS;
    int unavailable = 0;
    msg[0] = '\0';
    if (n && !config) {
        snprintf(msg, cap, PLUGIN_NAME ": config is NULL with %zu entries", n);
        return ILAB_INVALID_ARGUMENT;
    }
    for (size_t i = 0; i < n; i++) {
        const char *k = config[i].key, *v = config[i].value;
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
            cfg->seed = (uint64_t)x;
        } else if (!strcmp(k, "kv_blocks")) {
            if (!parse_int(v, &x) || x < 1 || x > MAX_POOL_BLOCKS) {
                snprintf(msg, cap, PLUGIN_NAME ": config key 'kv_blocks' must be in [1, %d], got '%s'",
                         MAX_POOL_BLOCKS, v);
#ifdef BREAK_CONFIG_STATUS
                return ILAB_UNAVAILABLE; /* "cannot run with that pool" */
#endif
                return ILAB_INVALID_ARGUMENT;
            }
            cfg->n_blocks = (int32_t)x;
        } else if (!strcmp(k, "device")) {
            if (!strcmp(v, "cuda"))
                unavailable = 1;
            else if (strcmp(v, "cpu")) {
                snprintf(msg, cap, PLUGIN_NAME ": config key 'device' must be cpu or cuda, got '%s'", v);
                return ILAB_INVALID_ARGUMENT;
            }
        } else {
            snprintf(msg, cap, PLUGIN_NAME ": unknown config key '%s'", k);
            return ILAB_INVALID_ARGUMENT;
        }
    }
    if (unavailable) {
#ifdef BREAK_PROBE_COUNTER
        snprintf(msg, cap, PLUGIN_NAME ": device 'cuda' is not available here (this build has no "
                 "CUDA support; check %d)", __atomic_add_fetch(&probe_attempts, 1, __ATOMIC_SEQ_CST));
#else
        snprintf(msg, cap, PLUGIN_NAME ": device 'cuda' is not available here (this build has no "
                 "CUDA support)");
#endif
        return ILAB_UNAVAILABLE;
    }
    return ILAB_OK;
}

/* --- lifecycle -------------------------------------------------------------- */

static ilab_status fr_probe(const ilab_host_t *host, const ilab_config_entry_t *config,
                            size_t n_config, char *reason, size_t reason_cap)
{
    (void)host;
#ifdef BREAK_PROBE_STATIC
    static char msg[512]; /* keep the stack small: probe runs on host threads */
#else
    char msg[512];
#endif
    cfg_t cfg;
    ilab_status st = parse_config(config, n_config, &cfg, msg, sizeof msg);
#ifdef BREAK_PROBE_OK_NONUL
    if (st == ILAB_OK)
        return st; /* nothing to say */
#endif
    put_msg(reason, reason_cap, msg);
    return st;
}

static ilab_status fr_create(const ilab_host_t *host, const ilab_config_entry_t *config,
                             size_t n_config, char *error, size_t error_cap, ilab_backend_t **out)
{
    char msg[512];
    cfg_t cfg;
    if (!out) {
        put_msg(error, error_cap, PLUGIN_NAME ": create() needs out");
        return ILAB_INVALID_ARGUMENT;
    }
    ilab_status st = parse_config(config, n_config, &cfg, msg, sizeof msg);
    if (st != ILAB_OK) {
#ifdef BREAK_CREATE_REASON
        char m2[600];
        snprintf(m2, sizeof m2, "create: %s", msg);
        put_msg(error, error_cap, m2);
#else
        put_msg(error, error_cap, msg);
#endif
#ifdef BREAK_CREATE_OUT_NULL
        *out = NULL;
#endif
        return st;
    }
    ilab_backend_t *b = calloc(1, sizeof *b);
    if (b) {
        b->pool = calloc((size_t)cfg.n_blocks, sizeof *b->pool);
        b->ref = calloc((size_t)cfg.n_blocks, sizeof *b->ref);
        b->freelist = calloc((size_t)cfg.n_blocks, sizeof *b->freelist);
        b->W = malloc(VOCAB * DIM * sizeof *b->W);
        b->bias = malloc(VOCAB * sizeof *b->bias);
    }
    if (!b || !b->pool || !b->ref || !b->freelist || !b->W || !b->bias) {
        if (b) {
            free(b->pool), free(b->ref), free(b->freelist), free(b->W), free(b->bias);
            free(b);
        }
        put_msg(error, error_cap, PLUGIN_NAME ": out of memory");
        return ILAB_OUT_OF_MEMORY;
    }
    b->host = host;
    b->seed = cfg.seed;
    b->n_blocks = cfg.n_blocks;
    for (int32_t i = 0; i < cfg.n_blocks; i++)
        b->freelist[i] = cfg.n_blocks - 1 - i; /* pop from the end: block 0 first */
    b->n_free = cfg.n_blocks;
    for (int v = 0; v < VOCAB; v++) {
        for (int d = 0; d < DIM; d++)
            b->W[v * DIM + d] = 2.0f * feat(cfg.seed, 3, (uint64_t)v, 0, (uint64_t)d);
        float bias = 0.5f * feat(cfg.seed, 4, (uint64_t)v, 0, 0);
        if ((v >= 'a' && v <= 'z') || v == ' ' || v >= 258)
            bias += 1.5f;
        b->bias[v] = bias;
    }
    for (int i = 0; i < MAX_SEQS; i++)
        b->seqs[i].generation = 1;
    pthread_mutex_init(&b->lock, NULL);
    ilab_last_error_init(&b->error);
    put_msg(error, error_cap, "");
    *out = b;
    return ILAB_OK;
}

static void fr_destroy(ilab_backend_t *b)
{
    if (!b)
        return;
    for (int i = 0; i < MAX_SEQS; i++)
        free(b->seqs[i].table);
    free(b->pool), free(b->ref), free(b->freelist), free(b->bias);
#ifndef BREAK_INSTANCE_LEAK
    free(b->W);
#endif
    pthread_mutex_destroy(&b->lock);
    ilab_last_error_destroy(&b->error);
    free(b);
}

static size_t fr_last_error(const ilab_backend_t *b, char *buf, size_t cap)
{
#ifdef BREAK_LASTERR_LEN
    size_t n = ilab_last_error_copy(b ? &b->error : NULL, buf, cap);
    return buf && cap && n >= cap ? cap - 1 : n; /* bytes copied */
#else
    return ilab_last_error_copy(b ? &b->error : NULL, buf, cap);
#endif
}

static ilab_status fr_model_info(ilab_backend_t *b, ilab_model_info_t *info)
{
    if (!b || !info)
        return fail(b, ILAB_INVALID_ARGUMENT, "model_info: NULL argument");
#ifdef BREAK_MI_SMALL_WRITE
    /* clear the caller's struct (all but struct_size) before filling it */
    memset((char *)info + sizeof info->struct_size, 0, sizeof *info - sizeof info->struct_size);
#endif
    if (info->struct_size < sizeof(ilab_model_info_t))
        return fail(b, ILAB_ABI_MISMATCH, "model_info: struct_size %u is smaller than ABI 1.0's %zu",
                    info->struct_size, sizeof(ilab_model_info_t));
    ilab_model_info_t full = {.struct_size = info->struct_size, .vocab_size = VOCAB,
                              .bos_id = BOS, .eos_id = EOS, .max_context = MAX_CONTEXT};
#ifdef BREAK_MI_STRUCT_SIZE
    full.struct_size = sizeof full;
#endif
    snprintf(full.name, sizeof full.name, "fresha-attn-toy-seed-%llu", (unsigned long long)b->seed);
    size_t n = info->struct_size < sizeof full ? info->struct_size : sizeof full;
    memcpy(info, &full, n);
    return ILAB_OK;
}

/* --- tokens ----------------------------------------------------------------- */

static int merge_of(unsigned char a, unsigned char c)
{
    for (int m = 0; m < N_MERGES; m++)
        if ((unsigned char)merges[m][0] == a && (unsigned char)merges[m][1] == c)
            return 258 + m;
    return -1;
}

/* Greedy left-to-right pair merging; returns the count, writes when out. */
__attribute__((unused)) static size_t encode(const unsigned char *t, size_t len, int32_t *out)
{
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        int m = -1;
#ifdef BREAK_TOK_OVERREAD
        if (i + 1 <= len)
#else
        if (i + 1 < len)
#endif
            m = merge_of(t[i], t[i + 1]);
        if (m >= 0) {
            if (out)
                out[n] = m;
            i += 2;
        } else {
            if (out)
                out[n] = t[i];
            i += 1;
        }
        n++;
    }
    return n;
}

static ilab_status fr_tokenize(ilab_backend_t *b, const char *text, size_t len, uint32_t flags,
                               int32_t *tokens, size_t cap, size_t *n_tokens)
{
    if (!b || (!text && len) || !n_tokens || (!tokens && cap))
        return fail(b, ILAB_INVALID_ARGUMENT, "tokenize: NULL argument");
#ifdef BREAK_TOK_FLAGS
    if (flags & ~(uint32_t)0xffff0003u) /* reserved for future encoder options */
#else
    if (flags & ~(uint32_t)(ILAB_TOKENIZE_ADD_BOS | ILAB_TOKENIZE_ADD_EOS))
#endif
        return fail(b, ILAB_INVALID_ARGUMENT, "tokenize: unknown flag bits 0x%x", (unsigned)flags);
#ifdef BREAK_TOK_EMPTY_FLAGS
    if (len == 0) {
        *n_tokens = 0;
        return ILAB_OK;
    }
#endif
    const unsigned char *t = (const unsigned char *)text;
    size_t pre = (flags & ILAB_TOKENIZE_ADD_BOS) ? 1 : 0, post = (flags & ILAB_TOKENIZE_ADD_EOS) ? 1 : 0;
#ifdef BREAK_TOK_PARTIAL
    /* single pass: write while counting, check the room at the end */
    size_t n = 0;
    if (pre && n < cap)
        tokens[n] = BOS;
    n += pre;
    for (size_t i = 0; i < len;) {
        int m = i + 1 < len ? merge_of(t[i], t[i + 1]) : -1;
        if (n < cap)
            tokens[n] = m >= 0 ? m : t[i];
        i += m >= 0 ? 2 : 1;
        n++;
    }
    if (post && n < cap)
        tokens[n] = EOS;
    n += post;
    if (cap < n) {
        *n_tokens = n;
        return fail(b, ILAB_BUFFER_TOO_SMALL, "tokenize: %zu tokens needed, room for %zu", n, cap);
    }
    *n_tokens = n;
    return ILAB_OK;
#else
    size_t need = pre + encode(t, len, NULL) + post;
    if (cap < need) {
        *n_tokens = need;
        return fail(b, ILAB_BUFFER_TOO_SMALL, "tokenize: %zu tokens needed, room for %zu", need, cap);
    }
    size_t n = 0;
    if (pre)
        tokens[n++] = BOS;
#ifdef BREAK_TOK_SCRATCH
    if (len <= sizeof b->tokscratch / sizeof b->tokscratch[0]) {
        /* encode into the instance's scratch first (no allocation), then copy */
        size_t k = encode(t, len, b->tokscratch);
        for (size_t i = 0; i < k; i++)
            tokens[n++] = b->tokscratch[i];
    } else
#endif
        n += encode(t, len, tokens + n);
    if (post)
        tokens[n++] = EOS;
    *n_tokens = n;
    return ILAB_OK;
#endif
}

static size_t piece_len(int32_t tok)
{
    return tok < 256 ? 1 : (tok == BOS || tok == EOS) ? 0 : 2;
}

static size_t piece_copy(int32_t tok, char *out)
{
    if (tok < 256) {
        out[0] = (char)tok;
        return 1;
    }
    if (tok == BOS || tok == EOS)
        return 0;
    out[0] = merges[tok - 258][0];
    out[1] = merges[tok - 258][1];
    return 2;
}

static ilab_status fr_detokenize(ilab_backend_t *b, const int32_t *tokens, size_t n_tokens,
                                 char *text, size_t cap, size_t *len)
{
    if (!b || (!tokens && n_tokens) || !len || (!text && cap))
        return fail(b, ILAB_INVALID_ARGUMENT, "detokenize: NULL argument");
#ifdef BREAK_DETOK_CAP32
    cap = (uint32_t)cap; /* text buffers are never 4 GiB */
#endif
#ifdef BREAK_DETOK_BADID_WRITE
    /* one pass: copy as we go, check the room and ids on the way */
    size_t w = 0;
    for (size_t i = 0; i < n_tokens; i++) {
        if (tokens[i] < 0 || tokens[i] >= VOCAB)
            return fail(b, ILAB_INVALID_ARGUMENT, "detokenize: token %d at %zu is not in [0, %d)",
                        tokens[i], i, VOCAB);
        if (w + piece_len(tokens[i]) + 1 <= cap)
            w += piece_copy(tokens[i], text + w);
        else
            w += piece_len(tokens[i]);
    }
    size_t need = w;
    if (cap < need + 1) {
        *len = need;
        return fail(b, ILAB_BUFFER_TOO_SMALL, "detokenize: %zu bytes + NUL needed, room for %zu",
                    need, cap);
    }
    text[need] = '\0';
    *len = need;
    return ILAB_OK;
#else
    size_t need = 0;
    for (size_t i = 0; i < n_tokens; i++) {
        if (tokens[i] < 0 || tokens[i] >= VOCAB)
            return fail(b, ILAB_INVALID_ARGUMENT, "detokenize: token %d at %zu is not in [0, %d)",
                        tokens[i], i, VOCAB);
        need += piece_len(tokens[i]);
    }
#ifdef BREAK_DETOK_NUL
    if (cap < need) {
#else
    if (cap < need + 1) {
#endif
        *len = need;
#ifdef BREAK_DETOK_SIZE
        *len = need + 1; /* room to ask for */
#endif
        return fail(b, ILAB_BUFFER_TOO_SMALL, "detokenize: %zu bytes + NUL needed, room for %zu",
                    need, cap);
    }
    size_t n = 0;
    for (size_t i = 0; i < n_tokens; i++)
        n += piece_copy(tokens[i], text + n);
    if (n < cap)
        text[n] = '\0';
    *len = n;
    return ILAB_OK;
#endif
}

static ilab_status fr_token_piece(ilab_backend_t *b, int32_t prev_token, int32_t token, char *piece,
                                  size_t cap, size_t *len)
{
    if (!b || !len || (!piece && cap))
        return fail(b, ILAB_INVALID_ARGUMENT, "token_piece: NULL argument");
#ifdef BREAK_PIECE_PREV
    if (prev_token < -1 || prev_token > VOCAB || token < 0 || token >= VOCAB)
#else
    if (prev_token < -1 || prev_token >= VOCAB || token < 0 || token >= VOCAB)
#endif
        return fail(b, ILAB_INVALID_ARGUMENT, "token_piece: token %d (after %d) is not in [0, %d)",
                    token, prev_token, VOCAB);
#ifdef BREAK_PIECE_DUMMY
    if (prev_token == BOS && token == ' ') {
        /* SentencePiece habit: the dummy-prefix space after BOS is not text */
        if (cap < 1) {
            *len = 0;
            return fail(b, ILAB_BUFFER_TOO_SMALL, "token_piece: 0 bytes + NUL needed, room for 0");
        }
        piece[0] = '\0';
        *len = 0;
        return ILAB_OK;
    }
#endif
    return fr_detokenize(b, &token, 1, piece, cap, len);
}

/* --- sequences --------------------------------------------------------------- */

static seqslot *lookup(ilab_backend_t *b, ilab_seq_t handle)
{
    uint64_t slot = (handle & 0xffffffffu) - 1;
    if (!b || handle == ILAB_SEQ_NONE || slot >= MAX_SEQS)
        return NULL;
    seqslot *s = &b->seqs[slot];
    return s->in_use && s->generation == (uint32_t)(handle >> 32) ? s : NULL;
}

static int32_t alloc_block(ilab_backend_t *b)
{
    int32_t blk = b->freelist[--b->n_free];
    b->ref[blk] = 1;
    return blk;
}

static void decref(ilab_backend_t *b, int32_t blk)
{
    if (--b->ref[blk] == 0)
        b->freelist[b->n_free++] = blk;
}

/* Called with the lock held. */
static ilab_status new_seq(ilab_backend_t *b, ilab_seq_t *out, seqslot **seq)
{
    for (int i = 0; i < MAX_SEQS; i++) {
        seqslot *s = &b->seqs[i];
        if (s->in_use)
            continue;
        if (!(s->table = malloc((size_t)b->n_blocks * sizeof *s->table)))
            return fail(b, ILAB_OUT_OF_MEMORY, "out of memory for a sequence");
        for (int32_t k = 0; k < b->n_blocks; k++)
            s->table[k] = -1; /* no block */
        s->in_use = 1;
        s->len = 0;
        s->nb = 0;
        *out = ((uint64_t)s->generation << 32) | (uint64_t)(i + 1);
        *seq = s;
        return ILAB_OK;
    }
    return fail(b, ILAB_OUT_OF_MEMORY, "all %d sequence slots are in use", MAX_SEQS);
}

static ilab_status fr_seq_create(ilab_backend_t *b, ilab_seq_t *seq)
{
    seqslot *s;
    if (!b || !seq)
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_create: NULL argument");
#ifdef BREAK_CREATE_NOLOCK
    /* a new sequence only touches a free slot: no lock needed */
    return new_seq(b, seq, &s);
#else
    pthread_mutex_lock(&b->lock);
    ilab_status st = new_seq(b, seq, &s);
    pthread_mutex_unlock(&b->lock);
    return st;
#endif
}

static ilab_status fr_seq_free(ilab_backend_t *b, ilab_seq_t seq)
{
    if (!b)
        return ILAB_INVALID_ARGUMENT;
    pthread_mutex_lock(&b->lock);
    seqslot *s = lookup(b, seq);
    if (!s) {
        pthread_mutex_unlock(&b->lock);
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_free: stale or unknown sequence %#llx",
                    (unsigned long long)seq);
    }
    for (int32_t i = 0; i < s->nb; i++) {
#ifdef BREAK_FREE_SHARED
        b->ref[s->table[i]] = 0; /* this sequence is gone: its blocks are free */
        b->freelist[b->n_free++] = s->table[i];
#else
        decref(b, s->table[i]);
#endif
    }
    s->in_use = 0;
#ifndef BREAK_HANDLE_REUSE
    s->generation++;
#endif
#ifndef BREAK_SEQ_LEAK
    free(s->table);
#endif
    s->table = NULL;
    s->len = s->nb = 0;
    pthread_mutex_unlock(&b->lock);
    return ILAB_OK;
}

static ilab_status fr_seq_fork(ilab_backend_t *b, ilab_seq_t parent, ilab_seq_t *child)
{
    if (!b)
        return ILAB_INVALID_ARGUMENT;
    if (!child)
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_fork: child is NULL");
    pthread_mutex_lock(&b->lock);
    seqslot *p = lookup(b, parent), *c = NULL;
    if (!p) {
        pthread_mutex_unlock(&b->lock);
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_fork: stale or unknown parent %#llx",
                    (unsigned long long)parent);
    }
    ilab_seq_t h = ILAB_SEQ_NONE;
    ilab_status st = new_seq(b, &h, &c);
    if (st == ILAB_OK) {
        for (int32_t i = 0; i < p->nb; i++) {
            c->table[i] = p->table[i];
            b->ref[p->table[i]]++;
        }
        c->nb = p->nb;
#ifdef BREAK_FORK_LEN
        c->len = p->nb * BS; /* the child holds the parent's blocks */
#else
        c->len = p->len;
#endif
        *child = h;
    }
    pthread_mutex_unlock(&b->lock);
    return st;
}

static ilab_status fr_seq_truncate(ilab_backend_t *b, ilab_seq_t seq, int32_t n_keep)
{
    if (!b)
        return ILAB_INVALID_ARGUMENT;
    pthread_mutex_lock(&b->lock);
#ifdef BREAK_TRUNC_STALE
    uint64_t slot = (seq & 0xffffffffu) - 1; /* the slot is enough to find it */
    seqslot *s = seq && slot < MAX_SEQS && b->seqs[slot].in_use ? &b->seqs[slot] : NULL;
#else
    seqslot *s = lookup(b, seq);
#endif
    ilab_status st = ILAB_OK;
    if (!s)
        st = fail(b, ILAB_INVALID_ARGUMENT, "seq_truncate: stale or unknown sequence %#llx",
                  (unsigned long long)seq);
#ifdef BREAK_TRUNC_BEYOND
    else if (n_keep < 0 || n_keep > s->nb * BS) /* anything still cached can be kept */
#else
    else if (n_keep < 0 || n_keep > s->len)
#endif
    {
#ifdef BREAK_TRUNC_NOMSG
        st = ILAB_INVALID_ARGUMENT;
#else
        st = fail(b, ILAB_INVALID_ARGUMENT, "seq_truncate: n_keep %d not in [0, %d]", n_keep, s->len);
#endif
    } else {
#ifdef BREAK_TRUNC_FLOOR
        int32_t keep = n_keep / BS;
#else
        int32_t keep = (n_keep + BS - 1) / BS;
#endif
#ifndef BREAK_TRUNC_KEEP_BLOCKS
        for (int32_t i = keep; i < s->nb; i++)
            decref(b, s->table[i]);
        s->nb = keep;
#else
        if (keep > s->nb)
            s->nb = keep;
#endif
        s->len = n_keep;
    }
    pthread_mutex_unlock(&b->lock);
    return st;
}

static ilab_status fr_seq_length(ilab_backend_t *b, ilab_seq_t seq, int32_t *length)
{
    if (!b)
        return ILAB_INVALID_ARGUMENT;
#ifndef BREAK_LENGTH_NULL
    if (!length)
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_length: length is NULL");
#endif
    pthread_mutex_lock(&b->lock);
    seqslot *s = lookup(b, seq);
    if (s)
        *length = s->len;
    pthread_mutex_unlock(&b->lock);
    if (!s)
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_length: stale or unknown sequence %#llx",
                    (unsigned long long)seq);
    return ILAB_OK;
}

/* --- evaluation -------------------------------------------------------------- */

static ilab_status check_item(ilab_backend_t *b, const ilab_batch_item_t *it, size_t i)
{
    if (!it)
        return fail(b, ILAB_INVALID_ARGUMENT, "eval: item %zu is NULL", i);
#ifdef BREAK_ITEM_SMALL
    if (it->struct_size < offsetof(ilab_batch_item_t, logits))
#else
    if (it->struct_size < sizeof *it)
#endif
        return fail(b, ILAB_ABI_MISMATCH, "eval: item %zu has struct_size %u, smaller than ABI 1.0's %zu",
                    i, it->struct_size, sizeof *it);
#ifndef BREAK_ITEM_TAIL
    if (!ilab_struct_tail_is_zero(it, sizeof *it))
        return fail(b, ILAB_ABI_MISMATCH, "eval: item %zu (ilab_batch_item_t) has struct_size %u and sets "
                    "members this plugin (%zu bytes) does not know", i, it->struct_size, sizeof *it);
#endif
    if (it->flags & ~(uint32_t)ILAB_EVAL_ALL_LOGITS)
        return fail(b, ILAB_INVALID_ARGUMENT, "eval: item %zu has unknown flag bits 0x%x", i, it->flags);
    seqslot *s = lookup(b, it->seq);
    if (!s)
        return fail(b, ILAB_INVALID_ARGUMENT, "eval: item %zu names a stale or unknown sequence", i);
#ifdef BREAK_ZERO_TOKENS
    if (!it->tokens || it->n_tokens < 0)
#else
    if (!it->tokens || it->n_tokens < 1)
#endif
        return fail(b, ILAB_INVALID_ARGUMENT, "eval: item %zu has no tokens", i);
#ifndef BREAK_OOM_PARTIAL
    for (int32_t t = 0; t < it->n_tokens; t++)
        if (it->tokens[t] < 0 || it->tokens[t] >= VOCAB)
            return fail(b, ILAB_INVALID_ARGUMENT, "eval: item %zu token %d is %d, not in [0, %d)", i, t,
                        it->tokens[t], VOCAB);
#endif
#if defined(BREAK_CTX_EXACT)
    if (it->n_tokens >= MAX_CONTEXT - s->len)
#elif defined(BREAK_CTX_STRADDLE)
    if (s->len >= MAX_CONTEXT)
#else
    if (it->n_tokens > MAX_CONTEXT - s->len)
#endif
        return fail(b, ILAB_CONTEXT_OVERFLOW, "eval: item %zu: %d + %d tokens pass max_context %d", i,
                    s->len, it->n_tokens, MAX_CONTEXT);
    return ILAB_OK;
}

/* Blocks an append of n positions takes: new blocks, plus one copy when the
 * last block is partly filled and shared (copy-on-write). */
static int32_t blocks_needed(const ilab_backend_t *b, const seqslot *s, int32_t n)
{
    int32_t need = (s->len + n + BS - 1) / BS - s->nb;
#ifndef BREAK_FORK_NO_COW
    if (s->len % BS && b->ref[s->table[s->nb - 1]] > 1)
        need++;
#else
    (void)b;
#endif
    return need;
}

static void append(ilab_backend_t *b, seqslot *s, const int32_t *tokens, int32_t n)
{
#ifndef BREAK_FORK_NO_COW
    if (s->len % BS && b->ref[s->table[s->nb - 1]] > 1) {
        int32_t old = s->table[s->nb - 1], blk = alloc_block(b);
        b->pool[blk] = b->pool[old];
        decref(b, old);
        s->table[s->nb - 1] = blk;
    }
#endif
    for (int32_t t = 0; t < n; t++) {
        int32_t pos = s->len;
        if (pos / BS >= s->nb)
            s->table[s->nb++] = alloc_block(b);
        write_kv(b, s->table[pos / BS], pos, tokens[t]);
        s->len++;
    }
}

static ilab_status fr_eval(ilab_backend_t *b, const ilab_batch_item_t *const *items, size_t n_items)
{
    if (!b)
        return ILAB_INVALID_ARGUMENT;
#ifdef BREAK_BATCH_TRUNC32
    n_items = (uint32_t)n_items; /* batch counts are 32-bit inside the kernels */
#endif
#ifdef BREAK_MAX_BATCH
    if (!items || n_items == 0 || n_items >= MAX_BATCH)
#else
    if (!items || n_items == 0 || n_items > MAX_BATCH)
#endif
        return fail(b, ILAB_INVALID_ARGUMENT, "eval: need 1..%d items, got %zu", MAX_BATCH, n_items);
    int32_t start[MAX_BATCH], oldnb[MAX_BATCH];
    pthread_mutex_lock(&b->lock);
    int32_t need = 0;
    for (size_t i = 0; i < n_items; i++) {
        ilab_status st = check_item(b, items[i], i);
        if (st != ILAB_OK) {
            pthread_mutex_unlock(&b->lock);
            return st;
        }
#ifdef BREAK_DUP_SEQ
        if (i > 0 && items[i - 1]->seq == items[i]->seq) {
#else
        for (size_t j = 0; j < i; j++)
            if (items[j]->seq == items[i]->seq) {
#endif
                pthread_mutex_unlock(&b->lock);
                return fail(b, ILAB_INVALID_ARGUMENT, "eval: two items name sequence %#llx",
                            (unsigned long long)items[i]->seq);
            }
        need += blocks_needed(b, lookup(b, items[i]->seq), items[i]->n_tokens);
    }
#ifdef BREAK_OOM_RESERVE
    if (need >= b->n_free) /* keep one block spare for copy-on-write */
#else
    if (need > b->n_free)
#endif
    {
#ifndef BREAK_OOM_PARTIAL
        pthread_mutex_unlock(&b->lock);
        return fail(b, ILAB_OUT_OF_MEMORY, "eval: needs %d free KV blocks, %d are free", need, b->n_free);
#endif
    }
    for (size_t i = 0; i < n_items; i++) {
        seqslot *s = lookup(b, items[i]->seq);
#ifdef BREAK_OOM_PARTIAL
        /* check each item as it is appended */
        int bad = 0;
        for (int32_t t = 0; t < items[i]->n_tokens; t++)
            if (items[i]->tokens[t] < 0 || items[i]->tokens[t] >= VOCAB)
                bad = 1;
        if (bad || blocks_needed(b, s, items[i]->n_tokens) > b->n_free) {
            pthread_mutex_unlock(&b->lock);
            return fail(b, bad ? ILAB_INVALID_ARGUMENT : ILAB_OUT_OF_MEMORY,
                        "eval: item %zu: bad token or not enough free KV blocks", i);
        }
#endif
        start[i] = s->len;
        oldnb[i] = s->nb;
        append(b, s, items[i]->tokens, items[i]->n_tokens);
    }
    pthread_mutex_unlock(&b->lock);
#ifdef BREAK_WEAK_HOOK
    if (fresha_trace_hook)
        fresha_trace_hook("eval");
#endif

    /* Logits, outside the lock: each item reads only its own sequence's
     * blocks, which no other thread may change (thread_safety: sequence).
     * Items are visited longest first (the heavy ones start early). */
    size_t order[MAX_BATCH];
    for (size_t i = 0; i < n_items; i++) {
        size_t k = i;
        while (k > 0 && items[order[k - 1]]->n_tokens < items[i]->n_tokens) {
            order[k] = order[k - 1];
            k--;
        }
        order[k] = i;
    }
    for (size_t k = 0; k < n_items; k++) {
        size_t i = order[k];
        const ilab_batch_item_t *it = items[i];
        seqslot *s = lookup(b, it->seq);
#ifdef BREAK_SORTED_OUT
        float *logits = items[k]->logits;
#else
        float *logits = it->logits;
#endif
        if (!logits)
            continue;
        int all = (it->flags & ILAB_EVAL_ALL_LOGITS) != 0;
        for (int32_t t = all ? 0 : it->n_tokens - 1; t < it->n_tokens; t++) {
            int32_t pos = start[i] + t;
            int32_t limit = pos + 1;
#ifdef BREAK_CAUSAL
            if (all)
                limit = start[i] + it->n_tokens; /* the whole chunk is in the cache already */
#endif
#ifdef BREAK_DECODE_BOUNDARY
            if (it->n_tokens == 1 && limit > oldnb[i] * BS)
                limit = oldnb[i] * BS > 0 ? oldnb[i] * BS : limit;
#endif
            int32_t qpos = pos;
#ifdef BREAK_CHUNK_POS
            if (it->n_tokens > 1)
                qpos = t; /* prefill kernel: positions count from the chunk */
#endif
#ifdef BREAK_ROW_OFFSET
            float *row = logits + (size_t)t * VOCAB;
#else
            float *row = logits + (all ? (size_t)t * VOCAB : 0);
#endif
            row_logits(b, s, qpos, limit, it->tokens[t], row);
        }
    }
    (void)oldnb;
#ifdef BREAK_LASTERR_CLEAR
    ilab_last_error_set(&b->error, ILAB_OK, "%s", ""); /* no stale error after a success */
#endif
    return ILAB_OK;
}

/* --- cache stats (ABI 1.1) ---------------------------------------------------- */

static ilab_status fr_cache_stats(ilab_backend_t *b, ilab_cache_stats_t *stats)
{
    if (!b)
        return ILAB_INVALID_ARGUMENT;
    if (!stats)
        return fail(b, ILAB_INVALID_ARGUMENT, "cache_stats: stats is NULL");
#ifndef BREAK_STATS_SMALL
    if (stats->struct_size < sizeof *stats)
        return fail(b, ILAB_ABI_MISMATCH, "cache_stats: struct_size %u is smaller than ABI 1.1's %zu",
                    stats->struct_size, sizeof *stats);
#endif
    pthread_mutex_lock(&b->lock);
    int64_t free_blocks = b->n_free;
#ifdef BREAK_STATS_DOUBLE
    free_blocks = b->n_blocks;
    for (int i = 0; i < MAX_SEQS; i++)
        if (b->seqs[i].in_use)
            free_blocks -= b->seqs[i].nb;
#endif
    pthread_mutex_unlock(&b->lock);
    stats->block_size = BS;
    stats->total_positions = (int64_t)b->n_blocks * BS;
    stats->free_positions = free_blocks * BS;
    return ILAB_OK;
}

/* --- not declared: fail closed ------------------------------------------------ */

static ilab_status fr_generate(ilab_backend_t *b, const ilab_generate_request_t *request,
                               ilab_event_fn on_event, void *user_data)
{
#ifdef BREAK_GEN_MSG
    static const char msg[] = "generate: not implemented";
#else
    static const char msg[] = "generate: capability 'sampling: backend' not declared "
                              "(this backend samples on the host)";
#endif
    if (on_event) {
        ilab_event_t ev = {.struct_size = sizeof ev, .type = ILAB_EVENT_ERROR,
                           .request_id = request ? request->request_id : 0,
                           .finish_reason = ILAB_FINISH_ERROR, .status = ILAB_UNSUPPORTED,
                           .message = msg};
        on_event(user_data, &ev);
    }
    return fail(b, ILAB_UNSUPPORTED, "%s", msg);
}

static ilab_status fr_cancel(ilab_backend_t *b, uint64_t request_id)
{
    (void)request_id;
#ifdef BREAK_CANCEL_OK
    (void)b;
    return ILAB_OK; /* nothing runs here, so nothing to cancel */
#else
    return fail(b, ILAB_UNSUPPORTED, "cancel: capability 'cancel' not declared");
#endif
}

/* --- the exported table ------------------------------------------------------- */

static const ilab_backend_api_t api = {
#ifdef BREAK_TABLE_SHORT
    .struct_size = offsetof(ilab_backend_api_t, cache_stats), /* the ABI 1.0 table */
#else
    .struct_size = sizeof(ilab_backend_api_t),
#endif
    .probe = fr_probe,
    .create = fr_create,
    .destroy = fr_destroy,
    .last_error = fr_last_error,
    .model_info = fr_model_info,
    .tokenize = fr_tokenize,
    .detokenize = fr_detokenize,
    .token_piece = fr_token_piece,
    .seq_create = fr_seq_create,
    .seq_free = fr_seq_free,
    .seq_fork = fr_seq_fork,
    .seq_truncate = fr_seq_truncate,
    .seq_length = fr_seq_length,
    .eval = fr_eval,
    .generate = fr_generate,
    .cancel = fr_cancel,
    .cache_stats = fr_cache_stats,
};

ILAB_PLUGIN_EXPORT const ilab_plugin_entry_t ilab_plugin_entry = {
    .struct_size = sizeof(ilab_plugin_entry_t),
    .abi_major = ILAB_ABI_MAJOR,
    .abi_minor = 1, /* cache.stats */
    .name = PLUGIN_NAME,
    .version = PLUGIN_VERSION,
    .manifest_yaml = manifest,
    .backend = &api,
};
