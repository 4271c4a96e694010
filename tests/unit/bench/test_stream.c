/*
 * test_stream.c - the SSE parser and the stream interpreter without a network:
 * every event split at every byte gives the same events; a scripted chunk
 * sequence gives exact figures (the clock is read once per token chunk); every
 * malformed or incomplete stream gives an error naming the problem. Also the
 * arithmetic: medians, per-request metrics, the aggregate over streams and the
 * summary.
 */
#include "bench_test_util.h"

/* ---- SSE ---------------------------------------------------------------------- */

typedef struct events {
    char got[16][256];
    int n;
} events;

static rp_status collect(void *ctx, const char *data, size_t len)
{
    events *e = ctx;
    assert_true(e->n < 16);
    assert_int_equal(strlen(data), len); // NUL-terminated, no NUL inside here
    snprintf(e->got[e->n++], sizeof(e->got[0]), "%s", data);
    return RP_OK;
}

// Feeds text in two pieces split at `cut`, then ends.
static void feed_split(const char *text, size_t cut, events *e)
{
    rp_bench_sse s;
    rp_bench_sse_init(&s);
    memset(e, 0, sizeof(*e));
    size_t n = strlen(text);
    assert_int_equal(rp_bench_sse_feed(&s, text, cut, collect, e), RP_OK);
    assert_int_equal(rp_bench_sse_feed(&s, text + cut, n - cut, collect, e), RP_OK);
    assert_int_equal(rp_bench_sse_end(&s, collect, e), RP_OK);
    rp_bench_sse_deinit(&s);
}

static void test_sse_every_split(void **state)
{
    // LF, CRLF and CR line ends, a comment, other fields, a field without a
    // space, a two-line event, an empty data line and a last event without its blank line.
    const char *text = "data: one\n\n"
                       ": ping\r\n\r\n"
                       "event: x\r\nid: 7\r\ndata: two\r\n\r\n"
                       "data:three\r\rdata: four a\ndata: four b\n\n"
                       "data:\n\n"
                       "retry: 10\n\n"
                       "data: last";
    const char *want[] = {"one", "two", "three", "four a\nfour b", "", "last"};
    for (size_t cut = 0; cut <= strlen(text); cut++) {
        events e;
        feed_split(text, cut, &e);
        assert_int_equal(e.n, 6);
        for (int i = 0; i < 6; i++)
            assert_string_equal(e.got[i], want[i]);
    }
}

static void test_sse_byte_by_byte(void **state)
{
    const char *text = "data: a\r\n\r\ndata: b\r\r";
    rp_bench_sse s;
    rp_bench_sse_init(&s);
    events e = {0};
    for (size_t i = 0; text[i]; i++)
        assert_int_equal(rp_bench_sse_feed(&s, text + i, 1, collect, &e), RP_OK);
    assert_int_equal(rp_bench_sse_end(&s, collect, &e), RP_OK);
    assert_int_equal(e.n, 2);
    assert_string_equal(e.got[0], "a");
    assert_string_equal(e.got[1], "b");
    rp_bench_sse_deinit(&s);
}

static rp_status refuse(void *ctx, const char *data, size_t len)
{
    (void)ctx;
    (void)data;
    (void)len;
    return RP_ERR(RP_ERR_INVALID, "refused");
}

static void test_sse_callback_error_stops(void **state)
{
    rp_bench_sse s;
    rp_bench_sse_init(&s);
    assert_int_equal(rp_bench_sse_feed(&s, "data: x\n\n", 9, refuse, NULL), RP_ERR_INVALID);
    rp_bench_sse_deinit(&s);
}

/* ---- the stream interpreter ----------------------------------------------------- */

// A complete reply: role chunk, reasoning, content split over chunks, finish,
// usage, [DONE]. Four chunks carry tokens.
static const char good_stream[] =
    "data: "
    "{\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"system_fingerprint\":\"fp-1\",\"choices\":[{\"index\":0,"
    "\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}],\"usage\":null}\n\n"
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"Think.\"}}]}\n\n"
    ": keep-alive\n\n"
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hello\"}}]}\r\n\r\n"
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\", world\"}}]}\n\n"
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"!\"},\"finish_reason\":\"stop\"}]}\n\n"
    "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":7,\"total_tokens\":19,"
    "\"prompt_tokens_details\":{\"cached_tokens\":4}}}\n\n"
    "data: [DONE]\n\n";

