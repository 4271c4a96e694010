/*
 * forward.c - the decoder forward pass over one flattened batch.
 *
 * One pass serves prefill chunks, decode tokens and draft tokens to verify,
 * from any number of sequences: every op works on (n_tokens, width)
 * activations, and only attention looks at which sequence a token belongs to
 * (through its block table and position). Per layer:
 *
 *   h = rmsnorm(x) ; q,k,v = h·Wqᵀ (+b), h·Wkᵀ (+b), h·Wvᵀ (+b)
 *   [Qwen3: per-head rmsnorm of q and k] ; rope(q, k)
 *   x += attention(q, K, V)·Woᵀ
 *   h = rmsnorm(x) ; x += (silu(h·Wgateᵀ) * h·Wupᵀ)·Wdownᵀ
 *
 * then the final norm and the output head for the tokens that want logits
 * (gathered first, so a prefill chunk computes one row, not hundreds). The MTP
 * block (rp_model_forward_mtp, at the end) reuses the layer and the head.
 */
#include "model_int.h"

#include <math.h>
#include <stdio.h>

/* ---- the op profile (RP_PROFILE=N: the forwards of N tokens, model_int.h) ---- */

static const char *const prof_names[RP_PROF_N] = {"embed", "rmsnorm", "qkv matmul", "rope", "attention",
                                                  "wo matmul", "gate/up matmul", "down matmul", "norm+lm_head"};

// The clock after the backend has finished what it was given.
static double prof_now(rp_model *m)
{
    m->be->ops->synchronize(m->be);
    return rp_time_s();
}

static void prof_add(rp_model *m, int kind, size_t wbytes, double t0)
{
    double dt = prof_now(m) - t0;
    m->prof->t[kind] += dt;
    m->prof->bytes[kind] += (double)wbytes;
    m->prof->calls[kind]++;
}

void rp_model_prof_print(const rp_model *m)
{
    const rp_prof *p = m->prof;
    if (!p || p->forwards == 0)
        return;
    double f = (double)p->forwards, sum = 0;
    fprintf(stderr, "profile: %lld forwards of %d token%s, %.3f ms each\n", (long long)p->forwards, p->n_tokens,
            p->n_tokens == 1 ? "" : "s", 1e3 * p->total / f);
    for (int k = 0; k < RP_PROF_N; k++) {
        if (!p->calls[k])
            continue;
        sum += p->t[k];
        fprintf(stderr, "  %-15s %8.3f ms/fwd %5.1f%%  %6.1f us/call", prof_names[k], 1e3 * p->t[k] / f,
                100 * p->t[k] / p->total, 1e6 * p->t[k] / (double)p->calls[k]);
        if (p->bytes[k] > 0)
            fprintf(stderr, "  %7.2f MB/fwd  %6.2f GB/s", p->bytes[k] / f / 1e6, p->bytes[k] / p->t[k] / 1e9);
        fputc('\n', stderr);
    }
    fprintf(stderr, "  %-15s %8.3f ms/fwd %5.1f%%\n", "(between ops)", 1e3 * (p->total - sum) / f,
            100 * (p->total - sum) / p->total);
}

// Runs one op (returning its error); in a profiled forward, adds its time to `kind`.
#define OP(kind, wbytes, call)                                                                                         \
    do {                                                                                                               \
        double t0_ = prof ? prof_now(m) : 0;                                                                           \
        if ((st = (call)))                                                                                             \
            return st;                                                                                                 \
        if (prof)                                                                                                      \
            prof_add(m, kind, wbytes, t0_);                                                                            \
    } while (0)

static rp_status layer_forward(rp_model *m, int l, rp_kv_layer *kv, const rp_attn_info *ai, int n,
                               const int32_t *pos)
{
    const rp_model_config *c = &m->cfg;
    const rp_layer *L = &m->layers[l];
    const rp_backend_ops *o = m->be->ops;
    rp_backend *be = m->be;
    rp_scratch *s = &m->s;
    bool prof = m->prof && n == m->prof->n_tokens && l < c->n_layer; // the MTP layer is not profiled
    rp_status st;
    OP(RP_PROF_NORM, 0, o->rmsnorm(be, s->x, L->attn_norm, c->norm_eps, n, c->dim, s->h));
    rp_matmul_desc qkv[3] = {{&L->wq, s->q, L->bq, NULL}, {&L->wk, s->k, L->bk, NULL}, {&L->wv, s->v, L->bv, NULL}};
    OP(RP_PROF_QKV, L->wq.nbytes + L->wk.nbytes + L->wv.nbytes, o->matmul_group(be, qkv, 3, s->h, n));
    if (L->q_norm) {
        OP(RP_PROF_NORM, 0, o->rmsnorm(be, s->q, L->q_norm, c->norm_eps, n * c->n_head, c->head_dim, s->q));
        OP(RP_PROF_NORM, 0, o->rmsnorm(be, s->k, L->k_norm, c->norm_eps, n * c->n_kv_head, c->head_dim, s->k));
    }
    OP(RP_PROF_ROPE, 0, o->rope(be, s->q, pos, n, c->n_head, c->head_dim, m->inv_freq, c->rope_style));
    OP(RP_PROF_ROPE, 0, o->rope(be, s->k, pos, n, c->n_kv_head, c->head_dim, m->inv_freq, c->rope_style));
    float scale = (float)(1.0 / sqrt((double)c->head_dim));
    OP(RP_PROF_ATTN, 0,
       o->attention(be, s->q, s->k, s->v, kv, ai, c->n_head, c->n_kv_head, c->head_dim, scale, s->att));
    rp_matmul_desc wo = {&L->wo, s->h, NULL, s->x}; // x += att·Woᵀ
    OP(RP_PROF_WO, L->wo.nbytes, o->matmul_group(be, &wo, 1, s->att, n));
    OP(RP_PROF_NORM, 0, o->rmsnorm(be, s->x, L->ffn_norm, c->norm_eps, n, c->dim, s->h));
    OP(RP_PROF_GATE_UP, L->w_gate.nbytes + L->w_up.nbytes,
       o->matmul_glu(be, &L->w_gate, &L->w_up, s->h, n, s->up, s->gate));
    rp_matmul_desc down = {&L->w_down, s->h, NULL, s->x}; // x += (silu(gate) * up)·Wdownᵀ
    OP(RP_PROF_DOWN, L->w_down.nbytes, o->matmul_group(be, &down, 1, s->gate, n));
    return RP_OK;
}

