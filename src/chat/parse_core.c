/*
 * parse_core.c - the output parser's driver (see parse.h for the contract and
 * parse_int.h for the design).
 *
 * Text mode, per byte: whitespace is held (it is dropped when a marker or the
 * end of a think block follows it, and right after a marker); a byte that may
 * begin an active marker is held with the ones after it until they either
 * spell the marker or cannot; then the first held byte is text and the rest
 * are read again. Active markers: the tool format's openers in content,
 * "<think>" while nothing has been said yet, "</think>" in reasoning; for
 * Llama a '{' as the first byte of the reply opens a bare JSON call.
 *
 * Events are collected per push with their text in one buffer (offsets, made
 * pointers when the push returns); a delta of the same kind as the previous
 * event extends it.
 */
#include "parse_int.h"

enum { MK_THINK_OPEN, MK_THINK_CLOSE, MK_TOOL };

typedef struct marker {
    const char *s;
    int action;
    int fam;
    rp_tool_format format; // RP_TOOL_FORMAT_NONE: every format (the think tags)
} marker;

static const marker markers[] = {
    {"<think>", MK_THINK_OPEN, 0, RP_TOOL_FORMAT_NONE},
    {"</think>", MK_THINK_CLOSE, 0, RP_TOOL_FORMAT_NONE},
    {"<tool_call>", MK_TOOL, FAM_TAG, RP_TOOL_FORMAT_HERMES},
    {"<tool_call>", MK_TOOL, FAM_TAG, RP_TOOL_FORMAT_QWEN3_CODER},
    {"<|python_tag|>", MK_TOOL, FAM_LLAMA_TAG, RP_TOOL_FORMAT_LLAMA3},
    {"[TOOL_CALLS]", MK_TOOL, FAM_MISTRAL, RP_TOOL_FORMAT_MISTRAL},
    {"<｜tool▁calls▁begin｜>", MK_TOOL, FAM_DEEPSEEK, RP_TOOL_FORMAT_DEEPSEEK},
    // spellings DeepSeek-R1 distills are seen to produce
    {"<｜tool_calls_begin｜>", MK_TOOL, FAM_DEEPSEEK, RP_TOOL_FORMAT_DEEPSEEK},
    {"<｜tool calls begin｜>", MK_TOOL, FAM_DEEPSEEK, RP_TOOL_FORMAT_DEEPSEEK},
    {"<｜tool▁calls｜>", MK_TOOL, FAM_DEEPSEEK, RP_TOOL_FORMAT_DEEPSEEK},
};
#define N_MARKERS (sizeof(markers) / sizeof(markers[0]))

static void feed(rp_parser *p, uint8_t c);

