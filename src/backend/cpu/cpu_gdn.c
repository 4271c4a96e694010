/*
 * cpu_gdn.c - the CPU backend's Gated DeltaNet recurrence (backend.h's rp_backend_gdn).
 *
 * The work is split by (sequence, value head): each item owns its head's state matrix
 * S (dk x dv floats, small enough to stay in L1/L2 across the sequence's tokens) and
 * walks the sequence's tokens in order, so the numbers never depend on the batch, the
 * thread count or how a prompt was cut into forwards. A token's q and k channels are
 * shared by the n_v_head / n_k_head value heads of a key head: each item computes them
 * (four multiply-adds a channel) and only the group's first head writes them back to
 * the conv window and the log.
 *
 * Every token takes the recurrent form (not transformers' chunked form for prompts:
 * the same sums in another order would make a token's numbers depend on whether it was
 * prefilled or decoded, against the determinism rule of backend.h); the recurrence is
 * a few percent of a layer's arithmetic, the projections being the rest.
 */
#include "cpu_int.h"

#include <math.h>

#define GDN_MAX_HEAD 512 // dk, dv
#define GDN_MAX_KC 8

typedef struct gdn_job {
    const rp_gdn_desc *d;
    const cpu_batch *b;
} gdn_job;

static float silu(float x)
{
    return x / (1.0f + expf(-x));
}

// 1 / sqrt(Σx² + 1e-6) over n floats (the l2norm of q and k).
static float inv_l2(const float *x, int n)
{
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    return (float)(1.0 / sqrt(ss + 1e-6));
}

// One token's update of one head's state S (dk, dv): decay, the delta rule, the output.
static void delta_step(float *S, int dk, int dv, const float *q, const float *k, const float *v, float beta,
                       float decay, float *o)
{
    float p[GDN_MAX_HEAD], delta[GDN_MAX_HEAD];
    for (int c = 0; c < dv; c++)
        p[c] = 0, o[c] = 0;
    for (int i = 0; i < dk; i++) {
        float *row = S + (size_t)i * dv;
        for (int c = 0; c < dv; c++) {
            row[c] *= decay;
            p[c] += row[c] * k[i];
        }
    }
    for (int c = 0; c < dv; c++)
        delta[c] = (v[c] - p[c]) * beta;
    for (int i = 0; i < dk; i++) {
        float *row = S + (size_t)i * dv;
        for (int c = 0; c < dv; c++) {
            row[c] += k[i] * delta[c];
            o[c] += row[c] * q[i];
        }
    }
}

