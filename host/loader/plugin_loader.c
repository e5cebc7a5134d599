/* Loading one plugin and deciding whether to trust it.
 *
 * Order matters: the frozen prefix of the bootstrap entry (size, major, minor)
 * is the only thing read before the versions are known to be compatible, and
 * nothing of the backend table is called here — a plugin is only ever read,
 * never run, until the caller probes it. */
#include "plugin_loader.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

struct ilab_plugin {
    char *path;
    void *dl;
    int fd;                /* ilab_plugin_load_fresh's descriptor, else -1 */
    ilab_file_id file;
    const ilab_plugin_entry_t *entry;
    ilab_manifest *manifest;
    /* The plugin's table copied up to its struct_size; the rest, and the
     * members it left NULL (ADR 0022), are shims. */
    ilab_backend_api_t api;
    /* The host table its probe()/create() get: the host's services, with
     * host_data = remote_data for a plugin run elsewhere. */
    ilab_host_t host;
    /* A remote plugin (ilab_plugin_remote): no library here; its entry and
     * strings are copies, its table forwards the calls. */
    ilab_plugin_entry_t remote_entry;
    ilab_backend_api_t remote_table;
    char *remote_strings[3];
    void *remote_data;
    void (*remote_free)(void *data);
};

/* Refuse to believe sizes beyond this: a garbage struct_size is a bug, not a
 * future ABI (structs grow by a few pointers per minor). */
#define SANE_STRUCT_MAX 65536u

/* The ABI 1.0 table must reach at least through model_info: the lifecycle is
 * what every plugin implements; later members may be absent (shimmed). */
#define BACKEND_MIN_SIZE (offsetof(ilab_backend_api_t, model_info) + sizeof(void *))

/* --- shims for members past the plugin's struct_size, or left NULL --------- */

static ilab_status shim_tokenize(ilab_backend_t *b, const char *t, size_t l, uint32_t f,
                                 int32_t *o, size_t c, size_t *n)
{
    return ILAB_UNSUPPORTED;
}
static ilab_status shim_detokenize(ilab_backend_t *b, const int32_t *t, size_t n, char *o,
                                   size_t c, size_t *l)
{
    return ILAB_UNSUPPORTED;
}
static ilab_status shim_token_piece(ilab_backend_t *b, int32_t p, int32_t t, char *o, size_t c,
                                    size_t *l)
{
    return ILAB_UNSUPPORTED;
}
static ilab_status shim_seq_create(ilab_backend_t *b, ilab_seq_t *s) { return ILAB_UNSUPPORTED; }
static ilab_status shim_seq_free(ilab_backend_t *b, ilab_seq_t s) { return ILAB_UNSUPPORTED; }
static ilab_status shim_seq_fork(ilab_backend_t *b, ilab_seq_t p, ilab_seq_t *c)
{
    return ILAB_UNSUPPORTED;
}
static ilab_status shim_seq_truncate(ilab_backend_t *b, ilab_seq_t s, int32_t n)
{
    return ILAB_UNSUPPORTED;
}
static ilab_status shim_seq_length(ilab_backend_t *b, ilab_seq_t s, int32_t *l)
{
    return ILAB_UNSUPPORTED;
}
static ilab_status shim_eval(ilab_backend_t *b, const ilab_batch_item_t *const *items, size_t n)
{
    return ILAB_UNSUPPORTED;
}
/* generate() keeps the stream grammar: exactly one terminal event. */
static ilab_status shim_generate(ilab_backend_t *b, const ilab_generate_request_t *req,
                                 ilab_event_fn on_event, void *user_data)
{
    if (on_event) {
        ilab_event_t ev = {0};
        ev.struct_size = sizeof ev;
        ev.type = ILAB_EVENT_ERROR;
        ev.request_id = req ? req->request_id : 0;
        ev.finish_reason = ILAB_FINISH_ERROR;
        ev.status = ILAB_UNSUPPORTED;
        ev.message = "generate is absent: the plugin's backend table ends before it or leaves it NULL";
        on_event(user_data, &ev);
    }
    return ILAB_UNSUPPORTED;
}
static ilab_status shim_cancel(ilab_backend_t *b, uint64_t id) { return ILAB_UNSUPPORTED; }
/* ABI 1.1: a table built against 1.0 has no cache_stats; the engine then
 * admits by its own estimate (docs/runtime.md). */
