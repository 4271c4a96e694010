/*
 * test_jinja.c - the Jinja language of chat templates, and robustness.
 *
 * test_cases: ~190 small templates (tests/data/chat/jinja_cases.json) whose output
 * or failure was recorded from jinja2 in transformers' environment by
 * tools/fixtures/make_jinja_cases.py; Rapid must print the same bytes, or fail
 * where jinja2 failed. They include none/undefined through every filter, the
 * generator filters (true when empty, used up once iterated) and markupsafe's
 * Markup (`x|safe + value` escapes value, as transformers renders it).
 * The rest feed hostile input: unterminated tags, deep nesting, runaway recursion
 * and loops, huge outputs, random bytes, and every prefix of every conformance
 * template. None may crash (the suite also runs under ASan+UBSan); limits must
 * surface as RP_ERR_LIMIT.
 */
#include "chat_test_util.h"

#include <dirent.h>

static json_t *g_vars;

// Renders src with the variables of jinja_cases.json (as kwargs). Returns the status.
static rp_status render_src(const char *src, size_t len, const json_t *vars, char **out, size_t *out_len)
{
    rp_chat_template *t = NULL;
    *out = NULL;
    rp_status st = rp_chat_template_create(src, len, &t);
    if (st)
        return st;
    json_t *kw = json_deep_copy(vars);
    const json_t *messages = json_object_get(kw, "messages");
    json_incref((json_t *)messages);
    json_object_del(kw, "messages");
    rp_chat_render_params p = {.messages = messages, .kwargs = kw};
    st = rp_chat_template_render(t, &p, out, out_len);
    json_decref((json_t *)messages);
    json_decref(kw);
    rp_chat_template_destroy(t);
    return st;
}

static void test_cases(void **state)
{
    json_t *doc = chat_load_json(rp_test_source("tests/data/chat/jinja_cases.json"));
    g_vars = json_object_get(doc, "vars");
    size_t i;
    const json_t *cs;
    int bad = 0, n = 0;
    json_array_foreach(json_object_get(doc, "cases"), i, cs)
    {
        const char *src = json_string_value(json_object_get(cs, "template"));
        const json_t *want = json_object_get(cs, "output");
        char *out = NULL;
        size_t len = 0;
        rp_status st = render_src(src, strlen(src), g_vars, &out, &len);
        n++;
        if (!want) {
            if (!st) {
                print_error("case %zu [%s]: jinja2 failed (%s), Rapid printed [%s]\n", i, src,
                            json_string_value(json_object_get(cs, "error")), out);
                bad++;
            }
        } else if (st) {
            print_error("case %zu [%s]: Rapid failed: %s\n", i, src, rp_error_message());
            bad++;
        } else if (len != json_string_length(want) || memcmp(out, json_string_value(want), len)) {
            print_error("case %zu [%s]:\n  rapid: [%s]\n  want:  [%s]\n", i, src, out, json_string_value(want));
            bad++;
        }
        rp_free(out);
    }
    print_message("%d of %d jinja2 cases identical\n", n - bad, n);
    json_decref(doc);
    assert_int_equal(bad, 0);
}

static rp_status render_plain(const char *src, char **out)
{
    size_t len;
    json_t *empty = json_object();
    rp_status st = render_src(src, strlen(src), empty, out, &len);
    json_decref(empty);
    return st;
}

static rp_status expect_status(const char *src, rp_status want)
{
    char *out = NULL;
    json_t *empty = json_object();
    size_t len;
    rp_status st = render_src(src, strlen(src), empty, &out, &len);
    json_decref(empty);
    if (st != want)
        fail_msg("[%.200s]: status %s, want %s (%s)", src, rp_status_name(st), rp_status_name(want),
                 st ? rp_error_message() : "rendered");
    rp_free(out);
    return st;
}

