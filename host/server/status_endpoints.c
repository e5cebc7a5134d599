/* GET /health and GET /metrics: what a load balancer and a scraper ask. */
#include "server_internal.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/metrics.h"

static json_t *backend_health(const ilab_backend_view *w)
{
    const char *status = w->v ? "ok" : w->down_state[0] ? w->down_state : "unavailable";
    json_t *b = json_pack("{s:s, s:s}", "backend", w->slot->name, "status", status);
    if (w->v) {
        json_object_set_new(b, "model", json_string(w->id));
        json_object_set_new(b, "version", json_string(w->v->version));
        json_object_set_new(b, "path", json_string(w->v->path));
    } else {
        json_object_set_new(b, "reason", json_string(w->reason[0] ? w->reason : "not started"));
    }
    if (w->refusal[0]) /* the last reload refused: the version above kept serving */
        json_object_set_new(b, "reload_refused", json_string(w->refusal));
    return b;
}

/* 200 while any backend serves ("degraded" when some do not), each one
 * listed; 503 when none does, naming why. With one backend the 503 carries
 * that backend's reason alone. */
enum MHD_Result ilab_handle_health(ilab_server *s, struct MHD_Connection *c,
                                   const ilab_http_request *req)
{
    (void)req;
    ilab_api_error e;
    if (atomic_load(&s->draining)) {
        ilab_api_fail(&e, 503, NULL, "shutting down");
        return ilab_server_send_error(s, c, &e);
    }
    ilab_backend_view *views = NULL;
    size_t n = ilab_backend_views(s, &views), serving = 0;
    json_t *list = json_array();
    for (size_t i = 0; i < n; i++) {
        serving += views[i].v != NULL;
        json_array_append_new(list, backend_health(&views[i]));
    }
    if (!serving) {
        char why[480] = "";
        size_t used = 0;
        for (size_t i = 0; i < n && used + 1 < sizeof why; i++) {
            int k = n == 1 ? snprintf(why, sizeof why, "%.470s", views[i].reason)
                           : snprintf(why + used, sizeof why - used, "%s%s: %.200s",
                                      used ? "; " : "", views[i].slot->name, views[i].reason);
            used += k > 0 ? (size_t)k : 0;
        }
        ilab_backend_views_free(views, n);
        json_decref(list);
        ilab_api_fail(&e, 503, NULL, "backend unavailable: %s",
                      n ? why : "no backend is configured");
        return ilab_server_send_error(s, c, &e);
    }
    ilab_backend_views_free(views, n);
    return ilab_server_send_json(s, c, 200, json_pack("{s:s, s:o}", "status",
                                                      serving == n ? "ok" : "degraded",
                                                      "backends", list));
}

/* The two comment lines every metric starts with (Prometheus text format). */
static void metric_header(FILE *f, const char *name, const char *type, const char *help)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A counter by HTTP status: the codes counted one by one, then the rest. */
static void by_code(FILE *f, const char *name, const unsigned long long *counts)
{
    for (size_t i = 0; i < ILAB_SERVER_N_CODES; i++)
        fprintf(f, "%s{code=\"%u\"} %llu\n", name, ilab_server_counted_code(i), counts[i]);
    fprintf(f, "%s{code=\"other\"} %llu\n", name, counts[ILAB_SERVER_N_CODES]);
}

/* The engine's own figures, per backend serving (counters count from the
 * version's start: a reload starts them again, which rate() takes as a
 * counter reset). */
