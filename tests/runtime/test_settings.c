/* Settings tests: the YAML file, errors naming file/line/key, --set. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include "ilab_skip.h"

#include "config/settings.h"

static char path[64];

static const char *write_tmp(const char *text)
{
    snprintf(path, sizeof path, "/tmp/ilab_settings_XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    size_t n = strlen(text);
    assert_int_equal(write(fd, text, n), (ssize_t)n);
    close(fd);
    return path;
}

static void a_full_file_loads(void **state)
{
    (void)state;
    ilab_settings s;
    ilab_settings_init(&s);
    char err[512] = "";
    const char *p = write_tmp("plugin_dirs: [/opt/a, /opt/b]\n"
                              "default_backend: template_backend\n"
                              "scheduler: {max_running: 4, max_waiting: 9, step_token_budget: 64, prefill_chunk: 16}\n"
                              "server:\n  host: 0.0.0.0\n  port: 9000\n  max_body_bytes: 2048\n"
                              "plugins:\n  torchlike: {threads: 2, model: /m.bin}\n  vllm_stub:\n    base_url: http://x\n");
    assert_int_equal(ilab_settings_load_file(&s, p, err, sizeof err), ILAB_OK);
    unlink(p);
    assert_int_equal(s.n_plugin_dirs, 2);
    assert_string_equal(s.plugin_dirs[1], "/opt/b");
    assert_string_equal(s.default_backend, "template_backend");
    assert_int_equal(s.scheduler.max_running, 4);
    assert_int_equal(s.scheduler.max_waiting, 9);
    assert_int_equal(s.scheduler.step_token_budget, 64);
    assert_int_equal(s.scheduler.prefill_chunk, 16);
    assert_string_equal(s.server.host, "0.0.0.0");
    assert_int_equal(s.server.port, 9000);
    assert_int_equal(s.server.max_body_bytes, 2048);
    size_t n;
    const ilab_config_entry_t *e = ilab_settings_plugin_config(&s, "torchlike", &n);
    assert_int_equal(n, 2);
    assert_string_equal(e[0].key, "threads");
    assert_string_equal(e[0].value, "2");
    /* --set overrides one key and adds another */
    assert_int_equal(ilab_settings_set(&s, "torchlike.threads=1", err, sizeof err), ILAB_OK);
    assert_int_equal(ilab_settings_set(&s, "torchlike.seed=5", err, sizeof err), ILAB_OK);
    assert_int_equal(ilab_settings_set(&s, "scheduler.max_running=2", err, sizeof err), ILAB_OK);
    e = ilab_settings_plugin_config(&s, "torchlike", &n);
    assert_int_equal(n, 3);
    assert_string_equal(e[0].value, "1");
    assert_string_equal(e[2].key, "seed");
    assert_int_equal(s.scheduler.max_running, 2);
    assert_int_equal(ilab_settings_set(&s, "scheduler.prefix_cache_positions=0", err, sizeof err),
                     ILAB_OK);
    assert_int_equal(s.scheduler.prefix_cache_positions, 0);
    assert_int_equal(ilab_settings_set(&s, "scheduler.prefix_cache_min_tokens=0", err, sizeof err),
                     ILAB_INVALID_ARGUMENT);
    assert_non_null(strstr(err, "prefix_cache_min_tokens"));
    assert_int_equal(ilab_settings_set(&s, "scheduler.kv_watermark_percent=5", err, sizeof err),
                     ILAB_OK);
    assert_int_equal(s.scheduler.kv_watermark_percent, 5);
    assert_int_equal(ilab_settings_set(&s, "scheduler.kv_watermark_percent=51", err, sizeof err),
                     ILAB_INVALID_ARGUMENT);
    assert_non_null(strstr(err, "kv_watermark_percent"));
    e = ilab_settings_plugin_config(&s, "vllm_stub", &n);
    assert_int_equal(n, 1);
    assert_string_equal(e[0].value, "http://x");
    ilab_settings_free(&s);
}

