/* Fuzz target: the host configuration, as `--config FILE --set ...` gives it.
 *
 * Input: YAML text, then NUL-separated --set arguments. Calls
 * ilab_settings_load_text() (the file loader's parser path) and
 * ilab_settings_set() for each argument, and asserts:
 *  - a refusal has a message naming its source (the file label or --set);
 *  - whatever was accepted, every host key is in the range
 *    docs/configuration.md documents, strings are non-empty, plugin_dirs
 *    hold no duplicates and per-plugin keys are unique;
 *  - an accepted plugin.key=value is readable back with exactly that value
 *    (the text after the first '='). */
#include <stdbool.h>
#include <string.h>

#include "config/settings.h"
#include "fuzz.h"

#define LABEL "fuzz.yaml"

static void check_ranges(const ilab_settings *s)
{
    const ilab_engine_config *c = &s->scheduler;
    FUZZ_CHECK(c->max_running >= 1 && c->max_running <= 1 << 20, "max_running %d", c->max_running);
    FUZZ_CHECK(c->max_waiting >= 0 && c->max_waiting <= 1 << 24, "max_waiting %d", c->max_waiting);
    FUZZ_CHECK(c->step_token_budget >= 1 && c->step_token_budget <= 1 << 24, "step_token_budget %d",
               c->step_token_budget);
    FUZZ_CHECK(c->prefill_chunk >= 1 && c->prefill_chunk <= 1 << 24, "prefill_chunk %d",
               c->prefill_chunk);
    const ilab_server_settings *sv = &s->server;
    FUZZ_CHECK(sv->host && sv->host[0], "server.host empty");
    FUZZ_CHECK(sv->port >= 0 && sv->port <= 65535, "port %d", sv->port);
    FUZZ_CHECK(sv->max_body_bytes >= 1, "max_body_bytes %zu", sv->max_body_bytes);
    FUZZ_CHECK(sv->request_timeout_seconds >= 1 && sv->request_timeout_seconds <= 86400,
               "request_timeout_seconds %d", sv->request_timeout_seconds);
    FUZZ_CHECK(sv->shutdown_grace_seconds >= 0 && sv->shutdown_grace_seconds <= 3600,
               "shutdown_grace_seconds %d", sv->shutdown_grace_seconds);
    FUZZ_CHECK(s->default_backend && s->default_backend[0], "default_backend empty");
    for (size_t i = 0; i < s->n_plugin_dirs; i++) {
        FUZZ_CHECK(s->plugin_dirs[i] && s->plugin_dirs[i][0], "plugin_dirs[%zu] empty", i);
        for (size_t j = 0; j < i; j++)
            FUZZ_CHECK(strcmp(s->plugin_dirs[i], s->plugin_dirs[j]), "plugin dir '%s' twice",
                       s->plugin_dirs[i]);
    }
    for (size_t i = 0; i < s->n_plugins; i++) {
        const ilab_plugin_settings *p = &s->plugins[i];
        FUZZ_CHECK(p->plugin && p->plugin[0], "plugin name empty");
        for (size_t j = 0; j < i; j++)
            FUZZ_CHECK(strcmp(p->plugin, s->plugins[j].plugin), "plugin '%s' twice", p->plugin);
        for (size_t k = 0; k < p->n; k++) {
            FUZZ_CHECK(p->entries[k].key && p->entries[k].key[0] && p->entries[k].value,
                       "plugins.%s entry %zu", p->plugin, k);
            for (size_t j = 0; j < k; j++)
                FUZZ_CHECK(strcmp(p->entries[k].key, p->entries[j].key), "plugins.%s.%s twice",
                           p->plugin, p->entries[k].key);
        }
    }
}

static void check_set(ilab_settings *s, const char *arg)
{
    char err[1024];
    ilab_status st = ilab_settings_set(s, arg, err, sizeof err);
    FUZZ_CHECK(st == ILAB_OK || st == ILAB_INVALID_ARGUMENT, "--set status %s",
               ilab_status_name(st));
    if (st != ILAB_OK) {
        FUZZ_CHECK(!strncmp(err, "--set", 5), "--set refusal '%s' does not say --set", err);
        return;
    }
    const char *dot = strchr(arg, '.'), *eq = strchr(arg, '=');
    FUZZ_CHECK(dot && eq && dot < eq && dot > arg && dot + 1 < eq, "accepted malformed '%s'", arg);
    char plugin[256], key[256];
    size_t plen = (size_t)(dot - arg), klen = (size_t)(eq - dot - 1);
    if (plen >= sizeof plugin || klen >= sizeof key)
        return;
    memcpy(plugin, arg, plen);
    plugin[plen] = '\0';
    memcpy(key, dot + 1, klen);
    key[klen] = '\0';
    if (!strcmp(plugin, "scheduler") || !strcmp(plugin, "server"))
        return; /* typed host keys: check_ranges covers them */
    size_t n = 0;
    const ilab_config_entry_t *e = ilab_settings_plugin_config(s, plugin, &n);
    bool found = false;
    for (size_t i = 0; i < n; i++)
        if (!strcmp(e[i].key, key)) {
            FUZZ_CHECK(!strcmp(e[i].value, eq + 1), "%s.%s is '%s', set '%s'", plugin, key,
                       e[i].value, eq + 1);
            found = true;
        }
    FUZZ_CHECK(found, "--set '%s' accepted but %s.%s is not there", arg, plugin, key);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_strndup(data, size);
    if (!text)
        return 0;
    size_t yaml_len = strlen(text);

    ilab_settings s;
    ilab_settings_init(&s);
    check_ranges(&s);
    char err[1024];
    ilab_status st = ilab_settings_load_text(&s, LABEL, text, yaml_len, err, sizeof err);
    FUZZ_CHECK(st == ILAB_OK || st == ILAB_INVALID_ARGUMENT, "load status %s", ilab_status_name(st));
    FUZZ_CHECK(st == ILAB_OK || !strncmp(err, LABEL ":", sizeof LABEL),
               "refusal '%s' does not name the file", err);
    check_ranges(&s);

    /* The --set arguments after the YAML; the last one runs to the end. */
    for (size_t at = yaml_len + 1; at <= size;) {
        const char *arg = text + at;
        size_t len = strlen(arg);
        check_set(&s, arg);
        check_ranges(&s);
        at += len + 1;
    }
    ilab_settings_free(&s);
    free(text);
    return 0;
}
