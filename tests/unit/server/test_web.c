/*
 * test_web.c - the web page's routes on the real server in-process (wire_server.h),
 * over raw sockets, with an API key set: GET / and every embedded file answer without
 * the key, with their types and the Content-Security-Policy; HEAD gives the same head
 * and no body; query strings are ignored; unknown, empty, dotted, encoded, long and
 * odd paths find nothing (404, or 414 past the URI limit) and never a file; other
 * methods are 405 with Allow; the key still guards /v1/status, whose model and
 * speculation sections and the throughput history (what the page's Status view reads)
 * are checked here; a chat reply's timings. Run under ASan by the sanitizer build like every unit test.
 */
#include "test_util.h"

#include "wire_server.h"

#include <math.h>

#define KEY "web-key"
#define AUTH "Authorization: Bearer " KEY "\r\n"

static int setup(void **state)
{
    (void)state;
    return wire_server_start(KEY, 0);
}

static const rp_web_asset *asset(const char *name)
{
    for (size_t i = 0; i < rp_web_n_assets; i++)
        if (strcmp(rp_web_assets[i].name, name) == 0)
            return &rp_web_assets[i];
    return NULL;
}

static void expect_404(const char *method, const char *path)
{
    wire_resp r;
    wire_request(method, path, NULL, NULL, &r);
    if (r.status != 404)
        fail_msg("%s %s: status %d, expected 404: %s", method, path, r.status, r.body);
    if (strcmp(method, "HEAD") != 0)
        assert_non_null(strstr(r.body, "\"not_found\""));
    assert_null(wire_header(&r, "Content-Security-Policy"));
    free(r.body);
}

