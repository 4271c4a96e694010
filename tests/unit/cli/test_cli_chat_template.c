/*
 * test_cli_chat_template.c - --chat-template FILE|NAME and the default for a model
 * without a chat template, through the real binary on a copy of the bundled model
 * whose tokenizer_config.json has no chat_template (the weights are symlinked):
 *
 *   - `rapid serve` answered its chat requests 400 ("the model has no chat
 *     template"); now it serves them with the built-in ChatML template and says so
 *     once at start (a warning line), and the prompt it runs is exactly ChatML's
 *     (prompt_tokens is the library's count of that text);
 *   - --chat-template chatml|llama3|mistral|FILE renders with that template (no
 *     warning), and the tool-call parser follows the template, not the model's
 *     architecture (mistral on a Qwen3 model parses [TOOL_CALLS]);
 *   - `rapid run` used the raw prompt for such a model; now it renders it with
 *     ChatML too (with the warning), or with --chat-template's;
 *   - `rapid template` prints the built-ins' renderings byte for byte;
 *   - an unknown name or a file that does not parse is one message naming it.
 */
#include "test_util.h"

#include "tokenizer/tokenizer.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[256], msgs_path[300], tmpl_path[300], bad_path[300];
static char out[1 << 16], err[1 << 16];

// The messages every case renders, and what each built-in makes of them.
#define MSGS "[{\"role\": \"user\", \"content\": \"hi\"}]"
#define WANT_CHATML "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
#define WANT_LLAMA3                                                                                                    \
    "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
#define WANT_MISTRAL "[INST]hi[/INST]"
#define FILE_TEMPLATE "{% for m in messages %}<<{{ m.role }}:{{ m.content }}>>{% endfor %}[TOOL_CALLS]"
#define WANT_FILE "<<user:hi>>[TOOL_CALLS]"

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

// Runs `rapid ARGS` through the shell; stdout into out, stderr into err; the exit status.
static int run_rapid(const char *args)
{
    const char *bin = getenv("RP_BINARY");
    assert_non_null(bin);
    char errfile[64], cmd[8192];
    snprintf(errfile, sizeof(errfile), "/tmp/rapid-test-chattpl-%d.err", (int)getpid());
    snprintf(cmd, sizeof(cmd), "'%s' %s 2>%s", bin, args, errfile);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, sizeof(out) - 1, p);
    out[n] = 0;
    int status = pclose(p);
    FILE *e = fopen(errfile, "r");
    n = e ? fread(err, 1, sizeof(err) - 1, e) : 0;
    err[n] = 0;
    if (e)
        fclose(e);
    unlink(errfile);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Tokens of text as the server encodes a rendered prompt (no special tokens added).
static int count_tokens(const char *text)
{
    rp_tokenizer *tok = NULL;
    assert_int_equal(rp_tok_load_file(dir, &tok), RP_OK);
    int32_t *ids = NULL;
    size_t n = 0;
    assert_int_equal(rp_tok_encode(tok, text, strlen(text), false, &ids, &n), RP_OK);
    rp_free(ids);
    rp_tok_destroy(tok);
    return (int)n;
}

/* ---- a server on loopback ---------------------------------------------------- */

typedef struct server {
    pid_t pid;
    int port, err_fd;
    size_t n; // bytes of its stderr in err
} server;

static pid_t live_pid; // the server a failed assertion left running: each test's teardown ends it

