/* Looking inside a plugin without running its code in this process: load it
 * (and, if asked, probe it) in a forked child with a deadline, and bring back
 * what it said. A child that crashes, hangs or exits early becomes a
 * rejection naming the signal, the deadline and the stage (loading or
 * probing). The parent only parses the manifest text it got back. */
#ifndef ILAB_HOST_INSPECT_H
#define ILAB_HOST_INSPECT_H

#include <stdbool.h>
#include <stddef.h>

#include "inferlab/inferlab.h"

typedef enum ilab_plugin_state {
    ILAB_PLUGIN_LOADED,        /* loads and checks out; not probed */
    ILAB_PLUGIN_AVAILABLE,     /* probed: OK */
    ILAB_PLUGIN_UNAVAILABLE,   /* probed: UNAVAILABLE with the plugin's reason */
    ILAB_PLUGIN_REJECTED,      /* insecure, refused by the loader, crashed, hung, bad probe */
    ILAB_PLUGIN_MISCONFIGURED, /* the user's settings for it do not fit its manifest */
    ILAB_PLUGIN_SHADOWED,      /* an earlier plugin has the same name */
} ilab_plugin_state;

/* "available", "unavailable", "rejected", "misconfigured", "shadowed", "loaded". */
const char *ilab_plugin_state_name(ilab_plugin_state s);

/* The user's entries for plugin `name` (no defaults, not validated); called
 * in the child, after the plugin's manifest name is known. */
typedef const ilab_config_entry_t *(*ilab_config_lookup_fn)(const void *user, const char *name,
                                                             size_t *n);

typedef struct ilab_inspect_options {
    bool probe;                   /* also validate the config and call probe() */
    ilab_config_lookup_fn config; /* may be NULL: no user entries */
    const void *config_user;
    int deadline_ms;              /* 0: INFERLAB_PROBE_TIMEOUT seconds, else 5 s */
} ilab_inspect_options;

typedef struct ilab_inspection {
    ilab_plugin_state state;  /* never SHADOWED */
    char reason[1024];        /* names the file; "" when there is nothing to say */
    char *manifest_yaml;      /* owned (free()); NULL when it did not load */
} ilab_inspection;

/* Fills `out` (always: failures are REJECTED rows). Main thread: forks.
 * The child loads the plugin, which is only safe when the process forking
 * has one thread: a lock another thread held at the fork (the dynamic
 * loader's, the allocator's) stays held in the child, which then hangs. A
 * process with threads inspects through a process forked before they
 * started (ilab_inspect_fn; `inferlab serve` does, serve_inspector.c). */
void ilab_inspect_isolated(const char *path, const ilab_inspect_options *o, ilab_inspection *out);

/* Something that fills an inspection as ilab_inspect_isolated does. */
typedef void (*ilab_inspect_fn)(void *ctx, const char *path, const ilab_inspect_options *o,
                                ilab_inspection *out);
void ilab_inspection_free(ilab_inspection *i);

#endif
