/*
 * jinja_lex.c - arenas, and the lexer of the chat template interpreter.
 *
 * The lexer follows jinja2's (lexer.py) with the options transformers uses:
 *   - newlines are normalized to "\n" and one trailing newline of the source is
 *     dropped (keep_trailing_newline=False);
 *   - trim_blocks: the first newline after a block or comment end ("%}", "#}") is
 *     removed; lstrip_blocks: spaces and tabs from the start of a line up to a block
 *     or comment tag are removed (not before "{{"), unless the tag is "{%+";
 *   - "{%-" / "{{-" / "{#-" strip all whitespace before the tag, "-%}" / "-}}" /
 *     "-#}" all whitespace after it; "+%}" keeps the newline trim_blocks would take;
 *   - {# comments #} vanish, {% raw %}...{% endraw %} is literal text;
 *   - inside tags, "}}" and "%}" only end the tag when brackets are balanced.
 * The output is a flat token array: DATA, VAR_BEGIN ... VAR_END, BLOCK_BEGIN ... BLOCK_END.
 */
#include "jinja_int.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* ---- arena ---------------------------------------------------------------- */

struct jj_chunk {
    jj_chunk *next;
    size_t used, size;
    _Alignas(16) unsigned char data[];
};

#define CHUNK_MIN ((size_t)64 << 10)

void *jj_alloc(jj_arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (n == 0)
        n = 16;
    jj_chunk *h = a->head;
    if (!h || h->size - h->used < n) {
        size_t size = n > CHUNK_MIN / 2 ? n : CHUNK_MIN;
        if (size > ((size_t)1 << 40) || (a->cap && a->total + size > a->cap)) {
            a->over = true;
            return NULL;
        }
        jj_chunk *c = rp_malloc(sizeof(jj_chunk) + size);
        if (!c)
            return NULL;
        c->used = 0;
        c->size = size;
        a->total += size;
        if (h && size > CHUNK_MIN && h->size - h->used >= CHUNK_MIN / 4) {
            // A big block goes behind the current chunk, which keeps serving small ones.
            c->next = h->next;
            h->next = c;
            c->used = n;
            memset(c->data, 0, n);
            return c->data;
        }
        c->next = h;
        a->head = h = c;
    }
    void *p = h->data + h->used;
    h->used += n;
    memset(p, 0, n);
    return p;
}

char *jj_strndup(jj_arena *a, const char *s, size_t n)
{
    char *p = jj_alloc(a, n + 1);
    if (p) {
        if (n)
            memcpy(p, s, n);
        p[n] = 0;
    }
    return p;
}

void jj_arena_free(jj_arena *a)
{
    for (jj_chunk *c = a->head, *next; c; c = next) {
        next = c->next;
        rp_free(c);
    }
    a->head = NULL;
    a->total = 0;
}

/* ---- lexer ---------------------------------------------------------------- */

typedef struct lexer {
    jj_arena *a;
    const char *src; // normalized source
    size_t len, pos;
    int line;
    jj_token *toks;
    size_t n, cap;
    char stack[JJ_MAX_PARSE_DEPTH]; // open brackets
    int depth;
    rp_status st;
} lexer;

static rp_status lex_fail(lexer *L, int line, const char *what)
{
    if (!L->st)
        L->st = RP_ERR(RP_ERR_INVALID, "template error: %s at line %d", what, line);
    return L->st;
}

static jj_token *push_tok(lexer *L, jj_tok_kind kind, int line)
{
    if (L->n == L->cap) {
        size_t cap = L->cap ? L->cap * 2 : 256;
        jj_token *t = jj_alloc(L->a, cap * sizeof(jj_token));
        if (!t) {
            L->st = RP_ERR(RP_ERR_NOMEM, "template error: out of memory");
            return NULL;
        }
        if (L->n)
            memcpy(t, L->toks, L->n * sizeof(jj_token));
        L->toks = t;
        L->cap = cap;
    }
    jj_token *t = &L->toks[L->n++];
    memset(t, 0, sizeof(*t));
    t->kind = kind;
    t->line = line;
    return t;
}

