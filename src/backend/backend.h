/*
 * backend.h - the compute backend seam: what the model and the KV pool see of a
 * device (the CPU, a CUDA GPU), neutral and opaque.
 *
 * The model's forward pass is written once, as calls on this interface; each
 * backend fills the vtable of backend_int.h (included by backends only), and
 * the wrappers below check what a backend may leave out. A backend is opened by
 * name (rp_backend_open: "cpu", "cuda", "cuda:N") by the command line, handed
 * to rp_model_load and borrowed by the model, the KV pool and the engine; only
 * cli/ and a backend's own files name a backend.
 *
 * Memory: activations are float32 arrays in backend memory ("device pointers":
 * on the CPU plain pointers, on a GPU device addresses). Weights are rp_tensor
 * descriptors whose data the backend holds (the CPU backend aliases the model's
 * memory; a GPU backend copies, and may repack, at rp_backend_tensor_init).
 * Host memory that device results are copied into comes from
 * rp_backend_host_alloc (pinned on a GPU, so the copy runs at full speed).
 *
 * Shapes: a 2-D tensor has ne[0] contiguous columns and ne[1] rows. Activations
 * are row-major (n_tokens, width). A matmul computes y = x · Wᵀ, i.e. for
 * weight W of shape (rows=out, cols=in): y[t][r] = dot(W[r], x[t]).
 *
 * A forward pass: rp_backend_begin_batch hands the backend the batch's
 * descriptor (token ids, positions, KV slots, the sequences' block tables, the
 * rows the forward returns), which a device backend uploads once; the ops that
 * need per-token facts (get_rows, rope, attention, gather_rows) read them from
 * there, so no per-token host pointer crosses the seam during the forward. Ops
 * are queued in order (on a GPU, asynchronously on one stream); the forward's
 * results come back with rp_backend_download into host memory, then one
 * rp_backend_synchronize.
 *
 * Determinism: every op computes each output element with a fixed reduction
 * order that depends only on the weight's shape (and a fixed key-chunk size for
 * attention), never on the number of tokens in the batch, the token's place in
 * it, the context length or the thread count. Threads split outputs, never
 * reductions (a split of a reduction is allowed only at boundaries fixed by the
 * shape, merged in order).
 *
 * The KV cache: a layer's K and V live in backend memory in a layout the backend
 * chooses (rp_kv_layer is opaque to everyone else). Blocks cross the seam only
 * whole, in one canonical layout (rp_backend_kv_block_export/_import), so a
 * block saved by one backend has the same bytes as on any other.
 *
 * Threads: a backend is driven by one thread at a time (the engine thread).
 * rp_backend_open, rp_backend_count and rp_backend_name may be called from any
 * thread.
 */
#ifndef RP_BACKEND_H
#define RP_BACKEND_H

#include "../base/base.h"

typedef struct rp_backend rp_backend;

/* ---- opening a backend ---- */

typedef struct rp_backend_params {
    int n_threads; // CPU threads (the CPU backend's pool; a GPU backend's host pool); 0 = all cores
    // BF16 weights take float32 activations (the reference's numbers) even where the
    // backend would round them to bf16 for speed (the CPU on AMD's AVX512_BF16 and
    // Intel's AMX: see the CPU backend's numerics in docs/DESIGN.md).
    bool f32_activations;
} rp_backend_params;

void rp_backend_params_default(rp_backend_params *p);

// Opens the backend `name`: "cpu", or "cuda" / "cuda:N" (GPU N, 0 by default) in a
// build with the CUDA backend. Errors: RP_ERR_UNSUPPORTED for a name this build does
// not have (the message lists the ones it has), RP_ERR_DEVICE when the device cannot
// be used (no GPU, no driver, N out of range: the message says which), RP_ERR_NOMEM.
rp_status rp_backend_open(const char *name, const rp_backend_params *p, rp_backend **out);
// The default device's name for this build and machine: "cuda" when a CUDA backend is
// compiled in and a GPU answers, else "cpu".
const char *rp_backend_default_name(void);
// The backends compiled into this build, for listing and for the op harness: i in
// [0, rp_backend_count()); "cpu" first.
int rp_backend_count(void);
const char *rp_backend_name(int i);
void rp_backend_destroy(rp_backend *be);

