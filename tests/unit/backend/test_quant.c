/*
 * test_quant.c - GGML block formats: quantize/dequantize round trips, hand-built
 * blocks, the reference quantizers' exact output, bad arguments, and conformance
 * with llama.cpp's own dequantization of the shared GGUF files (and, where a file
 * was quantized from the f32 one, byte equality of our quantizers with llama-quantize).
 */
#include "test_util.h"

#include "quant/quant.h"
#include "gguf/gguf.h"

#include <jansson.h>
#include <math.h>

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

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

static void fill_normal(float *x, int64_t n, float scale)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = rng_normal() * scale;
}

// sqrt(Σ(a-b)²) / sqrt(Σb²)
static double rel_rmse(const float *a, const float *b, int64_t n)
{
    double e = 0, s = 0;
    for (int64_t i = 0; i < n; i++) {
        e += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        s += (double)b[i] * b[i];
    }
    return s > 0 ? sqrt(e / s) : sqrt(e);
}

/* ---- round trips ---- */

typedef struct rt_case {
    rp_dtype type;
    double max_err; // relative RMS error bound on N(0,1) data
} rt_case;

static void test_round_trip(void **state)
{
    (void)state;
    const rt_case cases[] = {
        {RP_DTYPE_F32, 0.0},    {RP_DTYPE_F16, 1e-3},   {RP_DTYPE_BF16, 4e-3},  {RP_DTYPE_Q8_0, 0.01},
        {RP_DTYPE_Q4_0, 0.13},  {RP_DTYPE_Q5_0, 0.065}, {RP_DTYPE_Q4_K, 0.10},  {RP_DTYPE_Q5_K, 0.05},
        {RP_DTYPE_Q6_K, 0.025}, {RP_DTYPE_Q8_K, 0.01},
    };
    const int64_t n = 4096;
    float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
    void *q = malloc(n * 4);
    fill_normal(x, n, 1.0f);
    x[5] = 7.5f; // an outlier block
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        size_t bytes;
        assert_true(rp_dtype_row_bytes(cases[c].type, n, &bytes));
        assert_true(rp_quantize_supported(cases[c].type));
        assert_int_equal(rp_quantize(cases[c].type, x, q, n), RP_OK);
        rp_dequantize(cases[c].type, q, y, n);
        double err = rel_rmse(y, x, n);
        if (err > cases[c].max_err)
            fail_msg("%s: round-trip error %g > %g", rp_dtype_name(cases[c].type), err, cases[c].max_err);
    }
    // all-zero input stays zero (no NaN from a zero scale)
    memset(x, 0, n * sizeof(float));
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        assert_int_equal(rp_quantize(cases[c].type, x, q, n), RP_OK);
        rp_dequantize(cases[c].type, q, y, n);
        for (int64_t i = 0; i < n; i++)
            assert_true(y[i] == 0.0f);
    }
    free(x);
    free(y);
    free(q);
}

/* ---- hand-built blocks ---- */

static void test_dequant_q8_0_q4_0_q5_0(void **state)
{
    (void)state;
    float y[32];
    rp_block_q8_0 b8 = {.d = 0x3800}; // 0.5
    for (int j = 0; j < 32; j++)
        b8.qs[j] = (int8_t)(j * 8 - 128);
    rp_dequantize(RP_DTYPE_Q8_0, &b8, y, 32);
    for (int j = 0; j < 32; j++)
        assert_true(y[j] == (float)(j * 8 - 128) * 0.5f);

    rp_block_q4_0 b4 = {.d = 0x4000}; // 2.0
    for (int j = 0; j < 16; j++)
        b4.qs[j] = (uint8_t)(j | ((15 - j) << 4));
    rp_dequantize(RP_DTYPE_Q4_0, &b4, y, 32);
    for (int j = 0; j < 16; j++) {
        assert_true(y[j] == (float)(j - 8) * 2.0f);
        assert_true(y[j + 16] == (float)(7 - j) * 2.0f);
    }

    // Q5_0: element e has 5-bit value (e * 7) % 32, stored low nibble in qs and bit 4 in qh bit e
    rp_block_q5_0 b5 = {.d = 0xBC00}; // -1.0
    uint32_t qh = 0;
    for (int e = 0; e < 32; e++) {
        int v = (e * 7) % 32;
        if (e < 16)
            b5.qs[e] |= (uint8_t)(v & 0xF);
        else
            b5.qs[e - 16] |= (uint8_t)((v & 0xF) << 4);
        qh |= (uint32_t)(v >> 4) << e;
    }
    memcpy(b5.qh, &qh, 4);
    rp_dequantize(RP_DTYPE_Q5_0, &b5, y, 32);
    for (int e = 0; e < 32; e++)
        assert_true(y[e] == (float)((e * 7) % 32 - 16) * -1.0f);
}

