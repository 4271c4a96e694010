/*
 * test_openai_format.c - the OpenAI reply writers: non-streaming chat and
 * completion bodies and streaming chunks, each parsed back with jansson and
 * checked field by field (role, content/null, refusal, reasoning_content,
 * tool_calls, finish_reason, usage with cached_tokens, logprobs shapes, the
 * tool-call fragments' index/id/type/name/arguments, usage: null on chunks).
 * Includes openai.c to reach its statics.
 */
#include "test_util.h"

#include "server/openai.c"

#include "api_fixture.h"

static void check_usage(const json_t *u)
{
    assert_int_equal(json_integer_value(json_object_get(u, "prompt_tokens")), 12);
    assert_int_equal(json_integer_value(json_object_get(u, "completion_tokens")), 7);
    assert_int_equal(json_integer_value(json_object_get(u, "total_tokens")), 19);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(u, "prompt_tokens_details"), "cached_tokens")),
                     4);
}

static void test_chat_body(void **state)
{
    (void)state;
    rp_http_req r = api_req(7);
    rp_api_req q;
    rp_api_req_init(&q);
    rp_drv_result res;
    result_init(&res, "Hello \xC3\xA9", "I think", RP_DRV_STOP);
    json_t *b = roundtrip(chat_body(&r, "chatcmpl-x", &q, &res));
    assert_string_equal(str(b, "id"), "chatcmpl-x");
    assert_string_equal(str(b, "object"), "chat.completion");
    assert_string_equal(str(b, "model"), "tiny-model");
    assert_true(json_is_integer(json_object_get(b, "created")));
    json_t *c = json_array_get(json_object_get(b, "choices"), 0);
    assert_int_equal(json_integer_value(json_object_get(c, "index")), 0);
    assert_string_equal(str(c, "finish_reason"), "stop");
    assert_true(json_is_null(json_object_get(c, "logprobs")));
    json_t *m = json_object_get(c, "message");
    assert_string_equal(str(m, "role"), "assistant");
    assert_string_equal(str(m, "content"), "Hello \xC3\xA9");
    assert_true(json_is_null(json_object_get(m, "refusal")));
    assert_string_equal(str(m, "reasoning_content"), "I think");
    assert_null(json_object_get(m, "tool_calls"));
    check_usage(json_object_get(b, "usage"));
    json_decref(b);
    rp_drv_result_deinit(&res);

    // Only tool calls: content null, finish tool_calls, arguments as a JSON string.
    result_init(&res, NULL, NULL, RP_DRV_STOP);
    add_call(&res, "call_1", "get_weather", "{\"city\":\"Paris\"}");
    add_call(&res, "call_2", "f", "{}");
    b = chat_body(&r, "chatcmpl-y", &q, &res);
    c = json_array_get(json_object_get(b, "choices"), 0);
    m = json_object_get(c, "message");
    assert_true(json_is_null(json_object_get(m, "content")));
    assert_null(json_object_get(m, "reasoning_content"));
    assert_string_equal(str(c, "finish_reason"), "tool_calls");
    json_t *calls = json_object_get(m, "tool_calls");
    assert_int_equal(json_array_size(calls), 2);
    json_t *c0 = json_array_get(calls, 0);
    assert_string_equal(str(c0, "id"), "call_1");
    assert_string_equal(str(c0, "type"), "function");
    assert_string_equal(str(json_object_get(c0, "function"), "name"), "get_weather");
    assert_string_equal(str(json_object_get(c0, "function"), "arguments"), "{\"city\":\"Paris\"}");
    json_decref(b);
    rp_drv_result_deinit(&res);

    // Length and stop strings; a call with text keeps the text.
    result_init(&res, "text", NULL, RP_DRV_LENGTH);
    add_call(&res, "call_3", "f", "{}");
    b = chat_body(&r, "x", &q, &res);
    c = json_array_get(json_object_get(b, "choices"), 0);
    assert_string_equal(str(c, "finish_reason"), "length");
    assert_string_equal(str(json_object_get(c, "message"), "content"), "text");
    json_decref(b);
    rp_drv_result_deinit(&res);
    result_init(&res, "", NULL, RP_DRV_STOP_STRING);
    b = chat_body(&r, "x", &q, &res);
    c = json_array_get(json_object_get(b, "choices"), 0);
    assert_string_equal(str(c, "finish_reason"), "stop");
    assert_string_equal(str(json_object_get(c, "message"), "content"), "");
    json_decref(b);
    rp_drv_result_deinit(&res);
    rp_api_req_deinit(&q);
}

