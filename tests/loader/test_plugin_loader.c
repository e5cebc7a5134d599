/* ilab_plugin_load over the deliberately bad plugins of test_plugin.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include "ilab_skip.h"

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

/* A bare file name is the file in the current folder, not a library for
 * dlopen() to search the library path for. */
static void bare_name_is_a_file_here(void **state)
{
    char cwd[4096];
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(LOADER_PLUGIN_DIR), 0);
    ilab_plugin *p = NULL;
    ilab_status st = ilab_plugin_load("loader_good.so", err, sizeof err, &p);
    ilab_status missing = ilab_plugin_load("loader_not_there.so", err, sizeof err, &p);
    assert_int_equal(chdir(cwd), 0);
    assert_int_equal(st, ILAB_OK);
    assert_string_equal(ilab_plugin_path(p), "loader_good.so");
    ilab_plugin_unload(p);
    assert_int_equal(missing, ILAB_IO);
    if (!strstr(err, "loader_not_there.so") || strstr(err, "./loader_not_there.so"))
        fail_msg("the refusal does not name the file as given: %s", err);
}

static void wrong_major_names_both_versions(void **state)
{
    expect_refusal(PLUGIN("abi_major"), ILAB_ABI_MISMATCH, "plugin ABI 2.0", "host ABI 1.2",
                   "major", NULL);
}

