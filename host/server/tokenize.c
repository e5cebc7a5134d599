/* POST /tokenize and POST /detokenize (vLLM's shapes): the backend's
 * tokenizer, called through the engine so that it never overlaps the
 * scheduler's backend calls. */
#include "server_internal.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "openai_response.h"

/* Check the body's keys against `allowed`; 400 naming the first stranger. */
static json_t *parse_small_body(const char *body, size_t len, const char *const *allowed,
                                ilab_api_error *e)
{
    json_error_t jerr;
    /* "\u0000" is text like any other (vLLM takes it; the tokenizer gets a length) */
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
    if (!root) {
        ilab_api_fail(e, 400, NULL, "malformed JSON at line %d, column %d: %s", jerr.line,
                      jerr.column, jerr.text);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        ilab_api_fail(e, 400, NULL, "the request body must be a JSON object");
        return NULL;
    }
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        bool ok = false;
        for (size_t i = 0; allowed[i]; i++)
            ok |= !strcmp(allowed[i], key);
        if (!ok) {
            ilab_api_fail(e, 400, key, "unknown field '%s'", key);
            json_decref(root);
            return NULL;
        }
    }
    return root;
}

/* The version the body's "model" names (absent: the default backend). */
static ilab_served *acquire(ilab_server *s, json_t *root, ilab_api_error *e)
{
    json_t *model = json_object_get(root, "model");
    if (model && !json_is_string(model) && !json_is_null(model)) {
        ilab_api_fail(e, 400, "model", "'model' must be a string");
        return NULL;
    }
    return ilab_server_acquire(s, json_string_value(model), e);
}

/* What one endpoint does with its body once the version is acquired; the
 * caller keeps `root` and the version. */
typedef enum MHD_Result (*small_request_fn)(ilab_server *s, struct MHD_Connection *c,
                                            ilab_served *v, json_t *root);

/* Both endpoints: the body checked against `allowed`, the version its
 * "model" names held while `run` answers. */
static enum MHD_Result handle_small_request(ilab_server *s, struct MHD_Connection *c,
                                            const ilab_http_request *req,
                                            const char *const *allowed, small_request_fn run)
{
    ilab_api_error e;
    json_t *root = parse_small_body(req->body, req->body_len, allowed, &e);
    if (!root)
        return ilab_server_send_error(s, c, &e);
    ilab_served *v = acquire(s, root, &e);
    if (!v) {
        json_decref(root);
        return ilab_server_send_error(s, c, &e);
    }
    enum MHD_Result ret = run(s, c, v, root);
    ilab_served_release(v);
    json_decref(root);
    return ret;
}

