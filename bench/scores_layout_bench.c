/*
 * scores_layout_bench.c - attention scores of a 27-token verification span's 81 query rows
 * (rapid-tiny: head_dim 64, GQA group 3) against a 128-key chunk, computed two ways on
 * one thread, everything in cache:
 *
 *   head_dim in lanes: as attn_avx512.c does now: a (row, key) dot is accumulated over
 *                      head_dim in a 16-lane register, four rows x four keys at a time,
 *                      then sixteen dots are reduced together by shuffles and adds;
 *   keys in lanes:     K transposed (for each element of head_dim, the chunk's keys one
 *                      after another): a register holds 16 keys' partial scores, each
 *                      step one broadcast query element times 16 keys, 6 rows x 32 keys
 *                      at a time; no reduction.
 *
 * The second sums each dot in another order (the bits differ, ~1e-7), so it cannot simply
 * replace the first: decoding and verification must keep giving a row the same bits. So a
 * second case measures decoding (one token's 3 rows over 2,048 keys of halves read from
 * memory) with K in the cache's row layout against K stored transposed inside each 16-token
 * block ([KV head][head_dim][16 tokens]): what that layout would cost or buy where it matters
 * most (see bench/RESULTS.md). Neither side prefetches in software (the kernels fetch rows
 * read from memory 8 ahead).
 *
 * Not part of the build or the test suite:
 *   cc -O3 -march=native bench/scores_layout_bench.c -o /tmp/slb && /tmp/slb
 */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { HD = 64, NK = 128, ROWS = 84, TR = 6 }; // 84 rows: whole tiles of 4 and of 6

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

// Adjacent lanes of x and y taken as one 32-lane vector summed: lane m = lane 2m + lane 2m + 1.
static inline __m512 pair_sums(__m512 x, __m512 y)
{
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    return _mm512_add_ps(_mm512_permutex2var_ps(x, ev, y), _mm512_permutex2var_ps(x, od, y));
}

// Sixteen dots of 4 rows x 4 keys, each a 16-lane accumulator (a[r][u]), reduced together as
// attn_avx512.c's dots() does: lane 4r + u of the result is row r's dot with key u.
static inline __m512 reduce16(__m512 a[4][4])
{
    __m512 v[8], pp[4];
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 2; c++) {
            __m512 x = a[r][2 * c], y = a[r][2 * c + 1];
            v[2 * r + c] = _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x44), _mm512_shuffle_f32x4(x, y, 0xEE));
        }
    for (int r = 0; r < 4; r++)
        pp[r] = pair_sums(v[2 * r], v[2 * r + 1]);
    return pair_sums(pair_sums(pp[0], pp[1]), pair_sums(pp[2], pp[3]));
}

// s[r][p] = q[r] . k[p], head_dim in lanes (k: NK rows of HD).
static void dots_hd_lanes(const float *q, const float *k, float *s)
{
    for (int r0 = 0; r0 < ROWS; r0 += 4)
        for (int p = 0; p < NK; p += 4) {
            __m512 a[4][4];
            for (int r = 0; r < 4; r++)
                for (int u = 0; u < 4; u++)
                    a[r][u] = _mm512_setzero_ps();
            for (int i = 0; i < HD; i += 16) {
                __m512 kk[4];
                for (int u = 0; u < 4; u++)
                    kk[u] = _mm512_loadu_ps(k + (p + u) * HD + i);
#pragma GCC unroll 4
                for (int r = 0; r < 4; r++) {
                    __m512 qv = _mm512_loadu_ps(q + (r0 + r) * HD + i);
                    for (int u = 0; u < 4; u++)
                        a[r][u] = _mm512_fmadd_ps(qv, kk[u], a[r][u]);
                }
            }
            __m512 d = reduce16(a);
            _mm_storeu_ps(s + r0 * NK + p, _mm512_castps512_ps128(d));
            _mm_storeu_ps(s + (r0 + 1) * NK + p, _mm512_extractf32x4_ps(d, 1));
            _mm_storeu_ps(s + (r0 + 2) * NK + p, _mm512_extractf32x4_ps(d, 2));
            _mm_storeu_ps(s + (r0 + 3) * NK + p, _mm512_extractf32x4_ps(d, 3));
        }
}

