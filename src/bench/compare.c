/*
 * compare.c - two result files side by side: per task the speedup of B over
 * A, as a text table, a Markdown table and (svg.c) a bar chart.
 *
 * Runs are paired by index (bench/run.sh alternates the configurations, so
 * run i of A and run i of B were measured next to each other): per pair the
 * ratio B/A of decode tok/s and A/B of end to end and time to first token,
 * so every figure above 1 means B is faster. A task shows the median and the
 * range of its ratios; the bottom line the median over tasks of the per-task
 * medians. Outputs are byte-identical when text, reasoning and tool calls of
 * the same (run, stream) match exactly, which greedy decoding should give
 * between two configurations that only change speed.
 */
#include "bench_int.h"

#include <math.h>

static bool same_string(const json_t *a, const json_t *b)
{
    const char *x = json_string_value(a), *y = json_string_value(b);
    size_t nx = x ? json_string_length(a) : 0, ny = y ? json_string_length(b) : 0;
    return nx == ny && (nx == 0 || memcmp(x, y, nx) == 0);
}

static bool same_output(const json_t *a, const json_t *b)
{
    const json_t *ca = json_object_get(a, "tool_calls"), *cb = json_object_get(b, "tool_calls");
    bool calls = (json_is_null(ca) || !ca || !json_array_size(ca)) && (json_is_null(cb) || !cb || !json_array_size(cb));
    if (!calls)
        calls = json_equal((json_t *)ca, (json_t *)cb);
    return calls && same_string(json_object_get(a, "text"), json_object_get(b, "text")) &&
           same_string(json_object_get(a, "reasoning"), json_object_get(b, "reasoning"));
}

static bool rec_ok(const json_t *rec)
{
    const json_t *e = json_object_get(rec, "error");
    return !e || json_is_null(e);
}

static void stats3(const double *v, size_t n, double out[3])
{
    out[0] = rp_bench_median(v, n);
    rp_bench_range(v, n, &out[1], &out[2]);
}

static double ratio(double num, double den)
{
    return isfinite(num) && isfinite(den) && den > 0 ? num / den : NAN;
}

// Fills a row for a task present in both files.
static rp_status compare_task(const json_t *ra, const json_t *rb, rp_bench_cmp_row *row)
{
    int na = rp_bench_run_count(ra), nb = rp_bench_run_count(rb);
    int np = na < nb ? na : nb, nmax = na > nb ? na : nb;
    size_t cap = json_array_size(ra) > json_array_size(rb) ? json_array_size(ra) : json_array_size(rb);
    rp_status st = RP_OK;
    const json_t **sa = rp_calloc(cap ? cap : 1, sizeof(*sa)), **sb = rp_calloc(cap ? cap : 1, sizeof(*sb));
    double *v = rp_calloc((size_t)(nmax > 0 ? nmax : 1) * 7, sizeof(*v));
    if (!sa || !sb || !v) {
        st = RP_ERR(RP_ERR_NOMEM, "out of memory comparing");
        goto fail;
    }
    double *dec = v, *e2e = v + nmax, *ttft = v + 2 * nmax, *adec = v + 3 * nmax, *bdec = v + 4 * nmax,
           *ae2e = v + 5 * nmax, *be2e = v + 6 * nmax;
    for (int r = 0; r < nmax; r++) {
        dec[r] = e2e[r] = ttft[r] = adec[r] = bdec[r] = ae2e[r] = be2e[r] = NAN;
        size_t ka = r < na ? rp_bench_select(ra, row->task, r, sa, cap) : 0;
        size_t kb = r < nb ? rp_bench_select(rb, row->task, r, sb, cap) : 0;
        rp_bench_measure ma, mb;
        rp_bench_measure_records(sa, ka, &ma);
        rp_bench_measure_records(sb, kb, &mb);
        row->a_errors += ma.n_errors;
        row->b_errors += mb.n_errors;
        if (ka) {
            adec[r] = ma.decode_tok_s;
            ae2e[r] = ma.e2e_s;
        }
        if (kb) {
            bdec[r] = mb.decode_tok_s;
            be2e[r] = mb.e2e_s;
        }
        if (r >= np || !ka || !kb)
            continue;
        row->n_pairs++;
        dec[r] = ratio(mb.decode_tok_s, ma.decode_tok_s);
        e2e[r] = ratio(ma.e2e_s, mb.e2e_s);
        ttft[r] = ratio(ma.ttft_s, mb.ttft_s);
        for (size_t s = 0; s < ka && s < kb; s++) {
            if (!rec_ok(sa[s]) || !rec_ok(sb[s]))
                continue;
            row->n_outputs++;
            row->n_identical += same_output(sa[s], sb[s]);
        }
    }
    stats3(dec, (size_t)nmax, row->decode);
    stats3(e2e, (size_t)nmax, row->e2e);
    stats3(ttft, (size_t)nmax, row->ttft);
    row->a_decode = rp_bench_median(adec, (size_t)nmax);
    row->b_decode = rp_bench_median(bdec, (size_t)nmax);
    row->a_e2e = rp_bench_median(ae2e, (size_t)nmax);
    row->b_e2e = rp_bench_median(be2e, (size_t)nmax);
fail:
    rp_free(sa);
    rp_free(sb);
    rp_free(v);
    return st;
}

