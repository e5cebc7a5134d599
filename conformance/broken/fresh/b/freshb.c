/* freshb — a toy inferlab backend that samples itself (sampling: backend).
 *
 * Model: byte tokenizer (0..255) + BOS (256) + EOS (257) + 24 two-byte merges
 * (258..281). The state after position p is a rolling 64-bit hash of every
 * earlier token and of p; the logits are a hash of that state, quantised to
 * quarter steps (so ties happen), plus a small bias towards letters.
 * The KV cache stores the per-position state in a paged pool of 16-position
 * blocks with reference counts (fork shares blocks, copy-on-write on append).
 *
 * Each variant is this file compiled with -DBREAK_<NAME>. */
#include <inferlab/inferlab.h>

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PLUGIN_NAME "freshb"
#define PLUGIN_VERSION "0.1.0"
#ifdef BREAK_MANIFEST_VERSION
#define MANIFEST_VERSION "0.1.1"
#else
#define MANIFEST_VERSION PLUGIN_VERSION
#endif

#define NBYTES 256
#define BOS 256
#define EOS 257
#define NMERGE 24
#define VOCAB (258 + NMERGE)
#define MAX_CONTEXT 256
#define BLOCK 16
#define BLOCKS_PER_SEQ (MAX_CONTEXT / BLOCK)
#define MAX_SEQS 32
#define POOL (MAX_SEQS * BLOCKS_PER_SEQ)
#define MAX_BATCH 8
#define TOPK_MAX 20

static const char manifest[] =
    "name: " PLUGIN_NAME "\n"
    "version: " MANIFEST_VERSION "\n"
    "abi: 1.0\n"
    "description: >-\n"
    "  Toy backend sampling itself: byte tokenizer with merges, rolling-hash\n"
    "  logits over a paged reference-counted KV cache.\n"
    "capabilities:\n"
    "  tokenizer: true\n"
    "  logits: full\n"
    "  topk_max: 20\n"
    "  sampling: backend\n"
    "  cache: {fork: true, truncate: true}\n"
    "  batching: {max_batch: 8}\n"
    "  streaming: true\n"
    "  cancel: true\n"
    "  max_context: 256\n"
    "  thread_safety: full\n"
    "config:\n"
    "  seed:\n"
    "    type: int\n"
    "    default: 0\n"
    "    description: Seed of the hashed model; each seed is a different toy model.\n"
    "  device:\n"
    "    type: string\n"
    "    default: cpu\n"
    "    description: cpu (always available) or accel (needs an accelerator, never present).\n";

static const char merges[NMERGE][3] = {
    "th", "he", "in", "er", "an", "re", "on", "at", "en", "nd", "ti", "es",
    "or", "te", "of", "ed", "is", "it", "al", "ar", "st", "to", "nt", "\r\n",
};

#ifdef BREAK_WEAK_HOOK
/* optional tracing hook, "provided by the host when it has one" */
extern void ilab_trace_hook(const char *what) __attribute__((weak));
#endif

typedef struct kv_block {
    int32_t rc;
    uint64_t h[BLOCK];
} kv_block;

typedef struct sequence {
    uint32_t generation;
    int in_use;
    int32_t len;
    int32_t nblocks;
    int32_t blocks[BLOCKS_PER_SEQ];
} sequence;

typedef struct running {
    uint64_t id;
    atomic_int cancelled;
    struct running *next;
} running;

