/*
 * metrics.c - the arithmetic: medians and ranges, the figures of one (task,
 * run) from its records, and the summary of a whole records array.
 *
 * Everything works on records (JSON objects as written to result files), so a
 * summary can be recomputed from a file alone (merge, compare). A (task, run)
 * with one record takes that request's figures; several records (streams
 * started together) give the aggregate: decode tok/s = sum over streams of
 * (completion tokens - 1) / (latest last token - earliest first token), which
 * is the single-stream rate when the server serves one stream at a time and
 * N times it when it batches perfectly. A stream whose tokens (more than one)
 * all came at one instant (a reply held back and sent whole) has no decode
 * interval, so the aggregate has none either, as a single stream's rate.
 * A (task, run) with a failed request has no figures: medians are over the
 * runs that worked.
 */
#include "bench_int.h"

#include <math.h>
#include <stdlib.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double rp_bench_median(const double *v, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += isfinite(v[i]);
    if (k == 0)
        return NAN;
    double *s = rp_malloc(k * sizeof(*s));
    if (!s)
        return NAN;
    k = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(v[i]))
            s[k++] = v[i];
    qsort(s, k, sizeof(*s), cmp_double);
    double m = k % 2 ? s[k / 2] : (s[k / 2 - 1] + s[k / 2]) / 2;
    rp_free(s);
    return m;
}

void rp_bench_range(const double *v, size_t n, double *lo, double *hi)
{
    *lo = *hi = NAN;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(v[i]))
            continue;
        if (!isfinite(*lo) || v[i] < *lo)
            *lo = v[i];
        if (!isfinite(*hi) || v[i] > *hi)
            *hi = v[i];
    }
}

