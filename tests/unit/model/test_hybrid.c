/*
 * test_hybrid.c - the Qwen3.5 hybrids (Gated DeltaNet + gated attention) beyond what
 * test_fidelity (transformers' numbers) and test_determinism (batch, chunk and thread
 * invariance) check: rolling a sequence's recurrent state back after a verification
 * forward gives bitwise the numbers of never having run the rejected tokens, the state
 * slots are a bounded resource with a clear error, and malformed config.json values
 * are errors that name the key.
 */
#include "model_harness.h"
#include "test_tmp.h"

#include "model/model_int.h"

#include <jansson.h>
#include <limits.h>
#include <unistd.h>

#define N_PROMPT 20
#define N_DRAFT 6
#define N_AFTER 5

// One sequence on its own pool; forwards of explicit tokens at its next positions.
typedef struct run {
    rp_model *m;
    rp_kv_pool *kv;
    rp_kv_seq seq;
    int V;
} run;

static void run_init(run *r, rp_model *m, int n_states, int log_cap)
{
    r->m = m;
    r->V = rp_model_get_config(m)->n_vocab;
    assert_int_equal(rp_model_kv_create_ex(m, 16, 8, RP_DTYPE_F32, n_states, log_cap, &r->kv), RP_OK);
    rp_kv_seq_init(&r->seq);
}

static void run_deinit(run *r)
{
    rp_kv_seq_deinit(r->kv, &r->seq);
    rp_kv_pool_destroy(r->kv);
}

// Runs tok[0..n) at positions from `at`, all wanting logits (into logits, n x V, or NULL).
static void run_tokens(run *r, const int32_t *tok, int n, int at, float *logits)
{
    int32_t pos[64], sq[64] = {0};
    bool want[64];
    assert_true(n <= 64);
    for (int i = 0; i < n; i++)
        pos[i] = at + i, want[i] = true;
    assert_int_equal(rp_kv_seq_reserve(r->kv, &r->seq, at + n), RP_OK);
    rp_kv_seq *seqs[1] = {&r->seq};
    rp_batch b = {n, tok, pos, sq, want, seqs, 1, NULL};
    float *scratch = logits ? NULL : malloc((size_t)n * r->V * sizeof(float));
    if (rp_model_forward(r->m, r->kv, &b, logits ? logits : scratch))
        fail_msg("forward: %s", rp_error_message());
    free(scratch);
}

// After the prompt, a verification forward of N_DRAFT tokens, then a rollback to `accept`
// of them: the next N_AFTER one-token steps give bitwise the logits of a run that only ever
// saw the prompt and the accepted drafts.
static void check_rollback(rp_model *m, int accept)
{
    int V = rp_model_get_config(m)->n_vocab;
    int32_t toks[N_PROMPT + N_DRAFT + N_AFTER];
    uint32_t x = 777u + (uint32_t)accept;
    for (int i = 0; i < N_PROMPT + N_DRAFT + N_AFTER; i++) {
        x = x * 1664525u + 1013904223u;
        toks[i] = (int32_t)((x >> 8) % (uint32_t)V);
    }
    int32_t after[N_AFTER];
    for (int i = 0; i < N_AFTER; i++)
        after[i] = toks[N_PROMPT + N_DRAFT + i];
    float *want = malloc((size_t)N_AFTER * V * sizeof(float)), *got = malloc((size_t)N_AFTER * V * sizeof(float));
    run a, b;
    run_init(&a, m, 1, N_DRAFT);
    run_tokens(&a, toks, N_PROMPT + accept, 0, NULL); // prompt + accepted drafts, never the rest
    for (int i = 0; i < N_AFTER; i++)
        run_tokens(&a, &after[i], 1, N_PROMPT + accept + i, want + (size_t)i * V);
    run_init(&b, m, 1, N_DRAFT);
    run_tokens(&b, toks, N_PROMPT, 0, NULL);
    run_tokens(&b, toks + N_PROMPT, N_DRAFT, N_PROMPT, NULL); // the verification step
    assert_int_equal(b.seq.state_pos, N_PROMPT + N_DRAFT);
    if (rp_model_seq_truncate(m, b.kv, &b.seq, N_PROMPT + accept))
        fail_msg("rollback to %d: %s", N_PROMPT + accept, rp_error_message());
    assert_int_equal(b.seq.state_pos, N_PROMPT + accept);
    assert_int_equal(b.seq.n_tokens, N_PROMPT + accept);
    for (int i = 0; i < N_AFTER; i++)
        run_tokens(&b, &after[i], 1, N_PROMPT + accept + i, got + (size_t)i * V);
    if (memcmp(want, got, (size_t)N_AFTER * V * sizeof(float)) != 0)
        fail_msg("%s: after a rollback to %d of %d drafts the logits differ from a run without them",
                 rp_model_describe(m), accept, N_DRAFT);
    run_deinit(&a);
    run_deinit(&b);
    free(want);
    free(got);
}