// Runs a body through a stream fed in two pieces (split at cut), t_sent = 100.
static void run_stream(const char *body, size_t n, size_t cut, rp_bench_result *r, fake_clock *clk)
{
    rp_bench_stream s;
    rp_bench_result_init(r);
    clk->t = 100.25;
    clk->step = 0.25;
    clk->calls = 0;
    r->t_sent = 100.0;
    rp_bench_stream_init(&s, r, fake_now, clk);
    rp_bench_stream_feed(&s, body, cut);
    rp_bench_stream_feed(&s, body + cut, n - cut);
    rp_bench_stream_finish(&s);
    rp_bench_stream_deinit(&s);
}

static void test_stream_exact_metrics_every_split(void **state)
{
    size_t n = strlen(good_stream);
    for (size_t cut = 0; cut <= n; cut++) {
        rp_bench_result r;
        fake_clock clk;
        run_stream(good_stream, n, cut, &r, &clk);
        if (r.error)
            fail_msg("cut %zu: %s", cut, r.error);
        assert_int_equal(clk.calls, 4); // one reading per token chunk, however the bytes came
        assert_int_equal(r.token_chunks, 4);
        assert_true(r.t_first == 100.25);
        assert_true(r.t_last == 101.0);
        assert_string_equal(r.text, "Hello, world!");
        assert_int_equal(r.text_len, 13);
        assert_string_equal(r.reasoning, "Think.");
        assert_int_equal(r.prompt_tokens, 12);
        assert_int_equal(r.cached_tokens, 4);
        assert_int_equal(r.completion_tokens, 7);
        assert_string_equal(r.finish_reason, "stop");
        assert_string_equal(r.fingerprint, "fp-1");
        assert_null(r.tool_calls);
        rp_bench_metrics m;
        rp_bench_metrics_of(&r, &m);
        assert_true(m.ttft_s == 0.25);
        assert_true(m.e2e_s == 1.0);
        assert_true(m.decode_tok_s == 8.0); // (7 - 1) / (101.0 - 100.25)
        rp_bench_result_deinit(&r);
    }
}

static void test_stream_tool_calls(void **state)
{
    const char *body =
        "data: "
        "{\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"tool_calls\":[{\"index\":0,\"id\":\"call_1\","
        "\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"\"}}]}}]}\n\n"
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":"
        "\"{\\\"city\\\": \"}}]}}]}\n\n"
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":"
        "\"\\\"Porto\\\"}\"}},{\"index\":1,\"id\":\"call_2\",\"function\":{\"name\":\"set_timer\",\"arguments\":"
        "\"{}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\n"
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":30,\"completion_tokens\":11}}\n\n"
        "data: [DONE]\n\n";
    rp_bench_result r;
    fake_clock clk;
    run_stream(body, strlen(body), 10, &r, &clk);
    assert_null(r.error);
    // The first token is the first tool-call delta (a token of any kind counts).
    assert_true(r.t_first == 100.25);
    assert_int_equal(r.token_chunks, 3);
    assert_int_equal(json_array_size(r.tool_calls), 2);
    json_t *want =
        test_json("[{\"id\":\"call_1\",\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\": \\\"Porto\\\"}\"},"
                  "{\"id\":\"call_2\",\"name\":\"set_timer\",\"arguments\":\"{}\"}]");
    assert_true(json_equal(want, r.tool_calls));
    json_decref(want);
    assert_int_equal(r.cached_tokens, -1); // not reported
    assert_string_equal(r.finish_reason, "tool_calls");
    json_t *args = test_json("{\"city\": \"Porto\"}");
    assert_true(rp_bench_tool_pass(r.tool_calls, "get_weather", args));
    assert_false(rp_bench_tool_pass(r.tool_calls, "set_timer", args));
    json_decref(args);
    rp_bench_result_deinit(&r);
}

