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
 *   [mixture of experts: x += Σ over the token's router-chosen experts e of
 *    w_e · (silu(h·Wgate_eᵀ) * h·Wup_eᵀ)·Wdown_eᵀ]
 *
 * then the final norm and the output head for the tokens that want logits
 * (gathered first, so a prefill chunk computes one row, not hundreds). The MTP
 * block (rp_model_forward_mtp, at the end) reuses the layer and the head.
 *
 * Each forward starts with one batch descriptor (rp_batch_desc: token ids,
 * positions, KV slots, the sequences' block tables flattened, the output rows)
 * handed to the backend, which a device backend uploads once; the results come
 * back in one copy per output (logits, hidden rows, argmax ids), then one
 * synchronize. On a backend whose memory is host memory the head writes the
 * caller's buffers directly.
 */
#include "model_int.h"

#include <math.h>
#include <stdio.h>

/* ---- the op profile (RP_PROFILE=N: the forwards of N tokens, model_int.h) ---- */

static const char *const prof_names[RP_PROF_N] = {"embed",       "rmsnorm",     "qkv matmul",    "rope",
                                                  "attention",   "wo matmul",   "gate/up matmul", "down matmul",
                                                  "moe router",  "moe experts", "gdn proj",      "gdn",
                                                  "norm+lm_head"};

// The clock after the backend has finished what it was given.
static double prof_now(rp_model *m)
{
    rp_backend_synchronize(m->be);
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

// A mixture-of-experts MLP on the normed rows s.h: the router's logits, each token's
// experts and weights, their MLPs' weighted sum, added to the residual stream.
static rp_status moe_forward(rp_model *m, const rp_layer *L, int n, bool prof)
{
    const rp_model_config *c = &m->cfg;
    rp_backend *be = m->be;
    rp_scratch *s = &m->s;
    rp_moe_desc d = {.n_expert = c->n_expert,
                     .n_used = c->n_expert_used,
                     .gate = L->ex_gate,
                     .up = L->ex_up,
                     .down = L->ex_down,
                     .ids = s->moe_ids,
                     .w = s->moe_w,
                     .x_rows = s->moe_x,
                     .o_rows = s->moe_o,
                     .g_rows = s->gate,
                     .u_rows = s->up,
                     .cap_rows = m->params.max_batch};
    rp_status st;
    OP(RP_PROF_ROUTER, L->router.nbytes, rp_backend_matmul(be, &L->router, s->h, n, s->moe_logits));
    OP(RP_PROF_ROUTER, 0,
       rp_backend_moe_route(be, s->moe_logits, n, c->n_expert, c->n_expert_used, c->moe_norm_topk, s->moe_ids,
                            s->moe_w));
    size_t expert = L->ex_gate[0].nbytes + L->ex_up[0].nbytes + L->ex_down[0].nbytes; // (the tokens' share when n > 1)
    OP(RP_PROF_EXPERTS, expert * (size_t)(n * c->n_expert_used < c->n_expert ? n * c->n_expert_used : c->n_expert),
       rp_backend_moe_ffn(be, &d, s->h, n, s->moe_out));
    if (c->shared_ffn_dim > 0) { // moe_out += sigmoid(h·w_gateᵀ) · shared expert(h)
        OP(RP_PROF_GATE_UP, L->w_gate.nbytes + L->w_up.nbytes,
           rp_backend_matmul_glu(be, &L->w_gate, &L->w_up, s->h, n, s->up, s->gate));
        OP(RP_PROF_DOWN, L->w_down.nbytes, rp_backend_matmul(be, &L->w_down, s->gate, n, s->moe_x));
        OP(RP_PROF_ROUTER, L->sh_gate_w.nbytes, rp_backend_matmul(be, &L->sh_gate_w, s->h, n, s->sh_g));
        OP(RP_PROF_EXPERTS, 0, rp_backend_sigmoid_mul(be, s->moe_x, s->sh_g, n, c->dim, 1, s->moe_x));
        OP(RP_PROF_EXPERTS, 0, rp_backend_add(be, s->moe_out, s->moe_x, (size_t)n * c->dim));
    }
    OP(RP_PROF_EXPERTS, 0, rp_backend_add(be, s->x, s->moe_out, (size_t)n * c->dim));
    return RP_OK;
}

// A Gated DeltaNet layer's mixer on the normed rows s.h, added to the residual stream:
// the four input projections, the recurrence (rp_backend_gdn, over state layer sl), the
// gated RMSNorm per value head (w · x̂ · silu(z)), the output projection.
static rp_status gdn_forward(rp_model *m, const rp_layer *L, rp_state_layer *sl, int n, bool prof)
{
    const rp_model_config *c = &m->cfg;
    rp_backend *be = m->be;
    rp_scratch *s = &m->s;
    int nv = c->gdn_v_heads, dv = c->gdn_dv;
    rp_status st;
    rp_matmul_desc in[4] = {{&L->w_qkv, s->mixed, NULL, NULL},
                            {&L->w_z, s->z, NULL, NULL},
                            {&L->w_b, s->gb, NULL, NULL},
                            {&L->w_a, s->ga, NULL, NULL}};
    OP(RP_PROF_GDN_PROJ, L->w_qkv.nbytes + L->w_z.nbytes + L->w_b.nbytes + L->w_a.nbytes,
       rp_backend_matmul_group(be, in, 4, s->h, n));
    rp_gdn_desc d = {.conv_w = L->conv_w,
                     .a_log = L->a_log,
                     .dt_bias = L->dt_bias,
                     .mixed = s->mixed,
                     .b = s->gb,
                     .a = s->ga,
                     .out = s->gdn_o,
                     .st = sl};
    OP(RP_PROF_GDN, 0, rp_backend_gdn(be, &d));
    OP(RP_PROF_GDN, 0, rp_backend_rmsnorm(be, s->gdn_o, L->gdn_norm, c->norm_eps, n * nv, dv, s->gdn_o));
    OP(RP_PROF_GDN, 0, rp_backend_silu_mul(be, s->z, s->gdn_o, (size_t)n * nv * dv, s->gdn_o));
    rp_matmul_desc out = {&L->w_out, s->h, NULL, s->x}; // x += o·Woutᵀ
    OP(RP_PROF_GDN_PROJ, L->w_out.nbytes, rp_backend_matmul_group(be, &out, 1, s->gdn_o, n));
    return RP_OK;
}

// Attention on the normed rows s.h over KV layer kv, added to the residual stream.
static rp_status attn_forward(rp_model *m, const rp_layer *L, rp_kv_layer *kv, int n, bool prof)
{
    const rp_model_config *c = &m->cfg;
    rp_backend *be = m->be;
    rp_scratch *s = &m->s;
    rp_status st;
    rp_matmul_desc qkv[4] = {{&L->wq, s->q, L->bq, NULL},
                             {&L->wk, s->k, L->bk, NULL},
                             {&L->wv, s->v, L->bv, NULL},
                             {&L->wq_gate, s->qg, NULL, NULL}};
    OP(RP_PROF_QKV, L->wq.nbytes + L->wk.nbytes + L->wv.nbytes + L->wq_gate.nbytes,
       rp_backend_matmul_group(be, qkv, L->wq_gate.data ? 4 : 3, s->h, n));
    if (L->q_norm) {
        OP(RP_PROF_NORM, 0, rp_backend_rmsnorm(be, s->q, L->q_norm, c->norm_eps, n * c->n_head, c->head_dim, s->q));
        OP(RP_PROF_NORM, 0,
           rp_backend_rmsnorm(be, s->k, L->k_norm, c->norm_eps, n * c->n_kv_head, c->head_dim, s->k));
    }
    OP(RP_PROF_ROPE, 0, rp_backend_rope(be, s->q, c->n_head, c->head_dim, c->rot_dim, s->inv_freq, c->rope_style));
    OP(RP_PROF_ROPE, 0, rp_backend_rope(be, s->k, c->n_kv_head, c->head_dim, c->rot_dim, s->inv_freq, c->rope_style));
    float scale = (float)(1.0 / sqrt((double)c->head_dim));
    OP(RP_PROF_ATTN, 0,
       rp_backend_attention(be, s->q, s->k, s->v, kv, c->n_head, c->n_kv_head, c->head_dim, scale, s->att));
    if (L->wq_gate.data) { // gated attention: each head's output times sigmoid(its gate)
        int qd = c->n_head * c->head_dim;
        OP(RP_PROF_ATTN, 0, rp_backend_sigmoid_mul(be, s->att, s->qg, n, qd, qd, s->att));
    }
    rp_matmul_desc wo = {&L->wo, s->h, NULL, s->x}; // x += att·Woᵀ
    OP(RP_PROF_WO, L->wo.nbytes, rp_backend_matmul_group(be, &wo, 1, s->att, n));
    return RP_OK;
}

// Layer l: its mixer (attention over KV layer L->kv_index, or Gated DeltaNet over state layer
// L->kv_index), then its MLP (dense, or a mixture of experts).
static rp_status layer_forward(rp_model *m, int l, rp_kv_pool *pool, int n)
{
    const rp_model_config *c = &m->cfg;
    const rp_layer *L = &m->layers[l];
    rp_backend *be = m->be;
    rp_scratch *s = &m->s;
    bool prof = m->prof && n == m->prof->n_tokens && l < c->n_layer; // the MTP layer is not profiled
    rp_status st;
    OP(RP_PROF_NORM, 0, rp_backend_rmsnorm(be, s->x, L->attn_norm, c->norm_eps, n, c->dim, s->h));
    if ((st = L->w_qkv.data ? gdn_forward(m, L, rp_kv_pool_state_layer(pool, L->kv_index), n, prof)
                            : attn_forward(m, L, rp_kv_pool_layer(pool, L->kv_index), n, prof)))
        return st;
    OP(RP_PROF_NORM, 0, rp_backend_rmsnorm(be, s->x, L->ffn_norm, c->norm_eps, n, c->dim, s->h));
    if (L->ex_gate)
        return moe_forward(m, L, n, prof);
    OP(RP_PROF_GATE_UP, L->w_gate.nbytes + L->w_up.nbytes,
       rp_backend_matmul_glu(be, &L->w_gate, &L->w_up, s->h, n, s->up, s->gate));
    rp_matmul_desc down = {&L->w_down, s->h, NULL, s->x}; // x += (silu(gate) * up)·Wdownᵀ
    OP(RP_PROF_DOWN, L->w_down.nbytes, rp_backend_matmul_group(be, &down, 1, s->gate, n));
    return RP_OK;
}

// Grows an int32 array of the batch store to hold n (by doubling); false when out of memory.
static bool grow_i32(int32_t **a, int *cap, int n)
{
    if (n <= *cap)
        return true;
    int c = *cap ? *cap : 64;
    while (c < n)
        c *= 2;
    int32_t *p = rp_realloc(*a, (size_t)c * sizeof(int32_t));
    if (!p)
        return false;
    *a = p;
    *cap = c;
    return true;
}

// How a forward treats the sequences' recurrent state (begin).
typedef enum state_use {
    STATE_NONE,   // no Gated DeltaNet layer runs (a dense model; the MTP layer)
    STATE_FORWARD, // the layers advance each sequence's state from state_pos
    STATE_REPLAY,  // a rollback: the state in the other copy, at log_pos, is advanced over the log
} state_use;

// The recurrent-state fields of the descriptor d: each sequence's run of tokens (consecutive
// in the batch, at consecutive positions starting where its state is) and the copy it starts from.
static rp_status state_fields(rp_model *m, const rp_batch *b, state_use use, rp_batch_desc *d)
{
    rp_batch_store *bs = &m->bs;
    int ns = b->n_seqs;
    if (!grow_i32(&bs->state_in, &bs->cap_state, ns) || !grow_i32(&bs->seq_first, &bs->cap_first, ns) ||
        !grow_i32(&bs->seq_count, &bs->cap_count, ns))
        return RP_ERR(RP_ERR_NOMEM, "out of memory for the batch's state fields");
    for (int s = 0; s < ns; s++)
        bs->seq_first[s] = -1, bs->seq_count[s] = 0;
    for (int t = 0; t < b->n_tokens; t++) {
        int s = b->seq[t];
        if (bs->seq_first[s] < 0)
            bs->seq_first[s] = t;
        else if (t != bs->seq_first[s] + bs->seq_count[s] || b->pos[t] != b->pos[bs->seq_first[s]] + bs->seq_count[s])
            return RP_ERR(RP_ERR_INVALID, "token %d of sequence %d is not next to its others at the next position "
                                          "(a model with recurrent state needs each sequence's tokens in order)",
                          t, s);
        bs->seq_count[s]++;
    }
    for (int s = 0; s < ns; s++) {
        const rp_kv_seq *sq = b->seqs[s];
        bs->state_in[s] = -1;
        if (bs->seq_count[s] == 0)
            continue;
        if (sq->state_slot <= 0)
            return RP_ERR(RP_ERR_INVALID, "sequence %d holds no recurrent state slot (reserve its KV first)", s);
        int32_t at = use == STATE_REPLAY ? sq->log_pos : sq->state_pos;
        if (b->pos[bs->seq_first[s]] != at)
            return RP_ERR(RP_ERR_INVALID, "sequence %d's tokens start at position %d, its recurrent state is at %d", s,
                          b->pos[bs->seq_first[s]], at);
        bs->state_in[s] = 2 * (sq->state_slot - 1) + (use == STATE_REPLAY ? sq->state_cur ^ 1 : sq->state_cur);
    }
    d->state_in = bs->state_in;
    d->seq_first = bs->seq_first;
    d->seq_count = bs->seq_count;
    return RP_OK;
}

// Checks the batch, fills its descriptor (KV slots, the flattened block tables, the
// rows wanting output: logits, or with `hidden_rows` a hidden row only, rp_batch.
// want_hidden; the recurrent state's fields) and hands it to the backend. *n_out: the
// output rows, *n_logit: of those the ones wanting logits.
static rp_status begin(rp_model *m, rp_kv_pool *kv, const rp_batch *b, int n_layers, bool hidden_rows,
                       state_use use, int *n_out, int *n_logit)
{
    const rp_model_config *c = &m->cfg;
    rp_batch_store *bs = &m->bs;
    int n = b->n_tokens;
    *n_out = *n_logit = 0;
    if (n > m->params.max_batch)
        return RP_ERR(RP_ERR_RANGE, "batch of %d tokens exceeds the maximum of %d", n, m->params.max_batch);
    if (rp_kv_pool_n_layers(kv) < n_layers)
        return RP_ERR(RP_ERR_INVALID, "the KV pool has %d layers, the model needs %d (make it with rp_model_kv_create)",
                      rp_kv_pool_n_layers(kv), n_layers);
    if (b->n_seqs < 0 || !grow_i32(&bs->bt_start, &bs->cap_seqs, b->n_seqs + 1))
        return RP_ERR(b->n_seqs < 0 ? RP_ERR_INVALID : RP_ERR_NOMEM, "batch of %d sequences", b->n_seqs);
    bs->bt_start[0] = 0;
    for (int s = 0; s < b->n_seqs; s++) {
        int nb = b->seqs[s]->n_blocks;
        if (nb > INT32_MAX - bs->bt_start[s])
            return RP_ERR(RP_ERR_RANGE, "batch block tables too large");
        bs->bt_start[s + 1] = bs->bt_start[s] + nb;
    }
    if (!grow_i32(&bs->bt, &bs->cap_bt, bs->bt_start[b->n_seqs] + 1))
        return RP_ERR(RP_ERR_NOMEM, "out of memory for the batch's block tables");
    for (int s = 0; s < b->n_seqs; s++)
        memcpy(bs->bt + bs->bt_start[s], b->seqs[s]->blocks, (size_t)b->seqs[s]->n_blocks * sizeof(int32_t));
    for (int t = 0; t < n; t++) {
        if (b->seq[t] < 0 || b->seq[t] >= b->n_seqs)
            return RP_ERR(RP_ERR_INVALID, "token %d names sequence %d of %d", t, b->seq[t], b->n_seqs);
        const rp_kv_seq *sq = b->seqs[b->seq[t]];
        if (b->pos[t] < 0 || b->pos[t] >= sq->n_tokens)
            return RP_ERR(RP_ERR_RANGE, "position %d outside the sequence's %d KV slots", b->pos[t], sq->n_tokens);
        if (b->tokens[t] < 0 || b->tokens[t] >= c->n_vocab)
            return RP_ERR(RP_ERR_RANGE, "token id %d outside the vocabulary (%d)", b->tokens[t], c->n_vocab);
        bs->slot[t] = rp_kv_seq_slot(kv, sq, b->pos[t]);
        if (b->want_logits[t] || (hidden_rows && b->want_hidden[t])) {
            if (b->want_logits[t])
                bs->logit_rows[(*n_logit)++] = *n_out;
            bs->rows[(*n_out)++] = t;
        }
    }
    rp_batch_desc d = {.n_tokens = n,
                       .tokens = b->tokens,
                       .pos = b->pos,
                       .slot = bs->slot,
                       .seq = b->seq,
                       .n_seqs = b->n_seqs,
                       .bt_start = bs->bt_start,
                       .bt = bs->bt,
                       .block_size = rp_kv_pool_block_size(kv),
                       .n_rows = *n_out,
                       .rows = bs->rows,
                       .n_logit_rows = *n_logit,
                       .logit_rows = bs->logit_rows};
    rp_status st;
    if (use != STATE_NONE && (st = state_fields(m, b, use, &d)))
        return st;
    return rp_backend_begin_batch(m->be, &d);
}

// Where a forward's results go (host memory, any NULL).
typedef struct head_out {
    float *logits;  // (n_logit, n_vocab)
    int32_t *ids;   // (n_logit) argmax of each logits row, instead of logits
    float *hidden;  // (n_out, dim) the normed hidden rows
} head_out;

// The residual stream's output rows (begin): gathered to the front, normed with `norm`
// (the rows are the hidden rows: copied out when asked), then the rows that want logits
// (n_logit of the n_out) gathered again and projected by the output head, whose rows
// come back as logits or as their argmax. Ends with the forward's one synchronize.
static rp_status head(rp_model *m, const float *norm, int n_out, int n_logit, const head_out *o)
{
    const rp_model_config *c = &m->cfg;
    rp_backend *be = m->be;
    size_t dim = (size_t)c->dim, vocab = (size_t)c->n_vocab;
    rp_status st;
    if (n_out > 0 && ((st = rp_backend_gather_rows(be, RP_ROWS_OUT, m->s.x, c->dim, m->s.x)) ||
                      (st = rp_backend_rmsnorm(be, m->s.x, norm, c->norm_eps, n_out, c->dim, m->s.h))))
        return st;
    if (o->hidden && (st = rp_backend_download(be, o->hidden, m->s.h, (size_t)n_out * dim * sizeof(float))))
        return st;
    bool want_logits = n_logit > 0 && (o->logits || o->ids);
    if (want_logits && n_logit < n_out && (st = rp_backend_gather_rows(be, RP_ROWS_LOGIT, m->s.h, c->dim, m->s.h)))
        return st;
    if (want_logits) {
        // On host memory the head writes the caller's rows; else the backend's, copied once.
        float *rows = m->host_memory && o->logits && !o->ids ? o->logits : m->s.logits;
        if (!rows) { // host memory, argmax: the scratch is made by the first such forward
            size_t bytes;
            if (!rp_mul_size((size_t)m->params.max_batch * vocab, sizeof(float), &bytes) ||
                (st = rp_backend_alloc(be, bytes, (void **)&m->s.logits)) ||
                (st = rp_backend_alloc(be, (size_t)m->params.max_batch * sizeof(int32_t), (void **)&m->s.ids)))
                return rp_error_prefix(st ? st : RP_ERR(RP_ERR_RANGE, "logits scratch too large"), "logits scratch");
            rows = m->s.logits;
        }
        if ((st = rp_backend_matmul(be, &m->output, m->s.h, n_logit, rows)))
            return st;
        if (o->ids) {
            int32_t *ids = m->host_memory ? o->ids : m->s.ids;
            if ((st = rp_backend_argmax(be, rows, n_logit, c->n_vocab, ids)) ||
                (ids != o->ids && (st = rp_backend_download(be, o->ids, ids, (size_t)n_logit * sizeof(int32_t)))))
                return st;
        }
        if (o->logits && rows != o->logits &&
            (st = rp_backend_download(be, o->logits, rows, (size_t)n_logit * vocab * sizeof(float))))
            return st;
    }
    return rp_backend_synchronize(be);
}

rp_status rp_model_forward(rp_model *m, rp_kv_pool *kv, const rp_batch *b, float *logits)
{
    return rp_model_forward_ex(m, kv, b, logits, NULL);
}

// The main model's forward (rp_model_forward_ex, rp_model_forward_argmax).
static rp_status forward(rp_model *m, rp_kv_pool *kv, const rp_batch *b, const head_out *o)
{
    const rp_model_config *c = &m->cfg;
    int n = b->n_tokens, n_out, n_logit;
    if (n <= 0)
        return RP_OK;
    bool hidden_rows = o->hidden && b->want_hidden; // some rows may want a hidden row and no logits
    bool state = rp_config_gdn_layers(c) > 0;
    if (state && rp_kv_pool_n_state_layers(kv) < rp_config_gdn_layers(c))
        return RP_ERR(RP_ERR_INVALID, "the KV pool has no recurrent state for this model (make it with rp_model_kv_create)");
    rp_status st = begin(m, kv, b, rp_config_kv_layers(c) - c->n_mtp, hidden_rows, state ? STATE_FORWARD : STATE_NONE,
                         &n_out, &n_logit);
    if (st)
        return st;
    bool prof = m->prof && n == m->prof->n_tokens;
    double t0 = prof ? prof_now(m) : 0;
    OP(RP_PROF_EMBED, 0, rp_backend_get_rows(m->be, &m->tok_embd, m->s.x));
    for (int l = 0; l < c->n_layer; l++)
        if ((st = layer_forward(m, l, kv, n)))
            return st;
    OP(RP_PROF_HEAD, n_logit > 0 && (o->logits || o->ids) ? m->output.nbytes : 0,
       head(m, m->out_norm, n_out, n_logit, o));
    for (int s = 0; state && s < b->n_seqs; s++) // done: the states moved on (to the other copy)
        rp_kv_seq_state_advance(kv, b->seqs[s], m->bs.seq_count[s]);
    if (prof) {
        m->prof->total += prof_now(m) - t0;
        m->prof->forwards++;
    }
    return RP_OK;
}

rp_status rp_model_forward_ex(rp_model *m, rp_kv_pool *kv, const rp_batch *b, float *logits, float *hidden)
{
    head_out o = {.logits = logits, .hidden = hidden};
    return forward(m, kv, b, &o);
}

rp_status rp_model_forward_argmax(rp_model *m, rp_kv_pool *kv, const rp_batch *b, int32_t *ids, float *hidden)
{
    head_out o = {.ids = ids, .hidden = hidden};
    return forward(m, kv, b, &o);
}

/*
 * The MTP block: x = concat(rmsnorm(embed(tokens))·enorm, rmsnorm(hidden)·hnorm)·fcᵀ,
 * then its decoder layer (layers[n_layer], KV layer n_layer), then mtp.norm and the
 * shared head. The concatenation is built in s.cat (two strided copies, one per half)
 * so fc stays one matmul over 2*dim columns, as the reference computes it.
 */
rp_status rp_model_forward_mtp(rp_model *m, rp_kv_pool *kv, const rp_batch *b, const float *hidden, float *logits,
                               float *hidden_out)
{
    const rp_model_config *c = &m->cfg;
    rp_backend *be = m->be;
    int n = b->n_tokens, n_out, n_logit;
    if (c->n_mtp <= 0)
        return RP_ERR(RP_ERR_UNSUPPORTED, "%s: the model has no MTP layer", m->path);
    if (n <= 0)
        return RP_OK;
    if (!hidden)
        return RP_ERR(RP_ERR_INVALID, "MTP forward without hidden-state rows");
    rp_status st = begin(m, kv, b, rp_config_kv_layers(c), false, STATE_NONE, &n_out, &n_logit);
    if (st)
        return st;
    size_t row = (size_t)c->dim * sizeof(float);
    float *cat = m->s.cat;
    if ((st = rp_backend_upload(be, m->s.x, hidden, (size_t)n * row)) ||
        (st = rp_backend_rmsnorm(be, m->s.x, m->mtp.hnorm, c->norm_eps, n, c->dim, m->s.h)) ||
        (st = rp_backend_copy_2d(be, cat + c->dim, 2 * row, m->s.h, row, row, (size_t)n)) ||
        (st = rp_backend_get_rows(be, &m->tok_embd, m->s.x)) ||
        (st = rp_backend_rmsnorm(be, m->s.x, m->mtp.enorm, c->norm_eps, n, c->dim, m->s.h)) ||
        (st = rp_backend_copy_2d(be, cat, 2 * row, m->s.h, row, row, (size_t)n)) ||
        (st = rp_backend_matmul(be, &m->mtp.fc, cat, n, m->s.x)))
        return st;
    for (int l = c->n_layer; l < c->n_layer + c->n_mtp && !st; l++)
        st = layer_forward(m, l, kv, n);
    if (st)
        return st;
    head_out o = {.logits = logits, .hidden = hidden_out};
    return head(m, m->mtp.norm, n_out, n_logit, &o);
}

/*
 * Rolling recurrent state back (rp_model_seq_truncate): a replay is a forward of the Gated
 * DeltaNet layers' recurrences alone, over the logged inputs of sequence s's last forward,
 * from the state copy at log_pos into the copy at state_pos (which it overwrites).
 */
rp_status rp_model_seq_truncate(rp_model *m, rp_kv_pool *kv, rp_kv_seq *s, int32_t n_tokens)
{
    const rp_model_config *c = &m->cfg;
    if (n_tokens == 0 || s->state_slot <= 0 || n_tokens >= s->state_pos) {
        rp_kv_seq_truncate(kv, s, n_tokens);
        return RP_OK;
    }
    if (s->log_pos < 0 || n_tokens < s->log_pos)
        return RP_ERR(RP_ERR_INVALID,
                      "cannot roll the recurrent state back to position %d: it is at %d and only positions from %d on "
                      "can be restored",
                      n_tokens, s->state_pos, s->log_pos < 0 ? s->state_pos : s->log_pos);
    int r = n_tokens - s->log_pos;
    if (r == 0) { // the other copy is the state wanted
        s->state_cur ^= 1;
        s->state_pos = s->log_pos;
        s->log_pos = -1;
        rp_kv_seq_truncate(kv, s, n_tokens);
        return RP_OK;
    }
    int32_t *arr = rp_malloc((size_t)r * 3 * sizeof(int32_t));
    bool *want = rp_calloc((size_t)r, sizeof(bool));
    if (!arr || !want) {
        rp_free(arr);
        rp_free(want);
        return RP_ERR(RP_ERR_NOMEM, "out of memory");
    }
    int32_t *tok = arr, *pos = arr + r, *seq = arr + 2 * r;
    for (int i = 0; i < r; i++)
        tok[i] = 0, pos[i] = s->log_pos + i, seq[i] = 0;
    rp_kv_seq *seqs[1] = {s};
    rp_batch b = {.n_tokens = r, .tokens = tok, .pos = pos, .seq = seq, .want_logits = want, .seqs = seqs, .n_seqs = 1};
    int n_out, n_logit;
    rp_status st = begin(m, kv, &b, rp_config_kv_layers(c) - c->n_mtp, false, STATE_REPLAY, &n_out, &n_logit);
    for (int l = 0; !st && l < c->n_layer; l++) {
        const rp_layer *L = &m->layers[l];
        if (!L->w_qkv.data)
            continue;
        rp_gdn_desc d = {.conv_w = L->conv_w,
                         .a_log = L->a_log,
                         .dt_bias = L->dt_bias,
                         .st = rp_kv_pool_state_layer(kv, L->kv_index)};
        st = rp_backend_gdn(m->be, &d);
    }
    if (!st)
        st = rp_backend_synchronize(m->be);
    rp_free(arr);
    rp_free(want);
    if (st)
        return st;
    s->state_pos = n_tokens; // in copy state_cur again; the other still at log_pos, the log still good
    rp_kv_seq_truncate(kv, s, n_tokens);
    return RP_OK;
}
