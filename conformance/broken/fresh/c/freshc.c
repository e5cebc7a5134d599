/* freshc — a toy inferlab backend (setC flavour).
 *
 * Capabilities: byte tokenizer with a few merges, full logits from a paged,
 * reference-counted KV cache (fork, truncate, stats), backend sampling through
 * generate() with cancel. thread_safety: none. max_context 32.
 *
 * Each variant is this file compiled with -DBREAK_<NAME>: one bug each. */
#define _GNU_SOURCE
#include <inferlab/inferlab.h>

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PLUGIN_NAME "freshc"
#define PLUGIN_VERSION "0.3.0"

#define NMERGE 42
#define BOS 256
#define EOS 257
#define VOCAB (258 + NMERGE)
#define MAX_CONTEXT 32
#define BLK 4
#define NBLK 40
#define MAX_SEQS 12
#define MAX_BATCH 4
#define TOPK_MAX 5
#define BT_LEN (MAX_CONTEXT / BLK)

static const char manifest[] =
    "name: " PLUGIN_NAME "\n"
    "version: " PLUGIN_VERSION "\n"
    "abi: 1.1\n"
    "description: >-\n"
    "  Toy chained-hash language model with a paged, reference-counted KV cache\n"
    "  and its own sampler (setC of the fresh-author exercise).\n"
    "capabilities:\n"
    "  tokenizer: true\n"
    "  logits: full\n"
    "  topk_max: 5\n"
    "  sampling: backend\n"
    "  cache: {fork: true, truncate: true, stats: true}\n"
    "  batching: {max_batch: 4}\n"
    "  streaming: true\n"
    "  cancel: true\n"
    "  max_context: 32\n"
    "  thread_safety: none\n"
    "config:\n"
    "  seed:\n"
    "    type: int\n"
    "    default: 0\n"
    "    description: Seed of the toy model (>= 0); each seed is a different model.\n"
    "  device:\n"
    "    type: string\n"
    "    default: cpu\n"
    "    description: Where to run; only cpu exists in this build (gpu is unavailable).\n";

static const char *const merges[NMERGE] = {
    "th", "he", "in", "er", "an", "re", "on", "at", "en", "nd", "ti", "es", "or", "te",
    "of", "ed", "is", "it", "al", "ar", "st", "to", "nt", "ng", "se", "ha", "as", "ou",
    "io", "le", "ve", "co", "me", "de", "hi", "ri", "ro", "ic", "ne", "ea", "ra", "ce"};

/* merge lookup table: pair (a,b) -> id or 0; shared by all instances */
static int16_t merge_table_storage[256 * 256];
#ifdef BREAK_TOK_SHARED_TABLE
static int16_t *merge_table; /* built on create, "freed" on destroy */
#else
static int16_t *merge_table = merge_table_storage;
static pthread_once_t merge_once = PTHREAD_ONCE_INIT;
#endif

static void build_merge_table(void)
{
    memset(merge_table_storage, 0, sizeof merge_table_storage);
    for (int i = 0; i < NMERGE; i++)
        merge_table_storage[(unsigned char)merges[i][0] * 256 + (unsigned char)merges[i][1]] =
            (int16_t)(258 + i);
}

typedef struct kvpos {
    uint64_t h;
    int32_t tok;
} kvpos;

typedef struct block {
    int ref;
    kvpos p[BLK];
} block;

typedef struct sequence {
    uint32_t generation;
    int in_use;
    int32_t len;
    int *bt; /* BT_LEN block indices while in use */
} sequence;

struct ilab_backend {
    const ilab_host_t *host;
    uint64_t seed;
    block *blocks;
    int free_list[NBLK];
    int n_free;
    sequence seqs[MAX_SEQS];
    ilab_last_error_t error;
    _Atomic uint64_t running_id;
    _Atomic int running;
    _Atomic int cancel_req;
    pthread_mutex_t mu; /* used only by some variants */
};

#ifdef BREAK_STR_CANCEL_GLOBAL
static _Atomic uint64_t g_running_id;
static _Atomic int g_running, g_cancel;
#define RUN_ID g_running_id
#define RUNNING g_running
#define CANCEL_REQ g_cancel
#else
#define RUN_ID b->running_id
#define RUNNING b->running
#define CANCEL_REQ b->cancel_req
#endif
#ifdef BREAK_ABI_INSTANCE_TABLE
static ilab_backend_t *registry[64]; /* live instances, for diagnostics */
#endif
#ifdef BREAK_STR_CANCEL_EARLY
static _Atomic uint64_t pending_cancel = UINT64_MAX;
#endif

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

static uint64_t base_state(uint64_t seed) { return mix(seed ^ 0x5eed5eed12345678ull); }

/* The state after `tok` at position `pos`, given the state before it: a chain,
 * so it depends on every earlier token and on the position. */
static uint64_t step_state(uint64_t prev, int32_t tok, int32_t pos)
{
    return mix(prev ^ mix((uint64_t)(uint32_t)tok * 0x9e3779b97f4a7c15ull + (uint64_t)pos * 0x632be59bd9b4e019ull + 1));
}

static void state_logits(uint64_t h, float *out)
{
    for (int v = 0; v < VOCAB; v++) {
        uint64_t r = mix(h ^ ((uint64_t)v * 0xd6e8feb86659fd93ull));
        float logit = (float)(r >> 40) / (float)(1u << 24) * 8.0f - 4.0f;
        if ((v >= 'a' && v <= 'z') || v == ' ')
            logit += 1.0f;
        if (v >= 258)
            logit += 0.5f;
#ifdef BREAK_LOG_MASK_INF
        if (v == BOS)
            logit = -INFINITY; /* BOS can never follow: mask it */
#else
        if (v == BOS)
            logit -= 4.0f;
#endif
        out[v] = logit;
    }
}

/* --- config, probe, lifecycle ------------------------------------------------ */

#define REASON_GPU PLUGIN_NAME ": device 'gpu' is not available: this build runs on the CPU only"
#define REASON_OK PLUGIN_NAME ": toy chained-hash model, runs on the CPU, always available"

/* 0 ok, 1 invalid (msg), 2 unavailable (msg) */
static int parse_config(const ilab_config_entry_t *config, size_t n, uint64_t *seed, char *msg,
                        size_t cap)
{
    *seed = 0;
    int gpu = 0;
    if (n && !config) {
        snprintf(msg, cap, PLUGIN_NAME ": config is NULL");
        return 1;
    }
    for (size_t i = 0; i < n; i++) {
        const char *k = config[i].key, *v = config[i].value;
        if (!k || !v) {
            snprintf(msg, cap, PLUGIN_NAME ": config entry %zu has a NULL key or value", i);
            return 1;
        }
        if (!strcmp(k, "seed")) {
            char *end = NULL;
            long long x = strtoll(v, &end, 10);
            if (!*v || *end || x < 0) {
#ifdef BREAK_ERR_CFG_UNAVAIL
                snprintf(msg, cap, PLUGIN_NAME ": cannot load the model for seed '%s'", v);
                return 2;
#else
                snprintf(msg, cap, PLUGIN_NAME ": config key 'seed' must be an int >= 0, got '%s'", v);
                return 1;
#endif
            }
            *seed = (uint64_t)x;
        } else if (!strcmp(k, "device")) {
            if (!strcmp(v, "gpu"))
                gpu = 1;
            else if (strcmp(v, "cpu")) {
                snprintf(msg, cap, PLUGIN_NAME ": config key 'device' must be cpu or gpu, got '%s'", v);
                return 1;
            }
        } else {
            snprintf(msg, cap, PLUGIN_NAME ": unknown config key '%s'", k);
            return 1;
        }
    }
    if (gpu) {
#ifdef BREAK_PRB_SLOW
        struct timespec ts = {3, 0}; /* wait for the GPU driver to answer */
        nanosleep(&ts, NULL);
#endif
        snprintf(msg, cap, "%s", REASON_GPU);
        return 2;
    }
    return 0;
}

