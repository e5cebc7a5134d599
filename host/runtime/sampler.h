/* The host sampler: turns one row of logits into one token.
 *
 * Processors run in the order Hugging Face transformers applies them:
 * repetition penalty (prompt + output), then the OpenAI presence and
 * frequency penalties (output only; HF has no such processor, so they sit
 * with the other penalty, before any warper, as vLLM applies them), then
 * temperature, top-k, top-p, min-p; then one draw from the request's own
 * seeded RNG. Temperature 0 is greedy (argmax after the penalties) and never
 * touches the RNG. Every temperature > 0 samples from softmax(l / T),
 * computed as softmax((l - max) / T) so that no T overflows it: there is no
 * other threshold. A small T is greedy by arithmetic, not by a rule: once
 * (l_max - l_2nd) / T passes about 104, every other token's exp is 0 in
 * float and only the maximum (ties shared by the draw) can come out.
 *
 * Logprobs (the chosen token's and the top-k list) are log_softmax of the RAW
 * logits the backend returned, before any processor — what vLLM returns by
 * default — so they are finite for every token and comparable across
 * sampling settings (LOG-4: full-vocabulary logsumexp == 0).
 *
 * One sampler per request; not thread-safe (the scheduler thread owns it). */
#ifndef ILAB_HOST_SAMPLER_H
#define ILAB_HOST_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "inferlab/inferlab.h"
#include "rng.h"

typedef struct ilab_sampler ilab_sampler;

/* The sampling defaults of every front end (CLI and HTTP), in one place:
 * temperature 0.8, top-p 0.9, seed 42, every other processor off. */
#define ILAB_SAMPLING_DEFAULT_TEMPERATURE 0.8f
#define ILAB_SAMPLING_DEFAULT_TOP_P 0.9f
#define ILAB_SAMPLING_DEFAULT_SEED 42u
void ilab_sampling_default(ilab_sampling_t *params);

/* Check `params` alone (the same rules as create); for backends that
 * sample themselves, so a bad request is refused the same way. */
ilab_status ilab_sampling_validate(const ilab_sampling_t *params, char *err, size_t err_cap);

/* Validate `params` (temperature >= 0, top_k >= 0, 0 < top_p <= 1,
 * 0 <= min_p <= 1, repetition_penalty > 0, presence and frequency penalties
 * in [-2, 2]; members past params->struct_size are off; unknown members
 * past the host's own struct must be zero) and allocate workspace for
 * `vocab_size` logits. On ILAB_INVALID_ARGUMENT `err` names the parameter. */
ilab_status ilab_sampler_create(const ilab_sampling_t *params, int32_t vocab_size,
                                char *err, size_t err_cap, ilab_sampler **out);
void ilab_sampler_free(ilab_sampler *s);

/* Record a token of the prompt (`is_output` false) or of the output: the
 * repetition penalty sees both, the presence/frequency penalties only the
 * output. */
void ilab_sampler_accept(ilab_sampler *s, int32_t token, bool is_output);

/* Pick the next token from `logits` (vocab_size floats; overwritten as
 * scratch). `*logprob` gets the chosen token's raw logprob; `top` (room for
 * `n_top` entries, may be NULL when n_top == 0) gets the n_top most likely
 * tokens of the raw distribution, sorted descending (ties by lower id).
 * Does not call accept(). Returns the token id. */
int32_t ilab_sampler_sample(ilab_sampler *s, float *logits, float *logprob,
                            ilab_logprob_t *top, int n_top);

/* The processors alone, exposed for tests (SMP-5): apply the penalties,
 * temperature, top-k, top-p and min-p to `logits` in place; removed tokens
 * become -INFINITY; kept ones hold (logit - max) / T, the same
 * distribution as logit / T with the largest at 0. Temperature 0 leaves
 * only the argmax, unscaled. */
void ilab_sampler_process(ilab_sampler *s, float *logits);

#endif
