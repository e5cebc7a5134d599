/* The host side of a worker: starting it, reading its answers and handing
 * each to the call waiting for it, deadlines, and what a worker's death
 * means for the calls in flight (proxy.h). */
#include "proxy.h"

#include <errno.h>
#include <signal.h>
#include <poll.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "proxy_internal.h"
#include "worker.h"

extern char **environ;

static void mark_dead_locked(ilab_proxy_conn *c);

/* Every open connection, for ilab_proxy_kill_busy. */
static pthread_mutex_t conns_lock = PTHREAD_MUTEX_INITIALIZER;
static ilab_proxy_conn *conns;

static void conns_add(ilab_proxy_conn *c)
{
    pthread_mutex_lock(&conns_lock);
    c->next_conn = conns;
    conns = c;
    pthread_mutex_unlock(&conns_lock);
}

static void conns_remove(ilab_proxy_conn *c)
{
    pthread_mutex_lock(&conns_lock);
    for (ilab_proxy_conn **p = &conns; *p; p = &(*p)->next_conn)
        if (*p == c) {
            *p = c->next_conn;
            break;
        }
    pthread_mutex_unlock(&conns_lock);
}

bool ilab_proxy_instance_dead(const ilab_plugin *plugin, const ilab_backend_t *backend,
                              char *why, size_t cap)
{
    if (!plugin || !backend || !ilab_proxy_target_of(ilab_plugin_host(plugin)))
        return false;
    ilab_proxy_conn *c = (ilab_proxy_conn *)backend;
    pthread_mutex_lock(&c->lock);
    /* Nobody reads an idle worker's socket: look for its end here. */
    struct pollfd p = {.fd = c->fd, .events = POLLIN};
    char byte;
    if (!c->dead && !c->reading && poll(&p, 1, 0) == 1 &&
        recv(c->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0)
        mark_dead_locked(c);
    bool dead = c->dead;
    if (dead && why && cap)
        snprintf(why, cap, "%s", c->death);
    pthread_mutex_unlock(&c->lock);
    return dead;
}

int ilab_proxy_kill_busy(const char *why)
{
    int n = 0;
    pthread_mutex_lock(&conns_lock);
    for (ilab_proxy_conn *c = conns; c; c = c->next_conn) {
        pthread_mutex_lock(&c->lock);
        if (c->calls && !c->reaped) {
            if (!c->death[0])
                snprintf(c->death, sizeof c->death, "backend worker for %s (pid %d) killed: %s",
                         c->target->path, (int)c->pid, why);
            kill(c->pid, SIGKILL);
            n++;
        }
        pthread_mutex_unlock(&c->lock);
    }
    pthread_mutex_unlock(&conns_lock);
    return n;
}

const ilab_proxy_target *ilab_proxy_target_of(const ilab_host_t *host)
{
    if (!host || host->struct_size < offsetof(ilab_host_t, host_data) + sizeof(void *))
        return NULL;
    const ilab_proxy_target *t = host->host_data;
    return t && t->magic == ILAB_PROXY_MAGIC ? t : NULL;
}

/* --- death ------------------------------------------------------------------- */

static void describe_exit(int status, char *out, size_t cap)
{
    if (WIFSIGNALED(status))
        snprintf(out, cap, "killed by signal %d (SIG%s)", WTERMSIG(status),
                 sigabbrev_np(WTERMSIG(status)) ? sigabbrev_np(WTERMSIG(status)) : "?");
    else if (WIFEXITED(status))
        snprintf(out, cap, "exited with status %d", WEXITSTATUS(status));
    else
        snprintf(out, cap, "ended (wait status %d)", status);
}

/* The end of the stream: the worker is gone, or closed its socket (plugin
 * code can close any descriptor), so it is killed to be sure. It is not
 * reaped yet, so its pid is still its own: killing it cannot hit another
 * process. Then every call is told. Called with c->lock held. */
static void mark_dead_locked(ilab_proxy_conn *c)
{
    if (c->reaped)
        return;
    int status = 0;
    pid_t r;
    kill(c->pid, SIGKILL);
    while ((r = waitpid(c->pid, &status, 0)) < 0 && errno == EINTR)
        ;
    c->reaped = true;
    char how[128];
    if (r == c->pid)
        describe_exit(status, how, sizeof how);
    else
        snprintf(how, sizeof how, "could not be waited for (%s)", strerror(errno));
    if (!c->death[0]) /* a deadline that killed it has said why already */
        snprintf(c->death, sizeof c->death, "backend worker for %s (pid %d) %s", c->target->path,
                 (int)c->pid, how);
    c->dead = true;
    pthread_cond_broadcast(&c->arrived);
}

static ilab_proxy_call *call_of(ilab_proxy_conn *c, uint64_t id)
{
    for (ilab_proxy_call *k = c->calls; k; k = k->next)
        if (k->id == id)
            return k;
    return NULL;
}

/* Read one message and hand it to the call it answers (an answer nobody
 * waits for any more, a timed-out call's, is dropped). Returns 1 when a
 * message was read, 0 when `deadline` passed first, -1 at the end of the
 * stream. Called without c->lock, by the one caller that reads. */
static int read_one(ilab_proxy_conn *c, const struct timespec *deadline)
{
    for (;;) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        double left = (double)(deadline->tv_sec - now.tv_sec) +
                      (double)(deadline->tv_nsec - now.tv_nsec) / 1e9;
        if (left <= 0)
            return 0;
        struct pollfd p = {.fd = c->fd, .events = POLLIN};
        int n = poll(&p, 1, left > 3600 ? 3600000 : (int)(left * 1000) + 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n == 0)
            continue; /* the clock decides, above */
        break;
    }
    ilab_wire_header h;
    unsigned char *payload;
    if (!ilab_wire_recv(c->fd, &h, &payload))
        return -1;
    pthread_mutex_lock(&c->lock);
    ilab_proxy_call *k = call_of(c, h.call_id);
    if (k && !k->has_msg) {
        k->h = h;
        k->payload = payload;
        k->has_msg = true;
        payload = NULL;
    }
    pthread_mutex_unlock(&c->lock);
    free(payload);
    return 1;
}

