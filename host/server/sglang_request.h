/* SGLang's native POST /generate body -> ilab_api_request (kind
 * ILAB_API_SGLANG), failing closed like the OpenAI parser: an unknown
 * member, or a known one this server cannot honour, is a 400 naming it. The
 * documented subset (docs/http-api.md): `input_ids` or `text`,
 * `sampling_params` {max_new_tokens, temperature, top_p, top_k, min_p,
 * repetition_penalty, presence_penalty, frequency_penalty, stop,
 * stop_token_ids, ignore_eos, skip_special_tokens, sampling_seed},
 * `stream`, `return_logprob`, `top_logprobs_num`, `logprob_start_len`. */
#ifndef ILAB_SERVER_SGLANG_REQUEST_H
#define ILAB_SERVER_SGLANG_REQUEST_H

#include <stdbool.h>
#include <stddef.h>

#include "openai_request.h"

/* SGLang's defaults where they differ from the OpenAI endpoints'. */
#define ILAB_SGLANG_DEFAULT_NEW_TOKENS 128

bool ilab_sglang_request_parse(const char *body, size_t len, ilab_api_request *out,
                               ilab_api_error *err);

#endif
