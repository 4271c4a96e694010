/*
 * test_client.c - the transport and whole runs against a scripted local SSE
 * server (sse_server.h): exact figures with an injected clock, usage
 * extraction, the request body sent, an error record for every kind of
 * failure (refused connection, HTTP 500, a JSON body, a body without events,
 * a malformed chunk, an error chunk, no usage, no [DONE], a cut connection, a
 * timeout), concurrent streams, and rp_bench_run over all five scenarios
 * writing a result file whose records and summary are checked.
 */
#define RP_TEST_TMP_PREFIX "rp-test-bench-client"
#include "sse_server.h"

static sse_server srv;

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

static const char body_json[] =
    "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"stream\":true}";

// Sends n copies of body_json to a base URL; fills out[] (initialised here).
static void send_n(const char *base, double timeout_s, fake_clock *clk, size_t n, rp_bench_result *out)
{
    rp_bench_client_params p = {
        .base_url = base, .timeout_s = timeout_s, .clock = clk ? fake_now : NULL, .clock_ctx = clk};
    rp_bench_client *c = NULL;
    assert_int_equal(rp_bench_client_create(&p, &c), RP_OK);
    const char *bodies[16];
    for (size_t i = 0; i < n; i++) {
        bodies[i] = body_json;
        rp_bench_result_init(&out[i]);
    }
    assert_int_equal(rp_bench_client_send(c, bodies, n, out), RP_OK);
    rp_bench_client_destroy(c);
}

static void test_good_stream_exact(void **state)
{
    // Both URL forms: a server address and the OpenAI SDK's ".../v1/".
    char with_v1[160];
    snprintf(with_v1, sizeof(with_v1), "%s/v1/", sse_url(&srv, "good"));
    const char *bases[] = {sse_url(&srv, "good"), with_v1};
    for (int b = 0; b < 2; b++) {
        fake_clock clk = {1000.0, 0.25, 0};
        rp_bench_result r;
        send_n(bases[b], 30, &clk, 1, &r);
        if (r.error)
            fail_msg("%s", r.error);
        assert_int_equal(clk.calls, 5); // the send and four token chunks
        assert_true(r.t_sent == 1000.0);
        assert_true(r.t_first == 1000.25);
        assert_true(r.t_last == 1001.0);
        rp_bench_metrics m;
        rp_bench_metrics_of(&r, &m);
        assert_true(m.ttft_s == 0.25);
        assert_true(m.e2e_s == 1.0);
        assert_true(m.decode_tok_s == 8.0);
        assert_int_equal(r.http_status, 200);
        assert_string_equal(r.text, "Hello, world");
        assert_int_equal(r.prompt_tokens, 12);
        assert_int_equal(r.cached_tokens, 0);
        assert_int_equal(r.completion_tokens, 7);
        assert_string_equal(r.finish_reason, "stop");
        assert_string_equal(r.fingerprint, "fp-test");
        rp_bench_result_deinit(&r);
    }
}

static void expect_failure(const char *base, double timeout_s, const char *want)
{
    rp_bench_result r;
    send_n(base, timeout_s, NULL, 1, &r);
    assert_contains(r.error, want);
    // A failed request still becomes a well-formed record.
    json_t *rec = rp_bench_record_new(&r, 0, "tasks", "x", 0);
    assert_non_null(rec);
    assert_false(json_is_true(json_object_get(rec, "ok")));
    assert_string_equal(json_string_value(json_object_get(rec, "error")), r.error);
    json_decref(rec);
    rp_bench_result_deinit(&r);
}

static void test_failures_become_records(void **state)
{
    char refused[64];
    snprintf(refused, sizeof(refused), "http://127.0.0.1:%d", closed_port());
    expect_failure(refused, 30, "connection failed (refused or unreachable)");
    expect_failure(sse_url(&srv, "http500"), 30, "HTTP 500: {\"error\":{\"message\":\"engine exploded\"");
    expect_failure(sse_url(&srv, "nosuchscript"), 30, "HTTP 404: not found");
    expect_failure(sse_url(&srv, "json"), 30, "not an SSE stream (Content-Type: application/json): {\"object\"");
    expect_failure(sse_url(&srv, "nodata"), 30, "not an SSE stream (no data: events in 12 bytes): hello there");
    expect_failure(sse_url(&srv, "malformed"), 30, "malformed chunk 2");
    expect_failure(sse_url(&srv, "errchunk"), 30, "the server sent an error in the stream: context length exceeded");
    expect_failure(sse_url(&srv, "nousage"), 30, "no usage in the stream");
    expect_failure(sse_url(&srv, "nodone"), 30, "the stream ended before data: [DONE]");
    expect_failure(sse_url(&srv, "cut"), 30, "transfer failed");
    // The reply's first byte comes after 400 ms; a 50 ms limit always fires first.
    expect_failure(sse_url(&srv, "slow"), 0.05, "timed out");
    rp_bench_result r;
    send_n(sse_url(&srv, "nousage"), 30, NULL, 1, &r);
    assert_string_equal(r.text, "ab"); // what came is kept next to the error
    rp_bench_result_deinit(&r);
}

