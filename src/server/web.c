/*
 * web.c - the web page `rapid serve` answers at /: a chat with the model and a
 * view of the server's status, plain HTML, CSS and JavaScript (web/).
 *
 * The files are compiled into the binary (tools/embed_web.cmake writes them as
 * byte arrays into the generated web_assets.c), so the page needs nothing on
 * disk, no build step and no network: GET / is web/index.html, GET /ui/NAME is
 * web/NAME, and nothing else is a file (the name is looked up in the table, so
 * "..", query strings or odd bytes find nothing: 404). HEAD answers the same
 * heads without a body (libmicrohttpd drops it).
 *
 * The page's routes need no API key: the page is only a shell that asks for the
 * key and sends it with its calls to /v1/..., which answer 401 without it as they
 * do for any client. Every answer carries a Content-Security-Policy that lets the
 * page load scripts, styles and connections from this server only and run no
 * inline script: a model's reply that slipped into the page's HTML as markup
 * still could not run (the page builds its DOM with textContent anyway).
 */
#include "server_int.h"

#include <string.h>

static const char *const page_headers[] = {
    "Content-Security-Policy",
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options",
    "nosniff",
    "Referrer-Policy",
    "no-referrer",
    // The files change with the binary: a browser revalidates rather than keeps an old page.
    "Cache-Control",
    "no-cache",
    NULL,
};

static const rp_web_asset *find_asset(const char *name)
{
    for (size_t i = 0; name && i < rp_web_n_assets; i++)
        if (strcmp(rp_web_assets[i].name, name) == 0)
            return &rp_web_assets[i];
    return NULL;
}

static void serve(rp_http_req *r, rp_reply *out, const char *name)
{
    const rp_web_asset *a = find_asset(name);
    if (!a) {
        rp_api_error e;
        rp_api_fail(&e, 404, NULL, "not_found", "no route for %s", r->path);
        rp_reply_error(r, out, &e);
        return;
    }
    rp_reply_text(out, 200, a->content_type, (const char *)a->data, a->len);
    out->headers = page_headers;
}

void rp_web_page(rp_http_req *r, rp_reply *out)
{
    serve(r, out, "index.html");
}

void rp_web_file(rp_http_req *r, rp_reply *out)
{
    serve(r, out, r->route_param);
}
