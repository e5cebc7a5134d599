/* The documented plain-text chat template (docs/chat-template.md). */
#include "chat_template.h"

#include <stdlib.h>
#include <string.h>

const char *const ilab_chat_turn_stops[] = {"\nuser:", "\nassistant:", "\nsystem:"};
const size_t ilab_chat_n_turn_stops = sizeof ilab_chat_turn_stops / sizeof ilab_chat_turn_stops[0];

int ilab_chat_role_valid(const char *role)
{
    return role && (!strcmp(role, "system") || !strcmp(role, "user") || !strcmp(role, "assistant"));
}

char *ilab_chat_render(const ilab_chat_message *msgs, size_t n)
{
    static const char tail[] = "assistant:";
    size_t len = sizeof tail;
    for (size_t i = 0; i < n; i++)
        len += strlen(msgs[i].role) + 2 + strlen(msgs[i].content) + 1;
    char *out = malloc(len);
    if (!out)
        return NULL;
    char *p = out;
    for (size_t i = 0; i < n; i++) {
        size_t r = strlen(msgs[i].role), c = strlen(msgs[i].content);
        memcpy(p, msgs[i].role, r);
        p += r;
        memcpy(p, ": ", 2);
        p += 2;
        memcpy(p, msgs[i].content, c);
        p += c;
        *p++ = '\n';
    }
    memcpy(p, tail, sizeof tail);
    return out;
}