static void test_concurrent_streams(void **state)
{
    rp_bench_result r[8];
    send_n(sse_url(&srv, "good"), 30, NULL, 8, r);
    for (int i = 0; i < 8; i++) {
        assert_null(r[i].error);
        assert_string_equal(r[i].text, "Hello, world");
        assert_int_equal(r[i].completion_tokens, 7);
        rp_bench_result_deinit(&r[i]);
    }
    // Mixed outcomes in one batch stay apart.
    rp_bench_client_params p = {.base_url = sse_url(&srv, "auto"), .timeout_s = 30};
    rp_bench_client *c = NULL;
    assert_int_equal(rp_bench_client_create(&p, &c), RP_OK);
    const char *bodies[] = {body_json, "{\"tools\":[]}", body_json};
    rp_bench_result m[3];
    for (int i = 0; i < 3; i++)
        rp_bench_result_init(&m[i]);
    assert_int_equal(rp_bench_client_send(c, bodies, 3, m), RP_OK);
    assert_string_equal(m[0].text, "Hello, world");
    assert_string_equal(json_string_value(json_object_get(json_array_get(m[1].tool_calls, 0), "name")), "get_weather");
    assert_string_equal(m[2].text, "Hello, world");
    for (int i = 0; i < 3; i++)
        rp_bench_result_deinit(&m[i]);
    rp_bench_client_destroy(c);
}

static void test_send_staggered(void **state)
{
    // Bodies 0 and 1 at once, body 2 once both have 2 token chunks, body 3 once
    // they have ended (more chunks than the script sends). The clock only goes
    // forward, one step per reading, so readings order the events.
    fake_clock clk = {0, 1, 0};
    rp_bench_client_params p = {
        .base_url = sse_url(&srv, "good"), .timeout_s = 30, .clock = fake_now, .clock_ctx = &clk};
    rp_bench_client *c = NULL;
    assert_int_equal(rp_bench_client_create(&p, &c), RP_OK);
    const char *bodies[] = {body_json, body_json, body_json, body_json};
    const int after[] = {-1, -1, 2, 99};
    rp_bench_result r[4];
    for (int i = 0; i < 4; i++)
        rp_bench_result_init(&r[i]);
    assert_int_equal(rp_bench_client_send_ex(c, bodies, 4, after, r), RP_OK);
    for (int i = 0; i < 4; i++) {
        if (r[i].error)
            fail_msg("%s", r[i].error);
        assert_string_equal(r[i].text, "Hello, world");
        // Every token chunk's time is kept, in order, from t_first to t_last.
        assert_int_equal(r[i].n_chunk_t, r[i].token_chunks);
        assert_int_equal(r[i].n_chunk_t, 4);
        assert_true(r[i].chunk_t[0] == r[i].t_first && r[i].chunk_t[3] == r[i].t_last);
        for (int k = 1; k < 4; k++)
            assert_true(r[i].chunk_t[k] > r[i].chunk_t[k - 1]);
    }
    assert_true(r[2].t_sent > r[0].chunk_t[1] && r[2].t_sent > r[1].chunk_t[1]);
    assert_true(r[3].t_sent > r[0].t_last && r[3].t_sent > r[1].t_last);
    for (int i = 0; i < 4; i++)
        rp_bench_result_deinit(&r[i]);
    // No body sent at once: all go at once (nothing would ever start them otherwise).
    const int later[] = {3, 3};
    for (int i = 0; i < 2; i++)
        rp_bench_result_init(&r[i]);
    assert_int_equal(rp_bench_client_send_ex(c, bodies, 2, later, r), RP_OK);
    for (int i = 0; i < 2; i++) {
        assert_null(r[i].error);
        rp_bench_result_deinit(&r[i]);
    }
    // A held-back body to a dead server still gets its record.
    rp_bench_client_destroy(c);
    char dead[64];
    snprintf(dead, sizeof(dead), "http://127.0.0.1:%d", closed_port());
    p.base_url = dead;
    assert_int_equal(rp_bench_client_create(&p, &c), RP_OK);
    for (int i = 0; i < 4; i++)
        rp_bench_result_init(&r[i]);
    assert_int_equal(rp_bench_client_send_ex(c, bodies, 4, after, r), RP_OK);
    for (int i = 0; i < 4; i++) {
        assert_contains(r[i].error, "connection failed");
        assert_int_equal(r[i].n_chunk_t, 0);
        rp_bench_result_deinit(&r[i]);
    }
    rp_bench_client_destroy(c);
}

