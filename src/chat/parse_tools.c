/*
 * parse_tools.c - the call grammars of each model family, as state machines
 * fed one byte at a time after their opening marker (see parse_int.h).
 *
 *   <tool_call> (Hermes, Qwen2.5/3, Qwen3-Coder, Qwen3.5/3.6): after the tag
 *       either a JSON envelope {"name", "arguments"} or Qwen3-Coder's XML
 *       <function=NAME><parameter=P>\nvalue\n</parameter>...</function>, then
 *       </tool_call>. A parameter's value is a JSON string, streamed, unless the
 *       tool's schema types it (integer, number, boolean, object, array, null):
 *       then it is buffered and converted, falling back to a string when it
 *       does not parse as that type. A value that is exactly `null` (any case)
 *       is JSON null whatever the type, as Qwen's own qwen3_coder parser has it
 *       (a string value waits up to four bytes to tell). One newline after
 *       <parameter=P> and one before </parameter> belong to the markup. When
 *       the request has tools, a <function=NAME> that names none of them is a
 *       malformed call (its text becomes content): its arguments could not be
 *       typed, and no client can run it.
 *   Llama 3.x: a reply starting with {"name", "parameters"} (several joined by
 *       ';'); <|python_tag|> then such JSON, or NAME.call(k=JSON, ...) (built-in
 *       tools), or anything else: Python code for code_interpreter {"code"}.
 *   Mistral: [TOOL_CALLS] then a JSON array of envelopes, or NAME[ARGS]{..}
 *       (optionally NAME[CALL_ID]ID[ARGS]{..}); ids are always generated (9
 *       alphanumerics), the model's own are ignored.
 *   DeepSeek: <｜tool▁calls▁begin｜> then calls
 *       <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{..}\n```<｜tool▁call▁end｜> (V3/R1)
 *       or <｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{..}<｜tool▁call▁end｜> (V3.1),
 *       then <｜tool▁calls▁end｜>.
 */
#include "parse_int.h"

#include <strings.h>

enum {
    // <tool_call>
    T_DISPATCH = 1,
    T_ENV,
    T_CLOSE,
    T_FUNC_LIT,
    T_FUNC_NAME,
    T_PARAMS,
    T_PNAME,
    T_PVAL,
    // Llama
    L_ENV,
    L_AFTER,
    L_SEP,
    P_DISPATCH,
    P_IDENT,
    P_DOTCALL,
    P_CODE,
    B_KEY_FIRST,
    B_KEY,
    B_IN_KEY,
    B_EQ,
    B_VALUE,
    B_NEXT,
    // Mistral
    M_DISPATCH,
    M_ARR_FIRST,
    M_ARR_ELEM,
    M_ENV,
    M_ARR_NEXT,
    M_NAME,
    M_ALT,
    M_CALLID,
    M_ARGS_LIT,
    M_ARGS,
    M_OBJ,
    // DeepSeek
    D_CALLS,
    D_TYPE,
    D_SEP,
    D_AFTER_SEP,
    D_NAME,
    D_FENCE,
    D_LANG,
    D_ARGS,
    D_FENCE_END,
    D_ARGS31,
    D_CALL_END,
};

static const char *const xml_params[] = {"<parameter=", "</function>"};
static const char *const xml_ends[] = {"</parameter>", "<parameter=", "</function>"};
static const char *const mistral_alts[] = {"[ARGS]", "[CALL_ID]"};
static const char *const ds_calls[] = {"<｜tool▁call▁begin｜>", "<｜tool▁calls▁end｜>"};
#define DS_SEP "<｜tool▁sep｜>"
#define DS_CALL_END "<｜tool▁call▁end｜>"

static bool is_ident(uint8_t c, bool first)
{
    return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (!first && c >= '0' && c <= '9');
}

// Adds a byte to a name being read; false when it is too long.
static bool name_add(rp_parser *p, pbuf *b, uint8_t c)
{
    if (b->len >= PARSE_NAME_MAX || c < 0x20 || c == 0x7f)
        return false;
    pbuf_add(b, &c, 1, &p->st);
    return true;
}

