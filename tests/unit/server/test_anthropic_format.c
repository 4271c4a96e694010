/*
 * test_anthropic_format.c - the Anthropic reply writers: the non-streaming
 * Message (content blocks thinking/text/tool_use, stop_reason and
 * stop_sequence, usage with the cache split) and the SSE stream, parsed back
 * frame by frame: every frame's `event:` line equals its data's type, the
 * order message_start, ping, content blocks (start, deltas, a signature_delta
 * before a thinking block stops, stop), message_delta, message_stop; block
 * indices count up; the stream accumulated the way @anthropic-ai/sdk's
 * MessageStream does equals the non-streaming Message for the same events;
 * disable_parallel_tool_use; empty replies; a failed generation ends in an
 * `event: error` frame. Includes anthropic.c to reach its statics.
 */
#include "test_util.h"

#include "server/anthropic.c"

#include "api_fixture.h"
#include "sse_parse.h"

static void check_usage(const json_t *u)
{
    assert_int_equal(num(u, "input_tokens"), 8); // 12 prompt tokens, 4 of them from the cache
    assert_int_equal(num(u, "cache_read_input_tokens"), 4);
    assert_int_equal(num(u, "cache_creation_input_tokens"), 0);
    assert_int_equal(num(u, "output_tokens"), 7);
}

static json_t *body_of(rp_http_req *r, bool parallel, const rp_drv_result *res)
{
    rp_api_req q;
    rp_api_req_init(&q);
    q.parallel_tool_calls = parallel;
    json_t *b = roundtrip(message_body(r, "msg_test", &q, res));
    rp_api_req_deinit(&q);
    return b;
}

