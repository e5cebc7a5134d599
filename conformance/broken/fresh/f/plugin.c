/* spm_blocks — a held-out test plugin for inferlab (ABI 1.2).
 *
 * Built without BUG it is meant to be a correct backend; built with
 * -DBUG=N it carries exactly one bug (each `#if BUG == N` block).
 *
 *  - tokenizer: SentencePiece-style. Specials <unk> <|im_start|> <|im_end|>
 *    <s> </s> <|end|>, 256 byte-fallback tokens <0x00>..<0xFF>, then word
 *    pieces ("▁the", "th", "é", ...). Spaces become the marker "▁", a dummy
 *    "▁" is prepended to text at the start (config add_dummy_prefix), and
 *    greedy longest match runs over the marked text; a byte no piece starts
 *    with falls back to the byte tokens of its whole UTF-8 character. The
 *    leading space of the first token (or the first after BOS) is removed
 *    on decoding. A literal U+2581 in the input stays raw bytes, so every
 *    byte string round-trips.
 *  - logits: full, sampling: host. Each position holds a KV entry
 *    {hash of the whole history, decaying 8-float state}; logits are a
 *    linear read-out of the state plus hash noise.
 *  - KV cache: a pool of `cache_blocks` blocks of 8 positions; sequences own
 *    block tables; fork shares blocks (refcounts), copy-on-write on the
 *    last partial block; truncate releases whole blocks; cache_stats.
 *  - chat: eog ids </s>, <|im_end|>, <|end|>; a ChatML template.
 *  - thread_safety: sequence. */
#include <inferlab/inferlab.h>

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef BUG
#define BUG 0
#endif

#define PLUGIN_NAME "spm_blocks"
#define PLUGIN_VERSION "0.3.1"

#include "manifest.inc" /* static const char manifest[] = "...": manifest.yaml */

/* --- vocabulary -------------------------------------------------------------- */

enum { UNK = 0, IM_START = 1, IM_END = 2, BOS = 3, EOS = 4, END = 5, BYTE0 = 6, PIECE0 = BYTE0 + 256 };

static const char *const special_text[BYTE0] = {
    " \xE2\x81\x87 ", "<|im_start|>", "<|im_end|>", "", "", "<|end|>",
};

/* Pieces as SentencePiece writes them: "▁" is the word-boundary marker. */
static const char *const pieces[] = {
    "▁", "▁▁", "▁▁▁▁",
    "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p", "q", "r",
    "s", "t", "u", "v", "w", "x", "y", "z",
    "A", "B", "C", "D", "E", "F", "G", "H", "I", "J", "K", "L", "M", "N", "O", "P", "Q", "R",
    "S", "T", "U", "V", "W", "X", "Y", "Z",
    "0", "1", "2", "3", "4", "5", "6", "7", "8", "9",
    ".", ",", "!", "?", "'", "\"", ":", ";", "-", "(", ")", "<", ">", "|", "/", "_", "=", "+",
    "*", "#", "@", "&", "%", "$", "[", "]", "{", "}", "~", "`", "^", "\\",
    "th", "he", "in", "er", "an", "re", "on", "at", "en", "nd", "ti", "es", "or", "te", "of",
    "ed", "is", "it", "al", "ar", "st", "to", "nt", "ng", "se", "ha", "as", "ou", "io", "le",
    "ve", "co", "me", "de", "hi", "ri", "ro", "ic", "ne", "ea", "ra", "ce", "ing", "ion",
    "tion", "ent", "ment", "ly", "ll", "ss", "ee", "oo",
    "▁the", "▁and", "▁of", "▁to", "▁a", "▁in", "▁is", "▁it", "▁you", "▁that", "▁he", "▁was",
    "▁for", "▁on", "▁are", "▁with", "▁as", "▁I", "▁his", "▁they", "▁be", "▁at", "▁one",
    "▁have", "▁this", "▁from", "▁hello", "▁user", "▁assistant", "▁system", "▁The", "▁A",
    "▁t", "▁s", "▁c", "▁w", "▁b", "▁m", "▁p", "▁f", "▁d", "▁h", "▁l", "▁o", "▁n", "▁r", "▁e",
    "▁g", "▁y", "▁u", "▁i", "▁Hello", "▁quick", "▁brown", "▁fox", "▁jumps", "▁over", "▁lazy",
    "▁dog", "▁once", "▁upon", "▁time", "▁there", "▁were", "▁which", "▁would", "▁could",
    "▁about", "▁into", "▁more", "▁than",
    "é", "ü", "ñ", "ö", "ß", "▁é", "日", "本", "語", "中", "文", "€", "😀", "\xCC\x81",
    "▁world", /* keep last */
};
#define N_PIECES ((int)(sizeof pieces / sizeof pieces[0]))
#define VOCAB (PIECE0 + N_PIECES)
#define MARK 256 /* the "▁" unit */
#define MAX_PIECE_UNITS 16

typedef struct piece_info {
    uint16_t units[MAX_PIECE_UNITS];
    int n_units;
    char text[MAX_PIECE_UNITS * 4];
    int text_len;
    int next; /* next piece with the same first unit, -1 ends */
} piece_info;

static piece_info ptab[N_PIECES];
static int bucket[MARK + 1];
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static void build_tables(void)
{
    for (int u = 0; u <= MARK; u++)
        bucket[u] = -1;
    for (int i = N_PIECES - 1; i >= 0; i--) {
        const unsigned char *p = (const unsigned char *)pieces[i];
        piece_info *pi = &ptab[i];
        size_t n = strlen(pieces[i]);
        for (size_t j = 0; j < n;) {
            if (j + 2 < n && p[j] == 0xE2 && p[j + 1] == 0x96 && p[j + 2] == 0x81) {
                pi->units[pi->n_units++] = MARK;
                pi->text[pi->text_len++] = ' ';
                j += 3;
            } else {
                pi->units[pi->n_units++] = p[j];
                pi->text[pi->text_len++] = (char)p[j];
                j++;
            }
        }
        pi->next = bucket[pi->units[0]];
        bucket[pi->units[0]] = i;
    }
}

/* --- configuration ------------------------------------------------------------ */

#define BLOCK 8
#define MAX_CTX 2048
#define MAX_BATCH 32
#define MAX_BLK (MAX_CTX / BLOCK)
#define DIM 8

typedef struct config {
    uint64_t seed;
    int cache_blocks;
    int max_seqs;
    int add_prefix;
    char model_name[64];
    char model[1024];
    float logit_scale;
} config;

static void copy_msg(char *buf, size_t cap, const char *msg)
{
    if (!buf || !cap)
        return;
    size_t n = strlen(msg);
#if BUG == 12
    if (n > cap)
        n = cap;
#else
    if (n > cap - 1)
        n = cap - 1;
#endif
    memcpy(buf, msg, n);
    buf[n] = '\0';
}

