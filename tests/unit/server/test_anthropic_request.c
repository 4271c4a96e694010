/*
 * test_anthropic_request.c - reading Anthropic Messages requests: every field
 * of /v1/messages and /v1/messages/count_tokens (good, wrong type, out of
 * range, missing; each error a 400 naming the field), the values they set,
 * the conversion of system/messages/tools into the chat template's
 * OpenAI-style messages (checked as whole JSON), prefill (a final assistant
 * message continued: the rendered prompt ends with its text), count_tokens
 * against the rendered prompt, and a type-confusion sweep
 * over a full request (every value replaced by every wrong type, every key
 * dropped) that must only ever accept or answer 400. Includes anthropic.c to
 * reach its readers.
 */
#include "test_util.h"

#include "server/anthropic.c"

#include "api_fixture.h"
#include "request_cases.h"

// Parses body and reads it; true when accepted. q is always initialized.
static bool read_body(const char *body, bool count_only, rp_api_req *q, rp_api_error *e)
{
    json_t *b = parse_body(body, q, e);
    bool ok = b && anth_read(b, count_only, q, e);
    json_decref(b);
    return ok;
}

static bool read_message(const char *body, rp_api_req *q, rp_api_error *e)
{
    return read_body(body, false, q, e);
}

static bool read_count(const char *body, rp_api_req *q, rp_api_error *e)
{
    return read_body(body, true, q, e);
}

#define MSG "\"max_tokens\":64,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"
#define TOOL "{\"name\":\"f\",\"input_schema\":{\"type\":\"object\"}}"

