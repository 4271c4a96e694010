/*
 * jinja_value.c - the values of the chat template interpreter, with Python's
 * semantics where templates can see them:
 *   - str(): None -> "None", True -> "True", 1.0 -> "1.0" (repr of floats: the
 *     shortest digits that round-trip, exponent form below 1e-4 and from 1e16),
 *     lists/dicts/tuples -> their repr ("['a', 1]", "{'k': None}", "(1,)");
 *   - json.dumps() as transformers' tojson calls it (ensure_ascii=False by default,
 *     ", " / ": " separators, or "," with an indent);
 *   - ==: numbers compare by value across bool/int/float, lists by items (a list
 *     never equals a tuple), dicts regardless of order; < on numbers, strings (code
 *     point order, which is UTF-8 byte order) and sequences;
 *   - markupsafe's Markup is a str with the `safe` flag (equal to the same str, repr
 *     "Markup('...')"); what keeps or drops the flag is decided where strings are made
 *     (jinja_eval.c, jinja_filters.c, jinja_str.c), as markupsafe and jinja2 decide it;
 *   - a generator filter's result (map, select, ...) is a list with the `gen` flag: it
 *     is true even when empty, has no len(), equals only itself and is used up by the
 *     first thing that iterates it, as the Python generator jinja2 returns.
 * All values live in the render arena. Recursive walks carry a depth and stop at
 * JJ_MAX_VALUE_DEPTH with RP_ERR_LIMIT.
 */
#include "jinja_int.h"

#include <math.h>
#include <stdio.h>

jv jv_undefined_v = {.kind = JV_UNDEF};
jv jv_none_v = {.kind = JV_NONE};
jv jv_true_v = {.kind = JV_BOOL, .u.b = true};
jv jv_false_v = {.kind = JV_BOOL, .u.b = false};

/* ---- UTF-8 ---------------------------------------------------------------- */

uint32_t jj_utf8_next(const char *s, size_t len, size_t *pos)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = *pos;
    uint32_t c = u[i];
    int n = c < 0x80 ? 0 : c >= 0xF8 ? -1 : c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : -1;
    if (n > 0 && i + (size_t)n < len) {
        uint32_t cp = c & (0x3Fu >> n);
        bool ok = true;
        for (int k = 1; k <= n && ok; k++) {
            ok = (u[i + k] & 0xC0) == 0x80;
            cp = (cp << 6) | (u[i + k] & 0x3F);
        }
        if (ok) {
            *pos = i + (size_t)n + 1;
            return cp;
        }
    }
    *pos = i + 1;
    return c; // ASCII, or an invalid byte standing for itself
}

size_t jj_utf8_put(uint32_t cp, char *out)
{
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

size_t jj_utf8_count(const char *s, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; i < len; n++)
        jj_utf8_next(s, len, &i);
    return n;
}

size_t jj_utf8_offset(const char *s, size_t len, size_t idx)
{
    size_t i = 0;
    for (size_t k = 0; k < idx && i < len; k++)
        jj_utf8_next(s, len, &i);
    return i;
}

bool jj_py_isspace(uint32_t cp)
{
    return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
           cp == 0x3000;
}

/* ---- constructors --------------------------------------------------------- */

jv *jv_new(jj_ctx *c, jv_kind kind)
{
    jv *v = jj_calloc(c, sizeof(jv));
    if (v)
        v->kind = kind;
    return v;
}

jv *jv_int(jj_ctx *c, int64_t i)
{
    jv *v = jv_new(c, JV_INT);
    if (v)
        v->u.i = i;
    return v;
}

jv *jv_float(jj_ctx *c, double f)
{
    jv *v = jv_new(c, JV_FLOAT);
    if (v)
        v->u.f = f;
    return v;
}

jv *jv_bool(bool b)
{
    return b ? JV_TRUE : JV_FALSE;
}

jv *jv_str_owned(jj_ctx *c, const char *s, size_t len)
{
    if (len > JJ_MAX_OUTPUT * 4) {
        jj_fail(c, RP_ERR_LIMIT, "string too long");
        return NULL;
    }
    jv *v = jv_new(c, JV_STR);
    if (v) {
        v->u.str.s = s;
        v->u.str.len = len;
    }
    return v;
}

