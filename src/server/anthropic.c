/*
 * anthropic.c - the Anthropic Messages API: POST /v1/messages (a query string
 * such as ?beta=true is ignored by the router) and POST
 * /v1/messages/count_tokens.
 *
 * A request is read into the neutral rp_api_req (anth_read): every known field
 * is type- and range-checked, errors name the field Anthropic-style
 * ("messages.2.content.0.text: ..."), unknown fields are ignored. The
 * conversation becomes the OpenAI-style message array the chat template takes:
 *
 *   system (string or text blocks)  -> a leading {"role": "system"} message
 *   user text blocks                -> {"role": "user", "content": text} (blocks joined by "\n")
 *   user tool_result blocks         -> {"role": "tool", "tool_call_id", "content"} each, in block
 *                                      order (is_error prefixes the content with "Error: ")
 *   assistant text / thinking       -> content / reasoning_content
 *   assistant tool_use blocks       -> tool_calls [{id, type: function, function: {name, arguments: input}}]
 *   tools {name, description, input_schema} -> OpenAI function tools
 *
 * Replies: a non-streaming Message ({id "msg_...", content [thinking?, text?,
 * tool_use...], stop_reason end_turn | max_tokens | stop_sequence | tool_use,
 * usage}) or an SSE stream in which every frame has its `event:` line:
 * message_start, ping, then per content block content_block_start /
 * content_block_delta (text_delta, thinking_delta then one signature_delta
 * before the thinking block closes, input_json_delta) / content_block_stop,
 * then message_delta (stop_reason, cumulative usage) and message_stop. A ping
 * goes out whenever nothing else was sent for PING_INTERVAL_S (a long prefill).
 * An engine failure after the stream started is an `event: error` frame.
 *
 * Decisions:
 *   - usage: input_tokens excludes the prompt tokens served from the prefix
 *     cache, which are cache_read_input_tokens (Anthropic's split);
 *     cache_creation_input_tokens is always 0. message_start is sent once the
 *     engine has admitted the request, so it names the cache reads (a request
 *     still queued after half a second gets it with the prompt as uncached);
 *     message_delta carries the final numbers.
 *   - thinking {type: enabled|adaptive} turns the template's enable_thinking on;
 *     {type: disabled} and no `thinking` at all turn it off (as Anthropic: no
 *     thinking blocks unless asked for).
 *     budget_tokens is type-checked, not enforced. Signatures are opaque
 *     markers; thinking blocks sent back are used as reasoning_content and
 *     their signatures ignored; redacted_thinking is dropped.
 *   - image and non-text document blocks are a 400 (the models are text-only);
 *     a document with a plain-text source is used as text.
 *   - tools with a `type` other than "custom" (Anthropic's server and
 *     versioned tools: bash_*, web_search_*, ...) are ignored; naming one in
 *     tool_choice is then a 400.
 *   - tool_choice `none` renders without tools; `any` and `tool` force the
 *     reply to start with a call where the tool format allows it (gen.c);
 *     disable_parallel_tool_use keeps the first call only.
 *   - output_config.format {type: json_schema, schema} constrains the reply
 *     to the schema (enforced by the grammar, or a 400); the rest of
 *     output_config, metadata, cache_control, service_tier, container,
 *     context_management, mcp_servers ... are accepted and ignored.
 *   - `model` is optional; the reply names the served model.
 *   - sampling has no seed field here: each request gets a fresh seed.
 */
#include "server_int.h"

#include <unistd.h>

#include <stdio.h>
#include <stdlib.h>

#define MAX_TOKENS_LIMIT ((long long)1 << 30)
#define PING_INTERVAL_S 5.0 // a ping after this long without any frame

/* ---- reading requests -------------------------------------------------------- */

// The block's type string, or NULL after filling e.
static const char *block_type(const json_t *blk, const char *path, rp_api_error *e)
{
    const char *type = json_string_value(json_object_get(blk, "type"));
    if (!json_is_object(blk) || !type) {
        rp_api_fail(e, 400, path, NULL, "%s: expected a content block (an object with a string 'type')", path);
        return NULL;
    }
    return type;
}

static bool unsupported_block(const char *path, const char *type, rp_api_error *e)
{
    return rp_api_fail(e, 400, path, NULL,
                       "%s: content blocks of type '%s' are not supported here (the model takes text only)", path,
                       type);
}

// Appends blk.text (which must be a string) to out.
static bool block_text(const json_t *blk, const char *path, rp_buf *out, rp_api_error *e)
{
    const json_t *t = json_object_get(blk, "text");
    if (!json_is_string(t))
        return rp_api_fail(e, 400, path, NULL, "%s.text: expected a string", path);
    rp_buf_append(out, json_string_value(t), json_string_length(t));
    return true;
}

