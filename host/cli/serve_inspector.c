/* The inspector process (serve_inspector.h): requests and answers over a
 * socket pair, one at a time. */
#include "serve_inspector.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

struct ilab_inspector {
    pid_t pid;
    int fd;
    bool gone;  /* an answer failed: the stream is out of step, the process ended */
};

/* An answer takes the inspection's own deadline and this much more. */
#define ANSWER_MARGIN_MS 10000
#define DEFAULT_DEADLINE_MS 5000

static bool write_all(int fd, const void *p, size_t n)
{
    for (const char *c = p; n;) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        c += w;
        n -= (size_t)w;
    }
    return true;
}

/* Read exactly `n` bytes; with `timeout_ms` >= 0 each wait is bounded. */
static bool read_all(int fd, void *p, size_t n, int timeout_ms)
{
    for (char *c = p; n;) {
        if (timeout_ms >= 0) {
            struct pollfd pfd = {.fd = fd, .events = POLLIN};
            int r = poll(&pfd, 1, timeout_ms);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                return false;
        }
        ssize_t got = read(fd, c, n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return false;
        c += got;
        n -= (size_t)got;
    }
    return true;
}

static bool write_text(int fd, const char *s)
{
    uint32_t n = s ? (uint32_t)strlen(s) : 0;
    return write_all(fd, &n, sizeof n) && write_all(fd, s ? s : "", n);
}

/* A malloc'd, NUL-terminated string of at most `max` bytes. */
static char *read_text(int fd, uint32_t max, int timeout_ms)
{
    uint32_t n;
    if (!read_all(fd, &n, sizeof n, timeout_ms) || n > max)
        return NULL;
    char *s = malloc((size_t)n + 1);
    if (s && !read_all(fd, s, n, timeout_ms)) {
        free(s);
        return NULL;
    }
    if (s)
        s[n] = '\0';
    return s;
}

static const ilab_config_entry_t *user_config(const void *user, const char *name, size_t *n)
{
    return ilab_settings_plugin_config(user, name, n);
}

/* The inspector: answer requests until serve closes its end (or dies). */
static void inspector_main(int fd, const ilab_settings *settings)
{
    for (;;) {
        int32_t head[2]; /* probe, deadline_ms */
        if (!read_all(fd, head, sizeof head, -1))
            return;
        char *path = read_text(fd, 1u << 16, -1);
        if (!path)
            return;
        ilab_inspect_options o = {.probe = head[0] != 0, .config = user_config,
                                  .config_user = settings, .deadline_ms = head[1]};
        ilab_inspection in;
        ilab_inspect_isolated(path, &o, &in);
        free(path);
        int32_t state = (int32_t)in.state;
        bool ok = write_all(fd, &state, sizeof state) && write_text(fd, in.reason) &&
                  write_text(fd, in.manifest_yaml);
        ilab_inspection_free(&in);
        if (!ok)
            return;
    }
}

ilab_status ilab_inspector_start(const ilab_settings *settings, char *err, size_t err_cap,
                                 ilab_inspector **out)
{
    *out = NULL;
    ilab_inspector *in = calloc(1, sizeof *in);
    int sv[2];
    if (!in || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) {
        snprintf(err, err_cap, "starting the plugin inspector: %s",
                 in ? strerror(errno) : "out of memory");
        free(in);
        return ILAB_IO;
    }
    pid_t parent = getpid();
    fflush(NULL);
    in->pid = fork();
    if (in->pid < 0) {
        snprintf(err, err_cap, "starting the plugin inspector: fork: %s", strerror(errno));
        close(sv[0]);
        close(sv[1]);
        free(in);
        return ILAB_IO;
    }
    if (in->pid == 0) {
        close(sv[0]);
        /* It goes with serve, however serve ends. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() == parent)
            inspector_main(sv[1], settings);
        _exit(0); /* no atexit handlers: they are serve's */
    }
    close(sv[1]);
    in->fd = sv[0];
    *out = in;
    return ILAB_OK;
}

void ilab_inspector_inspect(void *ctx, const char *path, const ilab_inspect_options *o,
                            ilab_inspection *out)
{
    ilab_inspector *in = ctx;
    memset(out, 0, sizeof *out);
    if (in->gone) {
        out->state = ILAB_PLUGIN_REJECTED;
        snprintf(out->reason, sizeof out->reason, "%s: not inspected: the plugin inspector "
                 "process is gone (restart inferlab serve to reload plugins)", path);
        return;
    }
    int32_t head[2] = {o && o->probe, o && o->deadline_ms > 0 ? o->deadline_ms : 0};
    int timeout = (head[1] ? head[1] : DEFAULT_DEADLINE_MS) + ANSWER_MARGIN_MS;
    const char *env = getenv("INFERLAB_PROBE_TIMEOUT");
    if (!head[1] && env && atoi(env) > 0)
        timeout = atoi(env) * 1000 + ANSWER_MARGIN_MS;
    int32_t state = 0;
    char *reason = NULL;
    if (write_all(in->fd, head, sizeof head) && write_text(in->fd, path) &&
        read_all(in->fd, &state, sizeof state, timeout) &&
        (reason = read_text(in->fd, sizeof out->reason, timeout))) {
        out->manifest_yaml = read_text(in->fd, 1u << 24, timeout);
        if (out->manifest_yaml) {
            out->state = (ilab_plugin_state)state;
            snprintf(out->reason, sizeof out->reason, "%s", reason);
            if (!out->manifest_yaml[0]) {
                free(out->manifest_yaml);
                out->manifest_yaml = NULL;
            }
            free(reason);
            return;
        }
    }
    free(reason);
    in->gone = true;
    kill(in->pid, SIGKILL);
    out->state = ILAB_PLUGIN_REJECTED;
    snprintf(out->reason, sizeof out->reason, "%s: the plugin inspector process did not "
             "answer (it died or hung); nothing was loaded", path);
}

void ilab_inspector_stop(ilab_inspector *in)
{
    if (!in)
        return;
    close(in->fd);
    int status;
    while (waitpid(in->pid, &status, 0) < 0 && errno == EINTR)
        ;
    free(in);
}