jv *jv_str(jj_ctx *c, const char *s, size_t len)
{
    if (len > JJ_MAX_OUTPUT * 4) {
        jj_fail(c, RP_ERR_LIMIT, "string too long");
        return NULL;
    }
    char *p = jj_calloc(c, len + 1);
    if (!p)
        return NULL;
    if (len)
        memcpy(p, s, len);
    return jv_str_owned(c, p, len);
}

jv *jv_undef(jj_ctx *c, const char *name)
{
    if (!name)
        return JV_UNDEFINED;
    jv *v = jv_new(c, JV_UNDEF);
    if (v)
        v->name = name;
    return v;
}

jv *jv_list(jj_ctx *c, size_t cap)
{
    jv *v = jv_new(c, JV_LIST);
    if (!v)
        return NULL;
    if (cap) {
        if (cap > JJ_MAX_ARENA / sizeof(jv *)) {
            jj_fail(c, RP_ERR_LIMIT, "list too long");
            return NULL;
        }
        v->u.list.items = jj_calloc(c, cap * sizeof(jv *));
        if (!v->u.list.items)
            return NULL;
        v->u.list.cap = cap;
    }
    return v;
}

bool jv_list_push(jj_ctx *c, jv *l, jv *x)
{
    if (l->u.list.n == l->u.list.cap) {
        size_t cap = l->u.list.cap ? l->u.list.cap * 2 : 8;
        if (cap > JJ_MAX_ARENA / sizeof(jv *))
            return jj_fail(c, RP_ERR_LIMIT, "list too long"), false;
        jv **items = jj_calloc(c, cap * sizeof(jv *));
        if (!items)
            return false;
        if (l->u.list.n)
            memcpy(items, l->u.list.items, l->u.list.n * sizeof(jv *));
        l->u.list.items = items;
        l->u.list.cap = cap;
    }
    l->u.list.items[l->u.list.n++] = x;
    return true;
}

jv *jv_dict(jj_ctx *c, jv_kind kind, size_t cap)
{
    jv *v = jv_new(c, kind);
    if (v && cap) {
        v->u.dict.keys = jj_calloc(c, cap * sizeof(jv *));
        v->u.dict.vals = jj_calloc(c, cap * sizeof(jv *));
        if (!v->u.dict.keys || !v->u.dict.vals)
            return NULL;
        v->u.dict.cap = cap;
    }
    return v;
}

static bool hashable(const jv *k)
{
    if (k->kind == JV_LIST) {
        if (!k->tuple)
            return false;
        for (size_t i = 0; i < k->u.list.n; i++)
            if (!hashable(k->u.list.items[i]))
                return false;
        return true;
    }
    return k->kind != JV_DICT && k->kind != JV_NS;
}

static long dict_find(jj_ctx *c, const jv *d, const jv *key)
{
    for (size_t i = 0; i < d->u.dict.n; i++) {
        int eq = jv_equal(c, d->u.dict.keys[i], key, 0);
        if (eq < 0)
            return -2;
        if (eq)
            return (long)i;
    }
    return -1;
}

bool jv_dict_set(jj_ctx *c, jv *d, jv *key, jv *val)
{
    if (!hashable(key))
        return jj_fail(c, RP_ERR_INVALID, "unhashable type: '%s'", jv_type_name(key)), false;
    long i = dict_find(c, d, key);
    if (i == -2)
        return false;
    if (i >= 0) {
        d->u.dict.vals[i] = val;
        return true;
    }
    if (d->u.dict.n == d->u.dict.cap) {
        size_t cap = d->u.dict.cap ? d->u.dict.cap * 2 : 8;
        jv **keys = jj_calloc(c, cap * sizeof(jv *)), **vals = jj_calloc(c, cap * sizeof(jv *));
        if (!keys || !vals)
            return false;
        if (d->u.dict.n) {
            memcpy(keys, d->u.dict.keys, d->u.dict.n * sizeof(jv *));
            memcpy(vals, d->u.dict.vals, d->u.dict.n * sizeof(jv *));
        }
        d->u.dict.keys = keys;
        d->u.dict.vals = vals;
        d->u.dict.cap = cap;
    }
    d->u.dict.keys[d->u.dict.n] = key;
    d->u.dict.vals[d->u.dict.n++] = val;
    return true;
}

