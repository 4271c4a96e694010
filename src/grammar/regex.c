/*
 * regex.c - a JSON Schema `pattern` (ECMA-262 syntax, the subset below) or a
 * string `format` compiled to a byte DFA over a JSON string's raw content.
 *
 * The DFA reads the bytes between the quotes as the model writes them. It only
 * ever sees bytes a JSON string can hold unescaped (no '"', '\' or control
 * bytes): a constrained string is written without escapes, so a pattern whose
 * every match needs one of those characters is refused. Multi-byte characters
 * are read by loose lead/continuation ranges; the JSON lexer beside the DFA
 * checks exact UTF-8 well-formedness.
 *
 * Subset: literals (UTF-8), '.', classes [...] / [^...] with ASCII ranges and
 * \d \w \s \D \W \S, groups (...) and (?:...), '|', the quantifiers * + ? {n}
 * {n,} {n,m} (a lazy '?' after one reads the same language), '^' first and '$'
 * last (otherwise the match may start/end anywhere, as ECMA's search). Refused
 * (RP_ERR_UNSUPPORTED): back-references, look-around, \b, \p, non-ASCII
 * ranges, anchors elsewhere. Where ECMA's Unicode classes differ from ASCII
 * (\s and '.' against U+2028/U+00A0 and friends) the DFA is the stricter one:
 * every string it accepts matches the pattern.
 *
 * Pipeline: parse to a small AST, emit a Thompson NFA over bytes (counted
 * repeats emit copies), subset construction over byte classes, then states that
 * cannot reach acceptance are cut (so every live state can still finish).
 * Bounded by RX_MAX_NFA NFA states, the caller's DFA state limit and time
 * budget (RP_ERR_LIMIT).
 */
#include <stdlib.h>
#include <time.h>

#include "grammar_int.h"

#define RX_MAX_NFA 8192
#define RX_MAX_AST 4096
#define RX_MAX_REPEAT 1000
#define RX_MAX_MBCHARS 16

enum { MB_NONE, MB_ALL, MB_NO_LS }; // multi-byte characters a set holds: none, all, all but U+2000-U+203F

typedef struct rx_set {
    uint64_t ascii[2]; // bytes 0..127
    uint8_t mb;        // MB_*
    uint8_t n_chars;   // specific multi-byte characters (positive classes)
    uint8_t chars[RX_MAX_MBCHARS][4];
    uint8_t char_len[RX_MAX_MBCHARS];
} rx_set;

enum { RA_SET, RA_CAT, RA_ALT, RA_REP, RA_EMPTY };

typedef struct rx_ast {
    uint8_t kind;
    int a, b;       // children (RA_CAT, RA_ALT: a, b; RA_REP: a)
    int min, max;   // RA_REP; max -1: unbounded
    int set;        // RA_SET: index into sets
} rx_ast;

typedef struct rx_parser {
    const uint8_t *p, *end;
    rx_ast *ast;
    int n_ast;
    rx_set *sets;
    int n_sets;
    const char *what; // the pattern, for messages
    bool top_alt;     // a '|' outside every group
} rx_parser;

static rp_status rx_unsup(rx_parser *ps, const char *why)
{
    return RP_ERR(RP_ERR_UNSUPPORTED, "pattern \"%s\": %s", ps->what, why);
}

static int new_ast(rx_parser *ps, uint8_t kind)
{
    if (ps->n_ast >= RX_MAX_AST)
        return -1;
    rx_ast *a = &ps->ast[ps->n_ast];
    memset(a, 0, sizeof(*a));
    a->kind = kind;
    a->a = a->b = a->set = -1;
    return ps->n_ast++;
}

static int new_set(rx_parser *ps)
{
    int n = new_ast(ps, RA_SET);
    if (n < 0)
        return -1;
    memset(&ps->sets[n], 0, sizeof(rx_set));
    ps->ast[n].set = n; // sets are indexed like the AST (one array each)
    return n;
}

static inline void set_add(rx_set *s, uint8_t c)
{
    s->ascii[c >> 6] |= (uint64_t)1 << (c & 63);
}

