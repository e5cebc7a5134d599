#include "vocab_gguf.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bpe.h"
#include "chat_vocab.h"
#include "gguf.h"
#include "pretok.h"

/* An optional bool key: 0 absent, 1 read, -1 wrong type (err written). */
static int get_bool(const tl_gguf *g, const char *key, const char *label, int *out, char *err,
                    size_t cap)
{
    const tl_gguf_kv *kv = tl_gguf_find(g, key);
    if (!kv)
        return 0;
    if (kv->type != TL_GGUF_BOOL) {
        snprintf(err, cap, "GGUF %s: metadata key %s has type %u; a bool (7) is expected", label,
                 key, kv->type);
        return -1;
    }
    *out = kv->value[0] != 0;
    return 1;
}

/* The optional token types: a copy (NULL when absent), each a known type. */
static int get_types(const tl_gguf *g, const char *label, int n, unsigned char **out, char *err,
                     size_t cap)
{
    *out = NULL;
    const tl_gguf_kv *kv = tl_gguf_find(g, "tokenizer.ggml.token_type");
    if (!kv)
        return 0;
    if (kv->type != TL_GGUF_ARRAY || kv->elem_type != TL_GGUF_INT32 || kv->count != (uint64_t)n) {
        snprintf(err, cap, "GGUF %s: tokenizer.ggml.token_type must be an array of %d int32 "
                 "(one per token)", label, n);
        return -1;
    }
    unsigned char *t = malloc((size_t)n);
    if (!t) {
        snprintf(err, cap, "GGUF %s: out of memory for the token types", label);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        int32_t v;
        memcpy(&v, kv->elems + 4 * (size_t)i, 4);
        if (v < TL_TOKEN_NORMAL || v > TL_TOKEN_BYTE) {
            snprintf(err, cap, "GGUF %s: tokenizer.ggml.token_type[%d] is %d; known types are "
                     "1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte", label, i,
                     (int)v);
            free(t);
            return -1;
        }
        t[i] = (unsigned char)v;
    }
    *out = t;
    return 0;
}

/* The id of the token the file spells `text`, or -1 (the lowest id). */
static int find_raw(const tl_tokenizer *t, const char *text)
{
    size_t n = strlen(text);
    for (int i = 0; i < t->vocab_size; i++)
        if ((size_t)t->raw_len[i] == n && memcmp(t->raw[i], text, n) == 0)
            return i;
    return -1;
}

/* llama.cpp gives every token spelled as an end of generation the control
 * attribute, whatever its type (phi-3's "</s>" is user-defined): it is then
 * special text, matched only when special tokens are parsed, and no text
 * when decoded. */
static int promote_eog(tl_tokenizer *t)
{
    for (const char *const *e = tl_eog_texts; *e; e++) {
        int id = find_raw(t, *e);
        if (id < 0)
            continue;
        if (!t->types) {
            t->types = malloc((size_t)t->vocab_size);
            if (!t->types)
                return -1;
            memset(t->types, TL_TOKEN_NORMAL, (size_t)t->vocab_size);
        }
        /* A token of one type that carries the control attribute behaves as a
         * control token in every place the tokenizer looks. */
        t->types[id] = TL_TOKEN_CONTROL;
    }
    if (!t->types)
        return 0;
    /* llama.cpp's exceptions to that, also by spelling: gpt-oss and
     * solar-open's <|end|> only ends a message (user-defined, as are
     * gpt-oss's channel markers); gemma 4's </s> is plain text. */
    int end = find_raw(t, "<|end|>"), s_id = find_raw(t, "</s>");
    int ret = find_raw(t, "<|return|>") >= 0, call = find_raw(t, "<|call|>") >= 0;
    int calls = find_raw(t, "<|calls|>") >= 0, flush = find_raw(t, "<|flush|>") >= 0;
    if (end >= 0 && ((ret && call) || ((call || calls) && flush)))
        t->types[end] = TL_TOKEN_USER_DEFINED;
    static const char *const shown[] = {"<|channel|>", "<|message|>", "<|start|>",
                                        "<|constrain|>"};
    for (size_t k = 0; k < sizeof shown / sizeof shown[0]; k++) {
        int id = find_raw(t, shown[k]);
        if (id >= 0)
            t->types[id] = TL_TOKEN_USER_DEFINED;
    }
    if (s_id >= 0 && find_raw(t, "<|tool_response>") >= 0)
        t->types[s_id] = TL_TOKEN_NORMAL;
    return 0;
}

