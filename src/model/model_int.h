/*
 * model_int.h - the model's internals, shared by config.c, load.c, model.c and forward.c.
 */
#ifndef RP_MODEL_INT_H
#define RP_MODEL_INT_H

#include "model.h"

#include <jansson.h>

typedef struct rp_gguf rp_gguf;
typedef struct rp_st_set rp_st_set;

typedef struct rp_layer {
    float *attn_norm;       // (dim) f32, backend memory
    float *ffn_norm;        // (dim)
    float *q_norm, *k_norm; // (head_dim) Qwen3, else NULL
    float *bq, *bk, *bv;    // (n_head*head_dim), (n_kv_head*head_dim) x2: Qwen2, else NULL
    rp_tensor wq;           // (n_head*head_dim, dim)
    rp_tensor wk;           // (n_kv_head*head_dim, dim)
    rp_tensor wv;           // (n_kv_head*head_dim, dim)
    rp_tensor wo;           // (dim, n_head*head_dim)
    rp_tensor w_gate;       // (ffn_dim, dim)
    rp_tensor w_up;         // (ffn_dim, dim)
    rp_tensor w_down;       // (dim, ffn_dim)
    // A mixture-of-experts MLP (rp_config_layer_moe) instead of w_gate/w_up/w_down:
    rp_tensor router;                       // (n_expert, dim)
    rp_tensor *ex_gate, *ex_up, *ex_down;   // (n_expert) each: (moe_ffn_dim, dim) x2, (dim, moe_ffn_dim)
    // Its shared expert (cfg.shared_ffn_dim > 0), a dense MLP whose output is scaled by
    // sigmoid(h · sh_gate_wᵀ), in w_gate/w_up/w_down above.
    rp_tensor sh_gate_w;                    // (1, dim)
    // Gated attention (cfg.attn_gate): the output gate's rows of q_proj, taken apart from wq.
    rp_tensor wq_gate;                      // (n_head*head_dim, dim)
    // A Gated DeltaNet layer (rp_config_layer_gdn) instead of the attention's wq..wo.
    rp_tensor w_qkv;   // (conv_dim, dim) the conv's raw inputs: q heads, k heads, v heads
    rp_tensor w_z;     // (value_dim, dim) the output gate
    rp_tensor w_b;     // (n_v_head, dim) beta's logits
    rp_tensor w_a;     // (n_v_head, dim) the decay's input
    rp_tensor w_out;   // (dim, value_dim)
    float *conv_w;     // (conv_dim, kc)
    float *a_log, *dt_bias; // (n_v_head)
    float *gdn_norm;   // (dv) the gated RMSNorm's weight (plain w: no unit offset)
    int kv_index;      // this layer's layer in the KV pool (attention), or in its state (GDN)
} rp_layer;

// The multi-token-prediction block (models with an `mtp.*` layer; see model.h).
// Its decoder layer is layers[n_layer] and its KV is the pool's layer n_layer.
typedef struct rp_mtp {
    rp_tensor fc;   // (dim, 2*dim): columns [0, dim) take the normed embedding, [dim, 2*dim) the normed hidden
    float *enorm;   // (dim) pre_fc_norm_embedding
    float *hnorm;   // (dim) pre_fc_norm_hidden
    float *norm;    // (dim) the norm before the shared output head
} rp_mtp;

// Activation scratch for max_batch tokens, backend memory.
typedef struct rp_scratch {
    float *x;      // (max_batch, dim) residual stream
    float *h;      // (max_batch, dim) normed input
    float *q;      // (max_batch, n_head*head_dim)
    float *k, *v;  // (max_batch, n_kv_head*head_dim)
    float *att;    // (max_batch, n_head*head_dim)
    float *gate;   // (max_batch, ffn_dim)
    float *up;     // (max_batch, ffn_dim)
    float *logits; // (max_batch, n_vocab) the head's rows: on a device backend; on a host-memory one
                   // NULL until rp_model_forward_argmax needs it (else the head writes the caller's rows)
    int32_t *ids;  // (max_batch) argmax ids, with logits
    float *cat;    // (max_batch, 2*dim) the MTP's concatenated input; NULL without MTP
    float *inv_freq; // (head_dim/2) rope frequencies (the model's inv_freq, uploaded)
    // Mixture of experts (NULL in a dense model): the router's logits, each token's experts and
    // weights, an expert's gathered input rows and their output rows, the MLP's output.
    float *moe_logits;                    // (max_batch, n_expert)
    int32_t *moe_ids;                     // (max_batch, n_expert_used)
    float *moe_w;                         // (max_batch, n_expert_used)
    float *moe_x, *moe_o, *moe_out;       // (max_batch, dim) each; gate/up above hold the experts' too
    float *sh_g;                          // (max_batch) the shared expert's gate logits
    float *qg;                            // (max_batch, n_head*head_dim) gated attention's gates
    // Gated DeltaNet (NULL in a model without): the projections and the recurrence's output.
    float *mixed;                         // (max_batch, conv_dim)
    float *z;                             // (max_batch, value_dim)
    float *gb, *ga;                       // (max_batch, n_v_head) each
    float *gdn_o;                         // (max_batch, value_dim)
} rp_scratch;

