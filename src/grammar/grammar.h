/*
 * grammar.h - constrained decoding: keeping generated text inside a grammar.
 *
 * For `response_format: {"type": "json_object"}` the output must be one valid
 * JSON object. Each step, before sampling, every token whose bytes would take
 * the text so far out of the set of JSON-object prefixes gets logit -inf; once
 * the object is closed only end-of-generation tokens remain. Whatever the model
 * or the sampler does, the text is then a JSON object (or a prefix of one if
 * max_tokens cuts it).
 *
 * The recognizer is a byte-level pushdown automaton for RFC 8259 JSON (strings
 * with escapes and whole UTF-8 characters, numbers, literals, nesting up to a
 * fixed depth), with whitespace between tokens bounded so a model cannot loop
 * on blanks forever.
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

// Reads every token's bytes (special tokens are never allowed inside JSON;
// end-of-generation tokens are allowed only after the object is complete).
rp_status rp_json_vocab_create(const rp_tokenizer *t, rp_json_vocab **out);
void rp_json_vocab_destroy(rp_json_vocab *v);

typedef struct rp_json_match rp_json_match;

rp_status rp_json_match_create(const rp_json_vocab *v, rp_json_match **out);
void rp_json_match_destroy(rp_json_match *m);

// Sets logits[id] = -inf for every token (0 <= id < n_vocab) that cannot come
// next. At least one token always remains allowed.
void rp_json_match_mask(const rp_json_match *m, float *logits, int32_t n_vocab);
// Advances over the token's bytes. RP_ERR_INVALID (state unchanged) if the
// token was not allowed.
rp_status rp_json_match_accept(rp_json_match *m, int32_t id);
// True when the text so far is one complete JSON object.
bool rp_json_match_done(const rp_json_match *m);

#endif