static void defaults_are_sane(void **state)
{
    (void)state;
    ilab_settings s;
    ilab_settings_init(&s);
    assert_string_equal(s.default_backend, "torchlike");
    assert_int_equal(s.n_plugin_dirs, 0);
    assert_true(s.scheduler.max_running >= 1);
    assert_true(s.scheduler.step_token_budget >= s.scheduler.max_running);
    assert_true(s.scheduler.prefix_cache_positions > 0);
    assert_true(s.scheduler.prefix_cache_min_tokens >= 1);
    assert_int_equal(s.scheduler.kv_watermark_percent, 1);
    ilab_settings_free(&s);
}

/* Each bad file must fail with a message naming the file, the line and the
 * key (or what is wrong). */
static void errors_name_file_line_and_key(void **state)
{
    (void)state;
    struct {
        const char *yaml;
        const char *line;
        const char *word;
    } bad[] = {
        {"default_backend: torchlike\nschedular: {max_running: 2}\n", ":2:", "schedular"},
        {"scheduler:\n  max_running: lots\n", ":2:", "max_running"},
        {"scheduler:\n  max_runing: 3\n", ":2:", "max_runing"},
        {"scheduler:\n  max_running: 0\n", ":2:", "max_running"},
        /* A number with trailing junk is not a number. */
        {"scheduler:\n  max_running: '4 lots'\n", ":2:", "max_running"},
        {"server: {port: 70000}\n", ":1:", "port"},
        {"plugins:\n  torchlike: [1, 2]\n", ":2:", "torchlike"},
        {"plugins:\n  torchlike:\n    model: {a: 1}\n", ":3:", "model"},
        {"plugin_dirs: {a: b}\n", ":1:", "plugin_dirs"},
        {"scheduler: {max_running: 2\n", ":2:", "YAML syntax error"},
        {"- a\n- b\n", ":1:", "top level"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ilab_settings s;
        ilab_settings_init(&s);
        char err[512] = "";
        const char *p = write_tmp(bad[i].yaml);
        ilab_status st = ilab_settings_load_file(&s, p, err, sizeof err);
        unlink(p);
        if (st == ILAB_OK)
            fail_msg("case %zu accepted: %s", i, bad[i].yaml);
        if (!strstr(err, p) || !strstr(err, bad[i].line) || !strstr(err, bad[i].word))
            fail_msg("case %zu: message '%s' should name %s, line %s and '%s'", i, err, p, bad[i].line,
                     bad[i].word);
        ilab_settings_free(&s);
    }
}

static void missing_file_and_bad_set_are_clear(void **state)
{
    (void)state;
    ilab_settings s;
    ilab_settings_init(&s);
    char err[512] = "";
    assert_int_equal(ilab_settings_load_file(&s, "/nonexistent/inferlab.yaml", err, sizeof err), ILAB_IO);
    assert_non_null(strstr(err, "/nonexistent/inferlab.yaml"));
    const char *bad[] = {"threads=2", "torchlike.threads", ".x=1", "torchlike.=1", "scheduler.nope=1",
                         "scheduler.max_running=x", "server.port=80x"};
    const int port = s.server.port;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        assert_int_equal(ilab_settings_set(&s, bad[i], err, sizeof err), ILAB_INVALID_ARGUMENT);
        assert_true(err[0] != '\0');
    }
    /* Trailing junk is refused, not read as its leading number. */
    assert_non_null(strstr(err, "server.port: '80x' is not an integer"));
    assert_int_equal(s.server.port, port);
    /* an empty file is fine and changes nothing */
    const char *p = write_tmp("");
    assert_int_equal(ilab_settings_load_file(&s, p, err, sizeof err), ILAB_OK);
    unlink(p);
    ilab_settings_free(&s);
}

/* Text in memory goes through the same walker as a file: same values, and
 * errors name the label with the line. */
