/* torchlike — the pre-tokenizers of byte-level BPE vocabularies: how text is
 * split into words before merges, one set of rules per GGUF
 * `tokenizer.ggml.pre` name, as llama.cpp defines them (ADR 0026).
 *
 * A pre-tokenizer is a list of regular expressions (PCRE2, UTF + UCP). The
 * text starts as one fragment; each expression in turn splits every fragment
 * into its matches and the runs between them (both kept), never looking past
 * a fragment's ends. */
#ifndef TORCHLIKE_PRETOK_H
#define TORCHLIKE_PRETOK_H

#include <stddef.h>

#include "inferlab/status.h"

typedef struct tl_pretok tl_pretok;

/* The pre-tokenizer named `name` (a tokenizer.ggml.pre value). Unknown names
 * are an error that lists the known ones. */
ilab_status tl_pretok_create(const char *name, tl_pretok **out, char *err, size_t err_cap);
void tl_pretok_free(tl_pretok *p);
/* Whether `name` selects Llama 3's rules: a word that is a whole token is
 * not merged (llama.cpp's ignore_merges). */
int tl_pretok_ignore_merges(const tl_pretok *p);
/* The canonical name of the rules (e.g. "llama-bpe" for "llama3"). */
const char *tl_pretok_rules(const tl_pretok *p);
/* The known names, comma-separated, for messages. */
const char *tl_pretok_known(void);

/* Split `len` bytes of valid UTF-8 into words: on success *ends holds the
 * end offset of each word (malloc'd, *n_words entries; the caller frees).
 * Returns ILAB_OUT_OF_MEMORY, or ILAB_INTERNAL when the regex engine fails
 * (its message in err). */
ilab_status tl_pretok_split(const tl_pretok *p, const char *text, size_t len, size_t **ends,
                            size_t *n_words, char *err, size_t err_cap);

#endif