// Starts `rapid serve DIR --port 0 ... EXTRA` and reads its stderr up to the listening line.
static void server_start(server *s, const char *extra1, const char *extra2)
{
    const char *bin = getenv("RP_BINARY");
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    s->pid = fork();
    assert_true(s->pid >= 0);
    if (s->pid == 0) {
        dup2(pfd[1], 2);
        close(pfd[0]);
        int devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, 1);
        execl(bin, bin, "serve", dir, "--port", "0", "--ctx", "256", "--no-disk-cache", "--no-spec-decode", "-q",
              extra1, extra2, (char *)NULL);
        _exit(127);
    }
    close(pfd[1]);
    live_pid = s->pid;
    s->err_fd = pfd[0];
    s->n = 0;
    const char *line = NULL;
    while (!line && s->n < sizeof(err) - 1) {
        struct pollfd p = {s->err_fd, POLLIN, 0};
        assert_true(poll(&p, 1, 120000) == 1); // liveness bound only
        ssize_t k = read(s->err_fd, err + s->n, sizeof(err) - 1 - s->n);
        if (k <= 0)
            fail_msg("rapid serve ended before listening: %s", err);
        s->n += (size_t)k;
        err[s->n] = 0;
        line = strstr(err, "rapid: listening on http://127.0.0.1:");
        if (line && !strchr(line, '\n'))
            line = NULL;
    }
    s->port = atoi(line + strlen("rapid: listening on http://127.0.0.1:"));
    assert_true(s->port > 0 && s->port < 65536);
}

// SIGTERM, the rest of stderr, and a clean exit.
static void server_stop(server *s)
{
    kill(s->pid, SIGTERM);
    ssize_t k;
    while ((k = read(s->err_fd, err + s->n, sizeof(err) - 1 - s->n)) > 0)
        s->n += (size_t)k;
    err[s->n] = 0;
    close(s->err_fd);
    int status;
    waitpid(s->pid, &status, 0);
    live_pid = 0;
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

static int end_server(void **state)
{
    (void)state;
    if (live_pid > 0) {
        kill(live_pid, SIGKILL);
        waitpid(live_pid, NULL, 0);
        live_pid = 0;
    }
    return 0;
}

// POSTs a JSON body; returns the HTTP status, the body parsed into *body (json_decref it).
static int http_post(int port, const char *path, const char *json_body, json_t **body)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    char req[4096];
    int len = snprintf(req, sizeof(req),
                       "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                       "Connection: close\r\n\r\n%s",
                       path, strlen(json_body), json_body);
    assert_int_equal(write(fd, req, (size_t)len), len);
    static char resp[1 << 16];
    size_t rn = 0;
    ssize_t k;
    while (rn < sizeof(resp) - 1 && (k = read(fd, resp + rn, sizeof(resp) - 1 - rn)) > 0)
        rn += (size_t)k;
    resp[rn] = 0;
    close(fd);
    const char *b = strstr(resp, "\r\n\r\n");
    assert_non_null(b);
    *body = json_loads(b + 4, 0, NULL);
    assert_non_null(*body);
    return atoi(resp + strlen("HTTP/1.1 "));
}

// One chat request; returns its prompt_tokens (fails the test unless it is answered 200).
static int chat_prompt_tokens(int port)
{
    json_t *body = NULL;
    int status = http_post(port, "/v1/chat/completions", "{\"messages\": " MSGS ", \"max_tokens\": 1}", &body);
    if (status != 200) {
        char *s = json_dumps(body, 0);
        fail_msg("chat request: status %d: %s", status, s);
    }
    int n = (int)json_integer_value(json_object_get(json_object_get(body, "usage"), "prompt_tokens"));
    json_decref(body);
    return n;
}

/* ---- tests --------------------------------------------------------------------- */

static void test_serve_default_chatml(void **state)
{
    (void)state;
    server s;
    server_start(&s, NULL, NULL);
    // Answered, and with ChatML's prompt (this was a 400: "the model has no chat template").
    assert_int_equal(chat_prompt_tokens(s.port), count_tokens(WANT_CHATML));
    // Said once at start: which template, and why.
    const char *warn = strstr(err, "rapid serve: warning: ");
    assert_non_null(warn);
    assert_non_null(strstr(warn, "has no chat template; using the built-in chatml template"));
    assert_null(strstr(warn + 1, "rapid serve: warning: "));
    assert_non_null(strstr(err, "rapid: chat template built-in chatml | tool calls: hermes"));
    server_stop(&s);
}

