/* The HTML report (--format html): one self-contained page, readable
 * without script and without the network -- a summary line, the plugins
 * (version, ABI, SHA-256, timings), a matrix of clauses (rows, grouped by
 * suite) x plugins (columns) with a colour and a symbol per result, and
 * every message below it, each cell linking to its own. Every string that
 * came from a plugin or the command line is escaped: a plugin's name and
 * messages are untrusted text. ADR 0028. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "harness.h"

/* Text for HTML element content and quoted attribute values alike. */
static void esc(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&#39;", f); break;
        default: fputc(*s, f);
        }
    }
}

/* The symbol beside each result's colour (colour alone is not enough). */
static const char *symbol(conf_result r)
{
    switch (r) {
    case CONF_PASS: return "\u2713";    /* check mark */
    case CONF_SKIP: return "\u2013";    /* en dash */
    case CONF_FAIL: return "\u2717";    /* ballot x */
    case CONF_TIMEOUT: return "\u221e"; /* infinity: it never ended (in every font) */
    case CONF_CRASH: return "\u2620";   /* skull */
    case CONF_ERROR: return "!";
    }
    return "?";
}

static const char style[] =
    "body{margin:0;font:14px/1.45 system-ui,sans-serif;color:#1d1d1f;background:#fafafa}"
    "header{background:#23283a;color:#fff;padding:.6em 1em}header h1{font-size:1.15em;margin:0}"
    "main{padding:.5em 1em 2em}section{background:#fff;border:1px solid #d8d8dc;border-radius:6px;"
    "margin:.8em 0;padding:.6em .9em}h2{font-size:1.05em;margin:.2em 0 .5em}"
    ".scroll{overflow-x:auto}table{border-collapse:collapse}"
    "th,td{padding:.25em .5em;border-bottom:1px solid #e3e3e8;text-align:left;vertical-align:top}"
    "th{color:#5f6368;font-weight:600;font-size:.9em}code,.mono{font-family:ui-monospace,monospace;"
    "font-size:.92em}.summary{font-size:1.05em;font-weight:600}"
    ".r{display:inline-block;min-width:1.8em;text-align:center;border-radius:3px;font-weight:700;"
    "text-decoration:none;padding:0 .3em}"
    ".pass{background:#d7f0dd;color:#0f5c28}.skip{background:#eeeeef;color:#5f6368}"
    ".fail{background:#fbd5d2;color:#8c1d18}.timeout{background:#ffe3b0;color:#7a4b00}"
    ".crash{background:#3a0d0a;color:#fff}.error{background:#e9d4f7;color:#5b1f85}"
    "tr.suite th{background:#f3f3f6;color:#1d1d1f}td.cell{text-align:center}"
    ".msg{padding:.35em .5em;border-left:4px solid #d8d8dc;margin:.3em 0}"
    ".msg:target{border-left-color:#f0a500;background:#fff6dd}"
    ".msg pre{white-space:pre-wrap;word-break:break-word;margin:.2em 0 0}"
    "a:focus-visible{outline:3px solid #f0a500}.legend span{margin-right:1em}";

static size_t failed_of(const conf_counts *c)
{
    return c->by_result[CONF_FAIL] + c->by_result[CONF_CRASH] + c->by_result[CONF_TIMEOUT] +
           c->by_result[CONF_ERROR];
}

static void summary(const conf_run *run, FILE *f)
{
    conf_counts c;
    conf_count_run(run, &c);
    fprintf(f, "<p class=\"summary\" id=\"summary\">%s: %zu plugin(s) &times; %zu test(s): "
               "%zu passed, %zu failed, %zu skipped (%zu fail, %zu crash, %zu timeout, "
               "%zu error) in %.1f s</p>\n",
            failed_of(&c) ? "FAIL" : "PASS", run->n_plugins, run->n_tests,
            c.by_result[CONF_PASS], failed_of(&c), c.by_result[CONF_SKIP],
            c.by_result[CONF_FAIL], c.by_result[CONF_CRASH], c.by_result[CONF_TIMEOUT],
            c.by_result[CONF_ERROR], run->seconds);
    fputs("<p class=\"legend\">", f);
    for (int r = 0; r < CONF_RESULT_COUNT; r++)
        fprintf(f, "<span><span class=\"r %s\">%s</span> %s</span>", conf_result_lower(r),
                symbol(r), conf_result_name(r));
    fputs("</p>\n", f);
}

static void plugins_table(const conf_run *run, FILE *f)
{
    fputs("<section><h2>Plugins</h2><div class=\"scroll\"><table id=\"plugins\"><tr><th>#</th>"
          "<th>plugin</th><th>version</th><th>ABI</th><th>result</th><th>pass</th>"
          "<th>fail</th><th>skip</th><th>time</th><th>SHA-256</th><th>file</th>"
          "<th>reason</th></tr>\n", f);
    for (size_t i = 0; i < run->n_plugins; i++) {
        const conf_plugin_report *p = &run->plugins[i];
        conf_counts c = {0};
        conf_count_plugin(run, p, &c);
        fprintf(f, "<tr data-plugin=\"%zu\"><td>P%zu</td><td><code class=\"name\">", i, i + 1);
        esc(f, p->name);
        fputs("</code></td><td>", f);
        esc(f, p->version);
        fputs("</td><td>", f);
        esc(f, p->abi);
        fprintf(f, "</td><td><span class=\"r %s\">%s %s</span></td><td>%zu</td><td>%zu</td>"
                   "<td>%zu</td><td>%.2f s</td><td class=\"mono\">",
                conf_result_lower(p->result), symbol(p->result), conf_result_name(p->result),
                c.by_result[CONF_PASS], failed_of(&c), c.by_result[CONF_SKIP], p->seconds);
        esc(f, p->sha256);
        fputs("</td><td><code>", f);
        esc(f, p->path);
        fputs("</code></td><td>", f);
        esc(f, p->reason);
        fputs("</td></tr>\n", f);
    }
    fputs("</table></div></section>\n", f);
}

