/* inferlab SDK — the backend interface (ABI v1).
 *
 * A plugin fills one static ilab_backend_api_t and points its bootstrap entry
 * at it (see plugin.h). The host calls through it; nothing else crosses.
 * The rules are docs/contract.md; the clause ids in brackets point there.
 *
 * Rules that hold for every member:
 *  - The lifecycle members (probe, create, destroy, last_error, model_info)
 *    and every member a declared capability needs are non-NULL [ABI-6].
 *    Any other member may be NULL: one of a minor newer than the plugin's
 *    abi_minor (a source written for ABI 1.0 and rebuilt against this
 *    header never heard of cache_stats), or of a capability the manifest
 *    does not declare. The host stands in for it with a shim returning
 *    ILAB_UNSUPPORTED [ABI-3, docs/adr/0022]. Where a plugin knows the
 *    member, an undeclared capability is better an entry point of its own
 *    returning ILAB_UNSUPPORTED with a message naming the capability (fail
 *    closed, never a silent fallback), also for calls that would change
 *    nothing [ERR-2].
 *  - Every call returns an ilab_status; out-parameters come last and are
 *    written only on ILAB_OK (or ILAB_BUFFER_TOO_SMALL, which writes the
 *    required size) [TOK-7]. NULL or invalid arguments are
 *    ILAB_INVALID_ARGUMENT, never a crash [ERR-3].
 *  - A non-OK status from a call on an instance leaves a message readable with
 *    last_error(). probe() and create() run before an instance exists and
 *    write their message into a caller-owned buffer instead [ERR-1].
 *  - Pointers passed in are borrowed for the duration of the call unless a
 *    comment says otherwise. Buffers passed out are caller-owned.
 *  - Threads: the manifest's `thread_safety` says what the host may do
 *    concurrently on one instance:
 *      none      one call at a time per instance (host serialises);
 *      sequence  calls naming different sequences may run concurrently;
 *      full      any call from any thread at any time.
 *    cancel() and last_error() may always be called from any thread.
 *    Under sequence, calls naming no sequence (model_info, tokenize,
 *    detokenize, token_piece, seq_create) and generate() calls for
 *    different request ids may also overlap [THR-1, THR-2].
 *
 * Sequences are plugin-owned KV state, named by an ilab_seq_t handle. A
 * handle is never reused: a freed or never-issued handle gives
 * ILAB_INVALID_ARGUMENT (stale-handle detection via generation counters)
 * [CCH-6]. */
#ifndef INFERLAB_BACKEND_H
#define INFERLAB_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "inferlab/generate.h"
#include "inferlab/host.h"
#include "inferlab/status.h"
#include "inferlab/struct_size.h"

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

/* Facts about the loaded model [TOK-1, ABI-9]. The caller sets struct_size to
 * sizeof(ilab_model_info_t) as it was built; the plugin writes no byte past it
 * (smaller than ABI 1.0's, ILAB_MODEL_INFO_SIZE_1_0: ILAB_ABI_MISMATCH,
 * nothing written) [ABI-3]. */
typedef struct ilab_model_info {
    uint32_t struct_size;
    int32_t vocab_size;   /* > 0 */
    int32_t bos_id;       /* -1 when the vocabulary has none */
    int32_t eos_id;       /* -1 when the vocabulary has none */
    int32_t max_context;  /* positions per sequence */
    char name[64];        /* NUL-terminated, e.g. "austen-tiny" */
    char digest[80];      /* "sha256:<hex>" of the weights; "" when unknown (DIF-1) */
} ilab_model_info_t;

/* tokenize() flags; any other bit is ILAB_INVALID_ARGUMENT [TOK-8] */
#define ILAB_TOKENIZE_ADD_BOS (1u << 0)
#define ILAB_TOKENIZE_ADD_EOS (1u << 1)

/* eval() item flags; any other bit is ILAB_INVALID_ARGUMENT [LOG-6] */
#define ILAB_EVAL_ALL_LOGITS (1u << 0) /* logits for every new position, not only the last [LOG-5] */

/* One sequence's share of a batched evaluation. A struct_size smaller than
 * ABI 1.0's (ILAB_BATCH_ITEM_SIZE_1_0) is ILAB_ABI_MISMATCH [ABI-3]. */
typedef struct ilab_batch_item {
    uint32_t struct_size;  /* sizeof(ilab_batch_item_t) of the writer */
    ilab_seq_t seq;
    const int32_t *tokens; /* borrowed; appended to the sequence in order */
    int32_t n_tokens;      /* >= 1 */
    uint32_t flags;        /* ILAB_EVAL_* */
    float *logits;         /* caller-owned, or NULL for none: vocab_size floats, or
                              n_tokens * vocab_size with ILAB_EVAL_ALL_LOGITS,
                              row i = the logits after token i of `tokens` [LOG-1, LOG-5] */
} ilab_batch_item_t;

