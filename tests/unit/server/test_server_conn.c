/*
 * test_server_conn.c - connection limits and deadlines, on the real server
 * in-process (bundled tiny model) over real loopback sockets, from several
 * loopback addresses (127.0.0.1, .2, ... are all this host): each test starts
 * a server with small limits (8 connections, 4 per client address).
 *
 *   - slow clients give way: 12 connections from 127.0.0.1 that send half a
 *     request head leave at most 4 open; a normal request from the same
 *     address and from 127.0.0.2 is still answered; at the global limit the
 *     address holding the most waiting connections gives way; one log line
 *     (rate-limited) says so, and /metrics counts it;
 *   - deadlines: half a first request line, half a head, nothing at all, an
 *     idle kept-alive connection and a body that stops coming are all closed
 *     after --timeout;
 *   - every slot of an address busy with a request: its next connection gets
 *     503 with Retry-After in the API's shape, another address is served;
 *   - what the deadlines must not cut: a request (whole or streamed) that
 *     waits in the engine's queue, silent, for longer than the timeout, and a
 *     stream running past it.
 *
 * Waits are bounded (a test fails instead of hanging); nothing is timed.
 */
#include "test_util.h"

#include "wire_server.h"

#include <errno.h>
#include <fcntl.h>

static double tune_timeout;

static void tune(rp_server_params *sp)
{
    sp->max_connections = 8;
    sp->max_connections_per_client = 4;
    sp->timeout_s = tune_timeout;
}

static int start_long(void **state) // deadlines far away: what happens is the limits' doing
{
    (void)state;
    tune_timeout = 60;
    return wire_server_start_tuned(NULL, 0, tune);
}

static int start_short(void **state)
{
    (void)state;
    tune_timeout = 1;
    return wire_server_start_tuned(NULL, 0, tune);
}

static int stop(void **state)
{
    (void)state;
    wire_server_stop();
    return 0;
}

/* ---- helpers ----------------------------------------------------------------- */

// Opens a connection from src and sends `what` (may be "").
static int open_sending(const char *src, const char *what)
{
    int fd = wire_dial_from(src);
    wire_send(fd, what, strlen(what));
    return fd;
}