struct ilab_backend {
    const ilab_host_t *host;
    uint64_t seed;
    pthread_mutex_t lock; /* sequences, pool */
    sequence seqs[MAX_SEQS];
    kv_block *pool;
    int32_t free_list[POOL];
    int32_t n_free;
    int16_t *merge_lut; /* 65536 entries: byte pair -> merge id or -1 */
    float rowbuf[VOCAB];
#ifdef BREAK_TOKENIZE_SCRATCH
    int32_t tok_scratch[8192]; /* one tokenizer pass, reused for the copy */
#endif
    pthread_mutex_t run_lock;
    running *runs;
#ifdef BREAK_CANCEL_PREARM
    uint64_t pending_cancel[16];
    int n_pending_cancel;
#endif
#ifdef BREAK_SEED_SHARED
    int rng_seeded;
    uint64_t rng;
#endif
#ifdef BREAK_SHARED_SCRATCH
    float gen_scratch[VOCAB];
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

/* --- the model -------------------------------------------------------------- */

static uint64_t mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t state0(uint64_t seed) { return mix(seed ^ 0x5eed5eed5eedull); }

static uint64_t step(uint64_t prev, int32_t tok, int32_t pos)
{
    return mix(prev * 0x9e3779b97f4a7c15ull ^ ((uint64_t)(uint32_t)tok << 20) ^
               ((uint64_t)(uint32_t)(pos + 1) << 42));
}

static float bias(int v)
{
    if ((v >= 'a' && v <= 'z') || v == ' ' || (v >= 258 && v < VOCAB - 1))
        return 2.0f;
    if (v == '\n' || v == '.' || v == ',')
        return 1.0f;
    if (v < 32 || v == BOS)
        return -2.0f;
    return 0.0f;
}

static void logits_of(uint64_t h, float *out)
{
    for (int v = 0; v < VOCAB; v++) {
        uint64_t r = mix(h + (uint64_t)v * 0x632be59bd9b4e019ull);
        out[v] = (float)(r % 33) * 0.25f - 4.0f + bias(v);
    }
}

/* --- lifecycle -------------------------------------------------------------- */

#define UNAVAILABLE_REASON PLUGIN_NAME ": device 'accel': no accelerator found on this machine"

/* Parses the configuration; writes a message into msg on failure. */
static ilab_status parse_config(const ilab_config_entry_t *config, size_t n, uint64_t *seed,
                                int *accel, char *msg, size_t cap)
{
    *seed = 0;
    *accel = 0;
    if (n && !config) {
        snprintf(msg, cap, PLUGIN_NAME ": config is NULL");
        return ILAB_INVALID_ARGUMENT;
    }
    for (size_t i = 0; i < n; i++) {
        const char *k = config[i].key, *v = config[i].value;
        if (!k || !v) {
            snprintf(msg, cap, PLUGIN_NAME ": config entry %zu has a NULL key or value", i);
            return ILAB_INVALID_ARGUMENT;
        }
        if (!strcmp(k, "seed")) {
#ifdef BREAK_CONFIG_ATOI
            *seed = (uint64_t)atoll(v);
#else
            char *end = NULL;
            long long x = strtoll(v, &end, 10);
            if (!*v || *end) {
                snprintf(msg, cap, PLUGIN_NAME ": config key 'seed' must be an int, got '%s'", v);
                return ILAB_INVALID_ARGUMENT;
            }
            *seed = (uint64_t)x;
#endif
        } else if (!strcmp(k, "device")) {
            if (!strcmp(v, "cpu"))
                *accel = 0;
            else if (!strcmp(v, "accel"))
                *accel = 1;
            else {
#ifdef BREAK_PROBE_BAD_DEVICE
                *accel = 1; /* some device we do not have */
#else
                snprintf(msg, cap, PLUGIN_NAME ": config key 'device' must be cpu or accel, got '%s'", v);
                return ILAB_INVALID_ARGUMENT;
#endif
            }
        } else {
#ifndef BREAK_UNKNOWN_KEY_IGNORED
            snprintf(msg, cap, PLUGIN_NAME ": unknown config key '%s'", k);
            return ILAB_INVALID_ARGUMENT;
#endif
        }
    }
    return ILAB_OK;
}

static void put_reason(char *buf, size_t cap, const char *msg)
{
    if (!buf || !cap)
        return;
#ifdef BREAK_REASON_OVERFLOW
    snprintf(buf, cap + 1, "%s", msg); /* "room for the NUL" */
    buf[cap - 1] = '\0';
#else
    snprintf(buf, cap, "%s", msg);
#endif
}

#ifdef BREAK_PROBE_STATEFUL
static atomic_int probe_reported;
#endif

static ilab_status fb_probe(const ilab_host_t *host, const ilab_config_entry_t *config,
                            size_t n_config, char *reason, size_t reason_cap)
{
    (void)host;
    char msg[512];
    uint64_t seed;
    int accel;
    ilab_status st = parse_config(config, n_config, &seed, &accel, msg, sizeof msg);
    if (st != ILAB_OK) {
        put_reason(reason, reason_cap, msg);
        return st;
    }
    if (accel) {
#ifdef BREAK_PROBE_STATEFUL
        /* report the details once, then just the status */
        if (atomic_exchange(&probe_reported, 1)) {
            put_reason(reason, reason_cap, PLUGIN_NAME ": unavailable (see earlier probe)");
            return ILAB_UNAVAILABLE;
        }
#endif
        put_reason(reason, reason_cap, UNAVAILABLE_REASON);
        return ILAB_UNAVAILABLE;
    }
#ifndef BREAK_PROBE_OK_UNTERMINATED
    put_reason(reason, reason_cap, "");
#endif
    return ILAB_OK;
}

static ilab_status fb_create(const ilab_host_t *host, const ilab_config_entry_t *config,
                             size_t n_config, char *error, size_t error_cap, ilab_backend_t **out)
{
    char msg[512];
    if (!out) {
        put_reason(error, error_cap, PLUGIN_NAME ": create(): out is NULL");
        return ILAB_INVALID_ARGUMENT;
    }
    uint64_t seed;
    int accel;
    ilab_status st = parse_config(config, n_config, &seed, &accel, msg, sizeof msg);
    if (st != ILAB_OK) {
        put_reason(error, error_cap, msg);
        return st;
    }
    if (accel) {
#ifdef BREAK_CREATE_REASON
        put_reason(error, error_cap, PLUGIN_NAME ": cannot create an instance: no accelerator");
#else
        put_reason(error, error_cap, UNAVAILABLE_REASON);
#endif
        return ILAB_UNAVAILABLE;
    }
    ilab_backend_t *b = calloc(1, sizeof *b);
    if (!b) {
        put_reason(error, error_cap, PLUGIN_NAME ": out of memory");
        return ILAB_OUT_OF_MEMORY;
    }
    b->pool = calloc(POOL, sizeof *b->pool);
    b->merge_lut = malloc(65536 * sizeof *b->merge_lut);
    if (!b->pool || !b->merge_lut) {
        free(b->pool);
        free(b->merge_lut);
        free(b);
        put_reason(error, error_cap, PLUGIN_NAME ": out of memory");
        return ILAB_OUT_OF_MEMORY;
    }
    for (int i = 0; i < 65536; i++)
        b->merge_lut[i] = -1;
    for (int m = 0; m < NMERGE; m++)
        b->merge_lut[(unsigned char)merges[m][0] << 8 | (unsigned char)merges[m][1]] = (int16_t)(258 + m);
    for (int i = 0; i < POOL; i++)
        b->free_list[i] = POOL - 1 - i;
    b->n_free = POOL;
    for (int i = 0; i < MAX_SEQS; i++)
        b->seqs[i].generation = 1;
    b->host = host;
    b->seed = seed;
    pthread_mutex_init(&b->lock, NULL);
    pthread_mutex_init(&b->run_lock, NULL);
    ilab_last_error_init(&b->error);
    put_reason(error, error_cap, "");
    *out = b;
    return ILAB_OK;
}

static void fb_destroy(ilab_backend_t *b)
{
    if (!b)
        return;
    pthread_mutex_destroy(&b->lock);
    pthread_mutex_destroy(&b->run_lock);
    ilab_last_error_destroy(&b->error);
    free(b->pool);
#ifndef BREAK_DESTROY_LEAK
    free(b->merge_lut);
#endif
    free(b);
}

static size_t fb_last_error(const ilab_backend_t *b, char *buf, size_t cap)
{
#ifdef BREAK_LASTERR_LEN
    size_t n = ilab_last_error_copy(b ? &b->error : NULL, buf, cap);
    if (buf && cap && n >= cap)
        n = cap - 1; /* what was copied */
    return n;
#else
    return ilab_last_error_copy(b ? &b->error : NULL, buf, cap);
#endif
}

static ilab_status fb_model_info(ilab_backend_t *b, ilab_model_info_t *info)
{
    if (!b || !info)
        return fail(b, ILAB_INVALID_ARGUMENT, "model_info: NULL argument");
#ifdef BREAK_MINFO_SMALL_WRITES
    info->vocab_size = VOCAB; /* the ABI 1.0 prefix is always there */
#endif
    if (info->struct_size < sizeof(ilab_model_info_t))
        return fail(b, ILAB_ABI_MISMATCH, "model_info: struct_size %u is smaller than ABI 1.0's %zu",
                    info->struct_size, sizeof(ilab_model_info_t));
    ilab_model_info_t full;
    memset(&full, 0, sizeof full);
    full.struct_size = info->struct_size;
#ifdef BREAK_MINFO_SIZE
    full.struct_size = sizeof full;
#endif
    full.vocab_size = VOCAB;
    full.bos_id = BOS;
    full.eos_id = EOS;
    full.max_context = MAX_CONTEXT;
    snprintf(full.name, sizeof full.name, "freshb-toy-seed-%llu", (unsigned long long)b->seed);
    full.digest[0] = '\0';
    size_t n = info->struct_size < sizeof full ? info->struct_size : sizeof full;
    memcpy(info, &full, n);
    return ILAB_OK;
}

/* --- tokens ----------------------------------------------------------------- */

static size_t do_tokenize(const ilab_backend_t *b, const char *text, size_t len, int32_t *out)
{
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        if (i + 1 < len) {
            int m = b->merge_lut[(unsigned char)text[i] << 8 | (unsigned char)text[i + 1]];
            if (m >= 0) {
                if (out)
                    out[n] = m;
                n++;
                i += 2;
                continue;
            }
        }
        if (out)
            out[n] = (unsigned char)text[i];
        n++;
        i++;
    }
    return n;
}