// The same scores, keys in lanes (kt: HD rows of NK).
static void dots_keys_lanes(const float *q, const float *kt, float *s)
{
    for (int r0 = 0; r0 < ROWS; r0 += TR)
        for (int p = 0; p < NK; p += 32) {
            __m512 a[TR][2];
            for (int r = 0; r < TR; r++)
                a[r][0] = a[r][1] = _mm512_setzero_ps();
            for (int i = 0; i < HD; i++) {
                __m512 k0 = _mm512_loadu_ps(kt + i * NK + p), k1 = _mm512_loadu_ps(kt + i * NK + p + 16);
#pragma GCC unroll 6
                for (int r = 0; r < TR; r++) {
                    __m512 qb = _mm512_set1_ps(q[(r0 + r) * HD + i]);
                    a[r][0] = _mm512_fmadd_ps(qb, k0, a[r][0]);
                    a[r][1] = _mm512_fmadd_ps(qb, k1, a[r][1]);
                }
            }
            for (int r = 0; r < TR; r++) {
                _mm512_storeu_ps(s + (r0 + r) * NK + p, a[r][0]);
                _mm512_storeu_ps(s + (r0 + r) * NK + p + 16, a[r][1]);
            }
        }
}

/* Decode: one token's 3 query rows over a context of CTX keys of one KV head, K of halves as the
 * cache holds them, from memory (NSEQ contexts of 2 KV heads, 24 MiB, walked in turn). */
enum { CTX = 2048, NKV = 2, NSEQ = 48 };

// Row layout (as now): key p's halves at k + (p * NKV + h) * HD; dots as dots_hd_lanes, 4 keys at a time.
static void decode_hd_lanes(const float *q, const uint16_t *k, int h, float *s)
{
    for (int p = 0; p < CTX; p += 4) {
        __m512 a[4][4]; // row 3 stays zero
        for (int r = 0; r < 4; r++)
            for (int u = 0; u < 4; u++)
                a[r][u] = _mm512_setzero_ps();
        for (int i = 0; i < HD; i += 16) {
            __m512 kk[4];
            for (int u = 0; u < 4; u++)
                kk[u] =
                    _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(k + ((size_t)(p + u) * NKV + h) * HD + i)));
#pragma GCC unroll 3
            for (int r = 0; r < 3; r++) {
                __m512 qv = _mm512_loadu_ps(q + r * HD + i);
                for (int u = 0; u < 4; u++)
                    a[r][u] = _mm512_fmadd_ps(qv, kk[u], a[r][u]);
            }
        }
        __m512 d = reduce16(a);
        _mm_storeu_ps(s + p, _mm512_castps512_ps128(d));
        _mm_storeu_ps(s + CTX + p, _mm512_extractf32x4_ps(d, 1));
        _mm_storeu_ps(s + 2 * CTX + p, _mm512_extractf32x4_ps(d, 2));
    }
}

// Transposed blocks: block b's keys for head h as [HD][16] halves at k + (b * NKV + h) * HD * 16;
// four blocks at a time (12 independent FMA chains, each broadcast query element used 4 times).
static void decode_keys_lanes(const float *q, const uint16_t *k, int h, float *s)
{
    for (int b = 0; b < CTX / 16; b += 4) {
        const uint16_t *kb[4];
        for (int u = 0; u < 4; u++)
            kb[u] = k + ((size_t)(b + u) * NKV + h) * HD * 16;
        __m512 a[4][4]; // row 3 stays zero
        for (int r = 0; r < 4; r++)
            for (int u = 0; u < 4; u++)
                a[r][u] = _mm512_setzero_ps();
        for (int i = 0; i < HD; i++) {
            __m512 x[4];
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++)
                x[u] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(kb[u] + i * 16)));
#pragma GCC unroll 3
            for (int r = 0; r < 3; r++) {
                __m512 qb = _mm512_set1_ps(q[r * HD + i]);
#pragma GCC unroll 4
                for (int u = 0; u < 4; u++)
                    a[r][u] = _mm512_fmadd_ps(qb, x[u], a[r][u]);
            }
        }
        for (int r = 0; r < 3; r++)
            for (int u = 0; u < 4; u++)
                _mm512_storeu_ps(s + r * CTX + (b + u) * 16, a[r][u]);
    }
}

