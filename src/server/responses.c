/*
 * responses.c - the OpenAI Responses API: POST /v1/responses (what Codex
 * calls), stateless.
 *
 * A request is read into the neutral rp_api_req (resp_read; every known field
 * type- and range-checked, errors in OpenAI's shape naming the field, unknown
 * fields ignored). `input` (a string, or a list of items) and `instructions`
 * become the OpenAI-style message array the chat template takes:
 *
 *   instructions                         -> a leading system message
 *   message {role, content}              -> a message (developer -> system; content parts
 *                                           input_text / output_text / refusal joined by "\n")
 *   function_call {call_id, name, arguments} -> a tool call of the preceding assistant
 *                                           message (consecutive calls share one message)
 *   function_call_output {call_id, output} -> {"role": "tool", "tool_call_id", "content"}
 *   reasoning {content | summary}        -> reasoning_content of the next assistant message
 *
 * Replies: a non-streaming Response object (status completed, or incomplete
 * with incomplete_details {reason: max_output_tokens}; output items reasoning
 * {content: [reasoning_text]}, message {content: [output_text]} and
 * function_call; usage with cached and reasoning tokens) or an SSE stream whose
 * frames carry `event:` lines and increasing sequence_numbers:
 * response.created, response.in_progress, then per output item
 * response.output_item.added, (response.content_part.added,
 * response.output_text.delta | response.reasoning_text.delta ..., their .done,
 * response.content_part.done) or (response.function_call_arguments.delta,
 * .done), response.output_item.done; and last response.completed,
 * response.incomplete (max_output_tokens reached) or response.failed (the
 * engine failed), each with the whole Response.
 *
 * Decisions:
 *   - stateless: `store` is accepted but nothing is kept; previous_response_id,
 *     conversation, background and prompt (stored prompts) are a 400, as is an
 *     item_reference input item;
 *   - tools of types other than "function" (web_search, file_search,
 *     local_shell, custom, mcp, ...) are ignored: the model is not offered
 *     them (naming one in tool_choice is a 400); allowed_tools tool_choice
 *     uses its mode (auto/required) without narrowing the list;
 *   - reasoning.effort "none" turns the template's thinking off; other
 *     efforts leave the template's default; text.format json_object
 *     constrains the reply to one JSON object, json_schema to its schema
 *     (enforced by the grammar, or a 400);
 *   - image, file and audio content is a 400 (the models are text-only);
 *   - parallel_tool_calls false keeps the first call only;
 *   - usage.output_tokens_details.reasoning_tokens counts the reasoning text
 *     re-tokenized; input_tokens_details.cache_write_tokens is 0 (no priced
 *     cache writes); fields the document has optional and not nullable are left
 *     out rather than null (usage before the end of a stream and on a failure,
 *     user when not given); include, truncation, max_tool_calls, top_logprobs,
 *     prompt_cache_key, service_tier, safety_identifier, user and metadata
 *     are accepted and ignored (metadata is echoed);
 *   - max_output_tokens may be any positive number (OpenAI's floor of 16 is
 *     not applied); sampling has no seed field: each request gets a fresh seed;
 *   - every Response carries `output_text` (the messages' text joined), which
 *     OpenAI leaves to its SDKs: their stream helpers return the final Response
 *     as sent, so it is only there when the server sends it.
 */
#include "server_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define MAX_OUTPUT_LIMIT ((long long)1 << 30)

/* ---- reading requests -------------------------------------------------------- */

// What the Response object echoes of its request (owned references).
typedef struct resp_echo {
    json_t *fields; // instructions, max_output_tokens, parallel_tool_calls, previous_response_id, reasoning,
                    // store, temperature, text, tool_choice, tools, top_p, truncation, user, metadata
} resp_echo;

static void echo_deinit(resp_echo *x)
{
    json_decref(x->fields);
    x->fields = NULL;
}

// Input conversion state.
typedef struct conv {
    json_t *out;      // the template messages
    rp_buf reasoning; // reasoning items' text waiting for the next assistant message
    bool have_reasoning;
} conv;

static json_t *last_msg(conv *c)
{
    size_t n = json_array_size(c->out);
    return n ? json_array_get(c->out, n - 1) : NULL;
}

// Gives pending reasoning to an assistant message.
static void attach_reasoning(conv *c, json_t *msg)
{
    if (!c->have_reasoning)
        return;
    const char *old = json_string_value(json_object_get(msg, "reasoning_content"));
    rp_buf t;
    rp_buf_init(&t);
    if (old && *old) {
        rp_buf_puts(&t, old);
        rp_buf_puts(&t, "\n");
    }
    rp_buf_append(&t, c->reasoning.data ? c->reasoning.data : "", c->reasoning.len);
    if (!t.failed)
        json_object_set_new(msg, "reasoning_content", json_stringn(t.data ? t.data : "", t.len));
    rp_buf_deinit(&t);
    rp_buf_reset(&c->reasoning);
    c->have_reasoning = false;
}

// Content parts (or a string) -> text. Text kinds: input_text, output_text, text; refusal.
static const rp_text_part text_parts[] = {
    {"input_text", "text"}, {"output_text", "text"}, {"text", "text"}, {"refusal", "refusal"}, {NULL, NULL}};

