/*
 * test_sample.c - the sampling chain: greedy, filters, penalties, the RNG's
 * determinism, the drawn distribution, parameter validation and bad logits.
 */
#include "test_util.h"

#include "sample/sample.h"

#include <float.h>
#include <math.h>

static rp_sampler *make(const rp_sample_params *p, int32_t n_vocab)
{
    rp_sampler *s = NULL;
    rp_status st = rp_sampler_create(p, n_vocab, &s);
    if (st != RP_OK)
        fail_msg("rp_sampler_create: %s", rp_error_message());
    return s;
}

// Deterministic pseudo-random logits for tests (not the sampler's RNG).
static uint64_t test_rng = 88172645463325252ULL;
static float rand_logit(float scale)
{
    test_rng ^= test_rng << 13;
    test_rng ^= test_rng >> 7;
    test_rng ^= test_rng << 17;
    return ((float)(test_rng >> 40) / (float)(1 << 24) * 2.0f - 1.0f) * scale;
}

static void test_greedy_argmax_and_ties(void **state)
{
    rp_sample_params p;
    rp_sample_params_default(&p);
    p.temperature = 0.0f;
    rp_sampler *s = make(&p, 6);
    float l1[6] = {0.1f, -3.0f, 2.5f, 2.4f, -INFINITY, 0.0f};
    assert_int_equal(rp_sampler_sample(s, l1), 2);
    float l2[6] = {1.0f, 3.0f, 0.0f, 3.0f, 3.0f, -1.0f};
    assert_int_equal(rp_sampler_sample(s, l2), 1); // ties -> lowest id
    float l3[6] = {7.0f, 7.0f, 7.0f, 7.0f, 7.0f, 7.0f};
    assert_int_equal(rp_sampler_sample(s, l3), 0);
    // probs is a one-hot at the greedy token
    float probs[6];
    assert_int_equal(rp_sampler_probs(s, l2, probs), RP_OK);
    for (int i = 0; i < 6; i++)
        assert_true(probs[i] == (i == 1 ? 1.0f : 0.0f));
    // logits are not modified
    assert_true(l1[2] == 2.5f && l1[4] == -INFINITY);
    rp_sampler_destroy(s);
}

static void test_top_k_1_is_greedy(void **state)
{
    enum { V = 1000 };
    static float l[V];
    const float temps[] = {0.01f, 0.5f, 1.0f, 2.0f, 100.0f};
    for (size_t ti = 0; ti < sizeof(temps) / sizeof(temps[0]); ti++) {
        rp_sample_params p;
        rp_sample_params_default(&p);
        p.temperature = temps[ti];
        p.top_k = 1;
        p.seed = 1234 + ti;
        rp_sampler *s = make(&p, V);
        for (int trial = 0; trial < 50; trial++) {
            for (int i = 0; i < V; i++)
                l[i] = rand_logit(5.0f);
            if (trial % 5 == 0)
                l[V - 1] = l[17] = 6.0f; // a tie at the top: lowest id wins
            int32_t best = 0;
            for (int i = 1; i < V; i++)
                if (l[i] > l[best])
                    best = i;
            assert_int_equal(rp_sampler_sample(s, l), best);
        }
        rp_sampler_destroy(s);
    }
}

static void test_seeded_reproducible(void **state)
{
    enum { V = 50, N = 2000 };
    float l[V];
    for (int i = 0; i < V; i++)
        l[i] = rand_logit(2.0f);
    const uint64_t seeds[] = {0, 1, 42, UINT64_MAX};
    for (size_t si = 0; si < 4; si++) {
        rp_sample_params p;
        rp_sample_params_default(&p);
        p.temperature = 0.9f;
        p.top_p = 0.95f;
        p.seed = seeds[si];
        rp_sampler *a = make(&p, V), *b = make(&p, V);
        int32_t first[64];
        for (int i = 0; i < N; i++) {
            int32_t ta = rp_sampler_sample(a, l), tb = rp_sampler_sample(b, l);
            assert_int_equal(ta, tb);
            if (i < 64)
                first[i] = ta;
        }
        // reset replays the same stream
        rp_sampler_reset(a, seeds[si]);
        for (int i = 0; i < 64; i++)
            assert_int_equal(rp_sampler_sample(a, l), first[i]);
        rp_sampler_destroy(a);
        rp_sampler_destroy(b);
    }
}

