/*
 * jinja_int.h - internals of the chat template interpreter, shared by its files:
 *
 *   jinja_lex.c      arenas, and the lexer: source -> tokens, with jinja2's
 *                    whitespace rules (trim_blocks, lstrip_blocks, {%- -%}, {%+),
 *                    comments and {% raw %}
 *   jinja_parse.c    tokens -> AST (jj_node), jinja2's grammar and precedence
 *   jinja_value.c    values (jv): Python-like none/bool/int/float/str/list/tuple/
 *                    dict/namespace/callables/undefined; str(), repr(), json.dumps,
 *                    equality and ordering; UTF-8 helpers
 *   jinja_eval.c     statements and expressions: scopes, loops, macros, calls
 *   jinja_filters.c  filters, tests, globals
 *   jinja_str.c      str operations, %-formatting, str.format, str/dict/list methods
 *   template.c       the public API (chat.h): inputs from jansson, limits
 *
 * Memory: a template's tokens and AST live in the template's arena; every value
 * made while rendering lives in the render's arena, freed in one call at the end
 * (values are never freed one by one, so there are no reference counts). The
 * render arena has a cap, and every loop, call and output byte is counted, so a
 * template cannot run away (RP_ERR_LIMIT).
 *
 * Errors: functions that can fail return NULL or a non-zero rp_status after
 * jj_fail() recorded the first error in the context; callers just unwind.
 */
#ifndef RP_JINJA_INT_H
#define RP_JINJA_INT_H

#include "chat.h"

#include <stdarg.h>

/* ---- limits --------------------------------------------------------------- */

#define JJ_MAX_OUTPUT ((size_t)16 << 20)   // bytes of rendered text (also any one string)
#define JJ_MAX_ARENA ((size_t)256 << 20)   // bytes of values made by one render
#define JJ_MAX_DEPTH 1500                  // nested evaluation frames (expressions, statements, calls)
#define JJ_MAX_CALL_DEPTH 400              // nested macro calls
#define JJ_MAX_STEPS 5000000ull            // loop iterations + macro calls per render
#define JJ_MAX_PARSE_DEPTH 200             // nesting of blocks and expressions in the source
#define JJ_MAX_RANGE 100000                // range() length (jinja2's sandbox MAX_RANGE)
#define JJ_MAX_VALUE_DEPTH 1000            // nesting of values walked by repr/tojson/equality

/* ---- arena ---------------------------------------------------------------- */

typedef struct jj_chunk jj_chunk;
typedef struct jj_arena {
    jj_chunk *head;
    size_t total, cap; // bytes taken from rp_malloc; cap 0 = unlimited
    bool over;         // an allocation failed because of cap (not OOM)
} jj_arena;

void *jj_alloc(jj_arena *a, size_t n); // zeroed, 16-aligned; NULL on OOM or past the cap
char *jj_strndup(jj_arena *a, const char *s, size_t n);
void jj_arena_free(jj_arena *a);

/* ---- tokens --------------------------------------------------------------- */

typedef enum jj_tok_kind {
    JT_EOF,
    JT_DATA,        // literal text (s, len)
    JT_VAR_BEGIN,   // {{
    JT_VAR_END,     // }}
    JT_BLOCK_BEGIN, // {%
    JT_BLOCK_END,   // %}
    JT_NAME,        // identifier (s, len)
    JT_STRING,      // decoded string literal (s, len)
    JT_INT,         // i
    JT_FLOAT,       // f
    JT_OP,          // op
} jj_tok_kind;

// Operators: single characters stand for themselves; these for the rest.
enum { JO_FLOORDIV = 256, JO_POW, JO_EQ, JO_NE, JO_LE, JO_GE, JO_IN, JO_NOTIN, JO_AND, JO_OR, JO_NOT, JO_NEG, JO_POS };

typedef struct jj_token {
    jj_tok_kind kind;
    int line;
    int op;
    const char *s; // in the template arena
    size_t len;
    int64_t i;
    double f;
} jj_token;

// Tokenizes source into *toks (arena). Errors: RP_ERR_INVALID "template error: ... at line L".
rp_status jj_lex(jj_arena *a, const char *src, size_t len, jj_token **toks, size_t *n_toks);

/* ---- AST ------------------------------------------------------------------ */