// Facts about an open backend. Plain data.
typedef struct rp_backend_info {
    const char *name;     // "cpu", "cuda:0"
    char device[128];     // "AMD EPYC 9B45 (avx512, 2 threads)", "NVIDIA H200 (sm_90, 132 SMs)"
    bool host_memory;     // backend memory is host memory (pointers interchangeable, no copies needed)
    uint64_t mem_total;   // bytes of device memory (0: host memory)
    uint64_t mem_free;    // bytes free now (0: host memory)
} rp_backend_info;

void rp_backend_get_info(rp_backend *be, rp_backend_info *out);
// What decides this backend's numbers for weights of `wtype` (kernels, instruction sets,
// activation rounding), hashed into the prefix cache's fingerprint so that KV computed
// with other numbers is never reused: "cpu avx512 bf16-act:amx". Static storage.
const char *rp_backend_numerics(rp_backend *be, rp_dtype wtype);
// A short note on how weights of `wtype` are multiplied when that differs from plain
// float32 activations (" (bf16 activations, AMX)"), "" otherwise; for descriptions.
const char *rp_backend_numerics_note(rp_backend *be, rp_dtype wtype);
// A pool of host threads for work between ops (the engine's sampling), idle while ops
// run; NULL when the backend has none (the work then runs on the calling thread).
rp_pool *rp_backend_host_pool(rp_backend *be);
// The host threads a backend computes with (the CPU backend's pool), 0 for a device.
int rp_backend_threads(rp_backend *be);
// NULL while the backend can run; after an error that left its device unusable (a GPU
// context lost to a kernel fault), why (static storage): every later op fails at once.
const char *rp_backend_lost(rp_backend *be);

/* ---- memory ---- */

// A weight tensor held by a backend. Plain data; made by rp_backend_tensor_init.
typedef struct rp_tensor {
    rp_dtype type;
    int64_t ne[3];    // ne[0] columns (contiguous, a whole number of blocks), ne[1] rows, ne[2] matrices (1)
    const void *data; // backend memory, rows of rp_dtype_row_bytes(type, ne[0]) bytes (the backend's own
                      // layout when it repacks: then only its kernels read it)
    size_t nbytes;    // bytes of the weight as stored in the file's type (what a pass reads)
    void *priv;       // the backend's own per-tensor state (a repacked copy), or NULL
} rp_tensor;

// Backend memory: zero-filled; bytes == 0 allowed. RP_ERR_NOMEM names the size.
rp_status rp_backend_alloc(rp_backend *be, size_t bytes, void **out);
void rp_backend_free(rp_backend *be, void *ptr);
// Host memory for results copied from the backend (pinned on a GPU). Zero-filled.
rp_status rp_backend_host_alloc(rp_backend *be, size_t bytes, void **out);
void rp_backend_host_free(rp_backend *be, void *ptr);
// Copies to / from / within backend memory, in queue order with the ops. upload may
// return before the copy is done only when src is not host memory of the caller's
// (it is: it is safe to reuse src at return). download's dst is complete after
// rp_backend_synchronize.
rp_status rp_backend_upload(rp_backend *be, void *dst, const void *src, size_t bytes);
rp_status rp_backend_download(rp_backend *be, void *dst, const void *src, size_t bytes);
rp_status rp_backend_copy(rp_backend *be, void *dst, const void *src, size_t bytes);
// rows rows of row_bytes each from src (rows src_pitch bytes apart) to dst (dst_pitch
// apart), within backend memory.
rp_status rp_backend_copy_2d(rp_backend *be, void *dst, size_t dst_pitch, const void *src, size_t src_pitch,
                             size_t row_bytes, size_t rows);
// Waits until everything queued is done. Errors: RP_ERR_DEVICE (an op failed on the device).
rp_status rp_backend_synchronize(rp_backend *be);

