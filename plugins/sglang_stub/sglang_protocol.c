/* SGLang's native wire protocol: POST /generate with `input_ids` and
 * `sampling_params`, streamed (docs/adapters.md). Stop strings are matched
 * by the adapter (http_stream.h), not sent.
 *
 * Each chunk repeats the whole text so far, and its `output_ids` and
 * logprob lists are either the whole output so far or only the new part
 * (SGLang's --incremental-streaming-output); meta_info.completion_tokens
 * tells which. The finish reason is an object: {"type": "stop"|"length"|
 * "abort", "matched": token id or stop string}. */
#include "sglang_protocol.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "http_protocol_util.h"

static ilab_status encode(const http_gen_args *a, json_t **out, char *err, size_t cap)
{
    const ilab_generate_request_t *r = a->req;
    const ilab_sampling_t *s = &a->sampling;
    if (s->seed > (uint64_t)INT64_MAX) {
        snprintf(err, cap, "sglang_stub: seed %llu does not fit SGLang's signed 64-bit sampling_seed",
                 (unsigned long long)s->seed);
        return ILAB_INVALID_ARGUMENT;
    }
    json_t *p = json_object();
    json_object_set_new(p, "max_new_tokens", json_integer(a->max_tokens));
    json_object_set_new(p, "temperature", json_real(s->temperature));
    json_object_set_new(p, "top_p", json_real(s->top_p));
    json_object_set_new(p, "top_k", json_integer(s->top_k > 0 ? s->top_k : -1));
    json_object_set_new(p, "min_p", json_real(s->min_p));
    json_object_set_new(p, "repetition_penalty", json_real(s->repetition_penalty));
    json_object_set_new(p, "presence_penalty", json_real(s->presence_penalty));
    json_object_set_new(p, "frequency_penalty", json_real(s->frequency_penalty));
    json_object_set_new(p, "stop_token_ids", http_json_ids(r->stop_token_ids, r->n_stop_token_ids));
    json_object_set_new(p, "ignore_eos", json_boolean(r->ignore_eos));
    json_object_set_new(p, "skip_special_tokens", json_true());
    /* a server without per-request seeds refuses the unknown parameter
     * (400), so a seeded request is never silently unseeded */
    if (s->temperature > 0)
        json_object_set_new(p, "sampling_seed", json_integer((json_int_t)s->seed));
    json_t *b = json_object();
    json_object_set_new(b, "input_ids", http_json_ids(r->prompt_tokens, r->n_prompt_tokens));
    json_object_set_new(b, "sampling_params", p);
    json_object_set_new(b, "stream", json_true());
    json_object_set_new(b, "return_logprob", json_true());
    json_object_set_new(b, "top_logprobs_num", json_integer(r->top_logprobs));
    json_object_set_new(b, "logprob_start_len", json_integer(-1));
    *out = b;
    return ILAB_OK;
}

/* [[logprob, id, text], ...] -> top list */
static size_t top_of(json_t *list, ilab_logprob_t *top, size_t cap)
{
    size_t n = 0, i;
    json_t *e;
    json_array_foreach(list, i, e) {
        json_t *lp = json_array_get(e, 0), *id = json_array_get(e, 1);
        if (n < cap && json_is_number(lp) && json_is_integer(id))
            top[n++] = (ilab_logprob_t){(int32_t)json_integer_value(id), (float)json_number_value(lp)};
    }
    return n;
}

static ilab_status finished(http_stream *st, json_t *fr, char *err, size_t cap)
{
    const char *type = json_string_value(json_object_get(fr, "type"));
    json_t *matched = json_object_get(fr, "matched");
    if (type && !strcmp(type, "length")) {
        http_stream_server_finished(st, ILAB_FINISH_LENGTH, -1);
    } else if (type && !strcmp(type, "stop")) {
        int32_t tok = json_is_integer(matched) ? (int32_t)json_integer_value(matched) : -1;
        http_stream_server_finished(st, ILAB_FINISH_STOP, tok);
    } else {
        const char *m = json_string_value(json_object_get(fr, "message"));
        snprintf(err, cap, "the server ended the request with finish_reason '%s'%s%s",
                 type ? type : "?", m ? ": " : "", m ? m : "");
        return ILAB_IO;
    }
    return ILAB_OK;
}

static ilab_status decode(http_stream *st, json_t *chunk, char *err, size_t cap)
{
    json_t *meta = json_object_get(chunk, "meta_info"), *ids = json_object_get(chunk, "output_ids");
    if (!json_is_object(meta) || !json_is_array(ids)) {
        snprintf(err, cap, "a /generate chunk lacks meta_info or output_ids");
        return ILAB_IO;
    }
    size_t seen = http_stream_tokens_seen(st), n = json_array_size(ids);
    size_t total = (size_t)json_integer_value(json_object_get(meta, "completion_tokens"));
    bool whole = n == total && n >= seen; /* the ids so far, not just the new ones */
    json_t *lps = json_object_get(meta, "output_token_logprobs");
    json_t *tops = json_object_get(meta, "output_top_logprobs");
    bool lp_whole = json_array_size(lps) == total;
    for (size_t i = whole ? seen : 0; i < n; i++) {
        json_t *v = json_array_get(ids, i);
        if (!json_is_integer(v)) {
            snprintf(err, cap, "output_ids[%zu] is not a token id", i);
            return ILAB_IO;
        }
        size_t at = lp_whole ? (whole ? i : seen + i) : (whole ? i - seen : i);
        ilab_logprob_t top[HTTP_STREAM_TOPK_MAX];
        size_t nt = top_of(json_array_get(tops, at), top, HTTP_STREAM_TOPK_MAX);
        float lp = http_json_float(json_array_get(json_array_get(lps, at), 0), NAN);
        http_stream_token(st, (int32_t)json_integer_value(v), lp, top, nt);
    }
    json_t *text = json_object_get(chunk, "text");
    if (json_is_string(text))
        http_stream_text_so_far(st, json_string_value(text), json_string_length(text));
    json_t *fr = json_object_get(meta, "finish_reason");
    return json_is_object(fr) ? finished(st, fr, err, cap) : ILAB_OK;
}

const http_protocol sglang_protocol = {
    .generate_path = "/generate",
    .detokenize_key = "text",
    .tokenize_sends_model = 0,
    .context_reserve = 1, /* input + max_new_tokens < context_len */
    .encode = encode,
    .decode = decode,
};
