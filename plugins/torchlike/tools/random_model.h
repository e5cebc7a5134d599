/* torchlike — writers for deterministic random llama2.c checkpoints and a
 * matching small tokenizer. Used by the build (the embedded default), by the
 * tests (tiny shapes) and by bench/decode (the 15M and 110M shapes). */
#ifndef TORCHLIKE_RANDOM_MODEL_H
#define TORCHLIKE_RANDOM_MODEL_H

#include <stddef.h>
#include <stdint.h>

typedef struct tl_random_shape {
    int dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
    int separate_classifier; /* write a negative vocab_size and a wcls matrix */
} tl_random_shape;

/* Fixed-seed weights: matrices uniform in +-1/sqrt(fan_in), norms near 1.
 * Returns 0, or -1 with a message in err. */
int tl_write_random_model(const char *path, const tl_random_shape *shape, uint64_t seed,
                          char *err, size_t err_cap);

/* A tokenizer of exactly vocab_size entries: <unk>, BOS, EOS, the 256 byte
 * fallbacks, printable ASCII, then common English merges by rank (padded
 * with never-matching pieces). vocab_size must be >= 354. */
int tl_write_small_tokenizer(const char *path, int vocab_size, char *err, size_t err_cap);

#endif
