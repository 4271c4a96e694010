/*
 * test_convert.c - our own GGUF writer's files give the same tokens as the HF
 * folders they were made from. Each conformance HF model is converted to an F32
 * GGUF (Llama's Q/K rows permuted, as llama.cpp does) and must give the same
 * greedy tokens and logits within float rounding; a Q8_0 conversion must give
 * bitwise the logits of the HF folder quantized at load (same weights, same
 * kernels) where no permutation is involved (Qwen2).
 */
// Float32 K and V: converted files are compared with their sources to 1e-4, and
// halves would round a K that differs in its last bits to different values.
#define HARNESS_KV_TYPE RP_DTYPE_F32
#include "model_harness.h"

#include <unistd.h>

static void tmp_path(char *buf, size_t cap, const char *tag)
{
    snprintf(buf, cap, "/tmp/rapid-test-convert-%d-%s.gguf", (int)getpid(), tag);
}

static void compare(const char *hf, const char *gguf, rp_dtype load_quant, bool bitwise)
{
    rp_model *a = harness_load(hf, 2, load_quant);
    rp_model *b = harness_load(gguf, 2, RP_DTYPE_F32);
    int V = rp_model_get_config(a)->n_vocab;
    assert_int_equal(V, rp_model_get_config(b)->n_vocab);
    int32_t prompt[12];
    for (int i = 0; i < 12; i++)
        prompt[i] = (i * 37 + 5) % V;
    int32_t ta[24], tb[24];
    float *la = malloc((size_t)V * sizeof(float)), *lb = malloc((size_t)V * sizeof(float));
    harness_greedy(a, prompt, 12, 24, ta, la);
    harness_greedy(b, prompt, 12, 24, tb, lb);
    if (bitwise) {
        assert_memory_equal(la, lb, (size_t)V * sizeof(float));
    } else {
        double num = 0, den = 0;
        for (int i = 0; i < V; i++) {
            num += (la[i] - lb[i]) * (double)(la[i] - lb[i]);
            den += (double)la[i] * la[i];
        }
        if (!(sqrt(num / den) < 1e-4)) // (CUDA: BF16 sources on the tensor cores, F32 files on CUDA cores: 1.05e-5)
            fail_msg("%s vs %s: normalized logit difference %.3g", hf, gguf, sqrt(num / den));
    }
    assert_memory_equal(ta, tb, sizeof(ta));
    free(la);
    free(lb);
    rp_model_destroy(a);
    rp_model_destroy(b);
}

static void test_convert_fixture_models(void **state)
{
    // F32 (llama2, permuted), F16 (mistral, permuted), sharded BF16 with q/k norm (qwen3), llama3 rope scaling.
    static const char *models[] = {"llama2", "mistral", "qwen3", "llama3", "qwen2", "qwen3-moe"};
    for (size_t i = 0; i < sizeof(models) / sizeof(models[0]); i++) {
        char hf[4096], out[256], rel[64];
        if (strstr(models[i], "moe") && !harness_device_has_moe()) {
            print_message("  %s: skipped, %s has no mixture-of-experts kernels yet\n", models[i], rp_test_device());
            continue;
        }
        snprintf(rel, sizeof(rel), "tests/data/models/%s", models[i]);
        snprintf(hf, sizeof(hf), "%s", rp_test_source(rel));
        tmp_path(out, sizeof(out), models[i]);
        if (rp_model_convert_gguf(hf, out, RP_DTYPE_F32))
            fail_msg("convert %s: %s", hf, rp_error_message());
        compare(hf, out, RP_DTYPE_F32, false);
        unlink(out);
    }
}

static void test_convert_conformance_models(void **state)
{
    RP_TEST_NEED_CONFORMANCE(conf);
    static const char *models[] = {"llama-spm", "llama3-bpe", "qwen2"};
    for (size_t i = 0; i < 3; i++) {
        char hf[4096], out[256];
        snprintf(hf, sizeof(hf), "%s/gguf/%s/hf", conf, models[i]);
        tmp_path(out, sizeof(out), models[i]);
        if (rp_model_convert_gguf(hf, out, RP_DTYPE_F32))
            fail_msg("convert %s: %s", hf, rp_error_message());
        compare(hf, out, RP_DTYPE_F32, false);
        unlink(out);
    }
}

static void test_convert_q8_matches_quant_on_load(void **state)
{
    RP_TEST_NEED_CONFORMANCE(conf);
    char hf[4096], out[256];
    snprintf(hf, sizeof(hf), "%s/gguf/qwen2/hf", conf);
    tmp_path(out, sizeof(out), "qwen2-q8");
    if (rp_model_convert_gguf(hf, out, RP_DTYPE_Q8_0))
        fail_msg("convert %s: %s", hf, rp_error_message());
    compare(hf, out, RP_DTYPE_Q8_0, true);
    unlink(out);
}

static void test_convert_errors(void **state)
{
    assert_int_equal(rp_model_convert_gguf("/nonexistent-model-dir", "/tmp/x.gguf", RP_DTYPE_F32), RP_ERR_INVALID);
    assert_non_null(strstr(rp_error_message(), "/nonexistent-model-dir"));
    assert_int_equal(rp_model_convert_gguf("/tmp", "/tmp/x.gguf", RP_DTYPE_Q6_K), RP_ERR_UNSUPPORTED);
    // A hybrid is refused by name, before anything is written.
    char out[256];
    tmp_path(out, sizeof(out), "hybrid");
    assert_int_equal(rp_model_convert_gguf(rp_test_source("tests/data/models/qwen3.5-mtp"), out, RP_DTYPE_F32),
                     RP_ERR_UNSUPPORTED);
    assert_non_null(strstr(rp_error_message(), "Gated DeltaNet"));
    assert_int_equal(access(out, F_OK), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_convert_fixture_models),
        cmocka_unit_test(test_convert_conformance_models),
        cmocka_unit_test(test_convert_q8_matches_quant_on_load),
        cmocka_unit_test(test_convert_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
