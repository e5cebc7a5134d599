/* End-to-end tests of `inferlab serve` over loopback: every endpoint, SSE
 * framing, error statuses, a client disconnect cancelling its request,
 * overload, concurrent streams matching solo runs, and graceful shutdown.
 *
 * The backend is paced_backend (this directory): a byte-level toy model
 * whose steps can be slowed, so that streams are still running when the
 * test hangs up or fills the queue. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include "ilab_skip.h"

#include <curl/curl.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "http_client.h"
#include "response_check.h"

#ifndef PACED_PLUGIN_DIR
#error "PACED_PLUGIN_DIR must name the directory holding paced_backend.so"
#endif
#ifndef SHIPPED_PLUGIN_DIR
#error "SHIPPED_PLUGIN_DIR must name the build's plugins directory"
#endif

/* fast: no pacing; paced: 5 ms per step. */
static test_server fast, paced;

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int start_servers(void **state)
{
    (void)state;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const char *fast_args[] = {"--plugin-dir", PACED_PLUGIN_DIR, "--backend", "paced_backend",
                               "--set", "server.max_body_bytes=65536", NULL};
    const char *paced_args[] = {"--plugin-dir", PACED_PLUGIN_DIR, "--backend", "paced_backend",
                                "--set", "paced_backend.step_ms=5", NULL};
    if (!test_server_start(&fast, fast_args))
        return -1;
    if (!test_server_start(&paced, paced_args))
        return -1;
    return 0;
}

static int stop_servers(void **state)
{
    (void)state;
    int a = test_server_stop(&fast);
    int b = paced.pid ? test_server_stop(&paced) : 0;
    curl_global_cleanup();
    return a == 0 && b == 0 ? 0 : -1;
}

static json_t *json_of(const http_reply *r)
{
    json_error_t e;
    json_t *j = json_loads(r->body, 0, &e);
    if (!j)
        fprintf(stderr, "not JSON (%s): %s\n", e.text, r->body);
    return j;
}

static json_t *post_json(const test_server *s, const char *path, const char *body,
                         long want_status)
{
    http_reply r;
    assert_true(http_call(s, path, body, &r));
    if (r.status != want_status)
        fprintf(stderr, "%s %s -> %ld: %s\n", path, body, r.status, r.body);
    assert_int_equal(r.status, want_status);
    json_t *j = json_of(&r);
    http_reply_free(&r);
    assert_non_null(j);
    return j;
}

/* The error body names the field: {"error": {"param": field, "code": status}}. */
static void expect_error(const test_server *s, const char *path, const char *body,
                         long status, const char *param)
{
    json_t *j = post_json(s, path, body, status);
    json_t *err = json_object_get(j, "error");
    assert_non_null(err);
    assert_true(json_is_string(json_object_get(err, "message")));
    assert_true(strlen(json_string_value(json_object_get(err, "message"))) > 0);
    assert_int_equal(json_integer_value(json_object_get(err, "code")), status);
    if (param)
        assert_string_equal(json_string_value(json_object_get(err, "param")), param);
    json_decref(j);
}

/* --- SSE parsing -------------------------------------------------------- */

typedef struct sse {
    char **data; /* payloads of "data: ..." events, in order */
    size_t n;
} sse;

/* Split a body into events; fails the test unless every event is exactly
 * "data: <payload>\n\n". */
static sse sse_parse(const char *body)
{
    sse out = {0};
    const char *p = body;
    while (*p) {
        assert_memory_equal(p, "data: ", 6);
        const char *end = strstr(p, "\n\n");
        assert_non_null(end);
        out.data = realloc(out.data, (out.n + 1) * sizeof *out.data);
        out.data[out.n++] = strndup(p + 6, (size_t)(end - p - 6));
        assert_null(strchr(out.data[out.n - 1], '\n'));
        p = end + 2;
    }
    return out;
}

static void sse_free(sse *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->data[i]);
    free(s->data);
}

/* Concatenated text of a stream, checking its grammar: chunks, exactly one
 * finish_reason (on the last choice-carrying chunk), optional usage chunk,
 * then [DONE]. */
static char *stream_text(const char *body, bool chat, const char **finish_out,
                         json_int_t *completion_tokens)
{
    static char finish[32];
    sse ev = sse_parse(body);
    assert_true(ev.n >= 2);
    assert_string_equal(ev.data[ev.n - 1], "[DONE]");
    size_t cap = 4096, len = 0;
    char *text = calloc(1, cap);
    int finishes = 0;
    finish[0] = '\0';
    *completion_tokens = -1;
    for (size_t i = 0; i + 1 < ev.n; i++) {
        json_error_t e;
        json_t *chunk = json_loads(ev.data[i], 0, &e);
        assert_non_null(chunk);
        assert_string_equal(json_string_value(json_object_get(chunk, "object")),
                            chat ? "chat.completion.chunk" : "text_completion");
        assert_non_null(json_object_get(chunk, "id"));
        json_t *choices = json_object_get(chunk, "choices");
        if (json_array_size(choices) == 0) {
            /* the usage chunk: last before [DONE] */
            assert_int_equal(i, ev.n - 2);
            json_t *usage = json_object_get(chunk, "usage");
            *completion_tokens = json_integer_value(json_object_get(usage, "completion_tokens"));
            json_decref(chunk);
            continue;
        }
        assert_int_equal(finishes, 0); /* nothing but usage after the finish chunk */
        json_t *c0 = json_array_get(choices, 0);
        json_t *fr = json_object_get(c0, "finish_reason");
        if (json_is_string(fr)) {
            finishes++;
            snprintf(finish, sizeof finish, "%s", json_string_value(fr));
        }
        json_t *t = chat ? json_object_get(json_object_get(c0, "delta"), "content")
                         : json_object_get(c0, "text");
        if (chat && i == 0)
            assert_string_equal(
                json_string_value(json_object_get(json_object_get(c0, "delta"), "role")),
                "assistant");
        if (json_is_string(t)) {
            size_t n = json_string_length(t);
            if (len + n + 1 > cap) {
                cap = (len + n + 1) * 2;
                text = realloc(text, cap);
            }
            memcpy(text + len, json_string_value(t), n);
            len += n;
            text[len] = '\0';
        }
        json_decref(chunk);
    }
    assert_int_equal(finishes, 1);
    sse_free(&ev);
    *finish_out = finish;
    return text;
}

/* --- endpoints ------------------------------------------------------------ */

static void test_health_and_models(void **state)
{
    (void)state;
    json_t *h = post_json(&fast, "/health", NULL, 200);
    assert_string_equal(json_string_value(json_object_get(h, "status")), "ok");
    json_decref(h);
    json_t *m = post_json(&fast, "/v1/models", NULL, 200);
    assert_string_equal(json_string_value(json_object_get(m, "object")), "list");
    json_t *d0 = json_array_get(json_object_get(m, "data"), 0);
    assert_string_equal(json_string_value(json_object_get(d0, "id")), "paced-bigram");
    assert_int_equal(json_integer_value(json_object_get(d0, "max_model_len")), 2048);
    json_decref(m);
}

