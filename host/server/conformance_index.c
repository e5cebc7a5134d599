/* Reading back inferlab-conformance's JSON reports (conformance_index.h). */
#include "conformance_index.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* A report larger than this is not one (106 tests x a few plugins is ~100 KB). */
#define MAX_REPORT_BYTES (16L * 1024 * 1024)
/* The failures listed per plugin; the count says how many there were. */
#define MAX_FAILURES 50

static void problem(json_t *problems, const char *file, const char *why)
{
    json_array_append_new(problems, json_pack("{s:s, s:s}", "file", file, "error", why));
}

static const char *str_member(const json_t *o, const char *key)
{
    const char *v = json_string_value(json_object_get(o, key));
    return v ? v : "";
}

/* One plugin of a report -> its summary. */
static json_t *plugin_summary(const json_t *p, const char *file, time_t mtime,
                              const char *harness)
{
    static const char *const results[] = {"pass", "fail", "skip", "crash", "timeout", "error"};
    json_int_t counts[6] = {0};
    json_t *failures = json_array();
    json_int_t n_failures = 0;
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(p, "tests"), i, t) {
        const char *r = str_member(t, "result");
        for (size_t k = 0; k < 6; k++)
            if (!strcmp(r, results[k]))
                counts[k]++;
        if (!strcmp(r, "pass") || !strcmp(r, "skip"))
            continue;
        if (n_failures++ < MAX_FAILURES)
            json_array_append_new(failures, json_pack("{s:s, s:s, s:s}", "id",
                                                      str_member(t, "id"), "result", r,
                                                      "message", str_member(t, "message")));
    }
    return json_pack("{s:s, s:s, s:s, s:s, s:I, s:s, s:{s:I, s:I, s:I, s:I, s:I, s:I}, s:I, s:o}",
                     "name", str_member(p, "name"), "result", str_member(p, "result"),
                     "reason", str_member(p, "reason"), "report", file,
                     "report_time", (json_int_t)mtime, "harness", harness,
                     "counts", "pass", counts[0], "fail", counts[1], "skip", counts[2],
                     "crash", counts[3], "timeout", counts[4], "error", counts[5],
                     "failures_total", n_failures, "failures", failures);
}

/* Fold one report file into `by_sha`, newer reports winning. */
static void add_report(const char *dir, const char *name, json_t *by_sha, json_t *problems)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
        problem(problems, name, "not a regular file");
        return;
    }
    if (st.st_size > MAX_REPORT_BYTES) {
        problem(problems, name, "larger than 16 MiB: not a conformance report");
        return;
    }
    json_error_t jerr;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        char why[300];
        snprintf(why, sizeof why, "not JSON: line %d: %.200s", jerr.line, jerr.text);
        problem(problems, name, why);
        return;
    }
    json_t *plugins = json_object_get(root, "plugins");
    if (json_integer_value(json_object_get(root, "schema")) != 1 || !json_is_array(plugins)) {
        problem(problems, name, "not an inferlab-conformance JSON report (schema 1 with "
                                "a 'plugins' array)");
        json_decref(root);
        return;
    }
    const char *harness = str_member(json_object_get(root, "harness"), "version");
    size_t i;
    json_t *p;
    json_array_foreach(plugins, i, p) {
        const char *sha = str_member(p, "sha256");
        if (strlen(sha) != 64)
            continue; /* a plugin the harness could not read: no file to match */
        json_t *old = json_object_get(by_sha, sha);
        if (old && json_integer_value(json_object_get(old, "report_time")) > st.st_mtime)
            continue;
        json_object_set_new(by_sha, sha, plugin_summary(p, name, st.st_mtime, harness));
    }
    json_decref(root);
}

json_t *ilab_conformance_index(const char *dir)
{
    json_t *by_sha = json_object(), *problems = json_array();
    json_t *out = json_pack("{s:o, s:o}", "by_sha256", by_sha, "problems", problems);
    if (!out)
        return NULL;
    DIR *d = opendir(dir);
    if (!d) {
        char why[300];
        snprintf(why, sizeof why, "cannot read the folder: %s", strerror(errno));
        problem(problems, dir, why);
        return out;
    }
    for (struct dirent *e; (e = readdir(d));) {
        size_t n = strlen(e->d_name);
        if (e->d_name[0] == '.' || n < 6 || strcmp(e->d_name + n - 5, ".json"))
            continue;
        add_report(dir, e->d_name, by_sha, problems);
    }
    closedir(d);
    return out;
}