static void test_status(void **state)
{
    rp_bench_client_params p = {.base_url = sse_url(&srv, "good"), .timeout_s = 30};
    rp_bench_client *c = NULL;
    assert_int_equal(rp_bench_client_create(&p, &c), RP_OK);
    json_t *a = NULL, *b = NULL;
    assert_int_equal(rp_bench_client_status(c, &a), RP_OK);
    assert_int_equal(rp_bench_client_status(c, &b), RP_OK);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(a, "engine"), "prefill_chunk")), 8);
    json_t *d = rp_bench_engine_delta(a, b);
    assert_non_null(d);
    assert_int_equal(json_integer_value(json_object_get(d, "steps")), 10);
    assert_true(fabs(json_real_value(json_object_get(d, "step_seconds")) - 0.5) < 1e-12);
    json_decref(d);
    json_decref(a);
    json_decref(b);
    rp_bench_client_destroy(c);
    // A server without the route: an error, no object.
    char dead[64];
    snprintf(dead, sizeof(dead), "http://127.0.0.1:%d", closed_port());
    p.base_url = dead;
    assert_int_equal(rp_bench_client_create(&p, &c), RP_OK);
    a = (json_t *)1;
    assert_int_equal(rp_bench_client_status(c, &a), RP_ERR_IO);
    assert_null(a);
    rp_bench_client_destroy(c);
}

static void test_client_bad_input(void **state)
{
    rp_bench_client *c = NULL;
    rp_bench_client_params p = {.base_url = "ftp://example.org"};
    assert_int_equal(rp_bench_client_create(&p, &c), RP_ERR_INVALID);
    assert_contains(rp_error_message(), "does not start with http://");
    p.base_url = NULL;
    assert_int_equal(rp_bench_client_create(&p, &c), RP_ERR_INVALID);
    assert_null(c);
    // wait_ready: a live server at once, a dead one fails with the reason.
    p.base_url = sse_url(&srv, "good");
    assert_int_equal(rp_bench_client_create(&p, &c), RP_OK);
    assert_int_equal(rp_bench_client_wait_ready(c, 5), RP_OK);
    rp_bench_client_destroy(c);
    char refused[64];
    snprintf(refused, sizeof(refused), "http://127.0.0.1:%d", closed_port());
    p.base_url = refused;
    assert_int_equal(rp_bench_client_create(&p, &c), RP_OK);
    assert_int_equal(rp_bench_client_wait_ready(c, 0.01), RP_ERR_IO);
    assert_contains(rp_error_message(), "not ready after");
    rp_bench_client_destroy(c);
}

/* ---- whole runs ------------------------------------------------------------------ */

static const char tiny_tasks[] =
    "{\"format\":\"rapid-bench-tasks/1\","
    " \"texts\":{\"greeting\":\"hello {{not expanded}}\"},"
    " \"tools\":{\"get_weather\":{\"description\":\"Weather.\",\"parameters\":{\"type\":\"object\",\"properties\":"
    "{\"city\":{\"type\":\"string\"}}}}},"
    " \"tasks\":["
    "  {\"id\":\"say\",\"kind\":\"chat\",\"prompt\":\"Say {{text:greeting}}\",\"max_tokens\":5},"
    "  {\"id\":\"code\",\"kind\":\"code\",\"system\":\"S\",\"prompt\":\"Code:\\n{{source:fakemod}}\",\"max_tokens\":7,"
    "   \"thinking\":true},"
    "  {\"id\":\"missing\",\"kind\":\"code\",\"prompt\":\"{{source:nosuchmodule}}\",\"max_tokens\":7}],"
    " \"concurrency\":{\"task\":\"say\",\"levels\":[1,3],\"max_tokens\":6,\"ignore_eos\":true},"
    " \"agent\":{\"system\":\"Session {{nonce}}.\",\"tools\":[\"get_weather\"],\"max_tokens\":4,\"turns\":["
    "  [{\"role\":\"user\",\"content\":\"first\"}],"
    "  [{\"role\":\"assistant\",\"content\":\"ok\"},{\"role\":\"user\",\"content\":\"second {{source:pkgmod}}\"}]]},"
    " \"prefill\":{\"sizes\":[16,40],\"chars_per_token\":2,\"sources\":[\"fakemod\"],\"question\":\"Q?\","
    "  \"max_tokens\":3},"
    " \"tools_scenario\":{\"tools\":[\"get_weather\"],\"max_tokens\":9,\"cases\":["
    "  {\"prompt\":\"weather in porto\",\"name\":\"get_weather\",\"arguments\":{\"city\":\"Porto\"}},"
    "  {\"prompt\":\"weather in lima\",\"name\":\"get_weather\",\"arguments\":{\"city\":\"Lima\"}}]}}";

