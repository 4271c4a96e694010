/*
 * grammar_int.h - the grammar module's internals, shared by its .c files and tests.
 *
 * json_state is the byte-level JSON recognizer's whole state: a mode, a few
 * bytes of detail and the open containers as one bit each, 16 bytes that are
 * copied freely (the mask simulates every token from a copy). json_step
 * advances it over one byte or says the byte cannot come next.
 *
 * The vocabulary is kept as a trie over the tokens' decoded bytes, stored in
 * preorder as parallel arrays: node k's subtree is [k, end[k]), and since the
 * tokens are sorted by their bytes, the tokens below node k are the contiguous
 * run [first[k], first[end[k]]) of order[], those ending exactly at k being
 * [first[k], first[k + 1]). The mask walks the trie once with one state per
 * depth, skipping the subtree of any byte the state rejects (so tokens are
 * grouped by first byte, and shared prefixes are read once).
 *
 * A compiled schema (rp_json_schema) is a table of nodes, each a set of JSON
 * types with their constraints: objects list their properties in the schema's
 * order, literal sets (enum, const, true/false/null) are sorted byte strings,
 * string patterns and formats are byte DFAs (regex.c). The matcher's state
 * (match_state) is the lexer's json_state for the scalar or free value being
 * read, the schema position (mode, node, a range of literal/key candidates or a
 * DFA state, a number's digits) and one frame per open container: small and
 * fixed-size, copied freely like json_state.
 *
 * File map: json_match.c (the lexer, the schema matcher, mask, accept),
 * json_vocab.c (trie build), schema.c (JSON Schema -> nodes, limits, cache),
 * regex.c (pattern -> DFA).
 */
#ifndef RP_GRAMMAR_INT_H
#define RP_GRAMMAR_INT_H

#include "grammar.h"

#define JSON_MAX_DEPTH 64   // open objects/arrays at most (one bit each in json_state.stack)
#define JSON_MAX_WS 32      // consecutive whitespace bytes between tokens at most
#define JSON_MAX_PIECE 4096 // longer tokens are never allowed (bounds the walk's state stack)

// Modes of json_state.
enum {
    JM_START,      // before the top-level '{'
    JM_OBJ_FIRST,  // after '{': a key or '}'
    JM_OBJ_KEY,    // after ',' in an object: a key
    JM_COLON,      // after a key
    JM_VALUE,      // after ':' or after ',' in an array: a value
    JM_ARR_FIRST,  // after '[': a value or ']'
    JM_AFTER,      // after a value: ',' or the closing bracket of the innermost container
    JM_DONE,       // the top-level object is closed: trailing whitespace only
    JM_STR,        // inside a string, at a character boundary
    JM_STR_UTF8,   // inside a multi-byte character: aux bytes still to come, the next in [lo, hi]
    JM_STR_ESC,    // after a backslash
    JM_STR_HEX,    // inside \uXXXX: aux digits read
    JM_STR_LOW_BS, // after a high surrogate escape: '\' of the low one must follow
    JM_STR_LOW_U,  // after that '\': 'u'
    JM_NUM_MINUS,  // after '-'
    JM_NUM_ZERO,   // a leading 0 (complete)
    JM_NUM_INT,    // integer digits (complete)
    JM_NUM_DOT,    // after '.'
    JM_NUM_FRAC,   // fraction digits (complete)
    JM_NUM_E,      // after 'e'/'E'
    JM_NUM_ESIGN,  // after the exponent's sign
    JM_NUM_EXP,    // exponent digits (complete)
    JM_LIT,        // inside true/false/null: aux = which, lo = bytes matched
};

// json_state.flags
enum {
    JF_KEY = 1,  // the string being read is an object key
    JF_D0 = 2,   // \u escape: the first hex digit was D
    JF_HIGH = 4, // \u escape: a high surrogate (D800-DBFF)
    JF_LOW = 8,  // \u escape: must be a low surrogate (DC00-DFFF)
};

