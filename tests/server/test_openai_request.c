/* Request parsing and the chat template, without a server. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include "ilab_skip.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_error.h"

#include "chat_template.h"
#include "openai_request.h"

static bool parse(ilab_api_kind kind, const char *body, ilab_api_request *r, ilab_api_error *e)
{
    return ilab_api_request_parse(kind, body, strlen(body), r, e);
}

static void test_defaults(void **state)
{
    (void)state;
    ilab_api_request r;
    ilab_api_error e;
    assert_true(parse(ILAB_API_COMPLETION, "{\"prompt\": \"Hello\"}", &r, &e));
    assert_string_equal(r.prompt, "Hello");
    assert_true(r.sampling.temperature == 0.8f);
    assert_true(r.sampling.top_p == 0.9f);
    assert_int_equal(r.sampling.seed, ILAB_SAMPLING_DEFAULT_SEED);
    assert_int_equal(r.max_tokens, 16);
    assert_false(r.stream);
    assert_int_equal(r.n_stop, 0);
    ilab_api_request_free(&r);
}

static void test_fields(void **state)
{
    (void)state;
    ilab_api_request r;
    ilab_api_error e;
    assert_true(parse(ILAB_API_COMPLETION,
                      "{\"prompt\": [1, 2, 3], \"temperature\": 0, \"top_k\": -1, \"seed\": 9, \"presence_penalty\": 0.5, \"frequency_penalty\": -1.25,"
                      " \"stop\": [\"a\", \"bc\"], \"stream\": true, \"stream_options\": "
                      "{\"include_usage\": true}, \"logprobs\": 2, \"max_tokens\": 5}", &r, &e));
    assert_null(r.prompt);
    assert_int_equal(r.n_prompt_tokens, 3);
    assert_true(r.sampling.temperature == 0.0f);
    assert_int_equal(r.sampling.top_k, 0);
    assert_int_equal(r.sampling.seed, 9);
    assert_true(r.sampling.presence_penalty == 0.5f);
    assert_true(r.sampling.frequency_penalty == -1.25f);
    assert_int_equal(r.n_stop, 2);
    assert_string_equal(r.stop[1], "bc");
    assert_true(r.stream && r.include_usage && r.logprobs);
    assert_int_equal(r.top_logprobs, 2);
    assert_int_equal(r.max_tokens, 5);
    ilab_api_request_free(&r);
    /* Token ids start at 0: 0 is an id (a vocabulary's <unk> or "!"), -1 is not. */
    assert_true(parse(ILAB_API_COMPLETION, "{\"prompt\": [0, 7, 0], \"stop_token_ids\": [0]}", &r, &e));
    assert_int_equal(r.n_prompt_tokens, 3);
    assert_int_equal(r.prompt_tokens[0], 0);
    assert_int_equal(r.n_stop_token_ids, 1);
    assert_int_equal(r.stop_token_ids[0], 0);
    ilab_api_request_free(&r);
    assert_false(parse(ILAB_API_COMPLETION, "{\"prompt\": [3, -1]}", &r, &e));
    assert_string_equal(e.param, "prompt");
    assert_non_null(strstr(e.message, "prompt[1]"));
    assert_false(parse(ILAB_API_COMPLETION, "{\"prompt\": [3], \"stop_token_ids\": [-1]}", &r, &e));
    assert_int_equal(e.http_status, 400);
}

