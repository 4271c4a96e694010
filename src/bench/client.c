/*
 * client.c - the transport: streaming chat-completion requests over libcurl's
 * multi interface, so N requests start together and stream side by side on
 * one thread.
 *
 * Each request is a curl easy handle whose body bytes go straight into an
 * rp_bench_stream (stream.c). The send time is read just before the handle
 * joins the multi handle; token times are read by the stream as chunks are
 * parsed. At the end of a transfer the HTTP status, the content type and
 * curl's own result decide the error, most telling first: an HTTP error
 * status, then a transport failure (refused connection, timeout, cut
 * connection), then a body that is not an event stream, then what the stream
 * itself lacked. The multi handle keeps connections alive between calls.
 */
#include "bench_int.h"

#include <math.h>
#include <pthread.h>
#include <strings.h>
#include <time.h>

#include <curl/curl.h>

struct rp_bench_client {
    CURLM *multi;
    char *chat_url, *models_url, *status_url;
    struct curl_slist *post_headers, *get_headers;
    double timeout_s;
    rp_bench_clock_fn clock;
    void *clock_ctx;
};

typedef struct xfer {
    CURL *easy;
    rp_bench_stream st;
    rp_bench_result *res;
    bool started; // the first body bytes came
    char errbuf[CURL_ERROR_SIZE];
} xfer;

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_init(void)
{
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

// Adds a header to the list; false on OOM (the list is kept).
static bool add_header(struct curl_slist **list, const char *h)
{
    struct curl_slist *l = curl_slist_append(*list, h);
    if (!l)
        return false;
    *list = l;
    return true;
}

rp_status rp_bench_client_create(const rp_bench_client_params *p, rp_bench_client **out)
{
    *out = NULL;
    const char *base = p->base_url ? p->base_url : "";
    if (strncmp(base, "http://", 7) != 0 && strncmp(base, "https://", 8) != 0)
        return RP_ERR(RP_ERR_INVALID, "base URL '%s' does not start with http:// or https://", base);
    pthread_once(&curl_once, curl_init);
    if (curl_init_rc != CURLE_OK)
        return RP_ERR(RP_ERR_IO, "libcurl could not start: %s", curl_easy_strerror(curl_init_rc));
    rp_status st = RP_ERR_NOMEM;
    char *auth = NULL;
    rp_bench_client *c = rp_calloc(1, sizeof(*c));
    if (!c)
        goto fail;
    size_t n = strlen(base);
    while (n > 0 && base[n - 1] == '/')
        n--;
    // The OpenAI SDK's base URLs end in /v1; plain server addresses do not.
    const char *v1 = n >= 3 && memcmp(base + n - 3, "/v1", 3) == 0 ? "" : "/v1";
    c->chat_url = rp_bench_fmt("%.*s%s/chat/completions", (int)n, base, v1);
    c->models_url = rp_bench_fmt("%.*s%s/models", (int)n, base, v1);
    c->status_url = rp_bench_fmt("%.*s%s/status", (int)n, base, v1);
    if (!c->chat_url || !c->models_url || !c->status_url)
        goto fail;
    // "Expect:" stops curl from waiting for a 100 Continue before large bodies.
    if (!add_header(&c->post_headers, "Content-Type: application/json") ||
        !add_header(&c->post_headers, "Accept: text/event-stream") || !add_header(&c->post_headers, "Expect:"))
        goto fail;
    if (p->api_key && *p->api_key) {
        auth = rp_bench_fmt("Authorization: Bearer %s", p->api_key);
        if (!auth || !add_header(&c->post_headers, auth) || !add_header(&c->get_headers, auth))
            goto fail;
    }
    c->multi = curl_multi_init();
    if (!c->multi) {
        st = RP_ERR(RP_ERR_IO, "libcurl: cannot make a multi handle");
        goto fail;
    }
    c->timeout_s = p->timeout_s;
    c->clock = p->clock ? p->clock : rp_bench_clock_monotonic;
    c->clock_ctx = p->clock_ctx;
    rp_free(auth);
    *out = c;
    return RP_OK;
fail:
    if (st == RP_ERR_NOMEM)
        RP_ERR(st, "out of memory making the HTTP client");
    rp_free(auth);
    rp_bench_client_destroy(c);
    return st;
}

void rp_bench_client_destroy(rp_bench_client *c)
{
    if (!c)
        return;
    if (c->multi)
        curl_multi_cleanup(c->multi);
    curl_slist_free_all(c->post_headers);
    curl_slist_free_all(c->get_headers);
    rp_free(c->chat_url);
    rp_free(c->models_url);
    rp_free(c->status_url);
    rp_free(c);
}

static size_t on_write(char *p, size_t size, size_t nmemb, void *ud)
{
    xfer *x = ud;
    size_t n = size * nmemb;
    if (!x->started) {
        x->started = true;
        long code = 0;
        char *ct = NULL;
        curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &code);
        curl_easy_getinfo(x->easy, CURLINFO_CONTENT_TYPE, &ct);
        // Error bodies and non-SSE bodies are only kept for the message.
        if (code != 200 || (ct && strncasecmp(ct, "text/event-stream", 17) != 0))
            x->st.raw = true;
    }
    rp_bench_stream_feed(&x->st, p, n);
    return x->st.stopped ? 0 : n; // 0 aborts a transfer that is already a failure
}

