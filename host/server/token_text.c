/* Per-token text for logprobs. */
#include "token_text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

ilab_status ilab_token_text_load(ilab_token_text *tt, const ilab_backend_api_t *api,
                                 ilab_backend_t *backend, const ilab_model_info_t *info)
{
    memset(tt, 0, sizeof *tt);
    int32_t n = info->vocab_size;
    if (n <= 0)
        return ILAB_INVALID_ARGUMENT;
    tt->pieces = calloc((size_t)n, sizeof *tt->pieces);
    tt->lens = calloc((size_t)n, sizeof *tt->lens);
    if (!tt->pieces || !tt->lens) {
        ilab_token_text_free(tt);
        return ILAB_OUT_OF_MEMORY;
    }
    tt->n = n;
    /* A piece depends on the token before it (the start of text drops the
     * dummy-prefix space, BOS likewise): name tokens as they read mid-text,
     * after an ordinary token. */
    int32_t prev = 0;
    while (prev < n && (prev == info->bos_id || prev == info->eos_id))
        prev++;
    if (prev >= n)
        prev = -1;
    char small[64];
    for (int32_t t = 0; t < n; t++) {
        size_t len = 0;
        ilab_status st = api->token_piece(backend, prev, t, small, sizeof small, &len);
        char *piece;
        if (st == ILAB_BUFFER_TOO_SMALL) {
            piece = malloc(len + 1);
            if (!piece) {
                ilab_token_text_free(tt);
                return ILAB_OUT_OF_MEMORY;
            }
            st = api->token_piece(backend, prev, t, piece, len + 1, &len);
        } else {
            piece = st == ILAB_OK ? strndup(small, len) : NULL;
        }
        if (st != ILAB_OK) {
            free(piece);
            ilab_token_text_free(tt);
            return st;
        }
        if (!piece) {
            ilab_token_text_free(tt);
            return ILAB_OUT_OF_MEMORY;
        }
        tt->pieces[t] = piece;
        tt->lens[t] = len;
    }
    return ILAB_OK;
}

void ilab_token_text_free(ilab_token_text *tt)
{
    if (tt->pieces)
        for (int32_t t = 0; t < tt->n; t++)
            free(tt->pieces[t]);
    free(tt->pieces);
    free(tt->lens);
    memset(tt, 0, sizeof *tt);
}

json_t *ilab_token_text_json(const ilab_token_text *tt, int32_t token)
{
    if (token < 0 || token >= tt->n)
        return json_string("");
    json_t *s = json_stringn(tt->pieces[token], tt->lens[token]);
    if (s)
        return s;
    char buf[256];
    size_t o = (size_t)snprintf(buf, sizeof buf, "bytes:");
    for (size_t i = 0; i < tt->lens[token] && o + 5 < sizeof buf; i++)
        o += (size_t)snprintf(buf + o, sizeof buf - o, "\\x%02x",
                              (unsigned char)tt->pieces[token][i]);
    return json_string(buf);
}

json_t *ilab_token_bytes_json(const ilab_token_text *tt, int32_t token)
{
    json_t *arr = json_array();
    if (token < 0 || token >= tt->n)
        return arr;
    for (size_t i = 0; i < tt->lens[token]; i++)
        json_array_append_new(arr, json_integer((unsigned char)tt->pieces[token][i]));
    return arr;
}