static void test_tokenize_detokenize(void **state)
{
    (void)state;
    json_t *t = post_json(&fast, "/tokenize", "{\"prompt\": \"Hi!\"}", 200);
    json_t *ids = json_object_get(t, "tokens");
    assert_int_equal(json_array_size(ids), 4); /* BOS + 3 bytes */
    assert_int_equal(json_integer_value(json_array_get(ids, 0)), 256);
    assert_int_equal(json_integer_value(json_array_get(ids, 1)), 'H');
    assert_int_equal(json_integer_value(json_object_get(t, "count")), 4);
    assert_int_equal(json_integer_value(json_object_get(t, "max_model_len")), 2048);
    json_decref(t);
    t = post_json(&fast, "/tokenize", "{\"prompt\": \"Hi!\", \"add_special_tokens\": false}", 200);
    assert_int_equal(json_integer_value(json_object_get(t, "count")), 3);
    json_decref(t);
    t = post_json(&fast, "/detokenize", "{\"tokens\": [256, 72, 105, 33]}", 200);
    assert_string_equal(json_string_value(json_object_get(t, "prompt")), "Hi!");
    json_decref(t);
    /* half a code point has no JSON text: U+FFFD, as vLLM answers */
    t = post_json(&fast, "/detokenize", "{\"tokens\": [72, 195]}", 200);
    assert_string_equal(json_string_value(json_object_get(t, "prompt")), "H\xef\xbf\xbd");
    json_decref(t);
    /* NUL is text like any other */
    t = post_json(&fast, "/tokenize", "{\"prompt\": \"a\\u0000b\", \"add_special_tokens\": false}", 200);
    assert_int_equal(json_integer_value(json_object_get(t, "count")), 3);
    assert_int_equal(json_integer_value(json_array_get(json_object_get(t, "tokens"), 1)), 0);
    json_decref(t);
    expect_error(&fast, "/detokenize", "{\"tokens\": [999999]}", 400, "tokens");
    expect_error(&fast, "/tokenize", "{\"prompt\": \"x\", \"bogus\": 1}", 400, "bogus");
}

static void test_completion(void **state)
{
    (void)state;
    json_t *j = post_json(&fast, "/v1/completions",
                          "{\"model\": \"paced-bigram\", \"prompt\": \"Once\", \"max_tokens\": 12,"
                          " \"ignore_eos\": true, \"seed\": 7}", 200);
    assert_string_equal(json_string_value(json_object_get(j, "object")), "text_completion");
    assert_true(!strncmp(json_string_value(json_object_get(j, "id")), "cmpl-", 5));
    assert_string_equal(json_string_value(json_object_get(j, "model")), "paced-bigram");
    assert_true(json_integer_value(json_object_get(j, "created")) > 0);
    json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
    assert_int_equal(json_integer_value(json_object_get(c0, "index")), 0);
    assert_int_equal(json_string_length(json_object_get(c0, "text")), 12); /* 1 byte/token */
    assert_string_equal(json_string_value(json_object_get(c0, "finish_reason")), "length");
    assert_true(json_is_null(json_object_get(c0, "logprobs")));
    json_t *u = json_object_get(j, "usage");
    assert_int_equal(json_integer_value(json_object_get(u, "prompt_tokens")), 5); /* BOS+4 */
    assert_int_equal(json_integer_value(json_object_get(u, "completion_tokens")), 12);
    assert_int_equal(json_integer_value(json_object_get(u, "total_tokens")), 17);
    json_decref(j);

    /* Token ids as the prompt; same seed -> same text. */
    json_t *a = post_json(&fast, "/v1/completions",
                          "{\"prompt\": [256, 79, 110, 99, 101], \"max_tokens\": 12, "
                          "\"ignore_eos\": true, \"seed\": 7}", 200);
    json_t *b = post_json(&fast, "/v1/completions",
                          "{\"prompt\": \"Once\", \"max_tokens\": 12, \"ignore_eos\": true, "
                          "\"seed\": 7}", 200);
    assert_string_equal(
        json_string_value(json_object_get(json_array_get(json_object_get(a, "choices"), 0), "text")),
        json_string_value(json_object_get(json_array_get(json_object_get(b, "choices"), 0), "text")));
    json_decref(a);
    json_decref(b);
}

static void test_completion_logprobs(void **state)
{
    (void)state;
    json_t *j = post_json(&fast, "/v1/completions",
                          "{\"prompt\": \"a\", \"max_tokens\": 5, \"logprobs\": 3, "
                          "\"ignore_eos\": true}", 200);
    json_t *lp = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "logprobs");
    assert_int_equal(json_array_size(json_object_get(lp, "tokens")), 5);
    assert_int_equal(json_array_size(json_object_get(lp, "token_logprobs")), 5);
    assert_int_equal(json_array_size(json_object_get(lp, "text_offset")), 5);
    json_t *top = json_object_get(lp, "top_logprobs");
    assert_int_equal(json_array_size(top), 5);
    /* Exactly the 3 alternatives asked for at every position (the byte-level
     * vocabulary has no two tokens with the same text to merge), none more
     * likely than the best, and the sampled token's own value where it is
     * among them. */
    for (size_t i = 0; i < 5; i++) {
        json_t *alts = json_array_get(top, i);
        double chosen = json_real_value(json_array_get(json_object_get(lp, "token_logprobs"), i));
        const char *tok = json_string_value(json_array_get(json_object_get(lp, "tokens"), i));
        assert_true(chosen <= 0);
        if (json_object_size(alts) != 3)
            fail_msg("position %zu: %zu alternatives, asked for 3", i, json_object_size(alts));
        const char *key;
        json_t *v;
        double best = -INFINITY;
        json_object_foreach(alts, key, v) {
            assert_true(json_real_value(v) <= 0);
            if (json_real_value(v) > best)
                best = json_real_value(v);
            if (strcmp(key, tok) == 0)
                assert_true(fabs(json_real_value(v) - chosen) < 1e-5);
        }
        assert_true(best >= chosen - 1e-5);
    }
    json_decref(j);
    /* More alternatives than anyone may ask for. */
    expect_error(&fast, "/v1/completions", "{\"prompt\": \"a\", \"logprobs\": 50}", 400,
                 "logprobs");
}

/* vLLM's token-level output, as vllm_stub asks for it: the ids of the
 * tokens, and logprob names "token_id:N"; its neutral extras accepted, their
 * other values refused by name. */