static int count_nl(const char *s, size_t n)
{
    int k = 0;
    for (size_t i = 0; i < n; i++)
        k += s[i] == '\n';
    return k;
}

// Length of the Python whitespace character at s[i] (0 if none).
static size_t space_at(const char *s, size_t len, size_t i)
{
    size_t p = i;
    uint32_t cp = jj_utf8_next(s, len, &p);
    return jj_py_isspace(cp) ? p - i : 0;
}

static size_t skip_space(const char *s, size_t len, size_t i)
{
    size_t k;
    while (i < len && (k = space_at(s, len, i)))
        i += k;
    return i;
}

// Python str.rstrip(): the length of s without trailing whitespace.
static size_t rstrip_len(const char *s, size_t n)
{
    size_t end = 0, i = 0;
    while (i < n) {
        size_t p = i;
        uint32_t cp = jj_utf8_next(s, n, &p);
        if (!jj_py_isspace(cp))
            end = p;
        i = p;
    }
    return end;
}

static bool all_space(const char *s, size_t n)
{
    return n > 0 && skip_space(s, n, 0) == n;
}

// Emits text before a tag, applying the tag's strip sign and lstrip_blocks.
static void emit_data(lexer *L, const char *text, size_t n, char sign, bool lstrip_ok, bool line_starting, int line)
{
    if (sign == '-') {
        n = rstrip_len(text, n);
    } else if (sign != '+' && lstrip_ok) {
        size_t l_pos = n;
        while (l_pos > 0 && text[l_pos - 1] != '\n')
            l_pos--;
        if ((l_pos > 0 || line_starting) && all_space(text + l_pos, n - l_pos))
            n = l_pos;
    }
    if (n) {
        jj_token *t = push_tok(L, JT_DATA, line);
        if (t) {
            t->s = text;
            t->len = n;
        }
    }
}

static bool starts(const lexer *L, size_t i, const char *s)
{
    size_t n = strlen(s);
    return i + n <= L->len && memcmp(L->src + i, s, n) == 0;
}

static bool is_name_start(unsigned char ch)
{
    return ch == '_' || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch >= 0x80;
}

static bool is_name_char(unsigned char ch)
{
    return is_name_start(ch) || (ch >= '0' && ch <= '9');
}

static int hexval(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

// Decodes a string literal body as Python's "unicode-escape" codec does.
static bool decode_string(lexer *L, const char *s, size_t n, int line, jj_token *t)
{
    char *out = jj_alloc(L->a, n + 1);
    if (!out)
        return lex_fail(L, line, "out of memory"), false;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        if (s[i] != '\\' || i + 1 >= n) {
            out[o++] = s[i++];
            continue;
        }
        char e = s[i + 1];
        i += 2;
        uint32_t cp;
        int digits = 0;
        switch (e) {
        case '\n': continue;
        case '\\': out[o++] = '\\'; continue;
        case '\'': out[o++] = '\''; continue;
        case '"': out[o++] = '"'; continue;
        case 'a': out[o++] = '\a'; continue;
        case 'b': out[o++] = '\b'; continue;
        case 'f': out[o++] = '\f'; continue;
        case 'n': out[o++] = '\n'; continue;
        case 'r': out[o++] = '\r'; continue;
        case 't': out[o++] = '\t'; continue;
        case 'v': out[o++] = '\v'; continue;
        case 'x': digits = 2; break;
        case 'u': digits = 4; break;
        case 'U': digits = 8; break;
        default:
            if (e >= '0' && e <= '7') {
                cp = (uint32_t)(e - '0');
                for (int k = 0; k < 2 && i < n && s[i] >= '0' && s[i] <= '7'; k++)
                    cp = cp * 8 + (uint32_t)(s[i++] - '0');
                o += jj_utf8_put(cp, out + o);
                continue;
            }
            if (e == 'N')
                return lex_fail(L, line, "\\N{...} escapes are not supported"), false;
            out[o++] = '\\';
            i--; // keep the unknown escape as written
            continue;
        }
        cp = 0;
        for (int k = 0; k < digits; k++, i++) {
            int h = i < n ? hexval(s[i]) : -1;
            if (h < 0)
                return lex_fail(L, line, "truncated escape in a string"), false;
            cp = cp * 16 + (uint32_t)h;
        }
        if (cp > 0x10FFFF)
            return lex_fail(L, line, "illegal Unicode character in a string"), false;
        // The escape is at least as long as its UTF-8 encoding (\xHH: 4 >= 2 bytes).
        o += jj_utf8_put(cp, out + o);
    }
    out[o] = 0;
    t->s = out;
    t->len = o;
    return true;
}

