/*
 * test_cli_serve.c - `rapid serve` as a process: usage errors (status 2, one line),
 * a model that cannot load or an address that cannot be bound (status 1, one
 * message), and a real start on a free port with the bundled model: exactly
 * one "rapid: listening on http://HOST:PORT" line, /health answers on that
 * port, speculative decoding is on (start line, /metrics), SIGTERM ends it
 * with status 0; the context it advertises is what its KV cache holds; the API key
 * from the environment or a file.
 */
#include "test_util.h"
#include "test_tmp.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

// Runs `rapid serve ARGS...` (NULL-terminated) to its end; stderr into err.
static int run_serve(char *err, size_t cap, const char *const *args)
{
    const char *bin = getenv("RP_BINARY");
    assert_non_null(bin);
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char models[4096];
        snprintf(models, sizeof(models), "%s/models", rp_test_source_dir());
        setenv("RAPID_MODELS", models, 1);
        dup2(pfd[1], 2);
        int devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, 1);
        const char *argv[32] = {bin, "serve"};
        int n = 2;
        for (int i = 0; args[i] && n < 31; i++)
            argv[n++] = args[i];
        argv[n] = NULL;
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    close(pfd[1]);
    size_t n = 0;
    ssize_t k;
    while ((k = read(pfd[0], err + n, cap - 1 - n)) > 0)
        n += (size_t)k;
    err[n] = 0;
    close(pfd[0]);
    int status;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static char err[65536];

static void test_usage(void **state)
{
    (void)state;
    const char *help[] = {"--help", NULL};
    assert_int_equal(run_serve(err, sizeof(err), help), 0);
    const char *bad[][4] = {
        {"--port", "70000", NULL}, {"--port", "x", NULL},         {"--bogus", NULL},
        {"--quant", "q3", NULL},   {"--tool-parser", "nope", NULL}, {"a", "b", NULL},
        {"--ctx", "0", NULL},      {"--max-request-bytes", "12", NULL}, {"--parallel", NULL},
        {"--kv-dtype", "bf16", NULL}, {"--host", "", NULL},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int rc = run_serve(err, sizeof(err), bad[i]);
        if (rc != 2)
            fail_msg("serve %s %s: status %d, expected 2 (%s)", bad[i][0], bad[i][1] ? bad[i][1] : "", rc, err);
        // One line: what is wrong, and where the help is (not the whole usage).
        const char *nl = strchr(err, '\n');
        if (strncmp(err, "rapid serve: ", 13) != 0 || !strstr(err, "(see `rapid serve --help`)") || !nl || nl[1])
            fail_msg("serve %s %s: expected one line ending in the help's name, got: %s", bad[i][0],
                     bad[i][1] ? bad[i][1] : "", err);
    }
    const char *unknown[] = {"--bogus", NULL};
    run_serve(err, sizeof(err), unknown);
    assert_string_equal(err, "rapid serve: unknown option '--bogus' (see `rapid serve --help`)\n");
    const char *nomodel[] = {"/nonexistent/model", "--port", "0", NULL};
    assert_int_equal(run_serve(err, sizeof(err), nomodel), 1);
    assert_non_null(strstr(err, "/nonexistent/model"));
    const char *badhost[] = {"--host", "256.1.2.3", "--port", "0", NULL};
    assert_int_equal(run_serve(err, sizeof(err), badhost), 1);
    assert_non_null(strstr(err, "256.1.2.3"));
    // The address is taken before the model loads: a busy port is the one error, even with
    // a model that would not load.
    int busy = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof(a);
    assert_int_equal(bind(busy, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(busy, 1), 0);
    assert_int_equal(getsockname(busy, (struct sockaddr *)&a, &al), 0);
    char port[16];
    snprintf(port, sizeof(port), "%d", ntohs(a.sin_port));
    const char *taken[] = {"/nonexistent/model", "--port", port, NULL};
    assert_int_equal(run_serve(err, sizeof(err), taken), 1);
    assert_non_null(strstr(err, "cannot listen on 127.0.0.1:"));
    assert_null(strstr(err, "/nonexistent/model"));
    close(busy);
    // Speculative decoding's flags: a bad config is bad usage; a draft model that is not there fails.
    const char *badspec[] = {"--speculative-config", "{\"k\": 1}", NULL};
    assert_int_equal(run_serve(err, sizeof(err), badspec), 2);
    assert_non_null(strstr(err, "unknown key \"k\""));
    // A KV cache past the memory there is: one message, before anything is allocated.
    const char *huge[] = {"--kv-memory", "64T", "--port", "0", NULL};
    assert_int_equal(run_serve(err, sizeof(err), huge), 1);
    assert_non_null(strstr(err, "a KV cache of 65536.0 GiB does not fit: the ")); // (machine or GPU)
    assert_non_null(strstr(err, "GiB available"));
    const char *nodraft[] = {"--draft-model", "/nonexistent/draft", "--port", "0", NULL};
    assert_int_equal(run_serve(err, sizeof(err), nodraft), 1);
    assert_non_null(strstr(err, "/nonexistent/draft"));
}

// A GET on the local port with extra header lines (each ending in CRLF); the whole response into resp.
static void http_get_h(int port, const char *path, const char *headers, char *resp, size_t cap)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    char req[256];
    snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: x\r\n%sConnection: close\r\n\r\n", path, headers);
    assert_int_equal(write(fd, req, strlen(req)), (ssize_t)strlen(req));
    size_t rn = 0;
    ssize_t k;
    while (rn < cap - 1 && (k = read(fd, resp + rn, cap - 1 - rn)) > 0)
        rn += (size_t)k;
    resp[rn] = 0;
    close(fd);
}

