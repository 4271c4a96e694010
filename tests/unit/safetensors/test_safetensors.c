/*
 * test_safetensors.c - the safetensors reader, model-folder sets and writer:
 * round trips, sharded folders, the conformance checkpoints, and corrupt files.
 *
 * Corrupt input is a feature: a bad file, index or folder gives one non-zero
 * status whose message names the file at fault, never a crash or a leak (this
 * suite also runs under ASan+UBSan). Files come from rp_st_write, or from
 * raw_file() for headers no writer would produce.
 */
#define RP_TEST_TMP_PREFIX "rp-st"
#include "test_tmp.h"

#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "safetensors/safetensors.h"

static void write_text(const char *path, const char *text)
{
    rp_test_write_file(path, text, strlen(text));
}

static uint8_t *read_file(const char *path, size_t *n)
{
    char *p;
    assert_int_equal(rp_file_read(path, &p, n), RP_OK);
    return (uint8_t *)p;
}

// A file with header length `declared`, then `json`, then `data_len` bytes of data.
static void raw_file_len(const char *path, uint64_t declared, const char *json, size_t data_len)
{
    size_t jl = strlen(json);
    uint8_t *b = rp_calloc(1, 8 + jl + data_len);
    memcpy(b, &declared, 8);
    memcpy(b + 8, json, jl);
    for (size_t i = 0; i < data_len; i++)
        b[8 + jl + i] = (uint8_t)i;
    rp_test_write_file(path, b, 8 + jl + data_len);
    rp_free(b);
}

static void raw_file(const char *path, const char *json, size_t data_len)
{
    raw_file_len(path, strlen(json), json, data_len);
}

static void check_message(rp_status st, const char *must_name)
{
    if (!strstr(rp_error_message(), must_name))
        fail_msg("error message does not name %s: '%s'", must_name, rp_error_message());
    if (getenv("RP_TEST_VERBOSE"))
        print_message("%s: %s\n", rp_status_name(st), rp_error_message());
}

// Opening file `path` must fail with `want` (any error for RP_OK), naming the file.
static rp_status file_fails(const char *path, rp_status want)
{
    rp_st_set *s = (rp_st_set *)&s;
    rp_error_clear();
    rp_status st = rp_st_open_file(path, &s);
    if (st == RP_OK)
        rp_st_close(s);
    if (st == RP_OK || (want != RP_OK && st != want))
        fail_msg("%s: expected %s, got %s (%s)", path, rp_status_name(want), rp_status_name(st), rp_error_message());
    assert_null(s);
    check_message(st, path);
    return st;
}

// Opening folder `dir` must fail with `want`, naming `culprit` (a file or the folder).
static void dir_fails(const char *dir, rp_status want, const char *culprit)
{
    rp_st_set *s = (rp_st_set *)&s;
    rp_error_clear();
    rp_status st = rp_st_open_dir(dir, &s);
    if (st == RP_OK)
        rp_st_close(s);
    if (st != want)
        fail_msg("%s: expected %s, got %s (%s)", dir, rp_status_name(want), rp_status_name(st), rp_error_message());
    assert_null(s);
    check_message(st, culprit);
}

static const char *crafted(const char *name, const char *json, size_t data_len)
{
    const char *p = rp_test_tmp_path(name);
    raw_file(p, json, data_len);
    return p;
}

/* ---- small valid files ---- */

static float f32v[6] = {1, 2, 3, 4, 5, 6};
static uint16_t f16v[4] = {0x3c00, 0x4000, 0x4200, 0x4400};
static uint16_t bf16v[8] = {0x3f80, 0x4000, 0x4040, 0x4080, 0xbf80, 0, 0x7f80, 0x0001};
static int64_t i64v[3] = {-1, 0, 1};
static uint8_t boolv[5] = {1, 0, 1, 1, 0};
static float scalar = 42.0f;

static const rp_st_tensor small_tensors[] = {
    {.name = "w.f32", .type = RP_DTYPE_F32, .n_dims = 2, .shape = {2, 3}, .data = f32v, .size = 24},
    {.name = "w.f16", .type = RP_DTYPE_F16, .n_dims = 1, .shape = {4}, .data = f16v, .size = 8},
    {.name = "w.bf16", .dtype_name = "BF16", .n_dims = 3, .shape = {2, 2, 2}, .data = bf16v, .size = 16},
    {.name = "pos_ids", .dtype_name = "I64", .n_dims = 1, .shape = {3}, .data = i64v, .size = 24},
    {.name = "mask", .dtype_name = "BOOL", .n_dims = 1, .shape = {5}, .data = boolv, .size = 5},
    {.name = "scale", .type = RP_DTYPE_F32, .n_dims = 0, .data = &scalar, .size = 4},
    {.name = "empty", .type = RP_DTYPE_BF16, .n_dims = 2, .shape = {0, 4}, .data = bf16v, .size = 0},
};
enum { N_SMALL = sizeof(small_tensors) / sizeof(small_tensors[0]) };
static const char *small_meta[] = {"format", "pt", "note", "héllo", NULL};