static void test_token_ids_output(void **state)
{
    (void)state;
    json_t *j = post_json(&fast, "/v1/completions",
                          "{\"prompt\": [256, 79], \"max_tokens\": 5, \"ignore_eos\": true, "
                          "\"logprobs\": 2, \"return_token_ids\": true, "
                          "\"return_tokens_as_token_ids\": true, \"skip_special_tokens\": true, "
                          "\"include_stop_str_in_output\": false}", 200);
    json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
    json_t *ids = json_object_get(c0, "token_ids");
    json_t *names = json_object_get(json_object_get(c0, "logprobs"), "tokens");
    assert_int_equal(json_array_size(ids), 5);
    assert_int_equal(json_array_size(names), 5);
    const char *text = json_string_value(json_object_get(c0, "text"));
    for (size_t i = 0; i < 5; i++) {
        json_int_t id = json_integer_value(json_array_get(ids, i));
        char want[32];
        snprintf(want, sizeof want, "token_id:%d", (int)id);
        assert_string_equal(json_string_value(json_array_get(names, i)), want);
        assert_int_equal(id, (unsigned char)text[i]); /* the byte-level model: id = byte */
        const char *key;
        json_t *v;
        json_object_foreach(json_array_get(json_object_get(json_object_get(c0, "logprobs"),
                                                           "top_logprobs"), i), key, v)
            assert_true(!strncmp(key, "token_id:", 9));
    }
    json_decref(j);
    expect_error(&fast, "/v1/completions", "{\"prompt\": \"x\", \"skip_special_tokens\": false}",
                 400, "skip_special_tokens");
    expect_error(&fast, "/v1/completions", "{\"prompt\": \"x\", \"include_stop_str_in_output\": true}",
                 400, "include_stop_str_in_output");
    expect_error(&fast, "/v1/completions", "{\"prompt\": \"x\", \"return_token_ids\": 1}", 400,
                 "return_token_ids");
}

/* SGLang's native subset: /generate (whole and streamed, the output so far
 * in every chunk), /get_model_info, /health_generate, /detokenize's "text". */
static void test_sglang_native(void **state)
{
    (void)state;
    json_t *j = post_json(&fast, "/generate",
                          "{\"input_ids\": [256, 79], \"sampling_params\": {\"max_new_tokens\": 6, "
                          "\"ignore_eos\": true, \"sampling_seed\": 7}, \"return_logprob\": true, "
                          "\"top_logprobs_num\": 2, \"logprob_start_len\": -1}", 200);
    json_t *ids = json_object_get(j, "output_ids"), *meta = json_object_get(j, "meta_info");
    assert_int_equal(json_array_size(ids), 6);
    assert_int_equal(json_string_length(json_object_get(j, "text")), 6); /* 1 byte/token */
    assert_int_equal(json_integer_value(json_object_get(meta, "completion_tokens")), 6);
    assert_int_equal(json_integer_value(json_object_get(meta, "prompt_tokens")), 2);
    json_t *fr = json_object_get(meta, "finish_reason");
    assert_string_equal(json_string_value(json_object_get(fr, "type")), "length");
    json_t *lps = json_object_get(meta, "output_token_logprobs");
    assert_int_equal(json_array_size(lps), 6);
    for (size_t i = 0; i < 6; i++) {
        json_t *e = json_array_get(lps, i);
        assert_int_equal(json_integer_value(json_array_get(e, 1)),
                         json_integer_value(json_array_get(ids, i)));
        assert_true(json_real_value(json_array_get(e, 0)) <= 0);
        assert_int_equal(json_array_size(json_array_get(json_object_get(meta, "output_top_logprobs"), i)), 2);
    }
    /* the same request streamed: chunks repeat the output so far, the last
     * one equals the whole answer */
    http_reply r;
    assert_true(http_call(&fast, "/generate",
                          "{\"input_ids\": [256, 79], \"sampling_params\": {\"max_new_tokens\": 6, "
                          "\"ignore_eos\": true, \"sampling_seed\": 7}, \"stream\": true}", &r));
    assert_int_equal(r.status, 200);
    const char *last = NULL;
    size_t chunks = 0;
    for (const char *at = strstr(r.body, "data: {"); at; at = strstr(at + 1, "data: {")) {
        last = at + 6;
        chunks++;
    }
    assert_true(chunks >= 6);
    assert_non_null(strstr(r.body, "data: [DONE]"));
    json_t *end = json_loads(last, JSON_DISABLE_EOF_CHECK, NULL);
    assert_non_null(end);
    assert_true(json_equal(json_object_get(end, "output_ids"), ids));
    assert_true(json_equal(json_object_get(end, "text"), json_object_get(j, "text")));
    json_decref(end);
    http_reply_free(&r);
    json_decref(j);
    expect_error(&fast, "/generate", "{\"text\": \"x\", \"sampling_params\": {\"max_new_tokens\": 0}}",
                 400, "sampling_params.max_new_tokens");
    expect_error(&fast, "/generate", "{\"text\": \"x\", \"sampling_params\": {\"n\": 2}}", 400,
                 "sampling_params");
    expect_error(&fast, "/generate", "{\"text\": \"x\", \"input_ids\": [1]}", 400, "input_ids");
    /* a string is not ids (the fuzz target found it read as text) */
    expect_error(&fast, "/generate", "{\"input_ids\": \"{}4:\"}", 400, "input_ids");
    expect_error(&fast, "/generate", "{\"text\": [1, 2]}", 400, "text");
    expect_error(&fast, "/generate", "{\"text\": \"x\", \"logprob_start_len\": 0}", 400,
                 "logprob_start_len");
    j = post_json(&fast, "/get_model_info", NULL, 200);
    assert_true(json_is_true(json_object_get(j, "is_generation")));
    assert_string_equal(json_string_value(json_object_get(j, "model_path")), "paced-bigram");
    json_decref(j);
    assert_true(http_call(&fast, "/health_generate", NULL, &r));
    assert_int_equal(r.status, 200);
    http_reply_free(&r);
    j = post_json(&fast, "/detokenize", "{\"tokens\": [72, 105]}", 200);
    assert_string_equal(json_string_value(json_object_get(j, "text")), "Hi");
    json_decref(j);
}

static void test_chat(void **state)
{
    (void)state;
    json_t *j = post_json(&fast, "/v1/chat/completions",
                          "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
                          " {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": "
                          "\"Hello\"}]}], \"max_tokens\": 8, \"logprobs\": true, "
                          "\"top_logprobs\": 2}", 200);
    assert_string_equal(json_string_value(json_object_get(j, "object")), "chat.completion");
    json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
    json_t *msg = json_object_get(c0, "message");
    assert_string_equal(json_string_value(json_object_get(msg, "role")), "assistant");
    assert_true(json_is_string(json_object_get(msg, "content")));
    json_t *content = json_object_get(json_object_get(c0, "logprobs"), "content");
    assert_true(json_array_size(content) >= 1);
    json_t *e0 = json_array_get(content, 0);
    assert_true(json_is_string(json_object_get(e0, "token")));
    assert_true(json_is_array(json_object_get(e0, "bytes")));
    assert_int_equal(json_array_size(json_object_get(e0, "top_logprobs")), 2);
    /* The rendered template: "system: Be brief.\nuser: Hello\nassistant:" + BOS. */
    json_t *u = json_object_get(j, "usage");
    assert_int_equal(json_integer_value(json_object_get(u, "prompt_tokens")),
                     1 + (json_int_t)strlen("system: Be brief.\nuser: Hello\nassistant:"));
    json_decref(j);
    expect_error(&fast, "/v1/chat/completions",
                 "{\"messages\": [{\"role\": \"robot\", \"content\": \"x\"}]}", 400,
                 "messages[0].role");
    expect_error(&fast, "/v1/chat/completions",
                 "{\"messages\": [{\"role\": \"user\", \"content\": \"x\", \"name\": 5}]}",
                 400, "messages[0].name");
    expect_error(&fast, "/v1/chat/completions",
                 "{\"messages\": [{\"role\": \"user\", \"content\": \"x\", \"nom\": \"n\"}]}",
                 400, "messages[0].nom");
    /* "name" is accepted and ignored; "developer" is the system role: the
     * prompt is the same as with "system" and no name. */
    j = post_json(&fast, "/v1/chat/completions",
                  "{\"messages\": [{\"role\": \"developer\", \"content\": \"Be brief.\"},"
                  " {\"role\": \"user\", \"content\": \"Hello\", \"name\": \"emma\"}], "
                  "\"max_tokens\": 8, \"temperature\": 0}", 200);
    json_t *plain = post_json(&fast, "/v1/chat/completions",
                              "{\"messages\": [{\"role\": \"system\", \"content\": "
                              "\"Be brief.\"}, {\"role\": \"user\", \"content\": \"Hello\"}], "
                              "\"max_tokens\": 8, \"temperature\": 0}", 200);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "usage"),
                                                        "prompt_tokens")),
                     1 + (json_int_t)strlen("system: Be brief.\nuser: Hello\nassistant:"));
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(
            json_array_get(json_object_get(j, "choices"), 0), "message"), "content")),
        json_string_value(json_object_get(json_object_get(
            json_array_get(json_object_get(plain, "choices"), 0), "message"), "content")));
    json_decref(plain);
    json_decref(j);
    expect_error(&fast, "/v1/chat/completions", "{\"messages\": []}", 400, "messages");
}