// A document block whose source is plain text ({type: "text", data}) as text;
// other documents (PDF, base64, URL) are not supported.
static bool document_text(const json_t *blk, const char *path, rp_buf *out, rp_api_error *e)
{
    const json_t *src = json_object_get(blk, "source");
    const char *st = json_string_value(json_object_get(src, "type"));
    const json_t *data = json_object_get(src, "data");
    if (!st || strcmp(st, "text") != 0 || !json_is_string(data))
        return rp_api_fail(e, 400, path, NULL,
                           "%s: only documents with a plain-text source ({\"type\": \"text\", \"data\": ...}) are "
                           "supported (the model takes text only)",
                           path);
    rp_buf_append(out, json_string_value(data), json_string_length(data));
    return true;
}

// A string, or an array of text blocks joined with "\n" (system, tool_result content).
static bool text_value(const json_t *v, const char *path, rp_buf *out, rp_api_error *e)
{
    if (json_is_string(v)) {
        rp_buf_append(out, json_string_value(v), json_string_length(v));
        return true;
    }
    if (!json_is_array(v))
        return rp_api_fail(e, 400, path, NULL, "%s: expected a string or an array of text blocks", path);
    size_t i;
    const json_t *blk;
    json_array_foreach(v, i, blk) {
        char p[160];
        snprintf(p, sizeof(p), "%s.%zu", path, i);
        const char *type = block_type(blk, p, e);
        if (!type)
            return false;
        if (i)
            rp_buf_puts(out, "\n");
        if (strcmp(type, "text") == 0) {
            if (!block_text(blk, p, out, e))
                return false;
        } else if (strcmp(type, "document") == 0) {
            if (!document_text(blk, p, out, e))
                return false;
        } else {
            return unsupported_block(p, type, e);
        }
    }
    return true;
}

static json_t *text_msg(const char *role, const rp_buf *text)
{
    return json_pack("{s:s,s:s%}", "role", role, "content", text->data ? text->data : "", text->len);
}

// A text value (text_value) as a {"role": "system"} message; an empty one is
// dropped unless keep_empty.
static bool system_msg(const json_t *v, const char *path, bool keep_empty, json_t *out, rp_api_error *e)
{
    rp_buf t;
    rp_buf_init(&t);
    bool ok = text_value(v, path, &t, e);
    if (ok && t.failed)
        ok = rp_api_oom(e);
    if (ok && (t.len || keep_empty))
        ok = rp_api_append_new(out, text_msg("system", &t), e);
    rp_buf_deinit(&t);
    return ok;
}

// A tool_result block -> {"role": "tool", "tool_call_id", "content"}.
static bool tool_result(const json_t *blk, const char *path, json_t *out, rp_api_error *e)
{
    const json_t *id = json_object_get(blk, "tool_use_id");
    if (!json_is_string(id))
        return rp_api_fail(e, 400, path, NULL, "%s.tool_use_id: a string is required", path);
    const json_t *err = json_object_get(blk, "is_error");
    if (err && !json_is_null(err) && !json_is_boolean(err))
        return rp_api_fail(e, 400, path, NULL, "%s.is_error: expected a boolean", path);
    rp_buf t;
    rp_buf_init(&t);
    if (json_is_true(err))
        rp_buf_puts(&t, "Error: ");
    const json_t *c = json_object_get(blk, "content");
    char p[160];
    snprintf(p, sizeof(p), "%s.content", path);
    bool ok = (!c || json_is_null(c) || text_value(c, p, &t, e));
    if (ok && t.failed)
        ok = rp_api_oom(e);
    if (ok)
        ok = rp_api_append_new(out,
                               json_pack("{s:s,s:s,s:s%}", "role", "tool", "tool_call_id", json_string_value(id),
                                         "content", t.data ? t.data : "", t.len),
                               e);
    rp_buf_deinit(&t);
    return ok;
}

// A user message's content blocks. Text runs become user messages and each
// tool_result a tool message, in block order.
static bool user_blocks(const json_t *blocks, const char *path, json_t *out, rp_api_error *e)
{
    rp_buf text;
    rp_buf_init(&text);
    bool have_text = false, ok = false;
    size_t i;
    const json_t *blk;
    json_array_foreach(blocks, i, blk) {
        char p[128];
        snprintf(p, sizeof(p), "%s.%zu", path, i);
        const char *type = block_type(blk, p, e);
        if (!type)
            goto done;
        if (strcmp(type, "text") == 0 || strcmp(type, "document") == 0) {
            if (have_text)
                rp_buf_puts(&text, "\n");
            if (!(type[0] == 't' ? block_text(blk, p, &text, e) : document_text(blk, p, &text, e)))
                goto done;
            have_text = true;
        } else if (strcmp(type, "tool_result") == 0) {
            if (have_text && !rp_api_append_new(out, text_msg("user", &text), e))
                goto done;
            rp_buf_reset(&text);
            have_text = false;
            if (!tool_result(blk, p, out, e))
                goto done;
        } else if (strcmp(type, "thinking") == 0 || strcmp(type, "redacted_thinking") == 0) {
            continue; // meaningless in a user turn: dropped
        } else {
            unsupported_block(p, type, e);
            goto done;
        }
    }
    if (text.failed) {
        rp_api_oom(e);
        goto done;
    }
    if (have_text && !rp_api_append_new(out, text_msg("user", &text), e))
        goto done;
    ok = true;
done:
    rp_buf_deinit(&text);
    return ok;
}