static void test_rollback(void **state)
{
    (void)state;
    if (!harness_device_has_gdn()) {
        print_message("  skipped: %s has no Gated DeltaNet kernels yet\n", rp_test_device());
        return;
    }
    const char *names[] = {"tests/data/models/qwen3.5", "tests/data/models/qwen3.5-moe"};
    for (int i = 0; i < 2; i++) {
        rp_model *m = harness_load(rp_test_source(names[i]), 2, RP_DTYPE_F32);
        for (int accept = 0; accept <= N_DRAFT; accept++)
            check_rollback(m, accept);
        print_message("  %s: rollback to each of 0..%d accepted drafts matches a run without the rest\n", names[i],
                      N_DRAFT);
        rp_model_destroy(m);
    }
}

// Rollback twice within one logged forward, and past what the log holds.
static void test_rollback_limits(void **state)
{
    (void)state;
    if (!harness_device_has_gdn())
        return;
    rp_model *m = harness_load(rp_test_source("tests/data/models/qwen3.5"), 2, RP_DTYPE_F32);
    int32_t toks[40];
    for (int i = 0; i < 40; i++)
        toks[i] = (int32_t)(i * 37 % 500);
    run r;
    run_init(&r, m, 1, 4);
    run_tokens(&r, toks, 10, 0, NULL);
    run_tokens(&r, toks + 10, 4, 10, NULL); // logged: 4 <= log_cap
    assert_int_equal(rp_model_seq_truncate(m, r.kv, &r.seq, 13), RP_OK);
    assert_int_equal(rp_model_seq_truncate(m, r.kv, &r.seq, 11), RP_OK); // still within the log
    assert_int_equal(r.seq.state_pos, 11);
    // Before the logged forward: gone.
    rp_status st = rp_model_seq_truncate(m, r.kv, &r.seq, 9);
    assert_int_equal(st, RP_ERR_INVALID);
    assert_non_null(strstr(rp_error_message(), "cannot roll the recurrent state back to position 9"));
    // A forward longer than the log cannot be rolled back.
    run_tokens(&r, toks + 11, 5, 11, NULL);
    st = rp_model_seq_truncate(m, r.kv, &r.seq, 14);
    assert_int_equal(st, RP_ERR_INVALID);
    print_message("  %s\n", rp_error_message());
    // Truncating to nothing always works and frees the slot.
    assert_int_equal(rp_kv_pool_free_states(r.kv), 0);
    assert_int_equal(rp_model_seq_truncate(m, r.kv, &r.seq, 0), RP_OK);
    assert_int_equal(rp_kv_pool_free_states(r.kv), 1);
    // A forward that does not start where the state is: refused, named.
    assert_int_equal(rp_kv_seq_reserve(r.kv, &r.seq, 4), RP_OK);
    int32_t pos[1] = {3}, sq[1] = {0};
    bool want[1] = {true};
    rp_kv_seq *seqs[1] = {&r.seq};
    rp_batch b = {1, toks, pos, sq, want, seqs, 1, NULL};
    float *lg = malloc((size_t)r.V * sizeof(float));
    assert_int_equal(rp_model_forward(m, r.kv, &b, lg), RP_ERR_INVALID);
    assert_non_null(strstr(rp_error_message(), "its recurrent state is at 0"));
    free(lg);
    run_deinit(&r);
    rp_model_destroy(m);
}