static bool parts_text(const json_t *c, const char *where, rp_buf *out, rp_api_error *e)
{
    return rp_field_parts_text(c, where, text_parts, false, out, e);
}

static bool item_message(conv *c, const json_t *it, const char *p, rp_api_error *e)
{
    char pr[96], pc[96];
    snprintf(pr, sizeof(pr), "%s.role", p);
    snprintf(pc, sizeof(pc), "%s.content", p);
    const char *role = json_string_value(json_object_get(it, "role"));
    if (!role)
        return rp_api_fail(e, 400, pr, "missing_required_parameter", "'%s' is required (a string)", pr);
    if (strcmp(role, "developer") == 0)
        role = "system";
    else if (strcmp(role, "system") != 0 && strcmp(role, "user") != 0 && strcmp(role, "assistant") != 0)
        return rp_api_fail(e, 400, pr, "invalid_value", "'%s' is '%s'; expected user, assistant, system or developer",
                           pr, role);
    const json_t *content = json_object_get(it, "content");
    if (!content || json_is_null(content))
        return rp_api_fail(e, 400, pc, "missing_required_parameter", "'%s' is required", pc);
    rp_buf t;
    rp_buf_init(&t);
    bool ok = parts_text(content, pc, &t, e);
    if (ok && t.failed)
        ok = rp_api_oom(e);
    json_t *m = ok ? json_pack("{s:s,s:s%}", "role", role, "content", t.data ? t.data : "", t.len) : NULL;
    rp_buf_deinit(&t);
    if (!ok)
        return false;
    if (!m)
        return rp_api_oom(e);
    if (strcmp(role, "assistant") == 0) {
        attach_reasoning(c, m);
    } else {
        rp_buf_reset(&c->reasoning); // reasoning with no assistant turn after it is dropped
        c->have_reasoning = false;
    }
    return rp_api_append_new(c->out, m, e);
}

static bool item_function_call(conv *c, const json_t *it, const char *p, rp_api_error *e)
{
    const json_t *call_id = json_object_get(it, "call_id"), *name = json_object_get(it, "name");
    const json_t *args = json_object_get(it, "arguments");
    if (!json_is_string(call_id) || !json_is_string(name) || json_string_length(name) == 0 || !json_is_string(args))
        return rp_api_fail(e, 400, p, "invalid_value",
                           "'%s' (a function_call) needs string 'call_id', 'name' and 'arguments'", p);
    json_t *a = rp_json_load_args(json_string_value(args), json_string_length(args));
    if (!a)
        a = json_copy((json_t *)args); // not JSON: the template gets the text as it is
    json_t *call =
        json_pack("{s:O,s:s,s:{s:O,s:o}}", "id", call_id, "type", "function", "function", "name", name, "arguments", a);
    if (!call)
        return rp_api_oom(e);
    // Calls join the assistant message just before them (its text, earlier calls).
    json_t *m = last_msg(c);
    bool join = m && strcmp(json_string_value(json_object_get(m, "role")), "assistant") == 0;
    if (!join) {
        if (!(m = json_pack("{s:s,s:s}", "role", "assistant", "content", ""))) {
            json_decref(call);
            return rp_api_oom(e);
        }
        if (!rp_api_append_new(c->out, m, e)) {
            json_decref(call);
            return false;
        }
    }
    attach_reasoning(c, m);
    json_t *calls = json_object_get(m, "tool_calls");
    if (!calls) {
        calls = json_array();
        if (!calls || json_object_set_new(m, "tool_calls", calls)) {
            json_decref(call);
            return rp_api_oom(e);
        }
    }
    if (json_array_append_new(calls, call))
        return rp_api_oom(e);
    return true;
}

static bool item_call_output(conv *c, const json_t *it, const char *p, rp_api_error *e)
{
    const json_t *call_id = json_object_get(it, "call_id"), *output = json_object_get(it, "output");
    if (!json_is_string(call_id))
        return rp_api_fail(e, 400, p, "invalid_value", "'%s' (a function_call_output) needs a string 'call_id'", p);
    char po[96];
    snprintf(po, sizeof(po), "%s.output", p);
    if (!output || json_is_null(output))
        return rp_api_fail(e, 400, po, "missing_required_parameter", "'%s' is required", po);
    rp_buf t;
    rp_buf_init(&t);
    bool ok = parts_text(output, po, &t, e);
    if (ok && t.failed)
        ok = rp_api_oom(e);
    if (ok)
        ok = rp_api_append_new(c->out,
                               json_pack("{s:s,s:O,s:s%}", "role", "tool", "tool_call_id", call_id, "content",
                                         t.data ? t.data : "", t.len),
                               e);
    rp_buf_deinit(&t);
    return ok;
}

// A reasoning item: its content (reasoning_text), else its summary (summary_text).
static bool item_reasoning(conv *c, const json_t *it, const char *p, rp_api_error *e)
{
    const json_t *parts = json_object_get(it, "content");
    if (!json_is_array(parts) || json_array_size(parts) == 0)
        parts = json_object_get(it, "summary");
    if (!parts || json_is_null(parts))
        return true;
    if (!json_is_array(parts))
        return rp_api_fail(e, 400, p, "invalid_type", "'%s' (a reasoning item): summary must be an array", p);
    size_t i;
    const json_t *part;
    json_array_foreach(parts, i, part) {
        const json_t *t = json_object_get(part, "text");
        if (!json_is_string(t))
            return rp_api_fail(e, 400, p, "invalid_type", "'%s' (a reasoning item): every part needs a string 'text'",
                               p);
        if (c->have_reasoning)
            rp_buf_puts(&c->reasoning, "\n");
        rp_buf_append(&c->reasoning, json_string_value(t), json_string_length(t));
        c->have_reasoning = true;
    }
    return c->reasoning.failed ? rp_api_oom(e) : true;
}