// Makes a weight tensor (ne[2] = 1) from host data (rows of `type`). The CPU backend
// aliases host_data, which must outlive the tensor; others copy it (and may repack).
// Errors: RP_ERR_UNSUPPORTED for a type the backend has no kernels for (the message
// names it and the backend), RP_ERR_INVALID for a bad shape, RP_ERR_NOMEM.
rp_status rp_backend_tensor_init(rp_backend *be, rp_dtype type, int64_t ne0, int64_t ne1, const void *host_data,
                                 rp_tensor *out);
void rp_backend_tensor_deinit(rp_backend *be, rp_tensor *t);
bool rp_backend_supports_type(rp_backend *be, rp_dtype type);
#define RP_BACKEND_GROUP_MAX 4 // weights rp_backend_group_weights takes, at most

// Says that the forward multiplies these n weights (n <= RP_BACKEND_GROUP_MAX; those with
// NULL data are skipped) by one x together, as one rp_backend_matmul_group (q, k, v): a backend may choose
// their kernels' parameters together (CUDA: the K-splits, so that the group's blocks fill
// the GPU in one wave). Call once, after their tensor_init and before any op with them; a
// weight's results then depend on its group's shapes, never on the calls made with it.
void rp_backend_group_weights(rp_backend *be, rp_tensor *const *w, int n);

/* ---- the KV cache ---- */

// Paged KV of one layer: n_blocks blocks of block_size tokens, each token holding
// n_kv_head x head_dim values for K and the same for V, stored as `type`:
// RP_DTYPE_F16 (IEEE half: values clamped to ±65504, then rounded to nearest even;
// the default) or RP_DTYPE_F32. Attention computes in float32 either way. The layout
// inside a block is the backend's. Made by rp_backend_kv_layer_init.
typedef struct rp_kv_layer {
    void *k, *v;  // backend memory, the backend's layout
    rp_dtype type;
    int n_blocks, block_size, n_kv_head, head_dim;
} rp_kv_layer;

// Bytes of one block of one layer, K and V together, in any layout: 2 * block_size *
// n_kv_head * head_dim elements of type.
size_t rp_kv_layer_block_bytes(const rp_kv_layer *kv);

// Allocates a layer (zero-filled). Errors: RP_ERR_INVALID (geometry, type), RP_ERR_NOMEM.
rp_status rp_backend_kv_layer_init(rp_backend *be, int n_blocks, int block_size, int n_kv_head, int head_dim,
                                   rp_dtype type, rp_kv_layer *out);
void rp_backend_kv_layer_deinit(rp_backend *be, rp_kv_layer *kv);
// Block b of a layer to host memory in the canonical layout, rp_kv_layer_block_bytes
// bytes: K as (block_size, n_kv_head, head_dim) values of the layer's type, then V the
// same. Complete at return (it synchronizes).
rp_status rp_backend_kv_block_export(rp_backend *be, const rp_kv_layer *kv, int32_t b, void *host);
// The reverse: fills block b from the canonical layout. src may be reused at return.
rp_status rp_backend_kv_block_import(rp_backend *be, rp_kv_layer *kv, int32_t b, const void *host);
// Copies block src to block dst within the layer.
rp_status rp_backend_kv_block_copy(rp_backend *be, rp_kv_layer *kv, int32_t dst, int32_t src);

/* ---- one forward ---- */

// Rotary embedding over the first rot_dim dims of each head (rot_dim == head_dim: all;
// partial rotary leaves dims [rot_dim, head_dim) as they are): per pair i < rot_dim/2 the
// angle is pos * inv_freq[i]. NEOX pairs element i with i + rot_dim/2 (HF rotate_half);
// NORM pairs 2i with 2i+1 (llama.cpp's layout for Llama GGUF files, whose Q/K rows it
// permuted).
typedef enum rp_rope_style {
    RP_ROPE_NEOX = 0,
    RP_ROPE_NORM = 1,
} rp_rope_style;