static void test_state_slots(void **state)
{
    (void)state;
    if (!harness_device_has_gdn())
        return;
    rp_model *m = harness_load(rp_test_source("tests/data/models/qwen3.5"), 2, RP_DTYPE_F32);
    assert_true(rp_model_has_state(m));
    assert_int_equal(rp_model_kv_layers(m), 1); // one attention layer in four
    rp_kv_pool *kv;
    assert_int_equal(rp_model_kv_create_ex(m, 16, 16, RP_DTYPE_F16, 2, 3, &kv), RP_OK);
    assert_int_equal(rp_kv_pool_n_state_layers(kv), 3);
    rp_kv_state_geom g = rp_model_state_geom(m, 1, 3);
    // 3 layers x (2 copies x (4 heads x 16 x 16 + 3 x 128 window) + 3 log rows x (128 + 8)) floats
    assert_int_equal(rp_kv_state_slot_bytes(&g), (size_t)3 * (2 * (4 * 16 * 16 + 3 * 128) + 3 * (128 + 8)) * 4);
    assert_int_equal(rp_kv_pool_state_slot_bytes(kv), rp_kv_state_slot_bytes(&g));
    rp_kv_seq s[3];
    for (int i = 0; i < 3; i++)
        rp_kv_seq_init(&s[i]);
    assert_int_equal(rp_kv_seq_reserve(kv, &s[0], 5), RP_OK);
    assert_int_equal(rp_kv_seq_reserve(kv, &s[1], 5), RP_OK);
    assert_int_equal(rp_kv_pool_free_states(kv), 0);
    int free_blocks = rp_kv_pool_free_blocks(kv);
    assert_int_equal(rp_kv_seq_reserve(kv, &s[2], 5), RP_ERR_RANGE);
    assert_non_null(strstr(rp_error_message(), "recurrent state full"));
    assert_int_equal(rp_kv_pool_free_blocks(kv), free_blocks); // nothing taken
    assert_int_equal(s[2].n_blocks, 0);
    rp_kv_seq_deinit(kv, &s[0]);
    assert_int_equal(rp_kv_seq_reserve(kv, &s[2], 5), RP_OK);
    for (int i = 1; i < 3; i++)
        rp_kv_seq_deinit(kv, &s[i]);
    assert_int_equal(rp_kv_pool_free_states(kv), 2);
    rp_kv_pool_destroy(kv);
    rp_model_destroy(m);
}

