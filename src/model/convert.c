/*
 * convert.c - writing a Hugging Face model folder as a GGUF file.
 *
 * Follows the conventions of llama.cpp's converter so the file reads like one
 * it made: GGUF tensor names, `<arch>.*` metadata keys, Llama/Mistral Q and K
 * rows permuted for adjacent-pair rope, Llama-3 rope scaling stored as
 * `rope_freqs.weight` factors, norms and biases in F32. Matrices are written in
 * the requested type (F32, F16, BF16, Q8_0, Q4_0). The tokenizer is not written:
 * the file is a model-only GGUF (the HF folder keeps the tokenizer).
 *
 * An MTP layer (config `mtp_num_hidden_layers`) is carried as llama.cpp carries
 * Qwen3.5's: block_count counts it, `<arch>.nextn_predict_layers` says how many
 * of the blocks are MTP, its decoder layer is block n_layer and `mtp.fc`,
 * `mtp.pre_fc_norm_embedding`, `mtp.pre_fc_norm_hidden`, `mtp.norm` become
 * `blk.N.nextn.eh_proj`, `.enorm`, `.hnorm`, `.shared_head_norm`.
 *
 * A mixture of experts (Qwen3-MoE) is written as llama.cpp's qwen3moe: `<arch>.expert_count`,
 * `expert_used_count`, `expert_feed_forward_length` (and `expert_weights_norm`), the router
 * `blk.N.ffn_gate_inp` in F32 and each kind of expert matrix stacked into one 3-D tensor
 * (`ffn_gate_exps`, `ffn_up_exps`, `ffn_down_exps`). A dense layer among MoE ones
 * (mlp_only_layers, decoder_sparse_step) keeps its `ffn_gate`/`ffn_up`/`ffn_down`; the
 * loader tells the kinds apart by the router's presence.
 */
#include "model_int.h"

#include "../gguf/gguf.h"
#include "../quant/quant.h"
#include "../safetensors/safetensors.h"

#include <math.h>
#include <stdio.h>

typedef struct conv {
    const rp_model_config *cfg;
    rp_st_set *st;
    rp_gguf_writer *w;
    rp_dtype type;
    const char *dir;
} conv;

// Row r of a (n_head x head_dim) block of rows goes where adjacent-pair rope expects it.
static int64_t permuted_row(int64_t r, int head_dim)
{
    int64_t h = r / head_dim, j = r % head_dim, half = head_dim / 2;
    int64_t s = j / half, i = j % half;
    return h * head_dim + i * 2 + s;
}

// The rows of tensor t (ne0 columns, ne1 rows), converted to `out`, into buf (ne1 rows of
// `out`), rows permuted for rope when permute_head_dim > 0.
static rp_status convert_rows(const rp_st_tensor *t, int64_t ne0, int64_t ne1, rp_dtype out, int permute_head_dim,
                              uint8_t *buf)
{
    size_t src_row, dst_row;
    rp_dtype_row_bytes(t->type, ne0, &src_row);
    rp_dtype_row_bytes(out, ne0, &dst_row);
    float *row = rp_malloc((size_t)ne0 * sizeof(float));
    if (!row)
        return RP_ERR(RP_ERR_NOMEM, "out of memory converting %s", t->name);
    rp_status st = RP_OK;
    for (int64_t r = 0; r < ne1 && !st; r++) {
        int64_t dr = permute_head_dim ? permuted_row(r, permute_head_dim) : r;
        rp_dequantize(t->type, (const uint8_t *)t->data + (size_t)r * src_row, row, ne0);
        uint8_t *dst = buf + (size_t)dr * dst_row;
        if (out == RP_DTYPE_F32)
            memcpy(dst, row, (size_t)ne0 * sizeof(float));
        else if (out == RP_DTYPE_F16 || out == RP_DTYPE_BF16)
            for (int64_t i = 0; i < ne0; i++) {
                uint16_t h = out == RP_DTYPE_F16 ? rp_f32_to_fp16(row[i]) : rp_f32_to_bf16(row[i]);
                memcpy(dst + 2 * i, &h, 2);
            }
        else
            st = rp_quantize(out, row, dst, ne0);
    }
    rp_free(row);
    return st;
}

// The type a matrix of ne0 columns is written as: the requested type, F32 where its rows
// are not a whole number of the type's blocks.
static rp_dtype matrix_type(const conv *c, int64_t ne0)
{
    return rp_dtype_is_quant(c->type) && ne0 % rp_dtype_block(c->type) != 0 ? RP_DTYPE_F32 : c->type;
}

