/*
 * test_attention.c - the CPU attention op: the SIMD path (chunked, GQA groups
 * together, polynomial exp) against the scalar reference and a float64 reference
 * by normalized error, over head_dim 64/128, GQA groups 1/2/4/8 and key lengths
 * 1..3000 in shuffled paged block tables; its exp against libm; and bitwise batch
 * invariance: a token's output alone, inside a batch of other sequences' tokens,
 * and on 1..3 threads (split or not split over key chunks) is the same, and so is
 * its output inside a span (tokens of its sequence at consecutive positions, which
 * go through each key chunk together: a prefill chunk, a decode token and drafts).
 * The AVX-512 kernel gives the AVX2 kernel's bits. Every test but the exp's runs
 * twice: over a cache of float32 K/V and over one of halves (whose values the
 * float64 reference reads exactly); the op's f16 writes clamp to the half range and
 * round as rp_f32_to_fp16. The caches use the op's layout (K transposed inside each
 * block, cpu_int.h) with blocks of 16 tokens; the SIMD-against-scalar and span
 * tests also run with blocks of 32 (two key groups a block) and of 4 (not a whole
 * key group: the kernels gather K key by key).
 */
#include "test_util.h"

#include "backend/cpu/cpu_int.h"

#include <math.h>

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint32_t rng_u32(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

static float rng_uniform(void) // [-1, 1)
{
    return (float)rng_u32() / 2147483648.0f - 1.0f;
}

static double nerr(const float *a, const double *b, size_t n)
{
    double e = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        e += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        s += b[i] * b[i];
    }
    return sqrt(e / (s > 0 ? s : 1));
}

static bool have_simd(void)
{
    return rp_cpu_force_simd("avx2");
}

/*
 * One paged cache holding n_seq sequences of random K/V (blocks handed out in
 * shuffled order) and a query token at any position of any sequence.
 */
static int BS = 16;                     // tokens per block of the caches the tests make
static rp_dtype kv_type = RP_DTYPE_F32; // and their type (both set by the setups)

static int use(rp_dtype type, int block_size)
{
    kv_type = type;
    BS = block_size;
    return 0;
}

static int setup_f32(void **state)
{
    return use(RP_DTYPE_F32, 16);
}

static int setup_f16(void **state)
{
    return use(RP_DTYPE_F16, 16);
}

static int setup_f32_bs32(void **state)
{
    return use(RP_DTYPE_F32, 32);
}

static int setup_f16_bs4(void **state)
{
    return use(RP_DTYPE_F16, 4);
}

typedef struct cache {
    int n_seq, n_kv, hd, n_head;
    int len[4];
    int32_t *bt[4];
    float *k, *v;        // (n_blocks, BS, n_kv, hd): the values (each a half's when kv_type is f16)
    float *kop;          // k in the op's layout (rp_kv_k_index): the op's K when kv_type is f32
    uint16_t *k16, *v16; // the same as halves in the op's layout, its cache when kv_type is f16
} cache;

// Index in the op's K array of element i (of n_kv * hd) of slot's row.
static size_t k_index(const cache *c, size_t slot, size_t i)
{
    return rp_cpu_kv_k_index(slot, (int)(i / (size_t)c->hd), (int)(i % (size_t)c->hd), c->n_kv, c->hd, BS);
}

