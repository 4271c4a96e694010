/*
 * test_parse.c - the output parser, family by family: each case is a model
 * reply with its expected content, reasoning and calls; every case is parsed
 * whole, byte by byte and cut in two at every byte position, and all must give
 * the same result (ids included), with the stream invariants of
 * parse_harness.h. Malformed and truncated replies come back as content.
 * Qwen3.5/3.6 replies (Qwen3-Coder XML calls after a think block the prompt
 * opened) have their own table; test_parse_qwen35.c checks them against the
 * models' templates.
 */
#include "parse_harness.h"

#include <ctype.h>

typedef struct tcall {
    const char *name, *args;
} tcall;

typedef struct tcase {
    const char *label;
    rp_tool_format tools;
    rp_reasoning_format rfmt;
    bool think_open;
    const char *tools_json;
    const char *input;
    const char *content;   // NULL: the input itself (a malformed reply)
    const char *reasoning; // NULL: ""
    tcall calls[4];
} tcase;

#define HERMES RP_TOOL_FORMAT_HERMES
#define CODER RP_TOOL_FORMAT_QWEN3_CODER
#define LLAMA RP_TOOL_FORMAT_LLAMA3
#define MISTRAL RP_TOOL_FORMAT_MISTRAL
#define DEEPSEEK RP_TOOL_FORMAT_DEEPSEEK
#define NOTOOLS RP_TOOL_FORMAT_NONE
#define THINK RP_REASONING_FORMAT_THINK
#define NOTHINK RP_REASONING_FORMAT_NONE

#define WEATHER "{\"location\":\"Paris\",\"unit\":\"celsius\"}"

static const char coder_tools[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"location\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"},\"metric\":{\"type\":"
    "\"boolean\"},\"temp\":{\"type\":\"number\"},\"opts\":{\"type\":\"object\"},\"tags\":{\"type\":\"array\"},"
    "\"maybe\":{\"type\":[\"integer\",\"null\"]},\"either\":{\"type\":[\"integer\",\"string\"]}}}}},"
    "{\"name\":\"bare\",\"parameters\":{\"properties\":{\"n\":{\"type\":\"integer\"}}}}]";