// A copy of the qwen3.5 fixture whose config.json has `key` set to `value` (NULL: removed).
static const char *variant(const char *tag, const char *key, json_t *value)
{
    char src[4096], from[4096], to[4096];
    assert_non_null(realpath(rp_test_source("tests/data/models/qwen3.5"), src));
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
    if (!harness_device_has_gdn()) {
        print_message("  skipped: %s has no Gated DeltaNet kernels yet\n", rp_test_device());
        return;
    }
    expect_error(variant("h-types", "layer_types", json_pack("[ssss]", "linear_attention", "mamba", "x", "y")),
                 RP_ERR_UNSUPPORTED, "layer_types[1] is \"mamba\"");
    expect_error(variant("h-types-n", "layer_types", json_pack("[s]", "full_attention")), RP_ERR_INVALID,
                 "\"layer_types\" is not a list of 4 layer kinds");
    expect_error(variant("h-kheads", "linear_num_key_heads", NULL), RP_ERR_INVALID, "\"linear_num_key_heads\"");
    expect_error(variant("h-ratio", "linear_num_key_heads", json_integer(3)), RP_ERR_UNSUPPORTED,
                 "value heads a multiple of key heads");
    expect_error(variant("h-conv", "linear_conv_kernel_dim", json_integer(9)), RP_ERR_UNSUPPORTED, "conv kernel 9");
    json_t *rp = json_pack("{s:f,s:f,s:s}", "rope_theta", 1e7, "partial_rotary_factor", 1.5, "rope_type", "default");
    expect_error(variant("h-rot", "rope_parameters", rp), RP_ERR_INVALID, "partial_rotary_factor 1.5");
    // Every layer full attention: the file's layers 0-2 hold Gated DeltaNet tensors, not attention's.
    expect_error(variant("h-plan", "layer_types",
                         json_pack("[ssss]", "full_attention", "full_attention", "full_attention", "full_attention")),
                 RP_ERR_INVALID, "missing tensor 'model.layers.0.self_attn.q_proj.weight'");
    // The layer plan from full_attention_interval when layer_types is absent: every 2nd layer.
    const char *dir = variant("h-interval", "layer_types", NULL);
    char path[4096];
    snprintf(path, sizeof(path), "%s/config.json", dir);
    json_t *cfg = json_load_file(path, 0, NULL);
    json_object_set_new(cfg, "full_attention_interval", json_integer(4));
    assert_int_equal(json_dump_file(cfg, path, 0), 0);
    json_decref(cfg);
    rp_model *m = harness_load(dir, 2, RP_DTYPE_F32);
    const rp_model_config *c = rp_model_get_config(m);
    assert_true(rp_config_layer_gdn(c, 0) && rp_config_layer_gdn(c, 1) && rp_config_layer_gdn(c, 2));
    assert_false(rp_config_layer_gdn(c, 3));
    assert_int_equal(c->rot_dim, 8); // 0.25 of 32
    rp_model_destroy(m);
}

// The published form: config.json's text_config, the text model under model.language_model,
// a vision tower and MTP tensors skipped; the same model as the text-only checkpoint.
static void test_vision_language_wrapper(void **state)
{
    (void)state;
    if (!harness_device_has_gdn())
        return;
    rp_model *a = harness_load(rp_test_source("tests/data/models/qwen3.5"), 2, RP_DTYPE_F32);
    rp_model *b = harness_load(rp_test_source("tests/data/models/qwen3.5-vl"), 2, RP_DTYPE_F32);
    const rp_model_config *ca = rp_model_get_config(a), *cb = rp_model_get_config(b);
    assert_int_equal(ca->arch, RP_ARCH_QWEN3_5);
    assert_int_equal(cb->arch, RP_ARCH_QWEN3_5);
    assert_int_equal(cb->n_mtp, 0); // its mtp.* tensors are not used yet
    assert_memory_equal(ca->gdn_layers, cb->gdn_layers, sizeof(ca->gdn_layers));
    assert_int_equal(rp_model_weight_bytes(a), rp_model_weight_bytes(b));
    int32_t prompt[7] = {5, 9, 200, 31, 7, 400, 12};
    int V = ca->n_vocab;
    float *la = malloc((size_t)7 * V * sizeof(float)), *lb = malloc((size_t)7 * V * sizeof(float));
    harness_prefill_all(a, prompt, 7, 3, la);
    harness_prefill_all(b, prompt, 7, 3, lb);
    assert_memory_equal(la, lb, (size_t)7 * V * sizeof(float));
    free(la);
    free(lb);
    rp_model_destroy(a);
    rp_model_destroy(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rollback),
        cmocka_unit_test(test_rollback_limits),
        cmocka_unit_test(test_state_slots),
        cmocka_unit_test(test_bad_configs),
        cmocka_unit_test(test_vision_language_wrapper),
    };
    return cmocka_run_group_tests(tests, rp_test_tmp_setup, rp_test_tmp_teardown);
}
