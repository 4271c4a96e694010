"""common.py - what every stage shares: special tokens, the chat template and its
renderer, model sizes, artifact packing.  Pure standard library (jinja2 optional:
only render() needs it), so the task generators can be tested without torch.
"""
import hashlib
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# ---------------------------------------------------------------- tokenizer

VOCAB_SIZE = 8192
# Trained BPE gets ids after these; order fixes their ids (0..8).
SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
]
# As in Qwen3's tokenizer.json: these four are added tokens but not "special"
# (decoding with skip_special_tokens keeps them, so parsers see them).
NOT_SPECIAL = {"<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"}
ENDOFTEXT, IM_START, IM_END = 0, 1, 2

# Qwen2/Qwen3's pre-tokenizer split pattern (digits one at a time): the committed
# model's.
PRETOKENIZE_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# An alternative for code (stage 1 --pretokenize code; tried in session 7, README):
# an identifier (letters, digits, underscores, not starting with a digit) is one
# piece with at most one leading space, and punctuation never joins it, so a name
# has exactly two token spellings (" name" and "name") whatever precedes it.  Qwen's
# pattern glues one punctuation mark to a letter run ("(self", ".old") and splits at
# underscores, so a renamed identifier is spelled differently after "(", "." or a
# space.  Digits one at a time; no English contraction rule ("'s" would split string
# literals such as 'start').
CODE_PRETOKENIZE_REGEX = r" ?[\p{L}_][\p{L}\p{N}_]*|\p{N}| ?[^\s\p{L}\p{N}_]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"

