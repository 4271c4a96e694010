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
 *   softmax: the AVX2 kernel's (rp_cpu_attn_softmax_avx2) 16 lanes at a time: its max
 *           (exact in any order), its exp lane for lane, and its eight-lane sum (the
 *           two halves of each 16 added in turn).
 *   values: o[j] = Σ e[p] · V[p][j] in key order is one FMA chain per element j;
 *           16 elements per register instead of 8, four rows at a time (sixteen
 *           independent chains for head_dim 64, and each V row read once for the
 *           four; rows with fewer keys drop out of the group where theirs end).
 *
 * All float arithmetic is written with intrinsics.
 */
#include "cpu_int.h"

#include <immintrin.h>
#include <math.h>

#include "vexp.h"

#define RP_INLINE static inline __attribute__((always_inline))

#define ROWS 4 // query rows computed together: each K or V row loaded serves all of them

// rp_cpu_attn_softmax_avx2, bit for bit (see the file comment).
static float softmax16(float *s, int n, float *l)
{
    int npad = (n + 7) & ~7;
    for (int p = n; p < npad; p++)
        s[p] = -INFINITY;
    __m512 mx = _mm512_set1_ps(-INFINITY);
    int p = 0;
    for (; p + 16 <= npad; p += 16)
        mx = _mm512_max_ps(mx, _mm512_loadu_ps(s + p));
    if (p < npad) // the last 8
        mx = _mm512_max_ps(mx, _mm512_insertf32x8(mx, _mm256_loadu_ps(s + p), 0));
    float m = _mm512_reduce_max_ps(mx);
    __m512 mv = _mm512_set1_ps(m);
    __m256 sum = _mm256_setzero_ps();
    for (p = 0; p + 16 <= npad; p += 16) {
        __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(s + p), mv));
        _mm512_storeu_ps(s + p, e);
        sum = _mm256_add_ps(sum, _mm512_castps512_ps256(e));
        sum = _mm256_add_ps(sum, _mm512_extractf32x8_ps(e, 1));
    }
    if (p < npad) {
        __m256 x = _mm256_sub_ps(_mm256_loadu_ps(s + p), _mm512_castps512_ps256(mv));
        __m256 e = _mm512_castps512_ps256(exp16(_mm512_zextps256_ps512(x)));
        _mm256_storeu_ps(s + p, e);
        sum = _mm256_add_ps(sum, e);
    }
    __m128 h =
        _mm_add_ps(_mm256_castps256_ps128(sum), _mm256_extractf128_ps(sum, 1)); // rp_cpu_attn_softmax_avx2's hsum8
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    *l = _mm_cvtss_f32(h);
    return m;
}

// Sums adjacent lanes of x and y taken as one 32-lane vector: lane m = lane 2m + lane 2m + 1.
RP_INLINE __m512 pair_sums(__m512 x, __m512 y)
{
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    return _mm512_add_ps(_mm512_permutex2var_ps(x, ev, y), _mm512_permutex2var_ps(x, od, y));
}

// Dots of R query rows (q[r]: one head's query) with four key rows, into out[r][0..4)
// times scale: the AVX2 kernel's dot4 for every row, its lanes one for one (each
// row's accumulators see the same FMAs in the same order); the key loads are shared.
// The sixteen sums are then reduced together, by the AVX2 kernel's tree: per dot s_j =
// lane j + lane j + 8 (its a0 + a1), then ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 +
// s7)) (its two hadds and the add of the 128-bit halves); rows past R are zeros.
RP_INLINE void dots(const float *const *q, int R, const float *const *kr, int hd, __m128 scale, float *const *out)
{
    __m512 a[ROWS][4];
#pragma GCC unroll 4
    for (int r = 0; r < ROWS; r++)
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
    __m512 v[8], p[4], h[2];
#pragma GCC unroll 4
    for (int r = 0; r < ROWS; r++) // v[2r + k]: lanes 0-7 s of key 2k, lanes 8-15 s of key 2k + 1
#pragma GCC unroll 2
        for (int k = 0; k < 2; k++) {
            __m512 x = a[r][2 * k], y = a[r][2 * k + 1];
            v[2 * r + k] = _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x44), _mm512_shuffle_f32x4(x, y, 0xEE));
        }
#pragma GCC unroll 4
    for (int r = 0; r < ROWS; r++) // p[r]: lanes 4u..4u+3 the pairs of key u
        p[r] = pair_sums(v[2 * r], v[2 * r + 1]);
    h[0] = pair_sums(p[0], p[1]); // two lanes per dot
    h[1] = pair_sums(p[2], p[3]);
    __m512 d = _mm512_mul_ps(pair_sums(h[0], h[1]), _mm512_broadcast_f32x4(scale)); // lane 4r + u
    _mm_storeu_ps(out[0], _mm512_castps512_ps128(d));
    if (R > 1)
        _mm_storeu_ps(out[1], _mm512_extractf32x4_ps(d, 1));
    if (R > 2)
        _mm_storeu_ps(out[2], _mm512_extractf32x4_ps(d, 2));
    if (R > 3)
        _mm_storeu_ps(out[3], _mm512_extractf32x4_ps(d, 3));
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
        a->m[r] = softmax16(a->scores + (size_t)r * RP_ATTN_CHUNK, a->end[r / nq] - a->p0, a->l + r);
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
