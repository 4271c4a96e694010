/*
 * sse_server.h - a scripted local HTTP server for the bench tests
 * (libmicrohttpd, loopback, a free port).
 *
 * Requests go to /s/<script>/v1/chat/completions; the script named in the
 * path decides the reply: a status, a content type and a list of body pieces
 * sent one per read with an optional delay before each (so the client sees
 * them in separate reads), optionally ending with a cut connection. The
 * script "auto" picks "tool" when the request offers tools and "good"
 * otherwise. GET /s/<any>/v1/models answers 200; GET /s/<any>/v1/status a
 * Rapid-like engine status whose counters grow by a fixed step per reading
 * (steps 10, seconds 0.5, forward 0.25; prefill chunk 8). Every request body is
 * kept (in order) for the test to inspect.
 */
#ifndef RP_SSE_SERVER_H
#define RP_SSE_SERVER_H

#include "bench_test_util.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>

typedef struct sse_script {
    const char *name;
    int status;
    const char *content_type;
    const char *parts[12]; // body pieces, NULL-terminated
    int delay_ms;          // before each piece
    bool cut;              // end by dropping the connection
} sse_script;

#define SSE_USAGE(p, c)                                                                                                \
    "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":" #p ",\"completion_tokens\":" #c                              \
    ",\"prompt_tokens_details\":{\"cached_tokens\":0}}}\n\n"

#define SSE_CONTENT(text) "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"" text "\"}}]}\n\n"

static const sse_script sse_scripts[] = {
    // Four token chunks, 7 completion tokens: with a clock stepping 0.25 s from
    // the send, TTFT 0.25 s, end to end 1 s, decode (7 - 1) / 0.75 = 8 tok/s.
    {"good",
     200,
     "text/event-stream",
     {"data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}],"
      "\"system_fingerprint\":\"fp-test\"}\n\n",
      SSE_CONTENT("Hel"), "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo", "\"}}]}\r\n\r\n",
      ": keep-alive\n\n", SSE_CONTENT(", wor"),
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ld\"},\"finish_reason\":\"stop\"}]}\n\n",
      SSE_USAGE(12, 7), "data: [DONE]\n\n", NULL},
     1,
     false},
    {"tool",
     200,
     "text/event-stream",
     {"data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c1\",\"function\":{\"name\":"
      "\"get_weather\",\"arguments\":\"{\\\"city\\\":\"}}]}}]}\n\n",
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":"
      "\" \\\"Porto\\\"}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\n",
      SSE_USAGE(40, 9), "data: [DONE]\n\n", NULL},
     0,
     false},
    {"http500",
     500,
     "application/json",
     {"{\"error\":{\"message\":\"engine exploded\",\"type\":\"server_error\"}}", NULL},
     0,
     false},
    {"json",
     200,
     "application/json",
     {"{\"object\":\"chat.completion\",\"choices\":[{\"message\":{\"content\":\"hi\"}}]}", NULL},
     0,
     false},
    {"nodata", 200, "text/event-stream", {"hello there\n", NULL}, 0, false},
    {"malformed", 200, "text/event-stream", {SSE_CONTENT("a"), "data: {\"choices\": [oops]}\n\n", NULL}, 0, false},
    {"nousage", 200, "text/event-stream", {SSE_CONTENT("a"), SSE_CONTENT("b"), "data: [DONE]\n\n", NULL}, 0, false},
    {"nodone", 200, "text/event-stream", {SSE_CONTENT("a"), SSE_USAGE(3, 1), NULL}, 0, false},
    {"cut", 200, "text/event-stream", {SSE_CONTENT("a"), SSE_CONTENT("b"), NULL}, 1, true},
    {"errchunk",
     200,
     "text/event-stream",
     {SSE_CONTENT("a"), "data: {\"error\":{\"message\":\"context length exceeded\"}}\n\n", NULL},
     0,
     false},
    {"slow", 200, "text/event-stream", {SSE_CONTENT("a"), SSE_USAGE(1, 1), "data: [DONE]\n\n", NULL}, 400, false},
};

typedef struct sse_server {
    struct MHD_Daemon *d;
    int port;
    pthread_mutex_t mu;
    char *bodies[256]; // every request body, in arrival order
    int n_bodies;
    int n_status; // GET /v1/status answered so far
} sse_server;

typedef struct sse_req {
    rp_bench_buf body;
} sse_req;

typedef struct sse_reply {
    const sse_script *sc;
    int part;
    size_t off;
} sse_reply;

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    sse_reply *r = cls;
    const char *p = r->sc->parts[r->part];
    if (!p)
        return r->sc->cut ? MHD_CONTENT_READER_END_WITH_ERROR : MHD_CONTENT_READER_END_OF_STREAM;
    if (r->off == 0 && r->sc->delay_ms)
        usleep((useconds_t)r->sc->delay_ms * 1000);
    size_t n = strlen(p) - r->off;
    if (n > max)
        n = max;
    memcpy(buf, p + r->off, n);
    r->off += n;
    if (r->off == strlen(p)) {
        r->part++;
        r->off = 0;
    }
    return (ssize_t)n;
}

static void sse_reply_free(void *cls)
{
    rp_free(cls);
}

static void sse_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)c;
    (void)toe;
    sse_req *rq = *con_cls;
    if (rq) {
        rp_bench_buf_deinit(&rq->body);
        rp_free(rq);
    }
    *con_cls = NULL;
}