// The exact stream for one seed, so a change of RNG or chain shows up (it would
// change every user's seeded output).
static void test_golden_stream(void **state)
{
    float l[8] = {0.5f, 1.0f, -0.5f, 0.0f, 2.0f, 1.5f, -1.0f, 0.25f};
    rp_sample_params p;
    rp_sample_params_default(&p);
    p.seed = 7;
    rp_sampler *s = make(&p, 8);
    int32_t got[16];
    for (int i = 0; i < 16; i++)
        got[i] = rp_sampler_sample(s, l);
    rp_sampler_destroy(s);
    s = make(&p, 8);
    for (int i = 0; i < 16; i++)
        assert_int_equal(rp_sampler_sample(s, l), got[i]);
    rp_sampler_destroy(s);
    // Checked against an independent Python implementation of splitmix64 + xoshiro256**.
    static const int32_t want[16] = {5, 3, 5, 7, 7, 5, 0, 1, 4, 1, 4, 5, 7, 5, 4, 4};
    for (int i = 0; i < 16; i++)
        assert_int_equal(got[i], want[i]);
}

static void test_seeds_differ(void **state)
{
    enum { V = 100, N = 500 };
    float l[V];
    for (int i = 0; i < V; i++)
        l[i] = 0.0f; // uniform: two streams agree ~1% of the time
    rp_sample_params p;
    rp_sample_params_default(&p);
    p.seed = 1;
    rp_sampler *a = make(&p, V);
    p.seed = 2;
    rp_sampler *b = make(&p, V);
    int same = 0;
    for (int i = 0; i < N; i++)
        same += rp_sampler_sample(a, l) == rp_sampler_sample(b, l);
    assert_true(same < N / 10);
    rp_sampler_destroy(a);
    rp_sampler_destroy(b);
}

// Draws N tokens and compares the counts with the expected probabilities by a
// chi-square statistic; tokens with expected probability 0 must never appear.
static void check_distribution(rp_sampler *s, const float *l, const double *want, int V, int N)
{
    int counts[64] = {0};
    assert_true(V <= 64);
    for (int i = 0; i < N; i++) {
        int32_t t = rp_sampler_sample(s, l);
        assert_true(t >= 0 && t < V);
        counts[t]++;
    }
    double chi2 = 0.0;
    int df = -1;
    for (int i = 0; i < V; i++) {
        if (want[i] == 0.0) {
            if (counts[i] != 0)
                fail_msg("token %d has probability 0 but was drawn %d times", i, counts[i]);
            continue;
        }
        double e = want[i] * N, d = counts[i] - e;
        chi2 += d * d / e;
        df++;
    }
    // A generous bound: mean df, sd sqrt(2 df); 6 sd plus slack.
    double bound = df + 6.0 * sqrt(2.0 * df) + 5.0;
    if (chi2 > bound)
        fail_msg("chi-square %.2f > %.2f (df %d)", chi2, bound, df);
}

static void test_distribution_matches_softmax(void **state)
{
    enum { V = 10 };
    float l[V] = {1.0f, 0.5f, -0.3f, 2.0f, 0.0f, -1.0f, 1.2f, 0.7f, -2.0f, 0.1f};
    const float temps[] = {0.5f, 1.0f, 1.7f};
    for (size_t ti = 0; ti < 3; ti++) {
        double want[V], sum = 0.0;
        for (int i = 0; i < V; i++)
            sum += want[i] = exp((double)l[i] / temps[ti]);
        for (int i = 0; i < V; i++)
            want[i] /= sum;
        rp_sample_params p;
        rp_sample_params_default(&p);
        p.temperature = temps[ti];
        p.seed = 99 + ti;
        rp_sampler *s = make(&p, V);
        // probs agrees with the formula too
        float probs[V];
        assert_int_equal(rp_sampler_probs(s, l, probs), RP_OK);
        for (int i = 0; i < V; i++)
            assert_true(fabs(probs[i] - want[i]) < 1e-6);
        check_distribution(s, l, want, V, 200000);
        rp_sampler_destroy(s);
    }
}

