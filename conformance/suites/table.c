/* The test table: every clause of docs/contract.md, in run order. Ids are
 * stable (area.CLAUSE.short_name); reports and CI history key on them.
 *
 * Order matters for isolation: the probe test runs before the first test
 * that needs an instance, so a probe that hangs or crashes is blamed on
 * probe.PRB-1 and not retried by later workers. */
#include <string.h>

#include "suites.h"
#include "cache_stats.h"

#define T(id, clause, need, fn) {id, clause, need, fn}

static const conf_test tests[] = {
    T("abi.ABI-4.rtld_now_local", "ABI-4", CONF_NEED_FILE, conf_abi4_rtld_now),
    T("abi.ABI-1.bootstrap_symbol", "ABI-1", CONF_NEED_FILE, conf_abi1_bootstrap),
    T("abi.ABI-2.version_negotiated", "ABI-2", CONF_NEED_FILE, conf_abi2_version),
    T("abi.ABI-5.manifest_valid", "ABI-5", CONF_NEED_FILE, conf_abi5_manifest),
    T("probe.PRB-1.answers_in_time", "PRB-1", CONF_NEED_PROBE, conf_prb1_answers),
    T("abi.ABI-3.size_prefixed", "ABI-3", CONF_NEED_FILE, conf_abi3_size_prefixed),
    T("abi.ABI-6.manifest_truthful", "ABI-6", CONF_NEED_FILE, conf_abi6_truthful),
    T("abi.ABI-7.create_destroy_cycles", "ABI-7", CONF_NEED_PLUGIN, conf_abi7_create_destroy),
    T("probe.PRB-2.unavailable_refuses", "PRB-2", CONF_NEED_PROBE, conf_prb2_refuses),
    /* static and struct_size sweeps (abi_sweeps.c) */
    T("abi.ABI-8.one_exported_symbol", "ABI-8", CONF_NEED_FILE, conf_abi1_one_export),
    T("abi.ABI-4.weak_symbols_resolve", "ABI-4", CONF_NEED_FILE, conf_abi4_weak_resolved),
    T("probe.PRB-1.reason_on_every_call", "PRB-1", CONF_NEED_PROBE, conf_prb1_repeated),
    T("probe.PRB-1.reason_every_capacity", "PRB-1", CONF_NEED_PROBE, conf_prb1_reason_capacities),
    T("probe.PRB-3.repeatable", "PRB-3", CONF_NEED_PROBE, conf_prb1_repeated),
    /* the configuration's domain (config_domain.c): one sweep, reported per clause */
    T("config.PRB-1.every_configuration", "PRB-1", CONF_NEED_PROBE, conf_cfg_prb1),
    T("config.PRB-2.every_configuration", "PRB-2", CONF_NEED_PROBE, conf_cfg_prb2),
    T("config.PRB-3.every_configuration", "PRB-3", CONF_NEED_PROBE, conf_cfg_prb3),
    T("config.ERR-5.every_configuration", "ERR-5", CONF_NEED_PROBE, conf_cfg_err5),
    T("config.DIF-1.same_digest_same_model", "DIF-1", CONF_NEED_PROBE, conf_cfg_dif1),
    T("config.ABI-7.no_leak_per_configuration", "ABI-7", CONF_NEED_PROBE, conf_cfg_abi7),
    T("config.TOK-2.round_trip_per_configuration", "TOK-2", CONF_NEED_PROBE, conf_cfg_tok2),
    T("abi.ABI-3.host_table_sizes", "ABI-3", CONF_NEED_PROBE, conf_abi3_host_table_sizes),
    T("abi.ABI-3.model_info_every_size", "ABI-3", CONF_NEED_INSTANCE, conf_abi3_model_info_sizes),
    T("abi.ABI-3.batch_item_sizes", "ABI-3", CONF_NEED_INSTANCE, conf_abi3_item_sizes),
    T("abi.ABI-9.max_context_matches", "ABI-9", CONF_NEED_INSTANCE, conf_abi6_manifest_matches_model),

    T("tokens.TOK-1.vocab_and_specials", "TOK-1", CONF_NEED_INSTANCE, conf_tok1_vocab),
    T("tokens.TOK-2.round_trip", "TOK-2", CONF_NEED_INSTANCE, conf_tok2_round_trip),
    T("tokens.TOK-3.deterministic_in_range", "TOK-3", CONF_NEED_INSTANCE, conf_tok3_deterministic),
    T("tokens.TOK-4.pieces_concatenate", "TOK-4", CONF_NEED_INSTANCE, conf_tok4_pieces),
    T("tokens.TOK-5.invalid_utf8_defined", "TOK-5", CONF_NEED_INSTANCE, conf_tok5_invalid),
    T("tokens.TOK-6.out_of_range_id", "TOK-6", CONF_NEED_INSTANCE, conf_tok6_out_of_range),
    T("tokens.TOK-7.buffer_too_small", "TOK-7", CONF_NEED_INSTANCE, conf_tok7_buffer),
    /* sweeps: every byte, flag and capacity; random strings (token_sweeps.c) */
    T("tokens.TOK-2.bytes_and_random_utf8", "TOK-2", CONF_NEED_INSTANCE, conf_tok2_sweep),
    T("tokens.TOK-8.flags", "TOK-8", CONF_NEED_INSTANCE, conf_tok3_flags),
    T("tokens.TOK-5.random_bytes", "TOK-5", CONF_NEED_INSTANCE, conf_tok5_sweep),
    T("tokens.TOK-6.prev_token_range", "TOK-6", CONF_NEED_INSTANCE, conf_tok6_pieces_args),
    T("tokens.TOK-9.specials", "TOK-9", CONF_NEED_INSTANCE, conf_tok9_specials),
    T("tokens.TOK-7.every_capacity", "TOK-7", CONF_NEED_INSTANCE, conf_tok7_sweep),
    /* tokenizer: text (text_tokens.c) */
    T("tokens.TOK-4.whole_token_runs", "TOK-4", CONF_NEED_INSTANCE, conf_tok4_whole_runs),
    T("tokens.TOK-10.text_is_valid_utf8", "TOK-10", CONF_NEED_INSTANCE, conf_tok10_valid_utf8),
    /* capability chat, ABI 1.2 (chat.c) */
    T("tokens.TOK-11.parse_special", "TOK-11", CONF_NEED_INSTANCE, conf_tok11_parse_special),
    T("tokens.TOK-12.eog_ids", "TOK-12", CONF_NEED_INSTANCE, conf_tok12_eog_ids),
    T("tokens.TOK-13.chat_template", "TOK-13", CONF_NEED_INSTANCE, conf_tok13_chat_template),

    T("logits.LOG-1.finite", "LOG-1", CONF_NEED_INSTANCE, conf_log1_finite),
    T("logits.LOG-1.guarded_rows_sweep", "LOG-1", CONF_NEED_INSTANCE, conf_log1_rows_sweep),
    T("logits.LOG-2.bit_identical", "LOG-2", CONF_NEED_INSTANCE, conf_log2_identical),
    T("logits.LOG-3.batch_equals_alone", "LOG-3", CONF_NEED_INSTANCE, conf_log3_batch),
    T("logits.LOG-3.every_batch_size", "LOG-3", CONF_NEED_INSTANCE, conf_log3_every_batch_size),
    T("logits.LOG-4.topk_logprobs", "LOG-4", CONF_NEED_INSTANCE, conf_log4_topk),
    T("logits.LOG-4.listed_are_largest", "LOG-4", CONF_NEED_INSTANCE, conf_log4_largest),

    T("cache.CCH-1.incremental_equals_full", "CCH-1", CONF_NEED_INSTANCE, conf_cch1_incremental),
    T("cache.CCH-2.chunked_prefill", "CCH-2", CONF_NEED_INSTANCE, conf_cch2_chunked),
    T("cache.CCH-3.fork_isolated", "CCH-3", CONF_NEED_INSTANCE, conf_cch3_fork),
    T("cache.CCH-4.truncate_reappend", "CCH-4", CONF_NEED_INSTANCE, conf_cch4_truncate),
    T("cache.CCH-5.context_overflow", "CCH-5", CONF_NEED_INSTANCE, conf_cch5_overflow),
    T("cache.CCH-6.free_releases_memory", "CCH-6", CONF_NEED_INSTANCE, conf_cch6_free),
    T("cache.CCH-7.interleaved_sequences", "CCH-7", CONF_NEED_INSTANCE, conf_cch7_interleaved),
    /* long runs of cheap calls (long_runs.c) */
    T("logits.LOG-2.after_long_history", "LOG-2", CONF_NEED_INSTANCE, conf_log2_long_history),
    T("cache.CCH-6.fork_free_slope", "CCH-6", CONF_NEED_INSTANCE, conf_cch6_fork_slope),
    T("cache.CCH-6.slots_run_out", "CCH-6", CONF_NEED_INSTANCE, conf_cch6_slots_run_out),
    /* model-based random programs, one op mix per clause (cache_model.c) */
    T("cache.CCH-1.random_decode_programs", "CCH-1", CONF_NEED_INSTANCE, conf_cch_random_decode),
    T("cache.CCH-2.random_chunk_programs", "CCH-2", CONF_NEED_INSTANCE, conf_cch_random_chunks),
    T("logits.LOG-5.random_row_programs", "LOG-5", CONF_NEED_INSTANCE, conf_log5_random_rows),
    T("logits.LOG-1.random_null_logits_programs", "LOG-1", CONF_NEED_INSTANCE, conf_log1_random_null_rows),
    T("cache.CCH-9.random_length_programs", "CCH-9", CONF_NEED_INSTANCE, conf_cch9_random_lengths),
    T("cache.CCH-3.random_fork_programs", "CCH-3", CONF_NEED_INSTANCE, conf_cch_random_fork),
    T("cache.CCH-4.random_truncate_programs", "CCH-4", CONF_NEED_INSTANCE, conf_cch_random_truncate),
    T("cache.CCH-5.random_overflow_programs", "CCH-5", CONF_NEED_INSTANCE, conf_cch_random_overflow),
    T("cache.CCH-6.random_lifecycle_programs", "CCH-6", CONF_NEED_INSTANCE, conf_cch_random_lifecycle),
    T("cache.CCH-7.random_batched_programs", "CCH-7", CONF_NEED_INSTANCE, conf_cch_random_batched),
    /* cache.stats (ABI 1.1; cache_stats.c) */
    T("cache.CCH-10.stats_track_sequences", "CCH-10", CONF_NEED_INSTANCE, conf_cch10_stats_track),
    T("cache.CCH-10.capacity_matches_out_of_memory", "CCH-10", CONF_NEED_INSTANCE, conf_cch10_capacity_matches_oom),
    T("errors.ERR-2.cache_stats_undeclared", "ERR-2", CONF_NEED_INSTANCE, conf_err2_cache_stats_undeclared),

    T("stream.STR-1.event_grammar", "STR-1", CONF_NEED_INSTANCE, conf_str1_grammar),
    T("stream.STR-2.text_matches", "STR-2", CONF_NEED_INSTANCE, conf_str2_text),
    T("stream.STR-3.finish_reasons", "STR-3", CONF_NEED_INSTANCE, conf_str3_finish),
    T("stream.STR-4.cancel", "STR-4", CONF_NEED_INSTANCE, conf_str4_cancel),
    T("stream.STR-5.usage", "STR-5", CONF_NEED_INSTANCE, conf_str5_usage),
    T("stream.STR-6.stop_sequence", "STR-6", CONF_NEED_INSTANCE, conf_str6_stop),
    /* sweeps (stream_sweeps.c) */
    T("stream.STR-2.seeded_streams_text", "STR-2", CONF_NEED_INSTANCE, conf_str_sweep),
    T("stream.STR-5.seeded_streams_usage", "STR-5", CONF_NEED_INSTANCE, conf_str_sweep),
    T("stream.STR-7.seeded_streams_utf8", "STR-7", CONF_NEED_INSTANCE, conf_str_sweep),
    T("stream.STR-8.seeded_streams_stop_ids", "STR-8", CONF_NEED_INSTANCE, conf_str_sweep),
    T("stream.STR-2.held_back_at_the_end", "STR-2", CONF_NEED_INSTANCE, conf_str2_held_back),
    T("stream.STR-6.stop_string_sets", "STR-6", CONF_NEED_INSTANCE, conf_str6_stop_set),
    T("stream.STR-10.callback_stop", "STR-10", CONF_NEED_INSTANCE, conf_str10_callback_stop),
    T("stream.STR-4.cancel_at_random_points", "STR-4", CONF_NEED_INSTANCE, conf_str4_cancel_sweep),
    T("stream.STR-3.context_fills", "STR-3", CONF_NEED_INSTANCE, conf_str3_context_full),
    T("stream.STR-9.refusals_get_one_error", "STR-9", CONF_NEED_INSTANCE, conf_str9_refusals),
    /* against a reference stop-string matcher (stream_stops.c) */
    T("stream.STR-6.stop_sets_reference", "STR-6", CONF_NEED_INSTANCE, conf_str6_stop_reference),
    /* how streams end (stream_endings.c) */
    T("stream.STR-7.held_back_placement", "STR-7", CONF_NEED_INSTANCE, conf_str7_held_placement),
    T("stream.STR-4.cancel_not_running", "STR-4", CONF_NEED_INSTANCE, conf_str4_cancel_not_running),
    T("stream.STR-10.terminal_return_ignored", "STR-10", CONF_NEED_INSTANCE, conf_str10_terminal_return),
    T("abi.ABI-3.sampling_unknown_tail", "ABI-3", CONF_NEED_INSTANCE, conf_abi3_sampling_tail),

    T("sampling.SMP-1.greedy_deterministic", "SMP-1", CONF_NEED_INSTANCE, conf_smp1_greedy),
    T("sampling.SMP-2.same_seed_same_tokens", "SMP-2", CONF_NEED_INSTANCE, conf_smp2_seed),
    T("sampling.SMP-3.filters_equal_greedy", "SMP-3", CONF_NEED_INSTANCE, conf_smp3_filters),
    T("sampling.SMP-3.ties_at_the_maximum", "SMP-3", CONF_NEED_INSTANCE, conf_smp3_ties),
    T("sampling.SMP-4.distribution_matches", "SMP-4", CONF_NEED_INSTANCE, conf_smp4_distribution),
    T("sampling.SMP-5.processor_order", "SMP-5", CONF_NEED_INSTANCE, conf_smp5_order),
    /* against the host sampler on the plugin's own logits (sampling_ref.c) */
    T("sampling.SMP-1.greedy_with_penalties", "SMP-1", CONF_NEED_INSTANCE, conf_smp1_greedy_penalties),
    T("sampling.SMP-5.reference_distribution", "SMP-5", CONF_NEED_INSTANCE, conf_smp5_reference),
    T("sampling.SMP-6.raw_logprobs", "SMP-6", CONF_NEED_INSTANCE, conf_smp6_raw_logprob),
    T("sampling.SMP-7.penalties_honoured_or_refused", "SMP-7", CONF_NEED_INSTANCE, conf_smp7_penalties),

    T("errors.ERR-1.closed_status_messages", "ERR-1", CONF_NEED_INSTANCE, conf_err1_closed),
    T("errors.ERR-4.last_error_every_capacity", "ERR-4", CONF_NEED_INSTANCE, conf_err1_last_error_sweep),
    T("errors.ERR-2.undeclared_fails_closed", "ERR-2", CONF_NEED_INSTANCE, conf_err2_undeclared),
    T("errors.ERR-3.invalid_arguments", "ERR-3", CONF_NEED_INSTANCE, conf_err3_invalid),
    T("errors.ERR-2.valid_arguments_no_ops", "ERR-2", CONF_NEED_INSTANCE, conf_err2_valid_noops),
    T("errors.ERR-3.null_every_pointer", "ERR-3", CONF_NEED_INSTANCE, conf_err3_null_sweep),
    T("cache.CCH-8.later_item_all_or_nothing", "CCH-8", CONF_NEED_INSTANCE, conf_err3_eval_edges),
    T("logits.LOG-6.batch_shape", "LOG-6", CONF_NEED_INSTANCE, conf_err3_eval_edges),
    T("abi.ABI-9.max_batch_accepted", "ABI-9", CONF_NEED_INSTANCE, conf_log3_every_batch_size),
    T("errors.ERR-5.bad_config_values", "ERR-5", CONF_NEED_PLUGIN, conf_err5_bad_config),

    T("threads.THR-1.concurrent_sequences", "THR-1", CONF_NEED_INSTANCE, conf_thr1_concurrent),
    /* N threads x M iterations against serial results (threads_stress.c) */
    T("threads.THR-1.stress_sequences", "THR-1", CONF_NEED_INSTANCE, conf_thr1_stress),
    T("threads.THR-2.stress_shared_calls", "THR-2", CONF_NEED_INSTANCE, conf_thr2_stress),

    /* parameters over their domains (domains.c) */
    T("domains.LOG-6.batch_sizes", "LOG-6", CONF_NEED_INSTANCE, conf_dom_batch),
    T("domains.LOG-4.top_logprobs", "LOG-4", CONF_NEED_INSTANCE, conf_dom_top_logprobs),
    T("domains.SMP-2.seed_bits", "SMP-2", CONF_NEED_INSTANCE, conf_dom_seed),
    T("domains.SMP-5.temperature_range", "SMP-5", CONF_NEED_INSTANCE, conf_dom_temperature),
    T("domains.SMP-5.top_k_edges", "SMP-5", CONF_NEED_INSTANCE, conf_dom_top_k),
    T("domains.SMP-5.sampling_ranges", "SMP-5", CONF_NEED_INSTANCE, conf_dom_sampling_ranges),
    T("domains.STR-6.stop_lengths", "STR-6", CONF_NEED_INSTANCE, conf_dom_stop_lengths),
    T("domains.TOK-7.flags_and_capacities", "TOK-7", CONF_NEED_INSTANCE, conf_dom_flags_caps),
    T("domains.TOK-2.long_texts", "TOK-2", CONF_NEED_INSTANCE, conf_dom_long_texts),

    /* instances and handles over long lives (lifetimes.c) */
    T("lifetime.CCH-6.handles_past_2_16", "CCH-6", CONF_NEED_INSTANCE, conf_life_handle_cycles),
    T("lifetime.ERR-4.two_instances_apart", "ERR-4", CONF_NEED_INSTANCE, conf_life_two_instances),
    T("lifetime.CCH-8.refused_calls_leave_no_trace", "CCH-8", CONF_NEED_INSTANCE, conf_life_refusals),
    T("lifetime.CCH-10.random_instance_programs", "CCH-10", CONF_NEED_INSTANCE, conf_life_random_programs),

    /* the validation layer's verdicts over every call above (validation.c) */
    /* refusals as the first failure of a fresh instance (first_failure.c) */
    T("refusal.ERR-1.first_failure_fresh_instance", "ERR-1", CONF_NEED_INSTANCE, conf_ff_err1),
    T("refusal.ERR-4.first_failure_fresh_instance", "ERR-4", CONF_NEED_INSTANCE, conf_ff_err4),
    T("refusal.CCH-4.first_failure_fresh_instance", "CCH-4", CONF_NEED_INSTANCE, conf_ff_cch4),
    T("refusal.CCH-6.first_failure_fresh_instance", "CCH-6", CONF_NEED_INSTANCE, conf_ff_cch6),
    T("refusal.CCH-5.first_failure_fresh_instance", "CCH-5", CONF_NEED_INSTANCE, conf_ff_cch5),
    T("refusal.LOG-6.first_failure_fresh_instance", "LOG-6", CONF_NEED_INSTANCE, conf_ff_log6),
    T("refusal.TOK-6.first_failure_fresh_instance", "TOK-6", CONF_NEED_INSTANCE, conf_ff_tok6),
    T("refusal.TOK-8.first_failure_fresh_instance", "TOK-8", CONF_NEED_INSTANCE, conf_ff_tok8),
    T("refusal.ERR-3.first_failure_fresh_instance", "ERR-3", CONF_NEED_INSTANCE, conf_ff_err3),
    T("refusal.STR-9.first_failure_fresh_instance", "STR-9", CONF_NEED_INSTANCE, conf_ff_str9),
    T("refusal.STR-3.first_failure_fresh_instance", "STR-3", CONF_NEED_INSTANCE, conf_ff_str3),
    T("refusal.ABI-3.first_failure_fresh_instance", "ABI-3", CONF_NEED_INSTANCE, conf_ff_abi3),
    T("validation.PRB-1.every_call", "PRB-1", CONF_NEED_PLUGIN, conf_val_prb1),
    T("validation.PRB-2.every_call", "PRB-2", CONF_NEED_PLUGIN, conf_val_prb2),
    T("validation.ABI-7.every_call", "ABI-7", CONF_NEED_PLUGIN, conf_val_abi7),
    T("validation.ABI-9.every_call", "ABI-9", CONF_NEED_PLUGIN, conf_val_abi9),
    T("validation.TOK-1.every_call", "TOK-1", CONF_NEED_PLUGIN, conf_val_tok1),
    T("validation.TOK-3.every_call", "TOK-3", CONF_NEED_PLUGIN, conf_val_tok3),
    T("validation.TOK-6.every_call", "TOK-6", CONF_NEED_PLUGIN, conf_val_tok6),
    T("validation.TOK-7.every_call", "TOK-7", CONF_NEED_PLUGIN, conf_val_tok7),
    T("validation.TOK-8.every_call", "TOK-8", CONF_NEED_PLUGIN, conf_val_tok8),
    T("validation.TOK-9.every_call", "TOK-9", CONF_NEED_PLUGIN, conf_val_tok9),
    T("validation.TOK-12.every_call", "TOK-12", CONF_NEED_PLUGIN, conf_val_tok12),
    T("validation.TOK-13.every_call", "TOK-13", CONF_NEED_PLUGIN, conf_val_tok13),
    T("validation.LOG-1.every_call", "LOG-1", CONF_NEED_PLUGIN, conf_val_log1),
    T("validation.LOG-4.every_call", "LOG-4", CONF_NEED_PLUGIN, conf_val_log4),
    T("validation.LOG-6.every_call", "LOG-6", CONF_NEED_PLUGIN, conf_val_log6),
    T("validation.CCH-4.every_call", "CCH-4", CONF_NEED_PLUGIN, conf_val_cch4),
    T("validation.CCH-5.every_call", "CCH-5", CONF_NEED_PLUGIN, conf_val_cch5),
    T("validation.CCH-6.every_call", "CCH-6", CONF_NEED_PLUGIN, conf_val_cch6),
    T("validation.CCH-9.every_call", "CCH-9", CONF_NEED_PLUGIN, conf_val_cch9),
    T("validation.CCH-10.every_call", "CCH-10", CONF_NEED_PLUGIN, conf_val_cch10),
    T("validation.STR-1.every_call", "STR-1", CONF_NEED_PLUGIN, conf_val_str1),
    T("validation.STR-3.every_call", "STR-3", CONF_NEED_PLUGIN, conf_val_str3),
    T("validation.STR-5.every_call", "STR-5", CONF_NEED_PLUGIN, conf_val_str5),
    T("validation.STR-9.every_call", "STR-9", CONF_NEED_PLUGIN, conf_val_str9),
    T("validation.ERR-1.every_call", "ERR-1", CONF_NEED_PLUGIN, conf_val_err1),
    T("validation.ERR-4.every_call", "ERR-4", CONF_NEED_PLUGIN, conf_val_err4),
    T("validation.ERR-5.every_call", "ERR-5", CONF_NEED_PLUGIN, conf_val_err5),

    T("diff.DIF-1.same_model_agree", "DIF-1", CONF_NEED_DEFERRED, NULL),
};

const conf_test *conf_tests(size_t *n)
{
    *n = sizeof tests / sizeof tests[0];
    return tests;
}

const conf_test *conf_test_find(const char *id)
{
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++)
        if (strcmp(tests[i].id, id) == 0)
            return &tests[i];
    return NULL;
}
