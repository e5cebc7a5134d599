/* fake_engine — a test fixture that speaks the subset of vLLM's
 * OpenAI-compatible API or SGLang's native API the inferlab adapters use,
 * with the engines' documented response shapes (docs/adapters.md), over a
 * tiny deterministic model (fake_model.c). Listens on 127.0.0.1 on an
 * ephemeral port. Not product: tests only.
 *
 *   fake_engine --engine vllm|sglang [--model ID] [--api-key KEY]
 *               [--max-model-len N] [--token-delay-ms N] [--die-after N]
 *               [--health-status N] [--health-delay-ms N] [--generate-status N]
 *               [--publish-vocab 0|1] [-- CMD ARG...]
 *
 * With `-- CMD ...` it runs CMD with every "@URL@" in its arguments (and
 * the environment variable FAKE_ENGINE_URL) set to the server's URL, stops
 * when CMD exits and exits with CMD's status. Without, it prints the URL
 * and serves until its stdin closes. */
#include <jansson.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fake_model.h"

typedef enum engine_kind { ENGINE_VLLM, ENGINE_SGLANG } engine_kind;

typedef struct options {
    engine_kind engine;
    const char *model, *api_key;
    int max_model_len, token_delay_ms, die_after, health_status, generate_status;
    int health_delay_ms; /* a server that accepts and then says nothing for so long */
    int publish_vocab; /* the model card carries vocab_size */
    int min_requests_per_connection; /* 0 = no check; else fail when fewer at the end */
} options;

static options opt = {ENGINE_VLLM, "fake-tiny", "", 512, 0, 0, 200, 0, 0, 0, 0};

/* TCP connections accepted and requests answered, for
 * --min-requests-per-connection: a client that keeps its connections open
 * sends many requests on each. */
static atomic_int connections, requests;

static void connection_event(void *cls, struct MHD_Connection *c, void **socket_context,
                             enum MHD_ConnectionNotificationCode code)
{
    if (code == MHD_CONNECTION_NOTIFY_STARTED)
        atomic_fetch_add(&connections, 1);
}

/* Set when the server stops: a delayed /health gives up waiting, so the
 * daemon's threads end at once. */
static atomic_bool stopping;

