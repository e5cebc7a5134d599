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
#include <stdbool.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cmocka.h>
#include "ilab_skip.h"
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
    /* The given folders' fourteen, then the built-in folder's. */
    size_t given = 0, i;
    json_t *row;
    json_array_foreach(plugins, i, row) {
        const char *path = json_string_value(json_object_get(row, "path"));
        given += strstr(path, LOADER_PLUGIN_DIR "/") || strstr(path, LOADER_CRASH_DIR "/");
        assert_true(given == i + 1 || !strstr(path, "/loader_")); /* given folders come first */
    }
    assert_int_equal(given, 14);

    expect_row(plugins, "/loader_good.so", "available", NULL);
    expect_row(plugins, "/loader_short_table.so", "available", NULL);
    expect_row(plugins, "/loader_abi_major.so", "rejected", "plugin ABI 2.0, host ABI 1.2");
    expect_row(plugins, "/loader_newer_minor.so", "rejected", "plugin needs ABI 1.7");
    expect_row(plugins, "/loader_no_entry.so", "rejected", "no bootstrap symbol");
    expect_row(plugins, "/loader_unresolved.so", "rejected", "undefined symbol");
    expect_row(plugins, "/loader_not_yaml.so", "rejected", "not valid YAML");
    expect_row(plugins, "/loader_missing_key.so", "rejected", "missing required key 'description'");
    expect_row(plugins, "/loader_cap_null.so", "rejected", "seq_fork is NULL");
    expect_row(plugins, "/loader_abi_1_0_table.so", "available", NULL);
    expect_row(plugins, "/loader_stats_good.so", "available", NULL);
    expect_row(plugins, "/loader_stats_short.so", "rejected", "ends before cache_stats");
    expect_row(plugins, "/loader_stats_old_abi.so", "rejected", "'cache.stats' is an ABI 1.1");
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

/* `info` on a model file shows what loaded and what it costs (issue 26's
 * memory figure, issue 27's tokenizer): checked against the file's own
 * size and the KV cache a paged cache of that shape must reserve. */
static void info_shows_the_model_and_its_memory(void **state)
{
    (void)state;
    const char *file = GGUF_DIR "/llama-Q8_0.gguf";
    struct stat st;
    assert_int_equal(stat(file, &st), 0);
    /* 2 layers, 2 KV heads of 32 features: a position holds 2 x 2 x 64
     * floats (keys and values); 64 sequences of max_context 256 take
     * 64 x 16 blocks of 16 positions. */
    char cmd[1024], expect[256];
    snprintf(cmd, sizeof cmd, INFERLAB_EXE " info torchlike --plugin-dir " SHIPPED_PLUGIN_DIR
             " --set torchlike.model=%s --set torchlike.max_context=256 2>&1", file);
    int code = -1;
    char *out = run(cmd, &code);
    assert_int_equal(code, 0);
    if (!strstr(out, "2 layers, dim 256, 8 heads (2 KV), vocab 512, context 256 positions "
                     "(trained for 2048); tokenizer sentencepiece"))
        fail_msg("no model line in:\n%s", out);
    snprintf(expect, sizeof expect, "weights read in place from %.1f MiB of mapped file",
             (double)st.st_size / 1048576.0);
    if (!strstr(out, expect))
        fail_msg("no \"%s\" in:\n%s", expect, out);
    double kv_mib = 64.0 * 16 * 16 * 2 * 2 * 64 * 4 / 1048576.0;
    snprintf(expect, sizeof expect, "KV cache %.1f MiB reserved for %d blocks", kv_mib, 64 * 16);
    if (!strstr(out, expect))
        fail_msg("no \"%s\" in:\n%s", expect, out);
    /* Q8_0 matrices are repacked: a private copy of at least half the file */
    const char *p = strstr(out, "(page cache, shared), ");
    assert_non_null(p);
    assert_true(strtod(p + strlen("(page cache, shared), "), NULL) >=
                (double)st.st_size / 1048576.0 / 2);
    free(out);

    /* INFERLAB_LOG still decides: at warn, info shows no such lines */
    snprintf(cmd, sizeof cmd, "INFERLAB_LOG=warn " INFERLAB_EXE " info torchlike --plugin-dir "
             SHIPPED_PLUGIN_DIR " --set torchlike.model=%s 2>&1", file);
    out = run(cmd, &code);
    assert_int_equal(code, 0);
    assert_null(strstr(out, "private copies"));
    free(out);
}

