/*
 * matmul_avx2.c - AVX2/FMA/F16C tile kernels for the CPU matmul (chosen at run time).
 *
 * Each kernel computes an nr × nt tile (weight rows × tokens) of y = x · Wᵀ. The
 * tile bodies are always-inline functions specialised on constant (NR, NT), so
 * each (row, token) pair keeps its own accumulators in registers and one weight
 * load serves several tokens. Determinism: every (row, token) accumulator sees
 * the same instruction sequence — same lanes, same block order, same final
 * horizontal sum — in every specialisation, so a result does not depend on the
 * tile it was computed in. All float arithmetic is written with intrinsics (no
 * plain a*b+c that a compiler could contract differently in different copies).
 *
 * F32 / F16 weights: mm_tiles.h's reduction order (the same bits as the AVX-512
 * kernels), a 16-lane accumulator as two 8-lane halves, F16 widened with vcvtph2ps; one
 * row against up to 6 tokens a pass. BF16: 32 elements per step into 4 accumulators per
 * (row, token), widened with a 16-bit shift.
 * Q8_0 / Q4_0 / Q5_0 (× Q8_0 activations, in this file's own row layout): per
 * block, maddubs (u8 × s8 → s16 pairs) and madd (→ s32); Q8_0 uses |w| ⊙ sign(x, w),
 * Q4_0/Q5_0 keep their quants unsigned and subtract 8 (16) × the activation's sums.
 * Four blocks' integer sums are packed into one vector with hadd, converted once
 * and fused-multiply-added with the four blocks' scale products.
 * Decode reads one weight row per core at a time with software prefetch ahead.
 * Q4_K / Q5_K / Q6_K (× Q8_K): integer sums per super-block weighted by the
 * sub-block scales with madd, one FMA per super-block; the mins (Q4_K/Q5_K) and
 * Q6_K's -32 offset come from the activation's per-16 sums (bsums).
 */
#include "mm_kernels.h"

#include <immintrin.h>
#include "mm_tiles.h"

#define RP_INLINE static inline __attribute__((always_inline))

#ifndef RP_PF_DIST
#define RP_PF_DIST 2048 // bytes ahead of the weight stream to prefetch (measured: 2048 > 1024 > 512)
#endif

// Fixed-order horizontal sum of 8 floats.
RP_INLINE float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

RP_INLINE float fp16_f32(rp_fp16 h)
{
    return _cvtsh_ss(h);
}

/* ---- float weights ---- */

enum { W_F32, W_F16, W_BF16 };

// 8 weights starting at element i of a row of type wt, as floats.
RP_INLINE __m256 load_w8(const uint8_t *row, int64_t i, int wt)
{
    if (wt == W_F32)
        return _mm256_loadu_ps((const float *)row + i);
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)row + i));
    if (wt == W_F16)
        return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

