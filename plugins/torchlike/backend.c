/* torchlike — the plugin glue: ilab_backend_api_t over the model, the
 * tokenizer and the KV cache, plus the bootstrap entry.
 *
 * Thread safety (manifest: sequence): one mutex serialises everything that
 * touches sequences or the cache; the tokenizer and weights are read-only
 * after create(), so tokenize/detokenize/token_piece take no lock. */
#include <cblas.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "inferlab/inferlab.h"

#include "checkpoint.h"
#include "embedded.h"
#include "kv_cache.h"
#include "model.h"
#include "sha256.h" /* common/ */
#include "thread_pool.h"
#include "chat_vocab.h"
#include "tokenizer.h"
#include "vocab_gguf.h"

#ifndef TORCHLIKE_DEFAULT_MODEL_NAME
#define TORCHLIKE_DEFAULT_MODEL_NAME "random-default"
#endif

#define TL_MAX_BATCH 64

struct ilab_backend {
    const ilab_host_t *host;
    tl_model model;
    tl_tokenizer tok;
    tl_chat_vocab chat; /* ABI 1.2: end-of-generation ids, template, special tokens */
    tl_kv_cache kv;
    tl_thread_pool *pool;
    int threads;
    char name[64];

    pthread_mutex_t lock;       /* sequences, cache, evaluation, digest */
    char digest[80];            /* computed on first model_info() */

    ilab_last_error_t error;    /* last_error() may be read from any thread */
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

/* ---- configuration ------------------------------------------------------ */

typedef struct tl_settings {
    const char *model;     /* "" = embedded */
    const char *tokenizer; /* "" = embedded, or beside the model */
    const char *pre_tokenizer; /* "" = the GGUF file's tokenizer.ggml.pre */
    tl_dtype quantize;     /* TL_DTYPE_F32: as stored; TL_DTYPE_Q8_0 */
    long threads;
    long kv_blocks;
    long max_sequences;
    long max_context; /* cap on a sequence's positions; 0 = the model's context_length */
    long mlock;       /* 1: lock the mapped file in memory */
} tl_settings;

static int parse_long(const char *s, long *out)
{
    char *end;
    if (!s || !*s)
        return -1;
    long v = strtol(s, &end, 10);
    if (*end != '\0')
        return -1;
    *out = v;
    return 0;
}

static ilab_status read_settings(const ilab_config_entry_t *config, size_t n, tl_settings *s,
                                 char *err, size_t cap)
{
    *s = (tl_settings){"", "", "", TL_DTYPE_F32, 0, 0, 64, 4096, 0};
    if (n > 0 && !config) {
        snprintf(err, cap, "torchlike: config is NULL but n_config is %zu", n);
        return ILAB_INVALID_ARGUMENT;
    }
    static const struct { const char *key; long lo, hi; size_t off; } ints[] = {
        {"threads", 0, 256, offsetof(tl_settings, threads)},
        {"kv_blocks", 0, 1 << 24, offsetof(tl_settings, kv_blocks)},
        {"max_sequences", 1, 1 << 16, offsetof(tl_settings, max_sequences)},
        {"max_context", 0, 1 << 20, offsetof(tl_settings, max_context)},
        {"mlock", 0, 1, offsetof(tl_settings, mlock)},
    };
    for (size_t i = 0; i < n; i++) {
        const char *k = config[i].key, *v = config[i].value;
        if (!k || !v) {
            snprintf(err, cap, "torchlike: config entry %zu has a NULL key or value", i);
            return ILAB_INVALID_ARGUMENT;
        }
        if (strcmp(k, "model") == 0) {
            s->model = v;
            continue;
        }
        if (strcmp(k, "tokenizer") == 0) {
            s->tokenizer = v;
            continue;
        }
        if (strcmp(k, "pre_tokenizer") == 0) {
            s->pre_tokenizer = v;
            continue;
        }
        if (strcmp(k, "quantize") == 0) {
            if (strcmp(v, "none") == 0) {
                s->quantize = TL_DTYPE_F32;
            } else if (strcmp(v, "q8_0") == 0) {
                s->quantize = TL_DTYPE_Q8_0;
            } else {
                snprintf(err, cap, "torchlike: config key 'quantize' must be none or q8_0, got \"%s\"", v);
                return ILAB_INVALID_ARGUMENT;
            }
            continue;
        }
        size_t j;
        for (j = 0; j < sizeof ints / sizeof *ints; j++) {
            if (strcmp(k, ints[j].key) != 0)
                continue;
            long val;
            if (parse_long(v, &val) != 0 || val < ints[j].lo || val > ints[j].hi) {
                snprintf(err, cap, "torchlike: config key '%s' must be an integer in %ld..%ld, got \"%s\"",
                         k, ints[j].lo, ints[j].hi, v);
                return ILAB_INVALID_ARGUMENT;
            }
            *(long *)((char *)s + ints[j].off) = val;
            break;
        }
        if (j == sizeof ints / sizeof *ints) {
            snprintf(err, cap, "torchlike: unknown config key '%s' (known: model, tokenizer, pre_tokenizer, "
                     "quantize, threads, kv_blocks, max_sequences, max_context, mlock)", k);
            return ILAB_INVALID_ARGUMENT;
        }
    }
    return ILAB_OK;
}

/* "austen-tiny" for .../austen-tiny/model.bin, "stories15M" for stories15M.bin. */
static void name_from_path(const char *path, char *name, size_t cap)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t len = strcspn(base, ".");
    if (len == 5 && strncmp(base, "model", 5) == 0 && base > path + 1) {
        const char *dir_end = base - 1, *dir = dir_end;
        while (dir > path && dir[-1] != '/')
            dir--;
        if (dir_end > dir) {
            snprintf(name, cap, "%.*s", (int)(dir_end - dir), dir);
            return;
        }
    }
    snprintf(name, cap, "%.*s", (int)len, base);
}

