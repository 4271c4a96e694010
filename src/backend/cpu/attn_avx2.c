/*
 * attn_avx2.c - AVX2/FMA kernel for one chunk of attention (chosen at run time),
 * and the K/V access both chunk kernels share.
 *
 * The driver (cpu_backend.c) cuts each token's key range into chunks of
 * RP_ATTN_CHUNK keys at fixed positions and merges the chunks' partial softmax
 * results in chunk order; this file computes one chunk for all query heads of a
 * GQA group of a span of tokens (one sequence's consecutive positions, each with
 * its own key range end) at once, so each K and V value is read once per span
 * and group from memory:
 *
 *   scores: the cache stores K transposed inside each block (rp_kv_layer), so 16
 *           keys' element i are adjacent: per group of 16 keys and four query rows,
 *           one broadcast query element times 8 keys per FMA, each key's score one
 *           FMA chain over head_dim in order from zero (RP_ATTN_KGROUP), × scale;
 *           no horizontal sums.
 *   softmax: per row, max over the chunk, e = exp(s - max) with a polynomial exp
 *           (below), l = Σ e in eight lanes then a fixed horizontal sum.
 *   values: per row and 64-float slice of head_dim, o += e[p] · V[p] over the
 *           chunk's keys in order, eight accumulators.
 *
 * The chunk's K groups and V rows are packed into scratch as float32 first
 * (rp_cpu_attn_pack: halves converted exactly, float32 copied, then read from L1
 * by every tile of rows), except float32 that one tile reads once, in place.
 *
 * Determinism: every (row, key) score, every chunk sum and every output lane
 * sees the same instruction sequence whatever the chunk's place, its length, the
 * other rows of its span and the thread that runs it (lanes past a row's end hold
 * scores with other keys, or with whatever the block's unused slots hold, and
 * are made -inf, so e = 0, before anything reads them). All float arithmetic is
 * written with intrinsics.
 *
 * exp: exp8 of vexp.h (inputs are <= 0 here).
 */
#include "cpu_int.h"

#include <immintrin.h>
#include <math.h>

#include "vexp.h"

#define RP_INLINE static inline __attribute__((always_inline))

// Fixed-order horizontal sum of 8 floats.
RP_INLINE float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

RP_INLINE float hmax8(__m256 v)
{
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

void rp_cpu_attn_scale_add_avx2(float *o, float a, const float *p, float b, int n)
{
    __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
    for (int i = 0; i < n; i += 8)
        _mm256_storeu_ps(o + i, _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(o + i), va),
                                              _mm256_mul_ps(_mm256_loadu_ps(p + i), vb)));
}

void rp_cpu_attn_exp_avx2(const float *x, float *y, int n)
{
    for (int i = 0; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, exp8(_mm256_loadu_ps(x + i)));
}

float rp_cpu_attn_softmax_avx2(float *s, int n, float *l)
{
    int npad = (n + 7) & ~7;
    for (int p = n; p < npad; p++)
        s[p] = -INFINITY;
    __m256 mx = _mm256_set1_ps(-INFINITY);
    for (int p = 0; p < npad; p += 8)
        mx = _mm256_max_ps(mx, _mm256_loadu_ps(s + p));
    float m = hmax8(mx);
    __m256 mv = _mm256_set1_ps(m), sum = _mm256_setzero_ps();
    for (int p = 0; p < npad; p += 8) {
        __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + p), mv));
        _mm256_storeu_ps(s + p, e);
        sum = _mm256_add_ps(sum, e);
    }
    *l = hsum8(sum);
    return m;
}

// Softmax of one row's scores over its n keys, then o = Σ e[p] · V[p] in order, per
// 64-float slice of head_dim in eight accumulators.
RP_INLINE void row_finish(const rp_attn_chunk *a, const float *const *vrow, int n, float *s, float *m_out, float *l_out,
                          float *out)
{
    int hd = a->hd;
    *m_out = rp_cpu_attn_softmax_avx2(s, n, l_out);
    for (int o = 0; o < hd; o += 64) {
        __m256 acc[8]; // (unrolled: the accumulators stay in registers)
#pragma GCC unroll 8
        for (int u = 0; u < 8; u++)
            acc[u] = _mm256_setzero_ps();
        for (int p = 0; p < n; p++) {
            __m256 w = _mm256_broadcast_ss(s + p);
            const float *vr = vrow[p] + o;
#pragma GCC unroll 8
            for (int u = 0; u < 8; u++)
                acc[u] = _mm256_fmadd_ps(w, _mm256_loadu_ps(vr + 8 * u), acc[u]);
        }
#pragma GCC unroll 8
        for (int u = 0; u < 8; u++)
            _mm256_storeu_ps(out + o + 8 * u, acc[u]);
    }
}

