/*
 * quant.h - GGML's quantized block formats, bit for bit, and their reference
 * quantization and dequantization (quant.c).
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
 * This module sits below the model loader (quantize on load, conversion) and every
 * backend (the CPU kernels' references, a GPU backend's repacking at load): it
 * depends on base/ only. The header is valid C and C++ (CUDA host code).
 *
 * Threads: everything here is a pure function of its arguments.
 */
#ifndef RP_QUANT_H
#define RP_QUANT_H

#include "../base/base.h"

#ifdef __cplusplus
extern "C" {
#define RP_STATIC_ASSERT static_assert
#else
#define RP_STATIC_ASSERT _Static_assert
#endif

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

RP_STATIC_ASSERT(sizeof(rp_block_q8_0) == 34, "q8_0 layout");
RP_STATIC_ASSERT(sizeof(rp_block_q4_0) == 18, "q4_0 layout");
RP_STATIC_ASSERT(sizeof(rp_block_q5_0) == 22, "q5_0 layout");
RP_STATIC_ASSERT(sizeof(rp_block_q4_K) == 144, "q4_K layout");
RP_STATIC_ASSERT(sizeof(rp_block_q5_K) == 176, "q5_K layout");
RP_STATIC_ASSERT(sizeof(rp_block_q6_K) == 210, "q6_K layout");
RP_STATIC_ASSERT(sizeof(rp_block_q8_K) == 292, "q8_K layout");

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

/* ---- whole rows (reference code shared by all backends) ---- */

// True when rp_quantize can produce `type` (Q8_0, Q4_0, and the other GGUF types).
bool rp_quantize_supported(rp_dtype type);
// Quantizes n floats (a whole number of blocks) into dst (rp_dtype_row_bytes bytes).
rp_status rp_quantize(rp_dtype type, const float *src, void *dst, int64_t n);
// Dequantizes n elements of `type` (any supported type, float types included) to float.
void rp_dequantize(rp_dtype type, const void *src, float *dst, int64_t n);

#ifdef __cplusplus
}
#endif

#endif
