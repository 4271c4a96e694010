/*
 * engine_int.h - the engine's internals, shared by engine.c (the thread, the
 * queue, batching, sampling, publishing) and engine_spec.c (speculative
 * decoding: drafting, verification, rollback, the cost measurements).
 *
 * Who may touch what: fields marked "engine thread" belong to the engine
 * thread once the request is queued; "under e->mu" fields are shared with the
 * callers' threads. engine_spec.c runs on the engine thread only; its hooks
 * say whether e->mu is held.
 */
#ifndef RP_ENGINE_INT_H
#define RP_ENGINE_INT_H

#include "engine.h"

#include "../grammar/grammar.h"

#include <pthread.h>
#include <stdatomic.h>

/* ---- speculative decoding's state ----------------------------------------- */

// Per request; engine thread only.
typedef struct spec_gen {
    bool on;            // this request may draft (the engine's speculation is on and its state was made)
    rp_spec_ctl ctl;    // the adaptive controller
    rp_spec_lookup *lk; // prompt lookup over toks[0, n_tok) (NULL: not for this request)

    // This step (spec_plan through spec_publish).
    rp_spec_method method;
    int k;           // drafts planned: KV slots reserved for n_comp + 1 + k positions
    int n_draft;     // drafts made (<= k): draft[0, n_draft), right after the decode token in the batch
    int32_t *draft;  // (k_cap)
    int n_shadow;    // prompt lookup's proposal when another method (or none) drafted: checked
    int32_t *shadow; // (k_cap)  against the emitted tokens, for free (rp_spec_ctl_observe)
    int n_acc;       // drafts accepted at verification (-1: none verified this step)

    // MTP: the MTP layer's KV is real for positions [0, mtp_done); the last
    // forward's hidden rows of this request start at row h_row, position h_pos.
    bool mtp; // kept up to date (catch-up every step); once off, off for good
    int mtp_done, h_row, h_pos;
    int mtp_steps;  // decode steps it has kept MTP
    double mtp_use; // decayed share of those steps that drafted with MTP (probes included)
    int m_row;      // its row in the current MTP pass's outputs

    // Draft model: its KV (own pool) holds toks[0, d_comp) (while drafting, the
    // drafts fed after them too; cut back after verification).
    bool dm; // may use the draft model
    rp_kv_seq dkv;
    int d_comp;
} spec_gen;

// A linear fit of forward time against tokens in the batch, T(n) = a + b n,
// from exponentially decayed sums (steps where every token wants logits).
typedef struct spec_fit {
    double w, sn, snn, st, snt;
} spec_fit;

// Engine-wide; engine thread only (create/destroy aside).
typedef struct spec_engine {
    bool on;                     // any method may draft
    bool use[RP_SPEC_N_METHODS]; // methods in play
    int k_cap, ngram_min, ngram_max;
    int budget; // most drafts in one step, all requests together
    rp_spec_ctl_params ctl;

    // Verification.
    float *work;       // (n_vocab) rp_spec_verify's scratch
    rp_json_match *jm; // JSON mode: a matcher that runs ahead over drafts (made at first need)

    // MTP: the last forward's hidden rows, the MTP pass's batch and outputs.
    float *hidden;                  // (max_batch, dim) rows of the tokens wanting logits or hidden
    bool *want_hidden;              // (max_batch)
    bool need_hidden;               // this step's batch has a request keeping MTP
    float *m_in, *m_out;            // (max_batch, dim) hidden in, hidden out of an MTP pass
    float *m_logits;                // (max_running, n_vocab)
    int32_t *m_tok, *m_pos, *m_seq; // (max_batch)
    bool *m_want;                   // (max_batch)
    rp_kv_seq **m_seqs;             // (max_running)
    rp_gen **m_gens;                // (max_running) request of each sequence of a pass

    // Draft model.
    rp_model *dm;       // NULL: none
    rp_model *dm_owned; // loaded by the engine (else borrowed)
    rp_tokenizer *dtok_owned;
    rp_kv_pool *dkv;
    int d_vocab, d_max_batch;
    float *d_logits; // (max_running, d_vocab)

    // Costs, in seconds.
    spec_fit fit;                      // main forward time
    double t_draft[RP_SPEC_N_METHODS]; // decayed mean time to draft one token, per method (0: not measured)
    double t_upkeep;                   // the same for the MTP catch-up, per position caught up
    rp_spec_ctl mtp_seen;              // every request's MTP verifications: what MTP drafting is worth
                                       // here, for deciding at admission whether to keep MTP
    int admissions;                    // first admissions (every MTP_TRIAL-th keeps MTP to try it again)
    double t_fwd;                      // the last forward's time
} spec_engine;

