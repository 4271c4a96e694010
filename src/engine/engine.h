/*
 * engine.h - the engine thread: runs generation requests on one model, together.
 *
 * The engine owns the model's KV pool and one thread. Other threads (the HTTP
 * server's connection threads, `rapid run`) submit requests and read their
 * tokens back; they never touch the model. Each step the engine thread
 *
 *   1. admits queued requests while the running set has room and the KV pool
 *      has blocks for their prompt (first come, first served),
 *   2. builds one flattened batch: one decode token of each running request,
 *      then prefill chunks of the admitted prompts in admission order (at most
 *      prefill_chunk prompt tokens, and while requests decode at most the work
 *      of prefill_chunk tokens at the start of a prompt), the whole batch at
 *      most the model's max_batch tokens (rp_model_max_batch),
 *   3. runs rp_model_forward, samples each request's next token with its own
 *      sampler (and, for JSON mode, its grammar mask),
 *   4. appends the tokens to the requests' outboxes and wakes their readers,
 *   5. retires finished and cancelled requests, freeing their KV at once.
 *
 * A request's output depends only on its own prompt and parameters, never on
 * what else runs with it: a greedy request gives the same tokens alone or in a
 * batch of 16 (the forward pass is per-token deterministic).
 *
 * End of generation: an end-of-generation token of the tokenizer or model
 * (not emitted: finish STOP), max_tokens reached (LENGTH), the context full
 * (LENGTH), rp_gen_cancel (CANCELLED), or an engine error (ERROR, with the
 * message in rp_gen_error). Stop strings are text and belong to the caller,
 * which cancels when it sees one.
 *
 * Speculative decoding (on by default): before step 2 each decoding request
 * may get draft tokens (prompt lookup over its own tokens, the model's MTP
 * layer, or a draft model), chosen per request and step by the adaptive
 * controller from measured acceptance and step cost (0 drafts included: at
 * high concurrency the batch already uses the weights well and drafting fades
 * out). The drafts ride in the same batch right after the request's decode
 * token, every one wanting logits; rp_spec_verify keeps the longest prefix the
 * model agrees with plus one token of its own, and the KV of the rest is
 * rolled back. Drafts are always deterministic (no draft sampling), and the
 * verification draws each emitted token exactly as plain decoding would, so a
 * request's tokens are the same with or without speculation: greedy or
 * sampled, seed for seed (logprobs, penalties and the JSON constraint as in
 * plain decoding). Only the speed changes. The pieces: src/spec/spec.h; the
 * engine side: engine_spec.c.
 *
 * KV pressure: admission takes the KV blocks of the whole prompt at once,
 * and while other requests run it leaves a few blocks free (one per running
 * request, at most an eighth of the pool) so that a new request is not
 * admitted only to be preempted at the next step; decoding then grows each
 * request a slot at a time. When the pool runs out, the most recently
 * admitted request is preempted: its KV is freed (its whole blocks go to the
 * prefix cache first) and it goes back to the head of the queue; when
 * readmitted, its prompt and the tokens it already generated are recomputed,
 * or found in the prefix cache (nothing is emitted twice, and its sampler
 * keeps its state, so the output is what it would have been). A request that
 * alone outgrows the whole pool finishes LENGTH.
 *
 * Prefix cache (src/cache/cache.h; on unless no_prefix_cache): at admission
 * the request's tokens are looked up block by block and every leading whole
 * block found (in memory, or on disk with cache_dir) joins its block table;
 * only the rest is prefilled. While other requests run, a prefix with more
 * than a few blocks on disk is read a few blocks per step (into the memory
 * cache) before the request is admitted, so reading it never stalls their
 * steps for long. The last token is always run (its logits are
 * needed): when the whole list is cached, or when the model has an MTP layer
 * (whose KV at the last cached position depends on the token after it, and
 * whose input there, the main model's hidden row, is not cached), the last
 * cached position is run again in a private copy of its block. When a request
 * ends (any reason but ERROR) or is preempted, its whole blocks of computed
 * tokens, prompt and generated, are published. rp_gen_stats.n_cached is the
 * number of prompt tokens not run at the first admission.
 *
 * A model with recurrent state (Gated DeltaNet layers) can resume only where
 * its state was kept: a request's prefill is cut so that a forward ends at
 * its prompt's last whole block, and the state there goes to the cache with
 * the blocks before it (rp_cache_publish_state); nothing else is published.
 * A lookup then finds the longest prefix with a kept state, short of the
 * last token (which must run: the state has no way back), and a hit writes
 * the state into the request's slot.
 *
 * Threads: rp_engine_* and rp_gen_* may be called from any thread; a given
 * rp_gen belongs to the thread that submitted it (one reader). Between create
 * and destroy the model is the engine thread's: nobody else may run it.
 */
