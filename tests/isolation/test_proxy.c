/* The proxy (host/isolation): a plugin run in worker processes answers as it
 * does in-process, and its crashes, hangs and a file overwritten under it
 * cost only its own calls, never this process. The plugins are the test
 * backends of tests/support: counting_backend (thread_safety none, whose
 * `fault` setting injects the plugin bug) and paced_backend. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "isolation/proxy.h"
#include "isolation/worker.h"
#include "loader/plugin_loader.h"

/* Under AddressSanitizer a worker's segfault is caught by the sanitizer,
 * which reports it and exits with status 1 instead of dying of the signal. */
#if defined(__SANITIZE_ADDRESS__)
#define SEGV_OUTCOME "exited with status 1"
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SEGV_OUTCOME "exited with status 1"
#endif
#endif
#ifndef SEGV_OUTCOME
#define SEGV_OUTCOME "SIGSEGV"
#endif

/* ---- a plugin and an instance -------------------------------------------- */

typedef struct inst {
    ilab_plugin *plugin;
    const ilab_backend_api_t *api;
    ilab_backend_t *b;
} inst;

static ilab_plugin *load(const char *path, bool proxied, double timeout_s)
{
    char err[1024] = "";
    ilab_plugin *p = NULL;
    ilab_proxy_options opt = {.call_timeout_s = timeout_s};
    ilab_status st = proxied ? ilab_proxy_load(path, timeout_s > 0 ? &opt : NULL, err, sizeof err, &p)
                             : ilab_plugin_load(path, err, sizeof err, &p);
    if (st != ILAB_OK)
        fail_msg("load %s: %s", path, err);
    return p;
}

/* Create an instance with `user` settings (key=value pairs, NULL-ended). */
static ilab_status create(ilab_plugin *p, const char *const *user, char *err, size_t cap,
                          inst *out)
{
    ilab_config_entry_t entries[8];
    size_t n_user = 0;
    for (; user && user[2 * n_user]; n_user++)
        entries[n_user] = (ilab_config_entry_t){user[2 * n_user], user[2 * n_user + 1]};
    const ilab_manifest *m = ilab_plugin_manifest(p);
    ilab_config_entry_t *cfg = NULL;
    size_t n = 0;
    assert_int_equal(ilab_config_validate(m, entries, n_user, err, cap), ILAB_OK);
    assert_int_equal(ilab_config_with_defaults(m, entries, n_user, &cfg, &n), ILAB_OK);
    out->plugin = p;
    out->api = ilab_plugin_api(p);
    out->b = NULL;
    ilab_status st = out->api->create(ilab_plugin_host(p), cfg, n, err, cap, &out->b);
    ilab_config_entries_free(cfg, n);
    return st;
}

static void must_create(ilab_plugin *p, const char *const *user, inst *out)
{
    char err[1024] = "";
    if (create(p, user, err, sizeof err, out) != ILAB_OK)
        fail_msg("create: %s", err);
}

/* One eval of `n` tokens on `seq`, logits of the last position into `row`. */
static ilab_status eval_tokens(inst *in, ilab_seq_t seq, const int32_t *tokens, int32_t n,
                               float *row)
{
    ilab_batch_item_t item = {.struct_size = sizeof item, .seq = seq, .tokens = tokens,
                              .n_tokens = n, .logits = row};
    const ilab_batch_item_t *items[] = {&item};
    return in->api->eval(in->b, items, 1);
}

static const char *last_error(inst *in)
{
    static char msg[1024];
    in->api->last_error(in->b, msg, sizeof msg);
    return msg;
}

/* ---- the same answers as in-process ------------------------------------------ */

