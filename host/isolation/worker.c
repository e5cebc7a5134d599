/* The backend worker process (worker.h): the plugin, its one instance, the
 * reader loop and the threads that run calls. What each call sends and
 * answers is worker_calls.c. */
#include "worker.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "worker_internal.h"

bool ilab_worker_requested(int argc, char **argv)
{
    return argc >= 2 && !strcmp(argv[1], ILAB_WORKER_ARG);
}

/* --- event acknowledgements -------------------------------------------------
 * generate() runs the plugin's stream on a call thread; each event waits
 * for the host's answer (continue or stop), which the reader thread hands
 * over here. */

void ilab_worker_ack_wait_begin(ilab_worker *w, ilab_worker_ack *a, uint64_t call_id)
{
    a->call_id = call_id;
    a->answered = false;
    pthread_mutex_lock(&w->lock);
    a->next = w->acks;
    w->acks = a;
    pthread_mutex_unlock(&w->lock);
}

int ilab_worker_ack_wait(ilab_worker *w, ilab_worker_ack *a)
{
    pthread_mutex_lock(&w->lock);
    while (!a->answered && !w->host_gone)
        pthread_cond_wait(&w->acked, &w->lock);
    int stop = a->answered ? a->stop : 1;
    a->answered = false;
    pthread_mutex_unlock(&w->lock);
    return stop;
}

void ilab_worker_ack_wait_end(ilab_worker *w, ilab_worker_ack *a)
{
    pthread_mutex_lock(&w->lock);
    for (ilab_worker_ack **p = &w->acks; *p; p = &(*p)->next)
        if (*p == a) {
            *p = a->next;
            break;
        }
    pthread_mutex_unlock(&w->lock);
}

static void ack_arrived(ilab_worker *w, uint64_t call_id, int stop)
{
    pthread_mutex_lock(&w->lock);
    for (ilab_worker_ack *a = w->acks; a; a = a->next)
        if (a->call_id == call_id) {
            a->stop = stop;
            a->answered = true;
        }
    pthread_cond_broadcast(&w->acked);
    pthread_mutex_unlock(&w->lock);
}

/* --- call threads -------------------------------------------------------------
 * Leader and followers: one thread at a time reads the socket. Having read
 * a call, it hands the reading on to an idle thread (starting one when none
 * is idle) and runs the call itself, so a call starts on the very thread
 * that woke for it: the hand-over is off the call's path. A call never
 * waits for another (under thread_safety sequence or full the host
 * overlaps calls, and a generate() stream lasts a whole request).
 * Acknowledgements, cancel() and DESTROY are handled by the reader without
 * giving up the reading: cancel() must overtake the generate() it cancels,
 * and DESTROY comes after the host's last call returned. */

/* The host is gone (end of stream): nothing is waiting for any answer, and
 * the plugin's destroy() might hang or crash, so leave at once. */
static void host_gone(ilab_worker *w)
{
    pthread_mutex_lock(&w->lock);
    w->host_gone = true;
    pthread_cond_broadcast(&w->acked);
    pthread_mutex_unlock(&w->lock);
    _exit(0);
}

/* Read until a call to run arrives; handle the rest in passing. */
static void read_call(ilab_worker *w, ilab_wire_header *h, unsigned char **payload)
{
    for (;;) {
        if (!ilab_wire_recv(w->fd, h, payload))
            host_gone(w);
        if (h->op == ILAB_WIRE_EVENT_ACK) {
            ilab_wire_in in = {*payload, h->len, 0, false};
            ack_arrived(w, h->call_id, (int)ilab_wire_get_u32(&in));
        } else if (h->op == ILAB_WIRE_CANCEL || h->op == ILAB_WIRE_DESTROY) {
            ilab_worker_serve(w, h, *payload);
        } else {
            return;
        }
        free(*payload);
    }
}

static void *call_thread(void *arg);

static void start_thread(ilab_worker *w)
{
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int e = pthread_create(&t, &attr, call_thread, w);
    pthread_attr_destroy(&attr);
    if (e) {
        fprintf(stderr, "inferlab backend worker: cannot start a thread: %s\n", strerror(e));
        _exit(70);
    }
}

static void *call_thread(void *arg)
{
    ilab_worker *w = arg;
    for (;;) {
        pthread_mutex_lock(&w->lock);
        w->idle++;
        while (w->reading)
            pthread_cond_wait(&w->reader_free, &w->lock);
        w->idle--;
        w->reading = true;
        pthread_mutex_unlock(&w->lock);

        ilab_wire_header h;
        unsigned char *payload;
        read_call(w, &h, &payload);

        pthread_mutex_lock(&w->lock);
        w->reading = false;
        bool start = w->idle == 0; /* nobody left to read: one more thread */
        pthread_cond_signal(&w->reader_free);
        pthread_mutex_unlock(&w->lock);
        if (start)
            start_thread(w);
        ilab_worker_serve(w, &h, payload);
        free(payload);
    }
    return NULL;
}

/* --- the process ------------------------------------------------------------------ */

int ilab_worker_main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s %s PLUGIN.so (started by the host, not by hand)\n",
                argv[0], ILAB_WORKER_ARG);
        return 2;
    }
    /* Die with the host: a worker never outlives the process that serves
     * its answers, even when the host is killed outright. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() == 1)
        return 0;
    signal(SIGPIPE, SIG_IGN);

    static ilab_worker w = {.fd = ILAB_WORKER_FD,
                            .lock = PTHREAD_MUTEX_INITIALIZER,
                            .write_lock = PTHREAD_MUTEX_INITIALIZER,
                            .acked = PTHREAD_COND_INITIALIZER,
                            .reader_free = PTHREAD_COND_INITIALIZER};
    if (fcntl(w.fd, F_GETFD) < 0) {
        fprintf(stderr, "%s: descriptor %d is not open: started by hand, not by the host\n",
                argv[0], ILAB_WORKER_FD);
        return 2;
    }
    if (!ilab_worker_hello(&w, argv[2]))
        return 0; /* the host has the reason */
    call_thread(&w);
    return 0;
}
