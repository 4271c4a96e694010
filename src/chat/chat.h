/*
 * chat.h - chat templates: the Jinja that Hugging Face `chat_template`s are written in.
 *
 * A template is parsed once (rp_chat_template_create) and rendered per request
 * (rp_chat_template_render) with the semantics of transformers'
 * apply_chat_template: jinja2's ImmutableSandboxedEnvironment with trim_blocks and
 * lstrip_blocks, the loopcontrols extension (break/continue), transformers' own
 * `tojson` filter (json.dumps: key order kept, non-ASCII unescaped, optional indent)
 * and the globals raise_exception(msg) and strftime_now(fmt). Values follow Python:
 * `{{ 1.0 }}` is "1.0", `{{ true }}` is "True", `{{ none }}` is "None", a list prints
 * as its repr, dicts keep insertion order, undefined prints as "". `|safe` and
 * `|e` make markupsafe Markup strings, which jinja2 keeps even with autoescape off:
 * `x|safe + value` HTML-escapes value (&#34; for every quote), as transformers renders it.
 *
 * A render is bounded: output size, loop iterations, call/recursion depth and
 * memory all have limits, so a hostile template fails with RP_ERR_LIMIT instead
 * of hanging or crashing.
 *
 * Threads: a template is immutable after create; any number of threads may
 * render it at once (each render has its own memory).
 *
 * The second half of this header is the model-output parser (parse_*.c).
 */
#ifndef RP_CHAT_H
#define RP_CHAT_H

#include "../base/base.h"

#include <jansson.h>

typedef struct rp_chat_template rp_chat_template;

// Parses `len` bytes of Jinja source. Errors: RP_ERR_INVALID with
// "template error: <what> at line L" for a syntax error, RP_ERR_LIMIT for a
// template nested past the parser's depth limit, RP_ERR_NOMEM.
rp_status rp_chat_template_create(const char *source, size_t len, rp_chat_template **out);
void rp_chat_template_destroy(rp_chat_template *t);

// What a template is rendered with; all pointers are borrowed for the call.
typedef struct rp_chat_render_params {
    const json_t *messages;     // array of message objects (role, content as a string or a list of parts,
                                // tool_calls with arguments as objects, tool_call_id, name, reasoning_content...)
    const json_t *tools;        // array of tools (OpenAI function format), or NULL: `tools` is then none
    bool add_generation_prompt; // `add_generation_prompt`
    const json_t *kwargs;       // object or NULL: extra variables (chat_template_kwargs such as enable_thinking);
                                // they override bos_token/eos_token
    const char *bos_token;      // the tokenizer's special tokens; NULL: the variable is undefined, as when
    const char *eos_token;      // transformers' special_tokens_map lacks it
} rp_chat_render_params;

// Renders the template. `documents` is none, as in transformers. *out is rp_malloc'd and
// NUL-terminated; *out_len (may be NULL) excludes the NUL. Errors: RP_ERR_INVALID with
// "template error: <what>" (a template runtime error, or raise_exception's message exactly as
// given after the prefix), RP_ERR_LIMIT (output over 16 MiB, too many loop iterations, calls
// nested too deeply, render memory over its cap), RP_ERR_NOMEM. kwargs naming messages,
// tools, documents or add_generation_prompt are RP_ERR_INVALID (transformers raises too).
rp_status rp_chat_template_render(const rp_chat_template *t, const rp_chat_render_params *p, char **out,
                                  size_t *out_len);

// Built-in chat templates for models that ship none (builtin_templates.c): "chatml" (the default,
// RP_CHAT_DEFAULT_TEMPLATE), "llama3", "mistral", each with its family's tool-call form. Returns the Jinja
// source (static, NUL-terminated), NULL for an unknown name.
const char *rp_chat_builtin_template(const char *name);
// The i-th built-in's name (i from 0), NULL past the last.
const char *rp_chat_builtin_name(size_t i);
#define RP_CHAT_DEFAULT_TEMPLATE "chatml"

/* ==== model output: reasoning and tool calls ==================================== */

