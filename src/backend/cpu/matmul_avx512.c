/*
 * matmul_avx512.c - AVX-512 (F, BW, VL, VNNI, VBMI) tile kernels for the CPU matmul.
 *
 * Chosen at run time over the AVX2 ones (matmul.c) for the weight types below;
 * other types keep their AVX2 kernel. Same tile interface and the same determinism
 * rule as matmul_avx2.c: every (row, token) accumulator sees one fixed instruction
 * sequence in every (NR, NT) specialisation, float arithmetic only through intrinsics.
 *
 * F32/F16 weights: mm_tiles.h's reduction order (RP_MM_FLT_BLOCK; AVX2 gives the same
 * bits), one 16-lane accumulator per (row, token), F16 widened with vcvtph2ps, masked loads
 * for a row's last slot (they never fault past the row). Decode takes the rows in pairs;
 * several tokens a GEMM of 4-row x 6-token tiles (rp_mm_gemm_flt_avx512, see flt_gemm).
 * BF16 needs no widening: one 512-bit load holds 32 weights as 16 pairs, a 16-bit
 * shift makes the even ones floats and a mask the odd ones, against activations split
 * once per matmul into even and odd halves of each 32 elements (in the scratch); two
 * accumulators per (row, token), in tiles of 2 rows x 4 tokens (see tile_bf16).
 * Q8_0 / Q4_0 (× activations quantized as Q8_0, in this file's own layout): a group
 * of 4 blocks at a time. One vpermt2b gathers the 4 blocks' quants from two loads so
 * that 128-bit lane k holds block k (first 16 elements in one vector, last 16 in the
 * other), and the activations are stored in that order, so vpdpbusd (u8 × s8, sums of
 * 4 into s32) runs on the block layout as is. Weights are made unsigned (Q4_0 nibbles
 * as they are, Q8_0 xor 0x80) and the offset is removed exactly in integers: the
 * accumulator starts at -offset · Σx of each block (lane 4k). Then the 16 partial
 * sums are converted and multiplied-added with their block's scale product.
 */
#include "mm_kernels.h"

#include <immintrin.h>
#include "avx512_util.h"
#include "mm_tiles.h"

#ifndef RP_PF_DIST
#define RP_PF_DIST 4096 // bytes ahead of the weight stream to prefetch (measured in decode: 4096 > 8192 > 2048)
#endif

/* ---- F32 / F16 weights ---- */

enum { W_F32, W_F16 };

#define FLT_GR 4 // the GEMM's tiles (the largest): rows, tokens (see flt_gemm)
#define FLT_GT 6
// Streaming F32 / F16 weights from memory (decode, a GEMM's first pass) prefetches each line
// twice: into L1 RP_PF_DIST bytes ahead and into L2 FLT_PF_L2 bytes ahead. The second gave
// the 0.5B model's F16 decode 10% (16 KiB > 8 KiB > none): with one FMA chain per row, a
// core keeps fewer loads in flight than the former kernel's four accumulators did.
#define FLT_PF_L2 16384

// 16 weights of a row of type wt from element i as floats; m: the ones to load (zeros after).
RP_INLINE __m512 load_w16(const uint8_t *row, int64_t i, int wt, __mmask16 m)
{
    if (wt == W_F32)
        return m == 0xFFFF ? _mm512_loadu_ps((const float *)row + i) : _mm512_maskz_loadu_ps(m, (const float *)row + i);
    __m256i h = m == 0xFFFF ? _mm256_loadu_si256((const __m256i *)((const uint16_t *)row + i))
                            : _mm256_maskz_loadu_epi16(m, (const uint16_t *)row + i);
    return _mm512_cvtph_ps(h);
}

