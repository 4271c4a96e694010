/*
 * test_stop.c - the stop-string matcher (gen.c): each case is pushed whole,
 * byte by byte, and cut in two at every byte; all must release the same
 * text (everything before the first match to complete, or everything when nothing
 * matches) and report the same match.
 */
#include "test_util.h"

#include "server/server_int.h"

typedef struct scase {
    const char *text;
    const char *stops[4];
    const char *out; // the released text
    int matched;     // index of the matching stop string, -1 none
} scase;

static const scase cases[] = {
    {"hello world", {"world"}, "hello ", 0},
    {"hello world", {"xyz"}, "hello world", -1},
    {"hello world", {NULL}, "hello world", -1},
    {"abcabd", {"abd"}, "abc", 0},
    {"aaab", {"aab"}, "a", 0},
    {"one\n\ntwo", {"\n\n", "two"}, "one", 0},
    {"one two\n\n", {"\n\n", "two"}, "one ", 1}, // the match that completes first wins
    {"abcdef", {"abcdef", "cd"}, "ab", 1},
    {"xabc", {"bc", "abc"}, "x", 1}, // same end: the longest
    {"xxENDxxEND", {"END"}, "xx", 0},
    {"partial EN", {"END"}, "partial EN", -1}, // a held prefix is released at the end
    {"E", {"END"}, "E", -1},
    {"END", {"END"}, "", 0},
    {"stop at the start", {"stop"}, "", 0},
    {"caf\xC3\xA9 ol\xC3\xA9!", {"\xC3\xA9!"}, "caf\xC3\xA9 ol", 0},
    {"<|im_end|> tail", {"<|im_end|>", "<|"}, "", 1},
    {"ab<|x", {"<|im_end|>", "<|"}, "ab", 1},
    {"longer overlapping overlap", {"overlap", "overlapping o"}, "longer ", 0},
};

static void check(const scase *c, const size_t *cuts, size_t n_cuts, const char *how)
{
    int n_stops = 0;
    while (n_stops < 4 && c->stops[n_stops])
        n_stops++;
    rp_stop_matcher m;
    rp_stop_init(&m, (char *const *)c->stops, n_stops);
    rp_buf got;
    rp_buf_init(&got);
    size_t len = strlen(c->text), at = 0;
    bool hit = false;
    for (size_t i = 0; i <= n_cuts && !hit; i++) {
        size_t end = i < n_cuts ? cuts[i] : len;
        const char *o;
        size_t ol;
        hit = rp_stop_push(&m, c->text + at, end - at, &o, &ol);
        rp_buf_append(&got, o, ol);
        at = end;
    }
    if (!hit) {
        const char *o;
        size_t ol;
        rp_stop_flush(&m, &o, &ol);
        rp_buf_append(&got, o, ol);
    }
    const char *g = got.data ? got.data : "";
    if (strcmp(g, c->out) != 0 || m.matched != c->matched)
        fail_msg("'%s' (%s): released '%s' matched %d, expected '%s' matched %d", c->text, how, g, m.matched, c->out,
                 c->matched);
    rp_buf_deinit(&got);
    rp_stop_deinit(&m);
}

static void test_cases(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const scase *c = &cases[i];
        size_t len = strlen(c->text);
        check(c, NULL, 0, "whole");
        size_t cuts[256];
        for (size_t k = 0; k < len; k++)
            cuts[k] = k + 1;
        check(c, cuts, len > 0 ? len - 1 : 0, "byte by byte");
        for (size_t k = 0; k <= len; k++) {
            cuts[0] = k;
            check(c, cuts, 1, "cut in two");
        }
    }
}

// After a match nothing more comes out.
static void test_after_match(void **state)
{
    (void)state;
    char *stops[] = {"x"};
    rp_stop_matcher m;
    rp_stop_init(&m, stops, 1);
    const char *o;
    size_t ol;
    assert_true(rp_stop_push(&m, "abxcd", 5, &o, &ol));
    assert_int_equal(ol, 2);
    assert_true(rp_stop_push(&m, "more", 4, &o, &ol));
    assert_int_equal(ol, 0);
    rp_stop_flush(&m, &o, &ol);
    assert_int_equal(ol, 0);
    rp_stop_deinit(&m);
}

// Held text never holds more than the longest stop string (minus one) bytes.
static void test_bounded_hold(void **state)
{
    (void)state;
    char *stops[] = {"aaaaab"};
    rp_stop_matcher m;
    rp_stop_init(&m, stops, 1);
    size_t total = 0;
    for (int i = 0; i < 1000; i++) {
        const char *o;
        size_t ol;
        assert_false(rp_stop_push(&m, "a", 1, &o, &ol));
        total += ol;
        assert_true(m.held.len <= 5);
    }
    assert_int_equal(total, 1000 - 5);
    rp_stop_deinit(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cases),
        cmocka_unit_test(test_after_match),
        cmocka_unit_test(test_bounded_hold),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
