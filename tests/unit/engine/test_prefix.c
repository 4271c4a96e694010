/*
 * test_prefix.c - the engine with its prefix cache: greedy output identical
 * with and without cache hits (and n_cached checked to the token, so a miss
 * cannot pass for a hit), follow-up turns, fully cached prompts, requests
 * sharing a prefix at once, preempted requests finding their own blocks, the
 * MTP model's recomputed last position, restarts from the disk tier, bad
 * block files, the fault hook killing a forked engine while it writes,
 * eviction to disk mid-run, the disk budget, KV sizing and allocation
 * failures.
 *
 * The model is models/rapid-tiny-draft (2 layers) loaded with max_batch 32,
 * so prompts are prefilled in chunks; the references (harness_greedy) run on
 * a second instance with whole prompts in one forward. Requests use
 * ignore_eos so every run has a fixed length.
 */
#define RP_TEST_TMP_PREFIX "rp-prefix"
#include "test_model.h"
#include "../model/model_harness.h"
#include "test_tmp.h"

#include "engine/engine.h"
#include "tokenizer/tokenizer.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_BATCH 32
#define BS 16 // the engine's default block size
#define GEN 20
#define READ_GUARD_S 120.0

static rp_model *M, *M_REF;
static rp_tokenizer *TOK;

typedef struct toks {
    int32_t ids[1024];
    int n;
} toks;

static toks SYS;  // a system prompt several blocks long
static toks Q[8]; // user turns

static void encode(const char *text, toks *out)
{
    int32_t *ids;
    size_t n;
    if (rp_tok_encode(TOK, text, strlen(text), false, &ids, &n))
        fail_msg("encode: %s", rp_error_message());
    assert_true(n < 1024);
    memcpy(out->ids, ids, n * sizeof(int32_t));
    out->n = (int)n;
    rp_free(ids);
}

static void append(toks *t, const int32_t *ids, int n)
{
    assert_true(t->n + n <= 1024);
    memcpy(t->ids + t->n, ids, (size_t)n * sizeof(int32_t));
    t->n += n;
}

static int setup(void **state)
{
    if (rp_test_tmp_setup(state))
        return -1;
    rp_model_params mp;
    rp_model_params_default(&mp);
    mp.max_batch = MAX_BATCH;
    mp.quiet = true;
    const char *dir = rp_test_source("models/rapid-tiny-draft");
    if (rp_test_load(dir, 1, false, &mp, &M) || rp_tok_load_file(dir, &TOK))
        return -1;
    mp.max_batch = 0;
    if (rp_test_load(dir, 1, false, &mp, &M_REF))
        return -1;
    rp_log_set_level(RP_LOG_ERROR); // the fault hook's warning in forked children
    return 0;
}

static int teardown(void **state)
{
    rp_tok_destroy(TOK);
    rp_model_destroy(M);
    rp_model_destroy(M_REF);
    return rp_test_tmp_teardown(state);
}

static const char *QUESTIONS[] = {
    "Write a Python function that returns the sum of a list.",
    "What's the weather in Paris?",
    "Rename the variable x to count in: for x in range(10): print(x)",
    "Tell me a joke about compilers.",
    "List three prime numbers.",
    "Sort [3, 1, 2] in descending order.",
    "Translate 'good morning' into French.",
    "def fib(n):",
};

static void make_prompts(void)
{
    if (SYS.n)
        return;
    encode("<|im_start|>system\nYou are a careful coding assistant. You answer in short sentences, you show code "
           "in fenced blocks, you never invent APIs, and when a question is unclear you ask one question back. "
           "Tools: read_file(path), write_file(path, text), run(command). Use them when a task needs files."
           "<|im_end|>\n",
           &SYS);
    for (int i = 0; i < 8; i++) {
        char text[512];
        snprintf(text, sizeof(text), "<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n", QUESTIONS[i]);
        encode(text, &Q[i]);
    }
}

// sys + user turn i
static void turn1(int i, toks *out)
{
    make_prompts();
    out->n = 0;
    append(out, SYS.ids, SYS.n);
    append(out, Q[i].ids, Q[i].n);
}

static rp_engine *make_engine(const rp_engine_params *ep)
{
    rp_engine *e = NULL;
    if (rp_engine_create(M, TOK, ep, &e))
        fail_msg("rp_engine_create: %s", rp_error_message());
    return e;
}

static rp_engine_params params(void)
{
    rp_engine_params ep;
    rp_engine_params_default(&ep);
    return ep;
}

static rp_gen_params greedy(const toks *p, int max_tokens)
{
    rp_gen_params gp;
    rp_gen_params_default(&gp);
    gp.prompt = p->ids;
    gp.n_prompt = p->n;
    gp.max_tokens = max_tokens;
    gp.sample.temperature = 0;
    gp.ignore_eos = true;
    return gp;
}

typedef struct result {
    int32_t ids[256];
    int n;
    rp_gen_finish finish;
    rp_gen_stats st;
} result;

