/*
 * stream.c - from response bytes to an rp_bench_result.
 *
 * Three layers, each fed incrementally as curl hands over bytes:
 *   - rp_bench_buf, a growable byte string (also used for Markdown and SVG),
 *   - the SSE parser: splits lines (LF, CR or CRLF, even when a CRLF is cut
 *     between two reads), gathers "data:" lines, dispatches on a blank line,
 *   - the stream interpreter: each event is a chat.completion.chunk; content,
 *     reasoning and tool-call deltas are joined, usage and finish reason kept,
 *     and the clock is read once per chunk that carries a token, so the
 *     figures depend on chunk order only, never on how TCP cut the bytes.
 * A problem never aborts anything: it becomes the result's error (the first
 * one wins) and the run goes on.
 */
#include "bench_int.h"

#include <math.h>
#include <stdio.h>
#include <time.h>

/* ---- byte strings ---------------------------------------------------------- */

void rp_bench_buf_init(rp_bench_buf *b)
{
    memset(b, 0, sizeof(*b));
}

void rp_bench_buf_deinit(rp_bench_buf *b)
{
    rp_free(b->p);
    memset(b, 0, sizeof(*b));
}

// Makes room for n more bytes plus the NUL.
static bool buf_reserve(rp_bench_buf *b, size_t n)
{
    if (b->oom)
        return false;
    size_t need;
    if (!rp_add_size(b->len, n, &need) || !rp_add_size(need, 1, &need)) {
        b->oom = true;
        return false;
    }
    if (need <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    char *p = rp_realloc(b->p, cap);
    if (!p) {
        b->oom = true;
        return false;
    }
    b->p = p;
    b->cap = cap;
    return true;
}

void rp_bench_buf_add(rp_bench_buf *b, const void *p, size_t n)
{
    if (!buf_reserve(b, n))
        return;
    if (n)
        memcpy(b->p + b->len, p, n);
    b->len += n;
    b->p[b->len] = 0;
}

void rp_bench_buf_adds(rp_bench_buf *b, const char *s)
{
    rp_bench_buf_add(b, s, strlen(s));
}

void rp_bench_buf_printf(rp_bench_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || !buf_reserve(b, (size_t)n)) {
        b->oom = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

char *rp_bench_buf_take(rp_bench_buf *b)
{
    if (b->oom) {
        rp_bench_buf_deinit(b);
        return NULL;
    }
    if (!b->p && !buf_reserve(b, 0))
        return NULL;
    if (b->len == 0)
        b->p[0] = 0;
    char *p = b->p;
    memset(b, 0, sizeof(*b));
    return p;
}

char *rp_bench_fmt(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return NULL;
    char *s = rp_malloc((size_t)n + 1);
    if (!s)
        return NULL;
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

/* ---- UTF-8 ------------------------------------------------------------------ */

// Length of the valid UTF-8 sequence at p (at most n bytes), 0 when invalid.
static size_t utf8_seq(const unsigned char *p, size_t n)
{
    unsigned c = p[0];
    if (c < 0x80)
        return 1;
    size_t len;
    unsigned min;
    if (c >= 0xC2 && c <= 0xDF)
        len = 2, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF)
        len = 3, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4)
        len = 4, min = 0x10000;
    else
        return 0;
    if (len > n)
        return 0;
    unsigned cp = c & (0x3F >> (len - 1));
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (p[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

bool rp_bench_utf8_valid(const char *p, size_t n)
{
    const unsigned char *u = (const unsigned char *)p;
    for (size_t i = 0; i < n;) {
        size_t k = utf8_seq(u + i, n - i);
        if (!k)
            return false;
        i += k;
    }
    return true;
}

char *rp_bench_excerpt(const char *p, size_t n, size_t max)
{
    rp_bench_buf b = {0};
    const unsigned char *u = (const unsigned char *)p;
    size_t i = 0;
    while (i < n && b.len < max) {
        size_t k = utf8_seq(u + i, n - i);
        if (!k) {
            rp_bench_buf_add(&b, "?", 1);
            i++;
        } else if (k == 1 && (u[i] < 0x20 || u[i] == 0x7F)) {
            // One line: runs of control characters (newlines) become one space.
            if (b.len == 0 || b.p[b.len - 1] != ' ')
                rp_bench_buf_add(&b, " ", 1);
            i++;
        } else {
            if (b.len + k > max)
                break;
            rp_bench_buf_add(&b, p + i, k);
            i += k;
        }
    }
    if (i < n)
        rp_bench_buf_adds(&b, "...");
    return rp_bench_buf_take(&b);
}

json_t *rp_bench_json_bytes(const char *p, size_t n)
{
    if (!p)
        return json_string("");
    if (rp_bench_utf8_valid(p, n))
        return json_stringn(p, n);
    // Replace each invalid byte by U+FFFD so the record keeps the rest.
    rp_bench_buf b = {0};
    const unsigned char *u = (const unsigned char *)p;
    for (size_t i = 0; i < n;) {
        size_t k = utf8_seq(u + i, n - i);
        if (!k) {
            rp_bench_buf_adds(&b, "\xEF\xBF\xBD");
            i++;
        } else {
            rp_bench_buf_add(&b, p + i, k);
            i += k;
        }
    }
    json_t *j = b.oom ? NULL : json_stringn(b.p ? b.p : "", b.len);
    rp_bench_buf_deinit(&b);
    return j;
}

json_t *rp_bench_json_real(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

double rp_bench_clock_monotonic(void *ctx)
{
    (void)ctx;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- results ------------------------------------------------------------------ */

// Stands in for a message that could not be allocated (never freed).
static char oom_message[] = "out of memory while recording this request";

void rp_bench_result_init(rp_bench_result *r)
{
    memset(r, 0, sizeof(*r));
    r->t_first = r->t_last = NAN;
    r->prompt_tokens = r->cached_tokens = r->completion_tokens = -1;
}

void rp_bench_result_deinit(rp_bench_result *r)
{
    rp_free(r->text);
    rp_free(r->reasoning);
    json_decref(r->tool_calls);
    rp_free(r->finish_reason);
    rp_free(r->fingerprint);
    if (r->error != oom_message)
        rp_free(r->error);
    rp_free(r->chunk_t);
    rp_bench_result_init(r);
}

// Appends a token chunk's time; without memory the times stop (token_chunks still counts).
static void keep_chunk_time(rp_bench_result *r, double t)
{
    if (r->n_chunk_t != r->token_chunks - 1)
        return; // a time was lost before: a gap in the list would lie
    if (r->n_chunk_t == r->chunk_t_cap) {
        int cap = r->chunk_t_cap ? 2 * r->chunk_t_cap : 64;
        double *p = rp_realloc(r->chunk_t, (size_t)cap * sizeof(*p));
        if (!p)
            return;
        r->chunk_t = p;
        r->chunk_t_cap = cap;
    }
    r->chunk_t[r->n_chunk_t++] = t;
}

void rp_bench_result_fail(rp_bench_result *r, const char *fmt, ...)
{
    if (r->error)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = n >= 0 ? rp_malloc((size_t)n + 1) : NULL;
    if (!s) {
        r->error = oom_message;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    r->error = s;
}

void rp_bench_metrics_of(const rp_bench_result *r, rp_bench_metrics *m)
{
    m->ttft_s = isfinite(r->t_first) ? r->t_first - r->t_sent : NAN;
    m->e2e_s = isfinite(r->t_last) ? r->t_last - r->t_sent : NAN;
    m->decode_tok_s = NAN;
    double span = r->t_last - r->t_first;
    // A reply in one or two token chunks, or in chunks that came in one burst,
    // was held back by the server (e.g. while it parsed a tool call): its first
    // chunk came late, so the span says nothing about decoding.
    if (r->completion_tokens >= 2 && r->token_chunks >= 3 && isfinite(span) &&
        span >= RP_BENCH_MIN_CHUNK_GAP_S * (r->token_chunks - 1))
        m->decode_tok_s = (double)(r->completion_tokens - 1) / span;
}

/* ---- SSE ---------------------------------------------------------------------- */

void rp_bench_sse_init(rp_bench_sse *s)
{
    memset(s, 0, sizeof(*s));
}

void rp_bench_sse_deinit(rp_bench_sse *s)
{
    rp_bench_buf_deinit(&s->line);
    rp_bench_buf_deinit(&s->data);
    memset(s, 0, sizeof(*s));
}

static rp_status sse_dispatch(rp_bench_sse *s, rp_bench_sse_fn fn, void *ctx)
{
    if (!s->has_data)
        return RP_OK;
    s->has_data = false;
    if (s->data.oom)
        return RP_ERR(RP_ERR_NOMEM, "out of memory reading an event");
    rp_status st = fn(ctx, s->data.p ? s->data.p : "", s->data.len);
    s->data.len = 0;
    if (s->data.p)
        s->data.p[0] = 0;
    return st;
}

// One complete line (without its end) is in s->line.
static rp_status sse_line(rp_bench_sse *s, rp_bench_sse_fn fn, void *ctx)
{
    const char *l = s->line.p ? s->line.p : "";
    size_t n = s->line.len;
    s->line.len = 0;
    if (s->line.oom)
        return RP_ERR(RP_ERR_NOMEM, "out of memory reading an event line");
    if (n == 0)
        return sse_dispatch(s, fn, ctx);
    if (l[0] == ':')
        return RP_OK; // a comment (keep-alive pings)
    const char *colon = memchr(l, ':', n);
    size_t name_len = colon ? (size_t)(colon - l) : n;
    if (name_len != 4 || memcmp(l, "data", 4) != 0)
        return RP_OK; // event:, id:, retry: and unknown fields do not matter here
    const char *v = colon ? colon + 1 : l + n;
    size_t vn = (size_t)(l + n - v);
    if (vn && v[0] == ' ')
        v++, vn--;
    if (s->has_data)
        rp_bench_buf_add(&s->data, "\n", 1);
    rp_bench_buf_add(&s->data, v, vn);
    s->has_data = true;
    return s->data.oom ? RP_ERR(RP_ERR_NOMEM, "out of memory reading an event") : RP_OK;
}

rp_status rp_bench_sse_feed(rp_bench_sse *s, const char *p, size_t n, rp_bench_sse_fn fn, void *ctx)
{
    size_t i = 0;
    while (i < n) {
        if (s->after_cr) {
            s->after_cr = false;
            if (p[i] == '\n') {
                i++;
                continue;
            }
        }
        size_t j = i;
        while (j < n && p[j] != '\n' && p[j] != '\r')
            j++;
        if (j > i) {
            if (s->line.len + (j - i) > RP_BENCH_SSE_MAX_LINE)
                return RP_ERR(RP_ERR_LIMIT, "an event-stream line is longer than %u bytes", RP_BENCH_SSE_MAX_LINE);
            rp_bench_buf_add(&s->line, p + i, j - i);
        }
        if (j == n)
            break;
        s->after_cr = p[j] == '\r';
        rp_status st = sse_line(s, fn, ctx);
        if (st != RP_OK)
            return st;
        i = j + 1;
    }
    return s->line.oom ? RP_ERR(RP_ERR_NOMEM, "out of memory reading an event line") : RP_OK;
}

rp_status rp_bench_sse_end(rp_bench_sse *s, rp_bench_sse_fn fn, void *ctx)
{
    if (s->line.len) {
        rp_status st = sse_line(s, fn, ctx);
        if (st != RP_OK)
            return st;
    }
    return sse_dispatch(s, fn, ctx);
}

/* ---- the stream interpreter ----------------------------------------------------- */

void rp_bench_stream_init(rp_bench_stream *s, rp_bench_result *res, rp_bench_clock_fn clock, void *clock_ctx)
{
    memset(s, 0, sizeof(*s));
    s->res = res;
    s->clock = clock ? clock : rp_bench_clock_monotonic;
    s->clock_ctx = clock_ctx;
}

void rp_bench_stream_deinit(rp_bench_stream *s)
{
    rp_bench_sse_deinit(&s->sse);
    rp_bench_buf_deinit(&s->text);
    rp_bench_buf_deinit(&s->reasoning);
    rp_bench_buf_deinit(&s->head);
}

// Marks the request failed with a message about chunk n and stops reading it.
static void chunk_fail(rp_bench_stream *s, const char *what, const char *data, size_t len)
{
    char *x = rp_bench_excerpt(data, len, 160);
    rp_bench_result_fail(s->res, "malformed chunk %d: %s: %s", s->n_events, what, x ? x : "");
    rp_free(x);
    s->stopped = true;
}

// Appends a JSON string field's value to buf; returns 1 when it added bytes,
// 0 when absent/null/empty, -1 when it is not a string.
static int add_string(rp_bench_buf *buf, const json_t *obj, const char *key)
{
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v))
        return -1;
    size_t n = json_string_length(v);
    rp_bench_buf_add(buf, json_string_value(v), n);
    return n > 0;
}

// Appends `key` of src (a string) to the string field `key` of dst.
static bool join_field(json_t *dst, const json_t *src, const char *key)
{
    const json_t *v = json_object_get(src, key);
    if (!v || json_is_null(v))
        return true;
    if (!json_is_string(v))
        return false;
    const json_t *old = json_object_get(dst, key);
    rp_bench_buf b = {0};
    rp_bench_buf_add(&b, json_string_value(old), json_string_length(old));
    rp_bench_buf_add(&b, json_string_value(v), json_string_length(v));
    bool ok = !b.oom && json_object_set_new(dst, key, json_stringn(b.p ? b.p : "", b.len)) == 0;
    rp_bench_buf_deinit(&b);
    return ok;
}

// One tool-call delta; false when malformed.
static bool tool_delta(rp_bench_stream *s, const json_t *d, size_t pos)
{
    if (!json_is_object(d))
        return false;
    const json_t *jidx = json_object_get(d, "index");
    json_int_t idx = (json_int_t)pos;
    if (jidx && !json_is_null(jidx)) {
        if (!json_is_integer(jidx))
            return false;
        idx = json_integer_value(jidx);
    }
    if (idx < 0 || idx >= 256)
        return false;
    rp_bench_result *r = s->res;
    if (!r->tool_calls && !(r->tool_calls = json_array()))
        return false;
    while (json_array_size(r->tool_calls) <= (size_t)idx)
        if (json_array_append_new(r->tool_calls, json_pack("{s:s, s:s, s:s}", "id", "", "name", "", "arguments", "")))
            return false;
    json_t *call = json_array_get(r->tool_calls, (size_t)idx);
    const json_t *fn = json_object_get(d, "function");
    if (fn && !json_is_null(fn) && !json_is_object(fn))
        return false;
    return join_field(call, d, "id") &&
           (!fn || json_is_null(fn) || (join_field(call, fn, "name") && join_field(call, fn, "arguments")));
}

static rp_status on_event(void *ctx, const char *data, size_t len)
{
    rp_bench_stream *s = ctx;
    rp_bench_result *r = s->res;
    s->n_events++;
    if (s->done || s->stopped)
        return RP_OK; // anything after [DONE] is not part of the reply
    size_t a = 0, b = len;
    while (a < b && (data[a] == ' ' || data[a] == '\t' || data[a] == '\n'))
        a++;
    while (b > a && (data[b - 1] == ' ' || data[b - 1] == '\t' || data[b - 1] == '\n'))
        b--;
    if (b - a == 6 && memcmp(data + a, "[DONE]", 6) == 0) {
        s->done = true;
        return RP_OK;
    }
    json_error_t e;
    json_t *j = json_loadb(data, len, JSON_ALLOW_NUL, &e);
    if (!j) {
        chunk_fail(s, e.text, data, len);
        return RP_OK;
    }
    bool token = false;
    if (!json_is_object(j)) {
        chunk_fail(s, "not a JSON object", data, len);
        goto done;
    }
    const json_t *err = json_object_get(j, "error");
    if (err && !json_is_null(err)) {
        const json_t *msg = json_is_object(err) ? json_object_get(err, "message") : err;
        char *m = json_is_string(msg) ? NULL : json_dumps(err, JSON_COMPACT);
        const char *text = m ? m : json_string_value(msg);
        char *x = rp_bench_excerpt(text, strlen(text), 300);
        rp_bench_result_fail(r, "the server sent an error in the stream: %s", x ? x : "");
        rp_free(x);
        free(m); // jansson's allocation
        s->stopped = true;
        goto done;
    }
    const json_t *fp = json_object_get(j, "system_fingerprint");
    if (json_is_string(fp) && !r->fingerprint)
        r->fingerprint = rp_strdup(json_string_value(fp));
    const json_t *usage = json_object_get(j, "usage");
    if (usage && !json_is_null(usage)) {
        const json_t *pt = json_object_get(usage, "prompt_tokens");
        const json_t *ct = json_object_get(usage, "completion_tokens");
        if (!json_is_object(usage) || !json_is_integer(pt) || !json_is_integer(ct) || json_integer_value(pt) < 0 ||
            json_integer_value(ct) < 0) {
            chunk_fail(s, "usage without integer prompt_tokens and completion_tokens", data, len);
            goto done;
        }
        r->prompt_tokens = json_integer_value(pt);
        r->completion_tokens = json_integer_value(ct);
        const json_t *cached = json_object_get(json_object_get(usage, "prompt_tokens_details"), "cached_tokens");
        r->cached_tokens = json_is_integer(cached) ? json_integer_value(cached) : -1;
        s->got_usage = true;
    }
    const json_t *choices = json_object_get(j, "choices");
    if (!choices || json_is_null(choices)) {
        if (!usage || json_is_null(usage))
            chunk_fail(s, "neither choices nor usage", data, len);
        goto done;
    }
    if (!json_is_array(choices)) {
        chunk_fail(s, "choices is not an array", data, len);
        goto done;
    }
    size_t i;
    const json_t *ch;
    json_array_foreach(choices, i, ch)
    {
        if (!json_is_object(ch)) {
            chunk_fail(s, "a choice is not an object", data, len);
            goto done;
        }
        const json_t *delta = json_object_get(ch, "delta");
        if (delta && !json_is_null(delta)) {
            if (!json_is_object(delta)) {
                chunk_fail(s, "delta is not an object", data, len);
                goto done;
            }
            int c = add_string(&s->text, delta, "content");
            int rc = add_string(&s->reasoning, delta, "reasoning_content");
            int rr = add_string(&s->reasoning, delta, "reasoning");
            if (c < 0 || rc < 0 || rr < 0) {
                chunk_fail(s, "content or reasoning is not a string", data, len);
                goto done;
            }
            token |= c > 0 || rc > 0 || rr > 0;
            const json_t *calls = json_object_get(delta, "tool_calls");
            if (calls && !json_is_null(calls)) {
                if (!json_is_array(calls)) {
                    chunk_fail(s, "tool_calls is not an array", data, len);
                    goto done;
                }
                size_t k;
                const json_t *d;
                json_array_foreach(calls, k, d)
                {
                    if (!tool_delta(s, d, k)) {
                        chunk_fail(s, "a malformed tool-call delta", data, len);
                        goto done;
                    }
                    token = true;
                }
            }
        }
        const json_t *fr = json_object_get(ch, "finish_reason");
        if (json_is_string(fr)) {
            rp_free(r->finish_reason);
            r->finish_reason = rp_strdup(json_string_value(fr));
        }
    }
    if (token) {
        double t = s->clock(s->clock_ctx);
        if (!isfinite(r->t_first))
            r->t_first = t;
        r->t_last = t;
        r->token_chunks++;
        keep_chunk_time(r, t);
    }
done:
    json_decref(j);
    return RP_OK;
}

void rp_bench_stream_feed(rp_bench_stream *s, const char *p, size_t n)
{
    if (s->head.len < RP_BENCH_HEAD_BYTES) {
        size_t k = RP_BENCH_HEAD_BYTES - s->head.len;
        rp_bench_buf_add(&s->head, p, n < k ? n : k);
    }
    s->body_bytes += n;
    if (s->raw || s->stopped)
        return;
    if (s->body_bytes > RP_BENCH_MAX_BODY) {
        rp_bench_result_fail(s->res, "the response is larger than %zu MiB", RP_BENCH_MAX_BODY >> 20);
        s->stopped = true;
        return;
    }
    rp_status st = rp_bench_sse_feed(&s->sse, p, n, on_event, s);
    if (st != RP_OK) {
        rp_bench_result_fail(s->res, "reading the event stream: %s", rp_error_message());
        s->stopped = true;
    }
}

void rp_bench_stream_finish(rp_bench_stream *s)
{
    rp_bench_result *r = s->res;
    if (!s->raw && !s->stopped) {
        rp_status st = rp_bench_sse_end(&s->sse, on_event, s);
        if (st != RP_OK)
            rp_bench_result_fail(r, "reading the event stream: %s", rp_error_message());
    }
    if (s->text.oom || s->reasoning.oom)
        rp_bench_result_fail(r, "out of memory keeping the generated text");
    r->text_len = s->text.len;
    r->reasoning_len = s->reasoning.len;
    rp_free(r->text);
    rp_free(r->reasoning);
    r->text = rp_bench_buf_take(&s->text);
    r->reasoning = rp_bench_buf_take(&s->reasoning);
    if (!r->text || !r->reasoning)
        rp_bench_result_fail(r, "out of memory keeping the generated text");
    if (s->raw)
        return;
    if (s->n_events == 0) {
        char *x = rp_bench_excerpt(s->head.p ? s->head.p : "", s->head.len, 200);
        rp_bench_result_fail(r, "not an SSE stream (no data: events in %zu bytes): %s", s->body_bytes, x ? x : "");
        rp_free(x);
    } else if (!s->done) {
        rp_bench_result_fail(r, "the stream ended before data: [DONE]");
    } else if (!s->got_usage) {
        rp_bench_result_fail(r, "no usage in the stream (the server ignored stream_options.include_usage)");
    }
}
