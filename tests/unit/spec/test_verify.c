/*
 * test_verify.c - speculative rejection sampling is exactly the model's distribution.
 *
 * A tiny "model": a Markov chain over V = 5 tokens (the target's logits depend
 * on the previous token) run through a real sampler (temperature 0.8, top-k 4,
 * so some tokens have probability 0), and a different chain as the draft. Each
 * trial emits the first M = 3 tokens after a start token, either by plain
 * sampling (rp_sampler_sample) or by rounds of K = 3 drafts verified with
 * rp_spec_verify. The 125 three-token sequences are counted over many seeded
 * trials and compared by chi-square with the exact probabilities and with each
 * other. The same test run with a biased acceptance rule (on rejection, draw
 * from p instead of the residual) must fail it: the negative control. Seeds
 * are fixed, so every statistic is the same number on every run.
 *
 * Also: greedy verification (argmax rule, no RNG use), penalties seeing the
 * accepted drafts, reproducibility, deterministic drafts emitting exactly
 * plain sampling's tokens for the same seed, the per-row callback (logprobs
 * with each position's history), and bad arguments.
 */
#include "test_util.h"

#include "spec/spec_int.h"

#include <math.h>

enum { V = 5, M = 3, K = 3, CELLS = V * V * V };

// Target logits by previous token, and the draft's probabilities.
static const float TARGET[V][V] = {
    {1.0f, 0.2f, -0.5f, 0.8f, -1.0f}, {-0.3f, 1.2f, 0.4f, 0.0f, 0.5f}, {0.6f, -0.2f, 0.9f, -0.8f, 0.1f},
    {0.0f, 0.3f, 0.2f, 1.1f, -0.4f},  {0.7f, 0.7f, -0.6f, 0.2f, 0.3f},
};
static const float DRAFT_Q[V][V] = {
    {0.05f, 0.60f, 0.15f, 0.10f, 0.10f}, {0.30f, 0.10f, 0.20f, 0.20f, 0.20f}, {0.10f, 0.10f, 0.10f, 0.10f, 0.60f},
    {0.25f, 0.25f, 0.25f, 0.15f, 0.10f}, {0.20f, 0.05f, 0.50f, 0.05f, 0.20f},
};

static uint64_t rs;
static double urand(void)
{
    rs += 0x9e3779b97f4a7c15ULL;
    uint64_t z = rs;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return (double)((z ^ (z >> 31)) >> 11) * 0x1.0p-53;
}

static int argmax(const float *l)
{
    int best = 0;
    for (int i = 1; i < V; i++)
        if (l[i] > l[best])
            best = i;
    return best;
}

static int draw_q(const float *q)
{
    double u = urand(), c = 0;
    for (int i = 0; i < V; i++)
        if (u < (c += q[i]))
            return i;
    return V - 1;
}

static rp_sampler *make_sampler(float temp, int top_k, float rep)
{
    rp_sample_params p;
    rp_sample_params_default(&p);
    p.temperature = temp;
    p.top_k = top_k;
    p.repetition_penalty = rep;
    rp_sampler *s;
    assert_int_equal(rp_sampler_create(&p, V, &s), RP_OK);
    return s;
}

typedef enum { PLAIN, SPEC_SAMPLED, SPEC_FIXED } mode;

typedef struct stats {
    long drafted, accepted;
} stats;

