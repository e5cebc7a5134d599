/* The chat template: how /v1/chat/completions turns messages into one text
 * prompt for a plain language model (docs/chat-template.md).
 *
 *   system: You are terse.\n
 *   user: Who is Mr. Darcy?\n
 *   assistant:
 *
 * Each message is "<role>: <content>\n"; the prompt ends with "assistant:"
 * so the model writes the assistant's turn. Generation stops at the next turn
 * marker ("\nuser:", "\nassistant:", "\nsystem:"), and the single space the
 * model writes after "assistant:" is removed from the reply. */
#ifndef ILAB_SERVER_CHAT_TEMPLATE_H
#define ILAB_SERVER_CHAT_TEMPLATE_H

#include <stddef.h>

/* The roles the template knows. */
int ilab_chat_role_valid(const char *role);

typedef struct ilab_chat_message {
    const char *role;    /* "system" | "user" | "assistant" */
    const char *content; /* UTF-8 */
} ilab_chat_message;

/* Render `n` messages; the result is malloc'd (NULL only when out of memory). */
char *ilab_chat_render(const ilab_chat_message *msgs, size_t n);

/* The stop strings every chat request gets (the next turn markers). */
extern const char *const ilab_chat_turn_stops[];
extern const size_t ilab_chat_n_turn_stops;

#endif