// The transfer ended with curl's result rc: decide the error, fill the result.
static void complete(xfer *x, CURLcode rc)
{
    rp_bench_result *r = x->res;
    long code = 0;
    char *ct = NULL;
    curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_getinfo(x->easy, CURLINFO_CONTENT_TYPE, &ct);
    r->http_status = code;
    if (code != 0 && code != 200) {
        x->st.raw = true;
        const char *h = x->st.head.p ? x->st.head.p : "";
        char *e = rp_bench_excerpt(h, x->st.head.len, 300);
        rp_bench_result_fail(r, "HTTP %ld: %s", code, e && *e ? e : "(empty body)");
        rp_free(e);
    }
    if (rc != CURLE_OK && !(rc == CURLE_WRITE_ERROR && x->st.stopped)) {
        const char *d = x->errbuf[0] ? x->errbuf : curl_easy_strerror(rc);
        if (rc == CURLE_COULDNT_CONNECT)
            rp_bench_result_fail(r, "connection failed (refused or unreachable): %s", d);
        else if (rc == CURLE_OPERATION_TIMEDOUT)
            rp_bench_result_fail(r, "timed out: %s", d);
        else if (rc == CURLE_COULDNT_RESOLVE_HOST)
            rp_bench_result_fail(r, "cannot resolve the host: %s", d);
        else
            rp_bench_result_fail(r, "transfer failed: %s", d);
        x->st.raw = true; // what came is not judged as a stream any more
    }
    if (code == 200 && ct && strncasecmp(ct, "text/event-stream", 17) != 0) {
        const char *h = x->st.head.p ? x->st.head.p : "";
        char *e = rp_bench_excerpt(h, x->st.head.len, 200);
        rp_bench_result_fail(r, "not an SSE stream (Content-Type: %s): %s", ct, e ? e : "");
        rp_free(e);
    }
    rp_bench_stream_finish(&x->st);
}

static void xfer_release(rp_bench_client *c, xfer *x, bool added)
{
    if (x->easy) {
        if (added)
            curl_multi_remove_handle(c->multi, x->easy);
        curl_easy_cleanup(x->easy);
    }
    rp_bench_stream_deinit(&x->st);
}

rp_status rp_bench_client_send(rp_bench_client *c, const char *const *bodies, size_t n, rp_bench_result *out)
{
    return rp_bench_client_send_ex(c, bodies, n, NULL, out);
}