/* ---- lifecycle ------------------------------------------------------------ */

/* A configured model or tokenizer file that cannot be read makes the backend
 * unavailable here; probe() and create() give the same reason (PRB-2). */
static ilab_status check_files_readable(const tl_settings *s, char *reason, size_t reason_cap)
{
    const char *files[2] = {s->model, s->tokenizer};
    for (int i = 0; i < 2; i++) {
        if (files[i][0] && access(files[i], R_OK) != 0) {
            snprintf(reason, reason_cap, "torchlike: %s file %s is not readable: %s",
                     i == 0 ? "model" : "tokenizer", files[i], strerror(errno));
            return ILAB_UNAVAILABLE;
        }
    }
    return ILAB_OK;
}

static ilab_status tl_probe(const ilab_host_t *host, const ilab_config_entry_t *config,
                            size_t n_config, char *reason, size_t reason_cap)
{
    char local[8];
    if (!reason || reason_cap == 0) {
        reason = local;
        reason_cap = sizeof local;
    }
    reason[0] = '\0';
    tl_settings s;
    ilab_status st = read_settings(config, n_config, &s, reason, reason_cap);
    if (st != ILAB_OK)
        return st;
    return check_files_readable(&s, reason, reason_cap);
}

static void tl_destroy(ilab_backend_t *b);

static const char *arch_name(tl_arch a)
{
    switch (a) {
    case TL_ARCH_QWEN2: return "qwen2";
    case TL_ARCH_QWEN3: return "qwen3";
    case TL_ARCH_PHI3: return "phi3";
    default: return "llama";
    }
}

#define MIB(bytes) ((double)(bytes) / (1024.0 * 1024.0))

/* What was loaded and what it costs, at INFO (`inferlab info` shows it):
 * the model's shape and tokenizer, then its memory: the weights read in
 * place from the file's mapping (page cache, shared), the private copies
 * made at load, and the KV cache reserved (its pages are touched as
 * sequences fill it). */
static void log_loaded_model(const ilab_backend_t *b, const tl_checkpoint *ck)
{
    const tl_model *m = &b->model;
    const tl_config *c = &m->cfg;
    char line[768];
    if (b->tok.kind == TL_TOKENIZER_BPE)
        snprintf(line, sizeof line, "model %s: %s, %d layers, dim %d, %d heads (%d KV), vocab %d, "
                 "context %d positions (trained for %d); tokenizer %s, pre-tokenizer %s",
                 ck->label, arch_name(c->arch), c->n_layers, c->dim, c->n_heads, c->n_kv_heads,
                 c->vocab_size, c->seq_len, c->context_length, tl_tokenizer_kind_name(&b->tok),
                 b->tok.pre);
    else
        snprintf(line, sizeof line, "model %s: %s, %d layers, dim %d, %d heads (%d KV), vocab %d, "
                 "context %d positions (trained for %d); tokenizer %s", ck->label,
                 arch_name(c->arch), c->n_layers, c->dim, c->n_heads, c->n_kv_heads, c->vocab_size,
                 c->seq_len, c->context_length, tl_tokenizer_kind_name(&b->tok));
    b->host->log(b->host, ILAB_LOG_INFO, "torchlike", line);
    size_t private_bytes = m->quantized_bytes + m->repacked_bytes +
                           m->ck.converted_floats * sizeof(float);
    snprintf(line, sizeof line, "memory: weights read in place from %.1f MiB %s, %.1f MiB of "
             "private copies (converted or repacked at load), KV cache %.1f MiB reserved for %d "
             "blocks of %d positions (its pages are taken as sequences grow)", MIB(m->ck.size),
             m->ck.mapping ? "of mapped file (page cache, shared)" : "embedded in the plugin",
             MIB(private_bytes), MIB(b->kv.mem_bytes), b->kv.n_blocks, TL_KV_BLOCK);
    b->host->log(b->host, ILAB_LOG_INFO, "torchlike", line);
}

