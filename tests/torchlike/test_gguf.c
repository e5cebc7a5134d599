/* GGUF: the converter's files of the committed default model give the
 * llama2.c file's logits (F32 bit for bit; Q8_0 bit for bit with the same
 * model quantised at load; F16 within fp16 rounding), carry its vocabulary,
 * and the reader refuses truncated and corrupt files with a message naming
 * the field — never a read outside the buffer (this test also runs under
 * ASan/UBSan). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "checkpoint.h"
#include "convert_gguf.h"
#include "gguf.h"
#include "gguf_writer.h"
#include "kv_cache.h"
#include "model.h"
#include "thread_pool.h"
#include "tokenizer.h"

#define MODEL TL_DEFAULT_DIR "/model.bin"
#define TOKENIZER TL_DEFAULT_DIR "/tokenizer.bin"

static const int32_t probe_tokens[] = {1, 300, 17, 5, 383, 42, 42, 260, 99, 2, 354, 120, 7, 64, 311};
#define N_PROBE ((int)(sizeof probe_tokens / sizeof *probe_tokens))

/* Logits of every position of probe_tokens, [N_PROBE][vocab] (caller frees). */
static float *logits_of(const char *path, tl_dtype quantize, int *vocab)
{
    char err[512];
    tl_checkpoint ck;
    tl_model m;
    if (tl_checkpoint_open(path, &ck, err, sizeof err) != ILAB_OK)
        fail_msg("%s", err);
    if (tl_model_init(&m, &ck, quantize, err, sizeof err) != ILAB_OK)
        fail_msg("%s", err);
    tl_kv_cache kv;
    tl_thread_pool *pool;
    assert_int_equal(tl_kv_init(&kv, m.cfg.n_layers, m.kv_dim, m.cfg.seq_len, 4, 1), ILAB_OK);
    assert_int_equal(tl_thread_pool_create(1, &pool), ILAB_OK);
    uint64_t h;
    assert_int_equal(tl_kv_seq_create(&kv, &h), ILAB_OK);
    tl_kv_sequence *s = tl_kv_seq_get(&kv, h);
    float *out = malloc((size_t)N_PROBE * (size_t)m.cfg.vocab_size * sizeof *out);
    assert_non_null(out);
    tl_kv_prepare_append(&kv, s, N_PROBE);
    tl_forward_item item = {probe_tokens, N_PROBE, 0, s->blocks, 1, out};
    tl_workspace ws;
    assert_int_equal(tl_workspace_alloc(&ws, &m, &item, 1, 1), ILAB_OK);
    tl_model_forward(&m, &kv, &item, 1, &ws, pool);
    tl_workspace_free(&ws);
    *vocab = m.cfg.vocab_size;
    tl_thread_pool_destroy(pool);
    tl_kv_destroy(&kv);
    tl_model_close(&m);
    return out;
}

static void convert(tl_dtype type, char *path, size_t cap)
{
    snprintf(path, cap, "%s/default-%s.gguf", TL_BUILD_DIR, tl_dtype_name(type));
    char err[512];
    tl_checkpoint ck;
    tl_tokenizer tok;
    assert_int_equal(tl_checkpoint_open(MODEL, &ck, err, sizeof err), ILAB_OK);
    assert_int_equal(tl_tokenizer_load_file(TOKENIZER, ck.cfg.vocab_size, MODEL, &tok, err, sizeof err),
                     ILAB_OK);
    if (tl_convert_to_gguf(&ck, &tok, type, "austen-default", path, err, sizeof err) != 0)
        fail_msg("%s", err);
    tl_tokenizer_free(&tok);
    tl_checkpoint_close(&ck);
}

static void test_f32_bit_identical(void **state)
{
    (void)state;
    char path[512];
    convert(TL_DTYPE_F32, path, sizeof path);
    int V, V2;
    float *want = logits_of(MODEL, TL_DTYPE_F32, &V), *got = logits_of(path, TL_DTYPE_F32, &V2);
    assert_int_equal(V, V2);
    assert_memory_equal(want, got, (size_t)N_PROBE * (size_t)V * sizeof(float));
    free(want);
    free(got);
}

/* The converter quantises exactly as quantize: q8_0 does at load. */
static void test_q8_0_matches_load_time_quantisation(void **state)
{
    (void)state;
    char path[512];
    convert(TL_DTYPE_Q8_0, path, sizeof path);
    int V, V2;
    float *want = logits_of(MODEL, TL_DTYPE_Q8_0, &V), *got = logits_of(path, TL_DTYPE_F32, &V2);
    assert_int_equal(V, V2);
    assert_memory_equal(want, got, (size_t)N_PROBE * (size_t)V * sizeof(float));
    free(want);
    free(got);
}