// probs: {0.5, 0.3, 0.15, 0.05}
static void four_logits(float *l)
{
    const double pr[4] = {0.5, 0.3, 0.15, 0.05};
    for (int i = 0; i < 4; i++)
        l[i] = (float)log(pr[i]);
}

static void test_top_p(void **state)
{
    float l[4];
    four_logits(l);
    rp_sample_params p;
    rp_sample_params_default(&p);
    p.top_p = 0.75f; // 0.5 + 0.3 reaches it
    p.seed = 5;
    rp_sampler *s = make(&p, 4);
    const double want[4] = {0.5 / 0.8, 0.3 / 0.8, 0.0, 0.0};
    float probs[4];
    assert_int_equal(rp_sampler_probs(s, l, probs), RP_OK);
    for (int i = 0; i < 4; i++)
        assert_true(fabs(probs[i] - want[i]) < 1e-6);
    check_distribution(s, l, want, 4, 10000);
    rp_sampler_destroy(s);

    // A tiny top_p keeps only the top token.
    p.top_p = 0.01f;
    s = make(&p, 4);
    for (int i = 0; i < 1000; i++)
        assert_int_equal(rp_sampler_sample(s, l), 0);
    rp_sampler_destroy(s);

    // Needing exactly the first three.
    p.top_p = 0.9f;
    s = make(&p, 4);
    const double want3[4] = {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0.0};
    check_distribution(s, l, want3, 4, 10000);
    rp_sampler_destroy(s);
}

static void test_min_p(void **state)
{
    float l[4];
    four_logits(l);
    rp_sample_params p;
    rp_sample_params_default(&p);
    p.min_p = 0.2f; // keeps p >= 0.1
    p.seed = 6;
    rp_sampler *s = make(&p, 4);
    const double want[4] = {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0.0};
    check_distribution(s, l, want, 4, 10000);
    rp_sampler_destroy(s);

    p.min_p = 0.5f; // keeps p >= 0.25
    s = make(&p, 4);
    const double want2[4] = {0.5 / 0.8, 0.3 / 0.8, 0.0, 0.0};
    check_distribution(s, l, want2, 4, 10000);
    rp_sampler_destroy(s);

    // min_p = 1 keeps only the maximum (ties share)
    float lt[4] = {1.0f, 3.0f, 3.0f, 2.9f};
    p.min_p = 1.0f;
    s = make(&p, 4);
    const double want3[4] = {0.0, 0.5, 0.5, 0.0};
    check_distribution(s, lt, want3, 4, 10000);
    rp_sampler_destroy(s);
}

static void test_top_k(void **state)
{
    float l[4];
    four_logits(l);
    rp_sample_params p;
    rp_sample_params_default(&p);
    p.top_k = 2;
    p.seed = 8;
    rp_sampler *s = make(&p, 4);
    const double want[4] = {0.5 / 0.8, 0.3 / 0.8, 0.0, 0.0};
    check_distribution(s, l, want, 4, 10000);
    rp_sampler_destroy(s);

    // equal logits: top-k keeps the lowest ids
    float le[8] = {0};
    p.top_k = 3;
    s = make(&p, 8);
    const double want2[8] = {1.0 / 3, 1.0 / 3, 1.0 / 3, 0, 0, 0, 0, 0};
    check_distribution(s, le, want2, 8, 10000);
    rp_sampler_destroy(s);

    // top_k >= vocab is off
    p.top_k = 100;
    s = make(&p, 4);
    const double want3[4] = {0.5, 0.3, 0.15, 0.05};
    check_distribution(s, l, want3, 4, 20000);
    rp_sampler_destroy(s);

    // top-k then top-p: top-p sees the renormalized top 3 {0.5,0.3,0.15}/0.95
    p.top_k = 3;
    p.top_p = 0.8f; // 0.526 + 0.316 = 0.842 >= 0.8
    s = make(&p, 4);
    const double want4[4] = {0.5 / 0.8, 0.3 / 0.8, 0.0, 0.0};
    check_distribution(s, l, want4, 4, 10000);
    rp_sampler_destroy(s);
}

// Reference for a big vocabulary: sort everything, apply top-k/top-p/min-p by the book.
typedef struct ref_c {
    double l;
    int id;
} ref_c;
static int ref_cmp(const void *pa, const void *pb)
{
    const ref_c *a = pa, *b = pb;
    if (a->l != b->l)
        return a->l > b->l ? -1 : 1;
    return a->id - b->id;
}

