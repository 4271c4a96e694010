/*
 * openai.c - the OpenAI API: POST /v1/chat/completions, POST /v1/completions,
 * GET /v1/models, GET /v1/models/{id}.
 *
 * Requests are read into the neutral rp_api_req (chat_read / completion_read:
 * every known field type- and range-checked, errors naming the field, unknown
 * fields ignored) and run by the generation driver (gen.c). Replies follow
 * OpenAI's wire format:
 *
 *   - non-streaming: one chat.completion / text_completion object with usage
 *     (prompt_tokens_details.cached_tokens), logprobs when asked, reasoning as
 *     message.reasoning_content, tool calls as message.tool_calls (content null
 *     when a reply is only calls);
 *   - streaming: SSE chunks, the first delta carrying the role, tool calls as a
 *     fragment with index/id/type/name (arguments "") then one with the
 *     arguments, finish_reason null until the last chunk; with
 *     stream_options.include_usage every chunk has "usage": null and a final
 *     chunk has "choices": [] and the usage; then `data: [DONE]`.
 *
 * Decisions: `n` (and `best_of`) must be 1; `response_format` json_schema is
 * enforced by the grammar (grammar/schema.c; a schema outside its subset is a
 * 400 naming the keyword and its path); `reasoning_effort: none` turns the template's thinking off;
 * `logit_bias` and `suffix` are rejected rather than silently ignored (they
 * would change the output); `top_p: 0` means greedy; `top_k: -1` means off.
 * The reply's `model` is always the served name.
 */
#include "server_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define MAX_COMPLETION_TOKENS ((long long)1 << 30)

/* ---- small helpers ----------------------------------------------------------- */

// A JSON string of arbitrary bytes: as is when valid UTF-8, else each byte
// outside a valid sequence as "\xNN" (OpenAI's "bytes:" convention for
// partial tokens).
static json_t *token_string(const char *s, size_t n)
{
    json_t *v = json_stringn(s, n);
    if (v)
        return v;
    rp_buf b;
    rp_buf_init(&b);
    rp_buf_puts(&b, "bytes:");
    for (size_t i = 0; i < n; i++)
        rp_buf_printf(&b, "\\x%02x", (unsigned char)s[i]);
    v = b.failed ? NULL : json_stringn(b.data, b.len);
    rp_buf_deinit(&b);
    return v;
}

static json_t *finite_real(double x)
{
    if (!isfinite(x) || x < -9999.0)
        x = -9999.0; // OpenAI's floor for impossible tokens
    return json_real(x);
}

static json_t *token_bytes(const char *s, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++)
        json_array_append_new(a, json_integer((unsigned char)s[i]));
    return a;
}

// Chat logprobs: [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}].
static json_t *chat_logprobs_content(const rp_tokenizer *tok, const rp_gen_token *t, int n, int top)
{
    json_t *arr = json_array();
    for (int i = 0; arr && i < n; i++) {
        size_t len;
        const char *p = rp_tok_piece(tok, t[i].id, &len);
        json_t *tops = json_array();
        for (int k = 0; tops && k < t[i].n_top && k < top; k++) {
            size_t tl;
            const char *tp = rp_tok_piece(tok, t[i].top_ids[k], &tl);
            json_array_append_new(tops, json_pack("{s:o,s:o,s:o}", "token", token_string(tp ? tp : "", tl),
                                                  "logprob", finite_real(t[i].top_logprobs[k]), "bytes",
                                                  token_bytes(tp ? tp : "", tl)));
        }
        json_array_append_new(arr, json_pack("{s:o,s:o,s:o,s:o}", "token", token_string(p ? p : "", len), "logprob",
                                             finite_real(t[i].logprob), "bytes", token_bytes(p ? p : "", len),
                                             "top_logprobs", tops ? tops : json_array()));
    }
    return arr;
}

// Legacy completions logprobs: {tokens, token_logprobs, top_logprobs: [{token: lp}], text_offset}.
static json_t *completion_logprobs(const rp_tokenizer *tok, const rp_gen_token *t, int n, int top, size_t *offset)
{
    json_t *toks = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    for (int i = 0; i < n; i++) {
        size_t len;
        const char *p = rp_tok_piece(tok, t[i].id, &len);
        json_array_append_new(toks, token_string(p ? p : "", len));
        json_array_append_new(lps, finite_real(t[i].logprob));
        json_t *o = json_object();
        for (int k = 0; o && k < t[i].n_top && k < top; k++) {
            size_t tl;
            const char *tp = rp_tok_piece(tok, t[i].top_ids[k], &tl);
            json_t *ts = token_string(tp ? tp : "", tl);
            if (ts)
                json_object_set_new(o, json_string_value(ts), finite_real(t[i].top_logprobs[k]));
            json_decref(ts);
        }
        json_array_append_new(tops, o);
        json_array_append_new(offs, json_integer((json_int_t)*offset));
        *offset += len;
    }
    return json_pack("{s:o,s:o,s:o,s:o}", "tokens", toks, "token_logprobs", lps, "top_logprobs", tops,
                     "text_offset", offs);
}

