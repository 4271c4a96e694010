/*
 * test_util.h - helpers shared by the cmocka test programs.
 *
 * rp_test_conformance(): the path of ../shared/conformance (or $RP_SHARED_DIR/conformance).
 * Tests that need it skip with a message when it is absent, except under CI=true,
 * where its absence fails the test, so a wrong path cannot pass.
 * rp_test_source(rel): a path inside the source tree ($RP_SOURCE_DIR, set by CTest).
 * rp_test_device(): the device model-level tests load on ($RP_TEST_DEVICE, default "cpu").
 * rp_test_run_shell(): runs a command line, its stdout and stderr into buffers.
 */
#ifndef RP_TEST_UTIL_H
#define RP_TEST_UTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cmocka.h>

// The device the model-level tests run on: $RP_TEST_DEVICE ("cuda" on the GPU machine,
// tests/gpu/run.sh), else "cpu".
// xorshift64: the tests' reproducible random numbers (*state non-zero).
static inline uint64_t rp_test_xorshift(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *state = x;
}

static inline const char *rp_test_device(void)
{
    const char *d = getenv("RP_TEST_DEVICE");
    return d && *d ? d : "cpu";
}

static inline const char *rp_test_source_dir(void)
{
    const char *s = getenv("RP_SOURCE_DIR");
    return s && *s ? s : ".";
}

// A path under the source tree; returns a static buffer (one call at a time).
static inline const char *rp_test_source(const char *rel)
{
    static char buf[4096];
    snprintf(buf, sizeof(buf), "%s/%s", rp_test_source_dir(), rel);
    return buf;
}

static inline const char *rp_test_conformance_dir(void)
{
    static char buf[4096];
    const char *env = getenv("RP_SHARED_DIR");
    if (env && *env)
        snprintf(buf, sizeof(buf), "%s/conformance", env);
    else
        snprintf(buf, sizeof(buf), "%s/../shared/conformance", rp_test_source_dir());
    struct stat st;
    if (stat(buf, &st) == 0 && S_ISDIR(st.st_mode))
        return buf;
    return NULL;
}

// Use at the top of a test: binds `var` to the conformance dir or skips/fails.
#define RP_TEST_NEED_CONFORMANCE(var)                                                                                  \
    const char *var = rp_test_conformance_dir();                                                                       \
    do {                                                                                                               \
        if (!var) {                                                                                                    \
            const char *ci = getenv("CI");                                                                             \
            if (ci && strcmp(ci, "true") == 0)                                                                         \
                fail_msg("../shared/conformance is missing (looked next to %s); under CI=true that is a failure",     \
                         rp_test_source_dir());                                                                        \
            print_message("skipping: ../shared/conformance not found next to %s\n", rp_test_source_dir());            \
            skip();                                                                                                    \
        }                                                                                                              \
    } while (0)

// Runs a shell command line with stderr going through errfile; stdout into out and stderr into
// err (both NUL-terminated, cut at their capacity). Its exit status, -1 when it did not exit.
static inline int rp_test_run_shell(const char *line, const char *errfile, char *out, size_t out_cap, char *err,
                                    size_t err_cap)
{
    char *cmd = malloc(strlen(line) + strlen(errfile) + 16);
    assert_non_null(cmd);
    sprintf(cmd, "%s 2>'%s'", line, errfile);
    FILE *p = popen(cmd, "r");
    free(cmd);
    assert_non_null(p);
    out[fread(out, 1, out_cap - 1, p)] = 0;
    int status = pclose(p);
    FILE *e = fopen(errfile, "r");
    err[e ? fread(err, 1, err_cap - 1, e) : 0] = 0;
    if (e)
        fclose(e);
    remove(errfile);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

#endif
