/*
 * matmul_bench.c - decode (n = 1) matmul throughput against the machine's memory-read ceiling.
 *
 * Not part of the build or the test suite. Build against a configured tree:
 *   cc -O2 -mavx2 -mfma -I src bench/matmul_bench.c /tmp/build-kern/librapid_core.a -lm -lpthread -o /tmp/mmbench
 *   /tmp/mmbench [threads] [MiB per weight tensor] [repetitions] [types, e.g. bf16,q8_0] [ne0]
 * For each weight type it builds one tensor of ne0 = 4096 columns (or ne0: 896 is
 * the 0.5B decode model's hidden size, whose short rows weigh per-row costs) and as many rows
 * as fit the size (far beyond the caches), times y = W·x for one token on the
 * pool (best of several runs), and compares the bytes of W read per second with
 * a plain AVX2 read loop over a buffer of the same size measured in the same run.
 */
#include "backend/cpu/cpu_int.h"
#include "backend/cpu/mm_kernels.h"

#include <immintrin.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct read_job {
    const uint8_t *buf;
    size_t size;
    double sink[64];
} read_job;

static void read_task(void *p, int ith, int nth)
{
    read_job *j = p;
    int64_t lo, hi;
    rp_split_range((int64_t)(j->size / 128), ith, nth, &lo, &hi);
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t i = lo; i < hi; i++) {
        const __m256i *q = (const __m256i *)(j->buf + i * 128);
        a0 = _mm256_xor_si256(a0, _mm256_load_si256(q));
        a1 = _mm256_xor_si256(a1, _mm256_load_si256(q + 1));
        a2 = _mm256_xor_si256(a2, _mm256_load_si256(q + 2));
        a3 = _mm256_xor_si256(a3, _mm256_load_si256(q + 3));
    }
    __m256i a = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
    j->sink[ith] = (double)_mm256_extract_epi32(a, 0);
}

static uint64_t lcg = 88172645463325252ull;
static uint32_t rnd(void)
{
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(lcg >> 33);
}

