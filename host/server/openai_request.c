/* OpenAI-style request bodies -> ilab_api_request, failing closed. */
#include "openai_request.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "chat_template.h"

/* Fields each endpoint accepts. Anything else is refused by name: a client
 * that sends a field it expects to matter must not get a silent default. */
static const char *const completion_fields[] = {
    "model", "prompt", "max_tokens", "temperature", "top_p", "top_k", "min_p",
    "repetition_penalty", "seed", "stop", "stop_token_ids", "ignore_eos", "stream",
    "stream_options", "logprobs", "echo", "n", "user", "presence_penalty",
    "frequency_penalty",
    /* vLLM's extensions that token-level clients (vllm_stub) send */
    "return_token_ids", "return_tokens_as_token_ids", "skip_special_tokens",
    "include_stop_str_in_output", NULL,
};
static const char *const chat_fields[] = {
    "model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p",
    "top_k", "min_p", "repetition_penalty", "seed", "stop", "stop_token_ids",
    "ignore_eos", "stream", "stream_options", "logprobs", "top_logprobs", "n", "user",
    "presence_penalty", "frequency_penalty", "add_generation_prompt", NULL,
};

static bool known(const char *const *fields, const char *key)
{
    for (size_t i = 0; fields[i]; i++)
        if (!strcmp(fields[i], key))
            return true;
    return false;
}

/* A number field in [lo, hi]; absent or null leaves *out unchanged. */
static bool get_float(json_t *root, const char *name, double lo, double hi, float *out,
                      ilab_api_error *err)
{
    json_t *v = json_object_get(root, name);
    if (!v || json_is_null(v))
        return true;
    if (!json_is_number(v))
        return ilab_api_fail(err, 400, name, "'%s' must be a number", name);
    double d = json_number_value(v);
    if (!isfinite(d) || d < lo || d > hi)
        return ilab_api_fail(err, 400, name, "'%s' must be between %g and %g, got %g", name,
                             lo, hi, d);
    *out = (float)d;
    return true;
}

static bool get_int(json_t *root, const char *name, json_int_t lo, json_int_t hi,
                    json_int_t *out, ilab_api_error *err)
{
    json_t *v = json_object_get(root, name);
    if (!v || json_is_null(v))
        return true;
    if (!json_is_integer(v))
        return ilab_api_fail(err, 400, name, "'%s' must be an integer", name);
    json_int_t i = json_integer_value(v);
    if (i < lo || i > hi)
        return ilab_api_fail(err, 400, name, "'%s' must be between %lld and %lld, got %lld",
                             name, (long long)lo, (long long)hi, (long long)i);
    *out = i;
    return true;
}

static bool get_bool(json_t *root, const char *name, bool *out, ilab_api_error *err)
{
    json_t *v = json_object_get(root, name);
    if (!v || json_is_null(v))
        return true;
    if (!json_is_boolean(v))
        return ilab_api_fail(err, 400, name, "'%s' must be true or false", name);
    *out = json_is_true(v);
    return true;
}

static bool add_stop(ilab_api_request *r, const char *s, size_t len, ilab_api_error *err)
{
    if (r->n_stop >= ILAB_SERVE_MAX_STOP + 3)
        return ilab_api_fail(err, 400, "stop", "at most %d stop strings are allowed",
                             ILAB_SERVE_MAX_STOP);
    if (len == 0)
        return ilab_api_fail(err, 400, "stop", "a stop string must not be empty");
    char *copy = strndup(s, len);
    if (!copy)
        return ilab_api_fail(err, 500, NULL, "out of memory");
    char **grown = realloc(r->stop, (r->n_stop + 1) * sizeof *grown);
    if (!grown) {
        free(copy);
        return ilab_api_fail(err, 500, NULL, "out of memory");
    }
    r->stop = grown;
    r->stop[r->n_stop++] = copy;
    return true;
}

