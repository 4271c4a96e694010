/*
 * config.c - architecture hyper-parameters from config.json or GGUF metadata.
 *
 * Both sources fill one rp_model_config, which rp_config_validate then checks
 * for consistency (divisibility, positive sizes, limits the kernels rely on),
 * so a malformed file becomes a clear error naming the field, never a crash.
 * config.json comes in two rope layouts: the classic `rope_theta` +
 * `rope_scaling` keys that most published checkpoints use, and the
 * `rope_parameters` object that current transformers writes; both are read.
 */
#include "model_int.h"

#include "../gguf/gguf.h"

#include <math.h>
#include <stdio.h>

/* ---- config.json ---- */

static bool js_int(json_t *o, const char *key, int *out)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v) || json_integer_value(v) < INT32_MIN || json_integer_value(v) > INT32_MAX)
        return false;
    *out = (int)json_integer_value(v);
    return true;
}

static bool js_num(json_t *o, const char *key, float *out)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_number(v))
        return false;
    *out = (float)json_number_value(v);
    return true;
}

static rp_status need_int(const char *path, json_t *o, const char *key, int *out)
{
    json_t *v = json_object_get(o, key);
    if (!v)
        return RP_ERR(RP_ERR_INVALID, "%s: missing \"%s\"", path, key);
    if (!js_int(o, key, out))
        return RP_ERR(RP_ERR_INVALID, "%s: \"%s\" is not an integer", path, key);
    return RP_OK;
}

static rp_status arch_from_name(const char *path, const char *name, rp_model_config *cfg)
{
    static const struct {
        const char *name;
        rp_arch arch;
        const char *short_name;
    } known[] = {
        {"LlamaForCausalLM", RP_ARCH_LLAMA, "llama"},       {"llama", RP_ARCH_LLAMA, "llama"},
        {"MistralForCausalLM", RP_ARCH_MISTRAL, "mistral"}, {"mistral", RP_ARCH_MISTRAL, "mistral"},
        {"Qwen2ForCausalLM", RP_ARCH_QWEN2, "qwen2"},       {"qwen2", RP_ARCH_QWEN2, "qwen2"},
        {"Qwen3ForCausalLM", RP_ARCH_QWEN3, "qwen3"},       {"qwen3", RP_ARCH_QWEN3, "qwen3"},
        {"Qwen3MoeForCausalLM", RP_ARCH_QWEN3_MOE, "qwen3moe"}, {"qwen3_moe", RP_ARCH_QWEN3_MOE, "qwen3moe"},
        {"qwen3moe", RP_ARCH_QWEN3_MOE, "qwen3moe"},
        {"Qwen3_5ForConditionalGeneration", RP_ARCH_QWEN3_5, "qwen35"}, {"Qwen3_5ForCausalLM", RP_ARCH_QWEN3_5, "qwen35"},
        {"qwen3_5", RP_ARCH_QWEN3_5, "qwen35"}, {"qwen3_5_text", RP_ARCH_QWEN3_5, "qwen35"},
        {"Qwen3_5MoeForConditionalGeneration", RP_ARCH_QWEN3_5_MOE, "qwen35moe"},
        {"Qwen3_5MoeForCausalLM", RP_ARCH_QWEN3_5_MOE, "qwen35moe"}, {"qwen3_5_moe", RP_ARCH_QWEN3_5_MOE, "qwen35moe"},
        {"qwen3_5_moe_text", RP_ARCH_QWEN3_5_MOE, "qwen35moe"},
    };
    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
        if (strcmp(name, known[i].name) == 0) {
            cfg->arch = known[i].arch;
            snprintf(cfg->arch_name, sizeof(cfg->arch_name), "%s", known[i].short_name);
            return RP_OK;
        }
    return RP_ERR(RP_ERR_UNSUPPORTED,
                  "%s: architecture \"%s\" is not supported (supported: Llama, Mistral, Qwen2, Qwen3, Qwen3-MoE, "
                  "Qwen3.5, Qwen3.5-MoE)", path, name);
}

