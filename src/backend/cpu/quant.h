/*
 * quant.h - GGML's quantized block formats, bit for bit, and the CPU kernels' internals.
 *
 * The structs below are the on-disk layouts of llama.cpp's ggml-common.h, so a
 * GGUF tensor's bytes are an array of them (no padding: sizes are checked with
 * static asserts against rp_dtype_block_bytes' table). Legacy formats hold 32
 * elements per block with one fp16 scale; K-quants hold a super-block of 256
 * elements split in sub-blocks with small integer scales (and mins) that are
 * themselves scaled by fp16 super-block factors.
 *
 * Activations are quantized to a "partner" type before a quantized matmul
 * (llama.cpp's vec_dot scheme): Q8_0 for Q4_0/Q5_0/Q8_0, Q8_K (float scale plus
 * per-16 sums, bsums) for the K-quants. The dots then run on integers and scale
 * each block's integer sum once.
 *
 * Also declared here: the per-ISA matmul tile kernels that matmul.c dispatches to
 * (scalar ones in matmul.c, AVX2 ones in matmul_avx2.c, AVX-512 ones in matmul_avx512.c,
 * BF16 × bf16 activations in matmul_avx512bf16.c).
 *
 * Threads: everything here is pure functions of their arguments.
 */
#ifndef RP_CPU_QUANT_H
#define RP_CPU_QUANT_H

#include "../backend.h"

#define RP_QK 32    // elements per legacy block (Q4_0, Q5_0, Q8_0)
#define RP_QK_K 256 // elements per K-quant super-block

// Q8_0: value = qs[i] * d
typedef struct rp_block_q8_0 {
    rp_fp16 d;
    int8_t qs[RP_QK];
} rp_block_q8_0;

// Q4_0: value = (nibble - 8) * d; byte j holds element j (low nibble) and j+16 (high nibble)
typedef struct rp_block_q4_0 {
    rp_fp16 d;
    uint8_t qs[RP_QK / 2];
} rp_block_q4_0;

// Q5_0: as Q4_0 with a 5th bit per element in qh (bit j = element j, little-endian u32); value = (q - 16) * d
typedef struct rp_block_q5_0 {
    rp_fp16 d;
    uint8_t qh[4];
    uint8_t qs[RP_QK / 2];
} rp_block_q5_0;

// Q4_K: 8 sub-blocks of 32; value = d*sc[j]*q - dmin*m[j], sc/m 6-bit packed in scales[12]
// (see rp_q4k_scale_min). qs: per 64 elements, 32 bytes: low nibbles first 32, high nibbles next 32.
typedef struct rp_block_q4_K {
    rp_fp16 d;
    rp_fp16 dmin;
    uint8_t scales[12];
    uint8_t qs[RP_QK_K / 2];
} rp_block_q4_K;

// Q5_K: Q4_K plus a 5th bit: element l of 64-chunk c takes bit 2c (first 32) or 2c+1 (next 32) of qh[l].
typedef struct rp_block_q5_K {
    rp_fp16 d;
    rp_fp16 dmin;
    uint8_t scales[12];
    uint8_t qh[RP_QK_K / 8];
    uint8_t qs[RP_QK_K / 2];
} rp_block_q5_K;

// Q6_K: 16 sub-blocks of 16 with int8 scales; value = d * scales[e/16] * (q - 32), q 6-bit:
// low 4 bits in ql, high 2 bits in qh (layout per 128 elements, see dequantize in quant.c).
typedef struct rp_block_q6_K {
    uint8_t ql[RP_QK_K / 2];
    uint8_t qh[RP_QK_K / 4];
    int8_t scales[RP_QK_K / 16];
    rp_fp16 d;
} rp_block_q6_K;

// Q8_K (activations): value = qs[i] * d; bsums[j] = sum of qs[16j .. 16j+15].
typedef struct rp_block_q8_K {
    float d;
    int8_t qs[RP_QK_K];
    int16_t bsums[RP_QK_K / 16];
} rp_block_q8_K;

_Static_assert(sizeof(rp_block_q8_0) == 34, "q8_0 layout");
_Static_assert(sizeof(rp_block_q4_0) == 18, "q4_0 layout");
_Static_assert(sizeof(rp_block_q5_0) == 22, "q5_0 layout");
_Static_assert(sizeof(rp_block_q4_K) == 144, "q4_K layout");
_Static_assert(sizeof(rp_block_q5_K) == 176, "q5_K layout");
_Static_assert(sizeof(rp_block_q6_K) == 210, "q6_K layout");
_Static_assert(sizeof(rp_block_q8_K) == 292, "q8_K layout");

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K super-block: j < 4 keep
// them in the low 6 bits of bytes j and j+4; j >= 4 split them: low 4 bits in byte j+4
// (scale low nibble, min high nibble), high 2 bits in the top bits of bytes j-4 / j.
static inline void rp_q4k_scale_min(int j, const uint8_t *s, uint8_t *sc, uint8_t *m)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (uint8_t)((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4));
        *m = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

// Activation quantizers (ggml's reference rounding). n is a whole number of blocks.
void rp_quant_row_q8_0(const float *x, rp_block_q8_0 *y, int64_t n);
void rp_quant_row_q8_K(const float *x, rp_block_q8_K *y, int64_t n);

