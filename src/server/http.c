/*
 * http.c - the HTTP core of `rapid serve`: the server object, the
 * libmicrohttpd daemon, routing, auth, body limits, replies and streaming.
 *
 * The daemon runs one thread per connection (MHD_USE_THREAD_PER_CONNECTION
 * with its internal polling thread), so a handler may block on the engine.
 * Which connections it keeps, and for how long they may take to send a
 * request, is conn.c's (told here from libmicrohttpd's connection and
 * request callbacks). For each request libmicrohttpd calls on_request
 * several times:
 *
 *   1. headers only: the connection's admission (503 when it was refused),
 *      the framing (two Content-Lengths, Content-Length with
 *      Transfer-Encoding, a transfer coding other than chunked: 400/501),
 *      the head's size (414, 431), a CORS preflight (204 for an allowed origin,
 *      403 for another), the route (404 unknown path, 405 wrong method), the API
 *      key (401) and Content-Length (413);
 *   2. body pieces: appended to the request's buffer up to max_request_bytes
 *      (a chunked body that grows past it is drained and answered 413);
 *   3. end of body: the route's handler runs on this thread and fills an
 *      rp_reply, which is queued as a whole body or as a stream.
 *
 * An error found at step 1 is answered at step 3, after the body has been
 * read and dropped (up to DRAIN_MAX): a client that writes its whole body
 * before it reads (Python's urllib, Node's fetch) would otherwise meet a
 * closed connection, and the reset that closing with unread bytes causes
 * can destroy the answer in flight. It is answered at once (libmicrohttpd
 * then closes the connection) only when waiting cannot help or should not
 * happen: the client sent "Expect: 100-continue" (it waits for a word before
 * sending the body), the declared body is past the drain bound, or the
 * framing itself is in doubt.
 *
 * A stream is an MHD callback response: stream_read asks the API's pump for
 * frames (each pump waits at most RP_STREAM_WAIT_S for tokens) and, between
 * pumps, checks the socket (rp_http_client_gone): a client that went away
 * makes the stream end at once and the API's free callback release (cancel)
 * the generation. Non-streaming handlers check rp_http_client_gone the same
 * way while they wait. Gone means reset, or closed for reading; a client
 * that only half-closed (shut its sending side after the request) still
 * reads. Both send just a FIN, so at the first FIN (and every PROBE_EVERY_S
 * after) the layer writes a probe (a "100 Continue" interim reply before a
 * whole reply, an SSE comment in a stream): a closed socket answers data with
 * a reset.
 *
 * A request's state (conn_state) is reference counted: the connection holds
 * one reference until MHD's completion notification, a stream response holds
 * another until libmicrohttpd frees it. The last release writes the log line
 * (method and path escaped: rp_log_escape) and records the metrics, so a
 * request is logged exactly once, with its final numbers, whatever the order
 * of those two events.
 */
#include "server_int.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define STREAM_BLOCK (16 * 1024)
#define DRAIN_MAX ((size_t)64 << 20)  // a refused body is read (and dropped) up to this much before answering
#define DRAIN_BUSY ((size_t)64 << 10) // the same when refused for want of a connection slot
#define MAX_URI 16384                 // longer request targets: 414
#define MAX_HEAD 65536                // larger request heads: 431
#define LOG_PATH_MAX 256              // bytes of a path shown in its log line
#define PROBE_EVERY_S 1.0             // a half-closed client is probed again this often
#define FD_RESERVE 64                 // descriptors kept for everything but connections

// The routing table. Query strings are ignored for matching.
static const rp_route routes[] = {
    {"POST", "/v1/chat/completions", false, rp_openai_chat, "chat", RP_API_OPENAI, true},
    {"POST", "/v1/completions", false, rp_openai_completions, "completions", RP_API_OPENAI, true},
    {"GET", "/v1/models", false, rp_openai_models, "models", RP_API_OPENAI, true},
    {"GET", "/v1/models/", true, rp_openai_model, "model", RP_API_OPENAI, true},
    {"POST", "/v1/responses", false, rp_responses_create, "responses", RP_API_OPENAI, true},
    {"POST", "/v1/messages", false, rp_anthropic_messages, "messages", RP_API_ANTHROPIC, true},
    {"POST", "/v1/messages/count_tokens", false, rp_anthropic_count_tokens, "count_tokens", RP_API_ANTHROPIC, true},
    {"GET", "/health", false, rp_health_handler, "health", RP_API_PLAIN, false},
    {"GET", "/metrics", false, rp_metrics_handler, "metrics", RP_API_PLAIN, false},
    {"GET", "/v1/status", false, rp_status_handler, "status", RP_API_PLAIN, true}, // names the cache folder
    // The web page and its files: no key (the page asks for it and sends it on its API calls).
    {"GET", "/", false, rp_web_page, "page", RP_API_PLAIN, false},
    {"HEAD", "/", false, rp_web_page, "page", RP_API_PLAIN, false},
    {"GET", "/ui/", true, rp_web_file, "asset", RP_API_PLAIN, false},
    {"HEAD", "/ui/", true, rp_web_file, "asset", RP_API_PLAIN, false},
};
#define N_ROUTES (sizeof(routes) / sizeof(routes[0]))

// One request's state. Owned by the connection thread; refs as described above.
typedef struct conn_state {
    rp_http_req req;
    rp_server *srv;
    struct MHD_Connection *conn;
    const rp_route *route;
    rp_api_kind api; // error shape (the route's, or guessed from the path for 404s)
    char *path, *method, *param;
    rp_conn *slot; // the connection's record in the connection table (NULL: untracked)
    rp_buf body;
    bool too_large, answered;
    bool http10;           // an HTTP/1.0 request: no interim replies
    bool has_early;        // `early` is the answer, given once the body is read (or drained)
    bool close_after;      // the answer closes the connection
    rp_conn_end closed_by; // the connection table closed the connection before the request was answered
    bool fin_seen;         // the client closed its sending side; a probe was written
    double t_probe;        // when the last probe was written
    bool probe_due;        // a stream owes the client a probe (an SSE comment)
    rp_api_error early;
    size_t drained;   // body bytes read and dropped
    size_t drain_max; // how many at most
    double t_start;
    atomic_int refs;
    // streaming
    rp_reply reply;
    rp_buf sbuf;
    size_t soff;
    bool s_finished, s_freed;
    bool proto_error; // libmicrohttpd found the request malformed; answered by proto.c
    // CORS (rp_server_params.allowed_origins): what Access-Control-Allow-Origin says ("" none),
    // and a preflight's answer (the Allow-Methods and -Headers lists) once its body is read
    char cors_origin[256];
    bool preflight;
    char pf_methods[64], pf_headers[512];
} conn_state;