// Trims whitespace in place; false when nothing is left.
static bool trim(pbuf *b)
{
    size_t s = 0, e = b->len;
    while (s < e && parse_is_ws((uint8_t)b->p[s]))
        s++;
    while (e > s && parse_is_ws((uint8_t)b->p[e - 1]))
        e--;
    if (s == e)
        return false;
    memmove(b->p, b->p + s, e - s);
    b->len = e - s;
    b->p[b->len] = 0;
    return true;
}

static bool start_named(rp_parser *p, pbuf *name, bool mistral)
{
    if (!trim(name) || !parse_utf8_valid(name->p, name->len))
        return false;
    parse_emit_start(p, name->p, name->len, mistral);
    return true;
}

/* ---- Qwen3-Coder parameters ------------------------------------------------------- */

// The request's tool (its "function" object, or the tool itself in the flat form) named p->name, or NULL.
static json_t *find_tool(const rp_parser *p)
{
    size_t i;
    json_t *tool;
    json_array_foreach(p->tools, i, tool)
    {
        json_t *fn = json_object_get(tool, "function");
        if (!json_is_object(fn))
            fn = tool;
        const char *tn = json_string_value(json_object_get(fn, "name"));
        if (tn && strlen(tn) == p->name.len && memcmp(tn, p->name.p, p->name.len) == 0)
            return fn;
    }
    return NULL;
}

// The JSON schema type of parameter `key` of tool `name`, or NULL (a string).
static const char *param_type(const rp_parser *p)
{
    json_t *props = json_object_get(json_object_get(find_tool(p), "parameters"), "properties");
    json_t *prop = json_is_object(props) ? json_object_getn(props, p->key.p, p->key.len) : NULL;
    json_t *type = json_object_get(prop, "type");
    if (json_is_string(type))
        return json_string_value(type);
    if (json_is_array(type)) { // ["integer", "null"]: the first non-null; a string if any is
        const char *first = NULL;
        size_t k;
        json_t *t;
        json_array_foreach(type, k, t)
        {
            const char *s = json_string_value(t);
            if (s && strcmp(s, "string") == 0)
                return NULL;
            if (s && strcmp(s, "null") != 0 && !first)
                first = s;
        }
        return first;
    }
    return NULL;
}

// Whether the request's tools (when it has any) include the function p->name.
static bool tool_known(const rp_parser *p)
{
    return json_array_size(p->tools) == 0 || find_tool(p) != NULL;
}

static bool is_null_word(const char *s, size_t n)
{
    return n == 4 && strncasecmp(s, "null", 4) == 0;
}

static bool typed(const char *t)
{
    return t && (strcmp(t, "integer") == 0 || strcmp(t, "number") == 0 || strcmp(t, "boolean") == 0 ||
                 strcmp(t, "object") == 0 || strcmp(t, "array") == 0 || strcmp(t, "null") == 0);
}

static void begin_param(rp_parser *p)
{
    if (p->n_params)
        parse_args(p, ",", 1);
    parse_args(p, "\"", 1);
    parse_args_escaped(p, p->key.p, p->key.len);
    parse_args(p, "\":", 2);
    p->val_typed = typed(param_type(p));
    p->val_null = !p->val_typed; // a string's opening quote waits until the value cannot be `null`
    p->val.len = 0;
    p->val_first = true;
    p->val_nl = false;
    p->vhold_len = 0;
}

