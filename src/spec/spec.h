/*
 * spec.h - the building blocks of speculative decoding.
 *
 * Speculation drafts a few tokens cheaply, verifies them all in one batched
 * forward of the target model, and keeps the longest prefix the target agrees
 * with plus one token of its own, so one step can yield several tokens while
 * the output stays exactly the target's (greedy: the same text; sampling: the
 * same distribution). The engine owns the loop; this module holds the parts it
 * calls, each pure and testable alone:
 *
 *   - prompt lookup (rp_spec_lookup): an index over a sequence's tokens that
 *     finds the longest recent n-gram match of the sequence's end and proposes
 *     the tokens that followed it; O(max_ngram) per appended token.
 *   - the adaptive controller (rp_spec_ctl): per request, from measured
 *     acceptance and measured step cost, picks the draft method and length,
 *     0 included, to maximize expected tokens per unit of time.
 *   - verification (rp_spec_verify): standard speculative rejection sampling
 *     over the target's distributions after the request's sampling chain;
 *     greedy requests accept while the draft equals the argmax.
 *   - draft model compatibility (rp_spec_check_draft): a draft model must
 *     share the target's tokenizer.
 *
 * MTP drafting itself is a model pass (rp_model_forward_mtp in model.h).
 *
 * One step of one request, as the engine is meant to run it (x = the last
 * emitted token, its KV not yet written):
 *   1. available[NGRAM] = rp_spec_lookup_follow(...) tokens, [MTP] = the cap if
 *      the model has MTP, [DRAFT] = the cap with a draft model; then
 *      rp_spec_ctl_choose gives the method and k (0: a plain step).
 *   2. Draft k tokens: prompt lookup's proposal; or k chained MTP steps (the
 *      first from the main model's hidden row of x's predecessor); or k decode
 *      steps of the draft model on its own KV. Sampled drafts keep their q rows.
 *   3. Put x and the k drafts into the batched forward (rp_model_forward_ex when
 *      MTP needs hidden rows), every one wanting logits.
 *   4. rp_spec_verify -> n accepted + next. Emit draft[0..n) and next, append
 *      them to the lookup index, truncate the KV (main, MTP, draft model) to
 *      the positions of x and the accepted drafts (next's is written by the
 *      following step); with MTP, rerun it over the accepted positions with the
 *      real hidden rows (see model.h).
 *   5. rp_spec_ctl_observe(method, k, n); update the measured step costs.
 *
 * Threads: every object here belongs to one request and is used by one thread
 * at a time (the engine thread). Nothing allocates per token except a lookup
 * index growing (amortized, by doubling).
 */
#ifndef RP_SPEC_H
#define RP_SPEC_H

#include "../base/base.h"
#include "../sample/sample.h"
#include "../tokenizer/tokenizer.h"

typedef enum rp_spec_method {
    RP_SPEC_NGRAM = 0, // prompt lookup
    RP_SPEC_MTP = 1,   // the model's multi-token-prediction layer
    RP_SPEC_DRAFT = 2, // a draft model
} rp_spec_method;

#define RP_SPEC_N_METHODS 3

// "ngram", "mtp", "draft" (as in --speculative-config and /metrics); "?" otherwise.
const char *rp_spec_method_name(rp_spec_method m);

/* ---- prompt lookup ------------------------------------------------------- */

#define RP_SPEC_NGRAM_MAX 16 // the longest n-gram an index may track

// The index of one sequence. For every n-gram (n = 1..max_ngram) it keeps the
// position where it last ended, and for every position the occurrence that
// position replaced, so the match of the sequence's end is one table probe per
// n and truncation restores the exact earlier state.
typedef struct rp_spec_lookup rp_spec_lookup;

// An empty index tracking n-grams of 1..max_ngram tokens (1 <= max_ngram <=
// RP_SPEC_NGRAM_MAX, else RP_ERR_INVALID). RP_ERR_NOMEM. *out NULL on error.
rp_status rp_spec_lookup_create(int max_ngram, rp_spec_lookup **out);
void rp_spec_lookup_destroy(rp_spec_lookup *x);

// Appends n tokens (the prompt at first, then each token as it is emitted;
// never drafts that are not yet accepted). O(n * max_ngram) amortized.
// RP_ERR_NOMEM leaves the index as it was before the call.
rp_status rp_spec_lookup_append(rp_spec_lookup *x, const int32_t *tokens, int n);

// Forgets every token from position n_tokens on (n_tokens >= the current
// length: nothing happens; < 0 counts as 0), restoring the index to exactly
// the state it had at that length. O(removed * max_ngram).
void rp_spec_lookup_truncate(rp_spec_lookup *x, int n_tokens);

// Tokens in the index.
int rp_spec_lookup_len(const rp_spec_lookup *x);

