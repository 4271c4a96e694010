/*
 * test_metrics.c - GET /metrics read as a Prometheus scraper would: the real
 * server in-process (wire_server.h) over raw sockets, its exposition parsed by
 * a small strict parser of the text format 0.0.4 written here (HELP and TYPE
 * once per family and before its samples, a family's samples together, metric
 * and label name syntax, label values' escapes, no duplicate series, numbers),
 * then checked:
 *   - every series but the connection table's carries model_name, equal to the
 *     served name (one with a quote and a backslash here: the escapes);
 *   - every histogram: buckets in increasing le ending with +Inf, counts
 *     non-decreasing, +Inf == _count, _sum >= 0;
 *   - after a few requests, the per-request histograms (time to first token,
 *     inter-token latency, end-to-end, queue time, prompt and generation
 *     tokens) count exactly those requests, the token histograms' sums equal
 *     what the replies' usage said, and the inter-token count is the tokens'
 *     gaps. Times are only checked to be >= 0.
 */
#include "test_util.h"

#include "wire_server.h"

#include <ctype.h>
#include <math.h>
#include <unistd.h>

#define MODEL_NAME "tiny \"q\" \\ model" // served name with characters the label must escape
#define MAX_SAMPLES 4096
#define MAX_FAMILIES 256
#define MAX_LABELS 6

typedef struct label {
    char name[64];
    char value[256]; // unescaped
} label;

typedef struct sample {
    char name[128];
    label labels[MAX_LABELS];
    int n_labels;
    double value;
    int family; // index into families
} sample;

typedef struct fam {
    char name[128];
    char type[16];
    bool help, typed, has_samples;
} fam;

typedef struct scrape {
    sample s[MAX_SAMPLES];
    int n;
    fam f[MAX_FAMILIES];
    int n_f;
} scrape;

static void tune(rp_server_params *sp)
{
    sp->served_model_name = MODEL_NAME;
}

static int setup(void **state)
{
    (void)state;
    return wire_server_start_tuned(NULL, 0, tune);
}

static bool is_name(const char *p, size_t n, bool colon)
{
    if (n == 0 || !(isalpha((unsigned char)p[0]) || p[0] == '_' || (colon && p[0] == ':')))
        return false;
    for (size_t i = 1; i < n; i++)
        if (!(isalnum((unsigned char)p[i]) || p[i] == '_' || (colon && p[i] == ':')))
            return false;
    return true;
}

static int find_family(scrape *sc, const char *name)
{
    for (int i = 0; i < sc->n_f; i++)
        if (strcmp(sc->f[i].name, name) == 0)
            return i;
    return -1;
}

// A value: a float, +Inf, -Inf or NaN, the whole of [p, p+n).
static double parse_value(const char *p, size_t n, const char *line)
{
    char buf[64];
    if (n == 0 || n >= sizeof(buf))
        fail_msg("bad value in %s", line);
    memcpy(buf, p, n);
    buf[n] = 0;
    if (strcmp(buf, "+Inf") == 0)
        return INFINITY;
    if (strcmp(buf, "-Inf") == 0)
        return -INFINITY;
    if (strcmp(buf, "NaN") == 0)
        return NAN;
    char *end;
    double v = strtod(buf, &end);
    if (*end || !isfinite(v))
        fail_msg("bad value '%s' in %s", buf, line);
    return v;
}

// {name="value",...}: p at '{'; returns the position after '}'.
static const char *parse_labels(const char *p, sample *x, const char *line)
{
    p++;
    while (*p != '}') {
        const char *n0 = p;
        while (*p && *p != '=')
            p++;
        if (*p != '=' || !is_name(n0, (size_t)(p - n0), false) || (size_t)(p - n0) >= sizeof(x->labels[0].name) ||
            x->n_labels == MAX_LABELS)
            fail_msg("bad label name in %s", line);
        label *l = &x->labels[x->n_labels++];
        memcpy(l->name, n0, (size_t)(p - n0));
        l->name[p - n0] = 0;
        for (int i = 0; i < x->n_labels - 1; i++)
            if (strcmp(x->labels[i].name, l->name) == 0)
                fail_msg("label %s twice in %s", l->name, line);
        if (*++p != '"')
            fail_msg("label value not quoted in %s", line);
        p++;
        size_t o = 0;
        while (*p != '"') {
            if (!*p || o + 1 >= sizeof(l->value))
                fail_msg("unterminated label value in %s", line);
            if (*p == '\\') {
                p++;
                if (*p == 'n')
                    l->value[o++] = '\n';
                else if (*p == '\\' || *p == '"')
                    l->value[o++] = *p;
                else
                    fail_msg("bad escape in %s", line);
            } else {
                l->value[o++] = *p;
            }
            p++;
        }
        l->value[o] = 0;
        p++;
        if (*p == ',')
            p++;
        else if (*p != '}')
            fail_msg("expected , or } in %s", line);
    }
    return p + 1;
}