#ifndef RP_ENGINE_H
#define RP_ENGINE_H

#include "../cache/cache.h"
#include "../grammar/grammar.h"
#include "../model/model.h"
#include "../sample/sample.h"
#include "../spec/spec.h"
#include "../tokenizer/tokenizer.h"

#define RP_GEN_TOP_MAX 20 // most alternatives per token for logprobs (OpenAI's top_logprobs limit)

// Which draft sources speculative decoding uses (--speculative-config "method").
typedef enum rp_engine_spec_method {
    RP_ENGINE_SPEC_AUTO = 0,  // prompt lookup, plus MTP when the model has it, plus the draft model when given
    RP_ENGINE_SPEC_OFF = 1,   // no speculation (--no-spec-decode)
    RP_ENGINE_SPEC_NGRAM = 2, // prompt lookup only
    RP_ENGINE_SPEC_MTP = 3,   // the model's MTP layer only (create fails without one)
    RP_ENGINE_SPEC_DRAFT = 4, // the draft model only (create fails without one)
} rp_engine_spec_method;

#define RP_ENGINE_SPEC_K_DEFAULT 32 // num_speculative_tokens when not given

// Speculative decoding's configuration. Plain data; the zero value is `auto`
// with the defaults, except `adaptive`, which rp_engine_params_default sets.
typedef struct rp_engine_spec_params {
    rp_engine_spec_method method;
    int k_max;      // num_speculative_tokens: most drafts per request and step, 1..RP_SPEC_K_MAX; 0 = 32
    bool adaptive;  // true: the controller picks method and length (0 included); false: every decode
                    // step drafts the most it can with the first method available (prompt lookup,
                    // MTP, draft model, in that order), for tests and fixed setups
    int ngram_min;  // prompt lookup: shortest n-gram matched (1..RP_SPEC_NGRAM_MAX); 0 = 2
    int ngram_max;  // prompt lookup: longest n-gram matched (ngram_min..RP_SPEC_NGRAM_MAX); 0 = 8
    const char *draft_path;        // a draft model to load (folder or .gguf, its tokenizer with it); NULL: none
    rp_backend *draft_backend;     // the backend draft_path is loaded on (borrowed, outlives the engine);
                                   // NULL: the model's
    rp_model *draft;               // or a loaded draft model (borrowed; the engine thread's while the
    const rp_tokenizer *draft_tok; // engine lives), with its tokenizer; not both with draft_path
} rp_engine_spec_params;