// Slot i (16 elements, m the ones inside the row) of NR rows against NT tokens into acc:
// each weight load serves every token, each activation load every row. pf: prefetch each
// row's weights ahead (where they stream from memory).
RP_INLINE void flt_slot(const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, int64_t i, __mmask16 m,
                        __m512 acc[FLT_GR][FLT_GT], const int NR, const int NT, const int wt, const int pf)
{
    __m512 wv[FLT_GR];
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++) {
        if (pf) {
            const char *p = (const char *)w + r * ws + i * (wt == W_F32 ? 4 : 2);
            _mm_prefetch(p + RP_PF_DIST, _MM_HINT_T0);
            _mm_prefetch(p + FLT_PF_L2, _MM_HINT_T1);
        }
        wv[r] = load_w16(w + r * ws, i, wt, m);
    }
#pragma GCC unroll 8
    for (int t = 0; t < NT; t++) {
        const float *xt = (const float *)(x + t * xs) + i;
        __m512 xv = m == 0xFFFF ? _mm512_loadu_ps(xt) : _mm512_maskz_loadu_ps(m, xt);
        if (NR > 1) // in a register: gcc would otherwise fold the load into every row's FMA
            __asm__("" : "+v"(xv));
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++)
            acc[r][t] = _mm512_fmadd_ps(wv[r], xv, acc[r][t]);
    }
}

/* One reduction block (mm_tiles.h, RP_MM_FLT_BLOCK): elements [0, len) from w and x (the
 * block's start) of NR rows against NT tokens, one accumulator per (row, token), the slots
 * in order; the block's sum hsum16(acc) is stored in y (first) or added to it. Every
 * kernel and tile shape below runs this sequence per (row, token). */
RP_INLINE void flt_block(const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, int64_t len, float *y, size_t ldy,
                         const bool first, const int NR, const int NT, const int wt, const bool pf)
{
    __m512 acc[FLT_GR][FLT_GT];
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++)
            acc[r][t] = _mm512_setzero_ps();
    int64_t i = 0;
    if (pf && wt == W_F16) { // a line of F16 weights per 32 elements
        for (; i + 32 <= len; i += 32) {
            flt_slot(w, ws, x, xs, i, 0xFFFF, acc, NR, NT, wt, 1);
            flt_slot(w, ws, x, xs, i + 16, 0xFFFF, acc, NR, NT, wt, 0);
        }
    }
    for (; i + 16 <= len; i += 16)
        flt_slot(w, ws, x, xs, i, 0xFFFF, acc, NR, NT, wt, pf);
    if (i < len)
        flt_slot(w, ws, x, xs, i, (__mmask16)((1u << (len - i)) - 1), acc, NR, NT, wt, 0);
    if (NR == 4) { // a token's four sums are consecutive in y
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++) {
            float *yo = y + (size_t)t * ldy;
            __m128 v = hsum16x4_ps(acc[0][t], acc[1][t], acc[2][t], acc[3][t]);
            _mm_storeu_ps(yo, first ? v : _mm_add_ps(_mm_loadu_ps(yo), v));
        }
        return;
    }
    int k = 0;
    float o[4];
    for (; k + 4 <= NR * NT; k += 4) {
        hsum16x4(acc[k / NT][k % NT], acc[(k + 1) / NT][(k + 1) % NT], acc[(k + 2) / NT][(k + 2) % NT],
                 acc[(k + 3) / NT][(k + 3) % NT], o);
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            float *yo = y + (size_t)((k + j) % NT) * ldy + (size_t)((k + j) / NT);
            *yo = first ? o[j] : *yo + o[j];
        }
    }
    for (; k < NR * NT; k++) {
        float *yo = y + (size_t)(k % NT) * ldy + (size_t)(k / NT), v = hsum16(acc[k / NT][k % NT]);
        *yo = first ? v : *yo + v;
    }
}

// A whole row (ne0 elements) of NR rows against NT tokens: its blocks in order.
RP_INLINE void tile_flt(const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, int64_t ne0, float *y, size_t ldy,
                        const int NR, const int NT, const int wt)
{
    const int esz = wt == W_F32 ? 4 : 2;
    for (int64_t k0 = 0; k0 == 0 || k0 < ne0; k0 += RP_MM_FLT_BLOCK) { // (ne0 0: one empty block, zeros)
        int64_t len = ne0 - k0 < RP_MM_FLT_BLOCK ? ne0 - k0 : RP_MM_FLT_BLOCK;
        flt_block(w + k0 * esz, ws, x + k0 * 4, xs, len, y, ldy, k0 == 0, NR, NT, wt, true);
    }
}