// The family a sample name belongs to: itself, or for a histogram's parts the name without
// _bucket / _sum / _count.
static int sample_family(scrape *sc, const char *name)
{
    int f = find_family(sc, name);
    if (f >= 0)
        return f;
    static const char *const parts[] = {"_bucket", "_sum", "_count"};
    for (int k = 0; k < 3; k++) {
        size_t n = strlen(name), pn = strlen(parts[k]);
        if (n > pn && strcmp(name + n - pn, parts[k]) == 0) {
            char base[128];
            snprintf(base, sizeof(base), "%.*s", (int)(n - pn), name);
            f = find_family(sc, base);
            if (f >= 0 && strcmp(sc->f[f].type, "histogram") == 0)
                return f;
        }
    }
    return -1;
}

static bool same_series(const sample *a, const sample *b)
{
    if (strcmp(a->name, b->name) != 0 || a->n_labels != b->n_labels)
        return false;
    for (int i = 0; i < a->n_labels; i++) {
        bool found = false;
        for (int j = 0; j < b->n_labels && !found; j++)
            found = strcmp(a->labels[i].name, b->labels[j].name) == 0 &&
                    strcmp(a->labels[i].value, b->labels[j].value) == 0;
        if (!found)
            return false;
    }
    return true;
}

static void parse(const char *text, scrape *sc)
{
    memset(sc, 0, sizeof(*sc));
    int cur = -1; // the family whose samples are being read
    const char *p = text;
    while (*p) {
        const char *eol = strchr(p, '\n');
        if (!eol)
            fail_msg("the last line has no newline: %s", p);
        char line[1024];
        snprintf(line, sizeof(line), "%.*s", (int)(eol - p), p);
        p = eol + 1;
        if (!line[0])
            fail_msg("an empty line in /metrics");
        if (line[0] == '#') {
            bool help = strncmp(line, "# HELP ", 7) == 0, type = strncmp(line, "# TYPE ", 7) == 0;
            if (!help && !type)
                fail_msg("a comment that is neither HELP nor TYPE: %s", line);
            const char *n0 = line + 7, *n1 = strchr(n0, ' ');
            if (!n1 || !is_name(n0, (size_t)(n1 - n0), true) || !n1[1])
                fail_msg("bad %s line: %s", help ? "HELP" : "TYPE", line);
            char name[128];
            snprintf(name, sizeof(name), "%.*s", (int)(n1 - n0), n0);
            int f = find_family(sc, name);
            if (f < 0) {
                assert_true(sc->n_f < MAX_FAMILIES);
                f = sc->n_f++;
                snprintf(sc->f[f].name, sizeof(sc->f[f].name), "%s", name);
            }
            fam *fm = &sc->f[f];
            if (fm->has_samples)
                fail_msg("%s after the samples of %s", help ? "HELP" : "TYPE", name);
            if (help) {
                if (fm->help)
                    fail_msg("two HELP lines for %s", name);
                fm->help = true;
            } else {
                if (fm->typed)
                    fail_msg("two TYPE lines for %s", name);
                const char *t = n1 + 1;
                if (strcmp(t, "counter") && strcmp(t, "gauge") && strcmp(t, "histogram") && strcmp(t, "summary") &&
                    strcmp(t, "untyped"))
                    fail_msg("unknown type in %s", line);
                snprintf(fm->type, sizeof(fm->type), "%s", t);
                fm->typed = true;
            }
            cur = -1;
            continue;
        }
        assert_true(sc->n < MAX_SAMPLES);
        sample *x = &sc->s[sc->n];
        memset(x, 0, sizeof(*x));
        const char *q = line;
        while (*q && *q != '{' && *q != ' ')
            q++;
        if (!is_name(line, (size_t)(q - line), true) || (size_t)(q - line) >= sizeof(x->name))
            fail_msg("bad metric name in %s", line);
        memcpy(x->name, line, (size_t)(q - line));
        if (*q == '{')
            q = parse_labels(q, x, line);
        if (*q != ' ')
            fail_msg("no space before the value in %s", line);
        q++;
        if (strchr(q, ' '))
            fail_msg("a timestamp or trailing text in %s", line);
        x->value = parse_value(q, strlen(q), line);
        int f = sample_family(sc, x->name);
        if (f < 0 || !sc->f[f].help || !sc->f[f].typed)
            fail_msg("a sample before its family's HELP and TYPE: %s", line);
        if (sc->f[f].has_samples && f != cur)
            fail_msg("the samples of %s are not together: %s", sc->f[f].name, line);
        sc->f[f].has_samples = true;
        cur = f;
        x->family = f;
        for (int i = 0; i < sc->n; i++)
            if (same_series(&sc->s[i], x))
                fail_msg("a series twice: %s", line);
        sc->n++;
    }
}