static ilab_status tl_create(const ilab_host_t *host, const ilab_config_entry_t *config,
                             size_t n_config, char *error, size_t error_cap,
                             ilab_backend_t **out)
{
    char local[8];
    if (!error || error_cap == 0) {
        error = local;
        error_cap = sizeof local;
    }
    error[0] = '\0';
    if (!out || !host) {
        snprintf(error, error_cap, "torchlike: create: %s is NULL", out ? "host" : "out");
        return ILAB_INVALID_ARGUMENT;
    }
    tl_settings s;
    ilab_status st = read_settings(config, n_config, &s, error, error_cap);
    if (st == ILAB_OK)
        st = check_files_readable(&s, error, error_cap);
    if (st != ILAB_OK)
        return st;

    ilab_backend_t *b = calloc(1, sizeof *b);
    if (!b) {
        snprintf(error, error_cap, "torchlike: out of memory");
        return ILAB_OUT_OF_MEMORY;
    }
    b->host = host;
    pthread_mutex_init(&b->lock, NULL);
    ilab_last_error_init(&b->error);

    tl_checkpoint ck;
    if (s.model[0]) {
        st = tl_checkpoint_open(s.model, &ck, error, error_cap);
        name_from_path(s.model, b->name, sizeof b->name);
    } else {
        st = tl_checkpoint_from_memory(tl_embedded_model,
                                       (size_t)(tl_embedded_model_end - tl_embedded_model),
                                       "<embedded default>", &ck, error, error_cap);
        snprintf(b->name, sizeof b->name, "%s", TORCHLIKE_DEFAULT_MODEL_NAME);
    }
    if (st != ILAB_OK) {
        free(b);
        return st;
    }
    /* The KV cache and rotary tables are sized for seq_len positions: a
     * file's context_length (often 128k) capped by max_context. */
    if (s.max_context && ck.cfg.seq_len > s.max_context)
        ck.cfg.seq_len = (int)s.max_context;
    if (s.mlock && ck.mapping && mlock(ck.mapping, ck.size) != 0) {
        snprintf(error, error_cap, "torchlike: mlock of model %s (%zu bytes) failed: %s (config "
                 "key mlock; see ulimit -l)", ck.label, ck.size, strerror(errno));
        tl_checkpoint_close(&ck);
        free(b);
        return ILAB_UNAVAILABLE;
    }
    st = tl_model_init(&b->model, &ck, s.quantize, error, error_cap);
    if (st != ILAB_OK)
        goto fail; /* the model closed ck */

    if (s.tokenizer[0]) {
        st = tl_tokenizer_load_file(s.tokenizer, ck.cfg.vocab_size, ck.label, &b->tok,
                                    error, error_cap);
    } else if (b->model.ck.gguf) {
        st = tl_vocab_from_gguf(b->model.ck.gguf, ck.label, ck.cfg.vocab_size, s.pre_tokenizer,
                                &b->tok, error, error_cap);
    } else if (s.model[0]) {
        /* A user's model needs its own vocabulary: look beside it. */
        char path[4096];
        const char *slash = strrchr(s.model, '/');
        int dir_len = slash ? (int)(slash - s.model) + 1 : 0;
        snprintf(path, sizeof path, "%.*stokenizer.bin", dir_len, s.model);
        if (access(path, R_OK) != 0) {
            snprintf(error, error_cap, "torchlike: config key 'tokenizer' is empty and %s does not "
                     "exist; set tokenizer to the tokenizer.bin of model %s", path, s.model);
            st = ILAB_INVALID_ARGUMENT;
        } else {
            st = tl_tokenizer_load_file(path, ck.cfg.vocab_size, ck.label, &b->tok, error, error_cap);
        }
    } else {
        st = tl_tokenizer_load(tl_embedded_tokenizer,
                               (size_t)(tl_embedded_tokenizer_end - tl_embedded_tokenizer),
                               "<embedded default>", ck.cfg.vocab_size, ck.label, &b->tok,
                               error, error_cap);
    }
    if (st == ILAB_OK && s.pre_tokenizer && s.pre_tokenizer[0] && b->tok.kind == TL_TOKENIZER_SPM) {
        /* A setting that would change nothing is refused rather than ignored. */
        snprintf(error, error_cap, "torchlike: config key pre_tokenizer (\"%s\") is for byte-level "
                 "BPE vocabularies; the vocabulary of model %s is SentencePiece, which has no "
                 "pre-tokenizer: remove the setting", s.pre_tokenizer, ck.label);
        st = ILAB_INVALID_ARGUMENT;
    }
    if (st != ILAB_OK)
        goto fail;
    /* The token types and ids of a GGUF file describe its own vocabulary
     * only, not a tokenizer file given beside it. */
    st = tl_chat_vocab_init(&b->chat, s.tokenizer[0] ? NULL : b->model.ck.gguf, &b->tok, ck.label,
                            error, error_cap);
    if (st != ILAB_OK)
        goto fail;

    b->threads = (int)s.threads;
    if (b->threads == 0) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        b->threads = cpus < 1 ? 1 : cpus > 64 ? 64 : (int)cpus;
    }
    st = tl_thread_pool_create(b->threads, &b->pool);
    if (st != ILAB_OK) {
        snprintf(error, error_cap, "torchlike: cannot start %d threads", b->threads);
        goto fail;
    }
    /* OpenBLAS's thread count is process-wide; the last instance created wins. */
    openblas_set_num_threads(b->threads);

    int per_seq = (ck.cfg.seq_len + TL_KV_BLOCK - 1) / TL_KV_BLOCK;
    long blocks = s.kv_blocks ? s.kv_blocks : s.max_sequences * (long)per_seq;
    if (blocks > INT_MAX / 2)
        blocks = INT_MAX / 2;
    st = tl_kv_init(&b->kv, ck.cfg.n_layers, b->model.kv_dim, ck.cfg.seq_len, (int)blocks,
                    (int)s.max_sequences);
    if (st != ILAB_OK) {
        snprintf(error, error_cap, "torchlike: cannot reserve a KV cache of %ld blocks "
                 "(config key kv_blocks); try a smaller value", blocks);
        goto fail;
    }
    if (ILAB_STRUCT_HAS(ilab_host_t, host, log) && host->log) /* an older host may lack it [ABI-3] */
        log_loaded_model(b, &ck);
    *out = b;
    return ILAB_OK;
