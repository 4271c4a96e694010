/*
 * vexp.h - e^x for x <= 0 on eight floats (exp8, AVX2/FMA: attn_avx2.c, silu_avx2.c) and
 * sixteen (exp16, AVX-512: attn_avx512.c, when compiled with it): the same operations
 * on every lane, with the constants below, so the two widths give the same bits.
 *
 * x = n·ln2 + r with n = round(x·log2 e), r by a two-constant Cody-Waite reduction
 * (|r| <= ln2/2), e^r by its degree-7 Taylor polynomial (truncation error < 2e-9
 * relative), times 2^n built in the exponent field. Below -87 the result is 0 (expf
 * would give a denormal or 0 there, weights that cannot move a sum that holds a 1);
 * -inf gives 0.
 */
#ifndef RP_VEXP_H
#define RP_VEXP_H

#include <immintrin.h>

#define VEXP_LOG2E 1.44269504088896341f
#define VEXP_LN2_HI 0.693145751953125f // few mantissa bits: n·ln2_hi is exact
#define VEXP_LN2_LO 1.42860682030941723e-6f
#define VEXP_MIN (-87.0f)

// The Taylor coefficients of e^r, 1/7! first (Horner's order).
static const float vexp_poly[8] = {1.0f / 5040, 1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f};

static inline __attribute__((always_inline)) __m256 exp8(__m256 x)
{
    __m256 keep = _mm256_cmp_ps(x, _mm256_set1_ps(VEXP_MIN), _CMP_GE_OQ);
    x = _mm256_max_ps(x, _mm256_set1_ps(VEXP_MIN));
    __m256 n =
        _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(VEXP_LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(VEXP_LN2_HI), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(VEXP_LN2_LO), r);
    __m256 p = _mm256_set1_ps(vexp_poly[0]);
#pragma GCC unroll 7
    for (int i = 1; i < 8; i++)
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(vexp_poly[i]));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(e)), keep);
}

#ifdef __AVX512F__
static inline __attribute__((always_inline)) __m512 exp16(__m512 x)
{
    __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(VEXP_MIN), _CMP_GE_OQ);
    x = _mm512_max_ps(x, _mm512_set1_ps(VEXP_MIN));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(VEXP_LOG2E)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(VEXP_LN2_HI), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(VEXP_LN2_LO), r);
    __m512 p = _mm512_set1_ps(vexp_poly[0]);
#pragma GCC unroll 7
    for (int i = 1; i < 8; i++)
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(vexp_poly[i]));
    __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_maskz_mov_ps(keep, _mm512_mul_ps(p, _mm512_castsi512_ps(e)));
}
#endif

#endif
