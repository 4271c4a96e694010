/*
 * test_determinism.c - a sequence's logits are bitwise identical whatever else is
 * in the batch, wherever it sits in the batch, however its prompt is chunked,
 * and for 1 or 2 threads (DESIGN.md, Determinism). Checked on float models (BF16
 * weights with float32 and with bf16 activations), models quantized at load (q8, q4),
 * and K-quant GGUF files.
 */
#include "model_harness.h"

#define N_PROMPT 40
#define N_SEQS 8

// Logits of every position of seqs[target] when all N_SEQS prompts run in one
// flattened batch, tokens interleaved round-robin across sequences (a model with
// recurrent state: each sequence's tokens together, as its forward requires).
static void batched_logits(rp_model *m, int32_t prompts[N_SEQS][N_PROMPT], int target, float *out)
{
    int V = rp_model_get_config(m)->n_vocab;
    int n = N_SEQS * N_PROMPT;
    rp_kv_pool *kv;
    assert_int_equal(rp_model_kv_create_ex(m, 16, N_SEQS * (N_PROMPT / 16 + 1), RP_DTYPE_F16, N_SEQS, -1, &kv), RP_OK);
    bool grouped = rp_model_has_state(m);
    rp_kv_seq seqs[N_SEQS];
    rp_kv_seq *sp[N_SEQS];
    for (int s = 0; s < N_SEQS; s++) {
        rp_kv_seq_init(&seqs[s]);
        assert_int_equal(rp_kv_seq_reserve(kv, &seqs[s], N_PROMPT), RP_OK);
        sp[s] = &seqs[s];
    }
    int32_t tok[N_SEQS * N_PROMPT], pos[N_SEQS * N_PROMPT], sq[N_SEQS * N_PROMPT];
    bool want[N_SEQS * N_PROMPT];
    for (int p = 0; p < N_PROMPT; p++)
        for (int s = 0; s < N_SEQS; s++) {
            int k = grouped ? s * N_PROMPT + p : p * N_SEQS + s;
            tok[k] = prompts[s][p];
            pos[k] = p;
            sq[k] = s;
            want[k] = true;
        }
    float *all = malloc((size_t)n * V * sizeof(float));
    rp_batch b = {n, tok, pos, sq, want, sp, N_SEQS, NULL};
    if (rp_model_forward(m, kv, &b, all))
        fail_msg("forward: %s", rp_error_message());
    for (int p = 0; p < N_PROMPT; p++)
        memcpy(out + (size_t)p * V, all + (grouped ? (size_t)target * N_PROMPT + p : (size_t)p * N_SEQS + target) * V,
               (size_t)V * sizeof(float));
    free(all);
    for (int s = 0; s < N_SEQS; s++)
        rp_kv_seq_deinit(kv, &seqs[s]);
    rp_kv_pool_destroy(kv);
}

static void check_model(const char *path, rp_dtype quant, bool f32_act)
{
    rp_model *m1 = harness_load_act(path, 1, quant, f32_act);
    rp_model *m2 = harness_load_act(path, 2, quant, f32_act);
    int V = rp_model_get_config(m1)->n_vocab;
    size_t bytes = (size_t)N_PROMPT * V * sizeof(float);
    int32_t prompts[N_SEQS][N_PROMPT];
    uint32_t r = 12345;
    for (int s = 0; s < N_SEQS; s++)
        for (int p = 0; p < N_PROMPT; p++) {
            r = r * 1664525u + 1013904223u;
            prompts[s][p] = (int32_t)((r >> 8) % (uint32_t)V);
        }
    float *ref = malloc(bytes), *got = malloc(bytes);
    harness_prefill_all(m1, prompts[0], N_PROMPT, N_PROMPT, ref);
    static const int chunks[] = {1, 7, 64};
    for (int t = 0; t < 2; t++) {
        rp_model *m = t ? m2 : m1;
        for (int c = 0; c < 3; c++) {
            harness_prefill_all(m, prompts[0], N_PROMPT, chunks[c], got);
            if (memcmp(ref, got, bytes) != 0)
                fail_msg("%s (%s): logits differ with chunks of %d and %d threads", path, rp_dtype_name(quant),
                         chunks[c], t + 1);
        }
        static const int places[] = {0, 3, 7};
        for (int pl = 0; pl < 3; pl++) {
            int32_t perm[N_SEQS][N_PROMPT];
            memcpy(perm, prompts, sizeof(perm));
            memcpy(perm[places[pl]], prompts[0], sizeof(perm[0]));
            memcpy(perm[0], prompts[places[pl]], sizeof(perm[0]));
            batched_logits(m, perm, places[pl], got);
            if (memcmp(ref, got, bytes) != 0)
                fail_msg("%s (%s): logits differ in a batch of %d at index %d with %d threads", path,
                         rp_dtype_name(quant), N_SEQS, places[pl], t + 1);
        }
    }
    print_message("  %s (%s): identical logits across chunking, batch placement and threads\n", path,
                  rp_model_describe(m1));
    free(ref);
    free(got);
    rp_model_destroy(m1);
    rp_model_destroy(m2);
}