/* ---- random ids ---------------------------------------------------------------- */

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void make_id(rp_parser *p, char *out, bool mistral)
{
    static const char an[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    size_t n = 0;
    int k = mistral ? 9 : 24;
    if (!mistral) {
        memcpy(out, "call_", 5);
        n = 5;
    }
    for (int i = 0; i < k; i++)
        out[n++] = an[splitmix64(&p->rng) % 62];
    out[n] = 0;
}

/* ---- events ------------------------------------------------------------------ */

static pevent *new_event(rp_parser *p, rp_parse_event_type type)
{
    if (p->st != RP_OK)
        return NULL;
    if (p->n_ev == p->cap_ev) {
        size_t cap = p->cap_ev ? 2 * p->cap_ev : 16;
        pevent *e = rp_realloc(p->ev, cap * sizeof(*e));
        if (!e) {
            p->st = RP_ERR(RP_ERR_NOMEM, "parser: out of memory");
            return NULL;
        }
        p->ev = e;
        p->cap_ev = cap;
    }
    pevent *e = &p->ev[p->n_ev++];
    memset(e, 0, sizeof(*e));
    e->type = type;
    e->index = p->call_index;
    e->off = p->evtext.len;
    return e;
}

// A text delta of `type` (CONTENT, REASONING, TOOL_ARGS), merged into the previous one when it can be.
static void emit_delta(rp_parser *p, rp_parse_event_type type, const char *s, size_t n)
{
    if (n == 0 || p->st != RP_OK)
        return;
    pevent *last = p->n_ev ? &p->ev[p->n_ev - 1] : NULL;
    if (!last || last->type != type || last->index != p->call_index || last->off + last->len != p->evtext.len)
        last = new_event(p, type);
    if (!last)
        return;
    pbuf_add(&p->evtext, s, n, &p->st);
    last->len += n;
}

static void emit_text(rp_parser *p, rp_parse_event_type kind, const char *s, size_t n)
{
    emit_delta(p, kind, s, n);
    if (kind == RP_PARSE_EVENT_CONTENT && n)
        p->at_start = false;
}

static void args_raw(rp_parser *p, const void *s, size_t n)
{
    if (p->started)
        emit_delta(p, RP_PARSE_EVENT_TOOL_ARGS, s, n);
    else
        pbuf_add(&p->args_pending, s, n, &p->st);
}

// Bytes UTF-8 may continue a sequence with, given its lead byte and position.
static bool utf8_cont(uint8_t lead, size_t pos, uint8_t c)
{
    uint8_t lo = 0x80, hi = 0xBF;
    if (pos == 1) {
        if (lead == 0xE0)
            lo = 0xA0;
        else if (lead == 0xED)
            hi = 0x9F;
        else if (lead == 0xF0)
            lo = 0x90;
        else if (lead == 0xF4)
            hi = 0x8F;
    }
    return c >= lo && c <= hi;
}

static size_t utf8_len(uint8_t lead)
{
    if (lead >= 0xC2 && lead <= 0xDF)
        return 2;
    if (lead >= 0xE0 && lead <= 0xEF)
        return 3;
    if (lead >= 0xF0 && lead <= 0xF4)
        return 4;
    return 0;
}

bool parse_utf8_valid(const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        uint8_t c = (uint8_t)s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t k = utf8_len(c);
        if (k == 0 || i + k > n)
            return false;
        for (size_t j = 1; j < k; j++)
            if (!utf8_cont(c, j, (uint8_t)s[i + j]))
                return false;
        i += k;
    }
    return true;
}

#define REPLACEMENT "\xEF\xBF\xBD" // U+FFFD

// Arguments text. Kept valid UTF-8 (so always valid JSON): a broken sequence becomes U+FFFD.
void parse_args(rp_parser *p, const void *sv, size_t n)
{
    const uint8_t *s = sv;
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (p->u8_len) {
            if (utf8_cont((uint8_t)p->u8[0], p->u8_len, c)) {
                p->u8[p->u8_len++] = (char)c;
                if (p->u8_len == utf8_len((uint8_t)p->u8[0])) {
                    args_raw(p, p->u8, p->u8_len);
                    p->u8_len = 0;
                }
                i++;
                continue;
            }
            args_raw(p, REPLACEMENT, 3);
            p->u8_len = 0;
        }
        if (c < 0x80) {
            size_t j = i;
            while (j < n && s[j] < 0x80)
                j++;
            args_raw(p, s + i, j - i);
            i = j;
            continue;
        }
        if (utf8_len(c))
            p->u8[p->u8_len++] = (char)c;
        else
            args_raw(p, REPLACEMENT, 3);
        i++;
    }
}

void parse_emit_start(rp_parser *p, const char *name, size_t len, bool mistral_id)
{
    char id[32];
    make_id(p, id, mistral_id);
    pevent *e = new_event(p, RP_PARSE_EVENT_TOOL_START);
    if (!e)
        return;
    e->id_off = p->evtext.len;
    pbuf_add(&p->evtext, id, strlen(id) + 1, &p->st);
    e->name_off = p->evtext.len;
    pbuf_add(&p->evtext, name, len, &p->st);
    pbuf_add(&p->evtext, "", 1, &p->st);
    p->started = true;
    if (p->args_pending.len)
        emit_delta(p, RP_PARSE_EVENT_TOOL_ARGS, p->args_pending.p, p->args_pending.len);
    p->args_pending.len = 0;
}

