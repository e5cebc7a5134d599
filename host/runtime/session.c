/* A session: settings -> find and load the plugin -> validate its
 * configuration against the manifest -> probe -> create an instance. */
#include "session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../loader/registry.h"

struct ilab_session {
    ilab_plugin *plugin;
    ilab_backend_t *backend;
    ilab_config_entry_t *config; /* validated user entries + manifest defaults */
    size_t n_config;
};

ilab_status ilab_session_open(const ilab_settings *settings, const char *backend, char *err,
                              size_t err_cap, ilab_session **out)
{
    char dummy[1];
    if (!err || !err_cap) {
        err = dummy;
        err_cap = sizeof dummy;
    }
    err[0] = '\0';
    if (!settings || !out) {
        snprintf(err, err_cap, "session: settings and an out pointer are required");
        return ILAB_INVALID_ARGUMENT;
    }
    const char *name = backend && backend[0] ? backend
                       : settings->default_backend && settings->default_backend[0]
                           ? settings->default_backend
                           : "torchlike";
    ilab_session *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, err_cap, "session: out of memory");
        return ILAB_OUT_OF_MEMORY;
    }
    ilab_status st = ilab_registry_open((const char *const *)settings->plugin_dirs,
                                        settings->n_plugin_dirs, name, err, err_cap, &s->plugin);
    if (st != ILAB_OK) {
        if (!err[0])
            snprintf(err, err_cap, "backend '%s': no plugin with that name was found", name);
        free(s);
        /* Not found is a wrong name, not an unavailable backend: ILAB_UNAVAILABLE
         * is kept for the probe's answer (the CLI exits 3 only for that). */
        return st == ILAB_UNAVAILABLE ? ILAB_INVALID_ARGUMENT : st;
    }
    const ilab_manifest *m = ilab_plugin_manifest(s->plugin);
    size_t n_user = 0;
    const ilab_config_entry_t *user = ilab_settings_plugin_config(settings, m->name, &n_user);
    st = ilab_config_validate(m, user, n_user, err, err_cap);
    if (st == ILAB_OK)
        st = ilab_config_with_defaults(m, user, n_user, &s->config, &s->n_config);
    if (st != ILAB_OK) {
        if (!err[0])
            snprintf(err, err_cap, "backend '%s': configuration: %s", name, ilab_status_name(st));
        ilab_session_close(s);
        return st;
    }

    const ilab_backend_api_t *api = ilab_plugin_api(s->plugin);
    const ilab_host_t *host = ilab_host_services();
    char reason[1024] = "";
    st = api->probe(host, s->config, s->n_config, reason, sizeof reason);
    if (st != ILAB_OK) {
        if (st == ILAB_UNAVAILABLE)
            snprintf(err, err_cap, "backend '%s' is unavailable: %s", m->name,
                     reason[0] ? reason : "(the plugin gave no reason)");
        else
            snprintf(err, err_cap, "backend '%s': probe failed: %s: %s", m->name,
                     ilab_status_name(st), reason[0] ? reason : "(no message)");
        ilab_session_close(s);
        return st;
    }
    char cerr[1024] = "";
    st = api->create(host, s->config, s->n_config, cerr, sizeof cerr, &s->backend);
    if (st != ILAB_OK) {
        if (st == ILAB_UNAVAILABLE)
            snprintf(err, err_cap, "backend '%s' is unavailable: %s", m->name, cerr);
        else
            snprintf(err, err_cap, "backend '%s': create failed: %s: %s", m->name,
                     ilab_status_name(st), cerr[0] ? cerr : "(no message)");
        s->backend = NULL;
        ilab_session_close(s);
        return st;
    }
    *out = s;
    return ILAB_OK;
}

void ilab_session_close(ilab_session *s)
{
    if (!s)
        return;
    if (s->backend)
        ilab_plugin_api(s->plugin)->destroy(s->backend);
    if (s->config)
        ilab_config_entries_free(s->config, s->n_config);
    ilab_plugin_unload(s->plugin);
    free(s);
}

const ilab_plugin *ilab_session_plugin(const ilab_session *s) { return s ? s->plugin : NULL; }
ilab_backend_t *ilab_session_backend(const ilab_session *s) { return s ? s->backend : NULL; }
const ilab_backend_api_t *ilab_session_api(const ilab_session *s)
{
    return s ? ilab_plugin_api(s->plugin) : NULL;
}
