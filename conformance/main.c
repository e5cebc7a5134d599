/* inferlab-conformance: the command line.
 *
 *   inferlab-conformance [PLUGIN.so | --plugin-dir DIR]... [--format human|tap|junit|json|html]
 *       [--output FILE] [--require NAME]... [--include REGEX] [--exclude REGEX]
 *       [--timeout SECONDS] [--list] [--in-process] [--isolated] [--config FILE] [--set plugin.key=value]...
 *       [--seed N] [--deep] [--replay PROGRAM]
 *
 * Exit: 0 everything passed or was skipped; 1 any FAIL, CRASH, TIMEOUT or
 * ERROR; 2 usage error. See docs/conformance.md. */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdint.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>
#include <unistd.h>

#include "isolation/worker.h"
#include "build_info.h"
#include "harness.h"
#include "loader/registry.h"
#ifdef ILAB_CONF_HAVE_SETTINGS
#include "config/settings.h"
#endif

#define CONF_SEED 20240229ull
/* Time budget of each random test (cache programs, sweeps) in a default
 * run; --deep multiplies it and the iteration counts by 10. */
#define CONF_RANDOM_SECONDS 1.5

#if defined(__SANITIZE_ADDRESS__)
/* Freed memory held in ASan's quarantine would read as growth in the RSS
 * clauses (ABI-7, CCH-6); the harness is the executable, so it sets this. */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "quarantine_size_mb=0";
}
#endif

static void usage(FILE *f)
{
    fputs("usage: inferlab-conformance [PLUGIN.so | --plugin-dir DIR]...\n"
          "         [--format human|tap|junit|json|html] [--output FILE] [--require NAME]...\n"
          "         [--include REGEX] [--exclude REGEX] [--timeout SECONDS] [--list]\n"
          "         [--in-process] [--isolated] [--config FILE] [--set plugin.key=value]...\n"
          "         [--seed N] [--deep] [--replay PROGRAM] [--version]\n"
          "Runs the backend contract (docs/contract.md) clause by clause against each plugin,\n"
          "each in its own worker process. Exit 0 all passed or skipped, 1 any\n"
          "FAIL/CRASH/TIMEOUT/ERROR, 2 usage error.\n", f);
}

static int usage_error(const char *fmt, const char *arg)
{
    fputs("inferlab-conformance: ", stderr);
    fprintf(stderr, fmt, arg);
    fputs("\n", stderr);
    usage(stderr);
    return 2;
}

typedef struct str_list {
    char **v;
    size_t n;
} str_list;

static void push(str_list *l, const char *s)
{
    l->v = realloc(l->v, (l->n + 1) * sizeof *l->v);
    l->v[l->n++] = strdup(s);
}

static void free_list(str_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
}

static void append_arg(char *buf, size_t cap, const char *flag, const char *value)
{
    size_t l = strlen(buf);
    snprintf(buf + l, cap - l, "%s%s '%s'", l ? " " : "", flag, value);
}

/* A flag that takes no value (an empty '' after it would be a plugin path). */
static void append_flag(char *buf, size_t cap, const char *flag)
{
    size_t l = strlen(buf);
    snprintf(buf + l, cap - l, "%s%s", l ? " " : "", flag);
}

/* The command line, parsed. */
typedef struct conf_cli {
    str_list dirs, files, require, sets;
    const char *format, *output, *include, *exclude, *config, *replay;
    int timeout;
    uint64_t seed;
    bool list, in_process, isolated, deep;
    char extra[2048]; /* options a rerun line repeats */
} conf_cli;

static bool parse_whole(const char *text, unsigned long long max, unsigned long long *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno || end == text || *end || text[0] == '-' || v > max)
        return false;
    *out = v;
    return true;
}

/* Fill `cli` from argv. Returns -1 to go on, else the exit code (0 for
 * --help, 2 for a usage error, already reported). */
