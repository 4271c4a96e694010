#!/usr/bin/env python3
"""Stage 2: pretraining of the main model (with its MTP layer, trained jointly) and
of the 2-layer draft sibling, on the stage-1 corpus.

    python3 tools/train/stage2.py --stage1 DIR1 --out DIR2 [--minutes 7] [--pack-to $OUT]

Re-reads the manifest's training files (the machine image holds them), tokenizes
them with the stage-1 tokenizer, and trains for a wall-clock budget: the learning
rate schedule and the sequence-length phases follow the fraction of the budget
spent (2k tokens, then 8k, then 16k for the last part).  With --sft-examples N,
from --sft-from of the budget on, --sft-frac of each batch's rows are windows of
rendered chat-task examples (stage 3's generator, other seeds; whole text, loss on
every token), each starting at an example's first token: copying a file back with an
edit learned as language modelling before fine-tuning (tried in session 7; README).
Writes DIR2/main/ and DIR2/draft/ (HF folders, bf16) and DIR2/stage2_log.jsonl.
"""
import argparse
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
import torch  # noqa: E402

import corpus  # noqa: E402
from common import DRAFT, ENDOFTEXT, MAIN, log, pack, write_json  # noqa: E402
from model import Qwen3MTP, count_params, save_hf  # noqa: E402


def tokenize_corpus(tok, manifest, split="train", limit_bytes=None, every=1):
    texts, n = [], 0
    for i, (e, t) in enumerate(corpus.read_files(manifest, split=split)):
        if i % every:
            continue
        texts.append(t)
        n += len(t)
        if limit_bytes and n >= limit_bytes:
            break
    out = []
    B = 2000
    for i in range(0, len(texts), B):
        for enc in tok.encode_batch(texts[i : i + B]):
            out.append(np.asarray(enc.ids, dtype=np.uint16))
            out.append(np.asarray([ENDOFTEXT], dtype=np.uint16))
    return np.concatenate(out) if out else np.zeros(0, np.uint16), len(texts), n


def lr_at(p, peak, warm=0.02, floor=0.1):
    if p < warm:
        return peak * p / warm
    q = min(1.0, (p - warm) / (1 - warm))
    return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * q)))


SEQ_PHASES = [(0.0, 2048), (0.80, 8192), (0.92, 16384)]


def seq_at(p, phases):
    s = phases[0][1]
    for start, L in phases:
        if p >= start:
            s = L
    return s


