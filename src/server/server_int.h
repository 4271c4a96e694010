/*
 * server_int.h - the seam between the HTTP core and the API files.
 *
 * The server is split by concern:
 *
 *   http.c      the libmicrohttpd daemon: routing, auth, body limits, early
 *               errors, replies, streaming through pump callbacks, disconnect
 *               detection, the per-request log line; the server object and
 *               its lifecycle.
 *   conn.c      which connections are kept: the connection limits (global and
 *               per client address, slow and idle connections giving way to
 *               new ones), deadlines for a request's head and body.
 *   fields.c    the request-reading helpers every API uses (typed field readers
 *               whose errors name the field, and the pieces several APIs read
 *               alike: content parts, tool modes, JSON formats, function tools),
 *               JSON body parsing, SSE framing, rp_buf.
 *   gen.c       the API-neutral generation driver: chat template, tokenize,
 *               context check, engine submit, incremental detokenize, stop
 *               strings, output parsing (reasoning, tool calls), usage.
 *   openai.c    /v1/chat/completions, /v1/completions, /v1/models[/{id}].
 *   anthropic.c /v1/messages, /v1/messages/count_tokens.
 *   responses.c /v1/responses.
 *   metrics.c   /metrics (Prometheus text), /v1/status (JSON), /health, the counters behind them.
 *   web.c       the web page: GET / and its files under /ui/, embedded at build time
 *               (tools/embed_web.cmake turns web/ into the generated web_assets.c).
 *
 * How an API file answers a request (an rp_route_fn):
 *
 *   1. rp_http_parse_json(r, &body, &err) - the body as a JSON object (size,
 *      UTF-8, nesting depth checked);
 *   2. fill an rp_api_req from it with the rp_field_* readers (each error
 *      names the field: 400 invalid_request_error, param = the field path);
 *      rp_server_check_model applies the model-name policy;
 *   3. rp_drv_start(r, &req, &drv, &err) - renders, tokenizes, checks the
 *      context and submits (errors: 400 context_length_exceeded, 503 busy);
 *   4a. not streaming: rp_drv_complete(drv, code, &res, &err) waits for the
 *       whole reply (cancelling if the client goes away; a failed or cancelled
 *       generation is an error), then the file builds its JSON body and hands
 *       it to rp_reply_json_new;
 *   4b. streaming: rp_reply_stream(out, pump, free, ctx): the http layer calls
 *       pump() from the connection thread until it reports finished; pump
 *       calls rp_drv_next(drv, RP_STREAM_WAIT_S, ...) and appends SSE frames
 *       (rp_sse_json) for the events it got. Between pumps the layer checks the
 *       socket; a client that went away ends the stream and free() runs at once
 *       (rp_drv_destroy cancels the generation).
 *   Any error: rp_reply_error(r, out, &err) writes the route's API error shape.
 *
 * Threads: an rp_http_req, its rp_drv and its reply belong to the request's
 * connection thread. rp_server fields are immutable after create except the
 * metrics and the connection table (each with its own lock) and the atomics.
 */
#ifndef RP_SERVER_INT_H
#define RP_SERVER_INT_H

#include "server.h"

#include "../chat/chat.h"

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>

#define RP_JSON_MAX_DEPTH 64    // deeper request bodies are rejected (400) before parsing
#define RP_STREAM_WAIT_S 0.02   // how long a pump waits for tokens before the socket is checked again
#define RP_MAX_STOP 16          // most stop strings per request
#define RP_MAX_STOP_LEN 1024    // longest stop string, bytes

/* ---- growable byte buffer -------------------------------------------------- */

// A growable, NUL-terminated byte buffer. Caller-owned: init / deinit. An
// allocation failure sets `failed` and turns later appends into no-ops, so
// callers check once at the end.
typedef struct rp_buf {
    char *data; // NUL-terminated when len > 0 or after any append; may be NULL while empty
    size_t len, cap;
    bool failed;
} rp_buf;