// The error a body gives (fed whole), or NULL.
static char *stream_error(const char *body, size_t n)
{
    rp_bench_result r;
    fake_clock clk;
    run_stream(body, n, n / 2, &r, &clk);
    char *e = r.error ? rp_strdup(r.error) : NULL;
    rp_bench_result_deinit(&r);
    return e;
}

static void expect_error(const char *body, const char *want)
{
    char *e = stream_error(body, strlen(body));
    assert_contains(e, want);
    rp_free(e);
}

static void test_stream_errors(void **state)
{
    const char *usage = "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2}}\n\n";
    char body[1024];
    expect_error("", "not an SSE stream (no data: events in 0 bytes)");
    expect_error("{\"object\":\"chat.completion\"}", "not an SSE stream (no data: events");
    expect_error("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: {oops}\n\n", "malformed chunk 2");
    expect_error("data: [1,2]\n\n", "malformed chunk 1: not a JSON object");
    expect_error("data: {\"id\":\"x\"}\n\n", "neither choices nor usage");
    expect_error("data: {\"choices\":{}}\n\n", "choices is not an array");
    expect_error("data: {\"choices\":[{\"delta\":{\"content\":5}}]}\n\n", "content or reasoning is not a string");
    expect_error("data: {\"choices\":[{\"delta\":\"x\"}]}\n\n", "delta is not an object");
    expect_error("data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":-1}]}}]}\n\n", "tool-call delta");
    expect_error("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":\"3\"}}\n\n", "usage without integer");
    expect_error("data: {\"error\":{\"message\":\"context length exceeded\",\"type\":\"invalid_request\"}}\n\n",
                 "the server sent an error in the stream: context length exceeded");
    expect_error("data: {\"error\":\"plain text\"}\n\n", "error in the stream: plain text");
    snprintf(body, sizeof(body), "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n%s", usage);
    expect_error(body, "the stream ended before data: [DONE]");
    expect_error("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: [DONE]\n\n", "no usage in the stream");
    // Data after [DONE] is not part of the reply.
    snprintf(body, sizeof(body), "%sdata: [DONE]\n\ndata: {garbage\n\n", usage);
    char *e = stream_error(body, strlen(body));
    assert_null(e);
}

static void test_stream_nul_and_utf8(void **state)
{
    // \u0000 in content is kept (with its length); a record of it is valid JSON.
    const char *body =
        "data: {\"choices\":[{\"delta\":{\"content\":\"a\\u0000b\"}}]}\n\n"
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}\n\ndata: [DONE]\n\n";
    rp_bench_result r;
    fake_clock clk;
    run_stream(body, strlen(body), 3, &r, &clk);
    assert_null(r.error);
    assert_int_equal(r.text_len, 3);
    assert_memory_equal(r.text, "a\0b", 3);
    rp_bench_metrics m;
    rp_bench_metrics_of(&r, &m);
    assert_true(isnan(m.decode_tok_s)); // one completion token: no decode rate
    json_t *rec = rp_bench_record_new(&r, 100.0, "tasks", "t", 0);
    assert_non_null(rec);
    assert_int_equal(json_string_length(json_object_get(rec, "text")), 3);
    assert_true(json_is_null(json_object_get(rec, "decode_tok_s")));
    assert_true(json_object_get(rec, "ttft_s") && json_real_value(json_object_get(rec, "ttft_s")) == 0.25);
    json_decref(rec);
    rp_bench_result_deinit(&r);
    // Invalid UTF-8 in an excerpt or a JSON string is replaced, never passed on.
    char *x = rp_bench_excerpt("ab\xff\xfe\ncd\x01\x02"
                               "ef",
                               11, 100);
    assert_string_equal(x, "ab?? cd ef");
    rp_free(x);
    x = rp_bench_excerpt("0123456789", 10, 4);
    assert_string_equal(x, "0123...");
    rp_free(x);
    x = rp_bench_excerpt("\xc3\xa9\xc3\xa9", 4, 3); // never cuts inside a character
    assert_string_equal(x, "\xc3\xa9...");
    rp_free(x);
    assert_false(rp_bench_utf8_valid("\xed\xa0\x80", 3)); // a surrogate
    assert_false(rp_bench_utf8_valid("\xc0\x80", 2));     // overlong
    assert_true(rp_bench_utf8_valid("\xf0\x9f\x98\x80", 4));
    json_t *j = rp_bench_json_bytes("a\xff", 2);
    assert_string_equal(json_string_value(j), "a\xef\xbf\xbd");
    json_decref(j);
}