static ilab_status shim_cache_stats(ilab_backend_t *b, ilab_cache_stats_t *s)
{
    return ILAB_UNSUPPORTED;
}
/* ABI 1.2: without chat the host knows EOS only and uses the plain template
 * (docs/chat-template.md). */
static ilab_status shim_eog_ids(ilab_backend_t *b, int32_t *ids, size_t cap, size_t *n)
{
    return ILAB_UNSUPPORTED;
}
static ilab_status shim_chat_template(ilab_backend_t *b, char *text, size_t cap, size_t *len)
{
    return ILAB_UNSUPPORTED;
}

/* Every member of the table: its name, where it is, and the shim standing in
 * for it when the plugin's table is too short to hold it or leaves it NULL. */
typedef struct member_info {
    const char *name;
    size_t offset;
    void (*shim)(void); /* NULL: the member is mandatory (lifecycle) */
} member_info;

#define MEMBER(m, shim) {#m, offsetof(ilab_backend_api_t, m), (void (*)(void))(shim)}
static const member_info members[] = {
    MEMBER(probe, NULL),
    MEMBER(create, NULL),
    MEMBER(destroy, NULL),
    MEMBER(last_error, NULL),
    MEMBER(model_info, NULL),
    MEMBER(tokenize, shim_tokenize),
    MEMBER(detokenize, shim_detokenize),
    MEMBER(token_piece, shim_token_piece),
    MEMBER(seq_create, shim_seq_create),
    MEMBER(seq_free, shim_seq_free),
    MEMBER(seq_fork, shim_seq_fork),
    MEMBER(seq_truncate, shim_seq_truncate),
    MEMBER(seq_length, shim_seq_length),
    MEMBER(eval, shim_eval),
    MEMBER(generate, shim_generate),
    MEMBER(cancel, shim_cancel),
    MEMBER(cache_stats, shim_cache_stats),
    MEMBER(eog_ids, shim_eog_ids),
    MEMBER(chat_template, shim_chat_template),
};
#define N_MEMBERS (sizeof members / sizeof members[0])

static const member_info *member_named(const char *name)
{
    for (size_t i = 0; i < N_MEMBERS; i++)
        if (!strcmp(members[i].name, name))
            return &members[i];
    return NULL;
}

/* Function pointers are read as raw bytes so no member type is special. */
static void *member_ptr(const void *table, size_t offset)
{
    void *p;
    memcpy(&p, (const char *)table + offset, sizeof p);
    return p;
}

static bool member_within(size_t table_size, const member_info *mi)
{
    return mi->offset + sizeof(void *) <= table_size;
}

/* --- refusal messages ----------------------------------------------------- */

static ilab_status refuse(char *err, size_t err_cap, ilab_status st, const char *path,
                          const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static ilab_status refuse(char *err, size_t err_cap, ilab_status st, const char *path,
                          const char *fmt, ...)
{
    if (!err || !err_cap)
        return st;
    int n = snprintf(err, err_cap, "%s: ", path);
    size_t used = n > 0 && (size_t)n < err_cap ? (size_t)n : 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err + used, err_cap - used, fmt, ap);
    va_end(ap);
    return st;
}

/* --- checks --------------------------------------------------------------- */

