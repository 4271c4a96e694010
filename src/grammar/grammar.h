/*
 * grammar.h - constrained decoding: keeping generated text inside a grammar.
 *
 * For `response_format: {"type": "json_object"}` the output must be one valid
 * JSON object; for `json_schema` one JSON value of the schema (rp_json_schema:
 * the subset of JSON Schema OpenAI documents for structured outputs, compiled
 * once and cached by its text). Each step, before sampling, every token whose bytes would take
 * the text so far out of the set of JSON-object prefixes gets logit -inf; once
 * the object is closed only end-of-generation tokens (and a few bytes of
 * trailing whitespace) remain. Whatever the model or the sampler does, the
 * text is then a JSON object (or a prefix of one if max_tokens cuts it).
 *
 * The recognizer is a byte-level pushdown automaton for RFC 8259 JSON (strings
 * with escapes and whole UTF-8 characters, paired surrogate escapes, numbers,
 * literals, nesting up to 64 deep), with runs of whitespace between tokens
 * bounded (32 bytes) so a model cannot loop on blanks forever.
 *
 * A token's bytes are its decoded piece (rp_tok_piece), i.e. what the
 * detokenizer streams. The text a client sees differs only where a
 * SentencePiece decoder strips the first leading space (whitespace before the
 * '{' is allowed anyway) and, for rp_tok_decode with clean_up_tokenization,
 * where spaces before punctuation are removed (the text stays valid JSON).
 *
 * rp_json_vocab holds every token's bytes once per tokenizer (immutable, shared
 * by all requests); rp_json_match is one request's position in the grammar.
 *
 * Threads: a vocab is immutable after create (share it freely); a match
 * belongs to one thread at a time (the engine thread).
 */
#ifndef RP_GRAMMAR_H
#define RP_GRAMMAR_H

#include <jansson.h>

#include "../base/base.h"
#include "../tokenizer/tokenizer.h"

/* ---- schemas ------------------------------------------------------------------ */

typedef struct rp_json_schema rp_json_schema;

// Bounds on what a schema may cost (the compile checks each; RP_ERR_LIMIT past one).
typedef struct rp_json_schema_limits {
    size_t max_bytes;       // the schema's compact JSON text
    int max_nodes;          // subschemas
    int max_props;          // properties, all objects together
    int max_enum;           // values in one enum
    int max_depth;          // subschemas nested in subschemas ($ref targets included)
    int max_pattern_states; // DFA states of one pattern or format
    int max_ref_chain;      // $ref followed into $ref without reading anything
    double budget_ms;       // wall time of one compile
} rp_json_schema_limits;

// 256 KB, 10000 subschemas, 5000 properties, 1000 enum values, 32 deep, 1000
// pattern states, $ref chains of 32, 200 ms.
void rp_json_schema_limits_default(rp_json_schema_limits *l);

// Where a compile failed: a JSON pointer into the schema and the keyword at fault.
typedef struct rp_json_schema_error {
    char path[256];   // "#/properties/when/format"
    char keyword[64]; // "format"; "" when the schema as a whole is at fault
} rp_json_schema_error;

// Compiles a JSON Schema (jansson value, only read during the call; lim NULL:
// defaults; err NULL: not reported). Supported: type (one or a list), objects
// (properties, required, additionalProperties false/true), arrays (items,
// minItems, maxItems), enum, const, anyOf/oneOf whose alternatives start with
// different JSON types, allOf of one schema, $ref to "#..." JSON pointers
// ($defs/definitions, recursion included), string pattern and format
// (date-time, date, time, email, uuid), number/integer minimum, maximum and
// their exclusive forms; annotations (title, description, default, ...) are
// ignored. The grammar writes properties in the schema's order, only those
// listed, and strings with a pattern or format without escapes: every text it
// lets through validates against the schema. Errors (message set, err filled):
// RP_ERR_UNSUPPORTED (a keyword or combination outside that subset),
// RP_ERR_INVALID (a malformed schema, or one nothing satisfies), RP_ERR_LIMIT
// (a limit), RP_ERR_NOMEM. *out has one reference.
rp_status rp_json_schema_compile(const json_t *schema, const rp_json_schema_limits *lim, rp_json_schema **out,
                                 rp_json_schema_error *err);
