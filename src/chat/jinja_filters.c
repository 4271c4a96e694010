/*
 * jinja_filters.c - the library a chat template can call: jinja2's filters and
 * tests, and the globals (range, namespace, dict, raise_exception, strftime_now).
 * String operations and methods are in jinja_str.c.
 *
 * Each behaves as jinja2 3.1 does in transformers' ImmutableSandboxedEnvironment:
 * filters that jinja2 implements as generators (map, select, unique, batch, items,
 * reverse, ...) return generator lists (jv.gen: true when empty, no len(), used up
 * once iterated); map, select, reject, selectattr and rejectattr yield nothing for
 * any false value (none, undefined, 0, ''), as jinja2's `if value:` does, without
 * looking at their arguments; mutating methods (list.append, dict.update) are
 * refused as the immutable sandbox refuses them; `tojson` is transformers'
 * json.dumps wrapper (a plain str). Anything unknown is an error naming it, never
 * a crash.
 *
 * Markup, with autoescape off (filters.py, markupsafe): safe/escape/forceescape make
 * one; string, trim, upper, lower, capitalize, center, indent, reverse, format and
 * last keep it (soft_str(s).method()); title, replace and join return a plain str.
 */
#include "jinja_int.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <utf8proc.h>

/* ---- argument binding ----------------------------------------------------------- */

// Binds positional and keyword arguments to parameter names; out[i] NULL when not given.
bool jj_bind(jj_ctx *c, const char *what, const char *const *params, int np, jv **args, int n_args,
                 const char **kw_names, jv **kw_vals, int n_kw, jv **out)
{
    if (n_args > np)
        return jj_fail(c, RP_ERR_INVALID, "%s takes at most %d argument(s), %d given", what, np, n_args), false;
    for (int i = 0; i < np; i++)
        out[i] = i < n_args ? args[i] : NULL;
    for (int k = 0; k < n_kw; k++) {
        int i = 0;
        while (i < np && strcmp(params[i], kw_names[k]))
            i++;
        if (i == np)
            return jj_fail(c, RP_ERR_INVALID, "%s got an unexpected keyword argument '%s'", what, kw_names[k]), false;
        if (out[i])
            return jj_fail(c, RP_ERR_INVALID, "%s got multiple values for argument '%s'", what, kw_names[k]), false;
        out[i] = kw_vals[k];
    }
    return true;
}


bool jj_given(const jv *v)
{
    return v && v->kind != JV_NONE && v->kind != JV_UNDEF;
}

bool jj_arg_bool(const jv *v, bool dflt)
{
    return v ? jv_truthy(v) : dflt;
}

bool jj_want_int(jj_ctx *c, const jv *v, const char *what, int64_t *out)
{
    if (v->kind == JV_INT || v->kind == JV_BOOL) {
        *out = v->kind == JV_BOOL ? v->u.b : v->u.i;
        return true;
    }
    return jj_fail(c, RP_ERR_INVALID, "%s: expected an integer, got %s", what, jv_type_name(v)), false;
}

bool jj_want_str(jj_ctx *c, const jv *v, const char *what)
{
    if (v->kind == JV_STR)
        return true;
    if (v->kind == JV_UNDEF && v->name)
        return jj_fail(c, RP_ERR_INVALID, "'%s' is undefined", v->name), false;
    return jj_fail(c, RP_ERR_INVALID, "%s: expected a string, got %s", what, jv_type_name(v)), false;
}

/* ---- sorting ------------------------------------------------------------------ */

typedef struct sort_ctx {
    jj_ctx *c;
    jv **keys; // parallel to the items
    bool reverse;
} sort_ctx;

static int sort_cmp(sort_ctx *s, size_t a, size_t b)
{
    int r = 0;
    if (!s->c->st)
        jv_compare(s->c, s->keys[a], s->keys[b], &r, 0);
    return s->reverse ? -r : r;
}

// Stable merge sort of idx[0..n) by keys.
static void merge_sort(sort_ctx *s, size_t *idx, size_t *tmp, size_t n)
{
    if (n < 2)
        return;
    size_t h = n / 2;
    merge_sort(s, idx, tmp, h);
    merge_sort(s, idx + h, tmp, n - h);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n)
        tmp[k++] = sort_cmp(s, idx[j], idx[i]) < 0 ? idx[j++] : idx[i++];
    while (i < h)
        tmp[k++] = idx[i++];
    while (j < n)
        tmp[k++] = idx[j++];
    memcpy(idx, tmp, n * sizeof(size_t));
}

static jv *lower_key(jj_ctx *c, jv *v, bool case_sensitive)
{
    return !case_sensitive && v->kind == JV_STR ? jj_str_case(c, v, JJ_CASE_LOWER) : v;
}

// jinja2's make_attrgetter: "a.b.0" looked up item-first on each part.
static jv *attr_path(jj_ctx *c, jv *item, const jv *attr)
{
    if (attr->kind == JV_INT)
        return jj_getitem(c, item, (jv *)attr);
    if (!jj_want_str(c, attr, "attribute"))
        return NULL;
    const char *s = attr->u.str.s;
    size_t len = attr->u.str.len;
    for (size_t i = 0; i <= len && item;) {
        size_t e = i;
        while (e < len && s[e] != '.')
            e++;
        bool digits = e > i;
        for (size_t k = i; k < e; k++)
            digits = digits && s[k] >= '0' && s[k] <= '9';
        jv *key = NULL;
        if (digits && e - i < 18) {
            key = jv_int(c, strtoll(s + i, NULL, 10));
        } else {
            key = jv_str(c, s + i, e - i);
        }
        if (!key)
            return NULL;
        item = jj_getitem(c, item, key);
        i = e + 1;
    }
    return item;
}

static jv *sorted_list(jj_ctx *c, jv *items, jv **keys, bool reverse)
{
    size_t n = items->u.list.n;
    size_t *idx = jj_calloc(c, (n + 1) * sizeof(size_t)), *tmp = jj_calloc(c, (n + 1) * sizeof(size_t));
    jv *out = jv_list(c, n);
    if (!idx || !tmp || !out)
        return NULL;
    for (size_t i = 0; i < n; i++)
        idx[i] = i;
    sort_ctx s = {c, keys, reverse};
    merge_sort(&s, idx, tmp, n);
    if (c->st)
        return NULL;
    for (size_t i = 0; i < n; i++)
        out->u.list.items[out->u.list.n++] = items->u.list.items[idx[i]];
    return out;
}

/* ---- tests -------------------------------------------------------------------- */