// BF16 activation row (see rp_mm_act_bytes_avx512): per 32 elements, the 16 even ones
// then the 16 odd ones, zero padded to a multiple of 32.
static void split_act_bf16(const float *x, int64_t ne0, uint8_t *out)
{
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    float *o = (float *)out;
    for (int64_t i = 0; i < ne0; i += 32, o += 32) {
        __m512 a, b;
        load_act32(x + i, ne0 - i, &a, &b);
        _mm512_storeu_ps(o, _mm512_permutex2var_ps(a, ev, b));
        _mm512_storeu_ps(o + 16, _mm512_permutex2var_ps(a, od, b));
    }
}

/* BF16 order: two accumulators per (row, token), one for the even elements of each 32
 * and one for the odd ones, in element order; the output is hsum16 of their sum. With
 * two per output (not four as the other float types) a tile of 2 rows x 4 tokens fits
 * the 32 registers with its activations, so each weight load serves 4 tokens and each
 * activation load 2 rows: the inner loop is bound by the FMAs, not the loads (measured
 * on one Zen 5 core, weights in L2: 60-68 GMAC/s for the four-accumulator 1 x 6 tiles,
 * 80-95 for these). Rows are interleaved only where tokens share them: from DRAM, two
 * interleaved rows stream measurably slower than one, so decode and two-token steps
 * walk the rows one at a time (two FMA chains per row are enough there). */
#define BF16_TR 2 // rows per batched tile
#define BF16_TT 4 // tokens per batched tile

RP_INLINE void tile_bf16(const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, int64_t ne0, float *y, size_t ldy,
                         const int NR, const int NT)
{
    const __m512i hi = _mm512_set1_epi32((int)0xFFFF0000u);
    __m512 ae[BF16_TR][BF16_TT], ao[BF16_TR][BF16_TT];
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++)
            ae[r][t] = ao[r][t] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= ne0; i += 32) {
        __m512 e[BF16_TR], o[BF16_TR];
#pragma GCC unroll 8
        for (int r = 0; r < NR; r++) {
            const uint8_t *wr = w + r * ws + i * 2;
            _mm_prefetch((const char *)wr + RP_PF_DIST, _MM_HINT_T0);
            __m512i wv = load_bf16x32(wr);
            e[r] = _mm512_castsi512_ps(_mm512_slli_epi32(wv, 16));
            o[r] = _mm512_castsi512_ps(_mm512_and_si512(wv, hi));
        }
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++) {
            const float *xt = (const float *)(x + t * xs) + i;
            __m512 xe = _mm512_loadu_ps(xt), xo = _mm512_loadu_ps(xt + 16);
            // In registers: gcc would otherwise fold each load into every row's FMA,
            // loading the activations once per row (measured 20% slower).
            __asm__("" : "+v"(xe), "+v"(xo));
#pragma GCC unroll 8
            for (int r = 0; r < NR; r++) {
                ae[r][t] = _mm512_fmadd_ps(e[r], xe, ae[r][t]);
                ao[r][t] = _mm512_fmadd_ps(o[r], xo, ao[r][t]);
            }
        }
    }
    if (i < ne0) { // the last 32, masked (zeros past the row, as in the activations)
        __mmask32 m = (__mmask32)((1u << (ne0 - i)) - 1);
#pragma GCC unroll 8
        for (int r = 0; r < NR; r++) {
            __m512i wv = _mm512_maskz_loadu_epi16(m, w + r * ws + i * 2);
            __m512 e = _mm512_castsi512_ps(_mm512_slli_epi32(wv, 16));
            __m512 o = _mm512_castsi512_ps(_mm512_and_si512(wv, hi));
#pragma GCC unroll 8
            for (int t = 0; t < NT; t++) {
                const float *xt = (const float *)(x + t * xs) + i;
                ae[r][t] = _mm512_fmadd_ps(e, _mm512_loadu_ps(xt), ae[r][t]);
                ao[r][t] = _mm512_fmadd_ps(o, _mm512_loadu_ps(xt + 16), ao[r][t]);
            }
        }
    }
    __m512 sum[BF16_TR * BF16_TT];
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++)
            sum[r * NT + t] = _mm512_add_ps(ae[r][t], ao[r][t]);
    store_tile_sums(sum, y, ldy, NR, NT);
}

