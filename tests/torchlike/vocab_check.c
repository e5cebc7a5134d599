/* torchlike.vocab_<name>: a GGUF vocabulary against the ids llama.cpp's own
 * tokenizer gives (data/vocab/README.md):
 *
 *   vocab_check VOCAB.gguf PRE|- DATA_DIR NAME [CORPUS...]
 *
 * For each corpus C in llama (llama.cpp's test texts), adversarial and
 * special, DATA_DIR/C.inp holds the texts and DATA_DIR/NAME.C.out the ids,
 * one line per text; C = special is tokenized with parse_special. Where
 * llama.cpp gives the text back from its ids (NAME.C.out.rt), detokenizing
 * must too. PRE, when not "-", overrides tokenizer.ggml.pre. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "tokenizer.h"
#include "vocab_gguf.h"

static char *slurp(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf)
        buf[n] = '\0';
    *size = (size_t)n;
    return buf;
}

static const char SEP[] = "\n__ggml_vocab_test__\n";

/* Next line of `s` (NUL-terminated buffer) as a string; advances *s. */
static char *next_line(char **s)
{
    char *line = *s;
    if (!*line)
        return NULL;
    char *nl = strchr(line, '\n');
    if (nl) {
        *nl = '\0';
        *s = nl + 1;
    } else {
        *s = line + strlen(line);
    }
    return line;
}

static void print_ids(const char *what, const int32_t *ids, size_t n)
{
    fprintf(stderr, "  %s:", what);
    for (size_t i = 0; i < n; i++)
        fprintf(stderr, " %d", (int)ids[i]);
    fprintf(stderr, "\n");
}

static int check_corpus(const tl_tokenizer *t, const char *dir, const char *name,
                        const char *corpus, int *n_texts)
{
    char path[1024];
    size_t in_size, out_size, rt_size;
    snprintf(path, sizeof path, "%s/%s.inp", dir, corpus);
    char *in = slurp(path, &in_size);
    snprintf(path, sizeof path, "%s/%s.%s.out", dir, name, corpus);
    char *out = slurp(path, &out_size);
    snprintf(path, sizeof path, "%s/%s.%s.out.rt", dir, name, corpus);
    char *rt = slurp(path, &rt_size);
    if (!in || !out || !rt) {
        fprintf(stderr, "vocab_check: cannot read the %s corpus of %s in %s\n", corpus, name, dir);
        return 1;
    }
    int parse_special = strcmp(corpus, "special") == 0;
    int failures = 0, index = 0;
    char *o = out, *r = rt;
    size_t at = 0, sep_len = strlen(SEP);
    while (at < in_size) {
        const char *next = NULL;
        for (size_t k = at; k + sep_len <= in_size; k++)
            if (memcmp(in + k, SEP, sep_len) == 0) {
                next = in + k;
                break;
            }
        size_t len = next ? (size_t)(next - (in + at)) : in_size - at;
        const char *text = in + at;
        char *line = next_line(&o), *rline = next_line(&r);
        if (!line || !rline) {
            fprintf(stderr, "%s/%s: text %d has no expected ids\n", name, corpus, index);
            failures++;
            break;
        }
        int32_t want[8192];
        size_t n_want = 0;
        for (char *p = line, *e; n_want < 8192; p = e) {
            long v = strtol(p, &e, 10);
            if (e == p)
                break;
            want[n_want++] = (int32_t)v;
        }
        size_t cap = len * 2 + 8, n = 0;
        int32_t *ids = malloc(cap * sizeof *ids);
        if (!ids || tl_tokenizer_encode_ex(t, text, len, 0, 0, parse_special, ids, cap, &n) != ILAB_OK ||
            n > cap) {
            fprintf(stderr, "%s/%s: text %d: encode failed\n", name, corpus, index);
            failures++;
        } else if (n != n_want || memcmp(ids, want, n * sizeof *ids) != 0) {
            fprintf(stderr, "%s/%s: text %d (%zu bytes, \"%.60s\") differs from llama.cpp\n", name,
                    corpus, index, len, text);
            print_ids("llama.cpp", want, n_want);
            print_ids("torchlike", ids, n);
            failures++;
        } else if (rline[0] == '1' && !parse_special) {
            /* llama.cpp gives the text back: so must the pieces (control tokens
             * are not text: their pieces are empty, as llama.cpp's with
             * special=false). */
            char *back = malloc(len * 4 + 16);
            size_t blen = 0;
            for (size_t i = 0; back && i < n; i++) {
                const char *p;
                size_t pn;
                tl_tokenizer_piece(t, i ? ids[i - 1] : -1, ids[i], &p, &pn);
                memcpy(back + blen, p, pn);
                blen += pn;
            }
            if (!back || blen != len || memcmp(back, text, len) != 0) {
                fprintf(stderr, "%s/%s: text %d: detokenize does not give the text back\n", name,
                        corpus, index);
                failures++;
            }
            free(back);
        }
        free(ids);
        (*n_texts)++;
        index++;
        if (!next)
            break;
        at = (size_t)(next - in) + sep_len;
        if (at == in_size)
            break;
    }
    free(in);
    free(out);
    free(rt);
    return failures;
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: vocab_check VOCAB.gguf PRE|- DATA_DIR NAME [CORPUS...]\n");
        return 2;
    }
    size_t size;
    char *bytes = slurp(argv[1], &size);
    char err[1024];
    tl_gguf *g = NULL;
    if (!bytes) {
        fprintf(stderr, "vocab_check: cannot read %s\n", argv[1]);
        return 1;
    }
    if (tl_gguf_parse((const uint8_t *)bytes, size, argv[1], &g, err, sizeof err) != ILAB_OK) {
        fprintf(stderr, "vocab_check: %s\n", err);
        return 1;
    }
    const tl_gguf_kv *kv = tl_gguf_find(g, "tokenizer.ggml.tokens");
    if (!kv) {
        fprintf(stderr, "vocab_check: %s has no tokenizer.ggml.tokens\n", argv[1]);
        return 1;
    }
    tl_tokenizer t;
    const char *pre = strcmp(argv[2], "-") == 0 ? NULL : argv[2];
    if (tl_vocab_from_gguf(g, argv[1], (int)kv->count, pre, &t, err, sizeof err) != ILAB_OK) {
        fprintf(stderr, "vocab_check: %s\n", err);
        return 1;
    }
    int failures = 0, n_texts = 0;
    static const char *const all[] = {"llama", "adversarial", "special"};
    const char *const *corpora = argc > 5 ? (const char *const *)argv + 5 : all;
    int n_corpora = argc > 5 ? argc - 5 : 3;
    for (int c = 0; c < n_corpora; c++)
        failures += check_corpus(&t, argv[3], argv[4], corpora[c], &n_texts);
    printf("%s: %d texts, %d differ from llama.cpp\n", argv[4], n_texts, failures);
    tl_tokenizer_free(&t);
    tl_gguf_free(g);
    free(bytes);
    return failures ? 1 : 0;
}
