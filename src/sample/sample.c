/*
 * sample.c - the sampling chain (see sample.h for the order and its rules).
 *
 * Design:
 *   - The working set is an array of (logit, id) candidates in scratch sized at
 *     create. It starts in id order; top-k and top-p sort only what they need
 *     (quickselect for k, a histogram of mass by logit bounds the set top-p must sort), always
 *     by (logit desc, id asc), a total order, so any machine gets the same list.
 *   - Penalty history: counts per token (any / generated) plus a list of the
 *     distinct tokens in the window, so applying penalties costs O(distinct),
 *     not O(vocab). A finite window is a ring of the last n tokens (prompt
 *     tokens stored as -1 - id); the oldest leaves the counts when it falls out.
 *   - Weights are expf of logits shifted so the maximum is 0 (no overflow);
 *     sums are in double, in candidate order.
 */
#include "sample.h"

#include <float.h>
#include <math.h>

typedef struct cand {
    float l;    // processed logit
    int32_t id; // token id
} cand;

struct rp_sampler {
    rp_sample_params p;
    int32_t n_vocab;
    uint64_t rng[4]; // xoshiro256** state

    bool penalize;    // some penalty is active and the window is not empty
    int32_t *cnt_all; // (n_vocab) occurrences in the window, prompt or generated
    int32_t *cnt_gen; // (n_vocab) generated occurrences in the window
    int32_t *seen;    // (n_vocab) distinct ids with cnt_all > 0, unordered
    int32_t *seen_at; // (n_vocab) index into seen, -1 when absent
    int32_t n_seen;
    int32_t *ring;    // (penalty_last_n) window entries: id, or -1 - id for a prompt token; NULL for -1
    int32_t ring_cap; // penalty_last_n when > 0
    int32_t ring_len;
    int32_t ring_head; // index of the oldest entry

    cand *cand;          // (n_vocab) working set
    cand *tmp;           // (n_vocab) radix sort buffer
    uint32_t hist[2048]; // radix sort digit counts
    float *w;            // (n_vocab) unnormalized weights of cand
    int32_t n_cand;      // size of the working set after the chain
    double w_sum;        // sum of w[0..n_cand)
};

/* ---- parameters ------------------------------------------------------------ */

void rp_sample_params_default(rp_sample_params *p)
{
    p->temperature = 1.0f;
    p->top_k = 0;
    p->top_p = 1.0f;
    p->min_p = 0.0f;
    p->repetition_penalty = 1.0f;
    p->presence_penalty = 0.0f;
    p->frequency_penalty = 0.0f;
    p->penalty_last_n = -1;
    p->seed = 0;
}

