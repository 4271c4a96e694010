/*
 * test_hybrid_engine.c - the engine on a model with recurrent state (the qwen3.5 and
 * qwen3.5-moe fixtures: Gated DeltaNet layers, random weights, the demo tokenizer).
 * Speculation stays lossless when rejected drafts have been through the state (the
 * engine rolls it back by replaying the accepted ones), requests batched together give
 * the tokens they give alone, and preemption (the state slot given back, the prompt
 * recomputed at readmission, or resumed from the prefix cache's copy of its state)
 * changes nothing. The prefix cache on these models: a prompt's state at its last whole
 * block is kept, a longer prompt resumes there (and after a restart, from the disk),
 * and the tokens are those of a run without the cache. All of it with prompt lookup and
 * with the MTP layer (the -mtp fixtures) drafting.
 */
#include "spec_harness.h"
#include "test_tmp.h"

#define N_REQ 4
#define N_GEN 256

static const char *const PROMPTS[N_REQ] = {
    "the cat sat on the mat. the cat sat on the mat. the cat sat on",
    "one two three four one two three four one two three four one two",
    "def add(a, b):\n    return a + b\n\ndef add(a, b):\n    return a +",
    "hello world hello world hello world hello",
};

static int setup_model(const char *dir)
{
    rp_model_params mp;
    rp_model_params_default(&mp);
    mp.quiet = true;
    if (rp_test_load(rp_test_source(dir), 2, true, &mp, &SH_M) || rp_tok_load_file(rp_test_source(dir), &SH_TOK)) {
        print_error("loading %s: %s\n", dir, rp_error_message());
        return -1;
    }
    return 0;
}

static void teardown_model(void)
{
    rp_tok_destroy(SH_TOK);
    rp_model_destroy(SH_M);
    SH_TOK = NULL;
    SH_M = NULL;
}

static void run_all(const sh_config *c, int max_running, int kv_tokens, bool at_once, sh_result *rs,
                    rp_engine_stats *stats)
{
    rp_engine *e = sh_engine(c, 8, max_running, kv_tokens, 16);
    for (int i = 0; i < N_REQ; i++) {
        sh_prompt p = sh_chat(PROMPTS[i]);
        rs[i].gp = sh_greedy(&p, N_GEN);
        rs[i].gp.ignore_eos = true;
    }
    sh_run(e, rs, N_REQ, at_once);
    rp_engine_get_stats(e, stats);
    rp_engine_destroy(e);
    for (int i = 0; i < N_REQ; i++)
        free((void *)rs[i].gp.prompt);
}

// Speculation by `spec` (SH_NGRAM or SH_MTP) against none, alone, batched and preempted.
static void check_model(const char *dir, int spec)
{
    if (setup_model(dir))
        fail_msg("cannot load %s", dir);
    static sh_result ref[N_REQ], got[N_REQ];
    rp_engine_stats st;
    run_all(&SH_CONFIGS[SH_OFF], 1, 0, false, ref, &st);
    const sh_config *c = &SH_CONFIGS[spec];
    char what[64];
    // Pinned, every step drafting its cap: rejections roll the state back.
    run_all(c, 1, 0, false, got, &st);
    snprintf(what, sizeof(what), "%s alone", c->name);
    for (int i = 0; i < N_REQ; i++)
        sh_same(&got[i], &ref[i], what, i);
    // Random weights rarely continue the prompt's n-grams, and a random MTP layer rarely guesses
    // the next token: drafts are made and mostly rejected, each rejection a rollback of the
    // state (partial acceptance, a longer replay, is test_hybrid's, at the model). What matters
    // is that some were drafted and rejected.
    long d, a;
    sh_counts(got, N_REQ, spec == SH_MTP ? RP_SPEC_MTP : RP_SPEC_NGRAM, &d, &a);
    print_message("  %s: %s drafted %ld, %ld accepted\n", dir, c->name, d, a);
    if (!(d > 0 && a < d))
        fail_msg("%s: %ld drafted, %ld accepted: no rollback was exercised", dir, d, a);
    // All at once, batched, speculating.
    run_all(c, N_REQ, 0, true, got, &st);
    snprintf(what, sizeof(what), "%s batched", c->name);
    for (int i = 0; i < N_REQ; i++)
        sh_same(&got[i], &ref[i], what, i);
    // A pool too small for all four at once: requests are preempted and readmitted.
    run_all(c, N_REQ, 512, true, got, &st);
    snprintf(what, sizeof(what), "%s batched, preempted", c->name);
    for (int i = 0; i < N_REQ; i++)
        sh_same(&got[i], &ref[i], what, i);
    print_message("  %s: %llu preemptions in the small pool\n", dir, (unsigned long long)st.preemptions);
    assert_true(st.preemptions > 0);
    // Readmitted requests resume from their prompt's state in the prefix cache.
    print_message("  %s: %llu tokens resumed from the cache at readmissions\n", dir,
                  (unsigned long long)st.cache_hit_tokens);
    assert_true(st.cache_hit_tokens > 0 && st.cache.state_hits > 0);
    teardown_model();
}