static void put_reason(char *buf, size_t cap, const char *msg)
{
    if (!buf || !cap)
        return;
#ifdef BREAK_PRB_REASON_NUL
    strncpy(buf, msg, cap); /* fills the buffer; NUL only when msg is short */
#else
    snprintf(buf, cap, "%s", msg);
#endif
}

#ifdef BREAK_PRB_MEMO
static int memo_valid;
static ilab_status memo_status;
static char memo_reason[256];
#endif

static ilab_status fc_probe(const ilab_host_t *host, const ilab_config_entry_t *config,
                            size_t n_config, char *reason, size_t reason_cap)
{
    (void)host;
#ifdef BREAK_PRB_MEMO
    if (memo_valid) { /* the answer cannot change while we are loaded */
        put_reason(reason, reason_cap, memo_reason);
        return memo_status;
    }
#endif
    char msg[512];
    uint64_t seed;
    int r = parse_config(config, n_config, &seed, msg, sizeof msg);
    ilab_status st = r == 0 ? ILAB_OK : r == 1 ? ILAB_INVALID_ARGUMENT : ILAB_UNAVAILABLE;
    if (r == 0)
        snprintf(msg, sizeof msg, "%s", REASON_OK);
#ifdef BREAK_PRB_MEMO
    memo_valid = 1;
    memo_status = st;
    snprintf(memo_reason, sizeof memo_reason, "%s", msg);
#endif
    put_reason(reason, reason_cap, msg);
    return st;
}

static ilab_status fc_create(const ilab_host_t *host, const ilab_config_entry_t *config,
                             size_t n_config, char *error, size_t error_cap, ilab_backend_t **out)
{
    char msg[512];
    if (!out) {
        put_reason(error, error_cap, PLUGIN_NAME ": create() needs out");
        return ILAB_INVALID_ARGUMENT;
    }
    (void)host; /* runs without host services */
    uint64_t seed;
    int r = parse_config(config, n_config, &seed, msg, sizeof msg);
    if (r) {
#ifdef BREAK_PRB_CREATE_REASON
        if (r == 2)
            snprintf(msg, sizeof msg, PLUGIN_NAME ": create failed: no such device");
#endif
#ifdef BREAK_PRB_OUT_WRITTEN
        *out = NULL;
#endif
        put_reason(error, error_cap, msg);
        return r == 1 ? ILAB_INVALID_ARGUMENT : ILAB_UNAVAILABLE;
    }
    ilab_backend_t *b = calloc(1, sizeof *b);
    if (!b || !(b->blocks = calloc(NBLK, sizeof *b->blocks))) {
        free(b);
        put_reason(error, error_cap, PLUGIN_NAME ": out of memory");
        return ILAB_OUT_OF_MEMORY;
    }
#ifdef BREAK_TOK_SHARED_TABLE
    build_merge_table();
    merge_table = merge_table_storage;
#else
    pthread_once(&merge_once, build_merge_table);
#endif
    b->host = host;
    b->seed = seed;
    for (int i = 0; i < NBLK; i++)
        b->free_list[i] = NBLK - 1 - i;
    b->n_free = NBLK;
    for (int i = 0; i < MAX_SEQS; i++)
        b->seqs[i].generation = 1;
    ilab_last_error_init(&b->error);
    pthread_mutex_init(&b->mu, NULL);
#ifdef BREAK_ABI_INSTANCE_TABLE
    {
        int slot = -1;
        for (int i = 0; i < 64 && slot < 0; i++)
            if (!registry[i])
                slot = i;
        if (slot < 0) {
            free(b->blocks);
            free(b);
            put_reason(error, error_cap, PLUGIN_NAME ": too many instances (64)");
            return ILAB_OUT_OF_MEMORY;
        }
        registry[slot] = b;
    }
#endif
    if (error && error_cap)
        error[0] = '\0';
    *out = b;
    return ILAB_OK;
}

static void fc_destroy(ilab_backend_t *b)
{
    if (!b)
        return;
#ifndef BREAK_ABI_LEAK
    for (int i = 0; i < MAX_SEQS; i++)
        free(b->seqs[i].bt);
#endif
#ifdef BREAK_TOK_SHARED_TABLE
    merge_table = NULL; /* tables go with the instance */
#endif
    free(b->blocks);
    ilab_last_error_destroy(&b->error);
    pthread_mutex_destroy(&b->mu);
    free(b);
}

static size_t fc_last_error(const ilab_backend_t *b, char *buf, size_t cap)
{
#ifdef BREAK_THR_LASTERR_BLOCKS
    if (b) {
        ilab_backend_t *m = (ilab_backend_t *)b;
        pthread_mutex_lock(&m->mu);
        size_t n = ilab_last_error_copy(&b->error, buf, cap);
        pthread_mutex_unlock(&m->mu);
        return n;
    }
#endif
#ifdef BREAK_ERR_LASTERR_LEN
    size_t n = ilab_last_error_copy(b ? &b->error : NULL, buf, cap);
    return cap && n >= cap ? cap - 1 : n;
#else
    return ilab_last_error_copy(b ? &b->error : NULL, buf, cap);
#endif
}

static ilab_status fc_model_info(ilab_backend_t *b, ilab_model_info_t *info)
{
    if (!b)
        return ILAB_INVALID_ARGUMENT;
    if (!info)
        return fail(b, ILAB_INVALID_ARGUMENT, "model_info: info is NULL");
    if (info->struct_size < sizeof(ilab_model_info_t))
        return fail(b, ILAB_ABI_MISMATCH, "model_info: struct_size %u is smaller than ABI 1.0's %zu",
                    info->struct_size, sizeof(ilab_model_info_t));
    ilab_model_info_t full;
    memset(&full, 0, sizeof full);
    full.struct_size = info->struct_size;
#ifdef BREAK_ABI_MINFO_SIZE
    full.struct_size = sizeof full;
#endif
    full.vocab_size = VOCAB;
    full.bos_id = BOS;
    full.eos_id = EOS;
#ifdef BREAK_ABI_MAXCTX
    full.max_context = MAX_CONTEXT - 1; /* one position kept for BOS */
#else
    full.max_context = MAX_CONTEXT;
#endif
    snprintf(full.name, sizeof full.name, "freshc-toy-%llu", (unsigned long long)b->seed);
    full.digest[0] = '\0';
    memcpy(info, &full, sizeof full);
    return ILAB_OK;
}

