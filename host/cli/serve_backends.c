/* The backends `inferlab serve` serves: opening them, and reloading them
 * when the plugin folders change (see serve_backends.h, ADR 0015). */
#include "serve_backends.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "commands.h"
#include "isolation/proxy.h"
#include "catalog_json.h"
#include "loader/catalog.h"
#include "runtime/engine.h"
#include "runtime/session.h"

/* One backend by name: what serves it now, as far as reloading cares. */
typedef struct entry {
    char name[64];        /* what the server serves it as: the plugin's name, or a model's */
    char plugin_name[64]; /* the plugin that serves it */
    const ilab_settings *settings; /* a model's own settings (borrowed); NULL = the set's */
    bool serving;
    char path[1024];      /* the file serving (when serving) */
    ilab_file_id file;    /* its identity when it was loaded */
    char version[64];
    bool refused;         /* `refused_file` was refused: not tried again until it changes */
    ilab_file_id refused_file;
    char *reason;         /* why not serving (owned; start-up only) */
    /* Its worker process (isolated backends): the instance serving, to
     * notice its death, and the restarts that follow (check_workers). */
    const ilab_plugin *plugin;       /* the version serving (NULL when not serving) */
    const ilab_backend_t *backend;
    double started_ms;               /* when that version started serving */
    int quick_deaths;                /* deaths within QUICK_DEATH_MS of a start, in a row */
    double restart_at_ms;            /* a restart is due then; 0 = none */
} entry;

/* Restarts after a worker died: 1 s, then twice as long each time it dies
 * again soon after starting, up to a minute; after CRASH_LOOP_DEATHS such
 * deaths in a row it is left failed until its file changes (or SIGHUP). */
#define RESTART_FIRST_MS 1000.0
#define RESTART_MAX_MS 60000.0
#define QUICK_DEATH_MS 30000.0
#define CRASH_LOOP_DEATHS 5

struct ilab_serve_set {
    const ilab_settings *settings;
    bool single;          /* exactly one --backend: serve's behaviour of old */
    bool all;             /* no --backend: every plugin of the folders */
    bool models;          /* serve --model NAME=FILE: each a model served by name */
    entry *e;
    size_t n, cap;
    char **dirs;          /* the folders searched */
    size_t n_dirs;
    ilab_inspector *inspector; /* does every look inside a file */
    ilab_catalog *last;   /* the last unprobed scan: the next one takes over its looks at
                             unchanged files */
    char default_name[64];
    char *plugins_json;   /* the last scan's rows, for GET /v1/status (catalog_json.h) */
};

/* What the server releases when it is done with a version. */
typedef struct version_owner {
    ilab_session *session;
    ilab_engine *engine;
} version_owner;

static void release_version(void *p)
{
    version_owner *o = p;
    ilab_engine_destroy(o->engine);
    ilab_session_close(o->session);
    free(o);
}

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static entry *entry_named(ilab_serve_set *set, const char *name)
{
    for (size_t i = 0; i < set->n; i++)
        if (!strcmp(set->e[i].name, name))
            return &set->e[i];
    return NULL;
}

/* Room for `cap` entries. */
static bool entries_reserve(ilab_serve_set *set, size_t cap)
{
    if (cap <= set->cap)
        return true;
    entry *grown = realloc(set->e, cap * sizeof *grown);
    if (!grown)
        return false;
    set->e = grown;
    set->cap = cap;
    return true;
}

static entry *entry_add(ilab_serve_set *set, const char *name)
{
    if (set->n == set->cap && !entries_reserve(set, set->cap ? set->cap * 2 : 8))
        return NULL;
    entry *k = &set->e[set->n++];
    memset(k, 0, sizeof *k);
    snprintf(k->name, sizeof k->name, "%s", name);
    snprintf(k->plugin_name, sizeof k->plugin_name, "%s", name);
    return k;
}

/* The settings `k` is created with: a model's own (its file set), else the set's. */
static const ilab_settings *entry_settings(const ilab_serve_set *set, const entry *k)
{
    return k->settings ? k->settings : set->settings;
}

/* The name a model is served under (NULL for a plugin served as itself). */
static const char *entry_model(const entry *k)
{
    return k->settings ? k->name : NULL;
}

static const ilab_config_entry_t *user_config(const void *user, const char *name, size_t *n)
{
    return ilab_settings_plugin_config(user, name, n);
}

