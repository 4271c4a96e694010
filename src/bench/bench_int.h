/*
 * bench_int.h - the bench module's internal interfaces, shared by its files and
 * its tests (tests/unit/bench/), not by other modules.
 *
 *   - rp_bench_buf: a growable byte string (text, excerpts, Markdown, SVG),
 *   - the SSE parser and the stream interpreter that turns one response body
 *     into an rp_bench_result (stream.c),
 *   - per-(task, run) measurements and the summary (metrics.c),
 *   - records and result files (record.c), the task file (tasks.c), machine
 *     facts (env.c), the comparison and its renderings (compare.c, svg.c).
 *
 * Threads: as bench.h, everything belongs to the calling thread.
 */
#ifndef RP_BENCH_INT_H
#define RP_BENCH_INT_H

#include "bench.h"

/* ---- byte strings --------------------------------------------------------- */

// A growable byte string, always NUL-terminated once anything was appended.
// Caller-owned: zero it (or rp_bench_buf_init), release with rp_bench_buf_deinit.
// The first failed allocation sticks in `oom`; later appends do nothing.
typedef struct rp_bench_buf {
    char *p;
    size_t len, cap;
    bool oom;
} rp_bench_buf;

void rp_bench_buf_init(rp_bench_buf *b);
void rp_bench_buf_deinit(rp_bench_buf *b);
void rp_bench_buf_add(rp_bench_buf *b, const void *p, size_t n);
void rp_bench_buf_adds(rp_bench_buf *b, const char *s);
void rp_bench_buf_printf(rp_bench_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// Hands the bytes over (rp_free them; "" when empty), leaving b empty; NULL when oom.
char *rp_bench_buf_take(rp_bench_buf *b);

// A heap string made printf-style (rp_free it); NULL on OOM.
char *rp_bench_fmt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

// At most `max` bytes of p as a one-line, valid UTF-8 heap string: invalid bytes
// become '?', control characters spaces, and "..." marks a cut. NULL on OOM.
char *rp_bench_excerpt(const char *p, size_t n, size_t max);

// Whether p[0, n) is valid UTF-8 (jansson needs it for strings).
bool rp_bench_utf8_valid(const char *p, size_t n);

// A JSON string of the bytes (made valid UTF-8 first if it is not). NULL on OOM.
json_t *rp_bench_json_bytes(const char *p, size_t n);

// A JSON number, or null for NAN / infinities.
json_t *rp_bench_json_real(double v);

/* ---- server-sent events ---------------------------------------------------- */

// Called once per event with its data lines joined by "\n" (NUL-terminated).
// A non-zero return stops the feed and is returned by it.
typedef rp_status (*rp_bench_sse_fn)(void *ctx, const char *data, size_t len);

// An incremental SSE parser (the WHATWG event-stream format): lines end in LF,
// CR or CRLF (a CRLF may be split between feeds), "data:" lines (one space
// after the colon dropped) accumulate, a blank line dispatches, comments and
// other fields are ignored. Caller-owned; zero it or rp_bench_sse_init.
typedef struct rp_bench_sse {
    rp_bench_buf line; // the line being read
    rp_bench_buf data; // the event's data lines so far
    bool has_data;     // a data line was seen since the last dispatch
    bool after_cr;     // the last byte was CR (a following LF belongs to it)
} rp_bench_sse;

#define RP_BENCH_SSE_MAX_LINE (64u << 20)

void rp_bench_sse_init(rp_bench_sse *s);
void rp_bench_sse_deinit(rp_bench_sse *s);
// Feeds bytes; dispatches every completed event. Errors: what fn returned,
// RP_ERR_LIMIT (a line over RP_BENCH_SSE_MAX_LINE), RP_ERR_NOMEM.
rp_status rp_bench_sse_feed(rp_bench_sse *s, const char *p, size_t n, rp_bench_sse_fn fn, void *ctx);
// End of the body: a last event without its blank line is still dispatched
// (servers that omit it are common). Errors as rp_bench_sse_feed.
rp_status rp_bench_sse_end(rp_bench_sse *s, rp_bench_sse_fn fn, void *ctx);

/* ---- one response body ------------------------------------------------------ */

// Interprets one response body into an rp_bench_result: SSE events, each a
// chat.completion.chunk (content / reasoning / tool-call deltas, finish reason,
// usage, errors) until "data: [DONE]". The clock is read once per chunk that
// carries a token. In raw mode (an HTTP error or a non-SSE content type) the
// body is only kept as an excerpt for the error message.
typedef struct rp_bench_stream {
    rp_bench_result *res; // where the outcome goes (borrowed)
    rp_bench_clock_fn clock;
    void *clock_ctx;
    rp_bench_sse sse;
    rp_bench_buf text, reasoning;
    rp_bench_buf head; // the body's first bytes (for messages)
    size_t body_bytes;
    int n_events;   // data events seen (chunks and [DONE])
    bool raw;       // not parsed as SSE
    bool done;      // [DONE] seen
    bool got_usage; // a usage object was seen
    bool stopped;   // a fatal problem: the rest of the body is ignored
} rp_bench_stream;

#define RP_BENCH_HEAD_BYTES 512
#define RP_BENCH_MAX_BODY ((size_t)256 << 20)

void rp_bench_stream_init(rp_bench_stream *s, rp_bench_result *res, rp_bench_clock_fn clock, void *clock_ctx);
void rp_bench_stream_deinit(rp_bench_stream *s);
void rp_bench_stream_feed(rp_bench_stream *s, const char *p, size_t n);
// End of the body: moves the text into the result and sets its error when the
// stream was not complete (no events, no [DONE], no usage).
void rp_bench_stream_finish(rp_bench_stream *s);
// Records the first error of the request (later ones are dropped).
void rp_bench_result_fail(rp_bench_result *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- measurements ---------------------------------------------------------- */

// The median of the finite values of v (NAN when there are none); v is not changed.
double rp_bench_median(const double *v, size_t n);
// The smallest and largest finite values (NAN when none).
void rp_bench_range(const double *v, size_t n, double *lo, double *hi);

// One (task, run): a single request's figures, or for several streams started
// together (concurrency) the aggregate: TTFT the median of the streams', decode
// tok/s = sum(completion - 1) / (latest last token - earliest first token), end
// to end = latest last token - earliest send, token counts summed. Figures are
// NAN / -1 when undefined or when any stream failed.
typedef struct rp_bench_measure {
    double ttft_s, decode_tok_s, e2e_s;
    double stream_decode_tok_s; // the median of the streams' own decode tok/s (one record: its own)
    int64_t prompt_tokens, cached_tokens, completion_tokens;
    int n_records, n_errors;
    int n_pass, n_checked; // tool cases: records with "pass" true / with "pass" set
} rp_bench_measure;

// Measures the records of one (task, run). Records come from result files
// (validated by rp_bench_doc_check), so fields are numbers or null.
void rp_bench_measure_records(const json_t *const *recs, size_t n, rp_bench_measure *m);

// The distinct task ids of a records array in first-seen order (borrowed
// strings; rp_free the array). Errors: RP_ERR_NOMEM.
rp_status rp_bench_task_ids(const json_t *records, const char ***ids, size_t *n);
// The records of (task, run) ordered by "stream"; up to cap, returns how many there are.
size_t rp_bench_select(const json_t *records, const char *task, int run, const json_t **out, size_t cap);
// One more than the largest "run" in the records (0 when empty).
int rp_bench_run_count(const json_t *records);

// The summary object of a records array: per task its scenario, runs, errors,
// and median/min/max of ttft_s, decode_tok_s, e2e_s over runs (and of
// stream_decode_tok_s for tasks of several streams), median token counts;
// tools cases add passes per run. "concurrency" (when records have
// "n_streams"): per level its streams, the median aggregate and per-stream
// decode tok/s and the aggregate's ratio to the one-stream level's
// ("vs_one_stream", null without that level). "interference" (when records have
// "gap_during_s"): per run the largest pause of any stream before, during and
// after the long prompt's prefill, the prefill chunk's time, and the ratio
// pause during / chunk time, with medians over runs. NULL on OOM.
json_t *rp_bench_summary(const json_t *records);

// The largest gap t[i] - t[i-1] (i >= 1) whose end t[i] lies in [lo, hi); NAN
// when no gap ends there. t must be non-decreasing.
double rp_bench_max_gap(const double *t, size_t n, double lo, double hi);

// What a Rapid server's /v1/status "engine" object counted between two
// readings: {"steps", "step_seconds", "forward_seconds", "forward_by_batch":
// [{"tokens_min", "tokens_max", "steps", "tokens", "seconds"}]} (buckets that
// counted nothing are left out). NULL when either reading lacks those figures
// (another server) or on OOM.
json_t *rp_bench_engine_delta(const json_t *before, const json_t *after);

/* ---- records and result files ---------------------------------------------- */

#define RP_BENCH_FORMAT "rapid-bench/1"

// A record of one request: scenario, task, run, ok, error, http_status, times
// relative to t0 (t_sent, t_first, t_last), ttft_s / decode_tok_s / e2e_s,
// token counts, finish reason, text, reasoning and tool calls. NULL on OOM.
json_t *rp_bench_record_new(const rp_bench_result *r, double t0, const char *scenario, const char *task, int run);
// A record for a request that could not even be made (e.g. a missing source file).
json_t *rp_bench_record_failed(const char *scenario, const char *task, int run, const char *error);

// Checks that doc is a result file: an object with "format": RP_BENCH_FORMAT
// and a "records" array of objects each with a string "task", a non-negative
// integer "run", numbers or null where figures go, strings or null for text.
// Errors: RP_ERR_INVALID naming what is wrong (the caller adds the file name).
rp_status rp_bench_doc_check(const json_t *doc);
// Reads and checks a result file. Errors: RP_ERR_IO, RP_ERR_INVALID (prefixed with path).
rp_status rp_bench_doc_load(const char *path, json_t **out);
// Writes doc (indented) atomically. Errors: RP_ERR_IO, RP_ERR_NOMEM.
rp_status rp_bench_doc_write(const char *path, const json_t *doc);

/* ---- the task file ----------------------------------------------------------- */

// A loaded and checked task file (bench/tasks.json, "format": "rapid-bench-tasks/1"):
//   texts       name -> long text used through {{text:NAME}}
//   tools       name -> OpenAI function definition {description, parameters}
//   tasks       [{id, kind, prompt | messages, system?, tools?, max_tokens, thinking?}]
//   concurrency {task, levels}
//   agent       {system, tools, max_tokens, turns: [[message...] x 10]}
//   prefill     {sizes, chars_per_token, sources, question, max_tokens}
//   tools_scenario {tools, max_tokens, cases: [{prompt, name, arguments}]}
// Strings in prompts, systems and messages may hold placeholders:
// {{source:MODULE}} (a Python standard-library module's source, read at run
// time), {{text:NAME}} and {{nonce}}.
typedef struct rp_bench_taskset {
    json_t *root;
    char *path;
} rp_bench_taskset;

// Loads and checks a task file. Errors: RP_ERR_IO, RP_ERR_INVALID (the file and
// the field named), RP_ERR_NOMEM.
rp_status rp_bench_taskset_load(const char *path, rp_bench_taskset *out);
void rp_bench_taskset_deinit(rp_bench_taskset *ts);
// The task with this id from "tasks", or NULL.
const json_t *rp_bench_taskset_find(const rp_bench_taskset *ts, const char *id);

// Expands the placeholders of s into a heap string (*out, rp_free it); inserted
// text is not scanned again. ts NULL copies s as it is. stdlib_dir may be NULL
// (then a {{source:}} fails with a message saying no Python installation was
// found); nonce may be NULL ({{nonce}} then fails). Errors: RP_ERR_INVALID
// (unknown placeholder, bad module name), RP_ERR_IO (module not found, named
// with the folder), RP_ERR_NOMEM.
rp_status rp_bench_expand(const rp_bench_taskset *ts, const char *stdlib_dir, const char *nonce, const char *s,
                          char **out);

// The request body (JSON text, rp_free it) for a request spec: an object with
// "prompt" or "messages", optional "system", "tools" (names in the task file's
// tool map), "tool_choice", "max_tokens" (default 256), "thinking" (default
// false) and "literal" (true: strings are sent without expanding placeholders).
// Errors: as rp_bench_expand, RP_ERR_INVALID (unknown tool name).
rp_status rp_bench_body(const rp_bench_taskset *ts, const json_t *spec, const char *model, const char *stdlib_dir,
                        const char *nonce, char **out);

// Source of a Python standard-library module (dotted names allowed; a package
// gives its __init__.py) under stdlib_dir. Errors: RP_ERR_INVALID (bad name),
// RP_ERR_IO (not found: the message names the module and the folder).
rp_status rp_bench_stdlib_source(const char *stdlib_dir, const char *module, char **out, size_t *len);

// Whether the tool calls match a case: the first call names `name` and its
// arguments (a JSON object) hold every expected key with an equal value
// (numbers compared by value, strings exactly, other values structurally).
bool rp_bench_tool_pass(const json_t *tool_calls, const char *name, const json_t *expected_args);

/* ---- environment ------------------------------------------------------------- */

// Machine facts: {"cpu", "cores", "memory_bytes", "os", "kernel", "arch"}. NULL on OOM.
json_t *rp_bench_machine(void);
// /proc/loadavg's three averages as an array (or null when unreadable).
json_t *rp_bench_loadavg(void);
// The current UTC time as "YYYY-MM-DDTHH:MM:SSZ" in buf (>= 32 bytes).
void rp_bench_utc_now(char *buf, size_t cap);
// The Python standard-library folder: $RAPID_BENCH_STDLIB, else python3's
// sysconfig "stdlib" path, else NULL. Heap string; rp_free it.
char *rp_bench_stdlib_find(void);
// 64-bit FNV-1a of bytes, as 16 hex digits in buf (>= 17 bytes).
void rp_bench_hash_hex(const void *p, size_t n, char *buf);

/* ---- comparison -------------------------------------------------------------- */

typedef struct rp_bench_cmp_row {
    const char *task;           // borrowed from the documents
    const char *scenario;       // borrowed
    int n_pairs;                // runs measured in both files
    double decode[3];           // B/A decode tok/s: median, min, max over pairs (NAN when none)
    double e2e[3];              // A/B end to end
    double ttft[3];             // A/B time to first token
    double a_decode, b_decode;  // median decode tok/s of each file
    double a_e2e, b_e2e;        // median end to end of each file (s)
    int n_identical, n_outputs; // (run, stream) outputs compared and byte-identical
    int a_errors, b_errors;
    char only; // 'A' or 'B' when the task is in one file only, else 0
} rp_bench_cmp_row;

typedef struct rp_bench_cmp {
    rp_bench_cmp_row *rows;
    size_t n_rows;
    const char *label_a, *label_b; // labels (or the file names)
    const char *machine;           // one line describing A's machine (owned: rp_free)
    double all_decode, all_e2e;    // median over tasks of the per-task median speedups
} rp_bench_cmp;

// Builds the comparison of two checked documents (which must outlive it).
// Errors: RP_ERR_INVALID (no task in common), RP_ERR_NOMEM.
rp_status rp_bench_cmp_build(const json_t *a, const json_t *b, const char *name_a, const char *name_b,
                             rp_bench_cmp *out);
void rp_bench_cmp_deinit(rp_bench_cmp *c);
// The plain-text table, the Markdown table and the SVG chart (heap strings; NULL on OOM).
char *rp_bench_cmp_text(const rp_bench_cmp *c);
char *rp_bench_cmp_markdown(const rp_bench_cmp *c);
char *rp_bench_cmp_svg(const rp_bench_cmp *c);

#endif
