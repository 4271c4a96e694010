/*
 * model.h - model weights and the forward pass.
 *
 * rp_model_load reads a Hugging Face folder (config.json + safetensors) or a
 * GGUF file, validates the architecture config, maps the weights and hands them
 * to a backend the caller opened (rp_backend_open; borrowed: it must outlive the
 * model). On a backend whose memory is host memory the matrices a step streams
 * are copied to the weight arena (or quantized into it); on a device they are
 * uploaded there.
 * rp_model_forward runs one flattened batch: tokens from several sequences,
 * each with its position and its sequence's KV block table, and returns logits
 * for the tokens that asked for them.
 *
 * Architectures: Llama (2, 3 with its rope scaling), Mistral, Qwen2/2.5 (q/k/v
 * bias), Qwen3 (q/k RMSNorm), Qwen3-MoE (Qwen3's attention; MLPs that are a
 * mixture of experts: a router picks each token's top-k experts by softmax
 * probability, optionally renormalized, and the token's MLP output is the
 * probability-weighted sum of theirs, added in increasing expert order). Tensors
 * an architecture does not use are listed at load and skipped.
 *
 * Multi-token prediction (MTP): a model whose config announces one MTP layer
 * (config.json `mtp_num_hidden_layers`, GGUF `<arch>.nextn_predict_layers`)
 * loads it, and rp_model_forward_mtp runs it for speculative drafting:
 *
 *   e  = rmsnorm(embed(x[t+1])) · pre_fc_norm_embedding
 *   g  = rmsnorm(h[t]) · pre_fc_norm_hidden        h[t]: the main model's final
 *                                                  hidden state after its final norm
 *   z  = concat(e, g) · fcᵀ                         (dim x 2*dim, embedding half first)
 *   z  = one decoder layer of the model's own kind, RoPE at position t, attending
 *        over the MTP layer's own KV at positions 0..t of the sequence
 *   logits = output head(rmsnorm(z) · mtp.norm)     predicts x[t+2]
 *
 * Its KV is one more layer of the same paged pool (rp_model_kv_create makes
 * n_layer + 1 layers), so block tables, sharing and truncation cover it. MTP KV
 * at position t depends on x[t+1] and h[t]: it is written when the MTP step for
 * row t runs, one position behind the main model's.
 *
 * Threads: a model is used by one thread at a time (the engine thread); its
 * weights are immutable after load.
 */
#ifndef RP_MODEL_H
#define RP_MODEL_H

#include "../backend/backend.h"
#include "../kv/kv.h"

typedef enum rp_arch {
    RP_ARCH_LLAMA = 0,
    RP_ARCH_MISTRAL = 1,
    RP_ARCH_QWEN2 = 2,
    RP_ARCH_QWEN3 = 3,
    RP_ARCH_QWEN3_MOE = 4, // Qwen3's attention, mixture-of-experts MLPs
    RP_ARCH_QWEN3_5 = 5,     // Qwen3.5: Gated DeltaNet and gated attention layers, dense MLPs
    RP_ARCH_QWEN3_5_MOE = 6, // Qwen3.5-MoE / Qwen3.6-A3B: the same layers, MoE with a shared expert
} rp_arch;

typedef enum rp_rope_scaling {
    RP_ROPE_SCALING_NONE = 0,
    RP_ROPE_SCALING_LINEAR = 1,
    RP_ROPE_SCALING_LLAMA3 = 2,
} rp_rope_scaling;

