/* Plugin folders and the .so files in them, in search order. Nothing here
 * opens a .so: see inspect.h (look inside, in a child) and catalog.h (names,
 * trust, shadowing). */
#ifndef ILAB_HOST_REGISTRY_H
#define ILAB_HOST_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>

#include "inferlab/inferlab.h"

/* Where a folder in the search path came from. */
typedef enum ilab_dir_origin {
    ILAB_DIR_GIVEN,   /* --plugin-dir or the settings' plugin_dirs */
    ILAB_DIR_BUILTIN, /* the build tree's plugins/, or <prefix>/lib/inferlab/plugins */
    ILAB_DIR_ENV,     /* INFERLAB_PLUGIN_PATH */
} ilab_dir_origin;

/* A list of owned strings (folders or files) with each one's origin. */
typedef struct ilab_plugin_paths {
    char **paths; /* owned */
    ilab_dir_origin *origins;
    size_t n;
} ilab_plugin_paths;

/* The folders searched, in this order, duplicates removed (symlinked or
 * relative spellings of one folder count once):
 *   1. each given folder (--plugin-dir, then the settings' plugin_dirs);
 *   2. the built-in folder: the build tree's plugins/ when the executable
 *      runs from the build tree, else <prefix>/lib/inferlab/plugins found
 *      relative to the executable's own location (<prefix>/bin/..), so any
 *      install prefix works;
 *   3. each entry of INFERLAB_PLUGIN_PATH (colon-separated).
 * With `builtin_and_env` false only 1 is searched (the harness given folders).
 * A given or INFERLAB_PLUGIN_PATH folder that does not exist or cannot be
 * read is an error (ILAB_INVALID_ARGUMENT, the message from
 * ilab_registry_dir_error); a missing built-in folder is skipped.
 * ILAB_OUT_OF_MEMORY otherwise. */
ilab_status ilab_registry_dirs(const char *const *given, size_t n_given, bool builtin_and_env,
                               char *err, size_t err_cap, ilab_plugin_paths *out);

/* The *.so files of those folders: folder by folder, sorted by file name
 * (strcmp) within one; each file once. The origin is its folder's. */
ilab_status ilab_registry_discover(const char *const *given, size_t n_given, bool builtin_and_env,
                                   char *err, size_t err_cap, ilab_plugin_paths *out);

/* The one message for an unusable plugin folder, the same in every command
 * and the harness: "plugin folder '/x' (from --plugin-dir or plugin_dirs):
 * No such file or directory". 0 when `dir` is a readable folder. */
int ilab_registry_dir_error(const char *dir, ilab_dir_origin origin, char *err, size_t err_cap);

const char *ilab_dir_origin_name(ilab_dir_origin o); /* "from --plugin-dir or plugin_dirs", "built-in", ... */

void ilab_plugin_paths_free(ilab_plugin_paths *p);

#endif
