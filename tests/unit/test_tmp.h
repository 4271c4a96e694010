/*
 * test_tmp.h - a temporary folder per test program, for tests that write files.
 *
 * Use rp_test_tmp_setup / rp_test_tmp_teardown as the group setup and teardown
 * (cmocka_run_group_tests); rp_test_tmp_path(name) gives a path inside the folder
 * (4 rotating static buffers), rp_test_write_file writes bytes or fails the test.
 * Define RP_TEST_TMP_PREFIX before including to name the folder ("rp-test").
 */
#ifndef RP_TEST_TMP_H
#define RP_TEST_TMP_H

#include "test_util.h"

#include <ftw.h>
#include <unistd.h>

#ifndef RP_TEST_TMP_PREFIX
#define RP_TEST_TMP_PREFIX "rp-test"
#endif

static char rp_test_tmpdir[256];

static inline const char *rp_test_tmp_path(const char *name)
{
    static char buf[4][512];
    static int slot;
    slot = (slot + 1) % 4;
    snprintf(buf[slot], sizeof(buf[slot]), "%s/%s", rp_test_tmpdir, name);
    return buf[slot];
}

static inline int rp_test_tmp_rm(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

static inline int rp_test_tmp_setup(void **state)
{
    (void)state;
    const char *t = getenv("TMPDIR");
    snprintf(rp_test_tmpdir, sizeof(rp_test_tmpdir), "%s/%s-XXXXXX", t && *t ? t : "/tmp", RP_TEST_TMP_PREFIX);
    return mkdtemp(rp_test_tmpdir) ? 0 : -1;
}

static inline int rp_test_tmp_teardown(void **state)
{
    (void)state;
    return nftw(rp_test_tmpdir, rp_test_tmp_rm, 16, FTW_DEPTH | FTW_PHYS);
}

static inline void rp_test_write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (n)
        assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

#endif
