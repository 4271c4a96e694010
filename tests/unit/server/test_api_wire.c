/*
 * test_api_wire.c - the Anthropic and Responses APIs through the real server
 * in-process (bundled tiny model, loopback, raw sockets): /v1/messages whole
 * and streamed (every frame with its event line; greedy stream == greedy
 * whole; the repeat's prompt read from the prefix cache), count_tokens == the prompt a message request reports, tools forced
 * by tool_choice (tool_use / function_call, streamed and whole), stop
 * sequences, max_tokens, errors in each API's shape (400 naming the field,
 * 401, 404 unknown path), 503 overloaded with Retry-After when the queue is
 * full, and a streaming client that hangs up cancelling its generation;
 * /v1/responses whole and streamed (sequence numbers, completed and
 * incomplete), previous_response_id refused. The server keeps serving after
 * every error.
 */
#include "test_util.h"

#include "sse_parse.h"
#include "wire_server.h"

#define KEY "wire-key"
#define XKEY "x-api-key: " KEY "\r\nanthropic-version: 2023-06-01\r\n"
#define BEARER "Authorization: Bearer " KEY "\r\n"

static int setup(void **state)
{
    (void)state;
    wire_ctx = 8192; // the busy test's stream must outlast its requests (1,024 tokens took 0.35 s)
    return wire_server_start(KEY, 0);
}

static int teardown(void **state)
{
    (void)state;
    wire_server_stop();
    return 0;
}

static const char *str(const json_t *o, const char *k)
{
    return json_string_value(json_object_get(o, k));
}

static long long num(const json_t *o, const char *k)
{
    return json_integer_value(json_object_get(o, k));
}

static void expect_anthropic_error(const wire_resp *r, int status, const char *type)
{
    if (r->status != status)
        fail_msg("status %d, expected %d: %s", r->status, status, r->body);
    json_t *v = body_json(r);
    assert_string_equal(str(v, "type"), "error");
    json_t *err = json_object_get(v, "error");
    assert_string_equal(str(err, "type"), type);
    assert_true(strlen(str(err, "message")) > 0);
    json_decref(v);
}

#define PROMPT "Write a python function that adds two numbers."
#define MSG_BODY(extra)                                                                                                \
    "{\"model\":\"claude-sonnet-4-5\",\"max_tokens\":24,\"temperature\":0,\"messages\":[{\"role\":\"user\","           \
    "\"content\":\"" PROMPT "\"}]" extra "}"

// A streamed Message accumulated from its frames (checks every frame has its event line).
typedef struct acc_msg {
    rp_buf text, thinking;
    const char *stop_reason;
    json_t *start, *delta; // message_start's message, message_delta (kept for the strings)
    int n_tool_use;
    char tool_name[64];
    json_t *tool_input;
} acc_msg;

static void accumulate_message(const char *body, acc_msg *a)
{
    memset(a, 0, sizeof(*a));
    rp_buf_init(&a->text);
    rp_buf_init(&a->thinking);
    sse_frame f[1024];
    int n = sse_parse(body, f, 1024);
    assert_true(n >= 5);
    assert_string_equal(f[0].event, "message_start");
    assert_string_equal(f[1].event, "ping");
    assert_string_equal(f[n - 1].event, "message_stop");
    assert_string_equal(f[n - 2].event, "message_delta");
    rp_buf pj;
    rp_buf_init(&pj);
    for (int i = 0; i < n; i++) {
        assert_non_null(f[i].event);
        assert_non_null(f[i].json);
        assert_string_equal(f[i].event, sse_str(f[i].json, "type"));
        json_t *d = f[i].json;
        if (strcmp(f[i].event, "message_start") == 0) {
            a->start = json_incref(json_object_get(d, "message"));
        } else if (strcmp(f[i].event, "content_block_start") == 0) {
            json_t *cb = json_object_get(d, "content_block");
            if (strcmp(str(cb, "type"), "tool_use") == 0) {
                a->n_tool_use++;
                snprintf(a->tool_name, sizeof(a->tool_name), "%s", str(cb, "name"));
                assert_memory_equal(str(cb, "id"), "toolu_", 6);
                rp_buf_reset(&pj);
            }
        } else if (strcmp(f[i].event, "content_block_delta") == 0) {
            json_t *dl = json_object_get(d, "delta");
            const char *t = str(dl, "type");
            if (strcmp(t, "text_delta") == 0)
                rp_buf_puts(&a->text, str(dl, "text"));
            else if (strcmp(t, "thinking_delta") == 0)
                rp_buf_puts(&a->thinking, str(dl, "thinking"));
            else if (strcmp(t, "input_json_delta") == 0)
                rp_buf_puts(&pj, str(dl, "partial_json"));
        } else if (strcmp(f[i].event, "content_block_stop") == 0 && pj.len) {
            json_decref(a->tool_input);
            a->tool_input = json_loads(pj.data, 0, NULL);
            assert_non_null(a->tool_input);
            rp_buf_reset(&pj);
        } else if (strcmp(f[i].event, "message_delta") == 0) {
            a->delta = json_incref(d);
            a->stop_reason = str(json_object_get(d, "delta"), "stop_reason");
        }
    }
    rp_buf_deinit(&pj);
    sse_free(f, n);
}