// Reads g to its end (no cmocka calls: reader threads use it): -1 on a hang.
static int read_all(rp_gen *g, result *r)
{
    r->n = 0;
    rp_gen_token buf[5];
    for (;;) {
        int k;
        rp_gen_finish f = rp_gen_read(g, READ_GUARD_S, buf, 5, &k);
        if (f == RP_GEN_RUNNING && k == 0)
            return -1;
        for (int i = 0; i < k && r->n < 256; i++)
            r->ids[r->n++] = buf[i].id;
        if (f != RP_GEN_RUNNING) {
            r->finish = f;
            rp_gen_get_stats(g, &r->st);
            return 0;
        }
    }
}

static void run(rp_engine *e, const toks *p, int max_tokens, result *r)
{
    rp_gen_params gp = greedy(p, max_tokens);
    rp_gen *g = NULL;
    if (rp_engine_submit(e, &gp, &g))
        fail_msg("submit: %s", rp_error_message());
    if (read_all(g, r))
        fail_msg("a request made no progress in %.0f s", READ_GUARD_S);
    rp_gen_release(g);
}

// The plain greedy loop's tokens for p.
static void reference(const toks *p, int n, int32_t *out)
{
    harness_greedy(M_REF, p->ids, p->n, n, out, NULL);
}

static void check_same(const result *r, const int32_t *want, int n, const char *what)
{
    if (r->finish != RP_GEN_LENGTH)
        fail_msg("%s: finished %d", what, r->finish);
    assert_int_equal(r->n, n);
    for (int i = 0; i < n; i++)
        if (r->ids[i] != want[i])
            fail_msg("%s: token %d is %d, the reference has %d", what, i, r->ids[i], want[i]);
}

// Tokens a request finds cached when an earlier one published `published`
// computed tokens that are a prefix of its n_prompt tokens: whole blocks,
// less one when that covers the whole prompt (its last token always runs).
static int expect_cached(int published, int n_prompt)
{
    int c = (published < n_prompt ? published : n_prompt) / BS * BS;
    return c == n_prompt ? c - 1 : c;
}

static rp_engine_stats stats(rp_engine *e)
{
    rp_engine_stats es;
    rp_engine_get_stats(e, &es);
    return es;
}

/* ---- memory ----------------------------------------------------------------- */

static void test_followup_turn(void **state)
{
    toks p1, p2;
    turn1(0, &p1);
    int32_t ref1[GEN], ref2[GEN];
    reference(&p1, GEN, ref1);
    rp_engine_params ep = params();
    rp_engine *e = make_engine(&ep);
    result r;
    run(e, &p1, GEN, &r);
    check_same(&r, ref1, GEN, "turn 1");
    assert_int_equal(r.st.n_cached, 0);
    // Turn 2: the whole first exchange, then a new user message.
    p2 = p1;
    append(&p2, r.ids, GEN);
    append(&p2, Q[1].ids, Q[1].n);
    reference(&p2, GEN, ref2);
    run(e, &p2, GEN, &r);
    check_same(&r, ref2, GEN, "turn 2");
    // Turn 1's request ran its prompt and GEN - 1 generated tokens (the last one sampled has no KV).
    int want = expect_cached(p1.n + GEN - 1, p2.n);
    assert_true(want > p1.n - BS);
    assert_int_equal(r.st.n_cached, want);
    rp_engine_stats es = stats(e);
    assert_true(es.prefix_cache);
    assert_int_equal(es.cache_hit_tokens, (uint64_t)want);
    assert_int_equal(es.cache_miss_tokens, (uint64_t)(p1.n + p2.n - want));
    assert_int_equal(es.tokens_prefilled, (uint64_t)(p1.n + p2.n - want));
    assert_int_equal(es.cache.hit_blocks, (uint64_t)(want / BS));
    assert_true(es.cache.mem_blocks > 0);
    assert_int_equal(es.cache.mem_bytes, es.cache.mem_blocks * (es.kv_bytes / (uint64_t)es.kv_blocks));
    assert_int_equal(es.kv_blocks_used, 0);
    assert_false(es.cache.disk);
    rp_engine_destroy(e);

    // The same turn 2 on an engine without the cache: same tokens, nothing cached.
    ep.no_prefix_cache = true;
    e = make_engine(&ep);
    run(e, &p1, GEN, &r);
    run(e, &p2, GEN, &r);
    check_same(&r, ref2, GEN, "turn 2, no cache");
    assert_int_equal(r.st.n_cached, 0);
    es = stats(e);
    assert_false(es.prefix_cache);
    assert_int_equal(es.cache.mem_blocks, 0);
    rp_engine_destroy(e);
}

static void test_fully_cached_prompt(void **state)
{
    // Prompts of exactly 1 and 3 blocks, and one of 3 blocks and a bit: a repeat
    // finds all of it cached and still runs its last token (copy on write).
    toks full;
    turn1(2, &full);
    int lens[] = {BS, 3 * BS, 3 * BS + 5};
    rp_engine_params ep = params();
    rp_engine *e = make_engine(&ep);
    for (int k = 0; k < 3; k++) {
        toks p = full;
        assert_true(p.n >= lens[k]);
        p.n = lens[k];
        p.ids[0] = 200 + k; // nothing shared with the other lengths
        int32_t ref[GEN];
        reference(&p, GEN, ref);
        for (int rep = 0; rep < 3; rep++) {
            result r;
            run(e, &p, GEN, &r);
            check_same(&r, ref, GEN, "a repeated prompt");
            assert_int_equal(r.st.n_cached, rep == 0 ? 0 : expect_cached(p.n + GEN - 1, p.n));
        }
    }
    rp_engine_stats es = stats(e);
    assert_int_equal(es.kv_blocks_used, 0);
    rp_engine_destroy(e);
}