static bool read_input(const json_t *b, rp_api_req *q, rp_api_error *e)
{
    const json_t *input = json_object_get(b, "input");
    if (!input || json_is_null(input))
        return rp_api_fail(e, 400, "input", "missing_required_parameter", "'input' is required");
    if (!json_is_string(input) && !json_is_array(input))
        return rp_api_fail(e, 400, "input", "invalid_type",
                           "invalid type for 'input': expected a string or an array of input items");
    conv c = {0};
    rp_buf_init(&c.reasoning);
    if (!(c.out = json_array()))
        return rp_api_oom(e);
    q->messages = c.out;
    bool ok = false;
    const char *instr = NULL;
    size_t ilen = 0;
    if (!rp_field_string(b, "instructions", &instr, &ilen, e))
        goto done;
    if (instr && ilen &&
        !rp_api_append_new(c.out, json_pack("{s:s,s:s%}", "role", "system", "content", instr, ilen), e))
        goto done;
    if (json_is_string(input)) {
        ok = rp_api_append_new(c.out, json_pack("{s:s,s:O}", "role", "user", "content", input), e);
        goto done;
    }
    size_t i;
    const json_t *it;
    json_array_foreach(input, i, it) {
        char p[64];
        snprintf(p, sizeof(p), "input[%zu]", i);
        if (!json_is_object(it)) {
            rp_api_fail(e, 400, p, "invalid_type", "invalid type for '%s': expected an object", p);
            goto done;
        }
        const json_t *tv = json_object_get(it, "type");
        const char *type = json_string_value(tv);
        if (tv && !json_is_null(tv) && !type) {
            rp_api_fail(e, 400, p, "invalid_type", "'%s.type' must be a string", p);
            goto done;
        }
        bool good;
        if (!type || strcmp(type, "message") == 0)
            good = item_message(&c, it, p, e);
        else if (strcmp(type, "function_call") == 0)
            good = item_function_call(&c, it, p, e);
        else if (strcmp(type, "function_call_output") == 0)
            good = item_call_output(&c, it, p, e);
        else if (strcmp(type, "reasoning") == 0)
            good = item_reasoning(&c, it, p, e);
        else if (strcmp(type, "item_reference") == 0)
            good = rp_api_fail(e, 400, p, "unsupported_parameter",
                               "'%s' is an item_reference; this server is stateless and keeps no items: send the "
                               "item itself",
                               p);
        else
            good = rp_api_fail(e, 400, p, "unsupported_value",
                               "'%s' has type '%s'; supported input items are message, function_call, "
                               "function_call_output and reasoning",
                               p, type);
        if (!good)
            goto done;
    }
    if (json_array_size(c.out) == 0) {
        rp_api_fail(e, 400, "input", "invalid_value", "'input' has no message the model can read");
        goto done;
    }
    ok = true;
done:
    rp_buf_deinit(&c.reasoning);
    return ok;
}

// Responses function tools -> OpenAI chat tools; other tool types are skipped.
static bool read_tools(const json_t *b, rp_api_req *q, rp_api_error *e)
{
    const json_t *tools = json_object_get(b, "tools");
    if (!tools || json_is_null(tools))
        return true;
    if (!json_is_array(tools))
        return rp_api_fail(e, 400, "tools", "invalid_type", "invalid type for 'tools': expected an array");
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t) {
        char p[48];
        snprintf(p, sizeof(p), "tools[%zu]", i);
        const char *type = json_string_value(json_object_get(t, "type"));
        if (!json_is_object(t) || !type)
            return rp_api_fail(e, 400, p, "invalid_type", "'%s' must be an object with a 'type'", p);
        if (strcmp(type, "function") != 0)
            continue; // hosted and custom tools: not offered to the model
        const json_t *name = json_object_get(t, "name"), *desc = json_object_get(t, "description");
        const json_t *params = json_object_get(t, "parameters");
        const char *err = NULL;
        if (!json_is_string(name) || json_string_length(name) == 0)
            err = "'%s.name' is required (a non-empty string)";
        else if (params && !json_is_null(params) && !json_is_object(params))
            err = "'%s.parameters' must be an object";
        else if (desc && !json_is_null(desc) && !json_is_string(desc))
            err = "'%s.description' must be a string";
        if (err)
            return rp_api_fail(e, 400, p, "invalid_value", err, p);
        if (!rp_api_req_add_tool(q, name, desc, params, e))
            return false;
    }
    return true;
}

