/*
 * engine_spec.c - speculative decoding inside the engine (its pieces are in
 * src/spec/spec.h; the hooks engine.c calls are in engine_int.h).
 *
 * One step, for each decoding request (x: its last token, at position t = n_comp):
 *   spec_plan (e->mu held): prompt lookup proposes from the request's own
 *     tokens; the controller, told how many tokens each method can draft now
 *     and what a step costs (measured here), picks the method and k (at most
 *     the cap, the tokens max_tokens leaves, the step's draft budget; 0 is a
 *     plain step); the KV slots of x and its k drafts are reserved (fewer when
 *     the pool is short: drafts never preempt anybody).
 *   spec_draft: the MTP layer first catches up over the positions the last
 *     forward computed, with their real hidden rows (for every request that
 *     keeps MTP); the last row of a request drafting with MTP gives its first
 *     draft, then chained passes the rest. A request drafting with the draft
 *     model feeds it every token it has not seen (its KV lags while unused),
 *     then chains. Drafts are argmax picks after the JSON mask of their
 *     position; a chain stops after an end-of-generation draft.
 *   The batch: x, then its drafts, every one wanting logits.
 *   spec_verify: in JSON mode row i is masked as if draft[0..i) were
 *     accepted; rp_spec_verify_ex draws each row's token exactly as plain
 *     sampling does and accepts the drafts while they match, so the emitted
 *     tokens are plain decoding's, seed for seed; logprobs come from each row
 *     with the history of its position. n_comp rolls back past the first
 *     rejection and the tokens are emitted one by one (end of generation and
 *     max_tokens end the request where plain decoding would).
 *   spec_after_step: the lookup index takes the emitted tokens; the controller
 *     observes the verification, and prompt lookup's unused proposal is
 *     checked against the emitted tokens for free; the draft model's KV is cut
 *     back to the accepted tokens; the forward's time feeds the cost fit.
 *   spec_publish (e->mu held): the main KV (MTP layer included) is cut back to
 *     n_comp; the counters go to the stats.
 *
 * MTP upkeep: the MTP layer's KV at position p needs the main model's hidden
 * row of p, which exists only in the step that computed p, so a request that
 * may draft with MTP runs the MTP layer over every position it computes (one
 * batched pass per step, about one decoder layer per token). It is kept from
 * admission when MTP drafting pays at the concurrency then, judged by what MTP
 * drafts have been worth in this engine so far (every request's verifications,
 * a prior before any) against what they cost, upkeep included; every
 * MTP_TRIAL-th admission keeps it anyway, so a changed workload is noticed (and
 * with adaptive off, always). It is dropped for good once, after
 * MTP_STEPS_MIN steps, fewer than MTP_USE_MIN of its steps (a decayed share)
 * draft with MTP.
 * The draft model costs nothing while unused: its KV catches up when picked.
 *
 * Costs: forward time T(n) = a + b n over the batch's tokens, fitted on steps
 * where every token wants logits (decode and drafts). For a request, the
 * plain step has the n0 tokens of everybody else's work: verify_per_token =
 * b / T(n0), draft_per_token[m] = measured time per drafted token / T(n0)
 * (for MTP plus the upkeep of one position), batch_tokens = the other
 * decoding requests. A busy batch makes b / T(n0)
 * small against the others' tokens, and the controller stops drafting.
 */
#include "engine_int.h"

#include <stdio.h>

#define MTP_USE_MIN 0.1    // a request stops keeping MTP when fewer of its steps than this draft with it,
#define MTP_USE_DECAY 0.95 // as a decayed share (a controller's probe every 16 steps is not use),
#define MTP_STEPS_MIN 32   // judged after this many steps
#define MTP_TRIAL 16       // every this many first admissions, one keeps MTP whatever MTP's record says
#define FIT_DECAY 0.97     // weight a step's time keeps per later step in the cost fit
#define FIT_PRIOR 0.5      // pseudo-variance of the fit's prior slope (in tokens^2)
#define DRAFT_DECAY 0.9    // the same for the time per drafted token
#define BUDGET_MIN 16      // drafts one step may carry, all requests together: max(2 k_cap, this) ...
#define DEFAULT_NGRAM_MIN 2
#define DEFAULT_NGRAM_MAX 8

static int imin(int a, int b)
{
    return a < b ? a : b;
}

/* ---- costs ------------------------------------------------------------------ */

static void fit_add(spec_fit *f, double n, double t)
{
    f->w = f->w * FIT_DECAY + 1.0;
    f->sn = f->sn * FIT_DECAY + n;
    f->snn = f->snn * FIT_DECAY + n * n;
    f->st = f->st * FIT_DECAY + t;
    f->snt = f->snt * FIT_DECAY + n * t;
}