// Thousands of mutated replies (flipped, dropped and inserted bytes, fed in random
// pieces): each gives a result or an error, never a crash (the point under ASan).
static void test_stream_mutations(void **state)
{
    uint64_t x = 0x9e3779b97f4a7c15ull;
    size_t n = strlen(good_stream);
    char *buf = rp_malloc(n + 64);
    assert_non_null(buf);
    int ok = 0, failed = 0;
    for (int iter = 0; iter < 3000; iter++) {
        memcpy(buf, good_stream, n);
        size_t len = n;
        int edits = 1 + iter % 4;
        for (int e = 0; e < edits; e++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            size_t at = (size_t)(x % len);
            unsigned char c = (unsigned char)(x >> 40);
            if (e % 3 == 0) {
                buf[at] = (char)c;
            } else if (e % 3 == 1 && len > 1) {
                memmove(buf + at, buf + at + 1, len - at - 1);
                len--;
            } else {
                memmove(buf + at + 1, buf + at, len - at);
                buf[at] = "{}[]\"\\:,\n\r"[c % 10];
                len++;
            }
        }
        rp_bench_result r;
        fake_clock clk;
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        run_stream(buf, len, (size_t)(x % (len + 1)), &r, &clk);
        if (r.error)
            failed++;
        else
            ok++;
        assert_non_null(r.text);
        json_t *rec = rp_bench_record_new(&r, 100.0, "tasks", "m", 0);
        assert_non_null(rec); // always a valid record, whatever came
        json_decref(rec);
        rp_bench_result_deinit(&r);
    }
    assert_true(ok > 0 && failed > 0);
    rp_free(buf);
}

/* ---- arithmetic ------------------------------------------------------------------ */

static void test_median_range(void **state)
{
    double v[] = {5, NAN, 1, 3, INFINITY};
    assert_true(rp_bench_median(v, 5) == 3);
    assert_true(rp_bench_median(v, 4) == 3);
    double even[] = {4, 1, 3, 2};
    assert_true(rp_bench_median(even, 4) == 2.5);
    double none[] = {NAN, NAN};
    assert_true(isnan(rp_bench_median(none, 2)));
    assert_true(isnan(rp_bench_median(NULL, 0)));
    double lo, hi;
    rp_bench_range(v, 5, &lo, &hi);
    assert_true(lo == 1 && hi == 5);
    rp_bench_range(none, 2, &lo, &hi);
    assert_true(isnan(lo) && isnan(hi));
}

static void test_metrics_undefined(void **state)
{
    rp_bench_result r;
    rp_bench_result_init(&r);
    rp_bench_metrics m;
    r.t_sent = 1;
    rp_bench_metrics_of(&r, &m); // no token at all
    assert_true(isnan(m.ttft_s) && isnan(m.e2e_s) && isnan(m.decode_tok_s));
    r.t_first = r.t_last = 2;
    r.completion_tokens = 5;
    r.token_chunks = 1; // all tokens in one chunk: no span to divide by
    rp_bench_metrics_of(&r, &m);
    assert_true(m.ttft_s == 1 && m.e2e_s == 1 && isnan(m.decode_tok_s));
    r.t_last = 4;
    r.token_chunks = 3;
    r.completion_tokens = -1; // no usage
    rp_bench_metrics_of(&r, &m);
    assert_true(isnan(m.decode_tok_s));
    r.completion_tokens = 9;
    rp_bench_metrics_of(&r, &m);
    assert_true(m.decode_tok_s == 4.0 && m.e2e_s == 3.0);
    // Three chunks within 0.1 ms: a burst of held-back text, no decode rate.
    r.t_last = 2 + 1.5e-4;
    rp_bench_metrics_of(&r, &m);
    assert_true(isnan(m.decode_tok_s));
    r.t_last = 2 + 2.5e-4; // 0.125 ms apart on average: a (fast) stream
    rp_bench_metrics_of(&r, &m);
    assert_true(isfinite(m.decode_tok_s));
    r.token_chunks = 2; // a held-back reply flushed in two pieces
    r.t_last = 4;
    rp_bench_metrics_of(&r, &m);
    assert_true(isnan(m.decode_tok_s));
}

