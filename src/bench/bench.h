/*
 * bench.h - `rapid bench`: measures any OpenAI-compatible server task by task,
 * keeps every request's raw record, and compares two result files.
 *
 * A run sends streaming /v1/chat/completions requests (temperature 0, a fixed
 * token limit per task, thinking off unless the task asks for it,
 * stream_options.include_usage so the server's own token counts are used)
 * through libcurl's multi interface, so N streams can start together. For each
 * request it records, on one clock:
 *   - t_sent: the request handed to the transport,
 *   - t_first / t_last: the first and last streamed chunk carrying a token of
 *     any kind (content, reasoning or a tool-call delta),
 * and from those: time to first token = t_first - t_sent, end to end =
 * t_last - t_sent, decode tok/s = (completion tokens - 1) / (t_last - t_first)
 * with the completion tokens taken from the server's usage. A request that
 * fails (refused connection, HTTP error, a non-SSE body, a malformed chunk,
 * no usage, a cut stream) gets a record with the reason and the run goes on.
 *
 * The result file (JSON, "format": "rapid-bench/1") holds the raw records, a
 * summary (medians over runs per task) and the environment (versions, machine,
 * command line, label). `rp_bench_compare` reads two of them and writes the
 * per-task speedups as text, Markdown and an SVG bar chart.
 *
 * Module layout: stream.c (SSE parsing and chunk interpretation), client.c
 * (curl multi transport), metrics.c (arithmetic and summaries), record.c
 * (records and result files), tasks.c (the task file), scenario.c (the six
 * scenarios), env.c (machine facts), compare.c and svg.c (comparison output).
 *
 * Threads: everything here runs on the calling thread; a client and a run
 * belong to one thread at a time.
 */
#ifndef RP_BENCH_H
#define RP_BENCH_H

#include "../base/base.h"

#include <stdio.h>

#include <jansson.h>

// A clock in seconds on any fixed origin, never going back. Tests inject a
// scripted one so no measured figure depends on real timing.
typedef double (*rp_bench_clock_fn)(void *ctx);

// CLOCK_MONOTONIC in seconds (ctx unused).
double rp_bench_clock_monotonic(void *ctx);

/* ---- one request's outcome ------------------------------------------------ */

// What one streamed request produced. Plain data owned by whoever called
// rp_bench_result_init; rp_bench_result_deinit frees the strings and JSON.
typedef struct rp_bench_result {
    double t_sent;             // clock reading when the request was handed to curl
    double t_first, t_last;    // first/last chunk with a token; NAN when none came
    int64_t prompt_tokens;     // from the server's usage; -1 when not reported
    int64_t cached_tokens;     // usage.prompt_tokens_details.cached_tokens; -1 when absent
    int64_t completion_tokens; // usage.completion_tokens; -1 when not reported
    int token_chunks;          // chunks that carried a token
    long http_status;          // 0 when no HTTP response came
    char *text;                // content deltas joined (NUL-terminated, may hold NULs: text_len)
    size_t text_len;
    char *reasoning; // reasoning deltas joined (reasoning_content or reasoning)
    size_t reasoning_len;
    json_t *tool_calls;         // array of {"id", "name", "arguments"} assembled from the deltas
    char *finish_reason;        // NULL when the server sent none
    char *fingerprint;          // the first system_fingerprint seen, or NULL
    char *error;                // NULL when the request succeeded, else the reason
    double *chunk_t;            // (n_chunk_t) clock reading of every token chunk, in order; NULL when none
    int n_chunk_t, chunk_t_cap; // (token_chunks may be larger when memory ran out: times are then missing)
} rp_bench_result;

void rp_bench_result_init(rp_bench_result *r);
void rp_bench_result_deinit(rp_bench_result *r);

// Derived figures of one request; NAN where undefined: no token, no usage,
// fewer than two completion tokens, fewer than three token chunks, or token
// chunks that came in a burst (less than RP_BENCH_MIN_CHUNK_GAP_S apart on
// average). The last two mean the server held the text back (a tool-call
// parser does), so the chunks' times say nothing about decoding.
typedef struct rp_bench_metrics {
    double ttft_s;       // t_first - t_sent
    double e2e_s;        // t_last - t_sent
    double decode_tok_s; // (completion_tokens - 1) / (t_last - t_first)
} rp_bench_metrics;

#define RP_BENCH_MIN_CHUNK_GAP_S 1e-4

void rp_bench_metrics_of(const rp_bench_result *r, rp_bench_metrics *m);

/* ---- transport -------------------------------------------------------------- */

typedef struct rp_bench_client rp_bench_client;

typedef struct rp_bench_client_params {
    // The server: "http://HOST:PORT" or the OpenAI SDK's form ".../v1";
    // requests go to <base>/v1/chat/completions (no second /v1 when it ends in /v1).
    const char *base_url;
    const char *api_key;     // sent as "Authorization: Bearer KEY"; NULL for none
    double timeout_s;        // per request, whole transfer; <= 0: no limit
    rp_bench_clock_fn clock; // NULL: rp_bench_clock_monotonic
    void *clock_ctx;
} rp_bench_client_params;

// Makes a client (strings are copied). Errors: RP_ERR_INVALID (base URL not
// http:// or https://), RP_ERR_NOMEM, RP_ERR_IO (curl could not start).
rp_status rp_bench_client_create(const rp_bench_client_params *p, rp_bench_client **out);
void rp_bench_client_destroy(rp_bench_client *c);

