/*
 * test_http_edges.c - the HTTP layer's edges, on the real server in-process
 * (bundled tiny model, loopback, raw sockets; an API key and a 64 KiB body
 * limit):
 *
 *   - answers given before the body (413, 401, 404) reach a client that
 *     writes its whole body before it reads, and "Expect: 100-continue" is
 *     still answered at once;
 *   - the log line of a request whose path holds %0a, %1b, a tab, raw control
 *     and non-UTF-8 bytes is one line, escaped (the server's stderr goes to a
 *     file while that test runs);
 *   - errors quoting client bytes (a path with %ff, a 700-character "é" role
 *     cut at the message's end) are 4xx with valid JSON and their message, in
 *     both APIs;
 *   - framing: two different Content-Lengths, Content-Length with
 *     Transfer-Encoding, two Transfer-Encodings (400), a coding other than
 *     chunked (501), a long target (414), a large head (431), whitespace
 *     before a header's colon (400), all JSON;
 *   - protocol errors that libmicrohttpd finds (bad chunking, a chunk too
 *     large, a bad Content-Length value, a header line without a colon, a
 *     head past its buffer) and bad first request lines (HTTP/2.0, HTTP/2's
 *     preface, HTTP/3.0, 0.9, no version, garbage, a control byte in the
 *     method, a line past the buffer), also on a kept-alive connection: each
 *     is exactly one JSON error reply in the route's API shape, then close;
 *   - a raw NUL byte in the JSON body is 400;
 *   - a client that half-closes after its request still gets its reply,
 *     whole or streamed, while one that closes cancels its generation, and so
 *     does one that half-closes and then closes;
 *   - /v1/status needs the key, /health and /metrics do not, and /metrics
 *     names no path.
 */
#include "test_util.h"

#include "wire_server.h"

#include <errno.h>
#include <fcntl.h>

#define KEY "edge-key"
#define AUTH "Authorization: Bearer " KEY "\r\n"

#define ORIGIN "https://app.example"

static void allow_origins(rp_server_params *sp)
{
    sp->allowed_origins = ORIGIN ", http://localhost:3000"; // (blanks around the commas are trimmed)
}

static int setup(void **state)
{
    (void)state;
    wire_ctx = 8192; // a generation that runs a few seconds (the half-close tests)
    return wire_server_start_tuned(KEY, 64 * 1024, allow_origins);
}

static int teardown(void **state)
{
    (void)state;
    wire_server_stop();
    return 0;
}

/* ---- helpers ----------------------------------------------------------------- */

// Sends all n bytes (false when the server stopped taking them: reset, or nothing taken for 20 s).
static bool send_all(int fd, const char *p, size_t n)
{
    struct timeval tv = {20, 0};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0)
            return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

// One request written whole (head then body) before anything is read; half_close shuts the
// sending side after it. The whole request must go out; then the reply is read. (A small send
// buffer: what the sockets can hold is far less than the large bodies below.)
static void exchange(const char *head, const char *body, size_t body_len, bool half_close, wire_resp *r)
{
    int fd = wire_dial();
    int sndbuf = 256 * 1024;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
    assert_true(send_all(fd, head, strlen(head)));
    if (body_len && !send_all(fd, body, body_len))
        fail_msg("the server stopped reading the body (%s)", strerror(errno));
    if (half_close)
        shutdown(fd, SHUT_WR);
    wire_read(fd, r);
    close(fd);
}

static void expect_error(const wire_resp *r, int status, bool anthropic)
{
    if (r->status != status)
        fail_msg("status %d, expected %d: %.300s", r->status, status, r->body);
    json_t *v = body_json(r);
    json_t *err = json_object_get(v, "error");
    const char *msg = json_string_value(json_object_get(err, "message"));
    if (!msg || !*msg)
        fail_msg("no error message: %.300s", r->body);
    assert_non_null(json_string_value(json_object_get(err, "type")));
    if (anthropic)
        assert_string_equal(json_string_value(json_object_get(v, "type")), "error");
    else
        assert_true(json_object_get(err, "param") && json_object_get(err, "code"));
    json_decref(v);
}

