/*
 * grammar.h - constrained decoding: keeping generated text inside a grammar.
 *
 * For `response_format: {"type": "json_object"}` the output must be one valid
 * JSON object. Each step, before sampling, every token whose bytes would take
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

#include "../base/base.h"
#include "../tokenizer/tokenizer.h"

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

// A match at the start of the text. `v` must outlive it. Holds the mask's
// scratch (about 6 bytes per token). Errors: RP_ERR_NOMEM.
rp_status rp_json_match_create(const rp_json_vocab *v, rp_json_match **out);
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
// Puts dst at src's position in the grammar (both made from the same vocab),
// so dst can run ahead over tokens not accepted yet (speculative drafts: the
// mask of each draft position as if the drafts before it were accepted) while
// src stays where it is. Costs a 16-byte copy; dst's scratch is its own.
void rp_json_match_copy(rp_json_match *dst, const rp_json_match *src);
// True when the text so far is one complete JSON object (possibly followed by
// whitespace).
bool rp_json_match_done(const rp_json_match *m);

#endif
