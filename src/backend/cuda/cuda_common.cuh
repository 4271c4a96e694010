/*
 * cuda_common.cuh - device helpers the CUDA backend's kernels share: launching
 * (cu_enqueue, cu_kernel_start), half and bfloat16 conversions, the BF16 tile layout,
 * and reading one element of a weight of any type from its planes (cuda_int.h's cu_weight), with the CPU
 * reference's float operations, uncontracted (quant.c's dequantizers: the same
 * bits).
 */
#ifndef RP_CUDA_COMMON_CUH
#define RP_CUDA_COMMON_CUH

#include "cuda_int.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

/* ---- launching: programmatic dependent launch ----
 *
 * Every kernel is enqueued by cu_enqueue, which (while cu_pdl is on) lets it start before
 * the kernel ahead of it on the stream has finished, so that one kernel's launch and first
 * loads overlap the other's last blocks. The rule that keeps this exact: every kernel's
 * first statement is cu_kernel_start(), whose wait returns once the kernels ahead have
 * finished and their writes are visible (since each of them waited in turn, that is every
 * kernel before), and nothing before it reads or writes activations, the KV cache or the
 * batch; only weights, which nothing in a forward writes, may be touched before it (matmuls
 * may prefetch theirs into L2: cu_prefetch_l2). Right after the wait it lets the next
 * kernel's blocks start (they wait in their own cu_kernel_start), so at most two kernels
 * overlap.
 */

__device__ __forceinline__ void cu_kernel_start(void)
{
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" :::);
}

// Asks the copy engine to bring [p, p + bytes) into L2 (p 16-byte aligned, bytes a multiple
// of 16); no registers held, nothing waited for.
__device__ __forceinline__ void cu_prefetch_l2(const void *p, uint32_t bytes)
{
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
}

// Enqueues kernel<<<grid, threads, 0, s>>>(args...), returning the launch's own error (a bad
// configuration); errors inside a kernel show at the stream's next synchronize.
template <typename... P, typename... A>
static inline cudaError_t cu_enqueue(void (*kernel)(P...), dim3 grid, unsigned threads, cudaStream_t s, A... args)
{
    cudaLaunchAttribute at;
    at.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = dim3(threads);
    cfg.stream = s;
    cfg.attrs = &at;
    cfg.numAttrs = cu_pdl ? 1 : 0;
    cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, args...);
    return e != cudaSuccess ? e : cudaGetLastError();
}

__device__ __forceinline__ float cu_h2f(uint16_t h)
{
    return __half2float(__ushort_as_half(h));
}

__device__ __forceinline__ float cu_bf2f(uint16_t b)
{
    return __uint_as_float((uint32_t)b << 16);
}

// A K or V value as the cache stores it in halves: clamped to ±65504 (never an
// infinity), then rounded to nearest even; a NaN stays a NaN (the CPU's rp_cpu_kv_half).
__device__ __forceinline__ uint16_t cu_kv_half(float x)
{
    x = x > 65504.0f ? 65504.0f : x < -65504.0f ? -65504.0f : x;
    return __half_as_ushort(__float2half_rn(x));
}

// The 6-bit scale and min of sub-block j of a Q4_K/Q5_K super-block (quant.h's rp_q4k_scale_min).
__device__ __forceinline__ void cu_q4k_scale_min(int j, const uint8_t *s, int *sc, int *m)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

// Tiles of a BF16 weight along a row (cuda_int.h's cu_weight).
__host__ __device__ constexpr int64_t cu_tiles_k(int64_t cols)
{
    return (cols + 15) / 16;
}

// The byte offset of element (r, e) in a BF16 weight's tiles: in tile (r / 16, e / 16),
// lane 4 (i % 8) + (j % 8) / 2 holds it (i = r % 16, j = e % 16), in word i / 8 + 2 (j / 8),
// half j % 2 (mma.m16n8k16's A fragment: rows g, g + 8 and columns 2q, 2q + 1, 2q + 8, 2q + 9
// of lane 4g + q).
__host__ __device__ inline int64_t cu_tile_offset(int64_t cols, int64_t r, int64_t e)
{
    int64_t tile = (r / 16) * cu_tiles_k(cols) + e / 16;
    int i = (int)(r % 16), j = (int)(e % 16);
    int lane = (i % 8) * 4 + (j % 8) / 2, word = i / 8 + 2 * (j / 8);
    return ((tile * 32 + lane) * 4 + word) * 4 + (j % 2) * 2;
}

