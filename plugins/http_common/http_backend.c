/* The backend table of the HTTP engine adapters: configuration, probe,
 * create, model_info, and the entry points a remote engine cannot offer
 * (http_backend.h). Tokenizer and generation are in their own files. */
#include "http_backend_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* PRB-1 allows 2 s in all for a probe; the requests share 1.8 s of it
 * (each gets what is left, at least 50 ms) so that a silent server still
 * leaves room for everything around them. */
#define PROBE_BUDGET_MS 1800L
#define PROBE_FLOOR_MS 50L
#define DEFAULT_CONNECT_MS 1000L
#define CONNECT_MAX_MS 1000L

ilab_status http_fail(ilab_backend_t *b, ilab_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ilab_last_error_setv(b ? &b->error : NULL, st, fmt, ap);
    va_end(ap);
    return st;
}

/* --- configuration --------------------------------------------------------- */

/* A whole decimal integer in [min, max], or false. */
static bool int_value(const char *v, long min, long max, long *out)
{
    char *end = NULL;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (!*v || *end || errno || x < min || x > max)
        return false;
    *out = x;
    return true;
}

/* Fails closed (ERR-5): an unknown key or a value that is no integer in its
 * range is INVALID_ARGUMENT with a message naming the key. */
static ilab_status read_settings(const http_engine *e, const ilab_config_entry_t *config,
                                 size_t n, http_settings *s, char *err, size_t cap)
{
    static const struct {
        const char *key;
        long min, max;
    } ints[] = {{"connect_timeout_ms", 100, CONNECT_MAX_MS}, {"request_timeout_s", 1, 86400},
                {"vocab_size", 0, INT32_MAX}, {"eos_id", -1, INT32_MAX},
                {"max_context", 0, INT32_MAX}};
    memset(s, 0, sizeof *s);
    s->connect_timeout_ms = DEFAULT_CONNECT_MS;
    s->request_timeout_s = 300;
    s->eos_id = -1;
    for (size_t i = 0; config && i < n; i++) {
        const char *k = config[i].key ? config[i].key : "(null)";
        const char *v = config[i].value ? config[i].value : "";
        size_t j = 0;
        while (j < sizeof ints / sizeof ints[0] && strcmp(k, ints[j].key))
            j++;
        long x = 0;
        if (!strcmp(k, "base_url"))
            snprintf(s->base_url, sizeof s->base_url, "%s", v);
        else if (!strcmp(k, "model"))
            snprintf(s->model, sizeof s->model, "%s", v);
        else if (!strcmp(k, "api_key"))
            snprintf(s->api_key, sizeof s->api_key, "%s", v);
        else if (j == sizeof ints / sizeof ints[0]) {
            snprintf(err, cap, "%s: unknown configuration key '%s'", e->label, k);
            return ILAB_INVALID_ARGUMENT;
        } else if (!int_value(v, ints[j].min, ints[j].max, &x)) {
            snprintf(err, cap, "%s: %s must be an integer in [%ld, %ld], not '%s'", e->label, k,
                     ints[j].min, ints[j].max, v);
            return ILAB_INVALID_ARGUMENT;
        } else if (j == 0) {
            s->connect_timeout_ms = x;
        } else if (j == 1) {
            s->request_timeout_s = x;
        } else if (j == 2) {
            s->vocab_size = (int32_t)x;
        } else if (j == 3) {
            s->eos_id = (int32_t)x;
        } else {
            s->max_context = (int32_t)x;
        }
    }
    if (!s->base_url[0]) {
        const char *env = getenv(e->env_var);
        if (env && *env)
            snprintf(s->base_url, sizeof s->base_url, "%s", env);
    }
    size_t len = strlen(s->base_url);
    while (len > 0 && s->base_url[len - 1] == '/')
        s->base_url[--len] = '\0';
    /* the probe must answer within its budget whatever the user set */
    if (s->connect_timeout_ms <= 0 || s->connect_timeout_ms > CONNECT_MAX_MS)
        s->connect_timeout_ms = s->connect_timeout_ms <= 0 ? DEFAULT_CONNECT_MS : CONNECT_MAX_MS;
    if (s->request_timeout_s <= 0)
        s->request_timeout_s = 300;
    return ILAB_OK;
}

