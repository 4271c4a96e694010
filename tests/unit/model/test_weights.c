/*
 * test_weights.c - where the model keeps its weights and the decode profile.
 *
 * The matrices a decode step streams whole live in the weight arena (2 MiB pages,
 * load.c): float ones copied from the file's mapping, quantized ones made there;
 * rp_model_params.mmap_weights keeps float ones mapped. Either way the logits are
 * bitwise the same. Also: rp_malloc_huge, loading under failing allocations, and
 * the RP_PROFILE=N op profile (forward.c).
 */
#include "test_model.h"
#include "quant/quant.h"

#include <math.h>
#include "model_harness.h"

#include "model/model_int.h"

#include <stdlib.h>

#define N_PROMPT 12

static rp_model *load(const char *path, rp_dtype quant, bool mmap_weights)
{
    rp_model_params p;
    rp_model_params_default(&p);
    p.quant = quant;
    p.quiet = true;
    p.mmap_weights = mmap_weights;
    rp_model *m = NULL;
    if (rp_test_load(path, 2, false, &p, &m))
        fail_msg("loading %s: %s", path, rp_error_message());
    return m;
}

static bool in_arena(const rp_model *m, const void *p)
{
    for (int i = 0; i < m->n_arena; i++)
        if ((const uint8_t *)p >= m->arena[i].base && (const uint8_t *)p < m->arena[i].base + m->arena[i].used)
            return true;
    return false;
}

static void prompt_ids(const rp_model *m, int32_t *ids)
{
    int V = rp_model_get_config(m)->n_vocab;
    for (int i = 0; i < N_PROMPT; i++)
        ids[i] = (int32_t)((i * 7919u + 11u) % (uint32_t)V);
}