static void test_errors_and_messages(void **state)
{
    expect_status("{{ raise_exception('Conversation roles must alternate') }}", RP_ERR_INVALID);
    assert_string_equal(rp_error_message(), "template error: Conversation roles must alternate");
    expect_status("line1\n{% if %}", RP_ERR_INVALID);
    assert_non_null(strstr(rp_error_message(), "template error: "));
    assert_non_null(strstr(rp_error_message(), "at line 2"));
    expect_status("{{ x.y.z }}", RP_ERR_INVALID);
    assert_non_null(strstr(rp_error_message(), "'x' is undefined"));
    expect_status("{% for %}", RP_ERR_INVALID);
    expect_status("{{ 'a' | nosuch }}", RP_ERR_INVALID);
    assert_non_null(strstr(rp_error_message(), "nosuch"));
    // a slice inside a subscript tuple (found by fuzz_template: it reached evaluation with no object)
    expect_status("{{ x[::, 1] }}", RP_ERR_INVALID);
    assert_non_null(strstr(rp_error_message(), "a slice cannot be part of a subscript tuple"));
    expect_status("{{ x[1, 2:3] }}", RP_ERR_INVALID);
    // str.format's type reaches snprintf's format: only numeric types may (":n" was "%.6n", a write)
    expect_status("{{ '{:n}'.format(1.5) }}", RP_ERR_INVALID);
    assert_non_null(strstr(rp_error_message(), "unsupported format type 'n'"));
    expect_status("{{ '{:z}'.format(1) }}", RP_ERR_INVALID);
    expect_status("{{ '{:c}'.format(65) }}", RP_ERR_INVALID);
    char *fout = NULL;
    size_t fout_len;
    json_t *none = json_object();
    const char *pct = "{{ '{:.1%}|{:%}|{:+.2e}'.format(0.25, 1, 1234.5) }}";
    assert_int_equal(render_src(pct, strlen(pct), none, &fout, &fout_len), RP_OK);
    assert_string_equal(fout, "25.0%|100.000000%|+1.23e+03"); // as Python prints them
    rp_free(fout);
    json_decref(none);
    // a NUL as the conversion character (found by fuzz_template: it reached snprintf as "%.6")
    expect_status("{{ '%\\x00' % 1 }}", RP_ERR_INVALID);
    assert_non_null(strstr(rp_error_message(), "unsupported format character"));
    expect_status("{{ '%\\x00d' % 1 }}", RP_ERR_INVALID);
    // number literals longer than the lexer's buffer (found by fuzz_template: a one-byte overflow)
    char lit[400];
    snprintf(lit, sizeof(lit), "{{ %0200d.5 }}", 1);
    expect_status(lit, RP_ERR_INVALID);
    assert_non_null(strstr(rp_error_message(), "number literal longer than 127 characters"));
    snprintf(lit, sizeof(lit), "{{ 1.%0150de5 }}", 1);
    expect_status(lit, RP_ERR_INVALID);
    snprintf(lit, sizeof(lit), "{{ %0127d }}", 0);
    expect_status(lit, RP_ERR_INVALID); // fits the buffer, but not in 64 bits
    assert_non_null(strstr(rp_error_message(), "integer literal too large"));
    // transformers passes these itself: chat_template_kwargs may not replace them
    rp_chat_template *t;
    assert_int_equal(rp_chat_template_create("x", 1, &t), RP_OK);
    json_t *kw = json_pack("{s:i}", "messages", 1);
    rp_chat_render_params p = {.kwargs = kw};
    char *out;
    assert_int_equal(rp_chat_template_render(t, &p, &out, NULL), RP_ERR_INVALID);
    json_decref(kw);
    // bos/eos: NULL is undefined; kwargs override them
    rp_chat_template_destroy(t);
}

static void test_special_tokens(void **state)
{
    rp_chat_template *t;
    const char *src = "{{ bos_token }}|{{ eos_token is defined }}|{{ enable_thinking }}";
    assert_int_equal(rp_chat_template_create(src, strlen(src), &t), RP_OK);
    rp_chat_render_params p = {.bos_token = "<s>"};
    char *out;
    size_t len;
    assert_int_equal(rp_chat_template_render(t, &p, &out, &len), RP_OK);
    assert_string_equal(out, "<s>|False|");
    rp_free(out);
    json_t *kw = json_pack("{s:s,s:b}", "bos_token", "<B>", "enable_thinking", 0);
    p.kwargs = kw;
    p.eos_token = "</s>";
    assert_int_equal(rp_chat_template_render(t, &p, &out, &len), RP_OK);
    assert_string_equal(out, "<B>|True|False");
    rp_free(out);
    json_decref(kw);
    rp_chat_template_destroy(t);
}