// Packs 6-bit scales and mins the way the K-quant format stores them.
static void pack_k4_scales(const int sc[8], const int m[8], uint8_t out[12])
{
    memset(out, 0, 12);
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            out[j] = (uint8_t)sc[j];
            out[j + 4] = (uint8_t)m[j];
        } else {
            out[j + 4] = (uint8_t)((sc[j] & 0xF) | ((m[j] & 0xF) << 4));
            out[j - 4] |= (uint8_t)((sc[j] >> 4) << 6);
            out[j] |= (uint8_t)((m[j] >> 4) << 6);
        }
    }
}

static void test_dequant_k(void **state)
{
    (void)state;
    const int sc[8] = {1, 63, 17, 40, 33, 2, 63, 50};
    const int mn[8] = {0, 5, 63, 31, 48, 16, 1, 62};
    float y[256];
    uint8_t s12[12];
    pack_k4_scales(sc, mn, s12);
    for (int j = 0; j < 8; j++) {
        uint8_t a, b;
        rp_q4k_scale_min(j, s12, &a, &b);
        assert_int_equal(a, sc[j]);
        assert_int_equal(b, mn[j]);
    }

    // Q4_K: element e in sub-block j = e/32 has value q(e) = (e*5+3) % 16
    rp_block_q4_K b4;
    memset(&b4, 0, sizeof(b4));
    b4.d = 0x3400;    // 0.25
    b4.dmin = 0x3000; // 0.125
    memcpy(b4.scales, s12, 12);
    for (int e = 0; e < 256; e++) {
        int q = (e * 5 + 3) % 16, chunk = e / 64, l = e % 32;
        b4.qs[32 * chunk + l] |= (uint8_t)((e % 64) < 32 ? q : q << 4);
    }
    rp_dequantize(RP_DTYPE_Q4_K, &b4, y, 256);
    for (int e = 0; e < 256; e++) {
        int j = e / 32, q = (e * 5 + 3) % 16;
        float want = 0.25f * sc[j] * q - 0.125f * mn[j];
        assert_float_equal(y[e], want, 1e-6);
    }

    // Q5_K: 5-bit value q(e) = (e*11+1) % 32, bit 4 in qh[e%32] bit (e/32)
    rp_block_q5_K b5;
    memset(&b5, 0, sizeof(b5));
    b5.d = 0x3400;
    b5.dmin = 0x3000;
    memcpy(b5.scales, s12, 12);
    for (int e = 0; e < 256; e++) {
        int q = (e * 11 + 1) % 32, chunk = e / 64, l = e % 32;
        b5.qs[32 * chunk + l] |= (uint8_t)((e % 64) < 32 ? (q & 0xF) : (q & 0xF) << 4);
        b5.qh[l] |= (uint8_t)((q >> 4) << (e / 32));
    }
    rp_dequantize(RP_DTYPE_Q5_K, &b5, y, 256);
    for (int e = 0; e < 256; e++) {
        int j = e / 32, q = (e * 11 + 1) % 32;
        assert_float_equal(y[e], 0.25f * sc[j] * q - 0.125f * mn[j], 1e-6);
    }

    // Q6_K: 6-bit q(e) = (e*13+7) % 64, value d * scales[e/16] * (q - 32)
    rp_block_q6_K b6;
    memset(&b6, 0, sizeof(b6));
    b6.d = 0x2C00; // 0.0625
    for (int j = 0; j < 16; j++)
        b6.scales[j] = (int8_t)(j * 17 - 128);
    for (int e = 0; e < 256; e++) {
        int q = (e * 13 + 7) % 64, half = e / 128, k = (e % 128) / 32, l = e % 32;
        // k = 0: ql[l] low, 1: ql[l+32] low, 2: ql[l] high, 3: ql[l+32] high; qh[l] bits 2k..2k+1
        uint8_t *ql = b6.ql + 64 * half + l + (k & 1) * 32;
        *ql |= (uint8_t)(k < 2 ? (q & 0xF) : (q & 0xF) << 4);
        b6.qh[32 * half + l] |= (uint8_t)((q >> 4) << (2 * k));
    }
    rp_dequantize(RP_DTYPE_Q6_K, &b6, y, 256);
    for (int e = 0; e < 256; e++) {
        int q = (e * 13 + 7) % 64;
        assert_float_equal(y[e], 0.0625f * b6.scales[e / 16] * (q - 32), 1e-6);
    }
}