// Plain data; copy by assignment. Threads: whoever holds the copy.
typedef struct json_state {
    uint64_t stack; // bit i: the container at depth i+1 is an object (1) or an array (0)
    uint8_t depth;  // open containers, 0..JSON_MAX_DEPTH
    uint8_t mode;   // JM_*
    uint8_t ws;     // whitespace bytes since the last other byte (structural modes)
    uint8_t aux;    // mode detail (see the modes)
    uint8_t lo, hi; // JM_STR_UTF8: range of the next byte; JM_LIT: lo = bytes matched
    uint8_t flags;  // JF_*
    uint8_t pad_;
} json_state;

// The state before any byte.
void json_state_init(json_state *s);
// Advances over byte c; false (s then unspecified) if c cannot come next.
bool json_step(json_state *s, uint8_t c);
// Advances over n bytes on a copy and commits only if all are accepted.
bool json_feed(json_state *s, const uint8_t *p, size_t n);
// One complete top-level object has been read.
static inline bool json_done(const json_state *s)
{
    return s->mode == JM_DONE;
}

// Byte categories (rp_json_vocab.cats, rx_dfa.loop): a pattern's DFA state that
// stays itself on every byte of some categories lets a trie subtree made only of
// those through at once.
enum {
    BC_LOWER = 1,  // a-z
    BC_UPPER = 2,  // A-Z
    BC_DIGIT = 4,  // 0-9
    BC_SPACE = 8,  // ' '
    BC_PUNCT = 16, // _ - .
    BC_OTHER = 32, // the other bytes a string holds unescaped in ASCII (0x21-0x7F)
    BC_NEVER = 64, // '"', '\', controls and bytes >= 0x80: never let through by category
};

static inline uint8_t byte_cat(uint8_t c)
{
    if (c >= 'a' && c <= 'z')
        return BC_LOWER;
    if (c >= 'A' && c <= 'Z')
        return BC_UPPER;
    if (c >= '0' && c <= '9')
        return BC_DIGIT;
    if (c == ' ')
        return BC_SPACE;
    if (c == '_' || c == '-' || c == '.')
        return BC_PUNCT;
    if (c > 0x20 && c < 0x80 && c != '"' && c != '\\')
        return BC_OTHER;
    return BC_NEVER;
}

// What a token id may be.
enum {
    JT_NEVER = 0, // special, unused, empty or too long: never allowed
    JT_EOG = 1,   // end of generation: allowed once the object is complete
    JT_CAND = 2,  // ordinary text: allowed when its bytes continue the grammar
};

// Immutable after build; shared by all matches.
struct rp_json_vocab {
    int32_t n_tok; // token ids 0..n_tok-1 (the tokenizer's size)
    uint8_t *kind; // (n_tok) JT_*
    uint32_t *off; // (n_tok + 1) token id -> its bytes in blob: [off[id], off[id+1])
    uint8_t *blob; // every token's bytes (JT_CAND ones only; others empty)
    int32_t *eog;  // (n_eog) end-of-generation ids
    int32_t n_eog;

    // candidates sorted by bytes
    int32_t n_cand;
    int32_t *order; // (n_cand) token ids
    int32_t *other; // (n_other) ids that are neither candidates nor end-of-generation
    int32_t n_other;
    // trie in preorder; node 0 is the root (the empty prefix)
    int32_t n_node;
    uint8_t *byte;    // (n_node) the byte leading into the node
    uint8_t *plain;   // (n_node) 1: every token below has a remainder (after this depth) made of
                      //   whole UTF-8 characters other than '"', '\' and controls
    uint8_t *cats;    // (n_node) BC_* of every byte in the remainders below (after this depth)
    uint16_t *depth;  // (n_node)
    uint32_t *end;    // (n_node) one past the node's subtree
    uint32_t *first;  // (n_node + 1) first candidate index below the node; first[n_node] = n_cand
    uint32_t max_len; // longest candidate
};


