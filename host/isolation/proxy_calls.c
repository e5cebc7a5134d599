/* The proxy's backend table: each member sends its arguments to the worker
 * and hands back what the plugin wrote (proxy.h). The worker's side of each
 * call is worker_calls.c, field for field in the same order. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "out_param.h"
#include "proxy_internal.h"
#include "wire_codec.h"

/* An instance of a proxy plugin is its worker connection. */
static ilab_proxy_conn *conn_of(const ilab_backend_t *b) { return (ilab_proxy_conn *)b; }

/* --- asking the worker ------------------------------------------------------------- */

typedef struct answer {
    ilab_proxy_call call;
    ilab_wire_in in; /* the REPLY's fields after its message */
} answer;

/* The worker is gone: the call fails with why, as every later one will. */
static ilab_status worker_gone(ilab_proxy_conn *c)
{
    pthread_mutex_lock(&c->lock);
    snprintf(c->last_error, sizeof c->last_error, "%s", c->death);
    pthread_mutex_unlock(&c->lock);
    return ILAB_UNAVAILABLE;
}

/* Read a REPLY's status and message; a non-OK one becomes the instance's
 * last error. */
static ilab_status read_reply(ilab_proxy_conn *c, answer *a)
{
    a->in = (ilab_wire_in){a->call.payload, a->call.h.len, 0, false};
    bool present;
    size_t n;
    const char *msg = ilab_wire_get_opt(&a->in, &present, &n);
    if (a->call.h.op != ILAB_WIRE_REPLY || a->in.bad || !msg || !n || msg[n - 1]) {
        ilab_proxy_set_error(c, "backend worker: malformed reply");
        return ILAB_INTERNAL;
    }
    ilab_status st = (ilab_status)a->call.h.status;
    if (st != ILAB_OK)
        ilab_proxy_set_error(c, msg);
    return st;
}

/* Send `args` (freed here) as `op` and wait for the reply. The caller reads
 * its fields from a->in, then calls ilab_proxy_call_end. */
static ilab_status ask(ilab_proxy_conn *c, uint32_t op, ilab_wire_out *args, answer *a)
{
    bool ok = ilab_proxy_call_begin(c, &a->call, op, args);
    ilab_wire_out_free(args);
    a->in = (ilab_wire_in){NULL, 0, 0, true};
    return ok ? read_reply(c, a) : worker_gone(c);
}

static ilab_status done(ilab_proxy_conn *c, answer *a, ilab_status st)
{
    ilab_proxy_call_end(c, &a->call);
    return st;
}

/* --- lifecycle ----------------------------------------------------------------------- */

static ilab_status no_target(char *buf, size_t cap)
{
    if (buf && cap)
        snprintf(buf, cap, "host table is NULL or not the one of this proxied plugin "
                           "(ilab_plugin_host() gives it)");
    return ILAB_INVALID_ARGUMENT;
}

/* probe() and create() both: a worker, then the call on it. */
static ilab_status lifecycle(uint32_t op, const ilab_host_t *host, const ilab_config_entry_t *config,
                             size_t n_config, char *buf, size_t cap, ilab_backend_t **out)
{
    const ilab_proxy_target *t = ilab_proxy_target_of(host);
    if (!t)
        return no_target(buf, cap);
    ilab_proxy_conn *c;
    char why[1024];
    ilab_status st = ilab_proxy_conn_open(t, why, sizeof why, &c);
    if (st != ILAB_OK) {
        if (buf && cap)
            snprintf(buf, cap, "%s", why);
        return ILAB_UNAVAILABLE;
    }
    ilab_wire_out args = {0};
    ilab_codec_put_host(&args, host);
    ilab_codec_put_config(&args, config, n_config);
    ilab_out_put(&args, buf, cap, 1);
    if (op == ILAB_WIRE_CREATE)
        ilab_wire_put_u32(&args, out != NULL);
    answer a;
    st = ask(c, op, &args, &a);
    if (st == ILAB_UNAVAILABLE && a.in.bad) { /* the worker died in the call */
        if (buf && cap)
            snprintf(buf, cap, "%s", c->death);
    } else {
        ilab_out_copy_back(&a.in, buf, cap, 1);
        c->vocab = (int32_t)ilab_wire_get_u32(&a.in);
    }
    done(c, &a, st);
    if (st == ILAB_OK && op == ILAB_WIRE_CREATE && out) {
        *out = (ilab_backend_t *)c;
        return st;
    }
    ilab_proxy_conn_close(c);
    return st;
}