static void test_limits(void **state)
{
    // runaway recursion, loops and output are stopped with RP_ERR_LIMIT
    expect_status("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", RP_ERR_LIMIT);
    expect_status("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", RP_ERR_LIMIT);
    expect_status("{% for i in range(100000) %}{% for j in range(100000) %}{{ 'xxxxxxxxxxxxxxxxxx' }}{% endfor %}"
                  "{% endfor %}",
                  RP_ERR_LIMIT);
    expect_status("{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
                  RP_ERR_LIMIT);
    expect_status("{{ 'x' * 100000000000 }}", RP_ERR_LIMIT);
    expect_status("{{ range(1000000) }}", RP_ERR_LIMIT);
    expect_status("{% set ns = namespace(l=[]) %}{% for i in range(50000) %}{% set ns.l = [ns.l] %}{% endfor %}"
                  "{{ ns.l | tojson }}",
                  RP_ERR_LIMIT);
    expect_status("{% macro a(n) %}{% for i in range(10) %}{{ a(n) }}{% endfor %}{% endmacro %}{{ a(1) }}",
                  RP_ERR_LIMIT);
    // deep nesting in the source
    char *src = malloc(400000);
    assert_non_null(src);
    size_t o = 0;
    for (int i = 0; i < 20000; i++)
        o += (size_t)sprintf(src + o, "{%% if 1 %%}");
    src[o] = 0;
    char *out = NULL;
    size_t len;
    json_t *empty = json_object();
    rp_status st = render_src(src, o, empty, &out, &len);
    assert_true(st == RP_ERR_LIMIT || st == RP_ERR_INVALID);
    o = 0;
    o += (size_t)sprintf(src, "{{ ");
    for (int i = 0; i < 50000; i++)
        src[o++] = '(';
    src[o] = 0;
    assert_int_equal(render_src(src, o, empty, &out, &len), RP_ERR_LIMIT);
    o = (size_t)sprintf(src, "{{ ");
    for (int i = 0; i < 30000; i++)
        o += (size_t)sprintf(src + o, "not -");
    o += (size_t)sprintf(src + o, "1 }}");
    st = render_src(src, o, empty, &out, &len);
    assert_true(st == RP_ERR_LIMIT);
    o = (size_t)sprintf(src, "{{ 1");
    for (int i = 0; i < 30000; i++)
        o += (size_t)sprintf(src + o, " + 1");
    o += (size_t)sprintf(src + o, " }}");
    st = render_src(src, o, empty, &out, &len); // left-assoc chain: evaluation depth is the limit
    assert_true(st == RP_ERR_LIMIT || st == RP_OK);
    rp_free(out);
    json_decref(empty);
    free(src);
}

// Renders arbitrary bytes as a template: any status is fine, a crash is not.
static void try_render(const char *src, size_t len, const json_t *conv)
{
    rp_chat_template *t = NULL;
    if (rp_chat_template_create(src, len, &t))
        return;
    char *out = NULL;
    size_t n;
    rp_chat_render_params p = {.messages = json_object_get(conv, "messages"),
                               .tools = json_object_get(conv, "tools"),
                               .add_generation_prompt = true,
                               .bos_token = "<s>",
                               .eos_token = "</s>"};
    if (rp_chat_template_render(t, &p, &out, &n) == RP_OK)
        assert_true(out && strlen(out) <= n);
    rp_free(out);
    rp_chat_template_destroy(t);
}

