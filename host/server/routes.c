/* The route table and the dispatch over it. To add an endpoint: write its
 * handler in the file of its concern, declare it in routes.h, add a row. */
#include "server_internal.h"

#include <string.h>

static const ilab_route routes[] = {
    /* the status page holds no data: it asks /v1/status with the key */
    {"/", "GET", ilab_handle_status_page, false, ILAB_ROUTE_OPEN},
    {"/health", "GET", ilab_handle_health, false, ILAB_ROUTE_OPEN},
    {"/metrics", "GET", ilab_handle_metrics, false, ILAB_ROUTE_METRICS},
    {"/v1/status", "GET", ilab_handle_status, false, ILAB_ROUTE_KEY},
    {"/v1/models", "GET", ilab_handle_models, false, ILAB_ROUTE_KEY},
    {"/v1/models/", "GET", ilab_handle_model, true, ILAB_ROUTE_KEY},
    {"/v1/completions", "POST", ilab_handle_completions, false, ILAB_ROUTE_KEY},
    {"/v1/chat/completions", "POST", ilab_handle_chat_completions, false, ILAB_ROUTE_KEY},
    {"/tokenize", "POST", ilab_handle_tokenize, false, ILAB_ROUTE_KEY},
    {"/detokenize", "POST", ilab_handle_detokenize, false, ILAB_ROUTE_KEY},
    /* SGLang's native API (a documented subset: docs/http-api.md) */
    {"/generate", "POST", ilab_handle_sglang_generate, false, ILAB_ROUTE_KEY},
    {"/get_model_info", "GET", ilab_handle_model_info, false, ILAB_ROUTE_KEY},
    {"/health_generate", "GET", ilab_handle_health_generate, false, ILAB_ROUTE_KEY},
};
#define N_ROUTES (sizeof routes / sizeof routes[0])

/* Does `path` name route `r`? Sets *arg to a prefix route's tail. */
static bool path_matches(const ilab_route *r, const char *path, const char **arg)
{
    *arg = NULL;
    if (!r->prefix)
        return !strcmp(r->path, path);
    size_t n = strlen(r->path);
    if (strncmp(r->path, path, n) || !path[n] || strchr(path + n, '/'))
        return false;
    *arg = path + n;
    return true;
}

static bool method_matches(const ilab_route *r, const char *method)
{
    return !strcmp(r->method, method) || (!strcmp(r->method, "GET") && !strcmp(method, "HEAD"));
}

static bool needs_key(const ilab_server *s, const ilab_route *r)
{
    if (!s->cfg.api_key || !s->cfg.api_key[0])
        return false;
    return r->access == ILAB_ROUTE_KEY || (r->access == ILAB_ROUTE_METRICS &&
                                           s->cfg.metrics_need_key);
}

static enum MHD_Result refuse_unauthorized(ilab_server *s, struct MHD_Connection *c)
{
    ilab_api_error e;
    ilab_api_fail(&e, 401, NULL, "missing or wrong API key: send the header "
                                 "'Authorization: Bearer <key>'");
    return ilab_server_send_error(s, c, &e);
}

enum MHD_Result ilab_server_route(ilab_server *s, struct MHD_Connection *c,
                                  const ilab_http_request *req)
{
    const char *path = req->path, *method = req->method;
    const ilab_route *known = NULL;
    const char *arg = NULL;
    for (size_t i = 0; i < N_ROUTES; i++) {
        if (!path_matches(&routes[i], path, &arg))
            continue;
        if (!known)
            known = &routes[i];
        if (method_matches(&routes[i], method)) {
            /* The key is checked before anything about the request is. */
            if (needs_key(s, &routes[i]) && !ilab_auth_ok(c, s->cfg.api_key))
                return refuse_unauthorized(s, c);
            ilab_http_request matched = *req;
            matched.path_arg = arg;
            return routes[i].handler(s, c, &matched);
        }
    }
    ilab_api_error e;
    if (!known)
        ilab_api_fail(&e, 404, NULL, "no endpoint %s %s", method, path);
    else
        ilab_api_fail(&e, 405, NULL, "%s takes %s, not %s", path, known->method, method);
    return ilab_server_send_error(s, c, &e);
}