/* The folders' catalog: each plugin looked inside in a child (loaded and
 * checked there, and with `probe` probed there with the user's
 * configuration: a plugin that crashes or hangs is rejected before this
 * process runs any of its code). */
static ilab_catalog *scan(const ilab_serve_set *set, bool probe, const ilab_catalog *previous,
                          const char *prefix, char *err, size_t err_cap)
{
    const ilab_settings *settings = set->settings;
    ilab_catalog_options co = {
        .plugin_files = (const char *const *)settings->plugin_files,
        .n_files = settings->n_plugin_files,
        .plugin_dirs = (const char *const *)settings->plugin_dirs,
        .n_dirs = settings->n_plugin_dirs,
        .allow_insecure = settings->allow_insecure_plugins,
        .inspect = {.probe = probe, .config = user_config, .config_user = settings},
        .previous = previous,
        .inspect_with = set->inspector ? ilab_inspector_inspect : NULL,
        .inspect_ctx = set->inspector,
    };
    ilab_catalog *c = NULL;
    if (ilab_catalog_scan(&co, err, err_cap, &c) != ILAB_OK)
        return NULL;
    ilab_catalog_warn(c, prefix, stderr);
    return c;
}

/* Settings for a plugin nobody has are a typo (fail closed, as every command). */
static bool check_config_names(const ilab_catalog *c, const ilab_settings *settings, char *err,
                               size_t err_cap)
{
    const char **names = calloc(settings->n_plugins + 1, sizeof *names);
    if (!names) {
        snprintf(err, err_cap, "out of memory");
        return false;
    }
    for (size_t i = 0; i < settings->n_plugins; i++)
        names[i] = settings->plugins[i].plugin;
    ilab_status st = ilab_catalog_check_names(c, names, settings->n_plugins,
                                              "configuration for plugin", err, err_cap);
    free(names);
    return st == ILAB_OK;
}

/* Load, probe and create `name` from `c` and start its engine: `be` gets
 * the version (release_version frees it). With `model`, it is served as
 * that model (its name and listed id), not as the plugin. */
static ilab_status open_version(const ilab_catalog *c, const ilab_settings *settings,
                                const char *name, const char *model, ilab_server_backend *be,
                                char *err, size_t err_cap)
{
    ilab_session *session = NULL;
    ilab_proxy_options isolate = {
        .call_timeout_s = settings->server.backend_call_timeout_seconds,
    };
    ilab_status st = settings->server.isolate_backends
        ? ilab_session_open_isolated_from(c, settings, name, &isolate, err, err_cap, &session)
        : ilab_session_open_from(c, settings, name, err, err_cap, &session);
    if (st != ILAB_OK)
        return st;
    ilab_engine *engine = NULL;
    char why[1024] = "";
    st = ilab_engine_create(ilab_session_plugin(session), ilab_session_backend(session),
                            &settings->scheduler, why, sizeof why, &engine);
    version_owner *o = st == ILAB_OK ? calloc(1, sizeof *o) : NULL;
    if (!o) {
        snprintf(err, err_cap, "%s '%s': starting the engine: %s", model ? "model" : "backend",
                 model ? model : name, st == ILAB_OK ? "out of memory" : why);
        ilab_engine_destroy(engine);
        ilab_session_close(session);
        return st == ILAB_OK ? ILAB_OUT_OF_MEMORY : st;
    }
    o->session = session;
    o->engine = engine;
    const ilab_plugin *plugin = ilab_session_plugin(session);
    *be = (ilab_server_backend){
        .name = model ? model : ilab_plugin_entry_of(plugin)->name,
        .model_id = model,
        .engine = engine,
        .plugin = plugin,
        .backend = ilab_session_backend(session),
        .api = ilab_session_api(session),
        .release = release_version,
        .owner = o,
    };
    return ILAB_OK;
}

static void note_serving(entry *k, const ilab_server_backend *be)
{
    k->serving = true;
    k->plugin = be->plugin;
    k->backend = be->backend;
    k->started_ms = now_ms();
    k->restart_at_ms = 0;
    snprintf(k->path, sizeof k->path, "%s", ilab_plugin_path(be->plugin));
    k->file = *ilab_plugin_file_id(be->plugin);
    snprintf(k->version, sizeof k->version, "%s", ilab_plugin_entry_of(be->plugin)->version);
    k->refused = false;
}