static ilab_status parse_int(const char *key, const char *v, long long lo, long long hi,
                             long long *out, char *err, size_t cap)
{
    char msg[256];
    char *end = NULL;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (!*v || *end || errno) {
        snprintf(msg, sizeof msg, PLUGIN_NAME ": config key '%s' must be an int, got '%s'", key, v);
        copy_msg(err, cap, msg);
        return ILAB_INVALID_ARGUMENT;
    }
    if (x < lo || x > hi) {
        snprintf(msg, sizeof msg, PLUGIN_NAME ": config key '%s' must be in [%lld, %lld], got %lld",
                 key, lo, hi, x);
        copy_msg(err, cap, msg);
#if BUG == 13
        return ILAB_UNAVAILABLE;
#else
        return ILAB_INVALID_ARGUMENT;
#endif
    }
    *out = x;
    return ILAB_OK;
}

static ilab_status parse_config(const ilab_config_entry_t *cfg, size_t n, config *c, char *err,
                                size_t cap)
{
    char msg[1400];
    memset(c, 0, sizeof *c);
    c->seed = 0;
    c->cache_blocks = 1024;
    c->max_seqs = 64;
    c->add_prefix = 1;
    strcpy(c->model_name, "spm-tiny");
    c->logit_scale = 1.0f;
    if (n && !cfg) {
        copy_msg(err, cap, PLUGIN_NAME ": config is NULL");
        return ILAB_INVALID_ARGUMENT;
    }
    for (size_t i = 0; i < n; i++) {
        const char *k = cfg[i].key, *v = cfg[i].value;
        long long x;
        ilab_status st;
        if (!k || !v) {
            copy_msg(err, cap, PLUGIN_NAME ": config entry with a NULL key or value");
            return ILAB_INVALID_ARGUMENT;
        }
        if (!strcmp(k, "seed")) {
            if ((st = parse_int(k, v, 0, 2147483647LL, &x, err, cap)) != ILAB_OK)
                return st;
            c->seed = (uint64_t)x;
        } else if (!strcmp(k, "cache_blocks")) {
            if ((st = parse_int(k, v, 1, 65536, &x, err, cap)) != ILAB_OK)
                return st;
            c->cache_blocks = (int)x;
        } else if (!strcmp(k, "max_sequences")) {
            if ((st = parse_int(k, v, 1, 1024, &x, err, cap)) != ILAB_OK)
                return st;
            c->max_seqs = (int)x;
        } else if (!strcmp(k, "add_dummy_prefix")) {
            if (!strcmp(v, "true") || !strcmp(v, "1") || !strcmp(v, "yes"))
                c->add_prefix = 1;
            else if (!strcmp(v, "false") || !strcmp(v, "0") || !strcmp(v, "no"))
                c->add_prefix = 0;
            else {
                snprintf(msg, sizeof msg,
                         PLUGIN_NAME ": config key 'add_dummy_prefix' must be a bool, got '%s'", v);
                copy_msg(err, cap, msg);
                return ILAB_INVALID_ARGUMENT;
            }
        } else if (!strcmp(k, "model_name")) {
            size_t len = strlen(v);
#if BUG == 16
            if (len < 1 || len > sizeof c->model_name) {
#else
            if (len < 1 || len >= sizeof c->model_name) {
#endif
                snprintf(msg, sizeof msg,
                         PLUGIN_NAME ": config key 'model_name' must be 1..63 bytes, got %zu", len);
                copy_msg(err, cap, msg);
                return ILAB_INVALID_ARGUMENT;
            }
            strncpy(c->model_name, v, sizeof c->model_name);
        } else if (!strcmp(k, "model")) {
            if (strlen(v) >= sizeof c->model) {
                copy_msg(err, cap, PLUGIN_NAME ": config key 'model' is a path longer than 1023 bytes");
                return ILAB_INVALID_ARGUMENT;
            }
            strcpy(c->model, v);
        } else if (!strcmp(k, "logit_scale")) {
            char *end = NULL;
            errno = 0;
            double d = strtod(v, &end);
            if (!*v || *end || errno || !(d > 0.0 && d <= 8.0)) {
                snprintf(msg, sizeof msg,
                         PLUGIN_NAME ": config key 'logit_scale' must be a float in (0, 8], got '%s'", v);
                copy_msg(err, cap, msg);
                return ILAB_INVALID_ARGUMENT;
            }
            c->logit_scale = (float)d;
        } else {
#if BUG == 55
            continue; /* tolerate keys of newer manifests */
#endif
            snprintf(msg, sizeof msg,
                     PLUGIN_NAME ": unknown config key '%.200s' (known: seed, cache_blocks, "
                     "max_sequences, add_dummy_prefix, model_name, model, logit_scale)", k);
            copy_msg(err, cap, msg);
            return ILAB_INVALID_ARGUMENT;
        }
    }
    return ILAB_OK;
}

/* "cannot run here": the weights file must be readable. */
static void unavailable_reason(const config *c, int err, char *buf, size_t cap)
{
    snprintf(buf, cap, PLUGIN_NAME ": model file '%.900s' cannot be opened: %s", c->model,
             strerror(err));
}

/* Reads the weights file (if any) into a 64-bit fingerprint. 0 on success,
 * else the errno. */
static int read_weights(const config *c, uint64_t *fp)
{
    *fp = 0x84222325cbf29ce4ull;
    if (!c->model[0])
        return 0;
    FILE *f = fopen(c->model, "rb");
    if (!f)
        return errno ? errno : ENOENT;
    int ch;
    while ((ch = fgetc(f)) != EOF) {
        *fp ^= (uint64_t)(unsigned char)ch;
        *fp *= 0x100000001b3ull;
    }
    fclose(f);
    return 0;
}

/* --- instance ----------------------------------------------------------------- */

typedef struct kv_entry {
    uint64_t h;
    float acc[DIM];
} kv_entry;

typedef struct sequence {
    uint64_t handle; /* 0 when the slot is free */
    int in_use;
    int32_t len;
    int32_t n_blk;
    int32_t *blk; /* MAX_BLK entries while in use */
} sequence;

struct ilab_backend {
    const ilab_host_t *host;
    config cfg;
    uint64_t h0;
    float emb[VOCAB * DIM];
    float w[VOCAB * DIM];
    float bias[VOCAB];
    char digest[80];

    pthread_mutex_t mu; /* slots, handles, block pool, lengths */
    kv_entry *kv;       /* cache_blocks * BLOCK entries */
    int32_t *refcnt;
    int32_t *free_stack;
    int32_t n_free;
    sequence *seqs;
#if BUG == 44
    uint16_t next_handle;
#else
    uint64_t next_handle;
#endif
#if BUG == 46
    int32_t memo_len;
    kv_entry memo_state;
#endif
#if BUG == 59
    kv_entry scratch;
#endif

    pthread_mutex_t err_mu;
    char err[1024];
};

static ilab_status fail(ilab_backend_t *b, ilab_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static ilab_status fail(ilab_backend_t *b, ilab_status st, const char *fmt, ...)
{
    if (!b)
        return st;
    char msg[sizeof b->err];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&b->err_mu);
    memcpy(b->err, msg, sizeof msg);
    pthread_mutex_unlock(&b->err_mu);
    return st;
}

static uint64_t mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static float unit_float(uint64_t r) /* [-1, 1) */
{
    return (float)(r >> 40) / (float)(1u << 23) - 1.0f;
}

static void init_weights(ilab_backend_t *b, uint64_t fp)
{
    uint64_t s = mix(b->cfg.seed * 0x9E3779B97F4A7C15ull ^ fp);
#if BUG == 33
    /* the tables are the same for every instance: fill them once */
    static float emb0[VOCAB * DIM], w0[VOCAB * DIM], bias0[VOCAB];
    static uint64_t h00;
    static int filled;
    if (!filled) {
        for (int i = 0; i < VOCAB * DIM; i++) {
            emb0[i] = unit_float(mix(s ^ (0x1000000ull + (uint64_t)i)));
            w0[i] = unit_float(mix(s ^ (0x2000000ull + (uint64_t)i)));
        }
        for (int v = 0; v < VOCAB; v++)
            bias0[v] = 1.5f * unit_float(mix(s ^ (0x3000000ull + (uint64_t)v))) +
                       (v >= PIECE0 ? 1.0f : 0.0f);
        h00 = mix(s ^ 0x4000000ull);
        filled = 1;
    }
    memcpy(b->emb, emb0, sizeof emb0);
    memcpy(b->w, w0, sizeof w0);
    memcpy(b->bias, bias0, sizeof bias0);
    b->h0 = h00;
#else
    for (int i = 0; i < VOCAB * DIM; i++) {
        b->emb[i] = unit_float(mix(s ^ (0x1000000ull + (uint64_t)i)));
        b->w[i] = unit_float(mix(s ^ (0x2000000ull + (uint64_t)i)));
    }
    for (int v = 0; v < VOCAB; v++)
        b->bias[v] = 1.5f * unit_float(mix(s ^ (0x3000000ull + (uint64_t)v))) +
                     (v >= PIECE0 ? 1.0f : 0.0f);
    b->h0 = mix(s ^ 0x4000000ull);
#endif
}

/* The weights' fingerprint as "sha256:" + 64 lowercase hex digits. */
static void make_digest(ilab_backend_t *b, uint64_t fp)
{
#if BUG == 60
    uint64_t d = mix(fp); /* the digest of the weights file */
#else
    uint64_t d = mix(fp ^ mix(b->cfg.seed + 0x5000000ull));
#endif
    char *p = b->digest;
    p += sprintf(p, "sha256:");
    for (int i = 0; i < 4; i++) {
        d = mix(d + (uint64_t)i);
        p += sprintf(p, "%016llx", (unsigned long long)d);
    }
}

#if BUG == 6
extern void ilab_debug_trace(const char *what) __attribute__((weak));
#endif

static ilab_status sb_probe(const ilab_host_t *host, const ilab_config_entry_t *config_,
                            size_t n_config, char *reason, size_t reason_cap)
{
    (void)host;
    pthread_once(&tables_once, build_tables);
    config c;
    char msg[1400];
#if BUG == 15
    /* probing opens files: remember the last answer */
    static pthread_mutex_t memo_mu = PTHREAD_MUTEX_INITIALIZER;
    static int memo_valid;
    static size_t memo_n;
    static ilab_status memo_st;
    static char memo_reason[1400];
    pthread_mutex_lock(&memo_mu);
    if (memo_valid && memo_n == n_config) {
        ilab_status st = memo_st;
        copy_msg(reason, reason_cap, memo_reason);
        pthread_mutex_unlock(&memo_mu);
        return st;
    }
    pthread_mutex_unlock(&memo_mu);
#endif
    msg[0] = '\0';
    ilab_status st = parse_config(config_, n_config, &c, msg, sizeof msg);
    if (st == ILAB_OK) {
        uint64_t fp;
        int e = read_weights(&c, &fp);
        if (e) {
            unavailable_reason(&c, e, msg, sizeof msg);
            st = ILAB_UNAVAILABLE;
        }
    }
#if BUG == 15
    pthread_mutex_lock(&memo_mu);
    memo_valid = 1;
    memo_n = n_config;
    memo_st = st;
    memcpy(memo_reason, msg, sizeof msg);
    pthread_mutex_unlock(&memo_mu);
#endif
    copy_msg(reason, reason_cap, msg);
    return st;
}

static ilab_status sb_create(const ilab_host_t *host, const ilab_config_entry_t *config_,
                             size_t n_config, char *error, size_t error_cap, ilab_backend_t **out)
{
    char msg[1400];
    pthread_once(&tables_once, build_tables);
#if BUG == 56
    if (out)
        *out = NULL;
#endif
    if (!out) {
        copy_msg(error, error_cap, PLUGIN_NAME ": create() needs out");
        return ILAB_INVALID_ARGUMENT;
    }
    config c;
    msg[0] = '\0';
    ilab_status st = parse_config(config_, n_config, &c, msg, sizeof msg);
    if (st != ILAB_OK) {
        copy_msg(error, error_cap, msg);
        return st;
    }
    uint64_t fp;
    int e = read_weights(&c, &fp);
    if (e) {
#if BUG == 14
        snprintf(msg, sizeof msg, PLUGIN_NAME ": create: cannot open '%.900s': %s", c.model,
                 strerror(e));
#else
        unavailable_reason(&c, e, msg, sizeof msg);
#endif
        copy_msg(error, error_cap, msg);
        return ILAB_UNAVAILABLE;
    }
    ilab_backend_t *b = calloc(1, sizeof *b);
    if (!b) {
        copy_msg(error, error_cap, PLUGIN_NAME ": out of memory");
        return ILAB_OUT_OF_MEMORY;
    }
    b->host = host;
    b->cfg = c;
    b->kv = calloc((size_t)c.cache_blocks * BLOCK, sizeof *b->kv);
    b->refcnt = calloc((size_t)c.cache_blocks, sizeof *b->refcnt);
    b->free_stack = malloc((size_t)c.cache_blocks * sizeof *b->free_stack);
    b->seqs = calloc((size_t)c.max_seqs, sizeof *b->seqs);
    if (!b->kv || !b->refcnt || !b->free_stack || !b->seqs) {
        free(b->kv), free(b->refcnt), free(b->free_stack), free(b->seqs), free(b);
        copy_msg(error, error_cap, PLUGIN_NAME ": out of memory for the KV cache");
        return ILAB_OUT_OF_MEMORY;
    }
    /* block 0 is handed out first */
    for (int i = 0; i < c.cache_blocks; i++)
        b->free_stack[i] = c.cache_blocks - 1 - i;
    b->n_free = c.cache_blocks;
    init_weights(b, fp);
#if BUG != 11
    make_digest(b, fp);
#endif
    pthread_mutex_init(&b->mu, NULL);
    pthread_mutex_init(&b->err_mu, NULL);
#if BUG == 5
    if (host && host->log) {
#else
    if (host && host->struct_size >= offsetof(ilab_host_t, log) + sizeof host->log && host->log) {
#endif
        snprintf(msg, sizeof msg, "instance created: %d blocks of %d positions", c.cache_blocks,
                 BLOCK);
        host->log(host, ILAB_LOG_DEBUG, PLUGIN_NAME, msg);
    }
#if BUG == 6
    if (ilab_debug_trace)
        ilab_debug_trace("create");
#endif
    *out = b;
    return ILAB_OK;
}

static void sb_destroy(ilab_backend_t *b)
{
    if (!b)
        return;
    for (int i = 0; i < b->cfg.max_seqs; i++)
        free(b->seqs[i].blk);
    free(b->seqs);
    free(b->kv);
#if BUG != 9
    free(b->refcnt);
#endif
    free(b->free_stack);
    pthread_mutex_destroy(&b->mu);
    pthread_mutex_destroy(&b->err_mu);
    free(b);
}

static size_t sb_last_error(const ilab_backend_t *b, char *buf, size_t cap)
{
    if (!b) {
        if (buf && cap)
            buf[0] = '\0';
        return 0;
    }
    ilab_backend_t *m = (ilab_backend_t *)b;
    pthread_mutex_lock(&m->err_mu);
    size_t len = strlen(m->err);
    size_t n = 0;
    if (buf && cap) {
        n = len < cap - 1 ? len : cap - 1;
        memcpy(buf, m->err, n);
        buf[n] = '\0';
    }
    pthread_mutex_unlock(&m->err_mu);
#if BUG == 54
    return buf && cap ? n : len;
#else
    return len;
#endif
}

static ilab_status sb_model_info(ilab_backend_t *b, ilab_model_info_t *info)
{
    if (!b || !info)
        return fail(b, ILAB_INVALID_ARGUMENT, "model_info: NULL argument");
#if BUG == 3
    if (info->struct_size < offsetof(ilab_model_info_t, name))
#else
    if (info->struct_size < ILAB_MODEL_INFO_SIZE_1_0)
#endif
        return fail(b, ILAB_ABI_MISMATCH, "model_info: struct_size %u is smaller than ABI 1.0's %u",
                    info->struct_size, ILAB_MODEL_INFO_SIZE_1_0);
    ilab_model_info_t full;
    memset(&full, 0, sizeof full);
#if BUG == 2
    full.struct_size = sizeof full;
#else
    full.struct_size = info->struct_size;
#endif
#if BUG == 17
    full.vocab_size = VOCAB - 1;
#else
    full.vocab_size = VOCAB;
#endif
    full.bos_id = BOS;
    full.eos_id = EOS;
    full.max_context = MAX_CTX;
    memcpy(full.name, b->cfg.model_name, sizeof full.name);
    memcpy(full.digest, b->digest, sizeof full.digest);
    size_t n = info->struct_size < sizeof full ? info->struct_size : sizeof full;
    memcpy(info, &full, n);
    return ILAB_OK;
}

/* --- tokenizer ------------------------------------------------------------------ */

static int utf8_len(unsigned char c)
{
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        return 2;
    if (c >= 0xE0 && c <= 0xEF)
        return 3;
    if (c >= 0xF0 && c <= 0xF4)
        return 4;
    return 1;
}

#if BUG == 58
static uint16_t *scratch_units;
static size_t scratch_cap;
#endif

/* Encode s[0..n) (no specials in it), with the dummy prefix when `prefix`,
 * appending to out. Returns the count, or (size_t)-1 when out of memory. */
static size_t encode_text(const unsigned char *s, size_t n, int prefix, int32_t *out)
{
#if BUG == 18
    n = strnlen((const char *)s, n);
#endif
#if BUG == 22
    prefix = prefix ? 1 : 0;
#else
    prefix = prefix && n > 0;
#endif
    size_t nu = n + (size_t)prefix;
#if BUG == 58
    if (scratch_cap < nu + 1) {
        uint16_t *nb = realloc(scratch_units, (nu + 1) * sizeof *nb);
        if (!nb)
            return (size_t)-1;
        scratch_units = nb;
        scratch_cap = nu + 1;
    }
    uint16_t *u = scratch_units;
#else
    uint16_t *u = malloc((nu + 1) * sizeof *u);
    if (!u)
        return (size_t)-1;
#endif
    size_t k = 0;
    if (prefix)
        u[k++] = MARK;
    for (size_t i = 0; i < n; i++)
        u[k++] = s[i] == ' ' ? MARK : s[i];
    size_t count = 0;
    for (size_t i = 0; i < nu;) {
        int best = -1, best_len = 0;
        for (int p = bucket[u[i]]; p >= 0; p = ptab[p].next) {
            int m = ptab[p].n_units;
            if (m <= best_len || (size_t)m > nu - i)
                continue;
            if (!memcmp(ptab[p].units, u + i, (size_t)m * sizeof *u)) {
                best = p;
                best_len = m;
            }
        }
        if (best >= 0) {
            out[count++] = PIECE0 + best;
            i += (size_t)best_len;
            continue;
        }
        /* byte fallback: every byte of the character */
        size_t src = i - (size_t)prefix; /* u[i] is a raw byte here, never the prefix */
        size_t cl = (size_t)utf8_len(s[src]);
#if BUG != 21
        if (cl > n - src)
            cl = n - src;
#endif
        for (size_t j = 0; j < cl; j++)
            out[count++] = BYTE0 + s[src + j];
        i += cl;
    }
#if BUG != 58
    free(u);
#endif
    return count;
}

static const int chat_specials[] = {IM_START, IM_END, END};

static ilab_status sb_tokenize(ilab_backend_t *b, const char *text, size_t len, uint32_t flags,
                               int32_t *tokens, size_t cap, size_t *n_tokens)
{
#if BUG == 53
    if (!b || !n_tokens || (!tokens && cap))
#else
    if (!b || (!text && len) || !n_tokens || (!tokens && cap))
#endif
        return fail(b, ILAB_INVALID_ARGUMENT, "tokenize: NULL argument");
    uint32_t known = ILAB_TOKENIZE_ADD_BOS | ILAB_TOKENIZE_ADD_EOS | ILAB_TOKENIZE_PARSE_SPECIAL;
    if (flags & ~known)
        return fail(b, ILAB_INVALID_ARGUMENT, "tokenize: unknown flag bits 0x%x",
                    (unsigned)(flags & ~known));
    if (len > ((size_t)1 << 40))
        return fail(b, ILAB_INVALID_ARGUMENT, "tokenize: len %zu is absurd", len);
    const unsigned char *s = (const unsigned char *)text;
    int32_t *tmp = malloc((len + 8) * sizeof *tmp);
    if (!tmp)
        return fail(b, ILAB_OUT_OF_MEMORY, "tokenize: out of memory");
    size_t n = 0;
    if (flags & ILAB_TOKENIZE_ADD_BOS)
        tmp[n++] = BOS;
#if BUG == 26
    int prefix = b->cfg.add_prefix && !(flags & ILAB_TOKENIZE_ADD_BOS);
#else
    int prefix = b->cfg.add_prefix;
#endif
#if BUG == 29
    int parse_special = (flags & ILAB_TOKENIZE_ADD_EOS) != 0;
#else
    int parse_special = (flags & ILAB_TOKENIZE_PARSE_SPECIAL) != 0;
#endif
#if BUG == 28
    if (prefix && parse_special && len > 0) {
        tmp[n++] = PIECE0; /* "▁" */
        prefix = 0;
    }
#endif
    size_t seg = 0; /* start of the current plain-text segment */
    size_t i = 0;
    while (parse_special && i < len) {
        int hit = -1;
        size_t hit_len = 0;
        for (size_t k = 0; k < sizeof chat_specials / sizeof chat_specials[0]; k++) {
            const char *sp = special_text[chat_specials[k]];
            size_t sl = strlen(sp);
            if (sl <= len - i && sl > hit_len && !memcmp(s + i, sp, sl)) {
                hit = chat_specials[k];
                hit_len = sl;
            }
        }
        if (hit < 0) {
            i++;
            continue;
        }
        if (i > seg) {
            size_t c = encode_text(s + seg, i - seg, prefix && seg == 0, tmp + n);
            if (c == (size_t)-1) {
                free(tmp);
                return fail(b, ILAB_OUT_OF_MEMORY, "tokenize: out of memory");
            }
            n += c;
        }
        tmp[n++] = hit;
        i += hit_len;
        seg = i;
    }
    if (len > seg || (len == 0)) {
        size_t c = encode_text(s + seg, len - seg, prefix && seg == 0, tmp + n);
        if (c == (size_t)-1) {
            free(tmp);
            return fail(b, ILAB_OUT_OF_MEMORY, "tokenize: out of memory");
        }
        n += c;
    }
    if (flags & ILAB_TOKENIZE_ADD_EOS)
        tmp[n++] = EOS;
    if (cap < n) {
#if BUG == 24
        if (tokens)
            memcpy(tokens, tmp, cap * sizeof *tokens); /* as many as fit */
#endif
        free(tmp);
        *n_tokens = n;
        return fail(b, ILAB_BUFFER_TOO_SMALL, "tokenize: %zu tokens needed, room for %zu", n, cap);
    }
    memcpy(tokens, tmp, n * sizeof *tokens);
    free(tmp);
    *n_tokens = n;
    return ILAB_OK;
}

/* The bytes of token t, before the dummy-prefix rule. */
static const char *token_text(int32_t t, size_t *len, char *byte)
{
    if (t < BYTE0) {
#if BUG == 27
        if (t == EOS) {
            *len = 4;
            return "</s>";
        }
#endif
        *len = strlen(special_text[t]);
        return special_text[t];
    }
    if (t < PIECE0) {
        *byte = (char)(t - BYTE0);
        *len = 1;
        return byte;
    }
    *len = (size_t)ptab[t - PIECE0].text_len;
    return ptab[t - PIECE0].text;
}

/* The text token t adds after prev (-1 at the start): the leading space of
 * the first token, or of the first after BOS, is the dummy prefix. */
static const char *piece_after(const ilab_backend_t *b, int32_t prev, int32_t t, size_t *len,
                               char *byte)
{
    const char *p = token_text(t, len, byte);
#if BUG == 20
    if ((prev == -1 || prev == BOS) && *len && p[0] == ' ') {
#else
    if (b->cfg.add_prefix && (prev == -1 || prev == BOS) && *len && p[0] == ' ') {
#endif
        p++;
        (*len)--;
    }
    (void)b;
    return p;
}

static ilab_status sb_detokenize(ilab_backend_t *b, const int32_t *tokens, size_t n_tokens,
                                 char *text, size_t cap, size_t *len)
{
    if (!b || (!tokens && n_tokens) || !len || (!text && cap))
        return fail(b, ILAB_INVALID_ARGUMENT, "detokenize: NULL argument");
    char byte;
    size_t need = 0, pl;
#if BUG == 23
    /* one pass: write while checking */
    size_t w = 0;
    for (size_t i = 0; i < n_tokens; i++) {
        if (tokens[i] < 0 || tokens[i] >= VOCAB)
            return fail(b, ILAB_INVALID_ARGUMENT, "detokenize: token %d at %zu is not in [0, %d)",
                        tokens[i], i, VOCAB);
        const char *p = piece_after(b, i ? tokens[i - 1] : -1, tokens[i], &pl, &byte);
        if (w + pl < cap) {
            memcpy(text + w, p, pl);
            w += pl;
        }
        need += pl;
    }
#else
    for (size_t i = 0; i < n_tokens; i++) {
        if (tokens[i] < 0 || tokens[i] >= VOCAB)
            return fail(b, ILAB_INVALID_ARGUMENT, "detokenize: token %d at %zu is not in [0, %d)",
                        tokens[i], i, VOCAB);
        piece_after(b, i ? tokens[i - 1] : -1, tokens[i], &pl, &byte);
        need += pl;
    }
#endif
#if BUG == 25
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
        const char *p = piece_after(b, i ? tokens[i - 1] : -1, tokens[i], &pl, &byte);
        memcpy(text + n, p, pl);
        n += pl;
    }
    text[n] = '\0';
    *len = n;
    return ILAB_OK;
}

static ilab_status sb_token_piece(ilab_backend_t *b, int32_t prev, int32_t token, char *piece,
                                  size_t cap, size_t *len)
{
    if (!b || !len || (!piece && cap))
        return fail(b, ILAB_INVALID_ARGUMENT, "token_piece: NULL argument");
    if (prev < -1 || prev >= VOCAB || token < 0 || token >= VOCAB)
        return fail(b, ILAB_INVALID_ARGUMENT, "token_piece: token %d after %d: not in [0, %d)",
                    token, prev, VOCAB);
    char byte;
    size_t pl;
#if BUG == 19
    const char *p = piece_after(b, prev == BOS ? 0 : prev, token, &pl, &byte);
#else
    const char *p = piece_after(b, prev, token, &pl, &byte);
#endif
    if (cap < pl + 1) {
        *len = pl;
        return fail(b, ILAB_BUFFER_TOO_SMALL, "token_piece: %zu bytes + NUL needed, room for %zu",
                    pl, cap);
    }
    memcpy(piece, p, pl);
    piece[pl] = '\0';
    *len = pl;
    return ILAB_OK;
}

/* --- chat ------------------------------------------------------------------------ */

#if BUG == 30
static const int32_t eog_set[] = {IM_END, EOS, END}; /* ascending */
#else
static const int32_t eog_set[] = {EOS, IM_END, END}; /* EOS first, then ascending */
#endif

static ilab_status sb_eog_ids(ilab_backend_t *b, int32_t *ids, size_t cap, size_t *n_ids)
{
    if (!b || !n_ids || (!ids && cap))
        return fail(b, ILAB_INVALID_ARGUMENT, "eog_ids: NULL argument");
    size_t n = sizeof eog_set / sizeof eog_set[0];
    if (cap < n) {
        *n_ids = n;
        return fail(b, ILAB_BUFFER_TOO_SMALL, "eog_ids: %zu ids needed, room for %zu", n, cap);
    }
    memcpy(ids, eog_set, sizeof eog_set);
    *n_ids = n;
    return ILAB_OK;
}

static const char chat_tmpl[] =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}";

static ilab_status sb_chat_template(ilab_backend_t *b, char *text, size_t cap, size_t *len)
{
    if (!b || !len || (!text && cap))
        return fail(b, ILAB_INVALID_ARGUMENT, "chat_template: NULL argument");
    size_t n = sizeof chat_tmpl - 1;
#if BUG == 31
    if (cap < n) {
#else
    if (cap < n + 1) {
#endif
        *len = n;
        return fail(b, ILAB_BUFFER_TOO_SMALL, "chat_template: %zu bytes + NUL needed, room for %zu",
                    n, cap);
    }
    memcpy(text, chat_tmpl, n);
    text[n] = '\0';
    *len = n;
    return ILAB_OK;
}

/* --- sequences and the block pool (b->mu held) ------------------------------------ */

static sequence *lookup(ilab_backend_t *b, ilab_seq_t h)
{
    if (h == ILAB_SEQ_NONE)
        return NULL;
    for (int i = 0; i < b->cfg.max_seqs; i++)
        if (b->seqs[i].in_use && b->seqs[i].handle == h)
            return &b->seqs[i];
    return NULL;
}

static int32_t block_alloc(ilab_backend_t *b)
{
    int32_t k = b->free_stack[--b->n_free];
    b->refcnt[k] = 1;
    return k;
}

static void block_release(ilab_backend_t *b, int32_t k)
{
    if (--b->refcnt[k] == 0)
        b->free_stack[b->n_free++] = k;
}

static kv_entry *entry_at(ilab_backend_t *b, const sequence *s, int32_t pos)
{
    return &b->kv[(size_t)s->blk[pos / BLOCK] * BLOCK + (size_t)(pos % BLOCK)];
}

static sequence *free_slot(ilab_backend_t *b)
{
    for (int i = 0; i < b->cfg.max_seqs; i++)
        if (!b->seqs[i].in_use)
            return &b->seqs[i];
    return NULL;
}

static ilab_status sb_seq_create(ilab_backend_t *b, ilab_seq_t *out)
{
    if (!b || !out)
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_create: NULL argument");
    int32_t *blk = malloc(MAX_BLK * sizeof *blk);
    if (!blk)
        return fail(b, ILAB_OUT_OF_MEMORY, "seq_create: out of memory");
#if BUG != 57
    pthread_mutex_lock(&b->mu);
#endif
    sequence *s = free_slot(b);
    if (!s) {
#if BUG != 57
        pthread_mutex_unlock(&b->mu);
#endif
        free(blk);
        return fail(b, ILAB_OUT_OF_MEMORY, "seq_create: all %d sequence slots are in use",
                    b->cfg.max_seqs);
    }
    s->in_use = 1;
    s->handle = ++b->next_handle;
    s->len = 0;
    s->n_blk = 0;
    s->blk = blk;
    *out = s->handle;
#if BUG != 57
    pthread_mutex_unlock(&b->mu);
#endif
    return ILAB_OK;
}

static ilab_status sb_seq_free(ilab_backend_t *b, ilab_seq_t h)
{
    if (!b)
        return ILAB_INVALID_ARGUMENT;
    pthread_mutex_lock(&b->mu);
    sequence *s = lookup(b, h);
    if (!s) {
        pthread_mutex_unlock(&b->mu);
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_free: stale or unknown sequence %llu",
                    (unsigned long long)h);
    }
    for (int32_t i = 0; i < s->n_blk; i++)
        block_release(b, s->blk[i]);
    int32_t *blk = s->blk;
    s->blk = NULL;
    s->in_use = 0;
    s->handle = 0;
    s->len = s->n_blk = 0;
    pthread_mutex_unlock(&b->mu);
    free(blk);
    return ILAB_OK;
}

static ilab_status sb_seq_fork(ilab_backend_t *b, ilab_seq_t parent, ilab_seq_t *child)
{
    if (!b || !child)
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_fork: NULL argument");
    int32_t *blk = malloc(MAX_BLK * sizeof *blk);
    if (!blk)
        return fail(b, ILAB_OUT_OF_MEMORY, "seq_fork: out of memory");
    pthread_mutex_lock(&b->mu);
    sequence *p = lookup(b, parent);
    if (!p) {
        pthread_mutex_unlock(&b->mu);
        free(blk);
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_fork: stale or unknown parent %llu",
                    (unsigned long long)parent);
    }
#if BUG == 50
    for (int32_t i = 0; i < p->n_blk; i++) /* the child shares every block */
        b->refcnt[p->blk[i]]++;
#endif
    sequence *c = free_slot(b);
    if (!c) {
        pthread_mutex_unlock(&b->mu);
        free(blk);
        return fail(b, ILAB_OUT_OF_MEMORY, "seq_fork: all %d sequence slots are in use",
                    b->cfg.max_seqs);
    }
#if BUG != 50
    for (int32_t i = 0; i < p->n_blk; i++) /* the child shares every block */
        b->refcnt[p->blk[i]]++;
#endif
    memcpy(blk, p->blk, (size_t)p->n_blk * sizeof *blk);
    c->in_use = 1;
    c->handle = ++b->next_handle;
    c->len = p->len;
    c->n_blk = p->n_blk;
    c->blk = blk;
    *child = c->handle;
    pthread_mutex_unlock(&b->mu);
    return ILAB_OK;
}

