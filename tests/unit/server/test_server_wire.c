/*
 * test_server_wire.c - the real server in-process on a free loopback port,
 * serving the bundled tiny model, talked to over raw sockets: HEAD /, 404,
 * 405 with Allow, 401 in both error shapes (the Anthropic route matched
 * despite its query string), 413 by Content-Length and by a chunked body,
 * malformed bodies, SSE framing of a streamed chat (role first, finish_reason
 * only at the end, the usage chunk, [DONE]), greedy streaming == greedy
 * non-streaming, stop strings, max_tokens -> length, 503 with Retry-After
 * when the queue is full, a disconnecting client cancelling its generation,
 * the prefix cache in usage (cached_tokens), /v1/status and /metrics, and
 * shutdown with a stream still open. The server keeps serving after
 * every error.
 */
#include "test_util.h"

#include "wire_server.h"

#define KEY "secret-key"

static int setup(void **state)
{
    (void)state;
    return wire_server_start(KEY, 64 * 1024);
}

static int teardown(void **state)
{
    (void)state;
    wire_server_stop(); // with a stream still open (the last test): must return
    return 0;
}

#define AUTH "Authorization: Bearer " KEY "\r\n"

static void post(const char *path, const char *body, wire_resp *r)
{
    wire_request("POST", path, AUTH, body, r);
}

static void expect_error(const wire_resp *r, int status, bool anthropic)
{
    if (r->status != status)
        fail_msg("status %d, expected %d: %s", r->status, status, r->body);
    json_t *v = body_json(r);
    json_t *err = json_object_get(v, "error");
    assert_non_null(json_string_value(json_object_get(err, "message")));
    assert_non_null(json_string_value(json_object_get(err, "type")));
    if (anthropic)
        assert_string_equal(json_string_value(json_object_get(v, "type")), "error");
    else
        assert_non_null(json_object_get(err, "param"));
    json_decref(v);
}

/* ---- tests ------------------------------------------------------------------- */

static void test_routes_and_auth(void **state)
{
    (void)state;
    wire_resp r;
    wire_request("HEAD", "/", NULL, NULL, &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(r.len, 0);
    free(r.body);
    wire_request("GET", "/nope", AUTH, NULL, &r);
    expect_error(&r, 404, false);
    free(r.body);
    wire_request("GET", "/v1/chat/completions", AUTH, NULL, &r);
    expect_error(&r, 405, false);
    assert_string_equal(wire_header(&r, "Allow"), "POST");
    free(r.body);
    wire_request("POST", "/v1/chat/completions", NULL, "{}", &r);
    expect_error(&r, 401, false);
    free(r.body);
    wire_request("POST", "/v1/chat/completions", "Authorization: Bearer wrong\r\n", "{}", &r);
    expect_error(&r, 401, false);
    free(r.body);
    wire_request("POST", "/v1/messages?beta=true", "x-api-key: nope\r\n", "{}", &r);
    expect_error(&r, 401, true);
    free(r.body);
    wire_request("GET", "/v1/models", "x-api-key: " KEY "\r\n", NULL, &r);
    assert_int_equal(r.status, 200);
    json_t *v = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(v, "data"), 0), "id")),
                        "rapid-tiny");
    json_decref(v);
    free(r.body);
    wire_request("GET", "/v1/models/rapid-tiny", AUTH, NULL, &r);
    assert_int_equal(r.status, 200);
    free(r.body);
    wire_request("GET", "/v1/models/other", AUTH, NULL, &r);
    expect_error(&r, 404, false);
    free(r.body);
    wire_request("GET", "/metrics", NULL, NULL, &r);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "rapid_requests_total{model_name=\"rapid-tiny\",route=\"chat\",status=\"401\"}"));
    assert_non_null(strstr(r.body, "rapid_kv_blocks_total"));
    free(r.body);
    still_serving();
}

