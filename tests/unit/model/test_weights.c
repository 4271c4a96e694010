/*
 * test_weights.c - where the model keeps its weights and the decode profile.
 *
 * The matrices a decode step streams whole live in the weight arena (2 MiB pages,
 * load.c): float ones copied from the file's mapping, quantized ones made there;
 * rp_model_params.mmap_weights keeps float ones mapped. Either way the logits are
 * bitwise the same. Also: rp_malloc_huge, loading under failing allocations, the
 * RP_PROFILE=N op profile (forward.c), and the sizing pass before the load (load.c)
 * with the check that a device backend has the memory (rp_model_check_fit).
 */
#include "test_model.h"
#include "quant/quant.h"

#include <math.h>
#include "model_harness.h"

#include "model/model_int.h"
#include "test_tmp.h"

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

typedef struct progress_log {
    int calls;
    double last;
    bool backwards; // a fraction below the one before it, or outside (0, 1]
} progress_log;

static void on_progress(void *ctx, double fraction)
{
    progress_log *p = ctx;
    if (!(fraction > 0 && fraction <= 1) || fraction < p->last)
        p->backwards = true;
    p->calls++;
    p->last = fraction;
}

// Quiet load parameters whose progress calls go to *log.
static rp_model_params quiet_logged(progress_log *log)
{
    rp_model_params p;
    rp_model_params_default(&p);
    p.quiet = true;
    p.progress = on_progress;
    p.progress_ctx = log;
    return p;
}

// A model with an MTP layer reports it too, and its progress still ends at exactly 1 (it
// went on to 1.17 for the bundled model, whose six layers have one MTP layer after them).
static void test_progress_with_mtp(void **state)
{
    (void)state;
    progress_log log = {0};
    rp_model_params p = quiet_logged(&log);
    rp_model *m = NULL;
    const char *path = rp_test_source("models/rapid-tiny");
    if (rp_test_load(path, 2, false, &p, &m))
        fail_msg("loading %s: %s", path, rp_error_message());
    const rp_model_config *c = rp_model_get_config(m);
    assert_int_equal(c->n_mtp, 1);
    assert_int_equal(log.calls, c->n_layer + c->n_mtp);
    assert_true(log.last == 1.0);
    assert_false(log.backwards);
    rp_model_destroy(m);
}

// The sizing pass before the load leaves nothing behind: the load reports its progress
// once per layer, counts every weight once and keeps its layers and rope frequencies. A
// shape error in the last layer is reported before any layer loads (no progress at all).
static void test_sizing_pass(void **state)
{
    (void)state;
    char path[4096];
    snprintf(path, sizeof(path), "%s", rp_test_source("tests/data/models/qwen3"));
    progress_log log = {0};
    rp_model_params p = quiet_logged(&log);
    rp_model *m = NULL;
    if (rp_test_load(path, 2, false, &p, &m))
        fail_msg("loading %s: %s", path, rp_error_message());
    const rp_model_config *c = rp_model_get_config(m);
    assert_int_equal(log.calls, c->n_layer);
    assert_true(log.last == 1.0);
    assert_false(log.backwards);
    assert_non_null(m->layers);
    assert_non_null(m->inv_freq);
    size_t sum = m->tok_embd.nbytes + (c->tied_embeddings ? 0 : m->output.nbytes);
    for (int l = 0; l < c->n_layer; l++) {
        const rp_layer *L = &m->layers[l];
        sum += L->wq.nbytes + L->wk.nbytes + L->wv.nbytes + L->wo.nbytes + L->w_gate.nbytes + L->w_up.nbytes +
               L->w_down.nbytes;
    }
    assert_int_equal(m->weight_bytes, sum);
    assert_int_equal(m->mtp_weight_bytes, 0);
    rp_model_destroy(m);

    // The same model with layer 1's down projection transposed in its header (same bytes).
    const char *dir = rp_test_tmp_path("qwen3-bad-shape");
    assert_int_equal(mkdir(dir, 0755), 0);
    const char *links[] = {"config.json", "model-00001-of-00002.safetensors", "model.safetensors.index.json"};
    char src[4096], dst[4096];
    for (size_t i = 0; i < sizeof(links) / sizeof(links[0]); i++) {
        snprintf(src, sizeof(src), "%s/%s", path, links[i]);
        snprintf(dst, sizeof(dst), "%s/%s", dir, links[i]);
        assert_int_equal(symlink(src, dst), 0);
    }
    snprintf(src, sizeof(src), "%s/model-00002-of-00002.safetensors", path);
    FILE *f = fopen(src, "rb");
    assert_non_null(f);
    static char bytes[1 << 20];
    size_t n = fread(bytes, 1, sizeof(bytes), f);
    fclose(f);
    assert_true(n > 0 && n < sizeof(bytes));
    const char *from = "\"model.layers.1.mlp.down_proj.weight\":{\"dtype\":\"BF16\",\"shape\":[64,128]";
    char *at = memmem(bytes, n, from, strlen(from));
    assert_non_null(at);
    memcpy(at + strlen(from) - strlen("[64,128]"), "[128,64]", strlen("[128,64]"));
    snprintf(dst, sizeof(dst), "%s/model-00002-of-00002.safetensors", dir);
    rp_test_write_file(dst, bytes, n);
    log = (progress_log){0};
    assert_int_equal(rp_test_load(dir, 2, false, &p, &m), RP_ERR_INVALID);
    assert_null(m);
    const char *msg = rp_error_message();
    print_message("  %s\n", msg);
    assert_non_null(strstr(msg, "'model.layers.1.mlp.down_proj.weight' has shape [64, 128], expected [128, 64]"));
    assert_null(strstr(msg + 1, dir)); // the file named once
    assert_int_equal(log.calls, 0); // layer 0 was not loaded first
}

