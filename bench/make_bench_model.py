#!/usr/bin/env python3
"""make_bench_model.py - a ~0.5B Qwen2-shaped model with random weights, for benchmarks.

Usage: python3 bench/make_bench_model.py OUTDIR [--shape 0.5b|7b|30b-a3b|qwen3.5-9b|qwen3.6-35b-a3b] [--layers N]

--shape 7b makes the shapes of Qwen2.5-7B instead (hidden 3584, 28 layers, 28 heads
/ 4 KV heads, head_dim 128, intermediate 18944, vocab 152064, untied lm_head, rope_theta
1e6, q/k/v bias: ~15.2 GB of BF16), the GPU benchmark's model (bench/gpu_decode.sh).
--shape 30b-a3b makes Qwen3-30B-A3B's (Qwen3MoeForCausalLM: hidden 2048, 48 layers, 32
heads / 4 KV heads of 128, q/k norm, no bias, 128 experts of width 768, 8 a token,
renormalized, vocab 151936, untied: ~61 GB of BF16); --layers N keeps the first N layers
(each ~1.2 GB), so a machine of ordinary memory measures a layer's decode cost.
--shape qwen3.5-9b and qwen3.6-35b-a3b make the Qwen3.5 hybrids at the shapes of
transformers 5.17's Qwen3_5TextConfig and Qwen3_5MoeTextConfig defaults (docs/models/qwen3_5.md):
Gated DeltaNet layers (16 key / 32 value heads of 128, conv kernel 4) with every fourth
layer gated full attention (16 / 4 heads of 256 for the 9B, 16 / 2 for the 35B, rotary on
64 of 256 dims), vocabulary 248320, untied. The 9B: hidden 4096, 32 layers, dense MLPs of
12288 (~18.6 GB of BF16). The 35B-A3B: hidden 2048, 40 layers, 256 experts of width 512, 8 a
token, and a shared expert of 512 (~70 GB). Both as a text-only checkpoint
(Qwen3_5ForCausalLM / Qwen3_5MoeForCausalLM); --layers keeps the first N (keep a multiple
of 4 to keep the 3:1 plan).

Writes a Hugging Face snapshot folder with the exact tensor shapes of
Qwen2-0.5B (hidden 896, 24 layers, 14 heads / 2 KV heads, head_dim 64,
intermediate 4864, vocab 151936, tied embeddings, rope_theta 1e6, q/k/v bias):

  config.json             Qwen2ForCausalLM config
  generation_config.json  bos/eos ids
  model.safetensors       all tensors in BF16 (~0.99 GB), written by hand
  tokenizer.json          a minimal byte-level BPE: ids 0-255 are the 256 bytes
                          (GPT-2 byte-to-unicode alphabet), no merges, ids 256 to
                          151642 the words " t256" ... " t151642" (so generated
                          ids decode to text), plus the Qwen special tokens
                          <|endoftext|> 151643, <|im_start|> 151644, <|im_end|>
                          151645. Text round-trips, one token per byte; it is NOT
                          Qwen's real tokenizer.
  tokenizer_config.json   the special tokens and a ChatML chat template

The weights are random, so the text is noise: this model is for speed (the
decode step reads exactly as many bytes as the real Qwen2-0.5B), never for
quality. Needs only the Python standard library (no numpy/torch), so it runs
anywhere; ~1 GB takes ~10 s (os.urandom bound).

BF16 values: random bytes, with the high byte of every value remapped through
a table so the sign is random and the exponent lands in a narrow band:
|w| in [2^-9, 2^-3) = [0.002, 0.125), mostly [0.008, 0.03) (rms ~0.03).
Norm weights are 1.0-1.12; biases use the weight distribution.
"""
import json
import os
import struct
import sys
import time