// Reads rope scaling from a classic rope_scaling object or a rope_parameters object.
static rp_status rope_scaling_from_json(const char *path, json_t *rs, rp_model_config *cfg)
{
    json_t *t = json_object_get(rs, "rope_type");
    if (!t)
        t = json_object_get(rs, "type");
    const char *type = json_is_string(t) ? json_string_value(t) : "default";
    if (strcmp(type, "default") == 0)
        return RP_OK;
    if (!js_num(rs, "factor", &cfg->rope_factor) || !(cfg->rope_factor > 0))
        return RP_ERR(RP_ERR_INVALID, "%s: rope scaling \"%s\" needs a positive \"factor\"", path, type);
    if (strcmp(type, "linear") == 0) {
        cfg->rope_scaling = RP_ROPE_SCALING_LINEAR;
        return RP_OK;
    }
    if (strcmp(type, "llama3") == 0) {
        cfg->rope_scaling = RP_ROPE_SCALING_LLAMA3;
        if (!js_num(rs, "low_freq_factor", &cfg->rope_low_freq_factor) ||
            !js_num(rs, "high_freq_factor", &cfg->rope_high_freq_factor) ||
            !js_int(rs, "original_max_position_embeddings", &cfg->rope_orig_ctx))
            return RP_ERR(RP_ERR_INVALID,
                          "%s: llama3 rope scaling needs low_freq_factor, high_freq_factor and "
                          "original_max_position_embeddings",
                          path);
        if (!(cfg->rope_high_freq_factor > cfg->rope_low_freq_factor) || cfg->rope_orig_ctx <= 0)
            return RP_ERR(RP_ERR_INVALID, "%s: llama3 rope scaling has inconsistent factors", path);
        return RP_OK;
    }
    return RP_ERR(RP_ERR_UNSUPPORTED, "%s: rope scaling type \"%s\" is not supported (default, linear, llama3 are)",
                  path, type);
}

// Marks layer l's MLP dense in a mixture-of-experts model (rp_config_layer_moe).
static void set_dense(rp_model_config *cfg, int l)
{
    cfg->dense_layers[l / 32] |= 1u << (l % 32);
}

// Qwen3-MoE's keys: num_experts (transformers 5 writes num_local_experts), num_experts_per_tok,
// moe_intermediate_size, norm_topk_prob (default false), decoder_sparse_step (1), mlp_only_layers ([]).
static rp_status moe_from_json(const char *path, json_t *root, rp_model_config *cfg)
{
    rp_status st;
    const char *experts = json_object_get(root, "num_experts") ? "num_experts" : "num_local_experts";
    if ((st = need_int(path, root, experts, &cfg->n_expert)) ||
        (st = need_int(path, root, "num_experts_per_tok", &cfg->n_expert_used)) ||
        (st = need_int(path, root, "moe_intermediate_size", &cfg->moe_ffn_dim)))
        return st;
    cfg->moe_norm_topk = json_is_true(json_object_get(root, "norm_topk_prob"));
    cfg->moe_step = 1;
    json_t *step = json_object_get(root, "decoder_sparse_step");
    if (step && !js_int(root, "decoder_sparse_step", &cfg->moe_step))
        return RP_ERR(RP_ERR_INVALID, "%s: \"decoder_sparse_step\" is not an integer", path);
    json_t *dense = json_object_get(root, "mlp_only_layers");
    if (dense && !json_is_array(dense))
        return RP_ERR(RP_ERR_INVALID, "%s: \"mlp_only_layers\" is not a list", path);
    size_t i;
    json_t *v;
    json_array_foreach(dense, i, v) {
        json_int_t l = json_is_integer(v) ? json_integer_value(v) : -1;
        if (l < 0 || l >= 1024)
            return RP_ERR(RP_ERR_INVALID, "%s: \"mlp_only_layers\" holds %s, not a layer index below 1024", path,
                          json_is_integer(v) ? "an index out of range" : "a non-integer");
        set_dense(cfg, (int)l);
    }
    return RP_OK;
}

static bool is_hybrid(rp_arch a)
{
    return a == RP_ARCH_QWEN3_5 || a == RP_ARCH_QWEN3_5_MOE;
}