// A fake standard library with a module and a package.
static const char *fake_stdlib(void)
{
    static char dir[512];
    snprintf(dir, sizeof(dir), "%s", rp_test_tmp_path("lib"));
    mkdir(dir, 0755);
    char p[600];
    snprintf(p, sizeof(p), "%s/fakemod.py", dir);
    const char *src = "def f():\n    return '{{x}}'\n# line three\n";
    rp_test_write_file(p, src, strlen(src));
    snprintf(p, sizeof(p), "%s/pkgmod", dir);
    mkdir(p, 0755);
    snprintf(p, sizeof(p), "%s/pkgmod/__init__.py", dir);
    rp_test_write_file(p, "PKG = 1\n", 8);
    return dir;
}

static const json_t *find_record(const json_t *doc, const char *task, int run, int stream)
{
    size_t i;
    const json_t *rec;
    json_array_foreach(json_object_get(doc, "records"), i, rec)
    {
        if (strcmp(json_string_value(json_object_get(rec, "task")), task) == 0 &&
            json_integer_value(json_object_get(rec, "run")) == run &&
            json_integer_value(json_object_get(rec, "stream")) == stream)
            return rec;
    }
    fail_msg("no record for %s run %d stream %d", task, run, stream);
    return NULL;
}

static const json_t *summary_of(const json_t *doc, const char *task)
{
    size_t i;
    const json_t *t;
    json_array_foreach(json_object_get(json_object_get(doc, "summary"), "tasks"), i, t)
    {
        if (strcmp(json_string_value(json_object_get(t, "task")), task) == 0)
            return t;
    }
    fail_msg("no summary for %s", task);
    return NULL;
}

static double median_of(const json_t *sum, const char *what)
{
    return json_number_value(json_object_get(json_object_get(sum, what), "median"));
}

// The n-th request body the server got (parsed).
static json_t *body_at(int i)
{
    assert_true(i < srv.n_bodies);
    return test_json(srv.bodies[i]);
}