static void test_random_bytes(void **state)
{
    json_t *convs = chat_load_json(rp_test_source("tests/data/chat/conversations.json"));
    const json_t *conv = json_array_get(json_object_get(convs, "conversations"), 12);
    static const char *atoms[] = {"{{", "}}", "{%", "%}", "{#", "#}", "-", "+", " ", "\n", "if", "for", "in", "endif",
                                  "endfor", "x", "messages", "loop", ".", "[", "]", "(", ")", "|", "'", "\"", "set",
                                  "=", "macro", "endmacro", "1", ",", ":", "{", "}", "not", "is", "defined", "~",
                                  "raw", "endraw", "tojson", "else", "elif", "namespace", "ns", "call", "caller"};
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    char buf[512];
    for (int iter = 0; iter < 20000; iter++) {
        size_t n = 0;
        int parts = 1 + (int)(rng % 40);
        for (int k = 0; k < parts && n < sizeof(buf) - 16; k++) {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            if (rng % 5 == 0) {
                buf[n++] = (char)(rng >> 24);
            } else {
                const char *a = atoms[(rng >> 8) % (sizeof(atoms) / sizeof(atoms[0]))];
                size_t al = strlen(a);
                memcpy(buf + n, a, al);
                n += al;
            }
        }
        try_render(buf, n, conv);
    }
    json_decref(convs);
}

static void truncations_of(const char *src, size_t len, const json_t *conv)
{
    for (size_t cut = 0; cut <= len; cut++)
        try_render(src, cut, conv);
}

static void test_truncated_templates(void **state)
{
    json_t *convs = chat_load_json(rp_test_source("tests/data/chat/conversations.json"));
    const json_t *conv = json_array_get(json_object_get(convs, "conversations"), 12); // tool calls, multi-turn
    json_t *cfg = chat_load_json(rp_test_source("tests/data/models/qwen3/tokenizer_config.json"));
    const json_t *q = json_object_get(cfg, "chat_template");
    truncations_of(json_string_value(q), json_string_length(q), conv);
    json_decref(cfg);
    const char *conf = rp_test_conformance_dir();
    if (conf) {
        char dir[4096];
        snprintf(dir, sizeof(dir), "%s/chat-templates", conf);
        DIR *d = opendir(dir);
        assert_non_null(d);
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strstr(e->d_name, ".jinja"))
                continue;
            char path[8192];
            snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
            char *src;
            size_t len;
            assert_int_equal(rp_file_read(path, &src, &len), RP_OK);
            truncations_of(src, len, conv);
            rp_free(src);
        }
        closedir(d);
    } else {
        print_message("../shared/conformance not found: truncating the fixture template only\n");
    }
    json_decref(convs);
}

static void test_oom(void **state)
{
    // Every allocation failure point of a parse + render fails cleanly.
    const char *src = "{% set ns = namespace(a=[]) %}{% for m in messages %}{{ m.role | upper }}{{ m | tojson }}"
                      "{% set ns.a = ns.a + [m] %}{% endfor %}{{ ns.a | length }}";
    json_t *msgs = json_pack("[{s:s,s:s},{s:s,s:[i,f,n]}]", "role", "user", "content", "hi", "role", "assistant",
                             "content", 1, 2.5);
    for (long k = 0; k < 200; k++) {
        rp_alloc_fail_after(k, false);
        rp_chat_template *t = NULL;
        rp_status st = rp_chat_template_create(src, strlen(src), &t);
        if (!st) {
            char *out = NULL;
            rp_chat_render_params p = {.messages = msgs};
            st = rp_chat_template_render(t, &p, &out, NULL);
            rp_free(out);
            rp_chat_template_destroy(t);
        }
        rp_alloc_fail_after(-1, false);
        assert_true(st == RP_OK || st == RP_ERR_NOMEM);
    }
    json_decref(msgs);
    char *out;
    assert_int_equal(render_plain("ok", &out), RP_OK);
    assert_string_equal(out, "ok");
    rp_free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cases),           cmocka_unit_test(test_errors_and_messages),
        cmocka_unit_test(test_special_tokens),  cmocka_unit_test(test_limits),
        cmocka_unit_test(test_random_bytes),    cmocka_unit_test(test_truncated_templates),
        cmocka_unit_test(test_oom),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