HIDDEN = 896
LAYERS = 24
HEADS = 14
KV_HEADS = 2
HEAD_DIM = HIDDEN // HEADS  # 64
INTERMEDIATE = 4864
VOCAB = 151936
TIED = True
SHAPES = {  # --shape: (hidden, layers, heads, kv heads, intermediate, vocab, tied)
    "0.5b": (896, 24, 14, 2, 4864, 151936, True),
    "7b": (3584, 28, 28, 4, 18944, 152064, False),
    "30b-a3b": (2048, 48, 32, 4, 6144, 151936, False),
}
MOE_SHAPES = {  # --shape: (head_dim, experts, experts a token, expert width) of the Qwen3-MoE shapes
    "30b-a3b": (128, 128, 8, 768),
}
MOE = None  # (head_dim, experts, used, width) when the shape is a Qwen3-MoE
HYBRID_SHAPES = {  # --shape: (hidden, layers, heads, kv heads, intermediate or None (MoE), vocab)
    "qwen3.5-9b": (4096, 32, 16, 4, 12288, 248320),
    "qwen3.6-35b-a3b": (2048, 40, 16, 2, None, 248320),
}
HYBRID_MOE = (256, 8, 512, 512)  # experts, a token, width, shared expert width (qwen3.6-35b-a3b)
HYBRID = None  # the shape's name when it is a hybrid
GDN = (16, 32, 128, 128, 4)  # key heads, value heads, key and value head dims, conv kernel
HYBRID_HEAD_DIM = 256
BOS = EOS = 151643  # <|endoftext|>
IM_START, IM_END = 151644, 151645

CHUNK = 32 << 20  # bytes generated per os.urandom call


def tensor_list():
    """[(name, shape, kind)] in file order; kind: 'w' weight/bias, 'norm'."""
    kv = KV_HEADS * HEAD_DIM
    t = [("model.embed_tokens.weight", [VOCAB, HIDDEN], "w")]
    if HYBRID:
        return t + hybrid_layers() + [("model.norm.weight", [HIDDEN], "norm"), ("lm_head.weight", [VOCAB, HIDDEN], "w")]
    if MOE:
        return t + moe_layers() + [("model.norm.weight", [HIDDEN], "norm"), ("lm_head.weight", [VOCAB, HIDDEN], "w")]
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        t += [
            (p + "input_layernorm.weight", [HIDDEN], "norm"),
            (p + "self_attn.q_proj.weight", [HEADS * HEAD_DIM, HIDDEN], "w"),
            (p + "self_attn.q_proj.bias", [HEADS * HEAD_DIM], "w"),
            (p + "self_attn.k_proj.weight", [kv, HIDDEN], "w"),
            (p + "self_attn.k_proj.bias", [kv], "w"),
            (p + "self_attn.v_proj.weight", [kv, HIDDEN], "w"),
            (p + "self_attn.v_proj.bias", [kv], "w"),
            (p + "self_attn.o_proj.weight", [HIDDEN, HEADS * HEAD_DIM], "w"),
            (p + "post_attention_layernorm.weight", [HIDDEN], "norm"),
            (p + "mlp.gate_proj.weight", [INTERMEDIATE, HIDDEN], "w"),
            (p + "mlp.up_proj.weight", [INTERMEDIATE, HIDDEN], "w"),
            (p + "mlp.down_proj.weight", [HIDDEN, INTERMEDIATE], "w"),
        ]
    t.append(("model.norm.weight", [HIDDEN], "norm"))
    if not TIED:
        t.append(("lm_head.weight", [VOCAB, HIDDEN], "w"))
    return t  # tied embeddings: no lm_head.weight


def moe_layers():
    """Qwen3-MoE decoder layers: q/k norm, no bias, a router and per-expert MLPs."""
    hd, n_exp, _, width = MOE
    t = []
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        t += [
            (p + "input_layernorm.weight", [HIDDEN], "norm"),
            (p + "self_attn.q_proj.weight", [HEADS * hd, HIDDEN], "w"),
            (p + "self_attn.k_proj.weight", [KV_HEADS * hd, HIDDEN], "w"),
            (p + "self_attn.v_proj.weight", [KV_HEADS * hd, HIDDEN], "w"),
            (p + "self_attn.o_proj.weight", [HIDDEN, HEADS * hd], "w"),
            (p + "self_attn.q_norm.weight", [hd], "norm"),
            (p + "self_attn.k_norm.weight", [hd], "norm"),
            (p + "post_attention_layernorm.weight", [HIDDEN], "norm"),
            (p + "mlp.gate.weight", [n_exp, HIDDEN], "w"),
        ]
        for e in range(n_exp):
            q = p + f"mlp.experts.{e}."
            t += [
                (q + "gate_proj.weight", [width, HIDDEN], "w"),
                (q + "up_proj.weight", [width, HIDDEN], "w"),
                (q + "down_proj.weight", [HIDDEN, width], "w"),
            ]
    return t