static void write_small(const char *path)
{
    assert_int_equal(rp_st_write(path, small_tensors, N_SMALL, small_meta), RP_OK);
}

/* ---- tests ---- */

static void check_small(const rp_st_set *s, const char *file)
{
    assert_int_equal(rp_st_n_tensors(s), N_SMALL);
    // Listed in data order, which is the order written ("empty" has size 0 at the end).
    for (int i = 0; i < N_SMALL; i++) {
        const rp_st_tensor *want = &small_tensors[i], *t = rp_st_tensor_at(s, i);
        assert_non_null(t);
        assert_string_equal(t->name, want->name);
        assert_ptr_equal(rp_st_find(s, want->name), t);
        assert_int_equal(t->n_dims, want->n_dims);
        int64_t n = 1;
        for (int d = 0; d < RP_ST_MAX_DIMS; d++) {
            assert_int_equal(t->shape[d], d < want->n_dims ? want->shape[d] : 1);
            if (d < want->n_dims)
                n *= want->shape[d];
        }
        assert_int_equal(t->n_elems, n);
        assert_int_equal(t->size, want->size);
        if (t->size)
            assert_memory_equal(t->data, want->data, t->size);
        assert_string_equal(t->file, file);
    }
    const rp_st_tensor *t;
    assert_int_equal(rp_st_get(s, "w.f32", &t), RP_OK);
    assert_true(t->supported && t->type == RP_DTYPE_F32 && strcmp(t->dtype_name, "F32") == 0);
    assert_int_equal(rp_st_get(s, "w.f16", &t), RP_OK);
    assert_true(t->supported && t->type == RP_DTYPE_F16);
    assert_int_equal(rp_st_get(s, "w.bf16", &t), RP_OK);
    assert_true(t->supported && t->type == RP_DTYPE_BF16);
    assert_int_equal(rp_st_get(s, "scale", &t), RP_OK);
    assert_int_equal(t->n_dims, 0);
    assert_int_equal(t->n_elems, 1);
    assert_int_equal(rp_st_get(s, "empty", &t), RP_OK);
    assert_int_equal(t->n_elems, 0);
    // Unsupported dtypes are listed, and refused only when asked for.
    t = rp_st_find(s, "pos_ids");
    assert_non_null(t);
    assert_false(t->supported);
    assert_string_equal(t->dtype_name, "I64");
    assert_int_equal(rp_st_get(s, "pos_ids", &t), RP_ERR_UNSUPPORTED);
    assert_null(t);
    check_message(RP_ERR_UNSUPPORTED, file);
    assert_non_null(strstr(rp_error_message(), "pos_ids"));
    assert_non_null(strstr(rp_error_message(), "I64"));
    assert_int_equal(rp_st_get(s, "mask", &t), RP_ERR_UNSUPPORTED);
    assert_int_equal(rp_st_get(s, "nope", &t), RP_ERR_INVALID);
    assert_non_null(strstr(rp_error_message(), "nope"));
    assert_null(rp_st_find(s, "nope"));
    assert_null(rp_st_tensor_at(s, N_SMALL));
    assert_null(rp_st_tensor_at(s, -1));
    assert_string_equal(rp_st_metadata(s, "format"), "pt");
    assert_string_equal(rp_st_metadata(s, "note"), "héllo");
    assert_null(rp_st_metadata(s, "nope"));
}

static void test_roundtrip(void **state)
{
    (void)state;
    const char *path = rp_test_tmp_path("small.safetensors");
    write_small(path);
    rp_st_set *s;
    assert_int_equal(rp_st_open_file(path, &s), RP_OK);
    assert_string_equal(rp_st_path(s), path);
    check_small(s, path);
    rp_st_close(s);

    size_t size;
    uint8_t *bytes = read_file(path, &size);
    uint64_t n;
    memcpy(&n, bytes, 8);
    assert_int_equal(n % 8, 0); // header padded as the reference writer does
    assert_int_equal(size, 8 + n + 24 + 8 + 16 + 24 + 5 + 4);
    assert_int_equal(rp_st_open_memory(bytes, size, "mem", &s), RP_OK);
    check_small(s, "mem");
    rp_st_close(s);
    rp_free(bytes);

    // No metadata at all.
    assert_int_equal(rp_st_write(path, small_tensors, 1, NULL), RP_OK);
    assert_int_equal(rp_st_open_file(path, &s), RP_OK);
    assert_int_equal(rp_st_n_tensors(s), 1);
    assert_null(rp_st_metadata(s, "format"));
    rp_st_close(s);
}

