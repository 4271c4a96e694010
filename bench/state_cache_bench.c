/*
 * state_cache_bench.c - what the prefix cache's recurrent-state snapshots cost, at a
 * real model's state geometry, without the model: the memory of one snapshot, the
 * time to make one (rp_cache_publish_state: the state copied out of its slot, into
 * fresh memory and into the memory of the least recently used snapshot), to
 * restore one from memory (rp_cache_lookup + rp_cache_take), to write one to its
 * file (the writer thread, measured from the publish until the file is indexed), and
 * to restore one from disk after a restart (read, checksum, copy into the slot). The
 * prefix is a few KV blocks of the model's attention layers; the state dominates.
 * Each figure is the median of --runs, each run on a prefix of its own. Not a test:
 * the numbers go to bench/RESULTS.md.
 *
 * usage: state-cache-bench [--shape qwen3.5-9b|qwen3.6-35b-a3b] [--runs N] --dir DIR
 */
#include "cache/cache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BS 16
#define PREFIX_BLOCKS 4
#define RUNS_MAX 64

typedef struct shape {
    const char *name;
    int gdn_layers, attn_layers, kv_heads, head_dim;
    rp_kv_state_geom g;
} shape;

// transformers 5.17's Qwen3_5TextConfig / Qwen3_5MoeTextConfig defaults (docs/models/qwen3_5.md).
static const shape SHAPES[] = {
    {"qwen3.5-9b", 24, 8, 4, 256, {.n_layer = 24, .n_k_head = 16, .n_v_head = 32, .dk = 128, .dv = 128, .kc = 4}},
    {"qwen3.6-35b-a3b", 30, 10, 2, 256, {.n_layer = 30, .n_k_head = 16, .n_v_head = 32, .dk = 128, .dv = 128, .kc = 4}},
};

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void die(const char *what)
{
    fprintf(stderr, "state-cache-bench: %s: %s\n", what, rp_error_message());
    exit(1);
}

static void tokens(int32_t *t, int n, int run)
{
    for (int i = 0; i < n; i++)
        t[i] = 1000 * (run + 1) + i;
}

static rp_cache *make_cache(rp_kv_pool *p, const char *dir, uint64_t state_mem)
{
    rp_cache_params cp;
    rp_cache_params_default(&cp);
    cp.dir = dir;
    cp.disk_budget = (uint64_t)64 << 30;
    cp.state_mem = state_mem;
    uint8_t fp[16] = {0x5a, 0x7e};
    rp_cache *c = NULL;
    if (rp_cache_create(p, fp, &cp, &c))
        die("rp_cache_create");
    if (!rp_cache_dir(c))
        die("the disk tier is off");
    return c;
}

