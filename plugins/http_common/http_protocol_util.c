/* JSON helpers for the protocol files (http_protocol_util.h). */
#include "http_protocol_util.h"

json_t *http_json_ids(const int32_t *ids, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++)
        if (json_array_append_new(a, json_integer(ids[i]))) {
            json_decref(a);
            return NULL;
        }
    return a;
}

float http_json_float(json_t *v, float dflt)
{
    return json_is_number(v) ? (float)json_number_value(v) : dflt;
}