RP_INLINE void tile_float(const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, int64_t ne0, float *y, size_t ldy,
                          const int NR, const int NT, const int wt)
{
    __m256 acc[MM_TILE_NR][MM_TILE_NT][4];
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++)
#pragma GCC unroll 8
            for (int k = 0; k < 4; k++)
                acc[r][t][k] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= ne0; i += 32) {
#pragma GCC unroll 8
        for (int r = 0; r < NR; r++) {
            __m256 wv[4];
            _mm_prefetch((const char *)(w + r * ws) + i * (wt == W_F32 ? 4 : 2) + RP_PF_DIST, _MM_HINT_T0);
            if (wt == W_F32)
                _mm_prefetch((const char *)(w + r * ws) + i * 4 + 64 + RP_PF_DIST, _MM_HINT_T0);
#pragma GCC unroll 8
            for (int k = 0; k < 4; k++)
                wv[k] = load_w8(w + r * ws, i + 8 * k, wt);
#pragma GCC unroll 8
            for (int t = 0; t < NT; t++) {
                const float *xt = (const float *)(x + t * xs) + i;
#pragma GCC unroll 8
                for (int k = 0; k < 4; k++)
                    acc[r][t][k] = _mm256_fmadd_ps(wv[k], _mm256_loadu_ps(xt + 8 * k), acc[r][t][k]);
            }
        }
    }
    for (; i + 8 <= ne0; i += 8) {
#pragma GCC unroll 8
        for (int r = 0; r < NR; r++) {
            __m256 wv = load_w8(w + r * ws, i, wt);
#pragma GCC unroll 8
            for (int t = 0; t < NT; t++)
                acc[r][t][0] =
                    _mm256_fmadd_ps(wv, _mm256_loadu_ps((const float *)(x + t * xs) + i), acc[r][t][0]);
        }
    }
    if (i < ne0) { // tail: zero-padded copies
        int rem = (int)(ne0 - i);
        int esz = wt == W_F32 ? 4 : 2;
        for (int r = 0; r < NR; r++) {
            uint8_t wbuf[32] = {0};
            memcpy(wbuf, w + r * ws + i * esz, (size_t)(rem * esz));
            __m256 wv = load_w8(wbuf, 0, wt);
            for (int t = 0; t < NT; t++) {
                float xbuf[8] = {0};
                memcpy(xbuf, (const float *)(x + t * xs) + i, (size_t)rem * sizeof(float));
                acc[r][t][0] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(xbuf), acc[r][t][0]);
            }
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++) {
            __m256 s = _mm256_add_ps(_mm256_add_ps(acc[r][t][0], acc[r][t][1]),
                                     _mm256_add_ps(acc[r][t][2], acc[r][t][3]));
            y[t * ldy + r] = hsum8(s);
        }
}

/* F32 / F16: mm_tiles.h's reduction order (RP_MM_FLT_BLOCK), bit for bit that of
 * matmul_avx512.c. A 16-lane accumulator is two 8-lane halves (elements 0..7 and 8..15 of
 * each slot), and hsum16(v) is hsum8(lo + hi): the same additions in the same order. */

// One slot (16 elements from i) of NR rows against NT tokens into the halves lo, hi;
// pf: prefetch the weights ahead.
RP_INLINE void flt_slot8(const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, int64_t i,
                         __m256 lo[MM_TILE_NR][MM_TILE_NT], __m256 hi[MM_TILE_NR][MM_TILE_NT], const int NR,
                         const int NT, const int wt, const bool pf)
{
#pragma GCC unroll 2
    for (int r = 0; r < NR; r++) {
        const uint8_t *wr = w + r * ws;
        if (pf) { // into L1 and, further ahead, into L2 (as matmul_avx512.c's F32 / F16 kernels)
            _mm_prefetch((const char *)wr + i * (wt == W_F32 ? 4 : 2) + RP_PF_DIST, _MM_HINT_T0);
            _mm_prefetch((const char *)wr + i * (wt == W_F32 ? 4 : 2) + 16384, _MM_HINT_T1);
        }
        __m256 w0 = load_w8(wr, i, wt), w1 = load_w8(wr, i + 8, wt);
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++) {
            const float *xt = (const float *)(x + t * xs) + i;
            lo[r][t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xt), lo[r][t]);
            hi[r][t] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xt + 8), hi[r][t]);
        }
    }
}