// Qwen3.5's text config (the object under text_config in the published vision-language
// checkpoints, or the root of a text-only one): the Gated DeltaNet geometry, the layer plan
// (layer_types, else every full_attention_interval-th layer full attention), partial rotary
// (rope_parameters.partial_rotary_factor, else the top level's, else 0.25) and, for the MoE,
// the experts with their shared expert (every layer MoE, top-k always renormalized).
// docs/models/qwen3_5.md has the facts and where they come from.
static rp_status hybrid_from_json(const char *path, json_t *tc, rp_model_config *cfg)
{
    rp_status st;
    if ((st = need_int(path, tc, "linear_num_key_heads", &cfg->gdn_k_heads)) ||
        (st = need_int(path, tc, "linear_num_value_heads", &cfg->gdn_v_heads)) ||
        (st = need_int(path, tc, "linear_key_head_dim", &cfg->gdn_dk)) ||
        (st = need_int(path, tc, "linear_value_head_dim", &cfg->gdn_dv)))
        return st;
    cfg->gdn_kc = 4;
    if (json_object_get(tc, "linear_conv_kernel_dim") && !js_int(tc, "linear_conv_kernel_dim", &cfg->gdn_kc))
        return RP_ERR(RP_ERR_INVALID, "%s: \"linear_conv_kernel_dim\" is not an integer", path);
    json_t *types = json_object_get(tc, "layer_types");
    if (types) {
        if (!json_is_array(types) || (int)json_array_size(types) != cfg->n_layer)
            return RP_ERR(RP_ERR_INVALID, "%s: \"layer_types\" is not a list of %d layer kinds", path, cfg->n_layer);
        for (int l = 0; l < cfg->n_layer && l < 1024; l++) {
            const char *k = json_string_value(json_array_get(types, (size_t)l));
            if (k && strcmp(k, "linear_attention") == 0)
                cfg->gdn_layers[l / 32] |= 1u << (l % 32);
            else if (!k || strcmp(k, "full_attention") != 0)
                return RP_ERR(RP_ERR_UNSUPPORTED, "%s: layer_types[%d] is %s%s%s (linear_attention and full_attention "
                                                  "are supported)",
                              path, l, k ? "\"" : "not a string", k ? k : "", k ? "\"" : "");
        }
    } else {
        int every = 4;
        if (json_object_get(tc, "full_attention_interval") && (!js_int(tc, "full_attention_interval", &every) || every < 1))
            return RP_ERR(RP_ERR_INVALID, "%s: \"full_attention_interval\" is not a positive integer", path);
        for (int l = 0; l < cfg->n_layer && l < 1024; l++)
            if ((l + 1) % every != 0)
                cfg->gdn_layers[l / 32] |= 1u << (l % 32);
    }
    float partial = 0.25f;
    json_t *rp = json_object_get(tc, "rope_parameters");
    if (!(json_is_object(rp) && js_num(rp, "partial_rotary_factor", &partial)))
        js_num(tc, "partial_rotary_factor", &partial);
    if (!(partial > 0 && partial <= 1))
        return RP_ERR(RP_ERR_INVALID, "%s: partial_rotary_factor %g is not in (0, 1]", path, (double)partial);
    cfg->rot_dim = (int)((float)cfg->head_dim * partial);
    cfg->attn_gate = true;
    cfg->norm_unit_offset = true;
    cfg->qk_norm = true;
    if (cfg->arch == RP_ARCH_QWEN3_5_MOE) {
        const char *experts = json_object_get(tc, "num_experts") ? "num_experts" : "num_local_experts";
        if ((st = need_int(path, tc, experts, &cfg->n_expert)) ||
            (st = need_int(path, tc, "num_experts_per_tok", &cfg->n_expert_used)) ||
            (st = need_int(path, tc, "moe_intermediate_size", &cfg->moe_ffn_dim)) ||
            (st = need_int(path, tc, "shared_expert_intermediate_size", &cfg->shared_ffn_dim)))
            return st;
        cfg->moe_norm_topk = true;
        cfg->moe_step = 1;
        cfg->ffn_dim = cfg->shared_ffn_dim; // the dense-shaped MLP of every layer is its shared expert
    }
    return RP_OK;
}

