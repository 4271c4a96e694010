/*
 * gen.c - the generation driver: from a neutral request (rp_api_req) to a
 * stream of content, reasoning and tool-call events, API-neutral.
 *
 * rp_drv_start renders the conversation with the model's chat template (or
 * takes the raw prompt), tokenizes it, checks it fits the context and submits
 * it to the engine. rp_drv_next then reads the engine's tokens and runs each
 * through
 *
 *   detokenizer (whole UTF-8 characters) -> stop-string matcher (holds back
 *   text that may start a stop string; a match cancels the engine request and
 *   ends the reply before the string) -> output parser (reasoning, tool calls)
 *
 * and returns the resulting events. A tool call's parser events are buffered
 * until its TOOL_END and then emitted whole: the parser may still ABORT a call
 * (malformed JSON) into plain content, and a stream cannot take back what it
 * has sent.
 *
 * tool_choice: `none` renders without tools and parses no calls; `required`
 * and a named tool force the reply's start by appending the format's opening
 * to the prompt (Hermes/Qwen: `<tool_call>\n{"name": "` or, named,
 * `<tool_call>\n{"name": "NAME",`) and pushing the same text
 * into the parser first. Other formats are not forced: they fall back to
 * `auto` (the tools are still offered and parsed).
 *
 * Completion tokens are the tokens read from the engine up to the stop (the
 * end-of-generation token is not one of them; tokens the engine made after a
 * stop string matched are not counted).
 *
 * Threads: a driver belongs to its request's connection thread.
 */
#include "server_int.h"

#include <stdio.h>
#include <stdlib.h>

#define READ_CAP 64 // tokens per rp_gen_read

/* ---- stop strings ------------------------------------------------------------ */

void rp_stop_init(rp_stop_matcher *m, char *const *stops, int n_stops)
{
    memset(m, 0, sizeof(*m));
    m->stops = stops;
    m->n_stops = n_stops;
    m->matched = -1;
    for (int i = 0; i < n_stops; i++) {
        size_t n = strlen(stops[i]);
        if (n > m->max_len)
            m->max_len = n;
    }
    rp_buf_init(&m->held);
    rp_buf_init(&m->out);
}

void rp_stop_deinit(rp_stop_matcher *m)
{
    rp_buf_deinit(&m->held);
    rp_buf_deinit(&m->out);
}

// Length of the longest suffix of h (shorter than a stop string) that is a prefix of one.
static size_t stop_partial(const rp_stop_matcher *m, const char *h, size_t n)
{
    size_t best = 0;
    for (int i = 0; i < m->n_stops; i++) {
        size_t sl = strlen(m->stops[i]);
        size_t k = sl - 1 < n ? sl - 1 : n;
        for (; k > best; k--)
            if (memcmp(h + n - k, m->stops[i], k) == 0) {
                best = k;
                break;
            }
    }
    return best;
}

bool rp_stop_push(rp_stop_matcher *m, const char *text, size_t len, const char **out, size_t *out_len)
{
    rp_buf_reset(&m->out);
    *out = "";
    *out_len = 0;
    if (m->matched >= 0)
        return true;
    if (m->n_stops == 0) {
        *out = text;
        *out_len = len;
        return false;
    }
    rp_buf_append(&m->held, text, len);
    const char *h = m->held.data ? m->held.data : "";
    size_t n = m->held.len;
    // The match that completes first wins (as when the text arrives byte by
    // byte); at one end position, the longest.
    for (size_t end = 1; end <= n; end++) {
        int best = -1;
        size_t best_start = 0;
        for (int i = 0; i < m->n_stops; i++) {
            size_t sl = strlen(m->stops[i]);
            if (sl <= end && memcmp(h + end - sl, m->stops[i], sl) == 0 && (best < 0 || end - sl < best_start)) {
                best = i;
                best_start = end - sl;
            }
        }
        if (best >= 0) {
            m->matched = best;
            rp_buf_append(&m->out, h, best_start);
            rp_buf_reset(&m->held);
            *out = m->out.data ? m->out.data : "";
            *out_len = m->out.len;
            return true;
        }
    }
    size_t keep = stop_partial(m, h, n);
    rp_buf_append(&m->out, h, n - keep);
    memmove(m->held.data, h + n - keep, keep);
    m->held.len = keep;
    m->held.data[keep] = 0;
    *out = m->out.data ? m->out.data : "";
    *out_len = m->out.len;
    return false;
}

void rp_stop_flush(rp_stop_matcher *m, const char **out, size_t *out_len)
{
    rp_buf_reset(&m->out);
    if (m->matched < 0)
        rp_buf_append(&m->out, m->held.data ? m->held.data : "", m->held.len);
    rp_buf_reset(&m->held);
    *out = m->out.data ? m->out.data : "";
    *out_len = m->out.len;
}

/* ---- prompts ----------------------------------------------------------------- */