static bool read_tool_choice(const json_t *b, rp_api_req *q, rp_api_error *e)
{
    const json_t *tc = json_object_get(b, "tool_choice");
    if (!tc || json_is_null(tc))
        return rp_field_bool(b, "parallel_tool_calls", &q->parallel_tool_calls, e);
    const char *mode = json_string_value(tc);
    if (json_is_object(tc)) {
        const char *type = json_string_value(json_object_get(tc, "type"));
        if (!type)
            return rp_api_fail(e, 400, "tool_choice", "invalid_type", "'tool_choice' as an object needs a 'type'");
        if (strcmp(type, "function") == 0) {
            const char *name = json_string_value(json_object_get(tc, "name"));
            if (!name)
                return rp_api_fail(e, 400, "tool_choice", "invalid_value",
                                   "'tool_choice' of type function needs a 'name'");
            if (!q->tools || !rp_tools_has(q->tools, name))
                return rp_api_fail(e, 400, "tool_choice", "invalid_value",
                                   "'tool_choice' names '%s', which is not a function in 'tools'", name);
            q->tool_choice = RP_TOOL_CHOICE_NAMED;
            if (!(q->tool_name = rp_strdup(name)))
                return rp_api_oom(e);
            return rp_field_bool(b, "parallel_tool_calls", &q->parallel_tool_calls, e);
        }
        if (strcmp(type, "allowed_tools") != 0)
            return rp_api_fail(e, 400, "tool_choice", "unsupported_value",
                               "'tool_choice' selects a '%s' tool; only function tools are available here", type);
        mode = json_string_value(json_object_get(tc, "mode"));
        if (!mode)
            return rp_api_fail(e, 400, "tool_choice.mode", "invalid_value",
                               "'tool_choice.mode' is required (auto or required)");
    } else if (!mode) {
        return rp_api_fail(e, 400, "tool_choice", "invalid_type",
                           "invalid type for 'tool_choice': expected a string or an object");
    }
    if (!rp_field_tool_mode(mode, q, e))
        return false;
    if (q->tool_choice == RP_TOOL_CHOICE_REQUIRED && !q->tools)
        return rp_api_fail(e, 400, "tool_choice", "invalid_value",
                           "'tool_choice' is 'required' but 'tools' has no function tool");
    return rp_field_bool(b, "parallel_tool_calls", &q->parallel_tool_calls, e);
}

static bool read_reasoning(const json_t *b, rp_api_req *q, rp_api_error *e)
{
    const json_t *r = json_object_get(b, "reasoning");
    if (!r || json_is_null(r))
        return true;
    if (!json_is_object(r))
        return rp_api_fail(e, 400, "reasoning", "invalid_type", "invalid type for 'reasoning': expected an object");
    const json_t *ev = json_object_get(r, "effort");
    if (!ev || json_is_null(ev))
        return true;
    const char *effort = json_string_value(ev);
    static const char *known[] = {"none", "minimal", "low", "medium", "high", "xhigh"};
    bool ok = false;
    for (size_t i = 0; effort && i < sizeof(known) / sizeof(known[0]); i++)
        ok |= strcmp(effort, known[i]) == 0;
    if (!ok)
        return rp_api_fail(e, 400, "reasoning.effort", "invalid_value",
                           "'reasoning.effort' must be one of none, minimal, low, medium, high, xhigh");
    if (strcmp(effort, "none") == 0 && !(q->template_kwargs = json_pack("{s:b}", "enable_thinking", 0)))
        return rp_api_oom(e);
    return true;
}

static bool read_text(const json_t *b, rp_api_req *q, rp_api_error *e)
{
    const json_t *t = json_object_get(b, "text");
    if (!t || json_is_null(t))
        return true;
    if (!json_is_object(t))
        return rp_api_fail(e, 400, "text", "invalid_type", "invalid type for 'text': expected an object");
    return rp_field_json_format(json_object_get(t, "format"), "text.format", false, q, e);
}

// Fields this server cannot honour because it keeps no state.
static bool read_stateless(const json_t *b, bool *store, rp_api_error *e)
{
    static const char *stateful[] = {"previous_response_id", "conversation", "prompt"};
    for (size_t i = 0; i < sizeof(stateful) / sizeof(stateful[0]); i++) {
        const json_t *v = json_object_get(b, stateful[i]);
        if (v && !json_is_null(v))
            return rp_api_fail(e, 400, stateful[i], "unsupported_parameter",
                               "'%s' is not supported: this server is stateless (send the whole conversation in "
                               "'input')",
                               stateful[i]);
    }
    bool bg = false;
    if (!rp_field_bool(b, "background", &bg, e) || !rp_field_bool(b, "store", store, e))
        return false;
    if (bg)
        return rp_api_fail(e, 400, "background", "unsupported_parameter",
                           "'background' responses are not supported: this server is stateless");
    return true;
}

