/* The backends a server serves, by name, each with the version serving it
 * now. A request takes a reference on the version it runs on (acquire) and
 * gives it back when its response ends (release); replacing or removing a
 * backend only retires its version, and the last reference handed back puts
 * it on the dead list and wakes ilab_server_reap_fd: the thread that reaps
 * (the CLI's main thread, the one that loads libraries too) releases it --
 * destroys the engine, closes the library -- away from the event loop. One
 * thread doing every dlopen, dlclose and fork keeps a child forked for an
 * inspection from inheriting the dynamic loader's lock held. ADR 0015. */
#include "server_internal.h"

#include "backend_desk.h"
#include "../isolation/proxy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "../runtime/engine.h"
#include "chat_setup.h"

/* --- versions ----------------------------------------------------------------- */

static void version_free(ilab_served *v)
{
    ilab_desk_stop(v->desk); /* idle: each job holds a reference on `v` */
    ilab_token_text_free(&v->vocab);
    if (v->be.release)
        v->be.release(v->be.owner);
    free(v);
}

/* Release a caller's version the server will not use. */
static void backend_drop(const ilab_server_backend *be)
{
    if (be->release)
        be->release(be->owner);
}

typedef struct vocab_load {
    ilab_served *v;
    char msg[256]; /* the backend's message on failure */
} vocab_load;

static ilab_status load_vocab(void *ctx, const ilab_backend_api_t *api, ilab_backend_t *backend)
{
    vocab_load *l = ctx;
    ilab_status st = ilab_token_text_load(&l->v->vocab, api, backend, &l->v->info);
    if (st != ILAB_OK)
        api->last_error(backend, l->msg, sizeof l->msg);
    return st;
}

/* A version for `be` (which has an engine), its vocabulary read. On failure
 * `be` is not released: the caller decides. */
static ilab_served *version_new(ilab_server *s, const ilab_server_backend *be, char *err,
                                size_t err_cap)
{
    ilab_served *v = calloc(1, sizeof *v);
    if (!v) {
        snprintf(err, err_cap, "backend '%s': out of memory", be->name);
        return NULL;
    }
    v->be = *be;
    v->be.name = NULL;
    v->be.model_id = NULL;
    v->be.unavailable_reason = NULL;
    v->info = *ilab_engine_model_info(be->engine);
    v->loaded = time(NULL);
    const ilab_plugin_entry_t *entry = ilab_plugin_entry_of(be->plugin);
    snprintf(v->model_id, sizeof v->model_id, "%s",
             be->model_id ? be->model_id : v->info.name[0] ? v->info.name : entry->name);
    snprintf(v->version, sizeof v->version, "%s", entry->version);
    snprintf(v->path, sizeof v->path, "%s", ilab_plugin_path(be->plugin));
    /* The vocabulary's pieces are read under the engine's backend lock:
     * the scheduler thread is already running. */
    vocab_load l = {.v = v, .msg = ""};
    ilab_status st = ilab_engine_with_backend(be->engine, load_vocab, &l);
    if (st != ILAB_OK) {
        snprintf(err, err_cap, "reading the model's vocabulary from backend '%s': %s: %s",
                 be->name, ilab_status_name(st), l.msg);
        ilab_token_text_free(&v->vocab);
        free(v);
        return NULL;
    }
    if (!ilab_served_chat_setup(v, s->cfg.chat_template, err, err_cap)) {
        ilab_token_text_free(&v->vocab);
        free(v);
        return NULL;
    }
    /* Without a thread for it, its requests' calls run on the HTTP threads. */
    v->desk = ilab_desk_start();
    return v;
}

/* Under backends_mu: `v` has no reference left; wake whoever reaps. */
static void put_dead(ilab_server *s, ilab_served *v)
{
    v->next_dead = s->dead;
    s->dead = v;
    uint64_t one = 1;
    if (write(s->reap_fd, &one, sizeof one) < 0) {
        /* the counter is full: a wake-up is pending anyway */
    }
}

/* Under backends_mu: no new request reaches `v`; the last one out frees it. */
static void retire(ilab_server *s, ilab_served *v)
{
    if (!v)
        return;
    v->retired = true;
    s->n_retired++;
    if (--v->refs == 0) {
        put_dead(s, v);
    }
}

void ilab_served_release(ilab_served *v)
{
    if (!v)
        return;
    ilab_server *s = v->slot->s;
    pthread_mutex_lock(&s->backends_mu);
    if (--v->refs == 0 && v->retired) {
        put_dead(s, v);
    }
    pthread_mutex_unlock(&s->backends_mu);
}