static void test_limits_and_bad_bodies(void **state)
{
    (void)state;
    wire_resp r;
    size_t big = 70 * 1024;
    char *body = malloc(big + 1);
    memset(body, ' ', big);
    body[big] = 0;
    post("/v1/chat/completions", body, &r); // by Content-Length
    expect_error(&r, 413, false);
    free(r.body);

    // A chunked body that grows past the limit.
    int fd = wire_dial();
    const char *head = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" AUTH
                       "Transfer-Encoding: chunked\r\n\r\n";
    wire_send(fd, head, strlen(head));
    for (int i = 0; i < 10; i++) {
        char ch[32];
        int n = snprintf(ch, sizeof(ch), "%x\r\n", 8192);
        wire_send(fd, ch, (size_t)n);
        wire_send(fd, body, 8192);
        wire_send(fd, "\r\n", 2);
    }
    wire_send(fd, "0\r\n\r\n", 5);
    wire_read(fd, &r);
    close(fd);
    expect_error(&r, 413, false);
    free(r.body);
    free(body);

    static const char *bad[] = {
        "{\"messages\": [",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}",
        "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":1e999}",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"temperature\":NaN}",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":-1}",
        "{\"message\":[]}",
        "",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        post("/v1/chat/completions", bad[i], &r);
        expect_error(&r, 400, false);
        free(r.body);
    }
    // The context check names both numbers.
    char *longp = malloc(20000);
    strcpy(longp, "{\"prompt\":\"");
    for (int i = 0; i < 1500; i++)
        strcat(longp, "word ");
    strcat(longp, "\"}");
    post("/v1/completions", longp, &r);
    expect_error(&r, 400, false);
    assert_non_null(strstr(r.body, "context_length_exceeded"));
    assert_non_null(strstr(r.body, "1024"));
    free(r.body);
    free(longp);
    still_serving();
}

#define CHAT_BODY(extra)                                                                                               \
    "{\"model\":\"any-name\",\"messages\":[{\"role\":\"user\",\"content\":\"Write a python function that adds two "    \
    "numbers.\"}],\"temperature\":0,\"max_tokens\":24" extra "}"

// Payloads of an SSE body's frames, in order.
static int sse_frames(const char *body, char **out, int cap)
{
    int n = 0;
    const char *p = body;
    while (*p) {
        const char *end = strstr(p, "\n\n");
        assert_non_null(end);
        assert_memory_equal(p, "data: ", 6);
        assert_true(n < cap);
        out[n++] = strndup(p + 6, (size_t)(end - p - 6));
        p = end + 2;
    }
    return n;
}

