/*
 * test_lookup.c - the prompt-lookup index against a brute-force search.
 *
 * The reference scans the whole sequence for the longest n (max down to min)
 * whose last n tokens occurred earlier, at the most recent such place, and
 * continues periodically past the end. Random sequences over small alphabets
 * (many matches), with random truncations and re-appends, must give the same
 * proposal after every operation. Plus hand cases, a copied file, bad
 * arguments and allocation failures.
 *
 * rp_spec_lookup_follow (the copy pointer): on random sequences its proposal is
 * the continuation of a place that agrees with the end as much as it says, and at
 * least as much as propose's match; a file that repeats itself is copied without
 * a wrong proposal where propose makes some; a copy with a name renamed resumes
 * drafting one token after each edit, where propose has nothing or a wrong guess.
 */
#include "test_util.h"

#include "spec/spec.h"

static uint64_t rng_state = 0x1234567;
static uint32_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}

// Brute force: returns count written, *match n (0 if none).
static int reference(const int32_t *t, int len, int n_max, int min_ngram, int k, int32_t *out, int *match)
{
    *match = 0;
    int end = len - 1;
    if (k <= 0 || end < 1)
        return 0;
    for (int g = end < n_max ? end : n_max; g >= (min_ngram < 1 ? 1 : min_ngram); g--)
        for (int j = end - 1; j >= g - 1; j--) {
            if (memcmp(t + j - g + 1, t + end - g + 1, (size_t)g * sizeof(int32_t)) != 0)
                continue;
            for (int i = 0; i < k; i++)
                out[i] = j + 1 + i <= end ? t[j + 1 + i] : out[i - (end - j)];
            *match = g;
            return k;
        }
    return 0;
}

// The continuation from place j (< len - 1), periodic past the end, as the index writes it.
static bool reference_from(const int32_t *t, int len, int j, int k, int32_t *out)
{
    for (int i = 0; i < k; i++)
        out[i] = j + 1 + i <= len - 1 ? t[j + 1 + i] : out[i - (len - 1 - j)];
    return true;
}

static void check_same(const rp_spec_lookup *x, const int32_t *t, int len, int n_max)
{
    assert_int_equal(rp_spec_lookup_len(x), len);
    int32_t a[24], b[24];
    for (int min_ngram = 1; min_ngram <= n_max + 1; min_ngram += 2) {
        int ma, mb, k = 1 + (int)(rnd() % 24);
        int na = rp_spec_lookup_propose(x, min_ngram, k, a, &ma);
        int nb = reference(t, len, n_max, min_ngram, k, b, &mb);
        if (na != nb || ma != mb || memcmp(a, b, (size_t)na * sizeof(int32_t)) != 0)
            fail_msg("len %d min %d k %d: index gives %d tokens (n %d), reference %d (n %d)", len, min_ngram, k, na, ma,
                     nb, mb);
    }
}

static void test_hand_cases(void **state)
{
    (void)state;
    rp_spec_lookup *x;
    assert_int_equal(rp_spec_lookup_create(4, &x), RP_OK);
    int32_t out[8];
    int m = -1;
    assert_int_equal(rp_spec_lookup_propose(x, 1, 4, out, &m), 0); // empty
    assert_int_equal(m, 0);
    const int32_t a[] = {1, 2, 3, 4, 9, 1, 2, 3};
    assert_int_equal(rp_spec_lookup_append(x, a, 8), RP_OK);
    assert_int_equal(rp_spec_lookup_propose(x, 1, 3, out, &m), 3);
    assert_int_equal(m, 3);
    assert_int_equal(out[0], 4);
    assert_int_equal(out[1], 9);
    assert_int_equal(out[2], 1);
    assert_int_equal(rp_spec_lookup_propose(x, 4, 3, out, &m), 0); // no 4-gram match
    assert_int_equal(m, 0);
    assert_int_equal(rp_spec_lookup_propose(x, 1, 0, out, NULL), 0);
    // "1 2 3" again: of its two earlier occurrences, the most recent (followed by 50 2).
    const int32_t b[] = {50, 2, 3, 60, 1, 2, 3};
    assert_int_equal(rp_spec_lookup_append(x, b, 7), RP_OK);
    assert_int_equal(rp_spec_lookup_propose(x, 1, 2, out, &m), 2);
    assert_int_equal(m, 3);
    assert_int_equal(out[0], 50);
    assert_int_equal(out[1], 2);
    rp_spec_lookup_destroy(x);
}

