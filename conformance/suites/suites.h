/* Test bodies, one file per area; the table (table.c) lists them in run order. */
#ifndef ILAB_CONFORMANCE_SUITES_H
#define ILAB_CONFORMANCE_SUITES_H

#include <stdio.h>

#include "../suite.h"

conf_result conf_abi4_rtld_now(conf_env *env, char *msg, size_t cap);
conf_result conf_abi1_bootstrap(conf_env *env, char *msg, size_t cap);
conf_result conf_abi2_version(conf_env *env, char *msg, size_t cap);
conf_result conf_abi5_manifest(conf_env *env, char *msg, size_t cap);
conf_result conf_prb1_answers(conf_env *env, char *msg, size_t cap);
conf_result conf_abi3_size_prefixed(conf_env *env, char *msg, size_t cap);
conf_result conf_abi6_truthful(conf_env *env, char *msg, size_t cap);
/* True when the plugin's own backend table leaves the member at `offset`
 * NULL or ends before it: the host's shim answers for it, with no message
 * of the plugin's (ADR 0022). */
bool conf_member_absent(const conf_env *env, size_t offset);
conf_result conf_abi7_create_destroy(conf_env *env, char *msg, size_t cap);
conf_result conf_prb2_refuses(conf_env *env, char *msg, size_t cap);
conf_result conf_abi1_one_export(conf_env *env, char *msg, size_t cap);
conf_result conf_abi4_weak_resolved(conf_env *env, char *msg, size_t cap);
conf_result conf_abi3_model_info_sizes(conf_env *env, char *msg, size_t cap);
conf_result conf_abi3_item_sizes(conf_env *env, char *msg, size_t cap);
conf_result conf_abi3_host_table_sizes(conf_env *env, char *msg, size_t cap);
conf_result conf_abi6_manifest_matches_model(conf_env *env, char *msg, size_t cap);
conf_result conf_prb1_repeated(conf_env *env, char *msg, size_t cap);
conf_result conf_err2_valid_noops(conf_env *env, char *msg, size_t cap);
conf_result conf_err3_null_sweep(conf_env *env, char *msg, size_t cap);
conf_result conf_err3_eval_edges(conf_env *env, char *msg, size_t cap);
conf_result conf_log3_every_batch_size(conf_env *env, char *msg, size_t cap);
conf_result conf_tok9_specials(conf_env *env, char *msg, size_t cap);
conf_result conf_err5_bad_config(conf_env *env, char *msg, size_t cap);
conf_result conf_log5_random_rows(conf_env *env, char *msg, size_t cap);
conf_result conf_cch9_random_lengths(conf_env *env, char *msg, size_t cap);
/* Run one request (suites/stream_run.c): FAIL with the status in msg when
 * it neither finished nor was cancelled; on any non-PASS `g` is freed. */
conf_result conf_stream_run(conf_env *env, const conf_gen_params *p, conf_gen *g, char *msg, size_t cap);
/* The greedy request most STR checks vary: `n` prompt tokens drawn from
 * `seed` into `prompt`, temperature 0, EOS ignored, `max_tokens`. */
void conf_greedy_request(const conf_env *env, uint64_t seed, int32_t *prompt, size_t n, int32_t max_tokens,
                         conf_gen_params *p);
/* ...and its stream, run by conf_stream_run; `p` keeps the request for
 * the variations. */
conf_result conf_greedy_stream(conf_env *env, uint64_t seed, int32_t *prompt, size_t n, int32_t max_tokens,
                               conf_gen_params *p, conf_gen *g, char *msg, size_t cap);