int jj_test(jj_ctx *c, const char *name, jv *v, jv **args, int n_args, const char **kw_names, jv **kw_vals, int n_kw)
{
    (void)kw_names;
    (void)kw_vals;
    if (n_kw)
        return jj_fail(c, RP_ERR_INVALID, "test '%s' takes no keyword arguments", name), -1;
    jv *arg = n_args > 0 ? args[0] : NULL;
    if (!strcmp(name, "defined"))
        return v->kind != JV_UNDEF;
    if (!strcmp(name, "undefined"))
        return v->kind == JV_UNDEF;
    if (!strcmp(name, "none"))
        return v->kind == JV_NONE;
    if (!strcmp(name, "string"))
        return v->kind == JV_STR;
    if (!strcmp(name, "mapping"))
        return v->kind == JV_DICT;
    if (!strcmp(name, "iterable"))
        return jv_iterable(v);
    if (!strcmp(name, "sequence"))
        return v->kind == JV_STR || (v->kind == JV_LIST && !v->gen) || v->kind == JV_DICT || v->kind == JV_UNDEF;
    if (!strcmp(name, "number"))
        return jv_is_num(v);
    if (!strcmp(name, "integer"))
        return v->kind == JV_INT;
    if (!strcmp(name, "float"))
        return v->kind == JV_FLOAT;
    if (!strcmp(name, "boolean"))
        return v->kind == JV_BOOL;
    if (!strcmp(name, "true"))
        return v->kind == JV_BOOL && v->u.b;
    if (!strcmp(name, "false"))
        return v->kind == JV_BOOL && !v->u.b;
    if (!strcmp(name, "callable"))
        return v->kind == JV_UNDEF || v->kind == JV_MACRO || v->kind == JV_BUILTIN || v->kind == JV_METHOD || v->kind == JV_LOOP;
    if (!strcmp(name, "escaped")) // hasattr(value, "__html__")
        return v->kind == JV_STR && v->safe;
    if (!strcmp(name, "lower") || !strcmp(name, "upper")) {
        jv *s = jv_stringify(c, v);
        if (!s)
            return -1;
        bool any = false, ok = true;
        for (size_t i = 0; i < s->u.str.len;) {
            utf8proc_int32_t cp = (utf8proc_int32_t)jj_utf8_next(s->u.str.s, s->u.str.len, &i);
            if (cp > 0x10FFFF)
                continue;
            bool up = utf8proc_isupper(cp), lo = utf8proc_islower(cp);
            any = any || up || lo;
            if (name[0] == 'l' ? up : lo)
                ok = false;
        }
        return any && ok;
    }
    if (!strcmp(name, "even") || !strcmp(name, "odd")) {
        int64_t i;
        if (v->kind == JV_FLOAT)
            return name[0] == 'e' ? fmod(v->u.f, 2) == 0 : fmod(v->u.f, 2) != 0;
        if (!jj_want_int(c, v, name, &i))
            return -1;
        return name[0] == 'e' ? i % 2 == 0 : i % 2 != 0;
    }
    if (!strcmp(name, "divisibleby")) {
        int64_t a, b;
        if (!arg || !jj_want_int(c, v, name, &a) || !jj_want_int(c, arg, name, &b))
            return arg ? -1 : (jj_fail(c, RP_ERR_INVALID, "divisibleby needs an argument"), -1);
        if (b == 0)
            return jj_fail(c, RP_ERR_INVALID, "integer division or modulo by zero"), -1;
        return b == -1 || a % b == 0;
    }
    if (!strcmp(name, "sameas")) {
        if (!arg)
            return jj_fail(c, RP_ERR_INVALID, "sameas needs an argument"), -1;
        if (v->kind != arg->kind)
            return 0;
        if (v->kind == JV_NONE || v->kind == JV_UNDEF)
            return 1;
        if (v->kind == JV_BOOL)
            return v->u.b == arg->u.b;
        return v == arg;
    }
    static const struct {
        const char *name;
        int op;
    } cmp[] = {{"eq", JO_EQ},         {"equalto", JO_EQ}, {"==", JO_EQ},          {"ne", JO_NE},  {"!=", JO_NE},
               {"lt", '<'},           {"lessthan", '<'},  {"<", '<'},             {"le", JO_LE},  {"<=", JO_LE},
               {"gt", '>'},           {"greaterthan", '>'}, {">", '>'},           {"ge", JO_GE},  {">=", JO_GE}};
    for (size_t k = 0; k < sizeof(cmp) / sizeof(cmp[0]); k++) {
        if (strcmp(name, cmp[k].name))
            continue;
        if (!arg)
            return jj_fail(c, RP_ERR_INVALID, "test '%s' needs an argument", name), -1;
        if (cmp[k].op == JO_EQ || cmp[k].op == JO_NE) {
            int e = jv_equal(c, v, arg, 0);
            return e < 0 ? -1 : cmp[k].op == JO_EQ ? e : !e;
        }
        int r;
        if (!jv_compare(c, v, arg, &r, 0))
            return -1;
        return cmp[k].op == '<' ? r < 0 : cmp[k].op == '>' ? r > 0 : cmp[k].op == JO_LE ? r <= 0 : r >= 0;
    }
    if (!strcmp(name, "in")) {
        if (!arg)
            return jj_fail(c, RP_ERR_INVALID, "test 'in' needs an argument"), -1;
        if (arg->kind == JV_STR) {
            if (!jj_want_str(c, v, "in"))
                return -1;
            return memmem(arg->u.str.s, arg->u.str.len, v->u.str.s, v->u.str.len) != NULL || v->u.str.len == 0;
        }
        if (arg->kind == JV_DICT)
            return jv_dict_get(c, arg, v) != NULL;
        jv *items = jv_iter_list(c, arg);
        if (!items)
            return -1;
        for (size_t i = 0; i < items->u.list.n; i++) {
            int e = jv_equal(c, items->u.list.items[i], v, 0);
            if (e)
                return e;
        }
        return 0;
    }
    if (!strcmp(name, "filter") || !strcmp(name, "test")) {
        static const char *const filters[] = {"abs", "attr", "batch", "capitalize", "center", "count", "d",
                                              "default", "dictsort", "e", "escape", "first", "float",
                                              "forceescape", "format", "indent", "int", "items", "join", "last",
                                              "length", "list", "lower", "map", "max", "min", "reject",
                                              "rejectattr", "replace", "reverse", "round", "safe", "select",
                                              "selectattr", "slice", "sort", "string", "sum", "title", "tojson",
                                              "trim", "unique", "upper", "wordcount", NULL};
        static const char *const tests[] = {"defined", "undefined", "none", "string", "mapping", "iterable",
                                            "sequence", "number", "integer", "float", "boolean", "true", "false",
                                            "callable", "escaped", "lower", "upper", "even", "odd", "divisibleby",
                                            "sameas", "eq", "equalto", "ne", "lt", "lessthan", "le", "gt",
                                            "greaterthan", "ge", "in", "filter", "test", NULL};
        if (v->kind != JV_STR)
            return 0;
        const char *const *list = name[0] == 'f' ? filters : tests;
        for (int k = 0; list[k]; k++)
            if (!strcmp(list[k], v->u.str.s))
                return 1;
        return 0;
    }
    jj_fail(c, RP_ERR_INVALID, "no test named '%s'", name);
    return -1;
}

