/* The conformance suites: the test table, the per-plugin state a worker keeps
 * while running it, and the helpers test bodies share.
 *
 * A test body runs inside a worker process (never in the supervisor), gets
 * the worker's view of one plugin, and returns a result plus a one-line
 * message. It may crash or hang: the supervisor turns that into CRASH or
 * TIMEOUT and carries on with a fresh worker. */
#ifndef ILAB_CONFORMANCE_SUITE_H
#define ILAB_CONFORMANCE_SUITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "inferlab/inferlab.h"
#include "loader/plugin_loader.h"

/* Ordered from best to worst: a plugin's result is its worst test, with SKIP
 * only winning over PASS when the whole plugin was unavailable. */
typedef enum conf_result {
    CONF_PASS = 0,
    CONF_SKIP = 1,
    CONF_FAIL = 2,
    CONF_TIMEOUT = 3,
    CONF_CRASH = 4,
    CONF_ERROR = 5,
} conf_result;
#define CONF_RESULT_COUNT 6

const char *conf_result_name(conf_result r);       /* "PASS" */
const char *conf_result_lower(conf_result r);      /* "pass" */
bool conf_result_parse(const char *s, conf_result *out);

/* What a test needs before its body can run; the runner provides it (or
 * turns the test into SKIP / FAIL with the reason) so bodies stay short. */
typedef enum conf_need {
    CONF_NEED_FILE = 0,     /* only the path: the body dlopens it itself */
    CONF_NEED_PLUGIN = 1,   /* the host loader accepted the plugin */
    CONF_NEED_PROBE = 2,    /* ...and the probe has answered */
    CONF_NEED_INSTANCE = 3, /* ...available, and one instance is created */
    CONF_NEED_DEFERRED = 4, /* run by the supervisor after all plugins (DIF) */
} conf_need;

/* Setup stages a worker goes through; the supervisor remembers a stage that
 * crashed or hung so that later workers do not repeat it. */
typedef enum conf_stage {
    CONF_STAGE_NONE = 0,
    CONF_STAGE_LOAD,
    CONF_STAGE_PROBE,
    CONF_STAGE_CREATE,
    CONF_STAGE_COUNT
} conf_stage;

typedef struct conf_options {
    int timeout_seconds;     /* per test */
    int suite_seconds;       /* per plugin, all tests */
    bool required;           /* --require named this plugin: unavailable is FAIL */
    uint64_t seed;           /* fixed unless --seed; printed in every report */
    bool deep;               /* --deep: 10x the random iterations */
    bool isolated;           /* --isolated: the plugin runs behind the proxy (host/isolation) */
    double random_seconds;   /* time budget of one random test (before --deep) */
    const char *replay;      /* --replay PROGRAM: run exactly this cache program */
    const ilab_config_entry_t *user_config; /* --config / --set entries for this plugin */
    size_t n_user_config;
    const void *settings;    /* ilab_settings * or NULL (resolved per plugin name) */
} conf_options;

/* The worker's state for one plugin. Owned by the worker; built lazily. */
typedef struct conf_env {
    const char *path;
    const conf_options *opt;
    const char *dead_stage_test[CONF_STAGE_COUNT]; /* id of the test a stage died in */
    void (*on_stage)(void *ctx, conf_stage stage); /* tells the supervisor */
    void (*on_info)(void *ctx, const char *key, const char *value);
    void *report_ctx;

    /* CONF_NEED_PLUGIN */
    bool load_tried;
    ilab_plugin *plugin;          /* NULL when refused */
    ilab_status load_status;
    char load_err[1024];
    const ilab_backend_api_t *api;
    const ilab_host_t *host;      /* the host table its probe()/create() get */
    const ilab_manifest *m;
    ilab_config_entry_t *config;  /* validated + defaults; owned */
    size_t n_config;
    char config_err[512];

    /* CONF_NEED_PROBE */
    bool probe_tried;
    ilab_status probe_status;
    double probe_seconds;
    char reason[512];

    /* CONF_NEED_INSTANCE */
    bool create_tried;
    ilab_backend_t *be;
    ilab_status create_status;
    char create_err[512];
    ilab_model_info_t info;

    /* the host engine, for `sampling: host` generation (STR/SMP) */
    void *engine;
} conf_env;

typedef conf_result (*conf_test_fn)(conf_env *env, char *msg, size_t cap);

typedef struct conf_test {
    const char *id;     /* area.CLAUSE.short_name, stable */
    const char *clause; /* "CCH-1" */
    conf_need need;
    conf_test_fn run;
} conf_test;

/* Every test, in run order. */
const conf_test *conf_tests(size_t *n);
const conf_test *conf_test_find(const char *id);

/* Stages a test's body can rely on; returns non-PASS (with msg) when a stage
 * is not there. Used by the runner, and by bodies that need a second instance. */