typedef struct job {
    rp_engine *e;
    toks p;
    result r;
    int rc;
} job;

static void *job_main(void *arg)
{
    job *j = arg;
    rp_gen_params gp = greedy(&j->p, GEN);
    rp_gen *g = NULL;
    j->rc = -2;
    if (rp_engine_submit(j->e, &gp, &g))
        return NULL;
    j->rc = read_all(g, &j->r);
    rp_gen_release(g);
    return NULL;
}

static void test_shared_prefix_concurrent(void **state)
{
    enum { N = 7 };
    static job jobs[N];
    static int32_t ref[N][GEN];
    for (int i = 0; i < N; i++) {
        turn1(i + 1, &jobs[i].p);
        reference(&jobs[i].p, GEN, ref[i]);
    }
    for (int warm = 0; warm < 2; warm++) {
        rp_engine_params ep = params();
        rp_engine *e = make_engine(&ep);
        if (warm) { // the system prompt is cached before they come
            toks p0;
            turn1(0, &p0);
            result r;
            run(e, &p0, GEN, &r);
        }
        pthread_t th[N];
        for (int i = 0; i < N; i++) {
            jobs[i].e = e;
            assert_int_equal(pthread_create(&th[i], NULL, job_main, &jobs[i]), 0);
        }
        for (int i = 0; i < N; i++)
            pthread_join(th[i], NULL);
        int hits = 0;
        for (int i = 0; i < N; i++) {
            assert_int_equal(jobs[i].rc, 0);
            check_same(&jobs[i].r, ref[i], GEN, warm ? "sharing a cached prefix" : "together, cold");
            // Warm, each finds at least the system prompt's whole blocks.
            if (warm)
                assert_true(jobs[i].r.st.n_cached >= SYS.n / BS * BS);
            hits += jobs[i].r.st.n_cached > 0;
        }
        if (warm)
            assert_int_equal(hits, N);
        rp_engine_stats es = stats(e);
        assert_int_equal(es.kv_blocks_used, 0);
        assert_int_equal(es.requests_done, (uint64_t)(N + warm));
        rp_engine_destroy(e);
    }
}

static void test_preemption_reuses_blocks(void **state)
{
    // 6 requests of ~60 tokens each in a pool of 96 tokens (blocks of 4): they
    // preempt each other; readmitted, each finds its own published blocks.
    enum { N = 6 };
    static job jobs[N];
    static int32_t ref[N][GEN];
    for (int i = 0; i < N; i++) {
        jobs[i].p.n = 0;
        append(&jobs[i].p, Q[i].ids, Q[i].n);
        append(&jobs[i].p, SYS.ids, 24);
        reference(&jobs[i].p, GEN, ref[i]);
    }
    rp_engine_params ep = params();
    ep.kv_tokens = 96;
    ep.kv_block = 4;
    ep.max_running = 8;
    rp_engine *e = make_engine(&ep);
    rp_gen *g[N];
    for (int i = 0; i < N; i++) { // submitted together, read afterwards
        rp_gen_params gp = greedy(&jobs[i].p, GEN);
        assert_int_equal(rp_engine_submit(e, &gp, &g[i]), RP_OK);
    }
    for (int i = 0; i < N; i++) {
        assert_int_equal(read_all(g[i], &jobs[i].r), 0);
        rp_gen_release(g[i]);
        check_same(&jobs[i].r, ref[i], GEN, "through preemption");
    }
    rp_engine_stats es = stats(e);
    assert_true(es.preemptions > 0);
    assert_true(es.cache_hit_tokens > 0);
    assert_int_equal(es.kv_blocks_used, 0);
    rp_engine_destroy(e);
}

static void test_mtp_model_recomputes_last(void **state)
{
    rp_model_params mp;
    rp_model_params_default(&mp);
    mp.max_batch = MAX_BATCH;
    mp.quiet = true;
    rp_model *mtp = NULL, *mtp_ref = NULL;
    rp_tokenizer *tok = NULL;
    const char *dir = rp_test_source("models/rapid-tiny");
    assert_int_equal(rp_test_load(dir, 1, false, &mp, &mtp), RP_OK);
    mp.max_batch = 0;
    assert_int_equal(rp_test_load(dir, 1, false, &mp, &mtp_ref), RP_OK);
    assert_int_equal(rp_tok_load_file(dir, &tok), RP_OK);
    assert_true(rp_model_has_mtp(mtp));
    toks p;
    turn1(3, &p);
    int32_t ref[GEN];
    harness_greedy(mtp_ref, p.ids, p.n, GEN, ref, NULL);
    rp_engine *e = NULL;
    rp_engine_params ep = params();
    ep.kv_tokens = 1024;
    assert_int_equal(rp_engine_create(mtp, tok, &ep, &e), RP_OK);
    for (int rep = 0; rep < 3; rep++) {
        result r;
        run(e, &p, GEN, &r);
        check_same(&r, ref, GEN, "the MTP model");
        // With an MTP layer the last cached position always runs again.
        int c = (p.n + GEN - 1 < p.n ? p.n + GEN - 1 : p.n) / BS * BS;
        assert_int_equal(r.st.n_cached, rep == 0 ? 0 : c - 1);
    }
    rp_engine_destroy(e);
    rp_tok_destroy(tok);
    rp_model_destroy(mtp);
    rp_model_destroy(mtp_ref);
}

