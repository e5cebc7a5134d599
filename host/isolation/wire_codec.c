/* Structured fields of the backend calls on the wire (wire_codec.h). */
#include "wire_codec.h"

#include <stdlib.h>
#include <string.h>

/* The most bytes of a size-prefixed struct carried past the host's sizeof:
 * enough for a plugin's tail check to see a non-zero member of a future ABI,
 * without trusting a garbage struct_size. */
#define TAIL_MAX 4096u

/* --- a size-prefixed struct, raw ------------------------------------------ */

/* The struct's bytes as the caller wrote them: up to its struct_size (at
 * least the size field, at most sizeof + TAIL_MAX), NULL-ness kept. */
void ilab_codec_put_sized(ilab_wire_out *o, const void *s, size_t host_size)
{
    if (!s) {
        ilab_wire_put_opt(o, NULL, 0);
        return;
    }
    uint32_t size;
    memcpy(&size, s, sizeof size);
    size_t n = size < sizeof size ? sizeof size : size;
    if (n > host_size + TAIL_MAX)
        n = host_size + TAIL_MAX;
    ilab_wire_put_opt(o, s, n);
}

/* A zeroed copy of at least `host_size` bytes holding the caller's bytes,
 * so the host's view reads "off" past a short struct_size. */
static void *get_sized(ilab_wire_in *in, size_t host_size, bool *present)
{
    size_t n;
    const void *p = ilab_wire_get_opt(in, present, &n);
    if (!*present || in->bad)
        return NULL;
    void *s = calloc(1, n > host_size ? n : host_size);
    if (!s) {
        in->bad = true;
        return NULL;
    }
    memcpy(s, p, n);
    return s;
}

/* --- host header and configuration ---------------------------------------- */

void ilab_codec_put_host(ilab_wire_out *o, const ilab_host_t *host)
{
    ilab_wire_put_u32(o, host != NULL);
    if (!host)
        return;
    ilab_wire_put_u32(o, host->struct_size);
    ilab_wire_put_u32(o, host->abi_major);
    ilab_wire_put_u32(o, host->abi_minor);
}

void ilab_codec_get_host(ilab_wire_in *in, ilab_host_t *out)
{
    if (!ilab_wire_get_u32(in)) {
        out->struct_size = 0; /* the caller passed NULL: the worker passes NULL too */
        return;
    }
    out->struct_size = ilab_wire_get_u32(in);
    out->abi_major = ilab_wire_get_u32(in);
    out->abi_minor = ilab_wire_get_u32(in);
}

static void put_string(ilab_wire_out *o, const char *s)
{
    ilab_wire_put_opt(o, s, s ? strlen(s) + 1 : 0);
}

/* A string field: NULL, or NUL-terminated within its bytes (else bad). */
static const char *get_string(ilab_wire_in *in)
{
    bool present;
    size_t n;
    const char *s = ilab_wire_get_opt(in, &present, &n);
    if (present && (n == 0 || !s || s[n - 1] != '\0'))
        in->bad = true;
    return in->bad ? NULL : s;
}

void ilab_codec_put_config(ilab_wire_out *o, const ilab_config_entry_t *config, size_t n)
{
    ilab_wire_put_u32(o, config != NULL);
    ilab_wire_put_u64(o, n);
    for (size_t i = 0; config && i < n; i++) {
        put_string(o, config[i].key);
        put_string(o, config[i].value);
    }
}

bool ilab_codec_get_config(ilab_wire_in *in, ilab_config_entry_t **config, size_t *n)
{
    bool present = ilab_wire_get_u32(in) != 0;
    *n = (size_t)ilab_wire_get_u64(in);
    *config = NULL;
    if (!present || in->bad)
        return !in->bad;
    if (*n > in->len) /* every entry takes bytes: a bigger count is garbage */
        return false;
    *config = calloc(*n ? *n : 1, sizeof **config);
    if (!*config)
        return false;
    for (size_t i = 0; i < *n; i++) {
        (*config)[i].key = get_string(in);
        (*config)[i].value = get_string(in);
    }
    return !in->bad;
}

/* --- eval() items ------------------------------------------------------------ */