static enum MHD_Result tokenize(ilab_server *s, struct MHD_Connection *c, ilab_served *v,
                                json_t *root)
{
    ilab_api_error e;
    json_t *prompt = json_object_get(root, "prompt");
    json_t *special = json_object_get(root, "add_special_tokens");
    json_t *strs = json_object_get(root, "return_token_strs");
    if (strs && !json_is_boolean(strs) && !json_is_null(strs)) {
        ilab_api_fail(&e, 400, "return_token_strs", "'return_token_strs' must be a boolean");
        return ilab_server_send_error(s, c, &e);
    }
    if (!json_is_string(prompt)) {
        ilab_api_fail(&e, 400, "prompt", "'prompt' must be a string");
        return ilab_server_send_error(s, c, &e);
    }
    if (special && !json_is_boolean(special) && !json_is_null(special)) {
        ilab_api_fail(&e, 400, "add_special_tokens", "'add_special_tokens' must be a boolean");
        return ilab_server_send_error(s, c, &e);
    }
    /* Like vLLM: special tokens (BOS) are added unless asked not to. */
    uint32_t flags = (!special || json_is_null(special) || json_is_true(special))
                         ? ILAB_TOKENIZE_ADD_BOS : 0;
    const char *text = json_string_value(prompt);
    size_t text_len = json_string_length(prompt);
    /* Through the engine: it serialises with the scheduler's backend calls. */
    int32_t *ids = NULL;
    size_t n = 0;
    char msg[256];
    ilab_status st = ilab_engine_tokenize(v->be.engine, text, text_len, flags, msg, sizeof msg,
                                          &ids, &n);
    if (st != ILAB_OK) {
        free(ids);
        ilab_api_error_from_status(&e, st, msg);
        snprintf(e.param, sizeof e.param, "prompt");
        return ilab_server_send_error(s, c, &e);
    }
    json_t *tokens = json_array(), *pieces = json_is_true(strs) ? json_array() : NULL;
    for (size_t i = 0; i < n; i++) {
        json_array_append_new(tokens, json_integer(ids[i]));
        /* vLLM's token_strs: each token's text ("bytes:\xNN" for part of a
         * code point), from the vocabulary read at start-up */
        if (pieces)
            json_array_append_new(pieces, ilab_token_text_json(&v->vocab, ids[i]));
    }
    free(ids);
    json_t *out = json_pack("{s:o, s:I, s:i}", "tokens", tokens, "count", (json_int_t)n,
                            "max_model_len", v->info.max_context);
    if (pieces)
        json_object_set_new(out, "token_strs", pieces);
    return ilab_server_send_json(s, c, 200, out);
}

static enum MHD_Result detokenize(ilab_server *s, struct MHD_Connection *c, ilab_served *v,
                                  json_t *root)
{
    ilab_api_error e;
    json_t *tokens = json_object_get(root, "tokens");
    if (!json_is_array(tokens)) {
        ilab_api_fail(&e, 400, "tokens", "'tokens' must be an array of token ids");
        return ilab_server_send_error(s, c, &e);
    }
    size_t n = json_array_size(tokens);
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids)
        return ilab_server_send(s, c, 500, "application/json", NULL);
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(tokens, i);
        if (!json_is_integer(t) || json_integer_value(t) < 0 ||
            json_integer_value(t) >= v->info.vocab_size) {
            free(ids);
            ilab_api_fail(&e, 400, "tokens",
                          "'tokens[%zu]' must be a token id in [0, %d)", i, v->info.vocab_size);
            return ilab_server_send_error(s, c, &e);
        }
        ids[i] = (int32_t)json_integer_value(t);
    }
    char *text = NULL;
    size_t out_len = 0;
    char msg[256];
    ilab_status st = ilab_engine_detokenize(v->be.engine, ids, n, msg, sizeof msg, &text,
                                            &out_len);
    free(ids);
    if (st != ILAB_OK) {
        free(text);
        ilab_api_error_from_status(&e, st, msg);
        snprintf(e.param, sizeof e.param, "tokens");
        return ilab_server_send_error(s, c, &e);
    }
    /* Like vLLM (its tokenizer decodes with errors="replace"): bytes that are
     * not whole UTF-8 code points — a byte-fallback token alone, half a
     * character — come back as U+FFFD; JSON text cannot carry them. */
    json_t *str = ilab_json_text(text, out_len);
    free(text);
    /* vLLM names the text "prompt", SGLang "text": both, for either client */
    return ilab_server_send_json(s, c, 200, json_pack("{s:O, s:o}", "prompt", str, "text", str));
}

enum MHD_Result ilab_handle_tokenize(ilab_server *s, struct MHD_Connection *c,
                                     const ilab_http_request *req)
{
    static const char *const allowed[] = {"model", "prompt", "add_special_tokens",
                                          "return_token_strs", NULL};
    return handle_small_request(s, c, req, allowed, tokenize);
}

enum MHD_Result ilab_handle_detokenize(ilab_server *s, struct MHD_Connection *c,
                                       const ilab_http_request *req)
{
    static const char *const allowed[] = {"model", "tokens", NULL};
    return handle_small_request(s, c, req, allowed, detokenize);
}
