/*
 * load.c - loading weights from a Hugging Face folder or a GGUF file.
 *
 * Both formats are read through one view of a tensor (name, type, shape with
 * ne[0] contiguous, data in the file's mapping). The loader asks for each
 * tensor the architecture needs by name, checks its shape against the config,
 * and hands it to the backend. The matrices a decode step streams whole (all but
 * an untied embedding table, which is read a row at a time) live in the model's
 * weight arena: anonymous memory on 2 MiB pages, filled in load order, where
 * --quant quantizes into and where float weights are copied from the mapping
 * (rp_model_params.mmap_weights keeps them mapped instead, and copy_limit caps
 * the bytes copied, the rest staying mapped): a pass over the
 * weights through 4 KiB pages of the file's mapping measured 20-25% slower (one
 * TLB miss per 4 KiB; bench/RESULTS.md). That is on a backend whose memory is
 * host memory; a device backend copies every tensor at rp_backend_tensor_init (from
 * the mapping, or from a temporary quantized copy). The small norm/bias vectors
 * are converted to f32. Tensors nobody asked for are listed and skipped.
 *
 * The tensors are taken twice by the same code (load_tensors): a sizing pass first,
 * which looks each one up and checks its shape but makes nothing, counting the bytes
 * it will take as stored (after --quant: stored_type); then, once rp_model_check_fit
 * has found that they fit a device backend's free memory, the load. A bad file or a
 * model too big for the GPU fails before anything is allocated or uploaded.
 *
 * The MTP block (when the config announces one) uses llama.cpp's GGUF names:
 * its decoder layer is block n_layer (`blk.N.attn_q.weight`, ...) and its own
 * tensors are `blk.N.nextn.eh_proj` (HF `mtp.fc`), `nextn.enorm`
 * (`mtp.pre_fc_norm_embedding`), `nextn.hnorm` (`mtp.pre_fc_norm_hidden`) and
 * `nextn.shared_head_norm` (`mtp.norm`); HF's layer is `mtp.layers.0.*`.
 *
 * A mixture-of-experts layer (Qwen3-MoE) has a router, `ffn_gate_inp` (HF `mlp.gate`),
 * and its experts' matrices: in GGUF one 3-D tensor per kind (`ffn_gate_exps`,
 * `ffn_up_exps`, `ffn_down_exps`: [cols, rows, n_expert]) whose expert e is the e-th
 * slice; in HF one tensor per expert (`mlp.experts.E.gate_proj`, ...). Either way each
 * expert becomes a weight of its own. The router keeps the file's type (--quant does
 * not round the routing); the experts quantize as any matrix.
 */
#include "model_int.h"

#include "../gguf/gguf.h"
#include "../quant/quant.h"
#include "../safetensors/safetensors.h"

#include <stdio.h>

typedef struct src_tensor {
    const char *name;
    rp_dtype type;
    int n_dims;
    int64_t ne[4]; // ne[0] contiguous
    const void *data;
} src_tensor;

// Where tensors come from during one load, and what the sizing pass counts.
typedef struct source source;
struct source {
    rp_model *m;
    const char *path; // for messages
    const char *(*name_of)(const source *src, const char *canonical, int layer, char *buf, size_t cap);
    const char *hf_prefix; // HF: the text model's prefix, "model." or (vision-language) "model.language_model."
    const void **used; // identities of the tensors taken
    int n_used, cap_used;
    bool dry;                            // the sizing pass: tensors looked up and checked, none made
    uint64_t bytes;                      // dry: backend memory the weights and vectors will take
    uint64_t type_bytes[RP_DTYPE_COUNT]; // dry: of which the matrices', by the type they are stored as
};

/* ---- ownership helpers ---- */

static rp_status push_ptr(void ***arr, int *n, int *cap, void *p)
{
    if (*n == *cap) {
        int nc = *cap ? *cap * 2 : 32;
        void **na = rp_realloc(*arr, (size_t)nc * sizeof(void *));
        if (!na)
            return RP_ERR(RP_ERR_NOMEM, "out of memory");
        *arr = na;
        *cap = nc;
    }
    (*arr)[(*n)++] = p;
    return RP_OK;
}

static rp_status shape_error(const source *src, const char *name, const int64_t *ne, int n_dims, int64_t e0,
                             int64_t e1)
{
    return RP_ERR(RP_ERR_INVALID, "%s: tensor '%s' has shape [%lld, %lld]%s, expected [%lld, %lld] (cols, rows)",
                  src->path, name, (long long)ne[0], (long long)(n_dims > 1 ? ne[1] : 1), n_dims > 2 ? "..." : "",
                  (long long)e0, (long long)e1);
}

/* ---- the weight arena ---- */

#define ARENA_CHUNK ((size_t)64 << 20)

// `bytes` of 64-byte aligned room in the weight arena (chunks of rp_malloc_huge memory,
// bump allocated), owned by the model; NULL when out of memory.
static void *arena_alloc(rp_model *m, size_t bytes)
{
    bytes = (bytes + 63) & ~(size_t)63;
    rp_arena_chunk *c = m->n_arena ? &m->arena[m->n_arena - 1] : NULL;
    if (c && c->size - c->used >= bytes) {
        void *p = c->base + c->used;
        c->used += bytes;
        return p;
    }
    if (m->n_arena == m->cap_arena) {
        int nc = m->cap_arena ? 2 * m->cap_arena : 8;
        rp_arena_chunk *na = rp_realloc(m->arena, (size_t)nc * sizeof(*na));
        if (!na)
            return NULL;
        m->arena = na;
        m->cap_arena = nc;
    }
    size_t size = bytes > ARENA_CHUNK ? bytes : ARENA_CHUNK;
    uint8_t *base = rp_malloc_huge(size);
    if (!base)
        return NULL;
    m->arena[m->n_arena++] = (rp_arena_chunk){base, size, bytes};
    return base;
}

