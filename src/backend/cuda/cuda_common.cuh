/*
 * cuda_common.cuh - device helpers the CUDA backend's kernels share: half and
 * bfloat16 conversions, the launch-result idiom, and reading one element of a
 * weight of any type from its planes (cuda_int.h's cu_weight), with the CPU
 * reference's float operations, uncontracted (quant.c's dequantizers: the same
 * bits).
 */
#ifndef RP_CUDA_COMMON_CUH
#define RP_CUDA_COMMON_CUH

#include "cuda_int.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

// The launch's own error (a bad configuration), or cudaSuccess; errors inside a kernel
// show at the stream's next synchronize.
static inline cudaError_t cu_launched(void)
{
    return cudaGetLastError();
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

// Element e of row r of a weight, as float: the CPU's dequantizer's value.
__device__ __forceinline__ float cu_weight_elem(const cu_weight &w, int64_t r, int64_t e)
{
    switch (w.type) {
    case CU_F32: return ((const float *)w.plane[0])[r * w.cols + e];
    case CU_F16: return cu_h2f(((const uint16_t *)w.plane[0])[r * w.cols + e]);
    case CU_BF16: return cu_bf2f(((const uint16_t *)w.plane[0])[r * w.cols + e]);
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
