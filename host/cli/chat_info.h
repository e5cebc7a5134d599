/* What `inferlab info` and `inferlab tokenize` show of a backend's chat side
 * (ABI 1.2, capability chat): its template's name and its end-of-generation
 * ids, and each token's piece as readable text. */
#ifndef ILAB_CLI_CHAT_INFO_H
#define ILAB_CLI_CHAT_INFO_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/session.h"

/* {"template": NAME or null, "template_bytes": N, "template_problem": text
 * (only when not recognised), "eog": [{"id": …, "piece": …}, …]} for an open
 * session whose backend declares chat; NULL when it does not. */
json_t *ilab_cli_chat_json(ilab_session *s);

/* The piece of `token` after `prev` as printable text: printable ASCII and
 * whole UTF-8 code points as they are, other bytes as \xNN, \n \r \t \\ as
 * escapes. `out` is NUL-terminated. */
void ilab_cli_piece_text(ilab_session *s, int32_t prev, int32_t token, char *out, size_t cap);

#endif