/* ---- requests and the engine --------------------------------------------- */

struct rp_gen {
    rp_engine *e;
    rp_gen *prev, *next; // in the queue or the running list; under e->mu

    // Set at submit, read-only after.
    rp_sample_params sp;
    bool ignore_eos, json;
    rp_json_schema *schema; // JSON mode's schema (a reference), NULL: any object
    char *json_prefix;      // JSON mode: read by the grammar at its start (owned), NULL: none
    size_t json_prefix_len;
    int n_logprobs;
    int n_prompt, max_tokens;

    // Engine thread only once queued.
    int32_t *toks; // (toks_cap) the prompt, then the generated tokens kept
    int toks_cap, n_tok, n_comp;
    int n_gen;          // tokens sampled (a final end-of-generation one included)
    int take;           // tokens fed this step (drafts included)
    int disk_steps;     // admission steps spent reading its prefix from disk (rp_cache_prefetch)
    int snap_at;        // a model with state and the prefix cache: the position (a block's end)
                        // where its state goes to the cache, once computed; 0: none left to do
    rp_sampler *smp;    // from the first admission to retirement
    rp_json_match *jm;  // JSON mode: the same
    rp_kv_seq kv;       // KV blocks (changed under e->mu: others read the pool's count)
    rp_gen_token *step; // (1 + k_cap) tokens this step produced, to emit
    int n_step;
    rp_gen_finish done;   // this step ended the request (RUNNING: it did not)
    const char *done_msg; // why, for RP_GEN_ERROR (valid until the publish)
    spec_gen spec;

    // Under e->mu.
    rp_gen_token *out; // (out_cap) unread tokens are [out_head, out_len)
    int out_head, out_len, out_cap;
    rp_gen_finish finish;
    bool in_engine; // queued or running: the engine thread retires it
    bool running;   // in the running list (else the queue)
    bool released;  // the reader gave the handle back: the engine frees it at retirement
    rp_gen_stats stats;
    char err[512];
    pthread_cond_t cv; // the reader waits here

    atomic_bool cancel;
};

struct rp_engine {
    rp_model *m;
    const rp_tokenizer *tok;
    const rp_model_config *cfg;
    int n_ctx, n_vocab, max_batch, max_running, max_queue, block, n_blocks, prefill_chunk;
    // Prefill work, while others decode: a prompt token at position p costs
    // 1 + p / attn_eq tokens' worth (its attention grows with p; attn_eq is the
    // position where attention's multiply-adds equal the weights'), and a step
    // takes at most chunk_work of it: what prefill_chunk tokens from position 0 cost.
    double attn_eq, chunk_work;
    int max_rows; // logits rows of one step: max_running + spec.budget
    bool has_mtp;
    bool stateful; // the model has recurrent state (rp_model_has_state)
    rp_kv_pool *kv;
    rp_cache *cache; // NULL when off

    pthread_mutex_t mu;
    pthread_cond_t cv; // the engine thread waits here for work
    atomic_int refs;
    pthread_t thread;
    bool thread_live;
    pthread_mutex_t jv_mu; // guards the making of jv
    rp_json_vocab *jv;     // JSON mode's token table, made by the first JSON submit

    // Under mu.
    bool stop;
    rp_gen *q_head, *q_tail; // waiting, first come first
    int n_queued;
    rp_gen *r_head, *r_tail; // running, in admission order
    int n_running;
    rp_engine_stats stats; // the counters