static void test_aggregate_over_streams(void **state)
{
    json_t *recs =
        test_json("[{\"task\":\"c\",\"run\":0,\"stream\":1,\"t_sent\":0,\"t_first\":2,\"t_last\":5,\"ttft_s\":2,"
                  "\"completion_tokens\":9,\"prompt_tokens\":10,\"cached_tokens\":0,\"error\":null},"
                  " {\"task\":\"c\",\"run\":0,\"stream\":0,\"t_sent\":0,\"t_first\":1,\"t_last\":3,\"ttft_s\":1,"
                  "\"completion_tokens\":11,\"prompt_tokens\":10,\"cached_tokens\":4,\"error\":null},"
                  " {\"task\":\"c\",\"run\":0,\"stream\":2,\"t_sent\":0.5,\"t_first\":1.5,\"t_last\":4,\"ttft_s\":1,"
                  "\"completion_tokens\":3,\"prompt_tokens\":10,\"cached_tokens\":0,\"error\":null}]");
    const json_t *sel[4];
    assert_int_equal(rp_bench_select(recs, "c", 0, sel, 4), 3);
    assert_int_equal(json_integer_value(json_object_get(sel[0], "stream")), 0); // ordered by stream
    assert_int_equal(json_integer_value(json_object_get(sel[2], "stream")), 2);
    rp_bench_measure m;
    rp_bench_measure_records(sel, 3, &m);
    assert_int_equal(m.n_errors, 0);
    assert_true(m.decode_tok_s == 5.0); // (8 + 10 + 2) / (5 - 1)
    assert_true(m.e2e_s == 5.0);        // latest last token - earliest send
    assert_true(m.ttft_s == 1.0);       // median of 1, 2, 1
    assert_int_equal(m.completion_tokens, 23);
    assert_int_equal(m.cached_tokens, 4);
    assert_true(isnan(m.stream_decode_tok_s)); // the records carry no per-stream rate
    // A stream whose 3 tokens came at one instant: no decode interval, so no aggregate
    // (summing over the streams' spread of arrival times would give a rate of nothing).
    json_object_set_new(json_array_get(recs, 2), "t_last", json_real(1.5));
    rp_bench_measure_records(sel, 3, &m);
    assert_true(isnan(m.decode_tok_s));
    assert_true(m.e2e_s == 5.0);
    json_object_set_new(json_array_get(recs, 2), "t_last", json_real(4));
    // One failed stream: no aggregate.
    json_object_set_new(json_array_get(recs, 2), "error", json_string("HTTP 503: busy"));
    rp_bench_measure_records(sel, 3, &m);
    assert_int_equal(m.n_errors, 1);
    assert_true(isnan(m.decode_tok_s) && isnan(m.e2e_s));
    json_decref(recs);
}

