/*
 * spec_batch_bench.c - speculative decoding under concurrency: N requests at once
 * on one engine, with speculation (auto, adaptive: the default) and without it,
 * alternating, and the total decode throughput of each.
 *
 *   spec-batch-bench [MODEL] [--requests 1,4,8,16] [--tokens T] [--runs R] [--threads N]
 *                    [--method auto|ngram|mtp]
 *
 * Half the requests are a small code edit (the reply copies the file: drafts are
 * accepted) and half free text (a raw continuation sampled at temperature 0.9:
 * little to copy); every request generates exactly T tokens (end of generation
 * ignored). Throughput = all tokens / the time from the first submit to the last
 * token; each side's median over R runs is reported with the draft tokens
 * accepted/verified per method. At high concurrency a batch already uses the
 * weights well and the controller should draft less: the ratio should go to ~1,
 * not below.
 */
#include "bench_model.h"
#include "engine/engine.h"
#include "tokenizer/tokenizer.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define MAX_REQ 64

static const char EDIT[] =
    "<|im_start|>user\nChange the value 0 to 0.0 in this file and return the whole file.\n\n"
    "```python\ndef mean(values):\n    total = 0\n    for v in values:\n        total += v\n"
    "    return total / len(values)\n\n\ndef variance(values):\n    m = mean(values)\n"
    "    total = 0\n    for v in values:\n        total += (v - m) ** 2\n"
    "    return total / len(values)\n```<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";
static const char *const FREE[] = {"The history of computing", "In this tutorial we", "Once upon a time",
                                   "The quick brown fox",      "# Utilities for",     "Notes on the design of"};

typedef struct job {
    rp_engine *e;
    rp_gen_params gp;
    int n;
    double t_end;
} job;

