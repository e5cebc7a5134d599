/* The domain table (domains.c): every numeric or enumerated parameter of
 * the contract with its declared domain, and the values drawn from it for
 * each call that takes the parameter — its boundaries, seeded random
 * values inside, and values just outside, which must be refused. The same
 * table is printed in docs/conformance.md ("Parameter domains"). */
#ifndef ILAB_CONFORMANCE_DOMAINS_H
#define ILAB_CONFORMANCE_DOMAINS_H

#include <stdbool.h>
#include <stdint.h>

#include "../suite.h"

typedef enum conf_dom_id {
    CONF_DOM_BATCH,        /* eval() n_items */
    CONF_DOM_TOP_LOGPROBS, /* request top_logprobs */
    CONF_DOM_SEED,         /* sampling seed */
    CONF_DOM_TEMPERATURE,  /* sampling temperature */
    CONF_DOM_TOP_K,        /* sampling top_k */
    CONF_DOM_TEXT_BYTES,   /* tokenize() input length */
    CONF_DOM_STOP_BYTES,   /* one stop string's length */
    CONF_DOM_TOK_FLAGS,    /* tokenize() flags */
    CONF_DOM_TOP_P,        /* sampling top_p, (0, 1] */
    CONF_DOM_MIN_P,        /* sampling min_p, [0, 1] */
    CONF_DOM_REPETITION,   /* sampling repetition_penalty, (0, FLT_MAX] */
    CONF_DOM_PRESENCE,     /* sampling presence_penalty, [-2, 2] */
    CONF_DOM_FREQUENCY,    /* sampling frequency_penalty, [-2, 2] */
    CONF_DOM_COUNT
} conf_dom_id;

typedef struct conf_dom_value {
    uint64_t u;   /* integer domains */
    double f;     /* float domains (a float's value: the API takes floats) */
    bool inside;  /* false: outside the domain, the call must refuse it */
    bool boundary;
} conf_dom_value;

#define CONF_DOM_MAX_VALUES 32
/* The values of one domain for this plugin: boundaries first, then
 * `n_random` seeded values inside, then the values just outside. */
size_t conf_dom_draw(conf_dom_id id, const conf_env *env, uint64_t seed, size_t n_random,
                     conf_dom_value *out);
const char *conf_dom_name(conf_dom_id id);

#endif