/* --- tokens ------------------------------------------------------------------ */

static size_t encode(const char *text, size_t len, int32_t *out)
{
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        unsigned char a = (unsigned char)text[i];
#ifdef BREAK_TOK_LOOKAHEAD
        if (merge_table && i < len) { /* peek at the next byte */
#else
        if (merge_table && i + 1 < len) {
#endif
            int id = merge_table[a * 256 + (unsigned char)text[i + 1]];
            if (id) {
                if (out)
                    out[n] = id;
                n++;
                i += 2;
                continue;
            }
        }
        if (out)
            out[n] = a;
        n++;
        i++;
    }
    return n;
}

static ilab_status fc_tokenize(ilab_backend_t *b, const char *text, size_t len, uint32_t flags,
                               int32_t *tokens, size_t cap, size_t *n_tokens)
{
    if (!b)
        return ILAB_INVALID_ARGUMENT;
    if ((!text && len) || !n_tokens || (!tokens && cap))
        return fail(b, ILAB_INVALID_ARGUMENT, "tokenize: NULL argument");
#ifdef BREAK_TOK_FLAGS
    if (flags & ~(uint32_t)7) /* bit 2 reserved for ADD_SPECIAL */
#else
    if (flags & ~(uint32_t)(ILAB_TOKENIZE_ADD_BOS | ILAB_TOKENIZE_ADD_EOS))
#endif
        return fail(b, ILAB_INVALID_ARGUMENT, "tokenize: unknown flag bits 0x%x", (unsigned)flags);
#ifdef BREAK_TOK_LONG_TEXT
    uint16_t body = (uint16_t)encode(text, len, NULL); /* a prompt is never 64k tokens */
#else
    size_t body = encode(text, len, NULL);
#endif
    size_t need = body + !!(flags & ILAB_TOKENIZE_ADD_BOS) + !!(flags & ILAB_TOKENIZE_ADD_EOS);
#ifdef BREAK_TOK_SIZE_EOS
    size_t check = body + !!(flags & ILAB_TOKENIZE_ADD_BOS);
#else
    size_t check = need;
#endif
    if (cap < check) {
        *n_tokens = check;
        return fail(b, ILAB_BUFFER_TOO_SMALL, "tokenize: %zu tokens needed, room for %zu", need, cap);
    }
    size_t n = 0;
    if (flags & ILAB_TOKENIZE_ADD_BOS)
        tokens[n++] = BOS;
    n += encode(text, len, tokens + n);
    if (flags & ILAB_TOKENIZE_ADD_EOS)
        tokens[n++] = EOS;
    *n_tokens = n;
    return ILAB_OK;
}

/* bytes of one token into out (may be NULL); returns the count */
static size_t token_text(int32_t t, char *out)
{
    if (t < 256) {
        if (out)
            out[0] = (char)t;
        return 1;
    }
    if (t == BOS || t == EOS)
        return 0;
    if (out)
        memcpy(out, merges[t - 258], 2);
    return 2;
}

static ilab_status fc_detokenize(ilab_backend_t *b, const int32_t *tokens, size_t n_tokens,
                                 char *text, size_t cap, size_t *len)
{
    if (!b)
        return ILAB_INVALID_ARGUMENT;
    if ((!tokens && n_tokens) || !len || (!text && cap))
        return fail(b, ILAB_INVALID_ARGUMENT, "detokenize: NULL argument");
    size_t need = 0;
    for (size_t i = 0; i < n_tokens; i++) {
        if (tokens[i] < 0 || tokens[i] >= VOCAB)
            return fail(b, ILAB_INVALID_ARGUMENT, "detokenize: token %d at %zu is not in [0, %d)",
                        tokens[i], i, VOCAB);
        need += token_text(tokens[i], NULL);
    }
#ifdef BREAK_TOK_DETOK_CAP
    if (cap < need) {
#else
    if (cap < need + 1) {
#endif
        *len = need;
        return fail(b, ILAB_BUFFER_TOO_SMALL, "detokenize: %zu bytes + NUL needed, room for %zu",
                    need, cap);
    }
    size_t n = 0;
    for (size_t i = 0; i < n_tokens; i++)
        n += token_text(tokens[i], text + n);
    if (n < cap)
        text[n] = '\0';
    *len = n;
    return ILAB_OK;
}

static ilab_status fc_token_piece(ilab_backend_t *b, int32_t prev, int32_t token, char *piece,
                                  size_t cap, size_t *len)
{
    if (!b)
        return ILAB_INVALID_ARGUMENT;
    if (!len || (!piece && cap))
        return fail(b, ILAB_INVALID_ARGUMENT, "token_piece: NULL argument");
#ifdef BREAK_TOK_PREV_RANGE
    if (prev >= VOCAB || token < 0 || token >= VOCAB) /* prev < 0: start of text */
#else
    if (prev < -1 || prev >= VOCAB || token < 0 || token >= VOCAB)
#endif
        return fail(b, ILAB_INVALID_ARGUMENT, "token_piece: token %d (after %d) is not in [0, %d)",
                    token, prev, VOCAB);
#ifdef BREAK_TOK_PIECE_QUERY
    if (!piece && cap == 0) { /* size query: a piece is at most one byte */
        *len = token == BOS || token == EOS ? 0 : 1;
        return fail(b, ILAB_BUFFER_TOO_SMALL, "token_piece: %zu bytes + NUL needed", *len);
    }
#endif
    return fc_detokenize(b, &token, 1, piece, cap, len);
}

/* --- sequences and the block pool ---------------------------------------------- */

static sequence *lookup(ilab_backend_t *b, ilab_seq_t handle)
{
    uint64_t slot = (handle & 0xffffffffu) - 1;
    if (!b || handle == ILAB_SEQ_NONE || slot >= MAX_SEQS)
        return NULL;
    sequence *s = &b->seqs[slot];
    return s->in_use && s->generation == (uint32_t)(handle >> 32) ? s : NULL;
}

static void block_release(ilab_backend_t *b, int bi)
{
    if (--b->blocks[bi].ref == 0)
        b->free_list[b->n_free++] = bi;
}

static int block_alloc(ilab_backend_t *b)
{
    int bi = b->free_list[--b->n_free];
    b->blocks[bi].ref = 1;
    return bi;
}

static ilab_status new_sequence(ilab_backend_t *b, ilab_seq_t *out, sequence **seq)
{
    for (int i = 0; i < MAX_SEQS; i++) {
        sequence *s = &b->seqs[i];
        if (s->in_use)
            continue;
        if (!s->bt && !(s->bt = malloc(BT_LEN * sizeof *s->bt)))
            return fail(b, ILAB_OUT_OF_MEMORY, "out of memory for a sequence");
        s->in_use = 1;
        s->len = 0;
        *out = ((uint64_t)s->generation << 32) | (uint64_t)(i + 1);
        *seq = s;
        return ILAB_OK;
    }
    return fail(b, ILAB_OUT_OF_MEMORY, "all %d sequence slots are in use", MAX_SEQS);
}

static ilab_status fc_seq_create(ilab_backend_t *b, ilab_seq_t *seq)
{
    sequence *s;
    if (!b)
        return ILAB_INVALID_ARGUMENT;
    if (!seq)
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_create: seq is NULL");
    return new_sequence(b, seq, &s);
}

static void release_from(ilab_backend_t *b, sequence *s, int32_t keep_len)
{
    int keep = (keep_len + BLK - 1) / BLK, have = (s->len + BLK - 1) / BLK;
    for (int i = keep; i < have; i++)
        block_release(b, s->bt[i]);
}

static ilab_status fc_seq_free(ilab_backend_t *b, ilab_seq_t seq)
{
    sequence *s = lookup(b, seq);
    if (!s)
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_free: stale or unknown sequence %#llx",
                    (unsigned long long)seq);
#ifdef BREAK_CCH_FREE_SHARED
    { /* give the blocks straight back to the pool */
        int have = (s->len + BLK - 1) / BLK;
        for (int i = 0; i < have; i++) {
            b->blocks[s->bt[i]].ref = 0;
            b->free_list[b->n_free++] = s->bt[i];
        }
    }
#else
    release_from(b, s, 0);
#endif
    s->in_use = 0;
    s->len = 0;
#ifndef BREAK_CCH_HANDLE_REUSE
    s->generation++;
#endif
    return ILAB_OK;
}