def make_opt(model, lr, wd=0.1):
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    nodecay = [p for n, p in model.named_parameters() if p.dim() < 2]
    kw = {"fused": True} if torch.cuda.is_available() else {}
    return torch.optim.AdamW([{"params": decay, "weight_decay": wd}, {"params": nodecay, "weight_decay": 0.0}], lr=lr, betas=(0.9, 0.95), eps=1e-8, **kw)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stage1", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--pack-to", default=None)
    ap.add_argument("--minutes", type=float, default=7.0, help="training wall-clock budget (excludes data loading and saving)")
    ap.add_argument("--max-steps", type=int, default=1_000_000)
    ap.add_argument("--tokens-per-step", type=int, default=131072)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--draft-lr", type=float, default=4e-3)
    ap.add_argument("--mtp-weight", type=float, default=0.3)
    ap.add_argument("--limit-bytes", type=int, default=None, help="smoke tests: read only this much text")
    ap.add_argument("--phases", default=None, help="e.g. 0:2048,0.8:8192,0.92:16384")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sft-examples", type=int, default=0, help="chat-task examples to mix in (0: plain pretraining, the committed model)")
    ap.add_argument("--sft-frac", type=float, default=0.3, help="fraction of a batch's rows taken from them")
    ap.add_argument("--sft-from", type=float, default=0.4, help="from this fraction of the budget on")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    torch.manual_seed(args.seed)
    torch.backends.cuda.matmul.allow_tf32 = True
    dev = "cuda"

    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(os.path.join(args.stage1, "tokenizer.json"))
    manifest = corpus.load_manifest(os.path.join(args.stage1, "manifest.json.gz"))
    data, nfiles, nbytes = tokenize_corpus(tok, manifest, "train", args.limit_bytes)
    log(f"stage2: {nfiles} files, {nbytes / 1e6:.1f} MB -> {len(data) / 1e6:.1f}M tokens ({nbytes / max(len(data), 1):.2f} chars/token) in {time.time() - t0:.0f}s")
    held, _, _ = tokenize_corpus(tok, manifest, "heldout")
    sft, sft_starts = None, None
    if args.sft_examples:
        import stage3  # its task generator (stage 3 imports this module: import here, not above)

        code = [t for _, t in corpus.read_files(manifest, split="train", kind="code")]
        if args.limit_bytes:
            code = code[:: max(1, len(code) // 1500)]
        rows, kinds, nf = stage3.build_sft(tok, code, args.sft_examples, args.seed + 7, 16384)
        sft = np.concatenate([np.append(r[0], ENDOFTEXT).astype(np.int64) for r in rows])
        sft_starts = np.cumsum([0] + [len(r[0]) + 1 for r in rows[:-1]])
        log(f"stage2: {len(rows)} chat-task examples from {nf} files, {len(sft) / 1e6:.1f}M tokens, kinds {kinds} ({time.time() - t0:.0f}s)")
    sft_t = torch.from_numpy(sft).to(dev) if sft is not None else None
    starts_t = torch.from_numpy(sft_starts).to(dev) if sft is not None else None
    data_t = torch.from_numpy(data.astype(np.int64)).to(dev)
    held_t = torch.from_numpy(held.astype(np.int64)).to(dev)
    phases = SEQ_PHASES if not args.phases else [(float(a), int(b)) for a, b in (x.split(":") for x in args.phases.split(","))]

    main_m = Qwen3MTP(MAIN).to(dev)
    draft_m = Qwen3MTP(DRAFT).to(dev)
    log(f"stage2: main {count_params(main_m) / 1e6:.2f}M params (mtp {count_params(main_m.mtp) / 1e6:.2f}M), draft {count_params(draft_m) / 1e6:.2f}M")
    opt_m = make_opt(main_m, args.lr)
    opt_d = make_opt(draft_m, args.draft_lr)
    gen = torch.Generator(device=dev).manual_seed(args.seed)

    def batch(src, L, B, sft_windows=False):
        if not sft_windows:
            off = torch.randint(0, len(src) - L - 1, (B,), device=dev, generator=gen)
        else:  # windows that begin at an example's first token (and end inside the stream)
            n = int(np.searchsorted(sft_starts, len(src) - L - 1, side="right"))
            off = starts_t[torch.randint(0, max(1, n), (B,), device=dev, generator=gen)]
        idx = off[:, None] + torch.arange(L + 1, device=dev)[None, :]
        x = src[idx]
        return x[:, :-1].contiguous(), x[:, 1:].contiguous()

    @torch.no_grad()
    def evaluate(L=2048, B=16):
        main_m.eval()
        draft_m.eval()
        g = torch.Generator(device=dev).manual_seed(123)
        off = torch.randint(0, len(held_t) - L - 1, (B,), device=dev, generator=g)
        x = held_t[off[:, None] + torch.arange(L + 1, device=dev)[None, :]]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            _, a, b = main_m.loss(x[:, :-1], x[:, 1:])
            _, c, _ = draft_m.loss(x[:, :-1], x[:, 1:])
        main_m.train()
        draft_m.train()
        return a.item(), b.item(), c.item()

    logf = open(os.path.join(args.out, "stage2_log.jsonl"), "w")
    budget = args.minutes * 60
    step, tokens = 0, 0
    start = time.time()
    p = 0.0
    last_print = 0
    while p < 1.0 and step < args.max_steps:
        p = max((time.time() - start) / budget, step / args.max_steps)
        L = seq_at(p, phases)
        B = max(1, args.tokens_per_step // L)
        lr = lr_at(p, args.lr)
        for g_ in opt_m.param_groups:
            g_["lr"] = lr
        for g_ in opt_d.param_groups:
            g_["lr"] = lr_at(p, args.draft_lr)
        ns = int(round(B * args.sft_frac)) if sft_t is not None and p >= args.sft_from else 0
        x, y = batch(data_t, L, B - ns)
        if ns:
            xs, ys = batch(sft_t, L, ns, sft_windows=True)
            x, y = torch.cat([x, xs]), torch.cat([y, ys])
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss, lm, lt = main_m.loss(x, y, args.mtp_weight)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(main_m.parameters(), 1.0)
        opt_m.step()
        opt_m.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            dl, _, _ = draft_m.loss(x, y)
        dl.backward()
        torch.nn.utils.clip_grad_norm_(draft_m.parameters(), 1.0)
        opt_d.step()
        opt_d.zero_grad(set_to_none=True)
        step += 1
        tokens += B * L
        if step % 25 == 0 or step == 1:
            rec = {"step": step, "tokens": tokens, "time": time.time() - start, "p": p, "seq": L, "sft_rows": ns, "rows": B, "lr": lr, "loss": lm.item(), "mtp_loss": lt.item(), "draft_loss": dl.item(), "grad_norm": gn.item()}
            if step % 200 == 0:
                rec["heldout_loss"], rec["heldout_mtp_loss"], rec["heldout_draft_loss"] = evaluate()
            logf.write(json.dumps(rec) + "\n")
            logf.flush()
            if time.time() - last_print > 20 or step == 1:
                last_print = time.time()
                log(f"step {step} p {p:.3f} seq {L} loss {rec['loss']:.3f} mtp {rec['mtp_loss']:.3f} draft {rec['draft_loss']:.3f} {tokens / (time.time() - start) / 1e6:.2f}M tok/s")
    train_s = time.time() - start
    h = evaluate()
    final = {"steps": step, "tokens": tokens, "train_seconds": train_s, "heldout_loss": h[0], "heldout_mtp_loss": h[1], "heldout_draft_loss": h[2], "corpus_tokens": int(len(data)), "corpus_files": nfiles, "epochs": tokens / max(len(data), 1), "sft_examples": args.sft_examples, "sft_frac": args.sft_frac, "sft_from": args.sft_from, "sft_tokens": int(len(sft_t)) if sft_t is not None else 0}
    log("stage2: " + json.dumps(final))
    logf.write(json.dumps({"final": final}) + "\n")
    logf.close()
    write_json(os.path.join(args.out, "stage2.json"), final)
    save_hf(main_m, os.path.join(args.out, "main"), args.stage1)
    save_hf(draft_m, os.path.join(args.out, "draft"), args.stage1)
    log(f"stage2: done in {time.time() - t0:.0f}s")
    if args.pack_to:
        n, parts = pack(args.out, args.pack_to, "stage2")
        log(f"stage2: packed {n / 1e6:.1f} MB into {parts} parts")


if __name__ == "__main__":
    main()
