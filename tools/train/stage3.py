#!/usr/bin/env python3
"""Stage 3: supervised fine-tuning on synthetic chat tasks (main + MTP jointly, and
the draft), evaluation on held-out files, export of the final model folders, the
loss plot and the fixtures.

    python3 tools/train/stage3.py --stage1 DIR1 --stage2 DIR2 --out DIR3 [--minutes 5.5] [--pack-to $OUT]

DIR3/rapid-tiny/ (main model + MTP, HF folder), DIR3/rapid-tiny-draft/, DIR3/eval.json,
DIR3/eval.md, DIR3/loss.png, DIR3/fixtures.json, DIR3/stage3_log.jsonl.
"""
import argparse
import json
import math
import multiprocessing as mp
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import corpus  # noqa: E402
import tasks  # noqa: E402
from common import DRAFT, ENDOFTEXT, IM_END, MAIN, log, pack, split_example, write_json  # noqa: E402
from model import load_hf, save_hf, folder_bytes  # noqa: E402
from stage2 import lr_at, make_opt, tokenize_corpus  # noqa: E402

MODEL_NAME = "rapid-tiny"
BUCKETS = [512, 1024, 2048, 4096, 8192]

_CTX = None
_MIX = None


def amp(dev):
    return torch.autocast("cuda" if dev == "cuda" else "cpu", dtype=torch.bfloat16, enabled=(dev == "cuda"))


def _gen_chunk(arg):
    seed, n = arg
    rng = random.Random(seed)
    exs = tasks.make_examples(_CTX, n, seed, mix=_MIX)
    out = []
    for e in exs:
        think = rng.random() < 0.3
        msgs = e["messages"]
        if think:
            msgs = [dict(m) for m in msgs]
            msgs[-1]["reasoning_content"] = e["reason"] if rng.random() < 0.7 else ""
        try:
            p, t = split_example(msgs, e.get("tools"), thinking=think)
        except Exception:
            continue
        out.append((p, t, e["kind"]))
    return out


def edit_weights(prompt_ids, target_ids, w, n=4):
    """Loss weights for one answer's tokens, moved toward its edit points: a token
    whose n-gram (itself and the n-1 answer tokens before it) does not occur in the
    prompt cannot be produced by copying (a renamed identifier, a changed value, the
    comma that a dropped key removes) and weighs w times a copied one; the weights
    are scaled so that they sum to the number of tokens, so each answer keeps its
    share of the batch.  The first n-1 tokens, where the answer's form is decided
    (a fence, a tool call, a think block), weigh like edit points."""
    t = np.asarray(target_ids, np.int64)
    p = np.asarray(prompt_ids, np.int64)
    out = np.full(len(t), float(w), np.float32)
    if w == 1 or len(t) < n or len(p) < n:
        return np.ones(len(t), np.float32)

    def grams(a):  # a[i..i+n-1] packed into one int64 (ids < 2^13 = vocabulary size)
        g = np.zeros(len(a) - n + 1, np.int64)
        for k in range(n):
            g = (g << 13) | a[k : len(a) - n + 1 + k]
        return g

    out[n - 1 :][np.isin(grams(t), grams(p))] = 1.0
    return out * (len(t) / out.sum())


