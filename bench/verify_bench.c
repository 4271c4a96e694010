/*
 * verify_bench.c - what a speculative verification step costs against a decode step.
 *
 * A verification step runs one sequence's decode token plus its k drafts through
 * one forward, every token wanting logits. This program prefills a context of
 * --ctx tokens (a fixed-seed walk over the vocabulary), then times forwards of
 * n = 1, 2, 4, ... tokens at the positions right after it (the same slots every
 * time: the KV written there is rewritten by the next run), every token wanting
 * logits, and again with only the last token wanting them (the difference is the
 * output head's share), and with every row reduced to its argmax on the backend (what a
 * greedy verification needs: no logits cross from a device). Prints the median time of --reps runs per n and its ratio
 * to n = 1: with speculation, a step of 1 + k tokens yielding a + 1 tokens beats
 * plain decoding by (a + 1) / ratio. --cpu times process CPU time instead of
 * wall time: with one thread, what a step costs whatever the neighbours do. --simd
 * caps the kernels' instruction set (scalar, avx2, avx512). On a model with recurrent state
 * (Qwen3.5) every forward also logs its inputs for rollback, as the engine's verification steps
 * do, and the state is rolled back to the context's (untimed) before the next one. Not a test:
 * numbers go to bench/RESULTS.md.
 *
 * usage: verify-bench MODEL [--threads N] [--ctx N] [--reps R] [--max N] [--quant q8|q4|q4k] [--cpu] [--simd LEVEL]
 *                     [--kv f16|f32] [--f32-activations] [--device NAME]
 */
#include "backend/cpu/cpu.h"
#include "bench_model.h"
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static bool cpu_clock; // --cpu: process CPU time instead of wall time (steadier on a shared machine, 1 thread)

