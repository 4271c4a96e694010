/*
 * scenario.c - a benchmark run: the six scenarios and the result file.
 *
 *   tasks        every task of the task file, one request at a time;
 *   concurrency  N copies of one task started together (N from the task file
 *                or --concurrency), one record per stream; per level the
 *                aggregate and per-stream decode rates and the ratio to one
 *                stream;
 *   agent        an agent session replayed: the long system prompt and tools,
 *                then turn k sends the first k fixed message groups (so each
 *                turn extends the previous prompt, as a coding agent does);
 *                with a restart command the server is restarted and the same
 *                turns replayed (phase "restart"), showing what a cache kept;
 *   prefill      prompts of ~2k/8k/16k tokens cut from standard-library
 *                source, each starting with a nonce so no cache applies;
 *   tools        fixed prompts over a set of tools; a case passes when the
 *                first call names the expected function with the expected
 *                argument values;
 *   interference N streams decode (end of generation ignored); once each has
 *                K token chunks a cold prompt of ~4k tokens is sent; each
 *                stream's largest gap between token chunks is taken before
 *                the prompt was sent, while it was prefilled (until its first
 *                token) and after, against the time of one prefill chunk
 *                (the prefill's time / its chunks, the chunk size read from
 *                a Rapid server's /v1/status).
 * Against a Rapid server the concurrency and interference scenarios also keep
 * what /v1/status counted meanwhile (forward passes by batch size, step and
 * forward time) in the result file's "server" array.
 * Nonces come from (seed, run, task), so two configurations run with the same
 * seed get byte-identical prompts. The result file is rewritten after every
 * scenario with the records so far, the summary and the environment.
 */
#include "bench_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <curl/curl.h>

typedef struct runner {
    const rp_bench_params *p;
    rp_bench_taskset ts;
    rp_bench_client *client;
    char *stdlib;
    json_t *doc, *records, *env;
    json_t *server; // what /v1/status counted per (scenario, task, run)
    double t0;
    size_t n_req, n_failed;
} runner;

static const char *const scenario_names[] = {"tasks", "concurrency", "agent", "prefill", "tools", "interference"};
#define N_SCENARIOS (sizeof(scenario_names) / sizeof(*scenario_names))

rp_status rp_bench_scenarios_parse(const char *list, unsigned *out)
{
    *out = 0;
    const char *p = list;
    while (*p) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        bool found = false;
        if (n == 3 && memcmp(p, "all", 3) == 0) {
            *out |= (1u << N_SCENARIOS) - 1;
            found = true;
        }
        for (size_t i = 0; i < N_SCENARIOS && !found; i++)
            if (strlen(scenario_names[i]) == n && memcmp(p, scenario_names[i], n) == 0) {
                *out |= 1u << i;
                found = true;
            }
        if (!found)
            return RP_ERR(RP_ERR_INVALID,
                          "unknown scenario '%.*s' (tasks, concurrency, agent, prefill, tools, interference, all)",
                          (int)n, p);
        p += n + (e != NULL);
    }
    if (!*out)
        return RP_ERR(RP_ERR_INVALID, "no scenario given");
    return RP_OK;
}

void rp_bench_params_default(rp_bench_params *p)
{
    memset(p, 0, sizeof(*p));
    p->tasks_path = "bench/tasks.json";
    p->runs = 3;
    p->scenarios = RP_BENCH_SCENARIO_TASKS;
    p->timeout_s = 600;
    p->restart_timeout_s = 300;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    p->seed = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec;
}

// 16 hex digits from (seed, run, what): the same inputs give the same nonce.
static void make_nonce(uint64_t seed, int run, const char *what, char *buf)
{
    char key[256];
    int n = snprintf(key, sizeof(key), "%llu:%d:%s", (unsigned long long)seed, run, what);
    rp_bench_hash_hex(key, (size_t)n < sizeof(key) ? (size_t)n : sizeof(key) - 1, buf);
}

/* ---- records ---------------------------------------------------------------------- */

// A number field printed with fmt, or "n/a" when it is null.
static void fmt_field(const json_t *rec, const char *key, const char *fmt, char *buf, size_t cap)
{
    const json_t *v = json_object_get(rec, key);
    if (json_is_number(v))
        snprintf(buf, cap, fmt, json_number_value(v));
    else
        snprintf(buf, cap, "n/a");
}

static void progress(const runner *r, const json_t *rec)
{
    if (r->p->quiet)
        return;
    const char *task = json_string_value(json_object_get(rec, "task"));
    const char *sc = json_string_value(json_object_get(rec, "scenario"));
    int run = (int)json_integer_value(json_object_get(rec, "run"));
    const char *err = json_string_value(json_object_get(rec, "error"));
    if (err) {
        fprintf(stderr, "rapid bench: [%s %d/%d] %s: FAILED: %s\n", sc, run + 1, r->p->runs, task, err);
        return;
    }
    char ttft[32], dec[32], e2e[32];
    fmt_field(rec, "ttft_s", "%.3f s", ttft, sizeof(ttft));
    fmt_field(rec, "decode_tok_s", "%.1f tok/s", dec, sizeof(dec));
    fmt_field(rec, "e2e_s", "%.2f s", e2e, sizeof(e2e));
    fprintf(stderr, "rapid bench: [%s %d/%d] %s: ttft %s, decode %s, %lld tokens in %d chunks, %s\n", sc, run + 1,
            r->p->runs, task, ttft, dec, (long long)json_integer_value(json_object_get(rec, "completion_tokens")),
            (int)json_integer_value(json_object_get(rec, "token_chunks")), e2e);
}