static void test_large_vocab_against_reference(void **state)
{
    enum { V = 151936 };
    float *l = malloc(V * sizeof(float)), *probs = malloc(V * sizeof(float));
    ref_c *r = malloc(V * sizeof(ref_c));
    assert_non_null(l);
    assert_non_null(probs);
    assert_non_null(r);
    struct {
        float t, top_p, min_p;
        int top_k;
        float spread;
    } cases[] = {
        {1.0f, 0.9f, 0.0f, 0, 8.0f},   {0.7f, 0.95f, 0.0f, 0, 3.0f}, {1.3f, 0.5f, 0.05f, 0, 12.0f},
        {1.0f, 1.0f, 0.1f, 0, 8.0f},   {0.8f, 0.9f, 0.0f, 40, 6.0f}, {2.0f, 0.999f, 0.0f, 0, 1.0f},
        {1.0f, 0.99f, 0.0f, 0, 30.0f},
    };
    for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
        for (int i = 0; i < V; i++)
            l[i] = rand_logit(cases[ci].spread);
        rp_sample_params p;
        rp_sample_params_default(&p);
        p.temperature = cases[ci].t;
        p.top_p = cases[ci].top_p;
        p.min_p = cases[ci].min_p;
        p.top_k = cases[ci].top_k;
        rp_sampler *s = make(&p, V);
        assert_int_equal(rp_sampler_probs(s, l, probs), RP_OK);

        double lmax = -INFINITY;
        for (int i = 0; i < V; i++)
            lmax = fmax(lmax, l[i]);
        for (int i = 0; i < V; i++)
            r[i] = (ref_c){((double)l[i] - lmax) / p.temperature, i};
        qsort(r, V, sizeof(ref_c), ref_cmp);
        int n = p.top_k > 0 ? p.top_k : V;
        double total = 0.0;
        for (int i = 0; i < n; i++)
            total += exp(r[i].l);
        if (p.top_p < 1.0f) {
            double cum = 0.0;
            for (int i = 0; i < n; i++) {
                cum += exp(r[i].l);
                if (cum >= p.top_p * total) {
                    n = i + 1;
                    break;
                }
            }
        }
        int m = 0;
        for (int i = 0; i < n; i++)
            if (exp(r[i].l) >= p.min_p)
                m = i + 1;
        n = m;
        double kept = 0.0;
        for (int i = 0; i < n; i++)
            kept += exp(r[i].l);
        // Same set (up to a token at the exact boundary), same probabilities.
        int n_got = 0;
        double sum = 0.0;
        for (int i = 0; i < V; i++) {
            n_got += probs[i] > 0.0f;
            sum += probs[i];
        }
        assert_true(abs(n_got - n) <= 1);
        assert_true(fabs(sum - 1.0) < 1e-4);
        for (int i = 0; i < n - 1; i++) {
            double want = exp(r[i].l) / kept;
            if (fabs(probs[r[i].id] - want) > 1e-5 + 1e-3 * want)
                fail_msg("case %zu: token %d prob %g, want %g", ci, r[i].id, (double)probs[r[i].id], want);
        }
        // the sampler never draws outside the kept set
        for (int k = 0; k < 50; k++)
            assert_true(probs[rp_sampler_sample(s, l)] > 0.0f);
        rp_sampler_destroy(s);
    }
    free(r);
    free(probs);
    free(l);
}

// log(p_a / p_b) from probs at temperature 1 equals the processed logit difference.
static void assert_logit_diff(const float *probs, int a, int b, double want)
{
    double got = log((double)probs[a] / (double)probs[b]);
    if (fabs(got - want) > 1e-4)
        fail_msg("log(p%d/p%d) = %g, want %g", a, b, got, want);
}

