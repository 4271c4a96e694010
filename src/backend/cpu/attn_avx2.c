/*
 * attn_avx2.c - AVX2/FMA kernel for one chunk of attention (chosen at run time).
 *
 * The driver (cpu_backend.c) cuts each token's key range into chunks of
 * RP_ATTN_CHUNK keys at fixed positions and merges the chunks' partial softmax
 * results in chunk order; this file computes one chunk for all query heads of a
 * GQA group of a span of tokens (one sequence's consecutive positions, each with
 * its own key range end) at once, so each K and V row is read once per span and
 * group from memory:
 *
 *   scores: four keys at a time, each (head, key) dot over head_dim in two
 *           accumulators (even and odd 8-float slices), summed and reduced with
 *           a fixed hadd tree; then × scale.
 *   softmax: per head, max over the chunk, e = exp(s - max) with a polynomial exp
 *           (below), l = Σ e in eight lanes then a fixed horizontal sum.
 *   values: per head and 64-float slice of head_dim, o += e[p] · V[p] over the
 *           chunk's keys in order, eight accumulators.
 *
 * Determinism: every (head, key) score, every chunk sum and every output lane
 * sees the same instruction sequence whatever the chunk's place, its length, the
 * other rows of its span and the thread that runs it (a short last group of keys reuses the chunk's
 * last row and drops the extra lanes; padded score lanes hold -inf and give
 * e = 0). All float arithmetic is written with intrinsics.
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

// Dots of one query head with four key rows: {q·k0, q·k1, q·k2, q·k3}.
RP_INLINE __m128 dot4(const float *q, const float *const *kr, int hd)
{
    __m256 a0[4], a1[4];
#pragma GCC unroll 4
    for (int u = 0; u < 4; u++)
        a0[u] = a1[u] = _mm256_setzero_ps();
    for (int i = 0; i < hd; i += 16) {
        __m256 q0 = _mm256_loadu_ps(q + i), q1 = _mm256_loadu_ps(q + i + 8);
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++) {
            a0[u] = _mm256_fmadd_ps(q0, _mm256_loadu_ps(kr[u] + i), a0[u]);
            a1[u] = _mm256_fmadd_ps(q1, _mm256_loadu_ps(kr[u] + i + 8), a1[u]);
        }
    }
    __m256 s0 = _mm256_add_ps(a0[0], a1[0]), s1 = _mm256_add_ps(a0[1], a1[1]);
    __m256 s2 = _mm256_add_ps(a0[2], a1[2]), s3 = _mm256_add_ps(a0[3], a1[3]);
    __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(s0, s1), _mm256_hadd_ps(s2, s3));
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
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

void rp_cpu_attn_kv_slots(const rp_attn_chunk *a, const void **krow, const void **vrow)
{
    int n = a->p1 - a->p0, blk = a->p0 / a->bs, off = a->p0 % a->bs;
    size_t eb = a->f16 ? 2 : 4;
    for (int p = 0; p < n; p++) {
        size_t e = ((size_t)a->bt[blk] * a->bs + off) * a->stride * eb; // the row's first byte
        krow[p] = (const uint8_t *)a->k + e;
        vrow[p] = (const uint8_t *)a->v + e;
        if (++off == a->bs) {
            off = 0;
            blk++;
        }
    }
}

#define PACK_AHEAD 32 // rows fetched ahead while packing: a row takes a few cycles, memory far more

// n (a multiple of 8) floats copied.
RP_INLINE void copy_f32(const float *src, float *dst, int n)
{
    for (int i = 0; i < n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_loadu_ps(src + i));
}

// Asks for one K or V row of hd values of eb bytes to be brought into L1.
RP_INLINE void prefetch_row(const void *row, int hd, size_t eb)
{
    for (size_t i = 0; i < (size_t)hd * eb; i += 64)
        _mm_prefetch((const char *)row + i, _MM_HINT_T0);
}

void rp_cpu_attn_kv_rows(const rp_attn_chunk *a, const float **krow, const float **vrow, bool pack)
{
    int n = a->p1 - a->p0, hd = a->hd;
    rp_cpu_attn_kv_slots(a, (const void **)krow, (const void **)vrow);
    if (!a->f16 && !pack)
        return;
    size_t eb = a->f16 ? 2 : 4;
    float *kt = a->kv_tmp, *vt = a->kv_tmp + (size_t)RP_ATTN_CHUNK * hd;
    for (int p = 0; p < n; p++) {
        if (p + PACK_AHEAD < n) {
            prefetch_row(krow[p + PACK_AHEAD], hd, eb);
            prefetch_row(vrow[p + PACK_AHEAD], hd, eb);
        }
        if (a->f16) {
            f16_to_f32((const uint16_t *)krow[p], kt + (size_t)p * hd, hd);
            f16_to_f32((const uint16_t *)vrow[p], vt + (size_t)p * hd, hd);
        } else {
            copy_f32(krow[p], kt + (size_t)p * hd, hd);
            copy_f32(vrow[p], vt + (size_t)p * hd, hd);
        }
        krow[p] = kt + (size_t)p * hd;
        vrow[p] = vt + (size_t)p * hd;
    }
}

void rp_cpu_attn_chunk_avx2(const rp_attn_chunk *a)
{
    int n = a->p1 - a->p0, hd = a->hd, nq = a->n_q;
    const float *krow[RP_ATTN_CHUNK], *vrow[RP_ATTN_CHUNK];
    rp_cpu_attn_kv_rows(a, krow, vrow, false);
    // Scores, four keys at a time for every row that has them: the four K rows are
    // read once for all the span's tokens. Lanes past a row's end hold dots with
    // other keys (or the chunk's last one repeated); row_finish makes them -inf.
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
    for (int i = 0; i < a->n_tok; i++)
        for (int g = 0; g < nq; g++) {
            int r = i * nq + g;
            row_finish(a, vrow, a->end[i] - a->p0, a->scores + (size_t)r * RP_ATTN_CHUNK, a->m + r, a->l + r,
                       a->o + (size_t)r * hd);
        }
}