static ilab_status check_entry(const char *path, const ilab_plugin_entry_t *e, char *err,
                               size_t err_cap)
{
    const size_t prefix = offsetof(ilab_plugin_entry_t, abi_minor) + sizeof e->abi_minor;
    if (e->struct_size < prefix || e->struct_size > SANE_STRUCT_MAX)
        return refuse(err, err_cap, ILAB_ABI_MISMATCH, path,
                      "bootstrap entry '%s' has struct_size %u, not a valid inferlab entry "
                      "(expected %zu for ABI %d.%d)",
                      ILAB_PLUGIN_ENTRY_SYMBOL, e->struct_size, sizeof *e, ILAB_ABI_MAJOR,
                      ILAB_ABI_MINOR);
    if (e->abi_major != ILAB_ABI_MAJOR)
        return refuse(err, err_cap, ILAB_ABI_MISMATCH, path,
                      "plugin ABI %u.%u, host ABI %d.%d: the major versions differ",
                      e->abi_major, e->abi_minor, ILAB_ABI_MAJOR, ILAB_ABI_MINOR);
    if (e->abi_minor > ILAB_ABI_MINOR)
        return refuse(err, err_cap, ILAB_ABI_MISMATCH, path,
                      "plugin needs ABI %u.%u, host provides ABI %d.%d: the plugin needs a newer "
                      "host", e->abi_major, e->abi_minor, ILAB_ABI_MAJOR, ILAB_ABI_MINOR);
    /* Every ABI 1.x entry has all of the 1.0 fields. */
    if (e->struct_size < ILAB_PLUGIN_ENTRY_SIZE_1_0)
        return refuse(err, err_cap, ILAB_ABI_MISMATCH, path,
                      "bootstrap entry struct_size %u is smaller than the ABI %d.0 entry (%u)",
                      e->struct_size, ILAB_ABI_MAJOR, ILAB_PLUGIN_ENTRY_SIZE_1_0);
    if (!e->name || !e->version || !e->manifest_yaml || !e->backend)
        return refuse(err, err_cap, ILAB_INVALID_ARGUMENT, path,
                      "bootstrap entry has a NULL %s", !e->name ? "name" : !e->version ? "version"
                      : !e->manifest_yaml ? "manifest_yaml" : "backend");
    return ILAB_OK;
}

static ilab_status check_manifest_matches(const char *path, const ilab_plugin_entry_t *e,
                                          const ilab_manifest *m, char *err, size_t err_cap)
{
    if (strcmp(m->name, e->name))
        return refuse(err, err_cap, ILAB_INVALID_ARGUMENT, path,
                      "manifest name '%s' differs from the entry's name '%s'", m->name, e->name);
    if (strcmp(m->version, e->version))
        return refuse(err, err_cap, ILAB_INVALID_ARGUMENT, path,
                      "manifest version '%s' differs from the entry's version '%s'", m->version,
                      e->version);
    /* An entry one minor ahead of its manifest, at exactly the SDK's minor,
     * is the mark of `.abi_minor = ILAB_ABI_MINOR` rebuilt against a newer
     * header: say so, since the author changed nothing (ADR 0022). */
    if (m->abi_major == e->abi_major && e->abi_minor > m->abi_minor &&
        e->abi_minor == ILAB_ABI_MINOR)
        return refuse(err, err_cap, ILAB_ABI_MISMATCH, path,
                      "manifest abi %u.%u differs from the entry's ABI %u.%u: an entry that sets "
                      "abi_minor = ILAB_ABI_MINOR follows the SDK header, which is now %d.%d, while "
                      "the manifest stayed at %u.%u; set abi_minor to the minor the plugin "
                      "implements (%u), not ILAB_ABI_MINOR (docs/sdk.md, Upgrading the SDK)",
                      m->abi_major, m->abi_minor, e->abi_major, e->abi_minor, ILAB_ABI_MAJOR,
                      ILAB_ABI_MINOR, m->abi_major, m->abi_minor, m->abi_minor);
    if (m->abi_major != e->abi_major || m->abi_minor != e->abi_minor)
        return refuse(err, err_cap, ILAB_ABI_MISMATCH, path,
                      "manifest abi %u.%u differs from the entry's ABI %u.%u", m->abi_major,
                      m->abi_minor, e->abi_major, e->abi_minor);
    return ILAB_OK;
}

