/*
 * fields.c - what every API file needs to read a request and write a reply:
 * the growable buffer, SSE framing, the two error shapes, JSON body parsing
 * with its checks, typed field readers whose errors name the field, and the
 * request pieces more than one API reads the same way (content parts as text,
 * tool modes, JSON-mode formats, function tools), and the UTF-8 repair and
 * escaping that keep client bytes out of error JSON and log lines unharmed.
 *
 * Body checks, in order: valid UTF-8 (RFC 3629: no overlongs, surrogates or
 * code points past U+10FFFF), no raw NUL byte (jansson would stop at it and
 * accept what came before), nesting at most RP_JSON_MAX_DEPTH (a byte scan
 * outside strings, so a 10k-deep body never reaches the parser), then
 * jansson. Jansson itself rejects NaN/Infinity literals, lone surrogate
 * escapes, \u0000 in strings, integers past int64 and reals that overflow a
 * double, all as 400 with its line/column. Duplicate keys are accepted, the
 * last one wins (as Python's json, which OpenAI's and Anthropic's servers use).
 */
#include "server_int.h"

#include <math.h>
#include <stdio.h>
#include <time.h>

/* ---- rp_buf ------------------------------------------------------------------ */

void rp_buf_init(rp_buf *b)
{
    memset(b, 0, sizeof(*b));
}

void rp_buf_deinit(rp_buf *b)
{
    rp_free(b->data);
    memset(b, 0, sizeof(*b));
}

void rp_buf_reset(rp_buf *b)
{
    b->len = 0;
    if (b->data)
        b->data[0] = 0;
}

static bool buf_reserve(rp_buf *b, size_t extra)
{
    if (b->failed)
        return false;
    size_t need;
    if (!rp_add_size(b->len, extra, &need) || !rp_add_size(need, 1, &need)) {
        b->failed = true;
        return false;
    }
    if (need <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    char *p = rp_realloc(b->data, cap);
    if (!p) {
        b->failed = true;
        return false;
    }
    b->data = p;
    b->cap = cap;
    return true;
}

void rp_buf_append(rp_buf *b, const void *data, size_t n)
{
    if (!buf_reserve(b, n))
        return;
    if (n)
        memcpy(b->data + b->len, data, n);
    b->len += n;
    b->data[b->len] = 0;
}

void rp_buf_puts(rp_buf *b, const char *s)
{
    rp_buf_append(b, s, strlen(s));
}

void rp_buf_printf(rp_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char tmp[256];
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap2);
    va_end(ap2);
    if (n < 0) {
        b->failed = true;
    } else if ((size_t)n < sizeof(tmp)) {
        rp_buf_append(b, tmp, (size_t)n);
    } else if (buf_reserve(b, (size_t)n)) {
        vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
        b->len += (size_t)n;
    }
    va_end(ap);
}

static int buf_dump_cb(const char *buffer, size_t size, void *data)
{
    rp_buf *b = data;
    rp_buf_append(b, buffer, size);
    return b->failed ? -1 : 0;
}

void rp_buf_json(rp_buf *b, const json_t *v)
{
    if (json_dump_callback(v, buf_dump_cb, b, JSON_COMPACT | JSON_ENCODE_ANY | JSON_PRESERVE_ORDER) != 0)
        b->failed = true;
}

void rp_sse_json(rp_buf *b, const char *event, const json_t *data)
{
    if (event)
        rp_buf_printf(b, "event: %s\n", event);
    rp_buf_puts(b, "data: ");
    rp_buf_json(b, data);
    rp_buf_puts(b, "\n\n");
}

void rp_sse_json_new(rp_buf *b, const char *event, json_t *data)
{
    if (!data) {
        b->failed = true;
        return;
    }
    rp_sse_json(b, event, data);
    json_decref(data);
}

void rp_sse_text(rp_buf *b, const char *text)
{
    rp_buf_puts(b, "data: ");
    rp_buf_puts(b, text);
    rp_buf_puts(b, "\n\n");
}

void rp_sse_error(rp_buf *b, const char *event, const rp_api_error *e,
                  void (*shape)(const rp_api_error *e, rp_buf *out))
{
    if (event)
        rp_buf_printf(b, "event: %s\n", event);
    rp_buf_puts(b, "data: ");
    shape(e, b);
    rp_buf_puts(b, "\n\n");
}