static void test_quantize_exact(void **state)
{
    (void)state;
    float x[32];
    // Q8_0: d = amax/127, q = roundf(x/d)
    for (int j = 0; j < 32; j++)
        x[j] = (float)(j - 16) * 0.25f;
    rp_block_q8_0 b8;
    assert_int_equal(rp_quantize(RP_DTYPE_Q8_0, x, &b8, 32), RP_OK);
    float d = 4.0f / 127;
    assert_int_equal(b8.d, rp_f32_to_fp16(d));
    for (int j = 0; j < 32; j++)
        assert_int_equal(b8.qs[j], (int)roundf(x[j] * (1.0f / d)));
    assert_int_equal(b8.qs[0], -127);

    // Q4_0: the largest magnitude (-8) maps to nibble 0 with d = 1; x + 8 elsewhere
    for (int j = 0; j < 32; j++)
        x[j] = (float)((j % 16) - 8);
    rp_block_q4_0 b4;
    assert_int_equal(rp_quantize(RP_DTYPE_Q4_0, x, &b4, 32), RP_OK);
    assert_int_equal(b4.d, 0x3C00);
    for (int j = 0; j < 16; j++)
        assert_int_equal(b4.qs[j], j | (j << 4));

    // Q5_0: a positive maximum gives a negative scale: 16 -> q 0 with d = -1
    for (int j = 0; j < 32; j++)
        x[j] = (float)(16 - j);
    rp_block_q5_0 b5;
    assert_int_equal(rp_quantize(RP_DTYPE_Q5_0, x, &b5, 32), RP_OK);
    assert_int_equal(b5.d, 0xBC00);
    float y[32];
    rp_dequantize(RP_DTYPE_Q5_0, &b5, y, 32);
    for (int j = 0; j < 32; j++)
        assert_true(y[j] == x[j]); // 16 - j: all representable

    // Q8_K: bsums are the per-16 sums, d the signed-max scale
    float xk[256];
    fill_normal(xk, 256, 2.0f);
    rp_block_q8_K bk;
    assert_int_equal(rp_quantize(RP_DTYPE_Q8_K, xk, &bk, 256), RP_OK);
    for (int j = 0; j < 16; j++) {
        int s = 0;
        for (int l = 0; l < 16; l++)
            s += bk.qs[16 * j + l];
        assert_int_equal(bk.bsums[j], s);
    }
}