// One trial: the first M tokens after token 0.
static int trial(rp_sampler *s, mode md, rp_spec_rule rule, stats *st)
{
    int out[M + K + 1], n = 0, prev = 0;
    if (md == PLAIN) {
        for (; n < M; n++) {
            prev = out[n] = rp_sampler_sample(s, TARGET[prev]);
            rp_sampler_accept(s, prev, false);
        }
    } else {
        float logits[(K + 1) * V], q[K * V], work[V];
        int32_t draft[K];
        while (n < M) {
            int ctx = prev;
            for (int j = 0; j < K; j++) {
                memcpy(logits + j * V, TARGET[ctx], sizeof(TARGET[ctx]));
                memcpy(q + j * V, DRAFT_Q[ctx], sizeof(DRAFT_Q[ctx]));
                // SPEC_FIXED: a deterministic proposer (prompt lookup's kind): one-hot q.
                ctx = draft[j] = md == SPEC_SAMPLED ? draw_q(DRAFT_Q[ctx])
                                 : j == 1           ? (ctx + 2) % V
                                                    : argmax(TARGET[ctx]);
            }
            memcpy(logits + K * V, TARGET[ctx], sizeof(TARGET[ctx]));
            int na;
            int32_t next;
            assert_int_equal(rp_spec_verify_rule(s, logits, draft, md == SPEC_SAMPLED ? q : NULL, K, work, &na, &next,
                                                 rule, NULL, NULL),
                             RP_OK);
            assert_true(na >= 0 && na <= K && next >= 0 && next < V);
            st->drafted += K;
            st->accepted += na;
            for (int j = 0; j < na; j++)
                out[n++] = draft[j];
            out[n++] = next;
            rp_sampler_accept(s, next, false);
            prev = next;
        }
    }
    return (out[0] * V + out[1]) * V + out[2];
}

static void count(mode md, rp_spec_rule rule, int N, long *counts, stats *st)
{
    rp_sampler *s = make_sampler(0.8f, 4, 1.0f);
    memset(counts, 0, CELLS * sizeof(long));
    for (int i = 0; i < N; i++) {
        rp_sampler_reset(s, 1000 + (uint64_t)i);
        rs = 77 + (uint64_t)i * 0x100000001ULL;
        counts[trial(s, md, rule, st)]++;
    }
    rp_sampler_destroy(s);
}

// The exact probability of each 3-token sequence: products of the sampler's rows.
static void exact(double *want)
{
    rp_sampler *s = make_sampler(0.8f, 4, 1.0f);
    float p[V][V];
    for (int a = 0; a < V; a++)
        assert_int_equal(rp_sampler_probs(s, TARGET[a], p[a]), RP_OK);
    for (int a = 0; a < V; a++)
        for (int b = 0; b < V; b++)
            for (int c = 0; c < V; c++)
                want[(a * V + b) * V + c] = (double)p[0][a] * p[a][b] * p[b][c];
    rp_sampler_destroy(s);
}

// Chi-square against the exact distribution; fails the test on a token of probability 0.
static double chi2_exact(const long *counts, const double *want, int N, int *df)
{
    double chi2 = 0;
    *df = -1;
    for (int i = 0; i < CELLS; i++) {
        if (want[i] == 0.0) {
            if (counts[i])
                fail_msg("sequence %d has probability 0 but was drawn %ld times", i, counts[i]);
            continue;
        }
        double e = want[i] * N, d = counts[i] - e;
        chi2 += d * d / e;
        (*df)++;
    }
    return chi2;
}

// Two samples of the same size: sum (a - b)^2 / (a + b).
static double chi2_two(const long *a, const long *b, int *df)
{
    double chi2 = 0;
    *df = -1;
    for (int i = 0; i < CELLS; i++)
        if (a[i] + b[i] > 0) {
            double d = (double)(a[i] - b[i]);
            chi2 += d * d / (double)(a[i] + b[i]);
            (*df)++;
        }
    return chi2;
}

// Mean df, sd sqrt(2 df): 6 sd plus slack (as the sampler's own test).
static double bound(int df)
{
    return df + 6.0 * sqrt(2.0 * df) + 5.0;
}

static void test_distribution(void **state)
{
    (void)state;
    enum { N = 100000 };
    static long plain[CELLS], spec[CELLS];
    double want[CELLS];
    exact(want);
    stats none = {0, 0};
    count(PLAIN, RP_SPEC_RULE_EXACT, N, plain, &none);
    int df;
    double c = chi2_exact(plain, want, N, &df);
    print_message("  plain sampling vs exact: chi2 %.1f (df %d, bound %.1f)\n", c, df, bound(df));
    assert_true(c < bound(df));
    const mode modes[2] = {SPEC_SAMPLED, SPEC_FIXED};
    for (int mi = 0; mi < 2; mi++) {
        stats st = {0, 0};
        count(modes[mi], RP_SPEC_RULE_EXACT, N, spec, &st);
        double ce = chi2_exact(spec, want, N, &df);
        int df2;
        double c2 = chi2_two(spec, plain, &df2);
        print_message("  %s drafts: %.1f%% accepted; vs exact chi2 %.1f (df %d, bound %.1f); vs plain %.1f (df %d, "
                      "bound %.1f)\n",
                      mi == 0 ? "sampled" : "fixed", 100.0 * st.accepted / st.drafted, ce, df, bound(df), c2, df2,
                      bound(df2));
        // Drafts must have been both accepted and rejected for the test to mean anything.
        assert_true(st.accepted > st.drafted / 10 && st.accepted < st.drafted * 9 / 10);
        assert_true(ce < bound(df));
        assert_true(c2 < bound(df2));
    }
}