void rp_api_id(char *out, size_t cap, const char *prefix, uint64_t salt)
{
    static atomic_ullong counter;
    static const char alnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    uint64_t x = (uint64_t)(rp_time_s() * 1e9) ^ (salt * 0x9E3779B97F4A7C15ull) ^
                 (atomic_fetch_add(&counter, 1) + 1) * 0xBF58476D1CE4E5B9ull ^ (uint64_t)time(NULL) << 20;
    size_t p = (size_t)snprintf(out, cap, "%s", prefix);
    for (int i = 0; i < 24 && p + 1 < cap; i++) {
        x += 0x9E3779B97F4A7C15ull; // splitmix64
        uint64_t z = x;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        out[p++] = alnum[z % (sizeof(alnum) - 1)];
    }
    if (p < cap)
        out[p] = 0;
}

/* ---- errors ------------------------------------------------------------------ */

bool rp_api_fail(rp_api_error *e, int status, const char *param, const char *code, const char *fmt, ...)
{
    memset(e, 0, sizeof(*e));
    e->status = status;
    e->code = code;
    if (param)
        snprintf(e->param, sizeof(e->param), "%s", param);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof(e->message), fmt, ap);
    va_end(ap);
    // Messages and params quote client bytes (field names, values, paths): JSON needs UTF-8.
    rp_utf8_repair(e->message, sizeof(e->message));
    rp_utf8_repair(e->param, sizeof(e->param));
    return false;
}

bool rp_api_oom(rp_api_error *e)
{
    return rp_api_fail(e, 500, NULL, NULL, "out of memory");
}

static const char *openai_type(int status)
{
    if (status == 401)
        return "authentication_error";
    if (status == 503)
        return "server_busy";
    if (status >= 500)
        return "server_error";
    return "invalid_request_error";
}

// A JSON string of an error's text, repaired first should it not be UTF-8 (an
// rp_api_error filled without rp_api_fail), so that a message never disappears.
static json_t *error_text(const char *s)
{
    json_t *v = json_string(s);
    if (v)
        return v;
    char tmp[sizeof(((rp_api_error *)0)->message)];
    snprintf(tmp, sizeof(tmp), "%s", s);
    rp_utf8_repair(tmp, sizeof(tmp));
    return json_string(tmp);
}

void rp_openai_error_json(const rp_api_error *e, rp_buf *out)
{
    json_t *err = json_object();
    json_object_set_new(err, "message", error_text(e->message));
    json_object_set_new(err, "type", json_string(e->type ? e->type : openai_type(e->status)));
    json_object_set_new(err, "param", e->param[0] ? error_text(e->param) : json_null());
    json_object_set_new(err, "code", e->code ? json_string(e->code) : json_null());
    json_t *root = json_object_size(err) == 4 ? json_pack("{s:o}", "error", err) : (json_decref(err), NULL);
    if (root)
        rp_buf_json(out, root);
    else
        out->failed = true;
    json_decref(root);
}

static const char *anthropic_type(int status)
{
    switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503:
    case 529: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
    }
}

void rp_anthropic_error_json(const rp_api_error *e, rp_buf *out)
{
    json_t *root = json_pack("{s:s,s:{s:s,s:o}}", "type", "error", "error", "type",
                             e->type ? e->type : anthropic_type(e->status), "message", error_text(e->message));
    if (root)
        rp_buf_json(out, root);
    else
        out->failed = true;
    json_decref(root);
}

/* ---- JSON bodies ------------------------------------------------------------- */