// Takes rec (NULL means OOM) into the records; shows it unless it is one of several streams.
static rp_status add_record(runner *r, json_t *rec)
{
    if (!rec || json_array_append_new(r->records, rec))
        return RP_ERR(RP_ERR_NOMEM, "out of memory keeping a record");
    r->n_req++;
    const json_t *err = json_object_get(rec, "error");
    r->n_failed += err && !json_is_null(err);
    if (!json_object_get(rec, "n_streams"))
        progress(r, rec);
    return RP_OK;
}

static void note_fingerprint(runner *r, const rp_bench_result *res)
{
    if (res->fingerprint && !json_object_get(r->env, "server_fingerprint"))
        json_object_set_new(r->env, "server_fingerprint", json_string(res->fingerprint));
}

// Sends n copies of one request spec together; records[i] get the outcomes
// (or the reason the body could not be made). *recs: n new records (rp_free the array).
static rp_status send_spec(runner *r, const json_t *spec, const char *nonce, const char *scenario, const char *task,
                           int run, size_t n, json_t ***recs)
{
    *recs = NULL;
    char *body = NULL;
    rp_status st = RP_OK;
    json_t **out = rp_calloc(n, sizeof(*out));
    const char **bodies = rp_calloc(n, sizeof(*bodies));
    rp_bench_result *res = rp_calloc(n, sizeof(*res));
    if (!out || !bodies || !res) {
        st = RP_ERR(RP_ERR_NOMEM, "out of memory sending %zu requests", n);
        goto fail;
    }
    for (size_t i = 0; i < n; i++)
        rp_bench_result_init(&res[i]);
    rp_status bst = rp_bench_body(&r->ts, spec, r->p->model, r->stdlib, nonce, &body);
    if (bst == RP_ERR_NOMEM) {
        st = bst;
        goto fail;
    }
    if (bst != RP_OK) {
        // A task that cannot be made (a missing module) is a failed record, not a failed run.
        for (size_t i = 0; i < n; i++) {
            out[i] = rp_bench_record_failed(scenario, task, run, rp_error_message());
            if (!out[i]) {
                st = RP_ERR(RP_ERR_NOMEM, "out of memory");
                goto fail;
            }
        }
        goto done;
    }
    for (size_t i = 0; i < n; i++)
        bodies[i] = body;
    if ((st = rp_bench_client_send(r->client, bodies, n, res)) != RP_OK)
        goto fail;
    for (size_t i = 0; i < n; i++) {
        note_fingerprint(r, &res[i]);
        out[i] = rp_bench_record_new(&res[i], r->t0, scenario, task, run);
        if (!out[i] || json_object_set_new(out[i], "stream", json_integer((json_int_t)i))) {
            st = RP_ERR(RP_ERR_NOMEM, "out of memory");
            goto fail;
        }
    }
done:
    *recs = out;
    out = NULL;
fail:
    if (out)
        for (size_t i = 0; i < n; i++)
            json_decref(out[i]);
    rp_free(out);
    if (res)
        for (size_t i = 0; i < n; i++)
            rp_bench_result_deinit(&res[i]);
    rp_free(res);
    rp_free(bodies);
    rp_free(body);
    return st;
}

// One request; *rec is the new record (the caller adds fields, then add_record).
static rp_status send_one(runner *r, const json_t *spec, const char *nonce, const char *scenario, const char *task,
                          int run, json_t **rec)
{
    json_t **recs = NULL;
    rp_status st = send_spec(r, spec, nonce, scenario, task, run, 1, &recs);
    *rec = recs ? recs[0] : NULL;
    rp_free(recs);
    return st;
}

/* ---- the result file ----------------------------------------------------------------- */

static rp_status write_doc(runner *r)
{
    char now[32];
    rp_bench_utc_now(now, sizeof(now));
    json_object_set_new(r->env, "finished", json_string(now));
    json_object_set_new(r->env, "load_end", rp_bench_loadavg());
    json_t *sum = rp_bench_summary(r->records);
    if (!sum || json_object_set_new(r->doc, "summary", sum))
        return RP_ERR(RP_ERR_NOMEM, "out of memory summarising");
    return rp_bench_doc_write(r->p->out_path, r->doc);
}