fail:
    tl_destroy(b);
    return st;
}

static void tl_destroy(ilab_backend_t *b)
{
    if (!b)
        return;
    tl_thread_pool_destroy(b->pool);
    if (b->kv.mem)
        tl_kv_destroy(&b->kv);
    tl_chat_vocab_free(&b->chat);
    tl_tokenizer_free(&b->tok);
    tl_model_close(&b->model);
    pthread_mutex_destroy(&b->lock);
    ilab_last_error_destroy(&b->error);
    free(b);
}

static size_t tl_last_error(const ilab_backend_t *b, char *buf, size_t cap)
{
    if (!b) {
        static const char msg[] = "torchlike: backend is NULL";
        if (buf && cap)
            snprintf(buf, cap, "%s", msg);
        return sizeof msg - 1;
    }
    return ilab_last_error_copy(&b->error, buf, cap);
}

/* SHA-256 of the model file. The embedded default's is computed once per
 * process: its bytes never change, and hashing 4 MB on every instance made
 * create/destroy loops slow. */
static void file_digest(const tl_checkpoint *ck, char hex[65])
{
    static pthread_mutex_t once_lock = PTHREAD_MUTEX_INITIALIZER;
    static char embedded_hex[65];
    if (ck->bytes != tl_embedded_model) {
        ilab_sha256_hex(ck->bytes, ck->size, hex);
        return;
    }
    pthread_mutex_lock(&once_lock);
    if (!embedded_hex[0])
        ilab_sha256_hex(ck->bytes, ck->size, embedded_hex);
    memcpy(hex, embedded_hex, 65);
    pthread_mutex_unlock(&once_lock);
}

static ilab_status tl_model_info(ilab_backend_t *b, ilab_model_info_t *info)
{
    if (!b)
        return ILAB_INVALID_ARGUMENT;
    if (!info)
        return fail(b, ILAB_INVALID_ARGUMENT, "model_info: info is NULL");
    if (info->struct_size < sizeof(ilab_model_info_t)) /* no ABI had a smaller one (ABI-3) */
        return fail(b, ILAB_ABI_MISMATCH, "model_info: struct_size %u is smaller than ABI 1.0's %zu",
                    info->struct_size, sizeof(ilab_model_info_t));
    pthread_mutex_lock(&b->lock);
    if (!b->digest[0]) {
        char hex[65];
        file_digest(&b->model.ck, hex);
        if (b->model.quantized) {
            /* Other weights than the file's: another digest, so that the
             * file's fp32 logits are never expected of them (DIF-1). */
            ilab_sha256 h;
            ilab_sha256_init(&h);
            ilab_sha256_update(&h, "quantize=q8_0:", 14);
            ilab_sha256_update(&h, hex, 64);
            ilab_sha256_final_hex(&h, hex);
        }
        snprintf(b->digest, sizeof b->digest, "sha256:%s", hex);
    }
    pthread_mutex_unlock(&b->lock);
    ilab_model_info_t full;
    memset(&full, 0, sizeof full);
    full.vocab_size = b->model.cfg.vocab_size;
    full.bos_id = b->tok.bos_id;
    full.eos_id = b->tok.eos_id;
    full.max_context = b->model.cfg.seq_len;
    snprintf(full.name, sizeof full.name, "%s", b->name);
    snprintf(full.digest, sizeof full.digest, "%s", b->digest);
    uint32_t size = info->struct_size < sizeof full ? info->struct_size : (uint32_t)sizeof full;
    full.struct_size = info->struct_size;
    memcpy(info, &full, size);
    return ILAB_OK;
}

/* ---- tokens ---------------------------------------------------------------- */

/* true when `s` is well-formed UTF-8 (lead and continuation bytes). */
static bool utf8_well_formed(const unsigned char *s, size_t len)
{
    for (size_t i = 0; i < len;) {
        unsigned c = s[i];
        size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (n == 0 || i + n > len)
            return false;
        for (size_t k = 1; k < n; k++)
            if ((s[i + k] & 0xC0) != 0x80)
                return false;
        i += n;
    }
    return true;
}

/* Whether `ids` decode to exactly `text` (TOK-5). llama.cpp's tokenizers,
 * which torchlike's equal, do not give back some ill-formed UTF-8 (a
 * SentencePiece lead byte that takes in an escaped space, BPE's U+FFFD):
 * such a text is refused rather than changed. */
static bool round_trips(const ilab_backend_t *b, const char *text, size_t len,
                        const int32_t *ids, size_t n)
{
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        const char *p;
        size_t m;
        tl_tokenizer_piece(&b->tok, i ? ids[i - 1] : -1, ids[i], &p, &m);
        if (at + m > len || memcmp(text + at, p, m))
            return false;
        at += m;
    }
    return at == len;
}

