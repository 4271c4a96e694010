/*
 * test_hub_pull.c - rapid pull against a real HTTP server on loopback (libmicrohttpd)
 * that speaks the hub's protocol for models made here: the revision API with the file
 * list and LFS sha256, resolve/COMMIT/FILE answering a regular file itself (ETag,
 * X-Repo-Commit) and an LFS file with a 302 to a blob URL (X-Linked-Etag), the blob URL
 * honouring Range. It can cut a transfer mid-file (resume), publish a wrong sha256
 * (error, nothing placed), answer 401/403/404/500, stall (timeout), or hold a transfer while
 * `rapid pull` is interrupted (a resumable partial file). The cache written
 * is checked against the documented layout (hub_fixture.h); concurrent pulls of one
 * model fetch each blob once.
 */
#define RP_TEST_TMP_PREFIX "rp-hub-pull"
#include <microhttpd.h>

#include "hub_fixture.h"

#include "hub/hub.h"

#include <curl/curl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>

static const char COMMIT[] = "abcdefabcdefabcdefabcdefabcdefabcdef0123";
static const char CONFIG[] = "{\"model_type\":\"llama\",\"hidden_size\":8}";
static const char CONFIG_ID[] = "0000000000000000000000000000000000c0ffee"; // its git blob id (the ETag)
// a newer commit of main: config.json changed, the rest the same
static const char COMMIT2[] = "2222222222222222222222222222222222222222";
static const char CONFIG2[] = "{\"model_type\":\"llama\",\"hidden_size\":16}";
static const char CONFIG2_ID[] = "000000000000000000000000000000000000beef";
static const char TOKJSON[] = "{\"model\":{}}";
static const char TOK_ID[] = "00000000000000000000000000000000000070c0";
#define WEIGHTS_LEN 300000
static char weights[WEIGHTS_LEN];
static char weights_sha[65];

// What the server does, set by each test.
static struct {
    int api_status;         // the revision API's answer (200 normally)
    int cuts;               // this many blob transfers stop part-way
    bool wrong_sha;         // the file list publishes another sha256
    bool stall;             // blob transfers send nothing for 3 s
    const char *need_token; // Authorization must be "Bearer <this>" (401 without, 403 with another)
    const char *api_body;   // the revision API's body instead of the file list
    bool short_body;        // the blob is served 10 bytes short, and complete
    atomic_bool hold;       // blob transfers wait at half-way while this is set
    bool other_linked_etag; // the resolve answer's X-Linked-Etag is not the file list's sha256
    bool newer;             // main is at COMMIT2
    atomic_int blob_gets, blob_full_gets, range_gets, bin_gets;
} srv;

static const char *wrong = "1111111111111111111111111111111111111111111111111111111111111111";

static char *file_list(void)
{
    static char buf[4096];
    snprintf(buf, sizeof(buf),
             "{\"id\":\"acme/tiny\",\"sha\":\"%s\",\"siblings\":["
             "{\"rfilename\":\".gitattributes\",\"size\":10,\"blobId\":\"00000000000000000000000000000000000000aa\"},"
             "{\"rfilename\":\"config.json\",\"size\":%zu,\"blobId\":\"%s\"},"
             "{\"rfilename\":\"tokenizer.json\",\"size\":%zu,\"blobId\":\"%s\"},"
             "{\"rfilename\":\"model.safetensors\",\"size\":%d,\"blobId\":\"00000000000000000000000000000000000000bb\","
             "\"lfs\":{\"sha256\":\"%s\",\"size\":%d,\"pointerSize\":134}},"
             "{\"rfilename\":\"pytorch_model.bin\",\"size\":5,\"blobId\":\"00000000000000000000000000000000000000cc\","
             "\"lfs\":{\"sha256\":\"%s\",\"size\":5}}]}",
             srv.newer ? COMMIT2 : COMMIT, srv.newer ? strlen(CONFIG2) : strlen(CONFIG),
             srv.newer ? CONFIG2_ID : CONFIG_ID, strlen(TOKJSON), TOK_ID, WEIGHTS_LEN,
             srv.wrong_sha ? wrong : weights_sha, WEIGHTS_LEN, wrong);
    return buf;
}

typedef struct blob_reader {
    size_t start, stop_at; // stop_at: where a cut ends the transfer (WEIGHTS_LEN: none)
    bool stall;
} blob_reader;