void ilab_served_error(const ilab_served *v, ilab_status st, const char *msg, ilab_api_error *e)
{
    ilab_api_error_from_status(e, st, msg);
    if (st == ILAB_UNAVAILABLE && v &&
        ilab_proxy_instance_dead(v->be.plugin, v->be.backend, NULL, 0)) {
        e->http_status = 502;
        e->retry_after = 0;
        snprintf(e->type, sizeof e->type, "server_error");
    }
}

ilab_status ilab_backends_init(ilab_server *s)
{
    pthread_mutex_init(&s->backends_mu, NULL);
    s->reap_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    return s->reap_fd >= 0 ? ILAB_OK : ILAB_IO;
}

int ilab_server_reap_fd(const ilab_server *s)
{
    return s->reap_fd;
}

/* `quiet`: the server is stopping, nothing to report. */
static size_t reap(ilab_server *s, bool quiet)
{
    uint64_t ticks;
    if (read(s->reap_fd, &ticks, sizeof ticks) < 0) {
        /* nothing signalled: the list is looked at anyway */
    }
    pthread_mutex_lock(&s->backends_mu);
    ilab_served *list = s->dead;
    s->dead = NULL;
    pthread_mutex_unlock(&s->backends_mu);
    size_t freed = 0;
    for (ilab_served *v = list, *next; v; v = next, freed++) {
        next = v->next_dead;
        if (!quiet)
            fprintf(stderr, "inferlab serve: backend '%s' %s (%s) unloaded: its last request "
                            "ended\n", v->slot->name, v->version, v->path);
        version_free(v);
    }
    pthread_mutex_lock(&s->backends_mu);
    s->n_retired -= freed;
    pthread_mutex_unlock(&s->backends_mu);
    return freed;
}

size_t ilab_server_reap(ilab_server *s)
{
    return reap(s, false);
}

void ilab_backends_destroy(ilab_server *s)
{
    /* No request is left (the daemon has stopped): every version goes. */
    pthread_mutex_lock(&s->backends_mu);
    for (size_t i = 0; i < s->n_slots; i++) {
        retire(s, s->slots[i]->current);
        s->slots[i]->current = NULL;
    }
    pthread_mutex_unlock(&s->backends_mu);
    reap(s, true);
    for (size_t i = 0; i < s->n_slots; i++)
        free(s->slots[i]);
    free(s->slots);
    if (s->reap_fd >= 0)
        close(s->reap_fd);
    pthread_mutex_destroy(&s->backends_mu);
}

/* --- slots (under backends_mu) ---------------------------------------------------- */

static ilab_slot *slot_named(ilab_server *s, const char *name)
{
    for (size_t i = 0; i < s->n_slots; i++)
        if (!strcmp(s->slots[i]->name, name))
            return s->slots[i];
    return NULL;
}

static ilab_slot *slot_get(ilab_server *s, const char *name)
{
    ilab_slot *k = slot_named(s, name);
    if (k)
        return k;
    if (s->n_slots == s->cap_slots) {
        size_t cap = s->cap_slots ? s->cap_slots * 2 : 8;
        ilab_slot **grown = realloc(s->slots, cap * sizeof *grown);
        if (!grown)
            return NULL;
        s->slots = grown;
        s->cap_slots = cap;
    }
    k = calloc(1, sizeof *k);
    if (!k)
        return NULL;
    k->s = s;
    snprintf(k->name, sizeof k->name, "%s", name);
    s->slots[s->n_slots++] = k;
    return k;
}

/* The id slot `k` is listed under: its model's name, unless an earlier
 * listed slot's model or any slot's name already is that (then the plugin's
 * name, which is unique). */
static void listed_id(ilab_server *s, const ilab_slot *k, char *out, size_t cap)
{
    const char *id = k->current ? k->current->model_id : k->name;
    bool clash = false, earlier = true;
    for (size_t i = 0; i < s->n_slots && !clash; i++) {
        const ilab_slot *o = s->slots[i];
        if (o == k) {
            earlier = false;
            continue;
        }
        if (o->removed)
            continue;
        clash = !strcmp(o->name, id) ||
                (earlier && o->current && !strcmp(o->current->model_id, id));
    }
    snprintf(out, cap, "%s", clash ? k->name : id);
}

static size_t listed_count(ilab_server *s)
{
    size_t n = 0;
    for (size_t i = 0; i < s->n_slots; i++)
        n += !s->slots[i]->removed;
    return n;
}

/* "'paced-bigram' (backend paced_backend), 'counting' (backend
 * counting_backend)", or "no model" when nothing serves. */
static void served_list(ilab_server *s, char *out, size_t cap)
{
    size_t used = 0;
    out[0] = '\0';
    for (size_t i = 0; i < s->n_slots && used < cap; i++) {
        ilab_slot *k = s->slots[i];
        if (k->removed || !k->current)
            continue;
        char id[64];
        listed_id(s, k, id, sizeof id);
        int n = snprintf(out + used, cap - used, "%s'%s' (backend %s)", used ? ", " : "", id,
                         k->name);
        used += n > 0 ? (size_t)n : 0;
    }
    if (!out[0])
        snprintf(out, cap, "no model");
}

