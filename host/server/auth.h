/* API keys (as vLLM's --api-key): a request to a protected route must carry
 * "Authorization: Bearer KEY"; and the rule that refuses to serve a
 * non-loopback address without one. */
#ifndef ILAB_SERVER_AUTH_H
#define ILAB_SERVER_AUTH_H

#include <microhttpd.h>
#include <stdbool.h>
#include <sys/socket.h>

/* Does the request carry `key`? Compared in constant time (no early exit on
 * the first differing byte, nor on a length mismatch). `key` NULL or ""
 * means no key is configured: every request passes. */
bool ilab_auth_ok(struct MHD_Connection *c, const char *key);

/* Is `addr` a loopback address (127.0.0.0/8, ::1, ::ffff:127.x.y.z)? */
bool ilab_addr_is_loopback(const struct sockaddr *addr);

#endif
