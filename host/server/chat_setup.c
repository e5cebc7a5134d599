/* Which chat template a served backend uses, and a chat request's prompt
 * from it (docs/chat-template.md).
 *
 * The template: the server's --chat-template NAME when given; else, for a
 * backend declaring chat (ABI 1.2), the model's own template text
 * (chat_template()) recognised by name or markers (chat_formats.c), "plain"
 * when the model has none; else "plain". A model whose template is not
 * recognised keeps serving completions, and its chat requests get a 400 that
 * says so and names the override: never a silent fallback.
 *
 * The prompt: the template's segments. Template text may hold control
 * tokens (parsed as such); message content is plain text, so a message
 * cannot spell "<|im_end|>" into a token. Tokenizing the joined prompt in
 * one call gives the tokens the model was trained on (no extra boundary at
 * each segment); that is done when no content segment holds special-token
 * text (it tokenizes the same with and without PARSE_SPECIAL). Otherwise
 * each segment is tokenized on its own, content without PARSE_SPECIAL. */
#include "chat_setup.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/engine.h"
#include "chat_formats.h"

typedef struct template_read {
    char *text;
    char msg[256];
} template_read;

static ilab_status read_template(void *ctx, const ilab_backend_api_t *api, ilab_backend_t *backend)
{
    template_read *t = ctx;
    size_t len = 0;
    ilab_status st = api->chat_template(backend, NULL, 0, &len);
    if (st == ILAB_OK || st == ILAB_BUFFER_TOO_SMALL) {
        if (!(t->text = malloc(len + 1)))
            return ILAB_OUT_OF_MEMORY;
        st = api->chat_template(backend, t->text, len + 1, &len);
    }
    if (st != ILAB_OK)
        api->last_error(backend, t->msg, sizeof t->msg);
    return st;
}

/* The start of a template text, on one line, for a message. */
static void excerpt(const char *text, char *out, size_t cap)
{
    size_t k = 0;
    for (const char *p = text; *p && k + 1 < cap && k < 48; p++)
        out[k++] = (*p == '\n' || *p == '\r' || *p == '\t') ? ' ' : *p;
    out[k] = '\0';
}

bool ilab_served_chat_setup(ilab_served *v, const char *override, char *err, size_t err_cap)
{
    const ilab_manifest *m = ilab_plugin_manifest(v->be.plugin);
    v->parse_special = m->chat;
    v->chat_problem[0] = '\0';
    if (override && override[0]) {
        v->chat_format = ilab_chat_format_named(override);
        if (!v->chat_format) {
            snprintf(err, err_cap, "chat template '%s' is not one this server knows", override);
            return false;
        }
        return true;
    }
    v->chat_format = ilab_chat_format_named("plain");
    if (!m->chat)
        return true;
    template_read t = {NULL, ""};
    ilab_status st = ilab_engine_with_backend(v->be.engine, read_template, &t);
    if (st != ILAB_OK) {
        snprintf(err, err_cap, "reading the chat template from backend '%s': %s: %s",
                 m->name, ilab_status_name(st), t.msg);
        free(t.text);
        return false;
    }
    if (t.text[0]) {
        v->chat_format = ilab_chat_format_detect(t.text);
        if (!v->chat_format) {
            char start[64];
            excerpt(t.text, start, sizeof start);
            snprintf(v->chat_problem, sizeof v->chat_problem,
                     "the chat template of model '%s' (%zu bytes, beginning \"%s\") is not one "
                     "this server recognises; start the server with --chat-template NAME (or "
                     "the setting server.chat_template) to choose one of the known templates "
                     "(docs/chat-template.md)", v->model_id, strlen(t.text), start);
        }
    }
    free(t.text);
    return true;
}

const char *ilab_served_chat_name(const ilab_served *v)
{
    return v->chat_format ? ilab_chat_format_name(v->chat_format) : NULL;
}

/* --- the prompt --------------------------------------------------------------- */

/* Append `n` ids to the request's prompt tokens. */
static bool append_ids(ilab_api_request *r, const int32_t *ids, size_t n, ilab_api_error *e)
{
    int32_t *grown = realloc(r->prompt_tokens, (r->n_prompt_tokens + n + 1) * sizeof *grown);
    if (!grown)
        return ilab_api_fail(e, 500, NULL, "out of memory");
    memcpy(grown + r->n_prompt_tokens, ids, n * sizeof *ids);
    r->prompt_tokens = grown;
    r->n_prompt_tokens += n;
    return true;
}