static void text_loads_like_a_file(void **state)
{
    (void)state;
    static const char yaml[] = "scheduler: {max_running: 3}\nplugins:\n  torchlike: {threads: 2}\n"
                               "server: {port: 99999}\n";
    ilab_settings s;
    ilab_settings_init(&s);
    char err[512] = "";
    assert_int_equal(ilab_settings_load_text(&s, "inline.yaml", yaml, strlen(yaml), err, sizeof err),
                     ILAB_INVALID_ARGUMENT);
    assert_non_null(strstr(err, "inline.yaml:4:"));
    assert_non_null(strstr(err, "port"));
    assert_int_equal(s.scheduler.max_running, 3);
    size_t n;
    const ilab_config_entry_t *e = ilab_settings_plugin_config(&s, "torchlike", &n);
    assert_int_equal(n, 1);
    assert_string_equal(e[0].value, "2");
    /* Only `len` bytes are read: the bad port line is cut off. */
    ilab_settings_free(&s);
    ilab_settings_init(&s);
    size_t cut = (size_t)(strstr(yaml, "server") - yaml);
    assert_int_equal(ilab_settings_load_text(&s, "inline.yaml", yaml, cut, err, sizeof err), ILAB_OK);
    assert_int_equal(ilab_settings_load_text(&s, "empty", NULL, 0, err, sizeof err), ILAB_OK);
    assert_int_equal(ilab_settings_load_text(&s, "bad", "a: [", 4, err, sizeof err),
                     ILAB_INVALID_ARGUMENT);
    assert_true(!strncmp(err, "bad:", 4));
    assert_non_null(strstr(err, "YAML syntax error"));
    ilab_settings_free(&s);
}

/* server.backends: a YAML list or a comma-separated --set; each entry a
 * plugin name; a later source replaces the list. */
static void server_backends_list(void **state)
{
    (void)state;
    ilab_settings s;
    ilab_settings_init(&s);
    char err[512] = "";
    assert_int_equal(s.server.n_backends, 0);
    static const char yaml[] = "server:\n  backends: [torchlike, vllm_stub, torchlike]\n";
    assert_int_equal(ilab_settings_load_text(&s, "b.yaml", yaml, strlen(yaml), err, sizeof err),
                     ILAB_OK);
    assert_int_equal(s.server.n_backends, 2); /* once each */
    assert_string_equal(s.server.backends[1], "vllm_stub");
    assert_int_equal(ilab_settings_set(&s, "server.backends=paced_backend,counting_backend", err,
                                       sizeof err), ILAB_OK);
    assert_int_equal(s.server.n_backends, 2);
    assert_string_equal(s.server.backends[0], "paced_backend");
    assert_string_equal(s.server.backends[1], "counting_backend");
    assert_int_equal(ilab_settings_set(&s, "server.backends=paced_backend,,x", err, sizeof err),
                     ILAB_INVALID_ARGUMENT);
    assert_non_null(strstr(err, "server.backends: '' is not a plugin name"));
    static const char bad[] = "server:\n  backends: [Torch-Like]\n";
    assert_int_equal(ilab_settings_load_text(&s, "c.yaml", bad, strlen(bad), err, sizeof err),
                     ILAB_INVALID_ARGUMENT);
    assert_non_null(strstr(err, "c.yaml:2: server.backends: 'Torch-Like' is not a plugin name"));
    static const char nested[] = "server:\n  backends: [[a]]\n";
    assert_int_equal(ilab_settings_load_text(&s, "d.yaml", nested, strlen(nested), err,
                                             sizeof err), ILAB_INVALID_ARGUMENT);
    assert_non_null(strstr(err, "each entry must be a plugin name, got a list"));
    ilab_settings_free(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(server_backends_list),
        cmocka_unit_test(a_full_file_loads),
        cmocka_unit_test(defaults_are_sane),
        cmocka_unit_test(errors_name_file_line_and_key),
        cmocka_unit_test(missing_file_and_bad_set_are_clear),
        cmocka_unit_test(text_loads_like_a_file),
    };
    return ilab_test_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
