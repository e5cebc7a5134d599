/* `inferlab list` and `inferlab info NAME`.
 *
 * Loading a plugin runs its constructor, and probing runs its code: either
 * can crash or hang. So the catalog (host/loader/catalog.h) loads and probes
 * each plugin in a forked child with a deadline, and a child that dies or
 * overruns becomes a "rejected" row. This process never dlopens plugin code.
 * Probes get the user's configuration (--config, --set), so a plugin that
 * needs some can show as available. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "catalog_json.h"
#include "commands.h"
#include "config/settings.h"
#include "loader/catalog.h"
#include "chat_info.h"
#include "runtime/session.h"

typedef struct list_options {
    ilab_settings settings;
    int json;
    const char *name; /* info only */
} list_options;

/* --- arguments --------------------------------------------------------------- */

static void usage(FILE *out, int info)
{
    if (info)
        fprintf(out, "usage: inferlab info NAME [--plugin FILE]... [--plugin-dir DIR]... [--config FILE]\n"
                     "                     [--set PLUGIN.KEY=VAL]... [--model FILE] [--allow-insecure-plugins] [--json]\n"
                     "Show one plugin's manifest, probe result and file.\n");
    else
        fprintf(out, "usage: inferlab list [--plugin FILE]... [--plugin-dir DIR]... [--config FILE]\n"
                     "                     [--set PLUGIN.KEY=VAL]... [--model FILE] [--allow-insecure-plugins] [--json]\n"
                     "List every plugin file found: name, version, ABI, capabilities, file, state\n"
                     "(available | unavailable: reason | rejected: reason | shadowed by FILE |\n"
                     "misconfigured: reason).\n");
    fprintf(out, "\nSearch order: each --plugin FILE (a .so; a relative path, with or without a slash,\n"
                 "is relative to the current folder), then --plugin-dir (repeatable) and the config's plugin_dirs, then the\n"
                 "built-in folder (the build tree's plugins/, or installed <prefix>/lib/inferlab/plugins),\n"
                 "then INFERLAB_PLUGIN_PATH (colon-separated). The first plugin of a name wins.\n"
                 "A file or folder writable by group or others, or owned by another user than root or\n"
                 "you, is rejected as insecure; --allow-insecure-plugins loads it anyway (dangerous:\n"
                 "anyone who can write there runs code as you). Each plugin is loaded and probed with\n"
                 "your configuration in a child process (deadline INFERLAB_PROBE_TIMEOUT seconds,\n"
                 "default 5), so a crashing plugin is listed as rejected.\n"
                 "Exit: 0 listed (rejected plugins included), 1 %s, 2 usage or configuration error.\n",
            info ? "no such plugin" : "no plugin found");
}

enum { OPT_PLUGIN_DIR = 256, OPT_PLUGIN, OPT_CONFIG, OPT_SET, OPT_MODEL, OPT_INSECURE, OPT_JSON,
       OPT_HELP };

