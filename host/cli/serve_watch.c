/* inotify on the plugin folders (serve_watch.h). */
#include "serve_watch.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>

struct ilab_watch {
    int fd;
};

/* What can change which plugins a folder holds, or whether they are trusted. */
#define WATCHED (IN_CREATE | IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE | \
                 IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF)

ilab_status ilab_watch_open(const char *const *dirs, size_t n, char *err, size_t err_cap,
                            ilab_watch **out)
{
    *out = NULL;
    ilab_watch *w = calloc(1, sizeof *w);
    if (!w) {
        snprintf(err, err_cap, "--watch: out of memory");
        return ILAB_OUT_OF_MEMORY;
    }
    w->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (w->fd < 0) {
        snprintf(err, err_cap, "--watch: inotify: %s", strerror(errno));
        free(w);
        return ILAB_IO;
    }
    for (size_t i = 0; i < n; i++)
        if (inotify_add_watch(w->fd, dirs[i], WATCHED) < 0) {
            snprintf(err, err_cap, "--watch: cannot watch plugin folder '%s': %s", dirs[i],
                     strerror(errno));
            ilab_watch_close(w);
            return ILAB_IO;
        }
    *out = w;
    return ILAB_OK;
}

int ilab_watch_fd(const ilab_watch *w)
{
    return w->fd;
}

static bool is_plugin_name(const char *name, size_t len)
{
    size_t n = strnlen(name, len);
    return n > 3 && !strcmp(name + n - 3, ".so");
}

bool ilab_watch_drain(ilab_watch *w)
{
    bool relevant = false;
    char buf[8192] __attribute__((aligned(__alignof__(struct inotify_event))));
    for (;;) {
        ssize_t got = read(w->fd, buf, sizeof buf);
        if (got <= 0)
            return relevant;
        for (char *p = buf; p < buf + got;) {
            const struct inotify_event *ev = (const struct inotify_event *)p;
            /* The folder itself changed (its mode, or it went): rescan. */
            if (!ev->len || (ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_Q_OVERFLOW)))
                relevant = true;
            else if (is_plugin_name(ev->name, ev->len))
                relevant = true;
            p += sizeof *ev + ev->len;
        }
    }
}

void ilab_watch_close(ilab_watch *w)
{
    if (!w)
        return;
    close(w->fd);
    free(w);
}