static void test_serve_named_and_file(void **state)
{
    (void)state;
    static const struct {
        const char *opt, *want, *log;
    } cases[] = {
        {"llama3", WANT_LLAMA3, "rapid: chat template built-in llama3 | tool calls: llama3_json"},
        // the architecture (Qwen3) would pick hermes: the template's [TOOL_CALLS] decides
        {"mistral", WANT_MISTRAL, "rapid: chat template built-in mistral | tool calls: mistral"},
        {tmpl_path, WANT_FILE, "| tool calls: mistral"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        server s;
        server_start(&s, "--chat-template", cases[i].opt);
        if (!strstr(err, cases[i].log))
            fail_msg("--chat-template %s: no [%s] in [%s]", cases[i].opt, cases[i].log, err);
        assert_null(strstr(err, "warning"));
        assert_int_equal(chat_prompt_tokens(s.port), count_tokens(cases[i].want));
        server_stop(&s);
    }
    // The model's own template is still the default when it has one: the bundled model.
    char models[4096];
    snprintf(models, sizeof(models), "%s/models/rapid-tiny", rp_test_source_dir());
    char args[8192];
    snprintf(args, sizeof(args), "template '%s' --messages %s", models, msgs_path);
    assert_int_equal(run_rapid(args), 0);
    assert_string_equal(err, "");
}

static void test_bad_chat_template(void **state)
{
    (void)state;
    char args[8192];
    snprintf(args, sizeof(args), "serve '%s' --port 0 --no-disk-cache --chat-template nosuch", dir);
    assert_int_equal(run_rapid(args), 1);
    assert_non_null(strstr(err, "chat template nosuch: no such file, and not a built-in template (chatml, llama3, "
                                "mistral)"));
    snprintf(args, sizeof(args), "serve '%s' --port 0 --no-disk-cache --chat-template %s", dir, bad_path);
    assert_int_equal(run_rapid(args), 1);
    assert_non_null(strstr(err, bad_path));
    assert_non_null(strstr(err, "template error: "));
    assert_null(strstr(err, "listening"));
    snprintf(args, sizeof(args), "serve '%s' --chat-template ''", dir);
    assert_int_equal(run_rapid(args), 2);
    snprintf(args, sizeof(args), "run '%s' -p hi --raw --chat-template chatml", dir);
    assert_int_equal(run_rapid(args), 2);
    snprintf(args, sizeof(args), "run '%s' -p hi -n 1 --chat-template %s", dir, bad_path);
    assert_int_equal(run_rapid(args), 1);
    assert_non_null(strstr(err, bad_path));
    assert_int_equal(run_rapid("serve --help"), 0);
    assert_non_null(strstr(out, "--chat-template FILE|NAME"));
    assert_int_equal(run_rapid("run --help"), 0);
    assert_non_null(strstr(out, "--chat-template FILE|NAME"));
}

// The prompt token count from `rapid run`'s stats line.
static int run_prompt_tokens(void)
{
    const char *p = strstr(err, "prompt: ");
    if (!p)
        fail_msg("no stats line in [%s]", err);
    return atoi(p + strlen("prompt: "));
}

static void test_run(void **state)
{
    (void)state;
    char args[8192];
    snprintf(args, sizeof(args), "run '%s' -p hi -n 1 --no-spec-decode", dir);
    assert_int_equal(run_rapid(args), 0);
    assert_non_null(strstr(err, "rapid run: warning: "));
    assert_non_null(strstr(err, "has no chat template; using the built-in chatml template"));
    assert_int_equal(run_prompt_tokens(), count_tokens(WANT_CHATML));
    snprintf(args, sizeof(args), "run '%s' -p hi -n 1 --no-spec-decode --chat-template llama3", dir);
    assert_int_equal(run_rapid(args), 0);
    assert_null(strstr(err, "warning"));
    assert_int_equal(run_prompt_tokens(), count_tokens(WANT_LLAMA3));
    snprintf(args, sizeof(args), "run '%s' -p hi -n 1 --no-spec-decode --raw", dir); // --raw: no template, no warning
    assert_int_equal(run_rapid(args), 0);
    assert_null(strstr(err, "warning"));
}

static void test_template_command(void **state)
{
    (void)state;
    static const struct {
        const char *flag, *opt, *want;
    } cases[] = {
        {"--template", "chatml", WANT_CHATML},
        {"--template", "llama3", WANT_LLAMA3},
        {"--chat-template", "mistral", WANT_MISTRAL},
        {"--template", tmpl_path, WANT_FILE},
    };
    char args[8192];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        snprintf(args, sizeof(args), "template %s %s --messages %s", cases[i].flag, cases[i].opt, msgs_path);
        assert_int_equal(run_rapid(args), 0);
        assert_string_equal(out, cases[i].want);
        assert_string_equal(err, "");
    }
    // A MODEL without a template: ChatML, with the warning (it used to be refused).
    snprintf(args, sizeof(args), "template '%s' --messages %s", dir, msgs_path);
    assert_int_equal(run_rapid(args), 0);
    assert_string_equal(out, WANT_CHATML);
    assert_non_null(strstr(err, "rapid template: warning: "));
    snprintf(args, sizeof(args), "template --template nosuch --messages %s", msgs_path);
    assert_int_equal(run_rapid(args), 1);
    assert_non_null(strstr(err, "not a built-in template"));
}