// Logits of every prompt position, copied weights vs mapped weights: identical bits;
// each matrix where it should be.
static void check_model(const char *path, rp_dtype quant)
{
    rp_model *a = load(path, quant, false), *b = load(path, quant, true);
    const rp_model_config *c = rp_model_get_config(a);
    bool copy = a->huge_pages; // no copy when the kernel's huge pages are off
    bool quantized = quant != RP_DTYPE_F32;
    for (int l = 0; l < c->n_layer; l++) {
        const rp_layer *L = &a->layers[l], *M = &b->layers[l];
        const rp_tensor *ta[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        const rp_tensor *tb[] = {&M->wq, &M->wk, &M->wv, &M->wo, &M->w_gate, &M->w_up, &M->w_down};
        for (size_t i = 0; i < sizeof(ta) / sizeof(ta[0]); i++) {
            assert_true(in_arena(a, ta[i]->data) == (copy || quantized));
            assert_true(in_arena(b, tb[i]->data) == quantized);
            assert_int_equal(ta[i]->nbytes, tb[i]->nbytes);
            assert_memory_equal(ta[i]->data, tb[i]->data, ta[i]->nbytes);
        }
    }
    assert_true(in_arena(a, a->output.data) == (copy || quantized));
    if (!c->tied_embeddings && !quantized) // read a row per token: stays mapped
        assert_false(in_arena(a, a->tok_embd.data));

    int V = c->n_vocab;
    int32_t ids[N_PROMPT];
    prompt_ids(a, ids);
    float *la = malloc((size_t)N_PROMPT * V * sizeof(float)), *lb = malloc((size_t)N_PROMPT * V * sizeof(float));
    harness_prefill_all(a, ids, N_PROMPT, 5, la);
    harness_prefill_all(b, ids, N_PROMPT, 5, lb);
    assert_memory_equal(la, lb, (size_t)N_PROMPT * V * sizeof(float));
    print_message("  %s (%s): %d arena chunk(s) copied/quantized, %d mapped-only; identical logits\n", path,
                  rp_dtype_name(quant), a->n_arena, b->n_arena);
    free(la);
    free(lb);
    rp_model_destroy(a);
    rp_model_destroy(b);
}

static void test_arena_vs_mapping(void **state)
{
    if (strcmp(rp_test_device(), "cpu") != 0) { // the arena is where a host-memory backend's weights live
        print_message("skipping on %s: the weight arena belongs to the CPU backend\n", rp_test_device());
        skip();
    }
    char path[4096];
    snprintf(path, sizeof(path), "%s", rp_test_source("tests/data/models/qwen3")); // tied embeddings
    check_model(path, RP_DTYPE_F32);
    snprintf(path, sizeof(path), "%s", rp_test_source("tests/data/models/llama3")); // untied
    check_model(path, RP_DTYPE_F32);
    check_model(path, RP_DTYPE_Q8_0);
    check_model(path, RP_DTYPE_Q4_0);
}

// --quant q4k: the matrices whose rows are a whole number of 256-element super-blocks become
// Q4_K (rapid-tiny: the down projections, 1024 wide; the rest, 384 wide, keep BF16), their
// bytes what the reference quantizer gives row by row, and the logits stay near BF16's.
static void test_quant_q4k(void **state)
{
    (void)state;
    const char *path = rp_test_source("models/rapid-tiny");
    rp_model *q = load(path, RP_DTYPE_Q4_K, false), *f = load(path, RP_DTYPE_F32, false);
    const rp_model_config *c = rp_model_get_config(q);
    for (int l = 0; l < c->n_layer; l++) {
        const rp_layer *L = &q->layers[l], *F = &f->layers[l];
        assert_int_equal(L->w_down.type, RP_DTYPE_Q4_K);
        assert_int_equal(L->wq.type, F->wq.type);
        assert_int_equal(L->w_gate.type, F->w_gate.type);
        if (l == 0 && q->host_memory) { // the first row, against quantizing it here
            size_t rb;
            assert_true(rp_dtype_row_bytes(RP_DTYPE_Q4_K, L->w_down.ne[0], &rb));
            float *row = malloc(sizeof(float) * (size_t)F->w_down.ne[0]);
            uint8_t *want = malloc(rb);
            rp_dequantize(F->w_down.type, F->w_down.data, row, F->w_down.ne[0]);
            assert_int_equal(rp_quantize(RP_DTYPE_Q4_K, row, want, F->w_down.ne[0]), RP_OK);
            assert_memory_equal(L->w_down.data, want, rb);
            free(row);
            free(want);
        }
    }
    int V = c->n_vocab;
    int32_t ids[N_PROMPT];
    prompt_ids(q, ids);
    float *lq = malloc((size_t)N_PROMPT * V * sizeof(float)), *lf = malloc((size_t)N_PROMPT * V * sizeof(float));
    harness_prefill_all(q, ids, N_PROMPT, 5, lq);
    harness_prefill_all(f, ids, N_PROMPT, 5, lf);
    double e = 0, n = 0;
    for (size_t i = 0; i < (size_t)N_PROMPT * V; i++)
        e += ((double)lq[i] - lf[i]) * ((double)lq[i] - lf[i]), n += (double)lf[i] * lf[i];
    print_message("  rapid-tiny with Q4_K down projections: logits %.4f from BF16's (normalized)\n", sqrt(e / n));
    assert_true(sqrt(e / n) < 0.1 && sqrt(e / n) > 0); // changed, a little
    free(lq);
    free(lf);
    rp_model_destroy(q);
    rp_model_destroy(f);
}

// copy_limit: float matrices are copied until the limit, the rest stay mapped;
// the logits do not change. The limit here is one layer's matrices.
static void test_copy_limit(void **state)
{
    (void)state;
    if (strcmp(rp_test_device(), "cpu") != 0) { // the arena is where a host-memory backend's weights live
        print_message("skipping on %s: the weight arena belongs to the CPU backend\n", rp_test_device());
        skip();
    }
    char path[4096];
    snprintf(path, sizeof(path), "%s", rp_test_source("tests/data/models/qwen3"));
    rp_model *b = load(path, RP_DTYPE_F32, true);
    const rp_layer *L0 = &b->layers[0];
    uint64_t limit = L0->wq.nbytes + L0->wk.nbytes + L0->wv.nbytes + L0->wo.nbytes + L0->w_gate.nbytes +
                     L0->w_up.nbytes + L0->w_down.nbytes;
    rp_model_params p;
    rp_model_params_default(&p);
    p.quiet = true;
    p.copy_limit = limit;
    rp_model *a = NULL;
    if (rp_test_load(path, 2, false, &p, &a))
        fail_msg("loading %s: %s", path, rp_error_message());
    const rp_model_config *c = rp_model_get_config(a);
    int n_copied = 0, n_mapped = 0;
    for (int l = 0; l < c->n_layer; l++) {
        const rp_layer *L = &a->layers[l];
        const rp_tensor *t[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
            bool in = in_arena(a, t[i]->data);
            n_copied += in;
            n_mapped += !in;
        }
    }
    assert_true(a->copied_bytes <= limit);
    assert_true(n_mapped > 0);             // the limit stopped the copy
    assert_true(n_copied > 0 || !a->huge_pages); // and some were copied before it
    print_message("  copy_limit %llu: %d matrices copied, %d mapped\n", (unsigned long long)limit, n_copied, n_mapped);
    int V = c->n_vocab;
    int32_t ids[N_PROMPT];
    prompt_ids(a, ids);
    float *la = malloc((size_t)N_PROMPT * V * sizeof(float)), *lb = malloc((size_t)N_PROMPT * V * sizeof(float));
    harness_prefill_all(a, ids, N_PROMPT, 5, la);
    harness_prefill_all(b, ids, N_PROMPT, 5, lb);
    assert_memory_equal(la, lb, (size_t)N_PROMPT * V * sizeof(float));
    free(la);
    free(lb);
    rp_model_destroy(a);
    rp_model_destroy(b);
}

static void test_malloc_huge(void **state)
{
    size_t sizes[] = {1, 4096, (size_t)2 << 20, ((size_t)3 << 20) + 5};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        uint8_t *p = rp_malloc_huge(sizes[i]);
        assert_non_null(p);
        assert_int_equal((uintptr_t)p % ((uintptr_t)2 << 20), 0);
        for (size_t k = 0; k < sizes[i]; k += 4096)
            assert_int_equal(p[k], 0);
        assert_int_equal(p[sizes[i] - 1], 0);
        memset(p, 0xA5, sizes[i]);
        rp_free_huge(p, sizes[i]);
    }
    rp_free_huge(NULL, 0);
    assert_null(rp_malloc_huge(0));
    rp_alloc_fail_after(0, false);
    assert_null(rp_malloc_huge(4096));
    void *p = rp_malloc_huge(4096); // the hook fired once
    assert_non_null(p);
    rp_free_huge(p, 4096);
}

