/* `inferlab serve --model NAME=FILE`: two GGUF models served by one
 * torchlike plugin, each its own instance in its own worker process.
 * /v1/models and /health list both by name; a completion naming each gets
 * that model's greedy answer, the same as the model served alone (in
 * workers and in-process); a worker killed fails only its model's
 * requests, and comes back. Bad --model
 * arguments fail closed, naming the argument. */
#include <dirent.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>
#include <jansson.h>

#include "http_client.h"

#define LLAMA GGUF_DIR "/llama-Q8_0.gguf"
#define QWEN GGUF_DIR "/qwen2-F16.gguf"

/* A greedy completion from `model` (NULL: none named); the text, malloc'd,
 * or NULL with the reply's status in *status. */
static char *complete(const test_server *s, const char *model, long *status)
{
    char body[256];
    snprintf(body, sizeof body,
             "{%s%s%s\"prompt\": \"Once upon a time\", \"max_tokens\": 12, \"temperature\": 0, "
             "\"ignore_eos\": true}",
             model ? "\"model\": \"" : "", model ? model : "", model ? "\", " : "");
    http_reply r;
    assert_true(http_call(s, "/v1/completions", body, &r));
    *status = r.status;
    char *text = NULL;
    if (r.status == 200) {
        json_t *root = json_loads(r.body, 0, NULL);
        assert_non_null(root);
        const char *t = json_string_value(
            json_object_get(json_array_get(json_object_get(root, "choices"), 0), "text"));
        assert_non_null(t);
        text = strdup(t);
        json_decref(root);
    }
    http_reply_free(&r);
    return text;
}

/* The answer of `file` served alone (plain --model FILE: the default backend's). */
static char *alone(const char *file)
{
    const char *args[] = {"--plugin-dir", SHIPPED_PLUGIN_DIR, "--model", file, NULL};
    test_server s;
    assert_true(test_server_start(&s, args));
    long status = 0;
    char *text = complete(&s, NULL, &status);
    assert_int_equal(status, 200);
    assert_int_equal(test_server_stop(&s), 0);
    return text;
}

/* The ids of the array `key` of GET `path` (field `field` of each row) contain `name`. */
static bool lists(const test_server *s, const char *path, const char *key, const char *field,
                  const char *name, const char *status)
{
    http_reply r;
    assert_true(http_call(s, path, NULL, &r));
    json_t *root = json_loads(r.body, 0, NULL);
    assert_non_null(root);
    bool found = false;
    json_t *row;
    size_t i;
    json_array_foreach(json_object_get(root, key), i, row) {
        const char *id = json_string_value(json_object_get(row, field));
        const char *st = json_string_value(json_object_get(row, "status"));
        if (id && !strcmp(id, name) && (!status || (st && !strcmp(st, status))))
            found = true;
    }
    json_decref(root);
    http_reply_free(&r);
    return found;
}

/* The server's child whose memory maps `file_name` (a model's worker). */
static pid_t worker_of(pid_t server, const char *file_name)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)server, (int)server);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    int child;
    pid_t found = 0;
    while (!found && fscanf(f, "%d", &child) == 1) {
        char maps[64], line[1024];
        snprintf(maps, sizeof maps, "/proc/%d/maps", child);
        FILE *m = fopen(maps, "r");
        while (m && fgets(line, sizeof line, m))
            if (strstr(line, file_name))
                found = child;
        if (m)
            fclose(m);
    }
    fclose(f);
    return found;
}