static const char *scenario_of(const json_t *records, const char *task)
{
    size_t i;
    const json_t *rec;
    json_array_foreach(records, i, rec)
    {
        const char *t = json_string_value(json_object_get(rec, "task"));
        if (t && strcmp(t, task) == 0)
            return json_string_value(json_object_get(rec, "scenario"));
    }
    return NULL;
}

// "CPU, N cores, M GiB, OS" from a document's environment.machine.
static char *machine_line(const json_t *doc)
{
    const json_t *m = json_object_get(json_object_get(doc, "environment"), "machine");
    const char *cpu = json_string_value(json_object_get(m, "cpu"));
    const char *os = json_string_value(json_object_get(m, "os"));
    const json_t *cores = json_object_get(m, "cores"), *mem = json_object_get(m, "memory_bytes");
    rp_bench_buf b = {0};
    rp_bench_buf_adds(&b, cpu ? cpu : "unknown CPU");
    if (json_is_integer(cores))
        rp_bench_buf_printf(&b, ", %lld cores", (long long)json_integer_value(cores));
    if (json_is_integer(mem))
        rp_bench_buf_printf(&b, ", %.0f GiB", (double)json_integer_value(mem) / (1024.0 * 1024 * 1024));
    if (os)
        rp_bench_buf_printf(&b, ", %s", os);
    return rp_bench_buf_take(&b);
}

rp_status rp_bench_cmp_build(const json_t *a, const json_t *b, const char *name_a, const char *name_b,
                             rp_bench_cmp *out)
{
    memset(out, 0, sizeof(*out));
    const json_t *ra = json_object_get(a, "records"), *rb = json_object_get(b, "records");
    const char **ia = NULL, **ib = NULL;
    size_t na = 0, nb = 0;
    rp_status st = rp_bench_task_ids(ra, &ia, &na);
    if (st == RP_OK)
        st = rp_bench_task_ids(rb, &ib, &nb);
    double *dec = NULL, *e2e = NULL;
    if (st != RP_OK)
        goto fail;
    out->rows = rp_calloc(na + nb + 1, sizeof(*out->rows));
    dec = rp_calloc(na + 1, sizeof(*dec));
    e2e = rp_calloc(na + 1, sizeof(*e2e));
    out->machine = machine_line(a);
    if (!out->rows || !dec || !e2e || !out->machine) {
        st = RP_ERR(RP_ERR_NOMEM, "out of memory comparing");
        goto fail;
    }
    const char *la = json_string_value(json_object_get(a, "label"));
    const char *lb = json_string_value(json_object_get(b, "label"));
    out->label_a = la && *la ? la : name_a;
    out->label_b = lb && *lb ? lb : name_b;
    size_t common = 0;
    for (size_t i = 0; i < na; i++) {
        rp_bench_cmp_row *row = &out->rows[out->n_rows++];
        row->task = ia[i];
        row->scenario = scenario_of(ra, ia[i]);
        for (int k = 0; k < 3; k++)
            row->decode[k] = row->e2e[k] = row->ttft[k] = NAN;
        row->a_decode = row->b_decode = row->a_e2e = row->b_e2e = NAN;
        bool in_b = false;
        for (size_t j = 0; j < nb && !in_b; j++)
            in_b = strcmp(ib[j], ia[i]) == 0;
        if (!in_b) {
            row->only = 'A';
            continue;
        }
        if ((st = compare_task(ra, rb, row)) != RP_OK)
            goto fail;
        dec[common] = row->decode[0];
        e2e[common] = row->e2e[0];
        common++;
    }
    for (size_t j = 0; j < nb; j++) {
        bool in_a = false;
        for (size_t i = 0; i < na && !in_a; i++)
            in_a = strcmp(ia[i], ib[j]) == 0;
        if (in_a)
            continue;
        rp_bench_cmp_row *row = &out->rows[out->n_rows++];
        row->task = ib[j];
        row->scenario = scenario_of(rb, ib[j]);
        for (int k = 0; k < 3; k++)
            row->decode[k] = row->e2e[k] = row->ttft[k] = NAN;
        row->a_decode = row->b_decode = row->a_e2e = row->b_e2e = NAN;
        row->only = 'B';
    }
    if (!common) {
        st = RP_ERR(RP_ERR_INVALID, "the two result files have no task in common");
        goto fail;
    }
    out->all_decode = rp_bench_median(dec, common);
    out->all_e2e = rp_bench_median(e2e, common);
fail:
    rp_free(ia);
    rp_free(ib);
    rp_free(dec);
    rp_free(e2e);
    if (st != RP_OK)
        rp_bench_cmp_deinit(out);
    return st;
}