// A token for json_vocab_build: its bytes and JT_* kind.
typedef struct json_tok {
    const uint8_t *p;
    size_t len;
    uint8_t kind;
} json_tok;

// Builds a vocab from n token descriptions (ids 0..n-1): tokens longer than
// JSON_MAX_PIECE or empty become JT_NEVER. Errors: RP_ERR_NOMEM, RP_ERR_RANGE
// (over 2^31 bytes or ids).
rp_status json_vocab_build(const json_tok *toks, int32_t n, rp_json_vocab **out);

/* ---- patterns (regex.c) ----------------------------------------------------- */

#define RX_DEAD 0xFFFF

// A byte DFA over a string's unescaped content: state 0 is the start,
// next[s * 256 + c] the next state or RX_DEAD (also for every byte that cannot
// lead to acceptance, and for '"', '\' and controls). Owned by its schema.
typedef struct rx_dfa {
    uint16_t *next;  // (n_states * 256)
    uint8_t *accept; // (n_states)
    uint8_t *loop;   // (n_states) BC_* whose every byte leads the state to itself
    int n_states;
} rx_dfa;

// Compiles `pattern` (len bytes, NUL-terminated for messages) within budget_ms
// of wall time. Errors: RP_ERR_UNSUPPORTED (a construct outside the subset, or
// no match writable without escapes), RP_ERR_INVALID (malformed), RP_ERR_LIMIT
// (over max_states DFA states, the NFA bound or the time), RP_ERR_NOMEM.
rp_status rx_compile(const char *pattern, size_t len, int max_states, double budget_ms, rx_dfa *out);
void rx_dfa_deinit(rx_dfa *d);
// Whole-string match of n content bytes (tests).
bool rx_match(const rx_dfa *d, const uint8_t *p, size_t n);

/* ---- compiled schemas (schema.c) ------------------------------------------- */

#define SC_MAX_DEPTH 32   // (a multiple of 4) open containers a schema document may have (frames in match_state)
#define SC_NONE 0xFFFF    // no node / no limit (uint16 fields)
#define SC_DEPTH_INF 0xFF // node depth: cannot be completed

// sc_node.kind
enum {
    SK_ANY,   // any JSON value (read by the plain lexer)
    SK_STR,   // a string, dfa >= 0: matching the pattern/format
    SK_NUM,   // a number (SF_MIN/SF_MAX: bounded; then no exponent)
    SK_INT,   // an integer (integer syntax only)
    SK_OBJ,   // an object: props in schema order (or SF_OBJ_FREE: any members)
    SK_ARR,   // an array of `items`
    SK_LIT,   // one of a set of literal JSON texts (enum, const, true/false/null)
    SK_UNION, // one of alts, chosen by the value's first byte (their first bytes are disjoint)
};

// sc_node.flags
enum {
    SF_OBJ_FREE = 1, // SK_OBJ with any members (no properties listed)
    SF_MIN = 2,      // num_min applies
    SF_MAX = 4,      // num_max applies
    SF_XMIN = 8,     // exclusive
    SF_XMAX = 16,
    SF_DONE = 32, // compiled (its contents are final; set during the compile)
};

// A set of byte strings sorted by their bytes (literal values, object keys):
// entries [first, first + n) of the schema's strs.
typedef struct sc_strs {
    uint32_t first, n;
} sc_strs;

typedef struct sc_str {
    uint32_t off, len; // bytes in the schema's blob
    uint16_t val;      // keys: the property's index in its object
} sc_str;

typedef struct sc_prop {
    uint16_t node;
    uint8_t required;
} sc_prop;