typedef struct rp_engine_params {
    int n_ctx;       // most tokens (prompt + generated) of one request; 0 = the model's max_ctx, cut to
                     // what the pool holds (an explicit n_ctx longer than that is refused at create)
    int kv_tokens;   // KV pool size in tokens, shared by all requests; 0 = kv_memory, else max(n_ctx, 4096),
                     // rounded up to blocks
    int kv_block;    // tokens per KV block; 0 = 16
    int max_running; // requests generating together; 0 = 16
    int max_queue;   // requests waiting to be admitted (preempted ones included); past it submit fails; 0 = 64
    uint64_t kv_memory;      // KV pool size in bytes, when kv_tokens is 0 (rounded down to whole blocks)
    bool kv_f32;             // K and V cached as float32; false: as float16 (half the memory and the bytes
                             // attention reads per token; within 2^-11 relative per value)
    int prefill_chunk;       // most prompt tokens run per step over all requests (decode tokens come on top,
                             // within max_batch); 0 = the model's max_batch. While requests decode, a
                             // step's prompt tokens also cost at most what prefill_chunk tokens from
                             // position 0 do (a token's attention grows with its position)
    bool no_prefix_cache;    // no prefix cache at all (then no disk tier either)
    const char *cache_dir;   // the prefix cache's disk tier: blocks go to cache_dir/<fingerprint>/ (made if
                             // missing); NULL or "": memory only. Copied at create.
    uint64_t cache_disk_budget; // most bytes of block files; 0 = 4 GiB
    double cache_flush_s;    // at destroy, most seconds spent writing cached blocks to disk; 0 = 10, < 0: none
    uint64_t cache_state_mem; // a model with recurrent state: most bytes of state snapshots the prefix
                              // cache keeps in memory (at least one); 0 = 1 GiB
    rp_engine_spec_params spec; // speculative decoding (on: auto, adaptive)
} rp_engine_params;

// Every field 0 (its default), spec.adaptive true.
void rp_engine_params_default(rp_engine_params *p);
// The type the KV pool stores K and V as under these params.
static inline rp_dtype rp_engine_kv_type(const rp_engine_params *p)
{
    return p->kv_f32 ? RP_DTYPE_F32 : RP_DTYPE_F16;
}

typedef struct rp_engine rp_engine;

// Starts the engine thread over a loaded model and its tokenizer (both borrowed;
// they must outlive the engine). Creates the KV pool and the prefix cache (with
// cache_dir: makes and indexes the folder, starts its writer thread), and
// loads or takes the draft model when one is given (with its own KV pool of
// the same size).
// Errors: RP_ERR_NOMEM; RP_ERR_INVALID for bad params (message names the field),
// a draft model whose tokenizer differs from the model's (the message names the
// first difference), method mtp on a model without an MTP layer, method draft
// without a draft model; RP_ERR_RANGE when kv_memory holds no block or an
// explicit n_ctx is longer than the pool (the message gives the numbers); the
// draft model's load errors. A cache folder that cannot be used is no error:
// the prefix cache stays in memory and a warning says why.
rp_status rp_engine_create(rp_model *m, const rp_tokenizer *tok, const rp_engine_params *p, rp_engine **out);

// NULL while the engine can run; once its backend's device is lost (rp_backend_lost: a GPU
// context gone after a kernel fault), why ("the device failed: ..."), for good: every
// request then failed with it and later submits are refused (RP_ERR_DEVICE). Any thread.
const char *rp_engine_failed(rp_engine *e);
// fn(ctx) is called once when the engine fails (on the engine thread, under its lock: it
// must not call back into the engine), or at once when it already has; NULL: none. The
// server stops itself through it. Any thread.
void rp_engine_on_failure(rp_engine *e, void (*fn)(void *ctx), void *ctx);
// Cancels everything queued or running, joins the thread, writes the cached
// blocks not yet on disk (with a disk tier, for at most cache_flush_s seconds),
// frees the pool.
// Handles not yet released stay valid (finished, CANCELLED: rp_gen_read,
// rp_gen_get_stats, rp_gen_release work) until released; the engine's last
// bytes go with the last of them. NULL is a no-op.
void rp_engine_destroy(rp_engine *e);
// The effective context length per request: n_ctx after defaults and the model's
// limit, at most what the KV pool holds (what the server advertises).
int rp_engine_n_ctx(const rp_engine *e);
// The prefix cache's disk folder (cache_dir/<fingerprint>), or NULL without a disk tier.
// Valid until rp_engine_destroy.
const char *rp_engine_cache_dir(const rp_engine *e);

