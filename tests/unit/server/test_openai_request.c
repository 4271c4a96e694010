/*
 * test_openai_request.c - reading OpenAI requests: the JSON body checks
 * (UTF-8, depth, malformed JSON, huge numbers) and every field of
 * /v1/chat/completions and /v1/completions (good, wrong type, out of range,
 * missing), each error checked for its status, param and message; plus the
 * two error shapes parsed back. Includes openai.c to reach its readers.
 */
#include "test_util.h"

#include "server/openai.c"

#include "request_cases.h"

// Parses body and reads it as a chat request; returns true when accepted.
static bool chat(const char *body, rp_api_req *q, rp_api_error *e)
{
    json_t *b = parse_body(body, q, e);
    bool ok = b && chat_read(b, q, e);
    json_decref(b);
    return ok;
}

#define MSG "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"

static const fcase field_cases[] = {
    {"\"model\":\"gpt-4o\"", true, ""},
    {"\"model\":5", false, "model"},
    {"\"temperature\":0", true, ""},
    {"\"temperature\":2", true, ""},
    {"\"temperature\":2.01", false, "temperature"},
    {"\"temperature\":-0.1", false, "temperature"},
    {"\"temperature\":\"1\"", false, "temperature"},
    {"\"temperature\":null", true, ""},
    {"\"top_p\":0.5", true, ""},
    {"\"top_p\":0", true, ""},
    {"\"top_p\":1.5", false, "top_p"},
    {"\"top_p\":true", false, "top_p"},
    {"\"top_k\":40", true, ""},
    {"\"top_k\":-1", true, ""},
    {"\"top_k\":-2", false, "top_k"},
    {"\"top_k\":1.5", false, "top_k"},
    {"\"top_k\":4.0", true, ""},
    {"\"min_p\":0.05", true, ""},
    {"\"min_p\":1.5", false, "min_p"},
    {"\"presence_penalty\":-2", true, ""},
    {"\"presence_penalty\":2.5", false, "presence_penalty"},
    {"\"frequency_penalty\":1", true, ""},
    {"\"frequency_penalty\":-3", false, "frequency_penalty"},
    {"\"frequency_penalty\":[]", false, "frequency_penalty"},
    {"\"repetition_penalty\":1.1", true, ""},
    {"\"repetition_penalty\":0", false, "repetition_penalty"},
    {"\"seed\":42", true, ""},
    {"\"seed\":-1", true, ""},
    {"\"seed\":9223372036854775807", true, ""},
    {"\"seed\":\"x\"", false, "seed"},
    {"\"n\":1", true, ""},
    {"\"n\":2", false, "n"},
    {"\"n\":0", false, "n"},
    {"\"max_tokens\":1", true, ""},
    {"\"max_tokens\":0", false, "max_tokens"},
    {"\"max_tokens\":-5", false, "max_tokens"},
    {"\"max_tokens\":\"10\"", false, "max_tokens"},
    {"\"max_tokens\":1e300", false, "max_tokens"},
    {"\"max_completion_tokens\":10", true, ""},
    {"\"max_completion_tokens\":-1", false, "max_completion_tokens"},
    {"\"stop\":\"\\n\"", true, ""},
    {"\"stop\":[\"a\",\"b\"]", true, ""},
    {"\"stop\":[\"a\",3]", false, "stop[1]"},
    {"\"stop\":5", false, "stop"},
    {"\"stop\":[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\",\"10\",\"11\",\"12\",\"13\",\"14\",\"15\",\"16\","
     "\"17\"]",
     false, "stop"},
    {"\"stream\":true", true, ""},
    {"\"stream\":\"yes\"", false, "stream"},
    {"\"stream_options\":{\"include_usage\":true}", true, ""},
    {"\"stream_options\":{\"include_usage\":1}", false, "stream_options.include_usage"},
    {"\"stream_options\":[]", false, "stream_options"},
    {"\"logprobs\":true", true, ""},
    {"\"logprobs\":true,\"top_logprobs\":20", true, ""},
    {"\"logprobs\":true,\"top_logprobs\":21", false, "top_logprobs"},
    {"\"top_logprobs\":2", false, "top_logprobs"},
    {"\"logprobs\":1", false, "logprobs"},
    {"\"logit_bias\":{\"5\":10}", false, "logit_bias"},
    {"\"logit_bias\":{}", true, ""},
    {"\"response_format\":{\"type\":\"json_object\"}", true, ""},
    {"\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\",\"schema\":{}}}", true, ""},
    {"\"response_format\":{\"type\":\"text\"}", true, ""},
    {"\"response_format\":{\"type\":\"yaml\"}", false, "response_format.type"},
    {"\"response_format\":{\"type\":\"json_schema\"}", false, "response_format.json_schema"},
    {"\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\"}}", false,
     "response_format.json_schema.schema"},
    {"\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\",\"schema\":3}}", false,
     "response_format.json_schema.schema"},
    {"\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{},\"strict\":\"yes\"}}", false,
     "response_format.json_schema.strict"},
    {"\"response_format\":\"json\"", false, "response_format"},
    {"\"reasoning_effort\":\"none\"", true, ""},
    {"\"reasoning_effort\":\"high\"", true, ""},
    {"\"reasoning_effort\":\"extreme\"", false, "reasoning_effort"},
    {"\"chat_template_kwargs\":{\"enable_thinking\":false}", true, ""},
    {"\"chat_template_kwargs\":true", false, "chat_template_kwargs"},
    {"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}}]", true,
     ""},
    {"\"tools\":{}", false, "tools"},
    {"\"tools\":[{\"type\":\"function\",\"function\":{}}]", false, "tools[0]"},
    {"\"tools\":[{\"type\":\"retrieval\"}]", false, "tools[0]"},
    {"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":[]}}]", false, "tools[0]"},
    {"\"tool_choice\":\"auto\"", true, ""},
    {"\"tool_choice\":\"none\"", true, ""},
    {"\"tool_choice\":\"required\"", false, "tool_choice"},
    {"\"tool_choice\":\"sometimes\"", false, "tool_choice"},
    {"\"tool_choice\":3", false, "tool_choice"},
    {"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"tool_choice\":\"required\"", true, ""},
    {"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"tool_choice\":{\"type\":\"function\","
     "\"function\":{\"name\":\"f\"}}",
     true, ""},
    {"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"tool_choice\":{\"type\":\"function\","
     "\"function\":{\"name\":\"g\"}}",
     false, "tool_choice"},
    {"\"parallel_tool_calls\":false", true, ""},
    {"\"parallel_tool_calls\":\"no\"", false, "parallel_tool_calls"},
    {"\"some_future_field\":{\"x\":[1,2,3]},\"user\":\"u\",\"metadata\":{},\"store\":false", true, ""},
    // messages
    {"{}", false, "messages"},
    {"{\"messages\":null}", false, "messages"},
    {"{\"messages\":\"hi\"}", false, "messages"},
    {"{\"messages\":[]}", false, "messages"},
    {"{\"messages\":[5]}", false, "messages[0]"},
    {"{\"messages\":[{\"content\":\"x\"}]}", false, "messages[0].role"},
    {"{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}", false, "messages[0].role"},
    {"{\"messages\":[{\"role\":\"user\"}]}", false, "messages[0].content"},
    {"{\"messages\":[{\"role\":\"user\",\"content\":5}]}", false, "messages[0].content"},
    {"{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":\"x\"}}]}]}",
     false, "messages[0].content[0]"},
    {"{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]}", false, "messages[0].content[0]"},
    {"{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"}]}]}", true, ""},
    {"{\"messages\":[{\"role\":\"developer\",\"content\":\"be brief\"},{\"role\":\"user\",\"content\":\"x\"}]}", true,
     ""},
    {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"assistant\",\"content\":null,\"tool_calls\":"
     "[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\":1}\"}}]},"
     "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"3\"}]}",
     true, ""},
    {"{\"messages\":[{\"role\":\"assistant\",\"content\":\"x\",\"tool_calls\":[{\"function\":{}}]}]}", false,
     "messages[0].tool_calls[0]"},
    {"{\"messages\":[{\"role\":\"assistant\",\"content\":\"x\",\"tool_calls\":\"f\"}]}", false,
     "messages[0].tool_calls"},
};