// Emits a typed value: JSON of the schema's type when it parses as one, else a string.
static void typed_value(rp_parser *p)
{
    const char *t = param_type(p);
    pbuf *v = &p->val;
    size_t s = 0, e = v->len;
    while (s < e && parse_is_ws((uint8_t)v->p[s]))
        s++;
    while (e > s && parse_is_ws((uint8_t)v->p[e - 1]))
        e--;
    const char *text = v->p ? v->p + s : "";
    size_t n = e - s;
    if (is_null_word(text, n)) {
        parse_args(p, "null", 4);
        return;
    }
    json_error_t err;
    json_t *x = n ? json_loadb(text, n, JSON_DECODE_ANY, &err) : NULL;
    bool ok = false;
    if (x) {
        if (strcmp(t, "integer") == 0)
            ok = json_is_integer(x);
        else if (strcmp(t, "number") == 0)
            ok = json_is_number(x);
        else if (strcmp(t, "boolean") == 0)
            ok = json_is_boolean(x);
        else if (strcmp(t, "object") == 0)
            ok = json_is_object(x);
        else if (strcmp(t, "array") == 0)
            ok = json_is_array(x);
        ok = ok || json_is_null(x);
    }
    json_decref(x);
    if (ok) { // the model's text, compacted
        js_init(&p->j, false);
        for (size_t i = 0; i < n; i++) {
            uint8_t c = (uint8_t)text[i];
            int r = js_feed(&p->j, c);
            if (r == JS_EMIT || r == JS_DONE)
                parse_args(p, &text[i], 1);
            else if (r == JS_CTRL)
                parse_args_escaped(p, &text[i], 1);
        }
    } else if (strcmp(t, "boolean") == 0 && (n == 4 || n == 5) &&
               (strncasecmp(text, "true", n) == 0 || strncasecmp(text, "false", n) == 0)) {
        parse_args(p, n == 4 ? "true" : "false", n);
    } else {
        parse_args(p, "\"", 1);
        parse_args_escaped(p, v->p ? v->p : "", v->len);
        parse_args(p, "\"", 1);
    }
}

// One byte of a parameter's value (after the markup newlines are decided).
static bool val_out(rp_parser *p, uint8_t c)
{
    if (!p->val_typed) {
        if (p->val_null && p->val.len < 4 && (c | 0x20) == (uint8_t) "null"[p->val.len]) {
            pbuf_add(&p->val, &c, 1, &p->st);
            return true;
        }
        if (p->val_null) { // not `null` after all: the string so far
            p->val_null = false;
            parse_args(p, "\"", 1);
            parse_args_escaped(p, p->val.p ? p->val.p : "", p->val.len);
        }
        parse_args_escaped(p, (const char *)&c, 1);
        return true;
    }
    if (p->val.len >= PARSE_VALUE_MAX)
        return false;
    pbuf_add(&p->val, &c, 1, &p->st);
    return true;
}

// A value byte: a newline waits, since the last one before the end tag is markup.
static bool val_byte(rp_parser *p, uint8_t c)
{
    if (p->val_nl && !val_out(p, '\n'))
        return false;
    p->val_nl = c == '\n';
    return c == '\n' || val_out(p, c);
}

static int end_param(rp_parser *p, int which)
{
    if (p->val_typed) {
        typed_value(p);
    } else if (!p->val_null) {
        parse_args(p, "\"", 1);
    } else if (is_null_word(p->val.p, p->val.len)) {
        parse_args(p, "null", 4);
    } else { // a short string that began like `null` ("", "n", "Nul")
        parse_args(p, "\"", 1);
        parse_args_escaped(p, p->val.p ? p->val.p : "", p->val.len);
        parse_args(p, "\"", 1);
    }
    p->n_params++;
    switch (which) {
    case 0: // </parameter>
        alt_begin(p, xml_params, 2);
        p->st_fam = T_PARAMS;
        break;
    case 1: // <parameter=
        p->key.len = 0;
        p->st_fam = T_PNAME;
        break;
    default: // </function>
        parse_args(p, "}", 1);
        lit_begin(p, "</tool_call>");
        p->st_fam = T_CLOSE;
    }
    return R_MORE;
}

