/* SGLang-shaped /generate answers (sglang_response.h). */
#include "sglang_response.h"

#include "openai_response.h"

void ilab_sglang_output_init(ilab_sglang_output *o, bool logprobs)
{
    o->ids = json_array();
    o->lps = logprobs ? json_array() : NULL;
    o->tops = logprobs ? json_array() : NULL;
}

void ilab_sglang_output_free(ilab_sglang_output *o)
{
    json_decref(o->ids);
    json_decref(o->lps);
    json_decref(o->tops);
    o->ids = o->lps = o->tops = NULL;
}

/* SGLang's logprob entry: [logprob, token id, token text]; the text is only
 * sent with return_text_in_logprobs, which this server does not take. */
static json_t *entry(float logprob, int32_t token)
{
    return json_pack("[f, i, n]", (double)logprob, (int)token);
}

void ilab_sglang_output_add(ilab_sglang_output *o, const ilab_pending_event *ev, int32_t top_n)
{
    json_array_append_new(o->ids, json_integer(ev->token));
    if (!o->lps)
        return;
    json_array_append_new(o->lps, entry(ev->logprob, ev->token));
    json_t *top = json_array();
    for (uint32_t i = 0; i < ev->n_top && (int32_t)i < top_n; i++)
        json_array_append_new(top, entry(ev->top[i].logprob, ev->top[i].token));
    json_array_append_new(o->tops, top);
}

static json_t *finish_json(ilab_finish_reason r, uint32_t completion_tokens)
{
    switch (r) {
    case ILAB_FINISH_STOP: return json_pack("{s:s, s:n}", "type", "stop", "matched");
    case ILAB_FINISH_LENGTH:
        return json_pack("{s:s, s:I}", "type", "length", "length", (json_int_t)completion_tokens);
    case ILAB_FINISH_CANCELLED:
    case ILAB_FINISH_ERROR:
        return json_pack("{s:s, s:s}", "type", "abort", "message", "the request was cancelled");
    default: return json_null();
    }
}

json_t *ilab_sglang_body_json(const char *id, const char *text, size_t text_len,
                              const ilab_sglang_output *o, ilab_finish_reason finish,
                              uint32_t prompt_tokens, uint32_t completion_tokens)
{
    json_t *meta = json_pack("{s:s, s:o, s:I, s:I}", "id", id, "finish_reason",
                             finish_json(finish, completion_tokens), "prompt_tokens",
                             (json_int_t)prompt_tokens, "completion_tokens",
                             (json_int_t)completion_tokens);
    if (o->lps) {
        json_object_set(meta, "output_token_logprobs", o->lps);
        json_object_set(meta, "output_top_logprobs", o->tops);
    }
    return json_pack("{s:o, s:O, s:o}", "text", ilab_json_text(text, text_len), "output_ids",
                     o->ids, "meta_info", meta);
}