// Sends n request bodies (JSON text of a streaming chat completion) at once and
// waits for all of them; out[i] (initialised by the caller, reset here) gets
// the outcome of bodies[i], errors included. The return value is an error only
// when the transport itself could not run (RP_ERR_NOMEM, RP_ERR_IO); a failed
// request is a record, not a failure of the call.
rp_status rp_bench_client_send(rp_bench_client *c, const char *const *bodies, size_t n, rp_bench_result *out);

// rp_bench_client_send with staggered starts: after_chunks (NULL: all at once)
// holds per body -1 (sent at once) or k >= 0: sent once every body sent at once
// has received k token chunks or has ended. With no body sent at once, every
// body is sent at once. Same errors.
rp_status rp_bench_client_send_ex(rp_bench_client *c, const char *const *bodies, size_t n, const int *after_chunks,
                                  rp_bench_result *out);

// GET <base>/v1/status (a Rapid server's engine figures) parsed into *out (a
// JSON object; json_decref it). Real time, at most 5 s. Errors: RP_ERR_IO (no
// answer, a status other than 200: other servers have no such route),
// RP_ERR_INVALID (not a JSON object), RP_ERR_NOMEM.
rp_status rp_bench_client_status(rp_bench_client *c, json_t **out);

// Polls GET <base>/v1/models until it answers 200 or timeout_s passes (real time).
// Errors: RP_ERR_IO (not ready in time; the last reason in the message).
rp_status rp_bench_client_wait_ready(rp_bench_client *c, double timeout_s);

/* ---- a benchmark run -------------------------------------------------------- */

enum {
    RP_BENCH_SCENARIO_TASKS = 1 << 0,        // the task set, one request at a time
    RP_BENCH_SCENARIO_CONCURRENCY = 1 << 1,  // N streams of one task started together
    RP_BENCH_SCENARIO_AGENT = 1 << 2,        // agent-session replay, TTFT per turn
    RP_BENCH_SCENARIO_PREFILL = 1 << 3,      // cold prompts of ~2k/8k/16k tokens
    RP_BENCH_SCENARIO_TOOLS = 1 << 4,        // tool-call accuracy, 30 prompts over 8 tools
    RP_BENCH_SCENARIO_INTERFERENCE = 1 << 5, // streams decoding while a long prompt is prefilled: their pauses
};

// Parses "tasks,agent" into RP_BENCH_SCENARIO_* bits. Errors: RP_ERR_INVALID
// naming the unknown scenario.
rp_status rp_bench_scenarios_parse(const char *list, unsigned *out);

typedef struct rp_bench_params {
    const char *base_url;    // required (see rp_bench_client_params)
    const char *model;       // required: the request's "model" field
    const char *api_key;     // optional
    const char *tasks_path;  // the task file (bench/tasks.json)
    const char *stdlib_dir;  // Python standard library folder; NULL: asked of python3
    const char *out_path;    // required: the result file
    const char *label;       // optional name of the configuration measured
    const char *restart_cmd; // agent: shell command that restarts the server; NULL: no replay
    const char *only;        // comma-separated task ids for the tasks scenario; NULL: all
    unsigned scenarios;      // RP_BENCH_SCENARIO_* bits, at least one
    int runs;                // >= 1
    int warmup;              // unrecorded requests sent first
    const int *levels;       // concurrency levels; NULL: the task file's
    size_t n_levels;
    uint64_t seed;            // makes the nonces of cold prompts (same seed, same prompts)
    double timeout_s;         // per request
    double restart_timeout_s; // how long to wait for the restarted server
    const json_t *meta;       // object of extra facts for the environment (borrowed), or NULL
    const json_t *argv;       // the command line as an array of strings (borrowed), or NULL
    bool quiet;               // no progress lines on stderr
    rp_bench_clock_fn clock;  // NULL: monotonic
    void *clock_ctx;
} rp_bench_params;

// Fills defaults: tasks_path "bench/tasks.json", runs 3, scenario tasks,
// timeout 600 s, restart timeout 300 s, seed from the time of day.
void rp_bench_params_default(rp_bench_params *p);

// Runs the chosen scenarios `runs` times and writes the result file (rewritten
// after each scenario, so a cut run keeps what it measured). Progress goes to
// stderr unless quiet. *n_requests and *n_failed (either may be NULL) count the
// recorded requests. Errors (nothing or a partial file written): RP_ERR_INVALID
// (bad parameters or task file, named), RP_ERR_IO (the task or result file),
// RP_ERR_NOMEM. Failed requests are not errors of the run.
rp_status rp_bench_run(const rp_bench_params *p, size_t *n_requests, size_t *n_failed);

/* ---- result files ---------------------------------------------------------- */

// Compares result files A and B (both read whole and validated): per task the
// speedup of B over A in decode tok/s (B/A), end to end and time to first token
// (A/B, so > 1 means B is faster), median and range over the runs paired by
// index, and how many outputs were byte-identical. Writes a text table to
// `out` (may be NULL), and a Markdown table to md_path and an SVG bar chart to
// svg_path when those are not NULL. Errors: RP_ERR_IO, RP_ERR_INVALID (a file
// that is not a valid result file, named with the reason; no task in common).
rp_status rp_bench_compare(const char *a_path, const char *b_path, FILE *out, const char *md_path,
                           const char *svg_path);

// Joins result files of the same configuration (one per run, as bench/run.sh
// makes them) into one: records and the Rapid server's per-run counts ("server")
// concatenated with their runs renumbered in input order, the summary
// recomputed, the first file's environment kept and
// every input's start time and load listed. Errors: RP_ERR_IO, RP_ERR_INVALID
// (an invalid file, or labels that differ).
rp_status rp_bench_merge(const char *const *in_paths, size_t n, const char *out_path);

#endif