static void test_message_body(void **state)
{
    (void)state;
    rp_http_req r = api_req(7);
    rp_drv_result res;
    result_init(&res, "Hello \xC3\xA9", "I think", RP_DRV_STOP);
    add_call(&res, "call_abc", "get_weather", "{\"city\":\"Paris\"}");
    add_call(&res, "call_def", "f", "{}");
    json_t *b = body_of(&r, true, &res);
    assert_string_equal(str(b, "id"), "msg_test");
    assert_string_equal(str(b, "type"), "message");
    assert_string_equal(str(b, "role"), "assistant");
    assert_string_equal(str(b, "model"), "tiny-model");
    assert_string_equal(str(b, "stop_reason"), "tool_use");
    assert_true(json_is_null(json_object_get(b, "stop_sequence")));
    check_usage(json_object_get(b, "usage"));
    json_t *c = json_object_get(b, "content");
    assert_int_equal(json_array_size(c), 4);
    json_t *th = json_array_get(c, 0);
    assert_string_equal(str(th, "type"), "thinking");
    assert_string_equal(str(th, "thinking"), "I think");
    assert_true(strlen(str(th, "signature")) > 0);
    json_t *tx = json_array_get(c, 1);
    assert_string_equal(str(tx, "type"), "text");
    assert_string_equal(str(tx, "text"), "Hello \xC3\xA9");
    json_t *tu = json_array_get(c, 2);
    assert_string_equal(str(tu, "type"), "tool_use");
    assert_string_equal(str(tu, "id"), "toolu_abc");
    assert_string_equal(str(tu, "name"), "get_weather");
    assert_string_equal(str(json_object_get(tu, "input"), "city"), "Paris");
    assert_true(json_is_object(json_object_get(json_array_get(c, 3), "input")));
    json_decref(b);

    // disable_parallel_tool_use: the first call only.
    b = body_of(&r, false, &res);
    c = json_object_get(b, "content");
    assert_int_equal(json_array_size(c), 3);
    assert_string_equal(str(json_array_get(c, 2), "id"), "toolu_abc");
    assert_string_equal(str(b, "stop_reason"), "tool_use");
    json_decref(b);
    rp_drv_result_deinit(&res);

    // max_tokens; a call alone has no text block; unparsable arguments become {}.
    result_init(&res, NULL, NULL, RP_DRV_LENGTH);
    add_call(&res, "call_x", "f", "not json");
    b = body_of(&r, true, &res);
    assert_string_equal(str(b, "stop_reason"), "max_tokens");
    c = json_object_get(b, "content");
    assert_int_equal(json_array_size(c), 1);
    assert_int_equal(json_object_size(json_object_get(json_array_get(c, 0), "input")), 0);
    json_decref(b);
    rp_drv_result_deinit(&res);

    // An integer past 64 bits (valid JSON) keeps the input: a real, the other keys as they are.
    result_init(&res, NULL, NULL, RP_DRV_STOP);
    add_call(&res, "call_y", "f", "{\"n\": 155555555555555555555555555555, \"s\": \"x\"}");
    b = body_of(&r, true, &res);
    json_t *in = json_object_get(json_array_get(json_object_get(b, "content"), 0), "input");
    assert_true(json_is_real(json_object_get(in, "n")));
    assert_true(json_real_value(json_object_get(in, "n")) > 1.5e29);
    assert_string_equal(str(in, "s"), "x");
    json_decref(b);
    rp_drv_result_deinit(&res);

    // A stop sequence is named.
    result_init(&res, "abc", NULL, RP_DRV_STOP_STRING);
    res.info.stop_string = "END";
    b = body_of(&r, true, &res);
    assert_string_equal(str(b, "stop_reason"), "stop_sequence");
    assert_string_equal(str(b, "stop_sequence"), "END");
    json_decref(b);
    rp_drv_result_deinit(&res);

    // An empty reply has one empty text block; reasoning alone has just its thinking block.
    result_init(&res, NULL, NULL, RP_DRV_STOP);
    b = body_of(&r, true, &res);
    c = json_object_get(b, "content");
    assert_int_equal(json_array_size(c), 1);
    assert_string_equal(str(json_array_get(c, 0), "type"), "text");
    assert_string_equal(str(json_array_get(c, 0), "text"), "");
    assert_string_equal(str(b, "stop_reason"), "end_turn");
    json_decref(b);
    rp_drv_result_deinit(&res);
    result_init(&res, NULL, "only thoughts", RP_DRV_LENGTH);
    b = body_of(&r, true, &res);
    c = json_object_get(b, "content");
    assert_int_equal(json_array_size(c), 1);
    assert_string_equal(str(json_array_get(c, 0), "type"), "thinking");
    json_decref(b);
    rp_drv_result_deinit(&res);

    // Driver failures.
    rp_drv_info info = {0};
    rp_api_error e;
    info.finish = RP_DRV_ERROR;
    info.error = "boom";
    assert_true(rp_drv_failed(&info, NULL, &e));
    assert_int_equal(e.status, 500);
    assert_non_null(strstr(e.message, "boom"));
    info.finish = RP_DRV_CANCELLED;
    assert_true(rp_drv_failed(&info, NULL, &e));
    assert_int_equal(e.status, 503);
    info.finish = RP_DRV_STOP;
    assert_false(rp_drv_failed(&info, NULL, &e));
}

/* ---- streaming --------------------------------------------------------------- */

// Runs the stream writer over events and returns the SSE text (caller frees).
static char *run_stream(rp_http_req *r, bool parallel, const rp_drv_event *ev, int n, const rp_drv_info *info)
{
    anth_stream st;
    memset(&st, 0, sizeof(st));
    snprintf(st.id, sizeof(st.id), "msg_test");
    st.parallel = parallel;
    rp_buf out;
    rp_buf_init(&out);
    stream_start(r, &st, &out);
    for (int i = 0; i < n; i++)
        stream_event(&st, &ev[i], &out);
    stream_finish(r, &st, info, &out);
    assert_false(out.failed);
    return out.data;
}