// Qwen3.5/3.6's tools as the conformance conversations offer them (tests/data/chat/conversations.json).
static const char qwen35_tools[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"city\":{\"type\":\"string\"},\"unit\":{\"type\":\"string\",\"enum\":[\"celsius\","
    "\"fahrenheit\"]},\"days\":{\"type\":\"integer\"}},\"required\":[\"city\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"list_files\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"path\":{\"type\":\"string\"},\"recursive\":{\"type\":\"boolean\"},\"patterns\":"
    "{\"type\":\"array\",\"items\":{\"type\":\"string\"}}},\"required\":[\"path\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"run_code\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"code\":{\"type\":\"string\"},\"timeout\":{\"type\":\"number\"},\"env\":{\"type\":"
    "\"object\"},\"retries\":{\"type\":[\"integer\",\"null\"]}},\"required\":[\"code\"]}}}]";

#define Q35_CALL(name, params) "<tool_call>\n<function=" name ">\n" params "</function>\n</tool_call>"
#define Q35_PARAM(key, value) "<parameter=" key ">\n" value "\n</parameter>\n"
#define Q35_WEATHER Q35_CALL("get_weather", Q35_PARAM("city", "Zürich") Q35_PARAM("days", "3"))
#define Q35_WEATHER_ARGS "{\"city\":\"Zürich\",\"days\":3}"

// One case per block reads better than one field per line.
// clang-format off
static const tcase cases[] = {
    /* ---- Hermes / Qwen2.5 / Qwen3 ---- */
    {"hermes single", HERMES, NOTHINK, false, NULL,
     "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\", \"unit\": \"celsius\"}}\n"
     "</tool_call>",
     "", NULL, {{"get_weather", WEATHER}}},
    {"hermes several", HERMES, NOTHINK, false, NULL,
     "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", "
     "\"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"c\", \"arguments\": {\"y\": [1, 2]}}\n</tool_call>",
     "", NULL, {{"a", "{\"x\":1}"}, {"b", "{}"}, {"c", "{\"y\":[1,2]}"}}},
    {"hermes after text", HERMES, NOTHINK, false, NULL,
     "Let me check the weather.\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": "
     "\"Paris\", \"unit\": \"celsius\"}}\n</tool_call>",
     "Let me check the weather.", NULL, {{"get_weather", WEATHER}}},
    {"hermes reasoning + call", HERMES, THINK, false, NULL,
     "<think>\nThe user wants the weather. I will call get_weather.\n</think>\n\n<tool_call>\n{\"name\": "
     "\"get_weather\", \"arguments\": {\"location\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>",
     "", "The user wants the weather. I will call get_weather.", {{"get_weather", WEATHER}}},
    {"hermes no call", HERMES, THINK, false, NULL,
     "Hello <b>world</b>: a < b, [x] <tool and <tool_cal", "Hello <b>world</b>: a < b, [x] <tool and <tool_cal",
     NULL, {{0}}},
    {"hermes text after call", HERMES, NOTHINK, false, NULL,
     "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>\n\nDone.", "Done.", NULL, {{"f", "{}"}}},
    {"hermes arguments first", HERMES, NOTHINK, false, NULL,
     "<tool_call>{\"arguments\": {\"x\": -1.5e+3, \"t\": true, \"n\": null}, \"id\": 7, \"name\": \"f\"}</tool_call>",
     "", NULL, {{"f", "{\"x\":-1.5e+3,\"t\":true,\"n\":null}"}}},
    {"hermes tricky strings", HERMES, NOTHINK, false, NULL,
     "<tool_call>\n{\"name\": \"run\", \"arguments\": {\"code\": \"a \\\"q\\\" </tool_call> {x} \\\\n \\u00e9 é\", "
     "\"n\": [1, 2.5, {\"k\": [ ]}]}}\n</tool_call>",
     "", NULL, {{"run", "{\"code\":\"a \\\"q\\\" </tool_call> {x} \\\\n \\u00e9 é\",\"n\":[1,2.5,{\"k\":[]}]}"}}},
    {"hermes raw newline in string", HERMES, NOTHINK, false, NULL,
     "<tool_call>{\"name\": \"w\", \"arguments\": {\"text\": \"line1\nline2\ttab\"}}</tool_call>", "", NULL,
     {{"w", "{\"text\":\"line1\\nline2\\ttab\"}"}}},
    {"hermes parameters key", HERMES, NOTHINK, false, NULL,
     "<tool_call>{\"name\": \"f\", \"parameters\": {\"a\": 1}}</tool_call>", "", NULL, {{"f", "{\"a\":1}"}}},
    {"hermes no arguments", HERMES, NOTHINK, false, NULL, "<tool_call>{\"name\": \"now\"}</tool_call>", "", NULL,
     {{"now", "{}"}}},
    {"hermes malformed json", HERMES, NOTHINK, false, NULL,
     "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": tru}}\n</tool_call>", NULL, NULL, {{0}}},
    {"hermes truncated", HERMES, NOTHINK, false, NULL,
     "Sure.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1", NULL, NULL, {{0}}},
    {"hermes truncated before close", HERMES, NOTHINK, false, NULL,
     "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_", NULL, NULL, {{0}}},
    {"hermes name not a string", HERMES, NOTHINK, false, NULL, "<tool_call>{\"name\": 5, \"arguments\": {}}</tool_call>",
     NULL, NULL, {{0}}},
    {"hermes good then bad", HERMES, NOTHINK, false, NULL,
     "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\n<tool_call>{\"name\": \"b\", \"arguments\": [1]}",
     "<tool_call>{\"name\": \"b\", \"arguments\": [1]}", NULL, {{"a", "{}"}}},
    {"hermes bad then good", HERMES, NOTHINK, false, NULL,
     "<tool_call>{oops}</tool_call><tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>",
     "<tool_call>{oops}</tool_call>", NULL, {{"a", "{}"}}},
    {"hermes tools off", NOTOOLS, NOTHINK, false, NULL, "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>",
     NULL, NULL, {{0}}},

    /* ---- Qwen3-Coder XML ---- */
    {"coder single typed", CODER, NOTHINK, false, coder_tools,
     "<tool_call>\n<function=get_weather>\n<parameter=location>\nParis\n</parameter>\n<parameter=days>\n3\n"
     "</parameter>\n</function>\n</tool_call>",
     "", NULL, {{"get_weather", "{\"location\":\"Paris\",\"days\":3}"}}},
    {"coder all types", CODER, NOTHINK, false, coder_tools,
     "<tool_call>\n<function=get_weather>\n<parameter=metric>\nTrue\n</parameter>\n<parameter=temp>\n-2.5\n"
     "</parameter>\n<parameter=opts>\n{\"a\": [1, 2], \"b\": \"x y\"}\n</parameter>\n<parameter=tags>\n[\"a\", "
     "\"b\"]\n</parameter>\n<parameter=maybe>\nnull\n</parameter>\n<parameter=either>\n7\n</parameter>\n"
     "<parameter=days>\nthree\n</parameter>\n<parameter=extra>\n42\n</parameter>\n</function>\n</tool_call>",
     "", NULL,
     {{"get_weather", "{\"metric\":true,\"temp\":-2.5,\"opts\":{\"a\":[1,2],\"b\":\"x y\"},\"tags\":[\"a\",\"b\"],"
                      "\"maybe\":null,\"either\":\"7\",\"days\":\"three\",\"extra\":\"42\"}"}}},
    {"coder multiline code", CODER, NOTHINK, false, NULL,
     "I'll write it.\n<tool_call>\n<function=write_file>\n<parameter=path>\n/tmp/a.py\n</parameter>\n"
     "<parameter=content>\nif a < b and c > d:\n    print(\"hi\\n\")\n\n</parameter>\n</function>\n</tool_call>",
     "I'll write it.", NULL,
     {{"write_file", "{\"path\":\"/tmp/a.py\",\"content\":\"if a < b and c > d:\\n    print(\\\"hi\\\\n\\\")\\n\"}"}}},
    {"coder two calls", CODER, NOTHINK, false, coder_tools,
     "<tool_call>\n<function=bare>\n<parameter=n>\n1\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n"
     "<function=bare>\n<parameter=n>\n2\n</parameter>\n</function>\n</tool_call>",
     "", NULL, {{"bare", "{\"n\":1}"}, {"bare", "{\"n\":2}"}}},
    {"coder no params", CODER, NOTHINK, false, NULL, "<tool_call>\n<function=now>\n</function>\n</tool_call>", "",
     NULL, {{"now", "{}"}}},
    {"coder sloppy ends", CODER, NOTHINK, false, NULL,
     "<tool_call><function=f><parameter=a>x<parameter=b>\ny\n</function></tool_call>", "", NULL,
     {{"f", "{\"a\":\"x\",\"b\":\"y\"}"}}},
    {"coder json inside", CODER, THINK, false, NULL,
     "<think>hm</think><tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": \"b\"}}\n</tool_call>", "", "hm",
     {{"f", "{\"a\":\"b\"}"}}},
    {"coder truncated value", CODER, NOTHINK, false, NULL,
     "<tool_call>\n<function=f>\n<parameter=a>\nsome text </param", NULL, NULL, {{0}}},
    {"coder missing close", CODER, NOTHINK, false, NULL,
     "<tool_call>\n<function=f>\n<parameter=a>\nx\n</parameter>\n</function>\n", NULL, NULL, {{0}}},
    {"coder bad function tag", CODER, NOTHINK, false, NULL, "<tool_call>\n<func=f>\n</tool_call> ok", NULL, NULL,
     {{0}}},

    /* ---- Llama 3.x ---- */
    {"llama bare", LLAMA, NOTHINK, false, NULL,
     "{\"name\": \"get_weather\", \"parameters\": {\"location\": \"Paris\", \"unit\": \"celsius\"}}", "", NULL,
     {{"get_weather", WEATHER}}},
    {"llama bare with type", LLAMA, NOTHINK, false, NULL,
     "\n{\"type\": \"function\", \"name\": \"f\", \"parameters\": {\"q\": \"x\"}}", "", NULL, {{"f", "{\"q\":\"x\"}"}}},
    {"llama several", LLAMA, NOTHINK, false, NULL,
     "{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"x\": 1}}", "", NULL,
     {{"a", "{}"}, {"b", "{\"x\":1}"}}},
    {"llama json reply", LLAMA, NOTHINK, false, NULL, "{\"answer\": 42}", NULL, NULL, {{0}}},
    {"llama text reply", LLAMA, NOTHINK, false, NULL, "The answer is {\"name\": \"x\"}.", NULL, NULL, {{0}}},
    {"llama truncated", LLAMA, NOTHINK, false, NULL, "{\"name\": \"f\", \"parameters\": {\"a\":", NULL, NULL, {{0}}},
    {"llama no parameters", LLAMA, NOTHINK, false, NULL, "{\"name\": \"f\"}", NULL, NULL, {{0}}},
    {"llama python_tag json", LLAMA, NOTHINK, false, NULL,
     "<|python_tag|>{\"name\": \"f\", \"parameters\": {\"a\": 1}}", "", NULL, {{"f", "{\"a\":1}"}}},
    {"llama builtin", LLAMA, NOTHINK, false, NULL,
     "<|python_tag|>brave_search.call(query=\"weather in Paris\", n = 3)", "", NULL,
     {{"brave_search", "{\"query\":\"weather in Paris\",\"n\":3}"}}},
    {"llama code", LLAMA, NOTHINK, false, NULL, "<|python_tag|>import math\nprint(math.pi, \"\\t\")", "", NULL,
     {{"code_interpreter", "{\"code\":\"import math\\nprint(math.pi, \\\"\\\\t\\\")\"}"}}},
    {"llama code dotted", LLAMA, NOTHINK, false, NULL, "<|python_tag|>os.path.join('a')", "", NULL,
     {{"code_interpreter", "{\"code\":\"os.path.join('a')\"}"}}},
    {"llama text then tag", LLAMA, NOTHINK, false, NULL, "Searching.<|python_tag|>wolfram_alpha.call(query=\"2+2\")",
     "Searching.", NULL, {{"wolfram_alpha", "{\"query\":\"2+2\"}"}}},
    {"llama builtin bad", LLAMA, NOTHINK, false, NULL, "<|python_tag|>brave_search.call(query='x')", NULL, NULL,
     {{0}}},

    /* ---- Mistral ---- */
    {"mistral array", MISTRAL, NOTHINK, false, NULL,
     "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\", \"unit\": \"celsius\"}}]", "",
     NULL, {{"get_weather", WEATHER}}},
    {"mistral array several", MISTRAL, NOTHINK, false, NULL,
     "Sure.[TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {\"x\": 1}, \"id\": \"abcDEF123\"}, {\"name\": \"b\", "
     "\"arguments\": {}, \"id\": \"zzzzzzzzz\"}]",
     "Sure.", NULL, {{"a", "{\"x\":1}"}, {"b", "{}"}}},
    {"mistral args form", MISTRAL, NOTHINK, false, NULL,
     "[TOOL_CALLS]get_weather[ARGS]{\"location\": \"Paris\", \"unit\": \"celsius\"}[TOOL_CALLS]now[ARGS]{}", "", NULL,
     {{"get_weather", WEATHER}, {"now", "{}"}}},
    {"mistral call id form", MISTRAL, NOTHINK, false, NULL, "[TOOL_CALLS]f[CALL_ID]abc123XYZ[ARGS]{\"a\": [true]}",
     "", NULL, {{"f", "{\"a\":[true]}"}}},
    {"mistral no call", MISTRAL, NOTHINK, false, NULL, "See [1] and [TOOL] or [TOOL_CALL", NULL, NULL, {{0}}},
    {"mistral malformed", MISTRAL, NOTHINK, false, NULL, "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {]", NULL,
     NULL, {{0}}},
    {"mistral truncated args form", MISTRAL, NOTHINK, false, NULL, "[TOOL_CALLS]f[ARGS]{\"a\": \"b", NULL, NULL, {{0}}},

    /* ---- DeepSeek ---- */
    {"deepseek r1", DEEPSEEK, THINK, false, NULL,
     "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"location\": "
     "\"Paris\", \"unit\": \"celsius\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
     "", NULL, {{"get_weather", WEATHER}}},
    {"deepseek several", DEEPSEEK, THINK, false, NULL,
     "On it.\n\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>a\n```json\n{}\n```"
     "<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>b\n```json\n{\"x\": [1]}\n```"
     "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
     "On it.", NULL, {{"a", "{}"}, {"b", "{\"x\":[1]}"}}},
    {"deepseek think open", DEEPSEEK, THINK, true, NULL,
     "I need the weather.\n</think>\n\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>"
     "get_weather\n```json\n{\"location\":\"Paris\",\"unit\":\"celsius\"}\n```<｜tool▁call▁end｜>"
     "<｜tool▁calls▁end｜>",
     "", "I need the weather.", {{"get_weather", WEATHER}}},
    {"deepseek v3.1", DEEPSEEK, NOTHINK, false, NULL,
     "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"location\": \"Paris\", \"unit\": "
     "\"celsius\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
     "", NULL, {{"get_weather", WEATHER}}},
    {"deepseek no end", DEEPSEEK, NOTHINK, false, NULL,
     "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{}\n```<｜tool▁call▁end｜>", "",
     NULL, {{"f", "{}"}}},
    {"deepseek truncated", DEEPSEEK, NOTHINK, false, NULL,
     "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{\"a\": ", NULL, NULL, {{0}}},
    {"deepseek bad fence", DEEPSEEK, NOTHINK, false, NULL,
     "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n~~~json\n{}\n~~~<｜tool▁call▁end｜>",
     NULL, NULL, {{0}}},
    {"deepseek text only", DEEPSEEK, THINK, false, NULL, "<think>\nhmm\n</think>\n\nJust text <｜tool", "Just text <｜tool",
     "hmm", {{0}}},

    /* ---- reasoning ---- */
    {"think qwen3", NOTOOLS, THINK, false, NULL, "<think>\nStep 1.\n\nStep 2.\n</think>\n\nHello!\n", "Hello!\n",
     "Step 1.\n\nStep 2.", {{0}}},
    {"think open", NOTOOLS, THINK, true, NULL, "\nabc</think>Hello", "Hello", "abc", {{0}}},
    {"think open unterminated", NOTOOLS, THINK, true, NULL, "abc def </thi", "", "abc def </thi", {{0}}},
    {"think empty", HERMES, THINK, false, NULL, "<think>\n\n</think>\n\nHello", "Hello", "", {{0}}},
    {"think not at start", NOTOOLS, THINK, false, NULL, "Hi <think>x</think>", NULL, NULL, {{0}}},
    {"think off", NOTOOLS, NOTHINK, false, NULL, "<think>x</think>y", NULL, NULL, {{0}}},
    {"think holds tool text", HERMES, THINK, false, NULL,
     "<think>maybe <tool_call>{\"name\": \"x\"}</tool_call></think>ok", "ok",
     "maybe <tool_call>{\"name\": \"x\"}</tool_call>", {{0}}},
    {"think truncated tag", NOTOOLS, THINK, false, NULL, "<thi", NULL, NULL, {{0}}},
    {"think leading space", NOTOOLS, THINK, false, NULL, "\n <think>a</think>b", "b", "a", {{0}}},
    {"think twice", NOTOOLS, THINK, false, NULL, "<think>a</think><think>b</think>", "<think>b</think>", "a", {{0}}},
};

