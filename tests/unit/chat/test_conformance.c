/*
 * test_conformance.c - chat templates rendered byte for byte as transformers
 * renders them: every template in ../shared/conformance/chat-templates, the
 * published templates kept in tests/data/chat/templates (Qwen3.5, Qwen3.6,
 * Qwen3-Coder) and the qwen3 fixture model's own template, against every conversation of
 * tests/data/chat/conversations.json, the bundled model's (models/rapid-tiny) and
 * the built-in templates of --chat-template (chatml, llama3, mistral).
 * The references (tests/data/chat/expected)
 * were made by tools/fixtures/make_template_refs.py; where the reference raised,
 * Rapid must fail too.
 */
#include "chat_test_util.h"

#include <dirent.h>

// A template shipped in the repository's own tokenizer_config.json.
static void check_own_template(const char *config_rel, const char *expected_rel)
{
    json_t *convs = chat_load_json(rp_test_source("tests/data/chat/conversations.json"));
    json_t *cfg = chat_load_json(rp_test_source(config_rel));
    json_t *exp = chat_load_json(rp_test_source(expected_rel));
    const json_t *src = json_object_get(cfg, "chat_template");
    assert_non_null(src);
    int n = 0;
    int bad = chat_check_expected(json_string_value(src), json_string_length(src), exp, convs, &n);
    print_message("%s: %d of %d cases identical\n", config_rel, n - bad, n);
    assert_int_equal(bad, 0);
    json_decref(exp);
    json_decref(cfg);
    json_decref(convs);
}

static void test_qwen3_fixture(void **state)
{
    check_own_template("tests/data/models/qwen3/tokenizer_config.json", "tests/data/chat/expected/qwen3-fixture.json");
}

static void test_rapid_tiny(void **state)
{
    check_own_template("models/rapid-tiny/tokenizer_config.json", "tests/data/chat/expected/rapid-tiny.json");
}

// The built-ins, as jinja2 renders the same text (make_template_refs.py reads it from the C source), and their
// output parsers as the template text selects them.
static void test_builtin_templates(void **state)
{
    json_t *convs = chat_load_json(rp_test_source("tests/data/chat/conversations.json"));
    static const struct {
        const char *name;
        rp_tool_format tools;
    } want[] = {
        {"chatml", RP_TOOL_FORMAT_HERMES},
        {"llama3", RP_TOOL_FORMAT_LLAMA3},
        {"mistral", RP_TOOL_FORMAT_MISTRAL},
    };
    size_t n_builtins = 0;
    while (rp_chat_builtin_name(n_builtins))
        n_builtins++;
    assert_int_equal(n_builtins, sizeof(want) / sizeof(want[0]));
    assert_ptr_equal(rp_chat_builtin_template(RP_CHAT_DEFAULT_TEMPLATE), rp_chat_builtin_template("chatml"));
    assert_null(rp_chat_builtin_template("nosuch"));
    assert_null(rp_chat_builtin_template(NULL));
    for (size_t i = 0; i < n_builtins; i++) {
        const char *src = rp_chat_builtin_template(want[i].name);
        assert_non_null(src);
        assert_string_equal(rp_chat_builtin_name(i), want[i].name);
        char exp_path[256];
        snprintf(exp_path, sizeof(exp_path), "tests/data/chat/expected/builtin-%s.json", want[i].name);
        json_t *exp = chat_load_json(rp_test_source(exp_path));
        int n = 0;
        int bad = chat_check_expected(src, strlen(src), exp, convs, &n);
        print_message("builtin %s: %d of %d cases identical\n", want[i].name, n - bad, n);
        assert_int_equal(bad, 0);
        assert_int_equal(n, (int)json_array_size(json_object_get(convs, "conversations")));
        json_decref(exp);
        // With no architecture to fall back on, the template text alone picks the tool-call format.
        rp_tool_format tf;
        rp_reasoning_format rf;
        rp_parser_select(src, NULL, &tf, &rf);
        assert_int_equal(tf, want[i].tools);
        assert_int_equal(rf, RP_REASONING_FORMAT_NONE);
    }
    json_decref(convs);
}

// Every .jinja in dir against its recorded reference (tests/data/chat/expected/NAME.json); returns the
// number of templates, asserting that all cases are identical.
static int check_template_dir(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    json_t *convs = chat_load_json(rp_test_source("tests/data/chat/conversations.json"));
    int n_templates = 0, n_cases = 0, bad = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t nl = strlen(e->d_name);
        if (nl < 7 || strcmp(e->d_name + nl - 6, ".jinja") != 0)
            continue;
        char path[8192], exp_path[8192];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        snprintf(exp_path, sizeof(exp_path), "%s", rp_test_source("tests/data/chat/expected/"));
        snprintf(exp_path + strlen(exp_path), sizeof(exp_path) - strlen(exp_path), "%.*s.json", (int)(nl - 6),
                 e->d_name);
        // Every template needs a recorded reference: a new one must not pass unseen.
        json_t *exp = chat_load_json(exp_path);
        char *src;
        size_t len;
        assert_int_equal(rp_file_read(path, &src, &len), RP_OK);
        int n = 0;
        int b = chat_check_expected(src, len, exp, convs, &n);
        print_message("%s: %d of %d cases identical\n", e->d_name, n - b, n);
        assert_int_equal(n, (int)json_array_size(json_object_get(convs, "conversations")));
        bad += b;
        n_cases += n;
        n_templates++;
        rp_free(src);
        json_decref(exp);
    }
    closedir(d);
    json_decref(convs);
    print_message("%s: %d templates, %d cases, %d mismatches\n", dir, n_templates, n_cases, bad);
    assert_true(n_templates > 0);
    assert_int_equal(bad, 0);
    return n_templates;
}

static void test_shared_templates(void **state)
{
    RP_TEST_NEED_CONFORMANCE(conf);
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/chat-templates", conf);
    check_template_dir(dir);
}

// The published templates the project keeps itself (Qwen3.5, Qwen3.6, Qwen3-Coder; provenance in the
// README there).
static void test_own_templates(void **state)
{
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", rp_test_source("tests/data/chat/templates"));
    assert_int_equal(check_template_dir(dir), 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qwen3_fixture),     cmocka_unit_test(test_rapid_tiny),
        cmocka_unit_test(test_builtin_templates), cmocka_unit_test(test_shared_templates),
        cmocka_unit_test(test_own_templates),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
