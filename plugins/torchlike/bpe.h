/* torchlike — byte-level BPE (GGUF tokenizer.ggml.model "gpt2"): GPT-2's
 * byte <-> character map, merges applied by rank, as llama.cpp tokenizes. */
#ifndef TORCHLIKE_BPE_H
#define TORCHLIKE_BPE_H

#include <stddef.h>
#include <stdint.h>

#include "inferlab/status.h"
#include "pretok.h"
#include "str_map.h"

typedef struct tl_bpe {
    int n_vocab;
    const char *const *text;  /* borrowed: the tokens as stored (mapped characters) */
    const int *text_len;
    tl_str_map ids;           /* token text -> id (the last id of a duplicate wins) */
    tl_pair_map merges;
    char **extra;             /* merge parts that are not tokens: ids n_vocab + i */
    int n_extra;
    int32_t byte_sym[256];    /* id of the character byte b maps to, or -1 */
    tl_pretok *pre;
    int ignore_merges;
} tl_bpe;

/* The GPT-2 map: the UTF-8 bytes of the character byte `b` stands for. */
int tl_bpe_byte_char(unsigned b, char out[2]);
/* Decode mapped characters back to bytes (characters outside the map are
 * copied as they are). `out` needs `len` bytes; returns the count written. */
size_t tl_bpe_decode(const char *s, size_t len, char *out);

/* `merges` holds n_merges strings "left right" (GGUF tokenizer.ggml.merges,
 * rank = index); `text` stays borrowed. Takes ownership of `pre` (freed on
 * failure too). */
ilab_status tl_bpe_init(tl_bpe *b, int n_vocab, const char *const *text, const int *text_len,
                        const char *const *merges, const int *merge_len, int n_merges,
                        tl_pretok *pre, const char *label, char *err, size_t err_cap);
void tl_bpe_free(tl_bpe *b);

/* Append the ids of raw text (no special tokens) to out (growing it). */
typedef struct tl_ids {
    int32_t *v;
    size_t n, cap;
} tl_ids;
int tl_ids_push(tl_ids *ids, int32_t id);
ilab_status tl_bpe_encode(const tl_bpe *b, const char *text, size_t len, tl_ids *out);

#endif