static void target_of(const http_engine *e, const http_settings *s, http_target *t)
{
    t->label = e->label;
    t->base_url = s->base_url;
    t->api_key = s->api_key;
    t->connect_timeout_ms = s->connect_timeout_ms;
    t->handles = NULL; /* the probe's requests each open a connection */
}

/* --- probe: health, then the model list ------------------------------------ */

static long remaining_ms(const ilab_host_t *host, uint64_t t0)
{
    uint64_t now = host && ILAB_STRUCT_HAS(ilab_host_t, host, now_ns) && host->now_ns ? host->now_ns(host) : t0;
    long spent = (long)((now - t0) / 1000000u);
    long left = PROBE_BUDGET_MS - spent;
    return left > PROBE_FLOOR_MS ? left : PROBE_FLOOR_MS;
}

/* A non-2xx answer as an unavailable reason naming URL, status and message. */
static ilab_status refused(const http_engine *e, const http_target *t, const char *path,
                           const http_reply *r, char *reason, size_t cap)
{
    char msg[512];
    http_client_error_text(r->body, r->len, msg, sizeof msg);
    if (r->status == 401 || r->status == 403)
        snprintf(reason, cap, "%s server at %s refused the API key%s (HTTP %ld on %s: %s)",
                 e->label, t->base_url, t->api_key[0] ? "" : " (none was configured)", r->status,
                 path, msg);
    else
        snprintf(reason, cap, "%s server at %s answered %s with HTTP %ld: %s", e->label,
                 t->base_url, path, r->status, msg);
    return ILAB_UNAVAILABLE;
}

/* Pick the configured model (or the only one) out of an OpenAI model list. */
static ilab_status pick_model(const http_engine *e, const http_settings *s, json_t *list,
                              http_model *m, char *reason, size_t cap)
{
    json_t *data = json_object_get(list, "data"), *card, *chosen = NULL;
    size_t i, n = json_array_size(data);
    char names[512] = "";
    json_array_foreach(data, i, card) {
        const char *id = json_string_value(json_object_get(card, "id"));
        if (!id)
            continue;
        size_t at = strlen(names);
        snprintf(names + at, sizeof names - at, "%s'%s'", at ? ", " : "", id);
        if (s->model[0] ? !strcmp(id, s->model) : n == 1)
            chosen = card;
    }
    if (!json_is_array(data)) {
        snprintf(reason, cap, "%s server at %s: %s is not a model list (no 'data' array)",
                 e->label, s->base_url, e->models_path);
        return ILAB_UNAVAILABLE;
    }
    if (!chosen) {
        if (n == 0)
            snprintf(reason, cap, "%s server at %s serves no model", e->label, s->base_url);
        else if (s->model[0])
            snprintf(reason, cap, "%s server at %s does not serve model '%s' (it serves %s)",
                     e->label, s->base_url, s->model, names);
        else
            snprintf(reason, cap, "%s server at %s serves %zu models (%s); set %s.model",
                     e->label, s->base_url, n, names, e->plugin);
        return ILAB_UNAVAILABLE;
    }
    snprintf(m->id, sizeof m->id, "%s", json_string_value(json_object_get(chosen, "id")));
    /* max_model_len is vLLM's and SGLang's member; vocab_size is not
     * standard, read when a server publishes it */
    m->max_context = s->max_context > 0 ? s->max_context
                     : (int32_t)json_integer_value(json_object_get(chosen, "max_model_len"));
    m->vocab_size = s->vocab_size > 0 ? s->vocab_size
                    : (int32_t)json_integer_value(json_object_get(chosen, "vocab_size"));
    if (m->max_context <= 0) {
        snprintf(reason, cap, "%s server at %s does not publish max_model_len for '%s'; set %s.max_context",
                 e->label, s->base_url, m->id, e->plugin);
        return ILAB_UNAVAILABLE;
    }
    if (m->vocab_size <= 0) {
        snprintf(reason, cap, "%s server at %s does not publish the vocabulary size of '%s'; set %s.vocab_size",
                 e->label, s->base_url, m->id, e->plugin);
        return ILAB_UNAVAILABLE;
    }
    /* model_info's max_context is the longest sequence one request can
     * reach, so STR-3's count holds: SGLang keeps one position free */
    if (m->max_context <= e->protocol->context_reserve) {
        snprintf(reason, cap, "%s server at %s gives '%s' a context of %d tokens: no room to generate",
                 e->label, s->base_url, m->id, m->max_context);
        return ILAB_UNAVAILABLE;
    }
    m->max_context -= e->protocol->context_reserve;
    return ILAB_OK;
}