/* --- workers that died ------------------------------------------------------------ */

/* The worker of `k`'s instance died: stop serving it and plan a restart,
 * or leave it failed when it keeps dying. */
static void worker_died(ilab_server *server, entry *k, const char *why)
{
    double now = now_ms();
    k->quick_deaths = now - k->started_ms < QUICK_DEATH_MS ? k->quick_deaths + 1 : 1;
    bool failed = k->quick_deaths >= CRASH_LOOP_DEATHS;
    double wait = RESTART_FIRST_MS;
    for (int i = 1; i < k->quick_deaths && wait < RESTART_MAX_MS; i++)
        wait *= 2;
    if (wait > RESTART_MAX_MS)
        wait = RESTART_MAX_MS;
    char reason[1024];
    if (failed)
        snprintf(reason, sizeof reason, "%s; it died %d times in a row within %.0f s of "
                 "starting: not restarted until its file changes or SIGHUP", why,
                 k->quick_deaths, QUICK_DEATH_MS / 1000);
    else
        snprintf(reason, sizeof reason, "%s; restarting in %.0f s", why, wait / 1000);
    fprintf(stderr, "inferlab serve: backend '%s': %s\n", k->name, reason);
    ilab_server_set_worker_down(server, k->name, failed, reason);
    k->serving = false;
    k->plugin = NULL;
    k->backend = NULL;
    k->restart_at_ms = failed ? 0 : now + wait;
}

static void restart(ilab_serve_set *set, ilab_server *server, entry *k)
{
    char err[4096] = "";
    k->restart_at_ms = 0;
    k->started_ms = now_ms(); /* a start that fails at once counts as a quick death */
    /* The folders as they are now (only changed files are looked at again). */
    ilab_catalog *c = scan(set, false, set->last, "inferlab serve: restart: ", err, sizeof err);
    if (c) {
        ilab_catalog_free(set->last);
        set->last = c;
    }
    ilab_server_backend be;
    ilab_status st = c && ilab_catalog_find(c, k->plugin_name)
                         ? open_version(c, entry_settings(set, k), k->plugin_name,
                                        entry_model(k), &be, err, sizeof err)
                         : ILAB_UNAVAILABLE;
    if (st == ILAB_OK) {
        ilab_server_backend kept = be;
        st = ilab_server_install(server, &be, err, sizeof err);
        if (st == ILAB_OK) {
            note_serving(k, &kept);
            ilab_server_note_restart(server, k->name);
            fprintf(stderr, "inferlab serve: backend '%s' restarted: version %s serves again\n",
                    k->name, k->version);
            return;
        }
    }
    worker_died(server, k, err[0] ? err : "no plugin of that name in the last scan");
}

double ilab_serve_set_check_workers(ilab_serve_set *set, ilab_server *server)
{
    double next = 0;
    for (size_t i = 0; i < set->n; i++) {
        entry *k = &set->e[i];
        char why[1024];
        if (k->serving && ilab_proxy_instance_dead(k->plugin, k->backend, why, sizeof why))
            worker_died(server, k, why);
        if (k->restart_at_ms > 0 && now_ms() >= k->restart_at_ms)
            restart(set, server, k);
        if (k->restart_at_ms > 0 && (next == 0 || k->restart_at_ms < next))
            next = k->restart_at_ms;
    }
    return next;
}

/* --- start-up ----------------------------------------------------------------------- */

/* `be` is `k`, not serving, for `reason` (kept in `k`, which outlives it). */
static void record_down(entry *k, ilab_server_backend *be, const char *reason)
{
    free(k->reason);
    k->reason = strdup(reason);
    *be = (ilab_server_backend){.name = k->name, .unavailable_reason = k->reason};
}

/* A backend that will not serve: named, with the reason, on stderr. */
static void start_down(entry *k, ilab_server_backend *be, const char *reason)
{
    fprintf(stderr, "inferlab serve: not serving backend '%s': %s\n", k->name, reason);
    record_down(k, be, reason);
}

/* Open one wanted backend (or, with `model`, that model); -1 or the exit
 * code. `strict`: it was named. */