static void test_invalid(void **state)
{
    (void)state;
    float x[64] = {0};
    uint8_t q[256];
    assert_int_equal(rp_quantize(RP_DTYPE_Q8_0, x, q, 33), RP_ERR_INVALID);
    assert_int_equal(rp_quantize(RP_DTYPE_Q4_K, x, q, 64), RP_ERR_INVALID);
    assert_int_equal(rp_quantize(RP_DTYPE_Q4_0, x, q, -32), RP_ERR_INVALID);
    assert_int_equal(rp_quantize((rp_dtype)3, x, q, 32), RP_ERR_UNSUPPORTED); // Q4_1: not ours
    assert_int_equal(rp_quantize((rp_dtype)99, x, q, 32), RP_ERR_UNSUPPORTED);
    assert_false(rp_quantize_supported((rp_dtype)3));
    assert_true(strlen(rp_error_message()) > 0);
    assert_int_equal(rp_quantize(RP_DTYPE_Q8_0, NULL, q, 32), RP_ERR_INVALID);
    assert_int_equal(rp_quantize(RP_DTYPE_Q8_0, x, q, 0), RP_OK);
}

/* ---- conformance with llama.cpp ---- */

static rp_dtype dtype_from_name(const char *s)
{
    for (int t = 0; t < RP_DTYPE_COUNT; t++)
        if (rp_dtype_valid(t) && strcasecmp(rp_dtype_name((rp_dtype)t), s) == 0)
            return (rp_dtype)t;
    return RP_DTYPE_COUNT;
}

static int check_model_dequant(const char *dir, const char *model)
{
    char path[8192];
    snprintf(path, sizeof(path), "%s/gguf/%s/reference.json", dir, model);
    json_error_t jerr;
    json_t *ref = json_load_file(path, 0, &jerr);
    if (!ref)
        fail_msg("%s: %s", path, jerr.text);
    json_t *by_type = json_object_get(json_object_get(ref, "llama_cpp"), "by_type");
    assert_non_null(by_type);
    int checked = 0;
    const char *tname;
    json_t *entry;
    json_object_foreach(by_type, tname, entry)
    {
        const char *file = json_string_value(json_object_get(entry, "file"));
        json_t *deq = json_object_get(entry, "dequant");
        if (!file || !deq)
            continue;
        snprintf(path, sizeof(path), "%s/gguf/%s/%s", dir, model, file);
        rp_gguf *g = NULL;
        if (rp_gguf_open(path, &g) != RP_OK)
            fail_msg("%s: %s", path, rp_error_message());
        const char *tensor;
        json_t *want;
        json_object_foreach(deq, tensor, want)
        {
            const rp_gguf_tensor *t = rp_gguf_find_tensor(g, tensor);
            if (!t)
                fail_msg("%s: no tensor %s", path, tensor);
            rp_dtype wt = dtype_from_name(json_string_value(json_object_get(want, "type")));
            assert_int_equal(t->type, wt);
            int64_t n = json_integer_value(json_object_get(want, "n"));
            assert_true(n > 0 && n % rp_dtype_block(t->type) == 0);
            float *y = malloc((size_t)n * sizeof(float));
            rp_dequantize(t->type, t->data, y, n);
            json_t *first = json_object_get(want, "first32");
            for (size_t i = 0; i < json_array_size(first); i++) {
                double w = json_number_value(json_array_get(first, i));
                if (fabs(y[i] - w) > 1e-6 * fabs(w) + 1e-30)
                    fail_msg("%s %s %s[%zu]: %.9g, llama.cpp %.9g", model, tname, tensor, i, y[i], w);
            }
            double sum = 0, sumsq = 0;
            for (int64_t i = 0; i < n; i++) {
                sum += y[i];
                sumsq += (double)y[i] * y[i];
            }
            double ws = json_number_value(json_object_get(want, "sum"));
            double wq = json_number_value(json_object_get(want, "sumsq"));
            // the sum cancels: bound its error by the magnitude of the terms (sqrt of n·sumsq)
            if (fabs(sum - ws) > 1e-5 * fabs(ws) + 1e-9 * sqrt((double)n * wq))
                fail_msg("%s %s %s: sum %.12g, llama.cpp %.12g", model, tname, tensor, sum, ws);
            if (fabs(sumsq - wq) > 1e-5 * fabs(wq))
                fail_msg("%s %s %s: sumsq %.12g, llama.cpp %.12g", model, tname, tensor, sumsq, wq);
            free(y);
            checked++;
        }
        rp_gguf_close(g);
    }
    json_decref(ref);
    return checked;
}