// Item (s, j): value head j of sequence s over its tokens.
static void gdn_item(const rp_gdn_desc *d, const cpu_batch *b, int s, int j)
{
    const rp_state_layer *st = d->st;
    int nk = st->n_k_head, nv = st->n_v_head, dk = st->dk, dv = st->dv, kc = st->kc;
    int key_dim = nk * dk, conv_dim = 2 * key_dim + nv * dv, kh = j / (nv / nk);
    bool lead = j % (nv / nk) == 0; // writes the key head's q and k channels
    int32_t r = b->state_in[s], slot = r / 2, first = b->seq_first[s], count = b->seq_count[s];
    size_t sf = rp_state_floats(st), lf = rp_state_log_floats(st);
    const float *src = st->state + (size_t)r * sf;
    float *dst = st->state + (size_t)(r ^ 1) * sf;
    float *S = dst + (size_t)j * dk * dv;
    bool fresh = b->pos[first] == 0; // a sequence's start: zero state and window, whatever the copy holds
    if (fresh)
        memset(S, 0, (size_t)dk * dv * sizeof(float));
    else
        memcpy(S, src + (size_t)j * dk * dv, (size_t)dk * dv * sizeof(float));
    // This item's channels: parts q, k, v at c0[p], cn[p] wide. Their window rows, compact:
    // kc - 1 rows of wpitch floats, part p's columns from p * GDN_MAX_HEAD.
    size_t woff = (size_t)nv * dk * dv;
    const int c0[3] = {kh * dk, key_dim + kh * dk, 2 * key_dim + j * dv}, cn[3] = {dk, dk, dv};
    int wpitch = 3 * GDN_MAX_HEAD;
    float win[(GDN_MAX_KC - 1) * 3 * GDN_MAX_HEAD];
    for (int t = 0; t < kc - 1; t++)
        for (int p = 0; p < 3; p++) {
            float *w = win + (size_t)t * wpitch + p * GDN_MAX_HEAD;
            if (fresh)
                memset(w, 0, (size_t)cn[p] * sizeof(float));
            else
                memcpy(w, src + woff + (size_t)t * conv_dim + c0[p], (size_t)cn[p] * sizeof(float));
        }
    float *log = st->log + (size_t)slot * st->log_cap * lf;
    bool logging = d->mixed && count <= st->log_cap;
    float qkv[3][GDN_MAX_HEAD], wbuf[GDN_MAX_KC * GDN_MAX_HEAD];
    float qscale = (float)(1.0 / sqrt((double)dk)), a_exp = -expf(d->a_log[j]);
    for (int i = 0; i < count; i++) {
        int t = first + i;
        const float *m = d->mixed ? d->mixed + (size_t)t * conv_dim : log + (size_t)i * lf;
        float bv = d->mixed ? d->b[(size_t)t * nv + j] : m[conv_dim + j];
        float av = d->mixed ? d->a[(size_t)t * nv + j] : m[conv_dim + nv + j];
        if (logging) {
            float *row = log + (size_t)i * lf;
            for (int p = lead ? 0 : 2; p < 3; p++)
                memcpy(row + c0[p], m + c0[p], (size_t)cn[p] * sizeof(float));
            row[conv_dim + j] = bv;
            row[conv_dim + nv + j] = av;
        }
        for (int p = 0; p < 3; p++) { // the causal conv of this part's channels, silu; shift the window
            const float *wc = d->conv_w + (size_t)c0[p] * kc;
            for (int c = 0; c < cn[p]; c++) {
                float u = 0;
                for (int q = 0; q < kc - 1; q++)
                    u += wc[(size_t)c * kc + q] * win[(size_t)q * wpitch + p * GDN_MAX_HEAD + c];
                u += wc[(size_t)c * kc + kc - 1] * m[c0[p] + c];
                qkv[p][c] = silu(u);
            }
            for (int q = 0; q + 1 < kc - 1; q++)
                memcpy(win + (size_t)q * wpitch + p * GDN_MAX_HEAD, win + (size_t)(q + 1) * wpitch + p * GDN_MAX_HEAD,
                       (size_t)cn[p] * sizeof(float));
            if (kc > 1)
                memcpy(win + (size_t)(kc - 2) * wpitch + p * GDN_MAX_HEAD, m + c0[p], (size_t)cn[p] * sizeof(float));
        }
        float iq = inv_l2(qkv[0], dk) * qscale, ik = inv_l2(qkv[1], dk);
        for (int c = 0; c < dk; c++) {
            qkv[0][c] *= iq;
            qkv[1][c] *= ik;
        }
        float beta = 1.0f / (1.0f + expf(-bv));
        float x = av + d->dt_bias[j];
        float sp = x > 20.0f ? x : log1pf(expf(x));
        float decay = expf(a_exp * sp);
        float *o = d->out ? d->out + (size_t)t * nv * dv + (size_t)j * dv : wbuf;
        delta_step(S, dk, dv, qkv[0], qkv[1], qkv[2], beta, decay, o);
    }
    for (int t = 0; t < kc - 1; t++)
        for (int p = lead ? 0 : 2; p < 3; p++)
            memcpy(dst + woff + (size_t)t * conv_dim + c0[p], win + (size_t)t * wpitch + p * GDN_MAX_HEAD,
                   (size_t)cn[p] * sizeof(float));
}

static void gdn_task(void *p, int ith, int nth)
{
    const gdn_job *jb = p;
    const cpu_batch *b = jb->b;
    int nv = jb->d->st->n_v_head;
    int64_t lo, hi;
    rp_split_range((int64_t)b->n_seqs * nv, ith, nth, &lo, &hi);
    for (int64_t it = lo; it < hi; it++) {
        int s = (int)(it / nv), j = (int)(it % nv);
        if (b->state_in[s] >= 0 && b->seq_count[s] > 0)
            gdn_item(jb->d, b, s, j);
    }
}

rp_status rp_cpu_gdn(rp_backend *be, const rp_gdn_desc *d)
{
    cpu_backend *c = (cpu_backend *)be;
    const cpu_batch *b = &c->batch;
    const rp_state_layer *st = d->st;
    if (!b->state_in || !b->seq_first || !b->seq_count)
        return RP_ERR(RP_ERR_INVALID, "Gated DeltaNet op in a batch without recurrent state");
    if (st->dk > GDN_MAX_HEAD || st->dv > GDN_MAX_HEAD || st->kc < 1 || st->kc > GDN_MAX_KC || st->n_k_head <= 0 ||
        st->n_v_head % st->n_k_head != 0)
        return RP_ERR(RP_ERR_UNSUPPORTED,
                      "Gated DeltaNet with heads of %d/%d, conv kernel %d, %d/%d heads (heads up to %d, kernel up to %d, "
                      "value heads a multiple of key heads)",
                      st->dk, st->dv, st->kc, st->n_k_head, st->n_v_head, GDN_MAX_HEAD, GDN_MAX_KC);
    for (int s = 0; s < b->n_seqs; s++)
        if (b->state_in[s] >= 2 * st->n_slots)
            return RP_ERR(RP_ERR_RANGE, "state copy %d outside the layer's %d slots", b->state_in[s], st->n_slots);
    gdn_job jb = {.d = d, .b = b};
    int64_t items = (int64_t)b->n_seqs * st->n_v_head;
    if (items == 1 || rp_pool_size(c->pool) == 1)
        gdn_task(&jb, 0, 1);
    else
        rp_pool_run(c->pool, gdn_task, &jb);
    return RP_OK;
}
