/* What the worker does for each message: decode the caller's arguments,
 * call the plugin, answer with what it wrote (worker_internal.h). The host
 * side of each call is proxy_calls.c, field for field in the same order. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "out_param.h"
#include "wire_codec.h"
#include "worker_internal.h"

/* --- HELLO ------------------------------------------------------------------ */

bool ilab_worker_hello(ilab_worker *w, const char *path)
{
    char err[2048] = "";
    ilab_wire_out o = {0};
    ilab_status st = ilab_plugin_load_private(path, err, sizeof err, &w->plugin);
    ilab_wire_put_u32(&o, (uint32_t)st);
    if (st != ILAB_OK) {
        ilab_wire_put_opt(&o, err, strlen(err) + 1);
    } else {
        const ilab_plugin_entry_t *e = ilab_plugin_entry_of(w->plugin);
        w->api = ilab_plugin_api(w->plugin);
        w->host = *ilab_host_services();
        ilab_wire_put_opt(&o, "", 1);
        ilab_wire_put_u32(&o, e->struct_size);
        ilab_wire_put_u32(&o, e->abi_major);
        ilab_wire_put_u32(&o, e->abi_minor);
        ilab_wire_put_u32(&o, e->backend->struct_size);
        ilab_wire_put_opt(&o, e->name, strlen(e->name) + 1);
        ilab_wire_put_opt(&o, e->version, strlen(e->version) + 1);
        ilab_wire_put_opt(&o, e->manifest_yaml, strlen(e->manifest_yaml) + 1);
    }
    ilab_wire_send(w->fd, &w->write_lock, ILAB_WIRE_HELLO, 0, 0, &o);
    ilab_wire_out_free(&o);
    return st == ILAB_OK;
}

/* --- replies ------------------------------------------------------------------ */

/* The instance's message after a non-OK status: the proxy keeps it as the
 * instance's last_error() (it sees every status the instance returns). */
static void put_message(ilab_worker *w, ilab_wire_out *o, ilab_status st)
{
    char msg[4096] = "";
    if (st != ILAB_OK && w->backend)
        w->api->last_error(w->backend, msg, sizeof msg);
    ilab_wire_put_opt(o, msg, strlen(msg) + 1);
}

/* A message that cannot be decoded is a bug on the host side, never the
 * plugin's: it is answered INTERNAL without calling the plugin. */
static void reply_bad(ilab_worker *w, uint64_t call_id, const char *what)
{
    ilab_wire_out o = {0};
    char msg[256];
    snprintf(msg, sizeof msg, "backend worker: malformed %s message from the host", what);
    ilab_wire_put_opt(&o, msg, strlen(msg) + 1);
    ilab_wire_send(w->fd, &w->write_lock, ILAB_WIRE_REPLY, call_id, ILAB_INTERNAL, &o);
    ilab_wire_out_free(&o);
}

static void reply(ilab_worker *w, uint64_t call_id, ilab_status st, ilab_wire_out *o)
{
    ilab_wire_send(w->fd, &w->write_lock, ILAB_WIRE_REPLY, call_id, (uint32_t)st, o);
    ilab_wire_out_free(o);
}

/* --- probe, create, destroy -------------------------------------------------------- */

static void serve_lifecycle(ilab_worker *w, const ilab_wire_header *h, ilab_wire_in *in)
{
    ilab_host_t host = w->host;
    ilab_codec_get_host(in, &host);
    bool host_null = host.struct_size == 0;
    ilab_config_entry_t *config;
    size_t n_config;
    ilab_out_buf err;
    if (!ilab_codec_get_config(in, &config, &n_config) || !ilab_out_get(in, 1, &err)) {
        free(config);
        reply_bad(w, h->call_id, "probe/create");
        return;
    }
    bool out_null = h->op == ILAB_WIRE_CREATE && ilab_wire_get_u32(in) == 0;
    ilab_status st;
    ilab_wire_out o = {0};
    ilab_wire_put_opt(&o, "", 1);
    if (h->op == ILAB_WIRE_PROBE) {
        st = w->api->probe(host_null ? NULL : &host, config, n_config, err.buf, err.cap);
    } else {
        ilab_backend_t *b = NULL;
        w->host = host; /* must outlive the instance */
        st = w->api->create(host_null ? NULL : &w->host, config, n_config, err.buf, err.cap,
                            out_null ? NULL : &b);
        if (st == ILAB_OK && b) {
            w->backend = b;
            ilab_model_info_t info = {.struct_size = sizeof info};
            if (w->api->model_info(b, &info) == ILAB_OK)
                w->vocab = info.vocab_size;
        }
    }
    ilab_out_put_back(&o, &err, err.buf ? strnlen(err.buf, err.cap) + 1 : 0);
    ilab_wire_put_u32(&o, (uint32_t)w->vocab); /* CREATE: eval()'s row length */
    ilab_out_free(&err);
    free(config);
    reply(w, h->call_id, st, &o);
}

