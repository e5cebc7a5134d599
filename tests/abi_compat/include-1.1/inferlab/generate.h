/* inferlab SDK — requests, sampling parameters and stream events.
 *
 * These types are shared by backend-owned generation (ilab_backend_api_t's
 * generate, for engines that sample themselves) and by the host runtime,
 * which emits the same events when it samples on the host. The rules are
 * docs/contract.md (STR-*, SMP-*); clause ids in brackets point there. */
#ifndef INFERLAB_GENERATE_H
#define INFERLAB_GENERATE_H

#include <stddef.h>
#include <stdint.h>

#include "inferlab/status.h"
#include "inferlab/struct_size.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Sampling parameters. Written by the caller of generate() (the host),
 * borrowed by the backend for the call. Append-only (docs/adr/0008): a
 * reader treats every member past the writer's struct_size as "off" — the
 * value given in its comment — so an older host's request still means what
 * it meant (inferlab/struct_size.h); a struct_size smaller than ABI 1.0's, or
 * a non-zero tail the reader does not know, is ILAB_ABI_MISMATCH [ABI-3]. A
 * backend that samples itself refuses every parameter it does not implement
 * unless it is off [SMP-7]. Processor order and ranges: [SMP-5]. */
typedef struct ilab_sampling {
    uint32_t struct_size;     /* sizeof(ilab_sampling_t) of the writer */
    float temperature;        /* 0 = greedy (argmax, lowest id on ties) [SMP-1]; > 0 scales logits */
    int32_t top_k;            /* 0 = off */
    float top_p;              /* 1 = off; (0, 1] keeps the smallest nucleus */
    float min_p;              /* 0 = off; keeps p >= min_p * p_max (1 keeps every tie at the max) [SMP-3] */
    float repetition_penalty; /* 1 = off; HF semantics over prompt + output */
    uint64_t seed;            /* per-request RNG seed [SMP-2] */
    float presence_penalty;   /* 0 = off; [-2, 2]; OpenAI semantics, output tokens only:
                                 logit -= presence_penalty once a token has appeared */
    float frequency_penalty;  /* 0 = off; [-2, 2]; OpenAI semantics, output tokens only:
                                 logit -= frequency_penalty * times the token appeared */
} ilab_sampling_t;

typedef struct ilab_generate_request {
    uint32_t struct_size;       /* sizeof(ilab_generate_request_t) of the writer */
    uint64_t request_id;        /* caller-chosen, unique per instance; cancel() names it */
    const int32_t *prompt_tokens; /* borrowed for the call; already includes BOS if wanted */
    size_t n_prompt_tokens;
    const ilab_sampling_t *sampling; /* borrowed for the call; never NULL; its own struct_size */
    int32_t max_tokens;         /* > 0 */
    const char *const *stop;    /* borrowed; non-empty NUL-free stop strings, trimmed from the output;
                                   any of them ends the stream [STR-6] */
    size_t n_stop;
    const int32_t *stop_token_ids; /* borrowed; sampling one ends with stop; it is not emitted
                                      nor counted (like EOS) [STR-8] */
    size_t n_stop_token_ids;
    int32_t ignore_eos;         /* nonzero: EOS does not end generation */
    int32_t top_logprobs;       /* number of top-k logprobs per TOKEN event; 0 = none;
                                   never above the manifest's topk_max [LOG-4, SMP-7] */
} ilab_generate_request_t;

typedef enum ilab_event_type {
    ILAB_EVENT_TOKEN = 1,
    ILAB_EVENT_FINISH = 2, /* terminal */
    ILAB_EVENT_ERROR = 3,  /* terminal */
} ilab_event_type;

/* The closed set of finish reasons [STR-3]. */
typedef enum ilab_finish_reason {
    ILAB_FINISH_NONE = 0,
    ILAB_FINISH_STOP = 1,      /* EOS, a stop token id, or a stop string */
    ILAB_FINISH_LENGTH = 2,    /* max_tokens or max_context reached */
    ILAB_FINISH_CANCELLED = 3, /* cancel() or the callback asked to stop */
    ILAB_FINISH_ERROR = 4,
} ilab_finish_reason;

static inline const char *ilab_finish_reason_name(int reason)
{
    switch (reason) {
    case ILAB_FINISH_STOP: return "stop";
    case ILAB_FINISH_LENGTH: return "length";
    case ILAB_FINISH_CANCELLED: return "cancelled";
    case ILAB_FINISH_ERROR: return "error";
    default: return "none";
    }
}

typedef struct ilab_logprob {
    int32_t token;
    float logprob; /* natural log, <= 0 */
} ilab_logprob_t;

/* One stream event. Every pointer in it is borrowed: valid only during the
 * callback, owned by whoever emits the event. */
typedef struct ilab_event {
    uint32_t struct_size; /* sizeof(ilab_event_t) of the emitter */
    ilab_event_type type;
    uint64_t request_id;

    /* TOKEN */
    int32_t token;
    const char *text;     /* UTF-8 delta, never splits a code point; may be empty
                             while bytes of a code point are held back [STR-7].
                             FINISH: the held-back rest, usually empty [STR-2] */
    size_t text_len;
    float logprob;        /* of `token`: log_softmax of the RAW logits, before any
                             penalty, temperature or filter [SMP-6] */
    const ilab_logprob_t *top_logprobs; /* sorted descending; n_top_logprobs entries; raw
                                           logits like `logprob`; need not hold `token` [LOG-4] */
    uint32_t n_top_logprobs;

    /* FINISH */
    ilab_finish_reason finish_reason;
    uint32_t prompt_tokens;     /* usage */
    uint32_t completion_tokens; /* == number of TOKEN events [STR-5] */

    /* ERROR */
    ilab_status status;
    const char *message; /* non-empty [STR-9, ERR-1] */
} ilab_event_t;

/* Receives events for one request, on the thread that runs generation.
 * Return 0 to continue, nonzero to cancel: no further TOKEN, the stream then
 * ends with FINISH (cancelled) [STR-10]. Must not call back into the same
 * backend instance. */
typedef int (*ilab_event_fn)(void *user_data, const ilab_event_t *event);

#ifdef __cplusplus
}
#endif
#endif