static ilab_status proxy_probe(const ilab_host_t *host, const ilab_config_entry_t *config,
                               size_t n_config, char *reason, size_t reason_cap)
{
    return lifecycle(ILAB_WIRE_PROBE, host, config, n_config, reason, reason_cap, NULL);
}

static ilab_status proxy_create(const ilab_host_t *host, const ilab_config_entry_t *config,
                                size_t n_config, char *error, size_t error_cap,
                                ilab_backend_t **out)
{
    return lifecycle(ILAB_WIRE_CREATE, host, config, n_config, error, error_cap, out);
}

static void proxy_destroy(ilab_backend_t *b) { ilab_proxy_conn_close(conn_of(b)); }

static size_t proxy_last_error(const ilab_backend_t *b, char *buf, size_t cap)
{
    if (!b)
        return 0;
    ilab_proxy_conn *c = conn_of(b);
    pthread_mutex_lock(&c->lock);
    size_t len = strlen(c->last_error);
    if (buf && cap) {
        size_t n = len < cap - 1 ? len : cap - 1;
        memcpy(buf, c->last_error, n);
        buf[n] = '\0';
    }
    pthread_mutex_unlock(&c->lock);
    return len;
}

/* --- size-prefixed structs the plugin fills ------------------------------------------- */

static ilab_status fill_struct(ilab_backend_t *b, uint32_t op, void *s, size_t host_size)
{
    if (!b)
        return ILAB_INVALID_ARGUMENT;
    ilab_proxy_conn *c = conn_of(b);
    ilab_wire_out args = {0};
    ilab_codec_put_sized(&args, s, host_size);
    answer a;
    ilab_status st = ask(c, op, &args, &a);
    bool present;
    size_t n;
    const void *back = ilab_wire_get_opt(&a.in, &present, &n);
    if (s && present && !a.in.bad)
        memcpy(s, back, n);
    return done(c, &a, st);
}

static ilab_status proxy_model_info(ilab_backend_t *b, ilab_model_info_t *info)
{
    return fill_struct(b, ILAB_WIRE_MODEL_INFO, info, sizeof *info);
}

static ilab_status proxy_cache_stats(ilab_backend_t *b, ilab_cache_stats_t *stats)
{
    return fill_struct(b, ILAB_WIRE_CACHE_STATS, stats, sizeof *stats);
}

/* --- tokens --------------------------------------------------------------------------- */

/* tokenize, detokenize and token_piece share one message: the input, its
 * count, flags, the piece's two ids, the output buffer and its size. */
static ilab_status tokens_call(ilab_backend_t *b, uint32_t op, const void *input, size_t in_bytes,
                               uint64_t count, uint32_t flags, int32_t prev, int32_t token,
                               void *out, size_t cap, size_t elem, size_t *n_out)
{
    if (!b)
        return ILAB_INVALID_ARGUMENT;
    ilab_proxy_conn *c = conn_of(b);
    ilab_wire_out args = {0};
    ilab_wire_put_opt(&args, input, in_bytes);
    ilab_wire_put_u64(&args, count);
    ilab_wire_put_u32(&args, flags);
    ilab_wire_put_u32(&args, (uint32_t)prev);
    ilab_wire_put_u32(&args, (uint32_t)token);
    ilab_out_put(&args, out, cap, elem);
    ilab_out_put_scalar(&args, n_out, n_out ? *n_out : 0);
    answer a;
    ilab_status st = ask(c, op, &args, &a);
    ilab_out_copy_back(&a.in, out, cap, elem);
    bool present;
    uint64_t n = ilab_out_get_scalar(&a.in, &present);
    if (n_out && present && !a.in.bad)
        *n_out = (size_t)n;
    return done(c, &a, st);
}

static ilab_status proxy_tokenize(ilab_backend_t *b, const char *text, size_t len, uint32_t flags,
                                  int32_t *tokens, size_t cap, size_t *n_tokens)
{
    return tokens_call(b, ILAB_WIRE_TOKENIZE, text, len, len, flags, 0, 0, tokens, cap,
                       sizeof *tokens, n_tokens);
}

static ilab_status proxy_detokenize(ilab_backend_t *b, const int32_t *tokens, size_t n_tokens,
                                    char *text, size_t cap, size_t *len)
{
    return tokens_call(b, ILAB_WIRE_DETOKENIZE, tokens, n_tokens * sizeof *tokens, n_tokens, 0,
                       0, 0, text, cap, 1, len);
}