static void engine_metrics(const ilab_backend_view *views, size_t n, FILE *f)
{
    ilab_engine_counters *c = calloc(n ? n : 1, sizeof *c);
    if (!c)
        return;
    for (size_t i = 0; i < n; i++)
        if (views[i].v)
            ilab_engine_get_counters(views[i].v->be.engine, &c[i]);
    static const struct {
        const char *name, *type, *help;
    } series[] = {
        {"inferlab_backend_requests_running", "gauge", "Requests in the backend's running batch."},
        {"inferlab_backend_requests_waiting", "gauge", "Requests queued in the backend's engine."},
        {"inferlab_backend_preemptions_total", "counter",
         "Running requests preempted for KV-cache room, since the version serving started."},
        {"inferlab_backend_prefix_cache_hits_total", "counter",
         "Prompt tokens found in the prefix cache, since the version serving started."},
    };
    for (size_t k = 0; k < sizeof series / sizeof series[0]; k++) {
        metric_header(f, series[k].name, series[k].type, series[k].help);
        for (size_t i = 0; i < n; i++) {
            if (!views[i].v)
                continue;
            unsigned long long v = k == 0 ? (unsigned long long)c[i].running
                                   : k == 1 ? (unsigned long long)c[i].waiting
                                   : k == 2 ? c[i].preemptions : c[i].prefix_cache_hits;
            fprintf(f, "%s{backend=\"%s\"} %llu\n", series[k].name, views[i].slot->name, v);
        }
    }
    free(c);
}

/* The per-backend series: each carries a `backend` label. */
static void backend_metrics(ilab_server *s, FILE *f)
{
    ilab_backend_view *views = NULL;
    size_t n = ilab_backend_views(s, &views);
    metric_header(f, "inferlab_backend_info", "gauge",
                  "The version serving each backend (value 1).");
    for (size_t i = 0; i < n; i++)
        if (views[i].v)
            fprintf(f, "inferlab_backend_info{backend=\"%s\",model=\"%s\",version=\"%s\"} 1\n",
                    views[i].slot->name, views[i].id, views[i].v->version);
    engine_metrics(views, n, f);
    pthread_mutex_lock(&s->stats_mu);
    metric_header(f, "inferlab_backend_inflight_requests", "gauge",
                  "Generation requests inside the backend's engine.");
    for (size_t i = 0; i < n; i++)
        fprintf(f, "inferlab_backend_inflight_requests{backend=\"%s\"} %d\n",
                views[i].slot->name, views[i].slot->inflight);
    metric_header(f, "inferlab_backend_finished_total", "counter",
                  "Generation requests by backend and finish reason (errors as "
                  "reason=\"error_event\").");
    for (size_t i = 0; i < n; i++) {
        const ilab_slot *k = views[i].slot;
        for (int r = ILAB_FINISH_STOP; r <= ILAB_FINISH_ERROR; r++)
            fprintf(f, "inferlab_backend_finished_total{backend=\"%s\",reason=\"%s\"} %llu\n",
                    k->name, ilab_finish_reason_name(r), k->finished_by_reason[r]);
        fprintf(f, "inferlab_backend_finished_total{backend=\"%s\",reason=\"error_event\"} "
                   "%llu\n", k->name, k->errors);
    }
    metric_header(f, "inferlab_backend_prompt_tokens_total", "counter",
                  "Prompt tokens of finished requests.");
    for (size_t i = 0; i < n; i++)
        fprintf(f, "inferlab_backend_prompt_tokens_total{backend=\"%s\"} %llu\n",
                views[i].slot->name, views[i].slot->prompt_tokens);
    metric_header(f, "inferlab_backend_generation_tokens_total", "counter",
                  "Tokens generated by finished requests.");
    for (size_t i = 0; i < n; i++)
        fprintf(f, "inferlab_backend_generation_tokens_total{backend=\"%s\"} %llu\n",
                views[i].slot->name, views[i].slot->generation_tokens);
    metric_header(f, "inferlab_backend_reloads_total", "counter",
                  "Reloads of the backend's plugin file: result=\"ok\" a new version serves, "
                  "\"refused\" it failed a check and the old one kept serving.");
    for (size_t i = 0; i < n; i++) {
        fprintf(f, "inferlab_backend_reloads_total{backend=\"%s\",result=\"ok\"} %llu\n",
                views[i].slot->name, views[i].slot->reloads);
        fprintf(f, "inferlab_backend_reloads_total{backend=\"%s\",result=\"refused\"} %llu\n",
                views[i].slot->name, views[i].slot->refusals);
    }
    metric_header(f, "inferlab_backend_restarts_total", "counter",
                  "Times a backend's worker process died and a new one took over.");
    for (size_t i = 0; i < n; i++)
        fprintf(f, "inferlab_backend_restarts_total{backend=\"%s\"} %llu\n",
                views[i].slot->name, views[i].slot->restarts);
    pthread_mutex_unlock(&s->stats_mu);
    metric_header(f, "inferlab_backend_up", "gauge",
                  "1 while the backend serves, 0 while it does not (unavailable, "
                  "restarting or failed).");
    for (size_t i = 0; i < n; i++)
        fprintf(f, "inferlab_backend_up{backend=\"%s\"} %d\n", views[i].slot->name,
                views[i].v != NULL);
    metric_header(f, "inferlab_backend_retired_versions", "gauge",
                  "Replaced versions still finishing their requests.");
    fprintf(f, "inferlab_backend_retired_versions %zu\n", ilab_server_retired_count(s));
    ilab_backend_views_free(views, n);
}