static void test_fail_closed(void **state)
{
    (void)state;
    ilab_api_request r;
    ilab_api_error e;
    assert_false(parse(ILAB_API_COMPLETION, "{\"prompt\": \"x\", \"suffix\": \"y\"}", &r, &e));
    assert_int_equal(e.http_status, 400);
    assert_string_equal(e.param, "suffix");
    assert_non_null(strstr(e.message, "suffix"));
    assert_false(parse(ILAB_API_COMPLETION, "{\"prompt\": \"x\", \"presence_penalty\": 2.5}", &r, &e));
    assert_string_equal(e.param, "presence_penalty");
    assert_false(parse(ILAB_API_COMPLETION, "{\"prompt\": \"x\", \"frequency_penalty\": \"1\"}", &r, &e));
    assert_string_equal(e.param, "frequency_penalty");
    assert_false(parse(ILAB_API_COMPLETION, "{\"prompt\": \"x\", \"prompt\": \"y\"}", &r, &e));
    assert_int_equal(e.http_status, 400); /* duplicate keys */
    assert_false(parse(ILAB_API_COMPLETION, "{\"prompt\": [\"a\", \"b\"]}", &r, &e));
    assert_string_equal(e.param, "prompt");
    assert_false(parse(ILAB_API_COMPLETION, "{\"prompt\": \"x\", \"stop\": \"\"}", &r, &e));
    assert_string_equal(e.param, "stop");
    assert_false(parse(ILAB_API_CHAT, "{\"messages\": [{\"role\": \"user\"}]}", &r, &e));
    assert_string_equal(e.param, "messages[0].content");
    assert_false(parse(ILAB_API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}],"
                                      " \"top_logprobs\": 2}", &r, &e));
    assert_string_equal(e.param, "top_logprobs");
    assert_false(parse(ILAB_API_COMPLETION, "not json", &r, &e));
    assert_non_null(strstr(e.message, "malformed JSON"));
}

static void test_chat_template(void **state)
{
    (void)state;
    ilab_api_request r;
    ilab_api_error e;
    assert_true(parse(ILAB_API_CHAT,
                      "{\"messages\": [{\"role\": \"system\", \"content\": \"Be kind.\"}, "
                      "{\"role\": \"user\", \"content\": \"Who is Emma?\"}, "
                      "{\"role\": \"assistant\", \"content\": \"A lady.\"}, "
                      "{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"And?\"}]}],"
                      " \"stop\": \"END\"}", &r, &e));
    /* The messages are kept until the backend's template is known. */
    assert_null(r.prompt);
    assert_int_equal(r.n_messages, 4);
    assert_string_equal(r.messages[3].content, "And?");
    assert_true(r.add_generation_prompt);
    assert_true(ilab_api_chat_plain_setup(&r, &e));
    assert_string_equal(r.prompt, "system: Be kind.\nuser: Who is Emma?\nassistant: A lady.\n"
                                  "user: And?\nassistant:");
    /* The caller's stop string, then the turn markers. */
    assert_int_equal(r.n_stop, ilab_chat_n_turn_stops + 1);
    assert_string_equal(r.stop[0], "END");
    assert_string_equal(r.stop[1], "\nuser:");
    assert_true(r.trim_leading_space);
    assert_int_equal(r.max_tokens, 0); /* context-limited */
    ilab_api_request_free(&r);
}

/* Each range at its edges, inside and just outside (scripts/mutations.tsv
 * or01 or02 or03 or05 or06). */
static void expect_refused(ilab_api_kind kind, const char *body, const char *param)
{
    ilab_api_request r;
    ilab_api_error e;
    if (parse(kind, body, &r, &e)) {
        ilab_api_request_free(&r);
        fail_msg("accepted: %s", body);
    }
    assert_int_equal(e.http_status, 400);
    if (strcmp(e.param, param))
        fail_msg("%s: param '%s', want '%s'", body, e.param, param);
}

static void expect_accepted(ilab_api_kind kind, const char *body)
{
    ilab_api_request r;
    ilab_api_error e;
    if (!parse(kind, body, &r, &e))
        fail_msg("refused: %s: %s", body, e.message);
    ilab_api_request_free(&r);
}

