/* Host settings: defaults, the YAML config file (libyaml's document API, so
 * every error can name the line), and --set overrides. Schema:
 * docs/configuration.md. */
#include "settings.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p)
        memcpy(p, s, n);
    return p;
}

void ilab_settings_init(ilab_settings *s)
{
    memset(s, 0, sizeof *s);
    s->default_backend = dup_str("torchlike");
    ilab_engine_config_default(&s->scheduler);
    s->server.host = dup_str("127.0.0.1");
    s->server.port = 8080;
    s->server.max_body_bytes = 1048576;
    s->server.request_timeout_seconds = 300;
    s->server.shutdown_grace_seconds = 5;
    s->server.head_timeout_seconds = 10;
    s->server.max_connections = 4096;
    s->server.max_connections_per_client = 256;
    s->server.max_connections_per_loopback_client = 0; /* loopback: max_connections only */
    s->server.threads = 2;
    s->server.isolate_backends = 1;
    s->server.backend_call_timeout_seconds = 60;
}

void ilab_settings_free(ilab_settings *s)
{
    for (size_t i = 0; i < s->n_plugin_dirs; i++)
        free(s->plugin_dirs[i]);
    free(s->plugin_dirs);
    for (size_t i = 0; i < s->n_plugin_files; i++)
        free(s->plugin_files[i]);
    free(s->plugin_files);
    free(s->default_backend);
    free(s->server.host);
    free(s->server.api_key);
    free(s->server.access_log);
    free(s->server.chat_template);
    free(s->server.conformance_reports);
    for (size_t i = 0; i < s->server.n_backends; i++)
        free(s->server.backends[i]);
    free(s->server.backends);
    for (size_t i = 0; i < s->server.n_models; i++)
        free(s->server.models[i]);
    free(s->server.models);
    for (size_t i = 0; i < s->n_plugins; i++) {
        ilab_plugin_settings *p = &s->plugins[i];
        for (size_t k = 0; k < p->n; k++) {
            free((char *)p->entries[k].key);
            free((char *)p->entries[k].value);
        }
        free(p->entries);
        free(p->plugin);
    }
    free(s->plugins);
    memset(s, 0, sizeof *s);
}

ilab_status ilab_settings_add_plugin_dir(ilab_settings *s, const char *dir)
{
    if (!s || !dir || !dir[0])
        return ILAB_INVALID_ARGUMENT;
    for (size_t i = 0; i < s->n_plugin_dirs; i++)
        if (!strcmp(s->plugin_dirs[i], dir))
            return ILAB_OK;
    char **dirs = realloc(s->plugin_dirs, (s->n_plugin_dirs + 1) * sizeof *dirs);
    if (!dirs)
        return ILAB_OUT_OF_MEMORY;
    s->plugin_dirs = dirs;
    if (!(dirs[s->n_plugin_dirs] = dup_str(dir)))
        return ILAB_OUT_OF_MEMORY;
    s->n_plugin_dirs++;
    return ILAB_OK;
}

static ilab_plugin_settings *plugin_settings(ilab_settings *s, const char *plugin, bool create)
{
    for (size_t i = 0; i < s->n_plugins; i++)
        if (!strcmp(s->plugins[i].plugin, plugin))
            return &s->plugins[i];
    if (!create)
        return NULL;
    ilab_plugin_settings *p = realloc(s->plugins, (s->n_plugins + 1) * sizeof *p);
    if (!p)
        return NULL;
    s->plugins = p;
    p = &s->plugins[s->n_plugins];
    memset(p, 0, sizeof *p);
    if (!(p->plugin = dup_str(plugin)))
        return NULL;
    s->n_plugins++;
    return p;
}