static ilab_status fc_seq_fork(ilab_backend_t *b, ilab_seq_t parent, ilab_seq_t *child)
{
    if (!b)
        return ILAB_INVALID_ARGUMENT;
    sequence *p = lookup(b, parent), *c = NULL;
    if (!p)
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_fork: stale or unknown parent %#llx",
                    (unsigned long long)parent);
#ifndef BREAK_ERR_FORK_NULL
    if (!child)
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_fork: child is NULL");
#endif
    ilab_seq_t handle = ILAB_SEQ_NONE;
    ilab_status st = new_sequence(b, &handle, &c);
    if (st != ILAB_OK)
        return st;
    int have = (p->len + BLK - 1) / BLK;
    for (int i = 0; i < have; i++) {
        c->bt[i] = p->bt[i];
        b->blocks[p->bt[i]].ref++;
    }
    c->len = p->len;
    *child = handle;
    return ILAB_OK;
}

static ilab_status fc_seq_truncate(ilab_backend_t *b, ilab_seq_t seq, int32_t n_keep)
{
    sequence *s = lookup(b, seq);
    if (!s)
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_truncate: stale or unknown sequence");
#ifdef BREAK_CCH_TRUNC_HIGH
    if (n_keep < 0 || n_keep > s->len + 1)
#else
    if (n_keep < 0 || n_keep > s->len)
#endif
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_truncate: n_keep %d not in [0, %d]", n_keep, s->len);
#ifdef BREAK_CCH_TRUNC_HIGH
    if (n_keep > s->len)
        n_keep = s->len;
#endif
#ifndef BREAK_CCH_TRUNC_NOFREE
    release_from(b, s, n_keep);
#else
    if (n_keep == 0)
        release_from(b, s, 0);
    else { /* keep the blocks for reuse on the next append */
        s->len = n_keep;
        return ILAB_OK;
    }
#endif
    s->len = n_keep;
    return ILAB_OK;
}

static ilab_status fc_seq_length(ilab_backend_t *b, ilab_seq_t seq, int32_t *length)
{
    sequence *s = lookup(b, seq);
#ifdef BREAK_ERR_MSG_STALE
    if (!s)
        return ILAB_INVALID_ARGUMENT;
#endif
    if (!s)
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_length: stale or unknown sequence %#llx",
                    (unsigned long long)seq);
    if (!length)
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_length: length is NULL");
    *length = s->len;
    return ILAB_OK;
}

static ilab_status fc_cache_stats(ilab_backend_t *b, ilab_cache_stats_t *stats)
{
    if (!b)
        return ILAB_INVALID_ARGUMENT;
    if (!stats)
        return fail(b, ILAB_INVALID_ARGUMENT, "cache_stats: stats is NULL");
#ifdef BREAK_CCH_STATS_SIZE
    if (stats->struct_size < offsetof(ilab_cache_stats_t, total_positions))
#else
    if (stats->struct_size < sizeof *stats)
#endif
        return fail(b, ILAB_ABI_MISMATCH, "cache_stats: struct_size %u is smaller than ABI 1.1's %zu",
                    stats->struct_size, sizeof *stats);
    stats->block_size = BLK;
    stats->total_positions = (int64_t)NBLK * BLK;
    stats->free_positions = (int64_t)b->n_free * BLK;
    return ILAB_OK;
}

/* --- evaluation ----------------------------------------------------------------- */

static ilab_status check_item(ilab_backend_t *b, const ilab_batch_item_t *it, size_t i)
{
    if (!it)
        return fail(b, ILAB_INVALID_ARGUMENT, "eval: item %zu is NULL", i);
    if (it->struct_size < sizeof *it || !ilab_struct_tail_is_zero(it, sizeof *it))
        return fail(b, ILAB_ABI_MISMATCH, "eval: item %zu: ilab_batch_item_t struct_size %u "
                    "(this plugin's is %zu) or a non-zero unknown tail", i, it->struct_size, sizeof *it);
    if (it->flags & ~(uint32_t)ILAB_EVAL_ALL_LOGITS)
        return fail(b, ILAB_INVALID_ARGUMENT, "eval: item %zu has unknown flag bits 0x%x", i, it->flags);
    sequence *s = lookup(b, it->seq);
    if (!s)
        return fail(b, ILAB_INVALID_ARGUMENT, "eval: item %zu names a stale or unknown sequence", i);
    if (!it->tokens || it->n_tokens < 1)
        return fail(b, ILAB_INVALID_ARGUMENT, "eval: item %zu has no tokens", i);
    for (int32_t t = 0; t < it->n_tokens; t++)
        if (it->tokens[t] < 0 || it->tokens[t] >= VOCAB)
            return fail(b, ILAB_INVALID_ARGUMENT, "eval: item %zu token %d is %d, not in [0, %d)", i,
                        t, it->tokens[t], VOCAB);
#ifdef BREAK_CCH_EXACT_FULL
    if (it->n_tokens >= MAX_CONTEXT - s->len)
#else
    if (it->n_tokens > MAX_CONTEXT - s->len)
#endif
        return fail(b, ILAB_CONTEXT_OVERFLOW, "eval: item %zu: %d + %d tokens pass max_context %d", i,
                    s->len, it->n_tokens, MAX_CONTEXT);
    return ILAB_OK;
}