/* A chat's reply is the completion of its rendered prompt: only a leading
 * space of the first text is trimmed, the spaces inside stay (greedy, so
 * both runs give the same tokens; this reply has spaces in it). */
static void test_chat_text_is_its_prompts_completion(void **state)
{
    (void)state;
    json_t *c = post_json(&fast, "/v1/completions",
                          "{\"prompt\": \"user: Hello\\nassistant:\", \"max_tokens\": 40, "
                          "\"temperature\": 0}", 200);
    json_t *h = post_json(&fast, "/v1/chat/completions",
                          "{\"messages\": [{\"role\": \"user\", \"content\": \"Hello\"}], "
                          "\"max_tokens\": 40, \"temperature\": 0}", 200);
    const char *text = json_string_value(
        json_object_get(json_array_get(json_object_get(c, "choices"), 0), "text"));
    const char *content = json_string_value(json_object_get(
        json_object_get(json_array_get(json_object_get(h, "choices"), 0), "message"), "content"));
    assert_non_null(text);
    assert_non_null(content);
    if (text[0] == ' ')
        text++;
    assert_non_null(strchr(text + 1, ' ')); /* else this would show nothing */
    assert_string_equal(content, text);
    json_decref(c);
    json_decref(h);
}

/* The server holds top_logprobs to the backend's topk_max itself (8 for
 * counting_backend, below the API's own limit of 20), with the capability
 * named. */
static void test_topk_max_of_the_backend(void **state)
{
    (void)state;
    test_server counting;
    const char *args[] = {"--plugin-dir", PACED_PLUGIN_DIR, "--backend", "counting_backend", NULL};
    assert_true(test_server_start(&counting, args));
    json_t *ok = post_json(&counting, "/v1/completions",
                           "{\"prompt\": \"a\", \"max_tokens\": 2, \"logprobs\": 8}", 200);
    json_decref(ok);
    json_t *j = post_json(&counting, "/v1/completions",
                          "{\"prompt\": \"a\", \"max_tokens\": 2, \"logprobs\": 9}", 400);
    json_t *err = json_object_get(j, "error");
    assert_string_equal(json_string_value(json_object_get(err, "param")), "logprobs");
    const char *msg = json_string_value(json_object_get(err, "message"));
    if (!msg || !strstr(msg, "capability topk_max"))
        fail_msg("message does not name the capability: %s", msg ? msg : "(none)");
    json_decref(j);
    assert_int_equal(test_server_stop(&counting), 0);
}

static void test_stream_framing(void **state)
{
    (void)state;
    const char *solo = "{\"prompt\": \"It is\", \"max_tokens\": 20, \"ignore_eos\": true, "
                       "\"seed\": 11}";
    const char *streamed = "{\"prompt\": \"It is\", \"max_tokens\": 20, \"ignore_eos\": true, "
                           "\"seed\": 11, \"stream\": true, "
                           "\"stream_options\": {\"include_usage\": true}}";
    json_t *whole = post_json(&fast, "/v1/completions", solo, 200);
    http_reply r;
    assert_true(http_call(&fast, "/v1/completions", streamed, &r));
    assert_int_equal(r.status, 200);
    assert_string_equal(r.content_type, "text/event-stream");
    const char *finish;
    json_int_t n_tokens;
    char *text = stream_text(r.body, false, &finish, &n_tokens);
    assert_string_equal(finish, "length");
    assert_int_equal(n_tokens, 20);
    /* Streamed text == the non-streamed text for the same request. */
    assert_string_equal(text, json_string_value(json_object_get(
                                  json_array_get(json_object_get(whole, "choices"), 0), "text")));
    free(text);
    http_reply_free(&r);
    json_decref(whole);

    /* Chat: the role chunk first, no usage chunk when not asked. */
    assert_true(http_call(&fast, "/v1/chat/completions",
                          "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], "
                          "\"max_tokens\": 6, \"stream\": true}", &r));
    assert_int_equal(r.status, 200);
    text = stream_text(r.body, true, &finish, &n_tokens);
    assert_int_equal(n_tokens, -1);
    free(text);
    http_reply_free(&r);
}

/* Text the engine held back (it might have begun a stop string) when the
 * stream ends on a stop token id travels in the FINISH event; it must reach
 * the client, streamed or not. Greedy decoding makes the text known: end it
 * with stop_token_ids = [the k-th byte] and a stop string that the (k-1)-th
 * byte begins, so that byte is held back when the stop token arrives. */
static void test_held_back_tail_reaches_client(void **state)
{
    (void)state;
    json_t *j = post_json(&fast, "/v1/completions",
                          "{\"prompt\": \"Once\", \"max_tokens\": 16, \"ignore_eos\": true, "
                          "\"temperature\": 0}", 200);
    char greedy[32];
    snprintf(greedy, sizeof greedy, "%s", json_string_value(json_object_get(
                                              json_array_get(json_object_get(j, "choices"), 0),
                                              "text")));
    json_decref(j);
    assert_int_equal(strlen(greedy), 16);
    size_t k = 1; /* first byte not seen before it: the stop token ends exactly there */
    while (k < 16 && memchr(greedy, greedy[k], k))
        k++;
    assert_true(k < 16);
    char want[32];
    snprintf(want, sizeof want, "%.*s", (int)k, greedy);
    /* '#' never comes out of the bigram model: the stop string never matches. */
    char body[256];
    snprintf(body, sizeof body, "{\"prompt\": \"Once\", \"max_tokens\": 16, \"temperature\": 0, "
             "\"stop_token_ids\": [%d], \"stop\": [\"%c#\"]}", (unsigned char)greedy[k],
             greedy[k - 1]);
    j = post_json(&fast, "/v1/completions", body, 200);
    json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
    assert_string_equal(json_string_value(json_object_get(c0, "finish_reason")), "stop");
    assert_string_equal(json_string_value(json_object_get(c0, "text")), want);
    json_decref(j);

    snprintf(body, sizeof body, "{\"prompt\": \"Once\", \"max_tokens\": 16, \"temperature\": 0, "
             "\"stop_token_ids\": [%d], \"stop\": [\"%c#\"], \"stream\": true}",
             (unsigned char)greedy[k], greedy[k - 1]);
    http_reply r;
    assert_true(http_call(&fast, "/v1/completions", body, &r));
    assert_int_equal(r.status, 200);
    const char *finish;
    json_int_t n_tokens;
    char *text = stream_text(r.body, false, &finish, &n_tokens);
    assert_string_equal(finish, "stop");
    assert_string_equal(text, want);
    free(text);
    http_reply_free(&r);
}

