/*
 * jinja_eval.c - runs a parsed template: statements, expressions, scopes, calls.
 *
 * Scopes are frames chained to their parent: the render's root frame holds the
 * inputs and top-level `set`s; every for-loop iteration, macro call and `with`
 * gets a fresh frame, so a `set` inside them does not leak out (jinja2's rules,
 * hence namespace()). `if` has no scope. A macro's frame hangs off the frame it was
 * defined in, and names are looked up when it runs.
 *
 * Attribute and item access follow jinja2's sandboxed getattr/getitem: `d.key`
 * tries a method first, then the item; `d['key']` the item first; missing things
 * are undefined, which prints as "" but fails when used further (attribute of
 * undefined, arithmetic). Break/continue unwind through c->loop_ctl.
 *
 * Markup (jv.safe) in expressions, as Python runs them with markupsafe: `a + b`
 * with either a Markup escapes the other (Markup.__add__/__radd__) and is a Markup;
 * `*`, indexing and slicing keep it; `%` on a Markup escapes the arguments
 * (jj_percent_format); `~` is jinja2's str_join (autoescape off), a plain str.
 */
#include "jinja_int.h"

#include <math.h>
#include <stdio.h>

/* ---- errors, memory, output ------------------------------------------------ */

rp_status jj_fail(jj_ctx *c, rp_status st, const char *fmt, ...)
{
    if (c->st)
        return c->st;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    c->st = RP_ERR(st, "template error: %s at line %d", msg, c->line);
    return c->st;
}

rp_status jj_raise(jj_ctx *c, const char *msg, size_t len)
{
    if (!c->st)
        c->st = RP_ERR(RP_ERR_INVALID, "template error: %.*s", (int)(len > 4000 ? 4000 : len), msg);
    return c->st;
}

void *jj_calloc(jj_ctx *c, size_t n)
{
    void *p = jj_alloc(&c->arena, n);
    if (!p) {
        if (c->arena.over)
            jj_fail(c, RP_ERR_LIMIT, "render memory limit (%zu MiB) exceeded", JJ_MAX_ARENA >> 20);
        else
            jj_fail(c, RP_ERR_NOMEM, "out of memory");
    }
    return p;
}

bool jj_buf_put(jj_ctx *c, jj_buf *b, const char *s, size_t n)
{
    if (c->st)
        return false;
    if (n == 0)
        return true;
    if (b->len + n > JJ_MAX_OUTPUT)
        return jj_fail(c, RP_ERR_LIMIT, "output larger than %zu MiB", JJ_MAX_OUTPUT >> 20), false;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = rp_realloc(b->s, cap);
        if (!p)
            return jj_fail(c, RP_ERR_NOMEM, "out of memory"), false;
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
    return true;
}

void jj_buf_free(jj_buf *b)
{
    rp_free(b->s);
    b->s = NULL;
    b->len = b->cap = 0;
}

/* ---- scopes ---------------------------------------------------------------- */

static jj_frame *frame_new(jj_ctx *c, jj_frame *parent)
{
    jj_frame *f = jj_calloc(c, sizeof(jj_frame));
    if (f)
        f->parent = parent;
    return f;
}

bool jj_frame_set(jj_ctx *c, jj_frame *f, const char *name, jv *v)
{
    for (size_t i = 0; i < f->n; i++)
        if (!strcmp(f->names[i], name)) {
            f->vals[i] = v;
            return true;
        }
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 8;
        const char **names = jj_calloc(c, cap * sizeof(char *));
        jv **vals = jj_calloc(c, cap * sizeof(jv *));
        if (!names || !vals)
            return false;
        if (f->n) {
            memcpy(names, f->names, f->n * sizeof(char *));
            memcpy(vals, f->vals, f->n * sizeof(jv *));
        }
        f->names = names;
        f->vals = vals;
        f->cap = cap;
    }
    f->names[f->n] = name;
    f->vals[f->n++] = v;
    return true;
}

jv *jj_lookup(jj_ctx *c, const char *name)
{
    for (jj_frame *f = c->frame; f; f = f->parent)
        for (size_t i = f->n; i-- > 0;)
            if (!strcmp(f->names[i], name))
                return f->vals[i];
    jv *g = jj_global(c, name);
    return g ? g : jv_undef(c, name);
}

/* ---- attribute and item access ---------------------------------------------- */

static jv *undefined_error(jj_ctx *c, const jv *u)
{
    if (u->name)
        jj_fail(c, RP_ERR_INVALID, "'%s' is undefined", u->name);
    else
        jj_fail(c, RP_ERR_INVALID, "undefined value used");
    return NULL;
}

static jv *method(jj_ctx *c, jv *self, const char *name)
{
    jv *m = jv_new(c, JV_METHOD);
    if (m) {
        m->name = name;
        m->u.method.self = self;
    }
    return m;
}

