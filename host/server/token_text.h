/* The text of every token in the vocabulary, read once at start-up so that
 * logprob alternatives can be named without calling into the backend while
 * the scheduler thread is using it. */
#ifndef ILAB_SERVER_TOKEN_TEXT_H
#define ILAB_SERVER_TOKEN_TEXT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "inferlab/inferlab.h"

typedef struct ilab_token_text {
    char **pieces;   /* pieces[t]: the bytes token t adds mid-text (owned) */
    size_t *lens;
    int32_t n;       /* vocab_size; 0 when not loaded */
} ilab_token_text;

/* Fill `tt` through api->token_piece. Returns the backend's status. */
ilab_status ilab_token_text_load(ilab_token_text *tt, const ilab_backend_api_t *api,
                                 ilab_backend_t *backend, const ilab_model_info_t *info);
void ilab_token_text_free(ilab_token_text *tt);

/* A token as a JSON string: its text when that is valid UTF-8, otherwise
 * "bytes:\xNN..." (a piece of a code point, as vLLM spells it). */
json_t *ilab_token_text_json(const ilab_token_text *tt, int32_t token);

/* The token's bytes as a JSON array of integers (chat logprobs "bytes"). */
json_t *ilab_token_bytes_json(const ilab_token_text *tt, int32_t token);

#endif