static ssize_t read_blob(void *cls, uint64_t pos, char *buf, size_t max)
{
    blob_reader *r = cls;
    if (r->stall) {
        sleep(3);
        r->stall = false;
    }
    size_t at = r->start + (size_t)pos;
    for (int i = 0; i < 200 && atomic_load(&srv.hold) && at >= WEIGHTS_LEN / 2; i++)
        usleep(50000);
    if (at >= r->stop_at)
        return MHD_CONTENT_READER_END_WITH_ERROR;
    size_t n = r->stop_at - at < max ? r->stop_at - at : max;
    if (n > 16384)
        n = 16384;
    memcpy(buf, weights + at, n);
    return (ssize_t)n;
}

static enum MHD_Result send_text(struct MHD_Connection *c, int status, const char *body, const char *etag)
{
    return fx_reply(c, status, body, strlen(body), etag ? "ETag" : NULL, etag, srv.newer ? COMMIT2 : COMMIT);
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *upload, size_t *upload_len, void **con_cls)
{
    if (srv.need_token) {
        const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
        char want[256];
        snprintf(want, sizeof(want), "Bearer %s", srv.need_token);
        if (!auth)
            return send_text(c, 401, "{\"error\":\"Access to model acme/tiny is restricted.\"}", NULL);
        if (strcmp(auth, want))
            return send_text(c, 403, "{\"error\":\"forbidden\"}", NULL);
    }
    char path[512];
    if (!strcmp(url, "/api/models/acme/tiny/revision/main")) {
        if (srv.api_status != 200)
            return send_text(c, srv.api_status, "{\"error\":\"no\"}", NULL);
        if (srv.api_body)
            return send_text(c, 200, srv.api_body, NULL);
        return send_text(c, 200, file_list(), NULL);
    }
    snprintf(path, sizeof(path), "/acme/tiny/resolve/%s/", srv.newer ? COMMIT2 : COMMIT);
    if (!strncmp(url, path, strlen(path))) {
        const char *file = url + strlen(path);
        if (!strcmp(file, "config.json"))
            return srv.newer ? send_text(c, 200, CONFIG2, CONFIG2_ID) : send_text(c, 200, CONFIG, CONFIG_ID);
        if (!strcmp(file, "tokenizer.json"))
            return send_text(c, 200, TOKJSON, TOK_ID);
        if (!strcmp(file, "pytorch_model.bin"))
            atomic_fetch_add(&srv.bin_gets, 1);
        if (!strcmp(file, "model.safetensors")) { // LFS: off to the blob store
            struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
            char e[80];
            snprintf(e, sizeof(e), "\"%s\"", srv.wrong_sha || srv.other_linked_etag ? wrong : weights_sha);
            MHD_add_response_header(r, "Location", "/blobs/weights?sig=x");
            MHD_add_response_header(r, "X-Linked-Etag", e);
            MHD_add_response_header(r, "X-Repo-Commit", srv.newer ? COMMIT2 : COMMIT);
            MHD_add_response_header(r, "ETag", "\"pointer-etag\"");
            enum MHD_Result ret = MHD_queue_response(c, 302, r);
            MHD_destroy_response(r);
            return ret;
        }
        return send_text(c, 404, "Entry not found", NULL);
    }
    if (!strcmp(url, "/blobs/weights")) {
        atomic_fetch_add(&srv.blob_gets, 1);
        size_t start = 0;
        const char *range = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Range");
        if (range && sscanf(range, "bytes=%zu-", &start) == 1 && start < WEIGHTS_LEN)
            atomic_fetch_add(&srv.range_gets, 1);
        else
            start = 0;
        blob_reader *br = calloc(1, sizeof(*br));
        br->start = start;
        br->stop_at = WEIGHTS_LEN;
        size_t served_len = srv.short_body ? WEIGHTS_LEN - 10 : WEIGHTS_LEN;
        br->stall = srv.stall;
        if (srv.cuts > 0) {
            srv.cuts--;
            br->stop_at = start + (WEIGHTS_LEN - start) / 2 + 123;
        }
        if (!start)
            atomic_fetch_add(&srv.blob_full_gets, 1);
        struct MHD_Response *r = MHD_create_response_from_callback(served_len - start, 16384, read_blob, br, free);
        MHD_add_response_header(r, "ETag", "\"cdn-etag-not-the-blob\"");
        MHD_add_response_header(r, "Accept-Ranges", "bytes");
        int status = 200;
        if (start) {
            char cr[128];
            snprintf(cr, sizeof(cr), "bytes %zu-%d/%d", start, WEIGHTS_LEN - 1, WEIGHTS_LEN);
            MHD_add_response_header(r, "Content-Range", cr);
            status = 206;
        }
        enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
        MHD_destroy_response(r);
        return ret;
    }
    return send_text(c, 404, "not found", NULL);
}

