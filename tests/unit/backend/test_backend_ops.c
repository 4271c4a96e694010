/*
 * test_backend_ops.c - the op harness: every op of the backend seam (backend.h), for
 * every weight type, on every backend compiled into this build, against the CPU
 * backend's scalar reference kernels, by normalized error (ggml's test-backend-ops).
 *
 * For each backend named by rp_backend_count / rp_backend_name: open it (a backend
 * whose device is absent, a CUDA build on a machine without a GPU, is skipped with a
 * message; under RP_TEST_REQUIRE_DEVICE=1, as on the GPU machine, that is a failure),
 * then run each op on random inputs (never zeros: unwritten outputs are poisoned
 * first and caught) both there and on the reference, and compare. Beyond the
 * numbers, the harness checks the seam's promises: a row's matmul result is bitwise
 * the same alone and inside a batch (the determinism rule), attention stores the
 * batch's K and V so that the canonical export (rp_backend_kv_block_export) reads
 * them back as given (halves: rounded and clamped as the contract says) and gives a
 * token the same bits alone as in a batch (contexts from under one chunk to 5,000
 * keys, GQA groups of 1, 7 and 8), import and block copies round-trip, and
 * gather_rows and argmax follow their contracts. Matmuls
 * also run on shapes with too few rows to fill a GPU, which CUDA splits along K, and
 * with every split count forced (rp_cuda_matmul_splits); the fused forms must give the
 * bits of the separate ops on the backend itself; BF16 on CUDA's tensor cores gives the
 * same bits whatever row tiles a warp takes (rp_cuda_tc_rt).
 *
 * Tolerances: float32 arithmetic in another order stays under 1e-5; BF16 on CUDA's
 * tensor cores under 3e-5 (x as two bfloat16 parts, and the tensor cores' float32 sums
 * truncate rather than round: 1.07e-5 measured over 4,864 columns in one sum); the CPU's
 * bf16-rounded activations (the default on CPUs where they pay) under 1e-2.
 */
#include "test_util.h"

#include "backend/backend.h"
#include "backend/cpu/cpu.h"
#ifdef RP_HAVE_CUDA
#include "backend/cuda/cuda.h"
#endif
#include "quant/quant.h"

#include <math.h>

static uint64_t rng = 0x243F6A8885A308D3ull;

static float frand(void) // [-1, 1)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)(rng >> 40) / 8388608.0f - 1.0f;
}

static float *rand_floats(size_t n, float scale)
{
    float *x = malloc(n * sizeof(float) + 1);
    for (size_t i = 0; i < n; i++)
        x[i] = frand() * scale;
    return x;
}

static double nerr(const float *a, const float *ref, size_t n)
{
    double e = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(a[i]) != isnan(ref[i]))
            return INFINITY;
        e += ((double)a[i] - ref[i]) * ((double)a[i] - ref[i]);
        s += (double)ref[i] * ref[i];
    }
    return sqrt(e / (s > 0 ? s : 1));
}

/* ---- the two backends under comparison ---- */

typedef struct pair {
    rp_backend *ref; // the CPU backend, scalar kernels, float32 activations
    rp_backend *be;  // the backend under test
    const char *name;
    bool bf16_act; // be rounds BF16 weights' activations to bf16
    bool bf16_mma; // be multiplies BF16 weights on CUDA's tensor cores (float32 sums that truncate)
} pair;

static pair P;

// Backend memory holding a copy of host data (n bytes).
static void *dev_copy(rp_backend *be, const void *host, size_t n)
{
    void *d = NULL;
    assert_int_equal(rp_backend_alloc(be, n ? n : 4, &d), RP_OK);
    assert_int_equal(rp_backend_upload(be, d, host, n), RP_OK);
    return d;
}

// Backend memory of n floats set to NaN (a poison: an output element never written shows).
static float *dev_poison(rp_backend *be, size_t n)
{
    float *h = malloc(n * sizeof(float) + 1);
    for (size_t i = 0; i < n; i++)
        h[i] = NAN;
    float *d = dev_copy(be, h, n * sizeof(float));
    free(h);
    return d;
}

static float *host_of(rp_backend *be, const void *dev, size_t n)
{
    float *h = malloc(n * sizeof(float) + 1);
    assert_int_equal(rp_backend_download(be, h, dev, n * sizeof(float)), RP_OK);
    assert_int_equal(rp_backend_synchronize(be), RP_OK);
    return h;
}

static void expect_close(const char *what, const float *got, const float *ref, size_t n, double tol)
{
    double e = nerr(got, ref, n);
    if (!(e <= tol))
        fail_msg("%s on %s: normalized error %.3g > %.3g", what, P.name, e, tol);
}

// Runs a call on the reference backend with the CPU's scalar kernels (the hook is
// process-wide: the CPU backend under test runs its SIMD kernels outside these calls).
#define REF(call)                                                                                                      \
    do {                                                                                                               \
        rp_cpu_force_scalar(true);                                                                                     \
        rp_status st_ = (call);                                                                                        \
        rp_cpu_force_scalar(false);                                                                                    \
        assert_int_equal(st_, RP_OK);                                                                                  \
    } while (0)

/* ---- a batch descriptor for ops that read per-token facts ---- */

typedef struct tbatch {
    int n, n_seqs, bs;
    int32_t tokens[64], pos[64], slot[64], seq[64];
    int32_t bt_start[5], bt[256];
    int32_t rows[64], logit_rows[64];
    int n_rows, n_logit_rows;
} tbatch;

static rp_batch_desc desc_of(const tbatch *b)
{
    return (rp_batch_desc){.n_tokens = b->n,
                           .tokens = b->tokens,
                           .pos = b->pos,
                           .slot = b->slot,
                           .seq = b->seq,
                           .n_seqs = b->n_seqs,
                           .bt_start = b->bt_start,
                           .bt = b->bt,
                           .block_size = b->bs,
                           .n_rows = b->n_rows,
                           .rows = b->rows,
                           .n_logit_rows = b->n_logit_rows,
                           .logit_rows = b->logit_rows};
}

static void begin_both(const tbatch *b)
{
    rp_batch_desc d = desc_of(b);
    REF(rp_backend_begin_batch(P.ref, &d));
    assert_int_equal(rp_backend_begin_batch(P.be, &d), RP_OK);
}

/* ---- weights ---- */