static char *filled(size_t n, char c)
{
    char *b = malloc(n + 1);
    memset(b, c, n);
    b[n] = 0;
    return b;
}

/* ---- early answers ------------------------------------------------------------- */

static void test_early_errors_reach_writers(void **state)
{
    (void)state;
    wire_resp r;
    char head[512];
    size_t big = (size_t)24 << 20; // past the 64 KiB limit and past what the socket buffers hold
    char *body = filled(big, ' ');
    snprintf(head, sizeof(head),
             "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" AUTH
             "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
             big);
    exchange(head, body, big, false, &r);
    expect_error(&r, 413, false);
    free(r.body);

    // 401 and 404 before such a body.
    size_t mid = big;
    snprintf(head, sizeof(head),
             "POST /v1/messages HTTP/1.1\r\nHost: x\r\nConnection: close\r\nx-api-key: wrong\r\n"
             "Content-Length: %zu\r\n\r\n",
             mid);
    exchange(head, body, mid, false, &r);
    expect_error(&r, 401, true);
    free(r.body);
    snprintf(head, sizeof(head),
             "POST /nowhere HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: %zu\r\n\r\n", mid);
    exchange(head, body, mid, false, &r);
    expect_error(&r, 404, false);
    free(r.body);

    // A chunked body past the limit, written whole.
    int fd = wire_dial();
    int sndbuf = 256 * 1024;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
    const char *ch = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" AUTH
                     "Transfer-Encoding: chunked\r\n\r\n";
    assert_true(send_all(fd, ch, strlen(ch)));
    for (int i = 0; i < 1024; i++) { // 16 MiB
        char len[32];
        int n = snprintf(len, sizeof(len), "%x\r\n", 16384);
        assert_true(send_all(fd, len, (size_t)n) && send_all(fd, body, 16384) && send_all(fd, "\r\n", 2));
    }
    assert_true(send_all(fd, "0\r\n\r\n", 5));
    wire_read(fd, &r);
    close(fd);
    expect_error(&r, 413, false);
    free(r.body);

    // A client that asks "Expect: 100-continue" is answered before it sends the body.
    fd = wire_dial();
    snprintf(head, sizeof(head),
             "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" AUTH
             "Expect: 100-continue\r\nContent-Length: %zu\r\n\r\n",
             big);
    assert_true(send_all(fd, head, strlen(head)));
    char first[16] = "";
    assert_true(recv(fd, first, 12, MSG_WAITALL) == 12);
    assert_memory_equal(first, "HTTP/1.1 413", 12);
    close(fd);
    free(body);
    still_serving();
}

/* ---- log lines ------------------------------------------------------------------ */

// The file's text (NUL-terminated; bytes kept as they are).
static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf = malloc(1 << 20);
    *len = f ? fread(buf, 1, (1 << 20) - 1, f) : 0;
    buf[*len] = 0;
    if (f)
        fclose(f);
    return buf;
}