RP_INLINE void tile_flt(const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, int64_t ne0, float *y, size_t ldy,
                        const int NR, const int NT, const int wt)
{
    const int esz = wt == W_F32 ? 4 : 2;
    for (int64_t k0 = 0; k0 == 0 || k0 < ne0; k0 += RP_MM_FLT_BLOCK) { // (ne0 0: one empty block, zeros)
        int64_t len = ne0 - k0 < RP_MM_FLT_BLOCK ? ne0 - k0 : RP_MM_FLT_BLOCK;
        const uint8_t *wb = w + k0 * esz, *xb = x + k0 * 4;
        __m256 lo[MM_TILE_NR][MM_TILE_NT], hi[MM_TILE_NR][MM_TILE_NT];
#pragma GCC unroll 2
        for (int r = 0; r < NR; r++)
#pragma GCC unroll 8
            for (int t = 0; t < NT; t++)
                lo[r][t] = hi[r][t] = _mm256_setzero_ps();
        int64_t i = 0;
        for (; i + 32 <= len; i += 32) { // a line of F16 weights per 32 elements, of F32 per 16
            flt_slot8(wb, ws, xb, xs, i, lo, hi, NR, NT, wt, true);
            flt_slot8(wb, ws, xb, xs, i + 16, lo, hi, NR, NT, wt, wt == W_F32);
        }
        for (; i + 16 <= len; i += 16)
            flt_slot8(wb, ws, xb, xs, i, lo, hi, NR, NT, wt, false);
        if (i < len) { // the row's last slot: zero-padded copies
            int rem = (int)(len - i);
            uint8_t wbuf[MM_TILE_NR][64] = {{0}};
            _Alignas(32) float xbuf[MM_TILE_NT][16] = {{0}};
            for (int r = 0; r < NR; r++)
                memcpy(wbuf[r], wb + r * ws + i * esz, (size_t)(rem * esz));
            for (int t = 0; t < NT; t++)
                memcpy(xbuf[t], (const float *)(xb + t * xs) + i, (size_t)rem * sizeof(float));
            flt_slot8(wbuf[0], sizeof(wbuf[0]), (const uint8_t *)xbuf, sizeof(xbuf[0]), 0, lo, hi, NR, NT, wt, false);
        }
#pragma GCC unroll 2
        for (int r = 0; r < NR; r++)
#pragma GCC unroll 8
            for (int t = 0; t < NT; t++) {
                float v = hsum8(_mm256_add_ps(lo[r][t], hi[r][t]));
                y[t * ldy + r] = k0 == 0 ? v : y[t * ldy + r] + v;
            }
    }
}

/* ---- Q8_0 / Q4_0 / Q5_0 weights × Q8_0 activations ---- */

enum { W_Q8_0, W_Q4_0, W_Q5_0 };

// Activation row layout (see rp_mm_act_bytes_avx2): nbp = blocks rounded up to 4, zero padded.
RP_INLINE int64_t act_nbp(int64_t ne0)
{
    return (ne0 / RP_QK + 3) / 4 * 4;
}

size_t rp_mm_act_bytes_avx2(rp_dtype wtype, int64_t ne0)
{
    if (wtype != RP_DTYPE_Q8_0 && wtype != RP_DTYPE_Q4_0 && wtype != RP_DTYPE_Q5_0)
        return 0;
    return (size_t)act_nbp(ne0) * (32 + 4 + 8);
}

RP_INLINE int hsum_i32(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
    return _mm_cvtsi128_si32(s);
}

void rp_mm_quantize_act_avx2(const float *x, int64_t ne0, uint8_t *out)
{
    int64_t nb = ne0 / RP_QK, nbp = act_nbp(ne0);
    int8_t *qs = (int8_t *)out;
    float *dv = (float *)(out + nbp * 32);
    int32_t *hs = (int32_t *)(out + nbp * 36);
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 half = _mm256_set1_ps(0.49999997f); // roundf: add just under 1/2 away from zero, truncate
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t b = 0; b < nb; b++) {
        __m256 v[4];
        __m256 m = _mm256_setzero_ps();
        for (int k = 0; k < 4; k++) {
            v[k] = _mm256_loadu_ps(x + 32 * b + 8 * k);
            m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[k]));
        }
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        float amax = _mm_cvtss_f32(m4);
        // as the reference quantizer: scale rounded to fp16, elements divided by the unrounded one
        float d = amax / 127;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        dv[b] = _cvtsh_ss(_cvtss_sh(d, 0));
        __m256 idv = _mm256_set1_ps(id);
        __m256i q[4];
        for (int k = 0; k < 4; k++) {
            __m256 t = _mm256_mul_ps(v[k], idv);
            t = _mm256_add_ps(t, _mm256_or_ps(_mm256_and_ps(t, sign), half));
            q[k] = _mm256_cvttps_epi32(t);
        }
        int lo = hsum_i32(_mm256_add_epi32(q[0], q[1])), hi = hsum_i32(_mm256_add_epi32(q[2], q[3]));
        __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
        _mm256_storeu_si256((__m256i *)(qs + 32 * b), _mm256_permutevar8x32_epi32(p, perm));
        hs[(b / 4) * 8 + b % 4] = lo;
        hs[(b / 4) * 8 + 4 + b % 4] = hi;
    }
    for (int64_t b = nb; b < nbp; b++) {
        memset(qs + 32 * b, 0, 32);
        dv[b] = 0.0f;
        hs[(b / 4) * 8 + b % 4] = 0;
        hs[(b / 4) * 8 + 4 + b % 4] = 0;
    }
}