static const rp_dtype wtypes[] = {RP_DTYPE_F32,  RP_DTYPE_F16,  RP_DTYPE_BF16, RP_DTYPE_Q8_0, RP_DTYPE_Q4_0,
                                  RP_DTYPE_Q5_0, RP_DTYPE_Q4_K, RP_DTYPE_Q5_K, RP_DTYPE_Q6_K};
#define N_WTYPES (sizeof(wtypes) / sizeof(wtypes[0]))

typedef struct wpair {
    void *host;
    rp_tensor ref, be;
} wpair;

static bool wpair_init(wpair *w, rp_dtype type, int64_t rows, int64_t cols)
{
    if (!rp_backend_supports_type(P.be, type))
        return false;
    size_t rb;
    assert_true(rp_dtype_row_bytes(type, cols, &rb));
    float *src = rand_floats((size_t)(rows * cols), 1.0f);
    w->host = malloc(rb * (size_t)rows);
    assert_int_equal(rp_quantize(type, src, w->host, rows * cols), RP_OK);
    free(src);
    REF(rp_backend_tensor_init(P.ref, type, cols, rows, w->host, &w->ref));
    assert_int_equal(rp_backend_tensor_init(P.be, type, cols, rows, w->host, &w->be), RP_OK);
    return true;
}

static void wpair_deinit(wpair *w)
{
    rp_backend_tensor_deinit(P.ref, &w->ref);
    rp_backend_tensor_deinit(P.be, &w->be);
    free(w->host);
}

static double mm_tol(rp_dtype t)
{
    if (t == RP_DTYPE_BF16 && P.bf16_mma)
        return 3e-5;
    return t == RP_DTYPE_BF16 && P.bf16_act ? 1e-2 : 1e-5;
}

// Weights initialized until the next call split their matmuls' K into `splits` parts on
// CUDA (0: as their shape says); other backends have no splits.
static void force_splits(int splits)
{
#ifdef RP_HAVE_CUDA
    rp_cuda_matmul_splits(splits);
#else
    (void)splits;
#endif
}

static bool wpair_init_split(wpair *w, rp_dtype type, int64_t rows, int64_t cols, int splits)
{
    force_splits(splits);
    bool ok = wpair_init(w, type, rows, cols);
    force_splits(0);
    return ok;
}

/* ---- tests ---- */

// A (rows, cols) matmul of type t against the reference for each n of ns, and each token
// alone against its row in the batch, bitwise.
static void check_matmul(rp_dtype t, int64_t rows, int64_t cols, int splits, const int *ns, size_t n_ns)
{
    wpair w;
    if (!wpair_init_split(&w, t, rows, cols, splits))
        return;
    for (size_t ni = 0; ni < n_ns; ni++) {
        int n = ns[ni];
        float *x = rand_floats((size_t)(n * cols), 2.0f);
        float *xr = dev_copy(P.ref, x, (size_t)(n * cols) * 4), *xb = dev_copy(P.be, x, (size_t)(n * cols) * 4);
        float *yr = dev_poison(P.ref, (size_t)(n * rows)), *yb = dev_poison(P.be, (size_t)(n * rows));
        REF(rp_backend_matmul(P.ref, &w.ref, xr, n, yr));
        assert_int_equal(rp_backend_matmul(P.be, &w.be, xb, n, yb), RP_OK);
        float *hr = host_of(P.ref, yr, (size_t)(n * rows)), *hb = host_of(P.be, yb, (size_t)(n * rows));
        char what[96];
        snprintf(what, sizeof(what), "matmul %s %lldx%lld splits %d n=%d", rp_dtype_name(t), (long long)rows,
                 (long long)cols, splits, n);
        expect_close(what, hb, hr, (size_t)(n * rows), mm_tol(t));
        // Determinism: each token's row alone gives the same bits as inside the batch.
        for (int k = 0; k < n; k += n > 4 ? n / 3 : 1) {
            float *y1 = dev_poison(P.be, (size_t)rows);
            assert_int_equal(rp_backend_matmul(P.be, &w.be, xb + (size_t)k * cols, 1, y1), RP_OK);
            float *h1 = host_of(P.be, y1, (size_t)rows);
            if (memcmp(h1, hb + (size_t)k * rows, (size_t)rows * 4) != 0)
                fail_msg("%s: token %d alone differs from its row in the batch on %s", what, k, P.name);
            free(h1);
            rp_backend_free(P.be, y1);
        }
        free(hr), free(hb), free(x);
        rp_backend_free(P.ref, xr), rp_backend_free(P.be, xb);
        rp_backend_free(P.ref, yr), rp_backend_free(P.be, yb);
    }
    wpair_deinit(&w);
}

static void test_matmul(void **state)
{
    const int64_t shapes[][2] = {{64, 256}, {96, 512}, {33, 768}}; // rows, cols (rows not a multiple of tiles)
    const int ns[] = {1, 3, 7, 16, 33};
    for (size_t ti = 0; ti < N_WTYPES; ti++)
        for (size_t si = 0; si < 3; si++)
            check_matmul(wtypes[ti], shapes[si][0], shapes[si][1], 0, ns, sizeof(ns) / sizeof(ns[0]));
}

// Matmuls whose rows are too few to fill a GPU, so CUDA splits their K (by shape: few rows,
// long ones, and a down projection scaled down, with a partial last chunk and rows not a
// multiple of a warp's), then every split count forced, on rows long and short (splits
// left with no chunk).
static void test_matmul_split(void **state)
{
    const int64_t shapes[][2] = {{64, 8192}, {97, 4864}};
    const int ns[] = {1, 5, 16};
    const int forced[] = {2, 4, 8};
    for (size_t ti = 0; ti < N_WTYPES; ti++) {
        for (size_t si = 0; si < 2; si++)
            check_matmul(wtypes[ti], shapes[si][0], shapes[si][1], 0, ns, sizeof(ns) / sizeof(ns[0]));
        for (size_t fi = 0; fi < sizeof(forced) / sizeof(forced[0]) && strcmp(P.name, "cuda") == 0; fi++) {
            check_matmul(wtypes[ti], 97, 4864, forced[fi], ns, sizeof(ns) / sizeof(ns[0]));
            check_matmul(wtypes[ti], 33, 768, forced[fi], ns, sizeof(ns) / sizeof(ns[0]));
        }
    }
}