static ilab_status sb_seq_truncate(ilab_backend_t *b, ilab_seq_t h, int32_t n_keep)
{
    if (!b)
        return ILAB_INVALID_ARGUMENT;
    pthread_mutex_lock(&b->mu);
    sequence *s = lookup(b, h);
    if (!s) {
        pthread_mutex_unlock(&b->mu);
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_truncate: stale or unknown sequence %llu",
                    (unsigned long long)h);
    }
    if (n_keep < 0 || n_keep > s->len) {
        int32_t len = s->len;
        pthread_mutex_unlock(&b->mu);
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_truncate: n_keep %d is not in [0, %d]", n_keep,
                    len);
    }
#if BUG == 42
    int32_t keep = n_keep / BLOCK;
#else
    int32_t keep = (n_keep + BLOCK - 1) / BLOCK;
#endif
    for (int32_t i = keep; i < s->n_blk; i++)
        block_release(b, s->blk[i]);
    s->n_blk = keep;
    s->len = n_keep;
    pthread_mutex_unlock(&b->mu);
    return ILAB_OK;
}

static ilab_status sb_seq_length(ilab_backend_t *b, ilab_seq_t h, int32_t *length)
{
    if (!b || !length)
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_length: NULL argument");
    pthread_mutex_lock(&b->mu);
    sequence *s = lookup(b, h);
    if (!s) {
        pthread_mutex_unlock(&b->mu);
#if BUG == 51
        return ILAB_INVALID_ARGUMENT;
#else
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_length: stale or unknown sequence %llu",
                    (unsigned long long)h);
#endif
    }