static void test_fields(void **state)
{
    (void)state;
    run_field_cases(field_cases, sizeof(field_cases) / sizeof(field_cases[0]), MSG, chat, false);
}

static void test_values(void **state)
{
    (void)state;
    rp_api_req q;
    rp_api_error e;
    assert_true(chat("{" MSG ",\"max_tokens\":7,\"max_completion_tokens\":9,\"temperature\":0.5,\"top_k\":-1,"
                     "\"seed\":-1,\"stop\":[\"x\",\"\",\"yz\"],\"logprobs\":true,\"top_logprobs\":3,"
                     "\"stream\":true,\"stream_options\":{\"include_usage\":true},\"response_format\":{\"type\":"
                     "\"json_object\"},\"reasoning_effort\":\"none\"}",
                     &q, &e));
    assert_int_equal(q.max_tokens, 9); // max_completion_tokens wins
    assert_true(q.sample.temperature == 0.5f);
    assert_int_equal(q.sample.top_k, 0);
    assert_true(q.sample.seed == UINT64_MAX);
    assert_int_equal(q.n_stop, 2); // the empty string is skipped
    assert_string_equal(q.stop[0], "x");
    assert_string_equal(q.stop[1], "yz");
    assert_int_equal(q.logprobs, 3);
    assert_true(q.stream && q.include_usage && q.json_mode);
    assert_true(json_is_false(json_object_get(q.template_kwargs, "enable_thinking")));
    assert_null(q.schema); // json_object: any object
    rp_api_req_deinit(&q);

    // json_schema: the schema is kept (a copy) with where it came from, for the compile's errors.
    assert_true(chat("{" MSG ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"p\","
                     "\"strict\":true,\"schema\":{\"type\":\"object\",\"properties\":{\"a\":{}}}}}}",
                     &q, &e));
    assert_true(q.json_mode);
    assert_non_null(json_object_get(json_object_get(q.schema, "properties"), "a"));
    assert_string_equal(q.schema_param, "response_format.json_schema.schema");
    rp_api_req_deinit(&q);

    // Defaults.
    assert_true(chat("{" MSG "}", &q, &e));
    assert_int_equal(q.max_tokens, -1);
    assert_int_equal(q.logprobs, -1);
    assert_true(q.sample.temperature == 1.0f);
    assert_false(q.stream || q.json_mode);
    assert_int_equal(q.tool_choice, RP_TOOL_CHOICE_AUTO);
    assert_null(q.model);
    rp_api_req_deinit(&q);

    // top_p 0 means greedy; chat_template_kwargs win over reasoning_effort.
    assert_true(chat("{" MSG ",\"top_p\":0,\"chat_template_kwargs\":{\"enable_thinking\":true},"
                     "\"reasoning_effort\":\"none\"}",
                     &q, &e));
    assert_true(q.sample.temperature == 0.0f);
    assert_true(json_is_true(json_object_get(q.template_kwargs, "enable_thinking")));
    rp_api_req_deinit(&q);
}

