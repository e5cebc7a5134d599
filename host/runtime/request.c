/* Request building: an ilab_request from the caller becomes an ilab_req the
 * engine owns — the prompt tokenized (or its ids copied), every parameter
 * checked against the model and the manifest, stop strings copied, and for
 * host sampling a sampler, a text stream and logits buffers allocated. Runs
 * on the submitting thread, before the request is queued. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"

void ilab_req_free(ilab_req *r)
{
    if (!r)
        return;
    free(r->tokens);
    if (r->stop)
        for (size_t i = 0; i < r->n_stop; i++)
            free(r->stop[i]);
    free(r->stop);
    free(r->stop_ids);
    ilab_sampler_free(r->sampler);
    ilab_text_stream_free(&r->ts);
    free(r->logits);
    free(r->top);
    free(r->piece);
    free(r);
}

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p)
        memcpy(p, s, n);
    return p;
}

/* Tokenize a text prompt with the backend's tokenizer. */
static ilab_status tokenize_prompt(ilab_engine *e, const ilab_request *req, ilab_req *r,
                                   char *err, size_t err_cap)
{
    if (!e->manifest->tokenizer) {
        snprintf(err, err_cap, "backend '%s' declares no tokenizer: send prompt token ids instead of text",
                 e->manifest->name);
        return ILAB_UNSUPPORTED;
    }
    size_t cap = req->prompt_len + 8, n = 0;
    uint32_t flags = req->add_bos ? ILAB_TOKENIZE_ADD_BOS : 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        free(r->tokens);
        r->tokens = malloc(cap * sizeof *r->tokens);
        if (!r->tokens)
            return ILAB_OUT_OF_MEMORY;
        ilab_engine_lock_backend(e, e->serialize_all);
        ilab_status st = e->api->tokenize(e->backend, req->prompt_text, req->prompt_len, flags,
                                          r->tokens, cap, &n);
        char msg[256] = "";
        if (st != ILAB_OK && st != ILAB_BUFFER_TOO_SMALL)
            e->api->last_error(e->backend, msg, sizeof msg);
        ilab_engine_unlock_backend(e, e->serialize_all);
        if (st == ILAB_OK) {
            r->n_prompt = r->n_tokens = n;
            r->cap_tokens = cap;
            return ILAB_OK;
        }
        if (st != ILAB_BUFFER_TOO_SMALL) {
            snprintf(err, err_cap, "prompt: tokenize failed: %s: %s", ilab_status_name(st), msg);
            return st;
        }
        cap = n;
    }
    snprintf(err, err_cap, "prompt: tokenize kept asking for a larger buffer");
    return ILAB_INTERNAL;
}

bool ilab_req_push_token(ilab_req *r, int32_t token)
{
    if (r->n_tokens == r->cap_tokens) {
        size_t cap = r->cap_tokens * 2 + 16;
        int32_t *grown = realloc(r->tokens, cap * sizeof *grown);
        if (!grown)
            return false;
        r->tokens = grown;
        r->cap_tokens = cap;
    }
    r->tokens[r->n_tokens++] = token;
    return true;
}

/* The limits a request is checked against before anything is allocated. */
static ilab_status check_limits(const ilab_engine *e, const ilab_request *req, char *err,
                                size_t err_cap)
{
    if (req->max_tokens <= 0) {
        snprintf(err, err_cap, "max_tokens must be > 0 (got %d)", req->max_tokens);
        return ILAB_INVALID_ARGUMENT;
    }
    if (req->top_logprobs < 0) {
        snprintf(err, err_cap, "top_logprobs must be >= 0 (got %d)", req->top_logprobs);
        return ILAB_INVALID_ARGUMENT;
    }
    if (req->top_logprobs > e->manifest->topk_max) {
        snprintf(err, err_cap, "top_logprobs %d exceeds backend '%s' topk_max %d",
                 req->top_logprobs, e->manifest->name, e->manifest->topk_max);
        return e->manifest->topk_max == 0 ? ILAB_UNSUPPORTED : ILAB_INVALID_ARGUMENT;
    }
    return ILAB_OK;
}

/* The prompt as token ids: tokenized text, or the caller's ids copied;
 * then checked against the vocabulary and the context. */