// Builds the echo of the request that every Response object repeats.
static bool build_echo(const json_t *b, const rp_api_req *q, bool store, resp_echo *x, rp_api_error *e)
{
    const json_t *instr = json_object_get(b, "instructions"), *tools = json_object_get(b, "tools");
    const json_t *tc = json_object_get(b, "tool_choice"), *reasoning = json_object_get(b, "reasoning");
    const json_t *text = json_object_get(b, "text"), *md = json_object_get(b, "metadata");
    const json_t *user = json_object_get(b, "user");
    x->fields = json_object();
    json_t *f = x->fields;
    if (!f)
        return rp_api_oom(e);
    json_object_set_new(f, "instructions", json_is_string(instr) ? json_copy((json_t *)instr) : json_null());
    json_object_set_new(f, "max_output_tokens", q->max_tokens > 0 ? json_integer(q->max_tokens) : json_null());
    json_object_set_new(f, "parallel_tool_calls", json_boolean(q->parallel_tool_calls));
    json_object_set_new(f, "previous_response_id", json_null());
    json_t *rs = json_is_object(reasoning) ? json_deep_copy(reasoning) : json_object();
    if (rs && !json_object_get(rs, "effort"))
        json_object_set_new(rs, "effort", json_null());
    if (rs && !json_object_get(rs, "summary"))
        json_object_set_new(rs, "summary", json_null());
    json_object_set_new(f, "reasoning", rs);
    json_object_set_new(f, "store", json_boolean(store));
    const json_t *temp = json_object_get(b, "temperature"), *top_p = json_object_get(b, "top_p");
    json_object_set_new(f, "temperature", json_is_number(temp) ? json_copy((json_t *)temp) : json_real(1.0));
    json_t *tx = json_is_object(text) ? json_deep_copy(text) : json_object();
    if (tx && !json_object_get(tx, "format"))
        json_object_set_new(tx, "format", json_pack("{s:s}", "type", "text"));
    json_object_set_new(f, "text", tx);
    json_object_set_new(f, "tool_choice", tc && !json_is_null(tc) ? json_deep_copy(tc) : json_string("auto"));
    json_object_set_new(f, "tools", json_is_array(tools) ? json_deep_copy(tools) : json_array());
    json_object_set_new(f, "top_p", json_is_number(top_p) ? json_copy((json_t *)top_p) : json_real(1.0));
    json_object_set_new(f, "truncation", json_string("disabled"));
    if (json_is_string(user)) // optional and not nullable: left out when not given
        json_object_set_new(f, "user", json_copy((json_t *)user));
    json_object_set_new(f, "metadata", json_is_object(md) ? json_deep_copy(md) : json_object());
    if (json_object_size(f) != 13u + json_is_string(user))
        return rp_api_oom(e);
    return true;
}

// A /v1/responses body -> q and the echo. q is initialized here; deinit both even on failure.
static bool resp_read(const json_t *b, rp_api_req *q, resp_echo *x, rp_api_error *e)
{
    rp_api_req_init(q);
    memset(x, 0, sizeof(*x));
    bool store = true;
    long long mt = -1;
    float top_p = 1;
    if (!rp_field_model(b, q, e) || !read_stateless(b, &store, e) || !read_input(b, q, e) || !read_tools(b, q, e) ||
        !read_tool_choice(b, q, e) || !read_reasoning(b, q, e) || !read_text(b, q, e) ||
        !rp_field_int(b, "max_output_tokens", 1, MAX_OUTPUT_LIMIT, &mt, e) ||
        !rp_field_float(b, "temperature", 0, 2, &q->sample.temperature, e) ||
        !rp_field_float(b, "top_p", 0, 1, &top_p, e) || !rp_field_bool(b, "stream", &q->stream, e))
        return false;
    const json_t *md = json_object_get(b, "metadata");
    if (md && !json_is_null(md) && !json_is_object(md))
        return rp_api_fail(e, 400, "metadata", "invalid_type", "invalid type for 'metadata': expected an object");
    q->max_tokens = (int)mt;
    if (top_p == 0)
        q->sample.temperature = 0; // only the most likely token survives
    else
        q->sample.top_p = top_p;
    if (rp_sample_params_validate(&q->sample))
        return rp_api_fail(e, 400, NULL, "invalid_value", "%s", rp_error_message());
    return build_echo(b, q, store, x, e);
}

/* ---- replies ----------------------------------------------------------------- */

// Tokens of the reasoning text (the usage's reasoning_tokens), at most n_max.
static int reasoning_tokens(const rp_tokenizer *tok, const char *text, size_t len, int n_max)
{
    if (!tok || len == 0)
        return 0;
    int32_t *ids = NULL;
    size_t n = 0;
    if (rp_tok_encode(tok, text, len, false, &ids, &n))
        return 0;
    rp_free(ids);
    return (int)n < n_max ? (int)n : n_max;
}

// ResponseUsage. cache_write_tokens (required by OpenAI's current document) is 0: the
// prefix cache keeps every prompt without a separate, priced write (as Anthropic's
// cache_creation_input_tokens, also 0).
static json_t *usage_json(const rp_req_stats *st, int n_reasoning)
{
    return json_pack("{s:i,s:{s:i,s:i},s:i,s:{s:i},s:i}", "input_tokens", st->n_prompt, "input_tokens_details",
                     "cached_tokens", st->n_cached, "cache_write_tokens", 0, "output_tokens", st->n_completion,
                     "output_tokens_details", "reasoning_tokens", n_reasoning, "total_tokens",
                     st->n_prompt + st->n_completion);
}

