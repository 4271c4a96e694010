/*
 * cuda_attention.cu - paged attention on the GPU: the batch's K and V stored into
 * their slots (kv_store), then each token attends over its own sequence.
 *
 * The KV cache is in the canonical layout (cuda_int.h). A token at position p has
 * keys [0, p]; they are cut into chunks of CU_ATTN_CHUNK at fixed positions, and
 * chunk c belongs to split c % CU_ATTN_SPLIT. One block per (token, KV head,
 * split) runs its chunks in order for the query heads of the GQA group: scores
 * (a warp per key, lanes over head_dim in a fixed order, a fixed shuffle tree),
 * the chunk's max m, l = Σ e^(s-m) (fixed tree), o = Σ e^(s-m) v (each element a
 * sum over the keys in order), merged into the split's running (M, L, O) as the
 * CPU merges chunks. Then one block per (token, head) merges the splits in split
 * order and divides. Every step's order depends only on the token's position, so
 * a token's output is the same in any batch, chunked or not, decoded or verified.
 * The launch shape depends only on the batch's token count: a CUDA graph replays
 * it at any context length (each block reads its position from the batch).
 */
#include "cuda_common.cuh"

#include <math.h>

#define ATTN_THREADS 128 // = CU_ATTN_CHUNK: thread i takes key i of a chunk
#define MAX_GROUP 16 // query heads per KV head
#define MAX_HD 256

/* ---- storing K and V ---- */

__global__ void k_kv_store(const float *k, const float *v, void *kc, void *vc, bool f16, const cu_batch *b,
                           int width)
{
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
    k_kv_store<<<grid, 256, 0, s>>>(a->k, a->v, a->kc, a->vc, a->f16, a->b, width);
    return cu_launched();
}

/* ---- attention ---- */

// Block-wide reductions over ATTN_THREADS threads: a warp's shuffle tree, then the
// warps' results in warp order (the same order for every row).
template <bool MAX> __device__ __forceinline__ float block_reduce(float v, float *red)
{
    for (int off = 16; off > 0; off >>= 1) {
        float o = __shfl_xor_sync(0xffffffffu, v, off);
        v = MAX ? fmaxf(v, o) : v + o;
    }
    int warp = threadIdx.x / 32;
    __syncthreads(); // red is free (its last readers are done)
    if (threadIdx.x % 32 == 0)
        red[warp] = v;
    __syncthreads();
    float r = red[0];
    for (int w = 1; w < ATTN_THREADS / 32; w++)
        r = MAX ? fmaxf(r, red[w]) : r + red[w];
    return r;
}

// Element i of a cache row as float.
template <bool F16> __device__ __forceinline__ float kv_get(const void *c, int64_t i)
{
    return F16 ? cu_h2f(((const uint16_t *)c)[i]) : ((const float *)c)[i];
}