void rp_prompt_deinit(rp_prompt *p)
{
    rp_free(p->text);
    rp_free(p->ids);
    memset(p, 0, sizeof(*p));
}

static bool has_tools(const rp_api_req *q)
{
    return q->tools && json_array_size(q->tools) > 0 && q->tool_choice != RP_TOOL_CHOICE_NONE;
}

static bool tool_exists(const json_t *tools, const char *name)
{
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t) {
        const json_t *f = json_object_get(t, "function");
        const char *n = json_string_value(json_object_get(f ? f : t, "name"));
        if (n && strcmp(n, name) == 0)
            return true;
    }
    return false;
}

// The text that forces a tool call at the reply's start (rp_malloc'd), or NULL
// when tool_choice does not force or the format has no forcing.
static bool forced_opening(rp_server *s, const rp_api_req *q, bool think_open, char **out, rp_api_error *e)
{
    *out = NULL;
    if (q->tool_choice != RP_TOOL_CHOICE_REQUIRED && q->tool_choice != RP_TOOL_CHOICE_NAMED)
        return true;
    if (!q->tools || json_array_size(q->tools) == 0)
        return rp_api_fail(e, 400, "tool_choice", NULL, "tool_choice '%s' needs a non-empty 'tools' list",
                           q->tool_choice == RP_TOOL_CHOICE_NAMED ? "function" : "required");
    if (q->tool_choice == RP_TOOL_CHOICE_NAMED && (!q->tool_name || !tool_exists(q->tools, q->tool_name)))
        return rp_api_fail(e, 400, "tool_choice", NULL, "tool_choice names the tool '%s', which is not in 'tools'",
                           q->tool_name ? q->tool_name : "");
    if (s->tool_format != RP_TOOL_FORMAT_HERMES || q->json_mode)
        return true; // not forced: the model decides (documented fallback)
    rp_buf b;
    rp_buf_init(&b);
    if (think_open)
        rp_buf_puts(&b, "\n</think>\n\n");
    if (q->tool_choice == RP_TOOL_CHOICE_REQUIRED) {
        rp_buf_puts(&b, "<tool_call>\n{\"name\": \"");
    } else {
        json_t *ns = json_string(q->tool_name);
        char *quoted = ns ? json_dumps(ns, JSON_ENCODE_ANY) : NULL;
        json_decref(ns);
        if (!quoted) {
            rp_buf_deinit(&b);
            return rp_api_oom(e);
        }
        // Ends after the comma: `",` is one token in Qwen-style vocabularies, so the
        // forced text tokenizes as the model's own reply would (cutting inside a
        // merged token derails small models).
        rp_buf_printf(&b, "<tool_call>\n{\"name\": %s,", quoted);
        free(quoted);
    }
    if (b.failed) {
        rp_buf_deinit(&b);
        return rp_api_oom(e);
    }
    *out = b.data;
    return true;
}

// q->continue_final: cuts the rendering (made without the generation prompt)
// right after the final message's text, found as its last occurrence (leading
// whitespace aside: templates may strip it). A template that does not show the
// text is a 400.
static bool cut_after_final(const rp_api_req *q, rp_prompt *out, rp_api_error *e)
{
    const json_t *last = json_array_get(q->messages, json_array_size(q->messages) - 1);
    const char *c = json_string_value(json_object_get(last, "content"));
    size_t n = c ? json_string_length(json_object_get(last, "content")) : 0;
    while (n && (*c == '\n' || *c == ' ' || *c == '\t' || *c == '\r')) {
        c++;
        n--;
    }
    if (n && n <= out->text_len)
        for (size_t i = out->text_len - n + 1; i-- > 0;)
            if (memcmp(out->text + i, c, n) == 0) {
                out->text_len = i + n;
                out->text[out->text_len] = 0;
                return true;
            }
    return rp_api_fail(e, 400, "messages", NULL,
                       "the final assistant message cannot be continued: the chat template does not show its text");
}

