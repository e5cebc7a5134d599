/* What makes an HTTP engine adapter a plugin: its engine description, its
 * manifest and its entry point. Every adapter declares the same
 * capabilities and configuration keys (docs/adapters.md), so they are
 * written once here and each plugin's file names only what differs: the
 * plugin and engine names, the engine's API, an example URL, the URL's
 * environment variable and the wire protocol.
 *
 * Use once per plugin, at file scope:
 *   HTTP_ADAPTER_PLUGIN("vllm_stub", "vLLM", "its OpenAI-compatible ...",
 *                       "http://127.0.0.1:8000", "INFERLAB_VLLM_URL", &vllm_protocol);
 * All but the protocol must be string literals (they are pasted into the
 * manifest). */
#ifndef ILAB_HTTP_PLUGIN_H
#define ILAB_HTTP_PLUGIN_H

#include "http_backend.h"

#define HTTP_ADAPTER_VERSION "0.3.0" /* 0.3: tokenizer: text */

#define HTTP_ADAPTER_STR_(x) #x
#define HTTP_ADAPTER_STR(x) HTTP_ADAPTER_STR_(x)

/* What a remote engine can honour: it tokenizes (through the server) and
 * samples itself, streams, cancels and returns top-k logprobs; no full
 * logits and no cache control. Concurrent requests are concurrent HTTP
 * transfers, so any thread may call at any time. max_context 0: the
 * server's model card says it (or the max_context key). */
#define HTTP_ADAPTER_MANIFEST(NAME, LABEL, API, EXAMPLE_URL, ENV_VAR)                           \
    "name: " NAME "\n"                                                                        \
    "version: " HTTP_ADAPTER_VERSION "\n"                                                     \
    "abi: 1.0\n"                                                                              \
    "description: >-\n"                                                                       \
    "  HTTP adapter for a " LABEL " server (" API "); unavailable unless a\n"                 \
    "  server is configured (base_url or " ENV_VAR ") and serves a model.\n"                  \
    "capabilities:\n"                                                                         \
    "  tokenizer: text\n"                                                                     \
    "  logits: topk\n"                                                                        \
    "  topk_max: " HTTP_ADAPTER_STR(HTTP_STREAM_TOPK_MAX) "\n"                                \
    "  sampling: backend\n"                                                                   \
    "  cache: {fork: false, truncate: false}\n"                                               \
    "  batching: {max_batch: 64}\n"                                                           \
    "  streaming: true\n"                                                                     \
    "  cancel: true\n"                                                                        \
    "  max_context: 0\n"                                                                      \
    "  thread_safety: full\n"                                                                 \
    "config:\n"                                                                               \
    "  base_url:\n"                                                                           \
    "    type: string\n"                                                                      \
    "    default: \"\"\n"                                                                     \
    "    description: URL of the " LABEL " server, e.g. " EXAMPLE_URL "; empty = " ENV_VAR ".\n" \
    "  model:\n"                                                                              \
    "    type: string\n"                                                                      \
    "    default: \"\"\n"                                                                     \
    "    description: Served model id to use; empty = the server's only model.\n"             \
    "  api_key:\n"                                                                            \
    "    type: string\n"                                                                      \
    "    default: \"\"\n"                                                                     \
    "    description: Sent as a Bearer token in the Authorization header (the server's "      \
    "--api-key); empty = none.\n"                                                             \
    "  connect_timeout_ms:\n"                                                                 \
    "    type: int\n"                                                                         \
    "    default: 1000\n"                                                                     \
    "    description: TCP/TLS connect timeout of every request, 100 to 1000 (so the probe " \
    "fits 2 s).\n"                                                                            \
    "  request_timeout_s:\n"                                                                  \
    "    type: int\n"                                                                         \
    "    default: 300\n"                                                                      \
    "    description: Longest a tokenize call or one whole generation may take, 1 to "      \
    "86400.\n"                                                                                \
    "  vocab_size:\n"                                                                         \
    "    type: int\n"                                                                         \
    "    default: 0\n"                                                                        \
    "    description: Vocabulary size of the served model; 0 = from the server's model card.\n" \
    "  eos_id:\n"                                                                             \
    "    type: int\n"                                                                         \
    "    default: -1\n"                                                                       \
    "    description: EOS token id reported by model_info; -1 = unknown (the server still "   \
    "stops on it).\n"                                                                         \
    "  max_context:\n"                                                                        \
    "    type: int\n"                                                                         \
    "    default: 0\n"                                                                        \
    "    description: Positions per sequence; 0 = the server's max_model_len.\n"

/* Both engines serve the same health route and OpenAI model list. */
#define HTTP_ADAPTER_PLUGIN(NAME, LABEL, API, EXAMPLE_URL, ENV_VAR, PROTOCOL)                   \
    const http_engine http_engine_of_plugin = {                                               \
        .plugin = NAME, .label = LABEL, .env_var = ENV_VAR,                                   \
        .health_path = "/health", .models_path = "/v1/models", .protocol = (PROTOCOL),         \
    };                                                                                        \
    static const char http_adapter_manifest[] =                                               \
        HTTP_ADAPTER_MANIFEST(NAME, LABEL, API, EXAMPLE_URL, ENV_VAR);                        \
    ILAB_PLUGIN_EXPORT const ilab_plugin_entry_t ilab_plugin_entry = {                        \
        .struct_size = sizeof(ilab_plugin_entry_t),                                           \
        .abi_major = ILAB_ABI_MAJOR,                                                          \
        .abi_minor = 0, /* needs nothing past ABI 1.0 (no cache.stats) */                     \
        .name = NAME,                                                                         \
        .version = HTTP_ADAPTER_VERSION,                                                      \
        .manifest_yaml = http_adapter_manifest,                                               \
        .backend = &http_backend_api,                                                         \
    }

#endif