static void test_summary(void **state)
{
    // Task a over three runs (one failed), task b once, two tool cases per run.
    json_t *recs =
        test_json("[{\"scenario\":\"tasks\",\"task\":\"a\",\"run\":0,\"ttft_s\":0.5,\"decode_tok_s\":10,\"e2e_s\":3,"
                  "\"prompt_tokens\":100,\"completion_tokens\":21,\"cached_tokens\":0,\"error\":null},"
                  " {\"scenario\":\"tasks\",\"task\":\"a\",\"run\":1,\"ttft_s\":0.25,\"decode_tok_s\":30,\"e2e_s\":1,"
                  "\"prompt_tokens\":100,\"completion_tokens\":21,\"cached_tokens\":0,\"error\":null},"
                  " {\"scenario\":\"tasks\",\"task\":\"a\",\"run\":2,\"ttft_s\":null,\"error\":\"HTTP 500: x\"},"
                  " {\"scenario\":\"prefill\",\"task\":\"p\",\"run\":0,\"ttft_s\":2,\"prompt_tokens\":1000,"
                  "\"cached_tokens\":200,\"completion_tokens\":1,\"error\":null},"
                  " {\"scenario\":\"tools\",\"task\":\"t1\",\"run\":0,\"pass\":true,\"error\":null},"
                  " {\"scenario\":\"tools\",\"task\":\"t2\",\"run\":0,\"pass\":false,\"error\":null},"
                  " {\"scenario\":\"tools\",\"task\":\"t1\",\"run\":1,\"pass\":true,\"error\":null},"
                  " {\"scenario\":\"tools\",\"task\":\"t2\",\"run\":1,\"pass\":true,\"error\":null}]");
    json_t *s = rp_bench_summary(recs);
    assert_non_null(s);
    assert_int_equal(json_integer_value(json_object_get(s, "requests")), 8);
    assert_int_equal(json_integer_value(json_object_get(s, "failed")), 1);
    assert_int_equal(json_integer_value(json_object_get(s, "runs")), 3);
    const json_t *a = json_array_get(json_object_get(s, "tasks"), 0);
    assert_string_equal(json_string_value(json_object_get(a, "task")), "a");
    assert_string_equal(json_string_value(json_object_get(a, "scenario")), "tasks");
    assert_int_equal(json_integer_value(json_object_get(a, "runs")), 3);
    assert_int_equal(json_integer_value(json_object_get(a, "errors")), 1);
    const json_t *dec = json_object_get(a, "decode_tok_s");
    assert_true(json_real_value(json_object_get(dec, "median")) == 20.0); // the failed run has no figure
    assert_true(json_real_value(json_object_get(dec, "min")) == 10.0);
    assert_true(json_real_value(json_object_get(dec, "max")) == 30.0);
    assert_true(json_real_value(json_object_get(json_object_get(a, "ttft_s"), "median")) == 0.375);
    assert_true(json_real_value(json_object_get(json_object_get(a, "e2e_s"), "median")) == 2.0);
    assert_true(json_real_value(json_object_get(a, "completion_tokens")) == 21.0);
    const json_t *p = json_array_get(json_object_get(s, "tasks"), 1);
    // (1000 - 200 cached) / 2 s
    assert_true(json_real_value(json_object_get(json_object_get(p, "prefill_tok_s"), "median")) == 400.0);
    const json_t *tools = json_object_get(s, "tools");
    assert_int_equal(json_integer_value(json_object_get(tools, "cases")), 2);
    assert_true(json_real_value(json_object_get(tools, "pass_rate_median")) == 0.75);
    json_decref(s);
    json_decref(recs);
}

