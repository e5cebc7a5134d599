/* Plugin folders and files in search order (registry.h). */
#include "registry.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef ILAB_BUILD_TREE_DIR
#error "ILAB_BUILD_TREE_DIR must be defined by the build (CMAKE_BINARY_DIR)"
#endif
#ifndef ILAB_BUILD_PLUGIN_DIR
#error "ILAB_BUILD_PLUGIN_DIR must be defined by the build"
#endif
#ifndef ILAB_INSTALL_PLUGIN_REL
#error "ILAB_INSTALL_PLUGIN_REL (plugin folder relative to the bin folder) must be defined"
#endif

static int push(ilab_plugin_paths *list, const char *s, ilab_dir_origin origin)
{
    char **grown = realloc(list->paths, (list->n + 1) * sizeof *grown);
    if (!grown)
        return -1;
    list->paths = grown;
    ilab_dir_origin *o = realloc(list->origins, (list->n + 1) * sizeof *o);
    if (!o)
        return -1;
    list->origins = o;
    if (!(list->paths[list->n] = strdup(s)))
        return -1;
    list->origins[list->n] = origin;
    list->n++;
    return 0;
}

static int contains(const ilab_plugin_paths *list, const char *s)
{
    for (size_t i = 0; i < list->n; i++)
        if (!strcmp(list->paths[i], s))
            return 1;
    return 0;
}

const char *ilab_dir_origin_name(ilab_dir_origin o)
{
    switch (o) {
    case ILAB_DIR_GIVEN: return "from --plugin-dir or plugin_dirs";
    case ILAB_DIR_BUILTIN: return "built-in";
    case ILAB_DIR_ENV: return "from INFERLAB_PLUGIN_PATH";
    }
    return "?";
}

int ilab_registry_dir_error(const char *dir, ilab_dir_origin origin, char *err, size_t err_cap)
{
    struct stat st;
    const char *why = NULL;
    if (stat(dir, &st) != 0)
        why = strerror(errno);
    else if (!S_ISDIR(st.st_mode))
        why = "not a directory";
    else if (access(dir, R_OK | X_OK) != 0)
        why = strerror(errno);
    if (!why)
        return 0;
    if (err && err_cap)
        snprintf(err, err_cap, "plugin folder '%s' (%s): %s", dir, ilab_dir_origin_name(origin),
                 why);
    return -1;
}

/* "Run from the build tree": /proc/self/exe lives under CMAKE_BINARY_DIR. */
static int running_from_build_tree(const char *exe)
{
    char tree[PATH_MAX];
    if (!realpath(ILAB_BUILD_TREE_DIR, tree))
        return 0;
    size_t len = strlen(tree);
    return !strncmp(exe, tree, len) && exe[len] == '/';
}

/* The built-in folder: the build tree's, or <exe's folder>/<rel>. */
static int builtin_dir(char *out, size_t cap)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return -1;
    exe[n] = '\0';
    if (running_from_build_tree(exe)) {
        snprintf(out, cap, "%s", ILAB_BUILD_PLUGIN_DIR);
        return 0;
    }
    char *slash = strrchr(exe, '/');
    if (!slash)
        return -1;
    *slash = '\0';
    int n_out = snprintf(out, cap, "%s/%s", exe, ILAB_INSTALL_PLUGIN_REL);
    return n_out > 0 && (size_t)n_out < cap ? 0 : -1;
}

/* Adds `dir` (resolved) unless already there. A missing one is an error for
 * the operator's folders, skipped for the built-in one. */
static ilab_status push_dir(ilab_plugin_paths *dirs, const char *dir, ilab_dir_origin origin,
                            char *err, size_t err_cap)
{
    if (!*dir)
        return ILAB_OK;
    if (ilab_registry_dir_error(dir, origin, err, err_cap))
        return origin == ILAB_DIR_BUILTIN ? ILAB_OK : ILAB_INVALID_ARGUMENT;
    char real[PATH_MAX];
    const char *key = realpath(dir, real) ? real : dir;
    if (contains(dirs, key))
        return ILAB_OK;
    return push(dirs, key, origin) ? ILAB_OUT_OF_MEMORY : ILAB_OK;
}

