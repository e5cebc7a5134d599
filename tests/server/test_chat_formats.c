/* The chat templates against llama.cpp (tests/server/data/chat/README.md):
 *  - every template llama.cpp names renders every recorded conversation,
 *    with and without the generation prompt, to exactly llama.cpp's text;
 *  - every real model template (data/chat/templates/ *.jinja) is detected
 *    as llama.cpp detects it (or not at all, where llama.cpp does not);
 *  - message content only ever lands in content segments, whole or trimmed,
 *    so control-token text in a message is never parsed as special.
 * Usage: test_chat_formats DATA_DIR */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat_formats.h"

static int failures;

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fputc('\n', stderr);                                                                       \
        failures++;                                                                                \
    } while (0)

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    if (buf)
        buf[n] = '\0';
    fclose(f);
    return buf;
}

/* The first differing byte, for the message. */
static size_t first_diff(const char *a, const char *b)
{
    size_t i = 0;
    while (a[i] && a[i] == b[i])
        i++;
    return i;
}

/* No template segment holds any message's content (when it is long enough
 * not to occur by chance in a marker). */
static void check_segments(const char *name, const ilab_chat_segs *r, const ilab_chat_message *m,
                           size_t n)
{
    for (size_t s = 0; s < r->n; s++) {
        if (r->seg[s].kind != ILAB_CHAT_SEG_TEMPLATE)
            continue;
        for (size_t i = 0; i < n; i++)
            if (strlen(m[i].content) >= 8 && strstr(r->seg[s].text, m[i].content))
                FAIL("%s: message %zu's content is inside a template segment", name, i);
    }
}

static int renders(const char *dir)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/renders.json", dir);
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    if (!root) {
        FAIL("%s: %s (line %d)", path, err.text, err.line);
        return 0;
    }
    json_t *convs = json_object_get(root, "conversations"), *rs = json_object_get(root, "renders");
    size_t i, checked = 0;
    json_t *rec;
    json_array_foreach(rs, i, rec) {
        const char *name = json_string_value(json_object_get(rec, "template"));
        size_t c = (size_t)json_integer_value(json_object_get(rec, "conversation"));
        bool add = json_is_true(json_object_get(rec, "add_generation_prompt"));
        const char *want = json_string_value(json_object_get(rec, "output"));
        json_t *conv = json_array_get(convs, c);
        const ilab_chat_format *f = ilab_chat_format_named(name);
        if (!f) {
            FAIL("template '%s' (llama.cpp names it) is not known here", name);
            continue;
        }
        size_t n = json_array_size(conv);
        ilab_chat_message *m = calloc(n ? n : 1, sizeof *m);
        for (size_t k = 0; k < n; k++) {
            json_t *msg = json_array_get(conv, k);
            m[k].role = json_string_value(json_object_get(msg, "role"));
            m[k].content = json_string_value(json_object_get(msg, "content"));
        }
        ilab_chat_segs r = {0};
        if (!ilab_chat_format_render(f, m, n, add, &r)) {
            FAIL("%s: out of memory", name);
        } else {
            char *got = ilab_chat_segs_join(&r, NULL);
            if (strcmp(got, want)) {
                size_t d = first_diff(got, want);
                FAIL("%s, conversation %zu, add_generation_prompt %d: differs from llama.cpp at byte "
                     "%zu:\n  got  \"%.60s\"\n  want \"%.60s\"", name, c, add, d, got + d, want + d);
            }
            free(got);
            check_segments(name, &r, m, n);
        }
        ilab_chat_segs_free(&r);
        free(m);
        checked++;
    }
    printf("renders: %zu compared with llama.cpp's\n", checked);
    json_decref(root);
    return (int)checked;
}

static int detection(const char *dir)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/detect.json", dir);
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    if (!root) {
        FAIL("%s: %s (line %d)", path, err.text, err.line);
        return 0;
    }
    size_t i, checked = 0;
    json_t *rec;
    json_array_foreach(root, i, rec) {
        const char *file = json_string_value(json_object_get(rec, "file"));
        json_t *w = json_object_get(rec, "template");
        const char *want = json_is_string(w) ? json_string_value(w) : NULL;
        snprintf(path, sizeof path, "%s/templates/%s", dir, file);
        char *text = read_file(path);
        if (!text) {
            FAIL("%s: cannot read", path);
            continue;
        }
        const char *got = ilab_chat_format_name(ilab_chat_format_detect(text));
        if ((got == NULL) != (want == NULL) || (got && strcmp(got, want)))
            FAIL("%s: detected as %s, llama.cpp detects %s", file, got ? got : "(none)",
                 want ? want : "(none)");
        free(text);
        checked++;
    }
    /* Every llama.cpp name is itself; "plain" is ours only. */
    for (const char *const *nm = ilab_chat_format_names; *nm; nm++) {
        const char *got = ilab_chat_format_name(ilab_chat_format_detect(*nm));
        bool ours = !strcmp(*nm, "plain") || !strcmp(*nm, "dots1");
        if (!ours && (!got || strcmp(got, *nm)))
            FAIL("the template text '%s' is detected as %s", *nm, got ? got : "(none)");
    }
    if (ilab_chat_format_detect("{{ messages }}") || ilab_chat_format_detect(""))
        FAIL("an unknown template text was recognised");
    printf("detection: %zu real templates compared with llama.cpp's answer\n", checked);
    json_decref(root);
    return (int)checked;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_chat_formats DATA_DIR\n");
        return 2;
    }
    int r = renders(argv[1]), d = detection(argv[1]);
    if (r == 0 || d == 0)
        FAIL("no data compared");
    if (failures)
        fprintf(stderr, "%d failure(s)\n", failures);
    return failures ? 1 : 0;
}
