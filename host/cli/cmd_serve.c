/* `inferlab serve`: open the backends (serve_backends.c), serve the HTTP
 * API (host/server) until SIGINT/SIGTERM, then drain and exit 0. SIGHUP,
 * and with --watch a change in a plugin folder, reloads the plugins. */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include "commands.h"
#include "config/settings.h"
#include "serve_backends.h"
#include "serve_inspector.h"
#include "serve_models.h"
#include "serve_watch.h"
#include "server/chat_formats.h"
#include "server/server.h"

/* Used when the settings leave them unset (0). */
#define DEFAULT_MAX_BODY_BYTES (1024u * 1024u)
#define DEFAULT_TIMEOUT_SECONDS 60
#define DEFAULT_GRACE_SECONDS 10

enum {
    OPT_HOST = 256, OPT_PORT, OPT_BACKEND, OPT_CONFIG, OPT_SET, OPT_PLUGIN_DIR, OPT_PLUGIN,
    OPT_API_KEY, OPT_ALLOW_UNAUTHENTICATED, OPT_ACCESS_LOG, OPT_INSECURE, OPT_WATCH,
    OPT_ISOLATION, OPT_MODEL, OPT_CHAT_TEMPLATE, OPT_CONFORMANCE_REPORTS, OPT_HELP
};

static const struct option serve_long_options[] = {
    {"host", required_argument, NULL, OPT_HOST},
    {"port", required_argument, NULL, OPT_PORT},
    {"backend", required_argument, NULL, OPT_BACKEND},
    {"config", required_argument, NULL, OPT_CONFIG},
    {"set", required_argument, NULL, OPT_SET},
    {"plugin-dir", required_argument, NULL, OPT_PLUGIN_DIR},
    {"plugin", required_argument, NULL, OPT_PLUGIN},
    {"api-key", required_argument, NULL, OPT_API_KEY},
    {"allow-unauthenticated", no_argument, NULL, OPT_ALLOW_UNAUTHENTICATED},
    {"access-log", required_argument, NULL, OPT_ACCESS_LOG},
    {"allow-insecure-plugins", no_argument, NULL, OPT_INSECURE},
    {"watch", no_argument, NULL, OPT_WATCH},
    {"isolation", required_argument, NULL, OPT_ISOLATION},
    {"model", required_argument, NULL, OPT_MODEL},
    {"chat-template", required_argument, NULL, OPT_CHAT_TEMPLATE},
    {"conformance-reports", required_argument, NULL, OPT_CONFORMANCE_REPORTS},
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0},
};

/* The command line, before it is merged with the settings. Strings borrow argv. */
typedef struct serve_options {
    const char *host, *config;
    const char *api_key, *access_log;
    const char *chat_template;  /* --chat-template NAME */
    const char *conformance_reports; /* --conformance-reports DIR */
    bool allow_unauthenticated;
    int port;                   /* -1 = the settings' */
    const char **sets, **dirs, **files, **backends, **models; /* owned arrays of borrowed
                                                                 strings */
    size_t n_sets, n_dirs, n_files, n_backends, n_models;
    bool allow_insecure;        /* --allow-insecure-plugins */
    bool watch;                 /* --watch */
    int isolate;                /* --isolation: 1 process, 0 none, -1 the settings' */
} serve_options;

