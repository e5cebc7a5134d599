/* Fuzz target: the chat template renderer (docs/chat-template.md).
 *
 * Input: messages separated by NUL bytes; the first byte of each chooses
 * its role (system, user, assistant), the rest is its content. Calls
 * ilab_chat_render() and asserts the result is exactly "<role>: <content>\n"
 * per message followed by "assistant:", and that it ends the turn the model
 * is to write: the prompt's last line is "assistant:" and the turn markers
 * are the documented stop strings. */
#include <string.h>

#include "chat_template.h"
#include "fuzz.h"

static const char *const roles[] = {"system", "user", "assistant"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_strndup(data, size);
    FUZZ_CHECK(text, "oom");
    ilab_chat_message msgs[64];
    size_t n = 0, want_len = 10;
    for (size_t at = 0; at < size && n < 64;) {
        const char *m = text + at;
        size_t len = strlen(m);
        if (len) {
            msgs[n].role = roles[(unsigned char)m[0] % 3];
            msgs[n].content = m + 1;
            FUZZ_CHECK(ilab_chat_role_valid(msgs[n].role), "role %s", msgs[n].role);
            want_len += strlen(msgs[n].role) + 2 + (len - 1) + 1;
            n++;
        }
        at += len + 1;
    }
    FUZZ_CHECK(!ilab_chat_role_valid("tool") && !ilab_chat_role_valid(NULL) &&
                   !ilab_chat_role_valid("User"), "unknown role accepted");

    char *out = ilab_chat_render(msgs, n);
    FUZZ_CHECK(out, "render returned NULL");
    FUZZ_CHECK(strlen(out) == want_len, "rendered %zu bytes, expected %zu", strlen(out), want_len);
    const char *p = out;
    for (size_t i = 0; i < n; i++) {
        size_t r = strlen(msgs[i].role), c = strlen(msgs[i].content);
        FUZZ_CHECK(!memcmp(p, msgs[i].role, r) && !memcmp(p + r, ": ", 2) &&
                       !memcmp(p + r + 2, msgs[i].content, c) && p[r + 2 + c] == '\n',
                   "message %zu is not '<role>: <content>\\n'", i);
        p += r + 2 + c + 1;
    }
    FUZZ_CHECK(!strcmp(p, "assistant:"), "the prompt does not end with 'assistant:'");
    FUZZ_CHECK(ilab_chat_n_turn_stops == 3 && !strcmp(ilab_chat_turn_stops[0], "\nuser:") &&
                   !strcmp(ilab_chat_turn_stops[1], "\nassistant:") &&
                   !strcmp(ilab_chat_turn_stops[2], "\nsystem:"), "turn stops");
    free(out);
    free(text);
    return 0;
}