static bool parse_stop(json_t *root, ilab_api_request *r, ilab_api_error *err)
{
    json_t *v = json_object_get(root, "stop");
    if (!v || json_is_null(v))
        return true;
    if (json_is_string(v))
        return add_stop(r, json_string_value(v), json_string_length(v), err);
    if (!json_is_array(v))
        return ilab_api_fail(err, 400, "stop", "'stop' must be a string or an array of strings");
    if (json_array_size(v) > ILAB_SERVE_MAX_STOP)
        return ilab_api_fail(err, 400, "stop", "at most %d stop strings are allowed",
                             ILAB_SERVE_MAX_STOP);
    size_t i;
    json_t *s;
    json_array_foreach(v, i, s) {
        if (!json_is_string(s))
            return ilab_api_fail(err, 400, "stop", "'stop[%zu]' must be a string", i);
        if (!add_stop(r, json_string_value(s), json_string_length(s), err))
            return false;
    }
    return true;
}

/* An array of token ids into a malloc'd int32 array. */
static bool parse_ids(json_t *arr, const char *name, int32_t **out, size_t *n,
                      ilab_api_error *err)
{
    size_t count = json_array_size(arr);
    int32_t *ids = malloc((count ? count : 1) * sizeof *ids);
    if (!ids)
        return ilab_api_fail(err, 500, NULL, "out of memory");
    for (size_t i = 0; i < count; i++) {
        json_t *t = json_array_get(arr, i);
        if (!json_is_integer(t) || json_integer_value(t) < 0 ||
            json_integer_value(t) > INT32_MAX) {
            free(ids);
            return ilab_api_fail(err, 400, name, "'%s[%zu]' must be a token id (integer >= 0)",
                                 name, i);
        }
        ids[i] = (int32_t)json_integer_value(t);
    }
    *out = ids;
    *n = count;
    return true;
}

static bool parse_prompt(json_t *root, ilab_api_request *r, ilab_api_error *err)
{
    json_t *v = json_object_get(root, "prompt");
    if (!v || json_is_null(v))
        return ilab_api_fail(err, 400, "prompt", "'prompt' is required");
    /* OpenAI allows a batch of prompts; one prompt per request here. A batch
     * of exactly one is unwrapped. */
    if (json_is_array(v) && json_array_size(v) == 1 &&
        (json_is_string(json_array_get(v, 0)) || json_is_array(json_array_get(v, 0))))
        v = json_array_get(v, 0);
    if (json_is_string(v)) {
        r->prompt = strndup(json_string_value(v), json_string_length(v));
        return r->prompt ? true : ilab_api_fail(err, 500, NULL, "out of memory");
    }
    if (json_is_array(v)) {
        if (json_array_size(v) == 0)
            return ilab_api_fail(err, 400, "prompt", "'prompt' must not be an empty token list");
        if (!json_is_integer(json_array_get(v, 0)))
            return ilab_api_fail(err, 400, "prompt",
                                 "'prompt' must be a string or an array of token ids; "
                                 "batched prompts are not supported");
        return parse_ids(v, "prompt", &r->prompt_tokens, &r->n_prompt_tokens, err);
    }
    return ilab_api_fail(err, 400, "prompt",
                         "'prompt' must be a string or an array of token ids");
}

/* A message's content: a string, or OpenAI's array of {"type":"text","text"} parts. */
static bool message_text(json_t *content, size_t idx, char **out, ilab_api_error *err)
{
    char param[64];
    snprintf(param, sizeof param, "messages[%zu].content", idx);
    if (json_is_string(content)) {
        *out = strndup(json_string_value(content), json_string_length(content));
        return *out ? true : ilab_api_fail(err, 500, NULL, "out of memory");
    }
    if (!json_is_array(content))
        return ilab_api_fail(err, 400, param, "'%s' must be a string or an array of text parts",
                             param);
    size_t total = 0, i;
    json_t *part;
    json_array_foreach(content, i, part) {
        json_t *type = json_object_get(part, "type"), *text = json_object_get(part, "text");
        if (!json_is_object(part) || !json_is_string(type) ||
            strcmp(json_string_value(type), "text") || !json_is_string(text) ||
            json_object_size(part) != 2)
            return ilab_api_fail(err, 400, param,
                                 "'%s[%zu]' must be {\"type\": \"text\", \"text\": ...}; "
                                 "only text parts are supported", param, i);
        total += json_string_length(text);
    }
    char *buf = malloc(total + 1), *p = buf;
    if (!buf)
        return ilab_api_fail(err, 500, NULL, "out of memory");
    json_array_foreach(content, i, part) {
        json_t *text = json_object_get(part, "text");
        memcpy(p, json_string_value(text), json_string_length(text));
        p += json_string_length(text);
    }
    *p = '\0';
    *out = buf;
    return true;
}

