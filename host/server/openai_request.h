/* Parsing an OpenAI-style request body (/v1/completions,
 * /v1/chat/completions) into what the engine needs. Fail closed: a field
 * this server does not know, or knows but cannot honour (echo: true ...),
 * is a 400 naming the field. */
#ifndef ILAB_SERVER_OPENAI_REQUEST_H
#define ILAB_SERVER_OPENAI_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "inferlab/inferlab.h"
#include "api_error.h"
#include "chat_template.h"
#include "runtime/sampler.h"

/* Sampling defaults are the runtime's (ilab_sampling_default(), shared
 * with `inferlab run`): a request without a seed gets the same one, so the
 * same request gives the same text. */
/* OpenAI's and vLLM's default for the legacy completions endpoint. */
#define ILAB_SERVE_DEFAULT_COMPLETION_TOKENS 16
/* The most stop strings and top logprobs a request may ask for. */
#define ILAB_SERVE_MAX_STOP 8
#define ILAB_SERVE_MAX_TOP_LOGPROBS 20
/* The most choices (`n`) a request may ask for. */
#define ILAB_SERVE_MAX_N 8

typedef enum ilab_api_kind {
    ILAB_API_COMPLETION, /* POST /v1/completions */
    ILAB_API_CHAT,       /* POST /v1/chat/completions */
    ILAB_API_SGLANG,     /* POST /generate, SGLang's native shape (sglang_request.h) */
} ilab_api_kind;

typedef struct ilab_api_request {
    ilab_api_kind kind;
    char *model;              /* NULL when the request names none */
    char *prompt;             /* text prompt (chat: the rendered template); NULL with token ids */
    int32_t *prompt_tokens;   /* completions given token ids; owned */
    size_t n_prompt_tokens;
    ilab_sampling_t sampling;
    int32_t n;                /* choices, 1..ILAB_SERVE_MAX_N; choice i samples with seed + i */
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
    bool return_token_ids;    /* vLLM's: each choice also carries its tokens' ids */
    bool tokens_as_ids;       /* vLLM's return_tokens_as_token_ids: logprob names "token_id:N" */
    ilab_chat_message *messages; /* chat: the messages (roles checked; "developer" is
                                    "system"), rendered once the backend is known; owned */
    char **message_texts;     /* owned: each message's content */
    size_t n_messages;
    bool add_generation_prompt; /* chat: end with the opening of the assistant's turn
                                   (default true) */
} ilab_api_request;

/* Parse `len` bytes of `body`. On failure returns false with `err` filled
 * (400 naming the field; malformed JSON names the line and column). On
 * success `out` owns its strings: ilab_api_request_free(). */
bool ilab_api_request_parse(ilab_api_kind kind, const char *body, size_t len,
                            ilab_api_request *out, ilab_api_error *err);
void ilab_api_request_free(ilab_api_request *r);

/* Chat with the plain template (docs/chat-template.md): renders the messages
 * into `prompt`, adds the turn markers as stop strings and drops the reply's
 * leading space. */
bool ilab_api_chat_plain_setup(ilab_api_request *r, ilab_api_error *err);

#endif