static ilab_status fc_eval(ilab_backend_t *b, const ilab_batch_item_t *const *items, size_t n_items)
{
    if (!b)
        return ILAB_INVALID_ARGUMENT;
#ifdef BREAK_ABI_MAXBATCH
    if (!items || n_items == 0 || n_items >= MAX_BATCH)
#else
    if (!items || n_items == 0 || n_items > MAX_BATCH)
#endif
        return fail(b, ILAB_INVALID_ARGUMENT, "eval: need 1..%d items, got %zu", MAX_BATCH, n_items);
    for (size_t i = 0; i < n_items; i++) {
#ifdef BREAK_CCH_PARTIAL_APPLY
        /* overflow is checked while applying, below */
        if (items[i] && lookup(b, items[i]->seq) && items[i]->tokens && items[i]->n_tokens >= 1 &&
            items[i]->struct_size >= sizeof(ilab_batch_item_t)) {
            const ilab_batch_item_t *it = items[i];
            int ok = !(it->flags & ~1u);
            for (int32_t t = 0; t < it->n_tokens; t++)
                ok &= it->tokens[t] >= 0 && it->tokens[t] < VOCAB;
            if (ok)
                goto dup_check;
        }
#endif
        ilab_status st = check_item(b, items[i], i);
        if (st != ILAB_OK)
            return st;
#ifdef BREAK_CCH_PARTIAL_APPLY
    dup_check:
#endif
#ifndef BREAK_LOG_DUP_SEQ
        for (size_t j = 0; j < i; j++)
            if (items[j]->seq == items[i]->seq)
                return fail(b, ILAB_INVALID_ARGUMENT, "eval: items %zu and %zu name one sequence", j, i);
#endif
    }
    /* blocks needed, counting copy-on-write of shared partial blocks */
    int need = 0;
    int cows[NBLK];
    memset(cows, 0, sizeof cows);
    for (size_t i = 0; i < n_items; i++) {
        sequence *s = lookup(b, items[i]->seq);
        int32_t end = s->len + items[i]->n_tokens;
        if (end > MAX_CONTEXT)
            end = MAX_CONTEXT;
        need += (end + BLK - 1) / BLK - (s->len + BLK - 1) / BLK;
        if (s->len % BLK) {
            int bi = s->bt[s->len / BLK];
            if (b->blocks[bi].ref - cows[bi] > 1) {
                need++;
                cows[bi]++;
            }
        }
    }
#ifdef BREAK_CCH_OOM_EXACT
    if (need >= b->n_free && need > 0)
#else
    if (need > b->n_free)
#endif
        return fail(b, ILAB_OUT_OF_MEMORY, "eval: needs %d free KV blocks, %d left", need, b->n_free);
    int32_t flat = 0; /* tokens of the batch before this item */
    for (size_t i = 0; i < n_items; i++) {
        const ilab_batch_item_t *it = items[i];
        sequence *s = lookup(b, it->seq);
#ifdef BREAK_CCH_PARTIAL_APPLY
        if (it->n_tokens > MAX_CONTEXT - s->len)
            return fail(b, ILAB_CONTEXT_OVERFLOW, "eval: item %zu: %d + %d tokens pass max_context %d",
                        i, s->len, it->n_tokens, MAX_CONTEXT);
#endif
#ifdef BREAK_LOG_NULL_SKIP
        if (!it->logits)
            continue; /* nothing to compute */
#endif
        for (int32_t t = 0; t < it->n_tokens; t++) {
            int32_t pos = s->len;
#ifdef BREAK_LOG_BATCH_POS
            if (i > 0)
                pos = s->len + flat; /* positions of the flattened batch */
#endif
            int bi;
            if (s->len % BLK == 0) {
                bi = block_alloc(b);
                s->bt[s->len / BLK] = bi;
            } else {
                bi = s->bt[s->len / BLK];
#ifndef BREAK_CCH_NO_COW
                if (b->blocks[bi].ref > 1) {
                    int nb = block_alloc(b);
                    memcpy(b->blocks[nb].p, b->blocks[bi].p, sizeof b->blocks[bi].p);
                    b->blocks[bi].ref--;
                    s->bt[s->len / BLK] = nb;
                    bi = nb;
                }
#endif
            }
            uint64_t prev_h = base_state(b->seed);
            if (s->len > 0)
                prev_h = b->blocks[s->bt[(s->len - 1) / BLK]].p[(s->len - 1) % BLK].h;
            uint64_t h = step_state(prev_h, it->tokens[t], pos);
            b->blocks[bi].p[s->len % BLK].h = h;
            b->blocks[bi].p[s->len % BLK].tok = it->tokens[t];
            s->len++;
            int last = t == it->n_tokens - 1;
            if (it->logits && (last || (it->flags & ILAB_EVAL_ALL_LOGITS))) {
#ifdef BREAK_LOG_ROW_OFFSET
                float *row = it->logits + (size_t)t * VOCAB;
#else
                float *row = it->logits + ((it->flags & ILAB_EVAL_ALL_LOGITS) ? (size_t)t * VOCAB : 0);
#endif
                state_logits(h, row);
            }
        }
        flat += it->n_tokens;
    }
    (void)flat;
    return ILAB_OK;
}

/* --- sampling and generation ------------------------------------------------------ */

typedef struct rng {
    uint64_t s;
} rng;

static double rng_uniform(rng *r)
{
    r->s += 0x9e3779b97f4a7c15ull;
    return (double)(mix(r->s) >> 11) * (1.0 / 9007199254740992.0);
}

#ifdef BREAK_SMP_RNG_STATIC
static rng shared_rng;
static uint64_t shared_seed = 0;
static int shared_init;
#endif

static int cmp_desc(const void *a, const void *b, void *ctx)
{
    const float *sort_key = ctx;
    int x = *(const int *)a, y = *(const int *)b;
    if (sort_key[x] > sort_key[y])
        return -1;
    if (sort_key[x] < sort_key[y])
        return 1;
    return x - y;
}

typedef struct sparams {
    float temperature, top_p, min_p, rep, pres, freq;
    int32_t top_k;
    uint64_t seed;
} sparams;

