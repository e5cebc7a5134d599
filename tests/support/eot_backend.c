/* eot_backend — a test-only plugin of ABI 1.2 (capability chat) whose
 * model answers every ChatML assistant turn with "OK" and then its
 * end-of-turn token, so a test can see the whole chat path: the template
 * read from the backend and recognised, template text tokenized with special
 * tokens parsed and message content without, the end-of-turn id stopping
 * generation with "stop" and never shown (tests/server/chat_stop.sh).
 *
 * Vocabulary: ids 0..255 are the bytes, 256 BOS, 257 EOS, 258 "<|im_start|>"
 * and 259 "<|im_end|>" (control tokens). The end-of-generation set is
 * {EOS, <|im_end|>}. The next token depends on the last one only: after
 * '\n' comes 'O', after 'O' 'K', after 'K' <|im_end|>, after anything else
 * EOS. The config key `template` is the chat template text it reports
 * (default: a ChatML template). */
#include <inferlab/inferlab.h>

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VOCAB 260
#define BOS 256
#define EOS 257
#define IM_START 258
#define IM_END 259
#define MAX_CONTEXT 4096
#define MAX_SEQS 16

static const char *const specials[2] = {"<|im_start|>", "<|im_end|>"};

static const char default_template[] =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content']"
    " + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}";

static const char manifest[] =
    "name: eot_backend\n"
    "version: 0.1.0\n"
    "abi: 1.2\n"
    "description: Test backend that answers a ChatML turn with OK and its end-of-turn token.\n"
    "capabilities:\n"
    "  tokenizer: true\n"
    "  logits: full\n"
    "  topk_max: 0\n"
    "  sampling: host\n"
    "  cache: {fork: false, truncate: false}\n"
    "  batching: {max_batch: 8}\n"
    "  streaming: false\n"
    "  cancel: false\n"
    "  max_context: 4096\n"
    "  thread_safety: none\n"
    "  chat: true\n"
    "config:\n"
    "  template:\n"
    "    type: string\n"
    "    default: \"\"\n"
    "    description: The chat template text reported; empty = a ChatML template.\n";

typedef struct seq {
    int in_use;
    uint64_t handle;
    int32_t len, last;
} seq;

struct ilab_backend {
    char *template_text;
    seq seqs[MAX_SEQS];
    uint64_t issued;
    char error[256];
};

static ilab_status fail(ilab_backend_t *b, ilab_status st, const char *fmt, ...)
{
    if (b) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(b->error, sizeof b->error, fmt, ap);
        va_end(ap);
    }
    return st;
}

static ilab_status cb_probe(const ilab_host_t *host, const ilab_config_entry_t *config,
                            size_t n_config, char *reason, size_t reason_cap)
{
    (void)host, (void)config, (void)n_config;
    if (reason && reason_cap)
        reason[0] = '\0';
    return ILAB_OK;
}

static ilab_status cb_create(const ilab_host_t *host, const ilab_config_entry_t *config,
                             size_t n_config, char *error, size_t error_cap, ilab_backend_t **out)
{
    (void)host;
    const char *text = default_template;
    for (size_t i = 0; i < n_config; i++)
        if (!strcmp(config[i].key, "template") && config[i].value[0])
            text = config[i].value;
    ilab_backend_t *b = calloc(1, sizeof *b);
    if (!b || !(b->template_text = strdup(text))) {
        free(b);
        if (error && error_cap)
            snprintf(error, error_cap, "eot_backend: out of memory");
        return ILAB_OUT_OF_MEMORY;
    }
    if (!out) {
        free(b->template_text);
        free(b);
        return ILAB_INVALID_ARGUMENT;
    }
    *out = b;
    return ILAB_OK;
}

static void cb_destroy(ilab_backend_t *b)
{
    if (b)
        free(b->template_text);
    free(b);
}

static size_t cb_last_error(const ilab_backend_t *b, char *buf, size_t cap)
{
    if (!b)
        return 0;
    if (buf && cap)
        snprintf(buf, cap, "%s", b->error);
    return strlen(b->error);
}

static ilab_status cb_model_info(ilab_backend_t *b, ilab_model_info_t *info)
{
    if (!b || !info)
        return ILAB_INVALID_ARGUMENT;
    if (info->struct_size < ILAB_MODEL_INFO_SIZE_1_0)
        return fail(b, ILAB_ABI_MISMATCH, "model_info: struct_size too small");
    ilab_model_info_t full = {.struct_size = info->struct_size, .vocab_size = VOCAB,
                              .bos_id = BOS, .eos_id = EOS, .max_context = MAX_CONTEXT};
    snprintf(full.name, sizeof full.name, "chat-test");
    memcpy(info, &full, info->struct_size < sizeof full ? info->struct_size : sizeof full);
    return ILAB_OK;
}

/* --- tokens --------------------------------------------------------------------- */