static rp_status make_doc(runner *r, const char *tasks_text, size_t tasks_len)
{
    const rp_bench_params *p = r->p;
    char now[32], hash[17];
    rp_bench_utc_now(now, sizeof(now));
    rp_bench_hash_hex(tasks_text, tasks_len, hash);
    json_t *sc = json_array();
    for (size_t i = 0; sc && i < N_SCENARIOS; i++)
        if (p->scenarios & (1u << i))
            json_array_append_new(sc, json_string(scenario_names[i]));
    r->records = json_array();
    r->env =
        json_pack("{s:s, s:s, s:s, s:o, s:o, s:s, s:s, s:s?, s:o, s:i, s:s, s:s, s:s?}", "rapid_version", RP_VERSION,
                  "libcurl", curl_version(), "started", now, "machine", rp_bench_machine(), "load_start",
                  rp_bench_loadavg(), "base_url", p->base_url, "model", p->model, "label", p->label, "scenarios", sc,
                  "runs", p->runs, "tasks_file", p->tasks_path, "tasks_hash", hash, "python_stdlib", r->stdlib);
    if (!r->records || !r->env)
        return RP_ERR(RP_ERR_NOMEM, "out of memory");
    char seed[24];
    snprintf(seed, sizeof(seed), "%llu", (unsigned long long)p->seed);
    int bad = json_object_set_new(r->env, "seed", json_string(seed));
    if (p->argv)
        bad |= json_object_set(r->env, "argv", (json_t *)p->argv);
    if (p->meta)
        bad |= json_object_set(r->env, "meta", (json_t *)p->meta);
    r->server = json_array();
    r->doc = json_pack("{s:s, s:s?, s:O, s:O, s:O?}", "format", RP_BENCH_FORMAT, "label", p->label, "environment",
                       r->env, "records", r->records, "server", r->server);
    if (bad || !r->doc)
        return RP_ERR(RP_ERR_NOMEM, "out of memory");
    return RP_OK;
}

/* ---- scenarios -------------------------------------------------------------------------- */

static bool wanted(const char *only, const char *id)
{
    if (!only)
        return true;
    size_t n = strlen(id);
    for (const char *p = only; *p;) {
        const char *e = strchr(p, ',');
        size_t k = e ? (size_t)(e - p) : strlen(p);
        if (k == n && memcmp(p, id, n) == 0)
            return true;
        p += k + (e != NULL);
    }
    return false;
}

static rp_status scenario_tasks(runner *r)
{
    const json_t *tasks = json_object_get(r->ts.root, "tasks");
    for (int run = 0; run < r->p->runs; run++) {
        size_t i;
        const json_t *t;
        json_array_foreach(tasks, i, t)
        {
            const char *id = json_string_value(json_object_get(t, "id"));
            if (!wanted(r->p->only, id))
                continue;
            json_t *rec = NULL;
            rp_status st = send_one(r, t, NULL, "tasks", id, run, &rec);
            if (st == RP_OK)
                st = add_record(r, rec);
            if (st != RP_OK)
                return st;
        }
    }
    return RP_OK;
}

// The server's figures now (a Rapid server's /v1/status), or NULL.
static json_t *server_status(runner *r)
{
    json_t *st = NULL;
    if (rp_bench_client_status(r->client, &st) != RP_OK)
        return NULL;
    return st;
}

// Keeps what the server counted between two readings (either may be NULL) and
// prints its forward passes by batch size. NOMEM only.
static rp_status server_note(runner *r, const char *scenario, const char *id, int run, const json_t *before,
                             const json_t *after)
{
    json_t *d = before && after ? rp_bench_engine_delta(before, after) : NULL;
    if (!d)
        return RP_OK;
    if (!r->p->quiet) {
        fprintf(stderr, "rapid bench:   server: %lld steps, %.0f%% of step time in forward passes; forward by batch:",
                (long long)json_integer_value(json_object_get(d, "steps")),
                100.0 * json_real_value(json_object_get(d, "forward_seconds")) /
                    fmax(json_real_value(json_object_get(d, "step_seconds")), 1e-12));
        size_t i;
        const json_t *b;
        json_array_foreach(json_object_get(d, "forward_by_batch"), i, b)
        {
            double steps = (double)json_integer_value(json_object_get(b, "steps"));
            long long lo = (long long)json_integer_value(json_object_get(b, "tokens_min"));
            const json_t *hi = json_object_get(b, "tokens_max");
            char range[48];
            if (!json_is_integer(hi))
                snprintf(range, sizeof(range), "%lld+", lo);
            else if (json_integer_value(hi) == lo)
                snprintf(range, sizeof(range), "%lld", lo);
            else
                snprintf(range, sizeof(range), "%lld-%lld", lo, (long long)json_integer_value(hi));
            fprintf(stderr, "%s %s tok: %.0f x %.2f ms", i ? "," : "", range, steps,
                    1e3 * json_real_value(json_object_get(b, "seconds")) / steps);
        }
        fprintf(stderr, "\n");
    }
    json_t *e = json_pack("{s:s, s:s, s:i, s:o}", "scenario", scenario, "task", id, "run", run, "engine", d);
    if (!e || json_array_append_new(r->server, e))
        return RP_ERR(RP_ERR_NOMEM, "out of memory");
    return RP_OK;
}

// One line for a concurrency level: the aggregate over its streams, the
// streams' own rate, and the aggregate against the run's one-stream level.
static void level_progress(const runner *r, const char *id, int run)
{
    if (r->p->quiet)
        return;
    const json_t *sel[1024];
    size_t n = rp_bench_select(r->records, id, run, sel, 1024);
    rp_bench_measure m, one;
    rp_bench_measure_records(sel, n < 1024 ? n : 1024, &m);
    const json_t *sel1[1];
    size_t n1 = rp_bench_select(r->records, "concurrency-n1", run, sel1, 1);
    rp_bench_measure_records(sel1, n1 == 1 ? 1 : 0, &one);
    char ratio[48] = "";
    if (isfinite(one.decode_tok_s) && one.decode_tok_s > 0 && isfinite(m.decode_tok_s))
        snprintf(ratio, sizeof(ratio), " (%.2fx one stream)", m.decode_tok_s / one.decode_tok_s);
    char agg[32] = "n/a", per[32] = "n/a"; // n/a: no decode interval (tokens sent in one piece)
    if (isfinite(m.decode_tok_s))
        snprintf(agg, sizeof(agg), "%.1f tok/s", m.decode_tok_s);
    if (isfinite(m.stream_decode_tok_s))
        snprintf(per, sizeof(per), "%.1f tok/s", m.stream_decode_tok_s);
    if (m.n_errors)
        fprintf(stderr, "rapid bench: [concurrency %d/%d] %s: %d of %zu streams FAILED (reasons in the records)\n",
                run + 1, r->p->runs, id, m.n_errors, n);
    else
        fprintf(stderr,
                "rapid bench: [concurrency %d/%d] %s: aggregate decode %s%s, per stream %s (median), "
                "median ttft %.3f s, %.2f s\n",
                run + 1, r->p->runs, id, agg, ratio, per, m.ttft_s, m.e2e_s);
}