/* What each declared capability needs (docs/manifest.md's table). */
typedef struct capability_need {
    const char *capability;
    const char *members[5];
} capability_need;

static ilab_status check_capabilities(const char *path, const ilab_manifest *m,
                                      const ilab_backend_api_t *t, char *err, size_t err_cap)
{
    capability_need needs[8];
    size_t n = 0;
    if (m->tokenizer)
        needs[n++] = (capability_need){m->tokenizer_text ? "tokenizer: text" : "tokenizer: true",
                                       {"tokenize", "detokenize", "token_piece"}};
    if (m->logits == ILAB_LOGITS_FULL)
        needs[n++] = (capability_need){"logits: full", {"seq_create", "seq_free", "seq_length", "eval"}};
    if (m->cache_fork)
        needs[n++] = (capability_need){"cache.fork: true", {"seq_fork"}};
    if (m->cache_truncate)
        needs[n++] = (capability_need){"cache.truncate: true", {"seq_truncate"}};
    if (m->sampling == ILAB_SAMPLING_BACKEND)
        needs[n++] = (capability_need){"sampling: backend", {"generate"}};
    if (m->cancel)
        needs[n++] = (capability_need){"cancel: true", {"cancel"}};
    if (m->cache_stats)
        needs[n++] = (capability_need){"cache.stats: true", {"cache_stats"}};
    if (m->chat)
        needs[n++] = (capability_need){"chat: true", {"eog_ids", "chat_template"}};

    for (size_t i = 0; i < n; i++)
        for (const char *const *name = needs[i].members; *name; name++) {
            const member_info *mi = member_named(*name);
            if (!member_within(t->struct_size, mi))
                return refuse(err, err_cap, ILAB_INVALID_ARGUMENT, path,
                              "manifest declares '%s' but the backend table (struct_size %u) ends "
                              "before %s", needs[i].capability, t->struct_size, mi->name);
            if (!member_ptr(t, mi->offset))
                return refuse(err, err_cap, ILAB_INVALID_ARGUMENT, path,
                              "manifest declares '%s' but backend member %s is NULL",
                              needs[i].capability, mi->name);
        }
    return ILAB_OK;
}

static ilab_status check_table(const char *path, const ilab_backend_api_t *t, char *err,
                               size_t err_cap)
{
    if (t->struct_size < BACKEND_MIN_SIZE || t->struct_size > SANE_STRUCT_MAX)
        return refuse(err, err_cap, ILAB_ABI_MISMATCH, path,
                      "backend table struct_size %u is not sane (ABI %d.%d: at least %zu, "
                      "full table %zu)", t->struct_size, ILAB_ABI_MAJOR, ILAB_ABI_MINOR,
                      BACKEND_MIN_SIZE, sizeof *t);
    return ILAB_OK;
}

static ilab_status check_members(const char *path, const ilab_backend_api_t *t, char *err,
                                 size_t err_cap)
{
    /* The lifecycle is every plugin's. Any other member may be NULL when
     * no declared capability needs it (check_capabilities refuses the rest):
     * a source written for an older minor, rebuilt against a newer header,
     * leaves the members it has never heard of NULL, and copy_table puts
     * the host's shim there (ADR 0022). */
    for (size_t i = 0; i < N_MEMBERS; i++)
        if (!members[i].shim && !member_ptr(t, members[i].offset))
            return refuse(err, err_cap, ILAB_INVALID_ARGUMENT, path,
                          "backend member %s is NULL (the lifecycle members probe, create, "
                          "destroy, last_error and model_info are every plugin's)",
                          members[i].name);
    return ILAB_OK;
}

