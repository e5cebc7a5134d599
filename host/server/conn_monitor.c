/* The connection monitor thread: head deadlines and hang-up watching. */
#include "conn_monitor.h"

#include "auth.h"

#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* How often deadlines are checked: the head deadline is met to within this. */
#define SCAN_MS 100

struct ilab_conn {
    int fd;                 /* libmicrohttpd's; valid until ilab_conn_closed */
    pthread_t owner;        /* the libmicrohttpd thread that serves it */
    struct sockaddr_storage addr; /* the client's (port zeroed): the per-address budget */
    bool has_addr;
    bool loopback;
    bool over_limit;        /* refused for its address's budget: shut down at once */
    uint64_t serial;        /* the epoll key: a stale event never finds a freed record */
    bool in_request;        /* a head arrived and its response has not ended */
    bool shut;              /* the deadline passed and the socket was shut down */
    uint64_t head_deadline_ns;
    ilab_conn_gone_fn gone; /* non-NULL while watched */
    void *gone_ctx;
    ilab_conn *prev, *next;
};

struct ilab_conn_monitor {
    pthread_mutex_t mu;     /* guards everything below and every record */
    pthread_t thread;
    int epfd;
    int stop_pipe[2];
    uint64_t head_timeout_ns;
    uint64_t next_serial;
    uint64_t head_timeouts;
    uint64_t over_limit;    /* connections refused for their address's budget */
    int per_client;         /* open connections per client address; 0 = no limit */
    int per_loopback;       /* the same for a loopback address; 0 = no limit */
    ilab_conn *head;        /* every open connection */
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static ilab_conn *find_serial(ilab_conn_monitor *m, uint64_t serial)
{
    for (ilab_conn *k = m->head; k; k = k->next)
        if (k->serial == serial)
            return k;
    return NULL;
}

/* Under m->mu: the watched peer left; tell the owner once. */
static void report_gone(ilab_conn_monitor *m, ilab_conn *k)
{
    ilab_conn_gone_fn fn = k->gone;
    k->gone = NULL;
    epoll_ctl(m->epfd, EPOLL_CTL_DEL, k->fd, NULL);
    if (fn)
        fn(k->gone_ctx);
}

static void scan_deadlines(ilab_conn_monitor *m)
{
    uint64_t now = now_ns();
    for (ilab_conn *k = m->head; k; k = k->next) {
        if (k->in_request || k->shut || now < k->head_deadline_ns)
            continue;
        k->shut = true;
        m->head_timeouts++;
        shutdown(k->fd, SHUT_RDWR);
    }
}

static void *monitor_main(void *arg)
{
    ilab_conn_monitor *m = arg;
    for (;;) {
        struct epoll_event evs[64];
        int n = epoll_wait(m->epfd, evs, 64, SCAN_MS);
        pthread_mutex_lock(&m->mu);
        bool stop = false;
        for (int i = 0; i < n; i++) {
            if (evs[i].data.u64 == 0) {
                stop = true;
                continue;
            }
            ilab_conn *k = find_serial(m, evs[i].data.u64);
            if (k && k->gone)
                report_gone(m, k);
        }
        scan_deadlines(m);
        pthread_mutex_unlock(&m->mu);
        if (stop)
            return NULL;
    }
}

ilab_status ilab_conn_monitor_start(double head_timeout_seconds, ilab_conn_monitor **out)
{
    ilab_conn_monitor *m = calloc(1, sizeof *m);
    if (!m)
        return ILAB_OUT_OF_MEMORY;
    m->head_timeout_ns = (uint64_t)(head_timeout_seconds * 1e9);
    m->next_serial = 1; /* 0 is the stop pipe's key */
    m->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (m->epfd < 0 || pipe(m->stop_pipe)) {
        if (m->epfd >= 0)
            close(m->epfd);
        free(m);
        return ILAB_IO;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 0};
    epoll_ctl(m->epfd, EPOLL_CTL_ADD, m->stop_pipe[0], &ev);
    pthread_mutex_init(&m->mu, NULL);
    if (pthread_create(&m->thread, NULL, monitor_main, m)) {
        pthread_mutex_destroy(&m->mu);
        close(m->stop_pipe[0]);
        close(m->stop_pipe[1]);
        close(m->epfd);
        free(m);
        return ILAB_IO;
    }
    *out = m;
    return ILAB_OK;
}

void ilab_conn_monitor_stop(ilab_conn_monitor *m)
{
    if (!m)
        return;
    char b = 0;
    while (write(m->stop_pipe[1], &b, 1) < 0)
        ;
    pthread_join(m->thread, NULL);
    while (m->head) {
        ilab_conn *next = m->head->next;
        free(m->head);
        m->head = next;
    }
    close(m->stop_pipe[0]);
    close(m->stop_pipe[1]);
    close(m->epfd);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

void ilab_conn_monitor_set_limits(ilab_conn_monitor *m, int per_client, int per_loopback)
{
    pthread_mutex_lock(&m->mu);
    m->per_client = per_client > 0 ? per_client : 0;
    m->per_loopback = per_loopback > 0 ? per_loopback : 0;
    pthread_mutex_unlock(&m->mu);
}

/* The client's address without its port, so that equal addresses compare
 * equal byte for byte. */
static bool address_key(const struct sockaddr *a, struct sockaddr_storage *out)
{
    memset(out, 0, sizeof *out);
    if (a && a->sa_family == AF_INET) {
        struct sockaddr_in *in = (struct sockaddr_in *)out;
        in->sin_family = AF_INET;
        in->sin_addr = ((const struct sockaddr_in *)a)->sin_addr;
        return true;
    }
    if (a && a->sa_family == AF_INET6) {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)out;
        in6->sin6_family = AF_INET6;
        in6->sin6_addr = ((const struct sockaddr_in6 *)a)->sin6_addr;
        return true;
    }
    return false;
}

/* Under m->mu: is `k` one too many for its address? Its open connections
 * are counted by a walk over the list: a few thousand compares per accept,
 * which is cheap next to the accept itself. */
static bool over_budget(const ilab_conn_monitor *m, const ilab_conn *k)
{
    int limit = k->loopback ? m->per_loopback : m->per_client;
    if (!k->has_addr || limit == 0)
        return false;
    int n = 0;
    for (const ilab_conn *o = m->head; o; o = o->next)
        n += o->has_addr && !o->over_limit && !memcmp(&o->addr, &k->addr, sizeof k->addr);
    return n >= limit;
}

ilab_conn *ilab_conn_opened(ilab_conn_monitor *m, int fd, const struct sockaddr *client)
{
    ilab_conn *k = calloc(1, sizeof *k);
    if (!k)
        return NULL;
    k->fd = fd;
    k->owner = pthread_self(); /* STARTED runs on the thread that will serve it */
    k->has_addr = address_key(client, &k->addr);
    k->loopback = k->has_addr && ilab_addr_is_loopback((const struct sockaddr *)&k->addr);
    pthread_mutex_lock(&m->mu);
    if (over_budget(m, k)) {
        /* Closed at once: libmicrohttpd reads the end of stream and closes it. */
        k->over_limit = true;
        k->shut = true;
        m->over_limit++;
        shutdown(fd, SHUT_RDWR);
    }
    k->serial = m->next_serial++;
    k->head_deadline_ns = now_ns() + m->head_timeout_ns;
    k->next = m->head;
    if (m->head)
        m->head->prev = k;
    m->head = k;
    pthread_mutex_unlock(&m->mu);
    return k;
}

void ilab_conn_closed(ilab_conn_monitor *m, ilab_conn *k)
{
    if (!k)
        return;
    pthread_mutex_lock(&m->mu);
    if (k->gone) {
        /* Its owner still watches: the connection ending is its hang-up. */
        report_gone(m, k);
    }
    if (k->prev)
        k->prev->next = k->next;
    else
        m->head = k->next;
    if (k->next)
        k->next->prev = k->prev;
    pthread_mutex_unlock(&m->mu);
    free(k);
}

void ilab_conn_request_began(ilab_conn_monitor *m, ilab_conn *k)
{
    if (!k)
        return;
    pthread_mutex_lock(&m->mu);
    k->in_request = true;
    pthread_mutex_unlock(&m->mu);
}

void ilab_conn_request_ended(ilab_conn_monitor *m, ilab_conn *k)
{
    if (!k)
        return;
    pthread_mutex_lock(&m->mu);
    k->in_request = false;
    k->head_deadline_ns = now_ns() + m->head_timeout_ns;
    pthread_mutex_unlock(&m->mu);
}

uint64_t ilab_conn_watch(ilab_conn_monitor *m, ilab_conn *k, ilab_conn_gone_fn gone,
                         void *ctx)
{
    if (!k)
        return 0;
    pthread_mutex_lock(&m->mu);
    k->gone = gone;
    k->gone_ctx = ctx;
    /* Level-triggered: a peer that already left is reported on the next wait. */
    struct epoll_event ev = {.events = EPOLLRDHUP, .data.u64 = k->serial};
    bool ok = epoll_ctl(m->epfd, EPOLL_CTL_ADD, k->fd, &ev) == 0;
    if (!ok)
        k->gone = NULL;
    pthread_mutex_unlock(&m->mu);
    return ok ? k->serial : 0;
}

void ilab_conn_unwatch(ilab_conn_monitor *m, uint64_t watch_id)
{
    if (!watch_id)
        return;
    pthread_mutex_lock(&m->mu);
    ilab_conn *k = find_serial(m, watch_id);
    if (k && k->gone) {
        k->gone = NULL;
        epoll_ctl(m->epfd, EPOLL_CTL_DEL, k->fd, NULL);
    }
    pthread_mutex_unlock(&m->mu);
}

uint64_t ilab_conn_monitor_over_limit(ilab_conn_monitor *m)
{
    pthread_mutex_lock(&m->mu);
    uint64_t n = m->over_limit;
    pthread_mutex_unlock(&m->mu);
    return n;
}

uint64_t ilab_conn_monitor_head_timeouts(ilab_conn_monitor *m)
{
    pthread_mutex_lock(&m->mu);
    uint64_t n = m->head_timeouts;
    pthread_mutex_unlock(&m->mu);
    return n;
}

int ilab_conn_sole_head_waiter(ilab_conn_monitor *m)
{
    pthread_t self = pthread_self();
    int fd = -1, found = 0;
    pthread_mutex_lock(&m->mu);
    for (ilab_conn *k = m->head; k && found < 2; k = k->next) {
        if (k->in_request || k->shut || !pthread_equal(k->owner, self))
            continue;
        /* One whose reading side has ended (the peer closed, or it was
         * refused and shut down, and libmicrohttpd has not noticed yet) is
         * waiting for nothing. */
        char b;
        if (recv(k->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0)
            continue;
        fd = k->fd;
        found++;
    }
    pthread_mutex_unlock(&m->mu);
    return found == 1 ? fd : -1;
}
