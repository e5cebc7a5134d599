/* `inferlab run / tokenize / detokenize` end to end: the real binary, the
 * test plugins (via --plugin-dir), exit codes, --json lines, stdin. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include "ilab_skip.h"

static char out[65536];

/* Run `args` (shell words) through inferlab with the test plugin folder;
 * stdout into `out`, stderr into `err` (may be NULL). Returns the exit code. */
static int inferlab(const char *stdin_text, const char *args, char *err, size_t err_cap)
{
    char err_path[] = "/tmp/ilab_cli_err_XXXXXX";
    int fd = mkstemp(err_path);
    assert_true(fd >= 0);
    close(fd);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s%s%s '%s' %s --plugin-dir '%s' 2>'%s'", stdin_text ? "printf '%s' '" : "",
             stdin_text ? stdin_text : "", stdin_text ? "' |" : "", INFERLAB_BIN, args, TEST_PLUGIN_DIR, err_path);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    int status = pclose(p);
    if (err) {
        FILE *f = fopen(err_path, "r");
        size_t m = f ? fread(err, 1, err_cap - 1, f) : 0;
        err[m] = '\0';
        if (f)
            fclose(f);
    }
    unlink(err_path);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p++)
        n++;
    return n;
}

static void run_json_streams_tokens_then_finish(void **state)
{
    (void)state;
    char err[4096];
    int rc = inferlab(NULL, "run --backend counting_backend --prompt Hi --max-tokens 5 --temperature 0 "
                            "--logprobs 3 --ignore-eos --json", err, sizeof err);
    if (rc != 0)
        fail_msg("exit %d: %s", rc, err);
    assert_int_equal(count(out, "{\"type\":\"token\""), 5);
    assert_int_equal(count(out, "\"top_logprobs\":[{"), 5);
    assert_int_equal(count(out, "{\"type\":\"finish\",\"reason\":\"length\""), 1);
    assert_non_null(strstr(out, "\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":5}"));
    assert_non_null(strstr(out, "\"seed\":42"));
}

static void run_reads_stdin_and_prints_a_stats_line(void **state)
{
    (void)state;
    char err[4096];
    int rc = inferlab("Hi\n", "run --backend counting_backend --max-tokens 4 --seed 9", err, sizeof err);
    if (rc != 0)
        fail_msg("exit %d: %s", rc, err);
    assert_true(strncmp(out, "Hi", 2) == 0); /* prompt echoed, trailing newline dropped */
    assert_non_null(strstr(err, "[prompt 3 tokens | completion 4 tokens | ttft "));
    assert_non_null(strstr(err, "finish length | seed 9]"));
}

static void run_reads_a_prompt_file(void **state)
{
    (void)state;
    char path[] = "/tmp/ilab_prompt_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "Hi\n", 3), 3);
    close(fd);
    char args[512], err[4096];
    snprintf(args, sizeof args, "run --backend counting_backend --prompt-file %s --max-tokens 2 --json", path);
    int rc = inferlab(NULL, args, err, sizeof err);
    unlink(path);
    if (rc != 0)
        fail_msg("exit %d: %s", rc, err);
    assert_non_null(strstr(out, "\"prompt_tokens\":3")); /* BOS H i: the newline dropped */
    assert_int_equal(inferlab(NULL, "run --backend counting_backend --prompt-file /nonexistent/p.txt", err, sizeof err), 1);
    assert_non_null(strstr(err, "/nonexistent/p.txt"));
    assert_int_equal(inferlab(NULL, "run --backend counting_backend --prompt a --prompt-file b", err, sizeof err), 2);
}

static void run_through_a_sampling_backend(void **state)
{
    (void)state;
    char err[4096];
    int rc = inferlab(NULL, "run --backend generate_backend --prompt x --max-tokens 6", err, sizeof err);
    if (rc != 0)
        fail_msg("exit %d: %s", rc, err);
    assert_string_equal(out, "xabcdef\n");
}

static void exit_codes(void **state)
{
    (void)state;
    char err[4096];
    assert_int_equal(inferlab(NULL, "run --backend counting_backend --prompt x --max-tokens 0", err, sizeof err), 2);
    assert_non_null(strstr(err, "--max-tokens"));
    assert_int_equal(inferlab(NULL, "run --backend counting_backend --prompt x --set nodot", err, sizeof err), 2);
    assert_non_null(strstr(err, "nodot"));
    assert_int_equal(inferlab(NULL, "run --backend counting_backend --prompt x --set counting_backend.nope=1", err,
                              sizeof err), 2);
    assert_non_null(strstr(err, "nope"));
    assert_int_equal(inferlab(NULL, "run --backend counting_backend --prompt x --set counting_backend.fail_after=x",
                              err, sizeof err), 2);
    assert_non_null(strstr(err, "fail_after"));
    /* A host integer with trailing junk is a usage error, not port 80. */
    assert_int_equal(inferlab(NULL, "run --backend counting_backend --prompt x --set server.port=80x",
                              err, sizeof err), 2);
    assert_non_null(strstr(err, "server.port: '80x' is not an integer"));
    assert_int_equal(inferlab(NULL, "run --backend no_such_backend --prompt x", err, sizeof err), 2);
    assert_non_null(strstr(err, "no_such_backend"));
    /* A near miss names the plugin meant, and the list. */
    assert_int_equal(inferlab(NULL, "run --backend countng_backend --prompt x", err, sizeof err), 2);
    assert_non_null(strstr(err, "did you mean 'counting_backend'? (plugins: counting_backend"));
    /* Settings for a plugin nobody has: refused, not silently ignored. */
    assert_int_equal(inferlab(NULL, "run --backend counting_backend --prompt x --set torchlik.model=/x",
                              err, sizeof err), 2);
    assert_non_null(strstr(err, "configuration for plugin 'torchlik': no plugin has that name; did "
                                "you mean 'torchlike'?"));
    /* The same from a config file. */
    char cfg[] = "/tmp/ilab_cli_cfg_XXXXXX";
    int fd = mkstemp(cfg);
    assert_true(fd >= 0);
    const char *yaml = "plugins:\n  torchlik:\n    model: /x\n";
    assert_int_equal(write(fd, yaml, strlen(yaml)), (ssize_t)strlen(yaml));
    close(fd);
    char args[512];
    snprintf(args, sizeof args, "run --backend counting_backend --prompt x --config %s", cfg);
    assert_int_equal(inferlab(NULL, args, err, sizeof err), 2);
    assert_non_null(strstr(err, "configuration for plugin 'torchlik'"));
    unlink(cfg);
    assert_int_equal(inferlab(NULL, "run --backend counting_backend --prompt x --set counting_backend.fail_after=1",
                              err, sizeof err), 1);
    assert_non_null(strstr(err, "injected failure"));
    assert_int_equal(inferlab(NULL, "run --bogus", err, sizeof err), 2);
    assert_int_equal(inferlab(NULL, "run --backend counting_backend --prompt x --top-p 0", err, sizeof err), 2);
    assert_non_null(strstr(err, "top_p"));
    assert_int_equal(inferlab(NULL, "run --backend counting_backend --prompt x --logprobs 50", err, sizeof err), 2);
    assert_non_null(strstr(err, "topk_max"));
}

/* Every numeric option of `run` at the ends of its domain and one step past
 * them: accepted values run (exit 0), the rest exit 2 with a message that
 * names the option or the sampling field. */
static void run_numeric_options_at_their_bounds(void **state)
{
    (void)state;
    static const struct {
        const char *option, *value;
        int exit_code;
        const char *names; /* in the message when refused */
    } cases[] = {
        {"--max-tokens", "1", 0, NULL},
        {"--max-tokens", "0", 2, "--max-tokens"},
        {"--max-tokens", "-1", 2, "--max-tokens"},
        {"--max-tokens", "2147483648", 2, "--max-tokens"},
        {"--max-tokens", "3x", 2, "--max-tokens"},
        {"--seed", "0", 0, NULL},
        {"--seed", "18446744073709551615", 0, NULL},
        {"--seed", "18446744073709551616", 2, "--seed"},
        {"--seed", "-1", 2, "--seed"},
        {"--seed", "-18446744073709551615", 2, "--seed"},
        {"--seed", "", 2, "--seed"},
        {"--top-k", "0", 0, NULL},
        {"--top-k", "2147483647", 0, NULL},
        {"--top-k", "-1", 2, "--top-k"},
        {"--top-k", "2147483648", 2, "--top-k"},
        {"--logprobs", "0", 0, NULL},
        {"--logprobs", "-1", 2, "--logprobs"},
        {"--temperature", "0", 0, NULL},
        {"--temperature", "-0.01", 2, "temperature"},
        {"--temperature", "inf", 2, "--temperature"},
        {"--temperature", "nan", 2, "--temperature"},
        {"--top-p", "1", 0, NULL},
        {"--top-p", "1e-7", 0, NULL},
        {"--top-p", "1.01", 2, "top_p"},
        {"--top-p", "-0.5", 2, "top_p"},
        {"--min-p", "0", 0, NULL},
        {"--min-p", "1", 0, NULL},
        {"--min-p", "1.01", 2, "min_p"},
        {"--min-p", "-0.01", 2, "min_p"},
        {"--repeat-penalty", "1", 0, NULL},
        {"--repeat-penalty", "0", 2, "repetition_penalty"},
        {"--presence-penalty", "-2", 0, NULL},
        {"--presence-penalty", "2", 0, NULL},
        {"--presence-penalty", "2.01", 2, "presence_penalty"},
        {"--frequency-penalty", "-2.01", 2, "frequency_penalty"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char args[256], err[4096];
        snprintf(args, sizeof args, "run --backend counting_backend --prompt x --max-tokens 2 "
                 "%s '%s'", cases[i].option, cases[i].value);
        int rc = inferlab(NULL, args, err, sizeof err);
        if (rc != cases[i].exit_code)
            fail_msg("%s '%s': exit %d, expected %d: %s", cases[i].option, cases[i].value, rc,
                     cases[i].exit_code, err);
        if (cases[i].names && !strstr(err, cases[i].names))
            fail_msg("%s '%s': the message does not name %s: %s", cases[i].option,
                     cases[i].value, cases[i].names, err);
    }
}

static void unavailable_backend_exits_3_with_the_reason(void **state)
{
    (void)state;
    /* The stub is unavailable without a server; a URL from the caller's
     * environment must not make this test depend on one. */
    unsetenv("INFERLAB_VLLM_URL");
    char args[2048], err[4096];
    snprintf(args, sizeof args, "run --backend vllm_stub --prompt x --plugin-dir '%s'", SHIPPED_PLUGIN_DIR);
    assert_int_equal(inferlab(NULL, args, err, sizeof err), 3);
    assert_non_null(strstr(err, "unavailable"));
    assert_non_null(strstr(err, "base_url"));
}

static void tokenize_and_detokenize(void **state)
{
    (void)state;
    char err[4096];
    assert_int_equal(inferlab(NULL, "tokenize --backend counting_backend Hi", err, sizeof err), 0);
    assert_string_equal(out, "75\tH\n108\ti\n"); /* id and piece, one token a line */
    assert_int_equal(inferlab(NULL, "tokenize --backend counting_backend --add-special --json Hi", err, sizeof err), 0);
    assert_string_equal(out, "[{\"id\":1,\"piece\":\"\"},{\"id\":75,\"piece\":\"H\"},"
                             "{\"id\":108,\"piece\":\"i\"}]\n");
    /* --parse-special needs a backend declaring chat (ABI 1.2) */
    assert_int_equal(inferlab(NULL, "tokenize --backend counting_backend --parse-special Hi", err, sizeof err), 2);
    assert_non_null(strstr(err, "declares chat"));
    assert_int_equal(inferlab(NULL, "detokenize --backend counting_backend 1 75 108", err, sizeof err), 0);
    assert_string_equal(out, "Hi\n");
    assert_int_equal(inferlab(NULL, "detokenize --backend counting_backend --json 75 108", err, sizeof err), 0);
    assert_string_equal(out, "\"Hi\"\n");
    assert_int_equal(inferlab(NULL, "detokenize --backend counting_backend 999", err, sizeof err), 1);
    assert_non_null(strstr(err, "999"));
    assert_int_equal(inferlab(NULL, "detokenize --backend counting_backend abc", err, sizeof err), 2);
    assert_int_equal(inferlab(NULL, "tokenize --backend counting_backend", err, sizeof err), 2);
}

/* A text longer than the CLI's first guess from the count of ids (token 0
 * of generate_backend is a 43-byte piece): the retry makes room for all of
 * it and its NUL. */
static void detokenize_a_text_longer_than_the_first_guess(void **state)
{
    (void)state;
    char err[4096];
    int rc = inferlab(NULL, "detokenize --backend generate_backend 0 75 0", err, sizeof err);
    if (rc != 0)
        fail_msg("exit %d: %s", rc, err);
    assert_string_equal(out, "<|token zero: a piece longer than 32 bytes|>H"
                             "<|token zero: a piece longer than 32 bytes|>\n");
    assert_int_equal(inferlab(NULL, "detokenize --backend generate_backend --json 0", err, sizeof err), 0);
    assert_string_equal(out, "\"<|token zero: a piece longer than 32 bytes|>\"\n");
}

/* Each piece as it reads in its place: joined, the pieces of a text are the
 * text. A SentencePiece vocabulary marks a word's leading space on the
 * word's token, and only the first piece of a text drops it. */
static void tokenize_pieces_join_to_the_text(void **state)
{
    (void)state;
    char err[4096], args[2048];
    const char *text = "Hello world, how are you";
    snprintf(args, sizeof args, "tokenize --backend torchlike --plugin-dir '%s' --set "
             "torchlike.model='%s' --set torchlike.max_context=64 '%s'", SHIPPED_PLUGIN_DIR,
             GGUF_DIR "/llama-Q8_0.gguf", text);
    int rc = inferlab(NULL, args, err, sizeof err);
    if (rc != 0)
        fail_msg("exit %d: %s", rc, err);
    char joined[1024] = "";
    int lines = 0;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n"), lines++) {
        char *tab = strchr(line, '\t');
        assert_non_null(tab);
        strcat(joined, tab + 1);
    }
    assert_true(lines > 5); /* several words, several tokens */
    assert_string_equal(joined, text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(run_json_streams_tokens_then_finish),
        cmocka_unit_test(detokenize_a_text_longer_than_the_first_guess),
        cmocka_unit_test(tokenize_pieces_join_to_the_text),
        cmocka_unit_test(run_reads_stdin_and_prints_a_stats_line),
        cmocka_unit_test(run_reads_a_prompt_file),
        cmocka_unit_test(run_through_a_sampling_backend),
        cmocka_unit_test(exit_codes),
        cmocka_unit_test(run_numeric_options_at_their_bounds),
        cmocka_unit_test(unavailable_backend_exits_3_with_the_reason),
        cmocka_unit_test(tokenize_and_detokenize),
    };
    return ilab_test_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