static void test_prefill_chunk(void **state)
{
    toks p;
    turn1(4, &p);
    int32_t ref[GEN];
    reference(&p, GEN, ref);
    rp_engine_params ep = params();
    ep.prefill_chunk = 5;
    ep.no_prefix_cache = true;
    rp_engine *e = make_engine(&ep);
    result r;
    run(e, &p, GEN, &r);
    check_same(&r, ref, GEN, "prefill in chunks of 5");
    rp_engine_stats es = stats(e);
    assert_int_equal(es.steps, (uint64_t)((p.n + 4) / 5 + GEN - 1)); // ceil(n/5) prefill steps, then decodes
    rp_engine_destroy(e);
    ep.prefill_chunk = -1;
    rp_engine *bad = NULL;
    assert_int_equal(rp_engine_create(M, TOK, &ep, &bad), RP_ERR_INVALID);
    assert_non_null(strstr(rp_error_message(), "prefill_chunk"));
}

static void test_kv_sizing(void **state)
{
    const rp_model_config *c = rp_model_get_config(M);
    uint64_t block = rp_kv_block_bytes(rp_model_kv_layers(M), c->n_kv_head, c->head_dim, BS, RP_DTYPE_F16);
    rp_engine_params ep = params();
    ep.kv_memory = 10 * block + block / 2;
    rp_engine *e = make_engine(&ep);
    rp_engine_stats es = stats(e);
    assert_int_equal(es.kv_blocks, 10);
    assert_int_equal(es.kv_bytes, 10 * block);
    rp_engine_destroy(e);
    // Float32 K and V: the same memory holds half the blocks.
    ep.kv_f32 = true;
    e = make_engine(&ep);
    es = stats(e);
    assert_int_equal(es.kv_blocks, 5);
    assert_int_equal(es.kv_bytes, 10 * block);
    rp_engine_destroy(e);
    ep.kv_f32 = false;
    // Less than a block.
    ep.kv_memory = block - 1;
    assert_int_equal(rp_engine_create(M, TOK, &ep, &e), RP_ERR_RANGE);
    assert_non_null(strstr(rp_error_message(), "holds no blocks"));
    // An explicit context longer than the pool: refused with the numbers.
    ep.kv_memory = 0;
    ep.kv_tokens = 64;
    ep.n_ctx = 200;
    assert_int_equal(rp_engine_create(M, TOK, &ep, &e), RP_ERR_RANGE);
    assert_non_null(strstr(rp_error_message(), "200 tokens"));
    assert_non_null(strstr(rp_error_message(), "64 tokens"));
    // kv_tokens wins over kv_memory; the default context is cut to what the pool holds
    // (what one request can get, and what the server advertises).
    ep.n_ctx = 0;
    ep.kv_memory = 1;
    e = make_engine(&ep);
    es = stats(e);
    assert_int_equal(es.kv_blocks, 4);
    assert_true(c->max_ctx > 64);
    assert_int_equal(es.n_ctx, 64);
    assert_int_equal(rp_engine_n_ctx(e), 64);
    rp_engine_destroy(e);
    ep.cache_flush_s = NAN;
    assert_int_equal(rp_engine_create(M, TOK, &ep, &e), RP_ERR_INVALID);
}

/* ---- disk ------------------------------------------------------------------- */

static rp_engine_params disk_params(const char *dir)
{
    rp_engine_params ep = params();
    ep.cache_dir = dir;
    return ep;
}

static const char *fresh_dir(const char *name)
{
    const char *d = rp_test_tmp_path(name);
    assert_int_equal(mkdir(d, 0755), 0);
    return d;
}

