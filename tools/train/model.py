"""model.py - Qwen3 (+ one MTP layer) in plain PyTorch, with Hugging Face tensor
names, and its save/load in the HF sharded safetensors layout.

The main model is exactly transformers' Qwen3ForCausalLM (q/k RMSNorm per head
before RoPE, GQA, SwiGLU, RoPE rotate-half, tied embeddings); stage 3 checks its
logits against transformers' on the saved folder.  The MTP layer (DESIGN.md):

    e    = mtp.pre_fc_norm_embedding(embed(x[t+1]))
    g    = mtp.pre_fc_norm_hidden(h[t])        h[t]: main model output after model.norm
    z    = mtp.fc(concat(e, g))                fc: Linear(2*hidden -> hidden), no bias
    z    = mtp.layers.0(z)                     a Qwen3 decoder layer, own attention/KV,
                                               RoPE at the same positions t
    out  = lm_head(mtp.norm(z))                lm_head = embed_tokens (tied)
    predicts x[t+2]

Every RMSNorm is Qwen3's x / rms(x) * w (not Qwen3.5's x / rms(x) * (1 + w)).
"""
import json
import math
import os
import shutil

import torch
import torch.nn as nn
import torch.nn.functional as F

from common import GENERATION_CONFIG, hf_config, write_json

SHARD_BYTES = 15 * 1024 * 1024


class RMSNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        dt = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dt)


def rope(positions, head_dim, theta, device):
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    f = positions.to(torch.float32)[:, None] * inv[None, :]
    emb = torch.cat([f, f], dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


def attention(q, k, v):
    """q [B,H,T,D], k/v [B,KV,T,D], causal."""
    rep = q.shape[1] // k.shape[1]
    if rep > 1:
        B, KV, T, D = k.shape
        k = k[:, :, None].expand(B, KV, rep, T, D).reshape(B, KV * rep, T, D)
        v = v[:, :, None].expand(B, KV, rep, T, D).reshape(B, KV * rep, T, D)
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    T = q.shape[2]
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    mask = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
    s = s.float().masked_fill(mask, float("-inf")).softmax(-1).to(q.dtype)
    return s @ v


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, H, KV, D = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        self.H, self.KV, self.D = H, KV, D
        self.q_proj = nn.Linear(d, H * D, bias=False)
        self.k_proj = nn.Linear(d, KV * D, bias=False)
        self.v_proj = nn.Linear(d, KV * D, bias=False)
        self.o_proj = nn.Linear(H * D, d, bias=False)
        self.q_norm = RMSNorm(D, c["rms_norm_eps"])
        self.k_norm = RMSNorm(D, c["rms_norm_eps"])

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(B, T, self.H, self.D)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(B, T, self.KV, self.D)).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.KV, self.D).transpose(1, 2)
        cos, sin = cos.to(q.dtype), sin.to(q.dtype)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        o = attention(q, k, v)
        return self.o_proj(o.transpose(1, 2).reshape(B, T, self.H * self.D))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, i = c["hidden_size"], c["intermediate_size"]
        self.gate_proj = nn.Linear(d, i, bias=False)
        self.up_proj = nn.Linear(d, i, bias=False)
        self.down_proj = nn.Linear(i, d, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.input_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.mlp = MLP(c)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Inner(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList([DecoderLayer(c) for _ in range(c["num_hidden_layers"])])
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])


class MTP(nn.Module):
    def __init__(self, c):
        super().__init__()
        d = c["hidden_size"]
        self.fc = nn.Linear(2 * d, d, bias=False)
        self.pre_fc_norm_embedding = RMSNorm(d, c["rms_norm_eps"])
        self.pre_fc_norm_hidden = RMSNorm(d, c["rms_norm_eps"])
        self.layers = nn.ModuleList([DecoderLayer(c)])
        self.norm = RMSNorm(d, c["rms_norm_eps"])


