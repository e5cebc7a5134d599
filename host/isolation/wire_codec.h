/* The structured fields of the backend calls that both ends of the wire must
 * agree on field by field: the host table header, configuration entries, a
 * batch of eval items, a generate() request and a stream event. Each encoder
 * sits next to its decoder (wire_codec.c) so the two cannot drift apart.
 * Decoded values borrow from the message payload: they live as long as it.
 *
 * Every pointer keeps its NULL-ness across the wire, and a size-prefixed
 * struct keeps its struct_size and the bytes past the host's sizeof (the
 * plugin decides what a short or a long struct means, not the proxy). */
#ifndef ILAB_HOST_ISOLATION_WIRE_CODEC_H
#define ILAB_HOST_ISOLATION_WIRE_CODEC_H

#include "inferlab/inferlab.h"
#include "wire.h"

/* A size-prefixed struct as the caller wrote it: up to its struct_size (at
 * least the size field, at most `host_size` + 4 KiB), NULL-ness kept; read
 * back with ilab_wire_get_opt. */
void ilab_codec_put_sized(ilab_wire_out *o, const void *s, size_t host_size);

/* --- the host table's version header, and configuration entries ---------- */

void ilab_codec_put_host(ilab_wire_out *o, const ilab_host_t *host);
/* Fills the header fields of `*out` (log/now_ns are the worker's own). */
void ilab_codec_get_host(ilab_wire_in *in, ilab_host_t *out);

void ilab_codec_put_config(ilab_wire_out *o, const ilab_config_entry_t *config, size_t n);
/* *config is malloc'ed (NULL when the caller passed NULL); strings borrow
 * from the payload. false on a bad message or out of memory. */
bool ilab_codec_get_config(ilab_wire_in *in, ilab_config_entry_t **config, size_t *n);

/* --- eval() items --------------------------------------------------------- */

/* Logits rows an item gets: n_tokens under ILAB_EVAL_ALL_LOGITS, else one
 * (also for a count the plugin will refuse, so nothing lands outside). */
size_t ilab_codec_logits_rows(const ilab_batch_item_t *item);

void ilab_codec_put_items(ilab_wire_out *o, const ilab_batch_item_t *const *items, size_t n);

/* The decoded batch: items the plugin can be handed (logits buffers are the
 * worker's, `vocab` floats a row), freed with ilab_codec_batch_free. */
typedef struct ilab_codec_batch {
    ilab_batch_item_t **items; /* NULL when the caller passed NULL */
    size_t n_items;
    float **logits;            /* per item; NULL where the caller asked for none */
    size_t *n_logits;          /* floats in logits[i] */
} ilab_codec_batch;

/* false on a bad message, out of memory or logits too large for a reply. */
bool ilab_codec_get_items(ilab_wire_in *in, int32_t vocab, ilab_codec_batch *b);
void ilab_codec_batch_free(ilab_codec_batch *b);

/* --- generate() ------------------------------------------------------------ */

void ilab_codec_put_request(ilab_wire_out *o, const ilab_generate_request_t *req);

/* The decoded request; `req` points into it (NULL when the caller passed
 * NULL). Free with ilab_codec_request_free. */
typedef struct ilab_codec_request {
    ilab_generate_request_t *req;
    ilab_sampling_t *sampling;
    const char **stop;
} ilab_codec_request;

bool ilab_codec_get_request(ilab_wire_in *in, ilab_codec_request *r);
void ilab_codec_request_free(ilab_codec_request *r);

void ilab_codec_put_event(ilab_wire_out *o, const ilab_event_t *ev);
/* Strings and the top_logprobs array borrow from the payload. */
bool ilab_codec_get_event(ilab_wire_in *in, ilab_event_t *ev);

#endif
