/* Idle libcurl easy handles of one backend instance, kept so that a call
 * reuses the connection the last call on that handle left open. */
#ifndef ILAB_HTTP_HANDLES_H
#define ILAB_HTTP_HANDLES_H

#include <curl/curl.h>

typedef struct http_handles http_handles;

/* NULL when out of memory: every request then opens its own connection. */
http_handles *http_handles_new(void);
/* Closes every idle handle and its connection. Called when no request
 * is running (the backend's destroy). */
void http_handles_free(http_handles *h);

/* An idle handle with its options reset (its connection kept), or a new
 * one; NULL when libcurl cannot make one. Any thread. */
CURL *http_handles_take(http_handles *h);
/* Hands `curl` back after its request. `reusable` false (the transfer
 * failed: its connection may be half-used) or a full list closes it. */
void http_handles_give_back(http_handles *h, CURL *curl, int reusable);

#endif