// Finds the longest n (max_ngram down to min_ngram, min_ngram >= 1) such that
// the last n tokens occurred earlier, takes the most recent such occurrence,
// and writes the up to max_tokens tokens that followed it into out. Where the
// continuation reaches the end of the sequence (a short-period repeat, e.g. a
// run of one token) it goes on repeating the period. Returns how many tokens
// were written (0: no match, or max_tokens <= 0) and sets *match_len (may be
// NULL) to the n matched (0 when none). Never allocates.
int rp_spec_lookup_propose(const rp_spec_lookup *x, int min_ngram, int max_tokens, int32_t *out, int *match_len);

// The engine's proposal: rp_spec_lookup_propose's, made for a text being copied
// with edits. Each candidate place is judged by its agreement, the number of
// tokens (up to 64) before and at it that equal the sequence's end; the one that
// agrees most wins (the most recent on ties). Candidates: the 8 most recent
// earlier occurrences of the longest n-gram match (n >= min_ngram), and the copy
// pointer (it wins ties): the place of the last proposal that came from it or
// agreed on 16 tokens or more, moved on by the tokens emitted since (where the
// copy goes on), or where the copy broke (the emitted tokens differ
// from the pointer's: an edit), the best agreeing place from 4 tokens before to
// 16 after where it would stand, which needs only the token just emitted to
// agree, so a copy resumes one token after an edit. Sets *match_len (may be NULL) to the agreement (0: no proposal).
// A pointer unused for 64 tokens, or past a truncation, is dropped.
int rp_spec_lookup_follow(rp_spec_lookup *x, int min_ngram, int max_tokens, int32_t *out, int *match_len);

/* ---- the adaptive controller --------------------------------------------- */

#define RP_SPEC_K_MAX 64 // the longest draft a controller proposes
#define RP_SPEC_POS 16   // draft positions with their own acceptance estimate (later ones share the last)

typedef struct rp_spec_ctl_params {
    int k_max;       // the cap on drafted tokens per step (num_speculative_tokens), 1..RP_SPEC_K_MAX
    bool adaptive;   // false: always draft min(k_max, available) with the first method available
                     // (NGRAM, MTP, DRAFT in that order): for tests and fixed configurations
    double min_gain; // draft only when the predicted rate beats plain decoding by this factor (>= 1)
    double decay;    // weight an observation keeps per later observation of its method, in (0, 1)
    int probe_after; // choices a method sits unused while available before it is tried with one
                     // token (doubles after every probe up to 64x, back to this after an accepted token)
} rp_spec_ctl_params;

// k_max 8, adaptive, min_gain 1.03, decay 0.9, probe_after 16.
void rp_spec_ctl_params_default(rp_spec_ctl_params *p);

// What one step costs, as the engine measured it, in units of the time of the
// step without this request's drafts.
typedef struct rp_spec_cost {
    double verify_per_token;                   // extra step time per draft token verified
    double draft_per_token[RP_SPEC_N_METHODS]; // time to draft one token with each method (NGRAM ~0)
    double batch_tokens;                       // tokens the rest of the batch emits in the step (0 alone)
} rp_spec_cost;

// Acceptance statistics of one method: exponentially decayed counts of draft
// tokens verified (trials) and accepted (successes) at each position.
typedef struct rp_spec_ctl_stat {
    double trials[RP_SPEC_POS], successes[RP_SPEC_POS];
    double all_trials, all_successes; // every position together
    int idle;                         // choices since the method was last used while available
    int probe_wait;                   // idle choices before the next probe
} rp_spec_ctl_stat;

// The controller of one request. Caller-owned plain data with no resources:
// rp_spec_ctl_init, no deinit. Fields are read-only outside spec/.
//
// Model: a draft token at position k (1-based) is accepted, given all before it
// were, with probability a_k (estimated per method from the decayed counts,
// shrunk toward a_(k-1); a_1 toward the method's all-positions rate, which is
// itself shrunk toward a prior). k drafts then yield E(k) = 1 + a_1 + a_1 a_2 + ... + a_1...a_k tokens
// (the target adds one of its own), and the step costs 1 + k (verify_per_token
// + draft_per_token[m]) while the rest of the batch yields batch_tokens. The
// choice maximizes (batch_tokens + E(k)) / cost over methods and k, against
// k = 0 (rate batch_tokens + 1), which wins unless beaten by min_gain.
typedef struct rp_spec_ctl {
    rp_spec_ctl_params p;
    rp_spec_ctl_stat m[RP_SPEC_N_METHODS];
} rp_spec_ctl;

// RP_ERR_INVALID (message names the field) for params out of range.
rp_status rp_spec_ctl_init(rp_spec_ctl *c, const rp_spec_ctl_params *p);

