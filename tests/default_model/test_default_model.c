/* torchlike on the committed default model agrees with the training pipeline.
 *
 *   test_default_model <torchlike.so> <model.bin> <tokenizer.bin> <fixture dir>
 *
 * The plugin is loaded the way the host loads it (dlopen + the bootstrap
 * symbol), so this checks the shipped .so, not its internals. Fixtures come
 * from tools/train-default/make_fixtures.py:
 *  - encode_expected.txt: held-out paragraphs and the ids the pipeline's own
 *    encoder produced; torchlike's tokenize() must give exactly those ids.
 *  - logits_expected.bin: PyTorch's forward pass of model.bin at every
 *    position of a fixed token sequence; torchlike's logits must match within
 *    the contract's tolerance (TOL in docs/contract.md: |a-b| <= 1e-4 +
 *    1e-4*|b|) with the same argmax, both for one prefill call and for token-by-token decoding. */
#include <dlfcn.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>
#include "ilab_skip.h"

#include "inferlab/inferlab.h"

static const char *g_plugin_path;
static const char *g_model_path;
static const char *g_tokenizer_path;
static const char *g_fixture_dir;

typedef struct loaded_backend {
    void *dl;
    const ilab_backend_api_t *api;
    ilab_backend_t *backend;
} loaded_backend;

static void host_log(const ilab_host_t *host, ilab_log_level level,
                     const char *plugin, const char *message)
{
    if (level >= ILAB_LOG_WARN)
        fprintf(stderr, "[%s] %s\n", plugin, message);
}

static uint64_t host_now_ns(const ilab_host_t *host)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static const ilab_host_t g_host = {
    .struct_size = sizeof(ilab_host_t),
    .abi_major = ILAB_ABI_MAJOR,
    .abi_minor = ILAB_ABI_MINOR,
    .host_data = NULL,
    .log = host_log,
    .now_ns = host_now_ns,
};

/* Fails the current test with the backend's last error text. */
static void assert_ok(const loaded_backend *lb, ilab_status st, const char *what)
{
    if (st != ILAB_OK) {
        char msg[512] = "";
        lb->api->last_error(lb->backend, msg, sizeof msg);
        fail_msg("%s: %s (%s)", what, ilab_status_name(st), msg);
    }
}

static int setup(void **state)
{
    loaded_backend *lb = calloc(1, sizeof *lb);
    if (!lb)
        return -1;
    lb->dl = dlopen(g_plugin_path, RTLD_NOW | RTLD_LOCAL);
    if (!lb->dl) {
        fprintf(stderr, "dlopen %s: %s\n", g_plugin_path, dlerror());
        free(lb);
        return -1;
    }
    const ilab_plugin_entry_t *entry = dlsym(lb->dl, ILAB_PLUGIN_ENTRY_SYMBOL);
    if (!entry || entry->abi_major != ILAB_ABI_MAJOR || !entry->backend) {
        fprintf(stderr, "%s: no usable %s\n", g_plugin_path, ILAB_PLUGIN_ENTRY_SYMBOL);
        dlclose(lb->dl);
        free(lb);
        return -1;
    }
    lb->api = entry->backend;
    const ilab_config_entry_t config[] = {
        {"model", g_model_path},
        {"tokenizer", g_tokenizer_path},
    };
    char err[512] = "";
    ilab_status st = lb->api->create(&g_host, config, 2, err, sizeof err, &lb->backend);
    if (st != ILAB_OK) {
        fprintf(stderr, "create(model=%s, tokenizer=%s): %s: %s\n", g_model_path,
                g_tokenizer_path, ilab_status_name(st), err);
        dlclose(lb->dl);
        free(lb);
        return -1;
    }
    *state = lb;
    return 0;
}

static int teardown(void **state)
{
    loaded_backend *lb = *state;
    lb->api->destroy(lb->backend);
    dlclose(lb->dl);
    free(lb);
    return 0;
}

static FILE *open_fixture(const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", g_fixture_dir, name);
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("cannot open fixture %s", path);
    return f;
}

/* Parses "I 1 2 3" into ids; returns the count. */
static size_t parse_ids(const char *line, int32_t *ids, size_t cap)
{
    size_t n = 0;
    const char *p = line + 1;
    char *end;
    for (;;) {
        long v = strtol(p, &end, 10);
        if (end == p)
            break;
        if (n == cap)
            fail_msg("fixture line has more than %zu ids", cap);
        ids[n++] = (int32_t)v;
        p = end;
    }
    return n;
}