/* ---- matmul tile kernels ---- */

// Computes y[t*ldy + r] = dot(weight row r, activation row t) for r < nr, t < nt.
// w: nr rows of wstride bytes (weight type); x: nt rows of xstride bytes (float32
// for float weights, else the partner type); ne0 elements per row.
// Contract for every kernel: each (r, t) result is computed by the same sequence
// of operations whatever nr and nt are (bitwise determinism across batch sizes).
// Kernels accept nr <= RP_MM_MAX_NR and nt <= RP_MM_MAX_NT and cut them into
// register tiles of their own.
#define RP_MM_MAX_NR 4
#define RP_MM_MAX_NT 12
typedef void (*rp_mm_kernel)(const uint8_t *w, size_t wstride, int nr, const uint8_t *x, size_t xstride, int nt,
                             int64_t ne0, float *y, size_t ldy);

// The AVX2 kernel for a weight type, NULL when there is none (matmul_avx2.c).
rp_mm_kernel rp_mm_kernel_avx2(rp_dtype wtype);

// The AVX2 kernels for Q8_0/Q4_0/Q5_0 read activations in their own layout rather than
// Q8_0 blocks: per token row, with nbp = blocks rounded up to a multiple of 4 (zero padded),
//   int8 qs[32*nbp] | float d[nbp] | int32 halfsum[nbp/4][8]
// where d is the Q8_0 scale (fp16-rounded, as the reference quantizer stores it) and
// halfsum[g] holds Σqs over the first 16 elements of blocks 4g..4g+3, then over their last 16.
// rp_mm_act_bytes_avx2 is the row size, 0 for weight types that use the partner type as is.
size_t rp_mm_act_bytes_avx2(rp_dtype wtype, int64_t ne0);
void rp_mm_quantize_act_avx2(const float *x, int64_t ne0, uint8_t *out);

// The AVX-512 (F/BW/VL/VNNI/VBMI) kernel for a weight type, NULL when there is none
// (matmul_avx512.c; the AVX2 kernel serves the other types).
rp_mm_kernel rp_mm_kernel_avx512(rp_dtype wtype);

// Tokens the AVX-512 kernel for a weight type wants per call in prefill, 0 for any
// number up to RP_MM_MAX_NT. BF16: as many whole tiles of tokens as keep their
// activations within 24 KiB (the caller holds them in L1 across a block of rows).
int rp_mm_tokens_avx512(rp_dtype wtype, int64_t ne0);

// Converts one activation row x (ne0 floats) to a SIMD kernel's own layout.
typedef void (*rp_mm_act_fn)(const float *x, int64_t ne0, uint8_t *out);

// The AVX-512 kernels' activation layouts (rp_mm_act_fn_avx512(wtype) writes one row):
// BF16: per 32 elements the 16 even ones, then the 16 odd ones (float, zero padded).
// Q8_0/Q4_0: per token row in groups of 4 Q8_0 blocks (zero padded), 256 bytes per group:
//   int8 lo[64] | int8 hi[64] | int32 negsum[16] | float d[16]
// lo/hi lane k (16 bytes): elements 0..15 / 16..31 of block k; negsum lane 4k: -Σqs of
// block k, other lanes 0; d lanes 4k..4k+3: block k's scale (fp16-rounded, as the
// reference quantizer stores it). rp_mm_act_bytes_avx512 is the row size, 0 for types that
// read the partner type (or plain floats) as they are.
size_t rp_mm_act_bytes_avx512(rp_dtype wtype, int64_t ne0);
rp_mm_act_fn rp_mm_act_fn_avx512(rp_dtype wtype);

// AVX512_BF16 (matmul_avx512bf16.c): the kernel for BF16 weights against activations
// rounded to bf16, its activation layout (the row as bf16, zero padded to a multiple of
// 32 elements; rp_mm_act_bytes_bf16dot bytes, written by rp_mm_act_bf16dot), and the
// tokens it wants per call in prefill (as rp_mm_tokens_avx512).
rp_mm_kernel rp_mm_kernel_bf16dot(void);
size_t rp_mm_act_bytes_bf16dot(int64_t ne0);
void rp_mm_act_bf16dot(const float *x, int64_t ne0, uint8_t *out);
int rp_mm_tokens_bf16dot(int64_t ne0);

// AMX (matmul_amx.c): BF16 weights against activations rounded to bf16, for rows of a
// multiple of 32 elements. The activations of all n tokens are packed together, in
// blocks of 16 tokens (rp_mm_act_bytes_amx bytes; rp_mm_act_amx_clear zeros the last
// block, then rp_mm_act_amx writes each token's column); rp_mm_amx computes
// y[t * ldy + r] for rows [0, nr) and tokens [0, n).
size_t rp_mm_act_bytes_amx(int64_t ne0, int n);
void rp_mm_act_amx_clear(int64_t ne0, int n, uint8_t *out);
void rp_mm_act_amx(const float *x, int64_t ne0, int t, uint8_t *out);
void rp_mm_amx(const uint8_t *w, size_t wstride, int64_t nr, const uint8_t *x, int n, int64_t ne0, float *y,
               size_t ldy);

#endif