static json_t *usage_json(const rp_req_stats *st)
{
    return json_pack("{s:i,s:i,s:i,s:{s:i}}", "prompt_tokens", st->n_prompt, "completion_tokens", st->n_completion,
                     "total_tokens", st->n_prompt + st->n_completion, "prompt_tokens_details", "cached_tokens",
                     st->n_cached);
}

// Rapid's own figures of a reply beside the usage (as llama-server's "timings"): time to
// first token (seconds, null before one), decode speed (tokens/s after the first, null when
// unknown), draft tokens verified and accepted by speculative decoding.
static json_t *timings_json(const rp_req_stats *st)
{
    return json_pack("{s:o,s:o,s:i,s:i}", "time_to_first_token_s",
                     st->ttft_s >= 0 ? json_real(st->ttft_s) : json_null(), "decode_tokens_per_second",
                     st->decode_tps > 0 ? json_real(st->decode_tps) : json_null(), "draft_tokens", st->n_drafted,
                     "draft_tokens_accepted", st->n_accepted);
}

static const char *finish_name(const rp_drv_info *info)
{
    switch (info->finish) {
    case RP_DRV_LENGTH: return "length";
    case RP_DRV_STOP: return info->n_tool_calls > 0 ? "tool_calls" : "stop";
    default: return "stop";
    }
}

/* ---- reading requests -------------------------------------------------------- */

// Sampling fields shared by both endpoints.
static bool read_sampling(const json_t *b, rp_api_req *q, rp_api_error *e)
{
    rp_sample_params *sp = &q->sample;
    long long k = 0, seed = 0, n = 1;
    float top_p = 1;
    if (!rp_field_float(b, "temperature", 0, 2, &sp->temperature, e) ||
        !rp_field_float(b, "top_p", 0, 1, &top_p, e) ||
        !rp_field_int(b, "top_k", -1, 1 << 30, &k, e) || !rp_field_float(b, "min_p", 0, 1, &sp->min_p, e) ||
        !rp_field_float(b, "presence_penalty", -2, 2, &sp->presence_penalty, e) ||
        !rp_field_float(b, "frequency_penalty", -2, 2, &sp->frequency_penalty, e) ||
        !rp_field_float(b, "repetition_penalty", 1e-6, RP_SAMPLE_REPETITION_MAX, &sp->repetition_penalty, e) ||
        !rp_field_int(b, "seed", INT64_MIN, INT64_MAX, &seed, e) || !rp_field_int(b, "n", 1, 128, &n, e) ||
        !rp_field_bool(b, "ignore_eos", &q->ignore_eos, e) || !rp_field_stop(b, "stop", q, e))
        return false;
    if (n != 1)
        return rp_api_fail(e, 400, "n", "invalid_value", "only n=1 is supported (got %lld)", n);
    const json_t *lb = json_object_get(b, "logit_bias");
    if (lb && !json_is_null(lb) && !(json_is_object(lb) && json_object_size(lb) == 0))
        return rp_api_fail(e, 400, "logit_bias", "unsupported_parameter", "logit_bias is not supported");
    sp->top_k = k < 0 ? 0 : (int)k;
    const json_t *js = json_object_get(b, "seed");
    if (js && !json_is_null(js)) // otherwise the fresh seed of rp_api_req_init stays
        sp->seed = (uint64_t)seed;
    if (top_p == 0) // OpenAI accepts 0: only the most likely token survives
        sp->temperature = 0;
    else
        sp->top_p = top_p;
    if (rp_sample_params_validate(sp))
        return rp_api_fail(e, 400, NULL, "invalid_value", "%s", rp_error_message());
    return true;
}

static bool read_stream(const json_t *b, rp_api_req *q, rp_api_error *e)
{
    if (!rp_field_bool(b, "stream", &q->stream, e))
        return false;
    const json_t *so = json_object_get(b, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so))
            return rp_api_fail(e, 400, "stream_options", "invalid_type",
                               "invalid type for 'stream_options': expected an object");
        if (!rp_field_bool(so, "include_usage", &q->include_usage, e)) {
            snprintf(e->param, sizeof(e->param), "stream_options.include_usage");
            return false;
        }
    }
    return true;
}