/* ---- filters ------------------------------------------------------------------ */

static jv *f_tojson(jj_ctx *c, jv *v, jv **args, int n_args, const char **kw_names, jv **kw_vals, int n_kw)
{
    BIND("tojson", "ensure_ascii", "indent", "separators", "sort_keys");
    char indent_buf[256];
    const char *indent = NULL, *item_sep = ", ", *key_sep = ": ";
    if (jj_given(a[1])) {
        if (a[1]->kind == JV_STR) {
            snprintf(indent_buf, sizeof(indent_buf), "%s", a[1]->u.str.s);
        } else {
            int64_t n;
            if (!jj_want_int(c, a[1], "tojson indent", &n))
                return NULL;
            n = n < 0 ? 0 : n > 200 ? 200 : n;
            memset(indent_buf, ' ', (size_t)n);
            indent_buf[n] = 0;
        }
        indent = indent_buf;
        item_sep = ",";
    }
    if (jj_given(a[2])) {
        jv *s = a[2];
        if (s->kind != JV_LIST || s->u.list.n != 2 || s->u.list.items[0]->kind != JV_STR ||
            s->u.list.items[1]->kind != JV_STR)
            return jj_fail(c, RP_ERR_INVALID, "tojson separators must be two strings"), NULL;
        item_sep = s->u.list.items[0]->u.str.s;
        key_sep = s->u.list.items[1]->u.str.s;
    }
    jj_buf b = {0};
    jv *r = NULL;
    if (jv_to_json(c, &b, v, jj_arg_bool(a[0], false), indent, item_sep, key_sep, jj_arg_bool(a[3], false), 0))
        r = jv_str(c, b.s ? b.s : "", b.len);
    jj_buf_free(&b);
    return r;
}

static jv *f_indent(jj_ctx *c, jv *v, jv **args, int n_args, const char **kw_names, jv **kw_vals, int n_kw)
{
    BIND("indent", "width", "first", "blank");
    // jinja2's do_indent does `s += "\n"` and s.splitlines(): only a str works (a Markup stays one; its
    // indention becomes Markup too, so nothing is escaped)
    if (v->kind != JV_STR) {
        if (v->kind == JV_UNDEF && v->name)
            return jj_fail(c, RP_ERR_INVALID, "'%s' is undefined", v->name), NULL;
        return jj_fail(c, RP_ERR_INVALID, "indent: expected a string, got %s", jv_type_name(v)), NULL;
    }
    jv *s = v;
    char ind_buf[256];
    const char *ind = "    ";
    if (a[0]) {
        if (a[0]->kind == JV_STR) {
            snprintf(ind_buf, sizeof(ind_buf), "%s", a[0]->u.str.s);
        } else {
            int64_t w;
            if (!jj_want_int(c, a[0], "indent width", &w))
                return NULL;
            w = w < 0 ? 0 : w > 200 ? 200 : w;
            memset(ind_buf, ' ', (size_t)w);
            ind_buf[w] = 0;
        }
        ind = ind_buf;
    }
    bool first = jj_arg_bool(a[1], false), blank = jj_arg_bool(a[2], false);
    jv *withnl = jv_list(c, 0);
    char *tmp = jj_calloc(c, s->u.str.len + 2);
    if (!withnl || !tmp)
        return NULL;
    memcpy(tmp, s->u.str.s, s->u.str.len);
    tmp[s->u.str.len] = '\n';
    jv *str2 = jv_str_owned(c, tmp, s->u.str.len + 1);
    jv *lines = str2 ? jj_str_splitlines(c, str2) : NULL;
    if (!lines)
        return NULL;
    jj_sbuf o = {c, {0}};
    size_t il = strlen(ind);
    if (first)
        jj_sput(&o, ind, il);
    for (size_t i = 0; i < lines->u.list.n; i++) {
        jv *line = lines->u.list.items[i];
        if (i) {
            jj_sput(&o, "\n", 1);
            if (blank || line->u.str.len)
                jj_sput(&o, ind, il);
        }
        jj_sput(&o, line->u.str.s, line->u.str.len);
    }
    return jv_keep_safe(c, s, jj_sbuf_done(&o));
}

static jv *f_int(jj_ctx *c, jv *v, jv *dflt, jv *base_v)
{
    int64_t base = 10;
    if (base_v && !jj_want_int(c, base_v, "int base", &base))
        return NULL;
    dflt = dflt ? dflt : jv_int(c, 0);
    switch (v->kind) {
    case JV_UNDEF: return jj_want_str(c, v, "int"), NULL; // int(Undefined) raises, it is no TypeError
    case JV_INT: return v;
    case JV_BOOL: return jv_int(c, v->u.b);
    case JV_FLOAT:
        if (!isfinite(v->u.f) || fabs(v->u.f) >= 9.2e18)
            return isnan(v->u.f) ? dflt : (jj_fail(c, RP_ERR_INVALID, "cannot convert float to integer"), NULL);
        return jv_int(c, (int64_t)v->u.f);
    case JV_STR: {
        char buf[128];
        size_t n = 0;
        jv *t = jj_str_strip(c, v, NULL, true, true);
        if (!t)
            return NULL;
        for (size_t i = 0; i < t->u.str.len && n < sizeof(buf) - 1; i++)
            if (t->u.str.s[i] != '_' || (i > 0 && i + 1 < t->u.str.len))
                buf[n++] = t->u.str.s[i];
        buf[n] = 0;
        if (n == 0 || t->u.str.len >= sizeof(buf) - 1)
            return dflt;
        char *end;
        errno = 0;
        long long r = strtoll(buf, &end, base >= 2 && base <= 36 ? (int)base : 10);
        if (!*end && !errno)
            return jv_int(c, r);
        double d = strtod(buf, &end);
        if (*end || !isfinite(d) || fabs(d) >= 9.2e18 || strpbrk(buf, "xXpP"))
            return dflt;
        return jv_int(c, (int64_t)d);
    }
    default: return dflt;
    }
}