jv *jv_dict_get(jj_ctx *c, const jv *d, const jv *key)
{
    if (key->kind == JV_STR)
        return jv_dict_gets(d, key->u.str.s);
    if (!hashable(key))
        return NULL;
    long i = dict_find(c, d, key);
    return i >= 0 ? d->u.dict.vals[i] : NULL;
}

jv *jv_dict_gets(const jv *d, const char *key)
{
    size_t n = strlen(key);
    for (size_t i = 0; i < d->u.dict.n; i++) {
        const jv *k = d->u.dict.keys[i];
        if (k->kind == JV_STR && k->u.str.len == n && memcmp(k->u.str.s, key, n) == 0)
            return d->u.dict.vals[i];
    }
    return NULL;
}

jv *jv_from_json(jj_ctx *c, const json_t *j, int depth)
{
    if (depth > JJ_MAX_VALUE_DEPTH)
        return jj_fail(c, RP_ERR_LIMIT, "input nested too deeply"), NULL;
    switch (json_typeof(j)) {
    case JSON_NULL: return JV_NONE_;
    case JSON_TRUE: return JV_TRUE;
    case JSON_FALSE: return JV_FALSE;
    case JSON_INTEGER: return jv_int(c, (int64_t)json_integer_value(j));
    case JSON_REAL: return jv_float(c, json_real_value(j));
    case JSON_STRING: return jv_str(c, json_string_value(j), json_string_length(j));
    case JSON_ARRAY: {
        size_t n = json_array_size(j);
        jv *l = jv_list(c, n);
        if (!l)
            return NULL;
        for (size_t i = 0; i < n; i++) {
            jv *x = jv_from_json(c, json_array_get(j, i), depth + 1);
            if (!x)
                return NULL;
            l->u.list.items[l->u.list.n++] = x;
        }
        return l;
    }
    case JSON_OBJECT: {
        jv *d = jv_dict(c, JV_DICT, json_object_size(j));
        if (!d)
            return NULL;
        const char *key;
        json_t *val;
        json_object_foreach((json_t *)j, key, val)
        {
            jv *k = jv_str(c, key, strlen(key));
            jv *x = k ? jv_from_json(c, val, depth + 1) : NULL;
            if (!x)
                return NULL;
            // jansson keys are unique: append without a lookup.
            d->u.dict.keys[d->u.dict.n] = k;
            d->u.dict.vals[d->u.dict.n++] = x;
        }
        return d;
    }
    }
    return JV_NONE_;
}

jv *jv_markup(jj_ctx *c, jv *s)
{
    if (s->safe)
        return s;
    jv *m = jv_new(c, JV_STR);
    if (m) {
        m->u.str = s->u.str;
        m->safe = true;
    }
    return m;
}

jv *jv_keep_safe(jj_ctx *c, const jv *src, jv *r)
{
    return r && src->kind == JV_STR && src->safe && r->kind == JV_STR ? jv_markup(c, r) : r;
}

jv *jj_escape(jj_ctx *c, const jv *v)
{
    if (v->kind == JV_STR && v->safe)
        return (jv *)v;
    jv *s = jv_stringify(c, v), *e = s ? jj_html_escape(c, s) : NULL;
    return e ? jv_markup(c, e) : NULL;
}

jv *jv_gen(jv *l)
{
    if (l)
        l->gen = true;
    return l;
}

/* ---- predicates ------------------------------------------------------------ */

bool jv_truthy(const jv *v)
{
    switch (v->kind) {
    case JV_UNDEF:
    case JV_NONE: return false;
    case JV_BOOL: return v->u.b;
    case JV_INT: return v->u.i != 0;
    case JV_FLOAT: return v->u.f != 0;
    case JV_STR: return v->u.str.len != 0;
    case JV_LIST: return v->gen || v->u.list.n != 0;
    case JV_DICT: return v->u.dict.n != 0;
    default: return true;
    }
}