/* Set (or replace) one per-plugin entry. */
static ilab_status set_plugin_entry(ilab_settings *s, const char *plugin, const char *key,
                                    const char *value)
{
    ilab_plugin_settings *p = plugin_settings(s, plugin, true);
    if (!p)
        return ILAB_OUT_OF_MEMORY;
    char *v = dup_str(value);
    if (!v)
        return ILAB_OUT_OF_MEMORY;
    for (size_t i = 0; i < p->n; i++)
        if (!strcmp(p->entries[i].key, key)) {
            free((char *)p->entries[i].value);
            p->entries[i].value = v;
            return ILAB_OK;
        }
    ilab_config_entry_t *e = realloc(p->entries, (p->n + 1) * sizeof *e);
    char *k = dup_str(key);
    if (!e || !k) {
        free(v);
        free(k);
        if (e)
            p->entries = e;
        return ILAB_OUT_OF_MEMORY;
    }
    p->entries = e;
    e[p->n].key = k;
    e[p->n].value = v;
    p->n++;
    return ILAB_OK;
}

const ilab_config_entry_t *ilab_settings_plugin_config(const ilab_settings *s, const char *plugin,
                                                       size_t *n)
{
    *n = 0;
    for (size_t i = 0; s && plugin && i < s->n_plugins; i++)
        if (!strcmp(s->plugins[i].plugin, plugin)) {
            *n = s->plugins[i].n;
            return s->plugins[i].entries;
        }
    return NULL;
}

/* ---- typed host keys (scheduler.*, server.*) ----------------------------- */

static bool parse_int(const char *text, long min, long max, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end || v < min || v > max)
        return false;
    *out = v;
    return true;
}

typedef struct int_key {
    const char *name;
    long min, max;
    size_t offset; /* into ilab_settings */
    bool is_size;
} int_key;

static const int_key scheduler_keys[] = {
    {"max_running", 1, 1 << 20, offsetof(ilab_settings, scheduler.max_running), false},
    {"max_waiting", 0, 1 << 24, offsetof(ilab_settings, scheduler.max_waiting), false},
    {"step_token_budget", 1, 1 << 24, offsetof(ilab_settings, scheduler.step_token_budget), false},
    {"prefill_chunk", 1, 1 << 24, offsetof(ilab_settings, scheduler.prefill_chunk), false},
    {"prefix_cache_positions", 0, 1 << 24, offsetof(ilab_settings, scheduler.prefix_cache_positions),
     false},
    {"prefix_cache_min_tokens", 1, 1 << 24,
     offsetof(ilab_settings, scheduler.prefix_cache_min_tokens), false},
    {"kv_watermark_percent", 0, 50, offsetof(ilab_settings, scheduler.kv_watermark_percent), false},
};
static const int_key server_keys[] = {
    {"port", 0, 65535, offsetof(ilab_settings, server.port), false},
    {"max_body_bytes", 1, LONG_MAX, offsetof(ilab_settings, server.max_body_bytes), true},
    {"request_timeout_seconds", 1, 86400, offsetof(ilab_settings, server.request_timeout_seconds), false},
    {"shutdown_grace_seconds", 0, 3600, offsetof(ilab_settings, server.shutdown_grace_seconds), false},
    {"head_timeout_seconds", 1, 3600, offsetof(ilab_settings, server.head_timeout_seconds), false},
    {"max_connections", 1, 1 << 20, offsetof(ilab_settings, server.max_connections), false},
    {"max_connections_per_client", 0, 1 << 20,
     offsetof(ilab_settings, server.max_connections_per_client), false},
    {"max_connections_per_loopback_client", 0, 1 << 20,
     offsetof(ilab_settings, server.max_connections_per_loopback_client), false},
    {"threads", 1, 64, offsetof(ilab_settings, server.threads), false},
    {"metrics_require_key", 0, 1, offsetof(ilab_settings, server.metrics_require_key), false},
    {"isolate_backends", 0, 1, offsetof(ilab_settings, server.isolate_backends), false},
    {"backend_call_timeout_seconds", 1, 86400,
     offsetof(ilab_settings, server.backend_call_timeout_seconds), false},
};

/* Plugin names are [a-z0-9_]+ (docs/manifest.md). */
static bool is_plugin_name(const char *name, size_t len)
{
    if (!len)
        return false;
    for (size_t i = 0; i < len; i++)
        if (!((name[i] >= 'a' && name[i] <= 'z') || (name[i] >= '0' && name[i] <= '9') ||
              name[i] == '_'))
            return false;
    return true;
}