/* One row per suite (its counts per plugin), then one per test. */
static void suite_row(const conf_run *run, size_t from, const char *area, FILE *f)
{
    fputs("<tr class=\"suite\"><th>", f);
    esc(f, area);
    fputs("</th>", f);
    for (size_t i = 0; i < run->n_plugins; i++) {
        size_t pass = 0, bad = 0, all = 0;
        for (size_t t = from; t < run->n_tests; t++) {
            char a[64];
            conf_test_area(run->tests[t]->id, a, sizeof a);
            if (strcmp(a, area))
                break;
            conf_result r = run->plugins[i].out[t].result;
            all++;
            pass += r == CONF_PASS;
            bad += r >= CONF_FAIL;
        }
        fprintf(f, "<th class=\"%s\">%zu/%zu</th>", bad ? "fail" : pass == all ? "pass" : "skip",
                pass, all);
    }
    fputs("</tr>\n", f);
}

static void matrix(const conf_run *run, FILE *f)
{
    fputs("<section><h2>Clauses &times; plugins</h2><div class=\"scroll\">"
          "<table id=\"matrix\"><tr><th>test (clause)</th>", f);
    for (size_t i = 0; i < run->n_plugins; i++) {
        fprintf(f, "<th title=\"");
        esc(f, run->plugins[i].name);
        fprintf(f, "\">P%zu <code>", i + 1);
        esc(f, run->plugins[i].name);
        fputs("</code></th>", f);
    }
    fputs("</tr>\n", f);
    char area[64] = "";
    for (size_t t = 0; t < run->n_tests; t++) {
        const conf_test *test = run->tests[t];
        char a[64];
        conf_test_area(test->id, a, sizeof a);
        if (strcmp(a, area)) {
            snprintf(area, sizeof area, "%s", a);
            suite_row(run, t, area, f);
        }
        fputs("<tr><td><code>", f);
        esc(f, test->id);
        fputs("</code></td>", f);
        for (size_t i = 0; i < run->n_plugins; i++) {
            const conf_outcome *o = &run->plugins[i].out[t];
            const char *lower = conf_result_lower(o->result);
            fprintf(f, "<td class=\"cell\"><a class=\"r %s\" href=\"#m-%zu-%zu\" "
                       "data-result=\"%s\" title=\"%s %.1f ms: ",
                    lower, i, t, lower, conf_result_name(o->result), o->duration_ms);
            esc(f, o->message[0] ? o->message : "(no message)");
            fprintf(f, "\">%s</a></td>", symbol(o->result));
        }
        fputs("</tr>\n", f);
    }
    fputs("</table></div></section>\n", f);
}

/* Every outcome with its message and time, anchored for the matrix's links. */
static void messages(const conf_run *run, FILE *f)
{
    fputs("<section><h2>Messages</h2>\n", f);
    for (size_t i = 0; i < run->n_plugins; i++) {
        const conf_plugin_report *p = &run->plugins[i];
        fprintf(f, "<h3>P%zu <code>", i + 1);
        esc(f, p->name);
        fputs("</code></h3>\n", f);
        for (size_t t = 0; t < run->n_tests; t++) {
            const conf_outcome *o = &p->out[t];
            fprintf(f, "<div class=\"msg\" id=\"m-%zu-%zu\"><span class=\"r %s\">%s %s</span> "
                       "<code>", i, t, conf_result_lower(o->result), symbol(o->result),
                    conf_result_name(o->result));
            esc(f, run->tests[t]->id);
            fprintf(f, "</code> <span class=\"ms\">%.2f ms</span>", o->duration_ms);
            if (o->message[0]) {
                fputs("<pre>", f);
                esc(f, o->message);
                fputs("</pre>", f);
            }
            fputs("</div>\n", f);
        }
    }
    fputs("</section>\n", f);
}

int conf_write_html(const conf_run *run, FILE *f)
{
    char when[64] = "";
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm))
        strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm);
    fprintf(f, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
               "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
               "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
               "style-src 'unsafe-inline'\">"
               "<title>inferlab-conformance report</title><style>%s</style></head><body>\n"
               "<header><h1>inferlab-conformance %s</h1><div>seed %llu%s &middot; %s</div>"
               "</header><main>\n",
            style, CONF_VERSION, (unsigned long long)run->opt.seed,
            run->in_process ? " &middot; in-process" : "", when);
    summary(run, f);
    plugins_table(run, f);
    matrix(run, f);
    messages(run, f);
    fputs("</main></body></html>\n", f);
    return ferror(f) ? -1 : 0;
}
