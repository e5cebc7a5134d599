/* llama2.c checkpoint + tokenizer.bin -> GGUF, with the metadata keys and
 * tensor names llama.cpp writes for llama models, so the file also loads
 * there. Matrices (embedding and classifier included) as F32, F16 or Q8_0;
 * norm vectors always F32. llama2.c's Q/K layout is Meta's (rotary pairs
 * adjacent), which is what llama.cpp's llama architecture expects: no
 * permutation. */
#ifndef TORCHLIKE_CONVERT_GGUF_H
#define TORCHLIKE_CONVERT_GGUF_H

#include "checkpoint.h"
#include "tokenizer.h"
#include "weights.h"

/* Write `out_path`; 0, or -1 with a message in err. `name` goes to
 * general.name. */
int tl_convert_to_gguf(const tl_checkpoint *ck, const tl_tokenizer *tok, tl_dtype type,
                       const char *name, const char *out_path, char *err, size_t err_cap);

#endif
