/*
 * test_hybrid_engine.c - the engine on a model with recurrent state (the qwen3.5 and
 * qwen3.5-moe fixtures: Gated DeltaNet layers, random weights, the demo tokenizer).
 * Speculation stays lossless when rejected drafts have been through the state (the
 * engine rolls it back by replaying the accepted ones), requests batched together give
 * the tokens they give alone, and preemption (the state slot given back, the prompt
 * recomputed at readmission) changes nothing.
 */
#include "spec_harness.h"

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

static void check_model(const char *dir)
{
    if (setup_model(dir))
        fail_msg("cannot load %s", dir);
    static sh_result ref[N_REQ], got[N_REQ];
    rp_engine_stats st;
    run_all(&SH_CONFIGS[SH_OFF], 1, 0, false, ref, &st);
    // Prompt lookup pinned, every step drafting its cap: rejections roll the state back.
    run_all(&SH_CONFIGS[SH_NGRAM], 1, 0, false, got, &st);
    for (int i = 0; i < N_REQ; i++)
        sh_same(&got[i], &ref[i], "ngram alone", i);
    // Random weights rarely continue the prompt's n-grams: drafts are made and mostly rejected,
    // each rejection a rollback of the state (partial acceptance, a longer replay, is
    // test_hybrid's, at the model). What matters is that some were drafted and rejected.
    long d, a;
    sh_counts(got, N_REQ, RP_SPEC_NGRAM, &d, &a);
    print_message("  %s: prompt lookup drafted %ld, %ld accepted\n", dir, d, a);
    if (!(d > 0 && a < d))
        fail_msg("%s: %ld drafted, %ld accepted: no rollback was exercised", dir, d, a);
    // All at once, batched, speculating.
    run_all(&SH_CONFIGS[SH_NGRAM], N_REQ, 0, true, got, &st);
    for (int i = 0; i < N_REQ; i++)
        sh_same(&got[i], &ref[i], "ngram batched", i);
    // A pool too small for all four at once: requests are preempted and readmitted.
    run_all(&SH_CONFIGS[SH_NGRAM], N_REQ, 512, true, got, &st);
    for (int i = 0; i < N_REQ; i++)
        sh_same(&got[i], &ref[i], "ngram batched, preempted", i);
    print_message("  %s: %llu preemptions in the small pool\n", dir, (unsigned long long)st.preemptions);
    assert_true(st.preemptions > 0);
    assert_int_equal(st.cache_hit_tokens, 0); // the prefix cache is off for a model with state
    teardown_model();
}

static void test_dense_hybrid(void **state)
{
    (void)state;
    check_model("tests/data/models/qwen3.5");
}

static void test_moe_hybrid(void **state)
{
    (void)state;
    check_model("tests/data/models/qwen3.5-moe");
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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
