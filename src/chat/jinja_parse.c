/*
 * jinja_parse.c - tokens -> AST for the chat template interpreter.
 *
 * A recursive-descent parser with jinja2's grammar (parser.py) and precedence:
 *   condexpr: or ("if" or ["else" condexpr])*      or: and ("or" and)*
 *   and: not ("and" not)*     not: "not" not | compare
 *   compare: math1 ((== != < <= > >= in "not in") math1)*
 *   math1: concat ((+ -) concat)*     concat: math2 ("~" math2)*
 *   math2: pow ((* / // %) pow)*      pow: unary ("**" unary)*
 *   unary: (- +) unary | primary postfix* (filter | test | call)*
 * Statements: for (else, inline if, recursive), if/elif/else, set (plain, tuple,
 * namespace attribute, block with filters), macro, call, filter, with, break,
 * continue, and transformers' {% generation %} (its body is rendered as is).
 * Nesting is bounded (JJ_MAX_PARSE_DEPTH) so hostile sources cannot exhaust the stack.
 */
#include "jinja_int.h"

#include <stdio.h>

typedef struct parser {
    jj_arena *a;
    const jj_token *t;
    size_t n, pos;
    int depth, loops;
    rp_status st;
} parser;

static const jj_token *cur(parser *P)
{
    return &P->t[P->pos < P->n ? P->pos : P->n - 1];
}

static const jj_token *peek(parser *P, size_t k)
{
    size_t i = P->pos + k;
    return &P->t[i < P->n ? i : P->n - 1];
}

static void advance(parser *P)
{
    if (P->pos + 1 < P->n)
        P->pos++;
}