static const fcase field_cases[] = {
    {"\"model\":\"claude-sonnet-4-5\"", true, ""},
    {"\"model\":5", false, "model"},
    {"{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", false, "max_tokens"},
    {"{\"max_tokens\":null,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", false, "max_tokens"},
    {"{\"max_tokens\":0,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", false, "max_tokens"},
    {"{\"max_tokens\":-3,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", false, "max_tokens"},
    {"{\"max_tokens\":\"8\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", false, "max_tokens"},
    {"{\"max_tokens\":1.5,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", false, "max_tokens"},
    {"{\"max_tokens\":1e300,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", false, "max_tokens"},
    {"\"temperature\":0", true, ""},
    {"\"temperature\":1", true, ""},
    {"\"temperature\":1.5", false, "temperature"},
    {"\"temperature\":-0.1", false, "temperature"},
    {"\"temperature\":\"0.5\"", false, "temperature"},
    {"\"top_p\":0.9", true, ""},
    {"\"top_p\":0", true, ""},
    {"\"top_p\":1.01", false, "top_p"},
    {"\"top_p\":[]", false, "top_p"},
    {"\"top_k\":40", true, ""},
    {"\"top_k\":0", true, ""},
    {"\"top_k\":-1", false, "top_k"},
    {"\"top_k\":2.5", false, "top_k"},
    {"\"stop_sequences\":[\"\\n\\nHuman:\",\"END\"]", true, ""},
    {"\"stop_sequences\":[]", true, ""},
    {"\"stop_sequences\":\"END\"", false, "stop_sequences"},
    {"\"stop_sequences\":[\"a\",5]", false, "stop_sequences[1]"},
    {"\"stream\":true", true, ""},
    {"\"stream\":\"true\"", false, "stream"},
    {"\"metadata\":{\"user_id\":\"u-1\"}", true, ""},
    {"\"metadata\":\"u-1\"", false, "metadata"},
    {"\"system\":\"be brief\"", true, ""},
    {"\"system\":[{\"type\":\"text\",\"text\":\"a\",\"cache_control\":{\"type\":\"ephemeral\"}}]", true, ""},
    {"\"system\":5", false, "system"},
    {"\"system\":[{\"type\":\"image\"}]", false, "system.0"},
    {"\"system\":[{\"type\":\"text\"}]", false, "system.0"},
    {"\"system\":[\"a\"]", false, "system.0"},
    {"\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":2048}", true, ""},
    {"\"thinking\":{\"type\":\"enabled\"}", false, "thinking.budget_tokens"},
    {"\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":2048.0}", true, ""},
    {"\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":0}", false, "thinking.budget_tokens"},
    {"\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":\"lots\"}", false, "thinking.budget_tokens"},
    {"\"thinking\":{\"type\":\"disabled\"}", true, ""},
    {"\"thinking\":{\"type\":\"adaptive\"}", true, ""},
    {"\"thinking\":{\"type\":\"sometimes\"}", false, "thinking.type"},
    {"\"thinking\":true", false, "thinking"},
    {"\"tools\":[" TOOL "]", true, ""},
    {"\"tools\":[{\"name\":\"f\",\"description\":\"d\",\"input_schema\":{\"type\":\"object\"},\"cache_control\":{"
     "\"type\":"
     "\"ephemeral\"}}]",
     true, ""},
    {"\"tools\":[{\"type\":\"custom\",\"name\":\"f\",\"input_schema\":{}}]", true, ""},
    {"\"tools\":[{\"type\":\"bash_20250124\",\"name\":\"bash\"}]", true, ""},
    {"\"tools\":{}", false, "tools"},
    {"\"tools\":[5]", false, "tools.0"},
    {"\"tools\":[{\"input_schema\":{}}]", false, "tools.0"},
    {"\"tools\":[{\"name\":\"f\"}]", false, "tools.0"},
    {"\"tools\":[{\"name\":\"f\",\"input_schema\":[]}]", false, "tools.0"},
    {"\"tools\":[{\"name\":\"f\",\"input_schema\":{},\"description\":3}]", false, "tools.0"},
    {"\"tools\":[{\"type\":7,\"name\":\"f\",\"input_schema\":{}}]", false, "tools.0"},
    {"\"tools\":[" TOOL "],\"tool_choice\":{\"type\":\"auto\"}", true, ""},
    {"\"tools\":[" TOOL "],\"tool_choice\":{\"type\":\"any\"}", true, ""},
    {"\"tools\":[" TOOL "],\"tool_choice\":{\"type\":\"tool\",\"name\":\"f\"}", true, ""},
    {"\"tools\":[" TOOL "],\"tool_choice\":{\"type\":\"none\"}", true, ""},
    {"\"tools\":[" TOOL "],\"tool_choice\":{\"type\":\"auto\",\"disable_parallel_tool_use\":true}", true, ""},
    {"\"tools\":[" TOOL "],\"tool_choice\":{\"type\":\"auto\",\"disable_parallel_tool_use\":1}", false,
     "tool_choice.disable_parallel_tool_use"},
    {"\"tools\":[" TOOL "],\"tool_choice\":{\"type\":\"tool\",\"name\":\"g\"}", false, "tool_choice.name"},
    {"\"tools\":[" TOOL "],\"tool_choice\":{\"type\":\"tool\"}", false, "tool_choice.name"},
    {"\"tools\":[" TOOL "],\"tool_choice\":{\"type\":\"maybe\"}", false, "tool_choice.type"},
    {"\"tools\":[" TOOL "],\"tool_choice\":\"auto\"", false, "tool_choice"},
    {"\"tool_choice\":{\"type\":\"any\"}", false, "tool_choice"},
    {"\"tools\":[{\"type\":\"web_search_20250305\",\"name\":\"web_search\"}],\"tool_choice\":{\"type\":\"tool\","
     "\"name\":\"web_search\"}",
     false, "tool_choice"},
    {"\"output_config\":{\"effort\":\"high\"}", true, ""},
    {"\"output_config\":{\"format\":{\"type\":\"json_schema\",\"schema\":{\"type\":\"object\"}}}", true, ""},
    {"\"output_config\":{\"format\":{\"type\":\"xml\"}}", false, "output_config.format.type"},
    {"\"output_config\":{\"format\":\"json\"}", false, "output_config.format"},
    {"\"output_config\":7", false, "output_config"},
    {"\"output_config\":{\"format\":{\"type\":\"json_schema\"}}", false, "output_config.format.schema"},
    {"\"cache_control\":{\"type\":\"ephemeral\"},\"service_tier\":\"auto\",\"context_management\":{\"edits\":[]},"
     "\"container\":null,\"mcp_servers\":[],\"some_future_field\":[1,{\"x\":2}],\"anthropic_version\":\"2023-06-01\"",
     true, ""},
    // messages
    {"{\"max_tokens\":5}", false, "messages"},
    {"{\"max_tokens\":5,\"messages\":null}", false, "messages"},
    {"{\"max_tokens\":5,\"messages\":{}}", false, "messages"},
    {"{\"max_tokens\":5,\"messages\":[]}", false, "messages"},
    {"{\"max_tokens\":5,\"messages\":[\"hi\"]}", false, "messages.0"},
    {"{\"max_tokens\":5,\"messages\":[{\"content\":\"x\"}]}", false, "messages.0"},
    {"{\"max_tokens\":5,\"messages\":[{\"role\":\"human\",\"content\":\"x\"}]}", false, "messages.0"},
    {"{\"max_tokens\":5,\"messages\":[{\"role\":\"user\"}]}", false, "messages.0.content"},
    {"{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":7}]}", false, "messages.0.content"},
    {"{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[]}]}", false, "messages.0.content"},
    {"{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"}]}]}", true,
     ""},
    {"{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]}", false,
     "messages.0.content.0"},
    {"{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"text\":\"a\"}]}]}", false,
     "messages.0.content.0"},
    {"{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"source\":{\"type\":"
     "\"base64\",\"media_type\":\"image/png\",\"data\":\"AA\"}}]}]}",
     false, "messages.0.content.0"},
    {"{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"document\",\"source\":{\"type\":"
     "\"text\",\"media_type\":\"text/plain\",\"data\":\"doc\"}}]}]}",
     true, ""},
    {"{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"document\",\"source\":{\"type\":"
     "\"base64\",\"media_type\":\"application/pdf\",\"data\":\"AA\"}}]}]}",
     false, "messages.0.content.0"},
    {"{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"content\":\"x\"}]}]}",
     false, "messages.0.content.0"},
    {"{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"t\","
     "\"content\":5}]}]}",
     false, "messages.0.content.0.content"},
    {"{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"t\","
     "\"content\":[{\"type\":\"image\"}]}]}]}",
     false, "messages.0.content.0.content.0"},
    {"{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"t\","
     "\"is_error\":\"yes\"}]}]}",
     false, "messages.0.content.0"},
    {"{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"content\":[{"
     "\"type\":\"tool_use\",\"name\":\"f\",\"input\":{}}]}]}",
     false, "messages.1.content.0"},
    {"{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"content\":[{"
     "\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"f\",\"input\":[1]}]}]}",
     false, "messages.1.content.0"},
    {"{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"content\":[{"
     "\"type\":\"thinking\",\"signature\":\"s\"}]}]}",
     false, "messages.1.content.0"},
    {"{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"content\":[{"
     "\"type\":\"server_tool_use\",\"id\":\"s\",\"name\":\"web_search\",\"input\":{}}]}]}",
     false, "messages.1.content.0"},
    {"{\"max_tokens\":5,\"messages\":[{\"role\":\"system\",\"content\":\"sys\"},{\"role\":\"user\",\"content\":\"q\"}]"
     "}",
     true, ""},
    {"{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"t\","
     "\"signature\":\"s\"}]}]}",
     false, "messages"},
};

