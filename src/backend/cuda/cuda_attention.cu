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

#define ATTN_THREADS 256 // >= head_dim: thread e < hd keeps element e of the outputs
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

__device__ __forceinline__ float kv_at(const void *c, bool f16, int64_t i)
{
    return f16 ? cu_h2f(((const uint16_t *)c)[i]) : ((const float *)c)[i];
}

// The partial of one (token, KV head, split): for each query head g of the group,
// M, L and O (hd floats) at part + ((t * n_head + h) * CU_ATTN_SPLIT + split) * (hd + 2).
__global__ void k_attn_split(cu_attn_args a)
{
    __shared__ float q[MAX_GROUP][MAX_HD];
    __shared__ float sc[MAX_GROUP][CU_ATTN_CHUNK];
    __shared__ float cm[MAX_GROUP], cl[MAX_GROUP];
    int t = blockIdx.x, kvh = blockIdx.y, split = blockIdx.z;
    int hd = a.hd, group = a.n_head / a.n_kv, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const cu_batch *b = a.b;
    int pos = b->pos[t], len = pos + 1;
    const int32_t *bt = b->bt + b->bt_start[b->seq[t]];
    int bs = b->block_size;
    int64_t kv_w = (int64_t)a.n_kv * hd;
    for (int i = threadIdx.x; i < group * hd; i += ATTN_THREADS)
        q[i / hd][i % hd] = a.q[((int64_t)t * a.n_head + (int64_t)kvh * group + i / hd) * hd + i % hd];
    // Running state per (g, element): thread e < hd keeps O[g][e] for every g; M and L per g
    // in every thread (the same values: they are computed from shared memory alike).
    float M[MAX_GROUP], L[MAX_GROUP], O[MAX_GROUP];
    for (int g = 0; g < MAX_GROUP; g++)
        M[g] = -INFINITY, L[g] = 0, O[g] = 0;
    __syncthreads();
    int n_chunks = (len + CU_ATTN_CHUNK - 1) / CU_ATTN_CHUNK;
    for (int c = split; c < n_chunks; c += CU_ATTN_SPLIT) {
        int p0 = c * CU_ATTN_CHUNK, p1 = min(len, p0 + CU_ATTN_CHUNK), nk = p1 - p0;
        // Scores: warp w takes keys w, w + 8, ...; lanes take elements lane, lane + 32, ... in order.
        for (int j = warp; j < nk; j += ATTN_THREADS / 32) {
            int p = p0 + j;
            int64_t base = ((int64_t)bt[p / bs] * bs + p % bs) * kv_w + (int64_t)kvh * hd;
            float part[MAX_GROUP];
            for (int g = 0; g < group; g++)
                part[g] = 0;
            for (int e = lane; e < hd; e += 32) {
                float kv = kv_at(a.kc, a.f16, base + e);
                for (int g = 0; g < group; g++)
                    part[g] = fmaf(q[g][e], kv, part[g]);
            }
            for (int g = 0; g < group; g++) {
                float s = part[g];
                for (int off = 16; off > 0; off >>= 1)
                    s += __shfl_xor_sync(0xffffffffu, s, off);
                if (lane == 0)
                    sc[g][j] = s * a.scale;
            }
        }
        __syncthreads();
        // The chunk's max and sum per head: warp g % 8 reduces head g (keys lane, lane + 32, ...).
        for (int g = warp; g < group; g += ATTN_THREADS / 32) {
            float m = -INFINITY;
            for (int j = lane; j < nk; j += 32)
                m = fmaxf(m, sc[g][j]);
            for (int off = 16; off > 0; off >>= 1)
                m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
            float l = 0;
            for (int j = lane; j < nk; j += 32) {
                float e = expf(sc[g][j] - m);
                sc[g][j] = e;
                l += e;
            }
            for (int off = 16; off > 0; off >>= 1)
                l += __shfl_xor_sync(0xffffffffu, l, off);
            if (lane == 0)
                cm[g] = m, cl[g] = l;
        }
        __syncthreads();
        // o = Σ e·v in key order; merged into the running state.
        for (int g = 0; g < group; g++) {
            float m = cm[g], l = cl[g], mx = fmaxf(M[g], m);
            float wa = M[g] == mx ? 1.0f : expf(M[g] - mx), wb = m == mx ? 1.0f : expf(m - mx);
            if (threadIdx.x < hd) {
                float o = 0;
                for (int j = 0; j < nk; j++) {
                    int p = p0 + j;
                    int64_t base = ((int64_t)bt[p / bs] * bs + p % bs) * kv_w + (int64_t)kvh * hd;
                    o = fmaf(sc[g][j], kv_at(a.vc, a.f16, base + threadIdx.x), o);
                }
                O[g] = __fadd_rn(__fmul_rn(O[g], wa), __fmul_rn(o, wb));
            }
            L[g] = __fadd_rn(__fmul_rn(L[g], wa), __fmul_rn(l, wb));
            M[g] = mx;
        }
        __syncthreads();
    }
    for (int g = 0; g < group; g++) {
        float *pp = a.part + (((int64_t)t * a.n_head + (int64_t)kvh * group + g) * CU_ATTN_SPLIT + split) * (hd + 2);
        if (threadIdx.x < hd)
            pp[2 + threadIdx.x] = O[g];
        if (threadIdx.x == 0)
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

extern "C" cudaError_t cu_launch_attention(const void *args, cudaStream_t s)
{
    const cu_attn_args *a = (const cu_attn_args *)args;
    if (a->n_head / a->n_kv > MAX_GROUP || a->hd > MAX_HD || a->hd > ATTN_THREADS)
        return cudaErrorInvalidValue;
    dim3 g1((unsigned)a->n, (unsigned)a->n_kv, CU_ATTN_SPLIT);
    k_attn_split<<<g1, ATTN_THREADS, 0, s>>>(*a);
    cudaError_t e = cu_launched();
    if (e != cudaSuccess)
        return e;
    dim3 g2((unsigned)a->n, (unsigned)a->n_head);
    k_attn_merge<<<g2, a->hd > 32 ? a->hd : 32, 0, s>>>(*a);
    return cu_launched();
}