# Qwen3's chat template (system, tools in the system prompt, assistant tool calls,
# tool results as <tool_response> in a user turn, reasoning_content, enable_thinking).
CHAT_TEMPLATE = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\n\n' }}
    {%- endif %}
    {{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in content %}
                {%- set reasoning_content = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
                {%- set content = content.split('</think>')[-1].lstrip('\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}"""


def tokenizer_config():
    """tokenizer_config.json: the chat template and special tokens, loadable by
    transformers' AutoTokenizer (backed by tokenizer.json) and read by Rapid."""
    added = {}
    for i, t in enumerate(SPECIAL_TOKENS):
        added[str(i)] = {
            "content": t,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": t not in NOT_SPECIAL,
        }
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": added,
        "bos_token": None,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 32768,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": None,
    }


_ENV = None


def _jinja_env():
    """The environment transformers uses for chat templates (trim/lstrip blocks,
    loop controls, tojson without ASCII escaping)."""
    global _ENV
    if _ENV is None:
        import jinja2
        from jinja2.ext import loopcontrols
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
            return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

        def raise_exception(message):
            raise jinja2.exceptions.TemplateError(message)

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
        env.filters["tojson"] = tojson
        env.globals["raise_exception"] = raise_exception
        _ENV = env.from_string(CHAT_TEMPLATE)
    return _ENV


def render(messages, tools=None, add_generation_prompt=False, enable_thinking=True):
    kw = dict(messages=messages, add_generation_prompt=add_generation_prompt, enable_thinking=enable_thinking)
    if tools:
        kw["tools"] = tools
    return _jinja_env().render(**kw)


def split_example(messages, tools=None, thinking=False):
    """(prompt text, target text) for training on the last assistant message.
    thinking=False: the prompt ends with Qwen3's empty think block (enable_thinking
    false), the target is the answer; thinking=True: the prompt ends at
    '<|im_start|>assistant\\n' and the target starts with '<think>\\n...\\n</think>\\n\\n'.
    The target ends with '<|im_end|>' (the newline after it is not trained)."""
    assert messages[-1]["role"] == "assistant"
    full = render(messages, tools=tools)
    prompt = render(messages[:-1], tools=tools, add_generation_prompt=True, enable_thinking=thinking)
    if not full.startswith(prompt):
        raise ValueError("template: prompt is not a prefix of the conversation")
    target = full[len(prompt):]
    assert target.endswith("<|im_end|>\n"), repr(target[-40:])
    return prompt, target[:-1]


# ---------------------------------------------------------------- model sizes

# Main model: Qwen3, ~13M parameters + one MTP layer; bf16 folder ~29 MB.
MAIN = dict(
    vocab_size=VOCAB_SIZE,
    hidden_size=384,
    intermediate_size=1024,
    num_hidden_layers=6,
    num_attention_heads=6,
    num_key_value_heads=2,
    head_dim=64,
    max_position_embeddings=32768,
    rms_norm_eps=1e-6,
    rope_theta=1000000.0,
    mtp_layers=1,
)
# A scaling probe (not the shipped model): RAPID_TRAIN_MAIN='{"hidden_size": 640, ...}' in the
# environment of every stage overrides these sizes, so that the same pipeline can train a
# larger model to see whether capacity is what limits the evaluation (README, "Session 11: a scaling probe").
if os.environ.get("RAPID_TRAIN_MAIN"):
    MAIN.update(json.loads(os.environ["RAPID_TRAIN_MAIN"]))
# Draft sibling: 2 layers, ~1.5M parameters, bf16 ~3 MB.
DRAFT = dict(
    vocab_size=VOCAB_SIZE,
    hidden_size=128,
    intermediate_size=512,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=64,
    max_position_embeddings=32768,
    rms_norm_eps=1e-6,
    rope_theta=1000000.0,
    mtp_layers=0,
)


def hf_config(size):
    """config.json for Qwen3ForCausalLM (classic and transformers-5 spellings, as
    tools/fixtures/make_models.py writes them), plus mtp_num_hidden_layers for the
    MTP layer (transformers ignores both the key and the mtp.* tensors)."""
    n = size["num_hidden_layers"]
    cfg = {
        "architectures": ["Qwen3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": ENDOFTEXT,
        "dtype": "bfloat16",
        "eos_token_id": IM_END,
        "head_dim": size["head_dim"],
        "hidden_act": "silu",
        "hidden_size": size["hidden_size"],
        "initializer_range": 0.02,
        "intermediate_size": size["intermediate_size"],
        "layer_types": ["full_attention"] * n,
        "max_position_embeddings": size["max_position_embeddings"],
        "max_window_layers": n,
        "model_type": "qwen3",
        "num_attention_heads": size["num_attention_heads"],
        "num_hidden_layers": n,
        "num_key_value_heads": size["num_key_value_heads"],
        "pad_token_id": ENDOFTEXT,
        "rms_norm_eps": size["rms_norm_eps"],
        "rope_parameters": {"rope_theta": size["rope_theta"], "rope_type": "default"},
        "rope_scaling": None,
        "rope_theta": size["rope_theta"],
        "sliding_window": None,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "transformers_version": "5.17.0",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": size["vocab_size"],
    }
    if size.get("mtp_layers"):
        cfg["mtp_num_hidden_layers"] = size["mtp_layers"]
    return cfg


GENERATION_CONFIG = {
    "bos_token_id": ENDOFTEXT,
    "do_sample": False,
    "eos_token_id": [IM_END, ENDOFTEXT],
    "pad_token_id": ENDOFTEXT,
    "transformers_version": "5.17.0",
}


# ---------------------------------------------------------------- artifacts

PART_BYTES = 15 * 1024 * 1024


def pack(src_dir, out_dir, name, max_parts=6):
    """Tars src_dir into out_dir/name.tar.partNN files of <= 15 MiB each (the device
    tool returns at most 8 files of 16 MiB).  Unpack: cat name.tar.part* | tar x."""
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for root, dirs, files in os.walk(src_dir):
            dirs.sort()
            for f in sorted(files):
                p = os.path.join(root, f)
                tf.add(p, arcname=os.path.relpath(p, src_dir))
    data = buf.getvalue()
    parts = [data[i : i + PART_BYTES] for i in range(0, len(data), PART_BYTES)]
    if len(parts) > max_parts:
        raise RuntimeError(f"{name}: {len(data)} bytes need {len(parts)} parts > {max_parts}")
    os.makedirs(out_dir, exist_ok=True)
    for i, p in enumerate(parts):
        with open(os.path.join(out_dir, f"{name}.tar.part{i:02d}"), "wb") as f:
            f.write(p)
    return len(data), len(parts)


def sha256_bytes(b):
    return hashlib.sha256(b).hexdigest()


def log(*a):
    print(*a, flush=True)
    sys.stdout.flush()


def write_json(path, obj, indent=1):
    with open(path, "w") as f:
        json.dump(obj, f, indent=indent, ensure_ascii=False)
        f.write("\n")
