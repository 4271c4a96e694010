/*
 * step_bench.c - the cost of one decode step against the number of sequences in
 * it: does a batched step read the weights once for all its sequences?
 *
 *   step-bench [MODEL] [--batch 1,2,4,8,16] [--ctx N] [--steps S] [--threads N] [--quant q8|q4|q4k] [--device NAME]
 *              [--kv f16|f32] [--f32-activations]
 *
 * For each batch size B: B sequences each hold a context of N tokens (prefilled
 * once, fixed-seed token ids), then S decode forwards of B tokens (one per
 * sequence at position N, all wanting logits, as the engine's plain decode
 * step) are timed; every step rewrites position N, so the context stays the
 * same. Prints per B the fastest and the median step, the median per token, and
 * the step's cost against B = 1: perfect batching (the weights read once, per-
 * token work negligible) gives ratio 1 at every B; B-fold ratios mean the step
 * is bound by per-token compute. The sizes are interleaved step by step so a
 * load change on a shared machine hits every size alike.
 */
#include "bench_model.h"
#include "kv/kv.h"
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>

#define MAX_B 64
#define MAX_STEPS 4096

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    const char *model_path = "models/rapid-tiny", *list = "1,2,4,8,16";
    int ctx = 256, steps = 200, threads = 0;
    const char *device = NULL;
    rp_dtype quant = RP_DTYPE_F32, kv_type = RP_DTYPE_F16;
    bool f32_act = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--f32-activations"))
            f32_act = true;
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc)
            list = argv[++i];
        else if (!strcmp(argv[i], "--ctx") && i + 1 < argc)
            ctx = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc)
            steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--device") && i + 1 < argc)
            device = argv[++i];
        else if (!strcmp(argv[i], "--kv") && i + 1 < argc)
            kv_type = !strcmp(argv[++i], "f32") ? RP_DTYPE_F32 : RP_DTYPE_F16;
        else if (!strcmp(argv[i], "--quant") && i + 1 < argc) {
            const char *q = argv[++i];
            quant = !strcmp(q, "q8") ? RP_DTYPE_Q8_0 : !strcmp(q, "q4") ? RP_DTYPE_Q4_0 : !strcmp(q, "q4k") ? RP_DTYPE_Q4_K : RP_DTYPE_F32;
        } else if (argv[i][0] != '-')
            model_path = argv[i];
        else {
            fprintf(stderr, "usage: step-bench [MODEL] [--batch 1,2,4,8,16] [--ctx N] [--steps S] [--threads N] "
                            "[--quant q8|q4|q4k] [--kv f16|f32] [--f32-activations] [--device NAME]\n");
            return 2;
        }
    }
    int bs[16], nb = 0;
    for (const char *p = list; *p && nb < 16;) {
        bs[nb] = atoi(p);
        if (bs[nb] < 1 || bs[nb] > MAX_B) {
            fprintf(stderr, "step-bench: batch sizes must be in 1..%d\n", MAX_B);
            return 2;
        }
        nb++;
        const char *c = strchr(p, ',');
        p = c ? c + 1 : p + strlen(p);
    }
    if (ctx < 1 || steps < 1 || steps > MAX_STEPS || nb == 0) {
        fprintf(stderr, "step-bench: --ctx >= 1, --steps in 1..%d\n", MAX_STEPS);
        return 2;
    }
    rp_model_params mp;
    rp_model_params_default(&mp);
    mp.quant = quant;
    mp.quiet = true;
    rp_model *m = NULL;
    rp_kv_pool *kv = NULL;
    if (!(model_path = bench_model_path(model_path)))
        return 1;
    if (bench_load(model_path, device, threads, f32_act, &mp, &m) != RP_OK) {
        fprintf(stderr, "step-bench: %s\n", rp_error_message());
        return 1;
    }
    const rp_model_config *cfg = rp_model_get_config(m);
    int max_b = 0;
    for (int i = 0; i < nb; i++)
        max_b = bs[i] > max_b ? bs[i] : max_b;
    int block = 16, per_seq = (ctx + 1 + block - 1) / block + 1;
    int mb = rp_model_max_batch(m);
    static rp_kv_seq seqs[MAX_B];
    rp_kv_seq *sp[MAX_B];
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)mb), *pos = malloc(sizeof(int32_t) * (size_t)mb);
    int32_t *seq = malloc(sizeof(int32_t) * (size_t)mb);
    bool *want = malloc(sizeof(bool) * (size_t)mb);
    float *logits = NULL; // host memory the backend copies into at full speed (pinned on a GPU)
    if (rp_backend_host_alloc(rp_model_backend(m), sizeof(float) * (size_t)mb * (size_t)cfg->n_vocab,
                              (void **)&logits))
        logits = NULL;
    double *t = malloc(sizeof(double) * (size_t)nb * (size_t)steps);
    if (!tok || !pos || !seq || !want || !logits || !t ||
        rp_model_kv_create(m, block, per_seq * max_b, kv_type, &kv) != RP_OK) {
        fprintf(stderr, "step-bench: out of memory\n");
        return 1;
    }
    // Contexts: fixed-seed ids, prefilled in chunks of the model's batch.
    uint64_t rng = 42;
    for (int s = 0; s < max_b; s++) {
        rp_kv_seq_init(&seqs[s]);
        sp[s] = &seqs[s];
        if (rp_kv_seq_reserve(kv, &seqs[s], ctx + 1) != RP_OK) {
            fprintf(stderr, "step-bench: %s\n", rp_error_message());
            return 1;
        }
        for (int p0 = 0; p0 < ctx; p0 += mb) {
            int n = ctx - p0 < mb ? ctx - p0 : mb;
            for (int i = 0; i < n; i++) {
                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                tok[i] = (int32_t)((rng >> 33) % (uint64_t)cfg->n_vocab);
                pos[i] = p0 + i;
                seq[i] = 0;
                want[i] = false;
            }
            rp_batch b = {n, tok, pos, seq, want, &sp[s], 1, NULL};
            if (rp_model_forward(m, kv, &b, logits) != RP_OK) {
                fprintf(stderr, "step-bench: prefill: %s\n", rp_error_message());
                return 1;
            }
        }
    }
    // Warm-up, then rounds over the sizes.
    for (int r = -3; r < steps; r++)
        for (int k = 0; k < nb; k++) {
            int B = bs[k];
            for (int s = 0; s < B; s++) {
                tok[s] = (int32_t)((s * 7919 + (r + 3) * 31 + 11) % cfg->n_vocab);
                pos[s] = ctx;
                seq[s] = s;
                want[s] = true;
            }
            rp_batch b = {B, tok, pos, seq, want, sp, B, NULL};
            double t0 = rp_time_s();
            if (rp_model_forward(m, kv, &b, logits) != RP_OK) {
                fprintf(stderr, "step-bench: %s\n", rp_error_message());
                return 1;
            }
            if (r >= 0)
                t[(size_t)k * (size_t)steps + (size_t)r] = rp_time_s() - t0;
        }
    rp_backend_info bi;
    rp_backend_get_info(rp_model_backend(m), &bi);
    printf("%s, on %s (%s), context %d tokens, %d steps per size (interleaved), weights read per step %.1f MB\n",
           rp_model_describe(m), bi.name, bi.device, ctx, steps, rp_model_weight_bytes(m) / 1e6);
    printf("| sequences | fastest step | median step | median per token | step / one sequence's step |\n");
    printf("|---|---|---|---|---|\n");
    double base = 0;
    for (int k = 0; k < nb; k++) {
        double *v = t + (size_t)k * (size_t)steps;
        qsort(v, (size_t)steps, sizeof(double), cmp_double);
        double med = v[steps / 2];
        if (k == 0 || bs[k] == 1)
            base = bs[k] == 1 ? med : base;
        printf("| %d | %.3f ms | %.3f ms | %.3f ms | %s%.2fx |\n", bs[k], 1e3 * v[0], 1e3 * med, 1e3 * med / bs[k],
               base > 0 ? "" : "n/a ", base > 0 ? med / base : 0.0);
    }
    for (int s = 0; s < max_b; s++)
        rp_kv_seq_deinit(kv, &seqs[s]);
    rp_kv_pool_destroy(kv);
    if (logits)
        rp_backend_host_free(rp_model_backend(m), logits);
    rp_model_destroy(m);
    free(tok);
    free(pos);
    free(seq);
    free(want);
    free(t);
    return 0;
}