bool rp_prompt_build(rp_server *s, const rp_api_req *q, rp_prompt *out, rp_api_error *e)
{
    memset(out, 0, sizeof(*out));
    char *forced = NULL;
    if (q->messages) {
        if (!s->tpl)
            return rp_api_fail(e, 400, "messages", NULL,
                               "the model has no chat template; send a raw prompt to /v1/completions instead");
        rp_chat_render_params rp = {q->messages, has_tools(q) ? q->tools : NULL, !q->continue_final,
                                    q->template_kwargs, rp_tok_bos_text(s->tok), rp_tok_eos_text(s->tok)};
        rp_status st = rp_chat_template_render(s->tpl, &rp, &out->text, &out->text_len);
        if (st == RP_ERR_NOMEM)
            return rp_api_fail(e, 500, NULL, NULL, "out of memory rendering the chat template");
        if (st)
            return rp_api_fail(e, 400, "messages", NULL, "the chat template cannot render these messages: %s",
                               rp_error_message());
        if (q->continue_final && !cut_after_final(q, out, e))
            goto fail;
        bool think_open = rp_parse_prompt_opens_think(out->text, out->text_len);
        if (!forced_opening(s, q, think_open, &forced, e))
            goto fail;
        if (forced) {
            size_t fl = strlen(forced), n;
            char *t = rp_add_size(out->text_len, fl + 1, &n) ? rp_realloc(out->text, n) : NULL;
            if (!t) {
                rp_api_oom(e);
                goto fail;
            }
            memcpy(t + out->text_len, forced, fl + 1);
            out->text = t;
            out->forced = t + out->text_len;
            out->forced_len = fl;
            out->text_len += fl;
        }
        size_t n = 0;
        if (rp_tok_encode(s->tok, out->text, out->text_len, false, &out->ids, &n)) {
            rp_api_fail(e, 500, NULL, NULL, "tokenizing the prompt failed: %s", rp_error_message());
            goto fail;
        }
        out->n = (int)n;
    } else if (q->prompt_ids) {
        int32_t nv = rp_tok_n_vocab(s->tok);
        for (int i = 0; i < q->n_prompt_ids; i++)
            if (q->prompt_ids[i] < 0 || q->prompt_ids[i] >= nv) {
                rp_api_fail(e, 400, "prompt", NULL, "token id %d at prompt[%d] is outside the vocabulary (0..%d)",
                            q->prompt_ids[i], i, nv - 1);
                goto fail;
            }
        out->ids = rp_malloc((size_t)(q->n_prompt_ids ? q->n_prompt_ids : 1) * sizeof(int32_t));
        if (!out->ids) {
            rp_api_oom(e);
            goto fail;
        }
        memcpy(out->ids, q->prompt_ids, (size_t)q->n_prompt_ids * sizeof(int32_t));
        out->n = q->n_prompt_ids;
    } else {
        size_t n = 0;
        const char *p = q->prompt ? q->prompt : "";
        if (rp_tok_encode(s->tok, p, q->prompt ? q->prompt_len : 0, true, &out->ids, &n)) {
            rp_api_fail(e, 500, NULL, NULL, "tokenizing the prompt failed: %s", rp_error_message());
            goto fail;
        }
        out->n = (int)n;
    }
    rp_free(forced);
    if (out->n == 0) {
        rp_prompt_deinit(out);
        return rp_api_fail(e, 400, q->messages ? "messages" : "prompt", NULL, "the prompt is empty (no tokens)");
    }
    return true;
fail:
    rp_free(forced);
    rp_prompt_deinit(out);
    return false;
}

/* ---- the driver -------------------------------------------------------------- */

// An event whose strings live in the driver's arena as offsets until the round ends.
typedef struct ev_slot {
    rp_drv_event_type type;
    size_t off, len;     // text
    size_t id_off, name_off;
    int index;
} ev_slot;

struct rp_drv {
    rp_http_req *r;
    rp_server *s;
    rp_gen *gen;
    rp_parser *parser; // NULL: the text is all content
    rp_detok dt;
    rp_stop_matcher stop;
    bool dt_live;
    rp_gen_token toks[READ_CAP];
    // this round's events
    ev_slot *slots;
    size_t n_slots, cap_slots;
    rp_drv_event *ev;
    size_t cap_ev;
    rp_buf arena;
    // the tool call being parsed
    bool in_call;
    int call_index;
    rp_buf call_id, call_name, call_args;
    // logprobs
    bool want_lp;
    rp_gen_token *lp;
    int n_lp, cap_lp, lp_taken;
    rp_gen_token *lp_out; // what take returned (the round's copy)
    int n_lp_out;
    // state
    int n_consumed, n_tool_calls;
    bool gen_done, done, cancelled;
    rp_drv_finish finish;
    int stop_index;
    char *error;
    char *stops[RP_MAX_STOP]; // copies of the request's stop strings
    int n_stops;
};

static void add_event(rp_drv *d, rp_drv_event_type type, const char *text, size_t len, int index, const char *id,
                      const char *name)
{
    if (len == 0 && type != RP_DRV_TOOL_CALL)
        return;
    // Adjacent deltas of one kind merge (their text is contiguous in the arena).
    if (type != RP_DRV_TOOL_CALL && d->n_slots > 0) {
        ev_slot *last = &d->slots[d->n_slots - 1];
        if (last->type == type && last->off + last->len == d->arena.len) {
            rp_buf_append(&d->arena, text, len);
            last->len += len;
            return;
        }
    }
    if (d->n_slots == d->cap_slots) {
        size_t cap = d->cap_slots ? d->cap_slots * 2 : 16;
        ev_slot *ns = rp_realloc(d->slots, cap * sizeof(*ns));
        if (!ns) {
            d->arena.failed = true;
            return;
        }
        d->slots = ns;
        d->cap_slots = cap;
    }
    ev_slot *sl = &d->slots[d->n_slots++];
    memset(sl, 0, sizeof(*sl));
    sl->type = type;
    sl->index = index;
    sl->off = d->arena.len;
    sl->len = len;
    rp_buf_append(&d->arena, text, len);
    rp_buf_append(&d->arena, "", 1); // NUL-terminate (tool arguments are read as strings)
    if (type == RP_DRV_TOOL_CALL) {
        sl->id_off = d->arena.len;
        rp_buf_append(&d->arena, id, strlen(id) + 1);
        sl->name_off = d->arena.len;
        rp_buf_append(&d->arena, name, strlen(name) + 1);
    }
}