static inline bool set_has(const rx_set *s, uint8_t c)
{
    return (s->ascii[c >> 6] >> (c & 63)) & 1;
}

static void set_range(rx_set *s, uint8_t a, uint8_t b)
{
    for (int c = a; c <= b; c++)
        set_add(s, (uint8_t)c);
}

// \d \w \s (upper case: the complement) into s; returns false for an unknown class letter.
static bool set_class(rx_set *s, uint8_t letter)
{
    rx_set t;
    memset(&t, 0, sizeof(t));
    uint8_t lower = letter | 0x20;
    if (lower == 'd') {
        set_range(&t, '0', '9');
    } else if (lower == 'w') {
        set_range(&t, '0', '9');
        set_range(&t, 'a', 'z');
        set_range(&t, 'A', 'Z');
        set_add(&t, '_');
    } else if (lower == 's') {
        set_add(&t, ' ');
        set_range(&t, '\t', '\r');
    } else {
        return false;
    }
    if (letter == lower) {
        s->ascii[0] |= t.ascii[0];
        s->ascii[1] |= t.ascii[1];
    } else {
        s->ascii[0] |= ~t.ascii[0];
        s->ascii[1] |= ~t.ascii[1];
        // \D and \W hold every non-ASCII character; \S would exclude Unicode spaces: ASCII only (stricter).
        if (lower != 's')
            s->mb = MB_ALL;
    }
    return true;
}