// The per-token facts of one forward's flattened batch. Plain data, host memory, valid
// until the next rp_backend_begin_batch (a backend may keep the pointers or copy them).
// Tokens of one sequence at consecutive positions (a prefill chunk, a decode token and
// its drafts) lie next to each other in batch order.
typedef struct rp_batch_desc {
    int n_tokens;
    const int32_t *tokens;   // (n_tokens) token ids (rp_backend_get_rows)
    const int32_t *pos;      // (n_tokens) position of each token in its sequence
    const int32_t *slot;     // (n_tokens) KV slot written for the token: block * block_size + offset
    const int32_t *seq;      // (n_tokens) the token's sequence, in [0, n_seqs)
    int n_seqs;
    const int32_t *bt_start; // (n_seqs + 1) sequence s's block table is bt[bt_start[s], bt_start[s + 1])
    const int32_t *bt;       // (bt_start[n_seqs]) block ids
    int block_size;
    int n_rows;              // the rows the forward returns (logits or hidden rows), ascending
    const int32_t *rows;     // (n_rows) batch index of each
    int n_logit_rows;        // of those, the ones that want logits, ascending
    const int32_t *logit_rows; // (n_logit_rows) index into rows of each
    // Recurrent state (models with Gated DeltaNet layers; NULL otherwise): per sequence,
    // the state copy its tokens start from (rp_state_layer: slot * 2 + copy; their end
    // state goes to the other copy, state_in[s] ^ 1), and its tokens' run in batch order.
    const int32_t *state_in;   // (n_seqs)
    const int32_t *seq_first;  // (n_seqs) batch index of the sequence's first token
    const int32_t *seq_count;  // (n_seqs) its tokens in this batch (consecutive positions)
} rp_batch_desc;

// Starts a forward: the ops until the next call read the batch's per-token facts from
// desc. Errors: RP_ERR_NOMEM, RP_ERR_DEVICE.
rp_status rp_backend_begin_batch(rp_backend *be, const rp_batch_desc *desc);

// Which index list rp_backend_gather_rows follows.
typedef enum rp_row_set {
    RP_ROWS_OUT = 0,   // desc.rows: batch rows -> output rows
    RP_ROWS_LOGIT = 1, // desc.logit_rows: output rows -> the rows that want logits
} rp_row_set;

// dst[i] = src[idx[i]] for the n indices of `set`, rows of width floats. dst may be
// src (the indices ascend, so rows only move forward).
rp_status rp_backend_gather_rows(rp_backend *be, rp_row_set set, const float *src, int width, float *dst);

// One matmul of a group (rp_backend_matmul_group): y (n, w->ne[1]) = x · wᵀ, then
// y[t][i] += bias[i] when bias is set, then residual[t][i] += y[t][i] when residual is set.
// Each step is the same float operation as the separate ops (matmul, add_bias, add).
typedef struct rp_matmul_desc {
    const rp_tensor *w;
    float *y;          // (n, w->ne[1]) backend memory
    const float *bias; // (w->ne[1]) or NULL
    float *residual;   // (n, w->ne[1]) or NULL
} rp_matmul_desc;

// ---- ops (all pointers are backend memory; n = number of rows) ----

// out[t] = dequant(table row desc.tokens[t]) for the batch's tokens, a (n_vocab, width) table.
rp_status rp_backend_get_rows(rp_backend *be, const rp_tensor *table, float *out);
// y (n, w->ne[1]) = x (n, w->ne[0]) · wᵀ
rp_status rp_backend_matmul(rp_backend *be, const rp_tensor *w, const float *x, int n, float *y);
// count matmuls that read the same x (n, ne0) -- every mm[i].w has ne[0] columns --
// as one operation (e.g. Q, K and V; or a projection and its residual add). Results
// are bitwise those of the separate matmul / add_bias / add calls. y buffers must
// not overlap x or each other.
rp_status rp_backend_matmul_group(rp_backend *be, const rp_matmul_desc *mm, int count, const float *x, int n);
// out (n, gate->ne[1]) = silu(x · gateᵀ) ⊙ (x · upᵀ), gate and up of the same shape;
// up_out (n, up->ne[1]) receives x · upᵀ. Bitwise matmul, matmul, silu_mul.
rp_status rp_backend_matmul_glu(rp_backend *be, const rp_tensor *gate, const rp_tensor *up, const float *x, int n,
                                float *up_out, float *out);
