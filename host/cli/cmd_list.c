/* `inferlab list` and `inferlab info NAME`.
 *
 * Loading a plugin runs its constructor, and probing runs its code: either
 * can crash or hang. So each plugin is loaded and probed in a forked child
 * with a deadline; the child reports one JSON object over a pipe, and a
 * child that dies or overruns becomes a "rejected" row. The parent never
 * dlopens plugin code. */
#include <errno.h>
#include <stdarg.h>
#include <getopt.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "commands.h"
#include "loader/plugin_loader.h"
#include "loader/registry.h"

/* Loading + probing one plugin gets this long (probe() itself is bounded at
 * 2 s by the contract); INFERLAB_PROBE_TIMEOUT overrides, in seconds. */
#define DEFAULT_DEADLINE_MS 5000

typedef struct list_options {
    const char **plugin_dirs;
    size_t n_dirs;
    int json;
    const char *name; /* info only */
} list_options;

/* --- the child: load, probe, describe ------------------------------------- */

static json_t *capabilities_json(const ilab_manifest *m)
{
    return json_pack("{s:b, s:s, s:i, s:s, s:{s:b, s:b}, s:{s:i}, s:b, s:b, s:i, s:s}",
                     "tokenizer", m->tokenizer, "logits", ilab_logits_kind_name(m->logits),
                     "topk_max", m->topk_max, "sampling",
                     m->sampling == ILAB_SAMPLING_BACKEND ? "backend" : "host", "cache", "fork",
                     m->cache_fork, "truncate", m->cache_truncate, "batching", "max_batch",
                     m->max_batch, "streaming", m->streaming, "cancel", m->cancel, "max_context",
                     m->max_context, "thread_safety", ilab_thread_safety_name(m->thread_safety));
}

static json_t *config_json(const ilab_manifest *m)
{
    json_t *keys = json_array();
    for (size_t i = 0; i < m->n_config; i++) {
        const ilab_config_key *k = &m->config[i];
        json_array_append_new(keys, json_pack("{s:s, s:s, s:o, s:s}", "key", k->key, "type",
                                              ilab_config_type_name(k->type), "default",
                                              k->default_value ? json_string(k->default_value)
                                                               : json_null(),
                                              "description", k->description ? k->description : ""));
    }
    return keys;
}

static void write_all(int fd, const char *s, size_t n);

/* Writes "L" to `fd` once the plugin is loaded, so a later death is known to
 * have happened in probe() rather than in dlopen (the constructor). */
static json_t *describe(const char *path, int fd)
{
    char err[1024], reason[1024] = "";
    ilab_plugin *p = NULL;
    if (ilab_plugin_load(path, err, sizeof err, &p) != ILAB_OK)
        return json_pack("{s:s, s:s, s:s}", "path", path, "state", "rejected", "reason", err);

    write_all(fd, "L", 1);
    const ilab_manifest *m = ilab_plugin_manifest(p);
    ilab_config_entry_t *config = NULL;
    size_t n_config = 0;
    const char *state = "available";
    if (ilab_config_with_defaults(m, NULL, 0, &config, &n_config) != ILAB_OK) {
        state = "rejected";
        snprintf(reason, sizeof reason, "%s: out of memory building its configuration", path);
    } else {
        ilab_status st = ilab_plugin_api(p)->probe(ilab_host_services(), config, n_config, reason,
                                                   sizeof reason);
        reason[sizeof reason - 1] = '\0';
        if (st == ILAB_UNAVAILABLE) {
            state = "unavailable";
            if (!reason[0])
                snprintf(reason, sizeof reason, "(the plugin gave no reason)");
        } else if (st != ILAB_OK) {
            state = "rejected";
            snprintf(reason, sizeof reason, "%s: probe returned %s, not OK or UNAVAILABLE", path,
                     ilab_status_name(st));
        } else {
            reason[0] = '\0';
        }
    }
    ilab_config_entries_free(config, n_config);

    char abi[32];
    snprintf(abi, sizeof abi, "%u.%u", m->abi_major, m->abi_minor);
    json_t *row = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:o, s:s, s:o, s:s}", "name", m->name,
                            "version", m->version, "abi", abi, "path", path, "state", state,
                            "reason", reason, "capabilities", capabilities_json(m), "description",
                            m->description, "config", config_json(m), "manifest",
                            ilab_plugin_entry_of(p)->manifest_yaml);
    ilab_plugin_unload(p);
    return row;
}

/* Default dispositions, so a crash in plugin code is a signal death the
 * parent can name, even under sanitizers that install their own handlers. */