RP_INLINE int blk_bytes(int wt)
{
    return wt == W_Q8_0 ? 34 : wt == W_Q4_0 ? 18 : 22;
}

// 0xFF in byte i where bit i of the 32-bit mask is set.
RP_INLINE __m256i bytes_from_bits(uint32_t bits)
{
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), shuf);
    v = _mm256_or_si256(v, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    return _mm256_cmpeq_epi8(v, _mm256_set1_epi64x(-1));
}

// The 32 quants of a block in element order: signed for Q8_0, unsigned (q + 8 / q + 16) for Q4_0/Q5_0.
RP_INLINE __m256i load_wq(const uint8_t *blk, int wt)
{
    if (wt == W_Q8_0)
        return _mm256_loadu_si256((const __m256i *)(blk + 2));
    const __m256i m4 = _mm256_set1_epi8(0xF);
    __m128i q = _mm_loadu_si128((const __m128i *)(blk + blk_bytes(wt) - 16));
    __m256i v = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), m4);
    if (wt == W_Q4_0)
        return v;
    uint32_t qh;
    memcpy(&qh, blk + 2, 4);
    return _mm256_or_si256(v, _mm256_and_si256(bytes_from_bits(qh), _mm256_set1_epi8(0x10)));
}

RP_INLINE uint16_t blk_d(const uint8_t *blk)
{
    uint16_t d;
    memcpy(&d, blk, 2);
    return d;
}

// One group of 4 blocks (g) of every row and token. wg[r]: the group's first weight block of row r.
// Per (row, token): 4 integer block dots packed into one vector (lane k: block k's first 16
// elements, lane 4+k: its last 16), the offset of unsigned quants removed with the activation's
// half sums, converted once and multiplied-added with the 4 blocks' scale products.
RP_INLINE void q32_group(const uint8_t *const *wg, const uint8_t *x, size_t xs, int64_t nbp, int64_t g,
                         __m256 acc[MM_TILE_NR][MM_TILE_NT], const int NR, const int NT, const int wt)
{
    const __m256i ones = _mm256_set1_epi16(1);
    const int bs = blk_bytes(wt);
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++) {
        const uint8_t *b = wg[r];
        _mm_prefetch((const char *)b + RP_PF_DIST, _MM_HINT_T0);
        if (wt == W_Q8_0)
            _mm_prefetch((const char *)b + 64 + RP_PF_DIST, _MM_HINT_T0);
        __m256i q[4];
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++)
            q[k] = load_wq(b + k * bs, wt);
        __m128 dw = _mm_cvtph_ps(_mm_setr_epi16((short)blk_d(b), (short)blk_d(b + bs), (short)blk_d(b + 2 * bs),
                                                (short)blk_d(b + 3 * bs), 0, 0, 0, 0));
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++) {
            const uint8_t *xa = x + t * xs;
            const int8_t *yq = (const int8_t *)xa + g * 128;
            __m256i p[4];
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                __m256i yv = _mm256_loadu_si256((const __m256i *)(yq + 32 * k));
                __m256i s16 = wt == W_Q8_0 ? _mm256_maddubs_epi16(_mm256_sign_epi8(q[k], q[k]), _mm256_sign_epi8(yv, q[k]))
                                           : _mm256_maddubs_epi16(q[k], yv);
                p[k] = _mm256_madd_epi16(s16, ones);
            }
            __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
            if (wt != W_Q8_0) {
                __m256i hs = _mm256_loadu_si256((const __m256i *)(xa + nbp * 36 + g * 32));
                h = _mm256_sub_epi32(h, _mm256_slli_epi32(hs, wt == W_Q4_0 ? 3 : 4));
            }
            __m128 d4 = _mm_mul_ps(dw, _mm_loadu_ps((const float *)(xa + nbp * 32) + g * 4));
            acc[r][t] = _mm256_fmadd_ps(_mm256_set_m128(d4, d4), _mm256_cvtepi32_ps(h), acc[r][t]);
        }
    }
}

