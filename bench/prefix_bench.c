/*
 * prefix_bench.c - time to first token of an agent session's turns with the
 * prefix cache, against prefilling the whole prompt and against prefilling
 * only the turn's new tokens, and the first turn after a restart (disk tier).
 *
 * The session is synthetic token ids (a fixed-seed walk over the vocabulary):
 * a system prompt of --sys tokens, then per turn --user new tokens, a greedy
 * reply of --gen tokens (ignore_eos), and the next turn's prompt is the whole
 * history plus the next user tokens, as a chat client resends it. Per turn it
 * measures, each on its own engine so nothing else is cached:
 *   cached  TTFT on the engine that served the earlier turns (prefix cache on)
 *   cold    TTFT of the same prompt on an engine without a prefix cache
 *   new     TTFT of a prompt of just the tokens the cached run had to prefill
 *   in place  the forward of those tokens at their positions after the prefix
 *           (prefilled first, untimed) on a KV pool of its own: the main model
 *           with the last token's logits and, when the model has an MTP layer,
 *           the MTP layer over the same positions, as the engine keeps it: the
 *           work "prefilling only the new tokens" cannot avoid, without the
 *           engine (no request, no cache lookup, no sampling)
 * Then the cached engine is destroyed (its blocks written to --cache-dir) and
 * a new one answers the next turn from the disk tier. Not a test: the numbers
 * go to bench/RESULTS.md.
 *
 * usage: prefix-bench MODEL [--threads N] [--turns T] [--sys N] [--user N] [--gen N] --cache-dir DIR
 */
#include "bench_model.h"
#include "engine/engine.h"

#include <stdio.h>
#include <stdlib.h>

#define MAX_TOKENS 16384
#define KV_BLOCK 16

typedef struct opts {
    const char *model, *cache_dir;
    int threads, turns, sys, user, gen, repeat;
} opts;

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static int32_t next_token(int n_vocab)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (int32_t)(rng % (uint64_t)(n_vocab - 16)) + 8; // clear of the lowest (often special) ids
}

// Runs one greedy request; returns its TTFT in seconds; fills the reply and n_cached.
static double run(rp_engine *e, const int32_t *prompt, int n, int gen, int32_t *reply, int *n_cached)
{
    rp_gen_params gp;
    rp_gen_params_default(&gp);
    gp.prompt = prompt;
    gp.n_prompt = n;
    gp.max_tokens = gen;
    gp.sample.temperature = 0;
    gp.ignore_eos = true;
    rp_gen *g = NULL;
    if (rp_engine_submit(e, &gp, &g)) {
        fprintf(stderr, "prefix-bench: submit: %s\n", rp_error_message());
        exit(1);
    }
    int got = 0;
    for (;;) {
        rp_gen_token t[64];
        int k;
        rp_gen_finish f = rp_gen_read(g, -1, t, 64, &k);
        for (int i = 0; i < k && got < gen; i++)
            if (reply)
                reply[got++] = t[i].id;
        if (f != RP_GEN_RUNNING)
            break;
    }
    rp_gen_stats st;
    rp_gen_get_stats(g, &st);
    rp_gen_release(g);
    if (n_cached)
        *n_cached = st.n_cached;
    return st.t_first - st.t_submit;
}

static rp_engine *engine(rp_model *m, const rp_tokenizer *tok, const char *dir, bool cache)
{
    rp_engine_params ep;
    rp_engine_params_default(&ep);
    ep.n_ctx = MAX_TOKENS;
    ep.max_running = 1;
    ep.no_prefix_cache = !cache;
    ep.cache_dir = dir;
    rp_engine *e = NULL;
    if (rp_engine_create(m, tok, &ep, &e)) {
        fprintf(stderr, "prefix-bench: engine: %s\n", rp_error_message());
        exit(1);
    }
    return e;
}

typedef struct row {
    int n, cached;
    double cached_s, cold_s, prefix_s, head_s; // TTFT: cached run, cold prompt, cold cached prefix, new tokens alone
    double place_s;                            // the new tokens' forward at their positions (main model)
} row;

static void keep_min(double *a, double b)
{
    if (*a == 0 || b < *a)
        *a = b;
}

