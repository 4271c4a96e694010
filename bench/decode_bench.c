/*
 * decode_bench.c - single-stream decode speed against the memory-bandwidth ceiling.
 *
 * Decoding one token reads every weight once, so one stream's ceiling is
 * (memory read bandwidth) / (weight bytes per token). This program measures
 * both in one run, on the same threads, interleaved: a bandwidth reading (one
 * multi-threaded AVX2 pass summing a 1 GiB buffer on 2 MiB pages, far larger than
 * the caches)
 * on the model's threads before and after each of --runs decode runs (the same prompt prefilled, then
 * -n greedy tokens). On a shared VM the read bandwidth moves from run to run, so
 * the ceiling is the median of all readings, and the decode speed the median of
 * the runs; both spreads are printed, and the load average at the start and the
 * end, so a noisy run shows. The prefill of the prompt (--prompt N tokens,
 * default 16; one forward of up to 512 tokens at a time) is timed too (median).
 * Not a test: numbers go to bench/RESULTS.md.
 *
 * usage: decode-bench MODEL [--quant q8|q4|q4k] [--threads N] [-n TOKENS] [--prompt N] [--runs R] [--kv f16|f32]
 */
#include "bench_model.h"
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

#define BW_BYTES ((size_t)1 << 30)

// The reading machinery: a 1 GiB buffer read by the model's own pool (the decode's threads).
typedef struct bw_meter {
    float *buf;
    rp_pool *pool;
    bw_job job;
} bw_meter;

static bool bw_init(bw_meter *b, rp_pool *pool)
{
    memset(b, 0, sizeof(*b));
    if (!(b->buf = rp_malloc_huge(BW_BYTES))) // on 2 MiB pages, as the weights: the memory's speed, not the TLB's
        return false;
    for (size_t i = 0; i < BW_BYTES / sizeof(float); i++)
        b->buf[i] = (float)(i & 1023);
    b->pool = pool;
    b->job = (bw_job){b->buf, BW_BYTES / sizeof(float), {0}};
    rp_pool_run(b->pool, bw_worker, &b->job); // warms the pages
    return true;
}

// One reading in bytes/s: one pass over the buffer.
static double bw_read(bw_meter *b)
{
    double t0 = rp_time_s();
    rp_pool_run(b->pool, bw_worker, &b->job);
    return BW_BYTES / (rp_time_s() - t0);
}

static void bw_deinit(bw_meter *b)
{
    rp_free_huge(b->buf, BW_BYTES);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

// Median of v[0..n) (sorts v).
static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void print_loadavg(const char *when)
{
    char line[128] = "?";
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (!fgets(line, sizeof(line), f))
            snprintf(line, sizeof(line), "?");
        fclose(f);
    }
    line[strcspn(line, "\n")] = 0;
    printf("# load average at %s: %s\n", when, line);
}

#define USAGE                                                                                                          \
    "usage: decode-bench MODEL [--quant q8|q4|q4k] [--threads N] [-n TOKENS] [--prompt N] [--runs R] [--kv f16|f32]\n"
#define MAX_RUNS 64

typedef struct run_state {
    rp_model *m;
    rp_kv_pool *kv;
    int n_prompt, n_gen;
    float *logits;
    int32_t *tok, *pos, *sq;
    bool *want;
} run_state;

// One run: a fresh sequence, the prompt prefilled, n_gen greedy tokens (argmax here,
// as a sampler would). Seconds of the prefill and of the decode in *prefill_s, *decode_s.
static rp_status one_run(run_state *r, double *prefill_s, double *decode_s)
{
    const rp_model_config *c = rp_model_get_config(r->m);
    rp_kv_seq seq;
    rp_kv_seq_init(&seq);
    rp_status st = rp_kv_seq_reserve(r->kv, &seq, r->n_prompt + r->n_gen);
    if (st)
        return st;
    rp_kv_seq *seqs[1] = {&seq};
    double tp = rp_time_s();
    for (int at = 0; at < r->n_prompt && !st; at += 512) {
        int n = r->n_prompt - at < 512 ? r->n_prompt - at : 512;
        for (int i = 0; i < n; i++) {
            r->pos[i] = at + i;
            r->want[i] = at + i == r->n_prompt - 1;
        }
        rp_batch b = {n, r->tok + at, r->pos, r->sq, r->want, seqs, 1, NULL};
        st = rp_model_forward(r->m, r->kv, &b, r->logits);
    }
    *prefill_s = rp_time_s() - tp;
    double t0 = rp_time_s();
    for (int g = 0; g < r->n_gen && !st; g++) {
        int32_t next = 0, p = r->n_prompt + g;
        for (int i = 1; i < c->n_vocab; i++)
            if (r->logits[i] > r->logits[next])
                next = i;
        bool w = true;
        rp_batch d = {1, &next, &p, r->sq, &w, seqs, 1, NULL};
        st = rp_model_forward(r->m, r->kv, &d, r->logits);
    }
    *decode_s = rp_time_s() - t0;
    rp_kv_seq_deinit(r->kv, &seq);
    return st;
}

