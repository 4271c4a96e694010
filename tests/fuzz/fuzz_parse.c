/*
 * fuzz_parse.c - libFuzzer driver for the model-output parser (src/chat/parse_*.c).
 *
 * Input: byte 0 picks the formats (tools = b % 6, reasoning = b / 6 % 2,
 * think_open = b / 12 % 2), byte 1 the chunk size for streaming (1..32), the
 * rest is the model's reply. The reply is parsed whole (rp_parse_all) and
 * streamed in chunks of that size; both must succeed with the same content,
 * reasoning and calls, every call must carry a JSON object (kept valid UTF-8),
 * and the event stream must be well formed (a call's first event is its START,
 * every started call ends or aborts). Anything else aborts.
 */
#include <stdio.h>
#include <stdlib.h>

#include <jansson.h>

#include "chat/chat.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char fuzz_tools[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"properties\":"
    "{\"n\":{\"type\":\"integer\"},\"b\":{\"type\":\"boolean\"},\"o\":{\"type\":\"object\"}}}}}]";

static void check(bool ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_parse: invariant broken: %s (%s)\n", what, rp_error_message());
        abort();
    }
}

static bool same(const char *a, const char *b)
{
    return strcmp(a ? a : "", b ? b : "") == 0;
}

static void stream_events(const rp_parse_event *ev, size_t n, int *open)
{
    for (size_t i = 0; i < n; i++) {
        int k = ev[i].index;
        switch (ev[i].type) {
        case RP_PARSE_EVENT_TOOL_START:
            check(k >= 0 && k < 4096 && !open[k], "START for a new call");
            check(ev[i].name && ev[i].name[0] && ev[i].id, "START has a name and an id");
            open[k] = 1;
            break;
        case RP_PARSE_EVENT_TOOL_ARGS:
            check(k >= 0 && k < 4096 && open[k], "ARGS after START");
            break;
        case RP_PARSE_EVENT_TOOL_END:
        case RP_PARSE_EVENT_TOOL_ABORT:
            check(k >= 0 && k < 4096 && open[k], "END/ABORT after START");
            open[k] = 0;
            break;
        default:
            check(ev[i].len > 0 && ev[i].text, "text delta");
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    rp_parser_config cfg = {
        .tools = (rp_tool_format)(data[0] % 6),
        .reasoning = (rp_reasoning_format)(data[0] / 6 % 2),
        .think_open = data[0] / 12 % 2,
        .tools_json = fuzz_tools,
        .tools_json_len = strlen(fuzz_tools),
        .seed = 1,
    };
    size_t chunk = 1 + data[1] % 32;
    const char *text = (const char *)data + 2;
    size_t len = size - 2;

    rp_parse_result whole, r;
    check(rp_parse_all(&cfg, text, len, &whole) == RP_OK, "rp_parse_all");
    rp_parse_result_init(&r);
    rp_parser *p = NULL;
    check(rp_parser_create(&cfg, &p) == RP_OK, "create");
    static int open[4096];
    memset(open, 0, sizeof(open));
    const rp_parse_event *ev;
    size_t n;
    for (size_t i = 0; i < len; i += chunk) {
        size_t k = len - i < chunk ? len - i : chunk;
        check(rp_parser_push(p, text + i, k, &ev, &n) == RP_OK, "push");
        stream_events(ev, n, open);
        check(rp_parse_result_apply(&r, ev, n) == RP_OK, "apply");
    }
    check(rp_parser_finish(p, &ev, &n) == RP_OK, "finish");
    stream_events(ev, n, open);
    check(rp_parse_result_apply(&r, ev, n) == RP_OK, "apply");
    for (int k = 0; k < 4096; k++)
        check(!open[k], "every call ended");
    rp_parser_destroy(p);

    check(same(whole.content, r.content) && whole.content_len == r.content_len, "same content");
    check(same(whole.reasoning, r.reasoning), "same reasoning");
    check(whole.n_calls == r.n_calls, "same number of calls");
    for (size_t i = 0; i < r.n_calls; i++) {
        check(same(whole.calls[i].name, r.calls[i].name) && same(whole.calls[i].id, r.calls[i].id) &&
                  same(whole.calls[i].arguments, r.calls[i].arguments),
              "same call");
        json_error_t err;
        json_t *a = json_loads(r.calls[i].arguments, JSON_ALLOW_NUL, &err);
        if (!a && json_error_code(&err) == json_error_numeric_overflow) // valid JSON past jansson's 64 bits
            a = json_loads(r.calls[i].arguments, JSON_ALLOW_NUL | JSON_DECODE_INT_AS_REAL, &err);
        check(a && json_is_object(a), "arguments are a JSON object");
        json_decref(a);
    }
    rp_parse_result_deinit(&whole);
    rp_parse_result_deinit(&r);
    return 0;
}