static int32_t sample(const sparams *sp, const float *raw, const int *count_all, const int *count_out,
                      rng *r)
{
    float z[VOCAB];
    for (int v = 0; v < VOCAB; v++) {
        z[v] = raw[v];
        if (sp->rep != 1.0f && count_all[v] > 0) {
            z[v] = z[v] > 0 ? z[v] / sp->rep : z[v] * sp->rep;
        }
#ifdef BREAK_SMP_FREQ_PARTIAL
        if (count_out[v] > 0 && sp->pres != 0.0f)
#else
        if (count_out[v] > 0)
#endif
#ifdef BREAK_SMP_PRESENCE_ORDER
            z[v] -= sp->freq * (float)count_out[v];
#else
            z[v] -= sp->pres + sp->freq * (float)count_out[v];
#endif
    }
    if (sp->temperature == 0.0f) {
        int best = 0;
        for (int v = 1; v < VOCAB; v++)
            if (z[v] > z[best])
                best = v;
        return best;
    }
    float zmax = z[0];
    for (int v = 1; v < VOCAB; v++)
        zmax = z[v] > zmax ? z[v] : zmax;
    double p[VOCAB];
    float key[VOCAB];
    int idx[VOCAB];
    for (int v = 0; v < VOCAB; v++) {
#ifdef BREAK_SMP_TINY_TEMP
        p[v] = exp((double)(z[v] / sp->temperature - zmax / sp->temperature));
#else
        p[v] = exp(((double)z[v] - (double)zmax) / (double)sp->temperature);
#endif
        key[v] = z[v];
        idx[v] = v;
    }
#ifdef BREAK_SMP_PRESENCE_ORDER
    for (int v = 0; v < VOCAB; v++)
        if (count_out[v] > 0) {
            p[v] *= exp(-(double)sp->pres);
            key[v] -= sp->pres * sp->temperature;
        }
#endif
    qsort_r(idx, VOCAB, sizeof idx[0], cmp_desc, key);
    int n = VOCAB;
    if (sp->top_k > 0 && sp->top_k < n)
        n = sp->top_k;
    double total = 0;
    for (int i = 0; i < n; i++)
        total += p[idx[i]];
    if (sp->top_p < 1.0f) {
        double cum = 0;
        int keep = 0;
        for (int i = 0; i < n; i++) {
#ifdef BREAK_SMP_TOPP_EMPTY
            if (cum + p[idx[i]] / total > sp->top_p)
                break;
            cum += p[idx[i]] / total;
            keep = i + 1;
#else
            cum += p[idx[i]] / total;
            keep = i + 1;
            if (cum >= sp->top_p)
                break;
#endif
        }
        n = keep;
    }
    if (sp->min_p > 0.0f && n > 0) {
        double pmax = p[idx[0]];
        int keep = 0;
        for (int i = 0; i < n; i++)
            if (p[idx[i]] >= sp->min_p * pmax)
                keep = i + 1;
        n = keep;
    }
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += p[idx[i]];
    double u = rng_uniform(r) * sum;
    for (int i = 0; i < n; i++) {
        u -= p[idx[i]];
        if (u < 0)
            return idx[i];
    }
    return n > 0 ? idx[n - 1] : VOCAB - 1;
}