/* Append `len` bytes of `name` to server.backends (once). */
static ilab_status add_backend(ilab_settings *s, const char *name, size_t len, const char *where,
                               char *err, size_t err_cap)
{
    if (!is_plugin_name(name, len)) {
        snprintf(err, err_cap, "%s: server.backends: '%.*s' is not a plugin name (lower-case "
                               "letters, digits and '_')", where, (int)len, name);
        return ILAB_INVALID_ARGUMENT;
    }
    for (size_t i = 0; i < s->server.n_backends; i++)
        if (strlen(s->server.backends[i]) == len && !strncmp(s->server.backends[i], name, len))
            return ILAB_OK;
    char **grown = realloc(s->server.backends, (s->server.n_backends + 1) * sizeof *grown);
    if (!grown)
        return ILAB_OUT_OF_MEMORY;
    s->server.backends = grown;
    if (!(grown[s->server.n_backends] = strndup(name, len)))
        return ILAB_OUT_OF_MEMORY;
    s->server.n_backends++;
    return ILAB_OK;
}

static void clear_backends(ilab_settings *s)
{
    for (size_t i = 0; i < s->server.n_backends; i++)
        free(s->server.backends[i]);
    s->server.n_backends = 0;
}

/* server.backends from text: names separated by commas; replaces the list. */
static ilab_status set_backends(ilab_settings *s, const char *value, const char *where,
                                char *err, size_t err_cap)
{
    clear_backends(s);
    for (const char *p = value;; p++) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        ilab_status st = add_backend(s, p, len, where, err, err_cap);
        if (st != ILAB_OK || !end)
            return st;
        p = end;
    }
}

/* Set section.key (section "scheduler" or "server") from text. `where` is
 * the prefix of any message ("FILE:LINE" or "--set"). */
static ilab_status set_host_key(ilab_settings *s, const char *section, const char *key,
                                const char *value, const char *where, char *err, size_t err_cap)
{
    bool server = !strcmp(section, "server");
    if (server && !strcmp(key, "backends"))
        return set_backends(s, value, where, err, err_cap);
    if (server && !strcmp(key, "models")) {
        snprintf(err, err_cap, "%s: server.models: a mapping of model name to model file; set it "
                               "in the configuration file, or use serve --model NAME=FILE", where);
        return ILAB_INVALID_ARGUMENT;
    }
    char **text = !server ? NULL
                  : !strcmp(key, "host") ? &s->server.host
                  : !strcmp(key, "api_key") ? &s->server.api_key
                  : !strcmp(key, "access_log") ? &s->server.access_log
                  : !strcmp(key, "chat_template") ? &s->server.chat_template
                  : !strcmp(key, "conformance_reports") ? &s->server.conformance_reports : NULL;
    if (text) {
        if (!value[0]) {
            snprintf(err, err_cap, "%s: server.%s: must not be empty", where, key);
            return ILAB_INVALID_ARGUMENT;
        }
        char *h = dup_str(value);
        if (!h)
            return ILAB_OUT_OF_MEMORY;
        free(*text);
        *text = h;
        return ILAB_OK;
    }
    const int_key *keys = server ? server_keys : scheduler_keys;
    size_t n = server ? sizeof server_keys / sizeof *server_keys
                      : sizeof scheduler_keys / sizeof *scheduler_keys;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(keys[i].name, key))
            continue;
        long v;
        if (!parse_int(value, keys[i].min, keys[i].max, &v)) {
            snprintf(err, err_cap, "%s: %s.%s: '%s' is not an integer in [%ld, %ld]", where, section,
                     key, value, keys[i].min, keys[i].max);
            return ILAB_INVALID_ARGUMENT;
        }
        char *field = (char *)s + keys[i].offset;
        if (keys[i].is_size)
            *(size_t *)field = (size_t)v;
        else
            *(int *)field = (int)v;
        return ILAB_OK;
    }
    char known[512] = "";
    for (size_t i = 0; i < n; i++) {
        strncat(known, i ? ", " : "", sizeof known - strlen(known) - 1);
        strncat(known, keys[i].name, sizeof known - strlen(known) - 1);
    }
    if (server)
        strncat(known, ", host, api_key, access_log, chat_template, conformance_reports, backends, "
                       "models", sizeof known - strlen(known) - 1);
    snprintf(err, err_cap, "%s: %s.%s: unknown key (known: %s)", where, section, key, known);
    return ILAB_INVALID_ARGUMENT;
}

