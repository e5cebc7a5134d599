/* Request parsing and the chat template, without a server. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

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
    assert_int_equal(r.sampling.seed, ILAB_SERVE_DEFAULT_SEED);
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
                      "{\"prompt\": [1, 2, 3], \"temperature\": 0, \"top_k\": -1, \"seed\": 9,"
                      " \"stop\": [\"a\", \"bc\"], \"stream\": true, \"stream_options\": "
                      "{\"include_usage\": true}, \"logprobs\": 2, \"max_tokens\": 5}", &r, &e));
    assert_null(r.prompt);
    assert_int_equal(r.n_prompt_tokens, 3);
    assert_true(r.sampling.temperature == 0.0f);
    assert_int_equal(r.sampling.top_k, 0);
    assert_int_equal(r.sampling.seed, 9);
    assert_int_equal(r.n_stop, 2);
    assert_string_equal(r.stop[1], "bc");
    assert_true(r.stream && r.include_usage && r.logprobs);
    assert_int_equal(r.top_logprobs, 2);
    assert_int_equal(r.max_tokens, 5);
    ilab_api_request_free(&r);
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
    assert_false(parse(ILAB_API_COMPLETION, "{\"prompt\": \"x\", \"presence_penalty\": 0.5}", &r, &e));
    assert_string_equal(e.param, "presence_penalty");
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
    assert_string_equal(r.prompt, "system: Be kind.\nuser: Who is Emma?\nassistant: A lady.\n"
                                  "user: And?\nassistant:");
    /* The turn markers, then the caller's stop string. */
    assert_int_equal(r.n_stop, ilab_chat_n_turn_stops + 1);
    assert_string_equal(r.stop[0], "\nuser:");
    assert_string_equal(r.stop[r.n_stop - 1], "END");
    assert_true(r.trim_leading_space);
    assert_int_equal(r.max_tokens, 0); /* context-limited */
    ilab_api_request_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_fields),
        cmocka_unit_test(test_fail_closed),
        cmocka_unit_test(test_chat_template),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