def hybrid_layers():
    """Qwen3.5 decoder layers: Gated DeltaNet, every fourth one gated attention; dense or MoE MLPs."""
    nk, nv, dk, dv, kc = GDN
    hd = HYBRID_HEAD_DIM
    key, val = nk * dk, nv * dv
    t = []
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        t.append((p + "input_layernorm.weight", [HIDDEN], "norm"))
        if (i + 1) % 4 != 0:
            q = p + "linear_attn."
            t += [
                (q + "in_proj_qkv.weight", [2 * key + val, HIDDEN], "w"),
                (q + "in_proj_z.weight", [val, HIDDEN], "w"),
                (q + "in_proj_b.weight", [nv, HIDDEN], "w"),
                (q + "in_proj_a.weight", [nv, HIDDEN], "w"),
                (q + "conv1d.weight", [2 * key + val, 1, kc], "w"),
                (q + "dt_bias", [nv], "w"),
                (q + "A_log", [nv], "w"),
                (q + "norm.weight", [dv], "norm"),
                (q + "out_proj.weight", [HIDDEN, val], "w"),
            ]
        else:
            t += [
                (p + "self_attn.q_proj.weight", [2 * HEADS * hd, HIDDEN], "w"),
                (p + "self_attn.k_proj.weight", [KV_HEADS * hd, HIDDEN], "w"),
                (p + "self_attn.v_proj.weight", [KV_HEADS * hd, HIDDEN], "w"),
                (p + "self_attn.o_proj.weight", [HIDDEN, HEADS * hd], "w"),
                (p + "self_attn.q_norm.weight", [hd], "norm"),
                (p + "self_attn.k_norm.weight", [hd], "norm"),
            ]
        t.append((p + "post_attention_layernorm.weight", [HIDDEN], "norm"))
        if INTERMEDIATE:
            t += [
                (p + "mlp.gate_proj.weight", [INTERMEDIATE, HIDDEN], "w"),
                (p + "mlp.up_proj.weight", [INTERMEDIATE, HIDDEN], "w"),
                (p + "mlp.down_proj.weight", [HIDDEN, INTERMEDIATE], "w"),
            ]
            continue
        n_exp, _, width, shared = HYBRID_MOE
        t += [
            (p + "mlp.gate.weight", [n_exp, HIDDEN], "w"),
            (p + "mlp.shared_expert.gate_proj.weight", [shared, HIDDEN], "w"),
            (p + "mlp.shared_expert.up_proj.weight", [shared, HIDDEN], "w"),
            (p + "mlp.shared_expert.down_proj.weight", [HIDDEN, shared], "w"),
            (p + "mlp.shared_expert_gate.weight", [1, HIDDEN], "w"),
        ]
        for e in range(n_exp):
            q = p + f"mlp.experts.{e}."
            t += [
                (q + "gate_proj.weight", [width, HIDDEN], "w"),
                (q + "up_proj.weight", [width, HIDDEN], "w"),
                (q + "down_proj.weight", [HIDDEN, width], "w"),
            ]
    return t


