/*
 * test_tasks.c - the task file: bench/tasks.json itself (20 tasks of the
 * kinds the issue lists, 30 tool cases over 8 tools, 10 agent turns, every
 * request body buildable, against a fake standard library holding just the
 * modules it names), placeholder expansion, module lookup, tool-call
 * checking, and task files that are wrong in each way the loader checks.
 */
#define RP_TEST_TMP_PREFIX "rp-test-bench-tasks"
#include "bench_test_util.h"

// Creates DIR/<module>.py (dots become folders) holding a line naming it.
static void fake_module(const char *dir, const char *module)
{
    char rel[256], path[1024];
    snprintf(rel, sizeof(rel), "%s", module);
    for (char *p = rel; *p; p++) {
        if (*p != '.')
            continue;
        *p = 0;
        snprintf(path, sizeof(path), "%s/%s", dir, rel);
        mkdir(path, 0755);
        *p = '/';
    }
    snprintf(path, sizeof(path), "%s/%s.py", dir, rel);
    char text[300];
    snprintf(text, sizeof(text), "# module %s\nx = '{{not a placeholder}}'\n", module);
    rp_test_write_file(path, text, strlen(text));
}

// Every {{source:NAME}} in s gets a fake module in dir.
static void fake_sources(const char *dir, const char *s)
{
    for (const char *p = strstr(s, "{{source:"); p; p = strstr(p + 1, "{{source:")) {
        const char *e = strstr(p, "}}");
        assert_non_null(e);
        char name[128];
        snprintf(name, sizeof(name), "%.*s", (int)(e - p - 9), p + 9);
        fake_module(dir, name);
    }
}

static void test_shipped_task_file(void **state)
{
    rp_bench_taskset ts;
    assert_int_equal(rp_bench_taskset_load(rp_test_source("bench/tasks.json"), &ts), RP_OK);
    const json_t *tasks = json_object_get(ts.root, "tasks");
    assert_int_equal(json_array_size(tasks), 20);
    // The kinds the issue asks for, each at least once.
    static const char *const kinds[] = {"code-edit",        "diff",        "json",         "tool-call", "agent",
                                        "summary",          "translation", "proofreading", "email",     "story",
                                        "code-explanation", "sql",         "regex",        "markdown",  "technical"};
    for (size_t k = 0; k < sizeof(kinds) / sizeof(*kinds); k++) {
        bool found = false;
        size_t i;
        const json_t *t;
        json_array_foreach(tasks, i, t) found |= strcmp(json_string_value(json_object_get(t, "kind")), kinds[k]) == 0;
        if (!found)
            fail_msg("no task of kind %s", kinds[k]);
    }
    int edits = 0;
    size_t i;
    const json_t *t;
    json_array_foreach(tasks, i, t) edits += strcmp(json_string_value(json_object_get(t, "kind")), "code-edit") == 0;
    assert_int_equal(edits, 3); // rename, fix a bug, add type hints
    const json_t *sc = json_object_get(ts.root, "tools_scenario");
    assert_int_equal(json_array_size(json_object_get(sc, "tools")), 8);
    assert_int_equal(json_array_size(json_object_get(sc, "cases")), 30);
    assert_int_equal(json_array_size(json_object_get(json_object_get(ts.root, "agent"), "turns")), 10);
    const json_t *levels = json_object_get(json_object_get(ts.root, "concurrency"), "levels");
    assert_int_equal(json_array_size(levels), 3);
    assert_int_equal(json_integer_value(json_array_get(levels, 2)), 16);
    const json_t *sizes = json_object_get(json_object_get(ts.root, "prefill"), "sizes");
    assert_int_equal(json_integer_value(json_array_get(sizes, 0)), 2048);
    assert_int_equal(json_integer_value(json_array_get(sizes, 2)), 16384);

    // Every body builds, against a standard library that holds only the named modules.
    char *all = json_dumps(ts.root, 0);
    const char *lib = rp_test_tmp_path("lib");
    char dir[512];
    snprintf(dir, sizeof(dir), "%s", lib);
    mkdir(dir, 0755);
    fake_sources(dir, all);
    free(all);
    json_array_foreach(tasks, i, t)
    {
        char *body = NULL;
        if (rp_bench_body(&ts, t, "m", dir, NULL, &body) != RP_OK)
            fail_msg("%s: %s", json_string_value(json_object_get(t, "id")), rp_error_message());
        json_t *b = test_json(body);
        assert_true(json_is_true(json_object_get(b, "stream")));
        assert_true(json_integer_value(json_object_get(b, "max_tokens")) > 0);
        assert_null(strstr(body, "{{source:")); // every placeholder filled
        assert_null(strstr(body, "{{text:"));
        bool think = json_is_true(json_object_get(t, "thinking"));
        assert_int_equal(json_is_true(json_object_get(json_object_get(b, "chat_template_kwargs"), "enable_thinking")),
                         think);
        json_decref(b);
        rp_free(body);
    }
    // The agent-turn task offers its tools and a long system prompt.
    char *body = NULL;
    assert_int_equal(rp_bench_body(&ts, rp_bench_taskset_find(&ts, "agent-turn"), "m", dir, NULL, &body), RP_OK);
    json_t *b = test_json(body);
    assert_int_equal(json_array_size(json_object_get(b, "tools")), 6);
    const char *sys = json_string_value(json_object_get(json_array_get(json_object_get(b, "messages"), 0), "content"));
    assert_true(strlen(sys) > 6000);
    json_decref(b);
    rp_free(body);
    // Without a Python the code tasks fail with a message saying so.
    assert_int_equal(rp_bench_body(&ts, rp_bench_taskset_find(&ts, "code-rename"), "m", NULL, NULL, &body), RP_ERR_IO);
    assert_contains(rp_error_message(), "no Python standard library was found");
    rp_bench_taskset_deinit(&ts);
}