rp_status rp_sample_params_validate(const rp_sample_params *p)
{
    // Each test is written so NaN fails it.
    if (!(p->temperature >= 0.0f && p->temperature <= RP_SAMPLE_TEMPERATURE_MAX))
        return RP_ERR(RP_ERR_INVALID, "temperature %g is out of range: must be in [0, %g] (0 = greedy)",
                      (double)p->temperature, (double)RP_SAMPLE_TEMPERATURE_MAX);
    if (p->top_k < 0)
        return RP_ERR(RP_ERR_INVALID, "top_k %d is out of range: must be >= 0 (0 = off)", p->top_k);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return RP_ERR(RP_ERR_INVALID, "top_p %g is out of range: must be in (0, 1] (1 = off)", (double)p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return RP_ERR(RP_ERR_INVALID, "min_p %g is out of range: must be in [0, 1] (0 = off)", (double)p->min_p);
    if (!(p->repetition_penalty > 0.0f && p->repetition_penalty <= RP_SAMPLE_REPETITION_MAX))
        return RP_ERR(RP_ERR_INVALID, "repetition_penalty %g is out of range: must be in (0, %g] (1 = off)",
                      (double)p->repetition_penalty, (double)RP_SAMPLE_REPETITION_MAX);
    if (!(p->presence_penalty >= -RP_SAMPLE_PENALTY_MAX && p->presence_penalty <= RP_SAMPLE_PENALTY_MAX))
        return RP_ERR(RP_ERR_INVALID, "presence_penalty %g is out of range: must be in [-%g, %g] (0 = off)",
                      (double)p->presence_penalty, (double)RP_SAMPLE_PENALTY_MAX, (double)RP_SAMPLE_PENALTY_MAX);
    if (!(p->frequency_penalty >= -RP_SAMPLE_PENALTY_MAX && p->frequency_penalty <= RP_SAMPLE_PENALTY_MAX))
        return RP_ERR(RP_ERR_INVALID, "frequency_penalty %g is out of range: must be in [-%g, %g] (0 = off)",
                      (double)p->frequency_penalty, (double)RP_SAMPLE_PENALTY_MAX, (double)RP_SAMPLE_PENALTY_MAX);
    if (p->penalty_last_n < -1 || p->penalty_last_n > RP_SAMPLE_LAST_N_MAX)
        return RP_ERR(RP_ERR_INVALID, "penalty_last_n %d is out of range: must be -1 (all), 0 (none) or up to %d",
                      p->penalty_last_n, RP_SAMPLE_LAST_N_MAX);
    return RP_OK;
}

/* ---- RNG: splitmix64 seeding, xoshiro256** ---------------------------------- */

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static inline uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t rng_next(uint64_t s[4])
{
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

// Uniform in [0, 1) with 53 random bits.
static double rng_uniform(uint64_t s[4])
{
    return (double)(rng_next(s) >> 11) * 0x1.0p-53;
}

static void rng_seed(uint64_t s[4], uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        s[i] = splitmix64(&x); // never all zero: splitmix64 is a bijection of distinct counters
}

/* ---- create / destroy / history --------------------------------------------- */

rp_status rp_sampler_create(const rp_sample_params *p, int32_t n_vocab, rp_sampler **out)
{
    *out = NULL;
    if (n_vocab <= 0)
        return RP_ERR(RP_ERR_INVALID, "sampler: vocabulary size %d must be positive", (int)n_vocab);
    rp_status st = rp_sample_params_validate(p);
    if (st != RP_OK)
        return st;
    rp_sampler *s = rp_calloc(1, sizeof(*s));
    if (!s)
        return RP_ERR(RP_ERR_NOMEM, "sampler: out of memory");
    s->p = *p;
    s->n_vocab = n_vocab;
    s->penalize = p->penalty_last_n != 0 &&
                  (p->repetition_penalty != 1.0f || p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f);
    size_t n = (size_t)n_vocab;
    s->cand = rp_malloc(n * sizeof(cand));
    s->tmp = rp_malloc(n * sizeof(cand));
    s->w = rp_malloc(n * sizeof(float));
    if (!s->cand || !s->tmp || !s->w)
        goto nomem;
    if (s->penalize) {
        s->cnt_all = rp_calloc(n, sizeof(int32_t));
        s->cnt_gen = rp_calloc(n, sizeof(int32_t));
        s->seen = rp_malloc(n * sizeof(int32_t));
        s->seen_at = rp_malloc(n * sizeof(int32_t));
        if (!s->cnt_all || !s->cnt_gen || !s->seen || !s->seen_at)
            goto nomem;
        if (p->penalty_last_n > 0) {
            s->ring_cap = p->penalty_last_n;
            s->ring = rp_malloc((size_t)s->ring_cap * sizeof(int32_t));
            if (!s->ring)
                goto nomem;
        }
    }
    rp_sampler_reset(s, p->seed);
    *out = s;
    return RP_OK;
nomem:
    rp_sampler_destroy(s);
    return RP_ERR(RP_ERR_NOMEM, "sampler: out of memory for a vocabulary of %d", (int)n_vocab);
}

void rp_sampler_destroy(rp_sampler *s)
{
    if (!s)
        return;
    rp_free(s->ring);
    rp_free(s->seen_at);
    rp_free(s->seen);
    rp_free(s->cnt_gen);
    rp_free(s->cnt_all);
    rp_free(s->w);
    rp_free(s->tmp);
    rp_free(s->cand);
    rp_free(s);
}

int32_t rp_sampler_n_vocab(const rp_sampler *s)
{
    return s->n_vocab;
}

void rp_sampler_reset(rp_sampler *s, uint64_t seed)
{
    rng_seed(s->rng, seed);
    s->p.seed = seed;
    if (!s->penalize)
        return;
    for (int32_t i = 0; i < s->n_seen; i++) {
        int32_t t = s->seen[i];
        s->cnt_all[t] = 0;
        s->cnt_gen[t] = 0;
    }
    for (int32_t i = 0; i < s->n_vocab; i++)
        s->seen_at[i] = -1;
    s->n_seen = 0;
    s->ring_len = 0;
    s->ring_head = 0;
}

double rp_sampler_uniform(rp_sampler *s)
{
    return rng_uniform(s->rng);
}

static void count_add(rp_sampler *s, int32_t t, bool gen)
{
    if (s->cnt_all[t]++ == 0) {
        s->seen_at[t] = s->n_seen;
        s->seen[s->n_seen++] = t;
    }
    if (gen)
        s->cnt_gen[t]++;
}

static void count_remove(rp_sampler *s, int32_t t, bool gen)
{
    if (gen)
        s->cnt_gen[t]--;
    if (--s->cnt_all[t] == 0) {
        // swap-remove from the distinct list
        int32_t at = s->seen_at[t], last = s->seen[--s->n_seen];
        s->seen[at] = last;
        s->seen_at[last] = at;
        s->seen_at[t] = -1;
    }
}

void rp_sampler_accept(rp_sampler *s, int32_t token, bool is_prompt)
{
    if (!s->penalize || token < 0 || token >= s->n_vocab)
        return;
    if (s->ring) {
        if (s->ring_len == s->ring_cap) {
            int32_t old = s->ring[s->ring_head];
            count_remove(s, old < 0 ? -1 - old : old, old >= 0);
            s->ring[s->ring_head] = is_prompt ? -1 - token : token;
            s->ring_head = (s->ring_head + 1) % s->ring_cap;
        } else {
            s->ring[(s->ring_head + s->ring_len) % s->ring_cap] = is_prompt ? -1 - token : token;
            s->ring_len++;
        }
    }
    count_add(s, token, !is_prompt);
}

/* ---- the chain ------------------------------------------------------------- */

// (logit desc, id asc): a total order, so sorts and selections are unique.
static inline bool cand_before(const cand *a, const cand *b)
{
    return a->l > b->l || (a->l == b->l && a->id < b->id);
}

static inline void cand_swap(cand *a, cand *b)
{
    cand t = *a;
    *a = *b;
    *b = t;
}

// Rearranges c[0..n) so that c[0..k) are the k first in cand order (unsorted).
// Quickselect with a median-of-three pivot; logits here are never NaN.
static void select_top(cand *c, int32_t n, int32_t k)
{
    int32_t lo = 0, hi = n - 1;
    while (hi > lo) {
        int32_t mid = lo + (hi - lo) / 2;
        if (cand_before(&c[mid], &c[lo]))
            cand_swap(&c[mid], &c[lo]);
        if (cand_before(&c[hi], &c[lo]))
            cand_swap(&c[hi], &c[lo]);
        if (cand_before(&c[hi], &c[mid]))
            cand_swap(&c[hi], &c[mid]);
        cand pivot = c[mid]; // median of three
        int32_t i = lo, j = hi;
        while (i <= j) {
            while (cand_before(&c[i], &pivot))
                i++;
            while (cand_before(&pivot, &c[j]))
                j--;
            if (i <= j) {
                cand_swap(&c[i], &c[j]);
                i++;
                j--;
            }
        }
        // now [lo, j] before-or-equal pivot, [i, hi] after-or-equal, (j, i) equal to pivot
        if (k - 1 <= j)
            hi = j;
        else if (k - 1 >= i)
            lo = i;
        else
            return;
    }
}

// Copies logits into a float row with NaN -> -inf and the penalties applied.
// Returns the scratch row (s->w, reused as logits until weights are computed).
static float *penalized(rp_sampler *s, const float *logits)
{
    float *l = s->w;
    for (int32_t i = 0; i < s->n_vocab; i++) {
        float v = logits[i];
        l[i] = isnan(v) ? -INFINITY : v;
    }
    if (!s->penalize)
        return l;
    const float rep = s->p.repetition_penalty, pres = s->p.presence_penalty, freq = s->p.frequency_penalty;
    for (int32_t i = 0; i < s->n_seen; i++) {
        int32_t t = s->seen[i];
        float v = l[t];
        if (rep != 1.0f)
            v = v > 0.0f ? v / rep : v * rep;
        int32_t g = s->cnt_gen[t];
        if (g > 0)
            v -= pres + freq * (float)g;
        l[t] = isnan(v) ? -INFINITY : v; // inf - inf
    }
    return l;
}

// First index of the maximum of l (no NaN in l). The max is taken in 8
// independent lanes (no loop-carried chain through a loaded index; the
// compiler can vectorize it), then the first index holding it is found.
static int32_t argmax(const float *l, int32_t n)
{
    float m[8];
    for (int j = 0; j < 8; j++)
        m[j] = -INFINITY;
    int32_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            m[j] = l[i + j] > m[j] ? l[i + j] : m[j];
    float best = -INFINITY;
    for (int j = 0; j < 8; j++)
        best = m[j] > best ? m[j] : best;
    for (; i < n; i++)
        best = l[i] > best ? l[i] : best;
    for (i = 0; i < n; i++)
        if (l[i] == best)
            return i;
    return 0;
}

static inline uint32_t logit_key(float l)
{
    // ascending key for descending logits; -0 and +0 are one key, as in cand_before
    uint32_t u;
    if (l == 0.0f)
        l = 0.0f;
    memcpy(&u, &l, 4);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u); // ascending in l
    return ~u;
}

// One stable counting pass on an 11-bit digit; false (and nothing moved) when
// every element has the same digit.
static bool radix_pass(const cand *src, cand *dst, int32_t n, int shift, bool by_id, uint32_t *hist)
{
    memset(hist, 0, 2048 * sizeof(uint32_t));
    for (int32_t i = 0; i < n; i++) {
        uint32_t k = by_id ? (uint32_t)src[i].id : logit_key(src[i].l);
        hist[(k >> shift) & 2047]++;
    }
    uint32_t k0 = by_id ? (uint32_t)src[0].id : logit_key(src[0].l);
    if (hist[(k0 >> shift) & 2047] == (uint32_t)n)
        return false;
    uint32_t at = 0;
    for (int d = 0; d < 2048; d++) {
        uint32_t h = hist[d];
        hist[d] = at;
        at += h;
    }
    for (int32_t i = 0; i < n; i++) {
        uint32_t k = by_id ? (uint32_t)src[i].id : logit_key(src[i].l);
        dst[hist[(k >> shift) & 2047]++] = src[i];
    }
    return true;
}

// Sorts c[0..n) in cand order without allocating (glibc's qsort may malloc).
// Small runs: insertion sort. Larger: a stable LSD radix sort through s->tmp,
// first by id, then by the logit's bits, so ties end in id order.
static void sort_cands(rp_sampler *s, cand *c, int32_t n)
{
    if (n <= 48) {
        for (int32_t i = 1; i < n; i++) {
            cand x = c[i];
            int32_t j = i;
            for (; j > 0 && cand_before(&x, &c[j - 1]); j--)
                c[j] = c[j - 1];
            c[j] = x;
        }
        return;
    }
    cand *a = c, *b = s->tmp;
    uint32_t id_max = (uint32_t)s->n_vocab - 1;
    for (int pass = 0; pass < 6; pass++) {
        bool by_id = pass < 3; // ids first (least significant), then the logit
        int shift = (pass % 3) * 11;
        if (by_id && shift > 0 && (id_max >> shift) == 0)
            continue;
        if (radix_pass(a, b, n, shift, by_id, s->hist)) {
            cand *t = a;
            a = b;
            b = t;
        }
    }
    if (a != c)
        memcpy(c, a, (size_t)n * sizeof(cand));
}

// Top-p histogram: bucket b holds logits in (-(b+1)/8, -b/8]; the last one
// everything at or below -40 (including -inf).
#define TOP_P_BUCKETS 321
static inline int top_p_bucket(float l)
{
    return l > -40.0f ? (int)(-l * 8.0f) : TOP_P_BUCKETS - 1;
}

// Weights w[i] = expf(cand[i].l) (logits are <= 0 with max 0); returns their sum.
static double weigh(rp_sampler *s, int32_t n)
{
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++) {
        float w = expf(s->cand[i].l);
        s->w[i] = w;
        sum += w;
    }
    return sum;
}

