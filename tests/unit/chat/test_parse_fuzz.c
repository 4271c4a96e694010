/*
 * test_parse_fuzz.c - the output parser on replies it was not written for:
 * every prefix of well-formed replies (generation cut off anywhere), random
 * mutations of them, and random strings of marker pieces, JSON and XML
 * fragments and stray bytes; fixed seed, a few thousand inputs. Each is parsed
 * whole, byte by byte and in random chunks: no crash, the same result every
 * way, the stream invariants of parse_harness.h, and completed calls always
 * carry a JSON object. Then out-of-memory at every allocation.
 */
#include "parse_harness.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(uint32_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 33) % n;
}

typedef struct sample {
    rp_tool_format tools;
    rp_reasoning_format reasoning;
    bool think_open;
    const char *text;
} sample;

static const char tools_json[] = "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"properties\":"
                                 "{\"n\":{\"type\":\"integer\"},\"o\":{\"type\":\"object\"}}}}}]";

static const sample samples[] = {
    {RP_TOOL_FORMAT_HERMES, RP_REASONING_FORMAT_THINK, false,
     "<think>\nhm\n</think>\n\nOk.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, \"x\\\"y\"], \"b\": "
     "-0.5e2}}\n</tool_call>\n<tool_call>{\"name\": \"g\", \"arguments\": {}}</tool_call>"},
    {RP_TOOL_FORMAT_QWEN3_CODER, RP_REASONING_FORMAT_THINK, true,
     "x</think><tool_call>\n<function=f>\n<parameter=n>\n12\n</parameter>\n<parameter=o>\n{\"k\": 1}\n</parameter>\n"
     "<parameter=s>\na < b\n</parameter>\n</function>\n</tool_call>"},
    // Qwen3.5/3.6: null and near-null values, markup-like text in a value
    {RP_TOOL_FORMAT_QWEN3_CODER, RP_REASONING_FORMAT_THINK, true,
     "Think.\n</think>\n\nText.\n\n<tool_call>\n<function=f>\n<parameter=n>\nnull\n</parameter>\n<parameter=s>\n"
     "Nul\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=f>\n<parameter=o>\n{\"k\": [1, null]}\n"
     "</parameter>\n<parameter=t>\n</param <function=x>\n</parameter>\n</function>\n</tool_call>"},
    {RP_TOOL_FORMAT_LLAMA3, RP_REASONING_FORMAT_NONE, false,
     "{\"name\": \"f\", \"parameters\": {\"n\": 1}}; {\"type\": \"function\", \"name\": \"g\", \"parameters\": {}}"},
    {RP_TOOL_FORMAT_LLAMA3, RP_REASONING_FORMAT_NONE, false, "Hi.<|python_tag|>brave_search.call(query=\"a b\", k=2)"},
    {RP_TOOL_FORMAT_LLAMA3, RP_REASONING_FORMAT_NONE, false, "<|python_tag|>print(1)\nx = {'a': 2}"},
    {RP_TOOL_FORMAT_MISTRAL, RP_REASONING_FORMAT_NONE, false,
     "Sure [TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"n\": 1}, \"id\": \"abcdefghi\"}, {\"name\": \"g\", "
     "\"arguments\": {}}]"},
    {RP_TOOL_FORMAT_MISTRAL, RP_REASONING_FORMAT_NONE, false,
     "[TOOL_CALLS]f[ARGS]{\"n\": 1}[TOOL_CALLS]g[CALL_ID]123456789[ARGS]{}"},
    {RP_TOOL_FORMAT_DEEPSEEK, RP_REASONING_FORMAT_THINK, true,
     "hm</think>\n\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{\"n\": 1}\n```"
     "<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>g<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"},
};
#define N_SAMPLES (sizeof(samples) / sizeof(samples[0]))

static const char *const pieces[] = {
    "<tool_call>",
    "</tool_call>",
    "<tool_",
    "<think>",
    "</think>",
    "</thi",
    "<|python_tag|>",
    "<|python",
    "[TOOL_CALLS]",
    "[TOOL_",
    "[ARGS]",
    "[CALL_ID]",
    "<｜tool▁calls▁begin｜>",
    "<｜tool▁call▁begin｜>",
    "<｜tool▁sep｜>",
    "<｜tool▁call▁end｜>",
    "<｜tool▁calls▁end｜>",
    "<｜tool",
    "function",
    "```json\n",
    "```",
    "<function=f>",
    "<function=",
    "</function>",
    "<parameter=n>",
    "<parameter=s>",
    "</parameter>",
    "<parameter",
    "{",
    "}",
    "[",
    "]",
    "\"",
    "\\",
    "\\u12",
    "\\u00e9",
    ":",
    ",",
    ";",
    "\"name\"",
    "\"arguments\"",
    "\"parameters\"",
    "\"type\"",
    "\"function\"",
    "\"f\"",
    "1",
    "-2.5e3",
    "true",
    "nul",
    "null",
    " ",
    "\n",
    "\t",
    "x",
    "é",
    "\xff",
    "\xc3",
    "f.call(",
    "a=",
    ")",
    "brave_search",
    "{\"name\": \"f\", \"arguments\": {",
    "{\"name\": \"f\", \"parameters\": ",
};
#define N_PIECES (sizeof(pieces) / sizeof(pieces[0]))

static rp_parser_config config(rp_tool_format t, rp_reasoning_format r, bool open)
{
    rp_parser_config cfg = {.tools = t, .reasoning = r, .think_open = open, .seed = 5};
    cfg.tools_json = tools_json;
    cfg.tools_json_len = strlen(tools_json);
    return cfg;
}