static const sse_script *sse_find(const char *name, size_t n)
{
    for (size_t i = 0; i < sizeof(sse_scripts) / sizeof(*sse_scripts); i++)
        if (strlen(sse_scripts[i].name) == n && memcmp(sse_scripts[i].name, name, n) == 0)
            return &sse_scripts[i];
    return NULL;
}

static enum MHD_Result sse_handle(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
    (void)version;
    sse_server *srv = cls;
    sse_req *rq = *con_cls;
    if (!rq) {
        rq = rp_calloc(1, sizeof(*rq));
        if (!rq)
            return MHD_NO;
        *con_cls = rq;
        return MHD_YES;
    }
    if (*upload_size) {
        rp_bench_buf_add(&rq->body, upload, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    struct MHD_Response *resp = NULL;
    int status = 404;
    const char *ctype = "text/plain";
    const char *name = strncmp(url, "/s/", 3) == 0 ? url + 3 : "";
    const char *slash = strchr(name, '/');
    const char *rest = slash ? slash : "";
    if (strcmp(method, "GET") == 0 && strcmp(rest, "/v1/status") == 0) {
        // A Rapid-like status whose counters grow by a fixed amount per reading.
        pthread_mutex_lock(&srv->mu);
        int k = ++srv->n_status;
        pthread_mutex_unlock(&srv->mu);
        char st[512];
        snprintf(st, sizeof(st),
                 "{\"engine\":{\"steps\":%d,\"step_seconds\":%g,\"forward_seconds\":%g,\"prefill_chunk\":8,"
                 "\"forward_by_batch\":[{\"tokens_min\":1,\"tokens_max\":1,\"steps\":%d,\"tokens\":%d,"
                 "\"seconds\":%g,\"min_seconds\":0.001}]}}",
                 10 * k, 0.5 * k, 0.25 * k, 10 * k, 10 * k, 0.25 * k);
        resp = MHD_create_response_from_buffer(strlen(st), st, MHD_RESPMEM_MUST_COPY);
        status = 200;
        ctype = "application/json";
    } else if (strcmp(method, "GET") == 0 && strcmp(rest, "/v1/models") == 0) {
        static const char models[] = "{\"object\":\"list\",\"data\":[]}";
        resp = MHD_create_response_from_buffer(strlen(models), (void *)models, MHD_RESPMEM_PERSISTENT);
        status = 200;
        ctype = "application/json";
    } else if (strcmp(method, "POST") == 0 && strcmp(rest, "/v1/chat/completions") == 0) {
        const char *body = rq->body.p ? rq->body.p : "";
        pthread_mutex_lock(&srv->mu);
        if (srv->n_bodies < 256)
            srv->bodies[srv->n_bodies++] = rp_strdup(body);
        pthread_mutex_unlock(&srv->mu);
        const sse_script *sc = sse_find(name, (size_t)(slash - name));
        if (!sc && slash - name == 4 && memcmp(name, "auto", 4) == 0)
            sc = sse_find(strstr(body, "\"tools\"") ? "tool" : "good", 4);
        if (sc)
            ctype = sc->content_type;
        if (sc && strncmp(sc->content_type, "text/event-stream", 17) == 0) {
            sse_reply *r = rp_calloc(1, sizeof(*r));
            if (!r)
                return MHD_NO;
            r->sc = sc;
            resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 1024, sse_read, r, sse_reply_free);
            status = sc->status;
        } else if (sc) {
            resp = MHD_create_response_from_buffer(strlen(sc->parts[0]), (void *)sc->parts[0], MHD_RESPMEM_PERSISTENT);
            status = sc->status;
        }
    }
    if (!resp) {
        resp = MHD_create_response_from_buffer(9, (void *)"not found", MHD_RESPMEM_PERSISTENT);
        status = 404;
        ctype = "text/plain";
    }
    MHD_add_response_header(resp, "Content-Type", ctype);
    enum MHD_Result ret = MHD_queue_response(conn, (unsigned)status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static void sse_server_start(sse_server *s)
{
    memset(s, 0, sizeof(*s));
    pthread_mutex_init(&s->mu, NULL);
    struct sockaddr_in addr = {0};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    s->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION, 0, NULL, NULL, sse_handle,
                            s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr, MHD_OPTION_NOTIFY_COMPLETED,
                            sse_completed, NULL, MHD_OPTION_END);
    assert_non_null(s->d);
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    assert_non_null(info);
    s->port = info->port;
    assert_true(s->port > 0);
}

static void sse_server_stop(sse_server *s)
{
    MHD_stop_daemon(s->d);
    for (int i = 0; i < s->n_bodies; i++)
        rp_free(s->bodies[i]);
    pthread_mutex_destroy(&s->mu);
    memset(s, 0, sizeof(*s));
}

// The base URL of a script ("http://127.0.0.1:PORT/s/NAME"), in a rotating buffer.
static const char *sse_url(const sse_server *s, const char *script)
{
    static char buf[4][128];
    static int slot;
    slot = (slot + 1) % 4;
    snprintf(buf[slot], sizeof(buf[slot]), "http://127.0.0.1:%d/s/%s", s->port, script);
    return buf[slot];
}

// A loopback port nothing listens on (bound, then closed).
static int closed_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in addr = {0};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
    socklen_t len = sizeof(addr);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&addr, &len), 0);
    close(fd);
    return ntohs(addr.sin_port);
}

#endif
