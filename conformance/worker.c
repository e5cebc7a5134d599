/* The worker: runs a plugin's tests in this process and reports each one.
 *
 * In the normal (isolated) mode this runs in a forked child, and every event
 * is a line on a pipe to the supervisor:
 *   BEGIN <idx>                       a test starts
 *   STAGE <load|probe|create|none>    a setup stage starts / ends
 *   INFO <key> <value>                name, abi, digest, unavailable
 *   END <idx> <RESULT> <ms> <message> a test ended
 * The line is written before the risky call, so when the child dies the
 * supervisor knows which test (and stage) killed it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "validate.h"

static void on_stage(void *ctx, conf_stage st)
{
    const conf_sink *sink = ctx;
    sink->stage(sink->ctx, st);
}

static void on_info(void *ctx, const char *key, const char *value)
{
    const conf_sink *sink = ctx;
    sink->info(sink->ctx, key, value);
}

void conf_worker_run(const char *path, const conf_options *opt, const conf_test *const *tests,
                     size_t n_tests, size_t start, const char *const *dead_stage_test,
                     const conf_sink *sink, bool release_at_end)
{
    conf_env env;
    memset(&env, 0, sizeof env);
    env.path = path;
    env.opt = opt;
    for (int s = 0; s < CONF_STAGE_COUNT; s++)
        env.dead_stage_test[s] = dead_stage_test ? dead_stage_test[s] : NULL;
    env.on_stage = on_stage;
    env.on_info = on_info;
    env.report_ctx = (void *)sink;

    conf_validate_set_reporter(on_info, (void *)sink);
    char msg[CONF_MSG_CAP];
    bool deferred = false;
    for (size_t i = 0; i < n_tests; i++)
        deferred |= tests[i]->need == CONF_NEED_DEFERRED;
    for (size_t i = start; i < n_tests; i++) {
        const conf_test *t = tests[i];
        if (t->need == CONF_NEED_DEFERRED)
            continue;
        sink->begin(sink->ctx, i);
        msg[0] = '\0';
        double t0 = conf_now_seconds();
        conf_validate_set_test(t->id);
        conf_result r = conf_env_prepare(&env, t->need, msg, sizeof msg);
        /* The THR stress tests catch races by overlapping calls; the
         * layer's bookkeeping (one lock per call) makes overlaps rarer and
         * let a tokenize() race pass at 1 run in 6. They compare every
         * result with the serial one themselves, so they call the plugin
         * directly. */
        const ilab_backend_api_t *layered = env.api;
        bool direct = strncmp(t->id, "threads.", 8) == 0;
        if (r == CONF_PASS && direct)
            env.api = conf_validate_unwrapped(env.api);
        if (r == CONF_PASS)
            r = t->run(&env, msg, sizeof msg);
        if (direct) {
            env.api = layered;
            conf_validate_resync();
        }
        conf_validate_set_test(NULL);
        double ms = (conf_now_seconds() - t0) * 1000.0;
        msg[sizeof msg - 1] = '\0';
        sink->end(sink->ctx, i, r, ms, msg);
    }
    /* DIF-1 pairs plugins by model digest, which needs one instance. */
    if (deferred)
        conf_env_prepare(&env, CONF_NEED_INSTANCE, msg, sizeof msg);
    if (release_at_end)
        conf_env_release(&env);
    conf_validate_set_reporter(NULL, NULL);
}

/* ---- the pipe sink ---------------------------------------------------- */

typedef struct pipe_sink {
    FILE *f;
} pipe_sink;

static void one_line(char *s)
{
    for (; *s; s++)
        if (*s == '\n' || *s == '\r')
            *s = ' ';
}

static void pipe_begin(void *ctx, size_t idx)
{
    pipe_sink *p = ctx;
    fprintf(p->f, "BEGIN %zu\n", idx);
    fflush(p->f);
}

static void pipe_end(void *ctx, size_t idx, conf_result r, double ms, const char *msg)
{
    pipe_sink *p = ctx;
    char m[CONF_MSG_CAP];
    snprintf(m, sizeof m, "%s", msg);
    one_line(m);
    fprintf(p->f, "END %zu %s %.3f %s\n", idx, conf_result_name(r), ms, m);
    fflush(p->f);
}

static void pipe_stage(void *ctx, conf_stage st)
{
    static const char *const names[CONF_STAGE_COUNT] = {"none", "load", "probe", "create"};
    pipe_sink *p = ctx;
    fprintf(p->f, "STAGE %s\n", names[st]);
    fflush(p->f);
}

static void pipe_info(void *ctx, const char *key, const char *value)
{
    pipe_sink *p = ctx;
    char v[CONF_MSG_CAP];
    snprintf(v, sizeof v, "%s", value ? value : "");
    one_line(v);
    fprintf(p->f, "INFO %s %s\n", key, v);
    fflush(p->f);
}

void conf_sink_pipe(conf_sink *sink, int fd)
{
    static pipe_sink p; /* one per worker process */
    p.f = fdopen(fd, "w");
    sink->begin = pipe_begin;
    sink->end = pipe_end;
    sink->stage = pipe_stage;
    sink->info = pipe_info;
    sink->ctx = &p;
}
