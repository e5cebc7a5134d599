/* POST /tokenize and POST /detokenize (vLLM's shapes): the backend's
 * tokenizer, called through the engine so that it never overlaps the
 * scheduler's backend calls, and on the backend's desk so that no HTTP
 * thread waits for it. */
#include "server_internal.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_desk.h"
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

/* One call of either endpoint: the body, the version its "model" names,
 * and the answer its work (on the backend's desk) leaves for the HTTP side. */
typedef struct small_call small_call;
typedef void (*small_work_fn)(small_call *k);
struct small_call {
    json_t *root;
    ilab_served *v;           /* a reference */
    small_work_fn run;
    bool failed;              /* answer `e` */
    ilab_api_error e;
    json_t *out;              /* else the 200's body (NULL: out of memory) */
};

static void fail(small_call *k, const ilab_api_error *e)
{
    k->failed = true;
    k->e = *e;
}

static void small_work(void *ctx)
{
    small_call *k = ctx;
    k->run(k);
}

static enum MHD_Result small_answer(ilab_server *s, struct MHD_Connection *c, void *ctx)
{
    small_call *k = ctx;
    if (k->failed)
        return ilab_server_send_error(s, c, &k->e);
    json_t *out = k->out;
    k->out = NULL;
    return ilab_server_send_json(s, c, 200, out);
}

static void small_release(void *ctx)
{
    small_call *k = ctx;
    json_decref(k->out);
    json_decref(k->root);
    ilab_served_release(k->v);
    free(k);
}

/* Both endpoints: the body checked against `allowed`, then `run` on the
 * desk of the version its "model" names (backend_desk.h). */
static enum MHD_Result handle_small_request(ilab_server *s, struct MHD_Connection *c,
                                            const ilab_http_request *req,
                                            const char *const *allowed, small_work_fn run)
{
    ilab_api_error e;
    json_t *root = parse_small_body(req->body, req->body_len, allowed, &e);
    if (!root)
        return ilab_server_send_error(s, c, &e);
    ilab_served *v = acquire(s, root, &e);
    small_call *k = v ? calloc(1, sizeof *k) : NULL;
    if (!k) {
        if (v)
            ilab_api_fail(&e, 500, NULL, "out of memory");
        ilab_served_release(v);
        json_decref(root);
        return ilab_server_send_error(s, c, &e);
    }
    *k = (small_call){.root = root, .v = v, .run = run};
    return ilab_desk_defer(s, c, req, v->desk, small_work, small_answer, small_release, k);
}

static void tokenize(small_call *k)
{
    ilab_served *v = k->v;
    json_t *root = k->root;
    ilab_api_error e;
    json_t *prompt = json_object_get(root, "prompt");
    json_t *special = json_object_get(root, "add_special_tokens");
    json_t *strs = json_object_get(root, "return_token_strs");
    if (strs && !json_is_boolean(strs) && !json_is_null(strs)) {
        ilab_api_fail(&e, 400, "return_token_strs", "'return_token_strs' must be a boolean");
        fail(k, &e);
        return;
    }
    if (!json_is_string(prompt)) {
        ilab_api_fail(&e, 400, "prompt", "'prompt' must be a string");
        fail(k, &e);
        return;
    }
    if (special && !json_is_boolean(special) && !json_is_null(special)) {
        ilab_api_fail(&e, 400, "add_special_tokens", "'add_special_tokens' must be a boolean");
        fail(k, &e);
        return;
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
        ilab_served_error(v, st, msg, &e);
        snprintf(e.param, sizeof e.param, "prompt");
        fail(k, &e);
        return;
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
    k->out = out;
}

static void detokenize(small_call *k)
{
    ilab_served *v = k->v;
    json_t *root = k->root;
    ilab_api_error e;
    json_t *tokens = json_object_get(root, "tokens");
    if (!json_is_array(tokens)) {
        ilab_api_fail(&e, 400, "tokens", "'tokens' must be an array of token ids");
        fail(k, &e);
        return;
    }
    size_t n = json_array_size(tokens);
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids)
        return; /* k->out NULL: out of memory, a 500 */
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(tokens, i);
        if (!json_is_integer(t) || json_integer_value(t) < 0 ||
            json_integer_value(t) >= v->info.vocab_size) {
            free(ids);
            ilab_api_fail(&e, 400, "tokens",
                          "'tokens[%zu]' must be a token id in [0, %d)", i, v->info.vocab_size);
            fail(k, &e);
            return;
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
        ilab_served_error(v, st, msg, &e);
        snprintf(e.param, sizeof e.param, "tokens");
        fail(k, &e);
        return;
    }
    /* Like vLLM (its tokenizer decodes with errors="replace"): bytes that are
     * not whole UTF-8 code points — a byte-fallback token alone, half a
     * character — come back as U+FFFD; JSON text cannot carry them. */
    json_t *str = ilab_json_text(text, out_len);
    free(text);
    /* vLLM names the text "prompt", SGLang "text": both, for either client */
    k->out = json_pack("{s:O, s:o}", "prompt", str, "text", str);
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
