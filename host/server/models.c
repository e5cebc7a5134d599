/* GET /v1/models and GET /v1/models/{id}: the models served, one per
 * backend, each naming the backend (plugin) and its version. */
#include "server_internal.h"

#include <jansson.h>
#include <string.h>

static json_t *model_json(const ilab_backend_view *w)
{
    const ilab_served *v = w->v;
    /* vocab_size is not vLLM's: published so a token-level client (vllm_stub)
     * need not be told it */
    return json_pack("{s:s, s:s, s:I, s:s, s:s, s:s, s:s, s:i, s:i}", "id", w->id, "object",
                     "model", "created", (json_int_t)v->loaded, "owned_by", "inferlab", "root",
                     w->slot->name, "backend", w->slot->name, "version", v->version,
                     "max_model_len", v->info.max_context, "vocab_size", v->info.vocab_size);
}

enum MHD_Result ilab_handle_models(ilab_server *s, struct MHD_Connection *c,
                                   const ilab_http_request *req)
{
    (void)req;
    ilab_backend_view *views = NULL;
    size_t n = ilab_backend_views(s, &views);
    json_t *data = json_array();
    for (size_t i = 0; i < n; i++)
        if (views[i].v)
            json_array_append_new(data, model_json(&views[i]));
    ilab_backend_views_free(views, n);
    return ilab_server_send_json(s, c, 200,
                                 json_pack("{s:s, s:o}", "object", "list", "data", data));
}

enum MHD_Result ilab_handle_model(ilab_server *s, struct MHD_Connection *c,
                                  const ilab_http_request *req)
{
    /* Requests may name the model or its backend (plugin); so may this. */
    ilab_api_error e;
    ilab_served *v = ilab_server_acquire(s, req->path_arg, &e);
    if (!v)
        return ilab_server_send_error(s, c, &e);
    ilab_backend_view *views = NULL;
    size_t n = ilab_backend_views(s, &views);
    json_t *j = NULL;
    for (size_t i = 0; i < n && !j; i++)
        if (views[i].v == v)
            j = model_json(&views[i]);
    ilab_backend_views_free(views, n);
    ilab_served_release(v);
    if (!j) { /* replaced between the two looks: ask again */
        ilab_api_fail(&e, 503, NULL, "backend '%.60s' is being reloaded; retry",
                      req->path_arg);
        e.retry_after = 1;
        return ilab_server_send_error(s, c, &e);
    }
    return ilab_server_send_json(s, c, 200, j);
}

/* SGLang's GET /get_model_info: the documented members. */
enum MHD_Result ilab_handle_model_info(ilab_server *s, struct MHD_Connection *c,
                                       const ilab_http_request *req)
{
    (void)req;
    ilab_api_error e;
    ilab_served *v = ilab_server_acquire(s, NULL, &e); /* SGLang names no model: the default */
    if (!v)
        return ilab_server_send_error(s, c, &e);
    json_t *j = json_pack("{s:s, s:s, s:b}", "model_path", v->model_id, "tokenizer_path",
                          v->model_id, "is_generation", 1);
    ilab_served_release(v);
    return ilab_server_send_json(s, c, 200, j);
}