static void test_log_line_escaped(void **state)
{
    (void)state;
    // The server's log lines go to a file while this runs (no assertion until stderr is back).
    char path[64];
    snprintf(path, sizeof(path), "/tmp/rapid-edges-%d.log", (int)getpid());
    int lf = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(lf >= 0);
    fflush(stderr);
    int saved = dup(2);
    dup2(lf, 2);
    close(lf);
    rp_log_level level = rp_log_get_level();
    rp_log_set_level(RP_LOG_INFO);
    server->params.quiet = false; // the per-request log lines

    int fd = wire_dial();
    const char req[] = "GET /x%0aforged%20line%1b[31m%09tab\x01\xff\xc3\xa9%e2%80%ae HTTP/1.1\r\nHost: x\r\n"
                       "Connection: close\r\n\r\n";
    bool sent = send_all(fd, req, sizeof(req) - 1);
    wire_resp r;
    wire_read(fd, &r);
    close(fd);
    char want[64];
    snprintf(want, sizeof(want), "rapid: #%s GET ", wire_header(&r, "x-request-id"));
    // The line is written once the request is released (just after the reply): wait for it.
    char *log = NULL, *at = NULL;
    size_t len = 0;
    for (int i = 0; i < 500 && !at; i++) {
        free(log);
        fflush(stderr);
        log = read_file(path, &len);
        at = strstr(log, want);
        if (!at)
            usleep(10000);
    }
    server->params.quiet = true;
    rp_log_set_level(level);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    unlink(path);

    assert_true(sent);
    expect_error(&r, 404, false);
    free(r.body);
    if (!at)
        fail_msg("no log line '%s' in: %s", want, log);
    char *eol = strchr(at, '\n');
    assert_non_null(eol);
    *eol = 0;
    if (!strstr(at, "/x\\nforged\\x20line\\x1B[31m\\ttab\\x01\\xFF\xc3\xa9\\u{202E} 404 | "))
        fail_msg("the log line is not escaped as expected: %s", at);
    *eol = '\n';
    // Nothing forged a line or sent an escape: the raw bytes are nowhere in the log.
    assert_null(memchr(log, 0x1b, len));
    assert_null(memchr(log, 0x01, len));
    assert_null(memchr(log, 0xff, len));
    int lines = 0;
    for (char *p = log; (p = strstr(p, "forged")); p++)
        lines++;
    assert_int_equal(lines, 1);
    free(log);
}

/* ---- client bytes quoted in errors ---------------------------------------------- */

static void test_client_bytes_in_errors(void **state)
{
    (void)state;
    wire_resp r;
    wire_request("POST", "/v1/messages%ff", AUTH, "{}", &r);
    expect_error(&r, 404, true);
    free(r.body);
    wire_request("POST", "/v1/chat%ff%c3", AUTH, "{}", &r);
    expect_error(&r, 404, false);
    free(r.body);
    wire_request("GET", "/v1/models/%ff%fe", AUTH, NULL, &r);
    expect_error(&r, 404, false);
    free(r.body);
    // A role of 700 "é" (and one byte more, so the message's end cuts a character in two
    // either way) in each API: 400, with the message.
    static const char *const fmt[] = {
        "{\"max_tokens\":4,\"messages\":[{\"role\":\"%s%s\",\"content\":\"hi\"}]}",
        "{\"max_tokens\":4,\"input\":[{\"type\":\"message\",\"role\":\"%s%s\",\"content\":\"hi\"}]}",
    };
    static const char *const paths[] = {"/v1/chat/completions", "/v1/messages", "/v1/responses"};
    rp_buf role;
    rp_buf_init(&role);
    for (int i = 0; i < 700; i++)
        rp_buf_puts(&role, "\xc3\xa9");
    for (int p = 0; p < 3; p++) {
        for (int odd = 0; odd < 2; odd++) {
            char *body = malloc(role.len + 256);
            sprintf(body, fmt[p == 2], odd ? "x" : "", role.data);
            wire_request("POST", paths[p], AUTH, body, &r);
            expect_error(&r, 400, p == 1);
            free(r.body);
            free(body);
        }
    }
    rp_buf_deinit(&role);
    still_serving();
}

/* ---- framing -------------------------------------------------------------------- */

// A raw request (head and body as one string) on a connection of its own.
static void raw(const char *req, wire_resp *r)
{
    exchange(req, NULL, 0, false, r);
}

#define CHAT_SMALL "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":2}"

