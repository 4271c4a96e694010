/*
 * test_responses_request.c - reading OpenAI Responses requests: every field of
 * /v1/responses (good, wrong type, out of range, missing; each error a 400
 * naming the field as `param`), the stateless refusals, the values they set,
 * the echo the Response object repeats, the conversion of instructions and
 * input items (messages, function calls and outputs, reasoning) into the chat
 * template's messages (checked as whole JSON), and a type-confusion sweep over
 * a Codex-like request. Includes responses.c to reach its readers.
 */
#include "test_util.h"

#include "server/responses.c"

#include "request_cases.h"

static bool read_body(const char *body, rp_api_req *q, resp_echo *x, rp_api_error *e)
{
    memset(x, 0, sizeof(*x));
    json_t *b = parse_body(body, q, e);
    bool ok = b && resp_read(b, q, x, e);
    json_decref(b);
    return ok;
}

// The reader for the shared checks: an accepted request's echo has all its fields.
static bool read_request(const char *body, rp_api_req *q, rp_api_error *e)
{
    resp_echo x;
    bool ok = read_body(body, q, &x, e);
    if (ok) // user only when given (optional, not nullable in the document)
        assert_int_equal(json_object_size(x.fields), 13 + (json_object_get(x.fields, "user") != NULL));
    echo_deinit(&x);
    return ok;
}

#define IN "\"input\":\"hi\""
#define FN "{\"type\":\"function\",\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}"