/* ---- Q8_0 / Q4_0 weights × Q8_0 activations ---- */

enum { W_Q8_0, W_Q4_0 };

// Activation row layout (see rp_mm_act_bytes_avx512): groups of 4 blocks, zero padded,
// 256 bytes each: int8 lo[64] (lane k: elements 0..15 of block k), int8 hi[64] (its
// elements 16..31), int32 negsum[16] (lane 4k: -Σ of block k's quants, other lanes 0),
// float d[16] (lanes 4k..4k+3: block k's scale, fp16-rounded as the reference stores it).
#define ACT_GROUP_BYTES 256

RP_INLINE int64_t act_groups(int64_t ne0)
{
    return (ne0 / RP_QK + 3) / 4;
}

size_t rp_mm_act_bytes_avx512(rp_dtype wtype, int64_t ne0)
{
    if (wtype == RP_DTYPE_BF16)
        return (size_t)((ne0 + 31) / 32) * 32 * sizeof(float);
    if (wtype != RP_DTYPE_Q8_0 && wtype != RP_DTYPE_Q4_0)
        return 0;
    return (size_t)act_groups(ne0) * ACT_GROUP_BYTES;
}

static void quantize_act_q(const float *x, int64_t ne0, uint8_t *out)
{
    int64_t nb = ne0 / RP_QK, ng = act_groups(ne0);
    memset(out, 0, (size_t)ng * ACT_GROUP_BYTES);
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 half = _mm256_set1_ps(0.49999997f); // roundf: add just under 1/2 away from zero, truncate
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *grp = out + (b / 4) * ACT_GROUP_BYTES;
        int k = (int)(b % 4);
        __m256 v[4];
        __m256 m = _mm256_setzero_ps();
        for (int e = 0; e < 4; e++) {
            v[e] = _mm256_loadu_ps(x + 32 * b + 8 * e);
            m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[e]));
        }
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        float amax = _mm_cvtss_f32(m4);
        // as the reference quantizer: scale rounded to fp16, elements divided by the unrounded one
        float d = amax / 127;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        __m256 idv = _mm256_set1_ps(id);
        __m256i q[4];
        for (int e = 0; e < 4; e++) {
            __m256 t = _mm256_mul_ps(v[e], idv);
            t = _mm256_add_ps(t, _mm256_or_ps(_mm256_and_ps(t, sign), half));
            q[e] = _mm256_cvttps_epi32(t);
        }
        __m256i s = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        s4 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 1));
        int32_t negsum = -_mm_cvtsi128_si32(s4);
        __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
        p = _mm256_permutevar8x32_epi32(p, perm);
        _mm_storeu_si128((__m128i *)(grp + 16 * k), _mm256_castsi256_si128(p));
        _mm_storeu_si128((__m128i *)(grp + 64 + 16 * k), _mm256_extracti128_si256(p, 1));
        memcpy(grp + 128 + 16 * k, &negsum, 4);
        _mm_storeu_ps((float *)(grp + 192) + 4 * k, _mm_set1_ps(_cvtsh_ss(_cvtss_sh(d, 0))));
    }
}

// Gather indices (built once; byte/word positions inside a group of 4 weight blocks).
typedef struct q_idx {
    __m512i q4; // Q4_0: byte 16k+j <- qs[j] of block k (18-byte blocks from the group start)
    __m512i d4; // Q4_0: word i (< 16) <- d of block i/4
    __m512i d8; // Q8_0: float lane i <- lane i/4
} q_idx;