// Copies tensor `hf` as `gguf_name`: a matrix converted to `type` (F32 when `keep_f32`), a
// vector (matrix false) as F32; rows permuted for rope when permute_head_dim > 0.
static rp_status put_as(conv *c, const char *hf, const char *gguf_name, bool matrix, bool keep_f32,
                        int permute_head_dim)
{
    const rp_st_tensor *t;
    rp_status st = rp_st_get(c->st, hf, &t);
    if (st)
        return st;
    int64_t ne0 = t->n_dims ? t->shape[t->n_dims - 1] : 1, ne1 = t->n_elems / (ne0 ? ne0 : 1);
    rp_dtype out = matrix && !keep_f32 ? matrix_type(c, ne0) : RP_DTYPE_F32;
    size_t dst_row;
    if (!rp_dtype_row_bytes(out, ne0, &dst_row))
        return RP_ERR(RP_ERR_INVALID, "%s: cannot write as %s", hf, rp_dtype_name(out));
    uint8_t *buf = rp_malloc(dst_row * (size_t)ne1);
    if (!buf)
        return RP_ERR(RP_ERR_NOMEM, "out of memory converting %s", hf);
    st = convert_rows(t, ne0, ne1, out, permute_head_dim, buf);
    int64_t ne[2] = {ne0, ne1};
    if (!st)
        st = rp_gguf_writer_add_tensor(c->w, gguf_name, out, matrix ? 2 : 1, ne, buf);
    rp_free(buf);
    return st;
}

static rp_status put(conv *c, const char *hf, const char *gguf_name, bool matrix, int permute_head_dim)
{
    return put_as(c, hf, gguf_name, matrix, false, permute_head_dim);
}

// Layer l's experts of one kind (HF `mlp.experts.E.<kind>_proj.weight`, each ne0 x ne1) as
// llama.cpp's one 3-D tensor `blk.l.ffn_<kind>_exps.weight` [ne0, ne1, n_expert].
static rp_status put_experts(conv *c, int l, const char *kind, int64_t ne0, int64_t ne1)
{
    int E = c->cfg->n_expert;
    rp_dtype out = matrix_type(c, ne0);
    size_t row, slice;
    if (!rp_dtype_row_bytes(out, ne0, &row) || !rp_mul_size(row, (size_t)ne1, &slice))
        return RP_ERR(RP_ERR_INVALID, "layer %d: experts of %s too large", l, kind);
    uint8_t *buf = rp_malloc(slice * (size_t)E);
    if (!buf)
        return RP_ERR(RP_ERR_NOMEM, "out of memory converting layer %d's experts", l);
    rp_status st = RP_OK;
    for (int e = 0; e < E && !st; e++) {
        char hf[160];
        const rp_st_tensor *t;
        snprintf(hf, sizeof(hf), "model.layers.%d.mlp.experts.%d.%s_proj.weight", l, e, kind);
        if (!(st = rp_st_get(c->st, hf, &t)) && (t->n_dims != 2 || t->shape[1] != ne0 || t->shape[0] != ne1))
            st = RP_ERR(RP_ERR_INVALID, "%s: shape is not [%lld, %lld]", hf, (long long)ne1, (long long)ne0);
        if (!st)
            st = convert_rows(t, ne0, ne1, out, 0, buf + (size_t)e * slice);
    }
    char gg[160];
    snprintf(gg, sizeof(gg), "blk.%d.ffn_%s_exps.weight", l, kind);
    int64_t ne[3] = {ne0, ne1, E};
    if (!st)
        st = rp_gguf_writer_add_tensor(c->w, gg, out, 3, ne, buf);
    rp_free(buf);
    return st;
}

