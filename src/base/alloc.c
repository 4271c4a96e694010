/*
 * alloc.c - every heap allocation in Rapid goes through here.
 *
 * In normal runs these are thin wrappers over libc (rp_malloc_huge maps anonymous
 * memory itself, so that it can ask for 2 MiB pages). Tests call
 * rp_alloc_fail_after(n, sticky) to make the (n+1)th allocation fail, so every
 * out-of-memory path can be exercised (SQLite's OOM testing).
 */
#include "base.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

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

#define HUGE_PAGE ((size_t)2 << 20)

void *rp_malloc_huge(size_t n)
{
    if (should_fail())
        return NULL;
    size_t size = (n + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    if (size == 0 || size < n)
        return NULL;
    // Map one huge page more than needed and trim both ends to a 2 MiB boundary.
    uint8_t *p = mmap(NULL, size + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    uint8_t *a = (uint8_t *)(((uintptr_t)p + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    if (a > p)
        munmap(p, (size_t)(a - p));
    if (a + size < p + size + HUGE_PAGE)
        munmap(a + size, (size_t)(p + size + HUGE_PAGE - (a + size)));
#ifdef MADV_HUGEPAGE
    madvise(a, size, MADV_HUGEPAGE); // advice only: 4 KiB pages when the kernel has no huge ones
#endif
    return a;
}

void rp_free_huge(void *p, size_t n)
{
    if (p)
        munmap(p, (n + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1));
}

bool rp_huge_pages_enabled(void)
{
    char line[128] = "";
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (!f)
        return false;
    bool ok = fgets(line, sizeof(line), f) != NULL;
    fclose(f);
    return ok && !strstr(line, "[never]");
}