conf_result conf_str_sweep(conf_env *env, char *msg, size_t cap);
conf_result conf_str2_held_back(conf_env *env, char *msg, size_t cap);
conf_result conf_str6_stop_set(conf_env *env, char *msg, size_t cap);
conf_result conf_str10_callback_stop(conf_env *env, char *msg, size_t cap);
conf_result conf_str4_cancel_sweep(conf_env *env, char *msg, size_t cap);
conf_result conf_str3_context_full(conf_env *env, char *msg, size_t cap);
conf_result conf_str9_refusals(conf_env *env, char *msg, size_t cap);
conf_result conf_str6_stop_reference(conf_env *env, char *msg, size_t cap);
conf_result conf_str7_held_placement(conf_env *env, char *msg, size_t cap);
conf_result conf_str4_cancel_not_running(conf_env *env, char *msg, size_t cap);
conf_result conf_str10_terminal_return(conf_env *env, char *msg, size_t cap);
conf_result conf_abi3_sampling_tail(conf_env *env, char *msg, size_t cap);
conf_result conf_tok1_vocab(conf_env *env, char *msg, size_t cap);
conf_result conf_tok2_round_trip(conf_env *env, char *msg, size_t cap);
conf_result conf_tok3_deterministic(conf_env *env, char *msg, size_t cap);
conf_result conf_tok4_pieces(conf_env *env, char *msg, size_t cap);
conf_result conf_tok5_invalid(conf_env *env, char *msg, size_t cap);
conf_result conf_tok6_out_of_range(conf_env *env, char *msg, size_t cap);
conf_result conf_tok7_buffer(conf_env *env, char *msg, size_t cap);
conf_result conf_tok2_sweep(conf_env *env, char *msg, size_t cap);
conf_result conf_tok3_flags(conf_env *env, char *msg, size_t cap);
conf_result conf_tok5_sweep(conf_env *env, char *msg, size_t cap);
conf_result conf_tok6_pieces_args(conf_env *env, char *msg, size_t cap);
conf_result conf_tok11_parse_special(conf_env *env, char *msg, size_t cap);
conf_result conf_tok12_eog_ids(conf_env *env, char *msg, size_t cap);
conf_result conf_tok13_chat_template(conf_env *env, char *msg, size_t cap);
conf_result conf_tok7_sweep(conf_env *env, char *msg, size_t cap);
conf_result conf_tok4_whole_runs(conf_env *env, char *msg, size_t cap);
conf_result conf_tok10_valid_utf8(conf_env *env, char *msg, size_t cap);
conf_result conf_err1_last_error_sweep(conf_env *env, char *msg, size_t cap);
conf_result conf_log1_finite(conf_env *env, char *msg, size_t cap);
conf_result conf_log2_identical(conf_env *env, char *msg, size_t cap);
conf_result conf_log3_batch(conf_env *env, char *msg, size_t cap);
conf_result conf_log4_topk(conf_env *env, char *msg, size_t cap);
conf_result conf_cch1_incremental(conf_env *env, char *msg, size_t cap);
conf_result conf_cch_random_decode(conf_env *env, char *msg, size_t cap);
conf_result conf_cch_random_chunks(conf_env *env, char *msg, size_t cap);
conf_result conf_cch_random_fork(conf_env *env, char *msg, size_t cap);
conf_result conf_cch_random_truncate(conf_env *env, char *msg, size_t cap);
conf_result conf_cch_random_overflow(conf_env *env, char *msg, size_t cap);
conf_result conf_cch_random_lifecycle(conf_env *env, char *msg, size_t cap);
conf_result conf_cch_random_batched(conf_env *env, char *msg, size_t cap);
conf_result conf_cch2_chunked(conf_env *env, char *msg, size_t cap);
conf_result conf_cch3_fork(conf_env *env, char *msg, size_t cap);
conf_result conf_cch4_truncate(conf_env *env, char *msg, size_t cap);
conf_result conf_cch5_overflow(conf_env *env, char *msg, size_t cap);
conf_result conf_cch6_free(conf_env *env, char *msg, size_t cap);
conf_result conf_cch7_interleaved(conf_env *env, char *msg, size_t cap);
conf_result conf_str1_grammar(conf_env *env, char *msg, size_t cap);
conf_result conf_str2_text(conf_env *env, char *msg, size_t cap);
conf_result conf_str3_finish(conf_env *env, char *msg, size_t cap);
conf_result conf_str4_cancel(conf_env *env, char *msg, size_t cap);
conf_result conf_str5_usage(conf_env *env, char *msg, size_t cap);
conf_result conf_str6_stop(conf_env *env, char *msg, size_t cap);
conf_result conf_smp1_greedy(conf_env *env, char *msg, size_t cap);
conf_result conf_smp2_seed(conf_env *env, char *msg, size_t cap);
conf_result conf_smp3_filters(conf_env *env, char *msg, size_t cap);
conf_result conf_smp3_ties(conf_env *env, char *msg, size_t cap);
conf_result conf_smp4_distribution(conf_env *env, char *msg, size_t cap);
conf_result conf_smp5_order(conf_env *env, char *msg, size_t cap);
conf_result conf_smp1_greedy_penalties(conf_env *env, char *msg, size_t cap);
conf_result conf_smp5_reference(conf_env *env, char *msg, size_t cap);
conf_result conf_smp6_raw_logprob(conf_env *env, char *msg, size_t cap);
conf_result conf_smp7_penalties(conf_env *env, char *msg, size_t cap);
conf_result conf_err1_closed(conf_env *env, char *msg, size_t cap);
conf_result conf_err2_undeclared(conf_env *env, char *msg, size_t cap);
conf_result conf_err3_invalid(conf_env *env, char *msg, size_t cap);
conf_result conf_thr1_concurrent(conf_env *env, char *msg, size_t cap);
conf_result conf_log2_long_history(conf_env *env, char *msg, size_t cap);
conf_result conf_cch6_fork_slope(conf_env *env, char *msg, size_t cap);
conf_result conf_thr1_stress(conf_env *env, char *msg, size_t cap);
conf_result conf_thr2_stress(conf_env *env, char *msg, size_t cap);
conf_result conf_prb1_reason_capacities(conf_env *env, char *msg, size_t cap);
/* config_domain.c: probe() and create() over every configuration key's values */
conf_result conf_cfg_prb1(conf_env *env, char *msg, size_t cap);
conf_result conf_cfg_prb2(conf_env *env, char *msg, size_t cap);
conf_result conf_cfg_prb3(conf_env *env, char *msg, size_t cap);
conf_result conf_cfg_err5(conf_env *env, char *msg, size_t cap);
conf_result conf_cfg_dif1(conf_env *env, char *msg, size_t cap);
conf_result conf_cfg_abi7(conf_env *env, char *msg, size_t cap);
conf_result conf_cfg_tok2(conf_env *env, char *msg, size_t cap);
/* first_failure.c: each refusal as the first failure of a fresh instance */
conf_result conf_log1_random_null_rows(conf_env *env, char *msg, size_t cap);
conf_result conf_ff_err1(conf_env *env, char *msg, size_t cap);
conf_result conf_ff_err4(conf_env *env, char *msg, size_t cap);
conf_result conf_ff_cch4(conf_env *env, char *msg, size_t cap);
conf_result conf_ff_cch6(conf_env *env, char *msg, size_t cap);
conf_result conf_ff_cch5(conf_env *env, char *msg, size_t cap);
conf_result conf_ff_log6(conf_env *env, char *msg, size_t cap);
conf_result conf_ff_tok6(conf_env *env, char *msg, size_t cap);
conf_result conf_ff_tok8(conf_env *env, char *msg, size_t cap);
conf_result conf_ff_err3(conf_env *env, char *msg, size_t cap);
conf_result conf_ff_str9(conf_env *env, char *msg, size_t cap);
conf_result conf_ff_str3(conf_env *env, char *msg, size_t cap);
conf_result conf_ff_abi3(conf_env *env, char *msg, size_t cap);