static void acc_free(acc_msg *a)
{
    rp_buf_deinit(&a->text);
    rp_buf_deinit(&a->thinking);
    json_decref(a->start);
    json_decref(a->delta);
    json_decref(a->tool_input);
}

// The concatenated text blocks of a Message (and its thinking).
static void message_text(const json_t *m, rp_buf *text, rp_buf *thinking)
{
    size_t i;
    const json_t *b;
    json_array_foreach(json_object_get(m, "content"), i, b) {
        if (strcmp(str(b, "type"), "text") == 0)
            rp_buf_puts(text, str(b, "text"));
        else if (strcmp(str(b, "type"), "thinking") == 0)
            rp_buf_puts(thinking, str(b, "thinking"));
    }
}

static void test_messages_stream_matches_whole(void **state)
{
    (void)state;
    wire_resp r;
    wire_request("POST", "/v1/messages?beta=true", XKEY, MSG_BODY(""), &r);
    assert_int_equal(r.status, 200);
    json_t *whole = body_json(&r);
    free(r.body);
    assert_string_equal(str(whole, "type"), "message");
    assert_string_equal(str(whole, "role"), "assistant");
    assert_string_equal(str(whole, "model"), "rapid-tiny");
    assert_memory_equal(str(whole, "id"), "msg_", 4);
    json_t *usage = json_object_get(whole, "usage");
    assert_true(num(usage, "input_tokens") > 5);
    assert_true(num(usage, "output_tokens") >= 1 && num(usage, "output_tokens") <= 24);
    assert_true(json_is_integer(json_object_get(usage, "cache_read_input_tokens")));
    rp_buf text, thinking;
    rp_buf_init(&text);
    rp_buf_init(&thinking);
    message_text(whole, &text, &thinking);

    wire_request("POST", "/v1/messages", BEARER, MSG_BODY(",\"stream\":true"), &r); // Bearer works too
    assert_int_equal(r.status, 200);
    assert_string_equal(wire_header(&r, "Content-Type"), "text/event-stream");
    acc_msg a;
    accumulate_message(r.body, &a);
    free(r.body);
    assert_string_equal(a.text.data ? a.text.data : "", text.data ? text.data : "");
    assert_string_equal(a.thinking.data ? a.thinking.data : "", thinking.data ? thinking.data : "");
    assert_string_equal(a.stop_reason, str(whole, "stop_reason"));
    json_t *du = json_object_get(a.delta, "usage");
    assert_int_equal(num(du, "output_tokens"), num(usage, "output_tokens"));
    assert_int_equal(num(du, "input_tokens") + num(du, "cache_read_input_tokens"),
                     num(usage, "input_tokens") + num(usage, "cache_read_input_tokens"));
    // The repeat finds its prompt in the prefix cache: whole 16-token blocks, less one
    // token (the model has an MTP layer, so the last cached position runs again).
    long long total = num(usage, "input_tokens") + num(usage, "cache_read_input_tokens");
    assert_true(total > 16);
    assert_int_equal(num(usage, "cache_read_input_tokens"), 0);
    assert_int_equal(num(du, "cache_read_input_tokens"), total / 16 * 16 - 1);
    assert_string_equal(str(a.start, "model"), "rapid-tiny");
    acc_free(&a);

    // count_tokens counts the same prompt.
    wire_request("POST", "/v1/messages/count_tokens?beta=true", XKEY,
                 "{\"model\":\"claude-sonnet-4-5\",\"messages\":[{\"role\":\"user\",\"content\":\"" PROMPT "\"}]}", &r);
    assert_int_equal(r.status, 200);
    json_t *ct = body_json(&r);
    free(r.body);
    assert_int_equal(json_object_size(ct), 1);
    assert_int_equal(num(ct, "input_tokens"), num(usage, "input_tokens") + num(usage, "cache_read_input_tokens"));
    json_decref(ct);
    rp_buf_deinit(&text);
    rp_buf_deinit(&thinking);
    json_decref(whole);

    // Thinking asked for: a thinking block first, streamed as thinking_delta, the same as the whole reply.
#define THINK ",\"max_tokens\":200,\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":1024}"
    wire_request("POST", "/v1/messages", XKEY, MSG_BODY(THINK), &r);
    assert_int_equal(r.status, 200);
    whole = body_json(&r);
    free(r.body);
    json_t *first = json_array_get(json_object_get(whole, "content"), 0);
    assert_string_equal(str(first, "type"), "thinking");
    assert_true(strlen(str(first, "signature")) > 0);
    rp_buf_init(&text);
    rp_buf_init(&thinking);
    message_text(whole, &text, &thinking);
    assert_true(thinking.len > 0);
    assert_null(strstr(thinking.data, "<think>"));
    wire_request("POST", "/v1/messages", XKEY, MSG_BODY(THINK ",\"stream\":true"), &r);
    accumulate_message(r.body, &a);
    free(r.body);
    assert_string_equal(a.thinking.data, thinking.data);
    assert_string_equal(a.text.data ? a.text.data : "", text.data ? text.data : "");
    acc_free(&a);
    rp_buf_deinit(&text);
    rp_buf_deinit(&thinking);
    json_decref(whole);
}