static int hexv(uint8_t c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c |= 0x20;
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

// One character (after a possible escape) at ps->p: ASCII into *c, or a UTF-8
// sequence into mb/mb_len. Returns 1 for a char, 2 for a class escape (set
// filled), 0 with st set on error.
static int read_char(rx_parser *ps, bool in_class, uint8_t *c, uint8_t *mb, uint8_t *mb_len, rx_set *cls,
                     rp_status *st)
{
    *mb_len = 0;
    uint8_t x = *ps->p++;
    if (x >= 0x80) { // a multi-byte character, copied whole
        int n = x >= 0xF0 ? 4 : x >= 0xE0 ? 3 : 2;
        if (ps->end - ps->p < n - 1) {
            *st = rx_unsup(ps, "a truncated UTF-8 character");
            return 0;
        }
        mb[0] = x;
        for (int i = 1; i < n; i++)
            mb[i] = *ps->p++;
        *mb_len = (uint8_t)n;
        return 1;
    }
    if (x != '\\') {
        *c = x;
        return 1;
    }
    if (ps->p == ps->end) {
        *st = RP_ERR(RP_ERR_INVALID, "pattern \"%s\": a trailing backslash", ps->what);
        return 0;
    }
    x = *ps->p++;
    if (set_class(cls, x))
        return 2;
    switch (x) {
    case 't': *c = '\t'; return 1;
    case 'n': *c = '\n'; return 1;
    case 'r': *c = '\r'; return 1;
    case 'f': *c = '\f'; return 1;
    case 'v': *c = '\v'; return 1;
    case 'x':
    case 'u': {
        int n = x == 'x' ? 2 : 4, v = 0;
        for (int i = 0; i < n; i++) {
            int h = ps->p < ps->end ? hexv(*ps->p) : -1;
            if (h < 0) {
                *st = RP_ERR(RP_ERR_INVALID, "pattern \"%s\": a bad \\%c escape", ps->what, x);
                return 0;
            }
            v = v * 16 + h;
            ps->p++;
        }
        if (v >= 0x80) {
            *st = rx_unsup(ps, "\\x/\\u escapes of non-ASCII characters are not supported");
            return 0;
        }
        *c = (uint8_t)v;
        return 1;
    }
    case 'b':
        if (in_class) {
            *c = '\b';
            return 1;
        }
        /* fall through */
    case 'B':
        *st = rx_unsup(ps, "word boundaries (\\b, \\B) are not supported");
        return 0;
    case 'p':
    case 'P':
        *st = rx_unsup(ps, "Unicode property classes (\\p) are not supported");
        return 0;
    case 'k':
        *st = rx_unsup(ps, "named back-references are not supported");
        return 0;
    default:
        if (x >= '0' && x <= '9') {
            *st = rx_unsup(ps, "back-references are not supported");
            return 0;
        }
        if ((x >= 'a' && x <= 'z') || (x >= 'A' && x <= 'Z')) {
            *st = rx_unsup(ps, "an unknown escape");
            return 0;
        }
        *c = x; // an escaped punctuation character stands for itself
        return 1;
    }
}

static void set_add_mb(rx_set *s, const uint8_t *mb, uint8_t n)
{
    memcpy(s->chars[s->n_chars], mb, n);
    s->char_len[s->n_chars++] = n;
}

static rp_status parse_alt(rx_parser *ps, int depth, int *out);

static rp_status parse_class(rx_parser *ps, int *out)
{
    int n = new_set(ps);
    if (n < 0)
        return RP_ERR(RP_ERR_LIMIT, "pattern \"%s\" is too long", ps->what);
    rx_set *s = &ps->sets[n];
    bool neg = ps->p < ps->end && *ps->p == '^';
    if (neg)
        ps->p++;
    bool first = true, has_space_class = false;
    rp_status st = RP_OK;
    while (true) {
        if (ps->p == ps->end)
            return RP_ERR(RP_ERR_INVALID, "pattern \"%s\": an unterminated class", ps->what);
        if (*ps->p == ']' && !first)
            break;
        first = false;
        uint8_t c = 0, mb[4], mb_len;
        if (ps->p + 1 < ps->end && ps->p[0] == '\\' && (ps->p[1] | 0x20) == 's')
            has_space_class = true;
        int r = read_char(ps, true, &c, mb, &mb_len, s, &st);
        if (!r)
            return st;
        if (r == 2)
            continue;
        if (ps->p + 1 < ps->end && ps->p[0] == '-' && ps->p[1] != ']') { // a range
            ps->p++;
            uint8_t hi = 0, mb2[4], mb2_len;
            rx_set dummy;
            memset(&dummy, 0, sizeof(dummy));
            int r2 = read_char(ps, true, &hi, mb2, &mb2_len, &dummy, &st);
            if (!r2)
                return st;
            if (r2 == 2 || mb_len || mb2_len)
                return rx_unsup(ps, "ranges of non-ASCII characters or classes are not supported");
            if (hi < c)
                return RP_ERR(RP_ERR_INVALID, "pattern \"%s\": a range out of order", ps->what);
            set_range(s, c, hi);
            continue;
        }
        if (mb_len) {
            if (neg)
                return rx_unsup(ps, "negated classes of non-ASCII characters are not supported");
            if (s->n_chars >= RX_MAX_MBCHARS)
                return rx_unsup(ps, "too many non-ASCII characters in one class");
            set_add_mb(s, mb, mb_len);
        } else {
            set_add(s, c);
        }
    }
    ps->p++; // ']'
    if (neg) {
        s->ascii[0] = ~s->ascii[0];
        s->ascii[1] = ~s->ascii[1];
        // [^...] holds every non-ASCII character unless the class named spaces (Unicode ones among them).
        s->mb = has_space_class || s->mb ? MB_NONE : MB_ALL;
    }
    *out = n;
    return RP_OK;
}

static rp_status parse_atom(rx_parser *ps, int depth, int *out)
{
    uint8_t x = *ps->p;
    rp_status st = RP_OK;
    if (x == '(') {
        ps->p++;
        if (ps->p < ps->end && *ps->p == '?') {
            if (ps->p + 1 < ps->end && ps->p[1] == ':')
                ps->p += 2;
            else
                return rx_unsup(ps, "look-around and named groups are not supported");
        }
        if ((st = parse_alt(ps, depth + 1, out)))
            return st;
        if (ps->p == ps->end || *ps->p != ')')
            return RP_ERR(RP_ERR_INVALID, "pattern \"%s\": an unclosed group", ps->what);
        ps->p++;
        return RP_OK;
    }
    if (x == '[') {
        ps->p++;
        return parse_class(ps, out);
    }
    if (x == '^' || x == '$')
        return rx_unsup(ps, "'^' and '$' are supported only at the pattern's start and end");
    if (x == '*' || x == '+' || x == '?' || x == '{' || x == ')' || x == '|')
        return RP_ERR(RP_ERR_INVALID, "pattern \"%s\": '%c' with nothing before it", ps->what, x);
    int n = new_set(ps);
    if (n < 0)
        return RP_ERR(RP_ERR_LIMIT, "pattern \"%s\" is too long", ps->what);
    rx_set *s = &ps->sets[n];
    if (x == '.') {
        ps->p++;
        set_range(s, 0, 0x7F);
        s->ascii[0] &= ~(((uint64_t)1 << '\n') | ((uint64_t)1 << '\r'));
        s->mb = MB_NO_LS;
        *out = n;
        return RP_OK;
    }
    uint8_t c = 0, mb[4], mb_len;
    int r = read_char(ps, false, &c, mb, &mb_len, s, &st);
    if (!r)
        return st;
    if (r == 1) {
        if (mb_len)
            set_add_mb(s, mb, mb_len);
        else
            set_add(s, c);
    }
    *out = n;
    return RP_OK;
}

static bool read_int(rx_parser *ps, int *v)
{
    if (ps->p == ps->end || *ps->p < '0' || *ps->p > '9')
        return false;
    long n = 0;
    while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
        n = n * 10 + (*ps->p++ - '0');
        if (n > 100000)
            n = 100000;
    }
    *v = (int)n;
    return true;
}