static const fcase field_cases[] = {
    {"\"model\":\"gpt-5-codex\"", true, ""},
    {"\"model\":[]", false, "model"},
    {"{}", false, "input"},
    {"{\"input\":null}", false, "input"},
    {"{\"input\":5}", false, "input"},
    {"{\"input\":[]}", false, "input"},
    {"{\"input\":[5]}", false, "input[0]"},
    {"{\"input\":[{\"type\":7}]}", false, "input[0]"},
    {"{\"input\":[{\"role\":\"user\"}]}", false, "input[0].content"},
    {"{\"input\":[{\"content\":\"x\"}]}", false, "input[0].role"},
    {"{\"input\":[{\"role\":\"tool\",\"content\":\"x\"}]}", false, "input[0].role"},
    {"{\"input\":[{\"role\":\"user\",\"content\":7}]}", false, "input[0].content"},
    {"{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\",\"image_url\":\"data:x\"}]}]}", false,
     "input[0].content[0]"},
    {"{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_file\",\"file_id\":\"f\"}]}]}", false,
     "input[0].content[0]"},
    {"{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_text\"}]}]}", false, "input[0].content[0]"},
    {"{\"input\":[{\"role\":\"user\",\"content\":[\"x\"]}]}", false, "input[0].content[0]"},
    {"{\"input\":[{\"type\":\"message\",\"role\":\"developer\",\"content\":[{\"type\":\"input_text\",\"text\":\"d\"}]},"
     "{\"role\":\"user\",\"content\":\"q\"}]}",
     true, ""},
    {"{\"input\":[{\"type\":\"function_call\",\"name\":\"f\",\"arguments\":\"{}\"}]}", false, "input[0]"},
    {"{\"input\":[{\"type\":\"function_call\",\"call_id\":\"c\",\"name\":\"f\",\"arguments\":{}}]}", false, "input[0]"},
    {"{\"input\":[{\"type\":\"function_call_output\",\"output\":\"x\"}]}", false, "input[0]"},
    {"{\"input\":[{\"type\":\"function_call_output\",\"call_id\":\"c\"}]}", false, "input[0].output"},
    {"{\"input\":[{\"type\":\"function_call_output\",\"call_id\":\"c\",\"output\":[{\"type\":\"input_image\"}]}]}",
     false, "input[0].output[0]"},
    {"{\"input\":[{\"type\":\"reasoning\",\"summary\":\"s\"},{\"role\":\"user\",\"content\":\"q\"}]}", false,
     "input[0]"},
    {"{\"input\":[{\"type\":\"reasoning\",\"summary\":[{\"type\":\"summary_text\"}]}]}", false, "input[0]"},
    {"{\"input\":[{\"type\":\"item_reference\",\"id\":\"msg_1\"}]}", false, "input[0]"},
    {"{\"input\":[{\"type\":\"local_shell_call\",\"call_id\":\"c\"}]}", false, "input[0]"},
    {"{\"input\":[{\"type\":\"reasoning\",\"summary\":[],\"encrypted_content\":\"x\"}]}", false, "input"},
    {"\"instructions\":\"be brief\"", true, ""},
    {"\"instructions\":[]", false, "instructions"},
    {"\"max_output_tokens\":16", true, ""},
    {"\"max_output_tokens\":1", true, ""},
    {"\"max_output_tokens\":0", false, "max_output_tokens"},
    {"\"max_output_tokens\":\"9\"", false, "max_output_tokens"},
    {"\"temperature\":2", true, ""},
    {"\"temperature\":2.5", false, "temperature"},
    {"\"top_p\":0.1", true, ""},
    {"\"top_p\":-1", false, "top_p"},
    {"\"stream\":true", true, ""},
    {"\"stream\":1", false, "stream"},
    {"\"store\":false", true, ""},
    {"\"store\":\"no\"", false, "store"},
    {"\"previous_response_id\":\"resp_123\"", false, "previous_response_id"},
    {"\"previous_response_id\":null", true, ""},
    {"\"conversation\":\"conv_1\"", false, "conversation"},
    {"\"prompt\":{\"id\":\"pmpt_1\"}", false, "prompt"},
    {"\"background\":true", false, "background"},
    {"\"background\":false", true, ""},
    {"\"metadata\":{\"a\":\"b\"}", true, ""},
    {"\"metadata\":[]", false, "metadata"},
    {"\"reasoning\":{\"effort\":\"none\"}", true, ""},
    {"\"reasoning\":{\"effort\":\"high\",\"summary\":\"auto\"}", true, ""},
    {"\"reasoning\":{\"effort\":\"maximum\"}", false, "reasoning.effort"},
    {"\"reasoning\":{\"effort\":3}", false, "reasoning.effort"},
    {"\"reasoning\":\"high\"", false, "reasoning"},
    {"\"reasoning\":null", true, ""},
    {"\"text\":{\"format\":{\"type\":\"json_object\"}}", true, ""},
    {"\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"x\",\"schema\":{},\"strict\":true},\"verbosity\":"
     "\"low\"}",
     true, ""},
    {"\"text\":{\"format\":{\"type\":\"text\"}}", true, ""},
    {"\"text\":{\"format\":{\"type\":\"yaml\"}}", false, "text.format.type"},
    {"\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"x\",\"schema\":{\"type\":\"object\"}}}", true, ""},
    {"\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"x\"}}", false, "text.format.schema"},
    {"\"text\":{\"format\":\"json\"}", false, "text.format"},
    {"\"text\":\"json\"", false, "text"},
    {"\"tools\":[" FN "]", true, ""},
    {"\"tools\":[{\"type\":\"function\",\"name\":\"f\",\"description\":\"d\",\"parameters\":{},\"strict\":true}]", true,
     ""},
    {"\"tools\":[{\"type\":\"web_search\"},{\"type\":\"local_shell\"},{\"type\":\"custom\",\"name\":\"apply_patch\"}]",
     true, ""},
    {"\"tools\":{}", false, "tools"},
    {"\"tools\":[{\"name\":\"f\"}]", false, "tools[0]"},
    {"\"tools\":[{\"type\":\"function\"}]", false, "tools[0]"},
    {"\"tools\":[{\"type\":\"function\",\"name\":\"f\",\"parameters\":[]}]", false, "tools[0]"},
    {"\"tools\":[{\"type\":\"function\",\"name\":\"f\",\"description\":{}}]", false, "tools[0]"},
    {"\"tools\":[" FN "],\"tool_choice\":\"auto\"", true, ""},
    {"\"tools\":[" FN "],\"tool_choice\":\"none\"", true, ""},
    {"\"tools\":[" FN "],\"tool_choice\":\"required\"", true, ""},
    {"\"tools\":[" FN "],\"tool_choice\":{\"type\":\"function\",\"name\":\"f\"}", true, ""},
    {"\"tools\":[" FN "],\"tool_choice\":{\"type\":\"allowed_tools\",\"mode\":\"required\",\"tools\":[{\"type\":"
     "\"function\",\"name\":\"f\"}]}",
     true, ""},
    {"\"tools\":[" FN "],\"tool_choice\":{\"type\":\"allowed_tools\"}", false, "tool_choice.mode"},
    {"\"tools\":[" FN "],\"tool_choice\":{\"type\":\"function\",\"name\":\"g\"}", false, "tool_choice"},
    {"\"tools\":[" FN "],\"tool_choice\":{\"type\":\"function\"}", false, "tool_choice"},
    {"\"tools\":[" FN "],\"tool_choice\":{\"type\":\"web_search\"}", false, "tool_choice"},
    {"\"tools\":[" FN "],\"tool_choice\":\"sometimes\"", false, "tool_choice"},
    {"\"tools\":[" FN "],\"tool_choice\":5", false, "tool_choice"},
    {"\"tools\":[" FN "],\"tool_choice\":{}", false, "tool_choice"},
    {"\"tool_choice\":\"required\"", false, "tool_choice"},
    {"\"tools\":[{\"type\":\"web_search\"}],\"tool_choice\":\"required\"", false, "tool_choice"},
    {"\"parallel_tool_calls\":false", true, ""},
    {"\"parallel_tool_calls\":\"no\"", false, "parallel_tool_calls"},
    {"\"include\":[\"reasoning.encrypted_content\"],\"prompt_cache_key\":\"k\",\"truncation\":\"auto\",\"user\":\"u\","
     "\"service_tier\":\"auto\",\"safety_identifier\":\"s\",\"max_tool_calls\":3,\"top_logprobs\":2,"
     "\"stream_options\":{\"include_obfuscation\":false},\"future_field\":{\"x\":[1]}",
     true, ""},
};