/* Returns -1 to go on, else the exit code (messages printed). */
static int parse_list_options(int argc, char **argv, int info, list_options *o)
{
    static const struct option longopts[] = {{"plugin-dir", required_argument, NULL, OPT_PLUGIN_DIR},
                                             {"plugin", required_argument, NULL, OPT_PLUGIN},
                                             {"config", required_argument, NULL, OPT_CONFIG},
                                             {"set", required_argument, NULL, OPT_SET},
                                             {"model", required_argument, NULL, OPT_MODEL},
                                             {"allow-insecure-plugins", no_argument, NULL, OPT_INSECURE},
                                             {"json", no_argument, NULL, OPT_JSON},
                                             {"help", no_argument, NULL, OPT_HELP},
                                             {NULL, 0, NULL, 0}};
    const char *cmd = info ? "info" : "list", *config = NULL, *model = NULL;
    const char **sets = calloc((size_t)argc + 1, sizeof *sets);
    const char **dirs = calloc((size_t)argc + 1, sizeof *dirs);
    const char **files = calloc((size_t)argc + 1, sizeof *files);
    size_t n_sets = 0, n_dirs = 0, n_files = 0;
    int rc = -1;
    if (!sets || !dirs || !files) {
        fprintf(stderr, "inferlab %s: out of memory\n", cmd);
        rc = 1;
        goto out;
    }
    optind = 1;
    opterr = 0;
    for (int c; rc < 0 && (c = getopt_long(argc, argv, "h", longopts, NULL)) != -1;) {
        switch (c) {
        case OPT_PLUGIN_DIR: dirs[n_dirs++] = optarg; break;
        case OPT_PLUGIN: files[n_files++] = optarg; break;
        case OPT_CONFIG: config = optarg; break;
        case OPT_SET: sets[n_sets++] = optarg; break;
        case OPT_MODEL: model = optarg; break;
        case OPT_INSECURE: o->settings.allow_insecure_plugins = true; break;
        case OPT_JSON: o->json = 1; break;
        case 'h':
        case OPT_HELP: usage(stdout, info); rc = 0; break;
        default:
            fprintf(stderr, "inferlab %s: unknown or incomplete option '%s'\n", cmd, argv[optind - 1]);
            usage(stderr, info);
            rc = 2;
        }
    }
    if (rc >= 0)
        goto out;
    if (info && optind == argc - 1) {
        o->name = argv[optind];
    } else if (info || optind != argc) {
        fprintf(stderr, info ? "inferlab info: expected one plugin NAME\n"
                             : "inferlab list: unexpected argument '%s'\n",
                argv[optind < argc ? optind : argc - 1]);
        usage(stderr, info);
        rc = 2;
        goto out;
    }
    char err[2048] = "";
    if (ilab_settings_from_cli(&o->settings, config, sets, n_sets, dirs, n_dirs, err, sizeof err) !=
            ILAB_OK ||
        ilab_settings_add_plugin_files(&o->settings, files, n_files, err, sizeof err) != ILAB_OK ||
        (model && ilab_settings_set_model(&o->settings, o->name, model) != ILAB_OK)) {
        fprintf(stderr, "inferlab %s: %s\n", cmd, model && !err[0] ? "--model: out of memory" : err);
        rc = 2;
    }
out:
    free(sets);
    free(dirs);
    free(files);
    return rc;
}

static const ilab_config_entry_t *user_config(const void *user, const char *name, size_t *n)
{
    return ilab_settings_plugin_config(user, name, n);
}

/* Every plugin file, probed with the user's configuration; NULL on failure
 * (message printed, *rc set). */
static ilab_catalog *probe_all(list_options *o, const char *cmd, int *rc)
{
    ilab_catalog_options co = {
        .plugin_files = (const char *const *)o->settings.plugin_files,
        .n_files = o->settings.n_plugin_files,
        .plugin_dirs = (const char *const *)o->settings.plugin_dirs,
        .n_dirs = o->settings.n_plugin_dirs,
        .allow_insecure = o->settings.allow_insecure_plugins,
        .inspect = {.probe = true, .config = user_config, .config_user = &o->settings},
    };
    ilab_catalog *c = NULL;
    char err[4096];
    ilab_status st = ilab_catalog_scan(&co, err, sizeof err, &c);
    if (st != ILAB_OK) {
        fprintf(stderr, "inferlab %s: %s\n", cmd, err);
        *rc = st == ILAB_INVALID_ARGUMENT ? 2 : 1;
        return NULL;
    }
    char prefix[64];
    snprintf(prefix, sizeof prefix, "inferlab %s: ", cmd);
    ilab_catalog_warn(c, prefix, stderr);
    const char **names = calloc(o->settings.n_plugins + 1, sizeof *names);
    for (size_t i = 0; names && i < o->settings.n_plugins; i++)
        names[i] = o->settings.plugins[i].plugin;
    st = names ? ilab_catalog_check_names(c, names, o->settings.n_plugins,
                                          "configuration for plugin", err, sizeof err)
               : ILAB_OUT_OF_MEMORY;
    free(names);
    if (st != ILAB_OK) {
        fprintf(stderr, "inferlab %s: %s\n", cmd, st == ILAB_OUT_OF_MEMORY ? "out of memory" : err);
        *rc = 2;
        ilab_catalog_free(c);
        return NULL;
    }
    return c;
}

