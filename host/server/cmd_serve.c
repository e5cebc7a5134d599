/* `inferlab serve`: open the backend, start the engine, serve the HTTP API
 * until SIGINT/SIGTERM, then drain and exit 0. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../cli/commands.h"
#include "../config/settings.h"
#include "../runtime/engine.h"
#include "../runtime/session.h"
#include "server.h"

/* Used when the settings leave them unset (0). */
#define DEFAULT_MAX_BODY_BYTES (1024u * 1024u)
#define DEFAULT_TIMEOUT_SECONDS 60
#define DEFAULT_GRACE_SECONDS 10

static void usage(FILE *out)
{
    fprintf(out,
            "usage: inferlab serve [--host ADDR] [--port N] [--backend NAME] [--config FILE]\n"
            "                      [--set plugin.key=value]... [--plugin-dir DIR]...\n"
            "\n"
            "Serve the OpenAI-compatible HTTP API (docs/http-api.md) until SIGINT or\n"
            "SIGTERM. Defaults: --host 127.0.0.1 --port 8080; --port 0 picks a free port.\n"
            "The first line on stdout names the address being served.\n");
}

static int parse_port(const char *s, int *out)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || !end || *end || v < 0 || v > 65535)
        return -1;
    *out = (int)v;
    return 0;
}

int ilab_cmd_serve(int argc, char **argv)
{
    const char *host = NULL, *backend = NULL;
    int port = -1;
    ilab_settings settings;
    ilab_settings_init(&settings);
    char err[1024] = "";
    int rc = 0;

    /* Options are applied in order after the config file, so --set wins over
     * it whatever the order on the command line: find --config first. */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--config")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "inferlab serve: --config needs a file\n");
                ilab_settings_free(&settings);
                return 2;
            }
            if (ilab_settings_load_file(&settings, argv[++i], err, sizeof err) != ILAB_OK) {
                fprintf(stderr, "inferlab serve: %s\n", err);
                ilab_settings_free(&settings);
                return 1;
            }
        }
    }
    for (int i = 1; i < argc && rc == 0; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            ilab_settings_free(&settings);
            return 0;
        }
        if (!strcmp(a, "--config")) {
            i++;
            continue;
        }
        if (strcmp(a, "--host") && strcmp(a, "--port") && strcmp(a, "--backend") &&
            strcmp(a, "--set") && strcmp(a, "--plugin-dir")) {
            fprintf(stderr, "inferlab serve: unknown option '%s'\n", a);
            usage(stderr);
            rc = 2;
            break;
        }
        if (!v) {
            fprintf(stderr, "inferlab serve: %s needs a value\n", a);
            rc = 2;
            break;
        }
        i++;
        if (!strcmp(a, "--host")) {
            host = v;
        } else if (!strcmp(a, "--port")) {
            if (parse_port(v, &port)) {
                fprintf(stderr, "inferlab serve: --port '%s' is not a port number (0-65535)\n",
                        v);
                rc = 2;
            }
        } else if (!strcmp(a, "--backend")) {
            backend = v;
        } else if (!strcmp(a, "--set")) {
            if (ilab_settings_set(&settings, v, err, sizeof err) != ILAB_OK) {
                fprintf(stderr, "inferlab serve: --set %s: %s\n", v, err);
                rc = 2;
            }
        } else if (ilab_settings_add_plugin_dir(&settings, v) != ILAB_OK) {
            fprintf(stderr, "inferlab serve: --plugin-dir %s: out of memory\n", v);
            rc = 1;
        }
    }
    if (rc) {
        ilab_settings_free(&settings);
        return rc;
    }

    /* Signals are taken synchronously by this thread (sigwait below): block
     * them before any thread starts so every thread inherits the mask. */
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
    signal(SIGPIPE, SIG_IGN);

    ilab_session *session = NULL;
    ilab_engine *engine = NULL;
    char unavailable[1024] = "";
    ilab_status st = ilab_session_open(&settings, backend, err, sizeof err, &session);
    if (st == ILAB_UNAVAILABLE) {
        /* Serve anyway: /health answers 503 with the reason, which is what a
         * load balancer or an operator needs to see. */
        snprintf(unavailable, sizeof unavailable, "%s", err[0] ? err : "backend unavailable");
        fprintf(stderr, "inferlab serve: backend unavailable: %s\n", unavailable);
    } else if (st != ILAB_OK) {
        fprintf(stderr, "inferlab serve: %s\n", err);
        ilab_settings_free(&settings);
        return 1;
    } else {
        st = ilab_engine_create(ilab_session_plugin(session), ilab_session_backend(session),
                                &settings.scheduler, err, sizeof err, &engine);
        if (st != ILAB_OK) {
            fprintf(stderr, "inferlab serve: starting the engine: %s\n", err);
            ilab_session_close(session);
            ilab_settings_free(&settings);
            return 1;
        }
    }

    ilab_server_config cfg = {
        .host = host ? host : (settings.server.host ? settings.server.host : "127.0.0.1"),
        .port = port >= 0 ? port : (settings.server.port >= 0 ? settings.server.port : 8080),
        .max_body_bytes = settings.server.max_body_bytes ? settings.server.max_body_bytes
                                                         : DEFAULT_MAX_BODY_BYTES,
        .request_timeout_seconds = settings.server.request_timeout_seconds > 0
                                       ? settings.server.request_timeout_seconds
                                       : DEFAULT_TIMEOUT_SECONDS,
        /* Enough threads for a full batch plus a full queue plus a few for
         * /health and /metrics; past that libmicrohttpd refuses connections. */
        .max_connections = settings.scheduler.max_running + settings.scheduler.max_waiting + 16,
    };
    ilab_server_backend be = {
        .engine = engine,
        .plugin = session ? ilab_session_plugin(session) : NULL,
        .backend = session ? ilab_session_backend(session) : NULL,
        .api = session ? ilab_session_api(session) : NULL,
        .unavailable_reason = unavailable[0] ? unavailable : NULL,
    };
    ilab_server *server = NULL;
    st = ilab_server_start(&cfg, &be, err, sizeof err, &server);
    if (st != ILAB_OK) {
        fprintf(stderr, "inferlab serve: %s\n", err);
        if (engine)
            ilab_engine_destroy(engine);
        if (session)
            ilab_session_close(session);
        ilab_settings_free(&settings);
        return 1;
    }
    printf("inferlab serve: listening on http://%s:%d (model '%s'%s)\n", cfg.host,
           ilab_server_port(server), ilab_server_model_id(server),
           unavailable[0] ? ", backend unavailable" : "");
    fflush(stdout);

    int sig = 0;
    while (sigwait(&stop_signals, &sig) != 0)
        ;
    double grace = settings.server.shutdown_grace_seconds >= 0
                       ? settings.server.shutdown_grace_seconds : DEFAULT_GRACE_SECONDS;
    fprintf(stderr, "inferlab serve: %s: no new connections; finishing in-flight requests "
                    "(up to %.0f s)\n", sig == SIGINT ? "SIGINT" : "SIGTERM", grace);
    ilab_server_shutdown(server, grace);
    ilab_server_destroy(server);
    if (engine)
        ilab_engine_destroy(engine);
    if (session)
        ilab_session_close(session);
    ilab_settings_free(&settings);
    fprintf(stderr, "inferlab serve: stopped\n");
    return 0;
}