/* The HTTP layer's own series (stats_mu held). */
static void http_metrics(ilab_server *s, FILE *f)
{
    metric_header(f, "inferlab_http_requests_total", "counter",
                  "HTTP responses by status code.");
    by_code(f, "inferlab_http_requests_total", s->requests_by_code);
    metric_header(f, "inferlab_http_inflight_requests", "gauge",
                  "Generation requests inside the engine (submitted, not yet finished).");
    fprintf(f, "inferlab_http_inflight_requests %d\n", s->inflight);
    metric_header(f, "inferlab_http_active_responses", "gauge",
                  "Generation responses being written.");
    fprintf(f, "inferlab_http_active_responses %d\n", s->active_generations);
    metric_header(f, "inferlab_http_finished_total", "counter",
                  "Generation requests by finish reason.");
    for (int r = ILAB_FINISH_STOP; r <= ILAB_FINISH_ERROR; r++)
        fprintf(f, "inferlab_http_finished_total{reason=\"%s\"} %llu\n",
                ilab_finish_reason_name(r), s->finished_by_reason[r]);
    metric_header(f, "inferlab_http_client_disconnects_total", "counter",
                  "Clients that left before their response ended (their requests are "
                  "cancelled).");
    fprintf(f, "inferlab_http_client_disconnects_total %llu\n", s->disconnects);
    metric_header(f, "inferlab_http_protocol_errors_total", "counter",
                  "Requests refused at the HTTP level (malformed request line, headers, "
                  "body framing), by status.");
    by_code(f, "inferlab_http_protocol_errors_total", s->protocol_errors);
    metric_header(f, "inferlab_http_head_timeouts_total", "counter",
                  "Connections closed for not sending a complete request head in time.");
    fprintf(f, "inferlab_http_head_timeouts_total %llu\n",
            (unsigned long long)ilab_conn_monitor_head_timeouts(s->monitor));
    metric_header(f, "inferlab_http_connections_over_limit_total", "counter",
                  "Connections closed at once for being over their client address's budget.");
    fprintf(f, "inferlab_http_connections_over_limit_total %llu\n",
            (unsigned long long)ilab_conn_monitor_over_limit(s->monitor));
}

enum MHD_Result ilab_handle_metrics(ilab_server *s, struct MHD_Connection *c,
                                    const ilab_http_request *req)
{
    (void)req;
    /* The runtime's process-wide metrics first, then the HTTP layer's own. */
    char *engine_text = ilab_metrics_render();
    char *own = NULL;
    size_t own_len = 0;
    FILE *f = open_memstream(&own, &own_len);
    if (f) {
        pthread_mutex_lock(&s->stats_mu);
        http_metrics(s, f);
        pthread_mutex_unlock(&s->stats_mu);
        backend_metrics(s, f);
        fclose(f);
    }
    size_t el = engine_text ? strlen(engine_text) : 0;
    char *body = own ? malloc(el + own_len + 1) : NULL;
    if (body) {
        if (el)
            memcpy(body, engine_text, el);
        memcpy(body + el, own, own_len + 1);
    }
    free(own);
    free(engine_text);
    return ilab_server_send(s, c, 200, "text/plain; version=0.0.4", body);
}