static jv *f_float(jj_ctx *c, jv *v, jv *dflt)
{
    dflt = dflt ? dflt : jv_float(c, 0.0);
    switch (v->kind) {
    case JV_UNDEF: return jj_want_str(c, v, "float"), NULL; // float(Undefined) raises
    case JV_FLOAT: return v;
    case JV_INT: return jv_float(c, (double)v->u.i);
    case JV_BOOL: return jv_float(c, v->u.b);
    case JV_STR: {
        jv *t = jj_str_strip(c, v, NULL, true, true);
        if (!t || t->u.str.len == 0 || t->u.str.len > 100 || strpbrk(t->u.str.s, "xXpP"))
            return t ? dflt : NULL;
        char *end;
        double d = strtod(t->u.str.s, &end);
        return *end ? dflt : jv_float(c, d);
    }
    default: return dflt;
    }
}

static bool filter_items_of(jj_ctx *c, jv *v, jv **out)
{
    *out = jv_iter_list(c, v);
    return *out != NULL;
}

// select/reject/selectattr/rejectattr.
static jv *f_select(jj_ctx *c, jv *v, jv **args, int n_args, bool attr, bool keep)
{
    if (!jv_truthy(v)) // select_or_reject: `if value:`
        return jv_gen(jv_list(c, 0));
    jv *items;
    if (!filter_items_of(c, v, &items))
        return NULL;
    jv *attr_name = NULL;
    if (attr) {
        if (n_args < 1)
            return jj_fail(c, RP_ERR_INVALID, "selectattr/rejectattr need an attribute"), NULL;
        attr_name = args[0];
        args++;
        n_args--;
    }
    const char *test = NULL;
    if (n_args > 0) {
        if (!jj_want_str(c, args[0], "test name"))
            return NULL;
        test = args[0]->u.str.s;
        args++;
        n_args--;
    }
    jv *out = jv_list(c, 0);
    if (!out)
        return NULL;
    for (size_t i = 0; i < items->u.list.n; i++) {
        jv *item = items->u.list.items[i], *x = attr ? attr_path(c, item, attr_name) : item;
        if (!x)
            return NULL;
        int r = test ? jj_test(c, test, x, args, n_args, NULL, NULL, 0) : jv_truthy(x);
        if (r < 0)
            return NULL;
        if ((r != 0) == keep && !jv_list_push(c, out, item))
            return NULL;
    }
    return jv_gen(out);
}

static jv *f_map(jj_ctx *c, jv *v, jv **args, int n_args, const char **kw_names, jv **kw_vals, int n_kw)
{
    if (!jv_truthy(v)) // sync_do_map: `if value:`
        return jv_gen(jv_list(c, 0));
    jv *items;
    if (!filter_items_of(c, v, &items))
        return NULL;
    jv *out = jv_gen(jv_list(c, items->u.list.n));
    if (!out)
        return NULL;
    if (n_args == 0) {
        jv *attr = NULL, *dflt = NULL;
        for (int k = 0; k < n_kw; k++) {
            if (!strcmp(kw_names[k], "attribute"))
                attr = kw_vals[k];
            else if (!strcmp(kw_names[k], "default"))
                dflt = kw_vals[k];
            else
                return jj_fail(c, RP_ERR_INVALID, "map got an unexpected keyword argument '%s'", kw_names[k]), NULL;
        }
        if (!attr)
            return jj_fail(c, RP_ERR_INVALID, "map needs a filter name or attribute="), NULL;
        for (size_t i = 0; i < items->u.list.n; i++) {
            jv *x = attr_path(c, items->u.list.items[i], attr);
            if (!x)
                return NULL;
            if (x->kind == JV_UNDEF && dflt)
                x = dflt;
            out->u.list.items[out->u.list.n++] = x;
        }
        return out;
    }
    if (!jj_want_str(c, args[0], "map filter name"))
        return NULL;
    for (size_t i = 0; i < items->u.list.n; i++) {
        jv *x = jj_filter(c, args[0]->u.str.s, items->u.list.items[i], args + 1, n_args - 1, kw_names, kw_vals, n_kw);
        if (!x)
            return NULL;
        out->u.list.items[out->u.list.n++] = x;
    }
    return out;
}

static jv *f_sort(jj_ctx *c, jv *v, jv **args, int n_args, const char **kw_names, jv **kw_vals, int n_kw)
{
    BIND("sort", "reverse", "case_sensitive", "attribute");
    jv *items;
    if (!filter_items_of(c, v, &items))
        return NULL;
    jv **keys = jj_calloc(c, (items->u.list.n + 1) * sizeof(jv *));
    if (!keys)
        return NULL;
    for (size_t i = 0; i < items->u.list.n; i++) {
        jv *k = jj_given(a[2]) ? attr_path(c, items->u.list.items[i], a[2]) : items->u.list.items[i];
        if (!k || !(keys[i] = lower_key(c, k, jj_arg_bool(a[1], false))))
            return NULL;
    }
    return sorted_list(c, items, keys, jj_arg_bool(a[0], false));
}

static jv *f_dictsort(jj_ctx *c, jv *v, jv **args, int n_args, const char **kw_names, jv **kw_vals, int n_kw)
{
    BIND("dictsort", "case_sensitive", "by", "reverse");
    if (v->kind != JV_DICT)
        return jj_fail(c, RP_ERR_INVALID, "dictsort needs a mapping"), NULL;
    bool by_value = false;
    if (jj_given(a[1])) {
        if (!jj_want_str(c, a[1], "dictsort by"))
            return NULL;
        if (!strcmp(a[1]->u.str.s, "value"))
            by_value = true;
        else if (strcmp(a[1]->u.str.s, "key"))
            return jj_fail(c, RP_ERR_INVALID, "You can only sort by either \"key\" or \"value\""), NULL;
    }
    size_t n = v->u.dict.n;
    jv *items = jv_list(c, n);
    jv **keys = jj_calloc(c, (n + 1) * sizeof(jv *));
    if (!items || !keys)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        jv *pair = jv_list(c, 2);
        if (!pair)
            return NULL;
        pair->tuple = true;
        pair->u.list.items[0] = v->u.dict.keys[i];
        pair->u.list.items[1] = v->u.dict.vals[i];
        pair->u.list.n = 2;
        items->u.list.items[items->u.list.n++] = pair;
        if (!(keys[i] = lower_key(c, by_value ? v->u.dict.vals[i] : v->u.dict.keys[i], jj_arg_bool(a[0], false))))
            return NULL;
    }
    return sorted_list(c, items, keys, jj_arg_bool(a[2], false));
}