// Checks the batch and fills the per-token scratch: KV slot, block table, and the
// rows wanting output (m->tmp_rows[0..*n_out)): logits, or with `hidden_rows` a
// hidden row only (rp_batch.want_hidden).
static rp_status prepare(rp_model *m, rp_kv_pool *kv, const rp_batch *b, int n_layers, bool hidden_rows, int *n_out)
{
    const rp_model_config *c = &m->cfg;
    int n = b->n_tokens;
    *n_out = 0;
    if (n > m->params.max_batch)
        return RP_ERR(RP_ERR_RANGE, "batch of %d tokens exceeds the maximum of %d", n, m->params.max_batch);
    if (rp_kv_pool_n_layers(kv) < n_layers)
        return RP_ERR(RP_ERR_INVALID, "the KV pool has %d layers, the model needs %d (make it with rp_model_kv_create)",
                      rp_kv_pool_n_layers(kv), n_layers);
    for (int t = 0; t < n; t++) {
        if (b->seq[t] < 0 || b->seq[t] >= b->n_seqs)
            return RP_ERR(RP_ERR_INVALID, "token %d names sequence %d of %d", t, b->seq[t], b->n_seqs);
        const rp_kv_seq *sq = b->seqs[b->seq[t]];
        if (b->pos[t] < 0 || b->pos[t] >= sq->n_tokens)
            return RP_ERR(RP_ERR_RANGE, "position %d outside the sequence's %d KV slots", b->pos[t], sq->n_tokens);
        if (b->tokens[t] < 0 || b->tokens[t] >= c->n_vocab)
            return RP_ERR(RP_ERR_RANGE, "token id %d outside the vocabulary (%d)", b->tokens[t], c->n_vocab);
        m->tmp_slot[t] = rp_kv_seq_slot(kv, sq, b->pos[t]);
        m->tmp_bt[t] = sq->blocks;
        if (b->want_logits[t] || (hidden_rows && b->want_hidden[t]))
            m->tmp_rows[(*n_out)++] = t;
    }
    return RP_OK;
}

// The residual stream's output rows (prepare): gathered to the front, normed
// with `norm` into s.h (copied to hidden when asked), then the rows that want
// logits (all of them unless `want` says otherwise: rp_batch.want_hidden) are
// gathered again and projected by the output head in chunks (into logits when
// not NULL).
static rp_status head(rp_model *m, const float *norm, int n_out, const bool *want, float *logits, float *hidden)
{
    const rp_model_config *c = &m->cfg;
    const rp_backend_ops *o = m->be->ops;
    rp_backend *be = m->be;
    rp_status st = RP_OK;
    // In order, so in place.
    for (int i = 0; i < n_out; i++)
        if (m->tmp_rows[i] != i)
            st = o->copy(be, m->s.x + (size_t)i * c->dim, m->s.x + (size_t)m->tmp_rows[i] * c->dim,
                         (size_t)c->dim * sizeof(float));
    if (st)
        return st;
    if (n_out > 0 && (st = o->rmsnorm(be, m->s.x, norm, c->norm_eps, n_out, c->dim, m->s.h)))
        return st;
    if (hidden && n_out > 0 && (st = o->download(be, hidden, m->s.h, (size_t)n_out * c->dim * sizeof(float))))
        return st;
    if (want) { // hidden-only rows leave: the rest move forward, in order, so in place
        int k = 0;
        for (int i = 0; i < n_out && !st; i++) {
            if (!want[m->tmp_rows[i]])
                continue;
            if (k != i)
                st = o->copy(be, m->s.h + (size_t)k * c->dim, m->s.h + (size_t)i * c->dim,
                             (size_t)c->dim * sizeof(float));
            k++;
        }
        if (st)
            return st;
        n_out = k;
    }
    for (int r = 0; logits && r < n_out; r += RP_LOGIT_ROWS) {
        int rows = n_out - r < RP_LOGIT_ROWS ? n_out - r : RP_LOGIT_ROWS;
        if ((st = o->matmul(be, &m->output, m->s.h + (size_t)r * c->dim, rows, m->s.logits)) ||
            (st = o->download(be, logits + (size_t)r * c->n_vocab, m->s.logits,
                              (size_t)rows * c->n_vocab * sizeof(float))))
            return st;
    }
    return o->synchronize(be);
}

