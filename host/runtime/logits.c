/* Logits handling (sampling: host): a sequence's logits row is sampled, the
 * token checked against EOS and stop token ids, turned into text through
 * token_piece() and the text stream (stop strings, UTF-8 hold-back), and
 * emitted as a TOKEN event; the request ends when it should. Scheduler
 * thread. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"

static bool is_stop_token(const ilab_engine *e, const ilab_req *r, int32_t token)
{
    /* EOS and every other end-of-generation id (eog.c) */
    if (!r->ignore_eos && ilab_engine_is_eog(e, token))
        return true;
    for (size_t i = 0; i < r->n_stop_ids; i++)
        if (r->stop_ids[i] == token)
            return true;
    return false;
}

/* The bytes `token` adds, into r->piece. */
static ilab_status token_piece(ilab_engine *e, ilab_req *r, int32_t token, size_t *len,
                               char *err, size_t err_cap)
{
    for (int attempt = 0; attempt < 2; attempt++) {
        if (!r->piece) {
            r->piece_cap = r->piece_cap ? r->piece_cap : 64;
            r->piece = malloc(r->piece_cap);
            if (!r->piece)
                return ILAB_OUT_OF_MEMORY;
        }
        ilab_engine_lock_backend(e, e->serialize_all);
        ilab_status st = e->api->token_piece(e->backend, r->prev_token, token, r->piece,
                                             r->piece_cap, len);
        if (st != ILAB_OK && st != ILAB_BUFFER_TOO_SMALL)
            ilab_engine_backend_error(e, err, err_cap);
        ilab_engine_unlock_backend(e, e->serialize_all);
        if (st != ILAB_BUFFER_TOO_SMALL)
            return st;
        free(r->piece);
        r->piece = NULL;
        r->piece_cap = *len + 1;
    }
    snprintf(err, err_cap, "token_piece kept asking for a larger buffer");
    return ILAB_INTERNAL;
}

/* A sequence's logits came back: sample, emit, and maybe end it. */
void ilab_engine_on_logits(ilab_engine *e, ilab_req *r)
{
    char err[512];
    float logprob = 0.0f;
    int n_top = r->top_logprobs;
    int32_t token = ilab_sampler_sample(r->sampler, r->logits, &logprob, r->top, n_top);
    ilab_sampler_accept(r->sampler, token, true);

    if (is_stop_token(e, r, token)) {
        const char *tail;
        size_t tail_len;
        ilab_text_stream_flush(&r->ts, &tail, &tail_len);
        ilab_engine_retire(e, r, ILAB_FINISH_STOP, ILAB_OK, NULL, tail, tail_len);
        return;
    }
    size_t len = 0;
    ilab_status st = ILAB_OK;
    if (e->manifest->tokenizer) {
        st = token_piece(e, r, token, &len, err, sizeof err);
    }
    if (st != ILAB_OK) {
        char msg[640];
        snprintf(msg, sizeof msg, "token_piece(%d): %s", token, err);
        ilab_engine_retire(e, r, ILAB_FINISH_ERROR, st, msg, NULL, 0);
        return;
    }
    r->completion++;
    bool context_full = r->n_positions >= e->max_context;
    bool last = r->completion >= (uint32_t)r->max_tokens || context_full;
    const char *delta = "";
    size_t delta_len = 0;
    bool stopped = false;
    if (len > 0 || last)
        stopped = ilab_text_stream_push(&r->ts, r->piece ? r->piece : "", len, last, &delta, &delta_len);
    r->prev_token = token;

    ilab_event_t ev;
    memset(&ev, 0, sizeof ev);
    ev.struct_size = sizeof ev;
    ev.type = ILAB_EVENT_TOKEN;
    ev.request_id = r->id;
    ev.token = token;
    ev.text = delta;
    ev.text_len = delta_len;
    ev.logprob = logprob;
    ev.top_logprobs = n_top > 0 ? r->top : NULL;
    ev.n_top_logprobs = (uint32_t)(n_top > 0 ? (n_top < e->info.vocab_size ? n_top : e->info.vocab_size) : 0);
    ilab_req_note_token(r);
    int stop_now = r->on_event(r->user_data, &ev);

    if (stop_now || atomic_load(&r->cancel))
        ilab_engine_retire(e, r, ILAB_FINISH_CANCELLED, ILAB_OK, NULL, NULL, 0);
    else if (stopped)
        ilab_engine_retire(e, r, ILAB_FINISH_STOP, ILAB_OK, NULL, NULL, 0);
    else if (last)
        ilab_engine_retire(e, r, ILAB_FINISH_LENGTH, ILAB_OK, NULL, NULL, 0);
    else if (!ilab_req_push_token(r, token)) /* the next step feeds it */
        ilab_engine_retire(e, r, ILAB_FINISH_ERROR, ILAB_OUT_OF_MEMORY,
                           "out of memory recording an output token", NULL, 0);
}
