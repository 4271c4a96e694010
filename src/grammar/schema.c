/*
 * schema.c - JSON Schema (the subset OpenAI documents for structured outputs)
 * compiled to the node table the matcher walks, with limits and a cache.
 *
 * Each subschema becomes one node (grammar_int.h); a `$ref` is the id of its
 * target (reserved before the target's contents are read, so recursion is just
 * a node that names itself), `anyOf`/`oneOf` and type lists become unions
 * whose alternatives must start with different bytes (a string, a number, an
 * object, an array, or literals), so the first byte of a value picks one and
 * the matcher never has to run two alternatives at once. Objects emit their
 * properties in the schema's order (optional ones may be left out), as
 * OpenAI's structured outputs do; properties not listed are never written.
 * Every string the grammar lets through is written without needless escapes.
 * All of that makes the grammar a subset of what the schema accepts: whatever
 * it lets through validates.
 *
 * A keyword outside the subset is RP_ERR_UNSUPPORTED, malformed schemas
 * RP_ERR_INVALID and limits RP_ERR_LIMIT, each with the JSON pointer and the
 * keyword in rp_json_schema_error. After the walk: first bytes (a fixpoint),
 * union disjointness, unions that loop without reading anything, and each
 * node's depth (the fewest containers a value needs), so that the matcher can
 * refuse to open a container that could not be closed within SC_MAX_DEPTH.
 *
 * The cache maps a schema's compact text (insertion order kept: property order
 * matters) to a compiled schema, shared by reference count.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "grammar_int.h"

void rp_json_schema_limits_default(rp_json_schema_limits *l)
{
    l->max_bytes = 256 * 1024;
    l->max_nodes = 10000;
    l->max_props = 5000;
    l->max_enum = 1000;
    l->max_depth = 32;
    l->max_pattern_states = 1000;
    l->max_ref_chain = 32;
    l->budget_ms = 200;
}

/* ---- growable tables ---------------------------------------------------------- */

static bool grow(void **p, uint32_t *cap, uint32_t need, size_t size)
{
    if (need <= *cap)
        return true;
    uint32_t n = *cap ? *cap : 16;
    while (n < need)
        n *= 2;
    void *q = rp_realloc(*p, (size_t)n * size);
    if (!q)
        return false;
    *p = q;
    *cap = n;
    return true;
}

/* ---- the compile context -------------------------------------------------------- */

typedef struct memo_entry {
    const json_t *s;
    uint16_t node;
} memo_entry;

typedef struct cc {
    rp_json_schema *sc;
    const json_t *root;
    const rp_json_schema_limits *lim;
    rp_json_schema_error *err;
    char path[sizeof(((rp_json_schema_error *)0)->path) - 1];
    size_t path_len;
    memo_entry *memo; // open addressing, memo_cap slots
    uint32_t memo_cap;
    int ref_chain;
    struct timespec t0;
    uint32_t cap_nodes, cap_sets;
} cc;

static void push_path(cc *c, const char *seg, size_t *saved)
{
    *saved = c->path_len;
    size_t room = sizeof(c->path) - 1;
    if (c->path_len < room)
        c->path[c->path_len++] = '/';
    for (const char *p = seg; *p && c->path_len + 2 < room; p++) {
        if (*p == '~' || *p == '/') { // RFC 6901
            c->path[c->path_len++] = '~';
            c->path[c->path_len++] = *p == '~' ? '0' : '1';
        } else {
            c->path[c->path_len++] = *p;
        }
    }
    c->path[c->path_len] = 0;
}

static void pop_path(cc *c, size_t saved)
{
    c->path_len = saved;
    c->path[saved] = 0;
}

// Records where the error is and returns st (the message already set by RP_ERR).
static rp_status fail_at(cc *c, const char *keyword, rp_status st)
{
    if (keyword && *keyword) { // the path ends at the keyword
        size_t kl = strlen(keyword), saved;
        if (!(c->path_len > kl && c->path[c->path_len - kl - 1] == '/' &&
              strcmp(c->path + c->path_len - kl, keyword) == 0))
            push_path(c, keyword, &saved);
    }
    if (c->err) {
        snprintf(c->err->path, sizeof(c->err->path), "#%s", c->path);
        snprintf(c->err->keyword, sizeof(c->err->keyword), "%s", keyword ? keyword : "");
    }
    return st;
}

#define FAIL(c, kw, code, ...) fail_at((c), (kw), RP_ERR((code), __VA_ARGS__))

static double elapsed_ms(const cc *c)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - c->t0.tv_sec) * 1e3 + (double)(t.tv_nsec - c->t0.tv_nsec) / 1e6;
}

static rp_status check_time(cc *c)
{
    if (elapsed_ms(c) > c->lim->budget_ms)
        return FAIL(c, NULL, RP_ERR_LIMIT, "the schema took over %.0f ms to compile", c->lim->budget_ms);
    return RP_OK;
}

static rp_status new_node(cc *c, uint8_t kind, uint16_t *out)
{
    rp_json_schema *sc = c->sc;
    if (sc->n_nodes >= c->lim->max_nodes || sc->n_nodes >= SC_NONE - 1)
        return FAIL(c, NULL, RP_ERR_LIMIT, "the schema has over %d subschemas", c->lim->max_nodes);
    if (!grow((void **)&sc->nodes, &c->cap_nodes, (uint32_t)sc->n_nodes + 1, sizeof(sc_node)))
        return RP_ERR(RP_ERR_NOMEM, "out of memory compiling a schema");
    sc_node *n = &sc->nodes[sc->n_nodes];
    memset(n, 0, sizeof(*n));
    n->kind = kind;
    n->dfa = n->set = -1;
    n->items = SC_NONE;
    n->max_items = SC_NONE;
    n->depth = SC_DEPTH_INF;
    *out = (uint16_t)sc->n_nodes++;
    return RP_OK;
}

static uint32_t ptr_hash(const json_t *s)
{
    uintptr_t x = (uintptr_t)s;
    x ^= x >> 17;
    x *= 0xed5ad4bbU;
    x ^= x >> 11;
    return (uint32_t)x;
}

static bool memo_get(const cc *c, const json_t *s, uint16_t *out)
{
    for (uint32_t i = ptr_hash(s) & (c->memo_cap - 1);; i = (i + 1) & (c->memo_cap - 1)) {
        if (!c->memo[i].s)
            return false;
        if (c->memo[i].s == s) {
            *out = c->memo[i].node;
            return true;
        }
    }
}