static void test_longest_then_recent(void **state)
{
    (void)state;
    rp_spec_lookup *x;
    assert_int_equal(rp_spec_lookup_create(3, &x), RP_OK);
    // "1 2 3" first followed by 7; later "9 2 3" followed by 8; the end "1 2 3" matches the
    // first (n = 3) although "2 3" occurred more recently.
    const int32_t a[] = {1, 2, 3, 7, 5, 9, 2, 3, 8, 6, 1, 2, 3};
    assert_int_equal(rp_spec_lookup_append(x, a, 13), RP_OK);
    int32_t out[4];
    int m;
    assert_int_equal(rp_spec_lookup_propose(x, 1, 2, out, &m), 2);
    assert_int_equal(m, 3);
    assert_int_equal(out[0], 7);
    assert_int_equal(out[1], 5);
    // With two earlier occurrences of the longest match, the most recent.
    const int32_t b[] = {4, 1, 2, 3};
    assert_int_equal(rp_spec_lookup_append(x, b, 4), RP_OK);
    assert_int_equal(rp_spec_lookup_propose(x, 1, 1, out, &m), 1);
    assert_int_equal(m, 3);
    assert_int_equal(out[0], 4);
    rp_spec_lookup_destroy(x);
}

static void test_periodic(void **state)
{
    (void)state;
    rp_spec_lookup *x;
    assert_int_equal(rp_spec_lookup_create(4, &x), RP_OK);
    const int32_t run[] = {7, 7, 7, 7};
    assert_int_equal(rp_spec_lookup_append(x, run, 4), RP_OK);
    int32_t out[10];
    int m;
    assert_int_equal(rp_spec_lookup_propose(x, 1, 10, out, &m), 10);
    assert_int_equal(m, 3);
    for (int i = 0; i < 10; i++)
        assert_int_equal(out[i], 7);
    const int32_t ab[] = {1, 2, 1, 2, 1};
    rp_spec_lookup_truncate(x, 0);
    assert_int_equal(rp_spec_lookup_append(x, ab, 5), RP_OK);
    assert_int_equal(rp_spec_lookup_propose(x, 1, 5, out, &m), 5);
    const int32_t want[] = {2, 1, 2, 1, 2};
    assert_memory_equal(out, want, sizeof(want));
    rp_spec_lookup_destroy(x);
}

// A file, then its copy being generated: after a few tokens of the copy the index
// proposes the rest of the file, even where the file repeats itself.
static void test_copy(void **state)
{
    (void)state;
    enum { F = 400 };
    int32_t file[F];
    for (int i = 0; i < F; i++)
        file[i] = (int32_t)(i % 37 == 0 ? 5 : 100 + rnd() % 900); // token 5 is a frequent "newline"
    rp_spec_lookup *x;
    assert_int_equal(rp_spec_lookup_create(4, &x), RP_OK);
    const int32_t intro[] = {1, 2, 3};
    assert_int_equal(rp_spec_lookup_append(x, intro, 3), RP_OK);
    assert_int_equal(rp_spec_lookup_append(x, file, F), RP_OK);
    assert_int_equal(rp_spec_lookup_append(x, intro, 2), RP_OK); // the reply starts
    assert_int_equal(rp_spec_lookup_append(x, file, 4), RP_OK);  // and copies
    int at = 4, steps = 0;
    int32_t out[16];
    while (at < F) {
        int m, n = rp_spec_lookup_propose(x, 2, 16, out, &m);
        assert_true(n > 0);
        int ok = 0;
        while (ok < n && at + ok < F && out[ok] == file[at + ok])
            ok++;
        int take = ok + 1 < F - at ? ok + 1 : F - at; // accepted drafts plus the target's token
        assert_int_equal(rp_spec_lookup_append(x, file + at, take), RP_OK);
        at += take;
        steps++;
    }
    print_message("  copied %d tokens in %d steps\n", F - 4, steps);
    assert_true(steps <= (F - 4) / 16 + 3);
    rp_spec_lookup_destroy(x);
}

