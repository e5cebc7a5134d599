/* The backend worker process: the other end of a proxy (proxy.h). It loads
 * one plugin from a private copy of its file, creates at most one instance
 * and serves the host's calls on it until the host says DESTROY or goes
 * away (docs/adr/0020-backend-worker-processes.md).
 *
 * A worker is the host binary itself, re-executed with ILAB_WORKER_ARG as its
 * first argument: every program that opens proxies (inferlab, the harness,
 * the tests that use them) starts main() with
 *
 *     if (ilab_worker_requested(argc, argv))
 *         return ilab_worker_main(argc, argv);
 *
 * so no separate executable has to be found at run time. */
#ifndef ILAB_HOST_ISOLATION_WORKER_H
#define ILAB_HOST_ISOLATION_WORKER_H

#include <stdbool.h>

#define ILAB_WORKER_ARG "--ilab-backend-worker"
/* The socket to the host: descriptor 3 in the worker. */
#define ILAB_WORKER_FD 3

bool ilab_worker_requested(int argc, char **argv);

/* argv: program, ILAB_WORKER_ARG, plugin path. Returns the exit status. */
int ilab_worker_main(int argc, char **argv);

#endif
