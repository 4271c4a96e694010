/*
 * test_matmul.c - the CPU matmul kernels: SIMD vs scalar reference by normalized
 * error for every weight type and several shapes, the scalar reference vs a
 * float64 dot of the dequantized weights, and bitwise determinism of a token's
 * output whatever the batch size, its place in the batch and the thread count; the
 * bf16-activation kernels (AVX512_BF16, and AMX where the CPU has it) against a float64
 * dot of the same roundings, and AMX's packing of the activations.
 */
#include "test_util.h"

#include "backend/cpu/cpu_int.h"
#include "backend/cpu/mm_kernels.h"

#include <math.h>

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;

static uint32_t rng_u32(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

static float rng_normal(void)
{
    float u1 = ((float)rng_u32() + 1.0f) / 4294967296.0f;
    float u2 = (float)rng_u32() / 4294967296.0f;
    return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2);
}

static void fill_normal(float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = rng_normal();
}

static const rp_dtype all_types[] = {RP_DTYPE_F32,  RP_DTYPE_F16,  RP_DTYPE_BF16, RP_DTYPE_Q8_0, RP_DTYPE_Q4_0,
                                     RP_DTYPE_Q5_0, RP_DTYPE_Q4_K, RP_DTYPE_Q5_K, RP_DTYPE_Q6_K};
#define N_TYPES (sizeof(all_types) / sizeof(all_types[0]))

// A random weight tensor of `type` (rows × ne0), quantized from N(0,1) floats.
typedef struct wmat {
    rp_tensor t;
    void *data;
} wmat;

static void wmat_init(wmat *m, rp_dtype type, int64_t rows, int64_t ne0)
{
    size_t rb;
    assert_true(rp_dtype_row_bytes(type, ne0, &rb));
    float *src = malloc((size_t)(rows * ne0) * sizeof(float));
    fill_normal(src, rows * ne0);
    m->data = malloc(rb * (size_t)rows);
    assert_int_equal(rp_quantize(type, src, m->data, rows * ne0), RP_OK);
    free(src);
    m->t = (rp_tensor){.type = type, .ne = {ne0, rows}, .data = m->data, .nbytes = rb * (size_t)rows};
}

// BF16 weights take bf16-rounded activations (the AMX or the AVX512_BF16 kernel) in
// run_matmul and check_group while this is set.
static bool g_bf16_act;

static void run_matmul(rp_pool *pool, const wmat *m, const float *x, int n, float *y)
{
    size_t sb = rp_cpu_matmul_scratch_bytes(m->t.type, m->t.ne[0], n);
    void *scratch = sb ? rp_malloc_aligned(sb) : NULL;
    rp_cpu_matmul(pool, &m->t, x, n, y, scratch, g_bf16_act);
    rp_free_aligned(scratch);
}

static double nerr(const float *a, const float *b, size_t n)
{
    double e = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        e += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        s += (double)b[i] * b[i];
    }
    return sqrt(e / (s > 0 ? s : 1));
}

static bool is_quant(rp_dtype t)
{
    return rp_dtype_is_quant(t);
}

// The SIMD levels the kernels can be forced to, lowest first (each test covers every one this CPU has).
static const char *const simd_levels[] = {"avx2", "avx512"};
#define N_LEVELS 2

static void test_simd_name(void **state)
{
    (void)state;
    const char *name = rp_cpu_simd_name();
    assert_true(strcmp(name, "avx512") == 0 || strcmp(name, "avx2") == 0 || strcmp(name, "scalar") == 0);
    rp_cpu_force_scalar(true);
    assert_string_equal(rp_cpu_simd_name(), "scalar");
    rp_cpu_force_scalar(false);
    assert_string_equal(rp_cpu_simd_name(), name);
    // forcing a level: every level up to the best one, none above it, no unknown names
    bool reached = false;
    for (int l = 0; l < N_LEVELS; l++) {
        bool ok = rp_cpu_force_simd(simd_levels[l]);
        assert_true(ok == !reached);
        if (ok)
            assert_string_equal(rp_cpu_simd_name(), simd_levels[l]);
        reached = reached || strcmp(simd_levels[l], name) == 0;
    }
    assert_false(rp_cpu_force_simd("sse9"));
    assert_true(rp_cpu_force_simd("scalar"));
    assert_string_equal(rp_cpu_simd_name(), "scalar");
    rp_cpu_force_scalar(false);
    assert_string_equal(rp_cpu_simd_name(), name);
    print_message("cpu kernels: %s\n", name);
}

