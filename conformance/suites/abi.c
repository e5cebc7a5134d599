/* ABI clauses: loading. Never skipped. These tests look at the library
 * themselves (their own dlopen/dlsym) as well as at the host loader's
 * verdict, so a loader bug cannot hide a plugin bug. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "suites.h"

/* The worker's own handle on the library (one plugin per worker). */
static void *raw_handle;
static char raw_path[4096];
static char raw_err[1024];

static void *raw_open(const char *path)
{
    if (raw_handle && strcmp(raw_path, path) == 0)
        return raw_handle;
    snprintf(raw_path, sizeof raw_path, "%s", path);
    dlerror();
    raw_handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!raw_handle) {
        const char *e = dlerror();
        snprintf(raw_err, sizeof raw_err, "%s", e ? e : "dlopen failed without dlerror()");
    }
    return raw_handle;
}

static const ilab_plugin_entry_t *raw_entry(conf_env *env, char *msg, size_t cap)
{
    void *h = raw_open(env->path);
    if (!h) {
        CONF_MSG("dlopen(RTLD_NOW | RTLD_LOCAL) failed: %s", raw_err);
        return NULL;
    }
    const ilab_plugin_entry_t *e = dlsym(h, ILAB_PLUGIN_ENTRY_SYMBOL);
    if (!e)
        CONF_MSG("%s: no exported symbol %s", env->path, ILAB_PLUGIN_ENTRY_SYMBOL);
    return e;
}

conf_result conf_abi4_rtld_now(conf_env *env, char *msg, size_t cap)
{
    if (!raw_open(env->path)) {
        CONF_MSG("dlopen(%s, RTLD_NOW | RTLD_LOCAL) refused: %s", env->path, raw_err);
        /* The loader must refuse it too, with dlerror() in the message. */
        char ignored[CONF_MSG_CAP];
        conf_env_prepare(env, CONF_NEED_PLUGIN, ignored, sizeof ignored);
        if (env->plugin) {
            size_t l = strlen(msg);
            snprintf(msg + l, cap - l, "; and the host loader accepted it anyway");
        }
        return CONF_FAIL;
    }
    return CONF_PASS;
}

conf_result conf_abi1_bootstrap(conf_env *env, char *msg, size_t cap)
{
    const ilab_plugin_entry_t *e = raw_entry(env, msg, cap);
    if (!e)
        return CONF_FAIL;
    CONF_CHECK(e->struct_size >= 3 * sizeof(uint32_t) && e->struct_size <= 65536,
               "bootstrap struct_size %u is not sane", (unsigned)e->struct_size);
    CONF_CHECK(e->abi_major >= 1 && e->abi_major < 1000 && e->abi_minor < 1000,
               "bootstrap ABI %u.%u is not sane", (unsigned)e->abi_major, (unsigned)e->abi_minor);
    /* the report names the ABI even when the host loader refuses the plugin */
    if (env->on_info) {
        char abi[32];
        snprintf(abi, sizeof abi, "%u.%u", (unsigned)e->abi_major, (unsigned)e->abi_minor);
        env->on_info(env->report_ctx, "abi", abi);
    }
    return CONF_PASS;
}

static bool mentions_version(const char *s, unsigned major, unsigned minor)
{
    char v[32];
    snprintf(v, sizeof v, "%u.%u", major, minor);
    return strstr(s, v) != NULL;
}