static void serve_destroy(ilab_worker *w, const ilab_wire_header *h)
{
    if (w->backend)
        w->api->destroy(w->backend);
    w->backend = NULL;
    ilab_wire_out o = {0};
    ilab_wire_put_opt(&o, "", 1);
    reply(w, h->call_id, ILAB_OK, &o);
    _exit(0);
}

/* --- size-prefixed structs written by the plugin: model_info, cache_stats --------- */

static void serve_struct(ilab_worker *w, const ilab_wire_header *h, ilab_wire_in *in)
{
    bool present;
    size_t n;
    const void *caller = ilab_wire_get_opt(in, &present, &n);
    if (in->bad) {
        reply_bad(w, h->call_id, "struct");
        return;
    }
    size_t room = n > sizeof(ilab_model_info_t) ? n : sizeof(ilab_model_info_t);
    if (room < sizeof(ilab_cache_stats_t))
        room = sizeof(ilab_cache_stats_t);
    void *s = present ? calloc(1, room) : NULL;
    if (present && s)
        memcpy(s, caller, n);
    ilab_status st = h->op == ILAB_WIRE_MODEL_INFO ? w->api->model_info(w->backend, s)
                                                   : w->api->cache_stats(w->backend, s);
    ilab_wire_out o = {0};
    put_message(w, &o, st);
    ilab_wire_put_opt(&o, s, n);
    free(s);
    reply(w, h->call_id, st, &o);
}

/* --- tokens ------------------------------------------------------------------------ */

static void serve_tokens(ilab_worker *w, const ilab_wire_header *h, ilab_wire_in *in)
{
    bool present, len_present;
    size_t n;
    const void *input = ilab_wire_get_opt(in, &present, &n);
    uint64_t count = ilab_wire_get_u64(in);
    uint32_t flags = ilab_wire_get_u32(in);
    int32_t prev = (int32_t)ilab_wire_get_u32(in), token = (int32_t)ilab_wire_get_u32(in);
    ilab_out_buf out;
    bool ids_out = h->op == ILAB_WIRE_TOKENIZE || h->op == ILAB_WIRE_EOG_IDS;
    size_t elem = ids_out ? sizeof(int32_t) : 1;
    if (!ilab_out_get(in, elem, &out)) {
        reply_bad(w, h->call_id, "token");
        return;
    }
    size_t len = (size_t)ilab_out_get_scalar(in, &len_present);
    ilab_status st;
    if (h->op == ILAB_WIRE_TOKENIZE)
        st = w->api->tokenize(w->backend, present ? input : NULL, (size_t)count, flags, out.buf,
                              out.cap, len_present ? &len : NULL);
    else if (h->op == ILAB_WIRE_DETOKENIZE)
        st = w->api->detokenize(w->backend, present ? input : NULL, (size_t)count, out.buf,
                                out.cap, len_present ? &len : NULL);
    else if (h->op == ILAB_WIRE_EOG_IDS)
        st = w->api->eog_ids(w->backend, out.buf, out.cap, len_present ? &len : NULL);
    else if (h->op == ILAB_WIRE_CHAT_TEMPLATE)
        st = w->api->chat_template(w->backend, out.buf, out.cap, len_present ? &len : NULL);
    else
        st = w->api->token_piece(w->backend, prev, token, out.buf, out.cap,
                                 len_present ? &len : NULL);
    /* Text: the bytes and the NUL after them; tokens: the ids. */
    size_t used = st == ILAB_OK ? len + (elem == 1) : 0;
    ilab_wire_out o = {0};
    put_message(w, &o, st);
    ilab_out_put_back(&o, &out, used);
    ilab_out_put_scalar(&o, len_present ? &len : NULL, len);
    ilab_out_free(&out);
    reply(w, h->call_id, st, &o);
}

/* --- sequences ---------------------------------------------------------------------- */

static void serve_seq(ilab_worker *w, const ilab_wire_header *h, ilab_wire_in *in)
{
    ilab_seq_t seq = ilab_wire_get_u64(in);
    int32_t arg = (int32_t)ilab_wire_get_u32(in);
    bool present;
    uint64_t value = ilab_out_get_scalar(in, &present);
    if (in->bad) {
        reply_bad(w, h->call_id, "sequence");
        return;
    }
    ilab_seq_t out_seq = value;
    int32_t out_len = (int32_t)value;
    ilab_status st;
    switch (h->op) {
    case ILAB_WIRE_SEQ_CREATE: st = w->api->seq_create(w->backend, present ? &out_seq : NULL); break;
    case ILAB_WIRE_SEQ_FREE: st = w->api->seq_free(w->backend, seq); break;
    case ILAB_WIRE_SEQ_FORK: st = w->api->seq_fork(w->backend, seq, present ? &out_seq : NULL); break;
    case ILAB_WIRE_SEQ_TRUNCATE: st = w->api->seq_truncate(w->backend, seq, arg); break;
    default: st = w->api->seq_length(w->backend, seq, present ? &out_len : NULL); break;
    }
    ilab_wire_out o = {0};
    put_message(w, &o, st);
    ilab_wire_put_u64(&o, h->op == ILAB_WIRE_SEQ_LENGTH ? (uint64_t)(uint32_t)out_len : out_seq);
    reply(w, h->call_id, st, &o);
}