static void test_scratch_bytes(void **state)
{
    (void)state;
    assert_int_equal(rp_cpu_matmul_scratch_bytes(RP_DTYPE_F32, 100, 4), 0);
    // BF16: room for the AVX-512 kernel's even/odd split of the activations (32-element chunks)
    // and, for rows of a multiple of 32, for AMX's blocks of 16 tokens (1 KiB per 32 elements)
    assert_int_equal(rp_cpu_matmul_scratch_bytes(RP_DTYPE_BF16, 64, 4), 2 * 1024);
    assert_int_equal(rp_cpu_matmul_scratch_bytes(RP_DTYPE_BF16, 384, 20), 20 * 384 * 4);
    assert_int_equal(rp_cpu_matmul_scratch_bytes(RP_DTYPE_BF16, 40, 1), 64 * 4);
    assert_int_equal(rp_cpu_matmul_scratch_bytes(RP_DTYPE_F16, 64, 4), 0);
    // Q8_0 partners: room for Q8_0 blocks and for the AVX2 layout (blocks padded to 4, scales, half sums)
    assert_true(rp_cpu_matmul_scratch_bytes(RP_DTYPE_Q8_0, 64, 3) >= 3 * 2 * 34);
    assert_true(rp_cpu_matmul_scratch_bytes(RP_DTYPE_Q4_0, 64, 1) >= 2 * 34);
    assert_int_equal(rp_cpu_matmul_scratch_bytes(RP_DTYPE_Q5_0, 256, 2), 2 * rp_mm_act_bytes_avx2(RP_DTYPE_Q5_0, 256));
    assert_int_equal(rp_cpu_matmul_scratch_bytes(RP_DTYPE_Q4_K, 512, 5), 5 * 2 * 292);
    assert_int_equal(rp_cpu_matmul_scratch_bytes(RP_DTYPE_Q6_K, 256, 1), 292);
}

// SIMD vs scalar reference, and scalar reference vs float64 on the dequantized weights.
static void test_simd_vs_scalar(void **state)
{
    (void)state;
    const int64_t rows_list[] = {1, 3, 8, 37};
    const int64_t ne0_k[] = {256, 768};
    const int64_t ne0_f[] = {8, 40, 100, 256, 777};
    const int n_list[] = {1, 2, 3, 5, 9, 14};
    rp_pool *pool = NULL;
    assert_int_equal(rp_pool_create(2, &pool), RP_OK);
    for (int lv = 0; lv < N_LEVELS; lv++) {
        if (!rp_cpu_force_simd(simd_levels[lv]))
            continue;
        for (size_t ti = 0; ti < N_TYPES; ti++) {
            rp_dtype type = all_types[ti];
            int blk = rp_dtype_block(type);
            const int64_t *ne0s = blk == 256 ? ne0_k : ne0_f;
            size_t n_ne0 = blk == 256 ? 2 : 5;
            double worst_simd = 0, worst_ref = 0;
            for (size_t a = 0; a < n_ne0; a++) {
                int64_t ne0 = ne0s[a];
                if (ne0 % blk)
                    ne0 = (ne0 / blk + 1) * blk;
                for (size_t b = 0; b < 4; b++) {
                    int64_t rows = rows_list[b];
                    wmat m;
                    wmat_init(&m, type, rows, ne0);
                    float *wf = malloc((size_t)(rows * ne0) * sizeof(float));
                    rp_dequantize(type, m.data, wf, rows * ne0);
                    for (size_t c = 0; c < sizeof(n_list) / sizeof(n_list[0]); c++) {
                        int n = n_list[c];
                        float *x = malloc((size_t)(n * ne0) * sizeof(float));
                        fill_normal(x, n * ne0);
                        float *y_ref = malloc((size_t)(n * rows) * sizeof(float));
                        float *y_simd = malloc((size_t)(n * rows) * sizeof(float));
                        float *y_f64 = malloc((size_t)(n * rows) * sizeof(float));
                        rp_cpu_force_scalar(true);
                        run_matmul(pool, &m, x, n, y_ref);
                        rp_cpu_force_simd(simd_levels[lv]);
                        run_matmul(pool, &m, x, n, y_simd);
                        // the reference's exact value: the dequantized weights against the activations
                        // as the kernels see them (rounded to the partner type for quantized weights)
                        float *xr = malloc((size_t)(n * ne0) * sizeof(float));
                        memcpy(xr, x, (size_t)(n * ne0) * sizeof(float));
                        if (is_quant(type)) {
                            rp_dtype pt = blk == 256 ? RP_DTYPE_Q8_K : RP_DTYPE_Q8_0;
                            void *xq = malloc(rp_cpu_matmul_scratch_bytes(type, ne0, n));
                            assert_int_equal(rp_quantize(pt, x, xq, n * ne0), RP_OK);
                            rp_dequantize(pt, xq, xr, n * ne0);
                            free(xq);
                        }
                        for (int t = 0; t < n; t++)
                            for (int64_t r = 0; r < rows; r++) {
                                double s = 0;
                                for (int64_t i = 0; i < ne0; i++)
                                    s += (double)wf[r * ne0 + i] * xr[t * ne0 + i];
                                y_f64[t * rows + r] = (float)s;
                            }
                        free(xr);
                        double es = nerr(y_simd, y_ref, (size_t)(n * rows));
                        double er = nerr(y_ref, y_f64, (size_t)(n * rows));
                        worst_simd = es > worst_simd ? es : worst_simd;
                        worst_ref = er > worst_ref ? er : worst_ref;
                        // float weights: only summation order differs; quantized: the same integer
                        // block sums, scaled and summed in another order
                        double lim_simd = 1e-5;
                        // the reference itself: float64 for float weights, float block sums for quantized
                        double lim_ref = is_quant(type) ? 1e-5 : 1e-6;
                        if (es > lim_simd)
                            fail_msg("%s (%s) rows %lld ne0 %lld n %d: simd vs scalar error %g", rp_dtype_name(type),
                                     simd_levels[lv], (long long)rows, (long long)ne0, n, es);
                        if (er > lim_ref)
                            fail_msg("%s rows %lld ne0 %lld n %d: scalar vs float64 error %g", rp_dtype_name(type),
                                     (long long)rows, (long long)ne0, n, er);
                        free(x);
                        free(y_ref);
                        free(y_simd);
                        free(y_f64);
                    }
                    free(wf);
                    free(m.data);
                }
            }
            print_message("%-6s %-5s simd vs scalar %.2e, scalar vs f64 %.2e\n", simd_levels[lv], rp_dtype_name(type),
                          worst_simd, worst_ref);
        }
    }
    rp_cpu_force_scalar(false);
    rp_pool_destroy(pool);
}

