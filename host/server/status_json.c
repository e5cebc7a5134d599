/* GET /v1/status: what the status page shows, in one authenticated JSON
 * document (docs/http-api.md): each backend's state and live counters, each
 * plugin file of the folders with the loader's verdict, its manifest and
 * SHA-256, and the latest conformance result for that SHA-256. It needs the
 * key like /v1/models: /health stays the only open view of the server. */
#include "server_internal.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "conformance_index.h"

void ilab_server_set_plugins(ilab_server *s, const char *plugins_json)
{
    char *copy = plugins_json ? strdup(plugins_json) : NULL;
    pthread_mutex_lock(&s->backends_mu);
    free(s->plugins_json);
    s->plugins_json = copy;
    pthread_mutex_unlock(&s->backends_mu);
}

/* The catalog rows cmd_serve published last (a fresh copy), else []. */
static json_t *plugins_now(ilab_server *s)
{
    pthread_mutex_lock(&s->backends_mu);
    json_t *rows = s->plugins_json ? json_loads(s->plugins_json, 0, NULL) : NULL;
    pthread_mutex_unlock(&s->backends_mu);
    return json_is_array(rows) ? rows : (json_decref(rows), json_array());
}

static json_t *backend_status(ilab_server *s, const ilab_backend_view *w)
{
    const char *status = w->v ? "serving" : w->down_state[0] ? w->down_state : "unavailable";
    json_t *b = json_pack("{s:s, s:s}", "backend", w->slot->name, "status", status);
    if (w->v) {
        ilab_engine_counters c;
        ilab_engine_get_counters(w->v->be.engine, &c);
        json_object_update_new(b, json_pack(
            "{s:s, s:s, s:s, s:i, s:i, s:i, s:i, s:I, s:I, s:I}", "model", w->id, "version",
            w->v->version, "path", w->v->path, "max_context", w->v->info.max_context,
            "vocab_size", w->v->info.vocab_size, "running", c.running, "waiting", c.waiting,
            "preemptions", (json_int_t)c.preemptions, "prefix_cache_queries",
            (json_int_t)c.prefix_cache_queries, "prefix_cache_hits",
            (json_int_t)c.prefix_cache_hits));
    } else {
        json_object_set_new(b, "reason", json_string(w->reason[0] ? w->reason : "not started"));
    }
    if (w->refusal[0])
        json_object_set_new(b, "reload_refused", json_string(w->refusal));
    pthread_mutex_lock(&s->stats_mu);
    const ilab_slot *k = w->slot;
    json_object_update_new(b, json_pack("{s:i, s:I, s:I, s:I, s:I}", "inflight", k->inflight,
                                        "prompt_tokens", (json_int_t)k->prompt_tokens,
                                        "generation_tokens", (json_int_t)k->generation_tokens,
                                        "restarts", (json_int_t)k->restarts, "errors",
                                        (json_int_t)k->errors));
    pthread_mutex_unlock(&s->stats_mu);
    return b;
}

/* Each plugin row gets "conformance": its file's latest summary, or null. */
static void join_conformance(json_t *plugins, const json_t *index)
{
    const json_t *by_sha = json_object_get(index, "by_sha256");
    size_t i;
    json_t *row;
    json_array_foreach(plugins, i, row) {
        const char *sha = json_string_value(json_object_get(row, "sha256"));
        json_t *c = sha && by_sha ? json_object_get(by_sha, sha) : NULL;
        json_object_set(row, "conformance", c ? c : json_null());
    }
}

enum MHD_Result ilab_handle_status(ilab_server *s, struct MHD_Connection *c,
                                   const ilab_http_request *req)
{
    (void)req;
    ilab_backend_view *views = NULL;
    size_t n = ilab_backend_views(s, &views);
    json_t *backends = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(backends, backend_status(s, &views[i]));
    ilab_backend_views_free(views, n);
    json_t *plugins = plugins_now(s);
    const char *dir = s->cfg.conformance_reports;
    json_t *index = dir && dir[0] ? ilab_conformance_index(dir) : NULL;
    if (index)
        join_conformance(plugins, index);
    json_t *problems = index ? json_object_get(index, "problems") : NULL;
    json_t *root = json_pack(
        "{s:{s:I, s:I, s:b, s:b, s:s?, s:O?}, s:o, s:o}", "server", "started",
        (json_int_t)s->started, "now", (json_int_t)time(NULL), "draining",
        atomic_load(&s->draining), "api_key", s->cfg.api_key && s->cfg.api_key[0],
        "conformance_reports", dir && dir[0] ? dir : NULL, "conformance_problems", problems,
        "backends", backends, "plugins", plugins);
    json_decref(index);
    return ilab_server_send_json(s, c, 200, root);
}