/* --- eval --------------------------------------------------------------------------- */

static void serve_eval(ilab_worker *w, const ilab_wire_header *h, ilab_wire_in *in)
{
    ilab_codec_batch b;
    if (!ilab_codec_get_items(in, w->vocab, &b)) {
        ilab_codec_batch_free(&b);
        reply_bad(w, h->call_id, "eval");
        return;
    }
    ilab_status st = w->api->eval(w->backend, (const ilab_batch_item_t *const *)b.items,
                                  b.n_items);
    ilab_wire_out o = {0};
    put_message(w, &o, st);
    for (size_t i = 0; st == ILAB_OK && b.items && i < b.n_items; i++)
        if (b.logits[i])
            ilab_wire_put_bytes(&o, b.logits[i], b.n_logits[i] * sizeof(float));
    ilab_codec_batch_free(&b);
    reply(w, h->call_id, st, &o);
}

/* --- generate ------------------------------------------------------------------------ */

typedef struct stream {
    ilab_worker *w;
    uint64_t call_id;
    ilab_worker_ack ack;
} stream;

/* Each event goes to the host and waits for its callback's answer, so the
 * callback's "stop" takes effect exactly where it would in-process. */
static int forward_event(void *user_data, const ilab_event_t *ev)
{
    stream *s = user_data;
    ilab_wire_out o = {0};
    if (ev)
        ilab_codec_put_event(&o, ev);
    if (!ev || !ilab_wire_send(s->w->fd, &s->w->write_lock, ILAB_WIRE_EVENT, s->call_id, 0, &o)) {
        ilab_wire_out_free(&o);
        return 1;
    }
    ilab_wire_out_free(&o);
    return ilab_worker_ack_wait(s->w, &s->ack);
}

static void serve_generate(ilab_worker *w, const ilab_wire_header *h, ilab_wire_in *in)
{
    ilab_codec_request r;
    bool ok = ilab_codec_get_request(in, &r);
    bool has_callback = ilab_wire_get_u32(in) != 0;
    if (!ok || in->bad) {
        ilab_codec_request_free(&r);
        reply_bad(w, h->call_id, "generate");
        return;
    }
    stream s = {.w = w, .call_id = h->call_id};
    ilab_worker_ack_wait_begin(w, &s.ack, h->call_id);
    ilab_status st = w->api->generate(w->backend, r.req, has_callback ? forward_event : NULL, &s);
    ilab_worker_ack_wait_end(w, &s.ack);
    ilab_codec_request_free(&r);
    ilab_wire_out o = {0};
    put_message(w, &o, st);
    reply(w, h->call_id, st, &o);
}

static void serve_cancel(ilab_worker *w, const ilab_wire_header *h, ilab_wire_in *in)
{
    uint64_t id = ilab_wire_get_u64(in);
    ilab_status st = w->api->cancel(w->backend, id);
    ilab_wire_out o = {0};
    put_message(w, &o, st);
    reply(w, h->call_id, st, &o);
}

void ilab_worker_serve(ilab_worker *w, const ilab_wire_header *h, const unsigned char *payload)
{
    ilab_wire_in in = {payload, h->len, 0, false};
    if (h->op != ILAB_WIRE_PROBE && h->op != ILAB_WIRE_CREATE && h->op != ILAB_WIRE_DESTROY &&
        !w->backend) {
        reply_bad(w, h->call_id, "instance call before create");
        return;
    }
    switch (h->op) {
    case ILAB_WIRE_PROBE:
    case ILAB_WIRE_CREATE: serve_lifecycle(w, h, &in); break;
    case ILAB_WIRE_DESTROY: serve_destroy(w, h); break;
    case ILAB_WIRE_MODEL_INFO:
    case ILAB_WIRE_CACHE_STATS: serve_struct(w, h, &in); break;
    case ILAB_WIRE_TOKENIZE:
    case ILAB_WIRE_DETOKENIZE:
    case ILAB_WIRE_TOKEN_PIECE:
    case ILAB_WIRE_EOG_IDS:
    case ILAB_WIRE_CHAT_TEMPLATE: serve_tokens(w, h, &in); break;
    case ILAB_WIRE_SEQ_CREATE:
    case ILAB_WIRE_SEQ_FREE:
    case ILAB_WIRE_SEQ_FORK:
    case ILAB_WIRE_SEQ_TRUNCATE:
    case ILAB_WIRE_SEQ_LENGTH: serve_seq(w, h, &in); break;
    case ILAB_WIRE_EVAL: serve_eval(w, h, &in); break;
    case ILAB_WIRE_GENERATE: serve_generate(w, h, &in); break;
    case ILAB_WIRE_CANCEL: serve_cancel(w, h, &in); break;
    default: reply_bad(w, h->call_id, "unknown"); break;
    }
}
