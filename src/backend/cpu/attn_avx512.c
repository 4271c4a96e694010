/*
 * attn_avx512.c - AVX-512 kernel for one chunk of attention (chosen at run time
 * over attn_avx2.c when the CPU has AVX-512).
 *
 * The same chunk, rows and results as rp_cpu_attn_chunk_avx2, bit for bit: every
 * lane here runs the operations of one AVX2 lane, in the same order, and only the
 * packing differs.
 *
 *   scores: the AVX2 kernel sums a (head, key) dot over head_dim in two 8-float
 *           accumulators, the even 8-float slices of each 16 and the odd ones; one
 *           16-lane accumulator holds both (lanes 0-7 and 8-15 of each 16 loaded
 *           elements), so one FMA does the work of two. The halves are then
 *           added and reduced with the AVX2 kernel's hadd tree.
 *   softmax: the AVX2 kernel's (rp_cpu_attn_softmax_avx2).
 *   values: o[j] = Σ e[p] · V[p][j] in key order is one FMA chain per element j;
 *           16 elements per register instead of 8, two rows at a time (eight
 *           independent chains for head_dim 64, and each V row read once for both).
 *
 * All float arithmetic is written with intrinsics.
 */
#include "cpu_int.h"

#include <immintrin.h>

#define RP_INLINE static inline __attribute__((always_inline))

// Dots of one query head with four key rows: {q·k0, q·k1, q·k2, q·k3}, as attn_avx2.c's dot4.
RP_INLINE __m128 dot4(const float *q, const float *const *kr, int hd)
{
    __m512 a[4];
#pragma GCC unroll 4
    for (int u = 0; u < 4; u++)
        a[u] = _mm512_setzero_ps();
    for (int i = 0; i < hd; i += 16) {
        __m512 qv = _mm512_loadu_ps(q + i);
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++)
            a[u] = _mm512_fmadd_ps(qv, _mm512_loadu_ps(kr[u] + i), a[u]);
    }
    __m256 s[4];
#pragma GCC unroll 4
    for (int u = 0; u < 4; u++) // the AVX2 kernel's a0 + a1
        s[u] = _mm256_add_ps(_mm512_castps512_ps256(a[u]), _mm512_extractf32x8_ps(a[u], 1));
    __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(s[0], s[1]), _mm256_hadd_ps(s[2], s[3]));
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

// o = Σ e[p] · V[p] over p < n for one row, 64 elements of head_dim at a time.
RP_INLINE void values1(const float *const *vrow, int hd, const float *e, int n, float *out)
{
    for (int o = 0; o < hd; o += 64) {
        __m512 acc[4];
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++)
            acc[u] = _mm512_setzero_ps();
        for (int p = 0; p < n; p++) {
            __m512 w = _mm512_set1_ps(e[p]);
            const float *vr = vrow[p] + o;
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++)
                acc[u] = _mm512_fmadd_ps(w, _mm512_loadu_ps(vr + 16 * u), acc[u]);
        }
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++)
            _mm512_storeu_ps(out + o + 16 * u, acc[u]);
    }
}

// values1 for two rows (ea over na keys, eb over nb >= na keys) sharing the V loads.
RP_INLINE void values2(const float *const *vrow, int hd, const float *ea, int na, const float *eb, int nb, float *oa,
                       float *ob)
{
    for (int o = 0; o < hd; o += 64) {
        __m512 A[4], B[4];
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++)
            A[u] = B[u] = _mm512_setzero_ps();
        int p = 0;
        for (; p < na; p++) {
            __m512 wa = _mm512_set1_ps(ea[p]), wb = _mm512_set1_ps(eb[p]);
            const float *vr = vrow[p] + o;
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++) {
                __m512 v = _mm512_loadu_ps(vr + 16 * u);
                A[u] = _mm512_fmadd_ps(wa, v, A[u]);
                B[u] = _mm512_fmadd_ps(wb, v, B[u]);
            }
        }
        for (; p < nb; p++) {
            __m512 wb = _mm512_set1_ps(eb[p]);
            const float *vr = vrow[p] + o;
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++)
                B[u] = _mm512_fmadd_ps(wb, _mm512_loadu_ps(vr + 16 * u), B[u]);
        }
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++) {
            _mm512_storeu_ps(oa + o + 16 * u, A[u]);
            _mm512_storeu_ps(ob + o + 16 * u, B[u]);
        }
    }
}

void rp_cpu_attn_chunk_avx512(const rp_attn_chunk *a)
{
    int n = a->p1 - a->p0, hd = a->hd, nq = a->n_q, rows = a->n_tok * nq;
    const float *krow[RP_ATTN_CHUNK], *vrow[RP_ATTN_CHUNK];
    rp_cpu_attn_kv_rows(a, krow, vrow);
    // Scores as the AVX2 kernel computes them (lanes past a row's end are dots with
    // other keys, made -inf by the softmax).
    const __m128 scale = _mm_set1_ps(a->scale);
    for (int p = 0; p < n; p += 4) {
        const float *kr[4];
        for (int u = 0; u < 4; u++)
            kr[u] = krow[p + u < n ? p + u : n - 1];
        for (int i = 0; i < a->n_tok; i++) {
            if (p >= a->end[i] - a->p0)
                continue;
            const float *q = a->q + (size_t)i * a->q_stride;
            float *s = a->scores + (size_t)i * nq * RP_ATTN_CHUNK + p;
            for (int g = 0; g < nq; g++)
                _mm_storeu_ps(s + (size_t)g * RP_ATTN_CHUNK, _mm_mul_ps(dot4(q + (size_t)g * hd, kr, hd), scale));
        }
    }
    for (int r = 0; r < rows; r++)
        a->m[r] = rp_cpu_attn_softmax_avx2(a->scores + (size_t)r * RP_ATTN_CHUNK, a->end[r / nq] - a->p0, a->l + r);
    // Rows in pairs; a row's key count never falls with the row (positions ascend).
    for (int r = 0; r < rows; r += 2) {
        const float *e = a->scores + (size_t)r * RP_ATTN_CHUNK;
        int na = a->end[r / nq] - a->p0;
        if (r + 1 < rows)
            values2(vrow, hd, e, na, e + RP_ATTN_CHUNK, a->end[(r + 1) / nq] - a->p0, a->o + (size_t)r * hd,
                    a->o + (size_t)(r + 1) * hd);
        else
            values1(vrow, hd, e, na, a->o + (size_t)r * hd);
    }
}