static void test_f16_close_to_f32(void **state)
{
    (void)state;
    char path[512];
    convert(TL_DTYPE_F16, path, sizeof path);
    int V, V2;
    float *want = logits_of(MODEL, TL_DTYPE_F32, &V), *got = logits_of(path, TL_DTYPE_F32, &V2);
    double max = 0;
    for (size_t i = 0; i < (size_t)N_PROBE * (size_t)V; i++)
        max = fmax(max, fabs((double)want[i] - (double)got[i]));
    print_message("F16 GGUF vs fp32: max logit difference %.5f\n", max);
    assert_true(max > 0.0 && max < 0.05);
    free(want);
    free(got);
}

/* The vocabulary comes back from the metadata: same pieces (BOS/EOS aside:
 * SentencePiece names them <s> and </s>), scores, ids and encodings. */
static void test_vocabulary(void **state)
{
    (void)state;
    char path[512], err[512];
    convert(TL_DTYPE_Q8_0, path, sizeof path);
    tl_checkpoint ck;
    tl_tokenizer a, b;
    assert_int_equal(tl_checkpoint_open(path, &ck, err, sizeof err), ILAB_OK);
    assert_non_null(ck.gguf);
    assert_int_equal(tl_tokenizer_load_file(TOKENIZER, ck.cfg.vocab_size, MODEL, &a, err, sizeof err),
                     ILAB_OK);
    if (tl_tokenizer_from_gguf(ck.gguf, path, ck.cfg.vocab_size, &b, err, sizeof err) != ILAB_OK)
        fail_msg("%s", err);
    assert_int_equal(a.vocab_size, b.vocab_size);
    assert_int_equal(b.bos_id, 1);
    assert_int_equal(b.eos_id, 2);
    assert_int_equal(b.unk_id, 0);
    for (int i = 3; i < a.vocab_size; i++) {
        assert_int_equal(a.piece_len[i], b.piece_len[i]);
        assert_memory_equal(a.pieces[i], b.pieces[i], (size_t)a.piece_len[i]);
        assert_true(a.scores[i] == b.scores[i]);
    }
    static const char *const texts[] = {"It is a truth universally acknowledged", "Mr. Darcy's \xe2\x82\xac",
                                        "  two  spaces\nand a line"};
    for (size_t k = 0; k < 3; k++) {
        int32_t x[128], y[128];
        size_t nx, ny;
        assert_int_equal(tl_tokenizer_encode(&a, texts[k], strlen(texts[k]), 1, 0, x, 128, &nx), ILAB_OK);
        assert_int_equal(tl_tokenizer_encode(&b, texts[k], strlen(texts[k]), 1, 0, y, 128, &ny), ILAB_OK);
        assert_int_equal(nx, ny);
        assert_memory_equal(x, y, nx * sizeof *x);
    }
    tl_tokenizer_free(&a);
    tl_tokenizer_free(&b);
    tl_checkpoint_close(&ck);
}

/* ---- corrupt files ------------------------------------------------------- */

/* A small llama GGUF (dim 32, hidden 64, 1 layer, 2 heads, vocabulary 8),
 * broken in one way. */
typedef enum breakage {
    OK_FILE, BAD_ARCH, MISSING_TENSOR, WRONG_SHAPE, UNSUPPORTED_TYPE, MISALIGNED, DUP_KEY,
    BAD_ALIGNMENT, FEW_TOKENS, BAD_VALUE_TYPE, BAD_EPSILON, NO_DIM,
} breakage;

