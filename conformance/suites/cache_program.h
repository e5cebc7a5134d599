/* Random cache programs for the model-based CCH tests (cache_model.c): the
 * operation list, its generator, and its one-line text form, which the
 * failure message prints and --replay reads back. */
#ifndef ILAB_CONFORMANCE_CACHE_PROGRAM_H
#define ILAB_CONFORMANCE_CACHE_PROGRAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CPROG_MAX_OPS 64
#define CPROG_MAX_ITEMS 16
#define CPROG_TEXT_CAP 4096
#define CPROG_PROGRAMS 40    /* at most, per test and run; --deep runs 10x */
#define CPROG_MIN_PROGRAMS 3 /* at least, whatever the time budget */

typedef enum cprog_kind {
    CPROG_CREATE,   /* "c<slot>" */
    CPROG_FREE,     /* "x<slot>" */
    CPROG_FORK,     /* "f<slot>><slot2>" */
    CPROG_TRUNCATE, /* "t<slot>:<n>": keep n % (length + 1) */
    CPROG_EVAL,     /* "e@<tseed>:<slot>=<n>[a],..." (a = ILAB_EVAL_ALL_LOGITS) */
} cprog_kind;

typedef struct cprog_item {
    uint8_t slot;
    bool all_logits;
    int32_t n; /* tokens appended, >= 1 */
} cprog_item;

typedef struct cprog_op {
    cprog_kind kind;
    uint8_t slot, slot2;
    int32_t n;
    uint32_t tseed; /* eval: the tokens are a function of it */
    int n_items;
    cprog_item items[CPROG_MAX_ITEMS];
} cprog_op;

typedef struct cprog {
    int n;
    cprog_op ops[CPROG_MAX_OPS];
} cprog;

/* What the generator emphasises; each CCH test runs its own mix. */
typedef enum cprog_mix {
    CPROG_MIX_DECODE = 1,  /* CCH-1: prefill then long runs of decodes, to max_context */
    CPROG_MIX_CHUNKS,      /* CCH-2: random chunk sizes, ALL_LOGITS rows */
    CPROG_MIX_FORK,        /* CCH-3: forks, forks of forks, edits on every side */
    CPROG_MIX_TRUNCATE,    /* CCH-4: truncate anywhere (0 too) and re-append */
    CPROG_MIX_OVERFLOW,    /* CCH-5: evals that pass max_context at any fill level */
    CPROG_MIX_LIFECYCLE,   /* CCH-6: create/free churn, stale handles */
    CPROG_MIX_BATCHED,     /* CCH-7: random subsets batched, up to max_batch */
} cprog_mix;

typedef struct cprog_shape {
    int32_t max_context;
    int32_t max_batch; /* <= CPROG_MAX_ITEMS */
    int slots;
    cprog_mix mix;
} cprog_shape;

void cprog_generate(const cprog_shape *shape, uint64_t seed, cprog *out);
/* `p` without ops [at, at + count). */
void cprog_remove(const cprog *p, int at, int count, cprog *out);
void cprog_format(const cprog *p, char *buf, size_t cap);
/* false with a message naming the bad token. */
bool cprog_parse(const char *text, cprog *out, char *err, size_t err_cap);

#endif
