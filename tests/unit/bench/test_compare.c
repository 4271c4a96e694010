/*
 * test_compare.c - comparison of result files on fixed inputs: the speedup
 * arithmetic (runs paired by index, median and range), byte-identical
 * outputs, the aggregate of concurrent streams, tasks in one file only, the
 * exact Markdown table, the SVG chart's bars and escaping; merging runs; and
 * every kind of malformed result file, which must give an error naming the
 * file and the problem.
 */
#define RP_TEST_TMP_PREFIX "rp-test-bench-compare"
#include "bench_test_util.h"

// A record of one request with the figures compare reads.
static json_t *rec(const char *task, int run, double ttft, double dec, double e2e, const char *text)
{
    return json_pack("{s:s, s:s, s:i, s:i, s:b, s:n, s:f, s:f, s:f, s:s, s:s, s:n}", "scenario", "tasks", "task", task,
                     "run", run, "stream", 0, "ok", 1, "error", "ttft_s", ttft, "decode_tok_s", dec, "e2e_s", e2e,
                     "text", text, "reasoning", "", "tool_calls");
}

// A stream of a concurrency level: times relative to the run's start.
static json_t *stream_rec(const char *task, int run, int stream, double sent, double first, double last, int tokens)
{
    return json_pack("{s:s, s:s, s:i, s:i, s:n, s:f, s:f, s:f, s:f, s:i, s:s}", "scenario", "concurrency", "task", task,
                     "run", run, "stream", stream, "error", "t_sent", sent, "t_first", first, "t_last", last, "ttft_s",
                     first - sent, "completion_tokens", tokens, "text", "same");
}

static json_t *doc(const char *label, json_t *records)
{
    return json_pack("{s:s, s:s, s:{s:{s:s, s:i, s:I, s:s}}, s:o}", "format", RP_BENCH_FORMAT, "label", label,
                     "environment", "machine", "cpu", "Test CPU", "cores", 2, "memory_bytes",
                     (json_int_t)24 * 1024 * 1024 * 1024, "os", "Debian 12", "records", records);
}

static json_t *doc_a(void)
{
    json_t *r = json_array();
    // x: decode 10, 20, 40; e2e 2, 4, 8; ttft 0.5 each.
    json_array_append_new(r, rec("x", 0, 0.5, 10, 2, "alpha"));
    json_array_append_new(r, rec("x", 1, 0.5, 20, 4, "alpha"));
    json_array_append_new(r, rec("x", 2, 0.5, 40, 8, "alpha"));
    json_array_append_new(r, rec("only-a", 0, 1, 1, 1, ""));
    json_array_append_new(r, rec("w", 0, 1, 10, 1, "w"));
    json_array_append_new(r, rec("w", 1, 1, 10, 1, "w"));
    json_array_append_new(r, rec("w", 2, 1, 10, 1, "w"));
    // Two streams per run: (10 + 8) tokens / (5 - 1) s = 4.5 tok/s, end to end 5 s.
    for (int run = 0; run < 3; run++) {
        json_array_append_new(r, stream_rec("concurrency-n2", run, 0, 0, 1, 3, 11));
        json_array_append_new(r, stream_rec("concurrency-n2", run, 1, 0, 2, 5, 9));
    }
    return doc("<base>", r);
}