// The page and each file: the embedded bytes, the type, the policy; HEAD the same without a body.
static void test_page_and_files(void **state)
{
    (void)state;
    const rp_web_asset *index = asset("index.html");
    assert_non_null(index);
    assert_non_null(asset("app.js"));
    assert_non_null(asset("style.css"));
    wire_resp r;
    wire_request("GET", "/", NULL, NULL, &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(r.len, index->len);
    assert_memory_equal(r.body, index->data, index->len);
    assert_string_equal(wire_header(&r, "Content-Type"), "text/html; charset=utf-8");
    const char *csp = wire_header(&r, "Content-Security-Policy");
    assert_non_null(csp);
    assert_non_null(strstr(csp, "script-src 'self'"));
    assert_null(strstr(csp, "unsafe-inline"));
    assert_string_equal(wire_header(&r, "X-Content-Type-Options"), "nosniff");
    free(r.body);
    for (size_t i = 0; i < rp_web_n_assets; i++) {
        const rp_web_asset *a = &rp_web_assets[i];
        char path[256];
        snprintf(path, sizeof(path), "/ui/%s", a->name);
        wire_request("GET", path, NULL, NULL, &r);
        assert_int_equal(r.status, 200);
        assert_int_equal(r.len, a->len);
        assert_memory_equal(r.body, a->data, a->len);
        assert_string_equal(wire_header(&r, "Content-Type"), a->content_type);
        free(r.body);
        wire_request("HEAD", path, NULL, NULL, &r);
        assert_int_equal(r.status, 200);
        assert_int_equal(r.len, 0);
        assert_string_equal(wire_header(&r, "Content-Type"), a->content_type);
        char len[32];
        snprintf(len, sizeof(len), "%zu", a->len);
        assert_string_equal(wire_header(&r, "Content-Length"), len);
        free(r.body);
    }
    wire_request("HEAD", "/", NULL, NULL, &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(r.len, 0);
    assert_non_null(wire_header(&r, "Content-Security-Policy"));
    free(r.body);
    // A query string changes nothing.
    wire_request("GET", "/?view=status&x=%00", NULL, NULL, &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(r.len, index->len);
    free(r.body);
    wire_request("GET", "/ui/app.js?v=2", NULL, NULL, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(wire_header(&r, "Content-Type"), "text/javascript; charset=utf-8");
    free(r.body);
}

// Paths that are no file: looked up in the table, they find nothing.
static void test_odd_paths(void **state)
{
    (void)state;
    static const char *const paths[] = {
        "/ui/nope.js",
        "/ui/",
        "/ui",
        "/ui/../CMakeLists.txt",
        "/ui/..%2fCMakeLists.txt",
        "/ui/%2e%2e/README.md",
        "/ui/app.js/",
        "/ui//app.js",
        "/ui/APP.JS",
        "/ui/%ff%fe",
        "/ui/index.html/x",
        "/index.html",
        "/favicon.ico",
        "//",
        "/ui/app.js%20",
    };
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
        // "/ui" and "//" are no route at all; the rest reach the file route and find no file.
        expect_404("GET", paths[i]);
        expect_404("HEAD", paths[i]);
    }
    // A long name (under the URI limit) finds nothing; past the limit the server answers 414.
    char *path = malloc(20001);
    memcpy(path, "/ui/", 4);
    memset(path + 4, 'a', 900);
    path[904] = 0;
    expect_404("GET", path);
    memset(path + 4, 'a', 19996);
    path[20000] = 0;
    int fd = wire_dial();
    char head[256];
    wire_send(fd, "GET ", 4);
    wire_send(fd, path, strlen(path));
    int hn = snprintf(head, sizeof(head), " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    wire_send(fd, head, (size_t)hn);
    wire_resp r;
    wire_read(fd, &r);
    close(fd);
    assert_int_equal(r.status, 414);
    free(r.body);
    free(path);
    // Other methods: 405 naming the ones the path takes.
    wire_request("POST", "/", NULL, "{}", &r);
    assert_int_equal(r.status, 405);
    assert_string_equal(wire_header(&r, "Allow"), "GET, HEAD");
    free(r.body);
    wire_request("DELETE", "/ui/app.js", NULL, NULL, &r);
    assert_int_equal(r.status, 405);
    assert_string_equal(wire_header(&r, "Allow"), "GET, HEAD");
    free(r.body);
    // The server still serves.
    wire_request("GET", "/", NULL, NULL, &r);
    assert_int_equal(r.status, 200);
    free(r.body);
}

// The key still guards the API; /v1/status has what the Status view reads.
static void test_status_for_the_page(void **state)
{
    (void)state;
    wire_resp r;
    wire_request("GET", "/v1/status", NULL, NULL, &r);
    assert_int_equal(r.status, 401);
    free(r.body);
    wire_request("POST", "/v1/chat/completions", AUTH,
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"Tell me a joke.\"}],\"max_tokens\":24,"
                 "\"temperature\":0}",
                 &r);
    assert_int_equal(r.status, 200);
    json_t *v = body_json(&r);
    json_t *t = json_object_get(v, "timings");
    assert_true(json_is_object(t));
    assert_true(json_is_real(json_object_get(t, "time_to_first_token_s")));
    assert_true(json_is_integer(json_object_get(t, "draft_tokens")));
    json_int_t drafted = json_integer_value(json_object_get(t, "draft_tokens"));
    json_int_t accepted = json_integer_value(json_object_get(t, "draft_tokens_accepted"));
    assert_true(accepted >= 0 && accepted <= drafted);
    json_decref(v);
    free(r.body);

    rp_metrics_sample(server->metrics); // a history sample after the reply (one was taken at start)
    wire_request("GET", "/v1/status", AUTH, NULL, &r);
    assert_int_equal(r.status, 200);
    v = body_json(&r);
    json_t *h = json_object_get(v, "history");
    assert_int_equal(json_integer_value(json_object_get(h, "interval_seconds")), 5);
    json_t *samples = json_object_get(h, "samples");
    size_t ns = json_array_size(samples);
    assert_true(ns >= 2);
    rp_engine_stats now;
    rp_engine_get_stats(engine, &now);
    json_t *newest = json_array_get(samples, ns - 1);
    assert_int_equal(json_integer_value(json_object_get(newest, "tokens_generated")), (json_int_t)now.tokens_generated);
    assert_int_equal(json_integer_value(json_object_get(newest, "tokens_prefilled")), (json_int_t)now.tokens_prefilled);
    for (size_t i = 1; i < ns; i++) { // oldest first: ages fall, counters never do
        json_t *a = json_array_get(samples, i - 1), *b = json_array_get(samples, i);
        assert_true(json_real_value(json_object_get(a, "age_seconds")) >=
                    json_real_value(json_object_get(b, "age_seconds")));
        assert_true(json_integer_value(json_object_get(a, "tokens_generated")) <=
                    json_integer_value(json_object_get(b, "tokens_generated")));
    }
    assert_true(json_real_value(json_object_get(newest, "age_seconds")) >= 0);
    json_t *m = json_object_get(v, "model");
    assert_string_equal(json_string_value(json_object_get(m, "name")), "rapid-tiny");
    assert_string_equal(json_string_value(json_object_get(m, "architecture")),
                        rp_model_get_config(wire_model)->arch_name);
    assert_string_equal(json_string_value(json_object_get(m, "weight_type")),
                        rp_dtype_name(rp_model_weight_type(wire_model)));
    assert_int_equal(json_integer_value(json_object_get(m, "size_bytes")), (json_int_t)rp_model_size_bytes(wire_model));
    assert_string_equal(json_string_value(json_object_get(m, "backend")), "cpu");
    assert_true(strlen(json_string_value(json_object_get(m, "device"))) > 0);
    assert_int_equal(json_integer_value(json_object_get(m, "context_tokens")), wire_ctx);
    json_t *sp = json_object_get(v, "speculation");
    json_t *methods = json_object_get(sp, "methods");
    assert_int_equal(json_array_size(methods), RP_SPEC_N_METHODS);
    rp_engine_stats es;
    rp_engine_get_stats(engine, &es);
    json_int_t sum = 0;
    for (int i = 0; i < RP_SPEC_N_METHODS; i++) {
        json_t *o = json_array_get(methods, (size_t)i);
        assert_string_equal(json_string_value(json_object_get(o, "method")), rp_spec_method_name((rp_spec_method)i));
        assert_int_equal(json_is_true(json_object_get(o, "enabled")), es.spec_methods[i]);
        json_int_t dr = json_integer_value(json_object_get(o, "drafted"));
        json_int_t ac = json_integer_value(json_object_get(o, "accepted"));
        json_int_t steps = json_integer_value(json_object_get(o, "steps"));
        assert_int_equal(dr, (json_int_t)es.spec_drafted[i]);
        assert_int_equal(ac, (json_int_t)es.spec_accepted[i]);
        sum += ac;
        if (dr) {
            assert_true(fabs(json_real_value(json_object_get(o, "acceptance")) - (double)ac / (double)dr) < 1e-9);
            assert_true(steps > 0);
            assert_true(fabs(json_real_value(json_object_get(o, "tokens_per_step")) - (1.0 + (double)ac / steps)) <
                        1e-9);
        } else {
            assert_true(json_is_null(json_object_get(o, "acceptance")));
        }
    }
    assert_int_equal(json_integer_value(json_object_get(sp, "accepted_tokens")), sum);
    assert_true(sum >= accepted);
    json_t *mem = json_object_get(json_object_get(v, "prefix_cache"), "memory");
    assert_true(json_is_integer(json_object_get(mem, "hit_blocks")));
    assert_true(json_is_string(json_object_get(json_object_get(v, "server"), "version")));
    json_decref(v);
    free(r.body);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_page_and_files),
        cmocka_unit_test(test_odd_paths),
        cmocka_unit_test(test_status_for_the_page),
    };
    return cmocka_run_group_tests(tests, setup, wire_teardown);
}