// An assistant message's content blocks -> one assistant message (content,
// reasoning_content, tool_calls).
static bool assistant_blocks(const json_t *blocks, const char *path, json_t *out, rp_api_error *e)
{
    rp_buf text, think;
    rp_buf_init(&text);
    rp_buf_init(&think);
    json_t *calls = NULL, *msg = NULL;
    bool ok = false;
    size_t i;
    const json_t *blk;
    json_array_foreach(blocks, i, blk) {
        char p[128];
        snprintf(p, sizeof(p), "%s.%zu", path, i);
        const char *type = block_type(blk, p, e);
        if (!type)
            goto done;
        if (strcmp(type, "text") == 0) {
            if (text.len)
                rp_buf_puts(&text, "\n");
            if (!block_text(blk, p, &text, e))
                goto done;
        } else if (strcmp(type, "thinking") == 0) {
            const json_t *t = json_object_get(blk, "thinking");
            if (!json_is_string(t)) {
                rp_api_fail(e, 400, p, NULL, "%s.thinking: expected a string", p);
                goto done;
            }
            if (think.len)
                rp_buf_puts(&think, "\n");
            rp_buf_append(&think, json_string_value(t), json_string_length(t));
        } else if (strcmp(type, "redacted_thinking") == 0) {
            continue; // opaque to us
        } else if (strcmp(type, "tool_use") == 0) {
            const json_t *id = json_object_get(blk, "id"), *name = json_object_get(blk, "name");
            const json_t *input = json_object_get(blk, "input");
            if (!json_is_string(id) || !json_is_string(name) || json_string_length(name) == 0) {
                rp_api_fail(e, 400, p, NULL, "%s: a tool_use block needs a string 'id' and a non-empty 'name'", p);
                goto done;
            }
            if (input && !json_is_null(input) && !json_is_object(input)) {
                rp_api_fail(e, 400, p, NULL, "%s.input: expected an object", p);
                goto done;
            }
            if (!calls && !(calls = json_array())) {
                rp_api_oom(e);
                goto done;
            }
            json_t *args = input && !json_is_null(input) ? json_deep_copy(input) : json_object();
            json_t *call = json_pack("{s:s,s:s,s:{s:s,s:o}}", "id", json_string_value(id), "type", "function",
                                     "function", "name", json_string_value(name), "arguments", args);
            if (!call || json_array_append_new(calls, call)) {
                rp_api_oom(e);
                goto done;
            }
        } else {
            unsupported_block(p, type, e);
            goto done;
        }
    }
    if (text.failed || think.failed || !(msg = text_msg("assistant", &text))) {
        rp_api_oom(e);
        goto done;
    }
    if (think.len)
        json_object_set_new(msg, "reasoning_content", json_stringn(think.data, think.len));
    if (calls) {
        json_object_set_new(msg, "tool_calls", calls);
        calls = NULL;
    }
    ok = rp_api_append_new(out, msg, e);
done:
    json_decref(calls);
    rp_buf_deinit(&text);
    rp_buf_deinit(&think);
    return ok;
}

// A final assistant message is a prefill: the reply continues its text
// (q->continue_final). As Anthropic, its text may not end in whitespace. One
// with neither text nor tool calls is dropped.
static bool read_prefill(const json_t *msgs, rp_api_req *q, rp_api_error *e)
{
    size_t n = json_array_size(msgs), k = json_array_size(q->messages);
    const char *role = json_string_value(json_object_get(json_array_get(msgs, n - 1), "role"));
    json_t *last = k ? json_array_get(q->messages, k - 1) : NULL;
    if (strcmp(role, "assistant") != 0 || !last || json_object_get(last, "tool_calls"))
        return true;
    const char *t = json_string_value(json_object_get(last, "content"));
    size_t len = t ? strlen(t) : 0;
    if (len == 0)
        return json_array_remove(q->messages, k - 1) == 0 ? true : rp_api_oom(e);
    char c = t[len - 1];
    if (c == ' ' || c == '\n' || c == '\t' || c == '\r') {
        char p[64];
        snprintf(p, sizeof(p), "messages.%zu.content", n - 1);
        return rp_api_fail(e, 400, p, NULL, "%s: final assistant content cannot end with trailing whitespace", p);
    }
    q->continue_final = true;
    return true;
}

