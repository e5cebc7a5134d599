/* The invariants every completion and chat response of `inferlab serve`
 * keeps, checked on each one the server tests receive (http_client.c calls
 * these after every POST to /v1/completions and /v1/chat/completions):
 *
 *  - an error: a JSON body {"error": {message, type, code}} whose code is
 *    the HTTP status and whose type is the one the status maps to (the one
 *    table of host/server/api_error.c: 400 invalid_request_error or
 *    unsupported_error, 401 authentication_error, 404 not_found_error, 503
 *    service_unavailable, 500 server_error, ...);
 *  - a 200: n choices, each with exactly one finish_reason; usage adds up
 *    (total = prompt + completion); completion_tokens equals the tokens
 *    returned (counted by their logprobs entries or token ids when asked)
 *    and is at most n times the limit (max_tokens, or for chat
 *    max_completion_tokens when given, which wins); one logprobs entry per
 *    token, none when not asked; streamed the same, with a grammar of
 *    "data: <json>\n\n" events ending in [DONE];
 *  - /metrics after the response (rc_check_metrics): each series once,
 *    counters never go down, histograms are cumulative with +Inf = count,
 *    every latency sum is in seconds (no request lasted longer than the
 *    server has been up), and with nothing in flight the time to first
 *    token sums to at most the end-to-end latency, the HTTP layer's finish
 *    reasons equal the engine's, and the per-backend series add up to the
 *    process-wide ones; when the requests that ended since the last
 *    snapshot (read before the request was sent at `sent_at`, monotonic
 *    seconds) are exactly the reply's choices (wall_s: how long the client
 *    waited for it), the token and finish-reason counters grew by what the
 *    reply says and the latency sums by no more than the client waited;
 *  - legacy completions' logprobs: each token's text is at its
 *    text_offset in the choice's text.
 *
 * rc_check_twin sends the same request streamed if it was not (and not if
 * it was) and checks that text, tokens and finish reasons agree. */
#ifndef ILAB_TEST_RESPONSE_CHECK_H
#define ILAB_TEST_RESPONSE_CHECK_H

#include <stdbool.h>
#include <stddef.h>

#include "http_client.h"

/* true when `path` is an endpoint these checks cover. */
bool rc_covers(const char *path);

/* The reply to `request_body` (JSON text; may be malformed) on `path`.
 * false with `why` set when an invariant fails. */
bool rc_check_reply(const char *path, const char *request_body, const http_reply *r,
                    char *why, size_t cap);

/* Fetch /metrics (with `headers`, the request's, for a key) and check it
 * against the previous snapshot of the same server process. A /metrics
 * that cannot be read (a key it lacks, a server already gone) is not
 * checked: returns true with `*checked` false. */
bool rc_check_metrics(const test_server *s, const char *const *headers, double sent_at,
                      double wall_s, bool *checked, char *why, size_t cap);

/* Send the request's twin (stream toggled) and compare with `r`. */
bool rc_check_twin(const test_server *s, const char *path, const char *request_body,
                   const http_reply *r, char *why, size_t cap);

/* The HTTP status -> error type table (one row per status the server
 * answers with): false for a type that status does not carry, and for a
 * status the server must never send. */
bool rc_error_type_allowed(long status, const char *type);

/* How many checks failed in this process (each is also printed). */
unsigned rc_failures(void);
/* How many replies, and /metrics snapshots, were checked so far. */
void rc_counts(unsigned *replies, unsigned *metrics);
/* How many replies the /metrics ledger was checked against (those alone
 * between two snapshots). */
unsigned rc_ledgers_checked(void);
void rc_note_failure(const char *what, const char *path, const char *request_body,
                     const char *why);

#endif