void rp_bench_cmp_deinit(rp_bench_cmp *c)
{
    rp_free(c->rows);
    rp_free((char *)c->machine);
    memset(c, 0, sizeof(*c));
}

// "1.85x [1.80-1.90]" (or "n/a") into buf.
static const char *fmt_ratio(const double v[3], char *buf, size_t cap)
{
    if (!isfinite(v[0]))
        snprintf(buf, cap, "n/a");
    else if (v[1] == v[2])
        snprintf(buf, cap, "%.2fx", v[0]);
    else
        snprintf(buf, cap, "%.2fx [%.2f-%.2f]", v[0], v[1], v[2]);
    return buf;
}

static const char *fmt_num(double v, const char *f, char *buf, size_t cap)
{
    if (isfinite(v))
        snprintf(buf, cap, f, v);
    else
        snprintf(buf, cap, "n/a");
    return buf;
}

static const char *fmt_ident(const rp_bench_cmp_row *r, char *buf, size_t cap)
{
    if (r->n_outputs)
        snprintf(buf, cap, "%d/%d", r->n_identical, r->n_outputs);
    else
        snprintf(buf, cap, "n/a");
    return buf;
}

char *rp_bench_cmp_text(const rp_bench_cmp *c)
{
    rp_bench_buf b = {0};
    rp_bench_buf_printf(&b, "A: %s\nB: %s\nmachine (A): %s\n", c->label_a, c->label_b, c->machine);
    rp_bench_buf_adds(&b, "speedup of B over A: decode tok/s B/A, end to end and TTFT A/B (above 1: B is faster);\n"
                          "median [min-max] over the runs paired by index\n\n");
    rp_bench_buf_printf(&b, "%-24s %4s  %-22s %-22s %-22s %9s %9s %9s %7s\n", "task", "runs", "decode B/A",
                        "end to end A/B", "TTFT A/B", "A tok/s", "B tok/s", "identical", "errors");
    for (size_t i = 0; i < c->n_rows; i++) {
        const rp_bench_cmp_row *r = &c->rows[i];
        if (r->only) {
            rp_bench_buf_printf(&b, "%-24s       only in %c\n", r->task, r->only);
            continue;
        }
        char d[48], e[48], t[48], ad[24], bd[24], id[24];
        rp_bench_buf_printf(&b, "%-24s %4d  %-22s %-22s %-22s %9s %9s %9s %3d/%-3d\n", r->task, r->n_pairs,
                            fmt_ratio(r->decode, d, sizeof(d)), fmt_ratio(r->e2e, e, sizeof(e)),
                            fmt_ratio(r->ttft, t, sizeof(t)), fmt_num(r->a_decode, "%.1f", ad, sizeof(ad)),
                            fmt_num(r->b_decode, "%.1f", bd, sizeof(bd)), fmt_ident(r, id, sizeof(id)), r->a_errors,
                            r->b_errors);
    }
    char d[24], e[24];
    rp_bench_buf_printf(&b, "%-24s %4s  %-22s %-22s\n", "median over tasks", "",
                        fmt_num(c->all_decode, "%.2fx", d, sizeof(d)), fmt_num(c->all_e2e, "%.2fx", e, sizeof(e)));
    return rp_bench_buf_take(&b);
}