// Every allocation of a quantizing load fails in turn: a clean error each time, then success.
static void test_load_out_of_memory(void **state)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s", rp_test_source("tests/data/models/llama3"));
    rp_model_params p;
    rp_model_params_default(&p);
    p.quant = RP_DTYPE_Q8_0;
    p.quiet = true;
    int failures = 0;
    for (long n = 0;; n++) {
        assert_true(n < 100000);
        rp_model *m = NULL;
        rp_alloc_fail_after(n, false);
        rp_status st = rp_test_load(path, 1, false, &p, &m);
        rp_alloc_fail_after(-1, false);
        if (st == RP_OK) {
            assert_non_null(m);
            assert_true(m->n_arena > 0 || !m->host_memory); // (a device holds the quantized copy)
            rp_model_destroy(m);
            break;
        }
        assert_int_equal(st, RP_ERR_NOMEM);
        assert_null(m);
        failures++;
    }
    assert_true(failures > 0);
    print_message("  load survived %d failed allocations\n", failures);
}

// RP_PROFILE=1: one-token forwards are timed op by op; prefill forwards are not.
// RP_PROFILE=4: the forwards of 4 tokens only.
static void test_profile(void **state)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s", rp_test_source("tests/data/models/qwen3"));
    rp_model *off = load(path, RP_DTYPE_F32, false);
    assert_null(off->prof);
    rp_model_destroy(off);

    setenv("RP_PROFILE", "1", 1);
    rp_model *m = load(path, RP_DTYPE_F32, false);
    unsetenv("RP_PROFILE");
    assert_non_null(m->prof);
    int32_t ids[N_PROMPT];
    prompt_ids(m, ids);
    int V = rp_model_get_config(m)->n_vocab;
    float *logits = malloc((size_t)N_PROMPT * V * sizeof(float));
    harness_prefill_all(m, ids, N_PROMPT, N_PROMPT, logits); // one forward of 12 tokens: not profiled
    assert_int_equal(m->prof->forwards, 0);
    harness_prefill_all(m, ids, 3, 1, logits); // three one-token forwards
    const rp_prof *p = m->prof;
    int n_layer = rp_model_get_config(m)->n_layer;
    assert_int_equal(p->forwards, 3);
    assert_int_equal(p->calls[RP_PROF_QKV], 3 * n_layer);
    assert_int_equal(p->calls[RP_PROF_DOWN], 3 * n_layer);
    assert_int_equal(p->calls[RP_PROF_HEAD], 3);
    assert_true(p->bytes[RP_PROF_HEAD] == 3.0 * (double)m->output.nbytes);
    double sum = 0;
    for (int k = 0; k < RP_PROF_N; k++)
        sum += p->t[k];
    assert_true(sum > 0 && sum <= p->total);
    rp_model_destroy(m); // prints the report to stderr

    setenv("RP_PROFILE", "4", 1);
    m = load(path, RP_DTYPE_F32, false);
    unsetenv("RP_PROFILE");
    assert_non_null(m->prof);
    harness_prefill_all(m, ids, 3, 1, logits); // one-token forwards: not profiled
    assert_int_equal(m->prof->forwards, 0);
    harness_prefill_all(m, ids, 8, 4, logits); // two forwards of 4 tokens
    assert_int_equal(m->prof->forwards, 2);
    assert_int_equal(m->prof->calls[RP_PROF_QKV], 2 * n_layer);
    free(logits);
    rp_model_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_arena_vs_mapping),
        cmocka_unit_test(test_copy_limit),
        cmocka_unit_test(test_quant_q4k),
        cmocka_unit_test(test_malloc_huge),
        cmocka_unit_test(test_load_out_of_memory),
        cmocka_unit_test(test_profile),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