static void test_restart_from_disk(void **state)
{
    const char *dir = fresh_dir("restart");
    toks p1, p2;
    turn1(5, &p1);
    int32_t ref1[GEN], ref2[GEN];
    reference(&p1, GEN, ref1);
    rp_engine_params ep = disk_params(dir);
    rp_engine *e = make_engine(&ep);
    result r;
    run(e, &p1, GEN, &r);
    check_same(&r, ref1, GEN, "before the restart");
    p2 = p1;
    append(&p2, r.ids, GEN);
    append(&p2, Q[6].ids, Q[6].n);
    reference(&p2, GEN, ref2);
    rp_engine_stats es = stats(e);
    assert_true(es.cache.disk);
    assert_int_equal(es.cache.disk_blocks, 0); // nothing evicted: written at destroy
    rp_engine_destroy(e);

    // Restarted: the folder is indexed at create; the same prompt comes from disk.
    e = make_engine(&ep);
    es = stats(e);
    int published = (p1.n + GEN - 1) / BS;
    assert_int_equal(es.cache.disk_blocks, (uint64_t)published);
    assert_int_equal(es.cache.mem_blocks, 0);
    run(e, &p1, GEN, &r);
    check_same(&r, ref1, GEN, "after the restart");
    assert_int_equal(r.st.n_cached, expect_cached(p1.n + GEN - 1, p1.n));
    es = stats(e);
    assert_int_equal(es.cache.disk_hit_blocks, (uint64_t)(p1.n / BS));
    rp_engine_destroy(e);

    // And the follow-up turn after another restart: all the first exchange from disk.
    e = make_engine(&ep);
    run(e, &p2, GEN, &r);
    check_same(&r, ref2, GEN, "turn 2 after a restart");
    assert_int_equal(r.st.n_cached, expect_cached(p1.n + GEN - 1, p2.n));
    assert_true(stats(e).cache.disk_hit_blocks >= (uint64_t)published);
    rp_engine_destroy(e);
}

// A long prefix on disk requested while another request decodes is read a few
// blocks per step into the memory cache before the request is admitted: every
// block still comes from disk, the output is the plain loop's, and so is the
// decoding request's.
static void test_disk_reads_spread_while_decoding(void **state)
{
    const char *dir = fresh_dir("spread");
    make_prompts();
    static toks L;
    L.n = 0;
    append(&L, SYS.ids, SYS.n); // up to ~480 tokens (the reference runs the prompt in one forward of 512)
    for (int k = 0; L.n + Q[k % 8].n + GEN < 500; k++)
        append(&L, Q[k % 8].ids, Q[k % 8].n);
    assert_true(L.n / BS > 16); // more than one step's reads (DISK_READS_PER_STEP is 16)
    static toks D;
    turn1(2, &D);
    static int32_t refl[GEN], refd[GEN];
    reference(&L, GEN, refl);
    reference(&D, GEN, refd);
    rp_engine_params ep = disk_params(dir);
    ep.no_prefix_cache = false;
    rp_engine *e = make_engine(&ep);
    static result r;
    run(e, &L, GEN, &r);
    check_same(&r, refl, GEN, "the long prompt, first time");
    rp_engine_destroy(e); // flushed to disk

    e = make_engine(&ep);
    rp_gen_params gd = greedy(&D, GEN);
    rp_gen *d = NULL;
    if (rp_engine_submit(e, &gd, &d))
        fail_msg("submit: %s", rp_error_message());
    rp_gen_token first;
    int k = 0;
    assert_int_equal(rp_gen_read(d, READ_GUARD_S, &first, 1, &k), RP_GEN_RUNNING); // it decodes
    assert_int_equal(k, 1);
    run(e, &L, GEN, &r);
    check_same(&r, refl, GEN, "the long prompt from disk while another decodes");
    assert_int_equal(r.st.n_cached, expect_cached(L.n + GEN - 1, L.n));
    static result rd;
    if (read_all(d, &rd))
        fail_msg("the decoding request made no progress");
    rp_gen_release(d);
    assert_int_equal(rd.n, GEN - 1);
    assert_int_equal(first.id, refd[0]);
    for (int i = 0; i < GEN - 1; i++)
        assert_int_equal(rd.ids[i], refd[i + 1]);
    rp_engine_stats es = stats(e);
    assert_int_equal(es.cache.disk_hit_blocks, (uint64_t)(L.n / BS)); // every block read from disk once
    rp_engine_destroy(e);
}

// Flips a byte of every block file, or truncates them all, in the fingerprint folder under dir.
static int spoil_files(const char *dir, bool truncate_them)
{
    char cmd[1200];
    snprintf(cmd, sizeof(cmd), "ls %s/*/*.kvb > %s/list.txt", dir, dir);
    assert_int_equal(system(cmd), 0);
    char list[700];
    snprintf(list, sizeof(list), "%s/list.txt", dir);
    FILE *f = fopen(list, "r");
    assert_non_null(f);
    char path[1024];
    int n = 0;
    while (fgets(path, sizeof(path), f)) {
        path[strcspn(path, "\n")] = 0;
        struct stat sb;
        assert_int_equal(stat(path, &sb), 0);
        if (truncate_them) {
            assert_int_equal(truncate(path, sb.st_size / 2), 0);
        } else {
            int fd = open(path, O_RDWR);
            uint8_t b;
            assert_int_equal(pread(fd, &b, 1, sb.st_size - 3), 1);
            b ^= 1;
            assert_int_equal(pwrite(fd, &b, 1, sb.st_size - 3), 1);
            close(fd);
        }
        n++;
    }
    fclose(f);
    unlink(list);
    return n;
}