/* --- starting a worker ------------------------------------------------------------ */

static pid_t spawn_worker(const char *path, int fd, char *err, size_t err_cap)
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fd, ILAB_WORKER_FD);
    /* Nothing else of the host's leaks into the plugin's process: not the
     * listening socket, not clients' connections, not other workers'. */
    posix_spawn_file_actions_addclosefrom_np(&fa, ILAB_WORKER_FD + 1);
    char *argv[] = {"inferlab-backend-worker", ILAB_WORKER_ARG, (char *)path, NULL};
    pid_t pid;
    int e = posix_spawn(&pid, "/proc/self/exe", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (e) {
        snprintf(err, err_cap, "%s: cannot start a backend worker: %s", path, strerror(e));
        return -1;
    }
    return pid;
}

static void conn_free(ilab_proxy_conn *c)
{
    pthread_mutex_destroy(&c->lock);
    pthread_mutex_destroy(&c->write_lock);
    pthread_cond_destroy(&c->arrived);
    free(c);
}

/* The worker's first message: the plugin loaded, or why not. */
static bool wait_message(ilab_proxy_conn *c, ilab_proxy_call *call, uint32_t op);

static ilab_status read_hello(ilab_proxy_conn *c, char *err, size_t err_cap)
{
    if (!wait_message(c, &c->hello, ILAB_WIRE_HELLO)) {
        snprintf(err, err_cap, "%s", c->death);
        return ILAB_IO;
    }
    pthread_mutex_lock(&c->lock);
    c->calls = c->hello.next; /* HELLO is answered: unregister it */
    pthread_mutex_unlock(&c->lock);
    ilab_wire_in in = {c->hello.payload, c->hello.h.len, 0, false};
    ilab_status st = (ilab_status)ilab_wire_get_u32(&in);
    bool present;
    size_t n;
    const char *msg = ilab_wire_get_opt(&in, &present, &n);
    if (in.bad || (st != ILAB_OK && (!msg || !n || msg[n - 1]))) {
        snprintf(err, err_cap, "%s: malformed HELLO from the backend worker", c->target->path);
        return ILAB_INTERNAL;
    }
    if (st != ILAB_OK)
        snprintf(err, err_cap, "%s", msg);
    return st;
}

ilab_status ilab_proxy_conn_open(const ilab_proxy_target *t, char *err, size_t err_cap,
                                 ilab_proxy_conn **out)
{
    ilab_proxy_conn *c = calloc(1, sizeof *c);
    int sv[2];
    if (!c || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) {
        free(c);
        snprintf(err, err_cap, "%s: cannot start a backend worker: %s", t->path, strerror(errno));
        return ILAB_IO;
    }
    c->target = t;
    c->fd = sv[0];
    c->next_id = 1;
    pthread_mutex_init(&c->lock, NULL);
    pthread_mutex_init(&c->write_lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->arrived, &ca);
    pthread_condattr_destroy(&ca);
    /* HELLO (call id 0) is the worker's first word. */
    c->calls = &c->hello;
    c->pid = spawn_worker(t->path, sv[1], err, err_cap);
    close(sv[1]);
    if (c->pid < 0) {
        close(c->fd);
        conn_free(c);
        return ILAB_IO;
    }
    conns_add(c);
    ilab_status st = read_hello(c, err, err_cap);
    if (st != ILAB_OK) {
        ilab_proxy_conn_close(c);
        return st;
    }
    *out = c;
    return ILAB_OK;
}