static rp_status parse_repeat(rx_parser *ps, int depth, int *out)
{
    rp_status st = parse_atom(ps, depth, out);
    if (st)
        return st;
    while (ps->p < ps->end) {
        int min, max;
        uint8_t x = *ps->p;
        const uint8_t *save = ps->p;
        if (x == '*') {
            min = 0, max = -1;
            ps->p++;
        } else if (x == '+') {
            min = 1, max = -1;
            ps->p++;
        } else if (x == '?') {
            min = 0, max = 1;
            ps->p++;
        } else if (x == '{') {
            ps->p++;
            if (!read_int(ps, &min)) { // not a quantifier: ECMA (without u) reads '{' literally; ajv uses u
                ps->p = save;
                return RP_ERR(RP_ERR_INVALID, "pattern \"%s\": a lone '{'", ps->what);
            }
            max = min;
            if (ps->p < ps->end && *ps->p == ',') {
                ps->p++;
                max = -1;
                if (ps->p < ps->end && *ps->p != '}' && !read_int(ps, &max))
                    return RP_ERR(RP_ERR_INVALID, "pattern \"%s\": a bad {n,m}", ps->what);
            }
            if (ps->p == ps->end || *ps->p != '}')
                return RP_ERR(RP_ERR_INVALID, "pattern \"%s\": a bad {n,m}", ps->what);
            ps->p++;
            if (max >= 0 && max < min)
                return RP_ERR(RP_ERR_INVALID, "pattern \"%s\": {n,m} with m < n", ps->what);
            if (min > RX_MAX_REPEAT || max > RX_MAX_REPEAT)
                return RP_ERR(RP_ERR_LIMIT, "pattern \"%s\": a repeat count over %d", ps->what, RX_MAX_REPEAT);
        } else {
            break;
        }
        if (ps->p < ps->end && *ps->p == '?')
            ps->p++; // lazy: the same language
        int r = new_ast(ps, RA_REP);
        if (r < 0)
            return RP_ERR(RP_ERR_LIMIT, "pattern \"%s\" is too long", ps->what);
        ps->ast[r].a = *out;
        ps->ast[r].min = min;
        ps->ast[r].max = max;
        *out = r;
    }
    return RP_OK;
}

static rp_status parse_cat(rx_parser *ps, int depth, int *out)
{
    *out = -1;
    while (ps->p < ps->end && *ps->p != '|' && *ps->p != ')') {
        if (*ps->p == '$' && ps->p + 1 == ps->end)
            break; // the end anchor (read by the caller)
        int n;
        rp_status st = parse_repeat(ps, depth, &n);
        if (st)
            return st;
        if (*out < 0) {
            *out = n;
        } else {
            int c = new_ast(ps, RA_CAT);
            if (c < 0)
                return RP_ERR(RP_ERR_LIMIT, "pattern \"%s\" is too long", ps->what);
            ps->ast[c].a = *out;
            ps->ast[c].b = n;
            *out = c;
        }
    }
    if (*out < 0 && (*out = new_ast(ps, RA_EMPTY)) < 0)
        return RP_ERR(RP_ERR_LIMIT, "pattern \"%s\" is too long", ps->what);
    return RP_OK;
}