static ilab_status fb_tokenize(ilab_backend_t *b, const char *text, size_t len, uint32_t flags,
                               int32_t *tokens, size_t cap, size_t *n_tokens)
{
#ifdef BREAK_NULL_NTOKENS
    if (!b || (!text && len) || (!tokens && cap))
#else
    if (!b || (!text && len) || !n_tokens || (!tokens && cap))
#endif
        return fail(b, ILAB_INVALID_ARGUMENT, "tokenize: NULL argument");
#ifdef BREAK_FLAGS_HIGH
    if (flags & 0xfc)
#else
    if (flags & ~(uint32_t)(ILAB_TOKENIZE_ADD_BOS | ILAB_TOKENIZE_ADD_EOS))
#endif
        return fail(b, ILAB_INVALID_ARGUMENT, "tokenize: unknown flag bits 0x%x", (unsigned)flags);
    int bos = !!(flags & ILAB_TOKENIZE_ADD_BOS), eos = !!(flags & ILAB_TOKENIZE_ADD_EOS);
    size_t body = do_tokenize(b, text, len, NULL);
    size_t need = body + (size_t)bos + (size_t)eos;
    if (cap < need) {
#ifdef BREAK_SIZE_QUERY_EOS
        *n_tokens = body + (size_t)bos;
#else
        *n_tokens = need;
#endif
        return fail(b, ILAB_BUFFER_TOO_SMALL, "tokenize: %zu tokens needed, room for %zu", need, cap);
    }
    size_t n = 0;
    if (bos)
        tokens[n++] = BOS;
#ifdef BREAK_TOKENIZE_SCRATCH
    if (body <= 8192) { /* tokenize once into the scratch, then copy */
        do_tokenize(b, text, len, b->tok_scratch);
        memcpy(tokens + n, b->tok_scratch, body * sizeof *tokens);
        n += body;
    } else
        n += do_tokenize(b, text, len, tokens + n);
#else
    n += do_tokenize(b, text, len, tokens + n);
#endif
    if (eos)
        tokens[n++] = EOS;
    *n_tokens = n;
    return ILAB_OK;
}

/* The bytes of one token, or 0 bytes for BOS/EOS. */
static size_t token_text(int32_t t, char out[2])
{
    if (t < NBYTES) {
        out[0] = (char)t;
        return 1;
    }
    if (t == BOS || t == EOS)
        return 0;
#ifdef BREAK_CRLF
    if (t == VOCAB - 1) { /* the CRLF merge: "normalise line endings" */
        out[0] = '\n';
        return 1;
    }
#endif
    out[0] = merges[t - 258][0];
    out[1] = merges[t - 258][1];
    return 2;
}

static ilab_status fb_detokenize(ilab_backend_t *b, const int32_t *tokens, size_t n_tokens,
                                 char *text, size_t cap, size_t *len)
{
    if (!b || (!tokens && n_tokens) || !len || (!text && cap))
        return fail(b, ILAB_INVALID_ARGUMENT, "detokenize: NULL argument");
    size_t need = 0;
    char tmp[2];
    for (size_t i = 0; i < n_tokens; i++) {
        if (tokens[i] < 0 || tokens[i] >= VOCAB)
            return fail(b, ILAB_INVALID_ARGUMENT, "detokenize: token %d at %zu is not in [0, %d)",
                        tokens[i], i, VOCAB);
        need += token_text(tokens[i], tmp);
    }
#ifdef BREAK_DETOK_EXACT_CAP
    if (cap < need) {
#else
    if (cap < need + 1) {
#endif
        *len = need;
        return fail(b, ILAB_BUFFER_TOO_SMALL, "detokenize: %zu bytes + NUL needed, room for %zu",
                    need, cap);
    }
    size_t n = 0;
    for (size_t i = 0; i < n_tokens; i++) {
        size_t k = token_text(tokens[i], tmp);
        memcpy(text + n, tmp, k);
        n += k;
    }
    if (n < cap)
        text[n] = '\0';
    *len = n;
    return ILAB_OK;
}

static ilab_status fb_token_piece(ilab_backend_t *b, int32_t prev_token, int32_t token,
                                  char *piece, size_t cap, size_t *len)
{
    if (!b || !len || (!piece && cap))
        return fail(b, ILAB_INVALID_ARGUMENT, "token_piece: NULL argument");
#ifdef BREAK_PIECE_PREV_RANGE
    if (prev_token >= VOCAB || token < 0 || token >= VOCAB)
#else
    if (prev_token < -1 || prev_token >= VOCAB || token < 0 || token >= VOCAB)
#endif
        return fail(b, ILAB_INVALID_ARGUMENT, "token_piece: token %d (after %d) is not in [0, %d)",
                    token, prev_token, VOCAB);
#ifdef BREAK_EOS_PIECE
    if (token == EOS) {
        static const char eos_text[] = "</s>";
        if (cap < sizeof eos_text) {
            *len = sizeof eos_text - 1;
            return fail(b, ILAB_BUFFER_TOO_SMALL, "token_piece: buffer too small");
        }
        memcpy(piece, eos_text, sizeof eos_text);
        *len = sizeof eos_text - 1;
        return ILAB_OK;
    }
#endif
#ifdef BREAK_PIECE_SPACE
    if (prev_token == -1 && token == ' ') { /* dummy-prefix space at the start of text */
        if (cap < 1) {
            *len = 0;
            return fail(b, ILAB_BUFFER_TOO_SMALL, "token_piece: buffer too small");
        }
        piece[0] = '\0';
        *len = 0;
        return ILAB_OK;
    }
#endif
    return fb_detokenize(b, &token, 1, piece, cap, len);
}

/* --- sequences and the block pool ------------------------------------------ */

static sequence *lookup(ilab_backend_t *b, ilab_seq_t handle)
{
    uint64_t slot = (handle & 0xffffffffu) - 1;
    if (!b || handle == ILAB_SEQ_NONE || slot >= MAX_SEQS)
        return NULL;
    sequence *s = &b->seqs[slot];
    return s->in_use && s->generation == (uint32_t)(handle >> 32) ? s : NULL;
}

static int32_t block_alloc(ilab_backend_t *b)
{
    if (b->n_free == 0)
        return -1;
    int32_t id = b->free_list[--b->n_free];
    memset(&b->pool[id], 0, sizeof b->pool[id]);
    b->pool[id].rc = 1;
    return id;
}

static void block_release(ilab_backend_t *b, int32_t id)
{
    if (--b->pool[id].rc == 0)
        b->free_list[b->n_free++] = id;
}

static sequence *new_sequence(ilab_backend_t *b, ilab_seq_t *out)
{
    for (int i = 0; i < MAX_SEQS; i++) {
        sequence *s = &b->seqs[i];
        if (s->in_use)
            continue;
        s->in_use = 1;
        s->len = 0;
        s->nblocks = 0;
        *out = ((uint64_t)s->generation << 32) | (uint64_t)(i + 1);
        return s;
    }
    return NULL;
}

static ilab_status fb_seq_create(ilab_backend_t *b, ilab_seq_t *seq)
{
    if (!b || !seq)
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_create: NULL argument");
    pthread_mutex_lock(&b->lock);
    ilab_seq_t h;
    sequence *s = new_sequence(b, &h);
    pthread_mutex_unlock(&b->lock);
    if (!s)
        return fail(b, ILAB_OUT_OF_MEMORY, "seq_create: all %d sequence slots are in use", MAX_SEQS);
    *seq = h;
    return ILAB_OK;
}

static ilab_status fb_seq_free(ilab_backend_t *b, ilab_seq_t seq)
{
    if (!b)
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_free: NULL backend");
    pthread_mutex_lock(&b->lock);
    sequence *s = lookup(b, seq);
    if (!s) {
        pthread_mutex_unlock(&b->lock);
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_free: stale or unknown sequence %#llx",
                    (unsigned long long)seq);
    }
    for (int32_t i = 0; i < s->nblocks; i++) {
#ifdef BREAK_FREE_SHARED_LEAK
        if (b->pool[s->blocks[i]].rc > 1)
            continue; /* still used by a fork: "leave it to the other owner" */
#endif
        block_release(b, s->blocks[i]);
    }
    s->nblocks = 0;
    s->len = 0;
    s->in_use = 0;
#ifndef BREAK_HANDLE_REUSE
    s->generation++;
#endif
    pthread_mutex_unlock(&b->lock);
    return ILAB_OK;
}