// Row lengths for check_determinism: quantized, a partial group of blocks at the end;
// float, a partial SIMD step (328 = 5 * 64 + 8). long_rows: float rows of 2056 elements,
// whose activations fill L1 in fewer tokens (the AVX-512 BF16 kernel then takes 4 per
// group, not 12).
static int64_t det_ne0(rp_dtype type, bool long_rows)
{
    return rp_dtype_block(type) == 256 ? 512 : is_quant(type) ? 320 : long_rows ? 2056 : 328;
}

// y for a token is bitwise the same alone, at positions 0, 3, 7, 16 of a batch of 17, with 1 or 2 threads.
// level: a name for rp_cpu_force_simd ("scalar" included).
static void check_determinism(rp_dtype type, const char *level, int64_t ne0)
{
    const int64_t rows = 37;
    const int n = 17;
    wmat m;
    wmat_init(&m, type, rows, ne0);
    float *x = malloc((size_t)(n * ne0) * sizeof(float));
    fill_normal(x, n * ne0);
    float *yb1 = malloc((size_t)(n * rows) * sizeof(float));
    float *yb2 = malloc((size_t)(n * rows) * sizeof(float));
    float *ys = malloc((size_t)rows * sizeof(float));
    rp_pool *p1 = NULL, *p2 = NULL;
    assert_int_equal(rp_pool_create(1, &p1), RP_OK);
    assert_int_equal(rp_pool_create(2, &p2), RP_OK);
    assert_true(rp_cpu_force_simd(level));
    run_matmul(p1, &m, x, n, yb1);
    run_matmul(p2, &m, x, n, yb2);
    assert_memory_equal(yb1, yb2, (size_t)(n * rows) * sizeof(float));
    const int pos[] = {0, 3, 7, 16};
    for (int k = 0; k < 4; k++) {
        for (int pi = 0; pi < 2; pi++) {
            run_matmul(pi ? p2 : p1, &m, x + pos[k] * ne0, 1, ys);
            if (memcmp(ys, yb1 + pos[k] * rows, (size_t)rows * sizeof(float)) != 0)
                fail_msg("%s (%s): token %d alone differs from its result in a batch of %d (%d threads)",
                         rp_dtype_name(type), level, pos[k], n, pi + 1);
        }
    }
    // other batch sizes tile differently (3 + 1, 4 + 4 + 1, ...): each prefix batch must agree too
    for (int nb = 2; nb < n; nb++) {
        run_matmul(p2, &m, x, nb, yb2);
        assert_memory_equal(yb2, yb1, (size_t)(nb * rows) * sizeof(float));
    }
    rp_cpu_force_scalar(false);
    rp_pool_destroy(p1);
    rp_pool_destroy(p2);
    free(x);
    free(yb1);
    free(yb2);
    free(ys);
    free(m.data);
}