// The negative control: the same test, a biased rule, must fail.
static void test_distribution_negative_control(void **state)
{
    (void)state;
    enum { N = 100000 };
    static long plain[CELLS], spec[CELLS];
    double want[CELLS];
    exact(want);
    stats none = {0, 0};
    count(PLAIN, RP_SPEC_RULE_EXACT, N, plain, &none);
    const mode modes[2] = {SPEC_SAMPLED, SPEC_FIXED};
    for (int mi = 0; mi < 2; mi++) {
        stats st = {0, 0};
        count(modes[mi], RP_SPEC_RULE_RESAMPLE_P, N, spec, &st);
        int df, df2;
        double ce = chi2_exact(spec, want, N, &df), c2 = chi2_two(spec, plain, &df2);
        print_message("  biased rule, %s drafts: vs exact chi2 %.1f (bound %.1f); vs plain %.1f (bound %.1f)\n",
                      mi == 0 ? "sampled" : "fixed", ce, bound(df), c2, bound(df2));
        assert_true(ce > bound(df));
        assert_true(c2 > bound(df2));
    }
}

// Greedy: accept while the draft is the argmax; the correction is the argmax; no RNG.
static void test_greedy(void **state)
{
    (void)state;
    rp_sampler *s = make_sampler(0.0f, 0, 1.0f), *fresh = make_sampler(0.0f, 0, 1.0f);
    float logits[4 * V] = {
        0, 3, 1, 0, 0, /* argmax 1 */ 2, 0, 0, 0, 1, /* 0 */ 0, 0, 0, 5, 0, /* 3 */ 0, 0, 9, 0, 0, /* 2 */
    };
    float work[V];
    int na;
    int32_t next;
    const int32_t all[3] = {1, 0, 3}, two[3] = {1, 0, 4}, none[3] = {4, 0, 3};
    assert_int_equal(rp_spec_verify(s, logits, all, NULL, 3, work, &na, &next), RP_OK);
    assert_int_equal(na, 3);
    assert_int_equal(next, 2); // the bonus token
    assert_int_equal(rp_spec_verify(s, logits, two, NULL, 3, work, &na, &next), RP_OK);
    assert_int_equal(na, 2);
    assert_int_equal(next, 3);
    // A sampled q changes nothing for a greedy target.
    float q[3 * V];
    for (int i = 0; i < 3 * V; i++)
        q[i] = 0.2f;
    assert_int_equal(rp_spec_verify(s, logits, none, q, 3, work, &na, &next), RP_OK);
    assert_int_equal(na, 0);
    assert_int_equal(next, 1);
    assert_int_equal(rp_spec_verify(s, logits, NULL, NULL, 0, work, &na, &next), RP_OK); // k = 0: plain step
    assert_int_equal(na, 0);
    assert_int_equal(next, 1);
    // Out-of-vocabulary drafts are rejected, not read.
    const int32_t bad[1] = {V + 3};
    assert_int_equal(rp_spec_verify(s, logits, bad, NULL, 1, work, &na, &next), RP_OK);
    assert_int_equal(na, 0);
    assert_int_equal(next, 1);
    // The RNG was never used.
    assert_true(rp_sampler_uniform(s) == rp_sampler_uniform(fresh));
    rp_sampler_destroy(s);
    rp_sampler_destroy(fresh);
}