// The partial of one (token, KV head, split) for the G query heads of the group: M, L
// and O (hd floats) of each head g at part + ((t * n_head + h) * CU_ATTN_SPLIT + split) *
// (hd + 2). Thread i takes key p0 + i of a chunk (its scores: one FMA chain over
// head_dim per head, in order, then × scale), the chunk's max and sum are block
// reductions, and thread e takes elements e, e + ATTN_THREADS of the outputs (a sum over
// the chunk's keys in order).
template <int G, bool F16> __global__ void __launch_bounds__(ATTN_THREADS) k_attn_split(cu_attn_args a)
{
    __shared__ float q[G][MAX_HD];
    __shared__ float pr[G][CU_ATTN_CHUNK];
    __shared__ float red[ATTN_THREADS / 32];
    __shared__ int64_t row[CU_ATTN_CHUNK]; // the chunk's keys' rows in the cache (element offsets)
    int t = blockIdx.x, kvh = blockIdx.y, split = blockIdx.z, hd = a.hd, tid = threadIdx.x;
    const cu_batch *b = a.b;
    int len = b->pos[t] + 1;
    int n_chunks = (len + CU_ATTN_CHUNK - 1) / CU_ATTN_CHUNK;
    float *part = a.part + (((int64_t)t * a.n_head + (int64_t)kvh * G) * CU_ATTN_SPLIT + split) * (hd + 2);
    constexpr int E = MAX_HD / ATTN_THREADS; // output elements per thread
    float M[G], L[G], O[G][E];
    for (int g = 0; g < G; g++) {
        M[g] = -INFINITY, L[g] = 0;
        for (int k = 0; k < E; k++)
            O[g][k] = 0;
    }
    if (split < n_chunks) {
        const int32_t *bt = b->bt + b->bt_start[b->seq[t]];
        int bs = b->block_size;
        int64_t kv_w = (int64_t)a.n_kv * hd;
        for (int i = tid; i < G * hd; i += ATTN_THREADS)
            q[i / hd][i % hd] = a.q[((int64_t)t * a.n_head + (int64_t)kvh * G + i / hd) * hd + i % hd];
        __syncthreads();
        for (int c = split; c < n_chunks; c += CU_ATTN_SPLIT) {
            int p0 = c * CU_ATTN_CHUNK, nk = min(len - p0, CU_ATTN_CHUNK);
            float s[G];
            for (int g = 0; g < G; g++)
                s[g] = 0;
            if (tid < nk) {
                int p = p0 + tid;
                row[tid] = ((int64_t)bt[p / bs] * bs + p % bs) * kv_w + (int64_t)kvh * hd;
                const void *kr = (const uint8_t *)a.kc + row[tid] * (F16 ? 2 : 4);
#pragma unroll 4
                for (int e = 0; e < hd; e += 8) { // 16-byte loads (two for float32), then in order
                    float kv[8];
                    if (F16) {
                        uint4 u = *(const uint4 *)((const uint16_t *)kr + e);
                        uint32_t w[4] = {u.x, u.y, u.z, u.w};
                        for (int i = 0; i < 4; i++)
                            kv[2 * i] = cu_h2f((uint16_t)(w[i] & 0xffff)), kv[2 * i + 1] = cu_h2f((uint16_t)(w[i] >> 16));
                    } else {
                        float4 x0 = *(const float4 *)((const float *)kr + e), x1 = *(const float4 *)((const float *)kr + e + 4);
                        kv[0] = x0.x, kv[1] = x0.y, kv[2] = x0.z, kv[3] = x0.w;
                        kv[4] = x1.x, kv[5] = x1.y, kv[6] = x1.z, kv[7] = x1.w;
                    }
                    for (int i = 0; i < 8; i++)
                        for (int g = 0; g < G; g++)
                            s[g] = fmaf(q[g][e + i], kv[i], s[g]);
                }
            }
            for (int g = 0; g < G; g++) {
                float v = tid < nk ? s[g] * a.scale : -INFINITY;
                float m = block_reduce<true>(v, red);
                float e = tid < nk ? expf(v - m) : 0.0f;
                float l = block_reduce<false>(e, red);
                pr[g][tid] = e;
                float mx = fmaxf(M[g], m);
                float wa = M[g] == mx ? 1.0f : expf(M[g] - mx), wb = m == mx ? 1.0f : expf(m - mx);
                for (int k = 0; k < E; k++)
                    O[g][k] = __fmul_rn(O[g][k], wa); // (the new chunk's share is added below)
                L[g] = __fadd_rn(__fmul_rn(L[g], wa), __fmul_rn(l, wb));
                M[g] = mx;
                s[g] = wb; // kept for the outputs' update
            }
            __syncthreads(); // pr complete
            for (int k = 0; k < E; k++) {
                int e = tid + k * ATTN_THREADS;
                if (e >= hd)
                    break;
                float o[G];
                for (int g = 0; g < G; g++)
                    o[g] = 0;
#pragma unroll 8
                for (int j = 0; j < nk; j++) {
                    float v = kv_get<F16>(a.vc, row[j] + e);
                    for (int g = 0; g < G; g++)
                        o[g] = fmaf(pr[g][j], v, o[g]);
                }
                for (int g = 0; g < G; g++)
                    O[g][k] = __fadd_rn(O[g][k], __fmul_rn(o[g], s[g]));
            }
            __syncthreads(); // pr is free for the next chunk
        }
    }
    for (int g = 0; g < G; g++) {
        float *pp = part + (int64_t)g * CU_ATTN_SPLIT * (hd + 2);
        for (int k = 0; k < E; k++) {
            int e = tid + k * ATTN_THREADS;
            if (e < hd)
                pp[2 + e] = O[g][k];
        }
        if (tid == 0)
            pp[0] = M[g], pp[1] = L[g];
    }
}