// What the connection's own thread is reading (one thread per connection): noted by the
// callbacks that run there, so that on_mhd_log can answer libmicrohttpd's own protocol
// errors on the socket (proto.c). fd < 0: no request line seen on this thread yet.
typedef struct thread_req {
    int fd;
    rp_api_kind api;
    conn_state *cs; // the request's state once on_request has made it, until on_completed
} thread_req;
static __thread thread_req tl_req = {-1, RP_API_OPENAI, NULL};

/* ---- small helpers ----------------------------------------------------------- */

static bool path_match(const rp_route *rt, const char *path, const char **param)
{
    size_t n = strlen(rt->path);
    *param = NULL;
    if (!rt->prefix)
        return strcmp(rt->path, path) == 0;
    if (strncmp(rt->path, path, n) != 0 || path[n] == 0)
        return false;
    *param = path + n;
    return true;
}

// Constant-time in the key's contents (the length may leak; keys are not secret-length).
static bool key_equal(const char *a, const char *b)
{
    size_t na = strlen(a), nb = strlen(b);
    unsigned char d = na != nb;
    for (size_t i = 0; i < nb; i++)
        d |= (unsigned char)(i < na ? a[i] : 0) ^ (unsigned char)b[i];
    return d == 0;
}

static bool authorized(rp_server *s, struct MHD_Connection *c)
{
    if (!s->api_key)
        return true;
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    const char *xkey = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key");
    bool ok = false;
    if (auth && strncasecmp(auth, "Bearer ", 7) == 0) {
        const char *k = auth + 7;
        while (*k == ' ')
            k++;
        ok |= key_equal(k, s->api_key);
    }
    if (xkey)
        ok |= key_equal(xkey, s->api_key);
    return ok;
}

static void state_release(conn_state *cs);

/* ---- replies ----------------------------------------------------------------- */

void rp_reply_json(rp_reply *out, int status, const json_t *v)
{
    out->status = status;
    out->content_type = "application/json";
    rp_buf_reset(&out->body);
    rp_buf_json(&out->body, v);
}

void rp_reply_text(rp_reply *out, int status, const char *content_type, const char *text, size_t len)
{
    out->status = status;
    out->content_type = content_type;
    rp_buf_reset(&out->body);
    rp_buf_append(&out->body, text, len);
}

static void reply_error_shape(rp_api_kind api, rp_reply *out, const rp_api_error *e)
{
    out->status = e->status;
    out->content_type = "application/json";
    out->retry_after = e->retry_after;
    rp_buf_reset(&out->body);
    if (api == RP_API_ANTHROPIC)
        rp_anthropic_error_json(e, &out->body);
    else
        rp_openai_error_json(e, &out->body);
}

void rp_reply_error(rp_http_req *r, rp_reply *out, const rp_api_error *e)
{
    conn_state *cs = r ? r->priv : NULL;
    reply_error_shape(cs ? cs->api : RP_API_OPENAI, out, e);
}

void rp_reply_stream(rp_reply *out, rp_stream_pump_fn pump, rp_stream_free_fn free_fn, void *ctx)
{
    out->status = 200;
    out->content_type = "text/event-stream";
    out->pump = pump;
    out->pump_free = free_fn;
    out->pump_ctx = ctx;
}

/* ---- request accessors ------------------------------------------------------- */

const char *rp_http_header(rp_http_req *r, const char *name)
{
    conn_state *cs = r->priv;
    if (!cs || !cs->conn)
        return NULL;
    return MHD_lookup_connection_value(cs->conn, MHD_HEADER_KIND, name);
}

// The interim reply written to a half-closed client before its whole reply (its
// library skips it: RFC 9110 makes clients take 1xx replies they did not ask for).
static const char probe_continue[] = "HTTP/1.1 100 Continue\r\n\r\n";

bool rp_http_client_gone(rp_http_req *r)
{
    conn_state *cs = r->priv;
    if (!cs)
        return false;
    if (atomic_load(&cs->srv->stopping) || r->stats.client_gone)
        return true;
    if (!cs->conn)
        return false;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(cs->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci)
        return false;
    int fd = ci->connect_fd;
    struct pollfd pfd = {.fd = fd, .events = POLLIN | POLLRDHUP};
    bool gone = false;
    if (poll(&pfd, 1, 0) > 0) {
        bool fin = false;
        if (pfd.revents & (POLLHUP | POLLERR | POLLNVAL)) {
            gone = true; // reset (or closed both ways)
        } else if (pfd.revents & (POLLRDHUP | POLLIN)) {
            // Data (a pipelined request) or the end of the client's stream.
            char c;
            ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
            if (n == 0)
                fin = true;
            else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                gone = true;
        }
        if (fin && cs->http10) {
            gone = true; // no interim reply to probe with; an HTTP/1.0 client does not half-close
        } else if (fin && (!cs->fin_seen || rp_time_s() - cs->t_probe >= PROBE_EVERY_S)) {
            // A half-close or a close: a probe tells them apart (a closed socket resets).
            // Again now and then: a client that half-closed may close later.
            cs->fin_seen = true;
            cs->t_probe = rp_time_s();
            if (cs->answered) {
                cs->probe_due = true; // the stream's next read writes it
            } else {
                ssize_t w = send(fd, probe_continue, sizeof(probe_continue) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                    gone = true;
            }
        }
    }
    if (gone)
        r->stats.client_gone = true;
    return gone;
}

bool rp_http_parse_json(rp_http_req *r, json_t **out, rp_api_error *e)
{
    return rp_json_parse_bytes(r->body, r->body_len, out, e);
}

// The methods the routes of `path` take, as "GET, HEAD" (out: "" for none).
static void path_methods(const char *path, char *out, size_t cap)
{
    out[0] = 0;
    for (size_t i = 0; i < N_ROUTES; i++) {
        const char *p;
        if (path_match(&routes[i], path, &p) && !strstr(out, routes[i].method))
            snprintf(out + strlen(out), cap - strlen(out), "%s%s", out[0] ? ", " : "", routes[i].method);
    }
}

/* ---- CORS ---------------------------------------------------------------------- */

// Whether origin is in the server's list ("*": any), as the Allow-Origin value to send.
static bool cors_allowed(const rp_server *s, const char *origin, char *out, size_t cap)
{
    const char *list = s->allowed_origins;
    if (!list || !origin || !*origin || strlen(origin) >= cap)
        return false;
    size_t n = strlen(origin);
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        while (len && (*p == ' ' || *p == '\t'))
            p++, len--;
        while (len && (p[len - 1] == ' ' || p[len - 1] == '\t'))
            len--;
        if ((len == 1 && *p == '*') || (len == n && memcmp(p, origin, n) == 0)) {
            snprintf(out, cap, "%s", len == 1 && *p == '*' ? "*" : origin);
            return true;
        }
        if (!end)
            break;
        p = end + 1;
    }
    return false;
}