static jv *loop_attr(jj_ctx *c, jv *lv, const char *name)
{
    jj_loop *L = lv->u.loop;
    int64_t n = (int64_t)L->n, i = (int64_t)L->index0;
    if (!strcmp(name, "index"))
        return jv_int(c, i + 1);
    if (!strcmp(name, "index0"))
        return jv_int(c, i);
    if (!strcmp(name, "revindex"))
        return jv_int(c, n - i);
    if (!strcmp(name, "revindex0"))
        return jv_int(c, n - i - 1);
    if (!strcmp(name, "first"))
        return jv_bool(i == 0);
    if (!strcmp(name, "last"))
        return jv_bool(i == n - 1);
    if (!strcmp(name, "length"))
        return jv_int(c, n);
    if (!strcmp(name, "depth"))
        return jv_int(c, L->depth0 + 1);
    if (!strcmp(name, "depth0"))
        return jv_int(c, L->depth0);
    if (!strcmp(name, "previtem"))
        return i > 0 ? L->items[i - 1] : jv_undef(c, "previtem");
    if (!strcmp(name, "nextitem"))
        return i + 1 < n ? L->items[i + 1] : jv_undef(c, "nextitem");
    if (!strcmp(name, "cycle") || !strcmp(name, "changed"))
        return method(c, lv, name);
    return jv_undef(c, name);
}

jv *jj_getattr(jj_ctx *c, jv *obj, const char *name)
{
    switch (obj->kind) {
    case JV_UNDEF: return undefined_error(c, obj);
    case JV_LOOP: return loop_attr(c, obj, name);
    case JV_NS: {
        jv *v = jv_dict_gets(obj, name);
        return v ? v : jv_undef(c, name);
    }
    case JV_DICT: {
        if (jj_has_method(obj, name))
            return method(c, obj, name);
        jv *v = jv_dict_gets(obj, name);
        return v ? v : jv_undef(c, name);
    }
    default:
        if (jj_has_method(obj, name))
            return method(c, obj, name);
        return jv_undef(c, name);
    }
}

// Python slice bounds (PySlice_AdjustIndices). false: not a valid slice (error recorded when fatal).
static bool slice_bounds(jj_ctx *c, int64_t len, jv *vs, jv *ve, jv *vstep, int64_t *start, int64_t *step,
                         int64_t *count, bool *bad)
{
    int64_t st = 1;
    *bad = false;
    jv *parts[3] = {vs, ve, vstep};
    for (int k = 0; k < 3; k++)
        if (parts[k] && parts[k]->kind != JV_NONE && parts[k]->kind != JV_INT && parts[k]->kind != JV_BOOL) {
            *bad = true; // TypeError: jinja2 turns it into undefined
            return false;
        }
#define IV(v) ((v)->kind == JV_BOOL ? (int64_t)(v)->u.b : (v)->u.i)
    if (vstep && vstep->kind != JV_NONE)
        st = IV(vstep);
    if (st == 0)
        return jj_fail(c, RP_ERR_INVALID, "slice step cannot be zero"), false;
    int64_t s, e;
    if (!vs || vs->kind == JV_NONE) {
        s = st < 0 ? len - 1 : 0;
    } else {
        s = IV(vs);
        if (s < 0) {
            s += len;
            if (s < 0)
                s = st < 0 ? -1 : 0;
        } else if (s >= len) {
            s = st < 0 ? len - 1 : len;
        }
    }
    if (!ve || ve->kind == JV_NONE) {
        e = st < 0 ? -1 : len;
    } else {
        e = IV(ve);
        if (e < 0) {
            e += len;
            if (e < 0)
                e = st < 0 ? -1 : 0;
        } else if (e >= len) {
            e = st < 0 ? len - 1 : len;
        }
    }
#undef IV
    if (st > 0)
        *count = s < e ? (e - s - 1) / st + 1 : 0;
    else
        *count = e < s ? (s - e - 1) / (-st) + 1 : 0;
    *start = s;
    *step = st;
    return true;
}

static jv *do_slice(jj_ctx *c, jv *obj, jv *vs, jv *ve, jv *vstep)
{
    if (obj->kind == JV_UNDEF)
        return undefined_error(c, obj);
    if ((obj->kind != JV_LIST && obj->kind != JV_STR) || obj->gen)
        return jv_undef(c, "slice");
    bool bad;
    int64_t start, step, count;
    if (obj->kind == JV_LIST) {
        if (!slice_bounds(c, (int64_t)obj->u.list.n, vs, ve, vstep, &start, &step, &count, &bad))
            return bad ? jv_undef(c, "slice") : NULL;
        jv *l = jv_list(c, (size_t)count);
        if (!l)
            return NULL;
        l->tuple = obj->tuple;
        for (int64_t k = 0; k < count; k++)
            l->u.list.items[l->u.list.n++] = obj->u.list.items[start + k * step];
        return l;
    }
    const char *s = obj->u.str.s;
    size_t len = obj->u.str.len;
    size_t n_cp = jj_utf8_count(s, len);
    if (!slice_bounds(c, (int64_t)n_cp, vs, ve, vstep, &start, &step, &count, &bad))
        return bad ? jv_undef(c, "slice") : NULL;
    if (step == 1) {
        size_t a = jj_utf8_offset(s, len, (size_t)start);
        size_t b = a + jj_utf8_offset(s + a, len - a, (size_t)count);
        return jv_keep_safe(c, obj, jv_str(c, s + a, b - a));
    }
    size_t *offs = jj_calloc(c, (n_cp + 1) * sizeof(size_t));
    char *out = offs ? jj_calloc(c, len + 1) : NULL;
    if (!out)
        return NULL;
    for (size_t i = 0, k = 0; i < len; k++) {
        offs[k] = i;
        jj_utf8_next(s, len, &i);
    }
    offs[n_cp] = len;
    size_t o = 0;
    for (int64_t k = 0; k < count; k++) {
        int64_t idx = start + k * step;
        size_t a = offs[idx], b = offs[idx + 1];
        memcpy(out + o, s + a, b - a);
        o += b - a;
    }
    return jv_keep_safe(c, obj, jv_str_owned(c, out, o));
}