void parse_emit_end(rp_parser *p)
{
    if (!p->started) // a grammar ends calls only after starting them
        return;
    if (p->u8_len)
        args_raw(p, REPLACEMENT, 3);
    p->u8_len = 0;
    new_event(p, RP_PARSE_EVENT_TOOL_END);
    p->call_index++;
    p->started = false;
    p->raw.len = 0;
    p->block_calls++;
    p->at_start = false;
}

void parse_args_escaped(rp_parser *p, const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        size_t j = i;
        while (j < n && (uint8_t)s[j] >= 0x20 && s[j] != '"' && s[j] != '\\')
            j++;
        parse_args(p, s + i, j - i);
        if (j == n)
            break;
        char esc[8];
        uint8_t c = (uint8_t)s[j];
        switch (c) {
        case '"':
            memcpy(esc, "\\\"", 3);
            break;
        case '\\':
            memcpy(esc, "\\\\", 3);
            break;
        case '\n':
            memcpy(esc, "\\n", 3);
            break;
        case '\r':
            memcpy(esc, "\\r", 3);
            break;
        case '\t':
            memcpy(esc, "\\t", 3);
            break;
        case '\b':
            memcpy(esc, "\\b", 3);
            break;
        case '\f':
            memcpy(esc, "\\f", 3);
            break;
        default:
            snprintf(esc, sizeof(esc), "\\u%04x", c);
        }
        parse_args(p, esc, strlen(esc));
        i = j + 1;
    }
}

/* ---- text mode --------------------------------------------------------------- */

static bool marker_active(const rp_parser *p, const marker *m)
{
    switch (m->action) {
    case MK_THINK_OPEN:
        return p->cfg.reasoning == RP_REASONING_FORMAT_THINK && p->kind == RP_PARSE_EVENT_CONTENT && p->at_start &&
               !p->think_seen;
    case MK_THINK_CLOSE:
        return p->kind == RP_PARSE_EVENT_REASONING;
    default:
        return p->kind == RP_PARSE_EVENT_CONTENT && m->format == p->cfg.tools;
    }
}

// -2: the held bytes begin no marker; -1: they begin one; >= 0: they are that marker.
static int match_hold(const rp_parser *p)
{
    int r = -2;
    for (size_t i = 0; i < N_MARKERS; i++) {
        const marker *m = &markers[i];
        size_t n = strlen(m->s);
        if (p->hold_len > n || memcmp(m->s, p->hold, p->hold_len) != 0 || !marker_active(p, m))
            continue;
        if (p->hold_len == n)
            return (int)i;
        r = -1;
    }
    return r;
}

// One byte that is text of the current kind.
static void plain_byte(rp_parser *p, uint8_t c)
{
    if (parse_is_ws(c)) {
        if (!p->trim_lead)
            pbuf_add(&p->ws, &c, 1, &p->st);
        return;
    }
    p->trim_lead = false;
    emit_text(p, p->kind, p->ws.p, p->ws.len);
    p->ws.len = 0;
    emit_text(p, p->kind, (const char *)&c, 1);
}

static void enter_call(rp_parser *p, int fam, const char *opener, size_t n)
{
    p->raw.len = 0;
    pbuf_add(&p->raw, p->ws.p, p->ws.len, &p->st);
    pbuf_add(&p->raw, opener, n, &p->st);
    p->ws.len = 0;
    p->in_call = true;
    p->block_calls = 0;
    p->args_pending.len = 0;
    tools_begin(p, fam);
}

static void trigger(rp_parser *p, const marker *m)
{
    switch (m->action) {
    case MK_THINK_OPEN:
        p->kind = RP_PARSE_EVENT_REASONING;
        p->think_seen = true;
        break;
    case MK_THINK_CLOSE:
        p->kind = RP_PARSE_EVENT_CONTENT;
        break;
    default:
        enter_call(p, m->fam, m->s, strlen(m->s));
        return;
    }
    p->ws.len = 0;
    p->trim_lead = true;
}

