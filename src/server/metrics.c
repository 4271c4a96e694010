/*
 * metrics.c - GET /metrics (Prometheus text format 0.0.4), GET /v1/status
 * (the same engine figures as JSON) and GET /health.
 *
 * Counters kept here (one mutex; recorded once per finished request from the
 * request's last release in http.c): requests by route and status, prompt /
 * cached / completion tokens, requests whose client went away, and the
 * per-request histograms of requests that reached the engine, named and
 * bucketed as vLLM's (rapid_ for vllm:): time to first token, inter-token
 * latency, end-to-end latency, queue time, prompt and generation tokens; and
 * decode speed. Inter-token latency is vLLM's per-gap histogram with one
 * difference: a request's gaps are counted in the bucket of their mean (its
 * _sum and _count are exact: first to last token, tokens - 1), since the
 * engine keeps a request's first and last token times only. Gauges and engine counters
 * (queue depth, running requests, KV blocks, steps, tokens, cancelled
 * requests, KV pool, prefix cache in memory and on disk, speculative
 * decoding's draft tokens verified and accepted per method and draft position)
 * are read from rp_engine_get_stats at scrape time, the connection figures
 * (open, limits, closed by reason, refused) from the connection table. A
 * sampler thread reads the engine's token counters every 5 s into a ring of
 * ten minutes (/v1/status "history"), from which the web page draws decode and
 * prefill throughput of the last minutes, also those before it was opened.
 *
 * Who may read what: /health and /metrics need no API key (load balancers and
 * Prometheus scrapers), so /metrics holds numbers only and the served model
 * name: no path, address or client text (its labels are model_name, route
 * names, status codes, method names, reasons, bucket bounds). model_name is on
 * every series but the connection table's (rapid_connections_*: the server's,
 * not the model's); it is the name clients send, which --served-model-name
 * sets (by default the model file's base name, never its folder). /v1/status names the disk cache's folder,
 * so it needs the key when one is set (the route table in http.c).
 */
#include "server_int.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#define MAX_SERIES 128    // distinct (route, status) pairs kept
#define HISTORY_N 120     // throughput samples kept: ten minutes ...
#define HISTORY_EVERY_S 5 // ... of one every 5 s

#define MAX_BOUNDS 31 // bucket bounds a histogram may have (+Inf besides)
#define LABEL_MAX 320 // bytes of the model_name="..." label, escaped