jv *jj_getitem(jj_ctx *c, jv *obj, jv *key)
{
    switch (obj->kind) {
    case JV_UNDEF: return undefined_error(c, obj);
    case JV_LIST:
    case JV_STR:
        if (obj->gen)
            break; // a generator is not subscriptable: undefined, as the sandbox's getitem
        if (key->kind == JV_INT || key->kind == JV_BOOL) {
            int64_t i = key->kind == JV_BOOL ? key->u.b : key->u.i;
            if (obj->kind == JV_LIST) {
                int64_t n = (int64_t)obj->u.list.n;
                if (i < 0)
                    i += n;
                return i >= 0 && i < n ? obj->u.list.items[i] : jv_undef(c, "index");
            }
            int64_t n = (int64_t)jj_utf8_count(obj->u.str.s, obj->u.str.len);
            if (i < 0)
                i += n;
            if (i < 0 || i >= n)
                return jv_undef(c, "index");
            size_t a = jj_utf8_offset(obj->u.str.s, obj->u.str.len, (size_t)i), b = a;
            jj_utf8_next(obj->u.str.s, obj->u.str.len, &b);
            return jv_keep_safe(c, obj, jv_str(c, obj->u.str.s + a, b - a)); // Markup.__getitem__
        }
        break;
    case JV_DICT: {
        jv *v = jv_dict_get(c, obj, key);
        if (c->st)
            return NULL;
        if (v)
            return v;
        break;
    }
    case JV_LOOP:
        if (key->kind == JV_STR)
            return loop_attr(c, obj, key->u.str.s);
        break;
    default: break;
    }
    if (key->kind == JV_STR && obj->kind != JV_NS && jj_has_method(obj, key->u.str.s))
        return method(c, obj, key->u.str.s);
    return jv_undef(c, key->kind == JV_STR ? key->u.str.s : "item");
}

/* ---- operators ---------------------------------------------------------------- */

static int64_t ival(const jv *v)
{
    return v->kind == JV_BOOL ? v->u.b : v->u.i;
}

static jv *type_error(jj_ctx *c, const char *op, const jv *a, const jv *b)
{
    if (a->kind == JV_UNDEF)
        return undefined_error(c, a);
    if (b->kind == JV_UNDEF)
        return undefined_error(c, b);
    jj_fail(c, RP_ERR_INVALID, "unsupported operand type(s) for %s: '%s' and '%s'", op, jv_type_name(a),
            jv_type_name(b));
    return NULL;
}

static jv *repeat(jj_ctx *c, jv *seq, int64_t times)
{
    if (times < 0)
        times = 0;
    if (seq->kind == JV_STR) {
        size_t n;
        if (!rp_mul_size(seq->u.str.len, (size_t)times, &n) || n > JJ_MAX_OUTPUT)
            return jj_fail(c, RP_ERR_LIMIT, "string too long"), NULL;
        char *p = jj_calloc(c, n + 1);
        if (!p)
            return NULL;
        for (int64_t k = 0; k < times; k++)
            memcpy(p + (size_t)k * seq->u.str.len, seq->u.str.s, seq->u.str.len);
        return jv_str_owned(c, p, n);
    }
    size_t n;
    if (!rp_mul_size(seq->u.list.n, (size_t)times, &n) || n > JJ_MAX_OUTPUT)
        return jj_fail(c, RP_ERR_LIMIT, "list too long"), NULL;
    jv *l = jv_list(c, n);
    if (!l)
        return NULL;
    l->tuple = seq->tuple;
    for (int64_t k = 0; k < times; k++)
        for (size_t i = 0; i < seq->u.list.n; i++)
            l->u.list.items[l->u.list.n++] = seq->u.list.items[i];
    return l;
}

static jv *concat2(jj_ctx *c, const char *a, size_t na, const char *b, size_t nb)
{
    if (na + nb > JJ_MAX_OUTPUT * 4)
        return jj_fail(c, RP_ERR_LIMIT, "string too long"), NULL;
    char *p = jj_calloc(c, na + nb + 1);
    if (!p)
        return NULL;
    memcpy(p, a, na);
    memcpy(p + na, b, nb);
    return jv_str_owned(c, p, na + nb);
}

