/*
 * cuda_matmul.cu - matmuls on the GPU, for every weight type: y = x · Wᵀ of a few
 * tokens against a weight streamed once per pass, plus the fused forms (a group of
 * weights sharing x with biases and residual adds; gate/up with silu), and the
 * quantization of activations that quantized weights multiply.
 *
 * A warp computes one weight row for up to MM_NT tokens per pass (more tokens:
 * more passes over the row). Float weights (F32, F16, BF16) multiply float32
 * activations: lane l takes the elements [256 i + 8 l, 256 i + 8 l + 8) for i in
 * order, one FMA chain per token, then a fixed shuffle tree. Quantized weights
 * multiply activations quantized as the CPU does it (Q8_0 for the legacy types,
 * Q8_K for the K-quants, bit for bit): the products of a block are integers
 * (dp4a), exact in any order, and only the per-block float terms accumulate, lane
 * l taking blocks l, l + 32, ... (a K-quant super-block is shared by 8 lanes, one
 * sub-block each, whose integer parts are added exactly first). So every output's
 * arithmetic depends on the weight's shape alone, never on the number of tokens.
 *
 * This is the CUDA-core version: one-token steps are bound by reading the weights;
 * many tokens cost multiply-adds, which tensor cores would make nearly free
 * (bench/RESULTS.md measures both).
 */
#include "cuda_common.cuh"

#define MM_WARPS 4 // warps (rows) per block
#define MM_NT 4    // tokens per pass over a row

/* ---- float weights: 8 elements of a row as float ---- */

template <int T> __device__ __forceinline__ void load8(const uint8_t *row, int64_t e, float *w)
{
    if (T == CU_F32) {
        float4 a = *(const float4 *)(row + e * 4), b = *(const float4 *)(row + e * 4 + 16);
        w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w, w[4] = b.x, w[5] = b.y, w[6] = b.z, w[7] = b.w;
    } else {
        uint4 v = *(const uint4 *)(row + e * 2);
        uint32_t u[4] = {v.x, v.y, v.z, v.w};
        for (int i = 0; i < 4; i++) {
            uint16_t lo = (uint16_t)(u[i] & 0xffff), hi = (uint16_t)(u[i] >> 16);
            w[2 * i] = T == CU_F16 ? cu_h2f(lo) : cu_bf2f(lo);
            w[2 * i + 1] = T == CU_F16 ? cu_h2f(hi) : cu_bf2f(hi);
        }
    }
}

