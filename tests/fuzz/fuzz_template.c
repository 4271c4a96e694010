/*
 * fuzz_template.c - libFuzzer driver for the chat template interpreter.
 *
 * Each input is a template source. It is parsed and, when it parses, rendered
 * against a fixed conversation (system/user/assistant with tool calls, a tool
 * result, tools, add_generation_prompt, bos/eos). Any status is acceptable; a
 * failure must leave no output and a "template error: " message, a success a
 * NUL-terminated output of the reported length. Anything else aborts, which
 * libFuzzer reports as a crash. Limits keep each run bounded.
 */
#include <stdio.h>
#include <stdlib.h>

#include "chat/chat.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static json_t *conv;

static void check(bool ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_template: invariant broken: %s (%s)\n", what, rp_error_message());
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!conv) {
        conv = json_loads("{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
                          " {\"role\": \"user\", \"content\": \"Wie spät ist es? 🚀\"},"
                          " {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"call0A1b2\","
                          " \"type\": \"function\", \"function\": {\"name\": \"now\", \"arguments\": {\"tz\": \"CET\"}}}]},"
                          " {\"role\": \"tool\", \"tool_call_id\": \"call0A1b2\", \"content\": \"12:00\"},"
                          " {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"thanks\"}]}],"
                          " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"now\", \"description\": \"time\","
                          " \"parameters\": {\"type\": \"object\", \"properties\": {\"tz\": {\"type\": \"string\"}}}}}],"
                          " \"kwargs\": {\"enable_thinking\": true, \"n\": 3, \"f\": 0.5}}",
                          0, NULL);
        check(conv != NULL, "conversation JSON");
    }
    rp_chat_template *t = (rp_chat_template *)&t;
    rp_status st = rp_chat_template_create((const char *)data, size, &t);
    if (st) {
        check(t == NULL, "*out NULL on error");
        check(strncmp(rp_error_message(), "template error: ", 16) == 0, "parse message prefix");
        return 0;
    }
    for (int gen = 0; gen < 2; gen++) {
        rp_chat_render_params p = {
            .messages = json_object_get(conv, "messages"),
            .tools = gen ? json_object_get(conv, "tools") : NULL,
            .add_generation_prompt = gen,
            .kwargs = json_object_get(conv, "kwargs"),
            .bos_token = "<s>",
            .eos_token = gen ? "</s>" : NULL,
        };
        char *out = (char *)&out;
        size_t len = 1;
        st = rp_chat_template_render(t, &p, &out, &len);
        if (st) {
            check(out == NULL && len == 0, "no output on error");
            check(strncmp(rp_error_message(), "template error: ", 16) == 0, "render message prefix");
        } else {
            check(out != NULL && out[len] == 0, "NUL-terminated output");
            rp_free(out);
        }
    }
    rp_chat_template_destroy(t);
    return 0;
}