// Length of the valid UTF-8 sequence (RFC 3629: no overlongs, surrogates or code points
// past U+10FFFF) at s (n > 0 bytes left), 0 when it is not one; *cp gets its code point.
static size_t utf8_seq(const unsigned char *s, size_t n, unsigned *cp)
{
    unsigned c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t k;
    unsigned min;
    if (c >= 0xC2 && c <= 0xDF) {
        k = 1;
        min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        k = 2;
        min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        k = 3;
        min = 0x10000;
    } else {
        return 0;
    }
    if (n <= k)
        return 0;
    unsigned v = c & (0x3F >> k);
    for (size_t j = 1; j <= k; j++) {
        if ((s[j] & 0xC0) != 0x80)
            return 0;
        v = v << 6 | (s[j] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return 0;
    *cp = v;
    return k + 1;
}

// Length of the valid UTF-8 prefix of s.
static size_t utf8_valid_prefix(const unsigned char *s, size_t n)
{
    size_t i = 0;
    unsigned cp;
    while (i < n) {
        size_t k = utf8_seq(s + i, n - i, &cp);
        if (!k)
            return i;
        i += k;
    }
    return n;
}

// True when s[0..n) is a sequence a longer text could complete (a lead byte and
// continuation bytes, fewer than the lead asks for).
static bool utf8_cut(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t want = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (!want || n >= want)
        return false;
    for (size_t j = 1; j < n; j++)
        if ((s[j] & 0xC0) != 0x80)
            return false;
    return true;
}

void rp_utf8_repair(char *s, size_t cap)
{
    size_t n = strlen(s);
    const unsigned char *u = (const unsigned char *)s;
    if (utf8_valid_prefix(u, n) == n)
        return;
    char *tmp = rp_malloc(n + 1);
    if (!tmp) { // no memory: cut at the first bad byte (still valid UTF-8)
        s[utf8_valid_prefix(u, n)] = 0;
        return;
    }
    memcpy(tmp, s, n + 1);
    const unsigned char *t = (const unsigned char *)tmp;
    size_t i = 0, o = 0;
    unsigned cp;
    while (i < n) {
        size_t k = utf8_seq(t + i, n - i, &cp);
        if (!k && utf8_cut(t + i, n - i))
            break; // cut by the end: dropped
        const char *piece = k ? tmp + i : "\xEF\xBF\xBD";
        size_t len = k ? k : 3;
        if (o + len + 1 > cap)
            break;
        memcpy(s + o, piece, len);
        o += len;
        i += k ? k : 1;
    }
    s[o] = 0;
    rp_free(tmp);
}

void rp_log_escape(rp_buf *out, const char *s, size_t n, bool spaces)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned cp = 0;
        size_t k = utf8_seq(u + i, n - i, &cp);
        if (!k) {
            rp_buf_printf(out, "\\x%02X", u[i]);
            i++;
            continue;
        }
        if (cp == '\\')
            rp_buf_puts(out, "\\\\");
        else if (cp == '\n')
            rp_buf_puts(out, "\\n");
        else if (cp == '\r')
            rp_buf_puts(out, "\\r");
        else if (cp == '\t')
            rp_buf_puts(out, "\\t");
        else if (cp < 0x20 || cp == 0x7F || (spaces && cp == ' '))
            rp_buf_printf(out, "\\x%02X", cp);
        else if ((cp >= 0x80 && cp <= 0x9F) || (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069) ||
                 cp == 0x2028 || cp == 0x2029)
            rp_buf_printf(out, "\\u{%04X}", cp);
        else
            rp_buf_append(out, s + i, k);
        i += k;
    }
}

// Deepest [ / { nesting outside strings (stops counting past limit).
static int json_depth(const char *s, size_t n, int limit)
{
    int depth = 0, max = 0;
    bool in_str = false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (in_str) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_str = false;
        } else if (c == '"') {
            in_str = true;
        } else if (c == '[' || c == '{') {
            if (++depth > max && (max = depth) > limit)
                return max;
        } else if (c == ']' || c == '}') {
            depth--;
        }
    }
    return max;
}

bool rp_json_parse_bytes(const char *data, size_t len, json_t **out, rp_api_error *e)
{
    *out = NULL;
    if (len == 0)
        return rp_api_fail(e, 400, NULL, NULL, "the request body is empty; expected a JSON object");
    size_t ok = utf8_valid_prefix((const unsigned char *)data, len);
    if (ok != len)
        return rp_api_fail(e, 400, NULL, NULL, "the request body is not valid UTF-8 (bad byte at offset %zu)", ok);
    // JSON has no raw NUL anywhere (inside a string it would be \u0000, which jansson refuses too);
    // jansson would stop reading at one and take what came before.
    const char *nul = memchr(data, 0, len);
    if (nul)
        return rp_api_fail(e, 400, NULL, NULL, "the request body contains a NUL byte (at offset %zu); JSON has none",
                           (size_t)(nul - data));
    if (json_depth(data, len, RP_JSON_MAX_DEPTH) > RP_JSON_MAX_DEPTH)
        return rp_api_fail(e, 400, NULL, NULL, "the request body is nested more than %d levels deep",
                           RP_JSON_MAX_DEPTH);
    json_error_t jerr;
    json_t *v = json_loadb(data, len, JSON_DECODE_ANY, &jerr);
    if (!v)
        return rp_api_fail(e, 400, NULL, NULL, "the request body is not valid JSON: %s (line %d, column %d)",
                           jerr.text, jerr.line, jerr.column);
    if (!json_is_object(v)) {
        json_decref(v);
        return rp_api_fail(e, 400, NULL, NULL, "the request body must be a JSON object");
    }
    *out = v;
    return true;
}