/* The host's view of the table: the plugin's members up to its struct_size,
 * shims for the rest and for the members it left NULL, struct_size = the
 * host's. */
static void copy_table(const ilab_backend_api_t *t, ilab_backend_api_t *out)
{
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < N_MEMBERS; i++) {
        void *p = member_within(t->struct_size, &members[i]) ? member_ptr(t, members[i].offset)
                                                             : NULL;
        if (!p)
            p = (void *)members[i].shim;
        memcpy((char *)out + members[i].offset, &p, sizeof p);
    }
    out->struct_size = sizeof *out;
}

ilab_status ilab_plugin_check_entry(const char *path, const ilab_plugin_entry_t *e, char *err,
                                    size_t err_cap, ilab_manifest **manifest)
{
    *manifest = NULL;
    ilab_manifest *m = NULL;
    char why[512];
    ilab_status st = check_entry(path, e, err, err_cap);
    if (st != ILAB_OK)
        return st;
    if (ilab_manifest_parse(e->manifest_yaml, why, sizeof why, &m) != ILAB_OK)
        return refuse(err, err_cap, ILAB_INVALID_ARGUMENT, path, "manifest: %s", why);
    if ((st = check_manifest_matches(path, e, m, err, err_cap)) != ILAB_OK ||
        (st = check_table(path, e->backend, err, err_cap)) != ILAB_OK ||
        (st = check_capabilities(path, m, e->backend, err, err_cap)) != ILAB_OK ||
        (st = check_members(path, e->backend, err, err_cap)) != ILAB_OK) {
        ilab_manifest_free(m);
        return st;
    }
    *manifest = m;
    return ILAB_OK;
}

/* dlerror()'s text with `alias` (the /proc/self/fd name) spelled `path`. */
static void dl_message(const char *why, const char *alias, const char *path, char *out,
                       size_t cap)
{
    const char *at = alias ? strstr(why, alias) : NULL;
    if (!at)
        snprintf(out, cap, "%s", why);
    else
        snprintf(out, cap, "%.*s%s%s", (int)(at - why), why, path, at + strlen(alias));
}

/* Open `dl_name` (the path, or its /proc/self/fd alias) as the plugin `path`. */
static ilab_status load_as(const char *path, const char *dl_name, char *err, size_t err_cap,
                           ilab_plugin **out)
{
    dlerror();
    void *dl = dlopen(dl_name, RTLD_NOW | RTLD_LOCAL);
    if (!dl) {
        const char *why = dlerror();
        char msg[1024];
        dl_message(why ? why : "unknown error", dl_name != path ? dl_name : NULL, path, msg,
                   sizeof msg);
        return refuse(err, err_cap, ILAB_IO, path, "dlopen failed: %s", msg);
    }
    dlerror();
    const ilab_plugin_entry_t *e = dlsym(dl, ILAB_PLUGIN_ENTRY_SYMBOL);
    if (!e) {
        const char *why = dlerror();
        refuse(err, err_cap, ILAB_INVALID_ARGUMENT, path,
               "no bootstrap symbol '%s' (%s): not an inferlab plugin", ILAB_PLUGIN_ENTRY_SYMBOL,
               why ? why : "symbol is NULL");
        dlclose(dl);
        return ILAB_INVALID_ARGUMENT;
    }

    ilab_manifest *m = NULL;
    ilab_status st = ilab_plugin_check_entry(path, e, err, err_cap, &m);
    if (st != ILAB_OK)
        goto refused;

    ilab_plugin *p = calloc(1, sizeof *p);
    if (!p || !(p->path = strdup(path))) {
        free(p);
        st = refuse(err, err_cap, ILAB_OUT_OF_MEMORY, path, "out of memory");
        goto refused;
    }
    p->dl = dl;
    p->fd = -1;
    p->host = *ilab_host_services();
    p->entry = e;
    p->manifest = m;
    copy_table(e->backend, &p->api);
    *out = p;
    return ILAB_OK;

refused:
    ilab_manifest_free(m);
    dlclose(dl);
    return st;
}