conf_result conf_abi2_version(conf_env *env, char *msg, size_t cap)
{
    const ilab_plugin_entry_t *e = raw_entry(env, msg, cap);
    if (!e)
        return CONF_FAIL;
    unsigned maj = e->abi_major, min = e->abi_minor;
    char ignored[CONF_MSG_CAP];
    conf_env_prepare(env, CONF_NEED_PLUGIN, ignored, sizeof ignored);
    bool mismatch = maj != ILAB_ABI_MAJOR || min > ILAB_ABI_MINOR;
    if (!mismatch) {
        CONF_CHECK(env->plugin || env->load_status != ILAB_ABI_MISMATCH,
                   "plugin ABI %u.%u suits host %d.%d but the loader refused it: %s", maj, min,
                   ILAB_ABI_MAJOR, ILAB_ABI_MINOR, env->load_err);
        return CONF_PASS;
    }
    CONF_MSG("plugin needs ABI %u.%u, host has %d.%d (%s)", maj, min, ILAB_ABI_MAJOR, ILAB_ABI_MINOR,
             maj != ILAB_ABI_MAJOR ? "different major" : "newer minor");
    size_t l = strlen(msg);
    if (env->plugin)
        snprintf(msg + l, cap - l, "; the host loader accepted it anyway");
    else if (env->load_status != ILAB_ABI_MISMATCH)
        snprintf(msg + l, cap - l, "; the loader refused with %s, not ABI_MISMATCH",
                 ilab_status_name(env->load_status));
    else if (!mentions_version(env->load_err, maj, min) ||
             !mentions_version(env->load_err, ILAB_ABI_MAJOR, ILAB_ABI_MINOR))
        snprintf(msg + l, cap - l, "; the loader's message does not name both versions: %s",
                 env->load_err);
    else
        snprintf(msg + l, cap - l, "; refused: %s", env->load_err);
    return CONF_FAIL;
}

conf_result conf_abi3_size_prefixed(conf_env *env, char *msg, size_t cap)
{
    const ilab_plugin_entry_t *e = raw_entry(env, msg, cap);
    if (!e)
        return CONF_FAIL;
    /* ABI 1.0 defines every member of both tables: the frozen 1.0 sizes,
     * not this header's sizeof, which is the newest minor's (a table
     * built against the 1.0 header ends before cache_stats). */
    CONF_CHECK(e->struct_size >= ILAB_PLUGIN_ENTRY_SIZE_1_0,
               "bootstrap struct_size %u is smaller than ABI 1.0's %u", (unsigned)e->struct_size,
               ILAB_PLUGIN_ENTRY_SIZE_1_0);
    CONF_CHECK(e->backend != NULL, "bootstrap entry has no backend table");
    CONF_CHECK(e->backend->struct_size >= ILAB_BACKEND_API_SIZE_1_0,
               "backend table struct_size %u is smaller than ABI 1.0's %u",
               (unsigned)e->backend->struct_size, ILAB_BACKEND_API_SIZE_1_0);

    /* The plugin honours a caller's smaller struct: model_info() with an
     * older, shorter ilab_model_info_t must not write past its size. */
    char why[CONF_MSG_CAP];
    conf_result r = conf_env_prepare(env, CONF_NEED_INSTANCE, why, sizeof why);
    if (r == CONF_SKIP) {
        CONF_MSG("static checks passed; model_info() size check not run: %s", why);
        return CONF_PASS;
    }
    if (r != CONF_PASS) {
        CONF_MSG("%s", why);
        return r;
    }
    union {
        ilab_model_info_t info;
        unsigned char bytes[sizeof(ilab_model_info_t) + 64];
    } u;
    memset(&u, 0xA5, sizeof u);
    size_t small = offsetof(ilab_model_info_t, name);
    u.info.struct_size = (uint32_t)small;
    ilab_status st = env->api->model_info(env->be, &u.info);
    CONF_CHECK(st == ILAB_OK || st == ILAB_ABI_MISMATCH || st == ILAB_INVALID_ARGUMENT,
               "model_info() with struct_size %zu returned %s", small, ilab_status_name(st));
    for (size_t i = small; i < sizeof u.bytes; i++)
        CONF_CHECK(u.bytes[i] == 0xA5,
                   "model_info() with struct_size %zu wrote byte %zu past the caller's struct", small, i);
    return CONF_PASS;
}

static bool name_ok(const char *s)
{
    if (!s || !*s)
        return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_'))
            return false;
    return true;
}

