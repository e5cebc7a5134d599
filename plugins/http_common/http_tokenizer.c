/* The tokenizer through the server: POST /tokenize and /detokenize, which
 * vLLM and SGLang both serve (their answers differ in one member name). */
#include "http_backend_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

ilab_status http_post_json(ilab_backend_t *b, const char *path, json_t *body, json_t **out)
{
    const char *plugin = b->engine->plugin;
    http_reply r;
    char err[768];
    long timeout_ms = b->settings.request_timeout_s * 1000L;
    ilab_status st = http_client_request(&b->target, path, body, timeout_ms, &r, err, sizeof err);
    json_decref(body);
    if (st != ILAB_OK)
        return http_fail(b, st, "%s: %s", plugin, err);
    if (r.status < 200 || r.status >= 300) {
        char msg[512];
        http_client_error_text(r.body, r.len, msg, sizeof msg);
        long status = r.status;
        http_reply_free(&r);
        return http_fail(b, http_client_status_of(status, msg), "%s: POST %s%s: HTTP %ld: %s",
                         plugin, b->target.base_url, path, status, msg);
    }
    *out = json_loadb(r.body, r.len, JSON_ALLOW_NUL, NULL);
    http_reply_free(&r);
    if (!*out)
        return http_fail(b, ILAB_IO, "%s: POST %s%s: the answer is not JSON", plugin,
                         b->target.base_url, path);
    return ILAB_OK;
}

static json_t *request_body(ilab_backend_t *b)
{
    json_t *o = json_object();
    if (b->engine->protocol->tokenize_sends_model)
        json_object_set_new(o, "model", json_string(b->model.id));
    return o;
}

ilab_status http_tokenize(ilab_backend_t *b, const char *text, size_t len, uint32_t flags,
                          int32_t *tokens, size_t cap, size_t *n_tokens)
{
    if (!b || (!text && len) || !n_tokens || (!tokens && cap))
        return http_fail(b, ILAB_INVALID_ARGUMENT, "%s: tokenize: NULL argument",
                         b ? b->engine->plugin : "http backend");
    const char *plugin = b->engine->plugin;
    if (flags & ~(uint32_t)(ILAB_TOKENIZE_ADD_BOS | ILAB_TOKENIZE_ADD_EOS))
        return http_fail(b, ILAB_INVALID_ARGUMENT, "%s: tokenize: unknown flag bits 0x%x", plugin,
                         flags & ~(uint32_t)(ILAB_TOKENIZE_ADD_BOS | ILAB_TOKENIZE_ADD_EOS));
    /* Without eos_id, model_info() reports no EOS (-1), and for a vocabulary
     * without EOS the flag adds nothing (TOK-8): a configuration of only the
     * server's URL must pass every clause the adapter declares. */
    if (b->eos_id < 0)
        flags &= ~(uint32_t)ILAB_TOKENIZE_ADD_EOS;
    /* JSON carries only valid UTF-8: other bytes are refused, not mangled */
    json_t *prompt = json_stringn(text ? text : "", len);
    if (!prompt)
        return http_fail(b, ILAB_INVALID_ARGUMENT,
                         "%s: tokenize: the text is not valid UTF-8 (the server's tokenizer takes JSON text)",
                         plugin);
    json_t *body = request_body(b);
    json_object_set_new(body, "prompt", prompt);
    json_object_set_new(body, "add_special_tokens", json_boolean(flags & ILAB_TOKENIZE_ADD_BOS));
    json_t *ans = NULL;
    ilab_status st = http_post_json(b, "/tokenize", body, &ans);
    if (st != ILAB_OK)
        return st;
    json_t *ids = json_object_get(ans, "tokens");
    if (!json_is_array(ids)) {
        json_decref(ans);
        return http_fail(b, ILAB_IO, "%s: /tokenize answered without a 'tokens' array", plugin);
    }
    size_t n = json_array_size(ids), need = n + ((flags & ILAB_TOKENIZE_ADD_EOS) ? 1 : 0);
    /* every id checked before anything is written: a failed call writes
     * neither the count nor the buffer (TOK-7) */
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(ids, i);
        json_int_t id = json_integer_value(v);
        if (!json_is_integer(v) || id < 0 || id >= b->model.vocab_size) {
            json_decref(ans);
            return http_fail(b, ILAB_IO, "%s: /tokenize answered tokens[%zu] = %lld, not an id in [0, %d)",
                             plugin, i, (long long)id, b->model.vocab_size);
        }
    }
    *n_tokens = need;
    if (need > cap) {
        json_decref(ans);
        return http_fail(b, ILAB_BUFFER_TOO_SMALL, "%s: tokenize: %zu tokens need room, %zu given",
                         plugin, need, cap);
    }
    for (size_t i = 0; i < n; i++)
        tokens[i] = (int32_t)json_integer_value(json_array_get(ids, i));
    if (flags & ILAB_TOKENIZE_ADD_EOS)
        tokens[n] = b->eos_id;
    json_decref(ans);
    return ILAB_OK;
}

static bool is_special(const ilab_backend_t *b, int32_t t)
{
    return (t >= 0 && t == b->bos_id) || (t >= 0 && t == b->eos_id);
}

