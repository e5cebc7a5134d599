/* Plugin discovery: which .so files, in which order. */
#ifndef ILAB_HOST_REGISTRY_H
#define ILAB_HOST_REGISTRY_H

#include <stddef.h>

#include "plugin_loader.h"

/* Directories searched, in this order, duplicates removed:
 *   1. each `--plugin-dir` given (in order),
 *   2. each entry of INFERLAB_PLUGIN_PATH (colon-separated),
 *   3. the build tree's plugins folder, when the executable runs from the
 *      build tree (ILAB_BUILD_PLUGIN_DIR, compiled in),
 *   4. <prefix>/lib/inferlab/plugins when installed (ILAB_INSTALL_PLUGIN_DIR),
 *      i.e. when the executable does not run from the build tree.
 * When `--plugin-dir` is given, 3 and 4 are not searched.
 * Within a directory, files matching *.so sorted by name (strcmp).
 * Directories that do not exist are skipped. */
typedef struct ilab_plugin_paths {
    char **paths; /* owned */
    size_t n;
} ilab_plugin_paths;

/* The .so files, in search order. Returns 0, or -1 when out of memory. */
int ilab_registry_discover(const char *const *plugin_dirs, size_t n_dirs,
                           ilab_plugin_paths *out);
void ilab_plugin_paths_free(ilab_plugin_paths *p);

/* The directories that would be searched (existing or not), in order, for
 * messages like "no plugin named X (searched: ...)". Returns 0 or -1. */
int ilab_registry_dirs(const char *const *plugin_dirs, size_t n_dirs,
                       ilab_plugin_paths *out);

/* Convenience for the CLI: discover, then load the first plugin whose
 * manifest name equals `name`. Files named `<name>.so` are tried first, so
 * opening one backend does not run the constructors of all the others.
 * Plugins that fail to load are skipped, and their reasons appended to `err`
 * if none matches (ILAB_UNAVAILABLE: "no plugin named ..."). Runs plugin
 * constructors in this process: use a child process to survive bad ones. */
ilab_status ilab_registry_open(const char *const *plugin_dirs, size_t n_dirs,
                               const char *name, char *err, size_t err_cap,
                               ilab_plugin **out);

#endif