static json_t *doc_b(void)
{
    json_t *r = json_array();
    // x: decode 15, 30, 40 (ratios 1.5, 1.5, 1); e2e 1, 2, 8 (2, 2, 1); ttft 0.25 (2 each); run 2 differs.
    json_array_append_new(r, rec("x", 0, 0.25, 15, 1, "alpha"));
    json_array_append_new(r, rec("x", 1, 0.25, 30, 2, "alpha"));
    json_array_append_new(r, rec("x", 2, 0.25, 40, 8, "alpha!"));
    json_array_append_new(r, rec("w", 0, 1, 20, 0.5, "w"));
    json_t *bad = rec("w", 1, 1, 99, 1, "w");
    json_object_set_new(bad, "error", json_string("HTTP 500: x"));
    json_array_append_new(r, bad);
    json_array_append_new(r, rec("w", 2, 1, 5, 2, "w"));
    json_array_append_new(r, rec("only-b", 0, 1, 1, 1, ""));
    // (10 + 8) / (2.5 - 0.5) = 9 tok/s: 2x; end to end 2.5 s: 2x.
    for (int run = 0; run < 3; run++) {
        json_array_append_new(r, stream_rec("concurrency-n2", run, 0, 0, 0.5, 2, 11));
        json_array_append_new(r, stream_rec("concurrency-n2", run, 1, 0, 1, 2.5, 9));
    }
    return doc("fast|er", r);
}

static const rp_bench_cmp_row *row_of(const rp_bench_cmp *c, const char *task)
{
    for (size_t i = 0; i < c->n_rows; i++)
        if (strcmp(c->rows[i].task, task) == 0)
            return &c->rows[i];
    fail_msg("no row for %s", task);
    return NULL;
}

static void test_compare_arithmetic(void **state)
{
    json_t *a = doc_a(), *b = doc_b();
    assert_int_equal(rp_bench_doc_check(a), RP_OK);
    assert_int_equal(rp_bench_doc_check(b), RP_OK);
    rp_bench_cmp c;
    assert_int_equal(rp_bench_cmp_build(a, b, "a.json", "b.json", &c), RP_OK);
    assert_string_equal(c.label_a, "<base>");
    assert_string_equal(c.label_b, "fast|er");
    assert_string_equal(c.machine, "Test CPU, 2 cores, 24 GiB, Debian 12");
    assert_int_equal(c.n_rows, 5); // x, only-a, w, concurrency-n2, only-b
    const rp_bench_cmp_row *x = row_of(&c, "x");
    assert_int_equal(x->n_pairs, 3);
    assert_true(x->decode[0] == 1.5 && x->decode[1] == 1.0 && x->decode[2] == 1.5);
    assert_true(x->e2e[0] == 2.0 && x->e2e[1] == 1.0 && x->e2e[2] == 2.0);
    assert_true(x->ttft[0] == 2.0 && x->ttft[1] == 2.0 && x->ttft[2] == 2.0);
    assert_true(x->a_decode == 20 && x->b_decode == 30);
    assert_int_equal(x->n_identical, 2);
    assert_int_equal(x->n_outputs, 3);
    // w: the failed run of B has no ratio and no output comparison.
    const rp_bench_cmp_row *w = row_of(&c, "w");
    assert_int_equal(w->b_errors, 1);
    assert_int_equal(w->a_errors, 0);
    assert_true(w->decode[0] == 1.25 && w->decode[1] == 0.5 && w->decode[2] == 2.0); // ratios 2 and 0.5
    assert_true(w->e2e[0] == 1.25);                                                  // 2 and 0.5
    assert_int_equal(w->n_identical, 2);
    assert_int_equal(w->n_outputs, 2);
    const rp_bench_cmp_row *cc = row_of(&c, "concurrency-n2");
    assert_true(cc->decode[0] == 2.0 && cc->decode[1] == 2.0 && cc->decode[2] == 2.0);
    assert_true(cc->e2e[0] == 2.0);
    assert_true(cc->a_decode == 4.5 && cc->b_decode == 9.0);
    assert_int_equal(cc->n_identical, 6); // every (run, stream)
    assert_int_equal(row_of(&c, "only-a")->only, 'A');
    assert_int_equal(row_of(&c, "only-b")->only, 'B');
    assert_true(c.all_decode == 1.5); // median of 1.5, 1.25, 2
    assert_true(c.all_e2e == 2.0);    // median of 2, 1.25, 2
    rp_bench_cmp_deinit(&c);
    json_decref(a);
    json_decref(b);
}