RP_INLINE void tile_q32(const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, int64_t ne0, float *y, size_t ldy,
                        const int NR, const int NT, const int wt)
{
    __m256 acc[MM_TILE_NR][MM_TILE_NT];
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++)
            acc[r][t] = _mm256_setzero_ps();
    const int bs = blk_bytes(wt);
    int64_t nb = ne0 / RP_QK, nbp = act_nbp(ne0), ng = nb / 4;
    const uint8_t *wg[MM_TILE_NR];
    for (int64_t g = 0; g < ng; g++) {
#pragma GCC unroll 8
        for (int r = 0; r < NR; r++)
            wg[r] = w + r * ws + g * 4 * bs;
        q32_group(wg, x, xs, nbp, g, acc, NR, NT, wt);
    }
    if (nb % 4) { // last partial group: zero blocks (scale 0) after the row's end
        uint8_t tail[MM_TILE_NR][4 * 34];
        for (int r = 0; r < NR; r++) {
            memset(tail[r], 0, sizeof(tail[r]));
            memcpy(tail[r], w + r * ws + ng * 4 * bs, (size_t)(nb % 4) * bs);
            wg[r] = tail[r];
        }
        q32_group(wg, x, xs, nbp, ng, acc, NR, NT, wt);
    }
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++)
            y[t * ldy + r] = hsum8(acc[r][t]);
}

/* ---- K-quants × Q8_K ---- */

enum { W_Q4_K, W_Q5_K, W_Q6_K };

// Unpacks the 6-bit scales and mins of a Q4_K/Q5_K super-block: sc[0..7], m[0..7].
RP_INLINE void k4_scales(const uint8_t *s12, uint8_t sc[8], uint8_t m[8])
{
    uint32_t a, b, c;
    memcpy(&a, s12, 4);
    memcpy(&b, s12 + 4, 4);
    memcpy(&c, s12 + 8, 4);
    uint32_t s0 = a & 0x3f3f3f3f, m0 = b & 0x3f3f3f3f;
    uint32_t s1 = (c & 0x0f0f0f0f) | (((a >> 6) & 0x03030303) << 4);
    uint32_t m1 = ((c >> 4) & 0x0f0f0f0f) | (((b >> 6) & 0x03030303) << 4);
    memcpy(sc, &s0, 4);
    memcpy(sc + 4, &s1, 4);
    memcpy(m, &m0, 4);
    memcpy(m + 4, &m1, 4);
}