// system + messages -> q->messages.
static bool read_messages(const json_t *b, rp_api_req *q, rp_api_error *e)
{
    const json_t *msgs = json_object_get(b, "messages");
    if (!msgs || json_is_null(msgs))
        return rp_api_fail(e, 400, "messages", NULL, "messages: field required");
    if (!json_is_array(msgs))
        return rp_api_fail(e, 400, "messages", NULL, "messages: expected an array of messages");
    if (json_array_size(msgs) == 0)
        return rp_api_fail(e, 400, "messages", NULL, "messages: at least one message is required");
    json_t *out = json_array();
    if (!out)
        return rp_api_oom(e);
    q->messages = out;
    const json_t *sys = json_object_get(b, "system");
    if (sys && !json_is_null(sys) && !system_msg(sys, "system", false, out, e))
        return false;
    size_t i;
    const json_t *m;
    json_array_foreach(msgs, i, m) {
        char p[64], pc[96];
        snprintf(p, sizeof(p), "messages.%zu", i);
        snprintf(pc, sizeof(pc), "%s.content", p);
        if (!json_is_object(m))
            return rp_api_fail(e, 400, p, NULL, "%s: expected an object with 'role' and 'content'", p);
        const char *role = json_string_value(json_object_get(m, "role"));
        if (!role)
            return rp_api_fail(e, 400, p, NULL, "%s.role: a string is required", p);
        bool user = strcmp(role, "user") == 0, asst = strcmp(role, "assistant") == 0,
             sysr = strcmp(role, "system") == 0;
        if (!user && !asst && !sysr)
            return rp_api_fail(e, 400, p, NULL, "%s.role: '%s' is not one of 'user', 'assistant'", p, role);
        const json_t *c = json_object_get(m, "content");
        if (!c || json_is_null(c))
            return rp_api_fail(e, 400, pc, NULL, "%s: field required", pc);
        if (json_is_string(c)) {
            json_t *nm = json_pack("{s:s,s:O}", "role", role, "content", c);
            if (!rp_api_append_new(out, nm, e))
                return false;
            continue;
        }
        if (!json_is_array(c))
            return rp_api_fail(e, 400, pc, NULL, "%s: expected a string or an array of content blocks", pc);
        if (json_array_size(c) == 0 && !asst)
            return rp_api_fail(e, 400, pc, NULL, "%s: at least one content block is required", pc);
        if (sysr) {
            if (!system_msg(c, pc, true, out, e))
                return false;
        } else if (!(user ? user_blocks(c, pc, out, e) : assistant_blocks(c, pc, out, e))) {
            return false;
        }
    }
    if (!read_prefill(msgs, q, e))
        return false;
    if (json_array_size(out) == 0)
        return rp_api_fail(e, 400, "messages", NULL, "messages: no message has any content this model can read");
    return true;
}

// tools -> q->tools (OpenAI function tools); Anthropic-defined tools are skipped.
static bool read_tools(const json_t *b, rp_api_req *q, rp_api_error *e)
{
    const json_t *tools = json_object_get(b, "tools");
    if (!tools || json_is_null(tools))
        return true;
    if (!json_is_array(tools))
        return rp_api_fail(e, 400, "tools", NULL, "tools: expected an array");
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t) {
        char p[48];
        snprintf(p, sizeof(p), "tools.%zu", i);
        if (!json_is_object(t))
            return rp_api_fail(e, 400, p, NULL, "%s: expected an object", p);
        const json_t *type = json_object_get(t, "type");
        if (type && !json_is_null(type)) {
            if (!json_is_string(type))
                return rp_api_fail(e, 400, p, NULL, "%s.type: expected a string", p);
            if (strcmp(json_string_value(type), "custom") != 0)
                continue; // server and Anthropic-defined tools: not available here
        }
        const json_t *name = json_object_get(t, "name"), *desc = json_object_get(t, "description");
        const json_t *schema = json_object_get(t, "input_schema");
        const char *err = NULL;
        if (!json_is_string(name) || json_string_length(name) == 0)
            err = "name: a non-empty string is required";
        else if (!json_is_object(schema))
            err = "input_schema: an object (a JSON schema) is required";
        else if (desc && !json_is_null(desc) && !json_is_string(desc))
            err = "description: expected a string";
        if (err)
            return rp_api_fail(e, 400, p, NULL, "%s.%s", p, err);
        if (!rp_api_req_add_tool(q, name, desc, schema, e))
            return false;
    }
    return true;
}