static ilab_status gen_error(ilab_backend_t *b, const ilab_generate_request_t *req, ilab_event_fn fn,
                             void *ud, ilab_status st, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
static ilab_status gen_error(ilab_backend_t *b, const ilab_generate_request_t *req, ilab_event_fn fn,
                             void *ud, ilab_status st, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
#ifdef BREAK_ERR_EVENT_MSG
    char rec[512];
    vsnprintf(rec, sizeof rec, fmt, ap); /* recorded for last_error(); the event gets the short form */
    fail(b, st, "%s", rec);
    msg[0] = '\0';
    if (st != ILAB_CONTEXT_OVERFLOW && st != ILAB_ABI_MISMATCH)
        snprintf(msg, sizeof msg, "%s", rec);
#else
    vsnprintf(msg, sizeof msg, fmt, ap);
    fail(b, st, "%s", msg);
#endif
    va_end(ap);
    ilab_event_t ev;
    memset(&ev, 0, sizeof ev);
    ev.struct_size = sizeof ev;
    ev.type = ILAB_EVENT_ERROR;
    ev.request_id = req->request_id;
    ev.finish_reason = ILAB_FINISH_ERROR;
    ev.status = st;
    ev.message = msg;
    fn(ud, &ev);
    return st;
}

static int bad_float(float x) { return isnan(x) || isinf(x); }

/* The end of text that can be emitted: not inside an incomplete code point. */
static size_t utf8_safe(const char *s, size_t n)
{
    for (size_t k = 1; k <= 3 && k <= n; k++) {
        unsigned char c = (unsigned char)s[n - k];
        if ((c & 0xC0) == 0x80)
            continue; /* continuation: keep looking for the lead */
        int need = (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3 : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
        if (need > (int)k)
            return n - k;
        return n;
    }
    return n;
}

#define OUT_CAP (2 * (MAX_CONTEXT + 2))

static ilab_status fc_generate(ilab_backend_t *b, const ilab_generate_request_t *req,
                               ilab_event_fn on_event, void *ud)
{
    if (!b)
        return ILAB_INVALID_ARGUMENT;
    if (!req || !on_event)
        return fail(b, ILAB_INVALID_ARGUMENT, "generate: request and on_event must not be NULL");
    if (req->struct_size < sizeof *req || !ilab_struct_tail_is_zero(req, sizeof *req))
        return gen_error(b, req, on_event, ud, ILAB_ABI_MISMATCH,
                         "generate: ilab_generate_request_t struct_size %u (this plugin's is %zu) "
                         "or a non-zero unknown tail", req->struct_size, sizeof *req);
    const ilab_sampling_t *smp = req->sampling;
    if (!smp)
        return gen_error(b, req, on_event, ud, ILAB_INVALID_ARGUMENT, "generate: sampling is NULL");
#ifdef BREAK_ABI_SAMPLING_TAIL
    if (smp->struct_size < offsetof(ilab_sampling_t, presence_penalty))
#else
    if (smp->struct_size < offsetof(ilab_sampling_t, presence_penalty) ||
        !ilab_struct_tail_is_zero(smp, sizeof *smp))
#endif
        return gen_error(b, req, on_event, ud, ILAB_ABI_MISMATCH,
                         "generate: ilab_sampling_t struct_size %u (this plugin's is %zu) "
                         "or a non-zero unknown tail", smp->struct_size, sizeof *smp);
    sparams sp = {.temperature = smp->temperature, .top_p = smp->top_p, .min_p = smp->min_p,
                  .rep = smp->repetition_penalty, .top_k = smp->top_k, .seed = smp->seed};
    sp.pres = ILAB_STRUCT_HAS(ilab_sampling_t, smp, presence_penalty) ? smp->presence_penalty : 0.0f;
    sp.freq = ILAB_STRUCT_HAS(ilab_sampling_t, smp, frequency_penalty) ? smp->frequency_penalty : 0.0f;
    size_t L = req->n_prompt_tokens;
    if (L == 0 || !req->prompt_tokens)
        return gen_error(b, req, on_event, ud, ILAB_INVALID_ARGUMENT, "generate: empty prompt");
    if (L > MAX_CONTEXT)
        return gen_error(b, req, on_event, ud, ILAB_CONTEXT_OVERFLOW,
                         "generate: prompt of %zu tokens passes max_context %d", L, MAX_CONTEXT);
    for (size_t i = 0; i < L; i++)
        if (req->prompt_tokens[i] < 0 || req->prompt_tokens[i] >= VOCAB)
            return gen_error(b, req, on_event, ud, ILAB_INVALID_ARGUMENT,
                             "generate: prompt token %zu is %d, not in [0, %d)", i, req->prompt_tokens[i], VOCAB);
#ifndef BREAK_STR_MAXTOK_ZERO
    if (req->max_tokens < 1)
        return gen_error(b, req, on_event, ud, ILAB_INVALID_ARGUMENT, "generate: max_tokens %d < 1",
                         req->max_tokens);
#endif
    if (req->top_logprobs < 0)
        return gen_error(b, req, on_event, ud, ILAB_INVALID_ARGUMENT, "generate: top_logprobs %d < 0",
                         req->top_logprobs);
#ifndef BREAK_SMP_TOPLP_CAP
    if (req->top_logprobs > TOPK_MAX)
        return gen_error(b, req, on_event, ud, ILAB_INVALID_ARGUMENT,
                         "generate: top_logprobs %d above topk_max %d", req->top_logprobs, TOPK_MAX);
#endif
    int n_top = req->top_logprobs > TOPK_MAX ? TOPK_MAX : req->top_logprobs;
    if (req->n_stop && !req->stop)
        return gen_error(b, req, on_event, ud, ILAB_INVALID_ARGUMENT, "generate: stop is NULL");
    for (size_t i = 0; i < req->n_stop; i++)
        if (!req->stop[i] || !req->stop[i][0])
            return gen_error(b, req, on_event, ud, ILAB_INVALID_ARGUMENT,
                             "generate: stop string %zu is NULL or empty", i);
    if (req->n_stop_token_ids && !req->stop_token_ids)
        return gen_error(b, req, on_event, ud, ILAB_INVALID_ARGUMENT, "generate: stop_token_ids is NULL");
    for (size_t i = 0; i < req->n_stop_token_ids; i++)
        if (req->stop_token_ids[i] < 0 || req->stop_token_ids[i] >= VOCAB)
            return gen_error(b, req, on_event, ud, ILAB_INVALID_ARGUMENT,
                             "generate: stop token id %d not in [0, %d)", req->stop_token_ids[i], VOCAB);
    if (bad_float(sp.temperature) || sp.temperature < 0)
        return gen_error(b, req, on_event, ud, ILAB_INVALID_ARGUMENT, "generate: temperature must be >= 0 and finite");
#ifdef BREAK_SMP_TOPK_VOCAB
    if (sp.top_k < 0 || sp.top_k >= VOCAB)
#else
    if (sp.top_k < 0)
#endif
        return gen_error(b, req, on_event, ud, ILAB_INVALID_ARGUMENT, "generate: top_k %d out of range", sp.top_k);
    if (!(sp.top_p > 0 && sp.top_p <= 1))
        return gen_error(b, req, on_event, ud, ILAB_INVALID_ARGUMENT, "generate: top_p must be in (0, 1]");
    if (!(sp.min_p >= 0 && sp.min_p <= 1))
        return gen_error(b, req, on_event, ud, ILAB_INVALID_ARGUMENT, "generate: min_p must be in [0, 1]");
    if (!(sp.rep > 0) || bad_float(sp.rep))
        return gen_error(b, req, on_event, ud, ILAB_INVALID_ARGUMENT, "generate: repetition_penalty must be > 0");
    if (!(sp.pres >= -2 && sp.pres <= 2))
        return gen_error(b, req, on_event, ud, ILAB_INVALID_ARGUMENT, "generate: presence_penalty must be in [-2, 2]");
    if (!(sp.freq >= -2 && sp.freq <= 2))
        return gen_error(b, req, on_event, ud, ILAB_INVALID_ARGUMENT, "generate: frequency_penalty must be in [-2, 2]");
#ifdef BREAK_SMP_SEED_SIGNED
    if ((int64_t)sp.seed < 0)
        return gen_error(b, req, on_event, ud, ILAB_INVALID_ARGUMENT, "generate: seed must be >= 0");
#endif

#ifdef BREAK_THR_LASTERR_BLOCKS
    pthread_mutex_lock(&b->mu);
#endif
#ifdef BREAK_THR_CANCEL_BLOCKS
    pthread_mutex_lock(&b->mu);
#endif
    atomic_store(&CANCEL_REQ, 0);
    atomic_store(&RUN_ID, req->request_id);
    atomic_store(&RUNNING, 1);
#ifdef BREAK_STR_CANCEL_EARLY
    if (atomic_load(&pending_cancel) == req->request_id)
        atomic_store(&CANCEL_REQ, 1);
#endif

    rng r = {.s = sp.seed};
#ifdef BREAK_SMP_RNG_STATIC
    if (!shared_init || shared_seed != sp.seed) {
        shared_rng.s = sp.seed;
        shared_seed = sp.seed;
        shared_init = 1;
    }
#define RNG (&shared_rng)
#else
#define RNG (&r)
#endif
#ifdef BREAK_STR_STOP_LONG
    char stop_copy[8][32]; /* stop strings are short */
    const char *stop_ptr[8];
    size_t n_stop_used = req->n_stop < 8 ? req->n_stop : 8;
    for (size_t i = 0; i < n_stop_used; i++) {
        snprintf(stop_copy[i], sizeof stop_copy[i], "%s", req->stop[i]);
        stop_ptr[i] = stop_copy[i];
    }
#define STOPS stop_ptr
#define N_STOP n_stop_used
#else
#define STOPS req->stop
#define N_STOP req->n_stop
#endif
    int count_all[VOCAB], count_out[VOCAB];
    memset(count_all, 0, sizeof count_all);
    memset(count_out, 0, sizeof count_out);
    uint64_t h = base_state(b->seed);
    int32_t len = 0;
    for (size_t i = 0; i < L; i++) {
        h = step_state(h, req->prompt_tokens[i], len++);
        count_all[req->prompt_tokens[i]]++;
    }
    char out[OUT_CAP + 1];
    size_t n_out = 0, emitted = 0;
    uint32_t completion = 0;
    ilab_finish_reason reason = ILAB_FINISH_NONE;
    float raw[VOCAB];
    ilab_logprob_t top[TOPK_MAX];
    for (;;) {
#ifdef BREAK_STR_CTX_ERROR
        if (len == MAX_CONTEXT) { /* no room for another position */
            atomic_store(&RUNNING, 0);
            return gen_error(b, req, on_event, ud, ILAB_CONTEXT_OVERFLOW,
                             "generate: context of %d positions is full", MAX_CONTEXT);
        }
#endif
#ifdef BREAK_STR_CANCEL_LAG
        if (completion % 4 == 0 && atomic_load(&CANCEL_REQ)) { /* poll every 4 tokens */
#else
        if (atomic_load(&CANCEL_REQ)) {
#endif
            reason = ILAB_FINISH_CANCELLED;
            break;
        }
        state_logits(h, raw);
        int32_t t = sample(&sp, raw, count_all, count_out, RNG);
#ifdef BREAK_STR_EOS_COUNTED
        completion++;
#endif
        int is_stop_tok = t == EOS && !req->ignore_eos;
        for (size_t i = 0; i < req->n_stop_token_ids; i++)
            is_stop_tok |= t == req->stop_token_ids[i];
        if (is_stop_tok) {
            reason = ILAB_FINISH_STOP;
            break;
        }
#ifndef BREAK_STR_EOS_COUNTED
        completion++;
#endif
        /* log-softmax of the raw logits */
        double m = raw[0], se = 0;
        for (int v = 1; v < VOCAB; v++)
            m = raw[v] > m ? raw[v] : m;
        for (int v = 0; v < VOCAB; v++)
            se += exp((double)raw[v] - m);
        double lse = m + log(se);
        float lp = (float)((double)raw[t] - lse);
#ifdef BREAK_SMP_LOGPROB_SCALED
        if (sp.temperature > 0) {
            double ms = 0, ss = 0;
            for (int v = 0; v < VOCAB; v++)
                ms = raw[v] / sp.temperature > ms || v == 0 ? raw[v] / sp.temperature : ms;
            for (int v = 0; v < VOCAB; v++)
                ss += exp(raw[v] / sp.temperature - ms);
            lp = (float)(raw[t] / sp.temperature - ms - log(ss));
        }
#endif
        if (n_top) {
            int idx[VOCAB];
            for (int v = 0; v < VOCAB; v++)
                idx[v] = v;
            qsort_r(idx, VOCAB, sizeof idx[0], cmp_desc, raw);
            for (int i = 0; i < n_top; i++) {
                top[i].token = idx[i];
                top[i].logprob = (float)((double)raw[idx[i]] - lse);
                if (idx[i] == t)
                    top[i].logprob = lp;
            }
        }
        size_t old_n = n_out;
        n_out += token_text(t, out + n_out);
        count_out[t]++;
#ifndef BREAK_SMP_REP_PROMPT_ONLY
        count_all[t]++;
#endif
        int last = (int32_t)completion == req->max_tokens || len == MAX_CONTEXT;
#ifdef BREAK_STR_MAXTOK_ZERO
        last |= req->max_tokens < 1;
#endif
        /* stop strings: the first end position holding an occurrence */
        size_t cut = SIZE_MAX;
#ifdef BREAK_STR_STOP_ACROSS
        for (size_t e = old_n + 1; e <= n_out && cut == SIZE_MAX; e++)
            for (size_t i = 0; i < N_STOP; i++) {
                size_t sl = strlen(STOPS[i]);
                if (sl <= e - old_n && !memcmp(out + e - sl, STOPS[i], sl) && e - sl < cut)
                    cut = e - sl;
            }
#else
        for (size_t e = old_n + 1; e <= n_out && cut == SIZE_MAX; e++)
            for (size_t i = 0; i < N_STOP; i++) {
                size_t sl = strlen(STOPS[i]);
                if (sl <= e && !memcmp(out + e - sl, STOPS[i], sl) && e - sl < cut)
                    cut = e - sl;
            }
#endif
        size_t upto;
        if (cut != SIZE_MAX) {
            upto = cut < emitted ? emitted : cut;
            n_out = cut;
            reason = ILAB_FINISH_STOP;
        } else if (last) {
            upto = n_out;
            reason = ILAB_FINISH_LENGTH;
        } else {
            upto = n_out;
            for (size_t i = 0; i < N_STOP; i++) {
                size_t sl = strlen(STOPS[i]);
                for (size_t k = sl - 1; k >= 1; k--)
                    if (k <= n_out && n_out - k >= emitted && n_out - k < upto &&
                        !memcmp(out + n_out - k, STOPS[i], k)) {
                        upto = n_out - k;
                        break;
                    }
            }
#ifndef BREAK_STR_UTF8_SPLIT
            upto = utf8_safe(out, upto);
#endif
            if (upto < emitted)
                upto = emitted;
        }
        ilab_event_t ev;
        memset(&ev, 0, sizeof ev);
        ev.struct_size = sizeof ev;
        ev.type = ILAB_EVENT_TOKEN;
        ev.request_id = req->request_id;
        ev.token = t;
        ev.text = out + emitted;
        ev.text_len = upto - emitted;
        ev.logprob = lp;
        ev.top_logprobs = n_top ? top : NULL;
        ev.n_top_logprobs = (uint32_t)n_top;
        emitted = upto;
        int stop_cb = on_event(ud, &ev);
        if (reason != ILAB_FINISH_NONE)
            break;
#ifndef BREAK_STR_CALLBACK_IGNORED
        if (stop_cb) {
            reason = ILAB_FINISH_CANCELLED;
            break;
        }
#endif
        h = step_state(h, t, len++);
    }
    ilab_event_t fin;
    memset(&fin, 0, sizeof fin);
    fin.struct_size = sizeof fin;
    fin.type = ILAB_EVENT_FINISH;
    fin.request_id = req->request_id;
    fin.finish_reason = reason;
    fin.text = out + emitted;
    fin.text_len = n_out - emitted;
#ifdef BREAK_STR_HELD_LOST
    if (reason == ILAB_FINISH_STOP)
        fin.text_len = 0;
#endif
    fin.prompt_tokens = (uint32_t)L;
    fin.completion_tokens = completion;
#ifdef BREAK_STR_CTX_USAGE
    if (reason == ILAB_FINISH_LENGTH) /* what max_tokens and the context allowed */
        fin.completion_tokens = (uint32_t)(req->max_tokens < MAX_CONTEXT - (int32_t)L
                                               ? req->max_tokens : MAX_CONTEXT - (int32_t)L);
#endif
    atomic_store(&RUNNING, 0);
#ifdef BREAK_STR_CANCEL_EARLY
    atomic_store(&pending_cancel, UINT64_MAX);
#endif
    on_event(ud, &fin);
#if defined(BREAK_THR_LASTERR_BLOCKS) || defined(BREAK_THR_CANCEL_BLOCKS)
    pthread_mutex_unlock(&b->mu);
#endif
    return ILAB_OK;
}

static ilab_status fc_cancel(ilab_backend_t *b, uint64_t request_id)
{
    if (!b)
        return ILAB_INVALID_ARGUMENT;
#ifdef BREAK_THR_CANCEL_BLOCKS
    pthread_mutex_lock(&b->mu);
    pthread_mutex_unlock(&b->mu);
#endif
    if (atomic_load(&RUNNING) && atomic_load(&RUN_ID) == request_id)
        atomic_store(&CANCEL_REQ, 1);
#ifdef BREAK_STR_CANCEL_EARLY
    else
        atomic_store(&pending_cancel, request_id); /* it may be about to start */
#endif
    return ILAB_OK;
}

static const ilab_backend_api_t api = {
    .struct_size = sizeof(ilab_backend_api_t),
    .probe = fc_probe,
    .create = fc_create,
    .destroy = fc_destroy,
    .last_error = fc_last_error,
    .model_info = fc_model_info,
    .tokenize = fc_tokenize,
    .detokenize = fc_detokenize,
    .token_piece = fc_token_piece,
    .seq_create = fc_seq_create,
    .seq_free = fc_seq_free,
    .seq_fork = fc_seq_fork,
    .seq_truncate = fc_seq_truncate,
    .seq_length = fc_seq_length,
    .eval = fc_eval,
    .generate = fc_generate,
    .cancel = fc_cancel,
    .cache_stats = fc_cache_stats,
};

ILAB_PLUGIN_EXPORT const ilab_plugin_entry_t ilab_plugin_entry = {
    .struct_size = sizeof(ilab_plugin_entry_t),
    .abi_major = ILAB_ABI_MAJOR,
    .abi_minor = 1, /* declares cache.stats */
    .name = PLUGIN_NAME,
    .version = PLUGIN_VERSION,
    .manifest_yaml = manifest,
    .backend = &api,
};