// T(n) = *a + *b n. Until the batch size has varied, the slope leans on a prior:
// a token costs what the fixed part of a step does. False before any step.
static bool fit_get(const spec_fit *f, double *a, double *b)
{
    if (f->w <= 0.0)
        return false;
    double mn = f->sn / f->w, mt = f->st / f->w;
    double var = f->snn / f->w - mn * mn, cov = f->snt / f->w - mn * mt;
    double b0 = mt / (mn + 1.0);
    double slope = (cov + FIT_PRIOR * b0) / ((var > 0.0 ? var : 0.0) + FIT_PRIOR);
    if (!(slope > 0.0))
        slope = 0.0;
    if (slope > mt / mn)
        slope = mt / mn;
    *b = slope;
    *a = mt - slope * mn;
    return true;
}

// The cost of drafting for a request when the step without its drafts has n0
// tokens and `others` other requests emit tokens.
static void step_cost(const spec_engine *se, int n0, int others, rp_spec_cost *c)
{
    double a, b;
    memset(c, 0, sizeof(*c));
    c->batch_tokens = others > 0 ? others : 0;
    if (!fit_get(&se->fit, &a, &b) || !(a + b * n0 > 0.0)) {
        // Nothing measured yet: a cautious guess (a verified token costs most of a
        // plain step, as on a CPU); the first steps replace it.
        c->verify_per_token = 0.8;
        return;
    }
    double t0 = a + b * n0;
    c->verify_per_token = b / t0;
    for (int m = 0; m < RP_SPEC_N_METHODS; m++)
        c->draft_per_token[m] = se->t_draft[m] / t0;
    // MTP drafts also carry the upkeep of the positions they make (about one catch-up row each).
    c->draft_per_token[RP_SPEC_MTP] += se->t_upkeep / t0;
}

static void decayed_mean(double *mean, double seconds, int tokens)
{
    if (tokens <= 0)
        return;
    double per = seconds / tokens;
    *mean = *mean > 0.0 ? *mean * DRAFT_DECAY + per * (1.0 - DRAFT_DECAY) : per;
}

static void draft_time(spec_engine *se, rp_spec_method m, double seconds, int tokens)
{
    decayed_mean(&se->t_draft[m], seconds, tokens);
}

// Whether MTP drafting pays with n_running requests in the batch, by what MTP
// drafts have been worth in this engine so far (acceptance by position over
// every request's verifications; the prior before any) against what they cost,
// upkeep included.
static bool mtp_pays(const spec_engine *se, int n_running)
{
    rp_spec_cost c;
    step_cost(se, n_running, n_running - 1, &c);
    double per = c.verify_per_token + c.draft_per_token[RP_SPEC_MTP];
    double bar = n_running * se->ctl.min_gain;
    for (int k = 1; k <= se->k_cap; k++)
        if ((n_running - 1 + rp_spec_ctl_expected(&se->mtp_seen, RP_SPEC_MTP, k)) / (1.0 + k * per) > bar)
            return true;
    return false;
}

/* ---- drafts ------------------------------------------------------------------ */

static bool json_scratch(rp_engine *e)
{
    if (!e->spec.jm && (!e->jv || rp_json_match_create(e->jv, NULL, &e->spec.jm)))
        return false;
    return true;
}

// Puts the scratch matcher where g's grammar state would be after its first n drafts.
static bool json_ahead(rp_engine *e, rp_gen *g, int n)
{
    rp_json_match_copy(e->spec.jm, g->jm);
    for (int i = 0; i < n; i++)
        if (rp_json_match_accept(e->spec.jm, g->spec.draft[i]))
            return false;
    return true;
}

// Cuts a proposal where it cannot go on: after an end-of-generation token (the
// request would end there) and, in JSON mode, before a token the grammar refuses.
static int cut_drafts(rp_engine *e, rp_gen *g, const int32_t *d, int n)
{
    if (g->jm)
        rp_json_match_copy(e->spec.jm, g->jm);
    for (int i = 0; i < n; i++) {
        if (g->jm && rp_json_match_accept(e->spec.jm, d[i]))
            return i;
        if (!g->ignore_eos && engine_is_eog(e, d[i]))
            return i + 1;
    }
    return n;
}

static int32_t argmax(const float *row, int n)
{
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (row[i] > row[best])
            best = i;
    return best;
}

// Picks g's next draft from a row of draft logits (n ids; masked in place for
// JSON) and appends it. A draft that ends generation ends the chain (k = n_draft).
static void add_draft(rp_engine *e, rp_gen *g, float *row, int n)
{
    spec_gen *sg = &g->spec;
    if (g->jm) {
        if (!json_ahead(e, g, sg->n_draft)) {
            sg->k = sg->n_draft;
            return;
        }
        rp_json_match_mask(e->spec.jm, row, n);
    }
    int32_t d = argmax(row, n);
    sg->draft[sg->n_draft++] = d;
    if (!g->ignore_eos && engine_is_eog(e, d))
        sg->k = sg->n_draft;
}

/* ---- per request ---------------------------------------------------------------- */

int spec_k_cap(const rp_engine *e)
{
    return e->spec.on ? e->spec.k_cap : 0;
}