static ilab_status fb_seq_fork(ilab_backend_t *b, ilab_seq_t parent, ilab_seq_t *child)
{
    if (!b || !child)
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_fork: NULL argument");
    pthread_mutex_lock(&b->lock);
    sequence *p = lookup(b, parent);
    if (!p) {
        pthread_mutex_unlock(&b->lock);
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_fork: stale or unknown parent %#llx",
                    (unsigned long long)parent);
    }
    ilab_seq_t h;
    sequence *c = new_sequence(b, &h);
    if (!c) {
        pthread_mutex_unlock(&b->lock);
#ifdef BREAK_FORK_OOM_STATUS
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_fork: no sequence slot for the child");
#else
        return fail(b, ILAB_OUT_OF_MEMORY, "seq_fork: all %d sequence slots are in use", MAX_SEQS);
#endif
    }
    for (int32_t i = 0; i < p->nblocks; i++) {
        c->blocks[i] = p->blocks[i];
        b->pool[p->blocks[i]].rc++;
    }
    c->nblocks = p->nblocks;
    c->len = p->len;
    pthread_mutex_unlock(&b->lock);
    *child = h;
    return ILAB_OK;
}

static ilab_status fb_seq_truncate(ilab_backend_t *b, ilab_seq_t seq, int32_t n_keep)
{
    if (!b)
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_truncate: NULL backend");
    pthread_mutex_lock(&b->lock);
    sequence *s = lookup(b, seq);
    if (!s) {
        pthread_mutex_unlock(&b->lock);
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_truncate: stale or unknown sequence");
    }
    if (n_keep < 0 || n_keep > s->len) {
        int32_t len = s->len;
        pthread_mutex_unlock(&b->lock);
#ifdef BREAK_TRUNC_NO_MSG
        (void)len;
        return ILAB_INVALID_ARGUMENT;
#else
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_truncate: n_keep %d not in [0, %d]", n_keep, len);
#endif
    }
#ifdef BREAK_TRUNC_FLOOR
    int32_t keep = n_keep / BLOCK;
#else
    int32_t keep = (n_keep + BLOCK - 1) / BLOCK;
#endif
    for (int32_t i = keep; i < s->nblocks; i++)
        block_release(b, s->blocks[i]);
    if (keep < s->nblocks)
        s->nblocks = keep;
#ifdef BREAK_TRUNC_TIDY
    if (n_keep % BLOCK) /* clear the forgotten states of the last kept block */
        memset(&b->pool[s->blocks[keep - 1]].h[n_keep % BLOCK], 0,
               (BLOCK - n_keep % BLOCK) * sizeof(uint64_t));
#endif
    s->len = n_keep;
    pthread_mutex_unlock(&b->lock);
    return ILAB_OK;
}

static ilab_status fb_seq_length(ilab_backend_t *b, ilab_seq_t seq, int32_t *length)
{
    if (!b || !length)
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_length: NULL argument");
    pthread_mutex_lock(&b->lock);
    sequence *s = lookup(b, seq);
    int32_t len = s ? s->len : 0;
    pthread_mutex_unlock(&b->lock);
    if (!s)
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_length: stale or unknown sequence");
    *length = len;
    return ILAB_OK;
}

/* --- evaluation -------------------------------------------------------------- */

static ilab_status check_item(ilab_backend_t *b, const ilab_batch_item_t *it, size_t i)
{
    if (!it)
        return fail(b, ILAB_INVALID_ARGUMENT, "eval: item %zu is NULL", i);
    if (it->struct_size < sizeof *it)
        return fail(b, ILAB_ABI_MISMATCH, "eval: item %zu struct_size %u is smaller than %zu", i,
                    it->struct_size, sizeof *it);
    if (!ilab_struct_tail_is_zero(it, sizeof *it))
        return fail(b, ILAB_ABI_MISMATCH, "eval: ilab_batch_item_t %zu sets members this plugin does not know", i);
    if (it->flags & ~(uint32_t)ILAB_EVAL_ALL_LOGITS)
        return fail(b, ILAB_INVALID_ARGUMENT, "eval: item %zu has unknown flag bits 0x%x", i, it->flags);
    sequence *s = lookup(b, it->seq);
    if (!s)
        return fail(b, ILAB_INVALID_ARGUMENT, "eval: item %zu names a stale or unknown sequence", i);
#ifdef BREAK_NEG_NTOKENS
    if (!it->tokens || it->n_tokens == 0)
#else
    if (!it->tokens || it->n_tokens < 1)
#endif
        return fail(b, ILAB_INVALID_ARGUMENT, "eval: item %zu has no tokens", i);
    for (int32_t t = 0; t < it->n_tokens; t++)
        if (it->tokens[t] < 0 || it->tokens[t] >= VOCAB)
            return fail(b, ILAB_INVALID_ARGUMENT, "eval: item %zu token %d is %d, not in [0, %d)", i, t,
                        it->tokens[t], VOCAB);
#ifdef BREAK_OVERFLOW_PARTIAL
    if (s->len >= MAX_CONTEXT)
#else
    if (it->n_tokens > MAX_CONTEXT - s->len)
#endif
        return fail(b, ILAB_CONTEXT_OVERFLOW, "eval: item %zu: %d + %d positions pass max_context %d", i,
                    s->len, it->n_tokens, MAX_CONTEXT);
    return ILAB_OK;
}

static int blocks_needed(ilab_backend_t *b, const sequence *s, int32_t n)
{
    int32_t end = s->len + n;
    int need = (end + BLOCK - 1) / BLOCK - s->nblocks;
    if (need < 0)
        need = 0;
    if (s->len / BLOCK < s->nblocks && b->pool[s->blocks[s->len / BLOCK]].rc > 1)
        need++;
    return need;
}

