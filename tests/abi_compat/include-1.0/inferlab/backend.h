/* inferlab SDK — the backend interface (ABI v1).
 *
 * A plugin fills one static ilab_backend_api_t and points its bootstrap entry
 * at it (see plugin.h). The host calls through it; nothing else crosses.
 *
 * Rules that hold for every member:
 *  - Every member is non-NULL. A capability the manifest does not declare is
 *    still an entry point: it returns ILAB_UNSUPPORTED with a message naming
 *    the capability (fail closed, never a silent fallback).
 *  - Every call returns an ilab_status; out-parameters come last and are
 *    written only on ILAB_OK (or ILAB_BUFFER_TOO_SMALL, which writes the
 *    required size).
 *  - A non-OK status from a call on an instance leaves a message readable with
 *    last_error(). probe() and create() run before an instance exists and
 *    write their message into a caller-owned buffer instead.
 *  - Pointers passed in are borrowed for the duration of the call unless a
 *    comment says otherwise. Buffers passed out are caller-owned.
 *  - Threads: the manifest's `thread_safety` says what the host may do
 *    concurrently on one instance:
 *      none      one call at a time per instance (host serialises);
 *      sequence  calls naming different sequences may run concurrently;
 *      full      any call from any thread at any time.
 *    cancel() and last_error() may always be called from any thread.
 *
 * Sequences are plugin-owned KV state, named by an ilab_seq_t handle. A
 * handle is never reused: a freed or never-issued handle gives
 * ILAB_INVALID_ARGUMENT (stale-handle detection via generation counters). */
#ifndef INFERLAB_BACKEND_H
#define INFERLAB_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "inferlab/generate.h"
#include "inferlab/host.h"
#include "inferlab/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A backend instance: opaque, created and owned by the plugin. */
typedef struct ilab_backend ilab_backend_t;

/* A sequence handle; 0 is never a valid handle. */
typedef uint64_t ilab_seq_t;
#define ILAB_SEQ_NONE ((ilab_seq_t)0)

/* One configuration entry, as text. The host has already checked that the key
 * is declared in the manifest and that the value parses as its type. */
typedef struct ilab_config_entry {
    const char *key;
    const char *value;
} ilab_config_entry_t;

/* Facts about the loaded model. The caller sets struct_size to
 * sizeof(ilab_model_info_t) as it was built; the plugin writes no byte past it. */
typedef struct ilab_model_info {
    uint32_t struct_size;
    int32_t vocab_size;   /* > 0 */
    int32_t bos_id;       /* -1 when the vocabulary has none */
    int32_t eos_id;       /* -1 when the vocabulary has none */
    int32_t max_context;  /* positions per sequence */
    char name[64];        /* NUL-terminated, e.g. "austen-tiny" */
    char digest[80];      /* "sha256:<hex>" of the weights; "" when unknown (DIF-1) */
} ilab_model_info_t;

/* tokenize() flags */
#define ILAB_TOKENIZE_ADD_BOS (1u << 0)
#define ILAB_TOKENIZE_ADD_EOS (1u << 1)

/* eval() item flags */
#define ILAB_EVAL_ALL_LOGITS (1u << 0) /* logits for every new position, not only the last */

/* One sequence's share of a batched evaluation. */
typedef struct ilab_batch_item {
    uint32_t struct_size;  /* sizeof(ilab_batch_item_t) of the writer */
    ilab_seq_t seq;
    const int32_t *tokens; /* borrowed; appended to the sequence in order */
    int32_t n_tokens;      /* >= 1 */
    uint32_t flags;        /* ILAB_EVAL_* */
    float *logits;         /* caller-owned, or NULL for none: vocab_size floats, or
                              n_tokens * vocab_size with ILAB_EVAL_ALL_LOGITS,
                              row i = position i of `tokens` */
} ilab_batch_item_t;