/* Everything the probe checks; on ILAB_OK `*m` names the served model. */
static ilab_status discover(const ilab_host_t *host, const http_engine *e, const http_settings *s,
                            http_model *m, char *reason, size_t cap)
{
    if (!s->base_url[0]) {
        snprintf(reason, cap, "no %s server configured (set base_url in the plugin config or %s)",
                 e->label, e->env_var);
        return ILAB_UNAVAILABLE;
    }
    if (strncmp(s->base_url, "http://", 7) && strncmp(s->base_url, "https://", 8)) {
        snprintf(reason, cap, "%s base_url '%s' is not an http:// or https:// URL", e->label,
                 s->base_url);
        return ILAB_UNAVAILABLE;
    }
    http_target t;
    target_of(e, s, &t);
    uint64_t t0 = host && ILAB_STRUCT_HAS(ilab_host_t, host, now_ns) && host->now_ns ? host->now_ns(host) : 0;
    http_reply r;
    if (http_client_request(&t, e->health_path, NULL, remaining_ms(host, t0), &r, reason, cap) != ILAB_OK)
        return ILAB_UNAVAILABLE;
    ilab_status st = ILAB_OK;
    if (r.status < 200 || r.status >= 300)
        st = refused(e, &t, e->health_path, &r, reason, cap);
    http_reply_free(&r);
    if (st != ILAB_OK)
        return st;
    if (http_client_request(&t, e->models_path, NULL, remaining_ms(host, t0), &r, reason, cap) != ILAB_OK)
        return ILAB_UNAVAILABLE;
    if (r.status < 200 || r.status >= 300) {
        st = refused(e, &t, e->models_path, &r, reason, cap);
        http_reply_free(&r);
        return st;
    }
    json_t *list = json_loadb(r.body, r.len, 0, NULL);
    http_reply_free(&r);
    if (!list) {
        snprintf(reason, cap, "%s server at %s: %s did not answer JSON", e->label, s->base_url,
                 e->models_path);
        return ILAB_UNAVAILABLE;
    }
    st = pick_model(e, s, list, m, reason, cap);
    json_decref(list);
    return st;
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
    http_settings s;
    ilab_status st = read_settings(e, config, n_config, &s, reason, reason_cap);
    if (st != ILAB_OK)
        return st;
    http_model m;
    st = discover(host, e, &s, &m, reason, reason_cap);
    if (st == ILAB_OK)
        snprintf(reason, reason_cap, "%s server at %s serves '%s'", e->label, s.base_url, m.id);
    return st;
}

/* The model's BOS, as the server's tokenizer adds it to an empty text. */
static int32_t find_bos(ilab_backend_t *b)
{
    int32_t t[4];
    size_t n = 0;
    if (http_tokenize(b, "", 0, ILAB_TOKENIZE_ADD_BOS, t, 4, &n) == ILAB_OK && n == 1)
        return t[0];
    return -1;
}

