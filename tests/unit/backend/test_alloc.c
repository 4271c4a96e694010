/*
 * test_alloc.c - the CPU backend's memory (rp_backend_alloc / rp_backend_free): zero-filled,
 * 64-byte aligned, writable to its last byte, for small buffers (aligned malloc) and
 * large ones (2 MiB pages, faulted in at once), sizes around the threshold between them
 * included; freeing each as it was made (under ASan a wrong free would be reported),
 * many at once and out of order;
 * and the NOMEM error when an allocation is made to fail.
 */
#include "backend/backend.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#define MIB ((size_t)1 << 20)

static void check_buffer(rp_backend *be, size_t bytes)
{
    void *p = (void *)1;
    assert_int_equal(rp_backend_alloc(be, bytes, &p), RP_OK);
    assert_non_null(p);
    assert_int_equal((uintptr_t)p % 64, 0);
    const uint8_t *b = p;
    for (size_t i = 0; i < bytes; i += 4093) // a byte of every page, and the last
        assert_int_equal(b[i], 0);
    if (bytes) {
        assert_int_equal(b[bytes - 1], 0);
        memset(p, 0xa5, bytes);
    }
    rp_backend_free(be, p);
}

static void test_sizes(void **state)
{
    (void)state;
    rp_backend *be = NULL;
    assert_int_equal(rp_backend_open("cpu", &(rp_backend_params){.n_threads = 1}, &be), RP_OK);
    const size_t sizes[] = {0,           1,       63,          64,          4096,    2 * MIB - 65, 2 * MIB - 64,
                            2 * MIB - 1, 2 * MIB, 2 * MIB + 1, 5 * MIB + 3, 64 * MIB};
    for (int round = 0; round < 2; round++) // again: memory given back and taken anew is zero too
        for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
            check_buffer(be, sizes[i]);
    rp_backend_free(be, NULL); // a no-op, as free(NULL)
    rp_backend_destroy(be);
}

// Many large buffers held at once (more than the backend's first list of mappings) and
// freed out of order, each still its own zeroed memory until then.
static void test_many(void **state)
{
    (void)state;
    rp_backend *be = NULL;
    assert_int_equal(rp_backend_open("cpu", &(rp_backend_params){.n_threads = 1}, &be), RP_OK);
    enum { N = 40 };
    uint8_t *p[N];
    for (int i = 0; i < N; i++) {
        size_t bytes = 2 * MIB + (size_t)i * 4096;
        assert_int_equal(rp_backend_alloc(be, bytes, (void **)&p[i]), RP_OK);
        assert_int_equal(p[i][0], 0);
        assert_int_equal(p[i][bytes - 1], 0);
        p[i][0] = (uint8_t)i; // a mark, checked after the others are freed
    }
    for (int i = 0; i < N; i += 2) // the even ones first, then the odd ones backwards
        rp_backend_free(be, p[i]);
    for (int i = N - 1; i > 0; i -= 2) {
        assert_int_equal(p[i][0], i);
        rp_backend_free(be, p[i]);
    }
    rp_backend_destroy(be);
}

static void test_nomem(void **state)
{
    (void)state;
    rp_backend *be = NULL;
    assert_int_equal(rp_backend_open("cpu", &(rp_backend_params){.n_threads = 1}, &be), RP_OK);
    const size_t sizes[] = {100, 8 * MIB};
    for (size_t i = 0; i < 2; i++) {
        void *p = (void *)1;
        rp_alloc_fail_after(0, false); // the next allocation fails
        rp_status st = rp_backend_alloc(be, sizes[i], &p);
        rp_alloc_fail_after(-1, false);
        assert_int_equal(st, RP_ERR_NOMEM);
        assert_null(p);
    }
    void *p = NULL;
    assert_int_equal(rp_backend_alloc(be, SIZE_MAX - 8, &p), RP_ERR_NOMEM); // 2 MiB pages: the size would overflow
    assert_null(p);
    rp_backend_destroy(be);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_many),
        cmocka_unit_test(test_nomem),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