/* ---- the YAML file ------------------------------------------------------- */

typedef struct yaml_ctx {
    yaml_document_t *doc;
    const char *path;
    char *err;
    size_t err_cap;
} yaml_ctx;

static ilab_status fail(yaml_ctx *c, const yaml_node_t *node, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static ilab_status fail(yaml_ctx *c, const yaml_node_t *node, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(c->err, c->err_cap, "%s:%zu: %s", c->path, node ? node->start_mark.line + 1 : 0, msg);
    return ILAB_INVALID_ARGUMENT;
}

static const char *scalar(const yaml_node_t *n)
{
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

static const char *node_kind(const yaml_node_t *n)
{
    if (!n)
        return "nothing";
    switch (n->type) {
    case YAML_SCALAR_NODE: return "a scalar";
    case YAML_SEQUENCE_NODE: return "a list";
    case YAML_MAPPING_NODE: return "a mapping";
    default: return "nothing";
    }
}

static ilab_status load_plugin_dirs(yaml_ctx *c, ilab_settings *s, yaml_node_t *v)
{
    if (scalar(v))
        return ilab_settings_add_plugin_dir(s, scalar(v)) == ILAB_OK
                   ? ILAB_OK
                   : fail(c, v, "plugin_dirs: '%s' is not a usable directory name", scalar(v));
    if (v->type != YAML_SEQUENCE_NODE)
        return fail(c, v, "plugin_dirs: expected a list of directories, got %s", node_kind(v));
    for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
        yaml_node_t *d = yaml_document_get_node(c->doc, *it);
        if (!scalar(d) || !scalar(d)[0])
            return fail(c, d, "plugin_dirs: each entry must be a directory path, got %s", node_kind(d));
        if (ilab_settings_add_plugin_dir(s, scalar(d)) != ILAB_OK)
            return ILAB_OUT_OF_MEMORY;
    }
    return ILAB_OK;
}

/* server.models from the file: a mapping of model name to model file,
 * kept as "NAME=FILE" (checked by serve, which names what is wrong);
 * replaces the list. */
static ilab_status load_models(yaml_ctx *c, ilab_settings *s, yaml_node_t *v);

static ilab_status load_section(yaml_ctx *c, ilab_settings *s, const char *section, yaml_node_t *v)
{
    if (v->type != YAML_MAPPING_NODE)
        return fail(c, v, "%s: expected a mapping of key: value, got %s", section, node_kind(v));
    for (yaml_node_pair_t *p = v->data.mapping.pairs.start; p < v->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(c->doc, p->key);
        yaml_node_t *val = yaml_document_get_node(c->doc, p->value);
        if (!scalar(k))
            return fail(c, k, "%s: keys must be plain names", section);
        char where[600];
        snprintf(where, sizeof where, "%s:%zu", c->path, k->start_mark.line + 1);
        if (!strcmp(section, "server") && !strcmp(scalar(k), "backends") &&
            val->type == YAML_SEQUENCE_NODE) {
            clear_backends(s); /* a later file or --set replaces the list */
            for (yaml_node_item_t *it = val->data.sequence.items.start;
                 it < val->data.sequence.items.top; it++) {
                yaml_node_t *d = yaml_document_get_node(c->doc, *it);
                if (!scalar(d))
                    return fail(c, d, "server.backends: each entry must be a plugin name, got "
                                      "%s", node_kind(d));
                ilab_status st = add_backend(s, scalar(d), strlen(scalar(d)), where, c->err,
                                             c->err_cap);
                if (st != ILAB_OK)
                    return st;
            }
            continue;
        }
        if (!strcmp(section, "server") && !strcmp(scalar(k), "models")) {
            ilab_status st = load_models(c, s, val);
            if (st != ILAB_OK)
                return st;
            continue;
        }
        if (!scalar(val))
            return fail(c, val, "%s.%s: expected a value, got %s", section, scalar(k), node_kind(val));
        ilab_status st = set_host_key(s, section, scalar(k), scalar(val), where, c->err, c->err_cap);
        if (st != ILAB_OK)
            return st;
    }
    return ILAB_OK;
}

static ilab_status load_models(yaml_ctx *c, ilab_settings *s, yaml_node_t *v)
{
    if (v->type != YAML_MAPPING_NODE)
        return fail(c, v, "server.models: expected a mapping of model name to model file, got %s",
                    node_kind(v));
    for (size_t i = 0; i < s->server.n_models; i++)
        free(s->server.models[i]);
    s->server.n_models = 0;
    for (yaml_node_pair_t *p = v->data.mapping.pairs.start; p < v->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(c->doc, p->key);
        yaml_node_t *f = yaml_document_get_node(c->doc, p->value);
        if (!scalar(k) || !scalar(f) || !scalar(f)[0])
            return fail(c, scalar(k) ? f : k, "server.models: each entry must be NAME: FILE, "
                                              "got %s", node_kind(scalar(k) ? f : k));
        if (strchr(scalar(k), '=') || strchr(scalar(k), '/'))
            return fail(c, k, "server.models: '%s' is not a model name", scalar(k));
        char **grown = realloc(s->server.models, (s->server.n_models + 1) * sizeof *grown);
        if (!grown)
            return ILAB_OUT_OF_MEMORY;
        s->server.models = grown;
        size_t n = strlen(scalar(k)) + strlen(scalar(f)) + 2;
        if (!(grown[s->server.n_models] = malloc(n)))
            return ILAB_OUT_OF_MEMORY;
        snprintf(grown[s->server.n_models++], n, "%s=%s", scalar(k), scalar(f));
    }
    return ILAB_OK;
}

static ilab_status load_plugins(yaml_ctx *c, ilab_settings *s, yaml_node_t *v)
{
    if (v->type != YAML_MAPPING_NODE)
        return fail(c, v, "plugins: expected a mapping of plugin name to its keys, got %s", node_kind(v));
    for (yaml_node_pair_t *p = v->data.mapping.pairs.start; p < v->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(c->doc, p->key);
        yaml_node_t *val = yaml_document_get_node(c->doc, p->value);
        const char *name = scalar(k);
        if (!name || !name[0])
            return fail(c, k, "plugins: each key must be a plugin name");
        if (val->type == YAML_SCALAR_NODE && !scalar(val)[0])
            continue; /* "torchlike:" with nothing under it */
        if (val->type != YAML_MAPPING_NODE)
            return fail(c, val, "plugins.%s: expected a mapping of key: value, got %s", name, node_kind(val));
        for (yaml_node_pair_t *q = val->data.mapping.pairs.start; q < val->data.mapping.pairs.top; q++) {
            yaml_node_t *kk = yaml_document_get_node(c->doc, q->key);
            yaml_node_t *vv = yaml_document_get_node(c->doc, q->value);
            if (!scalar(kk) || !scalar(kk)[0])
                return fail(c, kk, "plugins.%s: keys must be plain names", name);
            if (!scalar(vv))
                return fail(c, vv, "plugins.%s.%s: expected a value (string, number or bool), got %s",
                            name, scalar(kk), node_kind(vv));
            if (set_plugin_entry(s, name, scalar(kk), scalar(vv)) != ILAB_OK)
                return ILAB_OUT_OF_MEMORY;
        }
    }
    return ILAB_OK;
}

static ilab_status load_root(yaml_ctx *c, ilab_settings *s)
{
    yaml_node_t *root = yaml_document_get_root_node(c->doc);
    if (!root)
        return ILAB_OK; /* an empty file changes nothing */
    if (root->type == YAML_SCALAR_NODE && !scalar(root)[0])
        return ILAB_OK;
    if (root->type != YAML_MAPPING_NODE)
        return fail(c, root, "expected a mapping at the top level, got %s", node_kind(root));
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(c->doc, p->key);
        yaml_node_t *v = yaml_document_get_node(c->doc, p->value);
        const char *key = scalar(k);
        ilab_status st;
        if (!key)
            return fail(c, k, "top-level keys must be plain names");
        if (!strcmp(key, "plugin_dirs")) {
            st = load_plugin_dirs(c, s, v);
        } else if (!strcmp(key, "default_backend")) {
            if (!scalar(v) || !scalar(v)[0])
                return fail(c, v, "default_backend: expected a plugin name, got %s", node_kind(v));
            char *b = dup_str(scalar(v));
            if (!b)
                return ILAB_OUT_OF_MEMORY;
            free(s->default_backend);
            s->default_backend = b;
            st = ILAB_OK;
        } else if (!strcmp(key, "scheduler") || !strcmp(key, "server")) {
            st = load_section(c, s, key, v);
        } else if (!strcmp(key, "plugins")) {
            st = load_plugins(c, s, v);
        } else {
            return fail(c, k, "%s: unknown key (known: plugin_dirs, default_backend, scheduler, "
                              "server, plugins)", key);
        }
        if (st != ILAB_OK)
            return st;
    }
    return ILAB_OK;
}