static void cors_headers(const conn_state *cs, struct MHD_Response *resp)
{
    if (!cs->cors_origin[0])
        return;
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", cs->cors_origin);
    MHD_add_response_header(resp, "Access-Control-Expose-Headers", "x-request-id, retry-after");
    MHD_add_response_header(resp, "Vary", "Origin");
}

// A header list a preflight asks for, kept when it is a plain comma list of token names.
static bool header_list_ok(const char *v)
{
    for (const char *p = v; *p; p++)
        if (!(isalnum((unsigned char)*p) || strchr("-_, ", *p)))
            return false;
    return true;
}

/* ---- queueing ---------------------------------------------------------------- */

static enum MHD_Result queue_body(conn_state *cs, rp_reply *rep)
{
    if (rep->body.failed) {
        rp_buf_reset(&rep->body);
        rep->body.failed = false;
        rp_api_error e;
        rp_api_fail(&e, 500, NULL, NULL, "out of memory while writing the reply");
        reply_error_shape(cs->api, rep, &e);
    }
    struct MHD_Response *resp = MHD_create_response_from_buffer(
        rep->body.len, rep->body.len ? rep->body.data : (void *)"", MHD_RESPMEM_MUST_COPY);
    if (!resp)
        return MHD_NO;
    if (rep->content_type)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, rep->content_type);
    for (const char *const *h = rep->headers; h && h[0] && h[1]; h += 2)
        MHD_add_response_header(resp, h[0], h[1]);
    if (rep->retry_after > 0) {
        char ra[32];
        snprintf(ra, sizeof(ra), "%d", rep->retry_after);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, ra);
    }
    if (rep->status == 405 && cs->route == NULL) { // Allow: the methods the path does take
        char allow[64];
        path_methods(cs->path, allow, sizeof(allow));
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
    }
    if (cs->preflight) {
        MHD_add_response_header(resp, "Access-Control-Allow-Methods", cs->pf_methods);
        if (cs->pf_headers[0])
            MHD_add_response_header(resp, "Access-Control-Allow-Headers", cs->pf_headers);
        MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
    }
    cors_headers(cs, resp);
    char rid[32];
    snprintf(rid, sizeof(rid), "%llu", (unsigned long long)cs->req.id);
    MHD_add_response_header(resp, "x-request-id", rid);
    if (cs->close_after)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    cs->req.status = rep->status;
    cs->answered = true;
    enum MHD_Result ret = MHD_queue_response(cs->conn, (unsigned)rep->status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result queue_api_error(conn_state *cs, const rp_api_error *e)
{
    rp_reply rep = {0};
    reply_error_shape(cs->api, &rep, e);
    enum MHD_Result ret = queue_body(cs, &rep);
    rp_buf_deinit(&rep.body);
    return ret;
}

// An error found before the body: kept in cs->early, answered once the body is read
// (see the top of the file). Returns MHD_YES (go on reading).
static enum MHD_Result early_error(conn_state *cs, int status, const char *code, int retry_after, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static enum MHD_Result early_error(conn_state *cs, int status, const char *code, int retry_after, const char *fmt, ...)
{
    rp_api_fail(&cs->early, status, NULL, code, "%s", "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cs->early.message, sizeof(cs->early.message), fmt, ap);
    va_end(ap);
    rp_utf8_repair(cs->early.message, sizeof(cs->early.message)); // it may quote the path
    cs->early.retry_after = retry_after;
    cs->has_early = true;
    return MHD_YES;
}

// Frees the stream's API context exactly once.
static void stream_release_ctx(conn_state *cs)
{
    if (!cs->s_freed && cs->reply.pump_free) {
        cs->s_freed = true;
        cs->reply.pump_free(cs->reply.pump_ctx, &cs->req);
    }
    cs->s_freed = true;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    conn_state *cs = cls;
    for (;;) {
        if (cs->soff < cs->sbuf.len) {
            size_t n = cs->sbuf.len - cs->soff;
            if (n > max)
                n = max;
            memcpy(buf, cs->sbuf.data + cs->soff, n);
            cs->soff += n;
            return (ssize_t)n;
        }
        if (cs->s_finished || cs->s_freed) {
            stream_release_ctx(cs);
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        if (rp_http_client_gone(&cs->req)) {
            stream_release_ctx(cs);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        rp_buf_reset(&cs->sbuf);
        cs->soff = 0;
        if (cs->probe_due) {
            // The client closed its sending side: an SSE comment (every SSE reader skips it)
            // makes a closed socket reset, which the next check sees.
            cs->probe_due = false;
            rp_buf_puts(&cs->sbuf, ": \n\n");
            continue;
        }
        bool finished = false;
        rp_status st = cs->reply.pump(cs->reply.pump_ctx, &cs->req, &cs->sbuf, &finished);
        if (st || cs->sbuf.failed) {
            RP_LOGE("request %llu: stream failed: %s", (unsigned long long)cs->req.id,
                    st ? rp_error_message() : "out of memory");
            stream_release_ctx(cs);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        cs->s_finished = finished;
    }
}

static void stream_free(void *cls)
{
    conn_state *cs = cls;
    stream_release_ctx(cs);
    state_release(cs);
}

static enum MHD_Result queue_stream(conn_state *cs)
{
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, STREAM_BLOCK, stream_read, cs, stream_free);
    if (!resp) {
        stream_release_ctx(cs);
        return MHD_NO;
    }
    atomic_fetch_add(&cs->refs, 1); // the response's reference, dropped by stream_free
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    cors_headers(cs, resp);
    char rid[32];
    snprintf(rid, sizeof(rid), "%llu", (unsigned long long)cs->req.id);
    MHD_add_response_header(resp, "x-request-id", rid);
    cs->req.status = 200;
    cs->answered = true;
    enum MHD_Result ret = MHD_queue_response(cs->conn, 200, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* ---- request lifecycle ------------------------------------------------------- */

static void log_request(conn_state *cs)
{
    rp_server *s = cs->srv;
    rp_http_req *r = &cs->req;
    if (s->metrics)
        rp_metrics_record(s->metrics, r);
    if (s->params.quiet)
        return;
    const rp_req_stats *st = &r->stats;
    double total = rp_time_s() - cs->t_start;
    // Method and path are the client's bytes (the path percent-decoded): escaped, so a
    // request is one line that sends no terminal escapes.
    rp_buf line;
    rp_buf_init(&line);
    rp_buf_printf(&line, "rapid: #%llu ", (unsigned long long)r->id);
    rp_log_escape(&line, cs->method, strlen(cs->method), true);
    rp_buf_puts(&line, " ");
    // At most LOG_PATH_MAX bytes of it, cut before a character (rp_log cuts long lines).
    size_t plen = strlen(cs->path), shown = plen;
    if (shown > LOG_PATH_MAX) {
        shown = LOG_PATH_MAX;
        while (shown > 0 && ((unsigned char)cs->path[shown] & 0xC0) == 0x80)
            shown--;
    }
    rp_log_escape(&line, cs->path, shown, true);
    if (shown < plen)
        rp_buf_printf(&line, "...(%zu bytes)", plen);
    rp_buf_printf(&line, " %d | ", r->status);
    if (st->n_prompt > 0 || st->n_completion > 0) {
        char ttft[32] = "-";
        if (st->ttft_s >= 0)
            snprintf(ttft, sizeof(ttft), "%.3fs", st->ttft_s);
        rp_buf_printf(&line, "prompt %d (cached %d), completion %d | ttft %s, %.1f tok/s | ", st->n_prompt,
                      st->n_cached, st->n_completion, ttft, st->decode_tps);
    }
    rp_buf_printf(&line, "%.3fs%s", total,
                  cs->closed_by == RP_CONN_BODY_TIMEOUT ? " | body not received in time"
                  : cs->closed_by                       ? " | closed to make room for other connections"
                  : st->client_gone                     ? " | client gone"
                                                        : "");
    if (!line.failed)
        rp_log(RP_LOG_INFO, "%s", line.data);
    rp_buf_deinit(&line);
}

static void state_release(conn_state *cs)
{
    if (atomic_fetch_sub(&cs->refs, 1) != 1)
        return;
    if (cs->closed_by) // for the log and the metrics only: nothing was answered
        cs->req.status = cs->closed_by == RP_CONN_BODY_TIMEOUT ? 408 : 503;
    else if (cs->req.stats.client_gone)
        cs->req.status = 499; // nginx's "client closed request", for the log and the metrics only
    log_request(cs);
    rp_buf_deinit(&cs->body);
    rp_buf_deinit(&cs->sbuf);
    rp_buf_deinit(&cs->reply.body);
    rp_free(cs->path);
    rp_free(cs->method);
    rp_free(cs);
}

// The connection's record in the connection table (NULL: untracked).
static rp_conn *conn_slot(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

static conn_state *state_create(rp_server *s, struct MHD_Connection *c, const char *url, const char *method,
                                const char *version)
{
    conn_state *cs = rp_calloc(1, sizeof(*cs));
    if (!cs)
        return NULL;
    const char *q = strchr(url, '?');
    cs->path = q ? rp_strndup(url, (size_t)(q - url)) : rp_strdup(url);
    cs->method = rp_strdup(method);
    if (!cs->path || !cs->method) {
        rp_free(cs->path);
        rp_free(cs->method);
        rp_free(cs);
        return NULL;
    }
    atomic_init(&cs->refs, 1);
    cs->srv = s;
    cs->conn = c;
    cs->slot = conn_slot(c);
    cs->drain_max = DRAIN_MAX;
    cs->http10 = version && strcmp(version, MHD_HTTP_VERSION_1_0) == 0;
    cs->t_start = rp_time_s();
    cs->req.srv = s;
    cs->req.id = atomic_fetch_add(&s->next_id, 1) + 1;
    cs->req.method = cs->method;
    cs->req.path = cs->path;
    cs->req.query = q ? q + 1 : "";
    cs->req.route_name = "unknown";
    cs->req.stats.ttft_s = -1;
    cs->req.stats.queue_s = -1;
    cs->req.stats.e2e_s = -1;
    cs->req.priv = cs;
    cs->api = strncmp(cs->path, "/v1/messages", 12) == 0 ? RP_API_ANTHROPIC : RP_API_OPENAI;
    return cs;
}

// What the framing headers say: how many Content-Length headers with how many
// distinct values, and the Transfer-Encoding headers.
typedef struct framing {
    int n_cl, n_te;
    bool cl_differ;
    bool bad_name; // a header name that is not a token (whitespace before the colon, say)
    const char *cl, *te;
} framing;

// A header name: one or more of RFC 9110's tchar.
static bool is_token(const char *p)
{
    if (!*p)
        return false;
    for (; *p; p++)
        if (!rp_proto_tchar((unsigned char)*p))
            return false;
    return true;
}

static enum MHD_Result framing_header(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    (void)kind;
    framing *f = cls;
    if (!key || !value)
        return MHD_YES;
    if (!is_token(key))
        f->bad_name = true;
    if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0) {
        if (f->n_cl++ && strcmp(f->cl, value) != 0)
            f->cl_differ = true;
        f->cl = value;
    } else if (strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0) {
        f->n_te++;
        f->te = value;
    }
    return MHD_YES;
}

static size_t head_size(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
    return ci ? ci->header_size : 0;
}

// First call for a request: admission, framing, size, route, auth. An error is
// kept as the early answer (cs->has_early), or queued at once when waiting for the
// body cannot help (cs->answered). Returns MHD_YES to go on reading the body.
static enum MHD_Result begin_request(conn_state *cs)
{
    rp_server *s = cs->srv;
    struct MHD_Connection *c = cs->conn;
    bool now = false; // answer before the body
    enum MHD_Result ret = MHD_YES;
    framing f = {0};
    if (rp_conn_request(s->conns, cs->slot)) {
        cs->close_after = true;
        cs->drain_max = DRAIN_BUSY;
        ret = early_error(cs, 503, "too_many_connections", 1,
                          "the server has too many connections open (at most %d, %d per client address) and all "
                          "are busy; retry shortly",
                          s->params.max_connections, s->params.max_connections_per_client);
        goto decided;
    }
    MHD_get_connection_values(c, MHD_HEADER_KIND, framing_header, &f);
    if (f.cl_differ || (f.n_cl && f.n_te) || f.n_te > 1 || f.bad_name) {
        // A proxy in front may frame the body otherwise: refuse, and read nothing more.
        cs->close_after = now = true;
        ret = early_error(cs, 400, "invalid_request", 0, "%s",
                          f.bad_name    ? "a header name is not a token (whitespace before its colon?)"
                          : f.cl_differ ? "the request has two Content-Length headers that differ"
                          : f.n_te > 1  ? "the request has more than one Transfer-Encoding header"
                                        : "the request has both Content-Length and Transfer-Encoding");
        goto decided;
    }
    if (f.n_te && strcasecmp(f.te, "chunked") != 0) {
        cs->close_after = now = true;
        ret = early_error(cs, 501, "unsupported_transfer_encoding", 0,
                          "the transfer coding '%.64s' is not supported (only chunked)", f.te);
        goto decided;
    }
    if (strlen(cs->path) > MAX_URI) {
        cs->close_after = true;
        ret = early_error(cs, 414, "uri_too_long", 0, "the request target is longer than %d bytes", MAX_URI);
        goto decided;
    }
    if (head_size(c) > MAX_HEAD) {
        cs->close_after = true;
        ret = early_error(cs, 431, "request_header_fields_too_large", 0, "the request head is larger than %d bytes",
                          MAX_HEAD);
        goto decided;
    }
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    cors_allowed(s, origin, cs->cors_origin, sizeof(cs->cors_origin));
    const char *pf_method = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Method");
    if (strcmp(cs->method, "OPTIONS") == 0 && pf_method && s->allowed_origins) { // a CORS preflight
        path_methods(cs->path, cs->pf_methods, sizeof(cs->pf_methods));
        if (!cs->pf_methods[0]) {
            ret = early_error(cs, 404, "not_found", 0, "no route for %s", cs->path);
            goto decided;
        }
        if (!cs->cors_origin[0]) {
            ret = early_error(cs, 403, "origin_not_allowed", 0, "the origin '%.200s' may not call this server",
                              origin ? origin : "(none)");
            goto decided;
        }
        size_t used = strlen(cs->pf_methods);
        snprintf(cs->pf_methods + used, sizeof(cs->pf_methods) - used, ", OPTIONS");
        const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Headers");
        if (h && strlen(h) < sizeof(cs->pf_headers) && header_list_ok(h))
            snprintf(cs->pf_headers, sizeof(cs->pf_headers), "%s", h);
        cs->preflight = true; // answered 204 once its body (if any) is read
        cs->req.route_name = "preflight";
        return MHD_YES;
    }
    bool path_known = false;
    for (size_t i = 0; i < N_ROUTES; i++) {
        const char *param;
        if (!path_match(&routes[i], cs->path, &param))
            continue;
        path_known = true;
        if (strcmp(routes[i].method, cs->method) == 0) {
            cs->route = &routes[i];
            cs->req.route_param = param;
            break;
        }
    }
    if (!cs->route) {
        if (path_known)
            ret =
                early_error(cs, 405, "method_not_allowed", 0, "method %s is not allowed for %s", cs->method, cs->path);
        else
            ret = early_error(cs, 404, "not_found", 0, "no route for %s %s", cs->method, cs->path);
        goto decided;
    }
    cs->api = cs->route->api;
    cs->req.route_name = cs->route->name;
    if (cs->route->auth && !authorized(s, c)) {
        ret = early_error(cs, 401, "invalid_api_key", 0,
                          "invalid or missing API key (send it as 'Authorization: Bearer KEY' or 'x-api-key: KEY')");
        goto decided;
    }
    if (f.cl) {
        char *end;
        errno = 0;
        unsigned long long n = strtoull(f.cl, &end, 10);
        if (errno || end == f.cl || n > s->params.max_request_bytes) {
            now = errno || end == f.cl || n > cs->drain_max;
            ret = early_error(cs, 413, "request_too_large", 0, "the request body is larger than %zu bytes",
                              s->params.max_request_bytes);
        }
    }
decided:
    if (!cs->has_early)
        return ret;
    if (f.cl && strtoull(f.cl, NULL, 10) > cs->drain_max)
        now = true;
    // A client that asked "Expect: 100-continue" sends its body only when told to: answer now.
    const char *expect = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_EXPECT);
    if (now || (expect && strcasecmp(expect, "100-continue") == 0))
        return queue_api_error(cs, &cs->early);
    return ret;
}

static enum MHD_Result run_handler(conn_state *cs)
{
    rp_http_req *r = &cs->req;
    r->body = cs->body.data ? cs->body.data : "";
    r->body_len = cs->body.len;
    rp_reply *rep = &cs->reply;
    rp_buf_init(&rep->body);
    rep->status = 500;
    cs->route->fn(r, rep);
    if (rep->pump)
        return queue_stream(cs);
    return queue_body(cs, rep);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_size, void **con_cls)
{
    rp_server *s = cls;
    conn_state *cs = *con_cls;
    if (!cs) {
        cs = state_create(s, c, url, method, version);
        if (!cs)
            return MHD_NO;
        *con_cls = cs;
        tl_req.cs = cs;
        return begin_request(cs);
    }
    if (cs->answered) { // answered before the body: libmicrohttpd reads no more of it
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (!cs->has_early && !cs->too_large && cs->body.len + n > s->params.max_request_bytes) {
            cs->too_large = true;
            rp_buf_deinit(&cs->body);
            early_error(cs, 413, "request_too_large", 0, "the request body is larger than %zu bytes",
                        s->params.max_request_bytes);
        }
        if (cs->has_early) {
            // Read and dropped; past the bound the answer goes now (and the connection closes).
            cs->drained += n;
            return cs->drained > cs->drain_max ? queue_api_error(cs, &cs->early) : MHD_YES;
        }
        rp_buf_append(&cs->body, upload_data, n);
        return cs->body.failed ? MHD_NO : MHD_YES;
    }
    rp_conn_body_done(s->conns, cs->slot);
    if (cs->has_early)
        return queue_api_error(cs, &cs->early);
    if (cs->preflight) {
        rp_reply *rep = &cs->reply;
        rp_buf_init(&rep->body);
        rep->status = 204;
        return queue_body(cs, rep);
    }
    return run_handler(cs);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    rp_server *s = cls;
    conn_state *cs = *con_cls;
    *con_cls = NULL;
    rp_conn *slot = conn_slot(c);
    if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && cs && !cs->answered)
        cs->closed_by = rp_conn_ended(s->conns, slot);
    rp_conn_request_done(s->conns, slot);
    if (!cs)
        return;
    if (tl_req.cs == cs)
        tl_req.cs = NULL;
    if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && !cs->s_finished && !cs->closed_by && !cs->proto_error)
        cs->req.stats.client_gone = true;
    cs->conn = NULL; // the connection is no longer ours to look at
    state_release(cs);
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    rp_server *s = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *fd = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        const union MHD_ConnectionInfo *ad = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        // Accepted by the gate, which recorded it (rp_conn_open there) and handed it over.
        rp_conn *slot = fd ? rp_conn_adopt(s->conns, fd->connect_fd) : NULL;
        if (!slot && fd)
            slot = rp_conn_open(s->conns, fd->connect_fd, ad ? ad->client_addr : NULL);
        *socket_context = slot;
    } else {
        rp_conn_close(s->conns, *socket_context);
        *socket_context = NULL;
    }
}

// Called once a request line has arrived (before its headers): the head has started.
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *c)
{
    rp_server *s = cls;
    rp_conn_head_started(s->conns, conn_slot(c));
    const union MHD_ConnectionInfo *fd = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    tl_req.fd = fd ? fd->connect_fd : -1;
    tl_req.api = uri && strncmp(uri, "/v1/messages", 12) == 0 ? RP_API_ANTHROPIC : RP_API_OPENAI;
    tl_req.cs = NULL;
    return NULL; // keeps *con_cls NULL for on_request's first call
}

// libmicrohttpd found the request on this thread's connection malformed (status, its
// HTML page) and is about to queue its page: our JSON answer goes first (proto.c).
static void answer_protocol_error(rp_server *s, unsigned status, const char *page)
{
    conn_state *cs = tl_req.cs;
    rp_api_error e;
    if (tl_req.fd < 0 || (cs && cs->answered) || !rp_proto_from_mhd(status, page, &e))
        return; // no request line seen here yet, or our own answer is already queued
    if (cs) {
        cs->proto_error = cs->answered = true;
        cs->req.status = e.status;
    } else if (!s->params.quiet) {
        rp_proto_log(&e);
    }
    int fd = tl_req.fd;
    tl_req.fd = -1; // answered: libmicrohttpd may report the same error again
    if (rp_proto_send(fd, cs ? cs->api : tl_req.api, &e, cs ? cs->req.id : 0))
        rp_proto_drain(fd);
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    rp_server *s = cls;
    static const char proto_error[] = "Error processing request (HTTP response code is ";
    if (strncmp(fmt, proto_error, sizeof(proto_error) - 1) == 0) {
        va_list aq;
        va_copy(aq, ap);
        unsigned status = va_arg(aq, unsigned);
        const char *page = va_arg(aq, const char *);
        va_end(aq);
        answer_protocol_error(s, status, page);
    }
    char line[512];
    vsnprintf(line, sizeof(line), fmt, ap);
    size_t n = strlen(line);
    while (n && line[n - 1] == '\n')
        line[--n] = 0;
    rp_buf b; // its messages may quote the request's URL
    rp_buf_init(&b);
    rp_log_escape(&b, line, n, false);
    if (!b.failed)
        RP_LOGD("libmicrohttpd: %s", b.data ? b.data : "");
    rp_buf_deinit(&b);
}

/* ---- the server object ------------------------------------------------------- */

void rp_server_params_default(rp_server_params *p)
{
    memset(p, 0, sizeof(*p));
    p->host = "127.0.0.1";
    p->port = RP_SERVER_DEFAULT_PORT;
    p->max_request_bytes = RP_SERVER_DEFAULT_MAX_REQUEST_BYTES;
    p->max_connections = RP_SERVER_DEFAULT_MAX_CONNECTIONS;
    p->max_connections_per_client = 0; // a quarter of max_connections
    p->timeout_s = RP_SERVER_DEFAULT_TIMEOUT_S;
}

// The connection limits, filled in and checked; max_connections is lowered (with a
// warning) to what the open-files limit allows, raised first to its hard limit if needed.
static rp_status connection_limits(rp_server_params *p)
{
    if (!p->max_connections)
        p->max_connections = RP_SERVER_DEFAULT_MAX_CONNECTIONS;
    if (!p->max_connections_per_client)
        p->max_connections_per_client = p->max_connections >= 4 ? p->max_connections / 4 : 1;
    if (!(p->timeout_s > 0))
        p->timeout_s = RP_SERVER_DEFAULT_TIMEOUT_S;
    if (p->max_connections < 1 || p->max_connections_per_client < 1)
        return RP_ERR(RP_ERR_INVALID, "connection limits must be at least 1 (got %d, %d per client)",
                      p->max_connections, p->max_connections_per_client);
    if (p->max_connections_per_client > p->max_connections)
        p->max_connections_per_client = p->max_connections;
    int margin = rp_conn_margin(p->max_connections);
    rlim_t need = (rlim_t)p->max_connections + (rlim_t)margin + FD_RESERVE;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need) {
        struct rlimit up = rl;
        up.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > need ? need : rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &up) == 0)
            rl = up;
        if (rl.rlim_cur < need) {
            long fit = (long)rl.rlim_cur - FD_RESERVE - margin;
            if (fit < 8)
                return RP_ERR(RP_ERR_INVALID, "the open-files limit (%ld) leaves no room for connections",
                              (long)rl.rlim_cur);
            rp_log(RP_LOG_WARN, "rapid: warning: the open-files limit (%ld) allows %ld connections, not %d",
                   (long)rl.rlim_cur, fit, p->max_connections);
            p->max_connections = (int)fit;
            if (p->max_connections_per_client > p->max_connections)
                p->max_connections_per_client = p->max_connections;
        }
    }
    return RP_OK;
}