static void text_byte(rp_parser *p, uint8_t c)
{
    if (p->hold_len == 0) {
        if (c == '{' && p->cfg.tools == RP_TOOL_FORMAT_LLAMA3 && p->at_start && p->kind == RP_PARSE_EVENT_CONTENT) {
            enter_call(p, FAM_LLAMA_BARE, "{", 1);
            tools_feed(p, c);
            return;
        }
        if (c != '<' && c != '[') { // every marker begins with one of these
            plain_byte(p, c);
            return;
        }
    }
    p->hold[p->hold_len++] = (char)c;
    int m = match_hold(p);
    if (m >= 0) {
        p->hold_len = 0;
        trigger(p, &markers[m]);
        return;
    }
    if (m == -1)
        return;
    // Not a marker: the first held byte is text, the others are read again.
    char tmp[sizeof(p->hold)];
    size_t n = p->hold_len;
    memcpy(tmp, p->hold, n);
    p->hold_len = 0;
    plain_byte(p, (uint8_t)tmp[0]);
    for (size_t i = 1; i < n; i++)
        feed(p, (uint8_t)tmp[i]);
}

/* ---- call mode ---------------------------------------------------------------- */

static void leave_call(rp_parser *p)
{
    p->in_call = false;
    p->raw.len = 0;
    p->trim_lead = true;
    p->ws.len = 0;
}

// The structure is malformed: forget the call, its text is content.
static void abort_call(rp_parser *p)
{
    if (p->started)
        new_event(p, RP_PARSE_EVENT_TOOL_ABORT);
    p->started = false;
    p->args_pending.len = 0;
    p->u8_len = 0;
    p->in_call = false;
    p->trim_lead = false;
    emit_text(p, RP_PARSE_EVENT_CONTENT, p->raw.p, p->raw.len);
    p->raw.len = 0;
}

static void feed(rp_parser *p, uint8_t c)
{
    if (!p->in_call) {
        text_byte(p, c);
        return;
    }
    pbuf_add(&p->raw, &c, 1, &p->st);
    switch (tools_feed(p, c)) {
    case R_MORE:
        break;
    case R_DONE:
        leave_call(p);
        break;
    case R_DONE_UNREAD:
        leave_call(p);
        text_byte(p, c);
        break;
    default:
        if (p->raw.len)
            p->raw.len--;
        abort_call(p);
        text_byte(p, c);
        break;
    }
}

/* ---- lifecycle ------------------------------------------------------------------ */

rp_status rp_parser_create(const rp_parser_config *cfg, rp_parser **out)
{
    *out = NULL;
    if ((unsigned)cfg->tools >= RP_TOOL_FORMAT_COUNT || (unsigned)cfg->reasoning >= RP_REASONING_FORMAT_COUNT)
        return RP_ERR(RP_ERR_INVALID, "parser: unknown format (tools %d, reasoning %d)", (int)cfg->tools,
                      (int)cfg->reasoning);
    rp_parser *p = rp_calloc(1, sizeof(*p));
    if (!p)
        return RP_ERR(RP_ERR_NOMEM, "parser: out of memory");
    p->cfg = *cfg;
    p->cfg.tools_json = NULL;
    p->rng = cfg->seed;
    p->kind = cfg->think_open && cfg->reasoning == RP_REASONING_FORMAT_THINK ? RP_PARSE_EVENT_REASONING
                                                                             : RP_PARSE_EVENT_CONTENT;
    p->think_seen = p->kind == RP_PARSE_EVENT_REASONING;
    p->trim_lead = p->think_seen;
    p->at_start = true;
    if (cfg->tools_json && cfg->tools_json_len) {
        json_error_t err;
        p->tools = json_loadb(cfg->tools_json, cfg->tools_json_len, 0, &err);
        if (!p->tools || !json_is_array(p->tools)) {
            rp_status st = p->tools ? RP_ERR(RP_ERR_INVALID, "parser: tools is not a JSON array")
                                    : RP_ERR(RP_ERR_INVALID, "parser: tools: %s (line %d, column %d)", err.text,
                                             err.line, err.column);
            rp_parser_destroy(p);
            return st;
        }
    }
    *out = p;
    return RP_OK;
}

void rp_parser_destroy(rp_parser *p)
{
    if (!p)
        return;
    json_decref(p->tools);
    pbuf_free(&p->ws);
    pbuf_free(&p->raw);
    pbuf_free(&p->name);
    pbuf_free(&p->key);
    pbuf_free(&p->val);
    pbuf_free(&p->args_pending);
    pbuf_free(&p->evtext);
    rp_free(p->ev);
    rp_free(p->out);
    rp_free(p);
}