static void test_fields(void **state)
{
    (void)state;
    // The message names the field, Anthropic-style (the error shape has no param).
    run_field_cases(field_cases, sizeof(field_cases) / sizeof(field_cases[0]), MSG, read_message, true);
}

static void test_values(void **state)
{
    (void)state;
    rp_api_req q;
    rp_api_error e;
    assert_true(read_body("{" MSG ",\"model\":\"claude-3-5-haiku\",\"temperature\":0.25,\"top_k\":7,\"top_p\":0.5,"
                          "\"stop_sequences\":[\"END\",\"\",\"\\n\\n\"],\"stream\":true,\"thinking\":{\"type\":"
                          "\"disabled\"},\"output_config\":{\"format\":{\"type\":\"json_schema\",\"schema\":{}}}}",
                          false, &q, &e));
    assert_int_equal(q.max_tokens, 64);
    assert_string_equal(q.model, "claude-3-5-haiku");
    assert_true(q.sample.temperature == 0.25f);
    assert_int_equal(q.sample.top_k, 7);
    assert_true(q.sample.top_p == 0.5f);
    assert_int_equal(q.n_stop, 2); // the empty one is skipped
    assert_string_equal(q.stop[0], "END");
    assert_string_equal(q.stop[1], "\n\n");
    assert_true(q.stream && q.json_mode);
    assert_true(json_is_false(json_object_get(q.template_kwargs, "enable_thinking")));
    assert_null(q.tools);
    assert_int_equal(q.logprobs, -1);
    rp_api_req_deinit(&q);

    // Defaults: Anthropic's temperature 1, no stop, not streaming, no thinking unless asked for.
    assert_true(read_body("{" MSG "}", false, &q, &e));
    assert_true(q.sample.temperature == 1.0f);
    assert_int_equal(q.sample.top_k, 0);
    assert_false(q.stream || q.json_mode);
    assert_true(json_is_false(json_object_get(q.template_kwargs, "enable_thinking")));
    assert_null(q.model);
    assert_int_equal(q.tool_choice, RP_TOOL_CHOICE_AUTO);
    assert_true(q.parallel_tool_calls);
    rp_api_req_deinit(&q);

    // top_p 0: greedy. thinking enabled/adaptive: on.
    assert_true(read_body("{" MSG ",\"top_p\":0,\"thinking\":{\"type\":\"adaptive\"}}", false, &q, &e));
    assert_true(q.sample.temperature == 0.0f);
    assert_true(json_is_true(json_object_get(q.template_kwargs, "enable_thinking")));
    rp_api_req_deinit(&q);
    assert_true(read_body("{" MSG ",\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":1024}}", false, &q, &e));
    assert_true(json_is_true(json_object_get(q.template_kwargs, "enable_thinking")));
    rp_api_req_deinit(&q);

    // tool_choice.
    static const struct {
        const char *tc;
        rp_tool_choice want;
        bool parallel;
    } tcs[] = {
        {"{\"type\":\"auto\"}", RP_TOOL_CHOICE_AUTO, true},
        {"{\"type\":\"any\",\"disable_parallel_tool_use\":true}", RP_TOOL_CHOICE_REQUIRED, false},
        {"{\"type\":\"tool\",\"name\":\"f\"}", RP_TOOL_CHOICE_NAMED, true},
        {"{\"type\":\"none\"}", RP_TOOL_CHOICE_NONE, true},
    };
    for (size_t i = 0; i < sizeof(tcs) / sizeof(tcs[0]); i++) {
        char body[512];
        snprintf(body, sizeof(body), "{" MSG ",\"tools\":[" TOOL "],\"tool_choice\":%s}", tcs[i].tc);
        assert_true(read_body(body, false, &q, &e));
        assert_int_equal(q.tool_choice, tcs[i].want);
        assert_int_equal(q.parallel_tool_calls, tcs[i].parallel);
        if (tcs[i].want == RP_TOOL_CHOICE_NAMED)
            assert_string_equal(q.tool_name, "f");
        rp_api_req_deinit(&q);
    }

    // count_tokens needs no max_tokens and ignores the sampling fields.
    assert_true(read_body("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"temperature\":9}",
                          true, &q, &e));
    assert_int_equal(json_array_size(q.messages), 1);
    rp_api_req_deinit(&q);
    assert_false(read_body("{\"model\":\"m\"}", true, &q, &e));
    assert_string_equal(e.param, "messages");
    rp_api_req_deinit(&q);
}

