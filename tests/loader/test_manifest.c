/* Manifest schema validation and configuration entries. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include "ilab_skip.h"
#include "ilab_heap.h"

#include "loader/plugin_loader.h"

#define GOOD_CAPS                                                                               \
    "capabilities:\n"                                                                           \
    "  tokenizer: true\n"                                                                       \
    "  logits: full\n"                                                                          \
    "  topk_max: 5\n"                                                                           \
    "  sampling: host\n"                                                                        \
    "  cache:\n"                                                                                \
    "    fork: true\n"                                                                          \
    "    truncate: false\n"                                                                     \
    "  batching:\n"                                                                             \
    "    max_batch: 8\n"                                                                        \
    "  streaming: false\n"                                                                      \
    "  cancel: false\n"                                                                         \
    "  max_context: 0\n"                                                                        \
    "  thread_safety: sequence\n"

#define HEAD "name: demo\nversion: 1.2.3-rc.1+build.5\nabi: 1.0\ndescription: A demo.\n"

static const char good[] = HEAD GOOD_CAPS
    "config:\n"
    "  threads:\n"
    "    type: int\n"
    "    default: 2\n"
    "    description: Worker threads.\n"
    "  model:\n"
    "    type: string\n"
    "    description: Path to weights.\n"
    "  scale:\n"
    "    type: float\n"
    "    default: 0.5\n"
    "    description: A float.\n";

static char err[512];

static ilab_manifest *parse_ok(const char *yaml)
{
    ilab_manifest *m = NULL;
    ilab_status st = ilab_manifest_parse(yaml, err, sizeof err, &m);
    if (st != ILAB_OK)
        fail_msg("expected a valid manifest, got: %s", err);
    return m;
}

/* Expects a refusal whose message contains `needle` (and "line N" when given). */
static void parse_fails(const char *yaml, const char *needle, int line)
{
    ilab_manifest *m = NULL;
    assert_int_equal(ilab_manifest_parse(yaml, err, sizeof err, &m), ILAB_INVALID_ARGUMENT);
    assert_null(m);
    print_message("refused: %s\n", err);
    if (!strstr(err, needle))
        fail_msg("message lacks '%s': %s", needle, err);
    if (line > 0) {
        char at[32];
        snprintf(at, sizeof at, "line %d:", line);
        if (!strstr(err, at))
            fail_msg("message lacks '%s': %s", at, err);
    }
}

static void valid_manifest_parses(void **state)
{
    ilab_manifest *m = parse_ok(good);
    assert_string_equal(m->name, "demo");
    assert_string_equal(m->version, "1.2.3-rc.1+build.5");
    assert_int_equal(m->abi_major, 1);
    assert_int_equal(m->abi_minor, 0);
    assert_true(m->tokenizer);
    assert_int_equal(m->logits, ILAB_LOGITS_FULL);
    assert_int_equal(m->topk_max, 5);
    assert_int_equal(m->sampling, ILAB_SAMPLING_HOST);
    assert_true(m->cache_fork);
    assert_false(m->cache_truncate);
    assert_int_equal(m->max_batch, 8);
    assert_int_equal(m->thread_safety, ILAB_THREADS_SEQUENCE);
    assert_int_equal(m->n_config, 3);
    const ilab_config_key *k = ilab_manifest_config_key(m, "model");
    assert_non_null(k);
    assert_int_equal(k->type, ILAB_CONFIG_STRING);
    assert_null(k->default_value);
    assert_null(ilab_manifest_config_key(m, "nope"));
    ilab_manifest_free(m);
}