static void test_bad_block_files(void **state)
{
    toks p;
    turn1(6, &p);
    int32_t ref[GEN];
    reference(&p, GEN, ref);
    for (int mode = 0; mode < 2; mode++) {
        const char *dir = fresh_dir(mode ? "bad-truncated" : "bad-flipped");
        rp_engine_params ep = disk_params(dir);
        rp_engine *e = make_engine(&ep);
        result r;
        run(e, &p, GEN, &r);
        rp_engine_destroy(e); // the flush writes the blocks
        int n = spoil_files(dir, mode == 1);
        assert_true(n > 1);
        e = make_engine(&ep);
        rp_engine_stats es = stats(e);
        if (mode == 1) { // truncated: thrown out by the index
            assert_int_equal(es.cache.disk_blocks, 0);
            assert_int_equal(es.cache.disk_rejects, (uint64_t)n);
        } else { // a payload bit: indexed, refused at the first load
            assert_int_equal(es.cache.disk_blocks, (uint64_t)n);
        }
        run(e, &p, GEN, &r);
        check_same(&r, ref, GEN, mode ? "truncated block files" : "corrupt block files");
        assert_int_equal(r.st.n_cached, 0);
        es = stats(e);
        if (mode == 0)
            assert_int_equal(es.cache.disk_rejects, 1);
        assert_int_equal(es.cache.disk_hit_blocks, 0);
        rp_engine_destroy(e); // writes the blocks missing on disk again
        e = make_engine(&ep);
        run(e, &p, GEN, &r);
        check_same(&r, ref, GEN, "rewritten block files");
        // Truncated: all written again. Flipped: the first again, the second is still
        // the corrupt one (it was never read), found out now.
        assert_int_equal(r.st.n_cached, mode ? expect_cached(p.n + GEN - 1, p.n) : BS);
        rp_engine_destroy(e);
    }
}

// A forked child runs p on an engine over dir with RP_CACHE_FAULT=fault and is
// destroyed (the flush writes its blocks). Its exit status.
static int faulty_engine(const char *dir, const char *fault, const toks *p)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) { // no cmocka here: exit codes only (the parent had no threads running)
        setenv("RP_CACHE_FAULT", fault, 1);
        rp_engine_params ep = disk_params(dir);
        rp_engine *e = NULL;
        if (rp_engine_create(M, TOK, &ep, &e))
            _exit(1);
        rp_gen_params gp = greedy(p, GEN);
        rp_gen *g = NULL;
        static result r;
        if (rp_engine_submit(e, &gp, &g) || read_all(g, &r))
            _exit(2);
        rp_gen_release(g);
        rp_engine_destroy(e);
        _exit(0);
    }
    assert_true(pid > 0);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void test_fault_kill_while_writing(void **state)
{
    if (strcmp(rp_test_device(), "cpu") != 0) { // the child is forked: a GPU context does not survive fork
        print_message("skipping on %s: the test forks an engine, and a CUDA context is not usable after fork\n",
                      rp_test_device());
        skip();
    }
    toks p;
    turn1(7, &p);
    int32_t ref[GEN];
    reference(&p, GEN, ref);
    assert_true((p.n + GEN - 1) / BS >= 3);
    // Block files the child left in place: the flush writes a prefix's first blocks
    // first, in batches (temp files, one sync, renames), so a kill during a file's
    // write leaves the earlier batches only (which files shared a batch depends
    // on timing), a kill before the Nth rename the N - 1 files before it.
    struct {
        const char *fault;
        int whole_min, whole_max;
    } cases[] = {{"mid-write", 0, 0}, {"before-rename", 0, 0}, {"mid-write:2", 0, 1}, {"before-rename:3", 2, 2}};
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        char name[32];
        snprintf(name, sizeof(name), "kill%zu", k);
        const char *dir = fresh_dir(name);
        assert_int_equal(faulty_engine(dir, cases[k].fault, &p), RP_CACHE_FAULT_EXIT);
        rp_engine_params ep = disk_params(dir);
        rp_engine *e = make_engine(&ep);
        rp_engine_stats es = stats(e);
        int whole = (int)es.cache.disk_blocks;
        if (whole < cases[k].whole_min || whole > cases[k].whole_max)
            fail_msg("%s: %d block files survived", cases[k].fault, whole);
        result r;
        run(e, &p, GEN, &r);
        check_same(&r, ref, GEN, cases[k].fault);
        assert_int_equal(r.st.n_cached, whole * BS);
        rp_engine_destroy(e);
        // No temp file is left behind.
        char cmd[800];
        snprintf(cmd, sizeof(cmd), "ls %s/*/ | grep -q tmp", dir);
        assert_int_not_equal(system(cmd), 0);
    }
}