static int pval_feed(rp_parser *p, uint8_t c)
{
    if (p->val_first) {
        p->val_first = false;
        if (c == '\n')
            return R_MORE;
    }
    if (p->vhold_len == 0 && c != '<')
        return val_byte(p, c) ? R_MORE : R_ERR;
    p->vhold[p->vhold_len++] = (char)c;
    bool prefix = false;
    for (int i = 0; i < 3; i++) {
        size_t n = strlen(xml_ends[i]);
        if (p->vhold_len > n || memcmp(xml_ends[i], p->vhold, p->vhold_len) != 0)
            continue;
        if (p->vhold_len == n) {
            p->vhold_len = 0;
            return end_param(p, i);
        }
        prefix = true;
    }
    if (prefix)
        return R_MORE;
    // Not an end tag: the first held byte is value, the others are read again.
    char tmp[sizeof(p->vhold)];
    size_t n = p->vhold_len;
    memcpy(tmp, p->vhold, n);
    p->vhold_len = 0;
    if (!val_byte(p, (uint8_t)tmp[0]))
        return R_ERR;
    for (size_t i = 1; i < n; i++) {
        int r = tools_feed(p, (uint8_t)tmp[i]);
        if (r != R_MORE)
            return r;
    }
    return R_MORE;
}

/* ---- <tool_call> ------------------------------------------------------------------ */

static int tag_feed(rp_parser *p, uint8_t c)
{
    int r;
    switch (p->st_fam) {
    case T_DISPATCH:
        if (parse_is_ws(c))
            return R_MORE;
        if (c == '{') {
            env_begin(p, false);
            p->st_fam = T_ENV;
            return env_feed(p, c);
        }
        lit_begin(p, "<function=");
        p->st_fam = T_FUNC_LIT;
        return lit_feed(p, c);
    case T_ENV:
        r = env_feed(p, c);
        if (r == R_DONE) {
            lit_begin(p, "</tool_call>");
            p->st_fam = T_CLOSE;
            return R_MORE;
        }
        return r;
    case T_CLOSE:
        r = lit_feed(p, c);
        if (r == R_DONE)
            parse_emit_end(p);
        return r;
    case T_FUNC_LIT:
        r = lit_feed(p, c);
        if (r == R_DONE) {
            p->name.len = 0;
            p->st_fam = T_FUNC_NAME;
            return R_MORE;
        }
        return r;
    case T_FUNC_NAME:
        if (c == '>') {
            if (!trim(&p->name) || !tool_known(p) || !start_named(p, &p->name, false))
                return R_ERR;
            parse_args(p, "{", 1);
            p->n_params = 0;
            alt_begin(p, xml_params, 2);
            p->st_fam = T_PARAMS;
            return R_MORE;
        }
        return c != '\n' && c != '<' && name_add(p, &p->name, c) ? R_MORE : R_ERR;
    case T_PARAMS:
        r = alt_feed(p, c);
        if (r != R_DONE)
            return r;
        if (p->alt_hit == 0) {
            p->key.len = 0;
            p->st_fam = T_PNAME;
            return R_MORE;
        }
        parse_args(p, "}", 1);
        lit_begin(p, "</tool_call>");
        p->st_fam = T_CLOSE;
        return R_MORE;
    case T_PNAME:
        if (c == '>') {
            if (!trim(&p->key))
                return R_ERR;
            begin_param(p);
            p->st_fam = T_PVAL;
            return R_MORE;
        }
        return c != '\n' && c != '<' && name_add(p, &p->key, c) ? R_MORE : R_ERR;
    case T_PVAL:
        return pval_feed(p, c);
    }
    return R_ERR;
}

/* ---- Llama 3.x ----------------------------------------------------------------------- */

static void start_code(rp_parser *p, const char *s, size_t n)
{
    parse_emit_start(p, "code_interpreter", 16, false);
    parse_args(p, "{\"code\":\"", 9);
    parse_args_escaped(p, s, n);
    p->st_fam = P_CODE;
}