static void test_chat_logprobs(void **state)
{
    (void)state;
    rp_http_req r = api_req(7);
    rp_api_req q;
    rp_api_req_init(&q);
    q.logprobs = 2;
    int32_t *ids;
    size_t n;
    assert_int_equal(rp_tok_encode(tok, "hello world", 11, false, &ids, &n), RP_OK);
    assert_true(n >= 1);
    rp_drv_result res;
    result_init(&res, "hello world", NULL, RP_DRV_STOP);
    res.logprobs = rp_calloc(n, sizeof(rp_gen_token));
    res.n_logprobs = (int)n;
    for (size_t i = 0; i < n; i++) {
        res.logprobs[i].id = ids[i];
        res.logprobs[i].logprob = -0.5f;
        res.logprobs[i].n_top = 3;
        res.logprobs[i].top_ids[0] = ids[i];
        res.logprobs[i].top_logprobs[0] = -0.5f;
        res.logprobs[i].top_ids[1] = 0;
        res.logprobs[i].top_logprobs[1] = -INFINITY; // no JSON for that: clamped
        res.logprobs[i].top_ids[2] = 1;
        res.logprobs[i].top_logprobs[2] = -3;
    }
    json_t *b = chat_body(&r, "x", &q, &res);
    json_t *lp = json_object_get(json_array_get(json_object_get(b, "choices"), 0), "logprobs");
    assert_true(json_is_null(json_object_get(lp, "refusal")));
    json_t *content = json_object_get(lp, "content");
    assert_int_equal(json_array_size(content), n);
    rp_buf joined;
    rp_buf_init(&joined);
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(content, i);
        const char *t = str(e, "token");
        assert_non_null(t);
        rp_buf_puts(&joined, t);
        assert_true(json_real_value(json_object_get(e, "logprob")) == -0.5);
        json_t *bytes = json_object_get(e, "bytes");
        assert_int_equal(json_array_size(bytes), strlen(t));
        json_t *tops = json_object_get(e, "top_logprobs");
        assert_int_equal(json_array_size(tops), 2); // top_logprobs = 2 of the 3
        assert_true(json_real_value(json_object_get(json_array_get(tops, 1), "logprob")) == -9999.0);
    }
    assert_string_equal(joined.data, "hello world");
    rp_buf_deinit(&joined);
    json_decref(b);
    rp_drv_result_deinit(&res);
    rp_free(ids);
    rp_api_req_deinit(&q);
}

static void test_completion_body(void **state)
{
    (void)state;
    rp_http_req r = api_req(7);
    rp_api_req q;
    rp_api_req_init(&q);
    q.prompt = rp_strdup("def f():");
    q.prompt_len = 8;
    q.logprobs = 1;
    int32_t *ids;
    size_t n;
    assert_int_equal(rp_tok_encode(tok, " return 1", 9, false, &ids, &n), RP_OK);
    rp_drv_result res;
    result_init(&res, " return 1", NULL, RP_DRV_LENGTH);
    res.logprobs = rp_calloc(n, sizeof(rp_gen_token));
    res.n_logprobs = (int)n;
    for (size_t i = 0; i < n; i++) {
        res.logprobs[i].id = ids[i];
        res.logprobs[i].logprob = -1;
        res.logprobs[i].n_top = 1;
        res.logprobs[i].top_ids[0] = ids[i];
        res.logprobs[i].top_logprobs[0] = -1;
    }
    json_t *b = completion_body(&r, "cmpl-1", &q, true, &res);
    assert_string_equal(str(b, "object"), "text_completion");
    json_t *c = json_array_get(json_object_get(b, "choices"), 0);
    assert_string_equal(str(c, "text"), "def f(): return 1");
    assert_string_equal(str(c, "finish_reason"), "length");
    json_t *lp = json_object_get(c, "logprobs");
    assert_int_equal(json_array_size(json_object_get(lp, "tokens")), n);
    assert_int_equal(json_array_size(json_object_get(lp, "token_logprobs")), n);
    assert_int_equal(json_array_size(json_object_get(lp, "top_logprobs")), n);
    json_t *offs = json_object_get(lp, "text_offset");
    assert_int_equal(json_integer_value(json_array_get(offs, 0)), 8); // after the echoed prompt
    assert_true(json_is_object(json_array_get(json_object_get(lp, "top_logprobs"), 0)));
    check_usage(json_object_get(b, "usage"));
    json_decref(b);
    rp_drv_result_deinit(&res);
    rp_free(ids);
    rp_api_req_deinit(&q);
}