// Penalties see the drafts accepted before each row: the same tokens as plain
// greedy decoding with accept after each token.
static void test_penalties_follow_drafts(void **state)
{
    (void)state;
    rp_sampler *s = make_sampler(0.0f, 0, 2.0f), *plain = make_sampler(0.0f, 0, 2.0f);
    // Row 0: argmax 0. Row 1 alone also argmax 0, but 0 was just accepted: 3/2 < 2, so 1.
    float logits[3 * V] = {3, 2.9f, 0, 0, 0, 3, 2, 0, 0, 0, 1, 1, 4, 0, 0};
    float work[V];
    int na;
    int32_t next;
    const int32_t d[2] = {0, 0};
    assert_int_equal(rp_spec_verify(s, logits, d, NULL, 2, work, &na, &next), RP_OK);
    int32_t a = rp_sampler_sample(plain, logits);
    rp_sampler_accept(plain, a, false);
    int32_t b = rp_sampler_sample(plain, logits + V);
    assert_int_equal(a, 0);
    assert_int_equal(b, 1);
    assert_int_equal(na, 1);
    assert_int_equal(next, b);
    rp_sampler_destroy(s);
    rp_sampler_destroy(plain);
}

// A fixed seed gives the same verification; other seeds differ somewhere.
static void test_reproducible(void **state)
{
    (void)state;
    int first[64][2];
    bool differ = false;
    for (int rep = 0; rep < 3; rep++) {
        rp_sampler *s = make_sampler(1.0f, 0, 1.0f);
        rp_sampler_reset(s, rep == 2 ? 5 : 4);
        rs = 1;
        for (int t = 0; t < 64; t++) {
            float logits[(K + 1) * V], q[K * V], work[V];
            int32_t draft[K];
            int ctx = t % V;
            for (int j = 0; j < K; j++) {
                memcpy(logits + j * V, TARGET[ctx], sizeof(TARGET[ctx]));
                memcpy(q + j * V, DRAFT_Q[ctx], sizeof(DRAFT_Q[ctx]));
                ctx = draft[j] = draw_q(DRAFT_Q[ctx]);
            }
            memcpy(logits + K * V, TARGET[ctx], sizeof(TARGET[ctx]));
            int na;
            int32_t next;
            assert_int_equal(rp_spec_verify(s, logits, draft, q, K, work, &na, &next), RP_OK);
            if (rep == 0) {
                first[t][0] = na;
                first[t][1] = next;
            } else if (rep == 1) {
                assert_int_equal(first[t][0], na);
                assert_int_equal(first[t][1], next);
            } else {
                differ = differ || first[t][0] != na || first[t][1] != next;
            }
        }
        rp_sampler_destroy(s);
    }
    assert_true(differ);
}

// Deterministic drafts (q NULL): the emitted tokens are plain sampling's with
// the same seed, token for token, whatever was drafted, with penalties too.
static void test_fixed_drafts_emit_plain_tokens(void **state)
{
    (void)state;
    enum { N = 2000, LEN = 12 };
    long drafted = 0, accepted = 0;
    for (int i = 0; i < N; i++) {
        rp_sampler *plain = make_sampler(0.8f, 4, i % 2 ? 1.3f : 1.0f), *s = make_sampler(0.8f, 4, i % 2 ? 1.3f : 1.0f);
        rp_sampler_reset(plain, 500 + (uint64_t)i);
        rp_sampler_reset(s, 500 + (uint64_t)i);
        int want[LEN], got[LEN + K + 1], n = 0, prev = 0;
        for (int t = 0; t < LEN; t++) {
            prev = want[t] = rp_sampler_sample(plain, TARGET[prev]);
            rp_sampler_accept(plain, prev, false);
        }
        prev = 0;
        rs = 9 + (uint64_t)i;
        while (n < LEN) {
            float logits[(K + 1) * V], work[V];
            int32_t draft[K];
            int ctx = prev, k = 1 + (int)(urand() * K); // 1..K drafts, some right, some wrong
            for (int j = 0; j < k; j++) {
                memcpy(logits + j * V, TARGET[ctx], sizeof(TARGET[ctx]));
                ctx = draft[j] = urand() < 0.6 ? argmax(TARGET[ctx]) : (int)(urand() * V);
            }
            memcpy(logits + k * V, TARGET[ctx], sizeof(TARGET[ctx]));
            int na;
            int32_t next;
            assert_int_equal(rp_spec_verify(s, logits, draft, NULL, k, work, &na, &next), RP_OK);
            drafted += k;
            accepted += na;
            for (int j = 0; j < na; j++)
                got[n++] = draft[j];
            got[n++] = next;
            rp_sampler_accept(s, next, false);
            prev = next;
        }
        for (int t = 0; t < LEN; t++)
            if (got[t] != want[t])
                fail_msg("seed %d: token %d is %d with speculation, %d without", 500 + i, t, got[t], want[t]);
        rp_sampler_destroy(plain);
        rp_sampler_destroy(s);
    }
    print_message("  %ld of %ld drafts accepted\n", accepted, drafted);
    assert_true(accepted > drafted / 10 && accepted < drafted * 9 / 10);
}

