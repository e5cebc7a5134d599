/* The public layout of ABI 1: every struct, member and constant that crosses
 * the plugin boundary, in declaration order. tests/abi turns this table into
 * sizes, offsets and values for the compiler at hand and compares them with
 * the committed record (sdk/abi/<arch>.layout): a member may never move or
 * change size, a constant never change value; appending is the only change
 * allowed. A new public member or constant goes here in the same change.
 *
 * Each user defines the three macros before including this file:
 *   ILAB_LAYOUT_STRUCT(type)        a size-prefixed (or frozen) struct
 *   ILAB_LAYOUT_MEMBER(type, name)  one member of the struct above
 *   ILAB_LAYOUT_VALUE(name)         an enum constant or #define */
#include "inferlab/generate.h"
#include "inferlab/host.h"
#include "inferlab/backend.h"
#include "inferlab/plugin.h"

#define S ILAB_LAYOUT_STRUCT
#define M ILAB_LAYOUT_MEMBER
#define V ILAB_LAYOUT_VALUE

V(ILAB_ABI_MAJOR)
V(ILAB_ABI_MINOR)
V(ILAB_OK) V(ILAB_INVALID_ARGUMENT) V(ILAB_UNSUPPORTED) V(ILAB_UNAVAILABLE)
V(ILAB_BUFFER_TOO_SMALL) V(ILAB_CONTEXT_OVERFLOW) V(ILAB_OUT_OF_MEMORY)
V(ILAB_CANCELLED) V(ILAB_ABI_MISMATCH) V(ILAB_IO) V(ILAB_INTERNAL)
V(ILAB_STATUS_COUNT)
V(ILAB_LOG_DEBUG) V(ILAB_LOG_INFO) V(ILAB_LOG_WARN) V(ILAB_LOG_ERROR)
V(ILAB_EVENT_TOKEN) V(ILAB_EVENT_FINISH) V(ILAB_EVENT_ERROR)
V(ILAB_FINISH_NONE) V(ILAB_FINISH_STOP) V(ILAB_FINISH_LENGTH)
V(ILAB_FINISH_CANCELLED) V(ILAB_FINISH_ERROR)
V(ILAB_TOKENIZE_ADD_BOS) V(ILAB_TOKENIZE_ADD_EOS) V(ILAB_TOKENIZE_PARSE_SPECIAL)
V(ILAB_EVAL_ALL_LOGITS)
V(ILAB_SEQ_NONE)

S(ilab_plugin_entry_t)
M(ilab_plugin_entry_t, struct_size)
M(ilab_plugin_entry_t, abi_major)
M(ilab_plugin_entry_t, abi_minor)
M(ilab_plugin_entry_t, name)
M(ilab_plugin_entry_t, version)
M(ilab_plugin_entry_t, manifest_yaml)
M(ilab_plugin_entry_t, backend)

S(ilab_host_t)
M(ilab_host_t, struct_size)
M(ilab_host_t, abi_major)
M(ilab_host_t, abi_minor)
M(ilab_host_t, host_data)
M(ilab_host_t, log)
M(ilab_host_t, now_ns)

S(ilab_config_entry_t)
M(ilab_config_entry_t, key)
M(ilab_config_entry_t, value)

S(ilab_model_info_t)
M(ilab_model_info_t, struct_size)
M(ilab_model_info_t, vocab_size)
M(ilab_model_info_t, bos_id)
M(ilab_model_info_t, eos_id)
M(ilab_model_info_t, max_context)
M(ilab_model_info_t, name)
M(ilab_model_info_t, digest)

S(ilab_batch_item_t)
M(ilab_batch_item_t, struct_size)
M(ilab_batch_item_t, seq)
M(ilab_batch_item_t, tokens)
M(ilab_batch_item_t, n_tokens)
M(ilab_batch_item_t, flags)
M(ilab_batch_item_t, logits)

S(ilab_backend_api_t)
M(ilab_backend_api_t, struct_size)
M(ilab_backend_api_t, probe)
M(ilab_backend_api_t, create)
M(ilab_backend_api_t, destroy)
M(ilab_backend_api_t, last_error)
M(ilab_backend_api_t, model_info)
M(ilab_backend_api_t, tokenize)
M(ilab_backend_api_t, detokenize)
M(ilab_backend_api_t, token_piece)
M(ilab_backend_api_t, seq_create)
M(ilab_backend_api_t, seq_free)
M(ilab_backend_api_t, seq_fork)
M(ilab_backend_api_t, seq_truncate)
M(ilab_backend_api_t, seq_length)
M(ilab_backend_api_t, eval)
M(ilab_backend_api_t, generate)
M(ilab_backend_api_t, cancel)
M(ilab_backend_api_t, cache_stats)
M(ilab_backend_api_t, eog_ids)
M(ilab_backend_api_t, chat_template)

S(ilab_cache_stats_t)
M(ilab_cache_stats_t, struct_size)
M(ilab_cache_stats_t, block_size)
M(ilab_cache_stats_t, total_positions)
M(ilab_cache_stats_t, free_positions)

S(ilab_sampling_t)
M(ilab_sampling_t, struct_size)
M(ilab_sampling_t, temperature)
M(ilab_sampling_t, top_k)
M(ilab_sampling_t, top_p)
M(ilab_sampling_t, min_p)
M(ilab_sampling_t, repetition_penalty)
M(ilab_sampling_t, seed)
M(ilab_sampling_t, presence_penalty)
M(ilab_sampling_t, frequency_penalty)

S(ilab_generate_request_t)
M(ilab_generate_request_t, struct_size)
M(ilab_generate_request_t, request_id)
M(ilab_generate_request_t, prompt_tokens)
M(ilab_generate_request_t, n_prompt_tokens)
M(ilab_generate_request_t, sampling)
M(ilab_generate_request_t, max_tokens)
M(ilab_generate_request_t, stop)
M(ilab_generate_request_t, n_stop)
M(ilab_generate_request_t, stop_token_ids)
M(ilab_generate_request_t, n_stop_token_ids)
M(ilab_generate_request_t, ignore_eos)
M(ilab_generate_request_t, top_logprobs)

S(ilab_logprob_t)
M(ilab_logprob_t, token)
M(ilab_logprob_t, logprob)

S(ilab_event_t)
M(ilab_event_t, struct_size)
M(ilab_event_t, type)
M(ilab_event_t, request_id)
M(ilab_event_t, token)
M(ilab_event_t, text)
M(ilab_event_t, text_len)
M(ilab_event_t, logprob)
M(ilab_event_t, top_logprobs)
M(ilab_event_t, n_top_logprobs)
M(ilab_event_t, finish_reason)
M(ilab_event_t, prompt_tokens)
M(ilab_event_t, completion_tokens)
M(ilab_event_t, status)
M(ilab_event_t, message)

#undef S
#undef M
#undef V