static void cache_init(cache *c, int n_seq, const int *len, int n_kv, int group, int hd, float kscale)
{
    *c = (cache){.n_seq = n_seq, .n_kv = n_kv, .hd = hd, .n_head = n_kv * group};
    int n_blocks = 0;
    for (int s = 0; s < n_seq; s++) {
        c->len[s] = len[s];
        n_blocks += (len[s] + BS - 1) / BS;
    }
    int32_t *perm = malloc(sizeof(int32_t) * (size_t)n_blocks);
    for (int i = 0; i < n_blocks; i++)
        perm[i] = i;
    for (int i = n_blocks - 1; i > 0; i--) {
        int r = (int)(rng_u32() % (uint32_t)(i + 1));
        int32_t x = perm[i];
        perm[i] = perm[r];
        perm[r] = x;
    }
    int next = 0;
    for (int s = 0; s < n_seq; s++) {
        int nb = (len[s] + BS - 1) / BS;
        c->bt[s] = malloc(sizeof(int32_t) * (size_t)nb);
        for (int b = 0; b < nb; b++)
            c->bt[s][b] = perm[next++];
    }
    free(perm);
    size_t n = (size_t)n_blocks * BS * n_kv * hd;
    c->k = malloc(n * sizeof(float));
    c->v = malloc(n * sizeof(float));
    c->kop = malloc(n * sizeof(float));
    c->k16 = malloc(n * sizeof(uint16_t));
    c->v16 = malloc(n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) {
        c->k[i] = rng_uniform() * kscale;
        c->v[i] = rng_uniform();
        c->k16[i] = rp_f32_to_fp16(c->k[i]);
        c->v16[i] = rp_f32_to_fp16(c->v[i]);
        if (kv_type == RP_DTYPE_F16) {
            c->k[i] = rp_fp16_to_f32(c->k16[i]);
            c->v[i] = rp_fp16_to_f32(c->v16[i]);
        }
    }
    size_t w = (size_t)n_kv * hd;
    for (size_t i = 0; i < n; i++) // K in the op's layout, as float32 and as halves
        c->kop[k_index(c, i / w, i % w)] = c->k[i];
    for (size_t i = 0; i < n; i++)
        c->k16[i] = rp_f32_to_fp16(c->kop[i]);
}

static void cache_deinit(cache *c)
{
    for (int s = 0; s < c->n_seq; s++)
        free(c->bt[s]);
    free(c->k);
    free(c->v);
    free(c->kop);
    free(c->k16);
    free(c->v16);
}

static int32_t cache_slot(const cache *c, int seq, int pos)
{
    return c->bt[seq][pos / BS] * BS + pos % BS;
}

// A batch of query tokens (seq, pos) with random queries; k/v inputs are the rows
// already in the cache, so the op's write leaves it unchanged.
typedef struct batch {
    int n;
    int32_t pos[128], slot[128];
    int32_t seq[128];
    float *q, *k, *v; // (n, n_head*hd), (n, n_kv*hd) x 2
} batch;

static void batch_init(batch *b, const cache *c, int n, const int *seq, const int *pos, const float *q)
{
    size_t w = (size_t)c->n_kv * c->hd, qw = (size_t)c->n_head * c->hd;
    b->n = n;
    b->q = malloc(sizeof(float) * qw * (size_t)n);
    b->k = malloc(sizeof(float) * w * (size_t)n);
    b->v = malloc(sizeof(float) * w * (size_t)n);
    for (int t = 0; t < n; t++) {
        b->seq[t] = seq[t];
        b->pos[t] = pos[t];
        b->slot[t] = cache_slot(c, seq[t], pos[t]);
        memcpy(b->k + t * w, c->k + (size_t)b->slot[t] * w, w * sizeof(float));
        memcpy(b->v + t * w, c->v + (size_t)b->slot[t] * w, w * sizeof(float));
        if (q)
            memcpy(b->q + t * qw, q + t * qw, qw * sizeof(float));
        else
            for (size_t i = 0; i < qw; i++)
                b->q[t * qw + i] = rng_uniform();
    }
}

static void batch_deinit(batch *b)
{
    free(b->q);
    free(b->k);
    free(b->v);
}