static int parse_options(int argc, char **argv, conf_cli *cli)
{
    enum { OPT_PLUGIN_DIR = 256, OPT_FORMAT, OPT_OUTPUT, OPT_REQUIRE, OPT_INCLUDE, OPT_EXCLUDE,
           OPT_TIMEOUT, OPT_LIST, OPT_IN_PROCESS, OPT_ISOLATED, OPT_CONFIG, OPT_SET, OPT_SEED, OPT_DEEP,
           OPT_REPLAY, OPT_HELP, OPT_VERSION };
    static const struct option longopts[] = {
        {"plugin-dir", required_argument, NULL, OPT_PLUGIN_DIR},
        {"format", required_argument, NULL, OPT_FORMAT},
        {"output", required_argument, NULL, OPT_OUTPUT},
        {"require", required_argument, NULL, OPT_REQUIRE},
        {"include", required_argument, NULL, OPT_INCLUDE},
        {"exclude", required_argument, NULL, OPT_EXCLUDE},
        {"timeout", required_argument, NULL, OPT_TIMEOUT},
        {"list", no_argument, NULL, OPT_LIST},
        {"in-process", no_argument, NULL, OPT_IN_PROCESS},
        {"isolated", no_argument, NULL, OPT_ISOLATED},
        {"config", required_argument, NULL, OPT_CONFIG},
        {"set", required_argument, NULL, OPT_SET},
        {"seed", required_argument, NULL, OPT_SEED},
        {"deep", no_argument, NULL, OPT_DEEP},
        {"replay", required_argument, NULL, OPT_REPLAY},
        {"help", no_argument, NULL, OPT_HELP},
        {"version", no_argument, NULL, OPT_VERSION},
        {NULL, 0, NULL, 0},
    };
    memset(cli, 0, sizeof *cli);
    cli->format = "human";
    cli->timeout = 20;
    cli->seed = CONF_SEED;
    opterr = 0;
    unsigned long long v;
    for (int c; (c = getopt_long(argc, argv, "", longopts, NULL)) != -1;) {
        switch (c) {
        case OPT_PLUGIN_DIR: push(&cli->dirs, optarg); break;
        case OPT_FORMAT: cli->format = optarg; break;
        case OPT_OUTPUT: cli->output = optarg; break;
        case OPT_REQUIRE:
            push(&cli->require, optarg);
            append_arg(cli->extra, sizeof cli->extra, "--require", optarg);
            break;
        case OPT_INCLUDE: cli->include = optarg; break;
        case OPT_EXCLUDE: cli->exclude = optarg; break;
        case OPT_TIMEOUT:
            if (!parse_whole(optarg, 3600, &v) || v == 0)
                return usage_error("--timeout wants whole seconds in 1..3600, not '%s'", optarg);
            cli->timeout = (int)v;
            append_arg(cli->extra, sizeof cli->extra, "--timeout", optarg);
            break;
        case OPT_LIST: cli->list = true; break;
        case OPT_IN_PROCESS: cli->in_process = true; break;
        case OPT_ISOLATED:
            cli->isolated = true;
            append_flag(cli->extra, sizeof cli->extra, "--isolated");
            break;
        case OPT_CONFIG:
            cli->config = optarg;
            append_arg(cli->extra, sizeof cli->extra, "--config", optarg);
            break;
        case OPT_SET:
            push(&cli->sets, optarg);
            append_arg(cli->extra, sizeof cli->extra, "--set", optarg);
            break;
        case OPT_SEED:
            if (!parse_whole(optarg, UINT64_MAX, &v))
                return usage_error("--seed wants a non-negative integer, not '%s'", optarg);
            cli->seed = v;
            append_arg(cli->extra, sizeof cli->extra, "--seed", optarg);
            break;
        case OPT_DEEP:
            cli->deep = true;
            append_flag(cli->extra, sizeof cli->extra, "--deep");
            break;
        case OPT_REPLAY: cli->replay = optarg; break;
        case OPT_HELP: usage(stdout); return 0;
        case OPT_VERSION: ilab_print_version(stdout, "inferlab-conformance"); return 0;
        default: return usage_error("unknown or incomplete option '%s'", argv[optind - 1]);
        }
    }
    for (int i = optind; i < argc; i++)
        push(&cli->files, argv[i]);
    /* A plugin that is not there is the caller's mistake, not 42 failures. */
    for (size_t i = 0; i < cli->files.n; i++) {
        struct stat st;
        int e = stat(cli->files.v[i], &st) != 0 ? errno : 0;
        if (e || !S_ISREG(st.st_mode)) {
            char why[512];
            snprintf(why, sizeof why, "plugin '%s': %s", cli->files.v[i],
                     e ? strerror(e) : "not a regular file");
            return usage_error("%s", why);
        }
    }
    return -1;
}

