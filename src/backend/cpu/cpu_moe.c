/*
 * cpu_moe.c - the CPU backend's mixture-of-experts ops: routing (softmax over the
 * router's logits, top-k, renormalization) and the experts' MLPs.
 *
 * Routing is per token and scalar (a few dozen to a few hundred experts). The MLPs go
 * expert by expert: the tokens routed to expert e are gathered, multiplied by its gate,
 * up and down matrices with the backend's own matmuls (so each expert's weights are read
 * once a forward, for all its tokens, and a token's numbers are those of a matmul of its
 * row alone), and their rows, scaled by the tokens' weights, added to the output in
 * increasing expert order. One token (a decode step) runs its experts' gate and up
 * matrices as one matmul group (one pool run for 8 experts instead of 8, the activations
 * quantized once): a group's results are bitwise its separate matmuls', so the token's
 * row is the same as in a batch.
 */
#include "cpu_int.h"

#include <math.h>

#define RP_MOE_MAX_EXPERTS 1024 // rp_config_validate's limit

rp_status rp_cpu_moe_route(rp_backend *be, const float *logits, int n, int n_expert, int n_used, bool norm,
                           int32_t *ids, float *w)
{
    (void)be;
    if (n_expert > RP_MOE_MAX_EXPERTS)
        return RP_ERR(RP_ERR_UNSUPPORTED, "routing %d experts (at most %d)", n_expert, RP_MOE_MAX_EXPERTS);
    float p[RP_MOE_MAX_EXPERTS];
    bool taken[RP_MOE_MAX_EXPERTS];
    for (int t = 0; t < n; t++) {
        const float *l = logits + (size_t)t * n_expert;
        float max = l[0], sum = 0;
        for (int e = 1; e < n_expert; e++)
            max = l[e] > max ? l[e] : max;
        for (int e = 0; e < n_expert; e++)
            sum += p[e] = expf(l[e] - max);
        for (int e = 0; e < n_expert; e++)
            p[e] /= sum;
        int32_t *id = ids + (size_t)t * n_used;
        float *wt = w + (size_t)t * n_used, picked = 0;
        memset(taken, 0, (size_t)n_expert);
        for (int j = 0; j < n_used; j++) { // the j-th largest: strictly larger wins, so a tie keeps the lower expert
            int best = -1;
            for (int e = 0; e < n_expert; e++)
                if (!taken[e] && (best < 0 || p[e] > p[best] || (p[best] != p[best] && p[e] == p[e])))
                    best = e;
            taken[best] = true;
            id[j] = best;
            wt[j] = p[best];
            picked += p[best];
        }
        if (norm)
            for (int j = 0; j < n_used; j++)
                wt[j] /= picked;
    }
    return RP_OK;
}

// One token's experts (ids, w: n_used each), their rows in the scratch: gate and up of up
// to RP_MM_MAX_GROUP / 2 experts a matmul group, then silu · up, the downs, and the rows
// added in increasing expert order (as the general path: 0 + o · w, expert after expert).
static rp_status one_token(rp_backend *be, const rp_moe_desc *d, const float *x, float *out)
{
    int k = d->n_used, e[64];
    float w[64];
    for (int j = 0; j < k; j++) { // in increasing expert order (insertion)
        int i = j;
        for (; i > 0 && e[i - 1] > d->ids[j]; i--)
            e[i] = e[i - 1], w[i] = w[i - 1];
        e[i] = d->ids[j], w[i] = d->w[j];
    }
    int64_t dim = d->down[0].ne[1], ffn = d->gate[0].ne[1];
    rp_status st = RP_OK;
    for (int j0 = 0; j0 < k && !st; j0 += RP_MM_MAX_GROUP / 2) {
        int g = k - j0 < RP_MM_MAX_GROUP / 2 ? k - j0 : RP_MM_MAX_GROUP / 2;
        rp_matmul_desc mm[RP_MM_MAX_GROUP];
        for (int i = 0; i < g; i++) {
            mm[2 * i] = (rp_matmul_desc){.w = &d->gate[e[j0 + i]], .y = d->g_rows + (size_t)(j0 + i) * ffn};
            mm[2 * i + 1] = (rp_matmul_desc){.w = &d->up[e[j0 + i]], .y = d->u_rows + (size_t)(j0 + i) * ffn};
        }
        st = rp_backend_matmul_group(be, mm, 2 * g, x, 1);
    }
    if (!st)
        st = rp_backend_silu_mul(be, d->g_rows, d->u_rows, (size_t)k * ffn, d->g_rows);
    for (int j = 0; j < k && !st; j++)
        st = rp_backend_matmul(be, &d->down[e[j]], d->g_rows + (size_t)j * ffn, 1, d->o_rows + (size_t)j * dim);
    if (st)
        return st;
    memset(out, 0, (size_t)dim * sizeof(float));
    for (int j = 0; j < k; j++)
        for (int64_t i = 0; i < dim; i++)
            out[i] += d->o_rows[(size_t)j * dim + i] * w[j];
    return RP_OK;
}

rp_status rp_cpu_moe_ffn(rp_backend *be, const rp_moe_desc *d, const float *x, int n, float *out)
{
    if (n == 1 && d->cap_rows >= d->n_used && d->n_used <= 64)
        return one_token(be, d, x, out);
    int64_t dim = d->down[0].ne[1];
    int *rows = rp_malloc((size_t)n * sizeof(int));
    float *wts = rp_malloc((size_t)n * sizeof(float));
    rp_status st = rows && wts ? RP_OK : RP_ERR(RP_ERR_NOMEM, "out of memory for the experts' rows");
    memset(out, 0, (size_t)n * (size_t)dim * sizeof(float));
    for (int e = 0; e < d->n_expert && !st; e++) {
        int m = 0; // the tokens routed to e, in batch order
        for (int t = 0; t < n; t++)
            for (int j = 0; j < d->n_used; j++)
                if (d->ids[(size_t)t * d->n_used + j] == e) {
                    rows[m] = t;
                    wts[m++] = d->w[(size_t)t * d->n_used + j];
                }
        if (m == 0)
            continue;
        for (int i = 0; i < m; i++)
            memcpy(d->x_rows + (size_t)i * dim, x + (size_t)rows[i] * dim, (size_t)dim * sizeof(float));
        if ((st = rp_backend_matmul_glu(be, &d->gate[e], &d->up[e], d->x_rows, m, d->u_rows, d->g_rows)) ||
            (st = rp_backend_matmul(be, &d->down[e], d->g_rows, m, d->o_rows)))
            break;
        for (int i = 0; i < m; i++) {
            float *o = out + (size_t)rows[i] * dim;
            const float *r = d->o_rows + (size_t)i * dim;
            for (int64_t k = 0; k < dim; k++)
                o[k] += r[k] * wts[i];
        }
    }
    rp_free(rows);
    rp_free(wts);
    return st;
}