static rp_status parse_alt(rx_parser *ps, int depth, int *out)
{
    if (depth > 32)
        return RP_ERR(RP_ERR_LIMIT, "pattern \"%s\": groups nested over 32 deep", ps->what);
    rp_status st = parse_cat(ps, depth, out);
    while (!st && ps->p < ps->end && *ps->p == '|') {
        ps->p++;
        ps->top_alt = ps->top_alt || depth == 0;
        int b;
        if ((st = parse_cat(ps, depth, &b)))
            break;
        int a = new_ast(ps, RA_ALT);
        if (a < 0)
            return RP_ERR(RP_ERR_LIMIT, "pattern \"%s\" is too long", ps->what);
        ps->ast[a].a = *out;
        ps->ast[a].b = b;
        *out = a;
    }
    return st;
}

/* ---- NFA --------------------------------------------------------------------- */

// A state has up to two epsilon edges, or one byte edge (lo..hi) to `to`.
typedef struct nfa_state {
    int eps[2];
    int to;
    uint8_t lo, hi;
} nfa_state;

typedef struct nfa {
    nfa_state *s;
    int n;
    bool overflow;
} nfa;

static int nfa_new(nfa *a)
{
    if (a->n >= RX_MAX_NFA) {
        a->overflow = true;
        return 0;
    }
    nfa_state *s = &a->s[a->n];
    s->eps[0] = s->eps[1] = s->to = -1;
    s->lo = 1; // an empty byte range (lo > hi)
    s->hi = 0;
    return a->n++;
}

static void eps(nfa *a, int from, int to)
{
    if (a->overflow)
        return;
    nfa_state *s = &a->s[from];
    if (s->eps[0] < 0) {
        s->eps[0] = to;
    } else if (s->eps[1] < 0) {
        s->eps[1] = to;
    } else { // a third edge: through a fresh state
        int m = nfa_new(a);
        if (a->overflow)
            return;
        a->s[m].eps[0] = a->s[from].eps[1];
        a->s[m].eps[1] = to;
        a->s[from].eps[1] = m;
    }
}

// from --[lo..hi]--> to, through a fresh state (so from keeps its epsilon edges).
static void edge(nfa *a, int from, uint8_t lo, uint8_t hi, int to)
{
    int m = nfa_new(a);
    if (a->overflow)
        return;
    a->s[m].lo = lo;
    a->s[m].hi = hi;
    a->s[m].to = to;
    eps(a, from, m);
}

// Bytes a JSON string holds unescaped (the only ones the DFA may read).
static inline bool writable(uint8_t c)
{
    return c >= 0x20 && c != '"' && c != '\\';
}

static void emit_set(nfa *a, const rx_set *s, int from, int to)
{
    for (int c = 0; c < 128;) { // ASCII runs
        if (!set_has(s, (uint8_t)c) || !writable((uint8_t)c)) {
            c++;
            continue;
        }
        int d = c;
        while (d + 1 < 128 && set_has(s, (uint8_t)(d + 1)) && writable((uint8_t)(d + 1)))
            d++;
        edge(a, from, (uint8_t)c, (uint8_t)d, to);
        c = d + 1;
    }
    if (s->mb != MB_NONE) {
        int c1 = nfa_new(a), c2 = nfa_new(a), c3 = nfa_new(a);
        edge(a, c1, 0x80, 0xBF, to);
        edge(a, c2, 0x80, 0xBF, c1);
        edge(a, c3, 0x80, 0xBF, c2);
        edge(a, from, 0xC2, 0xDF, c1);
        edge(a, from, 0xF0, 0xF4, c3);
        if (s->mb == MB_ALL) {
            edge(a, from, 0xE0, 0xEF, c2);
        } else { // E2 80 xx (U+2000-U+203F: Unicode spaces and line separators among them) left out
            edge(a, from, 0xE0, 0xE1, c2);
            edge(a, from, 0xE3, 0xEF, c2);
            int x = nfa_new(a);
            edge(a, from, 0xE2, 0xE2, x);
            edge(a, x, 0x81, 0xBF, c1);
        }
    }
    for (int i = 0; i < s->n_chars; i++) {
        int at = from;
        for (int k = 0; k < s->char_len[i]; k++) {
            int next = k + 1 == s->char_len[i] ? to : nfa_new(a);
            edge(a, at, s->chars[i][k], s->chars[i][k], next);
            at = next;
        }
    }
}