static void test_run_every_scenario(void **state)
{
    const char *tasks = test_write_text("tasks.json", tiny_tasks);
    const char *lib = fake_stdlib();
    const char *out = rp_test_tmp_path("out.json");
    fake_clock clk = {0, 0.25, 0};
    json_t *meta = test_json("{\"server\":\"scripted\"}");
    json_t *argv = test_json("[\"bench\",\"--test\"]");
    rp_bench_params p;
    rp_bench_params_default(&p);
    p.base_url = sse_url(&srv, "auto");
    p.model = "tiny";
    p.tasks_path = tasks;
    p.stdlib_dir = lib;
    p.out_path = out;
    p.label = "scripted";
    p.scenarios = RP_BENCH_SCENARIO_TASKS | RP_BENCH_SCENARIO_CONCURRENCY | RP_BENCH_SCENARIO_AGENT |
                  RP_BENCH_SCENARIO_PREFILL | RP_BENCH_SCENARIO_TOOLS;
    p.runs = 2;
    p.warmup = 1;
    p.seed = 42;
    p.restart_cmd = "true";
    p.restart_timeout_s = 10;
    p.meta = meta;
    p.argv = argv;
    p.quiet = true;
    p.clock = fake_now;
    p.clock_ctx = &clk;
    size_t n_req = 0, n_failed = 0;
    int first_body = srv.n_bodies;
    assert_int_equal(rp_bench_run(&p, &n_req, &n_failed), RP_OK);
    // tasks 2x3, concurrency 2x(1+3), agent 2x2 turns x2 phases, prefill 2x2, tools 2x2
    assert_int_equal(n_req, 6 + 8 + 8 + 4 + 4);
    assert_int_equal(n_failed, 2);                                   // the missing module, once per run
    assert_int_equal(srv.n_bodies - first_body, 1 + (int)n_req - 2); // + warm-up, - the two never sent

    json_t *doc = NULL;
    assert_int_equal(rp_bench_doc_load(out, &doc), RP_OK);
    assert_string_equal(json_string_value(json_object_get(doc, "format")), RP_BENCH_FORMAT);
    assert_string_equal(json_string_value(json_object_get(doc, "label")), "scripted");
    assert_int_equal(json_array_size(json_object_get(doc, "records")), n_req);

    // Each sequential request reads the clock 5 times: figures are exact.
    const json_t *say = find_record(doc, "say", 1, 0);
    assert_true(json_is_true(json_object_get(say, "ok")));
    assert_true(json_real_value(json_object_get(say, "ttft_s")) == 0.25);
    assert_true(json_real_value(json_object_get(say, "decode_tok_s")) == 8.0);
    assert_true(json_real_value(json_object_get(say, "e2e_s")) == 1.0);
    assert_int_equal(json_integer_value(json_object_get(say, "completion_tokens")), 7);
    assert_string_equal(json_string_value(json_object_get(say, "text")), "Hello, world");
    const json_t *sum = summary_of(doc, "say");
    assert_true(median_of(sum, "ttft_s") == 0.25);
    assert_true(median_of(sum, "decode_tok_s") == 8.0);
    assert_true(median_of(sum, "e2e_s") == 1.0);
    assert_int_equal(json_integer_value(json_object_get(sum, "runs")), 2);

    const json_t *missing = find_record(doc, "missing", 0, 0);
    assert_contains(json_string_value(json_object_get(missing, "error")),
                    "Python module 'nosuchmodule' not found under");
    assert_int_equal(json_integer_value(json_object_get(summary_of(doc, "missing"), "errors")), 2);

    // Concurrency: one record per stream, all fine.
    for (int s = 0; s < 3; s++) {
        const json_t *rec = find_record(doc, "concurrency-n3", 0, s);
        assert_true(json_is_true(json_object_get(rec, "ok")));
        assert_int_equal(json_integer_value(json_object_get(rec, "n_streams")), 3);
    }
    assert_true(median_of(summary_of(doc, "concurrency-n3"), "decode_tok_s") > 0);
    // The section's token limit and ignore_eos went into every concurrency body.
    int conc_bodies = 0;
    for (int i = first_body; i < srv.n_bodies; i++) {
        json_t *cb = body_at(i);
        conc_bodies += json_is_true(json_object_get(cb, "ignore_eos")) &&
                       json_integer_value(json_object_get(cb, "max_tokens")) == 6;
        json_decref(cb);
    }
    assert_int_equal(conc_bodies, 2 * (1 + 3));
    // The level summary: streams, aggregate, per stream, the ratio to one stream.
    const json_t *levels = json_object_get(json_object_get(doc, "summary"), "concurrency");
    assert_int_equal(json_array_size(levels), 2);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(levels, 1), "streams")), 3);
    assert_true(json_real_value(json_object_get(json_array_get(levels, 0), "vs_one_stream")) == 1.0);
    assert_true(json_real_value(json_object_get(json_array_get(levels, 1), "stream_decode_tok_s")) > 0);
    // Each level's server counters (the scripted server's status steps 10 per reading).
    const json_t *srv_notes = json_object_get(doc, "server");
    assert_true(json_array_size(srv_notes) >= 4);
    assert_string_equal(json_string_value(json_object_get(json_array_get(srv_notes, 0), "scenario")), "concurrency");

    // Agent: both phases, turns numbered, failures none.
    const json_t *t2 = find_record(doc, "agent-restart-t02", 1, 0);
    assert_string_equal(json_string_value(json_object_get(t2, "phase")), "restart");
    assert_int_equal(json_integer_value(json_object_get(t2, "turn")), 2);
    assert_true(json_is_true(json_object_get(t2, "ok")));

    // Tools: the script always calls get_weather for Porto.
    assert_true(json_is_true(json_object_get(find_record(doc, "tools-01", 0, 0), "pass")));
    assert_false(json_is_true(json_object_get(find_record(doc, "tools-02", 0, 0), "pass")));
    const json_t *tools = json_object_get(json_object_get(doc, "summary"), "tools");
    assert_true(json_real_value(json_object_get(tools, "pass_rate_median")) == 0.5);
    assert_int_equal(json_integer_value(json_object_get(find_record(doc, "prefill-40", 1, 0), "target_tokens")), 40);

    // The environment.
    const json_t *env = json_object_get(doc, "environment");
    assert_string_equal(json_string_value(json_object_get(env, "rapid_version")), RP_VERSION);
    assert_string_equal(json_string_value(json_object_get(env, "seed")), "42");
    assert_string_equal(json_string_value(json_object_get(env, "python_stdlib")), lib);
    assert_string_equal(json_string_value(json_object_get(env, "server_fingerprint")), "fp-test");
    assert_string_equal(json_string_value(json_object_get(json_object_get(env, "meta"), "server")), "scripted");
    assert_int_equal(json_array_size(json_object_get(env, "argv")), 2);
    assert_true(json_integer_value(json_object_get(json_object_get(env, "machine"), "cores")) >= 1);
    assert_int_equal(json_array_size(json_object_get(env, "scenarios")), 5);

    // What was sent. Body 0 is the warm-up; then "say" and "code" of run 0.
    json_t *b = body_at(first_body + 1);
    assert_true(json_is_true(json_object_get(b, "stream")));
    assert_true(json_is_true(json_object_get(json_object_get(b, "stream_options"), "include_usage")));
    assert_true(json_number_value(json_object_get(b, "temperature")) == 0);
    assert_int_equal(json_integer_value(json_object_get(b, "max_tokens")), 5);
    assert_string_equal(json_string_value(json_object_get(b, "model")), "tiny");
    assert_false(json_is_true(json_object_get(json_object_get(b, "chat_template_kwargs"), "enable_thinking")));
    // A named text is inserted as it is (placeholders inside it are not expanded).
    const json_t *msg = json_array_get(json_object_get(b, "messages"), 0);
    assert_string_equal(json_string_value(json_object_get(msg, "content")), "Say hello {{not expanded}}");
    json_decref(b);
    b = body_at(first_body + 2);
    assert_true(json_is_true(json_object_get(json_object_get(b, "chat_template_kwargs"), "enable_thinking")));
    msg = json_array_get(json_object_get(b, "messages"), 0);
    assert_string_equal(json_string_value(json_object_get(msg, "role")), "system");
    msg = json_array_get(json_object_get(b, "messages"), 1);
    assert_string_equal(json_string_value(json_object_get(msg, "content")),
                        "Code:\ndef f():\n    return '{{x}}'\n# line three\n");
    json_decref(b);
    // Agent turn 2 (first phase and after the restart): same prompt, nonce and all.
    int agent_first = first_body + 1 + 4 + 8; // warm-up, tasks (2 sent per run), concurrency
    json_t *a2 = body_at(agent_first + 1), *r2 = body_at(agent_first + 3);
    assert_true(json_equal(a2, r2));
    const json_t *msgs = json_object_get(a2, "messages");
    assert_int_equal(json_array_size(msgs), 4);
    assert_int_equal(strlen(json_string_value(json_object_get(json_array_get(msgs, 0), "content"))),
                     strlen("Session .") + 16);
    assert_string_equal(json_string_value(json_object_get(json_array_get(msgs, 3), "content")), "second PKG = 1\n");
    assert_int_equal(json_array_size(json_object_get(a2, "tools")), 1);
    json_decref(a2);
    json_decref(r2);
    // Prefill: the nonce first, the source cut at a line end, the question last.
    json_t *pf = body_at(agent_first + 8);
    const char *prompt =
        json_string_value(json_object_get(json_array_get(json_object_get(pf, "messages"), 0), "content"));
    assert_int_equal(strncmp(prompt, "Request ", 8), 0);
    assert_contains(prompt, ".\n\n# ---- fakemod ----\ndef f():\n\nQ?");
    json_decref(pf);

    json_decref(doc);
    json_decref(meta);
    json_decref(argv);
}

