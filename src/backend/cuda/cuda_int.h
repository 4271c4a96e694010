/*
 * cuda_int.h - the interface between the CUDA backend's host code (cuda_backend.c,
 * C) and its kernels (one .cu file per op family, C++): the argument structs of
 * each launch and the launchers. Plain C; valid C++.
 *
 * Every launcher has the same shape, cu_launch_fn: it reads its argument struct
 * and enqueues its kernel(s) on the stream, returning the launch's error. The host
 * code records (launcher, arguments) pairs during a forward and runs them at the
 * forward's end, eagerly or as a CUDA graph (cuda_backend.c), so a launcher must
 * depend on nothing but its arguments: every per-step fact a kernel needs
 * (positions, slots, block tables) is read by the kernel from device memory.
 *
 * Weights of the quantized types are repacked at load into planes (cu_weight): a
 * block's fields each go to an array of their own, so a kernel reads them with
 * aligned 16-byte loads (GGUF's blocks are 18, 22, 34, 144, 176 and 210 bytes).
 *
 * Determinism (backend.h): every output element is reduced in an order that
 * depends only on the weight's shape (matmuls: K cut into cu_weight.splits parts,
 * fixed at load; in each, lane l takes the elements or blocks l, l + 32, ... in order,
 * then a fixed shuffle tree; the parts added in order; the tokens are an outer loop,
 * never part of a reduction: cuda_matmul.cu) or on the key position (attention: fixed
 * chunks of CU_ATTN_CHUNK keys, chunk c to split c % CU_ATTN_SPLIT, merged in order).
 */
#ifndef RP_CUDA_INT_H
#define RP_CUDA_INT_H

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef cudaError_t (*cu_launch_fn)(const void *args, cudaStream_t s);

// Kernels may start while the one ahead of them finishes (programmatic dependent launch,
// cuda_common.cuh): on unless RP_CUDA_PDL=0 (read when a backend is opened, cuda_backend.c).
extern int cu_pdl;
// Matmuls prefetch their first weights into L2 while the kernel ahead finishes: off
// unless RP_CUDA_PREFETCH=1 (measured slower; kept for measuring).
extern int cu_prefetch;
// BF16 weights loaded from now on are tiles for the tensor cores (CU_BF16, the default: a
// verification span or a batch costs little more than one token), or rows for the CUDA
// cores (CU_BF16_ROWS) when RP_CUDA_BF16_MMA=0 (a little faster at one token).
extern int cu_bf16_mma;
// BF16 on the tensor cores: the bfloat16 parts x enters as (RP_CUDA_TC_PARTS: 2, the
// default, or 3; part of the numerics), and the row tiles a warp takes (RP_CUDA_TC_RT: 1 or
// 2; 0, the default: chosen per launch; never changes a result; recorded into each
// matmul's arguments, so a graph captured with one is never replayed for another).
extern int cu_tc_parts;
extern int cu_tc_rt;
// ... and the blocks its grid has at most (RP_CUDA_TC_GRID: -1, the default: two an SM,
// each streaming item after item; 0: one block an item; N: N). Never changes a result;
// recorded into each matmul's arguments.
extern int cu_tc_grid;

// dtype values (the rp_dtype / GGML ids the kernels know).
enum {
    CU_F32 = 0,
    CU_F16 = 1,
    CU_Q4_0 = 2,
    CU_Q5_0 = 6,
    CU_Q8_0 = 8,
    CU_Q4_K = 12,
    CU_Q5_K = 13,
    CU_Q6_K = 14,
    CU_BF16 = 30,
    CU_BF16_ROWS = 1030, // BF16 kept as rows, on CUDA cores (RP_CUDA_BF16_MMA=0; the default is CU_BF16, tiles)
};

#define CU_MAX_PLANES 4