static bool parse_messages(json_t *root, ilab_api_request *r, ilab_api_error *err)
{
    json_t *v = json_object_get(root, "messages");
    if (!json_is_array(v) || json_array_size(v) == 0)
        return ilab_api_fail(err, 400, "messages", "'messages' must be a non-empty array");
    size_t n = json_array_size(v);
    ilab_chat_message *msgs = calloc(n, sizeof *msgs);
    char **texts = calloc(n, sizeof *texts);
    bool ok = msgs && texts;
    if (!ok)
        ilab_api_fail(err, 500, NULL, "out of memory");
    for (size_t i = 0; ok && i < n; i++) {
        json_t *m = json_array_get(v, i);
        char param[64];
        snprintf(param, sizeof param, "messages[%zu]", i);
        if (!json_is_object(m)) {
            ok = ilab_api_fail(err, 400, param, "'%s' must be an object", param);
            break;
        }
        const char *key;
        json_t *val;
        json_object_foreach(m, key, val) {
            if (strcmp(key, "role") && strcmp(key, "content") && strcmp(key, "name")) {
                snprintf(param, sizeof param, "messages[%zu].%s", i, key);
                ok = ilab_api_fail(err, 400, param, "unknown field '%s'", param);
                break;
            }
        }
        if (!ok)
            break;
        /* "name" (the OpenAI client sends it) tells participants apart; the
         * template has no place for it, so it is checked and ignored. */
        json_t *name = json_object_get(m, "name");
        if (name && !json_is_string(name) && !json_is_null(name)) {
            snprintf(param, sizeof param, "messages[%zu].name", i);
            ok = ilab_api_fail(err, 400, param, "'%s' must be a string", param);
            break;
        }
        json_t *role = json_object_get(m, "role");
        const char *role_name = json_is_string(role) ? json_string_value(role) : NULL;
        /* OpenAI's newer name for the system role. */
        if (role_name && !strcmp(role_name, "developer"))
            role_name = "system";
        if (!ilab_chat_role_valid(role_name)) {
            snprintf(param, sizeof param, "messages[%zu].role", i);
            ok = ilab_api_fail(err, 400, param, "'%s' must be \"system\", \"developer\", "
                               "\"user\" or \"assistant\"", param);
            break;
        }
        ok = message_text(json_object_get(m, "content"), i, &texts[i], err);
        /* A literal: the request's JSON is gone by the time it is rendered. */
        msgs[i].role = !strcmp(role_name, "system") ? "system"
                       : !strcmp(role_name, "user") ? "user" : "assistant";
        msgs[i].content = texts[i];
    }
    /* Rendered once the backend, and so the template, is known
     * (completions.c, docs/chat-template.md). */
    r->messages = msgs;
    r->message_texts = texts;
    r->n_messages = n;
    return ok;
}

bool ilab_api_chat_plain_setup(ilab_api_request *r, ilab_api_error *err)
{
    r->prompt = ilab_chat_render(r->messages, r->n_messages);
    if (!r->prompt)
        return ilab_api_fail(err, 500, NULL, "out of memory");
    for (size_t i = 0; i < ilab_chat_n_turn_stops; i++)
        if (!add_stop(r, ilab_chat_turn_stops[i], strlen(ilab_chat_turn_stops[i]), err))
            return false;
    r->trim_leading_space = true;
    return true;
}

/* Fields that exist in the OpenAI API but that this server cannot honour
 * with anything but their neutral value. */
static bool neutral_only(json_t *root, ilab_api_request *r, ilab_api_error *err)
{
    bool echo = false;
    if (!get_bool(root, "echo", &echo, err))
        return false;
    if (echo)
        return ilab_api_fail(err, 400, "echo", "'echo' must be false: echoing the prompt is "
                                               "not supported");
    json_t *user = json_object_get(root, "user");
    if (user && !json_is_string(user) && !json_is_null(user))
        return ilab_api_fail(err, 400, "user", "'user' must be a string");
    /* vLLM's defaults are what this server does: BOS/EOS have no text, and
     * a stop string is cut from the output. */
    bool skip_special = true, include_stop = false;
    if (!get_bool(root, "skip_special_tokens", &skip_special, err) ||
        !get_bool(root, "include_stop_str_in_output", &include_stop, err))
        return false;
    if (!skip_special)
        return ilab_api_fail(err, 400, "skip_special_tokens", "'skip_special_tokens' must be "
                             "true: special tokens have no text in this server's output");
    if (include_stop)
        return ilab_api_fail(err, 400, "include_stop_str_in_output", "'include_stop_str_in_output' "
                             "must be false: the output is cut before a stop string");
    (void)r;
    return true;
}

