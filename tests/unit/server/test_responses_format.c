/*
 * test_responses_format.c - the Responses reply writers: the non-streaming
 * Response object (status, incomplete_details, output items reasoning /
 * message / function_call with their fields, the request echo, usage with
 * cached and reasoning tokens) and the SSE stream parsed back: every frame's
 * `event:` line equals its type, sequence_numbers count up from 0, the event
 * grammar (created, in_progress, per item added / content part / deltas /
 * done, completed | incomplete | failed) holds, and the stream accumulated the
 * way the openai SDK's ResponseStream does (plus the .done events' full items)
 * equals the non-streaming Response. Includes responses.c to reach its statics.
 */
#include "test_util.h"

#include "server/responses.c"

#include "api_fixture.h"
#include "sse_parse.h"

// A request echo as resp_read builds it.
static void echo_for(const char *body, rp_api_req *q, resp_echo *x)
{
    json_t *b = json_loads(body, 0, NULL);
    rp_api_error e;
    assert_non_null(b);
    if (!resp_read(b, q, x, &e))
        fail_msg("%s", e.message);
    json_decref(b);
}

static void test_response_body(void **state)
{
    (void)state;
    rp_http_req r = api_req(30);
    rp_api_req q;
    resp_echo x;
    echo_for("{\"input\":\"hi\",\"instructions\":\"I\",\"max_output_tokens\":30,\"tools\":[{\"type\":\"function\","
             "\"name\":\"f\"}],\"metadata\":{\"k\":\"v\"}}",
             &q, &x);
    rp_drv_result res;
    result_init(&res, "Hello", "Let me think about it", RP_DRV_STOP);
    add_call(&res, "call_a", "f", "{\"x\":1}");
    add_call(&res, "call_b", "f", "{}");
    json_t *b = roundtrip(response_body(&r, "resp_1", 1700000000, &q, &x, &res));
    assert_string_equal(str(b, "id"), "resp_1");
    assert_string_equal(str(b, "object"), "response");
    assert_int_equal(num(b, "created_at"), 1700000000);
    assert_string_equal(str(b, "status"), "completed");
    assert_true(json_is_null(json_object_get(b, "error")));
    assert_true(json_is_null(json_object_get(b, "incomplete_details")));
    assert_string_equal(str(b, "model"), "tiny-model");
    assert_string_equal(str(b, "instructions"), "I");
    assert_int_equal(num(b, "max_output_tokens"), 30);
    assert_string_equal(str(json_object_get(b, "metadata"), "k"), "v");
    assert_int_equal(json_array_size(json_object_get(b, "tools")), 1);
    json_t *out = json_object_get(b, "output");
    assert_int_equal(json_array_size(out), 4);
    json_t *rs = json_array_get(out, 0);
    assert_string_equal(str(rs, "type"), "reasoning");
    assert_memory_equal(str(rs, "id"), "rs_", 3);
    assert_int_equal(json_array_size(json_object_get(rs, "summary")), 0);
    json_t *rc = json_array_get(json_object_get(rs, "content"), 0);
    assert_string_equal(str(rc, "type"), "reasoning_text");
    assert_string_equal(str(rc, "text"), "Let me think about it");
    json_t *m = json_array_get(out, 1);
    assert_string_equal(str(m, "type"), "message");
    assert_memory_equal(str(m, "id"), "msg_", 4);
    assert_string_equal(str(m, "status"), "completed");
    assert_string_equal(str(m, "role"), "assistant");
    json_t *part = json_array_get(json_object_get(m, "content"), 0);
    assert_string_equal(str(part, "type"), "output_text");
    assert_string_equal(str(part, "text"), "Hello");
    assert_int_equal(json_array_size(json_object_get(part, "annotations")), 0);
    assert_string_equal(str(b, "output_text"), "Hello"); // the SDKs' convenience, sent too
    json_t *fc = json_array_get(out, 2);
    assert_string_equal(str(fc, "type"), "function_call");
    assert_memory_equal(str(fc, "id"), "fc_", 3);
    assert_string_equal(str(fc, "status"), "completed");
    assert_string_equal(str(fc, "call_id"), "call_a");
    assert_string_equal(str(fc, "name"), "f");
    assert_string_equal(str(fc, "arguments"), "{\"x\":1}");
    json_t *u = json_object_get(b, "usage");
    assert_int_equal(num(u, "input_tokens"), 12);
    assert_int_equal(num(json_object_get(u, "input_tokens_details"), "cached_tokens"), 4);
    assert_int_equal(num(json_object_get(u, "input_tokens_details"), "cache_write_tokens"), 0);
    assert_int_equal(num(u, "output_tokens"), 30);
    long long nr = num(json_object_get(u, "output_tokens_details"), "reasoning_tokens");
    assert_true(nr > 0 && nr <= 30); // the reasoning text re-tokenized
    assert_int_equal(num(u, "total_tokens"), 42);
    json_decref(b);

    // parallel_tool_calls false: the first call only.
    q.parallel_tool_calls = false;
    b = roundtrip(response_body(&r, "resp_1", 1, &q, &x, &res));
    assert_int_equal(json_array_size(json_object_get(b, "output")), 3);
    json_decref(b);
    q.parallel_tool_calls = true;
    rp_drv_result_deinit(&res);

    // Cut by max_output_tokens: incomplete, the message too; cut inside the reasoning: no message item.
    result_init(&res, "Hel", NULL, RP_DRV_LENGTH);
    b = roundtrip(response_body(&r, "resp_2", 1, &q, &x, &res));
    assert_string_equal(str(b, "status"), "incomplete");
    assert_string_equal(str(json_object_get(b, "incomplete_details"), "reason"), "max_output_tokens");
    assert_string_equal(str(json_array_get(json_object_get(b, "output"), 0), "status"), "incomplete");
    json_decref(b);
    rp_drv_result_deinit(&res);
    result_init(&res, NULL, "thinking...", RP_DRV_LENGTH);
    b = roundtrip(response_body(&r, "resp_3", 1, &q, &x, &res));
    out = json_object_get(b, "output");
    assert_int_equal(json_array_size(out), 1);
    assert_string_equal(str(json_array_get(out, 0), "type"), "reasoning");
    json_decref(b);
    rp_drv_result_deinit(&res);

    // An empty reply is one empty message; no reasoning: reasoning_tokens 0.
    result_init(&res, NULL, NULL, RP_DRV_STOP);
    b = roundtrip(response_body(&r, "resp_4", 1, &q, &x, &res));
    out = json_object_get(b, "output");
    assert_int_equal(json_array_size(out), 1);
    assert_string_equal(str(json_array_get(json_object_get(json_array_get(out, 0), "content"), 0), "text"), "");
    assert_int_equal(num(json_object_get(json_object_get(b, "usage"), "output_tokens_details"), "reasoning_tokens"), 0);
    json_decref(b);
    rp_drv_result_deinit(&res);
    rp_api_req_deinit(&q);
    echo_deinit(&x);
}

