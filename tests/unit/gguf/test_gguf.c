/*
 * test_gguf.c - the GGUF reader and writer: round trips, every real file of the
 * conformance set, and corrupt files.
 *
 * Corrupt files are a feature: whatever the bytes, rp_gguf_open must return one
 * non-zero status whose message names the file, and never crash or leak (this
 * suite also runs under ASan+UBSan). Files are built with the writer or a small
 * byte builder (for fields the writer would refuse to produce), then truncated at
 * every byte, flipped byte by byte, or crafted with hostile counts and lengths.
 */
#define RP_TEST_TMP_PREFIX "rp-gguf"
#include "test_tmp.h"

#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <strings.h>
#include <unistd.h>

#include "gguf/gguf.h"

static uint8_t *read_file(const char *path, size_t *n)
{
    char *p;
    assert_int_equal(rp_file_read(path, &p, n), RP_OK);
    return (uint8_t *)p;
}

// Opening `path` must fail with `want` (or any error when want == RP_OK), leave
// *out NULL and give a message naming the file. Returns the status.
static rp_status expect_fail(const char *path, rp_status want)
{
    rp_gguf *g = (rp_gguf *)&g;
    rp_error_clear();
    rp_status st = rp_gguf_open(path, &g);
    if (st == RP_OK)
        rp_gguf_close(g);
    if (st == RP_OK || (want != RP_OK && st != want))
        fail_msg("%s: expected %s, got %s (%s)", path, rp_status_name(want), rp_status_name(st), rp_error_message());
    assert_null(g);
    if (!strstr(rp_error_message(), path))
        fail_msg("error message does not name the file %s: '%s'", path, rp_error_message());
    if (getenv("RP_TEST_VERBOSE"))
        print_message("%s: %s\n", rp_status_name(st), rp_error_message());
    return st;
}

// Opening must either succeed or fail cleanly with a message naming the file.
static void expect_clean(const char *path)
{
    rp_gguf *g = NULL;
    rp_error_clear();
    rp_status st = rp_gguf_open(path, &g);
    if (st == RP_OK) {
        // Touch every tensor so a bad pointer would show under ASan.
        volatile uint8_t sink = 0;
        for (int64_t i = 0; i < rp_gguf_n_tensors(g); i++) {
            const rp_gguf_tensor *t = rp_gguf_tensor_at(g, i);
            if (t->size)
                sink ^= ((const uint8_t *)t->data)[0] ^ ((const uint8_t *)t->data)[t->size - 1];
        }
        (void)sink;
        rp_gguf_close(g);
        return;
    }
    assert_null(g);
    if (!strstr(rp_error_message(), path))
        fail_msg("error message does not name the file %s: '%s'", path, rp_error_message());
}

/* ---- a byte builder for crafted headers ---- */

typedef struct buf {
    uint8_t *p;
    size_t n, cap;
} buf;

static void b_put(buf *b, const void *s, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = rp_realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
}
static void b_u32(buf *b, uint32_t v)
{
    b_put(b, &v, 4);
}
static void b_u64(buf *b, uint64_t v)
{
    b_put(b, &v, 8);
}
static void b_str(buf *b, const char *s)
{
    b_u64(b, strlen(s));
    b_put(b, s, strlen(s));
}
static void b_pad(buf *b, size_t a)
{
    static const uint8_t z[64];
    while (b->n % a)
        b_put(b, z, 1);
}
static void b_head(buf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
    b->n = 0;
    b_put(b, "GGUF", 4);
    b_u32(b, version);
    b_u64(b, n_tensors);
    b_u64(b, n_kv);
}
// One tensor info: name, dims, type, offset.
static void b_tensor(buf *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t off)
{
    b_str(b, name);
    b_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++)
        b_u64(b, ne[d]);
    b_u32(b, type);
    b_u64(b, off);
}
// Pads to 32 and appends n zero bytes of data.
static void b_data(buf *b, size_t n)
{
    b_pad(b, 32);
    uint8_t z[256] = {0};
    while (n) {
        size_t k = n < sizeof(z) ? n : sizeof(z);
        b_put(b, z, k);
        n -= k;
    }
}

static rp_status crafted_fails(const char *name, buf *b, rp_status want)
{
    const char *path = rp_test_tmp_path(name);
    rp_test_write_file(path, b->p, b->n);
    return expect_fail(path, want);
}

/* ---- a small valid file from the writer ---- */

static const float f32_data[6] = {1.5f, -2.0f, 3.25f, 0.0f, -0.5f, 1e-3f};

// Writes a file with a few keys and tensors of several types to `path`.
static void write_small(const char *path, uint32_t alignment)
{
    rp_gguf_writer *w;
    assert_int_equal(rp_gguf_writer_create(&w), RP_OK);
    assert_int_equal(rp_gguf_writer_add_str(w, "general.architecture", "llama"), RP_OK);
    if (alignment)
        assert_int_equal(rp_gguf_writer_add_u32(w, "general.alignment", alignment), RP_OK);
    const char *toks[] = {"<s>", "</s>", "hello", ""};
    assert_int_equal(rp_gguf_writer_add_str_arr(w, "tokenizer.ggml.tokens", toks, 4), RP_OK);
    int32_t types[] = {3, 3, 1, 1};
    assert_int_equal(rp_gguf_writer_add_arr(w, "tokenizer.ggml.token_type", RP_GGUF_INT32, types, 4), RP_OK);
    assert_int_equal(rp_gguf_writer_add_u32(w, "llama.block_count", 2), RP_OK);
    int64_t ne_a[] = {3, 2};
    assert_int_equal(rp_gguf_writer_add_tensor(w, "a.weight", RP_DTYPE_F32, 2, ne_a, f32_data), RP_OK);
    uint8_t q[18 * 2];
    for (size_t i = 0; i < sizeof(q); i++)
        q[i] = (uint8_t)(i * 7 + 1);
    int64_t ne_b[] = {32, 2};
    assert_int_equal(rp_gguf_writer_add_tensor(w, "b.weight", RP_DTYPE_Q4_0, 2, ne_b, q), RP_OK);
    uint16_t h[5] = {0x3c00, 0x4000, 0xbc00, 0, 0x7bff};
    int64_t ne_c[] = {5};
    assert_int_equal(rp_gguf_writer_add_tensor(w, "c.bias", RP_DTYPE_F16, 1, ne_c, h), RP_OK);
    assert_int_equal(rp_gguf_writer_write(w, path), RP_OK);
    rp_gguf_writer_destroy(w);
}

