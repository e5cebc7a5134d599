/* The shipped plugins through the loader: the HTTP adapters, with no server,
 * say precisely why they are unavailable and refuse work with the same reason; the template
 * backend round-trips bytes and its cache operations agree with recompute. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include "ilab_skip.h"

#include "loader/plugin_loader.h"

static char err[1024];

static ilab_plugin *load(const char *path)
{
    ilab_plugin *p = NULL;
    if (ilab_plugin_load(path, err, sizeof err, &p) != ILAB_OK)
        fail_msg("%s", err);
    return p;
}

static void stub_reasons(const char *path, const char *env, const char *label)
{
    unsetenv(env);
    ilab_plugin *p = load(path);
    const ilab_backend_api_t *api = ilab_plugin_api(p);
    const ilab_host_t *host = ilab_host_services();
    char reason[512], expected[512];

    snprintf(expected, sizeof expected,
             "no %s server configured (set base_url in the plugin config or %s)", label, env);
    assert_int_equal(api->probe(host, NULL, 0, reason, sizeof reason), ILAB_UNAVAILABLE);
    assert_string_equal(reason, expected);
    ilab_backend_t *b = NULL;
    assert_int_equal(api->create(host, NULL, 0, reason, sizeof reason, &b), ILAB_UNAVAILABLE);
    assert_string_equal(reason, expected); /* PRB-2: the same reason */
    assert_null(b);

    /* Port 1 on loopback: nothing listens, the connection is refused. */
    ilab_config_entry_t cfg[] = {{"base_url", "http://127.0.0.1:1/"}};
    assert_int_equal(api->probe(host, cfg, 1, reason, sizeof reason), ILAB_UNAVAILABLE);
    print_message("%s\n", reason);
    assert_non_null(strstr(reason, "cannot reach http://127.0.0.1:1/health: "));

    setenv(env, "ftp://example.invalid", 1);
    assert_int_equal(api->probe(host, NULL, 0, reason, sizeof reason), ILAB_UNAVAILABLE);
    assert_non_null(strstr(reason, "is not an http:// or https:// URL"));
    unsetenv(env);

    /* Calls on an instance fail closed even without one: the tokenizer
     * (declared, through the server) refuses a NULL instance, what a remote
     * engine does not offer is UNSUPPORTED. */
    size_t n = 0;
    assert_int_equal(api->tokenize(NULL, "a", 1, 0, NULL, 0, &n), ILAB_INVALID_ARGUMENT);
    assert_int_equal(api->eval(NULL, NULL, 0), ILAB_UNSUPPORTED);
    assert_int_equal(api->seq_fork(NULL, 1, NULL), ILAB_UNSUPPORTED);
    ilab_plugin_unload(p);
}

static void vllm_stub_unavailable(void **state)
{
    stub_reasons(SHIPPED_PLUGIN_DIR "/vllm_stub.so", "INFERLAB_VLLM_URL", "vLLM");
}

static void sglang_stub_unavailable(void **state)
{
    stub_reasons(SHIPPED_PLUGIN_DIR "/sglang_stub.so", "INFERLAB_SGLANG_URL", "SGLang");
}

static void template_backend_basics(void **state)
{
    ilab_plugin *p = load(TEMPLATE_PLUGIN);
    const ilab_backend_api_t *api = ilab_plugin_api(p);
    ilab_backend_t *b = NULL;
    ilab_config_entry_t cfg[] = {{"seed", "7"}};
    assert_int_equal(api->create(ilab_host_services(), cfg, 1, err, sizeof err, &b), ILAB_OK);

    ilab_model_info_t info = {.struct_size = sizeof info};
    assert_int_equal(api->model_info(b, &info), ILAB_OK);
    assert_int_equal(info.vocab_size, 258);

    /* Bytes round-trip, including invalid UTF-8. */
    const char text[] = "h\xc3\xa9llo \xff\xfe wor\xe2\x82\xacld\n\t";
    int32_t toks[64];
    size_t n = 0, len = 0;
    assert_int_equal(api->tokenize(b, text, sizeof text - 1, ILAB_TOKENIZE_ADD_BOS, toks, 2, &n),
                     ILAB_BUFFER_TOO_SMALL);
    assert_int_equal(n, sizeof text); /* bytes + BOS */
    assert_int_equal(api->tokenize(b, text, sizeof text - 1, ILAB_TOKENIZE_ADD_BOS, toks, 64, &n),
                     ILAB_OK);
    char back[64];
    assert_int_equal(api->detokenize(b, toks, n, back, sizeof back, &len), ILAB_OK);
    assert_int_equal(len, sizeof text - 1);
    assert_memory_equal(back, text, len);
    int32_t bad = 999;
    assert_int_equal(api->detokenize(b, &bad, 1, back, sizeof back, &len), ILAB_INVALID_ARGUMENT);
    assert_true(api->last_error(b, back, sizeof back) > 0);

    /* Fork + truncate + re-append gives the logits of a fresh sequence. */
    static float fresh[258], again[258];
    ilab_seq_t a, c;
    assert_int_equal(api->seq_create(b, &a), ILAB_OK);
    ilab_batch_item_t item = {.struct_size = sizeof item, .seq = a, .tokens = toks,
                              .n_tokens = (int32_t)n, .logits = fresh};
    const ilab_batch_item_t *items[] = {&item};
    assert_int_equal(api->eval(b, items, 1), ILAB_OK);
    assert_int_equal(api->seq_fork(b, a, &c), ILAB_OK);
    assert_int_equal(api->seq_truncate(b, c, 3), ILAB_OK);
    item.seq = c;
    item.tokens = toks + 3;
    item.n_tokens = (int32_t)n - 3;
    item.logits = again;
    assert_int_equal(api->eval(b, items, 1), ILAB_OK);
    assert_memory_equal(fresh, again, sizeof fresh);
    int32_t length = 0;
    assert_int_equal(api->seq_length(b, a, &length), ILAB_OK);
    assert_int_equal(length, (int32_t)n);

    assert_int_equal(api->seq_free(b, a), ILAB_OK);
    assert_int_equal(api->seq_free(b, a), ILAB_INVALID_ARGUMENT); /* stale handle */
    assert_int_equal(api->seq_free(b, c), ILAB_OK);
    assert_int_equal(api->generate(b, NULL, NULL, NULL), ILAB_UNSUPPORTED);
    api->destroy(b);
    ilab_plugin_unload(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(vllm_stub_unavailable),
        cmocka_unit_test(sglang_stub_unavailable),
        cmocka_unit_test(template_backend_basics),
    };
    return ilab_test_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