// Lexes the inside of a {{ }} or {% %} tag up to its end. `var`: a variable tag.
static bool lex_tag(lexer *L, bool var, bool *line_starting)
{
    int open_line = L->line;
    L->depth = 0;
    for (;;) {
        size_t i = L->pos;
        if (i >= L->len)
            return lex_fail(L, open_line, var ? "unexpected end of template, expected '}}'" :
                                                "unexpected end of template, expected '%}'"),
                   false;
        const char *s = L->src;
        if (L->depth == 0) {
            size_t end = 0;
            bool trim = false;
            if (var) {
                if (starts(L, i, "-}}"))
                    end = i + 3, trim = true;
                else if (starts(L, i, "}}"))
                    end = i + 2;
            } else {
                if (starts(L, i, "+%}"))
                    end = i + 3;
                else if (starts(L, i, "-%}"))
                    end = i + 3, trim = true;
                else if (starts(L, i, "%}")) {
                    end = i + 2;
                    if (end < L->len && s[end] == '\n')
                        end++; // trim_blocks
                }
            }
            if (end) {
                if (trim)
                    end = skip_space(s, L->len, end);
                if (!push_tok(L, var ? JT_VAR_END : JT_BLOCK_END, L->line))
                    return false;
                L->line += count_nl(s + i, end - i);
                *line_starting = s[end - 1] == '\n';
                L->pos = end;
                return true;
            }
        }
        unsigned char ch = (unsigned char)s[i];
        size_t sp = space_at(s, L->len, i);
        if (sp) {
            L->line += ch == '\n';
            L->pos += sp;
            continue;
        }
        if (ch >= '0' && ch <= '9') {
            // integer: \d+(_\d+)*; float: digits, then .digits and/or e[+-]digits
            size_t j = i;
            char num[128];
            size_t k = 0;
            bool is_float = false, too_long = false;
#define DIGITS()                                                                                                       \
    while (j < L->len && ((s[j] >= '0' && s[j] <= '9') || (s[j] == '_' && j + 1 < L->len && s[j + 1] >= '0' &&     \
                                                              s[j + 1] <= '9' && j > i))) {                            \
        if (s[j] != '_')                                                                                               \
            PUT(s[j]);                                                                                                 \
        j++;                                                                                                           \
    }
#define PUT(c) (k < sizeof(num) - 1 ? (void)(num[k++] = (c)) : (void)(too_long = true))
            DIGITS();
            if (j + 1 < L->len && s[j] == '.' && s[j + 1] >= '0' && s[j + 1] <= '9') {
                is_float = true;
                PUT('.');
                j++;
                DIGITS();
            }
            if (j < L->len && (s[j] == 'e' || s[j] == 'E')) {
                size_t m = j + 1;
                if (m < L->len && (s[m] == '+' || s[m] == '-'))
                    m++;
                if (m < L->len && s[m] >= '0' && s[m] <= '9') {
                    is_float = true;
                    PUT('e');
                    if (s[j + 1] == '-' || s[j + 1] == '+')
                        PUT(s[j + 1]);
                    j = m;
                    DIGITS();
                }
            }
#undef DIGITS
#undef PUT
            num[k] = 0;
            if (too_long) // past the buffer a literal would lose digits, and so change its value
                return lex_fail(L, L->line, "number literal longer than 127 characters"), false;
            jj_token *t = push_tok(L, is_float ? JT_FLOAT : JT_INT, L->line);
            if (!t)
                return false;
            if (is_float) {
                t->f = strtod(num, NULL);
            } else {
                errno = 0;
                char *endp;
                long long v = strtoll(num, &endp, 10);
                if (errno || k > 19)
                    return lex_fail(L, L->line, "integer literal too large"), false;
                t->i = v;
            }
            L->pos = j;
            continue;
        }
        if (is_name_start(ch)) {
            size_t j = i;
            while (j < L->len && is_name_char((unsigned char)s[j]))
                j++;
            jj_token *t = push_tok(L, JT_NAME, L->line);
            if (!t || !(t->s = jj_strndup(L->a, s + i, j - i)))
                return lex_fail(L, L->line, "out of memory"), false;
            t->len = j - i;
            L->pos = j;
            continue;
        }
        if (ch == '\'' || ch == '"') {
            size_t j = i + 1;
            while (j < L->len && s[j] != (char)ch) {
                if (s[j] == '\\' && j + 1 < L->len)
                    j++;
                j++;
            }
            if (j >= L->len)
                return lex_fail(L, L->line, "unterminated string"), false;
            jj_token *t = push_tok(L, JT_STRING, L->line);
            if (!t || !decode_string(L, s + i + 1, j - i - 1, L->line, t))
                return false;
            L->line += count_nl(s + i, j - i);
            L->pos = j + 1;
            continue;
        }
        static const struct {
            const char *s;
            int op;
        } ops2[] = {{"//", JO_FLOORDIV}, {"**", JO_POW}, {"==", JO_EQ}, {"!=", JO_NE}, {"<=", JO_LE}, {">=", JO_GE}};
        int op = 0;
        size_t oplen = 1;
        for (size_t k = 0; k < sizeof(ops2) / sizeof(ops2[0]); k++)
            if (starts(L, i, ops2[k].s)) {
                op = ops2[k].op;
                oplen = 2;
                break;
            }
        if (!op && strchr("+-/*%~[](){}><=.:|,;", ch) && ch)
            op = ch;
        if (!op) {
            char msg[64];
            snprintf(msg, sizeof(msg), "unexpected character '%c' (0x%02x)", ch >= 0x20 && ch < 0x7f ? ch : '?', ch);
            return lex_fail(L, L->line, msg), false;
        }
        if (op == '(' || op == '[' || op == '{') {
            if (L->depth >= JJ_MAX_PARSE_DEPTH) {
                if (!L->st)
                    L->st = RP_ERR(RP_ERR_LIMIT, "template error: brackets nested too deeply at line %d", L->line);
                return false;
            }
            L->stack[L->depth++] = (char)op;
        } else if (op == ')' || op == ']' || op == '}') {
            char want = op == ')' ? '(' : op == ']' ? '[' : '{';
            if (L->depth == 0 || L->stack[L->depth - 1] != want) {
                char msg[48];
                snprintf(msg, sizeof(msg), "unexpected '%c'", op);
                return lex_fail(L, L->line, msg), false;
            }
            L->depth--;
        }
        jj_token *t = push_tok(L, JT_OP, L->line);
        if (!t)
            return false;
        t->op = op;
        L->pos += oplen;
    }
}

