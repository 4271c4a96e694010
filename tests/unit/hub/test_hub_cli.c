/*
 * test_hub_cli.c - models by name through the `rapid` binary: the bundled model put in a
 * hub cache (the documented layout) runs and tokenizes by repo id and by a user alias
 * exactly as by its folder; misses say what was tried; `rapid models`, `models --catalog`
 * and `rm`; `rapid run` downloading a missing model from a loopback hub (HF_ENDPOINT)
 * and refusing to with --no-download; `rapid ps` against a running `rapid serve`.
 */
#define RP_TEST_TMP_PREFIX "rp-hub-cli"
#include <microhttpd.h>

#include "hub_fixture.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>

static const char COMMIT[] = "feedfacefeedfacefeedfacefeedfacefeedface";

typedef struct served {
    char name[256];
    char *data;
    size_t len;
    char sha[65];
} served;
static served files[32];
static size_t n_files;
static struct MHD_Daemon *hub;
static char endpoint[64];
static char out[65536], err[65536];

static enum MHD_Result answer(struct MHD_Connection *c, int status, const void *body, size_t len, const char *etag)
{
    return fx_reply(c, status, body, len, etag ? "X-Linked-Etag" : NULL, etag, COMMIT);
}

// The hub for one repo, acme/served: the bundled model's files, every one as an LFS file.
static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *upload, size_t *upload_len, void **con_cls)
{
    if (!strcmp(url, "/api/models/acme/served/revision/main")) {
        static char list[16384];
        int used = snprintf(list, sizeof(list), "{\"sha\":\"%s\",\"siblings\":[", COMMIT);
        for (size_t i = 0; i < n_files; i++)
            used += snprintf(list + used, sizeof(list) - (size_t)used,
                             "%s{\"rfilename\":\"%s\",\"size\":%zu,\"lfs\":{\"sha256\":\"%s\",\"size\":%zu}}",
                             i ? "," : "", files[i].name, files[i].len, files[i].sha, files[i].len);
        snprintf(list + used, sizeof(list) - (size_t)used, "]}");
        return answer(c, 200, list, strlen(list), NULL);
    }
    char prefix[128];
    snprintf(prefix, sizeof(prefix), "/acme/served/resolve/%s/", COMMIT);
    if (!strncmp(url, prefix, strlen(prefix)))
        for (size_t i = 0; i < n_files; i++)
            if (!strcmp(url + strlen(prefix), files[i].name))
                return answer(c, 200, files[i].data, files[i].len, files[i].sha);
    return answer(c, 404, "not found", 9, NULL);
}

static void load_tiny(void)
{
    DIR *d = opendir(rp_test_source("models/rapid-tiny"));
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d)) && n_files < 32) {
        if (e->d_name[0] == '.')
            continue;
        served *f = &files[n_files++];
        snprintf(f->name, sizeof(f->name), "%s", e->d_name);
        char rel[512];
        snprintf(rel, sizeof(rel), "models/rapid-tiny/%s", e->d_name);
        assert_int_equal(rp_file_read(rp_test_source(rel), &f->data, &f->len), RP_OK);
        fx_sha(f->data, f->len, f->sha);
    }
    closedir(d);
}

static int setup(void **state)
{
    if (rp_test_tmp_setup(state))
        return -1;
    load_tiny();
    hub = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD, 0, NULL, NULL, handler,
                           NULL, MHD_OPTION_END);
    if (!hub)
        return -1;
    snprintf(endpoint, sizeof(endpoint), "http://127.0.0.1:%u",
             (unsigned)MHD_get_daemon_info(hub, MHD_DAEMON_INFO_BIND_PORT)->port);
    // the bundled model as acme/tiny in a hub cache
    fx_file f[32];
    for (size_t i = 0; i < n_files; i++)
        f[i] = (fx_file){files[i].name, files[i].data, files[i].len};
    fx_snapshot(rp_test_tmp_path("hub"), "acme/tiny", COMMIT, "main", f, n_files);
    const fx_file split[] = {{"m-Q4_K_M-00001-of-00002.gguf", "one", 0}, {"m-Q4_K_M-00002-of-00002.gguf", "two", 0}};
    fx_snapshot(rp_test_tmp_path("hub"), "acme/split-GGUF", COMMIT, "main", split, 2);
    // a user alias for it
    char p[1024];
    snprintf(p, sizeof(p), "%s/rapid", rp_test_tmp_path("config"));
    fx_mkdirs(p);
    const char *user = "{\"models\":{\"mytiny\":{\"repo\":\"acme/tiny\",\"description\":\"the bundled model\","
                       "\"tool_parser\":\"mistral\",\"reasoning_parser\":\"none\"},"
                       "\"oddtiny\":{\"repo\":\"acme/tiny\",\"tool_parser\":\"nosuch\"}}}";
    snprintf(p, sizeof(p), "%s/rapid/models.json", rp_test_tmp_path("config"));
    rp_test_write_file(p, user, strlen(user));
    return 0;
}