RP_INLINE void tile_k(const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, int64_t ne0, float *y, size_t ldy,
                      const int NR, const int NT, const int wt)
{
    const __m256i m4 = _mm256_set1_epi8(0xF);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[MM_TILE_NR][MM_TILE_NT];
    __m128 macc[MM_TILE_NR][MM_TILE_NT]; // lane 0: the mins' part (Q4_K/Q5_K)
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++) {
            acc[r][t] = _mm256_setzero_ps();
            macc[r][t] = _mm_setzero_ps();
        }
    int64_t nb = ne0 / RP_QK_K;
    for (int64_t ib = 0; ib < nb; ib++) {
#pragma GCC unroll 8
        for (int r = 0; r < NR; r++) {
            const uint8_t *row = w + r * ws;
            if (wt == W_Q6_K) {
                const rp_block_q6_K *b = (const rp_block_q6_K *)row + ib;
                float dw = fp16_f32(b->d);
                __m256i q[8];
                __m256i scv[8];
                const __m256i m30 = _mm256_set1_epi8(0x30);
                for (int c = 0; c < 2; c++) {
                    __m256i l0 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * c));
                    __m256i l1 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * c + 32));
                    __m256i h = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * c));
                    q[4 * c + 0] = _mm256_or_si256(_mm256_and_si256(l0, m4),
                                                   _mm256_and_si256(_mm256_slli_epi16(h, 4), m30));
                    q[4 * c + 1] = _mm256_or_si256(_mm256_and_si256(l1, m4),
                                                   _mm256_and_si256(_mm256_slli_epi16(h, 2), m30));
                    q[4 * c + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                                   _mm256_and_si256(h, m30));
                    q[4 * c + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                                   _mm256_and_si256(_mm256_srli_epi16(h, 2), m30));
                }
                for (int g = 0; g < 8; g++)
                    scv[g] = _mm256_set_m128i(_mm_set1_epi16(b->scales[2 * g + 1]), _mm_set1_epi16(b->scales[2 * g]));
                __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
#pragma GCC unroll 8
                for (int t = 0; t < NT; t++) {
                    const rp_block_q8_K *bx = (const rp_block_q8_K *)(x + t * xs) + ib;
                    __m256i sumi = _mm256_setzero_si256();
                    for (int g = 0; g < 8; g++) {
                        __m256i yv = _mm256_loadu_si256((const __m256i *)(bx->qs + 32 * g));
                        __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(q[g], yv), scv[g]);
                        sumi = _mm256_add_epi32(sumi, p);
                    }
                    // the stored values are q + 32: subtract 32 * Σ sc[j] * bsums[j]
                    __m256i off = _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)bx->bsums));
                    sumi = _mm256_sub_epi32(sumi, _mm256_slli_epi32(off, 5));
                    __m256 d = _mm256_set1_ps(bx->d * dw);
                    acc[r][t] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumi), acc[r][t]);
                }
            } else {
                const uint8_t *s12, *qs, *qhp = NULL;
                rp_fp16 d16, dmin16;
                if (wt == W_Q5_K) {
                    const rp_block_q5_K *b = (const rp_block_q5_K *)row + ib;
                    s12 = b->scales, qs = b->qs, qhp = b->qh, d16 = b->d, dmin16 = b->dmin;
                } else {
                    const rp_block_q4_K *b = (const rp_block_q4_K *)row + ib;
                    s12 = b->scales, qs = b->qs, d16 = b->d, dmin16 = b->dmin;
                }
                float dw = fp16_f32(d16), dmw = fp16_f32(dmin16);
                uint8_t sc[8], mn[8];
                k4_scales(s12, sc, mn);
                __m256i mins32 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)mn));
                __m256i q[8];
                __m256i hb = wt == W_Q5_K ? _mm256_loadu_si256((const __m256i *)qhp) : _mm256_setzero_si256();
                const __m256i one8 = _mm256_set1_epi8(1);
                for (int c = 0; c < 4; c++) {
                    __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
                    q[2 * c] = _mm256_and_si256(v, m4);
                    q[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                    if (wt == W_Q5_K) {
                        __m256i h0 = _mm256_and_si256(_mm256_srli_epi16(hb, 2 * c), one8);
                        __m256i h1 = _mm256_and_si256(_mm256_srli_epi16(hb, 2 * c + 1), one8);
                        q[2 * c] = _mm256_or_si256(q[2 * c], _mm256_slli_epi16(h0, 4));
                        q[2 * c + 1] = _mm256_or_si256(q[2 * c + 1], _mm256_slli_epi16(h1, 4));
                    }
                }
#pragma GCC unroll 8
                for (int t = 0; t < NT; t++) {
                    const rp_block_q8_K *bx = (const rp_block_q8_K *)(x + t * xs) + ib;
                    __m256i sumi = _mm256_setzero_si256();
                    for (int j = 0; j < 8; j++) {
                        __m256i yv = _mm256_loadu_si256((const __m256i *)(bx->qs + 32 * j));
                        __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(q[j], yv), _mm256_set1_epi16(sc[j]));
                        sumi = _mm256_add_epi32(sumi, p);
                    }
                    __m256i bs = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)bx->bsums), ones);
                    int summ = hsum_i32(_mm256_mullo_epi32(bs, mins32));
                    __m256 d = _mm256_set1_ps(bx->d * dw);
                    acc[r][t] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumi), acc[r][t]);
                    macc[r][t] = _mm_fmadd_ss(_mm_set_ss(bx->d * dmw), _mm_set_ss((float)summ), macc[r][t]);
                }
            }
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++)
            y[t * ldy + r] = _mm_cvtss_f32(_mm_sub_ss(_mm_set_ss(hsum8(acc[r][t])), macc[r][t]));
}

