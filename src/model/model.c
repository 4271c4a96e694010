/*
 * model.c - model lifetime: load (dispatching on the path), whether it fits the device,
 * scratch, destroy.
 */
#include "model_int.h"

#include "../gguf/gguf.h"
#include "../safetensors/safetensors.h"

#include <stdio.h>
#include <stdlib.h>

void rp_model_params_default(rp_model_params *p)
{
    memset(p, 0, sizeof(*p));
    p->quant = RP_DTYPE_F32;
    p->max_batch = 512;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

// One buffer of the activation scratch: where its pointer goes, its elements (4 bytes
// each: floats, or the argmax's int32 ids) and whether this model has it.
typedef struct scratch_buf {
    void *p; // float ** or int32_t **
    size_t n;
    bool on;
} scratch_buf;

enum { N_SCRATCH = 25 };

// The scratch's buffers for this model (the one table allocating, sizing and freeing them read).
static void scratch_table(rp_model *m, scratch_buf out[N_SCRATCH])
{
    const rp_model_config *c = &m->cfg;
    size_t B = (size_t)m->params.max_batch;
    size_t qd = (size_t)c->n_head * c->head_dim, kvd = (size_t)c->n_kv_head * c->head_dim;
    size_t ffn = (size_t)(c->moe_ffn_dim > c->ffn_dim ? c->moe_ffn_dim : c->ffn_dim);
    bool moe = c->n_expert > 0, gdn = rp_config_gdn_layers(c) > 0;
    size_t vd = (size_t)c->gdn_v_heads * c->gdn_dv, conv = 2 * (size_t)c->gdn_k_heads * c->gdn_dk + vd;
    const scratch_buf bufs[] = {
        {&m->s.x, B * c->dim, true},
        {&m->s.h, B * c->dim, true},
        {&m->s.q, B * qd, true},
        {&m->s.k, B * kvd, true},
        {&m->s.v, B * kvd, true},
        {&m->s.att, B * qd, true},
        {&m->s.gate, B * ffn, true},
        {&m->s.up, B * ffn, true},
        {&m->s.logits, B * c->n_vocab, !m->host_memory}, // host memory: the caller's rows
        {&m->s.ids, B, !m->host_memory},
        {&m->s.cat, B * 2 * c->dim, c->n_mtp > 0},
        {&m->s.inv_freq, (size_t)c->head_dim / 2, true},
        {&m->s.moe_logits, B * (size_t)c->n_expert, moe},
        {&m->s.moe_ids, B * (size_t)c->n_expert_used, moe},
        {&m->s.moe_w, B * (size_t)c->n_expert_used, moe},
        {&m->s.moe_x, B * c->dim, moe},
        {&m->s.moe_o, B * c->dim, moe},
        {&m->s.moe_out, B * c->dim, moe},
        {&m->s.sh_g, B, c->shared_ffn_dim > 0},
        {&m->s.qg, B * qd, c->attn_gate},
        {&m->s.mixed, B * conv, gdn},
        {&m->s.z, B * vd, gdn},
        {&m->s.gb, B * (size_t)c->gdn_v_heads, gdn},
        {&m->s.ga, B * (size_t)c->gdn_v_heads, gdn},
        {&m->s.gdn_o, B * vd, gdn},
    };
    _Static_assert(sizeof(bufs) / sizeof(bufs[0]) == N_SCRATCH, "N_SCRATCH is the table's length");
    memcpy(out, bufs, sizeof(bufs));
}

// The bytes of one buffer (0 when the model has none), or an error when they overflow.
static rp_status buf_bytes(const scratch_buf *b, size_t *bytes)
{
    *bytes = 0;
    if (b->on && !rp_mul_size(b->n, sizeof(float), bytes))
        return RP_ERR(RP_ERR_RANGE, "activation scratch too large");
    return RP_OK;
}

// The bytes of the scratch buffers this model has.
static rp_status scratch_bytes(rp_model *m, uint64_t *out)
{
    scratch_buf bufs[N_SCRATCH];
    scratch_table(m, bufs);
    uint64_t total = 0;
    for (int i = 0; i < N_SCRATCH; i++) {
        size_t bytes;
        rp_status st = buf_bytes(&bufs[i], &bytes);
        if (st)
            return st;
        total += bytes;
    }
    *out = total;
    return RP_OK;
}

static rp_status alloc_scratch(rp_model *m)
{
    const rp_model_config *c = &m->cfg;
    rp_backend *be = m->be;
    size_t B = (size_t)m->params.max_batch;
    scratch_buf bufs[N_SCRATCH];
    scratch_table(m, bufs);
    for (int i = 0; i < N_SCRATCH; i++) {
        size_t bytes;
        rp_status st = buf_bytes(&bufs[i], &bytes);
        if (st)
            return st;
        if (bufs[i].on && (st = rp_backend_alloc(be, bytes, (void **)bufs[i].p)))
            return rp_error_prefix(st, "activation scratch");
    }
    rp_status st = rp_backend_upload(be, m->s.inv_freq, m->inv_freq, (size_t)c->head_dim / 2 * sizeof(float));
    if (st)
        return st;
    m->bs.slot = rp_malloc(B * sizeof(int32_t));
    m->bs.rows = rp_malloc(B * sizeof(int32_t));
    m->bs.logit_rows = rp_malloc(B * sizeof(int32_t));
    if (!m->bs.slot || !m->bs.rows || !m->bs.logit_rows)
        return RP_ERR(RP_ERR_NOMEM, "out of memory");
    return RP_OK;
}

// Device memory a backend takes beyond the weights and the scratch while a model loads and
// runs: its batch descriptor, split-K and attention partials and CUDA graphs, and the raw
// copy a BF16 matrix is tiled through at upload (one layer's matrix, late in the load).
#define BACKEND_MARGIN ((uint64_t)256 << 20)

rp_status rp_model_check_fit(rp_model *m, uint64_t weight_bytes, rp_dtype wtype)
{
    rp_backend_info bi;
    rp_backend_get_info(m->be, &bi);
    if (bi.host_memory) // the weights are the file's mapping or the arena: nothing to check here
        return RP_OK;
    uint64_t scratch = 0;
    rp_status st = scratch_bytes(m, &scratch);
    if (st)
        return st;
    uint64_t need = weight_bytes + scratch + BACKEND_MARGIN;
    if (need <= bi.mem_free)
        return RP_OK;
    const double GiB = 1073741824.0;
    return RP_ERR(RP_ERR_NOMEM,
                  "not enough memory on %s, %s: the weights need %.2f GiB (%s), the activation scratch %.2f GiB and "
                  "the backend's working buffers %.2f GiB, but %.2f GiB of %.2f GiB is free; try --quant q8 or q4, "
                  "or a smaller model",
                  bi.name, bi.device, weight_bytes / GiB, rp_dtype_name(wtype), scratch / GiB, BACKEND_MARGIN / GiB,
                  bi.mem_free / GiB, bi.mem_total / GiB);
}

rp_status rp_model_load(const char *path, rp_backend *be, const rp_model_params *params, rp_model **out)
{
    *out = NULL;
    rp_model *m = rp_calloc(1, sizeof(*m));
    if (!m || !(m->path = rp_strdup(path))) {
        rp_free(m);
        return RP_ERR(RP_ERR_NOMEM, "out of memory");
    }
    rp_model_params_default(&m->params);
    if (params)
        m->params = *params;
    if (m->params.max_batch <= 0)
        m->params.max_batch = 512;
    rp_status st;
    if (m->params.quant != RP_DTYPE_F32 && m->params.quant != RP_DTYPE_Q8_0 && m->params.quant != RP_DTYPE_Q4_0 &&
        m->params.quant != RP_DTYPE_Q4_K) {
        st = RP_ERR(RP_ERR_INVALID, "quantization on load supports q8, q4 and q4k");
        goto fail;
    }
    m->be = be;
    rp_backend_info bi;
    rp_backend_get_info(be, &bi);
    m->host_memory = bi.host_memory;
    m->huge_pages = rp_huge_pages_enabled();
    double t0 = rp_time_s();
    if (rp_dir_exists(path))
        st = rp_model_load_hf(m, path);
    else if (ends_with(path, ".gguf") || rp_file_exists(path))
        st = rp_model_load_gguf(m, path);
    else
        st = RP_ERR(RP_ERR_IO, "%s: no such model folder or file", path);
    if (st || (st = alloc_scratch(m)))
        goto fail;
    const char *prof = getenv("RP_PROFILE"); // N: profile the forwards of N tokens (forward.c)
    int prof_n = prof ? atoi(prof) : 0;
    if (prof_n > 0) {
        if (!(m->prof = rp_calloc(1, sizeof(*m->prof)))) {
            st = RP_ERR(RP_ERR_NOMEM, "out of memory");
            goto fail;
        }
        m->prof->n_tokens = prof_n;
    }
    const rp_model_config *c = &m->cfg;
    rp_dtype wtype = rp_model_weight_type(m);
    char experts[64] = "", plan[48] = "";
    if (c->n_expert > 0)
        snprintf(experts, sizeof(experts), ", %d experts (%d a token)", c->n_expert, c->n_expert_used);
    if (rp_config_gdn_layers(c) > 0)
        snprintf(plan, sizeof(plan), " (%d Gated DeltaNet)", rp_config_gdn_layers(c));
    snprintf(m->desc, sizeof(m->desc), "%s, %d layers%s%s, dim %d, %d/%d heads%s, vocab %d, %s weights%s, %.1f MB",
             c->arch_name, c->n_layer, plan, c->n_mtp ? " + MTP" : "", c->dim, c->n_head, c->n_kv_head, experts, c->n_vocab,
             rp_dtype_name(wtype), rp_backend_numerics_note(be, wtype), m->weight_bytes / 1e6);
    if (!m->params.quiet)
        RP_LOGI("loaded %s (%s) on %s in %.2f s", path, m->desc, bi.name, rp_time_s() - t0);
    *out = m;
    return RP_OK;
fail:
    rp_model_destroy(m);
    return st;
}

// The model's tensors, for releasing them (the MTP layer included).
static void release_tensors(rp_model *m)
{
    rp_backend *be = m->be;
    if (m->output.data && m->output.data != m->tok_embd.data) // tied: the same tensor, released once
        rp_backend_tensor_deinit(be, &m->output);
    rp_tensor *one[] = {&m->tok_embd, &m->mtp.fc};
    for (size_t i = 0; i < sizeof(one) / sizeof(one[0]); i++)
        if (one[i]->data)
            rp_backend_tensor_deinit(be, one[i]);
    for (int l = 0; m->layers && l < m->cfg.n_layer + m->cfg.n_mtp; l++) {
        rp_layer *L = &m->layers[l];
        rp_tensor *ts[] = {&L->wq,    &L->wk,  &L->wv,  &L->wo,  &L->w_gate, &L->w_up, &L->w_down, &L->router,
                           &L->sh_gate_w, &L->wq_gate, &L->w_qkv, &L->w_z, &L->w_b, &L->w_a, &L->w_out};
        for (size_t i = 0; i < sizeof(ts) / sizeof(ts[0]); i++)
            if (ts[i]->data)
                rp_backend_tensor_deinit(be, ts[i]);
        rp_tensor *ex[] = {L->ex_gate, L->ex_up, L->ex_down};
        for (size_t i = 0; i < sizeof(ex) / sizeof(ex[0]); i++)
            for (int e = 0; ex[i] && e < m->cfg.n_expert; e++)
                if (ex[i][e].data)
                    rp_backend_tensor_deinit(be, &ex[i][e]);
    }
}

// The layers' expert arrays (load.c allocates them).
static void free_experts(rp_model *m)
{
    for (int l = 0; m->layers && l < m->cfg.n_layer + m->cfg.n_mtp; l++) {
        rp_free(m->layers[l].ex_gate);
        rp_free(m->layers[l].ex_up);
        rp_free(m->layers[l].ex_down);
    }
}

void rp_model_destroy(rp_model *m)
{
    if (!m)
        return;
    if (m->prof) {
        rp_model_prof_print(m);
        rp_free(m->prof);
    }
    rp_backend *be = m->be;
    if (be) {
        scratch_buf bufs[N_SCRATCH];
        scratch_table(m, bufs);
        for (int i = 0; i < N_SCRATCH; i++)
            rp_backend_free(be, *(void **)bufs[i].p);
        for (int i = 0; i < m->n_dev_owned; i++)
            rp_backend_free(be, m->dev_owned[i]);
        release_tensors(m);
    }
    rp_model_arena_free(m);
    rp_free(m->dev_owned);
    free_experts(m);
    rp_free(m->layers);
    rp_free(m->inv_freq);
    rp_free(m->bs.slot);
    rp_free(m->bs.rows);
    rp_free(m->bs.logit_rows);
    rp_free(m->bs.bt_start);
    rp_free(m->bs.bt);
    rp_free(m->bs.state_in);
    rp_free(m->bs.seq_first);
    rp_free(m->bs.seq_count);
    if (m->gguf)
        rp_gguf_close(m->gguf);
    if (m->st)
        rp_st_close(m->st);
    if (m->owns_be)
        rp_backend_destroy(m->be);
    rp_free(m->path);
    rp_free(m);
}

void rp_model_own_backend(rp_model *m)
{
    m->owns_be = true;
}

const rp_model_config *rp_model_get_config(const rp_model *m)
{
    return &m->cfg;
}

rp_backend *rp_model_backend(rp_model *m)
{
    return m->be;
}

size_t rp_model_weight_bytes(const rp_model *m)
{
    // The embedding table is only read one row per token; the output head whole.
    size_t b = m->weight_bytes - m->mtp_weight_bytes;
    if (!m->cfg.tied_embeddings)
        b -= m->tok_embd.nbytes;
    // A token reads its n_expert_used experts of each MoE layer: on average that share of theirs.
    if (m->cfg.n_expert > 0)
        b -= m->expert_bytes - (size_t)((double)m->expert_bytes * m->cfg.n_expert_used / m->cfg.n_expert);
    return b;
}

size_t rp_model_state_bytes(const rp_model *m)
{
    if (!rp_model_has_state(m))
        return 0;
    rp_kv_state_geom g = rp_model_state_geom(m, 1, 0); // no log: a decode step logs one row, not counted
    return rp_kv_state_slot_bytes(&g); // both copies: one read, one written
}

const char *rp_model_describe(const rp_model *m)
{
    return m->desc;
}

rp_dtype rp_model_weight_type(const rp_model *m)
{
    return m->layers[0].wq.data ? m->layers[0].wq.type : m->layers[0].w_qkv.type;
}

size_t rp_model_size_bytes(const rp_model *m)
{
    return m->weight_bytes;
}

void rp_model_backend_info(const rp_model *m, rp_backend_info *out)
{
    rp_backend_get_info(m->be, out);
}

const char *rp_model_path(const rp_model *m)
{
    return m->path;
}

int rp_model_max_batch(const rp_model *m)
{
    return m->params.max_batch;
}

int rp_model_kv_layers(const rp_model *m)
{
    return rp_config_kv_layers(&m->cfg);
}

bool rp_model_has_state(const rp_model *m)
{
    return rp_config_gdn_layers(&m->cfg) > 0;
}

rp_kv_state_geom rp_model_state_geom(const rp_model *m, int n_slots, int log_cap)
{
    const rp_model_config *c = &m->cfg;
    return (rp_kv_state_geom){.n_layer = rp_config_gdn_layers(c),
                              .n_k_head = c->gdn_k_heads,
                              .n_v_head = c->gdn_v_heads,
                              .dk = c->gdn_dk,
                              .dv = c->gdn_dv,
                              .kc = c->gdn_kc,
                              .n_slots = n_slots,
                              .log_cap = log_cap};
}

rp_status rp_model_kv_create_ex(rp_model *m, int block_size, int n_blocks, rp_dtype type, int n_states, int log_cap,
                                rp_kv_pool **out)
{
    rp_status st = rp_kv_pool_create(m->be, rp_model_kv_layers(m), m->cfg.n_kv_head, m->cfg.head_dim, block_size,
                                     n_blocks, type, out);
    if (st || !rp_model_has_state(m))
        return st;
    rp_kv_state_geom g = rp_model_state_geom(m, n_states > 0 ? n_states : RP_MODEL_DEFAULT_STATES,
                                             log_cap >= 0 ? log_cap : RP_MODEL_DEFAULT_LOG_CAP);
    if ((st = rp_kv_pool_add_states(*out, &g))) {
        rp_kv_pool_destroy(*out);
        *out = NULL;
    }
    return st;
}

rp_status rp_model_kv_create(rp_model *m, int block_size, int n_blocks, rp_dtype type, rp_kv_pool **out)
{
    return rp_model_kv_create_ex(m, block_size, n_blocks, type, 0, -1, out);
}

bool rp_model_has_mtp(const rp_model *m)
{
    return m->cfg.n_mtp > 0;
}
