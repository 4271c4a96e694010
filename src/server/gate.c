/*
 * gate.c - the accepting thread: takes each new connection, waits for its
 * first request line without reading it (MSG_PEEK), answers a malformed one
 * in the API's JSON error shape, and hands the others to libmicrohttpd.
 *
 * Why: libmicrohttpd answers a bad request line (no version, HTTP/2.0, a
 * line too long for its buffer) with its own HTML page before any callback
 * reaches the server on that connection, so not even proto.c's logger hook
 * can tell which socket it was. Later requests on a kept-alive connection are
 * proto.c's (the connection's thread has seen a request line by then).
 *
 * Past the connection table's hard limit (rp_conn_full) a new connection is
 * closed at once. libmicrohttpd's own limit is set out of reach: 0.9.75
 * deadlocks when a connection handed to it meets that limit (its
 * new_connection_process_ returns with the cleanup mutex still locked).
 *
 * A connection is recorded in the connection table (conn.c) when accepted,
 * so its limits and its head deadline hold while it waits here: the watchdog
 * shuts an overdue one down, and this thread then reads end-of-stream and
 * closes it. A valid line hands the socket over (rp_conn_handoff, then
 * MHD_add_connection: libmicrohttpd takes it on its own thread, where
 * on_connection adopts the record). A malformed one is answered (proto.c),
 * its sending side shut, and what the client still sends is dropped until it
 * closes, for at most RP_PROTO_DRAIN_S, before the socket is closed.
 *
 * The line checked: optional empty lines, then method SP target SP
 * HTTP/d.d CRLF (RFC 9112 section 3): a method of token characters, a target
 * of any bytes but space, CR and NUL (libmicrohttpd's leniency, kept: the
 * log escapes them), version HTTP/1.x (another major version: 505; a minor
 * past 1 is served as 1.1), at most PEEK_MAX bytes to its end (414).
 */
#include "server_int.h"

#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

#define PEEK_MAX (16384 + 512) // a first request line longer than this: 414
#define BACKOFF_MS 100 // out of descriptors: accept again after this

typedef enum wstate { W_LINE, W_DRAIN } wstate;

typedef struct waiting {
    int fd;
    rp_conn *slot;
    struct sockaddr_storage addr;
    socklen_t addr_len;
    wstate st;
    double until;   // W_DRAIN: when to give up
    size_t dropped; // W_DRAIN: bytes dropped
} waiting;

struct rp_gate {
    int listen_fd, wake[2];
    struct MHD_Daemon *daemon;
    rp_conn_table *conns;
    bool quiet;
    pthread_t thread;
    bool started;
    waiting *w;
    int n, cap;
    struct pollfd *pfd;
};

/* ---- the request line ----------------------------------------------------------- */

typedef enum line_verdict { LINE_MORE, LINE_OK, LINE_BAD } line_verdict;

// Checks the first request line in p[0, n) (what has arrived; full: no more fits).
// LINE_BAD fills e (and *anthropic from the target).
static line_verdict check_line(const char *p, size_t n, bool full, rp_api_error *e, bool *anthropic)
{
    size_t i = 0;
    while (i < n && (p[i] == '\r' || p[i] == '\n'))
        i++;
    const char *nl = memchr(p + i, '\n', n - i);
    if (!nl) {
        if (!full)
            return LINE_MORE;
        rp_api_fail(e, 414, NULL, "uri_too_long", "the request line is longer than %d bytes", PEEK_MAX);
        return LINE_BAD;
    }
    const char *s = p + i, *end = nl;
    if (end > s && end[-1] == '\r')
        end--;
    const char *m = s;
    while (m < end && rp_proto_tchar((unsigned char)*m))
        m++;
    const char *t = m + 1, *te = t;
    while (te < end && *te != ' ' && *te != 0 && *te != '\r')
        te++;
    *anthropic = te - t >= 12 && memcmp(t, "/v1/messages", 12) == 0;
    const char *v = te + 1;
    if (m == s || m >= end || *m != ' ' || te == t || te >= end || *te != ' ') {
        rp_api_fail(e, 400, NULL, "invalid_request",
                    "the request line is malformed (expected: METHOD TARGET HTTP/1.1, single spaces)");
        return LINE_BAD;
    }
    size_t vl = (size_t)(end - v);
    if (vl != 8 || memcmp(v, "HTTP/", 5) != 0 || v[5] < '0' || v[5] > '9' || v[6] != '.' || v[7] < '0' || v[7] > '9') {
        rp_api_fail(e, 400, NULL, "invalid_request", "the request line does not end in an HTTP version (HTTP/1.1)");
        return LINE_BAD;
    }
    if (v[5] != '1') { // HTTP/1.2 and up are served as 1.1 (RFC 9110 section 2.5)
        rp_api_fail(e, 505, NULL, "http_version_not_supported",
                    "HTTP/%c.%c is not spoken here: send HTTP/1.1 (or HTTP/1.0)", v[5], v[7]);
        e->type = "invalid_request_error";
        return LINE_BAD;
    }
    return LINE_OK;
}

