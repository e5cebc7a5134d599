/* SGLang's /generate body, parsed by translating it into the completions
 * body it means and running the one OpenAI parser over that: one set of
 * range checks and defaults for every endpoint, each SGLang name mapped to
 * exactly one OpenAI/vLLM field. Errors name SGLang's fields. */
#include "sglang_request.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* sampling_params member -> the completions field it is. */
static const struct { const char *sglang, *openai; } sampling_names[] = {
    {"max_new_tokens", "max_tokens"}, {"temperature", "temperature"}, {"top_p", "top_p"},
    {"top_k", "top_k"}, {"min_p", "min_p"}, {"repetition_penalty", "repetition_penalty"},
    {"presence_penalty", "presence_penalty"}, {"frequency_penalty", "frequency_penalty"},
    {"stop", "stop"}, {"stop_token_ids", "stop_token_ids"}, {"ignore_eos", "ignore_eos"},
    {"skip_special_tokens", "skip_special_tokens"}, {"sampling_seed", "seed"},
};
#define N_SAMPLING (sizeof sampling_names / sizeof sampling_names[0])

static const char *const top_fields[] = {
    "text", "input_ids", "sampling_params", "stream", "return_logprob", "top_logprobs_num",
    "logprob_start_len", NULL,
};

static bool top_known(const char *key)
{
    for (size_t i = 0; top_fields[i]; i++)
        if (!strcmp(top_fields[i], key))
            return true;
    return false;
}

/* Copy sampling_params into `o` under the completions names. */
static bool map_sampling(json_t *params, json_t *o, ilab_api_error *err)
{
    if (params && !json_is_null(params) && !json_is_object(params))
        return ilab_api_fail(err, 400, "sampling_params", "'sampling_params' must be an object");
    const char *key;
    json_t *v;
    json_object_foreach(params, key, v) {
        size_t i = 0;
        while (i < N_SAMPLING && strcmp(sampling_names[i].sglang, key))
            i++;
        if (i == N_SAMPLING)
            return ilab_api_fail(err, 400, "sampling_params", "unknown sampling parameter '%s'",
                                 key);
        json_object_set(o, sampling_names[i].openai, v);
    }
    /* SGLang's defaults: plain sampling and 128 new tokens */
    if (!json_object_get(o, "temperature"))
        json_object_set_new(o, "temperature", json_real(1.0));
    if (!json_object_get(o, "top_p"))
        json_object_set_new(o, "top_p", json_real(1.0));
    if (!json_object_get(o, "max_tokens"))
        json_object_set_new(o, "max_tokens", json_integer(ILAB_SGLANG_DEFAULT_NEW_TOKENS));
    return true;
}

/* The prompt, the stream flag and logprobs into `o`. */

/* input_ids is a list of integers, or a batch of one such list; a list of
 * strings would reach the completions prompt as text, so it is refused. */
static bool ids_are_token_ids(const json_t *ids)
{
    if (!json_is_array(ids))
        return false;
    if (json_array_size(ids) == 1 && json_is_array(json_array_get(ids, 0)))
        ids = json_array_get(ids, 0);
    size_t i;
    json_t *v;
    json_array_foreach(ids, i, v) {
        if (!json_is_integer(v))
            return false;
    }
    return true;
}

static bool map_top(json_t *root, json_t *o, ilab_api_error *err)
{
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (!top_known(key))
            return ilab_api_fail(err, 400, key, "unknown field '%s'", key);
    }
    json_t *text = json_object_get(root, "text"), *ids = json_object_get(root, "input_ids");
    if ((text && ids) || (!text && !ids))
        return ilab_api_fail(err, 400, "input_ids", "give exactly one of 'text' and 'input_ids'");
    /* each its own type: the completions prompt takes either, SGLang does not */
    if (text && !json_is_string(text))
        return ilab_api_fail(err, 400, "text", "'text' must be a string");
    if (ids && !ids_are_token_ids(ids))
        return ilab_api_fail(err, 400, "input_ids", "'input_ids' must be an array of token ids");
    json_object_set(o, "prompt", text ? text : ids);
    json_t *stream = json_object_get(root, "stream");
    if (stream)
        json_object_set(o, "stream", stream);
    json_t *lp = json_object_get(root, "return_logprob"), *k = json_object_get(root, "top_logprobs_num");
    if (lp && !json_is_boolean(lp))
        return ilab_api_fail(err, 400, "return_logprob", "'return_logprob' must be true or false");
    if (json_is_true(lp))
        json_object_set_new(o, "logprobs", k && !json_is_null(k) ? json_incref(k) : json_integer(0));
    else if (k && !json_is_null(k) && !(json_is_integer(k) && json_integer_value(k) == 0))
        return ilab_api_fail(err, 400, "top_logprobs_num", "'top_logprobs_num' needs "
                             "'return_logprob': true");
    /* only the output's logprobs are reported, never the prompt's */
    json_t *start = json_object_get(root, "logprob_start_len");
    if (start && !json_is_null(start) && !(json_is_integer(start) && json_integer_value(start) == -1))
        return ilab_api_fail(err, 400, "logprob_start_len", "'logprob_start_len' must be -1: "
                             "logprobs of the input are not reported");
    return true;
}

/* An error of the completions parser in SGLang's names. */
static void rename_error(ilab_api_error *err)
{
    for (size_t i = 0; i < N_SAMPLING; i++) {
        if (strcmp(err->param, sampling_names[i].openai))
            continue;
        char quoted[64], msg[sizeof err->message];
        snprintf(quoted, sizeof quoted, "'%s'", sampling_names[i].openai);
        char *at = strstr(err->message, quoted);
        if (at) {
            snprintf(msg, sizeof msg, "%.*s'sampling_params.%s'%s", (int)(at - err->message),
                     err->message, sampling_names[i].sglang, at + strlen(quoted));
            snprintf(err->message, sizeof err->message, "%s", msg);
        }
        snprintf(err->param, sizeof err->param, "sampling_params.%s", sampling_names[i].sglang);
        return;
    }
    if (!strcmp(err->param, "prompt"))
        snprintf(err->param, sizeof err->param, "input_ids");
    else if (!strcmp(err->param, "logprobs"))
        snprintf(err->param, sizeof err->param, "top_logprobs_num");
}

bool ilab_sglang_request_parse(const char *body, size_t len, ilab_api_request *out,
                               ilab_api_error *err)
{
    memset(out, 0, sizeof *out);
    out->kind = ILAB_API_SGLANG;
    json_error_t jerr;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return ilab_api_fail(err, 400, NULL, "malformed JSON at line %d, column %d: %s",
                             jerr.line, jerr.column, jerr.text);
    json_t *o = json_object();
    bool ok = json_is_object(root) ? map_top(root, o, err) &&
                                         map_sampling(json_object_get(root, "sampling_params"), o, err)
                                   : ilab_api_fail(err, 400, NULL, "the request body must be a JSON object");
    json_decref(root);
    char *translated = ok ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (ok && !translated)
        ok = ilab_api_fail(err, 500, NULL, "out of memory");
    if (ok) {
        ok = ilab_api_request_parse(ILAB_API_COMPLETION, translated, strlen(translated), out, err);
        if (!ok)
            rename_error(err);
    }
    free(translated);
    out->kind = ILAB_API_SGLANG;
    return ok;
}
