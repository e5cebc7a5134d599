/* The chat side of a backend, for `inferlab info` and `inferlab tokenize`
 * (chat_info.h). */
#include "chat_info.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/chat_formats.h"

/* The length of the valid UTF-8 code point at `p` (1..4), or 0. */
static size_t utf8_len(const unsigned char *p, size_t left)
{
    size_t n = p[0] < 0x80 ? 1 : (p[0] & 0xE0) == 0xC0 ? 2 : (p[0] & 0xF0) == 0xE0 ? 3
               : (p[0] & 0xF8) == 0xF0 ? 4 : 0;
    if (!n || n > left || (n == 2 && p[0] < 0xC2))
        return 0;
    for (size_t i = 1; i < n; i++)
        if ((p[i] & 0xC0) != 0x80)
            return 0;
    return n;
}

static void escape_bytes(const char *in, size_t len, char *out, size_t cap)
{
    size_t o = 0;
    const unsigned char *p = (const unsigned char *)in;
    for (size_t i = 0; i < len && o + 5 < cap;) {
        size_t n = utf8_len(p + i, len - i);
        const char *esc = p[i] == '\n' ? "\\n" : p[i] == '\r' ? "\\r" : p[i] == '\t' ? "\\t"
                          : p[i] == '\\' ? "\\\\" : NULL;
        if (esc) {
            o += (size_t)snprintf(out + o, cap - o, "%s", esc);
            i++;
        } else if (n == 1 && p[i] >= 0x20 && p[i] < 0x7F) {
            out[o++] = (char)p[i++];
        } else if (n > 1 && o + n < cap) {
            memcpy(out + o, p + i, n);
            o += n;
            i += n;
        } else {
            o += (size_t)snprintf(out + o, cap - o, "\\x%02X", p[i]);
            i++;
        }
    }
    out[o < cap ? o : cap - 1] = '\0';
}

void ilab_cli_piece_text(ilab_session *s, int32_t prev, int32_t token, char *out, size_t cap)
{
    char piece[512];
    size_t len = 0;
    const ilab_backend_api_t *api = ilab_session_api(s);
    if (api->token_piece(ilab_session_backend(s), prev, token, piece, sizeof piece, &len) != ILAB_OK)
        len = 0;
    escape_bytes(piece, len, out, cap);
}

static char *template_text(ilab_session *s)
{
    const ilab_backend_api_t *api = ilab_session_api(s);
    ilab_backend_t *b = ilab_session_backend(s);
    size_t len = 0;
    ilab_status st = api->chat_template(b, NULL, 0, &len);
    if (st != ILAB_OK && st != ILAB_BUFFER_TOO_SMALL)
        return NULL;
    char *text = malloc(len + 1);
    if (text && api->chat_template(b, text, len + 1, &len) != ILAB_OK) {
        free(text);
        return NULL;
    }
    return text;
}

json_t *ilab_cli_chat_json(ilab_session *s)
{
    if (!ilab_plugin_manifest(ilab_session_plugin(s))->chat)
        return NULL;
    const ilab_backend_api_t *api = ilab_session_api(s);
    ilab_backend_t *b = ilab_session_backend(s);
    json_t *o = json_object();
    char *text = template_text(s);
    const ilab_chat_format *f = !text ? NULL
                                : text[0] ? ilab_chat_format_detect(text)
                                          : ilab_chat_format_named("plain");
    json_object_set_new(o, "template", f ? json_string(ilab_chat_format_name(f)) : json_null());
    json_object_set_new(o, "template_bytes", json_integer(text ? (json_int_t)strlen(text) : -1));
    if (!f)
        json_object_set_new(o, "template_problem",
                            json_string(text ? "not recognised: serve with --chat-template NAME"
                                             : "chat_template() failed"));
    free(text);
    json_t *eog = json_array();
    size_t n = 0;
    int32_t ids[64];
    if (api->eog_ids(b, ids, sizeof ids / sizeof ids[0], &n) == ILAB_OK)
        for (size_t i = 0; i < n; i++) {
            char piece[256];
            ilab_cli_piece_text(s, -1, ids[i], piece, sizeof piece);
            json_array_append_new(eog, json_pack("{s:i, s:s}", "id", (int)ids[i], "piece", piece));
        }
    json_object_set_new(o, "eog", eog);
    return o;
}
