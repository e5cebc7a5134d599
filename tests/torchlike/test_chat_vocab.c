/* torchlike's chat vocabulary (chat_vocab.c, ABI 1.2): the end-of-generation
 * ids, the template text and parse-special tokenizing, on small GGUF
 * vocabularies written in memory. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "chat_vocab.h"
#include "gguf.h"
#include "gguf_writer.h"
#include "vocab_gguf.h"
#include "tokenizer.h"

typedef struct vocab_file {
    const char *const *tokens;
    const int32_t *types;
    int n;
    int eos, eot; /* eot -1: no eot_token_id key */
    const char *template_text;
    int no_space_prefix; /* 1: tokenizer.ggml.add_space_prefix false */
} vocab_file;

typedef struct loaded {
    unsigned char *bytes;
    tl_gguf *g;
    tl_tokenizer tok;
    tl_chat_vocab cv;
} loaded;

static void load(const vocab_file *v, loaded *l)
{
    tl_gguf_writer w;
    tl_gw_init(&w);
    int lens[64];
    float scores[64];
    for (int i = 0; i < v->n; i++) {
        lens[i] = (int)strlen(v->tokens[i]);
        scores[i] = -(float)i;
    }
    tl_gw_string(&w, "tokenizer.ggml.model", "llama");
    tl_gw_strings(&w, "tokenizer.ggml.tokens", (uint64_t)v->n, v->tokens, lens);
    tl_gw_f32s(&w, "tokenizer.ggml.scores", (uint64_t)v->n, scores);
    tl_gw_i32s(&w, "tokenizer.ggml.token_type", (uint64_t)v->n, v->types);
    tl_gw_u32(&w, "tokenizer.ggml.bos_token_id", 1);
    tl_gw_u32(&w, "tokenizer.ggml.eos_token_id", (uint32_t)v->eos);
    tl_gw_u32(&w, "tokenizer.ggml.unknown_token_id", 0);
    if (v->eot >= 0)
        tl_gw_u32(&w, "tokenizer.ggml.eot_token_id", (uint32_t)v->eot);
    if (v->template_text)
        tl_gw_string(&w, "tokenizer.chat_template", v->template_text);
    if (v->no_space_prefix)
        tl_gw_bool(&w, "tokenizer.ggml.add_space_prefix", 0);
    size_t size;
    assert_int_equal(tl_gw_finish(&w, &l->bytes, &size), 0);
    tl_gw_free(&w);
    char err[512] = "";
    if (tl_gguf_parse(l->bytes, size, "chat.gguf", &l->g, err, sizeof err) != ILAB_OK ||
        tl_vocab_from_gguf(l->g, "chat.gguf", v->n, NULL, &l->tok, err, sizeof err) != ILAB_OK ||
        tl_chat_vocab_init(&l->cv, l->g, &l->tok, "chat.gguf", err, sizeof err) != ILAB_OK)
        fail_msg("%s", err);
}

static void unload(loaded *l)
{
    tl_chat_vocab_free(&l->cv);
    tl_tokenizer_free(&l->tok);
    tl_gguf_free(l->g);
    free(l->bytes);
}

/* Types: 1 normal, 2 unknown, 3 control, 4 user-defined, 6 byte. */
static const char *const chatml_tokens[] = {
    "<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>", "<|eot_id|>", "\xe2\x96\x81Hi",
    "H", "i", "\xe2\x96\x81", "<", "|", ">", "e", "n", "d", "_", "m", "<tool>"};
static const int32_t chatml_types[] = {2, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 4};
#define CHATML_N ((int)(sizeof chatml_tokens / sizeof chatml_tokens[0]))

static void test_eog_ids(void **state)
{
    (void)state;
    /* EOS first; <|im_end|> and <|eot_id|> by their text (the latter of
     * normal type, as llama.cpp takes it too); no eot key. */
    vocab_file v = {chatml_tokens, chatml_types, CHATML_N, 2, -1, "{{ '<|im_start|>' }}", 0};
    loaded l;
    load(&v, &l);
    assert_int_equal(l.cv.n_eog, 3);
    assert_int_equal(l.cv.eog[0], 2);
    assert_int_equal(l.cv.eog[1], 4);
    assert_int_equal(l.cv.eog[2], 5);
    assert_string_equal(l.cv.chat_template, "{{ '<|im_start|>' }}");
    assert_int_equal(l.cv.template_len, strlen("{{ '<|im_start|>' }}"));
    unload(&l);
}

