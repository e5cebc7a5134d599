/* Process-wide metrics in Prometheus text format, named like vLLM's.
 *
 *   inferlab:time_to_first_token_seconds   histogram  submit -> first TOKEN
 *   inferlab:inter_token_latency_seconds   histogram  between TOKEN events
 *   inferlab:e2e_request_latency_seconds   histogram  submit -> terminal event
 *   inferlab:num_requests_running          gauge      sequences in running batches
 *   inferlab:num_requests_waiting          gauge      requests queued
 *   inferlab:kv_cache_usage_ratio          gauge      positions used / capacity, summed
 *                                                     over engines: the backend's figures
 *                                                     (cache.stats) or the host estimate
 *                                                     positions held / (max_running *
 *                                                     max_context)
 *   inferlab:num_preemptions_total         counter    requests preempted for cache room
 *   inferlab:prefix_cache_queries_total    counter    tokens looked up in the prefix cache
 *   inferlab:prefix_cache_hits_total       counter    of them found (prefill tokens saved)
 *   inferlab:prompt_tokens_total           counter
 *   inferlab:generation_tokens_total       counter
 *   inferlab:request_success_total         counter    label finished_reason
 *
 * Every function is thread-safe (one mutex; observations are rare next to a
 * model step). */
#ifndef ILAB_HOST_METRICS_H
#define ILAB_HOST_METRICS_H

#include <stdint.h>

void ilab_metrics_observe_ttft(double seconds);
void ilab_metrics_observe_itl(double seconds);
void ilab_metrics_observe_e2e(double seconds);
void ilab_metrics_add_prompt_tokens(uint64_t n);
void ilab_metrics_add_generation_tokens(uint64_t n);

/* A request ends: its finish reason (ilab_finish_reason) is counted and it
 * leaves the gauge that held it (running_delta, waiting_delta: 0 or -1) in
 * one step, so that a reader never sees it in neither gauge yet uncounted:
 * once nothing runs or waits, the counters are final. */
void ilab_metrics_end_request(int finish_reason, int64_t running_delta, int64_t waiting_delta);

/* Gauges move by deltas so several engines can share them. A request that
 * moves between them (admitted, preempted) moves in one step. */
void ilab_metrics_move_request(int64_t running_delta, int64_t waiting_delta);
void ilab_metrics_add_kv_positions(int64_t delta); /* positions held */
void ilab_metrics_add_kv_capacity(int64_t delta);  /* max_running * max_context per engine */

void ilab_metrics_add_preemptions(uint64_t n);
/* One prefix-cache lookup: `queried` tokens asked for, `hit` of them found. */
void ilab_metrics_add_prefix_cache(uint64_t queried, uint64_t hit);

/* The whole exposition as Prometheus text (version 0.0.4), in a malloc'd,
 * NUL-terminated string the caller frees; NULL on OOM. For GET /metrics. */
char *ilab_metrics_render(void);

/* Zero everything (tests). */
void ilab_metrics_reset(void);

#endif