// Turns this push's events into the public form.
static rp_status deliver(rp_parser *p, const rp_parse_event **events, size_t *n_events)
{
    *events = NULL;
    *n_events = 0;
    if (p->st != RP_OK)
        return p->st;
    if (p->n_ev > p->cap_out) {
        rp_parse_event *o = rp_realloc(p->out, p->n_ev * sizeof(*o));
        if (!o)
            return p->st = RP_ERR(RP_ERR_NOMEM, "parser: out of memory");
        p->out = o;
        p->cap_out = p->n_ev;
    }
    for (size_t i = 0; i < p->n_ev; i++) {
        const pevent *e = &p->ev[i];
        rp_parse_event *o = &p->out[i];
        memset(o, 0, sizeof(*o));
        o->type = e->type;
        o->index = e->index;
        if (e->type == RP_PARSE_EVENT_TOOL_START) {
            o->id = p->evtext.p + e->id_off;
            o->name = p->evtext.p + e->name_off;
        } else if (e->len) {
            o->text = p->evtext.p + e->off;
            o->len = e->len;
        } else {
            o->text = "";
        }
    }
    *events = p->out;
    *n_events = p->n_ev;
    return RP_OK;
}

static rp_status begin_push(rp_parser *p, const rp_parse_event **events, size_t *n_events)
{
    *events = NULL;
    *n_events = 0;
    if (p->st != RP_OK)
        return p->st;
    if (p->finished)
        return RP_ERR(RP_ERR_INVALID, "parser: text pushed after finish");
    p->n_ev = 0;
    p->evtext.len = 0;
    return RP_OK;
}

rp_status rp_parser_push(rp_parser *p, const char *text, size_t len, const rp_parse_event **events, size_t *n_events)
{
    rp_status st = begin_push(p, events, n_events);
    if (st != RP_OK)
        return st;
    for (size_t i = 0; i < len && p->st == RP_OK; i++)
        feed(p, (uint8_t)text[i]);
    return deliver(p, events, n_events);
}

rp_status rp_parser_finish(rp_parser *p, const rp_parse_event **events, size_t *n_events)
{
    rp_status st = begin_push(p, events, n_events);
    if (st != RP_OK)
        return st;
    p->finished = true;
    // Held bytes that were not a marker are text (reading them again may hold some again).
    while (p->hold_len && !p->in_call) {
        char tmp[sizeof(p->hold)];
        size_t n = p->hold_len;
        memcpy(tmp, p->hold, n);
        p->hold_len = 0;
        plain_byte(p, (uint8_t)tmp[0]);
        for (size_t i = 1; i < n; i++)
            feed(p, (uint8_t)tmp[i]);
    }
    if (p->in_call) {
        if (tools_eof(p) == R_DONE) {
            // Committed: what is left is separators, or text after the last call.
            bool blank = true;
            for (size_t i = 0; i < p->raw.len; i++)
                blank = blank && parse_is_ws((uint8_t)p->raw.p[i]);
            if (!blank)
                emit_text(p, RP_PARSE_EVENT_CONTENT, p->raw.p, p->raw.len);
            p->in_call = false;
            p->raw.len = 0;
        } else {
            abort_call(p);
        }
    }
    emit_text(p, p->kind, p->ws.p, p->ws.len);
    p->ws.len = 0;
    return deliver(p, events, n_events);
}

/* ---- results ------------------------------------------------------------------ */

void rp_parse_result_init(rp_parse_result *r)
{
    memset(r, 0, sizeof(*r));
}

void rp_parse_result_deinit(rp_parse_result *r)
{
    rp_free(r->content);
    rp_free(r->reasoning);
    for (size_t i = 0; i < r->n_calls; i++) {
        rp_free(r->calls[i].id);
        rp_free(r->calls[i].name);
        rp_free(r->calls[i].arguments);
    }
    rp_free(r->calls);
    memset(r, 0, sizeof(*r));
}

// Capacity of a string of length len grown by append: the next power of two above it.
static size_t cap_for(size_t len)
{
    size_t c = 16;
    while (c < len + 1)
        c *= 2;
    return c;
}