static void gen_start(rp_engine *e, rp_gen *g)
{
    spec_engine *se = &e->spec;
    spec_gen *sg = &g->spec;
    rp_kv_seq_init(&sg->dkv);
    sg->n_acc = -1;
    if (!se->on)
        return;
    sg->draft = rp_malloc((size_t)se->k_cap * sizeof(int32_t));
    sg->shadow = rp_malloc((size_t)se->k_cap * sizeof(int32_t));
    if (!sg->draft || !sg->shadow || rp_spec_ctl_init(&sg->ctl, &se->ctl))
        goto off;
    if (se->use[RP_SPEC_NGRAM] && !rp_spec_lookup_create(se->ngram_max, &sg->lk) &&
        rp_spec_lookup_append(sg->lk, g->toks, g->n_tok)) {
        rp_spec_lookup_destroy(sg->lk); // no memory: this request drafts without prompt lookup
        sg->lk = NULL;
    }
    // (admit() calls this with g already counted among the running requests)
    // Asked for MTP alone (method mtp): kept, the controller still decides each step.
    bool only = !se->use[RP_SPEC_NGRAM] && !se->use[RP_SPEC_DRAFT];
    sg->mtp = se->use[RP_SPEC_MTP] &&
              (!se->ctl.adaptive || only || ++se->admissions % MTP_TRIAL == 0 || mtp_pays(se, e->n_running));
    sg->mtp_use = 1.0; // the benefit of the doubt until MTP_STEPS_MIN steps have been seen
    sg->dm = se->use[RP_SPEC_DRAFT];
    sg->on = true;
    return;
off:
    spec_gen_end(e, g);
}

void spec_gen_admitted(rp_engine *e, rp_gen *g, bool first)
{
    if (first)
        gen_start(e, g);
    // Cached positions come with their MTP rows (the prefix cache recomputes the
    // last one of a model with MTP: its row needs the next token); the rest is
    // caught up from the hidden rows of the forwards that compute it.
    g->spec.mtp_done = g->n_comp;
    g->spec.h_pos = -1;
}

void spec_gen_preempted(rp_engine *e, rp_gen *g)
{
    spec_gen *sg = &g->spec;
    sg->mtp_done = 0;
    sg->h_pos = -1;
    sg->k = sg->n_draft = 0;
    if (e->spec.dkv)
        rp_kv_seq_truncate(e->spec.dkv, &sg->dkv, 0);
    sg->d_comp = 0;
}

void spec_gen_end(rp_engine *e, rp_gen *g)
{
    spec_gen *sg = &g->spec;
    rp_free(sg->draft);
    rp_free(sg->shadow);
    sg->draft = sg->shadow = NULL;
    rp_spec_lookup_destroy(sg->lk);
    sg->lk = NULL;
    if (e->spec.dkv)
        rp_kv_seq_deinit(e->spec.dkv, &sg->dkv);
    sg->on = sg->mtp = sg->dm = false;
    sg->k = sg->n_draft = 0;
}

/* ---- planning (e->mu held) ------------------------------------------------------ */

// Reserves KV slots for the decode token and up to k drafts; returns how many drafts got slots.
static int reserve_drafts(rp_engine *e, rp_gen *g, int k)
{
    if (k <= 0)
        return 0;
    int need = g->n_comp + 1;
    if (g->kv.n_tokens >= need + k || rp_kv_seq_reserve(e->kv, &g->kv, need + k) == RP_OK)
        return k;
    int room = (g->kv.n_blocks + rp_kv_pool_free_blocks(e->kv)) * e->block - need;
    k = imin(k, room);
    if (k <= 0 || rp_kv_seq_reserve(e->kv, &g->kv, need + k))
        return 0;
    return k;
}

// One decode step of a request keeping MTP; `used`: it drafts with MTP this step.
static void mtp_step(rp_engine *e, rp_gen *g, bool used)
{
    spec_gen *sg = &g->spec;
    if (!sg->mtp)
        return;
    sg->mtp_use = sg->mtp_use * MTP_USE_DECAY + (used ? 1.0 - MTP_USE_DECAY : 0.0);
    if (++sg->mtp_steps >= MTP_STEPS_MIN && sg->mtp_use < MTP_USE_MIN && e->spec.ctl.adaptive)
        sg->mtp = false;
}