static void test_writer_rejects(void **state)
{
    (void)state;
    const char *path = rp_test_tmp_path("rejects.safetensors");
    rp_st_tensor t[2] = {small_tensors[0], small_tensors[0]};
    assert_int_equal(rp_st_write(path, t, 2, NULL), RP_ERR_INVALID); // duplicate name
    t[1].name = "__metadata__";
    assert_int_equal(rp_st_write(path, t, 2, NULL), RP_ERR_INVALID);
    t[1].name = "";
    assert_int_equal(rp_st_write(path, t, 2, NULL), RP_ERR_INVALID);
    t[1].name = "x";
    t[1].size = 20;
    assert_int_equal(rp_st_write(path, t, 2, NULL), RP_ERR_INVALID);
    t[1].size = 24;
    t[1].n_dims = 9;
    assert_int_equal(rp_st_write(path, t, 2, NULL), RP_ERR_INVALID);
    t[1].n_dims = 2;
    t[1].shape[0] = -2;
    t[1].shape[1] = -3;
    assert_int_equal(rp_st_write(path, t, 2, NULL), RP_ERR_INVALID);
    t[1].shape[0] = 2;
    t[1].shape[1] = 3;
    t[1].type = RP_DTYPE_Q4_0; // no safetensors name
    assert_int_equal(rp_st_write(path, t, 2, NULL), RP_ERR_INVALID);
    const char *odd_meta[] = {"k", NULL};
    assert_int_equal(rp_st_write(path, t, 1, odd_meta), RP_ERR_INVALID);
    assert_int_equal(rp_st_write(rp_test_tmp_path("no/such/dir.safetensors"), t, 1, NULL), RP_ERR_IO);
    check_message(RP_ERR_IO, "no/such/dir.safetensors");
    assert_false(rp_file_exists(path));
}