/* Load the document `parser` reads and merge it; `label` names the input in
 * messages. The parser is the caller's. */
static ilab_status load_parsed(ilab_settings *s, yaml_parser_t *parser, const char *label,
                               char *err, size_t err_cap)
{
    yaml_document_t doc;
    if (!yaml_parser_load(parser, &doc)) {
        snprintf(err, err_cap, "%s:%zu:%zu: YAML syntax error: %s%s%s", label,
                 parser->problem_mark.line + 1, parser->problem_mark.column + 1,
                 parser->problem ? parser->problem : "unknown problem",
                 parser->context ? " " : "", parser->context ? parser->context : "");
        return ILAB_INVALID_ARGUMENT;
    }
    yaml_ctx c = {&doc, label, err, err_cap};
    ilab_status st = load_root(&c, s);
    if (st == ILAB_OUT_OF_MEMORY && !err[0])
        snprintf(err, err_cap, "%s: out of memory", label);
    yaml_document_delete(&doc);
    return st;
}

ilab_status ilab_settings_load_file(ilab_settings *s, const char *path, char *err, size_t err_cap)
{
    char dummy[1];
    if (!err || !err_cap) {
        err = dummy;
        err_cap = sizeof dummy;
    }
    err[0] = '\0';
    if (!s || !path) {
        snprintf(err, err_cap, "settings: no file given");
        return ILAB_INVALID_ARGUMENT;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, err_cap, "%s: cannot open config file: %s", path, strerror(errno));
        return ILAB_IO;
    }
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser)) {
        fclose(f);
        snprintf(err, err_cap, "%s: out of memory starting the YAML parser", path);
        return ILAB_OUT_OF_MEMORY;
    }
    yaml_parser_set_input_file(&parser, f);
    ilab_status st = load_parsed(s, &parser, path, err, err_cap);
    yaml_parser_delete(&parser);
    fclose(f);
    return st;
}