static void *run_job(void *arg)
{
    job *j = arg;
    rp_gen *g = NULL;
    j->n = 0;
    if (rp_engine_submit(j->e, &j->gp, &g)) {
        fprintf(stderr, "spec-batch-bench: submit: %s\n", rp_error_message());
        return NULL;
    }
    rp_gen_token buf[64];
    int k;
    rp_gen_finish f;
    do {
        f = rp_gen_read(g, -1, buf, 64, &k);
        j->n += k;
    } while (f == RP_GEN_RUNNING);
    j->t_end = rp_time_s();
    rp_gen_release(g);
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    const char *model = "models/rapid-tiny", *list = "1,4,8,16";
    int tokens = 128, runs = 3, threads = 0;
    rp_engine_spec_method method = RP_ENGINE_SPEC_AUTO;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--requests") && i + 1 < argc)
            list = argv[++i];
        else if (!strcmp(argv[i], "--tokens") && i + 1 < argc)
            tokens = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--runs") && i + 1 < argc)
            runs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--method") && i + 1 < argc) {
            const char *mth = argv[++i];
            method = !strcmp(mth, "ngram") ? RP_ENGINE_SPEC_NGRAM
                     : !strcmp(mth, "mtp") ? RP_ENGINE_SPEC_MTP
                                           : RP_ENGINE_SPEC_AUTO;
        } else if (argv[i][0] != '-')
            model = argv[i];
        else {
            fprintf(stderr, "usage: spec-batch-bench [MODEL] [--requests 1,4,8,16] [--tokens T] [--runs R] "
                            "[--threads N] [--method auto|ngram|mtp]\n");
            return 2;
        }
    }
    if (tokens < 2 || runs < 1 || runs > 64) {
        fprintf(stderr, "spec-batch-bench: --tokens must be >= 2 and --runs in 1..64\n");
        return 2;
    }
    rp_model_params mp;
    rp_model_params_default(&mp);
    mp.quiet = true;
    rp_model *m = NULL;
    rp_tokenizer *tok = NULL;
    if (!(model = bench_model_path(model)))
        return 1;
    if (bench_load(model, "cpu", threads, false, &mp, &m) || rp_tok_load_file(model, &tok)) {
        fprintf(stderr, "spec-batch-bench: %s\n", rp_error_message());
        return 1;
    }
    static int32_t *ids[MAX_REQ];
    static int n_ids[MAX_REQ];
    for (int i = 0; i < MAX_REQ; i++) {
        const char *text = i % 2 ? FREE[(i / 2) % 6] : EDIT;
        size_t n;
        if (rp_tok_encode(tok, text, strlen(text), false, &ids[i], &n)) {
            fprintf(stderr, "spec-batch-bench: %s\n", rp_error_message());
            return 1;
        }
        n_ids[i] = (int)n;
    }
    printf("model %s, %d threads, %d tokens per request, median of %d runs\n", model,
           rp_backend_threads(rp_model_backend(m)), tokens, runs);
    printf("| requests | tok/s, speculation | tok/s, off | ratio | accepted/verified drafts (last run) |\n");
    printf("|---|---|---|---|---|\n");
    for (const char *p = list; *p;) {
        int nreq = atoi(p);
        if (nreq < 1 || nreq > MAX_REQ) {
            fprintf(stderr, "spec-batch-bench: requests must be in 1..%d\n", MAX_REQ);
            return 2;
        }
        double tps[2][64];
        rp_engine_stats last = {0};
        for (int r = 0; r < runs; r++)
            for (int o = 0; o < 2; o++) {
                int side = (r + o) % 2; // 0: speculation, 1: off; alternating which goes first
                rp_engine_params ep;
                rp_engine_params_default(&ep);
                ep.n_ctx = 2048;
                ep.max_running = nreq;
                ep.no_prefix_cache = true;
                ep.spec.method = side ? RP_ENGINE_SPEC_OFF : method;
                rp_engine *e = NULL;
                if (rp_engine_create(m, tok, &ep, &e)) {
                    fprintf(stderr, "spec-batch-bench: %s\n", rp_error_message());
                    return 1;
                }
                static job jobs[MAX_REQ];
                pthread_t th[MAX_REQ];
                double t0 = rp_time_s();
                for (int i = 0; i < nreq; i++) {
                    jobs[i].e = e;
                    rp_gen_params_default(&jobs[i].gp);
                    jobs[i].gp.prompt = ids[i];
                    jobs[i].gp.n_prompt = n_ids[i];
                    jobs[i].gp.max_tokens = tokens;
                    jobs[i].gp.ignore_eos = true;
                    jobs[i].gp.sample.temperature = i % 2 ? 0.9f : 0.0f;
                    jobs[i].gp.sample.seed = (uint64_t)i;
                    pthread_create(&th[i], NULL, run_job, &jobs[i]);
                }
                int total = 0;
                double t1 = t0;
                for (int i = 0; i < nreq; i++) {
                    pthread_join(th[i], NULL);
                    total += jobs[i].n;
                    t1 = jobs[i].t_end > t1 ? jobs[i].t_end : t1;
                }
                tps[side][r] = total / (t1 - t0);
                if (!side)
                    rp_engine_get_stats(e, &last);
                rp_engine_destroy(e);
            }
        qsort(tps[0], (size_t)runs, sizeof(double), cmp_double);
        qsort(tps[1], (size_t)runs, sizeof(double), cmp_double);
        double on = tps[0][runs / 2], off = tps[1][runs / 2];
        char counts[256] = "";
        for (int k = 0; k < RP_SPEC_N_METHODS; k++)
            if (last.spec_methods[k])
                snprintf(counts + strlen(counts), sizeof(counts) - strlen(counts), "%s%s %llu/%llu",
                         counts[0] ? ", " : "", rp_spec_method_name((rp_spec_method)k),
                         (unsigned long long)last.spec_accepted[k], (unsigned long long)last.spec_drafted[k]);
        printf("| %d | %.1f | %.1f | %.2fx | %s |\n", nreq, on, off, on / off, counts);
        fflush(stdout);
        while (*p && *p != ',')
            p++;
        if (*p == ',')
            p++;
    }
    for (int i = 0; i < MAX_REQ; i++)
        rp_free(ids[i]);
    rp_tok_destroy(tok);
    rp_model_destroy(m);
    return 0;
}