// Whether the bodies held back by after_chunks may start: every body sent at once has
// k token chunks or has ended.
static bool trigger_met(const xfer *xs, const bool *ended, size_t n, const int *after_chunks, int k)
{
    for (size_t i = 0; i < n; i++)
        if (after_chunks[i] < 0 && !ended[i] && xs[i].res->token_chunks < k)
            return false;
    return true;
}

rp_status rp_bench_client_send_ex(rp_bench_client *c, const char *const *bodies, size_t n, const int *after_chunks,
                                  rp_bench_result *out)
{
    if (n == 0)
        return RP_OK;
    bool any_now = false;
    for (size_t i = 0; after_chunks && i < n; i++)
        any_now = any_now || after_chunks[i] < 0;
    if (!any_now)
        after_chunks = NULL;
    rp_status st = RP_OK;
    xfer *xs = rp_calloc(n, sizeof(*xs));
    bool *added = rp_calloc(n, sizeof(*added)), *ended = rp_calloc(n, sizeof(*ended));
    if (!xs || !added || !ended) {
        rp_free(xs);
        rp_free(added);
        rp_free(ended);
        return RP_ERR(RP_ERR_NOMEM, "out of memory starting %zu requests", n);
    }
    for (size_t i = 0; i < n; i++) {
        xfer *x = &xs[i];
        rp_bench_result_deinit(&out[i]);
        x->res = &out[i];
        rp_bench_stream_init(&x->st, x->res, c->clock, c->clock_ctx);
        x->easy = curl_easy_init();
        if (!x->easy) {
            st = RP_ERR(RP_ERR_IO, "libcurl: cannot make a request handle");
            goto done;
        }
        CURL *e = x->easy;
        curl_easy_setopt(e, CURLOPT_URL, c->chat_url);
        curl_easy_setopt(e, CURLOPT_POST, 1L);
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, bodies[i]);
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(bodies[i]));
        curl_easy_setopt(e, CURLOPT_HTTPHEADER, c->post_headers);
        curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write);
        curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
        curl_easy_setopt(e, CURLOPT_ERRORBUFFER, x->errbuf);
        curl_easy_setopt(e, CURLOPT_PRIVATE, x);
        curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
        if (c->timeout_s > 0)
            curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)(c->timeout_s * 1000));
    }
    size_t waiting = 0; // bodies held back
    for (size_t i = 0; i < n; i++) {
        if (after_chunks && after_chunks[i] >= 0) {
            waiting++;
            continue;
        }
        xs[i].res->t_sent = c->clock(c->clock_ctx);
        if (curl_multi_add_handle(c->multi, xs[i].easy) != CURLM_OK) {
            st = RP_ERR(RP_ERR_IO, "libcurl: cannot start request %zu", i);
            goto done;
        }
        added[i] = true;
    }
    int running = 1;
    while (running || waiting) {
        CURLMcode mc = curl_multi_perform(c->multi, &running);
        if (mc == CURLM_OK && running)
            mc = curl_multi_poll(c->multi, NULL, 0, waiting ? 5 : 1000, NULL);
        if (mc != CURLM_OK) {
            st = RP_ERR(RP_ERR_IO, "libcurl: %s", curl_multi_strerror(mc));
            goto done;
        }
        CURLMsg *m;
        int left;
        while ((m = curl_multi_info_read(c->multi, &left))) {
            if (m->msg != CURLMSG_DONE)
                continue;
            xfer *x = NULL;
            curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&x);
            if (x) {
                complete(x, m->data.result);
                ended[x - xs] = true;
            }
        }
        for (size_t i = 0; waiting && i < n; i++) {
            if (added[i] || !after_chunks || after_chunks[i] < 0 ||
                !trigger_met(xs, ended, n, after_chunks, after_chunks[i]))
                continue;
            xs[i].res->t_sent = c->clock(c->clock_ctx);
            if (curl_multi_add_handle(c->multi, xs[i].easy) != CURLM_OK) {
                st = RP_ERR(RP_ERR_IO, "libcurl: cannot start request %zu", i);
                goto done;
            }
            added[i] = true;
            waiting--;
            running = 1;
        }
    }