static void serve_usage(FILE *out)
{
    fprintf(out,
            "usage: inferlab serve [--host ADDR] [--port N] [--backend NAME]... [--config FILE]\n"
            "                      [--model FILE | --model NAME=FILE...]\n"
            "                      [--set plugin.key=value]... [--plugin FILE]... [--plugin-dir DIR]...\n"
            "                      [--api-key KEY] [--allow-unauthenticated]\n"
            "                      [--access-log FILE] [--watch] [--isolation process|none]\n"
            "                      [--conformance-reports DIR]\n"
            "                      [--allow-insecure-plugins] [--chat-template NAME]\n"
            "\n"
            "Serve the OpenAI-compatible HTTP API (docs/http-api.md) until SIGINT or\n"
            "SIGTERM. Defaults: --host 127.0.0.1 --port 8080; --port 0 picks a free port.\n"
            "The first line on stdout names the address being served.\n"
            "\n"
            "  --backend NAME           serve this plugin; repeat for several (else the\n"
            "                           setting server.backends). Without either, every\n"
            "                           plugin of the folders is served, each as its own\n"
            "                           model: a request's \"model\" picks the backend;\n"
            "                           with --plugin files, every plugin of those files\n"
            "  --model FILE             the default backend's model file (as run's --model)\n"
            "  --model NAME=FILE        serve the model FILE as NAME: an instance of the\n"
            "                           default backend (or of the one --backend names)\n"
            "                           with <backend>.model=FILE, in its own worker;\n"
            "                           repeat for several; a request's \"model\" picks one\n"
            "  --plugin FILE            a plugin file, looked at before every folder; relative\n"
            "                           to the current folder (with or without a slash)\n"
            "  --watch                  reload when a plugin folder changes (as SIGHUP does:\n"
            "                           new, replaced and removed plugins; docs/operations.md)\n"
            "  --isolation process|none run each backend in a worker process of its own, so\n"
            "                           that its crash or hang fails only its requests\n"
            "                           (process, the default; setting\n"
            "                           server.isolate_backends), or in this process (none)\n"
            "  --api-key KEY            requests to /v1/*, /tokenize and /detokenize need\n"
            "                           'Authorization: Bearer KEY' (else the environment's\n"
            "                           INFERLAB_API_KEY, else server.api_key)\n"
            "  --allow-unauthenticated  serve a non-loopback --host without a key\n"
            "  --access-log FILE        append one line per request to FILE\n"
            "  --conformance-reports DIR  show each plugin's latest result from the\n"
            "                           inferlab-conformance JSON reports in DIR on the\n"
            "                           status page, GET / (setting server.conformance_reports)\n"
            "  --allow-insecure-plugins load plugins the trust rule refuses (dangerous;\n"
            "                           docs/operations.md)\n"
            "  --chat-template NAME     render /v1/chat/completions with this template for\n"
            "                           every backend, not the model's own (setting\n"
            "                           server.chat_template; docs/chat-template.md):\n");
    int col = 0;
    for (const char *const *n = ilab_chat_format_names; *n; n++) {
        if (col == 0)
            col = fprintf(out, "                          ");
        col += fprintf(out, " %s", *n);
        if (col > 80 || !n[1]) {
            fputc('\n', out);
            col = 0;
        }
    }
}

static bool parse_port(const char *s, int *out)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || !end || end == s || *end || v < 0 || v > 65535)
        return false;
    *out = (int)v;
    return true;
}

static void serve_options_free(serve_options *o)
{
    free(o->sets);
    free(o->dirs);
    free(o->files);
    free(o->backends);
    free(o->models);
}