static ilab_status proxy_token_piece(ilab_backend_t *b, int32_t prev_token, int32_t token,
                                     char *piece, size_t cap, size_t *len)
{
    return tokens_call(b, ILAB_WIRE_TOKEN_PIECE, NULL, 0, 0, 0, prev_token, token, piece, cap, 1,
                       len);
}

/* ABI 1.2: the same message as tokenize() (ids out) and detokenize() (text
 * out), without input. */
static ilab_status proxy_eog_ids(ilab_backend_t *b, int32_t *ids, size_t cap, size_t *n_ids)
{
    return tokens_call(b, ILAB_WIRE_EOG_IDS, NULL, 0, 0, 0, 0, 0, ids, cap, sizeof *ids, n_ids);
}

static ilab_status proxy_chat_template(ilab_backend_t *b, char *text, size_t cap, size_t *len)
{
    return tokens_call(b, ILAB_WIRE_CHAT_TEMPLATE, NULL, 0, 0, 0, 0, 0, text, cap, 1, len);
}

/* --- sequences -------------------------------------------------------------------------- */

/* Every sequence call: a handle, an int argument, and one scalar out. */
static ilab_status seq_call(ilab_backend_t *b, uint32_t op, ilab_seq_t seq, int32_t arg,
                            const void *out, uint64_t *value)
{
    if (!b)
        return ILAB_INVALID_ARGUMENT;
    ilab_proxy_conn *c = conn_of(b);
    ilab_wire_out args = {0};
    ilab_wire_put_u64(&args, seq);
    ilab_wire_put_u32(&args, (uint32_t)arg);
    ilab_out_put_scalar(&args, out, *value);
    answer a;
    ilab_status st = ask(c, op, &args, &a);
    uint64_t v = ilab_wire_get_u64(&a.in);
    if (!a.in.bad)
        *value = v;
    return done(c, &a, st);
}

static ilab_status proxy_seq_create(ilab_backend_t *b, ilab_seq_t *seq)
{
    uint64_t v = seq ? *seq : 0;
    ilab_status st = seq_call(b, ILAB_WIRE_SEQ_CREATE, 0, 0, seq, &v);
    if (seq)
        *seq = v;
    return st;
}

static ilab_status proxy_seq_free(ilab_backend_t *b, ilab_seq_t seq)
{
    uint64_t v = 0;
    return seq_call(b, ILAB_WIRE_SEQ_FREE, seq, 0, NULL, &v);
}

static ilab_status proxy_seq_fork(ilab_backend_t *b, ilab_seq_t parent, ilab_seq_t *child)
{
    uint64_t v = child ? *child : 0;
    ilab_status st = seq_call(b, ILAB_WIRE_SEQ_FORK, parent, 0, child, &v);
    if (child)
        *child = v;
    return st;
}

static ilab_status proxy_seq_truncate(ilab_backend_t *b, ilab_seq_t seq, int32_t n_keep)
{
    uint64_t v = 0;
    return seq_call(b, ILAB_WIRE_SEQ_TRUNCATE, seq, n_keep, NULL, &v);
}

static ilab_status proxy_seq_length(ilab_backend_t *b, ilab_seq_t seq, int32_t *length)
{
    uint64_t v = length ? (uint64_t)(uint32_t)*length : 0;
    ilab_status st = seq_call(b, ILAB_WIRE_SEQ_LENGTH, seq, 0, length, &v);
    if (length)
        *length = (int32_t)(uint32_t)v;
    return st;
}

/* --- eval ------------------------------------------------------------------------------- */

static ilab_status proxy_eval(ilab_backend_t *b, const ilab_batch_item_t *const *items,
                              size_t n_items)
{
    if (!b)
        return ILAB_INVALID_ARGUMENT;
    ilab_proxy_conn *c = conn_of(b);
    ilab_wire_out args = {0};
    ilab_codec_put_items(&args, items, n_items);
    answer a;
    ilab_status st = ask(c, ILAB_WIRE_EVAL, &args, &a);
    /* The rows come back only on OK: the caller's buffers are untouched
     * otherwise, as the contract wants [CCH-8]. */
    for (size_t i = 0; st == ILAB_OK && i < n_items; i++) {
        const ilab_batch_item_t *it = items[i];
        if (!it || it->struct_size < sizeof *it || !it->logits)
            continue;
        size_t n = ilab_codec_logits_rows(it) * (size_t)c->vocab * sizeof(float);
        const void *rows = ilab_wire_get_bytes(&a.in, n);
        if (!rows) {
            ilab_proxy_set_error(c, "backend worker: eval reply shorter than the logits asked for");
            return done(c, &a, ILAB_INTERNAL);
        }
        memcpy(it->logits, rows, n);
    }
    return done(c, &a, st);
}

