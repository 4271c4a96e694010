/*
 * test_fidelity.c - every architecture against transformers' own numbers.
 *
 * tests/data/models/<name>/ holds tiny random models made by
 * tools/fixtures/make_models.py (llama2, llama3 with rope scaling, mistral,
 * qwen2, qwen3 sharded, qwen3 with extra mtp.* tensors, qwen3-moe, the Qwen3.5
 * hybrids qwen3.5 and qwen3.5-moe, and the latter two in their published
 * vision-language wrapper, -vl, and with an MTP layer, -mtp) and reference.json with
 * transformers' float32 logits and greedy tokens. For each prompt: the logits
 * after the prompt by normalized error < 1e-3, the first 8 logits at every
 * prompt position, and the greedy tokens up to the first step whose top-2
 * margin is not clear.
 */
// Float32 K and V: the model path against transformers' float32 numbers, with
// nothing rounded on our side (test_rapid_tiny checks the default f16 cache).
#define HARNESS_KV_TYPE RP_DTYPE_F32
#include "model_harness.h"

#include <dirent.h>

#define CLEAR_MARGIN 1e-3f // our float32 arithmetic agrees with these to ~1e-6
#define MAX_NORM_ERR 1e-3

static int n_models_checked, n_models_skipped;

static void check_model_dir(const char *dir)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/reference.json", dir);
    json_error_t e;
    json_t *ref = json_load_file(path, 0, &e);
    if (!ref)
        fail_msg("%s: %s", path, e.text);
    rp_model_params mp;
    rp_model_params_default(&mp);
    mp.quiet = true;
    rp_model *m = NULL;
    rp_status st = rp_test_load(dir, 2, true, &mp, &m);
    if (st == RP_ERR_UNSUPPORTED &&
        (strstr(rp_error_message(), "mixture-of-experts") || strstr(rp_error_message(), "Gated DeltaNet")) &&
        strcmp(rp_test_device(), "cpu") != 0) { // a device without the MoE or GDN kernels yet: said, not hidden
        print_message("  %s: skipped on %s (%s)\n", dir, rp_test_device(), rp_error_message());
        n_models_skipped++;
        json_decref(ref);
        return;
    }
    if (st)
        fail_msg("loading %s: %s", dir, rp_error_message());
    int V = rp_model_get_config(m)->n_vocab;
    json_t *cases = json_object_get(ref, "prompts");
    assert_true(json_array_size(cases) > 0);
    size_t ci;
    json_t *c;
    json_array_foreach(cases, ci, c) {
        int n_prompt, n_exp;
        int32_t *prompt = harness_ids(json_object_get(c, "prompt_ids"), &n_prompt);
        int32_t *exp = harness_ids(json_object_get(c, "greedy"), &n_exp);
        json_t *margins = json_object_get(c, "top2_margin");
        json_t *last = json_object_get(c, "logits_last");
        assert_int_equal((int)json_array_size(last), V);
        // Logits at every prompt position (first 8 of each) and after the prompt (all).
        float *all = malloc((size_t)n_prompt * V * sizeof(float));
        harness_prefill_all(m, prompt, n_prompt, n_prompt, all);
        json_t *first8 = json_object_get(c, "logits_all_first8");
        assert_int_equal((int)json_array_size(first8), n_prompt);
        for (int p = 0; p < n_prompt; p++) {
            json_t *row = json_array_get(first8, (size_t)p);
            for (size_t i = 0; i < json_array_size(row); i++) {
                double want = json_number_value(json_array_get(row, i));
                double got = all[(size_t)p * V + i];
                if (fabs(got - want) > 1e-3 * (1 + fabs(want)))
                    fail_msg("%s prompt %zu position %d logit %zu: %.6f, transformers %.6f", dir, ci, p, i, got,
                             want);
            }
        }
        double num = 0, den = 0;
        const float *lg = all + (size_t)(n_prompt - 1) * V;
        for (int i = 0; i < V; i++) {
            double want = json_number_value(json_array_get(last, (size_t)i));
            num += (lg[i] - want) * (lg[i] - want);
            den += want * want;
        }
        double err = sqrt(num / (den > 0 ? den : 1));
        if (!(err < MAX_NORM_ERR))
            fail_msg("%s prompt %zu: normalized logit error %.3g", dir, ci, err);
        free(all);
        int32_t got[64];
        assert_true(n_exp <= 64);
        harness_greedy(m, prompt, n_prompt, n_exp, got, NULL);
        int checked = 0;
        for (int i = 0; i < n_exp; i++) {
            // A near-tie makes this token and everything after it unreliable.
            if (json_number_value(json_array_get(margins, (size_t)i)) < CLEAR_MARGIN)
                break;
            if (got[i] != exp[i])
                fail_msg("%s prompt %zu: greedy token %d is %d, transformers gives %d", dir, ci, i, got[i], exp[i]);
            checked++;
        }
        print_message("  %s prompt %zu: logit error %.2g, %d/%d greedy tokens checked\n", dir, ci, err, checked,
                      n_exp);
        free(prompt);
        free(exp);
    }
    json_decref(ref);
    rp_model_destroy(m);
    n_models_checked++;
}

static void test_all_fixture_models(void **state)
{
    const char *root = rp_test_source("tests/data/models");
    char rootbuf[4096];
    snprintf(rootbuf, sizeof(rootbuf), "%s", root);
    DIR *d = opendir(rootbuf);
    assert_non_null(d);
    struct dirent *ent;
    char dirs[32][512];
    int n = 0;
    while ((ent = readdir(d)) && n < 32) {
        if (ent->d_name[0] == '.')
            continue;
        snprintf(dirs[n++], sizeof(dirs[0]), "%s/%s", rootbuf, ent->d_name);
    }
    closedir(d);
    for (int i = 0; i < n; i++)
        check_model_dir(dirs[i]);
    // Every architecture must be there: a missing fixture must not pass silently; only a
    // device without a model kind's kernels may skip one, never the CPU.
    assert_true(n_models_checked + n_models_skipped >= 9);
    assert_true(n_models_checked >= 6);
    if (strcmp(rp_test_device(), "cpu") == 0)
        assert_int_equal(n_models_skipped, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_all_fixture_models),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
