/* The adapters' encoders and stream decoders against committed fixtures in
 * the engines' documented shapes (tests/adapters/fixtures, sources in
 * docs/adapters.md), so they are not tested only against the fake engine,
 * which shares our reading of the protocol. */
#include <jansson.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "http_backend.h"
#include "sglang_protocol.h"
#include "vllm_protocol.h"

/* What a stream emitted. */
typedef struct events {
    int32_t tokens[64];
    float logprob[64];
    uint32_t n_top[64];
    ilab_logprob_t top0[64];
    size_t n;
    char text[512];
    size_t text_len;
    int terminal, n_terminal;
    ilab_finish_reason reason;
    uint32_t completion_tokens;
    int stop_after; /* the callback asks to stop at this many tokens; 0 never */
} events;

static int collect(void *user, const ilab_event_t *ev)
{
    events *e = user;
    if (ev->type == ILAB_EVENT_TOKEN) {
        e->tokens[e->n] = ev->token;
        e->logprob[e->n] = ev->logprob;
        e->n_top[e->n] = ev->n_top_logprobs;
        if (ev->n_top_logprobs)
            e->top0[e->n] = ev->top_logprobs[0];
        e->n++;
    } else {
        e->n_terminal++;
        e->terminal = ev->type;
        e->reason = ev->finish_reason;
        e->completion_tokens = ev->completion_tokens;
    }
    memcpy(e->text + e->text_len, ev->text ? ev->text : "", ev->text_len);
    e->text_len += ev->text_len;
    e->text[e->text_len] = '\0';
    return e->stop_after && (int)e->n >= e->stop_after;
}

static ilab_generate_request_t request(const char *const *stop, size_t n_stop, int32_t max_tokens)
{
    static const int32_t prompt[3] = {1, 2, 3};
    static ilab_sampling_t s = {.struct_size = sizeof s, .top_p = 1, .repetition_penalty = 1};
    return (ilab_generate_request_t){.struct_size = sizeof(ilab_generate_request_t), .request_id = 9,
                                     .prompt_tokens = prompt, .n_prompt_tokens = 3, .sampling = &s,
                                     .max_tokens = max_tokens, .stop = stop, .n_stop = n_stop,
                                     /* the fixtures carry 2 top logprobs per token; a request
                                      * asking fewer gets fewer (LOG-4) */
                                     .top_logprobs = 2};
}

/* Feed a fixture's `data:` lines through `proto` as the adapter does. */
static void replay(const http_protocol *proto, const char *file, const ilab_generate_request_t *req,
                   int32_t eos, events *e)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", FIXTURE_DIR, file);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    http_stream *st = http_stream_create(req, eos, collect, e);
    char line[8192];
    bool over = false;
    while (!over && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = '\0';
        if (strncmp(line, "data: ", 6))
            continue;
        if (!strcmp(line + 6, "[DONE]"))
            break;
        json_t *chunk = json_loads(line + 6, 0, NULL);
        assert_non_null(chunk);
        char err[256] = "";
        ilab_status s = proto->decode(st, chunk, err, sizeof err);
        json_decref(chunk);
        if (s != ILAB_OK)
            fail_msg("%s: %s", file, err);
        over = http_stream_flush(st);
    }
    fclose(f);
    if (!http_stream_ended(st))
        http_stream_error(st, ILAB_IO, "the fixture ended first");
    http_stream_destroy(st);
}

static void vllm_eos_not_emitted(void **state)
{
    ilab_generate_request_t req = request(NULL, 0, 16);
    events e = {0};
    replay(&vllm_protocol, "vllm_stream_eos.sse", &req, -1, &e);
    assert_int_equal(e.n, 2); /* " Paris", "."; the EOS (128001) ends it, unseen */
    assert_int_equal(e.tokens[0], 12366);
    assert_int_equal(e.tokens[1], 13);
    assert_string_equal(e.text, " Paris.");
    assert_int_equal(e.terminal, ILAB_EVENT_FINISH);
    assert_int_equal(e.n_terminal, 1);
    assert_int_equal(e.reason, ILAB_FINISH_STOP);
    assert_int_equal(e.completion_tokens, 2); /* usage == events, not the server's 3 */
    assert_true(fabsf(e.logprob[1] - -0.41f) < 1e-6f);
    /* top logprobs sorted descending whatever order the object had */
    assert_int_equal(e.n_top[1], 2);
    assert_int_equal(e.top0[1].token, 13);
}

