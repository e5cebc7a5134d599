/* The backend's tokenizer from other threads: a server answering /tokenize
 * while the scheduler runs eval() takes the scheduler's backend lock (when
 * the manifest's thread_safety needs one). Any thread. */
#include <stdio.h>
#include <stdlib.h>

#include "engine_internal.h"

ilab_status ilab_engine_with_backend(ilab_engine *e, ilab_engine_backend_fn fn, void *ctx)
{
    if (!e || !fn)
        return ILAB_INVALID_ARGUMENT;
    ilab_engine_lock_backend(e, e->serialize_all);
    ilab_status st = fn(ctx, e->api, e->backend);
    ilab_engine_unlock_backend(e, e->serialize_all);
    return st;
}

typedef struct tokenize_call {
    const char *text;
    size_t len;
    uint32_t flags;
    int32_t *tokens;
    size_t n;
    char *err;
    size_t err_cap;
} tokenize_call;

/* Two tries: the first with a guess, the second with the size the backend
 * asked for. The backend's message is read under the same lock. */
static ilab_status tokenize_locked(void *ctx, const ilab_backend_api_t *api, ilab_backend_t *b)
{
    tokenize_call *c = ctx;
    size_t cap = c->len + 8;
    ilab_status st = ILAB_BUFFER_TOO_SMALL;
    for (int attempt = 0; attempt < 2 && st == ILAB_BUFFER_TOO_SMALL; attempt++) {
        int32_t *grown = realloc(c->tokens, (cap ? cap : 1) * sizeof *grown);
        if (!grown) {
            snprintf(c->err, c->err_cap, "out of memory for %zu token ids", cap);
            return ILAB_OUT_OF_MEMORY;
        }
        c->tokens = grown;
        st = api->tokenize(b, c->text, c->len, c->flags, c->tokens, cap, &c->n);
        if (st == ILAB_BUFFER_TOO_SMALL)
            cap = c->n;
    }
    if (st == ILAB_BUFFER_TOO_SMALL)
        snprintf(c->err, c->err_cap, "tokenize kept asking for a larger buffer");
    else if (st != ILAB_OK)
        api->last_error(b, c->err, c->err_cap);
    return st;
}

ilab_status ilab_engine_tokenize(ilab_engine *e, const char *text, size_t len, uint32_t flags,
                                 char *err, size_t err_cap, int32_t **tokens, size_t *n_tokens)
{
    if (err && err_cap)
        err[0] = '\0';
    if (!e || (!text && len) || !tokens || !n_tokens || !err || !err_cap)
        return ILAB_INVALID_ARGUMENT;
    tokenize_call c = {.text = text, .len = len, .flags = flags, .err = err, .err_cap = err_cap};
    ilab_status st = ilab_engine_with_backend(e, tokenize_locked, &c);
    if (st != ILAB_OK) {
        free(c.tokens);
        c.tokens = NULL;
        c.n = 0;
    }
    *tokens = c.tokens;
    *n_tokens = c.n;
    return st;
}

typedef struct detokenize_call {
    const int32_t *tokens;
    size_t n;
    char *text;
    size_t len;
    char *err;
    size_t err_cap;
} detokenize_call;

static ilab_status detokenize_locked(void *ctx, const ilab_backend_api_t *api, ilab_backend_t *b)
{
    detokenize_call *c = ctx;
    size_t cap = c->n * 16 + 16;
    ilab_status st = ILAB_BUFFER_TOO_SMALL;
    for (int attempt = 0; attempt < 2 && st == ILAB_BUFFER_TOO_SMALL; attempt++) {
        char *grown = realloc(c->text, cap);
        if (!grown) {
            snprintf(c->err, c->err_cap, "out of memory for %zu bytes of text", cap);
            return ILAB_OUT_OF_MEMORY;
        }
        c->text = grown;
        st = api->detokenize(b, c->tokens, c->n, c->text, cap, &c->len);
        if (st == ILAB_BUFFER_TOO_SMALL)
            cap = c->len + 1;
    }
    if (st == ILAB_BUFFER_TOO_SMALL)
        snprintf(c->err, c->err_cap, "detokenize kept asking for a larger buffer");
    else if (st != ILAB_OK)
        api->last_error(b, c->err, c->err_cap);
    return st;
}

ilab_status ilab_engine_detokenize(ilab_engine *e, const int32_t *tokens, size_t n_tokens,
                                   char *err, size_t err_cap, char **text, size_t *text_len)
{
    if (err && err_cap)
        err[0] = '\0';
    if (!e || (!tokens && n_tokens) || !text || !text_len || !err || !err_cap)
        return ILAB_INVALID_ARGUMENT;
    detokenize_call c = {.tokens = tokens, .n = n_tokens, .err = err, .err_cap = err_cap};
    ilab_status st = ilab_engine_with_backend(e, detokenize_locked, &c);
    if (st != ILAB_OK) {
        free(c.text);
        c.text = NULL;
        c.len = 0;
    }
    *text = c.text;
    *text_len = c.len;
    return st;
}