void spec_plan(rp_engine *e)
{
    spec_engine *se = &e->spec;
    if (!se->on)
        return;
    int n_dec = 0, n_pre = 0;
    for (rp_gen *g = e->r_head; g; g = g->next) {
        spec_gen *sg = &g->spec;
        sg->k = sg->n_draft = sg->n_shadow = 0;
        sg->n_acc = -1;
        int left = g->n_tok - g->n_comp;
        if (left == 1)
            n_dec++;
        else
            n_pre += left;
    }
    int budget = imin(se->budget, e->max_batch - n_dec);
    int n0 = imin(e->max_batch, n_dec + n_pre); // the step's tokens without drafts
    for (rp_gen *g = e->r_head; g; g = g->next) {
        spec_gen *sg = &g->spec;
        if (!sg->on || g->n_tok - g->n_comp != 1)
            continue;
        int lim = imin(imin(se->k_cap, g->max_tokens - g->n_gen - 1), budget);
        if (lim <= 0 || (g->jm && !json_scratch(e))) {
            mtp_step(e, g, false);
            continue;
        }
        int avail[RP_SPEC_N_METHODS] = {0};
        if (sg->lk) {
            int n = rp_spec_lookup_follow(sg->lk, se->ngram_min, lim, sg->draft, NULL);
            avail[RP_SPEC_NGRAM] = cut_drafts(e, g, sg->draft, n);
        }
        if (sg->mtp)
            avail[RP_SPEC_MTP] = lim;
        if (sg->dm)
            avail[RP_SPEC_DRAFT] = lim;
        rp_spec_cost cost;
        step_cost(se, n0, n_dec - 1, &cost);
        rp_spec_method m;
        int k;
        rp_spec_ctl_choose(&sg->ctl, avail, &cost, &m, &k);
        if (avail[RP_SPEC_NGRAM] > 0 && (k == 0 || m != RP_SPEC_NGRAM)) {
            sg->n_shadow = avail[RP_SPEC_NGRAM];
            memcpy(sg->shadow, sg->draft, (size_t)sg->n_shadow * sizeof(int32_t));
        }
        k = reserve_drafts(e, g, k);
        sg->method = m;
        sg->k = k;
        if (m == RP_SPEC_NGRAM)
            sg->n_draft = k; // already in draft[]
        budget -= k;
        n0 += k;
        mtp_step(e, g, m == RP_SPEC_MTP && k > 0);
    }
}

/* ---- drafting (e->mu not held) --------------------------------------------------- */

static bool mtp_drafting(const rp_gen *g)
{
    return g->spec.method == RP_SPEC_MTP && g->spec.n_draft < g->spec.k && g->spec.mtp;
}

// Runs one MTP pass over se->m_* (n tokens, ns sequences, hidden rows in m_in).
// On failure the requests in it stop keeping MTP (the text is unaffected).
static bool mtp_pass(rp_engine *e, int n, int ns)
{
    spec_engine *se = &e->spec;
    rp_batch mb = {n, se->m_tok, se->m_pos, se->m_seq, se->m_want, se->m_seqs, ns, NULL};
    if (rp_model_forward_mtp(e->m, e->kv, &mb, se->m_in, se->m_logits, se->m_out) == RP_OK)
        return true;
    RP_LOGW("speculative decoding: the MTP pass failed (%s); MTP drafting stops for %d requests", rp_error_message(),
            ns);
    for (int s = 0; s < ns; s++) {
        se->m_gens[s]->spec.mtp = false;
        se->m_gens[s]->spec.k = se->m_gens[s]->spec.n_draft;
    }
    return false;
}

// The MTP catch-up over the last forward's positions, with the first drafts,
// then the chains.
static void mtp_run(rp_engine *e)
{
    spec_engine *se = &e->spec;
    const int dim = e->cfg->dim, V = e->n_vocab;
    const size_t row = (size_t)dim * sizeof(float);
    int n = 0, ns = 0, nrow = 0;
    for (rp_gen *g = e->r_head; g; g = g->next) {
        spec_gen *sg = &g->spec;
        if (!sg->mtp || sg->mtp_done >= g->n_comp)
            continue;
        if (sg->h_pos != sg->mtp_done) { // no hidden rows for these positions (cannot happen): stop keeping MTP
            sg->mtp = false;
            continue;
        }
        int end = imin(g->n_comp, g->n_tok - 1); // position p needs toks[p + 1]
        bool first = mtp_drafting(g) && end == g->n_tok - 1;
        int s = ns++;
        se->m_seqs[s] = &g->kv;
        se->m_gens[s] = g;
        for (int p = sg->mtp_done; p < end; p++, n++) {
            se->m_tok[n] = g->toks[p + 1];
            se->m_pos[n] = p;
            se->m_seq[n] = s;
            se->m_want[n] = first && p == end - 1;
            memcpy(se->m_in + (size_t)n * dim, se->hidden + (size_t)(sg->h_row + p - sg->h_pos) * dim, row);
        }
        sg->m_row = first ? nrow++ : -1;
        sg->mtp_done = end;
    }
    double t0 = rp_time_s();
    bool ok = n > 0 && mtp_pass(e, n, ns);
    if (ok && n <= 2 * ns) // the steady state's cost per position (a prompt's catch-up is a one-off)
        decayed_mean(&se->t_upkeep, rp_time_s() - t0, n);
    if (ok)
        for (int s = 0; s < ns; s++) {
            rp_gen *g = se->m_gens[s];
            if (g->spec.m_row >= 0 && mtp_drafting(g))
                add_draft(e, g, se->m_logits + (size_t)g->spec.m_row * V, V);
        }
    // Chains: draft j+1 from (draft j at position t + j - 1, the MTP's own output row for it).
    for (int j = 1; j < se->k_cap; j++) {
        n = 0;
        for (rp_gen *g = e->r_head; g; g = g->next) {
            spec_gen *sg = &g->spec;
            if (!mtp_drafting(g) || sg->n_draft != j || sg->m_row < 0)
                continue;
            se->m_seqs[n] = &g->kv;
            se->m_gens[n] = g;
            se->m_tok[n] = sg->draft[j - 1];
            se->m_pos[n] = g->n_comp + j - 1;
            se->m_seq[n] = n;
            se->m_want[n] = true;
            memcpy(se->m_in + (size_t)n * dim, se->m_out + (size_t)sg->m_row * dim, row);
            sg->m_row = n++;
        }
        if (n == 0)
            break;
        t0 = rp_time_s();
        if (!mtp_pass(e, n, n))
            break;
        draft_time(se, RP_SPEC_MTP, rp_time_s() - t0, n);
        for (int s = 0; s < n; s++)
            add_draft(e, se->m_gens[s], se->m_logits + (size_t)s * V, V);
    }
}