static void test_messages_normalized(void **state)
{
    (void)state;
    rp_api_req q;
    rp_api_error e;
    assert_true(chat("{\"messages\":[{\"role\":\"developer\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
                     "{\"type\":\"text\",\"text\":\"b\"}]},{\"role\":\"user\",\"content\":\"q\",\"name\":\"bob\"},"
                     "{\"role\":\"assistant\",\"content\":null,\"reasoning_content\":\"hmm\",\"tool_calls\":[{\"id\":"
                     "\"c1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"x\\\": [1]}\"}},"
                     "{\"id\":\"c2\",\"type\":\"function\",\"function\":{\"name\":\"g\",\"arguments\":\"not json\"}}]},"
                     "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"ok\",\"extra\":1}]}",
                     &q, &e));
    assert_int_equal(json_array_size(q.messages), 4);
    json_t *m0 = json_array_get(q.messages, 0);
    assert_string_equal(json_string_value(json_object_get(m0, "role")), "system");
    assert_string_equal(json_string_value(json_object_get(m0, "content")), "a\nb");
    json_t *m1 = json_array_get(q.messages, 1);
    assert_string_equal(json_string_value(json_object_get(m1, "name")), "bob");
    json_t *m2 = json_array_get(q.messages, 2);
    assert_string_equal(json_string_value(json_object_get(m2, "content")), "");
    assert_string_equal(json_string_value(json_object_get(m2, "reasoning_content")), "hmm");
    json_t *calls = json_object_get(m2, "tool_calls");
    assert_int_equal(json_array_size(calls), 2);
    json_t *a0 = json_object_get(json_object_get(json_array_get(calls, 0), "function"), "arguments");
    assert_true(json_is_object(a0)); // parsed for the template
    assert_int_equal(json_integer_value(json_array_get(json_object_get(a0, "x"), 0)), 1);
    json_t *a1 = json_object_get(json_object_get(json_array_get(calls, 1), "function"), "arguments");
    assert_string_equal(json_string_value(a1), "not json"); // kept as text
    json_t *m3 = json_array_get(q.messages, 3);
    assert_string_equal(json_string_value(json_object_get(m3, "tool_call_id")), "c1");
    assert_null(json_object_get(m3, "extra"));
    rp_api_req_deinit(&q);
}