RP_INLINE q_idx make_idx(void)
{
    uint8_t q4[64];
    uint16_t d4[32] = {0};
    int32_t d8[16];
    for (int i = 0; i < 64; i++) {
        int k = i / 16, j = i % 16;
        q4[i] = (uint8_t)(2 + 18 * k + j);
    }
    for (int i = 0; i < 16; i++) {
        d4[i] = (uint16_t)(9 * (i / 4));
        d8[i] = i / 4;
    }
    q_idx r;
    r.q4 = _mm512_loadu_si512(q4);
    r.d4 = _mm512_loadu_si512(d4);
    r.d8 = _mm512_loadu_si512(d8);
    return r;
}

RP_INLINE uint16_t blk_d(const uint8_t *blk)
{
    uint16_t d;
    memcpy(&d, blk, 2);
    return d;
}

RP_INLINE int blk_bytes(int wt)
{
    return wt == W_Q8_0 ? 34 : 18;
}

// One group of 4 blocks (g) of every row and token into accumulator a (= g & 1, a
// constant so that the accumulators stay in registers). wg[r]: the group's first weight block of row r.
RP_INLINE void q_group(const q_idx *ix, const uint8_t *const *wg, const uint8_t *x, size_t xs, int64_t g,
                       __m512 acc[MM_TILE_NR][MM_TILE_NT][2], const int NR, const int NT, const int wt, const bool pf,
                       const int a)
{
    const __m512i m4 = _mm512_set1_epi8(0xF);
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++) {
        const uint8_t *b = wg[r];
        if (pf)
            _mm_prefetch((const char *)b + RP_PF_DIST, _MM_HINT_T0);
        __m512i wl, wh;
        __m512 dw;
        if (wt == W_Q4_0) {
            __m512i A = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)b)),
                                           _mm256_loadu_si256((const __m256i *)(b + 32)), 1);
            __m512i B = _mm512_castsi128_si512(_mm_loadl_epi64((const __m128i *)(b + 64))); // bytes 64..71
            __m512i q = _mm512_permutex2var_epi8(A, ix->q4, B);
            wl = _mm512_and_si512(q, m4);
            wh = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
            dw = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(ix->d4, A)));
        } else {
            if (pf)
                _mm_prefetch((const char *)b + 64 + RP_PF_DIST, _MM_HINT_T0);
            // block k's 32 quants in one 256-bit load; lane k of wl / wh their halves
            const __m512i bias = _mm512_set1_epi8((char)0x80);
            __m512i p01 = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(b + 2))),
                                             _mm256_loadu_si256((const __m256i *)(b + 36)), 1);
            __m512i p23 = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(b + 70))),
                                             _mm256_loadu_si256((const __m256i *)(b + 104)), 1);
            wl = _mm512_xor_si512(_mm512_shuffle_i64x2(p01, p23, 0x88), bias);
            wh = _mm512_xor_si512(_mm512_shuffle_i64x2(p01, p23, 0xDD), bias);
            uint64_t d4 = (uint64_t)blk_d(b) | (uint64_t)blk_d(b + 34) << 16 | (uint64_t)blk_d(b + 68) << 32 |
                          (uint64_t)blk_d(b + 102) << 48;
            dw = _mm512_permutexvar_ps(ix->d8, _mm512_castps128_ps512(_mm_cvtph_ps(_mm_cvtsi64_si128((long long)d4))));
        }
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++) {
            const uint8_t *xg = x + t * xs + g * ACT_GROUP_BYTES;
            // the weights are q + offset (8, or 128 for Q8_0): start from -offset · Σx
            __m512i s = _mm512_slli_epi32(_mm512_loadu_si512(xg + 128), wt == W_Q4_0 ? 3 : 7);
            s = _mm512_dpbusd_epi32(s, wl, _mm512_loadu_si512(xg));
            s = _mm512_dpbusd_epi32(s, wh, _mm512_loadu_si512(xg + 64));
            __m512 d = _mm512_mul_ps(dw, _mm512_loadu_ps(xg + 192));
            acc[r][t][a] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(s), acc[r][t][a]);
        }
    }
}