// Qwen3.5/3.6: the prompt ends in "<think>\n" (thinking on, the default), so the reply starts inside the think
// block; with enable_thinking false the prompt closes it and the reply is content from the start.
static const tcase qwen35_cases[] = {
    {"q35 reasoning then call", CODER, THINK, true, qwen35_tools,
     "The user wants the weather in Zürich.\n</think>\n\n" Q35_WEATHER,
     "", "The user wants the weather in Zürich.", {{"get_weather", Q35_WEATHER_ARGS}}},
    {"q35 reasoning, text, two calls", CODER, THINK, true, qwen35_tools,
     "Two tools.\n</think>\n\nLet me check both.\n\n" Q35_WEATHER "\n"
     Q35_CALL("list_files", Q35_PARAM("path", "/tmp") Q35_PARAM("recursive", "true")),
     "Let me check both.", "Two tools.",
     {{"get_weather", Q35_WEATHER_ARGS}, {"list_files", "{\"path\":\"/tmp\",\"recursive\":true}"}}},
    {"q35 three calls, blank lines", CODER, THINK, true, qwen35_tools,
     "x\n</think>\n\n" Q35_WEATHER "\n\n" Q35_WEATHER "\n\n" Q35_CALL("list_files", Q35_PARAM("path", "a")) "\n",
     "", "x", {{"get_weather", Q35_WEATHER_ARGS}, {"get_weather", Q35_WEATHER_ARGS}, {"list_files", "{\"path\":\"a\"}"}}},
    {"q35 answer only", CODER, THINK, true, qwen35_tools, "Easy.\n</think>\n\nIt is 21 °C.", "It is 21 °C.", "Easy.",
     {{0}}},
    {"q35 empty reasoning", CODER, THINK, true, qwen35_tools, "\n</think>\n\n" Q35_WEATHER, "", "",
     {{"get_weather", Q35_WEATHER_ARGS}}},
    {"q35 thinking off", CODER, THINK, false, qwen35_tools, Q35_WEATHER, "", NULL, {{"get_weather", Q35_WEATHER_ARGS}}},
    {"q35 think block in the reply", CODER, THINK, false, qwen35_tools, "<think>\nHm.\n</think>\n\n" Q35_WEATHER, "",
     "Hm.", {{"get_weather", Q35_WEATHER_ARGS}}},
    // Values as Qwen3.5's template shows them (str() of Python values: True, None) and as Qwen3.6's does (JSON).
    {"q35 typed values, Python spellings", CODER, THINK, true, qwen35_tools,
     "r\n</think>\n\n" Q35_CALL("run_code", Q35_PARAM("code", "print(1)") Q35_PARAM("timeout", "2.5")
                                  Q35_PARAM("env", "{\"A\": \"1\", \"B\": [1, 2]}") Q35_PARAM("retries", "None")),
     "", "r", {{"run_code", "{\"code\":\"print(1)\",\"timeout\":2.5,\"env\":{\"A\":\"1\",\"B\":[1,2]},"
                            "\"retries\":\"None\"}"}}},
    {"q36 typed values, JSON spellings", CODER, THINK, true, qwen35_tools,
     "r\n</think>\n\n" Q35_CALL("list_files", Q35_PARAM("path", "/tmp") Q35_PARAM("recursive", "False")
                                  Q35_PARAM("patterns", "[\"*.txt\", \"*.md\"]"))
     "\n" Q35_CALL("run_code", Q35_PARAM("code", "x") Q35_PARAM("retries", "null") Q35_PARAM("timeout", "1e3")),
     "", "r", {{"list_files", "{\"path\":\"/tmp\",\"recursive\":false,\"patterns\":[\"*.txt\",\"*.md\"]}"},
               {"run_code", "{\"code\":\"x\",\"retries\":null,\"timeout\":1e3}"}}},
    {"q35 null and near-null strings", CODER, THINK, true, qwen35_tools,
     "r\n</think>\n\n" Q35_CALL("get_weather", Q35_PARAM("city", "null") Q35_PARAM("unit", "Nul"))
     Q35_CALL("get_weather", Q35_PARAM("city", "NULL") Q35_PARAM("unit", "nullable"))
     Q35_CALL("get_weather", "<parameter=city>\n\n</parameter>\n" Q35_PARAM("unit", "null\n")),
     "", "r", {{"get_weather", "{\"city\":null,\"unit\":\"Nul\"}"},
               {"get_weather", "{\"city\":null,\"unit\":\"nullable\"}"},
               {"get_weather", "{\"city\":\"\",\"unit\":\"null\\n\"}"}}},
    {"q35 typed value not of its type", CODER, THINK, true, qwen35_tools,
     "r\n</think>\n\n" Q35_CALL("get_weather", Q35_PARAM("city", "Bern") Q35_PARAM("days", "three")
                                  Q35_PARAM("unit", "42")),
     "", "r", {{"get_weather", "{\"city\":\"Bern\",\"days\":\"three\",\"unit\":\"42\"}"}}},
    {"q35 code with markup-like text", CODER, THINK, true, qwen35_tools,
     "r\n</think>\n\n" Q35_CALL("run_code", Q35_PARAM("code", "if a < b:\n    print('</param', \"<parameter\")\n"
                                                     "x = '<function=f>'")),
     "", "r", {{"run_code", "{\"code\":\"if a < b:\\n    print('</param', \\\"<parameter\\\")\\nx = "
                            "'<function=f>'\"}"}}},
    {"q35 parameter not in the schema", CODER, THINK, true, qwen35_tools,
     "r\n</think>\n\n" Q35_CALL("get_weather", Q35_PARAM("city", "Bern") Q35_PARAM("country", "CH")), "", "r",
     {{"get_weather", "{\"city\":\"Bern\",\"country\":\"CH\"}"}}},
    {"q35 no tools known: any function", CODER, THINK, true, NULL,
     "r\n</think>\n\n" Q35_CALL("search_web", Q35_PARAM("q", "3")), "", "r", {{"search_web", "{\"q\":\"3\"}"}}},
    // Malformed: the call's text is content, whatever came before stays.
    {"q35 unknown function", CODER, THINK, true, qwen35_tools,
     "r\n</think>\n\n" Q35_CALL("search_web", Q35_PARAM("q", "x")), Q35_CALL("search_web", Q35_PARAM("q", "x")), "r",
     {{0}}},
    {"q35 good call then unknown", CODER, THINK, true, qwen35_tools,
     "r\n</think>\n\n" Q35_WEATHER "\n" Q35_CALL("search_web", ""), Q35_CALL("search_web", ""), "r",
     {{"get_weather", Q35_WEATHER_ARGS}}},
    {"q35 empty parameter name", CODER, THINK, true, qwen35_tools,
     "r\n</think>\n\n" Q35_CALL("get_weather", Q35_PARAM("", "x")), Q35_CALL("get_weather", Q35_PARAM("", "x")), "r",
     {{0}}},
    {"q35 newline in parameter name", CODER, THINK, true, qwen35_tools,
     "r\n</think>\n\n" Q35_CALL("get_weather", Q35_PARAM("ci\nty", "x")),
     Q35_CALL("get_weather", Q35_PARAM("ci\nty", "x")), "r", {{0}}},
    {"q35 truncated in a value", CODER, THINK, true, qwen35_tools,
     "r\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nZür",
     "<tool_call>\n<function=get_weather>\n<parameter=city>\nZür", "r", {{0}}},
    {"q35 truncated in the function tag", CODER, THINK, true, qwen35_tools,
     "r\n</think>\n\nSure.\n<tool_call>\n<function=get_wea", "Sure.\n<tool_call>\n<function=get_wea", "r", {{0}}},
    {"q35 truncated before </tool_call>", CODER, THINK, true, qwen35_tools,
     "r\n</think>\n\n" Q35_WEATHER "\n" "<tool_call>\n<function=get_weather>\n" Q35_PARAM("city", "Bern") "</function>\n</tool_",
     "<tool_call>\n<function=get_weather>\n" Q35_PARAM("city", "Bern") "</function>\n</tool_", "r",
     {{"get_weather", Q35_WEATHER_ARGS}}},
    {"q35 no </function>", CODER, THINK, true, qwen35_tools,
     "r\n</think>\n\n<tool_call>\n<function=get_weather>\n" Q35_PARAM("city", "Bern") "</tool_call>",
     "<tool_call>\n<function=get_weather>\n" Q35_PARAM("city", "Bern") "</tool_call>", "r", {{0}}},
    // The think block never closed: everything is reasoning, a call inside it too (a call is content's, never
    // reasoning's).
    {"q35 unterminated think", CODER, THINK, true, qwen35_tools, "Let me call it.\n\n" Q35_WEATHER, "",
     "Let me call it.\n\n" Q35_WEATHER, {{0}}},
    {"q35 think closed after a call", CODER, THINK, true, qwen35_tools, "a " Q35_WEATHER "\n</think>\n\nok", "ok",
     "a " Q35_WEATHER, {{0}}},
};
// clang-format on

