/* torchlike — the llama2.c tokenizer.bin format and SentencePiece-style BPE.
 *
 * File: int32 max_token_length, then per token: float32 score, int32 length,
 * `length` bytes (no NUL). SentencePiece's "▁" is stored as a plain space.
 * Conventions: 0 <unk>, 1 BOS, 2 EOS, byte fallback pieces "<0xHH>". */
#ifndef TORCHLIKE_TOKENIZER_H
#define TORCHLIKE_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "inferlab/status.h"

typedef struct tl_piece_index {
    const char *str; /* borrowed from the tokenizer's piece storage */
    int len;
    int id;
} tl_piece_index;

/* GGUF tokenizer.ggml.token_type values. */
enum {
    TL_TOKEN_NORMAL = 1,
    TL_TOKEN_UNKNOWN = 2,
    TL_TOKEN_CONTROL = 3,
    TL_TOKEN_USER_DEFINED = 4,
    TL_TOKEN_UNUSED = 5,
    TL_TOKEN_BYTE = 6,
};

typedef enum tl_tokenizer_kind {
    TL_TOKENIZER_SPM, /* SentencePiece BPE: tokenizer.bin, GGUF "llama" */
    TL_TOKENIZER_BPE, /* byte-level BPE: GGUF "gpt2" (bpe.h) */
} tl_tokenizer_kind;

struct tl_bpe;

typedef struct tl_tokenizer {
    tl_tokenizer_kind kind;
    unsigned char *types;   /* owned: a TL_TOKEN_* per id; NULL = all normal */
    int add_bos, add_eos;   /* what the model's metadata asks for */
    int add_space_prefix;   /* SentencePiece: the dummy "▁" before a text (and
                             * dropped again when decoding); default 1 */
    int32_t *special;       /* owned: control, user-defined and unknown ids, longest first */
    int n_special;
    struct tl_bpe *bpe;     /* owned; byte-level BPE only */
    char **raw;             /* owned: tokens as the file spells them (BPE: mapped
                             * characters; SentencePiece: "▁" for a space) */
    int *raw_len;
    int max_raw_len;        /* SentencePiece: the longest raw token */
    unsigned char *rstrip;  /* owned, NULL = none: 1 where white space after this
                             * special token is dropped (llama.cpp's RSTRIP) */
    char pre[48];           /* BPE: the pre-tokenizer rules in use */
    int vocab_size;
    int max_token_length;
    char **pieces;          /* owned; pieces[i] has piece_len[i] bytes (+ NUL) */
    int *piece_len;
    float *scores;
    tl_piece_index *sorted; /* pieces sorted by bytes, for lookup */
    int byte_id[256];       /* id of "<0xHH>", or -1 when the vocabulary has none */
    int bos_id, eos_id, unk_id;
} tl_tokenizer;

/* Parse tokenizer.bin bytes. `expected_vocab` is the model's vocab_size; a
 * different entry count is an error naming both files (`model_label`). */
ilab_status tl_tokenizer_load(const void *bytes, size_t size, const char *label,
                              int expected_vocab, const char *model_label,
                              tl_tokenizer *out, char *err, size_t err_cap);
ilab_status tl_tokenizer_load_file(const char *path, int expected_vocab,
                                   const char *model_label, tl_tokenizer *out,
                                   char *err, size_t err_cap);
/* A tokenizer from pieces already in memory (a GGUF file's vocabulary):
 * pieces[i] has lens[i] bytes with "▁" already turned into a space; all are
 * copied. The three ids must be in range. */
ilab_status tl_tokenizer_from_vocab(int n, const char *const *pieces, const int *lens,
                                    const float *scores, int bos_id, int eos_id, int unk_id,
                                    const char *label, tl_tokenizer *out, char *err,
                                    size_t err_cap);
/* SentencePiece: the tokens as the file spells them, which the encoder
 * looks text up in (spaces become "▁" first, as llama.cpp does) and special
 * tokens are matched by. Takes ownership of `raw` and `raw_len` (n entries,
 * each NUL-terminated too); NULL: the pieces with each space spelled "▁"
 * (a tokenizer.bin). Returns ILAB_OUT_OF_MEMORY or ILAB_OK. */
ilab_status tl_tokenizer_spm_spelling(tl_tokenizer *t, char **raw, int *raw_len);
/* The vocabulary of a GGUF file (checkpoint_gguf.c): tokenizer.ggml.model
 * "llama", .tokens, .scores and the BOS/EOS/unknown ids; the token count
 * must be `expected_vocab`. Errors name `label` and the key. */
struct tl_gguf;
ilab_status tl_tokenizer_from_gguf(const struct tl_gguf *g, const char *label, int expected_vocab,
                                   tl_tokenizer *out, char *err, size_t err_cap);
void tl_tokenizer_free(tl_tokenizer *t);

/* Encode: dummy-prefix space (when text is non-empty), code points looked up
 * whole, unknown ones by byte fallback, then BPE merges by highest score
 * (leftmost on ties). Writes at most `cap` ids; `*n` = ids needed. Returns
 * ILAB_OUT_OF_MEMORY on allocation failure, else ILAB_OK (even when cap is
 * short: the caller compares *n with cap). */
ilab_status tl_tokenizer_encode(const tl_tokenizer *t, const char *text, size_t len,
                                int add_bos, int add_eos, int32_t *ids, size_t cap,
                                size_t *n);

/* As tl_tokenizer_encode; with parse_special, control (and unknown-type)
 * tokens written in the text are matched as single tokens. User-defined
 * tokens always are (as llama.cpp's tokenizer does). add_bos and add_eos are
 * obeyed as given; t->add_bos and t->add_eos say what the model's metadata
 * asks for, for the caller to choose them. */
ilab_status tl_tokenizer_encode_ex(const tl_tokenizer *t, const char *text, size_t len,
                                   int add_bos, int add_eos, int parse_special, int32_t *ids,
                                   size_t cap, size_t *n);

/* After the pieces are set: the special-token list from t->types (which may
 * stay NULL). Returns ILAB_OUT_OF_MEMORY or ILAB_OK. */
ilab_status tl_tokenizer_index_special(tl_tokenizer *t);

/* "sentencepiece" or "byte-level BPE". */
const char *tl_tokenizer_kind_name(const tl_tokenizer *t);

/* The bytes `token` contributes after `prev` (-1 at the start of text):
 * control tokens give "" (BOS/EOS too where the pieces have no types),
 * byte-fallback tokens their byte, and the leading space of the first piece
 * of a text is dropped. `token` must be in range. */
void tl_tokenizer_piece(const tl_tokenizer *t, int32_t prev, int32_t token,
                        const char **bytes, size_t *len);

#endif
