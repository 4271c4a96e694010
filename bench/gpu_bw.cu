/*
 * gpu_bw.cu - the GPU's streaming-read ceiling, measured by the project's own kernel:
 * a grid of 16-byte loads over a buffer far larger than the L2 (4 GiB by default),
 * every byte read once per pass, the loaded words folded into one value per thread
 * (so nothing is optimized away). Prints the median of --runs passes in GB/s of
 * bytes read. bench/gpu_decode.sh divides it by the weight bytes a decode step reads
 * to get the step's ceiling. Not a test.
 *
 * usage: gpu-bw-bench [--gib N] [--runs R] [--device N]
 */
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CHECK(call)                                                                                                    \
    do {                                                                                                               \
        cudaError_t e_ = (call);                                                                                       \
        if (e_ != cudaSuccess) {                                                                                       \
            fprintf(stderr, "gpu-bw-bench: %s: %s\n", #call, cudaGetErrorString(e_));                                  \
            return 1;                                                                                                  \
        }                                                                                                              \
    } while (0)

__global__ void fill(uint4 *p, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = make_uint4((unsigned)i, (unsigned)(i * 2654435761u), (unsigned)(i >> 7), 0x9e3779b9u ^ (unsigned)i);
}

__global__ void read_all(const uint4 *__restrict__ p, size_t n, unsigned *sink)
{
    unsigned acc = 0;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) { // four loads in flight per thread
        uint4 a = p[i], b = p[i + stride], c = p[i + 2 * stride], d = p[i + 3 * stride];
        acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
    }
    for (; i < n; i += stride) {
        uint4 a = p[i];
        acc ^= a.x ^ a.y ^ a.z ^ a.w;
    }
    sink[(size_t)blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

int main(int argc, char **argv)
{
    double gib = 4;
    int runs = 20, dev = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--gib") && i + 1 < argc)
            gib = atof(argv[++i]);
        else if (!strcmp(argv[i], "--runs") && i + 1 < argc)
            runs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--device") && i + 1 < argc)
            dev = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: gpu-bw-bench [--gib N] [--runs R] [--device N]\n");
            return 2;
        }
    }
    CHECK(cudaSetDevice(dev));
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, dev));
    size_t bytes = (size_t)(gib * (1u << 30)) & ~(size_t)15, n = bytes / 16;
    uint4 *p;
    unsigned *sink;
    int blocks = prop.multiProcessorCount * 8, threads = 256;
    CHECK(cudaMalloc(&p, bytes));
    CHECK(cudaMalloc(&sink, (size_t)blocks * threads * sizeof(unsigned)));
    fill<<<blocks, threads>>>(p, n);
    CHECK(cudaGetLastError());
    cudaEvent_t e0, e1;
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
    std::vector<double> gbs;
    for (int r = 0; r < runs + 3; r++) {
        CHECK(cudaEventRecord(e0));
        read_all<<<blocks, threads>>>(p, n, sink);
        CHECK(cudaEventRecord(e1));
        CHECK(cudaEventSynchronize(e1));
        CHECK(cudaGetLastError());
        float ms;
        CHECK(cudaEventElapsedTime(&ms, e0, e1));
        if (r >= 3) // warm-up passes left out
            gbs.push_back(bytes / (ms * 1e-3) / 1e9);
    }
    std::sort(gbs.begin(), gbs.end());
    printf("gpu-bw-bench: %s, %.1f GiB read %d times: median %.1f GB/s (min %.1f, max %.1f)\n", prop.name, gib, runs,
           gbs[gbs.size() / 2], gbs.front(), gbs.back());
    return 0;
}
