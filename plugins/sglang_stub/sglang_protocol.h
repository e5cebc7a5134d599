/* SGLang's native protocol: POST /generate, streamed (sglang_protocol.c). */
#ifndef ILAB_SGLANG_PROTOCOL_H
#define ILAB_SGLANG_PROTOCOL_H

#include "http_backend.h"

extern const http_protocol sglang_protocol;

#endif