// Takes the n records of a send (recs[i] taken, NULL on OOM), tagging each with
// its stream index and n_streams; frees the array.
static rp_status add_streams(runner *r, json_t **recs, int n, int n_streams, const char *source_task)
{
    rp_status st = RP_OK;
    for (int i = 0; i < n; i++) {
        json_t *rec = recs[i];
        recs[i] = NULL;
        if (st != RP_OK) {
            json_decref(rec);
            continue;
        }
        if (rec && (json_object_set_new(rec, "n_streams", json_integer(n_streams)) ||
                    json_object_set_new(rec, "stream", json_integer(i)) ||
                    json_object_set_new(rec, "source_task", json_string(source_task)))) {
            json_decref(rec);
            rec = NULL;
        }
        st = add_record(r, rec);
    }
    rp_free(recs);
    return st;
}

static rp_status scenario_concurrency(runner *r)
{
    const json_t *conc = json_object_get(r->ts.root, "concurrency");
    if (!conc)
        return RP_ERR(RP_ERR_INVALID, "%s has no \"concurrency\" section", r->ts.path);
    const json_t *task = rp_bench_taskset_find(&r->ts, json_string_value(json_object_get(conc, "task")));
    const json_t *levels = json_object_get(conc, "levels");
    size_t n_levels = r->p->levels ? r->p->n_levels : json_array_size(levels);
    const char *source = json_string_value(json_object_get(task, "id"));
    // The section may set the streams' length (and ignore end of generation, so
    // that every stream does the same work whatever the text).
    json_t *spec = json_deep_copy(task);
    const json_t *mt = json_object_get(conc, "max_tokens");
    if (!spec || (mt && json_object_set(spec, "max_tokens", (json_t *)mt)) ||
        (json_is_true(json_object_get(conc, "ignore_eos")) && json_object_set_new(spec, "ignore_eos", json_true()))) {
        json_decref(spec);
        return RP_ERR(RP_ERR_NOMEM, "out of memory");
    }
    rp_status st = RP_OK;
    for (int run = 0; run < r->p->runs && st == RP_OK; run++) {
        for (size_t l = 0; l < n_levels; l++) {
            int n = r->p->levels ? r->p->levels[l] : (int)json_integer_value(json_array_get(levels, l));
            char id[64];
            snprintf(id, sizeof(id), "concurrency-n%d", n);
            json_t **recs = NULL;
            json_t *before = server_status(r);
            st = send_spec(r, spec, NULL, "concurrency", id, run, (size_t)n, &recs);
            json_t *after = st == RP_OK ? server_status(r) : NULL;
            if (st == RP_OK)
                st = add_streams(r, recs, n, n, source);
            if (st == RP_OK)
                level_progress(r, id, run);
            if (st == RP_OK)
                st = server_note(r, "concurrency", id, run, before, after);
            json_decref(before);
            json_decref(after);
            if (st != RP_OK)
                break;
        }
    }
    json_decref(spec);
    return st;
}

// Runs the restart command and waits for the server; NULL when it is back, else the reason (rp_free it).
static char *restart_server(runner *r)
{
    if (!r->p->quiet)
        fprintf(stderr, "rapid bench: restarting the server: %s\n", r->p->restart_cmd);
    fflush(NULL);
    int rc = system(r->p->restart_cmd);
    if (rc == -1 || !WIFEXITED(rc) || WEXITSTATUS(rc) != 0)
        return rp_bench_fmt("the restart command failed (%s %d): %s", rc == -1 || !WIFEXITED(rc) ? "status" : "exit",
                            rc == -1        ? -1
                            : WIFEXITED(rc) ? WEXITSTATUS(rc)
                                            : rc,
                            r->p->restart_cmd);
    if (rp_bench_client_wait_ready(r->client, r->p->restart_timeout_s) != RP_OK)
        return rp_bench_fmt("the server did not come back after the restart: %s", rp_error_message());
    return NULL;
}

