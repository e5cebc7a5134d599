/* Counting, message hygiene, and the two line-oriented reports: the human
 * table and TAP 13. (JUnit XML and JSON are in report_junit.c/report_json.c.) */
#include <stdio.h>
#include <string.h>

#include "harness.h"

void conf_count_plugin(const conf_run *run, const conf_plugin_report *p, conf_counts *c)
{
    for (size_t t = 0; t < run->n_tests; t++) {
        c->by_result[p->out[t].result]++;
        c->total++;
    }
}

void conf_count_run(const conf_run *run, conf_counts *c)
{
    memset(c, 0, sizeof *c);
    for (size_t i = 0; i < run->n_plugins; i++)
        conf_count_plugin(run, &run->plugins[i], c);
}

void conf_test_area(const char *id, char *area, size_t cap)
{
    size_t n = strcspn(id, ".");
    snprintf(area, cap, "%.*s", (int)n, id);
}

/* Length of the valid UTF-8 sequence at s, or 0. */
static size_t utf8_len(const unsigned char *s)
{
    size_t n;
    unsigned cp;
    if (s[0] < 0x80) return 1;
    if ((s[0] & 0xE0) == 0xC0) { n = 2; cp = s[0] & 0x1F; }
    else if ((s[0] & 0xF0) == 0xE0) { n = 3; cp = s[0] & 0x0F; }
    else if ((s[0] & 0xF8) == 0xF0) { n = 4; cp = s[0] & 0x07; }
    else return 0;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return n;
}

void conf_sanitize(char *s)
{
    unsigned char *p = (unsigned char *)s;
    while (*p) {
        if (*p < 0x20 || *p == 0x7F) {
            *p++ = ' ';
            continue;
        }
        size_t n = utf8_len(p);
        if (n == 0) {
            *p++ = '?';
            continue;
        }
        p += n;
    }
}

/* ---- human ------------------------------------------------------------ */

static void shell_quote(FILE *f, const char *s)
{
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'')
            fputs("'\\''", f);
        else
            fputc(*s, f);
    }
    fputc('\'', f);
}

static void rerun_line(const conf_run *run, const conf_plugin_report *p, const char *id, FILE *f)
{
    char re[256];
    size_t k = 0;
    re[k++] = '^';
    for (const char *c = id; *c && k + 3 < sizeof re; c++) {
        if (*c == '.')
            re[k++] = '\\';
        re[k++] = *c;
    }
    re[k++] = '$';
    re[k] = '\0';
    fprintf(f, "      rerun: %s ", run->argv0);
    shell_quote(f, p->path);
    fputs(" --include ", f);
    shell_quote(f, re);
    if (run->rerun_extra && run->rerun_extra[0])
        fprintf(f, " %s", run->rerun_extra);
    fputc('\n', f);
}

int conf_write_human(const conf_run *run, FILE *f)
{
    fprintf(f, "inferlab-conformance %s: %zu plugin(s), %zu test(s) each, seed %llu%s\n",
            CONF_VERSION, run->n_plugins, run->n_tests, (unsigned long long)run->opt.seed,
            run->in_process ? ", in-process" : "");
    for (size_t i = 0; i < run->n_plugins; i++) {
        const conf_plugin_report *p = &run->plugins[i];
        conf_counts c = {0};
        conf_count_plugin(run, p, &c);
        size_t failed = c.by_result[CONF_FAIL] + c.by_result[CONF_CRASH] +
                        c.by_result[CONF_TIMEOUT] + c.by_result[CONF_ERROR];
        fprintf(f, "%-20s %-7s %3zu passed, %3zu failed, %3zu skipped  %.1fs  %s\n", p->name,
                conf_result_name(p->result), c.by_result[CONF_PASS], failed,
                c.by_result[CONF_SKIP], p->seconds, p->path);
        if (p->result == CONF_SKIP && p->reason[0])
            fprintf(f, "    reason: %s\n", p->reason);
    }
    for (size_t i = 0; i < run->n_plugins; i++) {
        const conf_plugin_report *p = &run->plugins[i];
        bool header = false;
        size_t unavailable_skips = 0;
        for (size_t t = 0; t < run->n_tests; t++) {
            const conf_outcome *o = &p->out[t];
            if (o->result == CONF_PASS)
                continue;
            /* An unavailable plugin's skips all carry the probe's reason:
             * one line says it. */
            if (o->result == CONF_SKIP && p->unavailable &&
                strcmp(o->message, p->unavailable_reason) == 0) {
                unavailable_skips++;
                continue;
            }
            if (!header) {
                fprintf(f, "\n%s (%s):\n", p->name, p->path);
                header = true;
            }
            fprintf(f, "  %-7s %s: %s\n", conf_result_name(o->result), run->tests[t]->id,
                    o->message[0] ? o->message : "(no message)");
            if (o->result != CONF_SKIP)
                rerun_line(run, p, run->tests[t]->id, f);
        }
        if (unavailable_skips) {
            if (!header)
                fprintf(f, "\n%s (%s):\n", p->name, p->path);
            fprintf(f, "  SKIP    %zu test(s) need an available backend: %s\n", unavailable_skips,
                    p->unavailable_reason);
        }
    }
    conf_counts c;
    conf_count_run(run, &c);
    size_t failed = c.by_result[CONF_FAIL] + c.by_result[CONF_CRASH] + c.by_result[CONF_TIMEOUT] +
                    c.by_result[CONF_ERROR];
    fprintf(f, "\n%zu passed, %zu failed, %zu skipped\n", c.by_result[CONF_PASS], failed,
            c.by_result[CONF_SKIP]);
    return ferror(f) ? -1 : 0;
}

/* ---- TAP 13 ----------------------------------------------------------- */

static void yaml_quoted(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fputc('\\', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

int conf_write_tap(const conf_run *run, FILE *f)
{
    fprintf(f, "TAP version 13\n1..%zu\n", run->n_tests * run->n_plugins);
    fprintf(f, "# inferlab-conformance %s, seed %llu\n", CONF_VERSION,
            (unsigned long long)run->opt.seed);
    size_t n = 0;
    for (size_t i = 0; i < run->n_plugins; i++) {
        const conf_plugin_report *p = &run->plugins[i];
        fprintf(f, "# plugin %s: %s (%s)\n", p->name, conf_result_name(p->result), p->path);
        for (size_t t = 0; t < run->n_tests; t++) {
            const conf_outcome *o = &p->out[t];
            n++;
            if (o->result == CONF_PASS) {
                fprintf(f, "ok %zu - %s\n", n, run->tests[t]->id);
            } else if (o->result == CONF_SKIP) {
                /* '#' would start a second directive */
                char reason[CONF_MSG_CAP];
                snprintf(reason, sizeof reason, "%s", o->message);
                for (char *c = reason; *c; c++)
                    if (*c == '#')
                        *c = ' ';
                fprintf(f, "ok %zu - %s # SKIP %s\n", n, run->tests[t]->id, reason);
            } else {
                fprintf(f, "not ok %zu - %s\n", n, run->tests[t]->id);
                fprintf(f, "  ---\n  plugin: ");
                yaml_quoted(f, p->name);
                fprintf(f, "\n  result: %s\n  message: ", conf_result_lower(o->result));
                yaml_quoted(f, o->message);
                fprintf(f, "\n  duration_ms: %.3f\n  ...\n", o->duration_ms);
            }
        }
    }
    return ferror(f) ? -1 : 0;
}