rp_status rp_config_from_hf_json(const char *path, json_t *root, rp_model_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->bos_id = -1;
    if (!json_is_object(root))
        return RP_ERR(RP_ERR_INVALID, "%s: not a JSON object", path);
    json_t *archs = json_object_get(root, "architectures");
    json_t *mt = json_object_get(root, "model_type");
    rp_status st;
    if (json_is_array(archs) && json_is_string(json_array_get(archs, 0)))
        st = arch_from_name(path, json_string_value(json_array_get(archs, 0)), cfg);
    else if (json_is_string(mt))
        st = arch_from_name(path, json_string_value(mt), cfg);
    else
        st = RP_ERR(RP_ERR_INVALID, "%s: neither \"architectures\" nor \"model_type\" names the architecture", path);
    if (st)
        return st;
    // A vision-language checkpoint (Qwen3.5) nests its language model's keys under text_config.
    json_t *text = json_object_get(root, "text_config");
    if (is_hybrid(cfg->arch) && json_is_object(text))
        root = text;
    json_t *act = json_object_get(root, "hidden_act");
    if (json_is_string(act) && strcmp(json_string_value(act), "silu") != 0)
        return RP_ERR(RP_ERR_UNSUPPORTED, "%s: hidden_act \"%s\" is not supported (silu is)", path,
                      json_string_value(act));
    if ((st = need_int(path, root, "vocab_size", &cfg->n_vocab)) ||
        (st = need_int(path, root, "hidden_size", &cfg->dim)) ||
        (st = need_int(path, root, "num_hidden_layers", &cfg->n_layer)) ||
        (st = need_int(path, root, "num_attention_heads", &cfg->n_head)) ||
        (cfg->arch != RP_ARCH_QWEN3_5_MOE && (st = need_int(path, root, "intermediate_size", &cfg->ffn_dim))))
        return st;
    if (!js_int(root, "num_key_value_heads", &cfg->n_kv_head))
        cfg->n_kv_head = cfg->n_head;
    if (!js_int(root, "head_dim", &cfg->head_dim))
        cfg->head_dim = cfg->n_head > 0 ? cfg->dim / cfg->n_head : 0;
    // Multi-token prediction layers (Qwen3-Next/Qwen3.5 naming; rapid-tiny writes it too).
    json_t *mtp = json_object_get(root, "mtp_num_hidden_layers");
    if (mtp && !js_int(root, "mtp_num_hidden_layers", &cfg->n_mtp))
        return RP_ERR(RP_ERR_INVALID, "%s: \"mtp_num_hidden_layers\" is not an integer", path);
    cfg->norm_eps = 1e-6f;
    js_num(root, "rms_norm_eps", &cfg->norm_eps);
    cfg->max_ctx = 4096;
    js_int(root, "max_position_embeddings", &cfg->max_ctx);
    json_t *tie = json_object_get(root, "tie_word_embeddings");
    cfg->tied_embeddings = json_is_true(tie);
    cfg->qkv_bias = cfg->arch == RP_ARCH_QWEN2 || json_is_true(json_object_get(root, "attention_bias"));
    cfg->qk_norm = cfg->arch == RP_ARCH_QWEN3 || cfg->arch == RP_ARCH_QWEN3_MOE;
    if (cfg->arch == RP_ARCH_QWEN3_MOE && (st = moe_from_json(path, root, cfg)))
        return st;
    cfg->rot_dim = cfg->head_dim;
    if (is_hybrid(cfg->arch) && (st = hybrid_from_json(path, root, cfg)))
        return st;
    cfg->rope_style = RP_ROPE_NEOX;
    cfg->rope_theta = 10000.0f;
    cfg->rope_factor = 1.0f;
    json_t *rp = json_object_get(root, "rope_parameters");
    if (json_is_object(rp)) {
        js_num(rp, "rope_theta", &cfg->rope_theta);
        if ((st = rope_scaling_from_json(path, rp, cfg)))
            return st;
    } else {
        js_num(root, "rope_theta", &cfg->rope_theta);
        json_t *rs = json_object_get(root, "rope_scaling");
        if (json_is_object(rs) && (st = rope_scaling_from_json(path, rs, cfg)))
            return st;
    }
    // Sliding-window attention is not implemented: stay within the window, where it is exact.
    int window;
    json_t *usw = json_object_get(root, "use_sliding_window");
    bool sliding = cfg->arch == RP_ARCH_MISTRAL || json_is_true(usw);
    if (sliding && js_int(root, "sliding_window", &window) && window > 0 && window < cfg->max_ctx) {
        RP_LOGW("%s: sliding-window attention (window %d) is not implemented; context capped at %d tokens", path,
                window, window);
        cfg->max_ctx = window;
    }
    return RP_OK;
}