static jv *arith(jj_ctx *c, int op, jv *a, jv *b)
{
    const char *opname = op == '+' ? "+" : op == '-' ? "-" : op == '*' ? "*" : op == '/' ? "/" : op == '%' ? "%" :
                         op == JO_FLOORDIV ? "//" : "**";
    if (op == '+' && a->kind == JV_STR && b->kind == JV_STR) {
        if (!a->safe && !b->safe)
            return concat2(c, a->u.str.s, a->u.str.len, b->u.str.s, b->u.str.len);
        // Markup.__add__ / __radd__: the plain side is escaped, the result is a Markup
        jv *x = jj_escape(c, a), *y = x ? jj_escape(c, b) : NULL;
        jv *r = y ? concat2(c, x->u.str.s, x->u.str.len, y->u.str.s, y->u.str.len) : NULL;
        return r ? jv_markup(c, r) : NULL;
    }
    if (op == '+' && a->kind == JV_LIST && b->kind == JV_LIST && a->tuple == b->tuple && !a->gen && !b->gen) {
        jv *l = jv_list(c, a->u.list.n + b->u.list.n);
        if (!l)
            return NULL;
        l->tuple = a->tuple;
        for (size_t i = 0; i < a->u.list.n; i++)
            l->u.list.items[l->u.list.n++] = a->u.list.items[i];
        for (size_t i = 0; i < b->u.list.n; i++)
            l->u.list.items[l->u.list.n++] = b->u.list.items[i];
        return l;
    }
    if (op == '*' && (a->kind == JV_STR || (a->kind == JV_LIST && !a->gen)) &&
        (b->kind == JV_INT || b->kind == JV_BOOL))
        return jv_keep_safe(c, a, repeat(c, a, ival(b)));
    if (op == '*' && (b->kind == JV_STR || (b->kind == JV_LIST && !b->gen)) &&
        (a->kind == JV_INT || a->kind == JV_BOOL))
        return jv_keep_safe(c, b, repeat(c, b, ival(a)));
    if (op == '%' && a->kind == JV_STR)
        return jj_percent_format(c, a, b);
    if (!jv_is_num(a) || !jv_is_num(b))
        return type_error(c, opname, a, b);
    bool ints = a->kind != JV_FLOAT && b->kind != JV_FLOAT;
    if (ints) {
        int64_t x = ival(a), y = ival(b), r;
        switch (op) {
        case '+':
            if (__builtin_add_overflow(x, y, &r))
                goto overflow;
            return jv_int(c, r);
        case '-':
            if (__builtin_sub_overflow(x, y, &r))
                goto overflow;
            return jv_int(c, r);
        case '*':
            if (__builtin_mul_overflow(x, y, &r))
                goto overflow;
            return jv_int(c, r);
        case '/':
            if (y == 0)
                return jj_fail(c, RP_ERR_INVALID, "division by zero"), NULL;
            return jv_float(c, (double)x / (double)y);
        case JO_FLOORDIV:
        case '%': {
            if (y == 0)
                return jj_fail(c, RP_ERR_INVALID, "integer division or modulo by zero"), NULL;
            if (x == INT64_MIN && y == -1)
                goto overflow;
            int64_t q = x / y, m = x % y;
            if (m != 0 && ((m < 0) != (y < 0))) {
                q--;
                m += y;
            }
            return jv_int(c, op == '%' ? m : q);
        }
        case JO_POW: {
            if (y < 0)
                return jv_float(c, pow((double)x, (double)y));
            int64_t result = 1, base = x;
            for (int64_t e = y; e > 0; e >>= 1) {
                if (e & 1 && __builtin_mul_overflow(result, base, &result))
                    goto overflow;
                if (e > 1 && __builtin_mul_overflow(base, base, &base))
                    goto overflow;
            }
            return jv_int(c, result);
        }
        }
    }
    double x = jv_num(a), y = jv_num(b);
    switch (op) {
    case '+': return jv_float(c, x + y);
    case '-': return jv_float(c, x - y);
    case '*': return jv_float(c, x * y);
    case '/':
        if (y == 0)
            return jj_fail(c, RP_ERR_INVALID, "float division by zero"), NULL;
        return jv_float(c, x / y);
    case JO_FLOORDIV:
    case '%': {
        if (y == 0)
            return jj_fail(c, RP_ERR_INVALID, "float modulo"), NULL;
        // CPython's float_divmod
        double m = fmod(x, y), div = (x - m) / y, fd;
        if (m != 0) {
            if ((y < 0) != (m < 0)) {
                m += y;
                div -= 1.0;
            }
        } else {
            m = copysign(0.0, y);
        }
        if (op == '%')
            return jv_float(c, m);
        if (div != 0) {
            fd = floor(div);
            if (div - fd > 0.5)
                fd += 1.0;
        } else {
            fd = copysign(0.0, x / y);
        }
        return jv_float(c, fd);
    }
    case JO_POW: return jv_float(c, pow(x, y));
    }
overflow:
    jj_fail(c, RP_ERR_INVALID, "integer overflow in %s", opname);
    return NULL;
}

static int contains(jj_ctx *c, jv *container, jv *item)
{
    switch (container->kind) {
    case JV_UNDEF: return 0;
    case JV_STR:
        if (item->kind != JV_STR)
            return jj_fail(c, RP_ERR_INVALID, "'in <string>' requires string as left operand, not %s",
                           jv_type_name(item)),
                   -1;
        return item->u.str.len == 0 ||
               memmem(container->u.str.s, container->u.str.len, item->u.str.s, item->u.str.len) != NULL;
    case JV_LIST: {
        jv *items = jv_iter_list(c, container); // a generator is used up
        for (size_t i = 0; items && i < items->u.list.n; i++) {
            int e = jv_equal(c, items->u.list.items[i], item, 0);
            if (e)
                return e;
        }
        return items ? 0 : -1;
    }
    case JV_DICT: {
        jv *v = jv_dict_get(c, container, item);
        return c->st ? -1 : v != NULL;
    }
    default:
        jj_fail(c, RP_ERR_INVALID, "argument of type '%s' is not iterable", jv_type_name(container));
        return -1;
    }
}