// y[t][i] += b[i] for a (width) f32 bias
rp_status rp_backend_add_bias(rp_backend *be, float *y, const float *b, int n, int width);
// out[t] = x[t] / rms(x[t]) * w, per row of `width` (rows = n * groups, for per-head norms)
rp_status rp_backend_rmsnorm(rp_backend *be, const float *x, const float *w, float eps, int rows, int width,
                             float *out);
// x (desc.n_tokens, n_head * head_dim) rotated in place, token t by desc.pos[t], over the
// first rot_dim (even, <= head_dim) dims of each head; inv_freq (rot_dim / 2) is backend memory.
rp_status rp_backend_rope(rp_backend *be, float *x, int n_head, int head_dim, int rot_dim, const float *inv_freq,
                          rp_rope_style style);
// Writes k, v (desc.n_tokens, n_kv_head*head_dim) into the layer's slots desc.slot
// (converted to its type), then out[t] (n_head*head_dim) = softmax(q[t]·K[0..pos[t]]ᵀ ·
// scale) · V over the token's own sequence (desc.seq, its block table).
rp_status rp_backend_attention(rp_backend *be, const float *q, const float *k, const float *v, rp_kv_layer *kv,
                               int n_head, int n_kv_head, int head_dim, float scale, float *out);
// out[t][i] = x[t][i] * sigmoid(gate[t][i * gate_width / width]) for t < rows, i < width:
// gate_width == width gates each element (gated attention), gate_width == 1 scales each
// row by one gate (a shared expert's). sigmoid(g) = 1 / (1 + exp(-g)) in float32. out may be x.
rp_status rp_backend_sigmoid_mul(rp_backend *be, const float *x, const float *gate, int rows, int width,
                                 int gate_width, float *out);
// out = silu(gate) * up, element-wise over count floats
rp_status rp_backend_silu_mul(rp_backend *be, const float *gate, const float *up, size_t count, float *out);
// y += x, element-wise over count floats
rp_status rp_backend_add(rp_backend *be, float *y, const float *x, size_t count);
// out[r] = the index of the largest of x[r][0, width) for r < rows (the first one on a
// tie; NaN never wins unless the whole row is NaN: then 0), int32 in backend memory.
rp_status rp_backend_argmax(rp_backend *be, const float *x, int rows, int width, int32_t *out);

/* ---- mixture of experts (optional: rp_backend_has_moe) ---- */

// Routing: for each of the n rows of router logits (n_expert floats), the softmax over the
// experts in float32 (exp(l - max) / the sum in expert order), its n_used largest
// probabilities (a tie goes to the lower expert) in decreasing order with their experts,
// divided by their sum (added in that order) when `norm`. ids and w: (n, n_used), backend
// memory.
rp_status rp_backend_moe_route(rp_backend *be, const float *logits, int n, int n_expert, int n_used, bool norm,
                               int32_t *ids, float *w);

// One MoE MLP. Plain data; the arrays and scratch in backend memory.
typedef struct rp_moe_desc {
    int n_expert, n_used;
    const rp_tensor *gate, *up, *down; // (n_expert) each: (ffn, dim), (ffn, dim), (dim, ffn)
    const int32_t *ids;                // (n, n_used) the tokens' experts (rp_backend_moe_route)
    const float *w;                    // (n, n_used) and their weights
    float *x_rows, *o_rows;            // scratch (cap_rows, dim) each: an expert's input and output rows
    float *g_rows, *u_rows;            // scratch (cap_rows, ffn) each
    int cap_rows;                      // rows the scratch holds: at least n (n_used or more lets a
                                       // one-token call run its experts' matrices together)
} rp_moe_desc;