void rp_buf_init(rp_buf *b);
void rp_buf_deinit(rp_buf *b);
void rp_buf_reset(rp_buf *b); // len = 0, keeps the memory
void rp_buf_append(rp_buf *b, const void *data, size_t n);
void rp_buf_puts(rp_buf *b, const char *s);
void rp_buf_printf(rp_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// Appends v as compact JSON (UTF-8 kept, key order kept).
void rp_buf_json(rp_buf *b, const json_t *v);
// Appends one SSE frame: "event: NAME\n" (when event is not NULL) then "data: JSON\n\n".
void rp_sse_json(rp_buf *b, const char *event, const json_t *data);
// rp_sse_json, then releases data (stolen); data NULL (a failed json_pack) marks b failed.
void rp_sse_json_new(rp_buf *b, const char *event, json_t *data);
// Appends "data: TEXT\n\n" (e.g. "[DONE]").
void rp_sse_text(rp_buf *b, const char *text);
// Writes prefix + 24 random alphanumerics into out (ids of replies and
// items: "msg_...", "resp_..."); salt mixes in the caller's request id. Any thread.
void rp_api_id(char *out, size_t cap, const char *prefix, uint64_t salt);

/* ---- API errors ------------------------------------------------------------ */

// An error an API answers with. Each API writes it in its own shape
// (rp_openai_error_json, rp_anthropic_error_json); the HTTP status picks the
// type name unless `type` overrides it.
typedef struct rp_api_error {
    int status;        // HTTP status: 400, 401, 404, 405, 413, 500, 501, 503
    char message[1024];
    char param[128];   // the offending field as a path ("messages[2].content"), "" if none
    const char *code;  // OpenAI "code" ("context_length_exceeded", "model_not_found", "invalid_api_key"), or NULL
    const char *type;  // type name override (static string), or NULL: chosen by the API from status
    int retry_after;   // seconds, > 0 adds Retry-After (503)
} rp_api_error;

// Fills e (param may be NULL). Returns false so a reader can `return rp_api_fail(...)`.
bool rp_api_fail(rp_api_error *e, int status, const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
// rp_api_fail(e, 500, NULL, NULL, "out of memory"); returns false.
bool rp_api_oom(rp_api_error *e);

// {"error": {"message", "type", "param", "code"}} (param and code null when empty).
void rp_openai_error_json(const rp_api_error *e, rp_buf *out);
// {"type": "error", "error": {"type", "message"}}.
void rp_anthropic_error_json(const rp_api_error *e, rp_buf *out);
// Appends one SSE frame carrying e in an API's error shape (shape: one of the two
// above): "event: NAME\n" when event is not NULL, then "data: ERROR\n\n".
void rp_sse_error(rp_buf *b, const char *event, const rp_api_error *e,
                  void (*shape)(const rp_api_error *e, rp_buf *out));

/* ---- the neutral request --------------------------------------------------- */

typedef enum rp_tool_choice {
    RP_TOOL_CHOICE_AUTO = 0,     // the model decides
    RP_TOOL_CHOICE_NONE = 1,     // rendered without tools, no tool parsing
    RP_TOOL_CHOICE_REQUIRED = 2, // the reply starts with a call (forced prefix; Hermes format)
    RP_TOOL_CHOICE_NAMED = 3,    // the reply starts with a call of tool_name
} rp_tool_choice;

// What every API's request becomes. Owned by the handler: rp_api_req_init,
// fill, rp_api_req_deinit (frees every owned member).
typedef struct rp_api_req {
    json_t *messages;        // chat: array of OpenAI-style messages, as the chat template takes them
                             // (role, content string or text parts, tool_calls with arguments as
                             // objects, tool_call_id, reasoning_content); owned reference. NULL: raw prompt.
    char *prompt;            // raw prompt (completions) when messages is NULL; owned, prompt_len bytes
    size_t prompt_len;
    int32_t *prompt_ids;     // or a raw prompt as token ids (completions), owned, n_prompt_ids
    int n_prompt_ids;
    json_t *tools;           // array of OpenAI function tools {"type":"function","function":{...}} or NULL (owned)
    json_t *template_kwargs; // object of extra template variables (enable_thinking, ...) or NULL (owned)
    rp_sample_params sample; // validated by the reader
    int max_tokens;          // -1: none (until the context is full)
    char *stop[RP_MAX_STOP]; // stop strings (owned), each non-empty
    int n_stop;
    int logprobs;            // -1: none; 0: the chosen token's; 1..20: plus that many alternatives
    bool json_mode;          // constrain the reply to one JSON value: any object, or `schema`'s
    json_t *schema;          // json_schema: the schema (owned), compiled by rp_drv_start; NULL: any object
    char schema_param[48];   // where the schema was ("response_format.json_schema.schema", ...), for errors
    rp_tool_choice tool_choice;
    char *tool_name;         // RP_TOOL_CHOICE_NAMED: the tool (owned)
    bool parallel_tool_calls; // informational: the parsers return every call the model makes
    bool stream;
    bool include_usage;      // OpenAI stream_options.include_usage
    bool ignore_eos;
    char *model;             // the model name the client sent (owned), NULL if none
    bool continue_final;     // the last message is an assistant message with non-empty text that the reply
                             // continues (Anthropic prefill): rendered without the generation prompt and cut
                             // right after that text
} rp_api_req;

void rp_api_req_init(rp_api_req *q); // defaults: OpenAI sampling with a fresh seed, max_tokens -1, logprobs -1, auto, parallel
void rp_api_req_deinit(rp_api_req *q);

/* ---- field readers (fields.c) ---------------------------------------------- */

// Each reads obj[key] when present and not null (absent/null leaves *out
// unchanged and succeeds). A wrong type or a value outside [lo, hi] (NaN
// included) fills e (400, param = key) and returns false.
bool rp_field_number(const json_t *obj, const char *key, double lo, double hi, double *out, rp_api_error *e);
bool rp_field_float(const json_t *obj, const char *key, double lo, double hi, float *out, rp_api_error *e);
bool rp_field_int(const json_t *obj, const char *key, long long lo, long long hi, long long *out, rp_api_error *e);
bool rp_field_bool(const json_t *obj, const char *key, bool *out, rp_api_error *e);
// *out borrows the string (valid while obj lives); *len may be NULL.
bool rp_field_string(const json_t *obj, const char *key, const char **out, size_t *len, rp_api_error *e);
// Stop strings: a string or an array of strings (at most RP_MAX_STOP, each
// 1..RP_MAX_STOP_LEN bytes; empty strings are skipped), copied into q->stop.
bool rp_field_stop(const json_t *obj, const char *key, rp_api_req *q, rp_api_error *e);
// obj.model (a string, optional) copied into q->model.
bool rp_field_model(const json_t *obj, rp_api_req *q, rp_api_error *e);

/* ---- request pieces more than one API reads (fields.c) ---------------------- */

// A content part type a text reader takes, and the member that holds its text.
typedef struct rp_text_part {
    const char *type; // the part's "type"
    const char *key;  // its text member ("text", "refusal")
} rp_text_part;

// Appends the text of an OpenAI-style content value to out: a string, or an
// array of content parts joined with "\n". A part is an object whose type is
// in kinds (ended by a {NULL, NULL} entry); with bare_strings a part may also
// be a plain string (the lenient chat reader). Errors are 400 in OpenAI's
// shape naming `where` or the part ("where[i]").
bool rp_field_parts_text(const json_t *c, const char *where, const rp_text_part *kinds, bool bare_strings, rp_buf *out,
                         rp_api_error *e);
// A tool_choice mode string: "auto", "none" or "required" sets q->tool_choice;
// anything else is a 400 naming tool_choice.
bool rp_field_tool_mode(const char *mode, rp_api_req *q, rp_api_error *e);
// A {"type": "text" | "json_object" | "json_schema"} format object found at
// `path` (response_format, text.format; f may be NULL or null: nothing to do);
// the JSON types set q->json_mode, json_schema also q->schema: OpenAI chat
// nests it ({"json_schema": {"name", "schema", "strict"}}), Responses has
// {"name", "schema", "strict"} beside "type" (nested = false). Errors name
// path or the member at fault.
bool rp_field_json_format(const json_t *f, const char *path, bool nested, rp_api_req *q, rp_api_error *e);
// Sets q->json_mode and q->schema from a schema object found at `param`
// (copied); a schema that is not an object or a boolean is a 400 naming param.
bool rp_field_json_schema(const json_t *schema, const char *param, rp_api_req *q, rp_api_error *e);
// Appends {"type": "function", "function": {name, description, parameters}} to
// q->tools (created on first use). The caller has checked the values: name a
// non-empty string; desc and params are copied only when a string and an
// object. Fails only for memory (500).
bool rp_api_req_add_tool(rp_api_req *q, const json_t *name, const json_t *desc, const json_t *params, rp_api_error *e);
// True when the function tools (OpenAI shape, as in rp_api_req.tools) name one `name`.
bool rp_tools_has(const json_t *tools, const char *name);
// Appends v (stolen) to the array arr; v NULL (a failed json_pack) or a failed
// append is out of memory (500, false).
bool rp_api_append_new(json_t *arr, json_t *v, rp_api_error *e);

/* ---- text that reaches logs and errors (fields.c) --------------------------- */

// Makes s (NUL-terminated, in a buffer of cap bytes) valid UTF-8 in place: each
// byte that does not start a valid sequence becomes U+FFFD, and a sequence cut
// by the end (a message truncated by snprintf) is dropped; the result still
// fits in cap. Error messages and params pass through it (rp_api_fail), so a
// message quoting client bytes always serializes as JSON.
void rp_utf8_repair(char *s, size_t cap);
// Appends n bytes of client text to out for a log line: valid UTF-8 is kept,
// except control characters (C0, DEL, C1) and the bidirectional overrides and
// isolates, which are written \n, \r, \t or \xNN / \u{NNNN}; bytes that are
// not UTF-8 are \xNN; a backslash is doubled; with `spaces`, a space is \x20
// too (a field of a space-separated line). So a logged field is one line,
// sends no terminal escapes and can be read back unambiguously.
void rp_log_escape(rp_buf *out, const char *s, size_t n, bool spaces);

/* ---- connections (conn.c) --------------------------------------------------- */

// The table of open connections: limits and deadlines, as described at the top
// of conn.c. One per server; its functions may be called from any thread.
struct sockaddr;
typedef struct rp_conn_table rp_conn_table;
typedef struct rp_conn rp_conn; // one connection's record, owned by the table

// Why the table shut a connection down.
typedef enum rp_conn_end {
    RP_CONN_OPEN = 0,         // it did not
    RP_CONN_HEAD_TIMEOUT = 1, // no whole request head within the timeout
    RP_CONN_IDLE_TIMEOUT = 2, // a kept-alive connection with no next request
    RP_CONN_BODY_TIMEOUT = 3, // the body did not arrive within the timeout
    RP_CONN_EVICTED = 4,      // waiting for a request head, closed to make room for a new connection
} rp_conn_end;

typedef struct rp_conn_stats {
    int open;              // connections open now (refused ones included)
    int limit, per_client; // the limits in force
    uint64_t head_timeouts, idle_timeouts, body_timeouts, evicted, refused, hard_refused; // since start
} rp_conn_stats;

// Starts the table and its watchdog thread. Errors: RP_ERR_INVALID (a limit
// below 1, timeout not positive), RP_ERR_NOMEM.
rp_status rp_conn_table_create(int max_conn, int max_per_client, double timeout_s, rp_conn_table **out);
// Stops the watchdog and frees the table. Call after the daemon has stopped. NULL is a no-op.
void rp_conn_table_destroy(rp_conn_table *t);
// How many connections past max_conn are kept open (for the refused ones' 503s).
int rp_conn_margin(int max_conn);
// A connection was accepted (fd, peer address sa, possibly NULL). Applies the limits: may shut
// an older connection down to make room, or mark this one refused. NULL when out of memory
// (the connection is then served untracked).
rp_conn *rp_conn_open(rp_conn_table *t, int fd, const struct sockaddr *sa);
// The connection is closing (its socket still open). Frees c. NULL is a no-op.
void rp_conn_close(rp_conn_table *t, rp_conn *c);
// The gate hands c's socket to libmicrohttpd, which takes it later on its own thread (or
// closes it without a word): until adopted, the table holds a duplicate descriptor, so that
// shutting the socket down never meets a reused descriptor, and drops the record (closing
// the duplicate) if it is never adopted.
void rp_conn_handoff(rp_conn_table *t, rp_conn *c);
// libmicrohttpd has taken the socket fd: its record as handed off (NULL if none).
rp_conn *rp_conn_adopt(rp_conn_table *t, int fd);
// The next request's first line has arrived (its head has started).
void rp_conn_head_started(rp_conn_table *t, rp_conn *c);
// The request head is complete: the body deadline starts. Returns true when the connection
// was refused at admission (answer 503 with Retry-After and close it).
bool rp_conn_request(rp_conn_table *t, rp_conn *c);
// The body has been read: no deadline until the reply is done.
void rp_conn_body_done(rp_conn_table *t, rp_conn *c);
// The reply is done: the connection waits for its next request (the head deadline restarts).
void rp_conn_request_done(rp_conn_table *t, rp_conn *c);
// Why the table shut c down (RP_CONN_OPEN when it did not). NULL: RP_CONN_OPEN.
rp_conn_end rp_conn_ended(rp_conn_table *t, rp_conn *c);
// Past every margin (max_conn + rp_conn_margin records open): close new connections at once.
bool rp_conn_full(rp_conn_table *t);
// A new connection was closed at once past every margin (counted and reported).
void rp_conn_hard_limit(rp_conn_table *t);
void rp_conn_get_stats(rp_conn_table *t, rp_conn_stats *out);

/* ---- the server object ----------------------------------------------------- */

typedef struct rp_metrics rp_metrics; // metrics.c
typedef struct rp_gate rp_gate;       // gate.c
struct MHD_Daemon;

#define RP_SCHEMA_CACHE_SIZE 64 // compiled response schemas kept

struct rp_server {
    rp_server_params params; // copied; strings below owned
    char *host, *api_key, *allowed_origins;
    char *model_name;        // the served model name
    rp_engine *engine;
    const rp_tokenizer *tok;
    const rp_model *model; // borrowed: /v1/status describes it
    const rp_model_config *cfg;
    rp_chat_template *tpl;   // the chat template (--chat-template's, else the tokenizer's), NULL if none
    rp_tool_format tool_format;
    rp_reasoning_format reasoning_format;
    int n_ctx;               // rp_engine_n_ctx
    long long created;       // unix time the server started (model "created")
    int port;
    int listen_fd;
    struct MHD_Daemon *daemon;
    rp_gate *gate; // accepts, checks first request lines, hands sockets to the daemon
    rp_metrics *metrics;
    rp_conn_table *conns;
    rp_json_schema_cache *schemas; // compiled response schemas by text (request threads compile)
    atomic_ullong next_id;   // request ids
    atomic_bool stopping;    // destroy has begun: streams end, generations are cancelled
    int wake_pipe[2];        // rp_server_stop writes, rp_server_wait reads
};

// The model-name policy. `name` is what the client sent (NULL/"" = none). A
// server answers any name with its model, unless strict_model_name: then a
// name other than the served one is 404 model_not_found. Returns false and fills e.
bool rp_server_check_model(const rp_server *s, const char *name, rp_api_error *e);

/* ---- one HTTP request ------------------------------------------------------ */

// What a handler sees of its request, and what it reports for the log line
// and the metrics (the generation driver fills `stats`).
typedef struct rp_req_stats {
    int n_prompt, n_cached, n_completion;
    double ttft_s;     // submit to first token, < 0 when none
    double decode_tps; // tokens/s after the first, 0 when unknown
    bool engine;       // the request reached the engine (the rest below is then known)
    double queue_s;    // submit to admission (prefill started), < 0 while never admitted
    double e2e_s;      // submit to the last token, < 0 when none
    int n_gaps;        // gaps between consecutive tokens (tokens sampled - 1, >= 0)
    double gaps_s;     // their sum: first token to the last
    int n_drafted, n_accepted; // speculative decoding: draft tokens verified, and accepted (every method)
    bool client_gone;  // the client disconnected before the reply was complete
} rp_req_stats;

typedef struct rp_http_req {
    rp_server *srv;
    uint64_t id;              // per-server request number (log lines)
    const char *method;
    const char *path;         // without the query string
    const char *query;        // after '?', "" if none
    const char *route_param;  // the rest of the path after a prefix route ("/v1/models/{id}"), URL-decoded
    const char *route_name;   // the route's name for logs and metrics ("chat", "messages", ...)
    const char *body;         // body_len bytes (not NUL-terminated)
    size_t body_len;
    int status;               // the reply's status (set by the layer)
    rp_req_stats stats;
    void *priv;               // http.c's connection state
} rp_http_req;

// A request header (case-insensitive name), NULL if absent.
const char *rp_http_header(rp_http_req *r, const char *name);
// True when the client has gone away (checked now, without waiting): the
// connection was reset or closed for reading, or the server is stopping. A
// client that only closed its sending side after its request (a half-close)
// is not gone: the end of its stream makes the layer write a probe (an
// interim "100 Continue" before a whole reply, an SSE comment in a stream;
// again every second while it stands), which a client that closed the
// connection answers with a reset, seen by a later call. (HTTP/1.0 takes no interim replies: there the end of the
// client's stream means gone.)
bool rp_http_client_gone(rp_http_req *r);
// The body as a JSON object. Checks: valid UTF-8, nesting depth at most
// RP_JSON_MAX_DEPTH, well-formed JSON, an object at the top. Fills e (400 with
// jansson's line/column message) and returns false otherwise.
bool rp_http_parse_json(rp_http_req *r, json_t **out, rp_api_error *e);
// The same on a byte string (fields.c; unit-tested directly).
bool rp_json_parse_bytes(const char *data, size_t len, json_t **out, rp_api_error *e);
// Tool-call arguments' JSON text as a value; NULL when it is not JSON. JSON allows
// integers of any length and jansson holds 64 bits: a text with a longer one is read
// with every number as a real rather than lost.
json_t *rp_json_load_args(const char *text, size_t len);

/* ---- replies --------------------------------------------------------------- */

// A streaming reply's callbacks. pump appends frames to out (possibly none)
// and sets *finished after its last frames; it should return within about
// RP_STREAM_WAIT_S when nothing is ready so the layer can check the socket.
// A non-OK return ends the stream by closing the connection. free runs exactly
// once (finished, client gone, error or shutdown) and must release ctx (the
// driver with it). Both run on the connection thread; r stays valid in both.
typedef rp_status (*rp_stream_pump_fn)(void *ctx, rp_http_req *r, rp_buf *out, bool *finished);
typedef void (*rp_stream_free_fn)(void *ctx, rp_http_req *r);

typedef struct rp_reply {
    int status;
    const char *content_type; // static string
    rp_buf body;              // the whole body (not streaming)
    int retry_after;          // > 0: a Retry-After header
    const char *const *headers; // NULL, or more headers: name, value, ..., NULL (static strings)
    rp_stream_pump_fn pump;   // streaming when not NULL
    rp_stream_free_fn pump_free;
    void *pump_ctx;
} rp_reply;

// The reply is `status` with v as its JSON body (v is dumped, not stolen).
void rp_reply_json(rp_reply *out, int status, const json_t *v);
// Text body (e.g. Prometheus metrics).
void rp_reply_text(rp_reply *out, int status, const char *content_type, const char *text, size_t len);
// A 200 reply with body as JSON, then releases body (stolen). body NULL (a failed
// json_pack) fills e with out of memory and returns false. (fields.c)
bool rp_reply_json_new(rp_reply *out, json_t *body, rp_api_error *e);
// The error in the API shape of r's route (OpenAI unless an Anthropic route).
void rp_reply_error(rp_http_req *r, rp_reply *out, const rp_api_error *e);
// A 200 text/event-stream reply driven by pump; ownership of ctx passes to the
// layer (free_fn runs exactly once, even if the stream never starts).
void rp_reply_stream(rp_reply *out, rp_stream_pump_fn pump, rp_stream_free_fn free_fn, void *ctx);

/* ---- routes ---------------------------------------------------------------- */

typedef enum rp_api_kind {
    RP_API_OPENAI = 0,    // errors as {"error": {...}}
    RP_API_ANTHROPIC = 1, // errors as {"type": "error", "error": {...}}
    RP_API_PLAIN = 2,     // operations endpoints (OpenAI error shape)
} rp_api_kind;

typedef void (*rp_route_fn)(rp_http_req *r, rp_reply *out);

typedef struct rp_route {
    const char *method; // "GET", "POST"
    const char *path;   // exact path, or a prefix ending in '/' when `prefix`
    bool prefix;        // path + one non-empty segment; the segment is r->route_param
    rp_route_fn fn;
    const char *name;   // for logs and metrics
    rp_api_kind api;
    bool auth;          // requires the API key (when one is set)
} rp_route;

/* ---- protocol errors outside libmicrohttpd (proto.c) ------------------------ */

// libmicrohttpd's error status and HTML page as our error (the status kept, the message
// ours). False when status is not an error status.
bool rp_proto_from_mhd(unsigned status, const char *page, rp_api_error *e);
// Writes e as a whole reply (in api's shape, "Connection: close", x-request-id unless 0)
// straight to the socket and shuts its sending side. Waits at most a few seconds for the
// socket to take it. False when the reply could not be sent whole.
bool rp_proto_send(int fd, rp_api_kind api, const rp_api_error *e, uint64_t request_id);
// After an answer straight to the socket, what the client still sends is dropped for at most
// this long and this many bytes, so that closing the socket does not reset the answer away.
#define RP_PROTO_DRAIN_S 0.5
#define RP_PROTO_DRAIN_MAX ((size_t)1 << 20)
// Reads and drops what the client still sends, until it closes or the bounds above (blocks).
void rp_proto_drain(int fd);
// RFC 9110's tchar: a byte a method or a header name may hold.
bool rp_proto_tchar(unsigned char c);
// The log line of a malformed request answered outside a handler (it has no request line of its own).
void rp_proto_log(const rp_api_error *e);

/* ---- the accepting thread (gate.c) ------------------------------------------- */

// Starts accepting on listen_fd (which the gate owns from then on, on success): each
// connection is recorded in conns, its first request line checked (a malformed one answered
// in JSON; quiet: without a log line) and the socket handed to daemon.
rp_status rp_gate_start(int listen_fd, struct MHD_Daemon *daemon, rp_conn_table *conns, bool quiet, rp_gate **out);
// Stops accepting, closes the connections still waiting for a first line and the listening
// socket. NULL is a no-op.
void rp_gate_stop(rp_gate *g);

// The handlers (one file per API).
void rp_openai_chat(rp_http_req *r, rp_reply *out);
void rp_openai_completions(rp_http_req *r, rp_reply *out);
void rp_openai_models(rp_http_req *r, rp_reply *out);
void rp_openai_model(rp_http_req *r, rp_reply *out);
void rp_anthropic_messages(rp_http_req *r, rp_reply *out);
void rp_anthropic_count_tokens(rp_http_req *r, rp_reply *out);
void rp_responses_create(rp_http_req *r, rp_reply *out);
void rp_metrics_handler(rp_http_req *r, rp_reply *out);
void rp_status_handler(rp_http_req *r, rp_reply *out);
void rp_health_handler(rp_http_req *r, rp_reply *out);
void rp_web_page(rp_http_req *r, rp_reply *out); // GET / (web.c)
void rp_web_file(rp_http_req *r, rp_reply *out); // GET /ui/{file}

/* ---- the web page's files (generated from web/ by tools/embed_web.cmake) ------ */

typedef struct rp_web_asset {
    const char *name;          // the file's name in web/ ("app.js"), served as /ui/NAME
    const char *content_type;  // by its extension
    const unsigned char *data; // (len) bytes, NUL-terminated
    size_t len;
} rp_web_asset;

extern const rp_web_asset rp_web_assets[];
extern const size_t rp_web_n_assets;

/* ---- the generation driver (gen.c) ----------------------------------------- */

// A rendered and tokenized prompt.
typedef struct rp_prompt {
    char *text;       // the rendered prompt (NULL for token-id prompts), rp_malloc'd
    size_t text_len;
    int32_t *ids;     // (n) token ids, rp_malloc'd
    int n;
    const char *forced; // text appended to force a tool call (static or in text), NULL if none
    size_t forced_len;
} rp_prompt;

void rp_prompt_deinit(rp_prompt *p);

// Renders q (chat template with messages, tools unless tool_choice none,
// template_kwargs, generation prompt; plus the forced tool-call opening for
// required/named) or takes its raw prompt, and tokenizes it. Used by
// rp_drv_start and by count_tokens endpoints. Errors fill e: 400 (template
// error, unknown named tool, empty prompt, no chat template), 500.
bool rp_prompt_build(rp_server *s, const rp_api_req *q, rp_prompt *out, rp_api_error *e);

typedef enum rp_drv_event_type {
    RP_DRV_CONTENT = 0,   // text delta
    RP_DRV_REASONING = 1, // reasoning delta
    RP_DRV_TOOL_CALL = 2, // one whole tool call (the parser's START..END, never taken back)
} rp_drv_event_type;

typedef struct rp_drv_event {
    rp_drv_event_type type;
    const char *text;     // CONTENT/REASONING: the delta; TOOL_CALL: the arguments (a JSON object's text)
    size_t len;
    int index;            // TOOL_CALL: 0, 1, ... in the reply
    const char *id;       // TOOL_CALL: "call_..."
    const char *name;     // TOOL_CALL: the function name
} rp_drv_event;

typedef enum rp_drv_finish {
    RP_DRV_RUNNING = 0,
    RP_DRV_STOP = 1,        // the model ended its reply (end-of-generation token)
    RP_DRV_STOP_STRING = 2, // a stop string matched (not part of the text)
    RP_DRV_LENGTH = 3,      // max_tokens or the context reached
    RP_DRV_CANCELLED = 4,   // the client went away or the server is shutting down
    RP_DRV_ERROR = 5,       // the engine failed (rp_drv_info.error)
} rp_drv_finish;

// Where a generation stands. Strings valid while the driver lives.
typedef struct rp_drv_info {
    rp_drv_finish finish;
    const char *stop_string; // RP_DRV_STOP_STRING: which one
    int n_prompt, n_cached;
    int n_completion;        // tokens the engine produced up to the stop
    int n_tool_calls;        // tool calls emitted so far
    const char *error;       // RP_DRV_ERROR: the engine's message
} rp_drv_info;

typedef struct rp_drv rp_drv;

// Builds the prompt, checks the context and submits. Errors fill e: 400
// (prompt errors, context_length_exceeded "the prompt has N tokens, the
// context is M"), 503 with retry_after when the engine queue is full, 500.
// The driver reports token counts and timings into r->stats as it goes.
bool rp_drv_start(rp_http_req *r, const rp_api_req *q, rp_drv **out, rp_api_error *e);
// Waits up to timeout_s for tokens, runs them through detokenizer, stop
// strings and parser, and returns this round's events (valid until the next
// call; possibly none). *done becomes true once the generation has finished
// and every event has been returned; rp_drv_get_info then says why.
rp_status rp_drv_next(rp_drv *d, double timeout_s, const rp_drv_event **ev, size_t *n, bool *done);
// The logprobs of the tokens consumed since the previous take (requests with
// logprobs >= 0; otherwise none). Valid until the next rp_drv_next.
void rp_drv_take_logprobs(rp_drv *d, const rp_gen_token **toks, int *n);
void rp_drv_get_info(const rp_drv *d, rp_drv_info *out);
// True once the engine has admitted the request, so r->stats holds its cached
// prompt tokens, or once the request has ended. Does not wait.
bool rp_drv_admitted(rp_drv *d);
// Stops the generation (the client went away); rp_drv_next then finishes with CANCELLED.
void rp_drv_cancel(rp_drv *d);
// Cancels if running, releases the engine request and the parser. NULL is a no-op.
void rp_drv_destroy(rp_drv *d);

// A whole reply, for non-streaming requests.
typedef struct rp_drv_call {
    char *id, *name, *arguments;
} rp_drv_call;

typedef struct rp_drv_result {
    rp_buf content, reasoning;
    rp_drv_call *calls; // (n_calls)
    int n_calls;
    rp_gen_token *logprobs; // (n_logprobs) every consumed token's, when asked
    int n_logprobs;
    rp_drv_info info;
} rp_drv_result;

void rp_drv_result_deinit(rp_drv_result *res);
// Runs the generation to its end, checking every RP_STREAM_WAIT_S that the
// client is still there (if not: cancels, info.finish CANCELLED). *res is
// initialized here (deinit it even on failure). RP_ERR_NOMEM.
rp_status rp_drv_collect(rp_drv *d, rp_drv_result *res);
// A generation that ended in RP_DRV_ERROR (500 "generation failed: ...") or
// RP_DRV_CANCELLED (503): fills e, with `code` as its code (NULL for none), and
// returns true. False for a generation that finished.
bool rp_drv_failed(const rp_drv_info *info, const char *code, rp_api_error *e);
// rp_drv_collect, then rp_drv_failed: true when *res holds the whole reply;
// false with e filled (500 when collecting failed). *res is initialized here
// (deinit it even on failure).
bool rp_drv_complete(rp_drv *d, const char *code, rp_drv_result *res, rp_api_error *e);

/* ---- stop strings (gen.c, unit-tested on their own) ------------------------ */

// Finds stop strings in streamed text. Text is pushed in pieces; what cannot
// be the start of a stop string is released at once, the rest is held until
// decided. Caller-owned: init / deinit. The strings are borrowed.
typedef struct rp_stop_matcher {
    char *const *stops;
    int n_stops;
    size_t max_len; // longest stop string
    rp_buf held;    // text not yet released
    rp_buf out;     // the last push's released text
    int matched;    // index of the matched stop string, -1 while none
} rp_stop_matcher;

void rp_stop_init(rp_stop_matcher *m, char *const *stops, int n_stops);
void rp_stop_deinit(rp_stop_matcher *m);
// Pushes len bytes; *out/*out_len receive the text now safe to release (valid
// until the next call). Returns true when a stop string matched: *out is then
// the text before it, and everything after is dropped (push no more).
bool rp_stop_push(rp_stop_matcher *m, const char *text, size_t len, const char **out, size_t *out_len);
// The generation ended: releases whatever is held.
void rp_stop_flush(rp_stop_matcher *m, const char **out, size_t *out_len);

/* ---- metrics (metrics.c) --------------------------------------------------- */

// Creates the counters and, with an engine (borrowed: it must outlive the metrics), starts the
// sampler thread of the throughput history (one sample now, then every 5 s). model_name (copied)
// is the model_name label of the series; the token histograms' buckets reach the engine's
// context (1, 2, 5, 10, ... as vLLM's). RP_ERR_NOMEM.
rp_status rp_metrics_create(rp_engine *e, const char *model_name, rp_metrics **out);
// Stops and joins the sampler, frees m. NULL is a no-op.
void rp_metrics_destroy(rp_metrics *m);
// Adds one sample of the engine's token counters to the history now (the sampler's step; tests).
void rp_metrics_sample(rp_metrics *m);
// Records one finished request (route, status, token counts, timings). Any thread.
void rp_metrics_record(rp_metrics *m, const rp_http_req *r);
// Appends the Prometheus text exposition (with the engine's gauges and, when
// conns is not NULL, the connection counters) to out.
void rp_metrics_render(rp_metrics *m, rp_engine *e, rp_conn_table *conns, rp_buf *out);

#endif
