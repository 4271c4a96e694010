/*
 * decode_bench.c - single-stream decode speed against the memory-bandwidth ceiling.
 *
 * Decoding one token reads every weight once, so one stream's ceiling is
 * (memory read bandwidth) / (weight bytes per token). This program measures
 * both in one run, on the same threads: the read bandwidth of this machine
 * (a multi-threaded AVX2 sum over a buffer far larger than the caches, best of
 * several passes) and the model's decode speed (greedy, after a short prompt),
 * and prints the ratio. It also times the prefill of the prompt (--prompt N
 * tokens, default 16; one forward of up to 512 tokens at a time). Not a test:
 * numbers go to bench/RESULTS.md.
 *
 * usage: decode-bench MODEL [--quant q8|q4] [--threads N] [-n TOKENS] [--prompt N]
 */
#include "model/model.h"

#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct bw_job {
    const float *buf;
    size_t n; // floats
    float sums[256];
} bw_job;

__attribute__((target("avx2"))) static void bw_worker(void *ctx, int ith, int nth)
{
    bw_job *j = ctx;
    int64_t lo, hi;
    rp_split_range((int64_t)(j->n / 32), ith, nth, &lo, &hi);
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t i = lo; i < hi; i++) {
        const float *p = j->buf + i * 32;
        a0 = _mm256_add_ps(a0, _mm256_load_ps(p));
        a1 = _mm256_add_ps(a1, _mm256_load_ps(p + 8));
        a2 = _mm256_add_ps(a2, _mm256_load_ps(p + 16));
        a3 = _mm256_add_ps(a3, _mm256_load_ps(p + 24));
    }
    float out[8];
    _mm256_storeu_ps(out, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    j->sums[ith] = out[0] + out[1] + out[2] + out[3] + out[4] + out[5] + out[6] + out[7];
}

// Read bandwidth in bytes/s over a 1 GiB buffer with n_threads threads.
static double measure_bandwidth(int n_threads)
{
    size_t bytes = (size_t)1 << 30;
    float *buf = rp_malloc_aligned(bytes);
    if (!buf)
        return 0;
    for (size_t i = 0; i < bytes / sizeof(float); i++)
        buf[i] = (float)(i & 1023);
    rp_pool *pool;
    if (rp_pool_create(n_threads, &pool)) {
        rp_free_aligned(buf);
        return 0;
    }
    bw_job j = {buf, bytes / sizeof(float), {0}};
    double best = 1e30;
    for (int r = 0; r < 6; r++) {
        double t0 = rp_time_s();
        rp_pool_run(pool, bw_worker, &j);
        double dt = rp_time_s() - t0;
        if (r > 0 && dt < best) // first pass warms the pages and the pool
            best = dt;
    }
    rp_pool_destroy(pool);
    rp_free_aligned(buf);
    return bytes / best;
}

int main(int argc, char **argv)
{
    const char *path = NULL;
    rp_model_params mp;
    rp_model_params_default(&mp);
    int n_gen = 64, n_prompt = 16;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quant") == 0 && i + 1 < argc) {
            const char *q = argv[++i];
            mp.quant = strcmp(q, "q8") == 0 ? RP_DTYPE_Q8_0 : strcmp(q, "q4") == 0 ? RP_DTYPE_Q4_0 : RP_DTYPE_F32;
        } else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            mp.n_threads = atoi(argv[++i]);
        } else if (strcmp(argv[i], "-n") == 0 && i + 1 < argc) {
            n_gen = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--prompt") == 0 && i + 1 < argc) {
            n_prompt = atoi(argv[++i]);
        } else if (argv[i][0] != '-' && !path) {
            path = argv[i];
        } else {
            fprintf(stderr, "usage: decode-bench MODEL [--quant q8|q4] [--threads N] [-n TOKENS] [--prompt N]\n");
            return 2;
        }
    }
    if (!path || n_gen < 2 || n_prompt < 1 || n_prompt > 32768) {
        fprintf(stderr, "usage: decode-bench MODEL [--quant q8|q4] [--threads N] [-n TOKENS] [--prompt N]\n");
        return 2;
    }
    rp_model *m;
    if (rp_model_load(path, &mp, &m)) {
        fprintf(stderr, "decode-bench: %s\n", rp_error_message());
        return 1;
    }
    const rp_model_config *c = rp_model_get_config(m);
    int threads = rp_backend_cpu_threads(rp_model_backend(m));
    double bw = measure_bandwidth(threads);

    int total = n_prompt + n_gen;
    rp_kv_pool *kv;
    rp_kv_seq seq;
    rp_kv_seq_init(&seq);
    if (rp_model_kv_create(m, 16, total / 16 + 2, &kv) || rp_kv_seq_reserve(kv, &seq, total)) {
        fprintf(stderr, "decode-bench: %s\n", rp_error_message());
        return 1;
    }
    rp_kv_seq *seqs[1] = {&seq};
    float *logits = malloc((size_t)c->n_vocab * sizeof(float));
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)n_prompt), *pos = malloc(sizeof(int32_t) * 512);
    int32_t *sq = calloc(512, sizeof(int32_t));
    bool *want = calloc(512, sizeof(bool));
    for (int i = 0; i < n_prompt; i++)
        tok[i] = (i * 7919 + 13) % c->n_vocab;
    double tp = rp_time_s();
    for (int at = 0; at < n_prompt; at += 512) {
        int n = n_prompt - at < 512 ? n_prompt - at : 512;
        for (int i = 0; i < n; i++) {
            pos[i] = at + i;
            want[i] = at + i == n_prompt - 1;
        }
        rp_batch b = {n, tok + at, pos, sq, want, seqs, 1, NULL};
        if (rp_model_forward(m, kv, &b, logits)) {
            fprintf(stderr, "decode-bench: %s\n", rp_error_message());
            return 1;
        }
    }
    double prefill_s = rp_time_s() - tp;
    double t0 = rp_time_s();
    for (int g = 0; g < n_gen; g++) {
        int32_t next = 0, p = n_prompt + g;
        for (int i = 1; i < c->n_vocab; i++)
            if (logits[i] > logits[next])
                next = i;
        bool w = true;
        rp_batch d = {1, &next, &p, sq, &w, seqs, 1, NULL};
        if (rp_model_forward(m, kv, &d, logits)) {
            fprintf(stderr, "decode-bench: %s\n", rp_error_message());
            return 1;
        }
    }
    double dt = rp_time_s() - t0;
    double tps = n_gen / dt;
    double wbytes = (double)rp_model_weight_bytes(m);
    double ceiling = bw / wbytes;
    printf("%s | threads %d | prefill %d tokens %7.1f tok/s | weights %7.1f MB/token | read bandwidth %6.2f GB/s | ceiling %7.2f tok/s | "
           "decode %7.2f tok/s | %5.1f%% of ceiling\n",
           rp_model_describe(m), threads, n_prompt, n_prompt / prefill_s,
           wbytes / 1e6, bw / 1e9, ceiling, tps, 100.0 * tps / ceiling);
    free(logits);
    free(tok);
    free(pos);
    free(sq);
    free(want);
    rp_kv_seq_deinit(kv, &seq);
    rp_kv_pool_destroy(kv);
    rp_model_destroy(m);
    return 0;
}