// A number field (NAN when absent or null).
static double num(const json_t *rec, const char *key)
{
    const json_t *v = json_object_get(rec, key);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

// An integer field (-1 when absent or null).
static int64_t count(const json_t *rec, const char *key)
{
    const json_t *v = json_object_get(rec, key);
    return json_is_integer(v) ? (int64_t)json_integer_value(v) : -1;
}

static bool rec_ok(const json_t *rec)
{
    const json_t *err = json_object_get(rec, "error");
    return !err || json_is_null(err);
}

void rp_bench_measure_records(const json_t *const *recs, size_t n, rp_bench_measure *m)
{
    memset(m, 0, sizeof(*m));
    m->ttft_s = m->decode_tok_s = m->e2e_s = m->stream_decode_tok_s = NAN;
    m->prompt_tokens = m->cached_tokens = m->completion_tokens = -1;
    m->n_records = (int)n;
    for (size_t i = 0; i < n; i++) {
        m->n_errors += !rec_ok(recs[i]);
        const json_t *pass = json_object_get(recs[i], "pass");
        if (json_is_boolean(pass)) {
            m->n_checked++;
            m->n_pass += json_is_true(pass);
        }
    }
    if (n == 0 || m->n_errors)
        return;
    int64_t pt = 0, ct = 0, cc = 0;
    for (size_t i = 0; i < n; i++) {
        int64_t p = count(recs[i], "prompt_tokens"), c = count(recs[i], "completion_tokens");
        int64_t k = count(recs[i], "cached_tokens");
        pt = pt < 0 || p < 0 ? -1 : pt + p;
        ct = ct < 0 || c < 0 ? -1 : ct + c;
        cc = cc < 0 || k < 0 ? -1 : cc + k;
    }
    m->prompt_tokens = pt;
    m->completion_tokens = ct;
    m->cached_tokens = cc;
    if (n == 1) {
        m->ttft_s = num(recs[0], "ttft_s");
        m->decode_tok_s = m->stream_decode_tok_s = num(recs[0], "decode_tok_s");
        m->e2e_s = num(recs[0], "e2e_s");
        return;
    }
    double *ttft = rp_malloc(2 * n * sizeof(*ttft));
    if (!ttft)
        return;
    double *sdec = ttft + n;
    for (size_t i = 0; i < n; i++)
        sdec[i] = num(recs[i], "decode_tok_s");
    m->stream_decode_tok_s = rp_bench_median(sdec, n);
    double sent = INFINITY, first = INFINITY, last = -INFINITY, tokens = 0;
    bool all = true, timed = true;
    for (size_t i = 0; i < n; i++) {
        ttft[i] = num(recs[i], "ttft_s");
        double s = num(recs[i], "t_sent"), f = num(recs[i], "t_first"), l = num(recs[i], "t_last");
        int64_t c = count(recs[i], "completion_tokens");
        if (!isfinite(s) || !isfinite(f) || !isfinite(l) || c < 1) {
            all = false;
            continue;
        }
        timed &= c < 2 || l > f;
        sent = s < sent ? s : sent;
        first = f < first ? f : first;
        last = l > last ? l : last;
        tokens += (double)(c - 1);
    }
    m->ttft_s = rp_bench_median(ttft, n);
    rp_free(ttft);
    if (!all)
        return;
    m->e2e_s = last - sent;
    if (timed && last > first && tokens > 0)
        m->decode_tok_s = tokens / (last - first);
}

rp_status rp_bench_task_ids(const json_t *records, const char ***ids, size_t *n)
{
    *ids = NULL;
    *n = 0;
    size_t cap = json_array_size(records), k = 0;
    const char **out = rp_calloc(cap ? cap : 1, sizeof(*out));
    if (!out)
        return RP_ERR(RP_ERR_NOMEM, "out of memory listing tasks");
    size_t i;
    const json_t *rec;
    json_array_foreach(records, i, rec)
    {
        const char *t = json_string_value(json_object_get(rec, "task"));
        if (!t)
            continue;
        bool seen = false;
        for (size_t j = 0; j < k && !seen; j++)
            seen = strcmp(out[j], t) == 0;
        if (!seen)
            out[k++] = t;
    }
    *ids = out;
    *n = k;
    return RP_OK;
}

static int64_t stream_of(const json_t *rec)
{
    int64_t s = count(rec, "stream");
    return s < 0 ? 0 : s;
}

size_t rp_bench_select(const json_t *records, const char *task, int run, const json_t **out, size_t cap)
{
    size_t k = 0, i;
    const json_t *rec;
    json_array_foreach(records, i, rec)
    {
        const char *t = json_string_value(json_object_get(rec, "task"));
        if (!t || strcmp(t, task) != 0 || count(rec, "run") != run)
            continue;
        if (k < cap) {
            // Insertion by stream index keeps the output ordered.
            size_t j = k;
            while (j > 0 && stream_of(out[j - 1]) > stream_of(rec)) {
                out[j] = out[j - 1];
                j--;
            }
            out[j] = rec;
        }
        k++;
    }
    return k;
}

int rp_bench_run_count(const json_t *records)
{
    int64_t max = -1;
    size_t i;
    const json_t *rec;
    json_array_foreach(records, i, rec)
    {
        int64_t r = count(rec, "run");
        max = r > max ? r : max;
    }
    return (int)(max + 1);
}

// {"median", "min", "max"} of v.
static json_t *stats_json(const double *v, size_t n)
{
    double lo, hi;
    rp_bench_range(v, n, &lo, &hi);
    return json_pack("{s:o, s:o, s:o}", "median", rp_bench_json_real(rp_bench_median(v, n)), "min",
                     rp_bench_json_real(lo), "max", rp_bench_json_real(hi));
}

static json_t *task_summary(const json_t *records, const char *task, int runs)
{
    json_t *out = NULL, *passes = NULL;
    size_t nr = (size_t)(runs > 0 ? runs : 1);
    double *v = rp_calloc(nr * 8, sizeof(*v));
    const json_t **sel = NULL;
    size_t cap = json_array_size(records);
    sel = rp_calloc(cap ? cap : 1, sizeof(*sel));
    if (!v || !sel)
        goto fail;
    double *ttft = v, *dec = v + nr, *e2e = v + 2 * nr, *pt = v + 3 * nr, *ct = v + 4 * nr, *cc = v + 5 * nr,
           *pre = v + 6 * nr, *sdec = v + 7 * nr;
    const char *scenario = NULL;
    int present = 0, errors = 0, checked = 0;
    bool streams = false; // some run had several records
    passes = json_array();
    if (!passes)
        goto fail;
    for (int r = 0; r < runs; r++) {
        size_t k = rp_bench_select(records, task, r, sel, cap);
        ttft[r] = dec[r] = e2e[r] = pt[r] = ct[r] = cc[r] = pre[r] = sdec[r] = NAN;
        if (k == 0)
            continue;
        present++;
        streams = streams || k > 1;
        if (!scenario)
            scenario = json_string_value(json_object_get(sel[0], "scenario"));
        rp_bench_measure m;
        rp_bench_measure_records(sel, k, &m);
        errors += m.n_errors;
        ttft[r] = m.ttft_s;
        dec[r] = m.decode_tok_s;
        sdec[r] = m.stream_decode_tok_s;
        e2e[r] = m.e2e_s;
        pt[r] = m.prompt_tokens >= 0 ? (double)m.prompt_tokens : NAN;
        ct[r] = m.completion_tokens >= 0 ? (double)m.completion_tokens : NAN;
        cc[r] = m.cached_tokens >= 0 ? (double)m.cached_tokens : NAN;
        // Prompt tokens actually computed per second of waiting for the first token.
        if (isfinite(pt[r]) && isfinite(ttft[r]) && ttft[r] > 0)
            pre[r] = (pt[r] - (isfinite(cc[r]) ? cc[r] : 0)) / ttft[r];
        if (m.n_checked) {
            checked += m.n_checked;
            if (json_array_append_new(passes, json_integer(m.n_pass)))
                goto fail;
        }
    }
    out = json_pack("{s:s, s:s?, s:i, s:i, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "task", task, "scenario", scenario,
                    "runs", present, "errors", errors, "ttft_s", stats_json(ttft, nr), "decode_tok_s",
                    stats_json(dec, nr), "e2e_s", stats_json(e2e, nr), "prefill_tok_s", stats_json(pre, nr),
                    "prompt_tokens", rp_bench_json_real(rp_bench_median(pt, nr)), "cached_tokens",
                    rp_bench_json_real(rp_bench_median(cc, nr)), "completion_tokens",
                    rp_bench_json_real(rp_bench_median(ct, nr)));
    if (out && checked && json_object_set(out, "pass", passes)) {
        json_decref(out);
        out = NULL;
    }
    if (out && streams && json_object_set_new(out, "stream_decode_tok_s", stats_json(sdec, nr))) {
        json_decref(out);
        out = NULL;
    }
fail:
    json_decref(passes);
    rp_free(v);
    rp_free(sel);
    return out;
}

// Tool-call accuracy per run over every record that has "pass".
static json_t *tools_summary(const json_t *records, int runs)
{
    size_t nr = (size_t)(runs > 0 ? runs : 1);
    double *rate = rp_calloc(nr, sizeof(*rate));
    json_t *per = json_array();
    json_t *out = NULL;
    int cases = 0;
    if (!rate || !per)
        goto fail;
    for (int r = 0; r < runs; r++) {
        int pass = 0, n = 0;
        size_t i;
        const json_t *rec;
        json_array_foreach(records, i, rec)
        {
            const json_t *p = json_object_get(rec, "pass");
            if (count(rec, "run") != r || !json_is_boolean(p))
                continue;
            n++;
            pass += json_is_true(p);
        }
        cases = n > cases ? n : cases;
        rate[r] = n ? (double)pass / n : NAN;
        if (n && json_array_append_new(per, json_pack("{s:i, s:i}", "pass", pass, "cases", n)))
            goto fail;
    }
    if (cases)
        out = json_pack("{s:i, s:O, s:o}", "cases", cases, "per_run", per, "pass_rate_median",
                        rp_bench_json_real(rp_bench_median(rate, nr)));
fail:
    rp_free(rate);
    json_decref(per);
    return out;
}

// Per concurrency level (records with "n_streams"), in first-seen order: its
// aggregate and per-stream decode rates (medians over runs) and the ratio to one stream.
static json_t *concurrency_summary(const json_t *records, const json_t *tasks)
{
    json_t *out = json_array();
    double one = NAN;
    size_t i;
    const json_t *t;
    json_array_foreach(tasks, i, t)
    {
        const char *id = json_string_value(json_object_get(t, "task"));
        const json_t *first = NULL;
        size_t k;
        const json_t *rec;
        json_array_foreach(records, k, rec)
        {
            const char *rt = json_string_value(json_object_get(rec, "task"));
            if (rt && id && strcmp(rt, id) == 0) {
                first = rec;
                break;
            }
        }
        int64_t n = first ? count(first, "n_streams") : -1;
        const char *sc = json_string_value(json_object_get(first, "scenario"));
        if (n < 1 || !sc || strcmp(sc, "concurrency") != 0)
            continue;
        double agg = num(json_object_get(t, "decode_tok_s"), "median");
        const json_t *sd = json_object_get(t, "stream_decode_tok_s");
        double per = sd ? num(sd, "median") : agg;
        if (n == 1)
            one = agg;
        if (!out || json_array_append_new(out, json_pack("{s:s, s:I, s:o, s:o}", "task", id, "streams", (json_int_t)n,
                                                         "decode_tok_s", rp_bench_json_real(agg), "stream_decode_tok_s",
                                                         rp_bench_json_real(per)))) {
            json_decref(out);
            return NULL;
        }
    }
    json_array_foreach(out, i, t)
    {
        double agg = num(t, "decode_tok_s");
        if (json_object_set_new((json_t *)t, "vs_one_stream",
                                rp_bench_json_real(isfinite(one) && one > 0 ? agg / one : NAN))) {
            json_decref(out);
            return NULL;
        }
    }
    if (out && json_array_size(out) == 0) {
        json_decref(out);
        return json_null();
    }
    return out;
}

double rp_bench_max_gap(const double *t, size_t n, double lo, double hi)
{
    double best = NAN;
    for (size_t i = 1; i < n; i++)
        if (t[i] >= lo && t[i] < hi && (!(best >= 0) || t[i] - t[i - 1] > best))
            best = t[i] - t[i - 1];
    return best;
}

// Per run: the largest pause of any stream in each window, the chunk's time, and their ratio.
static json_t *interference_summary(const json_t *records, int runs)
{
    size_t nr = (size_t)(runs > 0 ? runs : 1);
    double *v = rp_calloc(nr * 5, sizeof(*v));
    json_t *per = json_array(), *out = NULL;
    int found = 0;
    if (!v || !per)
        goto fail;
    double *before = v, *during = v + nr, *after = v + 2 * nr, *chunk = v + 3 * nr, *ratio = v + 4 * nr;
    for (int r = 0; r < runs; r++) {
        before[r] = during[r] = after[r] = chunk[r] = ratio[r] = NAN;
        bool any = false;
        size_t i;
        const json_t *rec;
        json_array_foreach(records, i, rec)
        {
            if (count(rec, "run") != r)
                continue;
            if (json_object_get(rec, "chunk_s")) {
                chunk[r] = num(rec, "chunk_s");
                continue;
            }
            if (!json_object_get(rec, "gap_during_s"))
                continue;
            any = true;
            static const char *const keys[] = {"gap_before_s", "gap_during_s", "gap_after_s"};
            double *dst[] = {&before[r], &during[r], &after[r]};
            for (int w = 0; w < 3; w++) {
                double g = num(rec, keys[w]);
                if (isfinite(g) && (!isfinite(*dst[w]) || g > *dst[w]))
                    *dst[w] = g;
            }
        }
        if (!any)
            continue;
        found++;
        if (isfinite(during[r]) && chunk[r] > 0)
            ratio[r] = during[r] / chunk[r];
        if (json_array_append_new(per, json_pack("{s:i, s:o, s:o, s:o, s:o, s:o}", "run", r, "gap_before_s",
                                                 rp_bench_json_real(before[r]), "gap_during_s",
                                                 rp_bench_json_real(during[r]), "gap_after_s",
                                                 rp_bench_json_real(after[r]), "chunk_s", rp_bench_json_real(chunk[r]),
                                                 "during_vs_chunk", rp_bench_json_real(ratio[r]))))
            goto fail;
    }
    if (found)
        out = json_pack("{s:O, s:o, s:o, s:o, s:o, s:o}", "per_run", per, "gap_before_s",
                        rp_bench_json_real(rp_bench_median(before, nr)), "gap_during_s",
                        rp_bench_json_real(rp_bench_median(during, nr)), "gap_after_s",
                        rp_bench_json_real(rp_bench_median(after, nr)), "chunk_s",
                        rp_bench_json_real(rp_bench_median(chunk, nr)), "during_vs_chunk",
                        rp_bench_json_real(rp_bench_median(ratio, nr)));
fail:
    rp_free(v);
    json_decref(per);
    return out;
}

json_t *rp_bench_engine_delta(const json_t *before, const json_t *after)
{
    const json_t *b = json_object_get(before, "engine"), *a = json_object_get(after, "engine");
    const json_t *bb = json_object_get(b, "forward_by_batch"), *ab = json_object_get(a, "forward_by_batch");
    if (!json_is_array(bb) || !json_is_array(ab) || !json_is_number(json_object_get(a, "step_seconds")))
        return NULL;
    json_t *buckets = json_array();
    size_t i;
    const json_t *x;
    json_array_foreach(ab, i, x)
    {
        int64_t lo = count(x, "tokens_min");
        double steps = num(x, "steps"), tokens = num(x, "tokens"), sec = num(x, "seconds");
        size_t k;
        const json_t *y;
        json_array_foreach(bb, k, y) if (count(y, "tokens_min") == lo)
        {
            steps -= num(y, "steps");
            tokens -= num(y, "tokens");
            sec -= num(y, "seconds");
        }
        if (!(steps > 0))
            continue;
        if (!buckets || json_array_append_new(
                            buckets, json_pack("{s:I, s:O?, s:I, s:I, s:f}", "tokens_min", (json_int_t)lo, "tokens_max",
                                               json_object_get(x, "tokens_max"), "steps", (json_int_t)steps, "tokens",
                                               (json_int_t)tokens, "seconds", sec))) {
            json_decref(buckets);
            return NULL;
        }
    }
    json_t *out = json_pack("{s:I, s:f, s:f, s:o}", "steps", (json_int_t)(num(a, "steps") - num(b, "steps")),
                            "step_seconds", num(a, "step_seconds") - num(b, "step_seconds"), "forward_seconds",
                            num(a, "forward_seconds") - num(b, "forward_seconds"), "forward_by_batch", buckets);
    return out;
}

json_t *rp_bench_summary(const json_t *records)
{
    const char **ids = NULL;
    size_t n = 0;
    json_t *tasks = NULL, *out = NULL;
    if (rp_bench_task_ids(records, &ids, &n) != RP_OK)
        return NULL;
    int runs = rp_bench_run_count(records);
    size_t failed = 0, i;
    const json_t *rec;
    json_array_foreach(records, i, rec) failed += !rec_ok(rec);
    tasks = json_array();
    if (!tasks)
        goto fail;
    for (size_t k = 0; k < n; k++)
        if (json_array_append_new(tasks, task_summary(records, ids[k], runs)))
            goto fail;
    out = json_pack("{s:I, s:I, s:i, s:O}", "requests", (json_int_t)json_array_size(records), "failed",
                    (json_int_t)failed, "runs", runs, "tasks", tasks);
    json_t *tools = out ? tools_summary(records, runs) : NULL;
    if (tools && json_object_set_new(out, "tools", tools)) {
        json_decref(out);
        out = NULL;
    }
    json_t *conc = out ? concurrency_summary(records, tasks) : NULL;
    if (conc && !json_is_null(conc) && json_object_set(out, "concurrency", conc)) {
        json_decref(out);
        out = NULL;
    }
    json_decref(conc);
    json_t *inter = out ? interference_summary(records, runs) : NULL;
    if (inter && json_object_set_new(out, "interference", inter)) {
        json_decref(out);
        out = NULL;
    }
fail:
    json_decref(tasks);
    rp_free(ids);
    return out;
}
