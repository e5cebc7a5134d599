/* The supervisor: one worker process per plugin (and a fresh one after each
 * crash or timeout), deadlines, and the DIF-1 pass across plugins.
 *
 * It never dlopens a plugin: a plugin can crash, hang, or corrupt memory in
 * its constructor, and the report must still be written. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "validate.h"

/* ---- results ----------------------------------------------------------- */

static void set_outcome(conf_outcome *o, conf_result r, double ms, const char *msg)
{
    o->done = true;
    o->result = r;
    o->duration_ms = ms;
    snprintf(o->message, sizeof o->message, "%s", msg ? msg : "");
    conf_sanitize(o->message);
}

static void set_info(conf_plugin_report *p, const char *key, const char *value)
{
    if (strcmp(key, "name") == 0)
        snprintf(p->name, sizeof p->name, "%s", value);
    else if (strcmp(key, "abi") == 0)
        snprintf(p->abi, sizeof p->abi, "%s", value);
    else if (strcmp(key, "version") == 0)
        snprintf(p->version, sizeof p->version, "%s", value);
    else if (strcmp(key, "digest") == 0)
        snprintf(p->digest, sizeof p->digest, "%s", value);
    else if (strcmp(key, "violation") == 0 || strcmp(key, "validated") == 0)
        conf_validate_note(key, value); /* inherited by the next worker */
    else if (strcmp(key, "unavailable") == 0) {
        p->unavailable = true;
        snprintf(p->unavailable_reason, sizeof p->unavailable_reason, "%s", value);
        conf_sanitize(p->unavailable_reason);
    }
    conf_sanitize(p->name);
    conf_sanitize(p->digest);
}

void conf_plugin_options(const conf_run *run, const conf_plugin_report *p, conf_options *out)
{
    *out = run->opt;
    out->required = false;
    for (size_t i = 0; i < run->n_require; i++)
        if (strcmp(run->require[i], p->name) == 0)
            out->required = true;
}

/* ---- in-process mode: the sink stores directly ------------------------- */

typedef struct direct_ctx {
    const conf_run *run;
    conf_plugin_report *p;
} direct_ctx;

static void direct_begin(void *ctx, size_t idx) { (void)ctx; (void)idx; }
static void direct_stage(void *ctx, conf_stage st) { (void)ctx; (void)st; }

static void direct_end(void *ctx, size_t idx, conf_result r, double ms, const char *msg)
{
    direct_ctx *d = ctx;
    set_outcome(&d->p->out[idx], r, ms, msg);
}

static void direct_info(void *ctx, const char *key, const char *value)
{
    direct_ctx *d = ctx;
    if (strcmp(key, "violation") == 0 || strcmp(key, "validated") == 0)
        return; /* the layer recorded it in this process already */
    set_info(d->p, key, value);
}

static void run_in_process(conf_run *run, conf_plugin_report *p)
{
    direct_ctx d = {run, p};
    conf_sink sink = {direct_begin, direct_end, direct_stage, direct_info, &d};
    conf_options opt;
    conf_plugin_options(run, p, &opt);
    conf_worker_run(p->path, &opt, run->tests, run->n_tests, 0, NULL, &sink, true);
}

/* ---- isolated mode ----------------------------------------------------- */

static const char *signal_label(int sig)
{
    switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGKILL: return "SIGKILL";
    case SIGTERM: return "SIGTERM";
    case SIGTRAP: return "SIGTRAP";
    case SIGSYS: return "SIGSYS";
    default: return "signal";
    }
}

typedef struct worker_state {
    long current;        /* index of the running test, -1 between tests */
    conf_stage stage;
    size_t next;         /* first test the next worker should run */
    char line[4096];
    size_t line_len;
} worker_state;

static conf_stage stage_of(const char *s)
{
    if (strcmp(s, "load") == 0) return CONF_STAGE_LOAD;
    if (strcmp(s, "probe") == 0) return CONF_STAGE_PROBE;
    if (strcmp(s, "create") == 0) return CONF_STAGE_CREATE;
    return CONF_STAGE_NONE;
}