static void http_get(int port, const char *path, char *resp, size_t cap)
{
    http_get_h(port, path, "", resp, cap);
}

static void test_listen_and_stop(void **state)
{
    (void)state;
    const char *bin = getenv("RP_BINARY");
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char models[4096];
        snprintf(models, sizeof(models), "%s/models", rp_test_source_dir());
        setenv("RAPID_MODELS", models, 1);
        dup2(pfd[1], 2);
        execl(bin, bin, "serve", "--port", "0", "--ctx", "256", (char *)NULL);
        _exit(127);
    }
    close(pfd[1]);
    // Read stderr up to the listening line.
    size_t n = 0;
    const char *line = NULL;
    while (!line && n < sizeof(err) - 1) {
        struct pollfd p = {pfd[0], POLLIN, 0};
        assert_true(poll(&p, 1, 120000) == 1); // liveness bound only
        ssize_t k = read(pfd[0], err + n, sizeof(err) - 1 - n);
        assert_true(k > 0);
        n += (size_t)k;
        err[n] = 0;
        line = strstr(err, "rapid: listening on http://127.0.0.1:");
        if (line && !strchr(line, '\n'))
            line = NULL;
    }
    int port = atoi(line + strlen("rapid: listening on http://127.0.0.1:"));
    assert_true(port > 0 && port < 65536);

    static char resp[262144];
    http_get(port, "/health", resp, sizeof(resp));
    assert_non_null(strstr(resp, "200 OK"));
    assert_non_null(strstr(resp, "{\"status\":\"ok\"}"));
    // The KV cache holds halves by default: rapid-tiny's 6 layers and MTP layer, 2 KV heads of 64,
    // K and V: 3,584 bytes a token; 4,096 tokens by default.
    assert_non_null(strstr(err, "rapid: KV cache 14 MiB of f16: 4096 tokens (256 blocks of 16)"));
    // Speculative decoding is on by default: the start line says which methods, /metrics has them.
    assert_non_null(strstr(err, "rapid: speculative decoding on: ngram, mtp"));
    http_get(port, "/metrics", resp, sizeof(resp));
    assert_non_null(strstr(resp, "rapid_spec_decode_enabled{model_name=\"rapid-tiny\",method=\"mtp\"} 1"));
    assert_non_null(strstr(resp, "rapid_spec_decode_enabled{model_name=\"rapid-tiny\",method=\"draft\"} 0"));
    assert_non_null(strstr(resp, "rapid_spec_decode_draft_tokens_total{model_name=\"rapid-tiny\",method=\"ngram\"} 0"));
    assert_non_null(
        strstr(resp, "rapid_spec_decode_accepted_tokens_by_position_total{model_name=\"rapid-tiny\",method=\"mtp\",position=\"16\"} 0"));
    ssize_t k;

    kill(pid, SIGTERM);
    while ((k = read(pfd[0], err + n, sizeof(err) - 1 - n)) > 0)
        n += (size_t)k;
    err[n] = 0;
    close(pfd[0]);
    int status;
    waitpid(pid, &status, 0);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    // Exactly one listening line.
    const char *first = strstr(err, "rapid: listening on");
    assert_non_null(first);
    assert_null(strstr(first + 1, "rapid: listening on"));
}

