/* The catalog and sessions over it: the first plugin of a name wins and the
 * later ones are shadowed; insecure files are rejected without being
 * loaded; building a catalog maps no plugin into this process and a session
 * maps only the one it serves; configuration and backend names that match
 * no plugin are refused with the closest name and the list. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "loader/catalog.h"
#include "runtime/session.h"

static void copy_file(const char *from, const char *dir, const char *name, mode_t mode)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s/%s' && chmod %o '%s/%s'", from, dir, name,
             (unsigned)mode, dir, name);
    assert_int_equal(system(cmd), 0);
}

static void remove_tree(const char *dir)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

static void temp_dir(char *out, size_t cap, mode_t mode)
{
    snprintf(out, cap, "/tmp/ilab_catalog_XXXXXX");
    assert_non_null(mkdtemp(out));
    assert_int_equal(chmod(out, mode), 0);
}

static ilab_catalog *scan(const char *const *dirs, size_t n, bool allow_insecure)
{
    ilab_catalog_options o = {.plugin_dirs = dirs, .n_dirs = n, .allow_insecure = allow_insecure};
    ilab_catalog *c = NULL;
    char err[2048];
    if (ilab_catalog_scan(&o, err, sizeof err, &c) != ILAB_OK)
        fail_msg("scan: %s", err);
    return c;
}

static const ilab_catalog_entry *by_path(const ilab_catalog *c, const char *suffix)
{
    for (size_t i = 0; i < ilab_catalog_size(c); i++) {
        const ilab_catalog_entry *e = ilab_catalog_at(c, i);
        size_t n = strlen(e->path), m = strlen(suffix);
        if (n >= m && !strcmp(e->path + n - m, suffix))
            return e;
    }
    fail_msg("%s not in the catalog", suffix);
    return NULL;
}

static char *warnings(const ilab_catalog *c)
{
    static char text[8192];
    FILE *f = tmpfile();
    assert_non_null(f);
    ilab_catalog_warn(c, "test: ", f);
    rewind(f);
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
    return text;
}

static void first_of_a_name_wins(void **state)
{
    char a[64], b[64];
    temp_dir(a, sizeof a, 0755);
    temp_dir(b, sizeof b, 0755);
    copy_file(COUNTING_PLUGIN, a, "counting_backend.so", 0644);
    copy_file(COUNTING_PLUGIN, b, "counting_backup.so", 0644);
    /* A planted copy of a shipped plugin, later in the order (INFERLAB_PLUGIN_PATH). */
    copy_file(SHIPPED_PLUGIN_DIR "/vllm_stub.so", b, "vllm_stub.so", 0644);
    setenv("INFERLAB_PLUGIN_PATH", b, 1);
    const char *dirs[] = {a};
    ilab_catalog *c = scan(dirs, 1, false);
    unsetenv("INFERLAB_PLUGIN_PATH");

    const ilab_catalog_entry *first = by_path(c, "/counting_backend.so");
    const ilab_catalog_entry *backup = by_path(c, "/counting_backup.so");
    assert_int_equal(first->state, ILAB_PLUGIN_LOADED);
    assert_int_equal(backup->state, ILAB_PLUGIN_SHADOWED);
    assert_string_equal(backup->name, "counting_backend");
    char want[256];
    snprintf(want, sizeof want, "shadowed by %s/counting_backend.so", a);
    assert_string_equal(backup->reason, want);
    assert_ptr_equal(ilab_catalog_find(c, "counting_backend"), first);

    char planted[256];
    snprintf(planted, sizeof planted, "%s/vllm_stub.so", b);
    const ilab_catalog_entry *shipped = ilab_catalog_find(c, "vllm_stub");
    assert_non_null(shipped);
    assert_string_not_equal(shipped->path, planted); /* the built-in copy wins */
    assert_int_equal(by_path(c, planted)->state, ILAB_PLUGIN_SHADOWED);

    const char *w = warnings(c);
    print_message("%s", w);
    assert_non_null(strstr(w, backup->path));
    assert_non_null(strstr(w, first->path));
    assert_non_null(strstr(w, planted));
    ilab_catalog_free(c);
    remove_tree(a);
    remove_tree(b);
}

