/*
 * matmul_batch_bench.c - batched BF16 matmul throughput (GMAC/s) on rapid-tiny's shapes,
 * for 1..33 tokens: the kernels' efficiency with weights and activations in cache.
 *
 * Not part of the build or the test suite. Build against a configured tree:
 *   cc -O2 -I src bench/matmul_batch_bench.c build/librapid_core.a -lm -lpthread -o /tmp/mmbb
 *   /tmp/mmbb [threads] [--big]
 * Each shape is run side by side with float32 activations ("f32") and, where the CPU
 * has AVX512_BF16, activations rounded to bf16 on its dot product ("bf16") and, where it
 * has AMX, on AMX's tiles ("amx"); also the 0.5B model's shapes with --big. Each shape (ne0 x rows: gate/up 384 x 2048,
 * down 1024 x 384, o 384 x 384, the output head 384 x 8192) gets random BF16 weights; for each token count the best of
 * 30 timings of 10 matmuls is reported as multiply-adds per second. Compare builds side by side in one session: the
 * machine's load moves the figures.
 */
#include "backend/cpu/cpu_int.h"
#include "backend/cpu/mm_kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t lcg = 88172645463325252ull;
static float rnd(void) // [-1, 1]
{
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((int)((lcg >> 33) % 2001) - 1000) * 1e-3f;
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    rp_pool *pool;
    if (rp_pool_create(threads, &pool) != RP_OK)
        return 1;
    static const int64_t tiny[][2] = {{384, 2048}, {1024, 384}, {384, 384}, {384, 8192}};
    static const int64_t big[][2] = {{896, 9728}, {4864, 896}, {896, 1152}, {896, 896}};
    bool use_big = argc > 2 && strcmp(argv[2], "--big") == 0;
    const int64_t(*shapes)[2] = use_big ? big : tiny;
    static const int ns[] = {1, 2, 4, 6, 8, 12, 16, 27, 33};
    enum { NS = sizeof(ns) / sizeof(ns[0]) };
    printf("BF16 matmul, %d thread%s, GMAC/s by tokens\n", threads, threads == 1 ? "" : "s");
    for (size_t s = 0; s < 4; s++) {
        int64_t ne0 = shapes[s][0], rows = shapes[s][1];
        uint16_t *w = rp_malloc_aligned((size_t)(ne0 * rows) * 2);
        for (int64_t i = 0; i < ne0 * rows; i++)
            w[i] = rp_f32_to_bf16(rnd());
        rp_tensor t = {.type = RP_DTYPE_BF16, .ne = {ne0, rows}, .data = w, .nbytes = (size_t)(ne0 * rows) * 2};
        for (int mode = 0; mode < 3; mode++) {
            rp_cpu_force_no_amx(mode != 2);
            if ((mode == 1 && !rp_cpu_has_bf16_dot()) || (mode == 2 && !rp_cpu_has_amx()))
                continue;
            printf("%4lld x %-5lld %s", (long long)ne0, (long long)rows,
                   (const char *[]){"f32 ", "bf16", "amx "}[mode]);
            for (int k = 0; k < NS; k++) {
                int n = ns[k];
                float *x = rp_malloc_aligned((size_t)(n * ne0) * sizeof(float));
                float *y = rp_malloc_aligned((size_t)(n * rows) * sizeof(float));
                void *scratch = rp_malloc_aligned(rp_cpu_matmul_scratch_bytes(RP_DTYPE_BF16, ne0, n) + 64);
                for (int64_t i = 0; i < n * ne0; i++)
                    x[i] = rnd();
                double best = 1e9;
                for (int r = 0; r < 30; r++) {
                    double t0 = rp_time_s();
                    for (int q = 0; q < 10; q++)
                        rp_cpu_matmul(pool, &t, x, n, y, scratch, mode > 0);
                    double dt = (rp_time_s() - t0) / 10;
                    best = dt < best ? dt : best;
                }
                printf("  n%-2d %5.1f", n, (double)n * (double)ne0 * (double)rows / best / 1e9);
                rp_free_aligned(x);
                rp_free_aligned(y);
                rp_free_aligned(scratch);
            }
            printf("\n");
        }
        rp_free_aligned(w);
    }
    rp_pool_destroy(pool);
    return 0;
}