static double now(void)
{
    if (!cpu_clock)
        return rp_time_s();
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

// The sizes timed: 1, 2, 3, 4, then a quarter more each time, and max itself.
static int next_n(int n, int max)
{
    int next = n < 4 ? n + 1 : n + n / 4;
    return n < max && next > max ? max : next;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    const char *path = NULL;
    int threads = 0, ctx = 1500, reps = 15, max_n = 32;
    const char *device = NULL;
    rp_dtype quant = RP_DTYPE_F32, kv_type = RP_DTYPE_F16;
    bool f32_act = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--f32-activations"))
            f32_act = true;
        else if (!strcmp(argv[i], "--kv") && i + 1 < argc)
            kv_type = !strcmp(argv[++i], "f32") ? RP_DTYPE_F32 : RP_DTYPE_F16;
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--device") && i + 1 < argc)
            device = argv[++i];
        else if (!strcmp(argv[i], "--ctx") && i + 1 < argc)
            ctx = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--max") && i + 1 < argc)
            max_n = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--cpu"))
            cpu_clock = true;
        else if (!strcmp(argv[i], "--simd") && i + 1 < argc) {
            if (!rp_cpu_force_simd(argv[++i])) {
                fprintf(stderr, "verify-bench: no SIMD level %s on this CPU\n", argv[i]);
                return 2;
            }
        } else if (!strcmp(argv[i], "--quant") && i + 1 < argc) {
            i++;
            quant = !strcmp(argv[i], "q8") ? RP_DTYPE_Q8_0 : !strcmp(argv[i], "q4") ? RP_DTYPE_Q4_0 : !strcmp(argv[i], "q4k") ? RP_DTYPE_Q4_K : RP_DTYPE_F32;
        } else if (argv[i][0] != '-' && !path)
            path = argv[i];
        else {
            fprintf(stderr, "usage: verify-bench MODEL [--threads N] [--ctx N] [--reps R] [--max N] [--quant q8|q4|q4k] "
                            "[--cpu] [--simd LEVEL] [--kv f16|f32] [--f32-activations] [--device NAME]\n");
            return 2;
        }
    }
    if (!path || ctx < 1 || reps < 1 || max_n < 1 || max_n > 512) {
        fprintf(stderr, "usage: verify-bench MODEL [--threads N] [--ctx N] [--reps R] [--max N] [--quant q8|q4|q4k] "
                        "[--cpu] [--simd LEVEL] [--kv f16|f32] [--f32-activations] [--device NAME]\n");
        return 2;
    }
    rp_model_params mp;
    rp_model_params_default(&mp);
    mp.quant = quant;
    mp.quiet = true;
    rp_model *m = NULL;
    rp_kv_pool *kv = NULL;
    rp_kv_seq seq;
    rp_kv_seq_init(&seq);
    int rc = 1;
    int32_t *tok = NULL, *pos = NULL, *sq = NULL, *ids = NULL;
    bool *want = NULL;
    float *logits = NULL;
    double *times = NULL;
    if (!(path = bench_model_path(path)))
        return 1;
    if (bench_load(path, device, threads, f32_act, &mp, &m)) {
        fprintf(stderr, "verify-bench: %s\n", rp_error_message());
        return 1;
    }
    const rp_model_config *c = rp_model_get_config(m);
    int total = ctx + max_n, B = 512;
    // (A model with recurrent state: one state slot, its log long enough to roll the longest
    // step back; each timed forward starts from the context's state again, below.)
    bool state = rp_model_has_state(m);
    if (rp_model_kv_create_ex(m, 16, total / 16 + 2, kv_type, 1, max_n, &kv) || rp_kv_seq_reserve(kv, &seq, total)) {
        fprintf(stderr, "verify-bench: %s\n", rp_error_message());
        goto done;
    }
    tok = rp_malloc(B * sizeof(int32_t));
    pos = rp_malloc(B * sizeof(int32_t));
    sq = rp_calloc(B, sizeof(int32_t));
    want = rp_calloc(B, sizeof(bool));
    rp_backend *be = rp_model_backend(m);
    if (rp_backend_host_alloc(be, (size_t)max_n * c->n_vocab * sizeof(float), (void **)&logits))
        logits = NULL;
    ids = rp_malloc((size_t)max_n * sizeof(int32_t));
    times = rp_malloc((size_t)reps * sizeof(double));
    if (!tok || !pos || !sq || !want || !logits || !ids || !times)
        goto done;
    rp_kv_seq *seqs[1] = {&seq};
    uint32_t s = 12345;
    for (int p0 = 0; p0 < ctx; p0 += B) {
        int n = ctx - p0 < B ? ctx - p0 : B;
        for (int i = 0; i < n; i++) {
            s = s * 1664525u + 1013904223u;
            tok[i] = (int32_t)((s >> 8) % (uint32_t)c->n_vocab);
            pos[i] = p0 + i;
            want[i] = i == n - 1;
        }
        rp_batch b = {n, tok, pos, sq, want, seqs, 1, NULL};
        if (rp_model_forward(m, kv, &b, logits)) {
            fprintf(stderr, "verify-bench: %s\n", rp_error_message());
            goto done;
        }
    }
    printf("model %s, context %d, %d threads, median of %d (%s time)\n", rp_model_describe(m), ctx, threads, reps,
           cpu_clock ? "CPU" : "wall");
    printf("%4s %12s %8s %8s %14s %8s %12s %8s\n", "n", "all logits", "ratio", "per tok", "last logits", "ratio",
           "argmax", "ratio");
    double base = 0;
    for (int n = 1; n <= max_n; n = next_n(n, max_n)) {
        double med[3];
        for (int mode = 0; mode < 3; mode++) { // every row's logits; the last row's; every row's argmax
            for (int i = 0; i < n; i++) {
                tok[i] = (int32_t)((i * 7919 + 11) % c->n_vocab);
                pos[i] = ctx + i;
                want[i] = mode != 1 || i == n - 1;
            }
            rp_batch b = {n, tok, pos, sq, want, seqs, 1, NULL};
            for (int r = 0; r < reps + 2; r++) {
                // The state moved past ctx: back to it (untimed; with the forward's log, no replay).
                if (state && seq.state_pos > ctx &&
                    (rp_model_seq_truncate(m, kv, &seq, ctx) || rp_kv_seq_reserve(kv, &seq, total))) {
                    fprintf(stderr, "verify-bench: %s\n", rp_error_message());
                    goto done;
                }
                double t0 = now();
                rp_status fst =
                    mode == 2 ? rp_model_forward_argmax(m, kv, &b, ids, NULL) : rp_model_forward(m, kv, &b, logits);
                if (fst) {
                    fprintf(stderr, "verify-bench: %s\n", rp_error_message());
                    goto done;
                }
                if (r >= 2)
                    times[r - 2] = now() - t0;
            }
            qsort(times, (size_t)reps, sizeof(double), cmp_double);
            med[mode] = times[reps / 2];
        }
        if (n == 1)
            base = med[0];
        printf("%4d %9.3f ms %7.2fx %5.3f ms %11.3f ms %7.2fx %9.3f ms %7.2fx\n", n, med[0] * 1e3, med[0] / base,
               med[0] * 1e3 / n, med[1] * 1e3, med[1] / base, med[2] * 1e3, med[2] / base);
    }
    rc = 0;
done:
    rp_free(tok);
    rp_free(pos);
    rp_free(sq);
    rp_free(want);
    if (logits)
        rp_backend_host_free(rp_model_backend(m), logits);
    rp_free(ids);
    rp_free(times);
    if (kv)
        rp_kv_seq_deinit(kv, &seq);
    rp_kv_pool_destroy(kv);
    rp_model_destroy(m);
    return rc;
}