static void test_chat_stream_matches_whole(void **state)
{
    (void)state;
    wire_resp r;
    post("/v1/chat/completions", CHAT_BODY(""), &r);
    assert_int_equal(r.status, 200);
    json_t *whole = body_json(&r);
    free(r.body);
    assert_string_equal(json_string_value(json_object_get(whole, "model")), "rapid-tiny");
    json_t *msg = json_object_get(json_array_get(json_object_get(whole, "choices"), 0), "message");
    const char *content = json_string_value(json_object_get(msg, "content"));
    const char *reasoning = json_string_value(json_object_get(msg, "reasoning_content"));
    assert_non_null(content);
    json_t *usage = json_object_get(whole, "usage");
    assert_true(json_integer_value(json_object_get(usage, "completion_tokens")) <= 24);
    assert_true(json_integer_value(json_object_get(usage, "prompt_tokens")) > 5);

    post("/v1/chat/completions", CHAT_BODY(",\"stream\":true,\"stream_options\":{\"include_usage\":true}"), &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(wire_header(&r, "Content-Type"), "text/event-stream");
    char *f[256];
    int n = sse_frames(r.body, f, 256);
    free(r.body);
    assert_true(n >= 4);
    assert_string_equal(f[n - 1], "[DONE]");
    rp_buf c, rs;
    rp_buf_init(&c);
    rp_buf_init(&rs);
    for (int i = 0; i < n - 1; i++) {
        json_t *k = json_loads(f[i], 0, NULL);
        assert_non_null(k);
        assert_string_equal(json_string_value(json_object_get(k, "object")), "chat.completion.chunk");
        json_t *choices = json_object_get(k, "choices");
        if (i == n - 2) { // the usage chunk
            assert_int_equal(json_array_size(choices), 0);
            json_t *u = json_object_get(k, "usage");
            assert_int_equal(json_integer_value(json_object_get(u, "completion_tokens")),
                             json_integer_value(json_object_get(usage, "completion_tokens")));
            assert_non_null(json_object_get(json_object_get(u, "prompt_tokens_details"), "cached_tokens"));
        } else {
            assert_true(json_is_null(json_object_get(k, "usage")));
            json_t *ch = json_array_get(choices, 0);
            json_t *d = json_object_get(ch, "delta");
            if (i == 0)
                assert_string_equal(json_string_value(json_object_get(d, "role")), "assistant");
            else
                assert_null(json_object_get(d, "role"));
            if (i == n - 3)
                assert_string_equal(json_string_value(json_object_get(ch, "finish_reason")),
                                    json_string_value(json_object_get(
                                        json_array_get(json_object_get(whole, "choices"), 0), "finish_reason")));
            else
                assert_true(json_is_null(json_object_get(ch, "finish_reason")));
            const char *t = json_string_value(json_object_get(d, "content"));
            if (t)
                rp_buf_puts(&c, t);
            t = json_string_value(json_object_get(d, "reasoning_content"));
            if (t)
                rp_buf_puts(&rs, t);
        }
        json_decref(k);
    }
    for (int i = 0; i < n; i++)
        free(f[i]);
    assert_string_equal(c.data ? c.data : "", content);
    assert_string_equal(rs.data ? rs.data : "", reasoning ? reasoning : "");
    rp_buf_deinit(&c);
    rp_buf_deinit(&rs);
    json_decref(whole);
}

// A repeated prompt is served from the prefix cache: usage says so, and /v1/status
// and /metrics count it.
static void test_prefix_cache_and_status(void **state)
{
    (void)state;
#define LONG_CHAT                                                                                                      \
    "{\"messages\":[{\"role\":\"system\",\"content\":\"You are a careful assistant. Answer in one short "              \
    "sentence, show code in fenced blocks, and never invent functions that do not exist.\"},{\"role\":\"user\","       \
    "\"content\":\"What does len() return for an empty list?\"}],\"temperature\":0,\"max_tokens\":8}"
    wire_resp r;
    long long cached[2], prompt = 0;
    char first[2][512];
    for (int i = 0; i < 2; i++) {
        post("/v1/chat/completions", LONG_CHAT, &r);
        assert_int_equal(r.status, 200);
        json_t *v = body_json(&r);
        json_t *u = json_object_get(v, "usage");
        prompt = json_integer_value(json_object_get(u, "prompt_tokens"));
        cached[i] = json_integer_value(json_object_get(json_object_get(u, "prompt_tokens_details"), "cached_tokens"));
        const char *text = json_string_value(
            json_object_get(json_object_get(json_array_get(json_object_get(v, "choices"), 0), "message"), "content"));
        snprintf(first[i], sizeof(first[i]), "%s", text ? text : "");
        json_decref(v);
        free(r.body);
    }
    assert_true(prompt >= 32);
    assert_int_equal(cached[0], 0);
    // The model has an MTP layer: the last cached position is run again.
    assert_int_equal(cached[1], prompt / 16 * 16 - 1);
    assert_string_equal(first[0], first[1]);

    wire_request("GET", "/v1/status", AUTH, NULL, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(wire_header(&r, "Content-Type"), "application/json");
    json_t *st = body_json(&r);
    free(r.body);
    json_t *pc = json_object_get(st, "prefix_cache"), *kv = json_object_get(st, "kv");
    assert_true(json_is_true(json_object_get(pc, "enabled")));
    assert_true(json_integer_value(json_object_get(pc, "hit_tokens")) >= cached[1]);
    assert_true(json_integer_value(json_object_get(pc, "hit_blocks")) >= prompt / 16);
    assert_true(json_integer_value(json_object_get(json_object_get(pc, "memory"), "blocks")) > 0);
    assert_true(json_is_false(json_object_get(json_object_get(pc, "disk"), "enabled")));
    assert_true(json_is_null(json_object_get(json_object_get(pc, "disk"), "dir")));
    assert_int_equal(json_integer_value(json_object_get(kv, "block_tokens")), 16);
    assert_string_equal(json_string_value(json_object_get(kv, "dtype")), "f16");
    assert_int_equal(json_integer_value(json_object_get(kv, "blocks_used")), 0);
    assert_int_equal(json_integer_value(json_object_get(kv, "context_tokens")), 1024);
    assert_true(json_integer_value(json_object_get(kv, "bytes")) > 0);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(st, "requests"), "running")), 0);
    assert_non_null(json_object_get(json_object_get(st, "requests"), "preemptions"));
    // The engine's step times: every forward pass is in one batch-size bucket.
    json_t *eng = json_object_get(st, "engine");
    assert_true(json_integer_value(json_object_get(eng, "prefill_chunk")) > 0);
    assert_true(json_integer_value(json_object_get(eng, "max_batch")) >=
                json_integer_value(json_object_get(eng, "prefill_chunk")));
    assert_true(json_real_value(json_object_get(eng, "step_seconds")) >=
                json_real_value(json_object_get(eng, "forward_seconds")));
    assert_true(json_real_value(json_object_get(eng, "forward_seconds")) > 0);
    json_int_t bucket_steps = 0, bucket_tokens = 0;
    size_t bi;
    json_t *bk;
    json_array_foreach(json_object_get(eng, "forward_by_batch"), bi, bk)
    {
        json_int_t lo = json_integer_value(json_object_get(bk, "tokens_min")),
                   n = json_integer_value(json_object_get(bk, "steps"));
        json_int_t btok = json_integer_value(json_object_get(bk, "tokens"));
        assert_true(n > 0 && btok >= n * lo);
        if (json_is_integer(json_object_get(bk, "tokens_max")))
            assert_true(btok <= n * json_integer_value(json_object_get(bk, "tokens_max")));
        assert_true(json_real_value(json_object_get(bk, "min_seconds")) <=
                    json_real_value(json_object_get(bk, "seconds")));
        bucket_steps += n;
        bucket_tokens += btok;
    }
    assert_int_equal(bucket_steps, json_integer_value(json_object_get(eng, "steps")));
    assert_true(bucket_tokens >= json_integer_value(json_object_get(eng, "tokens_prefilled")));
    json_decref(st);

    wire_request("GET", "/metrics", NULL, NULL, &r);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "\nrapid_prefix_cache_hit_tokens_total{model_name=\"rapid-tiny\"} "));
    assert_null(strstr(r.body, "\nrapid_prefix_cache_hit_tokens_total{model_name=\"rapid-tiny\"} 0\n"));
    assert_non_null(strstr(r.body, "\nrapid_prefix_cache_disk_budget_bytes{model_name=\"rapid-tiny\"} 0\n"));
    assert_non_null(strstr(r.body, "\nrapid_prompt_tokens_cached_total{model_name=\"rapid-tiny\"} "));
    assert_non_null(strstr(r.body, "\n# TYPE rapid_engine_forward_seconds_total counter\n"));
    assert_non_null(strstr(r.body, "\nrapid_engine_prefill_chunk_tokens{model_name=\"rapid-tiny\"} "));
    free(r.body);
    wire_request("POST", "/v1/status", AUTH, "{}", &r);
    expect_error(&r, 405, false);
    free(r.body);
    still_serving();
