/* A plugin loaded and one backend instance created from it, for tests that
 * drive a real plugin through the host's loader and configuration rules
 * (validate, then complete with the manifest's defaults). Failures end the
 * cmocka test with the loader's or the plugin's message. */
#ifndef ILAB_TEST_OPENED_BACKEND_H
#define ILAB_TEST_OPENED_BACKEND_H

#include <stddef.h>

#include "loader/plugin_loader.h"

typedef struct opened {
    ilab_plugin *plugin;
    const ilab_backend_api_t *api;
    ilab_backend_t *backend;
} opened;

/* Load `path`, validate `user` (n_user entries) against its manifest, and
 * create an instance with the completed configuration. */
void open_backend(const char *path, const ilab_config_entry_t *user, size_t n_user, opened *o);
/* Destroy the instance and unload the plugin. */
void close_backend(opened *o);

#endif