/* --- generate ----------------------------------------------------------------------------- */

/* The worker died mid-stream: the stream still ends with exactly one
 * terminal event [STR-1], the ERROR that says why. */
static void end_stream(ilab_proxy_conn *c, const ilab_generate_request_t *req,
                       ilab_event_fn on_event, void *user_data)
{
    ilab_event_t ev = {.struct_size = sizeof ev, .type = ILAB_EVENT_ERROR,
                       .finish_reason = ILAB_FINISH_ERROR, .status = ILAB_UNAVAILABLE};
    ev.request_id = req && req->struct_size >= sizeof *req ? req->request_id : 0;
    char msg[sizeof c->death];
    pthread_mutex_lock(&c->lock);
    snprintf(msg, sizeof msg, "%s", c->death);
    pthread_mutex_unlock(&c->lock);
    ev.message = msg;
    on_event(user_data, &ev);
}

static ilab_status proxy_generate(ilab_backend_t *b, const ilab_generate_request_t *req,
                                  ilab_event_fn on_event, void *user_data)
{
    if (!b)
        return ILAB_INVALID_ARGUMENT;
    ilab_proxy_conn *c = conn_of(b);
    ilab_wire_out args = {0};
    ilab_codec_put_request(&args, req);
    ilab_wire_put_u32(&args, on_event != NULL);
    answer a;
    bool ok = ilab_proxy_call_begin(c, &a.call, ILAB_WIRE_GENERATE, &args);
    ilab_wire_out_free(&args);
    bool ended = false; /* a terminal event reached the caller */
    while (ok && a.call.h.op == ILAB_WIRE_EVENT) {
        ilab_wire_in in = {a.call.payload, a.call.h.len, 0, false};
        ilab_event_t ev;
        if (!ilab_codec_get_event(&in, &ev) || !on_event) {
            ilab_proxy_set_error(c, "backend worker: malformed event");
            return done(c, &a, ILAB_INTERNAL);
        }
        int stop = on_event(user_data, &ev);
        ended = ended || ev.type == ILAB_EVENT_FINISH || ev.type == ILAB_EVENT_ERROR;
        ilab_proxy_call_consume(c, &a.call); /* the event is delivered: free its slot */
        ilab_wire_out ack = {0};
        ilab_wire_put_u32(&ack, (uint32_t)stop);
        ilab_proxy_call_send(c, &a.call, ILAB_WIRE_EVENT_ACK, &ack);
        ilab_wire_out_free(&ack);
        ok = ilab_proxy_call_next(c, &a.call);
    }
    if (!ok) {
        ilab_status st = worker_gone(c);
        if (on_event && !ended)
            end_stream(c, req, on_event, user_data);
        return done(c, &a, st);
    }
    return done(c, &a, read_reply(c, &a));
}

static ilab_status proxy_cancel(ilab_backend_t *b, uint64_t request_id)
{
    if (!b)
        return ILAB_INVALID_ARGUMENT;
    ilab_proxy_conn *c = conn_of(b);
    ilab_wire_out args = {0};
    ilab_wire_put_u64(&args, request_id);
    answer a;
    ilab_status st = ask(c, ILAB_WIRE_CANCEL, &args, &a);
    return done(c, &a, st);
}

const ilab_backend_api_t ilab_proxy_api = {
    .struct_size = sizeof(ilab_backend_api_t),
    .probe = proxy_probe,
    .create = proxy_create,
    .destroy = proxy_destroy,
    .last_error = proxy_last_error,
    .model_info = proxy_model_info,
    .tokenize = proxy_tokenize,
    .detokenize = proxy_detokenize,
    .token_piece = proxy_token_piece,
    .seq_create = proxy_seq_create,
    .seq_free = proxy_seq_free,
    .seq_fork = proxy_seq_fork,
    .seq_truncate = proxy_seq_truncate,
    .seq_length = proxy_seq_length,
    .eval = proxy_eval,
    .generate = proxy_generate,
    .cancel = proxy_cancel,
    .cache_stats = proxy_cache_stats,
    .eog_ids = proxy_eog_ids,
    .chat_template = proxy_chat_template,
};
