/* `inferlab serve`'s inspector: a process forked at start-up, while serve
 * still has one thread, that does every look inside a plugin file for it
 * (ilab_inspect_isolated, which forks again, from this one-thread process).
 * By the time serve reloads it has threads -- the event loop, each
 * engine's scheduler -- and a child forked from it would inherit whatever
 * lock one of them held (the dynamic loader's, the allocator's) and hang
 * loading the plugin. ADR 0015. Main thread. */
#ifndef ILAB_CLI_SERVE_INSPECTOR_H
#define ILAB_CLI_SERVE_INSPECTOR_H

#include "config/settings.h"
#include "loader/inspect.h"

typedef struct ilab_inspector ilab_inspector;

/* Fork the inspector. Call it before any thread starts. Its probes use the
 * plugin settings of `settings` as they are now (copied by the fork). */
ilab_status ilab_inspector_start(const ilab_settings *settings, char *err, size_t err_cap,
                                 ilab_inspector **out);

/* An ilab_inspect_fn (ctx: the inspector): the inspection done in the
 * inspector process, with o->probe and o->deadline_ms (the configuration
 * is the inspector's own copy of the settings). A dead or silent inspector
 * makes a REJECTED row saying so. */
void ilab_inspector_inspect(void *ctx, const char *path, const ilab_inspect_options *o,
                            ilab_inspection *out);

/* Close the inspector and wait for it. NULL is a no-op. */
void ilab_inspector_stop(ilab_inspector *in);

#endif