// n (a multiple of 8) halves to float32: exact.
RP_INLINE void f16_to_f32(const uint16_t *src, float *dst, int n)
{
    for (int i = 0; i < n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
}

void rp_cpu_f32_to_f16_avx2(const float *src, uint16_t *dst, int64_t n)
{
    // min(max, x) and max(-max, x) return x when it is NaN (the second operand)
    const __m256 hi = _mm256_set1_ps(RP_KV_HALF_MAX), lo = _mm256_set1_ps(-RP_KV_HALF_MAX);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_max_ps(lo, _mm256_min_ps(hi, _mm256_loadu_ps(src + i)));
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    for (; i < n; i++)
        dst[i] = rp_cpu_kv_half(src[i]);
}

// Element offset from a->k of element 0 of key position p (element i is i * bs further).
RP_INLINE size_t k_elem(const rp_attn_chunk *a, int p)
{
    return (size_t)a->bt[p / a->bs] * a->stride * (size_t)a->bs + (size_t)(p % a->bs);
}

void rp_cpu_attn_k_groups(const rp_attn_chunk *a, const void **kg)
{
    size_t eb = a->f16 ? 2 : 4;
    for (int g = 0, n = rp_cpu_attn_n_groups(a); g < n; g++)
        kg[g] = (const uint8_t *)a->k + k_elem(a, a->p0 + g * RP_ATTN_KGROUP) * eb;
}

void rp_cpu_attn_v_rows(const rp_attn_chunk *a, const void **vrow)
{
    size_t eb = a->f16 ? 2 : 4, row = a->stride * eb;
    for (int p = a->p0, n = 0; p < a->p1;) { // block by block (no division per key)
        const uint8_t *slot = (const uint8_t *)a->v + ((size_t)a->bt[p / a->bs] * a->bs + (size_t)(p % a->bs)) * row;
        for (int off = p % a->bs; off < a->bs && p < a->p1; off++, p++, slot += row)
            vrow[n++] = slot;
    }
}

#define PACK_AHEAD 32 // V rows fetched ahead while packing: a row takes a few cycles, memory far more

// n (a multiple of 8) floats copied.
RP_INLINE void copy_f32(const float *src, float *dst, int n)
{
    for (int i = 0; i < n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_loadu_ps(src + i));
}

// n (a multiple of 8) values of the cache's type at src as float32 at dst.
RP_INLINE void to_f32(const void *src, bool f16, float *dst, int n)
{
    if (f16)
        f16_to_f32(src, dst, n);
    else
        copy_f32(src, dst, n);
}

// Asks for the cache lines of n bytes from p to be brought into L1.
RP_INLINE void prefetch_bytes(const void *p, size_t n)
{
    for (size_t i = 0; i < n; i += 64)
        _mm_prefetch((const char *)p + i, _MM_HINT_T0);
}

// K group g of the chunk as float32 at dst (16 per element of head_dim), gathered key
// by key (for a block size that is not a multiple of the group); keys past p1 zero.
static void pack_k_gather(const rp_attn_chunk *a, int g, float *dst)
{
    for (int u = 0; u < RP_ATTN_KGROUP; u++) {
        int p = a->p0 + g * RP_ATTN_KGROUP + u;
        size_t e = p < a->p1 ? k_elem(a, p) : 0;
        for (int i = 0; i < a->hd; i++, e += (size_t)a->bs)
            dst[i * RP_ATTN_KGROUP + u] = p >= a->p1 ? 0.0f
                                          : a->f16   ? rp_fp16_to_f32(((const uint16_t *)a->k)[e])
                                                     : ((const float *)a->k)[e];
    }
}

void rp_cpu_attn_pack(const rp_attn_chunk *a, const float **kg, const float **vrow)
{
    int n = a->p1 - a->p0, hd = a->hd, ng = rp_cpu_attn_n_groups(a);
    size_t eb = a->f16 ? 2 : 4, ld = (size_t)a->bs * eb; // bytes between a group's elements in the cache
    float *kt = a->kv_tmp, *vt = a->kv_tmp + (size_t)RP_ATTN_CHUNK * hd;
    if (a->bs % RP_ATTN_KGROUP == 0) {
        const void *src[RP_ATTN_CHUNK / RP_ATTN_KGROUP];
        rp_cpu_attn_k_groups(a, src);
        for (int g = 0; g < ng; g++) {
            float *dst = kt + (size_t)g * RP_ATTN_KGROUP * hd;
            for (int i = 0; i < hd; i++) {
                if (g + 1 < ng) // the next group, as far ahead as this one has gone
                    _mm_prefetch((const char *)src[g + 1] + i * ld, _MM_HINT_T0);
                to_f32((const uint8_t *)src[g] + i * ld, a->f16, dst + i * RP_ATTN_KGROUP, RP_ATTN_KGROUP);
            }
            kg[g] = dst;
        }
    } else
        for (int g = 0; g < ng; g++) {
            pack_k_gather(a, g, kt + (size_t)g * RP_ATTN_KGROUP * hd);
            kg[g] = kt + (size_t)g * RP_ATTN_KGROUP * hd;
        }
    const void *vr[RP_ATTN_CHUNK];
    rp_cpu_attn_v_rows(a, vr);
    for (int p = 0; p < n; p++) {
        if (p + PACK_AHEAD < n)
            prefetch_bytes(vr[p + PACK_AHEAD], (size_t)hd * eb);
        to_f32(vr[p], a->f16, vt + (size_t)p * hd, hd);
        vrow[p] = vt + (size_t)p * hd;
    }
}

#define ROWS 4 // query rows whose scores are computed together: each K load serves all of them

// Scores of R query rows (q[r]) with the K groups kg[0..ng) of float32 (element i of a
// group's keys at kg[g] + i * ld), into s[r] + 16 g: per key one FMA chain over
// head_dim from zero (RP_ATTN_KGROUP), then × scale; a group's 16 keys in two registers.
RP_INLINE void scores(const float *const *q, int R, const float *const *kg, int ng, size_t ld, int hd, __m256 scale,
                      float *const *s)
{
    for (int g = 0; g < ng; g++) {
        __m256 acc[ROWS][2];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
            acc[r][0] = acc[r][1] = _mm256_setzero_ps();
        const float *k = kg[g];
        for (int i = 0; i < hd; i++) {
            __m256 k0 = _mm256_loadu_ps(k + i * ld), k1 = _mm256_loadu_ps(k + i * ld + 8);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                __m256 qb = _mm256_broadcast_ss(q[r] + i);
                acc[r][0] = _mm256_fmadd_ps(qb, k0, acc[r][0]);
                acc[r][1] = _mm256_fmadd_ps(qb, k1, acc[r][1]);
            }
        }
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            _mm256_storeu_ps(s[r] + g * RP_ATTN_KGROUP, _mm256_mul_ps(acc[r][0], scale));
            _mm256_storeu_ps(s[r] + g * RP_ATTN_KGROUP + 8, _mm256_mul_ps(acc[r][1], scale));
        }
    }
}