// vLLM's bounds (vllm/v1/metrics/loggers.py): time to first token, inter-token latency,
// and the request latencies (end-to-end, queue); token counts are 1, 2, 5, 10, ... up to
// the context (build_1_2_5_buckets(max_model_len)).
static const double ttft_bounds[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
                                     1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
static const double itl_bounds[] = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
                                    0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
static const double latency_bounds[] = {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
                                        30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
static const double tps_bounds[] = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000};
#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

typedef struct histogram {
    uint64_t counts[MAX_BOUNDS + 1]; // per bucket (not cumulative); the last is +Inf
    uint64_t n;
    double sum;
} histogram;

typedef struct series {
    const char *route; // static (the route table's names)
    int status;
    uint64_t count;
} series;

// One reading of the engine's cumulative token counters, for the throughput history.
typedef struct sample {
    double t; // rp_time_s()
    uint64_t generated, prefilled;
} sample;

struct rp_metrics {
    pthread_mutex_t lock;
    series req[MAX_SERIES];
    int n_req;
    uint64_t prompt_tokens, cached_tokens, completion_tokens, client_gone;
    histogram ttft, itl, e2e, queue, prompt, gen, tps;
    double tok_bounds[MAX_BOUNDS]; // the token histograms' bounds: 1, 2, 5, ... up to the context
    size_t n_tok;
    char label[LABEL_MAX]; // model_name="..." (escaped), set at create
    // The throughput history (under lock): a ring of HISTORY_N samples, the oldest at
    // hist_head once full. The sampler thread adds one every HISTORY_EVERY_S until stop.
    rp_engine *engine;
    sample hist[HISTORY_N];
    int hist_n, hist_head;
    pthread_t sampler;
    bool sampling, stop;
    pthread_cond_t wake;
};

void rp_metrics_sample(rp_metrics *m)
{
    rp_engine_stats es;
    rp_engine_get_stats(m->engine, &es);
    sample x = {rp_time_s(), es.tokens_generated, es.tokens_prefilled};
    pthread_mutex_lock(&m->lock);
    if (m->hist_n < HISTORY_N) {
        m->hist[m->hist_n++] = x;
    } else {
        m->hist[m->hist_head] = x;
        m->hist_head = (m->hist_head + 1) % HISTORY_N;
    }
    pthread_mutex_unlock(&m->lock);
}

static void *sampler_main(void *arg)
{
    rp_metrics *m = arg;
    pthread_mutex_lock(&m->lock);
    while (!m->stop) {
        pthread_mutex_unlock(&m->lock);
        rp_metrics_sample(m);
        pthread_mutex_lock(&m->lock);
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += HISTORY_EVERY_S;
        while (!m->stop && pthread_cond_timedwait(&m->wake, &m->lock, &ts) == 0) {
        }
    }
    pthread_mutex_unlock(&m->lock);
    return NULL;
}

// The model_name label with the value escaped as the text format wants (\\, \", \n), cut
// before a character when it would not fit.
static void set_label(rp_metrics *m, const char *name)
{
    size_t o = (size_t)snprintf(m->label, LABEL_MAX, "model_name=\"");
    for (const char *p = name ? name : ""; *p && o + 4 < LABEL_MAX; p++) {
        if ((*p & 0xC0) != 0x80 && o + 8 >= LABEL_MAX)
            break; // room left for a whole character and the closing quote only
        if (*p == '\\' || *p == '"')
            m->label[o++] = '\\';
        if (*p == '\n') {
            m->label[o++] = '\\';
            m->label[o++] = 'n';
        } else {
            m->label[o++] = *p;
        }
    }
    m->label[o++] = '"';
    m->label[o] = 0;
}

rp_status rp_metrics_create(rp_engine *e, const char *model_name, rp_metrics **out)
{
    rp_metrics *m = rp_calloc(1, sizeof(*m));
    if (!m)
        return RP_ERR(RP_ERR_NOMEM, "out of memory");
    set_label(m, model_name);
    int n_ctx = 0;
    if (e) {
        rp_engine_stats es;
        rp_engine_get_stats(e, &es);
        n_ctx = es.n_ctx;
    }
    if (n_ctx < 1)
        n_ctx = 1;
    static const int mantissa[3] = {1, 2, 5};
    for (double x = 1; x <= n_ctx && m->n_tok < MAX_BOUNDS; x *= 10)
        for (int k = 0; k < 3 && m->n_tok < MAX_BOUNDS && x * mantissa[k] <= n_ctx; k++)
            m->tok_bounds[m->n_tok++] = x * mantissa[k];
    pthread_mutex_init(&m->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&m->wake, &ca);
    pthread_condattr_destroy(&ca);
    m->engine = e;
    if (e) {
        int rc = pthread_create(&m->sampler, NULL, sampler_main, m);
        if (rc) {
            rp_metrics_destroy(m);
            return RP_ERR(RP_ERR_NOMEM, "cannot start the metrics sampler: %s", strerror(rc));
        }
        m->sampling = true;
    }
    *out = m;
    return RP_OK;
}

void rp_metrics_destroy(rp_metrics *m)
{
    if (!m)
        return;
    if (m->sampling) {
        pthread_mutex_lock(&m->lock);
        m->stop = true;
        pthread_cond_signal(&m->wake);
        pthread_mutex_unlock(&m->lock);
        pthread_join(m->sampler, NULL);
    }
    pthread_cond_destroy(&m->wake);
    pthread_mutex_destroy(&m->lock);
    rp_free(m);
}

// The history for /v1/status: {"interval_seconds", "samples": [{"age_seconds", "tokens_generated",
// "tokens_prefilled"}]}, oldest first; a sample's age is how long before this call it was read.
static json_t *history_json(rp_metrics *m)
{
    json_t *a = json_array();
    double now = rp_time_s();
    pthread_mutex_lock(&m->lock);
    for (int i = 0; a && i < m->hist_n; i++) {
        const sample *x = &m->hist[(m->hist_head + i) % HISTORY_N];
        if (json_array_append_new(a,
                                  json_pack("{s:f, s:I, s:I}", "age_seconds", now - x->t, "tokens_generated",
                                            (json_int_t)x->generated, "tokens_prefilled", (json_int_t)x->prefilled))) {
            json_decref(a);
            a = NULL;
        }
    }
    pthread_mutex_unlock(&m->lock);
    return json_pack("{s:i, s:o?}", "interval_seconds", HISTORY_EVERY_S, "samples", a);
}

// Adds n observations of v (their sum: sum) to h.
static void observe_n(histogram *h, const double *bounds, size_t nb, double v, uint64_t n, double sum)
{
    size_t i = 0;
    while (i < nb && v > bounds[i])
        i++;
    h->counts[i] += n;
    h->n += n;
    h->sum += sum;
}

static void observe(histogram *h, const double *bounds, size_t nb, double v)
{
    observe_n(h, bounds, nb, v, 1, v);
}

void rp_metrics_record(rp_metrics *m, const rp_http_req *r)
{
    pthread_mutex_lock(&m->lock);
    int i = 0;
    while (i < m->n_req && !(m->req[i].status == r->status && strcmp(m->req[i].route, r->route_name) == 0))
        i++;
    if (i == m->n_req && m->n_req < MAX_SERIES) {
        m->req[i].route = r->route_name;
        m->req[i].status = r->status;
        m->req[i].count = 0;
        m->n_req++;
    }
    if (i < m->n_req)
        m->req[i].count++;
    const rp_req_stats *st = &r->stats;
    m->prompt_tokens += (uint64_t)(st->n_prompt > 0 ? st->n_prompt : 0);
    m->cached_tokens += (uint64_t)(st->n_cached > 0 ? st->n_cached : 0);
    m->completion_tokens += (uint64_t)(st->n_completion > 0 ? st->n_completion : 0);
    if (st->client_gone)
        m->client_gone++;
    if (st->ttft_s >= 0)
        observe(&m->ttft, ttft_bounds, N_OF(ttft_bounds), st->ttft_s);
    if (st->decode_tps > 0)
        observe(&m->tps, tps_bounds, N_OF(tps_bounds), st->decode_tps);
    if (st->engine) {
        if (st->n_gaps > 0)
            observe_n(&m->itl, itl_bounds, N_OF(itl_bounds), st->gaps_s / st->n_gaps, (uint64_t)st->n_gaps, st->gaps_s);
        if (st->e2e_s >= 0)
            observe(&m->e2e, latency_bounds, N_OF(latency_bounds), st->e2e_s);
        if (st->queue_s >= 0)
            observe(&m->queue, latency_bounds, N_OF(latency_bounds), st->queue_s);
        observe(&m->prompt, m->tok_bounds, m->n_tok, st->n_prompt > 0 ? st->n_prompt : 0);
        observe(&m->gen, m->tok_bounds, m->n_tok, st->n_completion > 0 ? st->n_completion : 0);
    }
    pthread_mutex_unlock(&m->lock);
}

// The helpers below write one metric family; lab is the model_name label (or NULL: none).
static void render_histogram(rp_buf *b, const char *lab, const char *name, const char *help, const histogram *h,
                             const double *bounds, size_t nb)
{
    const char *sep = lab ? "," : "";
    lab = lab ? lab : "";
    rp_buf_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (size_t i = 0; i < nb; i++) {
        cum += h->counts[i];
        rp_buf_printf(b, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, lab, sep, bounds[i], (unsigned long long)cum);
    }
    rp_buf_printf(b, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, lab, sep, (unsigned long long)h->n);
    rp_buf_printf(b, "%s_sum{%s} %.6f\n%s_count{%s} %llu\n", name, lab, h->sum, name, lab, (unsigned long long)h->n);
}

static void family(rp_buf *b, const char *lab, const char *type, const char *name, const char *help)
{
    rp_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s", name, help, name, type, name);
    if (lab)
        rp_buf_printf(b, "{%s}", lab);
}

static void counter(rp_buf *b, const char *lab, const char *name, const char *help, uint64_t v)
{
    family(b, lab, "counter", name, help);
    rp_buf_printf(b, " %llu\n", (unsigned long long)v);
}

static void counter_f(rp_buf *b, const char *lab, const char *name, const char *help, double v)
{
    family(b, lab, "counter", name, help);
    rp_buf_printf(b, " %.10g\n", v);
}

static void gauge(rp_buf *b, const char *lab, const char *name, const char *help, double v)
{
    family(b, lab, "gauge", name, help);
    rp_buf_printf(b, " %.10g\n", v);
}

// Speculative decoding: draft tokens verified and accepted per method, and by
// draft position (1-based; the last counts every later position too).
static void spec_metrics(rp_buf *b, const char *lab, const rp_engine_stats *es)
{
    rp_buf_puts(b, "# HELP rapid_spec_decode_enabled 1 for each draft method the engine may use.\n"
                   "# TYPE rapid_spec_decode_enabled gauge\n");
    for (int m = 0; m < RP_SPEC_N_METHODS; m++)
        rp_buf_printf(b, "rapid_spec_decode_enabled{%s,method=\"%s\"} %d\n", lab,
                      rp_spec_method_name((rp_spec_method)m), es->spec_methods[m] ? 1 : 0);
    counter(b, lab, "rapid_spec_decode_steps_total", "Request steps that verified draft tokens.", es->spec_steps);
    static const char *const what[2] = {"draft", "accepted"};
    for (int k = 0; k < 2; k++) {
        rp_buf_printf(b,
                      "# HELP rapid_spec_decode_%s_tokens_total Draft tokens %s, by method.\n"
                      "# TYPE rapid_spec_decode_%s_tokens_total counter\n",
                      what[k], k ? "accepted by verification" : "verified", what[k]);
        for (int m = 0; m < RP_SPEC_N_METHODS; m++)
            rp_buf_printf(b, "rapid_spec_decode_%s_tokens_total{%s,method=\"%s\"} %llu\n", what[k], lab,
                          rp_spec_method_name((rp_spec_method)m),
                          (unsigned long long)(k ? es->spec_accepted[m] : es->spec_drafted[m]));
    }
    for (int k = 0; k < 2; k++) {
        rp_buf_printf(b,
                      "# HELP rapid_spec_decode_%s_tokens_by_position_total Draft tokens %s, by method and draft "
                      "position (1-based; position %d counts every later one too).\n"
                      "# TYPE rapid_spec_decode_%s_tokens_by_position_total counter\n",
                      what[k], k ? "accepted" : "verified", RP_SPEC_POS, what[k]);
        for (int m = 0; m < RP_SPEC_N_METHODS; m++)
            for (int p = 0; p < RP_SPEC_POS; p++)
                rp_buf_printf(b,
                              "rapid_spec_decode_%s_tokens_by_position_total{%s,method=\"%s\",position=\"%d\"} %llu\n",
                              what[k], lab, rp_spec_method_name((rp_spec_method)m), p + 1,
                              (unsigned long long)(k ? es->spec_pos_accepted[m][p] : es->spec_pos_drafted[m][p]));
    }
}

// The connection table's figures (conn.c).
static void conn_metrics(rp_buf *b, rp_conn_table *t)
{
    rp_conn_stats cs;
    rp_conn_get_stats(t, &cs);
    gauge(b, NULL, "rapid_connections_open", "HTTP connections open now.", cs.open);
    gauge(b, NULL, "rapid_connections_limit", "Most connections served at once (--max-connections).", cs.limit);
    gauge(b, NULL, "rapid_connections_per_client_limit", "Most connections of one client address.", cs.per_client);
    rp_buf_puts(b, "# HELP rapid_connections_closed_total Connections the server closed itself, by reason: "
                   "head_timeout (no whole request head in time), idle_timeout (kept alive, no next request), "
                   "body_timeout, evicted (waiting for a request head, closed to make room for a new one).\n"
                   "# TYPE rapid_connections_closed_total counter\n");
    const char *names[] = {"head_timeout", "idle_timeout", "body_timeout", "evicted"};
    uint64_t v[] = {cs.head_timeouts, cs.idle_timeouts, cs.body_timeouts, cs.evicted};
    for (int i = 0; i < 4; i++)
        rp_buf_printf(b, "rapid_connections_closed_total{reason=\"%s\"} %llu\n", names[i], (unsigned long long)v[i]);
    counter(b, NULL, "rapid_connections_refused_total",
            "Connections answered 503 because every slot was busy with a request.", cs.refused);
    counter(b, NULL, "rapid_connections_dropped_total",
            "Connections closed unanswered at libmicrohttpd's own limit (past the 503s' margin).", cs.hard_refused);
}

void rp_metrics_render(rp_metrics *m, rp_engine *e, rp_conn_table *conns, rp_buf *b)
{
    const char *lab = m->label;
    pthread_mutex_lock(&m->lock);
    rp_buf_puts(b, "# HELP rapid_requests_total HTTP requests answered, by route and status.\n"
                   "# TYPE rapid_requests_total counter\n");
    for (int i = 0; i < m->n_req; i++)
        rp_buf_printf(b, "rapid_requests_total{%s,route=\"%s\",status=\"%d\"} %llu\n", lab, m->req[i].route,
                      m->req[i].status, (unsigned long long)m->req[i].count);
    counter(b, lab, "rapid_prompt_tokens_total", "Prompt tokens of finished requests.", m->prompt_tokens);
    counter(b, lab, "rapid_prompt_tokens_cached_total", "Prompt tokens whose KV came from the prefix cache.",
            m->cached_tokens);
    counter(b, lab, "rapid_completion_tokens_total", "Generated tokens of finished requests.", m->completion_tokens);
    counter(b, lab, "rapid_requests_client_gone_total", "Requests whose client disconnected before the reply ended.",
            m->client_gone);
    render_histogram(b, lab, "rapid_time_to_first_token_seconds", "Time from submit to the first generated token.",
                     &m->ttft, ttft_bounds, N_OF(ttft_bounds));
    render_histogram(b, lab, "rapid_inter_token_latency_seconds",
                     "Time between consecutive tokens of a request (a request's gaps in the bucket of their mean).",
                     &m->itl, itl_bounds, N_OF(itl_bounds));
    render_histogram(b, lab, "rapid_e2e_request_latency_seconds", "Time from submit to the last token, per request.",
                     &m->e2e, latency_bounds, N_OF(latency_bounds));
    render_histogram(b, lab, "rapid_request_queue_time_seconds",
                     "Time from submit to admission (prefill started), per request.", &m->queue, latency_bounds,
                     N_OF(latency_bounds));
    render_histogram(b, lab, "rapid_request_prompt_tokens", "Prompt tokens per request that reached the engine.",
                     &m->prompt, m->tok_bounds, m->n_tok);
    render_histogram(b, lab, "rapid_request_generation_tokens",
                     "Generated tokens per request that reached the engine (as in usage).", &m->gen, m->tok_bounds,
                     m->n_tok);
    render_histogram(b, lab, "rapid_decode_tokens_per_second", "Decode speed per request (tokens after the first).",
                     &m->tps, tps_bounds, N_OF(tps_bounds));
    pthread_mutex_unlock(&m->lock);
    if (conns)
        conn_metrics(b, conns);
    if (!e)
        return;
    rp_engine_stats es;
    rp_engine_get_stats(e, &es);
    gauge(b, lab, "rapid_queue_depth", "Requests waiting for the engine.", es.queued);
    gauge(b, lab, "rapid_requests_running", "Requests generating now.", es.running);
    gauge(b, lab, "rapid_kv_blocks_total", "KV cache blocks in the pool.", es.kv_blocks);
    gauge(b, lab, "rapid_kv_blocks_used", "KV cache blocks in use.", es.kv_blocks_used);
    gauge(b, lab, "rapid_kv_block_tokens", "Tokens per KV block.", es.kv_block_tokens);
    gauge(b, lab, "rapid_kv_usage_ratio", "Fraction of the KV pool in use.",
          es.kv_blocks > 0 ? (double)es.kv_blocks_used / es.kv_blocks : 0.0);
    counter(b, lab, "rapid_engine_steps_total", "Forward passes run.", es.steps);
    counter(b, lab, "rapid_engine_tokens_prefilled_total", "Prompt tokens run through the model.", es.tokens_prefilled);
    counter(b, lab, "rapid_engine_tokens_generated_total", "Tokens generated by the engine.", es.tokens_generated);
    counter_f(b, lab, "rapid_engine_step_seconds_total",
              "Seconds the engine thread spent in steps (a forward and its "
              "scheduling, drafting, sampling and publishing).",
              es.step_s);
    counter_f(b, lab, "rapid_engine_forward_seconds_total", "Of those, seconds in forward passes.", es.forward_s);
    gauge(b, lab, "rapid_engine_step_max_seconds", "The longest step so far.", es.step_max_s);
    gauge(b, lab, "rapid_engine_prefill_chunk_tokens", "Most prompt tokens run per step.", es.prefill_chunk);
    counter(b, lab, "rapid_engine_requests_done_total", "Requests retired by the engine (any reason).",
            es.requests_done);
    counter(b, lab, "rapid_engine_preemptions_total", "Requests sent back to the queue for want of KV blocks.",
            es.preemptions);
    counter(b, lab, "rapid_engine_requests_cancelled_total",
            "Requests the engine retired as cancelled (client gone, stop string, shutdown).", es.requests_cancelled);
    gauge(b, lab, "rapid_kv_bytes", "Bytes of the KV pool.", (double)es.kv_bytes);
    const rp_cache_stats *c = &es.cache;
    gauge(b, lab, "rapid_prefix_cache_enabled", "1 when the prefix cache is on.", es.prefix_cache);
    counter(b, lab, "rapid_prefix_cache_hit_tokens_total", "Tokens found in the prefix cache at admission (not run).",
            es.cache_hit_tokens);
    counter(b, lab, "rapid_prefix_cache_miss_tokens_total", "Tokens run at admission (not found in the prefix cache).",
            es.cache_miss_tokens);
    counter(b, lab, "rapid_prefix_cache_hit_blocks_total", "KV blocks taken from the prefix cache (memory or disk).",
            c->hit_blocks);
    counter(b, lab, "rapid_prefix_cache_miss_blocks_total", "Whole prompt blocks looked up and not found.",
            c->miss_blocks);
    counter(b, lab, "rapid_prefix_cache_disk_hit_blocks_total", "KV blocks read back from the disk tier.",
            c->disk_hit_blocks);
    gauge(b, lab, "rapid_prefix_cache_memory_blocks", "KV blocks in memory holding cached prefixes.",
          (double)c->mem_blocks);
    gauge(b, lab, "rapid_prefix_cache_memory_bytes", "Bytes of those blocks.", (double)c->mem_bytes);
    counter(b, lab, "rapid_prefix_cache_memory_evictions_total", "Cached blocks whose memory was reused.",
            c->mem_evictions);
    gauge(b, lab, "rapid_prefix_cache_disk_blocks", "Block files in the disk tier.", (double)c->disk_blocks);
    gauge(b, lab, "rapid_prefix_cache_disk_states", "Recurrent-state files in the disk tier.", (double)c->disk_states);
    gauge(b, lab, "rapid_prefix_cache_disk_bytes", "Bytes of the disk tier's files (blocks and states).",
          (double)c->disk_bytes);
    gauge(b, lab, "rapid_prefix_cache_disk_budget_bytes", "Most bytes the disk tier may hold (0: no disk tier).",
          (double)c->disk_budget);
    counter(b, lab, "rapid_prefix_cache_disk_writes_total", "Files written (blocks and states).", c->disk_writes);
    counter(b, lab, "rapid_prefix_cache_disk_write_drops_total",
            "Blocks not written to disk (no staging buffer free, or an I/O error).", c->disk_write_drops);
    counter(b, lab, "rapid_prefix_cache_disk_evictions_total", "Block files removed to stay within the budget.",
            c->disk_evictions);
    counter(b, lab, "rapid_prefix_cache_disk_rejects_total", "Files deleted because they failed a check.",
            c->disk_rejects);
    counter(b, lab, "rapid_prefix_cache_state_saves_total",
            "Recurrent-state snapshots made (models with state: one per prompt).", c->state_saves);
    counter(b, lab, "rapid_prefix_cache_state_drops_total", "Snapshots not made (no memory, or all being written).",
            c->state_drops);
    counter(b, lab, "rapid_prefix_cache_state_hits_total", "Snapshots restored into a request (memory or disk).",
            c->state_hits);
    counter(b, lab, "rapid_prefix_cache_state_disk_hits_total", "Of those, read from the disk tier.",
            c->state_disk_hits);
    gauge(b, lab, "rapid_prefix_cache_state_snapshots", "Snapshots in memory.", (double)c->state_snaps);
    gauge(b, lab, "rapid_prefix_cache_state_bytes", "Bytes of those snapshots.", (double)c->state_mem_bytes);
    spec_metrics(b, lab, &es);
}

// Forward passes by batch size: [{"tokens_min", "tokens_max", "steps", "tokens", "seconds", "min_seconds"}]
// for the buckets that saw a pass (the last bucket's tokens_max is null: no bound).
static json_t *forward_buckets_json(const rp_engine_stats *es)
{
    json_t *a = json_array();
    for (int i = 0; a && i < RP_ENGINE_BATCH_BUCKETS; i++) {
        if (!es->forward_steps[i])
            continue;
        int lo = i == 0 ? 1 : (1 << (i - 1)) + 1;
        json_t *hi = i == RP_ENGINE_BATCH_BUCKETS - 1 ? json_null() : json_integer(1 << i);
        if (json_array_append_new(a, json_pack("{s:i, s:o, s:I, s:I, s:f, s:f}", "tokens_min", lo, "tokens_max", hi,
                                               "steps", (json_int_t)es->forward_steps[i], "tokens",
                                               (json_int_t)es->forward_tokens[i], "seconds", es->forward_bucket_s[i],
                                               "min_seconds", es->forward_min_s[i]))) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

// The served model: {"name", "architecture", "description", "weight_type", "size_bytes",
// "bytes_per_token", "layers", "context_tokens", "backend", "device", "device_memory_bytes",
// "device_free_bytes"} (the memory figures 0 on host memory).
static json_t *model_json(const rp_server *s)
{
    rp_backend_info bi;
    rp_model_backend_info(s->model, &bi);
    const rp_model_config *c = s->cfg;
    return json_pack("{s:s, s:s, s:s, s:s, s:I, s:I, s:i, s:i, s:s, s:s, s:I, s:I}", "name", s->model_name,
                     "architecture", c->arch_name, "description", rp_model_describe(s->model), "weight_type",
                     rp_dtype_name(rp_model_weight_type(s->model)), "size_bytes",
                     (json_int_t)rp_model_size_bytes(s->model), "bytes_per_token",
                     (json_int_t)rp_model_weight_bytes(s->model), "layers", c->n_layer, "context_tokens", s->n_ctx,
                     "backend", bi.name ? bi.name : "", "device", bi.device, "device_memory_bytes",
                     (json_int_t)bi.mem_total, "device_free_bytes", (json_int_t)bi.mem_free);
}

// Speculative decoding per method: {"steps", "accepted_tokens", "tokens_per_step", "methods": [{"method",
// "enabled", "steps", "drafted", "accepted", "acceptance", "tokens_per_step"}]}. A method's steps are the
// request steps that verified its drafts (each has a first draft position: spec_pos_drafted[m][0]);
// tokens_per_step is what such a step emitted on average (1 + accepted / steps: the verified token plus
// the accepted drafts), the ceiling of the speedup a step's extra cost eats into; acceptance is accepted /
// drafted. Both null before a step.
static json_t *speculation_json(const rp_engine_stats *es)
{
    json_t *methods = json_array();
    uint64_t accepted = 0;
    for (int m = 0; methods && m < RP_SPEC_N_METHODS; m++) {
        uint64_t steps = es->spec_pos_drafted[m][0], dr = es->spec_drafted[m], ac = es->spec_accepted[m];
        accepted += ac;
        json_t *o =
            json_pack("{s:s, s:b, s:I, s:I, s:I, s:o, s:o}", "method", rp_spec_method_name((rp_spec_method)m),
                      "enabled", es->spec_methods[m], "steps", (json_int_t)steps, "drafted", (json_int_t)dr, "accepted",
                      (json_int_t)ac, "acceptance", dr ? json_real((double)ac / (double)dr) : json_null(),
                      "tokens_per_step", steps ? json_real(1.0 + (double)ac / (double)steps) : json_null());
        if (json_array_append_new(methods, o)) {
            json_decref(methods);
            return NULL;
        }
    }
    return json_pack("{s:I, s:I, s:o, s:o?}", "steps", (json_int_t)es->spec_steps, "accepted_tokens",
                     (json_int_t)accepted, "tokens_per_step",
                     es->spec_steps ? json_real(1.0 + (double)accepted / (double)es->spec_steps) : json_null(),
                     "methods", methods);
}

// The server's, the model's and the engine's figures as one JSON object (GET /v1/status).
static json_t *status_json(const rp_server *s)
{
    rp_engine *e = s->engine;
    rp_engine_stats es;
    rp_engine_get_stats(e, &es);
    const rp_cache_stats *c = &es.cache;
    const char *dir = rp_engine_cache_dir(e);
    json_t *disk = json_pack("{s:b, s:s?, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "enabled", c->disk, "dir", dir,
                             "blocks", (json_int_t)c->disk_blocks, "bytes", (json_int_t)c->disk_bytes, "budget_bytes",
                             (json_int_t)c->disk_budget, "hit_blocks", (json_int_t)c->disk_hit_blocks, "writes",
                             (json_int_t)c->disk_writes, "write_drops", (json_int_t)c->disk_write_drops, "evictions",
                             (json_int_t)c->disk_evictions, "rejects", (json_int_t)c->disk_rejects);
    json_t *mem = json_pack("{s:I, s:I, s:I, s:I}", "blocks", (json_int_t)c->mem_blocks, "bytes",
                            (json_int_t)c->mem_bytes, "evictions", (json_int_t)c->mem_evictions, "hit_blocks",
                            (json_int_t)(c->hit_blocks - c->disk_hit_blocks));
    json_t *states = json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "saves", (json_int_t)c->state_saves, "drops",
                               (json_int_t)c->state_drops, "hits", (json_int_t)c->state_hits, "disk_hits",
                               (json_int_t)c->state_disk_hits, "snapshots", (json_int_t)c->state_snaps, "bytes",
                               (json_int_t)c->state_mem_bytes, "capacity", (json_int_t)c->state_cap, "disk_files",
                               (json_int_t)c->disk_states);
    json_t *cache = json_pack("{s:b, s:I, s:I, s:I, s:I, s:o?, s:o?, s:o?}", "enabled", es.prefix_cache, "hit_tokens",
                              (json_int_t)es.cache_hit_tokens, "miss_tokens", (json_int_t)es.cache_miss_tokens,
                              "hit_blocks", (json_int_t)c->hit_blocks, "miss_blocks", (json_int_t)c->miss_blocks,
                              "memory", mem, "disk", disk, "states", states);
    json_t *kv =
        json_pack("{s:i, s:i, s:i, s:i, s:I, s:s, s:i}", "blocks", es.kv_blocks, "blocks_used", es.kv_blocks_used,
                  "blocks_free", es.kv_blocks - es.kv_blocks_used, "block_tokens", es.kv_block_tokens, "bytes",
                  (json_int_t)es.kv_bytes, "dtype", rp_dtype_name(es.kv_type), "context_tokens", es.n_ctx);
    json_t *req = json_pack("{s:i, s:i, s:I, s:I, s:I}", "running", es.running, "queued", es.queued, "done",
                            (json_int_t)es.requests_done, "cancelled", (json_int_t)es.requests_cancelled, "preemptions",
                            (json_int_t)es.preemptions);
    json_t *eng =
        json_pack("{s:I, s:I, s:I, s:i, s:i, s:f, s:f, s:f, s:o}", "steps", (json_int_t)es.steps, "tokens_prefilled",
                  (json_int_t)es.tokens_prefilled, "tokens_generated", (json_int_t)es.tokens_generated, "prefill_chunk",
                  es.prefill_chunk, "max_batch", es.max_batch, "step_seconds", es.step_s, "step_max_seconds",
                  es.step_max_s, "forward_seconds", es.forward_s, "forward_by_batch", forward_buckets_json(&es));
    json_t *srv = json_pack("{s:s, s:I, s:f}", "version", RP_VERSION, "started", (json_int_t)s->created,
                            "uptime_seconds", (double)(time(NULL) - s->created));
    return json_pack("{s:o?, s:o?, s:o?, s:o?, s:o?, s:o?, s:o?, s:o?}", "server", srv, "model", model_json(s),
                     "requests", req, "kv", kv, "prefix_cache", cache, "speculation", speculation_json(&es), "engine",
                     eng, "history", history_json(s->metrics));
}

void rp_status_handler(rp_http_req *r, rp_reply *out)
{
    rp_api_error e;
    if (!rp_reply_json_new(out, status_json(r->srv), &e))
        rp_reply_error(r, out, &e);
}

void rp_metrics_handler(rp_http_req *r, rp_reply *out)
{
    rp_buf b;
    rp_buf_init(&b);
    rp_metrics_render(r->srv->metrics, r->srv->engine, r->srv->conns, &b);
    rp_reply_text(out, 200, "text/plain; version=0.0.4; charset=utf-8", b.data ? b.data : "", b.len);
    if (b.failed)
        out->body.failed = true;
    rp_buf_deinit(&b);
}

void rp_health_handler(rp_http_req *r, rp_reply *out)
{
    (void)r;
    static const char ok[] = "{\"status\":\"ok\"}";
    rp_reply_text(out, 200, "application/json", ok, sizeof(ok) - 1);
}