void rp_model_arena_free(rp_model *m)
{
    for (int i = 0; i < m->n_arena; i++)
        rp_free_huge(m->arena[i].base, m->arena[i].size);
    rp_free(m->arena);
    m->arena = NULL;
    m->n_arena = m->cap_arena = 0;
}

// A copy of `total` bytes of weights in the arena (counted against copy_limit);
// NULL when out of memory.
static const void *copy_to_arena(rp_model *m, const void *data, size_t total)
{
    uint8_t *buf = arena_alloc(m, total);
    if (!buf)
        return NULL;
    memcpy(buf, data, total);
    m->copied_bytes += total;
    return buf;
}

// Quantizing a matrix at load (--quant): rows dequantized and quantized again, split over
// the backend's host threads (a 7B model's matrices take minutes on one).
typedef struct quant_job {
    const uint8_t *from;
    uint8_t *to;
    rp_dtype from_type, to_type;
    int64_t ne0, ne1;
    size_t from_row, to_row;
    _Atomic bool failed;
} quant_job;

static void quant_task(void *p, int ith, int nth)
{
    quant_job *j = p;
    int64_t lo, hi;
    rp_split_range(j->ne1, ith, nth, &lo, &hi);
    float *row = rp_malloc((size_t)j->ne0 * sizeof(float));
    if (!row) {
        j->failed = true;
        return;
    }
    for (int64_t r = lo; r < hi; r++) {
        rp_dequantize(j->from_type, j->from + (size_t)r * j->from_row, row, j->ne0);
        rp_quantize(j->to_type, row, j->to + (size_t)r * j->to_row, j->ne0); // (the shape was checked)
    }
    rp_free(row);
}

// The type a weight of the file's `type` is stored as: params.quant (--quant) for a float
// matrix that is quantizable and whose rows are a whole number of the quant's blocks, else
// `type`. The one decision rp_model_make_weight and the sizing pass share.
static rp_dtype stored_type(const rp_model *m, rp_dtype type, int64_t ne0, bool quantizable)
{
    rp_dtype q = m->params.quant;
    bool is_float = type == RP_DTYPE_F32 || type == RP_DTYPE_F16 || type == RP_DTYPE_BF16;
    return quantizable && is_float && q != RP_DTYPE_F32 && ne0 % rp_dtype_block(q) == 0 ? q : type;
}

rp_status rp_model_make_weight(rp_model *m, const char *name, rp_dtype type, int64_t ne0, int64_t ne1,
                               const void *data, bool quantizable, bool streamed, rp_tensor *out)
{
    rp_backend *be = m->be;
    rp_dtype q = stored_type(m, type, ne0, quantizable);
    uint8_t *tmp = NULL; // a device backend copies the tensor at init: quantized rows are freed after it
    if (q != type) {
        size_t row_bytes, total;
        if (!rp_dtype_row_bytes(q, ne0, &row_bytes) || !rp_mul_size(row_bytes, (size_t)ne1, &total))
            return RP_ERR(RP_ERR_INVALID, "tensor '%s' too large to quantize", name);
        uint8_t *buf = m->host_memory ? arena_alloc(m, total) : (tmp = rp_malloc(total));
        if (!buf)
            return RP_ERR(RP_ERR_NOMEM, "out of memory quantizing '%s'", name);
        quant_job j = {.from = data, .to = buf, .from_type = type, .to_type = q, .ne0 = ne0, .ne1 = ne1};
        rp_dtype_row_bytes(type, ne0, &j.from_row);
        j.to_row = row_bytes;
        rp_pool_run(rp_backend_host_pool(be), quant_task, &j); // the rows split over the host threads
        if (j.failed) {
            rp_free(tmp);
            return RP_ERR(RP_ERR_NOMEM, "out of memory quantizing '%s'", name);
        }
        data = buf;
        type = q;
    } else if (streamed && m->host_memory && !m->params.mmap_weights && m->huge_pages) {
        size_t row_bytes, total;
        if (!rp_dtype_row_bytes(type, ne0, &row_bytes) || !rp_mul_size(row_bytes, (size_t)ne1, &total))
            return RP_ERR(RP_ERR_INVALID, "tensor '%s' has a bad shape", name);
        if (!m->params.copy_limit || m->copied_bytes + total <= m->params.copy_limit) // else it stays mapped
            data = copy_to_arena(m, data, total);
        if (!data)
            return RP_ERR(RP_ERR_NOMEM, "out of memory copying '%s' to the weight arena", name);
    }
    rp_status st = rp_backend_tensor_init(be, type, ne0, ne1, data, out);
    rp_free(tmp);
    if (st)
        return rp_error_prefix(st, "tensor '%s'", name);
    m->weight_bytes += out->nbytes;
    return RP_OK;
}

