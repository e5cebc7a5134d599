/* `inferlab serve --model NAME=FILE`: the models served by name, each an
 * instance of one plugin created with its own settings (the command line's
 * settings with `<plugin>.model=FILE`). Main thread. */
#ifndef ILAB_CLI_SERVE_MODELS_H
#define ILAB_CLI_SERVE_MODELS_H

#include <stddef.h>

#include "config/settings.h"
#include "serve_backends.h"

/* Fills `out` (initialised) with the settings every command-line form
 * builds: the config file, --set, the folders and files. */
typedef ilab_status (*ilab_settings_builder_fn)(void *ctx, ilab_settings *out, char *err,
                                             size_t err_cap);

typedef struct ilab_serve_models {
    ilab_serve_model *models; /* n, for ilab_serve_set_open */
    ilab_settings *settings;  /* n: each model's own */
    size_t n;
} ilab_serve_models;

/* Whether a --model argument is the NAME=FILE form (a '=' before any '/'). */
bool ilab_serve_model_is_named(const char *arg);

/* Parse the `n` NAME=FILE arguments into `out`, each served by `plugin`
 * (borrowed). Fails closed: a name that is empty, too long or not made of
 * letters, digits and ._:- ; a name given twice; a file that cannot be
 * read -- each message names `what` ("--model", "server.models") and the
 * argument. Returns -1 to go on, else the
 * exit code (the error printed); `out` is to be freed either way. */
int ilab_serve_models_open(const char *what, const char *const *args, size_t n,
                           const char *plugin, ilab_settings_builder_fn build, void *ctx,
                           ilab_serve_models *out);

void ilab_serve_models_free(ilab_serve_models *m);

#endif