static void test_conversion(void **state)
{
    (void)state;
    // A Claude Code-like agent turn: system blocks, tool use with thinking, results (one an error), then text.
    expect_conversion(
        read_message,
        "{\"max_tokens\":100,\"system\":[{\"type\":\"text\",\"text\":\"You are an agent.\"},{\"type\":\"text\","
        "\"text\":\"Be brief.\",\"cache_control\":{\"type\":\"ephemeral\"}}],"
        "\"tools\":[{\"name\":\"read\",\"description\":\"Read a file\",\"input_schema\":{\"type\":\"object\","
        "\"properties\":{\"path\":{\"type\":\"string\"}}}},{\"type\":\"web_search_20250305\",\"name\":\"web_search\","
        "\"max_uses\":3},{\"type\":\"custom\",\"name\":\"ls\",\"input_schema\":{}}],"
        "\"messages\":["
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"<reminder>x</reminder>\"},{\"type\":\"text\","
        "\"text\":\"Read a.py and b.py\",\"cache_control\":{\"type\":\"ephemeral\"}}]},"
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"Two reads.\",\"signature\":"
        "\"sig\"},{\"type\":\"redacted_thinking\",\"data\":\"xx\"},{\"type\":\"text\",\"text\":\"Reading.\"},{\"type\":"
        "\"tool_use\",\"id\":\"toolu_1\",\"name\":\"read\",\"input\":{\"path\":\"a.py\"}},{\"type\":\"tool_use\","
        "\"id\":"
        "\"toolu_2\",\"name\":\"read\",\"input\":{\"path\":\"b.py\"}}]},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_1\",\"content\":\"print(1)"
        "\"},"
        "{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_2\",\"is_error\":true,\"content\":[{\"type\":\"text\","
        "\"text\":\"no such\"},{\"type\":\"text\",\"text\":\"file\"}]},{\"type\":\"text\",\"text\":\"Go on.\"}]},"
        "{\"role\":\"assistant\",\"content\":\"Done.\"},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_3\"},{\"type\":\"document\","
        "\"source\":{\"type\":\"text\",\"media_type\":\"text/plain\",\"data\":\"DOC\"}},{\"type\":\"text\",\"text\":"
        "\"Q\"}]}]}",
        "[{\"role\":\"system\",\"content\":\"You are an agent.\\nBe brief.\"},"
        "{\"role\":\"user\",\"content\":\"<reminder>x</reminder>\\nRead a.py and b.py\"},"
        "{\"role\":\"assistant\",\"content\":\"Reading.\",\"reasoning_content\":\"Two reads.\",\"tool_calls\":["
        "{\"id\":\"toolu_1\",\"type\":\"function\",\"function\":{\"name\":\"read\",\"arguments\":{\"path\":\"a.py\"}}},"
        "{\"id\":\"toolu_2\",\"type\":\"function\",\"function\":{\"name\":\"read\",\"arguments\":{\"path\":\"b.py\"}}}]"
        "},"
        "{\"role\":\"tool\",\"tool_call_id\":\"toolu_1\",\"content\":\"print(1)\"},"
        "{\"role\":\"tool\",\"tool_call_id\":\"toolu_2\",\"content\":\"Error: no such\\nfile\"},"
        "{\"role\":\"user\",\"content\":\"Go on.\"},"
        "{\"role\":\"assistant\",\"content\":\"Done.\"},"
        "{\"role\":\"tool\",\"tool_call_id\":\"toolu_3\",\"content\":\"\"},"
        "{\"role\":\"user\",\"content\":\"DOC\\nQ\"}]",
        "[{\"type\":\"function\",\"function\":{\"name\":\"read\",\"description\":\"Read a file\",\"parameters\":{"
        "\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"}}}}},"
        "{\"type\":\"function\",\"function\":{\"name\":\"ls\",\"parameters\":{}}}]");

    // Text before a tool result stays before it; a system message in the list; an empty system is dropped;
    // a tool_use without input gets {}; a final assistant message without text is dropped.
    expect_conversion(read_message,
                      "{\"max_tokens\":1,\"system\":\"\",\"messages\":[{\"role\":\"system\",\"content\":[{\"type\":"
                      "\"text\",\"text\":\"S\"}]},{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\","
                      "\"content\":[{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"f\"}]},{\"role\":\"user\","
                      "\"content\":[{\"type\":\"text\",\"text\":\"first\"},{\"type\":\"tool_result\",\"tool_use_id\":"
                      "\"t\",\"content\":\"r\"}]},{\"role\":\"assistant\",\"content\":[]}]}",
                      "[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"q\"},"
                      "{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"id\":\"t\",\"type\":\"function\","
                      "\"function\":{\"name\":\"f\",\"arguments\":{}}}]},"
                      "{\"role\":\"user\",\"content\":\"first\"},"
                      "{\"role\":\"tool\",\"tool_call_id\":\"t\",\"content\":\"r\"}]",
                      NULL);

    // Only Anthropic-defined tools: no tools at all.
    expect_conversion(read_message,
                      "{\"max_tokens\":1,\"tools\":[{\"type\":\"text_editor_20250728\",\"name\":\"str_replace_based_"
                      "edit_tool\"}],\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}",
                      "[{\"role\":\"user\",\"content\":\"q\"}]", NULL);
}