static jv *f_unique(jj_ctx *c, jv *v, jv **args, int n_args, const char **kw_names, jv **kw_vals, int n_kw)
{
    BIND("unique", "case_sensitive", "attribute");
    jv *items;
    if (!filter_items_of(c, v, &items))
        return NULL;
    jv *out = jv_list(c, 0), *seen = jv_list(c, 0);
    if (!out || !seen)
        return NULL;
    for (size_t i = 0; i < items->u.list.n; i++) {
        jv *k = jj_given(a[1]) ? attr_path(c, items->u.list.items[i], a[1]) : items->u.list.items[i];
        if (!k || !(k = lower_key(c, k, jj_arg_bool(a[0], false))))
            return NULL;
        bool dup = false;
        for (size_t j = 0; j < seen->u.list.n && !dup; j++) {
            int e = jv_equal(c, seen->u.list.items[j], k, 0);
            if (e < 0)
                return NULL;
            dup = e;
        }
        if (!dup && (!jv_list_push(c, seen, k) || !jv_list_push(c, out, items->u.list.items[i])))
            return NULL;
    }
    return jv_gen(out);
}

static jv *f_minmax(jj_ctx *c, jv *v, jv **args, int n_args, const char **kw_names, jv **kw_vals, int n_kw, bool max)
{
    BIND(max ? "max" : "min", "case_sensitive", "attribute");
    jv *items;
    if (!filter_items_of(c, v, &items))
        return NULL;
    jv *best = NULL, *best_key = NULL;
    for (size_t i = 0; i < items->u.list.n; i++) {
        jv *k = jj_given(a[1]) ? attr_path(c, items->u.list.items[i], a[1]) : items->u.list.items[i];
        if (!k || !(k = lower_key(c, k, jj_arg_bool(a[0], false))))
            return NULL;
        int r = 0;
        if (best_key && !jv_compare(c, k, best_key, &r, 0))
            return NULL;
        if (!best_key || (max ? r > 0 : r < 0)) {
            best = items->u.list.items[i];
            best_key = k;
        }
    }
    return best ? best : jv_undef(c, "no items");
}

static jv *f_sum(jj_ctx *c, jv *v, jv **args, int n_args, const char **kw_names, jv **kw_vals, int n_kw)
{
    BIND("sum", "attribute", "start");
    jv *items;
    if (!filter_items_of(c, v, &items))
        return NULL;
    jv *acc = a[1] ? a[1] : jv_int(c, 0);
    for (size_t i = 0; i < items->u.list.n && acc; i++) {
        jv *x = jj_given(a[0]) ? attr_path(c, items->u.list.items[i], a[0]) : items->u.list.items[i];
        if (!x)
            return NULL;
        if (!jv_is_num(acc) || !jv_is_num(x))
            return jj_fail(c, RP_ERR_INVALID, "sum needs numbers"), NULL;
        if (acc->kind != JV_FLOAT && x->kind != JV_FLOAT) {
            int64_t r;
            int64_t p = acc->kind == JV_BOOL ? acc->u.b : acc->u.i, q = x->kind == JV_BOOL ? x->u.b : x->u.i;
            if (__builtin_add_overflow(p, q, &r))
                return jj_fail(c, RP_ERR_INVALID, "integer overflow in sum"), NULL;
            acc = jv_int(c, r);
        } else {
            acc = jv_float(c, jv_num(acc) + jv_num(x));
        }
    }
    return acc;
}

// jinja2's do_batch: lists of linecount items, the last filled up with fill_with when given.
static jv *f_batch(jj_ctx *c, jv *v, jv **args, int n_args, const char **kw_names, jv **kw_vals, int n_kw)
{
    BIND("batch", "linecount", "fill_with");
    int64_t count;
    if (!a[0])
        return jj_fail(c, RP_ERR_INVALID, "batch needs a line count"), NULL;
    jv *items;
    if (!jj_want_int(c, a[0], "batch linecount", &count) || !filter_items_of(c, v, &items))
        return NULL;
    jv *out = jv_gen(jv_list(c, 0)), *tmp = jv_list(c, 0);
    if (!out || !tmp)
        return NULL;
    for (size_t i = 0; i < items->u.list.n; i++) {
        if ((int64_t)tmp->u.list.n == count) {
            if (!jv_list_push(c, out, tmp) || !(tmp = jv_list(c, 0)))
                return NULL;
        }
        if (!jv_list_push(c, tmp, items->u.list.items[i]))
            return NULL;
    }
    if (tmp->u.list.n) {
        if (a[1] && a[1]->kind != JV_NONE)
            while ((int64_t)tmp->u.list.n < count)
                if (!jv_list_push(c, tmp, a[1]))
                    return NULL;
        if (!jv_list_push(c, out, tmp))
            return NULL;
    }
    return out;
}

// jinja2's sync_do_slice: `slices` lists of near-equal length, the first ones one longer; the shorter ones get
// fill_with appended when given.
static jv *f_slice(jj_ctx *c, jv *v, jv **args, int n_args, const char **kw_names, jv **kw_vals, int n_kw)
{
    BIND("slice", "slices", "fill_with");
    int64_t slices;
    if (!a[0])
        return jj_fail(c, RP_ERR_INVALID, "slice needs a count"), NULL;
    jv *items;
    if (!jj_want_int(c, a[0], "slice count", &slices) || !filter_items_of(c, v, &items))
        return NULL;
    if (slices == 0)
        return jj_fail(c, RP_ERR_INVALID, "integer division or modulo by zero"), NULL;
    if (slices > JJ_MAX_RANGE)
        return jj_fail(c, RP_ERR_LIMIT, "slice count over %d", JJ_MAX_RANGE), NULL;
    jv *out = jv_gen(jv_list(c, slices > 0 ? (size_t)slices : 0));
    if (!out)
        return NULL;
    int64_t length = (int64_t)items->u.list.n, per = length / slices, extra = length % slices, offset = 0;
    if ((length % slices != 0) && ((length < 0) != (slices < 0))) { // Python's floor division and modulo
        per--;
        extra += slices;
    }
    for (int64_t k = 0; k < slices; k++) {
        int64_t start = offset + k * per;
        if (k < extra)
            offset++;
        int64_t end = offset + (k + 1) * per;
        jv *part = jv_list(c, 0);
        if (!part)
            return NULL;
        for (int64_t i = start < 0 ? 0 : start; i < end && i < length; i++)
            if (!jv_list_push(c, part, items->u.list.items[i]))
                return NULL;
        if (a[1] && a[1]->kind != JV_NONE && k >= extra && !jv_list_push(c, part, a[1]))
            return NULL;
        out->u.list.items[out->u.list.n++] = part;
    }
    return out;
}

