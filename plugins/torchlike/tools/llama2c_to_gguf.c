/* llama2c_to_gguf MODEL.bin TOKENIZER.bin OUT.gguf [f32|f16|q8_0]
 *
 * Converts a llama2.c checkpoint and its tokenizer.bin to a GGUF v3 file of
 * the llama architecture (convert_gguf.h). Default type: f32. */
#include <stdio.h>
#include <string.h>

#include "checkpoint.h"
#include "convert_gguf.h"
#include "tokenizer.h"

int main(int argc, char **argv)
{
    if (argc < 4 || argc > 5) {
        fprintf(stderr, "usage: %s MODEL.bin TOKENIZER.bin OUT.gguf [f32|f16|q8_0]\n", argv[0]);
        return 2;
    }
    tl_dtype type = TL_DTYPE_F32;
    if (argc == 5) {
        if (strcmp(argv[4], "f16") == 0)
            type = TL_DTYPE_F16;
        else if (strcmp(argv[4], "q8_0") == 0)
            type = TL_DTYPE_Q8_0;
        else if (strcmp(argv[4], "f32") != 0) {
            fprintf(stderr, "%s: type must be f32, f16 or q8_0, not %s\n", argv[0], argv[4]);
            return 2;
        }
    }
    char err[1024];
    tl_checkpoint ck;
    tl_tokenizer tok;
    if (tl_checkpoint_open(argv[1], &ck, err, sizeof err) != ILAB_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    if (ck.gguf) {
        fprintf(stderr, "%s is already a GGUF file\n", argv[1]);
        tl_checkpoint_close(&ck);
        return 1;
    }
    if (tl_tokenizer_load_file(argv[2], ck.cfg.vocab_size, argv[1], &tok, err, sizeof err) != ILAB_OK) {
        fprintf(stderr, "%s\n", err);
        tl_checkpoint_close(&ck);
        return 1;
    }
    const char *base = strrchr(argv[1], '/');
    int rc = tl_convert_to_gguf(&ck, &tok, type, base ? base + 1 : argv[1], argv[3], err, sizeof err);
    if (rc != 0)
        fprintf(stderr, "%s\n", err);
    tl_tokenizer_free(&tok);
    tl_checkpoint_close(&ck);
    return rc ? 1 : 0;
}