static void temp_dir(char *out, size_t cap, const char *mode)
{
    snprintf(out, cap, "/tmp/ilab_cli_list_XXXXXX");
    assert_non_null(mkdtemp(out));
    char cmd[256];
    snprintf(cmd, sizeof cmd, "chmod %s %s", mode, out);
    assert_int_equal(system(cmd), 0);
}

static void rm_tree(const char *dir)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* A plugin in a world-writable folder is listed as insecure and not loaded;
 * --allow-insecure-plugins loads it, with a warning. */
static void insecure_plugins(void **state)
{
    char dir[64], cmd[1024], want[512];
    temp_dir(dir, sizeof dir, "0777");
    snprintf(cmd, sizeof cmd, "cp %s/loader_good.so %s/", LOADER_PLUGIN_DIR, dir);
    assert_int_equal(system(cmd), 0);
    int code = -1;
    snprintf(cmd, sizeof cmd, INFERLAB_EXE " list --plugin-dir %s", dir);
    char *out = run(cmd, &code);
    assert_int_equal(code, 0);
    snprintf(want, sizeof want, "rejected: insecure: %s is world-writable (mode 0777)", dir);
    if (!strstr(out, want))
        fail_msg("no '%s' in:\n%s", want, out);
    free(out);

    snprintf(cmd, sizeof cmd, INFERLAB_EXE " list --plugin-dir %s --allow-insecure-plugins --json 2>&1", dir);
    out = run(cmd, &code);
    assert_int_equal(code, 0);
    assert_non_null(strstr(out, "warning: --allow-insecure-plugins: using"));
    json_t *doc = json_loads(strchr(out, '{'), JSON_DISABLE_EOF_CHECK, NULL);
    assert_non_null(doc);
    expect_row(json_object_get(doc, "plugins"), "/loader_good.so", "available", NULL);
    json_decref(doc);
    free(out);
    rm_tree(dir);

    /* An insecure folder in the path is warned about even when it holds no plugin. */
    temp_dir(dir, sizeof dir, "1777");
    snprintf(cmd, sizeof cmd, "INFERLAB_PLUGIN_PATH=%s " INFERLAB_EXE " list 2>&1 >/dev/null", dir);
    out = run(cmd, &code);
    assert_int_equal(code, 0);
    snprintf(want, sizeof want, "warning: plugin folder %s (from INFERLAB_PLUGIN_PATH) is searched "
             "but insecure: %s is world-writable (mode 1777); no plugin in it is loaded", dir, dir);
    if (!strstr(out, want))
        fail_msg("no '%s' in '%s'", want, out);
    free(out);
    rm_tree(dir);
}

/* Two copies of one plugin: the second is listed as shadowed, both paths shown. */
static void shadowed_copies(void **state)
{
    char dir[64], cmd[1024], want[512];
    temp_dir(dir, sizeof dir, "0755");
    snprintf(cmd, sizeof cmd, "cp %s/loader_good.so %s/loader_good_backup.so", LOADER_PLUGIN_DIR, dir);
    assert_int_equal(system(cmd), 0);
    int code = -1;
    snprintf(cmd, sizeof cmd, INFERLAB_EXE " list --plugin-dir %s --plugin-dir %s 2>&1",
             LOADER_PLUGIN_DIR, dir);
    char *out = run(cmd, &code);
    assert_int_equal(code, 0);
    print_message("%s", out);
    /* One table row: the copy's own path, its state naming the winner's. */
    char copy[256];
    snprintf(copy, sizeof copy, "%s/loader_good_backup.so ", dir);
    snprintf(want, sizeof want, " shadowed by %s/loader_good.so\n", LOADER_PLUGIN_DIR);
    bool found = false;
    for (char *line = strtok(out, "\n"); line && !found; line = strtok(NULL, "\n")) {
        size_t n = strlen(line);
        found = strstr(line, copy) && n > strlen(want) - 1 &&
                !strncmp(line + n - (strlen(want) - 1), want, strlen(want) - 1);
    }
    if (!found)
        fail_msg("no row with '%s' and '%s'", copy, want);
    free(out);
    snprintf(cmd, sizeof cmd, INFERLAB_EXE " list --plugin-dir %s --plugin-dir %s 2>&1 >/dev/null",
             LOADER_PLUGIN_DIR, dir);
    out = run(cmd, &code);
    assert_non_null(strstr(out, "warning: ")); /* and warned about, naming both */
    assert_non_null(strstr(out, copy));
    free(out);
    snprintf(cmd, sizeof cmd, INFERLAB_EXE " info loader_good --plugin-dir %s --plugin-dir %s",
             LOADER_PLUGIN_DIR, dir);
    out = run(cmd, &code);
    assert_int_equal(code, 0);
    snprintf(want, sizeof want, "shadows:  %s/loader_good_backup.so", dir);
    assert_non_null(strstr(out, want));
    free(out);
    rm_tree(dir);
}