static ilab_status copy_prompt(ilab_engine *e, const ilab_request *req, ilab_req *r, char *err,
                               size_t err_cap)
{
    ilab_status st = ILAB_OK;
    if (req->prompt_text) {
        st = tokenize_prompt(e, req, r, err, err_cap);
    } else if (req->n_prompt_tokens > 0 && req->prompt_tokens) {
        r->tokens = malloc(req->n_prompt_tokens * sizeof *r->tokens);
        if (!r->tokens)
            st = ILAB_OUT_OF_MEMORY;
        else {
            memcpy(r->tokens, req->prompt_tokens, req->n_prompt_tokens * sizeof *r->tokens);
            r->n_prompt = r->n_tokens = r->cap_tokens = req->n_prompt_tokens;
        }
    }
    if (st == ILAB_OK && r->n_prompt == 0) {
        snprintf(err, err_cap, "prompt is empty (no text and no token ids%s)",
                 req->prompt_text ? "; it tokenized to nothing" : "");
        st = ILAB_INVALID_ARGUMENT;
    }
    for (size_t i = 0; st == ILAB_OK && i < r->n_prompt; i++)
        if (r->tokens[i] < 0 || r->tokens[i] >= e->info.vocab_size) {
            snprintf(err, err_cap, "prompt token %zu is %d, outside the vocabulary [0, %d)",
                     i, r->tokens[i], e->info.vocab_size);
            st = ILAB_INVALID_ARGUMENT;
        }
    /* The output continues the prompt: its first piece follows the last
     * prompt token (so a leading space is kept, not taken for the
     * tokenizer's dummy prefix at the start of a text). */
    if (st == ILAB_OK)
        r->prev_token = r->tokens[r->n_prompt - 1];
    if (st == ILAB_OK && r->n_prompt > (size_t)e->max_context) {
        snprintf(err, err_cap, "prompt is %zu tokens, longer than the context of %d", r->n_prompt,
                 e->max_context);
        st = ILAB_CONTEXT_OVERFLOW;
    }
    return st;
}

/* Stop strings (owned copies) and stop token ids (checked against the
 * vocabulary). */
static ilab_status copy_stops(const ilab_engine *e, const ilab_request *req, ilab_req *r,
                              char *err, size_t err_cap)
{
    ilab_status st = ILAB_OK;
    if (req->n_stop > 0) {
        r->stop = calloc(req->n_stop, sizeof *r->stop);
        if (!r->stop)
            st = ILAB_OUT_OF_MEMORY;
        for (size_t i = 0; st == ILAB_OK && i < req->n_stop; i++) {
            if (!req->stop[i]) {
                snprintf(err, err_cap, "stop string %zu is NULL", i);
                st = ILAB_INVALID_ARGUMENT;
                break;
            }
            r->stop[i] = dup_str(req->stop[i]);
            r->n_stop = i + 1;
            if (!r->stop[i])
                st = ILAB_OUT_OF_MEMORY;
        }
    }
    if (st == ILAB_OK && req->n_stop_token_ids > 0) {
        r->stop_ids = malloc(req->n_stop_token_ids * sizeof *r->stop_ids);
        if (!r->stop_ids)
            st = ILAB_OUT_OF_MEMORY;
        for (size_t i = 0; st == ILAB_OK && i < req->n_stop_token_ids; i++) {
            int32_t t = req->stop_token_ids[i];
            if (t < 0 || t >= e->info.vocab_size) {
                snprintf(err, err_cap, "stop token id %d is outside the vocabulary [0, %d)", t,
                         e->info.vocab_size);
                st = ILAB_INVALID_ARGUMENT;
            }
            r->stop_ids[i] = t;
        }
        r->n_stop_ids = req->n_stop_token_ids;
    }
    return st;
}

/* Host sampling: the sampler (primed with the prompt), the text stream and
 * the logits buffers. Backend sampling: the same parameter checks only. */
static ilab_status prepare_sampling(const ilab_engine *e, ilab_req *r, char *err, size_t err_cap)
{
    if (e->backend_sampling)
        return ilab_sampling_validate(&r->sampling, err, err_cap); /* same refusals either way */
    ilab_status st =
        ilab_sampler_create(&r->sampling, e->info.vocab_size, err, err_cap, &r->sampler);
    if (st != ILAB_OK)
        return st;
    for (size_t i = 0; i < r->n_prompt; i++)
        ilab_sampler_accept(r->sampler, r->tokens[i], false);
    r->logits = malloc((size_t)e->info.vocab_size * sizeof *r->logits);
    r->top = calloc((size_t)(r->top_logprobs > 0 ? r->top_logprobs : 1), sizeof *r->top);
    if (!r->logits || !r->top ||
        !ilab_text_stream_init(&r->ts, (const char *const *)r->stop, r->n_stop))
        return ILAB_OUT_OF_MEMORY;
    return ILAB_OK;
}

ilab_status ilab_req_build(ilab_engine *e, const ilab_request *req, char *err, size_t err_cap,
                           ilab_req **out)
{
    ilab_status st = check_limits(e, req, err, err_cap);
    if (st != ILAB_OK)
        return st;
    ilab_req *r = calloc(1, sizeof *r);
    if (!r)
        return ILAB_OUT_OF_MEMORY;
    r->engine = e;
    r->sampling = req->sampling;
    r->sampling.struct_size = sizeof r->sampling;
    r->max_tokens = req->max_tokens;
    r->ignore_eos = req->ignore_eos;
    r->top_logprobs = req->top_logprobs;
    r->prev_token = -1;
    atomic_init(&r->cancel, 0);
    atomic_init(&r->worker_done, false);

    st = copy_prompt(e, req, r, err, err_cap);
    if (st == ILAB_OK)
        st = copy_stops(e, req, r, err, err_cap);
    if (st == ILAB_OK)
        st = prepare_sampling(e, r, err, err_cap);
    if (st == ILAB_OUT_OF_MEMORY && err_cap && !err[0])
        snprintf(err, err_cap, "out of memory while queueing a request");
    if (st != ILAB_OK) {
        ilab_req_free(r);
        return st;
    }
    *out = r;
    return ILAB_OK;
}