static void run_attn(rp_backend *be, cache *c, const batch *b, float *out)
{
    rp_kv_layer kv = {.k = c->kop, .v = c->v, .type = RP_DTYPE_F32};
    if (kv_type == RP_DTYPE_F16)
        kv = (rp_kv_layer){.k = c->k16, .v = c->v16, .type = RP_DTYPE_F16};
    int total = 0, start[5] = {0};
    for (int s = 0; s < c->n_seq; s++)
        start[s + 1] = (total += (c->len[s] + BS - 1) / BS);
    int32_t *bt = malloc(sizeof(int32_t) * (size_t)(total + 1));
    for (int s = 0; s < c->n_seq; s++)
        memcpy(bt + start[s], c->bt[s], sizeof(int32_t) * (size_t)(start[s + 1] - start[s]));
    rp_batch_desc d = {.n_tokens = b->n,
                       .pos = b->pos,
                       .slot = b->slot,
                       .seq = b->seq,
                       .n_seqs = c->n_seq,
                       .bt_start = start,
                       .bt = bt,
                       .block_size = BS};
    float scale = 1.0f / sqrtf((float)c->hd);
    assert_int_equal(rp_backend_begin_batch(be, &d), RP_OK);
    assert_int_equal(rp_backend_attention(be, b->q, b->k, b->v, &kv, c->n_head, c->n_kv, c->hd, scale, out), RP_OK);
    free(bt);
}

// out (n_head*hd) of token t in float64.
static void ref_attn(const cache *c, const batch *b, int t, double *out)
{
    int hd = c->hd, group = c->n_head / c->n_kv, len = b->pos[t] + 1;
    size_t w = (size_t)c->n_kv * hd;
    double scale = 1.0 / sqrt((double)hd);
    double *s = malloc(sizeof(double) * (size_t)len);
    for (int h = 0; h < c->n_head; h++) {
        const float *q = b->q + ((size_t)t * c->n_head + h) * hd;
        int kvh = h / group;
        double mx = -INFINITY, sum = 0;
        for (int p = 0; p < len; p++) {
            const float *k = c->k + (size_t)cache_slot(c, b->seq[t], p) * w + (size_t)kvh * hd;
            double d = 0;
            for (int i = 0; i < hd; i++)
                d += (double)q[i] * k[i];
            s[p] = d * scale;
            mx = s[p] > mx ? s[p] : mx;
        }
        for (int p = 0; p < len; p++)
            sum += s[p] = exp(s[p] - mx);
        double *o = out + (size_t)h * hd;
        for (int i = 0; i < hd; i++)
            o[i] = 0;
        for (int p = 0; p < len; p++) {
            const float *v = c->v + (size_t)cache_slot(c, b->seq[t], p) * w + (size_t)kvh * hd;
            for (int i = 0; i < hd; i++)
                o[i] += s[p] / sum * v[i];
        }
    }
    free(s);
}

static void test_exp(void **state)
{
    (void)state;
    if (!have_simd()) {
        print_message("no AVX2: skipped\n");
        return;
    }
    rp_cpu_force_scalar(false);
    enum { N = 1 << 16 };
    float *x = malloc(N * sizeof(float)), *y = malloc(N * sizeof(float));
    for (int i = 0; i < N; i++)
        x[i] = -87.0f * (float)i / (N - 1);
    x[0] = 0.0f;
    x[1] = -0.0f;
    rp_cpu_attn_exp_avx2(x, y, N);
    double worst = 0;
    for (int i = 0; i < N; i++) {
        double ref = exp((double)x[i]);
        double ulp = ldexp(1.0, ilogb(ref) - 23);
        double e = fabs(y[i] - ref) / ulp;
        worst = e > worst ? e : worst;
    }
    assert_true(y[0] == 1.0f && y[1] == 1.0f);
    assert_true(worst < 2.0);
    float lo[8] = {-87.5f, -100.0f, -1e30f, -INFINITY, -88.0f, -87.0f, -20.0f, -1e-8f}, ylo[8];
    rp_cpu_attn_exp_avx2(lo, ylo, 8);
    for (int i = 0; i < 5; i++)
        assert_true(ylo[i] == 0.0f);
    assert_true(ylo[5] > 0 && fabs(ylo[5] - exp(-87.0)) / exp(-87.0) < 1e-6);
    assert_true(fabsf(ylo[7] - 1.0f) <= 1.2e-7f);
    print_message("exp: worst %.2f ulp over [-87, 0]\n", worst);
    free(x);
    free(y);
}