// Starts `rapid serve --port 0 ARGS...` (NULL-terminated) with the bundled model and reads
// its stderr (into err) up to the listening line; the port, the pid and the stderr pipe out.
static int start_serve(const char *const *args, pid_t *pid_out, int *fd_out, size_t *n_out)
{
    const char *bin = getenv("RP_BINARY");
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char models[4096];
        snprintf(models, sizeof(models), "%s/models", rp_test_source_dir());
        setenv("RAPID_MODELS", models, 1);
        dup2(pfd[1], 2);
        int devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, 1); // not the test's stdout: a server left running must not hold the runner's pipe
        const char *argv[32] = {bin, "serve", "--port", "0"};
        int n = 4;
        for (int i = 0; args[i] && n < 31; i++)
            argv[n++] = args[i];
        argv[n] = NULL;
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    close(pfd[1]);
    size_t n = 0;
    const char *line = NULL;
    while (!line && n < sizeof(err) - 1) {
        struct pollfd p = {pfd[0], POLLIN, 0};
        ssize_t k = poll(&p, 1, 120000) == 1 ? read(pfd[0], err + n, sizeof(err) - 1 - n) : -1; // liveness bound
        if (k <= 0) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            fail_msg("rapid serve did not listen: %s", err);
        }
        n += (size_t)k;
        err[n] = 0;
        line = strstr(err, "rapid: listening on http://127.0.0.1:");
        if (line && !strchr(line, '\n'))
            line = NULL;
    }
    *pid_out = pid;
    *fd_out = pfd[0];
    *n_out = n;
    return atoi(line + strlen("rapid: listening on http://127.0.0.1:"));
}

static void stop_serve(pid_t pid, int fd, size_t n)
{
    kill(pid, SIGTERM);
    ssize_t k;
    while ((k = read(fd, err + n, sizeof(err) - 1 - n)) > 0)
        n += (size_t)k;
    err[n] = 0;
    close(fd);
    int status;
    waitpid(pid, &status, 0);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

// A KV cache smaller than the model's context (32,768 tokens for rapid-tiny):
// the server advertises what one request can get, everywhere it names the
// context: the start line, /v1/models and /v1/models/{id} (max_model_len),
// /v1/status (kv.context_tokens). With --ctx it is that; a --ctx past the model's is cut to
// it, with a line that says so.
static void test_context_is_what_the_cache_holds(void **state)
{
    (void)state;
    static char resp[262144];
    const struct {
        const char *args[8];
        int ctx;
        const char *line; // a start line expected too, or NULL
    } cases[] = {
        {{"--kv-tokens", "512", "--no-disk-cache", NULL}, 512, NULL},
        {{"--kv-tokens", "1000", "--no-disk-cache", NULL}, 1008, NULL}, // whole blocks of 16
        {{"--kv-memory", "1M", "--no-disk-cache", NULL}, 288, NULL},    // 3,584 bytes a token: 18 blocks
        {{"--kv-tokens", "512", "--ctx", "300", "--no-disk-cache", NULL}, 300, NULL},
        {{"--ctx", "100000", "--no-disk-cache", NULL},
         32768,
         "rapid: --ctx 100000 is past the model's context (32768 tokens): requests get 32768"},
    };
    static char problem[300000];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        pid_t pid;
        int fd;
        size_t n;
        int port = start_serve(cases[i].args, &pid, &fd, &n);
        // No cmocka failure while the server runs (it would be left running): note, stop, then fail.
        char want[128];
        problem[0] = 0;
        snprintf(want, sizeof(want), "| context %d tokens per request", cases[i].ctx);
        if (!strstr(err, want))
            snprintf(problem, sizeof(problem), "the start lines lack [%s]: %s", want, err);
        if (!problem[0] && cases[i].line && !strstr(err, cases[i].line))
            snprintf(problem, sizeof(problem), "the start lines lack [%s]: %s", cases[i].line, err);
        const char *paths[] = {"/v1/models", "/v1/models/rapid-tiny", "/v1/status"};
        for (int k = 0; k < 3 && !problem[0]; k++) {
            snprintf(want, sizeof(want), k < 2 ? "\"max_model_len\":%d" : "\"context_tokens\":%d", cases[i].ctx);
            http_get(port, paths[k], resp, sizeof(resp));
            if (!strstr(resp, want))
                snprintf(problem, sizeof(problem), "%s lacks [%s]: %s", paths[k], want, resp);
        }
        stop_serve(pid, fd, n);
        if (problem[0])
            fail_msg("case %zu (%s %s): %s", i, cases[i].args[0], cases[i].args[1], problem);
    }
}