ilab_status ilab_settings_load_text(ilab_settings *s, const char *label, const char *text,
                                    size_t len, char *err, size_t err_cap)
{
    char dummy[1];
    if (!err || !err_cap) {
        err = dummy;
        err_cap = sizeof dummy;
    }
    err[0] = '\0';
    if (!s || !label || (!text && len > 0)) {
        snprintf(err, err_cap, "settings: no text given");
        return ILAB_INVALID_ARGUMENT;
    }
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser)) {
        snprintf(err, err_cap, "%s: out of memory starting the YAML parser", label);
        return ILAB_OUT_OF_MEMORY;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)(text ? text : ""), len);
    ilab_status st = load_parsed(s, &parser, label, err, err_cap);
    yaml_parser_delete(&parser);
    return st;
}

ilab_status ilab_settings_set(ilab_settings *s, const char *assignment, char *err, size_t err_cap)
{
    char dummy[1];
    if (!err || !err_cap) {
        err = dummy;
        err_cap = sizeof dummy;
    }
    err[0] = '\0';
    if (!s || !assignment) {
        snprintf(err, err_cap, "--set: missing plugin.key=value");
        return ILAB_INVALID_ARGUMENT;
    }
    const char *eq = strchr(assignment, '=');
    const char *dot = strchr(assignment, '.');
    if (!eq || !dot || dot > eq || dot == assignment || dot + 1 == eq) {
        snprintf(err, err_cap, "--set '%s': expected plugin.key=value (e.g. torchlike.threads=2)",
                 assignment);
        return ILAB_INVALID_ARGUMENT;
    }
    size_t plen = (size_t)(dot - assignment), klen = (size_t)(eq - dot - 1);
    char *plugin = malloc(plen + 1), *key = malloc(klen + 1);
    if (!plugin || !key) {
        free(plugin);
        free(key);
        return ILAB_OUT_OF_MEMORY;
    }
    memcpy(plugin, assignment, plen);
    plugin[plen] = '\0';
    memcpy(key, dot + 1, klen);
    key[klen] = '\0';
    ilab_status st;
    /* Plugin names are [a-z0-9_]+, so "scheduler"/"server" could collide only
     * with a plugin of that name; the host sections win. */
    if (!strcmp(plugin, "scheduler") || !strcmp(plugin, "server"))
        st = set_host_key(s, plugin, key, eq + 1, "--set", err, err_cap);
    else
        st = set_plugin_entry(s, plugin, key, eq + 1);
    if (st == ILAB_OUT_OF_MEMORY && !err[0])
        snprintf(err, err_cap, "--set: out of memory");
    free(plugin);
    free(key);
    return st;
}