/* Cache capacity, as cache_stats() reports it (ABI 1.1) [CCH-10]. The
 * caller sets struct_size to sizeof(ilab_cache_stats_t) as it was built; the
 * plugin writes no byte past it (smaller than ABI 1.1's: ILAB_ABI_MISMATCH,
 * nothing written). The model is a pool of blocks of `block_size` positions:
 * a sequence that shares no block with another holds ceil(length /
 * block_size) of them, and eval() fails with ILAB_OUT_OF_MEMORY exactly when
 * the blocks it would take exceed the free ones. */
typedef struct ilab_cache_stats {
    uint32_t struct_size;    /* sizeof(ilab_cache_stats_t) of the caller */
    int32_t block_size;      /* positions per block, >= 1 */
    int64_t total_positions; /* the whole pool, a multiple of block_size; constant per instance */
    int64_t free_positions;  /* held by no sequence: 0..total_positions, a multiple of block_size */
} ilab_cache_stats_t;

typedef struct ilab_backend_api {
    uint32_t struct_size; /* sizeof(ilab_backend_api_t) as the plugin was built; at
                             least ILAB_BACKEND_API_SIZE_1_0 */

    /* --- lifecycle ------------------------------------------------------ */

    /* Can this backend run here with this configuration? ILAB_OK = available;
     * ILAB_UNAVAILABLE with a human-readable reason in `reason` otherwise.
     * Must answer within 2 s (bounded connect timeouts). Any thread; needs no
     * instance. `reason` is caller-owned, always NUL-terminated on return;
     * on OK it may be empty or informative. ILAB_INVALID_ARGUMENT for a
     * configuration value the plugin rejects. Repeatable, no side effects
     * [PRB-1, PRB-3]. */
    ilab_status (*probe)(const ilab_host_t *host,
                         const ilab_config_entry_t *config, size_t n_config,
                         char *reason, size_t reason_cap);

    /* Create an instance. On failure `*out` is untouched and `error` (caller-
     * owned, NUL-terminated) names what was wrong. An unavailable backend
     * returns ILAB_UNAVAILABLE with the probe's reason [PRB-2]; a bad
     * configuration value is ILAB_INVALID_ARGUMENT [ERR-5]. `host` must
     * outlive the instance. Any thread. No leak over create/destroy [ABI-7]. */
    ilab_status (*create)(const ilab_host_t *host,
                          const ilab_config_entry_t *config, size_t n_config,
                          char *error, size_t error_cap, ilab_backend_t **out);

    /* Destroy an instance and every sequence it still holds. No other call on
     * it may be running or follow. NULL is a no-op. */
    void (*destroy)(ilab_backend_t *backend);

    /* The message of the most recent non-OK status this instance returned (to
     * any thread), copied into caller-owned `buf` (NUL-terminated, truncated
     * to fit). Returns the full message length, also when it was truncated
     * [ERR-4]. Any thread. */
    size_t (*last_error)(const ilab_backend_t *backend, char *buf, size_t cap);

    /* Fill `*info` (caller sets info->struct_size) [ABI-3, TOK-1]. The same
     * on every call [ABI-9]. Any thread. */
    ilab_status (*model_info)(ilab_backend_t *backend, ilab_model_info_t *info);

    /* --- tokens (capability: tokenizer) ------------------------------------ */

    /* Encode `len` bytes of UTF-8 `text` (need not be NUL-terminated) into
     * caller-owned `tokens`. If `cap` is too small: ILAB_BUFFER_TOO_SMALL and
     * `*n_tokens` = the count required. Invalid UTF-8: round-trips through
     * byte fallback or gives ILAB_INVALID_ARGUMENT; never a crash
     * [TOK-2, TOK-3, TOK-5, TOK-7, TOK-8, TOK-9]. */
    ilab_status (*tokenize)(ilab_backend_t *backend, const char *text, size_t len,
                            uint32_t flags, int32_t *tokens, size_t cap,
                            size_t *n_tokens);

    /* Decode `tokens` into caller-owned `text`: `*len` = bytes written, plus a
     * NUL when room (cap >= len + 1 is required, else ILAB_BUFFER_TOO_SMALL
     * with `*len` = bytes needed without the NUL). BOS/EOS decode to "". The
     * tokenizer's dummy-prefix space at the start of text is removed, so
     * detokenize(tokenize(s)) == s. Out-of-range id: ILAB_INVALID_ARGUMENT
     * [TOK-2, TOK-6, TOK-7, TOK-9]. */
    ilab_status (*detokenize)(ilab_backend_t *backend, const int32_t *tokens,
                              size_t n_tokens, char *text, size_t cap, size_t *len);

    /* The bytes `token` adds when it follows `prev_token` (-1 at the start of
     * text). Concatenating pieces over a sequence equals detokenize() of it
     * (TOK-4). A piece may be part of a UTF-8 code point (byte fallback); the
     * host holds bytes back when streaming. Sizes as for detokenize().
     * `prev_token` outside -1..vocab_size-1 is ILAB_INVALID_ARGUMENT
     * [TOK-4, TOK-6, TOK-7]. */
    ilab_status (*token_piece)(ilab_backend_t *backend, int32_t prev_token,
                               int32_t token, char *piece, size_t cap, size_t *len);

    /* --- sequences and evaluation (capability: logits) -------------------- */

    /* A new, empty sequence. ILAB_OUT_OF_MEMORY when no sequence slot is left
     * [CCH-6, CCH-9]. */
    ilab_status (*seq_create)(ilab_backend_t *backend, ilab_seq_t *seq);

    /* Release a sequence and its cache blocks; the handle becomes stale [CCH-6]. */
    ilab_status (*seq_free)(ilab_backend_t *backend, ilab_seq_t seq);

    /* (capability: cache.fork) A new sequence with the same contents as
     * `parent`; neither sees tokens later appended to the other, nor its
     * truncates or free [CCH-3]. */
    ilab_status (*seq_fork)(ilab_backend_t *backend, ilab_seq_t parent,
                            ilab_seq_t *child);

    /* (capability: cache.truncate) Keep the first `n_keep` positions
     * (0 <= n_keep <= length); later positions are forgotten [CCH-4]. */
    ilab_status (*seq_truncate)(ilab_backend_t *backend, ilab_seq_t seq,
                                int32_t n_keep);

    /* Number of positions in the sequence [CCH-9]. */
    ilab_status (*seq_length)(ilab_backend_t *backend, ilab_seq_t seq,
                              int32_t *length);

    /* Append each item's tokens to its sequence and write logits. One call may
     * mix prefills and single-token decodes; batching backends evaluate them
     * together. `items` is an array of `n_items` borrowed pointers; each
     * sequence appears at most once; n_items <= the manifest's max_batch.
     * All-or-nothing: on a non-OK status no sequence changed (e.g.
     * ILAB_CONTEXT_OVERFLOW when any item would pass max_context) [CCH-5,
     * CCH-8]. n_items == 0 is ILAB_INVALID_ARGUMENT [LOG-6]; exactly
     * max_batch items work [ABI-9]. Logits are finite, deterministic and
     * independent of the batch [LOG-1..3], equal to a full recomputation
     * [CCH-1, CCH-2, CCH-7]. */
    ilab_status (*eval)(ilab_backend_t *backend,
                        const ilab_batch_item_t *const *items, size_t n_items);

    /* --- backend-owned generation (capability: sampling: backend) --------- */

    /* Run one request to completion on the calling thread, emitting TOKEN*
     * then exactly one FINISH or ERROR through `on_event` (same thread). The
     * return value is ILAB_OK when a FINISH was emitted, else the status of
     * the ERROR event [STR-1..10, SMP-1..7]. */
    ilab_status (*generate)(ilab_backend_t *backend,
                            const ilab_generate_request_t *request,
                            ilab_event_fn on_event, void *user_data);

    /* (capability: cancel) Ask generate() for `request_id` to end with FINISH
     * (cancelled): at most 2 more TOKEN events once cancel() has returned.
     * Any thread. An unknown or finished id is ILAB_OK (the race is benign)
     * [STR-4]. */
    ilab_status (*cancel)(ilab_backend_t *backend, uint64_t request_id);

    /* --- ABI 1.1 ---------------------------------------------------------- */

    /* (capability: cache.stats) Fill `*stats` (caller sets stats->struct_size)
     * with the cache's capacity now: total and free positions and the block
     * size. Free capacity falls as sequences grow and rises as they are
     * truncated or freed; the host admits requests by it [CCH-10]. A host
     * reads this member only when the plugin's table reaches it and the
     * manifest declares cache.stats; a table built against ABI 1.0 ends
     * before it, and a 1.0 source rebuilt against this header leaves it
     * NULL (either way the host substitutes ILAB_UNSUPPORTED). */
    ilab_status (*cache_stats)(ilab_backend_t *backend, ilab_cache_stats_t *stats);
} ilab_backend_api_t;

#ifdef __cplusplus
}
#endif
#endif
