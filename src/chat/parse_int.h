/*
 * parse_int.h - internals shared by the output parser's files (parse_*.c).
 *
 *   parse_core.c    the driver: text mode (content/reasoning, markers held back
 *                   until decided), entering and leaving calls, events, results
 *   parse_json.c    an incremental JSON scanner (one byte at a time, validating
 *                   and compacting), the {"name": .., "arguments": ..} envelope
 *   parse_tools.c   the per-family call grammars (state machines over bytes)
 *   parse_select.c  choosing formats from a template, names for flags
 *
 * The parser is a byte-at-a-time machine. In text mode each byte is content or
 * reasoning, or is held while it could still begin a marker. A marker enters
 * call mode: the family's state machine consumes bytes (all of them also kept
 * in `raw`) and answers MORE, DONE (back to text), DONE_UNREAD (back to text,
 * and this byte is text) or ERR (the structure is malformed: ABORT the call,
 * `raw` becomes content, and the byte is re-read as text). A committed call
 * (END) clears `raw`, so an abort never repeats text of an earlier call.
 * Out-of-memory is sticky (p->st), so the byte machines need no error paths.
 */
#ifndef RP_CHAT_PARSE_INT_H
#define RP_CHAT_PARSE_INT_H

#include "chat.h"

#include <jansson.h>

// Limits on what a call may hold in one piece (longer: the call is malformed).
#define PARSE_NAME_MAX 256        // a function, parameter or key name (bytes)
#define PARSE_VALUE_MAX (1 << 20) // a typed Qwen3-Coder parameter value, buffered to convert it
#define PARSE_JSON_DEPTH 128      // nesting of a JSON value

/* ---- byte buffers ------------------------------------------------------------ */

typedef struct pbuf {
    char *p;
    size_t len, cap;
} pbuf;

// Appends; on OOM sets *st (once) and appends nothing.
void pbuf_add(pbuf *b, const void *s, size_t n, rp_status *st);
void pbuf_free(pbuf *b);

/* ---- incremental JSON scanner ---------------------------------------------- */

enum {
    JS_ERR = -1,        // not JSON: the byte cannot continue the value
    JS_SKIP = 0,        // whitespace between tokens (dropped when compacting)
    JS_EMIT = 1,        // a byte of the value
    JS_CTRL = 2,        // a raw control byte inside a string (emit it escaped)
    JS_DONE = 3,        // the last byte of the value
    JS_DONE_UNREAD = 4, // the value ended before this byte (a number); the byte is not consumed
};

typedef struct js {
    uint8_t st;
    bool key;         // the string being read is an object key
    bool want_object; // the top-level value must be an object
    uint8_t n;        // progress inside a literal or \u escape
    uint16_t hex;     // the \u escape's value so far
    const char *lit;  // literal being matched (true/false/null)
    int depth;
    uint64_t stack[PARSE_JSON_DEPTH / 64]; // bit set: that level is an object
} js;

void js_init(js *j, bool want_object);
int js_feed(js *j, uint8_t c);

/* ---- parser ------------------------------------------------------------------ */

enum { R_MORE = 0, R_DONE = 1, R_DONE_UNREAD = 2, R_ERR = 3 };

// Which grammar a structure is parsed with (the tool format refined by the marker).
enum {
    FAM_TAG = 1,        // <tool_call> ... </tool_call>, JSON or Qwen3-Coder XML inside
    FAM_LLAMA_BARE = 2, // a reply that starts with '{'
    FAM_LLAMA_TAG = 3,  // after <|python_tag|>
    FAM_MISTRAL = 4,    // after [TOOL_CALLS]
    FAM_DEEPSEEK = 5,   // after <｜tool▁calls▁begin｜>
};

typedef struct pevent {
    rp_parse_event_type type;
    int index;
    size_t off, len;         // text in p->evtext
    size_t id_off, name_off; // TOOL_START
} pevent;

struct rp_parser {
    rp_parser_config cfg;
    char *tools_text;
    json_t *tools; // parsed tools array, or NULL
    rp_status st;  // sticky error (OOM)
    bool finished;
    uint64_t rng;

    // text mode
    bool in_call;
    rp_parse_event_type kind; // CONTENT or REASONING
    char hold[64];            // bytes that may begin a marker
    size_t hold_len;
    pbuf ws;         // whitespace held at the end of the text run
    bool trim_lead;  // drop whitespace until the next text byte (after a marker)
    bool at_start;   // no content and no call yet
    bool think_seen; // a think block was opened

    // call mode
    int fam, st_fam; // grammar and its state
    pbuf raw;        // bytes of the structure since the last committed call
    int call_index;  // index of the current (or next) call
    bool started;    // TOOL_START sent for the current call
    int block_calls; // calls committed in this structure
    pbuf name, key, val, args_pending;
    js j;
    // sub-machines
    const char *lit; // literal being matched
    size_t lit_pos;
    const char *const *alts; // alternatives being matched
    int n_alts, alt_hit;
    size_t alt_pos;
    unsigned alt_mask;
    // envelope
    uint8_t env_st, env_role;
    bool env_strict, env_have_name, env_have_args, env_have_type;
    int env_keys;
    // Qwen3-Coder parameters / Llama builtin calls
    int n_params;
    bool val_typed, val_nl, val_first;
    bool val_null; // a string value that is still a prefix of `null`, held in val (nothing emitted yet)
    char vhold[16];
    size_t vhold_len;
    char u8[4]; // an incomplete UTF-8 sequence in the arguments
    size_t u8_len;

    // events of the current push
    pevent *ev;
    size_t n_ev, cap_ev;
    pbuf evtext;
    rp_parse_event *out; // (cap_out) the returned events
    size_t cap_out;
};

// Core services for the grammars (parse_core.c).
void parse_emit_start(rp_parser *p, const char *name, size_t len, bool mistral_id);
void parse_emit_end(rp_parser *p);
void parse_args(rp_parser *p, const void *s, size_t n);         // arguments text (held until START)
void parse_args_escaped(rp_parser *p, const char *s, size_t n); // as the inside of a JSON string
bool parse_is_ws(uint8_t c);
bool parse_utf8_valid(const char *s, size_t n);

// Sub-machines (parse_json.c). Each *_begin resets; *_feed answers R_*.
void lit_begin(rp_parser *p, const char *lit);
int lit_feed(rp_parser *p, uint8_t c); // skips whitespace before the literal
void alt_begin(rp_parser *p, const char *const *alts, int n);
int alt_feed(rp_parser *p, uint8_t c); // skips whitespace before; p->alt_hit on R_DONE
void env_begin(rp_parser *p, bool strict);
int env_feed(rp_parser *p, uint8_t c); // the envelope object, '{' included
void args_begin(rp_parser *p);
int args_feed(rp_parser *p, uint8_t c); // a JSON object, compacted into the arguments

// Grammars (parse_tools.c).
void tools_begin(rp_parser *p, int fam);
int tools_feed(rp_parser *p, uint8_t c);
// End of text inside a structure: R_DONE (committed, p->raw is leftover text) or R_ERR (abort).
int tools_eof(rp_parser *p);

#endif
