/* torchlike — the tokenizer of a GGUF file, of either kind: SentencePiece
 * ("llama", tokenizer.c) or byte-level BPE ("gpt2", bpe.c), with token types,
 * special tokens and add_bos/add_eos from the metadata (ADR 0026). */
#ifndef TORCHLIKE_VOCAB_GGUF_H
#define TORCHLIKE_VOCAB_GGUF_H

#include <stddef.h>

#include "inferlab/status.h"
#include "tokenizer.h"

struct tl_gguf;

/* `pre_override` (NULL or "" = none) replaces tokenizer.ggml.pre: a user who
 * knows which rules a vocabulary with an unknown name follows. A missing
 * tokenizer.ggml.pre means "default", as for llama.cpp. */
ilab_status tl_vocab_from_gguf(const struct tl_gguf *g, const char *label, int expected_vocab,
                               const char *pre_override, tl_tokenizer *out, char *err,
                               size_t err_cap);

#endif