static void test_crafted(void **state)
{
    (void)state;
    const char *p;
    rp_st_set *s;
    // Sizes and header length.
    p = rp_test_tmp_path("empty.safetensors");
    rp_test_write_file(p, "", 0);
    file_fails(p, RP_ERR_INVALID);
    p = rp_test_tmp_path("seven.safetensors");
    rp_test_write_file(p, "\x10\0\0\0\0\0\0", 7);
    file_fails(p, RP_ERR_INVALID);
    p = rp_test_tmp_path("len0.safetensors");
    raw_file_len(p, 0, "", 16);
    file_fails(p, RP_ERR_INVALID);
    p = rp_test_tmp_path("len_past_end.safetensors");
    raw_file_len(p, 1000, "{}", 16);
    file_fails(p, RP_ERR_INVALID);
    p = rp_test_tmp_path("len_huge.safetensors");
    raw_file_len(p, (uint64_t)1 << 63, "{}", 16);
    file_fails(p, RP_ERR_INVALID);
    p = rp_test_tmp_path("len_max.safetensors");
    raw_file_len(p, UINT64_MAX, "{}", 16);
    file_fails(p, RP_ERR_INVALID);
    p = rp_test_tmp_path("len_over_cap.safetensors");
    raw_file_len(p, RP_ST_MAX_HEADER + 1, "{}", 16);
    file_fails(p, RP_ERR_INVALID);

    // The JSON itself.
    file_fails(crafted("not_json.safetensors", "hello world", 0), RP_ERR_INVALID);
    file_fails(crafted("json_trunc.safetensors", "{\"a\": {\"dtype\": \"F32\"", 0), RP_ERR_INVALID);
    file_fails(crafted("json_array.safetensors", "[1, 2, 3]", 0), RP_ERR_INVALID);
    file_fails(crafted("json_string.safetensors", "\"x\"", 0), RP_ERR_INVALID);
    file_fails(crafted("json_number.safetensors", "12", 0), RP_ERR_INVALID);
    file_fails(crafted("json_trailing.safetensors", "{} {}", 0), RP_ERR_INVALID);
    file_fails(crafted("json_nul.safetensors", "{\"a\\u0000b\": 1}", 0), RP_ERR_INVALID);
    file_fails(crafted("json_bad_utf8.safetensors", "{\"a\xff\": 1}", 0), RP_ERR_INVALID);
    file_fails(crafted("json_bigint.safetensors",
                       "{\"t\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999999],\"data_offsets\":[0,4]}}", 4),
               RP_ERR_INVALID);
    {
        // Deep nesting must be refused, not recursed into without bound.
        size_t depth = 100000;
        char *deep = rp_malloc(2 * depth + 16);
        size_t at = 0;
        at += (size_t)sprintf(deep, "{\"t\":");
        for (size_t i = 0; i < depth; i++)
            deep[at++] = '[';
        for (size_t i = 0; i < depth; i++)
            deep[at++] = ']';
        deep[at++] = '}';
        deep[at] = 0;
        file_fails(crafted("json_deep.safetensors", deep, 0), RP_ERR_INVALID);
        rp_free(deep);
    }
    file_fails(crafted("dup_name.safetensors",
                       "{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                       "\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                       8),
               RP_ERR_INVALID);
    file_fails(crafted("empty_name.safetensors", "{\"\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4),
               RP_ERR_INVALID);

    // Entries.
    static const struct {
        const char *name, *json;
        rp_status want;
    } entries[] = {
        {"entry_number", "{\"t\": 5}", RP_ERR_INVALID},
        {"entry_array", "{\"t\": [\"F32\", [1], [0, 4]]}", RP_ERR_INVALID},
        {"no_dtype", "{\"t\":{\"shape\":[1],\"data_offsets\":[0,4]}}", RP_ERR_INVALID},
        {"no_shape", "{\"t\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", RP_ERR_INVALID},
        {"no_offsets", "{\"t\":{\"dtype\":\"F32\",\"shape\":[1]}}", RP_ERR_INVALID},
        {"dtype_number", "{\"t\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,4]}}", RP_ERR_INVALID},
        {"dtype_null", "{\"t\":{\"dtype\":null,\"shape\":[1],\"data_offsets\":[0,4]}}", RP_ERR_INVALID},
        {"shape_object", "{\"t\":{\"dtype\":\"F32\",\"shape\":{\"0\":1},\"data_offsets\":[0,4]}}", RP_ERR_INVALID},
        {"shape_negative", "{\"t\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", RP_ERR_INVALID},
        {"shape_negative2", "{\"t\":{\"dtype\":\"F32\",\"shape\":[-1,-1],\"data_offsets\":[0,4]}}", RP_ERR_INVALID},
        {"shape_float", "{\"t\":{\"dtype\":\"F32\",\"shape\":[1.0],\"data_offsets\":[0,4]}}", RP_ERR_INVALID},
        {"shape_float2", "{\"t\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,4]}}", RP_ERR_INVALID},
        {"shape_string", "{\"t\":{\"dtype\":\"F32\",\"shape\":[\"1\"],\"data_offsets\":[0,4]}}", RP_ERR_INVALID},
        {"shape_bool", "{\"t\":{\"dtype\":\"F32\",\"shape\":[true],\"data_offsets\":[0,4]}}", RP_ERR_INVALID},
        {"shape_overflow",
         "{\"t\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4611686018427387904],\"data_offsets\":[0,4]}}",
         RP_ERR_INVALID},
        {"shape_bytes_overflow", "{\"t\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904],\"data_offsets\":[0,4]}}",
         RP_ERR_INVALID},
        {"shape_9dims", "{\"t\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}",
         RP_ERR_UNSUPPORTED},
        {"offsets_reversed", "{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", RP_ERR_INVALID},
        {"offsets_past_end", "{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", RP_ERR_INVALID},
        {"offsets_huge",
         "{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[9223372036854775800,"
         "9223372036854775804]}}",
         RP_ERR_INVALID},
        {"offsets_size", "{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,8]}}", RP_ERR_INVALID},
        {"offsets_size2", "{\"t\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[0,4]}}", RP_ERR_INVALID},
        {"offsets_negative", "{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", RP_ERR_INVALID},
        {"offsets_float", "{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0.0,4.0]}}", RP_ERR_INVALID},
        {"offsets_three", "{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", RP_ERR_INVALID},
        {"offsets_one", "{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", RP_ERR_INVALID},
        {"offsets_object", "{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":{\"a\":0}}}", RP_ERR_INVALID},
        {"f4_odd", "{\"t\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,1]}}", RP_ERR_INVALID},
        {"i8_size", "{\"t\":{\"dtype\":\"I8\",\"shape\":[3],\"data_offsets\":[0,4]}}", RP_ERR_INVALID},
        {"meta_array", "{\"__metadata__\":[\"a\"]}", RP_ERR_INVALID},
        {"meta_number_value", "{\"__metadata__\":{\"a\":1}}", RP_ERR_INVALID},
    };
    for (size_t i = 0; i < sizeof(entries) / sizeof(entries[0]); i++) {
        char name[64];
        snprintf(name, sizeof(name), "%s.safetensors", entries[i].name);
        file_fails(crafted(name, entries[i].json, 4), entries[i].want);
    }

    // Valid oddities: header padded with spaces, unknown dtypes (listed, unsupported),
    // sub-byte dtypes, extra entry keys, gaps and overlaps, trailing bytes.
    p = crafted("odd_ok.safetensors",
                "{\"__metadata__\":{},\"a\":{\"dtype\":\"Q4_X\",\"shape\":[7],\"data_offsets\":[0,3]},"
                "\"b\":{\"dtype\":\"F4\",\"shape\":[4],\"data_offsets\":[2,4]},"
                "\"c\":{\"dtype\":\"F16\",\"shape\":[1,1],\"data_offsets\":[6,8],\"extra\":true},"
                "\"d\":{\"dtype\":\"F8_E4M3\",\"shape\":[],\"data_offsets\":[9,10]}}      ",
                32);
    if (rp_st_open_file(p, &s) != RP_OK)
        fail_msg("%s", rp_error_message());
    assert_int_equal(rp_st_n_tensors(s), 4);
    assert_false(rp_st_find(s, "a")->supported);
    assert_string_equal(rp_st_find(s, "a")->dtype_name, "Q4_X");
    assert_false(rp_st_find(s, "b")->supported);
    assert_true(rp_st_find(s, "c")->supported);
    assert_int_equal(rp_st_find(s, "d")->n_dims, 0);
    const rp_st_tensor *t;
    assert_int_equal(rp_st_get(s, "a", &t), RP_ERR_UNSUPPORTED);
    assert_non_null(strstr(rp_error_message(), "Q4_X"));
    rp_st_close(s);
    p = crafted("only_meta.safetensors", "{\"__metadata__\":{\"format\":\"pt\"}}", 0);
    assert_int_equal(rp_st_open_file(p, &s), RP_OK);
    assert_int_equal(rp_st_n_tensors(s), 0);
    rp_st_close(s);

    file_fails(rp_test_tmp_path("missing.safetensors"), RP_ERR_IO);
    file_fails(rp_test_tmpdir, RP_ERR_IO);
}

static void make_dir(const char *p)
{
    assert_int_equal(mkdir(p, 0755), 0);
}

// Two shards and an index in folder `dir`; shard 2 also holds one unlisted tensor.
static void write_sharded(const char *dir)
{
    char p[600];
    rp_st_tensor a[] = {small_tensors[0], small_tensors[1]};
    rp_st_tensor b[] = {small_tensors[2], small_tensors[3], small_tensors[5]};
    b[1].name = "mtp.pos_ids";
    snprintf(p, sizeof(p), "%s/model-00001-of-00002.safetensors", dir);
    assert_int_equal(rp_st_write(p, a, 2, NULL), RP_OK);
    snprintf(p, sizeof(p), "%s/model-00002-of-00002.safetensors", dir);
    assert_int_equal(rp_st_write(p, b, 3, small_meta), RP_OK);
    snprintf(p, sizeof(p), "%s/model.safetensors.index.json", dir);
    write_text(p, "{\"metadata\": {\"total_size\": 100}, \"weight_map\": {"
                  "\"w.bf16\": \"model-00002-of-00002.safetensors\","
                  "\"mtp.pos_ids\": \"model-00002-of-00002.safetensors\","
                  "\"w.f32\": \"model-00001-of-00002.safetensors\","
                  "\"w.f16\": \"model-00001-of-00002.safetensors\"}}");
}

static void test_sharded(void **state)
{
    (void)state;
    const char *dir = rp_test_tmp_path("sharded");
    make_dir(dir);
    write_sharded(dir);
    rp_st_set *s;
    if (rp_st_open_dir(dir, &s) != RP_OK)
        fail_msg("%s", rp_error_message());
    assert_string_equal(rp_st_path(s), dir);
    assert_int_equal(rp_st_n_tensors(s), 5);
    static const char *order[] = {"w.f32", "w.f16", "w.bf16", "mtp.pos_ids", "scale"};
    for (int i = 0; i < 5; i++) {
        const rp_st_tensor *t = rp_st_tensor_at(s, i);
        assert_string_equal(t->name, order[i]);
        assert_non_null(strstr(t->file, i < 2 ? "model-00001-of-00002" : "model-00002-of-00002"));
        assert_ptr_equal(rp_st_find(s, order[i]), t);
    }
    const rp_st_tensor *t;
    assert_int_equal(rp_st_get(s, "w.bf16", &t), RP_OK);
    assert_memory_equal(t->data, bf16v, sizeof(bf16v));
    assert_int_equal(rp_st_get(s, "w.f32", &t), RP_OK);
    assert_memory_equal(t->data, f32v, sizeof(f32v));
    assert_int_equal(rp_st_get(s, "mtp.pos_ids", &t), RP_ERR_UNSUPPORTED);
    check_message(RP_ERR_UNSUPPORTED, "model-00002-of-00002.safetensors");
    assert_string_equal(rp_st_metadata(s, "format"), "pt");
    rp_st_close(s);

    // A folder with just model.safetensors.
    dir = rp_test_tmp_path("single");
    make_dir(dir);
    char p[600];
    snprintf(p, sizeof(p), "%s/model.safetensors", dir);
    write_small(p);
    assert_int_equal(rp_st_open_dir(dir, &s), RP_OK);
    check_small(s, p);
    assert_string_equal(rp_st_path(s), dir);
    rp_st_close(s);

    dir = rp_test_tmp_path("empty-dir");
    make_dir(dir);
    dir_fails(dir, RP_ERR_IO, dir);
    dir_fails(rp_test_tmp_path("no-such-dir"), RP_ERR_IO, rp_test_tmp_path("no-such-dir"));
    dir_fails(p, RP_ERR_IO, p); // a file, not a folder
}

static void test_index_corrupt(void **state)
{
    (void)state;
    static const struct {
        const char *name, *index;
        rp_status want;
        const char *culprit; // file the message must name (index when NULL)
    } cases[] = {
        {"not_json", "weight_map", RP_ERR_INVALID, NULL},
        {"array", "[{\"weight_map\": {}}]", RP_ERR_INVALID, NULL},
        {"no_map", "{\"metadata\": {}}", RP_ERR_INVALID, NULL},
        {"map_array", "{\"weight_map\": [\"model-00001-of-00002.safetensors\"]}", RP_ERR_INVALID, NULL},
        {"map_string", "{\"weight_map\": \"model-00001-of-00002.safetensors\"}", RP_ERR_INVALID, NULL},
        {"map_empty", "{\"weight_map\": {}}", RP_ERR_INVALID, NULL},
        {"value_number", "{\"weight_map\": {\"w.f32\": 1}}", RP_ERR_INVALID, NULL},
        {"value_slash", "{\"weight_map\": {\"w.f32\": \"../x/model-00001-of-00002.safetensors\"}}", RP_ERR_INVALID,
         NULL},
        {"value_dotdot", "{\"weight_map\": {\"w.f32\": \"..\"}}", RP_ERR_INVALID, NULL},
        {"value_empty", "{\"weight_map\": {\"w.f32\": \"\"}}", RP_ERR_INVALID, NULL},
        {"dup_key",
         "{\"weight_map\": {\"w.f32\": \"model-00001-of-00002.safetensors\", \"w.f32\": "
         "\"model-00001-of-00002.safetensors\"}}",
         RP_ERR_INVALID, NULL},
        {"missing_shard", "{\"weight_map\": {\"w.f32\": \"model-00001-of-00003.safetensors\"}}", RP_ERR_IO,
         "model-00001-of-00003.safetensors"},
        {"wrong_shard", "{\"weight_map\": {\"w.f32\": \"model-00002-of-00002.safetensors\"}}", RP_ERR_INVALID, NULL},
        {"absent_tensor",
         "{\"weight_map\": {\"w.f32\": \"model-00001-of-00002.safetensors\", \"w.nope\": "
         "\"model-00001-of-00002.safetensors\"}}",
         RP_ERR_INVALID, NULL},
        {"corrupt_shard", "{\"weight_map\": {\"w.f32\": \"bad.safetensors\"}}", RP_ERR_INVALID, "bad.safetensors"},
        {"dup_across",
         "{\"weight_map\": {\"w.f32\": \"model-00001-of-00002.safetensors\", \"x\": "
         "\"copy.safetensors\"}}",
         RP_ERR_INVALID, "copy.safetensors"},
    };
    char p[700], idx[700];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char dir[600];
        snprintf(dir, sizeof(dir), "%s/idx-%s", rp_test_tmpdir, cases[i].name);
        make_dir(dir);
        write_sharded(dir);
        snprintf(p, sizeof(p), "%s/bad.safetensors", dir);
        raw_file(p, "[]", 0);
        snprintf(p, sizeof(p), "%s/copy.safetensors", dir);
        assert_int_equal(rp_st_write(p, small_tensors, 1, NULL), RP_OK); // holds w.f32 again
        snprintf(idx, sizeof(idx), "%s/model.safetensors.index.json", dir);
        write_text(idx, cases[i].index);
        dir_fails(dir, cases[i].want, cases[i].culprit ? cases[i].culprit : idx);
    }
}

// Out of memory at every allocation of opening a file and a sharded folder.
static void test_oom(void **state)
{
    (void)state;
    const char *path = rp_test_tmp_path("oom.safetensors");
    write_small(path);
    const char *dir = rp_test_tmp_path("oom-dir");
    make_dir(dir);
    write_sharded(dir);
    for (int which = 0; which < 2; which++) {
        int ok_at = -1;
        for (int n = 0; n < 500 && ok_at < 0; n++) {
            rp_st_set *s = NULL;
            rp_alloc_fail_after(n, false);
            rp_status st = which ? rp_st_open_dir(dir, &s) : rp_st_open_file(path, &s);
            rp_alloc_fail_after(-1, false);
            if (st == RP_OK) {
                ok_at = n;
                rp_st_close(s);
            } else {
                assert_int_equal(st, RP_ERR_NOMEM);
                assert_null(s);
            }
        }
        assert_true(ok_at > 0);
    }
}

// Every prefix of a small file fails until the last tensor's data is present.
static void test_truncate_every_byte(void **state)
{
    (void)state;
    const char *src = rp_test_tmp_path("trunc-src.safetensors");
    write_small(src);
    size_t size;
    uint8_t *bytes = read_file(src, &size);
    const char *path = rp_test_tmp_path("trunc.safetensors");
    rp_test_write_file(path, bytes, size);
    for (size_t len = size; len-- > 0;) {
        assert_int_equal(truncate(path, (off_t)len), 0);
        file_fails(path, RP_ERR_INVALID);
        uint8_t *copy = rp_malloc(len ? len : 1);
        memcpy(copy, bytes, len);
        rp_st_set *s;
        assert_int_not_equal(rp_st_open_memory(copy, len, "mem", &s), RP_OK);
        rp_free(copy);
    }
    rp_free(bytes);
}

static void flip_check(const char *path, const uint8_t *bytes, size_t size, size_t from, size_t to, const uint8_t *xors,
                       size_t n_xors, int *n_fail)
{
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    for (size_t i = from; i < to; i++)
        for (size_t k = 0; k < n_xors; k++) {
            uint8_t v = bytes[i] ^ xors[k];
            assert_int_equal(pwrite(fd, &v, 1, (off_t)i), 1);
            rp_st_set *s = NULL;
            rp_error_clear();
            rp_status st = rp_st_open_file(path, &s);
            if (st == RP_OK) {
                volatile uint8_t sink = 0;
                for (int64_t j = 0; j < rp_st_n_tensors(s); j++) {
                    const rp_st_tensor *t = rp_st_tensor_at(s, j);
                    if (t->size)
                        sink ^= ((const uint8_t *)t->data)[0] ^ ((const uint8_t *)t->data)[t->size - 1];
                }
                (void)sink;
                rp_st_close(s);
            } else {
                (*n_fail)++;
                assert_null(s);
                if (!strstr(rp_error_message(), path))
                    fail_msg("byte %zu ^ %02x: message does not name the file: '%s'", i, xors[k], rp_error_message());
            }
            assert_int_equal(pwrite(fd, &bytes[i], 1, (off_t)i), 1);
        }
    close(fd);
    (void)size;
}

static void test_flip_every_header_byte(void **state)
{
    (void)state;
    const char *path = rp_test_tmp_path("flip.safetensors");
    write_small(path);
    size_t size;
    uint8_t *bytes = read_file(path, &size);
    uint64_t n;
    memcpy(&n, bytes, 8);
    static const uint8_t xors[] = {0xff, 0x01, 0x80, 0x20, 0x0f};
    int n_fail = 0;
    flip_check(path, bytes, size, 0, 8 + (size_t)n, xors, sizeof(xors), &n_fail);
    assert_true(n_fail > 0);
    rp_free(bytes);
}

/* ---- the conformance checkpoints ---- */

static const char *models[] = {"llama-spm", "llama3-bpe", "qwen2"};

static void test_conformance(void **state)
{
    (void)state;
    RP_TEST_NEED_CONFORMANCE(conf);
    char dir[8192], path[8300];
    for (size_t m = 0; m < 3; m++) {
        snprintf(dir, sizeof(dir), "%s/gguf/%s/hf", conf, models[m]);
        rp_st_set *s;
        if (rp_st_open_dir(dir, &s) != RP_OK)
            fail_msg("%s", rp_error_message());
        // An independent count from the raw header.
        snprintf(path, sizeof(path), "%s/model.safetensors", dir);
        size_t size;
        uint8_t *bytes = read_file(path, &size);
        uint64_t n;
        memcpy(&n, bytes, 8);
        json_t *hdr = json_loadb((const char *)bytes + 8, (size_t)n, 0, NULL);
        assert_non_null(hdr);
        assert_int_equal(rp_st_n_tensors(s), (int64_t)json_object_size(hdr) - 1);
        json_decref(hdr);
        rp_free(bytes);
        for (int64_t i = 0; i < rp_st_n_tensors(s); i++) {
            const rp_st_tensor *t = rp_st_tensor_at(s, i), *u;
            assert_int_equal(rp_st_get(s, t->name, &u), RP_OK);
            assert_int_equal(u->type, RP_DTYPE_BF16);
            assert_int_equal(u->size, (size_t)u->n_elems * 2);
        }
        assert_string_equal(rp_st_metadata(s, "format"), "pt");
        const rp_st_tensor *emb;
        assert_int_equal(rp_st_get(s, "model.embed_tokens.weight", &emb), RP_OK);
        assert_int_equal(emb->n_dims, 2);
        assert_int_equal(emb->shape[0], 1024);
        assert_int_equal(emb->shape[1], 256);
        // The same bytes as llama.cpp's bf16 conversion of the embedding.
        snprintf(path, sizeof(path), "%s/gguf/%s/%s-bf16.gguf", conf, models[m], models[m]);
        rp_gguf *g;
        assert_int_equal(rp_gguf_open(path, &g), RP_OK);
        const rp_gguf_tensor *ge = rp_gguf_find_tensor(g, "token_embd.weight");
        assert_non_null(ge);
        assert_int_equal(ge->type, RP_DTYPE_BF16);
        assert_int_equal(ge->ne[0], 256);
        assert_int_equal(ge->ne[1], 1024);
        assert_int_equal(ge->size, emb->size);
        assert_memory_equal(ge->data, emb->data, emb->size);
        rp_gguf_close(g);
        rp_st_close(s);
    }
}

// The real qwen2 checkpoint truncated at every header byte and a sample of data
// offsets, and with every header byte flipped two ways.
static void test_conformance_corrupt(void **state)
{
    (void)state;
    RP_TEST_NEED_CONFORMANCE(conf);
    char src[8192];
    snprintf(src, sizeof(src), "%s/gguf/qwen2/hf/model.safetensors", conf);
    size_t size;
    uint8_t *bytes = read_file(src, &size);
    uint64_t n;
    memcpy(&n, bytes, 8);
    size_t hdr = 8 + (size_t)n;
    const char *path = rp_test_tmp_path("qwen2-trunc.safetensors");
    rp_test_write_file(path, bytes, size);
    for (int k = 63; k >= 0; k--) {
        assert_int_equal(truncate(path, (off_t)(hdr + (size - hdr) * (size_t)k / 64)), 0);
        file_fails(path, RP_ERR_INVALID);
    }
    for (size_t len = hdr; len-- > 0;) {
        assert_int_equal(truncate(path, (off_t)len), 0);
        file_fails(path, RP_ERR_INVALID);
    }
    path = rp_test_tmp_path("qwen2-flip.safetensors");
    rp_test_write_file(path, bytes, size);
    static const uint8_t xors[] = {0xff, 0x01};
    int n_fail = 0;
    flip_check(path, bytes, size, 0, hdr, xors, sizeof(xors), &n_fail);
    print_message("qwen2 safetensors header flips: %d of %zu rejected\n", n_fail, 2 * hdr);
    assert_true(n_fail > 0);
    rp_free(bytes);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_writer_rejects),
        cmocka_unit_test(test_crafted),
        cmocka_unit_test(test_sharded),
        cmocka_unit_test(test_index_corrupt),
        cmocka_unit_test(test_oom),
        cmocka_unit_test(test_truncate_every_byte),
        cmocka_unit_test(test_flip_every_header_byte),
        cmocka_unit_test(test_conformance),
        cmocka_unit_test(test_conformance_corrupt),
    };
    return cmocka_run_group_tests(tests, rp_test_tmp_setup, rp_test_tmp_teardown);
}