// Runs steps 4-8 of the chain for temperature > 0: s->cand[0..n_cand) are the
// survivors, s->w their weights, s->w_sum the total.
static void run_chain(rp_sampler *s, const float *logits)
{
    const float *l = penalized(s, logits);
    int32_t n = s->n_vocab;
    float lmax = l[argmax(l, n)];
    cand *c = s->cand;

    // Step 4: shift by the max and scale by 1/T. Non-finite maxima: the tokens
    // at the maximum share the mass (all +inf ones, or everything if all -inf).
    if (isfinite(lmax)) {
        // A division, not a multiply by 1/T: a tiny T must give -inf, never 0 * inf.
        const float t = s->p.temperature;
        for (int32_t i = 0; i < n; i++) {
            c[i].l = (l[i] - lmax) / t;
            c[i].id = i;
        }
    } else {
        for (int32_t i = 0; i < n; i++) {
            c[i].l = l[i] == lmax ? 0.0f : -INFINITY;
            c[i].id = i;
        }
    }
    // l (aliasing s->w) is dead from here; s->w holds weights below.

    bool sorted = false;
    // Step 5: top-k.
    if (s->p.top_k > 0 && s->p.top_k < n) {
        select_top(c, n, s->p.top_k);
        n = s->p.top_k;
        sort_cands(s, c, n);
        sorted = true;
    }

    // Step 6: top-p. Sort only a set that provably holds the needed mass: a
    // histogram of the mass by logit (buckets of 1/8 nat below the max) finds
    // the highest cut whose tokens reach top_p; the sorted prefix lies inside it.
    if (s->p.top_p < 1.0f && n > 1) {
        double total = weigh(s, n), need = (double)s->p.top_p * total;
        if (!sorted) {
            double mass[TOP_P_BUCKETS] = {0};
            for (int32_t i = 0; i < n; i++)
                mass[top_p_bucket(c[i].l)] += s->w[i];
            int cut = TOP_P_BUCKETS - 1;
            double cum = 0.0;
            for (int b = 0; b < TOP_P_BUCKETS; b++) {
                cum += mass[b];
                if (cum >= need) {
                    cut = b;
                    break;
                }
            }
            int32_t m = 0;
            for (int32_t i = 0; i < n; i++)
                if (top_p_bucket(c[i].l) <= cut)
                    cand_swap(&c[m++], &c[i]);
            n = m;
            sort_cands(s, c, n);
            sorted = true;
        }
        double cum = 0.0;
        int32_t keep = n; // if rounding leaves the sum short: the whole set
        for (int32_t i = 0; i < n; i++) {
            cum += expf(c[i].l);
            if (cum >= need) {
                keep = i + 1;
                break;
            }
        }
        n = keep;
    }

    // Step 7: min-p, relative to the max probability (weight 1 after the shift).
    if (s->p.min_p > 0.0f) {
        int32_t m = 0;
        for (int32_t i = 0; i < n; i++)
            if (expf(c[i].l) >= s->p.min_p)
                c[m++] = c[i];
        n = m > 0 ? m : 1; // unreachable (the max has weight 1); kept for safety
    }

    // Step 8: softmax weights over the survivors.
    s->n_cand = n;
    s->w_sum = weigh(s, n);
}

