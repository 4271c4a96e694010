/*
 * test_moe_config.c - loading a mixture-of-experts model (Qwen3-MoE): malformed
 * config.json values become clear errors naming the key, a layer whose experts are
 * missing names the tensor, and the bytes a token reads count only its experts' share.
 * (The numbers against transformers are test_fidelity's; determinism, test_determinism's.)
 */
#include "model_harness.h"
#include "test_tmp.h"

#include "model/model_int.h"

#include <jansson.h>
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

// A copy of the qwen3-moe fixture in a temporary folder: its files linked, config.json
// rewritten with `key` set to `value` (NULL: removed).
static const char *variant(const char *tag, const char *key, json_t *value)
{
    char src[4096], from[4096], to[4096];
    assert_non_null(realpath(rp_test_source("tests/data/models/qwen3-moe"), src)); // links from another folder
    const char *dir = rp_test_tmp_path(tag);
    assert_int_equal(mkdir(dir, 0755), 0);
    const char *files[] = {"model.safetensors", "generation_config.json"};
    for (size_t i = 0; i < 2; i++) {
        snprintf(from, sizeof(from), "%s/%s", src, files[i]);
        snprintf(to, sizeof(to), "%s/%s", dir, files[i]);
        assert_int_equal(symlink(from, to), 0);
    }
    snprintf(from, sizeof(from), "%s/config.json", src);
    json_t *cfg = json_load_file(from, 0, NULL);
    assert_non_null(cfg);
    if (value)
        json_object_set_new(cfg, key, value);
    else
        json_object_del(cfg, key);
    snprintf(to, sizeof(to), "%s/config.json", dir);
    assert_int_equal(json_dump_file(cfg, to, 0), 0);
    json_decref(cfg);
    return dir;
}

static void expect_error(const char *dir, rp_status want, const char *text)
{
    rp_model_params p;
    rp_model_params_default(&p);
    p.quiet = true;
    rp_model *m = NULL;
    rp_status st = rp_test_load(dir, 2, true, &p, &m);
    const char *msg = rp_error_message();
    print_message("  %s\n", msg);
    if (st != want || !strstr(msg, text))
        fail_msg("%s: got %d (%s), wanted %d with \"%s\"", dir, st, msg, want, text);
    assert_null(m);
}

static void test_bad_configs(void **state)
{
    (void)state;
    if (!harness_device_has_moe()) {
        print_message("  skipped: %s has no mixture-of-experts kernels yet\n", rp_test_device());
        return;
    }
    expect_error(variant("moe-k", "num_experts_per_tok", json_integer(9)), RP_ERR_INVALID, "8 experts, 9 a token");
    expect_error(variant("moe-zero", "num_experts_per_tok", json_integer(0)), RP_ERR_INVALID, "0 a token");
    expect_error(variant("moe-width", "moe_intermediate_size", NULL), RP_ERR_INVALID, "\"moe_intermediate_size\"");
    expect_error(variant("moe-n", "num_local_experts", json_string("eight")), RP_ERR_INVALID,
                 "\"num_local_experts\" is not an integer");
    expect_error(variant("moe-dense-list", "mlp_only_layers", json_pack("[s]", "1")), RP_ERR_INVALID,
                 "\"mlp_only_layers\" holds a non-integer");
    expect_error(variant("moe-dense-range", "mlp_only_layers", json_pack("[i]", 5000)), RP_ERR_INVALID,
                 "an index out of range");
    expect_error(variant("moe-step", "decoder_sparse_step", json_integer(0)), RP_ERR_INVALID, "every 0 layers");
    // Layer 1 made a MoE layer: the file has a dense MLP there, no router.
    expect_error(variant("moe-no-router", "mlp_only_layers", json_array()), RP_ERR_INVALID,
                 "missing tensor 'model.layers.1.mlp.gate.weight'");
}

static void test_bytes_a_token_reads(void **state)
{
    (void)state;
    if (!harness_device_has_moe()) {
        print_message("  skipped: %s has no mixture-of-experts kernels yet\n", rp_test_device());
        return;
    }
    rp_model *m = harness_load(rp_test_source("tests/data/models/qwen3-moe"), 2, RP_DTYPE_F32);
    const rp_model_config *c = rp_model_get_config(m);
    assert_int_equal(c->n_expert, 8);
    assert_int_equal(c->n_expert_used, 3);
    assert_true(c->moe_norm_topk);
    assert_true(rp_config_layer_moe(c, 0) && !rp_config_layer_moe(c, 1) && rp_config_layer_moe(c, 2));
    size_t experts = 0;
    for (int l = 0; l < c->n_layer; l++)
        for (int e = 0; l != 1 && e < c->n_expert; e++)
            experts += m->layers[l].ex_gate[e].nbytes + m->layers[l].ex_up[e].nbytes + m->layers[l].ex_down[e].nbytes;
    assert_int_equal(m->expert_bytes, experts);
    size_t all = m->weight_bytes - (c->tied_embeddings ? 0 : m->tok_embd.nbytes);
    assert_int_equal(rp_model_weight_bytes(m), all - experts + experts * 3 / 8);
    assert_non_null(strstr(rp_model_describe(m), "8 experts (3 a token)"));
    rp_model_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_configs),
        cmocka_unit_test(test_bytes_a_token_reads),
    };
    return cmocka_run_group_tests(tests, rp_test_tmp_setup, rp_test_tmp_teardown);
}