/* list and info probe with the user's configuration; names and keys that fit
 * no plugin are usage errors. */
static void configuration_reaches_the_probe(void **state)
{
    int code = -1;
    char *out = run(INFERLAB_EXE " info vllm_stub", &code);
    assert_int_equal(code, 0);
    assert_non_null(strstr(out, "no vLLM server configured"));
    free(out);
    out = run(INFERLAB_EXE " info vllm_stub --set vllm_stub.base_url=http://127.0.0.1:9", &code);
    assert_int_equal(code, 0);
    assert_null(strstr(out, "no vLLM server configured"));
    assert_non_null(strstr(out, "127.0.0.1:9"));
    free(out);

    out = run(INFERLAB_EXE " list --set vlm_stub.base_url=http://x 2>&1", &code);
    assert_int_equal(code, 2);
    assert_non_null(strstr(out, "configuration for plugin 'vlm_stub': no plugin has that name; did "
                                "you mean 'vllm_stub'?"));
    free(out);
    out = run(INFERLAB_EXE " list --set vllm_stub.bogus=1 2>&1", &code);
    assert_int_equal(code, 2);
    assert_non_null(strstr(out, "misconfigured"));
    assert_non_null(strstr(out, "bogus"));
    free(out);
    out = run(INFERLAB_EXE " info torchlik 2>&1", &code);
    assert_int_equal(code, 1);
    assert_non_null(strstr(out, "did you mean 'torchlike'?"));
    free(out);
}

/* The same message for a missing plugin folder from list, info, run and the harness. */
static void missing_folder_same_everywhere(void **state)
{
    const char *want = "plugin folder '/nonexistent/dir' (from --plugin-dir or plugin_dirs): "
                       "No such file or directory\n";
    const char *cmds[] = {
        INFERLAB_EXE " list --plugin-dir /nonexistent/dir 2>&1",
        INFERLAB_EXE " info torchlike --plugin-dir /nonexistent/dir 2>&1",
        INFERLAB_EXE " run --prompt x --plugin-dir /nonexistent/dir 2>&1",
        INFERLAB_EXE " tokenize --plugin-dir /nonexistent/dir x 2>&1",
        CONFORMANCE_EXE " --plugin-dir /nonexistent/dir 2>&1",
    };
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
        int code = -1;
        char *out = run(cmds[i], &code);
        print_message("%s -> %d: %s", cmds[i], code, out);
        assert_int_equal(code, 2);
        if (!strstr(out, want))
            fail_msg("%s: no '%s' in '%s'", cmds[i], want, out);
        free(out);
    }
    /* A plugin file that is not there: one usage error, no test run. */
    int code = -1;
    char *out = run(CONFORMANCE_EXE " does/not/exist.so 2>&1", &code);
    assert_int_equal(code, 2);
    assert_non_null(strstr(out, "plugin 'does/not/exist.so': No such file or directory"));
    assert_null(strstr(out, "ABI-1")); /* no test ran */
    free(out);
}

static void version(void **state)
{
    const char *cmds[] = {INFERLAB_EXE " --version", CONFORMANCE_EXE " --version"};
    const char *names[] = {"inferlab ", "inferlab-conformance "};
    for (size_t i = 0; i < 2; i++) {
        int code = -1;
        char *out = run(cmds[i], &code);
        print_message("%s", out);
        assert_int_equal(code, 0);
        char want[128];
        snprintf(want, sizeof want, "%s%s\n", names[i], PROJECT_VERSION);
        assert_true(!strncmp(out, want, strlen(want)));
        assert_non_null(strstr(out, "\nsdk abi: 1.2\n"));
        assert_non_null(strstr(out, "\nbuild: " BUILD_TYPE));
        assert_non_null(strstr(out, "\nopenblas: OpenBLAS "));
        assert_non_null(strstr(out, ", core "));
        free(out);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(list_survives_bad_plugins),
        cmocka_unit_test(table_and_info),
        cmocka_unit_test(info_shows_the_model_and_its_memory),
        cmocka_unit_test(insecure_plugins),
        cmocka_unit_test(shadowed_copies),
        cmocka_unit_test(configuration_reaches_the_probe),
        cmocka_unit_test(missing_folder_same_everywhere),
        cmocka_unit_test(version),
    };
    return ilab_test_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
