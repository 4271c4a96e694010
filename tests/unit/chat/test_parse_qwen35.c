/*
 * test_parse_qwen35.c - the output parser against the Qwen3.5, Qwen3.6 and
 * Qwen3-Coder templates themselves (tests/data/chat/templates): an assistant
 * turn with reasoning, text and typed tool calls is rendered by the model's
 * template, its text (less the "<think>\n" the generation prompt already
 * holds) is parsed with the formats the template selects, and must give back
 * the reasoning, the text and the calls with the same argument values - whole,
 * byte by byte and cut anywhere (parse_harness.h). A reply streamed one byte at
 * a time shows when each event comes: a call's name as soon as its
 * <function=NAME> tag closes, a string value while it is written, a typed value
 * at its end tag, nothing of the markup as content.
 */
#include "parse_harness.h"

#include "chat_test_util.h"

// The tools the turn calls (a subset of tests/data/chat/conversations.json's).
static const char tools_json[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"}}}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"list_files\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"path\":{\"type\":\"string\"},\"recursive\":{\"type\":\"boolean\"},\"patterns\":{\"type\":"
    "\"array\"}}}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"run_code\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"code\":{\"type\":\"string\"},\"timeout\":{\"type\":\"number\"},\"env\":{\"type\":\"object\"},"
    "\"retries\":{\"type\":[\"integer\",\"null\"]}}}}}]";

// The calls of the assistant turn, as the client sent them (arguments as objects).
static const char calls_json[] =
    "[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"run_code\",\"arguments\":{"
    "\"code\":\"print(\\\"hi\\\")\\nif a < b: pass  # </param\",\"timeout\":2.5,\"env\":{\"A\":\"1\",\"B\":[1,2]},"
    "\"retries\":3}}},"
    "{\"id\":\"c2\",\"type\":\"function\",\"function\":{\"name\":\"list_files\",\"arguments\":{"
    "\"path\":\"/tmp/Zürich\",\"recursive\":true,\"patterns\":[\"*.md\",\"a b\"]}}},"
    "{\"id\":\"c3\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":{"
    "\"city\":\"Zürich\",\"days\":3}}}]";

#define REASONING "I will run the code, then look."
#define CONTENT "Running it now."

typedef struct qtemplate {
    const char *file;
    bool thinks; // the template renders the turn's reasoning and its generation prompt opens <think>
} qtemplate;

static const qtemplate templates[] = {
    {"Qwen-Qwen3.5-27B.jinja", true},
    {"Qwen-Qwen3.6-35B-A3B.jinja", true},
    {"Qwen-Qwen3-Coder.jinja", false},
};

static rp_chat_template *load_template(const char *file)
{
    char rel[256];
    snprintf(rel, sizeof(rel), "tests/data/chat/templates/%s", file);
    char *src;
    size_t len;
    assert_int_equal(rp_file_read(rp_test_source(rel), &src, &len), RP_OK);
    rp_chat_template *t = NULL;
    assert_int_equal(rp_chat_template_create(src, len, &t), RP_OK);
    rp_free(src);
    return t;
}

// Renders [system, user, assistant(reasoning, content, calls)] without a generation prompt and returns the
// assistant turn's text as the model would have generated it (rp_malloc'd): after "<|im_start|>assistant\n",
// less the "<think>\n" a thinking template's generation prompt holds, up to "<|im_end|>".
static char *render_turn(const rp_chat_template *t, bool thinks, json_t *calls)
{
    json_t *msgs = json_pack("[{s:s,s:s},{s:s,s:s},{s:s,s:s,s:s,s:O}]", "role", "system", "content", "Be brief.",
                             "role", "user", "content", "Run it and look.", "role", "assistant", "content", CONTENT,
                             "reasoning_content", REASONING, "tool_calls", calls);
    json_error_t err;
    json_t *tools = json_loads(tools_json, 0, &err);
    assert_non_null(msgs);
    assert_non_null(tools);
    rp_chat_render_params p = {.messages = msgs, .tools = tools, .add_generation_prompt = false};
    char *out = NULL;
    size_t len = 0;
    assert_int_equal(rp_chat_template_render(t, &p, &out, &len), RP_OK);
    json_decref(msgs);
    json_decref(tools);
    const char *head = "<|im_start|>assistant\n";
    char *a = NULL;
    for (char *q = strstr(out, head); q; q = strstr(q + 1, head))
        a = q;
    assert_non_null(a);
    a += strlen(head);
    if (thinks) {
        assert_memory_equal(a, "<think>\n", 8);
        a += 8;
    }
    char *end = strstr(a, "<|im_end|>");
    assert_non_null(end);
    char *turn = rp_malloc((size_t)(end - a) + 1);
    memcpy(turn, a, (size_t)(end - a));
    turn[end - a] = 0;
    rp_free(out);
    return turn;
}

static rp_parser_config config_for(const char *template_text, bool think_open)
{
    rp_parser_config cfg = {.think_open = think_open, .tools_json = tools_json, .tools_json_len = strlen(tools_json)};
    rp_parser_select(template_text, NULL, &cfg.tools, &cfg.reasoning);
    return cfg;
}

static void check_round_trip(const qtemplate *qt, const char *calls_text)
{
    json_error_t err;
    json_t *calls = json_loads(calls_text, 0, &err);
    assert_non_null(calls);
    rp_chat_template *t = load_template(qt->file);
    char *turn = render_turn(t, qt->thinks, calls);
    rp_chat_template_destroy(t);
    print_message("%s turn:\n%s\n", qt->file, turn);

    char rel[256], *text;
    size_t len;
    snprintf(rel, sizeof(rel), "tests/data/chat/templates/%s", qt->file);
    assert_int_equal(rp_file_read(rp_test_source(rel), &text, &len), RP_OK);
    rp_parser_config cfg = config_for(text, qt->thinks);
    rp_free(text);
    assert_int_equal(cfg.tools, RP_TOOL_FORMAT_QWEN3_CODER);

    rp_parse_result r;
    check_all_splits(&cfg, turn, true, &r);
    assert_string_equal(str_or_empty(r.content), CONTENT);
    assert_string_equal(str_or_empty(r.reasoning), qt->thinks ? REASONING : "");
    assert_int_equal(r.n_calls, json_array_size(calls));
    for (size_t i = 0; i < r.n_calls; i++) {
        const json_t *fn = json_object_get(json_array_get(calls, i), "function");
        assert_string_equal(r.calls[i].name, json_string_value(json_object_get(fn, "name")));
        json_t *args = json_loads(r.calls[i].arguments, 0, &err);
        assert_non_null(args);
        if (!json_equal(args, json_object_get(fn, "arguments")))
            fail_msg("%s: call %zu arguments %s", qt->file, i, r.calls[i].arguments);
        json_decref(args);
    }
    rp_parse_result_deinit(&r);
    rp_free(turn);
    json_decref(calls);
}

static void test_round_trip(void **state)
{
    for (size_t i = 0; i < sizeof(templates) / sizeof(templates[0]); i++)
        check_round_trip(&templates[i], calls_json);
}

// Qwen3.6 shows None as JSON null (Qwen3.5 and Qwen3-Coder as Python's "None", which stays a string).
static void test_round_trip_null(void **state)
{
    check_round_trip(&templates[1], "[{\"type\":\"function\",\"function\":{\"name\":\"run_code\",\"arguments\":{"
                                    "\"code\":\"x\",\"retries\":null,\"env\":{\"k\":null}}}},"
                                    "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":{"
                                    "\"city\":null}}}]");
}

// When each event comes, a reply streamed one byte at a time.
static void test_event_timing(void **state)
{
    static const char reply[] = "Look it up.\n</think>\n\nOn it.\n\n<tool_call>\n<function=run_code>\n"
                                "<parameter=code>\nprint(1)\n</parameter>\n<parameter=timeout>\n2.5\n</parameter>\n"
                                "</function>\n</tool_call>";
    rp_parser_config cfg = {.tools = RP_TOOL_FORMAT_QWEN3_CODER,
                            .reasoning = RP_REASONING_FORMAT_THINK,
                            .think_open = true,
                            .tools_json = tools_json,
                            .tools_json_len = strlen(tools_json)};
    rp_parser *p;
    assert_int_equal(rp_parser_create(&cfg, &p), RP_OK);
    size_t at_start = 0, at_code = 0, at_timeout = 0, at_end = 0, at_reasoning_end = 0;
    char args[256] = "";
    size_t args_len = 0;
    for (size_t i = 0; i < sizeof(reply) - 1; i++) {
        const rp_parse_event *ev;
        size_t n;
        assert_int_equal(rp_parser_push(p, reply + i, 1, &ev, &n), RP_OK);
        size_t pos = i + 1; // bytes pushed so far
        for (size_t k = 0; k < n; k++) {
            switch (ev[k].type) {
            case RP_PARSE_EVENT_REASONING:
                at_reasoning_end = pos;
                break;
            case RP_PARSE_EVENT_CONTENT:
                assert_null(memchr(ev[k].text, '<', ev[k].len));
                break;
            case RP_PARSE_EVENT_TOOL_START:
                assert_string_equal(ev[k].name, "run_code");
                at_start = pos;
                break;
            case RP_PARSE_EVENT_TOOL_ARGS:
                assert_true(args_len + ev[k].len < sizeof(args));
                memcpy(args + args_len, ev[k].text, ev[k].len);
                args[args_len += ev[k].len] = 0;
                if (!at_code && strstr(args, "print(1"))
                    at_code = pos;
                if (!at_timeout && strstr(args, "2.5"))
                    at_timeout = pos;
                break;
            case RP_PARSE_EVENT_TOOL_END:
                at_end = pos;
                break;
            default:
                fail_msg("unexpected event %d", (int)ev[k].type);
            }
        }
    }
    const rp_parse_event *ev;
    size_t n;
    assert_int_equal(rp_parser_finish(p, &ev, &n), RP_OK);
    assert_int_equal(n, 0);
    rp_parser_destroy(p);
    const char *r = reply;
    // the reasoning's last byte ("up.") before the think tag closes
    assert_true(at_reasoning_end <= (size_t)(strstr(r, "</think>") - r));
    // the name as soon as <function=run_code> closes
    assert_int_equal(at_start, (size_t)(strstr(r, "<function=run_code>") - r) + strlen("<function=run_code>"));
    // a string value while it is written (its ')' still to come), a typed one at its end tag
    assert_true(at_code <= (size_t)(strstr(r, "print(1)") - r) + strlen("print(1"));
    assert_int_equal(at_timeout, (size_t)(strstr(r, "2.5\n</parameter>") - r) + strlen("2.5\n</parameter>"));
    assert_int_equal(at_end, sizeof(reply) - 1);
    assert_string_equal(args, "{\"code\":\"print(1)\",\"timeout\":2.5}");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_round_trip_null),
        cmocka_unit_test(test_event_timing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