json_t *rp_json_load_args(const char *text, size_t len)
{
    json_error_t err;
    json_t *v = json_loadb(text, len, JSON_DECODE_ANY, &err);
    if (!v && json_error_code(&err) == json_error_numeric_overflow)
        v = json_loadb(text, len, JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL, NULL);
    return v;
}

/* ---- field readers ----------------------------------------------------------- */

static const char *type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

static bool wrong_type(rp_api_error *e, const char *key, const char *want, const json_t *v)
{
    return rp_api_fail(e, 400, key, "invalid_type", "invalid type for '%s': expected %s, got %s", key, want,
                       type_name(v));
}

bool rp_field_number(const json_t *obj, const char *key, double lo, double hi, double *out, rp_api_error *e)
{
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return true;
    if (!json_is_number(v))
        return wrong_type(e, key, "a number", v);
    double x = json_number_value(v);
    if (isnan(x) || x < lo || x > hi)
        return rp_api_fail(e, 400, key, "invalid_value", "invalid value for '%s': %g is outside [%g, %g]", key, x,
                           lo, hi);
    *out = x;
    return true;
}

bool rp_field_float(const json_t *obj, const char *key, double lo, double hi, float *out, rp_api_error *e)
{
    double x = *out;
    if (!rp_field_number(obj, key, lo, hi, &x, e))
        return false;
    *out = (float)x;
    return true;
}

bool rp_field_int(const json_t *obj, const char *key, long long lo, long long hi, long long *out, rp_api_error *e)
{
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return true;
    long long x;
    if (json_is_integer(v)) {
        x = json_integer_value(v);
    } else if (json_is_real(v)) {
        // 5.0 is accepted as 5 (Python clients send floats for ints at times); 5.5 is not.
        double d = json_real_value(v);
        if (!(d == floor(d)) || d < -9.2e18 || d > 9.2e18)
            return wrong_type(e, key, "an integer", v);
        x = (long long)d;
    } else {
        return wrong_type(e, key, "an integer", v);
    }
    if (x < lo || x > hi)
        return rp_api_fail(e, 400, key, "invalid_value", "invalid value for '%s': %lld is outside [%lld, %lld]", key,
                           x, lo, hi);
    *out = x;
    return true;
}

bool rp_field_bool(const json_t *obj, const char *key, bool *out, rp_api_error *e)
{
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return true;
    if (!json_is_boolean(v))
        return wrong_type(e, key, "a boolean", v);
    *out = json_is_true(v);
    return true;
}

bool rp_field_string(const json_t *obj, const char *key, const char **out, size_t *len, rp_api_error *e)
{
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return true;
    if (!json_is_string(v))
        return wrong_type(e, key, "a string", v);
    *out = json_string_value(v);
    if (len)
        *len = json_string_length(v);
    return true;
}

static bool add_stop(rp_api_req *q, const json_t *s, const char *key, rp_api_error *e)
{
    size_t n = json_string_length(s);
    if (n == 0)
        return true;
    if (n > RP_MAX_STOP_LEN)
        return rp_api_fail(e, 400, key, "invalid_value", "a stop string is longer than %d bytes", RP_MAX_STOP_LEN);
    if (q->n_stop >= RP_MAX_STOP)
        return rp_api_fail(e, 400, key, "invalid_value", "at most %d stop strings are allowed", RP_MAX_STOP);
    char *c = rp_strndup(json_string_value(s), n);
    if (!c)
        return rp_api_oom(e);
    if (memchr(c, 0, n)) {
        rp_free(c);
        return rp_api_fail(e, 400, key, "invalid_value", "a stop string contains a NUL character");
    }
    q->stop[q->n_stop++] = c;
    return true;
}