static void memo_put(cc *c, const json_t *s, uint16_t node)
{
    uint32_t i = ptr_hash(s) & (c->memo_cap - 1);
    while (c->memo[i].s && c->memo[i].s != s)
        i = (i + 1) & (c->memo_cap - 1);
    c->memo[i] = (memo_entry){s, node};
}

/* ---- string sets ----------------------------------------------------------------- */

typedef struct str_item {
    const uint8_t *p;
    size_t len;
    uint16_t val;
} str_item;

static int cmp_str_item(const void *pa, const void *pb)
{
    const str_item *a = pa, *b = pb;
    size_t n = a->len < b->len ? a->len : b->len;
    int r = memcmp(a->p, b->p, n);
    return r ? r : (a->len > b->len) - (a->len < b->len);
}

// Sorts items, drops duplicates (keeping the first val) and stores them as a new set.
static rp_status add_set(cc *c, str_item *items, uint32_t n, int32_t *out)
{
    rp_json_schema *sc = c->sc;
    qsort(items, n, sizeof(*items), cmp_str_item);
    uint32_t m = 0;
    for (uint32_t i = 0; i < n; i++)
        if (!m || cmp_str_item(&items[m - 1], &items[i]) != 0)
            items[m++] = items[i];
    size_t bytes = 0;
    for (uint32_t i = 0; i < m; i++) {
        if (items[i].len > 60000)
            return FAIL(c, NULL, RP_ERR_LIMIT, "a key or literal of over 60000 bytes");
        bytes += items[i].len;
    }
    if (m >= SC_NONE)
        return FAIL(c, NULL, RP_ERR_LIMIT, "over %d keys or literals in one set", SC_NONE - 1);
    if (!grow((void **)&sc->sets, &c->cap_sets, sc->n_sets + 1, sizeof(sc_strs)) ||
        !grow((void **)&sc->strs, &sc->cap_strs, sc->n_strs + m, sizeof(sc_str)))
        return RP_ERR(RP_ERR_NOMEM, "out of memory compiling a schema");
    if (sc->n_blob + bytes > sc->cap_blob) {
        size_t cap = sc->cap_blob ? sc->cap_blob : 256;
        while (cap < sc->n_blob + bytes)
            cap *= 2;
        uint8_t *b = rp_realloc(sc->blob, cap);
        if (!b)
            return RP_ERR(RP_ERR_NOMEM, "out of memory compiling a schema");
        sc->blob = b;
        sc->cap_blob = cap;
    }
    sc->sets[sc->n_sets] = (sc_strs){sc->n_strs, m};
    for (uint32_t i = 0; i < m; i++) {
        memcpy(sc->blob + sc->n_blob, items[i].p, items[i].len);
        sc->strs[sc->n_strs++] = (sc_str){(uint32_t)sc->n_blob, (uint32_t)items[i].len, items[i].val};
        sc->n_blob += items[i].len;
    }
    *out = (int32_t)sc->n_sets++;
    return RP_OK;
}

/* ---- keywords ---------------------------------------------------------------------- */

static const char *const annotations[] = {"title", "description", "$comment", "examples", "default", "$schema",
                                          "$id", "deprecated", "readOnly", "writeOnly", "$defs", "definitions",
                                          NULL};
static const char *const supported[] = {"type", "properties", "required", "additionalProperties", "items",
                                        "minItems", "maxItems", "enum", "const", "anyOf", "oneOf", "allOf", "$ref",
                                        "pattern", "format", "minimum", "maximum", "exclusiveMinimum",
                                        "exclusiveMaximum", NULL};

static bool in_list(const char *const *list, const char *k)
{
    for (int i = 0; list[i]; i++)
        if (strcmp(list[i], k) == 0)
            return true;
    return false;
}

static bool has(const json_t *s, const char *k)
{
    return json_object_get(s, k) != NULL;
}

// Formats as patterns the DFA enforces, each a subset of what ajv-formats' full mode accepts.
static const char *format_pattern(const char *f)
{
#define DATE                                                                                                          \
    "[0-9]{4}-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)|02-(0[1-9]|1[0-9]|2[0-8]))"
#define TIME "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,9})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
    if (strcmp(f, "date") == 0)
        return "^" DATE "$";
    if (strcmp(f, "time") == 0)
        return "^" TIME "$";
    if (strcmp(f, "date-time") == 0)
        return "^" DATE "T" TIME "$";
    if (strcmp(f, "email") == 0)
        return "^[A-Za-z0-9_%+-]+(\\.[A-Za-z0-9_%+-]+)*@([A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?\\.)+[A-Za-z]{2}[A-Za-z]*$";
    if (strcmp(f, "uuid") == 0)
        return "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$";
    return NULL;
#undef DATE
#undef TIME
}

static rp_status compile(cc *c, const json_t *s, int depth, uint16_t *out);

// compile() of the subschema at path/seg1[/seg2]; on failure the path stays where the error is.
static rp_status compile_at(cc *c, const char *seg1, const char *seg2, const json_t *s, int depth, uint16_t *out)
{
    size_t at, inner;
    push_path(c, seg1, &at);
    if (seg2)
        push_path(c, seg2, &inner);
    rp_status st = compile(c, s, depth, out);
    if (!st)
        pop_path(c, at);
    return st;
}

static rp_status add_dfa(cc *c, const char *pattern, const char *keyword, int32_t *out)
{
    rp_json_schema *sc = c->sc;
    uint32_t cap = (uint32_t)sc->cap_dfas;
    if (!grow((void **)&sc->dfas, &cap, (uint32_t)sc->n_dfas + 1, sizeof(rx_dfa)))
        return RP_ERR(RP_ERR_NOMEM, "out of memory compiling a schema");
    sc->cap_dfas = (int)cap;
    rp_status st = rx_compile(pattern, strlen(pattern), c->lim->max_pattern_states, c->lim->budget_ms - elapsed_ms(c),
                              &sc->dfas[sc->n_dfas]);
    if (st)
        return fail_at(c, keyword, st);
    *out = sc->n_dfas++;
    return RP_OK;
}

