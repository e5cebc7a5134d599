/* The plugin catalog (catalog.h). */
#include "catalog.h"

#include <stdlib.h>
#include <string.h>

#include "trust.h"

struct ilab_catalog {
    ilab_catalog_entry *entries;
    size_t n;
    ilab_plugin_paths dirs;
    char **dir_insecure; /* per folder: the trust rule's complaint, or NULL */
    bool allow_insecure;
};

/* An insecure folder is worth a warning even when empty: anyone can drop a
 * plugin there tomorrow (INFERLAB_PLUGIN_PATH=/tmp). */
static ilab_status check_dirs(ilab_catalog *c)
{
    if (c->dirs.n && !(c->dir_insecure = calloc(c->dirs.n, sizeof *c->dir_insecure)))
        return ILAB_OUT_OF_MEMORY;
    for (size_t i = 0; i < c->dirs.n; i++) {
        char why[1024];
        if (!ilab_trust_plugin_dir(c->dirs.paths[i], why, sizeof why) &&
            !(c->dir_insecure[i] = strdup(why)))
            return ILAB_OUT_OF_MEMORY;
    }
    return ILAB_OK;
}

/* The previous scan's look inside the same file, unchanged since; NULL when
 * there is none to take over. */
static const ilab_catalog_entry *unchanged_in(const ilab_catalog *previous,
                                              const ilab_catalog_entry *e)
{
    if (!previous || !e->file.ino)
        return NULL;
    for (size_t i = 0; i < previous->n; i++) {
        const ilab_catalog_entry *p = &previous->entries[i];
        if (!strcmp(p->path, e->path))
            return ilab_file_id_equal(&p->file, &e->file) && !p->insecure ? p : NULL;
    }
    return NULL;
}

/* Trust, then a look inside in a child; fills `e` (path/origin already set). */
static ilab_status inspect_entry(const ilab_catalog_options *o, ilab_catalog_entry *e)
{
    char why[1024] = "";
    if (!ilab_file_id_of(e->path, &e->file))
        memset(&e->file, 0, sizeof e->file);
    if (!ilab_trust_plugin_file(e->path, why, sizeof why)) {
        if (!(e->insecure = strdup(why)))
            return ILAB_OUT_OF_MEMORY;
        if (!o->allow_insecure) {
            e->state = ILAB_PLUGIN_REJECTED;
            return (e->reason = strdup(why)) ? ILAB_OK : ILAB_OUT_OF_MEMORY;
        }
    }
    ilab_inspection in;
    const ilab_catalog_entry *seen = e->insecure ? NULL : unchanged_in(o->previous, e);
    if (seen && seen->state == ILAB_PLUGIN_SHADOWED && o->inspect.probe)
        seen = NULL; /* its probe's answer was overwritten by SHADOWED */
    if (seen) {
        in.state = seen->state == ILAB_PLUGIN_SHADOWED ? ILAB_PLUGIN_LOADED : seen->state;
        snprintf(in.reason, sizeof in.reason, "%s",
                 seen->state == ILAB_PLUGIN_SHADOWED ? "" : seen->reason);
        in.manifest_yaml = seen->manifest_yaml ? strdup(seen->manifest_yaml) : NULL;
        if (seen->manifest_yaml && !in.manifest_yaml)
            return ILAB_OUT_OF_MEMORY;
    } else if (o->inspect_with) {
        o->inspect_with(o->inspect_ctx, e->path, &o->inspect, &in);
    } else {
        ilab_inspect_isolated(e->path, &o->inspect, &in);
    }
    e->state = in.state;
    e->manifest_yaml = in.manifest_yaml; /* ownership moves */
    in.manifest_yaml = NULL;
    if (e->manifest_yaml) {
        char perr[512];
        if (ilab_manifest_parse(e->manifest_yaml, perr, sizeof perr, &e->manifest) != ILAB_OK) {
            /* The loader accepted this text in the child; a disagreement here
             * means the child lied or memory is corrupt: refuse it. */
            e->state = ILAB_PLUGIN_REJECTED;
            snprintf(in.reason, sizeof in.reason, "%s: manifest: %s", e->path, perr);
        } else if (!(e->name = strdup(e->manifest->name))) {
            return ILAB_OUT_OF_MEMORY;
        }
    }
    return (e->reason = strdup(in.reason)) ? ILAB_OK : ILAB_OUT_OF_MEMORY;
}

/* Is the file at `path` one of the --plugin files (the same file, however
 * spelled)? A folder that holds it does not list it twice. */
static bool given_file(const ilab_catalog_options *o, const char *path)
{
    ilab_file_id id, g;
    if (!ilab_file_id_of(path, &id))
        return false;
    for (size_t i = 0; i < o->n_files; i++)
        if (ilab_file_id_of(o->plugin_files[i], &g) && g.dev == id.dev && g.ino == id.ino)
            return true;
    return false;
}