static void test_repetition_penalty(void **state)
{
    float l[5] = {2.0f, -2.0f, 1.0f, 0.5f, 0.0f};
    rp_sample_params p;
    rp_sample_params_default(&p);
    p.repetition_penalty = 2.0f;
    rp_sampler *s = make(&p, 5);
    rp_sampler_accept(s, 0, true); // prompt tokens count for the repetition penalty
    rp_sampler_accept(s, 1, false);
    rp_sampler_accept(s, 1, false);  // counted once: the penalty does not compound
    rp_sampler_accept(s, 77, false); // out of range: ignored
    rp_sampler_accept(s, -1, true);
    float probs[5];
    assert_int_equal(rp_sampler_probs(s, l, probs), RP_OK);
    // processed: {1, -4, 1, 0.5, 0}
    assert_logit_diff(probs, 0, 2, 0.0);
    assert_logit_diff(probs, 1, 4, -4.0);
    assert_logit_diff(probs, 3, 4, 0.5);
    // greedy sees the penalty too: token 0 (2.0 -> 1.0) falls below token 2 (1.5)
    float l2[5] = {2.0f, -2.0f, 1.5f, 0.5f, 0.0f};
    rp_sampler_destroy(s);
    p.temperature = 0.0f;
    s = make(&p, 5);
    assert_int_equal(rp_sampler_sample(s, l2), 0);
    rp_sampler_accept(s, 0, true);
    assert_int_equal(rp_sampler_sample(s, l2), 2);
    rp_sampler_destroy(s);
}

static void test_presence_frequency_penalty(void **state)
{
    float l[5] = {2.0f, -2.0f, 1.0f, 0.5f, 0.0f};
    rp_sample_params p;
    rp_sample_params_default(&p);
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    rp_sampler *s = make(&p, 5);
    rp_sampler_accept(s, 0, true); // prompt: not counted by presence/frequency
    rp_sampler_accept(s, 2, false);
    rp_sampler_accept(s, 2, false);
    rp_sampler_accept(s, 3, false);
    float probs[5];
    assert_int_equal(rp_sampler_probs(s, l, probs), RP_OK);
    // processed: {2, -2, 1 - 0.5 - 0.5 = 0, 0.5 - 0.5 - 0.25 = -0.25, 0}
    assert_logit_diff(probs, 0, 4, 2.0);
    assert_logit_diff(probs, 2, 4, 0.0);
    assert_logit_diff(probs, 3, 4, -0.25);
    assert_logit_diff(probs, 1, 4, -2.0);
    // negative penalties encourage
    rp_sampler_destroy(s);
    p.presence_penalty = -1.0f;
    p.frequency_penalty = 0.0f;
    s = make(&p, 5);
    rp_sampler_accept(s, 1, false);
    assert_int_equal(rp_sampler_probs(s, l, probs), RP_OK);
    assert_logit_diff(probs, 1, 4, -1.0);
    rp_sampler_destroy(s);
}

static void test_penalty_window(void **state)
{
    float l[6] = {1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 0.0f};
    rp_sample_params p;
    rp_sample_params_default(&p);
    p.repetition_penalty = 2.0f;
    p.frequency_penalty = 1.0f;
    p.penalty_last_n = 3;
    rp_sampler *s = make(&p, 6);
    rp_sampler_accept(s, 0, true);
    rp_sampler_accept(s, 1, false);
    rp_sampler_accept(s, 1, false);
    rp_sampler_accept(s, 2, true);
    rp_sampler_accept(s, 3, false); // window now: 1(gen) 2(prompt) 3(gen)
    float probs[6];
    assert_int_equal(rp_sampler_probs(s, l, probs), RP_OK);
    assert_logit_diff(probs, 0, 5, 1.0);       // fell out of the window
    assert_logit_diff(probs, 1, 5, 0.5 - 1.0); // once in the window now
    assert_logit_diff(probs, 2, 5, 0.5);       // prompt: repetition only
    assert_logit_diff(probs, 3, 5, 0.5 - 1.0);
    assert_logit_diff(probs, 4, 5, 1.0);
    // reset forgets the history
    rp_sampler_reset(s, 3);
    assert_int_equal(rp_sampler_probs(s, l, probs), RP_OK);
    for (int i = 0; i < 5; i++)
        assert_logit_diff(probs, i, 5, 1.0);
    rp_sampler_destroy(s);

    // window 0: no penalties at all
    p.penalty_last_n = 0;
    s = make(&p, 6);
    rp_sampler_accept(s, 0, false);
    assert_int_equal(rp_sampler_probs(s, l, probs), RP_OK);
    assert_logit_diff(probs, 0, 5, 1.0);
    rp_sampler_destroy(s);

    // a long history through a small window keeps the counts consistent
    p.penalty_last_n = 4;
    p.repetition_penalty = 1.0f;
    s = make(&p, 6);
    for (int i = 0; i < 1000; i++)
        rp_sampler_accept(s, i % 3, i % 2);
    // last four: i = 996..999 -> tokens 0,1,2,0 with prompt flags 0,1,0,1: generated 0 (996), 2 (998)
    assert_int_equal(rp_sampler_probs(s, l, probs), RP_OK);
    assert_logit_diff(probs, 0, 5, 1.0 - 1.0);
    assert_logit_diff(probs, 1, 5, 1.0);
    assert_logit_diff(probs, 2, 5, 1.0 - 1.0);
    rp_sampler_destroy(s);
}

