/* Host settings: the YAML config file (--config FILE, parsed with libyaml)
 * plus --set plugin.key=value overrides. Schema in docs/configuration.md:
 *
 *   plugin_dirs: [/opt/inferlab/plugins]
 *   default_backend: torchlike
 *   scheduler: {max_running: 16, max_waiting: 64, step_token_budget: 512, prefill_chunk: 256}
 *   server: {host: 127.0.0.1, port: 8080, max_body_bytes: 1048576, ...}
 *   plugins:
 *     torchlike: {threads: 2, model: /path/model.bin}
 *
 * Per-plugin keys are kept as text here; they are validated against the
 * plugin's manifest when the plugin is opened (ilab_config_validate). */
#ifndef ILAB_HOST_SETTINGS_H
#define ILAB_HOST_SETTINGS_H

#include <stdbool.h>
#include <stddef.h>

#include "inferlab/inferlab.h"
#include "engine_config.h"

typedef struct ilab_plugin_settings {
    char *plugin;                 /* manifest name */
    ilab_config_entry_t *entries; /* owned strings */
    size_t n;
} ilab_plugin_settings;

typedef struct ilab_server_settings {
    char *host;
    int port;
    size_t max_body_bytes;
    int request_timeout_seconds;   /* idle limit while a body or a response moves */
    int shutdown_grace_seconds;
    int head_timeout_seconds;      /* deadline for a complete request head */
    int max_connections;           /* open connections in all */
    int max_connections_per_client; /* per client address; 0 = no limit */
    int max_connections_per_loopback_client; /* per loopback address; 0 = no limit */
    int threads;                   /* HTTP event-loop threads */
    char *api_key;                 /* owned; NULL = none */
    int metrics_require_key;       /* 1: /metrics needs the key too */
    char *access_log;              /* owned; NULL = none */
    char *chat_template;           /* owned; NULL = each model's own (docs/chat-template.md) */
    char *conformance_reports;     /* owned; NULL = none: a folder of conformance JSON reports */
    char **backends;               /* owned; the plugins serve serves (none: every one
                                      of the folders); --backend replaces them */
    size_t n_backends;
    char **models;                 /* owned; "NAME=FILE" each: the models serve serves by
                                      name (server.models; --model NAME=FILE replaces them) */
    size_t n_models;
    int isolate_backends;          /* 1: each backend instance in a worker process (default) */
    int backend_call_timeout_seconds; /* isolated: a backend call longer than this kills
                                         its worker */
} ilab_server_settings;

typedef struct ilab_settings {
    char **plugin_dirs; /* owned; --plugin-dir entries are appended */
    size_t n_plugin_dirs;
    char **plugin_files; /* owned, absolute; --plugin FILE, looked at before every
                            folder (CLI only) */
    size_t n_plugin_files;
    char *default_backend; /* owned; "torchlike" by default */
    ilab_engine_config scheduler;
    ilab_server_settings server;
    ilab_plugin_settings *plugins; /* owned */
    size_t n_plugins;
    bool allow_insecure_plugins; /* --allow-insecure-plugins: load plugins the trust rule
                                    refuses (host/loader/trust.h). Dangerous; CLI only */
} ilab_settings;

void ilab_settings_init(ilab_settings *s); /* defaults */
void ilab_settings_free(ilab_settings *s);

/* Merge a YAML file; errors name the file, line and key. */
ilab_status ilab_settings_load_file(ilab_settings *s, const char *path,
                                    char *err, size_t err_cap);

/* The same for `len` bytes of YAML in memory; `label` stands for the file
 * name in messages. Both loaders share one document walker. */
ilab_status ilab_settings_load_text(ilab_settings *s, const char *label, const char *text,
                                    size_t len, char *err, size_t err_cap);

/* Apply one "plugin.key=value" override. */
ilab_status ilab_settings_set(ilab_settings *s, const char *assignment,
                              char *err, size_t err_cap);

ilab_status ilab_settings_add_plugin_dir(ilab_settings *s, const char *dir);

/* Append each --plugin FILE: a path to a .so, relative to the current
 * folder whether or not it has a slash (a bare "ok.so" is the file here),
 * kept as the absolute path. A file that is missing or not a regular file
 * is ILAB_INVALID_ARGUMENT with one message naming it ("--plugin 'ok.so':
 * No such file or directory"). */
ilab_status ilab_settings_add_plugin_files(ilab_settings *s, const char *const *files, size_t n,
                                           char *err, size_t err_cap);

/* What every CLI command does with its common options, in this order
 * whatever the order on the command line: load `config_path` (may be NULL),
 * then apply each "plugin.key=value" of `sets`, then append `plugin_dirs`.
 * Errors name the file/line or the --set argument. */
/* The CLI's --model FILE: `<backend>.model=FILE`, for `backend`, or the
 * default backend when NULL; applied after --config and --set, so it wins. */
ilab_status ilab_settings_set_model(ilab_settings *s, const char *backend, const char *file);

ilab_status ilab_settings_from_cli(ilab_settings *s, const char *config_path,
                                   const char *const *sets, size_t n_sets,
                                   const char *const *plugin_dirs, size_t n_dirs,
                                   char *err, size_t err_cap);

/* The user's entries for `plugin` (not yet validated, no defaults); n = 0 when none. */
const ilab_config_entry_t *ilab_settings_plugin_config(const ilab_settings *s,
                                                       const char *plugin, size_t *n);

#endif