static jv *compare(jj_ctx *c, const jj_node *n)
{
    jv *left = jj_eval(c, n->k[0]);
    if (!left)
        return NULL;
    for (int i = 0; i < n->n_list; i++) {
        jv *right = jj_eval(c, n->list[i]);
        if (!right)
            return NULL;
        int op = n->ops[i], r = 0;
        bool ok;
        switch (op) {
        case JO_EQ:
        case JO_NE: {
            int e = jv_equal(c, left, right, 0);
            if (e < 0)
                return NULL;
            ok = op == JO_EQ ? e : !e;
            break;
        }
        case JO_IN:
        case JO_NOTIN: {
            int e = contains(c, right, left);
            if (e < 0)
                return NULL;
            ok = op == JO_IN ? e : !e;
            break;
        }
        default:
            if (left->kind == JV_UNDEF || right->kind == JV_UNDEF)
                return undefined_error(c, left->kind == JV_UNDEF ? left : right);
            if (!jv_compare(c, left, right, &r, 0))
                return NULL;
            ok = op == '<' ? r < 0 : op == '>' ? r > 0 : op == JO_LE ? r <= 0 : r >= 0;
        }
        if (!ok)
            return JV_FALSE;
        left = right;
    }
    return JV_TRUE;
}

/* ---- calls ------------------------------------------------------------------- */

static rp_status exec_body(jj_ctx *c, const jj_node *body);

// Renders body (a statement) into a fresh buffer with frame f; returns the text.
static jv *render_capture(jj_ctx *c, const jj_node *body, jj_frame *f)
{
    jj_buf buf = {0}, *saved = c->out;
    jj_frame *saved_frame = c->frame;
    c->out = &buf;
    c->frame = f;
    rp_status st = jj_exec(c, body);
    c->out = saved;
    c->frame = saved_frame;
    jv *r = st ? NULL : jv_str(c, buf.s ? buf.s : "", buf.len);
    jj_buf_free(&buf);
    return r;
}

static jv *call_macro(jj_ctx *c, jv *m, jv **args, int n_args, const char **kw_names, jv **kw_vals, int n_kw)
{
    const jj_node *def = m->u.macro.node;
    if (++c->call_depth > JJ_MAX_CALL_DEPTH) {
        c->call_depth--;
        return jj_fail(c, RP_ERR_LIMIT, "macro calls nested deeper than %d", JJ_MAX_CALL_DEPTH), NULL;
    }
    if (++c->steps > JJ_MAX_STEPS)
        return jj_fail(c, RP_ERR_LIMIT, "too many loop iterations and calls"), NULL;
    jv *result = NULL;
    jj_frame *f = frame_new(c, m->u.macro.closure);
    jv *varargs = jv_list(c, 0), *kwargs = jv_dict(c, JV_DICT, 0);
    if (!f || !varargs || !kwargs)
        goto out;
    varargs->tuple = true;
    jj_frame *saved = c->frame;
    c->frame = f; // defaults see the earlier arguments
    int np = def->n_names;
    for (int i = 0; i < np; i++) {
        jv *v = i < n_args ? args[i] : NULL;
        for (int k = 0; k < n_kw; k++)
            if (!strcmp(kw_names[k], def->names[i])) {
                if (v) {
                    c->frame = saved;
                    jj_fail(c, RP_ERR_INVALID, "macro '%s' got multiple values for argument '%s'",
                            m->name ? m->name : "caller", def->names[i]);
                    goto out;
                }
                v = kw_vals[k];
            }
        if (!v)
            v = def->list2[i] ? jj_eval(c, def->list2[i]) : jv_undef(c, def->names[i]);
        if (!v || !jj_frame_set(c, f, def->names[i], v)) {
            c->frame = saved;
            goto out;
        }
    }
    c->frame = saved;
    for (int i = np; i < n_args; i++)
        if (!jv_list_push(c, varargs, args[i]))
            goto out;
    for (int k = 0; k < n_kw; k++) {
        bool known = false;
        for (int i = 0; i < np; i++)
            known = known || !strcmp(kw_names[k], def->names[i]);
        if (known)
            continue;
        jv *key = jv_str(c, kw_names[k], strlen(kw_names[k]));
        if (!key || !jv_dict_set(c, kwargs, key, kw_vals[k]))
            goto out;
    }
    if (!jj_frame_set(c, f, "varargs", varargs) || !jj_frame_set(c, f, "kwargs", kwargs))
        goto out;
    if (m->u.macro.caller && !jj_frame_set(c, f, "caller", m->u.macro.caller))
        goto out;
    int saved_ctl = c->loop_ctl;
    result = render_capture(c, def->kind == JS_MACRO ? def->k[0] : def->k[1], f);
    c->loop_ctl = saved_ctl;
out:
    c->call_depth--;
    return c->st ? NULL : result;
}

static rp_status run_loop(jj_ctx *c, const jj_node *n, jv *iter, int depth0);

