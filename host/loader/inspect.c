/* Loading (and probing) a plugin in a forked child; see inspect.h.
 *
 * The child writes "L" once the plugin is loaded, so a later death is known
 * to have happened in probe() rather than in dlopen (the constructor); then
 * one record: a state letter, the reason, NUL, the manifest text, NUL. */
#include "inspect.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "plugin_loader.h"

#define DEFAULT_DEADLINE_MS 5000

static const char state_letters[] = "LAURMS"; /* indexed by ilab_plugin_state */

const char *ilab_plugin_state_name(ilab_plugin_state s)
{
    switch (s) {
    case ILAB_PLUGIN_LOADED: return "loaded";
    case ILAB_PLUGIN_AVAILABLE: return "available";
    case ILAB_PLUGIN_UNAVAILABLE: return "unavailable";
    case ILAB_PLUGIN_REJECTED: return "rejected";
    case ILAB_PLUGIN_MISCONFIGURED: return "misconfigured";
    case ILAB_PLUGIN_SHADOWED: return "shadowed";
    }
    return "?";
}

/* --- the child ----------------------------------------------------------- */

static void write_all(int fd, const char *s, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, s, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        s += w;
        n -= (size_t)w;
    }
}

static void send_record(int fd, ilab_plugin_state st, const char *reason, const char *yaml)
{
    write_all(fd, &state_letters[st], 1);
    write_all(fd, reason, strlen(reason) + 1);
    write_all(fd, yaml ? yaml : "", strlen(yaml ? yaml : "") + 1);
}

/* Validate the user's entries, merge defaults, probe. */
static ilab_plugin_state probe_child(ilab_plugin *p, const ilab_inspect_options *o, char *reason,
                                     size_t cap)
{
    const ilab_manifest *m = ilab_plugin_manifest(p);
    size_t n_user = 0;
    const ilab_config_entry_t *user = o->config ? o->config(o->config_user, m->name, &n_user) : NULL;
    if (ilab_config_validate(m, user, n_user, reason, cap) != ILAB_OK)
        return ILAB_PLUGIN_MISCONFIGURED;
    ilab_config_entry_t *config = NULL;
    size_t n_config = 0;
    if (ilab_config_with_defaults(m, user, n_user, &config, &n_config) != ILAB_OK) {
        snprintf(reason, cap, "%s: out of memory building its configuration", ilab_plugin_path(p));
        return ILAB_PLUGIN_REJECTED;
    }
    ilab_status st = ilab_plugin_api(p)->probe(ilab_host_services(), config, n_config, reason, cap);
    reason[cap - 1] = '\0';
    ilab_config_entries_free(config, n_config);
    if (st == ILAB_OK) {
        reason[0] = '\0';
        return ILAB_PLUGIN_AVAILABLE;
    }
    if (st == ILAB_UNAVAILABLE) {
        if (!reason[0])
            snprintf(reason, cap, "(the plugin gave no reason)");
        return ILAB_PLUGIN_UNAVAILABLE;
    }
    snprintf(reason, cap, "%s: probe returned %s, not OK or UNAVAILABLE", ilab_plugin_path(p),
             ilab_status_name(st));
    return ILAB_PLUGIN_REJECTED;
}

static void run_child(const char *path, const ilab_inspect_options *o, int fd)
{
    /* Default dispositions, so a crash in plugin code is a signal death the
     * parent can name, even under sanitizers that install their own handlers. */
    static const int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        signal(sigs[i], SIG_DFL);
    char reason[1024] = "";
    ilab_plugin *p = NULL;
    if (ilab_plugin_load(path, reason, sizeof reason, &p) != ILAB_OK) {
        send_record(fd, ILAB_PLUGIN_REJECTED, reason, NULL);
        return;
    }
    write_all(fd, "L", 1);
    ilab_plugin_state st = o->probe ? probe_child(p, o, reason, sizeof reason) : ILAB_PLUGIN_LOADED;
    send_record(fd, st, reason, ilab_plugin_entry_of(p)->manifest_yaml);
    ilab_plugin_unload(p);
}

/* --- the parent ---------------------------------------------------------- */

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