#undef LONG_CHAT
}

static void test_stop_and_length(void **state)
{
    (void)state;
    wire_resp r;
    const char *base = "{\"prompt\":\"def add(a, b):\",\"temperature\":0,\"max_tokens\":20,\"ignore_eos\":true";
    char body[512];
    snprintf(body, sizeof(body), "%s}", base);
    post("/v1/completions", body, &r);
    assert_int_equal(r.status, 200);
    json_t *v = body_json(&r);
    free(r.body);
    json_t *ch = json_array_get(json_object_get(v, "choices"), 0);
    assert_string_equal(json_string_value(json_object_get(ch, "finish_reason")), "length");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(v, "usage"), "completion_tokens")), 20);
    char text[512];
    snprintf(text, sizeof(text), "%s", json_string_value(json_object_get(ch, "text")));
    json_decref(v);
    size_t tl = strlen(text);
    assert_true(tl > 6);
    // A stop string from the middle of the greedy text: the reply is what came before it.
    char stop[8];
    size_t at = tl / 2;
    snprintf(stop, sizeof(stop), "%.3s", text + at);
    json_t *sj = json_string(stop);
    char *sq = json_dumps(sj, JSON_ENCODE_ANY);
    json_decref(sj);
    size_t first = (size_t)(strstr(text, stop) - text);
    for (int streaming = 0; streaming < 2; streaming++) {
        snprintf(body, sizeof(body), "%s,\"stop\":[%s],\"stream\":%s}", base, sq, streaming ? "true" : "false");
        post("/v1/completions", body, &r);
        assert_int_equal(r.status, 200);
        rp_buf got;
        rp_buf_init(&got);
        const char *finish = NULL;
        json_t *keep = NULL;
        if (!streaming) {
            keep = body_json(&r);
            ch = json_array_get(json_object_get(keep, "choices"), 0);
            rp_buf_puts(&got, json_string_value(json_object_get(ch, "text")));
            finish = json_string_value(json_object_get(ch, "finish_reason"));
        } else {
            char *f[64];
            int n = sse_frames(r.body, f, 64);
            assert_string_equal(f[n - 1], "[DONE]");
            for (int i = 0; i < n - 1; i++) {
                json_t *k = json_loads(f[i], 0, NULL);
                ch = json_array_get(json_object_get(k, "choices"), 0);
                rp_buf_puts(&got, json_string_value(json_object_get(ch, "text")));
                if (json_is_string(json_object_get(ch, "finish_reason"))) {
                    json_decref(keep);
                    keep = json_incref(k);
                    finish = json_string_value(json_object_get(ch, "finish_reason"));
                }
                json_decref(k);
            }
            for (int i = 0; i < n; i++)
                free(f[i]);
        }
        assert_string_equal(finish, "stop");
        assert_int_equal(got.len, first);
        assert_memory_equal(got.data ? got.data : "", text, first);
        json_decref(keep);
        rp_buf_deinit(&got);
        free(r.body);
    }
    free(sq);
}

