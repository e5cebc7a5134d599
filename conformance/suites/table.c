/* The test table: every clause of CONTRACT.md, in run order. Ids are
 * stable (area.CLAUSE.short_name); reports and CI history key on them.
 *
 * Order matters for isolation: the probe test runs before the first test
 * that needs an instance, so a probe that hangs or crashes is blamed on
 * probe.PRB-1 and not retried by later workers. */
#include <string.h>

#include "suites.h"

#define T(id, clause, need, fn) {id, clause, need, fn}

static const conf_test tests[] = {
    T("abi.ABI-4.rtld_now_local", "ABI-4", CONF_NEED_FILE, conf_abi4_rtld_now),
    T("abi.ABI-1.bootstrap_symbol", "ABI-1", CONF_NEED_FILE, conf_abi1_bootstrap),
    T("abi.ABI-2.version_negotiated", "ABI-2", CONF_NEED_FILE, conf_abi2_version),
    T("abi.ABI-5.manifest_valid", "ABI-5", CONF_NEED_FILE, conf_abi5_manifest),
    T("probe.PRB-1.answers_in_time", "PRB-1", CONF_NEED_PROBE, conf_prb1_answers),
    T("abi.ABI-3.size_prefixed", "ABI-3", CONF_NEED_FILE, conf_abi3_size_prefixed),
    T("abi.ABI-6.manifest_truthful", "ABI-6", CONF_NEED_FILE, conf_abi6_truthful),
    T("abi.ABI-7.create_destroy_100", "ABI-7", CONF_NEED_PLUGIN, conf_abi7_create_destroy),
    T("probe.PRB-2.unavailable_refuses", "PRB-2", CONF_NEED_PROBE, conf_prb2_refuses),

    T("tokens.TOK-1.vocab_and_specials", "TOK-1", CONF_NEED_INSTANCE, conf_tok1_vocab),
    T("tokens.TOK-2.round_trip", "TOK-2", CONF_NEED_INSTANCE, conf_tok2_round_trip),
    T("tokens.TOK-3.deterministic_in_range", "TOK-3", CONF_NEED_INSTANCE, conf_tok3_deterministic),
    T("tokens.TOK-4.pieces_concatenate", "TOK-4", CONF_NEED_INSTANCE, conf_tok4_pieces),
    T("tokens.TOK-5.invalid_utf8_defined", "TOK-5", CONF_NEED_INSTANCE, conf_tok5_invalid),
    T("tokens.TOK-6.out_of_range_id", "TOK-6", CONF_NEED_INSTANCE, conf_tok6_out_of_range),
    T("tokens.TOK-7.buffer_too_small", "TOK-7", CONF_NEED_INSTANCE, conf_tok7_buffer),

    T("logits.LOG-1.finite", "LOG-1", CONF_NEED_INSTANCE, conf_log1_finite),
    T("logits.LOG-2.bit_identical", "LOG-2", CONF_NEED_INSTANCE, conf_log2_identical),
    T("logits.LOG-3.batch_equals_alone", "LOG-3", CONF_NEED_INSTANCE, conf_log3_batch),
    T("logits.LOG-4.topk_logprobs", "LOG-4", CONF_NEED_INSTANCE, conf_log4_topk),

    T("cache.CCH-1.incremental_equals_full", "CCH-1", CONF_NEED_INSTANCE, conf_cch1_incremental),
    T("cache.CCH-2.chunked_prefill", "CCH-2", CONF_NEED_INSTANCE, conf_cch2_chunked),
    T("cache.CCH-3.fork_isolated", "CCH-3", CONF_NEED_INSTANCE, conf_cch3_fork),
    T("cache.CCH-4.truncate_reappend", "CCH-4", CONF_NEED_INSTANCE, conf_cch4_truncate),
    T("cache.CCH-5.context_overflow", "CCH-5", CONF_NEED_INSTANCE, conf_cch5_overflow),
    T("cache.CCH-6.free_releases_memory", "CCH-6", CONF_NEED_INSTANCE, conf_cch6_free),
    T("cache.CCH-7.interleaved_sequences", "CCH-7", CONF_NEED_INSTANCE, conf_cch7_interleaved),

    T("stream.STR-1.event_grammar", "STR-1", CONF_NEED_INSTANCE, conf_str1_grammar),
    T("stream.STR-2.text_matches", "STR-2", CONF_NEED_INSTANCE, conf_str2_text),
    T("stream.STR-3.finish_reasons", "STR-3", CONF_NEED_INSTANCE, conf_str3_finish),
    T("stream.STR-4.cancel", "STR-4", CONF_NEED_INSTANCE, conf_str4_cancel),
    T("stream.STR-5.usage", "STR-5", CONF_NEED_INSTANCE, conf_str5_usage),
    T("stream.STR-6.stop_sequence", "STR-6", CONF_NEED_INSTANCE, conf_str6_stop),

    T("sampling.SMP-1.greedy_deterministic", "SMP-1", CONF_NEED_INSTANCE, conf_smp1_greedy),
    T("sampling.SMP-2.same_seed_same_tokens", "SMP-2", CONF_NEED_INSTANCE, conf_smp2_seed),
    T("sampling.SMP-3.filters_equal_greedy", "SMP-3", CONF_NEED_INSTANCE, conf_smp3_filters),
    T("sampling.SMP-4.distribution_matches", "SMP-4", CONF_NEED_INSTANCE, conf_smp4_distribution),
    T("sampling.SMP-5.processor_order", "SMP-5", CONF_NEED_INSTANCE, conf_smp5_order),

    T("errors.ERR-1.closed_status_messages", "ERR-1", CONF_NEED_INSTANCE, conf_err1_closed),
    T("errors.ERR-2.undeclared_fails_closed", "ERR-2", CONF_NEED_INSTANCE, conf_err2_undeclared),
    T("errors.ERR-3.invalid_arguments", "ERR-3", CONF_NEED_INSTANCE, conf_err3_invalid),

    T("threads.THR-1.concurrent_sequences", "THR-1", CONF_NEED_INSTANCE, conf_thr1_concurrent),

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