rp_status rp_model_make_vector(rp_model *m, const char *name, rp_dtype type, int64_t n, const void *data, float offset,
                               float **out)
{
    rp_backend *be = m->be;
    float *host = rp_malloc((size_t)n * sizeof(float));
    if (!host)
        return RP_ERR(RP_ERR_NOMEM, "out of memory");
    rp_dequantize(type, data, host, n);
    if (offset != 0)
        for (int64_t i = 0; i < n; i++)
            host[i] += offset; // (1 + w) in float32, as the reference computes it
    void *dev = NULL;
    rp_status st = rp_backend_alloc(be, (size_t)n * sizeof(float), &dev);
    if (!st)
        st = rp_backend_upload(be, dev, host, (size_t)n * sizeof(float));
    rp_free(host);
    if (!st)
        st = push_ptr(&m->dev_owned, &m->n_dev_owned, &m->cap_dev_owned, dev);
    if (st) {
        rp_backend_free(be, dev);
        return rp_error_prefix(st, "tensor '%s'", name);
    }
    *out = dev;
    return RP_OK;
}

/* ---- the two formats ---- */

static bool find_tensor(source *src, const char *name, src_tensor *t)
{
    rp_model *m = src->m;
    if (m->gguf) {
        const rp_gguf_tensor *g = rp_gguf_find_tensor(m->gguf, name);
        if (!g)
            return false;
        t->name = g->name;
        t->type = g->type;
        t->n_dims = g->n_dims;
        memcpy(t->ne, g->ne, sizeof(t->ne));
        t->data = g->data;
        return true;
    }
    const rp_st_tensor *s = rp_st_find(m->st, name);
    if (!s)
        return false;
    t->name = s->name;
    t->type = s->supported ? s->type : (rp_dtype)-1;
    t->n_dims = s->n_dims;
    for (int d = 0; d < 4; d++) // safetensors shapes are outermost first
        t->ne[d] = d < s->n_dims ? s->shape[s->n_dims - 1 - d] : 1;
    t->data = s->data;
    return true;
}

static rp_status mark_used(source *src, const void *id)
{
    return push_ptr((void ***)&src->used, &src->n_used, &src->cap_used, (void *)id);
}

// Fetches tensor `canonical` (GGUF naming, layer substituted) checking its shape.
// e1 == 0 asks for a vector of e0 elements. *found false (no error) when optional and absent.
static rp_status get(source *src, const char *canonical, int layer, int64_t e0, int64_t e1, bool required,
                     src_tensor *t, bool *found)
{
    char buf[160];
    const char *name = src->name_of(src, canonical, layer, buf, sizeof(buf));
    *found = false;
    if (!find_tensor(src, name, t)) {
        if (required)
            return RP_ERR(RP_ERR_INVALID, "%s: missing tensor '%s'", src->path, name);
        return RP_OK;
    }
    if ((int)t->type < 0 || !rp_dtype_valid((int)t->type))
        return RP_ERR(RP_ERR_UNSUPPORTED, "%s: tensor '%s' has an unsupported data type", src->path, name);
    int64_t rows = 1;
    for (int d = 1; d < t->n_dims; d++)
        rows *= t->ne[d];
    bool ok = e1 == 0 ? (t->ne[0] == e0 && rows == 1) : (t->ne[0] == e0 && rows == e1 && t->n_dims == 2);
    if (!ok)
        return shape_error(src, name, t->ne, t->n_dims, e0, e1 ? e1 : 1);
    *found = true;
    return mark_used(src, t->data);
}

// The weight of tensor t (found by get, e0 x e1): made, or in the sizing pass counted
// (rows x row bytes of the type it will be stored as). A router is not quantizable.
static rp_status take_weight_as(source *src, const src_tensor *t, int64_t e0, int64_t e1, bool quantizable,
                                bool streamed, rp_tensor *out)
{
    if (!src->dry)
        return rp_model_make_weight(src->m, t->name, t->type, e0, e1, t->data, quantizable, streamed, out);
    rp_dtype type = stored_type(src->m, t->type, e0, quantizable);
    size_t row_bytes, total;
    if (!rp_dtype_row_bytes(type, e0, &row_bytes) || !rp_mul_size(row_bytes, (size_t)e1, &total))
        return RP_ERR(RP_ERR_INVALID, "tensor '%s' has a bad shape [%lld, %lld] for %s", t->name, (long long)e0,
                      (long long)e1, rp_dtype_name(type));
    src->bytes += total;
    src->type_bytes[type] += total;
    return RP_OK;
}

static rp_status take_weight(source *src, const src_tensor *t, int64_t e0, int64_t e1, bool streamed, rp_tensor *out)
{
    return take_weight_as(src, t, e0, e1, true, streamed, out);
}

static rp_status get_weight(source *src, const char *canonical, int layer, int64_t e0, int64_t e1, rp_tensor *out)
{
    src_tensor t;
    bool found;
    rp_status st = get(src, canonical, layer, e0, e1, true, &t, &found); // (its messages name the file)
    if (!st && (st = take_weight(src, &t, e0, e1, true, out)))
        st = rp_error_prefix(st, "%s", src->path);
    return st;
}