/* The --plugin files, then every folder's files that are not among them. */
static ilab_status list_files(const ilab_catalog_options *o, ilab_plugin_paths *files, char *err,
                              size_t err_cap)
{
    ilab_plugin_paths found = {0};
    ilab_status st = ilab_registry_discover(o->plugin_dirs, o->n_dirs, true, err, err_cap, &found);
    size_t cap = o->n_files + found.n;
    if (st == ILAB_OK && cap &&
        (!(files->paths = calloc(cap, sizeof *files->paths)) ||
         !(files->origins = calloc(cap, sizeof *files->origins))))
        st = ILAB_OUT_OF_MEMORY;
    for (size_t i = 0; st == ILAB_OK && i < o->n_files; i++) {
        files->origins[files->n] = ILAB_DIR_GIVEN;
        if (!(files->paths[files->n++] = strdup(o->plugin_files[i])))
            st = ILAB_OUT_OF_MEMORY;
    }
    for (size_t i = 0; st == ILAB_OK && i < found.n; i++) {
        if (o->n_files && given_file(o, found.paths[i]))
            continue;
        files->origins[files->n] = found.origins[i];
        files->paths[files->n++] = found.paths[i]; /* ownership moves */
        found.paths[i] = NULL;
    }
    ilab_plugin_paths_free(&found);
    return st;
}

/* The first entry of each name wins; later ones are SHADOWED. */
static ilab_status mark_shadowed(ilab_catalog *c)
{
    for (size_t i = 0; i < c->n; i++) {
        ilab_catalog_entry *e = &c->entries[i];
        if (!e->name)
            continue;
        for (size_t j = 0; j < i; j++) {
            const ilab_catalog_entry *w = &c->entries[j];
            if (!w->name || w->state == ILAB_PLUGIN_SHADOWED || strcmp(w->name, e->name))
                continue;
            size_t cap = strlen(w->path) + 32;
            char *reason = malloc(cap);
            if (!reason)
                return ILAB_OUT_OF_MEMORY;
            snprintf(reason, cap, "shadowed by %s", w->path);
            free(e->reason);
            e->reason = reason;
            e->state = ILAB_PLUGIN_SHADOWED;
            e->winner = j;
            break;
        }
    }
    return ILAB_OK;
}

ilab_status ilab_catalog_scan(const ilab_catalog_options *o, char *err, size_t err_cap,
                              ilab_catalog **out)
{
    char scratch[1];
    if (!err || !err_cap) {
        err = scratch;
        err_cap = sizeof scratch;
    }
    err[0] = '\0';
    ilab_catalog *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, err_cap, "out of memory scanning the plugin folders");
        return ILAB_OUT_OF_MEMORY;
    }
    ilab_plugin_paths files = {0};
    c->allow_insecure = o->allow_insecure;
    ilab_status st = ilab_registry_dirs(o->plugin_dirs, o->n_dirs, true, err, err_cap, &c->dirs);
    if (st == ILAB_OK)
        st = check_dirs(c);
    if (st == ILAB_OK)
        st = list_files(o, &files, err, err_cap);
    if (st == ILAB_OK && files.n && !(c->entries = calloc(files.n, sizeof *c->entries)))
        st = ILAB_OUT_OF_MEMORY;
    for (size_t i = 0; st == ILAB_OK && i < files.n; i++) {
        ilab_catalog_entry *e = &c->entries[c->n++];
        e->path = files.paths[i]; /* ownership moves */
        files.paths[i] = NULL;
        e->origin = files.origins[i];
        st = inspect_entry(o, e);
    }
    if (st == ILAB_OK)
        st = mark_shadowed(c);
    ilab_plugin_paths_free(&files);
    if (st != ILAB_OK) {
        if (!err[0])
            snprintf(err, err_cap, "out of memory scanning the plugin folders");
        ilab_catalog_free(c);
        return st;
    }
    *out = c;
    return ILAB_OK;
}

void ilab_catalog_free(ilab_catalog *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->n; i++) {
        ilab_catalog_entry *e = &c->entries[i];
        free(e->path);
        free(e->name);
        ilab_manifest_free(e->manifest);
        free(e->manifest_yaml);
        free(e->reason);
        free(e->insecure);
    }
    free(c->entries);
    for (size_t i = 0; c->dir_insecure && i < c->dirs.n; i++)
        free(c->dir_insecure[i]);
    free(c->dir_insecure);
    ilab_plugin_paths_free(&c->dirs);
    free(c);
}

size_t ilab_catalog_size(const ilab_catalog *c) { return c ? c->n : 0; }

const ilab_catalog_entry *ilab_catalog_at(const ilab_catalog *c, size_t i)
{
    return c && i < c->n ? &c->entries[i] : NULL;
}

const ilab_plugin_paths *ilab_catalog_dirs(const ilab_catalog *c) { return c ? &c->dirs : NULL; }