static void test_framing(void **state)
{
    (void)state;
    wire_resp r;
    char req[1024];
    snprintf(req, sizeof(req),
             "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" AUTH
             "Content-Length: 2\r\nContent-Length: %zu\r\n\r\n%s",
             strlen(CHAT_SMALL), CHAT_SMALL);
    raw(req, &r);
    expect_error(&r, 400, false);
    assert_non_null(strstr(r.body, "Content-Length"));
    assert_string_equal(wire_header(&r, "Connection"), "close");
    free(r.body);
    // The same length twice is one length.
    snprintf(req, sizeof(req),
             "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" AUTH
             "Content-Length: %zu\r\nContent-Length: %zu\r\n\r\n%s",
             strlen(CHAT_SMALL), strlen(CHAT_SMALL), CHAT_SMALL);
    raw(req, &r);
    assert_int_equal(r.status, 200);
    free(r.body);
    raw("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" AUTH
        "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        &r);
    expect_error(&r, 400, false);
    free(r.body);
    raw("POST /v1/messages HTTP/1.1\r\nHost: x\r\n" AUTH
        "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        &r);
    expect_error(&r, 400, true);
    free(r.body);
    raw("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" AUTH "Transfer-Encoding: gzip\r\n\r\n{}", &r);
    expect_error(&r, 501, false);
    free(r.body);

    // A long target and a large head: ours, in JSON (libmicrohttpd's own HTML answers
    // start past its 256 KiB connection buffer).
    char *pad = filled(20000, 'a');
    rp_buf b;
    rp_buf_init(&b);
    rp_buf_printf(&b, "GET /v1/%s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", pad);
    raw(b.data, &r);
    expect_error(&r, 414, false);
    free(r.body);
    rp_buf_reset(&b);
    rp_buf_puts(&b, "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n");
    for (int i = 0; i < 4; i++)
        rp_buf_printf(&b, "X-Pad-%d: %s\r\n", i, pad);
    rp_buf_puts(&b, "\r\n");
    raw(b.data, &r);
    expect_error(&r, 431, false);
    free(r.body);
    rp_buf_deinit(&b);
    free(pad);

    // Whitespace between a header's name and its colon (RFC 9112 5.1: reject).
    raw("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" AUTH "Content-Length : 2\r\n\r\n{}", &r);
    expect_error(&r, 400, false);
    free(r.body);
    still_serving();
}

/* ---- protocol errors: libmicrohttpd's own, and the first request line ------------- */

// req is answered by exactly one JSON error reply with `status` (in the Anthropic shape when
// anthropic), that says so in its message (want_in_msg), and the connection closes.
static void expect_protocol_error(const char *req, int status, bool anthropic, const char *want_in_msg)
{
    wire_resp r;
    exchange(req, NULL, 0, false, &r);
    if (strstr(r.body, "<html"))
        fail_msg("an HTML page for %.40s: %.300s", req, r.body);
    expect_error(&r, status, anthropic); // the whole rest of the stream is one JSON value
    assert_string_equal(wire_header(&r, "Content-Type"), "application/json");
    assert_string_equal(wire_header(&r, "Connection"), "close");
    if (want_in_msg && !strstr(r.body, want_in_msg))
        fail_msg("'%s' not in the message: %s", want_in_msg, r.body);
    free(r.body);
}

static void test_protocol_errors_json(void **state)
{
    (void)state;
    // Found by libmicrohttpd once the request line has come (the logger hook, proto.c).
    expect_protocol_error("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" AUTH
                          "Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
                          400, false, "chunked");
    expect_protocol_error("POST /v1/messages HTTP/1.1\r\nHost: x\r\n" AUTH
                          "Transfer-Encoding: chunked\r\n\r\n2\r\n{}XX0\r\n\r\n",
                          400, true, "chunked");
    expect_protocol_error("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" AUTH
                          "Transfer-Encoding: chunked\r\n\r\nffffffffffffffffffff\r\n",
                          413, false, NULL);
    // A bad Content-Length value (libmicrohttpd sent its page twice in one stream).
    expect_protocol_error("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" AUTH "Content-Length: abc\r\n\r\n", 400,
                          false, "Content-Length");
    expect_protocol_error("POST /v1/messages HTTP/1.1\r\nHost: x\r\n" AUTH "Content-Length: -1\r\n\r\n", 400, true,
                          "Content-Length");
    expect_protocol_error("GET /health HTTP/1.1\r\nHost: x\r\nNoColonHere\r\n\r\n", 400, false, "malformed");
    // The first request line (the gate, gate.c).
    expect_protocol_error("GET /health HTTP/2.0\r\nHost: x\r\n\r\n", 505, false, "HTTP/2.0");
    expect_protocol_error("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505, false, NULL); // HTTP/2's preface
    expect_protocol_error("POST /v1/messages HTTP/3.0\r\nHost: x\r\n\r\n", 505, true, "HTTP/3.0");
    expect_protocol_error("GET /health HTTP/0.9\r\n\r\n", 505, false, NULL);
    expect_protocol_error("GET /health FOO/1.1\r\nHost: x\r\n\r\n", 400, false, "version");
    expect_protocol_error("GET /health\r\n\r\n", 400, false, "request line");
    expect_protocol_error("GARBAGE\r\n\r\n", 400, false, "request line");
    expect_protocol_error("G\x01T /health HTTP/1.1\r\nHost: x\r\n\r\n", 400, false, "request line");
    expect_protocol_error("\r\nGET /health HTTP/7.1\r\n\r\n", 505, false, NULL); // after an empty line
    wire_resp ok; // a later minor version is served as HTTP/1.1
    raw("GET /health HTTP/1.2\r\nHost: x\r\nConnection: close\r\n\r\n", &ok);
    assert_int_equal(ok.status, 200);
    free(ok.body);

    // Past libmicrohttpd's 256 KiB buffer: a request line, a head.
    size_t big = 300 * 1024;
    char *pad = filled(big, 'a');
    rp_buf b;
    rp_buf_init(&b);
    rp_buf_printf(&b, "GET /v1/%s HTTP/1.1\r\nHost: x\r\n\r\n", pad);
    expect_protocol_error(b.data, 414, false, NULL);
    rp_buf_reset(&b);
    rp_buf_printf(&b, "GET /health HTTP/1.1\r\nHost: x\r\nX-Pad: %s\r\n\r\n", pad);
    expect_protocol_error(b.data, 431, false, NULL);
    rp_buf_deinit(&b);
    free(pad);

    // On a kept-alive connection, after a good request: one 200, then one JSON 505.
    int fd = wire_dial();
    const char two[] = "GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /health HTTP/2.0\r\nHost: x\r\n\r\n";
    assert_true(send_all(fd, two, sizeof(two) - 1));
    char buf[4096];
    size_t n = 0;
    for (ssize_t k; n < sizeof(buf) - 1 && (k = recv(fd, buf + n, sizeof(buf) - 1 - n, 0)) > 0;)
        n += (size_t)k;
    buf[n] = 0;
    close(fd);
    char *second = strstr(buf, "HTTP/1.1 505 ");
    if (strncmp(buf, "HTTP/1.1 200 ", 13) != 0 || !second || strstr(buf, "<html"))
        fail_msg("not a 200 then a JSON 505: %s", buf);
    assert_null(strstr(second + 1, "HTTP/1.1 505 ")); // one reply each
    assert_true(strstr(buf + 1, "HTTP/1.1 200 ") == NULL);
    json_error_t je;
    json_t *v = json_loads(strstr(second, "\r\n\r\n") + 4, 0, &je);
    if (!v)
        fail_msg("the 505's body is not JSON (%s): %s", je.text, second);
    json_decref(v);
    still_serving();
}

static void test_nul_byte_refused(void **state)
{
    (void)state;
    static const char body[] = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":4\0}";
    char head[512];
    snprintf(head, sizeof(head),
             "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" AUTH
             "Content-Length: %zu\r\n\r\n",
             sizeof(body) - 1);
    wire_resp r;
    exchange(head, body, sizeof(body) - 1, false, &r);
    expect_error(&r, 400, false);
    assert_non_null(strstr(r.body, "NUL"));
    free(r.body);
    static const char body2[] = "{\"messages\":[{\"role\":\"user\",\"content\":\"h\0i\"}],\"max_tokens\":4}";
    snprintf(head, sizeof(head),
             "POST /v1/messages HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" AUTH "Content-Length: %zu\r\n\r\n",
             sizeof(body2) - 1);
    exchange(head, body2, sizeof(body2) - 1, false, &r);
    expect_error(&r, 400, true);
    free(r.body);
}

/* ---- half-close and close --------------------------------------------------------- */

static void half_closed(const char *path, const char *body, wire_resp *r)
{
    char head[512];
    snprintf(head, sizeof(head),
             "POST %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" AUTH "anthropic-version: 2023-06-01\r\n"
             "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
             path, strlen(body));
    exchange(head, body, strlen(body), true, r);
}

#define GEN(extra)                                                                                                     \
    "{\"messages\":[{\"role\":\"user\",\"content\":\"Tell me a joke.\"}],\"max_tokens\":40,\"ignore_eos\":true" extra  \
    "}"

static void test_half_close_is_not_gone(void **state)
{
    (void)state;
    wire_resp r;
    half_closed("/v1/chat/completions", GEN(""), &r);
    if (r.status != 200)
        fail_msg("half-closed, whole reply: %d %.300s", r.status, r.body);
    json_t *v = body_json(&r);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(v, "usage"), "completion_tokens")), 40);
    json_decref(v);
    free(r.body);

    half_closed("/v1/chat/completions", GEN(",\"stream\":true"), &r);
    assert_int_equal(r.status, 200);
    assert_true(r.len > 14 && strcmp(r.body + r.len - 14, "data: [DONE]\n\n") == 0);
    free(r.body);

    half_closed("/v1/messages", GEN(",\"stream\":true"), &r);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "event: message_stop\n"));
    free(r.body);

    half_closed("/v1/responses", "{\"input\":\"Tell me a joke.\",\"max_output_tokens\":40}", &r);
    assert_int_equal(r.status, 200);
    free(r.body);
}