static void test_determinism(void **state)
{
    (void)state;
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        rp_dtype t = all_types[ti];
        check_determinism(t, "scalar", det_ne0(t, false));
        for (int lv = 0; lv < N_LEVELS; lv++)
            if (rp_cpu_force_simd(simd_levels[lv])) {
                check_determinism(t, simd_levels[lv], det_ne0(t, false));
                if (!is_quant(t))
                    check_determinism(t, simd_levels[lv], det_ne0(t, true));
            }
    }
    if (rp_cpu_force_simd("avx512") && rp_cpu_has_bf16_dot()) { // BF16 against bf16 activations
        g_bf16_act = true;
        rp_cpu_force_no_amx(true);
        check_determinism(RP_DTYPE_BF16, "avx512", det_ne0(RP_DTYPE_BF16, false));
        check_determinism(RP_DTYPE_BF16, "avx512", det_ne0(RP_DTYPE_BF16, true));
        rp_cpu_force_no_amx(false);
        if (rp_cpu_has_amx()) { // rows of a multiple of 32 elements: 17 tokens are two blocks
            check_determinism(RP_DTYPE_BF16, "avx512", 320);
            check_determinism(RP_DTYPE_BF16, "avx512", 2048);
        } else {
            print_message("no AMX on this CPU: its kernel's determinism not tested\n");
        }
        g_bf16_act = false;
    } else {
        print_message("no AVX512_BF16 on this CPU: its kernel's determinism not tested\n");
    }
    rp_cpu_force_scalar(false);
}

// F32 / F16 weights against many tokens (AVX-512: the GEMM from 2 tokens on, the tile kernel
// for one; AVX2: its tile kernel), for row lengths inside one
// reduction block of mm_tiles.h (RP_MM_FLT_BLOCK), at its edge and over several, with and
// without a partial last slot, and row counts that are not a multiple of the GEMM's tile
// (or that fill several of its row blocks):
// for 1..33, 64 and 512 tokens, against the scalar reference by normalized error, and each
// token's outputs bitwise its outputs alone (a decode step); and AVX2's outputs bitwise
// AVX-512's (the same reduction order). Pools of 3 threads and of one compute the batches
// in turn, one thread the tokens alone.
static void test_float_many_tokens(void **state)
{
    (void)state;
    // (ne0, rows); 2056 x 150: more rows than the GEMM's row block (64 F32, 128 F16 rows there)
    static const int64_t shapes[][2] = {{7, 3},     {100, 37},  {896, 70}, {1024, 5},
                                        {1031, 37}, {2056, 13}, {3000, 6}, {2056, 150}};
    enum { N_MAX = 512 };
    int ns[40], n_ns = 0;
    for (int n = 1; n <= 33; n++)
        ns[n_ns++] = n;
    ns[n_ns++] = 64;
    ns[n_ns++] = N_MAX;
    const rp_dtype types[] = {RP_DTYPE_F32, RP_DTYPE_F16};
    rp_pool *p1 = NULL, *p3 = NULL;
    assert_int_equal(rp_pool_create(1, &p1), RP_OK);
    assert_int_equal(rp_pool_create(3, &p3), RP_OK);
    for (size_t ti = 0; ti < 2; ti++)
        for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
            const rp_dtype type = types[ti];
            const int64_t ne0 = shapes[si][0], rows = shapes[si][1];
            wmat m;
            wmat_init(&m, type, rows, ne0);
            float *x = malloc((size_t)(N_MAX * ne0) * sizeof(float));
            fill_normal(x, N_MAX * ne0);
            size_t ybytes = (size_t)(N_MAX * rows) * sizeof(float);
            float *ref = malloc(ybytes), *y = malloc(ybytes), *one = malloc(ybytes), *one_prev = NULL;
            rp_cpu_force_scalar(true);
            run_matmul(p3, &m, x, N_MAX, ref);
            for (int lv = 0; lv < N_LEVELS; lv++) {
                if (!rp_cpu_force_simd(simd_levels[lv]))
                    continue;
                for (int t = 0; t < N_MAX; t++)
                    run_matmul(p1, &m, x + t * ne0, 1, one + t * rows);
                for (int k = 0; k < n_ns; k++) {
                    const int n = ns[k];
                    run_matmul(k & 1 ? p1 : p3, &m, x, n, y); // one thread: a chunk of every row
                    double e = nerr(y, ref, (size_t)(n * rows));
                    if (e > 1e-5)
                        fail_msg("%s (%s) ne0 %lld rows %lld n %d: error %g against the scalar reference",
                                 rp_dtype_name(type), simd_levels[lv], (long long)ne0, (long long)rows, n, e);
                    for (int t = 0; t < n; t++)
                        if (memcmp(y + t * rows, one + t * rows, (size_t)rows * sizeof(float)) != 0)
                            fail_msg("%s (%s) ne0 %lld rows %lld: token %d in a batch of %d differs from it alone",
                                     rp_dtype_name(type), simd_levels[lv], (long long)ne0, (long long)rows, t, n);
                }
                if (one_prev && memcmp(one, one_prev, ybytes) != 0)
                    fail_msg("%s ne0 %lld rows %lld: AVX-512 and AVX2 give different bits", rp_dtype_name(type),
                             (long long)ne0, (long long)rows);
                if (!one_prev)
                    one_prev = malloc(ybytes);
                memcpy(one_prev, one, ybytes);
            }
            rp_cpu_force_scalar(false);
            free(x);
            free(ref);
            free(y);
            free(one);
            free(one_prev);
            free(m.data);
        }
    rp_pool_destroy(p1);
    rp_pool_destroy(p3);
}