jv *jj_call(jj_ctx *c, jv *fn, jv **args, int n_args, const char **kw_names, jv **kw_vals, int n_kw)
{
    switch (fn->kind) {
    case JV_MACRO: return call_macro(c, fn, args, n_args, kw_names, kw_vals, n_kw);
    case JV_BUILTIN: return jj_call_builtin(c, fn->name, args, n_args, kw_names, kw_vals, n_kw);
    case JV_METHOD: {
        jv *self = fn->u.method.self;
        if (self->kind == JV_LOOP) {
            jj_loop *L = self->u.loop;
            if (!strcmp(fn->name, "cycle")) {
                if (n_args == 0)
                    return jj_fail(c, RP_ERR_INVALID, "no items for cycling given"), NULL;
                return args[L->index0 % (size_t)n_args];
            }
            // changed(*values): true when the values differ from the last call's
            jv *vals = jv_list(c, (size_t)n_args);
            if (!vals)
                return NULL;
            for (int i = 0; i < n_args; i++)
                vals->u.list.items[vals->u.list.n++] = args[i];
            int same = L->last_changed ? jv_equal(c, L->last_changed, vals, 0) : 0;
            if (same < 0)
                return NULL;
            L->last_changed = vals;
            return jv_bool(!same);
        }
        return jj_call_method(c, self, fn->name, args, n_args, kw_names, kw_vals, n_kw);
    }
    case JV_LOOP: {
        jj_loop *L = fn->u.loop;
        if (!L->node)
            return jj_fail(c, RP_ERR_INVALID, "the loop is not recursive"), NULL;
        if (n_args != 1)
            return jj_fail(c, RP_ERR_INVALID, "loop() takes one argument"), NULL;
        if (++c->call_depth > JJ_MAX_CALL_DEPTH) {
            c->call_depth--;
            return jj_fail(c, RP_ERR_LIMIT, "recursive loop nested deeper than %d", JJ_MAX_CALL_DEPTH), NULL;
        }
        jj_buf buf = {0}, *saved = c->out;
        jj_frame *saved_frame = c->frame;
        c->out = &buf;
        c->frame = L->frame;
        rp_status st = run_loop(c, L->node, args[0], L->depth0 + 1);
        c->out = saved;
        c->frame = saved_frame;
        c->call_depth--;
        jv *r = st ? NULL : jv_str(c, buf.s ? buf.s : "", buf.len);
        jj_buf_free(&buf);
        return r;
    }
    case JV_UNDEF: return undefined_error(c, fn);
    default: return jj_fail(c, RP_ERR_INVALID, "'%s' object is not callable", jv_type_name(fn)), NULL;
    }
}

// Evaluates the arguments of a call, filter or test node.
static bool eval_args(jj_ctx *c, const jj_node *n, jv ***args, jv ***kw)
{
    *args = n->n_list ? jj_calloc(c, (size_t)n->n_list * sizeof(jv *)) : NULL;
    *kw = n->n_list2 ? jj_calloc(c, (size_t)n->n_list2 * sizeof(jv *)) : NULL;
    if ((n->n_list && !*args) || (n->n_list2 && !*kw))
        return false;
    for (int i = 0; i < n->n_list; i++)
        if (!((*args)[i] = jj_eval(c, n->list[i])))
            return false;
    for (int i = 0; i < n->n_list2; i++)
        if (!((*kw)[i] = jj_eval(c, n->list2[i])))
            return false;
    return true;
}

/* ---- expressions -------------------------------------------------------------- */

static jv *eval_inner(jj_ctx *c, const jj_node *n)
{
    switch (n->kind) {
    case JN_CONST: return n->value;
    case JN_NAME: return jj_lookup(c, n->name);
    case JN_LIST:
    case JN_TUPLE: {
        jv *l = jv_list(c, (size_t)n->n_list);
        if (!l)
            return NULL;
        l->tuple = n->kind == JN_TUPLE;
        for (int i = 0; i < n->n_list; i++)
            if (!(l->u.list.items[l->u.list.n++] = jj_eval(c, n->list[i])))
                return NULL;
        return l;
    }
    case JN_DICT: {
        jv *d = jv_dict(c, JV_DICT, (size_t)n->n_list);
        if (!d)
            return NULL;
        for (int i = 0; i < n->n_list; i++) {
            jv *k = jj_eval(c, n->list[i]);
            jv *v = k ? jj_eval(c, n->list2[i]) : NULL;
            if (!v || !jv_dict_set(c, d, k, v))
                return NULL;
        }
        return d;
    }
    case JN_GETATTR: {
        jv *o = jj_eval(c, n->k[0]);
        return o ? jj_getattr(c, o, n->name) : NULL;
    }
    case JN_GETITEM: {
        jv *o = jj_eval(c, n->k[0]);
        jv *k = o ? jj_eval(c, n->k[1]) : NULL;
        return k ? jj_getitem(c, o, k) : NULL;
    }
    case JN_SLICE: {
        jv *o = jj_eval(c, n->k[0]), *p[3] = {0};
        if (!o)
            return NULL;
        for (int i = 0; i < 3; i++)
            if (n->k[i + 1] && !(p[i] = jj_eval(c, n->k[i + 1])))
                return NULL;
        return do_slice(c, o, p[0], p[1], p[2]);
    }
    case JN_CALL: {
        jv *fn = jj_eval(c, n->k[0]), **args, **kw;
        if (!fn || !eval_args(c, n, &args, &kw))
            return NULL;
        c->line = n->line;
        return jj_call(c, fn, args, n->n_list, n->names, kw, n->n_list2);
    }
    case JN_FILTER: {
        jv *v = n->k[0] ? jj_eval(c, n->k[0]) : c->filter_input, **args, **kw;
        if (!v || !eval_args(c, n, &args, &kw))
            return NULL;
        c->line = n->line;
        return jj_filter(c, n->name, v, args, n->n_list, n->names, kw, n->n_list2);
    }
    case JN_TEST: {
        jv *v = jj_eval(c, n->k[0]), **args, **kw;
        if (!v || !eval_args(c, n, &args, &kw))
            return NULL;
        c->line = n->line;
        int r = jj_test(c, n->name, v, args, n->n_list, n->names, kw, n->n_list2);
        return r < 0 ? NULL : jv_bool(n->op ? !r : r);
    }
    case JN_UNARY: {
        jv *v = jj_eval(c, n->k[0]);
        if (!v)
            return NULL;
        if (n->op == JO_NOT)
            return jv_bool(!jv_truthy(v));
        if (v->kind == JV_UNDEF)
            return undefined_error(c, v);
        if (v->kind == JV_FLOAT)
            return n->op == JO_NEG ? jv_float(c, -v->u.f) : v;
        if (v->kind == JV_INT || v->kind == JV_BOOL) {
            int64_t i = ival(v);
            if (n->op == JO_POS)
                return jv_int(c, i);
            if (i == INT64_MIN)
                return jj_fail(c, RP_ERR_INVALID, "integer overflow"), NULL;
            return jv_int(c, -i);
        }
        return jj_fail(c, RP_ERR_INVALID, "bad operand type for unary %c: '%s'", n->op == JO_NEG ? '-' : '+',
                       jv_type_name(v)),
               NULL;
    }
    case JN_BINARY: {
        jv *a = jj_eval(c, n->k[0]);
        if (!a)
            return NULL;
        if (n->op == JO_AND)
            return jv_truthy(a) ? jj_eval(c, n->k[1]) : a;
        if (n->op == JO_OR)
            return jv_truthy(a) ? a : jj_eval(c, n->k[1]);
        jv *b = jj_eval(c, n->k[1]);
        if (!b)
            return NULL;
        c->line = n->line;
        if (n->op == '~') {
            jv *sa = jv_stringify(c, a), *sb = sa ? jv_stringify(c, b) : NULL;
            return sb ? concat2(c, sa->u.str.s, sa->u.str.len, sb->u.str.s, sb->u.str.len) : NULL;
        }
        return arith(c, n->op, a, b);
    }
    case JN_COMPARE: return compare(c, n);
    case JN_COND: {
        jv *cond = jj_eval(c, n->k[0]);
        if (!cond)
            return NULL;
        if (jv_truthy(cond))
            return jj_eval(c, n->k[1]);
        return n->k[2] ? jj_eval(c, n->k[2]) : jv_undef(c, "conditional");
    }
    default: jj_fail(c, RP_ERR_INVALID, "not an expression"); return NULL;
    }
}

