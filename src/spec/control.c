/*
 * control.c - the adaptive draft-length controller (model in spec.h).
 *
 * Pure arithmetic on a few dozen doubles per method: no allocation, no clock
 * (the engine measures time and passes costs in). Estimates are Bayesian-ish
 * shrinkage: a position's rate leans on the rate of the position before it
 * until it has trials of its own (the first position on its method's overall
 * rate, which leans on a prior until the method has been tried), so positions
 * never drafted yet are expected to do as the deepest ones tried: a copied run
 * whose first positions are all accepted makes longer drafts worth a try (with
 * the overall rate instead, one early rejection would cap k where it stood).
 * Old observations fade by `decay` per new one, so the controller
 * follows a request from prose (little accepted: k falls to 0) into a copied
 * file (everything accepted: k climbs to the cap) and back.
 */
#include "spec.h"

#include <math.h>

// Prior acceptance per method and the number of trials it is worth.
static const double PRIOR_RATE[RP_SPEC_N_METHODS] = {0.5, 0.6, 0.6};
#define PRIOR_TRIALS 2.0
// Trials a position needs before its own rate outweighs its method's overall rate.
#define POS_TRIALS 1.0
// Longest wait between probes, in multiples of probe_after.
#define PROBE_MAX_FACTOR 64

const char *rp_spec_method_name(rp_spec_method m)
{
    switch (m) {
    case RP_SPEC_NGRAM:
        return "ngram";
    case RP_SPEC_MTP:
        return "mtp";
    case RP_SPEC_DRAFT:
        return "draft";
    }
    return "?";
}

void rp_spec_ctl_params_default(rp_spec_ctl_params *p)
{
    p->k_max = 8;
    p->adaptive = true;
    p->min_gain = 1.03;
    p->decay = 0.9;
    p->probe_after = 16;
}

rp_status rp_spec_ctl_init(rp_spec_ctl *c, const rp_spec_ctl_params *p)
{
    if (p->k_max < 1 || p->k_max > RP_SPEC_K_MAX)
        return RP_ERR(RP_ERR_INVALID, "num_speculative_tokens %d is out of range (1..%d)", p->k_max, RP_SPEC_K_MAX);
    if (!(p->min_gain >= 1.0 && p->min_gain <= 100.0))
        return RP_ERR(RP_ERR_INVALID, "speculative min_gain %g is out of range [1, 100]", p->min_gain);
    if (!(p->decay > 0.0 && p->decay < 1.0))
        return RP_ERR(RP_ERR_INVALID, "speculative decay %g is out of range (0, 1)", p->decay);
    if (p->probe_after < 1 || p->probe_after > (1 << 20))
        return RP_ERR(RP_ERR_INVALID, "speculative probe_after %d is out of range (1..%d)", p->probe_after, 1 << 20);
    memset(c, 0, sizeof(*c));
    c->p = *p;
    for (int m = 0; m < RP_SPEC_N_METHODS; m++)
        c->m[m].probe_wait = p->probe_after;
    return RP_OK;
}

static bool method_ok(int m)
{
    return m >= 0 && m < RP_SPEC_N_METHODS;
}

double rp_spec_ctl_accept_rate(const rp_spec_ctl *c, rp_spec_method m, int k)
{
    if (!method_ok((int)m) || k < 1)
        return 0.0;
    const rp_spec_ctl_stat *s = &c->m[m];
    double rate = (s->all_successes + PRIOR_TRIALS * PRIOR_RATE[m]) / (s->all_trials + PRIOR_TRIALS);
    int last = (k < RP_SPEC_POS ? k : RP_SPEC_POS) - 1;
    for (int i = 0; i <= last; i++) // each position leans on the one before it (the first on the pooled rate)
        rate = (s->successes[i] + POS_TRIALS * rate) / (s->trials[i] + POS_TRIALS);
    return rate;
}

double rp_spec_ctl_expected(const rp_spec_ctl *c, rp_spec_method m, int k)
{
    double e = 1.0, run = 1.0;
    for (int i = 1; i <= k; i++) {
        run *= rp_spec_ctl_accept_rate(c, m, i);
        e += run;
    }
    return e;
}

