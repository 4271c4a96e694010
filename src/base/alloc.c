/*
 * alloc.c - every heap allocation in Rapid goes through here.
 *
 * In normal runs these are thin wrappers over libc. Tests call
 * rp_alloc_fail_after(n, sticky) to make the (n+1)th allocation fail, so every
 * out-of-memory path can be exercised (SQLite's OOM testing).
 */
#include "base.h"

#include <stdatomic.h>
#include <stdlib.h>

static atomic_long fail_countdown = -1;
static atomic_bool fail_sticky = false;

void rp_alloc_fail_after(long n, bool sticky)
{
    atomic_store(&fail_sticky, sticky);
    atomic_store(&fail_countdown, n);
}

static bool should_fail(void)
{
    long c = atomic_load(&fail_countdown);
    if (c < 0)
        return false;
    if (c == 0) {
        if (!atomic_load(&fail_sticky))
            atomic_store(&fail_countdown, -1);
        return true;
    }
    atomic_fetch_sub(&fail_countdown, 1);
    return false;
}

void *rp_malloc(size_t n)
{
    if (should_fail())
        return NULL;
    return malloc(n ? n : 1);
}

void *rp_calloc(size_t count, size_t size)
{
    if (should_fail())
        return NULL;
    return calloc(count ? count : 1, size ? size : 1);
}

void *rp_realloc(void *p, size_t n)
{
    if (should_fail())
        return NULL;
    return realloc(p, n ? n : 1);
}

char *rp_strndup(const char *s, size_t n)
{
    char *d = rp_malloc(n + 1);
    if (!d)
        return NULL;
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

char *rp_strdup(const char *s)
{
    return rp_strndup(s, strlen(s));
}

void rp_free(void *p)
{
    free(p);
}

void *rp_malloc_aligned(size_t n)
{
    if (should_fail())
        return NULL;
    void *p = NULL;
    size_t rounded = (n + 63) & ~(size_t)63;
    if (posix_memalign(&p, 64, rounded ? rounded : 64) != 0)
        return NULL;
    return p;
}

void rp_free_aligned(void *p)
{
    free(p);
}