/* Returns -1 to go on, else the exit code (0 after --help, 2 on a usage error). */
static int parse_serve_options(int argc, char **argv, serve_options *o)
{
    memset(o, 0, sizeof *o);
    o->port = -1;
    o->isolate = -1;
    o->sets = calloc((size_t)argc, sizeof *o->sets);
    o->dirs = calloc((size_t)argc, sizeof *o->dirs);
    o->files = calloc((size_t)argc, sizeof *o->files);
    o->backends = calloc((size_t)argc, sizeof *o->backends);
    o->models = calloc((size_t)argc, sizeof *o->models);
    if (!o->sets || !o->dirs || !o->files || !o->backends || !o->models) {
        fprintf(stderr, "inferlab serve: out of memory\n");
        return 1;
    }
    optind = 1;
    opterr = 0;
    for (int c; (c = getopt_long(argc, argv, "h", serve_long_options, NULL)) != -1;) {
        switch (c) {
        case OPT_HOST: o->host = optarg; break;
        case OPT_BACKEND: o->backends[o->n_backends++] = optarg; break;
        case OPT_MODEL: o->models[o->n_models++] = optarg; break;
        case OPT_WATCH: o->watch = true; break;
        case OPT_CONFIG: o->config = optarg; break;
        case OPT_SET: o->sets[o->n_sets++] = optarg; break;
        case OPT_PLUGIN_DIR: o->dirs[o->n_dirs++] = optarg; break;
        case OPT_PLUGIN: o->files[o->n_files++] = optarg; break;
        case OPT_API_KEY: o->api_key = optarg; break;
        case OPT_ALLOW_UNAUTHENTICATED: o->allow_unauthenticated = true; break;
        case OPT_ACCESS_LOG: o->access_log = optarg; break;
        case OPT_CONFORMANCE_REPORTS: o->conformance_reports = optarg; break;
        case OPT_INSECURE: o->allow_insecure = true; break;
        case OPT_CHAT_TEMPLATE: o->chat_template = optarg; break;
        case OPT_ISOLATION:
            if (strcmp(optarg, "process") && strcmp(optarg, "none")) {
                fprintf(stderr, "inferlab serve: --isolation '%s' is not process or none\n",
                        optarg);
                return 2;
            }
            o->isolate = !strcmp(optarg, "process");
            break;
        case OPT_PORT:
            if (!parse_port(optarg, &o->port)) {
                fprintf(stderr, "inferlab serve: --port '%s' is not a port number (0-65535)\n",
                        optarg);
                return 2;
            }
            break;
        case 'h':
        case OPT_HELP: serve_usage(stdout); return 0;
        default:
            fprintf(stderr, "inferlab serve: unknown option or missing value: '%s'\n",
                    argv[optind - 1]);
            serve_usage(stderr);
            return 2;
        }
    }
    if (o->api_key && !o->api_key[0]) {
        fprintf(stderr, "inferlab serve: --api-key must not be empty\n");
        return 2;
    }
    if (optind < argc) {
        fprintf(stderr, "inferlab serve: unexpected argument '%s'\n", argv[optind]);
        serve_usage(stderr);
        return 2;
    }
    return -1;
}

/* The server's configuration: the command line over the settings over the defaults. */
static ilab_server_config server_config(const serve_options *o, const ilab_settings *st)
{
    const ilab_server_settings *ss = &st->server;
    const char *env_key = getenv("INFERLAB_API_KEY");
    const char *key = o->api_key ? o->api_key
                      : env_key && env_key[0] ? env_key : ss->api_key;
    return (ilab_server_config){
        .api_key = key,
        .metrics_need_key = ss->metrics_require_key != 0,
        .allow_unauthenticated = o->allow_unauthenticated,
        .access_log = o->access_log ? o->access_log : ss->access_log,
        .chat_template = o->chat_template ? o->chat_template : ss->chat_template,
        .conformance_reports = o->conformance_reports ? o->conformance_reports
                                                      : ss->conformance_reports,
        .host = o->host ? o->host : (ss->host ? ss->host : "127.0.0.1"),
        .port = o->port >= 0 ? o->port : (ss->port >= 0 ? ss->port : 8080),
        .max_body_bytes = ss->max_body_bytes ? ss->max_body_bytes : DEFAULT_MAX_BODY_BYTES,
        .request_timeout_seconds = ss->request_timeout_seconds > 0
                                       ? ss->request_timeout_seconds : DEFAULT_TIMEOUT_SECONDS,
        .head_timeout_seconds = ss->head_timeout_seconds,
        .max_connections = ss->max_connections,
        .max_connections_per_client = ss->max_connections_per_client,
        .max_connections_per_loopback_client = ss->max_connections_per_loopback_client,
        .threads = ss->threads,
    };
}

