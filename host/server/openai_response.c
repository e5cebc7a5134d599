/* OpenAI-shaped bodies: the same shapes vLLM serves, so stock clients parse them. */
#include "openai_response.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Length of the valid UTF-8 sequence at s[0..n), or 0 when it is not one. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    if (s[0] < 0x80)
        return 1;
    size_t len = (s[0] & 0xE0) == 0xC0 ? 2 : (s[0] & 0xF0) == 0xE0 ? 3
               : (s[0] & 0xF8) == 0xF0 ? 4 : 0;
    if (len == 0 || len > n)
        return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    uint32_t cp = s[0] & (0x7F >> len);
    for (size_t i = 1; i < len; i++)
        cp = (cp << 6) | (s[i] & 0x3F);
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

json_t *ilab_json_text(const char *text, size_t len)
{
    if (!text)
        return json_string("");
    json_t *j = json_stringn(text, len);
    if (j)
        return j;
    /* Replace each invalid byte with U+FFFD (3 bytes). */
    char *clean = malloc(len * 3 + 1);
    if (!clean)
        return json_string("");
    size_t o = 0;
    const unsigned char *s = (const unsigned char *)text;
    for (size_t i = 0; i < len;) {
        size_t n = s[i] ? utf8_seq(s + i, len - i) : 1;
        if (n == 0) {
            memcpy(clean + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        } else {
            memcpy(clean + o, s + i, n);
            o += n;
            i += n;
        }
    }
    j = json_stringn(clean, o);
    free(clean);
    return j ? j : json_string("");
}

/* A token's name in logprobs: its text, or "token_id:N". */
static json_t *token_name(const ilab_token_text *tt, int32_t token, bool as_id)
{
    if (!as_id)
        return ilab_token_text_json(tt, token);
    char buf[32];
    snprintf(buf, sizeof buf, "token_id:%d", (int)token);
    return json_string(buf);
}

json_t *ilab_token_logprobs_json(ilab_api_kind kind, const ilab_token_text *tt,
                                 const ilab_pending_event *ev, int32_t top_logprobs,
                                 size_t text_offset, bool as_ids)
{
    uint32_t n_top = ev->n_top < (uint32_t)top_logprobs ? ev->n_top : (uint32_t)top_logprobs;
    if (kind == ILAB_API_COMPLETION) {
        json_t *top = json_null();
        if (top_logprobs > 0) {
            top = json_object();
            for (uint32_t i = 0; i < n_top; i++) {
                json_t *name = token_name(tt, ev->top[i].token, as_ids);
                /* Two tokens may read the same; the likelier one (first) wins. */
                if (!json_object_get(top, json_string_value(name)))
                    json_object_set_new(top, json_string_value(name),
                                        json_real(ev->top[i].logprob));
                json_decref(name);
            }
        }
        return json_pack("{s:[o], s:[f], s:[o], s:[I]}", "tokens",
                         token_name(tt, ev->token, as_ids), "token_logprobs",
                         (double)ev->logprob, "top_logprobs", top, "text_offset",
                         (json_int_t)text_offset);
    }
    json_t *top = json_array();
    for (uint32_t i = 0; i < n_top; i++)
        json_array_append_new(top, json_pack("{s:o, s:f, s:o}", "token",
                                             token_name(tt, ev->top[i].token, as_ids),
                                             "logprob", (double)ev->top[i].logprob, "bytes",
                                             ilab_token_bytes_json(tt, ev->top[i].token)));
    return json_pack("{s:o, s:f, s:o, s:o}", "token", token_name(tt, ev->token, as_ids),
                     "logprob", (double)ev->logprob, "bytes",
                     ilab_token_bytes_json(tt, ev->token), "top_logprobs", top);
}

void ilab_logprobs_acc_init(ilab_logprobs_acc *a, ilab_api_kind kind)
{
    if (kind == ILAB_API_COMPLETION)
        a->root = json_pack("{s:[], s:[], s:[], s:[]}", "tokens", "token_logprobs",
                            "top_logprobs", "text_offset");
    else
        a->root = json_pack("{s:[]}", "content");
}

void ilab_logprobs_acc_add(ilab_logprobs_acc *a, ilab_api_kind kind, json_t *token_lp)
{
    if (!a->root || !token_lp) {
        json_decref(token_lp);
        return;
    }
    if (kind == ILAB_API_CHAT) {
        json_array_append_new(json_object_get(a->root, "content"), token_lp);
        return;
    }
    static const char *const keys[] = {"tokens", "token_logprobs", "top_logprobs",
                                       "text_offset"};
    for (size_t i = 0; i < 4; i++)
        json_array_append(json_object_get(a->root, keys[i]),
                          json_array_get(json_object_get(token_lp, keys[i]), 0));
    json_decref(token_lp);
}

json_t *ilab_usage_json(unsigned prompt_tokens, unsigned completion_tokens)
{
    return json_pack("{s:I, s:I, s:I}", "prompt_tokens", (json_int_t)prompt_tokens,
                     "completion_tokens", (json_int_t)completion_tokens, "total_tokens",
                     (json_int_t)prompt_tokens + (json_int_t)completion_tokens);
}

json_t *ilab_finish_json(ilab_finish_reason r)
{
    return r == ILAB_FINISH_NONE ? json_null() : json_string(ilab_finish_reason_name(r));
}

static json_t *head_json(const ilab_response_head *h, const char *object)
{
    return json_pack("{s:s, s:s, s:I, s:s}", "id", h->id, "object", object, "created",
                     (json_int_t)h->created, "model", h->model);
}

json_t *ilab_chunk_json(const ilab_response_head *h, uint32_t index, bool role, json_t *text,
                        json_t *logprobs, ilab_finish_reason finish, bool usage_null)
{
    bool chat = h->kind == ILAB_API_CHAT;
    json_t *root = head_json(h, chat ? "chat.completion.chunk" : "text_completion");
    json_t *choice = json_pack("{s:I}", "index", (json_int_t)index);
    if (chat) {
        json_t *delta = json_object();
        if (role) {
            json_object_set_new(delta, "role", json_string("assistant"));
            json_object_set_new(delta, "content", json_string(""));
        }
        if (text)
            json_object_set_new(delta, "content", text);
        json_object_set_new(choice, "delta", delta);
    } else {
        json_object_set_new(choice, "text", text ? text : json_string(""));
    }
    json_object_set_new(choice, "logprobs", logprobs ? logprobs : json_null());
    json_object_set_new(choice, "finish_reason", ilab_finish_json(finish));
    json_object_set_new(root, "choices", json_pack("[o]", choice));
    if (usage_null)
        json_object_set_new(root, "usage", json_null());
    return root;
}

json_t *ilab_usage_chunk_json(const ilab_response_head *h, unsigned prompt_tokens,
                              unsigned completion_tokens)
{
    json_t *root = head_json(h, h->kind == ILAB_API_CHAT ? "chat.completion.chunk"
                                                         : "text_completion");
    json_object_set_new(root, "choices", json_array());
    json_object_set_new(root, "usage", ilab_usage_json(prompt_tokens, completion_tokens));
    return root;
}

json_t *ilab_choice_json(ilab_api_kind kind, uint32_t index, json_t *text, json_t *logprobs,
                         ilab_finish_reason finish)
{
    json_t *choice = json_pack("{s:I}", "index", (json_int_t)index);
    if (kind == ILAB_API_CHAT)
        json_object_set_new(choice, "message",
                            json_pack("{s:s, s:o}", "role", "assistant", "content", text));
    else
        json_object_set_new(choice, "text", text);
    json_object_set_new(choice, "logprobs", logprobs ? logprobs : json_null());
    json_object_set_new(choice, "finish_reason", ilab_finish_json(finish));
    return choice;
}

json_t *ilab_response_json(const ilab_response_head *h, json_t *choices, unsigned prompt_tokens,
                           unsigned completion_tokens)
{
    json_t *root = head_json(h, h->kind == ILAB_API_CHAT ? "chat.completion"
                                                         : "text_completion");
    json_object_set_new(root, "choices", choices);
    json_object_set_new(root, "usage", ilab_usage_json(prompt_tokens, completion_tokens));
    return root;
}