static bool completion(const char *body, rp_api_req *q, bool *echo, rp_api_error *e)
{
    json_t *b = parse_body(body, q, e);
    bool ok = b && completion_read(b, q, echo, e);
    json_decref(b);
    return ok;
}

static void test_completions(void **state)
{
    (void)state;
    rp_api_req q;
    rp_api_error e;
    bool echo;
    assert_true(completion("{\"prompt\":\"def f():\"}", &q, &echo, &e));
    assert_string_equal(q.prompt, "def f():");
    assert_int_equal(q.max_tokens, 16); // the legacy default
    assert_null(q.messages);
    rp_api_req_deinit(&q);
    assert_true(completion("{\"prompt\":[\"one\"],\"echo\":true,\"logprobs\":5,\"max_tokens\":3}", &q, &echo, &e));
    assert_string_equal(q.prompt, "one");
    assert_true(echo);
    assert_int_equal(q.logprobs, 5);
    assert_int_equal(q.max_tokens, 3);
    rp_api_req_deinit(&q);
    assert_true(completion("{\"prompt\":[1,2,3]}", &q, &echo, &e));
    assert_int_equal(q.n_prompt_ids, 3);
    assert_int_equal(q.prompt_ids[2], 3);
    rp_api_req_deinit(&q);
    assert_true(completion("{\"prompt\":[[4,5]]}", &q, &echo, &e));
    assert_int_equal(q.n_prompt_ids, 2);
    rp_api_req_deinit(&q);

    static const char *bad[][2] = {
        {"{}", "prompt"},
        {"{\"prompt\":5}", "prompt"},
        {"{\"prompt\":[]}", "prompt"},
        {"{\"prompt\":[\"a\",\"b\"]}", "prompt"},
        {"{\"prompt\":[1,-2]}", "prompt"},
        {"{\"prompt\":[1,\"x\"]}", "prompt"},
        {"{\"prompt\":\"x\",\"logprobs\":6}", "logprobs"},
        {"{\"prompt\":\"x\",\"logprobs\":true}", "logprobs"},
        {"{\"prompt\":\"x\",\"best_of\":2}", "best_of"},
        {"{\"prompt\":\"x\",\"suffix\":\"y\"}", "suffix"},
        {"{\"prompt\":[1,2],\"echo\":true}", "echo"},
        {"{\"prompt\":\"x\",\"n\":3}", "n"},
        {"{\"prompt\":\"x\",\"temperature\":-1}", "temperature"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (completion(bad[i][0], &q, &echo, &e))
            fail_msg("%s was accepted", bad[i][0]);
        assert_int_equal(e.status, 400);
        if (strcmp(e.param, bad[i][1]) != 0)
            fail_msg("%s: param '%s', expected '%s'", bad[i][0], e.param, bad[i][1]);
        rp_api_req_deinit(&q);
    }
}

/* ---- malformed bodies -------------------------------------------------------- */

static bool parse(const char *s, size_t n, rp_api_error *e)
{
    json_t *v = NULL;
    bool ok = rp_json_parse_bytes(s, n, &v, e);
    assert_true(ok == (v != NULL));
    json_decref(v);
    return ok;
}

static void test_bodies(void **state)
{
    (void)state;
    rp_api_error e;
    static const char *bad[] = {
        "",
        "{",
        "{\"messages\": [",
        "{\"a\":1,}",
        "[1,2]",
        "\"just a string\"",
        "null",
        "{\"a\": NaN}",
        "{\"a\": Infinity}",
        "{\"a\": -Infinity}",
        "{\"a\": 1e999}",
        "{\"a\": 123456789012345678901234567890}",
        "{\"a\": \"\\ud800\"}",
        "{\"a\": \"\\u0000\"}",
        "{\"a\": 'single'}",
        "{\"a\": 1} trailing",
        "{\"a\": \"\\x41\"}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (parse(bad[i], strlen(bad[i]), &e))
            fail_msg("accepted: %s", bad[i]);
        assert_int_equal(e.status, 400);
        assert_true(strlen(e.message) > 0);
    }
    // Invalid UTF-8: stray continuation, overlong, surrogate, past U+10FFFF, truncated sequence, 0xFF.
    static const char *utf8[] = {"{\"a\":\"\x80\"}", "{\"a\":\"\xC0\xAF\"}", "{\"a\":\"\xE0\x80\xAF\"}",
                                 "{\"a\":\"\xED\xA0\x80\"}", "{\"a\":\"\xF4\x90\x80\x80\"}", "{\"a\":\"\xE2\x82\"}",
                                 "{\"a\":\"\xFF\"}", "{\"a\":\"x\"}\xC3"};
    for (size_t i = 0; i < sizeof(utf8) / sizeof(utf8[0]); i++) {
        assert_false(parse(utf8[i], strlen(utf8[i]), &e));
        assert_non_null(strstr(e.message, "UTF-8"));
    }
    // Valid multi-byte text passes; a NUL byte in the body is not JSON.
    const char *good = "{\"a\":\"h\xC3\xA9llo \xE2\x82\xAC \xF0\x9F\x98\x80\"}";
    assert_true(parse(good, strlen(good), &e));
    assert_false(parse("{\"a\":1}\0", 8, &e));
    // Duplicate keys: the last one wins.
    json_t *v;
    assert_true(rp_json_parse_bytes("{\"a\":1,\"a\":2}", 13, &v, &e));
    assert_int_equal(json_integer_value(json_object_get(v, "a")), 2);
    json_decref(v);

    // Depth: RP_JSON_MAX_DEPTH levels pass, one more does not; brackets inside strings do not count.
    char *deep = malloc(20000 + 16);
    size_t n = 5;
    memcpy(deep, "{\"a\":", 5); // the object is level 1
    for (int i = 1; i < RP_JSON_MAX_DEPTH; i++)
        deep[n++] = '[';
    for (int i = 1; i < RP_JSON_MAX_DEPTH; i++)
        deep[n++] = ']';
    deep[n++] = '}';
    assert_true(parse(deep, n, &e));
    memcpy(deep, "{\"a\":", 5);
    n = 5;
    for (int i = 0; i < RP_JSON_MAX_DEPTH; i++)
        deep[n++] = '[';
    for (int i = 0; i < RP_JSON_MAX_DEPTH; i++)
        deep[n++] = ']';
    deep[n++] = '}';
    assert_false(parse(deep, n, &e));
    assert_non_null(strstr(e.message, "nested"));
    // 10k-deep, and 10k-deep unbalanced.
    n = 0;
    for (int i = 0; i < 10000; i++)
        deep[n++] = '[';
    for (int i = 0; i < 10000; i++)
        deep[n++] = ']';
    assert_false(parse(deep, n, &e));
    assert_false(parse(deep, 10000, &e));
    free(deep);
    const char *str = "{\"a\":\"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\\\"[[[\"}";
    assert_true(parse(str, strlen(str), &e));
}

static void test_error_shapes(void **state)
{
    (void)state;
    rp_api_error e;
    rp_api_fail(&e, 400, "messages[0].content", "invalid_type", "bad %s", "thing");
    rp_buf b;
    rp_buf_init(&b);
    rp_openai_error_json(&e, &b);
    json_t *v = json_loads(b.data, 0, NULL);
    assert_non_null(v);
    json_t *err = json_object_get(v, "error");
    assert_string_equal(json_string_value(json_object_get(err, "message")), "bad thing");
    assert_string_equal(json_string_value(json_object_get(err, "type")), "invalid_request_error");
    assert_string_equal(json_string_value(json_object_get(err, "param")), "messages[0].content");
    assert_string_equal(json_string_value(json_object_get(err, "code")), "invalid_type");
    json_decref(v);

    rp_api_fail(&e, 401, NULL, NULL, "no key");
    rp_buf_reset(&b);
    rp_openai_error_json(&e, &b);
    v = json_loads(b.data, 0, NULL);
    err = json_object_get(v, "error");
    assert_true(json_is_null(json_object_get(err, "param")));
    assert_true(json_is_null(json_object_get(err, "code")));
    assert_string_equal(json_string_value(json_object_get(err, "type")), "authentication_error");
    json_decref(v);

    static const struct {
        int status;
        const char *type;
    } anth[] = {{400, "invalid_request_error"}, {401, "authentication_error"}, {404, "not_found_error"},
                {413, "request_too_large"},     {500, "api_error"},            {503, "overloaded_error"}};
    for (size_t i = 0; i < sizeof(anth) / sizeof(anth[0]); i++) {
        rp_api_fail(&e, anth[i].status, NULL, NULL, "m%d", anth[i].status);
        rp_buf_reset(&b);
        rp_anthropic_error_json(&e, &b);
        v = json_loads(b.data, 0, NULL);
        assert_string_equal(json_string_value(json_object_get(v, "type")), "error");
        err = json_object_get(v, "error");
        assert_string_equal(json_string_value(json_object_get(err, "type")), anth[i].type);
        assert_non_null(json_string_value(json_object_get(err, "message")));
        json_decref(v);
    }
    rp_buf_deinit(&b);
}

static void test_buf_and_sse(void **state)
{
    (void)state;
    rp_buf b;
    rp_buf_init(&b);
    for (int i = 0; i < 1000; i++)
        rp_buf_printf(&b, "%d,", i);
    assert_false(b.failed);
    assert_int_equal(b.len, strlen(b.data));
    char big[600];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = 0;
    rp_buf_reset(&b);
    rp_buf_printf(&b, "[%s]", big); // longer than the printf fast path
    assert_int_equal(b.len, sizeof(big) + 1);
    rp_buf_reset(&b);
    json_t *v = json_pack("{s:s}", "a", "line\nbreak");
    rp_sse_json(&b, "message_start", v);
    rp_sse_text(&b, "[DONE]");
    json_decref(v);
    assert_string_equal(b.data, "event: message_start\ndata: {\"a\":\"line\\nbreak\"}\n\ndata: [DONE]\n\n");
    rp_buf_deinit(&b);
}

// Random byte flips, insertions and truncations of a rich body: every one is
// either read or refused with a 400 and a message, never a crash (ASan build).
static void test_mutations(void **state)
{
    (void)state;
    static const char base[] =
        "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":[{\"type\":\"text\",\"text\":\"s\"}]},"
        "{\"role\":\"user\",\"content\":\"caf\xC3\xA9\"},{\"role\":\"assistant\",\"content\":null,\"tool_calls\":"
        "[{\"id\":\"c\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\":[1,2]}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"c\",\"content\":\"3\"}],\"tools\":[{\"type\":\"function\","
        "\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}}],\"tool_choice\":{\"type\":"
        "\"function\",\"function\":{\"name\":\"f\"}},\"stop\":[\"x\",\"yy\"],\"max_tokens\":5,\"temperature\":0.5,"
        "\"top_p\":0.9,\"logprobs\":true,\"top_logprobs\":2,\"stream\":true,\"stream_options\":{\"include_usage\":"
        "true},\"response_format\":{\"type\":\"json_object\"},\"chat_template_kwargs\":{\"enable_thinking\":false},"
        "\"seed\":7}";
    rp_api_req q;
    rp_api_error e;
    assert_true(chat(base, &q, &e));
    rp_api_req_deinit(&q);
    size_t n = sizeof(base) - 1;
    char *buf = malloc(n + 8);
    uint64_t x = 0x12345678ABCDEFull;
    int accepted = 0, refused = 0;
    for (int it = 0; it < 20000; it++) {
        memcpy(buf, base, n);
        size_t len = n;
        int edits = 1 + (int)(x % 3);
        for (int k = 0; k < edits; k++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            size_t at = (size_t)(x >> 8) % len;
            static const char pool[] = "{}[]\":,0123456789.-eE\\ \x80\xC3nulltruefalse";
            switch (x % 4) {
            case 0: buf[at] = pool[(x >> 40) % (sizeof(pool) - 1)]; break;
            case 1: len = at + 1; break;
            case 2:
                memmove(buf + at, buf + at + 1, len - at - 1);
                len--;
                break;
            default:
                if (len < n + 7) {
                    memmove(buf + at + 1, buf + at, len - at);
                    buf[at] = pool[(x >> 33) % (sizeof(pool) - 1)];
                    len++;
                }
            }
        }
        json_t *b = NULL;
        if (rp_json_parse_bytes(buf, len, &b, &e)) {
            if (chat_read(b, &q, &e)) {
                accepted++;
            } else {
                assert_int_equal(e.status, 400);
                refused++;
            }
            rp_api_req_deinit(&q);
            json_decref(b);
        } else {
            assert_int_equal(e.status, 400);
            assert_true(strlen(e.message) > 0);
            refused++;
        }
    }
    free(buf);
    assert_true(accepted > 0 && refused > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fields),      cmocka_unit_test(test_values),       cmocka_unit_test(test_messages_normalized),
        cmocka_unit_test(test_completions), cmocka_unit_test(test_bodies),       cmocka_unit_test(test_error_shapes),
        cmocka_unit_test(test_buf_and_sse), cmocka_unit_test(test_mutations),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