// A K or V value in a cache of halves: clamped to the largest finite half, then rounded.
static uint16_t f16_bits(float f)
{
    float c = f > 65504.0f ? 65504.0f : f < -65504.0f ? -65504.0f : f;
    return rp_f32_to_fp16(c);
}

// The conversion the op writes a cache of halves with: F16C's bits are the scalar
// code's (rp_cpu_kv_half) for every float but NaN (random bit patterns, the rounding
// ties and edges of the half range, subnormals, infinities and values past the range,
// which become ±65504); NaN stays NaN. Then the op itself, at every level, stores
// rounded rows: its cache is those bits.
static void test_f16_store(void **state)
{
    (void)state;
    if (have_simd()) {
        enum { N = 1 << 20 };
        float *x = malloc(N * sizeof(float));
        uint16_t *y = malloc(N * sizeof(uint16_t));
        static const uint32_t edges[] = {
            0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x477fe000, 0x477fefff, 0x477ff000, 0x477fffff,
            0x47800000, 0x38800000, 0x387fffff, 0x33000000, 0x33000001, 0x32ffffff, 0x33800000, 0x3f801000,
            0x3f803000, 0x3f800fff, 0x3f801001, 0x00000001, 0x387fe000, 0x38000000, 0xc77ff000, 0x3c000000};
        int ne = (int)(sizeof(edges) / sizeof(edges[0]));
        for (int i = 0; i < N; i++) {
            uint32_t u = i < ne ? edges[i] : rng_u32() ^ (rng_u32() << 16);
            if (i >= ne && i % 3 == 0) // most in or near the half range, where rounding happens
                u = (u & 0x80000000u) | (0x30000000u + u % 0x18000000u);
            memcpy(&x[i], &u, 4);
        }
        for (int n = 0; n <= 17; n++) { // lengths around the vector width: the scalar tail
            rp_cpu_f32_to_f16_avx2(x + ne, y, n);
            for (int i = 0; i < n; i++)
                if (!isnan(x[ne + i]))
                    assert_int_equal(y[i], f16_bits(x[ne + i]));
        }
        rp_cpu_f32_to_f16_avx2(x, y, N);
        int nan = 0;
        for (int i = 0; i < N; i++) {
            if (isnan(x[i])) {
                assert_true(isnan(rp_fp16_to_f32(y[i])));
                nan++;
            } else if (y[i] != f16_bits(x[i])) {
                uint32_t u;
                memcpy(&u, &x[i], 4);
                fail_msg("%08x (%g): F16C %04x, scalar %04x", u, x[i], y[i], f16_bits(x[i]));
            }
        }
        assert_true(nan > 0);
        // Past the half range: the largest finite half, never infinity.
        float big[8] = {1e6f, -1e6f, INFINITY, -INFINITY, 65519.0f, 65520.0f, -70000.0f, 65504.0f};
        rp_cpu_f32_to_f16_avx2(big, y, 8);
        static const uint16_t want[8] = {0x7bff, 0xfbff, 0x7bff, 0xfbff, 0x7bff, 0x7bff, 0xfbff, 0x7bff};
        for (int i = 0; i < 8; i++) {
            assert_int_equal(y[i], want[i]);
            assert_int_equal(rp_cpu_kv_half(big[i]), want[i]);
        }
        free(x);
        free(y);
    }
    // The op: rows that are not halves go into the cache rounded.
    kv_type = RP_DTYPE_F16;
    rp_backend *be;
    assert_int_equal(rp_backend_open("cpu", &(rp_backend_params){.n_threads = 2}, &be), RP_OK);
    for (int level = 0; level < 3; level++) {
        if (level == 0)
            rp_cpu_force_scalar(true);
        else if (!rp_cpu_force_simd(level == 1 ? "avx2" : "avx512"))
            continue;
        cache c;
        int len[1] = {40};
        cache_init(&c, 1, len, 2, 2, 64, 1.0f);
        int seq[3] = {0, 0, 0}, pos[3] = {37, 38, 39};
        batch b;
        batch_init(&b, &c, 3, seq, pos, NULL);
        size_t w = (size_t)c.n_kv * c.hd;
        for (size_t i = 0; i < 3 * w; i++) {
            b.k[i] = rng_uniform() * 3.0f;
            b.v[i] = rng_uniform() * 1e-5f; // subnormal halves among them
        }
        b.k[5] = 1e6f; // past the half range: clamped, at every level
        b.v[w + 3] = -INFINITY;
        float *o = malloc(sizeof(float) * (size_t)c.n_head * c.hd * 3);
        run_attn(be, &c, &b, o);
        for (int t = 0; t < 3; t++)
            for (size_t i = 0; i < w; i++) {
                assert_int_equal(c.k16[k_index(&c, (size_t)b.slot[t], i)], f16_bits(b.k[t * w + i]));
                assert_int_equal(c.v16[(size_t)b.slot[t] * w + i], f16_bits(b.v[t * w + i]));
            }
        free(o);
        batch_deinit(&b);
        cache_deinit(&c);
        rp_cpu_force_scalar(false);
    }
    if (!rp_cpu_force_simd("avx512"))
        rp_cpu_force_simd("avx2");
    rp_backend_destroy(be);
}