// Whole vs byte by byte vs random chunks.
static void check_ways(const rp_parser_config *cfg, const char *text, size_t len)
{
    rp_parse_result whole, r;
    assert_int_equal(rp_parse_all(cfg, text, len, &whole), RP_OK);
    check_result_json(&whole);
    size_t *cuts = malloc((len + 1) * sizeof(size_t));
    for (size_t i = 0; i < len; i++)
        cuts[i] = i + 1;
    run_stream(cfg, text, len, cuts, len ? len - 1 : 0, false, &r);
    assert_results_equal(&whole, &r, "byte by byte");
    rp_parse_result_deinit(&r);
    for (int k = 0; k < 2; k++) {
        size_t n = 0, pos = 0;
        while (len && pos < len) {
            pos += 1 + rnd(12);
            if (pos < len)
                cuts[n++] = pos;
        }
        run_stream(cfg, text, len, cuts, n, false, &r);
        assert_results_equal(&whole, &r, "random chunks");
        rp_parse_result_deinit(&r);
    }
    free(cuts);
    rp_parse_result_deinit(&whole);
}

static void test_truncated(void **state)
{
    for (size_t s = 0; s < N_SAMPLES; s++) {
        rp_parser_config cfg = config(samples[s].tools, samples[s].reasoning, samples[s].think_open);
        size_t len = strlen(samples[s].text);
        for (size_t n = 0; n <= len; n++)
            check_ways(&cfg, samples[s].text, n);
        // the whole sample is well formed: no abort, no marker in content
        rp_parse_result r;
        check_all_splits(&cfg, samples[s].text, true, &r);
        assert_true(r.n_calls >= 1);
        rp_parse_result_deinit(&r);
    }
}

static void test_mutated(void **state)
{
    char buf[1024];
    for (int it = 0; it < 4000; it++) {
        const sample *s = &samples[rnd(N_SAMPLES)];
        size_t len = strlen(s->text);
        memcpy(buf, s->text, len);
        int muts = 1 + (int)rnd(3);
        for (int m = 0; m < muts; m++) {
            size_t at = len ? rnd((uint32_t)len) : 0;
            switch (rnd(4)) {
            case 0: // flip a byte
                if (len)
                    buf[at] = (char)rnd(256);
                break;
            case 1: // delete a run
                if (len) {
                    size_t k = 1 + rnd(8);
                    if (at + k > len)
                        k = len - at;
                    memmove(buf + at, buf + at + k, len - at - k);
                    len -= k;
                }
                break;
            default: { // insert a piece
                const char *pc = pieces[rnd(N_PIECES)];
                size_t k = strlen(pc);
                if (len + k < sizeof(buf)) {
                    memmove(buf + at + k, buf + at, len - at);
                    memcpy(buf + at, pc, k);
                    len += k;
                }
            }
            }
        }
        rp_parser_config cfg = config(s->tools, s->reasoning, s->think_open);
        check_ways(&cfg, buf, len);
    }
}

static void test_random_pieces(void **state)
{
    char buf[2048];
    for (int it = 0; it < 4000; it++) {
        size_t len = 0;
        int n = 1 + (int)rnd(40);
        for (int k = 0; k < n; k++) {
            const char *pc = pieces[rnd(N_PIECES)];
            size_t m = strlen(pc);
            if (len + m >= sizeof(buf))
                break;
            memcpy(buf + len, pc, m);
            len += m;
        }
        rp_parser_config cfg = config((rp_tool_format)rnd(RP_TOOL_FORMAT_COUNT),
                                      (rp_reasoning_format)rnd(RP_REASONING_FORMAT_COUNT), rnd(2));
        check_ways(&cfg, buf, len);
    }
}

// Out of memory at the n-th allocation, for every n: an error or the right result, never a crash or a leak.
static void test_out_of_memory(void **state)
{
    for (size_t s = 0; s < N_SAMPLES; s++) {
        rp_parser_config cfg = config(samples[s].tools, samples[s].reasoning, samples[s].think_open);
        const char *text = samples[s].text;
        size_t len = strlen(text);
        rp_parse_result want;
        assert_int_equal(rp_parse_all(&cfg, text, len, &want), RP_OK);
        bool done = false;
        for (long n = 0; !done && n < 10000; n++) {
            rp_parse_result r;
            rp_alloc_fail_after(n, false);
            rp_status st = rp_parse_all(&cfg, text, len, &r);
            if (st == RP_OK) {
                done = true;
                assert_results_equal(&want, &r, "after OOM");
            } else {
                assert_int_equal(st, RP_ERR_NOMEM);
            }
            rp_parse_result_deinit(&r);
            // streaming: a failed parser keeps failing
            rp_parser *p = NULL;
            rp_alloc_fail_after(n, true);
            if (rp_parser_create(&cfg, &p) == RP_OK) {
                const rp_parse_event *ev;
                size_t ne;
                bool failed = false;
                for (size_t i = 0; i < len; i += 7) {
                    size_t k = len - i < 7 ? len - i : 7;
                    rp_status ps = rp_parser_push(p, text + i, k, &ev, &ne);
                    if (failed)
                        assert_int_equal(ps, RP_ERR_NOMEM);
                    failed = ps != RP_OK;
                }
                rp_status fs = rp_parser_finish(p, &ev, &ne);
                if (failed)
                    assert_int_equal(fs, RP_ERR_NOMEM);
                rp_parser_destroy(p);
            } else {
                assert_null(p);
            }
            rp_alloc_fail_after(-1, false);
        }
        assert_true(done);
        rp_parse_result_deinit(&want);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_mutated),
        cmocka_unit_test(test_random_pieces),
        cmocka_unit_test(test_out_of_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