static void test_markdown_exact(void **state)
{
    json_t *a = doc_a(), *b = doc_b();
    rp_bench_cmp c;
    assert_int_equal(rp_bench_cmp_build(a, b, "a.json", "b.json", &c), RP_OK);
    char *md = rp_bench_cmp_markdown(&c);
    const char *want =
        "A: <base>, B: fast\\|er. Machine (A): Test CPU, 2 cores, 24 GiB, Debian 12.\n"
        "Speedup of B over A (above 1: B is faster): decode tok/s B/A, end to end and time to first token A/B; "
        "median [min-max] over the runs paired by index.\n"
        "\n"
        "| task | runs | decode B/A | end to end A/B | TTFT A/B | A tok/s | B tok/s | identical outputs | errors A/B "
        "|\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n"
        "| x | 3 | 1.50x [1.00-1.50] | 2.00x [1.00-2.00] | 2.00x | 20.0 | 30.0 | 2/3 | 0/0 |\n"
        "| only-a | 0 | only in A | | | | | | |\n"
        "| w | 3 | 1.25x [0.50-2.00] | 1.25x [0.50-2.00] | 1.00x | 10.0 | 12.5 | 2/2 | 0/1 |\n"
        "| concurrency-n2 | 3 | 2.00x | 2.00x | 2.00x | 4.5 | 9.0 | 6/6 | 0/0 |\n"
        "| only-b | 0 | only in B | | | | | | |\n"
        "| **median over tasks** | | **1.50x** | **2.00x** | | | | | |\n";
    assert_string_equal(md, want);
    rp_free(md);
    char *text = rp_bench_cmp_text(&c);
    assert_contains(text, "A: <base>\nB: fast|er\n");
    assert_contains(text, "1.50x [1.00-1.50]");
    assert_contains(text, "only in B");
    rp_free(text);
    rp_bench_cmp_deinit(&c);
    json_decref(a);
    json_decref(b);
}