// Code after <|python_tag|> turned out not to be NAME.call(: what was read so far, then c.
static int to_code(rp_parser *p, uint8_t c)
{
    pbuf_add(&p->name, &c, 1, &p->st);
    start_code(p, p->name.p, p->name.len);
    return R_MORE;
}

static int llama_feed(rp_parser *p, uint8_t c)
{
    int r;
    switch (p->st_fam) {
    case L_ENV:
        r = env_feed(p, c);
        if (r == R_DONE) {
            parse_emit_end(p);
            p->st_fam = L_AFTER;
            return R_MORE;
        }
        return r;
    case L_AFTER:
        if (parse_is_ws(c))
            return R_MORE;
        if (c == ';') {
            p->st_fam = L_SEP;
            return R_MORE;
        }
        return R_DONE_UNREAD;
    case L_SEP:
        if (parse_is_ws(c))
            return R_MORE;
        env_begin(p, p->fam == FAM_LLAMA_BARE);
        p->st_fam = L_ENV;
        return env_feed(p, c);
    case P_DISPATCH:
        if (parse_is_ws(c))
            return R_MORE;
        if (c == '{') {
            env_begin(p, false);
            p->st_fam = L_ENV;
            return env_feed(p, c);
        }
        p->name.len = 0;
        if (is_ident(c, true)) {
            pbuf_add(&p->name, &c, 1, &p->st);
            p->st_fam = P_IDENT;
            return R_MORE;
        }
        return to_code(p, c);
    case P_IDENT:
        if (is_ident(c, false) && p->name.len < PARSE_NAME_MAX) {
            pbuf_add(&p->name, &c, 1, &p->st);
            return R_MORE;
        }
        if (c != '.')
            return to_code(p, c);
        p->lit_pos = 1;
        p->st_fam = P_DOTCALL;
        return R_MORE;
    case P_DOTCALL: {
        static const char call[] = ".call(";
        if (c != (uint8_t)call[p->lit_pos]) {
            pbuf_add(&p->name, call, p->lit_pos, &p->st);
            return to_code(p, c);
        }
        if (call[++p->lit_pos])
            return R_MORE;
        parse_emit_start(p, p->name.p, p->name.len, false);
        parse_args(p, "{", 1);
        p->n_params = 0;
        p->st_fam = B_KEY_FIRST;
        return R_MORE;
    }
    case P_CODE:
        parse_args_escaped(p, (const char *)&c, 1);
        return R_MORE;
    case B_KEY_FIRST:
    case B_KEY:
        if (parse_is_ws(c))
            return R_MORE;
        if (c == ')' && p->st_fam == B_KEY_FIRST)
            goto close;
        if (!is_ident(c, true))
            return R_ERR;
        p->key.len = 0;
        pbuf_add(&p->key, &c, 1, &p->st);
        p->st_fam = B_IN_KEY;
        return R_MORE;
    case B_IN_KEY:
        if (is_ident(c, false))
            return name_add(p, &p->key, c) ? R_MORE : R_ERR;
        p->st_fam = B_EQ;
        /* fall through */
    case B_EQ:
        if (parse_is_ws(c))
            return R_MORE;
        if (c != '=')
            return R_ERR;
        if (p->n_params)
            parse_args(p, ",", 1);
        parse_args(p, "\"", 1);
        parse_args(p, p->key.p, p->key.len);
        parse_args(p, "\":", 2);
        js_init(&p->j, false);
        p->st_fam = B_VALUE;
        return R_MORE;
    case B_VALUE:
        r = js_feed(&p->j, c);
        if (r == JS_ERR)
            return R_ERR;
        if (r == JS_EMIT || r == JS_DONE)
            parse_args(p, &c, 1);
        else if (r == JS_CTRL)
            parse_args_escaped(p, (const char *)&c, 1);
        if (r == JS_DONE || r == JS_DONE_UNREAD) {
            p->n_params++;
            p->st_fam = B_NEXT;
        }
        if (r != JS_DONE_UNREAD)
            return R_MORE;
        /* fall through */
    case B_NEXT:
        if (parse_is_ws(c))
            return R_MORE;
        if (c == ',') {
            p->st_fam = B_KEY;
            return R_MORE;
        }
        if (c != ')')
            return R_ERR;
    close:
        parse_args(p, "}", 1);
        parse_emit_end(p);
        p->st_fam = L_AFTER;
        return R_MORE;
    }
    return R_ERR;
}