static void test_random_against_reference(void **state)
{
    (void)state;
    enum { CAP = 3000 };
    int32_t *t = malloc(CAP * sizeof(int32_t));
    const int alphabets[] = {2, 3, 5, 20};
    const int ns[] = {1, 3, 4, 8, 16};
    for (int ai = 0; ai < 4; ai++)
        for (int ni = 0; ni < 5; ni++) {
            int A = alphabets[ai], N = ns[ni], len = 0;
            rp_spec_lookup *x;
            assert_int_equal(rp_spec_lookup_create(N, &x), RP_OK);
            for (int step = 0; step < 300; step++) {
                uint32_t r = rnd() % 10;
                if (r < 7 || len == 0) { // append 1..8 tokens
                    int n = 1 + (int)(rnd() % 8);
                    if (len + n > CAP)
                        n = CAP - len;
                    for (int i = 0; i < n; i++)
                        t[len + i] = (int32_t)(rnd() % (uint32_t)A);
                    assert_int_equal(rp_spec_lookup_append(x, t + len, n), RP_OK);
                    len += n;
                } else { // drop 0..10 tokens (a rejected run)
                    int drop = (int)(rnd() % 11);
                    len = drop > len ? 0 : len - drop;
                    rp_spec_lookup_truncate(x, len);
                }
                check_same(x, t, len, N);
            }
            rp_spec_lookup_truncate(x, len + 5); // longer: nothing happens
            check_same(x, t, len, N);
            rp_spec_lookup_truncate(x, -3);
            check_same(x, t, 0, N);
            rp_spec_lookup_destroy(x);
        }
    free(t);
}

// Long sequences grow the table many times; truncating everything and rebuilding
// gives the same proposals.
static void test_long(void **state)
{
    (void)state;
    enum { L = 60000 };
    int32_t *t = malloc(L * sizeof(int32_t));
    for (int i = 0; i < L; i++)
        t[i] = (int32_t)(rnd() % 300);
    rp_spec_lookup *x;
    assert_int_equal(rp_spec_lookup_create(4, &x), RP_OK);
    for (int at = 0; at < L; at += 1000)
        assert_int_equal(rp_spec_lookup_append(x, t + at, 1000), RP_OK);
    check_same(x, t, L, 4);
    rp_spec_lookup_truncate(x, L / 2);
    check_same(x, t, L / 2, 4);
    assert_int_equal(rp_spec_lookup_append(x, t + L / 2, L / 2), RP_OK);
    check_same(x, t, L, 4);
    rp_spec_lookup_destroy(x);
    free(t);
}

// Agreement of place j with the end of t[0, len), as lookup.c counts it (up to 64).
static int agree_ref(const int32_t *t, int len, int j)
{
    int n = 0;
    while (n < 64 && j - n >= 0 && t[j - n] == t[len - 1 - n])
        n++;
    return n;
}