static int teardown(void **state)
{
    MHD_stop_daemon(hub);
    for (size_t i = 0; i < n_files; i++)
        rp_free(files[i].data);
    return rp_test_tmp_teardown(state);
}

// Runs `rapid ARGS` with the test's cache, config and hub; its exit status.
static int rapid(const char *args)
{
    char cmd[8192];
    snprintf(cmd, sizeof(cmd),
             "HF_HUB_CACHE='%s' XDG_CONFIG_HOME='%s' HF_ENDPOINT='%s' HF_HOME=/nonexistent-rapid-test "
             "RAPID_CATALOG='%s' RAPID_DEVICE=cpu '%s' %s",
             rp_test_tmp_path("hub"), rp_test_tmp_path("config"), endpoint, rp_test_source("models/catalog.json"),
             getenv("RP_BINARY"), args);
    return rp_test_run_shell(cmd, rp_test_tmp_path("stderr"), out, sizeof(out), err, sizeof(err));
}

static void test_by_name(void **state)
{
    char want[65536], args[1024];
    snprintf(args, sizeof(args), "run '%s' -p 'def add(a, b):' -n 12 --raw", rp_test_source("models/rapid-tiny"));
    assert_int_equal(rapid(args), 0);
    snprintf(want, sizeof(want), "%s", out);
    assert_true(strlen(want) > 0);
    assert_int_equal(rapid("run acme/tiny -p 'def add(a, b):' -n 12 --raw --no-download"), 0);
    assert_string_equal(out, want);
    assert_int_equal(rapid("run mytiny@main -p 'def add(a, b):' -n 12 --raw --no-download"), 0);
    assert_string_equal(out, want);
    snprintf(args, sizeof(args), "tokenize '%s' 'hello world'", rp_test_source("models/rapid-tiny"));
    assert_int_equal(rapid(args), 0);
    snprintf(want, sizeof(want), "%s", out);
    assert_int_equal(rapid("tokenize mytiny 'hello world'"), 0);
    assert_string_equal(out, want);
    // misses: what was tried, the next step
    assert_int_equal(rapid("run acme/missing -p hi --no-download"), 1);
    assert_non_null(strstr(err, "tried:"));
    assert_non_null(strstr(err, "models--acme--missing: not there"));
    assert_non_null(strstr(err, "rapid pull acme/missing"));
    assert_non_null(strstr(err, "--no-download"));
    assert_int_equal(rapid("tokenize qwen3-8 hi"), 1);
    assert_non_null(strstr(err, "closest aliases: qwen3-8b"));
    assert_int_equal(rapid("run qwen3-8b -p hi --no-download"), 1);
    assert_non_null(strstr(err, "the catalog: qwen3-8b is Qwen/Qwen3-8B"));
    // a split GGUF: what to do instead, before any load
    assert_int_equal(rapid("run acme/split-GGUF:Q4_K_M -p hi --no-download"), 1);
    assert_non_null(strstr(err, "split into shards"));
    assert_non_null(strstr(err, "llama-gguf-split --merge"));
    assert_int_equal(rapid("serve acme/missing --no-download --port 0"), 1);
    assert_non_null(strstr(err, "rapid pull acme/missing"));
}

static void test_models_rm(void **state)
{
    assert_int_equal(rapid("models"), 0);
    assert_non_null(strstr(out, "acme/tiny"));
    assert_non_null(strstr(out, "acme/split-GGUF"));
    assert_non_null(strstr(out, "safetensors"));
    assert_non_null(strstr(out, "main feedfacefeed"));
    assert_int_equal(rapid("models --catalog"), 0);
    assert_non_null(strstr(out, "qwen3-8b"));
    assert_non_null(strstr(out, "Qwen/Qwen3-8B-GGUF:Q4_K_M"));
    assert_non_null(strstr(out, "mytiny"));
    assert_non_null(strstr(out, "from your models.json"));
    assert_int_equal(rapid("models --bogus"), 2);
    assert_int_equal(rapid("rm"), 2);
    assert_int_equal(rapid("rm acme/nothing"), 1);
    assert_non_null(strstr(err, "not in the hub cache"));
}