static rp_parser_config config_of(const tcase *tc)
{
    rp_parser_config cfg = {
        .tools = tc->tools,
        .reasoning = tc->rfmt,
        .think_open = tc->think_open,
        .tools_json = tc->tools_json,
        .tools_json_len = tc->tools_json ? strlen(tc->tools_json) : 0,
        .seed = 42,
    };
    return cfg;
}

static void check_id(const char *id, bool mistral)
{
    size_t n = strlen(id);
    if (mistral) {
        assert_int_equal(n, 9);
    } else {
        assert_int_equal(n, 29);
        assert_memory_equal(id, "call_", 5);
        id += 5;
        n -= 5;
    }
    for (size_t i = 0; i < n; i++)
        assert_true(isalnum((unsigned char)id[i]));
}

static void run_case(const tcase *tc)
{
    print_message("case: %s\n", tc->label);
    rp_parser_config cfg = config_of(tc);
    bool malformed = tc->content == NULL;
    // Well-formed: the expected content holds no marker (else it is a malformed call's text).
    bool valid = !malformed;
    for (size_t m = 0; valid && m < sizeof(harness_markers) / sizeof(harness_markers[0]); m++)
        valid = !strstr(tc->content, harness_markers[m]);
    rp_parse_result r;
    check_all_splits(&cfg, tc->input, valid, &r);
    const char *want = malformed ? tc->input : tc->content;
    if (strcmp(str_or_empty(r.content), want) != 0)
        fail_msg("%s: content '%s', want '%s'", tc->label, str_or_empty(r.content), want);
    const char *want_r = tc->reasoning ? tc->reasoning : "";
    if (strcmp(str_or_empty(r.reasoning), want_r) != 0)
        fail_msg("%s: reasoning '%s', want '%s'", tc->label, str_or_empty(r.reasoning), want_r);
    size_t n = 0;
    while (n < 4 && tc->calls[n].name)
        n++;
    if (r.n_calls != n)
        fail_msg("%s: %zu calls, want %zu", tc->label, r.n_calls, n);
    for (size_t i = 0; i < n; i++) {
        if (strcmp(r.calls[i].name, tc->calls[i].name) != 0 || strcmp(r.calls[i].arguments, tc->calls[i].args) != 0)
            fail_msg("%s: call %zu is %s %s, want %s %s", tc->label, i, r.calls[i].name, r.calls[i].arguments,
                     tc->calls[i].name, tc->calls[i].args);
        check_id(r.calls[i].id, tc->tools == MISTRAL);
        for (size_t k = 0; k < i; k++)
            assert_string_not_equal(r.calls[i].id, r.calls[k].id);
    }
    rp_parse_result_deinit(&r);
}