static void free_cli(conf_cli *cli)
{
    free_list(&cli->dirs);
    free_list(&cli->files);
    free_list(&cli->require);
    free_list(&cli->sets);
}

/* --format's name -> the report format; false for an unknown name. */
static bool parse_format(const char *name, conf_format *out)
{
    static const struct {
        const char *name;
        conf_format format;
    } formats[] = {{"human", CONF_HUMAN}, {"tap", CONF_TAP}, {"junit", CONF_JUNIT},
                   {"json", CONF_JSON}, {"html", CONF_HTML}};
    for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++)
        if (strcmp(name, formats[i].name) == 0) {
            *out = formats[i].format;
            return true;
        }
    return false;
}

/* A test id matches a selection expression when some match of it neither
 * begins nor ends inside a number: `CCH-1` selects cache.CCH-1.* and not
 * cache.CCH-10.*, `ABI-[1-6]` not a future ABI-10. */
static bool id_matches(const regex_t *re, const char *id)
{
    regmatch_t m;
    for (size_t at = 0; id[at]; at++) {
        if (regexec(re, id + at, 1, &m, at ? REG_NOTBOL : 0) != 0)
            return false;
        size_t so = at + (size_t)m.rm_so, eo = at + (size_t)m.rm_eo;
        bool cut_start = so > 0 && isdigit((unsigned char)id[so - 1]) && isdigit((unsigned char)id[so]);
        bool cut_end = eo > so && isdigit((unsigned char)id[eo - 1]) && isdigit((unsigned char)id[eo]);
        if (!cut_start && !cut_end)
            return true;
        at = so;
    }
    return false;
}

/* The tests --include and --exclude select, in table order, into a
 * malloc'd `*sel`. Returns -1 when there are some to run, else the exit
 * code (0 after --list, 2 for a bad expression or an empty selection). */
static int select_tests(const conf_cli *cli, const conf_test ***sel, size_t *n_sel)
{
    *sel = NULL;
    *n_sel = 0;
    regex_t inc, exc;
    if (cli->include && regcomp(&inc, cli->include, REG_EXTENDED) != 0)
        return usage_error("--include: invalid regular expression '%s'", cli->include);
    if (cli->exclude && regcomp(&exc, cli->exclude, REG_EXTENDED) != 0) {
        if (cli->include)
            regfree(&inc);
        return usage_error("--exclude: invalid regular expression '%s'", cli->exclude);
    }
    size_t n_all;
    const conf_test *all = conf_tests(&n_all);
    *sel = calloc(n_all, sizeof **sel);
    for (size_t i = 0; *sel && i < n_all; i++) {
        if (cli->include && !id_matches(&inc, all[i].id))
            continue;
        if (cli->exclude && id_matches(&exc, all[i].id))
            continue;
        (*sel)[(*n_sel)++] = &all[i];
    }
    if (cli->include)
        regfree(&inc);
    if (cli->exclude)
        regfree(&exc);
    if (!*sel) {
        fprintf(stderr, "inferlab-conformance: out of memory selecting tests\n");
        return 2;
    }
    if (cli->list) {
        for (size_t i = 0; i < *n_sel; i++)
            printf("%s\n", (*sel)[i]->id);
        return 0;
    }
    if (*n_sel == 0)
        return usage_error("no test matches --include/--exclude%s", "");
    return -1;
}

#ifdef ILAB_CONF_HAVE_SETTINGS
/* --config and --set into `settings` (for the plugins' configuration); its
 * plugin folders become the search path when none was given. False (the
 * message printed) on a bad file or assignment. */
static bool load_settings(conf_cli *cli, ilab_settings *settings)
{
    char err[1024];
    if (cli->config && ilab_settings_load_file(settings, cli->config, err, sizeof err) != ILAB_OK) {
        fprintf(stderr, "inferlab-conformance: %s\n", err);
        return false;
    }
    for (size_t i = 0; i < cli->sets.n; i++)
        if (ilab_settings_set(settings, cli->sets.v[i], err, sizeof err) != ILAB_OK) {
            fprintf(stderr, "inferlab-conformance: --set %s: %s\n", cli->sets.v[i], err);
            return false;
        }
    if (!cli->dirs.n && !cli->files.n)
        for (size_t i = 0; i < settings->n_plugin_dirs; i++)
            push(&cli->dirs, settings->plugin_dirs[i]);
    return true;
}
#endif