static void health_delay(void)
{
    for (int waited = 0; waited < opt.health_delay_ms && !atomic_load(&stopping); waited += 20) {
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

/* --- replies ------------------------------------------------------------------ */

static enum MHD_Result send_json(struct MHD_Connection *c, unsigned status, json_t *body)
{
    char *s = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(r, "Content-Type", "application/json");
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

/* The engines' error objects: vLLM {"error": {message, type, param, code}},
 * SGLang {"error": {"message"}}. */
static enum MHD_Result send_error(struct MHD_Connection *c, unsigned status, const char *msg)
{
    json_t *e = opt.engine == ENGINE_VLLM
                    ? json_pack("{s:s, s:s, s:n, s:i}", "message", msg, "type",
                                status == 404 ? "NotFoundError" : "BadRequestError", "param",
                                "code", (int)status)
                    : json_pack("{s:s}", "message", msg);
    return send_json(c, status, json_pack("{s:o}", "error", e));
}

/* --- generation --------------------------------------------------------------- */

typedef struct gen {
    fm_sampler *s;
    int max_tokens, n_out, top_k;
    bool want_logprobs, include_usage, ignore_eos;
    char **stop;
    size_t n_stop, max_stop;
    int32_t *stop_ids;
    size_t n_stop_ids, n_prompt;
    fm_step *steps;          /* every output token, for SGLang's cumulative chunks */
    char *text;              /* output bytes (stop string trimmed) */
    size_t text_len, text_cap, sent;
    bool finished, usage_sent, done_sent;
    json_t *stop_reason;     /* vLLM: null, token id or string */
    json_t *sglang_finish;   /* SGLang finish_reason object */
    const char *finish;      /* vLLM: "stop" | "length" */
    char *buf;
    size_t buf_len, buf_off;
    long id;
} gen;

static void gen_free(void *cls)
{
    gen *g = cls;
    fm_sampler_destroy(g->s);
    for (size_t i = 0; i < g->n_stop; i++)
        free(g->stop[i]);
    free(g->stop);
    free(g->stop_ids);
    free(g->steps);
    free(g->text);
    free(g->buf);
    json_decref(g->stop_reason);
    json_decref(g->sglang_finish);
    free(g);
}

static void text_add(gen *g, const char *s, size_t n)
{
    if (g->text_len + n + 1 > g->text_cap) {
        g->text_cap = (g->text_len + n + 1) * 2;
        g->text = realloc(g->text, g->text_cap);
    }
    memcpy(g->text + g->text_len, s, n);
    g->text_len += n;
    g->text[g->text_len] = '\0';
}

/* One model step and the end conditions after it. */
static void step(gen *g)
{
    fm_step *st = &g->steps[g->n_out++];
    fm_sample(g->s, g->want_logprobs ? g->top_k : 0, st);
    int32_t t = st->token;
    bool stop_id = false;
    for (size_t i = 0; i < g->n_stop_ids; i++)
        stop_id |= g->stop_ids[i] == t;
    if (t == FM_EOS && !g->ignore_eos) {
        g->finished = true;
        g->finish = "stop";
        g->stop_reason = json_null();
        g->sglang_finish = json_pack("{s:s, s:i}", "type", "stop", "matched", FM_EOS);
        return;
    }
    if (stop_id) {
        g->finished = true;
        g->finish = "stop";
        g->stop_reason = json_integer(t);
        g->sglang_finish = json_pack("{s:s, s:i}", "type", "stop", "matched", t);
        return;
    }
    size_t before = g->text_len, len;
    const char *p = fm_piece(t, &len);
    text_add(g, p, len);
    for (size_t i = 0; i < g->n_stop; i++) {
        size_t sl = strlen(g->stop[i]), from = before >= sl ? before - sl + 1 : 0;
        char *hit = g->text_len >= sl ? memmem(g->text + from, g->text_len - from, g->stop[i], sl) : NULL;
        if (hit) {
            g->text_len = (size_t)(hit - g->text);
            g->text[g->text_len] = '\0';
            g->finished = true;
            g->finish = "stop";
            g->stop_reason = json_string(g->stop[i]);
            g->sglang_finish = json_pack("{s:s, s:s}", "type", "stop", "matched", g->stop[i]);
            return;
        }
    }
    if (g->n_out >= g->max_tokens) {
        g->finished = true;
        g->finish = "length";
        g->stop_reason = json_null();
        g->sglang_finish = json_pack("{s:s, s:i}", "type", "length", "length", g->n_out);
    }
}

static json_t *vllm_logprobs(const gen *g, const fm_step *st, size_t offset)
{
    if (!g->want_logprobs)
        return json_null();
    char name[32];
    json_t *top = json_object();
    bool has_sampled = false;
    for (int k = 0; k < g->top_k; k++) {
        snprintf(name, sizeof name, "token_id:%d", st->top_id[k]);
        json_object_set_new(top, name, json_real(st->top_lp[k]));
        has_sampled |= st->top_id[k] == st->token;
    }
    snprintf(name, sizeof name, "token_id:%d", st->token);
    if (!has_sampled) /* vLLM adds the sampled token to the top-k */
        json_object_set_new(top, name, json_real(st->logprob));
    return json_pack("{s:[I], s:[f], s:[s], s:[o]}", "text_offset", (json_int_t)offset,
                     "token_logprobs", (double)st->logprob, "tokens", name, "top_logprobs", top);
}

/* The text that can go out now: whole code points, and vLLM keeps back
 * what could still grow into a stop string. */
static size_t sendable(const gen *g)
{
    if (g->finished)
        return g->text_len;
    size_t end = fm_complete_utf8(g->text ? g->text : "", g->text_len);
    if (opt.engine == ENGINE_VLLM && g->max_stop > 1) {
        end = end > g->max_stop - 1 ? end - (g->max_stop - 1) : 0;
        /* vLLM holds back characters, not bytes: a JSON string cannot
         * carry part of a code point (json_stringn would refuse it) */
        while (end > 0 && ((unsigned char)g->text[end] & 0xC0) == 0x80)
            end--;
    }
    return end < g->sent ? g->sent : end;
}

static json_t *vllm_chunk(gen *g)
{
    const fm_step *st = &g->steps[g->n_out - 1];
    size_t end = sendable(g), offset = g->sent;
    json_t *text = json_stringn(g->text ? g->text + g->sent : "", end - g->sent);
    g->sent = end;
    json_t *choice = json_pack("{s:i, s:o, s:o, s:o, s:o, s:[i]}", "index", 0, "text", text,
                               "logprobs", vllm_logprobs(g, st, offset), "finish_reason",
                               g->finished ? json_string(g->finish) : json_null(), "stop_reason",
                               g->finished ? json_incref(g->stop_reason) : json_null(),
                               "token_ids", st->token);
    return json_pack("{s:s, s:s, s:I, s:s, s:[o], s:n}", "id", "cmpl-fake", "object",
                     "text_completion", "created", (json_int_t)time(NULL), "model", opt.model,
                     "choices", choice, "usage");
}

static json_t *sglang_chunk(gen *g)
{
    json_t *ids = json_array(), *lps = json_array(), *tops = json_array();
    for (int i = 0; i < g->n_out; i++) {
        const fm_step *st = &g->steps[i];
        json_array_append_new(ids, json_integer(st->token));
        json_array_append_new(lps, json_pack("[f, i, n]", (double)st->logprob, st->token));
        json_t *top = json_array();
        for (int k = 0; k < g->top_k; k++)
            json_array_append_new(top, json_pack("[f, i, n]", (double)st->top_lp[k], st->top_id[k]));
        json_array_append_new(tops, g->top_k > 0 ? top : (json_decref(top), json_null()));
    }
    size_t end = sendable(g);
    json_t *meta = json_pack("{s:s, s:o, s:I, s:i, s:i, s:o, s:o}", "id", "fake-rid",
                             "finish_reason", g->finished ? json_incref(g->sglang_finish) : json_null(),
                             "prompt_tokens", (json_int_t)g->n_prompt, "completion_tokens", g->n_out,
                             "cached_tokens", 0, "output_token_logprobs", lps,
                             "output_top_logprobs", tops);
    return json_pack("{s:o, s:o, s:o}", "text", json_stringn(g->text ? g->text : "", end),
                     "output_ids", ids, "meta_info", meta);
}

static void buf_set(gen *g, json_t *chunk, const char *raw)
{
    free(g->buf);
    char *s = chunk ? json_dumps(chunk, JSON_COMPACT) : strdup(raw);
    json_decref(chunk);
    size_t n = strlen(s);
    g->buf = malloc(n + 9);
    g->buf_len = (size_t)snprintf(g->buf, n + 9, "data: %s\n\n", s);
    g->buf_off = 0;
    free(s);
}

static ssize_t read_stream(void *cls, uint64_t pos, char *out, size_t max)
{
    gen *g = cls;
    if (g->buf_off == g->buf_len) {
        if (!g->finished) {
            if (opt.die_after > 0 && g->n_out >= opt.die_after)
                return MHD_CONTENT_READER_END_WITH_ERROR; /* the server "crashes" */
            if (opt.token_delay_ms > 0)
                usleep((useconds_t)opt.token_delay_ms * 1000u);
            step(g);
            buf_set(g, opt.engine == ENGINE_VLLM ? vllm_chunk(g) : sglang_chunk(g), NULL);
        } else if (opt.engine == ENGINE_VLLM && g->include_usage && !g->usage_sent) {
            g->usage_sent = true;
            buf_set(g, json_pack("{s:s, s:s, s:I, s:s, s:[], s:{s:I, s:I, s:i}}", "id", "cmpl-fake",
                                 "object", "text_completion", "created", (json_int_t)time(NULL),
                                 "model", opt.model, "choices", "usage", "prompt_tokens",
                                 (json_int_t)g->n_prompt, "total_tokens",
                                 (json_int_t)g->n_prompt + g->n_out, "completion_tokens", g->n_out),
                    NULL);
        } else if (!g->done_sent) {
            g->done_sent = true;
            buf_set(g, NULL, "[DONE]");
        } else {
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
    }
    size_t n = g->buf_len - g->buf_off < max ? g->buf_len - g->buf_off : max;
    memcpy(out, g->buf + g->buf_off, n);
    g->buf_off += n;
    return (ssize_t)n;
}

/* --- request parsing ------------------------------------------------------------ */

static bool read_ids(json_t *a, int32_t **out, size_t *n, char *err, size_t cap)
{
    *n = json_array_size(a);
    *out = calloc(*n + 1, sizeof **out);
    for (size_t i = 0; i < *n; i++) {
        json_t *v = json_array_get(a, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= fm_vocab_size()) {
            snprintf(err, cap, "Token id %lld is out of vocabulary", (long long)json_integer_value(v));
            return false;
        }
        (*out)[i] = (int32_t)json_integer_value(v);
    }
    return true;
}

static void read_stops(gen *g, json_t *stop)
{
    if (json_is_string(stop)) {
        g->stop = calloc(1, sizeof *g->stop);
        g->stop[g->n_stop++] = strdup(json_string_value(stop));
    } else if (json_is_array(stop)) {
        g->stop = calloc(json_array_size(stop) + 1, sizeof *g->stop);
        size_t i;
        json_t *v;
        json_array_foreach(stop, i, v) if (json_is_string(v)) g->stop[g->n_stop++] = strdup(json_string_value(v));
    }
    for (size_t i = 0; i < g->n_stop; i++)
        if (strlen(g->stop[i]) > g->max_stop)
            g->max_stop = strlen(g->stop[i]);
}

static double num(json_t *o, const char *k, double d)
{
    json_t *v = json_object_get(o, k);
    return json_is_number(v) ? json_number_value(v) : d;
}

/* Start generation from a parsed request body, or answer an error. */
static enum MHD_Result generate(struct MHD_Connection *c, json_t *body)
{
    if (opt.generate_status)
        return send_error(c, (unsigned)opt.generate_status, "fake engine: configured to fail this request");
    bool vllm = opt.engine == ENGINE_VLLM;
    json_t *params = vllm ? body : json_object_get(body, "sampling_params");
    if (!vllm && params) {
        static const char *const known[] = {"max_new_tokens", "temperature", "top_p", "top_k", "min_p",
                                            "repetition_penalty", "presence_penalty", "frequency_penalty",
                                            "stop", "stop_token_ids", "ignore_eos", "skip_special_tokens",
                                            "no_stop_trim", "sampling_seed", "n"};
        const char *k;
        json_t *v;
        json_object_foreach(params, k, v) {
            bool ok = false;
            for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
                ok |= !strcmp(k, known[i]);
            if (!ok) {
                char m[256];
                snprintf(m, sizeof m, "SamplingParams.__init__() got an unexpected keyword argument '%s'", k);
                return send_error(c, 400, m);
            }
        }
    }
    if (vllm) {
        const char *model = json_string_value(json_object_get(body, "model"));
        if (model && strcmp(model, opt.model)) {
            char m[512];
            snprintf(m, sizeof m, "The model `%s` does not exist.", model);
            return send_error(c, 404, m);
        }
        if (!json_is_true(json_object_get(body, "stream")))
            return send_error(c, 400, "fake engine: only streamed completions are served");
    }
    char err[256] = "";
    int32_t *prompt = NULL;
    size_t n_prompt = 0;
    if (!read_ids(json_object_get(body, vllm ? "prompt" : "input_ids"), &prompt, &n_prompt, err, sizeof err) ||
        n_prompt == 0) {
        free(prompt);
        return send_error(c, 400, err[0] ? err : "the prompt must be a non-empty list of token ids");
    }
    gen *g = calloc(1, sizeof *g);
    g->n_prompt = n_prompt;
    g->max_tokens = (int)num(params, vllm ? "max_tokens" : "max_new_tokens", 16);
    json_t *lp = json_object_get(body, vllm ? "logprobs" : "top_logprobs_num");
    g->want_logprobs = vllm ? json_is_integer(lp) : json_is_true(json_object_get(body, "return_logprob"));
    g->top_k = json_is_integer(lp) ? (int)json_integer_value(lp) : 0;
    g->include_usage = json_is_true(json_object_get(json_object_get(body, "stream_options"), "include_usage"));
    g->ignore_eos = json_is_true(json_object_get(params, "ignore_eos"));
    read_stops(g, json_object_get(params, "stop"));
    int32_t *ids = NULL;
    read_ids(json_object_get(params, "stop_token_ids"), &ids, &g->n_stop_ids, err, sizeof err);
    g->stop_ids = ids;
    /* Each engine's own context rule and words: vLLM refuses prompt +
     * max_tokens above max_model_len; SGLang refuses input + max_new_tokens
     * at or above its context length (it keeps one position free). */
    size_t total = (size_t)g->max_tokens + n_prompt, ctx = (size_t)opt.max_model_len;
    bool too_long = vllm ? total > ctx : total >= ctx;
    if (too_long || g->max_tokens < 1 || g->top_k < 0 || g->top_k > FM_TOPK_MAX) {
        char m[384];
        if (g->top_k < 0 || g->top_k > FM_TOPK_MAX)
            snprintf(m, sizeof m, "Requested sample logprobs of %d, which is greater than max allowed: %d", g->top_k, FM_TOPK_MAX);
        else if (vllm)
            snprintf(m, sizeof m, "This model's maximum context length is %d tokens. However, you requested %zu tokens (%zu in the messages, %d in the completion).",
                     opt.max_model_len, total, n_prompt, g->max_tokens);
        else if (n_prompt >= ctx)
            snprintf(m, sizeof m, "The input (%zu tokens) is longer than the model's context length (%d tokens).",
                     n_prompt, opt.max_model_len);
        else
            snprintf(m, sizeof m, "Requested token count exceeds the model's maximum context length of %d tokens. You requested a total of %zu tokens: %zu tokens from the input messages and %d tokens for the completion. Please reduce the number of tokens in the input messages or the completion to fit within the limit.",
                     opt.max_model_len, total, n_prompt, g->max_tokens);
        gen_free(g);
        free(prompt);
        return send_error(c, 400, m);
    }
    json_t *seed = json_object_get(params, vllm ? "seed" : "sampling_seed");
    fm_params p = {.temperature = (float)num(params, "temperature", 1.0), .top_p = (float)num(params, "top_p", 1.0),
                   .min_p = (float)num(params, "min_p", 0), .repetition_penalty = (float)num(params, "repetition_penalty", 1.0),
                   .presence_penalty = (float)num(params, "presence_penalty", 0),
                   .frequency_penalty = (float)num(params, "frequency_penalty", 0),
                   .top_k = (int32_t)num(params, "top_k", -1),
                   .seed = json_is_integer(seed) ? (uint64_t)json_integer_value(seed) : (uint64_t)time(NULL)};
    g->s = fm_sampler_create(&p, prompt, n_prompt);
    g->steps = calloc((size_t)g->max_tokens + 1, sizeof *g->steps);
    free(prompt);
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, read_stream, g, gen_free);
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    enum MHD_Result ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ret;
}

/* --- tokenizer ------------------------------------------------------------------- */

static enum MHD_Result tokenize(struct MHD_Connection *c, json_t *body)
{
    json_t *prompt = json_object_get(body, "prompt");
    if (!json_is_string(prompt))
        return send_error(c, 400, "'prompt' must be a string");
    size_t len = json_string_length(prompt);
    int32_t *ids = malloc((len + 2) * sizeof *ids);
    json_t *add = json_object_get(body, "add_special_tokens");
    size_t n = fm_tokenize(json_string_value(prompt), len, !add || json_is_true(add), ids);
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(a, json_integer(ids[i]));
    free(ids);
    json_t *ans = json_pack("{s:I, s:i, s:o}", "count", (json_int_t)n, "max_model_len", opt.max_model_len, "tokens", a);
    if (opt.engine == ENGINE_VLLM)
        json_object_set_new(ans, "token_strs", json_null());
    return send_json(c, 200, ans);
}

static enum MHD_Result detokenize(struct MHD_Connection *c, json_t *body)
{
    int32_t *ids = NULL;
    size_t n = 0;
    char err[256] = "";
    if (!json_is_array(json_object_get(body, "tokens")) ||
        !read_ids(json_object_get(body, "tokens"), &ids, &n, err, sizeof err)) {
        free(ids);
        return send_error(c, 400, err[0] ? err : "'tokens' must be a list of token ids");
    }
    size_t len;
    char *text = fm_decode(ids, n, &len);
    free(ids);
    json_t *ans = json_pack("{s:s%}", opt.engine == ENGINE_VLLM ? "prompt" : "text", text, len);
    free(text);
    return send_json(c, 200, ans);
}

static enum MHD_Result models(struct MHD_Connection *c)
{
    json_t *card = json_pack("{s:s, s:s, s:I, s:s, s:s, s:n, s:i}", "id", opt.model, "object", "model",
                             "created", (json_int_t)time(NULL), "owned_by",
                             opt.engine == ENGINE_VLLM ? "vllm" : "sglang", "root", opt.model, "parent",
                             "max_model_len", opt.max_model_len);
    /* --publish-vocab 1: the card carries vocab_size, as an engine that
     * publishes it would, so an adapter needs nothing but the URL. */
    if (card && opt.publish_vocab)
        json_object_set_new(card, "vocab_size", json_integer(fm_vocab_size()));
    return send_json(c, 200, json_pack("{s:s, s:[o]}", "object", "list", "data", card));
}

/* --- routing ----------------------------------------------------------------- */

typedef struct upload {
    char *data;
    size_t len;
} upload;

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode t)
{
    upload *u = *con_cls;
    atomic_fetch_add(&requests, 1);
    if (u) {
        free(u->data);
        free(u);
    }
    *con_cls = NULL;
}

/* vLLM's --api-key guards /v1/...; SGLang's every route but /health. */
static bool guarded(const char *url)
{
    if (!opt.api_key[0])
        return false;
    return opt.engine == ENGINE_VLLM ? !strncmp(url, "/v1/", 4) : strcmp(url, "/health") != 0;
}

static enum MHD_Result route(struct MHD_Connection *c, const char *url, const char *method, upload *u)
{
    if (guarded(url)) {
        const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
        char want[1100];
        snprintf(want, sizeof want, "Bearer %s", opt.api_key);
        if (!auth || strcmp(auth, want))
            return send_json(c, 401, json_pack("{s:s}", "error", "Unauthorized"));
    }
    bool get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    if (get && !strcmp(url, "/health")) {
        health_delay();
        struct MHD_Response *r = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
        enum MHD_Result ret = MHD_queue_response(c, (unsigned)opt.health_status, r);
        MHD_destroy_response(r);
        return ret;
    }
    if (get && !strcmp(url, "/v1/models"))
        return models(c);
    const char *gen_path = opt.engine == ENGINE_VLLM ? "/v1/completions" : "/generate";
    bool known = !strcmp(url, "/tokenize") || !strcmp(url, "/detokenize") || !strcmp(url, gen_path);
    if (!post || !known)
        return send_error(c, 404, "Not Found");
    json_error_t e;
    json_t *body = json_loadb(u->data ? u->data : "", u->len, JSON_ALLOW_NUL, &e);
    if (!json_is_object(body)) {
        json_decref(body);
        return send_error(c, 400, "the body is not a JSON object");
    }
    enum MHD_Result ret = !strcmp(url, "/tokenize") ? tokenize(c, body)
                          : !strcmp(url, "/detokenize") ? detokenize(c, body)
                                                        : generate(c, body);
    json_decref(body);
    return ret;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                              const char *version, const char *data, size_t *size, void **con_cls)
{
    upload *u = *con_cls;
    if (!u) {
        *con_cls = calloc(1, sizeof(upload));
        return MHD_YES;
    }
    if (*size) {
        u->data = realloc(u->data, u->len + *size + 1);
        memcpy(u->data + u->len, data, *size);
        u->len += *size;
        u->data[u->len] = '\0';
        *size = 0;
        return MHD_YES;
    }
    return route(c, url, method, u);
}

/* --- main ----------------------------------------------------------------------- */

static int usage(void)
{
    fprintf(stderr, "usage: fake_engine --engine vllm|sglang [--model ID] [--api-key KEY] [--max-model-len N]\n"
                    "                   [--token-delay-ms N] [--die-after N] [--health-status N] [--health-delay-ms N]\n"
                    "                   [--generate-status N] [--publish-vocab 0|1]\n"
                    "                   [--min-requests-per-connection N] [-- CMD ARG...]\n");
    return 2;
}

static int run_child(char **argv, const char *url)
{
    setenv("FAKE_ENGINE_URL", url, 1);
    pid_t pid = fork();
    if (pid == 0) {
        for (char **a = argv; *a; a++)
            if (strstr(*a, "@URL@")) {
                char *at = strstr(*a, "@URL@");
                size_t n = strlen(*a) + strlen(url);
                char *s = malloc(n);
                snprintf(s, n, "%.*s%s%s", (int)(at - *a), *a, url, at + 5);
                *a = s;
            }
        execvp(argv[0], argv);
        perror(argv[0]);
        _exit(127);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) < 0)
        return 1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int main(int argc, char **argv)
{
    int i = 1;
    while (i < argc) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--")) {
            i++;
            break;
        }
        if (!v)
            return usage();
        if (!strcmp(a, "--engine") && (!strcmp(v, "vllm") || !strcmp(v, "sglang")))
            opt.engine = !strcmp(v, "vllm") ? ENGINE_VLLM : ENGINE_SGLANG;
        else if (!strcmp(a, "--model"))
            opt.model = v;
        else if (!strcmp(a, "--api-key"))
            opt.api_key = v;
        else if (!strcmp(a, "--max-model-len"))
            opt.max_model_len = atoi(v);
        else if (!strcmp(a, "--token-delay-ms"))
            opt.token_delay_ms = atoi(v);
        else if (!strcmp(a, "--die-after"))
            opt.die_after = atoi(v);
        else if (!strcmp(a, "--health-status"))
            opt.health_status = atoi(v);
        else if (!strcmp(a, "--health-delay-ms"))
            opt.health_delay_ms = atoi(v);
        else if (!strcmp(a, "--generate-status"))
            opt.generate_status = atoi(v);
        else if (!strcmp(a, "--publish-vocab") && (!strcmp(v, "0") || !strcmp(v, "1")))
            opt.publish_vocab = atoi(v);
        else if (!strcmp(a, "--min-requests-per-connection"))
            opt.min_requests_per_connection = atoi(v);
        else
            return usage();
        i += 2; /* the option and its value */
    }
    signal(SIGPIPE, SIG_IGN);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = 0, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct MHD_Daemon *d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD, 0,
                                            NULL, NULL, handle, NULL, MHD_OPTION_SOCK_ADDR, &addr,
                                            MHD_OPTION_NOTIFY_COMPLETED, completed, NULL,
                                            MHD_OPTION_NOTIFY_CONNECTION, connection_event, NULL,
                                            MHD_OPTION_CONNECTION_TIMEOUT, 60u, MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "fake_engine: cannot listen on 127.0.0.1\n");
        return 1;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%u", info ? (unsigned)info->port : 0u);
    int rc = 0;
    if (i < argc) {
        rc = run_child(argv + i, url);
    } else {
        printf("%s\n", url);
        fflush(stdout);
        char buf[256];
        while (fread(buf, 1, sizeof buf, stdin) > 0)
            ;
    }
    atomic_store(&stopping, true);
    MHD_stop_daemon(d);
    int n_conn = atomic_load(&connections), n_req = atomic_load(&requests);
    if (opt.min_requests_per_connection > 0 && n_req < opt.min_requests_per_connection * n_conn) {
        fprintf(stderr, "fake_engine: %d requests on %d connections, fewer than %d a connection: "
                        "the client does not keep its connections open\n",
                n_req, n_conn, opt.min_requests_per_connection);
        return rc ? rc : 1;
    }
    fprintf(stderr, "fake_engine: %d requests on %d connections\n", n_req, n_conn);
    return rc;
}