static ilab_status tl_tokenize(ilab_backend_t *b, const char *text, size_t len, uint32_t flags,
                               int32_t *tokens, size_t cap, size_t *n_tokens)
{
    if (!b)
        return ILAB_INVALID_ARGUMENT;
    if ((!text && len > 0) || !n_tokens || (!tokens && cap > 0))
        return fail(b, ILAB_INVALID_ARGUMENT, "tokenize: text, tokens or n_tokens is NULL");
    if (flags & ~(uint32_t)(ILAB_TOKENIZE_ADD_BOS | ILAB_TOKENIZE_ADD_EOS |
                            ILAB_TOKENIZE_PARSE_SPECIAL))
        return fail(b, ILAB_INVALID_ARGUMENT, "tokenize: unknown flags 0x%x", flags);
    /* Most texts give at most two ids a byte; the rare one that needs more
     * is encoded again with the room it asked for. */
    if (len > (SIZE_MAX / sizeof(int32_t)) / 2 - 4)
        return fail(b, ILAB_INVALID_ARGUMENT, "tokenize: text of %zu bytes is too long", len);
    size_t room = 2 * len + 3;
    int32_t *tmp = malloc(room * sizeof *tmp);
    if (!tmp)
        return fail(b, ILAB_OUT_OF_MEMORY, "tokenize: out of memory for %zu bytes of text", len);
    size_t n = 0;
    int bos = (flags & ILAB_TOKENIZE_ADD_BOS) != 0, eos = (flags & ILAB_TOKENIZE_ADD_EOS) != 0;
    /* With special tokens parsed each piece of text between them may get
     * its dummy prefix: at most one id per byte, plus one per piece. */
    ilab_status st = (flags & ILAB_TOKENIZE_PARSE_SPECIAL)
                         ? tl_chat_encode(&b->chat, &b->tok, text ? text : "", len, bos, eos, tmp,
                                          room, &n)
                         : tl_tokenizer_encode(&b->tok, text ? text : "", len, bos, eos, tmp,
                                               room, &n);
    if (st == ILAB_OK && n > room) { /* escaped spaces by byte fallback: up to 3 a byte */
        free(tmp);
        room = n;
        tmp = malloc(room * sizeof *tmp);
        if (!tmp)
            return fail(b, ILAB_OUT_OF_MEMORY, "tokenize: out of memory for %zu ids", room);
        st = (flags & ILAB_TOKENIZE_PARSE_SPECIAL)
                 ? tl_chat_encode(&b->chat, &b->tok, text ? text : "", len, bos, eos, tmp, room, &n)
                 : tl_tokenizer_encode(&b->tok, text ? text : "", len, bos, eos, tmp, room, &n);
    }
    if (st != ILAB_OK) {
        free(tmp);
        return fail(b, st, "tokenize: out of memory");
    }
    size_t first = bos && n > 0 && tmp[0] == b->tok.bos_id ? 1 : 0;
    size_t end = eos && n > first && tmp[n - 1] == b->tok.eos_id ? n - 1 : n;
    /* Ill-formed UTF-8, and U+2581 which SentencePiece reads as a space as
     * llama.cpp does, may not come back: refused rather than changed. */
    if (!(flags & ILAB_TOKENIZE_PARSE_SPECIAL) && len &&
        (!utf8_well_formed((const unsigned char *)text, len) ||
         memmem(text, len, "\xe2\x96\x81", 3)) &&
        !round_trips(b, text, len, tmp + first, end - first)) {
        free(tmp);
        return fail(b, ILAB_INVALID_ARGUMENT, "tokenize: the text is not well-formed UTF-8 or "
                    "holds U+2581 (SentencePiece's space), and this vocabulary would not give it "
                    "back byte for byte (TOK-2, TOK-5)");
    }
    *n_tokens = n;
    if (n > cap) {
        free(tmp);
        return fail(b, ILAB_BUFFER_TOO_SMALL, "tokenize: %zu tokens do not fit in a buffer of %zu",
                    n, cap);
    }
    if (n)
        memcpy(tokens, tmp, n * sizeof *tmp);
    free(tmp);
    return ILAB_OK;
}

static int token_ok(const ilab_backend_t *b, int32_t t)
{
    return t >= 0 && t < b->tok.vocab_size;
}

static ilab_status tl_detokenize(ilab_backend_t *b, const int32_t *tokens, size_t n_tokens,
                                 char *text, size_t cap, size_t *len)
{
    if (!b)
        return ILAB_INVALID_ARGUMENT;
    if ((!tokens && n_tokens > 0) || !len || (!text && cap > 0))
        return fail(b, ILAB_INVALID_ARGUMENT, "detokenize: tokens, text or len is NULL");
    size_t need = 0;
    for (size_t i = 0; i < n_tokens; i++) {
        if (!token_ok(b, tokens[i]))
            return fail(b, ILAB_INVALID_ARGUMENT, "detokenize: token %zu is id %d, outside [0, %d)",
                        i, (int)tokens[i], b->tok.vocab_size);
        const char *p;
        size_t n;
        tl_tokenizer_piece(&b->tok, i ? tokens[i - 1] : -1, tokens[i], &p, &n);
        need += n;
    }
    if (cap < need + 1) {
        *len = need;
        return fail(b, ILAB_BUFFER_TOO_SMALL, "detokenize: %zu bytes (+ NUL) do not fit in %zu",
                    need, cap);
    }
    size_t at = 0;
    for (size_t i = 0; i < n_tokens; i++) {
        const char *p;
        size_t n;
        tl_tokenizer_piece(&b->tok, i ? tokens[i - 1] : -1, tokens[i], &p, &n);
        memcpy(text + at, p, n);
        at += n;
    }
    text[at] = '\0';
    *len = at;
    return ILAB_OK;
}