// Makes the value complete only once `text` (n bytes, at most 256; copied) follows
// it, whitespace allowed before (a tool call's closing tag). Call before s is
// shared: a schema from the cache must not get one. Errors: RP_ERR_NOMEM,
// RP_ERR_RANGE.
rp_status rp_json_schema_set_suffix(rp_json_schema *s, const char *text, size_t n);
// One more reference (returns s; NULL is fine). Threads: any (atomic).
rp_json_schema *rp_json_schema_ref(const rp_json_schema *s);
// Drops a reference; the last frees it. NULL is fine.
void rp_json_schema_unref(rp_json_schema *s);

// Compiled schemas by their compact text (property order kept), at most
// `capacity`, least recently used evicted. Threads: any (one mutex; compiles
// run outside it).
typedef struct rp_json_schema_cache rp_json_schema_cache;
rp_status rp_json_schema_cache_create(int capacity, const rp_json_schema_limits *lim, rp_json_schema_cache **out);
void rp_json_schema_cache_destroy(rp_json_schema_cache *c); // NULL is fine; schemas handed out stay valid
// The compiled schema (*out: a new reference) from the cache or compiled now.
// Errors as rp_json_schema_compile's (failures are not cached).
rp_status rp_json_schema_cache_get(rp_json_schema_cache *c, const json_t *schema, rp_json_schema **out,
                                   rp_json_schema_error *err);
void rp_json_schema_cache_stats(rp_json_schema_cache *c, uint64_t *hits, uint64_t *misses);

/* ---- the token mask -------------------------------------------------------------- */

typedef struct rp_json_vocab rp_json_vocab;

// Reads every token's bytes and builds the trie the mask walks (~50-100 ms
// for a 100k-token vocabulary; a few MB). Special tokens are never allowed
// inside JSON, nor empty or unused ids; end-of-generation tokens
// (rp_tok_is_eog) are allowed only after the object is complete. `t` is only
// read during the call. Errors: RP_ERR_NOMEM, RP_ERR_RANGE (a vocabulary over
// 2 GB of text).
rp_status rp_json_vocab_create(const rp_tokenizer *t, rp_json_vocab **out);
void rp_json_vocab_destroy(rp_json_vocab *v); // NULL is fine; after every match made from it

typedef struct rp_json_match rp_json_match;

// A match at the start of the text for `schema` (NULL: any JSON object, the
// json_object mode), of which it takes a reference. `v` must outlive it. Holds
// the mask's scratch (about 6 bytes per token). Errors: RP_ERR_NOMEM.
rp_status rp_json_match_create(const rp_json_vocab *v, const rp_json_schema *schema, rp_json_match **out);
void rp_json_match_destroy(rp_json_match *m); // NULL is fine

// Sets logits[id] = -inf for every token (0 <= id < n_vocab) that cannot come
// next; leaves the others as they are. Ids at or past the vocabulary's size
// (a model row padded beyond the tokenizer) are masked. At least one token
// always remains allowed: when no token can continue, the end-of-generation
// tokens stay open, and with none of those either the row is left untouched.
// Uses the match's scratch: one thread at a time per match. Cost: one walk of
// the trie plus one write per masked id (~30-50 us for 100k tokens).
void rp_json_match_mask(const rp_json_match *m, float *logits, int32_t n_vocab);
// Advances over the token's bytes. RP_ERR_INVALID (state unchanged, message
// set) if the token was not allowed: out of range, special, or bytes that do
// not continue the object. An end-of-generation token is accepted exactly
// when the mask allows it and leaves the state as it is.
rp_status rp_json_match_accept(rp_json_match *m, int32_t id);
// Advances over n bytes of text that is already part of the output (a forced
// prefix the prompt ends with). RP_ERR_INVALID (state unchanged, message set)
// if the grammar refuses them.
rp_status rp_json_match_feed(rp_json_match *m, const char *text, size_t n);
// Puts dst at src's position in the grammar (both made from the same vocab),
// so dst can run ahead over tokens not accepted yet (speculative drafts: the
// mask of each draft position as if the drafts before it were accepted) while
// src stays where it is. dst borrows src's schema (use it while src lives).
// Costs a ~180-byte copy; dst's scratch is its own.
void rp_json_match_copy(rp_json_match *dst, const rp_json_match *src);
// True when the text so far is one complete value of the grammar (possibly
// followed by whitespace).
bool rp_json_match_done(const rp_json_match *m);

#endif