// On a device backend (RP_TEST_DEVICE=cuda), a model that does not fit the free memory
// fails before anything is uploaded, naming the sizes: with all but half the weights'
// bytes taken, the load fails with RP_ERR_NOMEM, reports no progress and leaves the free
// memory as it found it; with the memory back, it loads.
static void test_device_memory_check(void **state)
{
    (void)state;
    rp_backend_params bp;
    rp_backend_params_default(&bp);
    bp.n_threads = 2;
    rp_backend *be;
    if (rp_backend_open(rp_test_device(), &bp, &be))
        fail_msg("opening %s: %s", rp_test_device(), rp_error_message());
    rp_backend_info bi;
    rp_backend_get_info(be, &bi);
    if (bi.host_memory) {
        print_message("skipping on %s: its memory is host memory, where the load checks no free memory (the "
                      "sizing pass runs there too: test_sizing_pass)\n",
                      bi.name);
        rp_backend_destroy(be);
        skip();
    }
    const char *path = rp_test_source("models/rapid-tiny");
    progress_log log = {0};
    rp_model_params p = quiet_logged(&log);
    rp_model *m = NULL;
    if (rp_model_load(path, be, &p, &m))
        fail_msg("loading %s: %s", path, rp_error_message());
    size_t weights = m->weight_bytes;
    rp_model_destroy(m);

    rp_backend_get_info(be, &bi);
    void *hold = NULL;
    if (rp_backend_alloc(be, bi.mem_free - weights / 2, &hold))
        fail_msg("taking the device's memory: %s", rp_error_message());
    rp_backend_get_info(be, &bi);
    uint64_t before = bi.mem_free;
    log = (progress_log){0};
    assert_int_equal(rp_model_load(path, be, &p, &m), RP_ERR_NOMEM);
    assert_null(m);
    const char *msg = rp_error_message();
    print_message("  %.1f MiB free: %s\n", before / 1048576.0, msg);
    assert_non_null(strstr(msg, "free"));
    assert_non_null(strstr(msg, "--quant q8 or q4"));
    assert_int_equal(log.calls, 0);
    rp_backend_get_info(be, &bi);
    uint64_t slack = (uint64_t)4 << 20; // the driver's own bookkeeping
    assert_true(bi.mem_free + slack >= before && bi.mem_free <= before + slack);

    rp_backend_free(be, hold);
    if (rp_model_load(path, be, &p, &m))
        fail_msg("loading %s with the memory back: %s", path, rp_error_message());
    assert_int_equal(m->weight_bytes, weights);
    rp_model_destroy(m);
    rp_backend_destroy(be);
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
        cmocka_unit_test(test_progress_with_mtp), cmocka_unit_test(test_sizing_pass),
        cmocka_unit_test(test_device_memory_check),
    };
    return cmocka_run_group_tests(tests, rp_test_tmp_setup, rp_test_tmp_teardown);
}