static void test_concurrency_summary(void **state)
{
    // Levels 1 and 2 over two runs: aggregate medians 10 and 25 -> 2.5x one stream.
    json_t *recs = test_json(
        "[{\"scenario\":\"concurrency\",\"task\":\"concurrency-n1\",\"run\":0,\"n_streams\":1,\"stream\":0,"
        "\"decode_tok_s\":8,\"t_sent\":0,\"t_first\":1,\"t_last\":2,\"completion_tokens\":9,\"error\":null},"
        " {\"scenario\":\"concurrency\",\"task\":\"concurrency-n1\",\"run\":1,\"n_streams\":1,\"stream\":0,"
        "\"decode_tok_s\":12,\"t_sent\":0,\"t_first\":1,\"t_last\":2,\"completion_tokens\":13,\"error\":null},"
        " {\"scenario\":\"concurrency\",\"task\":\"concurrency-n2\",\"run\":0,\"n_streams\":2,\"stream\":0,"
        "\"decode_tok_s\":10,\"t_sent\":0,\"t_first\":1,\"t_last\":2,\"completion_tokens\":11,\"error\":null},"
        " {\"scenario\":\"concurrency\",\"task\":\"concurrency-n2\",\"run\":0,\"n_streams\":2,\"stream\":1,"
        "\"decode_tok_s\":14,\"t_sent\":0,\"t_first\":1,\"t_last\":2,\"completion_tokens\":11,\"error\":null},"
        " {\"scenario\":\"concurrency\",\"task\":\"concurrency-n2\",\"run\":1,\"n_streams\":2,\"stream\":0,"
        "\"decode_tok_s\":12,\"t_sent\":0,\"t_first\":1,\"t_last\":2,\"completion_tokens\":16,\"error\":null},"
        " {\"scenario\":\"concurrency\",\"task\":\"concurrency-n2\",\"run\":1,\"n_streams\":2,\"stream\":1,"
        "\"decode_tok_s\":16,\"t_sent\":0,\"t_first\":1,\"t_last\":2,\"completion_tokens\":16,\"error\":null}]");
    const json_t *sel[2];
    assert_int_equal(rp_bench_select(recs, "concurrency-n2", 0, sel, 2), 2);
    rp_bench_measure m;
    rp_bench_measure_records(sel, 2, &m);
    assert_true(m.decode_tok_s == 20.0);        // (10 + 10) / (2 - 1)
    assert_true(m.stream_decode_tok_s == 12.0); // median of 10 and 14
    assert_int_equal(rp_bench_select(recs, "concurrency-n1", 1, sel, 2), 1);
    rp_bench_measure_records(sel, 1, &m);
    assert_true(m.decode_tok_s == 12.0 && m.stream_decode_tok_s == 12.0);
    json_t *s = rp_bench_summary(recs);
    assert_non_null(s);
    const json_t *c = json_object_get(s, "concurrency");
    assert_int_equal(json_array_size(c), 2);
    const json_t *l1 = json_array_get(c, 0), *l2 = json_array_get(c, 1);
    assert_int_equal(json_integer_value(json_object_get(l1, "streams")), 1);
    assert_true(json_real_value(json_object_get(l1, "decode_tok_s")) == 10.0);
    assert_true(json_real_value(json_object_get(l1, "vs_one_stream")) == 1.0);
    assert_int_equal(json_integer_value(json_object_get(l2, "streams")), 2);
    assert_true(json_real_value(json_object_get(l2, "decode_tok_s")) == 25.0);        // runs: 20 and 30
    assert_true(json_real_value(json_object_get(l2, "stream_decode_tok_s")) == 13.0); // runs: 12 and 14
    assert_true(json_real_value(json_object_get(l2, "vs_one_stream")) == 2.5);
    // The per-task summary of a multi-stream task has the per-stream rate too.
    const json_t *t2 = json_array_get(json_object_get(s, "tasks"), 1);
    assert_true(json_real_value(json_object_get(json_object_get(t2, "stream_decode_tok_s"), "median")) == 13.0);
    assert_null(json_object_get(json_array_get(json_object_get(s, "tasks"), 0), "stream_decode_tok_s"));
    assert_null(json_object_get(s, "interference"));
    json_decref(s);
    // Without the one-stream level there is no ratio.
    json_array_remove(recs, 0);
    json_array_remove(recs, 0);
    s = rp_bench_summary(recs);
    assert_true(json_is_null(json_object_get(json_array_get(json_object_get(s, "concurrency"), 0), "vs_one_stream")));
    json_decref(s);
    json_decref(recs);
}

static void test_max_gap(void **state)
{
    const double t[] = {1.0, 1.5, 3.5, 3.75, 6.0, 6.25};
    assert_true(rp_bench_max_gap(t, 6, -INFINITY, 3.0) == 0.5);      // only 1.0 -> 1.5 ends before 3
    assert_true(rp_bench_max_gap(t, 6, 3.0, 6.0) == 2.0);            // 1.5 -> 3.5 ends in [3, 6)
    assert_true(rp_bench_max_gap(t, 6, 6.0, INFINITY) == 2.25);      // 3.75 -> 6.0
    assert_true(isnan(rp_bench_max_gap(t, 6, 4.0, 5.0)));            // no gap ends there
    assert_true(isnan(rp_bench_max_gap(t, 1, -INFINITY, INFINITY))); // one chunk: no gap
    assert_true(isnan(rp_bench_max_gap(NULL, 0, -INFINITY, INFINITY)));
}