static void test_tokenize_matches_training_encoder(void **state)
{
    loaded_backend *lb = *state;
    FILE *f = open_fixture("encode_expected.txt");
    char *line = NULL, *text = NULL;
    size_t line_cap = 0;
    ssize_t got;
    const size_t cap = 1 << 16;
    int32_t *expected = malloc(cap * sizeof *expected);
    int32_t *actual = malloc(cap * sizeof *actual);
    char *decoded = malloc(1 << 18);
    assert_non_null(expected);
    assert_non_null(actual);
    assert_non_null(decoded);
    int cases = 0;

    while ((got = getline(&line, &line_cap, f)) > 0) {
        if (line[got - 1] == '\n')
            line[--got] = '\0';
        if (line[0] == '#' || got == 0)
            continue;
        if (line[0] == 'T' && line[1] == ' ') {
            free(text);
            text = strdup(line + 2);
            assert_non_null(text);
            continue;
        }
        assert_true(line[0] == 'I' && text != NULL);
        size_t n_expected = parse_ids(line, expected, cap);
        size_t n_actual = 0;
        assert_ok(lb, lb->api->tokenize(lb->backend, text, strlen(text), 0, actual,
                                        cap, &n_actual),
                  "tokenize");
        size_t first_diff = 0;
        while (first_diff < n_expected && first_diff < n_actual &&
               expected[first_diff] == actual[first_diff])
            first_diff++;
        if (n_actual != n_expected || first_diff != n_expected)
            fail_msg("\"%.60s...\": %zu ids, expected %zu; first difference at %zu "
                     "(got %d, expected %d)",
                     text, n_actual, n_expected, first_diff,
                     first_diff < n_actual ? actual[first_diff] : -1,
                     first_diff < n_expected ? expected[first_diff] : -1);

        size_t len = 0;
        assert_ok(lb, lb->api->detokenize(lb->backend, actual, n_actual, decoded,
                                          1 << 18, &len),
                  "detokenize");
        if (len != strlen(text) || memcmp(decoded, text, len) != 0)
            fail_msg("detokenize does not give back \"%.60s...\"", text);
        cases++;
    }
    printf("tokenize: %d fixture strings encoded exactly\n", cases);
    assert_true(cases >= 20);
    free(line);
    free(text);
    free(expected);
    free(actual);
    free(decoded);
    fclose(f);
}

typedef struct logits_fixture {
    const char *name;
    int32_t n_tokens;
    int32_t vocab;
    int32_t n_rows;
    int32_t *tokens;
    int32_t *positions; /* n_rows, increasing: row r is the logits after tokens[0..positions[r]] */
    float *logits;      /* n_rows * vocab */
} logits_fixture;

static void read_exact(FILE *f, void *buf, size_t n, const char *name, const char *what)
{
    if (fread(buf, 1, n, f) != n)
        fail_msg("%s: truncated reading %s", name, what);
}

/* Version 1: every position has a row. Version 2: n_rows and the positions
 * of the rows follow the header. */
static logits_fixture load_logits_fixture(const char *name)
{
    logits_fixture fx = {.name = name};
    FILE *f = open_fixture(name);
    char magic[4];
    int32_t version;
    read_exact(f, magic, 4, name, "magic");
    if (memcmp(magic, "ILGT", 4) != 0)
        fail_msg("%s: bad magic", name);
    read_exact(f, &version, 4, name, "version");
    if (version != 1 && version != 2)
        fail_msg("%s: version %d, expected 1 or 2", name, version);
    read_exact(f, &fx.n_tokens, 4, name, "n_tokens");
    read_exact(f, &fx.vocab, 4, name, "vocab_size");
    fx.n_rows = fx.n_tokens;
    if (version == 2)
        read_exact(f, &fx.n_rows, 4, name, "n_rows");
    assert_true(fx.n_tokens > 0 && fx.n_tokens <= 4096);
    assert_true(fx.vocab > 0 && fx.vocab <= 1 << 20);
    assert_true(fx.n_rows > 0 && fx.n_rows <= fx.n_tokens);
    fx.tokens = malloc((size_t)fx.n_tokens * sizeof *fx.tokens);
    fx.positions = malloc((size_t)fx.n_rows * sizeof *fx.positions);
    fx.logits = malloc((size_t)fx.n_rows * (size_t)fx.vocab * sizeof *fx.logits);
    assert_non_null(fx.tokens);
    assert_non_null(fx.positions);
    assert_non_null(fx.logits);
    read_exact(f, fx.tokens, (size_t)fx.n_tokens * sizeof *fx.tokens, name, "tokens");
    if (version == 2)
        read_exact(f, fx.positions, (size_t)fx.n_rows * sizeof *fx.positions, name, "positions");
    else
        for (int32_t p = 0; p < fx.n_rows; p++)
            fx.positions[p] = p;
    for (int32_t r = 0; r < fx.n_rows; r++)
        assert_true(fx.positions[r] >= (r ? fx.positions[r - 1] + 1 : 0) &&
                    fx.positions[r] < fx.n_tokens);
    read_exact(f, fx.logits, (size_t)fx.n_rows * (size_t)fx.vocab * sizeof *fx.logits, name,
               "logits");
    fclose(f);
    return fx;
}

static void free_logits_fixture(logits_fixture *fx)
{
    free(fx->tokens);
    free(fx->positions);
    free(fx->logits);
}

static size_t argmax(const float *v, int32_t n)
{
    size_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (v[i] > v[best])
            best = (size_t)i;
    return best;
}