// The default served name: the model path's last component, ".gguf" dropped.
static char *default_model_name(const char *path)
{
    if (!path || !*path)
        return rp_strdup("rapid");
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
        n--;
    size_t b = n;
    while (b > 0 && path[b - 1] != '/')
        b--;
    size_t len = n - b;
    if (len > 5 && strncasecmp(path + n - 5, ".gguf", 5) == 0)
        len -= 5;
    return rp_strndup(path + b, len);
}

rp_status rp_server_listen(const char *host, int port, int *fd_out, int *port_out)
{
    char ps[16];
    snprintf(ps, sizeof(ps), "%d", port);
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    int rc = getaddrinfo(host, ps, &hints, &res);
    if (rc)
        return RP_ERR(RP_ERR_IO, "cannot resolve the address '%s': %s", host, gai_strerror(rc));
    int fd = -1, err = 0;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            err = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 128) == 0)
            break;
        err = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0)
        return RP_ERR(RP_ERR_IO, "cannot listen on %s:%d: %s", host, port, strerror(err));
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) {
        close(fd);
        return RP_ERR(RP_ERR_IO, "getsockname: %s", strerror(errno));
    }
    *port_out = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                         : ntohs(((struct sockaddr_in *)&ss)->sin_port);
    *fd_out = fd;
    return RP_OK;
}