/* ---- tests ---- */

static void test_roundtrip(void **state)
{
    (void)state;
    const char *path = rp_test_tmp_path("roundtrip.gguf");
    rp_gguf_writer *w;
    assert_int_equal(rp_gguf_writer_create(&w), RP_OK);
    // One key of every scalar type.
    uint8_t u8 = 200;
    int8_t i8 = -100;
    uint16_t u16 = 60000;
    int16_t i16 = -30000;
    uint64_t u64 = (uint64_t)1 << 62;
    int64_t i64 = -((int64_t)1 << 50);
    double f64 = 3.141592653589793;
    assert_int_equal(rp_gguf_writer_add_val(w, "k.u8", RP_GGUF_UINT8, &u8), RP_OK);
    assert_int_equal(rp_gguf_writer_add_val(w, "k.i8", RP_GGUF_INT8, &i8), RP_OK);
    assert_int_equal(rp_gguf_writer_add_val(w, "k.u16", RP_GGUF_UINT16, &u16), RP_OK);
    assert_int_equal(rp_gguf_writer_add_val(w, "k.i16", RP_GGUF_INT16, &i16), RP_OK);
    assert_int_equal(rp_gguf_writer_add_u32(w, "k.u32", 4000000000u), RP_OK);
    assert_int_equal(rp_gguf_writer_add_i32(w, "k.i32", -2000000000), RP_OK);
    assert_int_equal(rp_gguf_writer_add_f32(w, "k.f32", 0.25f), RP_OK);
    assert_int_equal(rp_gguf_writer_add_bool(w, "k.bool", true), RP_OK);
    assert_int_equal(rp_gguf_writer_add_str(w, "k.str", "héllo wörld"), RP_OK);
    assert_int_equal(rp_gguf_writer_add_str(w, "k.empty", ""), RP_OK);
    assert_int_equal(rp_gguf_writer_add_val(w, "k.u64", RP_GGUF_UINT64, &u64), RP_OK);
    assert_int_equal(rp_gguf_writer_add_val(w, "k.i64", RP_GGUF_INT64, &i64), RP_OK);
    assert_int_equal(rp_gguf_writer_add_val(w, "k.f64", RP_GGUF_FLOAT64, &f64), RP_OK);
    // Arrays of every element type.
    uint8_t a_u8[] = {1, 2, 255};
    int8_t a_i8[] = {-1, 0, 127};
    uint16_t a_u16[] = {1, 65535};
    int16_t a_i16[] = {-32768, 5};
    uint32_t a_u32[] = {7, 8, 9, 10};
    int32_t a_i32[] = {-7, 8};
    float a_f32[] = {0.5f, -1.0f, 2.0f};
    uint8_t a_bool[] = {1, 0, 1};
    uint64_t a_u64[] = {UINT64_MAX, 3};
    int64_t a_i64[] = {INT64_MIN, 4};
    double a_f64[] = {1e300, -2.5};
    assert_int_equal(rp_gguf_writer_add_arr(w, "a.u8", RP_GGUF_UINT8, a_u8, 3), RP_OK);
    assert_int_equal(rp_gguf_writer_add_arr(w, "a.i8", RP_GGUF_INT8, a_i8, 3), RP_OK);
    assert_int_equal(rp_gguf_writer_add_arr(w, "a.u16", RP_GGUF_UINT16, a_u16, 2), RP_OK);
    assert_int_equal(rp_gguf_writer_add_arr(w, "a.i16", RP_GGUF_INT16, a_i16, 2), RP_OK);
    assert_int_equal(rp_gguf_writer_add_arr(w, "a.u32", RP_GGUF_UINT32, a_u32, 4), RP_OK);
    assert_int_equal(rp_gguf_writer_add_arr(w, "a.i32", RP_GGUF_INT32, a_i32, 2), RP_OK);
    assert_int_equal(rp_gguf_writer_add_arr(w, "a.f32", RP_GGUF_FLOAT32, a_f32, 3), RP_OK);
    assert_int_equal(rp_gguf_writer_add_arr(w, "a.bool", RP_GGUF_BOOL, a_bool, 3), RP_OK);
    assert_int_equal(rp_gguf_writer_add_arr(w, "a.u64", RP_GGUF_UINT64, a_u64, 2), RP_OK);
    assert_int_equal(rp_gguf_writer_add_arr(w, "a.i64", RP_GGUF_INT64, a_i64, 2), RP_OK);
    assert_int_equal(rp_gguf_writer_add_arr(w, "a.f64", RP_GGUF_FLOAT64, a_f64, 2), RP_OK);
    assert_int_equal(rp_gguf_writer_add_arr(w, "a.empty", RP_GGUF_UINT32, NULL, 0), RP_OK);
    const char *strs[] = {"a", "", "ccc"};
    assert_int_equal(rp_gguf_writer_add_str_arr(w, "a.str", strs, 3), RP_OK);
    assert_int_equal(rp_gguf_writer_add_str_arr(w, "a.str_empty", NULL, 0), RP_OK);

    // Tensors of several types and ranks; data filled with a pattern.
    struct {
        const char *name;
        rp_dtype type;
        int n_dims;
        int64_t ne[4];
    } specs[] = {
        {"t.f32", RP_DTYPE_F32, 2, {3, 2}},           {"t.f16", RP_DTYPE_F16, 1, {7}},
        {"t.bf16", RP_DTYPE_BF16, 3, {4, 1, 2}},      {"t.q8_0", RP_DTYPE_Q8_0, 2, {64, 3}},
        {"t.q4_0", RP_DTYPE_Q4_0, 1, {32}},           {"t.q5_0", RP_DTYPE_Q5_0, 2, {32, 2}},
        {"t.q4_k", RP_DTYPE_Q4_K, 1, {256}},          {"t.q5_k", RP_DTYPE_Q5_K, 2, {256, 2}},
        {"t.q6_k", RP_DTYPE_Q6_K, 4, {256, 1, 1, 2}},
    };
    enum { NT = sizeof(specs) / sizeof(specs[0]) };
    uint8_t *datas[NT];
    size_t sizes[NT];
    for (int i = 0; i < NT; i++) {
        size_t row;
        assert_true(rp_dtype_row_bytes(specs[i].type, specs[i].ne[0], &row));
        sizes[i] = row;
        for (int d = 1; d < specs[i].n_dims; d++)
            sizes[i] *= (size_t)specs[i].ne[d];
        datas[i] = rp_malloc(sizes[i]);
        for (size_t j = 0; j < sizes[i]; j++)
            datas[i][j] = (uint8_t)(j * 31 + (size_t)i * 17);
        assert_int_equal(
            rp_gguf_writer_add_tensor(w, specs[i].name, specs[i].type, specs[i].n_dims, specs[i].ne, datas[i]), RP_OK);
    }
    assert_int_equal(rp_gguf_writer_write(w, path), RP_OK);
    rp_gguf_writer_destroy(w);

    rp_gguf *g;
    assert_int_equal(rp_gguf_open(path, &g), RP_OK);
    assert_int_equal(rp_gguf_version(g), 3);
    assert_string_equal(rp_gguf_path(g), path);
    assert_int_equal(rp_gguf_n_keys(g), 13 + 14);
    int64_t iv;
    double dv;
    bool bv;
    size_t len;
    assert_true(rp_gguf_get_int(g, "k.u8", &iv) && iv == 200);
    assert_true(rp_gguf_get_int(g, "k.i8", &iv) && iv == -100);
    assert_true(rp_gguf_get_int(g, "k.u16", &iv) && iv == 60000);
    assert_true(rp_gguf_get_int(g, "k.i16", &iv) && iv == -30000);
    assert_true(rp_gguf_get_int(g, "k.u32", &iv) && iv == 4000000000LL);
    assert_true(rp_gguf_get_int(g, "k.i32", &iv) && iv == -2000000000LL);
    assert_true(rp_gguf_get_int(g, "k.u64", &iv) && iv == (int64_t)1 << 62);
    assert_true(rp_gguf_get_int(g, "k.i64", &iv) && iv == -((int64_t)1 << 50));
    assert_false(rp_gguf_get_int(g, "k.f32", &iv));
    assert_false(rp_gguf_get_int(g, "k.bool", &iv));
    assert_false(rp_gguf_get_int(g, "k.missing", &iv));
    assert_true(rp_gguf_get_float(g, "k.f32", &dv) && dv == 0.25);
    assert_true(rp_gguf_get_float(g, "k.f64", &dv) && dv == f64);
    assert_true(rp_gguf_get_float(g, "k.i32", &dv) && dv == -2000000000.0);
    assert_true(rp_gguf_get_bool(g, "k.bool", &bv) && bv);
    assert_false(rp_gguf_get_bool(g, "k.u8", &bv));
    const char *s = rp_gguf_get_str(g, "k.str", &len);
    assert_non_null(s);
    assert_int_equal(len, strlen("héllo wörld"));
    assert_memory_equal(s, "héllo wörld", len);
    assert_non_null(rp_gguf_get_str(g, "k.empty", &len));
    assert_int_equal(len, 0);
    assert_null(rp_gguf_get_str(g, "k.u8", &len));
    assert_int_equal(rp_gguf_key_type(g, rp_gguf_find_key(g, "k.u16")), RP_GGUF_UINT16);
    assert_int_equal(rp_gguf_key_type(g, rp_gguf_find_key(g, "k.i64")), RP_GGUF_INT64);
    assert_string_equal(rp_gguf_key_name(g, 0), "k.u8");
    assert_int_equal(rp_gguf_find_key(g, "nope"), -1);

    rp_gguf_type et;
    uint64_t n;
    assert_true(rp_gguf_get_arr(g, "a.u8", &et, &n) && et == RP_GGUF_UINT8 && n == 3);
    assert_int_equal(rp_gguf_arr_int(g, "a.u8", 2), 255);
    assert_int_equal(rp_gguf_arr_int(g, "a.i8", 0), -1);
    assert_int_equal(rp_gguf_arr_int(g, "a.u16", 1), 65535);
    assert_int_equal(rp_gguf_arr_int(g, "a.i16", 0), -32768);
    assert_int_equal(rp_gguf_arr_int(g, "a.u32", 3), 10);
    assert_int_equal(rp_gguf_arr_int(g, "a.i32", 0), -7);
    assert_true(rp_gguf_arr_float(g, "a.f32", 1) == -1.0);
    assert_int_equal(rp_gguf_arr_int(g, "a.bool", 2), 1);
    assert_int_equal(rp_gguf_arr_int(g, "a.u64", 1), 3);
    assert_int_equal(rp_gguf_arr_int(g, "a.u64", 0), 0); // UINT64_MAX does not fit: 0
    assert_true(rp_gguf_arr_int(g, "a.i64", 0) == INT64_MIN);
    assert_true(rp_gguf_arr_float(g, "a.f64", 0) == 1e300);
    assert_true(rp_gguf_get_arr(g, "a.empty", &et, &n) && et == RP_GGUF_UINT32 && n == 0);
    assert_true(rp_gguf_get_arr(g, "a.str", &et, &n) && et == RP_GGUF_STRING && n == 3);
    assert_memory_equal(rp_gguf_arr_str(g, "a.str", 2, &len), "ccc", 3);
    assert_int_equal(len, 3);
    assert_non_null(rp_gguf_arr_str(g, "a.str", 1, &len));
    assert_int_equal(len, 0);
    assert_null(rp_gguf_arr_str(g, "a.str", 3, &len));
    assert_true(rp_gguf_get_arr(g, "a.str_empty", &et, &n) && n == 0);
    assert_false(rp_gguf_get_arr(g, "k.u8", &et, &n));

    assert_int_equal(rp_gguf_n_tensors(g), NT);
    const uint8_t *first = rp_gguf_tensor_at(g, 0)->data;
    for (int i = 0; i < NT; i++) {
        const rp_gguf_tensor *t = rp_gguf_tensor_at(g, i);
        assert_ptr_equal(t, rp_gguf_find_tensor(g, specs[i].name));
        assert_string_equal(t->name, specs[i].name);
        assert_int_equal(t->type, specs[i].type);
        assert_int_equal(t->n_dims, specs[i].n_dims);
        for (int d = 0; d < 4; d++)
            assert_int_equal(t->ne[d], d < specs[i].n_dims ? specs[i].ne[d] : 1);
        assert_int_equal(t->size, sizes[i]);
        assert_memory_equal(t->data, datas[i], sizes[i]);
        assert_int_equal(((const uint8_t *)t->data - first) % 32, 0);
        assert_int_equal((uintptr_t)t->data % 32, 0); // mappings are page-aligned and data starts aligned
        rp_free(datas[i]);
    }
    assert_null(rp_gguf_find_tensor(g, "t.nope"));
    assert_null(rp_gguf_tensor_at(g, NT));
    assert_null(rp_gguf_tensor_at(g, -1));
    rp_gguf_close(g);

    // The same bytes through rp_gguf_open_memory.
    size_t fsize;
    uint8_t *bytes = read_file(path, &fsize);
    assert_int_equal(rp_gguf_open_memory(bytes, fsize, "mem", &g), RP_OK);
    assert_int_equal(rp_gguf_n_tensors(g), NT);
    rp_gguf_close(g);
    rp_free(bytes);
}