static void test_evict_to_disk_midrun(void **state)
{
    // A pool of 12 blocks: each new prompt pushes the previous ones' cached
    // blocks out of memory, and the writer puts them on disk.
    const char *dir = fresh_dir("evict");
    rp_engine_params ep = disk_params(dir);
    ep.kv_tokens = 12 * BS;
    rp_engine *e = make_engine(&ep);
    toks p[4];
    int32_t ref0[GEN];
    for (int i = 0; i < 4; i++) {
        turn1(i, &p[i]);
        p[i].ids[0] = 100 + i; // no shared prefix between them
        result r;
        run(e, &p[i], GEN, &r);
    }
    reference(&p[0], GEN, ref0);
    rp_engine_stats es;
    for (int t = 0; t < 3000; t++) { // the writer is asynchronous
        es = stats(e);
        if (es.cache.disk_writes > 0 && es.cache.disk_writes + es.cache.disk_write_drops >= es.cache.mem_evictions)
            break;
        usleep(10000);
    }
    assert_true(es.cache.mem_evictions > 0);
    assert_true(es.cache.disk_writes > 0);
    assert_int_equal(es.cache.disk_write_drops, 0);
    // The first prompt again: its beginning comes back from disk.
    result r;
    run(e, &p[0], GEN, &r);
    check_same(&r, ref0, GEN, "read back from disk mid-run");
    assert_true(r.st.n_cached >= BS);
    assert_true(stats(e).cache.disk_hit_blocks > 0);
    rp_engine_destroy(e);
}

static void test_disk_budget(void **state)
{
    const char *dir = fresh_dir("budget");
    const rp_model_config *c = rp_model_get_config(M);
    uint64_t block = rp_kv_block_bytes(rp_model_kv_layers(M), c->n_kv_head, c->head_dim, BS, RP_DTYPE_F16);
    uint64_t file = block + 128 + BS * 4;
    rp_engine_params ep = disk_params(dir);
    ep.cache_disk_budget = 3 * file;
    toks p;
    turn1(1, &p);
    assert_true((p.n + GEN - 1) / BS > 3);
    rp_engine *e = make_engine(&ep);
    result r;
    run(e, &p, GEN, &r);
    rp_engine_destroy(e);
    e = make_engine(&ep);
    rp_engine_stats es = stats(e);
    assert_int_equal(es.cache.disk_blocks, 3);
    assert_true(es.cache.disk_bytes <= ep.cache_disk_budget);
    assert_int_equal(es.cache.disk_budget, 3 * file);
    run(e, &p, GEN, &r);
    assert_int_equal(r.st.n_cached, 3 * BS); // the prefix's first three blocks were kept
    rp_engine_destroy(e);
}

// The model's folder under dir (dir/<fingerprint>), made by a throwaway engine.
static void model_dir(const char *dir, char *out, size_t cap)
{
    rp_engine_params ep = disk_params(dir);
    rp_engine *e = make_engine(&ep);
    snprintf(out, cap, "%s", rp_engine_cache_dir(e));
    rp_engine_destroy(e);
}

// stderr (the engine's log lines) between capture_begin and capture_end.
static int saved_stderr = -1;
static char captured[16384], capture_path[600];