// The text of the output's messages joined: the SDKs' `output_text` convenience,
// sent too so that their stream helpers' final Response has it.
static json_t *output_text(const json_t *output)
{
    rp_buf t;
    rp_buf_init(&t);
    size_t i, k;
    const json_t *it, *part;
    json_array_foreach(output, i, it) {
        const char *type = json_string_value(json_object_get(it, "type"));
        if (!type || strcmp(type, "message") != 0)
            continue;
        json_array_foreach(json_object_get(it, "content"), k, part) {
            const json_t *tx = json_object_get(part, "text");
            if (json_is_string(tx))
                rp_buf_append(&t, json_string_value(tx), json_string_length(tx));
        }
    }
    json_t *v = t.failed ? NULL : json_stringn(t.data ? t.data : "", t.len);
    rp_buf_deinit(&t);
    return v;
}

// A Response object. output and usage are stolen (usage may be NULL: left out, as the
// document has it optional and not nullable: the stream's first events and a failure).
static json_t *response_object(rp_http_req *r, const char *id, long long created, const resp_echo *x,
                               const char *status, const char *incomplete, json_t *error, json_t *output, json_t *usage)
{
    json_t *o = json_pack("{s:s,s:s,s:I,s:s,s:b,s:o,s:o}", "id", id, "object", "response", "created_at",
                          (json_int_t)created, "status", status, "background", 0, "error", error ? error : json_null(),
                          "incomplete_details", incomplete ? json_pack("{s:s}", "reason", incomplete) : json_null());
    if (o) {
        json_object_set_new(o, "model", json_string(r->srv->model_name));
        json_object_update(o, x->fields);
        json_object_set_new(o, "output", output ? output : json_array());
        json_object_set_new(o, "output_text", output_text(json_object_get(o, "output")));
        if (usage)
            json_object_set_new(o, "usage", usage);
    } else {
        json_decref(output);
        json_decref(usage);
    }
    return o;
}

static json_t *reasoning_item(const char *id, const char *text, size_t len)
{
    return json_pack("{s:s,s:s,s:[],s:[{s:s,s:s%}]}", "id", id, "type", "reasoning", "summary", "content", "type",
                     "reasoning_text", "text", text, len);
}

static json_t *text_part(const char *text, size_t len)
{
    return json_pack("{s:s,s:s%,s:[],s:[]}", "type", "output_text", "text", text, len, "annotations", "logprobs");
}

static json_t *message_item(const char *id, const char *status, const char *text, size_t len)
{
    return json_pack("{s:s,s:s,s:s,s:s,s:[o]}", "id", id, "type", "message", "status", status, "role", "assistant",
                     "content", text_part(text, len));
}

static json_t *call_item(const char *id, const char *status, const char *call_id, const char *name, const char *args,
                         size_t len)
{
    return json_pack("{s:s,s:s,s:s,s:s%,s:s,s:s}", "id", id, "type", "function_call", "status", status, "arguments",
                     args, len, "call_id", call_id, "name", name);
}

// The code of a Response's error when the engine failed (or the request was cancelled).
#define DRV_ERROR_CODE "server_error"

// The non-streaming Response.
static json_t *response_body(rp_http_req *r, const char *id, long long created, const rp_api_req *q, const resp_echo *x,
                             const rp_drv_result *res)
{
    json_t *output = json_array();
    if (!output)
        return NULL;
    bool cut = res->info.finish == RP_DRV_LENGTH;
    char iid[48];
    if (res->reasoning.len) {
        rp_api_id(iid, sizeof(iid), "rs_", r->id);
        json_array_append_new(output, reasoning_item(iid, res->reasoning.data, res->reasoning.len));
    }
    int n_calls = res->n_calls > 0 && !q->parallel_tool_calls ? 1 : res->n_calls;
    if (res->content.len || (n_calls == 0 && res->reasoning.len == 0)) { // an empty reply is still a message
        rp_api_id(iid, sizeof(iid), "msg_", r->id);
        json_array_append_new(output, message_item(iid, cut ? "incomplete" : "completed",
                                                   res->content.data ? res->content.data : "", res->content.len));
    }
    for (int i = 0; i < n_calls; i++) {
        rp_api_id(iid, sizeof(iid), "fc_", r->id);
        json_array_append_new(output, call_item(iid, "completed", res->calls[i].id, res->calls[i].name,
                                                res->calls[i].arguments, strlen(res->calls[i].arguments)));
    }
    int nr = reasoning_tokens(r->srv->tok, res->reasoning.data, res->reasoning.len, r->stats.n_completion);
    return response_object(r, id, created, x, cut ? "incomplete" : "completed", cut ? "max_output_tokens" : NULL, NULL,
                           output, usage_json(&r->stats, nr));
}

/* ---- streaming --------------------------------------------------------------- */

typedef enum item_kind {
    ITEM_NONE = 0,
    ITEM_MESSAGE = 1,
    ITEM_REASONING = 2,
} item_kind;

// One stream's state. Belongs to the connection thread.
typedef struct resp_stream {
    rp_drv *drv;
    resp_echo echo;
    char id[48];
    long long created;
    bool started;
    int seq;        // the next sequence_number
    item_kind open; // the item being streamed (function calls open and close at once)
    char item_id[48];
    rp_buf text;      // the open item's text so far
    rp_buf reasoning; // all reasoning text (usage)
    json_t *output;   // finished items, in order
    int n_calls;
    bool parallel;
} resp_stream;