static int open_initial(ilab_serve_set *set, const ilab_catalog *c, const char *name,
                        const ilab_serve_model *model, bool strict, ilab_server_backend *be)
{
    char err[4096] = "";
    entry *k = entry_add(set, model ? model->name : name);
    if (!k) {
        fprintf(stderr, "inferlab serve: out of memory\n");
        return 1;
    }
    if (model) {
        snprintf(k->plugin_name, sizeof k->plugin_name, "%s", name);
        k->settings = model->settings;
    }
    const ilab_settings *settings = entry_settings(set, k);
    const ilab_catalog_entry *ce = ilab_catalog_find(c, name);
    if (ce && (ce->state == ILAB_PLUGIN_MISCONFIGURED ||
               (strict && !set->single && ce->state == ILAB_PLUGIN_REJECTED))) {
        fprintf(stderr, "inferlab serve: backend '%s' is %s: %s\n", name,
                ilab_plugin_state_name(ce->state), ce->reason);
        return 2;
    }
    if (ce && ce->state == ILAB_PLUGIN_REJECTED && !strict) {
        snprintf(err, sizeof err, "rejected: %s", ce->reason);
        start_down(k, be, err);
        return -1;
    }
    if (ce && ce->state == ILAB_PLUGIN_UNAVAILABLE && !set->single) {
        start_down(k, be, ce->reason);
        return -1;
    }
    ilab_status st = open_version(c, settings, name, entry_model(k), be, err, sizeof err);
    if (st == ILAB_OK) {
        note_serving(k, be);
        return -1;
    }
    if (st != ILAB_UNAVAILABLE && (set->single || (strict && st == ILAB_INVALID_ARGUMENT))) {
        if (model) /* the plugin's message names the plugin; say which model too */
            fprintf(stderr, "inferlab serve: model '%s': %s\n", model->name, err);
        else
            fprintf(stderr, "inferlab serve: %s\n", err);
        return set->single && strstr(err, "starting the engine") ? 1
                                                                 : ilab_cli_open_exit_code(st);
    }
    if (set->single) { /* unavailable: served so that /health can say why */
        fprintf(stderr, "inferlab serve: backend unavailable: %s\n", err);
        record_down(k, be, err);
    } else {
        start_down(k, be, err);
    }
    return -1;
}

static bool copy_dirs(ilab_serve_set *set, const ilab_catalog *c)
{
    const ilab_plugin_paths *d = ilab_catalog_dirs(c);
    set->dirs = calloc(d->n + 1, sizeof *set->dirs);
    if (!set->dirs)
        return false;
    for (size_t i = 0; i < d->n; i++)
        if (!(set->dirs[set->n_dirs++] = strdup(d->paths[i])))
            return false;
    return true;
}

/* The catalog to start from. One backend: the session's own scan, as serve
 * always did; a folder or a list: every plugin probed in a child first, and
 * the settings' plugin names checked against it. NULL with `err` set. */
static ilab_catalog *first_scan(const ilab_serve_set *set, char *err, size_t err_cap)
{
    ilab_catalog *c = NULL;
    if (set->single || set->models)
        return ilab_session_scan(set->settings, err, err_cap, &c) == ILAB_OK ? c : NULL;
    c = scan(set, true, NULL, "inferlab serve: ", err, err_cap);
    if (c && !check_config_names(c, set->settings, err, err_cap)) {
        ilab_catalog_free(c);
        return NULL;
    }
    return c;
}

/* Serving without names: the catalog entries served, every plugin of the
 * folders, or with --plugin files only those (the catalog's first entries),
 * at start and at every reload alike. */
static size_t served_entries(const ilab_serve_set *set, const ilab_catalog *c)
{
    size_t files = set->settings->n_plugin_files, n = ilab_catalog_size(c);
    return files && files < n ? files : n;
}

/* Open the named backends (or, with none, every served plugin of `c`) into
 * `bes` (room for ilab_catalog_size(c) or n_names); -1 or the exit code. */