/* ---- the prefix cache ----------------------------------------------------------------- */

#define P_GEN 48

static rp_engine *prefix_engine(bool cache, const char *dir, rp_engine_spec_method method)
{
    rp_engine_params ep;
    rp_engine_params_default(&ep);
    ep.n_ctx = 1024;
    ep.max_running = 2;
    ep.kv_block = 16;
    ep.spec.method = method; // drafts pinned on: rollbacks right after a restored state
    ep.spec.adaptive = false;
    ep.spec.k_max = 4;
    ep.no_prefix_cache = !cache;
    ep.cache_dir = dir;
    ep.cache_flush_s = 30;
    rp_engine *e = NULL;
    if (rp_engine_create(SH_M, SH_TOK, &ep, &e))
        fail_msg("rp_engine_create: %s", rp_error_message());
    return e;
}

// Runs the first n tokens of base on e.
static void run_prefix(rp_engine *e, const sh_prompt *base, int n, sh_result *r)
{
    assert_true(n <= base->n);
    int32_t *ids = malloc((size_t)n * sizeof(int32_t));
    assert_non_null(ids);
    memcpy(ids, base->ids, (size_t)n * sizeof(int32_t));
    sh_prompt p = {ids, n};
    r->gp = sh_greedy(&p, P_GEN);
    r->gp.ignore_eos = true;
    sh_run(e, r, 1, false);
    free(ids);
}

