/* The supervisor side of inferlab-conformance: which plugins, which tests,
 * how the results came back, and the report writers. Nothing here loads
 * plugin code; workers (worker.c) do, in child processes. */
#ifndef ILAB_CONFORMANCE_HARNESS_H
#define ILAB_CONFORMANCE_HARNESS_H

#include <stdbool.h>
#include <stdio.h>

#include "suite.h"

#define CONF_VERSION "0.1.0"

typedef struct conf_outcome {
    bool done;
    conf_result result;
    double duration_ms;
    char message[CONF_MSG_CAP];
} conf_outcome;

typedef struct conf_plugin_report {
    char *path;
    char name[128];       /* manifest name, or the file's stem when not loaded */
    char abi[32];         /* "1.0" as the plugin declares it; "" when unknown */
    char version[64];     /* the manifest's version; "" when unknown */
    char sha256[65];      /* of the .so file */
    char digest[96];      /* model digest from model_info(), "" when unknown */
    bool unavailable;
    char unavailable_reason[512];
    conf_outcome *out;    /* one per selected test */
    conf_result result;   /* worst test; SKIP when unavailable and nothing failed */
    char reason[CONF_MSG_CAP];
    double seconds;
} conf_plugin_report;

typedef enum conf_format { CONF_HUMAN, CONF_TAP, CONF_JUNIT, CONF_JSON, CONF_HTML } conf_format;

typedef struct conf_run {
    const conf_test **tests; /* selected, in run order */
    size_t n_tests;
    conf_plugin_report *plugins;
    size_t n_plugins;
    conf_options opt;        /* shared options (required is per plugin) */
    char **require;          /* --require names */
    size_t n_require;
    bool in_process;
    double seconds;
    /* for rerun command lines */
    const char *argv0;
    const char *rerun_extra; /* "--timeout 5 --set a.b=c ..." */
} conf_run;

/* One worker line sink; worker.c writes the pipe protocol through it. */
typedef struct conf_sink {
    void (*begin)(void *ctx, size_t idx);
    void (*end)(void *ctx, size_t idx, conf_result r, double ms, const char *msg);
    void (*stage)(void *ctx, conf_stage st);
    void (*info)(void *ctx, const char *key, const char *value);
    void *ctx;
} conf_sink;

/* Run tests[start..] on one plugin in this process, reporting through sink. */
void conf_worker_run(const char *path, const conf_options *opt, const conf_test *const *tests,
                     size_t n_tests, size_t start, const char *const *dead_stage_test,
                     const conf_sink *sink, bool release_at_end);

/* A sink writing the line protocol to fd (the worker end of the pipe). */
void conf_sink_pipe(conf_sink *sink, int fd);

/* Run every plugin's tests (workers or in-process), then DIF-1 pairs. */
void conf_supervise(conf_run *run);

/* Options for plugin i (the --require flag resolved by name). */
void conf_plugin_options(const conf_run *run, const conf_plugin_report *p, conf_options *out);

/* Report writers; each returns 0 or -1 on a write error. */
int conf_write_human(const conf_run *run, FILE *f);
int conf_write_tap(const conf_run *run, FILE *f);
int conf_write_junit(const conf_run *run, FILE *f);
int conf_write_json(const conf_run *run, FILE *f);
int conf_write_html(const conf_run *run, FILE *f); /* report_html.c */

/* Counters over a run. */
typedef struct conf_counts {
    size_t by_result[CONF_RESULT_COUNT];
    size_t total;
} conf_counts;
void conf_count_plugin(const conf_run *run, const conf_plugin_report *p, conf_counts *c);
void conf_count_run(const conf_run *run, conf_counts *c);
/* "area" of an id: the text before the first '.'. */
void conf_test_area(const char *id, char *area, size_t cap);
/* Replace control characters and invalid UTF-8 so any writer can embed it. */
void conf_sanitize(char *s);

/* SHA-256 of a file as lower-case hex; false when unreadable. */
bool conf_sha256_file(const char *path, char hex[65]);

#endif