// The content parts a chat message may carry (text only; bare strings are taken too).
static const rp_text_part chat_parts[] = {{"text", "text"}, {"input_text", "text"}, {NULL, NULL}};

// An assistant message's tool_calls, with arguments parsed into objects (what chat templates expect).
static bool normalize_tool_calls(const json_t *calls, const char *where, json_t *msg, rp_api_error *e)
{
    if (!json_is_array(calls))
        return rp_api_fail(e, 400, where, "invalid_type", "invalid type for '%s': expected an array", where);
    json_t *out = json_array();
    if (!out)
        return rp_api_oom(e);
    size_t i;
    const json_t *c;
    json_array_foreach(calls, i, c) {
        char p[160];
        snprintf(p, sizeof(p), "%s[%zu]", where, i);
        const json_t *fn = json_object_get(c, "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        if (!json_is_object(c) || !json_is_object(fn) || !name) {
            json_decref(out);
            return rp_api_fail(e, 400, p, "invalid_value", "'%s' needs a function with a name", p);
        }
        const json_t *args = json_object_get(fn, "arguments");
        json_t *a;
        if (json_is_string(args)) {
            a = rp_json_load_args(json_string_value(args), json_string_length(args));
            if (!a)
                a = json_copy((json_t *)args); // not JSON: the template gets the text as it is
        } else if (args && !json_is_null(args)) {
            a = json_deep_copy(args);
        } else {
            a = json_object();
        }
        json_t *nc = json_pack("{s:s,s:{s:s,s:o}}", "type", "function", "function", "name", name, "arguments", a);
        const char *id = json_string_value(json_object_get(c, "id"));
        if (nc && id)
            json_object_set_new(nc, "id", json_string(id));
        if (!nc || json_array_append_new(out, nc)) {
            json_decref(out);
            return rp_api_oom(e);
        }
    }
    json_object_set_new(msg, "tool_calls", out);
    return true;
}

static bool read_messages(const json_t *b, rp_api_req *q, rp_api_error *e)
{
    const json_t *msgs = json_object_get(b, "messages");
    if (!msgs || json_is_null(msgs))
        return rp_api_fail(e, 400, "messages", "missing_required_parameter", "'messages' is required");
    if (!json_is_array(msgs))
        return rp_api_fail(e, 400, "messages", "invalid_type", "invalid type for 'messages': expected an array");
    if (json_array_size(msgs) == 0)
        return rp_api_fail(e, 400, "messages", "invalid_value", "'messages' must not be empty");
    json_t *out = json_array();
    if (!out)
        return rp_api_oom(e);
    q->messages = out;
    size_t i;
    const json_t *m;
    rp_buf text;
    rp_buf_init(&text);
    bool ok = false;
    json_array_foreach(msgs, i, m) {
        char p[96], pc[128];
        snprintf(p, sizeof(p), "messages[%zu]", i);
        if (!json_is_object(m)) {
            rp_api_fail(e, 400, p, "invalid_type", "invalid type for '%s': expected an object", p);
            goto done;
        }
        const char *role = json_string_value(json_object_get(m, "role"));
        snprintf(pc, sizeof(pc), "%s.role", p);
        if (!role) {
            rp_api_fail(e, 400, pc, "missing_required_parameter", "'%s' is required (a string)", pc);
            goto done;
        }
        if (strcmp(role, "developer") == 0)
            role = "system"; // chat templates know system
        else if (strcmp(role, "system") != 0 && strcmp(role, "user") != 0 && strcmp(role, "assistant") != 0 &&
                 strcmp(role, "tool") != 0) {
            rp_api_fail(e, 400, pc, "invalid_value",
                        "'%s' is '%s'; expected system, developer, user, assistant or tool", pc, role);
            goto done;
        }
        json_t *nm = json_pack("{s:s}", "role", role);
        if (!rp_api_append_new(out, nm, e))
            goto done;
        const json_t *c = json_object_get(m, "content");
        snprintf(pc, sizeof(pc), "%s.content", p);
        bool is_asst = strcmp(role, "assistant") == 0;
        if (!c || json_is_null(c)) {
            if (!is_asst) {
                rp_api_fail(e, 400, pc, "missing_required_parameter", "'%s' is required", pc);
                goto done;
            }
            json_object_set_new(nm, "content", json_string(""));
        } else {
            rp_buf_reset(&text);
            if (!rp_field_parts_text(c, pc, chat_parts, true, &text, e))
                goto done;
            if (text.failed) {
                rp_api_oom(e);
                goto done;
            }
            json_object_set_new(nm, "content", json_stringn(text.data ? text.data : "", text.len));
        }
        const char *keys[] = {"name", "tool_call_id", "reasoning_content"};
        for (size_t k = 0; k < 3; k++) {
            const json_t *v = json_object_get(m, keys[k]);
            if (json_is_string(v))
                json_object_set_new(nm, keys[k], json_copy((json_t *)v));
        }
        const json_t *tc = json_object_get(m, "tool_calls");
        if (is_asst && tc && !json_is_null(tc)) {
            snprintf(pc, sizeof(pc), "%s.tool_calls", p);
            if (!normalize_tool_calls(tc, pc, nm, e))
                goto done;
        }
    }
    ok = true;
done:
    rp_buf_deinit(&text);
    return ok;
}