// BF16 weights on CUDA's tensor cores (RP_CUDA_BF16_MMA=1): the row tiles a warp takes (1, 2,
// or chosen per launch) and the blocks of the grid (one an item, or a few taking item after
// item) decide only which rows a warp computes, never a row's bits: a matmul and a glu for
// 1, 5 and 16 tokens give the same bits with each. Shapes: split
// along K, rows not a multiple of a tile, many rows. Elsewhere nothing to check (a skip
// says so).
static void test_matmul_tc_rows(void **state)
{
#ifdef RP_HAVE_CUDA
    if (strcmp(P.name, "cuda") != 0 || !strstr(rp_backend_numerics(P.be, RP_DTYPE_BF16), "bf16-mma")) {
        skip();
        return;
    }
    const int64_t shapes[][2] = {{97, 4864}, {33, 768}, {4200, 512}};
    // (row tiles a warp, blocks at most): the first is the reference
    const int ns[] = {1, 5, 16}, var[][2] = {{1, 0}, {2, 0}, {0, 0}, {1, 3}, {2, 5}, {0, -1}};
    const int nv = (int)(sizeof(var) / sizeof(var[0]));
    for (size_t si = 0; si < 3; si++) {
        int64_t rows = shapes[si][0], cols = shapes[si][1];
        wpair a, b;
        if (!wpair_init(&a, RP_DTYPE_BF16, rows, cols))
            return;
        wpair_init(&b, RP_DTYPE_BF16, rows, cols);
        for (size_t ni = 0; ni < 3; ni++) {
            int n = ns[ni];
            size_t ny = (size_t)(n * rows);
            float *x = rand_floats((size_t)(n * cols), 1.0f);
            float *xb = dev_copy(P.be, x, (size_t)(n * cols) * 4);
            float *want[2] = {NULL, NULL}; // the matmul, the glu
            for (int vi = 0; vi < nv; vi++) {
                rp_cuda_tc_rt(var[vi][0]), rp_cuda_tc_grid(var[vi][1]);
                float *y = dev_poison(P.be, ny), *g = dev_poison(P.be, ny), *u = dev_poison(P.be, ny);
                assert_int_equal(rp_backend_matmul(P.be, &a.be, xb, n, y), RP_OK);
                assert_int_equal(rp_backend_matmul_glu(P.be, &a.be, &b.be, xb, n, u, g), RP_OK);
                float *got[2] = {host_of(P.be, y, ny), host_of(P.be, g, ny)};
                rp_cuda_tc_rt(0), rp_cuda_tc_grid(-1); // the defaults
                for (int k = 0; k < 2; k++) {
                    if (vi == 0) {
                        want[k] = got[k];
                        continue;
                    }
                    if (memcmp(got[k], want[k], ny * 4) != 0)
                        fail_msg("%s bf16 %lldx%lld n=%d: %d row tiles a warp on %d blocks differ from 1 row tile, a "
                                 "block an item, on %s",
                                 k ? "matmul_glu" : "matmul", (long long)rows, (long long)cols, n, var[vi][0],
                                 var[vi][1], P.name);
                    free(got[k]);
                }
                rp_backend_free(P.be, y), rp_backend_free(P.be, g), rp_backend_free(P.be, u);
            }
            free(want[0]), free(want[1]), free(x);
            rp_backend_free(P.be, xb);
        }
        wpair_deinit(&a), wpair_deinit(&b);
    }
#else
    skip();
#endif
}

// Weights grouped at load (rp_backend_group_weights: a 7B's q, k and v, BF16, whose blocks
// would fill the H200 once and a bit) on every backend: the group's results stay those of the
// reference, and bitwise those of each member's own matmul; on CUDA with the tensor cores
// the members end with one K-split count, no more than each had alone.
static void test_group_weights(void **state)
{
    const int64_t cols = 3584, rows[3] = {3584, 512, 512};
    wpair w[3];
    if (!rp_backend_supports_type(P.be, RP_DTYPE_BF16)) {
        skip();
        return;
    }
    for (int i = 0; i < 3; i++)
        wpair_init(&w[i], RP_DTYPE_BF16, rows[i], cols);
#ifdef RP_HAVE_CUDA
    int own[3] = {0, 0, 0};
    bool cuda = strcmp(P.name, "cuda") == 0 && strstr(rp_backend_numerics(P.be, RP_DTYPE_BF16), "bf16-mma");
    for (int i = 0; cuda && i < 3; i++)
        own[i] = rp_cuda_splits_of(&w[i].be);
#endif
    rp_tensor *group[3] = {&w[0].be, &w[1].be, &w[2].be};
    rp_backend_group_weights(P.be, group, 3);
#ifdef RP_HAVE_CUDA
    for (int i = 0; cuda && i < 3; i++) {
        int s = rp_cuda_splits_of(&w[i].be);
        if (s > own[i] || s != rp_cuda_splits_of(&w[0].be))
            fail_msg("grouped member %d: %d splits (alone %d; member 0 has %d)", i, s, own[i],
                     rp_cuda_splits_of(&w[0].be));
    }
#endif
    const int n = 3;
    float *x = rand_floats((size_t)(n * cols), 1.0f);
    float *xr = dev_copy(P.ref, x, (size_t)(n * cols) * 4), *xb = dev_copy(P.be, x, (size_t)(n * cols) * 4);
    float *yb[3], *sb[3], *yr[3];
    rp_matmul_desc mm[3];
    for (int i = 0; i < 3; i++) {
        size_t ny = (size_t)(n * rows[i]);
        yb[i] = dev_poison(P.be, ny), sb[i] = dev_poison(P.be, ny), yr[i] = dev_poison(P.ref, ny);
        mm[i] = (rp_matmul_desc){&w[i].be, yb[i], NULL, NULL};
        assert_int_equal(rp_backend_matmul(P.be, &w[i].be, xb, n, sb[i]), RP_OK);
        rp_cpu_force_scalar(true);
        assert_int_equal(rp_backend_matmul(P.ref, &w[i].ref, xr, n, yr[i]), RP_OK);
        rp_cpu_force_scalar(false);
    }
    assert_int_equal(rp_backend_matmul_group(P.be, mm, 3, xb, n), RP_OK);
    for (int i = 0; i < 3; i++) {
        size_t ny = (size_t)(n * rows[i]);
        float *g = host_of(P.be, yb[i], ny), *sep = host_of(P.be, sb[i], ny), *ref = host_of(P.ref, yr[i], ny);
        char what[64];
        snprintf(what, sizeof(what), "grouped bf16 member %d (%lld rows)", i, (long long)rows[i]);
        expect_close(what, g, ref, ny, mm_tol(RP_DTYPE_BF16));
        if (memcmp(g, sep, ny * 4) != 0)
            fail_msg("%s: the group differs from the member's own matmul on %s", what, P.name);
        free(g), free(sep), free(ref);
        rp_backend_free(P.be, yb[i]), rp_backend_free(P.be, sb[i]), rp_backend_free(P.ref, yr[i]);
        wpair_deinit(&w[i]);
    }
    rp_backend_free(P.be, xb), rp_backend_free(P.ref, xr);
    free(x);
}

