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
 *   halves: a cache of halves is read as the AVX2 kernel reads it, converted
 *           exactly. When the chunk has at most four rows (a decode token's
 *           group) each K and V load is converted where it is used, once; with
 *           more rows the chunk's rows are converted once into scratch first
 *           (each would otherwise be converted once per four rows), as float32
 *           rows are copied there (packed, they stay in L1).
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

// 16 K or V values from element i of a row of the cache: float32, or halves converted.
RP_INLINE __m512 load16(const void *row, int i, bool f16)
{
    if (f16)
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)row + i)));
    return _mm512_loadu_ps((const float *)row + i);
}

#define AHEAD 8 // K/V rows fetched ahead of their use when they come from memory

// Asks for one K or V row of hd values (halves when f16) to be brought into L1.
RP_INLINE void prefetch_row(const void *row, int hd, bool f16)
{
    for (int i = 0; i < hd * (f16 ? 2 : 4); i += 64)
        _mm_prefetch((const char *)row + i, _MM_HINT_T0);
}

// Dots of R query rows (q[r]: one head's query) with four key rows, into out[r][0..4)
// times scale: the AVX2 kernel's dot4 for every row, its lanes one for one (each
// row's accumulators see the same FMAs in the same order); the key loads are shared.
// The sixteen sums are then reduced together, by the AVX2 kernel's tree: per dot s_j =
// lane j + lane j + 8 (its a0 + a1), then ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 +
// s7)) (its two hadds and the add of the 128-bit halves); rows past R are zeros.
RP_INLINE void dots(const float *const *q, int R, const void *const *kr, bool f16, int hd, __m128 scale,
                    float *const *out)
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
            k[u] = load16(kr[u], i, f16);
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
RP_INLINE void values(const void *const *vrow, bool f16, bool pf, int hd, const float *const *e, const int *cnt,
                      int R, float *const *o)
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
                if (pf && c == 0 && p + AHEAD < cnt[R - 1])
                    prefetch_row(vrow[p + AHEAD], hd, f16);
                __m512 v[4];
#pragma GCC unroll 4
                for (int u = 0; u < 4; u++)
                    v[u] = load16(vrow[p], c + 16 * u, f16);
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

// Scores of R rows (q[r], into s[r]) with keys [0, pn) of the chunk's n, four at a
// time (the last group's missing keys read the chunk's last row; their lanes are
// dropped by the softmax).
RP_INLINE void scores(const float *const *q, int R, const void *const *krow, int n, int pn, bool f16, bool pf,
                      int hd, __m128 scale, float *const *s)
{
    for (int p = 0; p < pn; p += 4) {
        if (pf)
            for (int u = AHEAD; u < AHEAD + 4 && p + u < pn; u++)
                prefetch_row(krow[p + u], hd, f16);
        const void *kr[4];
        float *out[ROWS];
        for (int u = 0; u < 4; u++)
            kr[u] = krow[p + u < n ? p + u : n - 1];
        for (int r = 0; r < R; r++)
            out[r] = s[r] + p;
        dots(q, R, kr, f16, hd, scale, out);
    }
}

// The chunk over K and V rows of float32, or of halves when f16; pf: the rows are
// read once (one group of rows), from memory, and fetched AHEAD rows ahead
// (constants in each instance).
RP_INLINE void chunk(const rp_attn_chunk *a, const void *const *krow, const void *const *vrow, bool f16, bool pf)
{
    int n = a->p1 - a->p0, hd = a->hd, nq = a->n_q, rows = a->n_tok * nq;
    // Scores as the AVX2 kernel computes them, ROWS rows at a time, each group over the
    // keys its last row has (positions ascend, so that row has the most): lanes past a
    // row's end are dots with other keys, made -inf by the softmax.
    const __m128 scale = _mm_set1_ps(a->scale);
    for (int r = 0; r < rows; r += ROWS) {
        const float *q[ROWS];
        float *s[ROWS];
        int R = rows - r < ROWS ? rows - r : ROWS, pn = a->end[(r + R - 1) / nq] - a->p0;
        for (int j = 0; j < R; j++) {
            q[j] = a->q + (size_t)((r + j) / nq) * a->q_stride + (size_t)((r + j) % nq) * hd;
            s[j] = a->scores + (size_t)(r + j) * RP_ATTN_CHUNK;
        }
        switch (R) { // (R a constant in each: the accumulators stay in registers)
        case 1: scores(q, 1, krow, n, pn, f16, pf, hd, scale, s); break;
        case 2: scores(q, 2, krow, n, pn, f16, pf, hd, scale, s); break;
        case 3: scores(q, 3, krow, n, pn, f16, pf, hd, scale, s); break;
        default: scores(q, ROWS, krow, n, pn, f16, pf, hd, scale, s); break;
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
        case 1: values(vrow, f16, pf, hd, e, cnt, 1, o); break;
        case 2: values(vrow, f16, pf, hd, e, cnt, 2, o); break;
        case 3: values(vrow, f16, pf, hd, e, cnt, 3, o); break;
        default: values(vrow, f16, pf, hd, e, cnt, ROWS, o); break;
        }
    }
}

void rp_cpu_attn_chunk_avx512(const rp_attn_chunk *a)
{
    const void *krow[RP_ATTN_CHUNK], *vrow[RP_ATTN_CHUNK];
    if (a->n_tok * a->n_q <= ROWS) { // one group of rows: each K and V row is used once, as it is
        rp_cpu_attn_kv_slots(a, krow, vrow);
        if (a->f16)
            chunk(a, krow, vrow, true, true);
        else
            chunk(a, krow, vrow, false, true);
        return;
    }
    // Several groups: the rows are packed into scratch first (halves converted), read
    // from there by every group (in the cache a KV head's rows lie n_kv_head * hd apart,
    // sharing L1 sets: 44 against 65 GMAC/s for a 27-token span on a Zen 5 core).
    rp_cpu_attn_kv_rows(a, (const float **)krow, (const float **)vrow, true);
    chunk(a, krow, vrow, false, false);
}