/* ---- the waiting connections ------------------------------------------------------ */

static void drop(rp_gate *g, int i)
{
    rp_conn_close(g->conns, g->w[i].slot); // before the descriptor can be reused
    close(g->w[i].fd);
    g->w[i] = g->w[--g->n];
}

static void hand_over(rp_gate *g, int i)
{
    waiting w = g->w[i];
    g->w[i] = g->w[--g->n];
    rp_conn_handoff(g->conns, w.slot);
    // The socket is libmicrohttpd's now, taken or (failing) closed by it.
    if (MHD_add_connection(g->daemon, w.fd, (const struct sockaddr *)&w.addr, w.addr_len) != MHD_YES)
        rp_conn_close(g->conns, rp_conn_adopt(g->conns, w.fd));
}

// Poll reports w readable only once more than n bytes have arrived (or at end of stream),
// so that a line arriving slowly is looked at again when it has grown, not in a loop.
static void wake_after(waiting *w, int n)
{
    setsockopt(w->fd, SOL_SOCKET, SO_RCVLOWAT, &n, sizeof(n));
}

// The first line has arrived, or more of it (revents: poll's): hand over, answer, or wait.
static void on_line(rp_gate *g, int i, short revents)
{
    waiting *w = &g->w[i];
    char buf[PEEK_MAX];
    ssize_t r = recv(w->fd, buf, sizeof(buf), MSG_PEEK | MSG_DONTWAIT);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    if (r <= 0) { // closed before a request, or shut down by the watchdog
        drop(g, i);
        return;
    }
    rp_api_error e;
    bool anthropic = false;
    line_verdict v = check_line(buf, (size_t)r, (size_t)r == sizeof(buf), &e, &anthropic);
    if (v == LINE_MORE) {
        if (revents & (POLLRDHUP | POLLHUP | POLLERR))
            drop(g, i); // ended (or shut down by the watchdog) within its first line
        else
            wake_after(w, (int)r + 1);
        return;
    }
    wake_after(w, 1);
    if (v == LINE_OK) {
        hand_over(g, i);
        return;
    }
    if (!g->quiet)
        rp_proto_log(&e);
    if (!rp_proto_send(w->fd, anthropic ? RP_API_ANTHROPIC : RP_API_OPENAI, &e, 0)) {
        drop(g, i);
        return;
    }
    w->st = W_DRAIN;
    w->until = rp_time_s() + RP_PROTO_DRAIN_S;
}

// An answered connection: drop what it sends until it closes (or the bound).
static void on_drain(rp_gate *g, int i)
{
    waiting *w = &g->w[i];
    char sink[16384];
    for (;;) {
        ssize_t r = recv(w->fd, sink, sizeof(sink), MSG_DONTWAIT);
        if (r > 0 && (w->dropped += (size_t)r) < RP_PROTO_DRAIN_MAX)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) && rp_time_s() < w->until)
            return;
        drop(g, i);
        return;
    }
}

static void on_accept(rp_gate *g, double *backoff_until)
{
    for (;;) {
        if (g->n == g->cap) {
            int cap = g->cap ? 2 * g->cap : 64;
            waiting *nw = rp_realloc(g->w, (size_t)cap * sizeof(*nw));
            struct pollfd *np = nw ? rp_realloc(g->pfd, (size_t)(cap + 2) * sizeof(*np)) : NULL;
            if (nw)
                g->w = nw;
            if (!np)
                return; // out of memory: the connections stay in the listen queue
            g->pfd = np;
            g->cap = cap;
        }
        waiting *w = &g->w[g->n];
        memset(w, 0, sizeof(*w));
        w->addr_len = sizeof(w->addr);
        int fd = accept4(g->listen_fd, (struct sockaddr *)&w->addr, &w->addr_len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
                *backoff_until = rp_time_s() + BACKOFF_MS / 1000.0; // they wait in the listen queue
            return; // EAGAIN: no more; other errors (ECONNABORTED, ...): the next poll retries
        }
        if (rp_conn_full(g->conns)) { // past every margin: no room even for a 503
            rp_conn_hard_limit(g->conns);
            close(fd);
            continue;
        }
        w->fd = fd;
        w->st = W_LINE;
        w->slot = rp_conn_open(g->conns, fd, (const struct sockaddr *)&w->addr);
        g->n++;
    }
}