static void test_conformance_dequant(void **state)
{
    (void)state;
    RP_TEST_NEED_CONFORMANCE(dir);
    const char *models[] = {"qwen2", "llama-spm", "llama3-bpe"};
    int checked = 0;
    for (size_t i = 0; i < sizeof(models) / sizeof(models[0]); i++)
        checked += check_model_dequant(dir, models[i]);
    assert_true(checked >= 3 * 8 * 4);
}

// Quantizes each tensor of the f32 file into the type llama-quantize chose for it in
// the quantized files and reports how many come out byte-identical.
static void test_conformance_requantize(void **state)
{
    (void)state;
    RP_TEST_NEED_CONFORMANCE(dir);
    const char *files[] = {"Q8_0", "Q4_0", "Q5_0", "Q4_K_M", "Q5_K_M", "Q6_K"};
    char path[8192];
    snprintf(path, sizeof(path), "%s/gguf/qwen2/qwen2-f32.gguf", dir);
    rp_gguf *src = NULL;
    if (rp_gguf_open(path, &src) != RP_OK)
        fail_msg("%s: %s", path, rp_error_message());
    int per_type_total[RP_DTYPE_COUNT] = {0}, per_type_same[RP_DTYPE_COUNT] = {0};
    for (size_t f = 0; f < sizeof(files) / sizeof(files[0]); f++) {
        snprintf(path, sizeof(path), "%s/gguf/qwen2/qwen2-%s.gguf", dir, files[f]);
        rp_gguf *g = NULL;
        if (rp_gguf_open(path, &g) != RP_OK)
            fail_msg("%s: %s", path, rp_error_message());
        for (int64_t i = 0; i < rp_gguf_n_tensors(g); i++) {
            const rp_gguf_tensor *t = rp_gguf_tensor_at(g, i);
            const rp_gguf_tensor *s = rp_gguf_find_tensor(src, t->name);
            if (!rp_dtype_is_quant(t->type) || !s || s->type != RP_DTYPE_F32)
                continue;
            int64_t n = s->size / sizeof(float);
            void *q = malloc(t->size);
            assert_int_equal(rp_quantize(t->type, s->data, q, n), RP_OK);
            per_type_total[t->type]++;
            if (memcmp(q, t->data, t->size) == 0)
                per_type_same[t->type]++;
            free(q);
        }
        rp_gguf_close(g);
    }
    rp_gguf_close(src);
    for (int t = 0; t < RP_DTYPE_COUNT; t++)
        if (per_type_total[t])
            print_message("requantize %s: %d/%d tensors byte-identical to llama-quantize\n",
                          rp_dtype_name((rp_dtype)t), per_type_same[t], per_type_total[t]);
    // Our quantizers follow ggml's reference ones operation for operation: every tensor must match.
    int total = 0;
    for (int t = 0; t < RP_DTYPE_COUNT; t++) {
        assert_int_equal(per_type_same[t], per_type_total[t]);
        total += per_type_total[t];
    }
    assert_true(total >= 6 * 12);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_dequant_q8_0_q4_0_q5_0),
        cmocka_unit_test(test_dequant_k),
        cmocka_unit_test(test_quantize_exact),
        cmocka_unit_test(test_invalid),
        cmocka_unit_test(test_conformance_dequant),
        cmocka_unit_test(test_conformance_requantize),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