static void test_expand(void **state)
{
    json_t *root = test_json("{\"texts\": {\"a\": \"TEXT {{text:a}}\"}}");
    rp_bench_taskset ts = {.root = root, .path = "t.json"};
    const char *lib = rp_test_tmp_path("lib2");
    char dir[512];
    snprintf(dir, sizeof(dir), "%s", lib);
    mkdir(dir, 0755);
    fake_module(dir, "pkg.sub");
    char *out = NULL;
    assert_int_equal(rp_bench_expand(&ts, dir, "N1", "<{{text:a}}|{{nonce}}|{{source:pkg.sub}}>", &out), RP_OK);
    assert_string_equal(out, "<TEXT {{text:a}}|N1|# module pkg.sub\nx = '{{not a placeholder}}'\n>");
    rp_free(out);
    assert_int_equal(rp_bench_expand(&ts, dir, NULL, "no placeholders {single}", &out), RP_OK);
    assert_string_equal(out, "no placeholders {single}");
    rp_free(out);
    assert_int_equal(rp_bench_expand(&ts, dir, NULL, "{{nonce}}", &out), RP_ERR_INVALID);
    assert_null(out);
    assert_int_equal(rp_bench_expand(&ts, dir, NULL, "{{text:zz}}", &out), RP_ERR_INVALID);
    assert_contains(rp_error_message(), "no text named 'zz'");
    assert_int_equal(rp_bench_expand(&ts, dir, NULL, "{{what}}", &out), RP_ERR_INVALID);
    assert_contains(rp_error_message(), "unknown placeholder {{what}}");
    assert_int_equal(rp_bench_expand(&ts, dir, NULL, "open {{text:a", &out), RP_ERR_INVALID);
    assert_int_equal(rp_bench_expand(&ts, dir, NULL, "{{source:nope}}", &out), RP_ERR_IO);
    assert_contains(rp_error_message(), "Python module 'nope' not found under");
    // Module names cannot leave the folder.
    static const char *const bad[] = {"../etc/passwd", "a..b", ".hidden", "a/b", "", "x.", "a b"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        char *src = NULL;
        size_t n;
        assert_int_equal(rp_bench_stdlib_source(dir, bad[i], &src, &n), RP_ERR_INVALID);
        assert_null(src);
    }
    // A package gives its __init__.py.
    char p[600];
    snprintf(p, sizeof(p), "%s/pkg/__init__.py", dir);
    rp_test_write_file(p, "INIT\n", 5);
    char *src = NULL;
    size_t n;
    assert_int_equal(rp_bench_stdlib_source(dir, "pkg", &src, &n), RP_OK);
    assert_string_equal(src, "INIT\n");
    rp_free(src);
    json_decref(root);
}