// Opens a chat stream that generates until the client goes away (or the context is full:
// sampled at temperature 2, so speculation cannot copy a greedy loop there in a few steps);
// returns the socket.
static int open_stream(void)
{
    return wire_open_stream("/v1/chat/completions", AUTH,
                            "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":100000,"
                            "\"ignore_eos\":true,\"temperature\":2,\"seed\":1,\"stream\":true}");
}

static void test_disconnect_and_busy(void **state)
{
    (void)state;
    wait_idle();
    rp_engine_stats before, after;
    rp_engine_get_stats(engine, &before);
    int a = open_stream(); // generating
    wait_running();
    int b = open_stream(); // queued (max_running 1)
    wire_resp r;
    post("/v1/chat/completions", CHAT_BODY(""), &r); // the queue is full
    expect_error(&r, 503, false);
    assert_string_equal(wire_header(&r, "Retry-After"), "1");
    free(r.body);
    close(a);
    close(b);
    wait_idle();
    rp_engine_get_stats(engine, &after);
    assert_true(after.requests_cancelled >= before.requests_cancelled + 2);
    still_serving();
    wire_resp m;
    wire_request("GET", "/metrics", NULL, NULL, &m);
    assert_non_null(strstr(m.body, "rapid_requests_client_gone_total"));
    assert_null(strstr(m.body, "rapid_requests_client_gone_total{model_name=\"rapid-tiny\"} 0\n"));
    assert_non_null(strstr(m.body, "rapid_requests_total{model_name=\"rapid-tiny\",route=\"chat\",status=\"499\"}"));
    free(m.body);
}

static int open_at_teardown = -1;

static void test_shutdown_with_open_stream(void **state)
{
    (void)state;
    wait_idle();
    open_at_teardown = open_stream(); // teardown destroys the server under it
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_routes_and_auth),           cmocka_unit_test(test_limits_and_bad_bodies),
        cmocka_unit_test(test_chat_stream_matches_whole), cmocka_unit_test(test_prefix_cache_and_status),
        cmocka_unit_test(test_stop_and_length),           cmocka_unit_test(test_disconnect_and_busy),
        cmocka_unit_test(test_shutdown_with_open_stream),
    };
    int rc = cmocka_run_group_tests(tests, setup, teardown);
    if (open_at_teardown >= 0)
        close(open_at_teardown);
    return rc;
}