/* --- calls ------------------------------------------------------------------------ */

static void deadline_after(double seconds, struct timespec *ts)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    double whole = (double)(time_t)seconds;
    ts->tv_sec += (time_t)seconds;
    ts->tv_nsec += (long)((seconds - whole) * 1e9);
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

static const char *op_name(uint32_t op)
{
    static const char *const names[ILAB_WIRE_OP_END] = {
        [ILAB_WIRE_PROBE] = "probe",           [ILAB_WIRE_CREATE] = "create",
        [ILAB_WIRE_DESTROY] = "destroy",       [ILAB_WIRE_MODEL_INFO] = "model_info",
        [ILAB_WIRE_TOKENIZE] = "tokenize",     [ILAB_WIRE_DETOKENIZE] = "detokenize",
        [ILAB_WIRE_TOKEN_PIECE] = "token_piece", [ILAB_WIRE_SEQ_CREATE] = "seq_create",
        [ILAB_WIRE_SEQ_FREE] = "seq_free",     [ILAB_WIRE_SEQ_FORK] = "seq_fork",
        [ILAB_WIRE_SEQ_TRUNCATE] = "seq_truncate", [ILAB_WIRE_SEQ_LENGTH] = "seq_length",
        [ILAB_WIRE_EVAL] = "eval",             [ILAB_WIRE_GENERATE] = "generate",
        [ILAB_WIRE_CANCEL] = "cancel",         [ILAB_WIRE_CACHE_STATS] = "cache_stats",
        [ILAB_WIRE_EOG_IDS] = "eog_ids",       [ILAB_WIRE_CHAT_TEMPLATE] = "chat_template",
    };
    return op < ILAB_WIRE_OP_END && names[op] ? names[op] : "call";
}

/* Past the deadline the worker is killed (with why): whoever reads then
 * sees the end of the stream. Called with c->lock held. */
static void timed_out_locked(ilab_proxy_conn *c, uint32_t op)
{
    if (!c->death[0])
        snprintf(c->death, sizeof c->death,
                 "backend worker for %s (pid %d) killed: %s did not answer within %g s",
                 c->target->path, (int)c->pid, op_name(op), c->target->options.call_timeout_s);
    if (!c->reaped)
        kill(c->pid, SIGKILL);
}

/* Wait for the next message of `call`. The callers waiting on one worker
 * take turns reading its socket (leader and followers): when none reads,
 * the waiting caller does, and hands each message it reads to its call,
 * so an answer wakes the one thread waiting for it and no other. */
static bool wait_message(ilab_proxy_conn *c, ilab_proxy_call *call, uint32_t op)
{
    struct timespec deadline;
    deadline_after(c->target->options.call_timeout_s, &deadline);
    pthread_mutex_lock(&c->lock);
    while (!call->has_msg && !c->dead) {
        if (!c->reading) {
            c->reading = true;
            pthread_mutex_unlock(&c->lock);
            int r = read_one(c, &deadline);
            pthread_mutex_lock(&c->lock);
            c->reading = false;
            if (r < 0)
                mark_dead_locked(c);
            else if (r == 0 && !call->has_msg) {
                timed_out_locked(c, op);
                deadline_after(3600, &deadline); /* now read the end of the stream */
            }
            /* The message's caller, and someone to read next. */
            pthread_cond_broadcast(&c->arrived);
            continue;
        }
        if (pthread_cond_timedwait(&c->arrived, &c->lock, &deadline) == ETIMEDOUT &&
            !call->has_msg && !c->dead) {
            timed_out_locked(c, op);
            deadline_after(3600, &deadline);
        }
    }
    bool ok = call->has_msg;
    pthread_mutex_unlock(&c->lock);
    return ok;
}

bool ilab_proxy_call_begin(ilab_proxy_conn *c, ilab_proxy_call *call, uint32_t op,
                           const ilab_wire_out *args)
{
    memset(call, 0, sizeof *call);
    pthread_mutex_lock(&c->lock);
    call->id = c->next_id++;
    call->next = c->calls;
    c->calls = call;
    bool dead = c->dead;
    pthread_mutex_unlock(&c->lock);
    if (dead)
        return false;
    if (!ilab_wire_send(c->fd, &c->write_lock, op, call->id, 0, args)) {
        if (args && args->failed) {
            pthread_mutex_lock(&c->lock);
            if (!c->death[0])
                snprintf(c->death, sizeof c->death, "%s: arguments too large to forward",
                         op_name(op));
            pthread_mutex_unlock(&c->lock);
            return false;
        }
        /* A closed socket: the reader will mark the worker dead. */
    }
    return wait_message(c, call, op);
}

