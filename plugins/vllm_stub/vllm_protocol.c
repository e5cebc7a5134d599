/* vLLM's wire protocol: POST /v1/completions, streamed (docs/adapters.md).
 *
 * The prompt goes as token ids; every sampling field maps to one of the
 * OpenAI completions parameters or vLLM's extra parameters (top_k, min_p,
 * repetition_penalty, stop_token_ids, ignore_eos, seed); stop strings are
 * matched by the adapter (http_stream.h), not sent. Token ids come back
 * per chunk in `token_ids` (return_token_ids) or, from older servers, as
 * "token_id:N" names in the logprobs (return_tokens_as_token_ids), so no
 * text is re-tokenized. */
#include "vllm_protocol.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http_protocol_util.h"

static ilab_status encode(const http_gen_args *a, json_t **out, char *err, size_t cap)
{
    const ilab_generate_request_t *r = a->req;
    const ilab_sampling_t *s = &a->sampling;
    if (s->seed > (uint64_t)INT64_MAX) {
        snprintf(err, cap, "vllm_stub: seed %llu does not fit vLLM's signed 64-bit seed",
                 (unsigned long long)s->seed);
        return ILAB_INVALID_ARGUMENT;
    }
    json_t *b = json_object();
    json_object_set_new(b, "model", json_string(a->model));
    json_object_set_new(b, "prompt", http_json_ids(r->prompt_tokens, r->n_prompt_tokens));
    json_object_set_new(b, "max_tokens", json_integer(a->max_tokens));
    json_object_set_new(b, "temperature", json_real(s->temperature));
    json_object_set_new(b, "top_p", json_real(s->top_p));
    json_object_set_new(b, "top_k", json_integer(s->top_k > 0 ? s->top_k : -1));
    json_object_set_new(b, "min_p", json_real(s->min_p));
    json_object_set_new(b, "repetition_penalty", json_real(s->repetition_penalty));
    json_object_set_new(b, "presence_penalty", json_real(s->presence_penalty));
    json_object_set_new(b, "frequency_penalty", json_real(s->frequency_penalty));
    json_object_set_new(b, "seed", json_integer((json_int_t)s->seed));
    json_object_set_new(b, "stop_token_ids", http_json_ids(r->stop_token_ids, r->n_stop_token_ids));
    json_object_set_new(b, "ignore_eos", json_boolean(r->ignore_eos));
    /* 0 = the sampled token's logprob only; the TOKEN event always has one */
    json_object_set_new(b, "logprobs", json_integer(r->top_logprobs));
    json_object_set_new(b, "return_tokens_as_token_ids", json_true());
    json_object_set_new(b, "return_token_ids", json_true());
    json_object_set_new(b, "skip_special_tokens", json_true());
    json_object_set_new(b, "stream", json_true());
    json_object_set_new(b, "stream_options", json_pack("{s:b}", "include_usage", 1));
    *out = b;
    return ILAB_OK;
}

int vllm_token_of_name(const char *name, int32_t *id)
{
    if (!name || strncmp(name, "token_id:", 9))
        return 0;
    char *end = NULL;
    long v = strtol(name + 9, &end, 10);
    if (!end || *end || end == name + 9 || v < 0 || v > INT32_MAX)
        return 0;
    *id = (int32_t)v;
    return 1;
}

/* top_logprobs[i]: {"token_id:N": logprob, ...} */
static size_t top_of(json_t *map, ilab_logprob_t *top, size_t cap)
{
    const char *name;
    json_t *v;
    size_t n = 0;
    json_object_foreach(map, name, v) {
        int32_t id;
        if (n < cap && vllm_token_of_name(name, &id) && json_is_number(v))
            top[n++] = (ilab_logprob_t){id, (float)json_number_value(v)};
    }
    return n;
}

static ilab_status decode(http_stream *st, json_t *chunk, char *err, size_t cap)
{
    json_t *choices = json_object_get(chunk, "choices");
    if (!json_is_array(choices)) {
        snprintf(err, cap, "a completion chunk has no 'choices' array");
        return ILAB_IO;
    }
    if (json_array_size(choices) == 0)
        return ILAB_OK; /* the usage chunk: usage is counted from the events */
    json_t *c = json_array_get(choices, 0);
    json_t *ids = json_object_get(c, "token_ids"), *lp = json_object_get(c, "logprobs");
    json_t *names = json_object_get(lp, "tokens"), *lps = json_object_get(lp, "token_logprobs");
    json_t *tops = json_object_get(lp, "top_logprobs");
    size_t n = json_is_array(ids) ? json_array_size(ids) : json_array_size(names);
    int32_t last = -1;
    for (size_t i = 0; i < n; i++) {
        int32_t id;
        json_t *v = json_is_array(ids) ? json_array_get(ids, i) : NULL;
        if (v && json_is_integer(v)) {
            id = (int32_t)json_integer_value(v);
        } else if (!vllm_token_of_name(json_string_value(json_array_get(names, i)), &id)) {
            snprintf(err, cap, "a completion chunk names token %zu neither in token_ids nor as "
                     "'token_id:N' (is the server older than return_tokens_as_token_ids?)", i);
            return ILAB_IO;
        }
        ilab_logprob_t top[HTTP_STREAM_TOPK_MAX];
        size_t nt = top_of(json_array_get(tops, i), top, HTTP_STREAM_TOPK_MAX);
        http_stream_token(st, id, http_json_float(json_array_get(lps, i), NAN), top, nt);
        last = id;
    }
    json_t *text = json_object_get(c, "text");
    if (json_is_string(text))
        http_stream_text(st, json_string_value(text), json_string_length(text));
    const char *finish = json_string_value(json_object_get(c, "finish_reason"));
    if (!finish)
        return ILAB_OK;
    json_t *why = json_object_get(c, "stop_reason");
    if (!strcmp(finish, "length")) {
        http_stream_server_finished(st, ILAB_FINISH_LENGTH, -1);
    } else if (!strcmp(finish, "stop")) {
        /* stop_reason: a stop token id, a stop string, or null for EOS
         * (whose id is the chunk's last token) */
        int32_t stop_token = json_is_integer(why) ? (int32_t)json_integer_value(why)
                             : json_is_null(why) || !why ? last : -1;
        http_stream_server_finished(st, ILAB_FINISH_STOP, stop_token);
    } else {
        snprintf(err, cap, "the server ended the request with finish_reason '%s'", finish);
        return ILAB_IO;
    }
    return ILAB_OK;
}

const http_protocol vllm_protocol = {
    .generate_path = "/v1/completions",
    .detokenize_key = "prompt",
    .tokenize_sends_model = 1,
    .context_reserve = 0, /* prompt + max_tokens <= max_model_len */
    .encode = encode,
    .decode = decode,
};
