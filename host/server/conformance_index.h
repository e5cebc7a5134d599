/* The conformance reports `serve --conformance-reports DIR` shows: the
 * JSON reports of inferlab-conformance (docs/conformance.md, schema 1) in
 * one folder, indexed by the SHA-256 of each plugin file they tested. */
#ifndef ILAB_SERVER_CONFORMANCE_INDEX_H
#define ILAB_SERVER_CONFORMANCE_INDEX_H

#include <jansson.h>

/* Read every *.json file of `dir` (not its subfolders) and return
 * {"by_sha256": {SHA: summary}, "problems": [{"file", "error"}]}: for each
 * plugin file, the summary of the newest report (by the report file's
 * modification time) that tested it -- result, counts, the report file,
 * its time, and the tests that did not pass or skip with their messages.
 * A file that is not a schema-1 report is a problem naming the file and
 * why, never silently passed over. NULL only when out of memory; a folder
 * that cannot be read is one problem. Any thread; reads the folder anew on
 * each call (reports are small and few). */
json_t *ilab_conformance_index(const char *dir);

#endif