typedef struct rp_gen_params {
    const int32_t *prompt; // (n_prompt) token ids, copied at submit
    int n_prompt;
    int max_tokens;         // most tokens to generate; <= 0: until the context is full. Clamped to n_ctx - n_prompt.
    rp_sample_params sample;
    bool ignore_eos;        // end-of-generation tokens do not stop (they are emitted)
    int n_logprobs;         // -1: no logprobs; 0: the chosen token's; k in 1..RP_GEN_TOP_MAX: plus the k most likely
    bool json;              // constrain the output to one JSON object (grammar mask each step); the
                            // object's end makes end-of-generation the only choice (the
                            // first JSON request builds the grammar's token table: ~50-100 ms
                            // for a 100k vocabulary, once per engine)
    const rp_json_schema *schema; // with json: the schema the output must match (NULL: any JSON
                                  // object); the request takes a reference at submit
    const char *json_prefix;      // with json: text the grammar reads before the first generated token
    size_t json_prefix_len;       // (the end of the prompt, e.g. a forced tool-call opening); copied
} rp_gen_params;

// OpenAI sampling defaults (rp_sample_params_default), max_tokens 0, no logprobs, no JSON.
void rp_gen_params_default(rp_gen_params *p);

typedef enum rp_gen_finish {
    RP_GEN_RUNNING = 0,   // more may come
    RP_GEN_STOP = 1,      // end-of-generation token (not emitted)
    RP_GEN_LENGTH = 2,    // max_tokens or the context reached
    RP_GEN_CANCELLED = 3, // rp_gen_cancel or engine shutdown
    RP_GEN_ERROR = 4,     // the engine failed this request: rp_gen_error says why
} rp_gen_finish;

// One generated token, with its log-probabilities when asked: natural log of
// the model's distribution as the request sees it = rp_sampler_logprobs, the
// log-softmax of the logits after the penalties (and the JSON mask), before
// temperature, top-k/p and min-p. So they are the same at every temperature
// (OpenAI returns the model's log-probabilities, not the truncated sampling
// distribution, whose greedy form would be a useless one-hot). The top list
// is sorted, most likely first (ties: lower id first), and holds only tokens
// with a finite logprob (n_top may be below n_logprobs under the JSON mask).
typedef struct rp_gen_token {
    int32_t id;
    float logprob;
    int n_top;
    int32_t top_ids[RP_GEN_TOP_MAX];
    float top_logprobs[RP_GEN_TOP_MAX];
} rp_gen_token;

typedef struct rp_gen rp_gen;

// Queues a request. Errors (nothing queued, *out NULL):
//   RP_ERR_RANGE   the prompt alone does not fit n_ctx (message: "the prompt has N tokens, the context is M"),
//                  or it needs more KV than the whole pool
//   RP_ERR_LIMIT   the queue is full, or the engine is shutting down (the server answers 503 Retry-After)
//   RP_ERR_INVALID empty prompt, token ids out of the vocabulary, bad sample params or n_logprobs
//   RP_ERR_NOMEM
rp_status rp_engine_submit(rp_engine *e, const rp_gen_params *p, rp_gen **out);

// Waits up to timeout_s (0: do not wait; < 0: no limit) until the request has
// tokens not yet read or has finished; copies up to cap unread tokens into out
// (*n_out of them; out may be NULL when cap is 0) and returns RP_GEN_RUNNING,
// or the finish reason once every token has been read (the finish reason comes
// with the last tokens when they fit in cap).
rp_gen_finish rp_gen_read(rp_gen *g, double timeout_s, rp_gen_token *out, int cap, int *n_out);
// Asks the engine to stop this request; it is retired (KV freed) at the next
// step and produces no token after this call returns. Nothing if it has finished.
void rp_gen_cancel(rp_gen *g);
// Gives the handle back (cancelling the request if it still runs). g is gone
// after. Works after rp_engine_destroy too. NULL is a no-op.
void rp_gen_release(rp_gen *g);
// The reason of an RP_GEN_ERROR ("" otherwise). Valid until release.
const char *rp_gen_error(const rp_gen *g);