static const char *label_of(const sample *x, const char *name)
{
    for (int i = 0; i < x->n_labels; i++)
        if (strcmp(x->labels[i].name, name) == 0)
            return x->labels[i].value;
    return NULL;
}

static void get_scrape(scrape *sc)
{
    wire_resp r;
    wire_request("GET", "/metrics", NULL, NULL, &r);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.head, "text/plain; version=0.0.4"));
    parse(r.body, sc);
    free(r.body);
}

// The value of the sample name{model_name=...[, k=v]} (k may be NULL); fails when absent.
static double value_of(const scrape *sc, const char *name, const char *k, const char *v)
{
    for (int i = 0; i < sc->n; i++) {
        const sample *x = &sc->s[i];
        if (strcmp(x->name, name) == 0 && (!k || (label_of(x, k) && strcmp(label_of(x, k), v) == 0)))
            return x->value;
    }
    fail_msg("no sample %s%s%s", name, k ? " with " : "", k ? k : "");
    return 0;
}

// Every histogram's buckets: le increasing and ending with +Inf, cumulative counts
// non-decreasing, +Inf == _count, _sum >= 0 (one label set per histogram here).
static void check_histograms(const scrape *sc)
{
    int n_hist = 0;
    for (int f = 0; f < sc->n_f; f++) {
        if (strcmp(sc->f[f].type, "histogram") != 0)
            continue;
        n_hist++;
        char bucket[160], sum[160], count[160];
        snprintf(bucket, sizeof(bucket), "%s_bucket", sc->f[f].name);
        snprintf(sum, sizeof(sum), "%s_sum", sc->f[f].name);
        snprintf(count, sizeof(count), "%s_count", sc->f[f].name);
        double last_le = -INFINITY, last_count = 0, inf_count = -1;
        int n_buckets = 0, n_sum = 0, n_count = 0;
        double s = -1, c = -1;
        for (int i = 0; i < sc->n; i++) {
            const sample *x = &sc->s[i];
            if (x->family != f)
                continue;
            if (strcmp(x->name, bucket) == 0) {
                const char *le = label_of(x, "le");
                if (!le)
                    fail_msg("%s without le", bucket);
                assert_true(inf_count < 0); // nothing after +Inf
                double b = strcmp(le, "+Inf") == 0 ? INFINITY : parse_value(le, strlen(le), bucket);
                if (!(b > last_le))
                    fail_msg("%s: le %s not above the one before", bucket, le);
                if (x->value < last_count)
                    fail_msg("%s: count at le %s falls (%g < %g)", bucket, le, x->value, last_count);
                assert_true(x->value >= 0 && x->value == floor(x->value));
                last_le = b;
                last_count = x->value;
                if (isinf(b))
                    inf_count = x->value;
                n_buckets++;
            } else if (strcmp(x->name, sum) == 0) {
                s = x->value;
                n_sum++;
            } else if (strcmp(x->name, count) == 0) {
                c = x->value;
                n_count++;
            } else {
                fail_msg("%s in the histogram %s", x->name, sc->f[f].name);
            }
        }
        if (n_buckets < 2 || n_sum != 1 || n_count != 1 || inf_count < 0)
            fail_msg("%s: %d buckets, %d sums, %d counts, +Inf %s", sc->f[f].name, n_buckets, n_sum, n_count,
                     inf_count < 0 ? "missing" : "present");
        if (inf_count != c)
            fail_msg("%s: +Inf bucket %g != _count %g", sc->f[f].name, inf_count, c);
        if (!(s >= 0))
            fail_msg("%s: _sum %g < 0", sc->f[f].name, s);
    }
    assert_true(n_hist >= 7);
}

// Every series but the connection table's carries model_name, the served name.
static void check_model_label(const scrape *sc)
{
    for (int i = 0; i < sc->n; i++) {
        const sample *x = &sc->s[i];
        const char *m = label_of(x, "model_name");
        if (strncmp(x->name, "rapid_connections_", 18) == 0) {
            assert_null(m);
            continue;
        }
        if (!m || strcmp(m, MODEL_NAME) != 0)
            fail_msg("%s: model_name %s", x->name, m ? m : "missing");
    }
}

static void check(const scrape *sc)
{
    check_histograms(sc);
    check_model_label(sc);
}

