/*
 * cpu_int.h - internal interface between the CPU backend's files.
 *
 * cpu_backend.c fills the backend vtable (buffers, norms, rope, attention, ...)
 * and calls the matmul kernels declared here (matmul.c: scalar reference and
 * dispatch; matmul_avx2.c: AVX2/FMA kernels chosen at run time).
 */
#ifndef RP_CPU_INT_H
#define RP_CPU_INT_H

#include "../backend.h"

// Bytes of scratch rp_cpu_matmul needs for n tokens against a weight of this type
// and row length (activations quantized to the weight's partner type: Q8_0 for
// Q4_0/Q5_0/Q8_0, Q8_K for the K-quants, none for float weights).
size_t rp_cpu_matmul_scratch_bytes(rp_dtype wtype, int64_t ne0, int n);

// y (n, w->ne[1]) = x (n, w->ne[0]) · wᵀ on the pool's threads. scratch holds at
// least rp_cpu_matmul_scratch_bytes(...) bytes, 64-byte aligned. Every output
// element is reduced in the same order whatever n, the token's index and the
// thread count are (see backend.h, Determinism).
void rp_cpu_matmul(rp_pool *pool, const rp_tensor *w, const float *x, int n, float *y, void *scratch);

#endif