static struct MHD_Daemon *daemon_;
static char endpoint[64];

static int setup(void **state)
{
    for (size_t i = 0; i < WEIGHTS_LEN; i++)
        weights[i] = (char)(i * 2654435761u >> 13);
    fx_sha(weights, WEIGHTS_LEN, weights_sha);
    daemon_ = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, 0,
                               NULL, NULL, handler, NULL, MHD_OPTION_CONNECTION_TIMEOUT, 30u, MHD_OPTION_END);
    if (!daemon_)
        return -1;
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon_, MHD_DAEMON_INFO_BIND_PORT);
    snprintf(endpoint, sizeof(endpoint), "http://127.0.0.1:%u/", (unsigned)info->port);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    unsetenv("HF_HUB_OFFLINE");
    unsetenv("HF_TOKEN");
    setenv("HF_HOME", "/nonexistent-rapid-test", 1); // no token file is read
    return rp_test_tmp_setup(state);
}

static int teardown(void **state)
{
    MHD_stop_daemon(daemon_);
    curl_global_cleanup();
    return rp_test_tmp_teardown(state);
}

static void reset(void)
{
    srv.api_status = 200;
    srv.cuts = 0;
    srv.wrong_sha = srv.stall = srv.other_linked_etag = srv.newer = false;
    srv.need_token = NULL;
    srv.api_body = NULL;
    srv.short_body = false;
    atomic_store(&srv.hold, false);
    srv.blob_gets = srv.blob_full_gets = srv.range_gets = srv.bin_gets = 0;
}

static rp_status pull_into(const char *cache, const char *token, int stall_s, int retries, rp_hub_resolved *r)
{
    rp_hub_name n;
    assert_int_equal(rp_hub_name_parse("acme/tiny", NULL, &n), RP_OK);
    rp_hub_pull_params p = {
        .endpoint = endpoint, .token = token, .cache = cache, .stall_s = stall_s, .retries = retries, .log = stderr};
    return rp_hub_pull(&n, &p, r);
}

static bool exists(const char *p)
{
    struct stat sb;
    return !lstat(p, &sb);
}

// A regular (non-LFS) file: snapshots/COMMIT/FILE -> ../../blobs/ID (its git blob id) holding data.
static void check_regular(const char *cache, const char *commit, const char *file, const char *id, const char *data)
{
    char p[4096], got[4096], want[4096];
    snprintf(p, sizeof(p), "%s/snapshots/%s/%s", fx_repo_dir(cache, "acme/tiny"), commit, file);
    ssize_t l = readlink(p, got, sizeof(got) - 1);
    assert_true(l > 0);
    got[l] = 0;
    snprintf(want, sizeof(want), "../../blobs/%s", id);
    assert_string_equal(got, want);
    char *text;
    size_t n;
    assert_int_equal(rp_file_read(p, &text, &n), RP_OK);
    assert_string_equal(text, data);
    rp_free(text);
}

