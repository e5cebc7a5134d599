/* SGLang-shaped /generate answers (jansson): the whole body, which a
 * stream repeats as it grows, each chunk holding the output so far (SGLang's
 * default, not its --incremental-streaming-output). Not the OpenAI shapes:
 * those are openai_response.h. */
#ifndef ILAB_SERVER_SGLANG_RESPONSE_H
#define ILAB_SERVER_SGLANG_RESPONSE_H

#include <jansson.h>
#include <stdint.h>

#include "inferlab/inferlab.h"
#include "pending_request.h"

/* The output so far of one request. */
typedef struct ilab_sglang_output {
    json_t *ids;      /* output_ids */
    json_t *lps;      /* meta_info.output_token_logprobs: [[logprob, id, null]...]; or NULL */
    json_t *tops;     /* meta_info.output_top_logprobs: [[[logprob, id, null]...]...]; or NULL */
} ilab_sglang_output;

/* Empty arrays; logprob lists only with `logprobs`. */
void ilab_sglang_output_init(ilab_sglang_output *o, bool logprobs);
void ilab_sglang_output_free(ilab_sglang_output *o);
/* One TOKEN event into the output (`top_n` alternatives at most). */
void ilab_sglang_output_add(ilab_sglang_output *o, const ilab_pending_event *ev, int32_t top_n);

/* {"text", "output_ids", "meta_info": {"id", "finish_reason", "prompt_tokens",
 * "completion_tokens", [logprob lists]}}; finish_reason null while running,
 * else {"type": "stop", "matched": null} | {"type": "length", "length": N} |
 * {"type": "abort", "message"}. `o`'s arrays are shared, not taken. */
json_t *ilab_sglang_body_json(const char *id, const char *text, size_t text_len,
                              const ilab_sglang_output *o, ilab_finish_reason finish,
                              uint32_t prompt_tokens, uint32_t completion_tokens);

#endif
