/* A session: settings -> discover -> load the named plugin -> validate its
 * configuration -> probe -> create an instance. What `inferlab run`,
 * `tokenize` and `serve` start from. */
#ifndef ILAB_HOST_SESSION_H
#define ILAB_HOST_SESSION_H

#include "../config/settings.h"
#include "../loader/plugin_loader.h"

typedef struct ilab_session ilab_session;

/* `backend` NULL = settings' default backend ("torchlike" unless set).
 * ILAB_UNAVAILABLE: the probe's reason is in `err` (the CLI exits 3). */
ilab_status ilab_session_open(const ilab_settings *settings, const char *backend,
                              char *err, size_t err_cap, ilab_session **out);
void ilab_session_close(ilab_session *s);

const ilab_plugin *ilab_session_plugin(const ilab_session *s);
ilab_backend_t *ilab_session_backend(const ilab_session *s);
const ilab_backend_api_t *ilab_session_api(const ilab_session *s);

#endif