/* Makes block `idx` of s writable: allocated, and not shared. */
static void block_writable(ilab_backend_t *b, sequence *s, int32_t idx)
{
    if (idx == s->nblocks) {
        s->blocks[s->nblocks++] = block_alloc(b);
        return;
    }
    int32_t old = s->blocks[idx];
#ifdef BREAK_FORK_COW
    if (b->pool[old].rc > 2) {
#else
    if (b->pool[old].rc > 1) {
#endif
        int32_t nb = block_alloc(b);
        memcpy(b->pool[nb].h, b->pool[old].h, sizeof b->pool[old].h);
        b->pool[old].rc--;
        s->blocks[idx] = nb;
    }
}

static uint64_t *state_at(ilab_backend_t *b, const sequence *s, int32_t pos)
{
    return &b->pool[s->blocks[pos / BLOCK]].h[pos % BLOCK];
}

/* Appends the item's tokens (already checked) and writes its rows. */
static void apply_item(ilab_backend_t *b, const ilab_batch_item_t *it, sequence *s, int32_t base_pos,
                       uint64_t *carry)
{
    (void)base_pos;
    (void)carry;
    uint64_t h = 0;
    for (int32_t t = 0; t < it->n_tokens; t++) {
        int32_t pos = s->len;
        block_writable(b, s, pos / BLOCK);
#ifdef BREAK_BATCH_H_LEAK
        if (t == 0) /* the running state starts at the model's initial state once per batch */
            h = pos ? *state_at(b, s, pos - 1) : *carry;
#else
        if (t == 0)
            h = pos ? *state_at(b, s, pos - 1) : state0(b->seed);
#endif
#ifdef BREAK_DECODE_BOUNDARY
        if (it->n_tokens == 1) /* decode fast path: reread the previous state from the cache */
            h = pos ? b->pool[s->blocks[pos / BLOCK]].h[(pos - 1) % BLOCK] : state0(b->seed);
#endif
        int32_t mpos = pos;
#ifdef BREAK_CHUNK_POS
        if (it->n_tokens > 1)
            mpos = t; /* prefill kernel: positions of the chunk */
#endif
#ifdef BREAK_BATCH_POS
        mpos = base_pos + t;
#endif
        h = step(h, it->tokens[t], mpos);
#ifdef BREAK_BATCH_H_LEAK
        *carry = h;
#endif
        *state_at(b, s, pos) = h;
        s->len++;
        int all = !!(it->flags & ILAB_EVAL_ALL_LOGITS);
        int last = t == it->n_tokens - 1;
#ifdef BREAK_NULL_LOGITS
        if (!it->logits)
            return; /* nothing to compute */
#endif
#ifdef BREAK_ALLROWS_SHIFT
        if (it->logits && all && t + 1 < it->n_tokens) /* row t+1 */
            logits_of(h, it->logits + (size_t)(t + 1) * VOCAB);
        if (it->logits && all && t == 0)
            logits_of(s->len >= 2 ? *state_at(b, s, s->len - 2) : state0(b->seed), it->logits);
        if (it->logits && !all && last)
            logits_of(h, it->logits);
        continue;
#endif
        if (it->logits && (all || last)) {
#ifdef BREAK_ROW_OVERRUN
            float *row = it->logits + (size_t)t * VOCAB;
#else
            float *row = it->logits + (all ? (size_t)t * VOCAB : 0);
#endif
            logits_of(h, b->rowbuf);
            memcpy(row, b->rowbuf, sizeof b->rowbuf);
        }
    }
}

static ilab_status fb_eval(ilab_backend_t *b, const ilab_batch_item_t *const *items, size_t n_items)
{
#ifdef BREAK_MAXBATCH_OFF1
    if (!b || !items || n_items == 0 || n_items >= MAX_BATCH)
#else
    if (!b || !items || n_items == 0 || n_items > MAX_BATCH)
#endif
        return fail(b, ILAB_INVALID_ARGUMENT, "eval: need 1..%d items and a non-NULL array, got %zu",
                    MAX_BATCH, n_items);
    pthread_mutex_lock(&b->lock);
    int need = 0;
    uint64_t carry = state0(b->seed);
    for (size_t i = 0; i < n_items; i++) {
        ilab_status st = check_item(b, items[i], i);
        if (st != ILAB_OK) {
            pthread_mutex_unlock(&b->lock);
            return st;
        }
#ifndef BREAK_DUP_SEQ
        for (size_t j = 0; j < i; j++)
            if (items[j]->seq == items[i]->seq) {
                pthread_mutex_unlock(&b->lock);
                return fail(b, ILAB_INVALID_ARGUMENT, "eval: items %zu and %zu name one sequence", j, i);
            }
#endif
        need += blocks_needed(b, lookup(b, items[i]->seq), items[i]->n_tokens);
#ifdef BREAK_ALL_OR_NOTHING
        /* apply as we go: items are independent */
        if (need <= b->n_free)
            apply_item(b, items[i], lookup(b, items[i]->seq), lookup(b, items[i]->seq)->len, &carry);
#endif
    }
    if (need > b->n_free) {
        pthread_mutex_unlock(&b->lock);
        return fail(b, ILAB_OUT_OF_MEMORY, "eval: %d cache blocks needed, %d free", need, b->n_free);
    }
#ifndef BREAK_ALL_OR_NOTHING
    int32_t base0 = lookup(b, items[0]->seq)->len;
    for (size_t i = 0; i < n_items; i++) {
        sequence *s = lookup(b, items[i]->seq);
        int32_t base = s->len;
#ifdef BREAK_BATCH_POS
        base = base0; /* positions of the batch */
#endif
        (void)base0;
#ifdef BREAK_EVAL_EARLY_UNLOCK
        if (i == 0) /* every block is reserved: the compute needs no lock */
            pthread_mutex_unlock(&b->lock);
#endif
        apply_item(b, items[i], s, base, &carry);
    }
#endif
#ifndef BREAK_EVAL_EARLY_UNLOCK
    pthread_mutex_unlock(&b->lock);
#endif
    return ILAB_OK;
}

/* --- generation -------------------------------------------------------------- */

static uint64_t rng_next(uint64_t *s)
{
    *s += 0x9e3779b97f4a7c15ull;
    return mix(*s);
}

static double rng_uniform(uint64_t *s) { return (double)(rng_next(s) >> 11) / 9007199254740992.0; }

typedef struct cand {
    int32_t id;
    float z;
} cand;

static int cand_cmp(const void *pa, const void *pb)
{
    const cand *a = pa, *b = pb;
    if (a->z != b->z)
        return a->z > b->z ? -1 : 1;
#ifdef BREAK_TOPP_TIES
    return b->id - a->id;
#else
    return a->id - b->id;
#endif
}

typedef struct gen_params {
    float T, top_p, min_p, rep, pres, freq;
    int32_t top_k;
} gen_params;

/* Chooses the next token from raw logits z (modified in place). */
static int32_t sample(const gen_params *p, float *z, const uint8_t *seen, const int32_t *counts,
                      uint64_t *rng)
{
    for (int v = 0; v < VOCAB; v++) {
        if (p->rep != 1.0f && seen[v])
            z[v] = z[v] > 0 ? z[v] / p->rep : z[v] * p->rep;
        if (counts[v])
#ifdef BREAK_PRESENCE_AS_COUNT
            z[v] = z[v] - (p->pres * (float)counts[v] + p->freq * (float)counts[v]);
#else
            z[v] = z[v] - (p->pres * (counts[v] > 0 ? 1.0f : 0.0f) + p->freq * (float)counts[v]);
#endif
    }
    if (p->T == 0.0f) {
        int32_t best = 0;
        for (int v = 1; v < VOCAB; v++)
#ifdef BREAK_GREEDY_TIE
            if (z[v] >= z[best])
#else
            if (z[v] > z[best])
#endif
                best = v;
        return best;
    }
    cand c[VOCAB];
    /* (z - max) / T in double: a temperature as small as 1e-45 must not
     * overflow to inf - inf = NaN (the contract's SMP-5 since issue 23). */
    float zmax = z[0];
    for (int v = 1; v < VOCAB; v++)
        zmax = z[v] > zmax ? z[v] : zmax;
    for (int v = 0; v < VOCAB; v++) {
#ifdef BREAK_TEMP_TOPK_ONLY
        c[v].z = z[v];
#else
        c[v].z = (float)(((double)z[v] - (double)zmax) / (double)p->T);
#endif
        c[v].id = v;
    }
    qsort(c, VOCAB, sizeof c[0], cand_cmp);
    int n = VOCAB;
    if (p->top_k > 0 && p->top_k < n) {
        n = p->top_k;
#ifdef BREAK_TEMP_TOPK_ONLY
        for (int i = 0; i < n; i++)
            c[i].z /= p->T;
#endif
    }
    double pr[VOCAB], sum = 0;
    for (int i = 0; i < n; i++)
        sum += (pr[i] = exp((double)c[i].z - (double)c[0].z));
    for (int i = 0; i < n; i++)
        pr[i] /= sum;
    if (p->top_p < 1.0f) {
        double cum = 0;
        int keep = 0;
        while (keep < n) {
            cum += pr[keep++];
            if (cum >= (double)p->top_p)
                break;
        }
        n = keep;
        sum = 0;
        for (int i = 0; i < n; i++)
            sum += pr[i];
        for (int i = 0; i < n; i++)
            pr[i] /= sum;
    }
    if (p->min_p > 0.0f) {
        double thr = (double)p->min_p * pr[0];
        int keep = 0;
        for (int i = 0; i < n; i++)
#ifdef BREAK_MINP_STRICT
            if (pr[i] > thr)
#else
            if (pr[i] >= thr)
#endif
                keep = i + 1;
        if (keep < 1)
            keep = 1;
        n = keep;
        sum = 0;
        for (int i = 0; i < n; i++)
            sum += pr[i];
        for (int i = 0; i < n; i++)
            pr[i] /= sum;
    }
    double u = rng_uniform(rng), cum = 0;
    for (int i = 0; i < n; i++) {
        cum += pr[i];
        if (u < cum)
            return c[i].id;
    }
    return c[n - 1].id;
}

/* Length of the prefix of s[0..n) that ends on no incomplete UTF-8 code point. */
static size_t utf8_complete(const char *s, size_t n)
{
    for (size_t k = 1; k <= 3 && k <= n; k++) {
        unsigned char c = (unsigned char)s[n - k];
        if ((c & 0xc0) == 0x80)
            continue;
        size_t need = (c >= 0xf0 && c <= 0xf4) ? 4 : (c >= 0xe0 && c <= 0xef) ? 3 : (c >= 0xc2 && c <= 0xdf) ? 2 : 1;
        return need > k ? n - k : n;
    }
    return n;
}

typedef struct stream {
    ilab_event_fn fn;
    void *ud;
    uint64_t id;
    int stopped_by_callback;
} stream;

static int emit(stream *st, ilab_event_t *ev)
{
    ev->struct_size = sizeof *ev;
    ev->request_id = st->id;
    return st->fn(st->ud, ev);
}

static ilab_status gen_error(ilab_backend_t *b, stream *st, ilab_status status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static ilab_status gen_error(ilab_backend_t *b, stream *st, ilab_status status, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
#ifndef BREAK_GEN_NO_LASTERR
    fail(b, status, "%s", msg);
#endif
    ilab_event_t ev;
    memset(&ev, 0, sizeof ev);
    ev.type = ILAB_EVENT_ERROR;
    ev.finish_reason = ILAB_FINISH_ERROR;
    ev.status = status;
    ev.message = msg;
    emit(st, &ev);
    return status;
}

static int in_range(float x, float lo, float hi) { return isfinite(x) && x >= lo && x <= hi; }

static ilab_status check_request(ilab_backend_t *b, stream *st, const ilab_generate_request_t *r,
                                 gen_params *p)
{
#ifdef BREAK_REQ_SHORT
    if (r->struct_size < offsetof(ilab_generate_request_t, stop))
#else
    if (r->struct_size < sizeof *r)
#endif
        return gen_error(b, st, ILAB_ABI_MISMATCH, "generate: request struct_size %u is smaller than %zu",
                         r->struct_size, sizeof *r);
    if (!ilab_struct_tail_is_zero(r, sizeof *r))
        return gen_error(b, st, ILAB_ABI_MISMATCH,
                         "generate: ilab_generate_request_t sets members this plugin does not know");
    const ilab_sampling_t *s = r->sampling;
    if (!s)
        return gen_error(b, st, ILAB_INVALID_ARGUMENT, "generate: sampling is NULL");
    if (s->struct_size < sizeof *s)
        return gen_error(b, st, ILAB_ABI_MISMATCH, "generate: sampling struct_size %u is smaller than %zu",
                         s->struct_size, sizeof *s);
#ifndef BREAK_SAMPLING_TAIL
    if (!ilab_struct_tail_is_zero(s, sizeof *s))
        return gen_error(b, st, ILAB_ABI_MISMATCH,
                         "generate: ilab_sampling_t sets members this plugin does not know");
#endif
    if (r->n_prompt_tokens == 0 || !r->prompt_tokens)
        return gen_error(b, st, ILAB_INVALID_ARGUMENT, "generate: empty prompt");
    if (r->n_prompt_tokens > MAX_CONTEXT)
        return gen_error(b, st, ILAB_CONTEXT_OVERFLOW, "generate: prompt of %zu tokens passes max_context %d",
                         r->n_prompt_tokens, MAX_CONTEXT);
    for (size_t i = 0; i < r->n_prompt_tokens; i++)
        if (r->prompt_tokens[i] < 0 || r->prompt_tokens[i] >= VOCAB)
            return gen_error(b, st, ILAB_INVALID_ARGUMENT, "generate: prompt token %zu is %d, not in [0, %d)",
                             i, r->prompt_tokens[i], VOCAB);
    if (r->max_tokens < 1)
        return gen_error(b, st, ILAB_INVALID_ARGUMENT, "generate: max_tokens %d < 1", r->max_tokens);
#ifdef BREAK_TOPLP_NEG
    if (r->top_logprobs > TOPK_MAX)
#else
    if (r->top_logprobs < 0 || r->top_logprobs > TOPK_MAX)
#endif
        return gen_error(b, st, ILAB_INVALID_ARGUMENT, "generate: top_logprobs %d not in [0, %d]",
                         r->top_logprobs, TOPK_MAX);
    if (r->n_stop && !r->stop)
        return gen_error(b, st, ILAB_INVALID_ARGUMENT, "generate: stop is NULL");
    for (size_t i = 0; i < r->n_stop; i++)
        if (!r->stop[i] || !r->stop[i][0])
            return gen_error(b, st, ILAB_INVALID_ARGUMENT, "generate: stop string %zu is NULL or empty", i);
    if (r->n_stop_token_ids && !r->stop_token_ids)
        return gen_error(b, st, ILAB_INVALID_ARGUMENT, "generate: stop_token_ids is NULL");
    for (size_t i = 0; i < r->n_stop_token_ids; i++)
        if (r->stop_token_ids[i] < 0 || r->stop_token_ids[i] >= VOCAB)
            return gen_error(b, st, ILAB_INVALID_ARGUMENT, "generate: stop token id %d not in [0, %d)",
                             r->stop_token_ids[i], VOCAB);
#ifdef BREAK_NEG_TEMP
    if (!isfinite(s->temperature))
#else
    if (!isfinite(s->temperature) || s->temperature < 0)
#endif
        return gen_error(b, st, ILAB_INVALID_ARGUMENT, "generate: temperature %g out of range", s->temperature);
    if (s->top_k < 0)
        return gen_error(b, st, ILAB_INVALID_ARGUMENT, "generate: top_k %d < 0", s->top_k);
    if (!in_range(s->top_p, 0, 1) || s->top_p == 0)
        return gen_error(b, st, ILAB_INVALID_ARGUMENT, "generate: top_p %g not in (0, 1]", s->top_p);
    if (!in_range(s->min_p, 0, 1))
        return gen_error(b, st, ILAB_INVALID_ARGUMENT, "generate: min_p %g not in [0, 1]", s->min_p);
    if (!isfinite(s->repetition_penalty) || s->repetition_penalty <= 0)
        return gen_error(b, st, ILAB_INVALID_ARGUMENT, "generate: repetition_penalty %g not > 0",
                         s->repetition_penalty);
    if (!in_range(s->presence_penalty, -2, 2))
        return gen_error(b, st, ILAB_INVALID_ARGUMENT, "generate: presence_penalty %g not in [-2, 2]",
                         s->presence_penalty);
    if (!in_range(s->frequency_penalty, -2, 2))
        return gen_error(b, st, ILAB_INVALID_ARGUMENT, "generate: frequency_penalty %g not in [-2, 2]",
                         s->frequency_penalty);
    p->T = s->temperature;
    p->top_k = s->top_k;
    p->top_p = s->top_p;
    p->min_p = s->min_p;
    p->rep = s->repetition_penalty;
    p->pres = s->presence_penalty;
    p->freq = s->frequency_penalty;
    return ILAB_OK;
}

/* Where the stream must cut: the end e (old < e <= n) of the first occurrence
 * of a stop string ending after `old`; returns the cut (start of the longest
 * occurrence ending at e) or -1. */
static long find_stop(const ilab_generate_request_t *r, const char *out, size_t old, size_t n)
{
    for (size_t e = old + 1; e <= n; e++) {
        long cut = -1;
        for (size_t i = 0; i < r->n_stop; i++) {
            size_t ls = strlen(r->stop[i]);
#ifdef BREAK_STOP_ACROSS
            if (ls > e || e - ls < old) /* inside the new piece */
#else
            if (ls > e)
#endif
                continue;
            if (!memcmp(out + e - ls, r->stop[i], ls) && (cut < 0 || (long)(e - ls) < cut))
                cut = (long)(e - ls);
        }
        if (cut >= 0)
            return cut;
    }
    return -1;
}

/* How many trailing bytes of out[0..n) could still begin a stop string. */
static size_t stop_holdback(const ilab_generate_request_t *r, const char *out, size_t n)
{
    size_t best = 0;
    for (size_t i = 0; i < r->n_stop; i++) {
        size_t ls = strlen(r->stop[i]);
        for (size_t k = ls - 1; k > best; k--)
            if (k <= n && !memcmp(out + n - k, r->stop[i], k)) {
                best = k;
                break;
            }
    }
    return best;
}

static void top_list(const float *lp, int k, ilab_logprob_t *out)
{
    /* selection of the k largest, ties by lower id */
    uint8_t used[VOCAB];
    memset(used, 0, sizeof used);
    for (int i = 0; i < k; i++) {
        int best = -1;
        for (int v = 0; v < VOCAB; v++)
            if (!used[v] && (best < 0 || lp[v] > lp[best]))
                best = v;
        used[best] = 1;
        out[i].token = best;
        out[i].logprob = lp[best];
    }
}

static ilab_status fb_generate(ilab_backend_t *b, const ilab_generate_request_t *r,
                               ilab_event_fn on_event, void *user_data)
{
    if (!b || !r || !on_event)
        return fail(b, ILAB_INVALID_ARGUMENT, "generate: NULL backend, request or on_event");
#ifdef BREAK_WEAK_HOOK
    if (ilab_trace_hook)
        ilab_trace_hook("generate");
#endif
    stream st = {.fn = on_event, .ud = user_data, .id = r->request_id};
    gen_params p = {0};
    ilab_status status = check_request(b, &st, r, &p);
    if (status != ILAB_OK)
        return status;

    running run = {.id = r->request_id};
    atomic_init(&run.cancelled, 0);
    pthread_mutex_lock(&b->run_lock);
    run.next = b->runs;
    b->runs = &run;
#ifdef BREAK_CANCEL_PREARM
    for (int i = 0; i < b->n_pending_cancel; i++)
        if (b->pending_cancel[i] == r->request_id)
            atomic_store(&run.cancelled, 1);
#endif
    pthread_mutex_unlock(&b->run_lock);

    uint64_t rng = r->sampling->seed ^ 0xa0761d6478bd642full;
#ifdef BREAK_SEED_SHARED
    pthread_mutex_lock(&b->run_lock);
    if (!b->rng_seeded) {
        b->rng = rng;
        b->rng_seeded = 1;
    }
    pthread_mutex_unlock(&b->run_lock);
#endif
    uint8_t seen[VOCAB];
    int32_t counts[VOCAB];
    memset(seen, 0, sizeof seen);
    memset(counts, 0, sizeof counts);
    uint64_t h = state0(b->seed);
    int32_t len = 0;
    for (size_t i = 0; i < r->n_prompt_tokens; i++) {
        h = step(h, r->prompt_tokens[i], len++);
        seen[r->prompt_tokens[i]] = 1;
    }
    char out[2 * MAX_CONTEXT + 8];
    size_t n_out = 0, emitted = 0;
    uint32_t n_tok = 0, n_appended = 0;
    int32_t prev = r->prompt_tokens[r->n_prompt_tokens - 1];
    ilab_finish_reason reason = ILAB_FINISH_NONE;
    float raw[VOCAB], z[VOCAB], lp[VOCAB];
    ilab_logprob_t top[TOPK_MAX];
    for (;;) {
#ifdef BREAK_CANCEL_LATE
        if (n_tok % 8 == 0 && atomic_load(&run.cancelled)) {
#else
        if (atomic_load(&run.cancelled)) {
#endif
            reason = ILAB_FINISH_CANCELLED;
            break;
        }
#ifdef BREAK_SHARED_SCRATCH
        logits_of(h, b->gen_scratch);
        memcpy(raw, b->gen_scratch, sizeof raw);
#else
        logits_of(h, raw);
#endif
        double mx = raw[0], sum = 0;
        for (int v = 1; v < VOCAB; v++)
            if (raw[v] > mx)
                mx = raw[v];
        for (int v = 0; v < VOCAB; v++)
            sum += exp((double)raw[v] - mx);
        double lse = mx + log(sum);
        for (int v = 0; v < VOCAB; v++)
            lp[v] = (float)((double)raw[v] - lse);
        memcpy(z, raw, sizeof z);
#ifdef BREAK_REP_OUTPUT_ONLY
        uint8_t out_seen[VOCAB];
        for (int v = 0; v < VOCAB; v++)
            out_seen[v] = counts[v] > 0;
        int32_t tok = sample(&p, z, out_seen, counts, &rng);
#elif defined(BREAK_FREQ_PROMPT)
        int32_t pc[VOCAB];
        memcpy(pc, counts, sizeof pc);
        for (size_t i = 0; i < r->n_prompt_tokens; i++)
            pc[r->prompt_tokens[i]]++;
        int32_t tok = sample(&p, z, seen, pc, &rng);
#elif defined(BREAK_SEED_SHARED)
        pthread_mutex_lock(&b->run_lock);
        int32_t tok = sample(&p, z, seen, counts, &b->rng);
        pthread_mutex_unlock(&b->run_lock);
#else
        int32_t tok = sample(&p, z, seen, counts, &rng);
#endif
        int is_stop_id = 0;
        for (size_t i = 0; i < r->n_stop_token_ids; i++)
            if (r->stop_token_ids[i] == tok)
                is_stop_id = 1;
#ifdef BREAK_STOPTOKEN_EMITTED
        if (tok == EOS && !r->ignore_eos) {
#else
        if ((tok == EOS && !r->ignore_eos) || is_stop_id) {
#endif
            reason = ILAB_FINISH_STOP;
            break;
        }
        /* emit tok */
        n_tok++;
        char piece[2];
        size_t old = n_out, pl = token_text(tok, piece);
        memcpy(out + n_out, piece, pl);
        n_out += pl;
        int last = (int32_t)n_tok >= r->max_tokens || len >= MAX_CONTEXT;
        long cut = find_stop(r, out, old, n_out);
        size_t upto;
        if (cut >= 0)
            upto = (size_t)cut;
#ifndef BREAK_LAST_HOLDBACK
        else if (last)
            upto = n_out;
#endif
        else {
            upto = n_out - stop_holdback(r, out, n_out);
#ifndef BREAK_UTF8_SPLIT
            upto = utf8_complete(out, upto);
#endif
        }
        if (upto < emitted)
            upto = emitted;
        ilab_event_t ev;
        memset(&ev, 0, sizeof ev);
        ev.type = ILAB_EVENT_TOKEN;
        ev.token = tok;
        ev.text = out + emitted;
        ev.text_len = upto - emitted;
        ev.logprob = lp[tok];
#ifdef BREAK_LOGPROB_TEMPERED
        if (p.T > 0) {
            double m2 = raw[0] / p.T, s2 = 0;
            for (int v = 1; v < VOCAB; v++)
                if (raw[v] / p.T > m2)
                    m2 = raw[v] / p.T;
            for (int v = 0; v < VOCAB; v++)
                s2 += exp((double)raw[v] / p.T - m2);
            ev.logprob = (float)((double)raw[tok] / p.T - m2 - log(s2));
        }
#endif
        int ntop = r->top_logprobs < VOCAB ? r->top_logprobs : VOCAB;
#ifdef BREAK_TOPK_COUNT
        if (ntop > TOPK_MAX - 1)
            ntop = TOPK_MAX - 1;
#endif
        if (ntop > 0) {
            top_list(lp, ntop, top);
            ev.top_logprobs = top;
            ev.n_top_logprobs = (uint32_t)ntop;
        }
#ifdef BREAK_STOP_NOT_EMITTED
        if (cut >= 0) {
            n_tok--;
            n_out = (size_t)cut;
            reason = ILAB_FINISH_STOP;
            break;
        }
#endif
        int cb = emit(&st, &ev);
        emitted = upto;
        if (cut >= 0) {
            reason = ILAB_FINISH_STOP;
            n_out = emitted;
            break;
        }
        if (last) {
            reason = ILAB_FINISH_LENGTH;
            break;
        }
#ifdef BREAK_STOPTOKEN_EMITTED
        if (is_stop_id) { /* like a stop string: emitted, then stop */
            reason = ILAB_FINISH_STOP;
            break;
        }
#endif
        if (cb) {
            reason = ILAB_FINISH_CANCELLED;
            st.stopped_by_callback = 1;
            break;
        }
        /* append */
        h = step(h, tok, len++);
        n_appended++;
        seen[tok] = 1;
        counts[tok]++;
        prev = tok;
#ifdef BREAK_CTX_FULL_ERROR
        if (len >= MAX_CONTEXT && (int32_t)n_tok < r->max_tokens) {
            pthread_mutex_lock(&b->run_lock);
            for (running **pp = &b->runs; *pp; pp = &(*pp)->next)
                if (*pp == &run) {
                    *pp = run.next;
                    break;
                }
            pthread_mutex_unlock(&b->run_lock);
            return gen_error(b, &st, ILAB_CONTEXT_OVERFLOW, "generate: context full after %u tokens", n_tok);
        }
#endif
    }
    (void)prev;

    pthread_mutex_lock(&b->run_lock);
    for (running **pp = &b->runs; *pp; pp = &(*pp)->next)
        if (*pp == &run) {
            *pp = run.next;
            break;
        }
    pthread_mutex_unlock(&b->run_lock);

    ilab_event_t ev;
    memset(&ev, 0, sizeof ev);
    ev.type = ILAB_EVENT_FINISH;
    ev.finish_reason = reason;
    ev.text = out + emitted;
    ev.text_len = n_out - emitted;
#ifdef BREAK_FINISH_TEXT_LOST
    if (reason == ILAB_FINISH_STOP)
        ev.text_len = 0;
#endif
    ev.prompt_tokens = (uint32_t)r->n_prompt_tokens;
#ifdef BREAK_USAGE_APPENDED
    ev.completion_tokens = n_appended;
#else
    ev.completion_tokens = n_tok;
#endif
    (void)n_appended;
    emit(&st, &ev);
#ifdef BREAK_CB_STOP_STATUS
    if (st.stopped_by_callback)
        return fail(b, ILAB_CANCELLED, "generate: the callback cancelled the stream");
#endif
    return ILAB_OK;
}

static ilab_status fb_cancel(ilab_backend_t *b, uint64_t request_id)
{
    if (!b)
        return fail(b, ILAB_INVALID_ARGUMENT, "cancel: NULL backend");
    pthread_mutex_lock(&b->run_lock);
    int found = 0;
    for (running *r = b->runs; r; r = r->next)
        if (r->id == request_id) {
            atomic_store(&r->cancelled, 1);
            found = 1;
        }
#ifdef BREAK_CANCEL_PREARM
    if (!found && b->n_pending_cancel < 16) /* it may be about to start */
        b->pending_cancel[b->n_pending_cancel++] = request_id;
#endif
    (void)found;
    pthread_mutex_unlock(&b->run_lock);
    return ILAB_OK;
}

static ilab_status fb_cache_stats(ilab_backend_t *b, ilab_cache_stats_t *stats)
{
#ifdef BREAK_STATS_UNDECLARED
    if (!b || !stats)
        return fail(b, ILAB_INVALID_ARGUMENT, "cache_stats: NULL argument");
    if (stats->struct_size < sizeof *stats)
        return fail(b, ILAB_ABI_MISMATCH, "cache_stats: struct_size too small");
    pthread_mutex_lock(&b->lock);
    stats->block_size = BLOCK;
    stats->total_positions = (int64_t)POOL * BLOCK;
    stats->free_positions = (int64_t)b->n_free * BLOCK;
    pthread_mutex_unlock(&b->lock);
    return ILAB_OK;
#else
    (void)stats;
    return fail(b, ILAB_UNSUPPORTED, "cache_stats: capability 'cache.stats' not declared");
#endif
}

static const ilab_backend_api_t api = {
    .struct_size = sizeof(ilab_backend_api_t),
    .probe = fb_probe,
    .create = fb_create,
    .destroy = fb_destroy,
    .last_error = fb_last_error,
    .model_info = fb_model_info,
    .tokenize = fb_tokenize,
    .detokenize = fb_detokenize,
    .token_piece = fb_token_piece,
    .seq_create = fb_seq_create,
    .seq_free = fb_seq_free,
    .seq_fork = fb_seq_fork,
    .seq_truncate = fb_seq_truncate,
    .seq_length = fb_seq_length,
    .eval = fb_eval,
    .generate = fb_generate,
    .cancel = fb_cancel,
    .cache_stats = fb_cache_stats,
};

ILAB_PLUGIN_EXPORT const ilab_plugin_entry_t ilab_plugin_entry = {
    .struct_size = sizeof(ilab_plugin_entry_t),
    .abi_major = ILAB_ABI_MAJOR,
    .abi_minor = 0,
    .name = PLUGIN_NAME,
    .version = PLUGIN_VERSION,
    .manifest_yaml = manifest,
    .backend = &api,
};
