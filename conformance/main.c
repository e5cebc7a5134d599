/* inferlab-conformance: the command line.
 *
 *   inferlab-conformance [PLUGIN.so | --plugin-dir DIR]... [--format human|tap|junit|json]
 *       [--output FILE] [--require NAME]... [--include REGEX] [--exclude REGEX]
 *       [--timeout SECONDS] [--list] [--in-process] [--config FILE] [--set plugin.key=value]...
 *
 * Exit: 0 everything passed or was skipped; 1 any FAIL, CRASH, TIMEOUT or
 * ERROR; 2 usage error. See docs/conformance.md. */
#include <getopt.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "loader/registry.h"
#ifdef ILAB_CONF_HAVE_SETTINGS
#include "config/settings.h"
#endif

#define CONF_SEED 20240229ull

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
          "         [--format human|tap|junit|json] [--output FILE] [--require NAME]...\n"
          "         [--include REGEX] [--exclude REGEX] [--timeout SECONDS] [--list]\n"
          "         [--in-process] [--config FILE] [--set plugin.key=value]...\n"
          "Runs the backend contract (CONTRACT.md) clause by clause against each plugin,\n"
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

int main(int argc, char **argv)
{
    enum { OPT_PLUGIN_DIR = 256, OPT_FORMAT, OPT_OUTPUT, OPT_REQUIRE, OPT_INCLUDE, OPT_EXCLUDE,
           OPT_TIMEOUT, OPT_LIST, OPT_IN_PROCESS, OPT_CONFIG, OPT_SET, OPT_HELP };
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
        {"config", required_argument, NULL, OPT_CONFIG},
        {"set", required_argument, NULL, OPT_SET},
        {"help", no_argument, NULL, OPT_HELP},
        {NULL, 0, NULL, 0},
    };
    str_list dirs = {0}, files = {0}, require = {0}, sets = {0};
    const char *format = "human", *output = NULL, *include = NULL, *exclude = NULL,
               *config = NULL;
    int timeout = 20;
    bool list = false, in_process = false;
    char extra[2048] = "";
    int rc = 2;

    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_PLUGIN_DIR: push(&dirs, optarg); break;
        case OPT_FORMAT: format = optarg; break;
        case OPT_OUTPUT: output = optarg; break;
        case OPT_REQUIRE: push(&require, optarg); append_arg(extra, sizeof extra, "--require", optarg); break;
        case OPT_INCLUDE: include = optarg; break;
        case OPT_EXCLUDE: exclude = optarg; break;
        case OPT_TIMEOUT: {
            char *end;
            long v = strtol(optarg, &end, 10);
            if (*end || v <= 0 || v > 3600) {
                rc = usage_error("--timeout wants whole seconds in 1..3600, not '%s'", optarg);
                goto out_lists;
            }
            timeout = (int)v;
            append_arg(extra, sizeof extra, "--timeout", optarg);
            break;
        }
        case OPT_LIST: list = true; break;
        case OPT_IN_PROCESS: in_process = true; break;
        case OPT_CONFIG: config = optarg; append_arg(extra, sizeof extra, "--config", optarg); break;
        case OPT_SET: push(&sets, optarg); append_arg(extra, sizeof extra, "--set", optarg); break;
        case OPT_HELP: usage(stdout); rc = 0; goto out_lists;
        default:
            rc = usage_error("unknown or incomplete option '%s'", argv[optind - 1]);
            goto out_lists;
        }
    }
    for (int i = optind; i < argc; i++)
        push(&files, argv[i]);

    conf_format fmt;
    if (strcmp(format, "human") == 0) fmt = CONF_HUMAN;
    else if (strcmp(format, "tap") == 0) fmt = CONF_TAP;
    else if (strcmp(format, "junit") == 0) fmt = CONF_JUNIT;
    else if (strcmp(format, "json") == 0) fmt = CONF_JSON;
    else {
        rc = usage_error("--format must be human, tap, junit or json, not '%s'", format);
        goto out_lists;
    }

    /* Select tests. */
    regex_t inc, exc;
    if (include && regcomp(&inc, include, REG_EXTENDED | REG_NOSUB) != 0) {
        rc = usage_error("--include: invalid regular expression '%s'", include);
        goto out_lists;
    }
    if (exclude && regcomp(&exc, exclude, REG_EXTENDED | REG_NOSUB) != 0) {
        if (include)
            regfree(&inc);
        rc = usage_error("--exclude: invalid regular expression '%s'", exclude);
        goto out_lists;
    }
    size_t n_all;
    const conf_test *all = conf_tests(&n_all);
    const conf_test **sel = calloc(n_all, sizeof *sel);
    size_t n_sel = 0;
    for (size_t i = 0; i < n_all; i++) {
        if (include && regexec(&inc, all[i].id, 0, NULL, 0) != 0)
            continue;
        if (exclude && regexec(&exc, all[i].id, 0, NULL, 0) == 0)
            continue;
        sel[n_sel++] = &all[i];
    }
    if (include)
        regfree(&inc);
    if (exclude)
        regfree(&exc);
    if (list) {
        for (size_t i = 0; i < n_sel; i++)
            printf("%s\n", sel[i]->id);
        rc = 0;
        goto out_sel;
    }
    if (n_sel == 0) {
        rc = usage_error("no test matches --include/--exclude%s", "");
        goto out_sel;
    }

    /* Settings (--config, --set) for the plugins' configuration. */
    conf_run run;
    memset(&run, 0, sizeof run);