/* Whether general.name, lower-cased, holds "phi-3" or "phi3": llama.cpp
 * gives that model's special tokens the RSTRIP attribute by name alone. */
static int is_phi3(const tl_gguf *g)
{
    const tl_gguf_kv *kv = tl_gguf_find(g, "general.name");
    if (!kv || kv->type != TL_GGUF_STRING)
        return 0;
    tl_gguf_string s;
    char e[8];
    if (tl_gguf_get_string(g, "general.name", "", &s, e, sizeof e) != 0)
        return 0;
    char low[256];
    size_t n = s.len < sizeof low - 1 ? (size_t)s.len : sizeof low - 1;
    for (size_t i = 0; i < n; i++) {
        char c = s.s[i];
        low[i] = c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
    }
    low[n] = '\0';
    return strstr(low, "phi-3") || strstr(low, "phi3");
}

/* Phi-3 as llama.cpp tokenizes it: white space after a special token is
 * dropped, except after <unk>, <s> and <|endoftext|>; </s> strips too. */
static int set_phi3_rstrip(tl_tokenizer *t)
{
    t->rstrip = calloc((size_t)t->vocab_size, 1);
    if (!t->rstrip)
        return -1;
    for (int k = 0; k < t->n_special; k++)
        t->rstrip[t->special[k]] = 1;
    static const char *const keep[] = {"<unk>", "<s>", "<|endoftext|>"};
    int id = find_raw(t, "</s>");
    if (id >= 0)
        t->rstrip[id] = 1;
    for (size_t k = 0; k < sizeof keep / sizeof keep[0]; k++)
        if ((id = find_raw(t, keep[k])) >= 0)
            t->rstrip[id] = 0;
    return 0;
}

/* Token types, add_bos/add_eos and the special-token index, for either kind. */
static ilab_status read_extras(const tl_gguf *g, const char *label, tl_tokenizer *t, char *err,
                               size_t cap)
{
    free(t->types); /* the BPE path read them already, to decode its pieces */
    t->types = NULL;
    if (get_types(g, label, t->vocab_size, &t->types, err, cap) != 0 ||
        get_bool(g, "tokenizer.ggml.add_bos_token", label, &t->add_bos, err, cap) < 0 ||
        get_bool(g, "tokenizer.ggml.add_eos_token", label, &t->add_eos, err, cap) < 0)
        return ILAB_INVALID_ARGUMENT;
    if (promote_eog(t) != 0 || tl_tokenizer_index_special(t) != ILAB_OK ||
        (is_phi3(g) && set_phi3_rstrip(t) != 0)) {
        snprintf(err, cap, "GGUF %s: out of memory for the special tokens", label);
        return ILAB_OUT_OF_MEMORY;
    }
    return ILAB_OK;
}

static const tl_gguf_kv *string_array(const tl_gguf *g, const char *key, const char *label,
                                      int64_t want, char *err, size_t cap)
{
    const tl_gguf_kv *kv = tl_gguf_find(g, key);
    if (!kv) {
        snprintf(err, cap, "GGUF %s: metadata key %s is missing", label, key);
        return NULL;
    }
    if (kv->type != TL_GGUF_ARRAY || kv->elem_type != TL_GGUF_STRING ||
        (want >= 0 && kv->count != (uint64_t)want) || kv->count > INT32_MAX) {
        snprintf(err, cap, "GGUF %s: metadata key %s must be an array of %s strings", label, key,
                 want >= 0 ? "one per token:" : "at most 2^31");
        return NULL;
    }
    return kv;
}

/* Copies of `count` GGUF strings (each NUL-terminated too). */
static int copy_strings(const tl_gguf_kv *kv, char ***out, int **lens)
{
    int n = (int)kv->count;
    *out = calloc((size_t)n + 1, sizeof **out);
    *lens = calloc((size_t)n + 1, sizeof **lens);
    if (!*out || !*lens)
        return -1;
    const unsigned char *p = kv->elems;
    for (int i = 0; i < n; i++) {
        tl_gguf_string s = tl_gguf_next_string(&p);
        if (s.len > 65536)
            return -2;
        (*out)[i] = malloc((size_t)s.len + 1);
        if (!(*out)[i])
            return -1;
        memcpy((*out)[i], s.s, (size_t)s.len);
        (*out)[i][s.len] = '\0';
        (*lens)[i] = (int)s.len;
    }
    return 0;
}