static void on_parse_events(rp_drv *d, const rp_parse_event *ev, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const rp_parse_event *e = &ev[i];
        switch (e->type) {
        case RP_PARSE_EVENT_CONTENT: add_event(d, RP_DRV_CONTENT, e->text, e->len, 0, NULL, NULL); break;
        case RP_PARSE_EVENT_REASONING: add_event(d, RP_DRV_REASONING, e->text, e->len, 0, NULL, NULL); break;
        case RP_PARSE_EVENT_TOOL_START:
            d->in_call = true;
            d->call_index = e->index;
            rp_buf_reset(&d->call_id);
            rp_buf_reset(&d->call_name);
            rp_buf_reset(&d->call_args);
            rp_buf_puts(&d->call_id, e->id ? e->id : "");
            rp_buf_puts(&d->call_name, e->name ? e->name : "");
            break;
        case RP_PARSE_EVENT_TOOL_ARGS: rp_buf_append(&d->call_args, e->text, e->len); break;
        case RP_PARSE_EVENT_TOOL_END:
            if (d->in_call) {
                add_event(d, RP_DRV_TOOL_CALL, d->call_args.data ? d->call_args.data : "", d->call_args.len,
                          d->n_tool_calls, d->call_id.data ? d->call_id.data : "",
                          d->call_name.data ? d->call_name.data : "");
                d->n_tool_calls++;
            }
            d->in_call = false;
            break;
        case RP_PARSE_EVENT_TOOL_ABORT: d->in_call = false; break;
        }
    }
}

// Text that passed the stop matcher goes to the parser (or straight out).
static rp_status feed(rp_drv *d, const char *text, size_t len)
{
    if (!d->parser) {
        add_event(d, RP_DRV_CONTENT, text, len, 0, NULL, NULL);
        return RP_OK;
    }
    if (len == 0)
        return RP_OK;
    const rp_parse_event *ev;
    size_t n;
    rp_status st = rp_parser_push(d->parser, text, len, &ev, &n);
    if (st)
        return st;
    on_parse_events(d, ev, n);
    return RP_OK;
}

static rp_status finish_parse(rp_drv *d)
{
    if (!d->parser)
        return RP_OK;
    const rp_parse_event *ev;
    size_t n;
    rp_status st = rp_parser_finish(d->parser, &ev, &n);
    if (st)
        return st;
    on_parse_events(d, ev, n);
    return RP_OK;
}

static void update_stats(rp_drv *d)
{
    rp_gen_stats gs;
    rp_gen_get_stats(d->gen, &gs);
    rp_req_stats *st = &d->r->stats;
    st->n_prompt = gs.n_prompt;
    st->n_cached = gs.n_cached;
    st->n_completion = d->n_consumed;
    if (gs.t_first > 0)
        st->ttft_s = gs.t_first - gs.t_submit;
    if (gs.n_generated > 1 && gs.t_last > gs.t_first)
        st->decode_tps = (gs.n_generated - 1) / (gs.t_last - gs.t_first);
    st->engine = true;
    st->queue_s = gs.t_admit > 0 ? gs.t_admit - gs.t_submit : -1;
    st->e2e_s = gs.t_first > 0 ? gs.t_last - gs.t_submit : -1;
    st->n_gaps = gs.n_generated > 1 && gs.t_first > 0 ? gs.n_generated - 1 : 0;
    st->gaps_s = st->n_gaps ? gs.t_last - gs.t_first : 0;
    st->n_drafted = st->n_accepted = 0;
    for (int m = 0; m < RP_SPEC_N_METHODS; m++) {
        st->n_drafted += gs.spec_drafted[m];
        st->n_accepted += gs.spec_accepted[m];
    }
}

bool rp_drv_admitted(rp_drv *d)
{
    rp_gen_stats gs;
    rp_gen_get_stats(d->gen, &gs);
    if (gs.t_admit > 0) {
        update_stats(d);
        return true;
    }
    int n;
    return d->gen_done || rp_gen_read(d->gen, 0, NULL, 0, &n) != RP_GEN_RUNNING;
}

