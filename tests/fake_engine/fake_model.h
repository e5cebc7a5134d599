/* The fake engine's model: a tiny deterministic "language model" over a
 * byte vocabulary with a few word tokens, and its sampler. A test fixture
 * for the HTTP adapters, not product: it gives the same tokens for the same
 * request so the conformance harness can compare runs. */
#ifndef FAKE_MODEL_H
#define FAKE_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FM_BOS 256
#define FM_EOS 257
#define FM_TOPK_MAX 20

int32_t fm_vocab_size(void);

/* Text -> ids (longest word match, else one byte). Returns the count;
 * `out` must have room for len + 1 ids. */
size_t fm_tokenize(const char *text, size_t len, bool add_bos, int32_t *out);
/* The bytes of one token ("" for BOS/EOS). */
const char *fm_piece(int32_t id, size_t *len);
/* Concatenated bytes of `ids`, malloc'd and NUL-terminated; invalid UTF-8
 * replaced by U+FFFD as Hugging Face tokenizers decode. */
char *fm_decode(const int32_t *ids, size_t n, size_t *len);
/* Length of the longest prefix of `s` that does not end inside a code point. */
size_t fm_complete_utf8(const char *s, size_t len);

typedef struct fm_params {
    float temperature, top_p, min_p, repetition_penalty, presence_penalty, frequency_penalty;
    int32_t top_k;      /* <= 0 off */
    uint64_t seed;
} fm_params;

typedef struct fm_step {
    int32_t token;
    float logprob;                 /* raw log-softmax of the sampled token */
    int32_t top_id[FM_TOPK_MAX];   /* raw top logprobs, descending */
    float top_lp[FM_TOPK_MAX];
} fm_step;

/* One sampling state per request: context = prompt + output so far. */
typedef struct fm_sampler fm_sampler;
fm_sampler *fm_sampler_create(const fm_params *p, const int32_t *prompt, size_t n);
void fm_sampler_destroy(fm_sampler *s);
/* Sample the next token (appended to the context); `k` top logprobs. */
void fm_sample(fm_sampler *s, int k, fm_step *out);

#endif