static void default_fatal_signals(void)
{
    static const int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        signal(sigs[i], SIG_DFL);
}

static void write_all(int fd, const char *s, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, s, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        s += w;
        n -= (size_t)w;
    }
}

static void run_child(const char *path, int fd)
{
    default_fatal_signals();
    json_t *row = describe(path, fd);
    char *text = row ? json_dumps(row, JSON_COMPACT) : NULL;
    if (text)
        write_all(fd, text, strlen(text));
    free(text);
    json_decref(row);
    close(fd);
}

/* --- the parent: fork, wait with a deadline, interpret ---------------------- */

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

static int deadline_ms(void)
{
    const char *env = getenv("INFERLAB_PROBE_TIMEOUT");
    int s = env ? atoi(env) : 0;
    return s > 0 ? s * 1000 : DEFAULT_DEADLINE_MS;
}

static json_t *rejected_row(const char *path, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static json_t *rejected_row(const char *path, const char *fmt, ...)
{
    char reason[512];
    int n = snprintf(reason, sizeof reason, "%s: ", path);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason + n, sizeof reason - (size_t)n, fmt, ap);
    va_end(ap);
    return json_pack("{s:s, s:s, s:s}", "path", path, "state", "rejected", "reason", reason);
}

/* Runs describe(path) in a child; never fails to return a row. */
static json_t *probe_isolated(const char *path)
{
    int fds[2];
    if (pipe(fds))
        return rejected_row(path, "cannot create a pipe to probe it: %s", strerror(errno));
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return rejected_row(path, "cannot fork to probe it: %s", strerror(errno));
    }
    if (pid == 0) {
        close(fds[0]);
        run_child(path, fds[1]);
        _exit(0);
    }
    close(fds[1]);

    char *buf = NULL;
    size_t len = 0;
    int timed_out = 0;
    long end = now_ms() + deadline_ms();
    for (;;) {
        long left = end - now_ms();
        if (left <= 0) {
            timed_out = 1;
            break;
        }
        struct pollfd pfd = {.fd = fds[0], .events = POLLIN};
        int r = poll(&pfd, 1, (int)left);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            timed_out = r == 0;
            break;
        }
        char chunk[4096];
        ssize_t n = read(fds[0], chunk, sizeof chunk);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break; /* EOF: the child is done (or dead) */
        char *grown = realloc(buf, len + (size_t)n + 1);
        if (!grown)
            break;
        buf = grown;
        memcpy(buf + len, chunk, (size_t)n);
        len += (size_t)n;
        buf[len] = '\0';
    }
    close(fds[0]);
    if (timed_out)
        kill(pid, SIGKILL);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;

    /* A leading "L": the plugin loaded, so trouble came from its probe. */
    const char *stage = buf && buf[0] == 'L' ? "probing" : "loading";
    const char *result = buf ? buf + (buf[0] == 'L') : NULL;
    json_t *row = NULL;
    if (timed_out) {
        row = rejected_row(path, "no answer within %d s while %s (hung?); killed",
                           deadline_ms() / 1000, stage);
    } else if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        const char *abbrev = sigabbrev_np(sig);
        row = rejected_row(path, "crashed with signal %d (SIG%s) while %s", sig,
                           abbrev ? abbrev : "?", stage);
    } else if (WIFEXITED(status) && WEXITSTATUS(status) != 0) {
        row = rejected_row(path, "the probe process exited with status %d while %s",
                           WEXITSTATUS(status), stage);
    } else if (!result || !(row = json_loads(result, 0, NULL))) {
        row = rejected_row(path, "the probe process gave no result");
    }
    free(buf);
    return row;
}

/* --- arguments --------------------------------------------------------------- */

static void usage(FILE *out, int info)
{
    if (info)
        fprintf(out, "usage: inferlab info NAME [--plugin-dir DIR]... [--json]\n"
                     "Show one plugin's manifest, probe result and file.\n");
    else
        fprintf(out, "usage: inferlab list [--plugin-dir DIR]... [--json]\n"
                     "List every plugin found: name, version, ABI, capabilities, state\n"
                     "(available | unavailable: reason | rejected: reason).\n");
    fprintf(out, "\nSearch order: --plugin-dir (repeatable), INFERLAB_PLUGIN_PATH (colon-separated),\n"
                 "then the build tree's plugins folder (or, installed, <prefix>/lib/inferlab/plugins)\n"
                 "when no --plugin-dir is given. Each plugin is loaded and probed in a child process\n"
                 "(deadline INFERLAB_PROBE_TIMEOUT seconds, default 5), so a crashing plugin is listed\n"
                 "as rejected. Exit: 0 listed (rejected plugins included), 1 %s, 2 usage.\n",
            info ? "no such plugin" : "no plugin found");
}