// The row callback sees rows 0..n in order, each with the history of its
// position: logprobs taken there are plain decoding's.
typedef struct cb_log {
    rp_sampler *s;
    int n_calls, rows[K + 1];
    float lp[K + 1][V];
} cb_log;

static void on_row(void *ctx, int i, const float *row)
{
    cb_log *c = ctx;
    c->rows[c->n_calls++] = i;
    rp_sampler_logprobs(c->s, row, c->lp[i]);
}

static void test_row_callback(void **state)
{
    (void)state;
    rp_sampler *s = make_sampler(0.0f, 0, 2.0f), *plain = make_sampler(0.0f, 0, 2.0f);
    float logits[3 * V] = {3, 2.9f, 0, 0, 0, 3, 2, 0, 0, 0, 1, 1, 4, 0, 0}, work[V];
    const int32_t d[2] = {0, 0}; // row 0 accepts 0; row 1 then prefers 1 (0 is penalized): rejected
    cb_log c = {.s = s};
    int na;
    int32_t next;
    assert_int_equal(rp_spec_verify_ex(s, logits, d, NULL, 2, work, &na, &next, on_row, &c), RP_OK);
    assert_int_equal(na, 1);
    assert_int_equal(next, 1);
    assert_int_equal(c.n_calls, 2);
    assert_int_equal(c.rows[0], 0);
    assert_int_equal(c.rows[1], 1);
    float lp[V];
    rp_sampler_logprobs(plain, logits, lp);
    assert_memory_equal(lp, c.lp[0], sizeof(lp));
    rp_sampler_accept(plain, 0, false);
    rp_sampler_logprobs(plain, logits + V, lp);
    assert_memory_equal(lp, c.lp[1], sizeof(lp));
    // The sampled path (q given) calls it the same way.
    float q[2 * V];
    for (int i = 0; i < 2 * V; i++)
        q[i] = 0.2f;
    rp_sampler *t = make_sampler(1.0f, 0, 1.0f);
    cb_log c2 = {.s = t};
    assert_int_equal(rp_spec_verify_ex(t, logits, d, q, 2, work, &na, &next, on_row, &c2), RP_OK);
    assert_int_equal(c2.n_calls, na + 1);
    for (int i = 0; i < c2.n_calls; i++)
        assert_int_equal(c2.rows[i], i);
    rp_sampler_destroy(s);
    rp_sampler_destroy(plain);
    rp_sampler_destroy(t);
}

static void test_bad_args(void **state)
{
    (void)state;
    rp_sampler *s = make_sampler(1.0f, 0, 1.0f);
    float logits[2 * V] = {0}, work[V];
    int na = 77;
    int32_t next = 77;
    assert_int_equal(rp_spec_verify(s, logits, NULL, NULL, 1, work, &na, &next), RP_ERR_INVALID);
    assert_int_equal(rp_spec_verify(s, logits, NULL, NULL, -1, work, &na, &next), RP_ERR_INVALID);
    assert_int_equal(na, 77);
    assert_int_equal(next, 77);
    rp_sampler_destroy(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_distribution), cmocka_unit_test(test_distribution_negative_control),
        cmocka_unit_test(test_greedy),       cmocka_unit_test(test_penalties_follow_drafts),
        cmocka_unit_test(test_reproducible), cmocka_unit_test(test_fixed_drafts_emit_plain_tokens),
        cmocka_unit_test(test_row_callback), cmocka_unit_test(test_bad_args),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