static void test_fields(void **state)
{
    (void)state;
    run_field_cases(field_cases, sizeof(field_cases) / sizeof(field_cases[0]), IN, read_request, false);
}

static void test_values(void **state)
{
    (void)state;
    rp_api_req q;
    resp_echo x;
    rp_api_error e;
    assert_true(
        read_body("{\"model\":\"gpt-5\",\"input\":\"hi\",\"instructions\":\"sys\",\"max_output_tokens\":99,"
                  "\"temperature\":0.5,\"top_p\":0.25,\"stream\":true,\"store\":false,\"reasoning\":{\"effort\":"
                  "\"none\"},\"text\":{\"format\":{\"type\":\"json_object\"}},\"parallel_tool_calls\":false,"
                  "\"tools\":[" FN ",{\"type\":\"web_search\"}],\"tool_choice\":{\"type\":\"function\",\"name\":"
                  "\"f\"},\"metadata\":{\"k\":\"v\"},\"user\":\"me\"}",
                  &q, &x, &e));
    assert_string_equal(q.model, "gpt-5");
    assert_int_equal(q.max_tokens, 99);
    assert_true(q.sample.temperature == 0.5f);
    assert_true(q.sample.top_p == 0.25f);
    assert_true(q.stream && q.json_mode);
    assert_false(q.parallel_tool_calls);
    assert_int_equal(q.tool_choice, RP_TOOL_CHOICE_NAMED);
    assert_string_equal(q.tool_name, "f");
    assert_true(json_is_false(json_object_get(q.template_kwargs, "enable_thinking")));
    assert_int_equal(json_array_size(q.tools), 1); // web_search is not offered
    // The echo: what the Response object repeats.
    json_t *f = x.fields;
    assert_string_equal(json_string_value(json_object_get(f, "instructions")), "sys");
    assert_int_equal(json_integer_value(json_object_get(f, "max_output_tokens")), 99);
    assert_true(json_is_false(json_object_get(f, "store")));
    assert_true(json_is_false(json_object_get(f, "parallel_tool_calls")));
    assert_true(json_real_value(json_object_get(f, "temperature")) == 0.5);
    assert_true(json_real_value(json_object_get(f, "top_p")) == 0.25);
    assert_string_equal(json_string_value(json_object_get(json_object_get(f, "reasoning"), "effort")), "none");
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(json_object_get(f, "text"), "format"), "type")),
        "json_object");
    assert_string_equal(json_string_value(json_object_get(json_object_get(f, "tool_choice"), "name")), "f");
    assert_int_equal(json_array_size(json_object_get(f, "tools")), 2); // as sent
    assert_string_equal(json_string_value(json_object_get(json_object_get(f, "metadata"), "k")), "v");
    assert_string_equal(json_string_value(json_object_get(f, "user")), "me");
    assert_true(json_is_null(json_object_get(f, "previous_response_id")));
    rp_api_req_deinit(&q);
    echo_deinit(&x);

    // Defaults.
    assert_true(read_body("{\"input\":\"hi\"}", &q, &x, &e));
    assert_int_equal(q.max_tokens, -1);
    assert_null(q.template_kwargs);
    assert_null(q.tools);
    assert_int_equal(q.tool_choice, RP_TOOL_CHOICE_AUTO);
    assert_true(q.parallel_tool_calls);
    assert_false(q.stream || q.json_mode);
    f = x.fields;
    assert_true(json_is_null(json_object_get(f, "instructions")));
    assert_true(json_is_null(json_object_get(f, "max_output_tokens")));
    assert_true(json_is_true(json_object_get(f, "store")));
    assert_string_equal(json_string_value(json_object_get(f, "tool_choice")), "auto");
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(json_object_get(f, "text"), "format"), "type")), "text");
    assert_true(json_real_value(json_object_get(f, "temperature")) == 1.0);
    assert_null(json_object_get(f, "user"));
    assert_int_equal(json_object_size(f), 13);
    rp_api_req_deinit(&q);
    echo_deinit(&x);

    // top_p 0 is greedy; a reasoning effort other than none leaves the template's default.
    assert_true(read_body("{\"input\":\"hi\",\"top_p\":0,\"reasoning\":{\"effort\":\"low\"}}", &q, &x, &e));
    assert_true(q.sample.temperature == 0.0f);
    assert_null(q.template_kwargs);
    rp_api_req_deinit(&q);
    echo_deinit(&x);
    // allowed_tools uses its mode.
    assert_true(read_body("{\"input\":\"hi\",\"tools\":[" FN "],\"tool_choice\":{\"type\":\"allowed_tools\",\"mode\":"
                          "\"required\",\"tools\":[]}}",
                          &q, &x, &e));
    assert_int_equal(q.tool_choice, RP_TOOL_CHOICE_REQUIRED);
    rp_api_req_deinit(&q);
    echo_deinit(&x);
}