// The engine's failure hook: its device is gone, so nothing more can be served.
static void engine_failed(void *ctx)
{
    rp_server_stop(ctx);
}

rp_status rp_server_create(rp_engine *e, const rp_model *m, const rp_tokenizer *tok, const rp_server_params *p,
                           rp_server **out)
{
    *out = NULL;
    int given_fd = p && p->has_listen_fd ? p->listen_fd : -1; // ours from here on
    rp_server *s = NULL;
    if (!e || !m || !tok || !p) {
        if (given_fd >= 0)
            close(given_fd);
        return RP_ERR(RP_ERR_INVALID, "rp_server_create: missing engine, model, tokenizer or params");
    }
    if (p->port < 0 || p->port > 65535 || !(s = rp_calloc(1, sizeof(*s)))) {
        if (given_fd >= 0)
            close(given_fd);
        return p->port < 0 || p->port > 65535 ? RP_ERR(RP_ERR_INVALID, "port %d is outside 0..65535", p->port)
                                              : RP_ERR(RP_ERR_NOMEM, "out of memory");
    }
    rp_status st = RP_OK;
    s->listen_fd = given_fd;
    s->wake_pipe[0] = s->wake_pipe[1] = -1;
    s->params = *p;
    if (!s->params.max_request_bytes)
        s->params.max_request_bytes = RP_SERVER_DEFAULT_MAX_REQUEST_BYTES;
    if ((st = connection_limits(&s->params)))
        goto fail;
    s->host = rp_strdup(p->host && *p->host ? p->host : "127.0.0.1");
    s->api_key = p->api_key && *p->api_key ? rp_strdup(p->api_key) : NULL;
    s->allowed_origins = p->allowed_origins && *p->allowed_origins ? rp_strdup(p->allowed_origins) : NULL;
    s->model_name = p->served_model_name && *p->served_model_name ? rp_strdup(p->served_model_name)
                                                                  : default_model_name(rp_model_path(m));
    if ((st = rp_json_schema_cache_create(RP_SCHEMA_CACHE_SIZE, NULL, &s->schemas)))
        goto fail;
    if (!s->host || (p->api_key && *p->api_key && !s->api_key) || !s->model_name ||
        (p->allowed_origins && *p->allowed_origins && !s->allowed_origins)) {
        st = RP_ERR(RP_ERR_NOMEM, "out of memory");
        goto fail;
    }
    s->params.host = s->host;
    s->params.api_key = s->api_key;
    s->params.allowed_origins = s->allowed_origins;
    s->params.served_model_name = s->model_name;
    s->params.tool_parser = s->params.reasoning_parser = s->params.chat_template = NULL; // not kept; resolved below
    s->engine = e;
    s->tok = tok;
    s->model = m;
    s->cfg = rp_model_get_config(m);
    s->n_ctx = rp_engine_n_ctx(e);
    s->created = (long long)time(NULL);
    atomic_init(&s->next_id, 0);
    atomic_init(&s->stopping, false);

    const char *tpl = p->chat_template ? p->chat_template : rp_tok_chat_template(tok);
    if (tpl && (st = rp_chat_template_create(tpl, strlen(tpl), &s->tpl))) {
        rp_error_prefix(st, p->chat_template ? "the chat template" : "the model's chat template");
        goto fail;
    }
    rp_parser_select(tpl, s->cfg->arch_name, &s->tool_format, &s->reasoning_format);
    if (p->tool_parser && (st = rp_tool_format_from_name(p->tool_parser, &s->tool_format)))
        goto fail;
    if (p->reasoning_parser && (st = rp_reasoning_format_from_name(p->reasoning_parser, &s->reasoning_format)))
        goto fail;
    if ((st = rp_metrics_create(e, s->model_name, &s->metrics)))
        goto fail;
    if ((st = rp_conn_table_create(s->params.max_connections, s->params.max_connections_per_client, s->params.timeout_s,
                                   &s->conns)))
        goto fail;
    if (pipe2(s->wake_pipe, O_CLOEXEC) != 0) {
        st = RP_ERR(RP_ERR_IO, "pipe: %s", strerror(errno));
        goto fail;
    }
    if (s->listen_fd >= 0) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        if (getsockname(s->listen_fd, (struct sockaddr *)&ss, &sl) != 0) {
            st = RP_ERR(RP_ERR_IO, "getsockname: %s", strerror(errno));
            goto fail;
        }
        s->port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                           : ntohs(((struct sockaddr_in *)&ss)->sin_port);
    } else if ((st = rp_server_listen(s->host, p->port, &s->listen_fd, &s->port))) {
        goto fail;
    }
    // The gate (gate.c) accepts and hands each connection over once its first line is good.
    s->daemon = MHD_start_daemon(
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ITC |
            MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ERROR_LOG,
        0, NULL, NULL, on_request, s, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, s, MHD_OPTION_NOTIFY_COMPLETED,
        on_completed, s, MHD_OPTION_NOTIFY_CONNECTION, on_connection, s, MHD_OPTION_URI_LOG_CALLBACK, on_uri, s,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)256 * 1024,
        // Its own limit out of reach (a handed-over connection meeting it deadlocks 0.9.75:
        // gate.c): the gate applies ours. No inactivity timeout of its own: conn.c's deadlines.
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)INT_MAX,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)0, MHD_OPTION_END);
    if (!s->daemon) {
        st = RP_ERR(RP_ERR_IO, "cannot start the HTTP daemon on %s:%d", s->host, s->port);
        goto fail;
    }
    if ((st = rp_gate_start(s->listen_fd, s->daemon, s->conns, s->params.quiet, &s->gate)))
        goto fail;
    s->listen_fd = -1;                         // the gate's now
    rp_engine_on_failure(e, engine_failed, s); // a lost device stops the server (rp_server_run says why)
    *out = s;
    return RP_OK;