static int open_all(ilab_serve_set *set, const ilab_catalog *c, const char *const *names,
                    size_t n_names, const ilab_serve_model *models, ilab_server_backend *bes,
                    size_t *n)
{
    size_t cap = set->all ? served_entries(set, c) : n_names;
    for (size_t i = 0; i < cap; i++) {
        const ilab_serve_model *model = set->models ? &models[i] : NULL;
        const char *name = set->all ? ilab_catalog_at(c, i)->name
                           : model  ? model->plugin : names[i];
        if (set->all && (!name || ilab_catalog_at(c, i)->state == ILAB_PLUGIN_SHADOWED)) {
            if (!name) /* it never loaded: no name to serve it under */
                fprintf(stderr, "inferlab serve: not serving %s: %s\n",
                        ilab_catalog_at(c, i)->path, ilab_catalog_at(c, i)->reason);
            continue;
        }
        if (!set->all && !ilab_catalog_find(c, name)) {
            char err[4096];
            ilab_catalog_describe_unknown(c, "backend", name, err, sizeof err);
            fprintf(stderr, "inferlab serve: %s\n", err);
            return 2;
        }
        if (!model && entry_named(set, name))
            continue; /* named twice */
        int rc = open_initial(set, c, name, model, !set->all, &bes[*n]);
        if (rc >= 0)
            return rc;
        (*n)++;
    }
    return -1;
}

int ilab_serve_set_open(const ilab_settings *settings, const char *const *names, size_t n_names,
                        const ilab_serve_model *models, size_t n_models,
                        ilab_inspector *inspector, ilab_serve_set **out,
                        ilab_server_backend **bes_out, size_t *n_bes)
{
    if (n_models) { /* the models, not the names */
        names = NULL;
        n_names = n_models;
    }
    ilab_serve_set *set = calloc(1, sizeof *set);
    if (!set) {
        fprintf(stderr, "inferlab serve: out of memory\n");
        return 1;
    }
    set->settings = settings;
    set->inspector = inspector;
    set->models = n_models > 0;
    set->single = n_names == 1 && !set->models;
    set->all = n_names == 0;
    char err[4096] = "";
    ilab_catalog *c = first_scan(set, err, sizeof err);
    if (!c) {
        fprintf(stderr, "inferlab serve: %s\n", err);
        free(set);
        return 2;
    }
    size_t cap = set->all ? ilab_catalog_size(c) : n_names, n = 0;
    ilab_server_backend *bes = calloc(cap ? cap : 1, sizeof *bes);
    /* The start-up versions point at their entries' names and reasons
     * until the server takes them: the entries must not move before. */
    int rc = bes && entries_reserve(set, cap) && copy_dirs(set, c)
                 ? open_all(set, c, names, n_names, models, bes, &n) : 1;
    set->plugins_json = ilab_catalog_status_json(c);
    if (set->single || set->models)
        set->last = c; /* unprobed, like a reload's scan */
    else
        ilab_catalog_free(c);
    const char *dflt = settings->default_backend ? settings->default_backend : "";
    if ((set->single || (set->models && n_models == 1)) && set->n)
        snprintf(set->default_name, sizeof set->default_name, "%s", set->e[0].name);
    else if (entry_named(set, dflt))
        snprintf(set->default_name, sizeof set->default_name, "%s", dflt);
    if (rc >= 0) {
        for (size_t i = 0; i < n; i++)
            if (bes[i].release)
                bes[i].release(bes[i].owner);
        free(bes);
        ilab_serve_set_free(set);
        return rc;
    }
    *out = set;
    *bes_out = bes;
    *n_bes = n;
    return -1;
}

const char *ilab_serve_set_default(const ilab_serve_set *set)
{
    return set->default_name[0] ? set->default_name : NULL;
}

const char *ilab_serve_set_plugins_json(const ilab_serve_set *set)
{
    return set->plugins_json;
}

size_t ilab_serve_set_dirs(const ilab_serve_set *set, const char *const **dirs)
{
    *dirs = (const char *const *)set->dirs;
    return set->n_dirs;
}

void ilab_serve_set_free(ilab_serve_set *set)
{
    if (!set)
        return;
    for (size_t i = 0; i < set->n; i++)
        free(set->e[i].reason);
    free(set->e);
    for (size_t i = 0; i < set->n_dirs; i++)
        free(set->dirs[i]);
    free(set->dirs);
    ilab_catalog_free(set->last);
    free(set->plugins_json);
    free(set);
}

/* --- reload --------------------------------------------------------------------------- */

typedef struct reload_tally {
    size_t changed, refused, down;
} reload_tally;

/* The catalog's word on the file at `path` when it holds no plugin of a
 * name (it did not load): a corrupt replacement looks like this. */