/* The signals the main thread takes, as a descriptor (they are blocked in
 * every thread, so none of them interrupts an event-loop thread). */
static int signal_fd(void)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    return signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
}

static double now_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* A folder change settles for this long before the reload: a copy moved
 * in is one event, but a tool may write, chmod and rename in a row. */
#define WATCH_SETTLE_SECONDS 0.25

/* How often the main loop looks for backend workers that died. */
#define WORKER_CHECK_MS 200

/* The main thread from the start until SIGINT/SIGTERM: reloads on SIGHUP
 * and folder changes, and releases the versions whose requests are over.
 * Returns the signal that stopped it. */
static int main_loop(ilab_serve_set *set, ilab_server *server, int sfd, ilab_watch *watch)
{
    double reload_at = 0; /* a folder change waits for this time; 0 = none */
    for (;;) {
        struct pollfd p[3] = {
            {.fd = sfd, .events = POLLIN},
            {.fd = ilab_server_reap_fd(server), .events = POLLIN},
            {.fd = watch ? ilab_watch_fd(watch) : -1, .events = POLLIN},
        };
        /* Backends in workers are looked at a few times a second: a dead
         * worker is noticed, and restarted when its back-off is over. */
        double restart_at = ilab_serve_set_check_workers(set, server) / 1000;
        int timeout = WORKER_CHECK_MS;
        if (reload_at > 0) {
            double left = reload_at - now_seconds();
            timeout = left > 0 ? (int)(left * 1000) + 1 : 0;
        }
        if (restart_at > 0) {
            double left = restart_at - now_seconds();
            int ms = left > 0 ? (int)(left * 1000) + 1 : 0;
            timeout = ms < timeout ? ms : timeout;
        }
        if (timeout > WORKER_CHECK_MS)
            timeout = WORKER_CHECK_MS;
        int n = poll(p, 3, timeout);
        if (n < 0 && errno != EINTR)
            return SIGTERM;
        if (p[1].revents & POLLIN)
            ilab_server_reap(server);
        if (p[2].revents & POLLIN && ilab_watch_drain(watch))
            reload_at = now_seconds() + WATCH_SETTLE_SECONDS;
        if (p[0].revents & POLLIN) {
            struct signalfd_siginfo si;
            while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
                if (si.ssi_signo != SIGHUP)
                    return (int)si.ssi_signo;
                fprintf(stderr, "inferlab serve: SIGHUP: reloading the plugin folders\n");
                ilab_serve_set_reload(set, server);
                ilab_server_set_plugins(server, ilab_serve_set_plugins_json(set));
                reload_at = 0;
            }
        }
        if (reload_at > 0 && now_seconds() >= reload_at) {
            reload_at = 0;
            fprintf(stderr, "inferlab serve: a plugin folder changed: reloading\n");
            ilab_serve_set_reload(set, server);
            ilab_server_set_plugins(server, ilab_serve_set_plugins_json(set));
        }
    }
}

/* Serve until SIGINT/SIGTERM; returns the exit code. With `models`
 * (--model NAME=FILE), those are served instead of the backends. */