static void test_tool_pass(void **state)
{
    json_t *calls = test_json("[{\"name\":\"create_event\",\"arguments\":\"{\\\"title\\\":\\\"Dentist\\\","
                              "\\\"duration_minutes\\\":45.0,\\\"tags\\\":[1,2],\\\"extra\\\":true}\"}]");
    json_t *want = test_json("{\"title\":\"Dentist\",\"duration_minutes\":45,\"tags\":[1.0,2]}");
    assert_true(rp_bench_tool_pass(calls, "create_event", want)); // 45 == 45.0; extra arguments are fine
    assert_false(rp_bench_tool_pass(calls, "set_timer", want));
    json_t *other = test_json("{\"title\":\"dentist\"}"); // strings compare exactly
    assert_false(rp_bench_tool_pass(calls, "create_event", other));
    json_t *absent = test_json("{\"date\":\"2025-03-14\"}");
    assert_false(rp_bench_tool_pass(calls, "create_event", absent));
    json_t *bad = test_json("[{\"name\":\"create_event\",\"arguments\":\"{not json\"}]");
    assert_false(rp_bench_tool_pass(bad, "create_event", want));
    assert_false(rp_bench_tool_pass(NULL, "create_event", want));
    json_t *empty = json_array();
    assert_false(rp_bench_tool_pass(empty, "create_event", want));
    json_decref(calls);
    json_decref(want);
    json_decref(other);
    json_decref(absent);
    json_decref(bad);
    json_decref(empty);
}