typedef struct rp_gen_stats {
    int n_prompt;        // prompt tokens
    int n_cached;        // prompt tokens whose KV came from the prefix cache at the first admission
    int n_generated;     // tokens sampled so far, counting an end-of-generation token that ended the
                         // request (not emitted: the emitted count is one less after a STOP)
    int max_tokens;      // the effective limit after clamping
    double t_submit;     // rp_time_s() at submit
    double t_admit;      // when prefill started (0 while queued)
    double t_first;      // when the first token was produced (0 before)
    double t_last;       // when the latest token was produced
    int spec_drafted[RP_SPEC_N_METHODS];  // draft tokens verified, by method (rp_spec_method)
    int spec_accepted[RP_SPEC_N_METHODS]; // of them, accepted (emitted)
} rp_gen_stats;

void rp_gen_get_stats(const rp_gen *g, rp_gen_stats *out);

#define RP_ENGINE_BATCH_BUCKETS 12 // forward-time buckets by batch tokens: 1, 2, 3-4, 5-8, ..., 513-1024, more

// The bucket of a forward pass of n tokens (n >= 1): 0 for 1, i for 2^(i-1) < n <= 2^i.
int rp_engine_batch_bucket(int n_tokens);

typedef struct rp_engine_stats {
    int queued, running;        // requests waiting / generating now
    int kv_blocks, kv_blocks_used; // used: held by requests (cached blocks nobody holds count as free)
    int kv_block_tokens;
    rp_dtype kv_type;           // how K and V are stored (rp_engine_kv_type of the params)
    uint64_t kv_bytes;          // the pool's size
    int n_ctx;                  // the effective context per request
    uint64_t steps;             // forwards run
    uint64_t tokens_prefilled;  // prompt tokens run through the model
    uint64_t tokens_generated;
    uint64_t requests_done;     // retired, any reason
    uint64_t requests_cancelled;
    uint64_t preemptions;       // requests sent back to the queue for want of KV blocks
    int prefill_chunk;          // most prompt tokens run per step (the effective value)
    int max_batch;              // most tokens in one forward pass
    // Time, in seconds, measured on the engine thread. A step is one turn of the
    // loop that ran a forward: scheduling, drafting, the forward, sampling and
    // publishing; its forward pass alone is counted apart, by the batch's tokens
    // (bucket 0: 1 token, bucket i >= 1: 2^(i-1) + 1 .. 2^i tokens, the last
    // bucket everything above), so per-step overheads and how a step's cost
    // grows with its batch can be read off.
    double step_s;              // all steps
    double step_max_s;          // the longest step
    double forward_s;           // of the steps, in forward passes
    uint64_t forward_steps[RP_ENGINE_BATCH_BUCKETS];   // forward passes per bucket
    uint64_t forward_tokens[RP_ENGINE_BATCH_BUCKETS];  // tokens they ran
    double forward_bucket_s[RP_ENGINE_BATCH_BUCKETS];  // their time
    double forward_min_s[RP_ENGINE_BATCH_BUCKETS];     // the fastest (0 when none)
    bool prefix_cache;          // the prefix cache is on
    uint64_t cache_hit_tokens;  // tokens not run at admissions thanks to the cache (readmissions too)
    uint64_t cache_miss_tokens; // tokens left to run at admissions
    rp_cache_stats cache;       // blocks: hits, misses, memory and disk figures (zeros when off)
    // Speculative decoding. Drafts are counted when verified (a step of a request
    // that drafted k tokens: k verified, the accepted ones a prefix of them).
    bool spec_methods[RP_SPEC_N_METHODS];   // the draft sources this engine may use
    uint64_t spec_steps;                    // request steps that verified drafts
    uint64_t spec_drafted[RP_SPEC_N_METHODS];
    uint64_t spec_accepted[RP_SPEC_N_METHODS];
    // By draft position (slot i: the (i+1)-th draft of a step; the last slot
    // counts every position from RP_SPEC_POS on): verified, and accepted.
    uint64_t spec_pos_drafted[RP_SPEC_N_METHODS][RP_SPEC_POS];
    uint64_t spec_pos_accepted[RP_SPEC_N_METHODS][RP_SPEC_POS];
} rp_engine_stats;

// A consistent snapshot (taken under the engine's lock). kv_blocks_used counts
// every block held by a queued or running request.
void rp_engine_get_stats(rp_engine *e, rp_engine_stats *out);

#endif