static void test_qwen35(void **state)
{
    for (size_t i = 0; i < sizeof(qwen35_cases) / sizeof(qwen35_cases[0]); i++)
        run_case(&qwen35_cases[i]);
}

static void run_family(rp_tool_format f, rp_reasoning_format rf, bool any_reasoning)
{
    int n = 0;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (cases[i].tools == f && (any_reasoning || cases[i].rfmt == rf)) {
            run_case(&cases[i]);
            n++;
        }
    }
    assert_true(n > 0);
}

static void test_hermes(void **state)
{
    run_family(HERMES, 0, true);
}

static void test_qwen3_coder(void **state)
{
    run_family(CODER, 0, true);
}

static void test_llama3(void **state)
{
    run_family(LLAMA, 0, true);
}

static void test_mistral(void **state)
{
    run_family(MISTRAL, 0, true);
}

static void test_deepseek(void **state)
{
    run_family(DEEPSEEK, 0, true);
}

static void test_reasoning(void **state)
{
    run_family(NOTOOLS, 0, true);
}

// The name is in the first event of a call, and arguments stream before the call is complete.
static void test_streaming_order(void **state)
{
    rp_parser_config cfg = {.tools = HERMES, .seed = 1};
    rp_parser *p;
    assert_int_equal(rp_parser_create(&cfg, &p), RP_OK);
    const rp_parse_event *ev;
    size_t n;
    assert_int_equal(rp_parser_push(p, "Hi <tool_", strlen("Hi <tool_"), &ev, &n), RP_OK);
    assert_int_equal(n, 1);
    assert_int_equal(ev[0].type, RP_PARSE_EVENT_CONTENT);
    assert_int_equal(ev[0].len, 2); // "Hi": the space waits, "<tool_" is held
    assert_int_equal(rp_parser_push(p, "call>{\"name\": \"get", strlen("call>{\"name\": \"get"), &ev, &n), RP_OK);
    assert_int_equal(n, 0);
    assert_int_equal(rp_parser_push(p, "\", \"arguments\": {\"a\"", strlen("\", \"arguments\": {\"a\""), &ev, &n),
                     RP_OK);
    assert_int_equal(n, 2);
    assert_int_equal(ev[0].type, RP_PARSE_EVENT_TOOL_START);
    assert_string_equal(ev[0].name, "get");
    assert_int_equal(ev[0].index, 0);
    assert_int_equal(ev[1].type, RP_PARSE_EVENT_TOOL_ARGS);
    assert_int_equal(ev[1].len, 4);
    assert_memory_equal(ev[1].text, "{\"a\"", 4);
    assert_int_equal(rp_parser_push(p, ": 1}}</tool_call>", strlen(": 1}}</tool_call>"), &ev, &n), RP_OK);
    assert_int_equal(n, 2);
    assert_int_equal(ev[0].type, RP_PARSE_EVENT_TOOL_ARGS);
    assert_memory_equal(ev[0].text, ":1}", 3);
    assert_int_equal(ev[1].type, RP_PARSE_EVENT_TOOL_END);
    assert_int_equal(rp_parser_finish(p, &ev, &n), RP_OK);
    assert_int_equal(n, 0);
    rp_parser_destroy(p);
}