// Markdown cell text: '|' escaped, newlines dropped.
static void md_cell(rp_bench_buf *b, const char *s)
{
    for (; *s; s++) {
        if (*s == '|')
            rp_bench_buf_adds(b, "\\|");
        else if (*s != '\n' && *s != '\r')
            rp_bench_buf_add(b, s, 1);
    }
}

char *rp_bench_cmp_markdown(const rp_bench_cmp *c)
{
    rp_bench_buf b = {0};
    rp_bench_buf_adds(&b, "A: ");
    md_cell(&b, c->label_a);
    rp_bench_buf_adds(&b, ", B: ");
    md_cell(&b, c->label_b);
    rp_bench_buf_adds(&b, ". Machine (A): ");
    md_cell(&b, c->machine);
    rp_bench_buf_adds(&b, ".\nSpeedup of B over A (above 1: B is faster): decode tok/s B/A, end to end and time to "
                          "first token A/B; median [min-max] over the runs paired by index.\n\n");
    rp_bench_buf_adds(&b, "| task | runs | decode B/A | end to end A/B | TTFT A/B | A tok/s | B tok/s | identical "
                          "outputs | errors A/B |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (size_t i = 0; i < c->n_rows; i++) {
        const rp_bench_cmp_row *r = &c->rows[i];
        rp_bench_buf_adds(&b, "| ");
        md_cell(&b, r->task);
        if (r->only) {
            rp_bench_buf_printf(&b, " | 0 | only in %c | | | | | | |\n", r->only);
            continue;
        }
        char d[48], e[48], t[48], ad[24], bd[24], id[24];
        rp_bench_buf_printf(&b, " | %d | %s | %s | %s | %s | %s | %s | %d/%d |\n", r->n_pairs,
                            fmt_ratio(r->decode, d, sizeof(d)), fmt_ratio(r->e2e, e, sizeof(e)),
                            fmt_ratio(r->ttft, t, sizeof(t)), fmt_num(r->a_decode, "%.1f", ad, sizeof(ad)),
                            fmt_num(r->b_decode, "%.1f", bd, sizeof(bd)), fmt_ident(r, id, sizeof(id)), r->a_errors,
                            r->b_errors);
    }
    char d[24], e[24];
    rp_bench_buf_printf(&b, "| **median over tasks** | | **%s** | **%s** | | | | | |\n",
                        fmt_num(c->all_decode, "%.2fx", d, sizeof(d)), fmt_num(c->all_e2e, "%.2fx", e, sizeof(e)));
    return rp_bench_buf_take(&b);
}

static rp_status write_text(const char *path, const char *text)
{
    rp_file_writer w;
    rp_status st = rp_file_writer_open(&w, path);
    if (st != RP_OK)
        return st;
    rp_file_writer_write(&w, text, strlen(text));
    return rp_file_writer_commit(&w);
}

rp_status rp_bench_compare(const char *a_path, const char *b_path, FILE *out, const char *md_path, const char *svg_path)
{
    json_t *a = NULL, *b = NULL;
    rp_bench_cmp c = {0};
    char *text = NULL;
    rp_status st = rp_bench_doc_load(a_path, &a);
    if (st == RP_OK)
        st = rp_bench_doc_load(b_path, &b);
    if (st == RP_OK)
        st = rp_bench_cmp_build(a, b, a_path, b_path, &c);
    if (st != RP_OK)
        goto fail;
    if (out) {
        if (!(text = rp_bench_cmp_text(&c))) {
            st = RP_ERR(RP_ERR_NOMEM, "out of memory");
            goto fail;
        }
        fputs(text, out);
        rp_free(text);
        text = NULL;
    }
    if (md_path) {
        if (!(text = rp_bench_cmp_markdown(&c))) {
            st = RP_ERR(RP_ERR_NOMEM, "out of memory");
            goto fail;
        }
        if ((st = write_text(md_path, text)) != RP_OK)
            goto fail;
        rp_free(text);
        text = NULL;
    }
    if (svg_path) {
        if (!(text = rp_bench_cmp_svg(&c))) {
            st = RP_ERR(RP_ERR_NOMEM, "out of memory");
            goto fail;
        }
        if ((st = write_text(svg_path, text)) != RP_OK)
            goto fail;
    }
fail:
    rp_free(text);
    rp_bench_cmp_deinit(&c);
    json_decref(a);
    json_decref(b);
    return st;
}
