/*
 * test_cli_template.c - `rapid template` end to end: the prompt printed exactly
 * (the recorded transformers reference, no newline added), --tokens equal to the
 * library's encoding, --kwargs as template variables, and exit codes.
 */
#include "chat_test_util.h"

#include "tokenizer/tokenizer.h"

#include <sys/wait.h>
#include <unistd.h>

static char out[1 << 16], err[1 << 16];

// Runs `rapid ARGS`; stdout into out, stderr into err; returns the exit status.
static int run_rapid(const char *args)
{
    const char *bin = getenv("RP_BINARY");
    assert_non_null(bin);
    char errfile[64], cmd[8192];
    snprintf(errfile, sizeof(errfile), "/tmp/rapid-test-tmpl-%d.err", (int)getpid());
    snprintf(cmd, sizeof(cmd), "'%s' %s 2>%s", bin, args, errfile);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, sizeof(out) - 1, p);
    out[n] = 0;
    int status = pclose(p);
    FILE *e = fopen(errfile, "r");
    n = e ? fread(err, 1, sizeof(err) - 1, e) : 0;
    err[n] = 0;
    if (e)
        fclose(e);
    unlink(errfile);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static char msgs_path[64], tmpl_path[64];

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

// Writes conversation `name`'s messages to msgs_path; returns its reference output for the qwen3 template.
static const char *prepare(json_t *convs, json_t *exp, const char *name)
{
    const json_t *conv = chat_find_conversation(convs, name);
    char *s = json_dumps(json_object_get(conv, "messages"), 0);
    write_file(msgs_path, s);
    free(s);
    size_t i;
    const json_t *c;
    json_array_foreach(json_object_get(exp, "cases"), i, c)
    {
        if (!strcmp(json_string_value(json_object_get(c, "conversation")), name))
            return json_string_value(json_object_get(c, "output"));
    }
    return NULL;
}

static void test_render_model(void **state)
{
    json_t *convs = chat_load_json(rp_test_source("tests/data/chat/conversations.json"));
    json_t *exp = chat_load_json(rp_test_source("tests/data/chat/expected/qwen3-fixture.json"));
    char model[4096], args[8192];
    snprintf(model, sizeof(model), "%s", rp_test_source("tests/data/models/qwen3"));

    const char *want = prepare(convs, exp, "multi_turn");
    assert_non_null(want);
    snprintf(args, sizeof(args), "template '%s' --messages %s", model, msgs_path);
    assert_int_equal(run_rapid(args), 0);
    assert_string_equal(out, want); // exactly: no newline added

    want = prepare(convs, exp, "system_user_no_gen");
    snprintf(args, sizeof(args), "template '%s' --messages %s --no-generation-prompt", model, msgs_path);
    assert_int_equal(run_rapid(args), 0);
    assert_string_equal(out, want);

    // --tokens: the prompt's ids without added special tokens
    snprintf(args, sizeof(args), "template '%s' --messages %s --no-generation-prompt --tokens", model, msgs_path);
    assert_int_equal(run_rapid(args), 0);
    rp_tokenizer *tok;
    assert_int_equal(rp_tok_load_file(model, &tok), RP_OK);
    int32_t *ids;
    size_t n;
    assert_int_equal(rp_tok_encode(tok, want, strlen(want), false, &ids, &n), RP_OK);
    char line[8192];
    size_t o = 0;
    for (size_t i = 0; i < n; i++)
        o += (size_t)snprintf(line + o, sizeof(line) - o, i ? " %d" : "%d", (int)ids[i]);
    snprintf(line + o, sizeof(line) - o, "\n");
    assert_string_equal(out, line);
    rp_free(ids);
    rp_tok_destroy(tok);

    // a template error: the reference raises for content None; exit 1 with the message
    prepare(convs, exp, "tool_call_round");
    snprintf(args, sizeof(args), "template '%s' --messages %s", model, msgs_path);
    assert_int_equal(run_rapid(args), 1);
    assert_non_null(strstr(err, "rapid: template error: "));
    assert_string_equal(out, "");
    json_decref(exp);
    json_decref(convs);
}

static void test_template_file_and_kwargs(void **state)
{
    write_file(msgs_path, "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"tools\": [{\"type\": \"function\"}]}");
    write_file(tmpl_path, "{{ bos_token }}|{{ eos_token is defined }}|{{ enable_thinking }}|{{ messages[0].content }}"
                          "|{{ tools | length }}|{{ add_generation_prompt }}\n");
    char args[8192];
    snprintf(args, sizeof(args), "template --template %s --messages %s --kwargs '{\"bos_token\": \"<B>\", "
                                 "\"enable_thinking\": false}'",
             tmpl_path, msgs_path);
    assert_int_equal(run_rapid(args), 0);
    assert_string_equal(out, "<B>|False|False|hi|1|True"); // the source's trailing newline is dropped, as jinja2 does
    write_file(tmpl_path, "{% if messages | length > 0 %}{{ raise_exception('Only one message, please') }}{% endif %}");
    snprintf(args, sizeof(args), "template --template %s --messages %s", tmpl_path, msgs_path);
    assert_int_equal(run_rapid(args), 1);
    assert_string_equal(err, "rapid: template error: Only one message, please\n");
    write_file(tmpl_path, "{% if %}");
    assert_int_equal(run_rapid(args), 1);
    assert_non_null(strstr(err, "template error: ")); // a file that does not parse is named
    assert_non_null(strstr(err, tmpl_path));
}

static void test_usage(void **state)
{
    assert_int_equal(run_rapid("template"), 2);
    assert_non_null(strstr(err, "usage: rapid template"));
    char args[8192];
    snprintf(args, sizeof(args), "template --template %s --messages %s --tokens", tmpl_path, msgs_path);
    assert_int_equal(run_rapid(args), 2);
    snprintf(args, sizeof(args), "template --template %s", tmpl_path);
    assert_int_equal(run_rapid(args), 2);
    snprintf(args, sizeof(args), "template --template %s --messages %s --kwargs '[1]'", tmpl_path, msgs_path);
    assert_int_equal(run_rapid(args), 2);
    snprintf(args, sizeof(args), "template --template %s --messages %s --bogus", tmpl_path, msgs_path);
    assert_int_equal(run_rapid(args), 2);
    assert_int_equal(run_rapid("template --template /nonexistent.jinja --messages /nonexistent.json"), 1);
    assert_int_equal(run_rapid("template --help"), 0);
    assert_non_null(strstr(out, "--kwargs"));
    assert_int_equal(run_rapid("--help"), 0);
    assert_non_null(strstr(out, "template MODEL"));
}

static int setup(void **state)
{
    snprintf(msgs_path, sizeof(msgs_path), "/tmp/rapid-test-tmpl-%d.json", (int)getpid());
    snprintf(tmpl_path, sizeof(tmpl_path), "/tmp/rapid-test-tmpl-%d.jinja", (int)getpid());
    write_file(tmpl_path, "x");
    write_file(msgs_path, "[]");
    return 0;
}

static int teardown(void **state)
{
    unlink(msgs_path);
    unlink(tmpl_path);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_render_model),
        cmocka_unit_test(test_template_file_and_kwargs),
        cmocka_unit_test(test_usage),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
