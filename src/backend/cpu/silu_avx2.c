/*
 * silu_avx2.c - silu(gate) · up on eight floats at a time (AVX2/FMA; chosen at run
 * time by rp_cpu_silu_mul, matmul.c).
 *
 * With t = e^-|g| (exp8 of vexp.h, whose inputs must be <= 0): silu(g) = g / (1 +
 * e^-g) is g / (1 + t) for g >= 0 and g·t / (1 + t) for g < 0 (multiply both terms of
 * the fraction by t), then times up. Within a few ulp of g / (1 + expf(-g)), and 8x
 * cheaper than calling expf per element. Every element sees the same operations: the
 * last partial group goes through the same instructions with masked loads and stores,
 * so an element's result does not depend on where a thread's share of a row begins.
 */
#include "cpu_int.h"

#include <immintrin.h>

#include "vexp.h"

static inline __attribute__((always_inline)) __m256 silu_mul8(__m256 g, __m256 u)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 t = exp8(_mm256_or_ps(g, sign)); // e^-|g|
    __m256 neg = _mm256_cmp_ps(g, _mm256_setzero_ps(), _CMP_LT_OQ);
    __m256 num = _mm256_blendv_ps(g, _mm256_mul_ps(g, t), neg);
    return _mm256_mul_ps(_mm256_div_ps(num, _mm256_add_ps(_mm256_set1_ps(1.0f), t)), u);
}

void rp_cpu_silu_mul_avx2(float *out, const float *gate, const float *up, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, silu_mul8(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
    if (i < n) {
        const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n - i)), lane);
        __m256 r = silu_mul8(_mm256_maskload_ps(gate + i, m), _mm256_maskload_ps(up + i, m));
        _mm256_maskstore_ps(out + i, m, r);
    }
}
