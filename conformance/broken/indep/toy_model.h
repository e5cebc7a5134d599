/* toy_model — the model, tokenizer and paged KV cache behind the
 * independently written broken plugins (README.md in this folder).
 *
 * The model is a one-layer toy "transformer": every position stores a
 * rotated key, a value and a decaying recurrent state in a paged cache
 * (blocks of TOY_BLOCK positions, reference-counted so forks share them,
 * copied on write). The logits after a position depend on every earlier
 * token through attention over the cache and through the state, so a
 * cache bug changes them. A BREAK_<NAME> define compiled into this file
 * breaks one rule of docs/contract.md (cases.txt); without one it is
 * correct. */
#ifndef INDEP_TOY_MODEL_H
#define INDEP_TOY_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include <inferlab/inferlab.h>

#define TOY_DIM 16
#define TOY_BLOCK 16
#define TOY_N_MERGES 14
#define TOY_BOS 256
#define TOY_EOS 257
#define TOY_VOCAB (258 + TOY_N_MERGES)
#ifdef BREAK_MAX_CONTEXT_MISMATCH
#define TOY_MAX_CONTEXT 320
#else
#define TOY_MAX_CONTEXT 384
#endif
#define TOY_MAX_SEQS 64

/* One cache block: TOY_BLOCK positions, shared by forks (refs > 1). */
typedef struct toy_block {
    int refs;
    int32_t token[TOY_BLOCK];
    float k[TOY_BLOCK][TOY_DIM];
    float v[TOY_BLOCK][TOY_DIM];
    float s[TOY_BLOCK][TOY_DIM];
} toy_block;

typedef struct toy_seq {
    uint32_t generation; /* the handle's upper half; changes on every reuse */
    int in_use;
    int32_t len;
    int n_blocks, cap_blocks;
    toy_block **blocks;
    float state[TOY_DIM]; /* the recurrent state after the last position */
} toy_seq;

typedef struct toy_cache {
    toy_seq seqs[TOY_MAX_SEQS];
    long evals; /* eval calls so far (instance lifetime) */
} toy_cache;

/* --- tokenizer: bytes, BOS, EOS and TOY_N_MERGES two-byte merges ------------ */

/* Greedy left-to-right encoding; never fails. `out` has room for len + 2. */
size_t toy_encode(const char *text, size_t len, int32_t *out);
/* The bytes of `token`: 0..2 of them, into `buf` (room for 2). */
size_t toy_piece(int32_t token, char *buf);

/* --- cache ----------------------------------------------------------------- */

void toy_cache_init(toy_cache *c);
void toy_cache_destroy(toy_cache *c);
/* NULL for a stale, freed or never-issued handle. */
toy_seq *toy_seq_get(toy_cache *c, ilab_seq_t handle);
ilab_seq_t toy_seq_handle(const toy_cache *c, const toy_seq *s);
/* A fresh slot, or NULL when every slot is in use. */
toy_seq *toy_seq_new(toy_cache *c);
/* A fresh slot for a fork (a second allocation path, as forks need). */
toy_seq *toy_seq_new_for_fork(toy_cache *c);
void toy_seq_release(toy_seq *s);
int toy_seq_fork(toy_seq *parent, toy_seq *child); /* 0, or -1 out of memory */
void toy_seq_truncate(toy_seq *s, int32_t n_keep);
/* The token at position `pos` (< len). */
int32_t toy_seq_token(const toy_seq *s, int32_t pos);

/* --- evaluation ----------------------------------------------------------- */

/* Append `n` tokens; write one row (after the last token) or, with
 * `all_rows`, n rows into `logits` (NULL: none). Returns 0, or -1 when out
 * of memory (the sequence is then unchanged). `scratch` holds
 * TOY_MAX_CONTEXT floats. */
int toy_append(toy_cache *c, toy_seq *s, const int32_t *tokens, int32_t n, int all_rows,
               float *logits, float *scratch, int batch_size);

#endif
