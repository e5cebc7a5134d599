/* The connection monitor's per-address budgets (conn_monitor.h), on
 * socket pairs standing in for accepted connections, with client addresses
 * the HTTP tests cannot come from: documentation ranges (RFC 5737, RFC
 * 3849) for remote clients, and every form of loopback. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include "ilab_skip.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "conn_monitor.h"

typedef struct fake_conn {
    int ours, theirs; /* the server's end (given to the monitor), the client's */
    ilab_conn *k;
} fake_conn;

static struct sockaddr_storage addr_of(const char *text)
{
    struct sockaddr_storage a;
    memset(&a, 0, sizeof a);
    struct sockaddr_in *in = (struct sockaddr_in *)&a;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&a;
    if (inet_pton(AF_INET, text, &in->sin_addr) == 1) {
        in->sin_family = AF_INET;
        in->sin_port = htons(40000);
    } else {
        assert_int_equal(inet_pton(AF_INET6, text, &in6->sin6_addr), 1);
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons(40001);
    }
    return a;
}

/* A connection from `client`, as libmicrohttpd's STARTED would report it. */
static fake_conn open_from(ilab_conn_monitor *m, const char *client, uint16_t port)
{
    fake_conn c;
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    c.ours = sv[0];
    c.theirs = sv[1];
    struct sockaddr_storage a = addr_of(client);
    if (a.ss_family == AF_INET)
        ((struct sockaddr_in *)&a)->sin_port = htons(port); /* ports never matter */
    else
        ((struct sockaddr_in6 *)&a)->sin6_port = htons(port);
    c.k = ilab_conn_opened(m, c.ours, (const struct sockaddr *)&a);
    assert_non_null(c.k);
    return c;
}

/* Did the monitor shut the connection down (the client reads end of stream)? */
static bool refused(const fake_conn *c)
{
    char b;
    ssize_t n = recv(c->theirs, &b, 1, MSG_DONTWAIT);
    return n == 0;
}

static void close_conn(ilab_conn_monitor *m, fake_conn *c)
{
    ilab_conn_closed(m, c->k);
    close(c->ours);
    close(c->theirs);
}

/* Opens `n` from `client`; returns how many were refused. */
static int open_many(ilab_conn_monitor *m, const char *client, fake_conn *out, int n)
{
    int r = 0;
    for (int i = 0; i < n; i++) {
        out[i] = open_from(m, client, (uint16_t)(30000 + i));
        r += refused(&out[i]);
    }
    return r;
}

static void remote_addresses_have_a_budget_each(void **state)
{
    (void)state;
    ilab_conn_monitor *m = NULL;
    assert_int_equal(ilab_conn_monitor_start(60.0, &m), ILAB_OK);
    ilab_conn_monitor_set_limits(m, 2, 0);
    fake_conn a[3], b[2], v6[3];
    assert_int_equal(open_many(m, "192.0.2.1", a, 3), 1);
    assert_false(refused(&a[0]) || refused(&a[1]));
    assert_true(refused(&a[2])); /* the third from one address, from any port */
    assert_int_equal(open_many(m, "198.51.100.7", b, 2), 0); /* another address: its own */
    assert_int_equal(open_many(m, "2001:db8::1", v6, 3), 1);
    assert_true(refused(&v6[2]));
    assert_int_equal((int)ilab_conn_monitor_over_limit(m), 2);
    /* A refused connection counts for nothing; a closed one frees its place. */
    close_conn(m, &a[2]);
    close_conn(m, &a[0]);
    fake_conn again = open_from(m, "192.0.2.1", 31000);
    assert_false(refused(&again));
    close_conn(m, &again);
    close_conn(m, &a[1]);
    for (int i = 0; i < 2; i++)
        close_conn(m, &b[i]);
    for (int i = 0; i < 3; i++)
        close_conn(m, &v6[i]);
    ilab_conn_monitor_stop(m);
}

static void loopback_has_its_own_budget(void **state)
{
    (void)state;
    ilab_conn_monitor *m = NULL;
    assert_int_equal(ilab_conn_monitor_start(60.0, &m), ILAB_OK);
    ilab_conn_monitor_set_limits(m, 2, 0);
    /* By default none: 127.0.0.0/8, ::1 and IPv4-mapped 127.x all pass. */
    static const char *const local[] = {"127.0.0.1", "127.3.2.1", "::1", "::ffff:127.0.0.1"};
    fake_conn c[4][20];
    for (int j = 0; j < 4; j++)
        assert_int_equal(open_many(m, local[j], c[j], 20), 0);
    for (int j = 0; j < 4; j++)
        for (int i = 0; i < 20; i++)
            close_conn(m, &c[j][i]);
    /* With a loopback budget of its own, it applies to each loopback address. */
    ilab_conn_monitor_set_limits(m, 2, 5);
    fake_conn l[6], r[3];
    assert_int_equal(open_many(m, "127.0.0.1", l, 6), 1);
    assert_true(refused(&l[5]));
    assert_int_equal(open_many(m, "203.0.113.9", r, 3), 1); /* the remote budget still 2 */
    for (int i = 0; i < 6; i++)
        close_conn(m, &l[i]);
    for (int i = 0; i < 3; i++)
        close_conn(m, &r[i]);
    ilab_conn_monitor_stop(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(remote_addresses_have_a_budget_each),
        cmocka_unit_test(loopback_has_its_own_budget),
    };
    return ilab_test_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