static rp_status scenario_agent(runner *r)
{
    const json_t *agent = json_object_get(r->ts.root, "agent");
    if (!agent)
        return RP_ERR(RP_ERR_INVALID, "%s has no \"agent\" section", r->ts.path);
    const json_t *turns = json_object_get(agent, "turns");
    size_t n_turns = json_array_size(turns);
    rp_status st = RP_OK;
    for (int run = 0; run < r->p->runs; run++) {
        char nonce[17];
        make_nonce(r->p->seed, run, "agent", nonce);
        for (int phase = 0; phase < (r->p->restart_cmd ? 2 : 1); phase++) {
            char *why = phase ? restart_server(r) : NULL;
            if (phase && !why && !r->p->quiet)
                fprintf(stderr, "rapid bench: the server is back; replaying the %zu turns\n", n_turns);
            json_t *msgs = json_array();
            json_t *spec = json_pack("{s:O, s:O?, s:O, s:O}", "system", json_object_get(agent, "system"), "tools",
                                     json_object_get(agent, "tools"), "max_tokens",
                                     json_object_get(agent, "max_tokens"), "messages", msgs);
            if (!msgs || !spec)
                st = RP_ERR(RP_ERR_NOMEM, "out of memory");
            for (size_t k = 0; st == RP_OK && k < n_turns; k++) {
                char id[64];
                snprintf(id, sizeof(id), "agent-%st%02zu", phase ? "restart-" : "", k + 1);
                json_t *rec = NULL;
                if (json_array_extend(msgs, json_array_get(turns, k))) {
                    st = RP_ERR(RP_ERR_NOMEM, "out of memory");
                    break;
                }
                if (why)
                    rec = rp_bench_record_failed("agent", id, run, why);
                else
                    st = send_one(r, spec, nonce, "agent", id, run, &rec);
                if (st == RP_OK && rec &&
                    (json_object_set_new(rec, "phase", json_string(phase ? "restart" : "first")) ||
                     json_object_set_new(rec, "turn", json_integer((json_int_t)k + 1)))) {
                    json_decref(rec);
                    rec = NULL;
                }
                if (st == RP_OK)
                    st = add_record(r, rec);
            }
            rp_free(why);
            json_decref(msgs);
            json_decref(spec);
            if (st != RP_OK)
                return st;
        }
    }
    return RP_OK;
}

// The prefill filler: the sources one after another (repeated if needed) until
// `chars` bytes, cut at a line end. *out is a heap string; a missing module is
// an error with the reason in the message.
static rp_status prefill_text(runner *r, const json_t *sources, size_t chars, char **out)
{
    *out = NULL;
    rp_bench_buf b = {0};
    size_t n = json_array_size(sources);
    for (size_t i = 0; b.len < chars && !b.oom; i++) {
        const char *mod = json_string_value(json_array_get(sources, i % n));
        char *src = NULL;
        size_t len;
        rp_status st = rp_bench_stdlib_source(r->stdlib, mod, &src, &len);
        if (st != RP_OK) {
            rp_bench_buf_deinit(&b);
            return st;
        }
        rp_bench_buf_printf(&b, "# ---- %s ----\n", mod);
        rp_bench_buf_add(&b, src, len);
        rp_bench_buf_adds(&b, "\n");
        rp_free(src);
    }
    if (b.oom)
        return RP_ERR(RP_ERR_NOMEM, "out of memory");
    size_t cut = b.len < chars ? b.len : chars;
    while (cut > 0 && b.p[cut - 1] != '\n')
        cut--;
    b.len = cut ? cut : (b.len < chars ? b.len : chars);
    b.p[b.len] = 0;
    *out = rp_bench_buf_take(&b);
    return *out ? RP_OK : RP_ERR(RP_ERR_NOMEM, "out of memory");
}

static rp_status scenario_prefill(runner *r)
{
    const json_t *pre = json_object_get(r->ts.root, "prefill");
    if (!pre)
        return RP_ERR(RP_ERR_INVALID, "%s has no \"prefill\" section", r->ts.path);
    const json_t *sizes = json_object_get(pre, "sizes");
    double cpt = json_number_value(json_object_get(pre, "chars_per_token"));
    const char *question = json_string_value(json_object_get(pre, "question"));
    for (int run = 0; run < r->p->runs; run++) {
        size_t i;
        const json_t *jsz;
        json_array_foreach(sizes, i, jsz)
        {
            json_int_t size = json_integer_value(jsz);
            char id[64], nonce[17];
            if (size % 1024 == 0)
                snprintf(id, sizeof(id), "prefill-%lldk", (long long)(size / 1024));
            else
                snprintf(id, sizeof(id), "prefill-%lld", (long long)size);
            make_nonce(r->p->seed, run, id, nonce);
            char *filler = NULL, *prompt = NULL;
            json_t *rec = NULL, *spec = NULL;
            rp_status st = prefill_text(r, json_object_get(pre, "sources"), (size_t)((double)size * cpt), &filler);
            if (st == RP_ERR_NOMEM)
                return st;
            if (st != RP_OK) {
                rec = rp_bench_record_failed("prefill", id, run, rp_error_message());
            } else {
                // The nonce comes first so no two prompts share a cached prefix.
                prompt = rp_bench_fmt("Request %s.\n\n%s\n%s", nonce, filler, question);
                spec = prompt ? json_pack("{s:s, s:O, s:b}", "prompt", prompt, "max_tokens",
                                          json_object_get(pre, "max_tokens"), "literal", 1)
                              : NULL;
                if (!spec)
                    st = RP_ERR(RP_ERR_NOMEM, "out of memory");
                else
                    st = send_one(r, spec, nonce, "prefill", id, run, &rec);
            }
            if (st == RP_OK && rec && json_object_set_new(rec, "target_tokens", json_integer(size))) {
                json_decref(rec);
                rec = NULL;
            }
            if (st == RP_OK)
                st = add_record(r, rec);
            rp_free(filler);
            rp_free(prompt);
            json_decref(spec);
            if (st != RP_OK)
                return st;
        }
    }
    return RP_OK;
}

