/* A plugin and one instance of it, for tests (opened_backend.h). */
#include "opened_backend.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

void open_backend(const char *path, const ilab_config_entry_t *user, size_t n_user, opened *o)
{
    char err[1024] = "";
    memset(o, 0, sizeof *o);
    if (ilab_plugin_load(path, err, sizeof err, &o->plugin) != ILAB_OK)
        fail_msg("load %s: %s", path, err);
    const ilab_manifest *m = ilab_plugin_manifest(o->plugin);
    ilab_config_entry_t *cfg = NULL;
    size_t n = 0;
    if (ilab_config_validate(m, user, n_user, err, sizeof err) != ILAB_OK)
        fail_msg("config: %s", err);
    assert_int_equal(ilab_config_with_defaults(m, user, n_user, &cfg, &n), ILAB_OK);
    o->api = ilab_plugin_api(o->plugin);
    if (o->api->create(ilab_host_services(), cfg, n, err, sizeof err, &o->backend) != ILAB_OK)
        fail_msg("create %s: %s", path, err);
    ilab_config_entries_free(cfg, n);
}

void close_backend(opened *o)
{
    o->api->destroy(o->backend);
    ilab_plugin_unload(o->plugin);
}
