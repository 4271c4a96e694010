/*
 * proto.c - protocol errors that libmicrohttpd finds itself, answered in the
 * API's JSON error shape instead of its HTML pages.
 *
 * libmicrohttpd parses the request line, the header lines, Content-Length
 * and the chunked framing before any call reaches the server, and answers
 * what is wrong there (400, 413, 414, 431, 505) with a fixed HTML page; it
 * has no option for another body. It does log each such error first, on the
 * connection's own thread ("Error processing request (HTTP response code is
 * N ...)"), before it queues the page. http.c's logger sees that line and,
 * when it knows the connection of the thread (every callback on a
 * connection's thread notes it), calls rp_proto_send: the JSON reply goes
 * straight to the socket and the socket's sending side is shut; then
 * rp_proto_drain reads and drops what the client still sends for a moment,
 * so that the close that follows does not reset the reply away. libmicrohttpd's own page then
 * fails to send (the socket no longer sends) and it closes the connection.
 *
 * The gate (gate.c) answers a malformed first request line the same way.
 *
 * rp_proto_from_mhd turns libmicrohttpd's status and page into our error:
 * the status is kept, the message says what was wrong in words a client
 * author can act on.
 */
#include "server_int.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <sys/socket.h>

#define SEND_WAIT_S 2.0 // the reply is given this long to leave

static const char *reason(int status)
{
    switch (status) {
    case 400:
        return "Bad Request";
    case 404:
        return "Not Found";
    case 413:
        return "Content Too Large";
    case 414:
        return "URI Too Long";
    case 431:
        return "Request Header Fields Too Large";
    case 500:
        return "Internal Server Error";
    case 501:
        return "Not Implemented";
    case 503:
        return "Service Unavailable";
    case 505:
        return "HTTP Version Not Supported";
    default:
        return status < 500 ? "Bad Request" : "Internal Server Error";
    }
}

bool rp_proto_tchar(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

void rp_proto_log(const rp_api_error *e)
{
    rp_log(RP_LOG_INFO, "rapid: - malformed request %d | %s", e->status, e->message);
}

bool rp_proto_from_mhd(unsigned status, const char *page, rp_api_error *e)
{
    const char *p = page ? page : "";
    if (status < 400 || status > 599)
        return false;
    int st = (int)status;
    if (st == 505) {
        rp_api_fail(e, st, NULL, "http_version_not_supported",
                    "the request line names an HTTP version not spoken here: send HTTP/1.1 (or HTTP/1.0)");
        e->type = "invalid_request_error"; // the client's to fix, whatever the status's class
    } else if (st == 414)
        rp_api_fail(e, st, NULL, "uri_too_long", "the request line is too long");
    else if (st == 431)
        rp_api_fail(e, st, NULL, "request_header_fields_too_large", "the request head is too large");
    else if (st == 413)
        rp_api_fail(e, st, NULL, "request_too_large", "the request body (or one chunk of it) is too large");
    else if (strstr(p, "chunked"))
        rp_api_fail(e, st, NULL, "invalid_request", "the request body's chunked encoding is malformed");
    else if (strstr(p, "Content-Length"))
        rp_api_fail(e, st, NULL, "invalid_request", "the Content-Length header is not a valid length");
    else if (strstr(p, "Host"))
        rp_api_fail(e, st, NULL, "invalid_request", "an HTTP/1.1 request needs a Host header");
    else if (st < 500)
        rp_api_fail(e, st, NULL, "invalid_request",
                    "the request is malformed (its request line or a header line is not valid HTTP)");
    else
        rp_api_fail(e, st, NULL, NULL, "the server could not process the request");
    return true;
}

// Waits until fd is ready for `events` or the deadline passes. Returns poll's revents (0: timed out).
static short wait_fd(int fd, short events, double deadline)
{
    for (;;) {
        double left = deadline - rp_time_s();
        if (left <= 0)
            return 0;
        struct pollfd p = {.fd = fd, .events = events};
        int r = poll(&p, 1, (int)(left * 1000) + 1);
        if (r > 0)
            return p.revents;
        if (r == 0 || errno != EINTR)
            return 0;
    }
}

bool rp_proto_send(int fd, rp_api_kind api, const rp_api_error *e, uint64_t request_id)
{
    rp_buf body, msg;
    rp_buf_init(&body);
    rp_buf_init(&msg);
    if (api == RP_API_ANTHROPIC)
        rp_anthropic_error_json(e, &body);
    else
        rp_openai_error_json(e, &body);
    rp_buf_printf(&msg,
                  "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                  "Connection: close\r\n",
                  e->status, reason(e->status), body.len);
    if (request_id)
        rp_buf_printf(&msg, "x-request-id: %llu\r\n", (unsigned long long)request_id);
    rp_buf_puts(&msg, "\r\n");
    rp_buf_append(&msg, body.data, body.len);
    bool sent = !msg.failed && !body.failed;
    size_t off = 0;
    double deadline = rp_time_s() + SEND_WAIT_S;
    while (sent && off < msg.len) {
        ssize_t w = send(fd, msg.data + off, msg.len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            off += (size_t)w;
        } else if (w < 0 && errno == EINTR) {
            continue;
        } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (!(wait_fd(fd, POLLOUT, deadline) & POLLOUT))
                sent = false;
        } else {
            sent = false;
        }
    }
    rp_buf_deinit(&body);
    rp_buf_deinit(&msg);
    shutdown(fd, SHUT_WR); // nothing more is sent: libmicrohttpd's page fails to
    return sent;
}

void rp_proto_drain(int fd)
{
    char sink[16384];
    size_t dropped = 0;
    double deadline = rp_time_s() + RP_PROTO_DRAIN_S;
    while (dropped < RP_PROTO_DRAIN_MAX) {
        ssize_t r = recv(fd, sink, sizeof(sink), MSG_DONTWAIT);
        if (r > 0) {
            dropped += (size_t)r;
        } else if (r < 0 && errno == EINTR) {
            continue;
        } else if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (!wait_fd(fd, POLLIN, deadline))
                return;
        } else {
            return; // end of stream or an error: the client has it all
        }
    }
}
