#!/usr/bin/env python3
"""Stage 1: corpus selection + byte-level BPE tokenizer.

    python3 tools/train/stage1.py --out DIR [--pack-to $OUT]

Writes DIR/manifest.json.gz (every selected file: path, sha256, split, package),
DIR/tokenizer.json, DIR/tokenizer_config.json (Qwen3 chat template), DIR/stage1.json
(statistics).  Needs the `tokenizers` library.  A few minutes on 16 cores.
"""
import argparse
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus  # noqa: E402
from common import CODE_PRETOKENIZE_REGEX, NOT_SPECIAL, PRETOKENIZE_REGEX, SPECIAL_TOKENS, VOCAB_SIZE, log, pack, tokenizer_config, write_json  # noqa: E402


SPLIT_PATTERNS = {"qwen": PRETOKENIZE_REGEX, "code": CODE_PRETOKENIZE_REGEX}


def train_tokenizer(texts, vocab_size, regex=PRETOKENIZE_REGEX):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    # Qwen3 marks <think>, <tool_call>, ... as added but not special; and the
    # post-processor is a plain ByteLevel one (no BOS added).
    d = json.loads(tok.to_str())
    for a in d["added_tokens"]:
        a["special"] = a["content"] not in NOT_SPECIAL
        a["normalized"] = False
    d["post_processor"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    return Tokenizer.from_str(json.dumps(d)), d


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--pack-to", default=None, help="also tar DIR into parts here (the device tool's $OUT)")
    ap.add_argument("--max-per-package", type=int, default=12_000_000)
    ap.add_argument("--max-total", type=int, default=450_000_000)
    ap.add_argument("--tokenizer-sample-bytes", type=int, default=50_000_000)
    ap.add_argument("--vocab", type=int, default=VOCAB_SIZE)
    ap.add_argument("--pretokenize", choices=sorted(SPLIT_PATTERNS), default="qwen", help="split pattern: Qwen3's (the committed model) or common.CODE_PRETOKENIZE_REGEX")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()

    m = corpus.select(args.max_per_package, args.max_total, log=log)
    corpus.save_manifest(m, os.path.join(args.out, "manifest.json.gz"))
    s = m["summary"]
    log(f"stage1: {s['files']} files, {s['bytes'] / 1e6:.1f} MB (code {s['code_bytes'] / 1e6:.1f}, doc {s['doc_bytes'] / 1e6:.1f}), held out {s['heldout_files']}, {time.time() - t0:.0f}s")

    # tokenizer sample: a fixed pseudo-random subset of the training files
    rng = random.Random(1)
    train = [e for e in m["files"] if e["split"] == "train"]
    rng.shuffle(train)
    sample, size = [], 0
    want = {e["path"] for e in train}
    chosen = []
    for e in train:
        if size >= args.tokenizer_sample_bytes:
            break
        chosen.append(e["path"])
        size += e["bytes"]
    chosen = set(chosen)
    for e, text in corpus.read_files({"files": [f for f in m["files"] if f["path"] in chosen]}):
        sample.append(text)
    log(f"stage1: tokenizer sample {len(sample)} files {size / 1e6:.1f} MB")
    t1 = time.time()
    tok, d = train_tokenizer(sample, args.vocab, SPLIT_PATTERNS[args.pretokenize])
    log(f"stage1: tokenizer trained, vocab {tok.get_vocab_size()} in {time.time() - t1:.0f}s")
    assert tok.get_vocab_size() == args.vocab, tok.get_vocab_size()
    for i, t in enumerate(SPECIAL_TOKENS):
        assert tok.token_to_id(t) == i, (t, tok.token_to_id(t))
    with open(os.path.join(args.out, "tokenizer.json"), "w") as f:
        json.dump(d, f, ensure_ascii=False, indent=None)
    write_json(os.path.join(args.out, "tokenizer_config.json"), tokenizer_config(), indent=2)

    # bytes per token on held-out text (compression), and a round trip check
    held = [t for _, t in corpus.read_files(m, split="heldout")][:300]
    enc = tok.encode_batch(held)
    ntok = sum(len(e.ids) for e in enc)
    nbytes = sum(len(t.encode()) for t in held)
    bad = sum(1 for t, e in zip(held, enc) if tok.decode(e.ids, skip_special_tokens=False) != t)
    chat = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>\n{}\n</tool_call><|im_end|>"
    ids = tok.encode(chat).ids
    stats = {
        "summary": s,
        "tokenizer": {"vocab": tok.get_vocab_size(), "sample_files": len(sample), "sample_bytes": size, "heldout_bytes_per_token": nbytes / max(ntok, 1), "roundtrip_failures": bad, "chat_ids": ids},
        "seconds": time.time() - t0,
    }
    write_json(os.path.join(args.out, "stage1.json"), stats)
    log(json.dumps(stats["tokenizer"]))
    log(f"stage1: done in {time.time() - t0:.0f}s")
    if args.pack_to:
        n, parts = pack(args.out, args.pack_to, "stage1")
        log(f"stage1: packed {n / 1e6:.1f} MB into {parts} parts")


if __name__ == "__main__":
    main()
