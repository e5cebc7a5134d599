/* libcurl requests with bounded timeouts (http_client.h). */
#include "http_client.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* libcurl's global state is set up once, and torn down when the plugin is
 * unloaded so no allocation outlives it. */
static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static int curl_ok;

static void curl_setup(void)
{
    curl_ok = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
}

__attribute__((destructor)) static void curl_teardown(void)
{
    if (curl_ok)
        curl_global_cleanup();
}

int http_client_ready(void)
{
    pthread_once(&curl_once, curl_setup);
    return curl_ok;
}

void http_client_url(const http_target *t, const char *path, char *url, size_t cap)
{
    snprintf(url, cap, "%s%s", t->base_url, path);
}

struct curl_slist *http_client_setup(CURL *curl, const http_target *t, const char *url,
                                     long timeout_ms, int json_body)
{
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L); /* no SIGALRM: safe in any thread */
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, t->connect_timeout_ms);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
    struct curl_slist *h = NULL;
    if (json_body)
        h = curl_slist_append(h, "Content-Type: application/json");
    if (t->api_key && *t->api_key) {
        char auth[1100];
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", t->api_key);
        h = curl_slist_append(h, auth);
    }
    /* no "Expect: 100-continue" round trip on larger bodies */
    h = curl_slist_append(h, "Expect:");
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, h);
    return h;
}

static size_t collect(char *data, size_t size, size_t nmemb, void *user)
{
    http_reply *r = user;
    size_t n = size * nmemb;
    char *b = realloc(r->body, r->len + n + 1);
    if (!b)
        return 0;
    memcpy(b + r->len, data, n);
    r->body = b;
    r->len += n;
    b[r->len] = '\0';
    return n;
}

/* Drop libcurl's " after N ms" / " after N milliseconds" from `msg`: the
 * same failure must read the same each time (PRB-2 compares create()'s
 * reason with probe()'s), and the elapsed time is not the reason. */
static void drop_elapsed(char *msg)
{
    char *at = msg;
    while ((at = strstr(at, " after ")) != NULL) {
        char *p = at + 7, *digits = p;
        while (*p >= '0' && *p <= '9')
            p++;
        size_t unit = p == digits ? 0 : !strncmp(p, " milliseconds", 13) ? 13
                                      : !strncmp(p, " ms", 3) ? 3 : 0;
        if (!unit) {
            at += 7;
            continue;
        }
        memmove(at, p + unit, strlen(p + unit) + 1);
    }
}

ilab_status http_client_request(const http_target *t, const char *path, json_t *body,
                                long timeout_ms, http_reply *reply, char *err, size_t err_cap)
{
    memset(reply, 0, sizeof *reply);
    char url[1200];
    http_client_url(t, path, url, sizeof url);
    CURL *curl = http_handles_take(t->handles);
    if (!curl) {
        snprintf(err, err_cap, "cannot reach %s: libcurl failed to initialise", url);
        return ILAB_IO;
    }
    char *payload = body ? json_dumps(body, JSON_COMPACT) : NULL;
    if (body && !payload) {
        http_handles_give_back(t->handles, curl, 1);
        snprintf(err, err_cap, "%s: the request body could not be encoded", url);
        return ILAB_INVALID_ARGUMENT;
    }
    struct curl_slist *h = http_client_setup(curl, t, url, timeout_ms, payload != NULL);
    if (payload)
        curl_easy_setopt(curl, CURLOPT_POSTFIELDS, payload);
    char curl_err[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, curl_err);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, reply);
    CURLcode rc = curl_easy_perform(curl);
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &reply->status);
    curl_slist_free_all(h);
    http_handles_give_back(t->handles, curl, rc == CURLE_OK);
    free(payload);
    if (!reply->body)
        reply->body = calloc(1, 1);
    if (rc != CURLE_OK) {
        drop_elapsed(curl_err);
        snprintf(err, err_cap, "cannot reach %s: %s", url,
                 *curl_err ? curl_err : curl_easy_strerror(rc));
        http_reply_free(reply);
        return ILAB_IO;
    }
    return ILAB_OK;
}

void http_reply_free(http_reply *r)
{
    free(r->body);
    memset(r, 0, sizeof *r);
}

void http_client_error_text(const char *body, size_t len, char *out, size_t cap)
{
    out[0] = '\0';
    json_t *root = body && len ? json_loadb(body, len, 0, NULL) : NULL;
    const char *msg = NULL;
    if (json_is_object(root)) {
        json_t *e = json_object_get(root, "error");
        if (json_is_object(e))
            msg = json_string_value(json_object_get(e, "message"));
        else if (json_is_string(e))
            msg = json_string_value(e);
        if (!msg)
            msg = json_string_value(json_object_get(root, "message"));
        if (!msg)
            msg = json_string_value(json_object_get(root, "detail"));
    }
    if (msg)
        snprintf(out, cap, "%s", msg);
    else if (body && len)
        snprintf(out, cap, "%.*s", (int)(len < 200 ? len : 200), body);
    else
        snprintf(out, cap, "(empty body)");
    /* one line: a message ends up in logs and event messages */
    for (char *p = out; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    json_decref(root);
}

ilab_status http_client_status_of(long s, const char *msg)
{
    switch (s) {
    case 400: case 404: case 413: case 422:
        if (msg && (strcasestr(msg, "maximum context length") || strcasestr(msg, "context length")))
            return ILAB_CONTEXT_OVERFLOW;
        return ILAB_INVALID_ARGUMENT;
    case 401: case 403: case 408: case 429: case 502: case 503: case 504:
        return ILAB_UNAVAILABLE;
    default:
        return ILAB_IO;
    }
}