void rp_spec_ctl_observe(rp_spec_ctl *c, rp_spec_method m, int drafted, int accepted)
{
    if (!method_ok((int)m) || drafted <= 0)
        return;
    if (accepted < 0)
        accepted = 0;
    if (accepted > drafted)
        accepted = drafted;
    rp_spec_ctl_stat *s = &c->m[m];
    double d = c->p.decay;
    // Positions 1..accepted were accepted; position accepted+1 (if drafted) was the rejection.
    int tried = accepted < drafted ? accepted + 1 : drafted;
    // Positions this observation did not reach fade four times slower: their
    // evidence is not contradicted, only getting old (and a rate that fades back
    // to the pooled one gets retried).
    double d_unseen = sqrt(sqrt(d));
    for (int i = 0; i < RP_SPEC_POS; i++) {
        double f = i < tried ? d : d_unseen;
        s->trials[i] *= f;
        s->successes[i] *= f;
    }
    s->all_trials *= d;
    s->all_successes *= d;
    for (int k = 1; k <= tried; k++) {
        int i = (k < RP_SPEC_POS ? k : RP_SPEC_POS) - 1;
        s->trials[i] += 1.0;
        if (k <= accepted)
            s->successes[i] += 1.0;
    }
    s->all_trials += tried;
    s->all_successes += accepted;
    if (accepted > 0)
        s->probe_wait = c->p.probe_after;
}

void rp_spec_ctl_choose(rp_spec_ctl *c, const int available[RP_SPEC_N_METHODS], const rp_spec_cost *cost,
                        rp_spec_method *method, int *k)
{
    *method = RP_SPEC_NGRAM;
    *k = 0;
    if (!c->p.adaptive) {
        for (int m = 0; m < RP_SPEC_N_METHODS; m++)
            if (available[m] > 0) {
                *method = (rp_spec_method)m;
                *k = available[m] < c->p.k_max ? available[m] : c->p.k_max;
                return;
            }
        return;
    }
    double others = cost ? cost->batch_tokens : 0.0;
    if (!(others >= 0.0))
        others = 0.0;
    double bar = (others + 1.0) * c->p.min_gain; // plain decoding's rate, with the margin drafting must beat
    double best = bar;
    bool could[RP_SPEC_N_METHODS] = {false}; // worth it if every draft were accepted
    for (int m = 0; m < RP_SPEC_N_METHODS; m++) {
        if (available[m] <= 0)
            continue;
        double per = cost ? cost->verify_per_token + cost->draft_per_token[m] : 0.0;
        if (!(per >= 0.0))
            per = 0.0;
        int kmax = available[m] < c->p.k_max ? available[m] : c->p.k_max;
        double e = 1.0, run = 1.0;
        for (int i = 1; i <= kmax; i++) {
            run *= rp_spec_ctl_accept_rate(c, (rp_spec_method)m, i);
            e += run;
            double rate = (others + e) / (1.0 + i * per);
            if (rate > best) {
                best = rate;
                *method = (rp_spec_method)m;
                *k = i;
            }
            could[m] = could[m] || (others + 1.0 + i) / (1.0 + i * per) > bar;
        }
    }
    // Methods available but not chosen wait; one that waited long enough while
    // nothing drafts gets a one-token probe, so a change in the text is noticed.
    // A method that would not pay even if all its drafts were accepted (a busy
    // batch) has nothing to learn and is not probed.
    int probe = -1;
    for (int m = 0; m < RP_SPEC_N_METHODS; m++) {
        rp_spec_ctl_stat *s = &c->m[m];
        if (available[m] <= 0)
            continue;
        if (*k > 0 && (int)*method == m) {
            s->idle = 0;
            continue;
        }
        if (++s->idle >= s->probe_wait && *k == 0 && could[m] && probe < 0)
            probe = m;
    }
    if (probe >= 0) {
        rp_spec_ctl_stat *s = &c->m[probe];
        s->idle = 0;
        int cap = c->p.probe_after * PROBE_MAX_FACTOR;
        s->probe_wait = s->probe_wait > cap / 2 ? cap : s->probe_wait * 2;
        *method = (rp_spec_method)probe;
        *k = 1;
    }
}