static ilab_status hb_create(const ilab_host_t *host, const ilab_config_entry_t *config,
                             size_t n_config, char *error, size_t error_cap,
                             ilab_backend_t **out)
{
    const http_engine *e = &http_engine_of_plugin;
    char scratch[512];
    if (!error || !error_cap) {
        error = scratch;
        error_cap = sizeof scratch;
    }
    error[0] = '\0';
    if (!out) {
        snprintf(error, error_cap, "%s: create: out is NULL", e->plugin);
        return ILAB_INVALID_ARGUMENT;
    }
    ilab_backend_t *b = calloc(1, sizeof *b);
    if (!b) {
        snprintf(error, error_cap, "%s: out of memory", e->plugin);
        return ILAB_OUT_OF_MEMORY;
    }
    b->engine = e;
    ilab_status st = read_settings(e, config, n_config, &b->settings, error, error_cap);
    if (st != ILAB_OK) {
        free(b);
        return st;
    }
    /* An unavailable backend refuses with the probe's reason (PRB-2). */
    st = discover(host, e, &b->settings, &b->model, error, error_cap);
    if (st != ILAB_OK) {
        free(b);
        return st;
    }
    target_of(e, &b->settings, &b->target);
    b->target.handles = http_handles_new();
    ilab_last_error_init(&b->error);
    pthread_mutex_init(&b->active_mu, NULL);
    b->eos_id = b->settings.eos_id < b->model.vocab_size ? b->settings.eos_id : -1;
    b->bos_id = -1;
    b->bos_id = find_bos(b);
    *out = b;
    return ILAB_OK;
}

static void hb_destroy(ilab_backend_t *b)
{
    if (!b)
        return;
    http_handles_free(b->target.handles);
    pthread_mutex_destroy(&b->active_mu);
    ilab_last_error_destroy(&b->error);
    free(b);
}

static size_t hb_last_error(const ilab_backend_t *b, char *buf, size_t cap)
{
    return ilab_last_error_copy(b ? &b->error : NULL, buf, cap);
}

static ilab_status hb_model_info(ilab_backend_t *b, ilab_model_info_t *info)
{
    if (!b || !info)
        return http_fail(b, ILAB_INVALID_ARGUMENT, "%s: model_info: NULL argument",
                         b ? b->engine->plugin : "http backend");
    if (info->struct_size < sizeof *info) /* ABI 1.0's is the smallest (ABI-3) */
        return http_fail(b, ILAB_ABI_MISMATCH, "%s: model_info: struct_size %u is smaller than ABI 1.0's %zu",
                         b->engine->plugin, info->struct_size, sizeof *info);
    ilab_model_info_t full;
    memset(&full, 0, sizeof full);
    full.struct_size = sizeof full;
    full.vocab_size = b->model.vocab_size;
    full.bos_id = b->bos_id;
    full.eos_id = b->eos_id;
    full.max_context = b->model.max_context;
    /* the id can be longer than the name field: keep its start */
    size_t id_len = strnlen(b->model.id, sizeof full.name - 1);
    memcpy(full.name, b->model.id, id_len);
    /* the weights are the server's: no digest to give (DIF-1 skips) */
    size_t n = info->struct_size < sizeof full ? info->struct_size : sizeof full;
    if (n < sizeof(uint32_t))
        return http_fail(b, ILAB_ABI_MISMATCH, "%s: model_info: struct_size %u is too small",
                         b->engine->plugin, info->struct_size);
    memcpy((char *)info + sizeof(uint32_t), (const char *)&full + sizeof(uint32_t),
           n - sizeof(uint32_t));
    return ILAB_OK;
}

/* --- what a remote engine does not offer --------------------------------- */

static ilab_status undeclared(ilab_backend_t *b, const char *call, const char *capability)
{
    return http_fail(b, ILAB_UNSUPPORTED, "%s: %s: capability '%s' not declared (a remote engine "
                     "samples itself and does not hand out its logits or cache)",
                     b ? b->engine->plugin : "http backend", call, capability);
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

static ilab_status hb_cache_stats(ilab_backend_t *b, ilab_cache_stats_t *s)
{
    return undeclared(b, "cache_stats", "cache.stats");
}

const ilab_backend_api_t http_backend_api = {
    .struct_size = sizeof(ilab_backend_api_t),
    .probe = hb_probe, .create = hb_create, .destroy = hb_destroy,
    .last_error = hb_last_error, .model_info = hb_model_info,
    .tokenize = http_tokenize, .detokenize = http_detokenize, .token_piece = http_token_piece,
    .seq_create = hb_seq_create, .seq_free = hb_seq_free, .seq_fork = hb_seq_fork,
    .seq_truncate = hb_seq_truncate, .seq_length = hb_seq_length, .eval = hb_eval,
    .generate = http_generate, .cancel = http_cancel, .cache_stats = hb_cache_stats,
};