static unsigned char *small_gguf(breakage b, size_t *size)
{
    enum { D = 32, H = 64, V = 8 };
    static float w[H * D];
    for (int i = 0; i < H * D; i++)
        w[i] = (float)((i * 7) % 13 - 6) * 0.01f;
    tl_gguf_writer g;
    tl_gw_init(&g);
    if (b == MISALIGNED)
        g.offset_bias = 4;
    tl_gw_string(&g, "general.architecture", b == BAD_ARCH ? "gpt2" : "llama");
    if (b == DUP_KEY)
        tl_gw_string(&g, "general.architecture", "llama");
    if (b == BAD_ALIGNMENT)
        tl_gw_u32(&g, "general.alignment", 24);
    tl_gw_u32(&g, "llama.context_length", 16);
    if (b != NO_DIM)
        tl_gw_u32(&g, "llama.embedding_length", D);
    tl_gw_u32(&g, "llama.block_count", 1);
    tl_gw_u32(&g, "llama.feed_forward_length", H);
    tl_gw_u32(&g, "llama.attention.head_count", 2);
    if (b != BAD_EPSILON) /* required, as llama.cpp requires it */
        tl_gw_f32(&g, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    if (b == BAD_VALUE_TYPE) {
        /* a key whose value type is not a GGUF type */
        tl_gw_u32(&g, "x.bad", 0);
        memcpy(g.kv.p + g.kv.len - 8, "\x63\0\0\0", 4); /* type 99 */
    }
    const char *pieces[V] = {"<unk>", "<s>", "</s>", "\342\226\201a", "b", "<0x41>", "\xe2\x96\x81", "ab"};
    int lens[V];
    float scores[V];
    for (int i = 0; i < V; i++) {
        lens[i] = (int)strlen(pieces[i]);
        scores[i] = (float)-i;
    }
    tl_gw_string(&g, "tokenizer.ggml.model", "llama");
    tl_gw_strings(&g, "tokenizer.ggml.tokens", b == FEW_TOKENS ? V - 1 : V, pieces, lens);
    tl_gw_f32s(&g, "tokenizer.ggml.scores", V, scores);
    uint64_t emb[2] = {D, V}, sq[2] = {D, D}, up[2] = {D, H}, down[2] = {H, D}, vec[1] = {D};
    tl_gw_tensor(&g, "token_embd.weight", 2, emb, 0, w, sizeof(float) * D * V);
    tl_gw_tensor(&g, "output_norm.weight", 1, vec, 0, w, sizeof(float) * D);
    tl_gw_tensor(&g, "blk.0.attn_norm.weight", 1, vec, 0, w, sizeof(float) * D);
    uint64_t bad_sq[2] = {D, D + 1};
    tl_gw_tensor(&g, "blk.0.attn_q.weight", 2, b == WRONG_SHAPE ? bad_sq : sq, 0, w,
                 sizeof(float) * D * (D + 1));
    tl_gw_tensor(&g, "blk.0.attn_k.weight", 2, sq, b == UNSUPPORTED_TYPE ? 16 : 0, w, sizeof(float) * D * D);
    tl_gw_tensor(&g, "blk.0.attn_v.weight", 2, sq, 0, w, sizeof(float) * D * D);
    tl_gw_tensor(&g, "blk.0.attn_output.weight", 2, sq, 0, w, sizeof(float) * D * D);
    tl_gw_tensor(&g, "blk.0.ffn_norm.weight", 1, vec, 0, w, sizeof(float) * D);
    tl_gw_tensor(&g, "blk.0.ffn_gate.weight", 2, up, 0, w, sizeof(float) * D * H);
    tl_gw_tensor(&g, "blk.0.ffn_down.weight", 2, down, 0, w, sizeof(float) * D * H);
    if (b != MISSING_TENSOR)
        tl_gw_tensor(&g, "blk.0.ffn_up.weight", 2, up, 0, w, sizeof(float) * D * H);
    unsigned char *out;
    assert_int_equal(tl_gw_finish(&g, &out, size), 0);
    tl_gw_free(&g);
    return out;
}

/* Parse as the backend does: checkpoint, then vocabulary. */
static ilab_status load(const unsigned char *bytes, size_t size, char *err, size_t cap)
{
    tl_checkpoint ck;
    ilab_status st = tl_checkpoint_from_gguf(bytes, size, "broken.gguf", &ck, err, cap);
    if (st != ILAB_OK)
        return st;
    tl_tokenizer t;
    st = tl_tokenizer_from_gguf(ck.gguf, "broken.gguf", ck.cfg.vocab_size, &t, err, cap);
    if (st == ILAB_OK)
        tl_tokenizer_free(&t);
    tl_checkpoint_close(&ck);
    return st;
}

static void expect_refused(const unsigned char *bytes, size_t size, const char *needle)
{
    char err[512] = "";
    ilab_status st = load(bytes, size, err, sizeof err);
    if (st != ILAB_INVALID_ARGUMENT || !strstr(err, "broken.gguf") || !strstr(err, needle))
        fail_msg("status %d, message \"%s\": expected a refusal naming \"%s\"", (int)st, err, needle);
}

static void test_small_file_loads(void **state)
{
    (void)state;
    size_t size;
    unsigned char *f = small_gguf(OK_FILE, &size);
    char err[512] = "";
    if (load(f, size, err, sizeof err) != ILAB_OK)
        fail_msg("%s", err);
    tl_checkpoint ck;
    assert_int_equal(tl_checkpoint_from_gguf(f, size, "small.gguf", &ck, err, sizeof err), ILAB_OK);
    assert_int_equal(ck.cfg.dim, 32);
    assert_int_equal(ck.cfg.n_kv_heads, 2); /* head_count_kv absent: = head_count */
    assert_true(ck.cfg.shared_classifier);
    tl_tokenizer t;
    assert_int_equal(tl_tokenizer_from_gguf(ck.gguf, "small.gguf", 8, &t, err, sizeof err), ILAB_OK);
    assert_int_equal(t.piece_len[3], 2);
    assert_memory_equal(t.pieces[3], " a", 2); /* U+2581 is a space again */
    assert_int_equal(t.byte_id[0x41], 5);
    tl_tokenizer_free(&t);
    tl_checkpoint_close(&ck);
    free(f);
}

static void test_broken_files(void **state)
{
    (void)state;
    struct { breakage b; const char *needle; } cases[] = {
        {BAD_ARCH, "general.architecture"},
        {MISSING_TENSOR, "blk.0.ffn_up.weight is missing"},
        {WRONG_SHAPE, "blk.0.attn_q.weight has shape"},
        {UNSUPPORTED_TYPE, "tensor \"blk.0.attn_k.weight\" has type IQ2_XXS"},
        {MISALIGNED, "not a multiple of the alignment"},
        {DUP_KEY, "\"general.architecture\" appears twice"},
        {BAD_ALIGNMENT, "general.alignment is 24"},
        {FEW_TOKENS, "tokenizer.ggml.tokens"},
        {BAD_VALUE_TYPE, "key \"x.bad\": value type 99"},
        {BAD_EPSILON, "layer_norm_rms_epsilon"},
        {NO_DIM, "llama.embedding_length is missing"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        size_t size;
        unsigned char *f = small_gguf(cases[i].b, &size);
        expect_refused(f, size, cases[i].needle);
        free(f);
    }
}

static void put_u64_at(unsigned char *f, size_t off, uint64_t v)
{
    memcpy(f + off, &v, 8);
}

/* Header fields at fixed offsets. */
static void test_broken_header(void **state)
{
    (void)state;
    size_t size;
    unsigned char *good = small_gguf(OK_FILE, &size), *f = malloc(size);
    assert_non_null(f);
    struct { size_t off; uint64_t value; int width; const char *needle; } cases[] = {
        {0, 0x46554746, 4, "magic"},
        {4, 2, 4, "version is 2"},
        {8, 1ull << 40, 8, "tensor_count"},
        {16, 1ull << 40, 8, "metadata_kv_count"},
        {24, 1ull << 40, 8, "key of metadata entry 0"}, /* the first key's length */
        {24, 3, 8, "value type"},                          /* key "gen": type read from "eral" */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        memcpy(f, good, size);
        if (cases[i].width == 4) {
            uint32_t v = (uint32_t)cases[i].value;
            memcpy(f + cases[i].off, &v, 4);
        } else {
            put_u64_at(f, cases[i].off, cases[i].value);
        }
        expect_refused(f, size, cases[i].needle);
    }
    free(f);
    free(good);
}

/* Every truncation is refused (each in its own exact-size buffer, so ASan
 * sees any read past the end). */
static void test_truncated_everywhere(void **state)
{
    (void)state;
    size_t size;
    unsigned char *good = small_gguf(OK_FILE, &size);
    for (size_t n = 0; n < size; n += n < 2048 ? 1 : 61) {
        unsigned char *f = malloc(n ? n : 1);
        assert_non_null(f);
        memcpy(f, good, n);
        char err[512] = "";
        ilab_status st = load(f, n, err, sizeof err);
        if (st != ILAB_INVALID_ARGUMENT || !strstr(err, "broken.gguf"))
            fail_msg("truncated to %zu of %zu bytes: status %d, \"%s\"", n, size, (int)st, err);
        free(f);
    }
    free(good);
}

/* Found by fuzz/fuzz_gguf: the element count of a tensor of 2^31 x 2^9 x
 * 2^31 values wrapped past 2^64 to 0 in the 2^40 check, so the tensor was
 * accepted with 0 bytes. */
static void test_element_count_cannot_wrap(void **state)
{
    (void)state;
    tl_gguf_writer g;
    tl_gw_init(&g);
    uint64_t ne[3] = {1ull << 31, 1ull << 9, 1ull << 31};
    tl_gw_tensor(&g, "huge", 3, ne, 0, NULL, 0);
    unsigned char *f;
    size_t size;
    assert_int_equal(tl_gw_finish(&g, &f, &size), 0);
    tl_gw_free(&g);
    tl_gguf *parsed = NULL;
    char err[512] = "";
    assert_int_equal(tl_gguf_parse(f, size, "wrap.gguf", &parsed, err, sizeof err),
                     ILAB_INVALID_ARGUMENT);
    assert_null(parsed);
    assert_non_null(strstr(err, "tensor \"huge\": dimension 2"));
    free(f);
}

/* A tensor's n_dimensions at and one past each end of GGUF's 1..4: the
 * parser takes 1 and 4 and refuses 0 and 5, naming the tensor. */
static void test_tensor_rank_at_its_bounds(void **state)
{
    (void)state;
    static const struct { uint32_t n_dims; bool ok; } cases[] = {
        {0, false}, {1, true}, {2, true}, {4, true}, {5, false}, {UINT32_MAX, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        tl_gguf_writer g;
        tl_gw_init(&g);
        uint64_t ne[5] = {4, 1, 1, 1, 1};
        float data[4] = {1, 2, 3, 4};
        uint32_t n = cases[i].n_dims;
        tl_gw_tensor(&g, "t", n > 5 ? 0 : n, ne, 0, data, sizeof data);
        unsigned char *f;
        size_t size;
        assert_int_equal(tl_gw_finish(&g, &f, &size), 0);
        tl_gw_free(&g);
        if (n > 5) { /* the count field says more than the file then holds */
            size_t at = 24 + 8 + 1; /* key length, "t", then n_dimensions */
            memcpy(f + at, &n, 4);
        }
        tl_gguf *parsed = NULL;
        char err[512] = "";
        ilab_status st = tl_gguf_parse(f, size, "rank.gguf", &parsed, err, sizeof err);
        if (cases[i].ok ? st != ILAB_OK
                        : st != ILAB_INVALID_ARGUMENT || !strstr(err, "n_dimensions") ||
                              !strstr(err, "rank.gguf"))
            fail_msg("n_dimensions %u: status %d, \"%s\"", n, (int)st, err);
        tl_gguf_free(parsed);
        free(f);
    }
}

/* Found by fuzz/fuzz_gguf: a 2 KB file whose metadata says 2^20 layers of
 * 2^20 values made the loader reserve 8 TB for the norms before looking
 * for a single tensor (an out-of-memory abort under ASan). */
static void test_metadata_cannot_size_allocations(void **state)
{
    (void)state;
    size_t size;
    unsigned char *f = small_gguf(OK_FILE, &size);
    tl_gguf *g = NULL;
    char err[512] = "";
    assert_int_equal(tl_gguf_parse(f, size, "x", &g, err, sizeof err), ILAB_OK);
    /* Patch the two values in place: both are uint32 after their keys. */
    const tl_gguf_kv *dim = tl_gguf_find(g, "llama.embedding_length");
    const tl_gguf_kv *blocks = tl_gguf_find(g, "llama.block_count");
    assert_non_null(dim);
    assert_non_null(blocks);
    size_t at_dim = (size_t)(dim->value - f), at_blocks = (size_t)(blocks->value - f);
    uint32_t big = 1u << 20;
    memcpy(f + at_dim, &big, 4);
    memcpy(f + at_blocks, &big, 4);
    tl_gguf_free(g);
    expect_refused(f, size, "cannot hold them");
    free(f);
}

/* The file type is told from the magic: a GGUF file through the ordinary
 * open, a llama2.c file still the llama2.c reader. */
static void test_open_detects_format(void **state)
{
    (void)state;
    char path[512], err[512];
    convert(TL_DTYPE_F16, path, sizeof path);
    tl_checkpoint ck;
    assert_int_equal(tl_checkpoint_open(path, &ck, err, sizeof err), ILAB_OK);
    assert_non_null(ck.gguf);
    assert_int_equal(ck.w.layers[0].wq.type, TL_DTYPE_F16);
    tl_checkpoint_close(&ck);
    assert_int_equal(tl_checkpoint_open(MODEL, &ck, err, sizeof err), ILAB_OK);
    assert_null(ck.gguf);
    tl_checkpoint_close(&ck);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f32_bit_identical),
        cmocka_unit_test(test_q8_0_matches_load_time_quantisation),
        cmocka_unit_test(test_f16_close_to_f32),
        cmocka_unit_test(test_vocabulary),
        cmocka_unit_test(test_small_file_loads),
        cmocka_unit_test(test_broken_files),
        cmocka_unit_test(test_broken_header),
        cmocka_unit_test(test_truncated_everywhere),
        cmocka_unit_test(test_open_detects_format),
        cmocka_unit_test(test_element_count_cannot_wrap),
        cmocka_unit_test(test_tensor_rank_at_its_bounds),
        cmocka_unit_test(test_metadata_cannot_size_allocations),
    };
    return cmocka_run_group_tests_name("torchlike GGUF", tests, NULL, NULL);
}