fail:
    rp_server_destroy(s);
    return st;
}

int rp_server_port(const rp_server *s)
{
    return s->port;
}

void rp_server_stop(rp_server *s)
{
    if (s && s->wake_pipe[1] >= 0) {
        char c = 1;
        ssize_t n = write(s->wake_pipe[1], &c, 1);
        (void)n;
    }
}

void rp_server_wait(rp_server *s)
{
    char c;
    for (;;) {
        ssize_t n = read(s->wake_pipe[0], &c, 1);
        if (n == 1 || (n < 0 && errno != EINTR) || n == 0)
            return;
    }
}

void rp_server_destroy(rp_server *s)
{
    if (!s)
        return;
    if (s->daemon)
        rp_engine_on_failure(s->engine, NULL, NULL);
    atomic_store(&s->stopping, true);
    if (s->daemon) {
        // Stop accepting first, then let the connection threads see `stopping`
        // (streams end, waits cancel their generations) and join them.
        rp_gate_stop(s->gate);
        MHD_stop_daemon(s->daemon);
    }
    rp_conn_table_destroy(s->conns); // every connection has closed
    if (s->listen_fd >= 0)
        close(s->listen_fd);
    for (int i = 0; i < 2; i++)
        if (s->wake_pipe[i] >= 0)
            close(s->wake_pipe[i]);
    rp_metrics_destroy(s->metrics);
    rp_chat_template_destroy(s->tpl);
    rp_json_schema_cache_destroy(s->schemas);
    rp_free(s->host);
    rp_free(s->api_key);
    rp_free(s->allowed_origins);
    rp_free(s->model_name);
    rp_free(s);
}