static int serve(const serve_options *o, const ilab_settings *settings,
                 const ilab_serve_models *models)
{
    ilab_serve_set *set = NULL;
    ilab_server_backend *bes = NULL;
    size_t n_bes = 0;
    /* --backend, else server.backends, else every plugin of the folders. */
    const char *const *names = o->n_backends ? o->backends
                                             : (const char *const *)settings->server.backends;
    size_t n_names = o->n_backends ? o->n_backends : settings->server.n_backends;
    if (models->n) {
        names = NULL;
        n_names = models->n;
    }
    /* Before any thread starts: every later look inside a plugin file is
     * forked from it, not from this process. */
    ilab_inspector *inspector = NULL;
    char err[4096] = "";
    if (ilab_inspector_start(settings, err, sizeof err, &inspector) != ILAB_OK) {
        fprintf(stderr, "inferlab serve: %s\n", err);
        return 1;
    }
    int rc = ilab_serve_set_open(settings, names, models->n ? 0 : n_names, models->models,
                                 models->n, inspector, &set, &bes, &n_bes);
    if (rc >= 0) {
        ilab_inspector_stop(inspector);
        return rc;
    }
    ilab_watch *watch = NULL;
    if (o->watch) {
        const char *const *dirs = NULL;
        size_t n_dirs = ilab_serve_set_dirs(set, &dirs);
        if (ilab_watch_open(dirs, n_dirs, err, sizeof err, &watch) != ILAB_OK) {
            fprintf(stderr, "inferlab serve: %s\n", err);
            for (size_t i = 0; i < n_bes; i++)
                if (bes[i].release)
                    bes[i].release(bes[i].owner);
            free(bes);
            ilab_serve_set_free(set);
            ilab_inspector_stop(inspector);
            return 1;
        }
    }
    ilab_server_config cfg = server_config(o, settings);
    cfg.default_backend = ilab_serve_set_default(set);
    cfg.several = n_names != 1 || models->n;
    ilab_server *server = NULL;
    int sfd = signal_fd();
    if (sfd < 0) {
        fprintf(stderr, "inferlab serve: signalfd: %s\n", strerror(errno));
        for (size_t i = 0; i < n_bes; i++)
            if (bes[i].release)
                bes[i].release(bes[i].owner);
        rc = 1;
    } else if (ilab_server_start(&cfg, bes, n_bes, err, sizeof err, &server) != ILAB_OK) {
        fprintf(stderr, "inferlab serve: %s\n", err);
        rc = 1;
    } else {
        ilab_server_set_plugins(server, ilab_serve_set_plugins_json(set));
        char what[2048];
        ilab_server_describe(server, what, sizeof what);
        bool one_down = n_names == 1 && !models->n && strstr(what, "not serving");
        printf("inferlab serve: listening on http://%s:%d (%s%s)\n", cfg.host,
               ilab_server_port(server), one_down ? "model 'unavailable'" : what,
               one_down ? ", backend unavailable" : "");
        fflush(stdout);
        int sig = main_loop(set, server, sfd, watch);
        double grace = settings->server.shutdown_grace_seconds >= 0
                           ? settings->server.shutdown_grace_seconds : DEFAULT_GRACE_SECONDS;
        fprintf(stderr, "inferlab serve: %s: no new connections; finishing in-flight "
                        "requests (up to %.0f s)\n", sig == SIGINT ? "SIGINT" : "SIGTERM",
                grace);
        ilab_server_shutdown(server, grace);
        ilab_server_destroy(server);
        fprintf(stderr, "inferlab serve: stopped\n");
        rc = 0;
    }
    if (sfd >= 0)
        close(sfd);
    free(bes);
    ilab_watch_close(watch);
    ilab_serve_set_free(set);
    ilab_inspector_stop(inspector);
    return rc;
}

/* The settings of the command line (ilab_settings_builder_fn): the config
 * file first, then every --set, whatever their order; the folders, the
 * files; --allow-insecure-plugins and --isolation. */
static ilab_status build_settings(void *ctx, ilab_settings *s, char *err, size_t err_cap)
{
    const serve_options *o = ctx;
    ilab_status st = ilab_settings_from_cli(s, o->config, o->sets, o->n_sets, o->dirs, o->n_dirs,
                                            err, err_cap);
    if (st == ILAB_OK)
        st = ilab_settings_add_plugin_files(s, o->files, o->n_files, err, err_cap);
    s->allow_insecure_plugins = o->allow_insecure;
    if (o->isolate >= 0)
        s->server.isolate_backends = o->isolate;
    return st;
}

/* --model: one plain FILE (the default backend's model, set in `settings`)
 * or NAME=FILE ones (into `models`), never both. -1 to go on, else the
 * exit code. */
