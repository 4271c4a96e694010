/*
 * cpu_int.h - internal interface between the CPU backend's files.
 *
 * cpu_backend.c fills the backend vtable (buffers, norms, rope, attention, ...)
 * and calls the matmul kernels declared here (matmul.c: scalar reference and
 * dispatch; matmul_avx2.c: AVX2/FMA kernels; matmul_avx512.c: AVX-512/VNNI kernels
 * for some types; the highest level the CPU has is chosen at run time).
 */
#ifndef RP_CPU_INT_H
#define RP_CPU_INT_H

#include "../backend.h"

// Bytes of scratch rp_cpu_matmul needs for n tokens against a weight of this type
// and row length (activations quantized to the weight's partner type: Q8_0 for
// Q4_0/Q5_0/Q8_0, Q8_K for the K-quants, none for float weights) or to a SIMD kernel's own
// layout (BF16 included), whichever is larger, so the size does not depend on the CPU.
size_t rp_cpu_matmul_scratch_bytes(rp_dtype wtype, int64_t ne0, int n);

// y (n, w->ne[1]) = x (n, w->ne[0]) · wᵀ on the pool's threads. scratch holds at
// least rp_cpu_matmul_scratch_bytes(...) bytes, 64-byte aligned. Every output
// element is reduced in the same order whatever n, the token's index and the
// thread count are (see backend.h, Determinism).
void rp_cpu_matmul(rp_pool *pool, const rp_tensor *w, const float *x, int n, float *y, void *scratch);

// Weights per fused group (rp_cpu_matmul_group).
#define RP_MM_MAX_GROUP 4

// True when rp_cpu_matmul_group can run these matmuls as one: 1..RP_MM_MAX_GROUP
// weights of one type and one row length.
bool rp_cpu_matmul_group_fusable(const rp_matmul_desc *mm, int count);

// The matmuls mm[0..count) (see rp_matmul_desc) on x (n, ne0) in one pool run: the
// activations are quantized once (on the calling thread for n <= 2), then the threads
// take chunks of the union of rows from a shared counter. glu (count == 2, same
// shapes): chunks pair rows of mm[0] (gate) and mm[1] (up), and mm[0].y becomes
// silu(gate) * up (mm[1].y keeps up); bias and residual are ignored. Same scratch as
// rp_cpu_matmul; each output element is bitwise what rp_cpu_matmul gives.
void rp_cpu_matmul_group(rp_pool *pool, const rp_matmul_desc *mm, int count, bool glu, const float *x, int n,
                         void *scratch);

#endif