/* ---- prefill and the rendered prompt ---------------------------------------- */

static bool ends_with(const char *s, size_t n, const char *suffix)
{
    size_t k = strlen(suffix);
    return n >= k && memcmp(s + n - k, suffix, k) == 0;
}

static void test_prefill(void **state)
{
    (void)state;
    rp_api_req q;
    rp_api_error e;
    rp_prompt pr;
    // A final assistant message: the prompt ends with its text, no new turn is opened.
    assert_true(read_body("{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"2+2?\"},{\"role\":"
                          "\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"The answer is\"}]}]}",
                          false, &q, &e));
    assert_true(q.continue_final);
    assert_true(rp_prompt_build(&srv, &q, &pr, &e));
    if (!ends_with(pr.text, pr.text_len, "<|im_start|>assistant\n<think>\n\n</think>\n\nThe answer is"))
        fail_msg("prompt: %s", pr.text);
    assert_int_equal(strlen(pr.text), pr.text_len);
    rp_prompt_deinit(&pr);
    rp_api_req_deinit(&q);
    // Without one, the generation prompt (thinking off: the template closes an empty think block).
    assert_true(read_body("{" MSG "}", false, &q, &e));
    assert_false(q.continue_final);
    assert_true(rp_prompt_build(&srv, &q, &pr, &e));
    assert_true(ends_with(pr.text, pr.text_len, "<|im_start|>assistant\n<think>\n\n</think>\n\n"));
    rp_prompt_deinit(&pr);
    rp_api_req_deinit(&q);
    // A final assistant turn with tool calls is history, not a prefill.
    assert_true(read_body("{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"q\"},{\"role\":"
                          "\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"f\","
                          "\"input\":{}}]}]}",
                          false, &q, &e));
    assert_false(q.continue_final);
    rp_api_req_deinit(&q);
    // Trailing whitespace is refused, as Anthropic does.
    assert_false(read_body("{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"q\"},{\"role\":"
                           "\"assistant\",\"content\":\"Sure \"}]}",
                           false, &q, &e));
    assert_int_equal(e.status, 400);
    assert_string_equal(e.param, "messages.1.content");
    rp_api_req_deinit(&q);
    // A text the template does not show cannot be continued (this template skips unknown roles).
    rp_api_req_init(&q);
    q.messages = json_loads("[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"narrator\",\"content\":"
                            "\"zzz-absent\"}]",
                            0, NULL);
    q.continue_final = true;
    assert_false(rp_prompt_build(&srv, &q, &pr, &e));
    assert_int_equal(e.status, 400);
    rp_api_req_deinit(&q);
}