static void test_alignment(void **state)
{
    (void)state;
    const char *path = rp_test_tmp_path("align64.gguf");
    write_small(path, 64);
    rp_gguf *g;
    assert_int_equal(rp_gguf_open(path, &g), RP_OK);
    int64_t a;
    assert_true(rp_gguf_get_int(g, "general.alignment", &a) && a == 64);
    for (int64_t i = 0; i < rp_gguf_n_tensors(g); i++)
        assert_int_equal((uintptr_t)rp_gguf_tensor_at(g, i)->data % 64, 0);
    assert_memory_equal(rp_gguf_find_tensor(g, "a.weight")->data, f32_data, sizeof(f32_data));
    rp_gguf_close(g);

    rp_gguf_writer *w;
    assert_int_equal(rp_gguf_writer_create(&w), RP_OK);
    assert_int_equal(rp_gguf_writer_add_u32(w, "general.alignment", 48), RP_ERR_INVALID);
    assert_int_equal(rp_gguf_writer_add_i32(w, "general.alignment", 64), RP_ERR_INVALID);
    assert_int_equal(rp_gguf_writer_add_u32(w, "general.alignment", 0), RP_ERR_INVALID);
    assert_int_equal(rp_gguf_writer_add_u32(w, "general.alignment", 1), RP_OK);
    int64_t ne[] = {3};
    assert_int_equal(rp_gguf_writer_add_tensor(w, "x", RP_DTYPE_F32, 1, ne, f32_data), RP_OK);
    assert_int_equal(rp_gguf_writer_add_tensor(w, "y", RP_DTYPE_F32, 1, ne, f32_data + 3), RP_OK);
    path = rp_test_tmp_path("align1.gguf");
    assert_int_equal(rp_gguf_writer_write(w, path), RP_OK);
    rp_gguf_writer_destroy(w);
    assert_int_equal(rp_gguf_open(path, &g), RP_OK);
    assert_ptr_equal((const uint8_t *)rp_gguf_find_tensor(g, "y")->data,
                     (const uint8_t *)rp_gguf_find_tensor(g, "x")->data + 12);
    rp_gguf_close(g);
}

