/* ilab_plugin_load over the deliberately bad plugins of test_plugin.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "loader/plugin_loader.h"

#define PLUGIN(v) LOADER_PLUGIN_DIR "/loader_" v ".so"

static char err[1024];

/* Loads and expects refusal with `status`; the message names the file and
 * contains each of the NULL-terminated `needles`. */
static void expect_refusal(const char *path, ilab_status status, ...)
{
    ilab_plugin *p = NULL;
    ilab_status st = ilab_plugin_load(path, err, sizeof err, &p);
    print_message("%s -> %s: %s\n", path, ilab_status_name(st), err);
    assert_int_equal(st, status);
    assert_null(p);
    assert_non_null(strstr(err, path));
    va_list ap;
    va_start(ap, status);
    for (const char *needle; (needle = va_arg(ap, const char *));) {
        if (!strstr(err, needle))
            fail_msg("message lacks '%s': %s", needle, err);
    }
    va_end(ap);
}

static void good_plugin_loads(void **state)
{
    ilab_plugin *p = NULL;
    assert_int_equal(ilab_plugin_load(PLUGIN("good"), err, sizeof err, &p), ILAB_OK);
    const ilab_manifest *m = ilab_plugin_manifest(p);
    assert_string_equal(m->name, "loader_good");
    assert_string_equal(m->version, "0.1.0");
    assert_int_equal(m->abi_major, 1);
    assert_int_equal(m->logits, ILAB_LOGITS_FULL);
    assert_int_equal(m->max_context, 16);
    assert_string_equal(ilab_plugin_path(p), PLUGIN("good"));
    assert_string_equal(ilab_plugin_entry_of(p)->name, "loader_good");

    const ilab_backend_api_t *api = ilab_plugin_api(p);
    char reason[64] = "x";
    assert_int_equal(api->probe(ilab_host_services(), NULL, 0, reason, sizeof reason), ILAB_OK);
    ilab_backend_t *b = NULL;
    assert_int_equal(api->create(ilab_host_services(), NULL, 0, reason, sizeof reason, &b), ILAB_OK);
    assert_int_equal(api->generate(b, NULL, NULL, NULL), ILAB_UNSUPPORTED);
    api->destroy(b);

    ilab_config_entry_t *cfg = NULL;
    size_t n = 0;
    assert_int_equal(ilab_config_with_defaults(m, NULL, 0, &cfg, &n), ILAB_OK);
    assert_int_equal(n, 1);
    assert_string_equal(cfg[0].key, "level");
    assert_string_equal(cfg[0].value, "3");
    ilab_config_entries_free(cfg, n);
    ilab_plugin_unload(p);
}

static void wrong_major_names_both_versions(void **state)
{
    expect_refusal(PLUGIN("abi_major"), ILAB_ABI_MISMATCH, "plugin ABI 2.0", "host ABI 1.0",
                   "major", NULL);
}

static void newer_minor_is_refused(void **state)
{
    expect_refusal(PLUGIN("newer_minor"), ILAB_ABI_MISMATCH, "1.7", "host provides ABI 1.0", NULL);
}

static void missing_bootstrap_symbol(void **state)
{
    expect_refusal(PLUGIN("no_entry"), ILAB_INVALID_ARGUMENT,
                   "no bootstrap symbol 'ilab_plugin_entry'", NULL);
}

static void unresolved_symbol_carries_dlerror(void **state)
{
    expect_refusal(PLUGIN("unresolved"), ILAB_IO, "dlopen failed",
                   "ilab_test_symbol_that_does_not_exist", NULL);
}

static void manifest_not_yaml(void **state)
{
    expect_refusal(PLUGIN("not_yaml"), ILAB_INVALID_ARGUMENT, "manifest", "not valid YAML",
                   "line ", NULL);
}

static void manifest_missing_required_key(void **state)
{
    expect_refusal(PLUGIN("missing_key"), ILAB_INVALID_ARGUMENT,
                   "missing required key 'description'", NULL);
}

static void declared_capability_without_entry_point(void **state)
{
    expect_refusal(PLUGIN("cap_null"), ILAB_INVALID_ARGUMENT, "cache.fork: true", "seq_fork",
                   "NULL", NULL);
}

static void missing_file(void **state)
{
    expect_refusal(LOADER_PLUGIN_DIR "/does_not_exist.so", ILAB_IO, "dlopen failed", NULL);
}

/* A table that ends before generate/cancel (an older minor) still loads; the
 * absent members are shims that fail closed, and generate keeps the stream
 * grammar with one ERROR event. */
static int events;
static ilab_event_type last_event;
static int count_event(void *user, const ilab_event_t *ev)
{
    events++;
    last_event = ev->type;
    return 0;
}

static void short_table_gets_shims(void **state)
{
    ilab_plugin *p = NULL;
    assert_int_equal(ilab_plugin_load(PLUGIN("short_table"), err, sizeof err, &p), ILAB_OK);
    const ilab_backend_api_t *api = ilab_plugin_api(p);
    assert_int_equal(api->struct_size, sizeof(ilab_backend_api_t));
    ilab_seq_t s = 0;
    assert_int_equal(api->seq_create(NULL, &s), ILAB_OK); /* the plugin's own member */
    assert_int_equal(s, 1);
    ilab_generate_request_t req = {.struct_size = sizeof req, .request_id = 9};
    assert_int_equal(api->generate(NULL, &req, count_event, NULL), ILAB_UNSUPPORTED);
    assert_int_equal(events, 1);
    assert_int_equal(last_event, ILAB_EVENT_ERROR);
    assert_int_equal(api->cancel(NULL, 9), ILAB_UNSUPPORTED);
    ilab_plugin_unload(p);
}

static void host_services_are_sane(void **state)
{
    const ilab_host_t *h = ilab_host_services();
    assert_int_equal(h->struct_size, sizeof(ilab_host_t));
    assert_int_equal(h->abi_major, ILAB_ABI_MAJOR);
    uint64_t a = h->now_ns(h), b = h->now_ns(h);
    assert_true(b >= a);
    h->log(h, ILAB_LOG_DEBUG, "test", "a debug line nobody sees by default");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(good_plugin_loads),
        cmocka_unit_test(wrong_major_names_both_versions),
        cmocka_unit_test(newer_minor_is_refused),
        cmocka_unit_test(missing_bootstrap_symbol),
        cmocka_unit_test(unresolved_symbol_carries_dlerror),
        cmocka_unit_test(manifest_not_yaml),
        cmocka_unit_test(manifest_missing_required_key),
        cmocka_unit_test(declared_capability_without_entry_point),
        cmocka_unit_test(missing_file),
        cmocka_unit_test(short_table_gets_shims),
        cmocka_unit_test(host_services_are_sane),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