// matmul_group with biases and a residual, and matmul_glu, of (rows, cols) weights a and b
// (K-splits sa, sb on CUDA) for n tokens: against the separate ops on the reference, and
// bitwise against the separate ops on the backend itself.
static void check_fused(rp_dtype t, int64_t rows, int64_t cols, int sa, int sb, int n)
{
    wpair a, b;
    if (!wpair_init_split(&a, t, rows, cols, sa))
        return;
    wpair_init_split(&b, t, rows, cols, sb);
    float *x = rand_floats((size_t)(n * cols), 1.0f), *bias = rand_floats((size_t)rows, 1.0f);
    float *res = rand_floats((size_t)(n * rows), 1.0f);
    size_t ny = (size_t)(n * rows);
    // The separate ops, on the reference (r) and on the backend (s).
    rp_backend *bes[2] = {P.ref, P.be};
    const rp_tensor *wa[2] = {&a.ref, &a.be}, *wb[2] = {&b.ref, &b.be};
    float *sep[2][4]; // y with bias, the residual plus y', silu(g) * u, u
    float *xs[2], *biases[2];
    for (int k = 0; k < 2; k++) {
        rp_backend *be = bes[k];
        if (k == 0)
            rp_cpu_force_scalar(true);
        xs[k] = dev_copy(be, x, (size_t)(n * cols) * 4), biases[k] = dev_copy(be, bias, (size_t)rows * 4);
        float *y = dev_poison(be, ny), *z = dev_poison(be, ny), *r = dev_copy(be, res, ny * 4);
        float *g = dev_poison(be, ny), *u = dev_poison(be, ny);
        assert_int_equal(rp_backend_matmul(be, wa[k], xs[k], n, y), RP_OK);
        assert_int_equal(rp_backend_add_bias(be, y, biases[k], n, (int)rows), RP_OK);
        assert_int_equal(rp_backend_matmul(be, wb[k], xs[k], n, z), RP_OK);
        assert_int_equal(rp_backend_add(be, r, z, ny), RP_OK);
        assert_int_equal(rp_backend_matmul(be, wa[k], xs[k], n, g), RP_OK);
        assert_int_equal(rp_backend_matmul(be, wb[k], xs[k], n, u), RP_OK);
        assert_int_equal(rp_backend_silu_mul(be, g, u, ny, g), RP_OK);
        assert_int_equal(rp_backend_synchronize(be), RP_OK);
        if (k == 0)
            rp_cpu_force_scalar(false);
        sep[k][0] = y, sep[k][1] = r, sep[k][2] = g, sep[k][3] = u;
        rp_backend_free(be, z);
    }
    // Under test: fused.
    float *yb = dev_poison(P.be, ny), *zb = dev_poison(P.be, ny), *rb = dev_copy(P.be, res, ny * 4);
    rp_matmul_desc mm[2] = {{&a.be, yb, biases[1], NULL}, {&b.be, zb, NULL, rb}};
    assert_int_equal(rp_backend_matmul_group(P.be, mm, 2, xs[1], n), RP_OK);
    float *gb = dev_poison(P.be, ny), *ub = dev_poison(P.be, ny);
    assert_int_equal(rp_backend_matmul_glu(P.be, &a.be, &b.be, xs[1], n, ub, gb), RP_OK);
    const char *names[] = {"matmul_group bias", "matmul_group residual", "matmul_glu", "matmul_glu up"};
    float *fused[] = {yb, rb, gb, ub};
    for (int i = 0; i < 4; i++) {
        float *hr = host_of(P.ref, sep[0][i], ny), *hs = host_of(P.be, sep[1][i], ny);
        float *hb = host_of(P.be, fused[i], ny);
        char what[96];
        snprintf(what, sizeof(what), "%s %s %lldx%lld splits %d/%d n=%d", names[i], rp_dtype_name(t), (long long)rows,
                 (long long)cols, sa, sb, n);
        expect_close(what, hb, hr, ny, mm_tol(t) * (i == 2 ? 4 : 1));
        if (memcmp(hb, hs, ny * 4) != 0)
            fail_msg("%s: fused differs from the separate ops on %s", what, P.name);
        free(hr), free(hs), free(hb);
    }
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < 4; i++)
            rp_backend_free(bes[k], sep[k][i]);
        rp_backend_free(bes[k], xs[k]), rp_backend_free(bes[k], biases[k]);
    }
    float *devs[] = {yb, zb, rb, gb, ub};
    for (int i = 0; i < 5; i++)
        rp_backend_free(P.be, devs[i]);
    free(x), free(bias), free(res);
    wpair_deinit(&a), wpair_deinit(&b);
}

// The fused forms unsplit, split by shape, and (CUDA) with members of different split
// counts in one group; one token (the decode kernel) and five.
static void test_fused(void **state)
{
    for (size_t ti = 0; ti < N_WTYPES; ti++)
        for (int n = 1; n <= 5; n += 4) {
            check_fused(wtypes[ti], 64, 256, 0, 0, n);
            check_fused(wtypes[ti], 48, 8192, 0, 0, n);
            if (strcmp(P.name, "cuda") == 0) {
                check_fused(wtypes[ti], 97, 4864, 1, 8, n);
                check_fused(wtypes[ti], 97, 4864, 4, 4, n);
            }
        }
}

// Embedding rows of every type, for the batch's token ids.
static void test_get_rows(void **state)
{
    const int64_t vocab = 50, dim = 512;
    tbatch b = {.n = 6, .n_seqs = 1, .bs = 16, .bt_start = {0, 1}};
    const int32_t ids[6] = {0, 49, 7, 7, 23, 1};
    for (int t = 0; t < b.n; t++)
        b.tokens[t] = ids[t], b.pos[t] = t, b.slot[t] = t;
    for (size_t ti = 0; ti < N_WTYPES; ti++) {
        wpair w;
        if (!wpair_init(&w, wtypes[ti], vocab, dim))
            continue;
        begin_both(&b);
        size_t n = (size_t)b.n * dim;
        float *yr = dev_poison(P.ref, n), *yb = dev_poison(P.be, n);
        REF(rp_backend_get_rows(P.ref, &w.ref, yr));
        assert_int_equal(rp_backend_get_rows(P.be, &w.be, yb), RP_OK);
        float *hr = host_of(P.ref, yr, n), *hb = host_of(P.be, yb, n);
        if (memcmp(hr, hb, n * 4) != 0) // dequantization is exact
            fail_msg("get_rows %s differs on %s", rp_dtype_name(wtypes[ti]), P.name);
        free(hr), free(hb);
        rp_backend_free(P.ref, yr), rp_backend_free(P.be, yb);
        wpair_deinit(&w);
    }
}

