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
conf_result conf_abi7_create_destroy(conf_env *env, char *msg, size_t cap);
conf_result conf_prb2_refuses(conf_env *env, char *msg, size_t cap);
conf_result conf_tok1_vocab(conf_env *env, char *msg, size_t cap);
conf_result conf_tok2_round_trip(conf_env *env, char *msg, size_t cap);
conf_result conf_tok3_deterministic(conf_env *env, char *msg, size_t cap);
conf_result conf_tok4_pieces(conf_env *env, char *msg, size_t cap);
conf_result conf_tok5_invalid(conf_env *env, char *msg, size_t cap);
conf_result conf_tok6_out_of_range(conf_env *env, char *msg, size_t cap);
conf_result conf_tok7_buffer(conf_env *env, char *msg, size_t cap);
conf_result conf_log1_finite(conf_env *env, char *msg, size_t cap);
conf_result conf_log2_identical(conf_env *env, char *msg, size_t cap);
conf_result conf_log3_batch(conf_env *env, char *msg, size_t cap);
conf_result conf_log4_topk(conf_env *env, char *msg, size_t cap);
conf_result conf_cch1_incremental(conf_env *env, char *msg, size_t cap);
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
conf_result conf_smp4_distribution(conf_env *env, char *msg, size_t cap);
conf_result conf_smp5_order(conf_env *env, char *msg, size_t cap);
conf_result conf_err1_closed(conf_env *env, char *msg, size_t cap);
conf_result conf_err2_undeclared(conf_env *env, char *msg, size_t cap);
conf_result conf_err3_invalid(conf_env *env, char *msg, size_t cap);
conf_result conf_thr1_concurrent(conf_env *env, char *msg, size_t cap);

#endif