// Accumulates a stream into a Message the way @anthropic-ai/sdk's MessageStream does,
// checking the event grammar on the way. Returns the message (caller decrefs).
static json_t *accumulate(sse_frame *f, int n)
{
    json_t *msg = NULL;
    json_t *bufs = json_object(); // index -> partial JSON text of tool_use blocks
    int open = -1;                // the block between its start and stop
    bool stopped = false, delta_seen = false;
    for (int i = 0; i < n; i++) {
        json_t *d = f[i].json;
        assert_non_null(d);
        assert_non_null(f[i].event);
        assert_string_equal(f[i].event, sse_str(d, "type")); // the event line names the data's type
        const char *t = f[i].event;
        assert_false(stopped); // nothing after message_stop
        if (i == 0) {
            assert_string_equal(t, "message_start");
        } else if (i == 1) {
            assert_string_equal(t, "ping"); // right after message_start
        }
        if (strcmp(t, "message_start") == 0) {
            assert_int_equal(i, 0);
            msg = json_deep_copy(json_object_get(d, "message"));
            assert_int_equal(json_array_size(json_object_get(msg, "content")), 0);
            assert_true(json_is_null(json_object_get(msg, "stop_reason")));
        } else if (strcmp(t, "ping") == 0) {
            continue;
        } else if (strcmp(t, "content_block_start") == 0) {
            assert_int_equal(open, -1);
            json_t *content = json_object_get(msg, "content");
            assert_int_equal(sse_int(d, "index"), json_array_size(content)); // indices count up from 0
            open = (int)sse_int(d, "index");
            json_array_append(content, json_object_get(d, "content_block"));
        } else if (strcmp(t, "content_block_delta") == 0) {
            assert_int_equal(sse_int(d, "index"), open);
            json_t *blk = json_array_get(json_object_get(msg, "content"), (size_t)open);
            json_t *delta = json_object_get(d, "delta");
            const char *dt = sse_str(delta, "type"), *bt = sse_str(blk, "type");
            char key[16];
            snprintf(key, sizeof(key), "%d", open);
            if (strcmp(dt, "text_delta") == 0 || strcmp(dt, "thinking_delta") == 0) {
                const char *field = dt[1] == 'e' ? "text" : "thinking";
                assert_string_equal(bt, field);
                assert_true(json_object_get(blk, "signature") == NULL || strlen(str(blk, "signature")) == 0);
                char *joined = NULL;
                assert_true(asprintf(&joined, "%s%s", str(blk, field), sse_str(delta, field)) > 0);
                json_object_set_new(blk, field, json_string(joined));
                free(joined);
            } else if (strcmp(dt, "signature_delta") == 0) {
                assert_string_equal(bt, "thinking");
                json_object_set(blk, "signature", json_object_get(delta, "signature"));
            } else if (strcmp(dt, "input_json_delta") == 0) {
                assert_string_equal(bt, "tool_use");
                const char *old = str(bufs, key);
                char *joined = NULL;
                assert_true(asprintf(&joined, "%s%s", old ? old : "", sse_str(delta, "partial_json")) >= 0);
                json_object_set_new(bufs, key, json_string(joined));
                free(joined);
            } else {
                fail_msg("unknown delta type %s", dt);
            }
        } else if (strcmp(t, "content_block_stop") == 0) {
            assert_int_equal(sse_int(d, "index"), open);
            json_t *blk = json_array_get(json_object_get(msg, "content"), (size_t)open);
            char key[16];
            snprintf(key, sizeof(key), "%d", open);
            if (strcmp(str(blk, "type"), "tool_use") == 0) {
                json_t *in = json_loads(str(bufs, key), 0, NULL);
                assert_non_null(in);
                json_object_set_new(blk, "input", in);
            }
            if (strcmp(str(blk, "type"), "thinking") == 0)
                assert_true(strlen(str(blk, "signature")) > 0); // a signature before the block stops
            open = -1;
        } else if (strcmp(t, "message_delta") == 0) {
            assert_int_equal(open, -1);
            json_t *delta = json_object_get(d, "delta");
            json_object_set(msg, "stop_reason", json_object_get(delta, "stop_reason"));
            json_object_set(msg, "stop_sequence", json_object_get(delta, "stop_sequence"));
            json_t *u = json_object_get(d, "usage"), *mu = json_object_get(msg, "usage");
            const char *key;
            json_t *v;
            json_object_foreach(u, key, v) json_object_set(mu, key, v); // cumulative: overwrite
            delta_seen = true;
        } else if (strcmp(t, "message_stop") == 0) {
            assert_true(delta_seen);
            stopped = true;
        } else {
            fail_msg("unexpected event %s", t);
        }
    }
    assert_true(stopped);
    json_decref(bufs);
    return msg;
}