static void test_conversion(void **state)
{
    (void)state;
    // A Codex-like turn: instructions, developer and user messages, a reasoning item, an assistant message with
    // two calls, their outputs (one as content parts), then the next reasoning and call.
    expect_conversion(
        read_request,
        "{\"model\":\"gpt-5-codex\",\"instructions\":\"You are Codex.\",\"input\":["
        "{\"type\":\"message\",\"role\":\"developer\",\"content\":[{\"type\":\"input_text\",\"text\":\"<perms/>\"}]},"
        "{\"type\":\"message\",\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"<env/>\"},{\"type\":"
        "\"input_text\",\"text\":\"list files\"}]},"
        "{\"type\":\"reasoning\",\"id\":\"rs_1\",\"summary\":[{\"type\":\"summary_text\",\"text\":\"short\"}],"
        "\"content\":[{\"type\":\"reasoning_text\",\"text\":\"I should run ls.\"}],\"encrypted_content\":null},"
        "{\"type\":\"message\",\"role\":\"assistant\",\"id\":\"msg_1\",\"content\":[{\"type\":\"output_text\",\"text\":"
        "\"Listing.\",\"annotations\":[]}]},"
        "{\"type\":\"function_call\",\"id\":\"fc_1\",\"call_id\":\"call_a\",\"name\":\"shell\",\"arguments\":"
        "\"{\\\"command\\\":[\\\"ls\\\"]}\"},"
        "{\"type\":\"function_call\",\"call_id\":\"call_b\",\"name\":\"shell\",\"arguments\":\"not json\"},"
        "{\"type\":\"function_call_output\",\"call_id\":\"call_a\",\"output\":\"a.py\\nb.py\"},"
        "{\"type\":\"function_call_output\",\"call_id\":\"call_b\",\"output\":[{\"type\":\"input_text\",\"text\":"
        "\"err\"}]},"
        "{\"type\":\"reasoning\",\"summary\":[{\"type\":\"summary_text\",\"text\":\"Now cat.\"}]},"
        "{\"type\":\"function_call\",\"call_id\":\"call_c\",\"name\":\"shell\",\"arguments\":\"{}\"}],"
        "\"tools\":[{\"type\":\"function\",\"name\":\"shell\",\"description\":\"Runs a command\",\"strict\":false,"
        "\"parameters\":{\"type\":\"object\",\"properties\":{\"command\":{\"type\":\"array\"}}}},{\"type\":"
        "\"local_shell\"}],\"tool_choice\":\"auto\",\"parallel_tool_calls\":true,\"store\":false,\"stream\":true,"
        "\"include\":[\"reasoning.encrypted_content\"],\"prompt_cache_key\":\"abc\"}",
        "[{\"role\":\"system\",\"content\":\"You are Codex.\"},"
        "{\"role\":\"system\",\"content\":\"<perms/>\"},"
        "{\"role\":\"user\",\"content\":\"<env/>\\nlist files\"},"
        "{\"role\":\"assistant\",\"content\":\"Listing.\",\"reasoning_content\":\"I should run ls.\",\"tool_calls\":["
        "{\"id\":\"call_a\",\"type\":\"function\",\"function\":{\"name\":\"shell\",\"arguments\":{\"command\":[\"ls\"]}"
        "}},"
        "{\"id\":\"call_b\",\"type\":\"function\",\"function\":{\"name\":\"shell\",\"arguments\":\"not json\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"call_a\",\"content\":\"a.py\\nb.py\"},"
        "{\"role\":\"tool\",\"tool_call_id\":\"call_b\",\"content\":\"err\"},"
        "{\"role\":\"assistant\",\"content\":\"\",\"reasoning_content\":\"Now cat.\",\"tool_calls\":["
        "{\"id\":\"call_c\",\"type\":\"function\",\"function\":{\"name\":\"shell\",\"arguments\":{}}}]}]",
        "[{\"type\":\"function\",\"function\":{\"name\":\"shell\",\"description\":\"Runs a command\",\"parameters\":{"
        "\"type\":\"object\",\"properties\":{\"command\":{\"type\":\"array\"}}}}}]");

    // Easy messages (no type), refusal parts, reasoning dropped when a user turn follows it, an empty
    // instructions string.
    expect_conversion(read_request,
                      "{\"instructions\":\"\",\"input\":[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\","
                      "\"content\":[{\"type\":\"refusal\",\"refusal\":\"no\"}]},{\"type\":\"reasoning\",\"summary\":"
                      "[{\"type\":\"summary_text\",\"text\":\"lost\"}]},{\"role\":\"user\",\"content\":\"again\"},"
                      "{\"role\":\"system\",\"content\":\"late\"}]}",
                      "[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"content\":\"no\"},"
                      "{\"role\":\"user\",\"content\":\"again\"},{\"role\":\"system\",\"content\":\"late\"}]",
                      NULL);

    // A string input with instructions.
    expect_conversion(read_request, "{\"instructions\":\"S\",\"input\":\"hello\"}",
                      "[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"hello\"}]", NULL);
}

