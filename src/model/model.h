/*
 * model.h - model weights and the forward pass.
 *
 * rp_model_load reads a Hugging Face folder (config.json + safetensors) or a
 * GGUF file, validates the architecture config, maps the weights (nothing is
 * copied unless --quant asks to quantize them) and hands them to a backend.
 * rp_model_forward runs one flattened batch: tokens from several sequences,
 * each with its position and its sequence's KV block table, and returns logits
 * for the tokens that asked for them.
 *
 * Architectures: Llama (2, 3 with its rope scaling), Mistral, Qwen2/2.5 (q/k/v
 * bias), Qwen3 (q/k RMSNorm). Tensors an architecture does not use (e.g. the
 * `mtp.*` layers of checkpoints with multi-token prediction) are listed at load
 * and skipped.
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
} rp_model_config;

typedef struct rp_model_params {
    int n_threads;        // CPU threads, 0 = all cores
    rp_dtype quant;       // RP_DTYPE_F32 (= keep the file's types), or RP_DTYPE_Q8_0 / RP_DTYPE_Q4_0
    int max_batch;        // most tokens per forward (0 = 512)
    bool quiet;           // no load messages
} rp_model_params;

void rp_model_params_default(rp_model_params *p);

typedef struct rp_model rp_model;

// Loads a model from a folder (HF) or a .gguf file. Errors name the file and the problem.
rp_status rp_model_load(const char *path, const rp_model_params *params, rp_model **out);
void rp_model_destroy(rp_model *m);
const rp_model_config *rp_model_get_config(const rp_model *m);
rp_backend *rp_model_backend(rp_model *m);
// Bytes of weights read per decoded token (all matrices, embeddings row excluded).
size_t rp_model_weight_bytes(const rp_model *m);
// A one-line description: "qwen2, 24 layers, dim 896, q8_0 weights (...)".
const char *rp_model_describe(const rp_model *m);
// The path the model was loaded from (folder or file).
const char *rp_model_path(const rp_model *m);
// The most tokens one rp_model_forward accepts (rp_model_params.max_batch after defaults).
int rp_model_max_batch(const rp_model *m);

// Creates a KV pool for this model with n_blocks blocks of block_size tokens.
rp_status rp_model_kv_create(rp_model *m, int block_size, int n_blocks, rp_kv_pool **out);

// One flattened batch. Plain data, host memory, valid for the call.
typedef struct rp_batch {
    int n_tokens;
    const int32_t *tokens;      // (n_tokens)
    const int32_t *pos;         // (n_tokens) position of each token in its sequence
    const int32_t *seq;         // (n_tokens) index into seqs
    const bool *want_logits;    // (n_tokens) which tokens produce a row of logits
    rp_kv_seq *const *seqs;     // (n_seqs) each already holds slots for its tokens' positions
    int n_seqs;
} rp_batch;

// Runs the batch (n_tokens <= max_batch; the caller splits larger ones), writing
// n_vocab logits per token that wants them, in batch order, into logits (host).
// Each token attends to positions [0, pos] of its own sequence; KV for the
// batch's tokens is written first, so a sequence's tokens may all be in one batch.
rp_status rp_model_forward(rp_model *m, rp_kv_pool *kv, const rp_batch *b, float *logits);

// Writes the model of a Hugging Face folder as a model-only GGUF file with
// llama.cpp's conventions (tensor names, metadata keys, Llama Q/K permutation,
// rope_freqs for Llama-3 scaling), matrices as `type` (F32, F16, BF16, Q8_0 or
// Q4_0; rows that are not a whole number of blocks stay F32), vectors as F32.
rp_status rp_model_convert_gguf(const char *hf_dir, const char *out_path, rp_dtype type);

#endif