static const ilab_catalog_entry *entry_at_path(const ilab_catalog *c, const char *path)
{
    for (size_t i = 0; i < ilab_catalog_size(c); i++)
        if (!strcmp(ilab_catalog_at(c, i)->path, path))
            return ilab_catalog_at(c, i);
    return NULL;
}

/* A new file for `k` failed a check: the version serving (if any) stays. */
static void refuse(ilab_server *server, entry *k, const ilab_file_id *file, const char *why,
                   reload_tally *t)
{
    if (k->serving && k->refused && file && ilab_file_id_equal(&k->refused_file, file))
        return; /* said already; the file has not changed since */
    k->refused = file != NULL;
    if (file)
        k->refused_file = *file;
    if (k->serving) {
        fprintf(stderr, "inferlab serve: reload: backend '%s': refused the new file: %s; "
                        "version %s (%s) keeps serving\n", k->name, why, k->version, k->path);
        ilab_server_note_refusal(server, k->name, why);
        t->refused++;
    } else {
        fprintf(stderr, "inferlab serve: reload: backend '%s' is not serving: %s\n", k->name,
                why);
        ilab_server_set_down(server, k->name, why, false);
        t->down++;
    }
}

/* Load and install `k`'s file (ce): it is new, changed, or was not serving. */
static void replace(ilab_serve_set *set, ilab_server *server, const ilab_catalog *c, entry *k,
                    const ilab_file_id *file, reload_tally *t)
{
    double t0 = now_ms();
    char err[4096] = "";
    /* Probed in a child first: this process runs none of its code before. */
    ilab_inspect_options probe = {.probe = true, .config = user_config,
                                  .config_user = entry_settings(set, k)};
    ilab_inspection in;
    const char *path = ilab_catalog_find(c, k->plugin_name)->path;
    if (set->inspector)
        ilab_inspector_inspect(set->inspector, path, &probe, &in);
    else
        ilab_inspect_isolated(path, &probe, &in);
    if (in.state != ILAB_PLUGIN_AVAILABLE) {
        snprintf(err, sizeof err, "%s: %s", ilab_plugin_state_name(in.state), in.reason);
        ilab_inspection_free(&in);
        refuse(server, k, file, err, t);
        return;
    }
    ilab_inspection_free(&in);
    ilab_server_backend be;
    ilab_status st = open_version(c, entry_settings(set, k), k->plugin_name, entry_model(k),
                                  &be, err, sizeof err);
    if (st == ILAB_OK) {
        char old[64];
        snprintf(old, sizeof old, "%s", k->serving ? k->version : "");
        bool was = k->serving;
        ilab_server_backend kept = be; /* install takes `be` */
        st = ilab_server_install(server, &be, err, sizeof err);
        if (st == ILAB_OK) {
            note_serving(k, &kept);
            fprintf(stderr, "inferlab serve: reload: backend '%s' now serves version %s from "
                            "%s%s%s%s (%.1f ms)\n", k->name, k->version, k->path,
                    was ? " (was " : "", was ? old : "", was ? ")" : "", now_ms() - t0);
            t->changed++;
            return;
        }
    }
    refuse(server, k, file, err, t);
}

