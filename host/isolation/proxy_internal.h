/* What proxy.c (workers, the connection, waiting for answers) and
 * proxy_calls.c (the forwarding backend table) share. Nothing outside the
 * proxy includes this. */
#ifndef ILAB_HOST_ISOLATION_PROXY_INTERNAL_H
#define ILAB_HOST_ISOLATION_PROXY_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "proxy.h"
#include "wire.h"

/* One proxy plugin: what every worker of it is started with. It is the
 * host_data of the plugin's host table, which is how probe() and create(),
 * which have no instance, know which plugin they are. */
typedef struct ilab_proxy_target {
    uint64_t magic;
    char *path;
    ilab_proxy_options options;
} ilab_proxy_target;

#define ILAB_PROXY_MAGIC 0x696c61622d707278ull /* "ilab-prx" */

/* A call waiting for the worker: its REPLY, or for generate() the next
 * EVENT first. One message at a time: the worker sends the next event only
 * after the caller has answered the last. */
typedef struct ilab_proxy_call {
    struct ilab_proxy_call *next;
    uint64_t id;
    bool has_msg;
    ilab_wire_header h;
    unsigned char *payload;
} ilab_proxy_call;

/* A connection to one worker process: an instance, or a probe's worker. */
typedef struct ilab_proxy_conn {
    struct ilab_proxy_conn *next_conn; /* every open connection (proxy.c) */
    const ilab_proxy_target *target;
    int fd;
    pid_t pid;
    ilab_proxy_call hello; /* the worker's HELLO, kept: the entry and manifest */
    pthread_mutex_t write_lock;
    pthread_mutex_t lock; /* guards everything below */
    pthread_cond_t arrived;  /* a message was handed to a call, or the reading is free */
    bool reading;            /* a waiting caller is reading the socket (proxy.c) */
    ilab_proxy_call *calls;
    uint64_t next_id;
    int32_t vocab;         /* model_info's, from CREATE: eval()'s row length */
    bool reaped; /* the worker's pid is no longer its own: never signal it */
    bool dead;
    char death[512];      /* why, once dead */
    char last_error[4096]; /* the instance's last non-OK message [ERR-4] */
} ilab_proxy_conn;

/* The target of a host table, or NULL when it is not a proxy's. */
const ilab_proxy_target *ilab_proxy_target_of(const ilab_host_t *host);

/* Start a worker for `t` and read its HELLO (kept in c->hello); on failure,
 * the plugin refused or the worker died, `err` says why. */
ilab_status ilab_proxy_conn_open(const ilab_proxy_target *t, char *err, size_t err_cap,
                                 ilab_proxy_conn **out);
/* Ask the worker to end (DESTROY), wait for it within the call timeout
 * (kill it past that), free. NULL is a no-op. */
void ilab_proxy_conn_close(ilab_proxy_conn *c);

/* Send a request and wait for the first message of its answer. false when
 * the worker is dead or timed out: c->death says why. The call stays
 * registered until ilab_proxy_call_end. */
bool ilab_proxy_call_begin(ilab_proxy_conn *c, ilab_proxy_call *call, uint32_t op,
                           const ilab_wire_out *args);
/* Done with the message a call holds: the slot takes the next one. Before
 * anything that lets the worker send that next one (an EVENT_ACK), or it
 * could land in a slot still full and be lost. */
void ilab_proxy_call_consume(ilab_proxy_conn *c, ilab_proxy_call *call);
/* The next message of a call (generate()'s events, then its REPLY), after
 * ilab_proxy_call_consume. */
bool ilab_proxy_call_next(ilab_proxy_conn *c, ilab_proxy_call *call);
/* Send a message for a call in flight (EVENT_ACK). */
bool ilab_proxy_call_send(ilab_proxy_conn *c, ilab_proxy_call *call, uint32_t op,
                          const ilab_wire_out *args);
void ilab_proxy_call_end(ilab_proxy_conn *c, ilab_proxy_call *call);

/* Remember a message as the instance's last error. */
void ilab_proxy_set_error(ilab_proxy_conn *c, const char *msg);

/* The forwarding backend table (proxy_calls.c). */
extern const ilab_backend_api_t ilab_proxy_api;

#endif
