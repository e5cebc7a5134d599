/* A session: settings -> find and load the plugin -> validate its
 * configuration against the manifest -> probe -> create an instance. */
#include "session.h"

#include "../isolation/proxy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


struct ilab_session {
    ilab_plugin *plugin;
    ilab_backend_t *backend;
    ilab_config_entry_t *config; /* validated user entries + manifest defaults */
    size_t n_config;
};

ilab_status ilab_session_scan(const ilab_settings *settings, char *err, size_t err_cap,
                              ilab_catalog **out)
{
    ilab_catalog_options o = {
        .plugin_files = (const char *const *)settings->plugin_files,
        .n_files = settings->n_plugin_files,
        .plugin_dirs = (const char *const *)settings->plugin_dirs,
        .n_dirs = settings->n_plugin_dirs,
        .allow_insecure = settings->allow_insecure_plugins,
    };
    ilab_catalog *c = NULL;
    ilab_status st = ilab_catalog_scan(&o, err, err_cap, &c);
    if (st != ILAB_OK)
        return st;
    ilab_catalog_warn(c, "inferlab: ", stderr);
    /* Settings for a plugin nobody has are a typo the user must hear of. */
    const char **names = settings->n_plugins ? calloc(settings->n_plugins, sizeof *names) : NULL;
    if (settings->n_plugins && !names) {
        ilab_catalog_free(c);
        snprintf(err, err_cap, "session: out of memory");
        return ILAB_OUT_OF_MEMORY;
    }
    for (size_t i = 0; i < settings->n_plugins; i++)
        names[i] = settings->plugins[i].plugin;
    st = ilab_catalog_check_names(c, names, settings->n_plugins, "configuration for plugin", err,
                                  err_cap);
    free(names);
    if (st != ILAB_OK) {
        ilab_catalog_free(c);
        return st;
    }
    *out = c;
    return ILAB_OK;
}

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
    ilab_catalog *c = NULL;
    ilab_status st = ilab_session_scan(settings, err, err_cap, &c);
    if (st != ILAB_OK)
        return st;
    st = ilab_session_open_from(c, settings, backend, err, err_cap, out);
    ilab_catalog_free(c);
    return st;
}

/* isolate: NULL runs the plugin in this process; else in worker processes
 * behind a proxy (host/isolation) with these options. */
static ilab_status open_from(const ilab_catalog *catalog, const ilab_settings *settings,
                             const char *backend, const ilab_proxy_options *isolate, char *err,
                             size_t err_cap, ilab_session **out)
{
    char dummy[1];
    if (!err || !err_cap) {
        err = dummy;
        err_cap = sizeof dummy;
    }
    err[0] = '\0';
    if (!catalog || !settings || !out) {
        snprintf(err, err_cap, "session: a catalog, settings and an out pointer are required");
        return ILAB_INVALID_ARGUMENT;
    }
    /* `run --plugin ok.so` runs that file: with one --plugin file and no
     * backend named, the backend is its plugin (the catalog's first entry). */
    if (!(backend && backend[0]) && settings->n_plugin_files == 1 && ilab_catalog_size(catalog)) {
        const ilab_catalog_entry *f = ilab_catalog_at(catalog, 0);
        if (!f->name) {
            snprintf(err, err_cap, "plugin %s is rejected: %s", f->path, f->reason);
            return ILAB_INVALID_ARGUMENT;
        }
        backend = f->name;
    }
    const char *name = backend && backend[0] ? backend
                       : settings->default_backend && settings->default_backend[0]
                           ? settings->default_backend
                           : "torchlike";
    const ilab_catalog_entry *e = ilab_catalog_find(catalog, name);
    if (!e) {
        /* A wrong name, not an unavailable backend: ILAB_UNAVAILABLE is kept
         * for the probe's answer (the CLI exits 3 only for that). */
        ilab_catalog_describe_unknown(catalog, "backend", name, err, err_cap);
        return ILAB_INVALID_ARGUMENT;
    }
    if (e->state == ILAB_PLUGIN_REJECTED) {
        snprintf(err, err_cap, "backend '%s' is rejected: %s", name, e->reason);
        return ILAB_INVALID_ARGUMENT;
    }
    ilab_session *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, err_cap, "session: out of memory");
        return ILAB_OUT_OF_MEMORY;
    }
    /* The one plugin this process runs: the catalog looked inside the others
     * in children only. A library of its own even when an older version of
     * it is still loaded (serve's reload). Isolated: its workers run it. */
    ilab_status st = isolate ? ilab_proxy_load(e->path, isolate, err, err_cap, &s->plugin)
                             : ilab_plugin_load_fresh(e->path, err, err_cap, &s->plugin);
    if (st != ILAB_OK) {
        free(s);
        return st;
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
    const ilab_host_t *host = ilab_plugin_host(s->plugin);
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

ilab_status ilab_session_open_from(const ilab_catalog *catalog, const ilab_settings *settings,
                                   const char *backend, char *err, size_t err_cap,
                                   ilab_session **out)
{
    return open_from(catalog, settings, backend, NULL, err, err_cap, out);
}

ilab_status ilab_session_open_isolated_from(const ilab_catalog *catalog,
                                            const ilab_settings *settings, const char *backend,
                                            const ilab_proxy_options *options, char *err,
                                            size_t err_cap, ilab_session **out)
{
    return open_from(catalog, settings, backend, options, err, err_cap, out);
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