static void test_pull_layout(void **state)
{
    reset();
    const char *cache = rp_test_tmp_path("c1");
    rp_hub_resolved r;
    assert_int_equal(pull_into(cache, NULL, 5, 2, &r), RP_OK);
    // the documented layout: blobs by ETag (LFS: sha256; else the git blob id), relative links, refs/main
    fx_check_file(cache, "acme/tiny", COMMIT, "model.safetensors", weights, WEIGHTS_LEN);
    check_regular(cache, COMMIT, "config.json", CONFIG_ID, CONFIG);
    char p[4096];
    const char *dir = fx_repo_dir(cache, "acme/tiny");
    snprintf(p, sizeof(p), "%s/refs/main", dir);
    char *ref;
    size_t n;
    assert_int_equal(rp_file_read(p, &ref, &n), RP_OK);
    assert_string_equal(ref, COMMIT); // no newline, as huggingface_hub writes it
    rp_free(ref);
    // only what the model needs: no .bin, no .gitattributes
    snprintf(p, sizeof(p), "%s/snapshots/%s/pytorch_model.bin", dir, COMMIT);
    assert_false(exists(p));
    snprintf(p, sizeof(p), "%s/snapshots/%s/.gitattributes", dir, COMMIT);
    assert_false(exists(p));
    assert_int_equal(srv.bin_gets, 0);
    snprintf(p, sizeof(p), "%s/snapshots/%s", dir, COMMIT);
    assert_string_equal(r.path, p);
    // a second pull downloads nothing (one line per file says so); resolving offline finds it
    FILE *log = tmpfile();
    rp_hub_name tn;
    assert_int_equal(rp_hub_name_parse("acme/tiny", NULL, &tn), RP_OK);
    rp_hub_pull_params lp = {.endpoint = endpoint, .cache = cache, .stall_s = 5, .retries = 2, .log = log};
    assert_int_equal(rp_hub_pull(&tn, &lp, &r), RP_OK);
    rewind(log);
    char text[4096];
    text[fread(text, 1, sizeof(text) - 1, log)] = 0;
    fclose(log);
    assert_non_null(strstr(text, "model.safetensors: already there\n"));
    assert_non_null(strstr(text, "config.json: already there\n"));
    assert_null(strstr(text, "\r"));
    assert_int_equal(srv.blob_gets, 1);
    setenv("HF_HUB_OFFLINE", "1", 1);
    rp_hub_name nm;
    assert_int_equal(rp_hub_name_parse("acme/tiny", NULL, &nm), RP_OK);
    assert_int_equal(rp_hub_resolve(&nm, cache, &r), RP_OK);
    assert_int_equal(pull_into(rp_test_tmp_path("c1-offline"), NULL, 5, 2, &r), RP_ERR_IO);
    assert_non_null(strstr(rp_error_message(), "HF_HUB_OFFLINE"));
    unsetenv("HF_HUB_OFFLINE");

    // main moves on: the pull links the unchanged blobs into the new snapshot, downloads only
    // what changed, and moves refs/main; the old snapshot stays as it was
    reset();
    srv.newer = true;
    assert_int_equal(pull_into(cache, NULL, 5, 2, &r), RP_OK);
    assert_int_equal(srv.blob_gets, 0);
    fx_check_file(cache, "acme/tiny", COMMIT2, "model.safetensors", weights, WEIGHTS_LEN);
    check_regular(cache, COMMIT2, "config.json", CONFIG2_ID, CONFIG2);
    check_regular(cache, COMMIT, "config.json", CONFIG_ID, CONFIG);
    snprintf(p, sizeof(p), "%s/refs/main", dir);
    assert_int_equal(rp_file_read(p, &ref, &n), RP_OK);
    assert_string_equal(ref, COMMIT2);
    rp_free(ref);
    assert_non_null(strstr(r.path, COMMIT2));
}

// On a terminal: one total line redrawn in place, a line per finished file above it, 100% at the end.
static void test_pull_progress(void **state)
{
    reset();
    FILE *log = tmpfile();
    rp_hub_name n;
    assert_int_equal(rp_hub_name_parse("acme/tiny", NULL, &n), RP_OK);
    rp_hub_pull_params p = {.endpoint = endpoint,
                            .cache = rp_test_tmp_path("c-bar"),
                            .stall_s = 5,
                            .retries = 2,
                            .log = log,
                            .progress_bar = true,
                            .parallel = 2};
    rp_hub_resolved r;
    assert_int_equal(rp_hub_pull(&n, &p, &r), RP_OK);
    rewind(log);
    char text[16384];
    text[fread(text, 1, sizeof(text) - 1, log)] = 0;
    fclose(log);
    assert_non_null(strstr(text, "\r\033[Kmodel.safetensors: 293.0 KiB in "));
    assert_non_null(strstr(text, "[####################] 100% 293.0 KiB / 293.0 KiB"));
    assert_non_null(strstr(text, "0 files left\033[K\n"));
}

