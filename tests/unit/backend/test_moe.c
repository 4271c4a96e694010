/*
 * test_moe.c - the mixture-of-experts ops of the backend seam (rp_backend_moe_route,
 * rp_backend_moe_ffn) against a float64 reference written here from the contract in
 * backend.h (transformers' Qwen3-MoE: softmax in float32, top-k, renormalized; the
 * experts' weighted outputs added in increasing expert order), on every compiled backend
 * that has them; a backend without them must refuse with RP_ERR_UNSUPPORTED.
 *
 * Beyond the numbers: a token's output row is bitwise the same alone (the CPU's fused
 * one-token path) as inside a batch (expert by expert), ties between experts go to
 * the lower expert, and bad routing sizes are refused.
 */
#include "test_util.h"

#include "backend/backend.h"
#include "quant/quant.h"

#include <math.h>

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static float frand(void) // [-1, 1)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)(rng >> 40) / 8388608.0f - 1.0f;
}

static rp_backend *open_cpu(void)
{
    rp_backend_params bp;
    rp_backend_params_default(&bp);
    bp.n_threads = 2;
    bp.f32_activations = true;
    rp_backend *be;
    assert_int_equal(rp_backend_open("cpu", &bp, &be), RP_OK);
    return be;
}

/* ---- routing ---- */

// The reference: softmax in double, the n_used largest (ties: lower expert), optionally renormalized.
static void ref_route(const float *l, int E, int k, bool norm, int32_t *ids, double *w)
{
    double p[64], max = l[0], sum = 0, picked = 0;
    for (int e = 1; e < E; e++)
        max = l[e] > max ? l[e] : max;
    for (int e = 0; e < E; e++)
        sum += p[e] = exp((double)l[e] - max);
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            bool taken = false;
            for (int i = 0; i < j; i++)
                taken |= ids[i] == e;
            if (!taken && (best < 0 || p[e] > p[best]))
                best = e;
        }
        ids[j] = best;
        w[j] = p[best] / sum;
        picked += w[j];
    }
    for (int j = 0; norm && j < k; j++)
        w[j] /= picked;
}

static void test_route_matches_reference(void **state)
{
    (void)state;
    rp_backend *be = open_cpu();
    enum { N = 7, E = 16, K = 4 };
    float logits[N * E];
    for (int i = 0; i < N * E; i++)
        logits[i] = 3 * frand();
    for (int norm = 0; norm < 2; norm++) {
        int32_t ids[N * K];
        float w[N * K];
        assert_int_equal(rp_backend_moe_route(be, logits, N, E, K, norm, ids, w), RP_OK);
        for (int t = 0; t < N; t++) {
            int32_t rid[K];
            double rw[K], sum = 0;
            ref_route(logits + t * E, E, K, norm, rid, rw);
            for (int j = 0; j < K; j++) {
                assert_int_equal(ids[t * K + j], rid[j]);
                if (fabs(w[t * K + j] - rw[j]) > 1e-6 * rw[j])
                    fail_msg("token %d expert %d: weight %.9g, reference %.9g", t, j, w[t * K + j], rw[j]);
                sum += w[t * K + j];
            }
            if (norm && fabs(sum - 1) > 1e-6)
                fail_msg("token %d: renormalized weights sum to %.9g", t, sum);
        }
    }
    rp_backend_destroy(be);
}

static void test_route_ties_and_errors(void **state)
{
    (void)state;
    rp_backend *be = open_cpu();
    float l[8] = {0.5f, 1, 0.5f, 2, 0.5f, 2, 0.5f, 0.5f}; // experts 3 and 5 tie at the top, five tie after 1
    int32_t ids[4];
    float w[4];
    assert_int_equal(rp_backend_moe_route(be, l, 1, 8, 4, false, ids, w), RP_OK);
    assert_int_equal(ids[0], 3);
    assert_int_equal(ids[1], 5);
    assert_int_equal(ids[2], 1);
    assert_int_equal(ids[3], 0); // the lowest of the five equal ones
    assert_true(w[0] == w[1] && w[1] > w[2] && w[2] > w[3]);
    float flat[8] = {0};
    assert_int_equal(rp_backend_moe_route(be, flat, 1, 8, 2, true, ids, w), RP_OK);
    assert_int_equal(ids[0], 0);
    assert_int_equal(ids[1], 1);
    assert_true(w[0] == 0.5f && w[1] == 0.5f);
    assert_int_equal(rp_backend_moe_route(be, l, 1, 8, 9, false, ids, w), RP_ERR_INVALID);
    assert_int_equal(rp_backend_moe_route(be, l, 1, 8, 0, false, ids, w), RP_ERR_INVALID);
    rp_backend_destroy(be);
}

