/* Small JSON helpers the engines' protocol files share. */
#ifndef ILAB_HTTP_PROTOCOL_UTIL_H
#define ILAB_HTTP_PROTOCOL_UTIL_H

#include <jansson.h>
#include <stdint.h>

#include <inferlab/inferlab.h>

/* The request's prompt, stop strings and stop token ids as JSON arrays
 * (new references; NULL when out of memory or a stop string is not UTF-8). */
json_t *http_json_ids(const int32_t *ids, size_t n);
json_t *http_json_strings(const char *const *s, size_t n);

/* A number member as float; `dflt` when absent or not a number. */
float http_json_float(json_t *v, float dflt);

#endif