static ilab_status tl_token_piece(ilab_backend_t *b, int32_t prev_token, int32_t token,
                                  char *piece, size_t cap, size_t *len)
{
    if (!b)
        return ILAB_INVALID_ARGUMENT;
    if (!len || (!piece && cap > 0))
        return fail(b, ILAB_INVALID_ARGUMENT, "token_piece: piece or len is NULL");
    if (!token_ok(b, token) || (prev_token != -1 && !token_ok(b, prev_token)))
        return fail(b, ILAB_INVALID_ARGUMENT, "token_piece: token %d or prev_token %d is outside "
                    "[0, %d) (prev_token may be -1)", (int)token, (int)prev_token, b->tok.vocab_size);
    const char *p;
    size_t n;
    tl_tokenizer_piece(&b->tok, prev_token, token, &p, &n);
    if (cap < n + 1) {
        *len = n;
        return fail(b, ILAB_BUFFER_TOO_SMALL, "token_piece: %zu bytes (+ NUL) do not fit in %zu",
                    n, cap);
    }
    memcpy(piece, p, n);
    piece[n] = '\0';
    *len = n;
    return ILAB_OK;
}

/* ---- sequences --------------------------------------------------------------- */

static ilab_status stale(ilab_backend_t *b, const char *call, ilab_seq_t seq)
{
    return fail(b, ILAB_INVALID_ARGUMENT, "%s: sequence handle 0x%llx is stale (freed) or was "
                "never issued", call, (unsigned long long)seq);
}

static ilab_status tl_seq_create(ilab_backend_t *b, ilab_seq_t *seq)
{
    if (!b)
        return ILAB_INVALID_ARGUMENT;
    if (!seq)
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_create: seq is NULL");
    pthread_mutex_lock(&b->lock);
    uint64_t h;
    ilab_status st = tl_kv_seq_create(&b->kv, &h);
    pthread_mutex_unlock(&b->lock);
    if (st != ILAB_OK)
        return fail(b, st, "seq_create: all %d sequence slots are in use (config key max_sequences)",
                    b->kv.max_sequences);
    *seq = h;
    return ILAB_OK;
}

static ilab_status tl_seq_free(ilab_backend_t *b, ilab_seq_t seq)
{
    if (!b)
        return ILAB_INVALID_ARGUMENT;
    pthread_mutex_lock(&b->lock);
    tl_kv_sequence *s = tl_kv_seq_get(&b->kv, seq);
    if (s)
        tl_kv_seq_free(&b->kv, s);
    pthread_mutex_unlock(&b->lock);
    return s ? ILAB_OK : stale(b, "seq_free", seq);
}

static ilab_status tl_seq_fork(ilab_backend_t *b, ilab_seq_t parent, ilab_seq_t *child)
{
    if (!b)
        return ILAB_INVALID_ARGUMENT;
    if (!child)
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_fork: child is NULL");
    pthread_mutex_lock(&b->lock);
    tl_kv_sequence *s = tl_kv_seq_get(&b->kv, parent);
    uint64_t h = 0;
    ilab_status st = s ? tl_kv_seq_fork(&b->kv, s, &h) : ILAB_INVALID_ARGUMENT;
    pthread_mutex_unlock(&b->lock);
    if (!s)
        return stale(b, "seq_fork", parent);
    if (st != ILAB_OK)
        return fail(b, st, "seq_fork: all %d sequence slots are in use (config key max_sequences)",
                    b->kv.max_sequences);
    *child = h;
    return ILAB_OK;
}

static ilab_status tl_seq_truncate(ilab_backend_t *b, ilab_seq_t seq, int32_t n_keep)
{
    if (!b)
        return ILAB_INVALID_ARGUMENT;
    pthread_mutex_lock(&b->lock);
    tl_kv_sequence *s = tl_kv_seq_get(&b->kv, seq);
    int length = s ? s->length : 0;
    int ok = s && n_keep >= 0 && n_keep <= length;
    if (ok)
        tl_kv_seq_truncate(&b->kv, s, n_keep);
    pthread_mutex_unlock(&b->lock);
    if (!s)
        return stale(b, "seq_truncate", seq);
    if (!ok)
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_truncate: n_keep %d is outside 0..%d (the "
                    "sequence's length)", (int)n_keep, length);
    return ILAB_OK;
}

static ilab_status tl_seq_length(ilab_backend_t *b, ilab_seq_t seq, int32_t *length)
{
    if (!b)
        return ILAB_INVALID_ARGUMENT;
    if (!length)
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_length: length is NULL");
    pthread_mutex_lock(&b->lock);
    tl_kv_sequence *s = tl_kv_seq_get(&b->kv, seq);
    int n = s ? s->length : 0;
    pthread_mutex_unlock(&b->lock);
    if (!s)
        return stale(b, "seq_length", seq);
    *length = n;
    return ILAB_OK;
}

