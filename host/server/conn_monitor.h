/* Watching the server's connections from one thread of its own:
 *
 *  - the request-head deadline: a connection that has not delivered a
 *    complete request head within `head_timeout` seconds of opening (or of
 *    its previous response ending) is shut down, however slowly it trickles
 *    bytes (libmicrohttpd's own timeout is an idle timeout, which every byte
 *    resets);
 *  - hang-ups while a response is being generated: libmicrohttpd does not
 *    look at a suspended connection's socket, so the monitor polls it
 *    (EPOLLRDHUP) and tells the owner at once, tokens flowing or not.
 *
 * The monitor never closes a socket: it shuts it down, and libmicrohttpd
 * sees the end of stream and closes the connection itself. The connection's
 * record is dropped on libmicrohttpd's CLOSED notification, which comes
 * before the socket is closed, so the monitor never touches a reused fd. */
#ifndef ILAB_SERVER_CONN_MONITOR_H
#define ILAB_SERVER_CONN_MONITOR_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "inferlab/status.h"

typedef struct ilab_conn_monitor ilab_conn_monitor;
typedef struct ilab_conn ilab_conn; /* one per open connection; owned by the monitor */

/* Called on the monitor thread, with the monitor's lock held, when a watched
 * connection's peer hangs up: it must only flag and cancel (no blocking, no
 * monitor calls). */
typedef void (*ilab_conn_gone_fn)(void *ctx);

ilab_status ilab_conn_monitor_start(double head_timeout_seconds, ilab_conn_monitor **out);
/* Join the thread and free every record. After the HTTP daemon stopped. */
void ilab_conn_monitor_stop(ilab_conn_monitor *m);

/* The per-address connection budget: at most `per_client` open connections
 * from one client address, and `per_loopback` from one loopback address
 * (0: no limit; only the server's own max_connections then applies).
 * Loopback has its own budget because every local process, and every
 * client of a reverse proxy on the same host, shares its one address: one
 * budget for all of them lets one local process lock out the rest, the
 * local health checker included (docs/http-api.md). Before the daemon
 * starts. */
void ilab_conn_monitor_set_limits(ilab_conn_monitor *m, int per_client, int per_loopback);

/* libmicrohttpd's STARTED / CLOSED notifications (its threads). `client`
 * is the peer's address (may be NULL: no budget applies). A connection
 * over its address's budget is shut down at once; its record stays until
 * CLOSED, counting for nothing. */
ilab_conn *ilab_conn_opened(ilab_conn_monitor *m, int fd, const struct sockaddr *client);
void ilab_conn_closed(ilab_conn_monitor *m, ilab_conn *k);

/* A request head arrived (the deadline stops) / its response ended (the
 * deadline for the next head starts). */
void ilab_conn_request_began(ilab_conn_monitor *m, ilab_conn *k);
void ilab_conn_request_ended(ilab_conn_monitor *m, ilab_conn *k);

/* Until ilab_conn_unwatch: call gone(ctx) once if the peer hangs up (at
 * once if it already has), or when the connection closes. Returns the watch
 * id, 0 when out of resources. */
uint64_t ilab_conn_watch(ilab_conn_monitor *m, ilab_conn *k, ilab_conn_gone_fn gone,
                         void *ctx);
/* By id, because the record may be gone already (closed). After it returns,
 * gone() is not running and will not run. */
void ilab_conn_unwatch(ilab_conn_monitor *m, uint64_t watch_id);

/* The socket of the one connection served by the calling libmicrohttpd
 * thread that is waiting for a request head; -1 when there are none or
 * several. For a library error about a request no callback has named yet
 * (an unsupported HTTP version): on its own thread, while it reports the
 * error, that request's connection is one of these, so when it is the only
 * one it is the one. */
int ilab_conn_sole_head_waiter(ilab_conn_monitor *m);

/* Connections shut down for being over their address's budget, so far. */
uint64_t ilab_conn_monitor_over_limit(ilab_conn_monitor *m);

/* Connections shut down for missing the head deadline, so far. */
uint64_t ilab_conn_monitor_head_timeouts(ilab_conn_monitor *m);

#endif