// rmsnorm (rows of a model width and per-head rows), rope (both styles, and partial: the
// first quarter of each head, the rest untouched), silu_mul, add, add_bias, sigmoid_mul (per
// element and per row).
static void test_rows(void **state)
{
    const int n = 7, width = 896, hd = 64, heads = width / hd;
    size_t nx = (size_t)n * width;
    tbatch b = {.n = n, .n_seqs = 1, .bs = 16, .bt_start = {0, 1}};
    const int32_t pos[7] = {0, 1, 2, 500, 501, 4095, 30000};
    for (int t = 0; t < n; t++)
        b.pos[t] = pos[t], b.slot[t] = t;
    begin_both(&b);
    float *x = rand_floats(nx, 3.0f), *w = rand_floats((size_t)width, 1.0f), *y = rand_floats(nx, 1.0f);
    float *freq = malloc(sizeof(float) * (size_t)hd / 2);
    for (int i = 0; i < hd / 2; i++)
        freq[i] = (float)pow(1e6, -2.0 * i / hd);
    for (int op = 0; op < 9; op++) {
        float *xr = dev_copy(P.ref, x, nx * 4), *xb = dev_copy(P.be, x, nx * 4);
        float *wr = dev_copy(P.ref, w, (size_t)width * 4), *wb = dev_copy(P.be, w, (size_t)width * 4);
        float *yr = dev_copy(P.ref, y, nx * 4), *yb = dev_copy(P.be, y, nx * 4);
        float *fr = dev_copy(P.ref, freq, (size_t)hd / 2 * 4), *fb = dev_copy(P.be, freq, (size_t)hd / 2 * 4);
        float *outr = dev_poison(P.ref, nx), *outb = dev_poison(P.be, nx);
        const char *what = "";
        float *gr = outr, *gb = outb; // the result to compare
        switch (op) {
        case 0:
            what = "rmsnorm";
            REF(rp_backend_rmsnorm(P.ref, xr, wr, 1e-6f, n, width, outr));
            assert_int_equal(rp_backend_rmsnorm(P.be, xb, wb, 1e-6f, n, width, outb), RP_OK);
            break;
        case 1:
            what = "rmsnorm per head, in place";
            REF(rp_backend_rmsnorm(P.ref, xr, wr, 1e-5f, n * heads, hd, xr));
            assert_int_equal(rp_backend_rmsnorm(P.be, xb, wb, 1e-5f, n * heads, hd, xb), RP_OK);
            gr = xr, gb = xb;
            break;
        case 2:
        case 3:
            what = op == 2 ? "rope neox" : "rope norm";
            REF(rp_backend_rope(P.ref, xr, heads, hd, hd, fr, op == 2 ? RP_ROPE_NEOX : RP_ROPE_NORM));
            assert_int_equal(rp_backend_rope(P.be, xb, heads, hd, hd, fb, op == 2 ? RP_ROPE_NEOX : RP_ROPE_NORM),
                             RP_OK);
            gr = xr, gb = xb;
            break;
        case 6: {
            what = "rope neox partial (16 of 64 dims)";
            REF(rp_backend_rope(P.ref, xr, heads, hd, hd / 4, fr, RP_ROPE_NEOX));
            assert_int_equal(rp_backend_rope(P.be, xb, heads, hd, hd / 4, fb, RP_ROPE_NEOX), RP_OK);
            gr = xr, gb = xb;
            float *h = host_of(P.be, xb, nx); // dims past the rotary ones are the input's, bit for bit
            for (int t = 0; t < n; t++)
                for (int i = hd / 4; i < hd; i++)
                    if (memcmp(&h[(size_t)t * width + i], &x[(size_t)t * width + i], 4) != 0)
                        fail_msg("partial rope changed dim %d of token %d on %s", i, t, P.name);
            free(h);
            break;
        }
        case 7:
            what = "sigmoid_mul per element";
            REF(rp_backend_sigmoid_mul(P.ref, xr, yr, n, width, width, outr));
            assert_int_equal(rp_backend_sigmoid_mul(P.be, xb, yb, n, width, width, outb), RP_OK);
            break;
        case 8:
            what = "sigmoid_mul per row, in place";
            REF(rp_backend_sigmoid_mul(P.ref, xr, yr, n, width, 1, xr));
            assert_int_equal(rp_backend_sigmoid_mul(P.be, xb, yb, n, width, 1, xb), RP_OK);
            gr = xr, gb = xb;
            break;
        case 4:
            what = "silu_mul";
            REF(rp_backend_silu_mul(P.ref, xr, yr, nx, outr));
            assert_int_equal(rp_backend_silu_mul(P.be, xb, yb, nx, outb), RP_OK);
            break;
        case 5:
            what = "add, add_bias";
            REF(rp_backend_add(P.ref, yr, xr, nx));
            assert_int_equal(rp_backend_add(P.be, yb, xb, nx), RP_OK);
            REF(rp_backend_add_bias(P.ref, yr, wr, n, width));
            assert_int_equal(rp_backend_add_bias(P.be, yb, wb, n, width), RP_OK);
            gr = yr, gb = yb;
            break;
        }
        float *hr = host_of(P.ref, gr, nx), *hb = host_of(P.be, gb, nx);
        expect_close(what, hb, hr, nx, op == 2 || op == 3 ? 1e-6 : 1e-6);
        free(hr), free(hb);
        float *fr_[] = {xr, wr, yr, fr, outr}, *fb_[] = {xb, wb, yb, fb, outb};
        for (int i = 0; i < 5; i++)
            rp_backend_free(P.ref, fr_[i]), rp_backend_free(P.be, fb_[i]);
    }
    free(x), free(w), free(y), free(freq);
}

