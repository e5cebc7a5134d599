/* A plugin run in worker processes: the host-side proxy.
 *
 * ilab_proxy_load() gives an ilab_plugin like ilab_plugin_load()'s, whose
 * backend table forwards every call to a worker process (worker.h) instead
 * of running plugin code in the host: probe() in a short-lived worker, and
 * each create() starts a worker of its own that holds that one instance
 * until destroy(). The engine, the harness and the server use it as they use
 * any backend (docs/adr/0020-backend-worker-processes.md).
 *
 * What the proxy adds to the contract:
 *  - A worker that dies (any signal, exit() inside the plugin) ends every
 *    call in flight on its instance with ILAB_UNAVAILABLE and a message
 *    naming the plugin and the signal or exit status; generate() emits that
 *    ERROR event. Every later call on the instance answers the same; only
 *    destroy() is left to do. The host process is untouched.
 *  - A call that has not answered within `call_timeout_s` (generate(): no
 *    event for that long) kills its worker, with the same outcome.
 *  - The worker runs a private copy of the plugin's file, taken when it
 *    starts: the file may be overwritten, truncated or deleted meanwhile.
 *
 * The process that calls ilab_proxy_load must start its main() with the
 * ilab_worker_requested() hook (worker.h): workers are that program. */
#ifndef ILAB_HOST_ISOLATION_PROXY_H
#define ILAB_HOST_ISOLATION_PROXY_H

#include <stdbool.h>
#include <stddef.h>

#include "../loader/plugin_loader.h"

typedef struct ilab_proxy_options {
    double call_timeout_s; /* > 0: a call that takes longer kills its worker */
} ilab_proxy_options;

#define ILAB_PROXY_DEFAULT_CALL_TIMEOUT_S 60.0

/* Start a worker that loads `path` (every check ilab_plugin_load makes, in
 * the worker), and return the proxy plugin built from what it found. The
 * refusal messages are the loader's, or say why the worker could not start
 * or died while loading. `options` NULL: the defaults. Call
 * ilab_plugin_host(*out) for the host table to hand its probe()/create(). */
ilab_status ilab_proxy_load(const char *path, const ilab_proxy_options *options, char *err,
                            size_t err_cap, ilab_plugin **out);

/* Whether the instance `backend` of `plugin` has lost its worker (it died
 * or was killed): its calls all fail from now on, and `why` (cap bytes)
 * says what happened. false for a live instance, and for any plugin that
 * is not a proxy's (it runs in this process). Any thread. */
bool ilab_proxy_instance_dead(const ilab_plugin *plugin, const ilab_backend_t *backend,
                              char *why, size_t cap);

/* Kill every worker that has a call in flight (SIGKILL): its calls end at
 * once, failing with a message that ends in `why`. For a host that must
 * stop now (the end of the shutdown grace period): a hung backend would
 * otherwise hold its caller until the call deadline. Idle workers are left
 * to end normally. Returns how many were killed. Any thread. */
int ilab_proxy_kill_busy(const char *why);

#endif