typedef struct sc_node {
    uint8_t kind, flags;
    uint8_t depth;           // fewest open containers (its own included) a value needs; SC_DEPTH_INF: none fits
    uint16_t items;          // SK_ARR: the items' node
    uint16_t min_items, max_items; // max SC_NONE: unbounded
    int32_t dfa;             // SK_STR: index into dfas, -1: any string
    int32_t set;             // SK_LIT: the literals; SK_OBJ: the keys (index into sets)
    uint32_t first_prop, n;  // SK_OBJ: props[first_prop..+n) in schema order; SK_UNION: alts[first_prop..+n)
    uint32_t req;            // SK_OBJ: next_req[req + i] = first required index >= i (i = 0..n), n if none
    double num_min, num_max;
    uint64_t first[4];       // bytes a value may start with
} sc_node;

struct rp_json_schema {
    sc_node *nodes;
    int n_nodes, cap_nodes;
    uint16_t root;
    sc_prop *props;     // every object's properties, object by object
    uint16_t *next_req; // per object, n + 1 entries (sc_node.req)
    uint16_t *alts;     // every union's alternatives
    uint32_t n_props, cap_props, n_req, cap_req, n_alts, cap_alts;
    sc_strs *sets;    // literal and key sets
    uint32_t n_sets, cap_sets;
    sc_str *strs;
    uint32_t n_strs, cap_strs;
    uint8_t *blob;
    size_t n_blob, cap_blob;
    rx_dfa *dfas;
    int n_dfas, cap_dfas;
    int refs;         // atomic
    uint64_t hash;
    char *suffix;     // text that must follow the value before it is complete (NULL: none)
    uint16_t suffix_len;
};

// The schema of json_object mode: any JSON object (static, never freed).
const rp_json_schema *json_schema_any_object(void);

/* ---- the matcher's state (json_match.c) ------------------------------------ */

typedef struct sc_frame {
    uint16_t node; // the container's node
    uint16_t pos;  // object: properties emitted through index pos-1 (next keys from pos); array: items so far
} sc_frame;

// Schema modes (match_state.mode).
enum {
    SM_VALUE,     // a value of `node` (or whitespace)
    SM_OBJ_FIRST, // after '{': a key or '}'
    SM_OBJ_KEY,   // after ',' in an object: a key
    SM_KEY,       // inside a key: candidates [lo, hi) of the object's keys, off bytes read
    SM_COLON,     // after a key; `node` is the property's
    SM_ARR_FIRST, // after '[': an item or ']'
    SM_AFTER,     // after a value in a container: ',' or its end
    SM_STR,       // inside a string of `node` (lex: JM_STR*), sub: DFA state
    SM_NUM,       // inside a number of `node` (lex: JM_NUM*)
    SM_LIT,       // inside a literal of `node`'s set: candidates [lo, hi), off bytes read
    SM_FREE,      // inside any JSON value (lex from JM_VALUE at depth 0)
    SM_DONE,      // the top-level value is complete
};

typedef struct match_state {
    json_state lex;  // the lexer for strings, numbers and free values
    int64_t mant;    // SM_NUM with bounds: the digits read (integer and fraction), at most 18
    uint16_t node;
    uint16_t lo, hi, off; // SM_KEY / SM_LIT candidates; SM_STR: off = DFA state
    uint8_t mode;    // SM_*
    uint8_t depth;   // frames in use
    uint8_t ws;      // whitespace bytes in a row
    uint8_t ndig;    // SM_NUM: digits in mant
    int8_t frac;     // SM_NUM: fraction digits, -1 before '.'
    uint8_t neg;     // SM_NUM: a leading '-'
    uint8_t pad_[2];
    sc_frame f[SC_MAX_DEPTH];
} match_state;

void match_state_init(match_state *s, const rp_json_schema *sc);
bool match_step(const rp_json_schema *sc, match_state *s, uint8_t c);
bool match_feed(const rp_json_schema *sc, match_state *s, const uint8_t *p, size_t n);
// The text so far is one complete value of the schema (followed by nothing that must still come).
bool match_complete(const rp_json_schema *sc, const match_state *s);
// The match's current state and grammar (for tests and diagnostics).
const match_state *json_match_state(const rp_json_match *m);
const rp_json_schema *json_match_schema(const rp_json_match *m);

#endif