static void test_bad_requests(void **state)
{
    (void)state;
    expect_error(&fast, "/v1/completions", "{\"prompt\": \"x\",", 400, NULL);
    expect_error(&fast, "/v1/completions", "[1, 2]", 400, NULL);
    expect_error(&fast, "/v1/completions", "{\"prompt\": \"x\", \"best_of\": 2}", 400, "best_of");
    expect_error(&fast, "/v1/completions", "{\"prompt\": \"x\", \"echo\": true}", 400, "echo");
    expect_error(&fast, "/v1/completions", "{\"prompt\": \"x\", \"n\": 9}", 400, "n");
    expect_error(&fast, "/v1/completions", "{\"prompt\": \"x\", \"n\": 0}", 400, "n");
    expect_error(&fast, "/v1/completions", "{\"prompt\": \"x\", \"temperature\": -1}", 400,
                 "temperature");
    expect_error(&fast, "/v1/completions", "{\"prompt\": \"x\", \"top_p\": \"high\"}", 400,
                 "top_p");
    expect_error(&fast, "/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": 0}", 400,
                 "max_tokens");
    expect_error(&fast, "/v1/completions", "{\"max_tokens\": 3}", 400, "prompt");
    expect_error(&fast, "/v1/completions", "{\"prompt\": [1, 99999]}", 400, "prompt");
    expect_error(&fast, "/v1/completions", "{\"prompt\": \"x\", \"stream\": true, "
                 "\"stream_options\": {\"include_usage\": true, \"extra\": 1}}", 400,
                 "stream_options.extra");
    expect_error(&fast, "/v1/completions", "{\"prompt\": \"x\", \"model\": \"gpt-4\"}", 404,
                 "model");
    expect_error(&fast, "/nowhere", NULL, 404, NULL);
    expect_error(&fast, "/v1/completions", NULL, 405, NULL);
    expect_error(&fast, "/health", "{}", 405, NULL);

    /* Over the 64 KiB limit this server was started with. */
    size_t big = 100 * 1024;
    char *body = malloc(big + 32);
    strcpy(body, "{\"prompt\": \"");
    memset(body + 12, 'a', big);
    strcpy(body + 12 + big, "\"}");
    http_reply r;
    assert_true(http_call(&fast, "/v1/completions", body, &r));
    assert_int_equal(r.status, 413);
    http_reply_free(&r);
    free(body);
    /* At the limit exactly the body is taken; one byte more is not (JSON
     * lets the padding be trailing white space). */
    for (size_t len = 65536; len <= 65537; len++) {
        char *edge = malloc(len + 1);
        const char *json = "{\"prompt\": \"x\", \"max_tokens\": 1}";
        memset(edge, ' ', len);
        memcpy(edge, json, strlen(json));
        edge[len] = '\0';
        assert_true(http_call(&fast, "/v1/completions", edge, &r));
        if (r.status != (len == 65536 ? 200 : 413))
            fail_msg("a %zu-byte body with max_body_bytes 65536: %ld %s", len, r.status, r.body);
        http_reply_free(&r);
        free(edge);
    }
    /* The server still answers afterwards. */
    json_t *h = post_json(&fast, "/health", NULL, 200);
    json_decref(h);
}

/* --- disconnect, concurrency, overload, shutdown ------------------------------- */

typedef struct hangup {
    int chunks;
} hangup;

/* Take two SSE events, then refuse the rest: curl drops the connection. */
static size_t hang_up_after_two(char *data, size_t size, size_t nmemb, void *user)
{
    hangup *h = user;
    for (size_t i = 0; i + 1 < size * nmemb; i++)
        if (data[i] == '\n' && data[i + 1] == '\n')
            h->chunks++;
    return h->chunks >= 2 ? 0 : size * nmemb;
}

static void test_disconnect_cancels(void **state)
{
    (void)state;
    double cancelled_before = metric_value(&paced, "inferlab_http_finished_total{reason=\"cancelled\"}");
    /* 1,000 tokens at 5 ms a step would run for 5 s. */
    CURL *c = curl_easy_init();
    char url[128];
    snprintf(url, sizeof url, "%s/v1/completions", paced.base);
    const char *body = "{\"prompt\": \"x\", \"max_tokens\": 1000, \"ignore_eos\": true, "
                       "\"stream\": true}";
    hangup h = {0};
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, hang_up_after_two);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &h);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 20L);
    CURLcode rc = curl_easy_perform(c);
    curl_easy_cleanup(c); /* closes the connection */
    assert_int_equal(rc, CURLE_WRITE_ERROR);
    assert_true(h.chunks >= 2);

    /* Within a bounded time the request leaves the engine as cancelled and
     * nothing is running. */
    bool done = false;
    for (int i = 0; i < 100 && !done; i++) {
        sleep_ms(50);
        done = metric_value(&paced, "inferlab_http_inflight_requests") == 0 &&
               metric_value(&paced, "inferlab:num_requests_running") == 0;
    }
    assert_true(done);
    assert_true(metric_value(&paced, "inferlab_http_finished_total{reason=\"cancelled\"}") ==
                cancelled_before + 1);
    assert_true(metric_value(&paced, "inferlab_http_client_disconnects_total") >= 1);
}

#define N_STREAMS 6

typedef struct stream_buf {
    char *data;
    size_t len;
    bool retry_after; /* the response had a Retry-After header */
} stream_buf;

static size_t note_retry_after(char *data, size_t size, size_t nmemb, void *user)
{
    stream_buf *b = user;
    if (size * nmemb > 12 && !strncasecmp(data, "Retry-After:", 12))
        b->retry_after = true;
    return size * nmemb;
}

static size_t into_buf(char *data, size_t size, size_t nmemb, void *user)
{
    stream_buf *b = user;
    return http_buf_append(&b->data, &b->len, data, size * nmemb) ? size * nmemb : 0;
}

/* Run `n` streaming requests at once with curl multi; bodies[i] -> out[i].
 * While they run, /metrics is read between rounds: the largest
 * inferlab:num_requests_running seen goes to *max_running (when not NULL),
 * i.e. how many of them the engine really ran in one batch. */