static const char *const histograms[] = {"rapid_time_to_first_token_seconds", "rapid_inter_token_latency_seconds",
                                         "rapid_e2e_request_latency_seconds", "rapid_request_queue_time_seconds",
                                         "rapid_request_prompt_tokens",       "rapid_request_generation_tokens"};

static double hist_part(const scrape *sc, const char *h, const char *part)
{
    char name[160];
    snprintf(name, sizeof(name), "%s_%s", h, part);
    return value_of(sc, name, NULL, NULL);
}

// rapid_requests_total{route=route,status="200"}, 0 when absent.
static double requests(const scrape *sc, const char *route)
{
    for (int i = 0; i < sc->n; i++) {
        const sample *x = &sc->s[i];
        const char *rt = label_of(x, "route"), *st = label_of(x, "status");
        if (strcmp(x->name, "rapid_requests_total") == 0 && rt && st && strcmp(rt, route) == 0 &&
            strcmp(st, "200") == 0)
            return x->value;
    }
    return 0;
}

// A request whose usage is added to *prompt and *completion.
static void run_request(const char *path, const char *body, double *prompt, double *completion)
{
    wire_resp r;
    wire_request("POST", path, NULL, body, &r);
    if (r.status != 200)
        fail_msg("%s: %d %s", path, r.status, r.body);
    json_t *v = body_json(&r);
    json_t *u = json_object_get(v, "usage");
    assert_true(json_is_integer(json_object_get(u, "prompt_tokens")));
    *prompt += (double)json_integer_value(json_object_get(u, "prompt_tokens"));
    *completion += (double)json_integer_value(json_object_get(u, "completion_tokens"));
    json_decref(v);
    free(r.body);
}

static void test_metrics_histograms(void **state)
{
    (void)state;
    static scrape before, after; // (large: not on the stack)
    get_scrape(&before);
    check(&before);
    wire_resp r;
    wire_request("GET", "/v1/models", NULL, NULL, &r);
    json_t *models = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(models, "data"), 0), "id")),
                        MODEL_NAME);
    json_decref(models);
    free(r.body);

    double prompt = 0, completion = 0;
    run_request("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":4}",
                &prompt, &completion);
    run_request("/v1/chat/completions",
                "{\"messages\":[{\"role\":\"user\",\"content\":\"tell me a story\"}],\"max_tokens\":6}", &prompt,
                &completion);
    run_request("/v1/completions", "{\"prompt\":\"Once upon a time\",\"max_tokens\":5}", &prompt, &completion);
    const double n_req = 3;
    assert_true(prompt > 0 && completion > 0);

    // A request is counted when its connection's last reference goes, just after the reply:
    // wait (a liveness bound) until the third is.
    for (int i = 0;; i++) {
        get_scrape(&after);
        if (hist_part(&after, "rapid_e2e_request_latency_seconds", "count") -
                hist_part(&before, "rapid_e2e_request_latency_seconds", "count") >=
            n_req)
            break;
        if (i == 500)
            fail_msg("the requests were not counted in /metrics");
        usleep(10000);
    }
    check(&after);
    for (size_t k = 0; k < sizeof(histograms) / sizeof(histograms[0]); k++) {
        if (k == 1)
            continue; // inter-token latency counts gaps, below
        double dc = hist_part(&after, histograms[k], "count") - hist_part(&before, histograms[k], "count");
        if (dc != n_req)
            fail_msg("%s_count rose by %g, not %g", histograms[k], dc, n_req);
    }
    double dp = hist_part(&after, "rapid_request_prompt_tokens", "sum") -
                hist_part(&before, "rapid_request_prompt_tokens", "sum");
    double dg = hist_part(&after, "rapid_request_generation_tokens", "sum") -
                hist_part(&before, "rapid_request_generation_tokens", "sum");
    assert_true(dp == prompt);
    assert_true(dg == completion);
    // The gaps between a request's sampled tokens: its completion tokens - 1, or one more
    // when an end-of-generation token (sampled, not emitted) ended it.
    double gaps = hist_part(&after, "rapid_inter_token_latency_seconds", "count") -
                  hist_part(&before, "rapid_inter_token_latency_seconds", "count");
    if (gaps < completion - n_req || gaps > completion)
        fail_msg("inter-token latency counted %g gaps for %g tokens of %g requests", gaps, completion, n_req);
    assert_true(requests(&after, "chat") - requests(&before, "chat") == 2);
    assert_true(requests(&after, "completions") - requests(&before, "completions") == 1);
    assert_true(value_of(&after, "rapid_prompt_tokens_total", NULL, NULL) -
                    value_of(&before, "rapid_prompt_tokens_total", NULL, NULL) ==
                prompt);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_metrics_histograms)};
    return cmocka_run_group_tests(tests, setup, wire_teardown);
}
