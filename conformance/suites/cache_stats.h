/* CCH-10 and its ERR-2 case (suites/cache_stats.c): cache_stats(), the
 * capability cache.stats of ABI 1.1. */
#ifndef ILAB_CONFORMANCE_CACHE_STATS_H
#define ILAB_CONFORMANCE_CACHE_STATS_H

#include "../suite.h"

conf_result conf_cch10_stats_track(conf_env *env, char *msg, size_t cap);
conf_result conf_cch10_capacity_matches_oom(conf_env *env, char *msg, size_t cap);
conf_result conf_err2_cache_stats_undeclared(conf_env *env, char *msg, size_t cap);

#endif