done:
    for (size_t i = 0; i < n; i++) {
        if (st != RP_OK && !xs[i].res->error)
            rp_bench_result_fail(xs[i].res, "not sent: %s", rp_error_message());
        xfer_release(c, &xs[i], added[i]);
    }
    rp_free(xs);
    rp_free(added);
    rp_free(ended);
    return st;
}

static size_t discard(char *p, size_t size, size_t nmemb, void *ud)
{
    (void)p;
    (void)ud;
    return size * nmemb;
}

rp_status rp_bench_client_wait_ready(rp_bench_client *c, double timeout_s)
{
    double end = rp_bench_clock_monotonic(NULL) + timeout_s;
    char last[CURL_ERROR_SIZE + 64] = "no answer";
    for (;;) {
        CURL *e = curl_easy_init();
        if (!e)
            return RP_ERR(RP_ERR_IO, "libcurl: cannot make a request handle");
        char errbuf[CURL_ERROR_SIZE] = "";
        curl_easy_setopt(e, CURLOPT_URL, c->models_url);
        curl_easy_setopt(e, CURLOPT_HTTPHEADER, c->get_headers);
        curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, discard);
        curl_easy_setopt(e, CURLOPT_ERRORBUFFER, errbuf);
        curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, 5000L);
        CURLcode rc = curl_easy_perform(e);
        long code = 0;
        curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code);
        curl_easy_cleanup(e);
        if (rc == CURLE_OK && code == 200)
            return RP_OK;
        if (rc != CURLE_OK)
            snprintf(last, sizeof(last), "%s", errbuf[0] ? errbuf : curl_easy_strerror(rc));
        else
            snprintf(last, sizeof(last), "HTTP %ld", code);
        if (rp_bench_clock_monotonic(NULL) >= end)
            return RP_ERR(RP_ERR_IO, "%s not ready after %.0f s (last: %s)", c->models_url, timeout_s, last);
        struct timespec ts = {0, 250 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

static size_t keep_body(char *p, size_t size, size_t nmemb, void *ud)
{
    rp_bench_buf *b = ud;
    if (b->len + size * nmemb > ((size_t)4 << 20)) // a status page is small: refuse anything else
        return 0;
    rp_bench_buf_add(b, p, size * nmemb);
    return b->oom ? 0 : size * nmemb;
}

rp_status rp_bench_client_status(rp_bench_client *c, json_t **out)
{
    *out = NULL;
    CURL *e = curl_easy_init();
    if (!e)
        return RP_ERR(RP_ERR_IO, "libcurl: cannot make a request handle");
    rp_bench_buf body = {0};
    char errbuf[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(e, CURLOPT_URL, c->status_url);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, c->get_headers);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, keep_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &body);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, 5000L);
    CURLcode rc = curl_easy_perform(e);
    long code = 0;
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(e);
    rp_status st = RP_OK;
    if (body.oom)
        st = RP_ERR(RP_ERR_NOMEM, "out of memory reading %s", c->status_url);
    else if (rc != CURLE_OK)
        st = RP_ERR(RP_ERR_IO, "%s: %s", c->status_url, errbuf[0] ? errbuf : curl_easy_strerror(rc));
    else if (code != 200)
        st = RP_ERR(RP_ERR_IO, "%s: HTTP %ld", c->status_url, code);
    if (st == RP_OK) {
        json_error_t je;
        json_t *j = json_loadb(body.p ? body.p : "", body.len, 0, &je);
        if (!json_is_object(j)) {
            json_decref(j);
            st = RP_ERR(RP_ERR_INVALID, "%s: not a JSON object", c->status_url);
        } else {
            *out = j;
        }
    }
    rp_bench_buf_deinit(&body);
    return st;
}
