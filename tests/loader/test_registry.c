/* Discovery order and ilab_registry_open. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "loader/registry.h"

static size_t index_of(const ilab_plugin_paths *p, const char *suffix)
{
    for (size_t i = 0; i < p->n; i++) {
        size_t n = strlen(p->paths[i]), m = strlen(suffix);
        if (n >= m && !strcmp(p->paths[i] + n - m, suffix))
            return i;
    }
    return (size_t)-1;
}

static void plugin_dir_then_env_sorted_and_deduplicated(void **state)
{
    char tmp[] = "/tmp/ilab_registry_XXXXXX";
    assert_non_null(mkdtemp(tmp));
    char file[600];
    snprintf(file, sizeof file, "%s/zz_other.so", tmp);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fclose(f);
    snprintf(file, sizeof file, "%s/not_a_plugin.txt", tmp);
    f = fopen(file, "w");
    assert_non_null(f);
    fclose(f);

    /* The env repeats the --plugin-dir (with a trailing slash): once only. */
    char env[1400];
    snprintf(env, sizeof env, "%s:%s/:/nonexistent/dir", tmp, LOADER_PLUGIN_DIR);
    setenv("INFERLAB_PLUGIN_PATH", env, 1);
    const char *dirs[] = {LOADER_PLUGIN_DIR};
    ilab_plugin_paths p = {0};
    assert_int_equal(ilab_registry_discover(dirs, 1, &p), 0);
    for (size_t i = 0; i < p.n; i++)
        print_message("%zu %s\n", i, p.paths[i]);
    size_t good = index_of(&p, "/loader_good.so"), abi = index_of(&p, "/loader_abi_major.so");
    size_t other = index_of(&p, "/zz_other.so");
    assert_true(good != (size_t)-1 && abi != (size_t)-1 && other != (size_t)-1);
    assert_true(abi < good);   /* sorted by name within a directory */
    assert_true(good < other); /* --plugin-dir before INFERLAB_PLUGIN_PATH */
    assert_int_equal(index_of(&p, ".txt"), (size_t)-1);
    /* --plugin-dir given: the build tree's folder is not searched. */
    assert_int_equal(index_of(&p, "/vllm_stub.so"), (size_t)-1);
    size_t n_loader = 0;
    for (size_t i = 0; i < p.n; i++)
        n_loader += strstr(p.paths[i], "/loader_good.so") != NULL;
    assert_int_equal(n_loader, 1);
    ilab_plugin_paths_free(&p);

    ilab_plugin_paths d = {0};
    assert_int_equal(ilab_registry_dirs(dirs, 1, &d), 0);
    assert_int_equal(d.n, 3); /* plugin dir, tmp, /nonexistent/dir */
    ilab_plugin_paths_free(&d);

    unlink(file);
    snprintf(file, sizeof file, "%s/zz_other.so", tmp);
    unlink(file);
    rmdir(tmp);
    unsetenv("INFERLAB_PLUGIN_PATH");
}

/* This test binary runs from the build tree, so with no --plugin-dir the
 * build tree's plugins folder is searched. */
static void build_tree_folder_without_plugin_dir(void **state)
{
    unsetenv("INFERLAB_PLUGIN_PATH");
    ilab_plugin_paths d = {0};
    assert_int_equal(ilab_registry_dirs(NULL, 0, &d), 0);
    assert_int_equal(d.n, 1);
    char real[4096];
    assert_non_null(realpath(SHIPPED_PLUGIN_DIR, real));
    assert_string_equal(d.paths[0], real);
    ilab_plugin_paths_free(&d);
}

static void open_by_name(void **state)
{
    const char *dirs[] = {LOADER_PLUGIN_DIR};
    char err[4096];
    ilab_plugin *p = NULL;
    /* Skips the bad plugins (never loads the crashing one: it is not named). */
    assert_int_equal(ilab_registry_open(dirs, 1, "loader_good", err, sizeof err, &p), ILAB_OK);
    assert_string_equal(ilab_plugin_manifest(p)->name, "loader_good");
    ilab_plugin_unload(p);

    p = NULL;
    assert_int_equal(ilab_registry_open(dirs, 1, "loader_abi_major", err, sizeof err, &p),
                     ILAB_UNAVAILABLE);
    assert_null(p);
    print_message("%s\n", err);
    assert_non_null(strstr(err, "no plugin named 'loader_abi_major'"));
    assert_non_null(strstr(err, "plugin ABI 2.0, host ABI 1.0"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(plugin_dir_then_env_sorted_and_deduplicated),
        cmocka_unit_test(build_tree_folder_without_plugin_dir),
        cmocka_unit_test(open_by_name),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