// The API key from the environment (RAPID_API_KEY, the rule every flag follows) or from a
// file (--api-key-file, its first line): enforced either way, and the command line's flag
// wins over a variable.
static void test_api_key_from_env_and_file(void **state)
{
    (void)state;
    const char *file = rp_test_tmp_path("key.txt");
    rp_test_write_file(file, "s3cret \n(the rest is ignored)\n", 30);
    static char resp[65536];
    setenv("RAPID_API_KEY", "envkey", 1);
    pid_t pid;
    int fd;
    size_t n;
    const char *none[] = {NULL};
    int port = start_serve(none, &pid, &fd, &n);
    http_get(port, "/v1/models", resp, sizeof(resp));
    assert_non_null(strstr(resp, "401"));
    http_get_h(port, "/v1/models", "Authorization: Bearer envkey\r\n", resp, sizeof(resp));
    assert_non_null(strstr(resp, "200 OK"));
    stop_serve(pid, fd, n);

    const char *with_file[] = {"--api-key-file", file, NULL}; // wins over RAPID_API_KEY
    port = start_serve(with_file, &pid, &fd, &n);
    http_get_h(port, "/v1/models", "Authorization: Bearer envkey\r\n", resp, sizeof(resp));
    assert_non_null(strstr(resp, "401"));
    http_get_h(port, "/v1/models", "x-api-key: s3cret\r\n", resp, sizeof(resp));
    assert_non_null(strstr(resp, "200 OK"));
    stop_serve(pid, fd, n);
    unsetenv("RAPID_API_KEY");

    // Refused before loading: a variable's bad value names the variable; an empty key file.
    setenv("RAPID_PORT", "x", 1);
    assert_int_equal(run_serve(err, sizeof(err), none), 2);
    assert_non_null(strstr(err, "invalid value 'x' for --port (from RAPID_PORT)"));
    unsetenv("RAPID_PORT");
    setenv("RAPID_NO_DISK_CACHE", "maybe", 1);
    assert_int_equal(run_serve(err, sizeof(err), none), 2);
    assert_non_null(strstr(err, "RAPID_NO_DISK_CACHE=maybe"));
    unsetenv("RAPID_NO_DISK_CACHE");
    const char *empty = rp_test_tmp_path("empty.txt");
    rp_test_write_file(empty, "\n", 1);
    const char *empty_file[] = {"--api-key-file", empty, NULL};
    assert_int_equal(run_serve(err, sizeof(err), empty_file), 1);
    assert_non_null(strstr(err, "holds no key"));
    const char *both[] = {"--api-key-file", file, "--api-key", "k", NULL};
    assert_int_equal(run_serve(err, sizeof(err), both), 2);

    // Beyond loopback without a key: a warning at start (here the model then fails to load).
    const char *open_host[] = {"/nonexistent/model", "--host", "0.0.0.0", "--port", "0", NULL};
    assert_int_equal(run_serve(err, sizeof(err), open_host), 1);
    assert_non_null(strstr(err, "rapid: warning: listening on 0.0.0.0 without an API key"));
    const char *keyed[] = {"/nonexistent/model", "--host", "0.0.0.0", "--port", "0", "--api-key", "k", NULL};
    assert_int_equal(run_serve(err, sizeof(err), keyed), 1);
    assert_null(strstr(err, "warning"));
    const char *local[] = {"/nonexistent/model", "--port", "0", NULL};
    assert_int_equal(run_serve(err, sizeof(err), local), 1);
    assert_null(strstr(err, "warning"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_usage),
        cmocka_unit_test(test_listen_and_stop),
        cmocka_unit_test(test_context_is_what_the_cache_holds),
        cmocka_unit_test(test_api_key_from_env_and_file),
    };
    return cmocka_run_group_tests(tests, rp_test_tmp_setup, rp_test_tmp_teardown);
}