/* A plugin named on the command line is a file (parse_options made sure it
 * is one), relative to the current folder whether or not its name has a
 * slash: dlopen() would search the library path for a bare "ok.so" and
 * every test would fail on it. A relative name becomes the absolute one
 * (leading "./" dropped, symbolic links kept), so the report is the one the
 * absolute path gives. False (the message printed) when the current folder
 * cannot be told. */
static bool push_plugin_file(str_list *paths, const char *arg)
{
    if (arg[0] == '/') {
        push(paths, arg);
        return true;
    }
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd)) {
        fprintf(stderr, "inferlab-conformance: plugin file '%s': cannot tell the current folder: "
                        "%s\n", arg, strerror(errno));
        return false;
    }
    const char *rel = arg;
    while (rel[0] == '.' && rel[1] == '/')
        for (rel += 2; *rel == '/'; rel++)
            ;
    size_t n = strlen(cwd) + strlen(rel) + 2;
    char *abs = malloc(n);
    if (!abs) {
        fprintf(stderr, "inferlab-conformance: out of memory\n");
        return false;
    }
    snprintf(abs, n, "%s/%s", strcmp(cwd, "/") ? cwd : "", rel);
    push(paths, abs);
    free(abs);
    return true;
}

/* The plugins to test into `paths`: the files given, then what the given
 * folders hold (with neither, the host's own search path). False (the
 * message printed) when a folder is unusable or nothing was found. */
static bool collect_plugins(const conf_cli *cli, str_list *paths)
{
    for (size_t i = 0; i < cli->files.n; i++)
        if (!push_plugin_file(paths, cli->files.v[i]))
            return false;
    if (cli->dirs.n || !cli->files.n) {
        ilab_plugin_paths found = {0};
        char err[1024];
        if (ilab_registry_discover((const char *const *)cli->dirs.v, cli->dirs.n,
                                   cli->dirs.n == 0, err, sizeof err, &found) != ILAB_OK) {
            fprintf(stderr, "inferlab-conformance: %s\n", err);
            return false;
        }
        for (size_t i = 0; i < found.n; i++)
            push(paths, found.paths[i]);
        ilab_plugin_paths_free(&found);
    }
    if (paths->n == 0) {
        fprintf(stderr, "inferlab-conformance: no plugins found%s\n",
                cli->dirs.n ? " in the given --plugin-dir" : " (give PLUGIN.so or --plugin-dir DIR)");
        return false;
    }
    return true;
}

/* The run's options and one report per plugin (named after its file);
 * false when out of memory. `run->opt.settings` is set by the caller. */
static bool prepare_run(conf_run *run, const conf_cli *cli, const char *argv0,
                        const conf_test **sel, size_t n_sel, const str_list *paths)
{
    run->tests = sel;
    run->n_tests = n_sel;
    run->opt.timeout_seconds = cli->timeout;
    run->opt.suite_seconds = cli->timeout * 15 < 120 ? 120 : cli->timeout * 15;
    run->opt.seed = cli->seed;
    run->opt.deep = cli->deep;
    run->opt.isolated = cli->isolated;
    run->opt.replay = cli->replay;
    run->opt.random_seconds = CONF_RANDOM_SECONDS;
    run->require = cli->require.v;
    run->n_require = cli->require.n;
    run->in_process = cli->in_process;
    run->argv0 = argv0;
    run->rerun_extra = cli->extra;
    run->plugins = calloc(paths->n, sizeof *run->plugins);
    if (!run->plugins)
        return false;
    run->n_plugins = paths->n;
    for (size_t i = 0; i < paths->n; i++) {
        conf_plugin_report *p = &run->plugins[i];
        p->path = paths->v[i];
        const char *base = strrchr(p->path, '/');
        base = base ? base + 1 : p->path;
        snprintf(p->name, sizeof p->name, "%.*s", (int)strcspn(base, "."), base);
        p->out = calloc(n_sel, sizeof *p->out);
        if (!p->out)
            return false;
    }
    return true;
}

