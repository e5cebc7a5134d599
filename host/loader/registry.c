/* Plugin discovery (order documented in registry.h). */
#include "registry.h"

#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef ILAB_BUILD_TREE_DIR
#error "ILAB_BUILD_TREE_DIR must be defined by the build (CMAKE_BINARY_DIR)"
#endif
#ifndef ILAB_BUILD_PLUGIN_DIR
#error "ILAB_BUILD_PLUGIN_DIR must be defined by the build"
#endif
#ifndef ILAB_INSTALL_PLUGIN_DIR
#error "ILAB_INSTALL_PLUGIN_DIR must be defined by the build"
#endif

static int push(ilab_plugin_paths *list, const char *s)
{
    char **grown = realloc(list->paths, (list->n + 1) * sizeof *grown);
    if (!grown)
        return -1;
    list->paths = grown;
    if (!(list->paths[list->n] = strdup(s)))
        return -1;
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

/* Adds `dir` unless an entry already names the same directory; symlinked
 * or relative spellings of one directory count as duplicates. */
static int push_dir(ilab_plugin_paths *dirs, const char *dir)
{
    if (!*dir)
        return 0;
    char real[PATH_MAX];
    const char *key = realpath(dir, real) ? real : dir;
    if (contains(dirs, key))
        return 0;
    return push(dirs, key);
}

/* "Run from the build tree": /proc/self/exe lives under CMAKE_BINARY_DIR. */
static int running_from_build_tree(void)
{
    char exe[PATH_MAX], tree[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0 || !realpath(ILAB_BUILD_TREE_DIR, tree))
        return 0;
    exe[n] = '\0';
    size_t len = strlen(tree);
    return !strncmp(exe, tree, len) && exe[len] == '/';
}

int ilab_registry_dirs(const char *const *plugin_dirs, size_t n_dirs, ilab_plugin_paths *out)
{
    ilab_plugin_paths dirs = {0};
    for (size_t i = 0; i < n_dirs; i++)
        if (push_dir(&dirs, plugin_dirs[i]))
            goto oom;
    const char *env = getenv("INFERLAB_PLUGIN_PATH");
    if (env) {
        char *copy = strdup(env), *save = NULL;
        if (!copy)
            goto oom;
        for (char *d = strtok_r(copy, ":", &save); d; d = strtok_r(NULL, ":", &save))
            if (push_dir(&dirs, d)) {
                free(copy);
                goto oom;
            }
        free(copy);
    }
    if (n_dirs == 0) {
        if (push_dir(&dirs, running_from_build_tree() ? ILAB_BUILD_PLUGIN_DIR
                                                      : ILAB_INSTALL_PLUGIN_DIR))
            goto oom;
    }
    *out = dirs;
    return 0;
oom:
    ilab_plugin_paths_free(&dirs);
    return -1;
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
static int scan_dir(const char *dir, ilab_plugin_paths *out)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    ilab_plugin_paths names = {0};
    int rc = 0;
    for (struct dirent *ent; (ent = readdir(d));)
        if (ends_with_so(ent->d_name) && push(&names, ent->d_name)) {
            rc = -1;
            break;
        }
    closedir(d);
    if (names.n)
        qsort(names.paths, names.n, sizeof *names.paths, by_name);
    for (size_t i = 0; rc == 0 && i < names.n; i++) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", dir, names.paths[i]);
        if (!contains(out, path) && push(out, path))
            rc = -1;
    }
    ilab_plugin_paths_free(&names);
    return rc;
}

int ilab_registry_discover(const char *const *plugin_dirs, size_t n_dirs, ilab_plugin_paths *out)
{
    ilab_plugin_paths dirs = {0}, files = {0};
    if (ilab_registry_dirs(plugin_dirs, n_dirs, &dirs))
        return -1;
    for (size_t i = 0; i < dirs.n; i++)
        if (scan_dir(dirs.paths[i], &files)) {
            ilab_plugin_paths_free(&dirs);
            ilab_plugin_paths_free(&files);
            return -1;
        }
    ilab_plugin_paths_free(&dirs);
    *out = files;
    return 0;
}

void ilab_plugin_paths_free(ilab_plugin_paths *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n; i++)
        free(p->paths[i]);
    free(p->paths);
    p->paths = NULL;
    p->n = 0;
}

static void append(char *err, size_t err_cap, const char *text)
{
    if (err && err_cap)
        strncat(err, text, err_cap - strlen(err) - 1);
}

static int named(const char *path, const char *name)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(name);
    return !strncmp(base, name, n) && !strcmp(base + n, ".so");
}

ilab_status ilab_registry_open(const char *const *plugin_dirs, size_t n_dirs, const char *name,
                               char *err, size_t err_cap, ilab_plugin **out)
{
    if (err && err_cap)
        err[0] = '\0';
    if (!name || !out)
        return ILAB_INVALID_ARGUMENT;
    ilab_plugin_paths files = {0};
    if (ilab_registry_discover(plugin_dirs, n_dirs, &files))
        return ILAB_OUT_OF_MEMORY;

    char rejected[2048] = "";
    ilab_status found = ILAB_UNAVAILABLE;
    /* Pass 0: files called <name>.so; pass 1: every other file. */
    for (int pass = 0; pass < 2 && found != ILAB_OK; pass++)
        for (size_t i = 0; i < files.n && found != ILAB_OK; i++) {
            if (named(files.paths[i], name) != (pass == 0))
                continue;
            char why[1024];
            ilab_plugin *p = NULL;
            if (ilab_plugin_load(files.paths[i], why, sizeof why, &p) != ILAB_OK) {
                append(rejected, sizeof rejected, "; rejected ");
                append(rejected, sizeof rejected, why);
                continue;
            }
            if (!strcmp(ilab_plugin_manifest(p)->name, name)) {
                *out = p;
                found = ILAB_OK;
            } else {
                ilab_plugin_unload(p);
            }
        }
    ilab_plugin_paths_free(&files);
    if (found == ILAB_OK)
        return ILAB_OK;

    ilab_plugin_paths dirs = {0};
    if (err && err_cap) {
        snprintf(err, err_cap, "no plugin named '%s' (searched:", name);
        if (ilab_registry_dirs(plugin_dirs, n_dirs, &dirs) == 0)
            for (size_t i = 0; i < dirs.n; i++) {
                append(err, err_cap, " ");
                append(err, err_cap, dirs.paths[i]);
            }
        append(err, err_cap, dirs.n ? ")" : " nothing)");
        append(err, err_cap, rejected);
    }
    ilab_plugin_paths_free(&dirs);
    return ILAB_UNAVAILABLE;
}