/* ---- streaming --------------------------------------------------------------- */

static char *run_stream(rp_http_req *r, bool parallel, const rp_drv_event *ev, int n, const rp_drv_info *info,
                        resp_echo *x)
{
    resp_stream st;
    memset(&st, 0, sizeof(st));
    snprintf(st.id, sizeof(st.id), "resp_s");
    st.created = 1700000000;
    st.parallel = parallel;
    st.echo = *x;
    st.output = json_array();
    rp_buf_init(&st.text);
    rp_buf_init(&st.reasoning);
    rp_buf out;
    rp_buf_init(&out);
    stream_start(r, &st, &out);
    for (int i = 0; i < n; i++)
        stream_event(r, &st, &ev[i], &out);
    stream_finish(r, &st, info, &out);
    assert_false(out.failed);
    json_decref(st.output);
    rp_buf_deinit(&st.text);
    rp_buf_deinit(&st.reasoning);
    return out.data;
}

// Checks the event grammar and accumulates the stream like the openai SDK's
// ResponseStream; returns the final response event's `response`, after checking
// that the accumulated output equals it. *last receives the final event's type.
static json_t *accumulate(sse_frame *f, int n, const char **last)
{
    json_t *snap = NULL;
    int open = -1; // output index of the item between added and done
    bool ended = false;
    for (int i = 0; i < n; i++) {
        json_t *d = f[i].json;
        assert_non_null(d);
        assert_non_null(f[i].event);
        const char *t = sse_str(d, "type");
        assert_string_equal(f[i].event, t);
        assert_int_equal(sse_int(d, "sequence_number"), i);
        assert_false(ended);
        if (i == 0) {
            assert_string_equal(t, "response.created");
            snap = json_deep_copy(json_object_get(d, "response"));
            assert_string_equal(str(snap, "status"), "in_progress");
            assert_int_equal(json_array_size(json_object_get(snap, "output")), 0);
            assert_null(json_object_get(snap, "usage")); // optional, not nullable: absent until known
            continue;
        }
        json_t *output = json_object_get(snap, "output");
        if (strcmp(t, "response.in_progress") == 0) {
            assert_int_equal(i, 1);
        } else if (strcmp(t, "response.output_item.added") == 0) {
            assert_int_equal(open, -1);
            assert_int_equal(sse_int(d, "output_index"), json_array_size(output));
            open = (int)sse_int(d, "output_index");
            json_array_append(output, json_object_get(d, "item"));
        } else if (strcmp(t, "response.content_part.added") == 0) {
            assert_int_equal(sse_int(d, "output_index"), open);
            json_t *item = json_array_get(output, (size_t)open);
            assert_string_equal(sse_str(d, "item_id"), str(item, "id"));
            assert_int_equal(sse_int(d, "content_index"), json_array_size(json_object_get(item, "content")));
            json_array_append(json_object_get(item, "content"), json_object_get(d, "part"));
        } else if (strcmp(t, "response.output_text.delta") == 0 || strcmp(t, "response.reasoning_text.delta") == 0) {
            assert_int_equal(sse_int(d, "output_index"), open);
            json_t *item = json_array_get(output, (size_t)open);
            assert_string_equal(sse_str(d, "item_id"), str(item, "id"));
            json_t *part = json_array_get(json_object_get(item, "content"), (size_t)sse_int(d, "content_index"));
            assert_non_null(part);
            assert_string_equal(str(part, "type"), t[9] == 'o' ? "output_text" : "reasoning_text");
            char *joined = NULL;
            assert_true(asprintf(&joined, "%s%s", str(part, "text"), sse_str(d, "delta")) >= 0);
            json_object_set_new(part, "text", json_string(joined));
            free(joined);
        } else if (strcmp(t, "response.output_text.done") == 0 || strcmp(t, "response.reasoning_text.done") == 0 ||
                   strcmp(t, "response.content_part.done") == 0) {
            json_t *item = json_array_get(output, (size_t)open);
            json_t *part = json_array_get(json_object_get(item, "content"), (size_t)sse_int(d, "content_index"));
            const char *text = strcmp(t, "response.content_part.done") == 0 ? str(json_object_get(d, "part"), "text")
                                                                            : sse_str(d, "text");
            assert_string_equal(text, str(part, "text")); // the done text is the deltas joined
        } else if (strcmp(t, "response.function_call_arguments.delta") == 0) {
            json_t *item = json_array_get(output, (size_t)open);
            assert_string_equal(str(item, "type"), "function_call");
            char *joined = NULL;
            assert_true(asprintf(&joined, "%s%s", str(item, "arguments"), sse_str(d, "delta")) >= 0);
            json_object_set_new(item, "arguments", json_string(joined));
            free(joined);
        } else if (strcmp(t, "response.function_call_arguments.done") == 0) {
            json_t *item = json_array_get(output, (size_t)open);
            assert_string_equal(sse_str(d, "arguments"), str(item, "arguments"));
            assert_string_equal(sse_str(d, "name"), str(item, "name"));
        } else if (strcmp(t, "response.output_item.done") == 0) {
            assert_int_equal(sse_int(d, "output_index"), open);
            json_t *done = json_object_get(d, "item");
            json_t *item = json_array_get(output, (size_t)open);
            assert_string_equal(str(done, "id"), str(item, "id"));
            // The accumulated item differs from the final one only in its status.
            json_t *a = json_deep_copy(item), *b = json_deep_copy(done);
            json_object_del(a, "status");
            json_object_del(b, "status");
            if (!json_equal(a, b))
                fail_msg("item %d: accumulated %s, done %s", open, json_dumps(a, 0), json_dumps(b, 0));
            json_decref(a);
            json_decref(b);
            json_array_set(output, (size_t)open, done);
            open = -1;
        } else if (strcmp(t, "response.completed") == 0 || strcmp(t, "response.incomplete") == 0 ||
                   strcmp(t, "response.failed") == 0) {
            assert_int_equal(open, -1);
            json_t *final = json_object_get(d, "response");
            if (!json_equal(json_object_get(final, "output"), output))
                fail_msg("output %s, accumulated %s", json_dumps(json_object_get(final, "output"), 0),
                         json_dumps(output, 0));
            json_t *res = json_deep_copy(final);
            json_decref(snap);
            snap = res;
            *last = f[i].event;
            ended = true;
        } else {
            fail_msg("unexpected event %s", t);
        }
    }
    assert_true(ended);
    return snap;
}

