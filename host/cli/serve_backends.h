/* The backends `inferlab serve` serves, and reloading them from the plugin
 * folders (SIGHUP, --watch). Every plugin library is loaded, probed and
 * closed on the calling thread (the main one), which also forks the
 * catalog's inspection children: every function here is Main thread.
 * The settings are borrowed and must outlive the set. ADR 0015. */
#ifndef ILAB_CLI_SERVE_BACKENDS_H
#define ILAB_CLI_SERVE_BACKENDS_H

#include <stdbool.h>
#include <stddef.h>

#include "config/settings.h"
#include "serve_inspector.h"
#include "server/server.h"

typedef struct ilab_serve_set ilab_serve_set;

/* A model served by name (serve --model NAME=FILE): an instance of
 * `plugin` created with `settings`, which set that plugin's model file.
 * Every string and the settings are borrowed and must outlive the set. */
typedef struct ilab_serve_model {
    const char *name;
    const char *plugin;
    const ilab_settings *settings;
} ilab_serve_model;

/* Open the backends to serve: the `n_names` named ones (--backend,
 * repeated) or, with none, every plugin of the folders. With exactly one
 * name it behaves as serve always did: a wrong name, a rejected plugin or
 * configuration its manifest refuses is exit code 2; an unavailable one is
 * served as unavailable; an engine that does not start is exit 1. With
 * several, a wrong name or a rejected named plugin is exit 2 too, and any
 * other failure only leaves that backend not serving, reported on stderr
 * with the reason. Returns -1 and fills *out, *bes (to hand to
 * ilab_server_start, which takes the versions; the array is the caller's
 * to free) and *n_bes; else the exit code, the error printed. `names` are
 * copied. Every look inside a plugin file goes through `inspector`
 * (borrowed; must outlive the set), as forking this process once it has
 * threads is not safe. With `n_models`, the models are served instead
 * of `names` (each named: a wrong plugin or a rejected one is exit 2, a
 * model that does not start only leaves it not serving); each is its own
 * instance, in its own worker process when isolated, and its own engine. */
int ilab_serve_set_open(const ilab_settings *settings, const char *const *names, size_t n_names,
                        const ilab_serve_model *models, size_t n_models,
                        ilab_inspector *inspector, ilab_serve_set **out,
                        ilab_server_backend **bes, size_t *n_bes);

/* The backend requests naming no model go to: the single one, else the
 * settings' default_backend when it is served, else NULL. Borrowed from
 * the set. */
const char *ilab_serve_set_default(const ilab_serve_set *set);

/* The plugin files of the last scan (start or reload) as a JSON array
 * (catalog_json.h: rows with their SHA-256), for ilab_server_set_plugins;
 * NULL when out of memory. Borrowed from the set until the next reload. */
const char *ilab_serve_set_plugins_json(const ilab_serve_set *set);

/* The folders searched, for --watch (borrowed from the set). */
size_t ilab_serve_set_dirs(const ilab_serve_set *set, const char *const **dirs);

/* Rescan the folders and apply what changed to `server`: a new plugin
 * starts serving, a removed one stops, a replaced file is checked (trust,
 * ABI, manifest, probe: in a child, then again here while loading) and
 * replaces the version serving only when every check passes -- otherwise
 * it is refused with the reason (stderr, /health, /metrics) and the old
 * version goes on serving. A file written into in place (same inode) is
 * refused too: the library mapped from it may already be damaged, and it
 * cannot be loaded beside itself. Returns how many backends changed. */
size_t ilab_serve_set_reload(ilab_serve_set *set, ilab_server *server);

/* Notice backends whose worker process died (isolated serving,
 * host/isolation): each stops serving ("restarting" in /health) and is
 * restarted after a back-off, or left "failed" when it keeps dying soon
 * after each start. Runs the restarts that are due. Returns when the next
 * one is due (now_ms clock), 0 when none is; call it again then, and at
 * least every few hundred milliseconds while backends run in workers. */
double ilab_serve_set_check_workers(ilab_serve_set *set, ilab_server *server);

void ilab_serve_set_free(ilab_serve_set *set);

#endif