// generation_config.json: bos_token_id and eos_token_id (an id or a list). Optional file.
rp_status rp_config_read_generation(const char *dir, rp_model_config *cfg)
{
    char *path = rp_path_join(dir, "generation_config.json");
    if (!path)
        return RP_ERR(RP_ERR_NOMEM, "out of memory");
    if (!rp_file_exists(path)) {
        rp_free(path);
        return RP_OK;
    }
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root) {
        rp_status st = RP_ERR(RP_ERR_INVALID, "%s:%d:%d: %s", path, jerr.line, jerr.column, jerr.text);
        rp_free(path);
        return st;
    }
    json_t *bos = json_object_get(root, "bos_token_id");
    if (json_is_integer(bos))
        cfg->bos_id = (int32_t)json_integer_value(bos);
    json_t *eos = json_object_get(root, "eos_token_id");
    cfg->n_eos = 0;
    if (json_is_integer(eos)) {
        cfg->eos_ids[cfg->n_eos++] = (int32_t)json_integer_value(eos);
    } else if (json_is_array(eos)) {
        size_t i;
        json_t *v;
        json_array_foreach(eos, i, v) {
            if (json_is_integer(v) && cfg->n_eos < (int)(sizeof(cfg->eos_ids) / sizeof(cfg->eos_ids[0])))
                cfg->eos_ids[cfg->n_eos++] = (int32_t)json_integer_value(v);
        }
    }
    json_decref(root);
    rp_free(path);
    return RP_OK;
}

/* ---- GGUF metadata ---- */

static bool gg_int(const rp_gguf *g, const char *arch, const char *key, int *out)
{
    char full[128];
    int64_t v;
    snprintf(full, sizeof(full), "%s.%s", arch, key);
    if (!rp_gguf_get_int(g, full, &v) || v < INT32_MIN || v > INT32_MAX)
        return false;
    *out = (int)v;
    return true;
}

static bool gg_float(const rp_gguf *g, const char *arch, const char *key, float *out)
{
    char full[128];
    double v;
    snprintf(full, sizeof(full), "%s.%s", arch, key);
    if (!rp_gguf_get_float(g, full, &v))
        return false;
    *out = (float)v;
    return true;
}

