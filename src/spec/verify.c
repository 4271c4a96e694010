/*
 * verify.c - speculative rejection sampling (contract in spec.h).
 *
 * For each draft token d with target probability p(d) and draft probability
 * q(d): accept with probability min(1, p(d)/q(d)); at the first rejection the
 * replacement comes from the residual max(0, p - q), normalized. Whatever q
 * is, the emitted token then has distribution p exactly: P(d accepted) =
 * min(p(d), q(d)) and the residual carries the mass p - min(p, q). All drafts
 * accepted: the bonus token comes from the next row's p.
 *
 * Deterministic drafts (q one-hot, passed as NULL) use one coupling of that
 * rule: the target's token x is drawn from p exactly as rp_sampler_sample
 * draws it, and d is accepted when x == d, else x is the replacement. Then
 * P(accept) = p(d) = min(1, p(d)/1) and, given a rejection, x has p(x)/(1 -
 * p(d)) = the normalized residual: the same rule. Its point is that the RNG is
 * used exactly as plain decoding uses it (one rp_sampler_sample per emitted
 * token), so the emitted tokens are plain sampling's, seed for seed, whatever
 * was drafted and however long the drafts were.
 *
 * The target rows are computed one at a time and only up to the first
 * rejection, each after the accepted drafts entered the sampler's history, so
 * penalties see exactly the tokens before the position. Draws are inverse-CDF
 * over token ids in id order with double sums; a distribution with a single
 * token of nonzero mass (every greedy row) is taken without a draw, so greedy
 * verification never touches the RNG.
 */
#include "spec_int.h"

// The token of a draw from weights w[0..n) (total = their sum > 0).
static int32_t draw(rp_sampler *s, const float *w, int32_t n, double total)
{
    int32_t first = -1, count = 0;
    for (int32_t i = 0; i < n && count < 2; i++)
        if (w[i] > 0.0f) {
            if (count++ == 0)
                first = i;
        }
    if (count < 2)
        return first < 0 ? 0 : first;
    double u = rp_sampler_uniform(s) * total, cum = 0.0;
    int32_t last = first;
    for (int32_t i = first; i < n; i++) {
        if (!(w[i] > 0.0f))
            continue;
        last = i;
        cum += w[i];
        if (u < cum)
            return i;
    }
    return last; // u * total rounded up to the sum
}

static double sum(const float *w, int32_t n)
{
    double t = 0.0;
    for (int32_t i = 0; i < n; i++)
        t += w[i] > 0.0f ? w[i] : 0.0f;
    return t;
}

rp_status rp_spec_verify_rule(rp_sampler *s, const float *logits, const int32_t *draft, const float *q, int k,
                              float *work, int *n_accepted, int32_t *next, rp_spec_rule rule, rp_spec_row_fn on_row,
                              void *ctx)
{
    if (k < 0 || (k > 0 && !draft))
        return RP_ERR(RP_ERR_INVALID, "speculative verification of %d drafts%s", k, k > 0 ? " without tokens" : "");
    const int32_t V = rp_sampler_n_vocab(s);
    rp_status st;
    if (!q && rule == RP_SPEC_RULE_EXACT) { // deterministic drafts: the coupled draw (top of the file)
        for (int i = 0;; i++) {
            const float *row = logits + (size_t)i * V;
            if (on_row)
                on_row(ctx, i, row);
            int32_t x = rp_sampler_sample(s, row);
            if (i == k || x != draft[i]) {
                *n_accepted = i;
                *next = x;
                return RP_OK;
            }
            rp_sampler_accept(s, x, false);
        }
    }
    for (int i = 0;; i++) {
        const float *row = logits + (size_t)i * V;
        if (on_row)
            on_row(ctx, i, row);
        if ((st = rp_sampler_probs(s, row, work)))
            return st;
        if (i == k) { // every draft accepted: the bonus token
            *n_accepted = k;
            *next = draw(s, work, V, sum(work, V));
            return RP_OK;
        }
        int32_t d = draft[i];
        bool in = d >= 0 && d < V;
        double pd = in ? work[d] : 0.0;
        double qd = q ? (in ? q[(size_t)i * V + d] : 0.0) : 1.0;
        bool accept = pd > 0.0 && (pd >= qd || rp_sampler_uniform(s) * qd < pd);
        if (accept) {
            rp_sampler_accept(s, d, false);
            continue;
        }
        if (rule == RP_SPEC_RULE_EXACT) {
            if (q) {
                const float *qr = q + (size_t)i * V;
                for (int32_t j = 0; j < V; j++)
                    work[j] = work[j] > qr[j] ? work[j] - qr[j] : 0.0f;
            } else if (in) {
                work[d] = 0.0f;
            }
        }
        double total = sum(work, V);
        if (!(total > 0.0)) {
            // p <= q everywhere: only rounding gets here (p and q both sum to 1); p is then the answer.
            if ((st = rp_sampler_probs(s, row, work)))
                return st;
            total = sum(work, V);
        }
        *n_accepted = i;
        *next = draw(s, work, V, total);
        return RP_OK;
    }
}

rp_status rp_spec_verify(rp_sampler *s, const float *logits, const int32_t *draft, const float *q, int k, float *work,
                         int *n_accepted, int32_t *next)
{
    return rp_spec_verify_rule(s, logits, draft, q, k, work, n_accepted, next, RP_SPEC_RULE_EXACT, NULL, NULL);
}

rp_status rp_spec_verify_ex(rp_sampler *s, const float *logits, const int32_t *draft, const float *q, int k,
                            float *work, int *n_accepted, int32_t *next, rp_spec_row_fn on_row, void *ctx)
{
    return rp_spec_verify_rule(s, logits, draft, q, k, work, n_accepted, next, RP_SPEC_RULE_EXACT, on_row, ctx);
}