#if BUG == 48
    *length = s->n_blk * BLOCK;
#else
    *length = s->len;
#endif
    pthread_mutex_unlock(&b->mu);
    return ILAB_OK;
}

__attribute__((unused)) static ilab_status sb_cache_stats(ilab_backend_t *b, ilab_cache_stats_t *st)
{
    if (!b || !st)
        return fail(b, ILAB_INVALID_ARGUMENT, "cache_stats: NULL argument");
    if (st->struct_size < ILAB_CACHE_STATS_SIZE_1_1)
        return fail(b, ILAB_ABI_MISMATCH, "cache_stats: struct_size %u is smaller than ABI 1.1's %u",
                    st->struct_size, ILAB_CACHE_STATS_SIZE_1_1);
    ilab_cache_stats_t now;
    memset(&now, 0, sizeof now);
    now.struct_size = st->struct_size;
    now.block_size = BLOCK;
    now.total_positions = (int64_t)b->cfg.cache_blocks * BLOCK;
    pthread_mutex_lock(&b->mu);
#if BUG == 49
    int64_t held = 0;
    for (int i = 0; i < b->cfg.max_seqs; i++)
        if (b->seqs[i].in_use)
            held += b->seqs[i].len;
    now.free_positions = now.total_positions - held;
#else
    now.free_positions = (int64_t)b->n_free * BLOCK;
#endif
    pthread_mutex_unlock(&b->mu);
    memcpy(st, &now, st->struct_size < sizeof now ? st->struct_size : sizeof now);
    return ILAB_OK;
}

