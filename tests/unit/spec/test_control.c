/*
 * test_control.c - the adaptive draft-length controller on synthetic requests.
 *
 * Acceptance sequences stand in for text: a copied file (every draft accepted),
 * prose (nothing accepted), a switch between the two, MTP whose second draft is
 * always wrong, and a busy batch where verification costs as much as decoding.
 */
#include "test_util.h"

#include "spec/spec.h"

#include <math.h>

static rp_spec_ctl make(int k_max)
{
    rp_spec_ctl_params p;
    rp_spec_ctl_params_default(&p);
    p.k_max = k_max;
    rp_spec_ctl c;
    assert_int_equal(rp_spec_ctl_init(&c, &p), RP_OK);
    return c;
}

static const int NGRAM_ONLY[RP_SPEC_N_METHODS] = {64, 0, 0};

static void test_params(void **state)
{
    (void)state;
    rp_spec_ctl_params p;
    rp_spec_ctl c;
    rp_spec_ctl_params_default(&p);
    assert_int_equal(rp_spec_ctl_init(&c, &p), RP_OK);
    rp_spec_ctl_params bad = p;
    bad.k_max = 0;
    assert_int_equal(rp_spec_ctl_init(&c, &bad), RP_ERR_INVALID);
    assert_non_null(strstr(rp_error_message(), "num_speculative_tokens"));
    bad.k_max = RP_SPEC_K_MAX + 1;
    assert_int_equal(rp_spec_ctl_init(&c, &bad), RP_ERR_INVALID);
    bad = p;
    bad.min_gain = 0.5;
    assert_int_equal(rp_spec_ctl_init(&c, &bad), RP_ERR_INVALID);
    bad.min_gain = NAN;
    assert_int_equal(rp_spec_ctl_init(&c, &bad), RP_ERR_INVALID);
    bad = p;
    bad.decay = 1.0;
    assert_int_equal(rp_spec_ctl_init(&c, &bad), RP_ERR_INVALID);
    bad.decay = 0.0;
    assert_int_equal(rp_spec_ctl_init(&c, &bad), RP_ERR_INVALID);
    bad = p;
    bad.probe_after = 0;
    assert_int_equal(rp_spec_ctl_init(&c, &bad), RP_ERR_INVALID);
    assert_string_equal(rp_spec_method_name(RP_SPEC_NGRAM), "ngram");
    assert_string_equal(rp_spec_method_name(RP_SPEC_MTP), "mtp");
    assert_string_equal(rp_spec_method_name(RP_SPEC_DRAFT), "draft");
    assert_string_equal(rp_spec_method_name((rp_spec_method)7), "?");
}

static void test_expected_math(void **state)
{
    (void)state;
    rp_spec_ctl c = make(8);
    // Untried: every position at the prior (0.5 for prompt lookup).
    assert_true(fabs(rp_spec_ctl_accept_rate(&c, RP_SPEC_NGRAM, 1) - 0.5) < 1e-12);
    assert_true(fabs(rp_spec_ctl_expected(&c, RP_SPEC_NGRAM, 0) - 1.0) < 1e-12);
    assert_true(fabs(rp_spec_ctl_expected(&c, RP_SPEC_NGRAM, 2) - 1.75) < 1e-12);
    // One observation: 2 drafted, 1 accepted. Pooled (1 + 2*0.5) / (2 + 2) = 0.5 (decay scales zeros);
    // position 1: (1 + 0.5) / (1 + 1) = 3/4; position 2 leans on position 1: (0 + 0.75) / (1 + 1) = 3/8;
    // position 3, never tried, is position 2's.
    rp_spec_ctl_observe(&c, RP_SPEC_NGRAM, 2, 1);
    assert_true(fabs(rp_spec_ctl_accept_rate(&c, RP_SPEC_NGRAM, 1) - 0.75) < 1e-12);
    assert_true(fabs(rp_spec_ctl_accept_rate(&c, RP_SPEC_NGRAM, 2) - 0.375) < 1e-12);
    assert_true(fabs(rp_spec_ctl_accept_rate(&c, RP_SPEC_NGRAM, 3) - 0.375) < 1e-12);
    assert_true(fabs(rp_spec_ctl_expected(&c, RP_SPEC_NGRAM, 2) - (1 + 0.75 + 0.75 * 0.375)) < 1e-12);
    // Out-of-range arguments are ignored / zero.
    rp_spec_ctl_observe(&c, (rp_spec_method)9, 3, 3);
    rp_spec_ctl_observe(&c, RP_SPEC_NGRAM, 0, 0);
    rp_spec_ctl_observe(&c, RP_SPEC_NGRAM, 2, 5); // clamped to 2 of 2
    assert_true(rp_spec_ctl_accept_rate(&c, RP_SPEC_NGRAM, 2) > 0.375);
    assert_true(rp_spec_ctl_accept_rate(&c, (rp_spec_method)9, 1) == 0.0);
    assert_true(rp_spec_ctl_accept_rate(&c, RP_SPEC_NGRAM, 0) == 0.0);
}