rp_status rp_model_forward(rp_model *m, rp_kv_pool *kv, const rp_batch *b, float *logits)
{
    return rp_model_forward_ex(m, kv, b, logits, NULL);
}

rp_status rp_model_forward_ex(rp_model *m, rp_kv_pool *kv, const rp_batch *b, float *logits, float *hidden)
{
    const rp_model_config *c = &m->cfg;
    int n = b->n_tokens, n_out;
    if (n <= 0)
        return RP_OK;
    bool hidden_rows = hidden && b->want_hidden; // some rows may want a hidden row and no logits
    rp_status st = prepare(m, kv, b, c->n_layer, hidden_rows, &n_out);
    if (st)
        return st;
    rp_attn_info ai = {n, rp_kv_pool_block_size(kv), b->pos, m->tmp_slot, m->tmp_bt};
    bool prof = m->prof && n == m->prof->n_tokens;
    double t0 = prof ? prof_now(m) : 0;
    OP(RP_PROF_EMBED, 0, m->be->ops->get_rows(m->be, &m->tok_embd, b->tokens, n, m->s.x));
    for (int l = 0; l < c->n_layer; l++)
        if ((st = layer_forward(m, l, rp_kv_pool_layer(kv, l), &ai, n, b->pos)))
            return st;
    OP(RP_PROF_HEAD, n_out > 0 && logits ? m->output.nbytes : 0,
       head(m, m->out_norm, n_out, hidden_rows ? b->want_logits : NULL, logits, hidden));
    if (prof) {
        m->prof->total += prof_now(m) - t0;
        m->prof->forwards++;
    }
    return RP_OK;
}

/*
 * The MTP block: x = concat(rmsnorm(embed(tokens))·enorm, rmsnorm(hidden)·hnorm)·fcᵀ,
 * then its decoder layer (layers[n_layer], KV layer n_layer), then mtp.norm and the
 * shared head. The concatenation is built row by row in s.cat so fc stays one
 * matmul over 2*dim columns, as the reference computes it.
 */
rp_status rp_model_forward_mtp(rp_model *m, rp_kv_pool *kv, const rp_batch *b, const float *hidden, float *logits,
                               float *hidden_out)
{
    const rp_model_config *c = &m->cfg;
    const rp_backend_ops *o = m->be->ops;
    rp_backend *be = m->be;
    int n = b->n_tokens, n_out;
    if (c->n_mtp <= 0)
        return RP_ERR(RP_ERR_UNSUPPORTED, "%s: the model has no MTP layer", m->path);
    if (n <= 0)
        return RP_OK;
    if (!hidden)
        return RP_ERR(RP_ERR_INVALID, "MTP forward without hidden-state rows");
    rp_status st = prepare(m, kv, b, c->n_layer + c->n_mtp, false, &n_out);
    if (st)
        return st;
    size_t row = (size_t)c->dim * sizeof(float);
    float *cat = m->s.cat;
    if ((st = o->upload(be, m->s.x, hidden, (size_t)n * row)) ||
        (st = o->rmsnorm(be, m->s.x, m->mtp.hnorm, c->norm_eps, n, c->dim, m->s.h)))
        return st;
    for (int t = 0; t < n && !st; t++)
        st = o->copy(be, cat + (size_t)t * 2 * c->dim + c->dim, m->s.h + (size_t)t * c->dim, row);
    if (st || (st = o->get_rows(be, &m->tok_embd, b->tokens, n, m->s.x)) ||
        (st = o->rmsnorm(be, m->s.x, m->mtp.enorm, c->norm_eps, n, c->dim, m->s.h)))
        return st;
    for (int t = 0; t < n && !st; t++)
        st = o->copy(be, cat + (size_t)t * 2 * c->dim, m->s.h + (size_t)t * c->dim, row);
    if (st || (st = o->matmul(be, &m->mtp.fc, cat, n, m->s.x)))
        return st;
    rp_attn_info ai = {n, rp_kv_pool_block_size(kv), b->pos, m->tmp_slot, m->tmp_bt};
    for (int l = c->n_layer; l < c->n_layer + c->n_mtp && !st; l++)
        st = layer_forward(m, l, rp_kv_pool_layer(kv, l), &ai, n, b->pos);
    if (st)
        return st;
    return head(m, m->mtp.norm, n_out, NULL, logits, hidden_out);
}
