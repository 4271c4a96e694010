/*
 * attn_avx512.c - AVX-512 kernel for one chunk of attention (chosen at run time
 * over attn_avx2.c when the CPU has AVX-512).
 *
 * The same chunk, rows and results as rp_cpu_attn_chunk_avx2, bit for bit: every
 * lane here runs the operations of one AVX2 lane, in the same order, and only the
 * packing differs.
 *
 *   scores: the AVX2 kernel's FMA chains (one per key over head_dim in order, from
 *           zero), 16 keys to a register: four rows x four groups of 16 keys at a time,
 *           each K register loaded feeding four FMAs and each broadcast query
 *           element four.
 *   softmax: the AVX2 kernel's (rp_cpu_attn_softmax_avx2) 16 lanes at a time: its max
 *           (exact in any order), its exp lane for lane, and its eight-lane sum (the
 *           two halves of each 16 added in turn).
 *   values: o[j] = Σ e[p] · V[p][j] in key order is one FMA chain per element j;
 *           16 elements per register instead of 8, four rows at a time (sixteen
 *           independent chains for head_dim 64, and each V row read once for the
 *           four; rows with fewer keys drop out of the group where theirs end).
 *   halves: a cache of halves is read as the AVX2 kernel reads it, converted
 *           exactly. When the chunk has at most four rows (a decode token's
 *           group) each K and V load is converted where it is used, once, straight
 *           from the cache; with more rows the chunk's K groups and V rows are
 *           converted once into scratch first (each would otherwise be converted
 *           once per four rows), as float32 ones are copied there (packed, they
 *           stay in L1).
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

// 16 values from element i of the cache (a V row, or a K group's row of keys): float32,
// or halves converted.
RP_INLINE __m512 load16(const void *row, size_t i, bool f16)
{
    if (f16)
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)row + i)));
    return _mm512_loadu_ps((const float *)row + i);
}

#define AHEAD 8 // V rows fetched ahead of their use when they come from memory

// Asks for one V row of hd values (halves when f16) to be brought into L1.
RP_INLINE void prefetch_row(const void *row, int hd, bool f16)
{
    for (int i = 0; i < hd * (f16 ? 2 : 4); i += 64)
        _mm_prefetch((const char *)row + i, _MM_HINT_T0);
}

// Scores of R query rows (q[r]) with the B key groups kg[0..B) (element i of a group's
// 16 keys at kg[u] + i * ld, halves when f16), into s[r] + 16 u: per key one FMA chain
// over head_dim from zero, then × scale (RP_ATTN_KGROUP: the AVX2 kernel's chains).
RP_INLINE void tile(const float *const *q, int R, const void *const *kg, int B, size_t ld, bool f16, int hd,
                    __m512 scale, float *const *s)
{
    __m512 acc[ROWS][4];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int u = 0; u < B; u++)
            acc[r][u] = _mm512_setzero_ps();
    for (int i = 0; i < hd; i++) {
        __m512 k[4];
#pragma GCC unroll 4
        for (int u = 0; u < B; u++)
            k[u] = load16(kg[u], (size_t)i * ld, f16);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            __m512 qb = _mm512_set1_ps(q[r][i]);
#pragma GCC unroll 4
            for (int u = 0; u < B; u++)
                acc[r][u] = _mm512_fmadd_ps(qb, k[u], acc[r][u]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int u = 0; u < B; u++)
            _mm512_storeu_ps(s[r] + u * RP_ATTN_KGROUP, _mm512_mul_ps(acc[r][u], scale));
}

// Scores of R rows with the key groups kg[0..ng): four groups at a time, then the
// rest one by one.
RP_INLINE void scores(const float *const *q, int R, const void *const *kg, int ng, size_t ld, bool f16, int hd,
                      __m512 scale, float *const *s)
{
    float *out[ROWS];
    for (int g = 0; g < ng;) {
        for (int r = 0; r < R; r++)
            out[r] = s[r] + g * RP_ATTN_KGROUP;
        if (g + 4 <= ng) {
            tile(q, R, kg + g, 4, ld, f16, hd, scale, out);
            g += 4;
        } else {
            tile(q, R, kg + g, 1, ld, f16, hd, scale, out);
            g++;
        }
    }
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

// The chunk over K groups (element i of a group's keys at kg[g] + i * ld) and V rows,
// of float32 or of halves when f16; pf: the V rows are read once (one tile of rows),
// from memory, and fetched AHEAD rows ahead (constants in each instance).
RP_INLINE void chunk(const rp_attn_chunk *a, const void *const *kg, size_t ld, const void *const *vrow, bool f16,
                     bool pf)
{
    int hd = a->hd, nq = a->n_q, rows = a->n_tok * nq;
    // Scores, ROWS rows at a time (rp_cpu_attn_tile; the softmax drops the lanes past a
    // row's end).
    const __m512 scale = _mm512_set1_ps(a->scale);
    for (int r = 0; r < rows; r += ROWS) {
        const float *q[ROWS];
        float *s[ROWS];
        int R = rows - r < ROWS ? rows - r : ROWS, ng = rp_cpu_attn_tile(a, r, R, q, s);
        switch (R) { // (R a constant in each: the accumulators stay in registers)
        case 1:
            scores(q, 1, kg, ng, ld, f16, hd, scale, s);
            break;
        case 2:
            scores(q, 2, kg, ng, ld, f16, hd, scale, s);
            break;
        case 3:
            scores(q, 3, kg, ng, ld, f16, hd, scale, s);
            break;
        default:
            scores(q, ROWS, kg, ng, ld, f16, hd, scale, s);
            break;
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
    const void *kg[RP_ATTN_CHUNK / RP_ATTN_KGROUP], *vrow[RP_ATTN_CHUNK];
    if (a->n_tok * a->n_q <= ROWS && a->bs % RP_ATTN_KGROUP == 0) { // one tile: K and V used once, in place
        rp_cpu_attn_k_groups(a, kg);
        rp_cpu_attn_v_rows(a, vrow);
        if (a->f16)
            chunk(a, kg, (size_t)a->bs, vrow, true, true);
        else
            chunk(a, kg, (size_t)a->bs, vrow, false, true);
        return;
    }
    // Several tiles: K and V are packed into scratch first (halves converted), read
    // from there by every tile (in the cache a KV head's V rows lie n_kv_head * hd
    // apart, sharing L1 sets: 44 against 65 GMAC/s for a 27-token span on a Zen 5 core).
    rp_cpu_attn_pack(a, (const float **)kg, (const float **)vrow);
    chunk(a, kg, RP_ATTN_KGROUP, vrow, false, false);
}
