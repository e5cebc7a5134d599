/* A served backend's chat template, and a chat request's prompt (chat_setup.c,
 * docs/chat-template.md). */
#ifndef ILAB_SERVER_CHAT_SETUP_H
#define ILAB_SERVER_CHAT_SETUP_H

#include <stdbool.h>
#include <stddef.h>

#include "openai_request.h"
#include "server_internal.h"

/* Choose `v`'s template (`override`: a template name, or NULL/"" for the
 * model's own). False (err filled) when the override is unknown or the
 * backend's chat_template() fails; an unrecognised model template is not an
 * error here: chat requests get the 400 (v->chat_problem). */
bool ilab_served_chat_setup(ilab_served *v, const char *override, char *err, size_t err_cap);

/* The template's name, or NULL when the model's is not recognised. */
const char *ilab_served_chat_name(const ilab_served *v);

/* Render `r`'s messages with `v`'s template into `r->prompt` (plain) or
 * `r->prompt_tokens` (BOS first). False with `e` filled: 400 for an
 * unrecognised template, naming --chat-template. */
bool ilab_chat_prompt(const ilab_served *v, ilab_api_request *r, ilab_api_error *e);

#endif