static bool read_tools(const json_t *b, rp_api_req *q, rp_api_error *e)
{
    const json_t *tools = json_object_get(b, "tools");
    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools))
            return rp_api_fail(e, 400, "tools", "invalid_type", "invalid type for 'tools': expected an array");
        size_t i;
        const json_t *t;
        json_array_foreach(tools, i, t) {
            char p[64];
            snprintf(p, sizeof(p), "tools[%zu]", i);
            const json_t *fn = json_object_get(t, "function");
            const char *type = json_string_value(json_object_get(t, "type"));
            if (!json_is_object(t) || (type && strcmp(type, "function") != 0))
                return rp_api_fail(e, 400, p, "invalid_value", "'%s' must be an object of type 'function'", p);
            if (!json_is_object(fn) || !json_is_string(json_object_get(fn, "name")) ||
                json_string_length(json_object_get(fn, "name")) == 0)
                return rp_api_fail(e, 400, p, "invalid_value", "'%s.function.name' is required (a non-empty string)",
                                   p);
            const json_t *params = json_object_get(fn, "parameters");
            if (params && !json_is_null(params) && !json_is_object(params))
                return rp_api_fail(e, 400, p, "invalid_type", "'%s.function.parameters' must be an object", p);
        }
        if (json_array_size(tools) && !(q->tools = json_deep_copy(tools)))
            return rp_api_oom(e);
    }
    const json_t *tc = json_object_get(b, "tool_choice");
    if (tc && !json_is_null(tc)) {
        if (json_is_string(tc)) {
            if (!rp_field_tool_mode(json_string_value(tc), q, e))
                return false;
        } else if (json_is_object(tc)) {
            const char *name = json_string_value(json_object_get(json_object_get(tc, "function"), "name"));
            if (!name)
                return rp_api_fail(e, 400, "tool_choice", "invalid_value",
                                   "'tool_choice' as an object needs function.name");
            q->tool_choice = RP_TOOL_CHOICE_NAMED;
            if (!(q->tool_name = rp_strdup(name)))
                return rp_api_oom(e);
        } else {
            return rp_api_fail(e, 400, "tool_choice", "invalid_type",
                               "invalid type for 'tool_choice': expected a string or an object");
        }
        if ((q->tool_choice == RP_TOOL_CHOICE_REQUIRED || q->tool_choice == RP_TOOL_CHOICE_NAMED) && !q->tools)
            return rp_api_fail(e, 400, "tool_choice", "invalid_value",
                               "'tool_choice' requires a function but 'tools' is empty");
        if (q->tool_choice == RP_TOOL_CHOICE_NAMED && !rp_tools_has(q->tools, q->tool_name))
            return rp_api_fail(e, 400, "tool_choice", "invalid_value",
                               "'tool_choice' names '%s', which is not in 'tools'", q->tool_name);
    }
    return rp_field_bool(b, "parallel_tool_calls", &q->parallel_tool_calls, e);
}

static bool read_response_format(const json_t *b, rp_api_req *q, rp_api_error *e)
{
    return rp_field_json_format(json_object_get(b, "response_format"), "response_format", true, q, e);
}