// A literal's compact JSON text (json_dumps' memory, in *text) as a set item.
static rp_status literal_item(const json_t *v, str_item *it, char **text)
{
    *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!*text)
        return RP_ERR(RP_ERR_NOMEM, "out of memory compiling a schema");
    it->p = (const uint8_t *)*text;
    it->len = strlen(*text);
    it->val = 0;
    return RP_OK;
}

static bool type_admits(unsigned types, const json_t *v)
{
    if (!types)
        return true;
    switch (json_typeof(v)) {
    case JSON_STRING: return types & (1u << 0);
    case JSON_INTEGER: return types & ((1u << 1) | (1u << 2));
    case JSON_REAL: return (types & (1u << 1)) || ((types & (1u << 2)) && json_real_value(v) == floor(json_real_value(v)));
    case JSON_OBJECT: return types & (1u << 3);
    case JSON_ARRAY: return types & (1u << 4);
    case JSON_TRUE:
    case JSON_FALSE: return types & (1u << 5);
    case JSON_NULL: return types & (1u << 6);
    }
    return false;
}

// enum/const (filtered by `type` bits when given) into a literal node.
static rp_status build_lits(cc *c, const json_t *s, unsigned types, uint16_t id)
{
    const json_t *en = json_object_get(s, "enum"), *cn = json_object_get(s, "const");
    const char *kw = en ? "enum" : "const";
    if (en && cn)
        return FAIL(c, "const", RP_ERR_UNSUPPORTED, "'enum' and 'const' together are not supported");
    if (en && (!json_is_array(en) || json_array_size(en) == 0))
        return FAIL(c, "enum", RP_ERR_INVALID, "'enum' must be a non-empty array");
    size_t n = en ? json_array_size(en) : 1;
    if (n > (size_t)c->lim->max_enum)
        return FAIL(c, kw, RP_ERR_LIMIT, "'enum' has %zu values; at most %d are supported", n, c->lim->max_enum);
    str_item *items = rp_calloc(n, sizeof(*items));
    char **texts = rp_calloc(n, sizeof(*texts));
    rp_status st = RP_OK;
    uint32_t m = 0;
    if (!items || !texts) {
        st = RP_ERR(RP_ERR_NOMEM, "out of memory compiling a schema");
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        const json_t *v = en ? json_array_get(en, i) : cn;
        if (!type_admits(types, v))
            continue;
        if ((st = literal_item(v, &items[m], &texts[m])))
            goto done;
        m++;
    }
    if (!m) {
        st = FAIL(c, kw, RP_ERR_INVALID, "no value of '%s' has the schema's type: nothing could match", kw);
        goto done;
    }
    int32_t set;
    if ((st = add_set(c, items, m, &set)))
        goto done;
    c->sc->nodes[id].kind = SK_LIT;
    c->sc->nodes[id].set = set;
done:
    for (uint32_t i = 0; texts && i < n; i++)
        free(texts[i]); // json_dumps' memory
    rp_free(items);
    rp_free(texts);
    return st;
}

static rp_status literal_words(cc *c, bool boolean, bool null, uint16_t id)
{
    str_item items[3];
    uint32_t n = 0;
    if (boolean) {
        items[n++] = (str_item){(const uint8_t *)"true", 4, 0};
        items[n++] = (str_item){(const uint8_t *)"false", 5, 0};
    }
    if (null)
        items[n++] = (str_item){(const uint8_t *)"null", 4, 0};
    int32_t set;
    rp_status st = add_set(c, items, n, &set);
    if (!st) {
        c->sc->nodes[id].kind = SK_LIT;
        c->sc->nodes[id].set = set;
    }
    return st;
}

static rp_status read_count(cc *c, const json_t *s, const char *k, long long *v)
{
    const json_t *x = json_object_get(s, k);
    if (!x)
        return RP_OK;
    if (!json_is_integer(x) || json_integer_value(x) < 0)
        return FAIL(c, k, RP_ERR_INVALID, "'%s' must be a non-negative integer", k);
    if (json_integer_value(x) >= SC_NONE)
        return FAIL(c, k, RP_ERR_LIMIT, "'%s' over %d is not supported", k, SC_NONE - 1);
    *v = json_integer_value(x);
    return RP_OK;
}

static rp_status build_arr(cc *c, const json_t *s, int depth, uint16_t id)
{
    long long mn = 0, mx = -1;
    rp_status st;
    if ((st = read_count(c, s, "minItems", &mn)) || (st = read_count(c, s, "maxItems", &mx)))
        return st;
    if (mx >= 0 && mx < mn)
        return FAIL(c, "maxItems", RP_ERR_INVALID, "'maxItems' (%lld) is below 'minItems' (%lld)", mx, mn);
    const json_t *items = json_object_get(s, "items");
    uint16_t it;
    if (items && json_is_array(items))
        return FAIL(c, "items", RP_ERR_UNSUPPORTED, "'items' as an array (tuples) is not supported");
    if (items) {
        if ((st = compile_at(c, "items", NULL, items, depth + 1, &it)))
            return st;
    } else {
        if ((st = new_node(c, SK_ANY, &it)))
            return st;
    }
    sc_node *n = &c->sc->nodes[id];
    n->kind = SK_ARR;
    n->items = it;
    n->min_items = (uint16_t)mn;
    n->max_items = mx < 0 ? SC_NONE : (uint16_t)mx;
    return RP_OK;
}

static rp_status build_str(cc *c, const json_t *s, uint16_t id)
{
    const json_t *pat = json_object_get(s, "pattern"), *fmt = json_object_get(s, "format");
    int32_t dfa = -1;
    rp_status st = RP_OK;
    if (pat && fmt)
        return FAIL(c, "format", RP_ERR_UNSUPPORTED, "'pattern' and 'format' together are not supported");
    if (pat) {
        if (!json_is_string(pat))
            return FAIL(c, "pattern", RP_ERR_INVALID, "'pattern' must be a string");
        size_t saved;
        push_path(c, "pattern", &saved);
        st = add_dfa(c, json_string_value(pat), "pattern", &dfa);
        if (st)
            return st;
        pop_path(c, saved);
    } else if (fmt) {
        const char *f = json_string_value(fmt);
        const char *p = f ? format_pattern(f) : NULL;
        size_t saved;
        push_path(c, "format", &saved);
        if (!p)
            return FAIL(c, "format", RP_ERR_UNSUPPORTED,
                        "format '%s' is not supported (date-time, date, time, email and uuid are)", f ? f : "?");
        if ((st = add_dfa(c, p, "format", &dfa)))
            return st;
        pop_path(c, saved);
    }
    sc_node *n = &c->sc->nodes[id];
    n->kind = SK_STR;
    n->dfa = dfa;
    return RP_OK;
}

