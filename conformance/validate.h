/* The validation layer: a backend table that wraps the plugin's own, so
 * that every call any test makes is checked against the contract's
 * universal rules (docs/conformance.md, "The validation layer"), whichever
 * test made it. A broken rule is recorded against its clause, with the call
 * and the test that made it; the validation.<CLAUSE>.every_call tests at the
 * end of the table report them.
 *
 * The worker installs it when it loads a plugin (env.c); the supervisor
 * keeps what each worker reported, so a worker started after a crash still
 * knows what earlier ones saw (forked workers inherit the record). */
#ifndef ILAB_CONFORMANCE_VALIDATE_H
#define ILAB_CONFORMANCE_VALIDATE_H

#include <stdbool.h>
#include <stddef.h>

#include "inferlab/inferlab.h"
#include "loader/manifest.h"
#include "suite.h"

/* The wrapped table for `real`; `real` itself when a table is already
 * wrapped (one plugin at a time: DIF-1's pair runs unwrapped). */
const ilab_backend_api_t *conf_validate_wrap(const ilab_backend_api_t *real, const ilab_manifest *m);
/* The plugin's own table behind `t` (t itself when it is not the wrapper). */
const ilab_backend_api_t *conf_validate_unwrapped(const ilab_backend_api_t *t);
/* Calls went around the layer (conf_validate_unwrapped): forget what they
 * may have changed — each instance's message and each sequence's length. */
void conf_validate_resync(void);
/* The plugin is unloaded: forget its table and instances. */
void conf_validate_unwrap(const ilab_backend_api_t *wrapped);
/* The test now running (named in violations); NULL between tests. */
void conf_validate_set_test(const char *id);
/* Where the worker reports ("violation", "CLAUSE text") and ("validated",
 * "CLAUSE"); NULL for none. */
void conf_validate_set_reporter(void (*fn)(void *ctx, const char *key, const char *value), void *ctx);
/* Another caller (the host engine) also calls this instance behind the
 * layer: checks that need to see every call on it are off from now on. */
void conf_validate_foreign(const ilab_backend_t *be);

/* Supervisor side: a new plugin; a line a worker reported. */
void conf_validate_reset(void);
void conf_validate_note(const char *key, const char *value);

/* The verdict of one clause over every call made so far for this plugin:
 * FAIL naming the first violation, SKIP when no call was checked for it. */
conf_result conf_validate_verdict(const char *clause, char *msg, size_t cap);

/* Counters for the lifetime programs (validate_core.c): calls checked. */
unsigned long conf_validate_calls(void);

#endif
