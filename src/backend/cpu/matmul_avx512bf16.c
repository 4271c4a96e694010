/*
 * matmul_avx512bf16.c - BF16 weights against activations rounded to bf16, on the
 * AVX512_BF16 dot product (vdpbf16ps).
 *
 * The fast way to multiply a bf16 matrix, and the one llama.cpp and bf16 inference in
 * PyTorch take: the activations are rounded to bf16 once per matmul (vcvtne2ps2bf16,
 * round to nearest even), then one instruction multiplies 16 pairs of weights by 16
 * pairs of activations and adds both products to 16 float accumulators: 32
 * multiply-adds where matmul_avx512.c's float kernel needs two FMAs and the unpacking
 * of the weights. The products of two bf16 values are exact in float; what is lost is
 * the activations' low 16 bits of mantissa (a relative error of up to 2^-9 in each, the
 * weights' own precision), so a model's logits move by about 1% of their spread
 * against float32 activations. The choice is the model's (rp_model_params.f32_activations).
 *
 * Order: two accumulators per (row, token); chunk k of 32 elements goes into
 * accumulator k & 1; the output is hsum16 of their sum. Every (row, token) gets that
 * sequence in every tile shape (quant.h's determinism contract). A few tokens (decode,
 * a batch of sequences, a verification) take one row at a time, up to 8 tokens a pass;
 * prefill groups take two rows at a time, up to 6 tokens a pass (k_dot_multi2). One
 * Zen 5 core, weights in cache (bench/matmul_batch_bench.c): 50-55 GMAC/s for one token,
 * 110-140 from 6 tokens on, against 40 and 80-95 with float32 activations.
 */
#include "mm_kernels.h"

#include "avx512_util.h"

#ifndef RP_PF_DIST
#define RP_PF_DIST 4096 // as matmul_avx512.c
#endif

#define DOT_TT 8 // tokens per one-row pass

size_t rp_mm_act_bytes_bf16dot(int64_t ne0)
{
    return (size_t)((ne0 + 31) / 32) * 32 * sizeof(uint16_t);
}