conf_result conf_env_prepare(conf_env *env, conf_need need, char *msg, size_t cap);
void conf_env_release(conf_env *env);

/* The DIF-1 pair run: both paths loaded and created in this process. */
conf_result conf_diff_pair(const char *path_a, const char *path_b,
                           const conf_options *opt_a, const conf_options *opt_b,
                           char *msg, size_t cap);

/* ---- helpers for test bodies (suites/util.c) ------------------------- */

#define CONF_MSG_CAP 1024
#define CONF_MSG(...) snprintf(msg, cap, __VA_ARGS__)
/* Fail the test with a message when `cond` is false. */
#define CONF_CHECK(cond, ...)                                               \
    do {                                                                    \
        if (!(cond)) {                                                      \
            snprintf(msg, cap, __VA_ARGS__);                                \
            return CONF_FAIL;                                               \
        }                                                                   \
    } while (0)
/* The same for helpers that return bool: false, with the message. */
#define CONF_CHECK_BOOL(cond, ...)                                          \
    do {                                                                    \
        if (!(cond)) {                                                      \
            snprintf(msg, cap, __VA_ARGS__);                                \
            return false;                                                   \
        }                                                                   \
    } while (0)
/* A status must be OK; otherwise FAIL naming the call and the plugin's message. */
#define CONF_CHECK_OK(env, st, what)                                        \
    do {                                                                    \
        ilab_status st__ = (st);                                            \
        if (st__ != ILAB_OK) {                                              \
            conf_fail_status(env, st__, what, msg, cap);                    \
            return CONF_FAIL;                                               \
        }                                                                   \
    } while (0)
#define CONF_SKIP_UNLESS(cond, capability)                                  \
    do {                                                                    \
        if (!(cond)) {                                                      \
            snprintf(msg, cap, "capability %s not declared", capability);   \
            return CONF_SKIP;                                               \
        }                                                                   \
    } while (0)

void conf_fail_status(conf_env *env, ilab_status st, const char *what, char *msg, size_t cap);
/* The instance's last_error() text ("" when none). */
const char *conf_last_error(conf_env *env, char *buf, size_t cap);

/* Tokenize `s` without special tokens; returns a malloc'ed array or NULL
 * (message in msg). */
int32_t *conf_tokenize(conf_env *env, const char *s, size_t *n, char *msg, size_t cap);
/* Detokenize into a malloc'ed NUL-terminated string or NULL. */
char *conf_detokenize(conf_env *env, const int32_t *t, size_t n, size_t *len,
                      char *msg, size_t cap);
/* The output text (docs/contract.md, "output text") of the emitted tokens
 * t[0..n) after the token `prev` (the prompt's last, or -1): token_piece
 * over each with the one before it. A malloc'ed NUL-terminated string, or
 * NULL with the failing call in msg. */
char *conf_output_text(conf_env *env, int32_t prev, const int32_t *t, size_t n, size_t *len,
                       char *msg, size_t cap);

/* Sequences and logits. */
ilab_status conf_eval1(conf_env *env, ilab_seq_t seq, const int32_t *tokens, int32_t n,
                       uint32_t flags, float *logits);
/* Fresh sequence fed `tokens` in one call; logits of the last position. */
ilab_status conf_fresh_logits(conf_env *env, const int32_t *tokens, int32_t n, float *logits);
/* Element-wise |a-b| <= 1e-4 + 1e-4|b| and same argmax; on mismatch writes
 * where into msg and returns false. */
bool conf_logits_close(const float *a, const float *b, int32_t n, const char *what,
                       char *msg, size_t cap);
int32_t conf_argmax(const float *v, int32_t n);
/* log_softmax of one row of v logits into lp (double, max-shifted). */
void conf_log_softmax(const float *row, int32_t v, double *lp);
/* splitmix64: a fixed, documented generator, so a seed names one input. */
uint64_t conf_splitmix64(uint64_t *s);
/* Guarded logits buffers (logit_guard.c): room for n_floats with canary
 * guards before and after, every float a canary until written. The check
 * fails, naming `what`, when a float outside [0, n_written) changed or one
 * inside is not finite (or was never written). */
float *conf_guarded_alloc(size_t n_floats);
bool conf_guarded_check(const float *p, size_t n_written, const char *what, char *msg, size_t cap);
void conf_guarded_free(float *p);
/* A deterministic prompt of `n` valid ids (avoids BOS/EOS), from the seed. */
void conf_prompt_tokens(const conf_env *env, uint64_t seed, int32_t *out, int32_t n);
/* The worker's configuration with `key` set to `value` (added when absent):
 * a calloc'ed array of borrowed strings (free() it), *n entries; NULL when
 * out of memory. */