// Splits SSE text into its data payloads, parsed.
static int frames(const char *sse, json_t **out, int cap)
{
    int n = 0;
    const char *p = sse;
    while (*p && n < cap) {
        const char *end = strstr(p, "\n\n");
        assert_non_null(end);
        assert_memory_equal(p, "data: ", 6);
        char *payload = strndup(p + 6, (size_t)(end - p - 6));
        out[n] = json_loads(payload, 0, NULL);
        assert_non_null(out[n]);
        free(payload);
        n++;
        p = end + 2;
    }
    return n;
}

static void test_stream_chunks(void **state)
{
    (void)state;
    rp_http_req r = api_req(7);
    oai_stream st;
    memset(&st, 0, sizeof(st));
    st.chat = true;
    st.logprobs = -1;
    st.include_usage = true;
    snprintf(st.id, sizeof(st.id), "chatcmpl-s");
    st.created = 1700000000;
    rp_buf out;
    rp_buf_init(&out);
    rp_drv_event ev[3] = {
        {RP_DRV_REASONING, "hmm", 3, 0, NULL, NULL},
        {RP_DRV_CONTENT, "Hi \"there\"\n", 11, 0, NULL, NULL},
        {RP_DRV_TOOL_CALL, "{\"a\":1}", 7, 0, "call_abc", "f"},
    };
    for (int i = 0; i < 3; i++)
        stream_event(&r, &st, &ev[i], false, &out);
    assert_false(out.failed);
    json_t *f[8];
    int n = frames(out.data, f, 8);
    assert_int_equal(n, 4); // the call is two fragments
    for (int i = 0; i < n; i++) {
        assert_string_equal(str(f[i], "id"), "chatcmpl-s");
        assert_string_equal(str(f[i], "object"), "chat.completion.chunk");
        assert_string_equal(str(f[i], "model"), "tiny-model");
        assert_int_equal(json_integer_value(json_object_get(f[i], "created")), 1700000000);
        assert_true(json_is_null(json_object_get(f[i], "usage"))); // include_usage: null until the last
        json_t *c = json_array_get(json_object_get(f[i], "choices"), 0);
        assert_int_equal(json_integer_value(json_object_get(c, "index")), 0);
        assert_true(json_is_null(json_object_get(c, "finish_reason")));
    }
    json_t *d0 = json_object_get(json_array_get(json_object_get(f[0], "choices"), 0), "delta");
    assert_string_equal(str(d0, "reasoning_content"), "hmm");
    assert_null(json_object_get(d0, "content"));
    json_t *d1 = json_object_get(json_array_get(json_object_get(f[1], "choices"), 0), "delta");
    assert_string_equal(str(d1, "content"), "Hi \"there\"\n");
    json_t *t2 = json_array_get(
        json_object_get(json_object_get(json_array_get(json_object_get(f[2], "choices"), 0), "delta"), "tool_calls"), 0);
    assert_int_equal(json_integer_value(json_object_get(t2, "index")), 0);
    assert_string_equal(str(t2, "id"), "call_abc");
    assert_string_equal(str(t2, "type"), "function");
    assert_string_equal(str(json_object_get(t2, "function"), "name"), "f");
    assert_string_equal(str(json_object_get(t2, "function"), "arguments"), "");
    json_t *t3 = json_array_get(
        json_object_get(json_object_get(json_array_get(json_object_get(f[3], "choices"), 0), "delta"), "tool_calls"), 0);
    assert_int_equal(json_integer_value(json_object_get(t3, "index")), 0);
    assert_null(json_object_get(t3, "id"));
    assert_null(json_object_get(t3, "type"));
    assert_null(json_object_get(json_object_get(t3, "function"), "name"));
    assert_string_equal(str(json_object_get(t3, "function"), "arguments"), "{\"a\":1}");
    for (int i = 0; i < n; i++)
        json_decref(f[i]);

    // Completions chunks carry text; no usage key without include_usage.
    st.chat = false;
    st.include_usage = false;
    rp_buf_reset(&out);
    stream_event(&r, &st, &ev[1], false, &out);
    n = frames(out.data, f, 8);
    assert_int_equal(n, 1);
    assert_string_equal(str(f[0], "object"), "text_completion");
    assert_null(json_object_get(f[0], "usage"));
    assert_string_equal(str(json_array_get(json_object_get(f[0], "choices"), 0), "text"), "Hi \"there\"\n");
    json_decref(f[0]);
    rp_buf_deinit(&out);
}

