/*
 * test_parse_select.c - choosing the output formats from a model's chat
 * template and architecture (the shared conformance templates and the fixture
 * models' own), the names of the --tool-parser / --reasoning-parser flags, and
 * recognizing a prompt that opens the think block.
 */
#include "test_util.h"

#include "chat/chat.h"

typedef struct expect {
    const char *file;
    rp_tool_format tools;
    rp_reasoning_format reasoning;
} expect;

static void test_conformance_templates(void **state)
{
    RP_TEST_NEED_CONFORMANCE(dir);
    static const expect ex[] = {
        {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", RP_TOOL_FORMAT_HERMES, RP_REASONING_FORMAT_NONE},
        {"Qwen-Qwen2.5-7B-Instruct.jinja", RP_TOOL_FORMAT_HERMES, RP_REASONING_FORMAT_NONE},
        {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", RP_TOOL_FORMAT_DEEPSEEK, RP_REASONING_FORMAT_THINK},
        {"google-gemma-2-2b-it.jinja", RP_TOOL_FORMAT_NONE, RP_REASONING_FORMAT_NONE},
        {"meta-llama-Llama-3.1-8B-Instruct.jinja", RP_TOOL_FORMAT_LLAMA3, RP_REASONING_FORMAT_NONE},
        {"microsoft-Phi-3.5-mini-instruct.jinja", RP_TOOL_FORMAT_NONE, RP_REASONING_FORMAT_NONE},
        {"mistralai-Mistral-Nemo-Instruct-2407.jinja", RP_TOOL_FORMAT_MISTRAL, RP_REASONING_FORMAT_NONE},
    };
    for (size_t i = 0; i < sizeof(ex) / sizeof(ex[0]); i++) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/chat-templates/%s", dir, ex[i].file);
        char *text;
        size_t len;
        assert_int_equal(rp_file_read(path, &text, &len), RP_OK);
        rp_tool_format t;
        rp_reasoning_format r;
        rp_parser_select(text, NULL, &t, &r);
        if (t != ex[i].tools || r != ex[i].reasoning)
            fail_msg("%s: got %s/%s, want %s/%s", ex[i].file, rp_tool_format_name(t), rp_reasoning_format_name(r),
                     rp_tool_format_name(ex[i].tools), rp_reasoning_format_name(ex[i].reasoning));
        rp_free(text);
    }
}

static void test_snippets_and_arch(void **state)
{
    static const struct {
        const char *tmpl, *arch;
        rp_tool_format tools;
        rp_reasoning_format reasoning;
    } ex[] = {
        // Qwen3: <tool_call> and <think>
        {"{{- '<tool_call>\\n' }}{%- if enable_thinking %}<think>{% endif %}", "qwen3", RP_TOOL_FORMAT_HERMES,
         RP_REASONING_FORMAT_THINK},
        // Qwen3-Coder
        {"<tool_call>\n<function={{ name }}>\n<parameter={{ k }}>", NULL, RP_TOOL_FORMAT_QWEN3_CODER,
         RP_REASONING_FORMAT_NONE},
        // Llama 3.2 without python_tag but the ipython role
        {"<|start_header_id|>ipython<|end_header_id|>", "llama", RP_TOOL_FORMAT_LLAMA3, RP_REASONING_FORMAT_NONE},
        {"[INST]{{ m }}[/INST][TOOL_CALLS]", NULL, RP_TOOL_FORMAT_MISTRAL, RP_REASONING_FORMAT_NONE},
        {"<｜tool▁calls▁begin｜>", "deepseek2", RP_TOOL_FORMAT_DEEPSEEK, RP_REASONING_FORMAT_NONE},
        // no telling template: the architecture
        {"{% for m in messages %}<|im_start|>{% endfor %}", "qwen2", RP_TOOL_FORMAT_HERMES, RP_REASONING_FORMAT_NONE},
        {"{% for m in messages %}<|im_start|>{% endfor %}", "qwen3", RP_TOOL_FORMAT_HERMES, RP_REASONING_FORMAT_THINK},
        {"<|start_header_id|>", "llama", RP_TOOL_FORMAT_LLAMA3, RP_REASONING_FORMAT_NONE},
        {"<s>[INST]", "llama", RP_TOOL_FORMAT_NONE, RP_REASONING_FORMAT_NONE},
        {NULL, "mistral", RP_TOOL_FORMAT_MISTRAL, RP_REASONING_FORMAT_NONE},
        {NULL, NULL, RP_TOOL_FORMAT_NONE, RP_REASONING_FORMAT_NONE},
        {"", "gemma2", RP_TOOL_FORMAT_NONE, RP_REASONING_FORMAT_NONE},
    };
    for (size_t i = 0; i < sizeof(ex) / sizeof(ex[0]); i++) {
        rp_tool_format t;
        rp_reasoning_format r;
        rp_parser_select(ex[i].tmpl, ex[i].arch, &t, &r);
        if (t != ex[i].tools || r != ex[i].reasoning)
            fail_msg("case %zu: got %s/%s", i, rp_tool_format_name(t), rp_reasoning_format_name(r));
    }
}

// The fixture models' own templates (plain ChatML, Qwen architectures).
static void test_fixture_models(void **state)
{
    static const char *const models[] = {"qwen2", "qwen3", "qwen3-mtp"};
    for (size_t i = 0; i < 3; i++) {
        char rel[256];
        snprintf(rel, sizeof(rel), "tests/data/models/%s/tokenizer_config.json", models[i]);
        char *text;
        size_t len;
        assert_int_equal(rp_file_read(rp_test_source(rel), &text, &len), RP_OK);
        rp_tool_format t;
        rp_reasoning_format r;
        rp_parser_select(text, models[i][4] == '3' ? "qwen3" : "qwen2", &t, &r);
        assert_int_equal(t, RP_TOOL_FORMAT_HERMES);
        assert_int_equal(r, models[i][4] == '3' ? RP_REASONING_FORMAT_THINK : RP_REASONING_FORMAT_NONE);
        rp_free(text);
    }
}

static void test_names(void **state)
{
    for (int f = 0; f < RP_TOOL_FORMAT_COUNT; f++) {
        rp_tool_format g;
        assert_int_equal(rp_tool_format_from_name(rp_tool_format_name((rp_tool_format)f), &g), RP_OK);
        assert_int_equal(g, f);
    }
    for (int f = 0; f < RP_REASONING_FORMAT_COUNT; f++) {
        rp_reasoning_format g;
        assert_int_equal(rp_reasoning_format_from_name(rp_reasoning_format_name((rp_reasoning_format)f), &g), RP_OK);
        assert_int_equal(g, f);
    }
    rp_tool_format t;
    assert_int_equal(rp_tool_format_from_name("QWEN3", &t), RP_OK);
    assert_int_equal(t, RP_TOOL_FORMAT_HERMES);
    assert_int_equal(rp_tool_format_from_name("deepseek_r1", &t), RP_OK);
    assert_int_equal(t, RP_TOOL_FORMAT_DEEPSEEK);
    assert_int_equal(rp_tool_format_from_name("pythonic", &t), RP_ERR_INVALID);
    assert_non_null(strstr(rp_error_message(), "qwen3_coder"));
    assert_int_equal(rp_tool_format_from_name(NULL, &t), RP_ERR_INVALID);
    rp_reasoning_format r;
    assert_int_equal(rp_reasoning_format_from_name("deepseek_r1", &r), RP_OK);
    assert_int_equal(r, RP_REASONING_FORMAT_THINK);
    assert_int_equal(rp_reasoning_format_from_name("gpt_oss", &r), RP_ERR_INVALID);
    assert_string_equal(rp_tool_format_name((rp_tool_format)99), "?");
}

static void test_prompt_opens_think(void **state)
{
    const char *a = "<｜User｜>hi<｜Assistant｜><think>\n";
    assert_true(rp_parse_prompt_opens_think(a, strlen(a)));
    const char *b = "<|im_start|>assistant\n<think>\n\n</think>\n\n";
    assert_false(rp_parse_prompt_opens_think(b, strlen(b)));
    const char *c = "<|im_start|>assistant\n";
    assert_false(rp_parse_prompt_opens_think(c, strlen(c)));
    assert_true(rp_parse_prompt_opens_think("<think>", 7));
    assert_false(rp_parse_prompt_opens_think("", 0));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conformance_templates), cmocka_unit_test(test_snippets_and_arch),
        cmocka_unit_test(test_fixture_models),        cmocka_unit_test(test_names),
        cmocka_unit_test(test_prompt_opens_think),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