static void test_stream(void **state)
{
    (void)state;
    rp_http_req r = api_req(7);
    rp_drv_event ev[] = {
        {RP_DRV_REASONING, "hmm", 3, 0, NULL, NULL},
        {RP_DRV_REASONING, ", ok", 4, 0, NULL, NULL},
        {RP_DRV_CONTENT, "Hi \"there\"\n", 11, 0, NULL, NULL},
        {RP_DRV_CONTENT, "\xF0\x9F\x98\x80", 4, 0, NULL, NULL},
        {RP_DRV_TOOL_CALL, "{\"a\":[1,2]}", 11, 0, "call_one", "f"},
        {RP_DRV_TOOL_CALL, "{}", 2, 1, "call_two", "g"},
    };
    rp_drv_info info = {0};
    info.finish = RP_DRV_STOP;
    char *text = run_stream(&r, true, ev, 6, &info);
    sse_frame f[64];
    int n = sse_parse(text, f, 64);
    static const char *order[] = {
        "message_start",       "ping",
        "content_block_start", "content_block_delta",
        "content_block_delta", "content_block_delta",
        "content_block_stop",  "content_block_start",
        "content_block_delta", "content_block_delta",
        "content_block_stop",  "content_block_start",
        "content_block_delta", "content_block_stop",
        "content_block_start", "content_block_delta",
        "content_block_stop",  "message_delta",
        "message_stop",
    };
    assert_int_equal(n, sizeof(order) / sizeof(order[0]));
    for (int i = 0; i < n; i++)
        assert_string_equal(f[i].event, order[i]);
    // The thinking block starts empty with an empty signature; its signature_delta comes last.
    json_t *cb = json_object_get(f[2].json, "content_block");
    assert_string_equal(str(cb, "type"), "thinking");
    assert_string_equal(str(cb, "thinking"), "");
    assert_string_equal(str(cb, "signature"), "");
    assert_string_equal(str(json_object_get(f[5].json, "delta"), "type"), "signature_delta");
    // The tool_use block starts with input {} and the arguments come as one input_json_delta.
    cb = json_object_get(f[11].json, "content_block");
    assert_string_equal(str(cb, "type"), "tool_use");
    assert_string_equal(str(cb, "id"), "toolu_one");
    assert_int_equal(json_object_size(json_object_get(cb, "input")), 0);
    assert_string_equal(str(json_object_get(f[12].json, "delta"), "partial_json"), "{\"a\":[1,2]}");
    // message_delta: stop reason and cumulative usage.
    json_t *md = f[17].json;
    assert_string_equal(str(json_object_get(md, "delta"), "stop_reason"), "tool_use");
    assert_true(json_is_null(json_object_get(json_object_get(md, "delta"), "stop_sequence")));
    check_usage(json_object_get(md, "usage"));
    // message_start's usage: no output yet.
    json_t *mu = json_object_get(json_object_get(f[0].json, "message"), "usage");
    assert_int_equal(num(mu, "output_tokens"), 0);
    assert_int_equal(num(mu, "input_tokens"), 8);

    // The accumulated stream is the non-streaming Message of the same reply.
    json_t *acc = accumulate(f, n);
    rp_drv_result res;
    result_init(&res, "Hi \"there\"\n\xF0\x9F\x98\x80", "hmm, ok", RP_DRV_STOP);
    add_call(&res, "call_one", "f", "{\"a\":[1,2]}");
    add_call(&res, "call_two", "g", "{}");
    json_t *whole = body_of(&r, true, &res);
    if (!json_equal(acc, whole)) {
        char *a = json_dumps(acc, 0), *w = json_dumps(whole, 0);
        fail_msg("stream != whole:\n%s\n%s", a, w);
    }
    json_decref(acc);
    json_decref(whole);
    rp_drv_result_deinit(&res);
    sse_free(f, n);
    rp_free(text);
}