conf_result conf_abi5_manifest(conf_env *env, char *msg, size_t cap)
{
    const ilab_plugin_entry_t *e = raw_entry(env, msg, cap);
    if (!e)
        return CONF_FAIL;
    CONF_CHECK(e->struct_size >= offsetof(ilab_plugin_entry_t, backend),
               "bootstrap struct_size %u does not cover the manifest", (unsigned)e->struct_size);
    CONF_CHECK(e->manifest_yaml, "bootstrap entry has no manifest");
    CONF_CHECK(name_ok(e->name), "descriptor name '%s' is not [a-z0-9_]+", e->name ? e->name : "(null)");
    ilab_manifest *m = NULL;
    char err[CONF_MSG_CAP];
    ilab_status st = ilab_manifest_parse(e->manifest_yaml, err, sizeof err, &m);
    CONF_CHECK(st == ILAB_OK, "manifest does not pass the schema: %s", err);
    conf_result r = CONF_PASS;
    if (strcmp(m->name, e->name) != 0) {
        CONF_MSG("manifest name '%s' differs from the descriptor's '%s'", m->name, e->name);
        r = CONF_FAIL;
    } else if (!e->version || strcmp(m->version, e->version) != 0) {
        CONF_MSG("manifest version '%s' differs from the descriptor's '%s'", m->version,
                 e->version ? e->version : "(null)");
        r = CONF_FAIL;
    } else if (m->abi_major != e->abi_major || m->abi_minor != e->abi_minor) {
        CONF_MSG("manifest abi %u.%u differs from the descriptor's %u.%u%s", m->abi_major,
                 m->abi_minor, (unsigned)e->abi_major, (unsigned)e->abi_minor,
                 e->abi_minor == ILAB_ABI_MINOR && e->abi_minor > m->abi_minor
                     ? " (an entry that sets abi_minor = ILAB_ABI_MINOR follows the SDK header, "
                       "which moved; set it to the minor the plugin implements)"
                     : "");
        r = CONF_FAIL;
    }
    ilab_manifest_free(m);
    return r;
}

/* ---- ABI-6: which members must be set ------------------------------------ */

/* A member of the backend table and the capability that needs it (NULL:
 * the lifecycle, every plugin's). Its own copy of the rule, so a loader bug
 * cannot hide a plugin bug. */
typedef struct table_member {
    const char *name;
    size_t offset;
    const char *capability;
} table_member;

#define TM(m, c) {#m, offsetof(ilab_backend_api_t, m), c}
static const table_member table_members[] = {
    TM(probe, NULL), TM(create, NULL), TM(destroy, NULL), TM(last_error, NULL),
    TM(model_info, NULL),
    TM(tokenize, "tokenizer"), TM(detokenize, "tokenizer"), TM(token_piece, "tokenizer"),
    TM(seq_create, "logits: full"), TM(seq_free, "logits: full"), TM(seq_length, "logits: full"),
    TM(eval, "logits: full"),
    TM(seq_fork, "cache.fork"), TM(seq_truncate, "cache.truncate"),
    TM(generate, "sampling: backend"), TM(cancel, "cancel"), TM(cache_stats, "cache.stats"),
    TM(eog_ids, "chat"), TM(chat_template, "chat"),
};
#undef TM

static bool capability_declared(const ilab_manifest *m, const char *c)
{
    return !strcmp(c, "tokenizer")           ? m->tokenizer
           : !strcmp(c, "logits: full")      ? m->logits == ILAB_LOGITS_FULL
           : !strcmp(c, "cache.fork")        ? m->cache_fork
           : !strcmp(c, "cache.truncate")    ? m->cache_truncate
           : !strcmp(c, "sampling: backend") ? m->sampling == ILAB_SAMPLING_BACKEND
           : !strcmp(c, "cancel")            ? m->cancel
           : !strcmp(c, "chat")              ? m->chat
                                             : m->cache_stats;
}

static const void *table_member_ptr(const ilab_backend_api_t *t, const table_member *tm)
{
    if (tm->offset + sizeof(void *) > t->struct_size)
        return NULL;
    const void *p;
    memcpy(&p, (const char *)t + tm->offset, sizeof p);
    return p;
}

bool conf_member_absent(const conf_env *env, size_t offset)
{
    const ilab_plugin_entry_t *e = env->plugin ? ilab_plugin_entry_of(env->plugin) : NULL;
    if (!e || !e->backend)
        return false;
    for (size_t i = 0; i < sizeof table_members / sizeof table_members[0]; i++)
        if (table_members[i].offset == offset)
            return table_member_ptr(e->backend, &table_members[i]) == NULL;
    return false;
}

/* The lifecycle members and every member a declared capability needs are
 * set and within struct_size; the others may be NULL or past the table's
 * end (the host's ILAB_UNSUPPORTED shim stands in: ADR 0022). `m` NULL:
 * the manifest did not parse (ABI-5 says why), only the lifecycle. */