/* ---- evaluation ----------------------------------------------------------------- */

/* Check every item before anything changes (eval is all-or-nothing). */
static ilab_status check_items(ilab_backend_t *b, const ilab_batch_item_t *const *items,
                               size_t n_items, tl_kv_sequence **seqs)
{
    int blocks = 0;
    for (size_t i = 0; i < n_items; i++) {
        const ilab_batch_item_t *it = items[i];
        if (!it)
            return fail(b, ILAB_INVALID_ARGUMENT, "eval: item %zu is NULL", i);
        if (it->struct_size < sizeof *it) /* no ABI had a smaller one (ABI-3) */
            return fail(b, ILAB_ABI_MISMATCH, "eval: item %zu has struct_size %u, smaller than "
                        "ABI 1.0's %zu", i, it->struct_size, sizeof *it);
        if (!ilab_struct_tail_is_zero(it, sizeof *it))
            return fail(b, ILAB_ABI_MISMATCH, "eval: item %zu sets members past the %zu bytes "
                        "of this plugin's ilab_batch_item_t", i, sizeof *it);
        seqs[i] = tl_kv_seq_get(&b->kv, it->seq);
        if (!seqs[i])
            return stale(b, "eval", it->seq);
        for (size_t j = 0; j < i; j++)
            if (seqs[j] == seqs[i])
                return fail(b, ILAB_INVALID_ARGUMENT, "eval: items %zu and %zu name the same "
                            "sequence 0x%llx", j, i, (unsigned long long)it->seq);
        if (!it->tokens || it->n_tokens < 1)
            return fail(b, ILAB_INVALID_ARGUMENT, "eval: item %zu has no tokens (n_tokens %d)",
                        i, (int)it->n_tokens);
        if (it->flags & ~(uint32_t)ILAB_EVAL_ALL_LOGITS)
            return fail(b, ILAB_INVALID_ARGUMENT, "eval: item %zu has unknown flags 0x%x", i,
                        it->flags);
        if ((long)seqs[i]->length + it->n_tokens > b->model.cfg.seq_len)
            return fail(b, ILAB_CONTEXT_OVERFLOW, "eval: item %zu: %d positions + %d new tokens "
                        "would pass max_context %d", i, seqs[i]->length, (int)it->n_tokens,
                        b->model.cfg.seq_len);
        for (int32_t t = 0; t < it->n_tokens; t++)
            if (!token_ok(b, it->tokens[t]))
                return fail(b, ILAB_INVALID_ARGUMENT, "eval: item %zu token %d is id %d, outside "
                            "[0, %d)", i, (int)t, (int)it->tokens[t], b->tok.vocab_size);
        blocks += tl_kv_blocks_needed(&b->kv, seqs[i], it->n_tokens);
    }
    if (blocks > b->kv.n_free)
        return fail(b, ILAB_OUT_OF_MEMORY, "eval: the KV cache needs %d more blocks but %d of %d "
                    "are free (config key kv_blocks)", blocks, b->kv.n_free, b->kv.n_blocks);
    return ILAB_OK;
}

static ilab_status tl_eval(ilab_backend_t *b, const ilab_batch_item_t *const *items,
                           size_t n_items)
{
    if (!b)
        return ILAB_INVALID_ARGUMENT;
    if (!items && n_items > 0)
        return fail(b, ILAB_INVALID_ARGUMENT, "eval: items is NULL");
    if (n_items == 0)
        return fail(b, ILAB_INVALID_ARGUMENT, "eval: no items (n_items is 0)");
    if (n_items > TL_MAX_BATCH)
        return fail(b, ILAB_INVALID_ARGUMENT, "eval: %zu items exceed max_batch %d", n_items,
                    TL_MAX_BATCH);
    tl_kv_sequence *seqs[TL_MAX_BATCH];
    tl_forward_item fwd[TL_MAX_BATCH];
    pthread_mutex_lock(&b->lock);
    ilab_status st = check_items(b, items, n_items, seqs);
    if (st != ILAB_OK) {
        pthread_mutex_unlock(&b->lock);
        return st;
    }
    for (size_t i = 0; i < n_items; i++)
        fwd[i] = (tl_forward_item){items[i]->tokens, items[i]->n_tokens, seqs[i]->length,
                                   NULL, (items[i]->flags & ILAB_EVAL_ALL_LOGITS) != 0,
                                   items[i]->logits};
    tl_workspace ws;
    st = tl_workspace_alloc(&ws, &b->model, fwd, (int)n_items, tl_thread_pool_size(b->pool));
    if (st != ILAB_OK) {
        pthread_mutex_unlock(&b->lock);
        return fail(b, st, "eval: out of memory for the activations of %zu items", n_items);
    }
    for (size_t i = 0; i < n_items; i++) {
        tl_kv_prepare_append(&b->kv, seqs[i], items[i]->n_tokens);
        fwd[i].blocks = seqs[i]->blocks;
    }
    tl_model_forward(&b->model, &b->kv, fwd, (int)n_items, &ws, b->pool);
    for (size_t i = 0; i < n_items; i++)
        seqs[i]->length += items[i]->n_tokens;
    pthread_mutex_unlock(&b->lock);
    tl_workspace_free(&ws);
    return ILAB_OK;
}