/* ---- the experts ---- */

enum { DIM = 64, FFN = 32, NE = 5, NK = 2, NT = 9 };

typedef struct experts {
    rp_dtype type;
    void *data[3][NE];       // the weights as the backend takes them
    float *deq[3][NE];       // and as float32 (the reference's)
    rp_tensor t[3][NE];      // gate, up, down
} experts;

static void make_experts(rp_backend *be, rp_dtype type, experts *x)
{
    x->type = type;
    for (int kind = 0; kind < 3; kind++)
        for (int e = 0; e < NE; e++) {
            int64_t cols = kind == 2 ? FFN : DIM, rows = kind == 2 ? DIM : FFN;
            float *f = malloc((size_t)(cols * rows) * sizeof(float));
            for (int64_t i = 0; i < cols * rows; i++)
                f[i] = frand() / sqrtf((float)cols) * 1.5f;
            size_t row_bytes;
            assert_true(rp_dtype_row_bytes(type, cols, &row_bytes));
            uint8_t *q = malloc(row_bytes * (size_t)rows);
            for (int64_t r = 0; r < rows; r++) {
                if (type == RP_DTYPE_F32) {
                    memcpy(q + r * row_bytes, f + r * cols, (size_t)cols * sizeof(float));
                } else if (type == RP_DTYPE_BF16) {
                    for (int64_t i = 0; i < cols; i++) {
                        rp_bf16 b = rp_f32_to_bf16(f[r * cols + i]);
                        memcpy(q + r * row_bytes + 2 * i, &b, 2);
                    }
                } else {
                    assert_int_equal(rp_quantize(type, f + r * cols, q + r * row_bytes, cols), RP_OK);
                }
                rp_dequantize(type, q + r * row_bytes, f + r * cols, cols);
            }
            x->data[kind][e] = q;
            x->deq[kind][e] = f;
            assert_int_equal(rp_backend_tensor_init(be, type, cols, rows, q, &x->t[kind][e]), RP_OK);
        }
}

static void free_experts(rp_backend *be, experts *x)
{
    for (int kind = 0; kind < 3; kind++)
        for (int e = 0; e < NE; e++) {
            rp_backend_tensor_deinit(be, &x->t[kind][e]);
            free(x->data[kind][e]);
            free(x->deq[kind][e]);
        }
}

// The reference MLP of one token: Σ over its experts in increasing order of w · down(silu(gate·x) * up·x).
static void ref_ffn(const experts *x, const float *in, const int32_t *ids, const float *w, double *out)
{
    for (int d = 0; d < DIM; d++)
        out[d] = 0;
    for (int e = 0; e < NE; e++)
        for (int j = 0; j < NK; j++) {
            if (ids[j] != e)
                continue;
            double h[FFN];
            for (int r = 0; r < FFN; r++) {
                double g = 0, u = 0;
                for (int c = 0; c < DIM; c++) {
                    g += (double)x->deq[0][e][r * DIM + c] * in[c];
                    u += (double)x->deq[1][e][r * DIM + c] * in[c];
                }
                h[r] = g / (1 + exp(-g)) * u;
            }
            for (int d = 0; d < DIM; d++) {
                double o = 0;
                for (int r = 0; r < FFN; r++)
                    o += (double)x->deq[2][e][d * FFN + r] * h[r];
                out[d] += w[j] * o;
            }
        }
}

static void run_ffn(rp_backend *be, const experts *x, const float *in, const int32_t *ids, const float *w, int n,
                    float *out)
{
    int cap = n > NK ? n : NK; // room for one token's experts: its fused path
    float *xr = malloc((size_t)cap * DIM * sizeof(float)), *orow = malloc((size_t)cap * DIM * sizeof(float));
    float *g = malloc((size_t)cap * FFN * sizeof(float)), *u = malloc((size_t)cap * FFN * sizeof(float));
    rp_moe_desc d = {.n_expert = NE,
                     .n_used = NK,
                     .gate = x->t[0],
                     .up = x->t[1],
                     .down = x->t[2],
                     .ids = ids,
                     .w = w,
                     .x_rows = xr,
                     .o_rows = orow,
                     .g_rows = g,
                     .u_rows = u,
                     .cap_rows = cap};
    for (int i = 0; i < n * DIM; i++)
        out[i] = NAN; // every element must be written
    assert_int_equal(rp_backend_moe_ffn(be, &d, in, n, out), RP_OK);
    assert_int_equal(rp_backend_synchronize(be), RP_OK);
    free(xr);
    free(orow);
    free(g);
    free(u);
}