static bool tokenize(const ilab_served *v, const char *text, size_t len, uint32_t flags,
                     int32_t **ids, size_t *n, ilab_api_error *e)
{
    char msg[256] = "";
    ilab_status st = ilab_engine_tokenize(v->be.engine, text, len, flags, msg, sizeof msg, ids, n);
    if (st == ILAB_OK)
        return true;
    return ilab_api_fail(e, st == ILAB_INVALID_ARGUMENT ? 400 : 500, "messages",
                         "tokenizing the chat prompt: %s: %s", ilab_status_name(st), msg);
}

/* Nonzero when `seg` tokenizes differently with PARSE_SPECIAL: it spells a
 * special token. -1 on error (e filled). */
static int spells_special(const ilab_served *v, const ilab_chat_segment *seg, ilab_api_error *e)
{
    int32_t *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    if (!tokenize(v, seg->text, seg->len, ILAB_TOKENIZE_PARSE_SPECIAL, &a, &na, e) ||
        !tokenize(v, seg->text, seg->len, 0, &b, &nb, e)) {
        free(a);
        return -1;
    }
    int differ = na != nb || (na && memcmp(a, b, na * sizeof *a));
    free(a);
    free(b);
    return differ;
}

static bool tokens_of(const ilab_served *v, const ilab_chat_segs *segs, ilab_api_request *r,
                      ilab_api_error *e)
{
    uint32_t special = v->parse_special ? ILAB_TOKENIZE_PARSE_SPECIAL : 0;
    bool whole = true;
    for (size_t i = 0; special && i < segs->n && whole; i++) {
        if (segs->seg[i].kind != ILAB_CHAT_SEG_CONTENT)
            continue;
        int s = spells_special(v, &segs->seg[i], e);
        if (s < 0)
            return false;
        whole = !s;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    if (whole) {
        size_t len;
        char *text = ilab_chat_segs_join(segs, &len);
        if (!text)
            return ilab_api_fail(e, 500, NULL, "out of memory");
        bool ok = tokenize(v, text, len, ILAB_TOKENIZE_ADD_BOS | special, &ids, &n, e) &&
                  append_ids(r, ids, n, e);
        free(text);
        free(ids);
        return ok;
    }
    if (!tokenize(v, "", 0, ILAB_TOKENIZE_ADD_BOS, &ids, &n, e) || !append_ids(r, ids, n, e)) {
        free(ids);
        return false;
    }
    free(ids);
    for (size_t i = 0; i < segs->n; i++) {
        const ilab_chat_segment *sg = &segs->seg[i];
        uint32_t flags = sg->kind == ILAB_CHAT_SEG_TEMPLATE ? special : 0;
        ids = NULL;
        bool ok = tokenize(v, sg->text, sg->len, flags, &ids, &n, e) && append_ids(r, ids, n, e);
        free(ids);
        if (!ok)
            return false;
    }
    return true;
}

bool ilab_chat_prompt(const ilab_served *v, ilab_api_request *r, ilab_api_error *e)
{
    if (!v->chat_format)
        return ilab_api_fail(e, 400, "messages", "%s", v->chat_problem);
    if (!strcmp(ilab_chat_format_name(v->chat_format), "plain"))
        return ilab_api_chat_plain_setup(r, e);
    /* An assistant message last is a prefill: the reply continues it, so its
     * turn is opened (the generation prompt) and not closed. */
    size_t n = r->n_messages;
    bool prefill = n > 1 && !strcmp(r->messages[n - 1].role, "assistant");
    ilab_chat_segs segs = {0};
    bool ok = ilab_chat_format_render(v->chat_format, r->messages, prefill ? n - 1 : n,
                                      prefill || r->add_generation_prompt, &segs);
    if (ok && prefill)
        ok = ilab_chat_segs_content(&segs, r->messages[n - 1].content,
                                    strlen(r->messages[n - 1].content));
    if (!ok)
        ok = ilab_api_fail(e, 500, NULL, "out of memory");
    else
        ok = tokens_of(v, &segs, r, e);
    ilab_chat_segs_free(&segs);
    return ok;
}