void ilab_codec_put_items(ilab_wire_out *o, const ilab_batch_item_t *const *items, size_t n)
{
    ilab_wire_put_u32(o, items != NULL);
    ilab_wire_put_u64(o, n);
    for (size_t i = 0; items && i < n; i++) {
        const ilab_batch_item_t *it = items[i];
        ilab_codec_put_sized(o, it, sizeof *it);
        if (!it)
            continue;
        bool whole = it->struct_size >= sizeof *it;
        bool has_tokens = whole && it->tokens && it->n_tokens > 0;
        ilab_wire_put_opt(o, whole ? it->tokens : NULL,
                          has_tokens ? (size_t)it->n_tokens * sizeof(int32_t) : 0);
        ilab_wire_put_u32(o, whole && it->logits != NULL);
    }
}

size_t ilab_codec_logits_rows(const ilab_batch_item_t *it)
{
    return (it->flags & ILAB_EVAL_ALL_LOGITS) && it->n_tokens > 0 ? (size_t)it->n_tokens : 1;
}

static bool get_item(ilab_wire_in *in, int32_t vocab, ilab_codec_batch *b, size_t i)
{
    bool present;
    ilab_batch_item_t *it = get_sized(in, sizeof *it, &present);
    b->items[i] = it;
    if (!present || in->bad)
        return !in->bad;
    size_t n;
    const void *tokens = ilab_wire_get_opt(in, &present, &n);
    bool wants_logits = ilab_wire_get_u32(in) != 0;
    if (in->bad)
        return false;
    it->tokens = present ? tokens : NULL;
    it->logits = NULL;
    if (!wants_logits)
        return true;
    /* Rows as the caller sized them; a count the plugin will refuse (n_tokens
     * <= 0) still gets one row, so nothing the plugin writes lands outside. */
    size_t rows = ilab_codec_logits_rows(it);
    if (vocab <= 0 || rows > ILAB_WIRE_MAX_PAYLOAD / sizeof(float) / (size_t)vocab)
        return false;
    b->n_logits[i] = rows * (size_t)vocab;
    b->logits[i] = calloc(b->n_logits[i], sizeof(float));
    it->logits = b->logits[i];
    return it->logits != NULL;
}

bool ilab_codec_get_items(ilab_wire_in *in, int32_t vocab, ilab_codec_batch *b)
{
    memset(b, 0, sizeof *b);
    bool present = ilab_wire_get_u32(in) != 0;
    b->n_items = (size_t)ilab_wire_get_u64(in);
    if (in->bad || !present)
        return !in->bad;
    if (b->n_items > in->len) /* each item takes bytes on the wire */
        return false;
    size_t n = b->n_items ? b->n_items : 1;
    b->items = calloc(n, sizeof *b->items);
    b->logits = calloc(n, sizeof *b->logits);
    b->n_logits = calloc(n, sizeof *b->n_logits);
    if (!b->items || !b->logits || !b->n_logits)
        return false;
    for (size_t i = 0; i < b->n_items; i++)
        if (!get_item(in, vocab, b, i))
            return false;
    return true;
}

void ilab_codec_batch_free(ilab_codec_batch *b)
{
    for (size_t i = 0; b->items && i < b->n_items; i++) {
        free(b->items[i]);
        free(b->logits[i]);
    }
    free(b->items);
    free(b->logits);
    free(b->n_logits);
    memset(b, 0, sizeof *b);
}

/* --- generate() requests --------------------------------------------------- */

void ilab_codec_put_request(ilab_wire_out *o, const ilab_generate_request_t *req)
{
    ilab_codec_put_sized(o, req, sizeof *req);
    if (!req || req->struct_size < sizeof *req)
        return;
    ilab_wire_put_opt(o, req->prompt_tokens, req->n_prompt_tokens * sizeof(int32_t));
    ilab_codec_put_sized(o, req->sampling, sizeof(ilab_sampling_t));
    ilab_wire_put_u32(o, req->stop != NULL);
    for (size_t i = 0; req->stop && i < req->n_stop; i++)
        put_string(o, req->stop[i]);
    ilab_wire_put_opt(o, req->stop_token_ids, req->n_stop_token_ids * sizeof(int32_t));
}