static void vllm_stop_token_id(void **state)
{
    ilab_generate_request_t req = request(NULL, 0, 16);
    events e = {0};
    replay(&vllm_protocol, "vllm_stream_stop_token.sse", &req, 128001, &e);
    assert_int_equal(e.n, 1);
    assert_int_equal(e.tokens[0], 10035);
    assert_string_equal(e.text, " yes");
    assert_int_equal(e.reason, ILAB_FINISH_STOP);
}

static void vllm_token_names_without_token_ids(void **state)
{
    ilab_generate_request_t req = request(NULL, 0, 2);
    events e = {0};
    replay(&vllm_protocol, "vllm_stream_token_names.sse", &req, -1, &e);
    assert_int_equal(e.n, 2);
    assert_int_equal(e.tokens[0], 832);
    assert_int_equal(e.tokens[1], 1403);
    assert_int_equal(e.reason, ILAB_FINISH_LENGTH);
    int32_t id = 0;
    assert_false(vllm_token_of_name("token_id:", &id));
    assert_false(vllm_token_of_name("Paris", &id));
    assert_true(vllm_token_of_name("token_id:7", &id) && id == 7);
}

static void vllm_callback_stop_and_local_length(void **state)
{
    ilab_generate_request_t req = request(NULL, 0, 16);
    events e = {.stop_after = 1};
    replay(&vllm_protocol, "vllm_stream_eos.sse", &req, -1, &e);
    assert_int_equal(e.n, 1);
    assert_int_equal(e.reason, ILAB_FINISH_CANCELLED);
    assert_int_equal(e.n_terminal, 1);
    /* a server that sends past max_tokens is cut at max_tokens */
    req = request(NULL, 0, 1);
    events f = {0};
    replay(&vllm_protocol, "vllm_stream_eos.sse", &req, -1, &f);
    assert_int_equal(f.n, 1);
    assert_int_equal(f.reason, ILAB_FINISH_LENGTH);
    assert_string_equal(f.text, " Paris");
}

static void vllm_stop_string_found_locally(void **state)
{
    /* the server did not trim: the adapter does, and ends the stream */
    static const char *const stop[1] = {"s."};
    ilab_generate_request_t req = request(stop, 1, 16);
    events e = {0};
    replay(&vllm_protocol, "vllm_stream_eos.sse", &req, -1, &e);
    assert_string_equal(e.text, " Pari");
    assert_int_equal(e.reason, ILAB_FINISH_STOP);
    assert_int_equal(e.n, 2);
}

/* STR-6's rule, not the engine's list order: the occurrence that ends
 * first, of those the longest; also on the max_tokens-th token. */
static void stop_string_contract_rule(void **state)
{
    static const char *const nested[2] = {"Paris", "ar"};   /* "ar" ends first */
    static const char *const same_end[2] = {"is", "ris"};   /* both end at 's' */
    static const char *const last[1] = {"ris"};
    struct { const char *const *stop; size_t n; int32_t max_tokens; const char *text; } c[] = {
        {nested, 2, 16, " P"}, {same_end, 2, 16, " Pa"}, {last, 1, 1, " Pa"}};
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        ilab_generate_request_t req = request(c[i].stop, c[i].n, c[i].max_tokens);
        events e = {0};
        replay(&vllm_protocol, "vllm_stream_eos.sse", &req, -1, &e);
        assert_string_equal(e.text, c[i].text);
        assert_int_equal(e.reason, ILAB_FINISH_STOP);
        assert_int_equal(e.n, 1); /* the token completing it is emitted, no later one */
        assert_int_equal(e.completion_tokens, 1);
    }
}

