/* Bearer-key checks and the loopback rule. */
#include "auth.h"

#include <netinet/in.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

/* Equal strings, in time that depends only on the lengths' maximum: every
 * byte position of the longer one is looked at, and the length difference
 * is folded into the result instead of returning early. */
static bool equal_constant_time(const char *a, size_t an, const char *b, size_t bn)
{
    size_t n = an > bn ? an : bn;
    unsigned diff = (unsigned)(an ^ bn);
    for (size_t i = 0; i < n; i++) {
        unsigned char x = i < an ? (unsigned char)a[i] : 0;
        unsigned char y = i < bn ? (unsigned char)b[i] : 0;
        diff |= (unsigned)(x ^ y);
    }
    return diff == 0;
}

bool ilab_auth_ok(struct MHD_Connection *c, const char *key)
{
    if (!key || !key[0])
        return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncasecmp(h, "Bearer ", 7))
        return false;
    const char *given = h + 7;
    while (*given == ' ')
        given++;
    return equal_constant_time(given, strlen(given), key, strlen(key));
}

bool ilab_addr_is_loopback(const struct sockaddr *addr)
{
    if (addr->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)addr;
        return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    }
    if (addr->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)addr)->sin6_addr;
        if (IN6_IS_ADDR_LOOPBACK(a))
            return true;
        return IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127;
    }
    return false;
}
