/* Queueing responses: JSON bodies, the documented error object, and the
 * per-status counters /metrics reports. Any libmicrohttpd thread. */
#include "server_internal.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const unsigned counted_codes[ILAB_SERVER_N_CODES] = {
    200, 400, 401, 404, 405, 408, 413, 414, 431, 500, 501, 503,
};

static size_t code_slot(unsigned status)
{
    size_t i = 0;
    while (i < ILAB_SERVER_N_CODES && counted_codes[i] != status)
        i++;
    return i;
}

void ilab_server_count_status(ilab_server *s, unsigned status)
{
    size_t i = code_slot(status);
    pthread_mutex_lock(&s->stats_mu);
    s->requests_by_code[i]++;
    pthread_mutex_unlock(&s->stats_mu);
}

void ilab_server_count_protocol_error(ilab_server *s, unsigned status)
{
    size_t i = code_slot(status);
    pthread_mutex_lock(&s->stats_mu);
    s->protocol_errors[i]++;
    pthread_mutex_unlock(&s->stats_mu);
}

enum MHD_Result ilab_server_send(ilab_server *s, struct MHD_Connection *c, unsigned status,
                                 const char *content_type, char *body)
{
    if (!body) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":"
                                  "\"server_error\",\"param\":null,\"code\":500}}";
        body = strdup(oom);
        status = 500;
        if (!body)
            return MHD_NO;
    }
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    ilab_server_count_status(s, status);
    return ret;
}

enum MHD_Result ilab_server_send_json(ilab_server *s, struct MHD_Connection *c, unsigned status,
                                      json_t *root)
{
    char *body = root ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    return ilab_server_send(s, c, status, "application/json", body);
}

enum MHD_Result ilab_server_send_error(ilab_server *s, struct MHD_Connection *c,
                                       const ilab_api_error *e)
{
    char *body = ilab_api_error_json(e);
    if (!body)
        return ilab_server_send(s, c, 500, "application/json", NULL);
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    if (e->retry_after > 0) {
        char ra[16];
        snprintf(ra, sizeof ra, "%d", e->retry_after);
        MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, ra);
    }
    if (e->close) /* libmicrohttpd then neither reads the body nor another request */
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result ret = MHD_queue_response(c, e->http_status, r);
    MHD_destroy_response(r);
    ilab_server_count_status(s, e->http_status);
    return ret;
}

unsigned ilab_server_counted_code(size_t i)
{
    return i < ILAB_SERVER_N_CODES ? counted_codes[i] : 0;
}