static void capture_begin(void)
{
    fflush(stderr);
    rp_log_set_level(RP_LOG_WARN);
    saved_stderr = dup(2);
    snprintf(capture_path, sizeof(capture_path), "%s/stderr.txt", rp_test_tmpdir);
    int fd = open(capture_path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
    assert_true(saved_stderr >= 0 && fd >= 0);
    dup2(fd, 2);
    close(fd);
}

static void capture_end(void)
{
    fflush(stderr);
    dup2(saved_stderr, 2);
    close(saved_stderr);
    rp_log_set_level(RP_LOG_ERROR);
    FILE *f = fopen(capture_path, "r");
    assert_non_null(f);
    size_t n = fread(captured, 1, sizeof(captured) - 1, f);
    captured[n] = 0;
    fclose(f);
}

// A file where the model's cache folder should be: the engine starts, says
// once that the disk tier is off (naming the folder), and serves from memory.
static void test_cache_folder_is_a_file(void **state)
{
    const char *dir = fresh_dir("in-the-way");
    char fpd[800];
    model_dir(dir, fpd, sizeof(fpd));
    char cmd[1000];
    snprintf(cmd, sizeof(cmd), "rm -r '%s' && echo x > '%s'", fpd, fpd);
    assert_int_equal(system(cmd), 0);
    toks p;
    turn1(3, &p);
    int32_t ref[GEN];
    reference(&p, GEN, ref);
    rp_engine_params ep = disk_params(dir);
    rp_engine *e = NULL;
    capture_begin();
    rp_status st = rp_engine_create(M, TOK, &ep, &e);
    capture_end();
    if (st)
        fail_msg("rp_engine_create: %s", rp_error_message());
    const char *w = strstr(captured, "the disk tier is off");
    if (!w || strstr(w + 1, "the disk tier is off") || !strstr(captured, fpd)) // once, naming the folder
        fail_msg("the warning: [%s]", captured);
    assert_null(rp_engine_cache_dir(e));
    rp_engine_stats es = stats(e);
    assert_true(es.prefix_cache);
    assert_false(es.cache.disk);
    result r;
    for (int i = 0; i < 2; i++) { // the second time from the memory cache
        run(e, &p, GEN, &r);
        check_same(&r, ref, GEN, "without the disk tier");
    }
    assert_true(r.st.n_cached > 0);
    rp_engine_destroy(e);
}

// A FIFO named like a block file in the model's folder: startup finishes (in
// a forked child with an alarm, so a regression fails instead of hanging), the
// FIFO is deleted and counted, requests are served.
static void test_fifo_in_cache_folder(void **state)
{
    const char *dir = fresh_dir("fifo");
    char fpd[800], fifo[900];
    model_dir(dir, fpd, sizeof(fpd));
    snprintf(fifo, sizeof(fifo), "%s/0123456789abcdef0123456789abcdef.kvb", fpd);
    assert_int_equal(mkfifo(fifo, 0644), 0);
    toks p;
    turn1(4, &p);
    if (strcmp(rp_test_device(), "cpu") != 0) { // the check runs in a forked child
        print_message("skipped on %s: a GPU context does not survive fork (the CPU run covers the cache folder)\n",
                      rp_test_device());
        skip();
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) { // no cmocka here: exit codes only
        alarm(120);
        rp_engine_params ep = disk_params(dir);
        rp_engine *e = NULL;
        if (rp_engine_create(M, TOK, &ep, &e))
            _exit(1);
        rp_engine_stats es;
        rp_engine_get_stats(e, &es);
        if (!es.cache.disk || es.cache.disk_rejects != 1 || rp_file_exists(fifo))
            _exit(2);
        rp_gen_params gp = greedy(&p, GEN);
        rp_gen *g = NULL;
        static result r;
        if (rp_engine_submit(e, &gp, &g) || read_all(g, &r) || r.n != GEN)
            _exit(3);
        rp_gen_release(g);
        rp_engine_destroy(e);
        _exit(0);
    }
    assert_true(pid > 0);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (WIFSIGNALED(status))
        fail_msg("the engine was killed by signal %d: startup hung on the FIFO", WTERMSIG(status));
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

/* ---- allocation failures ------------------------------------------------------ */

static void test_alloc_failures(void **state)
{
    const char *dir = fresh_dir("oom");
    rp_engine_params ep = disk_params(dir);
    rp_engine *e = NULL;
    int fails = 0;
    for (long k = 0; k < 1000; k++) {
        rp_alloc_fail_after(k, false);
        rp_status st = rp_engine_create(M, TOK, &ep, &e);
        rp_alloc_fail_after(-1, false);
        if (st == RP_OK)
            break;
        assert_int_equal(st, RP_ERR_NOMEM);
        assert_null(e);
        fails++;
    }
    assert_non_null(e);
    assert_true(fails > 0);
    // One allocation fails in the submit or admission of a request whose prompt
    // is cached (the token list, the outbox, the sampler, the block table the
    // cached blocks join): submit fails, or the request ends ERROR "out of
    // memory", or it runs as it should. The engine and its cache go on.
    toks p;
    turn1(2, &p);
    int32_t ref[GEN];
    reference(&p, GEN, ref);
    result r;
    run(e, &p, GEN, &r);
    int errors = 0, table = 0;
    for (long k = 0; k < 40; k++) {
        rp_gen_params gp = greedy(&p, GEN);
        rp_gen *g = NULL;
        rp_alloc_fail_after(k, false);
        rp_status st = rp_engine_submit(e, &gp, &g);
        int rc = st ? 0 : read_all(g, &r);
        rp_alloc_fail_after(-1, false);
        if (st) {
            assert_int_equal(st, RP_ERR_NOMEM);
            continue;
        }
        assert_int_equal(rc, 0);
        if (r.finish == RP_GEN_ERROR) {
            const char *why = rp_gen_error(g);
            if (!strstr(why, "out of memory"))
                fail_msg("k=%ld: %s", k, why);
            table += strstr(why, "KV block table") != NULL;
            errors++;
        } else {
            check_same(&r, ref, GEN, "a cached request the failure missed");
            assert_true(r.st.n_cached > 0);
        }
        rp_gen_release(g);
    }
    assert_true(errors > 0);
    assert_true(table > 0); // the block table the cached blocks are adopted into
    run(e, &p, GEN, &r);
    check_same(&r, ref, GEN, "after the failures");
    assert_true(r.st.n_cached > 0);
    assert_int_equal(stats(e).kv_blocks_used, 0);
    rp_engine_destroy(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_followup_turn),
        cmocka_unit_test(test_fully_cached_prompt),
        cmocka_unit_test(test_shared_prefix_concurrent),
        cmocka_unit_test(test_preemption_reuses_blocks),
        cmocka_unit_test(test_mtp_model_recomputes_last),
        cmocka_unit_test(test_prefill_chunk),
        cmocka_unit_test(test_kv_sizing),
        cmocka_unit_test(test_restart_from_disk),
        cmocka_unit_test(test_disk_reads_spread_while_decoding),
        cmocka_unit_test(test_bad_block_files),
        cmocka_unit_test(test_fault_kill_while_writing),
        cmocka_unit_test(test_evict_to_disk_midrun),
        cmocka_unit_test(test_disk_budget),
        cmocka_unit_test(test_cache_folder_is_a_file),
        cmocka_unit_test(test_fifo_in_cache_folder),
        cmocka_unit_test(test_alloc_failures),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