static void two_models_one_plugin(void **state)
{
    (void)state;
    char *want_llama = alone(LLAMA), *want_qwen = alone(QWEN);
    assert_string_not_equal(want_llama, want_qwen); /* else routing would prove nothing */

    const char *args[] = {"--plugin-dir", SHIPPED_PLUGIN_DIR, "--model", "llama=" LLAMA,
                          "--model", "qwen=" QWEN, NULL};
    test_server s;
    assert_true(test_server_start(&s, args));
    assert_true(lists(&s, "/v1/models", "data", "id", "llama", NULL));
    assert_true(lists(&s, "/v1/models", "data", "id", "qwen", NULL));
    assert_true(lists(&s, "/health", "backends", "model", "llama", "ok"));
    assert_true(lists(&s, "/health", "backends", "model", "qwen", "ok"));

    long status = 0;
    char *got = complete(&s, "llama", &status);
    assert_int_equal(status, 200);
    assert_string_equal(got, want_llama);
    free(got);
    got = complete(&s, "qwen", &status);
    assert_int_equal(status, 200);
    assert_string_equal(got, want_qwen);
    free(got);
    /* Two models and no default: a request must name one. */
    assert_null(complete(&s, NULL, &status));
    assert_int_equal(status, 400);

    /* llama's worker dies: only llama's requests fail; qwen goes on. */
    pid_t w = worker_of(s.pid, "llama-Q8_0.gguf");
    assert_true(w > 0);
    assert_int_equal(kill(w, SIGKILL), 0);
    struct timespec pause = {0, 50 * 1000 * 1000};
    for (int i = 0; i < 40 && lists(&s, "/health", "backends", "backend", "llama", "ok"); i++)
        nanosleep(&pause, NULL);
    assert_null(complete(&s, "llama", &status));
    assert_true(status >= 500);
    got = complete(&s, "qwen", &status);
    assert_int_equal(status, 200);
    assert_string_equal(got, want_qwen);
    free(got);
    assert_true(lists(&s, "/health", "backends", "model", "qwen", "ok"));

    /* Restarted after its back-off (1 s): the same answer again. */
    for (int i = 0; i < 80 && !lists(&s, "/health", "backends", "backend", "llama", "ok"); i++)
        nanosleep(&pause, NULL);
    got = complete(&s, "llama", &status);
    assert_int_equal(status, 200);
    assert_string_equal(got, want_llama);
    free(got);
    assert_int_equal(test_server_stop(&s), 0);

    /* In the server's own process (--isolation none): two instances of one
     * loaded plugin, the same answers. */
    const char *in_process[] = {"--plugin-dir", SHIPPED_PLUGIN_DIR, "--isolation", "none",
                                "--model", "llama=" LLAMA, "--model", "qwen=" QWEN, NULL};
    assert_true(test_server_start(&s, in_process));
    got = complete(&s, "qwen", &status);
    assert_int_equal(status, 200);
    assert_string_equal(got, want_qwen);
    free(got);
    got = complete(&s, "llama", &status);
    assert_int_equal(status, 200);
    assert_string_equal(got, want_llama);
    free(got);
    assert_int_equal(test_server_stop(&s), 0);
    free(want_llama);
    free(want_qwen);
}

/* `inferlab serve ARGS...` exits with 2, its stderr containing `want`. */
static void refused(const char *want, const char *const *args)
{
    char cmd[4096];
    int n = snprintf(cmd, sizeof cmd, "'%s' serve --port 0 --plugin-dir '%s'", INFERLAB_EXE,
                     SHIPPED_PLUGIN_DIR);
    for (size_t i = 0; args[i]; i++)
        n += snprintf(cmd + n, sizeof cmd - (size_t)n, " '%s'", args[i]);
    snprintf(cmd + n, sizeof cmd - (size_t)n, " 2>&1 </dev/null");
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char out[8192];
    size_t len = fread(out, 1, sizeof out - 1, p);
    out[len] = '\0';
    int st = pclose(p);
    if (!strstr(out, want))
        fail_msg("wanted '%s' in: %s", want, out);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 2);
}

static void bad_model_arguments(void **state)
{
    (void)state;
    refused("the name 'a' is given twice",
            (const char *[]){"--model", "a=" LLAMA, "--model", "a=" QWEN, NULL});
    refused("cannot read the model file '" GGUF_DIR "/missing.gguf'",
            (const char *[]){"--model", "m=" GGUF_DIR "/missing.gguf", NULL});
    refused("the name 'no space' is not",
            (const char *[]){"--model", "no space=" LLAMA, NULL});
    refused("cannot be mixed", (const char *[]){"--model", LLAMA, "--model", "q=" QWEN, NULL});
    refused("model 'bad': backend 'torchlike': create failed",
            (const char *[]){"--model", "good=" LLAMA, "--model", "bad=" GGUF_DIR "/README.md",
                             NULL});
    refused("no_such_plugin",
            (const char *[]){"--backend", "no_such_plugin", "--model", "a=" LLAMA, NULL});
}

/* The same from the settings file: server.models, a mapping of name to file. */
static void models_from_settings_file(void **state)
{
    (void)state;
    char path[] = "/tmp/ilab_models_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fprintf(f, "server:\n  models:\n    tiny-llama: %s\n    tiny-qwen: %s\n", LLAMA, QWEN);
    fclose(f);
    const char *args[] = {"--plugin-dir", SHIPPED_PLUGIN_DIR, "--config", path, NULL};
    test_server s;
    assert_true(test_server_start(&s, args));
    assert_true(lists(&s, "/v1/models", "data", "id", "tiny-llama", NULL));
    assert_true(lists(&s, "/v1/models", "data", "id", "tiny-qwen", NULL));
    long status = 0;
    free(complete(&s, "tiny-qwen", &status));
    assert_int_equal(status, 200);
    assert_int_equal(test_server_stop(&s), 0);

    f = fopen(path, "w");
    fprintf(f, "server:\n  models:\n    m: %s/missing.gguf\n", GGUF_DIR);
    fclose(f);
    refused("server.models 'm=" GGUF_DIR "/missing.gguf': cannot read the model file",
            (const char *[]){"--config", path, NULL});
    f = fopen(path, "w");
    fprintf(f, "server:\n  models: [a, b]\n");
    fclose(f);
    refused("server.models: expected a mapping of model name to model file",
            (const char *[]){"--config", path, NULL});
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(two_models_one_plugin),
        cmocka_unit_test(bad_model_arguments),
        cmocka_unit_test(models_from_settings_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
