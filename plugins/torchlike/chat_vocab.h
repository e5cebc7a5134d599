/* torchlike — what a chat needs from the vocabulary (ABI 1.2, capability
 * chat): the end-of-generation ids, the model's chat template text, and the
 * special tokens that ILAB_TOKENIZE_PARSE_SPECIAL turns text into.
 *
 * From a GGUF file: `tokenizer.ggml.eos_token_id`, `eot_token_id`,
 * `eom_token_id` and the FIM pad/repeat/separator ids, plus every token
 * whose text is a known end-of-turn marker ("<|eot_id|>", "<|im_end|>",
 * "<|end|>", "<end_of_turn>", "<|endoftext|>", …), as llama.cpp decides
 * them; `tokenizer.chat_template`; the tokens of type control (3) and
 * user-defined (4) of `tokenizer.ggml.token_type`. A llama2.c checkpoint has
 * none of these: EOS alone, no template, no special text. */
#ifndef TORCHLIKE_CHAT_VOCAB_H
#define TORCHLIKE_CHAT_VOCAB_H

#include <stddef.h>
#include <stdint.h>

#include "gguf.h"
#include "inferlab/status.h"
#include "tokenizer.h"

typedef struct tl_chat_vocab {
    int32_t *eog; /* EOS first (when present), then ascending; owned */
    size_t n_eog;
    char *chat_template; /* NUL-terminated, "" when the file has none; owned */
    size_t template_len;
} tl_chat_vocab;

/* The token texts that end a generation whatever their type (llama.cpp's
 * list; NULL-terminated). llama.cpp also gives them the control attribute,
 * which tl_vocab_from_gguf() follows. */
extern const char *const tl_eog_texts[];

/* `g` NULL: a llama2.c checkpoint. Errors name `label` and the key. */
ilab_status tl_chat_vocab_init(tl_chat_vocab *cv, const tl_gguf *g, const tl_tokenizer *tok,
                               const char *label, char *err, size_t err_cap);
void tl_chat_vocab_free(tl_chat_vocab *cv);

/* Encode with special tokens parsed: each occurrence of a special token's
 * text (leftmost, longest first) is that one id; the text between is
 * encoded as tl_tokenizer_encode() does (each piece with its dummy-prefix
 * space, as llama.cpp does after a special token). Same contract as
 * tl_tokenizer_encode(). */
ilab_status tl_chat_encode(const tl_chat_vocab *cv, const tl_tokenizer *tok, const char *text,
                           size_t len, int add_bos, int add_eos, int32_t *ids, size_t cap,
                           size_t *n);

#endif