/* ---- the type-confusion sweep ------------------------------------------------ */

static const char *full_body =
    "{\"model\":\"gpt-5-codex\",\"instructions\":\"I\",\"max_output_tokens\":100,\"temperature\":0.2,\"top_p\":0.9,"
    "\"stream\":true,\"store\":false,\"parallel_tool_calls\":true,\"reasoning\":{\"effort\":\"medium\",\"summary\":"
    "\"auto\"},\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"n\",\"schema\":{}},\"verbosity\":\"low\"},"
    "\"metadata\":{\"a\":\"b\"},\"tools\":[{\"type\":\"function\",\"name\":\"f\",\"description\":\"d\",\"strict\":true,"
    "\"parameters\":{\"type\":\"object\"}},{\"type\":\"web_search\"}],\"tool_choice\":{\"type\":\"function\","
    "\"name\":\"f\"},"
    "\"input\":[{\"type\":\"message\",\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"q\"}]},"
    "{\"type\":\"reasoning\",\"summary\":[{\"type\":\"summary_text\",\"text\":\"s\"}],\"content\":[{\"type\":"
    "\"reasoning_text\",\"text\":\"r\"}]},"
    "{\"type\":\"function_call\",\"call_id\":\"c\",\"name\":\"f\",\"arguments\":\"{\\\"a\\\":1}\"},"
    "{\"type\":\"function_call_output\",\"call_id\":\"c\",\"output\":\"o\"},"
    "{\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"t\"}]}]}";

static void test_sweep(void **state)
{
    (void)state;
    run_sweep(full_body, read_request);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fields),
        cmocka_unit_test(test_values),
        cmocka_unit_test(test_conversion),
        cmocka_unit_test(test_sweep),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
