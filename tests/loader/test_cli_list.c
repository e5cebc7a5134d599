/* `inferlab list --json` over the deliberately bad plugins: the command
 * survives the plugin whose constructor segfaults and lists every plugin with
 * the state and reason the loader gave. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <cmocka.h>
#include <jansson.h>

/* Runs `cmd`, returns its stdout (caller frees) and exit status. */
static char *run(const char *cmd, int *exit_code)
{
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t cap = 1 << 16, len = 0;
    char *out = malloc(cap);
    assert_non_null(out);
    for (size_t n; (n = fread(out + len, 1, cap - len - 1, p)) > 0;) {
        len += n;
        if (len + 1 == cap) {
            cap *= 2;
            out = realloc(out, cap);
            assert_non_null(out);
        }
    }
    out[len] = '\0';
    int status = pclose(p);
    *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return out;
}

static json_t *plugin_row(json_t *plugins, const char *file)
{
    size_t i;
    json_t *row;
    json_array_foreach(plugins, i, row) {
        const char *path = json_string_value(json_object_get(row, "path"));
        if (path && strstr(path, file))
            return row;
    }
    fail_msg("%s not listed", file);
    return NULL;
}

static void expect_row(json_t *plugins, const char *file, const char *state, const char *needle)
{
    json_t *row = plugin_row(plugins, file);
    const char *got = json_string_value(json_object_get(row, "state"));
    const char *reason = json_string_value(json_object_get(row, "reason"));
    print_message("%-24s %s: %s\n", file, got, reason);
    assert_non_null(got);
    assert_string_equal(got, state);
    if (needle && (!reason || !strstr(reason, needle)))
        fail_msg("%s: reason lacks '%s': %s", file, needle, reason ? reason : "(none)");
}

static void list_survives_bad_plugins(void **state)
{
    int code = -1;
    char *out = run("INFERLAB_PROBE_TIMEOUT=10 " INFERLAB_EXE " list --plugin-dir " LOADER_PLUGIN_DIR
                    " --plugin-dir " LOADER_CRASH_DIR " --json", &code);
    assert_int_equal(code, 0);
    json_error_t jerr;
    json_t *doc = json_loads(out, 0, &jerr);
    if (!doc)
        fail_msg("not JSON (%s): %s", jerr.text, out);
    json_t *plugins = json_object_get(doc, "plugins");
    assert_true(json_is_array(plugins));
    assert_int_equal(json_array_size(plugins), 10);

    expect_row(plugins, "/loader_good.so", "available", NULL);
    expect_row(plugins, "/loader_short_table.so", "available", NULL);
    expect_row(plugins, "/loader_abi_major.so", "rejected", "plugin ABI 2.0, host ABI 1.0");
    expect_row(plugins, "/loader_newer_minor.so", "rejected", "plugin needs ABI 1.7");
    expect_row(plugins, "/loader_no_entry.so", "rejected", "no bootstrap symbol");
    expect_row(plugins, "/loader_unresolved.so", "rejected", "undefined symbol");
    expect_row(plugins, "/loader_not_yaml.so", "rejected", "not valid YAML");
    expect_row(plugins, "/loader_missing_key.so", "rejected", "missing required key 'description'");
    expect_row(plugins, "/loader_cap_null.so", "rejected", "seq_fork is NULL");
    expect_row(plugins, "/loader_ctor_segv.so", "rejected",
               "crashed with signal 11 (SIGSEGV) while loading");

    /* The documented keys of a row. */
    json_t *good = plugin_row(plugins, "/loader_good.so");
    assert_string_equal(json_string_value(json_object_get(good, "name")), "loader_good");
    assert_string_equal(json_string_value(json_object_get(good, "version")), "0.1.0");
    assert_string_equal(json_string_value(json_object_get(good, "abi")), "1.0");
    json_t *caps = json_object_get(good, "capabilities");
    assert_string_equal(json_string_value(json_object_get(caps, "logits")), "full");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(caps, "batching"),
                                                        "max_batch")), 1);
    json_decref(doc);
    free(out);
}

static void table_and_info(void **state)
{
    int code = -1;
    char *out = run(INFERLAB_EXE " list --plugin-dir " LOADER_CRASH_DIR, &code);
    assert_int_equal(code, 0);
    assert_non_null(strstr(out, "(loader_ctor_segv.so)"));
    assert_non_null(strstr(out, "rejected: "));
    free(out);

    out = run(INFERLAB_EXE " info loader_good --plugin-dir " LOADER_PLUGIN_DIR, &code);
    assert_int_equal(code, 0);
    assert_non_null(strstr(out, "state:    available"));
    assert_non_null(strstr(out, "loader_good.so"));
    assert_non_null(strstr(out, "thread_safety: none")); /* the manifest text */
    free(out);

    out = run(INFERLAB_EXE " info no_such_plugin --plugin-dir " LOADER_PLUGIN_DIR " 2>/dev/null",
              &code);
    assert_int_equal(code, 1);
    free(out);

    out = run(INFERLAB_EXE " list --plugin-dir /nonexistent/dir 2>/dev/null", &code);
    assert_int_equal(code, 2);
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(list_survives_bad_plugins),
        cmocka_unit_test(table_and_info),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