// bf16 rounding to nearest even, as vcvtne2ps2bf16 does (inputs here are normal numbers).
static float round_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u = (u + 0x7FFFu + ((u >> 16) & 1)) & 0xFFFF0000u;
    memcpy(&f, &u, 4);
    return f;
}

// A bf16-activation kernel against a float64 dot of the bf16 weights with the activations
// rounded to bf16: row lengths with and without a partial last chunk (AMX takes only
// multiples of 32; the others go to the AVX512_BF16 kernel), every tile shape (AMX: 1-3
// blocks of 16 tokens, 1-5 blocks of 16 rows, partial ones). The products are exact in
// both, so what differs is float summation (error ~1e-7 of the dot's magnitude, Σ|w·x|);
// the rounding of the activations themselves is checked against float32 activations
// (~2^-9 of it, bounded by 4e-3).
static void check_bf16_act(rp_pool *pool, bool amx)
{
    const int64_t lens[] = {16, 32, 40, 64, 96, 100, 384, 1000, 2056};
    const int ns[] = {1, 2, 3, 4, 5, 6, 9, 13, 16, 17, 33, 40};
    const int64_t rows_amx[] = {11, 16, 37, 70};
    for (size_t li = 0; li < sizeof(lens) / sizeof(lens[0]); li++)
        for (size_t ni = 0; ni < sizeof(ns) / sizeof(ns[0]); ni++) {
            const int64_t ne0 = lens[li], rows = amx ? rows_amx[(li + ni) % 4] : 11;
            const int n = ns[ni];
            wmat m;
            wmat_init(&m, RP_DTYPE_BF16, rows, ne0);
            float *x = malloc((size_t)(n * ne0) * sizeof(float));
            float *y = malloc((size_t)(n * rows) * sizeof(float)), *yf = malloc((size_t)(n * rows) * sizeof(float));
            fill_normal(x, n * ne0);
            g_bf16_act = true;
            run_matmul(pool, &m, x, n, y);
            g_bf16_act = false;
            run_matmul(pool, &m, x, n, yf);
            const rp_bf16 *w = m.data;
            for (int t = 0; t < n; t++)
                for (int64_t r = 0; r < rows; r++) {
                    double ref = 0, mag = 0;
                    for (int64_t i = 0; i < ne0; i++) {
                        double p = (double)rp_bf16_to_f32(w[r * ne0 + i]) * round_bf16(x[t * ne0 + i]);
                        ref += p, mag += fabs(p);
                    }
                    double got = y[t * rows + r], f32 = yf[t * rows + r];
                    if (fabs(got - ref) > 1e-6 * mag)
                        fail_msg("ne0 %lld n %d (%d, %lld): %.9g, reference %.9g", (long long)ne0, n, t, (long long)r,
                                 got, ref);
                    if (fabs(got - f32) > 4e-3 * mag)
                        fail_msg("ne0 %lld n %d (%d, %lld): %.9g, float32 activations %.9g", (long long)ne0, n, t,
                                 (long long)r, got, f32);
                }
            free(x);
            free(y);
            free(yf);
            free(m.data);
        }
}

static void test_bf16_act(void **state)
{
    (void)state;
    if (!rp_cpu_has_bf16_dot()) {
        print_message("no AVX512_BF16 on this CPU: the bf16-activation kernels are not tested\n");
        return;
    }
    rp_pool *pool = NULL;
    assert_int_equal(rp_pool_create(2, &pool), RP_OK);
    rp_cpu_force_no_amx(true);
    check_bf16_act(pool, false);
    rp_cpu_force_no_amx(false);
    if (rp_cpu_has_amx())
        check_bf16_act(pool, true);
    else
        print_message("no AMX on this CPU: its kernel is not tested\n");
    rp_pool_destroy(pool);
}

// AMX's activation layout: per block of 16 tokens and 32 elements, row p holds each
// token's bf16 pair (2p, 2p + 1) at byte 64p + 4c; pad columns are zero. Needs only
// AVX512_BF16 (the packing's instructions), not AMX.
static void test_act_amx(void **state)
{
    (void)state;
    if (!rp_cpu_has_bf16_dot()) {
        print_message("no AVX512_BF16 on this CPU: AMX's packing is not tested\n");
        return;
    }
    const int64_t ne0 = 64;
    const int n = 19;
    float *x = malloc((size_t)(n * ne0) * sizeof(float));
    fill_normal(x, n * ne0);
    size_t bytes = rp_mm_act_bytes_amx(ne0, n);
    assert_int_equal(bytes, 2 * 2 * 1024);
    uint8_t *out = malloc(bytes);
    memset(out, 0x5a, bytes);
    rp_mm_act_amx_clear(ne0, n, out);
    for (int t = 0; t < n; t++)
        rp_mm_act_amx(x + t * ne0, ne0, t, out);
    for (int t = 0; t < 32; t++)
        for (int64_t i = 0; i < ne0; i++) {
            int64_t k = i / 32, p = (i % 32) / 2;
            uint16_t got;
            memcpy(&got,
                   out + ((size_t)(t / 16) * 2 + (size_t)k) * 1024 + (size_t)(64 * p + 4 * (t % 16) + 2 * (i % 2)), 2);
            float want = t < n ? round_bf16(x[t * ne0 + i]) : 0.0f;
            if (rp_bf16_to_f32(got) != want || (t >= n && got != 0))
                fail_msg("token %d element %lld: %#x, want %g", t, (long long)i, got, want);
        }
    free(x);
    free(out);
}

