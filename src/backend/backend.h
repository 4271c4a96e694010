/*
 * backend.h - the compute backend interface: buffers and the ops a forward pass needs.
 *
 * The model's forward pass is written once, as calls on this interface; each
 * backend (CPU now, CUDA next) fills the vtable. Activations are float32 arrays
 * in backend memory ("device pointers": on the CPU plain pointers, on a GPU
 * device addresses). Weights are rp_tensor descriptors whose data the backend
 * holds (the CPU backend aliases the model's mmap; a GPU backend copies).
 *
 * Shapes: a 2-D tensor has ne[0] contiguous columns and ne[1] rows. Activations
 * are row-major (n_tokens, width). A matmul computes y = x · Wᵀ, i.e. for
 * weight W of shape (rows=out, cols=in): y[t][r] = dot(W[r], x[t]).
 *
 * Determinism: every op computes each output element with a fixed reduction
 * order that does not depend on the number of tokens in the batch, the token's
 * place in it, or the thread count. Threads split outputs, never reductions.
 *
 * Threads: a backend is driven by one thread at a time (the engine thread).
 */
#ifndef RP_BACKEND_H
#define RP_BACKEND_H

#include "../base/base.h"

typedef struct rp_backend rp_backend;

// A weight tensor held by a backend. Plain data.
typedef struct rp_tensor {
    rp_dtype type;
    int64_t ne[2];    // ne[0] columns (contiguous, a whole number of blocks), ne[1] rows
    const void *data; // backend memory, rows of rp_dtype_row_bytes(type, ne[0]) bytes
    size_t nbytes;
} rp_tensor;

// Rotary embedding: per pair i < head_dim/2 the angle is pos * inv_freq[i].
// NEOX pairs element i with i + head_dim/2 (HF rotate_half); NORM pairs 2i with
// 2i+1 (llama.cpp's layout for Llama GGUF files, whose Q/K rows it permuted).
typedef enum rp_rope_style {
    RP_ROPE_NEOX = 0,
    RP_ROPE_NORM = 1,
} rp_rope_style;

// Paged KV of one layer: n_blocks blocks of block_size tokens, each token holding
// n_kv_head x head_dim values for K and the same for V, stored as `type`:
// RP_DTYPE_F16 (IEEE half, rounded to nearest even when written; the default) or
// RP_DTYPE_F32. Attention computes in float32 either way. Inside a block K is
// transposed: one element of head_dim for the block's tokens lies in consecutive
// slots, so a SIMD register loads 16 keys' values at once and a score is one FMA
// chain per key (no horizontal sums); V keeps a token's values together.
//   k: (n_blocks, n_kv_head, head_dim, block_size) of type, backend memory
//   v: (n_blocks, block_size, n_kv_head, head_dim) of type, backend memory
// A block is the same number of bytes either way: blocks are copied, saved and
// loaded whole, never by token.
typedef struct rp_kv_layer {
    void *k;
    void *v;
    rp_dtype type;
} rp_kv_layer;

// Element index in a layer's K array of element i of KV head kvh at slot
// (block * block_size + offset).
static inline size_t rp_kv_k_index(size_t slot, int kvh, int i, int n_kv_head, int head_dim, int block_size)
{
    size_t block = slot / (size_t)block_size, off = slot % (size_t)block_size;
    return ((block * (size_t)n_kv_head + (size_t)kvh) * (size_t)head_dim + (size_t)i) * (size_t)block_size + off;
}

// Element index in a layer's V array of element i of KV head kvh at slot.
static inline size_t rp_kv_v_index(size_t slot, int kvh, int i, int n_kv_head, int head_dim)
{
    return (slot * (size_t)n_kv_head + (size_t)kvh) * (size_t)head_dim + (size_t)i;
}

