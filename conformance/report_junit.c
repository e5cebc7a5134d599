/* JUnit XML: one <testsuite> per plugin, classname "<plugin>.<area>",
 * skip reasons in <skipped>, FAIL as <failure>, CRASH / TIMEOUT / ERROR as
 * <error type="crash|timeout|error">. */
#include <stdio.h>
#include <string.h>

#include "harness.h"

static void xml_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&apos;", f); break;
        default: fputc(*s, f);
        }
    }
}

int conf_write_junit(const conf_run *run, FILE *f)
{
    conf_counts all;
    conf_count_run(run, &all);
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    fprintf(f, "<testsuites name=\"inferlab-conformance\" tests=\"%zu\" failures=\"%zu\" "
               "errors=\"%zu\" skipped=\"%zu\" time=\"%.3f\">\n",
            all.total, all.by_result[CONF_FAIL],
            all.by_result[CONF_CRASH] + all.by_result[CONF_TIMEOUT] + all.by_result[CONF_ERROR],
            all.by_result[CONF_SKIP], run->seconds);
    for (size_t i = 0; i < run->n_plugins; i++) {
        const conf_plugin_report *p = &run->plugins[i];
        conf_counts c = {0};
        conf_count_plugin(run, p, &c);
        fputs("  <testsuite name=\"", f);
        xml_text(f, p->name);
        fprintf(f, "\" tests=\"%zu\" failures=\"%zu\" errors=\"%zu\" skipped=\"%zu\" time=\"%.3f\">\n",
                c.total, c.by_result[CONF_FAIL],
                c.by_result[CONF_CRASH] + c.by_result[CONF_TIMEOUT] + c.by_result[CONF_ERROR],
                c.by_result[CONF_SKIP], p->seconds);
        fputs("    <properties>\n      <property name=\"path\" value=\"", f);
        xml_text(f, p->path);
        fprintf(f, "\"/>\n      <property name=\"sha256\" value=\"%s\"/>\n", p->sha256);
        fputs("      <property name=\"abi\" value=\"", f);
        xml_text(f, p->abi);
        fprintf(f, "\"/>\n      <property name=\"result\" value=\"%s\"/>\n",
                conf_result_lower(p->result));
        fprintf(f, "      <property name=\"seed\" value=\"%llu\"/>\n",
                (unsigned long long)run->opt.seed);
        fputs("      <property name=\"reason\" value=\"", f);
        xml_text(f, p->reason);
        fputs("\"/>\n    </properties>\n", f);
        for (size_t t = 0; t < run->n_tests; t++) {
            const conf_outcome *o = &p->out[t];
            char area[32];
            conf_test_area(run->tests[t]->id, area, sizeof area);
            fputs("    <testcase classname=\"", f);
            xml_text(f, p->name);
            fprintf(f, ".%s\" name=\"%s\" time=\"%.3f\"", area, run->tests[t]->id,
                    o->duration_ms / 1000.0);
            if (o->result == CONF_PASS) {
                fputs("/>\n", f);
                continue;
            }
            fputs(">\n      ", f);
            const char *tag = o->result == CONF_SKIP ? "skipped"
                              : o->result == CONF_FAIL ? "failure" : "error";
            fprintf(f, "<%s", tag);
            if (o->result == CONF_FAIL)
                fputs(" type=\"fail\"", f);
            else if (o->result != CONF_SKIP)
                fprintf(f, " type=\"%s\"", conf_result_lower(o->result));
            fputs(" message=\"", f);
            xml_text(f, o->message);
            fputs("\">", f);
            xml_text(f, o->message);
            fprintf(f, "</%s>\n    </testcase>\n", tag);
        }
        fputs("  </testsuite>\n", f);
    }
    fputs("</testsuites>\n", f);
    return ferror(f) ? -1 : 0;
}
