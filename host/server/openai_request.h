/* Parsing an OpenAI-style request body (/v1/completions,
 * /v1/chat/completions) into what the engine needs. Fail closed: a field
 * this server does not know, or knows but cannot honour (echo: true, n > 1,
 * a non-zero presence penalty ...), is a 400 naming the field. */
#ifndef ILAB_SERVER_OPENAI_REQUEST_H
#define ILAB_SERVER_OPENAI_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "inferlab/inferlab.h"
#include "api_error.h"

/* Sampling defaults for `serve` with the default model: at temperature 0.8
 * and top-p 0.9 it writes English; greedy decoding loops. A request without
 * a seed gets this one, so the same request gives the same text. */
#define ILAB_SERVE_DEFAULT_TEMPERATURE 0.8f
#define ILAB_SERVE_DEFAULT_TOP_P 0.9f
#define ILAB_SERVE_DEFAULT_SEED 42u /* the same as `inferlab run` */
/* OpenAI's and vLLM's default for the legacy completions endpoint. */
#define ILAB_SERVE_DEFAULT_COMPLETION_TOKENS 16
/* The most stop strings and top logprobs a request may ask for. */
#define ILAB_SERVE_MAX_STOP 8
#define ILAB_SERVE_MAX_TOP_LOGPROBS 20

typedef enum ilab_api_kind {
    ILAB_API_COMPLETION, /* POST /v1/completions */
    ILAB_API_CHAT,       /* POST /v1/chat/completions */
} ilab_api_kind;

typedef struct ilab_api_request {
    ilab_api_kind kind;
    char *model;              /* NULL when the request names none */
    char *prompt;             /* text prompt (chat: the rendered template); NULL with token ids */
    int32_t *prompt_tokens;   /* completions given token ids; owned */
    size_t n_prompt_tokens;
    ilab_sampling_t sampling;
    int32_t max_tokens;       /* 0 = the caller's default (context-limited) */
    char **stop;              /* owned; chat requests include the turn markers */
    size_t n_stop;
    int32_t *stop_token_ids;  /* owned */
    size_t n_stop_token_ids;
    bool ignore_eos;
    bool stream;
    bool include_usage;       /* stream_options.include_usage */
    bool logprobs;            /* report logprobs per token */
    int32_t top_logprobs;     /* alternatives per token (completions: the logprobs count) */
    bool trim_leading_space;  /* chat: drop the space the model writes after "assistant:" */
} ilab_api_request;

/* Parse `len` bytes of `body`. On failure returns false with `err` filled
 * (400 naming the field; malformed JSON names the line and column). On
 * success `out` owns its strings: ilab_api_request_free(). */
bool ilab_api_request_parse(ilab_api_kind kind, const char *body, size_t len,
                            ilab_api_request *out, ilab_api_error *err);
void ilab_api_request_free(ilab_api_request *r);

#endif
