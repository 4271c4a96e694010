/*
 * jinja_str.c - strings for the chat template interpreter: Python's str
 * operations (strip, split, replace, case mapping via utf8proc, splitlines),
 * `%`-formatting and str.format(), and the methods templates call on str, dict
 * and list values. Indexes count code points, as Python's do. Methods that would
 * mutate a value (list.append, dict.update) are refused, as transformers'
 * ImmutableSandboxedEnvironment refuses them.
 *
 * A Markup (jv.safe) follows markupsafe: `%` and .format() on a Markup escape what
 * they insert (_MarkupEscapeHelper, EscapeFormatter) and return a Markup; its text
 * methods (strip, upper, replace, split, ...) return Markup, escaping the text they
 * are given (replace's new, join's items, the fill of ljust/rjust/center).
 */
#include "jinja_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <utf8proc.h>

/* ---- string helpers ----------------------------------------------------------- */


jv *jj_sbuf_done(jj_sbuf *s)
{
    jv *r = s->c->st ? NULL : jv_str(s->c, s->b.s ? s->b.s : "", s->b.len);
    jj_buf_free(&s->b);
    return r;
}

bool jj_sput(jj_sbuf *s, const char *p, size_t n)
{
    return jj_buf_put(s->c, &s->b, p, n);
}

bool jj_sputc(jj_sbuf *s, uint32_t cp)
{
    char tmp[4];
    return jj_sput(s, tmp, jj_utf8_put(cp, tmp));
}

static bool cp_in(uint32_t cp, const jv *chars)
{
    for (size_t i = 0; i < chars->u.str.len;)
        if (jj_utf8_next(chars->u.str.s, chars->u.str.len, &i) == cp)
            return true;
    return false;
}

// Python str.strip/lstrip/rstrip; chars NULL: whitespace.
jv *jj_str_strip(jj_ctx *c, const jv *s, const jv *chars, bool left, bool right)
{
    const char *p = s->u.str.s;
    size_t len = s->u.str.len, a = 0, b = len;
    if (left)
        while (a < len) {
            size_t i = a;
            uint32_t cp = jj_utf8_next(p, len, &i);
            if (chars ? !cp_in(cp, chars) : !jj_py_isspace(cp))
                break;
            a = i;
        }
    if (right) {
        size_t end = a, i = a;
        while (i < len) {
            uint32_t cp = jj_utf8_next(p, len, &i);
            if (chars ? !cp_in(cp, chars) : !jj_py_isspace(cp))
                end = i;
        }
        b = end;
    }
    if (a == 0 && b == len)
        return (jv *)s;
    return jv_str(c, p + a, b - a);
}


static bool is_alpha_cp(uint32_t cp)
{
    utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)cp);
    return cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
}

