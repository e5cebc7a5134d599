/* Small JSON helpers the engines' protocol files share. */
#ifndef ILAB_HTTP_PROTOCOL_UTIL_H
#define ILAB_HTTP_PROTOCOL_UTIL_H

#include <jansson.h>
#include <stdint.h>

#include <inferlab/inferlab.h>

/* The request's prompt or stop token ids as a JSON array (a new
 * reference; NULL when out of memory). */
json_t *http_json_ids(const int32_t *ids, size_t n);

/* A number member as float; `dflt` when absent or not a number. */
float http_json_float(json_t *v, float dflt);

#endif