/* The contract's tolerance (TOL, docs/contract.md), position by position;
 * returns the largest |a-b|. */
static double compare_row(const float *actual, const float *expected, int32_t vocab,
                          int32_t pos, const char *mode)
{
    double max_err = 0.0;
    for (int32_t i = 0; i < vocab; i++) {
        double a = actual[i], b = expected[i];
        double err = fabs(a - b);
        if (!(err <= 1e-4 + 1e-4 * fabs(b)))
            fail_msg("%s: position %d, token %d: logit %.6f, reference %.6f", mode,
                     pos, i, a, b);
        if (err > max_err)
            max_err = err;
    }
    size_t am = argmax(actual, vocab), be = argmax(expected, vocab);
    if (am != be)
        fail_msg("%s: position %d: argmax %zu, reference %zu", mode, pos, am, be);
    return max_err;
}

static void check_model_info(loaded_backend *lb, const logits_fixture *fx)
{
    ilab_model_info_t info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    assert_ok(lb, lb->api->model_info(lb->backend, &info), "model_info");
    assert_int_equal(info.vocab_size, fx->vocab);
    assert_true(info.max_context >= fx->n_tokens);
}

/* Feeds the fixture's tokens to a fresh sequence in chunks of the given sizes
 * (cycled; one chunk of everything when n_sizes is 0), every position's
 * logits returned, and compares the rows the fixture has. */
static void check_in_chunks(loaded_backend *lb, const char *fixture, const int *sizes,
                            size_t n_sizes, const char *mode)
{
    logits_fixture fx = load_logits_fixture(fixture);
    check_model_info(lb, &fx);
    const size_t V = (size_t)fx.vocab;
    float *logits = malloc((size_t)fx.n_tokens * V * sizeof *logits);
    assert_non_null(logits);
    ilab_seq_t seq = ILAB_SEQ_NONE;
    assert_ok(lb, lb->api->seq_create(lb->backend, &seq), "seq_create");
    int32_t at = 0;
    for (size_t c = 0; at < fx.n_tokens; c++) {
        int32_t k = n_sizes ? sizes[c % n_sizes] : fx.n_tokens;
        if (k > fx.n_tokens - at)
            k = fx.n_tokens - at;
        ilab_batch_item_t item = {
            .struct_size = sizeof item, .seq = seq, .tokens = fx.tokens + at,
            .n_tokens = k, .flags = ILAB_EVAL_ALL_LOGITS, .logits = logits + (size_t)at * V,
        };
        const ilab_batch_item_t *items[] = {&item};
        assert_ok(lb, lb->api->eval(lb->backend, items, 1), mode);
        at += k;
    }
    double max_err = 0.0;
    for (int32_t r = 0; r < fx.n_rows; r++) {
        int32_t p = fx.positions[r];
        double e = compare_row(logits + (size_t)p * V, fx.logits + (size_t)r * V, fx.vocab, p,
                               mode);
        if (e > max_err)
            max_err = e;
    }
    printf("%s (%s): %d of %d positions match the reference, max |diff| %.2e\n", mode,
           fixture, fx.n_rows, fx.n_tokens, max_err);
    assert_ok(lb, lb->api->seq_free(lb->backend, seq), "seq_free");
    free(logits);
    free_logits_fixture(&fx);
}

static const int one_at_a_time[] = {1};
static const int uneven[] = {1, 16, 5, 17, 3, 31, 64, 2};

static void test_prefill_logits_match_pytorch(void **state)
{
    check_in_chunks(*state, "logits_expected.bin", NULL, 0, "prefill");
}

static void test_decode_logits_match_pytorch(void **state)
{
    check_in_chunks(*state, "logits_expected.bin", one_at_a_time, 1, "decode");
}

static void test_whole_context_prefill(void **state)
{
    check_in_chunks(*state, "logits_long_expected.bin", NULL, 0, "prefill");
}

static void test_whole_context_decode(void **state)
{
    check_in_chunks(*state, "logits_long_expected.bin", one_at_a_time, 1, "decode");
}

static void test_whole_context_uneven_chunks(void **state)
{
    check_in_chunks(*state, "logits_long_expected.bin", uneven,
                    sizeof uneven / sizeof *uneven, "chunked");
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr,
                "usage: %s <torchlike.so> <model.bin> <tokenizer.bin> <fixture dir>\n",
                argv[0]);
        return 2;
    }
    g_plugin_path = argv[1];
    g_model_path = argv[2];
    g_tokenizer_path = argv[3];
    g_fixture_dir = argv[4];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_tokenize_matches_training_encoder, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_prefill_logits_match_pytorch, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_decode_logits_match_pytorch, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_whole_context_prefill, setup, teardown),
        cmocka_unit_test_setup_teardown(test_whole_context_decode, setup, teardown),
        cmocka_unit_test_setup_teardown(test_whole_context_uneven_chunks, setup, teardown),
    };
    return ilab_test_exit(cmocka_run_group_tests_name("default_model", tests, NULL, NULL));
}