/* ---- cache capacity (cache.stats, ABI 1.1) ------------------------------------------ */

/* The block pool as it is now: the host admits requests by it. Blocks
 * shared by forks count once, as they do against eval()'s check. */
static ilab_status tl_cache_stats(ilab_backend_t *b, ilab_cache_stats_t *stats)
{
    if (!b)
        return ILAB_INVALID_ARGUMENT;
    if (!stats)
        return fail(b, ILAB_INVALID_ARGUMENT, "cache_stats: stats is NULL");
    if (stats->struct_size < sizeof *stats) /* no ABI had a smaller one (ABI-3) */
        return fail(b, ILAB_ABI_MISMATCH, "cache_stats: struct_size %u is smaller than ABI "
                    "1.1's %zu", stats->struct_size, sizeof *stats);
    pthread_mutex_lock(&b->lock);
    int64_t total = (int64_t)b->kv.n_blocks * TL_KV_BLOCK;
    int64_t free_positions = (int64_t)b->kv.n_free * TL_KV_BLOCK;
    pthread_mutex_unlock(&b->lock);
    /* Only the members this plugin knows; a larger caller's tail is its own. */
    stats->block_size = TL_KV_BLOCK;
    stats->total_positions = total;
    stats->free_positions = free_positions;
    return ILAB_OK;
}

/* ---- capabilities not declared ------------------------------------------------------ */

/* ---- ABI 1.2: chat ---------------------------------------------------------- */

static ilab_status tl_eog_ids(ilab_backend_t *b, int32_t *ids, size_t cap, size_t *n_ids)
{
    if (!b)
        return ILAB_INVALID_ARGUMENT;
    if (!n_ids || (!ids && cap > 0))
        return fail(b, ILAB_INVALID_ARGUMENT, "eog_ids: ids or n_ids is NULL");
    *n_ids = b->chat.n_eog;
    if (b->chat.n_eog > cap)
        return fail(b, ILAB_BUFFER_TOO_SMALL, "eog_ids: %zu ids do not fit in a buffer of %zu",
                    b->chat.n_eog, cap);
    if (b->chat.n_eog)
        memcpy(ids, b->chat.eog, b->chat.n_eog * sizeof *ids);
    return ILAB_OK;
}

static ilab_status tl_chat_template(ilab_backend_t *b, char *text, size_t cap, size_t *len)
{
    if (!b)
        return ILAB_INVALID_ARGUMENT;
    if (!len || (!text && cap > 0))
        return fail(b, ILAB_INVALID_ARGUMENT, "chat_template: text or len is NULL");
    *len = b->chat.template_len;
    if (cap < b->chat.template_len + 1)
        return fail(b, ILAB_BUFFER_TOO_SMALL, "chat_template: %zu bytes and a NUL do not fit in "
                    "a buffer of %zu", b->chat.template_len, cap);
    memcpy(text, b->chat.chat_template, b->chat.template_len + 1);
    return ILAB_OK;
}

static ilab_status tl_generate(ilab_backend_t *b, const ilab_generate_request_t *request,
                               ilab_event_fn on_event, void *user_data)
{
    if (!b)
        return ILAB_UNSUPPORTED;
    return fail(b, ILAB_UNSUPPORTED, "generate: capability 'sampling: backend' not declared "
                "(torchlike declares sampling: host; use eval and sample on the host)");
}

static ilab_status tl_cancel(ilab_backend_t *b, uint64_t request_id)
{
    if (!b)
        return ILAB_UNSUPPORTED;
    return fail(b, ILAB_UNSUPPORTED, "cancel: capability 'cancel' not declared (torchlike has no "
                "backend-owned generation to cancel)");
}

static const ilab_backend_api_t torchlike_api = {
    .struct_size = sizeof(ilab_backend_api_t),
    .probe = tl_probe,
    .create = tl_create,
    .destroy = tl_destroy,
    .last_error = tl_last_error,
    .model_info = tl_model_info,
    .tokenize = tl_tokenize,
    .detokenize = tl_detokenize,
    .token_piece = tl_token_piece,
    .seq_create = tl_seq_create,
    .seq_free = tl_seq_free,
    .seq_fork = tl_seq_fork,
    .seq_truncate = tl_seq_truncate,
    .seq_length = tl_seq_length,
    .eval = tl_eval,
    .generate = tl_generate,
    .cancel = tl_cancel,
    .cache_stats = tl_cache_stats,
    .eog_ids = tl_eog_ids,
    .chat_template = tl_chat_template,
};

ILAB_PLUGIN_EXPORT const ilab_plugin_entry_t ilab_plugin_entry = {
    .struct_size = sizeof(ilab_plugin_entry_t),
    .abi_major = ILAB_ABI_MAJOR,
    .abi_minor = 2, /* eog_ids() and chat_template() are ABI 1.2's (manifest: abi 1.2) */
    .name = "torchlike",
    .version = "0.1.0",
    .manifest_yaml = tl_manifest_yaml,
    .backend = &torchlike_api,
};