def hybrid_config():
    nk, nv, dk, dv, kc = GDN
    moe = INTERMEDIATE is None
    c = {
        "architectures": ["Qwen3_5MoeForCausalLM" if moe else "Qwen3_5ForCausalLM"],
        "model_type": "qwen3_5_moe_text" if moe else "qwen3_5_text",
        "attention_bias": False,
        "bos_token_id": BOS,
        "eos_token_id": EOS,
        "head_dim": HYBRID_HEAD_DIM,
        "hidden_act": "silu",
        "hidden_size": HIDDEN,
        "layer_types": ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(LAYERS)],
        "linear_conv_kernel_dim": kc,
        "linear_key_head_dim": dk,
        "linear_num_key_heads": nk,
        "linear_num_value_heads": nv,
        "linear_value_head_dim": dv,
        "max_position_embeddings": 262144,
        "num_attention_heads": HEADS,
        "num_hidden_layers": LAYERS,
        "num_key_value_heads": KV_HEADS,
        "rms_norm_eps": 1e-06,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25},
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "vocab_size": VOCAB,
    }
    if moe:
        n_exp, used, width, shared = HYBRID_MOE
        c.update(num_experts=n_exp, num_experts_per_tok=used, moe_intermediate_size=width,
                 shared_expert_intermediate_size=shared)
    else:
        c["intermediate_size"] = INTERMEDIATE
    return c


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


# High byte of a little-endian bf16 = sign bit + top 7 exponent bits. The low
# 3 random bits pick the exponent band: 59 (1/8), 60 (6/8), 61 (1/8), i.e. a
# biased exponent of 118-123 with the low byte's top bit.
_BANDS = [59, 60, 60, 60, 60, 60, 60, 61]
HI_TABLE = bytes((b & 0x80) | _BANDS[b & 7] for b in range(256))
# Norm weights: 0x3F80 = 1.0; keep 4 random mantissa bits -> [1.0, 1.12).
NORM_LO_TABLE = bytes(0x80 | (b & 0x0F) for b in range(256))


try:  # numpy, where there is one, makes the random bytes ~10x faster (the 7B shape's 15 GB)
    import numpy as np
    _RNG = np.random.default_rng(1234)
    _HI = np.frombuffer(HI_TABLE, dtype=np.uint8)
except ImportError:
    np = None


def write_weight_bytes(f, nbytes):
    left = nbytes
    while left:
        n = min(left, CHUNK)
        if np is not None:
            buf = _RNG.integers(0, 256, size=n, dtype=np.uint8)
            buf[1::2] = _HI[buf[1::2]]
            f.write(buf.tobytes())
        else:
            buf = bytearray(os.urandom(n))
            buf[1::2] = buf[1::2].translate(HI_TABLE)
            f.write(buf)
        left -= n


def write_norm_bytes(f, nbytes):
    buf = bytearray(os.urandom(nbytes))
    buf[0::2] = buf[0::2].translate(NORM_LO_TABLE)
    buf[1::2] = b"\x3f" * (nbytes // 2)
    f.write(buf)


def write_safetensors(path, tensors):
    header = {"__metadata__": {"format": "pt"}}
    off = 0
    for name, shape, _ in tensors:
        size = numel(shape) * 2
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [off, off + size]}
        off += size
    hjson = json.dumps(header, separators=(",", ":")).encode()
    hjson += b" " * (-len(hjson) % 8)  # pad to 8 bytes, as the safetensors library does
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for name, shape, kind in tensors:
            size = numel(shape) * 2
            (write_norm_bytes if kind == "norm" else write_weight_bytes)(f, size)
    return off


def config():
    if HYBRID:
        return hybrid_config()
    if MOE:
        hd, n_exp, used, width = MOE
        return {
            "architectures": ["Qwen3MoeForCausalLM"],
            "model_type": "qwen3_moe",
            "attention_bias": False,
            "bos_token_id": BOS,
            "eos_token_id": EOS,
            "decoder_sparse_step": 1,
            "head_dim": hd,
            "hidden_act": "silu",
            "hidden_size": HIDDEN,
            "intermediate_size": INTERMEDIATE,
            "max_position_embeddings": 40960,
            "mlp_only_layers": [],
            "moe_intermediate_size": width,
            "norm_topk_prob": True,
            "num_attention_heads": HEADS,
            "num_experts": n_exp,
            "num_experts_per_tok": used,
            "num_hidden_layers": LAYERS,
            "num_key_value_heads": KV_HEADS,
            "rms_norm_eps": 1e-06,
            "rope_theta": 1000000.0,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
            "vocab_size": VOCAB,
        }
    return {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "attention_dropout": 0.0,
        "bos_token_id": BOS,
        "eos_token_id": EOS,
        "hidden_act": "silu",
        "hidden_size": HIDDEN,
        "initializer_range": 0.02,
        "intermediate_size": INTERMEDIATE,
        "max_position_embeddings": 32768,
        "max_window_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_hidden_layers": LAYERS,
        "num_key_value_heads": KV_HEADS,
        "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0,
        "sliding_window": 32768,
        "use_sliding_window": False,
        "tie_word_embeddings": TIED,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "vocab_size": VOCAB,
    }