static void test_writer_rejects(void **state)
{
    (void)state;
    rp_gguf_writer *w;
    assert_int_equal(rp_gguf_writer_create(&w), RP_OK);
    uint8_t zeros[1024] = {0};
    int64_t ne[4] = {32, 1, 1, 1};
    assert_int_equal(rp_gguf_writer_add_u32(w, "k", 1), RP_OK);
    assert_int_equal(rp_gguf_writer_add_u32(w, "k", 2), RP_ERR_INVALID);
    assert_int_equal(rp_gguf_writer_add_str(w, "", "x"), RP_ERR_INVALID);
    assert_int_equal(rp_gguf_writer_add_arr(w, "arr", RP_GGUF_STRING, zeros, 1), RP_ERR_INVALID);
    assert_int_equal(rp_gguf_writer_add_arr(w, "arr", RP_GGUF_ARRAY, zeros, 1), RP_ERR_INVALID);
    assert_int_equal(rp_gguf_writer_add_val(w, "v", RP_GGUF_STRING, zeros), RP_ERR_INVALID);
    assert_int_equal(rp_gguf_writer_add_tensor(w, "t", RP_DTYPE_Q4_0, 1, ne, zeros), RP_OK);
    assert_int_equal(rp_gguf_writer_add_tensor(w, "t", RP_DTYPE_Q4_0, 1, ne, zeros), RP_ERR_INVALID);
    assert_int_equal(rp_gguf_writer_add_tensor(w, "", RP_DTYPE_Q4_0, 1, ne, zeros), RP_ERR_INVALID);
    assert_int_equal(rp_gguf_writer_add_tensor(w, "u", RP_DTYPE_Q8_K, 1, (int64_t[]){256}, zeros), RP_ERR_INVALID);
    assert_int_equal(rp_gguf_writer_add_tensor(w, "u", (rp_dtype)3, 1, ne, zeros), RP_ERR_INVALID);
    assert_int_equal(rp_gguf_writer_add_tensor(w, "u", RP_DTYPE_F32, 0, ne, zeros), RP_ERR_INVALID);
    assert_int_equal(rp_gguf_writer_add_tensor(w, "u", RP_DTYPE_F32, 5, ne, zeros), RP_ERR_INVALID);
    assert_int_equal(rp_gguf_writer_add_tensor(w, "u", RP_DTYPE_F32, 2, (int64_t[]){4, 0}, zeros), RP_ERR_INVALID);
    assert_int_equal(rp_gguf_writer_add_tensor(w, "u", RP_DTYPE_Q4_0, 1, (int64_t[]){33}, zeros), RP_ERR_INVALID);
    assert_int_equal(rp_gguf_writer_write(w, rp_test_tmp_path("no/such/dir/x.gguf")), RP_ERR_IO);
    assert_non_null(strstr(rp_error_message(), "no/such/dir/x.gguf"));
    const char *path = rp_test_tmp_path("rejects.gguf");
    assert_int_equal(rp_gguf_writer_write(w, path), RP_OK);
    rp_gguf_writer_destroy(w);
    rp_gguf *g;
    assert_int_equal(rp_gguf_open(path, &g), RP_OK);
    assert_int_equal(rp_gguf_n_keys(g), 1);
    assert_int_equal(rp_gguf_n_tensors(g), 1);
    rp_gguf_close(g);
}