def build_sft(tok, train_texts, n, seed, max_len, mix=None, edit_weight=1.0):
    global _CTX, _MIX
    _CTX = tasks.Files(train_texts)
    _MIX = mix
    chunks = [(seed * 100003 + i, 500) for i in range(max(1, n // 500))]
    with mp.get_context("fork").Pool(min(16, os.cpu_count() or 1)) as pool:
        res = pool.map(_gen_chunk, chunks)
    rows = []
    kinds = {}
    triples = [x for r in res for x in r]
    P = tok.encode_batch([p for p, _, _ in triples])
    T = tok.encode_batch([t for _, t, _ in triples])
    for (p, t, k), pe, te in zip(triples, P, T):
        ids = pe.ids + te.ids
        if len(ids) + 1 > max_len:
            continue
        labels = [-100] * (len(pe.ids) - 1) + te.ids + [-100]
        wt = np.zeros(len(ids), np.float32)
        wt[len(pe.ids) - 1 : len(ids) - 1] = edit_weights(pe.ids, te.ids, edit_weight)
        rows.append((np.asarray(ids, np.int32), np.asarray(labels, np.int32), wt))
        kinds[k] = kinds.get(k, 0) + 1
    return rows, kinds, len(_CTX.items)


def bucketize(rows):
    b = {L: [] for L in BUCKETS}
    for r in rows:
        for L in BUCKETS:
            if len(r[0]) <= L:
                b[L].append(r)
                break
    return {L: v for L, v in b.items() if v}


def make_batch(items, L, dev):
    B = len(items)
    x = np.full((B, L), ENDOFTEXT, np.int64)
    y = np.full((B, L), -100, np.int64)
    w = np.zeros((B, L), np.float32)
    for i, (ids, lab, wt) in enumerate(items):
        x[i, : len(ids)] = ids
        y[i, : len(lab)] = lab
        w[i, : len(wt)] = wt
    return tuple(torch.from_numpy(a).to(dev, non_blocking=True) for a in (x, y, w))


# ---------------------------------------------------------------- evaluation


@torch.no_grad()
def teacher_forced_exact(model, tok, examples, dev):
    """Greedy exact match via one forward pass: the greedy answer equals the
    reference iff every reference token (and the closing <|im_end|>) is the argmax
    given the reference prefix."""
    ok, tok_acc, n_tok = 0, 0, 0
    per = []
    for e in examples:
        p, t = split_example(e["messages"], e.get("tools"), thinking=False)
        pi, ti = tok.encode(p).ids, tok.encode(t).ids
        assert ti[-1] == IM_END
        x = torch.tensor([pi + ti[:-1]], device=dev)
        with amp(dev):
            logits, _ = model(x)
        pred = logits[0, len(pi) - 1 :].argmax(-1).tolist()
        good = [a == b for a, b in zip(pred, ti)]
        ok += all(good)
        tok_acc += sum(good)
        n_tok += len(ti)
        # where it goes wrong first, and whether that token could have been copied from
        # the prompt (its 4-token context and itself occur there) or is an edit point
        bad = [i for i, g in enumerate(good) if not g]
        item = {"errors": len(bad), "tokens": len(ti)}
        if bad:
            i = bad[0]
            ctx4 = tuple(ti[max(0, i - 3) : i + 1])
            grams = {tuple(pi[j : j + len(ctx4)]) for j in range(len(pi) - len(ctx4) + 1)}
            item.update(pos=i, want=tok.decode([ti[i]]), got=tok.decode([pred[i]]), before=tok.decode(ti[max(0, i - 12) : i]), copyable=ctx4 in grams)
        per.append(item)
    return {"n": len(examples), "exact": ok, "exact_rate": ok / max(1, len(examples)), "token_acc": tok_acc / max(1, n_tok), "items": per}


@torch.no_grad()
def agreement(main_m, draft_m, held, dev, L=1024, B=32):
    g = torch.Generator(device=dev).manual_seed(99)
    off = torch.randint(0, len(held) - L - 1, (B,), device=dev, generator=g)
    x = held[off[:, None] + torch.arange(L, device=dev)[None, :]]
    with amp(dev):
        lm, lmtp = main_m(x)
        ld, _ = draft_m(x)
    am = lm.argmax(-1)  # main's prediction of x[t+1] at t
    amtp = lmtp.argmax(-1)  # MTP row t predicts x[t+2]; main's own: am[t+1]
    ad = ld.argmax(-1)
    return {
        "mtp_vs_main_top1": (amtp == am[:, 1:]).float().mean().item(),
        "mtp_vs_text_top1": (amtp[:, :-1] == x[:, 2:]).float().mean().item(),
        "draft_vs_main_top1": (ad == am).float().mean().item(),
        "main_vs_text_top1": (am[:, :-1] == x[:, 1:]).float().mean().item(),
        "positions": int(B * (L - 2)),
    }


@torch.no_grad()
def long_copy(model, held, dev, L, trials=8, cue=16, span=64):
    """Raw-text copy at context L: held-out text of L-span tokens, then a passage
    that appeared early in it; score the argmax on the passage after a cue of 16."""
    g = torch.Generator().manual_seed(L)
    hits, exact = 0, 0
    for i in range(trials):
        s = int(torch.randint(0, len(held) - L - 1, (1,), generator=g))
        ctx = held[s : s + L - span]
        a = int(torch.randint(L // 20, L // 2, (1,), generator=g))
        passage = ctx[a : a + span]
        x = torch.cat([ctx, passage])[None].to(dev)
        with amp(dev):
            logits, _ = model(x)
        pred = logits[0, L - span + cue - 1 : L - 1].argmax(-1)
        good = pred == passage[cue:].to(dev)
        hits += int(good.sum())
        exact += int(good.all())
    return {"context": L, "trials": trials, "token_acc": hits / (trials * (span - cue)), "exact": exact}


@torch.no_grad()
def check_against_transformers(folder, mine, dev):
    """Max |logit difference| between our model and transformers' Qwen3ForCausalLM
    on the saved folder (float32)."""
    from transformers import AutoModelForCausalLM

    torch.backends.cuda.matmul.allow_tf32 = False  # a float32 comparison, not tf32
    hf = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).to(dev).eval()
    x = torch.randint(0, MAIN["vocab_size"], (2, 300), generator=torch.Generator().manual_seed(5)).to(dev)
    ref = hf(input_ids=x).logits.float()
    mine = mine.float()
    out, _ = mine(x)
    d = (out - ref).abs().max().item()
    del hf
    return d, ref.abs().max().item()


def plot(stage2_log, stage3_log, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def read(p):
        rows = []
        if p and os.path.exists(p):
            for line in open(p):
                r = json.loads(line)
                if "step" in r:
                    rows.append(r)
        return rows

    a, b = read(stage2_log), read(stage3_log)
    fig, ax = plt.subplots(1, 2, figsize=(12, 4.5))
    if a:
        t = [r["tokens"] / 1e6 for r in a]
        ax[0].plot(t, [r["loss"] for r in a], label="main")
        ax[0].plot(t, [r["mtp_loss"] for r in a], label="MTP (x[t+2])")
        ax[0].plot(t, [r["draft_loss"] for r in a], label="draft")
        ht = [(r["tokens"] / 1e6, r["heldout_loss"]) for r in a if "heldout_loss" in r]
        if ht:
            ax[0].plot(*zip(*ht), "o", label="main, held-out")
        ax[0].set_xlabel("tokens (M)")
        ax[0].set_title("stage 2: pretraining")
        ax[0].set_ylim(0, 8)
        ax[0].legend()
    if b:
        s = [r["step"] for r in b]
        ax[1].plot(s, [r["loss"] for r in b], label="main")
        ax[1].plot(s, [r["mtp_loss"] for r in b], label="MTP")
        ax[1].plot(s, [r["draft_loss"] for r in b], label="draft")
        ax[1].set_xlabel("step")
        ax[1].set_title("stage 3: fine-tuning (answer tokens + replay)")
        ax[1].set_ylim(bottom=0)
        ax[1].legend()
    for x in ax:
        x.grid(alpha=0.3)
        x.set_ylabel("cross-entropy (nats)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def eval_table(ev):
    rows = [
        ("rename across a file (~150 lines), exact", f"{ev['rename']['exact']}/{ev['rename']['n']}", "≥ 80%"),
        ("JSON transform / extraction, exact", f"{ev['json']['exact']}/{ev['json']['n']}", "≥ 80%"),
        ("tool call (function + arguments), exact", f"{ev['tool_call']['exact']}/{ev['tool_call']['n']}", "≥ 27/30"),
        ("change a value in a file, exact", f"{ev['edit']['exact']}/{ev['edit']['n']}", ""),
        ("MTP top-1 = main's next-next token (code)", f"{ev['agreement']['mtp_vs_main_top1']:.1%}", "≥ 50%"),
        ("draft top-1 = main's top-1 (code)", f"{ev['agreement']['draft_vs_main_top1']:.1%}", ""),
        ("long-context copy at 8k, token accuracy", f"{ev['copy_8k']['token_acc']:.1%} ({ev['copy_8k']['exact']}/{ev['copy_8k']['trials']} exact)", ""),
        ("long-context copy at 16k, token accuracy", f"{ev['copy_16k']['token_acc']:.1%} ({ev['copy_16k']['exact']}/{ev['copy_16k']['trials']} exact)", ""),
    ]
    s = "| task | result | target |\n| --- | --- | --- |\n"
    for r in rows:
        s += f"| {r[0]} | {r[1]} | {r[2]} |\n"
    return s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stage1", required=True)
    ap.add_argument("--stage2", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--pack-to", default=None)
    ap.add_argument("--minutes", type=float, default=5.0)
    ap.add_argument("--max-steps", type=int, default=1_000_000)
    ap.add_argument("--examples", type=int, default=60000)
    ap.add_argument("--tokens-per-step", type=int, default=65536)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--draft-lr", type=float, default=2e-3)
    ap.add_argument("--replay", type=float, default=0.2, help="fraction of steps on raw pretraining text")
    ap.add_argument("--mtp-weight", type=float, default=0.3)
    ap.add_argument("--max-len", type=int, default=8192)
    ap.add_argument("--limit-bytes", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--mix", default="", help="task weights, e.g. rename=40,json=24 (tasks.TRAIN_MIX for the defaults)")
    ap.add_argument("--task-files", type=int, default=0, help="generate tasks from at most this many training files (0 = all)")
    ap.add_argument("--edit-weight", type=float, default=1.0, help="loss weight of answer tokens a copy of the prompt cannot produce, relative to copied ones (1 = plain mean)")
    ap.add_argument("--skip-fixtures", action="store_true")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    dev = "cuda"
    torch.manual_seed(args.seed)
    torch.backends.cuda.matmul.allow_tf32 = True

    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(os.path.join(args.stage1, "tokenizer.json"))
    manifest = corpus.load_manifest(os.path.join(args.stage1, "manifest.json.gz"))

    # tasks from training files only; evaluation prompts from held-out files
    train_code = [t for _, t in corpus.read_files(manifest, split="train", kind="code")]
    held_code = [t for _, t in corpus.read_files(manifest, split="heldout", kind="code")]
    # task generation parses every training file (~20 s on the H200 machine's CPU);
    # --task-files N takes an evenly spaced subset (the smoke test uses 1500)
    cap = args.task_files or (1500 if args.limit_bytes else 0)
    if cap:
        train_code = train_code[:: max(1, len(train_code) // cap)]
    log(f"stage3: training phrasings never produce an evaluation phrasing ({tasks.check_eval_disjoint()} distinct phrasings sampled)")
    rows, kinds, nfiles = build_sft(tok, train_code, args.examples, args.seed + 1, args.max_len, tasks.parse_mix(args.mix), args.edit_weight)
    buckets = bucketize(rows)
    sft_tokens = sum(len(r[0]) for r in rows)
    if args.edit_weight != 1:
        edits = sum(int((r[2] > 1.0001).sum()) for r in rows)
        answer = sum(int((r[1] != -100).sum()) for r in rows)
        log(f"stage3: {edits} of {answer} answer tokens are up-weighted edit points (weight {args.edit_weight:g} relative to copied ones)")
    log(f"stage3: {len(rows)} SFT rows from {nfiles} files, {sft_tokens / 1e6:.1f}M tokens, kinds {kinds}, buckets { {L: len(v) for L, v in buckets.items()} } ({time.time() - t0:.0f}s)")
    eval_ctx = tasks.Files(held_code)
    evs = tasks.eval_sets(eval_ctx)
    log(f"stage3: eval sets from {len(eval_ctx.items)} held-out files: { {k: len(v) for k, v in evs.items()} }")

    replay, _, _ = tokenize_corpus(tok, manifest, "train", limit_bytes=args.limit_bytes or 60_000_000, every=5)
    held, _, _ = tokenize_corpus(tok, manifest, "heldout")
    replay_t = torch.from_numpy(replay.astype(np.int64)).to(dev)
    held_t = torch.from_numpy(held.astype(np.int64)).to(dev)
    log(f"stage3: replay {len(replay) / 1e6:.1f}M tokens, held-out {len(held) / 1e6:.2f}M tokens ({time.time() - t0:.0f}s)")

    main_m = load_hf(os.path.join(args.stage2, "main"), MAIN, dev)
    draft_m = load_hf(os.path.join(args.stage2, "draft"), DRAFT, dev)
    opt_m = make_opt(main_m, args.lr, wd=0.0)
    opt_d = make_opt(draft_m, args.draft_lr, wd=0.0)

    rng = random.Random(args.seed)
    weights = {L: len(v) * L for L, v in buckets.items()}  # by tokens
    Ls = sorted(weights)
    order = {L: list(range(len(buckets[L]))) for L in Ls}
    pos = {L: len(order[L]) for L in Ls}

    def sft_batch():
        L = rng.choices(Ls, [weights[k] for k in Ls])[0]
        B = max(1, args.tokens_per_step // L)
        items = []
        for _ in range(B):
            if pos[L] >= len(order[L]):
                rng.shuffle(order[L])
                pos[L] = 0
            items.append(buckets[L][order[L][pos[L]]])
            pos[L] += 1
        return make_batch(items, L, dev)

    def replay_batch(L=2048):
        B = max(1, args.tokens_per_step // L)
        off = torch.randint(0, len(replay_t) - L - 1, (B,), device=dev)
        x = replay_t[off[:, None] + torch.arange(L + 1, device=dev)[None, :]]
        return x[:, :-1].contiguous(), x[:, 1:].contiguous(), None

    logf = open(os.path.join(args.out, "stage3_log.jsonl"), "w")
    budget = args.minutes * 60
    start = time.time()
    step, p, last = 0, 0.0, 0
    while p < 1.0 and step < args.max_steps:
        p = max((time.time() - start) / budget, step / args.max_steps)
        is_replay = rng.random() < args.replay
        x, y, w = replay_batch() if is_replay else sft_batch()
        lr = lr_at(p, args.lr, warm=0.03, floor=0.0)
        for g_ in opt_m.param_groups:
            g_["lr"] = lr
        for g_ in opt_d.param_groups:
            g_["lr"] = lr_at(p, args.draft_lr, warm=0.03, floor=0.0)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss, lm, lt = main_m.loss(x, y, args.mtp_weight, w)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(main_m.parameters(), 1.0)
        opt_m.step()
        opt_m.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            dl, _, _ = draft_m.loss(x, y, weights=w)
        dl.backward()
        torch.nn.utils.clip_grad_norm_(draft_m.parameters(), 1.0)
        opt_d.step()
        opt_d.zero_grad(set_to_none=True)
        step += 1
        if not is_replay and (step % 10 == 0 or step < 3):
            rec = {"step": step, "time": time.time() - start, "p": p, "seq": x.shape[1], "lr": lr, "loss": lm.item(), "mtp_loss": lt.item(), "draft_loss": dl.item()}
            logf.write(json.dumps(rec) + "\n")
            logf.flush()
            if time.time() - last > 20:
                last = time.time()
                log(f"step {step} p {p:.3f} seq {rec['seq']} loss {rec['loss']:.3f} mtp {rec['mtp_loss']:.3f} draft {rec['draft_loss']:.3f}")
    train_s = time.time() - start
    logf.close()
    main_m.eval()
    draft_m.eval()

    # ------------------------------------------------------------ evaluation
    te = time.time()
    ev = {k: teacher_forced_exact(main_m, tok, v, dev) for k, v in evs.items()}
    ev["draft_tool_call"] = teacher_forced_exact(draft_m, tok, evs["tool_call"], dev)
    ev["agreement"] = agreement(main_m, draft_m, held_t, dev)
    ev["copy_8k"] = long_copy(main_m, held_t, dev, 8192)
    ev["copy_16k"] = long_copy(main_m, held_t, dev, 16384)
    ev["train"] = {"steps": step, "seconds": train_s, "sft_rows": len(rows), "sft_tokens": sft_tokens, "kinds": kinds, "edit_weight": args.edit_weight}
    ev["eval_seconds"] = time.time() - te
    log("stage3 eval: " + json.dumps({k: ({a: b for a, b in v.items() if a != "items"} if isinstance(v, dict) else v) for k, v in ev.items()}))
    for k in ("rename", "json", "tool_call", "edit"):
        wrong = [it for it in ev[k]["items"] if it["errors"]]
        log(f"stage3 eval {k}: {len(wrong)} wrong, first error copyable from the prompt in {sum(it['copyable'] for it in wrong)}; "
            + "; ".join(f"{it['before'][-30:]!r}: {it['want']!r} -> {it['got']!r}" for it in wrong[:6]))

    # ------------------------------------------------------------ export
    table = eval_table(ev)
    tmpl = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "MODEL_README.md")).read()
    s2 = json.load(open(os.path.join(args.stage2, "stage2.json"))) if os.path.exists(os.path.join(args.stage2, "stage2.json")) else {}
    readme = tmpl.replace("{{EVAL_TABLE}}", table).replace("{{STAGE2}}", json.dumps(s2)).replace("{{STAGE3}}", json.dumps(ev["train"]))
    mdir = os.path.join(args.out, MODEL_NAME)
    ddir = os.path.join(args.out, MODEL_NAME + "-draft")
    save_hf(main_m, mdir, args.stage1, readme=readme)
    save_hf(draft_m, ddir, args.stage1, readme=open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "DRAFT_README.md")).read())
    ev["folder_bytes"] = {MODEL_NAME: folder_bytes(mdir), MODEL_NAME + "-draft": folder_bytes(ddir)}
    ev["max_file_bytes"] = max(os.path.getsize(os.path.join(mdir, f)) for f in os.listdir(mdir))
    d, scale = check_against_transformers(mdir, load_hf(mdir, MAIN, dev).eval(), dev)
    ev["transformers_max_abs_logit_diff"] = d
    ev["transformers_logit_scale"] = scale
    write_json(os.path.join(args.out, "eval.json"), ev)
    with open(os.path.join(args.out, "eval.md"), "w") as f:
        f.write(table)
    try:
        plot(os.path.join(args.stage2, "stage2_log.jsonl"), os.path.join(args.out, "stage3_log.jsonl"), os.path.join(args.out, "loss.png"))
    except Exception as e:  # the plot is a report, not a reason to lose the model
        log(f"stage3: plot failed: {e!r}")
    log(table)
    log(f"stage3: folders {ev['folder_bytes']}, largest file {ev['max_file_bytes']}, |ours - transformers| {d:.2e} (logits up to {scale:.1f})")

    if not args.skip_fixtures:
        import fixtures

        fixtures.make(mdir, os.path.join(args.out, "fixtures.json"))
    log(f"stage3: done in {time.time() - t0:.0f}s")
    if args.pack_to:
        n, parts = pack(args.out, args.pack_to, "stage3")
        log(f"stage3: packed {n / 1e6:.1f} MB into {parts} parts")


if __name__ == "__main__":
    main()