static void test_token_strings(void **state)
{
    (void)state;
    json_t *v = token_string("ok", 2);
    assert_string_equal(json_string_value(v), "ok");
    json_decref(v);
    v = token_string("\xE2\x82", 2); // half a character
    assert_string_equal(json_string_value(v), "bytes:\\xe2\\x82");
    json_decref(v);
    v = finite_real(-INFINITY);
    assert_true(json_real_value(v) == -9999.0);
    json_decref(v);
    v = finite_real(NAN);
    assert_true(json_real_value(v) == -9999.0);
    json_decref(v);

    char a[64], b[64];
    rp_api_id(a, sizeof(a), "chatcmpl-", 1);
    rp_api_id(b, sizeof(b), "chatcmpl-", 1);
    assert_int_equal(strlen(a), 9 + 24);
    assert_string_not_equal(a, b);
}

static void test_models(void **state)
{
    (void)state;
    rp_http_req r = api_req(7);
    rp_reply out;
    memset(&out, 0, sizeof(out));
    rp_openai_models(&r, &out);
    assert_int_equal(out.status, 200);
    json_t *b = json_loads(out.body.data, 0, NULL);
    assert_string_equal(str(b, "object"), "list");
    json_t *m = json_array_get(json_object_get(b, "data"), 0);
    assert_string_equal(str(m, "id"), "tiny-model");
    assert_string_equal(str(m, "object"), "model");
    assert_string_equal(str(m, "owned_by"), "rapid");
    json_decref(b);
    r.route_param = "tiny-model";
    rp_openai_model(&r, &out);
    assert_int_equal(out.status, 200);
    r.route_param = "gpt-4o";
    rp_openai_model(&r, &out);
    assert_int_equal(out.status, 404);
    b = json_loads(out.body.data, 0, NULL);
    assert_string_equal(str(json_object_get(b, "error"), "code"), "model_not_found");
    json_decref(b);
    rp_buf_deinit(&out.body);

    // The model-name policy.
    rp_api_error e;
    assert_true(rp_server_check_model(&srv, "gpt-4o", &e));
    srv.params.strict_model_name = true;
    assert_false(rp_server_check_model(&srv, "gpt-4o", &e));
    assert_int_equal(e.status, 404);
    assert_string_equal(e.code, "model_not_found");
    assert_true(rp_server_check_model(&srv, "tiny-model", &e));
    assert_true(rp_server_check_model(&srv, NULL, &e));
    srv.params.strict_model_name = false;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chat_body),     cmocka_unit_test(test_chat_logprobs), cmocka_unit_test(test_completion_body),
        cmocka_unit_test(test_stream_chunks), cmocka_unit_test(test_token_strings), cmocka_unit_test(test_models),
    };
    return cmocka_run_group_tests(tests, api_setup, api_teardown);
}