rp_status rp_config_from_gguf(const rp_gguf *g, rp_model_config *cfg)
{
    const char *path = rp_gguf_path(g);
    memset(cfg, 0, sizeof(*cfg));
    cfg->bos_id = -1;
    size_t alen;
    const char *a = rp_gguf_get_str(g, "general.architecture", &alen);
    if (!a)
        return RP_ERR(RP_ERR_INVALID, "%s: missing general.architecture", path);
    char arch[32];
    snprintf(arch, sizeof(arch), "%.*s", (int)(alen < 31 ? alen : 31), a);
    rp_status st = arch_from_name(path, arch, cfg);
    if (st)
        return st;
    if (is_hybrid(cfg->arch))
        return RP_ERR(RP_ERR_UNSUPPORTED, "%s: %s GGUF files are not supported yet (load the Hugging Face folder)", path,
                      arch);
    static const char *required[] = {"embedding_length", "block_count", "feed_forward_length",
                                     "attention.head_count"};
    int *dst[] = {&cfg->dim, &cfg->n_layer, &cfg->ffn_dim, &cfg->n_head};
    for (int i = 0; i < 4; i++)
        if (!gg_int(g, arch, required[i], dst[i]))
            return RP_ERR(RP_ERR_INVALID, "%s: missing or invalid %s.%s", path, arch, required[i]);
    // llama.cpp counts MTP ("nextn") layers in block_count; they come after the main ones.
    if (gg_int(g, arch, "nextn_predict_layers", &cfg->n_mtp)) {
        if (cfg->n_mtp < 0 || cfg->n_mtp >= cfg->n_layer)
            return RP_ERR(RP_ERR_INVALID, "%s: %s.nextn_predict_layers %d must be in [0, block_count %d)", path, arch,
                          cfg->n_mtp, cfg->n_layer);
        cfg->n_layer -= cfg->n_mtp;
    }
    if (!gg_int(g, arch, "attention.head_count_kv", &cfg->n_kv_head))
        cfg->n_kv_head = cfg->n_head;
    if (!gg_int(g, arch, "attention.key_length", &cfg->head_dim))
        cfg->head_dim = cfg->n_head > 0 ? cfg->dim / cfg->n_head : 0;
    int rope_dim;
    if (gg_int(g, arch, "rope.dimension_count", &rope_dim) && rope_dim != cfg->head_dim)
        return RP_ERR(RP_ERR_UNSUPPORTED, "%s: partial rotary embedding (%d of %d dims) is not supported", path,
                      rope_dim, cfg->head_dim);
    cfg->rot_dim = cfg->head_dim;
    cfg->norm_eps = 1e-6f;
    gg_float(g, arch, "attention.layer_norm_rms_epsilon", &cfg->norm_eps);
    cfg->max_ctx = 4096;
    gg_int(g, arch, "context_length", &cfg->max_ctx);
    cfg->rope_theta = 10000.0f;
    gg_float(g, arch, "rope.freq_base", &cfg->rope_theta);
    cfg->rope_factor = 1.0f;
    char key[128];
    snprintf(key, sizeof(key), "%s.rope.scaling.type", arch);
    size_t tlen;
    const char *stype = rp_gguf_get_str(g, key, &tlen);
    if (stype && !(tlen == 4 && memcmp(stype, "none", 4) == 0)) {
        if (tlen == 6 && memcmp(stype, "linear", 6) == 0) {
            cfg->rope_scaling = RP_ROPE_SCALING_LINEAR;
            if (!gg_float(g, arch, "rope.scaling.factor", &cfg->rope_factor) || !(cfg->rope_factor > 0))
                return RP_ERR(RP_ERR_INVALID, "%s: linear rope scaling without a positive factor", path);
        } else {
            return RP_ERR(RP_ERR_UNSUPPORTED, "%s: rope scaling \"%.*s\" is not supported", path, (int)tlen, stype);
        }
    }
    // llama.cpp's converter permutes Llama Q/K rows for adjacent-pair rope; Qwen keeps HF's layout.
    cfg->rope_style = cfg->arch == RP_ARCH_LLAMA || cfg->arch == RP_ARCH_MISTRAL ? RP_ROPE_NORM : RP_ROPE_NEOX;
    cfg->qkv_bias = rp_gguf_find_tensor(g, "blk.0.attn_q.bias") != NULL;
    cfg->qk_norm = cfg->arch == RP_ARCH_QWEN3 || cfg->arch == RP_ARCH_QWEN3_MOE;
    if (cfg->arch == RP_ARCH_QWEN3_MOE) { // llama.cpp's qwen3moe: every layer's MLP is experts, renormalized
        if (!gg_int(g, arch, "expert_count", &cfg->n_expert) ||
            !gg_int(g, arch, "expert_used_count", &cfg->n_expert_used) ||
            !gg_int(g, arch, "expert_feed_forward_length", &cfg->moe_ffn_dim))
            return RP_ERR(RP_ERR_INVALID, "%s: missing or invalid %s.expert_count, expert_used_count or "
                                          "expert_feed_forward_length",
                          path, arch);
        cfg->moe_step = 1; // a layer without a router is dense (llama.cpp's files have one in every layer)
        for (int l = 0; l < cfg->n_layer && l < 1024; l++) {
            char tn[64];
            snprintf(tn, sizeof(tn), "blk.%d.ffn_gate_inp.weight", l);
            if (!rp_gguf_find_tensor(g, tn))
                set_dense(cfg, l);
        }
        cfg->moe_norm_topk = true;
        char nk[128];
        snprintf(nk, sizeof(nk), "%s.expert_weights_norm", arch);
        bool norm;
        if (rp_gguf_get_bool(g, nk, &norm))
            cfg->moe_norm_topk = norm;
    }
    cfg->tied_embeddings = rp_gguf_find_tensor(g, "output.weight") == NULL;
    const rp_gguf_tensor *emb = rp_gguf_find_tensor(g, "token_embd.weight");
    if (!emb)
        return RP_ERR(RP_ERR_INVALID, "%s: missing tensor token_embd.weight", path);
    cfg->n_vocab = (int)emb->ne[1];
    int64_t v;
    if (rp_gguf_get_int(g, "tokenizer.ggml.bos_token_id", &v))
        cfg->bos_id = (int32_t)v;
    if (rp_gguf_get_int(g, "tokenizer.ggml.eos_token_id", &v))
        cfg->eos_ids[cfg->n_eos++] = (int32_t)v;
    if (rp_gguf_get_int(g, "tokenizer.ggml.eot_token_id", &v) && (cfg->n_eos == 0 || cfg->eos_ids[0] != v))
        cfg->eos_ids[cfg->n_eos++] = (int32_t)v;
    return RP_OK;
}