// A weight on the device. F32, F16, BF16_ROWS: plane[0] is the rows as in the file. BF16: plane[0]
// is tiles of 16 rows x 16 columns for the tensor cores (cu_tile_offset: rows and columns
// padded with zeros to multiples of 16, tile (rb, kb) at (rb * ceil(cols / 16) + kb) * 512
// bytes, lane l's 16 bytes its A fragment of mma.m16n8k16: one coalesced 16-byte load a
// lane a tile). Quantized types: plane p holds, for every block in row order, field p's
// bytes (seg[p] each):
//   Q8_0: qs 32, d 2            Q4_0: qs 16, d 2           Q5_0: qs 16, qh 4, d 2
//   Q4_K: qs 128, head 16 (d, dmin, scales[12])             Q5_K: qs 128, qh 32, head 16
//   Q6_K: ql 128, qh 64, scales 16, d 2
typedef struct cu_weight {
    int type;
    int splits; // K-splits of its matmuls: 1, 2, 4 or 8, fixed at load (cu_matmul_splits)
    int64_t rows, cols;
    const uint8_t *plane[CU_MAX_PLANES];
} cu_weight;

// Bytes of a BF16 weight's tiles, and the launch that tiles its rows (raw: rows x cols
// bfloat16 in device memory, as in the file) into tiles (cu_tiled_bytes of them).
size_t cu_tiled_bytes(int64_t rows, int64_t cols);
cudaError_t cu_launch_tile_bf16(const uint16_t *raw, uint8_t *tiles, int64_t rows, int64_t cols, cudaStream_t s);

// Where each field of a quantized type's block goes (cuda_weights.c): n planes, plane
// p takes bytes [off[p], off[p] + seg[p]) of each block.
typedef struct cu_plane_map {
    int n;
    int off[CU_MAX_PLANES], seg[CU_MAX_PLANES];
} cu_plane_map;
bool cu_plane_map_of(int type, cu_plane_map *out);

/* ---- the batch, in device memory (cuda_backend.c uploads it once per forward) ---- */

typedef struct cu_batch {
    int n_tokens, block_size;
    const int32_t *tokens, *pos, *slot, *seq; // (n_tokens)
    const int32_t *bt_start;                  // (n_seqs + 1)
    const int32_t *bt;                        // flattened block tables
    const int32_t *rows, *logit_rows;         // the output rows
    int n_rows, n_logit_rows;
} cu_batch;

/* ---- matmul (cuda_matmul.cu) ---- */

#define CU_MM_GROUP 4

// The activations quantized for a quantized weight (cu_quantize_act): per token, Q8_0
// blocks for the legacy types (qs: 32 int8 a block; d: the scale, fp16-rounded as the
// CPU reference stores it, as float), Q8_K super-blocks for the K-quants (qs: 256 int8;
// d: float; bsums: 16 int16 sums of 16).
typedef struct cu_qact {
    int8_t *qs;
    float *d;
    int16_t *bsums;
    int64_t cols; // elements per token row
} cu_qact;

// y_i (n, w_i.rows) = x (n, cols) · w_iᵀ (+ bias_i) and residual_i += y_i, for count
// weights of one type and one cols (rp_matmul_desc); glu: count 2, y_0 = silu(x·w_0ᵀ) *
// (x·w_1ᵀ), y_1 = x·w_1ᵀ. x is float32 for float weights, else read as qa.
typedef struct cu_matmul_args {
    int count;
    bool glu;
    cu_weight w[CU_MM_GROUP];
    float *y[CU_MM_GROUP];
    const float *bias[CU_MM_GROUP];
    float *residual[CU_MM_GROUP];
    const float *x;
    cu_qact qa;
    int n;
    bool prefetch; // bring the first weights into L2 before waiting for the kernel ahead (cu_prefetch)
    int rt;        // row tiles a warp of the tensor-core kernel takes (0: chosen per launch; cu_tc_rt)
    int grid;      // the tensor-core kernel's blocks at most (0: one per item; cu_tc_grid)
    int64_t items; // (set by the launcher: the tensor-core kernel's items)
} cu_matmul_args;
cudaError_t cu_launch_matmul(const void *args, cudaStream_t s);

