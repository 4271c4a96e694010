/*
 * wire_client.h - a raw HTTP/1.1 client over loopback sockets for the
 * in-process server tests: one request per connection (Connection: close),
 * the response read to the end (interim 1xx replies skipped), chunked bodies
 * de-chunked, header lookup; connections from another loopback address.
 * The test defines `wire_port` (the server's port) before including it
 * (wire_server.h does).
 */
#ifndef RP_TEST_WIRE_CLIENT_H
#define RP_TEST_WIRE_CLIENT_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

typedef struct wire_resp {
    int status;
    char head[8192];
    char *body; // de-chunked, NUL-terminated (free it)
    size_t len;
} wire_resp;

// A connection to the server from the loopback address src ("127.0.0.2"; NULL: the default).
static int wire_dial_from(const char *src)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct timeval tv = {60, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (src) {
        struct sockaddr_in b = {0};
        b.sin_family = AF_INET;
        assert_int_equal(inet_pton(AF_INET, src, &b.sin_addr), 1);
        assert_int_equal(bind(fd, (struct sockaddr *)&b, sizeof(b)), 0);
    }
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)wire_port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    return fd;
}

static int wire_dial(void)
{
    return wire_dial_from(NULL);
}

static void wire_send(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0)
            return; // the server may close early
        p += w;
        n -= (size_t)w;
    }
}

// A response header's value (static buffer), NULL if absent.
static const char *wire_header(const wire_resp *r, const char *name)
{
    static char val[512];
    size_t nl = strlen(name);
    for (const char *p = strstr(r->head, "\r\n"); p && p[2]; p = strstr(p + 2, "\r\n")) {
        if (strncasecmp(p + 2, name, nl) == 0 && p[2 + nl] == ':') {
            const char *v = p + 3 + nl;
            while (*v == ' ')
                v++;
            size_t k = strcspn(v, "\r");
            snprintf(val, sizeof(val), "%.*s", (int)k, v);
            return val;
        }
    }
    return NULL;
}

// Reads the whole response (the server closes the connection after it).
static void wire_read(int fd, wire_resp *r)
{
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (n + 4096 > cap)
            buf = realloc(buf, cap *= 2);
        ssize_t k = recv(fd, buf + n, cap - n - 1, 0);
        if (k <= 0)
            break;
        n += (size_t)k;
    }
    buf[n] = 0;
    memset(r, 0, sizeof(*r));
    char *start = buf;
    while (strncmp(start, "HTTP/1.1 1", 10) == 0 && strstr(start, "\r\n\r\n")) // interim replies
        start = strstr(start, "\r\n\r\n") + 4;
    n -= (size_t)(start - buf);
    memmove(buf, start, n + 1);
    char *end = strstr(buf, "\r\n\r\n");
    assert_non_null(end);
    size_t hl = (size_t)(end - buf);
    assert_true(hl < sizeof(r->head));
    memcpy(r->head, buf, hl);
    r->head[hl] = 0;
    assert_int_equal(sscanf(buf, "HTTP/1.%*d %d", &r->status), 1);
    const char *b = end + 4;
    size_t bl = n - (size_t)(b - buf);
    r->body = malloc(bl + 1);
    const char *te = wire_header(r, "Transfer-Encoding");
    if (te && strcasecmp(te, "chunked") == 0) {
        size_t o = 0;
        const char *p = b;
        for (;;) {
            unsigned long cl = strtoul(p, NULL, 16);
            p = strstr(p, "\r\n");
            if (!p || cl == 0)
                break;
            p += 2;
            memcpy(r->body + o, p, cl);
            o += cl;
            p += cl + 2;
        }
        r->len = o;
    } else {
        memcpy(r->body, b, bl);
        r->len = bl;
    }
    r->body[r->len] = 0;
    free(buf);
}

// Sends the request head (and body) on a new connection; returns the socket.
static int wire_send_request(const char *method, const char *path, const char *headers, const char *body)
{
    int fd = wire_dial();
    char head[1024];
    int hn = snprintf(head, sizeof(head),
                      "%s %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n%s%sContent-Length: %zu\r\n\r\n",
                      method, path, headers ? headers : "", body ? "Content-Type: application/json\r\n" : "",
                      body ? strlen(body) : 0);
    wire_send(fd, head, (size_t)hn);
    if (body)
        wire_send(fd, body, strlen(body));
    return fd;
}

static void wire_request(const char *method, const char *path, const char *headers, const char *body, wire_resp *r)
{
    int fd = wire_send_request(method, path, headers, body);
    wire_read(fd, r);
    close(fd);
}

// Sends a streaming request and returns the socket once its first SSE frame has arrived.
__attribute__((unused)) static int wire_open_stream(const char *path, const char *headers, const char *body)
{
    int fd = wire_send_request("POST", path, headers, body);
    char buf[8192] = "";
    size_t n = 0;
    while (n < sizeof(buf) - 1) {
        ssize_t k = recv(fd, buf + n, sizeof(buf) - 1 - n, 0);
        if (k <= 0)
            fail_msg("the stream ended before its first frame: %s", buf);
        n += (size_t)k;
        buf[n] = 0;
        if (strstr(buf, "\n\n"))
            break;
    }
    assert_non_null(strstr(buf, "200 OK"));
    return fd;
}

#endif