RP_INLINE void tile_q32(const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, int64_t ne0, float *y, size_t ldy,
                        const int NR, const int NT, const int wt)
{
    const q_idx ix = make_idx();
    __m512 acc[MM_TILE_NR][MM_TILE_NT][2];
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++)
            acc[r][t][0] = acc[r][t][1] = _mm512_setzero_ps();
    const int bs = blk_bytes(wt);
    int64_t nb = ne0 / RP_QK, ng = nb / 4;
    const uint8_t *wg[MM_TILE_NR];
    for (int64_t g = 0; g < ng; g++) {
#pragma GCC unroll 8
        for (int r = 0; r < NR; r++)
            wg[r] = w + r * ws + g * 4 * bs;
        if (g & 1)
            q_group(&ix, wg, x, xs, g, acc, NR, NT, wt, true, 1);
        else
            q_group(&ix, wg, x, xs, g, acc, NR, NT, wt, true, 0);
    }
    if (nb % 4) { // last partial group: zero blocks (scale 0) after the row's end
        _Alignas(64) uint8_t tail[MM_TILE_NR][192];
        for (int r = 0; r < NR; r++) {
            memset(tail[r], 0, sizeof(tail[r]));
            memcpy(tail[r], w + r * ws + ng * 4 * bs, (size_t)(nb % 4) * bs);
            wg[r] = tail[r];
        }
        if (ng & 1)
            q_group(&ix, wg, x, xs, ng, acc, NR, NT, wt, false, 1);
        else
            q_group(&ix, wg, x, xs, ng, acc, NR, NT, wt, false, 0);
    }
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++)
            y[t * ldy + r] = hsum16(_mm512_add_ps(acc[r][t][0], acc[r][t][1]));
}

/* ---- kernels: split an nr × nt request into register-sized tiles ---- */

/* F32 / F16, many tokens: a GEMM of tiles of FLT_GR rows x up to FLT_GT tokens (24
 * accumulators; a slot loads 4 weight vectors, F16 widened in registers, and 6 activation
 * vectors for 24 FMAs). The rows go in blocks whose reduction block of columns
 * (RP_MM_FLT_BLOCK) holds FLT_MC_BYTES of weights, in L2 while every token meets it; the
 * tokens in passes of nearly equal size, each pass's activations of the block in L1 while
 * they meet every row of it. The blocks of a row are visited in order, so each output is
 * what tile_flt gives it alone. The first pass over a block of rows reads the weights from
 * memory and prefetches them ahead; the others find them in L2. */
#define FLT_MC_BYTES (256 << 10)

#define FLT_GTILE(NR, NT) flt_block(wr, ws, xt, xs, len, yt, ldy, first, NR, NT, wt, pf)
#define FLT_GROWS(NT)                                                                                                  \
    do {                                                                                                               \
        if (k == 4)                                                                                                    \
            FLT_GTILE(4, NT);                                                                                          \
        else if (k == 3)                                                                                               \
            FLT_GTILE(3, NT);                                                                                          \
        else if (k == 2)                                                                                               \
            FLT_GTILE(2, NT);                                                                                          \
        else                                                                                                           \
            FLT_GTILE(1, NT);                                                                                          \
    } while (0)

// One pass of m (<= FLT_GT) tokens over a block of columns (len of them) of nr rows; pf:
// prefetch the weights ahead.
RP_INLINE void flt_gemm_pass(const uint8_t *w, size_t ws, int64_t nr, const uint8_t *xt, size_t xs, int m, int64_t len,
                             float *y, size_t ldy, bool first, const int wt, const int pf)
{
    _Static_assert(FLT_GR == 4 && FLT_GT == 6, "the switch below instantiates these tile shapes");
    for (int64_t r = 0; r < nr; r += FLT_GR) {
        int k = (int)(nr - r < FLT_GR ? nr - r : FLT_GR);
        const uint8_t *wr = w + (size_t)r * ws;
        float *yt = y + r;
        switch (m) {
        case 1:
            FLT_GROWS(1);
            break;
        case 2:
            FLT_GROWS(2);
            break;
        case 3:
            FLT_GROWS(3);
            break;
        case 4:
            FLT_GROWS(4);
            break;
        case 5:
            FLT_GROWS(5);
            break;
        default:
            FLT_GROWS(6);
            break;
        }
    }
}

