/*
 * cuda_rows.cu - the CUDA backend's row and element ops: embedding rows (any weight
 * type, dequantized as the CPU does), row gathers, RMS norm, rotary embedding,
 * silu·mul, adds, argmax.
 *
 * Reductions have a fixed order: rmsnorm sums squares in double, each thread its
 * groups of 4 elements t, t + T, ... in order (T from the row's width alone), then a
 * fixed shuffle tree per warp and the warps in order (the CPU sums in eight double
 * lanes: the two agree to float rounding); argmax compares
 * (valid, value, -index), an order-free rule. Nothing depends on the batch.
 */
#include "cuda_common.cuh"

#include <math.h>

/* ---- embedding rows ---- */

__global__ void k_get_rows(cu_weight table, const cu_batch *b, float *out)
{
    cu_kernel_start();
    int t = blockIdx.y;
    int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= table.cols)
        return;
    int32_t id = b->tokens[t];
    out[(int64_t)t * table.cols + e] = cu_weight_elem(table, id, e);
}

extern "C" cudaError_t cu_launch_get_rows(const void *args, cudaStream_t s)
{
    const cu_get_rows_args *a = (const cu_get_rows_args *)args;
    dim3 grid((unsigned)((a->table.cols + 255) / 256), (unsigned)a->n);
    return cu_enqueue(k_get_rows, grid, 256, s, a->table, a->b, a->out);
}

/* ---- gathers ---- */

__global__ void k_gather(const float *src, float *dst, const cu_batch *b, bool logit, int width)
{
    cu_kernel_start();
    int i = blockIdx.y;
    const int32_t *idx = logit ? b->logit_rows : b->rows;
    int64_t r = idx[i];
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < width; e += gridDim.x * blockDim.x)
        dst[(int64_t)i * width + e] = src[r * width + e];
}

extern "C" cudaError_t cu_launch_gather(const void *args, cudaStream_t s)
{
    const cu_gather_args *a = (const cu_gather_args *)args;
    dim3 grid((unsigned)((a->width + 255) / 256), (unsigned)a->n);
    return cu_enqueue(k_gather, grid, 256, s, a->src, a->dst, a->b, a->logit, a->width);
}

/* ---- rmsnorm ---- */

#define NORM_MAX_THREADS 1024
#define NORM_PER_THREAD 4 // groups of 4 elements a thread holds in registers (wider rows re-read them)

// The threads a row of `width` floats takes: one group of 4 elements each (a warp at least,
// NORM_MAX_THREADS at most). A function of the width alone: it sets the summation order.
static int norm_threads(int width)
{
    int groups = (width + 3) / 4, t = (groups + 31) / 32 * 32;
    return t < NORM_MAX_THREADS ? t : NORM_MAX_THREADS;
}

// Squares of group g (elements 4g .. 4g+3 that exist) in element order, in double.
__device__ __forceinline__ double group_ss(float4 v, int64_t e, int width)
{
    double s = (double)v.x * v.x;
    if (e + 1 < width)
        s += (double)v.y * v.y;
    if (e + 2 < width)
        s += (double)v.z * v.z;
    if (e + 3 < width)
        s += (double)v.w * v.w;
    return s;
}

__device__ __forceinline__ float4 load_group(const float *xr, int64_t e, int width, bool vec)
{
    if (vec)
        return *(const float4 *)(xr + e);
    float4 v = {xr[e], 0.f, 0.f, 0.f};
    if (e + 1 < width)
        v.y = xr[e + 1];
    if (e + 2 < width)
        v.z = xr[e + 2];
    if (e + 3 < width)
        v.w = xr[e + 3];
    return v;
}

// (x·inv)·w for the group's elements that exist, as the CPU rounds it.
__device__ __forceinline__ void store_group(float *orow, const float *w, float4 v, float inv, int64_t e, int width)
{
    float xs[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int j = 0; j < 4; j++)
        if (e + j < width)
            orow[e + j] = __fmul_rn(__fmul_rn(xs[j], inv), w[e + j]);
}

// One block per row. Thread t takes the groups t, t + T, ... (T threads, norm_threads):
// every load is issued before the sums that need it (a row costs one memory round trip,
// not one per element), squares summed in double in group order, then a fixed shuffle
// tree per warp and the warps' sums in warp order.
__global__ void __launch_bounds__(NORM_MAX_THREADS) k_rmsnorm(const float *x, const float *w, float *out, float eps,
                                                               int width)
{
    cu_kernel_start();
    __shared__ double part[NORM_MAX_THREADS / 32];
    __shared__ float inv_s;
    int64_t r = blockIdx.x;
    const float *xr = x + r * width;
    const int T = blockDim.x, groups = (width + 3) / 4;
    const bool vec = width % 4 == 0 && (uintptr_t)x % 16 == 0; // every row 16-byte aligned
    float4 v[NORM_PER_THREAD];
#pragma unroll
    for (int k = 0; k < NORM_PER_THREAD; k++) {
        int g = threadIdx.x + k * T;
        if (g < groups)
            v[k] = load_group(xr, (int64_t)g * 4, width, vec);
    }
    double ss = 0;
#pragma unroll
    for (int k = 0; k < NORM_PER_THREAD; k++) {
        int g = threadIdx.x + k * T;
        if (g < groups)
            ss += group_ss(v[k], (int64_t)g * 4, width);
    }
    for (int g = threadIdx.x + NORM_PER_THREAD * T; g < groups; g += T) // rows past 16 K elements
        ss += group_ss(load_group(xr, (int64_t)g * 4, width, vec), (int64_t)g * 4, width);
    for (int off = 16; off > 0; off >>= 1)
        ss += __shfl_down_sync(0xffffffffu, ss, off);
    if (threadIdx.x % 32 == 0)
        part[threadIdx.x / 32] = ss;
    __syncthreads();
    if (threadIdx.x == 0) {
        double tot = 0;
        for (int i = 0; i < T / 32; i++)
            tot += part[i];
        inv_s = (float)(1.0 / sqrt(tot / width + eps));
    }
    __syncthreads();
    float inv = inv_s;
    float *orow = out + r * width;
#pragma unroll
    for (int k = 0; k < NORM_PER_THREAD; k++) {
        int g = threadIdx.x + k * T;
        if (g < groups)
            store_group(orow, w, v[k], inv, (int64_t)g * 4, width);
    }
    for (int g = threadIdx.x + NORM_PER_THREAD * T; g < groups; g += T)
        store_group(orow, w, load_group(xr, (int64_t)g * 4, width, vec), inv, (int64_t)g * 4, width);
}