// What attention needs to know about each token of a flattened batch. Plain data,
// host memory (a device backend uploads it once per forward).
typedef struct rp_attn_info {
    int n_tokens;
    int block_size;
    const int32_t *pos;                  // (n_tokens) position of each token in its sequence
    const int32_t *slot;                 // (n_tokens) KV slot (block * block_size + offset) to write
    const int32_t *const *block_table;   // (n_tokens) block table of each token's sequence
} rp_attn_info;

// One matmul of a group (rp_backend_ops.matmul_group): y (n, w->ne[1]) = x · wᵀ, then
// y[t][i] += bias[i] when bias is set, then residual[t][i] += y[t][i] when residual is set.
// Each step is the same float operation as the separate ops (matmul, add_bias, add).
typedef struct rp_matmul_desc {
    const rp_tensor *w;
    float *y;          // (n, w->ne[1]) backend memory
    const float *bias; // (w->ne[1]) or NULL
    float *residual;   // (n, w->ne[1]) or NULL
} rp_matmul_desc;

typedef struct rp_backend_ops {
    const char *name;

    void (*destroy)(rp_backend *be);

    // Memory. Buffers are zero-filled. bytes == 0 allowed.
    rp_status (*alloc)(rp_backend *be, size_t bytes, void **out);
    void (*free)(rp_backend *be, void *ptr);
    rp_status (*upload)(rp_backend *be, void *dst, const void *src, size_t bytes);
    rp_status (*download)(rp_backend *be, void *dst, const void *src, size_t bytes);
    rp_status (*copy)(rp_backend *be, void *dst, const void *src, size_t bytes); // within backend memory

    // Makes a weight tensor from host data (rows of `type`). The CPU backend aliases
    // host_data, which must outlive the tensor; others copy it.
    rp_status (*tensor_init)(rp_backend *be, rp_dtype type, int64_t ne0, int64_t ne1, const void *host_data,
                             rp_tensor *out);
    void (*tensor_deinit)(rp_backend *be, rp_tensor *t);
    bool (*supports_type)(rp_backend *be, rp_dtype type);

    // ---- ops (all pointers are backend memory; n = number of tokens) ----

    // out[t] = dequant(table row tokens[t]) for a (n_vocab, width) table. tokens is host memory.
    rp_status (*get_rows)(rp_backend *be, const rp_tensor *table, const int32_t *tokens, int n, float *out);
    // y (n, w->ne[1]) = x (n, w->ne[0]) · wᵀ
    rp_status (*matmul)(rp_backend *be, const rp_tensor *w, const float *x, int n, float *y);
    // count matmuls that read the same x (n, ne0) -- every mm[i].w has ne[0] columns --
    // as one operation (e.g. Q, K and V; or a projection and its residual add): the
    // backend quantizes x once and splits the union of rows over its threads. Results
    // are bitwise those of the separate matmul / add_bias / add calls. y buffers must
    // not overlap x or each other.
    rp_status (*matmul_group)(rp_backend *be, const rp_matmul_desc *mm, int count, const float *x, int n);
    // out (n, gate->ne[1]) = silu(x · gateᵀ) ⊙ (x · upᵀ), gate and up of the same shape;
    // up_out (n, up->ne[1]) receives x · upᵀ. Bitwise matmul, matmul, silu_mul.
    rp_status (*matmul_glu)(rp_backend *be, const rp_tensor *gate, const rp_tensor *up, const float *x, int n,
                            float *up_out, float *out);
    // y[t][i] += b[i] for a (width) f32 bias
    rp_status (*add_bias)(rp_backend *be, float *y, const float *b, int n, int width);
    // out[t] = x[t] / rms(x[t]) * w, per row of `width` (rows = n * groups, for per-head norms)
    rp_status (*rmsnorm)(rp_backend *be, const float *x, const float *w, float eps, int rows, int width, float *out);
    // x[t] (n_head, head_dim) rotated in place by pos[t]
    rp_status (*rope)(rp_backend *be, float *x, const int32_t *pos, int n, int n_head, int head_dim,
                      const float *inv_freq, rp_rope_style style);
    // Writes k, v (n, n_kv_head*head_dim) into the layer's slots (converted to its type), then
    // out[t] (n_head*head_dim) = softmax(q[t]·K[0..pos[t]]ᵀ · scale) · V of the token's sequence.
    rp_status (*attention)(rp_backend *be, const float *q, const float *k, const float *v, rp_kv_layer *kv,
                           const rp_attn_info *info, int n_head, int n_kv_head, int head_dim, float scale,
                           float *out);
    // out = silu(gate) * up, element-wise over count floats
    rp_status (*silu_mul)(rp_backend *be, const float *gate, const float *up, size_t count, float *out);
    // y += x, element-wise over count floats
    rp_status (*add)(rp_backend *be, float *y, const float *x, size_t count);

    rp_status (*synchronize)(rp_backend *be);
} rp_backend_ops;

