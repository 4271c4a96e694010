/*
 * record.c - records and result files.
 *
 * A record is one request as JSON: where it belongs (scenario, task, run,
 * stream), whether it worked (ok, error, http_status), its times relative to
 * the run's start (t_sent, t_first, t_last, in seconds), the derived figures
 * (ttft_s, decode_tok_s, e2e_s; null when undefined), the server's token
 * counts and what came back (text, reasoning, tool_calls, finish_reason).
 * Scenarios add their own fields (phase, turn, pass, expected, target_tokens).
 *
 * A result file is {"format": "rapid-bench/1", "label", "environment",
 * "records", "summary"}. Files are checked field by field when read, because
 * compare and merge take files from anywhere: every problem is an error
 * naming the file, the record and the field.
 */
#include "bench_int.h"

#include <math.h>

json_t *rp_bench_record_new(const rp_bench_result *r, double t0, const char *scenario, const char *task, int run)
{
    rp_bench_metrics m;
    rp_bench_metrics_of(r, &m);
    json_t *calls = r->tool_calls ? json_deep_copy(r->tool_calls) : json_null();
    json_t *rec = json_pack("{s:s, s:s, s:i, s:i, s:b, s:s?, s:i, s:o, s:o, s:o, s:o, s:o, s:o}", "scenario", scenario,
                            "task", task, "run", run, "stream", 0, "ok", r->error == NULL, "error", r->error,
                            "http_status", (int)r->http_status, "t_sent", rp_bench_json_real(r->t_sent - t0), "t_first",
                            rp_bench_json_real(r->t_first - t0), "t_last", rp_bench_json_real(r->t_last - t0), "ttft_s",
                            rp_bench_json_real(m.ttft_s), "decode_tok_s", rp_bench_json_real(m.decode_tok_s), "e2e_s",
                            rp_bench_json_real(m.e2e_s));
    if (!rec) {
        json_decref(calls);
        return NULL;
    }
    int bad = 0;
    bad |=
        json_object_set_new(rec, "prompt_tokens", r->prompt_tokens >= 0 ? json_integer(r->prompt_tokens) : json_null());
    bad |=
        json_object_set_new(rec, "cached_tokens", r->cached_tokens >= 0 ? json_integer(r->cached_tokens) : json_null());
    bad |= json_object_set_new(rec, "completion_tokens",
                               r->completion_tokens >= 0 ? json_integer(r->completion_tokens) : json_null());
    bad |= json_object_set_new(rec, "token_chunks", json_integer(r->token_chunks));
    bad |= json_object_set_new(rec, "finish_reason", r->finish_reason ? json_string(r->finish_reason) : json_null());
    bad |= json_object_set_new(rec, "text", rp_bench_json_bytes(r->text, r->text_len));
    bad |= json_object_set_new(rec, "reasoning", rp_bench_json_bytes(r->reasoning, r->reasoning_len));
    bad |= json_object_set_new(rec, "tool_calls", calls);
    if (bad) {
        json_decref(rec);
        return NULL;
    }
    return rec;
}

json_t *rp_bench_record_failed(const char *scenario, const char *task, int run, const char *error)
{
    rp_bench_result r;
    rp_bench_result_init(&r);
    r.error = (char *)error; // borrowed for the call, not freed
    json_t *rec = rp_bench_record_new(&r, 0, scenario, task, run);
    if (rec)
        json_object_set_new(rec, "t_sent", json_null());
    return rec;
}

/* ---- checking ------------------------------------------------------------------ */

static const char *const number_fields[] = {"t_sent", "t_first", "t_last", "ttft_s", "decode_tok_s", "e2e_s"};
static const char *const count_fields[] = {"prompt_tokens", "cached_tokens", "completion_tokens", "token_chunks",
                                           "http_status"};
static const char *const string_fields[] = {"scenario", "error", "text", "reasoning", "finish_reason"};