// A vector (n elements, or with e1 > 0 any tensor of e0 x e1 elements whose first dim is e0,
// such as a conv's [channels, 1, kernel]) as f32, `offset` added to each element.
static rp_status get_vector_as(source *src, const char *canonical, int layer, int64_t e0, int64_t e1, bool required,
                               float offset, float **out)
{
    src_tensor t;
    bool found;
    *out = NULL;
    rp_status st = RP_OK;
    int64_t n = e1 > 0 ? e0 * e1 : e0;
    if (e1 > 0) {
        char buf[160];
        const char *name = src->name_of(src, canonical, layer, buf, sizeof(buf));
        found = find_tensor(src, name, &t);
        int64_t rest = 1;
        for (int d = 1; found && d < t.n_dims; d++)
            rest *= t.ne[d];
        if (!found && required)
            st = RP_ERR(RP_ERR_INVALID, "%s: missing tensor '%s'", src->path, name);
        else if (found && ((int)t.type < 0 || !rp_dtype_valid((int)t.type)))
            st = RP_ERR(RP_ERR_UNSUPPORTED, "%s: tensor '%s' has an unsupported data type", src->path, name);
        else if (found && (t.ne[0] != e0 || rest != e1))
            st = shape_error(src, name, t.ne, t.n_dims, e0, e1);
        else if (found)
            st = mark_used(src, t.data);
    } else {
        st = get(src, canonical, layer, n, 0, required, &t, &found);
    }
    if (!st && found && rp_dtype_is_quant(t.type))
        st = RP_ERR(RP_ERR_UNSUPPORTED, "%s: vector '%s' is quantized", src->path, t.name);
    if (!st && found && src->dry)
        src->bytes += (uint64_t)n * sizeof(float); // converted to f32 (rp_model_make_vector)
    else if (!st && found)
        st = rp_model_make_vector(src->m, t.name, t.type, n, t.data, offset, out);
    return st;
}

static rp_status get_vector(source *src, const char *canonical, int layer, int64_t n, bool required, float **out)
{
    return get_vector_as(src, canonical, layer, n, 0, required, 0, out);
}

// An RMSNorm's weight: as stored, or with 1 added where the architecture multiplies by (1 + w).
static rp_status get_norm(source *src, const char *canonical, int layer, int64_t n, bool required, float **out)
{
    return get_vector_as(src, canonical, layer, n, 0, required, src->m->cfg.norm_unit_offset ? 1.0f : 0, out);
}

// Rows [offset, offset + group) of every `stride` rows of t (e0 columns, e1 rows) as a weight of
// e1 / stride * group rows: one of the parts a fused projection interleaves (gated attention's
// q_proj holds each head's query then its gate). The rows are copied: into the weight arena
// when the tensor will alias them (host memory, not quantized), else into a temporary buffer
// (quantized, or uploaded by a device backend) freed once the weight is made.
static rp_status take_rows(source *src, const src_tensor *t, int64_t e0, int64_t e1, int64_t stride, int64_t offset,
                           int64_t group, rp_tensor *out)
{
    rp_model *m = src->m;
    int64_t rows = e1 / stride * group;
    size_t row_bytes, total;
    if (!rp_dtype_row_bytes(t->type, e0, &row_bytes) || !rp_mul_size(row_bytes, (size_t)rows, &total))
        return RP_ERR(RP_ERR_INVALID, "%s: tensor '%s' has a bad shape", src->path, t->name);
    src_tensor part = *t;
    part.ne[1] = rows;
    if (src->dry)
        return take_weight(src, &part, e0, rows, true, out);
    bool alias = m->host_memory && stored_type(m, t->type, e0, true) == t->type;
    uint8_t *tmp = NULL, *buf = alias ? arena_alloc(m, total) : (tmp = rp_malloc(total));
    if (!buf)
        return RP_ERR(RP_ERR_NOMEM, "out of memory splitting '%s'", t->name);
    for (int64_t r = 0; r < rows; r++)
        memcpy(buf + (size_t)r * row_bytes,
               (const uint8_t *)t->data + (size_t)((r / group) * stride + offset + r % group) * row_bytes, row_bytes);
    rp_status st = rp_model_make_weight(m, t->name, t->type, e0, rows, buf, true, false, out);
    rp_free(tmp);
    return st ? rp_error_prefix(st, "%s", src->path) : RP_OK;
}

/* Canonical names are GGUF's; HF names are derived from them. Layers from
 * n_layer on are the MTP block's. */
static const char *gguf_name(const source *src, const char *canonical, int layer, char *buf, size_t cap)
{
    (void)src;
    if (layer < 0)
        return canonical;
    snprintf(buf, cap, "blk.%d.%s", layer, canonical);
    return buf;
}