static void test_pull_resume(void **state)
{
    reset();
    srv.cuts = 1;
    const char *cache = rp_test_tmp_path("c2");
    rp_hub_resolved r;
    assert_int_equal(pull_into(cache, NULL, 5, 3, &r), RP_OK);
    assert_int_equal(srv.blob_full_gets, 1); // the second transfer asked for the rest only
    assert_int_equal(srv.range_gets, 1);
    fx_check_file(cache, "acme/tiny", COMMIT, "model.safetensors", weights, WEIGHTS_LEN);
    char p[4096];
    snprintf(p, sizeof(p), "%s/blobs/%s.incomplete", fx_repo_dir(cache, "acme/tiny"), weights_sha);
    assert_false(exists(p));

    // cut more often than retried: an error, the partial file stays (as after Ctrl-C) and
    // nothing is under the blob's name; the next pull resumes it with a Range
    reset();
    srv.cuts = 2;
    cache = rp_test_tmp_path("c3");
    assert_int_equal(pull_into(cache, NULL, 5, 1, &r), RP_ERR_IO);
    assert_non_null(strstr(rp_error_message(), "model.safetensors"));
    snprintf(p, sizeof(p), "%s/blobs/%s.incomplete", fx_repo_dir(cache, "acme/tiny"), weights_sha);
    struct stat sb;
    assert_int_equal(stat(p, &sb), 0);
    assert_true(sb.st_size > 0 && sb.st_size < WEIGHTS_LEN);
    snprintf(p, sizeof(p), "%s/blobs/%s", fx_repo_dir(cache, "acme/tiny"), weights_sha);
    assert_false(exists(p));
    reset();
    assert_int_equal(pull_into(cache, NULL, 5, 1, &r), RP_OK);
    assert_int_equal(srv.blob_full_gets, 0);
    assert_int_equal(srv.range_gets, 1);
    fx_check_file(cache, "acme/tiny", COMMIT, "model.safetensors", weights, WEIGHTS_LEN);
}

// `rapid pull` interrupted (SIGINT) mid-file leaves blobs/ETAG.incomplete and no blob; the
// next pull resumes it with a Range.
static void test_pull_interrupted(void **state)
{
    reset();
    atomic_store(&srv.hold, true);
    const char *cache = rp_test_tmp_path("c-int");
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        setenv("HF_HUB_CACHE", cache, 1);
        setenv("HF_ENDPOINT", endpoint, 1);
        setenv("XDG_CONFIG_HOME", rp_test_tmp_path("no-config"), 1);
        setenv("RAPID_CATALOG", rp_test_source("models/catalog.json"), 1);
        freopen("/dev/null", "w", stderr);
        execl(getenv("RP_BINARY"), "rapid", "pull", "acme/tiny", (char *)NULL);
        _exit(127);
    }
    char part[4096];
    snprintf(part, sizeof(part), "%s/blobs/%s.incomplete", fx_repo_dir(cache, "acme/tiny"), weights_sha);
    struct stat sb = {0};
    for (int i = 0; i < 400 && (stat(part, &sb) || sb.st_size < WEIGHTS_LEN / 2); i++)
        usleep(25000);
    kill(pid, SIGINT);
    int status;
    waitpid(pid, &status, 0);
    atomic_store(&srv.hold, false);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGINT);
    assert_int_equal(stat(part, &sb), 0);
    assert_true(sb.st_size >= WEIGHTS_LEN / 2 && sb.st_size < WEIGHTS_LEN);
    char blob[4096];
    snprintf(blob, sizeof(blob), "%s/blobs/%s", fx_repo_dir(cache, "acme/tiny"), weights_sha);
    assert_false(exists(blob));
    reset();
    rp_hub_resolved r;
    assert_int_equal(pull_into(cache, NULL, 5, 1, &r), RP_OK);
    assert_int_equal(srv.blob_full_gets, 0);
    assert_int_equal(srv.range_gets, 1);
    fx_check_file(cache, "acme/tiny", COMMIT, "model.safetensors", weights, WEIGHTS_LEN);
}