static int deadline_ms(const ilab_inspect_options *o)
{
    if (o->deadline_ms > 0)
        return o->deadline_ms;
    const char *env = getenv("INFERLAB_PROBE_TIMEOUT");
    int s = env ? atoi(env) : 0;
    return s > 0 ? s * 1000 : DEFAULT_DEADLINE_MS;
}

static void reject(ilab_inspection *out, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void reject(ilab_inspection *out, const char *path, const char *fmt, ...)
{
    out->state = ILAB_PLUGIN_REJECTED;
    int n = snprintf(out->reason, sizeof out->reason, "%s: ", path);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out->reason + n, sizeof out->reason - (size_t)n, fmt, ap);
    va_end(ap);
}

/* Reads until EOF or the deadline; returns the bytes (NUL-terminated). */
static char *read_until(int fd, long end, size_t *len, bool *timed_out)
{
    char *buf = NULL;
    *len = 0;
    *timed_out = false;
    for (;;) {
        long left = end - now_ms();
        if (left <= 0) {
            *timed_out = true;
            break;
        }
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int r = poll(&pfd, 1, (int)left);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            *timed_out = r == 0;
            break;
        }
        char chunk[4096];
        ssize_t n = read(fd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break; /* EOF: the child is done (or dead) */
        char *grown = realloc(buf, *len + (size_t)n + 1);
        if (!grown)
            break;
        buf = grown;
        memcpy(buf + *len, chunk, (size_t)n);
        *len += (size_t)n;
        buf[*len] = '\0';
    }
    return buf;
}

/* The record after the optional "L": letter, reason\0, yaml\0. */
static bool parse_record(const char *rec, size_t len, ilab_inspection *out)
{
    if (len < 3)
        return false;
    const char *letter = strchr(state_letters, rec[0]);
    const char *reason = rec + 1;
    size_t rlen = strnlen(reason, len - 1);
    if (!letter || !rec[0] || 1 + rlen + 1 >= len)
        return false;
    const char *yaml = reason + rlen + 1;
    size_t ylen = strnlen(yaml, len - 2 - rlen);
    if (yaml + ylen >= rec + len)
        return false;
    out->state = (ilab_plugin_state)(letter - state_letters);
    snprintf(out->reason, sizeof out->reason, "%s", reason);
    if (ylen && !(out->manifest_yaml = strdup(yaml)))
        return false;
    return true;
}

void ilab_inspect_isolated(const char *path, const ilab_inspect_options *o, ilab_inspection *out)
{
    static const ilab_inspect_options none = {0};
    if (!o)
        o = &none;
    memset(out, 0, sizeof *out);
    int fds[2];
    if (pipe(fds)) {
        reject(out, path, "cannot create a pipe to inspect it: %s", strerror(errno));
        return;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        reject(out, path, "cannot fork to inspect it: %s", strerror(errno));
        return;
    }
    if (pid == 0) {
        close(fds[0]);
        run_child(path, o, fds[1]);
        close(fds[1]);
        _exit(0);
    }
    close(fds[1]);
    size_t len = 0;
    bool timed_out = false;
    char *buf = read_until(fds[0], now_ms() + deadline_ms(o), &len, &timed_out);
    close(fds[0]);
    if (timed_out)
        kill(pid, SIGKILL);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;

    bool loaded = buf && buf[0] == 'L';
    const char *stage = loaded ? (o->probe ? "probing" : "reading its manifest") : "loading";
    const char *rec = buf ? buf + loaded : NULL;
    size_t rec_len = buf ? len - loaded : 0;
    if (timed_out) {
        reject(out, path, "no answer within %d s while %s (hung?); killed", deadline_ms(o) / 1000,
               stage);
    } else if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        const char *abbrev = sigabbrev_np(sig);
        reject(out, path, "crashed with signal %d (SIG%s) while %s", sig, abbrev ? abbrev : "?",
               stage);
    } else if (WIFEXITED(status) && WEXITSTATUS(status) != 0) {
        reject(out, path, "the inspecting process exited with status %d while %s",
               WEXITSTATUS(status), stage);
    } else if (!rec || !parse_record(rec, rec_len, out)) {
        ilab_inspection_free(out);
        reject(out, path, "the inspecting process gave no result");
    }
    free(buf);
}

void ilab_inspection_free(ilab_inspection *i)
{
    if (!i)
        return;
    free(i->manifest_yaml);
    i->manifest_yaml = NULL;
}