static int count(const char *s, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(s, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

static void test_svg(void **state)
{
    json_t *a = doc_a(), *b = doc_b();
    rp_bench_cmp c;
    assert_int_equal(rp_bench_cmp_build(a, b, "a.json", "b.json", &c), RP_OK);
    char *svg = rp_bench_cmp_svg(&c);
    assert_int_equal(strncmp(svg, "<svg xmlns=\"http://www.w3.org/2000/svg\"", 39), 0);
    assert_string_equal(svg + strlen(svg) - 7, "</svg>\n");
    // Background, two legend keys, two bars for each of the three common tasks.
    assert_int_equal(count(svg, "<rect"), 1 + 2 + 6);
    // The axis ends at 2x (the largest value): 480 px for 2x, so 1.5x is 360 px wide.
    assert_contains(svg, "width=\"360.0\" height=\"10.0\" fill=\"#4e79a7\"");
    assert_contains(svg, ">1.50x</text>");
    assert_contains(svg, ">2.0x</text>"); // the last axis label
    assert_contains(svg, "Speedup of B (fast|er) over A (&lt;base&gt;)");
    assert_true(strstr(svg, "<base>") == NULL);
    assert_contains(svg, ">concurrency-n2</text>");
    assert_true(strstr(svg, "only-a") == NULL); // tasks in one file only are not drawn
    // The 1x line sits at 240 px from the plot's left edge (210).
    assert_contains(svg, "<line x1=\"450.0\" y1=\"58.0\" x2=\"450.0\"");
    rp_free(svg);
    rp_bench_cmp_deinit(&c);
    json_decref(a);
    json_decref(b);
}

static void test_compare_files(void **state)
{
    json_t *a = doc_a(), *b = doc_b();
    const char *pa = test_write_json("a.json", a);
    char pa_copy[512];
    snprintf(pa_copy, sizeof(pa_copy), "%s", pa);
    const char *pb = test_write_json("b.json", b);
    char md[512], svg[512];
    snprintf(md, sizeof(md), "%s", rp_test_tmp_path("cmp.md"));
    snprintf(svg, sizeof(svg), "%s", rp_test_tmp_path("cmp.svg"));
    FILE *out = tmpfile();
    assert_int_equal(rp_bench_compare(pa_copy, pb, out, md, svg), RP_OK);
    assert_true(ftell(out) > 0);
    fclose(out);
    char *text = NULL;
    size_t n;
    assert_int_equal(rp_file_read(md, &text, &n), RP_OK);
    assert_contains(text, "| x | 3 | 1.50x [1.00-1.50]");
    rp_free(text);
    assert_int_equal(rp_file_read(svg, &text, &n), RP_OK);
    assert_contains(text, "</svg>");
    rp_free(text);
    // No task in common.
    json_t *c = doc("c", json_pack("[o]", rec("zzz", 0, 1, 1, 1, "")));
    const char *pc = test_write_json("c.json", c);
    assert_int_equal(rp_bench_compare(pa_copy, pc, NULL, NULL, NULL), RP_ERR_INVALID);
    assert_contains(rp_error_message(), "no task in common");
    json_decref(a);
    json_decref(b);
    json_decref(c);
}

static void test_malformed_files(void **state)
{
    json_t *good = doc_a();
    char pg[512];
    snprintf(pg, sizeof(pg), "%s", test_write_json("good.json", good));
    json_decref(good);
    static const struct {
        const char *text, *want;
    } cases[] = {
        {"this is not json", "not valid JSON (line 1"},
        {"", "not valid JSON"},
        {"[1, 2]", "not a JSON object"},
        {"{\"records\": []}", "no \"format\" field"},
        {"{\"format\": \"other/2\", \"records\": []}", "format 'other/2', expected 'rapid-bench/1'"},
        {"{\"format\": \"rapid-bench/1\"}", "\"records\" is missing or not an array"},
        {"{\"format\": \"rapid-bench/1\", \"records\": {}}", "\"records\" is missing or not an array"},
        {"{\"format\": \"rapid-bench/1\", \"label\": 3, \"records\": []}", "\"label\" is not a string"},
        {"{\"format\": \"rapid-bench/1\", \"records\": [1]}", "record 0 is not an object"},
        {"{\"format\": \"rapid-bench/1\", \"records\": [{\"run\": 0}]}", "record 0: \"task\" is missing"},
        {"{\"format\": \"rapid-bench/1\", \"records\": [{\"task\": \"x\", \"run\": -1}]}", "record 0: \"run\""},
        {"{\"format\": \"rapid-bench/1\", \"records\": [{\"task\": \"x\", \"run\": 1.5}]}", "record 0: \"run\""},
        {"{\"format\": \"rapid-bench/1\", \"records\": [{\"task\": \"x\", \"run\": 0, \"stream\": \"0\"}]}",
         "\"stream\" is not a non-negative integer"},
        {"{\"format\": \"rapid-bench/1\", \"records\": [{\"task\": \"x\", \"run\": 0},"
         " {\"task\": \"x\", \"run\": 1, \"decode_tok_s\": \"fast\"}]}",
         "record 1: \"decode_tok_s\" is not a number or null"},
        {"{\"format\": \"rapid-bench/1\", \"records\": [{\"task\": \"x\", \"run\": 0, \"completion_tokens\": -4}]}",
         "\"completion_tokens\" is not a non-negative integer"},
        {"{\"format\": \"rapid-bench/1\", \"records\": [{\"task\": \"x\", \"run\": 0, \"text\": 5}]}",
         "\"text\" is not a string or null"},
        {"{\"format\": \"rapid-bench/1\", \"records\": [{\"task\": \"x\", \"run\": 0, \"tool_calls\": {}}]}",
         "\"tool_calls\" is not an array"},
        {"{\"format\": \"rapid-bench/1\", \"records\": [{\"task\": \"x\", \"run\": 0, \"pass\": \"yes\"}]}",
         "\"pass\" is not a boolean"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
        char name[32];
        snprintf(name, sizeof(name), "bad%zu.json", i);
        const char *pb = test_write_text(name, cases[i].text);
        assert_int_equal(rp_bench_compare(pg, pb, NULL, NULL, NULL), RP_ERR_INVALID);
        assert_contains(rp_error_message(), cases[i].want);
        assert_contains(rp_error_message(), name); // the file is named
        // Either side.
        assert_int_equal(rp_bench_compare(pb, pg, NULL, NULL, NULL), RP_ERR_INVALID);
    }
    assert_int_equal(rp_bench_compare(pg, rp_test_tmp_path("absent.json"), NULL, NULL, NULL), RP_ERR_IO);
    assert_contains(rp_error_message(), "absent.json");
    // Empty record lists are valid files with nothing to compare.
    const char *empty = test_write_text("empty.json", "{\"format\": \"rapid-bench/1\", \"records\": []}");
    assert_int_equal(rp_bench_compare(pg, empty, NULL, NULL, NULL), RP_ERR_INVALID);
    assert_contains(rp_error_message(), "no task in common");
}

static void test_merge(void **state)
{
    json_t *r1 = json_pack("[o, o]", rec("x", 0, 1, 10, 2, "a"), rec("y", 0, 1, 5, 2, "b"));
    json_t *r2 = json_pack("[o]", rec("x", 0, 1, 30, 2, "a"));
    json_t *d1 = doc("cfg", r1), *d2 = doc("cfg", r2), *d3 = doc("other", json_array());
    char p1[512], p2[512], p3[512], out[512];
    snprintf(p1, sizeof(p1), "%s", test_write_json("m1.json", d1));
    snprintf(p2, sizeof(p2), "%s", test_write_json("m2.json", d2));
    snprintf(p3, sizeof(p3), "%s", test_write_json("m3.json", d3));
    snprintf(out, sizeof(out), "%s", rp_test_tmp_path("merged.json"));
    const char *in[] = {p1, p2, p1};
    assert_int_equal(rp_bench_merge(in, 3, out), RP_OK);
    json_t *m = NULL;
    assert_int_equal(rp_bench_doc_load(out, &m), RP_OK);
    const json_t *recs = json_object_get(m, "records");
    assert_int_equal(json_array_size(recs), 5);
    assert_int_equal(rp_bench_run_count(recs), 3); // runs renumbered 0, 1, 2
    assert_int_equal(json_integer_value(json_object_get(json_array_get(recs, 2), "run")), 1);
    const json_t *x = json_array_get(json_object_get(json_object_get(m, "summary"), "tasks"), 0);
    assert_true(json_real_value(json_object_get(json_object_get(x, "decode_tok_s"), "median")) == 10.0);
    assert_true(json_real_value(json_object_get(json_object_get(x, "decode_tok_s"), "max")) == 30.0);
    assert_int_equal(json_array_size(json_object_get(json_object_get(m, "environment"), "merged_from")), 3);
    json_decref(m);
    const char *mixed[] = {p1, p3};
    assert_int_equal(rp_bench_merge(mixed, 2, out), RP_ERR_INVALID);
    assert_contains(rp_error_message(), "label 'other' differs from 'cfg'");
    const char *bad[] = {p1, test_write_text("bad.json", "{}")};
    assert_int_equal(rp_bench_merge(bad, 2, out), RP_ERR_INVALID);
    assert_int_equal(rp_bench_merge(NULL, 0, out), RP_ERR_INVALID);
    json_decref(d1);
    json_decref(d2);
    json_decref(d3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_compare_arithmetic), cmocka_unit_test(test_markdown_exact),  cmocka_unit_test(test_svg),
        cmocka_unit_test(test_compare_files),      cmocka_unit_test(test_malformed_files), cmocka_unit_test(test_merge),
    };
    return cmocka_run_group_tests(tests, rp_test_tmp_setup, rp_test_tmp_teardown);
}