static void test_bad_task_files(void **state)
{
    static const char tools[] = "\"tools\":{\"t\":{\"description\":\"d\",\"parameters\":{}}}";
    static const char task[] = "{\"id\":\"a\",\"kind\":\"k\",\"prompt\":\"p\",\"max_tokens\":5}";
    static const struct {
        const char *text, *want;
    } cases[] = {
        {"{oops", "line 1"},
        {"{\"tasks\":[]}", "not a task file"},
        {"{\"format\":\"rapid-bench-tasks/1\"}", "\"tasks\" is missing"},
        {"{\"format\":\"rapid-bench-tasks/1\",\"texts\":[],\"tasks\":[]}", "\"texts\" is not an object"},
        {"{\"format\":\"rapid-bench-tasks/1\",\"texts\":{\"x\":1},\"tasks\":[]}", "texts: 'x' is not a string"},
        {"{\"format\":\"rapid-bench-tasks/1\",\"tools\":{\"t\":{}},\"tasks\":[]}", "tools: 't' needs"},
        {"{\"format\":\"rapid-bench-tasks/1\",\"tasks\":[5]}", "tasks[0] is not an object"},
        {"{\"format\":\"rapid-bench-tasks/1\",\"tasks\":[{\"id\":\"a\",\"kind\":\"k\",\"max_tokens\":5}]}",
         "exactly one of \"prompt\" and \"messages\""},
        {"{\"format\":\"rapid-bench-tasks/1\",\"tasks\":[{\"id\":\"a\",\"kind\":\"k\",\"prompt\":\"p\"}]}",
         "\"max_tokens\" must be"},
        {"{\"format\":\"rapid-bench-tasks/"
         "1\",\"tasks\":[{\"id\":\"a\",\"kind\":\"k\",\"prompt\":\"p\",\"max_tokens\":0}]}",
         "\"max_tokens\" must be"},
        {"{\"format\":\"rapid-bench-tasks/"
         "1\",\"tasks\":[{\"id\":\"a\",\"kind\":\"k\",\"messages\":[],\"max_tokens\":5}]}",
         "\"messages\" must be a non-empty array"},
        {"{\"format\":\"rapid-bench-tasks/"
         "1\",\"tasks\":[{\"id\":\"a\",\"kind\":\"k\",\"prompt\":\"p\",\"max_tokens\":5,"
         "\"tools\":[\"nope\"]}]}",
         "tool 'nope' is not defined"},
        {"{\"format\":\"rapid-bench-tasks/"
         "1\",\"tasks\":[{\"id\":\"a\",\"kind\":\"k\",\"prompt\":\"p\",\"max_tokens\":5,"
         "\"thinking\":\"yes\"}]}",
         "\"thinking\" is not true or false"},
        {"{\"format\":\"rapid-bench-tasks/"
         "1\",\"tasks\":[{\"id\":\"a\",\"kind\":\"k\",\"prompt\":\"p\",\"max_tokens\":5},"
         "{\"id\":\"a\",\"kind\":\"k\",\"prompt\":\"p\",\"max_tokens\":5}]}",
         "task id 'a' appears twice"},
        {"{\"format\":\"rapid-bench-tasks/1\",\"tasks\":[],\"concurrency\":{\"task\":\"zz\",\"levels\":[1]}}",
         "concurrency: \"task\" must name a task"},
        {"{\"format\":\"rapid-bench-tasks/1\",\"tasks\":[],\"agent\":{\"system\":\"s\",\"max_tokens\":4,\"turns\":[]}}",
         "agent: \"turns\" must be"},
        {"{\"format\":\"rapid-bench-tasks/1\",\"tasks\":[],\"prefill\":{\"sizes\":[8],\"sources\":[\"a\"],"
         "\"chars_per_token\":3,\"question\":\"q\",\"max_tokens\":1}}",
         "prefill: a size is not an integer"},
        {"{\"format\":\"rapid-bench-tasks/1\",\"tasks\":[],\"prefill\":{\"sizes\":[64],\"sources\":[\"a\"],"
         "\"chars_per_token\":0,\"question\":\"q\",\"max_tokens\":1}}",
         "chars_per_token"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
        char name[32];
        snprintf(name, sizeof(name), "bad%zu.json", i);
        rp_bench_taskset ts;
        assert_int_equal(rp_bench_taskset_load(test_write_text(name, cases[i].text), &ts), RP_ERR_INVALID);
        assert_contains(rp_error_message(), cases[i].want);
        assert_contains(rp_error_message(), name);
        assert_null(ts.root);
    }
    // A concurrency level out of range, and a tool case expecting a tool not offered.
    char text[1024];
    snprintf(text, sizeof(text),
             "{\"format\":\"rapid-bench-tasks/1\",%s,\"tasks\":[%s],\"concurrency\":{\"task\":\"a\",\"levels\":[0]}}",
             tools, task);
    rp_bench_taskset ts;
    assert_int_equal(rp_bench_taskset_load(test_write_text("c1.json", text), &ts), RP_ERR_INVALID);
    assert_contains(rp_error_message(), "a level is not an integer");
    snprintf(text, sizeof(text),
             "{\"format\":\"rapid-bench-tasks/1\",%s,\"tasks\":[%s],\"tools_scenario\":{\"tools\":[\"t\"],"
             "\"max_tokens\":3,\"cases\":[{\"prompt\":\"p\",\"name\":\"u\",\"arguments\":{}}]}}",
             tools, task);
    assert_int_equal(rp_bench_taskset_load(test_write_text("c2.json", text), &ts), RP_ERR_INVALID);
    assert_contains(rp_error_message(), "expects 'u', which is not among its tools");
    snprintf(text, sizeof(text), "{\"format\":\"rapid-bench-tasks/1\",%s,\"tasks\":[%s]}", tools, task);
    assert_int_equal(rp_bench_taskset_load(test_write_text("ok.json", text), &ts), RP_OK);
    assert_non_null(rp_bench_taskset_find(&ts, "a"));
    assert_null(rp_bench_taskset_find(&ts, "b"));
    rp_bench_taskset_deinit(&ts);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shipped_task_file),
        cmocka_unit_test(test_expand),
        cmocka_unit_test(test_tool_pass),
        cmocka_unit_test(test_bad_task_files),
    };
    return cmocka_run_group_tests(tests, rp_test_tmp_setup, rp_test_tmp_teardown);
}