static rp_status put_metadata(conv *c)
{
    const rp_model_config *g = c->cfg;
    // llama.cpp names Mistral checkpoints "llama" too.
    const char *arch = g->arch == RP_ARCH_MISTRAL ? "llama" : g->arch_name;
    char k[128];
    rp_status st = rp_gguf_writer_add_str(c->w, "general.architecture", arch);
#define U32(key, v)                                                                                                    \
    if (!st) {                                                                                                         \
        snprintf(k, sizeof(k), "%s.%s", arch, key);                                                                    \
        st = rp_gguf_writer_add_u32(c->w, k, (uint32_t)(v));                                                          \
    }
#define F32(key, v)                                                                                                    \
    if (!st) {                                                                                                         \
        snprintf(k, sizeof(k), "%s.%s", arch, key);                                                                    \
        st = rp_gguf_writer_add_f32(c->w, k, (float)(v));                                                             \
    }
    U32("context_length", g->max_ctx);
    U32("embedding_length", g->dim);
    U32("block_count", g->n_layer + g->n_mtp);
    if (g->n_mtp > 0)
        U32("nextn_predict_layers", g->n_mtp);
    U32("feed_forward_length", g->ffn_dim);
    U32("attention.head_count", g->n_head);
    U32("attention.head_count_kv", g->n_kv_head);
    U32("attention.key_length", g->head_dim);
    U32("attention.value_length", g->head_dim);
    U32("rope.dimension_count", g->head_dim);
    F32("attention.layer_norm_rms_epsilon", g->norm_eps);
    F32("rope.freq_base", g->rope_theta);
    U32("vocab_size", g->n_vocab);
    if (g->n_expert > 0) {
        U32("expert_count", g->n_expert);
        U32("expert_used_count", g->n_expert_used);
        U32("expert_feed_forward_length", g->moe_ffn_dim);
        if (!st) {
            snprintf(k, sizeof(k), "%s.expert_weights_norm", arch);
            st = rp_gguf_writer_add_bool(c->w, k, g->moe_norm_topk);
        }
    }
    if (g->rope_scaling == RP_ROPE_SCALING_LINEAR) {
        if (!st) {
            snprintf(k, sizeof(k), "%s.rope.scaling.type", arch);
            st = rp_gguf_writer_add_str(c->w, k, "linear");
        }
        F32("rope.scaling.factor", g->rope_factor);
    }
#undef U32
#undef F32
    if (!st && g->bos_id >= 0)
        st = rp_gguf_writer_add_u32(c->w, "tokenizer.ggml.bos_token_id", (uint32_t)g->bos_id);
    if (!st && g->n_eos > 0)
        st = rp_gguf_writer_add_u32(c->w, "tokenizer.ggml.eos_token_id", (uint32_t)g->eos_ids[0]);
    return st;
}

// Llama-3 scaling as llama.cpp stores it: inv_freq[i] = base^(-2i/d) / factor[i].
static rp_status put_rope_freqs(conv *c)
{
    const rp_model_config *g = c->cfg;
    int half = g->head_dim / 2;
    float *plain = rp_malloc((size_t)half * sizeof(float)), *scaled = rp_malloc((size_t)half * sizeof(float));
    if (!plain || !scaled) {
        rp_free(plain);
        rp_free(scaled);
        return RP_ERR(RP_ERR_NOMEM, "out of memory");
    }
    rp_model_config unscaled = *g;
    unscaled.rope_scaling = RP_ROPE_SCALING_NONE;
    rp_config_inv_freq(&unscaled, NULL, plain);
    rp_config_inv_freq(g, NULL, scaled);
    for (int i = 0; i < half; i++)
        plain[i] = plain[i] / scaled[i];
    int64_t ne[1] = {half};
    rp_status st = rp_gguf_writer_add_tensor(c->w, "rope_freqs.weight", RP_DTYPE_F32, 1, ne, plain);
    rp_free(plain);
    rp_free(scaled);
    return st;
}