// count_tokens answers {"input_tokens": N} with N the rendered prompt's tokens.
static void test_count_tokens(void **state)
{
    (void)state;
    const char *body = "{\"model\":\"x\",\"system\":\"be brief\",\"messages\":[{\"role\":\"user\",\"content\":"
                       "\"hello there\"}],\"tools\":[" TOOL "]}";
    rp_http_req r;
    memset(&r, 0, sizeof(r));
    r.srv = &srv;
    r.body = body;
    r.body_len = strlen(body);
    rp_reply out;
    memset(&out, 0, sizeof(out));
    rp_buf_init(&out.body);
    rp_anthropic_count_tokens(&r, &out);
    assert_int_equal(out.status, 200);
    json_t *v = json_loads(out.body.data, 0, NULL);
    assert_non_null(v);
    assert_int_equal(json_object_size(v), 1);
    rp_api_req q;
    rp_api_error e;
    rp_prompt pr;
    assert_true(read_body(body, true, &q, &e));
    assert_true(rp_prompt_build(&srv, &q, &pr, &e));
    assert_int_equal(json_integer_value(json_object_get(v, "input_tokens")), pr.n);
    assert_non_null(strstr(pr.text, "\"name\": \"f\"")); // the tools are rendered (and counted)
    rp_prompt_deinit(&pr);
    rp_api_req_deinit(&q);
    json_decref(v);
    // Errors: not JSON, no messages.
    r.body = "{";
    r.body_len = 1;
    rp_anthropic_count_tokens(&r, &out);
    assert_int_equal(out.status, 400);
    r.body = "{\"model\":\"x\"}";
    r.body_len = strlen(r.body);
    rp_anthropic_count_tokens(&r, &out);
    assert_int_equal(out.status, 400);
    rp_buf_deinit(&out.body);
}