static rp_status append(char **s, size_t *len, const char *t, size_t n)
{
    if (n == 0 && *s)
        return RP_OK;
    if (!*s || cap_for(*len + n) != cap_for(*len)) {
        char *q = rp_realloc(*s, cap_for(*len + n));
        if (!q)
            return RP_ERR(RP_ERR_NOMEM, "parse result: out of memory");
        *s = q;
    }
    memcpy(*s + *len, t, n);
    *len += n;
    (*s)[*len] = 0;
    return RP_OK;
}

static rp_status result_start(rp_parse_result *r, const rp_parse_event *e)
{
    if (e->index < 0 || (size_t)e->index != r->n_calls || !e->id || !e->name)
        return RP_ERR(RP_ERR_INVALID, "parse result: call %d started out of order", e->index);
    if (cap_for(r->n_calls + 1) != cap_for(r->n_calls) || !r->calls) {
        rp_parse_call *c = rp_realloc(r->calls, cap_for(r->n_calls + 1) * sizeof(*c));
        if (!c)
            return RP_ERR(RP_ERR_NOMEM, "parse result: out of memory");
        r->calls = c;
    }
    rp_parse_call *c = &r->calls[r->n_calls];
    memset(c, 0, sizeof(*c));
    c->id = rp_strdup(e->id);
    c->name = rp_strdup(e->name);
    rp_status st = append(&c->arguments, &c->arguments_len, "", 0);
    r->n_calls++;
    if (!c->id || !c->name || st != RP_OK)
        return RP_ERR(RP_ERR_NOMEM, "parse result: out of memory");
    return RP_OK;
}

rp_status rp_parse_result_apply(rp_parse_result *r, const rp_parse_event *ev, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const rp_parse_event *e = &ev[i];
        rp_status st = RP_OK;
        bool last_call = e->index >= 0 && (size_t)e->index + 1 == r->n_calls;
        switch (e->type) {
        case RP_PARSE_EVENT_CONTENT:
            st = append(&r->content, &r->content_len, e->text, e->len);
            break;
        case RP_PARSE_EVENT_REASONING:
            st = append(&r->reasoning, &r->reasoning_len, e->text, e->len);
            break;
        case RP_PARSE_EVENT_TOOL_START:
            st = result_start(r, e);
            break;
        case RP_PARSE_EVENT_TOOL_ARGS:
            if (!last_call)
                return RP_ERR(RP_ERR_INVALID, "parse result: arguments for unknown call %d", e->index);
            st = append(&r->calls[e->index].arguments, &r->calls[e->index].arguments_len, e->text, e->len);
            break;
        case RP_PARSE_EVENT_TOOL_END:
            if (!last_call)
                return RP_ERR(RP_ERR_INVALID, "parse result: end of unknown call %d", e->index);
            break;
        case RP_PARSE_EVENT_TOOL_ABORT: {
            if (!last_call)
                return RP_ERR(RP_ERR_INVALID, "parse result: abort of unknown call %d", e->index);
            rp_parse_call *c = &r->calls[--r->n_calls];
            rp_free(c->id);
            rp_free(c->name);
            rp_free(c->arguments);
            break;
        }
        default:
            return RP_ERR(RP_ERR_INVALID, "parse result: unknown event type %d", (int)e->type);
        }
        if (st != RP_OK)
            return st;
    }
    return RP_OK;
}

rp_status rp_parse_all(const rp_parser_config *cfg, const char *text, size_t len, rp_parse_result *out)
{
    rp_parse_result_init(out);
    rp_parser *p = NULL;
    rp_status st = rp_parser_create(cfg, &p);
    if (st != RP_OK)
        return st;
    const rp_parse_event *ev;
    size_t n;
    st = rp_parser_push(p, text, len, &ev, &n);
    if (st == RP_OK)
        st = rp_parse_result_apply(out, ev, n);
    if (st == RP_OK)
        st = rp_parser_finish(p, &ev, &n);
    if (st == RP_OK)
        st = rp_parse_result_apply(out, ev, n);
    rp_parser_destroy(p);
    return st;
}