int main(int argc, char **argv)
{
    const char *path = NULL;
    rp_model_params mp;
    rp_model_params_default(&mp);
    int threads_arg = 0;
    int n_gen = 64, n_prompt = 16, n_runs = 5;
    rp_dtype kv_type = RP_DTYPE_F16;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quant") == 0 && i + 1 < argc) {
            const char *q = argv[++i];
            mp.quant = strcmp(q, "q8") == 0 ? RP_DTYPE_Q8_0 : strcmp(q, "q4") == 0 ? RP_DTYPE_Q4_0 : strcmp(q, "q4k") == 0 ? RP_DTYPE_Q4_K : RP_DTYPE_F32;
        } else if (strcmp(argv[i], "--kv") == 0 && i + 1 < argc) {
            kv_type = strcmp(argv[++i], "f32") == 0 ? RP_DTYPE_F32 : RP_DTYPE_F16;
        } else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            threads_arg = atoi(argv[++i]);
        } else if (strcmp(argv[i], "-n") == 0 && i + 1 < argc) {
            n_gen = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--prompt") == 0 && i + 1 < argc) {
            n_prompt = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc) {
            n_runs = atoi(argv[++i]);
        } else if (argv[i][0] != '-' && !path) {
            path = argv[i];
        } else {
            fprintf(stderr, USAGE);
            return 2;
        }
    }
    if (!path || n_gen < 2 || n_prompt < 1 || n_prompt > 32768 || n_runs < 1 || n_runs > MAX_RUNS) {
        fprintf(stderr, USAGE);
        return 2;
    }
    print_loadavg("start");
    rp_model *m;
    if (!(path = bench_model_path(path)))
        return 1;
    if (bench_load(path, "cpu", threads_arg, false, &mp, &m)) {
        fprintf(stderr, "decode-bench: %s\n", rp_error_message());
        return 1;
    }
    const rp_model_config *c = rp_model_get_config(m);
    int threads = rp_backend_threads(rp_model_backend(m));
    bw_meter bw;
    if (!bw_init(&bw, rp_backend_host_pool(rp_model_backend(m)))) {
        fprintf(stderr, "decode-bench: cannot set up the bandwidth reading\n");
        return 1;
    }
    run_state r = {.m = m, .n_prompt = n_prompt, .n_gen = n_gen};
    int total = n_prompt + n_gen;
    if (rp_model_kv_create(m, 16, total / 16 + 2, kv_type, &r.kv)) {
        fprintf(stderr, "decode-bench: %s\n", rp_error_message());
        return 1;
    }
    r.logits = malloc((size_t)c->n_vocab * sizeof(float));
    r.tok = malloc(sizeof(int32_t) * (size_t)n_prompt);
    r.pos = malloc(sizeof(int32_t) * 512);
    r.sq = calloc(512, sizeof(int32_t));
    r.want = calloc(512, sizeof(bool));
    for (int i = 0; i < n_prompt; i++)
        r.tok[i] = (i * 7919 + 13) % c->n_vocab;

    // Warm-up run (first touch of the weights, scratch growth), then readings around each run.
    double bws[MAX_RUNS + 1], tps[MAX_RUNS], pps[MAX_RUNS], ps, ds;
    if (one_run(&r, &ps, &ds)) {
        fprintf(stderr, "decode-bench: %s\n", rp_error_message());
        return 1;
    }
    bws[0] = bw_read(&bw);
    for (int k = 0; k < n_runs; k++) {
        if (one_run(&r, &ps, &ds)) {
            fprintf(stderr, "decode-bench: %s\n", rp_error_message());
            return 1;
        }
        bws[k + 1] = bw_read(&bw);
        tps[k] = n_gen / ds;
        pps[k] = n_prompt / ps;
    }
    int n_bw = n_runs + 1;
    double bw_min = bws[0], bw_max = bws[0], t_min = tps[0], t_max = tps[0];
    for (int k = 1; k < n_bw; k++) {
        bw_min = bws[k] < bw_min ? bws[k] : bw_min;
        bw_max = bws[k] > bw_max ? bws[k] : bw_max;
    }
    for (int k = 1; k < n_runs; k++) {
        t_min = tps[k] < t_min ? tps[k] : t_min;
        t_max = tps[k] > t_max ? tps[k] : t_max;
    }
    double bw_med = median(bws, n_bw), t_med = median(tps, n_runs), p_med = median(pps, n_runs);
    // A model with recurrent state also reads and writes it once a token (rp_model_state_bytes).
    double wbytes = (double)rp_model_weight_bytes(m) + (double)rp_model_state_bytes(m);
    double ceiling = bw_med / wbytes;
    if (rp_model_state_bytes(m))
        printf("recurrent state: %.1f MB/token read and written (in the MB/token below)\n",
               rp_model_state_bytes(m) / 1e6);
    printf("%s | threads %d | prefill %d tokens %7.1f tok/s | weights %7.1f MB/token | read bandwidth median %6.2f GB/s "
           "(%.2f-%.2f, %d readings) | ceiling %7.2f tok/s | decode median %7.2f tok/s (%.2f-%.2f, %d runs of %d) | "
           "%5.1f%% of ceiling\n",
           rp_model_describe(m), threads, n_prompt, p_med, wbytes / 1e6, bw_med / 1e9, bw_min / 1e9, bw_max / 1e9,
           n_bw, ceiling, t_med, t_min, t_max, n_runs, n_gen, 100.0 * t_med / ceiling);
    print_loadavg("end");
    free(r.logits);
    free(r.tok);
    free(r.pos);
    free(r.sq);
    free(r.want);
    bw_deinit(&bw);
    rp_kv_pool_destroy(r.kv);
    rp_model_destroy(m);
    return 0;
}
