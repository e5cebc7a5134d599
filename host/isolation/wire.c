/* Framed messages between the host and a backend worker (wire.h). */
#include "wire.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

/* --- writing a payload ---------------------------------------------------- */

void ilab_wire_out_free(ilab_wire_out *o)
{
    free(o->data);
    memset(o, 0, sizeof *o);
}

void ilab_wire_put_bytes(ilab_wire_out *o, const void *p, size_t n)
{
    if (o->failed || n == 0)
        return;
    if (n > ILAB_WIRE_MAX_PAYLOAD - o->len) {
        o->failed = true;
        return;
    }
    if (o->len + n > o->cap) {
        size_t cap = o->cap ? o->cap : 256;
        while (cap < o->len + n)
            cap *= 2;
        unsigned char *d = realloc(o->data, cap);
        if (!d) {
            o->failed = true;
            return;
        }
        o->data = d;
        o->cap = cap;
    }
    memcpy(o->data + o->len, p, n);
    o->len += n;
}

void ilab_wire_put_u32(ilab_wire_out *o, uint32_t v) { ilab_wire_put_bytes(o, &v, sizeof v); }
void ilab_wire_put_u64(ilab_wire_out *o, uint64_t v) { ilab_wire_put_bytes(o, &v, sizeof v); }
void ilab_wire_put_f32(ilab_wire_out *o, float v) { ilab_wire_put_bytes(o, &v, sizeof v); }

void ilab_wire_put_opt(ilab_wire_out *o, const void *p, size_t n)
{
    ilab_wire_put_u32(o, p != NULL);
    if (!p)
        return;
    ilab_wire_put_u64(o, n);
    ilab_wire_put_bytes(o, p, n);
}

/* --- reading a payload ---------------------------------------------------- */

const void *ilab_wire_get_bytes(ilab_wire_in *in, size_t n)
{
    if (in->bad || n > in->len - in->pos) {
        in->bad = true;
        return NULL;
    }
    const void *p = in->data + in->pos;
    in->pos += n;
    return p;
}

uint32_t ilab_wire_get_u32(ilab_wire_in *in)
{
    uint32_t v = 0;
    const void *p = ilab_wire_get_bytes(in, sizeof v);
    if (p)
        memcpy(&v, p, sizeof v);
    return v;
}

uint64_t ilab_wire_get_u64(ilab_wire_in *in)
{
    uint64_t v = 0;
    const void *p = ilab_wire_get_bytes(in, sizeof v);
    if (p)
        memcpy(&v, p, sizeof v);
    return v;
}

float ilab_wire_get_f32(ilab_wire_in *in)
{
    float v = 0;
    const void *p = ilab_wire_get_bytes(in, sizeof v);
    if (p)
        memcpy(&v, p, sizeof v);
    return v;
}

const void *ilab_wire_get_opt(ilab_wire_in *in, bool *present, size_t *n)
{
    *present = ilab_wire_get_u32(in) != 0;
    *n = 0;
    if (!*present || in->bad)
        return NULL;
    *n = (size_t)ilab_wire_get_u64(in);
    const void *p = ilab_wire_get_bytes(in, *n);
    /* A present, empty field still reads back as a non-NULL pointer. */
    return p ? p : (in->bad ? NULL : in->data);
}

/* --- the socket ----------------------------------------------------------- */

static bool write_all(int fd, struct iovec *iov, int n)
{
    while (n > 0) {
        ssize_t w = sendmsg(fd, &(struct msghdr){.msg_iov = iov, .msg_iovlen = (size_t)n},
                            MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return false;
        }
        size_t left = (size_t)w;
        while (n > 0 && left >= iov->iov_len) {
            left -= iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (char *)iov->iov_base + left;
            iov->iov_len -= left;
        }
    }
    return true;
}

bool ilab_wire_send(int fd, pthread_mutex_t *lock, uint32_t op, uint64_t call_id,
                    uint32_t status, const ilab_wire_out *o)
{
    if (o && o->failed)
        return false;
    ilab_wire_header h = {.len = o ? o->len : 0, .call_id = call_id, .op = op, .status = status};
    struct iovec iov[2] = {{&h, sizeof h}, {o ? o->data : NULL, o ? o->len : 0}};
    pthread_mutex_lock(lock);
    bool ok = write_all(fd, iov, h.len ? 2 : 1);
    pthread_mutex_unlock(lock);
    return ok;
}

static bool read_all(int fd, void *buf, size_t n)
{
    unsigned char *p = buf;
    while (n > 0) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return false;
        p += r;
        n -= (size_t)r;
    }
    return true;
}

bool ilab_wire_recv(int fd, ilab_wire_header *h, unsigned char **payload)
{
    *payload = NULL;
    if (!read_all(fd, h, sizeof *h) || h->len > ILAB_WIRE_MAX_PAYLOAD || h->op == 0 ||
        h->op >= ILAB_WIRE_OP_END)
        return false;
    if (h->len == 0)
        return true;
    *payload = malloc(h->len);
    if (!*payload || !read_all(fd, *payload, h->len)) {
        free(*payload);
        *payload = NULL;
        return false;
    }
    return true;
}
