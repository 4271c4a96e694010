/*
 * sample.h - turning a row of logits into the next token.
 *
 * A request's sampler (rp_sampler) holds its parameters, its RNG and the token
 * counts its penalties need. Each step runs one fixed chain over a scratch copy
 * of the logits (the caller's logits are never written):
 *
 *   1. sanitize    NaN -> -inf (a NaN logit is never chosen)
 *   2. penalties   repetition (HF/llama.cpp: l > 0 ? l / r : l * r, for every
 *                  token in the window, prompt or generated), then presence and
 *                  frequency (OpenAI: l -= pres * [c > 0] + freq * c, c = times
 *                  the token was generated within the window)
 *   3. greedy      temperature == 0: argmax, ties -> lowest id. Stops here.
 *   4. temperature l = (l - max) / T (shifted so nothing overflows)
 *   5. top-k       keep the k largest (ties -> lower id first)
 *   6. top-p       keep the shortest prefix of the sorted survivors whose
 *                  probability mass reaches top_p (at least one token)
 *   7. min-p       keep tokens with p >= min_p * p_max
 *   8. softmax     over the survivors
 *   9. draw        u = uniform [0,1) from xoshiro256** (state seeded by
 *                  splitmix64(seed)), the first survivor whose running sum
 *                  exceeds u * total
 *
 * Everything is a fixed sequence of IEEE operations with a total order on ties,
 * so the same parameters, seed, history and logits give the same token on any
 * machine (same libm). If every logit is -inf/NaN the greedy pick is token 0
 * and sampling is uniform; tokens at +inf share all the mass.
 *
 * Memory: everything is sized at rp_sampler_create (a few arrays of n_vocab);
 * accept/sample/probs never allocate.
 *
 * Threads: a sampler belongs to one request and is used by one thread at a time
 * (the engine thread). rp_sample_params is plain data.
 */
#ifndef RP_SAMPLE_H
#define RP_SAMPLE_H

#include "../base/base.h"

// Largest penalty window accepted (tokens); -1 means "the whole history" and has no limit.
#define RP_SAMPLE_LAST_N_MAX (1 << 20)
#define RP_SAMPLE_TEMPERATURE_MAX 100.0f
#define RP_SAMPLE_REPETITION_MAX 10.0f
#define RP_SAMPLE_PENALTY_MAX 2.0f // presence/frequency: [-2, 2] as OpenAI

typedef struct rp_sample_params {
    float temperature;        // 0 = greedy; (0, 100]
    int top_k;                // 0 = off; k >= n_vocab is off too
    float top_p;              // 1 = off; (0, 1]
    float min_p;              // 0 = off; [0, 1]
    float repetition_penalty; // 1 = off; (0, 10]; over prompt and generated tokens in the window
    float presence_penalty;   // 0 = off; [-2, 2]; over generated tokens in the window
    float frequency_penalty;  // 0 = off; [-2, 2]; over generated tokens in the window
    int penalty_last_n;       // window of most recent tokens the penalties see; -1 = all, 0 = none
    uint64_t seed;            // any value, 0 included
} rp_sample_params;

// OpenAI's defaults: temperature 1, every filter and penalty off, window -1, seed 0.
void rp_sample_params_default(rp_sample_params *p);

// RP_OK, or RP_ERR_INVALID with a message naming the field, its value and the
// allowed range (suitable for an HTTP 400). NaN is rejected everywhere.
rp_status rp_sample_params_validate(const rp_sample_params *p);

typedef struct rp_sampler rp_sampler;

// Creates a sampler for a vocabulary of n_vocab tokens (n_vocab > 0). Validates
// p (RP_ERR_INVALID) and copies it. RP_ERR_NOMEM if the scratch cannot be
// allocated. *out is NULL on error.
rp_status rp_sampler_create(const rp_sample_params *p, int32_t n_vocab, rp_sampler **out);
void rp_sampler_destroy(rp_sampler *s);

// Adds one token to the history the penalties see: prompt tokens (is_prompt)
// count for the repetition penalty only, generated ones for all three. Feed the
// prompt first, then every token emitted. Ids outside [0, n_vocab) are ignored.
void rp_sampler_accept(rp_sampler *s, int32_t token, bool is_prompt);

// Forgets the history and reseeds the RNG with `seed` (parameters stay).
void rp_sampler_reset(rp_sampler *s, uint64_t seed);

// One uniform draw in [0, 1) (53 random bits) from the sampler's seeded RNG,
// advancing it: for other draws that must follow the request's seed
// (speculative rejection sampling).
double rp_sampler_uniform(rp_sampler *s);

// Picks the next token from logits (n_vocab floats, not modified) by the chain
// above. Advances the RNG only when temperature > 0. Does not accept the token:
// call rp_sampler_accept with it if it is kept.
int32_t rp_sampler_sample(rp_sampler *s, const float *logits);

// The distribution step 9 draws from: probs_out (n_vocab floats) gets the
// probability of every token after the chain, 0 for filtered tokens, summing to
// 1 (a one-hot at the greedy token when temperature == 0). Does not touch the RNG.
// For logprobs and for speculative rejection sampling.
rp_status rp_sampler_probs(rp_sampler *s, const float *logits, float *probs_out);

// The model's log-probabilities as the request sees them, for logprobs:
// logprobs_out (n_vocab floats) gets the log-softmax of the logits after steps
// 1-2 (sanitize, penalties), before temperature and the filters, so it does
// not depend on temperature, top-k/p or min-p. -inf for tokens at -inf (e.g.
// masked by a grammar); if every logit is -inf all get -log(n_vocab); tokens at
// +inf share the mass. Does not touch the RNG; never allocates.
void rp_sampler_logprobs(rp_sampler *s, const float *logits, float *logprobs_out);

int32_t rp_sampler_n_vocab(const rp_sampler *s);

#endif