// acc[t] += w[0..8) · x[t0 + t][e, e + 8), an FMA chain in element order.
__device__ __forceinline__ void dot8(const float *w, const float *x, int64_t cols, int64_t e, int t0, int nt,
                                     float *acc)
{
    for (int t = 0; t < MM_NT; t++) {
        if (t >= nt)
            break;
        const float4 *xp = (const float4 *)(x + (int64_t)(t0 + t) * cols + e);
        float4 a = xp[0], b = xp[1];
        float xv[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
        float s = acc[t];
        for (int k = 0; k < 8; k++)
            s = fmaf(w[k], xv[k], s);
        acc[t] = s;
    }
}

// Σ over the row of w·x for tokens [t0, t0 + nt): this lane's part.
template <int T>
__device__ __forceinline__ void dot_float(const cu_weight &W, int64_t r, const float *x, int t0, int nt, float *acc)
{
    int lane = threadIdx.x % 32;
    int64_t cols = W.cols;
    const uint8_t *row = W.plane[0] + r * cols * (T == CU_F32 ? 4 : 2);
    int64_t e = 8 * lane;
    for (; e + 7 * 256 < cols; e += 8 * 256) { // eight weight loads in flight, then their products in order
        float w[8][8];
        for (int u = 0; u < 8; u++)
            load8<T>(row, e + 256 * u, w[u]);
        for (int u = 0; u < 8; u++)
            dot8(w[u], x, cols, e + 256 * u, t0, nt, acc);
    }
    for (; e + 3 * 256 < cols; e += 4 * 256) { // then four
        float w[4][8];
        for (int u = 0; u < 4; u++)
            load8<T>(row, e + 256 * u, w[u]);
        for (int u = 0; u < 4; u++)
            dot8(w[u], x, cols, e + 256 * u, t0, nt, acc);
    }
    for (; e < cols; e += 256) {
        float w[8];
        load8<T>(row, e, w);
        dot8(w, x, cols, e, t0, nt, acc);
    }
}

/* ---- quantized weights ---- */

__device__ __forceinline__ int dp4a(int a, int b, int c)
{
    return __dp4a(a, b, c);
}

// The integer dot of legacy block (row r, block k) with token t's Q8_0 block.
template <int T> __device__ __forceinline__ int block_dot(const cu_weight &W, int64_t wb, const int8_t *xq)
{
    const int4 *xv = (const int4 *)xq;
    int4 x0 = xv[0], x1 = xv[1];
    int xs[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
    int s = 0;
    if (T == CU_Q8_0) {
        const int4 *wv = (const int4 *)(W.plane[0] + wb * 32);
        int4 w0 = wv[0], w1 = wv[1];
        int ws[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
        for (int i = 0; i < 8; i++)
            s = dp4a(ws[i], xs[i], s);
        return s;
    }
    int4 q = *(const int4 *)(W.plane[0] + wb * 16);
    int qs[4] = {q.x, q.y, q.z, q.w};
    int sumx = 0;
    for (int i = 0; i < 8; i++)
        sumx = dp4a(0x01010101, xs[i], sumx);
    uint32_t qh = 0;
    if (T == CU_Q5_0) {
        const uint8_t *h = W.plane[1] + wb * 4;
        qh = h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 24;
    }
    for (int i = 0; i < 4; i++) {
        int lo = qs[i] & 0x0F0F0F0F, hi = (qs[i] >> 4) & 0x0F0F0F0F;
        if (T == CU_Q5_0) {
            uint32_t bl = (qh >> (4 * i)) & 0xF, bh = (qh >> (16 + 4 * i)) & 0xF;
            lo |= (int)(((bl & 1) << 4) | ((bl & 2) << 11) | ((bl & 4) << 18) | ((bl & 8) << 25));
            hi |= (int)(((bh & 1) << 4) | ((bh & 2) << 11) | ((bh & 4) << 18) | ((bh & 8) << 25));
        }
        s = dp4a(lo, xs[i], s);
        s = dp4a(hi, xs[4 + i], s);
    }
    return s - (T == CU_Q5_0 ? 16 : 8) * sumx;
}

template <int T> __device__ __forceinline__ float block_scale(const cu_weight &W, int64_t wb)
{
    return cu_h2f(((const uint16_t *)W.plane[T == CU_Q5_0 ? 2 : 1])[wb]);
}

template <int T>
__device__ __forceinline__ void dot_legacy(const cu_weight &W, int64_t r, const cu_qact &qa, int t0, int nt, float *acc)
{
    int lane = threadIdx.x % 32;
    int64_t nb = W.cols / 32;
#pragma unroll 4
    for (int64_t k = lane; k < nb; k += 32) {
        int64_t wb = r * nb + k;
        float dw = block_scale<T>(W, wb);
        for (int t = 0; t < MM_NT; t++) {
            if (t >= nt)
                break;
            int64_t xb = (int64_t)(t0 + t) * nb + k;
            int isum = block_dot<T>(W, wb, qa.qs + xb * 32);
            acc[t] = __fadd_rn(acc[t], __fmul_rn((float)isum, __fmul_rn(dw, qa.d[xb]))); // s += isum * (dw * dx)
        }
    }
}

// Sub-block j (32 elements) of super-block sb of row r against token t's Q8_K
// super-block: *sumi += sc · Σ q·y and *summ += m · Σ y (Q4_K, Q5_K; Q6_K: its two
// 16-element scales, no m).
template <int T>
__device__ __forceinline__ void sub_dot(const cu_weight &W, int64_t wsb, int j, const int8_t *xq, const int16_t *bs,
                                        int *sumi, int *summ)
{
    const int4 *xv = (const int4 *)(xq + 32 * j);
    int4 x0 = xv[0], x1 = xv[1];
    int xs[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
    if (T == CU_Q4_K || T == CU_Q5_K) {
        bool five = T == CU_Q5_K;
        const uint8_t *head = W.plane[five ? 2 : 1] + wsb * 16;
        int sc, m;
        cu_q4k_scale_min(j, head + 4, &sc, &m);
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
        int dot = 0;
        for (int i = 0; i < 8; i++)
            dot = dp4a(((qs[i] >> (4 * (j & 1))) & 0x0F0F0F0F) | hs[i], xs[i], dot);
        *sumi += sc * dot;
        *summ += m * (bs[2 * j] + bs[2 * j + 1]);
    } else { // Q6_K
        int c = j / 4, q4 = j % 4;
        const int4 *lv = (const int4 *)(W.plane[0] + wsb * 128 + 64 * c + (q4 & 1) * 32);
        const int4 *hv = (const int4 *)(W.plane[1] + wsb * 64 + 32 * c);
        int4 l0 = lv[0], l1 = lv[1], h0 = hv[0], h1 = hv[1];
        int ls[8] = {l0.x, l0.y, l0.z, l0.w, l1.x, l1.y, l1.z, l1.w};
        int hs[8] = {h0.x, h0.y, h0.z, h0.w, h1.x, h1.y, h1.z, h1.w};
        const int8_t *scales = (const int8_t *)W.plane[2] + wsb * 16 + 8 * c + 2 * q4;
        int dot0 = 0, dot1 = 0;
        for (int i = 0; i < 8; i++) {
            int v = ((ls[i] >> (q4 < 2 ? 0 : 4)) & 0x0F0F0F0F) | (((hs[i] >> (2 * q4)) & 0x03030303) << 4);
            // v - 32 per byte: the bytes are 0..63, so subtracting 32 from each needs a signed
            // form: __vsubss4 keeps every byte's sign.
            v = __vsubss4(v, 0x20202020);
            if (i < 4)
                dot0 = dp4a(v, xs[i], dot0);
            else
                dot1 = dp4a(v, xs[i], dot1);
        }
        *sumi += scales[0] * dot0 + scales[1] * dot1;
    }
}

template <int T>
__device__ __forceinline__ void dot_kquant(const cu_weight &W, int64_t r, const cu_qact &qa, int t0, int nt, float *acc)
{
    int lane = threadIdx.x % 32, j = lane % 8, grp = lane / 8;
    int64_t nsb = W.cols / 256;
    for (int64_t k0 = 0; k0 < nsb; k0 += 4) {
        int64_t k = k0 + grp;
        bool on = k < nsb;
        int64_t wsb = r * nsb + (on ? k : 0);
        for (int t = 0; t < MM_NT; t++) {
            if (t >= nt)
                break;
            int64_t xs = (int64_t)(t0 + t) * nsb + (on ? k : 0);
            int sumi = 0, summ = 0;
            if (on)
                sub_dot<T>(W, wsb, j, qa.qs + xs * 256, qa.bsums + xs * 16, &sumi, &summ);
            for (int off = 4; off > 0; off >>= 1) { // the super-block's integers, exactly
                sumi += __shfl_xor_sync(0xffffffffu, sumi, off);
                summ += __shfl_xor_sync(0xffffffffu, summ, off);
            }
            if (on && j == 0) {
                float yd = qa.d[xs];
                if (T == CU_Q6_K) {
                    float d = cu_h2f(((const uint16_t *)W.plane[3])[wsb]);
                    acc[t] = __fadd_rn(acc[t], __fmul_rn(__fmul_rn(yd, d), (float)sumi));
                } else {
                    const uint8_t *head = W.plane[T == CU_Q5_K ? 2 : 1] + wsb * 16;
                    float d = __fmul_rn(yd, cu_h2f(head[0] | head[1] << 8));
                    float dmin = __fmul_rn(yd, cu_h2f(head[2] | head[3] << 8));
                    acc[t] = __fadd_rn(acc[t], __fsub_rn(__fmul_rn(d, (float)sumi), __fmul_rn(dmin, (float)summ)));
                }
            }
        }
    }
}

/* ---- the kernel ---- */

template <int T> __device__ __forceinline__ void row_dot(const cu_matmul_args &a, const cu_weight &W, int64_t r, int t0,
                                                         int nt, float *acc)
{
    for (int t = 0; t < MM_NT; t++)
        acc[t] = 0;
    if (T == CU_F32 || T == CU_F16 || T == CU_BF16)
        dot_float<T>(W, r, a.x, t0, nt, acc);
    else if (T == CU_Q8_0 || T == CU_Q4_0 || T == CU_Q5_0)
        dot_legacy<T>(W, r, a.qa, t0, nt, acc);
    else
        dot_kquant<T>(W, r, a.qa, t0, nt, acc);
    for (int t = 0; t < MM_NT; t++)
        for (int off = 16; off > 0; off >>= 1)
            acc[t] += __shfl_xor_sync(0xffffffffu, acc[t], off);
}

// Member i of the group, read with constant indices (a run-time index into the kernel's
// parameters would copy them to local memory).
template <typename X> __device__ __forceinline__ X pick(int i, const X *v)
{
    return i == 0 ? v[0] : i == 1 ? v[1] : i == 2 ? v[2] : v[3];
}

template <int T> __global__ void __launch_bounds__(MM_WARPS * 32) k_matmul(cu_matmul_args a)
{
    int64_t gr = (int64_t)blockIdx.x * MM_WARPS + threadIdx.x / 32; // row of the group's union
    int i = 0;
    for (int k = 0; k < CU_MM_GROUP - 1; k++)
        if (i == k && i < a.count && gr >= pick(k, a.w).rows)
            gr -= pick(k, a.w).rows, i++;
    if (i >= a.count || gr >= pick(i, a.w).rows || (a.glu && i > 0))
        return;
    const cu_weight W = pick(i, a.w);
    float *y = pick(i, a.y), *residual = pick(i, a.residual);
    const float *bias = pick(i, a.bias);
    int lane = threadIdx.x % 32;
    int64_t rows = W.rows;
    for (int t0 = 0; t0 < a.n; t0 += MM_NT) {
        int nt = a.n - t0 < MM_NT ? a.n - t0 : MM_NT;
        float acc[MM_NT];
        row_dot<T>(a, W, gr, t0, nt, acc);
        if (a.glu) {
            float up[MM_NT];
            row_dot<T>(a, a.w[1], gr, t0, nt, up);
            if (lane < nt) {
                float g = acc[0], u = up[0];
                for (int t = 1; t < MM_NT; t++)
                    if (lane == t)
                        g = acc[t], u = up[t];
                int64_t at = (int64_t)(t0 + lane) * rows + gr;
                a.y[1][at] = u;
                a.y[0][at] = __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), u);
            }
            continue;
        }
        if (lane < nt) {
            float v = acc[0];
            for (int t = 1; t < MM_NT; t++)
                if (lane == t)
                    v = acc[t];
            if (bias)
                v = __fadd_rn(v, bias[gr]);
            int64_t at = (int64_t)(t0 + lane) * rows + gr;
            y[at] = v;
            if (residual)
                residual[at] = __fadd_rn(residual[at], v);
        }
    }
}

extern "C" cudaError_t cu_launch_matmul(const void *args, cudaStream_t s)
{
    const cu_matmul_args *a = (const cu_matmul_args *)args;
    int64_t total = 0;
    for (int i = 0; i < (a->glu ? 1 : a->count); i++)
        total += a->w[i].rows;
    unsigned blocks = (unsigned)((total + MM_WARPS - 1) / MM_WARPS);
    switch (a->w[0].type) {
    case CU_F32: k_matmul<CU_F32><<<blocks, MM_WARPS * 32, 0, s>>>(*a); break;
    case CU_F16: k_matmul<CU_F16><<<blocks, MM_WARPS * 32, 0, s>>>(*a); break;
    case CU_BF16: k_matmul<CU_BF16><<<blocks, MM_WARPS * 32, 0, s>>>(*a); break;
    case CU_Q8_0: k_matmul<CU_Q8_0><<<blocks, MM_WARPS * 32, 0, s>>>(*a); break;
    case CU_Q4_0: k_matmul<CU_Q4_0><<<blocks, MM_WARPS * 32, 0, s>>>(*a); break;
    case CU_Q5_0: k_matmul<CU_Q5_0><<<blocks, MM_WARPS * 32, 0, s>>>(*a); break;
    case CU_Q4_K: k_matmul<CU_Q4_K><<<blocks, MM_WARPS * 32, 0, s>>>(*a); break;
    case CU_Q5_K: k_matmul<CU_Q5_K><<<blocks, MM_WARPS * 32, 0, s>>>(*a); break;
    case CU_Q6_K: k_matmul<CU_Q6_K><<<blocks, MM_WARPS * 32, 0, s>>>(*a); break;
    default: return cudaErrorInvalidValue;
    }
    return cu_launched();
}

/* ---- quantizing activations (quant.c's rp_quant_row_q8_0 / _q8_K, bit for bit) ---- */

// One warp per (token, Q8_0 block): lane j takes element j.
__global__ void k_quant_q8_0(const float *x, cu_qact qa, int64_t n_blocks)
{
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
    if (a->k_quant) {
        k_quant_q8_K<<<(unsigned)(a->n * (a->qa.cols / 256)), 256, 0, s>>>(a->x, a->qa);
    } else {
        int64_t nb = a->n * (a->qa.cols / 32);
        k_quant_q8_0<<<(unsigned)((nb + 3) / 4), 128, 0, s>>>(a->x, a->qa, nb);
    }
    return cu_launched();
}
