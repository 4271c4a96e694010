/*
 * cuda_attention.cu - paged attention on the GPU: the batch's K and V stored into
 * their slots (kv_store), then each token attends over its own sequence.
 *
 * The KV cache is in the canonical layout (cuda_int.h). A token at position p has
 * keys [0, p]; they are cut into chunks of CU_ATTN_CHUNK (32, a warp's width) at
 * fixed positions, and chunk c belongs to split c % CU_ATTN_SPLIT. One warp per
 * (token, KV head, split) runs its split's chunks in order for the query heads of
 * the GQA group, with no block-wide synchronization: lane j takes key j of a chunk
 * (its scores: one FMA chain over head_dim per head, in order, then x scale), the
 * chunk's max m and l = sum e^(s-m) are the warp's fixed xor shuffle trees; the
 * split's running (M, L, O) takes the chunk as M' = max(M, m), L' = L e^(M-M') +
 * l e^(m-M'), and O' = O e^(M-M') then + (e^(s_j-m) e^(m-M')) v_j for the chunk's keys
 * j in order, one FMA each (lane l holding the element pairs l, l + 32, ...). A
 * block is ATTN_WARPS warps holding consecutive splits of one (token, KV head):
 * they share the query, loaded once. Then one block per
 * (token, head) merges the splits that have keys: their largest M (exact), each
 * split's weight e^(M_s - M), L and O summed in split order, O / L. Every step's
 * order depends only on the token's position, so a token's output is the same in
 * any batch, chunked or not, decoded or verified. The launch shape depends only on
 * the batch's token count: a CUDA graph replays it at any context length (each
 * block reads its position from the batch; blocks and warps whose split has no
 * keys exit at once).
 */
#include "cuda_common.cuh"

#include <math.h>

#define ATTN_WARPS 4 // splits per block: warp w of block z takes split ATTN_WARPS * z + w
#define MAX_GROUP 16 // query heads per KV head
#define MAX_HD 256

static_assert(CU_ATTN_CHUNK == 32, "a chunk is a warp: lane j takes key j");
static_assert(CU_ATTN_SPLIT % ATTN_WARPS == 0 && CU_ATTN_SPLIT <= 32, "the merge holds a split per lane");

/* ---- storing K and V ---- */

__global__ void k_kv_store(const float *k, const float *v, void *kc, void *vc, bool f16, const cu_batch *b,
                           int width)
{
    cu_kernel_start();
    int t = blockIdx.y;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= width)
        return;
    int64_t at = (int64_t)b->slot[t] * width + i, from = (int64_t)t * width + i;
    if (f16) {
        ((uint16_t *)kc)[at] = cu_kv_half(k[from]);
        ((uint16_t *)vc)[at] = cu_kv_half(v[from]);
    } else {
        ((float *)kc)[at] = k[from];
        ((float *)vc)[at] = v[from];
    }
}

extern "C" cudaError_t cu_launch_kv_store(const void *args, cudaStream_t s)
{
    const cu_attn_args *a = (const cu_attn_args *)args;
    int width = a->n_kv * a->hd;
    dim3 grid((unsigned)((width + 255) / 256), (unsigned)a->n);
    return cu_enqueue(k_kv_store, grid, 256, s, a->k, a->v, a->kc, a->vc, a->f16, a->b, width);
}

/* ---- attention ---- */