static rp_status put_tensors(conv *c)
{
    const rp_model_config *g = c->cfg;
    bool perm = g->arch == RP_ARCH_LLAMA || g->arch == RP_ARCH_MISTRAL;
    rp_status st = put(c, "model.embed_tokens.weight", "token_embd.weight", true, 0);
    if (!st)
        st = put(c, "model.norm.weight", "output_norm.weight", false, 0);
    if (!st && rp_st_find(c->st, "lm_head.weight") && !g->tied_embeddings)
        st = put(c, "lm_head.weight", "output.weight", true, 0);
    if (!st && g->rope_scaling == RP_ROPE_SCALING_LLAMA3)
        st = put_rope_freqs(c);
    static const struct {
        const char *hf, *gg;
        bool matrix;
        int rope; // 1: q rows, 2: k rows
        bool optional;
    } per_layer[] = {
        {"input_layernorm.weight", "attn_norm.weight", false, 0, false},
        {"post_attention_layernorm.weight", "ffn_norm.weight", false, 0, false},
        {"self_attn.q_proj.weight", "attn_q.weight", true, 1, false},
        {"self_attn.k_proj.weight", "attn_k.weight", true, 2, false},
        {"self_attn.v_proj.weight", "attn_v.weight", true, 0, false},
        {"self_attn.o_proj.weight", "attn_output.weight", true, 0, false},
        {"self_attn.q_proj.bias", "attn_q.bias", false, 1, true},
        {"self_attn.k_proj.bias", "attn_k.bias", false, 2, true},
        {"self_attn.v_proj.bias", "attn_v.bias", false, 0, true},
        {"self_attn.q_norm.weight", "attn_q_norm.weight", false, 0, true},
        {"self_attn.k_norm.weight", "attn_k_norm.weight", false, 0, true},
        {"mlp.gate_proj.weight", "ffn_gate.weight", true, 0, false},
        {"mlp.up_proj.weight", "ffn_up.weight", true, 0, false},
        {"mlp.down_proj.weight", "ffn_down.weight", true, 0, false},
    };
    for (int l = 0; l < g->n_layer + g->n_mtp && !st; l++) {
        bool moe = rp_config_layer_moe(g, l);
        if (moe) { // the router stays F32 (as llama.cpp writes it), the experts stacked
            char hf[160], gg[160];
            snprintf(hf, sizeof(hf), "model.layers.%d.mlp.gate.weight", l);
            snprintf(gg, sizeof(gg), "blk.%d.ffn_gate_inp.weight", l);
            if ((st = put_as(c, hf, gg, true, true, 0)) || (st = put_experts(c, l, "gate", g->dim, g->moe_ffn_dim)) ||
                (st = put_experts(c, l, "up", g->dim, g->moe_ffn_dim)) ||
                (st = put_experts(c, l, "down", g->moe_ffn_dim, g->dim)))
                break;
        }
        for (size_t i = 0; i < sizeof(per_layer) / sizeof(per_layer[0]) && !st; i++) {
            if (moe && strncmp(per_layer[i].hf, "mlp.", 4) == 0)
                continue;
            char hf[160], gg[160];
            if (l < g->n_layer)
                snprintf(hf, sizeof(hf), "model.layers.%d.%s", l, per_layer[i].hf);
            else
                snprintf(hf, sizeof(hf), "mtp.layers.%d.%s", l - g->n_layer, per_layer[i].hf);
            snprintf(gg, sizeof(gg), "blk.%d.%s", l, per_layer[i].gg);
            if (per_layer[i].optional && !rp_st_find(c->st, hf))
                continue;
            // A q/k bias is permuted like the rows it belongs to.
            st = put(c, hf, gg, per_layer[i].matrix, perm && per_layer[i].rope ? g->head_dim : 0);
        }
    }
    static const struct {
        const char *hf, *gg;
        bool matrix;
    } mtp[] = {
        {"mtp.fc.weight", "nextn.eh_proj.weight", true},
        {"mtp.pre_fc_norm_embedding.weight", "nextn.enorm.weight", false},
        {"mtp.pre_fc_norm_hidden.weight", "nextn.hnorm.weight", false},
        {"mtp.norm.weight", "nextn.shared_head_norm.weight", false},
    };
    for (size_t i = 0; g->n_mtp > 0 && i < sizeof(mtp) / sizeof(mtp[0]) && !st; i++) {
        char gg[160];
        snprintf(gg, sizeof(gg), "blk.%d.%s", g->n_layer, mtp[i].gg);
        st = put(c, mtp[i].hf, gg, mtp[i].matrix, 0);
    }
    return st;
}

rp_status rp_model_convert_gguf(const char *hf_dir, const char *out_path, rp_dtype type)
{
    if (type != RP_DTYPE_F32 && type != RP_DTYPE_F16 && type != RP_DTYPE_BF16 && type != RP_DTYPE_Q8_0 &&
        type != RP_DTYPE_Q4_0)
        return RP_ERR(RP_ERR_UNSUPPORTED, "conversion to %s is not supported", rp_dtype_name(type));
    char *cfg_path = rp_path_join(hf_dir, "config.json");
    if (!cfg_path)
        return RP_ERR(RP_ERR_NOMEM, "out of memory");
    rp_model_config cfg;
    conv c = {.cfg = &cfg, .type = type, .dir = hf_dir};
    json_error_t jerr;
    json_t *root = json_load_file(cfg_path, 0, &jerr);
    rp_status st = root ? rp_config_from_hf_json(cfg_path, root, &cfg)
                        : RP_ERR(RP_ERR_INVALID, "%s:%d:%d: %s", cfg_path, jerr.line, jerr.column, jerr.text);
    json_decref(root);
    if (!st)
        st = rp_config_read_generation(hf_dir, &cfg);
    if (!st)
        st = rp_config_validate(cfg_path, &cfg);
    if (!st && rp_config_gdn_layers(&cfg) > 0) // (Rapid reads no qwen35 GGUF either: DESIGN.md)
        st = RP_ERR(RP_ERR_UNSUPPORTED, "%s: %s has Gated DeltaNet layers; their GGUF form is not supported yet",
                    hf_dir, cfg.arch_name);
    if (!st)
        st = rp_st_open_dir(hf_dir, &c.st);
    if (!st)
        st = rp_gguf_writer_create(&c.w);
    if (!st) {
        cfg.tied_embeddings = rp_st_find(c.st, "lm_head.weight") == NULL || cfg.tied_embeddings;
        st = put_metadata(&c);
    }
    if (!st)
        st = put_tensors(&c);
    if (!st)
        st = rp_gguf_writer_write(c.w, out_path);
    rp_gguf_writer_destroy(c.w);
    if (c.st)
        rp_st_close(c.st);
    rp_free(cfg_path);
    return st;
}