static void emit(nfa *a, const rx_parser *ps, int n, int from, int to)
{
    if (a->overflow)
        return;
    const rx_ast *x = &ps->ast[n];
    switch (x->kind) {
    case RA_EMPTY:
        eps(a, from, to);
        break;
    case RA_SET:
        emit_set(a, &ps->sets[x->set], from, to);
        break;
    case RA_CAT: {
        int mid = nfa_new(a);
        emit(a, ps, x->a, from, mid);
        emit(a, ps, x->b, mid, to);
        break;
    }
    case RA_ALT:
        emit(a, ps, x->a, from, to);
        emit(a, ps, x->b, from, to);
        break;
    case RA_REP: {
        int at = from;
        for (int i = 0; i < x->min && !a->overflow; i++) {
            int next = nfa_new(a);
            emit(a, ps, x->a, at, next);
            at = next;
        }
        if (x->max < 0) { // a loop
            int loop = nfa_new(a);
            eps(a, at, loop);
            int back = nfa_new(a);
            emit(a, ps, x->a, loop, back);
            eps(a, back, loop);
            eps(a, loop, to);
        } else {
            for (int i = x->min; i < x->max && !a->overflow; i++) {
                eps(a, at, to);
                int next = nfa_new(a);
                emit(a, ps, x->a, at, next);
                at = next;
            }
            eps(a, at, to);
        }
        break;
    }
    }
}

/* ---- DFA --------------------------------------------------------------------- */

typedef struct bitset {
    uint64_t *w;
} bitset;

static void closure(const nfa *a, uint64_t *set, int *stack)
{
    int sp = 0;
    for (int i = 0; i < a->n; i++)
        if ((set[i >> 6] >> (i & 63)) & 1)
            stack[sp++] = i;
    while (sp) {
        int i = stack[--sp];
        for (int k = 0; k < 2; k++) {
            int j = a->s[i].eps[k];
            if (j >= 0 && !((set[j >> 6] >> (j & 63)) & 1)) {
                set[j >> 6] |= (uint64_t)1 << (j & 63);
                stack[sp++] = j;
            }
        }
    }
}

static uint64_t hash_words(const uint64_t *w, int n)
{
    uint64_t h = 1469598103934665603ULL;
    for (int i = 0; i < n; i++)
        h = (h ^ w[i]) * 1099511628211ULL;
    return h;
}

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

