/* sglang_stub — the SGLang backend: a SGLang server driven over HTTP (its
 * native /generate API). Unavailable, with the precise reason, unless a
 * server is configured and serves a model. The shared HTTP half, manifest
 * and entry point live in ../http_common/; this engine's wire format in
 * sglang_protocol.c. */
#include "http_plugin.h"
#include "sglang_protocol.h"

HTTP_ADAPTER_PLUGIN("sglang_stub", "SGLang", "its native /generate API", "http://127.0.0.1:30000",
                    "INFERLAB_SGLANG_URL", &sglang_protocol);