bool jv_is_num(const jv *v)
{
    return v->kind == JV_BOOL || v->kind == JV_INT || v->kind == JV_FLOAT;
}

double jv_num(const jv *v)
{
    return v->kind == JV_FLOAT ? v->u.f : v->kind == JV_INT ? (double)v->u.i : v->kind == JV_BOOL ? v->u.b : 0;
}

const char *jv_type_name(const jv *v)
{
    switch (v->kind) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return v->safe ? "Markup" : "str";
    case JV_LIST: return v->gen ? "generator" : v->tuple ? "tuple" : "list";
    case JV_DICT: return "dict";
    case JV_NS: return "Namespace";
    case JV_MACRO: return "Macro";
    case JV_BUILTIN: return "function";
    case JV_METHOD: return "method";
    case JV_LOOP: return "LoopContext";
    default: return "object";
    }
}

bool jv_iterable(const jv *v)
{
    return v->kind == JV_UNDEF || v->kind == JV_STR || v->kind == JV_LIST || v->kind == JV_DICT;
}

jv *jv_iter_list(jj_ctx *c, const jv *v)
{
    switch (v->kind) {
    case JV_UNDEF: return jv_list(c, 0);
    case JV_LIST: {
        if (!v->gen)
            return (jv *)v;
        jv *l = jv_list(c, v->u.list.n), *g = (jv *)v;
        if (l) {
            if (v->u.list.n)
                memcpy(l->u.list.items, v->u.list.items, v->u.list.n * sizeof(jv *));
            l->u.list.n = v->u.list.n;
            g->u.list.n = 0; // used up
        }
        return l;
    }
    case JV_DICT: {
        jv *l = jv_list(c, v->u.dict.n);
        if (l) {
            if (v->u.dict.n)
                memcpy(l->u.list.items, v->u.dict.keys, v->u.dict.n * sizeof(jv *));
            l->u.list.n = v->u.dict.n;
        }
        return l;
    }
    case JV_STR: {
        size_t n = jj_utf8_count(v->u.str.s, v->u.str.len);
        jv *l = jv_list(c, n);
        if (!l)
            return NULL;
        for (size_t i = 0; i < v->u.str.len;) {
            size_t start = i;
            jj_utf8_next(v->u.str.s, v->u.str.len, &i);
            jv *ch = jv_str(c, v->u.str.s + start, i - start);
            if (!ch)
                return NULL;
            l->u.list.items[l->u.list.n++] = ch;
        }
        return l;
    }
    default: jj_fail(c, RP_ERR_INVALID, "'%s' object is not iterable", jv_type_name(v)); return NULL;
    }
}

int64_t jv_len(jj_ctx *c, const jv *v)
{
    switch (v->kind) {
    case JV_UNDEF: return 0;
    case JV_STR: return (int64_t)jj_utf8_count(v->u.str.s, v->u.str.len);
    case JV_LIST:
        if (!v->gen)
            return (int64_t)v->u.list.n;
        break;
    case JV_DICT: return (int64_t)v->u.dict.n;
    default: break;
    }
    jj_fail(c, RP_ERR_INVALID, "object of type '%s' has no len()", jv_type_name(v));
    return -1;
}

/* ---- str / repr ------------------------------------------------------------ */