// The architecture hyper-parameters. Plain data.
typedef struct rp_model_config {
    rp_arch arch;
    char arch_name[32]; // as in the file: "qwen2", "llama", ...
    int n_vocab;
    int dim;       // hidden size
    int n_layer;
    int n_head;
    int n_kv_head;
    int head_dim;
    int ffn_dim;   // intermediate size
    float norm_eps;
    int max_ctx;   // max_position_embeddings / context_length
    bool tied_embeddings;
    bool qkv_bias;
    bool qk_norm;
    float rope_theta;
    rp_rope_style rope_style;
    rp_rope_scaling rope_scaling;
    float rope_factor;
    float rope_low_freq_factor;  // llama3
    float rope_high_freq_factor; // llama3
    int rope_orig_ctx;           // llama3: original_max_position_embeddings
    int32_t bos_id;              // -1 if unknown (generation_config.json / GGUF)
    int32_t eos_ids[8];          // end-of-sequence ids from the model files
    int n_eos;
    int n_mtp;                   // MTP layers loaded: 0, or 1 (their decoder layers come after n_layer)
    // Mixture of experts (Qwen3-MoE): a layer l < n_layer whose MLP is not dense (rp_config_layer_moe)
    // routes each token to n_expert_used of n_expert experts, each a SiLU-gated MLP of moe_ffn_dim.
    int n_expert;                // 0: every MLP is dense
    int n_expert_used;
    int moe_ffn_dim;
    bool moe_norm_topk;          // the chosen experts' probabilities renormalized to sum to 1
    int moe_step;                // decoder_sparse_step: layers l with (l + 1) % moe_step == 0 ...
    uint32_t dense_layers[32];   // ... unless their bit is set here (mlp_only_layers; layers < 1024)
    int shared_ffn_dim;          // a shared expert beside the routed ones, its output scaled by a
                                 // sigmoid gate (Qwen3.5-MoE); 0: none
    // Hybrids (Qwen3.5): layers whose bit is set are Gated DeltaNet (linear attention), the
    // others gated full attention (rp_config_layer_gdn).
    uint32_t gdn_layers[32];
    int gdn_k_heads, gdn_v_heads; // linear_num_key_heads / linear_num_value_heads
    int gdn_dk, gdn_dv;           // their head sizes
    int gdn_kc;                   // the causal conv's kernel width
    int rot_dim;                  // dims of a head that rotate (partial rotary); head_dim when all
    bool attn_gate;               // q_proj also gives each head a sigmoid output gate (interleaved per head)
    bool norm_unit_offset;        // the RMSNorms multiply by (1 + w): the loader adds 1 to their weights
} rp_model_config;

// Whether layer l's MLP is a mixture of experts (an MTP layer, l = n_layer + j, follows layer j's rule).
bool rp_config_layer_moe(const rp_model_config *c, int l);
// Whether layer l is a Gated DeltaNet layer (holds recurrent state instead of KV).
bool rp_config_layer_gdn(const rp_model_config *c, int l);
// Layers holding KV (attention layers, the MTP layer included) and recurrent state.
int rp_config_kv_layers(const rp_model_config *c);
int rp_config_gdn_layers(const rp_model_config *c);

typedef struct rp_model_params {
    rp_dtype quant;       // RP_DTYPE_F32 (= keep the file's types), or RP_DTYPE_Q8_0 / Q4_0 / Q4_K (rows of a
                          // multiple of 256 elements; others keep their type)
    int max_batch;        // most tokens per forward (0 = 512)
    bool quiet;           // no load messages
    // Float matrices stay in the file's mapping (4 KiB pages) instead of being copied
    // to the weight arena on 2 MiB pages: no copy at load, slower decode (load.c).
    bool mmap_weights;
    // At most this many bytes of float matrices are copied to the weight arena (0: no
    // limit); the rest stay mapped. The CLI passes half the memory available at start,
    // so a model that does not fit twice still loads (and runs from the page cache).
    uint64_t copy_limit;
    // Called on the loading thread after each layer's weights are ready with the
    // fraction done (0, 1]; NULL: none. For progress bars.
    void (*progress)(void *ctx, double fraction);
    void *progress_ctx;
} rp_model_params;

void rp_model_params_default(rp_model_params *p);

typedef struct rp_model rp_model;

// Loads a model from a folder (HF) or a .gguf file onto backend be (borrowed: it must
// outlive the model). Errors name the file and the problem; RP_ERR_UNSUPPORTED when the
// backend has no kernels for a weight's type, RP_ERR_NOMEM (the backend's message names
// the size) when the weights do not fit its memory.
rp_status rp_model_load(const char *path, rp_backend *be, const rp_model_params *params, rp_model **out);
// Destroys the model; the backend it was loaded on stays (unless rp_model_own_backend).
void rp_model_destroy(rp_model *m);
// Makes the model the owner of the backend it was loaded on: rp_model_destroy then
// destroys it, last. For tools and tests that open one backend per model.
void rp_model_own_backend(rp_model *m);
const rp_model_config *rp_model_get_config(const rp_model *m);
rp_backend *rp_model_backend(rp_model *m);
// Bytes of weights read per decoded token (all matrices, embeddings row excluded;
// the MTP block, which plain decoding never reads, excluded; of a mixture of experts'
// experts, the share a token reads on average: n_expert_used / n_expert).
size_t rp_model_weight_bytes(const rp_model *m);
// Bytes of recurrent state a one-token step reads and writes (each Gated DeltaNet layer's
// state matrices and conv window, read from one copy and written to the other); 0 without.
size_t rp_model_state_bytes(const rp_model *m);
// A one-line description: "qwen2, 24 layers, dim 896, q8_0 weights (...)".
const char *rp_model_describe(const rp_model *m);
// How the layers' matrices are stored (the first attention projection's type: --quant's, or the file's).
rp_dtype rp_model_weight_type(const rp_model *m);
// Bytes of every weight loaded (MTP block included): the model's size in memory.
size_t rp_model_size_bytes(const rp_model *m);
// rp_backend_get_info of the backend the model runs on (any thread: the facts are read, nothing runs).
void rp_model_backend_info(const rp_model *m, rp_backend_info *out);
// The path the model was loaded from (folder or file).
const char *rp_model_path(const rp_model *m);
// The most tokens one rp_model_forward accepts (rp_model_params.max_batch after defaults).
int rp_model_max_batch(const rp_model *m);