def bytes_to_unicode():
    """GPT-2's byte -> printable character map used by byte-level BPE."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1))
    bs += list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


SPECIALS = [(BOS, "<|endoftext|>"), (IM_START, "<|im_start|>"), (IM_END, "<|im_end|>")]

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def tokenizer_json():
    b2u = bytes_to_unicode()
    vocab = {b2u[b]: b for b in range(256)}
    # Every other id below the specials decodes to a word of its own (" t1234": "Ġ" is the
    # space in the byte alphabet), so the random model's output is text a client counts:
    # `rapid bench` measures decode speed from the streamed text. No merges make these, so
    # encoding stays one token per byte.
    first_special = min(i for i, _ in SPECIALS)
    vocab.update({f"\u0120t{i}": i for i in range(256, first_special)})
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True}
            for i, s in SPECIALS
        ],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": True},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": "",
            "end_of_word_suffix": "",
            "fuse_unk": False,
            "byte_fallback": False,
            "vocab": vocab,
            "merges": [],
        },
    }


def tokenizer_config():
    return {
        "add_prefix_space": False,
        "added_tokens_decoder": {
            str(i): {"content": s, "lstrip": False, "normalized": False, "rstrip": False,
                     "single_word": False, "special": True}
            for i, s in SPECIALS
        },
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "bos_token": None,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|endoftext|>",
        "model_max_length": 32768,
        "pad_token": "<|endoftext|>",
        "tokenizer_class": "Qwen2Tokenizer",
    }


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")


def main():
    global HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM, INTERMEDIATE, VOCAB, TIED, MOE, HYBRID
    args = sys.argv[1:]
    shape, layers = "0.5b", None
    while len(args) >= 3 and args[-2] in ("--shape", "--layers"):
        if args[-2] == "--shape" and (args[-1] in SHAPES or args[-1] in HYBRID_SHAPES):
            shape = args[-1]
        elif args[-2] == "--layers" and args[-1].isdigit() and int(args[-1]) > 0:
            layers = int(args[-1])
        else:
            break
        args = args[:-2]
    if len(args) != 1 or args[0].startswith("-"):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        sys.exit(2)
    if shape in HYBRID_SHAPES:
        HIDDEN, LAYERS, HEADS, KV_HEADS, INTERMEDIATE, VOCAB = HYBRID_SHAPES[shape]
        TIED, HYBRID = False, shape
    else:
        HIDDEN, LAYERS, HEADS, KV_HEADS, INTERMEDIATE, VOCAB, TIED = SHAPES[shape]
    LAYERS = min(LAYERS, layers) if layers else LAYERS
    HEAD_DIM = HIDDEN // HEADS
    MOE = MOE_SHAPES.get(shape)
    out = args[0]
    os.makedirs(out, exist_ok=True)
    t0 = time.time()
    tensors = tensor_list()
    nbytes = write_safetensors(os.path.join(out, "model.safetensors"), tensors)
    write_json(os.path.join(out, "config.json"), config())
    write_json(os.path.join(out, "generation_config.json"),
               {"bos_token_id": BOS, "eos_token_id": EOS, "max_new_tokens": 2048})
    write_json(os.path.join(out, "tokenizer.json"), tokenizer_json())
    write_json(os.path.join(out, "tokenizer_config.json"), tokenizer_config())
    n_params = sum(numel(s) for _, s, _ in tensors)
    print(f"{out}: {len(tensors)} tensors, {n_params / 1e6:.1f}M params, "
          f"{nbytes / 1e9:.3f} GB of BF16, {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
