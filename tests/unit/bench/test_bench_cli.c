/*
 * test_bench_cli.c - `rapid bench` as a user runs it: bad usage exits 2 with
 * the usage, a run against the scripted server writes a result file and exits
 * 0, a run where every request fails exits 1 with the file still written,
 * compare prints and writes its tables, merge joins runs, bad files exit 1
 * naming the file.
 */
#define RP_TEST_TMP_PREFIX "rp-test-bench-cli"
#include "sse_server.h"

#include <sys/wait.h>

static sse_server srv;
static char out[65536], err[65536];

static int setup(void **state)
{
    sse_server_start(&srv);
    return rp_test_tmp_setup(state);
}

static int teardown(void **state)
{
    sse_server_stop(&srv);
    return rp_test_tmp_teardown(state);
}

// Runs `rapid ARGS` (from the source folder); stdout into out, stderr into err.
static int rapid(const char *fmt, ...)
{
    const char *bin = getenv("RP_BINARY");
    if (!bin)
        skip();
    char args[4096], cmd[8192], errfile[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof(args), fmt, ap);
    va_end(ap);
    snprintf(errfile, sizeof(errfile), "%s", rp_test_tmp_path("stderr.txt"));
    snprintf(cmd, sizeof(cmd), "cd '%s' && '%s' %s 2>'%s'", rp_test_source_dir(), bin, args, errfile);
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
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void test_usage(void **state)
{
    assert_int_equal(rapid("bench"), 2);
    assert_contains(err, "give --base-url, --model and --out");
    assert_contains(err, "(see `rapid bench --help`)");
    assert_int_equal(rapid("bench --help"), 0);
    assert_contains(out, "--restart-cmd");
    assert_int_equal(rapid("--help"), 0);
    assert_contains(out, "bench --base-url URL");
    assert_int_equal(rapid("bench --base-url http://x --model m --out o.json --runs 0"), 2);
    assert_contains(err, "invalid value '0' for --runs");
    assert_int_equal(rapid("bench --base-url http://x --model m --out o.json --scenario fast"), 2);
    assert_contains(err, "unknown scenario 'fast'");
    assert_int_equal(rapid("bench --base-url http://x --model m --out o.json --concurrency 1,,4"), 2);
    assert_int_equal(rapid("bench --base-url http://x --model m --out o.json --meta novalue"), 2);
    assert_int_equal(rapid("bench --base-url http://x --model m --out o.json --timeout -1"), 2);
    assert_int_equal(rapid("bench --base-url http://x --model m --out o.json extra"), 2);
    assert_contains(err, "unexpected argument 'extra'");
    assert_int_equal(rapid("bench --bogus"), 2);
    assert_contains(err, "unknown option '--bogus'");
    assert_int_equal(rapid("bench --model"), 2);
    assert_contains(err, "needs a value");
    assert_int_equal(rapid("bench compare one.json"), 2);
    assert_int_equal(rapid("bench compare a b c"), 2);
    assert_int_equal(rapid("bench compare a b --md"), 2);
    assert_int_equal(rapid("bench merge a.json"), 2);
    assert_contains(err, "merge needs --out");
}

static const char tasks_json[] = "{\"format\":\"rapid-bench-tasks/1\",\"tasks\":["
                                 "{\"id\":\"one\",\"kind\":\"chat\",\"prompt\":\"hi\",\"max_tokens\":4},"
                                 "{\"id\":\"two\",\"kind\":\"chat\",\"prompt\":\"ho\",\"max_tokens\":4}]}";

static void test_run_compare_merge(void **state)
{
    char tasks[512], a[512], b[512], m[512], md[512], svg[512];
    snprintf(tasks, sizeof(tasks), "%s", test_write_text("tasks.json", tasks_json));
    snprintf(a, sizeof(a), "%s", rp_test_tmp_path("a.json"));
    snprintf(b, sizeof(b), "%s", rp_test_tmp_path("b.json"));
    snprintf(m, sizeof(m), "%s", rp_test_tmp_path("m.json"));
    snprintf(md, sizeof(md), "%s", rp_test_tmp_path("c.md"));
    snprintf(svg, sizeof(svg), "%s", rp_test_tmp_path("c.svg"));
    const char *url = sse_url(&srv, "good");
    assert_int_equal(rapid("bench --base-url %s --model tiny --tasks %s --runs 2 --label base --warmup 2 "
                           "--meta server=scripted --out %s",
                           url, tasks, a),
                     0);
    assert_contains(err, "[tasks 2/2] two: ttft");
    assert_contains(err, "4 requests, 0 failed");
    assert_int_equal(
        rapid("bench --base-url %s --model tiny --tasks %s --runs 1 --label other -q --out %s", url, tasks, b), 0);
    assert_string_equal(err, "");
    assert_int_equal(rapid("bench compare %s %s --md %s --svg %s", a, b, md, svg), 0);
    assert_contains(out, "A: base\nB: other\n");
    assert_contains(out, "1/1"); // greedy text identical
    assert_true(rp_file_exists(md) && rp_file_exists(svg));
    assert_int_equal(rapid("bench merge --out %s %s %s", m, a, a), 0);
    json_t *doc = NULL;
    assert_int_equal(rp_bench_doc_load(m, &doc), RP_OK);
    assert_int_equal(json_array_size(json_object_get(doc, "records")), 8);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(json_object_get(doc, "environment"), "meta"), "server")),
        "scripted");
    json_decref(doc);
    assert_int_equal(rapid("bench merge --out %s %s %s", m, a, b), 1);
    assert_contains(err, "differs");
    // A Rapid server's counts ("server") are joined too, runs renumbered like the records.
    const char *s1 = test_write_text(
        "s1.json", "{\"format\": \"rapid-bench/1\", \"label\": \"x\", \"records\": [{\"scenario\": \"concurrency\", "
                   "\"task\": \"n1\", \"run\": 0, \"ok\": true}], \"server\": [{\"scenario\": \"concurrency\", "
                   "\"task\": \"n1\", \"run\": 0, \"engine\": {\"steps\": 7}}]}");
    char s1p[512];
    snprintf(s1p, sizeof(s1p), "%s", s1);
    const char *s2 = test_write_text(
        "s2.json", "{\"format\": \"rapid-bench/1\", \"label\": \"x\", \"records\": [{\"scenario\": \"concurrency\", "
                   "\"task\": \"n1\", \"run\": 0, \"ok\": true}], \"server\": [{\"scenario\": \"concurrency\", "
                   "\"task\": \"n1\", \"run\": 0, \"engine\": {\"steps\": 9}}]}");
    assert_int_equal(rapid("bench merge --out %s %s %s", m, s1p, s2), 0);
    assert_int_equal(rp_bench_doc_load(m, &doc), RP_OK);
    const json_t *srv_counts = json_object_get(doc, "server");
    assert_int_equal(json_array_size(srv_counts), 2);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(srv_counts, 1), "run")), 1);
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(json_array_get(srv_counts, 1), "engine"), "steps")), 9);
    json_decref(doc);
    // Every request refused: exit 1, the file holds the reasons.
    char refused[64];
    snprintf(refused, sizeof(refused), "http://127.0.0.1:%d", closed_port());
    assert_int_equal(rapid("bench --base-url %s --model tiny --tasks %s --runs 1 -q --out %s", refused, tasks, b), 1);
    assert_contains(err, "2 requests, 2 failed");
    assert_int_equal(rp_bench_doc_load(b, &doc), RP_OK);
    assert_contains(json_string_value(json_object_get(json_array_get(json_object_get(doc, "records"), 0), "error")),
                    "connection failed");
    json_decref(doc);
    // Bad inputs: exit 1 with the file named.
    const char *bad = test_write_text("bad.json", "{\"format\": \"rapid-bench/1\", \"records\": 3}");
    assert_int_equal(rapid("bench compare %s %s", a, bad), 1);
    assert_contains(err, "bad.json");
    assert_contains(err, "\"records\" is missing or not an array");
    assert_int_equal(rapid("bench --base-url ftp://x --model tiny --tasks %s --out %s", tasks, b), 1);
    assert_contains(err, "does not start with http://");
    assert_int_equal(rapid("bench --base-url %s --model tiny --tasks /nonexistent/tasks.json --out %s", url, b), 1);
    assert_contains(err, "/nonexistent/tasks.json");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_usage),
        cmocka_unit_test(test_run_compare_merge),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
