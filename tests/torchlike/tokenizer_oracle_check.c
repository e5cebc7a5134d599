/* tokenizer_oracle_check TOKENIZER_BIN VOCAB TSV: encode each line's text
 * (hex) with torchlike's tokenizer and compare with the line's ids, written
 * by SentencePiece (tokenizer_oracle.py). Prints every mismatch; exits 1 on
 * any, or when the file holds no line. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: tokenizer_oracle_check TOKENIZER_BIN VOCAB TSV\n");
        return 2;
    }
    tl_tokenizer t;
    char err[512];
    if (tl_tokenizer_load_file(argv[1], atoi(argv[2]), argv[1], &t, err, sizeof err) != ILAB_OK) {
        fprintf(stderr, "tokenizer_oracle_check: %s\n", err);
        return 1;
    }
    FILE *f = fopen(argv[3], "r");
    if (!f) {
        perror(argv[3]);
        return 1;
    }
    static char line[1 << 16], text[1 << 15];
    static int32_t want[1 << 14], got[1 << 14];
    long lines = 0, mismatches = 0;
    while (fgets(line, sizeof line, f)) {
        char *tab = strchr(line, '\t');
        if (!tab || (tab - line) % 2 || (size_t)(tab - line) / 2 > sizeof text) {
            fprintf(stderr, "%s:%ld: not 'hex<TAB>ids'\n", argv[3], lines + 1);
            return 1;
        }
        size_t len = (size_t)(tab - line) / 2;
        for (size_t i = 0; i < len; i++) {
            int hi = hexval(line[2 * i]), lo = hexval(line[2 * i + 1]);
            if (hi < 0 || lo < 0) {
                fprintf(stderr, "%s:%ld: bad hex\n", argv[3], lines + 1);
                return 1;
            }
            text[i] = (char)(hi * 16 + lo);
        }
        size_t n_want = 0;
        for (char *p = tab + 1; *p && *p != '\n' && n_want < sizeof want / sizeof want[0];) {
            char *end;
            want[n_want++] = (int32_t)strtol(p, &end, 10);
            if (end == p) {
                fprintf(stderr, "%s:%ld: bad id list\n", argv[3], lines + 1);
                return 1;
            }
            p = end;
            while (*p == ' ')
                p++;
        }
        size_t n_got = 0;
        if (tl_tokenizer_encode(&t, text, len, 0, 0, got, sizeof got / sizeof got[0], &n_got) !=
                ILAB_OK || n_got > sizeof got / sizeof got[0]) {
            fprintf(stderr, "%s:%ld: encode failed\n", argv[3], lines + 1);
            return 1;
        }
        lines++;
        if (n_got == n_want && !memcmp(got, want, n_got * sizeof got[0]))
            continue;
        if (++mismatches <= 40) {
            fprintf(stderr, "mismatch on \"%.*s\":\n  sentencepiece:", (int)len, text);
            for (size_t i = 0; i < n_want; i++)
                fprintf(stderr, " %d", want[i]);
            fprintf(stderr, "\n  torchlike:    ");
            for (size_t i = 0; i < n_got; i++)
                fprintf(stderr, " %d", got[i]);
            fprintf(stderr, "\n");
        }
    }
    fclose(f);
    tl_tokenizer_free(&t);
    printf("tokenizer_oracle_check: %ld texts, %ld differ from SentencePiece\n", lines, mismatches);
    return lines > 0 && mismatches == 0 ? 0 : 1;
}