// Matches "{%" sign \s* word \s* (block end) at i; returns the end offset or 0.
static size_t match_word_tag(const lexer *L, size_t i, const char *word, bool allow_trim_nl, char *sign)
{
    if (!starts(L, i, "{%"))
        return 0;
    size_t j = i + 2;
    *sign = 0;
    if (j < L->len && (L->src[j] == '-' || L->src[j] == '+'))
        *sign = L->src[j++];
    j = skip_space(L->src, L->len, j);
    size_t wl = strlen(word);
    if (!starts(L, j, word))
        return 0;
    j = skip_space(L->src, L->len, j + wl);
    if (allow_trim_nl && starts(L, j, "+%}"))
        return j + 3;
    if (starts(L, j, "-%}"))
        return skip_space(L->src, L->len, j + 3);
    if (starts(L, j, "%}")) {
        j += 2;
        if (allow_trim_nl && j < L->len && L->src[j] == '\n')
            j++;
        return j;
    }
    return 0;
}

rp_status jj_lex(jj_arena *a, const char *src, size_t len, jj_token **toks, size_t *n_toks)
{
    lexer L = {.a = a, .line = 1};
    // Normalize newlines; drop one trailing newline.
    char *s = jj_alloc(a, len + 1);
    if (!s)
        return RP_ERR(RP_ERR_NOMEM, "template error: out of memory");
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n')
                i++;
        } else {
            s[n++] = src[i];
        }
    }
    if (n && s[n - 1] == '\n')
        n--;
    s[n] = 0;
    L.src = s;
    L.len = n;

    bool line_starting = true;
    while (L.pos < L.len && !L.st) {
        // Find the next tag opener.
        size_t i = L.pos, tag = L.len;
        for (size_t j = i; j + 1 < L.len; j++) {
            if (s[j] == '{' && (s[j + 1] == '{' || s[j + 1] == '%' || s[j + 1] == '#')) {
                tag = j;
                break;
            }
        }
        int text_line = L.line;
        if (tag == L.len) {
            emit_data(&L, s + i, L.len - i, 0, false, false, text_line);
            L.line += count_nl(s + i, L.len - i);
            L.pos = L.len;
            break;
        }
        char kind = s[tag + 1];
        char sign = 0;
        size_t after = tag + 2;
        if (after < L.len && (s[after] == '-' || s[after] == '+'))
            sign = s[after++];
        char raw_sign;
        size_t raw_end = kind == '%' ? match_word_tag(&L, tag, "raw", false, &raw_sign) : 0;
        emit_data(&L, s + i, tag - i, sign, kind != '{', line_starting, text_line);
        L.line += count_nl(s + i, tag - i);
        if (raw_end) {
            int raw_line = L.line;
            L.line += count_nl(s + tag, raw_end - tag);
            bool ls = s[raw_end - 1] == '\n';
            size_t j = raw_end, end = 0;
            char esign = 0;
            for (; j + 1 < L.len; j++)
                if (s[j] == '{' && s[j + 1] == '%' && (end = match_word_tag(&L, j, "endraw", true, &esign)))
                    break;
            if (!end)
                return lex_fail(&L, raw_line, "missing end of raw directive ({% endraw %})");
            emit_data(&L, s + raw_end, j - raw_end, esign, true, ls, L.line);
            L.line += count_nl(s + raw_end, end - raw_end);
            line_starting = s[end - 1] == '\n';
            L.pos = end;
            continue;
        }
        L.pos = after;
        line_starting = false;
        if (kind == '#') {
            size_t j = after, end = 0;
            for (; j + 1 < L.len; j++) {
                if (s[j] == '#' && s[j + 1] == '}') {
                    if (j > after && s[j - 1] == '-') {
                        end = skip_space(s, L.len, j + 2);
                    } else {
                        end = j + 2;
                        if (!(j > after && s[j - 1] == '+') && end < L.len && s[end] == '\n')
                            end++;
                    }
                    break;
                }
            }
            if (!end)
                return lex_fail(&L, L.line, "missing end of comment tag");
            L.line += count_nl(s + after, end - after);
            line_starting = s[end - 1] == '\n';
            L.pos = end;
            continue;
        }
        if (!push_tok(&L, kind == '{' ? JT_VAR_BEGIN : JT_BLOCK_BEGIN, L.line))
            break;
        if (!lex_tag(&L, kind == '{', &line_starting))
            break;
    }
    if (L.st)
        return L.st;
    if (!push_tok(&L, JT_EOF, L.line))
        return L.st;
    *toks = L.toks;
    *n_toks = L.n;
    return RP_OK;
}
