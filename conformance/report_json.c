/* The JSON report (schema 1, documented in docs/conformance.md), built with
 * jansson. Results are lower case. */
#include <jansson.h>
#include <stdio.h>

#include "harness.h"

int conf_write_json(const conf_run *run, FILE *f)
{
    json_t *root = json_object();
    json_object_set_new(root, "schema", json_integer(1));
    json_object_set_new(root, "harness", json_pack("{s:s, s:I, s:b}", "version", CONF_VERSION,
                                                   "seed", (json_int_t)run->opt.seed,
                                                   "in_process", run->in_process));
    json_t *plugins = json_array();
    conf_result overall = CONF_PASS;
    for (size_t i = 0; i < run->n_plugins; i++) {
        const conf_plugin_report *p = &run->plugins[i];
        json_t *tests = json_array();
        for (size_t t = 0; t < run->n_tests; t++) {
            const conf_outcome *o = &p->out[t];
            json_array_append_new(tests, json_pack("{s:s, s:s, s:s, s:s, s:f}",
                                                   "id", run->tests[t]->id,
                                                   "clause", run->tests[t]->clause,
                                                   "result", conf_result_lower(o->result),
                                                   "message", o->message,
                                                   "duration_ms", o->duration_ms));
        }
        json_t *jp = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:o}",
                               "name", p->name, "path", p->path, "sha256", p->sha256,
                               "abi", p->abi, "version", p->version, "result", conf_result_lower(p->result),
                               "reason", p->reason, "model_digest", p->digest, "tests", tests);
        if (!jp) {
            json_decref(root);
            return -1;
        }
        json_array_append_new(plugins, jp);
        if (p->result >= CONF_FAIL && p->result > overall)
            overall = p->result;
    }
    json_object_set_new(root, "plugins", plugins);
    conf_counts c;
    conf_count_run(run, &c);
    json_t *summary = json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:s, s:f}",
                                "plugins", (json_int_t)run->n_plugins,
                                "tests", (json_int_t)c.total,
                                "pass", (json_int_t)c.by_result[CONF_PASS],
                                "fail", (json_int_t)c.by_result[CONF_FAIL],
                                "skip", (json_int_t)c.by_result[CONF_SKIP],
                                "crash", (json_int_t)c.by_result[CONF_CRASH],
                                "timeout", (json_int_t)c.by_result[CONF_TIMEOUT],
                                "error", (json_int_t)c.by_result[CONF_ERROR],
                                "result", overall >= CONF_FAIL ? "fail" : "pass",
                                "seconds", run->seconds);
    json_object_set_new(root, "summary", summary);
    int rc = json_dumpf(root, f, JSON_INDENT(2)) == 0 ? 0 : -1;
    fputc('\n', f);
    json_decref(root);
    return rc;
}