typedef enum jj_node_kind {
    // expressions
    JN_CONST,    // value
    JN_NAME,     // name
    JN_LIST,     // list
    JN_TUPLE,    // list
    JN_DICT,     // list (keys), list2 (values)
    JN_GETATTR,  // k[0] . name
    JN_GETITEM,  // k[0] [ k[1] ]
    JN_SLICE,    // k[0] [ k[1] : k[2] : k[3] ] (any may be NULL but k[0])
    JN_CALL,     // k[0] ( list, names=list2 )
    JN_FILTER,   // k[0] | name ( list, names=list2 ); k[0] NULL: the filter block's body
    JN_TEST,     // k[0] is [not: op] name ( list, names=list2 )
    JN_UNARY,    // op k[0]   (JO_NOT, JO_NEG, JO_POS)
    JN_BINARY,   // k[0] op k[1]  (+ - * / // % ** ~ JO_AND JO_OR)
    JN_COMPARE,  // k[0] ops[i] list[i] ... (chained)
    JN_COND,     // k[1] if k[0] else k[2] (k[2] may be NULL)
    // statements
    JS_BODY,      // list: statements
    JS_DATA,      // value: text
    JS_PRINT,     // {{ k[0] }}
    JS_IF,        // if k[0]: k[1] else k[2]
    JS_FOR,       // for k[0] in k[1] if k[2]: k[3] else k[4]; op: recursive
    JS_SET,       // set k[0] = k[1]  (target: JN_NAME, JN_TUPLE of names, JN_GETATTR on a name)
    JS_SETBLOCK,  // set k[0] | k[2] (filters on JN_FILTER with NULL base): body k[1]
    JS_MACRO,     // macro name(names = list2 defaults): k[0]
    JS_CALLBLOCK, // call(names = list2 defaults) k[0]: body k[1]
    JS_FILTERBLK, // filter k[0]: body k[1]
    JS_WITH,      // with list[i] = list2[i]: k[0]
    JS_BREAK,
    JS_CONTINUE,
} jj_node_kind;

typedef struct jv jv;
typedef struct jj_node jj_node;
struct jj_node {
    jj_node_kind kind;
    int line;
    int op;
    const char *name; // NUL-terminated (arena)
    jv *value;
    jj_node *k[5];
    jj_node **list, **list2; // list2 parallels names/list as documented above
    const char **names;
    int *ops; // JN_COMPARE operators
    int n_list, n_list2, n_names;
};

// Parses tokens into the root JS_BODY. Errors as jj_lex; RP_ERR_LIMIT when nested too deeply.
rp_status jj_parse(jj_arena *a, const jj_token *toks, size_t n_toks, jj_node **root);

/* ---- values --------------------------------------------------------------- */

typedef enum jv_kind {
    JV_UNDEF,
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,
    JV_LIST, // also tuples (tuple flag)
    JV_DICT,
    JV_NS,      // namespace(): a dict whose attributes may be assigned
    JV_MACRO,   // a macro or a call block's caller
    JV_BUILTIN, // a global function (range, namespace, raise_exception, ...)
    JV_METHOD,  // a bound method: self . name
    JV_LOOP,    // the `loop` variable
    JV_CYCLER,  // loop.cycle / cycler() state (unused kinds kept simple)
} jv_kind;

typedef struct jj_frame jj_frame;
typedef struct jj_loop jj_loop;

struct jv {
    jv_kind kind;
    bool tuple;       // JV_LIST: a tuple (prints as (a, b); not equal to a list)
    bool gen;         // JV_LIST: the iterator a jinja2 generator filter returns (map, select, reverse, ...):
                      // always true, no len(), no indexing, and used up by its first use (jv_iter_list)
    bool safe;        // JV_STR: a markupsafe Markup ("safe" string): + and % escape the other operand
    const char *name; // JV_UNDEF: what was missing (for messages); JV_METHOD/JV_BUILTIN/JV_MACRO: the name
    union {
        bool b;
        int64_t i;
        double f;
        struct {
            const char *s; // NUL-terminated, UTF-8 (normally)
            size_t len;
        } str;
        struct {
            jv **items;
            size_t n, cap;
        } list;
        struct {
            jv **keys, **vals;
            size_t n, cap;
        } dict; // JV_DICT and JV_NS; insertion-ordered
        struct {
            const jj_node *node; // JS_MACRO or JS_CALLBLOCK
            jj_frame *closure;
            jv *caller; // for a call block's macro call: the caller macro
        } macro;
        struct {
            jv *self;
        } method;
        jj_loop *loop;
    } u;
};

extern jv jv_undefined_v, jv_none_v, jv_true_v, jv_false_v;
#define JV_UNDEFINED (&jv_undefined_v)
#define JV_NONE_ (&jv_none_v)
#define JV_TRUE (&jv_true_v)
#define JV_FALSE (&jv_false_v)

/* ---- render context ------------------------------------------------------- */

typedef struct jj_buf {
    char *s; // rp_malloc'd
    size_t len, cap;
} jj_buf;