static void expect_invalid(const rp_sample_params *p, const char *field)
{
    rp_error_clear();
    assert_int_equal(rp_sample_params_validate(p), RP_ERR_INVALID);
    if (!strstr(rp_error_message(), field))
        fail_msg("message '%s' does not name %s", rp_error_message(), field);
    rp_sampler *s = (rp_sampler *)1;
    assert_int_equal(rp_sampler_create(p, 10, &s), RP_ERR_INVALID);
    assert_null(s);
}

static void test_validation(void **state)
{
    rp_sample_params p, d;
    rp_sample_params_default(&d);
    assert_int_equal(rp_sample_params_validate(&d), RP_OK);

#define BAD(field, value)                                                                                              \
    do {                                                                                                               \
        p = d;                                                                                                         \
        p.field = value;                                                                                               \
        expect_invalid(&p, #field);                                                                                    \
    } while (0)
#define GOOD(field, value)                                                                                             \
    do {                                                                                                               \
        p = d;                                                                                                         \
        p.field = value;                                                                                               \
        assert_int_equal(rp_sample_params_validate(&p), RP_OK);                                                        \
    } while (0)
    BAD(temperature, -0.1f);
    BAD(temperature, 100.5f);
    BAD(temperature, NAN);
    BAD(temperature, INFINITY);
    GOOD(temperature, 0.0f);
    GOOD(temperature, 100.0f);
    BAD(top_k, -1);
    GOOD(top_k, 1 << 30);
    BAD(top_p, 0.0f);
    BAD(top_p, 1.01f);
    BAD(top_p, NAN);
    GOOD(top_p, 1.0f);
    BAD(min_p, -0.01f);
    BAD(min_p, 1.5f);
    BAD(min_p, NAN);
    GOOD(min_p, 1.0f);
    BAD(repetition_penalty, 0.0f);
    BAD(repetition_penalty, -1.0f);
    BAD(repetition_penalty, 11.0f);
    BAD(repetition_penalty, NAN);
    GOOD(repetition_penalty, 1.3f);
    BAD(presence_penalty, 2.5f);
    BAD(presence_penalty, -2.5f);
    BAD(presence_penalty, NAN);
    GOOD(presence_penalty, -2.0f);
    BAD(frequency_penalty, 3.0f);
    BAD(frequency_penalty, NAN);
    GOOD(frequency_penalty, 2.0f);
    BAD(penalty_last_n, -2);
    BAD(penalty_last_n, RP_SAMPLE_LAST_N_MAX + 1);
    GOOD(penalty_last_n, -1);
    GOOD(penalty_last_n, 0);
#undef BAD
#undef GOOD

    rp_sampler *s = (rp_sampler *)1;
    assert_int_equal(rp_sampler_create(&d, 0, &s), RP_ERR_INVALID);
    assert_null(s);
}

static void test_bad_logits(void **state)
{
    enum { V = 6 };
    float probs[V];
    const float temps[] = {0.0f, 1.0f, 1e-30f};
    for (size_t ti = 0; ti < 3; ti++) {
        rp_sample_params p;
        rp_sample_params_default(&p);
        p.temperature = temps[ti];
        p.top_p = 0.9f;
        p.min_p = 0.01f;
        p.repetition_penalty = 1.5f;
        p.presence_penalty = 1.0f;
        rp_sampler *s = make(&p, V);
        rp_sampler_accept(s, 1, false);
        rp_sampler_accept(s, 3, false);

        // NaN is never chosen, even where it would be the "max"
        float l1[V] = {NAN, 0.5f, NAN, 1.0f, -INFINITY, NAN};
        for (int i = 0; i < 200; i++) {
            int32_t t = rp_sampler_sample(s, l1);
            assert_true(t == 1 || t == 3);
        }
        // +inf tokens take all the mass
        float l2[V] = {1.0f, INFINITY, 2.0f, INFINITY, NAN, -INFINITY};
        for (int i = 0; i < 200; i++) {
            int32_t t = rp_sampler_sample(s, l2);
            assert_true(t == 1 || t == 3);
        }
        assert_int_equal(rp_sampler_probs(s, l2, probs), RP_OK);
        assert_true(probs[0] == 0.0f && probs[2] == 0.0f && probs[4] == 0.0f && probs[5] == 0.0f);
        // all NaN / -inf: no crash, a valid id, finite probs summing to 1
        float l3[V] = {NAN, -INFINITY, NAN, NAN, -INFINITY, NAN};
        for (int i = 0; i < 50; i++) {
            int32_t t = rp_sampler_sample(s, l3);
            assert_true(t >= 0 && t < V);
        }
        if (temps[ti] == 0.0f)
            assert_int_equal(rp_sampler_sample(s, l3), 0);
        assert_int_equal(rp_sampler_probs(s, l3, probs), RP_OK);
        double sum = 0.0;
        for (int i = 0; i < V; i++) {
            assert_true(isfinite(probs[i]));
            sum += probs[i];
        }
        assert_true(fabs(sum - 1.0) < 1e-6);
        // huge finite logits do not overflow
        float l4[V] = {3e38f, -3e38f, 3e38f, 1e38f, 0.0f, FLT_MAX};
        int32_t t = rp_sampler_sample(s, l4);
        assert_true(t == 0 || t == 2 || t == 5 || t == 3);
        rp_sampler_destroy(s);
    }
}

static void test_tiny_temperature_is_greedy(void **state)
{
    enum { V = 300 };
    float l[V];
    rp_sample_params p;
    rp_sample_params_default(&p);
    p.temperature = 1e-6f;
    rp_sampler *s = make(&p, V);
    for (int trial = 0; trial < 20; trial++) {
        for (int i = 0; i < V; i++)
            l[i] = rand_logit(3.0f);
        int32_t best = 0;
        for (int i = 1; i < V; i++)
            if (l[i] > l[best])
                best = i;
        assert_int_equal(rp_sampler_sample(s, l), best);
    }
    rp_sampler_destroy(s);
}

// rp_sampler_uniform draws from the same seeded stream as sampling: one uniform
// taken before a sample shifts it by one draw.
static void test_uniform_shares_the_stream(void **state)
{
    (void)state;
    rp_sample_params p;
    rp_sample_params_default(&p);
    p.seed = 5;
    rp_sampler *a = make(&p, 64), *b = make(&p, 64);
    float l[64];
    for (int i = 0; i < 64; i++)
        l[i] = rand_logit(2.0f);
    double u_sum = 0;
    for (int rep = 0; rep < 50; rep++) {
        double u = rp_sampler_uniform(a);
        assert_true(u >= 0.0 && u < 1.0);
        u_sum += u;
        int32_t ta = rp_sampler_sample(a, l);
        rp_sampler_sample(b, l);
        int32_t tb = rp_sampler_sample(b, l);
        assert_int_equal(ta, tb);
    }
    assert_true(u_sum > 10 && u_sum < 40);
    rp_sampler_reset(a, 5);
    rp_sampler_reset(b, 5);
    for (int i = 0; i < 10; i++)
        assert_true(rp_sampler_uniform(a) == rp_sampler_uniform(b));
    rp_sampler_destroy(a);
    rp_sampler_destroy(b);
}

static void test_out_of_memory(void **state)
{
    rp_sample_params p;
    rp_sample_params_default(&p);
    p.repetition_penalty = 1.1f;
    p.penalty_last_n = 64;
    for (long n = 0; n < 20; n++) {
        rp_sampler *s = (rp_sampler *)1;
        rp_alloc_fail_after(n, false);
        rp_status st = rp_sampler_create(&p, 1000, &s);
        rp_alloc_fail_after(-1, false);
        if (st == RP_OK) {
            assert_non_null(s);
            rp_sampler_destroy(s);
            assert_true(n >= 5);
            return;
        }
        assert_int_equal(st, RP_ERR_NOMEM);
        assert_null(s);
    }
    fail_msg("creation never succeeded");
}

// rp_sampler_logprobs: log-softmax of the penalized logits, the same at every
// temperature and filter; the edge rows (-inf, all -inf, +inf, NaN).
static void test_logprobs(void **state)
{
    enum { V = 300 };
    static float l[V], lp[V], lp2[V];
    for (int i = 0; i < V; i++)
        l[i] = rand_logit(8.0f);
    l[7] = -INFINITY;
    l[8] = NAN;
    rp_sample_params p;
    rp_sample_params_default(&p);
    p.repetition_penalty = 1.5f;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    rp_sampler *s = make(&p, V);
    rp_sampler_accept(s, 3, true);
    rp_sampler_accept(s, 4, false);
    rp_sampler_accept(s, 4, false);
    rp_sampler_logprobs(s, l, lp);
    // Reference in double, penalties applied by hand.
    double pen[V], mx = -INFINITY, sum = 0;
    for (int i = 0; i < V; i++) {
        double v = isnan(l[i]) ? -INFINITY : l[i];
        if (i == 3 || i == 4)
            v = v > 0 ? v / 1.5 : v * 1.5;
        if (i == 4)
            v -= 0.5 + 0.25 * 2;
        pen[i] = v;
        mx = v > mx ? v : mx;
    }
    for (int i = 0; i < V; i++)
        sum += exp(pen[i] - mx);
    for (int i = 0; i < V; i++) {
        double want = pen[i] - mx - log(sum);
        if (isinf(want))
            assert_true(lp[i] == -INFINITY);
        else if (fabs(lp[i] - want) > 1e-5)
            fail_msg("token %d: %g, want %g", i, (double)lp[i], want);
    }
    // Temperature, filters and the RNG play no part; the logits are not written.
    rp_sample_params q = p;
    q.temperature = 0.0f;
    q.top_k = 3;
    q.top_p = 0.5f;
    q.min_p = 0.2f;
    rp_sampler *s2 = make(&q, V);
    rp_sampler_accept(s2, 3, true);
    rp_sampler_accept(s2, 4, false);
    rp_sampler_accept(s2, 4, false);
    rp_sampler_logprobs(s2, l, lp2);
    assert_memory_equal(lp, lp2, sizeof(lp));
    assert_true(isnan(l[8]));
    // All -inf: uniform. Some +inf: they share everything.
    for (int i = 0; i < V; i++)
        l[i] = -INFINITY;
    rp_sampler_logprobs(s2, l, lp);
    for (int i = 0; i < V; i++)
        assert_true(fabsf(lp[i] + logf((float)V)) < 1e-6f);
    for (int i = 0; i < V; i++)
        l[i] = (float)i;
    l[10] = l[20] = INFINITY;
    rp_sampler_logprobs(s, l, lp);
    for (int i = 0; i < V; i++)
        assert_true(i == 10 || i == 20 ? fabsf(lp[i] + logf(2.0f)) < 1e-6f : lp[i] == -INFINITY);
    rp_sampler_destroy(s);
    rp_sampler_destroy(s2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_argmax_and_ties),
        cmocka_unit_test(test_top_k_1_is_greedy),
        cmocka_unit_test(test_seeded_reproducible),
        cmocka_unit_test(test_golden_stream),
        cmocka_unit_test(test_seeds_differ),
        cmocka_unit_test(test_distribution_matches_softmax),
        cmocka_unit_test(test_top_p),
        cmocka_unit_test(test_min_p),
        cmocka_unit_test(test_top_k),
        cmocka_unit_test(test_large_vocab_against_reference),
        cmocka_unit_test(test_repetition_penalty),
        cmocka_unit_test(test_presence_frequency_penalty),
        cmocka_unit_test(test_penalty_window),
        cmocka_unit_test(test_validation),
        cmocka_unit_test(test_bad_logits),
        cmocka_unit_test(test_tiny_temperature_is_greedy),
        cmocka_unit_test(test_uniform_shares_the_stream),
        cmocka_unit_test(test_out_of_memory),
        cmocka_unit_test(test_logprobs),
    };
    if (getenv("RP_TEST_FILTER"))
        cmocka_set_test_filter(getenv("RP_TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