static ilab_catalog *rescan(const char *dir, const ilab_catalog *previous)
{
    const char *dirs[] = {dir};
    ilab_catalog_options o = {.plugin_dirs = dirs, .n_dirs = 1, .previous = previous};
    ilab_catalog *c = NULL;
    char err[2048];
    if (ilab_catalog_scan(&o, err, sizeof err, &c) != ILAB_OK)
        fail_msg("scan: %s", err);
    return c;
}

/* A rescan takes over the previous scan's look at a file unchanged since,
 * and looks again at one that changed (its modification time) or that
 * the trust rule now refuses. The previous entry is doctored to tell the
 * two apart: only a taken-over look can say what it says. */
static void unchanged_files_are_not_looked_at_again(void **state)
{
    char dir[64];
    temp_dir(dir, sizeof dir, 0755);
    copy_file(COUNTING_PLUGIN, dir, "counting_backend.so", 0644);
    ilab_catalog *first = rescan(dir, NULL);
    ilab_catalog_entry *e = (ilab_catalog_entry *)by_path(first, "/counting_backend.so");
    assert_int_equal(e->state, ILAB_PLUGIN_LOADED);
    assert_true(e->file.ino != 0);
    e->state = ILAB_PLUGIN_UNAVAILABLE;
    free(e->reason);
    e->reason = strdup("as the previous scan said");

    ilab_catalog *again = rescan(dir, first);
    const ilab_catalog_entry *kept = by_path(again, "/counting_backend.so");
    assert_int_equal(kept->state, ILAB_PLUGIN_UNAVAILABLE);
    assert_string_equal(kept->reason, "as the previous scan said");
    assert_string_equal(kept->name, "counting_backend"); /* its manifest, parsed here */
    ilab_catalog_free(again);

    char path[128];
    snprintf(path, sizeof path, "%s/counting_backend.so", dir);
    struct timespec times[2] = {{0, UTIME_OMIT}, {12345, 0}};
    assert_int_equal(utimensat(AT_FDCWD, path, times, 0), 0);
    again = rescan(dir, first);
    assert_int_equal(by_path(again, "/counting_backend.so")->state, ILAB_PLUGIN_LOADED);
    ilab_catalog_free(again);

    /* Trusted no more: refused, whatever the previous scan said. */
    e->file.mtime_ns = 12345LL * 1000000000LL;
    assert_int_equal(chmod(path, 0666), 0);
    again = rescan(dir, first);
    assert_int_equal(by_path(again, "/counting_backend.so")->state, ILAB_PLUGIN_REJECTED);
    assert_non_null(strstr(by_path(again, "/counting_backend.so")->reason, "insecure"));
    ilab_catalog_free(again);
    ilab_catalog_free(first);
    remove_tree(dir);
}

static void insecure_files_are_not_loaded(void **state)
{
    char open_dir[64];
    temp_dir(open_dir, sizeof open_dir, 0777);
    copy_file(COUNTING_PLUGIN, open_dir, "counting_backend.so", 0644);
    const char *dirs[] = {open_dir};
    ilab_catalog *c = scan(dirs, 1, false);
    const ilab_catalog_entry *e = by_path(c, "/counting_backend.so");
    assert_int_equal(e->state, ILAB_PLUGIN_REJECTED);
    assert_null(e->name); /* never looked inside */
    char want[256];
    snprintf(want, sizeof want, "insecure: %s is world-writable (mode 0777)", open_dir);
    assert_string_equal(e->reason, want);
    assert_null(ilab_catalog_find(c, "counting_backend"));
    ilab_catalog_free(c);

    c = scan(dirs, 1, true); /* --allow-insecure-plugins */
    e = by_path(c, "/counting_backend.so");
    assert_int_equal(e->state, ILAB_PLUGIN_LOADED);
    assert_string_equal(e->name, "counting_backend");
    const char *w = warnings(c);
    assert_non_null(strstr(w, "--allow-insecure-plugins: using"));
    assert_non_null(strstr(w, want));
    ilab_catalog_free(c);
    remove_tree(open_dir);
}