static void handle_line(conf_run *run, conf_plugin_report *p, worker_state *w, char *line)
{
    if (strncmp(line, "BEGIN ", 6) == 0) {
        w->current = strtol(line + 6, NULL, 10);
        w->stage = CONF_STAGE_NONE;
    } else if (strncmp(line, "STAGE ", 6) == 0) {
        w->stage = stage_of(line + 6);
    } else if (strncmp(line, "INFO ", 5) == 0) {
        char *key = line + 5, *sp = strchr(key, ' ');
        if (sp) {
            *sp = '\0';
            set_info(p, key, sp + 1);
        }
    } else if (strncmp(line, "END ", 4) == 0) {
        char *s = line + 4, *end;
        size_t idx = strtoul(s, &end, 10);
        char res[16] = "";
        double ms = 0;
        int off = 0;
        if (sscanf(end, " %15s %lf %n", res, &ms, &off) >= 2 && idx < run->n_tests) {
            conf_result r;
            if (!conf_result_parse(res, &r))
                r = CONF_ERROR;
            set_outcome(&p->out[idx], r, ms, end + off);
            w->next = idx + 1;
        }
        w->current = -1;
    }
}

/* Returns false when the worker stopped before finishing. */
static void run_worker(conf_run *run, conf_plugin_report *p, const char **dead_stage,
                       worker_state *w, double suite_deadline)
{
    int fds[2];
    if (pipe(fds) != 0) {
        if (w->next < run->n_tests)
            set_outcome(&p->out[w->next], CONF_ERROR, 0, "harness: pipe() failed");
        w->next++;
        return;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        if (w->next < run->n_tests)
            set_outcome(&p->out[w->next], CONF_ERROR, 0, "harness: fork() failed");
        w->next++;
        return;
    }
    if (pid == 0) {
        /* The worker: plugin chatter goes to stderr so it never mixes into
         * a TAP or JSON report written to stdout. */
        close(fds[0]);
        dup2(STDERR_FILENO, STDOUT_FILENO);
        signal(SIGPIPE, SIG_DFL);
        conf_sink sink;
        conf_sink_pipe(&sink, fds[1]);
        conf_options opt;
        conf_plugin_options(run, p, &opt);
        conf_worker_run(p->path, &opt, run->tests, run->n_tests, w->next, dead_stage, &sink, false);
        fflush(NULL);
        _exit(0); /* skip atexit/leak checks of plugin state: the parent reports */
    }
    close(fds[1]);

    w->current = -1;
    w->stage = CONF_STAGE_NONE;
    w->line_len = 0;
    double test_start = conf_now_seconds();
    bool eof = false, killed = false;
    const char *kill_why = "";
    while (!eof) {
        double now = conf_now_seconds();
        double deadline = test_start + run->opt.timeout_seconds;
        if (deadline > suite_deadline)
            deadline = suite_deadline;
        if (now >= deadline) {
            kill(pid, SIGKILL);
            killed = true;
            kill_why = deadline == suite_deadline ? "suite" : "test";
            break;
        }
        struct pollfd pfd = {.fd = fds[0], .events = POLLIN};
        int ms = (int)((deadline - now) * 1000.0) + 1;
        int n = poll(&pfd, 1, ms);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            continue;
        char buf[4096];
        ssize_t got = read(fds[0], buf, sizeof buf);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0) {
            eof = true;
            break;
        }
        for (ssize_t i = 0; i < got; i++) {
            if (buf[i] == '\n' || w->line_len + 1 >= sizeof w->line) {
                w->line[w->line_len] = '\0';
                long before = w->current;
                handle_line(run, p, w, w->line);
                if (w->current != before || strncmp(w->line, "END ", 4) == 0)
                    test_start = conf_now_seconds();
                w->line_len = 0;
                if (buf[i] == '\n')
                    continue;
            }
            w->line[w->line_len++] = buf[i];
        }
    }
    close(fds[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;

    size_t victim = w->current >= 0 ? (size_t)w->current : w->next;
    if (victim >= run->n_tests)
        return; /* finished (anything after the last END is cleanup) */
    const char *id = run->tests[victim]->id;
    char m[CONF_MSG_CAP];
    conf_result r;
    static const char *const stage_names[CONF_STAGE_COUNT] = {"", " during plugin load",
                                                             " during probe()", " during create()"};
    if (killed) {
        r = CONF_TIMEOUT;
        if (kill_why[0] == 's')
            snprintf(m, sizeof m, "suite deadline of %d s passed in %s%s", run->opt.suite_seconds,
                     id, stage_names[w->stage]);
        else
            snprintf(m, sizeof m, "no result within %d s in %s%s", run->opt.timeout_seconds, id,
                     stage_names[w->stage]);
    } else if (WIFSIGNALED(status)) {
        r = CONF_CRASH;
        snprintf(m, sizeof m, "signal %d (%s) in %s%s", WTERMSIG(status),
                 signal_label(WTERMSIG(status)), id, stage_names[w->stage]);
    } else {
        r = CONF_CRASH;
        snprintf(m, sizeof m, "worker exited with status %d in %s%s (the plugin called exit()?)",
                 WIFEXITED(status) ? WEXITSTATUS(status) : -1, id, stage_names[w->stage]);
    }
    set_outcome(&p->out[victim], r, (conf_now_seconds() - test_start) * 1000.0, m);
    if (w->stage != CONF_STAGE_NONE && !dead_stage[w->stage])
        dead_stage[w->stage] = id;
    w->next = victim + 1;
}

static void run_isolated(conf_run *run, conf_plugin_report *p)
{
    const char *dead_stage[CONF_STAGE_COUNT] = {0};
    worker_state w;
    memset(&w, 0, sizeof w);
    double suite_deadline = conf_now_seconds() + run->opt.suite_seconds;
    bool started = false;
    while (true) {
        while (w.next < run->n_tests && run->tests[w.next]->need == CONF_NEED_DEFERRED)
            w.next++;
        /* with only deferred tests selected, one worker still runs: it
         * learns the model digest DIF-1 pairs plugins by */
        if (w.next >= run->n_tests && started)
            break;
        started = true;
        if (conf_now_seconds() >= suite_deadline) {
            char m[256];
            snprintf(m, sizeof m, "not run: the suite deadline of %d s passed", run->opt.suite_seconds);
            for (size_t i = w.next; i < run->n_tests; i++)
                if (!p->out[i].done && run->tests[i]->need != CONF_NEED_DEFERRED)
                    set_outcome(&p->out[i], CONF_TIMEOUT, 0, m);
            break;
        }
        run_worker(run, p, dead_stage, &w, suite_deadline);
    }
}

/* ---- DIF-1: pairs of plugins that declare the same model --------------- */

static conf_result run_pair(conf_run *run, conf_plugin_report *a, conf_plugin_report *b,
                            char *msg, size_t cap)
{
    conf_options oa, ob;
    conf_plugin_options(run, a, &oa);
    conf_plugin_options(run, b, &ob);
    if (run->in_process)
        return conf_diff_pair(a->path, b->path, &oa, &ob, msg, cap);

    int fds[2];
    if (pipe(fds) != 0) {
        snprintf(msg, cap, "harness: pipe() failed");
        return CONF_ERROR;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        dup2(STDERR_FILENO, STDOUT_FILENO);
        char m[CONF_MSG_CAP] = "";
        conf_result r = conf_diff_pair(a->path, b->path, &oa, &ob, m, sizeof m);
        FILE *f = fdopen(fds[1], "w");
        fprintf(f, "%s %s\n", conf_result_name(r), m);
        fclose(f);
        _exit(0);
    }
    close(fds[1]);
    char buf[CONF_MSG_CAP + 32];
    size_t len = 0;
    double deadline = conf_now_seconds() + run->opt.timeout_seconds;
    bool killed = false;
    while (len + 1 < sizeof buf) {
        double now = conf_now_seconds();
        if (now >= deadline) {
            kill(pid, SIGKILL);
            killed = true;
            break;
        }
        struct pollfd pfd = {.fd = fds[0], .events = POLLIN};
        if (poll(&pfd, 1, (int)((deadline - now) * 1000) + 1) <= 0)
            continue;
        ssize_t got = read(fds[0], buf + len, sizeof buf - 1 - len);
        if (got <= 0)
            break;
        len += (size_t)got;
    }
    buf[len] = '\0';
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (killed) {
        snprintf(msg, cap, "no result within %d s comparing %s and %s", run->opt.timeout_seconds,
                 a->name, b->name);
        return CONF_TIMEOUT;
    }
    if (WIFSIGNALED(status)) {
        snprintf(msg, cap, "signal %d (%s) in diff.DIF-1 comparing %s and %s", WTERMSIG(status),
                 signal_label(WTERMSIG(status)), a->name, b->name);
        return CONF_CRASH;
    }
    char res[16] = "";
    int off = 0;
    conf_result r;
    if (sscanf(buf, "%15s %n", res, &off) < 1 || !conf_result_parse(res, &r)) {
        snprintf(msg, cap, "harness: the DIF-1 worker gave no result");
        return CONF_ERROR;
    }
    char *nl = strchr(buf + off, '\n');
    if (nl)
        *nl = '\0';
    snprintf(msg, cap, "%s", buf + off);
    return r;
}

static void run_diff(conf_run *run)
{
    for (size_t t = 0; t < run->n_tests; t++) {
        if (run->tests[t]->need != CONF_NEED_DEFERRED)
            continue;
        for (size_t i = 0; i < run->n_plugins; i++) {
            conf_plugin_report *p = &run->plugins[i];
            if (p->unavailable) {
                set_outcome(&p->out[t], CONF_SKIP, 0, p->unavailable_reason);
                continue;
            }
            if (!p->digest[0]) {
                set_outcome(&p->out[t], CONF_SKIP, 0,
                            "no model digest known (model_info().digest is empty or no instance was created)");
                continue;
            }
            conf_result worst = CONF_PASS;
            char all[CONF_MSG_CAP] = "";
            bool all_full = false;
            int pairs = 0;
            double t0 = conf_now_seconds();
            for (size_t j = 0; j < run->n_plugins; j++) {
                conf_plugin_report *q = &run->plugins[j];
                if (j == i || q->unavailable || strcmp(p->digest, q->digest) != 0)
                    continue;
                pairs++;
                char m[CONF_MSG_CAP] = "";
                conf_result r = i < j ? run_pair(run, p, q, m, sizeof m) : run_pair(run, q, p, m, sizeof m);
                if (r > worst)
                    worst = r;
                if ((r != CONF_PASS || !all[0]) && !all_full) {
                    /* The summary of every pair ends, cut, where `all` is full;
                     * `worst` still counts the pairs past it. */
                    size_t l = strlen(all);
                    int n = snprintf(all + l, sizeof all - l, "%svs %s: %s %s", l ? "; " : "",
                                     q->name, conf_result_name(r), m);
                    all_full = n < 0 || (size_t)n >= sizeof all - l;
                }
            }
            if (pairs == 0) {
                char m[256];
                snprintf(m, sizeof m, "fewer than two loaded plugins declare model digest %.80s", p->digest);
                set_outcome(&p->out[t], CONF_SKIP, 0, m);
            } else {
                set_outcome(&p->out[t], worst, (conf_now_seconds() - t0) * 1000, all);
            }
        }
    }
}

/* ---- the whole run ----------------------------------------------------- */

static void finish_plugin(conf_run *run, conf_plugin_report *p)
{
    conf_result worst = CONF_PASS;
    const char *first_bad = NULL;
    size_t passed = 0;
    for (size_t t = 0; t < run->n_tests; t++) {
        conf_outcome *o = &p->out[t];
        if (!o->done)
            set_outcome(o, CONF_ERROR, 0, "harness: the test never reported");
        if (o->result == CONF_PASS)
            passed++;
        if (o->result >= CONF_FAIL && o->result > worst) {
            worst = o->result;
            first_bad = run->tests[t]->id;
        }
    }
    if (worst >= CONF_FAIL) {
        p->result = worst;
        for (size_t t = 0; t < run->n_tests; t++)
            if (strcmp(run->tests[t]->id, first_bad) == 0)
                snprintf(p->reason, sizeof p->reason, "%s: %.900s", first_bad, p->out[t].message);
    } else if (p->unavailable || passed == 0) {
        p->result = CONF_SKIP;
        snprintf(p->reason, sizeof p->reason, "%s",
                 p->unavailable ? p->unavailable_reason : "every test was skipped");
    } else {
        p->result = CONF_PASS;
        p->reason[0] = '\0';
    }
    conf_sanitize(p->reason);
}

void conf_supervise(conf_run *run)
{
    double t0 = conf_now_seconds();
    for (size_t i = 0; i < run->n_plugins; i++) {
        conf_plugin_report *p = &run->plugins[i];
        double p0 = conf_now_seconds();
        if (!conf_sha256_file(p->path, p->sha256))
            p->sha256[0] = '\0';
        conf_validate_reset();
        if (run->in_process)
            run_in_process(run, p);
        else
            run_isolated(run, p);
        p->seconds = conf_now_seconds() - p0;
    }
    run_diff(run);
    for (size_t i = 0; i < run->n_plugins; i++)
        finish_plugin(run, &run->plugins[i]);
    run->seconds = conf_now_seconds() - t0;
}