/* vLLM's token-level output: the ids of each chunk's tokens, and logprob
 * token names "token_id:N" instead of text. */
static bool parse_token_output(json_t *root, ilab_api_request *r, ilab_api_error *err)
{
    return get_bool(root, "return_token_ids", &r->return_token_ids, err) &&
           get_bool(root, "return_tokens_as_token_ids", &r->tokens_as_ids, err);
}

/* n choices of one prompt (the engine runs one request per choice). */
static bool parse_n(json_t *root, ilab_api_request *r, ilab_api_error *err)
{
    json_int_t n = 1;
    if (!get_int(root, "n", 1, ILAB_SERVE_MAX_N, &n, err))
        return false;
    r->n = (int32_t)n;
    return true;
}

static bool parse_sampling(json_t *root, ilab_api_request *r, ilab_api_error *err)
{
    ilab_sampling_t *s = &r->sampling;
    ilab_sampling_default(s);
    if (!get_float(root, "temperature", 0.0, 2.0, &s->temperature, err) ||
        !get_float(root, "top_p", 0.0, 1.0, &s->top_p, err) ||
        !get_float(root, "min_p", 0.0, 1.0, &s->min_p, err) ||
        !get_float(root, "repetition_penalty", 0.01, 10.0, &s->repetition_penalty, err) ||
        !get_float(root, "presence_penalty", -2.0, 2.0, &s->presence_penalty, err) ||
        !get_float(root, "frequency_penalty", -2.0, 2.0, &s->frequency_penalty, err))
        return false;
    if (s->top_p <= 0.0f)
        return ilab_api_fail(err, 400, "top_p", "'top_p' must be greater than 0");
    json_int_t top_k = 0;
    /* vLLM spells "off" as -1; so does OpenAI-compatible client code. */
    if (!get_int(root, "top_k", -1, INT32_MAX, &top_k, err))
        return false;
    s->top_k = top_k < 0 ? 0 : (int32_t)top_k;
    json_int_t seed = (json_int_t)ILAB_SAMPLING_DEFAULT_SEED;
    if (!get_int(root, "seed", 0, INT64_MAX, &seed, err))
        return false;
    s->seed = (uint64_t)seed;
    return true;
}

static bool parse_stream(json_t *root, ilab_api_request *r, ilab_api_error *err)
{
    if (!get_bool(root, "stream", &r->stream, err))
        return false;
    json_t *opts = json_object_get(root, "stream_options");
    if (!opts || json_is_null(opts))
        return true;
    if (!r->stream)
        return ilab_api_fail(err, 400, "stream_options",
                             "'stream_options' is only allowed with \"stream\": true");
    if (!json_is_object(opts))
        return ilab_api_fail(err, 400, "stream_options", "'stream_options' must be an object");
    const char *key;
    json_t *val;
    json_object_foreach(opts, key, val) {
        if (strcmp(key, "include_usage")) {
            char param[64];
            snprintf(param, sizeof param, "stream_options.%s", key);
            return ilab_api_fail(err, 400, param, "unknown field '%s'", param);
        }
    }
    return get_bool(opts, "include_usage", &r->include_usage, err);
}