void jj_fmt_float(double d, char *buf, size_t cap)
{
    if (isnan(d)) {
        snprintf(buf, cap, "nan");
        return;
    }
    if (isinf(d)) {
        snprintf(buf, cap, d < 0 ? "-inf" : "inf");
        return;
    }
    char tmp[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof(tmp), "%.*e", prec - 1, d);
        if (strtod(tmp, NULL) == d)
            break;
    }
    // tmp: [-]D[.DDD]e[+-]XX
    bool neg = tmp[0] == '-';
    char digits[24];
    int nd = 0;
    const char *p = tmp + neg;
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9' && nd < 20)
            digits[nd++] = *p;
    int exp10 = *p == 'e' ? atoi(p + 1) : 0;
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    char out[64];
    int o = 0;
    if (neg)
        out[o++] = '-';
    if (exp10 >= -5 + 1 && exp10 < 16) {
        if (exp10 >= 0) {
            for (int i = 0; i <= exp10; i++)
                out[o++] = i < nd ? digits[i] : '0';
            out[o++] = '.';
            if (nd > exp10 + 1)
                for (int i = exp10 + 1; i < nd; i++)
                    out[o++] = digits[i];
            else
                out[o++] = '0';
        } else {
            out[o++] = '0';
            out[o++] = '.';
            for (int i = 0; i < -exp10 - 1; i++)
                out[o++] = '0';
            for (int i = 0; i < nd; i++)
                out[o++] = digits[i];
        }
        out[o] = 0;
    } else {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            for (int i = 1; i < nd; i++)
                out[o++] = digits[i];
        }
        snprintf(out + o, sizeof(out) - (size_t)o, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    }
    snprintf(buf, cap, "%s", out);
}

static bool put(jj_ctx *c, jj_buf *b, const char *s)
{
    return jj_buf_put(c, b, s, strlen(s));
}

static bool put_str_repr(jj_ctx *c, jj_buf *b, const char *s, size_t len)
{
    bool has_sq = memchr(s, '\'', len) != NULL, has_dq = memchr(s, '"', len) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    if (!jj_buf_put(c, b, &q, 1))
        return false;
    for (size_t i = 0; i < len;) {
        size_t start = i;
        uint32_t cp = jj_utf8_next(s, len, &i);
        char esc[16];
        if (cp == (uint32_t)q || cp == '\\')
            snprintf(esc, sizeof(esc), "\\%c", (char)cp);
        else if (cp == '\n')
            snprintf(esc, sizeof(esc), "\\n");
        else if (cp == '\r')
            snprintf(esc, sizeof(esc), "\\r");
        else if (cp == '\t')
            snprintf(esc, sizeof(esc), "\\t");
        else if (cp < 0x20 || (cp >= 0x7F && cp < 0xA0) || (i - start == 1 && cp >= 0x80))
            snprintf(esc, sizeof(esc), "\\x%02x", cp);
        else if (cp == 0xAD || (cp >= 0x2028 && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069) ||
                 (cp >= 0x200B && cp <= 0x200F) || cp == 0xFEFF || (cp >= 0xD800 && cp <= 0xDFFF))
            snprintf(esc, sizeof(esc), "\\u%04x", cp);
        else {
            if (!jj_buf_put(c, b, s + start, i - start))
                return false;
            continue;
        }
        if (!put(c, b, esc))
            return false;
    }
    return jj_buf_put(c, b, &q, 1);
}

bool jv_repr(jj_ctx *c, jj_buf *b, const jv *v, int depth)
{
    if (depth > JJ_MAX_VALUE_DEPTH)
        return jj_fail(c, RP_ERR_LIMIT, "value nested too deeply"), false;
    switch (v->kind) {
    case JV_STR:
        if (!v->safe)
            return put_str_repr(c, b, v->u.str.s, v->u.str.len);
        return put(c, b, "Markup(") && put_str_repr(c, b, v->u.str.s, v->u.str.len) && put(c, b, ")");
    case JV_UNDEF: return put(c, b, "Undefined");
    case JV_LIST: {
        if (!put(c, b, v->tuple ? "(" : "["))
            return false;
        for (size_t i = 0; i < v->u.list.n; i++)
            if ((i && !put(c, b, ", ")) || !jv_repr(c, b, v->u.list.items[i], depth + 1))
                return false;
        if (v->tuple && v->u.list.n == 1 && !put(c, b, ","))
            return false;
        return put(c, b, v->tuple ? ")" : "]");
    }
    case JV_DICT:
    case JV_NS: {
        if (!put(c, b, v->kind == JV_NS ? "<Namespace {" : "{"))
            return false;
        for (size_t i = 0; i < v->u.dict.n; i++)
            if ((i && !put(c, b, ", ")) || !jv_repr(c, b, v->u.dict.keys[i], depth + 1) || !put(c, b, ": ") ||
                !jv_repr(c, b, v->u.dict.vals[i], depth + 1))
                return false;
        return put(c, b, v->kind == JV_NS ? "}>" : "}");
    }
    default: return jv_to_str(c, b, v);
    }
}