/*
 * Output parsing - turning a model's generated text into content, reasoning and tool
 * calls, per model family, streaming or all at once.
 *
 * The parser is fed the text as the detokenizer produces it, in chunks split
 * anywhere, and answers each push with a list of events:
 *
 *   CONTENT / REASONING   text deltas
 *   TOOL_START            a call begins: index, id, name (as soon as the name is known)
 *   TOOL_ARGS             a fragment of the call's arguments (a JSON object as
 *                         text; the fragments of one call concatenate to it)
 *   TOOL_END              the call is complete and its arguments are valid JSON
 *   TOOL_ABORT            the call turned out malformed (bad JSON, truncated):
 *                         forget it; its raw text follows as CONTENT, so nothing
 *                         is lost. The next call reuses the index.
 *
 * The events depend only on the bytes, never on where the chunks split: every
 * decision is made byte by byte, and text that might be the start of a marker
 * (`<tool_call>`, `</think>`, ...) is held back until it is decided, so no part
 * of a marker ever reaches CONTENT. rp_parse_all pushes the whole text once and
 * finishes, so both paths are the same code.
 *
 * Arguments are the model's JSON with the whitespace outside strings removed
 * (raw control characters inside strings are escaped); Qwen3-Coder's XML
 * parameters (Qwen3-Coder, Qwen3.5, Qwen3.6) are converted to JSON, typed by
 * the tool's JSON schema (a value `null` is null; one that does not parse as
 * its type is a string), and a call naming a function the request's tools do
 * not have is malformed (content). Whitespace next to a marker (before/after a
 * call, inside the think tags) is dropped.
 *
 * Input is expected to be UTF-8 in whole characters (the streaming detokenizer
 * guarantees it); then every delta is whole characters too. Other bytes pass
 * through and never crash anything.
 *
 * Threads: a parser belongs to one request and is used by one thread at a time.
 * Configs and results are plain data.
 */

// Tool-call formats (values appended, never renumbered).
typedef enum rp_tool_format {
    RP_TOOL_FORMAT_NONE = 0,        // no tool parsing: everything is content
    RP_TOOL_FORMAT_HERMES = 1,      // <tool_call>{"name": .., "arguments": {..}}</tool_call> (Hermes, Qwen2.5, Qwen3)
    RP_TOOL_FORMAT_QWEN3_CODER = 2, // <tool_call><function=NAME><parameter=P>value</parameter></function></tool_call>
                                    // (Qwen3-Coder, Qwen3.5, Qwen3.6)
    RP_TOOL_FORMAT_LLAMA3 = 3,      // {"name": .., "parameters": {..}} as the reply; <|python_tag|> forms
    RP_TOOL_FORMAT_MISTRAL = 4,     // [TOOL_CALLS][{"name": .., "arguments": {..}}] or [TOOL_CALLS]NAME[ARGS]{..}
    RP_TOOL_FORMAT_DEEPSEEK = 5, // <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME ...
    RP_TOOL_FORMAT_COUNT = 6,
} rp_tool_format;

typedef enum rp_reasoning_format {
    RP_REASONING_FORMAT_NONE = 0,  // no reasoning parsing
    RP_REASONING_FORMAT_THINK = 1, // <think>..</think> at the start of the reply (Qwen3, Qwen3.5/3.6, DeepSeek-R1)
    RP_REASONING_FORMAT_COUNT = 2,
} rp_reasoning_format;

typedef struct rp_parser_config {
    rp_tool_format tools;
    rp_reasoning_format reasoning;
    bool think_open;        // the prompt already opened <think>: the reply starts inside it
                            // (see rp_parse_prompt_opens_think)
    const char *tools_json; // the request's "tools" array as JSON text, or NULL; used for
                            // Qwen3-Coder parameter types. Copied at create.
    size_t tools_json_len;
    uint64_t seed; // seeds the call-id generator (same seed, same ids)
} rp_parser_config;

typedef enum rp_parse_event_type {
    RP_PARSE_EVENT_CONTENT = 0,
    RP_PARSE_EVENT_REASONING = 1,
    RP_PARSE_EVENT_TOOL_START = 2,
    RP_PARSE_EVENT_TOOL_ARGS = 3,
    RP_PARSE_EVENT_TOOL_END = 4,
    RP_PARSE_EVENT_TOOL_ABORT = 5,
} rp_parse_event_type;