ilab_status ilab_registry_dirs(const char *const *given, size_t n_given, bool builtin_and_env,
                               char *err, size_t err_cap, ilab_plugin_paths *out)
{
    char scratch[1];
    if (!err || !err_cap) {
        err = scratch;
        err_cap = sizeof scratch;
    }
    err[0] = '\0';
    ilab_plugin_paths dirs = {0};
    ilab_status st = ILAB_OK;
    for (size_t i = 0; st == ILAB_OK && i < n_given; i++)
        st = push_dir(&dirs, given[i], ILAB_DIR_GIVEN, err, err_cap);
    char builtin[PATH_MAX];
    if (st == ILAB_OK && builtin_and_env && builtin_dir(builtin, sizeof builtin) == 0)
        st = push_dir(&dirs, builtin, ILAB_DIR_BUILTIN, err, err_cap);
    const char *env = builtin_and_env ? getenv("INFERLAB_PLUGIN_PATH") : NULL;
    if (st == ILAB_OK && env) {
        char *copy = strdup(env), *save = NULL;
        if (!copy)
            st = ILAB_OUT_OF_MEMORY;
        for (char *d = copy ? strtok_r(copy, ":", &save) : NULL; d && st == ILAB_OK;
             d = strtok_r(NULL, ":", &save))
            st = push_dir(&dirs, d, ILAB_DIR_ENV, err, err_cap);
        free(copy);
    }
    if (st == ILAB_OK) {
        err[0] = '\0'; /* a skipped built-in folder is not worth a message */
        *out = dirs;
        return ILAB_OK;
    }
    if (st == ILAB_OUT_OF_MEMORY)
        snprintf(err, err_cap, "out of memory listing the plugin folders");
    ilab_plugin_paths_free(&dirs);
    return st;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int ends_with_so(const char *name)
{
    size_t n = strlen(name);
    return n > 3 && !strcmp(name + n - 3, ".so");
}

/* Appends dir's *.so files, sorted by file name. */
static int scan_dir(const char *dir, ilab_dir_origin origin, ilab_plugin_paths *out)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0; /* checked just before; vanished since */
    ilab_plugin_paths names = {0};
    int rc = 0;
    for (struct dirent *ent; (ent = readdir(d));)
        if (ends_with_so(ent->d_name) && push(&names, ent->d_name, origin)) {
            rc = -1;
            break;
        }
    closedir(d);
    if (names.n)
        qsort(names.paths, names.n, sizeof *names.paths, by_name);
    for (size_t i = 0; rc == 0 && i < names.n; i++) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", dir, names.paths[i]);
        if (!contains(out, path) && push(out, path, origin))
            rc = -1;
    }
    ilab_plugin_paths_free(&names);
    return rc;
}

ilab_status ilab_registry_discover(const char *const *given, size_t n_given, bool builtin_and_env,
                                   char *err, size_t err_cap, ilab_plugin_paths *out)
{
    ilab_plugin_paths dirs = {0}, files = {0};
    ilab_status st = ilab_registry_dirs(given, n_given, builtin_and_env, err, err_cap, &dirs);
    if (st != ILAB_OK)
        return st;
    for (size_t i = 0; i < dirs.n; i++)
        if (scan_dir(dirs.paths[i], dirs.origins[i], &files)) {
            ilab_plugin_paths_free(&dirs);
            ilab_plugin_paths_free(&files);
            if (err && err_cap)
                snprintf(err, err_cap, "out of memory listing the plugin files");
            return ILAB_OUT_OF_MEMORY;
        }
    ilab_plugin_paths_free(&dirs);
    *out = files;
    return ILAB_OK;
}

void ilab_plugin_paths_free(ilab_plugin_paths *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n; i++)
        free(p->paths[i]);
    free(p->paths);
    free(p->origins);
    p->paths = NULL;
    p->origins = NULL;
    p->n = 0;
}