// A copy of models/rapid-tiny without a chat template: every file linked but tokenizer_config.json, which
// is rewritten without "chat_template".
static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/rapid-test-chattpl-%d", (int)getpid());
    snprintf(msgs_path, sizeof(msgs_path), "%s.messages.json", dir);
    snprintf(tmpl_path, sizeof(tmpl_path), "%s.template.jinja", dir);
    snprintf(bad_path, sizeof(bad_path), "%s.bad.jinja", dir);
    if (mkdir(dir, 0755) != 0)
        return -1;
    char src[4096];
    snprintf(src, sizeof(src), "%s/models/rapid-tiny", rp_test_source_dir());
    DIR *d = opendir(src);
    if (!d)
        return -1;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || !strcmp(e->d_name, "tokenizer_config.json"))
            continue;
        char from[8192], to[8192];
        snprintf(from, sizeof(from), "%s/%s", src, e->d_name);
        snprintf(to, sizeof(to), "%s/%s", dir, e->d_name);
        if (symlink(from, to) != 0)
            return -1;
    }
    closedir(d);
    char cfg_path[8192];
    snprintf(cfg_path, sizeof(cfg_path), "%s/tokenizer_config.json", src);
    json_t *cfg = json_load_file(cfg_path, 0, NULL);
    if (!cfg || json_object_del(cfg, "chat_template") != 0)
        return -1;
    snprintf(cfg_path, sizeof(cfg_path), "%s/tokenizer_config.json", dir);
    int rc = json_dump_file(cfg, cfg_path, JSON_INDENT(1));
    json_decref(cfg);
    write_file(msgs_path, MSGS);
    write_file(tmpl_path, FILE_TEMPLATE);
    write_file(bad_path, "{% for %}");
    return rc;
}

static int teardown(void **state)
{
    (void)state;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char p[8192];
        snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
        unlink(p);
    }
    if (d)
        closedir(d);
    rmdir(dir);
    unlink(msgs_path);
    unlink(tmpl_path);
    unlink(bad_path);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_serve_default_chatml, end_server),
        cmocka_unit_test_teardown(test_serve_named_and_file, end_server),
        cmocka_unit_test(test_bad_chat_template),
        cmocka_unit_test(test_run),
        cmocka_unit_test(test_template_command),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