static void run_concurrently_seen(const test_server *s, const char *path, char *const *bodies,
                                  size_t n, stream_buf *out, long *status, double *max_running)
{
    CURLM *m = curl_multi_init();
    CURL *easy[16];
    char url[128];
    snprintf(url, sizeof url, "%s%s", s->base, path);
    for (size_t i = 0; i < n; i++) {
        memset(&out[i], 0, sizeof out[i]);
        easy[i] = curl_easy_init();
        curl_easy_setopt(easy[i], CURLOPT_URL, url);
        curl_easy_setopt(easy[i], CURLOPT_POSTFIELDS, bodies[i]);
        curl_easy_setopt(easy[i], CURLOPT_WRITEFUNCTION, into_buf);
        curl_easy_setopt(easy[i], CURLOPT_WRITEDATA, &out[i]);
        curl_easy_setopt(easy[i], CURLOPT_HEADERFUNCTION, note_retry_after);
        curl_easy_setopt(easy[i], CURLOPT_HEADERDATA, &out[i]);
        curl_easy_setopt(easy[i], CURLOPT_TIMEOUT, 30L);
        curl_multi_add_handle(m, easy[i]);
    }
    int running = 1;
    if (max_running)
        *max_running = 0;
    for (int rounds = 0; running && rounds < 100000; rounds++) {
        curl_multi_perform(m, &running);
        if (running && max_running) {
            double now = metric_value(s, "inferlab:num_requests_running");
            if (now > *max_running)
                *max_running = now;
        }
        if (running)
            curl_multi_poll(m, NULL, 0, max_running ? 2 : 100, NULL);
    }
    assert_int_equal(running, 0);
    for (size_t i = 0; i < n; i++) {
        curl_easy_getinfo(easy[i], CURLINFO_RESPONSE_CODE, &status[i]);
        curl_multi_remove_handle(m, easy[i]);
        curl_easy_cleanup(easy[i]);
    }
    curl_multi_cleanup(m);
    /* These bypass http_call: hold them to the same response checks. */
    static char empty[] = "";
    for (size_t i = 0; i < n && rc_covers(path); i++) {
        http_reply as_reply = {.status = status[i], .body = out[i].data ? out[i].data : empty,
                               .len = out[i].len};
        char why[1024];
        if (!rc_check_reply(path, bodies[i], &as_reply, why, sizeof why)) {
            rc_note_failure("response", path, bodies[i], why);
            fail_msg("%s", why);
        }
    }
}

static void run_concurrently(const test_server *s, const char *path, char *const *bodies,
                             size_t n, stream_buf *out, long *status)
{
    run_concurrently_seen(s, path, bodies, n, out, status, NULL);
}

static void test_concurrent_streams_match_solo(void **state)
{
    (void)state;
    char *bodies[N_STREAMS];
    for (int i = 0; i < N_STREAMS; i++) {
        bodies[i] = malloc(256);
        snprintf(bodies[i], 256, "{\"prompt\": \"%c%c\", \"max_tokens\": %d, \"seed\": %d, "
                 "\"ignore_eos\": true, \"stream\": true}", 'a' + i, 'k' + i, 24 + 4 * i, 100 + i);
    }
    stream_buf together[N_STREAMS];
    long status[N_STREAMS];
    double tokens_before = metric_value(&paced, "inferlab:generation_tokens_total");
    double batched = 0;
    run_concurrently_seen(&paced, "/v1/completions", bodies, N_STREAMS, together, status, &batched);
    /* The streams ran together in the engine's batch, not one after another
     * (each runs for >= 24 steps of 5 ms, time for many /metrics reads). */
    print_message("paced: up to %.0f of %d streams running at once\n", batched, N_STREAMS);
    if (batched < 2)
        fail_msg("at most %.0f of %d concurrent streams were running at once", batched, N_STREAMS);
    double want_tokens = 0;
    for (int i = 0; i < N_STREAMS; i++)
        want_tokens += 24 + 4 * i;
    assert_true(metric_value(&paced, "inferlab:generation_tokens_total") - tokens_before ==
                want_tokens);
    for (int i = 0; i < N_STREAMS; i++) {
        assert_int_equal(status[i], 200);
        stream_buf alone;
        long st;
        run_concurrently(&paced, "/v1/completions", &bodies[i], 1, &alone, &st);
        assert_int_equal(st, 200);
        const char *f1, *f2;
        json_int_t n1, n2;
        char *t1 = stream_text(together[i].data, false, &f1, &n1);
        char *t2 = stream_text(alone.data, false, &f2, &n2);
        assert_int_equal(strlen(t1), 24 + 4 * i);
        assert_string_equal(t1, t2);
        free(t1);
        free(t2);
        free(alone.data);
        free(together[i].data);
        free(bodies[i]);
    }
}

/* The same on the real backend (its embedded default model): batched GEMMs
 * must not change what each stream samples. 160 tokens a chat, so the
 * streams run long enough for /metrics to see them batched together. */
static void test_torchlike_concurrent_chat(void **state)
{
    (void)state;
    test_server s;
    const char *args[] = {"--plugin-dir", SHIPPED_PLUGIN_DIR, "--backend", "torchlike", NULL};
    assert_true(test_server_start(&s, args));
    enum { N = 4 };
    char *bodies[N];
    for (int i = 0; i < N; i++) {
        bodies[i] = malloc(256);
        snprintf(bodies[i], 256, "{\"messages\": [{\"role\": \"user\", \"content\": "
                 "\"Tell me of %s.\"}], \"max_tokens\": 160, \"seed\": %d, "
                 "\"ignore_eos\": true, \"stream\": true}",
                 (const char *[]){"Emma", "Bath", "the ball", "Mr. Knightley"}[i], 7 + i);
    }
    stream_buf together[N];
    long status[N];
    double batched = 0;
    run_concurrently_seen(&s, "/v1/chat/completions", bodies, N, together, status, &batched);
    print_message("torchlike: up to %.0f of %d chats running at once\n", batched, N);
    for (int i = 0; i < N; i++) {
        assert_int_equal(status[i], 200);
        stream_buf alone;
        long st;
        run_concurrently(&s, "/v1/chat/completions", &bodies[i], 1, &alone, &st);
        assert_int_equal(st, 200);
        const char *f1, *f2;
        json_int_t n1, n2;
        char *t1 = stream_text(together[i].data, true, &f1, &n1);
        char *t2 = stream_text(alone.data, true, &f2, &n2);
        assert_string_equal(t1, t2);
        assert_string_equal(f1, f2);
        free(t1);
        free(t2);
        free(alone.data);
        free(together[i].data);
        free(bodies[i]);
    }
    assert_int_equal(test_server_stop(&s), 0);
    if (batched < 2) /* after the stop: a failure must not leave the server running */
        fail_msg("at most %.0f of %d concurrent chats were running at once", batched, N);
}

static void test_unavailable_backend(void **state)
{
    (void)state;
    test_server s;
    const char *args[] = {"--plugin-dir", SHIPPED_PLUGIN_DIR, "--backend", "vllm_stub", NULL};
    assert_true(test_server_start(&s, args));
    http_reply r;
    assert_true(http_call(&s, "/health", NULL, &r));
    assert_int_equal(r.status, 503);
    assert_non_null(strstr(r.body, "vLLM")); /* the probe's reason */
    http_reply_free(&r);
    assert_true(http_call(&s, "/v1/completions", "{\"prompt\": \"x\"}", &r));
    assert_int_equal(r.status, 503);
    http_reply_free(&r);
    assert_int_equal(test_server_stop(&s), 0);
}

