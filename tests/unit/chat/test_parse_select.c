/*
 * test_parse_select.c - choosing the output formats from a model's chat
 * template and architecture (the shared conformance templates, the published
 * ones in tests/data/chat/templates and the fixture models' own), the names of
 * the --tool-parser / --reasoning-parser flags, and recognizing a prompt that
 * opens the think block (Qwen3.5/3.6's rendered prompts among them).
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

// Qwen3.5 and 3.6 write Qwen3-Coder's XML calls and think; Qwen3-Coder itself does not think.
static void test_own_templates(void **state)
{
    static const expect ex[] = {
        {"Qwen-Qwen3.5-27B.jinja", RP_TOOL_FORMAT_QWEN3_CODER, RP_REASONING_FORMAT_THINK},
        {"Qwen-Qwen3.6-35B-A3B.jinja", RP_TOOL_FORMAT_QWEN3_CODER, RP_REASONING_FORMAT_THINK},
        {"Qwen-Qwen3-Coder.jinja", RP_TOOL_FORMAT_QWEN3_CODER, RP_REASONING_FORMAT_NONE},
    };
    for (size_t i = 0; i < sizeof(ex) / sizeof(ex[0]); i++) {
        char rel[256];
        snprintf(rel, sizeof(rel), "tests/data/chat/templates/%s", ex[i].file);
        char *text;
        size_t len;
        assert_int_equal(rp_file_read(rp_test_source(rel), &text, &len), RP_OK);
        rp_tool_format t;
        rp_reasoning_format r;
        rp_parser_select(text, NULL, &t, &r);
        if (t != ex[i].tools || r != ex[i].reasoning)
            fail_msg("%s: got %s/%s", ex[i].file, rp_tool_format_name(t), rp_reasoning_format_name(r));
        // The architecture does not override a template that shows its format.
        rp_parser_select(text, "qwen3_moe", &t, &r);
        assert_int_equal(t, ex[i].tools);
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
        // Qwen3.5/3.6 (config.json model_type, GGUF general.architecture) write XML calls; Qwen3-Next is told by
        // its template only
        {NULL, "qwen3_5", RP_TOOL_FORMAT_QWEN3_CODER, RP_REASONING_FORMAT_THINK},
        {NULL, "qwen3_5_moe", RP_TOOL_FORMAT_QWEN3_CODER, RP_REASONING_FORMAT_THINK},
        {"<|im_start|>", "qwen35", RP_TOOL_FORMAT_QWEN3_CODER, RP_REASONING_FORMAT_THINK},
        {"<|im_start|>", "qwen35moe", RP_TOOL_FORMAT_QWEN3_CODER, RP_REASONING_FORMAT_THINK},
        {NULL, "qwen3_next", RP_TOOL_FORMAT_HERMES, RP_REASONING_FORMAT_THINK},
        {NULL, "qwen3_moe", RP_TOOL_FORMAT_HERMES, RP_REASONING_FORMAT_THINK},
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

// Qwen3.5/3.6's generation prompt opens the think block unless enable_thinking is false (their rendered
// prompts, as the conformance references hold them).
static void test_qwen35_prompts_open_think(void **state)
{
    static const char *const files[] = {"Qwen-Qwen3.5-27B", "Qwen-Qwen3.6-35B-A3B"};
    static const struct {
        const char *conversation;
        bool open;
    } want[] = {
        {"user_only", true},           {"thinking_on", true},     {"thinking_off", false},
        {"tools_no_system", true},     {"tool_call_round", true}, {"reasoning_history", true},
        {"system_user_no_gen", false},
    };
    for (size_t f = 0; f < 2; f++) {
        char rel[256];
        snprintf(rel, sizeof(rel), "tests/data/chat/expected/%s.json", files[f]);
        json_error_t err;
        json_t *exp = json_load_file(rp_test_source(rel), 0, &err);
        assert_non_null(exp);
        for (size_t w = 0; w < sizeof(want) / sizeof(want[0]); w++) {
            const json_t *out = NULL;
            size_t i;
            const json_t *c;
            json_array_foreach(json_object_get(exp, "cases"), i, c)
            {
                if (strcmp(json_string_value(json_object_get(c, "conversation")), want[w].conversation) == 0)
                    out = json_object_get(c, "output");
            }
            assert_non_null(out);
            if (rp_parse_prompt_opens_think(json_string_value(out), json_string_length(out)) != want[w].open)
                fail_msg("%s / %s: think open should be %d", files[f], want[w].conversation, want[w].open);
        }
        json_decref(exp);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conformance_templates),
        cmocka_unit_test(test_snippets_and_arch),
        cmocka_unit_test(test_fixture_models),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_prompt_opens_think),
        cmocka_unit_test(test_own_templates),
        cmocka_unit_test(test_qwen35_prompts_open_think),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