void ilab_proxy_call_consume(ilab_proxy_conn *c, ilab_proxy_call *call)
{
    pthread_mutex_lock(&c->lock);
    free(call->payload);
    call->payload = NULL;
    call->has_msg = false;
    pthread_mutex_unlock(&c->lock);
}

bool ilab_proxy_call_next(ilab_proxy_conn *c, ilab_proxy_call *call)
{
    return wait_message(c, call, ILAB_WIRE_GENERATE);
}

bool ilab_proxy_call_send(ilab_proxy_conn *c, ilab_proxy_call *call, uint32_t op,
                          const ilab_wire_out *args)
{
    return ilab_wire_send(c->fd, &c->write_lock, op, call->id, 0, args);
}

void ilab_proxy_call_end(ilab_proxy_conn *c, ilab_proxy_call *call)
{
    pthread_mutex_lock(&c->lock);
    for (ilab_proxy_call **p = &c->calls; *p; p = &(*p)->next)
        if (*p == call) {
            *p = call->next;
            break;
        }
    pthread_mutex_unlock(&c->lock);
    free(call->payload);
    call->payload = NULL;
}

void ilab_proxy_set_error(ilab_proxy_conn *c, const char *msg)
{
    pthread_mutex_lock(&c->lock);
    snprintf(c->last_error, sizeof c->last_error, "%s", msg);
    pthread_mutex_unlock(&c->lock);
}

void ilab_proxy_conn_close(ilab_proxy_conn *c)
{
    if (!c)
        return;
    /* The worker exits after answering DESTROY; one that does not answer in
     * time is killed by the deadline. Either way it is reaped here. */
    ilab_proxy_call call;
    ilab_proxy_call_begin(c, &call, ILAB_WIRE_DESTROY, NULL);
    ilab_proxy_call_end(c, &call);
    pthread_mutex_lock(&c->lock);
    mark_dead_locked(c);
    pthread_mutex_unlock(&c->lock);
    conns_remove(c);
    close(c->fd);
    free(c->hello.payload);
    conn_free(c);
}

/* --- loading ---------------------------------------------------------------------- */

static ilab_status load_from_hello(ilab_proxy_conn *c, char *err, size_t err_cap,
                                   ilab_plugin **out)
{
    ilab_wire_in in = {c->hello.payload, c->hello.h.len, 0, false};
    bool present;
    size_t n;
    ilab_wire_get_u32(&in); /* the status, OK: read_hello checked it */
    ilab_wire_get_opt(&in, &present, &n);
    ilab_plugin_entry_t e = {0};
    e.struct_size = ilab_wire_get_u32(&in);
    e.abi_major = ilab_wire_get_u32(&in);
    e.abi_minor = ilab_wire_get_u32(&in);
    uint32_t table_size = ilab_wire_get_u32(&in);
    e.name = ilab_wire_get_opt(&in, &present, &n);
    e.version = ilab_wire_get_opt(&in, &present, &n);
    e.manifest_yaml = ilab_wire_get_opt(&in, &present, &n);
    if (in.bad) {
        snprintf(err, err_cap, "%s: malformed HELLO from the backend worker", c->target->path);
        return ILAB_INTERNAL;
    }
    return ilab_plugin_remote(c->target->path, &e, &ilab_proxy_api, table_size,
                              (void *)c->target, err, err_cap, out);
}

static void target_free(void *data)
{
    ilab_proxy_target *t = data;
    free(t->path);
    free(t);
}

ilab_status ilab_proxy_load(const char *path, const ilab_proxy_options *options, char *err,
                            size_t err_cap, ilab_plugin **out)
{
    if (err && err_cap)
        err[0] = '\0';
    ilab_proxy_target *t = calloc(1, sizeof *t);
    if (!t || !(t->path = strdup(path))) {
        free(t);
        snprintf(err, err_cap, "%s: out of memory", path);
        return ILAB_OUT_OF_MEMORY;
    }
    t->magic = ILAB_PROXY_MAGIC;
    t->options.call_timeout_s = ILAB_PROXY_DEFAULT_CALL_TIMEOUT_S;
    if (options && options->call_timeout_s > 0)
        t->options = *options;
    ilab_proxy_conn *c;
    ilab_status st = ilab_proxy_conn_open(t, err, err_cap, &c);
    if (st == ILAB_OK) {
        st = load_from_hello(c, err, err_cap, out);
        ilab_proxy_conn_close(c);
    }
    if (st != ILAB_OK) {
        target_free(t);
        return st;
    }
    ilab_plugin_set_remote_free(*out, target_free);
    return ILAB_OK;
}