static void newer_minor_is_refused(void **state)
{
    expect_refusal(PLUGIN("newer_minor"), ILAB_ABI_MISMATCH, "1.7", "host provides ABI 1.2", NULL);
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

/* A plugin built against ABI 1.0 (table without cache_stats) still loads in
 * this 1.1 host: cache_stats is a shim answering ILAB_UNSUPPORTED, and the
 * plugin's own members are its own. */
static void abi_1_0_table_gets_a_cache_stats_shim(void **state)
{
    ilab_plugin *p = NULL;
    assert_int_equal(ilab_plugin_load(PLUGIN("abi_1_0_table"), err, sizeof err, &p), ILAB_OK);
    const ilab_backend_api_t *api = ilab_plugin_api(p);
    assert_false(ilab_plugin_manifest(p)->cache_stats);
    ilab_seq_t s = 0;
    assert_int_equal(api->seq_create(NULL, &s), ILAB_OK);
    ilab_cache_stats_t cs = {.struct_size = sizeof cs};
    assert_int_equal(api->cache_stats(NULL, &cs), ILAB_UNSUPPORTED);
    assert_int_equal(cs.total_positions, 0);
    ilab_plugin_unload(p);
}

/* cache.stats declared with a table that reaches cache_stats: the plugin's
 * member is called. */
static void cache_stats_declared_is_the_plugins_own(void **state)
{
    ilab_plugin *p = NULL;
    assert_int_equal(ilab_plugin_load(PLUGIN("stats_good"), err, sizeof err, &p), ILAB_OK);
    assert_true(ilab_plugin_manifest(p)->cache_stats);
    ilab_cache_stats_t cs = {.struct_size = sizeof cs};
    assert_int_equal(ilab_plugin_api(p)->cache_stats(NULL, &cs), ILAB_OK);
    assert_int_equal(cs.total_positions, 64);
    assert_int_equal(cs.free_positions, 60);
    assert_int_equal(cs.block_size, 4);
    ilab_plugin_unload(p);
}

/* cache.stats declared, but the table ends before cache_stats (built against
 * the 1.0 header): refused, naming the capability and the member. */
static void cache_stats_declared_on_a_1_0_table_is_refused(void **state)
{
    expect_refusal(PLUGIN("stats_short"), ILAB_INVALID_ARGUMENT, "cache.stats: true",
                   "ends before cache_stats", NULL);
}

/* cache.stats needs a 1.1 host: a manifest saying abi 1.0 is refused. */
static void cache_stats_with_abi_1_0_is_refused(void **state)
{
    expect_refusal(PLUGIN("stats_old_abi"), ILAB_INVALID_ARGUMENT, "'cache.stats' is an ABI 1.1",
                   "'abi' is 1.0", NULL);
}

/* The entry checks on in-memory variants of the good plugin's entry, one
 * field off by one each (scripts/mutations.tsv ld01 ld03 ld05 ld07): what a
 * plugin cannot easily be built to show. */
static ilab_status check_variant(const ilab_plugin_entry_t *e, const char *needle)
{
    ilab_manifest *m = NULL;
    err[0] = '\0';
    ilab_status st = ilab_plugin_check_entry("variant.so", e, err, sizeof err, &m);
    print_message("variant -> %s: %s\n", ilab_status_name(st), err);
    if (st == ILAB_OK)
        ilab_manifest_free(m);
    else
        assert_null(m);
    if (needle && !strstr(err, needle))
        fail_msg("message lacks '%s': %s", needle, err);
    return st;
}

/* `yaml` with its "abi: 1.0" line made "abi: 1.<minor>". */
static void manifest_with_minor(const char *yaml, unsigned minor, char *out, size_t cap)
{
    const char *at = strstr(yaml, "abi: 1.0\n");
    assert_non_null(at);
    snprintf(out, cap, "%.*sabi: 1.%u\n%s", (int)(at - yaml), yaml, minor, at + strlen("abi: 1.0\n"));
}

static void entry_fields_off_by_one_are_refused(void **state)
{
    ilab_plugin *p = NULL;
    assert_int_equal(ilab_plugin_load(PLUGIN("good"), err, sizeof err, &p), ILAB_OK);
    const ilab_plugin_entry_t *good = ilab_plugin_entry_of(p);
    ilab_backend_api_t table = *good->backend;
    ilab_plugin_entry_t e = *good;
    e.backend = &table;
    static char yaml[4096];
    assert_int_equal(check_variant(&e, NULL), ILAB_OK); /* the copy itself is fine */

    /* The next minor, in the entry and the manifest alike: a newer host's plugin. */
    e.abi_minor = ILAB_ABI_MINOR + 1;
    manifest_with_minor(good->manifest_yaml, ILAB_ABI_MINOR + 1, yaml, sizeof yaml);
    e.manifest_yaml = yaml;
    assert_int_equal(check_variant(&e, "needs a newer host"), ILAB_ABI_MISMATCH);

    /* The manifest's minor differs from the entry's. */
    e = *good;
    e.backend = &table;
    e.manifest_yaml = yaml;
    assert_int_equal(check_variant(&e, "differs from the entry's ABI"), ILAB_ABI_MISMATCH);

    /* An entry one field short of ABI 1.0's. */
    e = *good;
    e.backend = &table;
    e.struct_size = sizeof e - sizeof(void *);
    assert_int_equal(check_variant(&e, "smaller than the ABI 1.0 entry"), ILAB_ABI_MISMATCH);

    /* `.abi_minor = ILAB_ABI_MINOR` rebuilt against this header while the
     * manifest stayed at 1.0: the message says the header moved under it. */
    e = *good;
    e.backend = &table;
    e.abi_minor = ILAB_ABI_MINOR;
    assert_true(ILAB_ABI_MINOR > 0 && strstr(good->manifest_yaml, "abi: 1.0\n"));
    assert_int_equal(check_variant(&e, "abi_minor = ILAB_ABI_MINOR follows the SDK header"),
                     ILAB_ABI_MISMATCH);

    /* The last member (cache_stats) NULL inside the table, cache.stats not
     * declared: a 1.0 source rebuilt against the 1.1 header. Loaded, and the
     * host's shim answers (ADR 0022). */
    e = *good;
    e.backend = &table;
    assert_true(table.struct_size >= sizeof table); /* the table reaches the last member */
    table.cache_stats = NULL;
    assert_int_equal(check_variant(&e, NULL), ILAB_OK);

    /* A lifecycle member NULL: refused, naming it. */
    table = *good->backend;
    table.model_info = NULL;
    assert_int_equal(check_variant(&e, "backend member model_info is NULL"), ILAB_INVALID_ARGUMENT);
    ilab_plugin_unload(p);
}

/* cache.stats declared and cache_stats NULL: refused, naming the member. */
static void declared_null_member_is_refused(void **state)
{
    ilab_plugin *p = NULL;
    assert_int_equal(ilab_plugin_load(PLUGIN("stats_good"), err, sizeof err, &p), ILAB_OK);
    const ilab_plugin_entry_t *good = ilab_plugin_entry_of(p);
    ilab_backend_api_t table = *good->backend;
    ilab_plugin_entry_t e = *good;
    e.backend = &table;
    table.cache_stats = NULL;
    assert_int_equal(check_variant(&e, "backend member cache_stats is NULL"), ILAB_INVALID_ARGUMENT);
    assert_non_null(strstr(err, "cache.stats: true"));

    /* cache.truncate declared and seq_truncate NULL, seq_fork still set:
     * the check is of seq_truncate itself, not of its cache neighbour. */
    static char yaml[4096];
    const char *at = strstr(good->manifest_yaml, "truncate: false");
    assert_non_null(at);
    snprintf(yaml, sizeof yaml, "%.*struncate: true%s", (int)(at - good->manifest_yaml),
             good->manifest_yaml, at + strlen("truncate: false"));
    e.manifest_yaml = yaml;
    table = *good->backend;
    assert_int_equal(check_variant(&e, NULL), ILAB_OK); /* declared and present: fine */
    table.seq_truncate = NULL;
    assert_non_null(table.seq_fork);
    assert_int_equal(check_variant(&e, "backend member seq_truncate is NULL"), ILAB_INVALID_ARGUMENT);
    assert_non_null(strstr(err, "cache.truncate: true"));
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
        cmocka_unit_test(abi_1_0_table_gets_a_cache_stats_shim),
        cmocka_unit_test(cache_stats_declared_is_the_plugins_own),
        cmocka_unit_test(cache_stats_declared_on_a_1_0_table_is_refused),
        cmocka_unit_test(cache_stats_with_abi_1_0_is_refused),
        cmocka_unit_test(entry_fields_off_by_one_are_refused),
        cmocka_unit_test(declared_null_member_is_refused),
        cmocka_unit_test(bare_name_is_a_file_here),
        cmocka_unit_test(host_services_are_sane),
    };
    return ilab_test_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
