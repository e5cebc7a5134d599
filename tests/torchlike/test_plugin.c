/* torchlike through its plugin ABI (dlopen, as the host does): model facts,
 * tokens, the KV-cache clauses CCH-1..7, LOG-1..3, fail-closed errors, and
 * the forward pass against independent reference logits.
 *
 * Each group runs on one model: the committed tiny fixture (random weights,
 * checked against numpy) and the embedded default (trained: random weights
 * give degenerate distributions, so comparisons on a trained model are the
 * ones that can really fail). The default model's logits over its whole
 * context are checked against a reference in tests/default_model. */
#include <dlfcn.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include "ilab_skip.h"

#include "inferlab/inferlab.h"

typedef struct fixture {
    const char *label;
    const char *model;
    const char *tokenizer;
    void *dl;
    const ilab_backend_api_t *api;
    ilab_backend_t *b;
    ilab_model_info_t info;
} fixture;

static const ilab_backend_api_t *load_api(void **dl_out)
{
    void *dl = dlopen(TL_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
    if (!dl)
        fail_msg("dlopen %s: %s", TL_PLUGIN_PATH, dlerror());
    const ilab_plugin_entry_t *e = dlsym(dl, ILAB_PLUGIN_ENTRY_SYMBOL);
    assert_non_null(e);
    assert_int_equal(e->abi_major, ILAB_ABI_MAJOR);
    assert_string_equal(e->name, "torchlike");
    assert_non_null(strstr(e->manifest_yaml, "thread_safety: sequence"));
    *dl_out = dl;
    return e->backend;
}

static void quiet_log(const ilab_host_t *h, ilab_log_level level, const char *plugin, const char *m)
{
    (void)h, (void)level, (void)plugin, (void)m;
}

static uint64_t zero_clock(const ilab_host_t *h)
{
    (void)h;
    return 0;
}

/* The host table a plugin needs (create() refuses NULL, ERR-3). */
static const ilab_host_t test_host = {.struct_size = sizeof(ilab_host_t), .abi_major = ILAB_ABI_MAJOR,
                                      .abi_minor = ILAB_ABI_MINOR, .log = quiet_log, .now_ns = zero_clock};

static ilab_backend_t *create_with(const ilab_backend_api_t *api, const ilab_config_entry_t *cfg,
                                   size_t n, ilab_status expect, char *err, size_t cap)
{
    ilab_backend_t *b = NULL;
    ilab_status st = api->create(&test_host, cfg, n, err, cap, &b);
    if (st != expect)
        fail_msg("create returned %s, expected %s: %s", ilab_status_name(st),
                 ilab_status_name(expect), err);
    return b;
}

static int setup(void **state, fixture *f)
{
    *state = f;
    f->api = load_api(&f->dl);
    ilab_config_entry_t cfg[] = {{"model", f->model}, {"tokenizer", f->tokenizer},
                                 {"threads", "2"}, {"max_sequences", "16"}};
    char err[512] = "";
    f->b = create_with(f->api, cfg, 4, ILAB_OK, err, sizeof err);
    f->info.struct_size = sizeof f->info;
    assert_int_equal(f->api->model_info(f->b, &f->info), ILAB_OK);
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    if (f->api)
        f->api->destroy(f->b);
    if (f->dl)
        dlclose(f->dl);
    return 0;
}

static fixture *get(void **state)
{
    return *state;
}

/* The contract's tolerance (TOL, docs/contract.md): |a - b| <= 1e-4 + 1e-4 |b| everywhere, same argmax. */
static void assert_close(const float *a, const float *b, int n, const char *what)
{
    int am = 0, bm = 0;
    for (int i = 0; i < n; i++) {
        if (!(fabsf(a[i] - b[i]) <= 1e-4f + 1e-4f * fabsf(b[i])))
            fail_msg("%s: element %d differs: %.7g vs %.7g", what, i, a[i], b[i]);
        if (a[i] > a[am]) am = i;
        if (b[i] > b[bm]) bm = i;
    }
    if (am != bm)
        fail_msg("%s: argmax %d vs %d", what, am, bm);
}

/* A fixed prompt: English text (meaningful for the trained default), tokenized by the backend. */
static int prompt_tokens(fixture *f, int32_t *out, int cap)
{
    const char *text = "It is a truth universally acknowledged, that a single man in "
                       "possession of a good fortune, must be in want of a wife. However "
                       "little known the feelings or views of such a man may be";
    size_t n = 0;
    out[0] = f->info.bos_id;
    assert_int_equal(f->api->tokenize(f->b, text, strlen(text), 0, out + 1, (size_t)cap - 1, &n),
                     ILAB_OK);
    /* leave room for the tests' later tokens on short-context models */
    int total = (int)n + 1, room = f->info.max_context - 16;
    return total < room ? total : room;
}

static ilab_seq_t new_seq(fixture *f)
{
    ilab_seq_t s = ILAB_SEQ_NONE;
    assert_int_equal(f->api->seq_create(f->b, &s), ILAB_OK);
    assert_true(s != ILAB_SEQ_NONE);
    return s;
}

static ilab_status eval1(fixture *f, ilab_seq_t s, const int32_t *t, int n, uint32_t flags,
                         float *logits)
{
    ilab_batch_item_t it = {sizeof it, s, t, n, flags, logits};
    const ilab_batch_item_t *items[1] = {&it};
    return f->api->eval(f->b, items, 1);
}

/* Logits after feeding `n` tokens to a fresh sequence in one call. */
static void fresh_logits(fixture *f, const int32_t *t, int n, float *logits)
{
    ilab_seq_t s = new_seq(f);
    assert_int_equal(eval1(f, s, t, n, 0, logits), ILAB_OK);
    assert_int_equal(f->api->seq_free(f->b, s), ILAB_OK);
}

static float *vec(fixture *f, int rows)
{
    float *p = calloc((size_t)rows * (size_t)f->info.vocab_size, sizeof(float));
    assert_non_null(p);
    return p;
}

/* ---- tests ------------------------------------------------------------------ */

static void test_model_info_and_tokens(void **state)
{
    fixture *f = get(state);
    assert_true(f->info.vocab_size > 0);
    assert_true(f->info.bos_id >= 0 && f->info.bos_id < f->info.vocab_size);
    assert_true(f->info.eos_id >= 0 && f->info.eos_id < f->info.vocab_size);
    assert_true(f->info.max_context > 0);
    assert_true(strlen(f->info.name) > 0);
    assert_int_equal(strncmp(f->info.digest, "sha256:", 7), 0);
    assert_int_equal(strlen(f->info.digest), 7 + 64);
    if (!f->model[0])
        printf("embedded default model: %s\n", f->info.name);

    const char *text = "  Hello,\tworld!\n日本 😀 e\xcc\x81 ";
    int32_t ids[256];
    size_t n = 0, len = 0;
    assert_int_equal(f->api->tokenize(f->b, text, strlen(text), 0, ids, 256, &n), ILAB_OK);
    char back[512], piece[64], joined[512] = "";
    assert_int_equal(f->api->detokenize(f->b, ids, n, back, sizeof back, &len), ILAB_OK);
    assert_int_equal(len, strlen(text));
    assert_string_equal(back, text); /* TOK-2 */
    size_t at = 0;
    for (size_t i = 0; i < n; i++) { /* TOK-4 */
        size_t k;
        assert_int_equal(f->api->token_piece(f->b, i ? ids[i - 1] : -1, ids[i], piece,
                                             sizeof piece, &k), ILAB_OK);
        memcpy(joined + at, piece, k);
        at += k;
    }
    assert_int_equal(at, len);
    assert_memory_equal(joined, text, len);

    size_t need = 0; /* TOK-7 */
    assert_int_equal(f->api->tokenize(f->b, text, strlen(text), 0, ids, 1, &need),
                     ILAB_BUFFER_TOO_SMALL);
    assert_int_equal(need, n);
    assert_int_equal(f->api->detokenize(f->b, ids, n, back, 3, &need), ILAB_BUFFER_TOO_SMALL);
    assert_int_equal(need, strlen(text));
    int32_t bad = f->info.vocab_size; /* TOK-6 */
    assert_int_equal(f->api->detokenize(f->b, &bad, 1, back, sizeof back, &len),
                     ILAB_INVALID_ARGUMENT);
    assert_true(f->api->last_error(f->b, back, sizeof back) > 0);
    assert_int_equal(f->api->token_piece(f->b, -1, -5, piece, sizeof piece, &len),
                     ILAB_INVALID_ARGUMENT);
    /* BOS/EOS decode to "". */
    int32_t special[2] = {f->info.bos_id, f->info.eos_id};
    assert_int_equal(f->api->detokenize(f->b, special, 2, back, sizeof back, &len), ILAB_OK);
    assert_int_equal(len, 0);
}

/* LOG-1 and LOG-2: finite, and bit-identical for the same input. */
static void test_logits_finite_and_deterministic(void **state)
{
    fixture *f = get(state);
    int32_t t[512];
    int n = prompt_tokens(f, t, 512);
    float *a = vec(f, 1), *b = vec(f, 1);
    fresh_logits(f, t, n, a);
    fresh_logits(f, t, n, b);
    for (int i = 0; i < f->info.vocab_size; i++)
        assert_true(isfinite(a[i]));
    assert_memory_equal(a, b, (size_t)f->info.vocab_size * sizeof(float));
    free(a);
    free(b);
}

/* CCH-1: prefill then decode one at a time == full recompute at each step. */
static void test_cch1_incremental_equals_full(void **state)
{
    fixture *f = get(state);
    int32_t t[512];
    int n = prompt_tokens(f, t, 512);
    if (n > 40)
        n = 40;
    float *inc = vec(f, 1), *full = vec(f, 1);
    ilab_seq_t s = new_seq(f);
    int prefill = 7;
    assert_int_equal(eval1(f, s, t, prefill, 0, inc), ILAB_OK);
    for (int i = prefill; i <= n; i++) {
        if (i > prefill)
            assert_int_equal(eval1(f, s, &t[i - 1], 1, 0, inc), ILAB_OK);
        fresh_logits(f, t, i, full);
        char what[64];
        snprintf(what, sizeof what, "CCH-1 step %d", i);
        assert_close(inc, full, f->info.vocab_size, what);
    }
    int32_t len;
    assert_int_equal(f->api->seq_length(f->b, s, &len), ILAB_OK);
    assert_int_equal(len, n);
    f->api->seq_free(f->b, s);
    free(inc);
    free(full);
}

/* CCH-2: a prompt in chunks == the prompt in one call (every position). */
static void test_cch2_chunked_prefill(void **state)
{
    fixture *f = get(state);
    int32_t t[512];
    int n = prompt_tokens(f, t, 512);
    int V = f->info.vocab_size;
    float *one = vec(f, n), *chunked = vec(f, n);
    ilab_seq_t s = new_seq(f);
    assert_int_equal(eval1(f, s, t, n, ILAB_EVAL_ALL_LOGITS, one), ILAB_OK);
    f->api->seq_free(f->b, s);
    s = new_seq(f);
    int sizes[] = {1, 16, 5, 17, 3};
    int at = 0;
    for (int c = 0; at < n; c++) {
        int k = sizes[c % 5] < n - at ? sizes[c % 5] : n - at;
        assert_int_equal(eval1(f, s, t + at, k, ILAB_EVAL_ALL_LOGITS, chunked + (size_t)at * V),
                         ILAB_OK);
        at += k;
    }
    for (int i = 0; i < n; i++) {
        char what[64];
        snprintf(what, sizeof what, "CCH-2 position %d", i);
        assert_close(chunked + (size_t)i * V, one + (size_t)i * V, V, what);
    }
    f->api->seq_free(f->b, s);
    free(one);
    free(chunked);
}

/* CCH-3: a fork continues like a fresh sequence; the parent is untouched. */
static void test_cch3_fork(void **state)
{
    fixture *f = get(state);
    int32_t t[512];
    int n = prompt_tokens(f, t, 512);
    assert_true(n >= 30);
    int P = 21; /* inside a block, so the shared block must be copied on write */
    float *got = vec(f, 1), *want = vec(f, 1);
    ilab_seq_t parent = new_seq(f), child;
    assert_int_equal(eval1(f, parent, t, P, 0, NULL), ILAB_OK);
    assert_int_equal(f->api->seq_fork(f->b, parent, &child), ILAB_OK);
    int32_t len;
    assert_int_equal(f->api->seq_length(f->b, child, &len), ILAB_OK);
    assert_int_equal(len, P);
    /* child continues with t[P..P+5); parent with different tokens */
    assert_int_equal(eval1(f, child, t + P, 5, 0, got), ILAB_OK);
    fresh_logits(f, t, P + 5, want);
    assert_close(got, want, f->info.vocab_size, "CCH-3 child");
    int32_t other[4] = {t[3], t[4], t[5], t[6]};
    assert_int_equal(eval1(f, parent, other, 4, 0, got), ILAB_OK);
    int32_t ref[64];
    memcpy(ref, t, (size_t)P * sizeof *t);
    memcpy(ref + P, other, sizeof other);
    fresh_logits(f, ref, P + 4, want);
    assert_close(got, want, f->info.vocab_size, "CCH-3 parent");
    /* and the child is still intact after the parent wrote */
    assert_int_equal(eval1(f, child, t + P + 5, 1, 0, got), ILAB_OK);
    fresh_logits(f, t, P + 6, want);
    assert_close(got, want, f->info.vocab_size, "CCH-3 child after parent");
    f->api->seq_free(f->b, parent);
    f->api->seq_free(f->b, child);
    free(got);
    free(want);
}

/* CCH-4: truncate to n then re-append == fresh. */
static void test_cch4_truncate(void **state)
{
    fixture *f = get(state);
    int32_t t[512];
    int n = prompt_tokens(f, t, 512);
    assert_true(n >= 36);
    float *got = vec(f, 1), *want = vec(f, 1);
    int keeps[] = {33, 32, 17, 1, 0};
    for (size_t k = 0; k < sizeof keeps / sizeof *keeps; k++) {
        ilab_seq_t s = new_seq(f);
        assert_int_equal(eval1(f, s, t, 36, 0, NULL), ILAB_OK);
        ilab_seq_t shared; /* a fork keeps the blocks shared while truncating */
        assert_int_equal(f->api->seq_fork(f->b, s, &shared), ILAB_OK);
        assert_int_equal(f->api->seq_truncate(f->b, s, keeps[k]), ILAB_OK);
        int32_t len;
        assert_int_equal(f->api->seq_length(f->b, s, &len), ILAB_OK);
        assert_int_equal(len, keeps[k]);
        int32_t tail[3] = {t[10], t[11], t[12]};
        assert_int_equal(eval1(f, s, tail, 3, 0, got), ILAB_OK);
        int32_t ref[64];
        memcpy(ref, t, (size_t)keeps[k] * sizeof *t);
        memcpy(ref + keeps[k], tail, sizeof tail);
        fresh_logits(f, ref, keeps[k] + 3, want);
        assert_close(got, want, f->info.vocab_size, "CCH-4");
        /* the fork still sees the original 36 positions */
        assert_int_equal(eval1(f, shared, &t[36], 1, 0, got), ILAB_OK);
        fresh_logits(f, t, 37, want);
        assert_close(got, want, f->info.vocab_size, "CCH-4 fork after truncate");
        assert_int_equal(f->api->seq_truncate(f->b, s, 99), ILAB_INVALID_ARGUMENT);
        assert_int_equal(f->api->seq_truncate(f->b, s, -1), ILAB_INVALID_ARGUMENT);
        f->api->seq_free(f->b, s);
        f->api->seq_free(f->b, shared);
    }
    free(got);
    free(want);
}

/* CCH-5: passing max_context is CONTEXT_OVERFLOW and changes nothing. */
static void test_cch5_context_overflow(void **state)
{
    fixture *f = get(state);
    int max = f->info.max_context;
    int32_t *t = calloc((size_t)max + 1, sizeof *t);
    for (int i = 0; i <= max; i++)
        t[i] = 3 + (i * 7) % (f->info.vocab_size - 3);
    ilab_seq_t s = new_seq(f);
    assert_int_equal(eval1(f, s, t, max + 1, 0, NULL), ILAB_CONTEXT_OVERFLOW);
    char msg[256];
    assert_true(f->api->last_error(f->b, msg, sizeof msg) > 0);
    int32_t len;
    assert_int_equal(f->api->seq_length(f->b, s, &len), ILAB_OK);
    assert_int_equal(len, 0);
    assert_int_equal(eval1(f, s, t, max - 1, 0, NULL), ILAB_OK);
    assert_int_equal(eval1(f, s, t, 2, 0, NULL), ILAB_CONTEXT_OVERFLOW);
    assert_int_equal(eval1(f, s, t, 1, 0, NULL), ILAB_OK);
    assert_int_equal(eval1(f, s, t, 1, 0, NULL), ILAB_CONTEXT_OVERFLOW);
    assert_int_equal(f->api->seq_length(f->b, s, &len), ILAB_OK);
    assert_int_equal(len, max);
    f->api->seq_free(f->b, s);
    free(t);
}

/* CCH-6: freed sequences give their blocks back; stale handles are refused. */
static void test_cch6_free_and_stale(void **state)
{
    fixture *f = get(state);
    ilab_config_entry_t cfg[] = {{"model", f->model}, {"tokenizer", f->tokenizer},
                                 {"kv_blocks", "3"}, {"max_sequences", "2"}, {"threads", "1"}};
    char err[512] = "";
    ilab_backend_t *b = create_with(f->api, cfg, 5, ILAB_OK, err, sizeof err);
    int32_t t[40];
    for (int i = 0; i < 40; i++)
        t[i] = 3 + i;
    ilab_seq_t first = ILAB_SEQ_NONE;
    for (int i = 0; i < 10000; i++) {
        ilab_seq_t s;
        assert_int_equal(f->api->seq_create(b, &s), ILAB_OK);
        if (i == 0)
            first = s;
        if (i % 10 == 0) { /* 33 positions = all 3 blocks; a leak would exhaust the pool */
            ilab_batch_item_t it = {sizeof it, s, t, 33, 0, NULL};
            const ilab_batch_item_t *items[1] = {&it};
            assert_int_equal(f->api->eval(b, items, 1), ILAB_OK);
        }
        assert_int_equal(f->api->seq_free(b, s), ILAB_OK);
        assert_int_equal(f->api->seq_free(b, s), ILAB_INVALID_ARGUMENT);
    }
    /* the pool is exhausted by one 49-position sequence: OUT_OF_MEMORY, unchanged */
    ilab_seq_t s;
    assert_int_equal(f->api->seq_create(b, &s), ILAB_OK);
    ilab_batch_item_t it = {sizeof it, s, t, 40, 0, NULL};
    const ilab_batch_item_t *items[1] = {&it};
    assert_int_equal(f->api->eval(b, items, 1), ILAB_OK);
    it.n_tokens = 9;
    assert_int_equal(f->api->eval(b, items, 1), ILAB_OUT_OF_MEMORY);
    int32_t len;
    assert_int_equal(f->api->seq_length(b, s, &len), ILAB_OK);
    assert_int_equal(len, 40);
    /* sequence slots: max_sequences = 2 */
    ilab_seq_t s2, s3;
    assert_int_equal(f->api->seq_create(b, &s2), ILAB_OK);
    assert_int_equal(f->api->seq_create(b, &s3), ILAB_OUT_OF_MEMORY);
    assert_int_equal(f->api->seq_fork(b, s, &s3), ILAB_OUT_OF_MEMORY);
    /* stale and never-issued handles */
    float *l = vec(f, 1);
    it.seq = first;
    it.n_tokens = 1;
    assert_int_equal(f->api->eval(b, items, 1), ILAB_INVALID_ARGUMENT);
    assert_int_equal(f->api->seq_length(b, first, &len), ILAB_INVALID_ARGUMENT);
    assert_int_equal(f->api->seq_truncate(b, first, 0), ILAB_INVALID_ARGUMENT);
    assert_int_equal(f->api->seq_fork(b, first, &s3), ILAB_INVALID_ARGUMENT);
    assert_int_equal(f->api->seq_free(b, ILAB_SEQ_NONE), ILAB_INVALID_ARGUMENT);
    assert_int_equal(f->api->seq_length(b, 0xdeadbeef00000001ull, &len), ILAB_INVALID_ARGUMENT);
    assert_int_equal(f->api->seq_length(b, 77, &len), ILAB_INVALID_ARGUMENT);
    free(l);
    f->api->destroy(b);
}

/* CCH-7: interleaved decode steps of two sequences == each decoded alone. */
static void test_cch7_interleaved(void **state)
{
    fixture *f = get(state);
    int32_t t[512];
    int n = prompt_tokens(f, t, 512);
    assert_true(n >= 30);
    float *a = vec(f, 1), *b = vec(f, 1), *want = vec(f, 1);
    ilab_seq_t sa = new_seq(f), sb = new_seq(f);
    const int32_t *ta = t, *tb = t + 10; /* different contents */
    assert_int_equal(eval1(f, sa, ta, 3, 0, a), ILAB_OK);
    assert_int_equal(eval1(f, sb, tb, 5, 0, b), ILAB_OK);
    for (int i = 0; i < 14; i++) {
        assert_int_equal(eval1(f, sa, &ta[3 + i], 1, 0, a), ILAB_OK);
        assert_int_equal(eval1(f, sb, &tb[5 + i], 1, 0, b), ILAB_OK);
        fresh_logits(f, ta, 4 + i, want);
        assert_close(a, want, f->info.vocab_size, "CCH-7 a");
        fresh_logits(f, tb, 6 + i, want);
        assert_close(b, want, f->info.vocab_size, "CCH-7 b");
    }
    f->api->seq_free(f->b, sa);
    f->api->seq_free(f->b, sb);
    free(a);
    free(b);
    free(want);
}

/* LOG-3: a sequence in a mixed batch gets the logits it gets alone. */
static void test_log3_batch_invariance(void **state)
{
    fixture *f = get(state);
    int32_t t[512];
    int n = prompt_tokens(f, t, 512);
    assert_true(n >= 30);
    int V = f->info.vocab_size;
    enum { K = 4 };
    const int start[K] = {0, 4, 9, 2}, pre[K] = {6, 1, 11, 8}, step[K] = {1, 7, 1, 3};
    ilab_seq_t batch[K], alone[K];
    float *got[K], *want[K];
    for (int k = 0; k < K; k++) {
        batch[k] = new_seq(f);
        alone[k] = new_seq(f);
        assert_int_equal(eval1(f, batch[k], t + start[k], pre[k], 0, NULL), ILAB_OK);
        assert_int_equal(eval1(f, alone[k], t + start[k], pre[k], 0, NULL), ILAB_OK);
        got[k] = vec(f, step[k]);
        want[k] = vec(f, step[k]);
    }
    for (int round = 0; round < 3; round++) {
        ilab_batch_item_t it[K];
        const ilab_batch_item_t *items[K];
        for (int k = 0; k < K; k++) {
            const int32_t *toks = t + start[k] + pre[k] + round * step[k];
            uint32_t flags = k == 1 ? ILAB_EVAL_ALL_LOGITS : 0;
            it[k] = (ilab_batch_item_t){sizeof it[k], batch[k], toks, step[k], flags,
                                        k == 3 && round == 0 ? NULL : got[k]};
            items[k] = &it[k];
            assert_int_equal(eval1(f, alone[k], toks, step[k], flags, want[k]), ILAB_OK);
        }
        assert_int_equal(f->api->eval(f->b, items, K), ILAB_OK);
        for (int k = 0; k < K; k++) {
            if (!it[k].logits)
                continue;
            int rows = k == 1 ? step[k] : 1;
            for (int r = 0; r < rows; r++)
                assert_close(got[k] + (size_t)r * V, want[k] + (size_t)r * V, V, "LOG-3");
        }
    }
    for (int k = 0; k < K; k++) {
        f->api->seq_free(f->b, batch[k]);
        f->api->seq_free(f->b, alone[k]);
        free(got[k]);
        free(want[k]);
    }
}

/* ERR-1..3: fail closed, bad arguments, all-or-nothing eval. */
static void test_errors(void **state)
{
    fixture *f = get(state);
    char msg[512];
    assert_int_equal(f->api->generate(f->b, NULL, NULL, NULL), ILAB_UNSUPPORTED);
    f->api->last_error(f->b, msg, sizeof msg);
    assert_non_null(strstr(msg, "sampling: backend"));
    assert_int_equal(f->api->cancel(f->b, 1), ILAB_UNSUPPORTED);
    f->api->last_error(f->b, msg, sizeof msg);
    assert_non_null(strstr(msg, "cancel"));
    assert_int_equal(f->api->seq_create(f->b, NULL), ILAB_INVALID_ARGUMENT);
    assert_int_equal(f->api->model_info(f->b, NULL), ILAB_INVALID_ARGUMENT);
    assert_int_equal(f->api->eval(f->b, NULL, 1), ILAB_INVALID_ARGUMENT);
    assert_int_equal(f->api->tokenize(f->b, NULL, 5, 0, NULL, 0, NULL), ILAB_INVALID_ARGUMENT);
    /* every unknown flag bit is refused (TOK-8); bit 2 is ABI 1.2's
     * PARSE_SPECIAL, which torchlike knows (capability chat) */
    for (unsigned bit = 3; bit < 32; bit++) {
        int32_t ids[8];
        size_t n = 0;
        if (f->api->tokenize(f->b, "a", 1, 1u << bit, ids, 8, &n) != ILAB_INVALID_ARGUMENT)
            fail_msg("tokenize accepted the unknown flag bit 0x%x", 1u << bit);
    }

    ilab_seq_t a = new_seq(f), b = new_seq(f);
    int32_t good[2] = {5, 6}, bad[2] = {5, f->info.vocab_size};
    ilab_batch_item_t ia = {sizeof ia, a, good, 2, 0, NULL}, ib = {sizeof ib, b, bad, 2, 0, NULL};
    const ilab_batch_item_t *items[2] = {&ia, &ib};
    assert_int_equal(f->api->eval(f->b, items, 2), ILAB_INVALID_ARGUMENT);
    int32_t len;
    f->api->seq_length(f->b, a, &len);
    assert_int_equal(len, 0); /* all or nothing */
    ib.seq = a;
    ib.tokens = good;
    assert_int_equal(f->api->eval(f->b, items, 2), ILAB_INVALID_ARGUMENT); /* same sequence twice */
    ib.seq = b;
    ib.n_tokens = 0;
    assert_int_equal(f->api->eval(f->b, items, 2), ILAB_INVALID_ARGUMENT);
    ilab_batch_item_t *many[65];
    assert_int_equal(f->api->eval(f->b, (const ilab_batch_item_t *const *)many, 65),
                     ILAB_INVALID_ARGUMENT);
    assert_true(f->api->last_error(f->b, msg, sizeof msg) > 0);
    f->api->seq_free(f->b, a);
    f->api->seq_free(f->b, b);
}

/* Configuration is checked in create() with messages naming the key; a
 * model file that cannot be read is UNAVAILABLE, with the reason probe() gives. */
static void test_config_errors(void **state)
{
    fixture *f = get(state);
    char err[512];
    struct { ilab_config_entry_t e; const char *needle; ilab_status st; } cases[] = {
        {{"threads", "-1"}, "threads", ILAB_INVALID_ARGUMENT},
        {{"threads", "two"}, "threads", ILAB_INVALID_ARGUMENT},
        {{"kv_blocks", "-5"}, "kv_blocks", ILAB_INVALID_ARGUMENT},
        {{"max_sequences", "0"}, "max_sequences", ILAB_INVALID_ARGUMENT},
        {{"colour", "blue"}, "colour", ILAB_INVALID_ARGUMENT},
        {{"quantize", "q4_0"}, "quantize", ILAB_INVALID_ARGUMENT},
        /* the default vocabulary is SentencePiece: no pre-tokenizer to set */
        {{"pre_tokenizer", "llama-bpe"}, "pre_tokenizer (\"llama-bpe\")", ILAB_INVALID_ARGUMENT},
        {{"model", "/nonexistent/model.bin"}, "/nonexistent/model.bin", ILAB_UNAVAILABLE}, /* probe and create agree (PRB-2) */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        err[0] = '\0';
        ilab_backend_t *b = create_with(f->api, &cases[i].e, 1, cases[i].st, err, sizeof err);
        assert_null(b);
        if (!strstr(err, cases[i].needle))
            fail_msg("error \"%s\" does not name \"%s\"", err, cases[i].needle);
    }
    ilab_config_entry_t mismatch[] = {{"model", f->model[0] ? f->model : TL_TEST_DATA_DIR "/tiny-model.bin"},
                                      {"tokenizer", TL_TEST_DATA_DIR "/llama2-tokenizer.bin"}};
    create_with(f->api, mismatch, 2, ILAB_INVALID_ARGUMENT, err, sizeof err);
    assert_non_null(strstr(err, "vocab_size"));
    assert_non_null(strstr(err, "llama2-tokenizer.bin"));
    char reason[256];
    assert_int_equal(f->api->probe(NULL, NULL, 0, reason, sizeof reason), ILAB_OK);
}

/* The forward pass against numpy (make_forward_fixture.py), tiny model only. */
static void test_forward_matches_reference(void **state)
{
    fixture *f = get(state);
    static const int32_t tokens[] = {1, 300, 17, 5, 383, 42, 42, 260, 99, 2,
                                     354, 120, 7, 64, 311, 200, 3, 77, 150, 250};
    int T = (int)(sizeof tokens / sizeof *tokens), V = f->info.vocab_size;
    assert_int_equal(V, 384);
    float *want = vec(f, T), *got = vec(f, T);
    FILE *fp = fopen(TL_TEST_DATA_DIR "/tiny-logits.f32", "rb");
    assert_non_null(fp);
    assert_int_equal(fread(want, sizeof(float), (size_t)T * V, fp), (size_t)T * V);
    fclose(fp);
    ilab_seq_t s = new_seq(f);
    assert_int_equal(eval1(f, s, tokens, T, ILAB_EVAL_ALL_LOGITS, got), ILAB_OK);
    for (int i = 0; i < T; i++) {
        char what[64];
        snprintf(what, sizeof what, "forward vs numpy, position %d", i);
        assert_close(got + (size_t)i * V, want + (size_t)i * V, V, what);
    }
    f->api->seq_free(f->b, s);
    /* one token at a time (the matrix-vector path) agrees too */
    s = new_seq(f);
    for (int i = 0; i < T; i++) {
        assert_int_equal(eval1(f, s, &tokens[i], 1, 0, got), ILAB_OK);
        assert_close(got, want + (size_t)i * V, V, "forward vs numpy, decode path");
    }
    f->api->seq_free(f->b, s);
    free(want);
    free(got);
}

static fixture tiny = {"tiny", TL_TEST_DATA_DIR "/tiny-model.bin",
                       TL_TEST_DATA_DIR "/tiny-tokenizer.bin", NULL, NULL, NULL, {0}};
static fixture embedded = {"embedded default", "", "", NULL, NULL, NULL, {0}};

static int setup_tiny(void **state) { return setup(state, &tiny); }
static int setup_embedded(void **state) { return setup(state, &embedded); }

#define COMMON_TESTS                                        \
    cmocka_unit_test(test_model_info_and_tokens),           \
    cmocka_unit_test(test_logits_finite_and_deterministic), \
    cmocka_unit_test(test_cch1_incremental_equals_full),    \
    cmocka_unit_test(test_cch2_chunked_prefill),            \
    cmocka_unit_test(test_cch3_fork),                       \
    cmocka_unit_test(test_cch4_truncate),                   \
    cmocka_unit_test(test_cch5_context_overflow),           \
    cmocka_unit_test(test_cch6_free_and_stale),             \
    cmocka_unit_test(test_cch7_interleaved),                \
    cmocka_unit_test(test_log3_batch_invariance),           \
    cmocka_unit_test(test_errors)

int main(void)
{
    const struct CMUnitTest tiny_tests[] = {
        COMMON_TESTS,
        cmocka_unit_test(test_forward_matches_reference),
        cmocka_unit_test(test_config_errors),
    };
    const struct CMUnitTest embedded_tests[] = {COMMON_TESTS};
    int failed = 0;
    failed += cmocka_run_group_tests_name("torchlike tiny fixture", tiny_tests, setup_tiny, teardown);
    failed += cmocka_run_group_tests_name("torchlike embedded default", embedded_tests,
                                          setup_embedded, teardown);
    return ilab_test_exit(failed);
}