struct jj_frame {
    jj_frame *parent;
    const char **names;
    jv **vals;
    size_t n, cap;
};

struct jj_loop {
    jv **items;
    size_t n, index0;
    int depth0;
    jv *last_changed; // loop.changed state
    const jj_node *node; // the recursive for loop, or NULL
    jj_frame *frame;
};

typedef struct jj_ctx {
    jj_arena arena;
    jj_buf *out; // where text goes now
    jj_frame *root, *frame; // globals of the render; the innermost scope
    rp_status st; // first error
    int line;     // line being run (for messages)
    int depth, call_depth;
    unsigned long long steps;
    int loop_ctl;     // 0, JS_BREAK or JS_CONTINUE while unwinding
    jv *filter_input; // a filter block's body text
} jj_ctx;

// Records the first error: RP_ERR_INVALID (or st) "template error: <fmt> (line L)". Returns st.
rp_status jj_fail(jj_ctx *c, rp_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
// raise_exception: "template error: <msg>" exactly.
rp_status jj_raise(jj_ctx *c, const char *msg, size_t len);
// Arena allocation that records RP_ERR_LIMIT / RP_ERR_NOMEM on failure.
void *jj_calloc(jj_ctx *c, size_t n);

bool jj_buf_put(jj_ctx *c, jj_buf *b, const char *s, size_t n);
void jj_buf_free(jj_buf *b);

/* ---- value helpers (jinja_value.c) ----------------------------------------- */

jv *jv_new(jj_ctx *c, jv_kind kind);
jv *jv_int(jj_ctx *c, int64_t i);
jv *jv_float(jj_ctx *c, double f);
jv *jv_bool(bool b);
jv *jv_str(jj_ctx *c, const char *s, size_t len);         // copies
jv *jv_str_owned(jj_ctx *c, const char *s, size_t len);   // s already in the arena, NUL-terminated
jv *jv_undef(jj_ctx *c, const char *name);
jv *jv_list(jj_ctx *c, size_t cap);
bool jv_list_push(jj_ctx *c, jv *l, jv *x);
jv *jv_dict(jj_ctx *c, jv_kind kind, size_t cap);
bool jv_dict_set(jj_ctx *c, jv *d, jv *key, jv *val);          // replaces an equal key in place
jv *jv_dict_get(jj_ctx *c, const jv *d, const jv *key);         // NULL if absent (or error)
jv *jv_dict_gets(const jv *d, const char *key);                 // string key lookup, NULL if absent
jv *jv_from_json(jj_ctx *c, const json_t *j, int depth);

// markupsafe's Markup: s (a JV_STR) as a Markup over the same bytes (s itself when it is one).
jv *jv_markup(jj_ctx *c, jv *s);
// r as a Markup when src is one (the str methods and filters that return Markup for Markup); else r.
jv *jv_keep_safe(jj_ctx *c, const jv *src, jv *r);
// markupsafe.escape(v): a Markup as is; anything else str(v) with & < > ' " escaped, as a Markup.
jv *jj_escape(jj_ctx *c, const jv *v);
// A generator result: l marked as one (see jv.gen).
jv *jv_gen(jv *l);

bool jv_truthy(const jv *v);
bool jv_is_num(const jv *v); // bool, int, float
double jv_num(const jv *v);
const char *jv_type_name(const jv *v);
bool jv_iterable(const jv *v);

// Python str(v) / repr(v) appended to b. false on error (recorded).
bool jv_to_str(jj_ctx *c, jj_buf *b, const jv *v);
bool jv_repr(jj_ctx *c, jj_buf *b, const jv *v, int depth);
jv *jv_stringify(jj_ctx *c, const jv *v); // str(v) as a JV_STR (v itself when it is one)
// json.dumps(v, ensure_ascii, indent (NULL: none), separators (NULL: default), sort_keys).
bool jv_to_json(jj_ctx *c, jj_buf *b, const jv *v, bool ensure_ascii, const char *indent, const char *item_sep,
                const char *key_sep, bool sort_keys, int level);
void jj_fmt_float(double d, char *buf, size_t cap); // Python repr(float)

// Python ==: 1 (equal), 0, or -1 on error. Ordering: <0, 0, >0 in *out; false on a type error.
int jv_equal(jj_ctx *c, const jv *a, const jv *b, int depth);
bool jv_compare(jj_ctx *c, const jv *a, const jv *b, int *out, int depth);
// Items of an iterable as a list (dict: keys, str: characters as plain str, undefined: empty). NULL + error if
// not iterable. A generator is used up: it hands its remaining items to a new list and is empty afterwards.
jv *jv_iter_list(jj_ctx *c, const jv *v);
int64_t jv_len(jj_ctx *c, const jv *v); // -1 + error if it has no length

// UTF-8 helpers: code point count, decode one (invalid bytes decode as themselves), encode.
size_t jj_utf8_count(const char *s, size_t len);
uint32_t jj_utf8_next(const char *s, size_t len, size_t *pos);
size_t jj_utf8_put(uint32_t cp, char *out);
bool jj_py_isspace(uint32_t cp);
// Byte offset of code point index i (clamped to len).
size_t jj_utf8_offset(const char *s, size_t len, size_t i);

/* ---- evaluation (jinja_eval.c) -------------------------------------------- */

jv *jj_eval(jj_ctx *c, const jj_node *n);
rp_status jj_exec(jj_ctx *c, const jj_node *n);
jv *jj_lookup(jj_ctx *c, const char *name);
bool jj_frame_set(jj_ctx *c, jj_frame *f, const char *name, jv *v);
jv *jj_getattr(jj_ctx *c, jv *obj, const char *name);
jv *jj_getitem(jj_ctx *c, jv *obj, jv *key);
// Calls a callable value with evaluated arguments.
jv *jj_call(jj_ctx *c, jv *fn, jv **args, int n_args, const char **kw_names, jv **kw_vals, int n_kw);

/* ---- filters, tests, globals (jinja_filters.c); methods, formatting (jinja_str.c) */

jv *jj_filter(jj_ctx *c, const char *name, jv *v, jv **args, int n_args, const char **kw_names, jv **kw_vals,
              int n_kw);
int jj_test(jj_ctx *c, const char *name, jv *v, jv **args, int n_args, const char **kw_names, jv **kw_vals,
            int n_kw); // 1, 0, -1 on error
bool jj_has_method(const jv *self, const char *name);
jv *jj_call_method(jj_ctx *c, jv *self, const char *name, jv **args, int n_args, const char **kw_names, jv **kw_vals,
                   int n_kw);
jv *jj_global(jj_ctx *c, const char *name); // NULL if not a global
jv *jj_call_builtin(jj_ctx *c, const char *name, jv **args, int n_args, const char **kw_names, jv **kw_vals, int n_kw);
// Python's `str % args` formatting.
jv *jj_percent_format(jj_ctx *c, const jv *fmt, jv *args);

/* ---- shared by the filter and string files --------------------------------- */

// Binds positional and keyword arguments to parameter names; out[i] NULL when not given.
bool jj_bind(jj_ctx *c, const char *what, const char *const *params, int np, jv **args, int n_args,
             const char **kw_names, jv **kw_vals, int n_kw, jv **out);
#define BIND(what, ...)                                                                                                \
    static const char *const params_[] = {__VA_ARGS__};                                                                \
    jv *a[sizeof(params_) / sizeof(params_[0])];                                                                       \
    if (!jj_bind(c, what, params_, (int)(sizeof(params_) / sizeof(params_[0])), args, n_args, kw_names, kw_vals, n_kw, a)) \
        return NULL;

bool jj_given(const jv *v); // passed and not none/undefined
bool jj_arg_bool(const jv *v, bool dflt);
bool jj_want_int(jj_ctx *c, const jv *v, const char *what, int64_t *out);
bool jj_want_str(jj_ctx *c, const jv *v, const char *what);

// A string being built; jj_sbuf_done turns it into a value (and frees the buffer).
typedef struct jj_sbuf {
    jj_ctx *c;
    jj_buf b;
} jj_sbuf;
bool jj_sput(jj_sbuf *s, const char *p, size_t n);
bool jj_sputc(jj_sbuf *s, uint32_t cp);
jv *jj_sbuf_done(jj_sbuf *s);
// Appends text padded to width code points with fill ('<' left, '>' right, '^' center aligned).
bool jj_pad_put(jj_sbuf *o, const char *text, size_t len, int64_t width, char align, char fill);

enum { JJ_CASE_UPPER, JJ_CASE_LOWER, JJ_CASE_CAPITALIZE, JJ_CASE_TITLE_METHOD, JJ_CASE_TITLE_FILTER, JJ_CASE_SWAP };
jv *jj_str_case(jj_ctx *c, const jv *s, int mode);
jv *jj_str_strip(jj_ctx *c, const jv *s, const jv *chars, bool left, bool right); // chars NULL: whitespace
jv *jj_str_replace(jj_ctx *c, const jv *s, const jv *old, const jv *new_, int64_t count); // count < 0: all
jv *jj_str_split(jj_ctx *c, const jv *s, const jv *sep, int64_t maxsplit, bool from_right);
jv *jj_str_splitlines(jj_ctx *c, const jv *s);
jv *jj_html_escape(jj_ctx *c, const jv *s);

#endif
