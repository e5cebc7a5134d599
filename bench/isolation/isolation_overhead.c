/* bench_isolation: what running a backend in a worker process costs.
 *
 * The same plugin, loaded twice: in this process (ilab_plugin_load) and
 * behind the worker proxy (ilab_proxy_load, host/isolation), each with an
 * instance and an engine of its own. Rounds alternate between the two so
 * that drift on a shared machine hits both alike. Each round generates N
 * greedy tokens on S concurrent streams through ilab_engine_generate.
 * Reports the median decode tokens/s of each, proxy/in-process, the time
 * the proxy adds per token (1/tps_proxy - 1/tps_inproc, single stream) and
 * the load average. A benchmark, not a test.
 *
 *   bench_isolation [--plugin PATH] [--set KEY=VALUE]... [--tokens N] [--rounds R]
 *                   [--streams S]
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "isolation/proxy.h"
#include "isolation/worker.h"
#include "runtime/engine.h"

#define MAX_STREAMS 64

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

typedef struct side {
    const char *label;
    ilab_plugin *plugin;
    ilab_backend_t *backend;
    ilab_engine *engine;
} side;

static int open_side(side *s, const char *path, bool proxied, const ilab_config_entry_t *user,
                     size_t n_user)
{
    char err[2048] = "";
    ilab_status st = proxied ? ilab_proxy_load(path, NULL, err, sizeof err, &s->plugin)
                             : ilab_plugin_load(path, err, sizeof err, &s->plugin);
    ilab_config_entry_t *cfg = NULL;
    size_t n_cfg = 0;
    const ilab_backend_api_t *api = st == ILAB_OK ? ilab_plugin_api(s->plugin) : NULL;
    if (st != ILAB_OK ||
        ilab_config_validate(ilab_plugin_manifest(s->plugin), user, n_user, err, sizeof err) ||
        ilab_config_with_defaults(ilab_plugin_manifest(s->plugin), user, n_user, &cfg, &n_cfg) ||
        api->create(ilab_plugin_host(s->plugin), cfg, n_cfg, err, sizeof err, &s->backend)) {
        fprintf(stderr, "%s (%s): %s\n", path, s->label, err);
        return 1;
    }
    ilab_config_entries_free(cfg, n_cfg);
    ilab_engine_config ecfg;
    ilab_engine_config_default(&ecfg);
    if (ilab_engine_create(s->plugin, s->backend, &ecfg, err, sizeof err, &s->engine)) {
        fprintf(stderr, "%s (%s): engine: %s\n", path, s->label, err);
        return 1;
    }
    return 0;
}

static void close_side(side *s)
{
    ilab_engine_destroy(s->engine);
    ilab_plugin_api(s->plugin)->destroy(s->backend);
    ilab_plugin_unload(s->plugin);
}

typedef struct stream {
    side *s;
    const ilab_request *req;
    int tokens;
    ilab_status st;
} stream;

static int count_token(void *ud, const ilab_event_t *ev)
{
    stream *t = ud;
    t->tokens += ev->type == ILAB_EVENT_TOKEN;
    return 0;
}

static void *run_stream(void *arg)
{
    stream *t = arg;
    char err[512];
    t->st = ilab_engine_generate(t->s->engine, t->req, count_token, t, err, sizeof err, NULL);
    return NULL;
}

/* One round: S streams at once; returns tokens/s over all of them. */
static double round_tps(side *s, const ilab_request *req, int n_streams)
{
    stream t[MAX_STREAMS];
    pthread_t th[MAX_STREAMS];
    double t0 = now();
    for (int i = 0; i < n_streams; i++) {
        t[i] = (stream){.s = s, .req = req};
        pthread_create(&th[i], NULL, run_stream, &t[i]);
    }
    int tokens = 0;
    for (int i = 0; i < n_streams; i++) {
        pthread_join(th[i], NULL);
        if (t[i].st != ILAB_OK)
            fprintf(stderr, "%s: a stream failed: %s\n", s->label, ilab_status_name(t[i].st));
        tokens += t[i].tokens;
    }
    return tokens / (now() - t0);
}

int main(int argc, char **argv)
{
    if (ilab_worker_requested(argc, argv))
        return ilab_worker_main(argc, argv);
    const char *path = DEFAULT_PLUGIN;
    ilab_config_entry_t user[16];
    size_t n_user = 0;
    int n_tokens = 200, rounds = 7, n_streams = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--plugin") && i + 1 < argc)
            path = argv[++i];
        else if (!strcmp(argv[i], "--tokens") && i + 1 < argc)
            n_tokens = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--streams") && i + 1 < argc)
            n_streams = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--set") && i + 1 < argc && n_user < 16) {
            char *kv = argv[++i], *eq = strchr(kv, '=');
            if (!eq) {
                fprintf(stderr, "--set %s: expected key=value\n", kv);
                return 2;
            }
            *eq = '\0';
            user[n_user++] = (ilab_config_entry_t){kv, eq + 1};
        } else {
            fprintf(stderr, "usage: %s [--plugin PATH] [--set KEY=VALUE]... [--tokens N] "
                            "[--rounds R] [--streams S]\n", argv[0]);
            return 2;
        }
    }
    if (n_tokens < 1 || rounds < 1 || rounds > 101 || n_streams < 1 || n_streams > MAX_STREAMS) {
        fprintf(stderr, "--tokens >= 1, --rounds 1..101, --streams 1..%d\n", MAX_STREAMS);
        return 2;
    }
    side sides[2] = {{.label = "in-process"}, {.label = "worker"}};
    for (int k = 0; k < 2; k++)
        if (open_side(&sides[k], path, k == 1, user, n_user))
            return 1;
    ilab_request req;
    memset(&req, 0, sizeof req);
    req.prompt_text = "It is a truth universally acknowledged, that a single man";
    req.add_bos = true;
    req.sampling.struct_size = sizeof req.sampling;
    req.sampling.top_p = 1.0f;
    req.sampling.repetition_penalty = 1.0f;
    req.max_tokens = n_tokens;
    req.ignore_eos = true;

    double tps[2][101];
    for (int r = -1; r < rounds; r++) /* one warm-up round, then alternate */
        for (int k = 0; k < 2; k++) {
            double v = round_tps(&sides[k], &req, n_streams);
            if (r >= 0)
                tps[k][r] = v;
        }
    double in = median(tps[0], rounds), out = median(tps[1], rounds);
    double load[3] = {0};
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3)
            load[0] = -1;
        fclose(f);
    }
    printf("plugin %s, %d stream(s) x %d tokens, %d rounds (medians), load average %.2f\n",
           path, n_streams, n_tokens, rounds, load[0]);
    printf("  in-process  %10.1f tokens/s\n", in);
    printf("  worker      %10.1f tokens/s\n", out);
    printf("  worker / in-process  %.3f\n", out / in);
    printf("  added per token      %.1f us (per stream-token: %.1f us)\n",
           (1.0 / out - 1.0 / in) * 1e6, (1.0 / out - 1.0 / in) * 1e6 * n_streams);
    for (int k = 0; k < 2; k++)
        close_side(&sides[k]);
    return 0;
}