int32_t rp_sampler_sample(rp_sampler *s, const float *logits)
{
    if (s->p.temperature == 0.0f) {
        const float *l = penalized(s, logits);
        return argmax(l, s->n_vocab);
    }
    run_chain(s, logits);
    // Always one draw per call, so the RNG position depends only on the step count.
    double u = rng_uniform(s->rng) * s->w_sum, cum = 0.0;
    int32_t last = 0;
    for (int32_t i = 0; i < s->n_cand; i++) {
        if (s->w[i] <= 0.0f)
            continue;
        last = i;
        cum += s->w[i];
        if (u < cum)
            return s->cand[i].id;
    }
    return s->cand[last].id; // u * total rounded up to the sum
}

rp_status rp_sampler_probs(rp_sampler *s, const float *logits, float *probs_out)
{
    memset(probs_out, 0, (size_t)s->n_vocab * sizeof(float));
    if (s->p.temperature == 0.0f) {
        probs_out[argmax(penalized(s, logits), s->n_vocab)] = 1.0f;
        return RP_OK;
    }
    run_chain(s, logits);
    for (int32_t i = 0; i < s->n_cand; i++)
        probs_out[s->cand[i].id] = (float)(s->w[i] / s->w_sum);
    return RP_OK;
}

void rp_sampler_logprobs(rp_sampler *s, const float *logits, float *logprobs_out)
{
    const float *l = penalized(s, logits);
    int32_t n = s->n_vocab;
    float lmax = l[argmax(l, n)];
    if (!isfinite(lmax)) {
        // All -inf: uniform. Some +inf: they share the mass, everything else gets none.
        int32_t at_max = 0;
        for (int32_t i = 0; i < n; i++)
            at_max += l[i] == lmax;
        float share = -logf((float)at_max);
        for (int32_t i = 0; i < n; i++)
            logprobs_out[i] = l[i] == lmax ? share : -INFINITY;
        return;
    }
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++)
        sum += exp((double)l[i] - (double)lmax);
    double lse = (double)lmax + log(sum);
    for (int32_t i = 0; i < n; i++)
        logprobs_out[i] = (float)((double)l[i] - lse);
}