// Out of memory at every allocation of writing and reading: a clean NOMEM, no leak.
static void test_oom(void **state)
{
    (void)state;
    const char *path = rp_test_tmp_path("oom.gguf");
    int ok_at = -1;
    for (int n = 0; n < 200 && ok_at < 0; n++) {
        rp_gguf_writer *w = NULL;
        rp_alloc_fail_after(n, false);
        rp_status st = rp_gguf_writer_create(&w);
        int64_t ne[] = {3, 2};
        const char *toks[] = {"a", "b"};
        if (!st)
            st = rp_gguf_writer_add_str(w, "s", "v");
        if (!st)
            st = rp_gguf_writer_add_str_arr(w, "sa", toks, 2);
        if (!st)
            st = rp_gguf_writer_add_tensor(w, "t", RP_DTYPE_F32, 2, ne, f32_data);
        if (!st)
            st = rp_gguf_writer_write(w, path);
        rp_alloc_fail_after(-1, false);
        rp_gguf_writer_destroy(w);
        if (st == RP_OK)
            ok_at = n;
        else
            assert_int_equal(st, RP_ERR_NOMEM);
    }
    assert_true(ok_at > 0);
    write_small(path, 0);
    ok_at = -1;
    for (int n = 0; n < 200 && ok_at < 0; n++) {
        rp_gguf *g = NULL;
        rp_alloc_fail_after(n, false);
        rp_status st = rp_gguf_open(path, &g);
        rp_alloc_fail_after(-1, false);
        if (st == RP_OK) {
            ok_at = n;
            rp_gguf_close(g);
        } else {
            assert_int_equal(st, RP_ERR_NOMEM);
            assert_null(g);
            assert_non_null(strstr(rp_error_message(), path));
        }
    }
    assert_true(ok_at > 0);
}

// Every prefix of a small file: fails cleanly until all tensor data is present.
static void test_truncate_every_byte(void **state)
{
    (void)state;
    const char *src = rp_test_tmp_path("small.gguf");
    write_small(src, 0);
    size_t size;
    uint8_t *bytes = read_file(src, &size);
    rp_gguf *g;
    assert_int_equal(rp_gguf_open_memory(bytes, size, "small", &g), RP_OK);
    const rp_gguf_tensor *last = rp_gguf_find_tensor(g, "c.bias");
    size_t need = (size_t)((const uint8_t *)last->data - bytes) + last->size;
    rp_gguf_close(g);
    assert_true(need <= size);
    const char *path = rp_test_tmp_path("trunc.gguf");
    rp_test_write_file(path, bytes, size);
    for (size_t len = size; len-- > 0;) {
        assert_int_equal(truncate(path, (off_t)len), 0);
        if (len < need)
            expect_fail(path, RP_OK);
        else
            expect_clean(path);
        // The same prefix in an exact-size heap buffer: ASan sees any over-read.
        uint8_t *copy = rp_malloc(len ? len : 1);
        memcpy(copy, bytes, len);
        rp_status st = rp_gguf_open_memory(copy, len, "mem", &g);
        if (st == RP_OK)
            rp_gguf_close(g);
        assert_true(len < need ? st != RP_OK : true);
        rp_free(copy);
    }
    rp_free(bytes);
}

// Every header byte of a small file, flipped three ways: success or a clean error.
static void test_flip_every_header_byte(void **state)
{
    (void)state;
    const char *src = rp_test_tmp_path("small2.gguf");
    write_small(src, 0);
    size_t size;
    uint8_t *bytes = read_file(src, &size);
    rp_gguf *g;
    assert_int_equal(rp_gguf_open_memory(bytes, size, "small", &g), RP_OK);
    size_t hdr = (size_t)((const uint8_t *)rp_gguf_tensor_at(g, 0)->data - bytes);
    rp_gguf_close(g);
    const char *path = rp_test_tmp_path("flip.gguf");
    static const uint8_t xors[] = {0xff, 0x01, 0x80, 0x7f};
    int failures = 0;
    for (size_t i = 0; i < hdr; i++)
        for (size_t k = 0; k < sizeof(xors); k++) {
            bytes[i] ^= xors[k];
            rp_test_write_file(path, bytes, size);
            rp_gguf *gg = NULL;
            rp_status st = rp_gguf_open(path, &gg);
            if (st == RP_OK) {
                rp_gguf_close(gg);
            } else {
                failures++;
                assert_null(gg);
                if (!strstr(rp_error_message(), path))
                    fail_msg("byte %zu ^ %02x: message does not name the file: '%s'", i, xors[k], rp_error_message());
            }
            uint8_t *copy = rp_malloc(size);
            memcpy(copy, bytes, size);
            if (rp_gguf_open_memory(copy, size, "mem", &gg) == RP_OK)
                rp_gguf_close(gg);
            rp_free(copy);
            bytes[i] ^= xors[k];
        }
    assert_true(failures > 0);
    rp_free(bytes);
}