class Qwen3MTP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = dict(c)
        self.model = Inner(c)
        self.mtp = MTP(c) if c.get("mtp_layers") else None
        self.apply(self._init)
        # GPT-2 style: residual output projections scaled down with depth
        for n, p in self.named_parameters():
            if n.endswith("o_proj.weight") or n.endswith("down_proj.weight"):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * c["num_hidden_layers"]))

    @staticmethod
    def _init(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=0.02)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)

    def rope(self, T, device, offset=0):
        pos = torch.arange(offset, offset + T, device=device)
        return rope(pos, self.c["head_dim"], self.c["rope_theta"], device)

    def hidden(self, ids, cos=None, sin=None):
        if cos is None:
            cos, sin = self.rope(ids.shape[1], ids.device)
        x = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            x = layer(x, cos, sin)
        return self.model.norm(x)

    def logits(self, h):
        return F.linear(h, self.model.embed_tokens.weight.to(h.dtype))

    def mtp_hidden(self, h, next_ids, cos, sin):
        """h [B,T,d] (after model.norm) at positions t, next_ids [B,T] = x[t+1]."""
        m = self.mtp
        e = m.pre_fc_norm_embedding(self.model.embed_tokens(next_ids))
        g = m.pre_fc_norm_hidden(h)
        z = m.fc(torch.cat([e, g], dim=-1))
        z = m.layers[0](z, cos, sin)
        return m.norm(z)

    def forward(self, ids):
        """Main logits [B,T,V] and (if MTP) MTP logits [B,T-1,V]: row t combines h[t]
        and x[t+1] and predicts x[t+2] (the last row has no target in ids)."""
        T = ids.shape[1]
        cos, sin = self.rope(T, ids.device)
        h = self.hidden(ids, cos, sin)
        logits = self.logits(h)
        if self.mtp is None:
            return logits, None
        hm = self.mtp_hidden(h[:, :-1], ids[:, 1:], cos[: T - 1], sin[: T - 1])
        return logits, self.logits(hm)

    def loss(self, ids, labels, mtp_weight=0.3, weights=None):
        """labels[b, t] = target for position t (x[t+1] or -100).  MTP row t targets
        labels[t+1] (= x[t+2]).  weights[b, t] (optional) scales position t's loss;
        the mean is still over the labelled positions.  Returns (total to minimize,
        main, mtp), the last two unweighted means for the logs."""
        logits, mlog = self(ids)
        main, main_plain = _ce(logits, labels, weights)
        if mlog is None:
            return main, main_plain, None
        mtp, mtp_plain = _ce(mlog, labels[:, 1:], None if weights is None else weights[:, 1:])
        return main + mtp_weight * mtp, main_plain, mtp_plain


def _ce(logits, labels, weights):
    """(weighted mean, detached plain mean) of the cross-entropy over labelled
    positions (label -100 is ignored)."""
    V = logits.shape[-1]
    lab = labels.reshape(-1)
    per = F.cross_entropy(logits.float().reshape(-1, V), lab, ignore_index=-100, reduction="none")
    n = (lab != -100).sum().clamp(min=1)
    plain = per.sum() / n
    if weights is None:
        return plain, plain.detach()
    return (per * weights.reshape(-1)).sum() / n, plain.detach()


def count_params(m):
    return sum(p.numel() for p in m.parameters())


# ---------------------------------------------------------------- HF layout


def save_hf(model, folder, tokenizer_dir, readme=None):
    """Writes the HF folder: sharded bf16 safetensors (<= 15 MiB each) + index,
    config.json, generation_config.json, tokenizer files, README.md."""
    from safetensors.torch import save_file

    os.makedirs(folder, exist_ok=True)
    for f in os.listdir(folder):
        if f.endswith(".safetensors") or f.endswith(".index.json"):
            os.remove(os.path.join(folder, f))
    sd = {k: v.detach().to(torch.bfloat16).contiguous().cpu() for k, v in model.state_dict().items()}
    names = sorted(sd)
    shards, cur, cur_bytes = [], [], 0
    for n in names:
        b = sd[n].numel() * 2
        if cur and cur_bytes + b > SHARD_BYTES - 64 * 1024:
            shards.append(cur)
            cur, cur_bytes = [], 0
        cur.append(n)
        cur_bytes += b
    if cur:
        shards.append(cur)
    total = sum(sd[n].numel() * 2 for n in names)
    wmap = {}
    if len(shards) == 1:
        save_file({n: sd[n] for n in shards[0]}, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    else:
        for i, s in enumerate(shards):
            fn = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
            save_file({n: sd[n] for n in s}, os.path.join(folder, fn), metadata={"format": "pt"})
            for n in s:
                wmap[n] = fn
        write_json(os.path.join(folder, "model.safetensors.index.json"), {"metadata": {"total_size": total}, "weight_map": wmap}, indent=2)
    write_json(os.path.join(folder, "config.json"), hf_config(model.c), indent=2)
    write_json(os.path.join(folder, "generation_config.json"), GENERATION_CONFIG, indent=2)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tokenizer_dir, f), os.path.join(folder, f))
    if readme:
        with open(os.path.join(folder, "README.md"), "w") as f:
            f.write(readme)


def load_hf(folder, size, device="cpu"):
    from safetensors.torch import load_file

    sd = {}
    for f in sorted(os.listdir(folder)):
        if f.endswith(".safetensors"):
            sd.update(load_file(os.path.join(folder, f)))
    m = Qwen3MTP(size)
    missing, unexpected = m.load_state_dict({k: v.float() for k, v in sd.items()}, strict=False)
    if missing or unexpected:
        raise RuntimeError(f"{folder}: missing {missing} unexpected {unexpected}")
    return m.to(device)


def folder_bytes(folder):
    return sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