/* Misconfigured plugins are the user's error: listed, then exit 2. */
static int misconfigured(const ilab_catalog *c, const char *cmd)
{
    int rc = 0;
    for (size_t i = 0; i < ilab_catalog_size(c); i++) {
        const ilab_catalog_entry *e = ilab_catalog_at(c, i);
        if (e->state == ILAB_PLUGIN_MISCONFIGURED) {
            fprintf(stderr, "inferlab %s: %s\n", cmd, e->reason);
            rc = 2;
        }
    }
    return rc;
}

static void print_searched(const ilab_catalog *c, FILE *out)
{
    const ilab_plugin_paths *dirs = ilab_catalog_dirs(c);
    fprintf(out, "searched:");
    for (size_t i = 0; dirs && i < dirs->n; i++)
        fprintf(out, " %s", dirs->paths[i]);
    fprintf(out, "%s\n", dirs && dirs->n ? "" : " (no folder)");
}

static const char *str_of(const json_t *row, const char *key)
{
    const char *s = json_string_value(json_object_get(row, key));
    return s ? s : "";
}

/* "tok logits=full/20 sampling=host fork truncate stats batch=64 ctx=1024 threads=none" */
static void capabilities_short(const json_t *caps, char *buf, size_t cap)
{
    buf[0] = '\0';
    if (!caps)
        return;
    json_t *cache = json_object_get(caps, "cache");
    json_int_t ctx = json_integer_value(json_object_get(caps, "max_context"));
    char ctx_text[32];
    snprintf(ctx_text, sizeof ctx_text, ctx ? "%lld" : "model", (long long)ctx);
    snprintf(buf, cap, "%slogits=%s/%lld sampling=%s%s%s%s batch=%lld%s%s%s ctx=%s threads=%s",
             json_is_true(json_object_get(caps, "tokenizer_text"))
                 ? "tok=text "
                 : json_is_true(json_object_get(caps, "tokenizer")) ? "tok " : "",
             str_of(caps, "logits"), (long long)json_integer_value(json_object_get(caps, "topk_max")),
             str_of(caps, "sampling"), json_is_true(json_object_get(cache, "fork")) ? " fork" : "",
             json_is_true(json_object_get(cache, "truncate")) ? " truncate" : "",
             json_is_true(json_object_get(cache, "stats")) ? " stats" : "",
             (long long)json_integer_value(json_object_get(json_object_get(caps, "batching"), "max_batch")),
             json_is_true(json_object_get(caps, "streaming")) ? " stream" : "",
             json_is_true(json_object_get(caps, "cancel")) ? " cancel" : "",
             json_is_true(json_object_get(caps, "chat")) ? " chat" : "", ctx_text,
             str_of(caps, "thread_safety"));
}

/* A rejected plugin has no manifest name: show its file name. */
static const char *display_name(const json_t *row, char *buf, size_t cap)
{
    const char *name = str_of(row, "name");
    if (*name)
        return name;
    const char *path = str_of(row, "path"), *base = strrchr(path, '/');
    snprintf(buf, cap, "(%s)", base ? base + 1 : path);
    return buf;
}

static void print_state(const json_t *row, FILE *out)
{
    const char *state = str_of(row, "state"), *reason = str_of(row, "reason");
    if (!strcmp(state, "shadowed"))
        fprintf(out, "%s\n", reason); /* "shadowed by FILE" */
    else
        fprintf(out, "%s%s%s\n", state, *reason ? ": " : "", reason);
}