static rp_status build_num(cc *c, const json_t *s, bool integer, uint16_t id)
{
    static const char *const keys[4] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
    static const uint8_t flags[4] = {SF_MIN, SF_MAX, SF_MIN | SF_XMIN, SF_MAX | SF_XMAX};
    double lo = -INFINITY, hi = INFINITY;
    uint8_t f = 0;
    for (int i = 0; i < 4; i++) {
        const json_t *x = json_object_get(s, keys[i]);
        if (!x)
            continue;
        if (!json_is_number(x))
            return FAIL(c, keys[i], RP_ERR_INVALID, "'%s' must be a number", keys[i]);
        double v = json_number_value(x);
        if (fabs(v) > 1e15)
            return FAIL(c, keys[i], RP_ERR_LIMIT, "'%s' beyond 1e15 is not supported", keys[i]);
        bool xcl = i >= 2;
        if (flags[i] & SF_MIN) {
            if (v > lo || (v == lo && xcl)) {
                lo = v;
                f = (uint8_t)((f & ~SF_XMIN) | SF_MIN | (xcl ? SF_XMIN : 0));
            }
        } else if (v < hi || (v == hi && xcl)) {
            hi = v;
            f = (uint8_t)((f & ~SF_XMAX) | SF_MAX | (xcl ? SF_XMAX : 0));
        }
    }
    if (integer) { // integer bounds, inclusive
        if (f & SF_MIN) {
            lo = (f & SF_XMIN) ? floor(lo) + 1 : ceil(lo);
            f &= (uint8_t)~SF_XMIN;
        }
        if (f & SF_MAX) {
            hi = (f & SF_XMAX) ? ceil(hi) - 1 : floor(hi);
            f &= (uint8_t)~SF_XMAX;
        }
    }
    if ((f & SF_MIN) && (f & SF_MAX) && (lo > hi || (lo == hi && (f & (SF_XMIN | SF_XMAX)))))
        return FAIL(c, "maximum", RP_ERR_INVALID, "the bounds leave no number");
    sc_node *n = &c->sc->nodes[id];
    n->kind = integer ? SK_INT : SK_NUM;
    n->flags = f;
    n->num_min = lo;
    n->num_max = hi;
    return RP_OK;
}

static rp_status build_obj(cc *c, const json_t *s, int depth, uint16_t id)
{
    rp_json_schema *sc = c->sc;
    const json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    const json_t *add = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props))
        return FAIL(c, "properties", RP_ERR_INVALID, "'properties' must be an object");
    if (req && !json_is_array(req))
        return FAIL(c, "required", RP_ERR_INVALID, "'required' must be an array of strings");
    if (add && !json_is_boolean(add) && !(json_is_object(add) && json_object_size(add) == 0))
        return FAIL(c, "additionalProperties", RP_ERR_UNSUPPORTED,
                    "'additionalProperties' with a schema is not supported (use false)");
    size_t n = props ? json_object_size(props) : 0;
    for (size_t i = 0; req && i < json_array_size(req); i++) {
        const char *k = json_string_value(json_array_get(req, i));
        if (!k)
            return FAIL(c, "required", RP_ERR_INVALID, "'required' must be an array of strings");
        if (!json_object_get(props, k))
            return FAIL(c, "required", RP_ERR_UNSUPPORTED, "required property '%s' is not in 'properties'", k);
    }
    sc_node *nd = &sc->nodes[id];
    nd->kind = SK_OBJ;
    if (n == 0 && !json_is_false(add)) {
        nd->flags |= SF_OBJ_FREE;
        return RP_OK;
    }
    if (sc->n_props + n > (size_t)c->lim->max_props)
        return FAIL(c, "properties", RP_ERR_LIMIT, "the schema has over %d properties", c->lim->max_props);
    uint32_t first = sc->n_props, rq = sc->n_req;
    if (!grow((void **)&sc->props, &sc->cap_props, first + (uint32_t)n, sizeof(sc_prop)) ||
        !grow((void **)&sc->next_req, &sc->cap_req, rq + (uint32_t)n + 1, sizeof(uint16_t)))
        return RP_ERR(RP_ERR_NOMEM, "out of memory compiling a schema");
    sc->n_props += (uint32_t)n;
    sc->n_req += (uint32_t)n + 1;
    str_item *items = rp_calloc(n ? n : 1, sizeof(*items));
    char **texts = rp_calloc(n ? n : 1, sizeof(*texts));
    rp_status st = RP_OK;
    if (!items || !texts) {
        st = RP_ERR(RP_ERR_NOMEM, "out of memory compiling a schema");
        goto done;
    }
    const char *k;
    const json_t *v;
    size_t i = 0;
    json_object_foreach((json_t *)props, k, v) {
        uint16_t child;
        if ((st = compile_at(c, "properties", k, v, depth + 1, &child)))
            goto done;
        bool r = false;
        for (size_t j = 0; req && j < json_array_size(req); j++)
            r = r || strcmp(json_string_value(json_array_get(req, j)), k) == 0;
        sc->props[first + i] = (sc_prop){child, r};
        json_t *ks = json_string(k);
        texts[i] = ks ? json_dumps(ks, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
        json_decref(ks);
        if (!texts[i]) {
            st = RP_ERR(RP_ERR_NOMEM, "out of memory compiling a schema");
            goto done;
        }
        items[i] = (str_item){(const uint8_t *)texts[i] + 1, strlen(texts[i]) - 2, (uint16_t)i}; // without quotes
        i++;
    }
    for (size_t j = n + 1; j-- > 0;)
        sc->next_req[rq + j] = (uint16_t)(j == n ? n : sc->props[first + j].required ? j : sc->next_req[rq + j + 1]);
    int32_t set;
    if ((st = add_set(c, items, (uint32_t)n, &set)))
        goto done;
    nd = &sc->nodes[id];
    nd->first_prop = first;
    nd->n = (uint32_t)n;
    nd->req = rq;
    nd->set = set;
done:
    for (size_t j = 0; texts && j < n; j++)
        free(texts[j]);
    rp_free(items);
    rp_free(texts);
    return st;
}