typedef struct rp_parse_event {
    rp_parse_event_type type;
    int index;        // tool events: the call's index in the reply (0, 1, ...)
    const char *text; // CONTENT, REASONING, TOOL_ARGS: the delta, len bytes (not NUL-terminated)
    size_t len;
    const char *id;   // TOOL_START: NUL-terminated ("call_" + 24 alphanumerics, or 9 for Mistral)
    const char *name; // TOOL_START: NUL-terminated
} rp_parse_event;

typedef struct rp_parser rp_parser;

// Creates a parser. cfg is copied (tools_json too); an unknown format or
// unparsable tools_json is RP_ERR_INVALID; RP_ERR_NOMEM. *out is NULL on error.
rp_status rp_parser_create(const rp_parser_config *cfg, rp_parser **out);
void rp_parser_destroy(rp_parser *p);

// Feeds the next len bytes of the reply. *events/*n_events receive this push's
// events (adjacent deltas of one kind merged), owned by the parser and valid
// until the next push/finish/destroy. RP_ERR_NOMEM leaves the parser failed
// (every later call returns it); RP_ERR_INVALID after finish.
rp_status rp_parser_push(rp_parser *p, const char *text, size_t len, const rp_parse_event **events, size_t *n_events);

// Ends the reply: held-back text is decided (a partial marker is content, an
// unfinished call is aborted into content). Afterwards every started call has
// had its END or ABORT. Events as for push. The parser takes no more text.
rp_status rp_parser_finish(rp_parser *p, const rp_parse_event **events, size_t *n_events);

/* ---- whole results ---------------------------------------------------------- */

typedef struct rp_parse_call {
    char *id, *name; // NUL-terminated
    char *arguments; // NUL-terminated JSON object text
    size_t arguments_len;
} rp_parse_call;

// A reply's parsed result. Caller-owned: rp_parse_result_init (or zero it),
// apply events, then rp_parse_result_deinit. content/reasoning are NUL-terminated,
// or NULL when nothing of that kind was applied.
typedef struct rp_parse_result {
    char *content;
    size_t content_len;
    char *reasoning;
    size_t reasoning_len;
    rp_parse_call *calls; // (n_calls) completed calls, in order
    size_t n_calls;
} rp_parse_result;

void rp_parse_result_init(rp_parse_result *r);
void rp_parse_result_deinit(rp_parse_result *r);

// Accumulates events into r (ABORT removes the call it names). RP_ERR_NOMEM;
// RP_ERR_INVALID for an event sequence no parser produces.
rp_status rp_parse_result_apply(rp_parse_result *r, const rp_parse_event *ev, size_t n);

// Parses a whole reply: create, one push, finish, apply. *out is initialized
// here (deinit it even on error).
rp_status rp_parse_all(const rp_parser_config *cfg, const char *text, size_t len, rp_parse_result *out);

/* ---- selection ------------------------------------------------------------- */

// Picks the formats for a model from its chat template text and its
// architecture (config.json "model_type" or GGUF "general.architecture"; either
// may be NULL). The template decides when it shows a format's markers; the
// architecture is the fallback. Never fails: unknown models get NONE/NONE.
void rp_parser_select(const char *template_text, const char *arch, rp_tool_format *tools,
                      rp_reasoning_format *reasoning);

// Names for --tool-parser / --reasoning-parser (vLLM's where they exist):
// tools: "none", "hermes" ("qwen", "qwen2_5", "qwen3"), "qwen3_coder", "llama3_json" ("llama3",
// "llama"), "mistral", "deepseek_v3" ("deepseek", "deepseek_r1", "deepseek_v31");
// reasoning: "none", "think" ("qwen3", "deepseek_r1"). RP_ERR_INVALID for others,
// with the accepted names in the message.
rp_status rp_tool_format_from_name(const char *name, rp_tool_format *out);
rp_status rp_reasoning_format_from_name(const char *name, rp_reasoning_format *out);
const char *rp_tool_format_name(rp_tool_format f);           // canonical name, "?" if unknown
const char *rp_reasoning_format_name(rp_reasoning_format f); // canonical name, "?" if unknown

// True when the rendered prompt ends inside an open think block ("<think>" then
// only whitespace), as DeepSeek-R1's, Qwen3-Thinking's and Qwen3.5/3.6's (thinking
// on, their default) templates do: set cfg.think_open from it.
bool rp_parse_prompt_opens_think(const char *prompt, size_t len);

#endif