// Picks the method and draft length for the next step. available[m] is how
// many tokens method m can draft now (0: it cannot: no n-gram match, no MTP
// layer, no draft model, or turned off); cost as measured (NULL: drafting free,
// verification free, alone: for tests). *k is 0 (do not draft; *method is then
// RP_SPEC_NGRAM) or in 1..min(k_max, available[*method]).
void rp_spec_ctl_choose(rp_spec_ctl *c, const int available[RP_SPEC_N_METHODS], const rp_spec_cost *cost,
                        rp_spec_method *method, int *k);

// Records one verification: `drafted` tokens of method m were verified and the
// first `accepted` of them kept (0 <= accepted <= drafted). The engine may also
// record what a method would have drafted without verifying it (prompt lookup
// against the tokens that were then emitted), so a method at k = 0 keeps learning.
void rp_spec_ctl_observe(rp_spec_ctl *c, rp_spec_method m, int drafted, int accepted);

// The estimated acceptance a_k of draft position k (1-based) for method m.
double rp_spec_ctl_accept_rate(const rp_spec_ctl *c, rp_spec_method m, int k);

// E(k): the expected tokens one step yields with k drafts of method m.
double rp_spec_ctl_expected(const rp_spec_ctl *c, rp_spec_method m, int k);

/* ---- verification -------------------------------------------------------- */

// Verifies k draft tokens against the target model for one request.
//
//   logits   (k+1) rows of n_vocab target logits (n_vocab = the sampler's): row
//            i is the target's prediction for the position of draft[i], row k
//            the one after the last draft. Masks (JSON grammar) already applied,
//            row i's as if draft[0..i) were accepted. Not modified.
//   draft    (k) draft tokens (ids outside the vocabulary are rejected)
//   q        NULL for deterministic drafts (prompt lookup, greedy drafting:
//            a one-hot q), or (k) rows of n_vocab draft probabilities, draft[i]
//            having been drawn from row i
//   work     n_vocab floats of scratch
//
// Row by row, p = rp_sampler_probs(s, row) (the request's penalties,
// temperature, top-k/p, min-p; so p sees the drafts accepted so far); draft d
// is accepted with probability min(1, p(d)/q(d)) and then fed to the sampler's
// history (rp_sampler_accept, as generated). At the first rejection *next is
// drawn from normalize(max(0, p - q)); if all k are accepted, *next is drawn
// from row k's p. *next is not fed to the history (as rp_sampler_sample). The
// emitted tokens are draft[0..*n_accepted) then *next; their distribution is
// exactly that of plain sampling. Greedy samplers (one-hot p) accept while the
// draft equals the argmax and never use the RNG; otherwise uniforms come from
// the sampler's seeded RNG, so a fixed seed reproduces. Never allocates.
//
// Deterministic drafts (q NULL) are verified by drawing each row's token
// exactly as rp_sampler_sample does (the same RNG use, one draw per emitted
// token) and accepting the draft when it is that token: the same acceptance
// probability p(d) and residual as above, and the emitted tokens are then
// exactly those of plain sampling with the same seed, whatever was drafted
// (the engine drafts only this way, so speculation never changes the text).
//
// Errors: RP_ERR_INVALID (k < 0, or k > 0 without draft), nothing changed.
rp_status rp_spec_verify(rp_sampler *s, const float *logits, const int32_t *draft, const float *q, int k, float *work,
                         int *n_accepted, int32_t *next);

// Called by rp_spec_verify_ex for each row it reads (rows 0..*n_accepted, in
// order), before the row's distribution is computed: the sampler's history
// then holds draft[0..i), as plain decoding's did at that position (what
// rp_sampler_logprobs needs for the token emitted from row i).
typedef void (*rp_spec_row_fn)(void *ctx, int i, const float *row);

// rp_spec_verify with a callback per row read (on_row may be NULL).
rp_status rp_spec_verify_ex(rp_sampler *s, const float *logits, const int32_t *draft, const float *q, int k,
                            float *work, int *n_accepted, int32_t *next, rp_spec_row_fn on_row, void *ctx);

/* ---- draft model compatibility ------------------------------------------- */

// Checks that a draft model can propose tokens for the target: the same token
// text and decoded bytes for every id, the same special and end-of-generation
// tokens, the same bos/eos/pad ids, and both models' embeddings (n_vocab rows)
// covering every id the tokenizer uses (their padding rows may differ; a draft
// probability of an id the draft model has no row for is 0).
// RP_ERR_INVALID with a message naming the first difference.
rp_status rp_spec_check_draft(const rp_tokenizer *target, int32_t target_n_vocab, const rp_tokenizer *draft,
                              int32_t draft_n_vocab);

#endif