static void test_overload_503(void **state)
{
    (void)state;
    test_server s;
    const char *args[] = {"--plugin-dir", PACED_PLUGIN_DIR, "--backend", "paced_backend",
                          "--set", "paced_backend.step_ms=20", "--set",
                          "scheduler.max_running=1", "--set", "scheduler.max_waiting=1", NULL};
    assert_true(test_server_start(&s, args));
    char *bodies[4];
    for (int i = 0; i < 4; i++)
        bodies[i] = "{\"prompt\": \"x\", \"max_tokens\": 20, \"ignore_eos\": true, "
                    "\"stream\": true}";
    stream_buf out[4];
    long status[4];
    run_concurrently(&s, "/v1/completions", bodies, 4, out, status);
    int ok = 0, overloaded = 0;
    for (int i = 0; i < 4; i++) {
        if (status[i] == 200)
            ok++;
        if (status[i] == 503) {
            overloaded++;
            assert_non_null(strstr(out[i].data, "overloaded"));
            assert_true(out[i].retry_after);
        }
        free(out[i].data);
    }
    assert_true(ok >= 1);
    assert_true(overloaded >= 1);
    assert_int_equal(ok + overloaded, 4);
    assert_int_equal(test_server_stop(&s), 0);
}

static void test_graceful_shutdown(void **state)
{
    (void)state;
    /* A stream in flight when SIGTERM arrives still completes, then exit 0. */
    test_server s;
    const char *args[] = {"--plugin-dir", PACED_PLUGIN_DIR, "--backend", "paced_backend",
                          "--set", "paced_backend.step_ms=10", NULL};
    assert_true(test_server_start(&s, args));
    CURLM *m = curl_multi_init();
    CURL *c = curl_easy_init();
    char url[128];
    snprintf(url, sizeof url, "%s/v1/completions", s.base);
    stream_buf out = {0};
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, "{\"prompt\": \"x\", \"max_tokens\": 60, "
                                            "\"ignore_eos\": true, \"stream\": true}");
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, into_buf);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &out);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
    curl_multi_add_handle(m, c);
    int running = 1;
    bool signalled = false;
    for (int rounds = 0; running && rounds < 100000; rounds++) {
        curl_multi_perform(m, &running);
        if (!signalled && out.len > 0) {
            kill(s.pid, SIGTERM);
            signalled = true;
        }
        if (running)
            curl_multi_poll(m, NULL, 0, 50, NULL);
    }
    assert_true(signalled);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_multi_remove_handle(m, c);
    curl_easy_cleanup(c);
    curl_multi_cleanup(m);
    assert_int_equal(status, 200);
    http_reply as_reply = {.status = status, .body = out.data, .len = out.len};
    char why[1024];
    if (!rc_check_reply("/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": 60, "
                        "\"ignore_eos\": true, \"stream\": true}", &as_reply, why, sizeof why))
        fail_msg("%s", why);
    const char *finish;
    json_int_t n;
    char *text = stream_text(out.data, false, &finish, &n);
    assert_string_equal(finish, "length");
    assert_int_equal(strlen(text), 60);
    free(text);
    free(out.data);
    assert_int_equal(test_server_stop(&s), 0);
}

/* --- invariants over random requests ------------------------------------------ */