// A file copied back: everything drafted is accepted. k climbs to the cap.
static void test_grows_on_accepted_runs(void **state)
{
    (void)state;
    rp_spec_ctl c = make(32);
    rp_spec_cost cost = {0.02, {0, 0, 0}, 0};
    rp_spec_method m;
    int k, first = -1;
    for (int step = 0; step < 40; step++) {
        rp_spec_ctl_choose(&c, NGRAM_ONLY, &cost, &m, &k);
        assert_int_equal(m, RP_SPEC_NGRAM);
        assert_true(k >= 1);
        if (first < 0)
            first = k;
        rp_spec_ctl_observe(&c, m, k, k);
    }
    print_message("  k from %d to %d\n", first, k);
    assert_true(first < 8);
    assert_int_equal(k, 32);
    // available caps it
    const int few[RP_SPEC_N_METHODS] = {5, 0, 0};
    rp_spec_ctl_choose(&c, few, &cost, &m, &k);
    assert_int_equal(k, 5);
}

// Prose: drafts are rejected. k falls to 0 in a few steps and then only rare probes draft.
static void test_shrinks_to_zero(void **state)
{
    (void)state;
    rp_spec_ctl c = make(16);
    rp_spec_cost cost = {0.03, {0, 0, 0}, 0};
    rp_spec_method m;
    int k, zero_at = -1, probes = 0;
    for (int step = 0; step < 1000; step++) {
        rp_spec_ctl_choose(&c, NGRAM_ONLY, &cost, &m, &k);
        if (k == 0 && zero_at < 0)
            zero_at = step;
        if (zero_at >= 0 && k > 0) {
            assert_int_equal(k, 1);
            probes++;
        }
        if (k > 0)
            rp_spec_ctl_observe(&c, m, k, 0);
    }
    print_message("  k = 0 from step %d, %d probes in the rest\n", zero_at, probes);
    assert_true(zero_at >= 0 && zero_at <= 6);
    assert_true(probes >= 3 && probes <= 8); // waits 16, 32, ... up to 1024 choices
}

// Prose, then a file being copied. With the engine's shadow observations (what
// prompt lookup would have proposed, checked against the emitted tokens) the
// controller resumes at once; with probes alone, at the next probe.
static void test_switch(void **state)
{
    (void)state;
    for (int shadow = 1; shadow >= 0; shadow--) {
        rp_spec_ctl c = make(16);
        rp_spec_cost cost = {0.03, {0, 0, 0}, 0};
        rp_spec_method m;
        int k;
        for (int step = 0; step < 200; step++) {
            rp_spec_ctl_choose(&c, NGRAM_ONLY, &cost, &m, &k);
            rp_spec_ctl_observe(&c, RP_SPEC_NGRAM, k > 0 ? k : shadow ? 4 : 0, 0);
        }
        int resumed = -1;
        for (int step = 0; step < 1200 && resumed < 0; step++) {
            rp_spec_ctl_choose(&c, NGRAM_ONLY, &cost, &m, &k);
            if (k >= 4)
                resumed = step;
            rp_spec_ctl_observe(&c, RP_SPEC_NGRAM, k > 0 ? k : shadow ? 4 : 0, k > 0 ? k : shadow ? 4 : 0);
        }
        print_message("  %s: drafting 4+ again after %d steps\n", shadow ? "shadow observations" : "probes only",
                      resumed);
        assert_true(resumed >= 0);
        if (shadow)
            assert_true(resumed <= 8);
    }
}

// MTP whose first draft is usually right and second always wrong: one token.
static void test_per_position(void **state)
{
    (void)state;
    rp_spec_ctl c = make(8);
    rp_spec_cost cost = {0.02, {0, 0.15, 0}, 0};
    const int mtp[RP_SPEC_N_METHODS] = {0, 8, 0};
    rp_spec_method m;
    int k, hist[9] = {0};
    for (int step = 0; step < 300; step++) {
        rp_spec_ctl_choose(&c, mtp, &cost, &m, &k);
        if (k > 0) {
            assert_int_equal(m, RP_SPEC_MTP);
            rp_spec_ctl_observe(&c, m, k, step % 10 == 0 ? 0 : 1);
        }
        if (step >= 100)
            hist[k]++;
    }
    print_message("  k = 0: %d, 1: %d, 2: %d, 3+: %d of 200\n", hist[0], hist[1], hist[2],
                  200 - hist[0] - hist[1] - hist[2]);
    assert_true(hist[1] >= 180); // position 2 is retried now and then, as its evidence fades
    assert_true(rp_spec_ctl_accept_rate(&c, RP_SPEC_MTP, 1) > 0.8);
}

