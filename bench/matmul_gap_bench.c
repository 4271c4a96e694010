/*
 * matmul_gap_bench.c - the time of one one-token BF16 matmul (384 x 2048, weights in
 * cache) called back to back and after idle gaps of busy non-matmul work, with float32
 * and with bf16 activations (AMX where the CPU has it): does the bf16 arithmetic pay a
 * start-up cost after the other ops of a decode step? (On a Xeon it did not: RESULTS.md,
 * "BF16 on Intel's AMX tiles".)
 *
 * Not part of the build or the test suite. Build against a configured tree:
 *   cc -O2 -I src bench/matmul_gap_bench.c build/librapid_core.a -lm -lpthread -o /tmp/gapb
 *   /tmp/gapb [threads]
 */
#include "backend/cpu/cpu_int.h"

#include <stdio.h>
#include <stdlib.h>

static uint64_t lcg = 88172645463325252ull;
static float rnd(void) // [-1, 1]
{
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((int)((lcg >> 33) % 2001) - 1000) * 1e-3f;
}

static void spin(double us)
{
    double t0 = rp_time_s();
    volatile double s = 0;
    while ((rp_time_s() - t0) * 1e6 < us)
        s += 1;
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    rp_pool *pool;
    if (rp_pool_create(threads, &pool) != RP_OK)
        return 1;
    enum { NE0 = 384, ROWS = 2048 };
    uint16_t *w = rp_malloc_aligned((size_t)NE0 * ROWS * 2);
    for (int64_t i = 0; i < (int64_t)NE0 * ROWS; i++)
        w[i] = rp_f32_to_bf16(rnd());
    rp_tensor t = {.type = RP_DTYPE_BF16, .ne = {NE0, ROWS}, .data = w, .nbytes = (size_t)NE0 * ROWS * 2};
    static float x[NE0], y[ROWS];
    for (int i = 0; i < NE0; i++)
        x[i] = rnd();
    void *scratch = rp_malloc_aligned(rp_cpu_matmul_scratch_bytes(RP_DTYPE_BF16, NE0, 1));
    const double gaps[] = {0, 2, 10, 50, 200};
    printf("one-token matmul %d x %d, %d thread%s\n", NE0, ROWS, threads, threads == 1 ? "" : "s");
    for (int mode = 0; mode < 2; mode++)
        for (int g = 0; g < 5; g++) {
            double best = 1e9, sum = 0;
            for (int r = 0; r < 400; r++) {
                spin(gaps[g]);
                double t0 = rp_time_s();
                rp_cpu_matmul(pool, &t, x, 1, y, scratch, mode == 1);
                double dt = rp_time_s() - t0;
                best = dt < best ? dt : best;
                sum += dt;
            }
            printf("%s activations, gap %3.0f us: best %6.2f us, mean %6.2f us\n", mode ? "bf16" : "f32 ", gaps[g],
                   best * 1e6, sum / 400 * 1e6);
        }
    rp_free_aligned(scratch);
    rp_free_aligned(w);
    rp_pool_destroy(pool);
    return 0;
}