bool rp_field_stop(const json_t *obj, const char *key, rp_api_req *q, rp_api_error *e)
{
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return true;
    if (json_is_string(v))
        return add_stop(q, v, key, e);
    if (!json_is_array(v))
        return wrong_type(e, key, "a string or an array of strings", v);
    size_t i;
    const json_t *s;
    json_array_foreach(v, i, s) {
        if (!json_is_string(s)) {
            char p[64];
            snprintf(p, sizeof(p), "%s[%zu]", key, i);
            return wrong_type(e, p, "a string", s);
        }
        if (!add_stop(q, s, key, e))
            return false;
    }
    return true;
}

bool rp_field_model(const json_t *obj, rp_api_req *q, rp_api_error *e)
{
    const char *model = NULL;
    if (!rp_field_string(obj, "model", &model, NULL, e))
        return false;
    if (model && !(q->model = rp_strdup(model)))
        return rp_api_oom(e);
    return true;
}

/* ---- request pieces more than one API shares --------------------------------- */

bool rp_field_parts_text(const json_t *c, const char *where, const rp_text_part *kinds, bool bare_strings, rp_buf *out,
                         rp_api_error *e)
{
    if (json_is_string(c)) {
        rp_buf_append(out, json_string_value(c), json_string_length(c));
        return true;
    }
    if (!json_is_array(c))
        return rp_api_fail(e, 400, where, "invalid_type",
                           "invalid type for '%s': expected a string or an array of content parts", where);
    size_t i;
    const json_t *part;
    json_array_foreach(c, i, part) {
        char p[160];
        snprintf(p, sizeof(p), "%s[%zu]", where, i);
        const json_t *t = part;
        if (!(bare_strings && json_is_string(part))) {
            const char *type = json_string_value(json_object_get(part, "type"));
            if (!json_is_object(part) || !type)
                return rp_api_fail(e, 400, p, "invalid_type",
                                   "invalid content part '%s': expected an object with a type", p);
            const rp_text_part *k = kinds;
            while (k->type && strcmp(k->type, type) != 0)
                k++;
            if (!k->type)
                return rp_api_fail(e, 400, p, "unsupported_content",
                                   "content part '%s' has type '%s'; this model takes text only", p, type);
            t = json_object_get(part, k->key);
            if (!json_is_string(t))
                return rp_api_fail(e, 400, p, "invalid_type", "content part '%s' needs a string '%s'", p, k->key);
        }
        if (i)
            rp_buf_puts(out, "\n");
        rp_buf_append(out, json_string_value(t), json_string_length(t));
    }
    return true;
}

bool rp_field_tool_mode(const char *mode, rp_api_req *q, rp_api_error *e)
{
    if (strcmp(mode, "auto") == 0)
        q->tool_choice = RP_TOOL_CHOICE_AUTO;
    else if (strcmp(mode, "none") == 0)
        q->tool_choice = RP_TOOL_CHOICE_NONE;
    else if (strcmp(mode, "required") == 0)
        q->tool_choice = RP_TOOL_CHOICE_REQUIRED;
    else
        return rp_api_fail(e, 400, "tool_choice", "invalid_value",
                           "'tool_choice' is '%s'; expected none, auto, required or a function", mode);
    return true;
}

bool rp_field_json_schema(const json_t *schema, const char *param, rp_api_req *q, rp_api_error *e)
{
    if (!json_is_object(schema) && !json_is_boolean(schema))
        return rp_api_fail(e, 400, param, schema ? "invalid_type" : "missing_required_parameter",
                           "'%s' must be a JSON Schema (an object)", param);
    json_decref(q->schema);
    if (!(q->schema = json_deep_copy(schema)))
        return rp_api_oom(e);
    snprintf(q->schema_param, sizeof(q->schema_param), "%s", param);
    q->json_mode = true;
    return true;
}