// The forward's batch descriptor (rp_batch_desc) storage, host memory, grown by doubling
// when a batch needs more (rare: its sizes are bounded by max_batch and the sequences'
// block tables).
typedef struct rp_batch_store {
    int32_t *slot, *rows, *logit_rows; // (max_batch)
    int32_t *bt_start;                 // (cap_seqs + 1)
    int32_t *bt;                       // (cap_bt)
    int32_t *state_in, *seq_first, *seq_count; // (cap_state) the recurrent state's fields
    int cap_seqs, cap_bt, cap_state, cap_first, cap_count;
} rp_batch_store;

// The op profile (RP_PROFILE=N in the environment when the model is loaded): wall time
// of each op of the forwards that carry N tokens (1: decode steps; more: a verification
// step with its drafts, or a batch), after a synchronize, printed to stderr when the
// model is destroyed. Off by default: a forward then reads no clock.
enum {
    RP_PROF_EMBED,
    RP_PROF_NORM,
    RP_PROF_QKV,
    RP_PROF_ROPE,
    RP_PROF_ATTN,
    RP_PROF_WO,
    RP_PROF_GATE_UP,
    RP_PROF_DOWN,
    RP_PROF_ROUTER,  // a mixture of experts' router and routing
    RP_PROF_EXPERTS, // and its experts' MLPs
    RP_PROF_GDN_PROJ, // a Gated DeltaNet layer's input and output projections
    RP_PROF_GDN,      // its conv, recurrence and gated norm
    RP_PROF_HEAD,
    RP_PROF_N
};

typedef struct rp_prof {
    double t[RP_PROF_N];     // seconds
    double bytes[RP_PROF_N]; // weight bytes read
    int64_t calls[RP_PROF_N];
    int64_t forwards;
    double total; // seconds in the profiled forwards
    int n_tokens; // forwards of this many tokens are profiled (RP_PROFILE=N)
} rp_prof;

// One chunk of the weight arena (load.c): rp_malloc_huge memory, bump allocated.
typedef struct rp_arena_chunk {
    uint8_t *base;
    size_t size, used;
} rp_arena_chunk;

struct rp_model {
    char *path;
    rp_model_config cfg;
    rp_model_params params;
    rp_backend *be;      // borrowed from rp_model_load's caller, or owned (rp_model_own_backend)
    bool owns_be;
    bool host_memory;    // the backend's memory is host memory (rp_backend_info)
    rp_gguf *gguf;       // when loaded from GGUF
    rp_st_set *st;       // when loaded from safetensors
    rp_arena_chunk *arena; // the weight arena (load.c): quantized and copied weights
    int n_arena, cap_arena;
    uint64_t copied_bytes; // float weights copied into the arena so far (params.copy_limit)
    bool huge_pages;       // rp_huge_pages_enabled() at load
    void **dev_owned;    // backend buffers owned by the model (norms, biases)
    int n_dev_owned, cap_dev_owned;
    rp_tensor tok_embd;  // (n_vocab, dim)
    rp_tensor output;    // (n_vocab, dim), == tok_embd when tied
    float *out_norm;     // (dim)
    float *inv_freq;     // (head_dim/2) host memory
    rp_layer *layers;    // (n_layer + n_mtp): the MTP decoder layer last
    rp_mtp mtp;          // when cfg.n_mtp > 0
    rp_scratch s;
    rp_batch_store bs;   // the descriptor of the forward under way
    size_t weight_bytes;     // every weight loaded, MTP included
    size_t mtp_weight_bytes; // of which the MTP block's
    size_t expert_bytes;     // of which the experts' (a token reads n_expert_used / n_expert of them)
    char desc[256];
    rp_prof *prof; // NULL unless RP_PROFILE=N (forward.c)
};

// model.c: on a backend whose memory is not host memory, whether weight_bytes of weights
// (most of them stored as wtype, for the message) and the activation scratch fit in its free
// memory with room for its own buffers; called between load.c's sizing pass and the load.
// Errors: RP_ERR_NOMEM naming the device and the sizes (free and total included).
rp_status rp_model_check_fit(rp_model *m, uint64_t weight_bytes, rp_dtype wtype);

// forward.c: the profile's report (stderr)
void rp_model_prof_print(const rp_model *m);

// config.c
rp_status rp_config_from_hf_json(const char *path, json_t *root, rp_model_config *cfg);
rp_status rp_config_from_gguf(const rp_gguf *g, rp_model_config *cfg);
rp_status rp_config_read_generation(const char *dir, rp_model_config *cfg);
rp_status rp_config_validate(const char *path, rp_model_config *cfg);
// Fills inv_freq[head_dim/2] from the rope settings (freq_factors: GGUF rope_freqs, or NULL).
void rp_config_inv_freq(const rp_model_config *cfg, const float *freq_factors, float *inv_freq);

// load.c
// A weight matrix for the backend from the file's data: quantized to params.quant when
// `quantizable` (into the weight arena), else, when `streamed` (read whole every step),
// copied into the arena unless params.mmap_weights or the kernel has no huge pages;
// otherwise the tensor aliases `data`.
rp_status rp_model_make_weight(rp_model *m, const char *name, rp_dtype type, int64_t ne0, int64_t ne1,
                               const void *data, bool quantizable, bool streamed, rp_tensor *out);
// Unmaps the weight arena (rp_model_destroy).
void rp_model_arena_free(rp_model *m);
// A vector as f32 in backend memory, `offset` added to each element (the (1 + w) norms).
rp_status rp_model_make_vector(rp_model *m, const char *name, rp_dtype type, int64_t n, const void *data, float offset,
                               float **out);
rp_status rp_model_load_hf(rp_model *m, const char *dir);
rp_status rp_model_load_gguf(rp_model *m, const char *path);

#endif