#define TOOLS                                                                                                          \
    "\"tools\":[{\"name\":\"get_weather\",\"description\":\"Get the weather for a city\",\"input_schema\":{"           \
    "\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}}]"

static void test_messages_tools_and_stops(void **state)
{
    (void)state;
    const char *body = "{\"model\":\"m\",\"max_tokens\":64,\"temperature\":0,\"messages\":[{\"role\":\"user\","
                       "\"content\":\"What is the weather in Paris?\"}]," TOOLS
                       ",\"tool_choice\":{\"type\":\"tool\",\"name\":\"get_weather\"}}";
    wire_resp r;
    wire_request("POST", "/v1/messages", XKEY, body, &r);
    assert_int_equal(r.status, 200);
    json_t *whole = body_json(&r);
    free(r.body);
    json_t *tu = NULL;
    size_t i;
    json_t *b;
    json_array_foreach(json_object_get(whole, "content"), i, b) {
        if (strcmp(str(b, "type"), "tool_use") == 0)
            tu = b;
    }
    if (!tu)
        fail_msg("no tool_use block: %s", json_dumps(whole, 0));
    assert_string_equal(str(tu, "name"), "get_weather");
    assert_true(json_is_object(json_object_get(tu, "input")));
    assert_string_equal(str(whole, "stop_reason"), "tool_use");

    // Streamed: the same call, its input from input_json_delta.
    char sbody[1024];
    snprintf(sbody, sizeof(sbody), "%.*s,\"stream\":true}", (int)strlen(body) - 1, body);
    wire_request("POST", "/v1/messages", XKEY, sbody, &r);
    acc_msg a;
    accumulate_message(r.body, &a);
    free(r.body);
    assert_int_equal(a.n_tool_use, 1);
    assert_string_equal(a.tool_name, "get_weather");
    assert_true(json_equal(a.tool_input, json_object_get(tu, "input")));
    assert_string_equal(a.stop_reason, "tool_use");
    acc_free(&a);
    json_decref(whole);

    // A tool result goes back in; tool_choice none: plain text.
    wire_request("POST", "/v1/messages", XKEY,
                 "{\"max_tokens\":8,\"temperature\":0,\"messages\":[{\"role\":\"user\",\"content\":\"Weather in "
                 "Paris?\"},{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":"
                 "\"get_weather\",\"input\":{\"city\":\"Paris\"}}]},{\"role\":\"user\",\"content\":[{\"type\":"
                 "\"tool_result\",\"tool_use_id\":\"toolu_1\",\"content\":\"sunny, 21C\"}]}]," TOOLS
                 ",\"tool_choice\":{\"type\":\"none\"}}",
                 &r);
    assert_int_equal(r.status, 200);
    whole = body_json(&r);
    free(r.body);
    json_array_foreach(json_object_get(whole, "content"), i, b) {
        assert_string_not_equal(str(b, "type"), "tool_use");
    }
    json_decref(whole);

    // max_tokens; then a stop sequence taken from the greedy text.
    wire_request("POST", "/v1/messages", XKEY,
                 "{\"max_tokens\":3,\"temperature\":0,\"thinking\":{\"type\":\"disabled\"},\"messages\":[{\"role\":"
                 "\"user\",\"content\":\"" PROMPT "\"}]}",
                 &r);
    whole = body_json(&r);
    free(r.body);
    assert_string_equal(str(whole, "stop_reason"), "max_tokens");
    assert_int_equal(num(json_object_get(whole, "usage"), "output_tokens"), 3);
    json_decref(whole);
    wire_request("POST", "/v1/messages", XKEY, MSG_BODY(",\"thinking\":{\"type\":\"disabled\"}"), &r);
    whole = body_json(&r);
    free(r.body);
    rp_buf text, th;
    rp_buf_init(&text);
    rp_buf_init(&th);
    message_text(whole, &text, &th);
    json_decref(whole);
    if (text.len < 6)
        fail_msg("the greedy reply is too short to cut: '%s'", text.data ? text.data : "");
    char stop[4];
    snprintf(stop, sizeof(stop), "%.3s", text.data + text.len / 2);
    json_t *sj = json_string(stop);
    assert_non_null(sj); // three bytes from the middle may split a character: then this test needs other text
    char *sq = json_dumps(sj, JSON_ENCODE_ANY);
    json_decref(sj);
    size_t first = (size_t)(strstr(text.data, stop) - text.data);
    for (int streaming = 0; streaming < 2; streaming++) {
        char bb[1024];
        snprintf(bb, sizeof(bb),
                 MSG_BODY(",\"thinking\":{\"type\":\"disabled\"},\"stop_sequences\":[%s],\"stream\":%s"), sq,
                 streaming ? "true" : "false");
        wire_request("POST", "/v1/messages", XKEY, bb, &r);
        assert_int_equal(r.status, 200);
        rp_buf got, gth;
        rp_buf_init(&got);
        rp_buf_init(&gth);
        if (streaming) {
            acc_msg a2;
            accumulate_message(r.body, &a2);
            rp_buf_puts(&got, a2.text.data ? a2.text.data : "");
            assert_string_equal(a2.stop_reason, "stop_sequence");
            assert_string_equal(str(json_object_get(a2.delta, "delta"), "stop_sequence"), stop);
            acc_free(&a2);
        } else {
            whole = body_json(&r);
            message_text(whole, &got, &gth);
            assert_string_equal(str(whole, "stop_reason"), "stop_sequence");
            assert_string_equal(str(whole, "stop_sequence"), stop);
            json_decref(whole);
        }
        free(r.body);
        assert_int_equal(got.len, first);
        assert_memory_equal(got.data ? got.data : "", text.data, first);
        rp_buf_deinit(&got);
        rp_buf_deinit(&gth);
    }
    free(sq);
    rp_buf_deinit(&text);
    rp_buf_deinit(&th);
}