static void test_crafted_headers(void **state)
{
    (void)state;
    buf b = {0};
    const uint64_t huge = (uint64_t)1 << 62;
    uint64_t ne2[] = {4, 2};

    // Empty, tiny, bad magic, versions.
    crafted_fails("empty.gguf", &b, RP_ERR_INVALID);
    b_put(&b, "GGU", 3);
    crafted_fails("tiny.gguf", &b, RP_ERR_INVALID);
    b_head(&b, 3, 0, 0);
    memcpy(b.p, "GGML", 4);
    crafted_fails("magic.gguf", &b, RP_ERR_INVALID);
    b_head(&b, 1, 0, 0);
    crafted_fails("v1.gguf", &b, RP_ERR_UNSUPPORTED);
    b_head(&b, 4, 0, 0);
    crafted_fails("v4.gguf", &b, RP_ERR_UNSUPPORTED);
    b_head(&b, 0x03000000, 0, 0);
    crafted_fails("bigendian.gguf", &b, RP_ERR_UNSUPPORTED);
    assert_non_null(strstr(rp_error_message(), "big-endian"));
    b_head(&b, 3, 0, 0);
    b.n = 20;
    crafted_fails("short_header.gguf", &b, RP_ERR_INVALID);

    // An empty but valid file (no keys, no tensors) opens.
    b_head(&b, 3, 0, 0);
    rp_test_write_file(rp_test_tmp_path("nothing.gguf"), b.p, b.n);
    rp_gguf *g;
    assert_int_equal(rp_gguf_open(rp_test_tmp_path("nothing.gguf"), &g), RP_OK);
    assert_int_equal(rp_gguf_n_tensors(g), 0);
    rp_gguf_close(g);

    // Huge counts.
    b_head(&b, 3, huge, 0);
    crafted_fails("n_tensors_huge.gguf", &b, RP_ERR_INVALID);
    b_head(&b, 3, 0, huge);
    crafted_fails("n_kv_huge.gguf", &b, RP_ERR_INVALID);
    b_head(&b, 3, UINT64_MAX, UINT64_MAX);
    crafted_fails("counts_max.gguf", &b, RP_ERR_INVALID);
    b_head(&b, 3, 0, 2); // claims 2 keys, holds 1
    b_str(&b, "a");
    b_u32(&b, RP_GGUF_UINT32);
    b_u32(&b, 1);
    b_data(&b, 64);
    crafted_fails("n_kv_short.gguf", &b, RP_ERR_INVALID);

    // Hostile lengths.
    b_head(&b, 3, 0, 1);
    b_u64(&b, (uint64_t)1 << 63);
    b_put(&b, "key", 3);
    crafted_fails("keylen_huge.gguf", &b, RP_ERR_INVALID);
    b_head(&b, 3, 0, 1);
    b_u64(&b, 0);
    b_u32(&b, RP_GGUF_UINT8);
    b_u32(&b, 0);
    crafted_fails("keylen_zero.gguf", &b, RP_ERR_INVALID);
    b_head(&b, 3, 0, 1);
    b_str(&b, "k");
    b_u32(&b, RP_GGUF_STRING);
    b_u64(&b, (uint64_t)1 << 63);
    b_put(&b, "abc", 3);
    crafted_fails("strlen_huge.gguf", &b, RP_ERR_INVALID);
    b_head(&b, 3, 0, 1);
    b_str(&b, "k");
    b_u32(&b, RP_GGUF_STRING);
    b_u64(&b, UINT64_MAX);
    crafted_fails("strlen_max.gguf", &b, RP_ERR_INVALID);
    uint32_t elem_types[] = {RP_GGUF_UINT8, RP_GGUF_UINT64, RP_GGUF_STRING, RP_GGUF_FLOAT64};
    for (size_t i = 0; i < 4; i++) {
        uint64_t counts[] = {huge, UINT64_MAX, ((uint64_t)1 << 40) + 1, 1000};
        for (size_t j = 0; j < 4; j++) {
            b_head(&b, 3, 0, 1);
            b_str(&b, "arr");
            b_u32(&b, RP_GGUF_ARRAY);
            b_u32(&b, elem_types[i]);
            b_u64(&b, counts[j]);
            b_u64(&b, 0);
            b_u64(&b, 0);
            char name[64];
            snprintf(name, sizeof(name), "arr_%zu_%zu.gguf", i, j);
            crafted_fails(name, &b, RP_ERR_INVALID);
        }
    }
    b_head(&b, 3, 0, 1);
    b_str(&b, "arr");
    b_u32(&b, RP_GGUF_ARRAY);
    b_u32(&b, RP_GGUF_ARRAY);
    b_u64(&b, 1);
    b_u32(&b, RP_GGUF_UINT8);
    b_u64(&b, 1);
    b_u64(&b, 0);
    crafted_fails("arr_of_arr.gguf", &b, RP_ERR_INVALID);
    b_head(&b, 3, 0, 1);
    b_str(&b, "arr");
    b_u32(&b, RP_GGUF_ARRAY);
    b_u32(&b, 99);
    b_u64(&b, 1);
    b_u64(&b, 0);
    crafted_fails("arr_bad_elem.gguf", &b, RP_ERR_INVALID);
    b_head(&b, 3, 0, 1);
    b_str(&b, "k");
    b_u32(&b, 13);
    b_u64(&b, 0);
    crafted_fails("kv_bad_type.gguf", &b, RP_ERR_INVALID);
    b_head(&b, 3, 0, 1);
    b_str(&b, "k");
    b_u32(&b, 0xffffffffu);
    b_u64(&b, 0);
    crafted_fails("kv_type_max.gguf", &b, RP_ERR_INVALID);
    b_head(&b, 3, 0, 2);
    b_str(&b, "k");
    b_u32(&b, RP_GGUF_UINT8);
    b_put(&b, "\1", 1);
    b_str(&b, "k");
    b_u32(&b, RP_GGUF_UINT8);
    b_put(&b, "\2", 1);
    b_u64(&b, 0);
    crafted_fails("dup_key.gguf", &b, RP_ERR_INVALID);
    assert_non_null(strstr(rp_error_message(), "duplicate"));

    // general.alignment of the wrong value or type.
    struct {
        uint32_t type;
        uint64_t val;
    } aligns[] = {{RP_GGUF_UINT32, 0}, {RP_GGUF_UINT32, 3},          {RP_GGUF_UINT32, 1u << 20},
                  {RP_GGUF_BOOL, 1},   {RP_GGUF_INT32, 0xffffffe0u}, {RP_GGUF_FLOAT32, 0x42000000}};
    for (size_t i = 0; i < sizeof(aligns) / sizeof(aligns[0]); i++) {
        b_head(&b, 3, 0, 1);
        b_str(&b, "general.alignment");
        b_u32(&b, aligns[i].type);
        b_put(&b, &aligns[i].val, aligns[i].type == RP_GGUF_BOOL ? 1 : 4);
        b_u64(&b, 0);
        char name[64];
        snprintf(name, sizeof(name), "align_%zu.gguf", i);
        crafted_fails(name, &b, RP_ERR_INVALID);
    }

    // Tensor infos.
    b_head(&b, 3, 1, 0);
    b_tensor(&b, "t", 0, NULL, RP_DTYPE_F32, 0);
    b_data(&b, 64);
    crafted_fails("ndims0.gguf", &b, RP_ERR_INVALID);
    uint64_t ne5[] = {1, 1, 1, 1, 1};
    b_head(&b, 3, 1, 0);
    b_tensor(&b, "t", 5, ne5, RP_DTYPE_F32, 0);
    b_data(&b, 64);
    crafted_fails("ndims5.gguf", &b, RP_ERR_INVALID);
    b_head(&b, 3, 1, 0);
    b_tensor(&b, "t", 2, (uint64_t[]){4, 0}, RP_DTYPE_F32, 0);
    b_data(&b, 64);
    crafted_fails("dim0.gguf", &b, RP_ERR_INVALID);
    b_head(&b, 3, 1, 0);
    b_tensor(&b, "t", 1, (uint64_t[]){(uint64_t)1 << 40}, RP_DTYPE_F32, 0);
    b_data(&b, 64);
    crafted_fails("dim2p40.gguf", &b, RP_ERR_INVALID);
    b_head(&b, 3, 1, 0);
    b_tensor(&b, "t", 1, (uint64_t[]){((uint64_t)1 << 40) + 1}, RP_DTYPE_F32, 0);
    b_data(&b, 64);
    crafted_fails("dim2p40p1.gguf", &b, RP_ERR_INVALID);
    b_head(&b, 3, 1, 0);
    b_tensor(&b, "t", 4, (uint64_t[]){1 << 20, 1 << 20, 1 << 20, 1 << 20}, RP_DTYPE_F32, 0);
    b_data(&b, 64);
    crafted_fails("dims_overflow.gguf", &b, RP_ERR_INVALID);
    b_head(&b, 3, 1, 0);
    b_tensor(&b, "t", 2, (uint64_t[]){UINT64_MAX, 2}, RP_DTYPE_F32, 0);
    b_data(&b, 64);
    crafted_fails("dim_max.gguf", &b, RP_ERR_INVALID);
    uint32_t bad_types[] = {3, 7, 15, 16, 29, 31, 99, 0xffffffffu};
    for (size_t i = 0; i < sizeof(bad_types) / sizeof(bad_types[0]); i++) {
        b_head(&b, 3, 1, 0);
        b_tensor(&b, "t", 1, (uint64_t[]){256}, bad_types[i], 0);
        b_data(&b, 2048);
        char name[64];
        snprintf(name, sizeof(name), "type_%u.gguf", bad_types[i]);
        crafted_fails(name, &b, RP_ERR_UNSUPPORTED);
    }
    b_head(&b, 3, 1, 0);
    b_tensor(&b, "t", 2, (uint64_t[]){33, 2}, RP_DTYPE_Q4_0, 0);
    b_data(&b, 2048);
    crafted_fails("row_not_blocks.gguf", &b, RP_ERR_INVALID);
    b_head(&b, 3, 1, 0);
    b_tensor(&b, "t", 1, (uint64_t[]){100}, RP_DTYPE_Q6_K, 0);
    b_data(&b, 2048);
    crafted_fails("row_not_kblocks.gguf", &b, RP_ERR_INVALID);
    b_head(&b, 3, 1, 0);
    b_tensor(&b, "t", 2, ne2, RP_DTYPE_F32, 4);
    b_data(&b, 64);
    crafted_fails("misaligned.gguf", &b, RP_ERR_INVALID);
    b_head(&b, 3, 1, 0);
    b_tensor(&b, "t", 2, ne2, RP_DTYPE_F32, 64);
    b_data(&b, 64);
    crafted_fails("offset_past_end.gguf", &b, RP_ERR_INVALID);
    b_head(&b, 3, 1, 0);
    b_tensor(&b, "t", 2, ne2, RP_DTYPE_F32, UINT64_MAX - 31);
    b_data(&b, 64);
    crafted_fails("offset_max.gguf", &b, RP_ERR_INVALID);
    b_head(&b, 3, 1, 0);
    b_tensor(&b, "t", 2, ne2, RP_DTYPE_F32, 0);
    b_data(&b, 31); // one byte short
    crafted_fails("data_short.gguf", &b, RP_ERR_INVALID);
    b_head(&b, 3, 1, 0);
    b_tensor(&b, "t", 2, ne2, RP_DTYPE_F32, 0);
    crafted_fails("no_data.gguf", &b, RP_ERR_INVALID);
    b_head(&b, 3, 2, 0);
    b_tensor(&b, "t", 2, ne2, RP_DTYPE_F32, 0);
    b_tensor(&b, "t", 2, ne2, RP_DTYPE_F32, 32);
    b_data(&b, 64);
    crafted_fails("dup_tensor.gguf", &b, RP_ERR_INVALID);
    assert_non_null(strstr(rp_error_message(), "duplicate"));
    b_head(&b, 3, 1, 0);
    b_tensor(&b, "", 2, ne2, RP_DTYPE_F32, 0);
    b_data(&b, 64);
    crafted_fails("empty_name.gguf", &b, RP_ERR_INVALID);
    b_head(&b, 3, 1, 0);
    b_u64(&b, (uint64_t)1 << 63);
    b_data(&b, 64);
    crafted_fails("name_huge.gguf", &b, RP_ERR_INVALID);
    b_head(&b, 3, 2, 0); // second tensor info missing
    b_tensor(&b, "t", 2, ne2, RP_DTYPE_F32, 0);
    crafted_fails("infos_short.gguf", &b, RP_ERR_INVALID);

    // The crafted valid counterpart opens, so the failures above are the fields'.
    b_head(&b, 3, 2, 0);
    b_tensor(&b, "t", 2, ne2, RP_DTYPE_F32, 0);
    b_tensor(&b, "u", 2, ne2, RP_DTYPE_F32, 32);
    b_data(&b, 64);
    rp_test_write_file(rp_test_tmp_path("crafted_ok.gguf"), b.p, b.n);
    assert_int_equal(rp_gguf_open(rp_test_tmp_path("crafted_ok.gguf"), &g), RP_OK);
    rp_gguf_close(g);

    // Not a file at all.
    expect_fail(rp_test_tmp_path("does-not-exist.gguf"), RP_ERR_IO);
    expect_fail(rp_test_tmpdir, RP_ERR_IO);
    rp_free(b.p);
}