static bool read_tool_choice(const json_t *b, rp_api_req *q, rp_api_error *e)
{
    const json_t *tc = json_object_get(b, "tool_choice");
    if (!tc || json_is_null(tc))
        return true;
    const char *type = json_string_value(json_object_get(tc, "type"));
    if (!json_is_object(tc) || !type)
        return rp_api_fail(e, 400, "tool_choice", NULL,
                           "tool_choice: expected an object with a 'type' (auto, any, tool or none)");
    const json_t *dp = json_object_get(tc, "disable_parallel_tool_use");
    if (dp && !json_is_null(dp) && !json_is_boolean(dp))
        return rp_api_fail(e, 400, "tool_choice.disable_parallel_tool_use", NULL,
                           "tool_choice.disable_parallel_tool_use: expected a boolean");
    q->parallel_tool_calls = !json_is_true(dp);
    if (strcmp(type, "auto") == 0) {
        q->tool_choice = RP_TOOL_CHOICE_AUTO;
    } else if (strcmp(type, "none") == 0) {
        q->tool_choice = RP_TOOL_CHOICE_NONE;
    } else if (strcmp(type, "any") == 0 || strcmp(type, "tool") == 0) {
        if (!q->tools)
            return rp_api_fail(e, 400, "tool_choice", NULL,
                               "tool_choice: type '%s' needs at least one (custom) tool in 'tools'", type);
        if (type[0] == 'a') {
            q->tool_choice = RP_TOOL_CHOICE_REQUIRED;
        } else {
            const json_t *name = json_object_get(tc, "name");
            if (!json_is_string(name))
                return rp_api_fail(e, 400, "tool_choice.name", NULL, "tool_choice.name: a string is required");
            if (!rp_tools_has(q->tools, json_string_value(name)))
                return rp_api_fail(e, 400, "tool_choice.name", NULL,
                                   "tool_choice.name: '%s' is not one of the (custom) tools in 'tools'",
                                   json_string_value(name));
            q->tool_choice = RP_TOOL_CHOICE_NAMED;
            if (!(q->tool_name = rp_strdup(json_string_value(name))))
                return rp_api_oom(e);
        }
    } else {
        return rp_api_fail(e, 400, "tool_choice.type", NULL,
                           "tool_choice.type: '%s' is not one of 'auto', 'any', 'tool', 'none'", type);
    }
    return true;
}

// thinking -> template_kwargs.enable_thinking.
static bool read_thinking(const json_t *b, rp_api_req *q, rp_api_error *e)
{
    const json_t *th = json_object_get(b, "thinking");
    if (!th || json_is_null(th)) { // as Anthropic: no thinking unless asked for
        if (!(q->template_kwargs = json_pack("{s:b}", "enable_thinking", 0)))
            return rp_api_oom(e);
        return true;
    }
    const char *type = json_string_value(json_object_get(th, "type"));
    if (!json_is_object(th) || !type)
        return rp_api_fail(e, 400, "thinking", NULL,
                           "thinking: expected an object with a 'type' (enabled, disabled or adaptive)");
    bool on;
    if (strcmp(type, "enabled") == 0) {
        long long budget = 0; // checked, not enforced: the reply's thinking is not cut at it
        const json_t *bt = json_object_get(th, "budget_tokens");
        if (!rp_field_int(th, "budget_tokens", 1, INT32_MAX, &budget, e) || !bt || json_is_null(bt))
            return rp_api_fail(e, 400, "thinking.budget_tokens", NULL,
                               "thinking.budget_tokens: a positive integer is required with type 'enabled'");
        on = true;
    } else if (strcmp(type, "adaptive") == 0 || strcmp(type, "between_tools") == 0) {
        on = true;
    } else if (strcmp(type, "disabled") == 0) {
        on = false;
    } else {
        return rp_api_fail(e, 400, "thinking.type", NULL,
                           "thinking.type: '%s' is not one of 'enabled', 'disabled', 'adaptive'", type);
    }
    if (!(q->template_kwargs = json_pack("{s:b}", "enable_thinking", on)))
        return rp_api_oom(e);
    return true;
}

// output_config.format {type: json_schema, schema} -> JSON mode with that schema; the rest of output_config is ignored.
static bool read_output_config(const json_t *b, rp_api_req *q, rp_api_error *e)
{
    const json_t *oc = json_object_get(b, "output_config");
    if (!oc || json_is_null(oc))
        return true;
    if (!json_is_object(oc))
        return rp_api_fail(e, 400, "output_config", NULL, "output_config: expected an object");
    const json_t *f = json_object_get(oc, "format");
    if (!f || json_is_null(f))
        return true;
    const char *type = json_string_value(json_object_get(f, "type"));
    if (!json_is_object(f) || !type)
        return rp_api_fail(e, 400, "output_config.format", NULL,
                           "output_config.format: expected an object with a 'type'");
    if (strcmp(type, "json_schema") != 0)
        return rp_api_fail(e, 400, "output_config.format.type", NULL,
                           "output_config.format.type: '%s' is not 'json_schema'", type);
    return rp_field_json_schema(json_object_get(f, "schema"), "output_config.format.schema", q, e);
}

static bool read_sampling(const json_t *b, rp_api_req *q, rp_api_error *e)
{
    rp_sample_params *sp = &q->sample;
    float top_p = 1;
    long long k = 0;
    if (!rp_field_float(b, "temperature", 0, 1, &sp->temperature, e) || !rp_field_float(b, "top_p", 0, 1, &top_p, e) ||
        !rp_field_int(b, "top_k", 0, 1 << 30, &k, e))
        return false;
    sp->top_k = (int)k;
    if (top_p == 0)
        sp->temperature = 0; // only the most likely token survives
    else
        sp->top_p = top_p;
    const json_t *ss = json_object_get(b, "stop_sequences");
    if (ss && !json_is_null(ss) && !json_is_array(ss))
        return rp_api_fail(e, 400, "stop_sequences", NULL, "stop_sequences: expected an array of strings");
    if (!rp_field_stop(b, "stop_sequences", q, e))
        return false;
    if (rp_sample_params_validate(sp))
        return rp_api_fail(e, 400, NULL, NULL, "%s", rp_error_message());
    return true;
}