conf_result conf_log1_rows_sweep(conf_env *env, char *msg, size_t cap);
conf_result conf_log4_largest(conf_env *env, char *msg, size_t cap);
conf_result conf_cch6_slots_run_out(conf_env *env, char *msg, size_t cap);


/* the validation layer's verdicts (validation.c) */
conf_result conf_val_prb1(conf_env *env, char *msg, size_t cap);
conf_result conf_val_prb2(conf_env *env, char *msg, size_t cap);
conf_result conf_val_abi7(conf_env *env, char *msg, size_t cap);
conf_result conf_val_abi9(conf_env *env, char *msg, size_t cap);
conf_result conf_val_tok3(conf_env *env, char *msg, size_t cap);
conf_result conf_val_tok6(conf_env *env, char *msg, size_t cap);
conf_result conf_val_tok7(conf_env *env, char *msg, size_t cap);
conf_result conf_val_tok8(conf_env *env, char *msg, size_t cap);
conf_result conf_val_tok9(conf_env *env, char *msg, size_t cap);
conf_result conf_val_tok1(conf_env *env, char *msg, size_t cap);
conf_result conf_val_tok12(conf_env *env, char *msg, size_t cap);
conf_result conf_val_tok13(conf_env *env, char *msg, size_t cap);
conf_result conf_val_log1(conf_env *env, char *msg, size_t cap);
conf_result conf_val_log4(conf_env *env, char *msg, size_t cap);
conf_result conf_val_log6(conf_env *env, char *msg, size_t cap);
conf_result conf_val_cch4(conf_env *env, char *msg, size_t cap);
conf_result conf_val_cch5(conf_env *env, char *msg, size_t cap);
conf_result conf_val_cch6(conf_env *env, char *msg, size_t cap);
conf_result conf_val_cch9(conf_env *env, char *msg, size_t cap);
conf_result conf_val_cch10(conf_env *env, char *msg, size_t cap);
conf_result conf_val_str1(conf_env *env, char *msg, size_t cap);
conf_result conf_val_str3(conf_env *env, char *msg, size_t cap);
conf_result conf_val_str5(conf_env *env, char *msg, size_t cap);
conf_result conf_val_str9(conf_env *env, char *msg, size_t cap);
conf_result conf_val_err1(conf_env *env, char *msg, size_t cap);
conf_result conf_val_err4(conf_env *env, char *msg, size_t cap);
conf_result conf_val_err5(conf_env *env, char *msg, size_t cap);


/* parameters swept over the domain table (domains_tok.c, domains_gen.c) */
conf_result conf_dom_batch(conf_env *env, char *msg, size_t cap);
conf_result conf_dom_top_logprobs(conf_env *env, char *msg, size_t cap);
conf_result conf_dom_seed(conf_env *env, char *msg, size_t cap);
conf_result conf_dom_temperature(conf_env *env, char *msg, size_t cap);
conf_result conf_dom_top_k(conf_env *env, char *msg, size_t cap);
conf_result conf_dom_sampling_ranges(conf_env *env, char *msg, size_t cap);
conf_result conf_dom_stop_lengths(conf_env *env, char *msg, size_t cap);
conf_result conf_dom_flags_caps(conf_env *env, char *msg, size_t cap);
conf_result conf_dom_long_texts(conf_env *env, char *msg, size_t cap);


/* lifetimes and isolation (lifetimes.c) */
conf_result conf_life_handle_cycles(conf_env *env, char *msg, size_t cap);
conf_result conf_life_two_instances(conf_env *env, char *msg, size_t cap);
conf_result conf_life_refusals(conf_env *env, char *msg, size_t cap);
conf_result conf_life_random_programs(conf_env *env, char *msg, size_t cap);

#endif
