/* One model two ways: a host engine over a plugin opened with settings. */
#include "live_pair.h"

#include <stdio.h>
#include <string.h>

#define MAX_SETS 8

int live_open(live_side *s, const char *path, const char *const *sets, size_t n, char *err,
              size_t cap)
{
    memset(s, 0, sizeof *s);
    if (n > MAX_SETS) {
        snprintf(err, cap, "%s: at most %d settings", path, MAX_SETS);
        return -1;
    }
    char keys[MAX_SETS][64];
    ilab_config_entry_t user[MAX_SETS];
    for (size_t i = 0; i < n; i++) {
        const char *eq = strchr(sets[i], '=');
        if (!eq || (size_t)(eq - sets[i]) >= sizeof keys[i]) {
            snprintf(err, cap, "setting '%s': expected key=value", sets[i]);
            return -1;
        }
        snprintf(keys[i], sizeof keys[i], "%.*s", (int)(eq - sets[i]), sets[i]);
        user[i] = (ilab_config_entry_t){.key = keys[i], .value = eq + 1};
    }
    if (ilab_plugin_load(path, err, cap, &s->plugin) != ILAB_OK)
        return -1;
    const ilab_manifest *m = ilab_plugin_manifest(s->plugin);
    s->api = ilab_plugin_api(s->plugin);
    ilab_config_entry_t *cfg = NULL;
    size_t n_cfg = 0;
    char why[1024] = "";
    ilab_status st = ilab_config_validate(m, user, n, why, sizeof why);
    if (st == ILAB_OK)
        st = ilab_config_with_defaults(m, user, n, &cfg, &n_cfg);
    if (st == ILAB_OK)
        st = s->api->create(ilab_host_services(), cfg, n_cfg, why, sizeof why, &s->backend);
    ilab_config_entries_free(cfg, n_cfg);
    if (st != ILAB_OK) {
        snprintf(err, cap, "%s: %s (%s)", path, why, ilab_status_name(st));
        live_close(s);
        return -1;
    }
    s->info.struct_size = sizeof s->info;
    s->api->model_info(s->backend, &s->info);
    if (ilab_engine_create(s->plugin, s->backend, NULL, err, cap, &s->engine) != ILAB_OK) {
        live_close(s);
        return -1;
    }
    return 0;
}

void live_close(live_side *s)
{
    if (s->engine)
        ilab_engine_destroy(s->engine);
    if (s->backend)
        s->api->destroy(s->backend);
    if (s->plugin)
        ilab_plugin_unload(s->plugin);
    memset(s, 0, sizeof *s);
}

typedef struct sink {
    int32_t *out;
    size_t n, cap;
} sink;

static int on_event(void *user, const ilab_event_t *ev)
{
    sink *k = user;
    if (ev->type == ILAB_EVENT_TOKEN && k->n < k->cap)
        k->out[k->n++] = ev->token;
    return 0;
}

int live_generate(live_side *s, const int32_t *prompt, size_t n_prompt,
                  const ilab_sampling_t *sampling, int32_t max_tokens, int32_t *out,
                  size_t *n_out, ilab_request_metrics *metrics, char *err, size_t cap)
{
    ilab_request req;
    memset(&req, 0, sizeof req);
    req.prompt_tokens = prompt;
    req.n_prompt_tokens = n_prompt;
    req.sampling = *sampling;
    req.max_tokens = max_tokens;
    req.ignore_eos = true;
    sink k = {out, 0, (size_t)max_tokens};
    ilab_status st = ilab_engine_generate(s->engine, &req, on_event, &k, err, cap, metrics);
    *n_out = k.n;
    return st == ILAB_OK ? 0 : -1;
}