RP_INLINE void flt_gemm(const uint8_t *w, size_t ws, int64_t nr, const uint8_t *x, size_t xs, int n, int64_t ne0,
                        float *y, size_t ldy, const int wt)
{
    const int esz = wt == W_F32 ? 4 : 2;
    int64_t kb = ne0 < RP_MM_FLT_BLOCK ? ne0 : RP_MM_FLT_BLOCK;
    int64_t mc = FLT_MC_BYTES / ((kb > 0 ? kb : 1) * esz) / FLT_GR * FLT_GR;
    mc = mc < FLT_GR ? FLT_GR : mc;
    int passes = (n + FLT_GT - 1) / FLT_GT;
    for (int64_t r0 = 0; r0 < nr; r0 += mc) {
        int64_t rows = nr - r0 < mc ? nr - r0 : mc;
        for (int64_t k0 = 0; k0 == 0 || k0 < ne0; k0 += RP_MM_FLT_BLOCK) { // (ne0 0: one empty block, zeros)
            int64_t len = ne0 - k0 < RP_MM_FLT_BLOCK ? ne0 - k0 : RP_MM_FLT_BLOCK;
            for (int p = 0, t = 0, m; p < passes; p++, t += m) {
                m = n / passes + (p < n % passes);
                const uint8_t *wb = w + (size_t)r0 * ws + k0 * esz, *xt = x + (size_t)t * xs + k0 * 4;
                float *yt = y + (size_t)t * ldy + r0;
                if (p == 0)
                    flt_gemm_pass(wb, ws, rows, xt, xs, m, len, yt, ldy, k0 == 0, wt, 1);
                else
                    flt_gemm_pass(wb, ws, rows, xt, xs, m, len, yt, ldy, k0 == 0, wt, 0);
            }
        }
    }
}

void rp_mm_gemm_flt_avx512(rp_dtype wtype, const uint8_t *w, size_t ws, int64_t nr, const uint8_t *x, size_t xs, int n,
                           int64_t ne0, float *y, size_t ldy)
{
    if (wtype == RP_DTYPE_F16)
        flt_gemm(w, ws, nr, x, xs, n, ne0, y, ldy, W_F16);
    else
        flt_gemm(w, ws, nr, x, xs, n, ne0, y, ldy, W_F32);
}

/* F32 / F16 tile kernels: one token (decode) takes the rows in pairs, two FMA chains
 * (measured faster than one row at a time, and than four, weights in cache or streamed
 * from memory); more tokens the GEMM (the matmul hands it whole chunks of rows instead). */
RP_INLINE void k_flt(const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs, int nt, int64_t ne0, float *y,
                     size_t ldy, const int wt)
{
    if (nt > 1) {
        flt_gemm(w, ws, nr, x, xs, nt, ne0, y, ldy, wt);
        return;
    }
    int r = 0;
    for (; r + 2 <= nr; r += 2)
        tile_flt(w + (size_t)r * ws, ws, x, xs, ne0, y + r, ldy, 2, 1, wt);
    if (r < nr)
        tile_flt(w + (size_t)r * ws, ws, x, xs, ne0, y + r, ldy, 1, 1, wt);
}

static void k_f32(const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs, int nt, int64_t ne0, float *y,
                  size_t ldy)
{
    k_flt(w, ws, nr, x, xs, nt, ne0, y, ldy, W_F32);
}

static void k_f16(const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs, int nt, int64_t ne0, float *y,
                  size_t ldy)
{
    k_flt(w, ws, nr, x, xs, nt, ne0, y, ldy, W_F16);
}