/* The server's text of `tokens` (BOS/EOS left out: they decode to ""), malloc'd. */
static ilab_status server_text(ilab_backend_t *b, const int32_t *tokens, size_t n, char **out,
                               size_t *out_len)
{
    const char *plugin = b->engine->plugin;
    json_t *ids = json_array();
    for (size_t i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] >= b->model.vocab_size) {
            json_decref(ids);
            return http_fail(b, ILAB_INVALID_ARGUMENT, "%s: token id %d at %zu is outside [0, %d)",
                             plugin, tokens[i], i, b->model.vocab_size);
        }
        if (!is_special(b, tokens[i]))
            json_array_append_new(ids, json_integer(tokens[i]));
    }
    if (json_array_size(ids) == 0) {
        json_decref(ids);
        *out = strdup("");
        *out_len = 0;
        return *out ? ILAB_OK : http_fail(b, ILAB_OUT_OF_MEMORY, "%s: out of memory", plugin);
    }
    json_t *body = request_body(b);
    json_object_set_new(body, "tokens", ids);
    json_t *ans = NULL;
    ilab_status st = http_post_json(b, "/detokenize", body, &ans);
    if (st != ILAB_OK)
        return st;
    const char *key = b->engine->protocol->detokenize_key;
    json_t *text = json_object_get(ans, key);
    if (!json_is_string(text)) {
        json_decref(ans);
        return http_fail(b, ILAB_IO, "%s: /detokenize answered without a '%s' string", plugin, key);
    }
    *out_len = json_string_length(text);
    *out = malloc(*out_len + 1);
    if (*out)
        memcpy(*out, json_string_value(text), *out_len + 1);
    json_decref(ans);
    return *out ? ILAB_OK : http_fail(b, ILAB_OUT_OF_MEMORY, "%s: out of memory", plugin);
}

/* Copy `len` bytes plus a NUL, or report the size needed. */
static ilab_status copy_text(ilab_backend_t *b, const char *call, const char *s, size_t len,
                             char *out, size_t cap, size_t *out_len)
{
    *out_len = len;
    if (!out || cap < len + 1)
        return http_fail(b, ILAB_BUFFER_TOO_SMALL, "%s: %s: %zu bytes need room, %zu given",
                         b->engine->plugin, call, len + 1, cap);
    memcpy(out, s, len);
    out[len] = '\0';
    return ILAB_OK;
}

ilab_status http_detokenize(ilab_backend_t *b, const int32_t *tokens, size_t n, char *text,
                            size_t cap, size_t *len)
{
    if (!b || (!tokens && n) || !len || (!text && cap))
        return http_fail(b, ILAB_INVALID_ARGUMENT, "%s: detokenize: NULL argument",
                         b ? b->engine->plugin : "http backend");
    char *s = NULL;
    size_t sl = 0;
    ilab_status st = server_text(b, tokens, n, &s, &sl);
    if (st == ILAB_OK)
        st = copy_text(b, "detokenize", s, sl, text, cap, len);
    free(s);
    return st;
}

/* The bytes `token` adds after `prev`: the text of [prev, token] past the
 * text of [prev] (a token's text can depend on the one before it, e.g. a
 * leading space dropped at the start of text). */
ilab_status http_token_piece(ilab_backend_t *b, int32_t prev, int32_t token, char *piece,
                             size_t cap, size_t *len)
{
    if (!b || !len || (!piece && cap))
        return http_fail(b, ILAB_INVALID_ARGUMENT, "%s: token_piece: NULL argument",
                         b ? b->engine->plugin : "http backend");
    const char *plugin = b->engine->plugin;
    if (token < 0 || token >= b->model.vocab_size || prev < -1 || prev >= b->model.vocab_size)
        return http_fail(b, ILAB_INVALID_ARGUMENT, "%s: token_piece(%d, %d): ids must be in [0, %d) (prev may be -1)",
                         plugin, prev, token, b->model.vocab_size);
    if (is_special(b, token))
        return copy_text(b, "token_piece", "", 0, piece, cap, len);
    char *pair = NULL, *alone = NULL;
    size_t pair_len = 0, alone_len = 0;
    ilab_status st;
    if (prev < 0 || is_special(b, prev)) {
        st = server_text(b, &token, 1, &pair, &pair_len);
        if (st == ILAB_OK)
            st = copy_text(b, "token_piece", pair, pair_len, piece, cap, len);
        free(pair);
        return st;
    }
    int32_t two[2] = {prev, token};
    st = server_text(b, two, 2, &pair, &pair_len);
    if (st == ILAB_OK)
        st = server_text(b, &prev, 1, &alone, &alone_len);
    if (st == ILAB_OK && alone_len <= pair_len && memcmp(pair, alone, alone_len) == 0)
        st = copy_text(b, "token_piece", pair + alone_len, pair_len - alone_len, piece, cap, len);
    else if (st == ILAB_OK) {
        /* the pair does not extend the first token's text: take the token alone */
        free(pair);
        pair = NULL;
        st = server_text(b, &token, 1, &pair, &pair_len);
        if (st == ILAB_OK)
            st = copy_text(b, "token_piece", pair, pair_len, piece, cap, len);
    }
    free(pair);
    free(alone);
    return st;
}