// out[t][h] = the splits merged in order, O / L.
__global__ void k_attn_merge(cu_attn_args a)
{
    int t = blockIdx.x, h = blockIdx.y, hd = a.hd;
    const float *pp = a.part + ((int64_t)t * a.n_head + h) * CU_ATTN_SPLIT * (hd + 2);
    float M = -INFINITY, L = 0, O = 0;
    for (int sp = 0; sp < CU_ATTN_SPLIT; sp++, pp += hd + 2) {
        float m = pp[0], l = pp[1];
        if (l == 0) // a split with no chunk (or none yet)
            continue;
        float mx = fmaxf(M, m);
        float wa = M == mx ? 1.0f : expf(M - mx), wb = m == mx ? 1.0f : expf(m - mx);
        if (threadIdx.x < hd)
            O = __fadd_rn(__fmul_rn(O, wa), __fmul_rn(pp[2 + threadIdx.x], wb));
        L = __fadd_rn(__fmul_rn(L, wa), __fmul_rn(l, wb));
        M = mx;
    }
    if (threadIdx.x < hd)
        a.out[((int64_t)t * a.n_head + h) * hd + threadIdx.x] = __fdiv_rn(O, L);
}

template <int G> static void launch_split(const cu_attn_args *a, dim3 grid, cudaStream_t s)
{
    if (a->f16)
        k_attn_split<G, true><<<grid, ATTN_THREADS, 0, s>>>(*a);
    else
        k_attn_split<G, false><<<grid, ATTN_THREADS, 0, s>>>(*a);
}

extern "C" cudaError_t cu_launch_attention(const void *args, cudaStream_t s)
{
    const cu_attn_args *a = (const cu_attn_args *)args;
    int group = a->n_head / a->n_kv;
    if (group > MAX_GROUP || a->hd > MAX_HD)
        return cudaErrorInvalidValue;
    dim3 g1((unsigned)a->n, (unsigned)a->n_kv, CU_ATTN_SPLIT);
    switch (group) {
    case 1: launch_split<1>(a, g1, s); break;
    case 2: launch_split<2>(a, g1, s); break;
    case 3: launch_split<3>(a, g1, s); break;
    case 4: launch_split<4>(a, g1, s); break;
    case 5: launch_split<5>(a, g1, s); break;
    case 6: launch_split<6>(a, g1, s); break;
    case 7: launch_split<7>(a, g1, s); break;
    case 8: launch_split<8>(a, g1, s); break;
    case 10: launch_split<10>(a, g1, s); break;
    case 12: launch_split<12>(a, g1, s); break;
    case 14: launch_split<14>(a, g1, s); break;
    case 16: launch_split<16>(a, g1, s); break;
    default: return cudaErrorInvalidValue;
    }
    cudaError_t e = cu_launched();
    if (e != cudaSuccess)
        return e;
    dim3 g2((unsigned)a->n, (unsigned)a->n_head);
    k_attn_merge<<<g2, a->hd > 32 ? a->hd : 32, 0, s>>>(*a);
    return cu_launched();
}