static void print_table(const json_t *rows, FILE *out)
{
    size_t i;
    json_t *row;
    int width = (int)strlen("CAPABILITIES"), name_width = (int)strlen("NAME");
    int path_width = (int)strlen("FILE");
    json_array_foreach(rows, i, row) {
        char caps[256], name[128];
        capabilities_short(json_object_get(row, "capabilities"), caps, sizeof caps);
        if ((int)strlen(caps) > width)
            width = (int)strlen(caps);
        int n = (int)strlen(display_name(row, name, sizeof name));
        if (n > name_width)
            name_width = n;
        if ((int)strlen(str_of(row, "path")) > path_width)
            path_width = (int)strlen(str_of(row, "path"));
    }
    fprintf(out, "%-*s %-9s %-4s %-*s %-*s %s\n", name_width, "NAME", "VERSION", "ABI", width,
            "CAPABILITIES", path_width, "FILE", "STATE");
    json_array_foreach(rows, i, row) {
        char caps[256], name[128];
        capabilities_short(json_object_get(row, "capabilities"), caps, sizeof caps);
        fprintf(out, "%-*s %-9s %-4s %-*s %-*s ", name_width, display_name(row, name, sizeof name),
                *str_of(row, "version") ? str_of(row, "version") : "-",
                *str_of(row, "abi") ? str_of(row, "abi") : "-", width, *caps ? caps : "-",
                path_width, str_of(row, "path"));
        print_state(row, out);
    }
}

/* JSON rows keep the documented keys only: name, version, abi, path, state,
 * reason, capabilities (null when rejected), shadowed_by (when shadowed). */
static json_t *list_json(const json_t *rows)
{
    json_t *plugins = json_array();
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) {
        json_t *caps = json_object_get(row, "capabilities");
        json_t *name = json_object_get(row, "name"), *version = json_object_get(row, "version"),
               *abi = json_object_get(row, "abi");
        json_t *out = json_pack("{s:O, s:O, s:O, s:s, s:s, s:s, s:O}", "name",
                                name ? name : json_null(), "version", version ? version : json_null(),
                                "abi", abi ? abi : json_null(), "path", str_of(row, "path"), "state",
                                str_of(row, "state"), "reason", str_of(row, "reason"),
                                "capabilities", caps ? caps : json_null());
        if (json_object_get(row, "shadowed_by"))
            json_object_set(out, "shadowed_by", json_object_get(row, "shadowed_by"));
        json_array_append_new(plugins, out);
    }
    return json_pack("{s:o}", "plugins", plugins);
}

static json_t *catalog_rows(const ilab_catalog *c)
{
    json_t *rows = json_array();
    for (size_t i = 0; i < ilab_catalog_size(c); i++)
        json_array_append_new(rows, ilab_catalog_row_json(c, ilab_catalog_at(c, i)));
    return rows;
}

static int print_json(json_t *doc)
{
    int rc = json_dumpf(doc, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER) == 0 ? 0 : 1;
    fputc('\n', stdout);
    json_decref(doc);
    return rc;
}

int ilab_cmd_list(int argc, char **argv)
{
    list_options o = {0};
    ilab_settings_init(&o.settings);
    int rc = parse_list_options(argc, argv, 0, &o);
    ilab_catalog *c = rc < 0 ? probe_all(&o, "list", &rc) : NULL;
    if (c) {
        json_t *rows = catalog_rows(c);
        rc = 0;
        if (json_array_size(rows) == 0) {
            fprintf(stderr, "inferlab list: no plugin found; ");
            print_searched(c, stderr);
            rc = 1;
        }
        if (o.json)
            print_json(list_json(rows));
        else if (json_array_size(rows))
            print_table(rows, stdout);
        if (misconfigured(c, "list"))
            rc = 2;
        json_decref(rows);
        ilab_catalog_free(c);
    }
    ilab_settings_free(&o.settings);
    return rc;
}