bool jv_to_str(jj_ctx *c, jj_buf *b, const jv *v)
{
    char tmp[64];
    switch (v->kind) {
    case JV_UNDEF: return true;
    case JV_NONE: return put(c, b, "None");
    case JV_BOOL: return put(c, b, v->u.b ? "True" : "False");
    case JV_INT: snprintf(tmp, sizeof(tmp), "%lld", (long long)v->u.i); return put(c, b, tmp);
    case JV_FLOAT: jj_fmt_float(v->u.f, tmp, sizeof(tmp)); return put(c, b, tmp);
    case JV_STR: return jj_buf_put(c, b, v->u.str.s, v->u.str.len);
    case JV_LIST:
    case JV_DICT:
    case JV_NS: return jv_repr(c, b, v, 0);
    case JV_MACRO: snprintf(tmp, sizeof(tmp), "<Macro '%.40s'>", v->name ? v->name : "caller"); return put(c, b, tmp);
    case JV_LOOP: return put(c, b, "<LoopContext>");
    default: snprintf(tmp, sizeof(tmp), "<built-in function %.40s>", v->name ? v->name : "?"); return put(c, b, tmp);
    }
}

jv *jv_stringify(jj_ctx *c, const jv *v)
{
    if (v->kind == JV_STR)
        return (jv *)v;
    jj_buf b = {0};
    jv *r = NULL;
    if (jv_to_str(c, &b, v))
        r = jv_str(c, b.s ? b.s : "", b.len);
    jj_buf_free(&b);
    return r;
}

/* ---- json ------------------------------------------------------------------ */