static void proxied_calls_answer_as_in_process(void **state)
{
    (void)state;
    inst local, remote;
    must_create(load(COUNTING_PLUGIN, false, 0), NULL, &local);
    must_create(load(COUNTING_PLUGIN, true, 0), NULL, &remote);
    inst *both[] = {&local, &remote};
    ilab_model_info_t info[2];
    int32_t tokens[2][64];
    size_t n_tokens[2];
    float logits[2][2][512];
    char text[2][64];
    size_t len[2];
    for (int k = 0; k < 2; k++) {
        inst *in = both[k];
        info[k] = (ilab_model_info_t){.struct_size = sizeof info[k]};
        assert_int_equal(in->api->model_info(in->b, &info[k]), ILAB_OK);
        assert_true(info[k].vocab_size <= 512);
        assert_int_equal(in->api->tokenize(in->b, "Hello, proxy", 12, ILAB_TOKENIZE_ADD_BOS,
                                           tokens[k], 64, &n_tokens[k]),
                         ILAB_OK);
        ilab_seq_t seq = 0;
        assert_int_equal(in->api->seq_create(in->b, &seq), ILAB_OK);
        assert_int_equal(eval_tokens(in, seq, tokens[k], (int32_t)n_tokens[k], logits[k][0]),
                         ILAB_OK);
        int32_t next = 3 + 'x';
        assert_int_equal(eval_tokens(in, seq, &next, 1, logits[k][1]), ILAB_OK);
        int32_t length = -1;
        assert_int_equal(in->api->seq_length(in->b, seq, &length), ILAB_OK);
        assert_int_equal(length, (int32_t)n_tokens[k] + 1);
        assert_int_equal(in->api->detokenize(in->b, tokens[k], n_tokens[k], text[k], 64, &len[k]),
                         ILAB_OK);
        /* A refusal: the same status, a message, and nothing written. */
        size_t untouched = 12345;
        int32_t bad_id = info[k].vocab_size + 5;
        char scratch[16] = "";
        assert_int_equal(in->api->detokenize(in->b, &bad_id, 1, scratch, sizeof scratch,
                                             &untouched),
                         ILAB_INVALID_ARGUMENT);
        assert_int_equal(untouched, 12345);
        assert_true(last_error(in)[0] != '\0');
        /* A size query. */
        size_t need = 0;
        assert_int_equal(in->api->tokenize(in->b, "Hello", 5, 0, NULL, 0, &need),
                         ILAB_BUFFER_TOO_SMALL);
        assert_int_equal(need, 5);
        assert_int_equal(in->api->seq_free(in->b, seq), ILAB_OK);
        assert_int_equal(in->api->seq_free(in->b, seq), ILAB_INVALID_ARGUMENT);
    }
    assert_memory_equal(&info[0], &info[1], sizeof info[0]);
    assert_int_equal(n_tokens[0], n_tokens[1]);
    assert_memory_equal(tokens[0], tokens[1], n_tokens[0] * sizeof(int32_t));
    size_t row = (size_t)info[0].vocab_size * sizeof(float);
    assert_memory_equal(logits[0][0], logits[1][0], row);
    assert_memory_equal(logits[0][1], logits[1][1], row);
    assert_int_equal(len[0], len[1]);
    assert_memory_equal(text[0], text[1], len[0] + 1);
    for (int k = 0; k < 2; k++) {
        both[k]->api->destroy(both[k]->b);
        ilab_plugin_unload(both[k]->plugin);
    }
}

/* ---- a faulty plugin --------------------------------------------------------- */

/* Two evals run, the third meets the fault: it and every later call fail
 * with UNAVAILABLE and a message that names the plugin and `expect`. */