bool rp_server_check_model(const rp_server *s, const char *name, rp_api_error *e)
{
    if (!s->params.strict_model_name || !name || !*name || strcmp(name, s->model_name) == 0)
        return true;
    return rp_api_fail(e, 404, "model", "model_not_found", "the model '%s' does not exist; this server serves '%s'",
                       name, s->model_name);
}

/* ---- rp_server_run ----------------------------------------------------------- */

static rp_server *volatile signal_server;

static void on_signal(int sig)
{
    (void)sig;
    rp_server *s = signal_server;
    if (s)
        rp_server_stop(s);
}

rp_status rp_server_run(rp_engine *e, const rp_model *m, const rp_tokenizer *tok, const rp_server_params *p)
{
    rp_server *s;
    rp_status st = rp_server_create(e, m, tok, p, &s);
    if (st)
        return st;
    struct sigaction sa = {0}, old_int, old_term, old_pipe;
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    signal_server = s;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    struct sigaction ign = {0};
    ign.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &ign, &old_pipe);
    bool v6 = strchr(s->host, ':') != NULL;
    fprintf(stderr, "rapid: listening on http://%s%s%s:%d\n", v6 ? "[" : "", s->host, v6 ? "]" : "", s->port);
    fflush(stderr);
    rp_server_wait(s);
    const char *failed = rp_engine_failed(e);
    rp_log(RP_LOG_INFO, "rapid: shutting down%s", failed ? " (the engine cannot run any more)" : "");
    rp_server_destroy(s);
    signal_server = NULL;
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    sigaction(SIGPIPE, &old_pipe, NULL);
    return failed ? RP_ERR(RP_ERR_DEVICE, "%s; the server stopped", failed) : RP_OK;
}
