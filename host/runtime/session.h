/* A session: settings -> discover -> load the named plugin -> validate its
 * configuration -> probe -> create an instance. What `inferlab run`,
 * `tokenize` and `serve` start from. */
#ifndef ILAB_HOST_SESSION_H
#define ILAB_HOST_SESSION_H

#include "../config/settings.h"
#include "../loader/catalog.h"
#include "../isolation/proxy.h"
#include "../loader/plugin_loader.h"

typedef struct ilab_session ilab_session;

/* The catalog of the settings' search path (no probes), with its warnings
 * (shadowed plugins, insecure ones allowed) printed to stderr, and the
 * settings' per-plugin sections checked against its names: a section for a
 * plugin nobody has is ILAB_INVALID_ARGUMENT naming the known ones and the
 * closest. An unusable plugin folder is ILAB_INVALID_ARGUMENT too. Main
 * thread (forks one child per plugin file). */
ilab_status ilab_session_scan(const ilab_settings *settings, char *err, size_t err_cap,
                              ilab_catalog **out);

/* ilab_session_scan, then ilab_session_open_from. */
ilab_status ilab_session_open(const ilab_settings *settings, const char *backend,
                              char *err, size_t err_cap, ilab_session **out);

/* Load (in this process) the plugin of `catalog` named `backend` (NULL =
 * settings' default backend, "torchlike" unless set), validate its settings,
 * probe, create. ILAB_INVALID_ARGUMENT: a wrong name (the message suggests
 * the closest and lists the plugins), a rejected plugin, or configuration
 * the manifest refuses -- all usage errors (the CLI exits 2).
 * ILAB_UNAVAILABLE: the probe's reason is in `err` (the CLI exits 3). The
 * catalog may be freed afterwards. */
ilab_status ilab_session_open_from(const ilab_catalog *catalog, const ilab_settings *settings,
                                   const char *backend, char *err, size_t err_cap,
                                   ilab_session **out);
/* ilab_session_open_from, with the plugin run in worker processes behind a
 * proxy (host/isolation/proxy.h): its crashes and hangs fail its own calls,
 * never this process. `options` NULL: the proxy's defaults. */
ilab_status ilab_session_open_isolated_from(const ilab_catalog *catalog,
                                            const ilab_settings *settings, const char *backend,
                                            const ilab_proxy_options *options, char *err,
                                            size_t err_cap, ilab_session **out);
void ilab_session_close(ilab_session *s);

const ilab_plugin *ilab_session_plugin(const ilab_session *s);
ilab_backend_t *ilab_session_backend(const ilab_session *s);
const ilab_backend_api_t *ilab_session_api(const ilab_session *s);

#endif