// A malformed call after its START: ABORT, then its text as content, and the index is reused.
static void test_abort_events(void **state)
{
    rp_parser_config cfg = {.tools = HERMES, .seed = 1};
    rp_parser *p;
    assert_int_equal(rp_parser_create(&cfg, &p), RP_OK);
    const rp_parse_event *ev;
    size_t n;
    const char *s = "<tool_call>{\"name\": \"a\", \"arguments\": {x}}</tool_call>";
    assert_int_equal(rp_parser_push(p, s, strlen(s), &ev, &n), RP_OK);
    assert_int_equal(n, 4);
    assert_int_equal(ev[0].type, RP_PARSE_EVENT_TOOL_START);
    assert_int_equal(ev[1].type, RP_PARSE_EVENT_TOOL_ARGS);
    assert_int_equal(ev[2].type, RP_PARSE_EVENT_TOOL_ABORT);
    assert_int_equal(ev[2].index, 0);
    assert_int_equal(ev[3].type, RP_PARSE_EVENT_CONTENT);
    assert_int_equal(ev[3].len, strlen(s));
    const char *t = "<tool_call>{\"name\": \"b\", \"arguments\": {}}</tool_call>";
    assert_int_equal(rp_parser_push(p, t, strlen(t), &ev, &n), RP_OK);
    assert_int_equal(ev[0].type, RP_PARSE_EVENT_TOOL_START);
    assert_int_equal(ev[0].index, 0);
    rp_parser_destroy(p);
}