void rp_cpu_attn_chunk_avx2(const rp_attn_chunk *a)
{
    int hd = a->hd, nq = a->n_q, rows = a->n_tok * nq;
    const float *kg[RP_ATTN_CHUNK / RP_ATTN_KGROUP], *vrow[RP_ATTN_CHUNK];
    size_t ld = RP_ATTN_KGROUP;
    if (!a->f16 && rows <= ROWS && a->bs % RP_ATTN_KGROUP == 0) { // float32 used once: in place
        rp_cpu_attn_k_groups(a, (const void **)kg);
        rp_cpu_attn_v_rows(a, (const void **)vrow);
        ld = (size_t)a->bs;
    } else
        rp_cpu_attn_pack(a, kg, vrow);
    // Scores, ROWS rows at a time (rp_cpu_attn_tile; row_finish's softmax drops the
    // lanes past a row's end).
    const __m256 scale = _mm256_set1_ps(a->scale);
    for (int r = 0; r < rows; r += ROWS) {
        const float *q[ROWS];
        float *s[ROWS];
        int R = rows - r < ROWS ? rows - r : ROWS, ng = rp_cpu_attn_tile(a, r, R, q, s);
        switch (R) { // (R a constant in each: the accumulators stay in registers)
        case 1:
            scores(q, 1, kg, ng, ld, hd, scale, s);
            break;
        case 2:
            scores(q, 2, kg, ng, ld, hd, scale, s);
            break;
        case 3:
            scores(q, 3, kg, ng, ld, hd, scale, s);
            break;
        default:
            scores(q, ROWS, kg, ng, ld, hd, scale, s);
            break;
        }
    }
    for (int r = 0; r < rows; r++)
        row_finish(a, vrow, a->end[r / nq] - a->p0, a->scores + (size_t)r * RP_ATTN_CHUNK, a->m + r, a->l + r,
                   a->o + (size_t)r * hd);
}