/* ---- checks and rope ---- */

rp_status rp_config_validate(const char *path, rp_model_config *cfg)
{
    if (cfg->n_vocab <= 0 || cfg->dim <= 0 || cfg->n_layer <= 0 || cfg->n_head <= 0 || cfg->n_kv_head <= 0 ||
        cfg->head_dim <= 0 || cfg->ffn_dim <= 0)
        return RP_ERR(RP_ERR_INVALID, "%s: sizes must be positive (vocab %d, hidden %d, layers %d, heads %d/%d, "
                                      "head_dim %d, ffn %d)",
                      path, cfg->n_vocab, cfg->dim, cfg->n_layer, cfg->n_head, cfg->n_kv_head, cfg->head_dim,
                      cfg->ffn_dim);
    if (cfg->n_head % cfg->n_kv_head != 0)
        return RP_ERR(RP_ERR_INVALID, "%s: %d attention heads is not a multiple of %d key/value heads", path,
                      cfg->n_head, cfg->n_kv_head);
    if (cfg->head_dim % 2 != 0 || cfg->head_dim > 1024)
        return RP_ERR(RP_ERR_UNSUPPORTED, "%s: head_dim %d is not supported (even, at most 1024)", path,
                      cfg->head_dim);
    if (cfg->n_layer > 1024 || cfg->dim > (1 << 20) || cfg->ffn_dim > (1 << 22) || cfg->n_vocab > (1 << 24))
        return RP_ERR(RP_ERR_UNSUPPORTED, "%s: model dimensions beyond supported limits", path);
    if (!(cfg->norm_eps > 0) || !(cfg->rope_theta > 0) || !isfinite(cfg->rope_theta))
        return RP_ERR(RP_ERR_INVALID, "%s: rms_norm_eps and rope_theta must be positive", path);
    if (cfg->max_ctx <= 0)
        cfg->max_ctx = 4096;
    if (cfg->n_mtp < 0)
        return RP_ERR(RP_ERR_INVALID, "%s: negative number of MTP layers (%d)", path, cfg->n_mtp);
    if (cfg->n_expert != 0 &&
        (cfg->n_expert < 1 || cfg->n_expert > 1024 || cfg->n_expert_used < 1 || cfg->n_expert_used > 64 ||
         cfg->n_expert_used > cfg->n_expert || cfg->moe_ffn_dim <= 0 || cfg->moe_ffn_dim > (1 << 22) ||
         cfg->moe_step < 1))
        return RP_ERR(RP_ERR_INVALID,
                      "%s: mixture of experts with %d experts, %d a token, expert width %d, every %d layers: "
                      "needs 1-1024 experts, 1-64 a token (at most the experts), a positive width and step",
                      path, cfg->n_expert, cfg->n_expert_used, cfg->moe_ffn_dim, cfg->moe_step);
    if (rp_config_gdn_layers(cfg) > 0) {
        int nk = cfg->gdn_k_heads, nv = cfg->gdn_v_heads;
        if (nk <= 0 || nv <= 0 || nv % nk != 0 || cfg->gdn_dk <= 0 || cfg->gdn_dk > 512 || cfg->gdn_dv <= 0 ||
            cfg->gdn_dv > 512 || cfg->gdn_kc < 1 || cfg->gdn_kc > 8)
            return RP_ERR(RP_ERR_UNSUPPORTED,
                          "%s: Gated DeltaNet with %d key / %d value heads of %d / %d, conv kernel %d: needs value heads "
                          "a multiple of key heads, heads of 1-512, a kernel of 1-8",
                          path, nk, nv, cfg->gdn_dk, cfg->gdn_dv, cfg->gdn_kc);
    }
    if (cfg->rot_dim <= 0 || cfg->rot_dim > cfg->head_dim || cfg->rot_dim % 2 != 0)
        return RP_ERR(RP_ERR_UNSUPPORTED, "%s: rotary over %d of %d head dims (needs an even count, at most head_dim)",
                      path, cfg->rot_dim, cfg->head_dim);
    if (cfg->shared_ffn_dim < 0 || cfg->shared_ffn_dim > (1 << 22))
        return RP_ERR(RP_ERR_INVALID, "%s: shared expert width %d", path, cfg->shared_ffn_dim);
    if (cfg->n_mtp > 1) {
        // A stack of several MTP layers has no checkpoint of a supported architecture yet.
        RP_LOGW("%s: %d MTP layers; only a single MTP layer is supported, MTP drafting is off", path, cfg->n_mtp);
        cfg->n_mtp = 0;
    }
    return RP_OK;
}