// Ids come from the seed: the same seed gives the same ids, another seed others.
static void test_ids_seeded(void **state)
{
    const char *s = "[TOOL_CALLS]a[ARGS]{}[TOOL_CALLS]b[ARGS]{}";
    rp_parser_config cfg = {.tools = MISTRAL, .seed = 7};
    rp_parse_result a, b, c;
    assert_int_equal(rp_parse_all(&cfg, s, strlen(s), &a), RP_OK);
    assert_int_equal(rp_parse_all(&cfg, s, strlen(s), &b), RP_OK);
    cfg.seed = 8;
    assert_int_equal(rp_parse_all(&cfg, s, strlen(s), &c), RP_OK);
    assert_int_equal(a.n_calls, 2);
    assert_string_equal(a.calls[0].id, b.calls[0].id);
    assert_string_equal(a.calls[1].id, b.calls[1].id);
    assert_string_not_equal(a.calls[0].id, a.calls[1].id);
    assert_string_not_equal(a.calls[0].id, c.calls[0].id);
    rp_parse_result_deinit(&a);
    rp_parse_result_deinit(&b);
    rp_parse_result_deinit(&c);
}

static void test_bad_config(void **state)
{
    rp_parser *p = (rp_parser *)1;
    rp_parser_config cfg = {.tools = RP_TOOL_FORMAT_COUNT};
    assert_int_equal(rp_parser_create(&cfg, &p), RP_ERR_INVALID);
    assert_null(p);
    cfg.tools = CODER;
    cfg.tools_json = "[{\"name\": ";
    cfg.tools_json_len = strlen(cfg.tools_json);
    assert_int_equal(rp_parser_create(&cfg, &p), RP_ERR_INVALID);
    assert_non_null(strstr(rp_error_message(), "tools"));
    cfg.tools_json = "{}";
    cfg.tools_json_len = 2;
    assert_int_equal(rp_parser_create(&cfg, &p), RP_ERR_INVALID);
    // events that no parser produces
    rp_parse_result r;
    rp_parse_result_init(&r);
    rp_parse_event e = {.type = RP_PARSE_EVENT_TOOL_ARGS, .index = 0, .text = "x", .len = 1};
    assert_int_equal(rp_parse_result_apply(&r, &e, 1), RP_ERR_INVALID);
    e = (rp_parse_event){.type = RP_PARSE_EVENT_TOOL_START, .index = 3, .id = "i", .name = "n"};
    assert_int_equal(rp_parse_result_apply(&r, &e, 1), RP_ERR_INVALID);
    rp_parse_result_deinit(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hermes),     cmocka_unit_test(test_qwen3_coder),     cmocka_unit_test(test_llama3),
        cmocka_unit_test(test_mistral),    cmocka_unit_test(test_deepseek),        cmocka_unit_test(test_reasoning),
        cmocka_unit_test(test_qwen35),     cmocka_unit_test(test_streaming_order), cmocka_unit_test(test_abort_events),
        cmocka_unit_test(test_ids_seeded), cmocka_unit_test(test_bad_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
