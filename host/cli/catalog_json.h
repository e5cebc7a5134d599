/* A catalog entry as JSON: the row `inferlab list --json` / `info --json`
 * prints, and (with each file's SHA-256) what `serve` publishes to
 * GET /v1/status. */
#ifndef ILAB_CLI_CATALOG_JSON_H
#define ILAB_CLI_CATALOG_JSON_H

#include <jansson.h>

#include "loader/catalog.h"

/* path, state, reason; with a manifest: name, version, abi, capabilities,
 * description, config and the manifest text. NULL when out of memory. */
json_t *ilab_catalog_row_json(const ilab_catalog *c, const ilab_catalog_entry *e);

/* Every entry's row plus "sha256" (the file's, or null when it cannot be
 * read), as one JSON array text (malloc'd; NULL when out of memory). */
char *ilab_catalog_status_json(const ilab_catalog *c);

#endif
