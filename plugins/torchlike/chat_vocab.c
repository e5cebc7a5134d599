/* torchlike — the chat side of the vocabulary (chat_vocab.h). The end-of-
 * generation rules follow llama.cpp's llama-vocab.cpp (read as a
 * specification; this is not its code). */
#include "chat_vocab.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Token texts that end a generation whatever their type (llama.cpp's list). */
const char *const tl_eog_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", NULL};

static int piece_is(const tl_tokenizer *tok, int id, const char *text)
{
    /* As the file spells the token ("▁" in a SentencePiece one), as
     * llama.cpp compares them. */
    size_t n = strlen(text);
    if (tok->raw)
        return (size_t)tok->raw_len[id] == n && !memcmp(tok->raw[id], text, n);
    return (size_t)tok->piece_len[id] == n && !memcmp(tok->pieces[id], text, n);
}

/* A set of ids as a sorted array (small: a handful of ids). */
typedef struct id_set {
    int32_t *v;
    size_t n, cap;
} id_set;

static int set_has(const id_set *s, int32_t id)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->v[i] == id)
            return 1;
    return 0;
}

static int set_add(id_set *s, int32_t id)
{
    if (id < 0 || set_has(s, id))
        return 1;
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 8;
        int32_t *v = realloc(s->v, cap * sizeof *v);
        if (!v)
            return 0;
        s->v = v;
        s->cap = cap;
    }
    size_t i = s->n++;
    while (i > 0 && s->v[i - 1] > id) {
        s->v[i] = s->v[i - 1];
        i--;
    }
    s->v[i] = id;
    return 1;
}

static void set_remove(id_set *s, int32_t id)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->v[i] == id) {
            memmove(&s->v[i], &s->v[i + 1], (s->n - i - 1) * sizeof *s->v);
            s->n--;
            return;
        }
}

/* The id of the first token of the set whose text is `text`, else -1. */
static int32_t set_find_text(const id_set *s, const tl_tokenizer *tok, const char *text)
{
    for (size_t i = 0; i < s->n; i++)
        if (piece_is(tok, s->v[i], text))
            return s->v[i];
    return -1;
}

/* An id key, when present and in range; -1 otherwise. */
static int32_t id_key(const tl_gguf *g, const char *key, int vocab)
{
    const tl_gguf_kv *kv = tl_gguf_find(g, key);
    int64_t v;
    char err[64];
    if (!kv || tl_gguf_get_int(g, key, "", &v, err, sizeof err) != 0 || v < 0 || v >= vocab)
        return -1;
    return (int32_t)v;
}

static int collect_eog(const tl_gguf *g, const tl_tokenizer *tok, id_set *s)
{
    if (!g)
        return set_add(s, tok->eos_id);
    static const char *const keys[] = {"tokenizer.ggml.fim_pad_token_id",
                                       "tokenizer.ggml.fim_rep_token_id",
                                       "tokenizer.ggml.fim_sep_token_id",
                                       "tokenizer.ggml.eos_token_id",
                                       "tokenizer.ggml.eot_token_id",
                                       "tokenizer.ggml.eom_token_id"};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
        if (!set_add(s, id_key(g, keys[k], tok->vocab_size)))
            return 0;
    for (int id = 0; id < tok->vocab_size; id++)
        for (const char *const *t = tl_eog_texts; *t; t++)
            if (piece_is(tok, id, *t) && !set_add(s, id))
                return 0;
    /* gpt-oss ("harmony") and solar-open end a turn with <|return|> or
     * <|call|> (<|calls|>, <|flush|>); their <|end|> only ends a message. */
    int32_t end = set_find_text(s, tok, "<|end|>");
    int ret = set_find_text(s, tok, "<|return|>") >= 0;
    int call = set_find_text(s, tok, "<|call|>") >= 0 || set_find_text(s, tok, "<|calls|>") >= 0;
    int flush = set_find_text(s, tok, "<|flush|>") >= 0;
    if (end >= 0 && ((ret && call) || (call && flush)))
        set_remove(s, end);
    /* Gemma 4 and PaddleOCR: </s> is not an end there. */
    int32_t eos_text = set_find_text(s, tok, "</s>");
    if (eos_text >= 0 && set_find_text(s, tok, "<|tool_response>") >= 0)
        set_remove(s, eos_text);
    return 1;
}

ilab_status tl_chat_vocab_init(tl_chat_vocab *cv, const tl_gguf *g, const tl_tokenizer *tok,
                               const char *label, char *err, size_t err_cap)
{
    memset(cv, 0, sizeof *cv);
    id_set s = {0};
    if (!collect_eog(g, tok, &s)) {
        free(s.v);
        return ILAB_OUT_OF_MEMORY;
    }
    /* EOS first, the rest ascending (the contract's order). */
    if (tok->eos_id >= 0 && set_has(&s, tok->eos_id)) {
        set_remove(&s, tok->eos_id);
        if (!set_add(&s, tok->eos_id)) {
            free(s.v);
            return ILAB_OUT_OF_MEMORY;
        }
        size_t i = 0;
        while (s.v[i] != tok->eos_id)
            i++;
        memmove(&s.v[1], &s.v[0], i * sizeof *s.v);
        s.v[0] = tok->eos_id;
    }
    cv->eog = s.v;
    cv->n_eog = s.n;
    tl_gguf_string t = {"", 0};
    if (g && tl_gguf_find(g, "tokenizer.chat_template") &&
        tl_gguf_get_string(g, "tokenizer.chat_template", label, &t, err, err_cap) != 0) {
        tl_chat_vocab_free(cv);
        return ILAB_INVALID_ARGUMENT;
    }
    if (memchr(t.s, '\0', (size_t)t.len)) {
        snprintf(err, err_cap, "GGUF %s: tokenizer.chat_template holds a NUL byte", label);
        tl_chat_vocab_free(cv);
        return ILAB_INVALID_ARGUMENT;
    }
    cv->chat_template = malloc((size_t)t.len + 1);
    if (!cv->chat_template) {
        tl_chat_vocab_free(cv);
        return ILAB_OUT_OF_MEMORY;
    }
    memcpy(cv->chat_template, t.s, (size_t)t.len);
    cv->chat_template[t.len] = '\0';
    cv->template_len = (size_t)t.len;
    return ILAB_OK;
}

void tl_chat_vocab_free(tl_chat_vocab *cv)
{
    free(cv->eog);
    free(cv->chat_template);
    memset(cv, 0, sizeof *cv);
}

/* Special tokens are split out by the tokenizer itself, as llama.cpp
 * partitions text before tokenizing each piece (tokenizer.c). */
ilab_status tl_chat_encode(const tl_chat_vocab *cv, const tl_tokenizer *tok, const char *text,
                           size_t len, int add_bos, int add_eos, int32_t *ids, size_t cap,
                           size_t *n)
{
    (void)cv;
    return tl_tokenizer_encode_ex(tok, text, len, add_bos, add_eos, 1, ids, cap, n);
}