static bool members_set(const ilab_backend_api_t *t, const ilab_manifest *m, int *shimmed,
                        char *msg, size_t cap)
{
    *shimmed = 0;
    for (size_t i = 0; i < sizeof table_members / sizeof table_members[0]; i++) {
        const table_member *tm = &table_members[i];
        bool needed = !tm->capability || (m && capability_declared(m, tm->capability));
        if (table_member_ptr(t, tm))
            continue;
        if (!needed) {
            (*shimmed)++;
            continue;
        }
        bool past = tm->offset + sizeof(void *) > t->struct_size;
        CONF_CHECK_BOOL(false, "backend member %s is %s, but %s needs it", tm->name,
                        past ? "past the table's struct_size" : "NULL",
                        tm->capability ? tm->capability : "every plugin (lifecycle)");
    }
    return true;
}

/* ABI-6: the manifest tells the truth. */
conf_result conf_abi6_truthful(conf_env *env, char *msg, size_t cap)
{
    const ilab_plugin_entry_t *e = raw_entry(env, msg, cap);
    if (!e)
        return CONF_FAIL;
    CONF_CHECK(e->backend, "bootstrap entry has no backend table");
    ilab_manifest *own = NULL;
    char perr[CONF_MSG_CAP];
    if (!e->manifest_yaml || ilab_manifest_parse(e->manifest_yaml, perr, sizeof perr, &own) != ILAB_OK)
        own = NULL;
    int shimmed = 0;
    bool ok = members_set(e->backend, own, &shimmed, msg, cap);
    ilab_manifest_free(own);
    if (!ok)
        return CONF_FAIL;

    char why[CONF_MSG_CAP];
    conf_result r = conf_env_prepare(env, CONF_NEED_INSTANCE, why, sizeof why);
    if (r == CONF_SKIP) {
        CONF_MSG("table complete; capability calls not run: %s", why);
        return CONF_PASS;
    }
    if (r != CONF_PASS) {
        CONF_MSG("%s", why);
        return r;
    }
    const ilab_manifest *m = env->m;
    const ilab_backend_api_t *api = env->api;
    ilab_status st;
    char e2[512];
    if (m->tokenizer) {
        int32_t t[16];
        size_t n = 0;
        st = api->tokenize(env->be, "abc", 3, 0, t, 16, &n);
        CONF_CHECK(st != ILAB_UNSUPPORTED, "declares tokenizer but tokenize() is UNSUPPORTED: %s",
                   conf_last_error(env, e2, sizeof e2));
        if (st == ILAB_OK && n > 0) {
            char buf[64];
            size_t len;
            st = api->detokenize(env->be, t, n, buf, sizeof buf, &len);
            CONF_CHECK(st != ILAB_UNSUPPORTED, "declares tokenizer but detokenize() is UNSUPPORTED");
            st = api->token_piece(env->be, -1, t[0], buf, sizeof buf, &len);
            CONF_CHECK(st != ILAB_UNSUPPORTED, "declares tokenizer but token_piece() is UNSUPPORTED");
        }
    }
    if (m->logits == ILAB_LOGITS_FULL) {
        ilab_seq_t s = 0;
        st = api->seq_create(env->be, &s);
        CONF_CHECK(st != ILAB_UNSUPPORTED, "declares logits: full but seq_create() is UNSUPPORTED");
        CONF_CHECK_OK(env, st, "seq_create()");
        int32_t tok = env->info.bos_id >= 0 ? env->info.bos_id : 0;
        st = conf_eval1(env, s, &tok, 1, 0, NULL);
        CONF_CHECK(st != ILAB_UNSUPPORTED, "declares logits: full but eval() is UNSUPPORTED");
        int32_t len = 0;
        st = api->seq_length(env->be, s, &len);
        CONF_CHECK(st != ILAB_UNSUPPORTED, "declares logits: full but seq_length() is UNSUPPORTED");
        if (m->cache_fork) {
            ilab_seq_t c = 0;
            st = api->seq_fork(env->be, s, &c);
            CONF_CHECK(st != ILAB_UNSUPPORTED, "declares cache.fork but seq_fork() is UNSUPPORTED: %s",
                       conf_last_error(env, e2, sizeof e2));
            if (st == ILAB_OK)
                api->seq_free(env->be, c);
        }
        if (m->cache_truncate) {
            st = api->seq_truncate(env->be, s, 0);
            CONF_CHECK(st != ILAB_UNSUPPORTED,
                       "declares cache.truncate but seq_truncate() is UNSUPPORTED: %s",
                       conf_last_error(env, e2, sizeof e2));
        }
        st = api->seq_free(env->be, s);
        CONF_CHECK(st != ILAB_UNSUPPORTED, "declares logits: full but seq_free() is UNSUPPORTED");
    }
    if (m->cancel) {
        st = api->cancel(env->be, 0x5eed5eedull);
        CONF_CHECK(st == ILAB_OK, "declares cancel but cancel(unknown id) returned %s (want OK)",
                   ilab_status_name(st));
    }
    if (m->sampling == ILAB_SAMPLING_BACKEND) {
        int32_t tok = env->info.bos_id >= 0 ? env->info.bos_id : 0;
        conf_gen_params p;
        conf_gen_params_default(&p, &tok, 1);
        p.max_tokens = 1;
        conf_gen g;
        conf_result gr = conf_generate(env, &p, &g, msg, cap);
        if (gr != CONF_PASS)
            return gr;
        bool unsupported = g.status == ILAB_UNSUPPORTED;
        conf_gen_free(&g);
        CONF_CHECK(!unsupported, "declares sampling: backend but generate() is UNSUPPORTED");
    }
    if (m->chat) {
        size_t n = 0;
        int32_t ids[64];
        st = api->eog_ids(env->be, ids, 64, &n);
        CONF_CHECK(st != ILAB_UNSUPPORTED, "declares chat but eog_ids() is UNSUPPORTED: %s",
                   conf_last_error(env, e2, sizeof e2));
        char t[8];
        st = api->chat_template(env->be, t, sizeof t, &n);
        CONF_CHECK(st != ILAB_UNSUPPORTED, "declares chat but chat_template() is UNSUPPORTED: %s",
                   conf_last_error(env, e2, sizeof e2));
    }
    if (shimmed) {
        const ilab_plugin_entry_t *entry = env->plugin ? ilab_plugin_entry_of(env->plugin) : NULL;
        uint32_t size = entry && entry->backend ? entry->backend->struct_size : 0;
        CONF_MSG("%d member(s) no declared capability needs are NULL or past the table (its "
                 "struct_size is %u): the host's shims answer for them", shimmed, size);
    }
    return CONF_PASS;
}

