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
 *           added and reduced with the AVX2 kernel's hadd tree. Four rows (query
 *           heads of the group, then the span's next tokens) go together, so
 *           each key register loaded feeds four FMAs.
 *   softmax: the AVX2 kernel's (rp_cpu_attn_softmax_avx2).
 *   values: o[j] = Σ e[p] · V[p][j] in key order is one FMA chain per element j;
 *           16 elements per register instead of 8, four rows at a time (sixteen
 *           independent chains for head_dim 64, and each V row read once for the
 *           four; rows with fewer keys drop out of the group where theirs end).
 *
 * All float arithmetic is written with intrinsics.
 */
#include "cpu_int.h"

#include <immintrin.h>

#define RP_INLINE static inline __attribute__((always_inline))

#define ROWS 4 // query rows computed together: each K or V row loaded serves all of them

// Dots of R query rows (q[r]: one head's query) with four key rows, into out[r][0..4)
// times scale: the AVX2 kernel's dot4 for every row, its lanes one for one (each
// row's accumulators see the same FMAs in the same order); the key loads are shared.
RP_INLINE void dots(const float *const *q, int R, const float *const *kr, int hd, __m128 scale, float *const *out)
{
    __m512 a[ROWS][4];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++)
            a[r][u] = _mm512_setzero_ps();
    for (int i = 0; i < hd; i += 16) {
        __m512 k[4];
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++)
            k[u] = _mm512_loadu_ps(kr[u] + i);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            __m512 qv = _mm512_loadu_ps(q[r] + i);
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++)
                a[r][u] = _mm512_fmadd_ps(qv, k[u], a[r][u]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
        __m256 s[4];
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++) // the AVX2 kernel's a0 + a1
            s[u] = _mm256_add_ps(_mm512_castps512_ps256(a[r][u]), _mm512_extractf32x8_ps(a[r][u], 1));
        __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(s[0], s[1]), _mm256_hadd_ps(s[2], s[3]));
        __m128 d = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
        _mm_storeu_ps(out[r], _mm_mul_ps(d, scale));
    }
}

// o[r] = Σ e[r][p] · V[p] over p < cnt[r] for R rows (cnt non-decreasing), 64
// elements of head_dim at a time: per element one FMA chain in key order, as the
// AVX2 kernel's; each V row is loaded once for every row that has it.
RP_INLINE void values(const float *const *vrow, int hd, const float *const *e, const int *cnt, int R, float *const *o)
{
    for (int c = 0; c < hd; c += 64) {
        __m512 acc[ROWS][4];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++)
                acc[r][u] = _mm512_setzero_ps();
        int p = 0;
#pragma GCC unroll 4
        for (int r0 = 0; r0 < R; r0++) // keys every row from r0 on has
            for (; p < cnt[r0]; p++) {
                const float *vr = vrow[p] + c;
                __m512 v[4];
#pragma GCC unroll 4
                for (int u = 0; u < 4; u++)
                    v[u] = _mm512_loadu_ps(vr + 16 * u);
#pragma GCC unroll 4
                for (int r = r0; r < R; r++) {
                    __m512 w = _mm512_set1_ps(e[r][p]);
#pragma GCC unroll 4
                    for (int u = 0; u < 4; u++)
                        acc[r][u] = _mm512_fmadd_ps(w, v[u], acc[r][u]);
                }
            }
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++)
                _mm512_storeu_ps(o[r] + c + 16 * u, acc[r][u]);
    }
}

void rp_cpu_attn_chunk_avx512(const rp_attn_chunk *a)
{
    int n = a->p1 - a->p0, hd = a->hd, nq = a->n_q, rows = a->n_tok * nq;
    const float *krow[RP_ATTN_CHUNK], *vrow[RP_ATTN_CHUNK];
    rp_cpu_attn_kv_rows(a, krow, vrow);
    // Scores as the AVX2 kernel computes them (lanes past a row's end are dots with
    // other keys, made -inf by the softmax), ROWS rows at a time. A row's key count
    // never falls with the row (positions ascend): the rows that have key p are
    // those from the first token whose range reaches it on.
    const __m128 scale = _mm_set1_ps(a->scale);
    int t0 = 0;
    for (int p = 0; p < n; p += 4) {
        const float *kr[4];
        for (int u = 0; u < 4; u++)
            kr[u] = krow[p + u < n ? p + u : n - 1];
        while (t0 < a->n_tok && p >= a->end[t0] - a->p0)
            t0++;
        for (int r = t0 * nq; r < rows; r += ROWS) {
            const float *q[ROWS];
            float *out[ROWS];
            int R = rows - r < ROWS ? rows - r : ROWS;
            for (int j = 0; j < R; j++) {
                q[j] = a->q + (size_t)((r + j) / nq) * a->q_stride + (size_t)((r + j) % nq) * hd;
                out[j] = a->scores + (size_t)(r + j) * RP_ATTN_CHUNK + p;
            }
            switch (R) { // (R a constant in each: the accumulators stay in registers)
            case 1: dots(q, 1, kr, hd, scale, out); break;
            case 2: dots(q, 2, kr, hd, scale, out); break;
            case 3: dots(q, 3, kr, hd, scale, out); break;
            default: dots(q, ROWS, kr, hd, scale, out); break;
            }
        }
    }
    for (int r = 0; r < rows; r++)
        a->m[r] = rp_cpu_attn_softmax_avx2(a->scores + (size_t)r * RP_ATTN_CHUNK, a->end[r / nq] - a->p0, a->l + r);
    for (int r = 0; r < rows; r += ROWS) {
        const float *e[ROWS];
        float *o[ROWS];
        int cnt[ROWS], R = rows - r < ROWS ? rows - r : ROWS;
        for (int j = 0; j < R; j++) {
            e[j] = a->scores + (size_t)(r + j) * RP_ATTN_CHUNK;
            o[j] = a->o + (size_t)(r + j) * hd;
            cnt[j] = a->end[(r + j) / nq] - a->p0;
        }
        switch (R) {
        case 1: values(vrow, hd, e, cnt, 1, o); break;
        case 2: values(vrow, hd, e, cnt, 2, o); break;
        case 3: values(vrow, hd, e, cnt, 3, o); break;
        default: values(vrow, hd, e, cnt, ROWS, o); break;
        }
    }
}