jv *jj_eval(jj_ctx *c, const jj_node *n)
{
    if (c->st)
        return NULL;
    if (++c->depth > JJ_MAX_DEPTH) {
        c->depth--;
        return jj_fail(c, RP_ERR_LIMIT, "evaluation nested deeper than %d", JJ_MAX_DEPTH), NULL;
    }
    int line = c->line;
    c->line = n->line;
    jv *v = eval_inner(c, n);
    if (v)
        c->line = line;
    c->depth--;
    return c->st ? NULL : v;
}

/* ---- statements ------------------------------------------------------------- */

static bool assign(jj_ctx *c, const jj_node *target, jv *v)
{
    if (target->kind == JN_NAME)
        return jj_frame_set(c, c->frame, target->name, v);
    if (target->kind == JN_GETATTR) {
        jv *ns = jj_lookup(c, target->k[0]->name);
        if (!ns)
            return false;
        if (ns->kind != JV_NS)
            return jj_fail(c, RP_ERR_INVALID, "can't assign attribute on a non-namespace object"), false;
        jv *key = jv_str(c, target->name, strlen(target->name));
        return key && jv_dict_set(c, ns, key, v);
    }
    jv *items = jv_iter_list(c, v);
    if (!items)
        return false;
    if ((int)items->u.list.n != target->n_list)
        return jj_fail(c, RP_ERR_INVALID, "cannot unpack %zu values into %d names", items->u.list.n, target->n_list),
               false;
    for (int i = 0; i < target->n_list; i++)
        if (!assign(c, target->list[i], items->u.list.items[i]))
            return false;
    return true;
}

static rp_status run_loop(jj_ctx *c, const jj_node *n, jv *iter, int depth0)
{
    jv *items = jv_iter_list(c, iter);
    if (!items)
        return c->st;
    jj_frame *outer = c->frame;
    if (n->k[2]) { // for x in xs if cond: filter first (loop.length counts what passes)
        jv *kept = jv_list(c, items->u.list.n);
        if (!kept)
            return c->st;
        for (size_t i = 0; i < items->u.list.n; i++) {
            if (++c->steps > JJ_MAX_STEPS)
                return jj_fail(c, RP_ERR_LIMIT, "too many loop iterations and calls");
            jj_frame *f = frame_new(c, outer);
            if (!f)
                return c->st;
            c->frame = f;
            jv *cond = assign(c, n->k[0], items->u.list.items[i]) ? jj_eval(c, n->k[2]) : NULL;
            c->frame = outer;
            if (!cond)
                return c->st;
            if (jv_truthy(cond))
                kept->u.list.items[kept->u.list.n++] = items->u.list.items[i];
        }
        items = kept;
    }
    jj_loop *L = jj_calloc(c, sizeof(jj_loop));
    jv *lv = L ? jv_new(c, JV_LOOP) : NULL;
    if (!lv)
        return c->st;
    L->items = items->u.list.items;
    L->n = items->u.list.n;
    L->depth0 = depth0;
    L->node = n->op ? n : NULL;
    L->frame = outer;
    lv->u.loop = L;
    for (size_t i = 0; i < L->n; i++) {
        if (++c->steps > JJ_MAX_STEPS)
            return jj_fail(c, RP_ERR_LIMIT, "too many loop iterations and calls");
        L->index0 = i;
        jj_frame *f = frame_new(c, outer);
        if (!f)
            return c->st;
        c->frame = f;
        rp_status st = RP_OK;
        if (!jj_frame_set(c, f, "loop", lv) || !assign(c, n->k[0], L->items[i]))
            st = c->st;
        if (!st)
            st = jj_exec(c, n->k[3]);
        c->frame = outer;
        if (st)
            return st;
        if (c->loop_ctl == JS_BREAK) {
            c->loop_ctl = 0;
            break;
        }
        c->loop_ctl = 0;
    }
    if (L->n == 0 && n->k[4])
        return jj_exec(c, n->k[4]);
    return RP_OK;
}