static void test_ffn_matches_reference_and_is_batch_invariant(void **state)
{
    (void)state;
    rp_backend *be = open_cpu();
    const rp_dtype types[] = {RP_DTYPE_F32, RP_DTYPE_BF16, RP_DTYPE_Q8_0};
    for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
        experts x;
        make_experts(be, types[ti], &x);
        float in[NT * DIM], w[NT * NK], out[NT * DIM];
        int32_t ids[NT * NK];
        for (int i = 0; i < NT * DIM; i++)
            in[i] = frand();
        for (int t = 0; t < NT; t++) { // two distinct experts a token, some experts left without tokens
            ids[t * NK] = (t * 3) % (NE - 1);
            ids[t * NK + 1] = (ids[t * NK] + 1 + t % 2) % (NE - 1);
            w[t * NK] = 0.25f + 0.5f * (frand() + 1) / 2;
            w[t * NK + 1] = 1 - w[t * NK];
        }
        run_ffn(be, &x, in, ids, w, NT, out);
        double num = 0, den = 0;
        for (int t = 0; t < NT; t++) {
            double ref[DIM];
            ref_ffn(&x, in + t * DIM, ids + t * NK, w + t * NK, ref);
            for (int d = 0; d < DIM; d++) {
                assert_false(isnan(out[t * DIM + d]));
                num += (out[t * DIM + d] - ref[d]) * (out[t * DIM + d] - ref[d]);
                den += ref[d] * ref[d];
            }
            float alone[DIM];
            run_ffn(be, &x, in + t * DIM, ids + t * NK, w + t * NK, 1, alone);
            if (memcmp(alone, out + t * DIM, sizeof(alone)) != 0)
                fail_msg("%s experts: token %d alone differs from the batch", rp_dtype_name(types[ti]), t);
        }
        // Q8_0 weights multiply Q8_0-quantized activations (the CPU's integer dot products).
        double tol = types[ti] == RP_DTYPE_Q8_0 ? 2e-2 : 1e-5, err = sqrt(num / den);
        if (!(err < tol))
            fail_msg("%s experts: normalized error %.3g against the float64 reference", rp_dtype_name(types[ti]),
                     err);
        print_message("  %s experts: normalized error %.2g, each token alone bitwise as in the batch\n",
                      rp_dtype_name(types[ti]), err);
        free_experts(be, &x);
    }
    rp_backend_destroy(be);
}

// Every compiled backend either has the two ops or refuses them with RP_ERR_UNSUPPORTED.
static void test_backends_have_or_refuse(void **state)
{
    (void)state;
    for (int i = 0; i < rp_backend_count(); i++) {
        rp_backend_params bp;
        rp_backend_params_default(&bp);
        rp_backend *be;
        if (rp_backend_open(rp_backend_name(i), &bp, &be) != RP_OK) {
            print_message("  %s: not available here (%s)\n", rp_backend_name(i), rp_error_message());
            continue;
        }
        if (!rp_backend_has_moe(be)) {
            int32_t ids[2];
            float w[2];
            void *l = NULL;
            assert_int_equal(rp_backend_alloc(be, 8 * sizeof(float), &l), RP_OK);
            assert_int_equal(rp_backend_moe_route(be, l, 1, 8, 2, false, ids, w), RP_ERR_UNSUPPORTED);
            assert_non_null(strstr(rp_error_message(), "mixture-of-experts"));
            rp_backend_free(be, l);
        }
        print_message("  %s: %s\n", rp_backend_name(i), rp_backend_has_moe(be) ? "has the MoE ops" : "refuses them");
        rp_backend_destroy(be);
    }
    rp_backend *cpu = open_cpu();
    assert_true(rp_backend_has_moe(cpu));
    rp_backend_destroy(cpu);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_route_matches_reference),
        cmocka_unit_test(test_route_ties_and_errors),
        cmocka_unit_test(test_ffn_matches_reference_and_is_batch_invariant),
        cmocka_unit_test(test_backends_have_or_refuse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
