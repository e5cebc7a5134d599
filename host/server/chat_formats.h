/* Chat templates by name: the well-known templates a model file's
 * `tokenizer.chat_template` is recognised as (docs/chat-template.md), each
 * rendered natively, not by running the file's Jinja program.
 *
 * A render is a list of segments, each either template text (markers such as
 * "<|im_start|>", role names, separators), whose control tokens are parsed
 * as special tokens, or message content, which is tokenized as plain text so
 * that a user cannot spell a control token (prompt injection). The segments
 * joined are the prompt; for every template llama.cpp names, that text
 * equals llama.cpp's llama_chat_apply_template() byte for byte
 * (tests/server/data/chat/). */
#ifndef ILAB_SERVER_CHAT_FORMATS_H
#define ILAB_SERVER_CHAT_FORMATS_H

#include <stdbool.h>
#include <stddef.h>

#include "chat_template.h"

typedef enum ilab_chat_seg_kind {
    ILAB_CHAT_SEG_TEMPLATE, /* parse special tokens */
    ILAB_CHAT_SEG_CONTENT,  /* plain text */
} ilab_chat_seg_kind;

typedef struct ilab_chat_segment {
    ilab_chat_seg_kind kind;
    char *text; /* owned, NUL-terminated */
    size_t len;
} ilab_chat_segment;

typedef struct ilab_chat_segs {
    ilab_chat_segment *seg; /* owned */
    size_t n, cap;
    bool failed; /* out of memory: the render is unusable */
} ilab_chat_segs;

/* The template named `name` ("chatml", "llama3", …, and "plain"), or NULL. */
typedef struct ilab_chat_format ilab_chat_format;
const ilab_chat_format *ilab_chat_format_named(const char *name);
const char *ilab_chat_format_name(const ilab_chat_format *f);

/* Recognise a model's template text as llama.cpp's llm_chat_detect_template
 * does: a text equal to a name is that template; otherwise marker strings
 * decide. NULL when not recognised. */
const ilab_chat_format *ilab_chat_format_detect(const char *template_text);

/* Every name, in a fixed order, NULL-terminated (for messages and --help). */
extern const char *const ilab_chat_format_names[];

/* Render `n` messages (roles "system", "user", "assistant") into `out`
 * (zero-initialised by the caller; ilab_chat_segs_free after). With
 * `add_generation_prompt` the prompt ends with the opening of the
 * assistant's turn. Returns false only when out of memory. */
bool ilab_chat_format_render(const ilab_chat_format *f, const ilab_chat_message *msgs, size_t n,
                             bool add_generation_prompt, ilab_chat_segs *out);

/* Append a content segment (an assistant prefill) to a render. */
bool ilab_chat_segs_content(ilab_chat_segs *r, const char *text, size_t len);

/* The segments joined, malloc'd and NUL-terminated (NULL when out of memory). */
char *ilab_chat_segs_join(const ilab_chat_segs *r, size_t *len);
void ilab_chat_segs_free(ilab_chat_segs *r);

#endif
