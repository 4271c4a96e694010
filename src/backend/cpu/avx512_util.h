/*
 * avx512_util.h - helpers shared by the AVX-512 matmul files (matmul_avx512.c,
 * matmul_avx512bf16.c): fixed-order horizontal sums of a tile's accumulators, the
 * masked load of 32 activations and the load of 32 bf16 weights. Included only by
 * files compiled for AVX-512.
 */
#ifndef RP_AVX512_UTIL_H
#define RP_AVX512_UTIL_H

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

#define RP_INLINE static inline __attribute__((always_inline))

// Fixed-order horizontal sum of 16 floats.
RP_INLINE float hsum16(__m512 v)
{
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* hsum16 of four vectors at once: the same additions on each (lane i + lane i+8, then
 * i + i+4, i + i+2, i + i+1; float addition is commutative, so operand order does not
 * matter), so the sums are bit for bit hsum16's; returned in lanes 0..3. */
RP_INLINE __m128 hsum16x4_ps(__m512 a, __m512 b, __m512 c, __m512 d)
{
    __m512 ab = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
    __m512 cd = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, 0x44), _mm512_shuffle_f32x4(c, d, 0xEE));
    __m512 v = _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, 0x88), _mm512_shuffle_f32x4(ab, cd, 0xDD));
    v = _mm512_add_ps(v, _mm512_permute_ps(v, _MM_SHUFFLE(3, 2, 3, 2)));
    v = _mm512_add_ps(v, _mm512_movehdup_ps(v));
    const __m512i first = _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_castps512_ps128(_mm512_permutexvar_ps(first, v));
}

// hsum16x4_ps written to out[0..3].
RP_INLINE void hsum16x4(__m512 a, __m512 b, __m512 c, __m512 d, float out[4])
{
    _mm_storeu_ps(out, hsum16x4_ps(a, b, c, d));
}

// A tile's outputs: s[r * NT + t] summed into y[t * ldy + r], four at a time where it can.
RP_INLINE void store_tile_sums(const __m512 *s, float *y, size_t ldy, const int NR, const int NT)
{
    int k = 0;
    for (; k + 4 <= NR * NT; k += 4) {
        float o[4];
        hsum16x4(s[k], s[k + 1], s[k + 2], s[k + 3], o);
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++)
            y[(size_t)((k + j) % NT) * ldy + (size_t)((k + j) / NT)] = o[j];
    }
    for (; k < NR * NT; k++)
        y[(size_t)(k % NT) * ldy + (size_t)(k / NT)] = hsum16(s[k]);
}

// The 32 floats of an activation row from element i, zeros past its end (rem = ne0 - i
// elements left): the first 16 in *lo, the next 16 in *hi.
RP_INLINE void load_act32(const float *x, int64_t rem, __m512 *lo, __m512 *hi)
{
    __mmask16 m0 = rem >= 16 ? 0xFFFF : (__mmask16)((1u << rem) - 1);
    __mmask16 m1 = rem >= 32 ? 0xFFFF : rem <= 16 ? 0 : (__mmask16)((1u << (rem - 16)) - 1);
    *lo = _mm512_maskz_loadu_ps(m0, x), *hi = _mm512_maskz_loadu_ps(m1, x + 16);
}

// 32 bf16 weights as two 256-bit loads: an mmap'd file's tensors are often 32 bytes past a
// cache line, where every 512-bit load would straddle two lines (measured: 77% vs 94% of the
// read ceiling at offset 2; two halves match the aligned speed at offset 32).
RP_INLINE __m512i load_bf16x32(const uint8_t *p)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)p)),
                              _mm256_loadu_si256((const __m256i *)(p + 32)), 1);
}

#endif