static void test_eot_key_and_no_template(void **state)
{
    (void)state;
    /* eot_token_id names a token whose text is no known marker ("Hi"). */
    vocab_file v = {chatml_tokens, chatml_types, CHATML_N, 2, 6, NULL, 0};
    loaded l;
    load(&v, &l);
    assert_int_equal(l.cv.n_eog, 4);
    assert_int_equal(l.cv.eog[0], 2);
    assert_int_equal(l.cv.eog[1], 4);
    assert_int_equal(l.cv.eog[2], 5);
    assert_int_equal(l.cv.eog[3], 6);
    assert_string_equal(l.cv.chat_template, "");
    unload(&l);
}

/* eot_token_id at and past the end of the vocabulary: the last id joins
 * the end-of-generation set, an id past it never does (the host refuses a
 * backend whose eog_ids() answers one, TOK-12). */
static void test_eot_key_at_its_bounds(void **state)
{
    (void)state;
    static const int eots[] = {CHATML_N - 1, CHATML_N, CHATML_N + 1, CHATML_N + 1000};
    for (size_t i = 0; i < sizeof eots / sizeof eots[0]; i++) {
        vocab_file v = {chatml_tokens, chatml_types, CHATML_N, 2, eots[i], NULL, 0};
        loaded l;
        load(&v, &l);
        bool has_last = false;
        for (size_t k = 0; k < l.cv.n_eog; k++) {
            if (l.cv.eog[k] < 0 || l.cv.eog[k] >= CHATML_N)
                fail_msg("eot_token_id %d: end-of-generation id %d is outside the vocabulary of %d",
                         eots[i], (int)l.cv.eog[k], CHATML_N);
            has_last |= l.cv.eog[k] == CHATML_N - 1;
        }
        assert_int_equal(has_last, eots[i] == CHATML_N - 1);
        unload(&l);
    }
}

static void test_harmony_end_is_not_eog(void **state)
{
    (void)state;
    static const char *const toks[] = {"<unk>", "<s>", "<|endoftext|>", "<|end|>", "<|return|>",
                                       "<|call|>", "a"};
    static const int32_t types[] = {2, 3, 3, 3, 3, 3, 1};
    vocab_file v = {toks, types, 7, 2, -1, NULL, 0};
    loaded l;
    load(&v, &l);
    assert_int_equal(l.cv.n_eog, 3); /* <|endoftext|>, <|return|>, <|call|>: not <|end|> */
    assert_int_equal(l.cv.eog[0], 2);
    assert_int_equal(l.cv.eog[1], 4);
    assert_int_equal(l.cv.eog[2], 5);
    unload(&l);
}

static void encode(const loaded *l, const char *text, int special, int32_t *ids, size_t *n)
{
    size_t cap = 64;
    ilab_status st = special ? tl_chat_encode(&l->cv, &l->tok, text, strlen(text), 0, 0, ids, cap, n)
                             : tl_tokenizer_encode(&l->tok, text, strlen(text), 0, 0, ids, cap, n);
    assert_int_equal(st, ILAB_OK);
}

static int has_id(const int32_t *ids, size_t n, int32_t id)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] == id)
            return 1;
    return 0;
}

static void test_parse_special(void **state)
{
    (void)state;
    vocab_file v = {chatml_tokens, chatml_types, CHATML_N, 2, -1, NULL, 0};
    loaded l;
    load(&v, &l);
    int32_t ids[64];
    size_t n = 0;
    /* Control and user-defined texts become their tokens; the text between
     * them gets its dummy-prefix space, as after a special token. */
    encode(&l, "<|im_start|>Hi<|im_end|><tool>", 1, ids, &n);
    assert_int_equal(n, 6);
    assert_int_equal(ids[0], 3);
    assert_int_equal(ids[1], 9); /* "▁" "H" "i": no pair of them is a piece */
    assert_int_equal(ids[2], 7);
    assert_int_equal(ids[3], 8);
    assert_int_equal(ids[4], 4);
    assert_int_equal(ids[5], 18);
    /* Without the flag they are plain text. */
    encode(&l, "<|im_start|>Hi<|im_end|>", 0, ids, &n);
    assert_false(has_id(ids, n, 3));
    assert_false(has_id(ids, n, 4));
    /* Text without special tokens: the same ids either way. */
    int32_t plain[64];
    size_t np = 0;
    encode(&l, "Hi Hi", 1, ids, &n);
    encode(&l, "Hi Hi", 0, plain, &np);
    assert_int_equal(n, np);
    assert_memory_equal(ids, plain, n * sizeof *ids);
    /* A short buffer counts what is needed and writes no more. */
    size_t need = 0;
    int32_t two[2] = {-7, -7};
    assert_int_equal(tl_chat_encode(&l.cv, &l.tok, "<|im_start|>Hi<|im_end|>", 24, 1, 1, two, 1, &need),
                     ILAB_OK);
    assert_int_equal(need, 7); /* BOS, <|im_start|>, 3 for " Hi", <|im_end|>, EOS */
    assert_int_equal(two[0], 1);
    assert_int_equal(two[1], -7);
    unload(&l);
}