// Draft-model passes: each drafting request's KV catches up to x (in chunks of
// the draft model's batch), the last row giving its first draft; then chains.
static void draft_model_run(rp_engine *e)
{
    spec_engine *se = &e->spec;
    const int V = se->d_vocab < e->n_vocab ? se->d_vocab : e->n_vocab;
    for (rp_gen *g = e->r_head; g; g = g->next) {
        spec_gen *sg = &g->spec;
        if (sg->method == RP_SPEC_DRAFT && sg->k > 0 && // slots for x and k - 1 fed drafts
            rp_kv_seq_reserve(se->dkv, &sg->dkv, g->n_comp + sg->k))
            sg->k = 0;
    }
    for (int j = 0; j < se->k_cap; j++) { // pass j: the catch-up (j = 0, maybe several), then draft j
        bool again;
        do {
            int n = 0, ns = 0, nrow = 0;
            again = false;
            for (rp_gen *g = e->r_head; g; g = g->next) {
                spec_gen *sg = &g->spec;
                if (sg->method != RP_SPEC_DRAFT || sg->n_draft != j || sg->n_draft >= sg->k)
                    continue;
                int t = g->n_comp;                                               // x's position
                int from = j == 0 ? sg->d_comp : t + j, to = j == 0 ? t : t + j; // positions fed
                int take = imin(to - from + 1, se->d_max_batch - n);
                if (take <= 0) { // the pass is full: next time
                    again = true;
                    continue;
                }
                int s = ns++;
                se->m_seqs[s] = &sg->dkv;
                se->m_gens[s] = g;
                for (int i = 0; i < take; i++, n++) {
                    int p = from + i;
                    se->m_tok[n] = p <= t ? g->toks[p] : sg->draft[p - t - 1];
                    se->m_pos[n] = p;
                    se->m_seq[n] = s;
                    se->m_want[n] = p == to;
                }
                sg->m_row = from + take > to ? nrow++ : -1; // its logits row, in this pass
                if (j == 0)
                    sg->d_comp = from + take;
                again = again || from + take <= to;
            }
            if (n == 0)
                break;
            rp_batch b = {n, se->m_tok, se->m_pos, se->m_seq, se->m_want, se->m_seqs, ns, NULL};
            double t0 = rp_time_s();
            if (rp_model_forward(se->dm, se->dkv, &b, se->d_logits)) {
                RP_LOGW("speculative decoding: the draft model failed (%s); it stops drafting for %d requests",
                        rp_error_message(), ns);
                for (int s = 0; s < ns; s++) {
                    spec_gen *sg = &se->m_gens[s]->spec;
                    sg->dm = false;
                    sg->k = sg->n_draft;
                    rp_kv_seq_truncate(se->dkv, &sg->dkv, 0);
                    sg->d_comp = 0;
                }
                break;
            }
            // What a draft costs in the steady state (a catch-up of one or two tokens per
            // request, or a chain pass); the backlog of a request that has not drafted
            // for a while is a one-off and does not count.
            if (n <= 2 * ns)
                draft_time(se, RP_SPEC_DRAFT, rp_time_s() - t0, nrow);
            for (int s = 0; s < ns; s++) {
                rp_gen *g = se->m_gens[s];
                if (g->spec.m_row >= 0)
                    add_draft(e, g, se->d_logits + (size_t)g->spec.m_row * se->d_vocab, V);
            }
        } while (again);
    }
}

void spec_draft(rp_engine *e)
{
    spec_engine *se = &e->spec;
    if (!se->on)
        return;
    if (se->use[RP_SPEC_MTP])
        mtp_run(e);
    if (se->dm)
        draft_model_run(e);
}

/* ---- verification (e->mu not held) -------------------------------------------- */

typedef struct row_ctx {
    rp_engine *e;
    rp_gen *g;
} row_ctx;

// Logprobs of row i, with the history of its position (rp_spec_verify_ex calls it
// before the row's draw): the top list, and the draft's logprob in case it is kept.
static void logprob_row(void *ctx, int i, const float *row)
{
    row_ctx *c = ctx;
    rp_gen *g = c->g;
    rp_gen_token *t = &g->step[i];
    t->id = i < g->spec.n_draft ? g->spec.draft[i] : -1;
    engine_logprobs(c->e, g, row, t);
}

