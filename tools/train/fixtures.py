#!/usr/bin/env python3
"""fixtures.py - reference outputs of the trained model, for Rapid's fidelity tests.

    python3 tools/train/fixtures.py MODEL_DIR OUT.json

For 10 chat prompts: the prompt token ids as rendered by transformers'
apply_chat_template (and the tokenizer), then the float32 greedy continuation from
transformers (eager attention, CPU, one thread, full recompute each step) with the
top-2 logit margin of every step.  For 3 prompts: the MTP layer's logits (float32,
this directory's model.py, whose main logits are checked against transformers'),
top-16 ids and values at every prompt position and the full logits at the last.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402

from common import MAIN, render  # noqa: E402
from tasks import TOOLS  # noqa: E402

N_GREEDY = 48

CODE = '''def mean(values):
    total = 0
    for v in values:
        total += v
    return total / len(values)


def spread(values):
    return max(values) - min(values)
'''

PROMPTS = [
    {"messages": [{"role": "user", "content": "Hello, who are you?"}]},
    {"messages": [{"role": "user", "content": "Rename `values` to `numbers` everywhere in this file and return the whole file.\n\n```python\n" + CODE + "```"}]},
    {"messages": [{"role": "user", "content": "Change the value of `RETRIES` to `5` and return the file.\n\n```python\nRETRIES = 3\nTIMEOUT = 10\n```"}]},
    {"messages": [{"role": "user", "content": 'Rename the key `name` to `title` in every object.\n\n```json\n[{"id": 1, "name": "a"}, {"id": 2, "name": "b"}]\n```'}]},
    {"messages": [{"role": "user", "content": 'Give me a JSON array of all the price values.\n\n```json\n[{"sku": "A1", "price": 3.5}, {"sku": "B2", "price": 7}]\n```'}]},
    {"messages": [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "What's the weather in Paris in celsius?"}], "tools": ["get_weather", "get_stock_price"]},
    {"messages": [{"role": "user", "content": "Convert 100 USD to EUR."}], "tools": ["convert_currency"]},
    {
        "messages": [
            {"role": "user", "content": "What's the price of NVDA?"},
            {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "get_stock_price", "arguments": {"symbol": "NVDA"}}}]},
            {"role": "tool", "content": '{"price": 123.45}'},
        ],
        "tools": ["get_stock_price"],
    },
    {"messages": [{"role": "user", "content": "Extract all email addresses from this text as a JSON array.\n\nPlease contact alice.smith@example.com about the report. cc bob.jones@test.io."}]},
    {"messages": [{"role": "user", "content": "What can you do?"}], "enable_thinking": True},
]


def conversations():
    for p in PROMPTS:
        tools = [TOOLS[n][0] for n in p.get("tools", [])] or None
        yield p["messages"], tools, p.get("enable_thinking", False)


@torch.no_grad()
def make(model_dir, out_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import model as ours

    torch.set_num_threads(8)  # the reference numbers do not depend on it beyond rounding
    tk = AutoTokenizer.from_pretrained(model_dir)
    hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager").eval()
    mine = ours.load_hf(model_dir, MAIN, "cpu").float().eval()
    im_end = tk.convert_tokens_to_ids("<|im_end|>")
    prompts = []
    mismatches = 0
    for i, (msgs, tools, think) in enumerate(conversations()):
        kw = {"tools": tools} if tools else {}
        text = tk.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, enable_thinking=think, **kw)
        if text != render(msgs, tools=tools, add_generation_prompt=True, enable_thinking=think):
            mismatches += 1
        ids = tk(text, add_special_tokens=False)["input_ids"]
        seq = list(ids)
        greedy, margins = [], []
        for _ in range(N_GREEDY):
            logits = hf(input_ids=torch.tensor([seq]), use_cache=False).logits[0, -1].float()
            top2 = torch.topk(logits, 2)
            tok = int(top2.indices[0])
            greedy.append(tok)
            margins.append(float(top2.values[0] - top2.values[1]))
            seq.append(tok)
            if tok == im_end:
                break
        rec = {"messages": msgs, "tools": tools, "enable_thinking": think, "prompt_text": text, "prompt_ids": ids, "greedy": greedy, "top2_margin": margins, "greedy_text": tk.decode(greedy)}
        if i in (1, 3, 5):  # MTP logits over the prompt
            x = torch.tensor([ids])
            main_logits, mtp_logits = mine(x)
            ref = hf(input_ids=x, use_cache=False).logits.float()
            rec["main_vs_transformers_max_abs"] = float((main_logits - ref).abs().max())
            t16 = torch.topk(mtp_logits[0], 16, dim=-1)
            rec["mtp"] = {
                "rows": "row t combines h[t] (after model.norm) and embed(prompt_ids[t+1]) and predicts token t+2",
                "argmax": mtp_logits[0].argmax(-1).tolist(),
                "top16_ids": t16.indices.tolist(),
                "top16_logits": t16.values.tolist(),
                "last_row_logits": [float(v) for v in mtp_logits[0, -1]],
            }
        prompts.append(rec)
        print(f"fixture {i}: {len(ids)} prompt tokens -> {tk.decode(greedy)!r}", flush=True)
    doc = {
        "model": os.path.basename(os.path.normpath(model_dir)),
        "reference": "transformers AutoModelForCausalLM, float32, eager attention, CPU, 1 thread, full recompute per step",
        "template_mismatches_vs_tools_train_render": mismatches,
        "versions": {"torch": torch.__version__, "transformers": __import__("transformers").__version__},
        "n_greedy": N_GREEDY,
        "prompts": prompts,
    }
    with open(out_path, "w") as f:
        json.dump(doc, f, indent=1, ensure_ascii=False)
        f.write("\n")
    return doc


if __name__ == "__main__":
    make(sys.argv[1], sys.argv[2])