static int apply_models(const serve_options *o, ilab_settings *settings,
                        ilab_serve_models *models)
{
    size_t named = 0;
    for (size_t i = 0; i < o->n_models; i++)
        named += ilab_serve_model_is_named(o->models[i]);
    const char *plugin = o->n_backends == 1 ? o->backends[0] : settings->default_backend;
    if (named && named != o->n_models) {
        fprintf(stderr, "inferlab serve: --model FILE and --model NAME=FILE cannot be mixed: "
                        "name every model\n");
        return 2;
    }
    if (o->n_models && o->n_backends > 1) {
        fprintf(stderr, "inferlab serve: --model with %zu --backend: name at most one backend, "
                        "the one that serves the models\n", o->n_backends);
        return 2;
    }
    if (!named && o->n_models > 1) {
        fprintf(stderr, "inferlab serve: --model FILE is given %zu times; to serve several "
                        "models, name each: --model NAME=FILE\n", o->n_models);
        return 2;
    }
    if (!plugin && o->n_models) {
        fprintf(stderr, "inferlab serve: --model: no backend to serve it (--backend NAME, or "
                        "the setting default_backend)\n");
        return 2;
    }
    if (!named && o->n_models)
        return ilab_settings_set_model(settings, plugin, o->models[0]) == ILAB_OK ? -1 : 1;
    /* Without --model, the settings' server.models (every one named). */
    const char *const *args = o->n_models ? o->models
                                          : (const char *const *)settings->server.models;
    size_t n = o->n_models ? o->n_models : settings->server.n_models;
    if (n && !plugin) {
        fprintf(stderr, "inferlab serve: server.models: no backend to serve them (--backend "
                        "NAME, or the setting default_backend)\n");
        return 2;
    }
    if (n && !o->n_models && o->n_backends > 1) {
        fprintf(stderr, "inferlab serve: server.models with %zu --backend: name at most one "
                        "backend, the one that serves the models\n", o->n_backends);
        return 2;
    }
    return ilab_serve_models_open(o->n_models ? "--model" : "server.models", args, n, plugin,
                                  build_settings, (void *)o, models);
}

int ilab_cmd_serve(int argc, char **argv)
{
    serve_options o;
    int rc = parse_serve_options(argc, argv, &o);
    if (rc >= 0) {
        serve_options_free(&o);
        return rc;
    }
    ilab_settings settings;
    ilab_settings_init(&settings);
    ilab_serve_models models = {0};
    char err[1024] = "";
    if (build_settings(&o, &settings, err, sizeof err) != ILAB_OK) {
        fprintf(stderr, "inferlab serve: %s\n", err);
        ilab_settings_free(&settings);
        serve_options_free(&o);
        return 2;
    }
    rc = apply_models(&o, &settings, &models);
    if (rc >= 0) {
        ilab_serve_models_free(&models);
        ilab_settings_free(&settings);
        serve_options_free(&o);
        return rc;
    }
    const char *chat = o.chat_template ? o.chat_template : settings.server.chat_template;
    if (chat && !ilab_chat_format_named(chat)) {
        fprintf(stderr, "inferlab serve: chat template '%s' (%s) is not one this server knows; "
                        "known:", chat, o.chat_template ? "--chat-template" : "server.chat_template");
        for (const char *const *n = ilab_chat_format_names; *n; n++)
            fprintf(stderr, " %s", *n);
        fputc('\n', stderr);
        ilab_serve_models_free(&models);
        ilab_settings_free(&settings);
        serve_options_free(&o);
        return 2;
    }
    /* Signals are taken synchronously by this thread (a signalfd): block
     * them before any thread starts so every thread inherits the mask. */
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &signals, NULL);
    signal(SIGPIPE, SIG_IGN);

    rc = serve(&o, &settings, &models);
    ilab_serve_models_free(&models);
    ilab_settings_free(&settings);
    serve_options_free(&o);
    return rc;
}