/* ---- kernels: split an nr × nt request into register-sized tiles ---- */

/* F32 / F16: one token (decode) takes the rows in pairs, four 8-lane FMA chains at a time
 * (as matmul_avx512.c: one row's two would leave a step whose weights are in cache bound by
 * the FMA latency). */
DEFINE_KERNEL(k_f32_n, tile_flt, W_F32, 6)
DEFINE_KERNEL(k_f16_n, tile_flt, W_F16, 6)

RP_INLINE void k_flt1(const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs, int64_t ne0, float *y,
                      size_t ldy, const int wt)
{
    int r = 0;
    for (; r + 2 <= nr; r += 2)
        tile_flt(w + (size_t)r * ws, ws, x, xs, ne0, y + r, ldy, 2, 1, wt);
    if (r < nr)
        tile_flt(w + (size_t)r * ws, ws, x, xs, ne0, y + r, ldy, 1, 1, wt);
}

static void k_f32(const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs, int nt, int64_t ne0, float *y,
                  size_t ldy)
{
    if (nt > 1)
        k_f32_n(w, ws, nr, x, xs, nt, ne0, y, ldy);
    else
        k_flt1(w, ws, nr, x, xs, ne0, y, ldy, W_F32);
}

static void k_f16(const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs, int nt, int64_t ne0, float *y,
                  size_t ldy)
{
    if (nt > 1)
        k_f16_n(w, ws, nr, x, xs, nt, ne0, y, ldy);
    else
        k_flt1(w, ws, nr, x, xs, ne0, y, ldy, W_F16);
}
DEFINE_KERNEL(k_bf16, tile_float, W_BF16, 3)
DEFINE_KERNEL(k_q8_0, tile_q32, W_Q8_0, 4)
DEFINE_KERNEL(k_q4_0, tile_q32, W_Q4_0, 4)
DEFINE_KERNEL(k_q5_0, tile_q32, W_Q5_0, 4)
DEFINE_KERNEL(k_q4_K, tile_k, W_Q4_K, 4)
DEFINE_KERNEL(k_q5_K, tile_k, W_Q5_K, 4)
DEFINE_KERNEL(k_q6_K, tile_k, W_Q6_K, 4)

rp_mm_kernel rp_mm_kernel_avx2(rp_dtype wtype)
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
    case RP_DTYPE_Q5_0:
        return k_q5_0;
    case RP_DTYPE_Q4_K:
        return k_q4_K;
    case RP_DTYPE_Q5_K:
        return k_q5_K;
    case RP_DTYPE_Q6_K:
        return k_q6_K;
    default:
        return NULL;
    }
}
