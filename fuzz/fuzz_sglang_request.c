/* Fuzz target: SGLang's /generate body -> ilab_api_request, as POST
 * /generate runs it (ilab_sglang_request_parse).
 *
 * Input: the body. Asserts:
 *  - a refusal is a 4xx/5xx with a message, and leaves nothing allocated;
 *  - an accepted request is kind ILAB_API_SGLANG with every value inside the
 *    documented range (temperature 0..2, top_p (0, 1], min_p 0..1,
 *    repetition_penalty 0.01..10, presence/frequency penalty -2..2, top_k
 *    >= 0, max_new_tokens >= 1, top_logprobs 0..20, one choice, at most 8
 *    stop strings, none empty, token ids >= 0);
 *  - its prompt is what the body said: `text` byte for byte, or `input_ids`
 *    id for id (compared with an independent reading of the JSON), and
 *    logprobs are on exactly when return_logprob is true. */
#include <jansson.h>
#include <stdbool.h>
#include <string.h>

#include "fuzz.h"
#include "sglang_request.h"

static void check_prompt(const ilab_api_request *r, json_t *root)
{
    json_t *text = json_object_get(root, "text"), *ids = json_object_get(root, "input_ids");
    if (json_is_string(text)) {
        FUZZ_CHECK(r->prompt && strlen(r->prompt) == json_string_length(text) &&
                       !memcmp(r->prompt, json_string_value(text), json_string_length(text)),
                   "the prompt is not the body's text");
        return;
    }
    /* input_ids, maybe one level deep in a one-element batch */
    if (json_is_array(ids) && json_array_size(ids) == 1 && json_is_array(json_array_get(ids, 0)))
        ids = json_array_get(ids, 0);
    FUZZ_CHECK(json_is_array(ids) && r->n_prompt_tokens == json_array_size(ids),
               "%zu prompt ids for a list of %zu", r->n_prompt_tokens, json_array_size(ids));
    for (size_t i = 0; i < r->n_prompt_tokens; i++)
        FUZZ_CHECK(r->prompt_tokens[i] >= 0 &&
                       r->prompt_tokens[i] == json_integer_value(json_array_get(ids, i)),
                   "prompt id %zu is %d", i, r->prompt_tokens[i]);
}

static void check_ranges(const ilab_api_request *r)
{
    const ilab_sampling_t *s = &r->sampling;
    FUZZ_CHECK(r->kind == ILAB_API_SGLANG, "kind %d", (int)r->kind);
    FUZZ_CHECK(s->temperature >= 0 && s->temperature <= 2, "temperature %g", (double)s->temperature);
    FUZZ_CHECK(s->top_p > 0 && s->top_p <= 1, "top_p %g", (double)s->top_p);
    FUZZ_CHECK(s->min_p >= 0 && s->min_p <= 1, "min_p %g", (double)s->min_p);
    FUZZ_CHECK(s->repetition_penalty >= 0.01f && s->repetition_penalty <= 10,
               "repetition_penalty %g", (double)s->repetition_penalty);
    FUZZ_CHECK(s->presence_penalty >= -2 && s->presence_penalty <= 2, "presence_penalty");
    FUZZ_CHECK(s->frequency_penalty >= -2 && s->frequency_penalty <= 2, "frequency_penalty");
    FUZZ_CHECK(s->top_k >= 0, "top_k %d", s->top_k);
    FUZZ_CHECK(r->max_tokens >= 1, "max_new_tokens %d", r->max_tokens);
    FUZZ_CHECK(r->n == 1, "n %d", r->n);
    FUZZ_CHECK(r->top_logprobs >= 0 && r->top_logprobs <= ILAB_SERVE_MAX_TOP_LOGPROBS,
               "top_logprobs %d", r->top_logprobs);
    FUZZ_CHECK(r->n_stop <= ILAB_SERVE_MAX_STOP, "%zu stop strings", r->n_stop);
    for (size_t i = 0; i < r->n_stop; i++)
        FUZZ_CHECK(r->stop[i] && r->stop[i][0], "stop string %zu is empty", i);
    for (size_t i = 0; i < r->n_stop_token_ids; i++)
        FUZZ_CHECK(r->stop_token_ids[i] >= 0, "stop id %zu is %d", i, r->stop_token_ids[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *body = fuzz_strndup(data, size);
    if (!body)
        return 0;
    ilab_api_request r;
    ilab_api_error e;
    memset(&e, 0, sizeof e);
    if (!ilab_sglang_request_parse(body, size, &r, &e)) {
        FUZZ_CHECK(e.http_status >= 400 && e.http_status < 600, "refused with %u", e.http_status);
        FUZZ_CHECK(e.message[0], "refused without a message");
        FUZZ_CHECK(!r.prompt && !r.prompt_tokens && !r.stop && !r.stop_token_ids && !r.model,
                   "a refusal kept an allocation");
        free(body);
        return 0;
    }
    check_ranges(&r);
    json_t *root = json_loadb(body, size, 0, NULL);
    FUZZ_CHECK(json_is_object(root), "accepted a body that is not a JSON object");
    check_prompt(&r, root);
    json_t *lp = json_object_get(root, "return_logprob");
    FUZZ_CHECK(r.logprobs == json_is_true(lp), "logprobs %d, return_logprob %s", r.logprobs,
               json_is_true(lp) ? "true" : "not true");
    json_decref(root);
    ilab_api_request_free(&r);
    free(body);
    return 0;
}