static rp_status exec_body(jj_ctx *c, const jj_node *body)
{
    for (int i = 0; i < body->n_list && !c->loop_ctl; i++) {
        rp_status st = jj_exec(c, body->list[i]);
        if (st)
            return st;
    }
    return RP_OK;
}

static rp_status exec_inner(jj_ctx *c, const jj_node *n)
{
    switch (n->kind) {
    case JS_BODY: return exec_body(c, n);
    case JS_DATA: return jj_buf_put(c, c->out, n->value->u.str.s, n->value->u.str.len) ? RP_OK : c->st;
    case JS_PRINT: {
        jv *v = jj_eval(c, n->k[0]);
        return v && jv_to_str(c, c->out, v) ? RP_OK : c->st;
    }
    case JS_IF: {
        jv *cond = jj_eval(c, n->k[0]);
        if (!cond)
            return c->st;
        if (jv_truthy(cond))
            return jj_exec(c, n->k[1]);
        return n->k[2] ? jj_exec(c, n->k[2]) : RP_OK;
    }
    case JS_FOR: {
        jv *iter = jj_eval(c, n->k[1]);
        if (!iter)
            return c->st;
        c->line = n->line;
        return run_loop(c, n, iter, 0);
    }
    case JS_SET: {
        jv *v = jj_eval(c, n->k[1]);
        c->line = n->line;
        return v && assign(c, n->k[0], v) ? RP_OK : c->st;
    }
    case JS_SETBLOCK: {
        jv *v = render_capture(c, n->k[1], c->frame);
        if (v && n->k[2]) {
            jv *saved = c->filter_input;
            c->filter_input = v;
            v = jj_eval(c, n->k[2]);
            c->filter_input = saved;
        }
        return v && assign(c, n->k[0], v) ? RP_OK : c->st;
    }
    case JS_FILTERBLK: {
        jv *v = render_capture(c, n->k[1], c->frame);
        if (!v)
            return c->st;
        jv *saved = c->filter_input;
        c->filter_input = v;
        v = jj_eval(c, n->k[0]);
        c->filter_input = saved;
        return v && jv_to_str(c, c->out, v) ? RP_OK : c->st;
    }
    case JS_MACRO: {
        jv *m = jv_new(c, JV_MACRO);
        if (!m)
            return c->st;
        m->name = n->name;
        m->u.macro.node = n;
        m->u.macro.closure = c->frame;
        return jj_frame_set(c, c->frame, n->name, m) ? RP_OK : c->st;
    }
    case JS_CALLBLOCK: {
        const jj_node *call = n->k[0];
        jv *caller = jv_new(c, JV_MACRO);
        jv *fn = caller ? jj_eval(c, call->k[0]) : NULL, **args, **kw;
        if (!fn || !eval_args(c, call, &args, &kw))
            return c->st;
        caller->name = "caller";
        caller->u.macro.node = n;
        caller->u.macro.closure = c->frame;
        if (fn->kind != JV_MACRO)
            return jj_fail(c, RP_ERR_INVALID, "a call block needs a macro");
        jv *m = jv_new(c, JV_MACRO);
        if (!m)
            return c->st;
        *m = *fn;
        m->u.macro.caller = caller;
        jv *r = jj_call(c, m, args, call->n_list, call->names, kw, call->n_list2);
        return r && jv_to_str(c, c->out, r) ? RP_OK : c->st;
    }
    case JS_WITH: {
        jj_frame *f = frame_new(c, c->frame);
        if (!f)
            return c->st;
        jv **vals = n->n_list ? jj_calloc(c, (size_t)n->n_list * sizeof(jv *)) : NULL;
        if (n->n_list && !vals)
            return c->st;
        for (int i = 0; i < n->n_list; i++)
            if (!(vals[i] = jj_eval(c, n->list2[i])))
                return c->st;
        jj_frame *outer = c->frame;
        c->frame = f;
        rp_status st = RP_OK;
        for (int i = 0; i < n->n_list && !st; i++)
            if (!assign(c, n->list[i], vals[i]))
                st = c->st;
        if (!st)
            st = jj_exec(c, n->k[0]);
        c->frame = outer;
        return st;
    }
    case JS_BREAK:
    case JS_CONTINUE: c->loop_ctl = n->kind; return RP_OK;
    default: return jj_fail(c, RP_ERR_INVALID, "not a statement");
    }
}

rp_status jj_exec(jj_ctx *c, const jj_node *n)
{
    if (c->st)
        return c->st;
    if (++c->depth > JJ_MAX_DEPTH) {
        c->depth--;
        return jj_fail(c, RP_ERR_LIMIT, "evaluation nested deeper than %d", JJ_MAX_DEPTH);
    }
    c->line = n->line;
    rp_status st = exec_inner(c, n);
    c->depth--;
    return st ? st : c->st;
}