static void test_run_restart_failure_and_refused(void **state)
{
    const char *tasks = test_write_text("tasks2.json", tiny_tasks);
    const char *out = rp_test_tmp_path("out2.json");
    rp_bench_params p;
    rp_bench_params_default(&p);
    p.base_url = sse_url(&srv, "auto");
    p.model = "tiny";
    p.tasks_path = tasks;
    p.stdlib_dir = fake_stdlib();
    p.out_path = out;
    p.scenarios = RP_BENCH_SCENARIO_AGENT;
    p.runs = 1;
    p.restart_cmd = "exit 3";
    p.quiet = true;
    size_t n_req, n_failed;
    assert_int_equal(rp_bench_run(&p, &n_req, &n_failed), RP_OK);
    assert_int_equal(n_req, 4);
    assert_int_equal(n_failed, 2);
    json_t *doc = NULL;
    assert_int_equal(rp_bench_doc_load(out, &doc), RP_OK);
    assert_contains(json_string_value(json_object_get(find_record(doc, "agent-restart-t01", 0, 0), "error")),
                    "the restart command failed (exit 3)");
    json_decref(doc);
    // Nothing listening: every request is a record with the reason, the run completes.
    char refused[64];
    snprintf(refused, sizeof(refused), "http://127.0.0.1:%d", closed_port());
    p.base_url = refused;
    p.scenarios = RP_BENCH_SCENARIO_TASKS;
    p.restart_cmd = NULL;
    assert_int_equal(rp_bench_run(&p, &n_req, &n_failed), RP_OK);
    assert_int_equal(n_req, 3);
    assert_int_equal(n_failed, 3);
    assert_int_equal(rp_bench_doc_load(out, &doc), RP_OK);
    assert_contains(json_string_value(json_object_get(find_record(doc, "say", 0, 0), "error")), "connection failed");
    json_decref(doc);
}