/* One wanted name against the fresh catalog. */
static void reload_one(ilab_serve_set *set, ilab_server *server, const ilab_catalog *c,
                       entry *k, reload_tally *t)
{
    const ilab_catalog_entry *ce = ilab_catalog_find(c, k->plugin_name);
    ilab_file_id file = {0};
    if (!ce && k->serving) {
        /* Nothing of that name: a file that no longer loads at its path is a
         * bad replacement, not a removal. */
        const ilab_catalog_entry *at = entry_at_path(c, k->path);
        if (at) {
            bool known = ilab_file_id_of(at->path, &file);
            refuse(server, k, known ? &file : NULL, at->reason, t);
            return;
        }
    }
    if (!ce) {
        if (k->serving) {
            fprintf(stderr, "inferlab serve: reload: backend '%s' %s: no plugin of that name "
                            "in the folders any more; its requests in flight finish\n",
                    k->name, set->all ? "removed" : "stops");
            t->changed++;
        }
        if (k->serving || set->all)
            ilab_server_set_down(server, k->name, "no plugin of that name in the plugin "
                                 "folders", set->all);
        k->serving = false;
        k->plugin = NULL;
        return;
    }
    if (!ilab_file_id_of(ce->path, &file)) {
        /* Gone since the scan: the folder's next event (or SIGHUP) says more. */
        fprintf(stderr, "inferlab serve: reload: backend '%s': %s changed during the "
                        "reload; left as it is\n", k->name, ce->path);
        return;
    }
    if (k->serving && !strcmp(ce->path, k->path) && ilab_file_id_equal(&file, &k->file))
        return; /* unchanged */
    if (k->serving && k->refused && ilab_file_id_equal(&file, &k->refused_file))
        return; /* refused already, unchanged since; a backend not serving is retried */
    if (ce->state == ILAB_PLUGIN_REJECTED || ce->state == ILAB_PLUGIN_MISCONFIGURED ||
        ce->state == ILAB_PLUGIN_UNAVAILABLE) {
        char why[2048];
        snprintf(why, sizeof why, "%s: %s", ilab_plugin_state_name(ce->state), ce->reason);
        refuse(server, k, &file, why, t);
        return;
    }
    /* In-process, the library is mapped from that very inode; a worker runs
     * a private copy of the bytes, so there it is just a new version. */
    if (k->serving && !strcmp(ce->path, k->path) && file.dev == k->file.dev &&
        file.ino == k->file.ino && !set->settings->server.isolate_backends) {
        refuse(server, k, &file, "the file was written into in place (same inode); replace a "
                                 "plugin with mv or install, never by writing over it", t);
        return;
    }
    replace(set, server, c, k, &file, t);
}

/* Serving a folder: a file that does not load has no name to be a backend
 * under; say so once, when it is new or changed since the last scan. */
static void report_unnamed(const ilab_serve_set *set, const ilab_catalog *c)
{
    for (size_t i = 0; set->all && i < served_entries(set, c); i++) {
        const ilab_catalog_entry *ce = ilab_catalog_at(c, i);
        if (ce->name)
            continue;
        bool seen = false;
        for (size_t j = 0; set->last && j < ilab_catalog_size(set->last) && !seen; j++) {
            const ilab_catalog_entry *pe = ilab_catalog_at(set->last, j);
            seen = !strcmp(pe->path, ce->path) && ilab_file_id_equal(&pe->file, &ce->file);
        }
        if (!seen)
            fprintf(stderr, "inferlab serve: reload: not serving %s: %s\n", ce->path,
                    ce->reason);
    }
}

size_t ilab_serve_set_reload(ilab_serve_set *set, ilab_server *server)
{
    double t0 = now_ms();
    char err[4096] = "";
    /* Not probed: only the files that changed are (replace()); and only the
     * files changed since the last scan are looked at in a child again. */
    ilab_catalog *c = scan(set, false, set->last, "inferlab serve: reload: ", err, sizeof err);
    if (!c) {
        fprintf(stderr, "inferlab serve: reload refused: %s; nothing changed\n", err);
        return 0;
    }
    reload_tally t = {0};
    report_unnamed(set, c);
    /* Every plugin of the folders, when serving a folder: new ones too. */
    for (size_t i = 0; set->all && i < served_entries(set, c); i++) {
        const ilab_catalog_entry *ce = ilab_catalog_at(c, i);
        if (ce->name && ce->state != ILAB_PLUGIN_SHADOWED && !entry_named(set, ce->name))
            entry_add(set, ce->name);
    }
    for (size_t i = 0; i < set->n; i++)
        reload_one(set, server, c, &set->e[i], &t);
    /* Names gone from a folder served whole are forgotten. */
    for (size_t i = 0; set->all && i < set->n;) {
        if (!set->e[i].serving && !ilab_catalog_find(c, set->e[i].name)) {
            free(set->e[i].reason);
            set->e[i] = set->e[--set->n];
        } else {
            i++;
        }
    }
    ilab_catalog_free(set->last);
    set->last = c;
    char *rows = ilab_catalog_status_json(c);
    if (rows) { /* else the last rows stay: out of memory is no reason to show none */
        free(set->plugins_json);
        set->plugins_json = rows;
    }
    fprintf(stderr, "inferlab serve: reload: done in %.1f ms: %zu changed, %zu refused, %zu "
                    "not serving\n", now_ms() - t0, t.changed, t.refused, t.down);
    return t.changed;
}