// Writes one event: its `event:` line is its type; sequence_number is added. Steals ev.
static void emit(resp_stream *st, rp_buf *out, json_t *ev)
{
    if (!ev) {
        out->failed = true;
        return;
    }
    json_object_set_new(ev, "sequence_number", json_integer(st->seq++));
    rp_sse_json_new(out, json_string_value(json_object_get(ev, "type")), ev);
}

static int output_index(const resp_stream *st)
{
    return (int)json_array_size(st->output);
}

static void close_item(resp_stream *st, bool cut, rp_buf *out)
{
    if (st->open == ITEM_NONE)
        return;
    int oi = output_index(st);
    const char *text = st->text.data ? st->text.data : "";
    size_t len = st->text.len;
    json_t *item;
    if (st->open == ITEM_MESSAGE) {
        emit(st, out,
             json_pack("{s:s,s:s,s:i,s:i,s:s%,s:[]}", "type", "response.output_text.done", "item_id", st->item_id,
                       "output_index", oi, "content_index", 0, "text", text, len, "logprobs"));
        emit(st, out,
             json_pack("{s:s,s:s,s:i,s:i,s:o}", "type", "response.content_part.done", "item_id", st->item_id,
                       "output_index", oi, "content_index", 0, "part", text_part(text, len)));
        item = message_item(st->item_id, cut ? "incomplete" : "completed", text, len);
    } else {
        emit(st, out,
             json_pack("{s:s,s:s,s:i,s:i,s:s%}", "type", "response.reasoning_text.done", "item_id", st->item_id,
                       "output_index", oi, "content_index", 0, "text", text, len));
        emit(st, out,
             json_pack("{s:s,s:s,s:i,s:i,s:{s:s,s:s%}}", "type", "response.content_part.done", "item_id", st->item_id,
                       "output_index", oi, "content_index", 0, "part", "type", "reasoning_text", "text", text, len));
        item = reasoning_item(st->item_id, text, len);
    }
    emit(st, out, json_pack("{s:s,s:i,s:O}", "type", "response.output_item.done", "output_index", oi, "item", item));
    if (!item || json_array_append_new(st->output, item))
        out->failed = true;
    st->open = ITEM_NONE;
    rp_buf_reset(&st->text);
}

static void open_item(resp_stream *st, item_kind kind, rp_http_req *r, rp_buf *out)
{
    close_item(st, false, out);
    int oi = output_index(st);
    bool msg = kind == ITEM_MESSAGE;
    rp_api_id(st->item_id, sizeof(st->item_id), msg ? "msg_" : "rs_", r->id);
    json_t *item = msg ? json_pack("{s:s,s:s,s:s,s:s,s:[]}", "id", st->item_id, "type", "message", "status",
                                   "in_progress", "role", "assistant", "content")
                       : json_pack("{s:s,s:s,s:[],s:[]}", "id", st->item_id, "type", "reasoning", "summary", "content");
    emit(st, out, json_pack("{s:s,s:i,s:o}", "type", "response.output_item.added", "output_index", oi, "item", item));
    json_t *part = msg ? text_part("", 0) : json_pack("{s:s,s:s}", "type", "reasoning_text", "text", "");
    emit(st, out,
         json_pack("{s:s,s:s,s:i,s:i,s:o}", "type", "response.content_part.added", "item_id", st->item_id,
                   "output_index", oi, "content_index", 0, "part", part));
    st->open = kind;
}

static void stream_event(rp_http_req *r, resp_stream *st, const rp_drv_event *ev, rp_buf *out)
{
    if (ev->type == RP_DRV_TOOL_CALL) {
        if (!st->parallel && st->n_calls > 0)
            return;
        close_item(st, false, out);
        int oi = output_index(st);
        char fid[48];
        rp_api_id(fid, sizeof(fid), "fc_", r->id);
        emit(st, out,
             json_pack("{s:s,s:i,s:o}", "type", "response.output_item.added", "output_index", oi, "item",
                       call_item(fid, "in_progress", ev->id, ev->name, "", 0)));
        emit(st, out,
             json_pack("{s:s,s:s,s:i,s:s%}", "type", "response.function_call_arguments.delta", "item_id", fid,
                       "output_index", oi, "delta", ev->text, ev->len));
        emit(st, out,
             json_pack("{s:s,s:s,s:i,s:s,s:s%}", "type", "response.function_call_arguments.done", "item_id", fid,
                       "output_index", oi, "name", ev->name, "arguments", ev->text, ev->len));
        json_t *item = call_item(fid, "completed", ev->id, ev->name, ev->text, ev->len);
        emit(st, out,
             json_pack("{s:s,s:i,s:O}", "type", "response.output_item.done", "output_index", oi, "item", item));
        if (!item || json_array_append_new(st->output, item))
            out->failed = true;
        st->n_calls++;
        return;
    }
    bool msg = ev->type == RP_DRV_CONTENT;
    item_kind want = msg ? ITEM_MESSAGE : ITEM_REASONING;
    if (st->open != want)
        open_item(st, want, r, out);
    rp_buf_append(&st->text, ev->text, ev->len);
    if (!msg)
        rp_buf_append(&st->reasoning, ev->text, ev->len);
    json_t *d =
        msg ? json_pack("{s:s,s:s,s:i,s:i,s:s%,s:[]}", "type", "response.output_text.delta", "item_id", st->item_id,
                        "output_index", output_index(st), "content_index", 0, "delta", ev->text, ev->len, "logprobs")
            : json_pack("{s:s,s:s,s:i,s:i,s:s%}", "type", "response.reasoning_text.delta", "item_id", st->item_id,
                        "output_index", output_index(st), "content_index", 0, "delta", ev->text, ev->len);
    emit(st, out, d);
    if (st->text.failed || st->reasoning.failed)
        out->failed = true;
}