// A busy batch: a verified token costs what a decoded one does. Never worth it.
static void test_busy_batch(void **state)
{
    (void)state;
    rp_spec_ctl c = make(8);
    for (int i = 0; i < 50; i++)
        rp_spec_ctl_observe(&c, RP_SPEC_NGRAM, 8, 7); // good acceptance
    rp_spec_cost busy = {1.0 / 16, {0, 0, 0}, 15};
    rp_spec_method m;
    int k, drafted = 0;
    for (int step = 0; step < 200; step++) {
        rp_spec_ctl_choose(&c, NGRAM_ONLY, &busy, &m, &k);
        drafted += k > 0;
        if (k > 0)
            rp_spec_ctl_observe(&c, m, k, k);
    }
    assert_int_equal(drafted, 0); // not even probes: nothing to learn
    // Alone with the same acceptance it drafts.
    rp_spec_cost alone = {0.02, {0, 0, 0}, 0};
    rp_spec_ctl_choose(&c, NGRAM_ONLY, &alone, &m, &k);
    assert_true(k >= 4);
}

// Method choice: free prompt lookup that is accepted beats costly MTP; without a
// match, MTP drafts.
static void test_method_choice(void **state)
{
    (void)state;
    rp_spec_ctl c = make(8);
    for (int i = 0; i < 20; i++) {
        rp_spec_ctl_observe(&c, RP_SPEC_NGRAM, 8, 8);
        rp_spec_ctl_observe(&c, RP_SPEC_MTP, 3, 2);
    }
    rp_spec_cost cost = {0.02, {0.0, 0.08, 0.2}, 0};
    const int both[RP_SPEC_N_METHODS] = {8, 8, 8}, mtp_draft[RP_SPEC_N_METHODS] = {0, 8, 8};
    rp_spec_method m;
    int k;
    rp_spec_ctl_choose(&c, both, &cost, &m, &k);
    assert_int_equal(m, RP_SPEC_NGRAM);
    assert_int_equal(k, 8);
    rp_spec_ctl_choose(&c, mtp_draft, &cost, &m, &k);
    assert_int_equal(m, RP_SPEC_MTP);
    assert_true(k >= 1 && k <= 4);
    // NULL cost: free drafting, alone.
    rp_spec_ctl_choose(&c, mtp_draft, NULL, &m, &k);
    assert_true(k >= 1);
    const int none[RP_SPEC_N_METHODS] = {0, 0, 0};
    rp_spec_ctl_choose(&c, none, &cost, &m, &k);
    assert_int_equal(k, 0);
}

// adaptive = false: always the cap (or what is available), first method in order.
static void test_fixed(void **state)
{
    (void)state;
    rp_spec_ctl_params p;
    rp_spec_ctl_params_default(&p);
    p.adaptive = false;
    p.k_max = 5;
    rp_spec_ctl c;
    assert_int_equal(rp_spec_ctl_init(&c, &p), RP_OK);
    for (int i = 0; i < 20; i++)
        rp_spec_ctl_observe(&c, RP_SPEC_NGRAM, 5, 0);
    rp_spec_method m;
    int k;
    const int a[RP_SPEC_N_METHODS] = {9, 3, 0}, b[RP_SPEC_N_METHODS] = {0, 3, 7}, n[RP_SPEC_N_METHODS] = {0, 0, 0};
    rp_spec_ctl_choose(&c, a, NULL, &m, &k);
    assert_int_equal(m, RP_SPEC_NGRAM);
    assert_int_equal(k, 5);
    rp_spec_ctl_choose(&c, b, NULL, &m, &k);
    assert_int_equal(m, RP_SPEC_MTP);
    assert_int_equal(k, 3);
    rp_spec_ctl_choose(&c, n, NULL, &m, &k);
    assert_int_equal(k, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_params),
        cmocka_unit_test(test_expected_math),
        cmocka_unit_test(test_grows_on_accepted_runs),
        cmocka_unit_test(test_shrinks_to_zero),
        cmocka_unit_test(test_switch),
        cmocka_unit_test(test_per_position),
        cmocka_unit_test(test_busy_batch),
        cmocka_unit_test(test_method_choice),
        cmocka_unit_test(test_fixed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