/* --- evaluation ----------------------------------------------------------------------- */

static void step(const ilab_backend_t *b, const kv_entry *prev, uint64_t h_start, int32_t tok,
                 int32_t pos, kv_entry *out)
{
    uint64_t h = prev ? prev->h : h_start;
    out->h = mix(h ^ ((uint64_t)(tok + 1) * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)pos << 40));
    for (int d = 0; d < DIM; d++)
        out->acc[d] = (prev ? 0.75f * prev->acc[d] : 0.0f) + b->emb[tok * DIM + d];
}

static void logits_row(const ilab_backend_t *b, const kv_entry *e, float *row)
{
#if BUG == 32
    for (int v = 0; v <= VOCAB; v++) {
#else
    for (int v = 0; v < VOCAB; v++) {
#endif
        float s = b->bias[v % VOCAB];
        for (int d = 0; d < DIM; d++)
            s += b->w[(v % VOCAB) * DIM + d] * e->acc[d];
        s += 0.5f * unit_float(mix(e->h ^ (uint64_t)v));
        row[v] = s * b->cfg.logit_scale;
    }
}

typedef struct plan {
    sequence *s;
    int32_t old_len;
} plan;

static ilab_status check_item(ilab_backend_t *b, const ilab_batch_item_t *it, size_t i,
                              sequence **out)
{
    if (!it)
        return fail(b, ILAB_INVALID_ARGUMENT, "eval: item %zu is NULL", i);
#if BUG == 4
    if (it->struct_size < ILAB_BATCH_ITEM_SIZE_1_0)
#else
    if (it->struct_size < ILAB_BATCH_ITEM_SIZE_1_0 || !ilab_struct_tail_is_zero(it, sizeof *it))
#endif
        return fail(b, ILAB_ABI_MISMATCH,
                    "eval: ilab_batch_item_t %zu has struct_size %u (ABI 1.0's is %u, this "
                    "plugin's %zu) or sets members it does not know", i, it->struct_size,
                    ILAB_BATCH_ITEM_SIZE_1_0, sizeof *it);
    if (it->flags & ~(uint32_t)ILAB_EVAL_ALL_LOGITS)
        return fail(b, ILAB_INVALID_ARGUMENT, "eval: item %zu has unknown flag bits 0x%x", i,
                    it->flags);
    sequence *s = lookup(b, it->seq);
#if BUG == 47
    (void)0; /* the handle is checked when the item is applied */
#else
    if (!s)
        return fail(b, ILAB_INVALID_ARGUMENT, "eval: item %zu names a stale or unknown sequence", i);
#endif
#if BUG == 38
    if (!it->tokens || it->n_tokens < 0)
#else
    if (!it->tokens || it->n_tokens < 1)
#endif
        return fail(b, ILAB_INVALID_ARGUMENT, "eval: item %zu has no tokens", i);
    for (int32_t t = 0; t < it->n_tokens; t++)
        if (it->tokens[t] < 0 || it->tokens[t] >= VOCAB)
            return fail(b, ILAB_INVALID_ARGUMENT, "eval: item %zu token %d is %d, not in [0, %d)", i,
                        t, it->tokens[t], VOCAB);
#if BUG == 47
    if (s && it->n_tokens > MAX_CTX - s->len)
#elif BUG == 43
    if (it->n_tokens >= MAX_CTX - s->len)
#else
    if (it->n_tokens > MAX_CTX - s->len)
#endif
        return fail(b, ILAB_CONTEXT_OVERFLOW, "eval: item %zu: %d + %d positions pass max_context %d",
                    i, s->len, it->n_tokens, MAX_CTX);
    *out = s;
    return ILAB_OK;
}

static ilab_status sb_eval(ilab_backend_t *b, const ilab_batch_item_t *const *items, size_t n_items)
{
    if (!b || !items)
        return fail(b, ILAB_INVALID_ARGUMENT, "eval: NULL argument");
#if BUG == 37
    if (n_items == 0 || n_items >= MAX_BATCH)
#else
    if (n_items == 0 || n_items > MAX_BATCH)
#endif
        return fail(b, ILAB_INVALID_ARGUMENT, "eval: n_items %zu is not in [1, %d]", n_items,
                    MAX_BATCH);
    plan *pl = malloc(n_items * sizeof *pl);
    if (!pl)
        return fail(b, ILAB_OUT_OF_MEMORY, "eval: out of memory");
    ilab_status st = ILAB_OK;
    pthread_mutex_lock(&b->mu);
    /* 1. check every item before changing anything (all-or-nothing) */
    for (size_t i = 0; i < n_items; i++) {
        st = check_item(b, items[i], i, &pl[i].s);
#if BUG == 45
        if (st == ILAB_CONTEXT_OVERFLOW) {
            pthread_mutex_unlock(&b->mu);
            return st;
        }
#endif
        if (st != ILAB_OK)
            goto out;
        for (size_t j = 0; j < i; j++)
            if (items[j]->seq == items[i]->seq) {
                st = fail(b, ILAB_INVALID_ARGUMENT, "eval: items %zu and %zu name one sequence", j, i);
                goto out;
            }
    }
    /* 2. blocks needed: new blocks, plus a copy of a shared partial last block */
    {
        int64_t need = 0;
        int32_t cow_blk[MAX_BATCH];
        int cow_n = 0;
        for (size_t i = 0; i < n_items; i++) {
            sequence *s = pl[i].s;
#if BUG == 47
            if (!s)
                continue;
#endif
            int32_t len = s->len, n = items[i]->n_tokens;
            need += (len + n + BLOCK - 1) / BLOCK - (len + BLOCK - 1) / BLOCK;
            if (len % BLOCK) {
                int32_t last = s->blk[s->n_blk - 1];
                int pending = 0;
                for (int k = 0; k < cow_n; k++)
                    pending += cow_blk[k] == last;
                if (b->refcnt[last] - pending > 1) {
                    need++;
                    cow_blk[cow_n++] = last;
                }
            }
        }
        if (need > b->n_free) {
            st = fail(b, ILAB_OUT_OF_MEMORY,
                      "eval: the batch needs %lld cache blocks, %d are free", (long long)need,
                      b->n_free);
            goto out;
        }
    }
    /* 3. structural changes */
    for (size_t i = 0; i < n_items; i++) {
        sequence *s = pl[i].s;
#if BUG == 47
        if (!s) {
            st = fail(b, ILAB_INVALID_ARGUMENT, "eval: item %zu names a stale or unknown sequence", i);
            goto out;
        }
#endif
        int32_t len = s->len, n = items[i]->n_tokens;
#if BUG != 41
        if (len % BLOCK && b->refcnt[s->blk[s->n_blk - 1]] > 1) { /* copy on write */
            int32_t old = s->blk[s->n_blk - 1], nb = block_alloc(b);
            memcpy(&b->kv[(size_t)nb * BLOCK], &b->kv[(size_t)old * BLOCK],
                   (size_t)(len % BLOCK) * sizeof(kv_entry));
            block_release(b, old);
            s->blk[s->n_blk - 1] = nb;
        }
#endif
        while (s->n_blk * BLOCK < len + n)
            s->blk[s->n_blk++] = block_alloc(b);
        pl[i].old_len = len;
        s->len = len + n;
    }
    pthread_mutex_unlock(&b->mu);

    /* 4. compute, outside the lock: each sequence's new positions are its own */
#if BUG == 35
    kv_entry cur = {0};
#endif
    for (size_t i = 0; i < n_items; i++) {
        const ilab_batch_item_t *it = items[i];
        sequence *s = pl[i].s;
        int32_t pos = pl[i].old_len;
#if BUG == 59
        kv_entry *st_ = &b->scratch;
#elif BUG == 35
        kv_entry *st_ = &cur;
#else
        kv_entry cur;
        kv_entry *st_ = &cur;
#endif
        const kv_entry *prev = NULL;
#if BUG == 39
        if (pos > 0)
            prev = &b->kv[(size_t)s->blk[pos / BLOCK] * BLOCK + (size_t)((pos - 1) % BLOCK)];
#elif BUG == 35
        if (pos > 0)
            prev = entry_at(b, s, pos - 1);
        else if (i > 0)
            prev = st_; /* continue from the running state */
#else
        if (pos > 0)
            prev = entry_at(b, s, pos - 1);
#endif
#if BUG == 46
        if (pos > 0 && b->memo_len == pos)
            prev = &b->memo_state; /* the state we just computed */
#endif
#if BUG == 34
        uint64_t h_start = b->h0 ^ (uint64_t)(s - b->seqs);
#else
        uint64_t h_start = b->h0;
#endif
        int all = (it->flags & ILAB_EVAL_ALL_LOGITS) != 0;
        for (int32_t t = 0; t < it->n_tokens; t++, pos++) {
            kv_entry next;
#if BUG == 40
            step(b, prev, h_start, it->tokens[t], t, &next);
#else
            step(b, prev, h_start, it->tokens[t], pos, &next);
#endif
            *st_ = next;
            *entry_at(b, s, pos) = *st_;
            prev = entry_at(b, s, pos);
            if (it->logits && (all || t == it->n_tokens - 1)) {
#if BUG == 36
                float *row = it->logits + (all ? (size_t)pos * VOCAB : 0);
#else
                float *row = it->logits + (all ? (size_t)t * VOCAB : 0);
#endif
                logits_row(b, st_, row);
            }
        }
#if BUG == 46
        b->memo_len = pos;
        b->memo_state = *st_;
#endif
#if BUG == 11
        if (!b->digest[0]) { /* computed once the weights have been used */
            uint64_t fp;
            read_weights(&b->cfg, &fp);
            make_digest(b, fp);
        }
#endif
    }
    free(pl);
    return ILAB_OK;
out:
    pthread_mutex_unlock(&b->mu);
    free(pl);
    return st;
}

/* --- not declared: fail closed ----------------------------------------------------------- */

static ilab_status sb_generate(ilab_backend_t *b, const ilab_generate_request_t *request,
                               ilab_event_fn on_event, void *user_data)
{
    static const char msg[] = "generate: capability 'sampling: backend' not declared "
                              "(this backend samples on the host)";
    if (on_event) {
        ilab_event_t ev;
        memset(&ev, 0, sizeof ev);
        ev.struct_size = sizeof ev;
        ev.type = ILAB_EVENT_ERROR;
        ev.request_id = request ? request->request_id : 0;
        ev.finish_reason = ILAB_FINISH_ERROR;
        ev.status = ILAB_UNSUPPORTED;
        ev.message = msg;
        on_event(user_data, &ev);
    }
    return fail(b, ILAB_UNSUPPORTED, "%s", msg);
}

static ilab_status sb_cancel(ilab_backend_t *b, uint64_t request_id)
{
#if BUG == 52
    (void)request_id;
    (void)b;
    return ILAB_OK; /* nothing is ever running */
#else
    return fail(b, ILAB_UNSUPPORTED, "cancel: capability 'cancel' not declared (request %llu)",
                (unsigned long long)request_id);
#endif
}

#if BUG == 10
ILAB_PLUGIN_EXPORT int spm_blocks_selftest(void)
{
    pthread_once(&tables_once, build_tables);
    return ptab[0].n_units == 1 ? 0 : 1;
}
#endif

static const ilab_backend_api_t api = {
    .struct_size = sizeof(ilab_backend_api_t),
    .probe = sb_probe,
    .create = sb_create,
    .destroy = sb_destroy,
    .last_error = sb_last_error,
    .model_info = sb_model_info,
    .tokenize = sb_tokenize,
    .detokenize = sb_detokenize,
    .token_piece = sb_token_piece,
    .seq_create = sb_seq_create,
    .seq_free = sb_seq_free,
    .seq_fork = sb_seq_fork,
    .seq_truncate = sb_seq_truncate,
    .seq_length = sb_seq_length,
    .eval = sb_eval,
    .generate = sb_generate,
    .cancel = sb_cancel,
#if BUG != 8
    .cache_stats = sb_cache_stats,
#endif
    .eog_ids = sb_eog_ids,
    .chat_template = sb_chat_template,
};

ILAB_PLUGIN_EXPORT const ilab_plugin_entry_t ilab_plugin_entry = {
#if BUG == 1
    .struct_size = sizeof(ilab_host_t),
#else
    .struct_size = sizeof(ilab_plugin_entry_t),
#endif
    .abi_major = 1,
    .abi_minor = 2,
    .name = PLUGIN_NAME,
#if BUG == 7
    .version = "0.3.2",
#else
    .version = PLUGIN_VERSION,
#endif
    .manifest_yaml = manifest,
    .backend = &api,
};