void spec_verify(rp_engine *e, rp_gen *g, float *rows)
{
    spec_engine *se = &e->spec;
    spec_gen *sg = &g->spec;
    const int k = sg->n_draft, V = e->n_vocab;
    if (g->jm) { // row i masked as after draft[0..i); a refused draft is rejected at its row, later rows unread
        rp_json_match_copy(se->jm, g->jm);
        for (int i = 0; i <= k; i++) {
            rp_json_match_mask(se->jm, rows + (size_t)i * V, V);
            if (i < k && rp_json_match_accept(se->jm, sg->draft[i]))
                break;
        }
    }
    int n;
    int32_t next;
    row_ctx c = {e, g};
    rp_status st = rp_spec_verify_ex(g->smp, rows, sg->draft, NULL, k, se->work, &n, &next,
                                     g->n_logprobs >= 0 ? logprob_row : NULL, &c);
    if (st) {
        snprintf(e->step_err, sizeof(e->step_err), "speculative verification: %s", rp_error_message());
        g->done = RP_GEN_ERROR;
        g->done_msg = e->step_err;
        return;
    }
    g->n_comp -= k - n; // the rejected drafts' KV is rolled back at publish
    sg->n_acc = n;
    for (int i = 0; i <= n && g->done == RP_GEN_RUNNING; i++) {
        rp_gen_token *t = &g->step[g->n_step]; // == step[i]: the row's logprobs are there
        t->id = i < n ? sg->draft[i] : next;
        if (i == n) {
            rp_sampler_accept(g->smp, next, false); // the drafts went in during verification
            if (g->n_logprobs >= 0)
                t->logprob = e->lp[next]; // e->lp still holds row n, the last one read
        }
        if (g->n_logprobs < 0) {
            t->logprob = 0.0f;
            t->n_top = 0;
        }
        engine_emit(e, g);
    }
    // An end of generation among the accepted drafts: the tokens after it are
    // not the request's (the prefix cache keys blocks by toks[0, n_comp)).
    if (g->n_comp > g->n_tok)
        g->n_comp = g->n_tok;
}

/* ---- after the step ------------------------------------------------------------ */

void spec_after_step(rp_engine *e)
{
    spec_engine *se = &e->spec;
    if (!se->on)
        return;
    if (e->n_b == e->n_b_rows && e->n_b > 0) { // decode and drafts only: what verification costs
        // A step the OS stalled (a shared machine) counts as at most twice the
        // prediction: one outlier must not make drafting look free or ruinous.
        double a, b, t = se->t_fwd;
        if (fit_get(&se->fit, &a, &b) && t > 2.0 * (a + b * e->n_b))
            t = 2.0 * (a + b * e->n_b);
        fit_add(&se->fit, e->n_b, t);
    }
    for (int s = 0; s < e->n_b_seqs; s++) {
        rp_gen *g = e->b_gens[s];
        spec_gen *sg = &g->spec;
        // Rejected drafts went through the recurrent state too: roll it back to what was
        // accepted (a replay of the Gated DeltaNet layers over the logged inputs).
        if (g->kv.state_pos > g->n_comp && g->done != RP_GEN_ERROR &&
            rp_model_seq_truncate(e->m, e->kv, &g->kv, g->n_comp)) {
            snprintf(e->step_err, sizeof(e->step_err), "speculative rollback: %s", rp_error_message());
            g->done = RP_GEN_ERROR;
            g->done_msg = e->step_err;
        }
        if (!sg->on || g->done == RP_GEN_ERROR)
            continue;
        int len = sg->lk ? rp_spec_lookup_len(sg->lk) : 0;
        if (sg->lk && len < g->n_tok && rp_spec_lookup_append(sg->lk, g->toks + len, g->n_tok - len)) {
            rp_spec_lookup_destroy(sg->lk); // no memory: this request goes on without prompt lookup
            sg->lk = NULL;
        }
        if (sg->n_acc >= 0 && sg->n_draft > 0) {
            rp_spec_ctl_observe(&sg->ctl, sg->method, sg->n_draft, sg->n_acc);
            if (sg->method == RP_SPEC_MTP)
                rp_spec_ctl_observe(&se->mtp_seen, RP_SPEC_MTP, sg->n_draft, sg->n_acc);
        }
        if (sg->n_shadow > 0 && g->n_step > 0) { // what prompt lookup would have had accepted
            int j = 0, m = g->n_step;
            while (j < sg->n_shadow && j < m && sg->shadow[j] == g->step[j].id)
                j++;
            int tried = j < m ? imin(j + 1, sg->n_shadow) : j;
            rp_spec_ctl_observe(&sg->ctl, RP_SPEC_NGRAM, tried, j);
        }
        if (sg->method == RP_SPEC_DRAFT && sg->n_draft > 0 && sg->n_acc >= 0) {
            // The draft KV holds x and draft[0, n_draft - 1): keep what was accepted.
            int keep = imin(g->n_comp, sg->h_pos + sg->n_draft);
            if (keep < sg->dkv.n_tokens)
                rp_kv_seq_truncate(se->dkv, &sg->dkv, keep);
            sg->d_comp = keep;
        }
    }
}

