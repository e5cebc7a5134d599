/* make_random_model: write a deterministic random llama2.c checkpoint and a
 * matching tokenizer. Run by the build for the embedded default model and
 * for test fixtures:
 *
 *   make_random_model MODEL.bin TOKENIZER.bin DIM HIDDEN LAYERS HEADS KV_HEADS
 *                     VOCAB SEQ_LEN SEED [separate]
 *
 * TOKENIZER.bin may be "-" to skip it (vocabularies below 354 have none). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "random_model.h"

int main(int argc, char **argv)
{
    if (argc != 11 && argc != 12) {
        fprintf(stderr, "usage: %s MODEL TOKENIZER DIM HIDDEN LAYERS HEADS KV_HEADS VOCAB "
                        "SEQ_LEN SEED [separate]\n", argv[0]);
        return 2;
    }
    tl_random_shape s = {
        atoi(argv[3]), atoi(argv[4]), atoi(argv[5]), atoi(argv[6]), atoi(argv[7]),
        atoi(argv[8]), atoi(argv[9]), argc == 12 && strcmp(argv[11], "separate") == 0,
    };
    char err[256];
    if (tl_write_random_model(argv[1], &s, strtoull(argv[10], NULL, 0), err, sizeof err) != 0) {
        fprintf(stderr, "make_random_model: %s\n", err);
        return 1;
    }
    if (strcmp(argv[2], "-") != 0 &&
        tl_write_small_tokenizer(argv[2], s.vocab_size, err, sizeof err) != 0) {
        fprintf(stderr, "make_random_model: %s\n", err);
        return 1;
    }
    return 0;
}