// A /v1/messages (or, count_only, /v1/messages/count_tokens) body -> q. q is
// initialized here; deinit it even on failure.
static bool anth_read(const json_t *b, bool count_only, rp_api_req *q, rp_api_error *e)
{
    rp_api_req_init(q);
    if (!rp_field_model(b, q, e) || !read_messages(b, q, e) || !read_tools(b, q, e) || !read_tool_choice(b, q, e) ||
        !read_thinking(b, q, e))
        return false;
    if (count_only)
        return true;
    const json_t *mt = json_object_get(b, "max_tokens");
    if (!mt || json_is_null(mt))
        return rp_api_fail(e, 400, "max_tokens", NULL, "max_tokens: field required");
    long long max_tokens = 0;
    if (!rp_field_int(b, "max_tokens", 1, MAX_TOKENS_LIMIT, &max_tokens, e))
        return false;
    q->max_tokens = (int)max_tokens;
    if (!read_sampling(b, q, e) || !rp_field_bool(b, "stream", &q->stream, e) || !read_output_config(b, q, e))
        return false;
    const json_t *md = json_object_get(b, "metadata");
    if (md && !json_is_null(md) && !json_is_object(md))
        return rp_api_fail(e, 400, "metadata", NULL, "metadata: expected an object");
    return true;
}

/* ---- replies ----------------------------------------------------------------- */

// Anthropic's tool-use ids look like "toolu_...": the driver's "call_X" becomes "toolu_X".
static void tool_id(const char *call_id, char *out, size_t cap)
{
    snprintf(out, cap, "toolu_%s", strncmp(call_id, "call_", 5) == 0 ? call_id + 5 : call_id);
}

// The arguments' JSON text as an object ({} if it is not one; the parsers only emit objects).
static json_t *tool_input(const char *args, size_t len)
{
    json_t *v = rp_json_load_args(args, len);
    if (json_is_object(v))
        return v;
    json_decref(v);
    return json_object();
}

// Anthropic's usage: input_tokens are the prompt tokens not read from the prefix cache.
static json_t *usage_json(const rp_req_stats *st, bool with_output)
{
    return json_pack("{s:i,s:i,s:i,s:i}", "input_tokens", st->n_prompt - st->n_cached, "cache_creation_input_tokens", 0,
                     "cache_read_input_tokens", st->n_cached, "output_tokens", with_output ? st->n_completion : 0);
}

static const char *stop_reason(const rp_drv_info *info, int n_calls)
{
    switch (info->finish) {
    case RP_DRV_LENGTH:
        return "max_tokens";
    case RP_DRV_STOP_STRING:
        return "stop_sequence";
    default:
        return n_calls > 0 ? "tool_use" : "end_turn";
    }
}

// The signature of a thinking block: an opaque marker (nothing verifies it).
static void signature(const char *msg_id, char *out, size_t cap)
{
    snprintf(out, cap, "rapid.%s", msg_id);
}

// The non-streaming Message.
static json_t *message_body(rp_http_req *r, const char *id, const rp_api_req *q, const rp_drv_result *res)
{
    json_t *content = json_array();
    if (!content)
        return NULL;
    if (res->reasoning.len) {
        char sig[96];
        signature(id, sig, sizeof(sig));
        json_array_append_new(content, json_pack("{s:s,s:s%,s:s}", "type", "thinking", "thinking", res->reasoning.data,
                                                 res->reasoning.len, "signature", sig));
    }
    int n_calls = res->n_calls > 0 && !q->parallel_tool_calls ? 1 : res->n_calls;
    if (res->content.len || (n_calls == 0 && res->reasoning.len == 0)) // an empty reply still has a text block
        json_array_append_new(content, json_pack("{s:s,s:s%}", "type", "text", "text",
                                                 res->content.data ? res->content.data : "", res->content.len));
    for (int i = 0; i < n_calls; i++) {
        char tid[64];
        tool_id(res->calls[i].id, tid, sizeof(tid));
        json_array_append_new(content,
                              json_pack("{s:s,s:s,s:s,s:o}", "type", "tool_use", "id", tid, "name", res->calls[i].name,
                                        "input", tool_input(res->calls[i].arguments, strlen(res->calls[i].arguments))));
    }
    const char *ss = res->info.finish == RP_DRV_STOP_STRING ? res->info.stop_string : NULL;
    return json_pack("{s:s,s:s,s:s,s:s,s:o,s:s,s:s?,s:o}", "id", id, "type", "message", "role", "assistant", "model",
                     r->srv->model_name, "content", content, "stop_reason", stop_reason(&res->info, n_calls),
                     "stop_sequence", ss, "usage", usage_json(&r->stats, true));
}