// One activation row rounded to bf16 (nearest even), zero padded to a multiple of 32.
void rp_mm_act_bf16dot(const float *x, int64_t ne0, uint8_t *out)
{
    for (int64_t i = 0; i < ne0; i += 32, out += 64) {
        __m512 lo, hi;
        load_act32(x + i, ne0 - i, &lo, &hi);
        _mm512_storeu_si512(out, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
}

int rp_mm_tokens_bf16dot(int64_t ne0)
{
    int64_t fit = (24 << 10) / (int64_t)rp_mm_act_bytes_bf16dot(ne0) / DOT_TT * DOT_TT;
    return fit < DOT_TT ? DOT_TT : fit > RP_MM_MAX_NT ? RP_MM_MAX_NT : (int)fit;
}

// Chunk c (32 elements from c * 32) of NR rows against NT tokens, into acc (each
// activation load serves every row); the last chunk of a row whose length is not a
// multiple of 32 loads its weights masked (the activations are zero padded, but 0 times
// what lies past a row could be a NaN).
RP_INLINE void dot_chunk(const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, int64_t c, __mmask32 m,
                         __m512 acc[][DOT_TT], const int NR, const int NT)
{
    __m512bh wv[2];
#pragma GCC unroll 2
    for (int r = 0; r < NR; r++) {
        const uint8_t *wc = w + r * ws + c * 64;
        if (m == (__mmask32)~0u) {
            _mm_prefetch((const char *)wc + RP_PF_DIST, _MM_HINT_T0);
            wv[r] = (__m512bh)load_bf16x32(wc);
        } else {
            wv[r] = (__m512bh)_mm512_maskz_loadu_epi16(m, wc);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < NT; t++) {
        __m512bh xv = (__m512bh)_mm512_loadu_si512(x + t * xs + c * 64);
#pragma GCC unroll 2
        for (int r = 0; r < NR; r++)
            acc[r][t] = _mm512_dpbf16_ps(acc[r][t], wv[r], xv);
    }
}

// NR weight rows against NT tokens: y[t * ldy + r].
RP_INLINE void tile_dot(const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, int64_t ne0, float *y, size_t ldy,
                        const int NR, const int NT)
{
    __m512 a0[2][DOT_TT], a1[2][DOT_TT];
#pragma GCC unroll 2
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++)
            a0[r][t] = a1[r][t] = _mm512_setzero_ps();
    const __mmask32 all = (__mmask32)~0u;
    int64_t full = ne0 / 32, c = 0;
    for (; c + 2 <= full; c += 2) {
        dot_chunk(w, ws, x, xs, c, all, a0, NR, NT);
        dot_chunk(w, ws, x, xs, c + 1, all, a1, NR, NT);
    }
    if (c < full) // c is even
        dot_chunk(w, ws, x, xs, c++, all, a0, NR, NT);
    if (ne0 % 32) { // (two calls: a pointer chosen at run time would keep the accumulators in memory)
        __mmask32 m = (__mmask32)((1u << (ne0 % 32)) - 1);
        if (c & 1)
            dot_chunk(w, ws, x, xs, c, m, a1, NR, NT);
        else
            dot_chunk(w, ws, x, xs, c, m, a0, NR, NT);
    }
    __m512 sum[2 * DOT_TT];
#pragma GCC unroll 2
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++)
            sum[r * NT + t] = _mm512_add_ps(a0[r][t], a1[r][t]);
    store_tile_sums(sum, y, ldy, NR, NT);
}

/* One row at a time (a single stream per core reads the weights fastest, and with the
 * dot product this cheap the stream is what bounds a batch of a few tokens) against up
 * to DOT_TT tokens, the tokens cut into passes of nearly equal size (6 tokens: 3 + 3,
 * not 4 + 2). */
static __attribute__((noinline)) void k_dot_multi(const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs,
                                                  int nt, int64_t ne0, float *y, size_t ldy)
{
    _Static_assert(DOT_TT == 8, "the switch below instantiates these tile shapes");
    int passes = (nt + DOT_TT - 1) / DOT_TT;
    for (int p = 0, t = 0; p < passes; p++) {
        int m = nt / passes + (p < nt % passes);
        const uint8_t *xt = x + (size_t)t * xs;
        for (int r = 0; r < nr; r++) {
            const uint8_t *wr = w + (size_t)r * ws;
            float *yt = y + (size_t)t * ldy + r;
            switch (m) {
            case 1:
                tile_dot(wr, ws, xt, xs, ne0, yt, ldy, 1, 1);
                break;
            case 2:
                tile_dot(wr, ws, xt, xs, ne0, yt, ldy, 1, 2);
                break;
            case 3:
                tile_dot(wr, ws, xt, xs, ne0, yt, ldy, 1, 3);
                break;
            case 4:
                tile_dot(wr, ws, xt, xs, ne0, yt, ldy, 1, 4);
                break;
            case 5:
                tile_dot(wr, ws, xt, xs, ne0, yt, ldy, 1, 5);
                break;
            case 6:
                tile_dot(wr, ws, xt, xs, ne0, yt, ldy, 1, 6);
                break;
            case 7:
                tile_dot(wr, ws, xt, xs, ne0, yt, ldy, 1, 7);
                break;
            default:
                tile_dot(wr, ws, xt, xs, ne0, yt, ldy, 1, 8);
                break;
            }
        }
        t += m;
    }
}

/* Prefill groups (more than DOT_TT tokens, their block of rows in L2) go two rows at a
 * time against up to DOT_TT2 tokens, in passes of nearly equal size, so that each
 * activation load serves both rows. (A function of its own: folded into k_dot_multi,
 * its tiles made the few-token ones measurably slower.) */
#define DOT_TT2 6

#define DOT_TILE2(NT) tile_dot(wr, ws, xt, xs, ne0, yt, ldy, 2, NT)
static __attribute__((noinline)) void k_dot_multi2(const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs,
                                                   int nt, int64_t ne0, float *y, size_t ldy)
{
    _Static_assert(DOT_TT2 == 6, "the switch below instantiates these tile shapes");
    int passes = (nt + DOT_TT2 - 1) / DOT_TT2;
    for (int p = 0, t = 0; p < passes; p++) {
        int m = nt / passes + (p < nt % passes);
        const uint8_t *xt = x + (size_t)t * xs;
        int r = 0;
        for (; m >= 4 && r + 2 <= nr; r += 2) { // (passes of more than DOT_TT tokens hold at least 4)
            const uint8_t *wr = w + (size_t)r * ws;
            float *yt = y + (size_t)t * ldy + r;
            switch (m) {
            case 4:
                DOT_TILE2(4);
                break;
            case 5:
                DOT_TILE2(5);
                break;
            default:
                DOT_TILE2(6);
                break;
            }
        }
        if (r < nr) // an odd last row
            k_dot_multi(w + (size_t)r * ws, ws, nr - r, xt, xs, m, ne0, y + (size_t)t * ldy + r, ldy);
        t += m;
    }
}

static void k_dot(const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs, int nt, int64_t ne0, float *y,
                  size_t ldy)
{
    if (nt > DOT_TT) {
        k_dot_multi2(w, ws, nr, x, xs, nt, ne0, y, ldy);
        return;
    }
    if (nt > 1) {
        k_dot_multi(w, ws, nr, x, xs, nt, ne0, y, ldy);
        return;
    }
    for (int r = 0; r < nr; r++)
        tile_dot(w + (size_t)r * ws, ws, x, xs, ne0, y + r, ldy, 1, 1);
}

rp_mm_kernel rp_mm_kernel_bf16dot(void)
{
    return k_dot;
}