static void test_stream(void **state)
{
    (void)state;
    rp_http_req r = api_req(30);
    rp_api_req q;
    resp_echo x;
    echo_for("{\"input\":\"hi\",\"max_output_tokens\":30}", &q, &x);
    rp_drv_event ev[] = {
        {RP_DRV_REASONING, "Let me ", 7, 0, NULL, NULL},
        {RP_DRV_REASONING, "think about it", 14, 0, NULL, NULL},
        {RP_DRV_CONTENT, "Hel", 3, 0, NULL, NULL},
        {RP_DRV_CONTENT, "lo", 2, 0, NULL, NULL},
        {RP_DRV_TOOL_CALL, "{\"x\":1}", 7, 0, "call_a", "f"},
        {RP_DRV_TOOL_CALL, "{}", 2, 1, "call_b", "f"},
    };
    rp_drv_info info = {0};
    info.finish = RP_DRV_STOP;
    char *text = run_stream(&r, true, ev, 6, &info, &x);
    sse_frame f[96];
    int n = sse_parse(text, f, 96);
    static const char *order[] = {
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.reasoning_text.delta",
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    };
    assert_int_equal(n, sizeof(order) / sizeof(order[0]));
    for (int i = 0; i < n; i++)
        assert_string_equal(f[i].event, order[i]);
    // Items start in progress; the function call's call_id is the driver's id.
    assert_string_equal(str(json_object_get(f[9].json, "item"), "status"), "in_progress");
    json_t *fc = json_object_get(f[16].json, "item");
    assert_string_equal(str(fc, "call_id"), "call_a");
    assert_string_equal(str(fc, "arguments"), "");
    const char *last = NULL;
    json_t *fin = accumulate(f, n, &last);
    assert_string_equal(last, "response.completed");
    assert_string_equal(str(fin, "status"), "completed");
    assert_string_equal(str(fin, "output_text"), "Hello");
    assert_string_equal(str(fin, "id"), "resp_s");

    // The final response equals the non-streaming one, item ids and created_at aside.
    rp_drv_result res;
    result_init(&res, "Hello", "Let me think about it", RP_DRV_STOP);
    add_call(&res, "call_a", "f", "{\"x\":1}");
    add_call(&res, "call_b", "f", "{}");
    json_t *whole = roundtrip(response_body(&r, "resp_s", 1700000000, &q, &x, &res));
    json_t *items[2] = {json_object_get(fin, "output"), json_object_get(whole, "output")};
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < json_array_size(items[k]); i++)
            json_object_set_new(json_array_get(items[k], i), "id", json_string("x"));
    if (!json_equal(fin, whole))
        fail_msg("stream != whole:\n%s\n%s", json_dumps(fin, 0), json_dumps(whole, 0));
    json_decref(whole);
    json_decref(fin);
    rp_drv_result_deinit(&res);
    sse_free(f, n);
    rp_free(text);

    // Cut by max_output_tokens: response.incomplete with the reason, the open message incomplete.
    info.finish = RP_DRV_LENGTH;
    text = run_stream(&r, true, ev + 2, 1, &info, &x);
    n = sse_parse(text, f, 96);
    fin = accumulate(f, n, &last);
    assert_string_equal(last, "response.incomplete");
    assert_string_equal(str(fin, "status"), "incomplete");
    assert_string_equal(str(json_object_get(fin, "incomplete_details"), "reason"), "max_output_tokens");
    assert_string_equal(str(json_array_get(json_object_get(fin, "output"), 0), "status"), "incomplete");
    json_decref(fin);
    sse_free(f, n);
    rp_free(text);

    // An empty reply still has one (empty) message; parallel_tool_calls false drops the second call.
    info.finish = RP_DRV_STOP;
    text = run_stream(&r, true, NULL, 0, &info, &x);
    n = sse_parse(text, f, 96);
    fin = accumulate(f, n, &last);
    assert_int_equal(json_array_size(json_object_get(fin, "output")), 1);
    json_decref(fin);
    sse_free(f, n);
    rp_free(text);
    text = run_stream(&r, false, ev + 4, 2, &info, &x);
    n = sse_parse(text, f, 96);
    fin = accumulate(f, n, &last);
    assert_int_equal(json_array_size(json_object_get(fin, "output")), 1);
    json_decref(fin);
    sse_free(f, n);
    rp_free(text);

    // The engine failed: response.failed with the error; what was streamed stays in the output.
    info.finish = RP_DRV_ERROR;
    info.error = "device lost";
    text = run_stream(&r, true, ev + 2, 2, &info, &x);
    n = sse_parse(text, f, 96);
    fin = accumulate(f, n, &last);
    assert_string_equal(last, "response.failed");
    assert_string_equal(str(fin, "status"), "failed");
    json_t *err = json_object_get(fin, "error");
    assert_string_equal(str(err, "code"), "server_error");
    assert_non_null(strstr(str(err, "message"), "device lost"));
    assert_int_equal(json_array_size(json_object_get(fin, "output")), 1);
    json_decref(fin);
    sse_free(f, n);
    rp_free(text);
    rp_api_req_deinit(&q);
    echo_deinit(&x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_response_body),
        cmocka_unit_test(test_stream),
    };
    return cmocka_run_group_tests(tests, api_setup, api_teardown);
}