static void test_pull_wrong_sha(void **state)
{
    reset();
    srv.wrong_sha = true;
    const char *cache = rp_test_tmp_path("c5");
    rp_hub_resolved r;
    assert_int_equal(pull_into(cache, NULL, 5, 2, &r), RP_ERR_IO);
    assert_non_null(strstr(rp_error_message(), "sha256 mismatch"));
    assert_non_null(strstr(rp_error_message(), "model.safetensors"));
    char p[4096];
    const char *dir = fx_repo_dir(cache, "acme/tiny");
    snprintf(p, sizeof(p), "%s/blobs/%s", dir, wrong);
    assert_false(exists(p));
    snprintf(p, sizeof(p), "%s/blobs/%s.incomplete", dir, wrong);
    assert_false(exists(p));
    snprintf(p, sizeof(p), "%s/snapshots/%s/model.safetensors", dir, COMMIT);
    assert_false(exists(p));
    snprintf(p, sizeof(p), "%s/refs/main", dir);
    assert_false(exists(p));
    rp_hub_name n;
    assert_int_equal(rp_hub_name_parse("acme/tiny", NULL, &n), RP_OK);
    assert_int_equal(rp_hub_resolve(&n, cache, &r), RP_ERR_IO);
    // the hub's X-Linked-Etag disagreeing with its own file list: an error, nothing placed
    reset();
    srv.other_linked_etag = true;
    cache = rp_test_tmp_path("c5b");
    assert_int_equal(pull_into(cache, NULL, 5, 1, &r), RP_ERR_IO);
    assert_non_null(strstr(rp_error_message(), "ETag"));
    snprintf(p, sizeof(p), "%s/blobs/%s", fx_repo_dir(cache, "acme/tiny"), weights_sha);
    assert_false(exists(p));
}

static void test_pull_errors(void **state)
{
    rp_hub_resolved r;
    const char *cache = rp_test_tmp_path("c6");
    static const struct {
        int status;
        const char *says;
    } cases[] = {{404, "404 Not Found"}, {500, "HTTP 500"}, {401, "401 Unauthorized"}};
    for (size_t i = 0; i < 3; i++) {
        reset();
        srv.api_status = cases[i].status;
        assert_int_equal(pull_into(cache, NULL, 5, 1, &r), RP_ERR_IO);
        assert_non_null(strstr(rp_error_message(), cases[i].says));
        assert_non_null(strstr(rp_error_message(), "acme/tiny"));
    }
    assert_non_null(strstr(rp_error_message(), "HF_TOKEN"));
    // a gated repo: no token, a wrong one, the right one
    reset();
    srv.need_token = "good";
    assert_int_equal(pull_into(cache, NULL, 5, 1, &r), RP_ERR_IO);
    assert_non_null(strstr(rp_error_message(), "no token was sent"));
    assert_int_equal(pull_into(cache, "bad", 5, 1, &r), RP_ERR_IO);
    assert_non_null(strstr(rp_error_message(), "403 Forbidden"));
    setenv("HF_TOKEN", "good", 1);
    assert_int_equal(pull_into(cache, NULL, 5, 1, &r), RP_OK);
    unsetenv("HF_TOKEN");
    assert_int_equal(pull_into(cache, "bad\nInjected: x", 5, 1, &r), RP_ERR_INVALID);
    // nothing listening
    rp_hub_name n;
    assert_int_equal(rp_hub_name_parse("acme/tiny", NULL, &n), RP_OK);
    rp_hub_pull_params p = {
        .endpoint = "http://127.0.0.1:1", .cache = rp_test_tmp_path("c7"), .stall_s = 2, .retries = 1, .log = stderr};
    assert_int_equal(rp_hub_pull(&n, &p, &r), RP_ERR_IO);
    assert_non_null(strstr(rp_error_message(), "the file list"));
    // a path is nothing to pull
    assert_int_equal(rp_hub_name_parse("./x", NULL, &n), RP_OK);
    assert_int_equal(rp_hub_pull(&n, &p, &r), RP_ERR_INVALID);
}