// SIMD vs scalar vs float64 over shapes, lengths and query positions.
static void test_simd_vs_scalar(void **state)
{
    (void)state;
    if (!have_simd()) {
        print_message("no AVX2: skipped\n");
        return;
    }
    rp_backend *be;
    assert_int_equal(rp_backend_open("cpu", &(rp_backend_params){.n_threads = 2}, &be), RP_OK);
    static const int hds[] = {64, 128}, groups[] = {1, 2, 4, 8};
    static const int lens[] = {1, 2, 7, 127, 128, 129, 300, 1000, 3000};
    double worst_simd = 0, worst_scalar = 0;
    for (int ih = 0; ih < 2; ih++)
        for (int ig = 0; ig < 4; ig++)
            for (int il = 0; il < 9; il++) {
                int hd = hds[ih], group = groups[ig], len = lens[il];
                // large key scale once in a while: peaked softmax, many exp underflows
                float kscale = il % 3 == 2 ? 8.0f : 1.0f;
                cache c;
                int lens2[2] = {len, 1 + (int)(rng_u32() % 400)};
                cache_init(&c, 2, lens2, 2, group, hd, kscale);
                int seq[8], pos[8], n = 0;
                int cand[] = {0, 1, len / 2, 127, 128, 255, 256, len - 2, len - 1};
                for (int i = 0; i < 9 && n < 6; i++)
                    if (cand[i] >= 0 && cand[i] < len) {
                        seq[n] = 0;
                        pos[n++] = cand[i];
                    }
                seq[n] = 1;
                pos[n++] = lens2[1] - 1;
                batch b;
                batch_init(&b, &c, n, seq, pos, NULL);
                size_t qw = (size_t)c.n_head * hd;
                float *o_simd = malloc(sizeof(float) * qw * n), *o_scalar = malloc(sizeof(float) * qw * n);
                double *ref = malloc(sizeof(double) * qw);
                assert_true(rp_cpu_force_simd("avx2"));
                run_attn(be, &c, &b, o_simd);
                if (rp_cpu_force_simd("avx512")) { // the same bits as AVX2
                    float *o512 = malloc(sizeof(float) * qw * n);
                    run_attn(be, &c, &b, o512);
                    assert_memory_equal(o512, o_simd, sizeof(float) * qw * n);
                    free(o512);
                }
                rp_cpu_force_scalar(true);
                run_attn(be, &c, &b, o_scalar);
                rp_cpu_force_scalar(false);
                for (int t = 0; t < n; t++) {
                    ref_attn(&c, &b, t, ref);
                    double es = nerr(o_simd + t * qw, ref, qw), er = nerr(o_scalar + t * qw, ref, qw);
                    double rel = 0, sn = 0;
                    for (size_t i = 0; i < qw; i++) {
                        double d = (double)o_simd[t * qw + i] - o_scalar[t * qw + i];
                        rel += d * d;
                        sn += (double)o_scalar[t * qw + i] * o_scalar[t * qw + i];
                    }
                    rel = sqrt(rel / sn);
                    // a SIMD score is one FMA chain over head_dim (the reference sums eight
                    // lanes): up to ~2e-6 against float64 where the scalar code has ~1.5e-6
                    if (es > 3e-6 || rel > 1e-5)
                        print_message("hd %d group %d len %d pos %d: simd %.2e scalar %.2e simd-vs-scalar %.2e\n", hd,
                                      group, len, b.pos[t], es, er, rel);
                    assert_true(es < 3e-6);
                    assert_true(rel < 1e-5);
                    worst_simd = es > worst_simd ? es : worst_simd;
                    worst_scalar = er > worst_scalar ? er : worst_scalar;
                }
                free(o_simd);
                free(o_scalar);
                free(ref);
                batch_deinit(&b);
                cache_deinit(&c);
            }
    print_message("normalized error vs float64: simd %.2e, scalar %.2e\n", worst_simd, worst_scalar);
    rp_backend_destroy(be);
}

