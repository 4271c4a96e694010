/*
 * parse_json.c - the byte-at-a-time pieces the call grammars are built from:
 *
 *   js      an incremental JSON scanner: validates a value byte by byte (RFC
 *           8259, nesting bounded), tells whitespace between tokens from bytes
 *           of the value (so the caller can compact as it streams) and says on
 *           which byte the value ends. No values are built.
 *   lit/alt one literal, or one of several, after optional whitespace
 *   env     the {"name": "...", "arguments": {...}} object of Hermes, Llama and
 *           Mistral calls: START is sent when the name is complete, the
 *           arguments stream out compacted as they arrive. Strict mode (a bare
 *           Llama reply) accepts only name/type/parameters/arguments keys, name
 *           or type first, so an ordinary JSON reply stays content.
 *   args    a JSON object as the call's arguments
 */
#include "parse_int.h"

/* ---- buffers --------------------------------------------------------------- */

void pbuf_add(pbuf *b, const void *s, size_t n, rp_status *st)
{
    if (*st != RP_OK || n == 0)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *q = rp_realloc(b->p, cap);
        if (!q) {
            *st = RP_ERR(RP_ERR_NOMEM, "parser: out of memory");
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

void pbuf_free(pbuf *b)
{
    rp_free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

bool parse_is_ws(uint8_t c)
{
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

/* ---- JSON scanner ------------------------------------------------------------ */

enum {
    S_VALUE,     // a value may start (whitespace first)
    S_OBJ_FIRST, // after '{': a key or '}'
    S_OBJ_KEY,   // after ',' in an object: a key
    S_COLON,     // after a key
    S_OBJ_NEXT,  // after a member: ',' or '}'
    S_ARR_FIRST, // after '[': a value or ']'
    S_ARR_NEXT,  // after an element: ',' or ']'
    S_STR,
    S_STR_ESC,
    S_STR_HEX,
    S_NUM_MINUS,
    S_NUM_ZERO,
    S_NUM_INT,
    S_NUM_DOT,
    S_NUM_FRAC,
    S_NUM_E,
    S_NUM_ESIGN,
    S_NUM_EXP,
    S_LIT,
    S_END, // the value is complete; nothing more is accepted
};

void js_init(js *j, bool want_object)
{
    memset(j, 0, sizeof(*j));
    j->st = S_VALUE;
    j->want_object = want_object;
}

static bool js_top_is_object(const js *j)
{
    int d = j->depth - 1;
    return (j->stack[d / 64] >> (d % 64)) & 1;
}

// A value has just ended: where to go, and whether it was the top-level one.
static int js_after_value(js *j)
{
    if (j->depth == 0) {
        j->st = S_END;
        return JS_DONE;
    }
    j->st = js_top_is_object(j) ? S_OBJ_NEXT : S_ARR_NEXT;
    return JS_EMIT;
}

static int js_open(js *j, bool object)
{
    if (j->depth >= PARSE_JSON_DEPTH)
        return JS_ERR;
    int d = j->depth++;
    if (object)
        j->stack[d / 64] |= 1ull << (d % 64);
    else
        j->stack[d / 64] &= ~(1ull << (d % 64));
    j->st = object ? S_OBJ_FIRST : S_ARR_FIRST;
    return JS_EMIT;
}

static int js_close(js *j)
{
    j->depth--;
    return js_after_value(j);
}

static int js_value_start(js *j, uint8_t c)
{
    if (j->want_object && j->depth == 0 && c != '{')
        return JS_ERR;
    switch (c) {
    case '{':
        return js_open(j, true);
    case '[':
        return js_open(j, false);
    case '"':
        j->st = S_STR;
        j->key = false;
        return JS_EMIT;
    case '-':
        j->st = S_NUM_MINUS;
        return JS_EMIT;
    case '0':
        j->st = S_NUM_ZERO;
        return JS_EMIT;
    case 't':
        j->lit = "true";
        break;
    case 'f':
        j->lit = "false";
        break;
    case 'n':
        j->lit = "null";
        break;
    default:
        if (c >= '1' && c <= '9') {
            j->st = S_NUM_INT;
            return JS_EMIT;
        }
        return JS_ERR;
    }
    j->st = S_LIT;
    j->n = 1;
    return JS_EMIT;
}

static bool is_digit(uint8_t c)
{
    return c >= '0' && c <= '9';
}

static bool is_hex(uint8_t c)
{
    return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

// A number ended at c (not part of it): finish it, then c goes to the new state.
static int js_number_end(js *j, uint8_t c)
{
    int r = js_after_value(j);
    if (r == JS_DONE)
        return JS_DONE_UNREAD;
    return js_feed(j, c);
}

int js_feed(js *j, uint8_t c)
{
    switch (j->st) {
    case S_VALUE:
        if (parse_is_ws(c))
            return JS_SKIP;
        return js_value_start(j, c);
    case S_OBJ_FIRST:
    case S_OBJ_KEY:
        if (parse_is_ws(c))
            return JS_SKIP;
        if (c == '"') {
            j->st = S_STR;
            j->key = true;
            return JS_EMIT;
        }
        if (c == '}' && j->st == S_OBJ_FIRST)
            return js_close(j);
        return JS_ERR;
    case S_COLON:
        if (parse_is_ws(c))
            return JS_SKIP;
        if (c != ':')
            return JS_ERR;
        j->st = S_VALUE;
        return JS_EMIT;
    case S_OBJ_NEXT:
    case S_ARR_NEXT:
        if (parse_is_ws(c))
            return JS_SKIP;
        if (c == ',') {
            j->st = j->st == S_OBJ_NEXT ? S_OBJ_KEY : S_VALUE;
            return JS_EMIT;
        }
        if (c == (j->st == S_OBJ_NEXT ? '}' : ']'))
            return js_close(j);
        return JS_ERR;
    case S_ARR_FIRST:
        if (parse_is_ws(c))
            return JS_SKIP;
        if (c == ']')
            return js_close(j);
        return js_value_start(j, c);
    case S_STR:
        if (c == '"') {
            if (j->key) {
                j->st = S_COLON;
                return JS_EMIT;
            }
            return js_after_value(j);
        }
        if (c == '\\') {
            j->st = S_STR_ESC;
            return JS_EMIT;
        }
        if (c == 0 && j->key)
            return JS_ERR;
        return c < 0x20 ? JS_CTRL : JS_EMIT;
    case S_STR_ESC:
        if (c == 'u') {
            j->st = S_STR_HEX;
            j->n = 0;
            j->hex = 0;
            return JS_EMIT;
        }
        if (!strchr("\"\\/bfnrt", c) || c == 0)
            return JS_ERR;
        j->st = S_STR;
        return JS_EMIT;
    case S_STR_HEX:
        if (!is_hex(c))
            return JS_ERR;
        j->hex = (uint16_t)(j->hex << 4 | (c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10));
        if (++j->n == 4) {
            if (j->key && j->hex == 0)
                return JS_ERR; // a NUL in a key: valid JSON, but no C consumer can hold it
            j->st = S_STR;
        }
        return JS_EMIT;
    case S_NUM_MINUS:
        if (c == '0')
            j->st = S_NUM_ZERO;
        else if (c >= '1' && c <= '9')
            j->st = S_NUM_INT;
        else
            return JS_ERR;
        return JS_EMIT;
    case S_NUM_ZERO:
    case S_NUM_INT:
        if (is_digit(c) && j->st == S_NUM_INT)
            return JS_EMIT;
        if (c == '.') {
            j->st = S_NUM_DOT;
            return JS_EMIT;
        }
        if (c == 'e' || c == 'E') {
            j->st = S_NUM_E;
            return JS_EMIT;
        }
        if (is_digit(c))
            return JS_ERR; // a leading zero
        return js_number_end(j, c);
    case S_NUM_DOT:
        if (!is_digit(c))
            return JS_ERR;
        j->st = S_NUM_FRAC;
        return JS_EMIT;
    case S_NUM_FRAC:
        if (is_digit(c))
            return JS_EMIT;
        if (c == 'e' || c == 'E') {
            j->st = S_NUM_E;
            return JS_EMIT;
        }
        return js_number_end(j, c);
    case S_NUM_E:
        if (c == '+' || c == '-') {
            j->st = S_NUM_ESIGN;
            return JS_EMIT;
        }
        if (!is_digit(c))
            return JS_ERR;
        j->st = S_NUM_EXP;
        return JS_EMIT;
    case S_NUM_ESIGN:
        if (!is_digit(c))
            return JS_ERR;
        j->st = S_NUM_EXP;
        return JS_EMIT;
    case S_NUM_EXP:
        if (is_digit(c))
            return JS_EMIT;
        return js_number_end(j, c);
    case S_LIT:
        if (c != (uint8_t)j->lit[j->n])
            return JS_ERR;
        if (j->lit[++j->n] == 0)
            return js_after_value(j);
        return JS_EMIT;
    default:
        return JS_ERR;
    }
}

/* ---- literals -------------------------------------------------------------- */

void lit_begin(rp_parser *p, const char *lit)
{
    p->lit = lit;
    p->lit_pos = 0;
}

int lit_feed(rp_parser *p, uint8_t c)
{
    if (p->lit_pos == 0 && parse_is_ws(c))
        return R_MORE;
    if (c != (uint8_t)p->lit[p->lit_pos])
        return R_ERR;
    return p->lit[++p->lit_pos] ? R_MORE : R_DONE;
}

void alt_begin(rp_parser *p, const char *const *alts, int n)
{
    p->alts = alts;
    p->n_alts = n;
    p->alt_pos = 0;
    p->alt_mask = (1u << n) - 1;
    p->alt_hit = -1;
}

// The alternatives must be prefix-free.
int alt_feed(rp_parser *p, uint8_t c)
{
    if (p->alt_pos == 0 && parse_is_ws(c))
        return R_MORE;
    unsigned mask = 0;
    for (int i = 0; i < p->n_alts; i++) {
        if (!(p->alt_mask >> i & 1) || (uint8_t)p->alts[i][p->alt_pos] != c)
            continue;
        if (p->alts[i][p->alt_pos + 1] == 0) {
            p->alt_hit = i;
            return R_DONE;
        }
        mask |= 1u << i;
    }
    p->alt_mask = mask;
    p->alt_pos++;
    return mask ? R_MORE : R_ERR;
}

/* ---- arguments ----------------------------------------------------------------- */

void args_begin(rp_parser *p)
{
    js_init(&p->j, true);
}

// Writes one scanned byte of the arguments, compacted.
static void args_put(rp_parser *p, int r, uint8_t c)
{
    if (r == JS_EMIT || r == JS_DONE) {
        char ch = (char)c;
        parse_args(p, &ch, 1);
    } else if (r == JS_CTRL) {
        parse_args_escaped(p, (const char *)&c, 1);
    }
}

int args_feed(rp_parser *p, uint8_t c)
{
    int r = js_feed(&p->j, c);
    if (r == JS_ERR)
        return R_ERR;
    args_put(p, r, c);
    return r == JS_DONE ? R_DONE : R_MORE;
}

/* ---- the call envelope ------------------------------------------------------------ */

enum { E_OPEN, E_KEY_FIRST, E_KEY, E_IN_KEY, E_COLON, E_VALUE, E_IN_VALUE, E_NEXT };
enum { ROLE_OTHER, ROLE_NAME, ROLE_ARGS, ROLE_TYPE };

void env_begin(rp_parser *p, bool strict)
{
    p->env_st = E_OPEN;
    p->env_strict = strict;
    p->env_have_name = p->env_have_args = p->env_have_type = false;
    p->env_keys = 0;
    p->key.len = 0;
    p->name.len = 0;
}

static bool key_is(const rp_parser *p, const char *s)
{
    size_t n = strlen(s);
    return p->key.len == n + 2 && memcmp(p->key.p + 1, s, n) == 0;
}

// Decodes the JSON string in p->name (quotes included) into p->val; false if not a usable name.
static bool decode_name(rp_parser *p)
{
    json_error_t err;
    json_t *s = json_loadb(p->name.p, p->name.len, JSON_DECODE_ANY, &err);
    bool ok = s && json_is_string(s) && json_string_length(s) > 0 && json_string_length(s) <= PARSE_NAME_MAX &&
              strlen(json_string_value(s)) == json_string_length(s);
    if (ok) {
        p->val.len = 0;
        pbuf_add(&p->val, json_string_value(s), json_string_length(s), &p->st);
    }
    json_decref(s);
    return ok;
}

static int env_value_start(rp_parser *p, uint8_t c)
{
    if (key_is(p, "name")) {
        if (p->env_have_name || c != '"')
            return R_ERR;
        p->env_role = ROLE_NAME;
        p->name.len = 0;
    } else if (key_is(p, "arguments") || key_is(p, "parameters")) {
        if (p->env_have_args)
            return R_ERR;
        p->env_role = ROLE_ARGS;
        js_init(&p->j, true);
        p->env_st = E_IN_VALUE;
        return args_feed(p, c) == R_ERR ? R_ERR : R_MORE;
    } else if (key_is(p, "type")) {
        if (p->env_have_type || c != '"')
            return R_ERR;
        p->env_role = ROLE_TYPE;
        p->name.len = 0;
    } else {
        if (p->env_strict)
            return R_ERR;
        p->env_role = ROLE_OTHER;
    }
    js_init(&p->j, false);
    p->env_st = E_IN_VALUE;
    if (js_feed(&p->j, c) == JS_ERR)
        return R_ERR;
    if (p->env_role == ROLE_NAME || p->env_role == ROLE_TYPE)
        pbuf_add(&p->name, &c, 1, &p->st);
    return R_MORE;
}

// The value in the envelope ended (c was its last byte).
static int env_value_end(rp_parser *p)
{
    p->env_st = E_NEXT;
    switch (p->env_role) {
    case ROLE_NAME:
        if (!decode_name(p))
            return R_ERR;
        p->env_have_name = true;
        parse_emit_start(p, p->val.p, p->val.len, p->fam == FAM_MISTRAL);
        break;
    case ROLE_TYPE:
        p->env_have_type = true;
        if (p->env_strict && !(p->name.len == 10 && memcmp(p->name.p, "\"function\"", 10) == 0))
            return R_ERR;
        break;
    case ROLE_ARGS:
        p->env_have_args = true;
        break;
    }
    return R_MORE;
}

int env_feed(rp_parser *p, uint8_t c)
{
    switch (p->env_st) {
    case E_OPEN:
        if (parse_is_ws(c))
            return R_MORE;
        if (c != '{')
            return R_ERR;
        p->env_st = E_KEY_FIRST;
        return R_MORE;
    case E_KEY_FIRST:
    case E_KEY:
        if (parse_is_ws(c))
            return R_MORE;
        if (c == '}' && p->env_st == E_KEY_FIRST)
            return R_ERR; // {} names nothing
        if (c != '"')
            return R_ERR;
        js_init(&p->j, false);
        js_feed(&p->j, c);
        p->key.len = 0;
        pbuf_add(&p->key, &c, 1, &p->st);
        p->env_st = E_IN_KEY;
        return R_MORE;
    case E_IN_KEY: {
        int r = js_feed(&p->j, c);
        if (r == JS_ERR)
            return R_ERR;
        if (p->key.len < PARSE_NAME_MAX)
            pbuf_add(&p->key, &c, 1, &p->st);
        if (r == JS_DONE) {
            p->env_st = E_COLON;
            if (p->env_strict && p->env_keys == 0 && !key_is(p, "name") && !key_is(p, "type"))
                return R_ERR;
            p->env_keys++;
        }
        return R_MORE;
    }
    case E_COLON:
        if (parse_is_ws(c))
            return R_MORE;
        if (c != ':')
            return R_ERR;
        p->env_st = E_VALUE;
        return R_MORE;
    case E_VALUE:
        if (parse_is_ws(c))
            return R_MORE;
        return env_value_start(p, c);
    case E_IN_VALUE: {
        if (p->env_role == ROLE_ARGS) {
            int r = args_feed(p, c);
            return r == R_ERR ? R_ERR : r == R_DONE ? env_value_end(p) : R_MORE;
        }
        int r = js_feed(&p->j, c);
        if (r == JS_ERR)
            return R_ERR;
        if (p->env_role != ROLE_OTHER) {
            if (p->name.len > PARSE_NAME_MAX + 2)
                return R_ERR;
            pbuf_add(&p->name, &c, 1, &p->st);
        }
        if (r == JS_DONE)
            return env_value_end(p);
        if (r == JS_DONE_UNREAD) { // a number ended: c is ',' or '}' (or junk)
            if (env_value_end(p) == R_ERR)
                return R_ERR;
            return env_feed(p, c);
        }
        return R_MORE;
    }
    case E_NEXT:
        if (parse_is_ws(c))
            return R_MORE;
        if (c == ',') {
            p->env_st = E_KEY;
            return R_MORE;
        }
        if (c != '}')
            return R_ERR;
        if (!p->env_have_name || (p->env_strict && !p->env_have_args))
            return R_ERR;
        if (!p->env_have_args)
            parse_args(p, "{}", 2);
        return R_DONE;
    }
    return R_ERR;
}