// A client that closes (not half-closes) while its whole reply is being generated cancels it.
static void test_close_cancels_whole_reply(void **state)
{
    (void)state;
    wait_idle();
    rp_engine_stats before, after;
    rp_engine_get_stats(engine, &before);
    int fd = wire_send_request("POST", "/v1/chat/completions", AUTH,
                               "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":100000,"
                               "\"ignore_eos\":true,\"temperature\":2,\"seed\":1}");
    wait_running();
    close(fd);
    wait_idle();
    rp_engine_get_stats(engine, &after);
    assert_true(after.requests_cancelled >= before.requests_cancelled + 1);
    still_serving();
}

// A client that half-closes, then closes while its whole reply is generated, cancels it too
// (the probe is written again now and then).
static void test_half_close_then_close_cancels(void **state)
{
    (void)state;
    wait_idle();
    rp_engine_stats before, after;
    rp_engine_get_stats(engine, &before);
    int fd = wire_send_request("POST", "/v1/chat/completions", AUTH,
                               "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":100000,"
                               "\"ignore_eos\":true,\"temperature\":2,\"seed\":1}");
    shutdown(fd, SHUT_WR);
    wait_running();
    // Read the first probe (so the close below leaves nothing unread: a plain FIN, no reset).
    char buf[64] = "";
    size_t n = 0;
    while (n < sizeof(buf) - 1 && !strstr(buf, "\r\n\r\n")) {
        ssize_t k = recv(fd, buf + n, sizeof(buf) - 1 - n, 0);
        assert_true(k > 0);
        n += (size_t)k;
        buf[n] = 0;
    }
    assert_string_equal(buf, "HTTP/1.1 100 Continue\r\n\r\n");
    close(fd);
    wait_idle();
    rp_engine_get_stats(engine, &after);
    assert_true(after.requests_cancelled >= before.requests_cancelled + 1);
    still_serving();
}