static void test_edges(void **state)
{
    (void)state;
    expect_accepted(ILAB_API_COMPLETION, "{\"prompt\": \"x\", \"temperature\": 2}");
    expect_refused(ILAB_API_COMPLETION, "{\"prompt\": \"x\", \"temperature\": 2.5}", "temperature");
    expect_refused(ILAB_API_COMPLETION, "{\"prompt\": \"x\", \"top_p\": 0}", "top_p");
    expect_accepted(ILAB_API_COMPLETION, "{\"prompt\": \"x\", \"n\": 8, \"logprobs\": 20}");
    expect_refused(ILAB_API_COMPLETION, "{\"prompt\": \"x\", \"n\": 9}", "n");
    expect_refused(ILAB_API_COMPLETION, "{\"prompt\": \"x\", \"logprobs\": 21}", "logprobs");
    expect_accepted(ILAB_API_COMPLETION, "{\"prompt\": \"x\", \"stop\": "
                                         "[\"1\", \"2\", \"3\", \"4\", \"5\", \"6\", \"7\", \"8\"]}");
    expect_refused(ILAB_API_COMPLETION, "{\"prompt\": \"x\", \"stop\": "
                                        "[\"1\", \"2\", \"3\", \"4\", \"5\", \"6\", \"7\", \"8\", \"9\"]}",
                   "stop");
    expect_accepted(ILAB_API_CHAT, "{\"messages\": [{\"role\": \"user\", \"name\": \"ann\", "
                                   "\"content\": \"x\"}]}");
    expect_refused(ILAB_API_CHAT, "{\"messages\": [{\"role\": \"user\", \"nick\": \"ann\", "
                                  "\"content\": \"x\"}]}", "messages[0].nick");
}

/* The sampling fields at their numeric edges as the HTTP layer reads
 * them: tiny temperatures and top_p reach the sampler as the float they
 * round to (a subnormal, or 0 = greedy for a temperature); seeds 0 and
 * 2^63 - 1 go through, 2^64 - 1 is not a JSON integer jansson can hold and
 * is refused naming the number; logit_bias, which this server does not
 * implement, is refused by name at any value rather than ignored. */
static void test_sampling_edges(void **state)
{
    (void)state;
    ilab_api_request r;
    ilab_api_error e;
    assert_true(parse(ILAB_API_COMPLETION, "{\"prompt\": \"x\", \"temperature\": 1e-45, "
                                           "\"top_p\": 1e-45, \"min_p\": 1e-45}", &r, &e));
    assert_true(r.sampling.temperature > 0.0f && (double)r.sampling.temperature < 3e-45);
    assert_true(r.sampling.top_p > 0.0f && r.sampling.min_p > 0.0f);
    ilab_api_request_free(&r);
    assert_true(parse(ILAB_API_COMPLETION, "{\"prompt\": \"x\", \"temperature\": 5e-324}", &r,
                      &e));
    assert_true(r.sampling.temperature == 0.0f); /* below the smallest float: greedy */
    ilab_api_request_free(&r);
    expect_refused(ILAB_API_COMPLETION, "{\"prompt\": \"x\", \"top_p\": 1e-46}", "top_p");
    assert_true(parse(ILAB_API_COMPLETION, "{\"prompt\": \"x\", \"seed\": 0}", &r, &e));
    assert_true(r.sampling.seed == 0);
    ilab_api_request_free(&r);
    assert_true(parse(ILAB_API_COMPLETION, "{\"prompt\": \"x\", \"seed\": 9223372036854775807}",
                      &r, &e));
    assert_true(r.sampling.seed == 9223372036854775807ull);
    ilab_api_request_free(&r);
    assert_false(parse(ILAB_API_COMPLETION, "{\"prompt\": \"x\", \"seed\": 18446744073709551615}",
                       &r, &e));
    assert_int_equal(e.http_status, 400);
    assert_non_null(strstr(e.message, "18446744073709551615"));
    expect_refused(ILAB_API_COMPLETION, "{\"prompt\": \"x\", \"seed\": -1}", "seed");
    expect_refused(ILAB_API_COMPLETION, "{\"prompt\": \"x\", \"logit_bias\": {\"1\": 100}}",
                   "logit_bias");
    expect_refused(ILAB_API_COMPLETION, "{\"prompt\": \"x\", \"logit_bias\": {\"1\": -100}}",
                   "logit_bias");
    expect_refused(ILAB_API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
                                  "\"logit_bias\": {\"1\": 1e300}}", "logit_bias");
}

/* Every ilab_status, entry by entry, to its HTTP status and error type
 * (and one value outside the enum): the client's mistakes are 400, what
 * may pass with time 503, the rest 500 naming the status. */