// A head_dim the SIMD path does not take (not a multiple of 64) runs the scalar
// reference: bitwise the forced-scalar result.
static void test_fallback(void **state)
{
    (void)state;
    rp_backend *be;
    assert_int_equal(rp_backend_open("cpu", &(rp_backend_params){.n_threads = 2}, &be), RP_OK);
    cache c;
    int len[1] = {200};
    cache_init(&c, 1, len, 2, 2, 80, 1.0f);
    int seq[3] = {0, 0, 0}, pos[3] = {0, 99, 199};
    batch b;
    batch_init(&b, &c, 3, seq, pos, NULL);
    size_t nout = (size_t)3 * c.n_head * c.hd;
    float *o1 = malloc(sizeof(float) * nout), *o2 = malloc(sizeof(float) * nout);
    run_attn(be, &c, &b, o1);
    rp_cpu_force_scalar(true);
    run_attn(be, &c, &b, o2);
    rp_cpu_force_scalar(false);
    assert_memory_equal(o1, o2, nout * sizeof(float));
    free(o1);
    free(o2);
    batch_deinit(&b);
    cache_deinit(&c);
    rp_backend_destroy(be);
}

// Bitwise: each token alone (a decode step: split over key chunks when long), all
// tokens together in one batch (a prefill: one item per token and kv head), in
// reverse order, on 1, 2 and 3 threads.
static void test_batch_invariance(void **state)
{
    (void)state;
    if (!have_simd()) {
        print_message("no AVX2: skipped\n");
        return;
    }
    rp_cpu_force_scalar(false);
    static const int groups[] = {1, 3, 8};
    for (int ig = 0; ig < 3; ig++) {
        int group = groups[ig], hd = ig == 1 ? 128 : 64;
        cache c;
        int lens[3] = {2100, 130, 700};
        cache_init(&c, 3, lens, 2, group, hd, 2.0f);
        enum { N = 24 };
        int seq[N], pos[N];
        for (int t = 0; t < N; t++) {
            seq[t] = t % 3;
            pos[t] = t < 3 ? lens[t] - 1 : (int)(rng_u32() % (uint32_t)lens[t % 3]);
        }
        batch all;
        batch_init(&all, &c, N, seq, pos, NULL);
        size_t qw = (size_t)c.n_head * hd;
        float *ref = malloc(sizeof(float) * qw * N), *o = malloc(sizeof(float) * qw * N);
        for (int nth = 1; nth <= 3; nth++) {
            rp_backend *be;
            assert_int_equal(rp_backend_open("cpu", &(rp_backend_params){.n_threads = nth}, &be), RP_OK);
            run_attn(be, &c, &all, o);
            if (nth == 1)
                memcpy(ref, o, sizeof(float) * qw * N);
            else
                assert_memory_equal(o, ref, sizeof(float) * qw * N);
            for (int t = 0; t < N; t++) { // alone
                batch one;
                batch_init(&one, &c, 1, seq + t, pos + t, all.q + t * qw);
                run_attn(be, &c, &one, o);
                assert_memory_equal(o, ref + t * qw, sizeof(float) * qw);
                batch_deinit(&one);
            }
            // reversed, in pairs (two tokens: still split)
            int rseq[N], rpos[N];
            float *rq = malloc(sizeof(float) * qw * N);
            for (int t = 0; t < N; t++) {
                rseq[t] = seq[N - 1 - t];
                rpos[t] = pos[N - 1 - t];
                memcpy(rq + t * qw, all.q + (N - 1 - t) * qw, sizeof(float) * qw);
            }
            for (int t = 0; t < N; t += 2) {
                batch two;
                batch_init(&two, &c, 2, rseq + t, rpos + t, rq + t * qw);
                run_attn(be, &c, &two, o);
                assert_memory_equal(o, ref + (N - 1 - t) * qw, sizeof(float) * qw);
                assert_memory_equal(o + qw, ref + (N - 2 - t) * qw, sizeof(float) * qw);
                batch_deinit(&two);
            }
            free(rq);
            rp_backend_destroy(be);
        }
        free(ref);
        free(o);
        batch_deinit(&all);
        cache_deinit(&c);
    }
}