static int special_at(const char *p, size_t left)
{
    for (int k = 0; k < 2; k++) {
        size_t n = strlen(specials[k]);
        if (n <= left && !memcmp(p, specials[k], n))
            return k;
    }
    return -1;
}

static ilab_status cb_tokenize(ilab_backend_t *b, const char *text, size_t len, uint32_t flags,
                               int32_t *tokens, size_t cap, size_t *n_tokens)
{
    if (!b || (!text && len) || !n_tokens || (!tokens && cap))
        return fail(b, ILAB_INVALID_ARGUMENT, "tokenize: NULL argument");
    if (flags & ~(uint32_t)(ILAB_TOKENIZE_ADD_BOS | ILAB_TOKENIZE_ADD_EOS | ILAB_TOKENIZE_PARSE_SPECIAL))
        return fail(b, ILAB_INVALID_ARGUMENT, "tokenize: unknown flags 0x%x", (unsigned)flags);
    size_t n = 0;
#define PUT(v) do { if (n < cap) tokens[n] = (v); n++; } while (0)
    if (flags & ILAB_TOKENIZE_ADD_BOS)
        PUT(BOS);
    for (size_t i = 0; i < len;) {
        int k = (flags & ILAB_TOKENIZE_PARSE_SPECIAL) ? special_at(text + i, len - i) : -1;
        if (k >= 0) {
            PUT(IM_START + k);
            i += strlen(specials[k]);
        } else {
            PUT((unsigned char)text[i]);
            i++;
        }
    }
    if (flags & ILAB_TOKENIZE_ADD_EOS)
        PUT(EOS);
#undef PUT
    *n_tokens = n;
    if (n > cap)
        return fail(b, ILAB_BUFFER_TOO_SMALL, "tokenize: %zu tokens, room for %zu", n, cap);
    return ILAB_OK;
}

static const char *piece_of(int32_t t, size_t *len, char *byte)
{
    if (t < 256) {
        *byte = (char)t;
        *len = 1;
        return byte;
    }
    if (t == IM_START || t == IM_END) {
        *len = strlen(specials[t - IM_START]);
        return specials[t - IM_START];
    }
    *len = 0;
    return "";
}

static ilab_status cb_detokenize(ilab_backend_t *b, const int32_t *tokens, size_t n_tokens,
                                 char *text, size_t cap, size_t *len)
{
    if (!b || (!tokens && n_tokens) || !len || (!text && cap))
        return fail(b, ILAB_INVALID_ARGUMENT, "detokenize: NULL argument");
    size_t need = 0;
    for (size_t i = 0; i < n_tokens; i++) {
        if (tokens[i] < 0 || tokens[i] >= VOCAB)
            return fail(b, ILAB_INVALID_ARGUMENT, "detokenize: id %d out of range", tokens[i]);
        size_t l;
        char c;
        piece_of(tokens[i], &l, &c);
        need += l;
    }
    *len = need;
    if (cap < need + 1)
        return fail(b, ILAB_BUFFER_TOO_SMALL, "detokenize: %zu bytes needed", need + 1);
    size_t o = 0;
    for (size_t i = 0; i < n_tokens; i++) {
        size_t l;
        char c;
        const char *p = piece_of(tokens[i], &l, &c);
        memcpy(text + o, p, l);
        o += l;
    }
    text[o] = '\0';
    return ILAB_OK;
}

static ilab_status cb_token_piece(ilab_backend_t *b, int32_t prev, int32_t token, char *piece,
                                  size_t cap, size_t *len)
{
    if (!b || !len || (!piece && cap))
        return fail(b, ILAB_INVALID_ARGUMENT, "token_piece: NULL argument");
    if (prev < -1 || prev >= VOCAB)
        return fail(b, ILAB_INVALID_ARGUMENT, "token_piece: prev %d out of range", prev);
    return cb_detokenize(b, &token, 1, piece, cap, len);
}

/* --- sequences and the model ----------------------------------------------------- */

static seq *find(ilab_backend_t *b, ilab_seq_t h)
{
    for (int i = 0; h && i < MAX_SEQS; i++)
        if (b->seqs[i].in_use && b->seqs[i].handle == h)
            return &b->seqs[i];
    return NULL;
}

static ilab_status cb_seq_create(ilab_backend_t *b, ilab_seq_t *out)
{
    if (!b || !out)
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_create: NULL argument");
    for (int i = 0; i < MAX_SEQS; i++)
        if (!b->seqs[i].in_use) {
            b->seqs[i] = (seq){1, ++b->issued, 0, -1};
            *out = b->seqs[i].handle;
            return ILAB_OK;
        }
    return fail(b, ILAB_OUT_OF_MEMORY, "seq_create: all %d sequences in use", MAX_SEQS);
}

static ilab_status cb_seq_free(ilab_backend_t *b, ilab_seq_t h)
{
    seq *s = b ? find(b, h) : NULL;
    if (!s)
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_free: unknown sequence");
    s->in_use = 0;
    return ILAB_OK;
}