/* ---- Mistral ---------------------------------------------------------------------- */

static int mistral_feed(rp_parser *p, uint8_t c)
{
    int r;
    switch (p->st_fam) {
    case M_DISPATCH:
        if (parse_is_ws(c))
            return R_MORE;
        if (c == '[') {
            p->st_fam = M_ARR_FIRST;
            return R_MORE;
        }
        if (c == '{') {
            env_begin(p, false);
            p->st_fam = M_OBJ;
            return env_feed(p, c);
        }
        p->name.len = 0;
        p->st_fam = M_NAME;
        /* fall through */
    case M_NAME:
        if (c == '[') {
            if (!trim(&p->name))
                return R_ERR;
            alt_begin(p, mistral_alts, 2);
            p->st_fam = M_ALT;
            return alt_feed(p, c);
        }
        return (is_ident(c, false) || c == '-' || c == '.') && name_add(p, &p->name, c) ? R_MORE : R_ERR;
    case M_ALT:
        r = alt_feed(p, c);
        if (r != R_DONE)
            return r;
        if (p->alt_hit == 1) {
            p->key.len = 0;
            p->st_fam = M_CALLID;
            return R_MORE;
        }
        goto args;
    case M_CALLID:
        if (c != '[')
            return c != '\n' && name_add(p, &p->key, c) ? R_MORE : R_ERR;
        lit_begin(p, "[ARGS]");
        p->st_fam = M_ARGS_LIT;
        return lit_feed(p, c);
    case M_ARGS_LIT:
        r = lit_feed(p, c);
        if (r != R_DONE)
            return r;
    args:
        parse_emit_start(p, p->name.p, p->name.len, true);
        args_begin(p);
        p->st_fam = M_ARGS;
        return R_MORE;
    case M_ARGS:
        r = args_feed(p, c);
        if (r == R_DONE)
            parse_emit_end(p);
        return r;
    case M_OBJ:
        r = env_feed(p, c);
        if (r == R_DONE)
            parse_emit_end(p);
        return r;
    case M_ARR_FIRST:
    case M_ARR_ELEM:
        if (parse_is_ws(c))
            return R_MORE;
        if (c == ']' && p->st_fam == M_ARR_FIRST)
            return R_DONE;
        env_begin(p, false);
        p->st_fam = M_ENV;
        return env_feed(p, c);
    case M_ENV:
        r = env_feed(p, c);
        if (r == R_DONE) {
            parse_emit_end(p);
            p->st_fam = M_ARR_NEXT;
            return R_MORE;
        }
        return r;
    case M_ARR_NEXT:
        if (parse_is_ws(c))
            return R_MORE;
        if (c == ',') {
            p->st_fam = M_ARR_ELEM;
            return R_MORE;
        }
        return c == ']' ? R_DONE : R_ERR;
    }
    return R_ERR;
}

/* ---- DeepSeek -------------------------------------------------------------------------- */