static void test_run_bad_parameters(void **state)
{
    rp_bench_params p;
    rp_bench_params_default(&p);
    p.base_url = sse_url(&srv, "good");
    p.model = "m";
    p.out_path = rp_test_tmp_path("out3.json");
    p.quiet = true;
    p.tasks_path = rp_test_tmp_path("no-such-tasks.json");
    assert_int_equal(rp_bench_run(&p, NULL, NULL), RP_ERR_IO);
    assert_contains(rp_error_message(), "no-such-tasks.json");
    p.tasks_path = test_write_text("bad.json", "{\"format\":\"rapid-bench-tasks/1\",\"tasks\":[{\"id\":\"A B\"}]}");
    assert_int_equal(rp_bench_run(&p, NULL, NULL), RP_ERR_INVALID);
    assert_contains(rp_error_message(), "tasks[0]: \"id\" must be a name");
    p.tasks_path = test_write_text("tasks3.json", tiny_tasks);
    p.only = "say,nope";
    assert_int_equal(rp_bench_run(&p, NULL, NULL), RP_ERR_INVALID);
    assert_contains(rp_error_message(), "--only: no task 'nope'");
    p.only = NULL;
    p.out_path = "/nonexistent-dir/out.json";
    assert_int_equal(rp_bench_run(&p, NULL, NULL), RP_ERR_IO);
    p.out_path = rp_test_tmp_path("out3.json");
    p.runs = 0;
    assert_int_equal(rp_bench_run(&p, NULL, NULL), RP_ERR_INVALID);
    p.runs = 1;
    p.base_url = "nope://x";
    assert_int_equal(rp_bench_run(&p, NULL, NULL), RP_ERR_INVALID);
    unsigned sc;
    assert_int_equal(rp_bench_scenarios_parse("tasks,agent", &sc), RP_OK);
    assert_int_equal(sc, RP_BENCH_SCENARIO_TASKS | RP_BENCH_SCENARIO_AGENT);
    assert_int_equal(rp_bench_scenarios_parse("all", &sc), RP_OK);
    assert_int_equal(sc, 63);
    assert_int_equal(rp_bench_scenarios_parse("interference", &sc), RP_OK);
    assert_int_equal(sc, RP_BENCH_SCENARIO_INTERFERENCE);
    assert_int_equal(rp_bench_scenarios_parse("tasks,speed", &sc), RP_ERR_INVALID);
    assert_contains(rp_error_message(), "unknown scenario 'speed'");
    assert_int_equal(rp_bench_scenarios_parse("", &sc), RP_ERR_INVALID);
}

