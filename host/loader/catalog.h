/* The catalog: every plugin file in the search path (registry.h), checked by
 * the trust rule (trust.h), looked inside in a forked child (inspect.h), and
 * named. The first plugin of a name wins; every later one is SHADOWED and
 * names the winner. Building a catalog never runs plugin code in this
 * process, so the serving process only ever dlopens what it serves. */
#ifndef ILAB_HOST_CATALOG_H
#define ILAB_HOST_CATALOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "inspect.h"
#include "manifest.h"
#include "plugin_loader.h"
#include "registry.h"

typedef struct ilab_catalog ilab_catalog;

/* One file. Everything is owned by the catalog and lives as long as it. */
typedef struct ilab_catalog_entry {
    char *path;              /* <folder>/<file>.so as found */
    ilab_dir_origin origin;  /* which kind of folder it was found in */
    char *name;              /* the manifest's name; NULL when it never loaded */
    ilab_manifest *manifest; /* parsed here from the text the child sent; NULL likewise */
    char *manifest_yaml;     /* that text */
    ilab_plugin_state state;
    char *reason;            /* "" when there is nothing to say */
    size_t winner;           /* SHADOWED: index of the entry that has the name */
    char *insecure;          /* the trust rule's complaint ("insecure: ..."); NULL when
                                trusted. Inspected anyway only with allow_insecure */
    ilab_file_id file;       /* the file when it was looked at (zeros: stat failed) */
} ilab_catalog_entry;

typedef struct ilab_catalog_options {
    const char *const *plugin_files; /* --plugin FILE: these files first, before every folder */
    size_t n_files;
    const char *const *plugin_dirs; /* --plugin-dir / plugin_dirs, searched first */
    size_t n_dirs;
    bool allow_insecure;            /* --allow-insecure-plugins: skip the trust rule (dangerous) */
    ilab_inspect_options inspect;   /* probe or not, the user's config, the deadline */
    const ilab_catalog *previous;   /* may be NULL: an earlier scan with the same options,
                                       whose entries for files unchanged since (same path,
                                       inode, size, modification time) are taken over
                                       instead of looked at again in a child; the trust
                                       rule is applied again regardless (serve's reload) */
    ilab_inspect_fn inspect_with;   /* NULL: ilab_inspect_isolated; else each look inside a
                                       file goes through it (with inspect_ctx) */
    void *inspect_ctx;
} ilab_catalog_options;

/* Scan. Errors: an unusable plugin folder (ILAB_INVALID_ARGUMENT, the
 * registry's one message), out of memory. Main thread (forks). */
ilab_status ilab_catalog_scan(const ilab_catalog_options *o, char *err, size_t err_cap,
                              ilab_catalog **out);
void ilab_catalog_free(ilab_catalog *c);

size_t ilab_catalog_size(const ilab_catalog *c);
const ilab_catalog_entry *ilab_catalog_at(const ilab_catalog *c, size_t i);
/* The folders searched, in order (with their origins). */
const ilab_plugin_paths *ilab_catalog_dirs(const ilab_catalog *c);

/* The entry that holds `name` (never a SHADOWED one); NULL when none. */
const ilab_catalog_entry *ilab_catalog_find(const ilab_catalog *c, const char *name);

/* "no plugin named 'torchlik'; did you mean 'torchlike'? (plugins: torchlike,
 * vllm_stub (unavailable); searched: /a /b)". `what` starts it ("backend"). */
void ilab_catalog_describe_unknown(const ilab_catalog *c, const char *what, const char *name,
                                   char *err, size_t err_cap);

/* Configuration must only name plugins that exist (fail closed): the first of
 * `names` with no plugin is ILAB_INVALID_ARGUMENT with the message above. */
ilab_status ilab_catalog_check_names(const ilab_catalog *c, const char *const *names,
                                     size_t n_names, const char *what, char *err, size_t err_cap);

/* Prints one warning line per insecure folder in the search path (even an
 * empty one), per shadowed plugin (both paths) and per plugin loaded despite
 * the trust rule, each prefixed with `prefix`. */
void ilab_catalog_warn(const ilab_catalog *c, const char *prefix, FILE *out);

/* The closest name of `names` to `name` by edit distance, when close enough
 * to be a likely typo (at most a third of the longer name, at least 1); NULL
 * otherwise. */
const char *ilab_nearest_name(const char *name, const char *const *names, size_t n);

#endif