// `rapid run` pulls a missing model from the hub, then runs it; the cache holds it after.
static void test_run_downloads(void **state)
{
    char want[65536], args[1024];
    snprintf(args, sizeof(args), "run '%s' -p 'Hello' -n 8 --raw", rp_test_source("models/rapid-tiny"));
    assert_int_equal(rapid(args), 0);
    snprintf(want, sizeof(want), "%s", out);
    assert_int_equal(rapid("run acme/served -p 'Hello' -n 8 --raw --no-download"), 1);
    assert_int_equal(rapid("run acme/served -p 'Hello' -n 8 --raw"), 0);
    assert_string_equal(out, want);
    assert_non_null(strstr(err, "downloading it"));
    assert_non_null(strstr(err, "model.safetensors.index.json"));
    for (size_t i = 0; i < n_files; i++) {
        if (!strcmp(files[i].name, "README.md"))
            continue; // not a file a model needs
        fx_check_file(rp_test_tmp_path("hub"), "acme/served", COMMIT, files[i].name, files[i].data, files[i].len);
    }
    assert_int_equal(rapid("pull acme/served"), 0); // already there: nothing fetched, the path printed
    assert_non_null(strstr(out, "/snapshots/feedfacefeedfacefeedfacefeedfacefeedface"));
    assert_int_equal(rapid("rm acme/served"), 0);
    assert_non_null(strstr(out, "removed acme/served"));
    assert_int_equal(rapid("models"), 0);
    assert_null(strstr(out, "acme/served"));
    assert_int_equal(rapid("pull acme/nothing-here"), 1);
    assert_non_null(strstr(err, "404"));
}

// `rapid ps` against a running `rapid serve mytiny`: served under the alias, with the
// alias' parsers (the server's log line says which).
static void test_ps(void **state)
{
    char cmd[4096], log[600];
    snprintf(log, sizeof(log), "%s", rp_test_tmp_path("serve.log"));
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 2);
        setenv("HF_HUB_CACHE", rp_test_tmp_path("hub"), 1);
        setenv("XDG_CONFIG_HOME", rp_test_tmp_path("config"), 1);
        setenv("RAPID_CATALOG", rp_test_source("models/catalog.json"), 1);
        execl(getenv("RP_BINARY"), "rapid", "serve", "mytiny", "--no-download", "--port", "0", "--no-disk-cache",
              "--device", "cpu", (char *)NULL);
        _exit(127);
    }
    int port = 0;
    for (int i = 0; i < 600 && !port; i++) {
        usleep(100000);
        char *text;
        size_t n;
        if (rp_file_read(log, &text, &n) == RP_OK) {
            const char *at = strstr(text, "listening on http://127.0.0.1:");
            if (at)
                port = atoi(at + strlen("listening on http://127.0.0.1:"));
            rp_free(text);
        }
    }
    assert_true(port > 0);
    snprintf(cmd, sizeof(cmd), "ps --port %d", port);
    int rc = rapid(cmd);
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "model    mytiny"));
    assert_non_null(strstr(out, "requests 0 running, 0 queued"));
    assert_non_null(strstr(out, "blocks used"));
    char *text;
    size_t n;
    assert_int_equal(rp_file_read(log, &text, &n), RP_OK);
    assert_non_null(strstr(text, "tool calls: mistral, reasoning: none"));
    rp_free(text);
    snprintf(cmd, sizeof(cmd), "ps --port %d", port); // gone now
    assert_int_equal(rapid(cmd), 1);
    assert_non_null(strstr(err, "no server at"));
    // a catalog naming a parser the chat module does not know: a warning, the template's choice
    assert_int_equal(rapid("run oddtiny -p hi -n 2 --no-download"), 0);
    assert_non_null(strstr(err, "tool_parser 'nosuch' for oddtiny is unknown"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_by_name),
        cmocka_unit_test(test_models_rm),
        cmocka_unit_test(test_run_downloads),
        cmocka_unit_test(test_ps),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
