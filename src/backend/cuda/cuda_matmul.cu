/*
 * cuda_matmul.cu - matmuls on the GPU, for every weight type: y = x · Wᵀ of a few
 * tokens against a weight streamed once per pass, plus the fused forms (a group of
 * weights sharing x with biases and residual adds; gate/up with silu), and the
 * quantization of activations that quantized weights multiply.
 *
 * The work. A block of MM_WARPS warps computes rows of one weight. Each warp takes
 * mm_rows(type) rows (2 for float weights, Q5_K and Q6_K, 4 for the other quantized
 * types: the activations it loads serve them all) and one of the weight's S K-splits
 * (cu_weight.splits: 1, 2, 4 or 8, fixed at load by cu_matmul_splits from the weight's
 * shape and the SM count, so that rows too few to fill the GPU still keep every SM
 * loading), for one token (n = 1: a kernel holding one token's sums) or MM_NT tokens a
 * pass (more tokens: more passes over the rows). A row's K is cut into C chunks of
 * mm_chunk(type) elements; split s takes chunks [s·C/S, (s+1)·C/S).
 *
 * The arithmetic, for each (row, token), whatever the number of tokens:
 * - float weights (F32, F16, BF16 as rows) multiply float32 activations: in chunk c, lane l
 *   takes the elements [256 c + 8 l, 256 c + 8 l + 8), chunks in order, one FMA chain;
 * - quantized weights multiply activations quantized as the CPU does it (Q8_0 for the
 *   legacy types, Q8_K for the K-quants, bit for bit): the products of a block are
 *   integers (dp4a), exact in any order, and only the per-block float terms
 *   accumulate. Legacy types: in chunk c (32 blocks), lane l takes block 32 c + l, so a
 *   lane adds isum · (dw · dx) for blocks l, l + 32, ... in order. K-quants: chunk c is
 *   4 super-blocks, 8 lanes each (lane 8 g + j: sub-block j of super-block 4 c + g, the
 *   8 integer parts added exactly by shuffles), lane 8 g adding the super-block's float
 *   term, super-blocks g, g + 4, ... in order;
 * - then a fixed shuffle tree over the 32 lanes gives the split's partial; the S
 *   partials meet in shared memory and are added in split order 0..S-1 (S = 1: the
 *   partial itself), then the bias, the residual add, silu · up.
 * So every output depends on the weight's shape (and, through S, the GPU's SM count,
 * which the numerics string names) and the inputs, never on the number of tokens.
 *
 * That is the CUDA-core kernel (k_matmul): one-token steps are bound by reading the
 * weights; many tokens cost multiply-adds. BF16 weights are tiled at load and run on the
 * tensor cores instead (k_matmul_tc, its own section below: 16 or 32 rows a warp, the
 * tokens as mma's N side, float32 activations as two bfloat16 parts), the same split-K and
 * partial sums; a verification span of 16 tokens then costs 1.6x one token instead of 7.8x
 * on the CUDA cores, one token 2% more (bench/RESULTS.md, session 18; RP_CUDA_BF16_MMA=0
 * keeps BF16 as rows for the CUDA cores).
 *
 * Every kernel here starts with cu_kernel_start (cuda_common.cuh: kernels may start while
 * the one ahead finishes); before it, only weights are touched (the optional L2 prefetch).
 */
#include "cuda_common.cuh"

#define MM_WARPS 8 // warps per block: up to 8 splits of the same rows
#define MM_NT 4    // tokens per pass over a row
#define MM_FILL 64 // warps per SM the splits aim for (cu_matmul_splits)
#define MM_OUT 16  // outputs a warp merges, at most: mm_rows · MM_NT

__host__ __device__ constexpr bool mm_float(int t)
{
    return t == CU_F32 || t == CU_F16 || t == CU_BF16 || t == CU_BF16_ROWS;
}

// BF16 weights run on the tensor cores (k_matmul_tc), the other types on CUDA cores.
__host__ __device__ constexpr bool mm_tc(int t)
{
    return t == CU_BF16;
}

// Rows a warp computes.
__host__ __device__ constexpr int mm_rows(int t)
{
    return mm_tc(t) ? 16 : mm_float(t) || t == CU_Q5_K || t == CU_Q6_K ? 2 : 4;
}

// Elements of a chunk: what the 32 lanes take in one step.
__host__ __device__ constexpr int mm_chunk(int t)
{
    return mm_float(t) ? 256 : 1024;
}

// Chunks whose loads are issued before their products, for nt tokens a pass: with
// mm_rows, about eight 16-byte weight loads in flight per lane (fewer when several
// tokens' sums take the registers).
__host__ __device__ constexpr int mm_unroll(int t, int nt)
{
    return t == CU_F32 ? 2 : mm_float(t) ? 4 : (t == CU_Q4_0 || t == CU_Q5_0) && nt == 1 ? 2 : 1;
}

// A warp's rows past the weight's end read its last row (their results are dropped).
__device__ __forceinline__ int64_t clamp_row(const cu_weight &W, int64_t r)
{
    return r < W.rows ? r : W.rows - 1;
}

/* ---- float weights: 8 elements of a row ---- */

struct raw8 { // as loaded: 32 bytes (F32) or 16 (v[0] only)
    uint4 v[2];
};

template <int T> __device__ __forceinline__ raw8 load8(const uint8_t *row, int64_t e)
{
    raw8 w;
    const uint4 *p = (const uint4 *)(row + e * (T == CU_F32 ? 4 : 2));
    w.v[0] = p[0];
    if (T == CU_F32)
        w.v[1] = p[1];
    return w;
}

template <int T> __device__ __forceinline__ void unpack8(const raw8 &w, float *f)
{
    uint32_t u[4] = {w.v[0].x, w.v[0].y, w.v[0].z, w.v[0].w};
    if (T == CU_F32) {
        uint32_t h[4] = {w.v[1].x, w.v[1].y, w.v[1].z, w.v[1].w};
        for (int i = 0; i < 4; i++)
            f[i] = __uint_as_float(u[i]), f[4 + i] = __uint_as_float(h[i]);
    } else {
        for (int i = 0; i < 4; i++) {
            uint16_t lo = (uint16_t)(u[i] & 0xffff), hi = (uint16_t)(u[i] >> 16);
            f[2 * i] = T == CU_F16 ? cu_h2f(lo) : cu_bf2f(lo);
            f[2 * i + 1] = T == CU_F16 ? cu_h2f(hi) : cu_bf2f(hi);
        }
    }
}