static void test_follow_random(void **state)
{
    (void)state;
    enum { CAP = 2000 };
    int32_t *t = malloc(CAP * sizeof(int32_t));
    int32_t a[20], b[20], c[20];
    for (int alpha = 2; alpha <= 20; alpha *= 3) {
        rp_spec_lookup *x;
        assert_int_equal(rp_spec_lookup_create(4, &x), RP_OK);
        int len = 0;
        for (int step = 0; step < 400; step++) {
            if (rnd() % 8 || len == 0) { // append 1..6 tokens: often a copy of an earlier stretch
                int n = 1 + (int)(rnd() % 6), from = len ? (int)(rnd() % (uint32_t)len) : 0;
                if (len + n > CAP)
                    n = CAP - len;
                for (int i = 0; i < n; i++)
                    t[len + i] = rnd() % 3 && from + i < len ? t[from + i] : (int32_t)(rnd() % (uint32_t)alpha);
                assert_int_equal(rp_spec_lookup_append(x, t + len, n), RP_OK);
                len += n;
            } else {
                len -= (int)(rnd() % (uint32_t)(len < 8 ? len + 1 : 8));
                rp_spec_lookup_truncate(x, len);
            }
            int k = 1 + (int)(rnd() % 20), min = 1 + (int)(rnd() % 3), mp, mf;
            int np = rp_spec_lookup_propose(x, min, k, a, &mp);
            int nf = rp_spec_lookup_follow(x, min, k, b, &mf);
            assert_true(nf == 0 || nf == k);
            assert_true(np == 0 || (nf == k && mf >= mp));
            if (nf == 0) {
                assert_int_equal(mf, 0);
                continue;
            }
            bool found = false; // some earlier place agrees mf tokens and continues as proposed
            for (int j = len - 2; j >= 0 && !found; j--)
                found = agree_ref(t, len, j) == mf && reference_from(t, len, j, k, c) && !memcmp(b, c, k * 4u);
            if (!found)
                fail_msg("alphabet %d len %d: follow proposes from no place agreeing %d tokens", alpha, len, mf);
        }
        rp_spec_lookup_destroy(x);
    }
    free(t);
}

// Copies the output `want` through x (which holds the prompt) with follow (or
// propose), drafts of up to 16 tokens; each step keeps the agreeing drafts plus
// the target's token. Returns the steps; *wrong counts proposals whose first token
// was wrong, *idle the steps that gained nothing from a draft (none, or wrong).
static int copy_through(rp_spec_lookup *x, bool follow, const int32_t *want, int n_want, int *wrong, int *idle)
{
    int at = 2, steps = 0;
    int32_t out[16];
    *wrong = *idle = 0;
    assert_int_equal(rp_spec_lookup_append(x, want, 2), RP_OK);
    while (at < n_want) {
        int m, n = follow ? rp_spec_lookup_follow(x, 2, 16, out, &m) : rp_spec_lookup_propose(x, 2, 16, out, &m);
        int ok = 0;
        while (ok < n && at + ok < n_want && out[ok] == want[at + ok])
            ok++;
        *wrong += n > 0 && ok == 0;
        *idle += ok == 0;
        int take = ok + 1 < n_want - at ? ok + 1 : n_want - at;
        assert_int_equal(rp_spec_lookup_append(x, want + at, take), RP_OK);
        at += take;
        steps++;
    }
    return steps;
}

// A file whose 12-token blocks recur with other text after them: the most recent
// occurrence of an n-gram is often the wrong place; the copy pointer is not.
static void test_follow_repeats(void **state)
{
    (void)state;
    enum { F = 600 };
    int32_t file[F], block[12];
    for (int i = 0; i < 12; i++)
        block[i] = 50 + i;
    for (int i = 0; i < F; i++)
        file[i] = i % 60 < 12 ? block[i % 60] : (int32_t)(100 + rnd() % 900);
    int wrong[2], idle, steps[2];
    for (int f = 0; f < 2; f++) {
        rp_spec_lookup *x;
        assert_int_equal(rp_spec_lookup_create(8, &x), RP_OK);
        assert_int_equal(rp_spec_lookup_append(x, file, F), RP_OK);
        steps[f] = copy_through(x, f, file, F, &wrong[f], &idle);
        rp_spec_lookup_destroy(x);
    }
    print_message("  repeats: propose %d steps, %d wrong; follow %d steps, %d wrong\n", steps[0], wrong[0], steps[1],
                  wrong[1]);
    assert_true(wrong[0] > 0); // (the case is one where the most recent occurrence misleads)
    assert_int_equal(wrong[1], 0);
    assert_true(steps[1] <= F / 16 + 4);
}