static void free_strings(char **s, int *lens, int n)
{
    for (int i = 0; s && i < n; i++)
        free(s[i]);
    free(s);
    free(lens);
}

static ilab_status bpe_from_gguf(const tl_gguf *g, const char *label, int n,
                                 const char *pre_override, tl_tokenizer *out, char *err,
                                 size_t cap)
{
    char pre_name[48] = "default";
    if (pre_override && *pre_override) {
        snprintf(pre_name, sizeof pre_name, "%s", pre_override);
    } else if (tl_gguf_find(g, "tokenizer.ggml.pre")) {
        tl_gguf_string s;
        if (tl_gguf_get_string(g, "tokenizer.ggml.pre", label, &s, err, cap) != 0)
            return ILAB_INVALID_ARGUMENT;
        snprintf(pre_name, sizeof pre_name, "%.*s", s.len > 47 ? 47 : (int)s.len, s.s);
    }
    tl_pretok *pre = NULL;
    char perr[1024];
    ilab_status st = tl_pretok_create(pre_name, &pre, perr, sizeof perr);
    if (st != ILAB_OK) {
        snprintf(err, cap, "GGUF %s: tokenizer.ggml.pre: %s", label, perr);
        return st;
    }
    const tl_gguf_kv *tokens = string_array(g, "tokenizer.ggml.tokens", label, n, err, cap);
    const tl_gguf_kv *merges = tokens ? string_array(g, "tokenizer.ggml.merges", label, -1, err,
                                                     cap) : NULL;
    if (!tokens || !merges) {
        tl_pretok_free(pre);
        return ILAB_INVALID_ARGUMENT;
    }
    static const char *const id_keys[3] = {"tokenizer.ggml.bos_token_id",
                                           "tokenizer.ggml.eos_token_id",
                                           "tokenizer.ggml.unknown_token_id"};
    int64_t ids[3] = {11, 11, 0}; /* llama.cpp's defaults for this kind */
    for (int k = 0; k < 3; k++) {
        if (tl_gguf_find(g, id_keys[k]) &&
            tl_gguf_get_int(g, id_keys[k], label, &ids[k], err, cap) != 0) {
            tl_pretok_free(pre);
            return ILAB_INVALID_ARGUMENT;
        }
        if (ids[k] < 0 || ids[k] >= n) {
            snprintf(err, cap, "GGUF %s: %s is %" PRId64 ", outside the %d-token vocabulary", label,
                     id_keys[k], ids[k], n);
            tl_pretok_free(pre);
            return ILAB_INVALID_ARGUMENT;
        }
    }
    char **raw = NULL, **mtext = NULL, **dec = NULL;
    int *raw_len = NULL, *mlen = NULL, *dec_len = NULL;
    int n_merges = (int)merges->count;
    float *scores = calloc((size_t)n + 1, sizeof *scores);
    int rc = copy_strings(tokens, &raw, &raw_len);
    if (rc == 0)
        rc = copy_strings(merges, &mtext, &mlen);
    dec = calloc((size_t)n + 1, sizeof *dec);
    dec_len = calloc((size_t)n + 1, sizeof *dec_len);
    if (rc == -2) {
        snprintf(err, cap, "GGUF %s: a token or merge is over 65536 bytes", label);
        st = ILAB_INVALID_ARGUMENT;
        goto done;
    }
    if (rc != 0 || !scores || !dec || !dec_len)
        goto oom;
    st = ILAB_OK;
    tl_tokenizer t;
    memset(&t, 0, sizeof t);
    t.vocab_size = n;
    if (get_types(g, label, n, &t.types, err, cap) != 0) {
        st = ILAB_INVALID_ARGUMENT;
        goto done;
    }
    /* The pieces: a normal token's characters decoded to the bytes they
     * stand for; special and user-defined tokens as written. */
    for (int i = 0; i < n; i++) {
        dec[i] = malloc((size_t)raw_len[i] + 1);
        if (!dec[i]) {
            free(t.types);
            goto oom;
        }
        int as_is = t.types && (t.types[i] == TL_TOKEN_CONTROL ||
                                t.types[i] == TL_TOKEN_USER_DEFINED ||
                                t.types[i] == TL_TOKEN_UNKNOWN);
        if (as_is) {
            memcpy(dec[i], raw[i], (size_t)raw_len[i]);
            dec_len[i] = raw_len[i];
        } else {
            dec_len[i] = (int)tl_bpe_decode(raw[i], (size_t)raw_len[i], dec[i]);
        }
    }
    unsigned char *types = t.types;
    st = tl_tokenizer_from_vocab(n, (const char *const *)dec, dec_len, scores, (int)ids[0],
                                 (int)ids[1], (int)ids[2], label, out, err, cap);
    if (st != ILAB_OK) {
        free(types);
        goto done;
    }
    out->kind = TL_TOKENIZER_BPE;
    out->types = types;
    out->add_bos = 0; /* llama.cpp's defaults for this kind */
    out->add_eos = 0;
    out->raw = raw;
    out->raw_len = raw_len;
    raw = NULL;
    raw_len = NULL;
    snprintf(out->pre, sizeof out->pre, "%s", pre_name);
    out->bpe = calloc(1, sizeof *out->bpe);
    if (!out->bpe) {
        tl_tokenizer_free(out);
        goto oom;
    }
    st = tl_bpe_init(out->bpe, n, (const char *const *)out->raw, out->raw_len,
                     (const char *const *)mtext, mlen, n_merges, pre, label, err, cap);
    pre = NULL; /* owned by the tokenizer from here (freed by tl_bpe_init on failure) */
    if (st == ILAB_OK)
        st = read_extras(g, label, out, err, cap);
    if (st != ILAB_OK)
        tl_tokenizer_free(out);
    goto done;
oom:
    snprintf(err, cap, "GGUF %s: out of memory for the vocabulary", label);
    st = ILAB_OUT_OF_MEMORY;
done:
    tl_pretok_free(pre);
    free_strings(raw, raw_len, n);
    free_strings(mtext, mlen, n_merges);
    free_strings(dec, dec_len, n);
    free(scores);
    return st;
}