// A forced tool call (tool_choice required or named, Hermes format: the prompt ends
// with the call's opening up to its name) is held by the grammar to
// {"name": one of the tools, "arguments": ...}: with one candidate tool its
// parameters' schema, else (or when that schema is outside what the grammar
// enforces) any object; then "\n</tool_call>", which the output parser needs
// to take the call. The grammar reads the forced text from its '{' on.
static bool tool_call_grammar(const rp_api_req *q, const rp_prompt *pr, rp_json_schema **out, size_t *prefix_at,
                              rp_api_error *e)
{
    *out = NULL;
    const char *brace = memchr(pr->forced, '{', pr->forced_len);
    if (!brace)
        return true;
    json_t *names = json_array();
    const json_t *params = NULL;
    size_t n = 0, i;
    const json_t *t;
    json_array_foreach(q->tools, i, t) {
        const json_t *fn = json_object_get(t, "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        if (!name || (q->tool_choice == RP_TOOL_CHOICE_NAMED && strcmp(name, q->tool_name) != 0))
            continue;
        json_array_append_new(names, json_string(name));
        params = json_object_get(fn, "parameters");
        n++;
    }
    rp_status st = RP_ERR_UNSUPPORTED;
    for (int pass = n == 1 && json_is_object(params) ? 0 : 1; pass < 2 && st; pass++) {
        json_t *args = pass == 0 ? json_deep_copy(params) : json_pack("{s:s}", "type", "object");
        json_t *schema = json_pack("{s:s,s:{s:{s:O},s:o},s:[s,s],s:b}", "type", "object", "properties", "name", "enum",
                                   names, "arguments", args, "required", "name", "arguments",
                                   "additionalProperties", 0);
        // Compiled for this request (not cached: the suffix makes it the call's own).
        rp_json_schema_error err;
        st = schema ? rp_json_schema_compile(schema, NULL, out, &err) : RP_ERR_NOMEM;
        json_decref(schema);
        if (!st && (st = rp_json_schema_set_suffix(*out, "\n</tool_call>", 13))) {
            rp_json_schema_unref(*out);
            *out = NULL;
        }
        if (st == RP_ERR_NOMEM)
            break;
    }
    json_decref(names);
    if (st) {
        rp_error_clear();
        return st == RP_ERR_NOMEM ? rp_api_oom(e) : true; // (any object cannot fail otherwise)
    }
    *prefix_at = (size_t)(brace - pr->forced);
    return true;
}

// Compiles (or finds in the cache) the request's schema, in the request's thread so
// the engine thread never waits on a schema; what the grammar cannot enforce is a 400
// naming the keyword and where it is.
static bool compile_schema(rp_server *s, const rp_api_req *q, rp_json_schema **out, rp_api_error *e)
{
    rp_json_schema_error err;
    rp_status st = rp_json_schema_cache_get(s->schemas, q->schema, out, &err);
    if (!st)
        return true;
    if (st == RP_ERR_NOMEM)
        return rp_api_oom(e);
    char param[sizeof(q->schema_param) + sizeof(err.path) + 16];
    snprintf(param, sizeof(param), "%.47s%.200s", q->schema_param, err.path + 1); // "#/a/b" -> param + "/a/b"
    const char *code = st == RP_ERR_UNSUPPORTED ? "unsupported_schema" : st == RP_ERR_LIMIT ? "schema_too_complex"
                                                                                          : "invalid_schema";
    if (err.keyword[0])
        return rp_api_fail(e, 400, param, code, "%s: '%s' at %s: %s", q->schema_param, err.keyword, err.path,
                           rp_error_message());
    return rp_api_fail(e, 400, param, code, "%s at %s: %s", q->schema_param, err.path, rp_error_message());
}

bool rp_drv_start(rp_http_req *r, const rp_api_req *q, rp_drv **out, rp_api_error *e)
{
    *out = NULL;
    rp_server *s = r->srv;
    rp_json_schema *schema = NULL;
    if (q->json_mode && q->schema && !compile_schema(s, q, &schema, e))
        return false;
    rp_prompt pr;
    if (!rp_prompt_build(s, q, &pr, e)) {
        rp_json_schema_unref(schema);
        return false;
    }
    size_t prefix_at = 0;
    if (!q->json_mode && pr.forced_len && !tool_call_grammar(q, &pr, &schema, &prefix_at, e)) {
        rp_prompt_deinit(&pr);
        return false;
    }
    if (pr.n >= s->n_ctx) {
        r->stats.n_prompt = pr.n;
        rp_prompt_deinit(&pr);
        rp_json_schema_unref(schema);
        return rp_api_fail(e, 400, q->messages ? "messages" : "prompt", "context_length_exceeded",
                           "This model's maximum context length is %d tokens. However, your %s resulted in %d "
                           "tokens. Please reduce the length of the %s.",
                           s->n_ctx, q->messages ? "messages" : "prompt", r->stats.n_prompt,
                           q->messages ? "messages" : "prompt");
    }
    rp_drv *d = rp_calloc(1, sizeof(*d));
    if (!d) {
        rp_prompt_deinit(&pr);
        rp_json_schema_unref(schema);
        return rp_api_oom(e);
    }
    d->r = r;
    d->s = s;
    d->stop_index = -1;
    rp_buf_init(&d->arena);
    rp_buf_init(&d->call_id);
    rp_buf_init(&d->call_name);
    rp_buf_init(&d->call_args);
    for (int i = 0; i < q->n_stop; i++) {
        if (!(d->stops[i] = rp_strdup(q->stop[i]))) {
            rp_api_oom(e);
            goto fail;
        }
        d->n_stops++;
    }
    rp_stop_init(&d->stop, d->stops, d->n_stops);
    rp_detok_init(&d->dt, s->tok);
    d->dt_live = true;
    d->want_lp = q->logprobs >= 0;

    if (q->messages) {
        rp_parser_config pc = {0};
        pc.tools = has_tools(q) ? s->tool_format : RP_TOOL_FORMAT_NONE;
        pc.reasoning = s->reasoning_format;
        size_t plen = pr.text_len - pr.forced_len;
        pc.think_open = rp_parse_prompt_opens_think(pr.text, plen);
        char *tj = pc.tools != RP_TOOL_FORMAT_NONE ? json_dumps(q->tools, JSON_COMPACT) : NULL;
        pc.tools_json = tj;
        pc.tools_json_len = tj ? strlen(tj) : 0;
        pc.seed = q->sample.seed ^ (r->id * 0x9E3779B97F4A7C15ull);
        rp_status st = rp_parser_create(&pc, &d->parser);
        free(tj);
        if (st) {
            rp_api_fail(e, 500, NULL, NULL, "output parser: %s", rp_error_message());
            goto fail;
        }
        if (pr.forced_len && feed(d, pr.forced, pr.forced_len)) {
            rp_api_fail(e, 500, NULL, NULL, "output parser: %s", rp_error_message());
            goto fail;
        }
    }

    rp_gen_params gp;
    rp_gen_params_default(&gp);
    gp.prompt = pr.ids;
    gp.n_prompt = pr.n;
    gp.max_tokens = q->max_tokens > 0 ? q->max_tokens : 0;
    gp.sample = q->sample;
    gp.ignore_eos = q->ignore_eos;
    gp.n_logprobs = q->logprobs;
    gp.json = q->json_mode || schema;
    gp.schema = schema;
    if (!q->json_mode && schema) { // a forced tool call: the grammar reads the forced opening first
        gp.json_prefix = pr.forced + prefix_at;
        gp.json_prefix_len = pr.forced_len - prefix_at;
    }
    rp_status st = rp_engine_submit(s->engine, &gp, &d->gen);
    rp_json_schema_unref(schema); // the request holds its own reference
    schema = NULL;
    if (st == RP_ERR_LIMIT) {
        rp_api_fail(e, 503, NULL, "server_busy", "the server is busy (the request queue is full); retry shortly");
        e->retry_after = 1;
        goto fail;
    }
    if (st == RP_ERR_RANGE) {
        rp_api_fail(e, 400, q->messages ? "messages" : "prompt", "context_length_exceeded", "%s",
                    rp_error_message());
        goto fail;
    }
    if (st == RP_ERR_UNSUPPORTED) {
        rp_api_fail(e, 400, q->json_mode ? "response_format" : NULL, "unsupported_parameter", "%s",
                    rp_error_message());
        goto fail;
    }
    if (st == RP_ERR_INVALID) {
        rp_api_fail(e, 400, NULL, NULL, "%s", rp_error_message());
        goto fail;
    }
    if (st) {
        rp_api_fail(e, 500, NULL, NULL, "the engine refused the request: %s", rp_error_message());
        goto fail;
    }
    r->stats.n_prompt = pr.n;
    rp_prompt_deinit(&pr);
    *out = d;
    return true;
fail:
    rp_json_schema_unref(schema);
    rp_prompt_deinit(&pr);
    rp_drv_destroy(d);
    return false;
}

static void keep_logprob(rp_drv *d, const rp_gen_token *t)
{
    if (d->n_lp == d->cap_lp) {
        int cap = d->cap_lp ? d->cap_lp * 2 : 64;
        rp_gen_token *n = rp_realloc(d->lp, (size_t)cap * sizeof(*n));
        if (!n) {
            d->arena.failed = true;
            return;
        }
        d->lp = n;
        d->cap_lp = cap;
    }
    d->lp[d->n_lp++] = *t;
}

static rp_drv_finish map_finish(rp_gen_finish f)
{
    switch (f) {
    case RP_GEN_STOP: return RP_DRV_STOP;
    case RP_GEN_LENGTH: return RP_DRV_LENGTH;
    case RP_GEN_CANCELLED: return RP_DRV_CANCELLED;
    default: return RP_DRV_ERROR;
    }
}

// The generation has ended (engine finish or stop string): release what is held.
static rp_status end_generation(rp_drv *d, rp_drv_finish why)
{
    rp_status st = RP_OK;
    if (why != RP_DRV_STOP_STRING) {
        const char *text, *o;
        size_t len, ol;
        if ((st = rp_detok_flush(&d->dt, &text, &len)))
            return st;
        bool hit = rp_stop_push(&d->stop, text, len, &o, &ol);
        if ((st = feed(d, o, ol)))
            return st;
        if (hit) {
            why = RP_DRV_STOP_STRING;
            d->stop_index = d->stop.matched;
        } else {
            rp_stop_flush(&d->stop, &text, &len);
            if ((st = feed(d, text, len)))
                return st;
        }
    }
    if (why == RP_DRV_STOP_STRING)
        rp_gen_cancel(d->gen); // the engine stops at its next step; later tokens are not read
    if ((st = finish_parse(d)))
        return st;
    d->finish = why;
    d->gen_done = true;
    return RP_OK;
}

rp_status rp_drv_next(rp_drv *d, double timeout_s, const rp_drv_event **ev, size_t *n, bool *done)
{
    *ev = NULL;
    *n = 0;
    d->n_slots = 0;
    rp_buf_reset(&d->arena);
    d->arena.failed = false;
    // Logprobs handed out by the previous take are gone now.
    if (d->lp_taken > 0) {
        memmove(d->lp, d->lp + d->lp_taken, (size_t)(d->n_lp - d->lp_taken) * sizeof(*d->lp));
        d->n_lp -= d->lp_taken;
        d->lp_taken = 0;
    }
    rp_status st = RP_OK;
    if (!d->gen_done) {
        int got = 0;
        rp_gen_finish f = rp_gen_read(d->gen, timeout_s, d->toks, READ_CAP, &got);
        for (int i = 0; i < got && !d->gen_done; i++) {
            d->n_consumed++;
            if (d->want_lp)
                keep_logprob(d, &d->toks[i]);
            const char *text;
            size_t len;
            if ((st = rp_detok_push(&d->dt, d->toks[i].id, &text, &len)))
                goto out;
            const char *o;
            size_t ol;
            bool hit = rp_stop_push(&d->stop, text, len, &o, &ol);
            if ((st = feed(d, o, ol)))
                goto out;
            if (hit) {
                d->stop_index = d->stop.matched;
                if ((st = end_generation(d, RP_DRV_STOP_STRING)))
                    goto out;
            }
        }
        if (!d->gen_done && f != RP_GEN_RUNNING) {
            if (f == RP_GEN_ERROR) {
                const char *msg = rp_gen_error(d->gen);
                d->error = rp_strdup(msg && *msg ? msg : "the engine failed");
            }
            rp_drv_finish why = d->cancelled ? RP_DRV_CANCELLED : map_finish(f);
            if ((st = end_generation(d, why)))
                goto out;
        }
        update_stats(d);
        d->r->stats.n_completion = d->n_consumed;
    }
out:
    if (st)
        return st;
    if (d->arena.failed)
        return RP_ERR(RP_ERR_NOMEM, "out of memory");
    if (d->n_slots > d->cap_ev) {
        rp_drv_event *ne = rp_realloc(d->ev, d->n_slots * sizeof(*ne));
        if (!ne)
            return RP_ERR(RP_ERR_NOMEM, "out of memory");
        d->ev = ne;
        d->cap_ev = d->n_slots;
    }
    for (size_t i = 0; i < d->n_slots; i++) {
        const ev_slot *sl = &d->slots[i];
        rp_drv_event *e = &d->ev[i];
        e->type = sl->type;
        e->text = d->arena.data + sl->off;
        e->len = sl->len;
        e->index = sl->index;
        e->id = sl->type == RP_DRV_TOOL_CALL ? d->arena.data + sl->id_off : NULL;
        e->name = sl->type == RP_DRV_TOOL_CALL ? d->arena.data + sl->name_off : NULL;
    }
    *ev = d->ev;
    *n = d->n_slots;
    d->done = d->gen_done;
    *done = d->done;
    return RP_OK;
}

void rp_drv_take_logprobs(rp_drv *d, const rp_gen_token **toks, int *n)
{
    *toks = d->lp ? d->lp + d->lp_taken : NULL; // no logprobs kept: lp is NULL (no arithmetic on it)
    *n = d->n_lp - d->lp_taken;
    d->lp_taken = d->n_lp;
}

void rp_drv_get_info(const rp_drv *d, rp_drv_info *out)
{
    memset(out, 0, sizeof(*out));
    out->finish = d->gen_done ? d->finish : RP_DRV_RUNNING;
    out->stop_string = d->stop_index >= 0 ? d->stops[d->stop_index] : NULL;
    out->n_prompt = d->r->stats.n_prompt;
    out->n_cached = d->r->stats.n_cached;
    out->n_completion = d->n_consumed;
    out->n_tool_calls = d->n_tool_calls;
    out->error = d->error ? d->error : "";
}

void rp_drv_cancel(rp_drv *d)
{
    if (d && !d->cancelled) {
        d->cancelled = true;
        if (d->gen)
            rp_gen_cancel(d->gen);
    }
}

void rp_drv_destroy(rp_drv *d)
{
    if (!d)
        return;
    if (d->gen) {
        update_stats(d);
        d->r->stats.n_completion = d->n_consumed;
        rp_gen_release(d->gen);
    }
    rp_parser_destroy(d->parser);
    if (d->dt_live)
        rp_detok_deinit(&d->dt);
    rp_stop_deinit(&d->stop);
    for (int i = 0; i < d->n_stops; i++)
        rp_free(d->stops[i]);
    rp_free(d->slots);
    rp_free(d->ev);
    rp_buf_deinit(&d->arena);
    rp_buf_deinit(&d->call_id);
    rp_buf_deinit(&d->call_name);
    rp_buf_deinit(&d->call_args);
    rp_free(d->lp);
    rp_free(d->error);
    rp_free(d);
}

/* ---- whole replies ----------------------------------------------------------- */

void rp_drv_result_deinit(rp_drv_result *res)
{
    rp_buf_deinit(&res->content);
    rp_buf_deinit(&res->reasoning);
    for (int i = 0; i < res->n_calls; i++) {
        rp_free(res->calls[i].id);
        rp_free(res->calls[i].name);
        rp_free(res->calls[i].arguments);
    }
    rp_free(res->calls);
    rp_free(res->logprobs);
    memset(res, 0, sizeof(*res));
}

rp_status rp_drv_collect(rp_drv *d, rp_drv_result *res)
{
    memset(res, 0, sizeof(*res));
    rp_buf_init(&res->content);
    rp_buf_init(&res->reasoning);
    int cap_lp = 0;
    bool done = false;
    while (!done) {
        if (!d->cancelled && rp_http_client_gone(d->r))
            rp_drv_cancel(d);
        const rp_drv_event *ev;
        size_t n;
        rp_status st = rp_drv_next(d, RP_STREAM_WAIT_S, &ev, &n, &done);
        if (st)
            return st;
        for (size_t i = 0; i < n; i++) {
            if (ev[i].type == RP_DRV_CONTENT) {
                rp_buf_append(&res->content, ev[i].text, ev[i].len);
            } else if (ev[i].type == RP_DRV_REASONING) {
                rp_buf_append(&res->reasoning, ev[i].text, ev[i].len);
            } else {
                rp_drv_call *nc = rp_realloc(res->calls, (size_t)(res->n_calls + 1) * sizeof(*nc));
                if (!nc)
                    return RP_ERR(RP_ERR_NOMEM, "out of memory");
                res->calls = nc;
                rp_drv_call *c = &nc[res->n_calls];
                c->id = rp_strdup(ev[i].id);
                c->name = rp_strdup(ev[i].name);
                c->arguments = rp_strndup(ev[i].text, ev[i].len);
                res->n_calls++;
                if (!c->id || !c->name || !c->arguments)
                    return RP_ERR(RP_ERR_NOMEM, "out of memory");
            }
        }
        const rp_gen_token *lt;
        int nl;
        rp_drv_take_logprobs(d, &lt, &nl);
        if (nl > 0) {
            if (res->n_logprobs + nl > cap_lp) {
                int cap = (res->n_logprobs + nl) * 2;
                rp_gen_token *nt = rp_realloc(res->logprobs, (size_t)cap * sizeof(*nt));
                if (!nt)
                    return RP_ERR(RP_ERR_NOMEM, "out of memory");
                res->logprobs = nt;
                cap_lp = cap;
            }
            memcpy(res->logprobs + res->n_logprobs, lt, (size_t)nl * sizeof(*lt));
            res->n_logprobs += nl;
        }
    }
    if (res->content.failed || res->reasoning.failed)
        return RP_ERR(RP_ERR_NOMEM, "out of memory");
    rp_drv_get_info(d, &res->info);
    return RP_OK;
}

bool rp_drv_failed(const rp_drv_info *info, const char *code, rp_api_error *e)
{
    if (info->finish == RP_DRV_ERROR)
        return !rp_api_fail(e, 500, NULL, code, "generation failed: %s", info->error);
    if (info->finish == RP_DRV_CANCELLED)
        return !rp_api_fail(e, 503, NULL, code, "the request was cancelled (client gone or server shutting down)");
    return false;
}

bool rp_drv_complete(rp_drv *d, const char *code, rp_drv_result *res, rp_api_error *e)
{
    if (rp_drv_collect(d, res))
        return rp_api_fail(e, 500, NULL, code, "generation failed: %s", rp_error_message());
    return !rp_drv_failed(&res->info, code, e);
}