jv *jj_str_case(jj_ctx *c, const jv *s, int mode)
{
    jj_sbuf o = {c, {0}};
    const char *p = s->u.str.s;
    size_t len = s->u.str.len;
    bool first = true, prev_cased = false, word_start = true;
    for (size_t i = 0; i < len;) {
        uint32_t cp = jj_utf8_next(p, len, &i);
        utf8proc_int32_t u = (utf8proc_int32_t)cp, r = u;
        if (cp > 0x10FFFF) {
            r = u;
        } else if (mode == JJ_CASE_UPPER) {
            r = utf8proc_toupper(u);
        } else if (mode == JJ_CASE_LOWER) {
            r = utf8proc_tolower(u);
        } else if (mode == JJ_CASE_CAPITALIZE) {
            r = first ? utf8proc_totitle(u) : utf8proc_tolower(u);
        } else if (mode == JJ_CASE_SWAP) {
            r = utf8proc_isupper(u) ? utf8proc_tolower(u) : utf8proc_islower(u) ? utf8proc_toupper(u) : u;
        } else if (mode == JJ_CASE_TITLE_METHOD) {
            // str.title(): upper after an uncased character, lower after a cased one
            bool cased = is_alpha_cp(cp);
            r = cased ? (prev_cased ? utf8proc_tolower(u) : utf8proc_totitle(u)) : u;
            prev_cased = cased;
        } else {
            // jinja2's title filter: words begin after whitespace, '-', '(', '{', '[', '<'
            bool sep = jj_py_isspace(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
            r = sep ? u : word_start ? utf8proc_toupper(u) : utf8proc_tolower(u);
            word_start = sep;
        }
        first = false;
        if (!jj_sputc(&o, (uint32_t)r))
            break;
    }
    return jj_sbuf_done(&o);
}

jv *jj_str_replace(jj_ctx *c, const jv *s, const jv *old, const jv *new_, int64_t count)
{
    jj_sbuf o = {c, {0}};
    const char *p = s->u.str.s;
    size_t len = s->u.str.len, ol = old->u.str.len;
    if (count < 0)
        count = INT64_MAX;
    if (ol == 0) {
        // Python inserts `new` before every character and at the end
        size_t i = 0;
        int64_t done = 0;
        while (done < count && i <= len) {
            if (!jj_sput(&o, new_->u.str.s, new_->u.str.len))
                break;
            done++;
            if (i == len) {
                i++;
                break;
            }
            size_t st = i;
            jj_utf8_next(p, len, &i);
            jj_sput(&o, p + st, i - st);
        }
        if (i <= len)
            jj_sput(&o, p + i, len - i);
        return jj_sbuf_done(&o);
    }
    size_t i = 0;
    for (int64_t done = 0; done < count;) {
        const char *hit = memmem(p + i, len - i, old->u.str.s, ol);
        if (!hit)
            break;
        size_t at = (size_t)(hit - p);
        if (!jj_sput(&o, p + i, at - i) || !jj_sput(&o, new_->u.str.s, new_->u.str.len))
            break;
        i = at + ol;
        done++;
    }
    jj_sput(&o, p + i, len - i);
    return jj_sbuf_done(&o);
}

// Python str.split(sep, maxsplit) / rsplit.
jv *jj_str_split(jj_ctx *c, const jv *s, const jv *sep, int64_t maxsplit, bool from_right)
{
    const char *p = s->u.str.s;
    size_t len = s->u.str.len;
    jv *l = jv_list(c, 0);
    if (!l)
        return NULL;
    if (maxsplit < 0)
        maxsplit = INT64_MAX;
    if (!jj_given(sep)) {
        // whitespace runs; leading/trailing whitespace ignored
        size_t n_cp = jj_utf8_count(p, len);
        size_t *offs = jj_calloc(c, (n_cp + 1) * sizeof(size_t));
        bool *sp = jj_calloc(c, n_cp + 1);
        if (!offs || !sp)
            return NULL;
        for (size_t i = 0, k = 0; i < len; k++) {
            offs[k] = i;
            sp[k] = jj_py_isspace(jj_utf8_next(p, len, &i));
        }
        offs[n_cp] = len;
        jv *parts = jv_list(c, 0);
        if (!parts)
            return NULL;
        if (!from_right) {
            size_t k = 0;
            int64_t splits = 0;
            while (k < n_cp) {
                while (k < n_cp && sp[k])
                    k++;
                if (k == n_cp)
                    break;
                size_t start = k;
                if (splits == maxsplit) {
                    size_t e = n_cp;
                    while (e > start && sp[e - 1])
                        e--;
                    jv *w = jv_str(c, p + offs[start], offs[e] - offs[start]);
                    if (!w || !jv_list_push(c, parts, w))
                        return NULL;
                    break;
                }
                while (k < n_cp && !sp[k])
                    k++;
                jv *w = jv_str(c, p + offs[start], offs[k] - offs[start]);
                if (!w || !jv_list_push(c, parts, w))
                    return NULL;
                splits++;
            }
            return parts;
        }
        size_t k = n_cp;
        int64_t splits = 0;
        while (k > 0) {
            while (k > 0 && sp[k - 1])
                k--;
            if (k == 0)
                break;
            size_t end = k;
            if (splits == maxsplit) {
                size_t b = 0;
                while (b < end && sp[b])
                    b++;
                jv *w = jv_str(c, p + offs[b], offs[end] - offs[b]);
                if (!w || !jv_list_push(c, parts, w))
                    return NULL;
                break;
            }
            while (k > 0 && !sp[k - 1])
                k--;
            jv *w = jv_str(c, p + offs[k], offs[end] - offs[k]);
            if (!w || !jv_list_push(c, parts, w))
                return NULL;
            splits++;
        }
        for (size_t i = 0; i < parts->u.list.n / 2; i++) {
            jv *t = parts->u.list.items[i];
            parts->u.list.items[i] = parts->u.list.items[parts->u.list.n - 1 - i];
            parts->u.list.items[parts->u.list.n - 1 - i] = t;
        }
        return parts;
    }
    if (!jj_want_str(c, sep, "split"))
        return NULL;
    size_t sl = sep->u.str.len;
    if (sl == 0)
        return jj_fail(c, RP_ERR_INVALID, "empty separator"), NULL;
    if (!from_right) {
        size_t i = 0;
        for (int64_t k = 0; k < maxsplit; k++) {
            const char *hit = memmem(p + i, len - i, sep->u.str.s, sl);
            if (!hit)
                break;
            jv *w = jv_str(c, p + i, (size_t)(hit - p) - i);
            if (!w || !jv_list_push(c, l, w))
                return NULL;
            i = (size_t)(hit - p) + sl;
        }
        jv *w = jv_str(c, p + i, len - i);
        return w && jv_list_push(c, l, w) ? l : NULL;
    }
    size_t end = len;
    jv *parts = jv_list(c, 0);
    if (!parts)
        return NULL;
    for (int64_t k = 0; k < maxsplit && end >= sl; k++) {
        size_t at = end - sl;
        bool found = false;
        for (;; at--) {
            if (memcmp(p + at, sep->u.str.s, sl) == 0) {
                found = true;
                break;
            }
            if (at == 0)
                break;
        }
        if (!found)
            break;
        jv *w = jv_str(c, p + at + sl, end - at - sl);
        if (!w || !jv_list_push(c, parts, w))
            return NULL;
        end = at;
    }
    jv *w = jv_str(c, p, end);
    if (!w || !jv_list_push(c, parts, w))
        return NULL;
    for (size_t i = parts->u.list.n; i-- > 0;)
        if (!jv_list_push(c, l, parts->u.list.items[i]))
            return NULL;
    return l;
}

static bool is_line_break(uint32_t cp)
{
    return cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || cp == 0x1C || cp == 0x1D || cp == 0x1E ||
           cp == 0x85 || cp == 0x2028 || cp == 0x2029;
}

// Python str.jj_str_splitlines() (keepends=False).
jv *jj_str_splitlines(jj_ctx *c, const jv *s)
{
    jv *l = jv_list(c, 0);
    const char *p = s->u.str.s;
    size_t len = s->u.str.len, start = 0, i = 0;
    if (!l)
        return NULL;
    while (i < len) {
        size_t at = i;
        uint32_t cp = jj_utf8_next(p, len, &i);
        if (!is_line_break(cp))
            continue;
        jv *w = jv_str(c, p + start, at - start);
        if (!w || !jv_list_push(c, l, w))
            return NULL;
        if (cp == '\r' && i < len && p[i] == '\n')
            i++;
        start = i;
    }
    if (start < len) {
        jv *w = jv_str(c, p + start, len - start);
        if (!w || !jv_list_push(c, l, w))
            return NULL;
    }
    return l;
}

static bool match_affix(jj_ctx *c, const jv *s, const jv *affix, bool end, int *out)
{
    if (affix->kind == JV_LIST && affix->tuple) {
        *out = 0;
        for (size_t i = 0; i < affix->u.list.n && !*out; i++)
            if (!match_affix(c, s, affix->u.list.items[i], end, out))
                return false;
        return true;
    }
    if (!jj_want_str(c, affix, end ? "endswith" : "startswith"))
        return false;
    size_t n = affix->u.str.len;
    *out = n <= s->u.str.len && memcmp(s->u.str.s + (end ? s->u.str.len - n : 0), affix->u.str.s, n) == 0;
    return true;
}

jv *jj_html_escape(jj_ctx *c, const jv *s)
{
    jj_sbuf o = {c, {0}};
    for (size_t i = 0; i < s->u.str.len; i++) {
        char ch = s->u.str.s[i];
        const char *r = ch == '&' ? "&amp;" : ch == '<' ? "&lt;" : ch == '>' ? "&gt;" : ch == '"' ? "&#34;" :
                        ch == '\'' ? "&#39;" : NULL;
        if (!(r ? jj_sput(&o, r, strlen(r)) : jj_sput(&o, &ch, 1)))
            break;
    }
    return jj_sbuf_done(&o);
}

/* ---- formatting --------------------------------------------------------------- */

// One %-conversion or format-spec field with flags/width/precision applied to text.
bool jj_pad_put(jj_sbuf *o, const char *text, size_t len, int64_t width, char align, char fill)
{
    int64_t n = (int64_t)jj_utf8_count(text, len);
    int64_t padn = width > n ? width - n : 0;
    if (padn > (int64_t)JJ_MAX_OUTPUT)
        return jj_fail(o->c, RP_ERR_LIMIT, "format width too large"), false;
    int64_t left = align == '<' ? 0 : align == '^' ? padn / 2 : padn, right = padn - left;
    for (int64_t k = 0; k < left; k++)
        if (!jj_sput(o, &fill, 1))
            return false;
    if (!jj_sput(o, text, len))
        return false;
    for (int64_t k = 0; k < right; k++)
        if (!jj_sput(o, &fill, 1))
            return false;
    return true;
}

// A number by a conversion type of Python's formats: d i o x X (integers), e E f F g G,
// % (percent). The type reaches snprintf's format, so nothing else may pass (%n writes).
static bool format_number(jj_ctx *c, const jv *v, char type, int prec, bool plus, bool space, char *out, size_t cap)
{
    if (!type || !strchr("dioxXeEfFgG%", type))
        return jj_fail(c, RP_ERR_INVALID, "unsupported format type '%c'", type ? type : '?'), false;
    if (!jv_is_num(v))
        return jj_fail(c, RP_ERR_INVALID, "a number is required, not %s", jv_type_name(v)), false;
    char flags[4] = {0};
    int f = 0;
    if (plus)
        flags[f++] = '+';
    else if (space)
        flags[f++] = ' ';
    if (type == 'd' || type == 'i' || type == 'x' || type == 'X' || type == 'o') {
        long long i = v->kind == JV_FLOAT ? (long long)v->u.f : (long long)(v->kind == JV_BOOL ? v->u.b : v->u.i);
        if (v->kind == JV_FLOAT && !isfinite(v->u.f))
            return jj_fail(c, RP_ERR_INVALID, "cannot convert float to integer"), false;
        char fmt[16];
        snprintf(fmt, sizeof(fmt), "%%%sll%c", flags, type == 'i' ? 'd' : type);
        snprintf(out, cap, fmt, i);
        return true;
    }
    char fmt[24];
    snprintf(fmt, sizeof(fmt), "%%%s.%d%c%s", flags, prec < 0 ? 6 : prec > 100 ? 100 : prec, type == '%' ? 'f' : type,
             type == '%' ? "%%" : "");
    snprintf(out, cap, fmt, type == '%' ? jv_num(v) * 100 : jv_num(v));
    return true;
}

// Markup % x converts a str argument for a numeric conversion with int()/float(), as
// _MarkupEscapeHelper.__int__/__float__ do (plain str % refuses it). NULL + error if it is not a number.
static jv *markup_number_arg(jj_ctx *c, jv *v, char type)
{
    if (v->kind != JV_STR)
        return v;
    jv *t = jj_str_strip(c, v, NULL, true, true);
    if (!t)
        return NULL;
    char *end = NULL;
    if (t->u.str.len && t->u.str.len < 100 && !strpbrk(t->u.str.s, "xXpP_")) {
        if (strchr("diu", type)) {
            long long i = strtoll(t->u.str.s, &end, 10);
            if (!*end)
                return jv_int(c, i);
        } else {
            double d = strtod(t->u.str.s, &end);
            if (!*end)
                return jv_float(c, d);
        }
    }
    return jj_fail(c, RP_ERR_INVALID, "invalid literal for %s(): '%.40s'", strchr("diu", type) ? "int" : "float",
                   v->u.str.s),
           NULL;
}

jv *jj_percent_format(jj_ctx *c, const jv *fmt, jv *args)
{
    jj_sbuf o = {c, {0}};
    bool markup = fmt->safe;
    const char *p = fmt->u.str.s;
    size_t len = fmt->u.str.len, argi = 0;
    bool tuple = args->kind == JV_LIST && args->tuple, mapping = args->kind == JV_DICT;
    size_t n_args = tuple ? args->u.list.n : 1;
    for (size_t i = 0; i < len && !c->st; i++) {
        if (p[i] != '%') {
            jj_sput(&o, p + i, 1);
            continue;
        }
        if (++i >= len)
            return jj_fail(c, RP_ERR_INVALID, "incomplete format"), jj_buf_free(&o.b), NULL;
        jv *v = NULL;
        if (p[i] == '(') {
            size_t e = i + 1;
            while (e < len && p[e] != ')')
                e++;
            if (e >= len || !mapping)
                return jj_fail(c, RP_ERR_INVALID, "format requires a mapping"), jj_buf_free(&o.b), NULL;
            char key[256];
            snprintf(key, sizeof(key), "%.*s", (int)(e - i - 1), p + i + 1);
            v = jv_dict_gets(args, key);
            if (!v)
                return jj_fail(c, RP_ERR_INVALID, "format key '%s' missing", key), jj_buf_free(&o.b), NULL;
            i = e + 1;
        }
        bool minus = false, zero = false, plus = false, space = false;
        for (; i < len && p[i] && strchr("-0+ #", p[i]); i++) { // (strchr finds a NUL too)
            minus |= p[i] == '-';
            zero |= p[i] == '0';
            plus |= p[i] == '+';
            space |= p[i] == ' ';
        }
        int64_t width = 0;
        int prec = -1;
        for (; i < len && p[i] >= '0' && p[i] <= '9'; i++)
            width = width < 100000 ? width * 10 + (p[i] - '0') : width;
        if (i < len && p[i] == '.') {
            prec = 0;
            for (i++; i < len && p[i] >= '0' && p[i] <= '9'; i++)
                prec = prec < 1000 ? prec * 10 + (p[i] - '0') : prec;
        }
        if (i >= len)
            return jj_fail(c, RP_ERR_INVALID, "incomplete format"), jj_buf_free(&o.b), NULL;
        char type = p[i];
        if (type == '%') {
            jj_sput(&o, "%", 1);
            continue;
        }
        if (!v) {
            if (argi >= n_args)
                return jj_fail(c, RP_ERR_INVALID, "not enough arguments for format string"), jj_buf_free(&o.b), NULL;
            v = tuple ? args->u.list.items[argi] : args;
            argi++;
        }
        jj_buf t = {0};
        char num[512];
        bool ok;
        if (type == 's' || type == 'r' || type == 'a') {
            ok = type == 's' ? jv_to_str(c, &t, v) : jv_repr(c, &t, v, 0);
            if (ok && markup && !(type == 's' && v->kind == JV_STR && v->safe)) {
                // str(escape(x)) / escape(repr(x)), before the precision cuts it
                jv *raw = jv_str(c, t.s ? t.s : "", t.len), *esc = raw ? jj_html_escape(c, raw) : NULL;
                t.len = 0;
                ok = esc && jj_buf_put(c, &t, esc->u.str.s, esc->u.str.len);
            }
            if (ok && prec >= 0)
                t.len = jj_utf8_offset(t.s ? t.s : "", t.len, (size_t)prec);
        } else if (markup && type && strchr("oxX", type)) {
            // _MarkupEscapeHelper has no __index__
            ok = false;
            jj_fail(c, RP_ERR_INVALID, "%%%c format: an integer is required, not _MarkupEscapeHelper", type);
        } else if (type && strchr("diouxXeEfFgG", type)) {
            if (markup && !(v = markup_number_arg(c, v, type)))
                ok = false;
            else
                ok = format_number(c, v, type == 'u' ? 'd' : type, prec, plus, space, num, sizeof(num)) &&
                     jj_buf_put(c, &t, num, strlen(num));
        } else {
            ok = false;
            jj_fail(c, RP_ERR_INVALID, "unsupported format character %c", type);
        }
        if (ok)
            jj_pad_put(&o, t.s ? t.s : "", t.len, width, minus ? '<' : '>', zero && !minus && type != 's' ? '0' : ' ');
        jj_buf_free(&t);
    }
    if (!c->st && !mapping && argi < n_args && !(args->kind == JV_DICT))
        jj_fail(c, RP_ERR_INVALID, "not all arguments converted during string formatting");
    return jv_keep_safe(c, fmt, jj_sbuf_done(&o));
}

// Python str.format(*args, **kwargs) with the common format specs.
static jv *str_format(jj_ctx *c, const jv *fmt, jv **args, int n_args, const char **kw_names, jv **kw_vals, int n_kw)
{
    jj_sbuf o = {c, {0}};
    const char *p = fmt->u.str.s;
    size_t len = fmt->u.str.len;
    int auto_i = 0;
    for (size_t i = 0; i < len && !c->st; i++) {
        if (p[i] == '}') {
            if (i + 1 < len && p[i + 1] == '}')
                i++;
            else
                return jj_fail(c, RP_ERR_INVALID, "single '}' encountered in format string"), jj_buf_free(&o.b), NULL;
            jj_sput(&o, "}", 1);
            continue;
        }
        if (p[i] != '{') {
            jj_sput(&o, p + i, 1);
            continue;
        }
        if (i + 1 < len && p[i + 1] == '{') {
            jj_sput(&o, "{", 1);
            i++;
            continue;
        }
        size_t e = i + 1;
        while (e < len && p[e] != '}')
            e++;
        if (e >= len)
            return jj_fail(c, RP_ERR_INVALID, "single '{' encountered in format string"), jj_buf_free(&o.b), NULL;
        char field[256];
        snprintf(field, sizeof(field), "%.*s", (int)(e - i - 1), p + i + 1);
        i = e;
        char *spec = strchr(field, ':');
        if (spec)
            *spec++ = 0;
        char *conv = strchr(field, '!');
        if (conv)
            *conv++ = 0;
        jv *v = NULL;
        if (!field[0]) {
            if (auto_i >= n_args)
                return jj_fail(c, RP_ERR_INVALID, "replacement index %d out of range", auto_i), jj_buf_free(&o.b), NULL;
            v = args[auto_i++];
        } else if (field[0] >= '0' && field[0] <= '9') {
            int k = atoi(field);
            if (k >= n_args)
                return jj_fail(c, RP_ERR_INVALID, "replacement index %d out of range", k), jj_buf_free(&o.b), NULL;
            v = args[k];
        } else {
            for (int k = 0; k < n_kw && !v; k++)
                if (!strcmp(kw_names[k], field))
                    v = kw_vals[k];
            if (!v)
                return jj_fail(c, RP_ERR_INVALID, "KeyError: '%s'", field), jj_buf_free(&o.b), NULL;
        }
        if (fmt->safe && v->kind == JV_STR && v->safe && !conv) {
            // EscapeFormatter.format_field: a Markup goes in as it is (Markup.__html_format__), with no spec
            if (spec && *spec)
                return jj_fail(c, RP_ERR_INVALID, "Unsupported format specification for Markup."),
                       jj_buf_free(&o.b), NULL;
            jj_sput(&o, v->u.str.s, v->u.str.len);
            continue;
        }
        jj_buf t = {0};
        bool ok;
        char type = 0, align = 0, fill = ' ';
        int64_t width = 0;
        int prec = -1;
        bool plus = false;
        if (spec && *spec) {
            const char *s = spec;
            if (s[0] && s[1] && strchr("<>^=", s[1])) {
                fill = s[0];
                align = s[1];
                s += 2;
            } else if (strchr("<>^=", s[0])) {
                align = s[0];
                s++;
            }
            if (*s == '+' || *s == '-' || *s == ' ')
                plus = *s++ == '+';
            if (*s == '0') {
                fill = '0';
                if (!align)
                    align = '=';
                s++;
            }
            while (*s >= '0' && *s <= '9')
                width = width < 100000 ? width * 10 + (*s++ - '0') : width;
            if (*s == '.')
                for (prec = 0, s++; *s >= '0' && *s <= '9'; s++)
                    prec = prec < 1000 ? prec * 10 + (*s - '0') : prec;
            if (*s)
                type = *s++;
            if (*s)
                return jj_fail(c, RP_ERR_INVALID, "invalid format specifier"), jj_buf_free(&o.b), NULL;
        }
        if (conv && *conv == 'r')
            ok = jv_repr(c, &t, v, 0);
        else if (type && type != 's') {
            char num[512];
            ok = format_number(c, v, type, prec, plus, false, num, sizeof(num)) && jj_buf_put(c, &t, num, strlen(num));
        } else if (jv_is_num(v) && prec >= 0 && v->kind == JV_FLOAT) {
            char num[512];
            ok = format_number(c, v, 'g', prec, plus, false, num, sizeof(num)) && jj_buf_put(c, &t, num, strlen(num));
        } else {
            ok = jv_to_str(c, &t, v);
            if (ok && prec >= 0 && v->kind == JV_STR)
                t.len = jj_utf8_offset(t.s ? t.s : "", t.len, (size_t)prec);
        }
        if (!align)
            align = jv_is_num(v) && v->kind != JV_BOOL ? '>' : '<';
        if (align == '=')
            align = '>';
        if (ok && !fmt->safe) {
            jj_pad_put(&o, t.s ? t.s : "", t.len, width, align, fill);
        } else if (ok) {
            // EscapeFormatter: the formatted field, padding included, is escaped
            jj_sbuf f = {c, {0}};
            jj_pad_put(&f, t.s ? t.s : "", t.len, width, align, fill);
            jv *fs = jj_sbuf_done(&f), *esc = fs ? jj_html_escape(c, fs) : NULL;
            if (esc)
                jj_sput(&o, esc->u.str.s, esc->u.str.len);
        }
        jj_buf_free(&t);
    }
    return jv_keep_safe(c, fmt, jj_sbuf_done(&o));
}

/* ---- methods ------------------------------------------------------------------ */

static const char *const str_methods[] = {
    "capitalize", "casefold", "center", "count", "encode", "endswith", "expandtabs", "find", "format", "format_map",
    "index", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "isidentifier", "islower", "isnumeric",
    "isprintable", "isspace", "istitle", "isupper", "join", "ljust", "lower", "lstrip", "maketrans", "partition",
    "removeprefix", "removesuffix", "replace", "rfind", "rindex", "rjust", "rpartition", "rsplit", "rstrip", "split",
    "splitlines", "startswith", "strip", "swapcase", "title", "translate", "upper", "zfill", NULL};
static const char *const dict_methods[] = {"clear", "copy", "fromkeys", "get", "items", "keys", "pop", "popitem",
                                           "setdefault", "update", "values", NULL};
static const char *const list_methods[] = {"append", "clear", "copy", "count", "extend", "index", "insert", "pop",
                                           "remove", "reverse", "sort", NULL};

static bool in_list(const char *const *l, const char *name)
{
    for (int i = 0; l[i]; i++)
        if (!strcmp(l[i], name))
            return true;
    return false;
}

bool jj_has_method(const jv *self, const char *name)
{
    switch (self->kind) {
    case JV_STR: return in_list(str_methods, name);
    case JV_DICT: return in_list(dict_methods, name);
    case JV_LIST:
        return !self->gen && in_list(list_methods, name) &&
               (!self->tuple || !strcmp(name, "count") || !strcmp(name, "index"));
    default: return false;
    }
}

static jv *find_sub(jj_ctx *c, jv *self, jv **args, int n_args, bool rev, bool count, bool raise)
{
    if (n_args < 1 || !jj_want_str(c, args[0], "find"))
        return n_args < 1 ? (jj_fail(c, RP_ERR_INVALID, "find/count need an argument"), NULL) : NULL;
    const char *s = self->u.str.s, *sub = args[0]->u.str.s;
    size_t len = self->u.str.len, sl = args[0]->u.str.len;
    if (count) {
        int64_t n = 0;
        if (sl == 0)
            return jv_int(c, (int64_t)jj_utf8_count(s, len) + 1);
        for (const char *p = s; (p = memmem(p, len - (size_t)(p - s), sub, sl)); p += sl)
            n++;
        return jv_int(c, n);
    }
    const char *hit = NULL;
    if (!rev) {
        hit = memmem(s, len, sub, sl);
    } else {
        for (size_t at = len >= sl ? len - sl + 1 : 0; at-- > 0;)
            if (memcmp(s + at, sub, sl) == 0) {
                hit = s + at;
                break;
            }
    }
    if (!hit && raise)
        return jj_fail(c, RP_ERR_INVALID, "substring not found"), NULL;
    return jv_int(c, hit ? (int64_t)jj_utf8_count(s, (size_t)(hit - s)) : -1);
}

static jv *str_method(jj_ctx *c, jv *self, const char *name, jv **args, int n_args, const char **kw_names,
                      jv **kw_vals, int n_kw)
{
    if (!strcmp(name, "format"))
        return str_format(c, self, args, n_args, kw_names, kw_vals, n_kw);
    if (!strcmp(name, "strip") || !strcmp(name, "lstrip") || !strcmp(name, "rstrip")) {
        BIND(name, "chars");
        if (jj_given(a[0]) && !jj_want_str(c, a[0], name))
            return NULL;
        return jj_str_strip(c, self, jj_given(a[0]) ? a[0] : NULL, name[0] != 'r', name[0] != 'l');
    }
    if (!strcmp(name, "split") || !strcmp(name, "rsplit")) {
        BIND(name, "sep", "maxsplit");
        int64_t maxsplit = -1;
        if (a[1] && !jj_want_int(c, a[1], "maxsplit", &maxsplit))
            return NULL;
        return jj_str_split(c, self, a[0], maxsplit, name[0] == 'r');
    }
    if (!strcmp(name, "startswith") || !strcmp(name, "endswith")) {
        if (n_args < 1)
            return jj_fail(c, RP_ERR_INVALID, "%s needs an argument", name), NULL;
        int r;
        return match_affix(c, self, args[0], name[0] == 'e', &r) ? jv_bool(r) : NULL;
    }
    if (!strcmp(name, "upper") || !strcmp(name, "lower") || !strcmp(name, "casefold") || !strcmp(name, "title") ||
        !strcmp(name, "capitalize") || !strcmp(name, "swapcase")) {
        int mode = name[0] == 'u' ? JJ_CASE_UPPER : (name[0] == 'l' || !strcmp(name, "casefold")) ? JJ_CASE_LOWER :
                   name[0] == 't' ? JJ_CASE_TITLE_METHOD : name[0] == 's' ? JJ_CASE_SWAP : JJ_CASE_CAPITALIZE;
        return jj_str_case(c, self, mode);
    }
    if (!strcmp(name, "replace")) {
        BIND("replace", "old", "new", "count");
        int64_t count = -1;
        if (!a[0] || !a[1])
            return jj_fail(c, RP_ERR_INVALID, "replace needs old and new"), NULL;
        if (!jj_want_str(c, a[0], "replace") || !jj_want_str(c, a[1], "replace") ||
            (a[2] && !jj_want_int(c, a[2], "replace count", &count)))
            return NULL;
        return jj_str_replace(c, self, a[0], a[1], count);
    }
    if (!strcmp(name, "join")) {
        if (n_args != 1)
            return jj_fail(c, RP_ERR_INVALID, "join takes one argument"), NULL;
        jv *items = jv_iter_list(c, args[0]);
        if (!items)
            return NULL;
        jj_sbuf o = {c, {0}};
        for (size_t i = 0; i < items->u.list.n; i++) {
            jv *x = items->u.list.items[i];
            if (x->kind != JV_STR) {
                jj_buf_free(&o.b);
                return jj_fail(c, RP_ERR_INVALID, "sequence item %zu: expected str instance, %s found", i,
                               jv_type_name(x)),
                       NULL;
            }
            if ((i && !jj_sput(&o, self->u.str.s, self->u.str.len)) || !jj_sput(&o, x->u.str.s, x->u.str.len))
                break;
        }
        return jj_sbuf_done(&o);
    }
    if (!strcmp(name, "find") || !strcmp(name, "rfind") || !strcmp(name, "index") || !strcmp(name, "rindex"))
        return find_sub(c, self, args, n_args, name[0] == 'r', false, strstr(name, "index") != NULL);
    if (!strcmp(name, "count"))
        return find_sub(c, self, args, n_args, false, true, false);
    if (!strcmp(name, "splitlines"))
        return jj_str_splitlines(c, self);
    if (!strcmp(name, "removeprefix") || !strcmp(name, "removesuffix")) {
        if (n_args != 1 || !jj_want_str(c, args[0], name))
            return n_args != 1 ? (jj_fail(c, RP_ERR_INVALID, "%s takes one argument", name), NULL) : NULL;
        int r;
        bool suffix = name[6] == 's';
        if (!match_affix(c, self, args[0], suffix, &r))
            return NULL;
        if (!r)
            return self;
        size_t n = args[0]->u.str.len;
        return jv_str(c, self->u.str.s + (suffix ? 0 : n), self->u.str.len - n);
    }
    if (!strncmp(name, "is", 2)) {
        bool any = false, ok = true, cased = false;
        for (size_t i = 0; i < self->u.str.len;) {
            uint32_t cp = jj_utf8_next(self->u.str.s, self->u.str.len, &i);
            utf8proc_int32_t u = cp > 0x10FFFF ? 0 : (utf8proc_int32_t)cp;
            utf8proc_category_t cat = utf8proc_category(u);
            any = true;
            bool digit = cat == UTF8PROC_CATEGORY_ND, alpha = is_alpha_cp(cp);
            if (!strcmp(name, "isdigit") || !strcmp(name, "isdecimal") || !strcmp(name, "isnumeric"))
                ok = ok && (digit || (name[2] == 'n' && (cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_NO)));
            else if (!strcmp(name, "isalpha"))
                ok = ok && alpha;
            else if (!strcmp(name, "isalnum"))
                ok = ok && (alpha || digit);
            else if (!strcmp(name, "isspace"))
                ok = ok && jj_py_isspace(cp);
            else if (!strcmp(name, "isascii"))
                ok = ok && cp < 0x80;
            else if (!strcmp(name, "isupper") || !strcmp(name, "islower")) {
                bool up = utf8proc_isupper(u), lo = utf8proc_islower(u);
                cased = cased || up || lo;
                ok = ok && (name[2] == 'u' ? !lo : !up);
            } else
                return jj_fail(c, RP_ERR_INVALID, "str.%s is not supported", name), NULL;
        }
        if (!strcmp(name, "isascii"))
            return jv_bool(ok);
        if (!strcmp(name, "isupper") || !strcmp(name, "islower"))
            return jv_bool(ok && cased);
        return jv_bool(any && ok);
    }
    if (!strcmp(name, "zfill") || !strcmp(name, "ljust") || !strcmp(name, "rjust") || !strcmp(name, "center")) {
        int64_t w;
        if (n_args < 1 || !jj_want_int(c, args[0], name, &w))
            return n_args < 1 ? (jj_fail(c, RP_ERR_INVALID, "%s needs a width", name), NULL) : NULL;
        char fill = ' ';
        if (n_args > 1 && args[1]->kind == JV_STR && args[1]->u.str.len == 1)
            fill = args[1]->u.str.s[0];
        jj_sbuf o = {c, {0}};
        if (name[0] == 'z') {
            const char *s = self->u.str.s;
            size_t len = self->u.str.len, sign = len && (s[0] == '-' || s[0] == '+');
            int64_t n = (int64_t)jj_utf8_count(s, len);
            jj_sput(&o, s, sign);
            for (int64_t k = n; k < w && !c->st; k++)
                jj_sput(&o, "0", 1);
            jj_sput(&o, s + sign, len - sign);
            return jj_sbuf_done(&o);
        }
        int64_t n = (int64_t)jj_utf8_count(self->u.str.s, self->u.str.len), pad = w > n ? w - n : 0;
        int64_t left = name[0] == 'l' ? 0 : name[0] == 'r' ? pad : pad / 2 + (pad & w & 1);
        jj_pad_put(&o, self->u.str.s, self->u.str.len, n + left, '>', fill);
        for (int64_t k = 0; k < pad - left && !c->st; k++)
            jj_sput(&o, &fill, 1);
        return jj_sbuf_done(&o);
    }
    return jj_fail(c, RP_ERR_INVALID, "str.%s is not supported", name), NULL;
}

// Markup's methods (markupsafe): those that return text return a Markup, after escaping the text they insert
// (replace's new, join's items, the fill character of ljust/rjust/center); split/rsplit/splitlines give
// Markup items; the rest (find, startswith, ...) are str's.
static jv *markup_method(jj_ctx *c, jv *self, const char *name, jv **args, int n_args, const char **kw_names,
                         jv **kw_vals, int n_kw)
{
    static const char *const keep[] = {"capitalize", "title",  "lower", "upper",      "replace",      "ljust",
                                       "rjust",      "lstrip", "rstrip", "center",    "strip",        "swapcase",
                                       "zfill",      "casefold", "removeprefix", "removesuffix", NULL};
    if (!strcmp(name, "join")) {
        if (n_args != 1 || n_kw)
            return jj_fail(c, RP_ERR_INVALID, "join takes one argument"), NULL;
        jv *items = jv_iter_list(c, args[0]);
        if (!items)
            return NULL;
        jj_sbuf o = {c, {0}};
        for (size_t i = 0; i < items->u.list.n; i++) {
            jv *x = jj_escape(c, items->u.list.items[i]); // any type: escape(str(x))
            if (!x || (i && !jj_sput(&o, self->u.str.s, self->u.str.len)) || !jj_sput(&o, x->u.str.s, x->u.str.len)) {
                jj_buf_free(&o.b);
                return NULL;
            }
        }
        return jv_keep_safe(c, self, jj_sbuf_done(&o));
    }
    jv *argv[8];
    bool text_arg = n_args >= 2 && n_args <= 8 &&
                    (!strcmp(name, "replace") || !strcmp(name, "ljust") || !strcmp(name, "rjust") ||
                     !strcmp(name, "center"));
    if (text_arg) {
        memcpy(argv, args, (size_t)n_args * sizeof(jv *));
        if (!(argv[1] = jj_escape(c, args[1])))
            return NULL;
        if (name[0] != 'r' || name[1] != 'e') {
            if (jj_utf8_count(argv[1]->u.str.s, argv[1]->u.str.len) != 1)
                return jj_fail(c, RP_ERR_INVALID, "The fill character must be exactly one character long"), NULL;
        }
        args = argv;
    }
    jv *r = str_method(c, self, name, args, n_args, kw_names, kw_vals, n_kw);
    if (!r)
        return NULL;
    if (in_list(keep, name))
        return jv_keep_safe(c, self, r);
    if (r->kind == JV_LIST && (!strcmp(name, "split") || !strcmp(name, "rsplit") || !strcmp(name, "splitlines")))
        for (size_t i = 0; i < r->u.list.n; i++)
            if (!(r->u.list.items[i] = jv_markup(c, r->u.list.items[i])))
                return NULL;
    return r;
}

jv *jj_call_method(jj_ctx *c, jv *self, const char *name, jv **args, int n_args, const char **kw_names, jv **kw_vals,
                   int n_kw)
{
    if (self->kind == JV_STR && self->safe)
        return markup_method(c, self, name, args, n_args, kw_names, kw_vals, n_kw);
    if (self->kind == JV_STR)
        return str_method(c, self, name, args, n_args, kw_names, kw_vals, n_kw);
    if (self->kind == JV_DICT) {
        if (!strcmp(name, "get")) {
            BIND("get", "key", "default");
            if (!a[0])
                return jj_fail(c, RP_ERR_INVALID, "get expected at least 1 argument"), NULL;
            jv *v = jv_dict_get(c, self, a[0]);
            if (c->st)
                return NULL;
            return v ? v : a[1] ? a[1] : JV_NONE_;
        }
        if (!strcmp(name, "items") || !strcmp(name, "keys") || !strcmp(name, "values")) {
            jv *l = jv_list(c, self->u.dict.n);
            for (size_t i = 0; l && i < self->u.dict.n; i++) {
                jv *x;
                if (name[0] == 'k') {
                    x = self->u.dict.keys[i];
                } else if (name[0] == 'v') {
                    x = self->u.dict.vals[i];
                } else {
                    if (!(x = jv_list(c, 2)))
                        return NULL;
                    x->tuple = true;
                    x->u.list.items[0] = self->u.dict.keys[i];
                    x->u.list.items[1] = self->u.dict.vals[i];
                    x->u.list.n = 2;
                }
                l->u.list.items[l->u.list.n++] = x;
            }
            return l;
        }
        if (!strcmp(name, "copy")) {
            jv *d = jv_dict(c, JV_DICT, self->u.dict.n);
            for (size_t i = 0; d && i < self->u.dict.n; i++) {
                d->u.dict.keys[i] = self->u.dict.keys[i];
                d->u.dict.vals[i] = self->u.dict.vals[i];
                d->u.dict.n++;
            }
            return d;
        }
    } else if (self->kind == JV_LIST) {
        if (!strcmp(name, "index") || !strcmp(name, "count")) {
            if (n_args < 1)
                return jj_fail(c, RP_ERR_INVALID, "%s needs an argument", name), NULL;
            int64_t n = 0;
            for (size_t i = 0; i < self->u.list.n; i++) {
                int e = jv_equal(c, self->u.list.items[i], args[0], 0);
                if (e < 0)
                    return NULL;
                if (e && name[0] == 'i')
                    return jv_int(c, (int64_t)i);
                n += e;
            }
            if (name[0] == 'i')
                return jj_fail(c, RP_ERR_INVALID, "value is not in list"), NULL;
            return jv_int(c, n);
        }
        if (!strcmp(name, "copy")) {
            jv *l = jv_list(c, self->u.list.n);
            if (l) {
                if (self->u.list.n)
                    memcpy(l->u.list.items, self->u.list.items, self->u.list.n * sizeof(jv *));
                l->u.list.n = self->u.list.n;
            }
            return l;
        }
    }
    return jj_fail(c, RP_ERR_INVALID, "access to attribute '%s' of '%s' object is unsafe", name, jv_type_name(self)),
           NULL;
}