// The source names something with three tokens (700 701 702); the output is the
// source with two (800 801) in their place. An edit costs follow the steps of
// the new name's tokens and of the token after it (the model's own, with nothing
// drafted): then it proposes the source's continuation again.
static void test_follow_rename(void **state)
{
    (void)state;
    enum { F = 700 };
    int32_t file[F], out[F];
    int n_out = 0, edits = 0;
    for (int i = 0; i < F; i++)
        file[i] = i % 50 == 20 ? 700 : (int32_t)(100 + rnd() % 500);
    for (int i = 0; i + 2 < F; i++)
        if (file[i] == 700) {
            file[i + 1] = 701;
            file[i + 2] = 702;
        }
    for (int i = 0; i < F;)
        if (file[i] == 700) {
            out[n_out++] = 800;
            out[n_out++] = 801;
            i += 3;
            edits++;
        } else {
            out[n_out++] = file[i++];
        }
    int wrong[2], idle[2], steps[2];
    for (int f = 0; f < 2; f++) {
        rp_spec_lookup *x;
        assert_int_equal(rp_spec_lookup_create(8, &x), RP_OK);
        assert_int_equal(rp_spec_lookup_append(x, file, F), RP_OK);
        steps[f] = copy_through(x, f, out, n_out, &wrong[f], &idle[f]);
        rp_spec_lookup_destroy(x);
    }
    print_message("  rename (%d edits): propose %d steps (%d without a useful draft), follow %d (%d)\n", edits,
                  steps[0], idle[0], steps[1], idle[1]);
    assert_true(idle[1] <= 2 * edits + 1);
    assert_true(idle[0] > idle[1] + edits / 2); // (propose waits for a 2-gram through the new text)
    assert_true(steps[1] < steps[0]);
}

static void test_bad_args_and_oom(void **state)
{
    (void)state;
    rp_spec_lookup *x = (rp_spec_lookup *)1;
    assert_int_equal(rp_spec_lookup_create(0, &x), RP_ERR_INVALID);
    assert_null(x);
    assert_int_equal(rp_spec_lookup_create(RP_SPEC_NGRAM_MAX + 1, &x), RP_ERR_INVALID);
    rp_alloc_fail_after(0, false);
    assert_int_equal(rp_spec_lookup_create(4, &x), RP_ERR_NOMEM);
    rp_alloc_fail_after(-1, false);
    assert_int_equal(rp_spec_lookup_create(4, &x), RP_OK);
    assert_int_equal(rp_spec_lookup_append(x, NULL, 0), RP_OK);
    int32_t t[700];
    for (int i = 0; i < 700; i++)
        t[i] = (int32_t)(rnd() % 4);
    assert_int_equal(rp_spec_lookup_append(x, t, 100), RP_OK);
    // Every allocation of a growing append fails in turn: the index stays as it was.
    for (long n = 0; n < 4; n++) {
        rp_alloc_fail_after(n, false);
        rp_status st = rp_spec_lookup_append(x, t + 100, 600);
        rp_alloc_fail_after(-1, false);
        if (st == RP_OK) {
            check_same(x, t, 700, 4);
            rp_spec_lookup_destroy(x);
            return;
        }
        assert_int_equal(st, RP_ERR_NOMEM);
        check_same(x, t, 100, 4);
    }
    fail_msg("append never succeeded");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_cases),
        cmocka_unit_test(test_longest_then_recent),
        cmocka_unit_test(test_periodic),
        cmocka_unit_test(test_copy),
        cmocka_unit_test(test_random_against_reference),
        cmocka_unit_test(test_long),
        cmocka_unit_test(test_follow_random),
        cmocka_unit_test(test_follow_repeats),
        cmocka_unit_test(test_follow_rename),
        cmocka_unit_test(test_bad_args_and_oom),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