struct rp_backend {
    const rp_backend_ops *ops;
};

// The CPU backend with a pool of n_threads (0 = all cores).
rp_status rp_backend_cpu_create(int n_threads, rp_backend **out);
int rp_backend_cpu_threads(const rp_backend *be);
// BF16 weights take their activations rounded to bf16 (on) or as float32 (off, the
// default of a new backend). Honoured only where rp_cpu_bf16_act_pays(): there a
// batched matmul does up to twice (AMD) or several times (AMX) the multiply-adds per
// cycle, and the numbers differ from float32 activations' by the rounding (see
// matmul_avx512bf16.c, matmul_amx.c). Returns whether
// it is in effect. Set it before the first op; be must be a CPU backend.
bool rp_backend_cpu_set_bf16_act(rp_backend *be, bool on);
bool rp_backend_cpu_bf16_act(const rp_backend *be);
// The CPU backend's thread pool, for work between ops (the engine's token draws, a
// benchmark's own; driven by the backend's thread, never during an op). be must be a
// CPU backend.
rp_pool *rp_backend_cpu_pool(rp_backend *be);
void rp_backend_destroy(rp_backend *be);

/* ---- quantization (host, reference code shared by all backends) ---- */

// True when rp_quantize can produce `type` (Q8_0, Q4_0, and the other GGUF types).
bool rp_quantize_supported(rp_dtype type);
// Quantizes n floats (a whole number of blocks) into dst (rp_dtype_row_bytes bytes).
rp_status rp_quantize(rp_dtype type, const float *src, void *dst, int64_t n);
// Dequantizes n elements of `type` (any supported type, float types included) to float.
void rp_dequantize(rp_dtype type, const void *src, float *dst, int64_t n);

// Name of the highest SIMD level the CPU kernels use on this machine ("avx512", "avx2",
// "scalar"); a weight type without a kernel at that level uses the next level down's.
const char *rp_cpu_simd_name(void);
// True when the CPU has the AVX512_BF16 dot product and the kernels may use it (the
// test hooks below cap it with the AVX-512 level).
bool rp_cpu_has_bf16_dot(void);
// True when the CPU has AMX tiles for bf16 (AMX-TILE, AMX-BF16, AVX512_BF16, the OS's
// permission) and the kernels may use them (capped like rp_cpu_has_bf16_dot).
bool rp_cpu_has_amx(void);
// True when bf16 activations are faster than float32 ones: AMX, or AMD's bf16 dot product
// (Zen 4, Zen 5; not Intel's, which issues at half the FMA rate: matmul.c).
bool rp_cpu_bf16_act_pays(void);
// Test hook: forces the scalar reference kernels (true) or the best available (false).
void rp_cpu_force_scalar(bool on);
// Test hook: caps the kernels at the level named as rp_cpu_simd_name names them; false
// (nothing changed) for an unknown name or a level this CPU lacks.
bool rp_cpu_force_simd(const char *name);
// Test hook: keeps the AMX kernel out (true), so bf16 activations take the AVX512_BF16
// dot product where there is one, or lets it back in (false).
void rp_cpu_force_no_amx(bool off);

#endif