// True when the server has closed fd (end of stream or reset); does not wait.
static bool closed_by_server(int fd)
{
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

static int count_closed(const int *fds, int n)
{
    int k = 0;
    for (int i = 0; i < n; i++)
        k += closed_by_server(fds[i]);
    return k;
}

// Waits (at most ~15 s) until at least `want` of the n connections are closed; returns how many are.
static int wait_closed(const int *fds, int n, int want)
{
    int k = 0;
    for (int i = 0; i < 1500 && (k = count_closed(fds, n)) < want; i++)
        usleep(10000);
    return k;
}

static void get_health_from(const char *src, wire_resp *r)
{
    int fd = wire_dial_from(src);
    const char *req = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    wire_send(fd, req, strlen(req));
    wire_read(fd, r);
    close(fd);
}

static void expect_health_from(const char *src)
{
    wire_resp r;
    get_health_from(src, &r);
    if (r.status != 200)
        fail_msg("GET /health from %s: %d %s", src, r.status, r.body);
    free(r.body);
}

// A /metrics sample's value (0 when absent).
static double metric(const char *name)
{
    wire_resp r;
    get_health_from("127.0.0.9", &r); // (a fresh address: never limited here)
    free(r.body);
    int fd = wire_dial_from("127.0.0.9");
    const char *req = "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    wire_send(fd, req, strlen(req));
    wire_read(fd, &r);
    close(fd);
    char key[160];
    snprintf(key, sizeof(key), "\n%s ", name);
    const char *at = strstr(r.body, key);
    double v = at ? strtod(at + strlen(key), NULL) : 0;
    free(r.body);
    return v;
}

#define HALF_HEAD "GET /health HTTP/1.1\r\nX-a: "

// The file's text (NUL-terminated).
static char *read_file(const char *path, size_t *len)
{
    fflush(stderr);
    FILE *f = fopen(path, "rb");
    char *buf = calloc(1, 1 << 16);
    *len = f ? fread(buf, 1, (1 << 16) - 1, f) : 0;
    if (f)
        fclose(f);
    return buf;
}

/* ---- tests ------------------------------------------------------------------- */

static void test_slow_clients_give_way(void **state)
{
    (void)state;
    // Stderr to a file while the limits bite (no assertion until it is back).
    char path[64];
    snprintf(path, sizeof(path), "/tmp/rapid-conn-%d.log", (int)getpid());
    int lf = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(lf >= 0);
    fflush(stderr);
    int saved = dup(2);
    dup2(lf, 2);
    close(lf);

    int slow[12];
    for (int i = 0; i < 12; i++)
        slow[i] = open_sending("127.0.0.1", HALF_HEAD);
    int closed = wait_closed(slow, 12, 8); // 4 per client address: the 8 oldest gave way
    wire_resp same, other;
    get_health_from("127.0.0.1", &same);  // a fresh request of that address still gets in
    get_health_from("127.0.0.2", &other); // and another address's
    int closed_after = wait_closed(slow, 12, 9);
    // The watchdog reports within a tick or so: wait for the line.
    bool reported = false;
    for (int i = 0; i < 500 && !reported; i++) {
        size_t len;
        char *log = read_file(path, &len);
        reported = strstr(log, "connection limits (") != NULL;
        free(log);
        if (!reported)
            usleep(10000);
    }

    // At the global limit (8), the address holding the most waiting connections gives way.
    int more[8];
    for (int i = 0; i < 4; i++) {
        more[i] = open_sending("127.0.0.3", HALF_HEAD);
        more[4 + i] = open_sending("127.0.0.4", HALF_HEAD);
    }
    usleep(200000);
    wire_resp third;
    get_health_from("127.0.0.5", &third);
    usleep(600000); // a few watchdog ticks: these evictions are not reported again so soon
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    assert_true(reported);

    assert_int_equal(closed, 8);
    assert_int_equal(closed_after, 9); // the request from 127.0.0.1 took the oldest's place
    if (same.status != 200 || other.status != 200 || third.status != 200)
        fail_msg("GET /health: %d from 127.0.0.1, %d from 127.0.0.2, %d from 127.0.0.5", same.status, other.status,
                 third.status);
    free(same.body);
    free(other.body);
    free(third.body);
    assert_true(metric("rapid_connections_closed_total{reason=\"evicted\"}") >= 10);
    assert_int_equal((int)metric("rapid_connections_limit"), 8);
    for (int i = 0; i < 12; i++)
        close(slow[i]);
    for (int i = 0; i < 8; i++)
        close(more[i]);

    // One line, rate-limited, however many connections gave way.
    size_t len = 0;
    char *log = read_file(path, &len);
    unlink(path);
    int lines = 0;
    for (char *p = log; (p = strstr(p, "connection limits (8 connections, 4 per client address")); p++)
        lines++;
    if (lines != 1)
        fail_msg("%d limit lines in: %.*s", lines, (int)len, log);
    assert_non_null(strstr(log, "closed to make room"));
    free(log);
}

static void test_deadlines(void **state)
{
    (void)state;
    int fds[5];
    fds[4] = open_sending("127.0.0.5", "GET /heal"); // half a first request line (the gate's)
    fds[0] = open_sending("127.0.0.1", HALF_HEAD);
    fds[1] = open_sending("127.0.0.2", ""); // connects, sends nothing
    // A kept-alive connection after its reply.
    fds[2] = open_sending("127.0.0.3", "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    char buf[512];
    size_t n = 0;
    while (n < sizeof(buf) - 1 && !strstr(buf, "{\"status\":\"ok\"}")) {
        ssize_t k = recv(fds[2], buf + n, sizeof(buf) - 1 - n, 0);
        assert_true(k > 0);
        n += (size_t)k;
        buf[n] = 0;
    }
    // A body that stops coming.
    fds[3] = open_sending("127.0.0.4", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"pro");
    int closed = wait_closed(fds, 5, 5);
    for (int i = 0; i < 5; i++)
        if (!closed_by_server(fds[i]))
            fail_msg("connection %d was not closed after the 1 s timeout (%d of 5 were)", i, closed);
    // The unfinished body got no answer: the connection just closed.
    assert_int_equal(recv(fds[3], buf, sizeof(buf), MSG_DONTWAIT), 0);
    for (int i = 0; i < 5; i++)
        close(fds[i]);
    assert_true(metric("rapid_connections_closed_total{reason=\"head_timeout\"}") >= 3);
    assert_true(metric("rapid_connections_closed_total{reason=\"idle_timeout\"}") >= 1);
    assert_true(metric("rapid_connections_closed_total{reason=\"body_timeout\"}") >= 1);
    expect_health_from("127.0.0.1");
}

static void test_busy_answers_503(void **state)
{
    (void)state;
    // Four requests of 127.0.0.1 whose bodies are on their way: every slot of the address busy.
    int busy[4];
    for (int i = 0; i < 4; i++)
        busy[i] = open_sending("127.0.0.1", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n");
    usleep(200000);
    wire_resp r;
    get_health_from("127.0.0.1", &r);
    if (r.status != 503)
        fail_msg("expected 503, got %d %s", r.status, r.body);
    assert_string_equal(wire_header(&r, "Retry-After"), "1");
    assert_string_equal(wire_header(&r, "Connection"), "close");
    json_t *v = body_json(&r);
    assert_non_null(json_string_value(json_object_get(json_object_get(v, "error"), "message")));
    json_decref(v);
    free(r.body);
    // The Anthropic route answers in its shape, and a body written whole first still gets it.
    int fd = wire_dial_from("127.0.0.1");
    const char *req = "POST /v1/messages HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}";
    wire_send(fd, req, strlen(req));
    wire_read(fd, &r);
    close(fd);
    assert_int_equal(r.status, 503);
    v = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(json_object_get(v, "error"), "type")), "overloaded_error");
    json_decref(v);
    free(r.body);
    expect_health_from("127.0.0.2");
    for (int i = 0; i < 4; i++)
        close(busy[i]);
    // Once they are gone the address is served again (closing is seen asynchronously).
    for (int i = 0; i < 300; i++) {
        get_health_from("127.0.0.1", &r);
        int st = r.status;
        free(r.body);
        if (st == 200)
            break;
        assert_int_equal(st, 503);
        usleep(10000);
    }
    expect_health_from("127.0.0.1");
    assert_true(metric("rapid_connections_refused_total") >= 2);
}

#define ENDLESS                                                                                                        \
    "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":100000,\"ignore_eos\":true,"                \
    "\"temperature\":2,\"seed\":1,\"stream\":true}"

// Reads from fd until the server closes it; returns the bytes (free them).
static char *read_all(int fd, size_t *len)
{
    wire_resp r;
    wire_read(fd, &r);
    *len = r.len;
    return r.body;
}

static void test_long_waits_not_cut(void **state)
{
    (void)state;
    wait_idle();
    for (int streaming = 0; streaming < 2; streaming++) {
        int a = wire_open_stream("/v1/chat/completions", NULL, ENDLESS); // generating (max_running 1)
        wait_running();
        // Queued behind it, silent for 2.5 timeouts (the stream's head is sent, no frame).
        int b =
            wire_send_request("POST", "/v1/chat/completions", NULL,
                              streaming ? "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":8,"
                                          "\"stream\":true}"
                                        : "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":8}");
        usleep(2500000);
        // The running stream went on past the timeout too.
        char buf[4096];
        ssize_t k = recv(a, buf, sizeof(buf), MSG_DONTWAIT);
        assert_true(k > 0);
        close(a); // its generation is cancelled; b runs
        size_t len;
        char *body = read_all(b, &len);
        close(b);
        if (streaming) {
            assert_true(len > 14 && strcmp(body + len - 14, "data: [DONE]\n\n") == 0);
        } else {
            json_error_t e;
            json_t *v = json_loads(body, 0, &e);
            if (!v || !json_object_get(v, "usage"))
                fail_msg("the queued request's reply: %s", body);
            json_decref(v);
        }
        free(body);
        wait_idle();
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_slow_clients_give_way, start_long, stop),
        cmocka_unit_test_setup_teardown(test_deadlines, start_short, stop),
        cmocka_unit_test_setup_teardown(test_busy_answers_503, start_long, stop),
        cmocka_unit_test_setup_teardown(test_long_waits_not_cut, start_short, stop),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