// Element e of row r of a weight, as float: the CPU's dequantizer's value.
__device__ __forceinline__ float cu_weight_elem(const cu_weight &w, int64_t r, int64_t e)
{
    switch (w.type) {
    case CU_F32: return ((const float *)w.plane[0])[r * w.cols + e];
    case CU_F16: return cu_h2f(((const uint16_t *)w.plane[0])[r * w.cols + e]);
    case CU_BF16: return cu_bf2f(*(const uint16_t *)(w.plane[0] + cu_tile_offset(w.cols, r, e)));
    case CU_BF16_ROWS: return cu_bf2f(((const uint16_t *)w.plane[0])[r * w.cols + e]);
    case CU_Q8_0: {
        int64_t b = r * (w.cols / 32) + e / 32;
        float d = cu_h2f(((const uint16_t *)w.plane[1])[b]);
        return __fmul_rn((float)((const int8_t *)w.plane[0])[b * 32 + e % 32], d);
    }
    case CU_Q4_0: {
        int64_t b = r * (w.cols / 32) + e / 32;
        int j = (int)(e % 32);
        uint8_t q = w.plane[0][b * 16 + j % 16];
        int v = (j < 16 ? q & 0xF : q >> 4) - 8;
        return __fmul_rn((float)v, cu_h2f(((const uint16_t *)w.plane[1])[b]));
    }
    case CU_Q5_0: {
        int64_t b = r * (w.cols / 32) + e / 32;
        int j = (int)(e % 32);
        uint8_t q = w.plane[0][b * 16 + j % 16];
        const uint8_t *h = w.plane[1] + b * 4;
        uint32_t qh = h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 24;
        int v = ((j < 16 ? q & 0xF : q >> 4) | (int)((qh >> j) & 1) << 4) - 16;
        return __fmul_rn((float)v, cu_h2f(((const uint16_t *)w.plane[2])[b]));
    }
    case CU_Q4_K:
    case CU_Q5_K: {
        bool five = w.type == CU_Q5_K;
        int64_t b = r * (w.cols / 256) + e / 256;
        int j = (int)(e % 256), c = j / 64, l = j % 32, sub = j / 32;
        const uint8_t *head = w.plane[five ? 2 : 1] + b * 16;
        float d = cu_h2f(head[0] | head[1] << 8), dmin = cu_h2f(head[2] | head[3] << 8);
        int sc, m;
        cu_q4k_scale_min(sub, head + 4, &sc, &m);
        uint8_t q = w.plane[0][b * 128 + 32 * c + l];
        int v = sub & 1 ? q >> 4 : q & 0xF;
        if (five && (w.plane[1][b * 32 + l] >> sub) & 1)
            v += 16;
        return __fsub_rn(__fmul_rn(__fmul_rn(d, (float)sc), (float)v), __fmul_rn(dmin, (float)m));
    }
    case CU_Q6_K: {
        int64_t b = r * (w.cols / 256) + e / 256;
        int j = (int)(e % 256), c = j / 128, q4 = (j % 128) / 32, l = j % 32;
        uint8_t ql = w.plane[0][b * 128 + 64 * c + l + (q4 & 1) * 32];
        uint8_t qh = w.plane[1][b * 64 + 32 * c + l];
        int v = ((q4 < 2 ? ql & 0xF : ql >> 4) | ((qh >> (2 * q4)) & 3) << 4) - 32;
        int sc = ((const int8_t *)w.plane[2])[b * 16 + 8 * c + l / 16 + 2 * q4];
        float d = cu_h2f(((const uint16_t *)w.plane[3])[b]);
        return __fmul_rn(__fmul_rn(d, (float)sc), (float)v);
    }
    }
    return 0.0f;
}

#endif