/* ---- the type-confusion sweep ------------------------------------------------ */

static const char *full_body =
    "{\"model\":\"claude-sonnet-4-5\",\"max_tokens\":512,\"temperature\":0.7,\"top_p\":0.9,\"top_k\":40,"
    "\"stop_sequences\":[\"END\"],\"stream\":true,\"metadata\":{\"user_id\":\"u\"},"
    "\"system\":[{\"type\":\"text\",\"text\":\"sys\",\"cache_control\":{\"type\":\"ephemeral\"}}],"
    "\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":1024},"
    "\"output_config\":{\"format\":{\"type\":\"json_schema\",\"schema\":{\"type\":\"object\"}}},"
    "\"tools\":[{\"name\":\"f\",\"description\":\"d\",\"input_schema\":{\"type\":\"object\",\"properties\":{\"a\":{"
    "\"type\":\"string\"}}}}],"
    "\"tool_choice\":{\"type\":\"tool\",\"name\":\"f\",\"disable_parallel_tool_use\":true},"
    "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"q\"},{\"type\":\"document\","
    "\"source\":{\"type\":\"text\",\"data\":\"d\"}}]},"
    "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"t\",\"signature\":\"s\"},{\"type\":"
    "\"text\",\"text\":\"x\"},{\"type\":\"tool_use\",\"id\":\"i\",\"name\":\"f\",\"input\":{\"a\":\"b\"}}]},"
    "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"i\",\"is_error\":false,\"content\":"
    "[{\"type\":\"text\",\"text\":\"r\"}]}]}]}";

static void test_sweep(void **state)
{
    (void)state;
    run_sweep(full_body, read_message);
    run_sweep(full_body, read_count);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fields), cmocka_unit_test(test_values),  cmocka_unit_test(test_conversion),
        cmocka_unit_test(test_sweep),  cmocka_unit_test(test_prefill), cmocka_unit_test(test_count_tokens),
    };
    return cmocka_run_group_tests(tests, api_setup, api_teardown);
}