/* A special whose text begins with another special's is one token: the
 * longer text is matched first (llama.cpp sorts its special tokens longest
 * first before splitting the text at them), in any order in the file. */
static void test_longer_special_first(void **state)
{
    (void)state;
    static const char *const toks[] = {"<unk>", "<s>", "</s>", "<tool>", "<tool><call>",
                                       "<call>", "a", "\xe2\x96\x81"};
    static const int32_t types[] = {2, 3, 3, 4, 4, 3, 1, 1};
    static const char *const swapped[] = {"<unk>", "<s>", "</s>", "<tool><call>", "<tool>",
                                          "<call>", "a", "\xe2\x96\x81"};
    for (int order = 0; order < 2; order++) {
        vocab_file v = {order ? swapped : toks, types, 8, 2, -1, NULL, 0};
        loaded l;
        load(&v, &l);
        int32_t ids[64];
        size_t n = 0;
        encode(&l, "<tool><call><tool>a<call>", 1, ids, &n);
        int32_t both = order ? 3 : 4, tool = order ? 4 : 3;
        assert_int_equal(n, 5); /* <tool><call>, <tool>, "▁", "a", <call> */
        assert_int_equal(ids[0], both);
        assert_int_equal(ids[1], tool);
        assert_int_equal(ids[2], 7);
        assert_int_equal(ids[3], 6);
        assert_int_equal(ids[4], 5);
        unload(&l);
    }
}

static void test_llama2c_has_eos_only(void **state)
{
    (void)state;
    vocab_file v = {chatml_tokens, chatml_types, CHATML_N, 2, -1, NULL, 0};
    loaded l;
    load(&v, &l);
    tl_chat_vocab cv;
    char err[256];
    assert_int_equal(tl_chat_vocab_init(&cv, NULL, &l.tok, "model.bin", err, sizeof err), ILAB_OK);
    assert_int_equal(cv.n_eog, 1);
    assert_int_equal(cv.eog[0], 2);
    assert_string_equal(cv.chat_template, "");
    tl_chat_vocab_free(&cv);
    unload(&l);
}

/* A pre-tokenizer setting means nothing to a SentencePiece vocabulary: it
 * is refused by name, not ignored. */
static void test_spm_refuses_pre_tokenizer(void **state)
{
    (void)state;
    vocab_file v = {chatml_tokens, chatml_types, CHATML_N, 2, -1, NULL, 0};
    loaded l;
    load(&v, &l);
    tl_tokenizer t;
    char err[512] = "";
    assert_int_equal(tl_vocab_from_gguf(l.g, "chat.gguf", v.n, "llama-bpe", &t, err, sizeof err),
                     ILAB_INVALID_ARGUMENT);
    assert_non_null(strstr(err, "chat.gguf"));
    assert_non_null(strstr(err, "pre_tokenizer (\"llama-bpe\")"));
    assert_non_null(strstr(err, "SentencePiece"));
    unload(&l);
}

/* tokenizer.ggml.add_space_prefix false: no dummy "▁" before the text (nor
 * after a special token), as llama.cpp reads the key. */
static void test_spm_without_space_prefix(void **state)
{
    (void)state;
    int32_t ids[16];
    size_t n;
    for (int off = 0; off <= 1; off++) {
        vocab_file v = {chatml_tokens, chatml_types, CHATML_N, 2, -1, NULL, off};
        loaded l;
        load(&v, &l);
        assert_int_equal(l.tok.add_space_prefix, !off);
        assert_int_equal(tl_tokenizer_encode(&l.tok, "Hi", 2, 0, 0, ids, 16, &n), ILAB_OK);
        if (off) { /* "H" "i" */
            assert_int_equal(n, 2);
            assert_int_equal(ids[0], 7);
            assert_int_equal(ids[1], 8);
        } else { /* "▁" "H" "i" (no "▁H" or "Hi" to merge through) */
            assert_int_equal(n, 3);
            assert_int_equal(ids[0], 9);
            assert_int_equal(ids[1], 7);
            assert_int_equal(ids[2], 8);
        }
        unload(&l);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_eog_ids),
        cmocka_unit_test(test_eot_key_and_no_template),
        cmocka_unit_test(test_eot_key_at_its_bounds),
        cmocka_unit_test(test_harmony_end_is_not_eog),
        cmocka_unit_test(test_parse_special),
        cmocka_unit_test(test_longer_special_first),
        cmocka_unit_test(test_llama2c_has_eos_only),
        cmocka_unit_test(test_spm_refuses_pre_tokenizer),
        cmocka_unit_test(test_spm_without_space_prefix),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
