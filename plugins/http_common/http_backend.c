/* The shared half of the HTTP engine stubs (see http_backend.h). */
#include "http_backend.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Connect and total timeouts of the probe: PRB-1 allows 2 s in all. */
#define CONNECT_TIMEOUT_MS 1000L
#define TOTAL_TIMEOUT_MS 2000L

struct ilab_backend {
    const http_engine *engine;
    ilab_last_error_t error;
};

/* libcurl's global state is set up once, and torn down when the plugin is
 * unloaded so no allocation outlives it. */
static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static int curl_ready;

static void curl_setup(void)
{
    curl_ready = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
}

__attribute__((destructor)) static void curl_teardown(void)
{
    if (curl_ready)
        curl_global_cleanup();
}

static const char *configured_url(const http_engine *e, const ilab_config_entry_t *config,
                                  size_t n_config)
{
    for (size_t i = 0; config && i < n_config; i++)
        if (config[i].key && !strcmp(config[i].key, "base_url") && config[i].value &&
            *config[i].value)
            return config[i].value;
    const char *env = getenv(e->env_var);
    return env && *env ? env : NULL;
}

static size_t discard_body(char *data, size_t size, size_t nmemb, void *user)
{
    return size * nmemb;
}

/* GET <base>/health: ILAB_OK when the server answers 2xx, else ILAB_UNAVAILABLE
 * with the URL and the error. */
static ilab_status check_health(const http_engine *e, const char *base, char *reason, size_t cap)
{
    if (strncmp(base, "http://", 7) && strncmp(base, "https://", 8)) {
        snprintf(reason, cap, "%s base_url '%s' is not an http:// or https:// URL", e->label, base);
        return ILAB_UNAVAILABLE;
    }
    char url[1024];
    size_t len = strlen(base);
    while (len > 0 && base[len - 1] == '/')
        len--;
    snprintf(url, sizeof url, "%.*s%s", (int)len, base, e->health_path);

    pthread_once(&curl_once, curl_setup);
    CURL *curl = curl_ready ? curl_easy_init() : NULL;
    if (!curl) {
        snprintf(reason, cap, "cannot reach %s: libcurl failed to initialise", url);
        return ILAB_UNAVAILABLE;
    }
    char curl_err[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L); /* no SIGALRM: safe in any thread */
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, CONNECT_TIMEOUT_MS);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, TOTAL_TIMEOUT_MS);
    curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, discard_body);
    curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, curl_err);
    CURLcode rc = curl_easy_perform(curl);
    long http_status = 0;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &http_status);
    curl_easy_cleanup(curl);

    if (rc != CURLE_OK) {
        snprintf(reason, cap, "cannot reach %s: %s", url, *curl_err ? curl_err : curl_easy_strerror(rc));
        return ILAB_UNAVAILABLE;
    }
    if (http_status < 200 || http_status >= 300) {
        snprintf(reason, cap, "%s server at %s is not healthy: HTTP %ld", e->label, url, http_status);
        return ILAB_UNAVAILABLE;
    }
    return ILAB_OK;
}

static ilab_status hb_probe(const ilab_host_t *host, const ilab_config_entry_t *config,
                            size_t n_config, char *reason, size_t reason_cap)
{
    const http_engine *e = &http_engine_of_plugin;
    char scratch[512];
    if (!reason || !reason_cap) {
        reason = scratch;
        reason_cap = sizeof scratch;
    }
    reason[0] = '\0';
    const char *base = configured_url(e, config, n_config);
    if (!base) {
        snprintf(reason, reason_cap,
                 "no %s server configured (set base_url in the plugin config or %s)", e->label,
                 e->env_var);
        return ILAB_UNAVAILABLE;
    }
    if (check_health(e, base, reason, reason_cap) != ILAB_OK)
        return ILAB_UNAVAILABLE;
    /* Reachable, but generation over its HTTP API is not implemented: say
     * so rather than claim an engine we cannot drive. */
    snprintf(reason, reason_cap,
             "%s server at %s is reachable, but the %s HTTP adapter is not implemented in this "
             "build", e->label, base, e->plugin);
    return ILAB_UNAVAILABLE;
}

static ilab_status hb_create(const ilab_host_t *host, const ilab_config_entry_t *config,
                             size_t n_config, char *error, size_t error_cap,
                             ilab_backend_t **out)
{
    char scratch[512];
    if (!error || !error_cap) {
        error = scratch;
        error_cap = sizeof scratch;
    }
    /* An unavailable backend refuses with the probe's reason (PRB-2). */
    return hb_probe(host, config, n_config, error, error_cap);
}