static bool json_put_string(jj_ctx *c, jj_buf *b, const char *s, size_t len, bool ascii)
{
    if (!put(c, b, "\""))
        return false;
    size_t run = 0; // start of the pending run of plain bytes
    for (size_t i = 0; i < len;) {
        size_t start = i;
        uint32_t cp = jj_utf8_next(s, len, &i);
        char esc[16] = {0};
        if (cp == '"')
            strcpy(esc, "\\\"");
        else if (cp == '\\')
            strcpy(esc, "\\\\");
        else if (cp == '\n')
            strcpy(esc, "\\n");
        else if (cp == '\r')
            strcpy(esc, "\\r");
        else if (cp == '\t')
            strcpy(esc, "\\t");
        else if (cp == '\b')
            strcpy(esc, "\\b");
        else if (cp == '\f')
            strcpy(esc, "\\f");
        else if (cp < 0x20 || (ascii && cp >= 0x7F && cp != 0x7F)) {
            if (cp >= 0x10000) {
                uint32_t v = cp - 0x10000;
                snprintf(esc, sizeof(esc), "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
            } else {
                snprintf(esc, sizeof(esc), "\\u%04x", cp);
            }
        } else {
            continue;
        }
        if (!jj_buf_put(c, b, s + run, start - run) || !put(c, b, esc))
            return false;
        run = i;
    }
    return jj_buf_put(c, b, s + run, len - run) && put(c, b, "\"");
}

static bool json_newline(jj_ctx *c, jj_buf *b, const char *indent, int level)
{
    if (!put(c, b, "\n"))
        return false;
    for (int i = 0; i < level; i++)
        if (!put(c, b, indent))
            return false;
    return true;
}

// Dict keys as json.dumps converts them: str as is, numbers/bools/None to text.
static bool json_key(jj_ctx *c, jj_buf *b, const jv *k, bool ascii)
{
    char tmp[64];
    switch (k->kind) {
    case JV_STR: return json_put_string(c, b, k->u.str.s, k->u.str.len, ascii);
    case JV_NONE: return put(c, b, "\"null\"");
    case JV_BOOL: return put(c, b, k->u.b ? "\"true\"" : "\"false\"");
    case JV_INT: snprintf(tmp, sizeof(tmp), "\"%lld\"", (long long)k->u.i); return put(c, b, tmp);
    case JV_FLOAT: {
        char f[40];
        jj_fmt_float(k->u.f, f, sizeof(f));
        snprintf(tmp, sizeof(tmp), "\"%s\"", f);
        return put(c, b, tmp);
    }
    default: return jj_fail(c, RP_ERR_INVALID, "keys must be str, int, float, bool or None, not %s", jv_type_name(k)), false;
    }
}

static int key_order(jj_ctx *c, const jv *a, const jv *b)
{
    int r = 0;
    if (!jv_compare(c, a, b, &r, 0))
        return 0;
    return r;
}

bool jv_to_json(jj_ctx *c, jj_buf *b, const jv *v, bool ascii, const char *indent, const char *item_sep,
                const char *key_sep, bool sort_keys, int level)
{
    if (level > JJ_MAX_VALUE_DEPTH)
        return jj_fail(c, RP_ERR_LIMIT, "value nested too deeply for tojson"), false;
    char tmp[64];
    switch (v->kind) {
    case JV_NONE: return put(c, b, "null");
    case JV_BOOL: return put(c, b, v->u.b ? "true" : "false");
    case JV_INT: snprintf(tmp, sizeof(tmp), "%lld", (long long)v->u.i); return put(c, b, tmp);
    case JV_FLOAT:
        if (isnan(v->u.f))
            return put(c, b, "NaN");
        if (isinf(v->u.f))
            return put(c, b, v->u.f < 0 ? "-Infinity" : "Infinity");
        jj_fmt_float(v->u.f, tmp, sizeof(tmp));
        return put(c, b, tmp);
    case JV_STR: return json_put_string(c, b, v->u.str.s, v->u.str.len, ascii);
    case JV_LIST: {
        if (v->gen)
            return jj_fail(c, RP_ERR_INVALID, "Object of type generator is not JSON serializable"), false;
        if (v->u.list.n == 0)
            return put(c, b, "[]");
        if (!put(c, b, "["))
            return false;
        for (size_t i = 0; i < v->u.list.n; i++) {
            if (i && !put(c, b, item_sep))
                return false;
            if (indent && !json_newline(c, b, indent, level + 1))
                return false;
            if (!jv_to_json(c, b, v->u.list.items[i], ascii, indent, item_sep, key_sep, sort_keys, level + 1))
                return false;
        }
        if (indent && !json_newline(c, b, indent, level))
            return false;
        return put(c, b, "]");
    }
    case JV_DICT: {
        size_t n = v->u.dict.n;
        if (n == 0)
            return put(c, b, "{}");
        size_t *order = jj_calloc(c, n * sizeof(size_t));
        if (!order)
            return false;
        for (size_t i = 0; i < n; i++)
            order[i] = i;
        if (sort_keys) // insertion sort: stable, and key lists are short
            for (size_t i = 1; i < n; i++)
                for (size_t j = i; j > 0 && key_order(c, v->u.dict.keys[order[j - 1]], v->u.dict.keys[order[j]]) > 0;
                     j--) {
                    size_t t = order[j];
                    order[j] = order[j - 1];
                    order[j - 1] = t;
                }
        if (c->st || !put(c, b, "{"))
            return false;
        for (size_t k = 0; k < n; k++) {
            size_t i = order[k];
            if (k && !put(c, b, item_sep))
                return false;
            if (indent && !json_newline(c, b, indent, level + 1))
                return false;
            if (!json_key(c, b, v->u.dict.keys[i], ascii) || !put(c, b, key_sep) ||
                !jv_to_json(c, b, v->u.dict.vals[i], ascii, indent, item_sep, key_sep, sort_keys, level + 1))
                return false;
        }
        if (indent && !json_newline(c, b, indent, level))
            return false;
        return put(c, b, "}");
    }
    default:
        return jj_fail(c, RP_ERR_INVALID, "Object of type %s is not JSON serializable", jv_type_name(v)), false;
    }
}

/* ---- equality and order ---------------------------------------------------- */

int jv_equal(jj_ctx *c, const jv *a, const jv *b, int depth)
{
    if (depth > JJ_MAX_VALUE_DEPTH)
        return jj_fail(c, RP_ERR_LIMIT, "value nested too deeply"), -1;
    if (a == b)
        return 1;
    if (jv_is_num(a) && jv_is_num(b)) {
        if (a->kind != JV_FLOAT && b->kind != JV_FLOAT) {
            int64_t x = a->kind == JV_BOOL ? a->u.b : a->u.i, y = b->kind == JV_BOOL ? b->u.b : b->u.i;
            return x == y;
        }
        return jv_num(a) == jv_num(b);
    }
    if (a->kind != b->kind)
        return 0;
    switch (a->kind) {
    case JV_UNDEF:
    case JV_NONE: return 1;
    case JV_STR: return a->u.str.len == b->u.str.len && memcmp(a->u.str.s, b->u.str.s, a->u.str.len) == 0;
    case JV_LIST:
        if (a->tuple != b->tuple || a->gen || b->gen || a->u.list.n != b->u.list.n)
            return 0;
        for (size_t i = 0; i < a->u.list.n; i++) {
            int e = jv_equal(c, a->u.list.items[i], b->u.list.items[i], depth + 1);
            if (e != 1)
                return e;
        }
        return 1;
    case JV_DICT:
        if (a->u.dict.n != b->u.dict.n)
            return 0;
        for (size_t i = 0; i < a->u.dict.n; i++) {
            const jv *other = NULL;
            for (size_t j = 0; j < b->u.dict.n && !other; j++) {
                int e = jv_equal(c, a->u.dict.keys[i], b->u.dict.keys[j], depth + 1);
                if (e < 0)
                    return -1;
                if (e)
                    other = b->u.dict.vals[j];
            }
            if (!other)
                return 0;
            int e = jv_equal(c, a->u.dict.vals[i], other, depth + 1);
            if (e != 1)
                return e;
        }
        return 1;
    case JV_METHOD:
        return a->name == b->name && a->u.method.self == b->u.method.self;
    default: return 0; // identity only
    }
}

bool jv_compare(jj_ctx *c, const jv *a, const jv *b, int *out, int depth)
{
    if (depth > JJ_MAX_VALUE_DEPTH)
        return jj_fail(c, RP_ERR_LIMIT, "value nested too deeply"), false;
    if (jv_is_num(a) && jv_is_num(b)) {
        if (a->kind != JV_FLOAT && b->kind != JV_FLOAT) {
            int64_t x = a->kind == JV_BOOL ? a->u.b : a->u.i, y = b->kind == JV_BOOL ? b->u.b : b->u.i;
            *out = x < y ? -1 : x > y;
        } else {
            double x = jv_num(a), y = jv_num(b);
            *out = x < y ? -1 : x > y;
        }
        return true;
    }
    if (a->kind == JV_STR && b->kind == JV_STR) {
        size_t n = a->u.str.len < b->u.str.len ? a->u.str.len : b->u.str.len;
        int r = memcmp(a->u.str.s, b->u.str.s, n);
        *out = r ? (r < 0 ? -1 : 1) : (a->u.str.len < b->u.str.len ? -1 : a->u.str.len > b->u.str.len);
        return true;
    }
    if (a->kind == JV_LIST && b->kind == JV_LIST && a->tuple == b->tuple && !a->gen && !b->gen) {
        for (size_t i = 0; i < a->u.list.n && i < b->u.list.n; i++) {
            int e = jv_equal(c, a->u.list.items[i], b->u.list.items[i], depth + 1);
            if (e < 0)
                return false;
            if (!e)
                return jv_compare(c, a->u.list.items[i], b->u.list.items[i], out, depth + 1);
        }
        *out = a->u.list.n < b->u.list.n ? -1 : a->u.list.n > b->u.list.n;
        return true;
    }
    jj_fail(c, RP_ERR_INVALID, "'<' not supported between instances of '%s' and '%s'", jv_type_name(a),
            jv_type_name(b));
    return false;
}