static uint64_t rnd_next(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

#define PICK(x, arr) (arr)[rnd_next(x) % (sizeof(arr) / sizeof((arr)[0]))]

/* One request drawn from the parameter domains: completion or chat,
 * streamed or not, each sampling parameter at a value of its domain (edges
 * included), limits through max_tokens or max_completion_tokens (or both),
 * stop strings, logprobs, n. */
static char *random_request(uint64_t *x, bool *chat)
{
    static const char *const words[] = {"Once", " upon", " a", " time", " the", " cat", "\n",
                                        " sat", " é", " 日本", "  ", " e", "th", "."};
    static const double temps[] = {0.0, 0.3, 0.7, 1.0, 1.5, 2.0};
    static const double top_ps[] = {1.0, 0.95, 0.5, 0.1};
    static const int top_ks[] = {0, 1, 2, 5, 40, -1};
    static const double min_ps[] = {0.0, 0.05, 0.2};
    static const double reps[] = {1.0, 1.0, 1.1, 1.5, 0.8};
    static const double pens[] = {0.0, 0.0, 0.5, -1.0, 2.0, -2.0};
    static const int limits[] = {1, 2, 3, 5, 8, 17, 40};
    static const char *const stops[] = {"e", " ", "th", "a b", "\n", "xyz"};
    *chat = rnd_next(x) % 2;
    json_t *r = json_object();
    char prompt[256] = "";
    int nw = 1 + (int)(rnd_next(x) % 6);
    for (int i = 0; i < nw; i++)
        strncat(prompt, PICK(x, words), sizeof prompt - strlen(prompt) - 1);
    if (*chat)
        json_object_set_new(r, "messages", json_pack("[{s:s, s:s}]", "role", "user",
                                                     "content", prompt));
    else
        json_object_set_new(r, "prompt", json_string(prompt));
    json_object_set_new(r, "temperature", json_real(PICK(x, temps)));
    if (rnd_next(x) % 2)
        json_object_set_new(r, "top_p", json_real(PICK(x, top_ps)));
    if (rnd_next(x) % 2)
        json_object_set_new(r, "top_k", json_integer(PICK(x, top_ks)));
    if (rnd_next(x) % 3 == 0)
        json_object_set_new(r, "min_p", json_real(PICK(x, min_ps)));
    if (rnd_next(x) % 3 == 0)
        json_object_set_new(r, "repetition_penalty", json_real(PICK(x, reps)));
    if (rnd_next(x) % 3 == 0)
        json_object_set_new(r, "presence_penalty", json_real(PICK(x, pens)));
    if (rnd_next(x) % 3 == 0)
        json_object_set_new(r, "frequency_penalty", json_real(PICK(x, pens)));
    json_object_set_new(r, "seed", json_integer((json_int_t)(rnd_next(x) % 100000)));
    int how = (int)(rnd_next(x) % 4); /* which field sets the limit */
    if (how == 0 || how == 2 || !*chat)
        json_object_set_new(r, "max_tokens", json_integer(PICK(x, limits)));
    if (*chat && (how == 1 || how == 2))
        json_object_set_new(r, "max_completion_tokens", json_integer(PICK(x, limits)));
    if (!*chat && how == 3)
        json_object_del(r, "max_tokens"); /* the default limit */
    if (rnd_next(x) % 2)
        json_object_set_new(r, "ignore_eos", json_true());
    int n_stop = (int)(rnd_next(x) % 4);
    if (n_stop) {
        json_t *st = json_array();
        for (int i = 0; i < n_stop; i++)
            json_array_append_new(st, json_string(PICK(x, stops)));
        json_object_set_new(r, "stop", st);
    }
    if (rnd_next(x) % 2) {
        int top = (int)(rnd_next(x) % 6);
        if (*chat) {
            json_object_set_new(r, "logprobs", json_true());
            json_object_set_new(r, "top_logprobs", json_integer(top));
        } else {
            json_object_set_new(r, "logprobs", json_integer(top));
        }
    }
    if (!*chat && rnd_next(x) % 4 == 0)
        json_object_set_new(r, "return_token_ids", json_true());
    if (rnd_next(x) % 4 == 0)
        json_object_set_new(r, "n", json_integer(1 + (json_int_t)(rnd_next(x) % 3)));
    if (rnd_next(x) % 2) {
        json_object_set_new(r, "stream", json_true());
        if (rnd_next(x) % 2)
            json_object_set_new(r, "stream_options", json_pack("{s:b}", "include_usage", 1));
    }
    char *body = json_dumps(r, JSON_COMPACT);
    json_decref(r);
    return body;
}

/* Requests drawn at random, each through the response checks and against
 * its twin (streamed if it was not, and the other way round). The seed is
 * printed; ILAB_TEST_SEED replays one. */
static void test_random_requests_hold_the_invariants(void **state)
{
    (void)state;
    uint64_t seed = 0x5eed31;
    const char *env = getenv("ILAB_TEST_SEED");
    if (env && *env)
        seed = strtoull(env, NULL, 0);
    print_message("random requests: seed %#llx (ILAB_TEST_SEED replays it)\n",
                  (unsigned long long)seed);
    uint64_t x = seed ? seed : 1;
    unsigned replies0, metrics0, ledgers0 = rc_ledgers_checked();
    rc_counts(&replies0, &metrics0);
    int ok_200 = 0, chats = 0;
    enum { N = 80 };
    for (int i = 0; i < N; i++) {
        bool chat;
        char *body = random_request(&x, &chat);
        const char *path = chat ? "/v1/chat/completions" : "/v1/completions";
        http_reply r;
        assert_true(http_call(&fast, path, body, &r));
        if (r.status != 200)
            fail_msg("request %d: %s -> %ld: %s", i, body, r.status, r.body);
        char why[1024];
        if (!rc_check_twin(&fast, path, body, &r, why, sizeof why)) {
            rc_note_failure("twin", path, body, why);
            fail_msg("request %d: %s", i, why);
        }
        ok_200++;
        chats += chat;
        http_reply_free(&r);
        free(body);
    }
    unsigned replies, metrics;
    rc_counts(&replies, &metrics);
    print_message("%d requests (%d chat) and their twins; %u replies and %u /metrics "
                  "snapshots checked\n", ok_200, chats, replies - replies0, metrics - metrics0);
    /* Each request and its twin went through the checks, /metrics after each. */
    assert_true(replies - replies0 >= 2 * N);
    assert_true(metrics - metrics0 >= 2 * N);
    /* One request at a time: a reply is the only one between two snapshots
     * and is checked against what /metrics counted, unless it ended without
     * its usage (a stream with an error) or had no engine request. */
    print_message("%u replies checked against the /metrics ledger\n",
                  rc_ledgers_checked() - ledgers0);
    assert_true(rc_ledgers_checked() - ledgers0 >= N);
    assert_true(chats > N / 4 && chats < 3 * N / 4);
}

/* Streamed with logprobs and stop strings: tokens held back for a possible
 * stop keep their logprobs (one entry per token, as many as usage counts),
 * and the stream equals the whole answer. */
static void test_stream_logprobs_with_stop_strings(void **state)
{
    (void)state;
    static const char *const bodies[] = {
        "{\"prompt\": \"Once\", \"max_tokens\": 40, \"ignore_eos\": true, \"seed\": 3, "
        "\"logprobs\": 1, \"stop\": [\"zzq\", \"e t\", \"qqq\"], \"stream\": true, "
        "\"stream_options\": {\"include_usage\": true}}",
        "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_completion_tokens\": "
        "40, \"ignore_eos\": true, \"seed\": 5, \"logprobs\": true, \"top_logprobs\": 2, "
        "\"stop\": [\"a b c\", \"xy\"], \"stream\": true, \"stream_options\": "
        "{\"include_usage\": true}}",
    };
    for (size_t i = 0; i < 2; i++) {
        const char *path = i ? "/v1/chat/completions" : "/v1/completions";
        http_reply r;
        assert_true(http_call(&fast, path, bodies[i], &r));
        assert_int_equal(r.status, 200);
        char why[1024];
        if (!rc_check_twin(&fast, path, bodies[i], &r, why, sizeof why))
            fail_msg("%s", why);
        http_reply_free(&r);
    }
}

/* A prompt longer than the context is the client's error: 400
 * invalid_request_error, streamed or not, completion or chat. */
static void test_prompt_longer_than_the_context(void **state)
{
    (void)state;
    size_t n = 2100; /* the paced model's context is 2048 (one token a byte) */
    char *text = malloc(n + 1);
    memset(text, 'a', n);
    text[n] = '\0';
    for (int k = 0; k < 4; k++) {
        bool chat = k & 1, stream = k & 2;
        json_t *req = chat ? json_pack("{s:[{s:s, s:s}], s:i, s:b}", "messages", "role", "user",
                                       "content", text, "max_tokens", 4, "stream", stream)
                           : json_pack("{s:s, s:i, s:b}", "prompt", text, "max_tokens", 4,
                                       "stream", stream);
        char *body = json_dumps(req, JSON_COMPACT);
        json_decref(req);
        json_t *j = post_json(&fast, chat ? "/v1/chat/completions" : "/v1/completions", body,
                              400);
        json_t *err = json_object_get(j, "error");
        assert_string_equal(json_string_value(json_object_get(err, "type")),
                            "invalid_request_error");
        const char *msg = json_string_value(json_object_get(err, "message"));
        if (!strstr(msg, "context"))
            fail_msg("the message does not say what is wrong: %s", msg);
        json_decref(j);
        free(body);
    }
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_health_and_models),
        cmocka_unit_test(test_tokenize_detokenize),
        cmocka_unit_test(test_completion),
        cmocka_unit_test(test_completion_logprobs),
        cmocka_unit_test(test_token_ids_output),
        cmocka_unit_test(test_sglang_native),
        cmocka_unit_test(test_chat),
        cmocka_unit_test(test_chat_text_is_its_prompts_completion),
        cmocka_unit_test(test_topk_max_of_the_backend),
        cmocka_unit_test(test_stream_framing),
        cmocka_unit_test(test_held_back_tail_reaches_client),
        cmocka_unit_test(test_bad_requests),
        cmocka_unit_test(test_random_requests_hold_the_invariants),
        cmocka_unit_test(test_stream_logprobs_with_stop_strings),
        cmocka_unit_test(test_prompt_longer_than_the_context),
        cmocka_unit_test(test_disconnect_cancels),
        cmocka_unit_test(test_concurrent_streams_match_solo),
        cmocka_unit_test(test_torchlike_concurrent_chat),
        cmocka_unit_test(test_unavailable_backend),
        cmocka_unit_test(test_overload_503),
        cmocka_unit_test(test_graceful_shutdown),
    };
    int rc = cmocka_run_group_tests(tests, start_servers, stop_servers);
    /* A response check that failed where its call's result was not asserted. */
    if (rc_failures())
        fprintf(stderr, "%u response check(s) failed\n", rc_failures());
    return ilab_test_exit(rc || rc_failures());
}