static bool read_thinking(const json_t *b, rp_api_req *q, rp_api_error *e)
{
    const json_t *kw = json_object_get(b, "chat_template_kwargs");
    if (kw && !json_is_null(kw)) {
        if (!json_is_object(kw))
            return rp_api_fail(e, 400, "chat_template_kwargs", "invalid_type",
                               "invalid type for 'chat_template_kwargs': expected an object");
        if (!(q->template_kwargs = json_deep_copy(kw)))
            return rp_api_oom(e);
    }
    const char *effort = NULL;
    if (!rp_field_string(b, "reasoning_effort", &effort, NULL, e))
        return false;
    if (effort) {
        static const char *known[] = {"none", "minimal", "low", "medium", "high"};
        bool ok = false;
        for (size_t i = 0; i < 5; i++)
            ok |= strcmp(effort, known[i]) == 0;
        if (!ok)
            return rp_api_fail(e, 400, "reasoning_effort", "invalid_value",
                               "'reasoning_effort' is '%s'; expected none, minimal, low, medium or high", effort);
        if (strcmp(effort, "none") == 0) {
            if (!q->template_kwargs && !(q->template_kwargs = json_object()))
                return rp_api_oom(e);
            if (!json_object_get(q->template_kwargs, "enable_thinking"))
                json_object_set_new(q->template_kwargs, "enable_thinking", json_false());
        }
    }
    return true;
}

static bool read_logprobs_chat(const json_t *b, rp_api_req *q, rp_api_error *e)
{
    bool lp = false;
    long long top = -1;
    if (!rp_field_bool(b, "logprobs", &lp, e) || !rp_field_int(b, "top_logprobs", 0, RP_GEN_TOP_MAX, &top, e))
        return false;
    if (top >= 0 && !lp)
        return rp_api_fail(e, 400, "top_logprobs", "invalid_value", "'top_logprobs' needs 'logprobs': true");
    q->logprobs = lp ? (top > 0 ? (int)top : 0) : -1;
    return true;
}

static bool read_max_tokens(const json_t *b, rp_api_req *q, rp_api_error *e)
{
    long long mt = q->max_tokens;
    if (!rp_field_int(b, "max_tokens", 1, MAX_COMPLETION_TOKENS, &mt, e) ||
        !rp_field_int(b, "max_completion_tokens", 1, MAX_COMPLETION_TOKENS, &mt, e))
        return false;
    q->max_tokens = (int)mt;
    return true;
}

// POST /v1/chat/completions body -> q. q is initialized here (deinit it even on failure).
static bool chat_read(const json_t *b, rp_api_req *q, rp_api_error *e)
{
    rp_api_req_init(q);
    return rp_field_model(b, q, e) && read_messages(b, q, e) && read_max_tokens(b, q, e) && read_sampling(b, q, e) &&
           read_stream(b, q, e) && read_logprobs_chat(b, q, e) && read_tools(b, q, e) &&
           read_response_format(b, q, e) && read_thinking(b, q, e);
}

// The completions prompt: a string, [string], [int...] or [[int...]].
static bool read_prompt(const json_t *b, rp_api_req *q, rp_api_error *e)
{
    const json_t *p = json_object_get(b, "prompt");
    if (!p || json_is_null(p))
        return rp_api_fail(e, 400, "prompt", "missing_required_parameter", "'prompt' is required");
    if (json_is_array(p) && json_array_size(p) == 1 &&
        (json_is_string(json_array_get(p, 0)) || json_is_array(json_array_get(p, 0))))
        p = json_array_get(p, 0);
    if (json_is_string(p)) {
        if (!(q->prompt = rp_strndup(json_string_value(p), json_string_length(p))))
            return rp_api_oom(e);
        q->prompt_len = json_string_length(p);
        return true;
    }
    if (!json_is_array(p))
        return rp_api_fail(e, 400, "prompt", "invalid_type",
                           "invalid type for 'prompt': expected a string or an array of token ids");
    size_t n = json_array_size(p);
    if (n == 0)
        return rp_api_fail(e, 400, "prompt", "invalid_value", "'prompt' is empty");
    if (json_is_string(json_array_get(p, 0)) || json_is_array(json_array_get(p, 0)))
        return rp_api_fail(e, 400, "prompt", "invalid_value", "only one prompt per request is supported");
    if (n > (size_t)(1 << 24))
        return rp_api_fail(e, 400, "prompt", "invalid_value", "'prompt' has too many tokens");
    if (!(q->prompt_ids = rp_malloc(n * sizeof(int32_t))))
        return rp_api_oom(e);
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_array_get(p, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
            return rp_api_fail(e, 400, "prompt", "invalid_value", "prompt[%zu] is not a token id", i);
        q->prompt_ids[i] = (int32_t)json_integer_value(v);
    }
    q->n_prompt_ids = (int)n;
    return true;
}

