/* What worker.c (the process, its reader and call threads) and
 * worker_calls.c (what each backend call sends and answers) share. Nothing
 * outside the worker includes this. */
#ifndef ILAB_HOST_ISOLATION_WORKER_INTERNAL_H
#define ILAB_HOST_ISOLATION_WORKER_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "../loader/plugin_loader.h"
#include "wire.h"

/* A generate() call waiting for the host's answer to the event it sent. */
typedef struct ilab_worker_ack {
    struct ilab_worker_ack *next;
    uint64_t call_id;
    bool answered;
    int stop;
} ilab_worker_ack;

typedef struct ilab_worker {
    int fd;                      /* the socket to the host */
    pthread_mutex_t write_lock;  /* one message at a time on fd */
    pthread_mutex_t lock;        /* guards everything below */
    pthread_cond_t acked, reader_free;
    bool host_gone;
    ilab_worker_ack *acks;       /* generate() calls waiting for an answer */
    bool reading;                /* a thread is reading the socket (worker.c) */
    int idle;                    /* threads waiting to read */

    /* Set by the HELLO/CREATE path, then read-only. */
    ilab_plugin *plugin;
    const ilab_backend_api_t *api;
    ilab_backend_t *backend;     /* NULL until CREATE succeeded */
    int32_t vocab;               /* model_info's, for eval()'s logits rows */
    ilab_host_t host;            /* handed to the plugin: the host's header, our services */
} ilab_worker;

/* Load the plugin and send HELLO (its entry and manifest, or why it could
 * not be loaded). false when it could not: the worker then exits. */
bool ilab_worker_hello(ilab_worker *w, const char *path);

/* Run one call and send its REPLY (GENERATE: its events first). */
void ilab_worker_serve(ilab_worker *w, const ilab_wire_header *h, const unsigned char *payload);

void ilab_worker_ack_wait_begin(ilab_worker *w, ilab_worker_ack *a, uint64_t call_id);
/* The host's answer to the last event: nonzero = stop. */
int ilab_worker_ack_wait(ilab_worker *w, ilab_worker_ack *a);
void ilab_worker_ack_wait_end(ilab_worker *w, ilab_worker_ack *a);

#endif