static ilab_status cb_seq_length(ilab_backend_t *b, ilab_seq_t h, int32_t *len)
{
    seq *s = b ? find(b, h) : NULL;
    if (!s || !len)
        return fail(b, ILAB_INVALID_ARGUMENT, "seq_length: unknown sequence or NULL length");
    *len = s->len;
    return ILAB_OK;
}

static int32_t next_after(int32_t last)
{
    return last == '\n' ? 'O' : last == 'O' ? 'K' : last == 'K' ? IM_END : EOS;
}

static void row(float *out, int32_t last)
{
    for (int v = 0; v < VOCAB; v++)
        out[v] = -10.0f;
    out[next_after(last)] = 10.0f;
}

static ilab_status cb_eval(ilab_backend_t *b, const ilab_batch_item_t *const *items, size_t n)
{
    if (!b || !items || n < 1 || n > 8)
        return fail(b, ILAB_INVALID_ARGUMENT, "eval: bad batch");
    for (size_t i = 0; i < n; i++) {
        const ilab_batch_item_t *it = items[i];
        if (it && (it->struct_size < ILAB_BATCH_ITEM_SIZE_1_0 ||
                   !ilab_struct_tail_is_zero(it, sizeof *it)))
            return fail(b, ILAB_ABI_MISMATCH, "eval: item %zu struct_size %u is below ABI 1.0's or "
                        "sets members unknown here", i, it->struct_size);
        seq *s = it ? find(b, it->seq) : NULL;
        if (!s || it->n_tokens < 1 || !it->tokens || (it->flags & ~(uint32_t)ILAB_EVAL_ALL_LOGITS))
            return fail(b, ILAB_INVALID_ARGUMENT, "eval: bad item %zu", i);
        if (s->len + it->n_tokens > MAX_CONTEXT)
            return fail(b, ILAB_CONTEXT_OVERFLOW, "eval: past %d positions", MAX_CONTEXT);
        for (int32_t t = 0; t < it->n_tokens; t++)
            if (it->tokens[t] < 0 || it->tokens[t] >= VOCAB)
                return fail(b, ILAB_INVALID_ARGUMENT, "eval: id %d out of range", it->tokens[t]);
    }
    for (size_t i = 0; i < n; i++) {
        const ilab_batch_item_t *it = items[i];
        seq *s = find(b, it->seq);
        bool all = it->flags & ILAB_EVAL_ALL_LOGITS;
        for (int32_t t = 0; t < it->n_tokens; t++)
            if (it->logits && (all || t == it->n_tokens - 1))
                row(it->logits + (all ? (size_t)t * VOCAB : 0), it->tokens[t]);
        s->len += it->n_tokens;
        s->last = it->tokens[it->n_tokens - 1];
    }
    return ILAB_OK;
}

/* --- ABI 1.2 --------------------------------------------------------------------- */

static ilab_status cb_eog_ids(ilab_backend_t *b, int32_t *ids, size_t cap, size_t *n)
{
    if (!b || !n || (!ids && cap))
        return fail(b, ILAB_INVALID_ARGUMENT, "eog_ids: NULL argument");
    *n = 2;
    if (cap < 2)
        return fail(b, ILAB_BUFFER_TOO_SMALL, "eog_ids: 2 ids, room for %zu", cap);
    ids[0] = EOS;
    ids[1] = IM_END;
    return ILAB_OK;
}

static ilab_status cb_chat_template(ilab_backend_t *b, char *text, size_t cap, size_t *len)
{
    if (!b || !len || (!text && cap))
        return fail(b, ILAB_INVALID_ARGUMENT, "chat_template: NULL argument");
    *len = strlen(b->template_text);
    if (cap < *len + 1)
        return fail(b, ILAB_BUFFER_TOO_SMALL, "chat_template: %zu bytes needed", *len + 1);
    memcpy(text, b->template_text, *len + 1);
    return ILAB_OK;
}

static const ilab_backend_api_t api = {
    .struct_size = sizeof(ilab_backend_api_t),
    .probe = cb_probe,
    .create = cb_create,
    .destroy = cb_destroy,
    .last_error = cb_last_error,
    .model_info = cb_model_info,
    .tokenize = cb_tokenize,
    .detokenize = cb_detokenize,
    .token_piece = cb_token_piece,
    .seq_create = cb_seq_create,
    .seq_free = cb_seq_free,
    .seq_length = cb_seq_length,
    .eval = cb_eval,
    .eog_ids = cb_eog_ids,
    .chat_template = cb_chat_template,
};

ILAB_PLUGIN_EXPORT const ilab_plugin_entry_t ilab_plugin_entry = {
    .struct_size = sizeof(ilab_plugin_entry_t),
    .abi_major = ILAB_ABI_MAJOR,
    .abi_minor = 2,
    .name = "eot_backend",
    .version = "0.1.0",
    .manifest_yaml = manifest,
    .backend = &api,
};
