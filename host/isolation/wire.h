/* The wire between the host and a backend worker process: framed messages
 * over one AF_UNIX stream socket (docs/adr/0020-backend-worker-processes.md).
 *
 * A message is a fixed header followed by `len` payload bytes. The payload
 * is a flat sequence of fields written by ilab_wire_put_* and read back in
 * the same order by ilab_wire_get_*; a reader that runs past the end of the
 * payload sets its `bad` flag instead of reading, so a short or garbled
 * message is one error, never an out-of-bounds read. This is not a general
 * serialisation format: both ends are the same build of the same binary.
 * It is not the place of the call semantics either: proxy_calls.c and
 * worker_calls.c give each backend member its fields. */
#ifndef ILAB_HOST_ISOLATION_WIRE_H
#define ILAB_HOST_ISOLATION_WIRE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Requests (host -> worker), each answered by one REPLY with the same call
 * id; GENERATE is answered by EVENT messages, each acknowledged by an
 * EVENT_ACK, before its REPLY. HELLO is the worker's first message. */
typedef enum ilab_wire_op {
    ILAB_WIRE_HELLO = 1,
    ILAB_WIRE_REPLY,
    ILAB_WIRE_EVENT,
    ILAB_WIRE_EVENT_ACK,
    ILAB_WIRE_PROBE,
    ILAB_WIRE_CREATE,
    ILAB_WIRE_DESTROY,
    ILAB_WIRE_MODEL_INFO,
    ILAB_WIRE_TOKENIZE,
    ILAB_WIRE_DETOKENIZE,
    ILAB_WIRE_TOKEN_PIECE,
    ILAB_WIRE_SEQ_CREATE,
    ILAB_WIRE_SEQ_FREE,
    ILAB_WIRE_SEQ_FORK,
    ILAB_WIRE_SEQ_TRUNCATE,
    ILAB_WIRE_SEQ_LENGTH,
    ILAB_WIRE_EVAL,
    ILAB_WIRE_GENERATE,
    ILAB_WIRE_CANCEL,
    ILAB_WIRE_CACHE_STATS,
    ILAB_WIRE_EOG_IDS,
    ILAB_WIRE_CHAT_TEMPLATE,
    ILAB_WIRE_OP_END
} ilab_wire_op;

/* The most one message may carry: a batch's logits rows are the largest
 * (64 rows of a 256k vocabulary). A bigger one is refused, not allocated. */
#define ILAB_WIRE_MAX_PAYLOAD ((uint64_t)1 << 30)

typedef struct ilab_wire_header {
    uint64_t len;     /* payload bytes after the header */
    uint64_t call_id; /* chosen by the host per call; 0 for HELLO */
    uint32_t op;      /* ilab_wire_op */
    uint32_t status;  /* REPLY: the member's ilab_status */
} ilab_wire_header;

/* A payload being written: a growable byte buffer. */
typedef struct ilab_wire_out {
    unsigned char *data;
    size_t len, cap;
    bool failed; /* an allocation failed: the message must not be sent */
} ilab_wire_out;

void ilab_wire_out_free(ilab_wire_out *o);
void ilab_wire_put_u32(ilab_wire_out *o, uint32_t v);
void ilab_wire_put_u64(ilab_wire_out *o, uint64_t v);
void ilab_wire_put_f32(ilab_wire_out *o, float v);
void ilab_wire_put_bytes(ilab_wire_out *o, const void *p, size_t n);
/* A pointer that may be NULL, with `n` bytes behind it when it is not: the
 * reader gets back the same NULL-ness (the contract's NULL checks see what
 * the caller passed). */
void ilab_wire_put_opt(ilab_wire_out *o, const void *p, size_t n);

/* A payload being read. Every getter returns 0 / NULL once `bad` is set. */
typedef struct ilab_wire_in {
    const unsigned char *data;
    size_t len, pos;
    bool bad;
} ilab_wire_in;

uint32_t ilab_wire_get_u32(ilab_wire_in *in);
uint64_t ilab_wire_get_u64(ilab_wire_in *in);
float ilab_wire_get_f32(ilab_wire_in *in);
/* `n` bytes, borrowed from the payload (not aligned). */
const void *ilab_wire_get_bytes(ilab_wire_in *in, size_t n);
/* An ilab_wire_put_opt field: *present says whether it was non-NULL; the
 * bytes are borrowed from the payload. */
const void *ilab_wire_get_opt(ilab_wire_in *in, bool *present, size_t *n);

/* Send one message: header + payload, whole, under `lock` (several threads
 * share one socket). false when the peer is gone or `o` failed. */
bool ilab_wire_send(int fd, pthread_mutex_t *lock, uint32_t op, uint64_t call_id,
                    uint32_t status, const ilab_wire_out *o);

/* Read one message; *payload is malloc'ed (caller frees; NULL when empty).
 * false at end of stream, on a read error or an oversized header. One
 * reader thread per socket. */
bool ilab_wire_recv(int fd, ilab_wire_header *h, unsigned char **payload);

#endif