// jinja2's do_wordcount: len(re.findall(r"\w+", soft_str(s))); \w is a letter, a digit or '_'.
static jv *f_wordcount(jj_ctx *c, jv *v)
{
    jv *s = jv_stringify(c, v);
    if (!s)
        return NULL;
    int64_t n = 0;
    bool in_word = false;
    for (size_t i = 0; i < s->u.str.len;) {
        uint32_t cp = jj_utf8_next(s->u.str.s, s->u.str.len, &i);
        utf8proc_category_t cat = cp <= 0x10FFFF ? utf8proc_category((utf8proc_int32_t)cp) : UTF8PROC_CATEGORY_CN;
        bool w = cp == '_' || (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
                 (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO);
        n += w && !in_word;
        in_word = w;
    }
    return jv_int(c, n);
}

static jv *f_round(jj_ctx *c, jv *v, jv **args, int n_args, const char **kw_names, jv **kw_vals, int n_kw)
{
    BIND("round", "precision", "method");
    int64_t prec = 0;
    if (a[0] && !jj_want_int(c, a[0], "round precision", &prec))
        return NULL;
    const char *method = "common";
    if (a[1]) {
        if (!jj_want_str(c, a[1], "round method"))
            return NULL;
        method = a[1]->u.str.s;
    }
    if (!jv_is_num(v))
        return jj_fail(c, RP_ERR_INVALID, "round needs a number"), NULL;
    if (prec < -300 || prec > 300)
        prec = prec < 0 ? -300 : 300;
    double x = jv_num(v), m = pow(10, (double)prec), r;
    if (!strcmp(method, "common")) {
        if (v->kind != JV_FLOAT && !a[0])
            return jv_int(c, v->kind == JV_BOOL ? v->u.b : v->u.i);
        char buf[512];
        if (prec >= 0) {
            snprintf(buf, sizeof(buf), "%.*f", (int)prec, x);
            r = strtod(buf, NULL);
        } else {
            r = nearbyint(x * m) / m;
        }
    } else if (!strcmp(method, "ceil")) {
        r = ceil(x * m) / m;
    } else if (!strcmp(method, "floor")) {
        r = floor(x * m) / m;
    } else {
        return jj_fail(c, RP_ERR_INVALID, "method must be common, ceil or floor"), NULL;
    }
    if (v->kind != JV_FLOAT && !strcmp(method, "common"))
        return jv_int(c, (int64_t)r);
    return jv_float(c, r);
}

jv *jj_filter(jj_ctx *c, const char *name, jv *v, jv **args, int n_args, const char **kw_names, jv **kw_vals, int n_kw)
{
    if (!strcmp(name, "tojson"))
        return f_tojson(c, v, args, n_args, kw_names, kw_vals, n_kw);
    if (!strcmp(name, "safe")) { // Markup(value): str(value), marked safe
        jv *s = jv_stringify(c, v);
        return s ? jv_markup(c, s) : NULL;
    }
    if (!strcmp(name, "string")) // soft_str: a str (Markup or not) as it is, anything else str()
        return jv_stringify(c, v);
    if (!strcmp(name, "trim")) {
        BIND("trim", "chars");
        jv *s = jv_stringify(c, v);
        if (!s || (jj_given(a[0]) && !jj_want_str(c, a[0], "trim chars")))
            return NULL;
        return jv_keep_safe(c, s, jj_str_strip(c, s, jj_given(a[0]) ? a[0] : NULL, true, true));
    }
    if (!strcmp(name, "length") || !strcmp(name, "count")) {
        int64_t n = jv_len(c, v);
        return n < 0 ? NULL : jv_int(c, n);
    }
    if (!strcmp(name, "upper") || !strcmp(name, "lower") || !strcmp(name, "capitalize") || !strcmp(name, "title")) {
        jv *s = jv_stringify(c, v);
        int mode = name[0] == 'u' ? JJ_CASE_UPPER : name[0] == 'l' ? JJ_CASE_LOWER : name[0] == 'c' ? JJ_CASE_CAPITALIZE :
                                                                                                 JJ_CASE_TITLE_FILTER;
        jv *r = s ? jj_str_case(c, s, mode) : NULL;
        return mode == JJ_CASE_TITLE_FILTER ? r : jv_keep_safe(c, s, r); // do_title joins with "": a plain str
    }
    if (!strcmp(name, "default") || !strcmp(name, "d")) {
        BIND("default", "default_value", "boolean");
        if (v->kind == JV_UNDEF || (jj_arg_bool(a[1], false) && !jv_truthy(v)))
            return a[0] ? a[0] : jv_str(c, "", 0);
        return v;
    }
    if (!strcmp(name, "items")) {
        if (v->kind == JV_UNDEF)
            return jv_gen(jv_list(c, 0));
        if (v->kind != JV_DICT)
            return jj_fail(c, RP_ERR_INVALID, "Can only get item pairs from a mapping."), NULL;
        jv *l = jv_list(c, v->u.dict.n);
        for (size_t i = 0; l && i < v->u.dict.n; i++) {
            jv *pair = jv_list(c, 2);
            if (!pair)
                return NULL;
            pair->tuple = true;
            pair->u.list.items[0] = v->u.dict.keys[i];
            pair->u.list.items[1] = v->u.dict.vals[i];
            pair->u.list.n = 2;
            l->u.list.items[l->u.list.n++] = pair;
        }
        return jv_gen(l);
    }
    if (!strcmp(name, "list")) {
        jv *items = jv_iter_list(c, v);
        if (!items || items != v)
            return items;
        jv *l = jv_list(c, v->u.list.n);
        if (l) {
            if (v->u.list.n)
                memcpy(l->u.list.items, v->u.list.items, v->u.list.n * sizeof(jv *));
            l->u.list.n = v->u.list.n;
        }
        return l;
    }
    if (!strcmp(name, "join")) {
        BIND("join", "d", "attribute");
        jv *items = jv_iter_list(c, v);
        if (!items || (a[0] && !jj_want_str(c, a[0], "join separator")))
            return NULL;
        jj_sbuf o = {c, {0}};
        for (size_t i = 0; i < items->u.list.n; i++) {
            jv *x = jj_given(a[1]) ? attr_path(c, items->u.list.items[i], a[1]) : items->u.list.items[i];
            if (!x || (i && a[0] && !jj_sput(&o, a[0]->u.str.s, a[0]->u.str.len)) || !jv_to_str(c, &o.b, x)) {
                jj_buf_free(&o.b);
                return NULL;
            }
        }
        return jj_sbuf_done(&o);
    }
    if (!strcmp(name, "first") || !strcmp(name, "last")) {
        bool first = name[0] == 'f';
        if (v->kind == JV_LIST && v->gen) {
            // next(iter(gen)) takes one item; reversed(gen) is a TypeError
            if (!first)
                return jj_fail(c, RP_ERR_INVALID, "'generator' object is not reversible"), NULL;
            if (!v->u.list.n)
                return jv_undef(c, "No first item, sequence was empty.");
            v->u.list.n--;
            v->u.list.cap--;
            return *v->u.list.items++;
        }
        jv *items = jv_iter_list(c, v);
        if (!items)
            return NULL;
        if (!items->u.list.n)
            return jv_undef(c, first ? "No first item, sequence was empty." : "No last item, sequence was empty.");
        // next(iter(markup)) is a plain str; reversed() goes through Markup.__getitem__, so last keeps it
        return first ? items->u.list.items[0] : jv_keep_safe(c, v, items->u.list.items[items->u.list.n - 1]);
    }
    if (!strcmp(name, "replace")) {
        BIND("replace", "old", "new", "count");
        jv *s = jv_stringify(c, v);
        int64_t count = -1;
        if (!s || !a[0] || !a[1])
            return s ? (jj_fail(c, RP_ERR_INVALID, "replace needs old and new"), NULL) : NULL;
        jv *o = jv_stringify(c, a[0]), *nw = jv_stringify(c, a[1]);
        if (!o || !nw || (jj_given(a[2]) && !jj_want_int(c, a[2], "replace count", &count)))
            return NULL;
        return jj_str_replace(c, s, o, nw, count);
    }
    if (!strcmp(name, "map"))
        return f_map(c, v, args, n_args, kw_names, kw_vals, n_kw);
    if (!strcmp(name, "select") || !strcmp(name, "reject") || !strcmp(name, "selectattr") ||
        !strcmp(name, "rejectattr")) {
        if (n_kw && jv_truthy(v))
            return jj_fail(c, RP_ERR_INVALID, "%s takes no keyword arguments", name), NULL;
        return f_select(c, v, args, n_args, strstr(name, "attr") != NULL, name[0] == 's');
    }
    if (!strcmp(name, "sort"))
        return f_sort(c, v, args, n_args, kw_names, kw_vals, n_kw);
    if (!strcmp(name, "dictsort"))
        return f_dictsort(c, v, args, n_args, kw_names, kw_vals, n_kw);
    if (!strcmp(name, "unique"))
        return f_unique(c, v, args, n_args, kw_names, kw_vals, n_kw);
    if (!strcmp(name, "min") || !strcmp(name, "max"))
        return f_minmax(c, v, args, n_args, kw_names, kw_vals, n_kw, name[1] == 'a');
    if (!strcmp(name, "sum"))
        return f_sum(c, v, args, n_args, kw_names, kw_vals, n_kw);
    if (!strcmp(name, "round"))
        return f_round(c, v, args, n_args, kw_names, kw_vals, n_kw);
    if (!strcmp(name, "int")) {
        BIND("int", "default", "base");
        return f_int(c, v, a[0], a[1]);
    }
    if (!strcmp(name, "float")) {
        BIND("float", "default");
        return f_float(c, v, a[0]);
    }
    if (!strcmp(name, "abs")) {
        if (v->kind == JV_FLOAT)
            return jv_float(c, fabs(v->u.f));
        if (v->kind == JV_INT || v->kind == JV_BOOL) {
            int64_t i = v->kind == JV_BOOL ? v->u.b : v->u.i;
            if (i == INT64_MIN)
                return jj_fail(c, RP_ERR_INVALID, "integer overflow"), NULL;
            return jv_int(c, i < 0 ? -i : i);
        }
        return jj_fail(c, RP_ERR_INVALID, "bad operand type for abs(): '%s'", jv_type_name(v)), NULL;
    }
    if (!strcmp(name, "indent"))
        return f_indent(c, v, args, n_args, kw_names, kw_vals, n_kw);
    if (!strcmp(name, "escape") || !strcmp(name, "e"))
        return jj_escape(c, v);
    if (!strcmp(name, "forceescape")) { // escape(str(value)), even of a Markup
        jv *s = jv_stringify(c, v), *e = s ? jj_html_escape(c, s) : NULL;
        return e ? jv_markup(c, e) : NULL;
    }
    if (!strcmp(name, "batch"))
        return f_batch(c, v, args, n_args, kw_names, kw_vals, n_kw);
    if (!strcmp(name, "slice"))
        return f_slice(c, v, args, n_args, kw_names, kw_vals, n_kw);
    if (!strcmp(name, "reverse")) {
        if (v->kind == JV_STR) {
            jv *step = jv_int(c, -1);
            jv *items = step ? jv_iter_list(c, v) : NULL;
            if (!items)
                return NULL;
            jj_sbuf o = {c, {0}};
            for (size_t i = items->u.list.n; i-- > 0;)
                jj_sput(&o, items->u.list.items[i]->u.str.s, items->u.list.items[i]->u.str.len);
            return jv_keep_safe(c, v, jj_sbuf_done(&o)); // value[::-1]
        }
        // reversed(value), an iterator; a generator is not reversible: list(value) reversed
        bool from_gen = v->kind == JV_LIST && v->gen;
        if (v->kind != JV_LIST && v->kind != JV_DICT && v->kind != JV_UNDEF)
            return jj_fail(c, RP_ERR_INVALID, "argument must be iterable"), NULL;
        jv *items = jv_iter_list(c, v);
        jv *l = items ? jv_list(c, items->u.list.n) : NULL;
        for (size_t i = items ? items->u.list.n : 0; l && i-- > 0;)
            l->u.list.items[l->u.list.n++] = items->u.list.items[i];
        return from_gen ? l : jv_gen(l);
    }
    if (!strcmp(name, "format")) {
        jv *s = jv_stringify(c, v);
        if (!s)
            return NULL;
        jv *t;
        if (n_kw) {
            if (n_args)
                return jj_fail(c, RP_ERR_INVALID, "format takes positional or keyword arguments, not both"), NULL;
            t = jv_dict(c, JV_DICT, (size_t)n_kw);
            for (int k = 0; t && k < n_kw; k++) {
                jv *key = jv_str(c, kw_names[k], strlen(kw_names[k]));
                if (!key || !jv_dict_set(c, t, key, kw_vals[k]))
                    return NULL;
            }
        } else {
            t = jv_list(c, (size_t)n_args);
            if (t) {
                t->tuple = true;
                for (int k = 0; k < n_args; k++)
                    t->u.list.items[t->u.list.n++] = args[k];
            }
        }
        return t ? jj_percent_format(c, s, t) : NULL;
    }
    if (!strcmp(name, "attr")) {
        if (n_args != 1 || !jj_want_str(c, args[0], "attr name"))
            return n_args != 1 ? (jj_fail(c, RP_ERR_INVALID, "attr takes one argument"), NULL) : NULL;
        // Python getattr only: no item fallback
        if (v->kind == JV_UNDEF || v->kind == JV_LOOP || v->kind == JV_NS)
            return jj_getattr(c, v, args[0]->u.str.s);
        if (jj_has_method(v, args[0]->u.str.s))
            return jj_getattr(c, v, args[0]->u.str.s);
        return jv_undef(c, args[0]->u.str.s);
    }
    if (!strcmp(name, "wordcount"))
        return f_wordcount(c, v);
    if (!strcmp(name, "center")) {
        BIND("center", "width");
        jv *s = jv_stringify(c, v);
        int64_t w = 80;
        if (!s || (a[0] && !jj_want_int(c, a[0], "center width", &w)))
            return NULL;
        jj_sbuf o = {c, {0}};
        int64_t n = (int64_t)jj_utf8_count(s->u.str.s, s->u.str.len), pad = w > n ? w - n : 0;
        // str.center puts the extra space on the right when the string is odd-sized... as CPython does
        int64_t left = pad / 2 + (pad & w & 1);
        jj_pad_put(&o, s->u.str.s, s->u.str.len, n + left, '>', ' ');
        for (int64_t k = 0; k < pad - left && !c->st; k++)
            jj_sput(&o, " ", 1);
        return jv_keep_safe(c, s, jj_sbuf_done(&o));
    }
    jj_fail(c, RP_ERR_INVALID, "no filter named '%s'", name);
    return NULL;
}

/* ---- globals ------------------------------------------------------------------ */

static const char *const globals[] = {"range", "namespace", "dict", "raise_exception", "strftime_now", NULL};

jv *jj_global(jj_ctx *c, const char *name)
{
    for (int i = 0; globals[i]; i++)
        if (!strcmp(globals[i], name)) {
            jv *f = jv_new(c, JV_BUILTIN);
            if (f)
                f->name = globals[i];
            return f;
        }
    return NULL;
}

jv *jj_call_builtin(jj_ctx *c, const char *name, jv **args, int n_args, const char **kw_names, jv **kw_vals, int n_kw)
{
    if (!strcmp(name, "range")) {
        int64_t v[3] = {0, 0, 1};
        if (n_args < 1 || n_args > 3 || n_kw)
            return jj_fail(c, RP_ERR_INVALID, "range expected 1 to 3 integer arguments"), NULL;
        for (int i = 0; i < n_args; i++)
            if (!jj_want_int(c, args[i], "range", &v[n_args == 1 ? 1 : i]))
                return NULL;
        if (v[2] == 0)
            return jj_fail(c, RP_ERR_INVALID, "range() arg 3 must not be zero"), NULL;
        double count = v[2] > 0 ? ceil(((double)v[1] - (double)v[0]) / (double)v[2])
                                : ceil(((double)v[0] - (double)v[1]) / (double)-v[2]);
        if (count < 0)
            count = 0;
        if (count > JJ_MAX_RANGE)
            return jj_fail(c, RP_ERR_LIMIT, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).",
                           JJ_MAX_RANGE),
                   NULL;
        jv *l = jv_list(c, (size_t)count);
        for (int64_t k = 0; l && k < (int64_t)count; k++) {
            jv *x = jv_int(c, v[0] + k * v[2]);
            if (!x)
                return NULL;
            l->u.list.items[l->u.list.n++] = x;
        }
        return l;
    }
    if (!strcmp(name, "namespace") || !strcmp(name, "dict")) {
        jv *d = jv_dict(c, name[0] == 'n' ? JV_NS : JV_DICT, 0);
        if (!d)
            return NULL;
        if (n_args > 1)
            return jj_fail(c, RP_ERR_INVALID, "%s expected at most 1 positional argument", name), NULL;
        if (n_args == 1) {
            jv *src = args[0];
            if (src->kind == JV_DICT || src->kind == JV_NS) {
                for (size_t i = 0; i < src->u.dict.n; i++)
                    if (!jv_dict_set(c, d, src->u.dict.keys[i], src->u.dict.vals[i]))
                        return NULL;
            } else {
                jv *items = jv_iter_list(c, src);
                if (!items)
                    return NULL;
                for (size_t i = 0; i < items->u.list.n; i++) {
                    jv *p = items->u.list.items[i];
                    if (p->kind != JV_LIST || p->u.list.n != 2)
                        return jj_fail(c, RP_ERR_INVALID, "%s: sequence elements must be pairs", name), NULL;
                    if (!jv_dict_set(c, d, p->u.list.items[0], p->u.list.items[1]))
                        return NULL;
                }
            }
        }
        for (int k = 0; k < n_kw; k++) {
            jv *key = jv_str(c, kw_names[k], strlen(kw_names[k]));
            if (!key || !jv_dict_set(c, d, key, kw_vals[k]))
                return NULL;
        }
        return d;
    }
    if (!strcmp(name, "raise_exception")) {
        if (n_args + n_kw != 1)
            return jj_fail(c, RP_ERR_INVALID, "raise_exception takes one argument"), NULL;
        jv *msg = jv_stringify(c, n_args ? args[0] : kw_vals[0]);
        if (msg)
            jj_raise(c, msg->u.str.s, msg->u.str.len);
        return NULL;
    }
    if (!strcmp(name, "strftime_now")) {
        if (n_args != 1 || !jj_want_str(c, args[0], "strftime_now"))
            return n_args != 1 ? (jj_fail(c, RP_ERR_INVALID, "strftime_now takes one argument"), NULL) : NULL;
        time_t now = time(NULL);
        struct tm tm;
        localtime_r(&now, &tm);
        char buf[512];
        size_t n = args[0]->u.str.len < 200 ? strftime(buf, sizeof(buf), args[0]->u.str.s, &tm) : 0;
        return jv_str(c, buf, n);
    }
    return jj_fail(c, RP_ERR_INVALID, "'%s' is not callable", name), NULL;
}