static void *pfail(parser *P, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void *pfail(parser *P, const char *fmt, ...)
{
    if (!P->st) {
        char msg[256];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        P->st = RP_ERR(RP_ERR_INVALID, "template error: %s at line %d", msg, cur(P)->line);
    }
    return NULL;
}

static const char *describe(const jj_token *t)
{
    switch (t->kind) {
    case JT_EOF: return "end of template";
    case JT_DATA: return "template data";
    case JT_VAR_BEGIN: return "'{{'";
    case JT_VAR_END: return "'}}'";
    case JT_BLOCK_BEGIN: return "'{%'";
    case JT_BLOCK_END: return "'%}'";
    case JT_NAME: return t->s;
    case JT_STRING: return "string";
    case JT_INT: return "integer";
    case JT_FLOAT: return "float";
    default: return "operator";
    }
}

static bool is_op(parser *P, int op)
{
    return cur(P)->kind == JT_OP && cur(P)->op == op;
}

static bool is_name(parser *P, const char *name)
{
    return cur(P)->kind == JT_NAME && strcmp(cur(P)->s, name) == 0;
}

static bool skip_op(parser *P, int op)
{
    if (!is_op(P, op))
        return false;
    advance(P);
    return true;
}

static bool skip_name(parser *P, const char *name)
{
    if (!is_name(P, name))
        return false;
    advance(P);
    return true;
}

static bool expect_op(parser *P, int op)
{
    if (skip_op(P, op))
        return true;
    char want[8];
    snprintf(want, sizeof(want), "%c", op < 256 ? op : '?');
    pfail(P, "expected '%s', got %s", want, describe(cur(P)));
    return false;
}

static bool expect_kind(parser *P, jj_tok_kind k, const char *what)
{
    if (cur(P)->kind == k) {
        advance(P);
        return true;
    }
    pfail(P, "expected %s, got %s", what, describe(cur(P)));
    return false;
}

static jj_node *node(parser *P, jj_node_kind kind, int line)
{
    jj_node *n = jj_alloc(P->a, sizeof(jj_node));
    if (!n)
        return pfail(P, "out of memory");
    n->kind = kind;
    n->line = line;
    return n;
}

static jv *const_val(parser *P, jv_kind kind)
{
    jv *v = jj_alloc(P->a, sizeof(jv));
    if (!v)
        return pfail(P, "out of memory");
    v->kind = kind;
    return v;
}

static jj_node *const_node(parser *P, jv *v, int line)
{
    jj_node *n = v ? node(P, JN_CONST, line) : NULL;
    if (n)
        n->value = v;
    return n;
}

// A growable node array in the arena.
typedef struct nvec {
    jj_node **v;
    int n, cap;
} nvec;

static bool nvec_push(parser *P, nvec *a, jj_node *x)
{
    if (a->n == a->cap) {
        int cap = a->cap ? a->cap * 2 : 4;
        jj_node **v = jj_alloc(P->a, (size_t)cap * sizeof(jj_node *));
        if (!v)
            return pfail(P, "out of memory"), false;
        if (a->n)
            memcpy(v, a->v, (size_t)a->n * sizeof(jj_node *));
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = x;
    return true;
}

typedef struct svec {
    const char **v;
    int n, cap;
} svec;

static bool svec_push(parser *P, svec *a, const char *x)
{
    if (a->n == a->cap) {
        int cap = a->cap ? a->cap * 2 : 4;
        const char **v = jj_alloc(P->a, (size_t)cap * sizeof(char *));
        if (!v)
            return pfail(P, "out of memory"), false;
        if (a->n)
            memcpy(v, a->v, (size_t)a->n * sizeof(char *));
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = x;
    return true;
}

static bool enter(parser *P)
{
    if (++P->depth > JJ_MAX_PARSE_DEPTH) {
        if (!P->st)
            P->st = RP_ERR(RP_ERR_LIMIT, "template error: nested too deeply at line %d", cur(P)->line);
        return false;
    }
    return true;
}

/* ---- expressions ----------------------------------------------------------- */

static jj_node *parse_expression(parser *P, bool with_condexpr);
static jj_node *parse_unary(parser *P, bool with_filter);
static jj_node *parse_primary(parser *P);
static jj_node *parse_postfix(parser *P, jj_node *n);

// Call arguments after '(': positional into args, name=value into names/kw.
static bool parse_call_args(parser *P, nvec *args, svec *names, nvec *kw)
{
    if (!expect_op(P, '('))
        return false;
    while (!is_op(P, ')')) {
        if (args->n + kw->n && !expect_op(P, ','))
            return false;
        if (is_op(P, ')'))
            break; // trailing comma
        if (is_op(P, '*') || is_op(P, JO_POW))
            return pfail(P, "*args and **kwargs in calls are not supported"), false;
        if (cur(P)->kind == JT_NAME && peek(P, 1)->kind == JT_OP && peek(P, 1)->op == '=') {
            const char *name = cur(P)->s;
            advance(P);
            advance(P);
            jj_node *v = parse_expression(P, true);
            if (!v || !svec_push(P, names, name) || !nvec_push(P, kw, v))
                return false;
        } else {
            if (kw->n)
                return pfail(P, "positional argument follows keyword argument"), false;
            jj_node *v = parse_expression(P, true);
            if (!v || !nvec_push(P, args, v))
                return false;
        }
    }
    advance(P);
    return true;
}

static void set_args(jj_node *n, nvec *args, svec *names, nvec *kw)
{
    n->list = args->v;
    n->n_list = args->n;
    n->names = names->v;
    n->n_names = names->n;
    n->list2 = kw->v;
    n->n_list2 = kw->n;
}

static const char *dotted_name(parser *P)
{
    if (cur(P)->kind != JT_NAME)
        return pfail(P, "expected a name, got %s", describe(cur(P)));
    const char *name = cur(P)->s;
    advance(P);
    while (is_op(P, '.') && peek(P, 1)->kind == JT_NAME) {
        advance(P);
        size_t a = strlen(name), b = strlen(cur(P)->s);
        char *s = jj_alloc(P->a, a + b + 2);
        if (!s)
            return pfail(P, "out of memory");
        memcpy(s, name, a);
        s[a] = '.';
        memcpy(s + a + 1, cur(P)->s, b + 1);
        name = s;
        advance(P);
    }
    return name;
}

// Filters: base | name(args) | ... (start_inline: the first name needs no '|').
static jj_node *parse_filter(parser *P, jj_node *base, bool start_inline)
{
    while (is_op(P, '|') || start_inline) {
        int line = cur(P)->line;
        if (!start_inline)
            advance(P);
        start_inline = false;
        const char *name = dotted_name(P);
        if (!name)
            return NULL;
        jj_node *f = node(P, JN_FILTER, line);
        if (!f)
            return NULL;
        f->k[0] = base;
        f->name = name;
        nvec args = {0}, kw = {0};
        svec names = {0};
        if (is_op(P, '(') && !parse_call_args(P, &args, &names, &kw))
            return NULL;
        set_args(f, &args, &names, &kw);
        base = f;
    }
    return base;
}

static jj_node *parse_test(parser *P, jj_node *base)
{
    int line = cur(P)->line;
    advance(P); // is
    bool negated = skip_name(P, "not");
    const char *name = dotted_name(P);
    if (!name)
        return NULL;
    jj_node *t = node(P, JN_TEST, line);
    if (!t)
        return NULL;
    t->k[0] = base;
    t->name = name;
    t->op = negated;
    nvec args = {0}, kw = {0};
    svec names = {0};
    const jj_token *c = cur(P);
    if (is_op(P, '(')) {
        if (!parse_call_args(P, &args, &names, &kw))
            return NULL;
    } else if ((c->kind == JT_NAME || c->kind == JT_STRING || c->kind == JT_INT || c->kind == JT_FLOAT ||
                (c->kind == JT_OP && (c->op == '[' || c->op == '{'))) &&
               !is_name(P, "else") && !is_name(P, "or") && !is_name(P, "and")) {
        if (is_name(P, "is"))
            return pfail(P, "you cannot chain multiple tests with is");
        jj_node *arg = parse_primary(P);
        arg = arg ? parse_postfix(P, arg) : NULL;
        if (!arg || !nvec_push(P, &args, arg))
            return NULL;
    }
    set_args(t, &args, &names, &kw);
    return t;
}

static jj_node *parse_subscribed(parser *P)
{
    int line = cur(P)->line;
    jj_node *parts[3] = {0};
    if (is_op(P, ':')) {
        advance(P);
    } else {
        jj_node *e = parse_expression(P, true);
        if (!e || !is_op(P, ':'))
            return e;
        advance(P);
        parts[0] = e;
    }
    if (!is_op(P, ':') && !is_op(P, ']') && !is_op(P, ',') && !(parts[1] = parse_expression(P, true)))
        return NULL;
    if (skip_op(P, ':') && !is_op(P, ']') && !is_op(P, ',') && !(parts[2] = parse_expression(P, true)))
        return NULL;
    jj_node *s = node(P, JN_SLICE, line);
    if (s) {
        s->k[1] = parts[0];
        s->k[2] = parts[1];
        s->k[3] = parts[2];
    }
    return s;
}

static jj_node *parse_postfix(parser *P, jj_node *n)
{
    while (n) {
        int line = cur(P)->line;
        if (is_op(P, '.')) {
            advance(P);
            const jj_token *t = cur(P);
            if (t->kind == JT_NAME) {
                jj_node *g = node(P, JN_GETATTR, line);
                if (!g)
                    return NULL;
                g->k[0] = n;
                g->name = t->s;
                advance(P);
                n = g;
            } else if (t->kind == JT_INT) {
                jv *v = const_val(P, JV_INT);
                jj_node *g = node(P, JN_GETITEM, line);
                if (!v || !g)
                    return NULL;
                v->u.i = t->i;
                g->k[0] = n;
                g->k[1] = const_node(P, v, line);
                advance(P);
                n = g;
            } else {
                return pfail(P, "expected a name or number after '.'");
            }
        } else if (is_op(P, '[')) {
            advance(P);
            nvec args = {0};
            while (!is_op(P, ']')) {
                if (args.n && !expect_op(P, ','))
                    return NULL;
                if (is_op(P, ']'))
                    break;
                jj_node *a = parse_subscribed(P);
                if (!a || !nvec_push(P, &args, a))
                    return NULL;
            }
            advance(P);
            if (args.n == 0)
                return pfail(P, "expected a subscript");
            jj_node *key = args.v[0];
            if (args.n > 1) {
                for (int i = 0; i < args.n; i++)
                    if (args.v[i]->kind == JN_SLICE) // x[1:2, 3]: Python's extended slicing, which no template needs
                        return pfail(P, "a slice cannot be part of a subscript tuple");
                key = node(P, JN_TUPLE, line);
                if (!key)
                    return NULL;
                key->list = args.v;
                key->n_list = args.n;
            }
            if (key->kind == JN_SLICE) {
                key->k[0] = n;
                n = key;
            } else {
                jj_node *g = node(P, JN_GETITEM, line);
                if (!g)
                    return NULL;
                g->k[0] = n;
                g->k[1] = key;
                n = g;
            }
        } else if (is_op(P, '(')) {
            jj_node *call = node(P, JN_CALL, line);
            nvec args = {0}, kw = {0};
            svec names = {0};
            if (!call || !parse_call_args(P, &args, &names, &kw))
                return NULL;
            call->k[0] = n;
            set_args(call, &args, &names, &kw);
            n = call;
        } else {
            break;
        }
    }
    return n;
}

static jj_node *parse_filter_expr(parser *P, jj_node *n)
{
    while (n) {
        if (is_op(P, '|'))
            n = parse_filter(P, n, false);
        else if (is_name(P, "is"))
            n = parse_test(P, n);
        else if (is_op(P, '('))
            n = parse_postfix(P, n);
        else
            break;
    }
    return n;
}

static jj_node *parse_tuple(parser *P, bool simplified, bool with_condexpr, const char *extra_end, bool explicit_paren)
{
    int line = cur(P)->line;
    nvec items = {0};
    bool is_tuple = false;
    for (;;) {
        if (items.n && !expect_op(P, ','))
            return NULL;
        const jj_token *t = cur(P);
        if (t->kind == JT_VAR_END || t->kind == JT_BLOCK_END || (t->kind == JT_OP && t->op == ')') ||
            (extra_end && is_name(P, extra_end)))
            break;
        jj_node *e = simplified ? parse_primary(P) : parse_expression(P, with_condexpr);
        if (!e || !nvec_push(P, &items, e))
            return NULL;
        if (is_op(P, ','))
            is_tuple = true;
        else
            break;
    }
    if (!is_tuple) {
        if (items.n)
            return items.v[0];
        if (!explicit_paren)
            return pfail(P, "expected an expression, got %s", describe(cur(P)));
    }
    jj_node *n = node(P, JN_TUPLE, line);
    if (n) {
        n->list = items.v;
        n->n_list = items.n;
    }
    return n;
}

static jj_node *parse_primary(parser *P)
{
    if (!enter(P))
        return NULL;
    const jj_token *t = cur(P);
    int line = t->line;
    jj_node *n = NULL;
    switch (t->kind) {
    case JT_NAME: {
        const char *s = t->s;
        if (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "false") || !strcmp(s, "False")) {
            n = const_node(P, (s[0] == 't' || s[0] == 'T') ? JV_TRUE : JV_FALSE, line);
        } else if (!strcmp(s, "none") || !strcmp(s, "None")) {
            n = const_node(P, JV_NONE_, line);
        } else if ((n = node(P, JN_NAME, line))) {
            n->name = s;
        }
        advance(P);
        break;
    }
    case JT_STRING: {
        size_t len = 0, k = 0;
        while (peek(P, k)->kind == JT_STRING)
            len += peek(P, k++)->len;
        char *s = jj_alloc(P->a, len + 1);
        jv *v = const_val(P, JV_STR);
        if (!s || !v)
            break;
        size_t o = 0;
        while (cur(P)->kind == JT_STRING) {
            memcpy(s + o, cur(P)->s, cur(P)->len);
            o += cur(P)->len;
            advance(P);
        }
        v->u.str.s = s;
        v->u.str.len = len;
        n = const_node(P, v, line);
        break;
    }
    case JT_INT:
    case JT_FLOAT: {
        jv *v = const_val(P, t->kind == JT_INT ? JV_INT : JV_FLOAT);
        if (v) {
            if (t->kind == JT_INT)
                v->u.i = t->i;
            else
                v->u.f = t->f;
        }
        advance(P);
        n = const_node(P, v, line);
        break;
    }
    case JT_OP:
        if (t->op == '(') {
            advance(P);
            n = parse_tuple(P, false, true, NULL, true);
            if (n && !expect_op(P, ')'))
                n = NULL;
        } else if (t->op == '[' || t->op == '{') {
            bool dict = t->op == '{';
            int close = dict ? '}' : ']';
            advance(P);
            nvec keys = {0}, vals = {0};
            while (!is_op(P, close)) {
                if (keys.n && !expect_op(P, ','))
                    goto out;
                if (is_op(P, close))
                    break;
                jj_node *k = parse_expression(P, true);
                if (!k || !nvec_push(P, &keys, k))
                    goto out;
                if (dict) {
                    jj_node *v = expect_op(P, ':') ? parse_expression(P, true) : NULL;
                    if (!v || !nvec_push(P, &vals, v))
                        goto out;
                }
            }
            advance(P);
            if ((n = node(P, dict ? JN_DICT : JN_LIST, line))) {
                n->list = keys.v;
                n->n_list = keys.n;
                n->list2 = vals.v;
                n->n_list2 = vals.n;
            }
        } else {
            pfail(P, "unexpected %s", describe(t));
        }
        break;
    default: pfail(P, "unexpected %s", describe(t)); break;
    }
out:
    P->depth--;
    return P->st ? NULL : n;
}

static jj_node *parse_unary(parser *P, bool with_filter)
{
    if (!enter(P))
        return NULL;
    jj_node *n;
    int line = cur(P)->line;
    if (is_op(P, '-') || is_op(P, '+')) {
        int op = cur(P)->op == '-' ? JO_NEG : JO_POS;
        advance(P);
        jj_node *x = parse_unary(P, false);
        n = x ? node(P, JN_UNARY, line) : NULL;
        if (n) {
            n->op = op;
            n->k[0] = x;
        }
    } else {
        n = parse_primary(P);
    }
    n = parse_postfix(P, n);
    if (with_filter)
        n = parse_filter_expr(P, n);
    P->depth--;
    return P->st ? NULL : n;
}

static jj_node *binary(parser *P, int op, jj_node *l, jj_node *r, int line)
{
    if (!l || !r)
        return NULL;
    jj_node *n = node(P, JN_BINARY, line);
    if (n) {
        n->op = op;
        n->k[0] = l;
        n->k[1] = r;
    }
    return n;
}

static jj_node *parse_pow(parser *P)
{
    jj_node *l = parse_unary(P, true);
    while (l && is_op(P, JO_POW)) {
        int line = cur(P)->line;
        advance(P);
        l = binary(P, JO_POW, l, parse_unary(P, true), line);
    }
    return l;
}

static jj_node *parse_math2(parser *P)
{
    jj_node *l = parse_pow(P);
    while (l && (is_op(P, '*') || is_op(P, '/') || is_op(P, JO_FLOORDIV) || is_op(P, '%'))) {
        int op = cur(P)->op, line = cur(P)->line;
        advance(P);
        l = binary(P, op, l, parse_pow(P), line);
    }
    return l;
}

static jj_node *parse_concat(parser *P)
{
    jj_node *l = parse_math2(P);
    while (l && is_op(P, '~')) {
        int line = cur(P)->line;
        advance(P);
        l = binary(P, '~', l, parse_math2(P), line);
    }
    return l;
}

static jj_node *parse_math1(parser *P)
{
    jj_node *l = parse_concat(P);
    while (l && (is_op(P, '+') || is_op(P, '-'))) {
        int op = cur(P)->op, line = cur(P)->line;
        advance(P);
        l = binary(P, op, l, parse_concat(P), line);
    }
    return l;
}

static jj_node *parse_compare(parser *P)
{
    int line = cur(P)->line;
    jj_node *first = parse_math1(P);
    if (!first)
        return NULL;
    nvec operands = {0};
    int ops[64], n_ops = 0;
    for (;;) {
        const jj_token *t = cur(P);
        int op = 0;
        if (t->kind == JT_OP && (t->op == JO_EQ || t->op == JO_NE || t->op == '<' || t->op == '>' ||
                                 t->op == JO_LE || t->op == JO_GE)) {
            op = t->op;
            advance(P);
        } else if (is_name(P, "in")) {
            op = JO_IN;
            advance(P);
        } else if (is_name(P, "not") && peek(P, 1)->kind == JT_NAME && !strcmp(peek(P, 1)->s, "in")) {
            op = JO_NOTIN;
            advance(P);
            advance(P);
        } else {
            break;
        }
        if (n_ops == 64)
            return pfail(P, "too many chained comparisons");
        jj_node *r = parse_math1(P);
        if (!r || !nvec_push(P, &operands, r))
            return NULL;
        ops[n_ops++] = op;
    }
    if (!n_ops)
        return first;
    jj_node *n = node(P, JN_COMPARE, line);
    int *o = jj_alloc(P->a, sizeof(int) * (size_t)n_ops);
    if (!n || !o)
        return pfail(P, "out of memory");
    memcpy(o, ops, sizeof(int) * (size_t)n_ops);
    n->k[0] = first;
    n->list = operands.v;
    n->n_list = operands.n;
    n->ops = o;
    return n;
}

static jj_node *parse_not(parser *P)
{
    if (is_name(P, "not")) {
        int line = cur(P)->line;
        advance(P);
        if (!enter(P))
            return NULL;
        jj_node *x = parse_not(P);
        P->depth--;
        jj_node *n = x ? node(P, JN_UNARY, line) : NULL;
        if (n) {
            n->op = JO_NOT;
            n->k[0] = x;
        }
        return n;
    }
    return parse_compare(P);
}

static jj_node *parse_and(parser *P)
{
    jj_node *l = parse_not(P);
    while (l && is_name(P, "and")) {
        int line = cur(P)->line;
        advance(P);
        l = binary(P, JO_AND, l, parse_not(P), line);
    }
    return l;
}

static jj_node *parse_or(parser *P)
{
    jj_node *l = parse_and(P);
    while (l && is_name(P, "or")) {
        int line = cur(P)->line;
        advance(P);
        l = binary(P, JO_OR, l, parse_and(P), line);
    }
    return l;
}

static jj_node *parse_expression(parser *P, bool with_condexpr)
{
    if (!enter(P))
        return NULL;
    jj_node *e = parse_or(P);
    while (with_condexpr && e && is_name(P, "if")) {
        int line = cur(P)->line;
        advance(P);
        jj_node *cond = parse_or(P), *other = NULL;
        if (cond && skip_name(P, "else"))
            other = parse_expression(P, true);
        if (!cond || (P->st))
            break;
        jj_node *n = node(P, JN_COND, line);
        if (!n)
            break;
        n->k[0] = cond;
        n->k[1] = e;
        n->k[2] = other;
        e = n;
    }
    P->depth--;
    return P->st ? NULL : e;
}

/* ---- statements ------------------------------------------------------------ */

static jj_node *parse_body(parser *P, const char *const *ends);

static bool can_assign(const jj_node *n)
{
    if (n->kind == JN_NAME)
        return true;
    if (n->kind != JN_TUPLE)
        return false;
    for (int i = 0; i < n->n_list; i++)
        if (!can_assign(n->list[i]))
            return false;
    return true;
}

static jj_node *parse_assign_target(parser *P, const char *extra_end, bool with_namespace)
{
    int line = cur(P)->line;
    if (with_namespace && cur(P)->kind == JT_NAME && peek(P, 1)->kind == JT_OP && peek(P, 1)->op == '.') {
        jj_node *base = node(P, JN_NAME, line), *g = node(P, JN_GETATTR, line);
        if (!base || !g)
            return NULL;
        base->name = cur(P)->s;
        advance(P);
        advance(P);
        if (cur(P)->kind != JT_NAME)
            return pfail(P, "expected an attribute name");
        g->k[0] = base;
        g->name = cur(P)->s;
        advance(P);
        return g;
    }
    jj_node *t = parse_tuple(P, true, true, extra_end, false);
    if (t && !can_assign(t))
        return pfail(P, "can't assign to this expression");
    return t;
}

static bool end_block(parser *P)
{
    return expect_kind(P, JT_BLOCK_END, "'%}'");
}

// Parses a macro/call signature "(a, b=1)" into names / defaults.
static bool parse_signature(parser *P, jj_node *n)
{
    svec names = {0};
    nvec defs = {0};
    bool any_default = false;
    if (!expect_op(P, '('))
        return false;
    while (!is_op(P, ')')) {
        if (names.n && !expect_op(P, ','))
            return false;
        if (cur(P)->kind != JT_NAME)
            return pfail(P, "expected an argument name, got %s", describe(cur(P))), false;
        const char *name = cur(P)->s;
        advance(P);
        jj_node *d = NULL;
        if (skip_op(P, '=')) {
            if (!(d = parse_expression(P, true)))
                return false;
            any_default = true;
        } else if (any_default) {
            return pfail(P, "non-default argument follows default argument"), false;
        }
        if (!svec_push(P, &names, name) || !nvec_push(P, &defs, d))
            return false;
    }
    advance(P);
    n->names = names.v;
    n->n_names = names.n;
    n->list2 = defs.v;
    n->n_list2 = defs.n;
    return true;
}

static jj_node *parse_body_end(parser *P, const char *end)
{
    const char *ends[] = {end, NULL};
    jj_node *b = parse_body(P, ends);
    if (b) {
        advance(P); // the end name
        if (!end_block(P))
            return NULL;
    }
    return b;
}

static jj_node *parse_for(parser *P, int line)
{
    jj_node *n = node(P, JS_FOR, line);
    if (!n || !(n->k[0] = parse_assign_target(P, "in", false)))
        return NULL;
    if (!skip_name(P, "in"))
        return pfail(P, "expected 'in' in a for loop");
    if (!(n->k[1] = parse_tuple(P, false, false, "recursive", false)))
        return NULL;
    if (skip_name(P, "if") && !(n->k[2] = parse_expression(P, true)))
        return NULL;
    n->op = skip_name(P, "recursive");
    if (!end_block(P))
        return NULL;
    static const char *const ends[] = {"endfor", "else", NULL};
    P->loops++;
    n->k[3] = parse_body(P, ends);
    P->loops--;
    if (!n->k[3])
        return NULL;
    if (is_name(P, "else")) {
        advance(P);
        if (!end_block(P) || !(n->k[4] = parse_body_end(P, "endfor")))
            return NULL;
    } else {
        advance(P);
        if (!end_block(P))
            return NULL;
    }
    return n;
}

static jj_node *parse_if(parser *P, int line)
{
    jj_node *n = node(P, JS_IF, line);
    if (!n || !(n->k[0] = parse_tuple(P, false, false, NULL, false)) || !end_block(P))
        return NULL;
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    if (!(n->k[1] = parse_body(P, ends)))
        return NULL;
    if (is_name(P, "elif")) {
        int l2 = cur(P)->line;
        advance(P);
        jj_node *b = node(P, JS_BODY, l2), *inner = b ? parse_if(P, l2) : NULL;
        if (!inner || !(b->list = jj_alloc(P->a, sizeof(jj_node *))))
            return NULL;
        b->list[0] = inner;
        b->n_list = 1;
        n->k[2] = b;
        return n; // the inner if consumed endif
    }
    if (is_name(P, "else")) {
        advance(P);
        if (!end_block(P) || !(n->k[2] = parse_body_end(P, "endif")))
            return NULL;
        return n;
    }
    advance(P);
    return end_block(P) ? n : NULL;
}

static jj_node *parse_statement(parser *P)
{
    const jj_token *t = cur(P);
    int line = t->line;
    if (t->kind != JT_NAME)
        return pfail(P, "expected a tag name, got %s", describe(t));
    const char *tag = t->s;
    advance(P);
    jj_node *n = NULL;
    if (!strcmp(tag, "for"))
        return parse_for(P, line);
    if (!strcmp(tag, "if"))
        return parse_if(P, line);
    if (!strcmp(tag, "set")) {
        jj_node *target = parse_assign_target(P, NULL, true);
        if (!target)
            return NULL;
        if (skip_op(P, '=')) {
            n = node(P, JS_SET, line);
            if (!n || !(n->k[1] = parse_tuple(P, false, true, NULL, false)) || !end_block(P))
                return NULL;
            n->k[0] = target;
            return n;
        }
        if (target->kind != JN_NAME)
            return pfail(P, "a block set assigns one name");
        n = node(P, JS_SETBLOCK, line);
        if (!n)
            return NULL;
        n->k[0] = target;
        if (is_op(P, '|') && !(n->k[2] = parse_filter(P, NULL, false)))
            return NULL;
        if (!end_block(P) || !(n->k[1] = parse_body_end(P, "endset")))
            return NULL;
        return n;
    }
    if (!strcmp(tag, "macro")) {
        n = node(P, JS_MACRO, line);
        if (!n)
            return NULL;
        if (cur(P)->kind != JT_NAME)
            return pfail(P, "expected a macro name");
        n->name = cur(P)->s;
        advance(P);
        int loops = P->loops;
        P->loops = 0;
        if (!parse_signature(P, n) || !end_block(P) || !(n->k[0] = parse_body_end(P, "endmacro")))
            return NULL;
        P->loops = loops;
        return n;
    }
    if (!strcmp(tag, "call")) {
        n = node(P, JS_CALLBLOCK, line);
        if (!n)
            return NULL;
        if (is_op(P, '(') && !parse_signature(P, n))
            return NULL;
        jj_node *call = parse_expression(P, true);
        if (!call)
            return NULL;
        if (call->kind != JN_CALL)
            return pfail(P, "expected a call in a call block");
        n->k[0] = call;
        int loops = P->loops;
        P->loops = 0;
        if (!end_block(P) || !(n->k[1] = parse_body_end(P, "endcall")))
            return NULL;
        P->loops = loops;
        return n;
    }
    if (!strcmp(tag, "filter")) {
        n = node(P, JS_FILTERBLK, line);
        if (!n || !(n->k[0] = parse_filter(P, NULL, true)) || !end_block(P) ||
            !(n->k[1] = parse_body_end(P, "endfilter")))
            return NULL;
        return n;
    }
    if (!strcmp(tag, "with")) {
        n = node(P, JS_WITH, line);
        nvec targets = {0}, vals = {0};
        if (!n)
            return NULL;
        while (cur(P)->kind != JT_BLOCK_END) {
            if (targets.n && !expect_op(P, ','))
                return NULL;
            jj_node *tg = parse_assign_target(P, NULL, false);
            if (!tg || !expect_op(P, '='))
                return NULL;
            jj_node *v = parse_expression(P, true);
            if (!v || !nvec_push(P, &targets, tg) || !nvec_push(P, &vals, v))
                return NULL;
        }
        n->list = targets.v;
        n->n_list = targets.n;
        n->list2 = vals.v;
        n->n_list2 = vals.n;
        if (!end_block(P) || !(n->k[0] = parse_body_end(P, "endwith")))
            return NULL;
        return n;
    }
    if (!strcmp(tag, "break") || !strcmp(tag, "continue")) {
        if (!P->loops)
            return pfail(P, "'%s' outside of a loop", tag);
        n = node(P, tag[0] == 'b' ? JS_BREAK : JS_CONTINUE, line);
        return n && end_block(P) ? n : NULL;
    }
    if (!strcmp(tag, "generation")) {
        if (!end_block(P))
            return NULL;
        return parse_body_end(P, "endgeneration");
    }
    return pfail(P, "unknown tag '%s'", tag);
}

// Parses statements until a block whose tag is in `ends` (left current, after its '{%'),
// or the end of the template when ends is NULL.
static jj_node *parse_body(parser *P, const char *const *ends)
{
    if (!enter(P))
        return NULL;
    int line = cur(P)->line;
    nvec items = {0};
    jj_node *body = NULL;
    for (;;) {
        const jj_token *t = cur(P);
        if (t->kind == JT_EOF) {
            if (ends) {
                pfail(P, "unexpected end of template, expected '%s'", ends[0]);
                goto out;
            }
            break;
        }
        jj_node *s = NULL;
        if (t->kind == JT_DATA) {
            jv *v = const_val(P, JV_STR);
            if (!v)
                goto out;
            v->u.str.s = jj_strndup(P->a, t->s, t->len);
            v->u.str.len = t->len;
            if (!v->u.str.s) {
                pfail(P, "out of memory");
                goto out;
            }
            s = node(P, JS_DATA, t->line);
            if (s)
                s->value = v;
            advance(P);
        } else if (t->kind == JT_VAR_BEGIN) {
            advance(P);
            s = node(P, JS_PRINT, t->line);
            if (s && (!(s->k[0] = parse_tuple(P, false, true, NULL, false)) ||
                      !expect_kind(P, JT_VAR_END, "'}}'")))
                s = NULL;
        } else if (t->kind == JT_BLOCK_BEGIN) {
            const jj_token *name = peek(P, 1);
            if (ends && name->kind == JT_NAME)
                for (int i = 0; ends[i]; i++)
                    if (!strcmp(name->s, ends[i])) {
                        advance(P);
                        goto done;
                    }
            advance(P);
            s = parse_statement(P);
        } else {
            pfail(P, "unexpected %s", describe(t));
        }
        if (!s || !nvec_push(P, &items, s))
            goto out;
    }
done:
    if ((body = node(P, JS_BODY, line))) {
        body->list = items.v;
        body->n_list = items.n;
    }
out:
    P->depth--;
    return P->st ? NULL : body;
}

rp_status jj_parse(jj_arena *a, const jj_token *toks, size_t n_toks, jj_node **root)
{
    parser P = {.a = a, .t = toks, .n = n_toks};
    jj_node *r = parse_body(&P, NULL);
    if (!r)
        return P.st ? P.st : RP_ERR(RP_ERR_INVALID, "template error: parse failed");
    *root = r;
    return RP_OK;
}
