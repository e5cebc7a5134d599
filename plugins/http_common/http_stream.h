/* One generation stream: what an engine's chunks said, turned into the
 * contract's events.
 *
 * A protocol decoder reports, per chunk, the new token ids (with logprobs),
 * the new text (as a delta, or as the whole text so far) and, at the end,
 * the finish reason. The stream emits one TOKEN per token id; each chunk's
 * text rides on its last TOKEN, minus what must be held back: the bytes of
 * an unfinished UTF-8 code point and any tail that could still begin a stop
 * string. Stop strings are matched here, by the contract's rule (STR-6:
 * the occurrence that ends first), not by the engine, which is not told
 * them: engines match in list order and trim the text, so the adapter
 * could not see what the contract cuts. A stop string ends the stream with
 * FINISH stop, the text cut, and the transfer dropped; the token that made an
 * engine stop (EOS, a stop token id) is not emitted. Usage is counted from
 * the events, so it always equals them. One stream per generate() call, on
 * that call's thread. */
#ifndef ILAB_HTTP_STREAM_H
#define ILAB_HTTP_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <inferlab/inferlab.h>

#define HTTP_STREAM_TOPK_MAX 20

typedef struct http_stream http_stream;

/* Create a stream for `req` whose events go to `on_event`. `eos_id` is the
 * model's EOS (-1 unknown). NULL when out of memory. */
http_stream *http_stream_create(const ilab_generate_request_t *req, int32_t eos_id,
                                ilab_event_fn on_event, void *user_data);
void http_stream_destroy(http_stream *st);
/* Emit at most `max_tokens` TOKENs (fewer than the request's when the
 * context holds fewer), then FINISH(length). */
void http_stream_limit(http_stream *st, int32_t max_tokens);

/* --- for decoders ------------------------------------------------------ */

/* A new token. `logprob` NAN when the server sent none; `top` (sorted or
 * not, at most HTTP_STREAM_TOPK_MAX kept) may be NULL. */
void http_stream_token(http_stream *st, int32_t token, float logprob, const ilab_logprob_t *top,
                       size_t n_top);
/* New text after what came before. */
void http_stream_text(http_stream *st, const char *text, size_t len);
/* The whole text so far (engines that resend it each chunk); the server may
 * shorten it at the end (a trimmed stop string). */
void http_stream_text_so_far(http_stream *st, const char *text, size_t len);
/* Token ids received so far, for engines that resend every id each chunk. */
size_t http_stream_tokens_seen(const http_stream *st);
/* The server finished. `stop_token` is the id that ended it (EOS or a stop
 * token id; it is dropped if it is the last token), or -1. */
void http_stream_server_finished(http_stream *st, ilab_finish_reason reason, int32_t stop_token);

/* --- for the transfer loop ----------------------------------------------- */

/* Emit the events the chunks so far allow. Returns true when the stream is
 * over on this side (stop string, max_tokens, the callback asked to stop):
 * the transfer can be dropped. */
bool http_stream_flush(http_stream *st);
/* The server said it finished and every token is out. */
bool http_stream_server_done(const http_stream *st);
/* End with FINISH `reason` (held text rides on it), unless already ended. */
void http_stream_finish(http_stream *st, ilab_finish_reason reason);
/* End with ERROR, unless already ended. */
void http_stream_error(http_stream *st, ilab_status status, const char *message);
/* Whether a terminal event went out, and the status generate() returns. */
bool http_stream_ended(const http_stream *st);
ilab_status http_stream_status(const http_stream *st);
/* The ERROR event's message ("" when none was emitted). */
const char *http_stream_message(const http_stream *st);
/* The callback asked to stop (FINISH cancelled has been emitted). */
bool http_stream_callback_stopped(const http_stream *st);

#endif