ilab_status tl_vocab_from_gguf(const struct tl_gguf *g, const char *label, int expected_vocab,
                               const char *pre_override, tl_tokenizer *out, char *err, size_t cap)
{
    tl_gguf_string model;
    if (tl_gguf_get_string(g, "tokenizer.ggml.model", label, &model, err, cap) != 0)
        return ILAB_INVALID_ARGUMENT;
    if (model.len == 4 && memcmp(model.s, "gpt2", 4) == 0)
        return bpe_from_gguf(g, label, expected_vocab, pre_override, out, err, cap);
    if (model.len != 5 || memcmp(model.s, "llama", 5) != 0) {
        snprintf(err, cap, "GGUF %s: tokenizer.ggml.model is \"%.*s\"; torchlike reads "
                 "\"llama\" (SentencePiece) and \"gpt2\" (byte-level BPE)", label,
                 model.len > 64 ? 64 : (int)model.len, model.s);
        return ILAB_INVALID_ARGUMENT;
    }
    if (pre_override && *pre_override) {
        snprintf(err, cap, "GGUF %s: setting pre_tokenizer (\"%s\") is for byte-level BPE "
                 "vocabularies; this file's tokenizer.ggml.model is \"llama\" (SentencePiece), "
                 "which has no pre-tokenizer: remove the setting", label, pre_override);
        return ILAB_INVALID_ARGUMENT;
    }
    ilab_status st = tl_tokenizer_from_gguf(g, label, expected_vocab, out, err, cap);
    if (st != ILAB_OK)
        return st;
    /* tokenizer.ggml.remove_extra_whitespaces is not read: llama.cpp's
     * SentencePiece tokenizer does not use it either. */
    if (get_bool(g, "tokenizer.ggml.add_space_prefix", label, &out->add_space_prefix, err, cap) < 0)
        st = ILAB_INVALID_ARGUMENT;
    else
        st = read_extras(g, label, out, err, cap);
    if (st != ILAB_OK)
        tl_tokenizer_free(out);
    return st;
}