void spec_publish(rp_engine *e, rp_gen *g)
{
    spec_gen *sg = &g->spec;
    if (g->n_comp == g->n_tok - 1 && g->kv.n_tokens > g->n_comp)
        rp_kv_seq_truncate(e->kv, &g->kv, g->n_comp); // slots of rejected or unused drafts
    if (sg->n_acc < 0 || sg->n_draft <= 0)
        return;
    int m = sg->method;
    g->stats.spec_drafted[m] += sg->n_draft;
    g->stats.spec_accepted[m] += sg->n_acc;
    e->stats.spec_steps++;
    e->stats.spec_drafted[m] += (uint64_t)sg->n_draft;
    e->stats.spec_accepted[m] += (uint64_t)sg->n_acc;
    for (int i = 0; i < sg->n_draft; i++) {
        int slot = i < RP_SPEC_POS ? i : RP_SPEC_POS - 1;
        e->stats.spec_pos_drafted[m][slot]++;
        e->stats.spec_pos_accepted[m][slot] += i < sg->n_acc;
    }
}

/* ---- the engine ------------------------------------------------------------------ */

rp_status spec_check(const rp_model *m, const rp_engine_spec_params *p)
{
    if ((int)p->method < RP_ENGINE_SPEC_AUTO || (int)p->method > RP_ENGINE_SPEC_DRAFT)
        return RP_ERR(RP_ERR_INVALID, "speculative method %d is not one of auto, off, ngram, mtp, draft",
                      (int)p->method);
    if (p->k_max < 0 || p->k_max > RP_SPEC_K_MAX)
        return RP_ERR(RP_ERR_INVALID, "num_speculative_tokens %d is out of range: must be in [1, %d] (0 = %d)",
                      p->k_max, RP_SPEC_K_MAX, RP_ENGINE_SPEC_K_DEFAULT);
    int lo = p->ngram_min ? p->ngram_min : DEFAULT_NGRAM_MIN, hi = p->ngram_max ? p->ngram_max : DEFAULT_NGRAM_MAX;
    if (p->ngram_min < 0 || p->ngram_min > RP_SPEC_NGRAM_MAX || p->ngram_max < 0 || p->ngram_max > RP_SPEC_NGRAM_MAX ||
        (p->ngram_max && lo > hi) || (!p->ngram_max && lo > RP_SPEC_NGRAM_MAX))
        return RP_ERR(RP_ERR_INVALID,
                      "prompt lookup n-gram lengths %d..%d are out of range: must be 1 <= min <= max <= %d (0 = "
                      "default %d..%d)",
                      p->ngram_min, p->ngram_max, RP_SPEC_NGRAM_MAX, DEFAULT_NGRAM_MIN, DEFAULT_NGRAM_MAX);
    if (p->draft_path && p->draft)
        return RP_ERR(RP_ERR_INVALID, "a draft model was given twice (a path and a loaded model)");
    if (p->draft && !p->draft_tok)
        return RP_ERR(RP_ERR_INVALID, "a loaded draft model needs its tokenizer");
    if (p->method == RP_ENGINE_SPEC_MTP && !rp_model_has_mtp(m))
        return RP_ERR(RP_ERR_INVALID, "speculative method mtp: the model %s has no MTP layer", rp_model_path(m));
    if (p->method == RP_ENGINE_SPEC_DRAFT && !p->draft_path && !p->draft)
        return RP_ERR(RP_ERR_INVALID, "speculative method draft needs a draft model (--draft-model)");
    return RP_OK;
}

// Takes or loads the draft model and checks that it shares the model's tokenizer.
static rp_status draft_init(rp_engine *e, const rp_engine_spec_params *p)
{
    spec_engine *se = &e->spec;
    const rp_tokenizer *dtok = p->draft_tok;
    rp_status st;
    if (p->draft) {
        se->dm = p->draft;
    } else {
        rp_model_params mp;
        rp_model_params_default(&mp);
        mp.quiet = true;
        rp_backend *be = p->draft_backend ? p->draft_backend : rp_model_backend(e->m);
        if ((st = rp_model_load(p->draft_path, be, &mp, &se->dm_owned)) ||
            (st = rp_tok_load_file(p->draft_path, &se->dtok_owned)))
            return rp_error_prefix(st, "draft model");
        se->dm = se->dm_owned;
        dtok = se->dtok_owned;
    }
    if (rp_model_has_state(se->dm)) // its KV would be cut back with rp_kv_seq_truncate, which state cannot follow
        return RP_ERR(RP_ERR_UNSUPPORTED, "draft model %s: a model with recurrent state (%s) cannot draft yet",
                      rp_model_path(se->dm), rp_model_get_config(se->dm)->arch_name);
    se->d_vocab = rp_model_get_config(se->dm)->n_vocab;
    se->d_max_batch = rp_model_max_batch(se->dm);
    if ((st = rp_spec_check_draft(e->tok, e->n_vocab, dtok, se->d_vocab)))
        return rp_error_prefix(st, "draft model %s", rp_model_path(se->dm));
    return rp_model_kv_create(se->dm, e->block, e->n_blocks, rp_kv_pool_type(e->kv), &se->dkv);
}