// What the hub sends is checked before anything is written from it.
static void test_pull_malformed(void **state)
{
    static const char *const bodies[] = {
        "not json",
        "[]",
        "{\"siblings\":[]}",
        "{\"sha\":\"short\",\"siblings\":[]}",
        "{\"sha\":\"abcdefabcdefabcdefabcdefabcdefabcdef0123\"}",
        "{\"sha\":\"abcdefabcdefabcdefabcdefabcdefabcdef0123\",\"siblings\":[{\"rfilename\":\"../../escape\"}]}",
        "{\"sha\":\"abcdefabcdefabcdefabcdefabcdefabcdef0123\",\"siblings\":[{\"rfilename\":\"/abs\"}]}",
        "{\"sha\":\"abcdefabcdefabcdefabcdefabcdefabcdef0123\",\"siblings\":[{\"rfilename\":3}]}",
        "{\"sha\":\"abcdefabcdefabcdefabcdefabcdefabcdef0123\",\"siblings\":[{\"rfilename\":\"config.json\"},"
        "{\"rfilename\":\"model.safetensors\",\"blobId\":\"x/../../y\"}]}",
        "{\"sha\":\"abcdefabcdefabcdefabcdefabcdefabcdef0123\",\"siblings\":[{\"rfilename\":\"config.json\","
        "\"blobId\":\"aa\"},{\"rfilename\":\"model.safetensors\",\"lfs\":{\"sha256\":\"abc\"}}]}",
        "{\"sha\":\"abcdefabcdefabcdefabcdefabcdefabcdef0123\",\"siblings\":[{\"rfilename\":\"pytorch_model.bin\","
        "\"blobId\":\"aa\"}]}",
    };
    rp_hub_resolved r;
    const char *cache = rp_test_tmp_path("c-bad");
    for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
        reset();
        srv.api_body = bodies[i];
        assert_int_not_equal(pull_into(cache, NULL, 5, 1, &r), RP_OK);
        assert_non_null(strstr(rp_error_message(), "acme/tiny"));
        assert_false(exists(rp_test_tmp_path("escape")));
        char p[4096];
        snprintf(p, sizeof(p), "%s/snapshots", fx_repo_dir(cache, "acme/tiny"));
        assert_false(exists(p));
    }
    // a body shorter than the file list's size: the size check fails, nothing placed
    reset();
    srv.short_body = true;
    assert_int_equal(pull_into(cache, NULL, 5, 1, &r), RP_ERR_IO);
    char p[4096];
    snprintf(p, sizeof(p), "%s/blobs/%s", fx_repo_dir(cache, "acme/tiny"), weights_sha);
    assert_false(exists(p));
}

static void test_pull_stall(void **state)
{
    reset();
    srv.stall = true;
    const char *cache = rp_test_tmp_path("c8");
    rp_hub_resolved r;
    assert_int_equal(pull_into(cache, NULL, 1, 1, &r), RP_ERR_IO);
    assert_non_null(strstr(rp_error_message(), "HF_HUB_DOWNLOAD_TIMEOUT"));
    char p[4096];
    snprintf(p, sizeof(p), "%s/blobs/%s", fx_repo_dir(cache, "acme/tiny"), weights_sha);
    assert_false(exists(p));
}

typedef struct puller {
    const char *cache;
    rp_status st;
} puller;

static void *pull_thread(void *arg)
{
    puller *pl = arg;
    rp_hub_resolved r;
    rp_hub_name n;
    rp_hub_name_parse("acme/tiny", NULL, &n);
    rp_hub_pull_params p = {.endpoint = endpoint, .cache = pl->cache, .stall_s = 5, .retries = 2, .log = stderr};
    pl->st = rp_hub_pull(&n, &p, &r);
    if (pl->st)
        fprintf(stderr, "pull: %s\n", rp_error_message());
    return NULL;
}

static void test_pull_concurrent(void **state)
{
    reset();
    const char *cache = rp_test_tmp_path("c9");
    puller a = {cache, RP_ERR_IO}, b = {cache, RP_ERR_IO};
    pthread_t ta, tb;
    assert_int_equal(pthread_create(&ta, NULL, pull_thread, &a), 0);
    assert_int_equal(pthread_create(&tb, NULL, pull_thread, &b), 0);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    assert_int_equal(a.st, RP_OK);
    assert_int_equal(b.st, RP_OK);
    assert_int_equal(srv.blob_gets, 1); // the lock: one download, the other pull waited and linked it
    fx_check_file(cache, "acme/tiny", COMMIT, "model.safetensors", weights, WEIGHTS_LEN);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pull_layout),     cmocka_unit_test(test_pull_progress),
        cmocka_unit_test(test_pull_resume),     cmocka_unit_test(test_pull_interrupted),
        cmocka_unit_test(test_pull_wrong_sha),  cmocka_unit_test(test_pull_errors),
        cmocka_unit_test(test_pull_malformed),  cmocka_unit_test(test_pull_stall),
        cmocka_unit_test(test_pull_concurrent),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