static void check_prefix(const char *model, rp_engine_spec_method method)
{
    if (setup_model(model))
        fail_msg("cannot load %s", model);
    sh_prompt base = sh_chat("the cat sat on the mat and then the dog sat on the log, and the bird sat in the tree "
                             "while the fish swam in the pond; the cat sat on the mat and the dog sat on the log");
    // Three prompts, each the start of the next; none ends on a block boundary.
    enum { NA = 37, NB = 53, NC = 70 };
    if (base.n < NC)
        fail_msg("the base prompt has %d tokens, fewer than %d", base.n, NC);
    const int lens[3] = {NA, NB, NC};
    static sh_result ref[3], got[3];
    rp_engine *e = prefix_engine(false, NULL, method);
    for (int i = 0; i < 3; i++)
        run_prefix(e, &base, lens[i], &ref[i]);
    rp_engine_destroy(e);

    char dir[512];
    snprintf(dir, sizeof(dir), "%s", rp_test_tmp_path("kv"));
    // A (37 tokens) keeps its state at 32; B (53) resumes there and keeps its own at 48.
    e = prefix_engine(true, dir, method);
    run_prefix(e, &base, NA, &got[0]);
    run_prefix(e, &base, NB, &got[1]);
    rp_engine_stats st;
    rp_engine_get_stats(e, &st);
    rp_engine_destroy(e); // the blocks go to disk (the states went when they were made)
    sh_same(&got[0], &ref[0], "A, first run", 0);
    sh_same(&got[1], &ref[1], "B after A", 1);
    assert_int_equal(got[0].stats.n_cached, 0);
    assert_int_equal(got[1].stats.n_cached, 32);
    assert_int_equal(st.cache.state_saves, 2);
    assert_int_equal(st.cache.state_hits, 1);
    assert_int_equal(st.cache.state_disk_hits, 0);

    // A restart: C (70) resumes from B's state at 48, A from its own at 32, both from the disk.
    e = prefix_engine(true, dir, method);
    run_prefix(e, &base, NC, &got[2]);
    run_prefix(e, &base, NA, &got[0]);
    rp_engine_get_stats(e, &st);
    rp_engine_destroy(e);
    sh_same(&got[2], &ref[2], "C after a restart", 2);
    sh_same(&got[0], &ref[0], "A after a restart", 0);
    print_message("  %s: resumed at %d and %d after a restart; %llu state files, %llu block files\n", model,
                  got[2].stats.n_cached, got[0].stats.n_cached, (unsigned long long)st.cache.disk_states,
                  (unsigned long long)st.cache.disk_blocks);
    assert_int_equal(got[2].stats.n_cached, 48);
    assert_int_equal(got[0].stats.n_cached, 32);
    assert_int_equal(st.cache.state_disk_hits, 2);
    assert_true(st.cache.disk_states >= 2);
    free(base.ids);
    teardown_model();
}

static void test_dense_hybrid(void **state)
{
    (void)state;
    check_model("tests/data/models/qwen3.5", SH_NGRAM);
}

static void test_moe_hybrid(void **state)
{
    (void)state;
    check_model("tests/data/models/qwen3.5-moe", SH_NGRAM);
}

// The hybrids' MTP layer drafting (its KV beside the attention layers', the state rolled back
// after its rejected drafts).
static void test_dense_hybrid_mtp(void **state)
{
    (void)state;
    check_model("tests/data/models/qwen3.5-mtp", SH_MTP);
}

static void test_moe_hybrid_mtp(void **state)
{
    (void)state;
    check_model("tests/data/models/qwen3.5-moe-mtp", SH_MTP);
}

static void test_prefix_dense(void **state)
{
    (void)state;
    check_prefix("tests/data/models/qwen3.5", RP_ENGINE_SPEC_NGRAM);
}

static void test_prefix_moe(void **state)
{
    (void)state;
    check_prefix("tests/data/models/qwen3.5-moe", RP_ENGINE_SPEC_NGRAM);
}

// With an MTP layer: a resumed request's MTP catch-up starts after the cached prefix (nothing
// runs again, the shared blocks are not written).
static void test_prefix_mtp(void **state)
{
    (void)state;
    check_prefix("tests/data/models/qwen3.5-moe-mtp", RP_ENGINE_SPEC_MTP);
}

int main(void)
{
    rp_backend_params bp;
    rp_backend_params_default(&bp);
    rp_backend *be;
    if (rp_backend_open(rp_test_device(), &bp, &be) == RP_OK) {
        bool has = rp_backend_has_gdn(be);
        rp_backend_destroy(be);
        if (!has) {
            printf("skipped: %s has no Gated DeltaNet kernels yet\n", rp_test_device());
            return 0;
        }
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dense_hybrid),
        cmocka_unit_test(test_moe_hybrid),
        cmocka_unit_test(test_dense_hybrid_mtp),
        cmocka_unit_test(test_moe_hybrid_mtp),
        cmocka_unit_test_setup_teardown(test_prefix_dense, rp_test_tmp_setup, rp_test_tmp_teardown),
        cmocka_unit_test_setup_teardown(test_prefix_moe, rp_test_tmp_setup, rp_test_tmp_teardown),
        cmocka_unit_test_setup_teardown(test_prefix_mtp, rp_test_tmp_setup, rp_test_tmp_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