// A KV layer on both backends holding the same random history (imported canonically).
static void kv_pair_random(int n_blocks, int bs, int n_kv, int hd, bool f16, rp_kv_layer *kr, rp_kv_layer *kb)
{
    rp_dtype type = f16 ? RP_DTYPE_F16 : RP_DTYPE_F32;
    REF(rp_backend_kv_layer_init(P.ref, n_blocks, bs, n_kv, hd, type, kr));
    assert_int_equal(rp_backend_kv_layer_init(P.be, n_blocks, bs, n_kv, hd, type, kb), RP_OK);
    size_t bb = rp_kv_layer_block_bytes(kr), ne = bb / (f16 ? 2 : 4);
    uint8_t *blk = malloc(bb);
    for (int bl = 0; bl < n_blocks; bl++) {
        float *vals = rand_floats(ne, 1.0f);
        for (size_t i = 0; i < ne; i++)
            if (f16)
                ((uint16_t *)blk)[i] = rp_f32_to_fp16(vals[i]);
            else
                ((float *)blk)[i] = vals[i];
        free(vals);
        REF(rp_backend_kv_block_import(P.ref, kr, bl, blk));
        assert_int_equal(rp_backend_kv_block_import(P.be, kb, bl, blk), RP_OK);
    }
    free(blk);
}

// Each token's KV slot from its sequence's block table and its position.
static void set_slots(tbatch *b)
{
    for (int t = 0; t < b->n; t++) {
        const int32_t *tab = b->bt + b->bt_start[b->seq[t]];
        b->slot[t] = tab[b->pos[t] / b->bs] * b->bs + b->pos[t] % b->bs;
    }
}

// Attention over paged KV: two sequences in shuffled blocks, a prefill chunk of one and a
// decode token with drafts of the other, GQA, f16 and f32 caches; then the canonical
// export of the blocks the op wrote reads back the K and V it was given.
static void test_attention(void **state)
{
    const int hd = 64, n_kv = 2, group = 4, n_head = n_kv * group, bs = 16, n_blocks = 12;
    const int len0 = 70, len1 = 40; // tokens the two sequences hold after this batch
    for (int f16 = 0; f16 < 2; f16++) {
        rp_kv_layer kr, kb;
        kv_pair_random(n_blocks, bs, n_kv, hd, f16, &kr, &kb);
        size_t bb = rp_kv_layer_block_bytes(&kr);
        uint8_t *blk = malloc(bb); // for the exports below
        // Sequence 0: blocks 7, 2, 9, 4, 11 (70 tokens); sequence 1: 5, 0, 10 (40 tokens).
        tbatch b = {.n_seqs = 2, .bs = bs, .bt_start = {0, 5, 8}, .bt = {7, 2, 9, 4, 11, 5, 0, 10}};
        for (int p = len0 - 30; p < len0; p++, b.n++) // a prefill chunk of 30
            b.seq[b.n] = 0, b.pos[b.n] = p;
        for (int p = len1 - 5; p < len1; p++, b.n++) // a decode token and 4 drafts
            b.seq[b.n] = 1, b.pos[b.n] = p;
        set_slots(&b);
        begin_both(&b);
        size_t nq = (size_t)b.n * n_head * hd, nk = (size_t)b.n * n_kv * hd;
        float *q = rand_floats(nq, 1.0f), *k = rand_floats(nk, 1.0f), *v = rand_floats(nk, 1.0f);
        k[3] = 70000.0f; // past the half's range: clamped in an f16 cache
        float *qr = dev_copy(P.ref, q, nq * 4), *kr_ = dev_copy(P.ref, k, nk * 4), *vr = dev_copy(P.ref, v, nk * 4);
        float *qb = dev_copy(P.be, q, nq * 4), *kb_ = dev_copy(P.be, k, nk * 4), *vb = dev_copy(P.be, v, nk * 4);
        float *or_ = dev_poison(P.ref, nq), *ob = dev_poison(P.be, nq);
        float scale = 1.0f / sqrtf((float)hd);
        REF(rp_backend_attention(P.ref, qr, kr_, vr, &kr, n_head, n_kv, hd, scale, or_));
        assert_int_equal(rp_backend_attention(P.be, qb, kb_, vb, &kb, n_head, n_kv, hd, scale, ob), RP_OK);
        float *hr = host_of(P.ref, or_, nq), *hb = host_of(P.be, ob, nq);
        expect_close(f16 ? "attention f16" : "attention f32", hb, hr, nq, 2e-6);
        free(hr), free(hb);
        // The canonical export holds each token's K and V at (offset, head, i).
        for (int t = 0; t < b.n; t++) {
            int blkid = b.slot[t] / bs, off = b.slot[t] % bs;
            assert_int_equal(rp_backend_kv_block_export(P.be, &kb, blkid, blk), RP_OK);
            for (int i = 0; i < n_kv * hd; i++)
                for (int kvpart = 0; kvpart < 2; kvpart++) {
                    size_t e = (size_t)kvpart * bs * n_kv * hd + (size_t)off * n_kv * hd + (size_t)i;
                    float want = (kvpart ? v : k)[(size_t)t * n_kv * hd + i];
                    float got = f16 ? rp_fp16_to_f32(((uint16_t *)blk)[e]) : ((float *)blk)[e];
                    if (f16)
                        want = rp_fp16_to_f32(rp_f32_to_fp16(want > 65504.0f ? 65504.0f : want));
                    if (got != want)
                        fail_msg("token %d %s[%d] exported as %g, stored %g on %s", t, kvpart ? "V" : "K", i, got,
                                 want, P.name);
                }
        }
        // Copies and a round trip through the canonical layout.
        uint8_t *blk2 = malloc(bb);
        assert_int_equal(rp_backend_kv_block_copy(P.be, &kb, 1, 7), RP_OK);
        assert_int_equal(rp_backend_kv_block_export(P.be, &kb, 7, blk), RP_OK);
        assert_int_equal(rp_backend_kv_block_export(P.be, &kb, 1, blk2), RP_OK);
        assert_memory_equal(blk, blk2, bb);
        assert_int_equal(rp_backend_kv_block_import(P.be, &kb, 3, blk), RP_OK);
        assert_int_equal(rp_backend_kv_block_export(P.be, &kb, 3, blk2), RP_OK);
        assert_memory_equal(blk, blk2, bb);
        free(blk), free(blk2), free(q), free(k), free(v);
        float *fr_[] = {qr, kr_, vr, or_}, *fb_[] = {qb, kb_, vb, ob};
        for (int i = 0; i < 4; i++)
            rp_backend_free(P.ref, fr_[i]), rp_backend_free(P.be, fb_[i]);
        rp_backend_kv_layer_deinit(P.ref, &kr);
        rp_backend_kv_layer_deinit(P.be, &kb);
    }
}