static void test_status_to_http_table(void **state)
{
    (void)state;
    static const struct {
        int st;
        unsigned http;
        const char *type;
        int retry;             /* Retry-After for a plain message */
        bool named;            /* the status name leads the message */
    } want[] = {
        {ILAB_OK, 500, "server_error", 0, true},
        {ILAB_INVALID_ARGUMENT, 400, "invalid_request_error", 0, false},
        {ILAB_UNSUPPORTED, 400, "unsupported_error", 0, false},
        {ILAB_UNAVAILABLE, 503, "service_unavailable", 0, false},
        {ILAB_BUFFER_TOO_SMALL, 500, "server_error", 0, true},
        {ILAB_CONTEXT_OVERFLOW, 400, "invalid_request_error", 0, false},
        {ILAB_OUT_OF_MEMORY, 503, "service_unavailable", 1, false},
        {ILAB_CANCELLED, 500, "server_error", 0, true},
        {ILAB_ABI_MISMATCH, 500, "server_error", 0, true},
        {ILAB_IO, 500, "server_error", 0, true},
        {ILAB_INTERNAL, 500, "server_error", 0, true},
        {42, 500, "server_error", 0, true},
    };
    assert_int_equal(sizeof want / sizeof want[0], ILAB_INTERNAL + 2); /* every status */
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        ilab_api_error e;
        ilab_api_error_from_status(&e, (ilab_status)want[i].st, "what went wrong");
        if (e.http_status != want[i].http || strcmp(e.type, want[i].type) ||
            e.retry_after != want[i].retry)
            fail_msg("status %d: HTTP %u %s retry %d, expected %u %s retry %d", want[i].st,
                     e.http_status, e.type, e.retry_after, want[i].http, want[i].type,
                     want[i].retry);
        assert_non_null(strstr(e.message, "what went wrong"));
        assert_int_equal(strstr(e.message, ilab_status_name((ilab_status)want[i].st)) ==
                             e.message, want[i].named);
        char *json = ilab_api_error_json(&e);
        char code[32];
        snprintf(code, sizeof code, "\"code\":%u", want[i].http);
        assert_non_null(strstr(json, code));
        free(json);
    }
    /* A full queue says when to come back; a backend that cannot run does not. */
    ilab_api_error e;
    ilab_api_error_from_status(&e, ILAB_UNAVAILABLE, "overloaded: 64 requests waiting");
    assert_int_equal(e.http_status, 503);
    assert_int_equal(e.retry_after, 1);
    ilab_api_error_from_status(&e, ILAB_CONTEXT_OVERFLOW, NULL); /* no message: the name */
    assert_string_equal(e.message, ilab_status_name(ILAB_CONTEXT_OVERFLOW));
}

/* The limit comes from max_tokens, or for chat from max_completion_tokens
 * (which wins when both are given). */
static void test_limit_fields(void **state)
{
    (void)state;
    ilab_api_request r;
    ilab_api_error e;
    static const struct {
        ilab_api_kind kind;
        const char *body;
        int32_t limit;
    } cases[] = {
        {ILAB_API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
                        "\"max_completion_tokens\": 2}", 2},
        {ILAB_API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
                        "\"max_tokens\": 3}", 3},
        {ILAB_API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
                        "\"max_tokens\": 9, \"max_completion_tokens\": 4}", 4},
        {ILAB_API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}", 0},
        {ILAB_API_COMPLETION, "{\"prompt\": \"x\", \"max_tokens\": 5}", 5},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_true(parse(cases[i].kind, cases[i].body, &r, &e));
        if (r.max_tokens != cases[i].limit)
            fail_msg("%s: limit %d, expected %d", cases[i].body, r.max_tokens, cases[i].limit);
        ilab_api_request_free(&r);
    }
    assert_false(parse(ILAB_API_COMPLETION, "{\"prompt\": \"x\", \"max_completion_tokens\": 2}",
                       &r, &e));
    assert_string_equal(e.param, "max_completion_tokens");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_status_to_http_table),
        cmocka_unit_test(test_limit_fields),
        cmocka_unit_test(test_fields),
        cmocka_unit_test(test_fail_closed),
        cmocka_unit_test(test_edges),
        cmocka_unit_test(test_sampling_edges),
        cmocka_unit_test(test_chat_template),
    };
    return ilab_test_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
