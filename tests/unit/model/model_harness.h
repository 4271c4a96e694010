/*
 * model_harness.h - helpers for model tests: run prompts through rp_model_forward
 * with explicit batching, greedy generation, and reading reference JSON.
 */
#ifndef RP_MODEL_HARNESS_H
#define RP_MODEL_HARNESS_H

#include "test_model.h"
#include "test_util.h"

#include "model/model.h"

#include <jansson.h>
#include <math.h>

// How the harness's KV pools store K and V: the engine's default unless a test says otherwise.
#ifndef HARNESS_KV_TYPE
#define HARNESS_KV_TYPE RP_DTYPE_F16
#endif

// Logits of every position of `ids` (n tokens), prefilled in chunks of `chunk`
// tokens, into out (n x n_vocab). Fails the test on error.
static inline void harness_prefill_all(rp_model *m, const int32_t *ids, int n, int chunk, float *out)
{
    rp_kv_pool *kv;
    assert_int_equal(rp_model_kv_create(m, 16, (n + 15) / 16 + 1, HARNESS_KV_TYPE, &kv), RP_OK);
    rp_kv_seq seq;
    rp_kv_seq_init(&seq);
    rp_kv_seq *seqs[1] = {&seq};
    int32_t *pos = calloc((size_t)n, sizeof(int32_t)), *sq = calloc((size_t)n, sizeof(int32_t));
    bool *want = calloc((size_t)n, sizeof(bool));
    int V = rp_model_get_config(m)->n_vocab;
    for (int at = 0; at < n; at += chunk) {
        int c = n - at < chunk ? n - at : chunk;
        for (int i = 0; i < c; i++) {
            pos[i] = at + i;
            want[i] = true;
        }
        assert_int_equal(rp_kv_seq_reserve(kv, &seq, at + c), RP_OK);
        rp_batch b = {c, ids + at, pos, sq, want, seqs, 1, NULL};
        rp_status st = rp_model_forward(m, kv, &b, out + (size_t)at * V);
        if (st)
            fail_msg("forward: %s", rp_error_message());
    }
    free(pos);
    free(sq);
    free(want);
    rp_kv_seq_deinit(kv, &seq);
    rp_kv_pool_destroy(kv);
}

static inline int harness_argmax(const float *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

// Greedy generation of n_gen tokens after prompt; out_logits (optional) gets the
// logits after the prompt (n_vocab floats).
static inline void harness_greedy(rp_model *m, const int32_t *prompt, int n_prompt, int n_gen, int32_t *out,
                           float *first_logits)
{
    int V = rp_model_get_config(m)->n_vocab;
    int total = n_prompt + n_gen;
    rp_kv_pool *kv;
    assert_int_equal(rp_model_kv_create(m, 16, (total + 15) / 16 + 1, HARNESS_KV_TYPE, &kv), RP_OK);
    rp_kv_seq seq;
    rp_kv_seq_init(&seq);
    rp_kv_seq *seqs[1] = {&seq};
    int32_t *pos = calloc((size_t)n_prompt, sizeof(int32_t)), *sq = calloc((size_t)n_prompt, sizeof(int32_t));
    bool *want = calloc((size_t)n_prompt, sizeof(bool));
    float *logits = malloc((size_t)V * sizeof(float));
    for (int i = 0; i < n_prompt; i++) {
        pos[i] = i;
        want[i] = i == n_prompt - 1;
    }
    assert_int_equal(rp_kv_seq_reserve(kv, &seq, n_prompt), RP_OK);
    rp_batch b = {n_prompt, prompt, pos, sq, want, seqs, 1, NULL};
    if (rp_model_forward(m, kv, &b, logits))
        fail_msg("forward: %s", rp_error_message());
    if (first_logits)
        memcpy(first_logits, logits, (size_t)V * sizeof(float));
    for (int g = 0; g < n_gen; g++) {
        for (int i = 0; i < V; i++)
            assert_false(isnan(logits[i]));
        out[g] = harness_argmax(logits, V);
        if (g == n_gen - 1)
            break;
        int32_t p = n_prompt + g;
        assert_int_equal(rp_kv_seq_reserve(kv, &seq, p + 1), RP_OK);
        rp_batch d = {1, &out[g], &p, sq, want + n_prompt - 1, seqs, 1, NULL};
        if (rp_model_forward(m, kv, &d, logits))
            fail_msg("forward: %s", rp_error_message());
    }
    free(pos);
    free(sq);
    free(want);
    free(logits);
    rp_kv_seq_deinit(kv, &seq);
    rp_kv_pool_destroy(kv);
}

// Reads a JSON int array into a malloc'd int32 array.
static inline int32_t *harness_ids(json_t *arr, int *n)
{
    *n = (int)json_array_size(arr);
    int32_t *v = malloc(sizeof(int32_t) * (size_t)(*n ? *n : 1));
    for (int i = 0; i < *n; i++)
        v[i] = (int32_t)json_integer_value(json_array_get(arr, (size_t)i));
    return v;
}

// f32_act: BF16 weights take float32 activations (rp_model_params.f32_activations), as
// every comparison with a reference's float32 numbers needs; false: the default, bf16
// activations where the CPU has a bf16 dot product that pays (rp_cpu_bf16_act_pays).
static inline rp_model *harness_load_act(const char *path, int threads, rp_dtype quant, bool f32_act)
{
    rp_model_params p;
    rp_model_params_default(&p);
    p.quant = quant;
    p.quiet = true;
    rp_model *m = NULL;
    if (rp_test_load(path, threads, f32_act, &p, &m))
        fail_msg("loading %s: %s", path, rp_error_message());
    return m;
}

// Whether the test device (rp_test_device) has the mixture-of-experts kernels (the CPU does).
static inline bool harness_device_has_moe(void)
{
    rp_backend_params bp;
    rp_backend_params_default(&bp);
    rp_backend *be;
    if (rp_backend_open(rp_test_device(), &bp, &be))
        fail_msg("opening %s: %s", rp_test_device(), rp_error_message());
    bool has = rp_backend_has_moe(be);
    rp_backend_destroy(be);
    return has;
}

static inline bool harness_device_has_gdn(void)
{
    rp_backend_params bp;
    rp_backend_params_default(&bp);
    rp_backend *be;
    if (rp_backend_open(rp_test_device(), &bp, &be))
        fail_msg("opening %s: %s", rp_test_device(), rp_error_message());
    bool has = rp_backend_has_gdn(be);
    rp_backend_destroy(be);
    return has;
}

// A model with float32 activations: the numbers the reference fixtures hold.
static inline rp_model *harness_load(const char *path, int threads, rp_dtype quant)
{
    return harness_load_act(path, threads, quant, true);
}

#endif