ilab_status ilab_plugin_load(const char *path, char *err, size_t err_cap, ilab_plugin **out)
{
    if (err && err_cap)
        err[0] = '\0';
    if (!path || !out)
        return refuse(err, err_cap, ILAB_INVALID_ARGUMENT, path ? path : "(null)",
                      "no plugin path or out-parameter");
    /* A bare "ok.so" is the file in the current folder, as every command
     * line means it: dlopen() would search the library path for it. */
    if (!strchr(path, '/')) {
        size_t n = strlen(path) + 3;
        char *local = malloc(n);
        if (!local)
            return refuse(err, err_cap, ILAB_OUT_OF_MEMORY, path, "out of memory");
        snprintf(local, n, "./%s", path);
        ilab_status st = load_as(path, local, err, err_cap, out);
        free(local);
        return st;
    }
    return load_as(path, path, err, err_cap, out);
}

static void file_id_from_stat(const struct stat *st, ilab_file_id *out)
{
    memset(out, 0, sizeof *out);
    out->dev = st->st_dev;
    out->ino = st->st_ino;
    out->size = st->st_size;
    out->mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
}

bool ilab_file_id_of(const char *path, ilab_file_id *out)
{
    struct stat st;
    if (stat(path, &st))
        return false;
    file_id_from_stat(&st, out);
    return true;
}

bool ilab_file_id_equal(const ilab_file_id *a, const ilab_file_id *b)
{
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
           a->mtime_ns == b->mtime_ns;
}

/* Open `path` for reading: its descriptor and what it is. */
static ilab_status open_plugin_file(const char *path, char *err, size_t err_cap, int *fd,
                                    struct stat *st)
{
    *fd = open(path, O_RDONLY | O_CLOEXEC);
    if (*fd < 0 || fstat(*fd, st)) {
        int e = errno;
        if (*fd >= 0)
            close(*fd);
        return refuse(err, err_cap, ILAB_IO, path, "cannot open: %s", strerror(e));
    }
    return ILAB_OK;
}

/* Load the library that descriptor `fd` holds (through its /proc/self/fd
 * name) as the plugin `path`; the plugin keeps `fd`, closed on failure. */
static ilab_status load_fd(const char *path, int fd, const struct stat *st, char *err,
                           size_t err_cap, ilab_plugin **out)
{
    char alias[64];
    snprintf(alias, sizeof alias, "/proc/self/fd/%d", fd);
    ilab_status s = load_as(path, alias, err, err_cap, out);
    if (s != ILAB_OK) {
        close(fd);
        return s;
    }
    (*out)->fd = fd;
    file_id_from_stat(st, &(*out)->file);
    return ILAB_OK;
}

ilab_status ilab_plugin_load_fresh(const char *path, char *err, size_t err_cap,
                                   ilab_plugin **out)
{
    if (err && err_cap)
        err[0] = '\0';
    if (!path || !out)
        return refuse(err, err_cap, ILAB_INVALID_ARGUMENT, path ? path : "(null)",
                      "no plugin path or out-parameter");
    int fd;
    struct stat st;
    ilab_status s = open_plugin_file(path, err, err_cap, &fd, &st);
    return s != ILAB_OK ? s : load_fd(path, fd, &st, err, err_cap, out);
}

/* A private copy: the bytes of `path` now, in an anonymous memory file, so
 * that whatever happens to the file later (overwritten in place by cp,
 * truncated, deleted) cannot change the code this process runs. */