// POST /v1/completions body -> q (and echo). q is initialized here.
static bool completion_read(const json_t *b, rp_api_req *q, bool *echo, rp_api_error *e)
{
    rp_api_req_init(q);
    q->max_tokens = 16; // the legacy endpoint's default
    long long lp = -1, best_of = 1;
    *echo = false;
    if (!rp_field_model(b, q, e) || !read_prompt(b, q, e) || !read_max_tokens(b, q, e) || !read_sampling(b, q, e) ||
        !read_stream(b, q, e) || !rp_field_int(b, "logprobs", 0, 5, &lp, e) ||
        !rp_field_int(b, "best_of", 1, 128, &best_of, e) || !rp_field_bool(b, "echo", echo, e))
        return false;
    if (best_of != 1)
        return rp_api_fail(e, 400, "best_of", "invalid_value", "only best_of=1 is supported");
    const json_t *suffix = json_object_get(b, "suffix");
    if (suffix && !json_is_null(suffix) && !(json_is_string(suffix) && json_string_length(suffix) == 0))
        return rp_api_fail(e, 400, "suffix", "unsupported_parameter", "'suffix' is not supported");
    if (*echo && !q->prompt)
        return rp_api_fail(e, 400, "echo", "unsupported_parameter", "'echo' needs a text prompt");
    q->logprobs = (int)lp;
    return read_response_format(b, q, e);
}

/* ---- replies ----------------------------------------------------------------- */

static json_t *chat_body(rp_http_req *r, const char *id, const rp_api_req *q, const rp_drv_result *res)
{
    rp_server *s = r->srv;
    json_t *msg = json_pack("{s:s}", "role", "assistant");
    if (!msg)
        return NULL;
    if (res->n_calls > 0 && res->content.len == 0)
        json_object_set_new(msg, "content", json_null());
    else
        json_object_set_new(msg, "content", json_stringn(res->content.data ? res->content.data : "",
                                                         res->content.len));
    json_object_set_new(msg, "refusal", json_null());
    if (res->reasoning.len)
        json_object_set_new(msg, "reasoning_content", json_stringn(res->reasoning.data, res->reasoning.len));
    if (res->n_calls > 0) {
        json_t *calls = json_array();
        for (int i = 0; calls && i < res->n_calls; i++)
            json_array_append_new(calls, json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", res->calls[i].id, "type",
                                                   "function", "function", "name", res->calls[i].name, "arguments",
                                                   res->calls[i].arguments));
        json_object_set_new(msg, "tool_calls", calls);
    }
    json_t *lp = json_null();
    if (q->logprobs >= 0) {
        json_decref(lp);
        lp = json_pack("{s:o,s:n}", "content",
                       chat_logprobs_content(s->tok, res->logprobs, res->n_logprobs, q->logprobs), "refusal");
    }
    json_t *choice = json_pack("{s:i,s:o,s:o,s:s}", "index", 0, "message", msg, "logprobs", lp, "finish_reason",
                               finish_name(&res->info));
    return json_pack("{s:s,s:s,s:I,s:s,s:[o],s:o,s:s,s:o}", "id", id, "object", "chat.completion", "created",
                     (json_int_t)time(NULL), "model", s->model_name, "choices", choice, "usage", usage_json(&r->stats),
                     "system_fingerprint", "rapid-" RP_VERSION, "timings", timings_json(&r->stats));
}

static json_t *completion_body(rp_http_req *r, const char *id, const rp_api_req *q, bool echo,
                               const rp_drv_result *res)
{
    rp_server *s = r->srv;
    rp_buf text;
    rp_buf_init(&text);
    if (echo)
        rp_buf_append(&text, q->prompt, q->prompt_len);
    rp_buf_append(&text, res->content.data ? res->content.data : "", res->content.len);
    json_t *lp = json_null();
    if (q->logprobs >= 0) {
        size_t off = echo ? q->prompt_len : 0;
        json_decref(lp);
        lp = completion_logprobs(s->tok, res->logprobs, res->n_logprobs, q->logprobs, &off);
    }
    json_t *body = text.failed ? NULL
                               : json_pack("{s:s,s:s,s:I,s:s,s:[{s:s%,s:i,s:o,s:s}],s:o,s:s}", "id", id, "object",
                                           "text_completion", "created", (json_int_t)time(NULL), "model",
                                           s->model_name, "choices", "text", text.data ? text.data : "", text.len,
                                           "index", 0, "logprobs", lp, "finish_reason", finish_name(&res->info),
                                           "usage", usage_json(&r->stats), "system_fingerprint", "rapid-" RP_VERSION);
    rp_buf_deinit(&text);
    return body;
}

/* ---- streaming --------------------------------------------------------------- */