// Forwards tokens [p0, p1) of hist at their positions in one sequence, in batches of the
// model's most, logits of the last one only; with an MTP layer, every token's hidden row
// too, and the MTP layer over the same positions (position t takes hist[t + 1] and h[t];
// the last position of hist has no next token). Exits on an error.
static void forward_range(rp_model *m, rp_kv_pool *kv, rp_kv_seq *sq, const int32_t *hist, int p0, int p1, int n_hist,
                          float *logits, float *hidden)
{
    int mb = rp_model_max_batch(m);
    bool mtp = rp_model_has_mtp(m);
    static int32_t pos[MAX_TOKENS], seq[MAX_TOKENS];
    static bool want[MAX_TOKENS], all[MAX_TOKENS], none[MAX_TOKENS];
    for (int a = p0; a < p1; a += mb) {
        int n = p1 - a < mb ? p1 - a : mb;
        for (int i = 0; i < n; i++) {
            pos[i] = a + i;
            seq[i] = 0;
            want[i] = a + i == p1 - 1;
            all[i] = true;
            none[i] = false;
        }
        rp_batch b = {n, hist + a, pos, seq, want, &sq, 1, all};
        rp_status st = rp_model_forward_ex(m, kv, &b, logits, mtp ? hidden : NULL);
        int nm = a + n < n_hist ? n : n - 1; // positions with a next token
        rp_batch bm = {nm, hist + a + 1, pos, seq, none, &sq, 1, NULL};
        if (st == RP_OK && mtp && nm > 0)
            st = rp_model_forward_mtp(m, kv, &bm, hidden, NULL, NULL);
        if (st != RP_OK) {
            fprintf(stderr, "prefix-bench: forward: %s\n", rp_error_message());
            exit(1);
        }
    }
}

// The "in place" reference: the forward of tokens [cached, n) after the prefix, best of 3.
static double in_place(rp_model *m, const int32_t *hist, int cached, int n)
{
    rp_kv_pool *kv = NULL;
    rp_kv_seq sq;
    rp_kv_seq_init(&sq);
    const rp_model_config *c = rp_model_get_config(m);
    float *logits = rp_malloc((size_t)c->n_vocab * sizeof(float));
    float *hidden = rp_malloc((size_t)rp_model_max_batch(m) * (size_t)c->dim * sizeof(float));
    if (!logits || !hidden ||
        rp_model_kv_create(m, KV_BLOCK, (n + KV_BLOCK) / KV_BLOCK + 1, RP_DTYPE_F16, &kv) != RP_OK ||
        rp_kv_seq_reserve(kv, &sq, n) != RP_OK) {
        fprintf(stderr, "prefix-bench: KV for the reference: %s\n", rp_error_message());
        exit(1);
    }
    forward_range(m, kv, &sq, hist, 0, cached, n, logits, hidden);
    double best = 0;
    for (int r = 0; r < 3; r++) { // (the same positions again: the same K/V rewritten)
        if (r > 0 && rp_model_has_state(m)) { // a recurrent state cannot take them twice: from the start
            rp_kv_seq_truncate(kv, &sq, 0);
            if (rp_kv_seq_reserve(kv, &sq, n) != RP_OK) {
                fprintf(stderr, "prefix-bench: KV for the reference: %s\n", rp_error_message());
                exit(1);
            }
            forward_range(m, kv, &sq, hist, 0, cached, n, logits, hidden);
        }
        double t0 = rp_time_s();
        forward_range(m, kv, &sq, hist, cached, n, n, logits, hidden);
        keep_min(&best, rp_time_s() - t0);
    }
    rp_kv_seq_deinit(kv, &sq);
    rp_kv_pool_destroy(kv);
    rp_free(logits);
    rp_free(hidden);
    return best;
}

// One session on a fresh cache folder; rows[t] gets the minimum of every figure over the repeats.
static void session(rp_model *m, const rp_tokenizer *tok, const opts *o, const char *dir, row *rows, double *restart_s)
{
    int V = rp_model_get_config(m)->n_vocab;
    int32_t *hist = rp_malloc(MAX_TOKENS * sizeof(int32_t));
    int n = 0;
    rng = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < o->sys; i++)
        hist[n++] = next_token(V);
    rp_engine *warm = engine(m, tok, dir, true);
    for (int t = 0; t <= o->turns; t++) {
        for (int i = 0; i < o->user; i++)
            hist[n++] = next_token(V);
        if (t == o->turns) { // the blocks go to disk at destroy; a new engine indexes them
            double t0 = rp_time_s();
            rp_engine_destroy(warm);
            warm = engine(m, tok, dir, true);
            keep_min(restart_s, rp_time_s() - t0);
        }
        row *r = &rows[t];
        r->n = n;
        keep_min(&r->cached_s, run(warm, hist, n, o->gen, hist + n, &r->cached));
        rp_engine *cold = engine(m, tok, NULL, false);
        keep_min(&r->cold_s, run(cold, hist, n, o->gen, NULL, NULL));
        if (r->cached > 0)
            keep_min(&r->prefix_s, run(cold, hist, r->cached, 1, NULL, NULL));
        keep_min(&r->head_s, run(cold, hist + r->cached, n - r->cached, o->gen, NULL, NULL));
        rp_engine_destroy(cold);
        keep_min(&r->place_s, in_place(m, hist, r->cached, n));
        n += o->gen;
    }
    rp_engine_destroy(warm);
    rp_free(hist);
}