static void test_run_interference(void **state)
{
    // Two streams; the long prompt goes once each has 2 token chunks.
    static const char tasks_text[] =
        "{\"format\":\"rapid-bench-tasks/1\","
        " \"tasks\":[{\"id\":\"say\",\"kind\":\"chat\",\"prompt\":\"Say hi\",\"max_tokens\":5}],"
        " \"prefill\":{\"sizes\":[16],\"chars_per_token\":2,\"sources\":[\"fakemod\"],\"question\":\"Q?\","
        "  \"max_tokens\":3},"
        " \"interference\":{\"task\":\"say\",\"streams\":2,\"stream_max_tokens\":40,\"after_chunks\":2,"
        "  \"prompt_tokens\":20}}";
    fake_clock clk = {0, 0.25, 0};
    rp_bench_params p;
    rp_bench_params_default(&p);
    p.base_url = sse_url(&srv, "good");
    p.model = "tiny";
    p.tasks_path = test_write_text("tasks-inter.json", tasks_text);
    p.stdlib_dir = fake_stdlib();
    p.out_path = rp_test_tmp_path("out-inter.json");
    p.scenarios = RP_BENCH_SCENARIO_INTERFERENCE;
    p.runs = 2;
    p.seed = 7;
    p.quiet = true;
    p.clock = fake_now;
    p.clock_ctx = &clk;
    size_t n_req = 0, n_failed = 0;
    int first_body = srv.n_bodies;
    assert_int_equal(rp_bench_run(&p, &n_req, &n_failed), RP_OK);
    assert_int_equal(n_req, 2 * 3);
    assert_int_equal(n_failed, 0);
    // The streams ask for their token limit with end of generation ignored; the
    // long prompt is literal source text after a nonce.
    json_t *b0 = body_at(first_body);
    assert_int_equal(json_integer_value(json_object_get(b0, "max_tokens")), 40);
    assert_true(json_is_true(json_object_get(b0, "ignore_eos")));
    json_decref(b0);
    json_t *b2 = body_at(first_body + 2);
    const char *content =
        json_string_value(json_object_get(json_array_get(json_object_get(b2, "messages"), 0), "content"));
    assert_contains(content, "Request ");
    assert_contains(content, "# ---- fakemod ----\ndef f():"); // 20 tokens x 2 characters, cut at a line end
    assert_null(json_object_get(b2, "ignore_eos"));
    assert_int_equal(json_integer_value(json_object_get(b2, "max_tokens")), 3);
    json_decref(b2);

    json_t *doc = NULL;
    assert_int_equal(rp_bench_doc_load(p.out_path, &doc), RP_OK);
    for (int run = 0; run < 2; run++) {
        const json_t *lg = find_record(doc, "interference-prompt", run, 0);
        assert_int_equal(json_integer_value(json_object_get(lg, "prefill_chunk")), 8);
        assert_int_equal(json_integer_value(json_object_get(lg, "chunks")), 2); // 12 prompt tokens, chunks of 8
        double ttft = json_real_value(json_object_get(lg, "ttft_s"));
        assert_true(json_real_value(json_object_get(lg, "chunk_s")) == ttft / 2);
        for (int s = 0; s < 2; s++) {
            const json_t *st = find_record(doc, "interference-streams", run, s);
            assert_int_equal(json_integer_value(json_object_get(st, "n_streams")), 2);
            // Two chunks came before the long prompt was sent: the first gap ends before it.
            assert_true(json_real_value(json_object_get(st, "gap_before_s")) > 0);
            assert_non_null(json_object_get(st, "gap_during_s"));
            assert_non_null(json_object_get(st, "gap_after_s"));
        }
    }
    const json_t *sum = json_object_get(json_object_get(doc, "summary"), "interference");
    assert_int_equal(json_array_size(json_object_get(sum, "per_run")), 2);
    assert_true(json_real_value(json_object_get(sum, "chunk_s")) > 0);
    // The server's counters between the readings around each run.
    const json_t *server = json_object_get(doc, "server");
    assert_int_equal(json_array_size(server), 2);
    const json_t *eng = json_object_get(json_array_get(server, 1), "engine");
    assert_int_equal(json_integer_value(json_object_get(eng, "steps")), 10);
    assert_int_equal(json_array_size(json_object_get(eng, "forward_by_batch")), 1);
    json_decref(doc);

    // No prefill section: a clear error.
    p.tasks_path =
        test_write_text("tasks-inter2.json", "{\"format\":\"rapid-bench-tasks/1\",\"tasks\":[{\"id\":\"say\",\"kind\":"
                                             "\"chat\",\"prompt\":\"hi\",\"max_tokens\":5}],\"interference\":{}}");
    assert_int_equal(rp_bench_run(&p, NULL, NULL), RP_ERR_INVALID);
    assert_contains(rp_error_message(), "interference: needs the \"prefill\" section");
    p.tasks_path = test_write_text("tasks-inter3.json",
                                   "{\"format\":\"rapid-bench-tasks/1\",\"tasks\":[{\"id\":\"say\",\"kind\":"
                                   "\"chat\",\"prompt\":\"hi\",\"max_tokens\":5}],\"interference\":{\"streams\":0}}");
    assert_int_equal(rp_bench_run(&p, NULL, NULL), RP_ERR_INVALID);
    assert_contains(rp_error_message(), "interference: \"streams\" must be an integer in [1, 64]");
    p.tasks_path =
        test_write_text("tasks-inter4.json", "{\"format\":\"rapid-bench-tasks/1\",\"tasks\":[{\"id\":\"say\",\"kind\":"
                                             "\"chat\",\"prompt\":\"hi\",\"max_tokens\":5}],\"interference\":{\"task\":"
                                             "\"nope\"}}");
    assert_int_equal(rp_bench_run(&p, NULL, NULL), RP_ERR_INVALID);
    assert_contains(rp_error_message(), "interference: \"task\" must name a task");
    p.tasks_path =
        test_write_text("tasks-conc.json", "{\"format\":\"rapid-bench-tasks/1\",\"tasks\":[{\"id\":\"say\",\"kind\":"
                                           "\"chat\",\"prompt\":\"hi\",\"max_tokens\":5}],\"concurrency\":{\"task\":"
                                           "\"say\",\"levels\":[1],\"ignore_eos\":\"yes\"}}");
    assert_int_equal(rp_bench_run(&p, NULL, NULL), RP_ERR_INVALID);
    assert_contains(rp_error_message(), "concurrency: \"ignore_eos\" is not true or false");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_stream_exact),
        cmocka_unit_test(test_failures_become_records),
        cmocka_unit_test(test_concurrent_streams),
        cmocka_unit_test(test_client_bad_input),
        cmocka_unit_test(test_run_every_scenario),
        cmocka_unit_test(test_run_restart_failure_and_refused),
        cmocka_unit_test(test_run_bad_parameters),
        cmocka_unit_test(test_send_staggered),
        cmocka_unit_test(test_status),
        cmocka_unit_test(test_run_interference),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