// The K-splits of a weight's matmuls (1, 2, 4 or 8): the fewest that give a GPU of n_sm
// SMs enough warps, each split keeping a few chunks of K (cuda_matmul.cu). A function of
// the shape, the type and the SM count alone, so a row's result never depends on the
// number of tokens.
int cu_matmul_splits(int type, int64_t rows, int64_t cols, int n_sm);
// The K-splits the n weights of a group take together (cuda_matmul.cu), or 0: each keeps
// its own.
int cu_group_splits(const cu_weight *const *w, int n, int n_sm);

// Quantizes x (n, cols) into qa: Q8_0 blocks (k_quant false) or Q8_K super-blocks, with
// the CPU reference's rounding (bit for bit).
typedef struct cu_quantize_args {
    const float *x;
    cu_qact qa;
    int n;
    bool k_quant;
} cu_quantize_args;
cudaError_t cu_launch_quantize(const void *args, cudaStream_t s);

/* ---- rows and elements (cuda_rows.cu) ---- */

// out[t] = dequant(table row tokens[t]).
typedef struct cu_get_rows_args {
    cu_weight table;
    const cu_batch *b; // device
    int n;
    float *out;
} cu_get_rows_args;
cudaError_t cu_launch_get_rows(const void *args, cudaStream_t s);

// dst[i] = src[idx[i]] (rows of width floats), i < n, idx the batch's rows (logit false)
// or logit_rows; dst must not overlap src.
typedef struct cu_gather_args {
    const float *src;
    float *dst;
    const cu_batch *b; // device
    bool logit;
    int n, width;
} cu_gather_args;
cudaError_t cu_launch_gather(const void *args, cudaStream_t s);

typedef struct cu_rmsnorm_args {
    const float *x, *w;
    float *out;
    float eps;
    int rows, width;
} cu_rmsnorm_args;
cudaError_t cu_launch_rmsnorm(const void *args, cudaStream_t s);

typedef struct cu_rope_args {
    float *x;
    const float *inv_freq;
    const cu_batch *b; // device: positions
    int n, n_head, head_dim, rot_dim; // the first rot_dim dims of each head rotate
    bool neox;
} cu_rope_args;
cudaError_t cu_launch_rope(const void *args, cudaStream_t s);

enum { CU_EW_SILU_MUL = 0, CU_EW_ADD = 1, CU_EW_ADD_BIAS = 2, CU_EW_SIGMOID_MUL = 3 };
// SILU_MUL: out = silu(a) * b; ADD: out += a; ADD_BIAS: out[t][i] += a[i] (width);
// SIGMOID_MUL: out[i] = b[i] * sigmoid(a[i / width]).
typedef struct cu_elementwise_args {
    int op;
    const float *a, *b;
    float *out;
    size_t count;
    int width;
} cu_elementwise_args;
cudaError_t cu_launch_elementwise(const void *args, cudaStream_t s);

// out[r] = the first index of the largest of x[r][0, width), NaN never chosen (all NaN: 0).
typedef struct cu_argmax_args {
    const float *x;
    int32_t *out;
    int rows, width;
} cu_argmax_args;
cudaError_t cu_launch_argmax(const void *args, cudaStream_t s);

/* ---- attention (cuda_attention.cu) ---- */

#define CU_ATTN_CHUNK 32 // keys per chunk (a warp's width): a token's keys are cut at multiples of this
#define CU_ATTN_SPLIT 32 // chunk c goes to split c % CU_ATTN_SPLIT (a warp each); the splits merge in order

// The KV layout on the device is the canonical one (backend.h): per layer, K and V each
// (n_blocks, block_size, n_kv_head, head_dim) of f16 or f32.
typedef struct cu_attn_args {
    const float *q, *k, *v; // the batch's (n, n_head * hd), (n, n_kv * hd) x2
    void *kc, *vc;          // the layer's cache
    bool f16;
    const cu_batch *b;      // device
    int n, n_head, n_kv, hd;
    float scale;
    float *part;            // scratch: (n, n_head, CU_ATTN_SPLIT) partials of (hd + 2) floats
    float *out;             // (n, n_head * hd)
} cu_attn_args;
cudaError_t cu_launch_kv_store(const void *args, cudaStream_t s);
cudaError_t cu_launch_attention(const void *args, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