static const char *hf_name(const source *src, const char *canonical, int layer, char *buf, size_t cap)
{
    int n_layer = src->m->cfg.n_layer;
    static const char *mtp_map[][2] = {
        {"nextn.eh_proj.weight", "mtp.fc.weight"},
        {"nextn.enorm.weight", "mtp.pre_fc_norm_embedding.weight"},
        {"nextn.hnorm.weight", "mtp.pre_fc_norm_hidden.weight"},
        {"nextn.shared_head_norm.weight", "mtp.norm.weight"},
    };
    for (size_t i = 0; i < sizeof(mtp_map) / sizeof(mtp_map[0]); i++)
        if (strcmp(canonical, mtp_map[i][0]) == 0)
            return mtp_map[i][1];
    static const char *map[][2] = {
        {"token_embd.weight", "model.embed_tokens.weight"},
        {"output_norm.weight", "model.norm.weight"},
        {"output.weight", "lm_head.weight"},
        {"attn_norm.weight", "input_layernorm.weight"},
        {"ffn_norm.weight", "post_attention_layernorm.weight"},
        {"attn_q.weight", "self_attn.q_proj.weight"},
        {"attn_k.weight", "self_attn.k_proj.weight"},
        {"attn_v.weight", "self_attn.v_proj.weight"},
        {"attn_output.weight", "self_attn.o_proj.weight"},
        {"attn_q.bias", "self_attn.q_proj.bias"},
        {"attn_k.bias", "self_attn.k_proj.bias"},
        {"attn_v.bias", "self_attn.v_proj.bias"},
        {"attn_q_norm.weight", "self_attn.q_norm.weight"},
        {"attn_k_norm.weight", "self_attn.k_norm.weight"},
        {"ffn_gate.weight", "mlp.gate_proj.weight"},
        {"ffn_up.weight", "mlp.up_proj.weight"},
        {"ffn_down.weight", "mlp.down_proj.weight"},
        {"ffn_gate_inp.weight", "mlp.gate.weight"},
        {"ffn_gate_shexp.weight", "mlp.shared_expert.gate_proj.weight"},
        {"ffn_up_shexp.weight", "mlp.shared_expert.up_proj.weight"},
        {"ffn_down_shexp.weight", "mlp.shared_expert.down_proj.weight"},
        {"ffn_gate_inp_shexp.weight", "mlp.shared_expert_gate.weight"},
        {"ssm_in_qkv.weight", "linear_attn.in_proj_qkv.weight"},
        {"ssm_in_z.weight", "linear_attn.in_proj_z.weight"},
        {"ssm_in_b.weight", "linear_attn.in_proj_b.weight"},
        {"ssm_in_a.weight", "linear_attn.in_proj_a.weight"},
        {"ssm_conv1d.weight", "linear_attn.conv1d.weight"},
        {"ssm_dt.bias", "linear_attn.dt_bias"},
        {"ssm_a_log", "linear_attn.A_log"},
        {"ssm_norm.weight", "linear_attn.norm.weight"},
        {"ssm_out.weight", "linear_attn.out_proj.weight"},
    };
    const char *hf = canonical;
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
        if (strcmp(canonical, map[i][0]) == 0)
            hf = map[i][1];
    if (layer < 0 && strncmp(hf, "model.", 6) == 0) { // the text model's own tensors
        snprintf(buf, cap, "%s%s", src->hf_prefix, hf + 6);
        return buf;
    }
    if (layer < 0)
        return hf;
    if (layer >= n_layer)
        snprintf(buf, cap, "mtp.layers.%d.%s", layer - n_layer, hf);
    else
        snprintf(buf, cap, "%slayers.%d.%s", src->hf_prefix, layer, hf);
    return buf;
}

/* ---- the architecture's tensors ---- */

// The experts of kind `kind` ("gate", "up", "down") of layer l, each e0 x e1, into out[n_expert]
// (NULL in the sizing pass, which makes nothing). GGUF: slices of `ffn_<kind>_exps.weight`.
static rp_status get_experts(source *src, const char *kind, int l, int64_t e0, int64_t e1, rp_tensor *out)
{
    rp_model *m = src->m;
    int E = m->cfg.n_expert;
    rp_tensor dummy;
    char name[160];
    rp_status st;
    if (m->gguf) {
        snprintf(name, sizeof(name), "blk.%d.ffn_%s_exps.weight", l, kind);
        src_tensor t;
        if (!find_tensor(src, name, &t))
            return RP_ERR(RP_ERR_INVALID, "%s: missing tensor '%s'", src->path, name);
        if ((int)t.type < 0 || !rp_dtype_valid((int)t.type))
            return RP_ERR(RP_ERR_UNSUPPORTED, "%s: tensor '%s' has an unsupported data type", src->path, name);
        size_t row;
        if (t.n_dims != 3 || t.ne[0] != e0 || t.ne[1] != e1 || t.ne[2] != E || !rp_dtype_row_bytes(t.type, e0, &row))
            return RP_ERR(RP_ERR_INVALID, "%s: tensor '%s' has shape [%lld, %lld, %lld], expected [%lld, %lld, %d]",
                          src->path, name, (long long)t.ne[0], (long long)t.ne[1], (long long)t.ne[2], (long long)e0,
                          (long long)e1, E);
        if ((st = mark_used(src, t.data)))
            return st;
        for (int e = 0; e < E; e++) {
            src_tensor x = t;
            x.n_dims = 2, x.ne[2] = 1;
            x.data = (const uint8_t *)t.data + (size_t)e * row * (size_t)e1;
            if ((st = take_weight(src, &x, e0, e1, true, out ? &out[e] : &dummy)))
                return rp_error_prefix(st, "%s: expert %d", src->path, e);
        }
        return RP_OK;
    }
    for (int e = 0; e < E; e++) {
        snprintf(name, sizeof(name), "mlp.experts.%d.%s_proj.weight", e, kind);
        src_tensor t;
        bool found;
        if ((st = get(src, name, l, e0, e1, true, &t, &found)) ||
            (st = take_weight(src, &t, e0, e1, true, out ? &out[e] : &dummy)))
            return rp_error_prefix(st, "%s", src->path);
    }
    return RP_OK;
}