static void fault_costs_only_its_calls(const char *fault, const char *expect, double timeout_s)
{
    ilab_plugin *p = load(COUNTING_PLUGIN, true, timeout_s);
    inst bad, good;
    const char *settings[] = {"fault", fault, "fault_after", "2", NULL};
    must_create(p, settings, &bad);
    must_create(p, NULL, &good);
    ilab_seq_t seq = 0, other = 0;
    assert_int_equal(bad.api->seq_create(bad.b, &seq), ILAB_OK);
    assert_int_equal(good.api->seq_create(good.b, &other), ILAB_OK);
    float row[512];
    int32_t t = 5;
    assert_int_equal(eval_tokens(&bad, seq, &t, 1, row), ILAB_OK);
    assert_int_equal(eval_tokens(&bad, seq, &t, 1, row), ILAB_OK);
    assert_int_equal(eval_tokens(&bad, seq, &t, 1, row), ILAB_UNAVAILABLE);
    const char *why = last_error(&bad);
    if (!strstr(why, expect) || !strstr(why, COUNTING_PLUGIN))
        fail_msg("the message '%s' does not name %s and '%s'", why, COUNTING_PLUGIN, expect);
    /* Dead for good: every later call says the same, none hangs. */
    int32_t length = 0;
    assert_int_equal(bad.api->seq_length(bad.b, seq, &length), ILAB_UNAVAILABLE);
    assert_string_equal(last_error(&bad), why);
    /* The other instance, another worker, goes on untouched. */
    for (int i = 0; i < 4; i++)
        assert_int_equal(eval_tokens(&good, other, &t, 1, row), ILAB_OK);
    bad.api->destroy(bad.b);
    good.api->destroy(good.b);
    ilab_plugin_unload(p);
}

static void segfault_in_eval(void **state)
{
    (void)state;
    fault_costs_only_its_calls("segv", SEGV_OUTCOME, 0);
}

static void abort_in_eval(void **state)
{
    (void)state;
    fault_costs_only_its_calls("abort", "SIGABRT", 0);
}

static void exit_in_eval(void **state)
{
    (void)state;
    fault_costs_only_its_calls("exit", "exited with status 3", 0);
}

static void hang_in_eval_hits_the_deadline(void **state)
{
    (void)state;
    fault_costs_only_its_calls("hang", "eval did not answer within 1 s", 1.0);
}

/* ---- the plugin's file changed under a running instance ------------------------- */

static void copy_file(const char *from, const char *to)
{
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    assert_non_null(in);
    assert_non_null(out);
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        assert_int_equal(fwrite(buf, 1, n, out), n);
    fclose(in);
    assert_int_equal(fclose(out), 0);
}

static void file_overwritten_in_place(void **state)
{
    (void)state;
    char dir[] = "/tmp/ilab-proxy-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/counting_backend.so", dir);
    copy_file(COUNTING_PLUGIN, path);
    ilab_plugin *p = load(path, true, 0);
    inst in;
    must_create(p, NULL, &in);
    ilab_seq_t seq = 0;
    assert_int_equal(in.api->seq_create(in.b, &seq), ILAB_OK);
    float row[512];
    int32_t t = 7;
    assert_int_equal(eval_tokens(&in, seq, &t, 1, row), ILAB_OK);
    /* cp over it: the same inode, new bytes (here: not a library at all). */
    int fd = open(path, O_WRONLY | O_TRUNC);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "not a plugin any more\n", 22), 22);
    close(fd);
    for (int i = 0; i < 8; i++)
        assert_int_equal(eval_tokens(&in, seq, &t, 1, row), ILAB_OK);
    /* A new instance starts from the file as it is now: refused, clearly. */
    inst again;
    char err[1024] = "";
    assert_int_not_equal(create(p, NULL, err, sizeof err, &again), ILAB_OK);
    if (!strstr(err, path))
        fail_msg("the refusal '%s' does not name %s", err, path);
    in.api->destroy(in.b);
    ilab_plugin_unload(p);
    unlink(path);
    rmdir(dir);
}

int main(int argc, char **argv)
{
    if (ilab_worker_requested(argc, argv))
        return ilab_worker_main(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(proxied_calls_answer_as_in_process),
        cmocka_unit_test(segfault_in_eval),
        cmocka_unit_test(abort_in_eval),
        cmocka_unit_test(exit_in_eval),
        cmocka_unit_test(hang_in_eval_hits_the_deadline),
        cmocka_unit_test(file_overwritten_in_place),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