/* ---- streaming --------------------------------------------------------------- */

typedef enum block_kind {
    BLOCK_NONE = 0,
    BLOCK_TEXT = 1,
    BLOCK_THINKING = 2,
} block_kind;

// One stream's state. Belongs to the connection thread.
typedef struct anth_stream {
    rp_drv *drv;
    char id[48];
    bool started;      // message_start sent
    block_kind open;   // the block now open (tool_use blocks open and close at once)
    int n_blocks;      // blocks started so far (the next one's index)
    int n_calls;       // tool_use blocks sent
    bool parallel;     // false: tool calls after the first are dropped
    double last_frame; // rp_time_s() of the last frame (pings)
    double t_open;     // rp_time_s() of the first pump call
} anth_stream;

#define ANTH_START_WAIT_S 0.5 // longest wait for admission before message_start

static void close_block(anth_stream *st, rp_buf *out)
{
    if (st->open == BLOCK_NONE)
        return;
    int index = st->n_blocks - 1;
    if (st->open == BLOCK_THINKING) {
        char sig[96];
        signature(st->id, sig, sizeof(sig));
        rp_sse_json_new(out, "content_block_delta",
                        json_pack("{s:s,s:i,s:{s:s,s:s}}", "type", "content_block_delta", "index", index, "delta",
                                  "type", "signature_delta", "signature", sig));
    }
    rp_sse_json_new(out, "content_block_stop", json_pack("{s:s,s:i}", "type", "content_block_stop", "index", index));
    st->open = BLOCK_NONE;
}

static void open_block(anth_stream *st, block_kind kind, rp_buf *out)
{
    close_block(st, out);
    json_t *blk = kind == BLOCK_TEXT ? json_pack("{s:s,s:s}", "type", "text", "text", "")
                                     : json_pack("{s:s,s:s,s:s}", "type", "thinking", "thinking", "", "signature", "");
    rp_sse_json_new(
        out, "content_block_start",
        json_pack("{s:s,s:i,s:o}", "type", "content_block_start", "index", st->n_blocks, "content_block", blk));
    st->n_blocks++;
    st->open = kind;
}

// message_start (its usage: the prompt and its cache reads, as admitted) and the first ping.
static void stream_start(rp_http_req *r, anth_stream *st, rp_buf *out)
{
    json_t *msg =
        json_pack("{s:s,s:s,s:s,s:[],s:s,s:n,s:n,s:o}", "id", st->id, "type", "message", "role", "assistant", "content",
                  "model", r->srv->model_name, "stop_reason", "stop_sequence", "usage", usage_json(&r->stats, false));
    rp_sse_json_new(out, "message_start", json_pack("{s:s,s:o}", "type", "message_start", "message", msg));
    rp_sse_json_new(out, "ping", json_pack("{s:s}", "type", "ping"));
    st->started = true;
}

// The frames of one driver event.
static void stream_event(anth_stream *st, const rp_drv_event *ev, rp_buf *out)
{
    if (ev->type == RP_DRV_TOOL_CALL) {
        if (!st->parallel && st->n_calls > 0)
            return;
        close_block(st, out);
        char tid[64];
        tool_id(ev->id, tid, sizeof(tid));
        int index = st->n_blocks++;
        rp_sse_json_new(out, "content_block_start",
                        json_pack("{s:s,s:i,s:{s:s,s:s,s:s,s:{}}}", "type", "content_block_start", "index", index,
                                  "content_block", "type", "tool_use", "id", tid, "name", ev->name, "input"));
        rp_sse_json_new(out, "content_block_delta",
                        json_pack("{s:s,s:i,s:{s:s,s:s%}}", "type", "content_block_delta", "index", index, "delta",
                                  "type", "input_json_delta", "partial_json", ev->text, ev->len));
        rp_sse_json_new(out, "content_block_stop",
                        json_pack("{s:s,s:i}", "type", "content_block_stop", "index", index));
        st->n_calls++;
        return;
    }
    bool text = ev->type == RP_DRV_CONTENT;
    block_kind want = text ? BLOCK_TEXT : BLOCK_THINKING;
    if (st->open != want)
        open_block(st, want, out);
    rp_sse_json_new(out, "content_block_delta",
                    json_pack("{s:s,s:i,s:{s:s,s:s%}}", "type", "content_block_delta", "index", st->n_blocks - 1,
                              "delta", "type", text ? "text_delta" : "thinking_delta", text ? "text" : "thinking",
                              ev->text, ev->len));
}