// Layer l's mixture of experts: the router (the file's type) and the experts.
static rp_status get_moe(source *src, int l, rp_layer *L)
{
    rp_model *m = src->m;
    const rp_model_config *c = &m->cfg;
    src_tensor t;
    bool found;
    rp_status st = get(src, "ffn_gate_inp.weight", l, c->dim, c->n_expert, true, &t, &found);
    if (st)
        return st;
    rp_tensor dummy;
    if ((st = take_weight_as(src, &t, c->dim, c->n_expert, false, true, src->dry ? &dummy : &L->router)))
        return rp_error_prefix(st, "%s", src->path);
    if (!src->dry) {
        L->ex_gate = rp_calloc((size_t)c->n_expert, sizeof(rp_tensor));
        L->ex_up = rp_calloc((size_t)c->n_expert, sizeof(rp_tensor));
        L->ex_down = rp_calloc((size_t)c->n_expert, sizeof(rp_tensor));
        if (!L->ex_gate || !L->ex_up || !L->ex_down)
            return RP_ERR(RP_ERR_NOMEM, "out of memory");
    }
    size_t before = m->weight_bytes;
    if ((st = get_experts(src, "gate", l, c->dim, c->moe_ffn_dim, L->ex_gate)) ||
        (st = get_experts(src, "up", l, c->dim, c->moe_ffn_dim, L->ex_up)) ||
        (st = get_experts(src, "down", l, c->moe_ffn_dim, c->dim, L->ex_down)))
        return st;
    if (l < c->n_layer) // (the MTP layer's are in mtp_weight_bytes)
        m->expert_bytes += m->weight_bytes - before;
    return RP_OK;
}

// The shared expert of a MoE layer (cfg.shared_ffn_dim > 0): a dense MLP in w_gate/w_up/w_down
// and its gate's row (the file's type, as the router).
static rp_status get_shared_expert(source *src, int l, rp_layer *L)
{
    const rp_model_config *c = &src->m->cfg;
    src_tensor t;
    bool found;
    rp_tensor dummy;
    rp_status st;
    if ((st = get_weight(src, "ffn_gate_shexp.weight", l, c->dim, c->shared_ffn_dim, &L->w_gate)) ||
        (st = get_weight(src, "ffn_up_shexp.weight", l, c->dim, c->shared_ffn_dim, &L->w_up)) ||
        (st = get_weight(src, "ffn_down_shexp.weight", l, c->shared_ffn_dim, c->dim, &L->w_down)) ||
        (st = get(src, "ffn_gate_inp_shexp.weight", l, c->dim, 1, true, &t, &found)))
        return st;
    if ((st = take_weight_as(src, &t, c->dim, 1, false, true, src->dry ? &dummy : &L->sh_gate_w)))
        return rp_error_prefix(st, "%s", src->path);
    return RP_OK;
}

// Layer l's attention: Q (with gated attention, q_proj's query rows, its gate rows apart), K,
// V, the output, biases and the q/k norms where the architecture has them.
static rp_status get_attention(source *src, int l, rp_layer *L)
{
    const rp_model_config *c = &src->m->cfg;
    int64_t q_dim = (int64_t)c->n_head * c->head_dim, kv_dim = (int64_t)c->n_kv_head * c->head_dim;
    rp_status st;
    if (c->attn_gate) { // rows: head h's query [2h·hd, 2h·hd + hd), then its gate
        src_tensor t;
        bool found;
        if ((st = get(src, "attn_q.weight", l, c->dim, 2 * q_dim, true, &t, &found)) ||
            (st = take_rows(src, &t, c->dim, 2 * q_dim, 2 * c->head_dim, 0, c->head_dim, &L->wq)) ||
            (st = take_rows(src, &t, c->dim, 2 * q_dim, 2 * c->head_dim, c->head_dim, c->head_dim, &L->wq_gate)))
            return st;
    } else if ((st = get_weight(src, "attn_q.weight", l, c->dim, q_dim, &L->wq))) {
        return st;
    }
    if ((st = get_weight(src, "attn_k.weight", l, c->dim, kv_dim, &L->wk)) ||
        (st = get_weight(src, "attn_v.weight", l, c->dim, kv_dim, &L->wv)) ||
        (st = get_weight(src, "attn_output.weight", l, q_dim, c->dim, &L->wo)) ||
        (st = get_vector(src, "attn_q.bias", l, q_dim, c->qkv_bias, &L->bq)) ||
        (st = get_vector(src, "attn_k.bias", l, kv_dim, c->qkv_bias, &L->bk)) ||
        (st = get_vector(src, "attn_v.bias", l, kv_dim, c->qkv_bias, &L->bv)) ||
        (st = get_norm(src, "attn_q_norm.weight", l, c->head_dim, c->qk_norm, &L->q_norm)) ||
        (st = get_norm(src, "attn_k_norm.weight", l, c->head_dim, c->qk_norm, &L->k_norm)))
        return st;
    rp_tensor *qkv[] = {&L->wq, &L->wk, &L->wv, &L->wq_gate}; // one rp_backend_matmul_group in the forward
    rp_backend_group_weights(src->m->be, qkv, 4);
    return RP_OK;
}

// Layer l's Gated DeltaNet: the four input projections, the conv's weights, the decay's and
// beta's parameters, the gated norm and the output projection.
static rp_status get_gdn(source *src, int l, rp_layer *L)
{
    const rp_model_config *c = &src->m->cfg;
    int64_t vd = (int64_t)c->gdn_v_heads * c->gdn_dv, conv = 2 * (int64_t)c->gdn_k_heads * c->gdn_dk + vd;
    rp_status st;
    if ((st = get_weight(src, "ssm_in_qkv.weight", l, c->dim, conv, &L->w_qkv)) ||
        (st = get_weight(src, "ssm_in_z.weight", l, c->dim, vd, &L->w_z)) ||
        (st = get_weight(src, "ssm_in_b.weight", l, c->dim, c->gdn_v_heads, &L->w_b)) ||
        (st = get_weight(src, "ssm_in_a.weight", l, c->dim, c->gdn_v_heads, &L->w_a)) ||
        (st = get_weight(src, "ssm_out.weight", l, vd, c->dim, &L->w_out)) ||
        (st = get_vector_as(src, "ssm_conv1d.weight", l, c->gdn_kc, conv, true, 0, &L->conv_w)) ||
        (st = get_vector(src, "ssm_a_log", l, c->gdn_v_heads, true, &L->a_log)) ||
        (st = get_vector(src, "ssm_dt.bias", l, c->gdn_v_heads, true, &L->dt_bias)) ||
        (st = get_vector(src, "ssm_norm.weight", l, c->gdn_dv, true, &L->gdn_norm)))
        return st;
    return RP_OK;
}