/* A --require that named no tested plugin is a usage mistake worth failing. */
static bool required_missing(const conf_cli *cli, const conf_run *run)
{
    bool missing = false;
    for (size_t r = 0; r < cli->require.n; r++) {
        bool found = false;
        for (size_t i = 0; i < run->n_plugins; i++)
            found |= strcmp(run->plugins[i].name, cli->require.v[r]) == 0;
        if (!found) {
            fprintf(stderr, "inferlab-conformance: --require %s: no such plugin was tested\n",
                    cli->require.v[r]);
            missing = true;
        }
    }
    return missing;
}

/* Writes the report (to --output, else stdout; a machine format written to
 * a file is summed up on stderr too) and returns the exit code: 1 when a
 * test failed, crashed, timed out or erred, a required plugin is missing or
 * the report could not be written; 2 when --output cannot be opened. */
static int report(const conf_run *run, conf_format fmt, const char *output, bool missing_required)
{
    FILE *out = stdout;
    if (output && !(out = fopen(output, "w"))) {
        perror(output);
        return 2;
    }
    int wrc = fmt == CONF_HUMAN ? conf_write_human(run, out)
              : fmt == CONF_TAP ? conf_write_tap(run, out)
              : fmt == CONF_JUNIT ? conf_write_junit(run, out)
              : fmt == CONF_HTML  ? conf_write_html(run, out)
                                  : conf_write_json(run, out);
    if (out != stdout)
        fclose(out);
    else
        fflush(out);
    conf_counts counts;
    conf_count_run(run, &counts);
    int rc = counts.by_result[CONF_FAIL] + counts.by_result[CONF_CRASH] +
                     counts.by_result[CONF_TIMEOUT] + counts.by_result[CONF_ERROR] ||
                     missing_required
                 ? 1 : 0;
    if (wrc != 0) {
        fprintf(stderr, "inferlab-conformance: could not write the report\n");
        rc = 1;
    }
    if (output && fmt != CONF_HUMAN)
        conf_write_human(run, stderr);
    return rc;
}

int main(int argc, char **argv)
{
    /* --isolated: the backend workers are this program, re-executed. */
    if (ilab_worker_requested(argc, argv))
        return ilab_worker_main(argc, argv);
    conf_cli cli;
    int rc = parse_options(argc, argv, &cli);
    if (rc >= 0) {
        free_cli(&cli);
        return rc;
    }
    conf_format fmt;
    const conf_test **sel = NULL;
    size_t n_sel = 0;
    str_list paths = {0};
    conf_run run;
    memset(&run, 0, sizeof run);
#ifdef ILAB_CONF_HAVE_SETTINGS
    ilab_settings settings;
    ilab_settings_init(&settings);
    run.opt.settings = &settings;
#endif
    rc = 2;
    if (!parse_format(cli.format, &fmt)) {
        rc = usage_error("--format must be human, tap, junit, json or html, not '%s'", cli.format);
        goto out;
    }
    if ((rc = select_tests(&cli, &sel, &n_sel)) >= 0)
        goto out;
    rc = 2;
#ifdef ILAB_CONF_HAVE_SETTINGS
    if (!load_settings(&cli, &settings))
        goto out;
#else
    if (cli.config || cli.sets.n) {
        fprintf(stderr, "inferlab-conformance: --config/--set need the host settings library, "
                        "which this build does not have\n");
        goto out;
    }
#endif
    if (!collect_plugins(&cli, &paths))
        goto out;
    if (!prepare_run(&run, &cli, argv[0], sel, n_sel, &paths)) {
        fprintf(stderr, "inferlab-conformance: out of memory for %zu plugin reports\n", paths.n);
        goto out;
    }
    conf_supervise(&run);
    rc = report(&run, fmt, cli.output, required_missing(&cli, &run));

out:
    for (size_t i = 0; i < run.n_plugins; i++)
        free(run.plugins[i].out);
    free(run.plugins);
    free_list(&paths);
#ifdef ILAB_CONF_HAVE_SETTINGS
    ilab_settings_free(&settings);
#endif
    free(sel);
    free_cli(&cli);
    return rc;
}