/* ---- the conformance files ---- */

static const char *models[] = {"llama-spm", "llama3-bpe", "qwen2"};
static const char *quants[] = {"f32", "bf16", "Q8_0", "Q4_0", "Q5_0", "Q4_K_M", "Q5_K_M", "Q6_K"};

static void test_conformance_files(void **state)
{
    (void)state;
    RP_TEST_NEED_CONFORMANCE(conf);
    char path[8192];
    int n_files = 0;
    for (size_t m = 0; m < 3; m++) {
        snprintf(path, sizeof(path), "%s/gguf/%s/reference.json", conf, models[m]);
        json_error_t je;
        json_t *ref = json_load_file(path, 0, &je);
        if (!ref)
            fail_msg("%s: %s", path, je.text);
        json_t *by_type = json_object_get(json_object_get(ref, "llama_cpp"), "by_type");
        assert_true(json_is_object(by_type));
        for (size_t q = 0; q < 8; q++) {
            json_t *entry = json_object_get(by_type, quants[q]);
            assert_non_null(entry);
            snprintf(path, sizeof(path), "%s/gguf/%s/%s", conf, models[m],
                     json_string_value(json_object_get(entry, "file")));
            rp_gguf *g;
            rp_status st = rp_gguf_open(path, &g);
            if (st)
                fail_msg("%s", rp_error_message());
            n_files++;
            json_t *types = json_object_get(entry, "tensor_types");
            assert_int_equal(rp_gguf_n_tensors(g), (int64_t)json_object_size(types));
            const char *name;
            json_t *tv;
            json_object_foreach(types, name, tv)
            {
                const rp_gguf_tensor *t = rp_gguf_find_tensor(g, name);
                if (!t)
                    fail_msg("%s: tensor %s missing", path, name);
                if (strcasecmp(rp_dtype_name(t->type), json_string_value(tv)) != 0)
                    fail_msg("%s: tensor %s is %s, reference says %s", path, name, rp_dtype_name(t->type),
                             json_string_value(tv));
            }
            const char *arch = rp_gguf_get_str(g, "general.architecture", NULL);
            assert_non_null(arch);
            uint64_t n_tok;
            rp_gguf_type et;
            assert_true(rp_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n_tok));
            assert_int_equal(et, RP_GGUF_STRING);
            assert_int_equal(n_tok, 1024);
            rp_gguf_close(g);
        }
        json_decref(ref);
    }
    assert_int_equal(n_files, 24);
}