static rp_status scenario_tools(runner *r)
{
    const json_t *sc = json_object_get(r->ts.root, "tools_scenario");
    if (!sc)
        return RP_ERR(RP_ERR_INVALID, "%s has no \"tools_scenario\" section", r->ts.path);
    const json_t *cases = json_object_get(sc, "cases");
    for (int run = 0; run < r->p->runs; run++) {
        size_t i;
        const json_t *c;
        json_array_foreach(cases, i, c)
        {
            char id[64];
            snprintf(id, sizeof(id), "tools-%02zu", i + 1);
            json_t *spec = json_pack("{s:O, s:O, s:O, s:O?}", "prompt", json_object_get(c, "prompt"), "tools",
                                     json_object_get(sc, "tools"), "max_tokens", json_object_get(sc, "max_tokens"),
                                     "system", json_object_get(sc, "system"));
            if (!spec)
                return RP_ERR(RP_ERR_NOMEM, "out of memory");
            json_t *rec = NULL;
            rp_status st = send_one(r, spec, NULL, "tools", id, run, &rec);
            json_decref(spec);
            if (st == RP_OK && rec) {
                const json_t *err = json_object_get(rec, "error");
                const char *name = json_string_value(json_object_get(c, "name"));
                const json_t *args = json_object_get(c, "arguments");
                bool pass = json_is_null(err) && rp_bench_tool_pass(json_object_get(rec, "tool_calls"), name, args);
                if (json_object_set_new(rec, "expected", json_pack("{s:s, s:O}", "name", name, "arguments", args)) ||
                    json_object_set_new(rec, "pass", json_boolean(pass))) {
                    json_decref(rec);
                    rec = NULL;
                }
            }
            if (st == RP_OK)
                st = add_record(r, rec);
            if (st != RP_OK)
                return st;
        }
    }
    return RP_OK;
}

/* ---- interference ------------------------------------------------------------------------ */

#define INTER_STREAMS 4
#define INTER_STREAM_TOKENS 2048
#define INTER_AFTER_CHUNKS 32
#define INTER_PROMPT_TOKENS 4096

// An integer field of the (optional) section, or def.
static int sec_int(const json_t *sec, const char *key, int def)
{
    const json_t *v = json_object_get(sec, key);
    return json_is_integer(v) ? (int)json_integer_value(v) : def;
}

// Adds the pauses of one stream (gap_before_s, gap_during_s, gap_after_s) to its record.
static int set_gaps(json_t *rec, const rp_bench_result *s, double a, double b)
{
    double t[3][2] = {{-INFINITY, a}, {a, b}, {b, INFINITY}};
    static const char *const keys[] = {"gap_before_s", "gap_during_s", "gap_after_s"};
    int bad = 0;
    for (int w = 0; w < 3; w++) {
        double g =
            isfinite(a) && isfinite(b) ? rp_bench_max_gap(s->chunk_t, (size_t)s->n_chunk_t, t[w][0], t[w][1]) : NAN;
        bad |= json_object_set_new(rec, keys[w], rp_bench_json_real(g));
    }
    return bad;
}