rp_status rp_bench_doc_check(const json_t *doc)
{
    if (!json_is_object(doc))
        return RP_ERR(RP_ERR_INVALID, "not a JSON object");
    const char *fmt = json_string_value(json_object_get(doc, "format"));
    if (!fmt)
        return RP_ERR(RP_ERR_INVALID, "no \"format\" field (not a rapid bench result file)");
    if (strcmp(fmt, RP_BENCH_FORMAT) != 0)
        return RP_ERR(RP_ERR_INVALID, "format '%s', expected '%s'", fmt, RP_BENCH_FORMAT);
    const json_t *label = json_object_get(doc, "label");
    if (label && !json_is_null(label) && !json_is_string(label))
        return RP_ERR(RP_ERR_INVALID, "\"label\" is not a string");
    const json_t *recs = json_object_get(doc, "records");
    if (!json_is_array(recs))
        return RP_ERR(RP_ERR_INVALID, "\"records\" is missing or not an array");
    size_t i;
    const json_t *rec;
    json_array_foreach(recs, i, rec)
    {
        if (!json_is_object(rec))
            return RP_ERR(RP_ERR_INVALID, "record %zu is not an object", i);
        if (!json_is_string(json_object_get(rec, "task")))
            return RP_ERR(RP_ERR_INVALID, "record %zu: \"task\" is missing or not a string", i);
        const json_t *run = json_object_get(rec, "run");
        if (!json_is_integer(run) || json_integer_value(run) < 0 || json_integer_value(run) > 1000000)
            return RP_ERR(RP_ERR_INVALID, "record %zu: \"run\" is missing or not an integer in [0, 1000000]", i);
        const json_t *stream = json_object_get(rec, "stream");
        if (stream && (!json_is_integer(stream) || json_integer_value(stream) < 0))
            return RP_ERR(RP_ERR_INVALID, "record %zu: \"stream\" is not a non-negative integer", i);
        for (size_t k = 0; k < sizeof(number_fields) / sizeof(*number_fields); k++) {
            const json_t *v = json_object_get(rec, number_fields[k]);
            if (v && !json_is_null(v) && (!json_is_number(v) || !isfinite(json_number_value(v))))
                return RP_ERR(RP_ERR_INVALID, "record %zu: \"%s\" is not a number or null", i, number_fields[k]);
        }
        for (size_t k = 0; k < sizeof(count_fields) / sizeof(*count_fields); k++) {
            const json_t *v = json_object_get(rec, count_fields[k]);
            if (v && !json_is_null(v) && (!json_is_integer(v) || json_integer_value(v) < 0))
                return RP_ERR(RP_ERR_INVALID, "record %zu: \"%s\" is not a non-negative integer or null", i,
                              count_fields[k]);
        }
        for (size_t k = 0; k < sizeof(string_fields) / sizeof(*string_fields); k++) {
            const json_t *v = json_object_get(rec, string_fields[k]);
            if (v && !json_is_null(v) && !json_is_string(v))
                return RP_ERR(RP_ERR_INVALID, "record %zu: \"%s\" is not a string or null", i, string_fields[k]);
        }
        const json_t *calls = json_object_get(rec, "tool_calls");
        if (calls && !json_is_null(calls) && !json_is_array(calls))
            return RP_ERR(RP_ERR_INVALID, "record %zu: \"tool_calls\" is not an array or null", i);
        const json_t *pass = json_object_get(rec, "pass");
        if (pass && !json_is_null(pass) && !json_is_boolean(pass))
            return RP_ERR(RP_ERR_INVALID, "record %zu: \"pass\" is not a boolean or null", i);
    }
    return RP_OK;
}

rp_status rp_bench_doc_load(const char *path, json_t **out)
{
    *out = NULL;
    json_error_t e;
    json_t *doc = json_load_file(path, JSON_ALLOW_NUL, &e);
    if (!doc) {
        if (!rp_file_exists(path))
            return RP_ERR(RP_ERR_IO, "%s: cannot read the file", path);
        return RP_ERR(RP_ERR_INVALID, "%s: not valid JSON (line %d, column %d: %s)", path, e.line, e.column, e.text);
    }
    rp_status st = rp_bench_doc_check(doc);
    if (st != RP_OK) {
        json_decref(doc);
        return rp_error_prefix(st, "%s", path);
    }
    *out = doc;
    return RP_OK;
}

