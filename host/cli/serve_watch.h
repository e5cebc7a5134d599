/* `inferlab serve --watch`: inotify on the plugin folders, so that a plugin
 * file added, replaced or removed is picked up without a SIGHUP. Main thread
 * (one thread at a time). */
#ifndef ILAB_CLI_SERVE_WATCH_H
#define ILAB_CLI_SERVE_WATCH_H

#include <stdbool.h>
#include <stddef.h>

#include "inferlab/inferlab.h"

typedef struct ilab_watch ilab_watch;

/* Watch `dirs` (borrowed for the call) for *.so files created, moved in or
 * out, deleted, written and closed, or changed in mode or owner. On
 * failure `err` names the folder (ILAB_IO) and *out is NULL. */
ilab_status ilab_watch_open(const char *const *dirs, size_t n, char *err, size_t err_cap,
                            ilab_watch **out);

/* Poll it for POLLIN. */
int ilab_watch_fd(const ilab_watch *w);

/* Read every pending event; true when one concerns a plugin file. */
bool ilab_watch_drain(ilab_watch *w);

void ilab_watch_close(ilab_watch *w);

#endif