// One run: the streams and the long prompt sent once the streams have decoded a while.
static rp_status interference_run(runner *r, const json_t *sec, const json_t *stream_spec, const char *long_body,
                                  int prefill_chunk, int run)
{
    int n = sec_int(sec, "streams", INTER_STREAMS);
    int after = sec_int(sec, "after_chunks", INTER_AFTER_CHUNKS);
    rp_status st = RP_OK;
    char *body = NULL;
    const char **bodies = rp_calloc((size_t)n + 1, sizeof(*bodies));
    int *trig = rp_calloc((size_t)n + 1, sizeof(*trig));
    rp_bench_result *res = rp_calloc((size_t)n + 1, sizeof(*res));
    json_t **recs = rp_calloc((size_t)n + 1, sizeof(*recs));
    if (!bodies || !trig || !res || !recs) {
        st = RP_ERR(RP_ERR_NOMEM, "out of memory");
        goto fail;
    }
    for (int i = 0; i <= n; i++)
        rp_bench_result_init(&res[i]);
    if ((st = rp_bench_body(&r->ts, stream_spec, r->p->model, r->stdlib, NULL, &body)) != RP_OK)
        goto fail;
    for (int i = 0; i < n; i++) {
        bodies[i] = body;
        trig[i] = -1;
    }
    bodies[n] = long_body;
    trig[n] = after;
    json_t *before = server_status(r);
    st = rp_bench_client_send_ex(r->client, bodies, (size_t)n + 1, trig, res);
    json_t *after_st = st == RP_OK ? server_status(r) : NULL;
    if (st != RP_OK) {
        json_decref(before);
        goto fail;
    }
    // The prefill: from the long prompt's send to its first token.
    const rp_bench_result *lg = &res[n];
    double a = lg->t_sent, b = lg->t_first;
    int chunks = -1;
    double chunk_s = NAN;
    if (prefill_chunk > 0 && lg->prompt_tokens > 0 && isfinite(b)) {
        int64_t run_tokens = lg->prompt_tokens - (lg->cached_tokens > 0 ? lg->cached_tokens : 0);
        chunks = (int)((run_tokens + prefill_chunk - 1) / prefill_chunk);
        chunk_s = chunks > 0 ? (b - a) / chunks : NAN;
    }
    for (int i = 0; i <= n; i++) {
        note_fingerprint(r, &res[i]);
        recs[i] = rp_bench_record_new(&res[i], r->t0, "interference",
                                      i < n ? "interference-streams" : "interference-prompt", run);
        int bad = !recs[i];
        if (!bad && i < n)
            bad = json_object_set_new(recs[i], "n_streams", json_integer(n)) ||
                  json_object_set_new(recs[i], "stream", json_integer(i)) || set_gaps(recs[i], &res[i], a, b);
        else if (!bad)
            bad = json_object_set_new(recs[i], "sent_after_chunks", json_integer(after)) ||
                  json_object_set_new(recs[i], "prefill_chunk",
                                      prefill_chunk > 0 ? json_integer(prefill_chunk) : json_null()) ||
                  json_object_set_new(recs[i], "chunks", chunks >= 0 ? json_integer(chunks) : json_null()) ||
                  json_object_set_new(recs[i], "chunk_s", rp_bench_json_real(chunk_s));
        if (bad) {
            st = RP_ERR(RP_ERR_NOMEM, "out of memory");
            json_decref(before);
            json_decref(after_st);
            goto fail;
        }
    }
    double gap[3] = {NAN, NAN, NAN};
    for (int i = 0; i <= n && st == RP_OK; i++) {
        for (int w = 0; i < n && w < 3; w++) {
            static const char *const keys[] = {"gap_before_s", "gap_during_s", "gap_after_s"};
            const json_t *v = json_object_get(recs[i], keys[w]);
            if (json_is_number(v) && (!isfinite(gap[w]) || json_number_value(v) > gap[w]))
                gap[w] = json_number_value(v);
        }
        st = add_record(r, recs[i]);
        recs[i] = NULL;
    }
    if (st == RP_OK && !r->p->quiet) {
        if (lg->error)
            fprintf(stderr, "rapid bench: [interference %d/%d] the long prompt FAILED: %s\n", run + 1, r->p->runs,
                    lg->error);
        else
            fprintf(stderr,
                    "rapid bench: [interference %d/%d] %d streams; largest pause before %.1f ms, during the prefill "
                    "%.1f ms, after %.1f ms; prefill of %lld tokens in %.3f s = %d chunks of %d, %.1f ms each "
                    "(pause during / chunk %.2f)\n",
                    run + 1, r->p->runs, n, 1e3 * gap[0], 1e3 * gap[1], 1e3 * gap[2], (long long)lg->prompt_tokens,
                    b - a, chunks, prefill_chunk, 1e3 * chunk_s, gap[1] / chunk_s);
    }
    if (st == RP_OK)
        st = server_note(r, "interference", "interference", run, before, after_st);
    json_decref(before);
    json_decref(after_st);
fail:
    if (recs)
        for (int i = 0; i <= n; i++)
            json_decref(recs[i]);
    rp_free(recs);
    if (res)
        for (int i = 0; i <= n; i++)
            rp_bench_result_deinit(&res[i]);
    rp_free(res);
    rp_free(trig);
    rp_free(bodies);
    rp_free(body);
    return st;
}

static rp_status scenario_interference(runner *r)
{
    const json_t *sec = json_object_get(r->ts.root, "interference"); // optional: defaults
    const json_t *pre = json_object_get(r->ts.root, "prefill");
    const json_t *conc = json_object_get(r->ts.root, "concurrency");
    const char *tid = json_string_value(json_object_get(sec, "task"));
    if (!tid)
        tid = json_string_value(json_object_get(conc, "task"));
    const json_t *task = tid ? rp_bench_taskset_find(&r->ts, tid) : NULL;
    if (!pre || !task)
        return RP_ERR(RP_ERR_INVALID,
                      "%s: the interference scenario needs a \"prefill\" section and a stream task "
                      "(\"interference\": {\"task\"} or the concurrency task)",
                      r->ts.path);
    int prefill_chunk = -1;
    json_t *st0 = server_status(r);
    const json_t *pc = json_object_get(json_object_get(st0, "engine"), "prefill_chunk");
    if (json_is_integer(pc))
        prefill_chunk = (int)json_integer_value(pc);
    json_decref(st0);
    if (prefill_chunk < 0 && !r->p->quiet)
        fprintf(stderr, "rapid bench: the server has no /v1/status with its prefill chunk: pauses are measured, "
                        "the chunk's time is not\n");
    int tokens = sec_int(sec, "prompt_tokens", INTER_PROMPT_TOKENS);
    const json_t *mt = json_object_get(sec, "max_tokens");
    if (!mt)
        mt = json_object_get(pre, "max_tokens");
    json_t *stream_spec = json_deep_copy(task);
    if (!stream_spec ||
        json_object_set_new(stream_spec, "max_tokens",
                            json_integer(sec_int(sec, "stream_max_tokens", INTER_STREAM_TOKENS))) ||
        json_object_set_new(stream_spec, "ignore_eos", json_true())) {
        json_decref(stream_spec);
        return RP_ERR(RP_ERR_NOMEM, "out of memory");
    }
    double cpt = json_number_value(json_object_get(pre, "chars_per_token"));
    rp_status st = RP_OK;
    for (int run = 0; run < r->p->runs && st == RP_OK; run++) {
        char nonce[17];
        make_nonce(r->p->seed, run, "interference", nonce);
        char *filler = NULL, *prompt = NULL, *body = NULL;
        json_t *spec = NULL;
        st = prefill_text(r, json_object_get(pre, "sources"), (size_t)((double)tokens * cpt), &filler);
        if (st == RP_OK) {
            // The nonce comes first so nothing of it is cached.
            prompt = rp_bench_fmt("Request %s.\n\n%s\n%s", nonce, filler,
                                  json_string_value(json_object_get(pre, "question")));
            spec = prompt ? json_pack("{s:s, s:O, s:b}", "prompt", prompt, "max_tokens", mt, "literal", 1) : NULL;
            st = spec ? rp_bench_body(&r->ts, spec, r->p->model, r->stdlib, nonce, &body)
                      : RP_ERR(RP_ERR_NOMEM, "out of memory");
        }
        if (st == RP_OK)
            st = interference_run(r, sec, stream_spec, body, prefill_chunk, run);
        else if (st != RP_ERR_NOMEM) // no source text: a failed record, the run goes on
            st = add_record(r, rp_bench_record_failed("interference", "interference-prompt", run, rp_error_message()));
        rp_free(filler);
        rp_free(prompt);
        rp_free(body);
        json_decref(spec);
    }
    json_decref(stream_spec);
    return st;
}