// Attention at the real head size over long and short contexts: a verification-like run of
// 5 consecutive tokens at 5,000 keys (many chunks in every split), a decode token with
// fewer keys than one chunk, and 10 consecutive tokens across a chunk boundary at 300;
// GQA groups of 1, 7 and 8 at head_dim 128 and of 16 at 256, f16 and f32 caches. Each token is then run alone and must
// give the bits it had in the batch.
static void test_attention_contexts(void **state)
{
    const int n_kv = 2, bs = 64, n_blocks = 88;
    // (group, head_dim): 16 query heads a KV head at head_dim 256 run as two halves on CUDA.
    const int groups[][2] = {{1, 128}, {7, 128}, {8, 128}, {16, 256}};
    for (int gi = 0; gi < 4; gi++)
        for (int f16 = 0; f16 < 2; f16++) {
            int n_head = n_kv * groups[gi][0], hd = groups[gi][1];
            rp_kv_layer kr, kb;
            kv_pair_random(n_blocks, bs, n_kv, hd, f16, &kr, &kb);
            // Sequences of 5,000, 20 and 300 keys over 79, 1 and 5 blocks in a scattered order.
            tbatch b = {.n_seqs = 3, .bs = bs, .bt_start = {0, 79, 80, 85}};
            for (int i = 0; i < 85; i++)
                b.bt[i] = (i * 37) % n_blocks;
            for (int p = 4995; p < 5000; p++, b.n++)
                b.seq[b.n] = 0, b.pos[b.n] = p;
            b.seq[b.n] = 1, b.pos[b.n] = 19, b.n++;
            for (int p = 290; p < 300; p++, b.n++)
                b.seq[b.n] = 2, b.pos[b.n] = p;
            set_slots(&b);
            begin_both(&b);
            size_t qw = (size_t)n_head * hd, kw = (size_t)n_kv * hd, nq = (size_t)b.n * qw, nk = (size_t)b.n * kw;
            float *q = rand_floats(nq, 2.0f), *k = rand_floats(nk, 1.0f), *v = rand_floats(nk, 1.0f);
            float *qr = dev_copy(P.ref, q, nq * 4), *kr_ = dev_copy(P.ref, k, nk * 4), *vr = dev_copy(P.ref, v, nk * 4);
            float *qb = dev_copy(P.be, q, nq * 4), *kb_ = dev_copy(P.be, k, nk * 4), *vb = dev_copy(P.be, v, nk * 4);
            float *or_ = dev_poison(P.ref, nq), *ob = dev_poison(P.be, nq);
            float scale = 1.0f / sqrtf((float)hd);
            REF(rp_backend_attention(P.ref, qr, kr_, vr, &kr, n_head, n_kv, hd, scale, or_));
            assert_int_equal(rp_backend_attention(P.be, qb, kb_, vb, &kb, n_head, n_kv, hd, scale, ob), RP_OK);
            float *hr = host_of(P.ref, or_, nq), *hb = host_of(P.be, ob, nq);
            char what[64];
            snprintf(what, sizeof(what), "attention %s, group %d, head_dim %d", f16 ? "f16" : "f32", groups[gi][0], hd);
            expect_close(what, hb, hr, nq, 2e-6);
            // Each token alone: its own K and V stored again (the same values), the same bits out.
            for (int t = 0; t < b.n; t++) {
                tbatch b1 = b;
                b1.n = 1, b1.pos[0] = b.pos[t], b1.seq[0] = b.seq[t], b1.slot[0] = b.slot[t];
                rp_batch_desc d = desc_of(&b1);
                assert_int_equal(rp_backend_begin_batch(P.be, &d), RP_OK);
                float *q1 = dev_copy(P.be, q + t * qw, qw * 4), *k1 = dev_copy(P.be, k + t * kw, kw * 4);
                float *v1 = dev_copy(P.be, v + t * kw, kw * 4), *o1 = dev_poison(P.be, qw);
                assert_int_equal(rp_backend_attention(P.be, q1, k1, v1, &kb, n_head, n_kv, hd, scale, o1), RP_OK);
                float *h1 = host_of(P.be, o1, qw);
                if (memcmp(h1, hb + t * qw, qw * 4))
                    fail_msg("%s: token %d (position %d) alone differs from the batch on %s", what, t, b.pos[t],
                             P.name);
                free(h1);
                rp_backend_free(P.be, q1), rp_backend_free(P.be, k1), rp_backend_free(P.be, v1);
                rp_backend_free(P.be, o1);
            }
            free(hr), free(hb), free(q), free(k), free(v);
            float *fr_[] = {qr, kr_, vr, or_}, *fb_[] = {qb, kb_, vb, ob};
            for (int i = 0; i < 4; i++)
                rp_backend_free(P.ref, fr_[i]), rp_backend_free(P.be, fb_[i]);
            rp_backend_kv_layer_deinit(P.ref, &kr);
            rp_backend_kv_layer_deinit(P.be, &kb);
        }
}

// rmsnorm at widths around its kernel's shapes: below a warp's groups, not a multiple
// of 4, a model's widths, past what a thread holds in registers; then each row alone
// against the same row in the batch, bitwise.
static void test_rmsnorm_widths(void **state)
{
    (void)state;
    static const int widths[] = {1, 3, 64, 130, 896, 3584, 8192, 20001};
    const int n = 3;
    tbatch b = {.n = n, .n_seqs = 1, .bs = 16, .bt_start = {0, 1}};
    begin_both(&b);
    for (size_t k = 0; k < sizeof(widths) / sizeof(widths[0]); k++) {
        int width = widths[k];
        size_t nx = (size_t)n * width;
        float *x = rand_floats(nx, 3.0f), *w = rand_floats((size_t)width, 1.0f);
        float *xr = dev_copy(P.ref, x, nx * 4), *xb = dev_copy(P.be, x, nx * 4);
        float *wr = dev_copy(P.ref, w, (size_t)width * 4), *wb = dev_copy(P.be, w, (size_t)width * 4);
        float *outr = dev_poison(P.ref, nx), *outb = dev_poison(P.be, nx), *one = dev_poison(P.be, (size_t)width);
        REF(rp_backend_rmsnorm(P.ref, xr, wr, 1e-6f, n, width, outr));
        assert_int_equal(rp_backend_rmsnorm(P.be, xb, wb, 1e-6f, n, width, outb), RP_OK);
        assert_int_equal(rp_backend_rmsnorm(P.be, xb + (size_t)(n - 1) * width, wb, 1e-6f, 1, width, one), RP_OK);
        float *hr = host_of(P.ref, outr, nx), *hb = host_of(P.be, outb, nx), *h1 = host_of(P.be, one, (size_t)width);
        char what[64];
        snprintf(what, sizeof(what), "rmsnorm of width %d", width);
        expect_close(what, hb, hr, nx, 1e-6);
        if (memcmp(h1, hb + (size_t)(n - 1) * width, (size_t)width * 4) != 0)
            fail_msg("%s on %s: a row alone differs from the same row in a batch", what, P.name);
        free(hr), free(hb), free(h1), free(x), free(w);
        float *f_r[] = {xr, wr, outr}, *f_b[] = {xb, wb, outb, one};
        for (int i = 0; i < 3; i++)
            rp_backend_free(P.ref, f_r[i]);
        for (int i = 0; i < 4; i++)
            rp_backend_free(P.be, f_b[i]);
    }
}

