/* Building OpenAI-shaped response bodies and stream chunks (jansson). */
#ifndef ILAB_SERVER_OPENAI_RESPONSE_H
#define ILAB_SERVER_OPENAI_RESPONSE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#include "openai_request.h"
#include "pending_request.h"
#include "token_text.h"

/* Text as a JSON string; bytes that are not valid UTF-8 become U+FFFD, so
 * a response is always valid JSON. */
json_t *ilab_json_text(const char *text, size_t len);

/* What every response and chunk names. */
typedef struct ilab_response_head {
    ilab_api_kind kind;
    const char *id;     /* "cmpl-..." / "chatcmpl-..." */
    time_t created;
    const char *model;
} ilab_response_head;

/* Logprobs of one TOKEN event, in the endpoint's shape:
 * completions: {"tokens":[t], "token_logprobs":[lp], "top_logprobs":[{t: lp}]|null,
 *               "text_offset":[offset]}
 * chat: {"token", "logprob", "bytes", "top_logprobs":[{"token","logprob","bytes"}]}
 * (an entry of logprobs.content). `as_ids`: tokens are named "token_id:N"
 * (vLLM's return_tokens_as_token_ids) instead of by their text. */
json_t *ilab_token_logprobs_json(ilab_api_kind kind, const ilab_token_text *tt,
                                 const ilab_pending_event *ev, int32_t top_logprobs,
                                 size_t text_offset, bool as_ids);

/* Accumulated logprobs of a whole response (non-streaming). */
typedef struct ilab_logprobs_acc {
    json_t *root; /* completions: the four arrays; chat: {"content": [...]} */
} ilab_logprobs_acc;
void ilab_logprobs_acc_init(ilab_logprobs_acc *a, ilab_api_kind kind);
void ilab_logprobs_acc_add(ilab_logprobs_acc *a, ilab_api_kind kind, json_t *token_lp);

/* "usage": {"prompt_tokens", "completion_tokens", "total_tokens"} */
json_t *ilab_usage_json(unsigned prompt_tokens, unsigned completion_tokens);

/* The finish reason's name, or JSON null for ILAB_FINISH_NONE. */
json_t *ilab_finish_json(ilab_finish_reason r);

/* One stream chunk of choice `index`. `text` (may be NULL) is the delta;
 * `logprobs` (taken, may be NULL) the delta's logprobs; chat chunks with
 * `role` carry the assistant role instead of content. */
json_t *ilab_chunk_json(const ilab_response_head *h, uint32_t index, bool role, json_t *text,
                        json_t *logprobs, ilab_finish_reason finish, bool usage_null);

/* The closing chunk that carries usage ("choices": []). */
json_t *ilab_usage_chunk_json(const ilab_response_head *h, unsigned prompt_tokens,
                              unsigned completion_tokens);

/* One choice of a non-streamed response. `text` and `logprobs` are taken. */
json_t *ilab_choice_json(ilab_api_kind kind, uint32_t index, json_t *text, json_t *logprobs,
                         ilab_finish_reason finish);

/* The whole non-streamed response; `choices` (an array) is taken. */
json_t *ilab_response_json(const ilab_response_head *h, json_t *choices, unsigned prompt_tokens,
                           unsigned completion_tokens);

#endif