typedef struct create_cycle_ctx {
    bool available;
} create_cycle_ctx;

static bool create_destroy_once(conf_env *env, int i, void *ctx, char *msg, size_t cap)
{
    const create_cycle_ctx *c = ctx;
    ilab_backend_t *b = NULL;
    char err[512] = "";
    ilab_status st = env->api->create(env->host, env->config, env->n_config, err,
                                      sizeof err, &b);
    if (c->available && (st != ILAB_OK || !b)) {
        CONF_MSG("create() #%d returned %s: %s", i + 1, ilab_status_name(st), err);
        return false;
    }
    if (!c->available && (st != ILAB_UNAVAILABLE || !err[0])) {
        CONF_MSG("create() #%d of an unavailable backend returned %s (%s), want UNAVAILABLE with a "
                 "reason", i + 1, ilab_status_name(st), err);
        return false;
    }
    if (st == ILAB_OK) {
        /* touch the instance so lazily built state is built (and must be freed) */
        ilab_model_info_t info = {.struct_size = sizeof info};
        env->api->model_info(b, &info);
    }
    env->api->destroy(b);
    return true;
}

/* ABI-7: create/destroy cycles leave the live heap where it was (a leak
 * of a few bytes per cycle fails, whatever the RSS does). */
conf_result conf_abi7_create_destroy(conf_env *env, char *msg, size_t cap)
{
    char why[CONF_MSG_CAP];
    conf_result r = conf_env_prepare(env, CONF_NEED_PROBE, why, sizeof why);
    if (r != CONF_PASS) {
        CONF_MSG("%s", why);
        return r;
    }
    create_cycle_ctx c = {env->probe_status == ILAB_OK};
    conf_leak_slope(env, "create/destroy cycle", 10, 60, create_destroy_once, &c, &r, msg, cap);
    if (r == CONF_PASS)
        env->api->destroy(NULL); /* a no-op by contract */
    return r;
}