static void decode_case(void)
{
    size_t per = (size_t)CTX * NKV * HD;
    uint16_t *kr = aligned_alloc(64, per * NSEQ * 2), *kt = aligned_alloc(64, per * NSEQ * 2);
    float *q = aligned_alloc(64, 3 * HD * 4), *s1 = aligned_alloc(64, 3 * CTX * 4),
          *s2 = aligned_alloc(64, 3 * CTX * 4);
    for (int i = 0; i < 3 * HD; i++)
        q[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    for (size_t n = 0; n < NSEQ; n++)
        for (int p = 0; p < CTX; p++)
            for (int h = 0; h < NKV; h++)
                for (int i = 0; i < HD; i++) {
                    float x = (float)rand() / (float)RAND_MAX - 0.5f;
                    uint16_t v = (uint16_t)_cvtss_sh(x, 0);
                    kr[n * per + ((size_t)p * NKV + h) * HD + i] = v;
                    kt[n * per + (((size_t)(p / 16) * NKV + h) * HD + i) * 16 + p % 16] = v;
                }
    double b1 = 1e9, b2 = 1e9;
    for (int t = 0; t < 10; t++) { // alternating; each timing walks all NSEQ contexts, both heads
        double t0 = now();
        for (int n = 0; n < NSEQ; n++)
            for (int h = 0; h < NKV; h++)
                decode_hd_lanes(q, kr + n * per, h, s1);
        double t1 = now();
        for (int n = 0; n < NSEQ; n++)
            for (int h = 0; h < NKV; h++)
                decode_keys_lanes(q, kt + n * per, h, s2);
        double t2 = now();
        b1 = t1 - t0 < b1 ? t1 - t0 : b1;
        b2 = t2 - t1 < b2 ? t2 - t1 : b2;
    }
    double md = 0;
    for (int i = 0; i < 3 * CTX; i++) {
        double d = s1[i] > s2[i] ? s1[i] - s2[i] : s2[i] - s1[i];
        md = d > md ? d : md;
    }
    double keys = (double)NSEQ * NKV * CTX;
    printf("decode scores, 3 rows, K of halves from memory (%d MiB): head_dim in lanes %.2f ns a key, keys in "
           "lanes (transposed blocks) %.2f ns a key (largest difference %.2g)\n",
           (int)(per * NSEQ * 2 * 2 >> 20), b1 / keys * 1e9, b2 / keys * 1e9, md);
    free(kr);
    free(kt);
    free(q);
    free(s1);
    free(s2);
}

int main(void)
{
    float *q = aligned_alloc(64, ROWS * HD * 4), *k = aligned_alloc(64, NK * HD * 4);
    float *kt = aligned_alloc(64, NK * HD * 4), *s1 = aligned_alloc(64, ROWS * NK * 4);
    float *s2 = aligned_alloc(64, ROWS * NK * 4);
    srand(1);
    for (int i = 0; i < ROWS * HD; i++)
        q[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    for (int i = 0; i < NK * HD; i++)
        k[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    for (int p = 0; p < NK; p++)
        for (int i = 0; i < HD; i++)
            kt[i * NK + p] = k[p * HD + i];
    double macs = (double)ROWS * NK * HD * 200, b1 = 1e9, b2 = 1e9;
    for (int t = 0; t < 30; t++) { // alternating, best of 30 timings of 200 calls each
        double t0 = now();
        for (int j = 0; j < 200; j++)
            dots_hd_lanes(q, k, s1);
        double t1 = now();
        for (int j = 0; j < 200; j++)
            dots_keys_lanes(q, kt, s2);
        double t2 = now();
        b1 = t1 - t0 < b1 ? t1 - t0 : b1;
        b2 = t2 - t1 < b2 ? t2 - t1 : b2;
    }
    double md = 0;
    for (int i = 0; i < ROWS * NK; i++) {
        double d = s1[i] > s2[i] ? s1[i] - s2[i] : s2[i] - s1[i];
        md = d > md ? d : md;
    }
    printf("scores, %d rows x %d keys x head_dim %d, one thread: head_dim in lanes %.1f GMAC/s, keys in lanes "
           "%.1f GMAC/s (largest difference %.2g)\n",
           ROWS, NK, HD, macs / b1 / 1e9, macs / b2 / 1e9, md);
    free(q);
    free(k);
    free(kt);
    free(s1);
    free(s2);
    decode_case();
    return 0;
}