int main(int argc, char **argv)
{
    opts o = {NULL, NULL, 0, 6, 1024, 64, 32, 3};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool more = i + 1 < argc;
        if (!strcmp(a, "--threads") && more)
            o.threads = atoi(argv[++i]);
        else if (!strcmp(a, "--turns") && more)
            o.turns = atoi(argv[++i]);
        else if (!strcmp(a, "--sys") && more)
            o.sys = atoi(argv[++i]);
        else if (!strcmp(a, "--user") && more)
            o.user = atoi(argv[++i]);
        else if (!strcmp(a, "--gen") && more)
            o.gen = atoi(argv[++i]);
        else if (!strcmp(a, "--repeat") && more)
            o.repeat = atoi(argv[++i]);
        else if (!strcmp(a, "--cache-dir") && more)
            o.cache_dir = argv[++i];
        else if (!o.model && a[0] != '-')
            o.model = a;
        else {
            fprintf(stderr, "usage: prefix-bench MODEL [--threads N] [--turns T] [--sys N] [--user N] [--gen N] "
                            "[--repeat R] --cache-dir DIR\n");
            return 2;
        }
    }
    if (!o.model || !o.cache_dir || o.turns < 1 || o.turns > 64 || o.sys < 1 || o.user < 1 || o.gen < 1 ||
        o.repeat < 1 || o.sys + (o.turns + 1) * (o.user + o.gen) > MAX_TOKENS) {
        fprintf(stderr, "prefix-bench: a MODEL, a --cache-dir and a session under %d tokens are needed\n",
                MAX_TOKENS);
        return 2;
    }
    rp_model_params mp;
    rp_model_params_default(&mp);
    mp.quiet = true;
    rp_model *m = NULL;
    rp_tokenizer *tok = NULL;
    if (!(o.model = bench_model_path(o.model)))
        return 1;
    if (bench_load(o.model, "cpu", o.threads, false, &mp, &m) || rp_tok_load_file(o.model, &tok)) {
        fprintf(stderr, "prefix-bench: %s\n", rp_error_message());
        return 1;
    }
    row rows[65];
    memset(rows, 0, sizeof(rows));
    double restart_s = 0;
    for (int r = 0; r < o.repeat; r++) {
        char dir[4096];
        snprintf(dir, sizeof(dir), "%s/run%d", o.cache_dir, r);
        session(m, tok, &o, dir, rows, &restart_s);
    }
    printf("# %s, %d threads; system %d tokens, +%d user and %d generated tokens per turn; best of %d\n",
           rp_model_describe(m), rp_backend_threads(rp_model_backend(m)), o.sys, o.user, o.gen, o.repeat);
    printf(
        "| turn | prompt | cached | TTFT | cold TTFT | cold: prompt - prefix | new tokens alone | new tokens in place "
        "| TTFT / in place |\n|---|---|---|---|---|---|---|---|---|\n");
    for (int t = 0; t <= o.turns; t++) {
        const row *r = &rows[t];
        printf("| %d%s | %d | %d | %.1f ms | %.0f ms | %.0f ms | %.1f ms | %.1f ms | %.2f |\n", t + 1,
               t == o.turns ? " after restart" : "", r->n, r->cached, r->cached_s * 1e3, r->cold_s * 1e3,
               (r->cold_s - r->prefix_s) * 1e3, r->head_s * 1e3, r->place_s * 1e3, r->cached_s / r->place_s);
    }
    printf("(restart: destroy with the flush to disk plus create with the index: %.0f ms)\n", restart_s * 1e3);
    rp_tok_destroy(tok);
    rp_model_destroy(m);
    return 0;
}