static rp_status resolve_ref(cc *c, const char *ref, const json_t **out)
{
    if (ref[0] != '#')
        return FAIL(c, "$ref", RP_ERR_UNSUPPORTED, "$ref '%s': only references inside the schema ('#...') are supported",
                    ref);
    const json_t *at = c->root;
    const char *p = ref + 1;
    if (*p && *p != '/')
        return FAIL(c, "$ref", RP_ERR_UNSUPPORTED, "$ref '%s': anchors are not supported (use a JSON pointer)", ref);
    char seg[256];
    while (*p == '/') {
        p++;
        size_t n = 0;
        for (; *p && *p != '/'; p++) {
            char ch = *p;
            if (ch == '~' && (p[1] == '0' || p[1] == '1'))
                ch = *++p == '0' ? '~' : '/';
            if (n + 1 < sizeof(seg))
                seg[n++] = ch;
        }
        seg[n] = 0;
        if (json_is_object(at)) {
            at = json_object_get(at, seg);
        } else if (json_is_array(at)) {
            char *end;
            long ix = strtol(seg, &end, 10);
            at = *seg && !*end && ix >= 0 ? json_array_get(at, (size_t)ix) : NULL;
        } else {
            at = NULL;
        }
        if (!at)
            return FAIL(c, "$ref", RP_ERR_INVALID, "$ref '%s' points at nothing", ref);
    }
    *out = at;
    return RP_OK;
}

static const char *const type_names[7] = {"string", "number", "integer", "object", "array", "boolean", "null"};

static rp_status read_types(cc *c, const json_t *t, unsigned *out)
{
    *out = 0;
    if (!t)
        return RP_OK;
    size_t n = json_is_array(t) ? json_array_size(t) : 1;
    for (size_t i = 0; i < n; i++) {
        const char *name = json_string_value(json_is_array(t) ? json_array_get(t, i) : t);
        int k = 0;
        while (k < 7 && (!name || strcmp(name, type_names[k]) != 0))
            k++;
        if (k == 7)
            return FAIL(c, "type", RP_ERR_INVALID, "'type' must be one or more of string, number, integer, object, "
                                                   "array, boolean, null");
        *out |= 1u << k;
    }
    if (!*out)
        return FAIL(c, "type", RP_ERR_INVALID, "'type' is an empty list");
    if ((*out & 2) && (*out & 4))
        *out &= ~4u; // number holds integer
    return RP_OK;
}

// One type's leaf into node id.
static rp_status build_leaf(cc *c, const json_t *s, int depth, int k, uint16_t id)
{
    switch (k) {
    case 0: return build_str(c, s, id);
    case 1: return build_num(c, s, false, id);
    case 2: return build_num(c, s, true, id);
    case 3: return build_obj(c, s, depth, id);
    case 4: return build_arr(c, s, depth, id);
    default: return RP_OK; // boolean/null: literal_words
    }
}

static void leaf_first(const rp_json_schema *sc, sc_node *n);

static rp_status compile_union(cc *c, const json_t *s, const char *kw, int depth, uint16_t id)
{
    const json_t *alts = json_object_get(s, kw);
    if (!json_is_array(alts) || json_array_size(alts) == 0)
        return FAIL(c, kw, RP_ERR_INVALID, "'%s' must be a non-empty array of schemas", kw);
    static const char *const alone[] = {"type", "properties", "items", "enum", "const", "pattern", "format",
                                        "minimum", "maximum", "anyOf", "oneOf", "allOf", "$ref", NULL};
    for (int i = 0; alone[i]; i++)
        if (strcmp(alone[i], kw) != 0 && has(s, alone[i]))
            return FAIL(c, alone[i], RP_ERR_UNSUPPORTED, "'%s' beside '%s' is not supported", alone[i], kw);
    size_t n = json_array_size(alts);
    rp_json_schema *sc = c->sc;
    uint32_t first = sc->n_alts;
    if (!grow((void **)&sc->alts, &sc->cap_alts, first + (uint32_t)n, sizeof(uint16_t)))
        return RP_ERR(RP_ERR_NOMEM, "out of memory compiling a schema");
    sc->n_alts += (uint32_t)n;
    for (size_t i = 0; i < n; i++) {
        char ix[24];
        snprintf(ix, sizeof(ix), "%zu", i);
        uint16_t a;
        rp_status st = compile_at(c, kw, ix, json_array_get(alts, i), depth + 1, &a);
        if (st)
            return st;
        sc->alts[first + i] = a;
    }
    // Alternatives already final and not unions: their first bytes must differ (checked here to name the
    // path; the rest after the walk).
    uint64_t seen[4] = {0};
    for (size_t i = 0; i < n; i++) {
        sc_node *x = &sc->nodes[sc->alts[first + i]];
        if (!(x->flags & SF_DONE) || x->kind == SK_UNION)
            continue;
        leaf_first(sc, x);
        for (int w = 0; w < 4; w++) {
            if (seen[w] & x->first[w])
                return FAIL(c, kw, RP_ERR_UNSUPPORTED,
                            "'%s' alternative %zu can start like an earlier one (two objects, two strings, two "
                            "numbers, ...): each alternative must have its own JSON type",
                            kw, i);
            seen[w] |= x->first[w];
        }
    }
    sc_node *nd = &sc->nodes[id];
    nd->kind = SK_UNION;
    nd->first_prop = first;
    nd->n = (uint32_t)n;
    return RP_OK;
}

static rp_status compile_node(cc *c, const json_t *s, int depth, uint16_t *out);

// compile_node, then the node is marked final (a $ref to it from now on sees its contents).
static rp_status compile(cc *c, const json_t *s, int depth, uint16_t *out)
{
    int before = c->sc->n_nodes;
    rp_status st = compile_node(c, s, depth, out);
    if (!st && *out >= before) // made by this call (not a $ref back into one still being compiled)
        c->sc->nodes[*out].flags |= SF_DONE;
    return st;
}

