/*
 * cache_harness.h - what the prefix cache's tests share: a one-thread CPU backend opened
 * by the group setup (BE), token lists, waiting for the writer thread, counting the files
 * of a cache folder and flipping a bit in one. Included by one test file each (static functions).
 */
#ifndef RP_CACHE_HARNESS_H
#define RP_CACHE_HARNESS_H

#include "test_tmp.h"

#include "cache/cache_int.h"

#include <dirent.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

static rp_backend *BE;

static inline int cache_setup(void **state)
{
    if (rp_test_tmp_setup(state))
        return -1;
    return rp_backend_open("cpu", &(rp_backend_params){.n_threads = 1}, &BE) ? -1 : 0;
}

static inline int cache_teardown(void **state)
{
    rp_backend_destroy(BE);
    return rp_test_tmp_teardown(state);
}

// t[i] = base + i.
static inline void tokens(int32_t *t, int n, int32_t base)
{
    for (int i = 0; i < n; i++)
        t[i] = base + i;
}

// Waits (at most 60 s) until the writer has written n files in all.
static inline void wait_writes(rp_cache *c, uint64_t n)
{
    rp_cache_stats st;
    for (int i = 0; i < 6000; i++) {
        rp_cache_get_stats(c, &st);
        if (st.disk_writes >= n)
            return;
        usleep(10000);
    }
    fail_msg("the writer wrote %llu files, expected %llu", (unsigned long long)st.disk_writes, (unsigned long long)n);
}

// The files in dir whose names contain suffix (0 when dir cannot be read).
static inline int count_files(const char *dir, const char *suffix)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        n += strstr(de->d_name, suffix) != NULL;
    closedir(d);
    return n;
}

// Flips one bit of the byte at offset `at` of the file at path.
static inline void flip_byte(const char *path, off_t at)
{
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    uint8_t b;
    assert_int_equal(pread(fd, &b, 1, at), 1);
    b ^= 0x40;
    assert_int_equal(pwrite(fd, &b, 1, at), 1);
    close(fd);
}

#endif