// The project's own fixtures: no ../shared needed.
static void test_fixture_models(void **state)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s", rp_test_source("tests/data/models/qwen3"));
    check_model(path, RP_DTYPE_F32, true);
    snprintf(path, sizeof(path), "%s", rp_test_source("tests/data/models/llama3"));
    check_model(path, RP_DTYPE_F32, true);
    check_model(path, RP_DTYPE_F32, false); // BF16 weights: bf16 activations where the CPU has them
    check_model(path, RP_DTYPE_Q8_0, true);
    check_model(path, RP_DTYPE_Q4_0, true);
    // A mixture of experts: a token's experts see only the tokens routed to them.
    if (!harness_device_has_moe()) {
        print_message("  qwen3-moe: skipped, %s has no mixture-of-experts kernels yet\n", rp_test_device());
        return;
    }
    snprintf(path, sizeof(path), "%s", rp_test_source("tests/data/models/qwen3-moe"));
    check_model(path, RP_DTYPE_F32, true);
    check_model(path, RP_DTYPE_Q8_0, true);
    // Hybrids: a token's recurrent state sees only its own sequence's earlier tokens.
    if (!harness_device_has_gdn()) {
        print_message("  qwen3.5: skipped, %s has no Gated DeltaNet kernels yet\n", rp_test_device());
        return;
    }
    snprintf(path, sizeof(path), "%s", rp_test_source("tests/data/models/qwen3.5"));
    check_model(path, RP_DTYPE_F32, true);
    snprintf(path, sizeof(path), "%s", rp_test_source("tests/data/models/qwen3.5-moe"));
    check_model(path, RP_DTYPE_F32, true);
    check_model(path, RP_DTYPE_Q8_0, true);
}

static void test_float_model(void **state)
{
    RP_TEST_NEED_CONFORMANCE(conf);
    char path[4096];
    snprintf(path, sizeof(path), "%s/gguf/qwen2/hf", conf);
    check_model(path, RP_DTYPE_F32, true);
    check_model(path, RP_DTYPE_F32, false);
}

static void test_quantized_on_load(void **state)
{
    RP_TEST_NEED_CONFORMANCE(conf);
    char path[4096];
    snprintf(path, sizeof(path), "%s/gguf/llama3-bpe/hf", conf);
    check_model(path, RP_DTYPE_Q8_0, true);
    check_model(path, RP_DTYPE_Q4_0, true);
}

static void test_kquant_gguf(void **state)
{
    RP_TEST_NEED_CONFORMANCE(conf);
    char path[4096];
    snprintf(path, sizeof(path), "%s/gguf/qwen2/qwen2-Q4_K_M.gguf", conf);
    check_model(path, RP_DTYPE_F32, true);
    snprintf(path, sizeof(path), "%s/gguf/llama-spm/llama-spm-Q5_K_M.gguf", conf);
    check_model(path, RP_DTYPE_F32, true);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixture_models),
        cmocka_unit_test(test_float_model),
        cmocka_unit_test(test_quantized_on_load),
        cmocka_unit_test(test_kquant_gguf),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