typedef struct oai_stream {
    rp_drv *drv;
    bool chat;
    bool started;
    bool include_usage;
    int logprobs;   // -1 none
    size_t lp_offset; // completions text_offset
    char id[48];
    long long created;
    char *echo;     // completions: the prompt to echo first (owned), or NULL
    size_t echo_len;
} oai_stream;

// A chunk with one choice; *choice receives the choice object to fill.
static json_t *chunk_new(rp_http_req *r, const oai_stream *st, json_t **choice)
{
    json_t *c = st->chat ? json_pack("{s:i,s:{},s:n,s:n}", "index", 0, "delta", "logprobs", "finish_reason")
                         : json_pack("{s:i,s:s,s:n,s:n}", "index", 0, "text", "", "logprobs", "finish_reason");
    json_t *k = json_pack("{s:s,s:s,s:I,s:s,s:s,s:[o]}", "id", st->id, "object",
                          st->chat ? "chat.completion.chunk" : "text_completion", "created", (json_int_t)st->created,
                          "model", r->srv->model_name, "system_fingerprint", "rapid-" RP_VERSION, "choices", c);
    if (k && st->include_usage)
        json_object_set_new(k, "usage", json_null());
    *choice = c;
    return k;
}

static void attach_logprobs(rp_http_req *r, oai_stream *st, json_t *choice)
{
    if (st->logprobs < 0 || !choice)
        return;
    const rp_gen_token *t;
    int n;
    rp_drv_take_logprobs(st->drv, &t, &n);
    if (n == 0)
        return;
    json_t *lp = st->chat ? json_pack("{s:o,s:n}", "content", chat_logprobs_content(r->srv->tok, t, n, st->logprobs),
                                      "refusal")
                          : completion_logprobs(r->srv->tok, t, n, st->logprobs, &st->lp_offset);
    if (lp)
        json_object_set_new(choice, "logprobs", lp);
}

static void stream_event(rp_http_req *r, oai_stream *st, const rp_drv_event *ev, bool first, rp_buf *out)
{
    json_t *choice, *k = chunk_new(r, st, &choice);
    if (!k) {
        out->failed = true;
        return;
    }
    if (!st->chat) {
        json_object_set_new(choice, "text", json_stringn(ev->text, ev->len));
    } else {
        json_t *delta = json_object_get(choice, "delta");
        if (ev->type == RP_DRV_CONTENT) {
            json_object_set_new(delta, "content", json_stringn(ev->text, ev->len));
        } else if (ev->type == RP_DRV_REASONING) {
            json_object_set_new(delta, "reasoning_content", json_stringn(ev->text, ev->len));
        } else {
            // The call's head (index, id, type, name), then its arguments in a second fragment.
            json_object_set_new(delta, "tool_calls",
                                json_pack("[{s:i,s:s,s:s,s:{s:s,s:s}}]", "index", ev->index, "id", ev->id, "type",
                                          "function", "function", "name", ev->name, "arguments", ""));
            if (first)
                attach_logprobs(r, st, choice);
            rp_sse_json_new(out, NULL, k);
            k = chunk_new(r, st, &choice);
            if (!k) {
                out->failed = true;
                return;
            }
            json_object_set_new(json_object_get(choice, "delta"), "tool_calls",
                                json_pack("[{s:i,s:{s:s%}}]", "index", ev->index, "function", "arguments", ev->text,
                                          ev->len));
            rp_sse_json_new(out, NULL, k);
            return;
        }
    }
    if (first)
        attach_logprobs(r, st, choice);
    rp_sse_json_new(out, NULL, k);
}

