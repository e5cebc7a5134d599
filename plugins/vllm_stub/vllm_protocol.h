/* vLLM's OpenAI-compatible completions protocol (vllm_protocol.c). */
#ifndef ILAB_VLLM_PROTOCOL_H
#define ILAB_VLLM_PROTOCOL_H

#include "http_backend.h"

extern const http_protocol vllm_protocol;

/* "token_id:N" (return_tokens_as_token_ids) -> N; 0 when `name` is not one. */
int vllm_token_of_name(const char *name, int32_t *id);

#endif