// The end of the stream: close the open block, then message_delta and
// message_stop (or an error frame).
static void stream_finish(rp_http_req *r, anth_stream *st, const rp_drv_info *info, rp_buf *out)
{
    close_block(st, out);
    rp_api_error e;
    if (rp_drv_failed(info, NULL, &e)) {
        rp_sse_error(out, "error", &e, rp_anthropic_error_json);
        return;
    }
    if (st->n_blocks == 0) { // an empty reply still has its (empty) text block
        open_block(st, BLOCK_TEXT, out);
        close_block(st, out);
    }
    const char *ss = info->finish == RP_DRV_STOP_STRING ? info->stop_string : NULL;
    rp_sse_json_new(out, "message_delta",
                    json_pack("{s:s,s:{s:s,s:s?},s:o}", "type", "message_delta", "delta", "stop_reason",
                              stop_reason(info, st->n_calls), "stop_sequence", ss, "usage",
                              usage_json(&r->stats, true)));
    rp_sse_json_new(out, "message_stop", json_pack("{s:s}", "type", "message_stop"));
}

static rp_status anth_pump(void *ctx, rp_http_req *r, rp_buf *out, bool *finished)
{
    anth_stream *st = ctx;
    if (!st->started) {
        // message_start's usage names the prompt's cache reads, known once the
        // engine has admitted the request: wait for that, but not longer than
        // ANTH_START_WAIT_S (a queued request gets its headers and pings; the
        // socket is checked between calls).
        if (st->t_open == 0)
            st->t_open = rp_time_s();
        if (!rp_drv_admitted(st->drv) && rp_time_s() - st->t_open < ANTH_START_WAIT_S) {
            usleep((useconds_t)(RP_STREAM_WAIT_S * 1e6));
            return RP_OK;
        }
        stream_start(r, st, out);
        st->last_frame = rp_time_s();
        return RP_OK;
    }
    const rp_drv_event *ev;
    size_t n;
    bool done;
    rp_status s = rp_drv_next(st->drv, RP_STREAM_WAIT_S, &ev, &n, &done);
    if (s)
        return s;
    for (size_t i = 0; i < n; i++)
        stream_event(st, &ev[i], out);
    if (done) {
        rp_drv_info info;
        rp_drv_get_info(st->drv, &info);
        stream_finish(r, st, &info, out);
        *finished = true;
        return RP_OK;
    }
    double now = rp_time_s();
    if (out->len > 0)
        st->last_frame = now;
    else if (now - st->last_frame >= PING_INTERVAL_S) {
        rp_sse_json_new(out, "ping", json_pack("{s:s}", "type", "ping"));
        st->last_frame = now;
    }
    return RP_OK;
}

static void anth_stream_free(void *ctx, rp_http_req *r)
{
    (void)r;
    anth_stream *st = ctx;
    rp_drv_destroy(st->drv);
    rp_free(st);
}

/* ---- handlers ---------------------------------------------------------------- */

void rp_anthropic_messages(rp_http_req *r, rp_reply *out)
{
    rp_api_error e;
    rp_api_req q;
    json_t *b = NULL;
    rp_drv *d = NULL;
    rp_drv_result res;
    memset(&res, 0, sizeof(res));
    rp_api_req_init(&q);
    if (!rp_http_parse_json(r, &b, &e))
        goto fail;
    rp_api_req_deinit(&q);
    if (!anth_read(b, false, &q, &e) || !rp_server_check_model(r->srv, q.model, &e))
        goto fail;
    if (!rp_drv_start(r, &q, &d, &e))
        goto fail;
    char id[48];
    rp_api_id(id, sizeof(id), "msg_", r->id);
    if (q.stream) {
        anth_stream *st = rp_calloc(1, sizeof(*st));
        if (!st) {
            rp_api_oom(&e);
            goto fail;
        }
        st->drv = d;
        st->parallel = q.parallel_tool_calls;
        memcpy(st->id, id, sizeof(st->id));
        rp_reply_stream(out, anth_pump, anth_stream_free, st);
        d = NULL;
        goto done;
    }
    if (!rp_drv_complete(d, NULL, &res, &e) || !rp_reply_json_new(out, message_body(r, id, &q, &res), &e))
        goto fail;
    goto done;
fail:
    rp_reply_error(r, out, &e);
done:
    rp_drv_result_deinit(&res);
    rp_drv_destroy(d);
    rp_api_req_deinit(&q);
    json_decref(b);
}

void rp_anthropic_count_tokens(rp_http_req *r, rp_reply *out)
{
    rp_api_error e;
    rp_api_req q;
    json_t *b = NULL;
    rp_prompt pr;
    memset(&pr, 0, sizeof(pr));
    rp_api_req_init(&q);
    if (!rp_http_parse_json(r, &b, &e))
        goto fail;
    rp_api_req_deinit(&q);
    if (!anth_read(b, true, &q, &e) || !rp_server_check_model(r->srv, q.model, &e) ||
        !rp_prompt_build(r->srv, &q, &pr, &e) || !rp_reply_json_new(out, json_pack("{s:i}", "input_tokens", pr.n), &e))
        goto fail;
    goto done;
fail:
    rp_reply_error(r, out, &e);
done:
    rp_prompt_deinit(&pr);
    rp_api_req_deinit(&q);
    json_decref(b);
}
