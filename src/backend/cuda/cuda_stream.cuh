/*
 * cuda_stream.cuh - a warp's ring of shared-memory stages that the copy engine fills
 * from device memory (cp.async.bulk, each stage completing on its own mbarrier), so
 * that the bytes a memory-bound kernel has in flight live in shared memory, not in its
 * registers: a warp keeps D - 1 stages loading while it computes on one.
 *
 * Protocol (one warp owns a ring; lane 0 issues, every lane waits and reads):
 *   ring_init                 once, before any copy (lane 0 initializes the barriers)
 *   ring_fill(s, bytes)       lane 0: stage s will receive `bytes` ...
 *   ring_copy(s, off, p, n)   ... lane 0: which arrive as copies of n bytes from p
 *   ring_wait(s, parity)      every lane: stage s's copies have landed (parity: the
 *                             stage's use count % 2)
 *   __syncwarp()              every lane has read the stage, so lane 0 may fill it again
 * Addresses and sizes are multiples of 16 bytes. Copies may be issued before the
 * kernel's cu_kernel_start only from memory that no kernel of a forward writes (weights).
 */
#ifndef RP_CUDA_STREAM_CUH
#define RP_CUDA_STREAM_CUH

#include <stdint.h>

struct cu_ring {
    uint8_t *buf;  // the stages, `stage` bytes each
    uint64_t *bar; // an mbarrier a stage
    int stages, stage;
};

__device__ __forceinline__ uint32_t cu_smem(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

// Lane 0 initializes the barriers (one arrival a phase: ring_fill's) and makes them
// visible to the copy engine; the warp waits for it.
__device__ __forceinline__ void ring_init(const cu_ring &r)
{
    if (threadIdx.x % 32 == 0) {
        for (int s = 0; s < r.stages; s++)
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(cu_smem(&r.bar[s])) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncwarp();
}

// Lane 0: stage s's next phase completes once `bytes` have landed in it.
__device__ __forceinline__ void ring_fill(const cu_ring &r, int s, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(cu_smem(&r.bar[s])), "r"(bytes)
                 : "memory");
}

// Lane 0: n bytes from p into stage s at byte off, counted by its barrier.
__device__ __forceinline__ void ring_copy(const cu_ring &r, int s, uint32_t off, const void *p, uint32_t n)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     cu_smem(r.buf + (size_t)s * r.stage + off)),
                 "l"(p), "r"(n), "r"(cu_smem(&r.bar[s]))
                 : "memory");
}

// Every lane: until stage s's phase of this parity has completed.
__device__ __forceinline__ void ring_wait(const cu_ring &r, int s, uint32_t parity)
{
    uint32_t done = 0;
    while (!done)
        asm volatile("{\n\t.reg .pred p;\n\t"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                     "selp.u32 %0, 1, 0, p;\n\t}"
                     : "=r"(done)
                     : "r"(cu_smem(&r.bar[s])), "r"(parity)
                     : "memory");
}

__device__ __forceinline__ const uint8_t *ring_stage(const cu_ring &r, int s)
{
    return r.buf + (size_t)s * r.stage;
}

#endif