#ifdef ILAB_CONF_HAVE_SETTINGS
    ilab_settings settings;
    ilab_settings_init(&settings);
    char err[1024];
    if (config && ilab_settings_load_file(&settings, config, err, sizeof err) != ILAB_OK) {
        fprintf(stderr, "inferlab-conformance: %s\n", err);
        goto out_settings;
    }
    for (size_t i = 0; i < sets.n; i++)
        if (ilab_settings_set(&settings, sets.v[i], err, sizeof err) != ILAB_OK) {
            fprintf(stderr, "inferlab-conformance: --set %s: %s\n", sets.v[i], err);
            goto out_settings;
        }
    run.opt.settings = &settings;
    if (!dirs.n && !files.n)
        for (size_t i = 0; i < settings.n_plugin_dirs; i++)
            push(&dirs, settings.plugin_dirs[i]);
#else
    if (config || sets.n) {
        fprintf(stderr, "inferlab-conformance: --config/--set need the host settings library, "
                        "which this build does not have\n");
        rc = 2;
        goto out_sel;
    }
#endif

    /* Plugins: files first, then discovered directories. */
    str_list paths = {0};
    for (size_t i = 0; i < files.n; i++)
        push(&paths, files.v[i]);
    if (dirs.n || !files.n) {
        ilab_plugin_paths found = {0};
        ilab_registry_discover((const char *const *)dirs.v, dirs.n, &found);
        for (size_t i = 0; i < found.n; i++)
            push(&paths, found.paths[i]);
        ilab_plugin_paths_free(&found);
    }
    if (paths.n == 0) {
        fprintf(stderr, "inferlab-conformance: no plugins found%s\n",
                dirs.n ? " in the given --plugin-dir" : " (give PLUGIN.so or --plugin-dir DIR)");
        rc = 2;
        goto out_paths;
    }

    run.tests = sel;
    run.n_tests = n_sel;
    run.opt.timeout_seconds = timeout;
    run.opt.suite_seconds = timeout * 15 < 120 ? 120 : timeout * 15;
    run.opt.seed = CONF_SEED;
    run.require = require.v;
    run.n_require = require.n;
    run.in_process = in_process;
    run.argv0 = argv[0];
    run.rerun_extra = extra;
    run.n_plugins = paths.n;
    run.plugins = calloc(paths.n, sizeof *run.plugins);
    for (size_t i = 0; i < paths.n; i++) {
        conf_plugin_report *p = &run.plugins[i];
        p->path = paths.v[i];
        const char *base = strrchr(p->path, '/');
        base = base ? base + 1 : p->path;
        snprintf(p->name, sizeof p->name, "%.*s", (int)strcspn(base, "."), base);
        p->out = calloc(n_sel, sizeof *p->out);
    }

    conf_supervise(&run);

    /* A --require that named no loaded plugin is a usage mistake worth failing. */
    bool missing_required = false;
    for (size_t r = 0; r < require.n; r++) {
        bool found = false;
        for (size_t i = 0; i < run.n_plugins; i++)
            found |= strcmp(run.plugins[i].name, require.v[r]) == 0;
        if (!found) {
            fprintf(stderr, "inferlab-conformance: --require %s: no such plugin was tested\n",
                    require.v[r]);
            missing_required = true;
        }
    }

    FILE *out = stdout;
    if (output && !(out = fopen(output, "w"))) {
        perror(output);
        rc = 2;
        goto out_run;
    }
    int wrc = fmt == CONF_HUMAN ? conf_write_human(&run, out)
              : fmt == CONF_TAP ? conf_write_tap(&run, out)
              : fmt == CONF_JUNIT ? conf_write_junit(&run, out)
                                  : conf_write_json(&run, out);
    if (out != stdout)
        fclose(out);
    else
        fflush(out);
    conf_counts counts;
    conf_count_run(&run, &counts);
    rc = counts.by_result[CONF_FAIL] + counts.by_result[CONF_CRASH] +
                 counts.by_result[CONF_TIMEOUT] + counts.by_result[CONF_ERROR] || missing_required
             ? 1 : 0;
    if (wrc != 0) {
        fprintf(stderr, "inferlab-conformance: could not write the report\n");
        rc = 1;
    }
    if (output && fmt != CONF_HUMAN)
        conf_write_human(&run, stderr);

out_run:
    for (size_t i = 0; i < run.n_plugins; i++)
        free(run.plugins[i].out);
    free(run.plugins);
out_paths:
    free_list(&paths);
#ifdef ILAB_CONF_HAVE_SETTINGS
out_settings:
    ilab_settings_free(&settings);
#endif
out_sel:
    free(sel);
out_lists:
    free_list(&dirs);
    free_list(&files);
    free_list(&require);
    free_list(&sets);
    return rc;
}