bool rp_field_json_format(const json_t *f, const char *path, bool nested, rp_api_req *q, rp_api_error *e)
{
    if (!f || json_is_null(f))
        return true;
    const char *type = json_string_value(json_object_get(f, "type"));
    if (!json_is_object(f) || !type)
        return rp_api_fail(e, 400, path, "invalid_type", "'%s' must be an object with a 'type'", path);
    if (strcmp(type, "json_object") == 0) {
        q->json_mode = true;
    } else if (strcmp(type, "json_schema") == 0) {
        char p[64];
        const json_t *js = f;
        if (nested) {
            snprintf(p, sizeof(p), "%s.json_schema", path);
            js = json_object_get(f, "json_schema");
            if (!json_is_object(js))
                return rp_api_fail(e, 400, p, js ? "invalid_type" : "missing_required_parameter",
                                   "'%s' must be an object with 'name' and 'schema'", p);
        }
        const json_t *strict = json_object_get(js, "strict");
        snprintf(p, sizeof(p), "%s%s.strict", path, nested ? ".json_schema" : "");
        if (strict && !json_is_boolean(strict) && !json_is_null(strict))
            return rp_api_fail(e, 400, p, "invalid_type", "'%s' must be a boolean", p);
        snprintf(p, sizeof(p), "%s%s.schema", path, nested ? ".json_schema" : "");
        // Enforced whether strict or not: what the grammar cannot enforce is refused either way.
        return rp_field_json_schema(json_object_get(js, "schema"), p, q, e);
    } else if (strcmp(type, "text") != 0) {
        char p[64];
        snprintf(p, sizeof(p), "%s.type", path);
        return rp_api_fail(e, 400, p, "invalid_value", "'%s' is '%s'; expected text, json_object or json_schema", p,
                           type);
    }
    return true;
}

bool rp_api_req_add_tool(rp_api_req *q, const json_t *name, const json_t *desc, const json_t *params, rp_api_error *e)
{
    if (!q->tools && !(q->tools = json_array()))
        return rp_api_oom(e);
    json_t *fn = json_pack("{s:O}", "name", name);
    if (fn && json_is_string(desc))
        json_object_set(fn, "description", (json_t *)desc);
    if (fn && json_is_object(params))
        json_object_set_new(fn, "parameters", json_deep_copy(params));
    json_t *tool = fn ? json_pack("{s:s,s:o}", "type", "function", "function", fn) : NULL;
    return rp_api_append_new(q->tools, tool, e);
}

bool rp_tools_has(const json_t *tools, const char *name)
{
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t) {
        const char *n = json_string_value(json_object_get(json_object_get(t, "function"), "name"));
        if (n && strcmp(n, name) == 0)
            return true;
    }
    return false;
}

bool rp_api_append_new(json_t *arr, json_t *v, rp_api_error *e)
{
    if (!v || json_array_append_new(arr, v))
        return rp_api_oom(e);
    return true;
}

/* ---- replies ----------------------------------------------------------------- */

bool rp_reply_json_new(rp_reply *out, json_t *body, rp_api_error *e)
{
    if (!body)
        return rp_api_oom(e);
    rp_reply_json(out, 200, body);
    json_decref(body);
    return true;
}

/* ---- the neutral request ----------------------------------------------------- */

// A seed for a request that names none: requests differ from each other (a
// sampled reply is not the same on every call) yet one process never repeats one.
static uint64_t fresh_seed(void)
{
    static _Atomic uint64_t counter;
    uint64_t z = (uint64_t)(rp_time_s() * 1e9) + 0x9E3779B97F4A7C15ull * ++counter;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull; // splitmix64's finalizer
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void rp_api_req_init(rp_api_req *q)
{
    memset(q, 0, sizeof(*q));
    rp_sample_params_default(&q->sample);
    q->sample.seed = fresh_seed(); // a request's "seed" field replaces it
    q->max_tokens = -1;
    q->logprobs = -1;
    q->tool_choice = RP_TOOL_CHOICE_AUTO;
    q->parallel_tool_calls = true;
}

void rp_api_req_deinit(rp_api_req *q)
{
    json_decref(q->messages);
    json_decref(q->tools);
    json_decref(q->template_kwargs);
    json_decref(q->schema);
    rp_free(q->prompt);
    rp_free(q->prompt_ids);
    for (int i = 0; i < q->n_stop; i++)
        rp_free(q->stop[i]);
    rp_free(q->tool_name);
    rp_free(q->model);
    memset(q, 0, sizeof(*q));
}
