/*
 * bench_test_util.h - helpers shared by the bench module's tests: a scripted
 * clock (so every measured figure is exact and nothing depends on real
 * timing) and small JSON/file helpers.
 */
#ifndef RP_BENCH_TEST_UTIL_H
#define RP_BENCH_TEST_UTIL_H

#include "test_tmp.h"

#include "bench/bench_int.h"

#include <math.h>

// Each reading returns t, then advances it by step.
typedef struct fake_clock {
    double t, step;
    int calls;
} fake_clock;

static inline double fake_now(void *ctx)
{
    fake_clock *c = ctx;
    c->calls++;
    double t = c->t;
    c->t += c->step;
    return t;
}

// Parses JSON text or fails the test.
static inline json_t *test_json(const char *text)
{
    json_error_t e;
    json_t *j = json_loads(text, 0, &e);
    if (!j)
        fail_msg("bad test JSON (%s): %s", e.text, text);
    return j;
}

// Asserts that haystack holds needle, printing both when it does not.
#define assert_contains(haystack, needle)                                                                              \
    do {                                                                                                               \
        const char *h_ = (haystack);                                                                                   \
        if (!h_ || !strstr(h_, (needle)))                                                                              \
            fail_msg("expected \"%s\" in \"%s\"", (needle), h_ ? h_ : "(null)");                                       \
    } while (0)

// Writes a JSON document to a file of the test folder; returns its path (rotating buffer).
static inline const char *test_write_json(const char *name, const json_t *j)
{
    const char *path = rp_test_tmp_path(name);
    assert_int_equal(json_dump_file(j, path, JSON_INDENT(1)), 0);
    return path;
}

static inline const char *test_write_text(const char *name, const char *text)
{
    const char *path = rp_test_tmp_path(name);
    rp_test_write_file(path, text, strlen(text));
    return path;
}

#endif
