/* GET /: the status page and playground, one self-contained HTML file
 * (ui/index.html: markup, style and script together, no other request but
 * the API's own) assembled into the binary by ui_page.S. The page holds no
 * data: it reads GET /v1/status, /metrics and the OpenAI endpoints with the
 * key the user types, so serving it needs none (ADR 0028). */
#include "server_internal.h"

#include <string.h>

extern const char ilab_ui_page[];     /* ui_page.S */
extern const char ilab_ui_page_end[];

enum MHD_Result ilab_handle_status_page(ilab_server *s, struct MHD_Connection *c,
                                        const ilab_http_request *req)
{
    (void)req;
    size_t len = (size_t)(ilab_ui_page_end - ilab_ui_page);
    struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)ilab_ui_page,
                                                             MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/html; charset=utf-8");
    /* Nothing but this origin: no CDN, no other site, no plugin-supplied
     * URL can load (the page's own script and style are inline). */
    MHD_add_response_header(r, "Content-Security-Policy",
                            "default-src 'none'; script-src 'unsafe-inline'; "
                            "style-src 'unsafe-inline'; connect-src 'self'; img-src data:; "
                            "base-uri 'none'; form-action 'none'; frame-ancestors 'none'");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    enum MHD_Result ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    ilab_server_count_status(s, 200);
    return ret;
}