// A real file truncated at every byte of its header and at a sample across its
// data, and with header bytes flipped at a sample of positions.
static void test_conformance_corrupt(void **state)
{
    (void)state;
    RP_TEST_NEED_CONFORMANCE(conf);
    char src[8192];
    snprintf(src, sizeof(src), "%s/gguf/qwen2/qwen2-Q4_0.gguf", conf);
    size_t size;
    uint8_t *bytes = read_file(src, &size);
    rp_gguf *g;
    assert_int_equal(rp_gguf_open_memory(bytes, size, src, &g), RP_OK);
    size_t hdr = SIZE_MAX, need = 0;
    for (int64_t i = 0; i < rp_gguf_n_tensors(g); i++) {
        const rp_gguf_tensor *t = rp_gguf_tensor_at(g, i);
        size_t off = (size_t)((const uint8_t *)t->data - bytes);
        if (off < hdr)
            hdr = off;
        if (off + t->size > need)
            need = off + t->size;
    }
    rp_gguf_close(g);
    assert_true(hdr > 20000 && hdr < size && need <= size);

    const char *path = rp_test_tmp_path("qwen2-trunc.gguf");
    rp_test_write_file(path, bytes, size);
    // Across the data: 64 cut points, then every byte of the header, shrinking in place.
    for (int k = 63; k >= 0; k--) {
        size_t len = hdr + (need - hdr) * (size_t)k / 64;
        assert_int_equal(truncate(path, (off_t)len), 0);
        expect_fail(path, RP_ERR_INVALID);
    }
    for (size_t len = hdr; len-- > 0;) {
        assert_int_equal(truncate(path, (off_t)len), 0);
        expect_fail(path, RP_OK);
    }

    // Flips: every byte of the fixed-size parts at the start, then a seeded sample.
    path = rp_test_tmp_path("qwen2-flip.gguf");
    rp_test_write_file(path, bytes, size);
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    uint64_t rng = 0x9e3779b97f4a7c15ULL;
    int n_fail = 0, n_ok = 0;
    for (int k = 0; k < 3000; k++) {
        size_t at;
        uint8_t x;
        if (k < 512) {
            at = (size_t)k / 2;
            x = k % 2 ? 0xff : 0x01;
        } else {
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            at = (size_t)(rng % hdr);
            x = (uint8_t)((rng >> 32) | 1);
        }
        uint8_t v = bytes[at] ^ x;
        assert_int_equal(pwrite(fd, &v, 1, (off_t)at), 1);
        rp_gguf *gg = NULL;
        rp_status st = rp_gguf_open(path, &gg);
        if (st == RP_OK) {
            n_ok++;
            rp_gguf_close(gg);
        } else {
            n_fail++;
            assert_null(gg);
            if (!strstr(rp_error_message(), path))
                fail_msg("flip at %zu: message does not name the file: '%s'", at, rp_error_message());
        }
        assert_int_equal(pwrite(fd, &bytes[at], 1, (off_t)at), 1);
    }
    close(fd);
    print_message("qwen2-Q4_0 header flips: %d rejected, %d still valid\n", n_fail, n_ok);
    assert_true(n_fail > 0);
    rp_free(bytes);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),           cmocka_unit_test(test_alignment),
        cmocka_unit_test(test_writer_rejects),      cmocka_unit_test(test_oom),
        cmocka_unit_test(test_truncate_every_byte), cmocka_unit_test(test_flip_every_header_byte),
        cmocka_unit_test(test_crafted_headers),     cmocka_unit_test(test_conformance_files),
        cmocka_unit_test(test_conformance_corrupt),
    };
    return cmocka_run_group_tests(tests, rp_test_tmp_setup, rp_test_tmp_teardown);
}