// The AVX2 activation quantizer gives the reference Q8_0 values, scales and half sums.
static void test_act_quant(void **state)
{
    (void)state;
    if (strcmp(rp_cpu_simd_name(), "scalar") == 0)
        skip();
    const int64_t ne0 = 32 * 7;
    float x[32 * 7];
    fill_normal(x, ne0);
    x[3] = 0.0f;
    for (int i = 64; i < 96; i++) // a block whose scale is exactly representable: ties in x/d
        x[i] = (float)(i - 80) * 0.5f;
    rp_block_q8_0 ref[7];
    rp_quant_row_q8_0(x, ref, ne0);
    size_t bytes = rp_mm_act_bytes_avx2(RP_DTYPE_Q4_0, ne0);
    assert_int_equal(bytes, 8 * 44);
    uint8_t *act = malloc(bytes);
    memset(act, 0x5a, bytes);
    rp_mm_quantize_act_avx2(x, ne0, act);
    const int8_t *qs = (const int8_t *)act;
    const float *d = (const float *)(act + 8 * 32);
    const int32_t *hs = (const int32_t *)(act + 8 * 36);
    for (int b = 0; b < 8; b++) {
        int lo = 0, hi = 0;
        for (int j = 0; j < 32; j++) {
            int want = b < 7 ? ref[b].qs[j] : 0;
            assert_int_equal(qs[32 * b + j], want);
            if (j < 16)
                lo += want;
            else
                hi += want;
        }
        assert_true(d[b] == (b < 7 ? rp_fp16_to_f32(ref[b].d) : 0.0f));
        assert_int_equal(hs[(b / 4) * 8 + b % 4], lo);
        assert_int_equal(hs[(b / 4) * 8 + 4 + b % 4], hi);
    }
    free(act);
}

// The AVX-512 activation quantizer: the reference Q8_0 values and scales in its group layout, -Σ per block.
static void test_act_quant_avx512(void **state)
{
    (void)state;
    if (strcmp(rp_cpu_simd_name(), "avx512") != 0)
        skip();
    const int64_t ne0 = 32 * 7;
    float x[32 * 7];
    fill_normal(x, ne0);
    x[5] = 0.0f;
    for (int i = 32; i < 64; i++) // ties in x/d
        x[i] = (float)(i - 48) * 0.5f;
    for (int i = 96; i < 128; i++) // an all-zero block
        x[i] = 0.0f;
    rp_block_q8_0 ref[7];
    rp_quant_row_q8_0(x, ref, ne0);
    size_t bytes = rp_mm_act_bytes_avx512(RP_DTYPE_Q8_0, ne0);
    assert_int_equal(bytes, 2 * 256);
    assert_int_equal(rp_mm_act_bytes_avx512(RP_DTYPE_Q5_0, ne0), 0);
    uint8_t *act = malloc(bytes);
    memset(act, 0x5a, bytes);
    rp_mm_act_fn_avx512(RP_DTYPE_Q8_0)(x, ne0, act);
    for (int b = 0; b < 8; b++) {
        const uint8_t *g = act + (b / 4) * 256;
        int k = b % 4, sum = 0;
        for (int j = 0; j < 32; j++) {
            int want = b < 7 ? ref[b].qs[j] : 0;
            int8_t got = (int8_t)g[(j < 16 ? 0 : 64) + 16 * k + j % 16];
            assert_int_equal(got, want);
            sum += want;
        }
        const int32_t *ns = (const int32_t *)(g + 128);
        const float *d = (const float *)(g + 192);
        for (int l = 0; l < 4; l++) {
            assert_int_equal(ns[4 * k + l], l == 0 ? -sum : 0);
            assert_true(d[4 * k + l] == (b < 7 ? rp_fp16_to_f32(ref[b].d) : 0.0f));
        }
    }
    free(act);
}