static void schema_errors_name_key_and_line(void **state)
{
    parse_fails(HEAD GOOD_CAPS "colour: blue\n", "unknown key 'colour'", 19);
    parse_fails("name: demo\nversion: 1.0\nabi: 1.0\ndescription: d\n" GOOD_CAPS,
                "key 'version' must be semver", 2);
    parse_fails("name: Demo-1\nversion: 1.0.0\nabi: 1.0\ndescription: d\n" GOOD_CAPS,
                "key 'name' must match [a-z0-9_]+", 1);
    parse_fails("name: demo\nversion: 1.0.0\nabi: one\ndescription: d\n" GOOD_CAPS,
                "key 'abi' must be \"MAJOR.MINOR\"", 3);
    parse_fails("name: demo\nversion: 1.0.0\nabi: 1.0\ndescription: \"\"\n" GOOD_CAPS,
                "key 'description' must not be empty", 4);
    parse_fails("name: demo\nversion: 1.0.0\nabi: 1.0\ndescription: d\n", "missing required key "
                "'capabilities'", 1);
    parse_fails("- just\n- a list\n", "must be a mapping", 1);
    parse_fails("", "empty", 0);
    parse_fails("name: demo\nname: demo\n", "duplicate key 'name'", 2);
}

static void capability_errors(void **state)
{
    char yaml[2048];
    /* One capability line replaced at a time. */
    static const struct {
        const char *from, *to, *needle;
        int line;
    } cases[] = {
        {"logits: full", "logits: most", "key 'capabilities.logits' must be one of none | topk | full", 7},
        {"tokenizer: true", "tokenizer: 1", "key 'capabilities.tokenizer' must be true, false or text, got '1'", 6},
        {"topk_max: 5", "topk_max: -1", "key 'capabilities.topk_max' must be an int >= 0", 8},
        {"max_batch: 8", "max_batch: 0", "'capabilities.batching.max_batch' must be an int >= 1", 14},
        {"max_batch: 8", "max_batches: 8", "unknown key 'capabilities.batching.max_batches'", 14},
        {"    truncate: false\n", "", "missing required key 'capabilities.cache.truncate'", 0},
        {"  streaming: false\n", "", "missing required key 'capabilities.streaming'", 0},
        {"thread_safety: sequence", "thread_safety: [a]", "must be a scalar, got a list", 18},
        {"logits: full", "logits: topk", "'sampling: host' requires 'logits: full'", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *src = good;
        const char *at = strstr(src, cases[i].from);
        assert_non_null(at);
        snprintf(yaml, sizeof yaml, "%.*s%s%s", (int)(at - src), src, cases[i].to,
                 at + strlen(cases[i].from));
        parse_fails(yaml, cases[i].needle, cases[i].line);
    }
}

/* cache.stats (ABI 1.1) is optional: absent it is false; declared it needs
 * abi 1.1 and logits: full; unknown cache keys still fail closed. */
static void cache_stats_capability(void **state)
{
    ilab_manifest *m = parse_ok(good);
    assert_false(m->cache_stats);
    ilab_manifest_free(m);

    char yaml[2048];
    const char *at = strstr(good, "    truncate: false\n");
    const char *abi = strstr(good, "abi: 1.0");
    assert_non_null(at);
    assert_non_null(abi);
    /* abi 1.1 + stats: true parses */
    snprintf(yaml, sizeof yaml, "%.*sabi: 1.1%.*s    truncate: false\n    stats: true\n%s",
             (int)(abi - good), good, (int)(at - abi - 8), abi + 8,
             at + strlen("    truncate: false\n"));
    m = parse_ok(yaml);
    assert_true(m->cache_stats);
    assert_int_equal(m->abi_minor, 1);
    ilab_manifest_free(m);
    /* abi 1.0 + stats: true is refused */
    snprintf(yaml, sizeof yaml, "%.*s    truncate: false\n    stats: true\n%s", (int)(at - good),
             good, at + strlen("    truncate: false\n"));
    parse_fails(yaml, "'cache.stats' is an ABI 1.1 capability (cache_stats()), but 'abi' is 1.0", 0);
    /* stats must be a bool; an unknown cache key is an error */
    snprintf(yaml, sizeof yaml, "%.*s    truncate: false\n    stats: yes please\n%s",
             (int)(at - good), good, at + strlen("    truncate: false\n"));
    parse_fails(yaml, "key 'capabilities.cache.stats' must be a bool", 13);
    snprintf(yaml, sizeof yaml, "%.*s    truncate: false\n    statistics: true\n%s",
             (int)(at - good), good, at + strlen("    truncate: false\n"));
    parse_fails(yaml, "unknown key 'capabilities.cache.statistics'", 13);
}

/* Replace the first `from` in `src` by `to`, into yaml. */
static void replaced(char *yaml, size_t cap, const char *src, const char *from, const char *to)
{
    const char *at = strstr(src, from);
    assert_non_null(at);
    snprintf(yaml, cap, "%.*s%s%s", (int)(at - src), src, to, at + strlen(from));
}

/* chat (ABI 1.2) is optional: absent it is false; declared it needs abi 1.2
 * and a tokenizer. */
static void chat_capability(void **state)
{
    (void)state;
    ilab_manifest *m = parse_ok(good);
    assert_false(m->chat);
    ilab_manifest_free(m);
    char a[2048], b[2048];
    replaced(a, sizeof a, good, "  thread_safety: sequence\n", "  thread_safety: sequence\n  chat: true\n");
    parse_fails(a, "'chat' is an ABI 1.2 capability (eog_ids(), chat_template()), but 'abi' is 1.0", 0);
    /* 1.1 is one minor short too: a 1.1 host has neither member. */
    replaced(b, sizeof b, a, "abi: 1.0", "abi: 1.1");
    parse_fails(b, "but 'abi' is 1.1: declare abi 1.2", 0);
    replaced(b, sizeof b, a, "abi: 1.0", "abi: 1.2");
    m = parse_ok(b);
    assert_true(m->chat);
    ilab_manifest_free(m);
    replaced(a, sizeof a, b, "tokenizer: true", "tokenizer: false");
    parse_fails(a, "'chat' requires a tokenizer", 0);
    replaced(a, sizeof a, b, "chat: true", "chat: maybe");
    parse_fails(a, "key 'capabilities.chat' must be a bool", 0);
}

/* tokenizer: text (TOK-10): a tokenizer, whose pieces are text; the host
 * cannot sample for it, so it needs sampling: backend. */
static void tokenizer_text_capability(void **state)
{
    ilab_manifest *m = parse_ok(good);
    assert_true(m->tokenizer);
    assert_false(m->tokenizer_text);
    ilab_manifest_free(m);

    char yaml[2048], backend[2048];
    replaced(backend, sizeof backend, good, "sampling: host", "sampling: backend");
    replaced(yaml, sizeof yaml, backend, "tokenizer: true", "tokenizer: text");
    m = parse_ok(yaml);
    assert_true(m->tokenizer);
    assert_true(m->tokenizer_text);
    ilab_manifest_free(m);
    replaced(yaml, sizeof yaml, backend, "tokenizer: true", "tokenizer: false");
    m = parse_ok(yaml);
    assert_false(m->tokenizer);
    assert_false(m->tokenizer_text);
    ilab_manifest_free(m);

    replaced(yaml, sizeof yaml, good, "tokenizer: true", "tokenizer: text");
    parse_fails(yaml, "'tokenizer: text' requires 'sampling: backend'", 0);
    replaced(yaml, sizeof yaml, backend, "tokenizer: true", "tokenizer: bytes");
    parse_fails(yaml, "key 'capabilities.tokenizer' must be true, false or text, got 'bytes'", 6);
    replaced(yaml, sizeof yaml, backend, "tokenizer: true", "tokenizer: Text");
    parse_fails(yaml, "must be true, false or text, got 'Text'", 6);
    replaced(yaml, sizeof yaml, backend, "tokenizer: true", "tokenizer: [text]");
    parse_fails(yaml, "key 'capabilities.tokenizer' must be a scalar", 6);
}

static void config_schema_errors(void **state)
{
    parse_fails(HEAD GOOD_CAPS "config:\n  threads:\n    type: int\n    default: many\n"
                "    description: d\n", "'many' is not an int, but the key's type is int", 22);
    parse_fails(HEAD GOOD_CAPS "config:\n  threads:\n    type: integer\n    description: d\n",
                "key 'config.threads.type' must be one of string | int | float | bool", 21);
    parse_fails(HEAD GOOD_CAPS "config:\n  threads:\n    type: int\n",
                "missing required key 'config.threads.description'", 0);
    parse_fails(HEAD GOOD_CAPS "config:\n  threads:\n    type: int\n    description: d\n    min: 1\n",
                "unknown key 'config.threads.min'", 23);
}

static void config_validation_and_defaults(void **state)
{
    ilab_manifest *m = parse_ok(good);
    ilab_config_entry_t bad_key[] = {{"thread", "2"}};
    assert_int_equal(ilab_config_validate(m, bad_key, 1, err, sizeof err), ILAB_INVALID_ARGUMENT);
    assert_non_null(strstr(err, "plugin 'demo': unknown config key 'thread'"));
    assert_non_null(strstr(err, "threads, model, scale"));

    ilab_config_entry_t bad_type[] = {{"scale", "lots"}};
    assert_int_equal(ilab_config_validate(m, bad_type, 1, err, sizeof err), ILAB_INVALID_ARGUMENT);
    assert_non_null(strstr(err, "plugin 'demo': config key 'scale' must be of type float"));

    ilab_config_entry_t user[] = {{"scale", "2.5"}, {"model", "/m.bin"}, {"scale", "3"}};
    assert_int_equal(ilab_config_validate(m, user, 3, err, sizeof err), ILAB_OK);
    ilab_config_entry_t *all = NULL;
    size_t n = 0;
    assert_int_equal(ilab_config_with_defaults(m, user, 3, &all, &n), ILAB_OK);
    /* Manifest order; the user's last value wins; defaults fill the rest. */
    assert_int_equal(n, 3);
    assert_string_equal(all[0].key, "threads");
    assert_string_equal(all[0].value, "2");
    assert_string_equal(all[1].key, "model");
    assert_string_equal(all[1].value, "/m.bin");
    assert_string_equal(all[2].key, "scale");
    assert_string_equal(all[2].value, "3");
    ilab_config_entries_free(all, n);

    assert_int_equal(ilab_config_with_defaults(m, NULL, 0, &all, &n), ILAB_OK);
    assert_int_equal(n, 2); /* model has no default */
    ilab_config_entries_free(all, n);
    ilab_manifest_free(m);
}

static void value_types(void **state)
{
    char why[128];
    assert_true(ilab_config_value_valid(ILAB_CONFIG_INT, "-12", why, sizeof why));
    assert_false(ilab_config_value_valid(ILAB_CONFIG_INT, "1.5", why, sizeof why));
    assert_false(ilab_config_value_valid(ILAB_CONFIG_INT, "", why, sizeof why));
    /* A float is finite: every spelling strtod() reads as NaN or infinity is
     * refused, as are overflows (which it reads as +-HUGE_VAL). */
    static const char *const finite[] = {"1e-3", "0", "-0.5", "+2", "1e308", "0x1p-2"};
    static const char *const not_finite[] = {
        "nan",  "NAN",   "-nan",     "nan(0x1)", "inf",       "-inf", "+INF",
        "infinity", "-Infinity", "1e999", "-1e999", "0x1p99999", "",   " 1",
        "1 ",   "1.5x",  "abc",
    };
    for (size_t i = 0; i < sizeof finite / sizeof *finite; i++)
        assert_true(ilab_config_value_valid(ILAB_CONFIG_FLOAT, finite[i], why, sizeof why));
    for (size_t i = 0; i < sizeof not_finite / sizeof *not_finite; i++) {
        if (ilab_config_value_valid(ILAB_CONFIG_FLOAT, not_finite[i], why, sizeof why))
            fail_msg("float '%s' accepted", not_finite[i]);
        assert_non_null(strstr(why, "not a finite float"));
    }
    assert_true(ilab_config_value_valid(ILAB_CONFIG_BOOL, "false", why, sizeof why));
    assert_false(ilab_config_value_valid(ILAB_CONFIG_BOOL, "maybe", why, sizeof why));
    assert_true(ilab_config_value_valid(ILAB_CONFIG_STRING, "", why, sizeof why));
}

/* `good` with each {from, to} pair replaced once, into `out`. */
static void edited(char *out, size_t cap, const char *const *pairs, size_t n_pairs)
{
    snprintf(out, cap, "%s", good);
    for (size_t i = 0; i + 1 < n_pairs; i += 2) {
        char *at = strstr(out, pairs[i]);
        assert_non_null(at);
        char tail[2048];
        snprintf(tail, sizeof tail, "%s", at + strlen(pairs[i]));
        snprintf(at, cap - (size_t)(at - out), "%s%s", pairs[i + 1], tail);
    }
}

/* Rules at their edges (scripts/mutations.tsv mf02 mf05 mf07 mf08 z321). */
static void rules_at_their_edges(void **state)
{
    char yaml[2048];
    const char *topk0[] = {"logits: full", "logits: topk", "topk_max: 5", "topk_max: 0",
                           "sampling: host", "sampling: backend"};
    edited(yaml, sizeof yaml, topk0, 6);
    parse_fails(yaml, "'logits: topk' requires 'topk_max' >= 1", 0);
    const char *topk1[] = {"logits: full", "logits: topk", "topk_max: 5", "topk_max: 1",
                           "sampling: host", "sampling: backend"};
    edited(yaml, sizeof yaml, topk1, 6);
    ilab_manifest_free(parse_ok(yaml));

    /* Semver numeric identifiers have no leading zero; a lone 0 is one. */
    static const char *const zero_led[] = {"01.2.3", "1.02.3", "1.2.03"};
    for (size_t i = 0; i < sizeof zero_led / sizeof zero_led[0]; i++) {
        char version[32];
        snprintf(version, sizeof version, "version: %s", zero_led[i]);
        const char *v[] = {"version: 1.2.3-rc.1+build.5", version};
        edited(yaml, sizeof yaml, v, 2);
        parse_fails(yaml, "key 'version' must be semver", 2);
    }
    static const char *const zero_ok[] = {"version: 0.1.0", "version: 1.0.10"};
    for (size_t i = 0; i < sizeof zero_ok / sizeof zero_ok[0]; i++) {
        const char *v[] = {"version: 1.2.3-rc.1+build.5", zero_ok[i]};
        edited(yaml, sizeof yaml, v, 2);
        ilab_manifest *m = parse_ok(yaml);
        assert_string_equal(m->version, zero_ok[i] + strlen("version: "));
        ilab_manifest_free(m);
    }

    const char *abi[] = {"abi: 1.0", "abi: 1.0x"};
    edited(yaml, sizeof yaml, abi, 2);
    parse_fails(yaml, "key 'abi' must be \"MAJOR.MINOR\"", 3);

    const char *key[] = {"  threads:", "  Threads:"};
    edited(yaml, sizeof yaml, key, 2);
    parse_fails(yaml, "config key 'Threads' must match [a-z0-9_]+", 0);

    /* Every required key is checked, the last of each list too. */
    const char *no_caps_last[] = {"  thread_safety: sequence\n", ""};
    edited(yaml, sizeof yaml, no_caps_last, 2);
    parse_fails(yaml, "missing required key 'capabilities.thread_safety'", 0);
}

/* Parse and free give every byte back (mf09: a dropped free). */
static void parse_cycle(void *ctx)
{
    (void)ctx;
    ilab_manifest_free(parse_ok(good));
}

static void parse_and_free_leave_no_heap_behind(void **state)
{
    double per_cycle = ilab_heap_growth(parse_cycle, NULL, 20, 200);
    print_message("live heap growth per parse: %.1f bytes\n", per_cycle);
    assert_true(per_cycle < 8.0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(valid_manifest_parses),
        cmocka_unit_test(schema_errors_name_key_and_line),
        cmocka_unit_test(capability_errors),
        cmocka_unit_test(cache_stats_capability),
        cmocka_unit_test(chat_capability),
        cmocka_unit_test(tokenizer_text_capability),
        cmocka_unit_test(config_schema_errors),
        cmocka_unit_test(config_validation_and_defaults),
        cmocka_unit_test(value_types),
        cmocka_unit_test(rules_at_their_edges),
        cmocka_unit_test(parse_and_free_leave_no_heap_behind),
    };
    return ilab_test_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