/* --- calls on an instance: none can exist yet, but every entry point still
 * answers with a status and a message. ---------------------------------- */

static ilab_status fail(ilab_backend_t *b, ilab_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static ilab_status fail(ilab_backend_t *b, ilab_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ilab_last_error_setv(b ? &b->error : NULL, st, fmt, ap);
    va_end(ap);
    return st;
}

static const char *plugin_of(const ilab_backend_t *b)
{
    return b ? b->engine->plugin : "http backend";
}

static ilab_status undeclared(ilab_backend_t *b, const char *call, const char *capability)
{
    return fail(b, ILAB_UNSUPPORTED, "%s: %s: capability '%s' not declared", plugin_of(b), call,
                capability);
}

static void hb_destroy(ilab_backend_t *b)
{
    if (!b)
        return;
    ilab_last_error_destroy(&b->error);
    free(b);
}

static size_t hb_last_error(const ilab_backend_t *b, char *buf, size_t cap)
{
    return ilab_last_error_copy(b ? &b->error : NULL, buf, cap);
}

static ilab_status hb_model_info(ilab_backend_t *b, ilab_model_info_t *info)
{
    return fail(b, ILAB_UNAVAILABLE, "%s: model_info: the HTTP adapter is not implemented",
                plugin_of(b));
}

static ilab_status hb_tokenize(ilab_backend_t *b, const char *t, size_t l, uint32_t f,
                               int32_t *o, size_t c, size_t *n)
{
    return undeclared(b, "tokenize", "tokenizer");
}

static ilab_status hb_detokenize(ilab_backend_t *b, const int32_t *t, size_t n, char *o,
                                 size_t c, size_t *l)
{
    return undeclared(b, "detokenize", "tokenizer");
}

static ilab_status hb_token_piece(ilab_backend_t *b, int32_t p, int32_t t, char *o, size_t c,
                                  size_t *l)
{
    return undeclared(b, "token_piece", "tokenizer");
}

static ilab_status hb_seq_create(ilab_backend_t *b, ilab_seq_t *s)
{
    return undeclared(b, "seq_create", "logits: full");
}

static ilab_status hb_seq_free(ilab_backend_t *b, ilab_seq_t s)
{
    return undeclared(b, "seq_free", "logits: full");
}

static ilab_status hb_seq_fork(ilab_backend_t *b, ilab_seq_t p, ilab_seq_t *c)
{
    return undeclared(b, "seq_fork", "cache.fork");
}

static ilab_status hb_seq_truncate(ilab_backend_t *b, ilab_seq_t s, int32_t n)
{
    return undeclared(b, "seq_truncate", "cache.truncate");
}

static ilab_status hb_seq_length(ilab_backend_t *b, ilab_seq_t s, int32_t *l)
{
    return undeclared(b, "seq_length", "logits: full");
}

static ilab_status hb_eval(ilab_backend_t *b, const ilab_batch_item_t *const *items, size_t n)
{
    return undeclared(b, "eval", "logits: full");
}

static ilab_status hb_generate(ilab_backend_t *b, const ilab_generate_request_t *req,
                               ilab_event_fn on_event, void *user_data)
{
    char msg[256];
    snprintf(msg, sizeof msg, "%s: generate: the HTTP adapter is not implemented", plugin_of(b));
    if (on_event) {
        ilab_event_t ev = {.struct_size = sizeof ev, .type = ILAB_EVENT_ERROR,
                           .request_id = req ? req->request_id : 0,
                           .finish_reason = ILAB_FINISH_ERROR, .status = ILAB_UNAVAILABLE,
                           .message = msg};
        on_event(user_data, &ev);
    }
    return fail(b, ILAB_UNAVAILABLE, "%s", msg);
}

static ilab_status hb_cancel(ilab_backend_t *b, uint64_t id)
{
    return ILAB_OK; /* nothing runs, so nothing is left to cancel (benign race rule) */
}

const ilab_backend_api_t http_backend_api = {
    .struct_size = sizeof(ilab_backend_api_t),
    .probe = hb_probe, .create = hb_create, .destroy = hb_destroy,
    .last_error = hb_last_error, .model_info = hb_model_info,
    .tokenize = hb_tokenize, .detokenize = hb_detokenize, .token_piece = hb_token_piece,
    .seq_create = hb_seq_create, .seq_free = hb_seq_free, .seq_fork = hb_seq_fork,
    .seq_truncate = hb_seq_truncate, .seq_length = hb_seq_length, .eval = hb_eval,
    .generate = hb_generate, .cancel = hb_cancel,
};