// out (n, dim) = for each token, 0 + w_j · down_e(silu(gate_e · x) * up_e · x) added over its
// experts e in increasing expert order (w_j its weight for e), each expert's matrices
// multiplied once for all the tokens routed to it, with the same arithmetic as
// rp_backend_matmul_glu and rp_backend_matmul (so a token's row does not depend on the
// others). RP_ERR_UNSUPPORTED on a backend without it.
rp_status rp_backend_moe_ffn(rp_backend *be, const rp_moe_desc *d, const float *x, int n, float *out);
// Whether the backend has the two MoE ops.
bool rp_backend_has_moe(rp_backend *be);

/* ---- Gated DeltaNet (optional: rp_backend_has_gdn) ---- */

// The recurrent state of one Gated DeltaNet layer for n_slots sequences, float32 in
// backend memory, laid out as below on every backend (so it crosses the seam as bytes).
// Each slot has two copies (ping-pong: a forward reads one and writes the other, so the
// state before the forward survives it); copy r of slot s is state + (2s + r) *
// rp_state_floats(st): the n_v_head (dk, dv) matrices S (row i: key dim, column c: value
// dim), then the conv window, the last kc - 1 raw conv inputs (conv_dim each, oldest
// first). The log keeps, per slot, the inputs of the last forward's tokens of that slot's
// sequence when they were at most log_cap (rows of conv_dim + 2 * n_v_head floats: the
// raw conv input, b, a), so a rollback can replay a prefix of them (rp_backend_gdn with
// mixed NULL). Made and owned by the KV pool (kv.h).
typedef struct rp_state_layer {
    float *state; // (2 * n_slots, rp_state_floats)
    float *log;   // (n_slots, log_cap, rp_state_log_floats)
    int n_slots, log_cap;
    int n_k_head, n_v_head, dk, dv, kc; // conv_dim = 2 * n_k_head * dk + n_v_head * dv
} rp_state_layer;

// Floats of one copy of one slot's state, and of one log row.
size_t rp_state_floats(const rp_state_layer *st);
size_t rp_state_log_floats(const rp_state_layer *st);

// One Gated DeltaNet layer's recurrence. Plain data; pointers in backend memory.
typedef struct rp_gdn_desc {
    const float *conv_w;           // (conv_dim, kc) the depthwise causal conv's weights
    const float *a_log, *dt_bias;  // (n_v_head) each
    const float *mixed;            // (n, conv_dim) the raw conv inputs [q heads | k heads | v heads];
                                   // NULL: a replay, inputs from the log (rows 0.. of each slot)
    const float *b, *a;            // (n, n_v_head) each (ignored in a replay)
    float *out;                    // (n, n_v_head * dv) the heads' outputs; NULL in a replay
    rp_state_layer *st;
} rp_gdn_desc;

// For each sequence s of the batch (rp_batch_desc's state_in, seq_first, seq_count), its
// tokens in order from the state copy state_in[s]: the conv over the window and the token's
// raw input, silu, split into q, k (n_k_head heads of dk) and v (n_v_head of dv); q and k
// L2-normalized (x / sqrt(Σx² + 1e-6)), q scaled by 1/sqrt(dk); value head j uses key head
// j / (n_v_head / n_k_head); beta = sigmoid(b[j]), g = -exp(a_log[j]) · softplus(a[j] +
// dt_bias[j]); then S ← exp(g)·S, p = Sᵀk, δ = beta·(v − p), S ← S + k·δᵀ, out = Sᵀq. The end
// state goes to copy state_in[s] ^ 1; a sequence's inputs are logged when seq_count[s] <=
// log_cap (not in a replay). Each output depends only on its sequence's state and tokens.
// RP_ERR_UNSUPPORTED on a backend without it.
rp_status rp_backend_gdn(rp_backend *be, const rp_gdn_desc *d);
// Whether the backend has rp_backend_gdn.
bool rp_backend_has_gdn(rp_backend *be);

#endif