static rp_status get_mlp(source *src, int l, rp_layer *L)
{
    const rp_model_config *c = &src->m->cfg;
    rp_status st;
    if ((st = get_weight(src, "ffn_gate.weight", l, c->dim, c->ffn_dim, &L->w_gate)) ||
        (st = get_weight(src, "ffn_up.weight", l, c->dim, c->ffn_dim, &L->w_up)) ||
        (st = get_weight(src, "ffn_down.weight", l, c->ffn_dim, c->dim, &L->w_down)))
        return st;
    return RP_OK;
}

// Takes every tensor the architecture needs. Run twice (load_from): dry, to check each
// tensor and count the bytes (nothing allocated but m->layers, for the out-parameters;
// no progress), then for real.
static rp_status load_tensors(source *src)
{
    rp_model *m = src->m;
    rp_model_config *c = &m->cfg;
    rp_status st;
    src_tensor t, e;
    bool has_output, found;
    if ((st = get(src, "output.weight", -1, c->dim, c->n_vocab, false, &t, &has_output)))
        return st;
    // An untied embedding table is read a row per token: it stays where it is (unless quantized).
    if ((st = get(src, "token_embd.weight", -1, c->dim, c->n_vocab, true, &e, &found)))
        return st;
    if ((st = take_weight(src, &e, c->dim, c->n_vocab, !has_output, &m->tok_embd)))
        return rp_error_prefix(st, "%s", src->path);
    if ((st = get_norm(src, "output_norm.weight", -1, c->dim, true, &m->out_norm)))
        return st;
    if (has_output) {
        if ((st = take_weight(src, &t, c->dim, c->n_vocab, true, &m->output)))
            return rp_error_prefix(st, "%s", src->path);
        c->tied_embeddings = false;
    } else {
        m->output = m->tok_embd;
        c->tied_embeddings = true;
    }
    m->layers = rp_calloc((size_t)(c->n_layer + c->n_mtp), sizeof(rp_layer));
    if (!m->layers)
        return RP_ERR(RP_ERR_NOMEM, "out of memory");
    size_t main_bytes = 0;
    int n_kv = 0, n_state = 0; // the layers' places in the KV pool and in its recurrent state
    for (int l = 0; l < c->n_layer + c->n_mtp; l++) {
        if (l == c->n_layer)
            main_bytes = m->weight_bytes;
        rp_layer *L = &m->layers[l];
        bool gdn = rp_config_layer_gdn(c, l), moe = rp_config_layer_moe(c, l);
        L->kv_index = gdn ? n_state++ : n_kv++;
        if ((st = get_norm(src, "attn_norm.weight", l, c->dim, true, &L->attn_norm)) ||
            (st = get_norm(src, "ffn_norm.weight", l, c->dim, true, &L->ffn_norm)) ||
            (st = gdn ? get_gdn(src, l, L) : get_attention(src, l, L)) ||
            (st = moe ? get_moe(src, l, L) : get_mlp(src, l, L)) ||
            (moe && c->shared_ffn_dim > 0 && (st = get_shared_expert(src, l, L))))
            return st;
        if (m->params.progress && !src->dry) // (the MTP layers count: 1 is the whole load)
            m->params.progress(m->params.progress_ctx, (double)(l + 1) / (c->n_layer + c->n_mtp));
    }
    if (c->n_mtp > 0) {
        rp_mtp *M = &m->mtp;
        int l = c->n_layer;
        if ((st = get_weight(src, "nextn.eh_proj.weight", l, 2 * (int64_t)c->dim, c->dim, &M->fc)) ||
            (st = get_norm(src, "nextn.enorm.weight", l, c->dim, true, &M->enorm)) ||
            (st = get_norm(src, "nextn.hnorm.weight", l, c->dim, true, &M->hnorm)) ||
            (st = get_norm(src, "nextn.shared_head_norm.weight", l, c->dim, true, &M->norm)))
            return st;
        if (!src->dry)
            m->mtp_weight_bytes = m->weight_bytes - main_bytes;
    }
    // Rope frequencies: llama.cpp stores Llama-3 scaling as per-pair factors (host memory:
    // the scratch's copy is counted with the scratch).
    bool has_factors = false;
    if (m->gguf && (st = get(src, "rope_freqs.weight", -1, c->head_dim / 2, 0, false, &t, &has_factors)))
        return st;
    if (src->dry)
        return RP_OK;
    m->inv_freq = rp_calloc((size_t)(c->head_dim / 2), sizeof(float)); // (rot_dim / 2 of them used)
    if (!m->inv_freq)
        return RP_ERR(RP_ERR_NOMEM, "out of memory");
    float *factors = NULL;
    if (has_factors) {
        factors = rp_malloc((size_t)(c->head_dim / 2) * sizeof(float));
        if (!factors)
            return RP_ERR(RP_ERR_NOMEM, "out of memory");
        rp_dequantize(t.type, t.data, factors, c->head_dim / 2);
    }
    rp_config_inv_freq(c, factors, m->inv_freq);
    rp_free(factors);
    return RP_OK;
}