// acc[r][t] += w_r[0..8) · x[t0 + t][e, e + 8) for the R rows, an FMA chain in element order.
template <int T, int R, int NT>
__device__ __forceinline__ void dot8(const raw8 *w, const float *x, int64_t cols, int64_t e, int t0, int nt,
                                     float (*acc)[NT])
{
    float wf[R][8];
    for (int r = 0; r < R; r++)
        unpack8<T>(w[r], wf[r]);
    for (int t = 0; t < NT; t++) {
        if (t >= nt)
            break;
        const float4 *xp = (const float4 *)(x + (int64_t)(t0 + t) * cols + e);
        float4 a = xp[0], b = xp[1];
        float xv[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
        for (int r = 0; r < R; r++) {
            float s = acc[r][t];
            for (int k = 0; k < 8; k++)
                s = fmaf(wf[r][k], xv[k], s);
            acc[r][t] = s;
        }
    }
}

// Σ over chunks [c0, c1) of rows r0.. of w·x for tokens [t0, t0 + nt): this lane's part.
template <int T, int R, int NT>
__device__ __forceinline__ void dot_float(const cu_weight &W, int64_t r0, int64_t c0, int64_t c1, const float *x,
                                          int t0, int nt, float (*acc)[NT])
{
    constexpr int U = mm_unroll(T, NT);
    int lane = threadIdx.x % 32;
    int64_t cols = W.cols, end = c1 * 256 < cols ? c1 * 256 : cols;
    const uint8_t *row[R];
    for (int r = 0; r < R; r++)
        row[r] = W.plane[0] + clamp_row(W, r0 + r) * cols * (T == CU_F32 ? 4 : 2);
    for (int64_t e = c0 * 256 + 8 * lane; e < end; e += U * 256) { // U chunks' loads in flight, then their products
        raw8 w[U][R];
        for (int u = 0; u < U; u++)
            if (e + 256 * u < end)
                for (int r = 0; r < R; r++)
                    w[u][r] = load8<T>(row[r], e + 256 * u);
        for (int u = 0; u < U; u++)
            if (e + 256 * u < end)
                dot8<T, R, NT>(w[u], x, cols, e + 256 * u, t0, nt, acc);
    }
}

/* ---- quantized weights ---- */

__device__ __forceinline__ int dp4a(int a, int b, int c)
{
    return __dp4a(a, b, c);
}

// The four bytes of v (each in [0, 2·bias)) minus bias, as signed bytes: adding 128 - bias
// carries out of no byte, and flipping the top bit takes 128 off again.
__device__ __forceinline__ int minus4(int v, int bias)
{
    return (int)(((uint32_t)v + 0x01010101u * (uint32_t)(128 - bias)) ^ 0x80808080u);
}

// A legacy block of a weight as loaded: its quants (Q8_0: 8 words; Q4_0, Q5_0: 4), Q5_0's
// fifth bits, the scale.
struct lblock {
    int q[8];
    uint32_t qh;
    float d;
};

template <int T> __device__ __forceinline__ lblock load_legacy(const cu_weight &W, int64_t wb)
{
    lblock b;
    if (T == CU_Q8_0) {
        const int4 *v = (const int4 *)(W.plane[0] + wb * 32);
        int4 v0 = v[0], v1 = v[1];
        b.q[0] = v0.x, b.q[1] = v0.y, b.q[2] = v0.z, b.q[3] = v0.w;
        b.q[4] = v1.x, b.q[5] = v1.y, b.q[6] = v1.z, b.q[7] = v1.w;
    } else {
        int4 v = *(const int4 *)(W.plane[0] + wb * 16);
        b.q[0] = v.x, b.q[1] = v.y, b.q[2] = v.z, b.q[3] = v.w;
    }
    if (T == CU_Q5_0)
        b.qh = *(const uint32_t *)(W.plane[1] + wb * 4);
    b.d = cu_h2f(((const uint16_t *)W.plane[T == CU_Q5_0 ? 2 : 1])[wb]);
    return b;
}

// The integer dot of a legacy block with a token's Q8_0 block (xs: its 32 int8).
template <int T> __device__ __forceinline__ int legacy_dot(const lblock &b, const int *xs)
{
    int s = 0;
    if (T == CU_Q8_0) {
        for (int i = 0; i < 8; i++)
            s = dp4a(b.q[i], xs[i], s);
    } else {
        for (int i = 0; i < 4; i++) {
            int lo = b.q[i] & 0x0F0F0F0F, hi = (b.q[i] >> 4) & 0x0F0F0F0F;
            if (T == CU_Q5_0) {
                uint32_t bl = (b.qh >> (4 * i)) & 0xF, bh = (b.qh >> (16 + 4 * i)) & 0xF;
                lo |= (int)(((bl & 1) << 4) | ((bl & 2) << 11) | ((bl & 4) << 18) | ((bl & 8) << 25));
                hi |= (int)(((bh & 1) << 4) | ((bh & 2) << 11) | ((bh & 4) << 18) | ((bh & 8) << 25));
            }
            int bias = T == CU_Q5_0 ? 16 : 8;
            s = dp4a(minus4(lo, bias), xs[i], s);
            s = dp4a(minus4(hi, bias), xs[4 + i], s);
        }
    }
    return s;
}

template <int T, int R, int NT>
__device__ __forceinline__ void dot_legacy(const cu_weight &W, int64_t r0, int64_t c0, int64_t c1, const cu_qact &qa,
                                           int t0, int nt, float (*acc)[NT])
{
    constexpr int U = mm_unroll(T, NT);
    int lane = threadIdx.x % 32;
    int64_t nb = W.cols / 32, wrow[R];
    for (int r = 0; r < R; r++)
        wrow[r] = clamp_row(W, r0 + r) * nb;
    for (int64_t c = c0; c < c1; c += U) { // U chunks' loads in flight, then their products
        lblock w[U][R];
#pragma unroll
        for (int u = 0; u < U; u++)
            if (c + u < c1 && 32 * (c + u) + lane < nb)
#pragma unroll
                for (int r = 0; r < R; r++)
                    w[u][r] = load_legacy<T>(W, wrow[r] + 32 * (c + u) + lane);
#pragma unroll
        for (int u = 0; u < U; u++) {
            int64_t k = 32 * (c + u) + lane;
            if (c + u >= c1 || k >= nb)
                continue;
#pragma unroll
            for (int t = 0; t < NT; t++) {
                if (t >= nt)
                    break;
                int64_t xb = (int64_t)(t0 + t) * nb + k;
                const int4 *xv = (const int4 *)(qa.qs + xb * 32);
                int4 x0 = xv[0], x1 = xv[1];
                int xs[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
                float dx = qa.d[xb];
                for (int r = 0; r < R; r++) { // s += isum * (dw * dx)
                    int isum = legacy_dot<T>(w[u][r], xs);
                    acc[r][t] = __fadd_rn(acc[r][t], __fmul_rn((float)isum, __fmul_rn(w[u][r].d, dx)));
                }
            }
        }
    }
}

// One lane's sub-block j (32 elements) of a K-quant super-block, as loaded: the 32
// quants (Q6_K: minus 32) as signed bytes, its scale and min (Q6_K: its two 16-element
// scales), the super-block's d and dmin.
struct ksub {
    int v[8];
    int sc, sc1, m;
    float d, dmin;
};

template <int T> __device__ __forceinline__ ksub load_ksub(const cu_weight &W, int64_t wsb, int j)
{
    ksub s;
    if (T == CU_Q4_K || T == CU_Q5_K) {
        bool five = T == CU_Q5_K;
        const uint8_t *head = W.plane[five ? 2 : 1] + wsb * 16;
        cu_q4k_scale_min(j, head + 4, &s.sc, &s.m);
        s.d = cu_h2f(head[0] | head[1] << 8), s.dmin = cu_h2f(head[2] | head[3] << 8);
        const int4 *qv = (const int4 *)(W.plane[0] + wsb * 128 + 32 * (j / 2));
        int4 q0 = qv[0], q1 = qv[1];
        int qs[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
        int hs[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        if (five) {
            const int4 *hv = (const int4 *)(W.plane[1] + wsb * 32);
            int4 h0 = hv[0], h1 = hv[1];
            int hh[8] = {h0.x, h0.y, h0.z, h0.w, h1.x, h1.y, h1.z, h1.w};
            for (int i = 0; i < 8; i++)
                hs[i] = ((hh[i] >> j) & 0x01010101) << 4;
        }
        for (int i = 0; i < 8; i++)
            s.v[i] = ((qs[i] >> (4 * (j & 1))) & 0x0F0F0F0F) | hs[i];
    } else { // Q6_K
        int c = j / 4, q4 = j % 4;
        const int4 *lv = (const int4 *)(W.plane[0] + wsb * 128 + 64 * c + (q4 & 1) * 32);
        const int4 *hv = (const int4 *)(W.plane[1] + wsb * 64 + 32 * c);
        int4 l0 = lv[0], l1 = lv[1], h0 = hv[0], h1 = hv[1];
        int ls[8] = {l0.x, l0.y, l0.z, l0.w, l1.x, l1.y, l1.z, l1.w};
        int hs[8] = {h0.x, h0.y, h0.z, h0.w, h1.x, h1.y, h1.z, h1.w};
        for (int i = 0; i < 8; i++)
            s.v[i] = minus4(((ls[i] >> (q4 < 2 ? 0 : 4)) & 0x0F0F0F0F) | (((hs[i] >> (2 * q4)) & 0x03030303) << 4), 32);
        const int8_t *scales = (const int8_t *)W.plane[2] + wsb * 16 + 8 * c + 2 * q4;
        s.sc = scales[0], s.sc1 = scales[1];
        s.d = cu_h2f(((const uint16_t *)W.plane[3])[wsb]);
    }
    return s;
}

// A sub-block against token t's Q8_K sub-block (xs: 32 int8; bs: the super-block's 16
// sums): *sumi = sc · Σ q·y and *summ = m · Σ y (Q4_K, Q5_K; Q6_K: its two 16-element
// scales, no m).
template <int T>
__device__ __forceinline__ void ksub_dot(const ksub &s, const int *xs, const int16_t *bs, int j, int *sumi, int *summ)
{
    if (T == CU_Q4_K || T == CU_Q5_K) {
        int dot = 0;
        for (int i = 0; i < 8; i++)
            dot = dp4a(s.v[i], xs[i], dot);
        *sumi = s.sc * dot;
        *summ = s.m * (bs[2 * j] + bs[2 * j + 1]);
    } else {
        int dot0 = 0, dot1 = 0;
        for (int i = 0; i < 4; i++)
            dot0 = dp4a(s.v[i], xs[i], dot0), dot1 = dp4a(s.v[4 + i], xs[4 + i], dot1);
        *sumi = s.sc * dot0 + s.sc1 * dot1;
        *summ = 0;
    }
}

template <int T, int R, int NT>
__device__ __forceinline__ void dot_kquant(const cu_weight &W, int64_t r0, int64_t c0, int64_t c1, const cu_qact &qa,
                                           int t0, int nt, float (*acc)[NT])
{
    int lane = threadIdx.x % 32, j = lane % 8, grp = lane / 8;
    int64_t nsb = W.cols / 256, wrow[R];
    for (int r = 0; r < R; r++)
        wrow[r] = clamp_row(W, r0 + r) * nsb;
    for (int64_t c = c0; c < c1; c++) {
        int64_t k = 4 * c + grp;
        bool on = k < nsb;
        ksub w[R];
        if (on)
            for (int r = 0; r < R; r++)
                w[r] = load_ksub<T>(W, wrow[r] + k, j);
        for (int t = 0; t < NT; t++) {
            if (t >= nt)
                break;
            int64_t xsb = (int64_t)(t0 + t) * nsb + (on ? k : 0);
            int xs[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            const int16_t *bs = qa.bsums + xsb * 16;
            float yd = 0;
            if (on) {
                const int4 *xv = (const int4 *)(qa.qs + xsb * 256 + 32 * j);
                int4 x0 = xv[0], x1 = xv[1];
                xs[0] = x0.x, xs[1] = x0.y, xs[2] = x0.z, xs[3] = x0.w;
                xs[4] = x1.x, xs[5] = x1.y, xs[6] = x1.z, xs[7] = x1.w;
                yd = qa.d[xsb];
            }
            for (int r = 0; r < R; r++) {
                int sumi = 0, summ = 0;
                if (on)
                    ksub_dot<T>(w[r], xs, bs, j, &sumi, &summ);
                for (int off = 4; off > 0; off >>= 1) { // the super-block's integers, exactly
                    sumi += __shfl_xor_sync(0xffffffffu, sumi, off);
                    if (T != CU_Q6_K)
                        summ += __shfl_xor_sync(0xffffffffu, summ, off);
                }
                if (on && j == 0) {
                    if (T == CU_Q6_K) {
                        acc[r][t] = __fadd_rn(acc[r][t], __fmul_rn(__fmul_rn(yd, w[r].d), (float)sumi));
                    } else {
                        float d = __fmul_rn(yd, w[r].d), dmin = __fmul_rn(yd, w[r].dmin);
                        acc[r][t] =
                            __fadd_rn(acc[r][t], __fsub_rn(__fmul_rn(d, (float)sumi), __fmul_rn(dmin, (float)summ)));
                    }
                }
            }
        }
    }
}

/* ---- the kernel ---- */

// The partial sums of R rows over chunks [c0, c1) for tokens [t0, t0 + nt), in every lane.
template <int T, int NT>
__device__ __forceinline__ void split_dot(const cu_matmul_args &a, const cu_weight &W, int64_t r0, int64_t c0,
                                          int64_t c1, int t0, int nt, float (*acc)[NT])
{
    constexpr int R = mm_rows(T);
    for (int r = 0; r < R; r++)
        for (int t = 0; t < NT; t++)
            acc[r][t] = 0;
    if (mm_float(T))
        dot_float<T, R, NT>(W, r0, c0, c1, a.x, t0, nt, acc);
    else if (T == CU_Q8_0 || T == CU_Q4_0 || T == CU_Q5_0)
        dot_legacy<T, R, NT>(W, r0, c0, c1, a.qa, t0, nt, acc);
    else
        dot_kquant<T, R, NT>(W, r0, c0, c1, a.qa, t0, nt, acc);
    for (int r = 0; r < R; r++)
        for (int t = 0; t < NT; t++)
            for (int off = 16; off > 0; off >>= 1)
                acc[r][t] += __shfl_xor_sync(0xffffffffu, acc[r][t], off);
}

// Blocks of the grid that a weight's rows take (its splits share a block), with a warp
// taking rt times mm_rows (the tensor-core kernel's row tiles; 1 elsewhere).
__host__ __device__ __forceinline__ int64_t mm_blocks(const cu_weight &W, int rt = 1)
{
    int64_t rows = (int64_t)(MM_WARPS / W.splits) * mm_rows(W.type) * rt;
    return (W.rows + rows - 1) / rows;
}

// Member i of the group, read with constant indices (a run-time index into the kernel's
// parameters would copy them to local memory).
template <typename X> __device__ __forceinline__ X pick(int i, const X *v)
{
    return i == 0 ? v[0] : i == 1 ? v[1] : i == 2 ? v[2] : v[3];
}

// Output k of a row group from its S warps' partials (p: the first split's warp, the
// others after it), added in split order.
template <int N> __device__ __forceinline__ float split_sum(const float (*p)[N], int S, int k)
{
    float v = p[0][k];
    for (int s = 1; s < S; s++)
        v = __fadd_rn(v, p[s][k]);
    return v;
}

// The group member this block computes (its blocks follow the members before it) and the
// block's index among that member's (blocks of mm_blocks(W, rt)).
__device__ __forceinline__ int mm_member(const cu_matmul_args &a, int64_t *b, int rt = 1)
{
    int i = 0, members = a.glu ? 1 : a.count;
    for (int k = 0; k < CU_MM_GROUP - 1; k++)
        if (i == k && i < members - 1 && *b >= mm_blocks(pick(k, a.w), rt))
            *b -= mm_blocks(pick(k, a.w), rt), i++;
    return i;
}

// Writes output (row gr, token tok) of member i from its sum v over the splits (glu: v the
// gate's, u the up's): the bias, the residual add, silu · up.
__device__ __forceinline__ void mm_out(const cu_matmul_args &a, int i, int64_t rows, int64_t gr, int tok, float v,
                                       float u)
{
    int64_t at = (int64_t)tok * rows + gr;
    if (a.glu) {
        a.y[1][at] = u;
        a.y[0][at] = __fmul_rn(__fdiv_rn(v, __fadd_rn(1.0f, expf(-v))), u);
        return;
    }
    const float *bias = pick(i, a.bias);
    float *residual = pick(i, a.residual);
    if (bias)
        v = __fadd_rn(v, bias[gr]);
    pick(i, a.y)[at] = v;
    if (residual)
        residual[at] = __fadd_rn(residual[at], v);
}

// Bytes of a row, and of a chunk, in a weight's first plane (its values or quants).
template <int T> __device__ __forceinline__ int64_t plane0_row_bytes(int64_t cols)
{
    return T == CU_F32 ? 4 * cols : mm_float(T) ? 2 * cols : T == CU_Q8_0 ? cols : cols / 2;
}

#define MM_PREFETCH 1024 // bytes of each row's split brought into L2 while the kernel before finishes

// Row r's first MM_PREFETCH bytes of chunks [c0, c1) into L2 (weights only: before cu_kernel_start).
template <int T> __device__ __forceinline__ void mm_prefetch(const cu_weight &W, int64_t r, int64_t c0, int64_t c1)
{
    int64_t row = plane0_row_bytes<T>(W.cols), chunk = plane0_row_bytes<T>(mm_chunk(T));
    int64_t from = c0 * chunk, to = c1 * chunk < row ? c1 * chunk : row;
    int64_t bytes = (to - from < MM_PREFETCH ? to - from : MM_PREFETCH) & ~(int64_t)15;
    if (bytes > 0)
        cu_prefetch_l2(W.plane[0] + r * row + from, (uint32_t)bytes);
}

// Blocks an SM at least: 3 (at most 80 registers a thread, 24 warps an SM) for the
// one-token kernels whose sums fit so without spilling (float weights, Q8_0, Q6_K), else 2
// (128 registers, 16 warps). A one-token matmul waits on its weight loads (ncu: three
// quarters of its warps' cycles), so more warps keep more bytes in flight (bench/RESULTS.md,
// session 15).
__host__ __device__ constexpr int mm_min_blocks(int t, int nt)
{
    return nt == 1 && (mm_float(t) || t == CU_Q8_0 || t == CU_Q6_K) ? 3 : 2;
}

template <int T, int NT>
__global__ void __launch_bounds__(MM_WARPS * 32, mm_min_blocks(T, NT)) k_matmul(cu_matmul_args a)
{
    constexpr int R = mm_rows(T);
    static_assert(R * NT <= MM_OUT, "a warp's outputs fit its partials");
    __shared__ float part[2][MM_WARPS][MM_OUT]; // each warp's partials (gate, up), [r · NT + t]
    int64_t b = blockIdx.x; // block of the group's union, then of member i
    int i = mm_member(a, &b);
    const cu_weight W = pick(i, a.w);
    int S = W.splits, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int s = warp % S;                                 // this warp's split
    int64_t r0 = (b * (MM_WARPS / S) + warp / S) * R; // and first row
    int64_t chunks = (W.cols + mm_chunk(T) - 1) / mm_chunk(T), rows = W.rows;
    int64_t c0 = s * chunks / S, c1 = (s + 1) * chunks / S;
    bool active = r0 < rows; // (the block's warps all reach its barriers)
    if (a.prefetch && active && lane < R) {
        mm_prefetch<T>(W, clamp_row(W, r0 + lane), c0, c1);
        if (a.glu)
            mm_prefetch<T>(a.w[1], clamp_row(W, r0 + lane), c0, c1);
    }
    cu_kernel_start();
    for (int t0 = 0; t0 < a.n; t0 += NT) {
        int nt = a.n - t0 < NT ? a.n - t0 : NT;
        if (active) {
            float acc[R][NT];
            split_dot<T, NT>(a, W, r0, c0, c1, t0, nt, acc);
            if (lane == 0)
                for (int r = 0; r < R; r++)
                    for (int t = 0; t < NT; t++)
                        part[0][warp][r * NT + t] = acc[r][t];
            if (a.glu) {
                split_dot<T, NT>(a, a.w[1], r0, c0, c1, t0, nt, acc);
                if (lane == 0)
                    for (int r = 0; r < R; r++)
                        for (int t = 0; t < NT; t++)
                            part[1][warp][r * NT + t] = acc[r][t];
            }
        }
        __syncthreads();
        int r = lane / NT, t = lane % NT; // the output this lane merges
        if (active && s == 0 && lane < R * NT && r0 + r < rows && t < nt)
            mm_out(a, i, rows, r0 + r, t0 + t, split_sum(part[0] + warp, S, lane),
                   a.glu ? split_sum(part[1] + warp, S, lane) : 0.0f);
        __syncthreads(); // the partials are read before the next pass writes them
    }
}

/* ---- BF16 weights on the tensor cores ---- */

// d += a · b on the tensor cores: a (16 x 16, bfloat16) the weight tile's fragment, b
// (16 x 8) a token tile's fragment of one part of x, d (16 x 8) float32. Each output
// element depends on its row of a, its column of b and its own d alone, so a token's
// result does not depend on the tokens beside it.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint4 &a, uint32_t b0, uint32_t b1)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b0), "r"(b1));
}

// The pair (a, b) of x as P bfloat16x2 parts (a in the low half): part 0 is (a, b) rounded
// to bfloat16, each next part the rounding of what the parts before it left (the
// subtractions are exact). Two parts carry 16 of x's 24 bits (a relative error under
// 2^-17), three all of them; a product with a bfloat16 weight is exact in float32.
template <int P> __device__ __forceinline__ void tc_parts(float a, float b, uint32_t (&out)[P])
{
#pragma unroll
    for (int p = 0; p < P; p++) {
        __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
        out[p] = *(uint32_t *)&h;
        a = __fsub_rn(a, __uint_as_float(out[p] << 16));
        b = __fsub_rn(b, __uint_as_float(out[p] & 0xffff0000u));
    }
}

// What a warp holds of U consecutive k-tiles (a stage): the A fragments of its RT row tiles
// of each of the WN weights (glu's gate and up share x), and for each of its NTT token
// tiles lane 4g + q's four values of token 8 tt + g: x[k, k + 1, k + 8, k + 9], k = 16 kb + 2q.
// (Reading x tile by tile through L1 as the products run instead, with the registers given
// to more weight loads, measured slower: bench/RESULTS.md, session 18.)
template <int WN, int RT, int NTT, int U> struct tc_stage {
    uint4 a[WN][RT][U];
    float4 x[NTT][U];
};

// A stage's weight fragments: tiles kb .. kb + U - 1 of those before k1 (A[w][r]: lane's 16
// bytes of tile 0 of row tile r of weight w). Weights only, so it may run before the wait
// for the kernel ahead.
template <int WN, int RT, int NTT, int U>
__device__ __forceinline__ void tc_load_a(tc_stage<WN, RT, NTT, U> &st, const uint4 *const (&A)[WN][RT], int kb,
                                          int k1)
{
#pragma unroll
    for (int u = 0; u < U; u++)
        if (kb + u < k1)
#pragma unroll
            for (int w = 0; w < WN; w++)
#pragma unroll
                for (int r = 0; r < RT; r++)
                    st.a[w][r][u] = __ldcs(A[w][r] + (kb + u) * 32);
}

// A stage's activations (xr[tt]: the row of lane's token in token tile tt, NULL past n).
template <int WN, int RT, int NTT, int U>
__device__ __forceinline__ void tc_load_x(tc_stage<WN, RT, NTT, U> &st, const float *const (&xr)[NTT], int cols,
                                          int kb, int k1)
{
    int q = threadIdx.x % 4;
#pragma unroll
    for (int u = 0; u < U; u++) {
#pragma unroll
        for (int tt = 0; tt < NTT; tt++) {
            float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            int k = 16 * (kb + u) + 2 * q;
            if (kb + u < k1 && xr[tt]) {
                float2 lo = __ldg((const float2 *)(xr[tt] + k)), hi = make_float2(0.0f, 0.0f);
                if (k + 8 < cols)
                    hi = __ldg((const float2 *)(xr[tt] + k + 8));
                v = make_float4(lo.x, lo.y, hi.x, hi.y);
            }
            st.x[tt][u] = v;
        }
    }
}

// acc[w][r][tt] += the stage's tiles before k1 times the parts of x, each tile's parts the
// last first (the smallest, so each product adds into a sum it can change).
template <int WN, int RT, int NTT, int U, int P>
__device__ __forceinline__ void tc_mma(const tc_stage<WN, RT, NTT, U> &st, int kb, int k1,
                                       float (&acc)[WN][RT][NTT][4])
{
#pragma unroll
    for (int u = 0; u < U; u++) {
        if (kb + u >= k1)
            break;
        uint32_t b0[NTT][P], b1[NTT][P];
#pragma unroll
        for (int tt = 0; tt < NTT; tt++) {
            tc_parts<P>(st.x[tt][u].x, st.x[tt][u].y, b0[tt]);
            tc_parts<P>(st.x[tt][u].z, st.x[tt][u].w, b1[tt]);
        }
#pragma unroll
        for (int w = 0; w < WN; w++)
#pragma unroll
            for (int r = 0; r < RT; r++)
#pragma unroll
                for (int tt = 0; tt < NTT; tt++)
#pragma unroll
                    for (int p = P - 1; p >= 0; p--)
                        mma_bf16(acc[w][r][tt], st.a[w][r][u], b0[tt][p], b1[tt][p]);
    }
}

// A token tile's rows of x for lane 4g + q: token t0 + 8 tt + g, NULL past n.
template <int NTT>
__device__ __forceinline__ void tc_rows(const float *x, int cols, int t0, int n, const float *(&xr)[NTT])
{
    int g = (threadIdx.x % 32) / 4;
#pragma unroll
    for (int tt = 0; tt < NTT; tt++) {
        int t = t0 + 8 * tt + g;
        xr[tt] = t < n ? x + (int64_t)t * cols : NULL;
    }
}

// Tiles a stage takes: four 16-byte weight loads a lane (fewer for two token tiles, whose x
// takes the registers), so with the next stage's loads issued before a stage's products a
// lane keeps 4 to 8 in flight at two blocks an SM without spilling.
__host__ __device__ constexpr int tc_unroll(int wn, int rt, int ntt)
{
    return 4 / (wn * rt * ntt) > 0 ? 4 / (wn * rt * ntt) : 1;
}

// One pass of a warp over tiles [k0, k1) of its RT row tiles (from rb0) for the tokens of
// xr: st0 holds the first stage's weights already (asked for before the kernel's wait).
// Two stages alternate: one's loads are in flight while the other's products run.
template <int NTT, int WN, int RT, int P, int U>
__device__ __forceinline__ void tc_warp(const uint4 *const (&A)[WN][RT], int cols, int k0, int k1,
                                        const float *const (&xr)[NTT], tc_stage<WN, RT, NTT, U> &st0,
                                        float (&acc)[WN][RT][NTT][4])
{
    tc_stage<WN, RT, NTT, U> st1;
    tc_load_x(st0, xr, cols, k0, k1);
    for (int kb = k0; kb < k1; kb += 2 * U) {
        tc_load_a(st1, A, kb + U, k1);
        tc_load_x(st1, xr, cols, kb + U, k1);
        tc_mma<WN, RT, NTT, U, P>(st0, kb, k1, acc);
        if (kb + 2 * U < k1) {
            tc_load_a(st0, A, kb + 2 * U, k1);
            tc_load_x(st0, xr, cols, kb + 2 * U, k1);
        }
        tc_mma<WN, RT, NTT, U, P>(st1, kb + U, k1, acc);
    }
}

// A block's share of k_matmul_tc's work (an item: block b of the group's union) and this
// warp's part of it: member i, split s of S, row tiles rb0 .. rb0 + RT - 1, k-tiles
// [k0, k1), and A[w][r] the lane's 16 bytes of tile 0 of row tile r of weight w (row tiles
// past the end read the last one; their results are dropped).
template <int WN, int RT> struct tc_item {
    int i, s, S, rb0, rows, k0, k1;
    const uint4 *A[WN][RT];
};

template <int WN, int RT> __device__ __forceinline__ void tc_item_at(const cu_matmul_args &a, int64_t b, tc_item<WN, RT> &it)
{
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    it.i = WN == 2 ? 0 : mm_member(a, &b, RT);
    const cu_weight W = pick(it.i, a.w);
    it.S = W.splits, it.s = warp % it.S, it.rows = (int)W.rows;
    it.rb0 = (int)(b * (MM_WARPS / it.S) + warp / it.S) * RT;
    int RB = (int)((W.rows + 15) / 16), cols = (int)W.cols, chunks = (cols + 255) / 256, KB = (int)cu_tiles_k(cols);
    int k1 = 16 * ((it.s + 1) * chunks / it.S);
    it.k0 = 16 * (it.s * chunks / it.S), it.k1 = k1 < KB ? k1 : KB;
#pragma unroll
    for (int w = 0; w < WN; w++)
#pragma unroll
        for (int r = 0; r < RT; r++) {
            int rb = it.rb0 + r < RB ? it.rb0 + r : RB - 1;
            it.A[w][r] = (const uint4 *)(w == 0 ? W.plane[0] : a.w[1].plane[0]) + (size_t)rb * KB * 32 + lane;
        }
}

// As k_matmul, for BF16 weights on the tensor cores: a warp takes RT row tiles (16 RT rows)
// of one K-split (the splits and their tiles as for the other types: 16 tiles a chunk),
// tokens 8 NTT a pass, each k-tile's x split into P parts once for all RT row tiles. RT
// only says which rows a warp takes, never how a row is summed, so the launcher picks it
// for speed (cu_matmul_rt). The partials meet in shared memory and are added in split
// order. A token's arithmetic is the same for any number of tokens and any RT: tiles in
// order within a split, each tile's parts the last first, then the splits in order.
// A block takes items blockIdx.x, + gridDim.x, ... (a.items of them): with a grid smaller
// than the items (a.grid, cu_tc_grid) its warps keep streaming from one item into the next,
// the next pass's first weights asked for before this pass's partials meet. Which block
// takes an item never changes a result.
template <int NTT, int WN, int RT, int P>
__global__ void __launch_bounds__(MM_WARPS * 32, 2) k_matmul_tc(cu_matmul_args a)
{
    constexpr int TOK = 8 * NTT, U = tc_unroll(WN, RT, NTT), ROWS = 16 * RT;
    __shared__ float part[WN][MM_WARPS][ROWS * TOK]; // each warp's partials, [row · TOK + token]
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4, cols = (int)a.w[0].cols;
    tc_item<WN, RT> it;
    tc_item_at(a, blockIdx.x, it);
    tc_stage<WN, RT, NTT, U> st0;
    tc_load_a(st0, it.A, it.k0, it.k1); // weights only: before the wait
    cu_kernel_start();
    for (int64_t b = blockIdx.x; b < a.items; b += gridDim.x) {
        for (int t0 = 0; t0 < a.n; t0 += TOK) {
            const float *xr[NTT];
            tc_rows<NTT>(a.x, cols, t0, a.n, xr);
            float acc[WN][RT][NTT][4] = {};
            tc_warp<NTT, WN, RT, P, U>(it.A, cols, it.k0, it.k1, xr, st0, acc);
            tc_item<WN, RT> nx = it; // the next pass's: this item's again, or the next item's
            bool more = t0 + TOK < a.n;
            if (!more && b + gridDim.x < a.items)
                tc_item_at(a, b + gridDim.x, nx), more = true;
            if (more) // st0 is free once tc_warp returns
                tc_load_a(st0, nx.A, nx.k0, nx.k1);
#pragma unroll
            for (int w = 0; w < WN; w++) // lane 4g + q holds rows g, g + 8 and tokens 2q, 2q + 1 of each tile
#pragma unroll
                for (int r = 0; r < RT; r++)
#pragma unroll
                    for (int tt = 0; tt < NTT; tt++) {
                        float *p = part[w][warp] + (16 * r + g) * TOK + 8 * tt + 2 * q;
                        p[0] = acc[w][r][tt][0], p[1] = acc[w][r][tt][1];
                        p[8 * TOK] = acc[w][r][tt][2], p[8 * TOK + 1] = acc[w][r][tt][3];
                    }
            __syncthreads();
            int r0 = 16 * it.rb0;
            if (it.s == 0 && r0 < it.rows)
                for (int k = lane; k < ROWS * TOK; k += 32) {
                    int r = k / TOK, t = k % TOK;
                    if (r0 + r >= it.rows || t0 + t >= a.n)
                        continue;
                    mm_out(a, it.i, it.rows, r0 + r, t0 + t, split_sum(part[0] + warp, it.S, k),
                           WN == 2 ? split_sum(part[WN - 1] + warp, it.S, k) : 0.0f);
                }
            __syncthreads(); // the partials are read before the next pass writes them
            it = nx;
        }
    }
}
// One thread a lane of a tile: its four words, each two elements of a row (zeros past the
// matrix), as cu_tile_offset places them.
__global__ void k_tile_bf16(const uint16_t *raw, uint4 *tiles, int64_t rows, int64_t cols, int64_t n)
{
    cu_kernel_start();
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    int64_t tile = i / 32, KB = cu_tiles_k(cols), rb = tile / KB, kb = tile % KB;
    int lane = (int)(i % 32), g = lane / 4, q = lane % 4;
    uint32_t w[4];
    for (int word = 0; word < 4; word++) {
        int64_t r = 16 * rb + g + 8 * (word & 1), e = 16 * kb + 2 * q + 8 * (word >> 1);
        uint32_t lo = r < rows && e < cols ? raw[r * cols + e] : 0;
        uint32_t hi = r < rows && e + 1 < cols ? raw[r * cols + e + 1] : 0;
        w[word] = lo | hi << 16;
    }
    tiles[i] = make_uint4(w[0], w[1], w[2], w[3]);
}

extern "C" size_t cu_tiled_bytes(int64_t rows, int64_t cols)
{
    return (size_t)((rows + 15) / 16) * (size_t)cu_tiles_k(cols) * 512;
}

extern "C" cudaError_t cu_launch_tile_bf16(const uint16_t *raw, uint8_t *tiles, int64_t rows, int64_t cols,
                                           cudaStream_t s)
{
    int64_t n = (int64_t)(cu_tiled_bytes(rows, cols) / 16);
    return cu_enqueue(k_tile_bf16, dim3((unsigned)((n + 255) / 256)), 256, s, raw, (uint4 *)tiles, rows, cols, n);
}

/* ---- launching ---- */

extern "C" int cu_matmul_splits(int type, int64_t rows, int64_t cols, int n_sm)
{
    int64_t warps = (rows + mm_rows(type) - 1) / mm_rows(type);
    int64_t chunks = (cols + mm_chunk(type) - 1) / mm_chunk(type), least = mm_float(type) && !mm_tc(type) ? 2 : 1;
    int s = 1;
    while (2 * s <= MM_WARPS && warps * s < (int64_t)MM_FILL * n_sm && chunks >= 2 * s * least)
        s *= 2;
    return s;
}

// The K-splits of a group of tiled BF16 weights multiplied together (the members of one
// matmul_group): when their blocks at their own splits fill the GPU's 2 blocks an SM once
// and a part of a second time (measured for q/k/v of a 7B: 288 blocks on 264 slots, 20.4
// us; at 4 splits 144 blocks, 16.0 us), the largest smaller split that fits them in one;
// otherwise each keeps its own. A function of the shapes and the SM count alone.
extern "C" int cu_group_splits(const cu_weight *const *w, int n, int n_sm)
{
    int own = MM_WARPS;
    int64_t blocks = 0;
    for (int i = 0; i < n; i++) {
        if (w[i]->type != CU_BF16)
            return 0;
        own = w[i]->splits < own ? w[i]->splits : own;
        blocks += mm_blocks(*w[i]);
    }
    int64_t slots = 2 * (int64_t)n_sm;
    if (blocks <= slots || blocks > 2 * slots)
        return 0;
    for (int s = own / 2; s >= 1; s /= 2) {
        int64_t b = 0;
        for (int i = 0; i < n; i++)
            b += (w[i]->rows + (MM_WARPS / s) * 16 - 1) / ((MM_WARPS / s) * 16);
        if (b <= slots)
            return s;
    }
    return 0;
}

// Row tiles a warp of k_matmul_tc takes: a->rt when set (RP_CUDA_TC_RT, rp_cuda_tc_rt), else
// one for one token tile and two for two (x's parts, built per tile, then serve both).
static int tc_rt(const cu_matmul_args *a, int ntt)
{
    return a->rt > 0 ? a->rt : ntt;
}

template <int NTT, int WN, int P> static cudaError_t launch_tc(const cu_matmul_args *a, cudaStream_t s)
{
    int rt = tc_rt(a, NTT);
    cu_matmul_args b = *a;
    b.items = 0;
    for (int i = 0; i < (a->glu ? 1 : a->count); i++)
        b.items += mm_blocks(a->w[i], rt);
    dim3 grid((unsigned)(a->grid > 0 && a->grid < b.items ? a->grid : b.items));
    if (rt == 2)
        return cu_enqueue(k_matmul_tc<NTT, WN, 2, P>, grid, MM_WARPS * 32, s, b);
    return cu_enqueue(k_matmul_tc<NTT, WN, 1, P>, grid, MM_WARPS * 32, s, b);
}

template <int NTT> static cudaError_t launch_tc_parts(const cu_matmul_args *a, cudaStream_t s)
{
    if (cu_tc_parts == 3)
        return a->glu ? launch_tc<NTT, 2, 3>(a, s) : launch_tc<NTT, 1, 3>(a, s);
    return a->glu ? launch_tc<NTT, 2, 2>(a, s) : launch_tc<NTT, 1, 2>(a, s);
}

template <int NT> static cudaError_t launch_matmul(const cu_matmul_args *a, cudaStream_t s)
{
    if (a->w[0].type == CU_BF16) // one token tile for up to 8 tokens, else two a pass
        return a->n <= 8 ? launch_tc_parts<1>(a, s) : launch_tc_parts<2>(a, s);
    int64_t blocks = 0;
    for (int i = 0; i < (a->glu ? 1 : a->count); i++)
        blocks += mm_blocks(a->w[i]);
    unsigned nb = (unsigned)blocks;
    switch (a->w[0].type) {
    case CU_F32: return cu_enqueue(k_matmul<CU_F32, NT>, dim3(nb), MM_WARPS * 32, s, *a);
    case CU_F16: return cu_enqueue(k_matmul<CU_F16, NT>, dim3(nb), MM_WARPS * 32, s, *a);
    case CU_BF16_ROWS: return cu_enqueue(k_matmul<CU_BF16_ROWS, NT>, dim3(nb), MM_WARPS * 32, s, *a);
    case CU_Q8_0: return cu_enqueue(k_matmul<CU_Q8_0, NT>, dim3(nb), MM_WARPS * 32, s, *a);
    case CU_Q4_0: return cu_enqueue(k_matmul<CU_Q4_0, NT>, dim3(nb), MM_WARPS * 32, s, *a);
    case CU_Q5_0: return cu_enqueue(k_matmul<CU_Q5_0, NT>, dim3(nb), MM_WARPS * 32, s, *a);
    case CU_Q4_K: return cu_enqueue(k_matmul<CU_Q4_K, NT>, dim3(nb), MM_WARPS * 32, s, *a);
    case CU_Q5_K: return cu_enqueue(k_matmul<CU_Q5_K, NT>, dim3(nb), MM_WARPS * 32, s, *a);
    case CU_Q6_K: return cu_enqueue(k_matmul<CU_Q6_K, NT>, dim3(nb), MM_WARPS * 32, s, *a);
    default: return cudaErrorInvalidValue;
    }
}

// One token: a kernel that holds one token's sums (fewer registers); more: MM_NT a pass.
// A token's arithmetic is the same in both.
extern "C" cudaError_t cu_launch_matmul(const void *args, cudaStream_t s)
{
    const cu_matmul_args *a = (const cu_matmul_args *)args;
    return a->n == 1 ? launch_matmul<1>(a, s) : launch_matmul<MM_NT>(a, s);
}

/* ---- quantizing activations (quant.c's rp_quant_row_q8_0 / _q8_K, bit for bit) ---- */

// One warp per (token, Q8_0 block): lane j takes element j.
__global__ void k_quant_q8_0(const float *x, cu_qact qa, int64_t n_blocks)
{
    cu_kernel_start();
    int64_t gb = (int64_t)blockIdx.x * 4 + threadIdx.x / 32; // (token, block) index
    if (gb >= n_blocks)
        return;
    int lane = threadIdx.x % 32;
    float v = x[gb * 32 + lane];
    float amax = fabsf(v);
    for (int off = 16; off > 0; off >>= 1)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    float d = __fdiv_rn(amax, 127.0f);
    float id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
    qa.qs[gb * 32 + lane] = (int8_t)roundf(__fmul_rn(v, id));
    if (lane == 0) // the dots use the scale as stored: rounded to fp16
        qa.d[gb] = __half2float(__float2half_rn(d));
}

// One block of 256 threads per (token, super-block): thread j takes element j.
__global__ void k_quant_q8_K(const float *x, cu_qact qa)
{
    cu_kernel_start();
    __shared__ float sa[256];
    __shared__ int si[256];
    __shared__ int8_t sq[256];
    int64_t sb = blockIdx.x;
    int j = threadIdx.x;
    float v = x[sb * 256 + j];
    sa[j] = fabsf(v), si[j] = j;
    __syncthreads();
    for (int step = 128; step > 0; step >>= 1) { // the first largest |x| (the reference's scan)
        if (j < step && (sa[j + step] > sa[j] || (sa[j + step] == sa[j] && si[j + step] < si[j])))
            sa[j] = sa[j + step], si[j] = si[j + step];
        __syncthreads();
    }
    float amax = sa[0], max = x[sb * 256 + si[0]];
    if (amax == 0.0f) {
        qa.qs[sb * 256 + j] = 0;
        if (j < 16)
            qa.bsums[sb * 16 + j] = 0;
        if (j == 0)
            qa.d[sb] = 0;
        return;
    }
    float iscale = __fdiv_rn(-127.0f, max);
    int q = __float2int_rn(__fmul_rn(iscale, v));
    sq[j] = (int8_t)(q < 127 ? q : 127);
    qa.qs[sb * 256 + j] = sq[j];
    __syncthreads();
    if (j < 16) {
        int sum = 0;
        for (int l = 0; l < 16; l++)
            sum += sq[16 * j + l];
        qa.bsums[sb * 16 + j] = (int16_t)sum;
    }
    if (j == 0)
        qa.d[sb] = __fdiv_rn(1.0f, iscale);
}

extern "C" cudaError_t cu_launch_quantize(const void *args, cudaStream_t s)
{
    const cu_quantize_args *a = (const cu_quantize_args *)args;
    if (a->k_quant)
        return cu_enqueue(k_quant_q8_K, dim3((unsigned)(a->n * (a->qa.cols / 256))), 256, s, a->x, a->qa);
    int64_t nb = a->n * (a->qa.cols / 32);
    return cu_enqueue(k_quant_q8_0, dim3((unsigned)((nb + 3) / 4)), 128, s, a->x, a->qa, nb);
}