// Creates a KV pool for this model with n_blocks blocks of block_size tokens,
// holding rp_model_kv_layers(m) layers, K and V stored as type (rp_kv_pool_create);
// for a model with recurrent state (rp_model_has_state) also RP_MODEL_DEFAULT_STATES
// state slots, rollback for forwards of up to RP_MODEL_DEFAULT_LOG_CAP tokens a sequence.
rp_status rp_model_kv_create(rp_model *m, int block_size, int n_blocks, rp_dtype type, rp_kv_pool **out);
#define RP_MODEL_DEFAULT_STATES 4
#define RP_MODEL_DEFAULT_LOG_CAP 17
// rp_model_kv_create with n_states state slots (sequences running at once; 0: the default)
// that can roll back forwards of up to log_cap tokens (-1: the default).
rp_status rp_model_kv_create_ex(rp_model *m, int block_size, int n_blocks, rp_dtype type, int n_states, int log_cap,
                                rp_kv_pool **out);
// Layers in a pool made by rp_model_kv_create: the attention layers (n_layer, less the
// Gated DeltaNet ones), plus n_mtp when the model has MTP (for sizing a memory budget with
// rp_kv_block_bytes).
int rp_model_kv_layers(const rp_model *m);
// True when the model has layers with recurrent state (Gated DeltaNet): each running
// sequence then also holds a state slot (kv.h), and its prefix cannot come from KV alone.
bool rp_model_has_state(const rp_model *m);
// The state geometry of this model for n_slots sequences (rp_kv_state_slot_bytes sizes a budget).
rp_kv_state_geom rp_model_state_geom(const rp_model *m, int n_slots, int log_cap);
// Shrinks sequence s to n_tokens slots (rp_kv_seq_truncate), first rolling its recurrent
// state back to n_tokens when it had consumed more: the other state copy is advanced over the
// logged inputs from log_pos to n_tokens (a forward of the Gated DeltaNet layers' recurrence
// only, no matmuls). n_tokens must be 0 or >= log_pos (RP_ERR_INVALID otherwise: the state
// there is gone). Errors from the backend.
rp_status rp_model_seq_truncate(rp_model *m, rp_kv_pool *kv, rp_kv_seq *s, int32_t n_tokens);

// A 128-bit identity of what decides this model's KV numbers (the prefix
// cache's keys and disk folder): the config, the rope frequencies, every weight
// tensor's name, type and shape, --quant, the backend's numerics (rp_backend_numerics:
// its name, instruction set, activation rounding),
// Rapid's version and the executable's size and mtime, and the model files'
// path, names, sizes and modification times (not their bytes). Two loads of the same unchanged files with the same
// settings agree; a changed file, quantization or kernel level does not.
// The KV block geometry and dtype are the cache's to add. RP_ERR_NOMEM.
rp_status rp_model_fingerprint(const rp_model *m, uint8_t out[16]);

// One flattened batch. Plain data, host memory, valid for the call.
typedef struct rp_batch {
    int n_tokens;
    const int32_t *tokens;      // (n_tokens)
    const int32_t *pos;         // (n_tokens) position of each token in its sequence
    const int32_t *seq;         // (n_tokens) index into seqs
    const bool *want_logits;    // (n_tokens) which tokens produce a row of logits
    rp_kv_seq *const *seqs;     // (n_seqs) each already holds slots for its tokens' positions
    int n_seqs;
    const bool *want_hidden;    // (n_tokens) or NULL: tokens that want only their hidden row
                                // (rp_model_forward_ex with hidden; ignored otherwise)
} rp_batch;