static rp_status oai_pump(void *ctx, rp_http_req *r, rp_buf *out, bool *finished)
{
    oai_stream *st = ctx;
    if (!st->started) {
        st->started = true;
        json_t *choice, *k = chunk_new(r, st, &choice);
        if (k && st->chat) {
            json_t *delta = json_object_get(choice, "delta");
            json_object_set_new(delta, "role", json_string("assistant"));
            json_object_set_new(delta, "content", json_string(""));
            json_object_set_new(delta, "refusal", json_null());
        } else if (k && st->echo) {
            json_object_set_new(choice, "text", json_stringn(st->echo, st->echo_len));
        }
        if (st->chat || st->echo)
            rp_sse_json_new(out, NULL, k);
        else
            json_decref(k);
        return RP_OK;
    }
    const rp_drv_event *ev;
    size_t n;
    bool done;
    rp_status s = rp_drv_next(st->drv, RP_STREAM_WAIT_S, &ev, &n, &done);
    if (s)
        return s;
    for (size_t i = 0; i < n; i++)
        stream_event(r, st, &ev[i], i == 0, out);
    if (!done)
        return RP_OK;
    rp_drv_info info;
    rp_drv_get_info(st->drv, &info);
    rp_api_error e;
    if (rp_drv_failed(&info, NULL, &e)) {
        rp_sse_error(out, NULL, &e, rp_openai_error_json);
        *finished = true;
        return RP_OK;
    }
    json_t *choice, *k = chunk_new(r, st, &choice);
    if (k) {
        json_object_set_new(choice, "finish_reason", json_string(finish_name(&info)));
        attach_logprobs(r, st, choice);
    }
    rp_sse_json_new(out, NULL, k);
    if (st->include_usage) {
        k = json_pack("{s:s,s:s,s:I,s:s,s:s,s:[],s:o,s:o}", "id", st->id, "object",
                      st->chat ? "chat.completion.chunk" : "text_completion", "created", (json_int_t)st->created,
                      "model", r->srv->model_name, "system_fingerprint", "rapid-" RP_VERSION, "choices", "usage",
                      usage_json(&r->stats), "timings", timings_json(&r->stats));
        rp_sse_json_new(out, NULL, k);
    }
    rp_sse_text(out, "[DONE]");
    *finished = true;
    return RP_OK;
}

static void oai_stream_free(void *ctx, rp_http_req *r)
{
    (void)r;
    oai_stream *st = ctx;
    rp_drv_destroy(st->drv);
    rp_free(st->echo);
    rp_free(st);
}

/* ---- handlers ---------------------------------------------------------------- */

static void serve(rp_http_req *r, rp_reply *out, bool chat)
{
    rp_api_error e;
    rp_api_req q;
    json_t *b = NULL;
    rp_drv *d = NULL;
    bool echo = false;
    rp_drv_result res;
    memset(&res, 0, sizeof(res));
    rp_api_req_init(&q);
    if (!rp_http_parse_json(r, &b, &e))
        goto fail;
    rp_api_req_deinit(&q);
    if (!(chat ? chat_read(b, &q, &e) : completion_read(b, &q, &echo, &e)))
        goto fail;
    if (!rp_server_check_model(r->srv, q.model, &e) || !rp_drv_start(r, &q, &d, &e))
        goto fail;
    char id[48];
    rp_api_id(id, sizeof(id), chat ? "chatcmpl-" : "cmpl-", r->id);
    if (q.stream) {
        oai_stream *st = rp_calloc(1, sizeof(*st));
        if (!st || (echo && !(st->echo = rp_strndup(q.prompt, q.prompt_len)))) {
            rp_free(st);
            rp_api_oom(&e);
            goto fail;
        }
        st->drv = d;
        st->chat = chat;
        st->include_usage = q.include_usage;
        st->logprobs = q.logprobs;
        st->echo_len = echo ? q.prompt_len : 0;
        st->lp_offset = st->echo_len;
        st->created = (long long)time(NULL);
        memcpy(st->id, id, sizeof(st->id));
        rp_reply_stream(out, oai_pump, oai_stream_free, st);
        d = NULL;
        goto done;
    }
    if (!rp_drv_complete(d, NULL, &res, &e) ||
        !rp_reply_json_new(out, chat ? chat_body(r, id, &q, &res) : completion_body(r, id, &q, echo, &res), &e))
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

void rp_openai_chat(rp_http_req *r, rp_reply *out)
{
    serve(r, out, true);
}

void rp_openai_completions(rp_http_req *r, rp_reply *out)
{
    serve(r, out, false);
}

static json_t *model_json(const rp_server *s)
{
    return json_pack("{s:s,s:s,s:I,s:s,s:i}", "id", s->model_name, "object", "model", "created",
                     (json_int_t)s->created, "owned_by", "rapid", "max_model_len", s->n_ctx);
}

void rp_openai_models(rp_http_req *r, rp_reply *out)
{
    rp_api_error e;
    if (!rp_reply_json_new(out, json_pack("{s:s,s:[o]}", "object", "list", "data", model_json(r->srv)), &e))
        rp_reply_error(r, out, &e);
}

void rp_openai_model(rp_http_req *r, rp_reply *out)
{
    rp_api_error e;
    if (!r->route_param || strcmp(r->route_param, r->srv->model_name) != 0) {
        rp_api_fail(&e, 404, "model", "model_not_found", "the model '%s' does not exist",
                    r->route_param ? r->route_param : "");
        rp_reply_error(r, out, &e);
        return;
    }
    if (!rp_reply_json_new(out, model_json(r->srv), &e))
        rp_reply_error(r, out, &e);
}