const ilab_catalog_entry *ilab_catalog_find(const ilab_catalog *c, const char *name)
{
    for (size_t i = 0; c && name && i < c->n; i++)
        if (c->entries[i].name && c->entries[i].state != ILAB_PLUGIN_SHADOWED &&
            !strcmp(c->entries[i].name, name))
            return &c->entries[i];
    return NULL;
}

/* --- messages -------------------------------------------------------------- */

static size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 255 || lb > 255)
        return (size_t)-1;
    size_t row[256];
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

const char *ilab_nearest_name(const char *name, const char *const *names, size_t n)
{
    const char *best = NULL;
    size_t best_d = (size_t)-1;
    for (size_t i = 0; name && i < n; i++) {
        size_t d = edit_distance(name, names[i]);
        size_t longer = strlen(name) > strlen(names[i]) ? strlen(name) : strlen(names[i]);
        size_t limit = longer / 3 ? longer / 3 : 1;
        if (d <= limit && d < best_d) {
            best = names[i];
            best_d = d;
        }
    }
    return best;
}

static void append(char *buf, size_t cap, const char *s)
{
    size_t len = strlen(buf);
    if (len + 1 < cap)
        snprintf(buf + len, cap - len, "%s", s);
}

void ilab_catalog_describe_unknown(const ilab_catalog *c, const char *what, const char *name,
                                   char *err, size_t err_cap)
{
    if (!err || !err_cap)
        return;
    const char **names = c && c->n ? calloc(c->n, sizeof *names) : NULL;
    size_t n = 0;
    for (size_t i = 0; names && i < c->n; i++)
        if (c->entries[i].name && c->entries[i].state != ILAB_PLUGIN_SHADOWED)
            names[n++] = c->entries[i].name;
    const char *near = ilab_nearest_name(name, names, n);
    snprintf(err, err_cap, "%s '%s': no plugin has that name", what, name);
    if (near) {
        append(err, err_cap, "; did you mean '");
        append(err, err_cap, near);
        append(err, err_cap, "'?");
    }
    append(err, err_cap, " (plugins:");
    bool first = true;
    for (size_t i = 0; c && i < c->n; i++) {
        const ilab_catalog_entry *e = &c->entries[i];
        if (!e->name || e->state == ILAB_PLUGIN_SHADOWED)
            continue;
        append(err, err_cap, first ? " " : ", ");
        first = false;
        append(err, err_cap, e->name);
        if (e->state != ILAB_PLUGIN_AVAILABLE && e->state != ILAB_PLUGIN_LOADED) {
            append(err, err_cap, " [");
            append(err, err_cap, ilab_plugin_state_name(e->state));
            append(err, err_cap, "]");
        }
    }
    if (!n)
        append(err, err_cap, " none");
    size_t rejected = 0;
    for (size_t i = 0; c && i < c->n; i++)
        rejected += !c->entries[i].name;
    if (rejected) {
        char more[64];
        snprintf(more, sizeof more, "; %zu file%s rejected, see `inferlab list`", rejected,
                 rejected == 1 ? "" : "s");
        append(err, err_cap, more);
    }
    append(err, err_cap, "; searched:");
    for (size_t i = 0; c && i < c->dirs.n; i++) {
        append(err, err_cap, " ");
        append(err, err_cap, c->dirs.paths[i]);
    }
    if (!c || !c->dirs.n)
        append(err, err_cap, " no folder");
    append(err, err_cap, ")");
    free(names);
}

ilab_status ilab_catalog_check_names(const ilab_catalog *c, const char *const *names,
                                     size_t n_names, const char *what, char *err, size_t err_cap)
{
    for (size_t i = 0; i < n_names; i++)
        if (!ilab_catalog_find(c, names[i])) {
            ilab_catalog_describe_unknown(c, what, names[i], err, err_cap);
            return ILAB_INVALID_ARGUMENT;
        }
    return ILAB_OK;
}

void ilab_catalog_warn(const ilab_catalog *c, const char *prefix, FILE *out)
{
    for (size_t i = 0; c && c->dir_insecure && i < c->dirs.n; i++)
        if (c->dir_insecure[i])
            fprintf(out, "%swarning: plugin folder %s (%s) is searched but %s; %s\n", prefix,
                    c->dirs.paths[i], ilab_dir_origin_name(c->dirs.origins[i]),
                    c->dir_insecure[i],
                    c->allow_insecure ? "its plugins are used anyway (--allow-insecure-plugins)"
                                      : "no plugin in it is loaded");
    for (size_t i = 0; c && i < c->n; i++) {
        const ilab_catalog_entry *e = &c->entries[i];
        if (e->state == ILAB_PLUGIN_SHADOWED)
            fprintf(out, "%swarning: %s (plugin '%s') is shadowed by %s, which comes first in "
                         "the search order; it is not used\n",
                    prefix, e->path, e->name, c->entries[e->winner].path);
        if (e->insecure && e->state != ILAB_PLUGIN_REJECTED)
            fprintf(out, "%swarning: --allow-insecure-plugins: using %s although %s\n", prefix,
                    e->path, e->insecure);
    }
}