static void test_interference_summary_and_delta(void **state)
{
    json_t *recs =
        test_json("[{\"scenario\":\"interference\",\"task\":\"interference-streams\",\"run\":0,\"stream\":0,"
                  "\"gap_before_s\":0.01,\"gap_during_s\":0.3,\"gap_after_s\":0.02,\"error\":null},"
                  " {\"scenario\":\"interference\",\"task\":\"interference-streams\",\"run\":0,\"stream\":1,"
                  "\"gap_before_s\":0.03,\"gap_during_s\":0.5,\"gap_after_s\":null,\"error\":null},"
                  " {\"scenario\":\"interference\",\"task\":\"interference-prompt\",\"run\":0,\"chunk_s\":0.25,"
                  "\"error\":null}]");
    json_t *s = rp_bench_summary(recs);
    const json_t *in = json_object_get(s, "interference");
    assert_non_null(in);
    const json_t *r0 = json_array_get(json_object_get(in, "per_run"), 0);
    assert_true(json_real_value(json_object_get(r0, "gap_before_s")) == 0.03);
    assert_true(json_real_value(json_object_get(r0, "gap_during_s")) == 0.5);
    assert_true(json_real_value(json_object_get(r0, "gap_after_s")) == 0.02);
    assert_true(json_real_value(json_object_get(r0, "during_vs_chunk")) == 2.0);
    assert_true(json_real_value(json_object_get(in, "during_vs_chunk")) == 2.0);
    assert_null(json_object_get(s, "concurrency"));
    json_decref(s);
    json_decref(recs);

    json_t *a = test_json("{\"engine\":{\"steps\":5,\"step_seconds\":1.0,\"forward_seconds\":0.5,"
                          "\"forward_by_batch\":[{\"tokens_min\":1,\"tokens_max\":1,\"steps\":5,\"tokens\":5,"
                          "\"seconds\":0.5}]}}");
    json_t *b = test_json("{\"engine\":{\"steps\":9,\"step_seconds\":2.0,\"forward_seconds\":1.25,"
                          "\"forward_by_batch\":[{\"tokens_min\":1,\"tokens_max\":1,\"steps\":5,\"tokens\":5,"
                          "\"seconds\":0.5},{\"tokens_min\":3,\"tokens_max\":4,\"steps\":4,\"tokens\":14,"
                          "\"seconds\":0.75}]}}");
    json_t *d = rp_bench_engine_delta(a, b);
    assert_non_null(d);
    assert_int_equal(json_integer_value(json_object_get(d, "steps")), 4);
    assert_true(json_real_value(json_object_get(d, "step_seconds")) == 1.0);
    assert_true(json_real_value(json_object_get(d, "forward_seconds")) == 0.75);
    const json_t *bk = json_object_get(d, "forward_by_batch");
    assert_int_equal(json_array_size(bk), 1); // the bucket that counted nothing is left out
    assert_int_equal(json_integer_value(json_object_get(json_array_get(bk, 0), "tokens_min")), 3);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(bk, 0), "tokens")), 14);
    json_decref(d);
    // Another server's status (or none): no delta.
    json_t *other = test_json("{\"status\":\"ok\"}");
    assert_null(rp_bench_engine_delta(a, other));
    assert_null(rp_bench_engine_delta(NULL, b));
    json_decref(other);
    json_decref(a);
    json_decref(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sse_every_split),
        cmocka_unit_test(test_sse_byte_by_byte),
        cmocka_unit_test(test_sse_callback_error_stops),
        cmocka_unit_test(test_stream_exact_metrics_every_split),
        cmocka_unit_test(test_stream_tool_calls),
        cmocka_unit_test(test_stream_errors),
        cmocka_unit_test(test_stream_nul_and_utf8),
        cmocka_unit_test(test_stream_mutations),
        cmocka_unit_test(test_median_range),
        cmocka_unit_test(test_metrics_undefined),
        cmocka_unit_test(test_aggregate_over_streams),
        cmocka_unit_test(test_concurrency_summary),
        cmocka_unit_test(test_max_gap),
        cmocka_unit_test(test_interference_summary_and_delta),
        cmocka_unit_test(test_summary),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