// n = 0 writes nothing; a NULL pool runs on the calling thread.
static void test_edges(void **state)
{
    (void)state;
    wmat m;
    wmat_init(&m, RP_DTYPE_Q8_0, 5, 64);
    float y[10] = {42, 42, 42, 42, 42, 42, 42, 42, 42, 42};
    float x[128];
    fill_normal(x, 128);
    rp_cpu_matmul(NULL, &m.t, x, 0, y, NULL, false);
    for (int i = 0; i < 10; i++)
        assert_true(y[i] == 42);
    run_matmul(NULL, &m, x, 2, y);
    float y2[10];
    rp_pool *p = NULL;
    assert_int_equal(rp_pool_create(2, &p), RP_OK);
    run_matmul(p, &m, x, 2, y2);
    assert_memory_equal(y, y2, sizeof(y));
    rp_pool_destroy(p);
    free(m.data);
}

// A fused group (Q, K, V with biases; a projection with its residual add) and the fused
// gate/up with silu are bitwise the separate matmuls followed by the element-wise ops.
static void check_group(rp_pool *pool, rp_dtype type, int n)
{
    const int64_t ne0 = rp_dtype_block(type) == 256 ? 512 : 320;
    const int64_t rows[3] = {70, 6, 6};
    wmat m[3];
    float *x = malloc((size_t)(n * ne0) * sizeof(float));
    fill_normal(x, n * ne0);
    float *ref[3], *got[3], *bias[3], *res_ref = malloc((size_t)n * 70 * sizeof(float)),
                                      *res_got = malloc((size_t)n * 70 * sizeof(float));
    fill_normal(res_ref, n * 70);
    memcpy(res_got, res_ref, (size_t)n * 70 * sizeof(float));
    rp_matmul_desc d[3];
    for (int i = 0; i < 3; i++) {
        wmat_init(&m[i], type, rows[i], ne0);
        ref[i] = malloc((size_t)(n * rows[i]) * sizeof(float));
        got[i] = malloc((size_t)(n * rows[i]) * sizeof(float));
        bias[i] = malloc((size_t)rows[i] * sizeof(float));
        fill_normal(bias[i], rows[i]);
        run_matmul(pool, &m[i], x, n, ref[i]);
        for (int t = 0; t < n; t++)
            for (int64_t r = 0; r < rows[i]; r++)
                ref[i][t * rows[i] + r] += bias[i][r];
        d[i] = (rp_matmul_desc){.w = &m[i].t, .y = got[i], .bias = bias[i]};
    }
    size_t sb = rp_cpu_matmul_scratch_bytes(type, ne0, n);
    void *scratch = sb ? rp_malloc_aligned(sb) : NULL;
    assert_true(rp_cpu_matmul_group_fusable(d, 3));
    rp_cpu_matmul_group(pool, d, 3, false, x, n, scratch, g_bf16_act);
    for (int i = 0; i < 3; i++)
        if (memcmp(got[i], ref[i], (size_t)(n * rows[i]) * sizeof(float)) != 0)
            fail_msg("%s n %d: group output %d differs from the separate matmul", rp_dtype_name(type), n, i);
    // residual: y = x·wᵀ, res += y
    run_matmul(pool, &m[0], x, n, ref[0]);
    for (int64_t e = 0; e < n * 70; e++)
        res_ref[e] += ref[0][e];
    rp_matmul_desc r1 = {.w = &m[0].t, .y = got[0], .residual = res_got};
    rp_cpu_matmul_group(pool, &r1, 1, false, x, n, scratch, g_bf16_act);
    assert_memory_equal(got[0], ref[0], (size_t)(n * 70) * sizeof(float));
    assert_memory_equal(res_got, res_ref, (size_t)(n * 70) * sizeof(float));
    // glu: gate = m[0], up = a second 70-row weight
    wmat up;
    wmat_init(&up, type, 70, ne0);
    float *up_ref = malloc((size_t)(n * 70) * sizeof(float)), *up_got = malloc((size_t)(n * 70) * sizeof(float));
    run_matmul(pool, &up, x, n, up_ref);
    rp_cpu_silu_mul(ref[0], ref[0], up_ref, n * 70);
    rp_matmul_desc gu[2] = {{.w = &m[0].t, .y = got[0]}, {.w = &up.t, .y = up_got}};
    rp_cpu_matmul_group(pool, gu, 2, true, x, n, scratch, g_bf16_act);
    assert_memory_equal(up_got, up_ref, (size_t)(n * 70) * sizeof(float));
    if (memcmp(got[0], ref[0], (size_t)(n * 70) * sizeof(float)) != 0)
        fail_msg("%s n %d: glu differs from matmul, matmul, silu_mul", rp_dtype_name(type), n);
    rp_free_aligned(scratch);
    for (int i = 0; i < 3; i++) {
        free(m[i].data);
        free(ref[i]);
        free(got[i]);
        free(bias[i]);
    }
    free(up.data);
    free(up_ref);
    free(up_got);
    free(res_ref);
    free(res_got);
    free(x);
}