static void sglang_stop_string_held_back(void **state)
{
    /* SGLang resends the whole text and shortens it when it trims a stop
     * string: " wor" must never have gone out */
    static const char *const stop[1] = {"world"};
    ilab_generate_request_t req = request(stop, 1, 16);
    events e = {0};
    replay(&sglang_protocol, "sglang_stream_stop_string.sse", &req, -1, &e);
    assert_string_equal(e.text, "Hello ");
    assert_int_equal(e.n, 3);
    assert_int_equal(e.tokens[2], 1631);
    assert_int_equal(e.reason, ILAB_FINISH_STOP);
    assert_true(fabsf(e.logprob[1] - -1.5f) < 1e-6f);
    assert_int_equal(e.top0[1].token, 1917);
}

static void sglang_incremental_ids_and_eos(void **state)
{
    ilab_generate_request_t req = request(NULL, 0, 16);
    events e = {0};
    replay(&sglang_protocol, "sglang_stream_incremental_eos.sse", &req, 2, &e);
    assert_int_equal(e.n, 2);
    assert_int_equal(e.tokens[0], 578);
    assert_int_equal(e.tokens[1], 842);
    assert_string_equal(e.text, " The end");
    assert_int_equal(e.reason, ILAB_FINISH_STOP);
}

static json_t *fixture_json(const char *file)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", FIXTURE_DIR, file);
    json_error_t err;
    json_t *j = json_load_file(path, 0, &err);
    if (!j)
        fail_msg("%s: %s", path, err.text);
    return j;
}

static void encode_against(const http_protocol *proto, const char *file)
{
    static const int32_t prompt[3] = {128000, 791, 6864};
    static const int32_t stop_ids[1] = {128009};
    static const char *const stop[2] = {"\n\n", "END"};
    http_gen_args a = {.model = "meta-llama/Llama-3.2-1B"};
    a.sampling = (ilab_sampling_t){.struct_size = sizeof a.sampling, .temperature = 0.75f, .top_k = 40,
                                   .top_p = 0.5f, .min_p = 0.25f, .repetition_penalty = 1.25f,
                                   .seed = 1234, .presence_penalty = 0.5f, .frequency_penalty = -0.5f};
    ilab_generate_request_t req = {.struct_size = sizeof req, .prompt_tokens = prompt, .n_prompt_tokens = 3,
                                   .sampling = &a.sampling, .max_tokens = 32, .stop = stop, .n_stop = 2,
                                   .stop_token_ids = stop_ids, .n_stop_token_ids = 1, .top_logprobs = 5};
    a.req = &req;
    a.max_tokens = 32; /* what the context allows: the body carries this */
    json_t *got = NULL, *want = fixture_json(file);
    char err[256] = "";
    assert_int_equal(proto->encode(&a, &got, err, sizeof err), ILAB_OK);
    if (!json_equal(got, want)) {
        char *g = json_dumps(got, JSON_SORT_KEYS), *w = json_dumps(want, JSON_SORT_KEYS);
        fail_msg("%s:\n got  %s\n want %s", file, g, w);
    }
    json_decref(got);
    /* a seed the engine cannot represent is refused, not wrapped */
    a.sampling.seed = UINT64_MAX;
    got = NULL;
    assert_int_equal(proto->encode(&a, &got, err, sizeof err), ILAB_INVALID_ARGUMENT);
    assert_non_null(strstr(err, "seed"));
    assert_null(got);
    json_decref(want);
}

static void vllm_encoder(void **state)
{
    encode_against(&vllm_protocol, "vllm_request.json");
}

static void sglang_encoder(void **state)
{
    encode_against(&sglang_protocol, "sglang_request.json");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(vllm_eos_not_emitted),
        cmocka_unit_test(vllm_stop_token_id),
        cmocka_unit_test(vllm_token_names_without_token_ids),
        cmocka_unit_test(vllm_callback_stop_and_local_length),
        cmocka_unit_test(vllm_stop_string_found_locally),
        cmocka_unit_test(stop_string_contract_rule),
        cmocka_unit_test(sglang_stop_string_held_back),
        cmocka_unit_test(sglang_incremental_ids_and_eos),
        cmocka_unit_test(vllm_encoder),
        cmocka_unit_test(sglang_encoder),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