/* BF16: tiles of BF16_TR rows (one for fewer than 3 tokens) x up to BF16_TT tokens, the
 * tokens cut into passes of nearly equal size (6 tokens: 3 + 3, not 4 + 2). */
#define BF16_TILE(NR, NT) tile_bf16(wr, ws, xt, xs, ne0, yt, ldy, NR, NT)
#define BF16_ROWS(NT)                                                                                                  \
    do {                                                                                                               \
        if (k == 2)                                                                                                    \
            BF16_TILE(2, NT);                                                                                          \
        else                                                                                                           \
            BF16_TILE(1, NT);                                                                                          \
    } while (0)

static __attribute__((noinline)) void k_bf16_multi(const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs,
                                                   int nt, int64_t ne0, float *y, size_t ldy)
{
    _Static_assert(BF16_TR == 2 && BF16_TT == 4, "the switch below instantiates these tile shapes");
    int passes = (nt + BF16_TT - 1) / BF16_TT;
    for (int p = 0, t = 0; p < passes; p++) {
        int m = nt / passes + (p < nt % passes);
        const uint8_t *xt = x + (size_t)t * xs;
        int tr = nt >= 3 ? BF16_TR : 1; // (see BF16_TR)
        for (int r = 0; r < nr; r += tr) {
            int k = nr - r < tr ? nr - r : tr;
            const uint8_t *wr = w + (size_t)r * ws;
            float *yt = y + (size_t)t * ldy + r;
            switch (m) {
            case 1:
                BF16_ROWS(1);
                break;
            case 2:
                BF16_ROWS(2);
                break;
            case 3:
                BF16_ROWS(3);
                break;
            default:
                BF16_ROWS(4);
                break;
            }
        }
        t += m;
    }
}

static void k_bf16(const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs, int nt, int64_t ne0, float *y,
                   size_t ldy)
{
    if (nt > 1) {
        k_bf16_multi(w, ws, nr, x, xs, nt, ne0, y, ldy);
        return;
    }
    for (int r = 0; r < nr; r++)
        tile_bf16(w + (size_t)r * ws, ws, x, xs, ne0, y + r, ldy, 1, 1);
}

/* Q8_0 / Q4_0: up to 8 tokens per pass over a weight row (16 accumulators) whose
 * activations (256-byte groups per 128 elements) stay within 128 KiB
 * (DEFINE_KERNEL_FIT): their weights cost more to unpack, so more tokens per
 * unpacked group pay even from L2. */
#define Q_ACT_BYTES(ne0) (act_groups(ne0) * ACT_GROUP_BYTES)
DEFINE_KERNEL_FIT(k_q8_0, tile_q32, W_Q8_0, 8, Q_ACT_BYTES, 128 << 10)
DEFINE_KERNEL_FIT(k_q4_0, tile_q32, W_Q4_0, 8, Q_ACT_BYTES, 128 << 10)

rp_mm_act_fn rp_mm_act_fn_avx512(rp_dtype wtype)
{
    return wtype == RP_DTYPE_BF16 ? split_act_bf16 : quantize_act_q;
}

int rp_mm_tokens_avx512(rp_dtype wtype, int64_t ne0)
{
    if (wtype != RP_DTYPE_BF16)
        return 0;
    int64_t fit = (24 << 10) / (int64_t)rp_mm_act_bytes_avx512(wtype, ne0) / BF16_TT * BF16_TT;
    return fit < BF16_TT ? BF16_TT : fit > RP_MM_MAX_NT ? RP_MM_MAX_NT : (int)fit;
}

rp_mm_kernel rp_mm_kernel_avx512(rp_dtype wtype)
{
    switch (wtype) {
    case RP_DTYPE_F32:
        return k_f32;
    case RP_DTYPE_F16:
        return k_f16;
    case RP_DTYPE_BF16:
        return k_bf16;
    case RP_DTYPE_Q8_0:
        return k_q8_0;
    case RP_DTYPE_Q4_0:
        return k_q4_0;
    default:
        return NULL;
    }
}