bool rp_config_layer_moe(const rp_model_config *c, int l)
{
    if (l >= c->n_layer) // the MTP stack's layer j follows the rule of layer j (as vLLM builds it)
        l -= c->n_layer;
    return c->n_expert > 0 && l >= 0 && l < c->n_layer && (l + 1) % c->moe_step == 0 &&
           !(l < 1024 && (c->dense_layers[l / 32] >> (l % 32)) & 1);
}

bool rp_config_layer_gdn(const rp_model_config *c, int l)
{
    return l >= 0 && l < c->n_layer && l < 1024 && (c->gdn_layers[l / 32] >> (l % 32)) & 1;
}

int rp_config_gdn_layers(const rp_model_config *c)
{
    int n = 0;
    for (int l = 0; l < c->n_layer; l++)
        n += rp_config_layer_gdn(c, l);
    return n;
}

int rp_config_kv_layers(const rp_model_config *c)
{
    return c->n_layer + c->n_mtp - rp_config_gdn_layers(c);
}

void rp_config_inv_freq(const rp_model_config *cfg, const float *freq_factors, float *inv_freq)
{
    int half = cfg->rot_dim / 2;
    for (int i = 0; i < half; i++) {
        // As transformers: base ** (2i/d) in float32, d the rotary dims.
        float expo = (float)(2 * i) / (float)cfg->rot_dim;
        float f = 1.0f / powf(cfg->rope_theta, expo);
        if (freq_factors)
            f /= freq_factors[i];
        if (cfg->rope_scaling == RP_ROPE_SCALING_LINEAR) {
            f /= cfg->rope_factor;
        } else if (cfg->rope_scaling == RP_ROPE_SCALING_LLAMA3 && !freq_factors) {
            float lo_wav = (float)cfg->rope_orig_ctx / cfg->rope_low_freq_factor;
            float hi_wav = (float)cfg->rope_orig_ctx / cfg->rope_high_freq_factor;
            float wav = 2.0f * (float)M_PI / f;
            if (wav > lo_wav) {
                f = f / cfg->rope_factor;
            } else if (wav >= hi_wav) { // medium band: interpolate
                float smooth = ((float)cfg->rope_orig_ctx / wav - cfg->rope_low_freq_factor) /
                               (cfg->rope_high_freq_factor - cfg->rope_low_freq_factor);
                f = (1.0f - smooth) * f / cfg->rope_factor + smooth * f;
            }
        }
        inv_freq[i] = f;
    }
}