static void print_info(const json_t *row, FILE *out)
{
    fprintf(out, "name:     %s\nversion:  %s\nabi:      %s\nfile:     %s\nstate:    ",
            str_of(row, "name"), str_of(row, "version"), str_of(row, "abi"), str_of(row, "path"));
    print_state(row, out);
    size_t i;
    json_t *path;
    json_array_foreach(json_object_get(row, "shadows"), i, path)
        fprintf(out, "shadows:  %s (same name, later in the search order: not used)\n",
                json_string_value(path));
    json_t *chat = json_object_get(row, "chat");
    if (chat) {
        json_t *t = json_object_get(chat, "template");
        fprintf(out, "chat template: %s (%lld bytes in the model)%s%s\n",
                json_is_string(t) ? json_string_value(t) : "(not recognised)",
                (long long)json_integer_value(json_object_get(chat, "template_bytes")),
                json_object_get(chat, "template_problem") ? ": " : "",
                json_object_get(chat, "template_problem") ? str_of(chat, "template_problem") : "");
        fprintf(out, "end of generation:");
        size_t k;
        json_t *id;
        json_array_foreach(json_object_get(chat, "eog"), k, id)
            fprintf(out, " %lld \"%s\"", (long long)json_integer_value(json_object_get(id, "id")),
                    str_of(id, "piece"));
        fputc('\n', out);
    }
    fprintf(out, "manifest:\n");
    const char *manifest = str_of(row, "manifest");
    for (const char *line = manifest; *line;) {
        const char *nl = strchr(line, '\n');
        size_t n = nl ? (size_t)(nl - line) : strlen(line);
        fprintf(out, "  %.*s\n", (int)n, line);
        line += n + (nl ? 1 : 0);
    }
}

/* A backend declaring chat (ABI 1.2): its template's name and its
 * end-of-generation ids, from an instance in a worker process (this process
 * never runs plugin code). Nothing when it cannot be created. */
static void add_chat_info(const ilab_catalog *c, list_options *o, const ilab_catalog_entry *e,
                          json_t *row)
{
    if (e->state != ILAB_PLUGIN_AVAILABLE || !e->manifest || !e->manifest->chat)
        return;
    ilab_session *s = NULL;
    char err[1024];
    /* What the backend reports as it loads (its model, tokenizer and
     * memory, at INFO) is part of what info shows, unless INFERLAB_LOG
     * says otherwise; the worker inherits the setting. */
    setenv("INFERLAB_LOG", "info", 0);
    if (ilab_session_open_isolated_from(c, &o->settings, o->name, NULL, err, sizeof err, &s) !=
        ILAB_OK) {
        json_object_set_new(row, "chat", json_pack("{s:s}", "error", err));
        return;
    }
    json_t *chat = ilab_cli_chat_json(s);
    if (chat)
        json_object_set_new(row, "chat", chat);
    ilab_session_close(s);
}

int ilab_cmd_info(int argc, char **argv)
{
    list_options o = {0};
    ilab_settings_init(&o.settings);
    int rc = parse_list_options(argc, argv, 1, &o);
    ilab_catalog *c = rc < 0 ? probe_all(&o, "info", &rc) : NULL;
    if (c) {
        const ilab_catalog_entry *e = ilab_catalog_find(c, o.name);
        if (e) {
            json_t *row = ilab_catalog_row_json(c, e), *shadows = json_array();
            for (size_t i = 0; i < ilab_catalog_size(c); i++) {
                const ilab_catalog_entry *s = ilab_catalog_at(c, i);
                if (s->state == ILAB_PLUGIN_SHADOWED && ilab_catalog_at(c, s->winner) == e)
                    json_array_append_new(shadows, json_string(s->path));
            }
            json_object_set_new(row, "shadows", shadows);
            add_chat_info(c, &o, e, row);
            if (o.json)
                print_json(row);
            else {
                print_info(row, stdout);
                json_decref(row);
            }
            rc = e->state == ILAB_PLUGIN_MISCONFIGURED ? misconfigured(c, "info") : 0;
        } else {
            char err[4096];
            ilab_catalog_describe_unknown(c, "inferlab info: plugin", o.name, err, sizeof err);
            fprintf(stderr, "%s\n", err);
            for (size_t i = 0; i < ilab_catalog_size(c); i++) {
                const ilab_catalog_entry *r = ilab_catalog_at(c, i);
                if (r->state == ILAB_PLUGIN_REJECTED)
                    fprintf(stderr, "  rejected: %s\n", r->reason);
            }
            rc = 1;
        }
        ilab_catalog_free(c);
    }
    ilab_settings_free(&o.settings);
    return rc;
}