rp_status rp_bench_doc_write(const char *path, const json_t *doc)
{
    char *text = json_dumps(doc, JSON_INDENT(1) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9));
    if (!text)
        return RP_ERR(RP_ERR_NOMEM, "%s: out of memory writing the results", path);
    rp_file_writer w;
    rp_status st = rp_file_writer_open(&w, path);
    if (st == RP_OK) {
        rp_file_writer_write(&w, text, strlen(text));
        rp_file_writer_write(&w, "\n", 1);
        st = rp_file_writer_commit(&w);
    }
    free(text); // jansson's allocation
    return st;
}

/* ---- merge ---------------------------------------------------------------------- */

// Appends a copy of `item` (a record or a server entry) to `to`, its "run" moved by offset.
// Returns non-zero when out of memory.
static int append_shifted(json_t *to, const json_t *item, int offset)
{
    json_t *c = json_deep_copy(item);
    return !c ||
           json_object_set_new(c, "run", json_integer(offset + json_integer_value(json_object_get(item, "run")))) ||
           json_array_append_new(to, c);
}

rp_status rp_bench_merge(const char *const *in_paths, size_t n, const char *out_path)
{
    if (n == 0)
        return RP_ERR(RP_ERR_INVALID, "nothing to merge");
    rp_status st = RP_OK;
    json_t *out = NULL, *records = json_array(), *server = json_array(), *inputs = json_array(), *doc = NULL;
    const char *label = NULL;
    char *label_copy = NULL;
    if (!records || !server || !inputs)
        goto oom;
    int offset = 0;
    for (size_t f = 0; f < n; f++) {
        st = rp_bench_doc_load(in_paths[f], &doc);
        if (st != RP_OK)
            goto fail;
        const json_t *l = json_object_get(doc, "label");
        label = json_is_string(l) ? json_string_value(l) : "";
        if (f == 0) {
            label_copy = rp_strdup(label);
            out = json_deep_copy(doc);
            if (!label_copy || !out)
                goto oom;
        } else if (strcmp(label, label_copy) != 0) {
            st =
                RP_ERR(RP_ERR_INVALID, "%s: label '%s' differs from '%s' in %s (merge joins runs of one configuration)",
                       in_paths[f], label, label_copy, in_paths[0]);
            goto fail;
        }
        const json_t *recs = json_object_get(doc, "records");
        size_t i;
        json_t *rec;
        json_array_foreach(recs, i, rec)
        {
            if (append_shifted(records, rec, offset))
                goto oom;
        }
        // what a Rapid server counted per (task, run), renumbered like the records
        json_array_foreach(json_object_get(doc, "server"), i, rec)
        {
            if (append_shifted(server, rec, offset))
                goto oom;
        }
        const json_t *env = json_object_get(doc, "environment");
        if (json_array_append_new(inputs, json_pack("{s:s, s:i, s:O?, s:O?, s:O?}", "file", in_paths[f], "run_offset",
                                                    offset, "started", json_object_get(env, "started"), "load_start",
                                                    json_object_get(env, "load_start"), "load_end",
                                                    json_object_get(env, "load_end"))))
            goto oom;
        offset += rp_bench_run_count(recs);
        json_decref(doc);
        doc = NULL;
    }
    json_t *env = json_object_get(out, "environment");
    if (!json_is_object(env)) {
        env = json_object();
        if (!env || json_object_set_new(out, "environment", env))
            goto oom;
    }
    if (json_object_set(env, "merged_from", inputs) || json_object_set(out, "records", records) ||
        (json_array_size(server) && json_object_set(out, "server", server)) ||
        json_object_set_new(out, "summary", rp_bench_summary(records)))
        goto oom;
    st = rp_bench_doc_write(out_path, out);
    goto fail;
oom:
    st = RP_ERR(RP_ERR_NOMEM, "out of memory merging result files");
fail:
    json_decref(doc);
    json_decref(out);
    json_decref(records);
    json_decref(server);
    json_decref(inputs);
    rp_free(label_copy);
    return st;
}