// Spans: runs of one sequence's tokens at consecutive positions (from a prefill at
// position 0 longer than one span holds, a verification step's 17 tokens across a
// chunk boundary, two sequences' runs back to back, a run interrupted by another
// sequence's token, a verification step of 33 tokens at the end of a long sequence)
// against each token alone, bitwise, on 1, 2, 3 and 8 threads (on 2 a span's two KV
// heads share the threads evenly and are not split over key chunks; on 3 and 8 they
// are, and on 3 the verification steps' merges run on the pool by row blocks); and
// against the float64 reference.
static void test_spans(void **state)
{
    (void)state;
    if (!have_simd()) {
        print_message("no AVX2: skipped\n");
        return;
    }
    rp_cpu_force_scalar(false);
    static const int groups[] = {1, 3, 8};
    for (int ig = 0; ig < 3; ig++) {
        int group = groups[ig], hd = ig == 1 ? 128 : 64;
        cache c;
        int lens[2] = {700, 300};
        cache_init(&c, 2, lens, 2, group, hd, 2.0f);
        enum { N = 128 }; // (a batch's most)
        int seq[N], pos[N], n = 0;
        for (int p = 0; p < 37; p++) // a prefill from position 0: three spans (13 + 12 + 12)
            seq[n] = 0, pos[n++] = p;
        for (int p = 120; p < 137; p++) // a decode token and 16 drafts across the chunk boundary at 128
            seq[n] = 1, pos[n++] = p;
        seq[n] = 0, pos[n++] = 500; // another sequence's token, then a run interrupted by it
        for (int p = 250; p < 255; p++)
            seq[n] = 1, pos[n++] = p;
        seq[n] = 0, pos[n++] = 640;
        for (int p = 255; p < 258; p++)
            seq[n] = 1, pos[n++] = p;
        for (int p = 666; p < 699; p++) // 33 tokens at the end of a long sequence: one span
            seq[n] = 0, pos[n++] = p;
        assert_true(n <= N);
        batch all;
        batch_init(&all, &c, n, seq, pos, NULL);
        size_t qw = (size_t)c.n_head * hd;
        float *o = malloc(sizeof(float) * qw * n), *one_o = malloc(sizeof(float) * qw);
        double *ref = malloc(sizeof(double) * qw);
        static const int nths[] = {1, 2, 3, 8};
        for (int in = 0; in < 4; in++) {
            int nth = nths[in];
            rp_backend *be;
            assert_int_equal(rp_backend_open("cpu", &(rp_backend_params){.n_threads = nth}, &be), RP_OK);
            run_attn(be, &c, &all, o);
            for (int t = 0; t < n; t++) {
                batch one;
                batch_init(&one, &c, 1, seq + t, pos + t, all.q + t * qw);
                run_attn(be, &c, &one, one_o);
                if (memcmp(one_o, o + t * qw, sizeof(float) * qw) != 0)
                    fail_msg("group %d, %d threads: token %d (seq %d pos %d) differs in its span", group, nth, t,
                             seq[t], pos[t]);
                batch_deinit(&one);
                if (nth == 1) {
                    ref_attn(&c, &all, t, ref);
                    assert_true(nerr(o + t * qw, ref, qw) < 1e-6);
                }
            }
            // the AVX-512 kernel gives the AVX2 kernel's bits
            if (rp_cpu_force_simd("avx512")) {
                float *o2 = malloc(sizeof(float) * qw * n);
                assert_true(rp_cpu_force_simd("avx2"));
                run_attn(be, &c, &all, o2);
                rp_cpu_force_scalar(false);
                assert_memory_equal(o2, o, sizeof(float) * qw * n);
                free(o2);
            } else if (nth == 1 && ig == 0) {
                print_message("no AVX-512: its kernel not compared\n");
            }
            // the verification span alone, and the run at the end of the long sequence alone
            // (one span each: split over its key chunks on 3 and 8 threads, merged by row
            // blocks when there are enough rows x chunks)
            const int first[2] = {37, n - 33}, count[2] = {17, 33};
            for (int k = 0; k < 2; k++) {
                batch ver;
                batch_init(&ver, &c, count[k], seq + first[k], pos + first[k], all.q + first[k] * qw);
                float *vo = malloc(sizeof(float) * qw * count[k]);
                run_attn(be, &c, &ver, vo);
                assert_memory_equal(vo, o + first[k] * qw, sizeof(float) * qw * count[k]);
                free(vo);
                batch_deinit(&ver);
            }
            rp_backend_destroy(be);
        }
        free(o);
        free(one_o);
        free(ref);
        batch_deinit(&all);
        cache_deinit(&c);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exp),
        cmocka_unit_test(test_f16_store),
        cmocka_unit_test_setup(test_simd_vs_scalar, setup_f32),
        cmocka_unit_test_setup(test_simd_vs_scalar, setup_f16),
        cmocka_unit_test_setup(test_fallback, setup_f32),
        cmocka_unit_test_setup(test_fallback, setup_f16),
        cmocka_unit_test_setup(test_batch_invariance, setup_f32),
        cmocka_unit_test_setup(test_batch_invariance, setup_f16),
        cmocka_unit_test_setup(test_spans, setup_f32),
        cmocka_unit_test_setup(test_spans, setup_f16),
        cmocka_unit_test_setup(test_simd_vs_scalar, setup_f32_bs32),
        cmocka_unit_test_setup(test_simd_vs_scalar, setup_f16_bs4),
        cmocka_unit_test_setup(test_spans, setup_f32_bs32),
        cmocka_unit_test_setup(test_spans, setup_f16_bs4),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