ilab_status ilab_plugin_load_private(const char *path, char *err, size_t err_cap,
                                     ilab_plugin **out)
{
    if (err && err_cap)
        err[0] = '\0';
    if (!path || !out)
        return refuse(err, err_cap, ILAB_INVALID_ARGUMENT, path ? path : "(null)",
                      "no plugin path or out-parameter");
    int src;
    struct stat st;
    ilab_status s = open_plugin_file(path, err, err_cap, &src, &st);
    if (s != ILAB_OK)
        return s;
    int fd = memfd_create("inferlab-plugin", MFD_CLOEXEC);
    off_t copied = 0;
    while (fd >= 0 && copied < st.st_size) {
        ssize_t n = sendfile(fd, src, NULL, (size_t)(st.st_size - copied));
        if (n <= 0)
            break;
        copied += n;
    }
    int e = errno;
    close(src);
    if (fd < 0 || copied != st.st_size) {
        if (fd >= 0)
            close(fd);
        return refuse(err, err_cap, ILAB_IO, path, "cannot take a private copy: %s",
                      copied != st.st_size && fd >= 0 ? "the file changed size while copied"
                                                      : strerror(e));
    }
    return load_fd(path, fd, &st, err, err_cap, out);
}

ilab_status ilab_plugin_remote(const char *path, const ilab_plugin_entry_t *entry,
                               const ilab_backend_api_t *forward, uint32_t table_size,
                               void *remote_data, char *err, size_t err_cap, ilab_plugin **out)
{
    ilab_plugin *p = calloc(1, sizeof *p);
    if (!p || !(p->path = strdup(path)) || !(p->remote_strings[0] = strdup(entry->name)) ||
        !(p->remote_strings[1] = strdup(entry->version)) ||
        !(p->remote_strings[2] = strdup(entry->manifest_yaml))) {
        if (p)
            ilab_plugin_unload(p);
        return refuse(err, err_cap, ILAB_OUT_OF_MEMORY, path, "out of memory");
    }
    p->fd = -1;
    /* The plugin's table size: members past it are shimmed here as they are
     * in-process, so the forwarding table looks exactly as long. */
    p->remote_table = *forward;
    p->remote_table.struct_size = table_size;
    p->remote_entry = *entry;
    p->remote_entry.name = p->remote_strings[0];
    p->remote_entry.version = p->remote_strings[1];
    p->remote_entry.manifest_yaml = p->remote_strings[2];
    p->remote_entry.backend = &p->remote_table;
    p->entry = &p->remote_entry;
    ilab_status st = ilab_plugin_check_entry(path, p->entry, err, err_cap, &p->manifest);
    if (st != ILAB_OK) {
        ilab_plugin_unload(p);
        return st;
    }
    copy_table(&p->remote_table, &p->api);
    p->host = *ilab_host_services();
    p->host.host_data = remote_data;
    p->remote_data = remote_data;
    *out = p;
    return ILAB_OK;
}

void ilab_plugin_set_remote_free(ilab_plugin *p, void (*remote_free)(void *data))
{
    p->remote_free = remote_free;
}

const ilab_host_t *ilab_plugin_host(const ilab_plugin *p) { return &p->host; }

const ilab_file_id *ilab_plugin_file_id(const ilab_plugin *p) { return &p->file; }

void ilab_plugin_unload(ilab_plugin *p)
{
    if (!p)
        return;
    if (p->remote_free)
        p->remote_free(p->remote_data);
    for (size_t i = 0; i < 3; i++)
        free(p->remote_strings[i]);
    ilab_manifest_free(p->manifest);
    if (p->dl)
        dlclose(p->dl);
    if (p->fd >= 0)
        close(p->fd);
    free(p->path);
    free(p);
}

const char *ilab_plugin_path(const ilab_plugin *p) { return p->path; }
const ilab_plugin_entry_t *ilab_plugin_entry_of(const ilab_plugin *p) { return p->entry; }
const ilab_manifest *ilab_plugin_manifest(const ilab_plugin *p) { return p->manifest; }
const ilab_backend_api_t *ilab_plugin_api(const ilab_plugin *p) { return &p->api; }
