/* Idle easy handles (http_handles.h).
 *
 * Each eval() of an adapter is one HTTP request, so a decode step is one.
 * A fresh easy handle per request opened a TCP connection per step (and a
 * TLS handshake with https), and a server with a thread per connection
 * started a thread for each. A handle keeps its connection open after a
 * transfer; libcurl allows one thread on a handle at a time and does not
 * support a connection cache shared between threads (CURL_LOCK_DATA_CONNECT),
 * so each request takes a whole handle from this list and gives it back. */
#include "http_handles.h"

#include <pthread.h>
#include <stdlib.h>

#include "http_client.h"

/* More idle handles than requests ever run at once on one instance would
 * only hold connections open on the server. */
#define HTTP_IDLE_MAX 8

struct http_handles {
    pthread_mutex_t lock;
    CURL *idle[HTTP_IDLE_MAX];
    int n_idle;
};

http_handles *http_handles_new(void)
{
    http_handles *h = calloc(1, sizeof *h);
    if (h)
        pthread_mutex_init(&h->lock, NULL);
    return h;
}

void http_handles_free(http_handles *h)
{
    if (!h)
        return;
    for (int i = 0; i < h->n_idle; i++)
        curl_easy_cleanup(h->idle[i]);
    pthread_mutex_destroy(&h->lock);
    free(h);
}

CURL *http_handles_take(http_handles *h)
{
    if (!http_client_ready())
        return NULL;
    CURL *curl = NULL;
    if (h) {
        pthread_mutex_lock(&h->lock);
        if (h->n_idle > 0)
            curl = h->idle[--h->n_idle];
        pthread_mutex_unlock(&h->lock);
    }
    if (!curl)
        return curl_easy_init();
    curl_easy_reset(curl); /* every option back to its default; the connection stays */
    return curl;
}

void http_handles_give_back(http_handles *h, CURL *curl, int reusable)
{
    if (!curl)
        return;
    if (h && reusable) {
        pthread_mutex_lock(&h->lock);
        int kept = h->n_idle < HTTP_IDLE_MAX;
        if (kept)
            h->idle[h->n_idle++] = curl;
        pthread_mutex_unlock(&h->lock);
        if (kept)
            return;
    }
    curl_easy_cleanup(curl);
}
