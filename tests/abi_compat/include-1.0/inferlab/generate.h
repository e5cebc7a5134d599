/* inferlab SDK — requests, sampling parameters and stream events.
 *
 * These types are shared by backend-owned generation (ilab_backend_api_t's
 * generate, for engines that sample themselves) and by the host runtime,
 * which emits the same events when it samples on the host. */
#ifndef INFERLAB_GENERATE_H
#define INFERLAB_GENERATE_H

#include <stddef.h>
#include <stdint.h>

#include "inferlab/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ilab_sampling {
    uint32_t struct_size;     /* sizeof(ilab_sampling_t) of the writer */
    float temperature;        /* 0 = greedy (argmax); > 0 scales logits */
    int32_t top_k;            /* 0 = off */
    float top_p;              /* 1 = off; (0, 1] keeps the smallest nucleus */
    float min_p;              /* 0 = off; keeps p >= min_p * p_max */
    float repetition_penalty; /* 1 = off; HF semantics over prompt + output */
    uint64_t seed;            /* per-request RNG seed */
} ilab_sampling_t;

typedef struct ilab_generate_request {
    uint32_t struct_size;       /* sizeof(ilab_generate_request_t) of the writer */
    uint64_t request_id;        /* caller-chosen, unique per instance; cancel() names it */
    const int32_t *prompt_tokens; /* borrowed for the call; already includes BOS if wanted */
    size_t n_prompt_tokens;
    ilab_sampling_t sampling;
    int32_t max_tokens;         /* > 0 */
    const char *const *stop;    /* borrowed; stop strings, trimmed from the output */
    size_t n_stop;
    const int32_t *stop_token_ids; /* borrowed; sampling one ends with stop; it is not emitted (like EOS) */
    size_t n_stop_token_ids;
    int32_t ignore_eos;         /* nonzero: EOS does not end generation */
    int32_t top_logprobs;       /* number of top-k logprobs per TOKEN event; 0 = none */
} ilab_generate_request_t;

typedef enum ilab_event_type {
    ILAB_EVENT_TOKEN = 1,
    ILAB_EVENT_FINISH = 2, /* terminal */
    ILAB_EVENT_ERROR = 3,  /* terminal */
} ilab_event_type;

/* The closed set of finish reasons (STR-3). */
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
                             while bytes of a code point are held back */
    size_t text_len;
    float logprob;        /* of `token` under the sampling distribution's logits */
    const ilab_logprob_t *top_logprobs; /* sorted descending; n_top_logprobs entries */
    uint32_t n_top_logprobs;

    /* FINISH */
    ilab_finish_reason finish_reason;
    uint32_t prompt_tokens;     /* usage */
    uint32_t completion_tokens; /* == number of TOKEN events */

    /* ERROR */
    ilab_status status;
    const char *message; /* non-empty */
} ilab_event_t;

/* Receives events for one request, on the thread that runs generation.
 * Return 0 to continue, nonzero to cancel: the stream then ends with FINISH
 * (cancelled). Must not call back into the same backend instance. */
typedef int (*ilab_event_fn)(void *user_data, const ilab_event_t *event);

#ifdef __cplusplus
}
#endif
#endif