// Plausible random weights without NaN/Inf/denormals: random quants, sane scales.
static void fill_weights(rp_dtype t, uint8_t *w, size_t bytes)
{
    if (t == RP_DTYPE_F32) {
        for (size_t i = 0; i < bytes / 4; i++)
            ((float *)w)[i] = ((int)(rnd() % 2001) - 1000) * 1e-3f;
        return;
    }
    if (t == RP_DTYPE_F16 || t == RP_DTYPE_BF16) {
        for (size_t i = 0; i < bytes / 2; i++) {
            float f = ((int)(rnd() % 2001) - 1000) * 1e-3f;
            ((uint16_t *)w)[i] = t == RP_DTYPE_F16 ? rp_f32_to_fp16(f) : rp_f32_to_bf16(f);
        }
        return;
    }
    for (size_t i = 0; i < bytes / 4; i++)
        ((uint32_t *)w)[i] = rnd();
    size_t bb = (size_t)rp_dtype_block_bytes(t);
    for (size_t o = 0; o + bb <= bytes; o += bb) {
        rp_fp16 d = rp_f32_to_fp16(0.01f);
        switch (t) {
        case RP_DTYPE_Q4_K:
        case RP_DTYPE_Q5_K:
            memcpy(w + o, &d, 2);
            memcpy(w + o + 2, &d, 2);
            break;
        case RP_DTYPE_Q6_K:
            memcpy(w + o + 208, &d, 2);
            break;
        default:
            memcpy(w + o, &d, 2);
        }
    }
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    size_t mib = argc > 2 ? (size_t)atoi(argv[2]) : 512;
    int reps = argc > 3 ? atoi(argv[3]) : 10;
    size_t size = mib << 20;
    rp_pool *pool = NULL;
    if (rp_pool_create(threads, &pool) != RP_OK)
        return 1;
    printf("threads %d, kernels %s, %zu MiB per tensor, ne0 %d\n", threads, rp_cpu_simd_name(), mib,
           argc > 5 ? atoi(argv[5]) : 4096);

    uint8_t *buf = rp_malloc_aligned(size);
    memset(buf, 1, size);
    read_job rj = {.buf = buf, .size = size};
    double best_read = 1e30;
    for (int rep = 0; rep < 8; rep++) {
        double t0 = rp_time_s();
        rp_pool_run(pool, read_task, &rj);
        double dt = rp_time_s() - t0;
        best_read = dt < best_read ? dt : best_read;
    }
    double read_gbs = size / best_read / 1e9;
    printf("%-6s %9.2f GB/s  (memory-read ceiling)\n", "read", read_gbs);

    const rp_dtype types[] = {RP_DTYPE_F32,  RP_DTYPE_F16,  RP_DTYPE_BF16, RP_DTYPE_Q8_0, RP_DTYPE_Q4_0,
                              RP_DTYPE_Q5_0, RP_DTYPE_Q4_K, RP_DTYPE_Q5_K, RP_DTYPE_Q6_K};
    const int64_t ne0 = argc > 5 ? atoi(argv[5]) : 4096;
    float *x = rp_malloc_aligned(ne0 * sizeof(float) * 8);
    for (int64_t i = 0; i < ne0 * 8; i++)
        x[i] = ((int)(rnd() % 2001) - 1000) * 1e-3f;
    for (size_t k = 0; k < sizeof(types) / sizeof(types[0]); k++) {
        rp_dtype t = types[k];
        if (argc > 4 && !strstr(argv[4], rp_dtype_name(t)))
            continue;
        size_t rb;
        rp_dtype_row_bytes(t, ne0, &rb);
        int64_t rows = (int64_t)(size / rb);
        fill_weights(t, buf, (size_t)rows * rb);
        // MM_OFFSET=k: weights k bytes past a cache line (an mmap'd file's tensors often are)
        size_t off = getenv("MM_OFFSET") ? (size_t)atoi(getenv("MM_OFFSET")) : 0;
        rows = off ? rows - 1 : rows;
        rp_tensor w = {.type = t, .ne = {ne0, rows}, .data = buf + off, .nbytes = (size_t)rows * rb};
        float *y = rp_malloc_aligned((size_t)rows * sizeof(float) * 8);
        size_t sb = rp_cpu_matmul_scratch_bytes(t, ne0, 8);
        void *scratch = sb ? rp_malloc_aligned(sb) : NULL;
        // alternate read-ceiling and matmul runs so both see the same background load
        double best = 1e30, best_rd = 1e30, sum = 0;
        for (int rep = 0; rep < reps; rep++) {
            double t0 = rp_time_s();
            rp_pool_run(pool, read_task, &rj);
            double t1 = rp_time_s();
            rp_cpu_matmul(pool, &w, x, 1, y, scratch, false);
            double t2 = rp_time_s();
            best_rd = t1 - t0 < best_rd ? t1 - t0 : best_rd;
            best = t2 - t1 < best ? t2 - t1 : best;
            sum += t2 - t1;
        }
        read_gbs = size / best_rd / 1e9;
        // prefill: 8 tokens per weight read
        double best8 = 1e30;
        for (int rep = 0; rep < 3; rep++) {
            double t0 = rp_time_s();
            rp_cpu_matmul(pool, &w, x, 8, y, scratch, false);
            double dt = rp_time_s() - t0;
            best8 = dt < best8 ? dt : best8;
        }
        double gbs = (double)w.nbytes / best / 1e9;
        printf("%-6s %6.2f GB/s  %5.1f%% of read %6.2f GB/s, mean %6.2f GB/s  (n=1: %.2f ms; n=8: %.2f ms = %.2fx n=1)\n",
               rp_dtype_name(t), gbs, 100 * gbs / read_gbs, read_gbs, (double)w.nbytes * reps / sum / 1e9, best * 1e3,
               best8 * 1e3, best8 / best);
        rp_free_aligned(scratch);
        rp_free_aligned(y);
    }
    rp_free_aligned(x);
    rp_free_aligned(buf);
    rp_pool_destroy(pool);
    return 0;
}