// gather_rows follows both index lists, in place; argmax takes the first largest and
// never a NaN; copy_2d moves strided rows.
static void test_rows_and_argmax(void **state)
{
    const int n = 9, width = 1000;
    tbatch b = {.n = n, .n_seqs = 1, .bs = 16, .bt_start = {0, 1}, .n_rows = 4, .rows = {1, 4, 5, 8},
                .n_logit_rows = 2, .logit_rows = {1, 3}};
    begin_both(&b);
    float *x = rand_floats((size_t)n * width, 1.0f);
    x[(size_t)8 * width + 17] = 5.0f, x[(size_t)8 * width + 900] = 5.0f; // a tie: the first wins
    x[(size_t)4 * width + 3] = NAN, x[(size_t)4 * width + 4] = 9.0f;     // a NaN never wins
    float *d = dev_copy(P.be, x, (size_t)n * width * 4);
    assert_int_equal(rp_backend_gather_rows(P.be, RP_ROWS_OUT, d, width, d), RP_OK);
    float *h = host_of(P.be, d, (size_t)4 * width);
    for (int i = 0; i < 4; i++)
        assert_memory_equal(h + (size_t)i * width, x + (size_t)b.rows[i] * width, (size_t)width * 4);
    free(h);
    assert_int_equal(rp_backend_gather_rows(P.be, RP_ROWS_LOGIT, d, width, d), RP_OK); // rows 4, 8 of x
    int32_t *ids = NULL, got[4];
    assert_int_equal(rp_backend_alloc(P.be, 4 * sizeof(int32_t), (void **)&ids), RP_OK);
    assert_int_equal(rp_backend_argmax(P.be, d, 2, width, ids), RP_OK);
    assert_int_equal(rp_backend_download(P.be, got, ids, 2 * sizeof(int32_t)), RP_OK);
    assert_int_equal(rp_backend_synchronize(P.be), RP_OK);
    for (int i = 0; i < 2; i++) {
        const float *row = x + (size_t)b.rows[b.logit_rows[i]] * width;
        int best = 0;
        for (int j = 1; j < width; j++)
            if (row[j] > row[best] || isnan(row[best]))
                best = j;
        assert_int_equal(got[i], best);
    }
    float *e = dev_copy(P.be, x, (size_t)n * width * 4), *o = dev_poison(P.be, (size_t)2 * 3 * width);
    assert_int_equal(rp_backend_copy_2d(P.be, o + width, 2 * width * 4, e, width * 4, width * 4, 3), RP_OK);
    h = host_of(P.be, o, (size_t)6 * width);
    for (int r = 0; r < 3; r++)
        assert_memory_equal(h + (size_t)(2 * r + 1) * width, x + (size_t)r * width, (size_t)width * 4);
    free(h), free(x);
    rp_backend_free(P.be, d), rp_backend_free(P.be, e), rp_backend_free(P.be, o), rp_backend_free(P.be, ids);
}

static int setup_pair(const char *name, bool f32_act)
{
    rp_backend_params bp;
    rp_backend_params_default(&bp);
    bp.n_threads = 2;
    bp.f32_activations = true;
    if (rp_backend_open("cpu", &bp, &P.ref))
        return -1;
    bp.f32_activations = f32_act;
    rp_status st = rp_backend_open(name, &bp, &P.be);
    if (st) {
        rp_backend_destroy(P.ref);
        P.ref = NULL;
        return st;
    }
    P.name = name;
    P.bf16_act = strcmp(name, "cpu") == 0 && rp_backend_cpu_bf16_act(P.be);
    P.bf16_mma = strstr(rp_backend_numerics(P.be, RP_DTYPE_BF16), "bf16-mma") != NULL;
    return 0;
}

static void teardown_pair(void)
{
    rp_backend_destroy(P.be);
    rp_backend_destroy(P.ref);
    memset(&P, 0, sizeof(P));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul),    cmocka_unit_test(test_matmul_split), cmocka_unit_test(test_fused),
        cmocka_unit_test(test_matmul_tc_rows),      cmocka_unit_test(test_group_weights),
        cmocka_unit_test(test_get_rows),  cmocka_unit_test(test_rows),         cmocka_unit_test(test_attention),
        cmocka_unit_test(test_attention_contexts), cmocka_unit_test(test_rmsnorm_widths),
        cmocka_unit_test(test_rows_and_argmax),
    };
    const char *req = getenv("RP_TEST_REQUIRE_DEVICE");
    int failed = 0;
    for (int i = 0; i < rp_backend_count(); i++) {
        const char *name = rp_backend_name(i);
        for (int f32 = 0; f32 < 2; f32++) { // the backend's default numerics, then float32 activations
            int st = setup_pair(name, f32);
            if (st) {
                if (req && strcmp(req, "1") == 0) {
                    fprintf(stderr, "test_backend_ops: backend %s: %s\n", name, rp_error_message());
                    return 1;
                }
                printf("skipping backend %s: %s\n", name, rp_error_message());
                break;
            }
            printf("backend %s%s\n", name, f32 ? ", float32 activations" : "");
            failed += _cmocka_run_group_tests(name, tests, sizeof(tests) / sizeof(tests[0]), NULL, NULL);
            teardown_pair();
        }
    }
    return failed;
}
