/*
 * mm_kernels.h - the CPU matmul tile kernels, per instruction set, that matmul.c
 * dispatches to (scalar ones in matmul.c, AVX2 ones in matmul_avx2.c, AVX-512 ones
 * in matmul_avx512.c, BF16 x bf16 activations in matmul_avx512bf16.c and
 * matmul_amx.c), and their activation layouts. The block formats they read are
 * ../../quant/quant.h's.
 *
 * Threads: everything here is a pure function of its arguments.
 */
#ifndef RP_CPU_MM_KERNELS_H
#define RP_CPU_MM_KERNELS_H

#include "../../quant/quant.h"
#include "cpu_int.h"

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