static bool parse_logprobs(json_t *root, ilab_api_request *r, ilab_api_error *err)
{
    json_t *lp = json_object_get(root, "logprobs");
    if (r->kind == ILAB_API_COMPLETION) {
        /* Legacy completions: "logprobs": k asks for the token's logprob and
         * the k most likely alternatives. */
        if (!lp || json_is_null(lp))
            return true;
        json_int_t k = 0;
        if (!get_int(root, "logprobs", 0, ILAB_SERVE_MAX_TOP_LOGPROBS, &k, err))
            return false;
        r->logprobs = true;
        r->top_logprobs = (int32_t)k;
        return true;
    }
    if (!get_bool(root, "logprobs", &r->logprobs, err))
        return false;
    json_int_t k = 0;
    if (!get_int(root, "top_logprobs", 0, ILAB_SERVE_MAX_TOP_LOGPROBS, &k, err))
        return false;
    json_t *tk = json_object_get(root, "top_logprobs");
    if (tk && !json_is_null(tk) && !r->logprobs)
        return ilab_api_fail(err, 400, "top_logprobs",
                             "'top_logprobs' needs \"logprobs\": true");
    r->top_logprobs = (int32_t)k;
    return true;
}

static bool parse_fields(json_t *root, ilab_api_request *r, ilab_api_error *err)
{
    const char *const *fields = r->kind == ILAB_API_CHAT ? chat_fields : completion_fields;
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (!known(fields, key))
            return ilab_api_fail(err, 400, key, "unknown field '%s'", key);
    }
    json_t *model = json_object_get(root, "model");
    if (model && !json_is_null(model)) {
        if (!json_is_string(model))
            return ilab_api_fail(err, 400, "model", "'model' must be a string");
        r->model = strdup(json_string_value(model));
        if (!r->model)
            return ilab_api_fail(err, 500, NULL, "out of memory");
    }
    if (!neutral_only(root, r, err) || !parse_n(root, r, err) ||
        !parse_sampling(root, r, err) || !parse_stream(root, r, err) ||
        !parse_logprobs(root, r, err) || !parse_token_output(root, r, err))
        return false;

    json_int_t max_tokens = 0;
    if (!get_int(root, "max_tokens", 1, INT32_MAX, &max_tokens, err))
        return false;
    if (r->kind == ILAB_API_CHAT &&
        !get_int(root, "max_completion_tokens", 1, INT32_MAX, &max_tokens, err))
        return false;
    if (max_tokens == 0 && r->kind == ILAB_API_COMPLETION)
        max_tokens = ILAB_SERVE_DEFAULT_COMPLETION_TOKENS;
    r->max_tokens = (int32_t)max_tokens;

    if (!get_bool(root, "ignore_eos", &r->ignore_eos, err))
        return false;
    json_t *ids = json_object_get(root, "stop_token_ids");
    if (ids && !json_is_null(ids)) {
        if (!json_is_array(ids))
            return ilab_api_fail(err, 400, "stop_token_ids",
                                 "'stop_token_ids' must be an array of token ids");
        if (!parse_ids(ids, "stop_token_ids", &r->stop_token_ids, &r->n_stop_token_ids, err))
            return false;
    }

    if (r->kind == ILAB_API_CHAT) {
        r->add_generation_prompt = true;
        if (!get_bool(root, "add_generation_prompt", &r->add_generation_prompt, err) ||
            !parse_messages(root, r, err))
            return false;
    } else if (!parse_prompt(root, r, err)) {
        return false;
    }
    return parse_stop(root, r, err);
}

bool ilab_api_request_parse(ilab_api_kind kind, const char *body, size_t len,
                            ilab_api_request *out, ilab_api_error *err)
{
    memset(out, 0, sizeof *out);
    out->kind = kind;
    json_error_t jerr;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return ilab_api_fail(err, 400, NULL, "malformed JSON at line %d, column %d: %s",
                             jerr.line, jerr.column, jerr.text);
    bool ok;
    if (!json_is_object(root))
        ok = ilab_api_fail(err, 400, NULL, "the request body must be a JSON object");
    else
        ok = parse_fields(root, out, err);
    json_decref(root);
    if (!ok)
        ilab_api_request_free(out);
    return ok;
}

void ilab_api_request_free(ilab_api_request *r)
{
    if (!r)
        return;
    free(r->model);
    free(r->prompt);
    free(r->prompt_tokens);
    for (size_t i = 0; i < r->n_stop; i++)
        free(r->stop[i]);
    free(r->stop);
    free(r->stop_token_ids);
    for (size_t i = 0; r->message_texts && i < r->n_messages; i++)
        free(r->message_texts[i]);
    free(r->message_texts);
    free(r->messages);
    ilab_api_kind kind = r->kind;
    memset(r, 0, sizeof *r);
    r->kind = kind;
}
