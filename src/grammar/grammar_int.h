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
 * File map: json_match.c (recognizer, mask, accept), json_vocab.c (trie build).
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
    uint16_t *depth;  // (n_node)
    uint32_t *end;    // (n_node) one past the node's subtree
    uint32_t *first;  // (n_node + 1) first candidate index below the node; first[n_node] = n_cand
    uint32_t max_len; // longest candidate
};

// The match's current state (for tests and diagnostics).
const json_state *json_match_state(const rp_json_match *m);

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

#endif
