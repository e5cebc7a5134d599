/* DIF-1 across one plugin's configurations (config_digest.c). */
#ifndef ILAB_CONFORMANCE_CONFIG_DIGEST_H
#define ILAB_CONFORMANCE_CONFIG_DIGEST_H

#include "suites.h"

/* Fingerprints instance `b` (created with `what`, e.g. "seed=2") and
 * compares it with every earlier one of the same digest; the first
 * disagreement goes into `fail` (left alone when already set). */
void conf_digest_check(conf_env *env, ilab_backend_t *b, const char *what, char *fail, size_t cap);

/* Pairs of instances with the same digest compared so far. */
int conf_digest_pairs(void);

#endif