int main(int argc, char **argv)
{
    const shape *sh = &SHAPES[0];
    const char *dir = NULL;
    int runs = 7;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--shape") && i + 1 < argc) {
            const char *s = argv[++i];
            sh = NULL;
            for (size_t k = 0; k < sizeof(SHAPES) / sizeof(SHAPES[0]); k++)
                if (!strcmp(SHAPES[k].name, s))
                    sh = &SHAPES[k];
            if (!sh) {
                fprintf(stderr, "state-cache-bench: unknown shape %s\n", s);
                return 2;
            }
        } else if (!strcmp(argv[i], "--runs") && i + 1 < argc) {
            runs = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--dir") && i + 1 < argc) {
            dir = argv[++i];
        } else {
            fprintf(stderr, "usage: state-cache-bench [--shape qwen3.5-9b|qwen3.6-35b-a3b] [--runs N] --dir DIR\n");
            return 2;
        }
    }
    if (!dir || runs < 1 || runs > RUNS_MAX) {
        fprintf(stderr, "state-cache-bench: --dir DIR is needed, and --runs 1..%d\n", RUNS_MAX);
        return 2;
    }
    rp_backend *be;
    if (rp_backend_open("cpu", &(rp_backend_params){.n_threads = 1}, &be))
        die("cpu backend");
    rp_kv_state_geom g = sh->g;
    g.n_slots = 2;
    g.log_cap = 9;
    rp_kv_pool *p = NULL;
    int n_blocks = 2 * runs * PREFIX_BLOCKS + 8;
    if (rp_kv_pool_create(be, sh->attn_layers, sh->kv_heads, sh->head_dim, BS, n_blocks, RP_DTYPE_F16, &p) ||
        rp_kv_pool_add_states(p, &g))
        die("the pool");
    size_t sb = rp_kv_pool_state_bytes(p);
    rp_cache *c = make_cache(p, dir, (uint64_t)runs * sb); // room for one snapshot a run

    static int32_t t[2 * RUNS_MAX][PREFIX_BLOCKS * BS + 1];
    double mk[2 * RUNS_MAX], hit[RUNS_MAX], wr[2 * RUNS_MAX], dhit[RUNS_MAX];
    rp_kv_seq s;
    for (int r = 0; r < 2 * runs; r++) { // make a snapshot, wait for its file (then again, replacing them)
        tokens(t[r], PREFIX_BLOCKS * BS + 1, r);
        rp_kv_seq_init(&s);
        if (rp_kv_seq_reserve(p, &s, PREFIX_BLOCKS * BS + 1))
            die("reserve");
        float *host = rp_malloc(sb);
        for (size_t i = 0; i < sb / sizeof(float); i++)
            host[i] = (float)(i % 977) * 0.25f + (float)r;
        if (rp_kv_seq_state_write(p, &s, PREFIX_BLOCKS * BS, host))
            die("state write");
        rp_free(host);
        rp_cache_stats st0, st;
        rp_cache_get_stats(c, &st0);
        double t0 = rp_time_s();
        rp_cache_publish_state(c, t[r], &s, PREFIX_BLOCKS);
        double t1 = rp_time_s();
        do {
            rp_cache_get_stats(c, &st);
            usleep(200);
        } while (st.disk_writes == st0.disk_writes);
        mk[r] = t1 - t0;
        wr[r] = rp_time_s() - t0;
        if (st.state_saves != st0.state_saves + 1)
            die("no snapshot was made");
        rp_kv_seq_deinit(p, &s);
    }
    for (int r = 0; r < runs; r++) { // restore from memory (the second round's snapshots)
        rp_cache_match m;
        double t0 = rp_time_s();
        rp_cache_lookup(c, t[runs + r], PREFIX_BLOCKS, &m);
        rp_kv_seq_init(&s);
        int got = 0;
        if (rp_cache_take(c, t[runs + r], &s, &got) || got != PREFIX_BLOCKS)
            die("memory take");
        hit[r] = rp_time_s() - t0;
        rp_kv_seq_deinit(p, &s);
    }
    double t0 = rp_time_s();
    rp_cache_destroy(c); // the blocks go to disk
    c = make_cache(p, dir, (uint64_t)runs * sb);
    double restart = rp_time_s() - t0;
    for (int r = 0; r < runs; r++) { // restore from disk (the file was just written: likely in the page cache)
        rp_cache_match m;
        double t1 = rp_time_s();
        rp_cache_lookup(c, t[r], PREFIX_BLOCKS, &m);
        rp_kv_seq_init(&s);
        int got = 0;
        if (rp_cache_take(c, t[r], &s, &got) || got != PREFIX_BLOCKS)
            die("disk take");
        dhit[r] = rp_time_s() - t1;
        rp_kv_seq_deinit(p, &s);
    }
    rp_cache_stats st;
    rp_cache_get_stats(c, &st);
    double mb = (double)sb / 1e6;
    double m_mk = median(mk, runs), m_mk2 = median(mk + runs, runs), m_hit = median(hit, runs),
           m_wr = median(wr, 2 * runs), m_dhit = median(dhit, runs);
    printf("%s: state snapshot %.1f MB (%d Gated DeltaNet layers; %d KV blocks of %d tokens beside it, %.2f MB)\n",
           sh->name, mb, g.n_layer, PREFIX_BLOCKS, BS, PREFIX_BLOCKS * rp_kv_pool_block_bytes(p) / 1e6);
    printf("  make, into fresh memory         %8.2f ms  %6.2f GB/s\n", m_mk * 1e3, mb / 1e3 / m_mk);
    printf("  make, replacing the oldest      %8.2f ms  %6.2f GB/s\n", m_mk2 * 1e3, mb / 1e3 / m_mk2);
    printf("  restore from memory             %8.2f ms  %6.2f GB/s\n", m_hit * 1e3, mb / 1e3 / m_hit);
    printf("  file written (publish -> index) %8.2f ms  %6.2f GB/s\n", m_wr * 1e3, mb / 1e3 / m_wr);
    printf("  restore from disk after restart %8.2f ms  %6.2f GB/s (%llu read from disk; restart %.1f ms)\n",
           m_dhit * 1e3, mb / 1e3 / m_dhit, (unsigned long long)st.state_disk_hits, restart * 1e3);
    printf("  (medians of %d runs)\n", runs);
    rp_cache_destroy(c);
    rp_kv_pool_destroy(p);
    rp_backend_destroy(be);
    return 0;
}