static void test_stream_variants(void **state)
{
    (void)state;
    rp_http_req r = api_req(7);
    sse_frame f[64];
    rp_drv_info info = {0};

    // Empty reply: one empty text block, end_turn.
    info.finish = RP_DRV_STOP;
    char *text = run_stream(&r, true, NULL, 0, &info);
    int n = sse_parse(text, f, 64);
    assert_int_equal(n, 6);
    json_t *acc = accumulate(f, n);
    assert_string_equal(str(acc, "stop_reason"), "end_turn");
    assert_int_equal(json_array_size(json_object_get(acc, "content")), 1);
    assert_string_equal(str(json_array_get(json_object_get(acc, "content"), 0), "text"), "");
    json_decref(acc);
    sse_free(f, n);
    rp_free(text);

    // Text interleaved with calls: a new text block after a call; without parallel calls the second is dropped.
    rp_drv_event ev[] = {
        {RP_DRV_CONTENT, "a", 1, 0, NULL, NULL},
        {RP_DRV_TOOL_CALL, "{}", 2, 0, "call_1", "f"},
        {RP_DRV_CONTENT, "b", 1, 0, NULL, NULL},
        {RP_DRV_TOOL_CALL, "{}", 2, 1, "call_2", "f"},
    };
    text = run_stream(&r, false, ev, 4, &info);
    n = sse_parse(text, f, 64);
    acc = accumulate(f, n);
    json_t *c = json_object_get(acc, "content");
    assert_int_equal(json_array_size(c), 3);
    assert_string_equal(str(json_array_get(c, 0), "text"), "a");
    assert_string_equal(str(json_array_get(c, 1), "id"), "toolu_1");
    assert_string_equal(str(json_array_get(c, 2), "text"), "b");
    assert_string_equal(str(acc, "stop_reason"), "tool_use");
    json_decref(acc);
    sse_free(f, n);
    rp_free(text);

    // A stop sequence; max_tokens.
    info.finish = RP_DRV_STOP_STRING;
    info.stop_string = "###";
    text = run_stream(&r, true, ev, 1, &info);
    n = sse_parse(text, f, 64);
    acc = accumulate(f, n);
    assert_string_equal(str(acc, "stop_reason"), "stop_sequence");
    assert_string_equal(str(acc, "stop_sequence"), "###");
    json_decref(acc);
    sse_free(f, n);
    rp_free(text);
    info.finish = RP_DRV_LENGTH;
    text = run_stream(&r, true, ev, 2, &info);
    n = sse_parse(text, f, 64);
    acc = accumulate(f, n);
    assert_string_equal(str(acc, "stop_reason"), "max_tokens");
    json_decref(acc);
    sse_free(f, n);
    rp_free(text);

    // The engine failed mid-stream: the open block is closed, then an error frame ends the stream.
    info.finish = RP_DRV_ERROR;
    info.error = "device lost";
    text = run_stream(&r, true, ev, 1, &info);
    n = sse_parse(text, f, 64);
    assert_string_equal(f[n - 2].event, "content_block_stop");
    assert_string_equal(f[n - 1].event, "error");
    assert_string_equal(sse_str(f[n - 1].json, "type"), "error");
    json_t *err = json_object_get(f[n - 1].json, "error");
    assert_string_equal(str(err, "type"), "api_error");
    assert_non_null(strstr(str(err, "message"), "device lost"));
    sse_free(f, n);
    rp_free(text);
}

static void test_ids(void **state)
{
    (void)state;
    char a[48], b[48];
    rp_api_id(a, sizeof(a), "msg_", 1);
    rp_api_id(b, sizeof(b), "msg_", 1);
    assert_int_equal(strlen(a), 4 + 24);
    assert_memory_equal(a, "msg_", 4);
    assert_string_not_equal(a, b);
    char small[8];
    rp_api_id(small, sizeof(small), "msg_", 2); // truncated, still terminated
    assert_int_equal(strlen(small), 7);
    char t[64];
    tool_id("call_XYZ", t, sizeof(t));
    assert_string_equal(t, "toolu_XYZ");
    tool_id("9chars123", t, sizeof(t)); // Mistral-style ids keep their text
    assert_string_equal(t, "toolu_9chars123");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_message_body),
        cmocka_unit_test(test_stream),
        cmocka_unit_test(test_stream_variants),
        cmocka_unit_test(test_ids),
    };
    return cmocka_run_group_tests(tests, api_setup, api_teardown);
}