// Runs the batch (n_tokens <= max_batch; the caller splits larger ones), writing
// n_vocab logits per token that wants them, in batch order, into logits (host memory;
// from rp_backend_host_alloc for the fastest copy from a device). The results cross
// from the backend in one copy, after which the forward synchronizes once.
// Each token attends to positions [0, pos] of its own sequence; KV for the
// batch's tokens is written first, so a sequence's tokens may all be in one batch.
rp_status rp_model_forward(rp_model *m, rp_kv_pool *kv, const rp_batch *b, float *logits);

// rp_model_forward that also returns, when hidden is not NULL, the final hidden
// state (after the final norm: the rows the output head multiplies) of every
// token that wants logits or (b->want_hidden) its hidden row, dim floats each,
// in batch order, into hidden (host); logits still come only for the tokens
// that want them, in batch order (a prefill chunk can give every position's
// hidden row and one row of logits). These rows are h[t] for
// rp_model_forward_mtp. logits may be NULL (the head is then skipped). With
// hidden NULL this is rp_model_forward, op for op.
// Errors: as rp_model_forward.
rp_status rp_model_forward_ex(rp_model *m, rp_kv_pool *kv, const rp_batch *b, float *logits, float *hidden);

// rp_model_forward_ex whose logits rows are reduced on the backend to their argmax
// (rp_backend_argmax: the first largest, NaN never chosen), written as token ids in batch
// order into ids (host), so the rows' logits never cross from a device: what a greedy
// row without logprobs, penalties or a grammar needs. hidden as for rp_model_forward_ex.
// The first call allocates the backend's logits scratch (max_batch rows).
rp_status rp_model_forward_argmax(rp_model *m, rp_kv_pool *kv, const rp_batch *b, int32_t *ids, float *hidden);

// True when the model loaded an MTP layer (rp_model_forward_mtp works).
bool rp_model_has_mtp(const rp_model *m);

// Runs the MTP layer over a batch. Token i of b is x[t+1] at position t = b->pos[i]
// of its sequence, and hidden row i (dim floats, host, one row per batch token)
// is h[t]: the main model's row from rp_model_forward_ex for the token at t, or,
// for step 2+ of a draft chain, the previous MTP step's hidden_out row. Writes
// the MTP layer's KV at those positions (the sequences must hold the slots, as
// for rp_model_forward), then, for tokens that want logits, in batch order:
// n_vocab MTP logits (predicting x[t+2]) into logits, and when hidden_out is not
// NULL the MTP layer's output after mtp.norm (dim floats) into hidden_out.
// Either output may be NULL; hidden_out may be hidden itself (read first).
//
// Chaining K drafts from a verified position t (h[t] known, x[t+1] just sampled):
// step 1 runs (x[t+1], t, h[t]) and drafts d1 = x[t+2]; step k+1 runs
// (d_k, t+k, hidden_out of step k). Training (tools/train/model.py) only ever
// ran one step, always from the main model's h; feeding the MTP's own post-norm
// output back as h is this project's choice (it has the same scale as the main
// model's normed h), so acceptance beyond step 1 is measured, not promised
// (tests/unit/model/test_mtp.c prints it; the pre-norm output measured the same).
// Drafted steps leave MTP KV at t+1..t+K-1 computed from MTP hiddens; after
// verification, rerun the MTP over every newly accepted position with the main
// model's real h (this overwrites those slots and gives the next chain's first
// draft) and truncate the sequence past the accepted end.
//
// Errors: RP_ERR_UNSUPPORTED (the model has no MTP layer), RP_ERR_INVALID (the
// pool was made without the MTP layer, hidden NULL, a bad sequence index),
// RP_ERR_RANGE (batch too large, position without a slot, token outside the
// vocabulary); RP_ERR_NOMEM/RP_ERR_DEVICE from the backend.
rp_status rp_model_forward_mtp(rp_model *m, rp_kv_pool *kv, const rp_batch *b, const float *hidden, float *logits,
                               float *hidden_out);

// Writes the model of a Hugging Face folder as a model-only GGUF file with
// llama.cpp's conventions (tensor names, metadata keys, Llama Q/K permutation,
// rope_freqs for Llama-3 scaling), matrices as `type` (F32, F16, BF16, Q8_0 or
// Q4_0; rows that are not a whole number of blocks stay F32), vectors as F32.
rp_status rp_model_convert_gguf(const char *hf_dir, const char *out_path, rp_dtype type);

#endif
