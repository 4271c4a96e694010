/*
 * attn_chunk_bench.c - one attention chunk kernel (rp_cpu_attn_chunk_avx512 / _avx2) alone, on
 * one thread, with everything in cache: its multiply-adds per second (scores and values,
 * 2 * rows * keys * head_dim) against the rows in the chunk (1 token's GQA group of 3 up to a
 * 33-token verification span's 99), for a float32 and a float16 cache. Tells the kernel's own
 * efficiency apart from how the work is spread over threads.
 *
 * Not part of the build or the test suite. Build against a configured tree:
 *   cc -O2 -I src bench/attn_chunk_bench.c build/librapid_core.a -lm -lpthread -o /tmp/acb
 *   /tmp/acb [avx2|avx512]
 * rapid-tiny's geometry: head_dim 64, 2 KV heads, GQA group 3, block size 16; each figure is
 * the best of 30 timings of 200 chunk calls of 128 keys. Compare builds side by side in one
 * session: the machine's load moves the figures.
 */
#include "backend/cpu/cpu_int.h"

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
    enum { HD = 64, NKV = 2, GROUP = 3, BS = 16, KEYS = RP_ATTN_CHUNK, MAXTOK = 33 };
    bool avx2 = argc > 1 && strcmp(argv[1], "avx2") == 0;
    void (*kernel)(const rp_attn_chunk *) = avx2 ? rp_cpu_attn_chunk_avx2 : rp_cpu_attn_chunk_avx512;
    size_t slots = KEYS + MAXTOK, width = (size_t)NKV * HD;
    float *k32 = rp_malloc_aligned(slots * width * 4), *v32 = rp_malloc_aligned(slots * width * 4);
    uint16_t *k16 = rp_malloc_aligned(slots * width * 2), *v16 = rp_malloc_aligned(slots * width * 2);
    for (size_t i = 0; i < slots * width; i++) {
        k16[i] = rp_f32_to_fp16(rnd());
        v16[i] = rp_f32_to_fp16(rnd());
        k32[i] = rp_fp16_to_f32(k16[i]);
        v32[i] = rp_fp16_to_f32(v16[i]);
    }
    int32_t bt[(KEYS + MAXTOK) / BS + 1];
    for (int i = 0; i < (int)(sizeof(bt) / sizeof(bt[0])); i++)
        bt[i] = i;
    float *q = rp_malloc_aligned((size_t)MAXTOK * NKV * GROUP * HD * 4);
    for (int i = 0; i < MAXTOK * NKV * GROUP * HD; i++)
        q[i] = rnd();
    int rows_max = MAXTOK * GROUP;
    float *scores = rp_malloc_aligned((size_t)rows_max * RP_ATTN_CHUNK * 4);
    float *m = rp_malloc_aligned((size_t)rows_max * 4), *l = rp_malloc_aligned((size_t)rows_max * 4);
    float *o = rp_malloc_aligned((size_t)rows_max * HD * 4), *tmp = rp_malloc_aligned(2 * RP_ATTN_CHUNK * HD * 4);
    static const int toks[] = {1, 2, 4, 8, 16, 27, 33};
    printf("attention chunk (%s), head_dim %d, group %d, %d keys: GMAC/s by tokens in the span\n",
           avx2 ? "avx2" : "avx512", HD, GROUP, KEYS);
    for (int f16 = 0; f16 < 2; f16++) {
        printf("%s", f16 ? "f16" : "f32");
        for (size_t ti = 0; ti < sizeof(toks) / sizeof(toks[0]); ti++) {
            int nt = toks[ti], end[MAXTOK];
            for (int i = 0; i < nt; i++) // the span's last tokens end the chunk: all see every key
                end[i] = KEYS;
            rp_attn_chunk a = {.q = q,
                               .q_stride = (size_t)NKV * GROUP * HD,
                               .k = f16 ? (const void *)k16 : (const void *)k32,
                               .v = f16 ? (const void *)v16 : (const void *)v32,
                               .stride = width,
                               .f16 = f16,
                               .kv_tmp = tmp,
                               .bt = bt,
                               .bs = BS,
                               .p0 = 0,
                               .p1 = KEYS,
                               .end = end,
                               .n_tok = nt,
                               .n_q = GROUP,
                               .hd = HD,
                               .scale = 0.125f,
                               .scores = scores,
                               .m = m,
                               .l = l,
                               .o = o};
            double best = 1e9;
            for (int r = 0; r < 30; r++) {
                double t0 = rp_time_s();
                for (int c = 0; c < 200; c++)
                    kernel(&a);
                double dt = (rp_time_s() - t0) / 200;
                best = dt < best ? dt : best;
            }
            printf("  t%-2d %5.1f", nt, 2.0 * nt * GROUP * KEYS * HD / best / 1e9);
        }
        printf("\n");
    }
    return 0;
}