extern "C" cudaError_t cu_launch_rmsnorm(const void *args, cudaStream_t s)
{
    const cu_rmsnorm_args *a = (const cu_rmsnorm_args *)args;
    return cu_enqueue(k_rmsnorm, dim3(a->rows), norm_threads(a->width), s, a->x, a->w, a->out, a->eps, a->width);
}

/* ---- rope ---- */

__global__ void k_rope(float *x, const float *inv_freq, const cu_batch *b, int n_head, int head_dim, int rot_dim,
                       bool neox)
{
    cu_kernel_start();
    int t = blockIdx.y, half = rot_dim / 2;
    int k = blockIdx.x * blockDim.x + threadIdx.x; // (head, pair)
    if (k >= n_head * half)
        return;
    int h = k / half, i = k % half;
    float a = __fmul_rn((float)b->pos[t], inv_freq[i]); // the angle is a float32 product, as transformers
    float c = cosf(a), sn = sinf(a);
    float *v = x + ((int64_t)t * n_head + h) * head_dim;
    int i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
    float x0 = v[i0], x1 = v[i1];
    v[i0] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, sn));
    v[i1] = __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, sn));
}

extern "C" cudaError_t cu_launch_rope(const void *args, cudaStream_t s)
{
    const cu_rope_args *a = (const cu_rope_args *)args;
    int pairs = a->n_head * (a->rot_dim / 2);
    dim3 grid((unsigned)((pairs + 127) / 128), (unsigned)a->n);
    return cu_enqueue(k_rope, grid, 128, s, a->x, a->inv_freq, a->b, a->n_head, a->head_dim, a->rot_dim, a->neox);
}

/* ---- element-wise ---- */

__global__ void k_elementwise(int op, const float *a, const float *b, float *out, size_t count, int width)
{
    cu_kernel_start();
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x) {
        if (op == CU_EW_SILU_MUL) {
            float g = a[i];
            out[i] = __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), b[i]);
        } else if (op == CU_EW_ADD) {
            out[i] = __fadd_rn(out[i], a[i]);
        } else if (op == CU_EW_SIGMOID_MUL) {
            out[i] = __fmul_rn(b[i], __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-a[i / (size_t)width]))));
        } else {
            out[i] = __fadd_rn(out[i], a[i % (size_t)width]);
        }
    }
}

extern "C" cudaError_t cu_launch_elementwise(const void *args, cudaStream_t s)
{
    const cu_elementwise_args *a = (const cu_elementwise_args *)args;
    size_t blocks = (a->count + 255) / 256;
    return cu_enqueue(k_elementwise, dim3((unsigned)(blocks < 65535 ? blocks : 65535)), 256, s, a->op, a->a, a->b,
                      a->out, a->count, a->width);
}

/* ---- argmax ---- */

#define ARGMAX_THREADS 1024

// a beats b: valid (not NaN) first, then the larger value, then the smaller index.
__device__ __forceinline__ bool am_better(float va, int ia, float vb, int ib)
{
    bool oka = va == va, okb = vb == vb;
    if (oka != okb)
        return oka;
    if (oka && va != vb)
        return va > vb;
    return ia < ib;
}

__global__ void k_argmax(const float *x, int32_t *out, int width)
{
    cu_kernel_start();
    __shared__ float sv[ARGMAX_THREADS];
    __shared__ int si[ARGMAX_THREADS];
    const float *row = x + (int64_t)blockIdx.x * width;
    float bv = NAN;
    int bi = 0x7fffffff;
    for (int i = threadIdx.x; i < width; i += ARGMAX_THREADS)
        if (am_better(row[i], i, bv, bi))
            bv = row[i], bi = i;
    sv[threadIdx.x] = bv, si[threadIdx.x] = bi;
    __syncthreads();
    for (int step = ARGMAX_THREADS / 2; step > 0; step >>= 1) {
        if (threadIdx.x < step && am_better(sv[threadIdx.x + step], si[threadIdx.x + step], sv[threadIdx.x],
                                            si[threadIdx.x]))
            sv[threadIdx.x] = sv[threadIdx.x + step], si[threadIdx.x] = si[threadIdx.x + step];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        out[blockIdx.x] = sv[0] == sv[0] ? si[0] : 0; // all NaN: 0
}

extern "C" cudaError_t cu_launch_argmax(const void *args, cudaStream_t s)
{
    const cu_argmax_args *a = (const cu_argmax_args *)args;
    return cu_enqueue(k_argmax, dim3(a->rows), ARGMAX_THREADS, s, a->x, a->out, a->width);
}