ilab_config_entry_t *conf_config_with(const conf_env *env, const char *key, const char *value, size_t *n);
/* The plugin's usable context (manifest max_context, else model_info). */
int32_t conf_max_context(const conf_env *env);

/* Resident set size of this process, bytes (from /proc/self/statm). */
size_t conf_rss_bytes(void);
/* Live heap bytes of this process (allocator statistics, not RSS): exact
 * enough to see a leak of a few bytes per cycle. */
size_t conf_heap_bytes(void);
/* The exact count of live heap bytes kept by this executable's malloc
 * (heap_counter.c); false when a sanitizer owns malloc. */
bool conf_heap_counter_exact(size_t *out);
/* Leaks by slope: run `cycle` warmup + cycles times and measure the live
 * heap over the two halves after the warm-up; a growth of at least
 * CONF_LEAK_BYTES_PER_CYCLE per cycle in both halves fails, naming `what`
 * (e.g. "create/destroy cycle") and the bytes per cycle. A cycle returning
 * false failed on its own (message in msg). Returns true on PASS. */
/* One byte: correct plugins measure exactly +0.0 (normal and ASan builds);
 * 8 let a fork leak of 13 requested bytes every other cycle pass under ASan,
 * whose counter reports requested bytes, not chunk sizes. */
#define CONF_LEAK_BYTES_PER_CYCLE 1.0
bool conf_leak_slope(conf_env *env, const char *what, int warmup, int cycles,
                     bool (*cycle)(conf_env *env, int i, void *ctx, char *msg, size_t cap),
                     void *ctx, conf_result *result, char *msg, size_t cap);
double conf_now_seconds(void);
double conf_cpu_seconds(void); /* CPU time of this process and its child processes */

/* ---- generation as the host does it (suites/generate.c) --------------- */

typedef struct conf_gen_params {
    const int32_t *prompt;
    size_t n_prompt;
    ilab_sampling_t sampling;
    int32_t max_tokens;
    const char *const *stop;
    size_t n_stop;
    const int32_t *stop_token_ids;
    size_t n_stop_token_ids;
    bool ignore_eos;
    int32_t top_logprobs;
    int cancel_after_tokens;   /* > 0: the callback returns nonzero at this TOKEN */
    int cancel_thread_after;   /* > 0: another thread cancels after this many TOKENs */
    bool nonzero_on_terminal;  /* the callback returns nonzero for FINISH and ERROR (STR-10) */
    uint64_t request_id;       /* `sampling: backend`: this id; 0 for a fresh one */
} conf_gen_params;

#define CONF_GEN_TOPK 8
typedef struct conf_gen {
    int32_t *tokens;          /* TOKEN ids, in order (malloc'ed) */
    float *logprob;           /* each TOKEN event's logprob (SMP-6) */
    size_t n_tokens;
    float *top_lp;            /* CONF_GEN_TOPK per token, -INFINITY padded */
    int32_t *top_id;
    uint32_t *n_top;
    char *text;               /* concatenated TOKEN text (malloc'ed, NUL-terminated) */
    size_t text_len;
    int n_terminal;           /* FINISH + ERROR events seen */
    int after_terminal;       /* events after the first terminal */
    int bad_type;             /* events with an unknown type */
    int wrong_id;             /* events whose request_id is not the request's (generate() only) */
    bool split_utf8;          /* a TOKEN text ended inside a code point */
    ilab_event_type terminal;
    ilab_finish_reason finish_reason;
    ilab_status status;       /* returned by generate / the ERROR event */
    char error[512];
    uint32_t prompt_tokens, completion_tokens;
    size_t tokens_at_cancel;  /* TOKEN events seen when the other thread's cancel() returned */
    size_t finish_text_len;   /* bytes the FINISH event carried (held back until the end) */
    ilab_status returned;     /* what generate() returned (`sampling: backend`) */
} conf_gen;

/* Run one request: api->generate for `sampling: backend`, the host engine for
 * `sampling: host`. Returns CONF_PASS when the request ran (whatever its
 * events), CONF_ERROR/CONF_FAIL with msg when it could not be started. */
conf_result conf_generate(conf_env *env, const conf_gen_params *p, conf_gen *out,
                          char *msg, size_t cap);
void conf_gen_free(conf_gen *g);
/* Destroy the host engine conf_generate made for `sampling: host` (the next
 * request makes a new one): its scheduler thread allocates on its own time,
 * so tests that count heap bytes release it first. */
void conf_engine_release(conf_env *env);
/* The bytes end inside a UTF-8 code point (its remaining bytes could still
 * come), by RFC 3629's table. */
bool conf_utf8_ends_inside(const char *s, size_t n);
void conf_gen_params_default(conf_gen_params *p, const int32_t *prompt, size_t n);

/* The text corpus TOK clauses run over. */
extern const char *const conf_corpus[];
extern const size_t conf_corpus_count;

#endif