bool ilab_codec_get_request(ilab_wire_in *in, ilab_codec_request *r)
{
    memset(r, 0, sizeof *r);
    bool present;
    r->req = get_sized(in, sizeof *r->req, &present);
    if (!present || in->bad || r->req->struct_size < sizeof *r->req)
        return !in->bad;
    size_t n;
    ilab_generate_request_t *q = r->req;
    q->prompt_tokens = ilab_wire_get_opt(in, &present, &n);
    q->sampling = r->sampling = get_sized(in, sizeof *r->sampling, &present);
    bool has_stop = ilab_wire_get_u32(in) != 0;
    if (in->bad)
        return false;
    q->stop = NULL;
    if (has_stop) {
        if (q->n_stop > in->len)
            return false;
        r->stop = calloc(q->n_stop ? q->n_stop : 1, sizeof *r->stop);
        if (!r->stop)
            return false;
        for (size_t i = 0; i < q->n_stop; i++)
            r->stop[i] = get_string(in);
        q->stop = r->stop;
    }
    q->stop_token_ids = ilab_wire_get_opt(in, &present, &n);
    return !in->bad;
}

void ilab_codec_request_free(ilab_codec_request *r)
{
    free(r->req);
    free(r->sampling);
    free(r->stop);
    memset(r, 0, sizeof *r);
}

/* --- stream events ----------------------------------------------------------- */

void ilab_codec_put_event(ilab_wire_out *o, const ilab_event_t *ev)
{
    /* Members past the emitter's struct_size are absent: read as zero. */
    ilab_event_t e = {0};
    memcpy(&e, ev, ev->struct_size < sizeof e ? ev->struct_size : sizeof e);
    ilab_wire_put_u32(o, ev->struct_size);
    ilab_wire_put_u32(o, (uint32_t)e.type);
    ilab_wire_put_u64(o, e.request_id);
    ilab_wire_put_u32(o, (uint32_t)e.token);
    ilab_wire_put_opt(o, e.text, e.text ? e.text_len : 0);
    ilab_wire_put_u64(o, e.text_len);
    ilab_wire_put_f32(o, e.logprob);
    ilab_wire_put_opt(o, e.top_logprobs,
                      e.top_logprobs ? e.n_top_logprobs * sizeof(ilab_logprob_t) : 0);
    ilab_wire_put_u32(o, e.n_top_logprobs);
    ilab_wire_put_u32(o, (uint32_t)e.finish_reason);
    ilab_wire_put_u32(o, e.prompt_tokens);
    ilab_wire_put_u32(o, e.completion_tokens);
    ilab_wire_put_u32(o, (uint32_t)e.status);
    put_string(o, e.message);
}

bool ilab_codec_get_event(ilab_wire_in *in, ilab_event_t *ev)
{
    bool present;
    size_t n;
    memset(ev, 0, sizeof *ev);
    ev->struct_size = ilab_wire_get_u32(in);
    ev->type = (ilab_event_type)ilab_wire_get_u32(in);
    ev->request_id = ilab_wire_get_u64(in);
    ev->token = (int32_t)ilab_wire_get_u32(in);
    ev->text = ilab_wire_get_opt(in, &present, &n);
    ev->text_len = (size_t)ilab_wire_get_u64(in);
    if (present && ev->text_len > n)
        in->bad = true; /* the text's bytes are all on the wire */
    ev->logprob = ilab_wire_get_f32(in);
    ev->top_logprobs = ilab_wire_get_opt(in, &present, &n);
    ev->n_top_logprobs = ilab_wire_get_u32(in);
    if (present && ev->n_top_logprobs * sizeof(ilab_logprob_t) > n)
        in->bad = true;
    ev->finish_reason = (ilab_finish_reason)ilab_wire_get_u32(in);
    ev->prompt_tokens = ilab_wire_get_u32(in);
    ev->completion_tokens = ilab_wire_get_u32(in);
    ev->status = (ilab_status)ilab_wire_get_u32(in);
    ev->message = get_string(in);
    return !in->bad;
}