typedef struct ilab_backend_api {
    uint32_t struct_size; /* sizeof(ilab_backend_api_t) as the plugin was built */

    /* --- lifecycle ------------------------------------------------------ */

    /* Can this backend run here with this configuration? ILAB_OK = available;
     * ILAB_UNAVAILABLE with a human-readable reason in `reason` otherwise.
     * Must answer within 2 s (bounded connect timeouts). Any thread; needs no
     * instance. `reason` is caller-owned, always NUL-terminated on return. */
    ilab_status (*probe)(const ilab_host_t *host,
                         const ilab_config_entry_t *config, size_t n_config,
                         char *reason, size_t reason_cap);

    /* Create an instance. On failure `*out` is untouched and `error` (caller-
     * owned, NUL-terminated) names what was wrong. An unavailable backend
     * returns ILAB_UNAVAILABLE with the probe's reason. `host` must outlive
     * the instance. Any thread. */
    ilab_status (*create)(const ilab_host_t *host,
                          const ilab_config_entry_t *config, size_t n_config,
                          char *error, size_t error_cap, ilab_backend_t **out);

    /* Destroy an instance and every sequence it still holds. No other call on
     * it may be running or follow. NULL is a no-op. */
    void (*destroy)(ilab_backend_t *backend);

    /* The message of the most recent non-OK status this instance returned (to
     * any thread), copied into caller-owned `buf` (NUL-terminated, truncated
     * to fit). Returns the full message length. Any thread. */
    size_t (*last_error)(const ilab_backend_t *backend, char *buf, size_t cap);

    /* Fill `*info` (caller sets info->struct_size). Any thread. */
    ilab_status (*model_info)(ilab_backend_t *backend, ilab_model_info_t *info);

    /* --- tokens (capability: tokenizer) ------------------------------------ */

    /* Encode `len` bytes of UTF-8 `text` (need not be NUL-terminated) into
     * caller-owned `tokens`. If `cap` is too small: ILAB_BUFFER_TOO_SMALL and
     * `*n_tokens` = the count required. Invalid UTF-8: round-trips through
     * byte fallback or gives ILAB_INVALID_ARGUMENT; never a crash. */
    ilab_status (*tokenize)(ilab_backend_t *backend, const char *text, size_t len,
                            uint32_t flags, int32_t *tokens, size_t cap,
                            size_t *n_tokens);

    /* Decode `tokens` into caller-owned `text`: `*len` = bytes written, plus a
     * NUL when room (cap >= len + 1 is required, else ILAB_BUFFER_TOO_SMALL
     * with `*len` = bytes needed without the NUL). BOS/EOS decode to "". The
     * tokenizer's dummy-prefix space at the start of text is removed, so
     * detokenize(tokenize(s)) == s. Out-of-range id: ILAB_INVALID_ARGUMENT. */
    ilab_status (*detokenize)(ilab_backend_t *backend, const int32_t *tokens,
                              size_t n_tokens, char *text, size_t cap, size_t *len);

    /* The bytes `token` adds when it follows `prev_token` (-1 at the start of
     * text). Concatenating pieces over a sequence equals detokenize() of it
     * (TOK-4). A piece may be part of a UTF-8 code point (byte fallback); the
     * host holds bytes back when streaming. Sizes as for detokenize(). */
    ilab_status (*token_piece)(ilab_backend_t *backend, int32_t prev_token,
                               int32_t token, char *piece, size_t cap, size_t *len);

    /* --- sequences and evaluation (capability: logits) -------------------- */

    /* A new, empty sequence. ILAB_OUT_OF_MEMORY when no sequence slot is left. */
    ilab_status (*seq_create)(ilab_backend_t *backend, ilab_seq_t *seq);

    /* Release a sequence and its cache blocks; the handle becomes stale. */
    ilab_status (*seq_free)(ilab_backend_t *backend, ilab_seq_t seq);

    /* (capability: cache.fork) A new sequence with the same contents as
     * `parent`; neither sees tokens later appended to the other. */
    ilab_status (*seq_fork)(ilab_backend_t *backend, ilab_seq_t parent,
                            ilab_seq_t *child);

    /* (capability: cache.truncate) Keep the first `n_keep` positions
     * (0 <= n_keep <= length); later positions are forgotten. */
    ilab_status (*seq_truncate)(ilab_backend_t *backend, ilab_seq_t seq,
                                int32_t n_keep);

    /* Number of positions in the sequence. */
    ilab_status (*seq_length)(ilab_backend_t *backend, ilab_seq_t seq,
                              int32_t *length);

    /* Append each item's tokens to its sequence and write logits. One call may
     * mix prefills and single-token decodes; batching backends evaluate them
     * together. `items` is an array of `n_items` borrowed pointers; each
     * sequence appears at most once; n_items <= the manifest's max_batch.
     * All-or-nothing: on a non-OK status no sequence changed (e.g.
     * ILAB_CONTEXT_OVERFLOW when any item would pass max_context). */
    ilab_status (*eval)(ilab_backend_t *backend,
                        const ilab_batch_item_t *const *items, size_t n_items);

    /* --- backend-owned generation (capability: sampling: backend) --------- */

    /* Run one request to completion on the calling thread, emitting TOKEN*
     * then exactly one FINISH or ERROR through `on_event` (same thread). The
     * return value is ILAB_OK when a FINISH was emitted, else the status of
     * the ERROR event. */
    ilab_status (*generate)(ilab_backend_t *backend,
                            const ilab_generate_request_t *request,
                            ilab_event_fn on_event, void *user_data);

    /* (capability: cancel) Ask generate() for `request_id` to end with FINISH
     * (cancelled) within one decode step. Any thread. An unknown or finished
     * id is ILAB_OK (the race is benign). */
    ilab_status (*cancel)(ilab_backend_t *backend, uint64_t request_id);
} ilab_backend_api_t;

#ifdef __cplusplus
}
#endif
#endif