/* The slot a request's model names: a backend's name first, then a served
 * model's listed id, then any served model's name. */
static ilab_slot *slot_for_model(ilab_server *s, const char *model)
{
    ilab_slot *k = slot_named(s, model);
    if (k && !k->removed)
        return k;
    for (size_t i = 0; i < s->n_slots; i++) {
        k = s->slots[i];
        char id[64];
        listed_id(s, k, id, sizeof id);
        if (!k->removed && k->current && !strcmp(id, model))
            return k;
    }
    for (size_t i = 0; i < s->n_slots; i++) {
        k = s->slots[i];
        if (!k->removed && k->current && !strcmp(k->current->model_id, model))
            return k;
    }
    return NULL;
}

static ilab_slot *default_slot(ilab_server *s)
{
    if (s->default_backend[0]) {
        ilab_slot *k = slot_named(s, s->default_backend);
        if (k && !k->removed)
            return k;
    }
    if (listed_count(s) == 1)
        for (size_t i = 0; i < s->n_slots; i++)
            if (!s->slots[i]->removed)
                return s->slots[i];
    return NULL;
}

ilab_served *ilab_server_acquire(ilab_server *s, const char *model, ilab_api_error *e)
{
    char list[400];
    pthread_mutex_lock(&s->backends_mu);
    bool named = model && model[0];
    ilab_slot *k = named ? slot_for_model(s, model) : default_slot(s);
    ilab_served *v = k ? k->current : NULL;
    if (v)
        v->refs++;
    else if (k)
        ilab_api_fail(e, 503, NULL, "backend unavailable: %s%s%s",
                      listed_count(s) > 1 ? k->name : "", listed_count(s) > 1 ? ": " : "",
                      k->reason[0] ? k->reason : "not started");
    else {
        served_list(s, list, sizeof list);
        if (named)
            ilab_api_fail(e, 404, "model", "model '%.100s' does not exist; this server serves "
                                           "%s", model, list);
        else
            ilab_api_fail(e, 400, "model", "'model' is required: this server serves %s",
                          list);
    }
    pthread_mutex_unlock(&s->backends_mu);
    return v;
}

size_t ilab_backend_views(ilab_server *s, ilab_backend_view **out)
{
    pthread_mutex_lock(&s->backends_mu);
    size_t n = 0, cap = listed_count(s);
    ilab_backend_view *views = calloc(cap ? cap : 1, sizeof *views);
    for (size_t i = 0; views && i < s->n_slots; i++) {
        ilab_slot *k = s->slots[i];
        if (k->removed)
            continue;
        ilab_backend_view *w = &views[n++];
        w->slot = k;
        w->v = k->current;
        if (w->v)
            w->v->refs++;
        listed_id(s, k, w->id, sizeof w->id);
        snprintf(w->reason, sizeof w->reason, "%s", k->reason);
        snprintf(w->refusal, sizeof w->refusal, "%s", k->refusal);
        snprintf(w->down_state, sizeof w->down_state, "%s", k->down_state);
    }
    pthread_mutex_unlock(&s->backends_mu);
    *out = views;
    return views ? n : 0;
}

void ilab_backend_views_free(ilab_backend_view *views, size_t n)
{
    for (size_t i = 0; i < n; i++)
        ilab_served_release(views[i].v);
    free(views);
}

/* --- changes ------------------------------------------------------------------------ */

ilab_status ilab_server_install(ilab_server *s, const ilab_server_backend *be, char *err,
                                size_t err_cap)
{
    if (!be->name || !be->engine || !be->plugin || !be->api || !be->backend) {
        snprintf(err, err_cap, "ilab_server_install: a backend needs a name and an engine");
        backend_drop(be);
        return ILAB_INVALID_ARGUMENT;
    }
    ilab_served *v = version_new(s, be, err, err_cap);
    if (!v) {
        backend_drop(be);
        return ILAB_INTERNAL;
    }
    pthread_mutex_lock(&s->backends_mu);
    ilab_slot *k = slot_get(s, be->name);
    if (!k) {
        pthread_mutex_unlock(&s->backends_mu);
        version_free(v);
        snprintf(err, err_cap, "backend '%s': out of memory", be->name);
        return ILAB_OUT_OF_MEMORY;
    }
    v->slot = k;
    v->refs = 1; /* the slot's */
    bool replaced = k->current != NULL;
    retire(s, k->current);
    k->current = v;
    k->reason[0] = '\0';
    k->down_state[0] = '\0';
    k->refusal[0] = '\0';
    k->removed = false;
    pthread_mutex_unlock(&s->backends_mu);
    if (replaced) {
        pthread_mutex_lock(&s->stats_mu);
        k->reloads++;
        pthread_mutex_unlock(&s->stats_mu);
    }
    return ILAB_OK;
}

