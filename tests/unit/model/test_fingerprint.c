/*
 * test_fingerprint.c - rp_model_fingerprint: the same files loaded twice agree;
 * another model, another quantization, a copy of the folder elsewhere, or a
 * file of the folder touched or resized, each give another fingerprint.
 */
#include "test_model.h"
#include "test_tmp.h"

#include "model/model.h"

#include <sys/stat.h>
#include <utime.h>

static void fingerprint(const char *dir, rp_dtype quant, uint8_t out[16])
{
    rp_model_params mp;
    rp_model_params_default(&mp);
    mp.quiet = true;
    mp.quant = quant;
    rp_model *m = NULL;
    if (rp_test_load(dir, 1, false, &mp, &m))
        fail_msg("loading %s: %s", dir, rp_error_message());
    assert_int_equal(rp_model_fingerprint(m, out), RP_OK);
    rp_model_destroy(m);
}

static void copy_file(const char *from, const char *to)
{
    char *data;
    size_t n;
    assert_int_equal(rp_file_read(from, &data, &n), RP_OK);
    rp_test_write_file(to, data, n);
    rp_free(data);
}

static void test_fingerprint(void **state)
{
    uint8_t a[16], b[16], c[16], d[16], e[16], f[16];
    char src[1024];
    snprintf(src, sizeof(src), "%s", rp_test_source("models/rapid-tiny-draft"));
    fingerprint(src, RP_DTYPE_F32, a);
    fingerprint(src, RP_DTYPE_F32, b);
    assert_memory_equal(a, b, 16);
    fingerprint(src, RP_DTYPE_Q8_0, c);
    assert_memory_not_equal(a, c, 16);
    fingerprint(rp_test_source("models/rapid-tiny"), RP_DTYPE_F32, d);
    assert_memory_not_equal(a, d, 16);
    // A copy elsewhere (same bytes, another path and mtime).
    const char *files[] = {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                           "tokenizer_config.json"};
    const char *dst = rp_test_tmp_path("copy");
    assert_int_equal(mkdir(dst, 0755), 0);
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        char from[1200], to[1200];
        snprintf(from, sizeof(from), "%s/%s", src, files[i]);
        snprintf(to, sizeof(to), "%s/%s", dst, files[i]);
        copy_file(from, to);
    }
    fingerprint(dst, RP_DTYPE_F32, e);
    assert_memory_not_equal(a, e, 16);
    uint8_t e2[16];
    fingerprint(dst, RP_DTYPE_F32, e2);
    assert_memory_equal(e, e2, 16);
    // The weights file touched: another fingerprint. The tokenizer touched: the same
    // (it does not change the KV numbers).
    char w[1200];
    snprintf(w, sizeof(w), "%s/tokenizer.json", dst);
    struct utimbuf ut = {1000000000, 1000000000};
    assert_int_equal(utime(w, &ut), 0);
    fingerprint(dst, RP_DTYPE_F32, f);
    assert_memory_equal(e, f, 16);
    snprintf(w, sizeof(w), "%s/model.safetensors", dst);
    assert_int_equal(utime(w, &ut), 0);
    fingerprint(dst, RP_DTYPE_F32, f);
    assert_memory_not_equal(e, f, 16);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fingerprint),
    };
    return cmocka_run_group_tests(tests, rp_test_tmp_setup, rp_test_tmp_teardown);
}