/* Whether a file whose path contains `needle` is mapped into this process. */
static bool mapped(const char *needle)
{
    FILE *f = fopen("/proc/self/maps", "r");
    assert_non_null(f);
    char line[4096];
    bool found = false;
    while (!found && fgets(line, sizeof line, f))
        found = strstr(line, needle) != NULL;
    fclose(f);
    return found;
}

static void only_the_served_plugin_runs_here(void **state)
{
    /* The crash folder holds a plugin whose constructor segfaults: were it
     * loaded here, this test would die. */
    const char *dirs[] = {TEST_PLUGIN_DIR, LOADER_PLUGIN_DIR, LOADER_CRASH_DIR};
    ilab_catalog *c = scan(dirs, 3, false);
    assert_int_equal(by_path(c, "/loader_ctor_segv.so")->state, ILAB_PLUGIN_REJECTED);
    assert_int_equal(by_path(c, "/paced_backend.so")->state, ILAB_PLUGIN_LOADED);
    assert_false(mapped("/loader_"));
    assert_false(mapped("backend.so"));
    assert_false(mapped("/torchlike.so"));
    ilab_catalog_free(c);

    ilab_settings s;
    ilab_settings_init(&s);
    for (size_t i = 0; i < 3; i++)
        assert_int_equal(ilab_settings_add_plugin_dir(&s, dirs[i]), ILAB_OK);
    char err[4096];
    ilab_session *session = NULL;
    if (ilab_session_open(&s, "counting_backend", err, sizeof err, &session) != ILAB_OK)
        fail_msg("%s", err);
    assert_true(mapped("/counting_backend.so"));
    assert_false(mapped("/paced_backend.so"));
    assert_false(mapped("/generate_backend.so"));
    assert_false(mapped("/loader_"));
    assert_false(mapped("/torchlike.so"));
    assert_false(mapped("/vllm_stub.so"));
    ilab_session_close(session);
    assert_false(mapped("/counting_backend.so"));
    ilab_settings_free(&s);
}

static void names_that_match_no_plugin(void **state)
{
    ilab_settings s;
    ilab_settings_init(&s);
    assert_int_equal(ilab_settings_add_plugin_dir(&s, TEST_PLUGIN_DIR), ILAB_OK);
    char err[4096];
    ilab_session *session = NULL;
    assert_int_equal(ilab_session_open(&s, "countin_backend", err, sizeof err, &session),
                     ILAB_INVALID_ARGUMENT);
    print_message("%s\n", err);
    assert_non_null(strstr(err, "backend 'countin_backend': no plugin has that name; did you mean "
                                "'counting_backend'? (plugins: counting_backend"));
    assert_non_null(strstr(err, ", paced_backend"));
    assert_non_null(strstr(err, "searched: "));

    assert_int_equal(ilab_settings_set(&s, "counting_backnd.step_ms=1", err, sizeof err), ILAB_OK);
    assert_int_equal(ilab_session_open(&s, "counting_backend", err, sizeof err, &session),
                     ILAB_INVALID_ARGUMENT);
    print_message("%s\n", err);
    assert_non_null(strstr(err, "configuration for plugin 'counting_backnd': no plugin has that "
                                "name; did you mean 'counting_backend'?"));
    assert_null(session);
    ilab_settings_free(&s);

    const char *names[] = {"torchlike", "vllm_stub", "sglang_stub"};
    assert_string_equal(ilab_nearest_name("torchlik", names, 3), "torchlike");
    assert_string_equal(ilab_nearest_name("vllm-stub", names, 3), "vllm_stub");
    assert_null(ilab_nearest_name("llama", names, 3));
    assert_null(ilab_nearest_name("x", names, 3));
    /* At the limit (a third of the longer name) a name is still suggested,
     * one past it is not. */
    assert_string_equal(ilab_nearest_name("torcxxxke", names, 3), "torchlike");
    assert_null(ilab_nearest_name("torxxxxke", names, 3));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(first_of_a_name_wins),
        cmocka_unit_test(insecure_files_are_not_loaded),
        cmocka_unit_test(unchanged_files_are_not_looked_at_again),
        cmocka_unit_test(only_the_served_plugin_runs_here),
        cmocka_unit_test(names_that_match_no_plugin),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