    // Engine thread only: the step's batch.
    int32_t *b_tok, *b_pos, *b_seq; // (max_batch)
    bool *b_want;                   // (max_batch)
    rp_kv_seq **b_seqs;             // (max_running)
    rp_gen **b_gens;                // (max_running) the request of each sequence
    rp_gen **b_rows;                // (max_rows) the request of each logits row
    int n_b, n_b_seqs, n_b_rows, n_b_prefill;
    rp_gen **draw_gens; // (max_running) the requests of the step's rows without drafts
    float **draw_rows;  // (max_running) their logits rows
    rp_pool *pool;      // the backend's host pool (rp_backend_host_pool: idle between forwards), or NULL
    float *logits;      // (max_rows, n_vocab)
    float *lp;          // (n_vocab) logprobs of one row
    char step_err[512]; // why the last forward failed
    // Failure (under e->mu): set once, when the backend's device is lost; then every request
    // fails and the hook (rp_engine_on_failure) is called once.
    bool failed;
    char fail_msg[256];
    void (*on_fail)(void *ctx);
    void *on_fail_ctx;

    spec_engine spec; // engine_spec.c
};

/* ---- engine.c, for engine_spec.c ----------------------------------------- */

// True for end-of-generation tokens (the tokenizer's or the model's).
bool engine_is_eog(const rp_engine *e, int32_t id);
// Log-probabilities of `row` for g (into e->lp), and t's top list from them;
// t->logprob from t->id when t->id >= 0.
void engine_logprobs(rp_engine *e, rp_gen *g, const float *row, rp_gen_token *t);
// g->step[g->n_step] holds a chosen token, already in the sampler's history:
// counts it, advances the JSON matcher, and either ends g (end of generation:
// not kept; an error) or keeps it (toks, n_step), ending g LENGTH at max_tokens.
void engine_emit(rp_engine *e, rp_gen *g);

/* ---- engine_spec.c: the hooks engine.c calls ---------------------------- */

// rp_engine_create, before allocating anything: p's speculation fields and
// whether the model can do what they ask. RP_ERR_INVALID naming the field.
rp_status spec_check(const rp_model *m, const rp_engine_spec_params *p);
// rp_engine_create, after the KV pool (spec_check passed): takes or loads the
// draft model (checking its tokenizer), sizes the buffers, sets e->spec.budget
// and e->max_rows.
rp_status spec_engine_init(rp_engine *e, const rp_engine_params *p);
void spec_engine_deinit(rp_engine *e);
// The drafts a request may need per step (0 when speculation is off): the size of g->step is 1 + this.
int spec_k_cap(const rp_engine *e);

// Each admission (e->mu held; `first`: the first one), after the prefix cache
// gave the request its cached blocks (n_comp of them). The first makes the
// request's lookup index and controller; never fails the request: without
// memory it just does not draft. The MTP layer's KV of cached positions is
// taken as it is (rows that were never computed make worse drafts, not other text).
void spec_gen_admitted(rp_engine *e, rp_gen *g, bool first);
// Preemption (e->mu held): the request's KV is gone; MTP and draft-model state restart.
void spec_gen_preempted(rp_engine *e, rp_gen *g);
// Retirement (e->mu held): frees the request's speculation state.
void spec_gen_end(rp_engine *e, rp_gen *g);

// After admission and the decode reservations (e->mu held): picks each
// decoding request's method and draft length, reserves their KV slots.
void spec_plan(rp_engine *e);
// e->mu not held: the MTP catch-up over the last forward's rows, MTP chains and
// draft-model passes; leaves each request's drafts in g->spec.draft[0, n_draft).
void spec_draft(rp_engine *e);
// Verifies g's drafts against its logits rows (rows: 1 + n_draft rows), rolls
// n_comp back past the first rejection and emits the tokens (e->mu not held).
void spec_verify(rp_engine *e, rp_gen *g, float *rows);
// After the step's sampling (e->mu not held): lookup indexes, the controller's
// observations, MTP and draft-model bookkeeping, the forward's cost.
void spec_after_step(rp_engine *e);
// At publish, for each request of the step before its tokens are handed out
// (e->mu held): gives back the KV slots of rejected drafts, folds the counters.
void spec_publish(rp_engine *e, rp_gen *g);

#endif