// Lists, in one line, the file's tensors that the architecture did not use.
static void list_unused(source *src)
{
    rp_model *m = src->m;
    int64_t n = m->gguf ? rp_gguf_n_tensors(m->gguf) : rp_st_n_tensors(m->st);
    int unused = 0;
    char names[512] = "";
    size_t at = 0;
    for (int64_t i = 0; i < n; i++) {
        const char *name;
        const void *id;
        if (m->gguf) {
            const rp_gguf_tensor *t = rp_gguf_tensor_at(m->gguf, i);
            name = t->name;
            id = t->data;
        } else {
            const rp_st_tensor *t = rp_st_tensor_at(m->st, i);
            name = t->name;
            id = t->data;
        }
        bool used = false;
        for (int j = 0; j < src->n_used && !used; j++)
            used = src->used[j] == id;
        if (used)
            continue;
        if (unused++ < 4 && at < sizeof(names))
            at += (size_t)snprintf(names + at, sizeof(names) - at, "%s%s", unused > 1 ? ", " : "", name);
    }
    if (unused && !m->params.quiet)
        RP_LOGI("skipping %d tensor%s the %s architecture does not use: %s%s", unused, unused > 1 ? "s" : "",
                m->cfg.arch_name, names, unused > 4 ? ", ..." : "");
}

static rp_status load_from(rp_model *m, const char *path,
                           const char *(*name_of)(const source *, const char *, int, char *, size_t),
                           const char *hf_prefix)
{
    if (rp_config_gdn_layers(&m->cfg) > 0 && !rp_backend_has_gdn(m->be)) {
        rp_backend_info bi;
        rp_backend_get_info(m->be, &bi);
        return RP_ERR(RP_ERR_UNSUPPORTED, "%s: %s has Gated DeltaNet layers; the %s backend has no kernels for them "
                                          "yet (use --device cpu)",
                      path, m->cfg.arch_name, bi.name);
    }
    if (m->cfg.n_expert > 0 && !rp_backend_has_moe(m->be)) {
        rp_backend_info bi;
        rp_backend_get_info(m->be, &bi);
        return RP_ERR(RP_ERR_UNSUPPORTED, "%s: %s is a mixture-of-experts model; the %s backend has no kernels for "
                                          "its expert layers yet (use --device cpu)",
                      path, m->cfg.arch_name, bi.name);
    }
    source src = {.m = m, .path = path, .name_of = name_of, .hf_prefix = hf_prefix, .dry = true};
    rp_status st = load_tensors(&src);
    rp_free(m->layers); // the sizing pass leaves nothing behind but its counts
    m->layers = NULL;
    src.n_used = 0;
    src.dry = false;
    if (!st) {
        rp_dtype wtype = RP_DTYPE_F32; // the type most of the matrices' bytes are stored as
        for (int k = 0; k < RP_DTYPE_COUNT; k++)
            if (src.type_bytes[k] > src.type_bytes[wtype])
                wtype = (rp_dtype)k;
        if ((st = rp_model_check_fit(m, src.bytes, wtype)))
            st = rp_error_prefix(st, "%s", path);
    }
    if (!st)
        st = load_tensors(&src);
    if (!st)
        list_unused(&src);
    rp_free(src.used);
    return st;
}

rp_status rp_model_load_hf(rp_model *m, const char *dir)
{
    char *cfg_path = rp_path_join(dir, "config.json");
    if (!cfg_path)
        return RP_ERR(RP_ERR_NOMEM, "out of memory");
    json_error_t jerr;
    json_t *root = json_load_file(cfg_path, JSON_REJECT_DUPLICATES, &jerr);
    rp_status st;
    if (!root) {
        st = rp_file_exists(cfg_path)
                 ? RP_ERR(RP_ERR_INVALID, "%s:%d:%d: %s", cfg_path, jerr.line, jerr.column, jerr.text)
                 : RP_ERR(RP_ERR_IO, "%s: no config.json (is this a Hugging Face model folder?)", dir);
        rp_free(cfg_path);
        return st;
    }
    st = rp_config_from_hf_json(cfg_path, root, &m->cfg);
    json_decref(root);
    if (!st)
        st = rp_config_read_generation(dir, &m->cfg);
    if (!st)
        st = rp_config_validate(cfg_path, &m->cfg);
    rp_free(cfg_path);
    if (st)
        return st;
    if ((st = rp_st_open_dir(dir, &m->st)))
        return st;
    // A vision-language checkpoint (Qwen3.5) keeps its text model under model.language_model.
    bool vl = rp_st_find(m->st, "model.language_model.embed_tokens.weight") != NULL;
    return load_from(m, dir, hf_name, vl ? "model.language_model." : "model.");
}

rp_status rp_model_load_gguf(rp_model *m, const char *path)
{
    rp_status st = rp_gguf_open(path, &m->gguf);
    if (st)
        return st;
    if ((st = rp_config_from_gguf(m->gguf, &m->cfg)) || (st = rp_config_validate(path, &m->cfg)))
        return st;
    return load_from(m, path, gguf_name, "");
}