static void test_messages_errors(void **state)
{
    (void)state;
    wire_resp r;
    static const char *bad[] = {
        "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
        "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"source\":{}}]}]}",
        "{\"max_tokens\":5,\"temperature\":1.5,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
        "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}",
        "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"\xc3\x28\"}]}",
        "[]",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        wire_request("POST", "/v1/messages", XKEY, bad[i], &r);
        expect_anthropic_error(&r, 400, "invalid_request_error");
        free(r.body);
    }
    wire_request("POST", "/v1/messages", NULL, MSG_BODY(""), &r);
    expect_anthropic_error(&r, 401, "authentication_error");
    free(r.body);
    wire_request("POST", "/v1/messages/count_tokens", "x-api-key: wrong\r\n", "{}", &r);
    expect_anthropic_error(&r, 401, "authentication_error");
    free(r.body);
    wire_request("POST", "/v1/messages/batches", XKEY, "{}", &r);
    expect_anthropic_error(&r, 404, "not_found_error");
    free(r.body);
    wire_request("POST", "/v1/messages/count_tokens", XKEY, "{\"messages\":7}", &r);
    expect_anthropic_error(&r, 400, "invalid_request_error");
    free(r.body);
    // The prompt alone does not fit the context.
    char *longp = malloc(80000);
    strcpy(longp, "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"");
    for (int i = 0; i < 12000; i++)
        strcat(longp, "word ");
    strcat(longp, "\"}]}");
    wire_request("POST", "/v1/messages", XKEY, longp, &r);
    expect_anthropic_error(&r, 400, "invalid_request_error");
    assert_non_null(strstr(r.body, "8192"));
    free(r.body);
    free(longp);
    still_serving();
}

static void test_busy_and_disconnect(void **state)
{
    (void)state;
    wait_idle();
    rp_engine_stats before, after;
    rp_engine_get_stats(engine, &before);
    // One generating (an OpenAI stream that ignores EOS), one Anthropic stream queued behind it.
    // Sampled at temperature 2: a greedy reply falls into a loop that speculation copies 30
    // tokens a step, and the generation would reach the context's end before the requests below.
    int a = wire_open_stream("/v1/chat/completions", BEARER,
                             "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":100000,"
                             "\"ignore_eos\":true,\"temperature\":2,\"seed\":1,\"stream\":true}");
    wait_running(); // the queue's one place is free again
    // b's first frame (message_start) waits up to half a second for its admission: a must run
    // longer than that (hence the 8,192-token context), and b is in the engine's queue before
    // the next request comes.
    int b = wire_open_stream("/v1/messages", XKEY, MSG_BODY(",\"stream\":true"));
    wait_queue_full();
    wire_resp r;
    wire_request("POST", "/v1/messages", XKEY, MSG_BODY(""), &r); // the queue is full
    expect_anthropic_error(&r, 503, "overloaded_error");
    assert_string_equal(wire_header(&r, "Retry-After"), "1");
    free(r.body);
    wire_request("POST", "/v1/responses", BEARER, "{\"input\":\"hi\"}", &r);
    assert_int_equal(r.status, 503);
    json_t *v = body_json(&r);
    assert_non_null(str(json_object_get(v, "error"), "message"));
    json_decref(v);
    free(r.body);
    close(b); // the queued Anthropic stream goes away, then the running one
    close(a);
    wait_idle();
    rp_engine_get_stats(engine, &after);
    assert_true(after.requests_cancelled >= before.requests_cancelled + 2);
    still_serving();
}

/* ---- Responses --------------------------------------------------------------- */

#define RESP_BODY(extra)                                                                                               \
    "{\"model\":\"gpt-5-codex\",\"instructions\":\"Be brief.\",\"max_output_tokens\":24,\"temperature\":0,"            \
    "\"input\":[{\"type\":\"message\",\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"" PROMPT      \
    "\"}]}]" extra "}"

// The final Response of a stream (checking event lines and sequence numbers); *last gets its event.
static json_t *final_response(const char *body, char *last, size_t cap, rp_buf *text)
{
    sse_frame f[1024];
    int n = sse_parse(body, f, 1024);
    assert_true(n >= 3);
    assert_string_equal(f[0].event, "response.created");
    assert_string_equal(f[1].event, "response.in_progress");
    for (int i = 0; i < n; i++) {
        assert_non_null(f[i].json);
        assert_string_equal(f[i].event, sse_str(f[i].json, "type"));
        assert_int_equal(sse_int(f[i].json, "sequence_number"), i);
        if (strcmp(f[i].event, "response.output_text.delta") == 0)
            rp_buf_puts(text, sse_str(f[i].json, "delta"));
    }
    snprintf(last, cap, "%s", f[n - 1].event);
    json_t *resp = json_incref(json_object_get(f[n - 1].json, "response"));
    sse_free(f, n);
    return resp;
}

static const char *output_text(const json_t *resp, rp_buf *out)
{
    size_t i;
    const json_t *it;
    json_array_foreach(json_object_get(resp, "output"), i, it) {
        if (strcmp(str(it, "type"), "message") == 0)
            rp_buf_puts(out, str(json_array_get(json_object_get(it, "content"), 0), "text"));
    }
    return out->data ? out->data : "";
}

static void test_responses(void **state)
{
    (void)state;
    wire_resp r;
    wire_request("POST", "/v1/responses", BEARER, RESP_BODY(""), &r);
    assert_int_equal(r.status, 200);
    json_t *whole = body_json(&r);
    free(r.body);
    assert_string_equal(str(whole, "object"), "response");
    assert_memory_equal(str(whole, "id"), "resp_", 5);
    assert_string_equal(str(whole, "model"), "rapid-tiny");
    const char *status = str(whole, "status");
    assert_true(strcmp(status, "completed") == 0 || strcmp(status, "incomplete") == 0);
    json_t *u = json_object_get(whole, "usage");
    assert_true(num(u, "input_tokens") > 5);
    assert_int_equal(num(u, "total_tokens"), num(u, "input_tokens") + num(u, "output_tokens"));

    wire_request("POST", "/v1/responses", BEARER, RESP_BODY(",\"stream\":true"), &r);
    assert_int_equal(r.status, 200);
    char last[64];
    rp_buf deltas, a, b;
    rp_buf_init(&deltas);
    rp_buf_init(&a);
    rp_buf_init(&b);
    json_t *fin = final_response(r.body, last, sizeof(last), &deltas);
    free(r.body);
    assert_string_equal(last, strcmp(status, "completed") == 0 ? "response.completed" : "response.incomplete");
    assert_string_equal(str(fin, "status"), status);
    assert_string_equal(output_text(fin, &a), output_text(whole, &b));
    assert_string_equal(deltas.data ? deltas.data : "", a.data ? a.data : "");
    assert_int_equal(num(json_object_get(fin, "usage"), "output_tokens"), num(u, "output_tokens"));
    json_decref(fin);
    json_decref(whole);
    rp_buf_deinit(&deltas);
    rp_buf_deinit(&a);
    rp_buf_deinit(&b);

    // max_output_tokens reached: incomplete.
    wire_request("POST", "/v1/responses", BEARER,
                 "{\"input\":\"" PROMPT "\",\"max_output_tokens\":2,\"reasoning\":{\"effort\":\"none\"}}", &r);
    whole = body_json(&r);
    free(r.body);
    assert_string_equal(str(whole, "status"), "incomplete");
    assert_string_equal(str(json_object_get(whole, "incomplete_details"), "reason"), "max_output_tokens");
    json_decref(whole);

    // A forced function call, whole and streamed.
    const char *fbody =
        "{\"input\":\"What is the weather in Paris?\",\"temperature\":0,\"max_output_tokens\":64,"
        "\"tools\":[{\"type\":\"function\",\"name\":\"get_weather\",\"description\":\"Get the weather\","
        "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}},"
        "{\"type\":\"web_search\"}],\"tool_choice\":{\"type\":\"function\",\"name\":\"get_weather\"}";
    char body[1024];
    snprintf(body, sizeof(body), "%s}", fbody);
    wire_request("POST", "/v1/responses", BEARER, body, &r);
    assert_int_equal(r.status, 200);
    whole = body_json(&r);
    free(r.body);
    json_t *call = NULL;
    size_t i;
    json_t *it;
    json_array_foreach(json_object_get(whole, "output"), i, it) {
        if (strcmp(str(it, "type"), "function_call") == 0)
            call = it;
    }
    if (!call)
        fail_msg("no function_call: %s", json_dumps(whole, 0));
    assert_string_equal(str(call, "name"), "get_weather");
    json_t *args = json_loads(str(call, "arguments"), 0, NULL);
    assert_true(json_is_object(args));
    snprintf(body, sizeof(body), "%s,\"stream\":true}", fbody);
    wire_request("POST", "/v1/responses", BEARER, body, &r);
    rp_buf_init(&deltas);
    fin = final_response(r.body, last, sizeof(last), &deltas);
    free(r.body);
    json_t *scall = NULL;
    json_array_foreach(json_object_get(fin, "output"), i, it) {
        if (strcmp(str(it, "type"), "function_call") == 0)
            scall = it;
    }
    assert_non_null(scall);
    json_t *sargs = json_loads(str(scall, "arguments"), 0, NULL);
    assert_true(json_equal(args, sargs));
    json_decref(sargs);
    json_decref(args);
    json_decref(fin);
    json_decref(whole);
    rp_buf_deinit(&deltas);

    // Stateless: previous_response_id is refused in OpenAI's shape, naming the field.
    wire_request("POST", "/v1/responses", BEARER, "{\"input\":\"hi\",\"previous_response_id\":\"resp_abc\"}", &r);
    assert_int_equal(r.status, 400);
    whole = body_json(&r);
    free(r.body);
    assert_string_equal(str(json_object_get(whole, "error"), "param"), "previous_response_id");
    assert_string_equal(str(json_object_get(whole, "error"), "type"), "invalid_request_error");
    json_decref(whole);
    wire_request("POST", "/v1/responses", NULL, "{\"input\":\"hi\"}", &r);
    assert_int_equal(r.status, 401);
    free(r.body);
    still_serving();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_messages_stream_matches_whole),
        cmocka_unit_test(test_messages_tools_and_stops),
        cmocka_unit_test(test_messages_errors),
        cmocka_unit_test(test_responses),
        cmocka_unit_test(test_busy_and_disconnect),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