static void test_group(void **state)
{
    (void)state;
    rp_pool *p1 = NULL, *p2 = NULL, *p3 = NULL; // 3 threads: uneven shares, stealing
    assert_int_equal(rp_pool_create(1, &p1), RP_OK);
    assert_int_equal(rp_pool_create(2, &p2), RP_OK);
    assert_int_equal(rp_pool_create(3, &p3), RP_OK);
    const int ns[] = {1, 2, 3, 7, 20}; // 20: the F32 / F16 GEMM
    for (int lv = -1; lv < N_LEVELS; lv++) {
        if (!rp_cpu_force_simd(lv < 0 ? "scalar" : simd_levels[lv]))
            continue;
        for (size_t ti = 0; ti < N_TYPES; ti++)
            for (int k = 0; k < 5; k++) {
                check_group(p1, all_types[ti], ns[k]);
                check_group(p2, all_types[ti], ns[k]);
                check_group(p3, all_types[ti], ns[k]);
            }
    }
    rp_cpu_force_scalar(false);
    g_bf16_act = rp_cpu_has_bf16_dot(); // the bf16-activation kernels' groups (nothing new without them)
    for (int amx = 0; g_bf16_act && amx < 2; amx++) {
        rp_cpu_force_no_amx(!amx);
        if (amx && !rp_cpu_has_amx())
            break;
        for (int k = 0; k < 4; k++) {
            check_group(p1, RP_DTYPE_BF16, ns[k]);
            check_group(p3, RP_DTYPE_BF16, ns[k]);
        }
    }
    rp_cpu_force_no_amx(false);
    g_bf16_act = false;
    // mixed types do not fuse
    wmat a, b;
    wmat_init(&a, RP_DTYPE_Q8_0, 4, 64);
    wmat_init(&b, RP_DTYPE_Q4_0, 4, 64);
    float y[8];
    rp_matmul_desc d[2] = {{.w = &a.t, .y = y}, {.w = &b.t, .y = y + 4}};
    assert_false(rp_cpu_matmul_group_fusable(d, 2));
    free(a.data);
    free(b.data);
    rp_pool_destroy(p1);
    rp_pool_destroy(p2);
    rp_pool_destroy(p3);
}

// silu(g) · u: within a few ulp of g / (1 + expf(-g)) · u at every level, over
// [-100, 100] and the edges (±0, tiny, huge); and an element's result does not depend on
// its offset in the call or the call's length (the masked tail runs the same operations).
static void test_silu(void **state)
{
    (void)state;
    enum { N = 4099 };
    float *g = malloc(N * sizeof(float)), *u = malloc(N * sizeof(float)), *y = malloc(N * sizeof(float));
    float *y2 = malloc(N * sizeof(float));
    for (int i = 0; i < N; i++) {
        g[i] = -100.0f + 200.0f * (float)i / (N - 1);
        u[i] = 1.0f + (float)(i % 7) * 0.25f;
    }
    const float edge[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 88.0f, -88.0f, 1e30f, -1e30f, -87.5f, 3e-8f};
    for (size_t i = 0; i < sizeof(edge) / sizeof(edge[0]); i++)
        g[i * 37] = edge[i];
    for (int lv = -1; lv < N_LEVELS; lv++) {
        if (!rp_cpu_force_simd(lv < 0 ? "scalar" : simd_levels[lv]))
            continue;
        rp_cpu_silu_mul(y, g, u, N);
        for (int i = 0; i < N; i++) {
            double ref = (double)g[i] / (1.0 + exp(-(double)g[i])) * u[i];
            double err = fabs((double)y[i] - ref);
            if (!(err <= 4e-7 * fabs(ref) + 1e-30)) // (below -87 the SIMD exp gives 0: |silu| < 1e-35 there)
                fail_msg("level %d: silu(%g) * %g = %.9g, want %.9g", lv, g[i], u[i], y[i], ref);
        }
        for (int off = 1; off < 9; off++) {   // shifted starts and short calls give the same bits
            memcpy(y2, g, N * sizeof(float)); // in place, as the fused gate/up runs it
            rp_cpu_silu_mul(y2 + off, y2 + off, u + off, N - off - (off & 3));
            if (memcmp(y2 + off, y + off, (size_t)(N - off - (off & 3)) * sizeof(float)) != 0)
                fail_msg("level %d: offset %d changes results", lv, off);
        }
    }
    rp_cpu_force_scalar(false);
    free(g);
    free(u);
    free(y);
    free(y2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_simd_name),
        cmocka_unit_test(test_scratch_bytes),
        cmocka_unit_test(test_simd_vs_scalar),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_float_many_tokens),
        cmocka_unit_test(test_bf16_act),
        cmocka_unit_test(test_act_amx),
        cmocka_unit_test(test_edges),
        cmocka_unit_test(test_act_quant),
        cmocka_unit_test(test_act_quant_avx512),
        cmocka_unit_test(test_group),
        cmocka_unit_test(test_silu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