static int parse_args(int argc, char **argv, int info, list_options *o)
{
    static const struct option longopts[] = {{"plugin-dir", required_argument, NULL, 'd'},
                                             {"json", no_argument, NULL, 'j'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    memset(o, 0, sizeof *o);
    o->plugin_dirs = calloc((size_t)argc + 1, sizeof *o->plugin_dirs);
    if (!o->plugin_dirs)
        return 1;
    optind = 1;
    opterr = 0;
    for (int c; (c = getopt_long(argc, argv, "h", longopts, NULL)) != -1;) {
        switch (c) {
        case 'd': {
            struct stat st;
            errno = 0;
            if (stat(optarg, &st) || !S_ISDIR(st.st_mode)) {
                fprintf(stderr, "inferlab %s: --plugin-dir %s: %s\n", argv[0], optarg,
                        errno ? strerror(errno) : "not a directory");
                return 2;
            }
            o->plugin_dirs[o->n_dirs++] = optarg;
            break;
        }
        case 'j': o->json = 1; break;
        case 'h': usage(stdout, info); return -1;
        default:
            fprintf(stderr, "inferlab %s: unknown or incomplete option '%s'\n", argv[0],
                    argv[optind - 1]);
            usage(stderr, info);
            return 2;
        }
    }
    if (info) {
        if (optind != argc - 1) {
            fprintf(stderr, "inferlab info: expected one plugin NAME\n");
            usage(stderr, info);
            return 2;
        }
        o->name = argv[optind];
    } else if (optind != argc) {
        fprintf(stderr, "inferlab list: unexpected argument '%s'\n", argv[optind]);
        usage(stderr, info);
        return 2;
    }
    return 0;
}

/* Every discovered plugin, probed; NULL on failure (message printed). */
static json_t *probe_all(const list_options *o, const char *cmd)
{
    ilab_plugin_paths files = {0};
    if (ilab_registry_discover(o->plugin_dirs, o->n_dirs, &files)) {
        fprintf(stderr, "inferlab %s: out of memory while discovering plugins\n", cmd);
        return NULL;
    }
    json_t *rows = json_array();
    for (size_t i = 0; i < files.n; i++)
        json_array_append_new(rows, probe_isolated(files.paths[i]));
    ilab_plugin_paths_free(&files);
    return rows;
}

static void print_searched(const list_options *o, FILE *out)
{
    ilab_plugin_paths dirs = {0};
    fprintf(out, "searched:");
    if (ilab_registry_dirs(o->plugin_dirs, o->n_dirs, &dirs) == 0)
        for (size_t i = 0; i < dirs.n; i++)
            fprintf(out, " %s", dirs.paths[i]);
    fprintf(out, "%s\n", dirs.n ? "" : " (no directory)");
    ilab_plugin_paths_free(&dirs);
}

static const char *str_of(const json_t *row, const char *key)
{
    const char *s = json_string_value(json_object_get(row, key));
    return s ? s : "";
}

/* "tok logits=full/20 sampling=host fork truncate batch=64 ctx=1024 threads=none" */
static void capabilities_short(const json_t *caps, char *buf, size_t cap)
{
    buf[0] = '\0';
    if (!caps)
        return;
    json_t *cache = json_object_get(caps, "cache");
    json_int_t ctx = json_integer_value(json_object_get(caps, "max_context"));
    char ctx_text[32];
    snprintf(ctx_text, sizeof ctx_text, ctx ? "%lld" : "model", (long long)ctx);
    snprintf(buf, cap, "%slogits=%s/%lld sampling=%s%s%s batch=%lld%s%s ctx=%s threads=%s",
             json_is_true(json_object_get(caps, "tokenizer")) ? "tok " : "",
             str_of(caps, "logits"), (long long)json_integer_value(json_object_get(caps, "topk_max")),
             str_of(caps, "sampling"), json_is_true(json_object_get(cache, "fork")) ? " fork" : "",
             json_is_true(json_object_get(cache, "truncate")) ? " truncate" : "",
             (long long)json_integer_value(json_object_get(json_object_get(caps, "batching"), "max_batch")),
             json_is_true(json_object_get(caps, "streaming")) ? " stream" : "",
             json_is_true(json_object_get(caps, "cancel")) ? " cancel" : "", ctx_text,
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
    fprintf(out, "%s%s%s\n", state, *reason ? ": " : "", reason);
}

static void print_table(const json_t *rows, FILE *out)
{
    size_t i;
    json_t *row;
    int width = (int)strlen("CAPABILITIES"), name_width = (int)strlen("NAME");
    json_array_foreach(rows, i, row) {
        char caps[256], name[128];
        capabilities_short(json_object_get(row, "capabilities"), caps, sizeof caps);
        if ((int)strlen(caps) > width)
            width = (int)strlen(caps);
        int n = (int)strlen(display_name(row, name, sizeof name));
        if (n > name_width)
            name_width = n;
    }
    fprintf(out, "%-*s %-9s %-4s %-*s %s\n", name_width, "NAME", "VERSION", "ABI", width,
            "CAPABILITIES", "STATE");
    json_array_foreach(rows, i, row) {
        char caps[256], name[128];
        capabilities_short(json_object_get(row, "capabilities"), caps, sizeof caps);
        fprintf(out, "%-*s %-9s %-4s %-*s ", name_width, display_name(row, name, sizeof name),
                *str_of(row, "version") ? str_of(row, "version") : "-",
                *str_of(row, "abi") ? str_of(row, "abi") : "-", width, *caps ? caps : "-");
        print_state(row, out);
    }
}

/* JSON rows keep the documented keys only: name, version, abi, path, state,
 * reason, capabilities (null when rejected). */
static json_t *list_json(const json_t *rows)
{
    json_t *plugins = json_array();
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) {
        json_t *caps = json_object_get(row, "capabilities");
        json_t *name = json_object_get(row, "name"), *version = json_object_get(row, "version"),
               *abi = json_object_get(row, "abi");
        json_array_append_new(plugins,
            json_pack("{s:O, s:O, s:O, s:s, s:s, s:s, s:O}", "name", name ? name : json_null(),
                      "version", version ? version : json_null(), "abi", abi ? abi : json_null(),
                      "path", str_of(row, "path"), "state", str_of(row, "state"), "reason",
                      str_of(row, "reason"), "capabilities", caps ? caps : json_null()));
    }
    return json_pack("{s:o}", "plugins", plugins);
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
    list_options o;
    int rc = parse_args(argc, argv, 0, &o);
    if (rc) {
        free(o.plugin_dirs);
        return rc < 0 ? 0 : rc;
    }
    json_t *rows = probe_all(&o, "list");
    if (!rows) {
        free(o.plugin_dirs);
        return 1;
    }
    if (json_array_size(rows) == 0) {
        fprintf(stderr, "inferlab list: no plugin found; ");
        print_searched(&o, stderr);
        rc = 1;
    }
    if (o.json)
        print_json(list_json(rows));
    else if (json_array_size(rows))
        print_table(rows, stdout);
    json_decref(rows);
    free(o.plugin_dirs);
    return rc;
}

static void print_info(const json_t *row, FILE *out)
{
    fprintf(out, "name:     %s\nversion:  %s\nabi:      %s\nfile:     %s\nstate:    ",
            str_of(row, "name"), str_of(row, "version"), str_of(row, "abi"), str_of(row, "path"));
    print_state(row, out);
    fprintf(out, "manifest:\n");
    const char *manifest = str_of(row, "manifest");
    for (const char *line = manifest; *line;) {
        const char *nl = strchr(line, '\n');
        size_t n = nl ? (size_t)(nl - line) : strlen(line);
        fprintf(out, "  %.*s\n", (int)n, line);
        line += n + (nl ? 1 : 0);
    }
}

int ilab_cmd_info(int argc, char **argv)
{
    list_options o;
    int rc = parse_args(argc, argv, 1, &o);
    if (rc) {
        free(o.plugin_dirs);
        return rc < 0 ? 0 : rc;
    }
    json_t *rows = probe_all(&o, "info");
    if (!rows) {
        free(o.plugin_dirs);
        return 1;
    }
    size_t i;
    json_t *row, *found = NULL;
    json_array_foreach(rows, i, row) {
        if (!strcmp(str_of(row, "name"), o.name)) {
            found = row;
            break;
        }
    }
    if (found) {
        if (o.json)
            print_json(json_incref(found));
        else
            print_info(found, stdout);
        rc = 0;
    } else {
        fprintf(stderr, "inferlab info: no plugin named '%s'; ", o.name);
        print_searched(&o, stderr);
        json_array_foreach(rows, i, row) {
            if (!strcmp(str_of(row, "state"), "rejected"))
                fprintf(stderr, "  rejected: %s\n", str_of(row, "reason"));
        }
        rc = 1;
    }
    json_decref(rows);
    free(o.plugin_dirs);
    return rc;
}