static rp_status compile_node(cc *c, const json_t *s, int depth, uint16_t *out)
{
    rp_status st;
    if (depth > c->lim->max_depth)
        return FAIL(c, NULL, RP_ERR_LIMIT, "the schema is nested over %d deep", c->lim->max_depth);
    if ((st = check_time(c)))
        return st;
    if (memo_get(c, s, out))
        return RP_OK;
    if (json_is_true(s) || (json_is_object(s) && json_object_size(s) == 0)) {
        if ((st = new_node(c, SK_ANY, out)))
            return st;
        memo_put(c, s, *out);
        return RP_OK;
    }
    if (json_is_false(s))
        return FAIL(c, NULL, RP_ERR_UNSUPPORTED, "the schema 'false' can never be satisfied");
    if (!json_is_object(s))
        return FAIL(c, NULL, RP_ERR_INVALID, "a schema must be an object or a boolean");
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        if (in_list(annotations, k) || in_list(supported, k))
            continue;
        size_t saved;
        push_path(c, k, &saved);
        return FAIL(c, k, RP_ERR_UNSUPPORTED, "the keyword '%s' is not supported", k);
    }
    const json_t *ref = json_object_get(s, "$ref"), *all = json_object_get(s, "allOf");
    if (ref || all) { // a delegation: the target's node
        const char *kw = ref ? "$ref" : "allOf";
        json_object_foreach((json_t *)s, k, v) {
            if (!in_list(annotations, k) && strcmp(k, kw) != 0) {
                size_t saved;
                push_path(c, k, &saved);
                return FAIL(c, k, RP_ERR_UNSUPPORTED, "'%s' beside '%s' is not supported", k, kw);
            }
        }
        if (ref) {
            if (!json_is_string(ref))
                return FAIL(c, "$ref", RP_ERR_INVALID, "'$ref' must be a string");
            const json_t *target = NULL;
            if ((st = resolve_ref(c, json_string_value(ref), &target)))
                return st;
            if (++c->ref_chain > c->lim->max_ref_chain)
                return FAIL(c, "$ref", RP_ERR_LIMIT, "$ref chains over %d deep (a $ref cycle that reads nothing?)",
                            c->lim->max_ref_chain);
            char save[sizeof(c->path)];
            size_t save_len = c->path_len;
            memcpy(save, c->path, sizeof(save));
            const char *tp = json_string_value(ref) + 1;
            snprintf(c->path, sizeof(c->path), "%s", tp);
            c->path_len = strlen(c->path);
            st = compile(c, target, depth + 1, out);
            c->ref_chain--;
            if (st)
                return st;
            memcpy(c->path, save, sizeof(save));
            c->path_len = save_len;
        } else {
            if (!json_is_array(all) || json_array_size(all) != 1)
                return FAIL(c, "allOf", RP_ERR_UNSUPPORTED, "'allOf' is supported with one schema only");
            if ((st = compile_at(c, "allOf", "0", json_array_get(all, 0), depth + 1, out)))
                return st;
        }
        memo_put(c, s, *out);
        return RP_OK;
    }
    uint16_t id;
    if ((st = new_node(c, SK_ANY, &id)))
        return st;
    memo_put(c, s, id);
    *out = id;
    if (has(s, "anyOf") || has(s, "oneOf"))
        return compile_union(c, s, has(s, "anyOf") ? "anyOf" : "oneOf", depth, id);
    unsigned types;
    if ((st = read_types(c, json_object_get(s, "type"), &types)))
        return st;
    if (has(s, "enum") || has(s, "const")) {
        static const char *const beside[] = {"pattern", "format", "minimum", "maximum", "exclusiveMinimum",
                                             "exclusiveMaximum", "properties", "items", NULL};
        for (int i = 0; beside[i]; i++)
            if (has(s, beside[i]))
                return FAIL(c, beside[i], RP_ERR_UNSUPPORTED, "'%s' beside 'enum'/'const' is not supported",
                            beside[i]);
        return build_lits(c, s, types, id);
    }
    if (!types) { // no type: the one the keywords imply, or any value
        if (has(s, "properties") || has(s, "required") || has(s, "additionalProperties"))
            types = 1u << 3;
        else if (has(s, "items") || has(s, "minItems") || has(s, "maxItems"))
            types = 1u << 4;
        else if (has(s, "pattern") || has(s, "format"))
            types = 1u << 0;
        else if (has(s, "minimum") || has(s, "maximum") || has(s, "exclusiveMinimum") || has(s, "exclusiveMaximum"))
            types = 1u << 1;
        else
            return RP_OK; // SK_ANY
    }
    int n_kinds = 0, only = -1;
    for (int t = 0; t < 5; t++)
        if (types & (1u << t)) {
            n_kinds++;
            only = t;
        }
    bool words = types & (3u << 5);
    if (n_kinds == 1 && !words)
        return build_leaf(c, s, depth, only, id);
    if (n_kinds == 0)
        return literal_words(c, types & (1u << 5), types & (1u << 6), id);
    // Several types: a union of one leaf per type (true/false/null together as literals).
    rp_json_schema *sc = c->sc;
    uint32_t n = (uint32_t)n_kinds + words, first = sc->n_alts;
    if (!grow((void **)&sc->alts, &sc->cap_alts, first + n, sizeof(uint16_t)))
        return RP_ERR(RP_ERR_NOMEM, "out of memory compiling a schema");
    sc->n_alts += n;
    uint32_t i = 0;
    for (int t = 0; t < 5; t++) {
        if (!(types & (1u << t)))
            continue;
        uint16_t leaf;
        if ((st = new_node(c, SK_ANY, &leaf)) || (st = build_leaf(c, s, depth, t, leaf)))
            return st;
        sc->alts[first + i++] = leaf;
    }
    if (words) {
        uint16_t leaf;
        if ((st = new_node(c, SK_ANY, &leaf)) || (st = literal_words(c, types & (1u << 5), types & (1u << 6), leaf)))
            return st;
        sc->alts[first + i++] = leaf;
    }
    sc->nodes[id].kind = SK_UNION;
    sc->nodes[id].first_prop = first;
    sc->nodes[id].n = n;
    return RP_OK;
}

/* ---- after the walk ------------------------------------------------------------------ */

static inline void bit_set(uint64_t *b, uint8_t c)
{
    b[c >> 6] |= (uint64_t)1 << (c & 63);
}