__device__ __forceinline__ float warp_max(float v)
{
    for (int off = 16; off > 0; off >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

// A fixed xor tree: every lane ends with the same bits (each step adds the same two
// values, commutatively), and the order depends only on the lanes, i.e. key positions.
__device__ __forceinline__ float warp_sum(float v)
{
    for (int off = 16; off > 0; off >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

// Hints only (no effect on any result): bring a cache row's lines nearer.
__device__ __forceinline__ void prefetch_row(const void *p, int bytes, bool l1)
{
    for (int o = 0; o < bytes; o += 128) {
        const char *x = (const char *)p + o;
        if (l1)
            asm volatile("prefetch.global.L1 [%0];" ::"l"(x));
        else
            asm volatile("prefetch.global.L2 [%0];" ::"l"(x));
    }
}

// The cache row (element offset) of key p of KV head kvh.
__device__ __forceinline__ int64_t key_row(const int32_t *bt, int bs, int64_t kv_w, int kvh, int hd, int p)
{
    return ((int64_t)bt[p / bs] * bs + p % bs) * kv_w + (int64_t)kvh * hd;
}

// The partial of one (token, KV head, split) for G query heads of the group (all of
// it, or with head_dim > 128 and more than 8 heads a group, each half of it in its own
// block: blockIdx.y = kvh * (group / G) + part; a head's arithmetic is the same either
// way): M, L and O (hd floats) of each head h = kvh * group + g0 + g at part + ((t *
// n_head + h) * CU_ATTN_SPLIT + split) * (hd + 2). One warp a split (ATTN_WARPS to a
// block, sharing the query); lane j takes key p0 + j of a chunk, and element pairs 2 (l + 32 k), k < NP,
// of the outputs (NP = 2: head_dim <= 128; 4: <= 256).
template <int G, bool F16, int NP> __global__ void __launch_bounds__(ATTN_WARPS * 32, 1) k_attn_split(cu_attn_args a)
{
    cu_kernel_start();
    __shared__ __align__(16) float q[G][MAX_HD];
    __shared__ float pr[ATTN_WARPS][G][CU_ATTN_CHUNK];
    __shared__ int64_t row[ATTN_WARPS][CU_ATTN_CHUNK]; // the chunk's keys' rows in the cache (element offsets)
    constexpr int ES = F16 ? 2 : 4;                     // bytes per cache element
    int t = blockIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32, hd = a.hd;
    int parts = a.n_head / a.n_kv / G, kvh = blockIdx.y / parts;
    int h0 = kvh * G * parts + (blockIdx.y % parts) * G; // the block's first query head
    int split = blockIdx.z * ATTN_WARPS + warp;
    const cu_batch *b = a.b;
    int len = b->pos[t] + 1;
    int n_chunks = (len + CU_ATTN_CHUNK - 1) / CU_ATTN_CHUNK;
    if ((int)blockIdx.z * ATTN_WARPS >= n_chunks) // no split of this block has keys (uniform)
        return;
    for (int i = threadIdx.x; i < G * hd; i += ATTN_WARPS * 32)
        q[i / hd][i % hd] = a.q[((int64_t)t * a.n_head + h0 + i / hd) * hd + i % hd];
    __syncthreads(); // the last block-wide barrier
    if (split >= n_chunks) // this warp's split has no keys (the merge reads only those that have)
        return;
    const int32_t *bt = b->bt + b->bt_start[b->seq[t]];
    int bs = b->block_size;
    int64_t kv_w = (int64_t)a.n_kv * hd;
    float M[G], L[G], O[G][2 * NP];
    for (int g = 0; g < G; g++) {
        M[g] = -INFINITY, L[g] = 0;
#pragma unroll
        for (int k = 0; k < 2 * NP; k++)
            O[g][k] = 0;
    }
    for (int c = split; c < n_chunks; c += CU_ATTN_SPLIT) {
        int p0 = c * CU_ATTN_CHUNK, nk = min(len - p0, CU_ATTN_CHUNK);
        int64_t r = lane < nk ? key_row(bt, bs, kv_w, kvh, hd, p0 + lane) : 0;
        row[warp][lane] = r;
        if (lane < nk) {
            prefetch_row((const uint8_t *)a.kc + r * ES, hd * ES, true);
            prefetch_row((const uint8_t *)a.vc + r * ES, hd * ES, true);
        }
        int pn = p0 + CU_ATTN_SPLIT * CU_ATTN_CHUNK + lane; // this lane's key in the split's next chunk
        if (pn < len) {
            int64_t rn = key_row(bt, bs, kv_w, kvh, hd, pn);
            prefetch_row((const uint8_t *)a.kc + rn * ES, hd * ES, false);
            prefetch_row((const uint8_t *)a.vc + rn * ES, hd * ES, false);
        }
        float s[G];
        for (int g = 0; g < G; g++)
            s[g] = 0;
        if (lane < nk) {
            const void *kr = (const uint8_t *)a.kc + r * ES;
#pragma unroll(NP == 4 ? 2 : 4)
            for (int e = 0; e < hd; e += 8) { // 16-byte loads (two for float32), then in order
                float kv[8];
                if (F16) {
                    uint4 u = *(const uint4 *)((const uint16_t *)kr + e);
                    uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
                    for (int i = 0; i < 4; i++)
                        kv[2 * i] = cu_h2f((uint16_t)(w[i] & 0xffff)), kv[2 * i + 1] = cu_h2f((uint16_t)(w[i] >> 16));
                } else {
                    float4 x0 = *(const float4 *)((const float *)kr + e), x1 = *(const float4 *)((const float *)kr + e + 4);
                    kv[0] = x0.x, kv[1] = x0.y, kv[2] = x0.z, kv[3] = x0.w;
                    kv[4] = x1.x, kv[5] = x1.y, kv[6] = x1.z, kv[7] = x1.w;
                }
#pragma unroll
                for (int g = 0; g < G; g++) {
                    float4 q0 = *(const float4 *)&q[g][e], q1 = *(const float4 *)&q[g][e + 4];
                    float qq[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
#pragma unroll
                    for (int i = 0; i < 8; i++)
                        s[g] = fmaf(qq[i], kv[i], s[g]);
                }
            }
        }
        for (int g = 0; g < G; g++) {
            float v = lane < nk ? s[g] * a.scale : -INFINITY;
            float m = warp_max(v);
            float e = lane < nk ? expf(v - m) : 0.0f;
            float l = warp_sum(e);
            float mx = fmaxf(M[g], m);
            float wa = M[g] == mx ? 1.0f : expf(M[g] - mx), wb = m == mx ? 1.0f : expf(m - mx);
            pr[warp][g][lane] = __fmul_rn(e, wb); // the key's weight in the running sum
            for (int k = 0; k < 2 * NP; k++)
                O[g][k] = __fmul_rn(O[g][k], wa); // (the new chunk's keys are added below)
            L[g] = __fadd_rn(__fmul_rn(L[g], wa), __fmul_rn(l, wb));
            M[g] = mx;
        }
        __syncwarp(); // pr and row complete
#pragma unroll(NP == 4 ? 2 : 8)
        for (int j = 0; j < nk; j++) {
            int64_t rj = row[warp][j];
            float vv[2 * NP];
#pragma unroll
            for (int k = 0; k < NP; k++) {
                int e = 2 * (lane + 32 * k);
                if (e < hd) {
                    if (F16) {
                        uint32_t u = *(const uint32_t *)((const uint16_t *)a.vc + rj + e);
                        vv[2 * k] = cu_h2f((uint16_t)(u & 0xffff)), vv[2 * k + 1] = cu_h2f((uint16_t)(u >> 16));
                    } else {
                        float2 x = *(const float2 *)((const float *)a.vc + rj + e);
                        vv[2 * k] = x.x, vv[2 * k + 1] = x.y;
                    }
                } else {
                    vv[2 * k] = vv[2 * k + 1] = 0;
                }
            }
#pragma unroll
            for (int g = 0; g < G; g++) {
                float pj = pr[warp][g][j];
#pragma unroll
                for (int k = 0; k < 2 * NP; k++)
                    O[g][k] = fmaf(pj, vv[k], O[g][k]);
            }
        }
        __syncwarp(); // pr and row are free for the next chunk
    }
    float *part = a.part + (((int64_t)t * a.n_head + h0) * CU_ATTN_SPLIT + split) * (hd + 2);
    for (int g = 0; g < G; g++) {
        float *pp = part + (int64_t)g * CU_ATTN_SPLIT * (hd + 2);
#pragma unroll
        for (int k = 0; k < NP; k++) {
            int e = 2 * (lane + 32 * k);
            if (e < hd)
                pp[2 + e] = O[g][2 * k], pp[3 + e] = O[g][2 * k + 1];
        }
        if (lane == 0)
            pp[0] = M[g], pp[1] = L[g];
    }
}

// out[t][h] = the splits that have keys merged: M = their largest M_s (exact in any
// order), w_s = e^(M_s - M), L = sum l_s w_s and O = sum o_s w_s in split order, O / L.
__global__ void k_attn_merge(cu_attn_args a)
{
    cu_kernel_start();
    __shared__ float w[CU_ATTN_SPLIT], lw[CU_ATTN_SPLIT];
    int t = blockIdx.x, h = blockIdx.y, hd = a.hd, tid = threadIdx.x;
    int len = a.b->pos[t] + 1;
    int ns = min((len + CU_ATTN_CHUNK - 1) / CU_ATTN_CHUNK, CU_ATTN_SPLIT); // the splits with keys
    const float *pp = a.part + ((int64_t)t * a.n_head + h) * CU_ATTN_SPLIT * (hd + 2);
    if (tid < 32) {
        float m = -INFINITY, l = 0;
        if (tid < ns)
            m = pp[(int64_t)tid * (hd + 2)], l = pp[(int64_t)tid * (hd + 2) + 1];
        bool ok = l != 0; // (a split with keys always has l >= 1)
        float mx = warp_max(ok ? m : -INFINITY);
        float ws = ok ? (m == mx ? 1.0f : expf(m - mx)) : 0.0f;
        if (tid < CU_ATTN_SPLIT)
            w[tid] = ws, lw[tid] = ok ? __fmul_rn(l, ws) : 0.0f;
    }
    __syncthreads();
    float L = 0;
    for (int sp = 0; sp < ns; sp++)
        L = __fadd_rn(L, lw[sp]);
    if (tid < hd) {
        float O = 0;
#pragma unroll 8
        for (int sp = 0; sp < ns; sp++)
            if (w[sp] != 0)
                O = __fadd_rn(O, __fmul_rn(pp[(int64_t)sp * (hd + 2) + 2 + tid], w[sp]));
        a.out[((int64_t)t * a.n_head + h) * hd + tid] = __fdiv_rn(O, L);
    }
}

template <int G, int NP> static cudaError_t launch_split(const cu_attn_args *a, cudaStream_t s)
{
    int parts = a->n_head / a->n_kv / G;
    dim3 grid((unsigned)a->n, (unsigned)(a->n_kv * parts), CU_ATTN_SPLIT / ATTN_WARPS);
    if (a->f16)
        return cu_enqueue(k_attn_split<G, true, NP>, grid, ATTN_WARPS * 32, s, *a);
    return cu_enqueue(k_attn_split<G, false, NP>, grid, ATTN_WARPS * 32, s, *a);
}

// head_dim <= 128: the whole group in a block; up to 256: at most 8 heads a block (more
// would not fit a thread's registers).
template <int G> static cudaError_t launch_group(const cu_attn_args *a, cudaStream_t s)
{
    if (a->hd <= 128)
        return launch_split<G, 2>(a, s);
    else if constexpr (G <= 8)
        return launch_split<G, 4>(a, s);
    else
        return launch_split<G / 2, 4>(a, s);
}

extern "C" cudaError_t cu_launch_attention(const void *args, cudaStream_t s)
{
    const cu_attn_args *a = (const cu_attn_args *)args;
    int group = a->n_head / a->n_kv;
    if (group > MAX_GROUP || a->hd > MAX_HD || a->hd % 8)
        return cudaErrorInvalidValue;
    cudaError_t e;
    switch (group) {
    case 1: e = launch_group<1>(a, s); break;
    case 2: e = launch_group<2>(a, s); break;
    case 3: e = launch_group<3>(a, s); break;
    case 4: e = launch_group<4>(a, s); break;
    case 5: e = launch_group<5>(a, s); break;
    case 6: e = launch_group<6>(a, s); break;
    case 7: e = launch_group<7>(a, s); break;
    case 8: e = launch_group<8>(a, s); break;
    case 10: e = launch_group<10>(a, s); break;
    case 12: e = launch_group<12>(a, s); break;
    case 14: e = launch_group<14>(a, s); break;
    case 16: e = launch_group<16>(a, s); break;
    default: return cudaErrorInvalidValue;
    }
    if (e != cudaSuccess)
        return e;
    dim3 g2((unsigned)a->n, (unsigned)a->n_head);
    return cu_enqueue(k_attn_merge, g2, a->hd > 32 ? a->hd : 32, s, *a);
}