/* ---- who may read what ------------------------------------------------------------- */

static void test_status_needs_key(void **state)
{
    (void)state;
    wire_resp r;
    wire_request("GET", "/v1/status", NULL, NULL, &r);
    expect_error(&r, 401, false);
    free(r.body);
    wire_request("GET", "/v1/status", "x-api-key: " KEY "\r\n", NULL, &r);
    assert_int_equal(r.status, 200);
    free(r.body);
    wire_request("GET", "/health", NULL, NULL, &r);
    assert_int_equal(r.status, 200);
    free(r.body);
    wire_request("GET", "/metrics", NULL, NULL, &r);
    assert_int_equal(r.status, 200);
    // Numbers only: no sample line names a path.
    for (char *line = strtok(r.body, "\n"); line; line = strtok(NULL, "\n"))
        if (line[0] != '#' && strchr(line, '/'))
            fail_msg("a /metrics sample names a path: %s", line);
    free(r.body);
}

/* ---- browsers from other origins (CORS) ------------------------------------------- */

// A preflight from a listed origin is answered 204 without the key, with the path's
// methods and the headers asked for; from another origin 403, for an unknown path 404;
// answers to a listed origin carry Access-Control-Allow-Origin, to others nothing; an
// OPTIONS that is no preflight stays a 405.
static void test_cors(void **state)
{
    (void)state;
    wire_resp r;
    wire_request("OPTIONS", "/v1/chat/completions",
                 "Origin: " ORIGIN "\r\nAccess-Control-Request-Method: POST\r\n"
                 "Access-Control-Request-Headers: authorization, content-type\r\n",
                 NULL, &r);
    assert_int_equal(r.status, 204);
    assert_string_equal(wire_header(&r, "Access-Control-Allow-Origin"), ORIGIN);
    assert_string_equal(wire_header(&r, "Access-Control-Allow-Methods"), "POST, OPTIONS");
    assert_string_equal(wire_header(&r, "Access-Control-Allow-Headers"), "authorization, content-type");
    assert_string_equal(wire_header(&r, "Vary"), "Origin");
    assert_non_null(wire_header(&r, "Access-Control-Max-Age"));
    free(r.body);
    wire_request("OPTIONS", "/", "Origin: http://localhost:3000\r\nAccess-Control-Request-Method: GET\r\n", NULL, &r);
    assert_int_equal(r.status, 204);
    assert_string_equal(wire_header(&r, "Access-Control-Allow-Origin"), "http://localhost:3000");
    assert_string_equal(wire_header(&r, "Access-Control-Allow-Methods"), "GET, HEAD, OPTIONS");
    assert_null(wire_header(&r, "Access-Control-Allow-Headers"));
    free(r.body);

    wire_request("OPTIONS", "/v1/messages", "Origin: https://evil.example\r\nAccess-Control-Request-Method: POST\r\n",
                 NULL, &r);
    expect_error(&r, 403, true);
    assert_non_null(strstr(r.body, "https://evil.example"));
    assert_null(wire_header(&r, "Access-Control-Allow-Origin"));
    free(r.body);
    wire_request("OPTIONS", "/v1/nothing", "Origin: " ORIGIN "\r\nAccess-Control-Request-Method: POST\r\n", NULL, &r);
    expect_error(&r, 404, false);
    free(r.body);
    wire_request("OPTIONS", "/v1/models", NULL, NULL, &r);
    expect_error(&r, 405, false);
    free(r.body);

    wire_request("GET", "/v1/models", "x-api-key: " KEY "\r\nOrigin: " ORIGIN "\r\n", NULL, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(wire_header(&r, "Access-Control-Allow-Origin"), ORIGIN);
    assert_non_null(strstr(wire_header(&r, "Access-Control-Expose-Headers"), "x-request-id"));
    free(r.body);
    wire_request("GET", "/v1/models", "Origin: " ORIGIN "\r\n", NULL, &r); // the key is still needed
    expect_error(&r, 401, false);
    assert_string_equal(wire_header(&r, "Access-Control-Allow-Origin"), ORIGIN); // (so the page can read why)
    free(r.body);
    wire_request("GET", "/health", "Origin: https://evil.example\r\n", NULL, &r);
    assert_int_equal(r.status, 200);
    assert_null(wire_header(&r, "Access-Control-Allow-Origin"));
    free(r.body);
    wire_request("GET", "/health", NULL, NULL, &r);
    assert_null(wire_header(&r, "Access-Control-Allow-Origin"));
    free(r.body);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_early_errors_reach_writers),    cmocka_unit_test(test_log_line_escaped),
        cmocka_unit_test(test_client_bytes_in_errors),        cmocka_unit_test(test_framing),
        cmocka_unit_test(test_protocol_errors_json),          cmocka_unit_test(test_nul_byte_refused),
        cmocka_unit_test(test_half_close_is_not_gone),        cmocka_unit_test(test_close_cancels_whole_reply),
        cmocka_unit_test(test_half_close_then_close_cancels), cmocka_unit_test(test_status_needs_key),
        cmocka_unit_test(test_cors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
