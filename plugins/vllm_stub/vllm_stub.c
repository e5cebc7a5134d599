/* vllm_stub — the vLLM backend: a vLLM server driven over HTTP (its
 * OpenAI-compatible completions API). Unavailable, with the precise reason,
 * unless a server is configured and serves a model. The shared HTTP half,
 * manifest and entry point live in ../http_common/; this engine's wire
 * format in vllm_protocol.c. */
#include "http_plugin.h"
#include "vllm_protocol.h"

HTTP_ADAPTER_PLUGIN("vllm_stub", "vLLM", "its OpenAI-compatible completions API (/v1/completions)",
                    "http://127.0.0.1:8000", "INFERLAB_VLLM_URL", &vllm_protocol);
