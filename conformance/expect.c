/* conformance-expect: runs inferlab-conformance with --format json on one
 * plugin and asserts what it reported — used by ctest to prove the harness
 * catches each broken plugin on its clause, and that the JSON report has the
 * documented shape (docs/conformance.md).
 *
 *   conformance-expect HARNESS PLUGIN.so CLAUSE RESULTS [HARNESS ARGS...]
 *     CLAUSE  e.g. CCH-3: at least one test of that clause must have one of
 *             RESULTS (comma-separated, lower case: fail,crash,timeout)
 *     CLAUSE  "*": the plugin's own result must be one of RESULTS */
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int bad(const char *what)
{
    fprintf(stderr, "conformance-expect: %s\n", what);
    return 1;
}

static int schema_ok(json_t *root)
{
    if (json_integer_value(json_object_get(root, "schema")) != 1)
        return bad("schema is not 1");
    if (!json_is_string(json_object_get(json_object_get(root, "harness"), "version")))
        return bad("harness.version missing");
    json_t *plugins = json_object_get(root, "plugins");
    if (!json_is_array(plugins))
        return bad("plugins is not an array");
    size_t i, j;
    json_t *p, *t;
    static const char *const results[] = {"pass", "fail", "skip", "crash", "timeout", "error"};
    json_array_foreach(plugins, i, p) {
        const char *keys[] = {"name", "path", "sha256", "abi", "result", "reason"};
        for (size_t k = 0; k < 6; k++)
            if (!json_is_string(json_object_get(p, keys[k])))
                return bad("a plugin lacks a string member (name/path/sha256/abi/result/reason)");
        json_array_foreach(json_object_get(p, "tests"), j, t) {
            const char *tk[] = {"id", "clause", "result", "message"};
            for (size_t k = 0; k < 4; k++)
                if (!json_is_string(json_object_get(t, tk[k])))
                    return bad("a test lacks a string member (id/clause/result/message)");
            if (!json_is_number(json_object_get(t, "duration_ms")))
                return bad("a test lacks duration_ms");
            const char *r = json_string_value(json_object_get(t, "result"));
            bool known = false;
            for (size_t k = 0; k < 6; k++)
                known |= strcmp(r, results[k]) == 0;
            if (!known)
                return bad("a test result is not one of the six lower-case results");
        }
    }
    json_t *s = json_object_get(root, "summary");
    if (!json_is_object(s) || !json_is_integer(json_object_get(s, "tests")))
        return bad("summary.tests missing");
    return 0;
}

static bool in_set(const char *r, const char *set)
{
    char buf[128];
    snprintf(buf, sizeof buf, ",%s,", set);
    char want[32];
    snprintf(want, sizeof want, ",%s,", r);
    return strstr(buf, want) != NULL;
}

int main(int argc, char **argv)
{
    if (argc < 5)
        return bad("usage: conformance-expect HARNESS PLUGIN.so CLAUSE RESULTS [ARGS...]");
    char out[] = "/tmp/conformance-expect-XXXXXX";
    int fd = mkstemp(out);
    if (fd < 0)
        return bad("mkstemp failed");
    close(fd);
    char **args = calloc((size_t)argc + 8, sizeof *args);
    int n = 0;
    args[n++] = argv[1];
    args[n++] = argv[2];
    args[n++] = "--format";
    args[n++] = "json";
    args[n++] = "--output";
    args[n++] = out;
    for (int i = 5; i < argc; i++)
        args[n++] = argv[i];
    pid_t pid = fork();
    if (pid == 0) {
        execv(argv[1], args);
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    free(args);
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    json_error_t jerr;
    json_t *root = json_load_file(out, 0, &jerr);
    unlink(out);
    if (!root) {
        fprintf(stderr, "conformance-expect: the report is not JSON: %s (exit %d)\n", jerr.text, code);
        return 1;
    }
    int rc = schema_ok(root);
    json_t *p = json_array_get(json_object_get(root, "plugins"), 0);
    const char *clause = argv[3], *set = argv[4];
    if (!rc && strcmp(clause, "*") == 0) {
        const char *r = json_string_value(json_object_get(p, "result"));
        if (!in_set(r, set)) {
            fprintf(stderr, "conformance-expect: plugin result %s, want one of %s (%s)\n", r, set,
                    json_string_value(json_object_get(p, "reason")));
            rc = 1;
        }
        bool failing = strcmp(r, "pass") != 0 && strcmp(r, "skip") != 0;
        if (!rc && code != (failing ? 1 : 0)) {
            fprintf(stderr, "conformance-expect: exit code %d does not match result %s\n", code, r);
            rc = 1;
        }
    } else if (!rc) {
        size_t i;
        json_t *t;
        bool hit = false;
        json_array_foreach(json_object_get(p, "tests"), i, t) {
            if (strcmp(json_string_value(json_object_get(t, "clause")), clause) != 0)
                continue;
            const char *r = json_string_value(json_object_get(t, "result"));
            printf("%s: %s: %s\n", json_string_value(json_object_get(t, "id")), r,
                   json_string_value(json_object_get(t, "message")));
            hit |= in_set(r, set);
        }
        if (!hit) {
            fprintf(stderr, "conformance-expect: no %s test reported %s\n", clause, set);
            rc = 1;
        }
        if (!rc && code != 1) {
            fprintf(stderr, "conformance-expect: exit code %d, want 1\n", code);
            rc = 1;
        }
    }
    json_decref(root);
    return rc;
}
