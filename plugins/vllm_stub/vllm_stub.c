/* vllm_stub — the vLLM backend: vLLM over its OpenAI-compatible HTTP API.
 * Unavailable (with the reason) unless a vLLM server is configured and
 * reachable; the shared HTTP half lives in ../http_common/. */
#include "http_backend.h"

const http_engine http_engine_of_plugin = {
    .plugin = "vllm_stub",
    .label = "vLLM",
    .env_var = "INFERLAB_VLLM_URL",
    .health_path = "/health",
};

/* Only what an HTTP engine can honour: it samples itself, streams, cancels
 * and returns top-k logprobs; no full logits and no cache control. */
static const char manifest[] =
    "name: vllm_stub\n"
    "version: 0.1.0\n"
    "abi: 1.0\n"
    "description: >-\n"
    "  vLLM over its OpenAI-compatible HTTP API; unavailable unless a server is configured\n"
    "  (base_url or INFERLAB_VLLM_URL) and reachable.\n"
    "capabilities:\n"
    "  tokenizer: false\n"
    "  logits: topk\n"
    "  topk_max: 20\n"
    "  sampling: backend\n"
    "  cache: {fork: false, truncate: false}\n"
    "  batching: {max_batch: 1}\n"
    "  streaming: true\n"
    "  cancel: true\n"
    "  max_context: 0\n"
    "  thread_safety: full\n"
    "config:\n"
    "  base_url:\n"
    "    type: string\n"
    "    default: \"\"\n"
    "    description: URL of the vLLM server, e.g. http://127.0.0.1:8000; empty = INFERLAB_VLLM_URL.\n";

ILAB_PLUGIN_EXPORT const ilab_plugin_entry_t ilab_plugin_entry = {
    .struct_size = sizeof(ilab_plugin_entry_t),
    .abi_major = ILAB_ABI_MAJOR,
    .abi_minor = ILAB_ABI_MINOR,
    .name = "vllm_stub",
    .version = "0.1.0",
    .manifest_yaml = manifest,
    .backend = &http_backend_api,
};