static void leaf_first(const rp_json_schema *sc, sc_node *n)
{
    memset(n->first, 0, sizeof(n->first));
    switch (n->kind) {
    case SK_ANY:
        for (const char *p = "\"{[-0123456789tfn"; *p; p++)
            bit_set(n->first, (uint8_t)*p);
        break;
    case SK_STR: bit_set(n->first, '"'); break;
    case SK_NUM:
    case SK_INT:
        for (const char *p = "-0123456789"; *p; p++)
            bit_set(n->first, (uint8_t)*p);
        break;
    case SK_OBJ: bit_set(n->first, '{'); break;
    case SK_ARR: bit_set(n->first, '['); break;
    case SK_LIT: {
        const sc_strs *set = &sc->sets[n->set];
        for (uint32_t i = 0; i < set->n; i++)
            bit_set(n->first, sc->blob[sc->strs[set->first + i].off]);
        break;
    }
    default: break;
    }
}

static rp_status finish(cc *c)
{
    rp_json_schema *sc = c->sc;
    for (int i = 0; i < sc->n_nodes; i++)
        leaf_first(sc, &sc->nodes[i]);
    // First bytes of unions: a fixpoint (unions may name each other through $ref).
    for (bool changed = true; changed;) {
        changed = false;
        for (int i = 0; i < sc->n_nodes; i++) {
            sc_node *n = &sc->nodes[i];
            if (n->kind != SK_UNION)
                continue;
            for (uint32_t a = 0; a < n->n; a++) {
                const sc_node *x = &sc->nodes[sc->alts[n->first_prop + a]];
                for (int w = 0; w < 4; w++) {
                    uint64_t nw = n->first[w] | x->first[w];
                    changed = changed || nw != n->first[w];
                    n->first[w] = nw;
                }
            }
        }
    }
    for (int i = 0; i < sc->n_nodes; i++) {
        const sc_node *n = &sc->nodes[i];
        if (n->kind != SK_UNION)
            continue;
        uint64_t seen[4] = {0};
        for (uint32_t a = 0; a < n->n; a++) {
            uint16_t id = sc->alts[n->first_prop + a];
            const sc_node *x = &sc->nodes[id];
            // A union reaching itself through unions alone reads nothing before looping.
            uint16_t at = id;
            for (int hops = 0; sc->nodes[at].kind == SK_UNION && hops <= sc->n_nodes; hops++) {
                if (at == i || hops == sc->n_nodes) {
                    snprintf(c->err->path, sizeof(c->err->path), "#");
                    snprintf(c->err->keyword, sizeof(c->err->keyword), "anyOf");
                    return RP_ERR(RP_ERR_UNSUPPORTED, "an anyOf/$ref cycle that reads nothing");
                }
                at = sc->alts[sc->nodes[at].first_prop];
            }
            for (int w = 0; w < 4; w++) {
                if (seen[w] & x->first[w]) {
                    snprintf(c->err->path, sizeof(c->err->path), "#");
                    snprintf(c->err->keyword, sizeof(c->err->keyword), "anyOf");
                    return RP_ERR(RP_ERR_UNSUPPORTED,
                                  "anyOf/oneOf/type alternatives that can start alike (two objects, two strings, two "
                                  "numbers, ...) are not supported: each alternative must have its own JSON type");
                }
                seen[w] |= x->first[w];
            }
        }
    }
    // Depths: the fewest containers a value needs (a fixpoint from "none fits").
    for (bool changed = true; changed;) {
        changed = false;
        for (int i = 0; i < sc->n_nodes; i++) {
            sc_node *n = &sc->nodes[i];
            unsigned d = SC_DEPTH_INF;
            switch (n->kind) {
            case SK_OBJ:
                d = 1;
                for (uint32_t p = 0; p < n->n; p++)
                    if (sc->props[n->first_prop + p].required) {
                        unsigned x = sc->nodes[sc->props[n->first_prop + p].node].depth;
                        if (x >= SC_DEPTH_INF)
                            d = SC_DEPTH_INF;
                        else if (d < SC_DEPTH_INF && x + 1 > d)
                            d = x + 1;
                    }
                break;
            case SK_ARR:
                d = n->min_items == 0 ? 1
                    : sc->nodes[n->items].depth >= SC_DEPTH_INF ? SC_DEPTH_INF
                                                                 : sc->nodes[n->items].depth + 1u;
                break;
            case SK_UNION:
                for (uint32_t a = 0; a < n->n; a++) {
                    unsigned x = sc->nodes[sc->alts[n->first_prop + a]].depth;
                    d = x < d ? x : d;
                }
                break;
            default: d = 0; break;
            }
            if (d > SC_MAX_DEPTH)
                d = SC_DEPTH_INF;
            if (d != n->depth) {
                n->depth = (uint8_t)d;
                changed = true;
            }
        }
    }
    if (sc->nodes[sc->root].depth >= SC_DEPTH_INF) {
        snprintf(c->err->path, sizeof(c->err->path), "#");
        snprintf(c->err->keyword, sizeof(c->err->keyword), "required");
        return RP_ERR(RP_ERR_UNSUPPORTED,
                      "no document of this schema fits in %d levels of nesting (a required recursion?)", SC_MAX_DEPTH);
    }
    return RP_OK;
}

static void schema_free(rp_json_schema *sc)
{
    if (!sc)
        return;
    for (int i = 0; i < sc->n_dfas; i++)
        rx_dfa_deinit(&sc->dfas[i]);
    rp_free(sc->dfas);
    rp_free(sc->nodes);
    rp_free(sc->props);
    rp_free(sc->next_req);
    rp_free(sc->alts);
    rp_free(sc->sets);
    rp_free(sc->strs);
    rp_free(sc->blob);
    rp_free(sc->suffix);
    rp_free(sc);
}