static void warm_up(runner *r)
{
    json_t *spec = json_pack("{s:s, s:i}", "prompt", "Say hello in five words.", "max_tokens", 16);
    for (int i = 0; spec && i < r->p->warmup; i++) {
        json_t *rec = NULL;
        send_one(r, spec, NULL, "warmup", "warmup", 0, &rec);
        const char *err = json_string_value(json_object_get(rec, "error"));
        if (err && !r->p->quiet)
            fprintf(stderr, "rapid bench: warm-up request %d failed: %s\n", i + 1, err);
        json_decref(rec);
    }
    json_decref(spec);
}

rp_status rp_bench_run(const rp_bench_params *p, size_t *n_requests, size_t *n_failed)
{
    if (n_requests)
        *n_requests = 0;
    if (n_failed)
        *n_failed = 0;
    if (!p->base_url || !p->model || !p->out_path || !p->tasks_path)
        return RP_ERR(RP_ERR_INVALID, "a run needs a base URL, a model, a task file and an output file");
    if (p->runs < 1 || !p->scenarios)
        return RP_ERR(RP_ERR_INVALID, "a run needs at least one run and one scenario");
    runner r = {.p = p};
    char *tasks_text = NULL;
    size_t tasks_len = 0;
    rp_status st = rp_bench_taskset_load(p->tasks_path, &r.ts);
    if (st != RP_OK)
        return st;
    if (p->only) {
        for (const char *q = p->only; *q;) {
            const char *e = strchr(q, ',');
            size_t k = e ? (size_t)(e - q) : strlen(q);
            char id[80];
            snprintf(id, sizeof(id), "%.*s", (int)(k < 79 ? k : 79), q);
            if (!rp_bench_taskset_find(&r.ts, id)) {
                st = RP_ERR(RP_ERR_INVALID, "--only: no task '%s' in %s", id, p->tasks_path);
                goto fail;
            }
            q += k + (e != NULL);
        }
    }
    if ((st = rp_file_read(p->tasks_path, &tasks_text, &tasks_len)) != RP_OK)
        goto fail;
    r.stdlib = p->stdlib_dir ? rp_strdup(p->stdlib_dir) : rp_bench_stdlib_find();
    rp_bench_client_params cp = {.base_url = p->base_url,
                                 .api_key = p->api_key,
                                 .timeout_s = p->timeout_s,
                                 .clock = p->clock,
                                 .clock_ctx = p->clock_ctx};
    if ((st = rp_bench_client_create(&cp, &r.client)) != RP_OK || (st = make_doc(&r, tasks_text, tasks_len)) != RP_OK)
        goto fail;
    if (!r.stdlib && !p->quiet)
        fprintf(stderr, "rapid bench: no Python standard library found: tasks with code in the prompt will fail "
                        "(install python3 or pass --stdlib DIR)\n");
    // Check the output path can be written before spending time measuring.
    if ((st = write_doc(&r)) != RP_OK)
        goto fail;
    warm_up(&r);
    r.t0 = (p->clock ? p->clock : rp_bench_clock_monotonic)(p->clock_ctx);
    static rp_status (*const run_fn[])(runner *) = {scenario_tasks,   scenario_concurrency, scenario_agent,
                                                    scenario_prefill, scenario_tools,       scenario_interference};
    for (size_t i = 0; i < N_SCENARIOS; i++) {
        if (!(p->scenarios & (1u << i)))
            continue;
        st = run_fn[i](&r);
        rp_status wst = write_doc(&r);
        if (st == RP_OK)
            st = wst;
        if (st != RP_OK)
            goto fail;
    }
fail:
    if (n_requests)
        *n_requests = r.n_req;
    if (n_failed)
        *n_failed = r.n_failed;
    rp_bench_client_destroy(r.client);
    rp_bench_taskset_deinit(&r.ts);
    json_decref(r.doc);
    json_decref(r.server);
    json_decref(r.records);
    json_decref(r.env);
    rp_free(r.stdlib);
    rp_free(tasks_text);
    return st;
}