rp_status rx_compile(const char *pattern, size_t len, int max_states, double budget_ms, rx_dfa *out)
{
    double deadline = now_ms() + budget_ms;
    memset(out, 0, sizeof(*out));
    rx_parser ps = {.p = (const uint8_t *)pattern, .end = (const uint8_t *)pattern + len, .what = pattern};
    nfa a = {0};
    uint64_t *sets = NULL, *hashes = NULL;
    int *stack = NULL, *table = NULL;
    uint16_t *next = NULL;
    uint8_t *acc = NULL;
    rp_status st = RP_OK;
    ps.ast = rp_malloc(RX_MAX_AST * sizeof(*ps.ast));
    ps.sets = rp_malloc(RX_MAX_AST * sizeof(*ps.sets));
    a.s = rp_malloc(RX_MAX_NFA * sizeof(*a.s));
    if (!ps.ast || !ps.sets || !a.s) {
        st = RP_ERR(RP_ERR_NOMEM, "out of memory compiling a pattern");
        goto done;
    }
    bool start_anchor = ps.p < ps.end && *ps.p == '^';
    if (start_anchor)
        ps.p++;
    int root;
    if ((st = parse_alt(&ps, 0, &root)))
        goto done;
    bool end_anchor = false;
    if (ps.p < ps.end && *ps.p == '$' && ps.p + 1 == ps.end) {
        end_anchor = true;
        ps.p++;
    }
    if ((start_anchor || end_anchor) && ps.top_alt) { // ECMA: ^a|b$ is (^a)|(b$)
        st = rx_unsup(&ps, "'^' or '$' around a top-level '|' is not supported (write ^(a|b)$)");
        goto done;
    }
    if (ps.p != ps.end) {
        st = *ps.p == ')' ? RP_ERR(RP_ERR_INVALID, "pattern \"%s\": an unmatched ')'", pattern)
                          : rx_unsup(&ps, "'^' and '$' are supported only at the pattern's start and end");
        goto done;
    }
    // Unanchored ends: any writable characters may come before/after the match.
    int any = new_set(&ps);
    if (any < 0) {
        st = RP_ERR(RP_ERR_LIMIT, "pattern \"%s\" is too long", pattern);
        goto done;
    }
    set_range(&ps.sets[any], 0, 0x7F);
    ps.sets[any].mb = MB_ALL;
    int start = nfa_new(&a), final = nfa_new(&a);
    int from = start, to = final;
    if (!start_anchor) {
        from = nfa_new(&a);
        emit_set(&a, &ps.sets[any], start, start);
        eps(&a, start, from);
    }
    if (!end_anchor) {
        to = nfa_new(&a);
        emit_set(&a, &ps.sets[any], to, to);
        eps(&a, to, final);
    }
    emit(&a, &ps, root, from, to);
    if (a.overflow) {
        st = RP_ERR(RP_ERR_LIMIT, "pattern \"%s\" is too complex (over %d automaton states)", pattern, RX_MAX_NFA);
        goto done;
    }

    // Byte classes: bytes no range separates behave alike.
    uint8_t cls[256], rep[256];
    int n_cls = 0;
    {
        uint8_t cut[257] = {0};
        for (int i = 0; i < a.n; i++)
            if (a.s[i].to >= 0) {
                cut[a.s[i].lo] = 1;
                cut[a.s[i].hi + 1] = 1;
            }
        for (int c = 0; c < 256; c++) {
            if (c == 0 || cut[c])
                rep[n_cls++] = (uint8_t)c;
            cls[c] = (uint8_t)(n_cls - 1);
        }
    }
    int words = (a.n + 63) / 64;
    int cap = max_states;
    sets = rp_calloc((size_t)cap, (size_t)words * sizeof(uint64_t));
    hashes = rp_malloc((size_t)cap * sizeof(uint64_t));
    stack = rp_malloc((size_t)a.n * sizeof(int));
    table = rp_malloc((size_t)cap * n_cls * sizeof(int));
    acc = rp_calloc((size_t)cap, 1);
    uint64_t *tmp = rp_calloc((size_t)words + 1, sizeof(uint64_t));
    if (!sets || !hashes || !stack || !table || !acc || !tmp) {
        rp_free(tmp);
        st = RP_ERR(RP_ERR_NOMEM, "out of memory compiling a pattern");
        goto done;
    }
    int n = 1;
    sets[start >> 6] |= (uint64_t)1 << (start & 63);
    closure(&a, sets, stack);
    hashes[0] = hash_words(sets, words);
    for (int d = 0; d < n; d++) {
        if (now_ms() > deadline) {
            rp_free(tmp);
            st = RP_ERR(RP_ERR_LIMIT, "pattern \"%s\" took over the compile budget (%.0f ms)", pattern, budget_ms);
            goto done;
        }
        const uint64_t *cur = sets + (size_t)d * words;
        acc[d] = (cur[final >> 6] >> (final & 63)) & 1;
        for (int k = 0; k < n_cls; k++) {
            uint8_t c = rep[k];
            memset(tmp, 0, (size_t)words * sizeof(uint64_t));
            bool any_to = false;
            for (int w = 0; w < words; w++)
                for (uint64_t bits = cur[w]; bits; bits &= bits - 1) {
                    int i = w * 64 + __builtin_ctzll(bits);
                    const nfa_state *s = &a.s[i];
                    if (s->to >= 0 && c >= s->lo && c <= s->hi) {
                        tmp[s->to >> 6] |= (uint64_t)1 << (s->to & 63);
                        any_to = true;
                    }
                }
            if (!any_to) {
                table[d * n_cls + k] = -1;
                continue;
            }
            closure(&a, tmp, stack);
            uint64_t h = hash_words(tmp, words);
            int found = -1;
            for (int j = 0; j < n; j++)
                if (hashes[j] == h && memcmp(sets + (size_t)j * words, tmp, (size_t)words * 8) == 0) {
                    found = j;
                    break;
                }
            if (found < 0) {
                if (n >= cap) {
                    rp_free(tmp);
                    st = RP_ERR(RP_ERR_LIMIT, "pattern \"%s\" is too complex (over %d automaton states)", pattern,
                                max_states);
                    goto done;
                }
                memcpy(sets + (size_t)n * words, tmp, (size_t)words * 8);
                hashes[n] = h;
                found = n++;
            }
            table[d * n_cls + k] = found;
        }
    }
    rp_free(tmp);
    // States that can reach acceptance; the others become the dead state.
    uint8_t *live = rp_calloc((size_t)n, 1);
    if (!live) {
        st = RP_ERR(RP_ERR_NOMEM, "out of memory compiling a pattern");
        goto done;
    }
    for (int d = 0; d < n; d++)
        live[d] = acc[d];
    for (bool changed = true; changed;) {
        changed = false;
        for (int d = 0; d < n; d++) {
            if (live[d])
                continue;
            for (int k = 0; k < n_cls; k++) {
                int t = table[d * n_cls + k];
                if (t >= 0 && live[t]) {
                    live[d] = 1;
                    changed = true;
                    break;
                }
            }
        }
    }
    if (!live[0]) {
        rp_free(live);
        st = RP_ERR(RP_ERR_UNSUPPORTED,
                    "pattern \"%s\" matches no string that can be written without escapes (constrained strings are "
                    "written without '\"', '\\' and control characters)",
                    pattern);
        goto done;
    }
    next = rp_malloc((size_t)n * 256 * sizeof(uint16_t));
    if (!next) {
        rp_free(live);
        st = RP_ERR(RP_ERR_NOMEM, "out of memory compiling a pattern");
        goto done;
    }
    for (int d = 0; d < n; d++)
        for (int c = 0; c < 256; c++) {
            int t = live[d] ? table[d * n_cls + cls[c]] : -1;
            next[(size_t)d * 256 + c] = t >= 0 && live[t] && writable((uint8_t)c) ? (uint16_t)t : RX_DEAD;
        }
    rp_free(live);
    uint8_t *loop = rp_calloc((size_t)n, 1);
    if (!loop) {
        st = RP_ERR(RP_ERR_NOMEM, "out of memory compiling a pattern");
        goto done;
    }
    for (int d = 0; d < n; d++) {
        uint8_t bad = BC_NEVER; // categories with a byte that leaves d
        for (int c = 0; c < 256; c++)
            if (next[(size_t)d * 256 + c] != d)
                bad |= byte_cat((uint8_t)c);
        loop[d] = (uint8_t)(~bad & (BC_NEVER - 1));
    }
    out->loop = loop;
    out->next = next;
    out->accept = acc;
    out->n_states = n;
    acc = NULL;
    next = NULL;
done:
    rp_free(ps.ast);
    rp_free(ps.sets);
    rp_free(a.s);
    rp_free(sets);
    rp_free(hashes);
    rp_free(stack);
    rp_free(table);
    rp_free(acc);
    rp_free(next);
    return st;
}

void rx_dfa_deinit(rx_dfa *d)
{
    rp_free(d->next);
    rp_free(d->accept);
    rp_free(d->loop);
    memset(d, 0, sizeof(*d));
}

bool rx_match(const rx_dfa *d, const uint8_t *p, size_t n)
{
    uint32_t s = 0;
    for (size_t i = 0; i < n; i++) {
        s = d->next[s * 256 + p[i]];
        if (s == RX_DEAD)
            return false;
    }
    return d->accept[s];
}