rp_status spec_engine_init(rp_engine *e, const rp_engine_params *p)
{
    spec_engine *se = &e->spec;
    const rp_engine_spec_params *sp = &p->spec;
    e->max_rows = e->max_running;
    rp_status st;
    se->want_hidden = rp_calloc((size_t)e->max_batch, sizeof(bool)); // build_batch fills it, speculation or not
    if (!se->want_hidden)
        return RP_ERR(RP_ERR_NOMEM, "engine: out of memory for the batch buffers");
    se->k_cap = sp->k_max ? sp->k_max : RP_ENGINE_SPEC_K_DEFAULT;
    se->ngram_min = sp->ngram_min ? sp->ngram_min : DEFAULT_NGRAM_MIN;
    se->ngram_max =
        sp->ngram_max ? sp->ngram_max : (se->ngram_min > DEFAULT_NGRAM_MAX ? se->ngram_min : DEFAULT_NGRAM_MAX);
    rp_spec_ctl_params_default(&se->ctl);
    se->ctl.k_max = se->k_cap;
    se->ctl.adaptive = sp->adaptive;
    rp_spec_ctl_init(&se->mtp_seen, &se->ctl); // (the parameters are valid: k_cap was checked)
    rp_engine_spec_method mth = sp->method;
    if (mth == RP_ENGINE_SPEC_OFF)
        return RP_OK;
    bool auto_ = mth == RP_ENGINE_SPEC_AUTO;
    bool has_mtp = rp_model_has_mtp(e->m);
    bool has_draft = sp->draft_path || sp->draft;
    se->use[RP_SPEC_NGRAM] = auto_ || mth == RP_ENGINE_SPEC_NGRAM;
    se->use[RP_SPEC_MTP] = has_mtp && (auto_ || mth == RP_ENGINE_SPEC_MTP);
    se->use[RP_SPEC_DRAFT] = has_draft && (auto_ || mth == RP_ENGINE_SPEC_DRAFT);
    if (se->use[RP_SPEC_DRAFT] && (st = draft_init(e, sp)))
        return st;
    se->budget = imin(e->max_batch - e->max_running, 2 * se->k_cap > BUDGET_MIN ? 2 * se->k_cap : BUDGET_MIN);
    if (se->budget <= 0)
        return RP_OK; // every token of a batch goes to decode tokens: no room to draft
    se->on = true;
    e->max_rows = e->max_running + se->budget;

    size_t B = (size_t)e->max_batch, R = (size_t)e->max_running, V = (size_t)e->n_vocab, D = (size_t)e->cfg->dim;
    size_t MB = se->dm && (size_t)se->d_max_batch > B ? (size_t)se->d_max_batch : B;
    se->work = rp_malloc(V * sizeof(float));
    se->m_tok = rp_malloc(MB * sizeof(int32_t));
    se->m_pos = rp_malloc(MB * sizeof(int32_t));
    se->m_seq = rp_malloc(MB * sizeof(int32_t));
    se->m_want = rp_malloc(MB * sizeof(bool));
    se->m_seqs = rp_malloc(R * sizeof(rp_kv_seq *));
    se->m_gens = rp_malloc(R * sizeof(rp_gen *));
    bool ok = se->work && se->m_tok && se->m_pos && se->m_seq && se->m_want && se->m_seqs && se->m_gens;
    // The rows the backends copy results into: their host memory (pinned on a GPU).
    rp_backend *be = rp_model_backend(e->m);
    if (ok && se->use[RP_SPEC_MTP])
        ok = !rp_backend_host_alloc(be, B * D * sizeof(float), (void **)&se->hidden) &&
             !rp_backend_host_alloc(be, B * D * sizeof(float), (void **)&se->m_in) &&
             !rp_backend_host_alloc(be, B * D * sizeof(float), (void **)&se->m_out) &&
             !rp_backend_host_alloc(be, R * V * sizeof(float), (void **)&se->m_logits);
    if (ok && se->dm)
        ok = !rp_backend_host_alloc(rp_model_backend(se->dm), R * (size_t)se->d_vocab * sizeof(float),
                                    (void **)&se->d_logits);
    if (!ok)
        return RP_ERR(RP_ERR_NOMEM, "engine: out of memory for speculative decoding's buffers");
    return RP_OK;
}

void spec_engine_deinit(rp_engine *e)
{
    spec_engine *se = &e->spec;
    rp_free(se->work);
    rp_free(se->want_hidden);
    rp_free(se->m_tok);
    rp_free(se->m_pos);
    rp_free(se->m_seq);
    rp_free(se->m_want);
    rp_free(se->m_seqs);
    rp_free(se->m_gens);
    rp_backend *be = rp_model_backend(e->m);
    rp_backend_host_free(be, se->hidden);
    rp_backend_host_free(be, se->m_in);
    rp_backend_host_free(be, se->m_out);
    rp_backend_host_free(be, se->m_logits);
    if (se->dm)
        rp_backend_host_free(rp_model_backend(se->dm), se->d_logits);
    rp_json_match_destroy(se->jm);
    rp_kv_pool_destroy(se->dkv);
    rp_model_destroy(se->dm_owned);
    rp_tok_destroy(se->dtok_owned);
    memset(se, 0, sizeof(*se));
}