static int deepseek_feed(rp_parser *p, uint8_t c)
{
    int r;
    switch (p->st_fam) {
    case D_CALLS:
        r = alt_feed(p, c);
        if (r != R_DONE)
            return r;
        if (p->alt_hit == 1)
            return R_DONE;
        p->name.len = 0;
        p->st_fam = D_TYPE;
        return R_MORE;
    case D_TYPE:
        if (c == '<') {
            lit_begin(p, DS_SEP);
            p->st_fam = D_SEP;
            return lit_feed(p, c);
        }
        return c != '\n' && name_add(p, &p->name, c) ? R_MORE : R_ERR;
    case D_SEP:
        r = lit_feed(p, c);
        if (r == R_DONE) {
            p->st_fam = D_AFTER_SEP;
            return R_MORE;
        }
        return r;
    case D_AFTER_SEP:
        if (p->name.len == 8 && memcmp(p->name.p, "function", 8) == 0 && c != '{') {
            p->name.len = 0;
            p->st_fam = D_NAME;
            return c != '\n' && name_add(p, &p->name, c) ? R_MORE : R_ERR;
        }
        if (!start_named(p, &p->name, false))
            return R_ERR;
        args_begin(p);
        p->st_fam = D_ARGS31;
        return args_feed(p, c);
    case D_NAME:
        if (c != '\n')
            return name_add(p, &p->name, c) ? R_MORE : R_ERR;
        if (!start_named(p, &p->name, false))
            return R_ERR;
        lit_begin(p, "```");
        p->st_fam = D_FENCE;
        return R_MORE;
    case D_FENCE:
        r = lit_feed(p, c);
        if (r == R_DONE) {
            p->n_params = 0;
            p->st_fam = D_LANG;
            return R_MORE;
        }
        return r;
    case D_LANG:
        if (c == '{') {
            args_begin(p);
            p->st_fam = D_ARGS;
            return args_feed(p, c);
        }
        if (parse_is_ws(c))
            return R_MORE;
        return is_ident(c, false) && ++p->n_params <= 16 ? R_MORE : R_ERR;
    case D_ARGS:
    case D_ARGS31:
        r = args_feed(p, c);
        if (r != R_DONE)
            return r;
        lit_begin(p, p->st_fam == D_ARGS ? "```" : DS_CALL_END);
        p->st_fam = p->st_fam == D_ARGS ? D_FENCE_END : D_CALL_END;
        return R_MORE;
    case D_FENCE_END:
        r = lit_feed(p, c);
        if (r == R_DONE) {
            lit_begin(p, DS_CALL_END);
            p->st_fam = D_CALL_END;
            return R_MORE;
        }
        return r;
    case D_CALL_END:
        r = lit_feed(p, c);
        if (r == R_DONE) {
            parse_emit_end(p);
            alt_begin(p, ds_calls, 2);
            p->st_fam = D_CALLS;
            return R_MORE;
        }
        return r;
    }
    return R_ERR;
}

/* ---- dispatch --------------------------------------------------------------------- */

void tools_begin(rp_parser *p, int fam)
{
    p->fam = fam;
    p->started = false;
    switch (fam) {
    case FAM_TAG:
        p->st_fam = T_DISPATCH;
        break;
    case FAM_LLAMA_BARE:
        env_begin(p, true);
        p->st_fam = L_ENV;
        break;
    case FAM_LLAMA_TAG:
        p->st_fam = P_DISPATCH;
        break;
    case FAM_MISTRAL:
        p->st_fam = M_DISPATCH;
        break;
    case FAM_DEEPSEEK:
        alt_begin(p, ds_calls, 2);
        p->st_fam = D_CALLS;
        break;
    }
}

int tools_feed(rp_parser *p, uint8_t c)
{
    switch (p->fam) {
    case FAM_TAG:
        return tag_feed(p, c);
    case FAM_LLAMA_BARE:
    case FAM_LLAMA_TAG:
        return llama_feed(p, c);
    case FAM_MISTRAL:
        return mistral_feed(p, c);
    case FAM_DEEPSEEK:
        return deepseek_feed(p, c);
    }
    return R_ERR;
}

int tools_eof(rp_parser *p)
{
    switch (p->st_fam) {
    case L_AFTER:
    case M_ARR_NEXT:
        return R_DONE;
    case D_CALLS:
        return p->block_calls > 0 && p->alt_pos == 0 ? R_DONE : R_ERR;
    case P_CODE:
        parse_args(p, "\"}", 2);
        parse_emit_end(p);
        return R_DONE;
    }
    return R_ERR;
}