ilab_status ilab_settings_set_model(ilab_settings *s, const char *backend, const char *file)
{
    const char *plugin = backend ? backend : s->default_backend;
    if (!plugin || !file)
        return ILAB_INVALID_ARGUMENT;
    return set_plugin_entry(s, plugin, "model", file);
}

/* `file` as an absolute path: the current folder joined to a relative one
 * (leading "./" dropped, symbolic links kept). NULL when out of memory or
 * the current folder cannot be told (errno set). */
static char *absolute_path(const char *file)
{
    if (file[0] == '/')
        return dup_str(file);
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd))
        return NULL;
    while (file[0] == '.' && file[1] == '/')
        for (file += 2; *file == '/'; file++)
            ;
    size_t n = strlen(cwd) + strlen(file) + 2;
    char *abs = malloc(n);
    if (abs)
        snprintf(abs, n, "%s/%s", strcmp(cwd, "/") ? cwd : "", file);
    return abs;
}

ilab_status ilab_settings_add_plugin_files(ilab_settings *s, const char *const *files, size_t n,
                                           char *err, size_t err_cap)
{
    for (size_t i = 0; i < n; i++) {
        struct stat st;
        int bad = stat(files[i], &st) != 0 ? errno : 0;
        if (bad || !S_ISREG(st.st_mode)) {
            snprintf(err, err_cap, "--plugin '%s': %s", files[i],
                     bad ? strerror(bad)
                         : "not a regular file (a plugin is a .so file; a folder is --plugin-dir)");
            return ILAB_INVALID_ARGUMENT;
        }
        char **more = realloc(s->plugin_files, (s->n_plugin_files + 1) * sizeof *more);
        if (!more) {
            snprintf(err, err_cap, "--plugin: out of memory");
            return ILAB_OUT_OF_MEMORY;
        }
        s->plugin_files = more;
        if (!(more[s->n_plugin_files] = absolute_path(files[i]))) {
            snprintf(err, err_cap, "--plugin '%s': %s", files[i], strerror(errno));
            return ILAB_OUT_OF_MEMORY;
        }
        s->n_plugin_files++;
    }
    return ILAB_OK;
}

ilab_status ilab_settings_from_cli(ilab_settings *s, const char *config_path,
                                   const char *const *sets, size_t n_sets,
                                   const char *const *plugin_dirs, size_t n_dirs,
                                   char *err, size_t err_cap)
{
    ilab_status st;
    if (config_path && (st = ilab_settings_load_file(s, config_path, err, err_cap)) != ILAB_OK)
        return st;
    for (size_t i = 0; i < n_sets; i++)
        if ((st = ilab_settings_set(s, sets[i], err, err_cap)) != ILAB_OK)
            return st;
    for (size_t i = 0; i < n_dirs; i++)
        if ((st = ilab_settings_add_plugin_dir(s, plugin_dirs[i])) != ILAB_OK) {
            snprintf(err, err_cap, "--plugin-dir '%s': %s", plugin_dirs[i], ilab_status_name(st));
            return st;
        }
    return ILAB_OK;
}
