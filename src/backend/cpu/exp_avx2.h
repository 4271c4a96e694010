/*
 * exp_avx2.h - e^x on eight floats for x <= 0, for the AVX2 files (attn_avx2.c,
 * silu_avx2.c); attn_avx512.c repeats it on sixteen lanes, operation for operation.
 *
 * x = n·ln2 + r with n = round(x·log2 e), r by a two-constant Cody-Waite reduction
 * (|r| <= ln2/2), e^r by its degree-7 Taylor polynomial (truncation error < 2e-9
 * relative), times 2^n built in the exponent field. Below -87 the result is 0 (expf
 * would give a denormal or 0 there, weights that cannot move a sum that holds a 1);
 * -inf gives 0.
 */
#ifndef RP_EXP_AVX2_H
#define RP_EXP_AVX2_H

#include <immintrin.h>

static inline __attribute__((always_inline)) __m256 exp8(__m256 x)
{
    const __m256 log2e = _mm256_set1_ps(1.44269504088896341f);
    const __m256 ln2_hi = _mm256_set1_ps(0.693145751953125f); // few mantissa bits: n·ln2_hi is exact
    const __m256 ln2_lo = _mm256_set1_ps(1.42860682030941723e-6f);
    __m256 keep = _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_GE_OQ);
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, ln2_hi, x);
    r = _mm256_fnmadd_ps(n, ln2_lo, r);
    __m256 p = _mm256_set1_ps(1.0f / 5040);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(e)), keep);
}

#endif