static void *gate_main(void *arg)
{
    rp_gate *g = arg;
    double backoff_until = 0;
    for (;;) {
        double now = rp_time_s();
        bool listening = now >= backoff_until;
        int np = 0, timeout_ms = -1;
        g->pfd[np++] = (struct pollfd){.fd = g->wake[0], .events = POLLIN};
        g->pfd[np++] = (struct pollfd){.fd = listening ? g->listen_fd : -1, .events = POLLIN};
        if (!listening)
            timeout_ms = (int)((backoff_until - now) * 1000) + 1;
        for (int i = 0; i < g->n; i++) {
            g->pfd[np++] = (struct pollfd){.fd = g->w[i].fd, .events = POLLIN | POLLRDHUP};
            if (g->w[i].st == W_DRAIN) {
                int ms = (int)((g->w[i].until - now) * 1000) + 1;
                if (timeout_ms < 0 || ms < timeout_ms)
                    timeout_ms = ms < 0 ? 0 : ms;
            }
        }
        int r = poll(g->pfd, (nfds_t)np, timeout_ms);
        if (r < 0 && errno != EINTR)
            break;
        if (g->pfd[0].revents)
            break; // rp_gate_stop
        // Waiting connections first (from the end: drop and hand_over move the last into i).
        int n = g->n;
        now = rp_time_s();
        for (int i = n - 1; i >= 0; i--) {
            short ev = g->pfd[2 + i].revents;
            bool ready = ev != 0;
            if (g->w[i].st == W_LINE && ready)
                on_line(g, i, ev);
            else if (g->w[i].st == W_DRAIN && (ready || now >= g->w[i].until))
                on_drain(g, i);
        }
        if (g->pfd[1].revents)
            on_accept(g, &backoff_until);
    }
    return NULL;
}

/* ---- the gate ----------------------------------------------------------------------- */

rp_status rp_gate_start(int listen_fd, struct MHD_Daemon *daemon, rp_conn_table *conns, bool quiet, rp_gate **out)
{
    *out = NULL;
    rp_gate *g = rp_calloc(1, sizeof(*g));
    if (!g)
        return RP_ERR(RP_ERR_NOMEM, "out of memory");
    g->listen_fd = -1;
    g->wake[0] = g->wake[1] = -1;
    g->daemon = daemon;
    g->conns = conns;
    g->quiet = quiet;
    g->pfd = rp_calloc(2, sizeof(*g->pfd));
    int fl = fcntl(listen_fd, F_GETFL);
    if (!g->pfd || pipe2(g->wake, O_CLOEXEC) != 0 || fl < 0 || fcntl(listen_fd, F_SETFL, fl | O_NONBLOCK) != 0) {
        rp_status st = RP_ERR(RP_ERR_IO, "cannot start the accepting thread: %s", strerror(errno));
        rp_gate_stop(g);
        return st;
    }
    g->listen_fd = listen_fd; // before the thread reads it
    int rc = pthread_create(&g->thread, NULL, gate_main, g);
    if (rc) {
        g->listen_fd = -1; // still the caller's
        rp_gate_stop(g);
        return RP_ERR(RP_ERR_NOMEM, "cannot start the accepting thread: %s", strerror(rc));
    }
    g->started = true; // listen_fd is ours from here on
    *out = g;
    return RP_OK;
}

void rp_gate_stop(rp_gate *g)
{
    if (!g)
        return;
    if (g->started) {
        char c = 1;
        ssize_t w = write(g->wake[1], &c, 1);
        (void)w;
        pthread_join(g->thread, NULL);
    }
    while (g->n)
        drop(g, g->n - 1);
    if (g->listen_fd >= 0)
        close(g->listen_fd);
    for (int i = 0; i < 2; i++)
        if (g->wake[i] >= 0)
            close(g->wake[i]);
    rp_free(g->w);
    rp_free(g->pfd);
    rp_free(g);
}