rp_status rp_json_schema_compile(const json_t *schema, const rp_json_schema_limits *lim, rp_json_schema **out,
                                 rp_json_schema_error *err)
{
    *out = NULL;
    rp_json_schema_limits def;
    rp_json_schema_error dummy;
    if (!lim) {
        rp_json_schema_limits_default(&def);
        lim = &def;
    }
    if (!err)
        err = &dummy;
    memset(err, 0, sizeof(*err));
    snprintf(err->path, sizeof(err->path), "#");
    cc c = {.root = schema, .lim = lim, .err = err};
    clock_gettime(CLOCK_MONOTONIC, &c.t0);
    char *text = json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!text)
        return RP_ERR(RP_ERR_NOMEM, "out of memory compiling a schema");
    size_t bytes = strlen(text);
    free(text);
    if (bytes > lim->max_bytes)
        return RP_ERR(RP_ERR_LIMIT, "the schema is %zu bytes; at most %zu are supported", bytes, lim->max_bytes);
    c.sc = rp_calloc(1, sizeof(*c.sc));
    c.memo_cap = 64;
    while (c.memo_cap < (uint32_t)lim->max_nodes * 4u)
        c.memo_cap *= 2;
    c.memo = rp_calloc(c.memo_cap, sizeof(*c.memo));
    rp_status st;
    if (!c.sc || !c.memo) {
        st = RP_ERR(RP_ERR_NOMEM, "out of memory compiling a schema");
        goto fail;
    }
    c.sc->refs = 1;
    if ((st = compile(&c, schema, 0, &c.sc->root)))
        goto fail;
    if ((st = finish(&c)))
        goto fail;
    rp_free(c.memo);
    *out = c.sc;
    return RP_OK;
fail:
    rp_free(c.memo);
    schema_free(c.sc);
    return st;
}

rp_status rp_json_schema_set_suffix(rp_json_schema *s, const char *text, size_t n)
{
    if (n > 256)
        return RP_ERR(RP_ERR_RANGE, "a grammar suffix of %zu bytes (at most 256)", n);
    char *t = rp_malloc(n + 1);
    if (!t)
        return RP_ERR(RP_ERR_NOMEM, "out of memory for a grammar suffix");
    memcpy(t, text, n);
    t[n] = 0;
    rp_free(s->suffix);
    s->suffix = t;
    s->suffix_len = (uint16_t)n;
    return RP_OK;
}

rp_json_schema *rp_json_schema_ref(const rp_json_schema *s)
{
    rp_json_schema *w = (rp_json_schema *)s;
    if (w && w->refs > 0) // the static any-object schema has refs 0: never counted
        __atomic_add_fetch(&w->refs, 1, __ATOMIC_RELAXED);
    return w;
}

void rp_json_schema_unref(rp_json_schema *s)
{
    if (s && s->refs > 0 && __atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL) == 0)
        schema_free(s);
}

/* ---- json_object mode's schema ------------------------------------------------------- */

static sc_node any_object_node = {
    .kind = SK_OBJ, .flags = SF_OBJ_FREE, .depth = 1, .items = SC_NONE, .max_items = SC_NONE, .dfa = -1, .set = -1,
    .first = {0, (uint64_t)1 << ('{' - 64)}};
static rp_json_schema any_object = {.nodes = &any_object_node, .n_nodes = 1, .root = 0};

const rp_json_schema *json_schema_any_object(void)
{
    return &any_object;
}

/* ---- the cache ------------------------------------------------------------------------ */

typedef struct cache_entry {
    uint64_t hash;
    char *text; // the schema's compact text (json_dumps' memory)
    rp_json_schema *schema;
    uint64_t used;
} cache_entry;

struct rp_json_schema_cache {
    pthread_mutex_t mu;
    rp_json_schema_limits lim;
    cache_entry *e;
    int cap, n;
    uint64_t clock;
    uint64_t hits, misses;
};

rp_status rp_json_schema_cache_create(int capacity, const rp_json_schema_limits *lim, rp_json_schema_cache **out)
{
    *out = NULL;
    rp_json_schema_cache *c = rp_calloc(1, sizeof(*c));
    if (!c || !(c->e = rp_calloc((size_t)(capacity > 0 ? capacity : 1), sizeof(cache_entry)))) {
        rp_free(c);
        return RP_ERR(RP_ERR_NOMEM, "out of memory for the schema cache");
    }
    c->cap = capacity > 0 ? capacity : 1;
    if (lim)
        c->lim = *lim;
    else
        rp_json_schema_limits_default(&c->lim);
    pthread_mutex_init(&c->mu, NULL);
    *out = c;
    return RP_OK;
}

void rp_json_schema_cache_destroy(rp_json_schema_cache *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->n; i++) {
        free(c->e[i].text);
        rp_json_schema_unref(c->e[i].schema);
    }
    pthread_mutex_destroy(&c->mu);
    rp_free(c->e);
    rp_free(c);
}

static uint64_t fnv(const char *s)
{
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ULL;
    return h;
}

rp_status rp_json_schema_cache_get(rp_json_schema_cache *c, const json_t *schema, rp_json_schema **out,
                                   rp_json_schema_error *err)
{
    *out = NULL;
    char *text = json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!text)
        return RP_ERR(RP_ERR_NOMEM, "out of memory hashing a schema");
    uint64_t h = fnv(text);
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < c->n; i++)
        if (c->e[i].hash == h && strcmp(c->e[i].text, text) == 0) {
            c->e[i].used = ++c->clock;
            c->hits++;
            *out = rp_json_schema_ref(c->e[i].schema);
            pthread_mutex_unlock(&c->mu);
            free(text);
            return RP_OK;
        }
    c->misses++;
    pthread_mutex_unlock(&c->mu);
    // Compiled outside the lock: a slow schema does not hold up the others (two requests may compile the same one).
    rp_json_schema *s;
    rp_status st = rp_json_schema_compile(schema, &c->lim, &s, err);
    if (st) {
        free(text);
        return st;
    }
    s->hash = h;
    pthread_mutex_lock(&c->mu);
    int slot = c->n < c->cap ? c->n++ : -1;
    if (slot < 0) { // evict the least recently used
        slot = 0;
        for (int i = 1; i < c->n; i++)
            if (c->e[i].used < c->e[slot].used)
                slot = i;
        free(c->e[slot].text);
        rp_json_schema_unref(c->e[slot].schema);
    }
    c->e[slot] = (cache_entry){h, text, rp_json_schema_ref(s), ++c->clock};
    pthread_mutex_unlock(&c->mu);
    *out = s;
    return RP_OK;
}

void rp_json_schema_cache_stats(rp_json_schema_cache *c, uint64_t *hits, uint64_t *misses)
{
    pthread_mutex_lock(&c->mu);
    *hits = c->hits;
    *misses = c->misses;
    pthread_mutex_unlock(&c->mu);
}