static void stream_start(rp_http_req *r, resp_stream *st, rp_buf *out)
{
    json_t *resp = response_object(r, st->id, st->created, &st->echo, "in_progress", NULL, NULL, NULL, NULL);
    emit(st, out, json_pack("{s:s,s:O}", "type", "response.created", "response", resp));
    emit(st, out, json_pack("{s:s,s:o}", "type", "response.in_progress", "response", resp));
    st->started = true;
}

static void stream_finish(rp_http_req *r, resp_stream *st, const rp_drv_info *info, rp_buf *out)
{
    rp_api_error e;
    if (rp_drv_failed(info, DRV_ERROR_CODE, &e)) {
        close_item(st, true, out);
        json_t *err = json_pack("{s:s,s:s}", "code", e.code ? e.code : "server_error", "message", e.message);
        json_t *resp =
            response_object(r, st->id, st->created, &st->echo, "failed", NULL, err, json_deep_copy(st->output), NULL);
        emit(st, out, json_pack("{s:s,s:o}", "type", "response.failed", "response", resp));
        return;
    }
    bool cut = info->finish == RP_DRV_LENGTH;
    if (output_index(st) == 0 && st->open == ITEM_NONE) // an empty reply is still a message
        open_item(st, ITEM_MESSAGE, r, out);
    close_item(st, cut, out);
    int nr = reasoning_tokens(r->srv->tok, st->reasoning.data, st->reasoning.len, r->stats.n_completion);
    json_t *resp =
        response_object(r, st->id, st->created, &st->echo, cut ? "incomplete" : "completed",
                        cut ? "max_output_tokens" : NULL, NULL, json_deep_copy(st->output), usage_json(&r->stats, nr));
    emit(st, out, json_pack("{s:s,s:o}", "type", cut ? "response.incomplete" : "response.completed", "response", resp));
}

static rp_status resp_pump(void *ctx, rp_http_req *r, rp_buf *out, bool *finished)
{
    resp_stream *st = ctx;
    if (!st->started) {
        stream_start(r, st, out);
        return RP_OK;
    }
    const rp_drv_event *ev;
    size_t n;
    bool done;
    rp_status s = rp_drv_next(st->drv, RP_STREAM_WAIT_S, &ev, &n, &done);
    if (s)
        return s;
    for (size_t i = 0; i < n; i++)
        stream_event(r, st, &ev[i], out);
    if (done) {
        rp_drv_info info;
        rp_drv_get_info(st->drv, &info);
        stream_finish(r, st, &info, out);
        *finished = true;
    }
    return RP_OK;
}

static void resp_stream_free(void *ctx, rp_http_req *r)
{
    (void)r;
    resp_stream *st = ctx;
    rp_drv_destroy(st->drv);
    echo_deinit(&st->echo);
    rp_buf_deinit(&st->text);
    rp_buf_deinit(&st->reasoning);
    json_decref(st->output);
    rp_free(st);
}

/* ---- the handler ------------------------------------------------------------- */

void rp_responses_create(rp_http_req *r, rp_reply *out)
{
    rp_api_error e;
    rp_api_req q;
    resp_echo x = {0};
    json_t *b = NULL;
    rp_drv *d = NULL;
    rp_drv_result res;
    memset(&res, 0, sizeof(res));
    rp_api_req_init(&q);
    long long created = (long long)time(NULL);
    if (!rp_http_parse_json(r, &b, &e))
        goto fail;
    rp_api_req_deinit(&q);
    if (!resp_read(b, &q, &x, &e) || !rp_server_check_model(r->srv, q.model, &e))
        goto fail;
    if (!rp_drv_start(r, &q, &d, &e))
        goto fail;
    char id[48];
    rp_api_id(id, sizeof(id), "resp_", r->id);
    if (q.stream) {
        resp_stream *st = rp_calloc(1, sizeof(*st));
        if (!st || !(st->output = json_array())) {
            rp_free(st);
            rp_api_oom(&e);
            goto fail;
        }
        st->drv = d;
        st->echo = x;
        x.fields = NULL;
        st->created = created;
        st->parallel = q.parallel_tool_calls;
        rp_buf_init(&st->text);
        rp_buf_init(&st->reasoning);
        memcpy(st->id, id, sizeof(st->id));
        rp_reply_stream(out, resp_pump, resp_stream_free, st);
        d = NULL;
        goto done;
    }
    if (!rp_drv_complete(d, DRV_ERROR_CODE, &res, &e) ||
        !rp_reply_json_new(out, response_body(r, id, created, &q, &x, &res), &e))
        goto fail;
    goto done;
fail:
    rp_reply_error(r, out, &e);
done:
    rp_drv_result_deinit(&res);
    rp_drv_destroy(d);
    echo_deinit(&x);
    rp_api_req_deinit(&q);
    json_decref(b);
}