void ilab_server_set_down(ilab_server *s, const char *name, const char *reason, bool removed)
{
    pthread_mutex_lock(&s->backends_mu);
    ilab_slot *k = removed ? slot_named(s, name) : slot_get(s, name);
    if (k) {
        retire(s, k->current);
        k->current = NULL;
        snprintf(k->reason, sizeof k->reason, "%s", reason ? reason : "not serving");
        k->down_state[0] = '\0';
        k->removed = removed;
    }
    pthread_mutex_unlock(&s->backends_mu);
}

void ilab_server_set_worker_down(ilab_server *s, const char *name, bool failed,
                                 const char *reason)
{
    ilab_server_set_down(s, name, reason, false);
    pthread_mutex_lock(&s->backends_mu);
    ilab_slot *k = slot_named(s, name);
    if (k)
        snprintf(k->down_state, sizeof k->down_state, "%s", failed ? "failed" : "restarting");
    pthread_mutex_unlock(&s->backends_mu);
}

void ilab_server_note_restart(ilab_server *s, const char *name)
{
    pthread_mutex_lock(&s->backends_mu);
    ilab_slot *k = slot_named(s, name);
    pthread_mutex_unlock(&s->backends_mu);
    if (k) {
        pthread_mutex_lock(&s->stats_mu);
        k->restarts++;
        pthread_mutex_unlock(&s->stats_mu);
    }
}

void ilab_server_note_refusal(ilab_server *s, const char *name, const char *reason)
{
    pthread_mutex_lock(&s->backends_mu);
    ilab_slot *k = slot_get(s, name);
    if (k)
        snprintf(k->refusal, sizeof k->refusal, "%s", reason);
    pthread_mutex_unlock(&s->backends_mu);
    if (k) {
        pthread_mutex_lock(&s->stats_mu);
        k->refusals++;
        pthread_mutex_unlock(&s->stats_mu);
    }
}

size_t ilab_server_retired_count(ilab_server *s)
{
    pthread_mutex_lock(&s->backends_mu);
    size_t n = s->n_retired;
    pthread_mutex_unlock(&s->backends_mu);
    return n;
}

void ilab_server_describe(ilab_server *s, char *out, size_t cap)
{
    pthread_mutex_lock(&s->backends_mu);
    size_t used = 0, serving = 0;
    out[0] = '\0';
    for (size_t i = 0; i < s->n_slots; i++)
        serving += !s->slots[i]->removed && s->slots[i]->current;
    if (serving == 1 && listed_count(s) == 1) {
        for (size_t i = 0; i < s->n_slots; i++)
            if (s->slots[i]->current)
                snprintf(out, cap, "model '%s'", s->slots[i]->current->model_id);
        pthread_mutex_unlock(&s->backends_mu);
        return;
    }
    char list[400];
    served_list(s, list, sizeof list);
    int n = snprintf(out, cap, "%s %s", serving == 1 ? "model" : "models", list);
    used = n > 0 && (size_t)n < cap ? (size_t)n : cap - 1;
    for (size_t i = 0; i < s->n_slots && used + 1 < cap; i++) {
        ilab_slot *k = s->slots[i];
        if (k->removed || k->current)
            continue;
        n = snprintf(out + used, cap - used, "; %s not serving", k->name);
        used += n > 0 ? (size_t)n : 0;
    }
    pthread_mutex_unlock(&s->backends_mu);
}

/* Start-up: the caller's versions, each installed or, without an engine (or
 * when a multi-backend server cannot read its vocabulary), listed down. */
ilab_status ilab_backends_add_initial(ilab_server *s, const ilab_server_backend *bes, size_t n,
                                      char *err, size_t err_cap)
{
    ilab_status result = ILAB_OK;
    for (size_t i = 0; i < n; i++) {
        const ilab_server_backend *be = &bes[i];
        if (result != ILAB_OK) {
            backend_drop(be);
            continue;
        }
        if (!be->engine) {
            ilab_server_set_down(s, be->name, be->unavailable_reason, false);
            backend_drop(be);
            continue;
        }
        char why[1024] = "";
        ilab_status st = ilab_server_install(s, be, why, sizeof why);
        if (st == ILAB_OK)
            continue;
        if (s->cfg.several) {
            fprintf(stderr, "inferlab serve: not serving backend '%s': %s\n", be->name, why);
            ilab_server_set_down(s, be->name, why, false);
        } else {
            snprintf(err, err_cap, "%s", why);
            result = st;
        }
    }
    return result;
}
