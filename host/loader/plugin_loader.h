/* Loading one plugin: dlopen(RTLD_NOW | RTLD_LOCAL), bootstrap lookup,
 * host-side ABI negotiation, manifest parse + schema + cross-check with the
 * backend table. Nothing here runs plugin code except reading its const data
 * (the constructor of the .so does run at dlopen: callers that must survive
 * a crashing plugin load it in a child process). */
#ifndef ILAB_HOST_PLUGIN_LOADER_H
#define ILAB_HOST_PLUGIN_LOADER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "inferlab/inferlab.h"
#include "manifest.h"

typedef struct ilab_plugin ilab_plugin;

/* Load the plugin at `path`, a file path (a name without a slash is the
 * file in the current folder, not a library for dlopen() to search for). On refusal returns a non-OK status
 * (ILAB_IO: dlopen failed, with dlerror(); ILAB_ABI_MISMATCH: versions or
 * struct sizes, naming both versions; ILAB_INVALID_ARGUMENT: bootstrap or
 * manifest problems) and writes a message that names the file into `err`. */
ilab_status ilab_plugin_load(const char *path, char *err, size_t err_cap,
                             ilab_plugin **out);

/* What tells one file from another at the same path: a file replaced (mv,
 * install) has a new inode; one written into in place keeps its inode but
 * not its size or modification time. */
typedef struct ilab_file_id {
    dev_t dev;
    ino_t ino;
    off_t size;
    int64_t mtime_ns;
} ilab_file_id;

/* stat() `path` into `out`; false (errno set) when it cannot be. Any thread. */
bool ilab_file_id_of(const char *path, ilab_file_id *out);
bool ilab_file_id_equal(const ilab_file_id *a, const ilab_file_id *b);

/* ilab_plugin_load, but always a library of its own: the file is opened
 * and dlopen'ed as /proc/self/fd/N (that descriptor stays open while the
 * plugin is loaded, so N names no other library meanwhile). dlopen() hands
 * back an already loaded library when the name given matches, so a new
 * file at the path of a version still serving would otherwise come back as
 * the old version. Messages name `path`. The identity of the file actually
 * loaded is ilab_plugin_file_id's. Runs the library's constructors: the
 * thread that forks inspection children must be the one calling it. */
ilab_status ilab_plugin_load_fresh(const char *path, char *err, size_t err_cap,
                                   ilab_plugin **out);

/* ilab_plugin_load of a private copy of `path`'s bytes (a memory file): the
 * file on disk may then be overwritten, truncated or deleted without the
 * loaded code changing (a backend worker's load, docs/adr/0020). */
ilab_status ilab_plugin_load_private(const char *path, char *err, size_t err_cap,
                                     ilab_plugin **out);

/* A plugin that runs somewhere else (a worker process): its bootstrap entry
 * as the other side read it (strings copied) and `forward`, the table that
 * carries calls there, cut to the plugin's own `table_size` so that the
 * members past it are the same shims as in-process. Every check of
 * ilab_plugin_check_entry is made again here. `remote_data` becomes the
 * host_data of ilab_plugin_host(). */
ilab_status ilab_plugin_remote(const char *path, const ilab_plugin_entry_t *entry,
                               const ilab_backend_api_t *forward, uint32_t table_size,
                               void *remote_data, char *err, size_t err_cap, ilab_plugin **out);
/* Called with remote_data when the plugin is unloaded. */
void ilab_plugin_set_remote_free(ilab_plugin *p, void (*remote_free)(void *data));

/* The host table to hand this plugin's probe() and create(): the host
 * services (ilab_host_services()), with a remote plugin's host_data. Lives
 * as long as the plugin. */
const ilab_host_t *ilab_plugin_host(const ilab_plugin *p);

/* The file a plugin was loaded from (zeros for ilab_plugin_load's).
 * Borrowed from the plugin; any thread. */
const ilab_file_id *ilab_plugin_file_id(const ilab_plugin *p);

/* Every check ilab_plugin_load() makes on the bootstrap entry it found at
 * `path` (named in messages): ABI negotiation, manifest parse + schema, the
 * cross-check of manifest against entry and backend table. Runs no plugin
 * code. On success *manifest is the parsed manifest, owned by the caller. */
ilab_status ilab_plugin_check_entry(const char *path, const ilab_plugin_entry_t *entry,
                                    char *err, size_t err_cap, ilab_manifest **manifest);

/* dlclose and free. NULL is a no-op. */
void ilab_plugin_unload(ilab_plugin *p);

const char *ilab_plugin_path(const ilab_plugin *p);
const ilab_plugin_entry_t *ilab_plugin_entry_of(const ilab_plugin *p);
const ilab_manifest *ilab_plugin_manifest(const ilab_plugin *p);

/* The backend table, with members past the plugin's struct_size (older
 * minor) replaced by host shims that return ILAB_UNSUPPORTED — so callers
 * may call any member. */
const ilab_backend_api_t *ilab_plugin_api(const ilab_plugin *p);

/* The host services table handed to plugins (log to stderr at WARN and up,
 * or at INFO with INFERLAB_LOG=info; CLOCK_MONOTONIC). Static; never NULL. */
const ilab_host_t *ilab_host_services(void);

/* Build the config array for probe()/create(): `n_user` user entries (already
 * validated with ilab_config_validate) merged with the manifest's defaults.
 * The returned array and its strings are owned by the caller:
 * ilab_config_entries_free(). */
ilab_status ilab_config_validate(const ilab_manifest *m,
                                 const ilab_config_entry_t *user, size_t n_user,
                                 char *err, size_t err_cap);
ilab_status ilab_config_with_defaults(const ilab_manifest *m,
                                      const ilab_config_entry_t *user, size_t n_user,
                                      ilab_config_entry_t **out, size_t *n_out);
void ilab_config_entries_free(ilab_config_entry_t *entries, size_t n);

#endif
