"""tasks.py - synthetic chat tasks for fine-tuning and evaluation.  Pure standard
library; `python3 tasks.py [DIR]` prints samples made from the .py files under DIR.

Every generator takes (rng, ctx, style) and returns an example dict
{kind, messages, tools, reason} or None.  style "train" uses the training phrasings
and training files; style "eval" uses differently written phrasings (disjoint lists)
and held-out files.  Answers are canonical so greedy exact match can be checked by
one teacher-forced forward pass: code and JSON answers are one fenced block and
nothing else; tool calls are Qwen3's <tool_call> JSON with arguments in schema order.
"""
import ast
import builtins
import json
import keyword
import random
import re
import string

import phrasings

# ---------------------------------------------------------------- vocabulary

WORDS = (
    "alpha beta gamma delta item value count index total result buffer cache entry node tree graph edge "
    "path file name data record batch chunk block frame packet token stream reader writer parser builder "
    "handler manager worker task job queue stack pool limit offset size length width height depth level "
    "score weight factor ratio rate speed delay timeout retry attempt status state mode flag option config "
    "setting param key field column row table query filter mapping lookup registry store source target "
    "input output payload message event signal callback hook plugin module widget panel button label color "
    "shape point vector matrix tensor sample label user account order invoice price amount balance owner "
    "client server request response session cursor handle window range span slot bucket shard segment layer"
).split()
CITIES = "Paris London Berlin Tokyo Madrid Rome Oslo Lisbon Vienna Prague Dublin Warsaw Boston Chicago Denver Seattle Toronto Sydney Cairo Nairobi Lima Quito Seoul Osaka Mumbai Delhi Dubai Zurich Geneva Athens".split()
FIRST = "Alice Bob Carol Dave Erin Frank Grace Heidi Ivan Judy Mallory Niaj Olivia Peggy Rupert Sybil Trent Victor Walter Yara Zoe Liam Noah Emma Mia Lucas Ava Ethan Sofia Leo".split()
LAST = "Smith Jones Brown Taylor Wilson Davies Evans Thomas Roberts Walker Wright Green Hall Wood Clark Lewis Young King Baker Hill".split()
COLORS = "red green blue yellow black white orange purple gray teal".split()
LANGS = "French German Spanish Italian Japanese Portuguese Dutch Swedish Polish Korean".split()
CURRENCIES = "USD EUR GBP JPY CHF CAD AUD SEK NOK CNY".split()
UNITS = ["celsius", "fahrenheit"]
DOMAINS = "example.com mail.org corp.net test.io acme.dev".split()
BUILTIN_NAMES = set(dir(builtins)) | set(keyword.kwlist) | {"self", "cls", "args", "kwargs", "True", "False", "None"}
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def words_re(name):
    return re.compile(r"(?<![A-Za-z0-9_])" + re.escape(name) + r"(?![A-Za-z0-9_])")


def new_identifier(rng, old, forbidden_text):
    for _ in range(50):
        n = rng.choice([1, 2, 2, 3])
        ws = [rng.choice(WORDS) for _ in range(n)]
        if old[:1].isupper() and not old.isupper():
            new = "".join(w.capitalize() for w in ws)
        elif old.isupper() and len(old) > 1:
            new = "_".join(w.upper() for w in ws)
        else:
            new = "_".join(ws)
            if old.startswith("_"):
                new = "_" + new
        if new != old and new not in forbidden_text and new not in BUILTIN_NAMES:
            return new
    return None


# ---------------------------------------------------------------- files


class Files:
    """Python files usable for tasks: parseable, no code fences inside, tabs expanded."""

    def __init__(self, texts, min_lines=50, max_lines=250):
        self.items = []
        for t in texts:
            if "```" in t or "\t" in t or "\r" in t:
                continue
            t = t.rstrip("\n")
            n = t.count("\n") + 1
            if n < min_lines or n > max_lines:
                continue
            try:
                tree = ast.parse(t)
            except Exception:
                continue
            self.items.append((t, tree))
        self.vocab = sorted({m for t, _ in self.items[:2000] for m in IDENT.findall(t) if 4 <= len(m) <= 18 and m.islower() and m not in BUILTIN_NAMES})

    def pick(self, rng, lo=None, hi=None):
        for _ in range(30):
            t, tree = rng.choice(self.items)
            n = t.count("\n") + 1
            if (lo is None or n >= lo) and (hi is None or n <= hi):
                return t, tree
        return None, None

    def words(self, rng, k):
        pool = self.vocab if len(self.vocab) > 50 else WORDS
        return [rng.choice(pool) for _ in range(k)]


def fence(code, lang="python"):
    return f"```{lang}\n{code}\n```"


def with_code(rng, instruction, code, style, lang="python"):
    tags = ["python", "py", ""] if style == "train" else ["python"]
    block = fence(code, rng.choice(tags) if lang == "python" else lang)
    layouts = [
        "{i}\n\n{b}",
        "{b}\n\n{i}",
        "{i}\n{b}",
        "Here is my file:\n\n{b}\n\n{i}",
        "{i}\n\nFile:\n{b}",
        "Code:\n{b}\n\n{i}",
        "{i}\n\nHere's the file:\n\n{b}",
        "Instruction: {i}\n\n{b}",
        "{b}\n\nInstructions: {i}",
        "I have this file.\n\n{b}\n\n{i}",
        "{b}\n{i}",
    ] if style == "train" else ["{i}\n\n{b}", "{b}\n{i}", "Below is a Python module.\n\n{b}\n\nTask: {i}"]
    return rng.choice(layouts).format(i=instruction, b=block)


def vary(rng, s, style):
    """Users' surface variation: lowercase start, missing final period."""
    if style == "train":
        if rng.random() < 0.2:
            s = s[0].lower() + s[1:]
        if rng.random() < 0.2 and s.endswith("."):
            s = s[:-1]
    return s


# ---------------------------------------------------------------- rename

RENAME_TRAIN = [
    "Rename `{old}` to `{new}` everywhere in this file and return the whole file.",
    "Please rename {old} to {new} in the following code and return the full file.",
    "Can you rename the identifier `{old}` to `{new}`? Return the complete updated file.",
    "Replace every occurrence of `{old}` with `{new}` in this file. Give me the entire file back.",
    "`{old}` should be called `{new}`. Update the file and send back all of it.",
    "Refactor: rename `{old}` to `{new}` throughout. Output the whole file.",
    "I want `{old}` renamed to `{new}` across the whole file. Please return the full updated file.",
    "rename {old} -> {new}, whole file please",
    "Rename {old} to {new}.",
    "Change the name `{old}` to `{new}` in all places and show the whole file.",
    "Please do a find-and-replace of the name `{old}` with `{new}` and return the file.",
    "Rename the symbol {old} to {new} in this code. Return everything, not just the changed lines.",
]
RENAME_EVAL = [
    "In the code below, every occurrence of `{old}` should become `{new}`. Give me back the complete file.",
    "Could you change the name {old} to {new} throughout this module? I need the full source back.",
    "Swap out the name `{old}` for `{new}` across the entire file and show me the result in full.",
    "Update this file so that `{old}` is named `{new}` instead. Reply with the whole file.",
    "Make `{old}` into `{new}` everywhere below; return all the code.",
]


def rename_candidates(text, tree):
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    out = []
    for n in sorted(names):
        if len(n) < 3 or n in BUILTIN_NAMES or (n.startswith("__") and n.endswith("__")):
            continue
        c = len(words_re(n).findall(text))
        if c >= 2:
            out.append((n, c))
    return out


def scramble(rng, text, tree, keep=()):
    """A training file made new: 3-8 of its own identifiers renamed consistently.

    The training files were also pretraining text (several epochs), so the model can
    write them back from memory instead of copying them from the prompt; on held-out
    files it then makes copy errors. Renaming some identifiers gives text it has never
    seen, so only copying reproduces it. The file stays valid Python; line numbers do
    not change. Names in `keep` are left alone."""
    cands = [n for n, _ in rename_candidates(text, tree) if n not in keep]
    for old in rng.sample(cands, min(len(cands), rng.randint(3, 8))):
        new = new_identifier(rng, old, text)
        if new and not any(new == k for k in keep):
            text = words_re(old).sub(new, text)
    return text


def task_rename(rng, ctx, style):
    lo, hi = (50, 250) if style == "train" else (120, 180)
    text, tree = ctx.pick(rng, lo, hi)
    if text is None:
        return None
    cands = rename_candidates(text, tree)
    if not cands:
        return None
    old, _ = rng.choice(cands)
    if style == "train" and rng.random() < 0.7:
        text = scramble(rng, text, tree, keep=(old,))
    new = new_identifier(rng, old, text)
    if not new:
        return None
    out = words_re(old).sub(new, text)
    if style == "train" and rng.random() < 0.75:
        inst = phrasings.train(rng, "rename", ("o", "n"), o=old, n=new)
    else:
        inst = vary(rng, rng.choice(RENAME_TRAIN if style == "train" else RENAME_EVAL).format(old=old, new=new), style)
    return {
        "kind": "rename",
        "messages": [{"role": "user", "content": with_code(rng, inst, text, style)}, {"role": "assistant", "content": fence(out)}],
        "reason": f"The user wants `{old}` renamed to `{new}` everywhere, so I replace every occurrence and return the whole file.",
    }


# ---------------------------------------------------------------- edits

ASSIGN = re.compile(r"^([ ]*)([A-Za-z_][A-Za-z0-9_]*) = (-?\d+|-?\d+\.\d+|'[^'\\\n]*'|\"[^\"\\\n]*\")$")
VALUE_TRAIN = [
    "Change the value of `{name}` to `{val}` and return the file.",
    "Please set {name} to {val} and give me back the whole file.",
    "Update `{name}` so it is {val}. Return the full file.",
    "can you change {name} = {old} to {name} = {val}? full file please",
    "Set `{name}` to `{val}` instead of `{old}`. Output the complete file.",
    "I need `{name}` to be {val}. Please edit the file and return all of it.",
]
VALUE_EVAL = [
    "Modify the assignment of {name} so its value becomes {val}; send the entire file back.",
    "The constant `{name}` is wrong: it must be {val}, not {old}. Return the corrected file in full.",
]
IMPORT_TRAIN = [
    "Add `import {mod}` after the existing imports and return the whole file.",
    "Please add an import of {mod} (after the other imports). Return the full file.",
    "Insert the line `import {mod}` below the last import. Give me the entire file.",
    "add import {mod} to this file, return the complete file",
]
IMPORT_EVAL = ["This module also needs `import {mod}`; put it right after the current imports and show the full file."]
COMMENT_TRAIN = [
    "Add the comment `# {text}` on the line above `def {fn}`. Return the whole file.",
    "Please put a comment `# {text}` right above the definition of {fn} and give me back the full file.",
    "Insert `# {text}` as a comment just before the function `{fn}`. Return the complete file.",
]
COMMENT_EVAL = ["Above the line that defines {fn}, add a comment saying `# {text}`. I need the whole file back."]
MODULES = "os sys re json math time random logging pathlib itertools functools collections typing dataclasses subprocess shutil tempfile hashlib base64 struct copy heapq bisect string textwrap argparse datetime decimal fractions statistics uuid".split()


def new_value(rng, old):
    if old[0] in "'\"":
        q = old[0]
        return q + "_".join(rng.choice(WORDS) for _ in range(rng.choice([1, 2]))) + q
    if "." in old:
        return f"{rng.randint(0, 999)}.{rng.randint(0, 99)}"
    v = str(rng.choice([rng.randint(0, 10), rng.randint(10, 1000), rng.randint(1000, 100000)]))
    return v if v != old else str(int(v) + 1)


def task_value(rng, ctx, style):
    text, tree = ctx.pick(rng, 50, 250) if style == "train" else ctx.pick(rng, 80, 200)
    if text is None:
        return None
    lines = text.split("\n")
    found = [(i, m) for i, l in enumerate(lines) if (m := ASSIGN.match(l))]
    counts = {}
    for i, m in found:
        counts[m.group(2)] = counts.get(m.group(2), 0) + 1
    found = [(i, m) for i, m in found if counts[m.group(2)] == 1 and len(m.group(2)) > 1]
    if not found:
        return None
    i, m = rng.choice(found)
    ind, name, old = m.groups()
    if style == "train" and rng.random() < 0.7:
        t2 = scramble(rng, text, tree, keep=(name,))
        m2 = ASSIGN.match(t2.split("\n")[i])
        if m2 and m2.groups() == (ind, name, old):
            text, lines = t2, t2.split("\n")
    val = new_value(rng, old)
    lines[i] = f"{ind}{name} = {val}"
    if style == "train" and rng.random() < 0.75:
        inst = phrasings.train(rng, "value", ("name",), name=name, val=val, old=old)
    else:
        inst = vary(rng, rng.choice(VALUE_TRAIN if style == "train" else VALUE_EVAL).format(name=name, val=val, old=old), style)
    return {
        "kind": "edit",
        "messages": [{"role": "user", "content": with_code(rng, inst, text, style)}, {"role": "assistant", "content": fence("\n".join(lines))}],
        "reason": f"Only the assignment of `{name}` changes, to {val}; the rest of the file stays the same.",
    }


def task_import(rng, ctx, style):
    text, tree = ctx.pick(rng, 50, 250)
    if text is None:
        return None
    imps = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    if not imps:
        return None
    have = set(re.findall(r"^import (\w+)|^from (\w+)", text, re.M))
    have = {a or b for a, b in have}
    mods = [m for m in MODULES if m not in have and not re.search(r"^\s*import .*\b" + m + r"\b", text, re.M)]
    if not mods:
        return None
    mod = rng.choice(mods)
    end = max(n.end_lineno for n in imps)  # 1-based last line of the last top-level import
    lines = text.split("\n")
    lines.insert(end, f"import {mod}")
    if style == "train" and rng.random() < 0.75:
        inst = phrasings.train(rng, "import", mod=mod)
    else:
        inst = vary(rng, rng.choice(IMPORT_TRAIN if style == "train" else IMPORT_EVAL).format(mod=mod), style)
    return {
        "kind": "edit",
        "messages": [{"role": "user", "content": with_code(rng, inst, text, style)}, {"role": "assistant", "content": fence("\n".join(lines))}],
        "reason": f"I add `import {mod}` on the line after the last import and return the whole file.",
    }


def task_comment(rng, ctx, style):
    text, tree = ctx.pick(rng, 50, 250)
    if text is None:
        return None
    lines = text.split("\n")
    fns = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and not n.decorator_list]
    names = {}
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names[n.name] = names.get(n.name, 0) + 1
    fns = [n for n in fns if names[n.name] == 1]
    if not fns:
        return None
    fn = rng.choice(fns)
    i = fn.lineno - 1
    ind = lines[i][: len(lines[i]) - len(lines[i].lstrip(" "))]
    note = rng.choice(["TODO: add tests", "FIXME: handle errors", "NOTE: hot path", "TODO: document this", "deprecated", "keep in sync with the docs", "TODO: simplify"])
    lines.insert(i, f"{ind}# {note}")
    if style == "train" and rng.random() < 0.75:
        inst = phrasings.train(rng, "comment", text=note, fn=fn.name)
    else:
        inst = vary(rng, rng.choice(COMMENT_TRAIN if style == "train" else COMMENT_EVAL).format(text=note, fn=fn.name), style)
    return {
        "kind": "edit",
        "messages": [{"role": "user", "content": with_code(rng, inst, text, style)}, {"role": "assistant", "content": fence("\n".join(lines))}],
        "reason": f"I insert `# {note}` above `def {fn.name}` at the same indentation.",
    }


# ---------------------------------------------------------------- JSON


def rand_records(rng, ctx, n=None):
    n = n or rng.randint(2, 6)
    kind = rng.choice(["user", "product", "generic", "generic"])
    recs = []
    if kind == "user":
        for i in range(n):
            f, l = rng.choice(FIRST), rng.choice(LAST)
            recs.append({"id": rng.randint(1, 999), "name": f"{f} {l}", "email": f"{f.lower()}.{l.lower()}@{rng.choice(DOMAINS)}", "age": rng.randint(18, 80), "active": rng.random() < 0.5})
    elif kind == "product":
        for i in range(n):
            recs.append({"sku": "".join(rng.choice(string.ascii_uppercase) for _ in range(3)) + str(rng.randint(100, 999)), "title": " ".join(w.capitalize() for w in ctx.words(rng, 2)), "price": round(rng.uniform(1, 500), 2), "stock": rng.randint(0, 200), "color": rng.choice(COLORS)})
    else:
        keys = list(dict.fromkeys(ctx.words(rng, rng.randint(3, 5))))
        if len(keys) < 2:
            return None
        types = {k: rng.choice(["int", "str", "bool"]) for k in keys}
        keys = ["id"] + keys
        types["id"] = "int"
        for i in range(n):
            r = {}
            for k in keys:
                t = types[k]
                r[k] = rng.randint(0, 500) if t == "int" else (rng.random() < 0.5 if t == "bool" else rng.choice(ctx.words(rng, 1) + CITIES))
            recs.append(r)
    ids = [r.get("id") for r in recs]
    if "id" in recs[0] and len(set(ids)) != len(ids):
        return None
    return recs


def dump(obj, compact=False):
    return json.dumps(obj, ensure_ascii=False) if compact else json.dumps(obj, indent=2, ensure_ascii=False)


JSON_TRAIN = {
    "rename": ["Rename the key `{a}` to `{b}` in every object.", "please rename key {a} -> {b} in this JSON", "In this JSON, change the field name \"{a}\" to \"{b}\". Return the JSON.", "Rename {a} to {b} in each record and return the result."],
    "keep": ["Keep only the keys {keys} in each object.", "Drop everything except {keys} from every record.", "Return the JSON with only the fields {keys}.", "only keep {keys}"],
    "drop": ["Remove the key `{a}` from every object.", "Delete the field {a} from each record and return the JSON.", "drop \"{a}\" from all items"],
    "filter": ["Keep only the records where {a} is greater than {v}.", "Filter this list to the items with {a} > {v}.", "Return only the entries whose {a} exceeds {v}."],
    "sort": ["Sort the records by {a} in ascending order.", "Order this list by {a}, smallest first.", "sort by {a} ascending"],
    "sortdesc": ["Sort the records by {a}, largest first.", "Order the items by {a} in descending order."],
    "pluck": ["Give me a JSON array of all the {a} values.", "List every {a} as a JSON array.", "extract the {a} of each record into an array"],
    "index": ["Turn this list into an object keyed by id (as a string), without the id field inside.", "Convert the array to a dict mapping each id (string) to the rest of the record."],
    "lookup": ["What is the {a} of the record with id {v}? Answer with the JSON value.", "Find the record whose id is {v} and give me its {a} as JSON."],
    "count": ["How many records have {a} set to true? Answer as a JSON number.", "Count the entries where {a} is true (JSON number)."],
}
JSON_EVAL = {
    "rename": ["Every object below has a `{a}` property; call it `{b}` instead and give me the updated JSON."],
    "keep": ["Strip each item down to just these fields: {keys}."],
    "drop": ["I don't need `{a}` anymore - take it out of all the objects."],
    "filter": ["Which records have {a} above {v}? Return them as a JSON array."],
    "sort": ["Rearrange the array so that {a} goes from low to high."],
    "pluck": ["Collect the {a} field from each entry into a list (JSON)."],
    "lookup": ["Look up id {v} and tell me its {a}, as JSON."],
}


def task_json(rng, ctx, style):
    recs = rand_records(rng, ctx)
    if not recs:
        return None
    table = JSON_TRAIN if style == "train" else JSON_EVAL
    op = rng.choice(sorted(table))
    keys = list(recs[0])
    nums = [k for k in keys if isinstance(recs[0][k], (int, float)) and not isinstance(recs[0][k], bool) and k != "id"]
    bools = [k for k in keys if isinstance(recs[0][k], bool)]
    a = rng.choice(keys)
    fmt = {"a": a}
    if op == "rename":
        b = new_identifier(rng, "x", json.dumps(recs))
        if not b or b in keys:
            return None
        fmt["b"] = b
        out = [{(b if k == a else k): v for k, v in r.items()} for r in recs]
    elif op == "keep":
        ks = [k for k in keys if rng.random() < 0.5] or keys[:1]
        if len(ks) == len(keys):
            ks = ks[:-1]
        fmt["keys"] = ", ".join(f"`{k}`" for k in ks)
        out = [{k: r[k] for k in ks} for r in recs]
    elif op == "drop":
        out = [{k: v for k, v in r.items() if k != a} for r in recs]
    elif op == "filter":
        if not nums:
            return None
        a = rng.choice(nums)
        vals = sorted(r[a] for r in recs)
        v = vals[len(vals) // 2] if rng.random() < 0.7 else vals[0]
        v = int(v) if isinstance(v, int) else v
        fmt.update(a=a, v=v)
        out = [r for r in recs if r[a] > v]
    elif op in ("sort", "sortdesc"):
        if not nums:
            return None
        a = rng.choice(nums)
        fmt["a"] = a
        out = sorted(recs, key=lambda r: r[a], reverse=(op == "sortdesc"))
    elif op == "pluck":
        out = [r[a] for r in recs]
    elif op == "index":
        if "id" not in keys:
            return None
        out = {str(r["id"]): {k: v for k, v in r.items() if k != "id"} for r in recs}
    elif op == "lookup":
        if "id" not in keys or a == "id":
            return None
        r = rng.choice(recs)
        fmt["v"] = r["id"]
        out = r[a]
    elif op == "count":
        if not bools:
            return None
        a = rng.choice(bools)
        fmt["a"] = a
        out = sum(1 for r in recs if r[a])
    if style == "train" and rng.random() < 0.75:
        quoted = ("a", "b") if op in ("rename", "drop") else ()
        inst = phrasings.train(rng, "json:" + op, quoted, **fmt)
    else:
        inst = vary(rng, rng.choice(table[op]).format(**fmt), style)
    data = dump(recs, compact=rng.random() < 0.3)
    block = fence(data, "json")
    layouts = ["{i}\n\n{b}", "{b}\n\n{i}", "{i}\n{b}"] if style == "train" else ["{i}\n\n{b}", "Data:\n{b}\n{i}"]
    return {
        "kind": "json",
        "messages": [{"role": "user", "content": rng.choice(layouts).format(i=inst, b=block)}, {"role": "assistant", "content": fence(dump(out), "json")}],
        "reason": f"I apply the requested {op} operation to the JSON and return the result.",
    }


EXTRACT_TRAIN = [
    "List the names of the top-level functions defined in this file as a JSON array.",
    "Give me a JSON array with the names of all top-level functions in this code.",
    "Which functions does this module define at top level? Answer with a JSON list.",
]
EXTRACT_EVAL = ["Return, as a JSON array in file order, every function defined at module level here."]
EMAIL_TRAIN = ["Extract all email addresses from this text as a JSON array.", "Pull out the email addresses mentioned below and return them as JSON.", "find the emails in this message, json array please"]
EMAIL_EVAL = ["Please collect every e-mail address that appears in the note below into a JSON list."]


def task_extract(rng, ctx, style):
    if rng.random() < 0.5:
        text, tree = ctx.pick(rng, 50, 200)
        if text is None:
            return None
        names = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        if not names:
            return None
        inst = rng.choice(EXTRACT_TRAIN if style == "train" else EXTRACT_EVAL)
        return {
            "kind": "json",
            "messages": [{"role": "user", "content": with_code(rng, vary(rng, inst, style), text, style)}, {"role": "assistant", "content": fence(dump(names), "json")}],
            "reason": "I list the module-level def statements in order.",
        }
    people = [(rng.choice(FIRST), rng.choice(LAST)) for _ in range(rng.randint(1, 4))]
    emails = list(dict.fromkeys(f"{f.lower()}.{l.lower()}@{rng.choice(DOMAINS)}" for f, l in people))
    parts = []
    for e in emails:
        parts.append(rng.choice(["Please contact {e} about the {w}.", "You can reach me at {e}.", "cc {e} on the {w} thread.", "{e} owns the {w} module.", "Send the {w} report to {e} by Friday."]).format(e=e, w=rng.choice(WORDS)))
        if rng.random() < 0.5:
            parts.append(rng.choice(["Thanks!", "The deadline is next week.", "Let me know if anything is unclear.", f"The {rng.choice(WORDS)} is ready."]))
    inst = rng.choice(EMAIL_TRAIN if style == "train" else EMAIL_EVAL)
    return {
        "kind": "json",
        "messages": [{"role": "user", "content": f"{vary(rng, inst, style)}\n\n{' '.join(parts)}"}, {"role": "assistant", "content": fence(dump(emails), "json")}],
        "reason": "I collect the addresses in the order they appear.",
    }


# ---------------------------------------------------------------- tools


def _tool(name, desc, params, required=None):
    props = {k: ({"type": t, "description": d} if not isinstance(t, list) else {"type": "string", "enum": t, "description": d}) for k, (t, d) in params.items()}
    return {"type": "function", "function": {"name": name, "description": desc, "parameters": {"type": "object", "properties": props, "required": required if required is not None else list(params)}}}


def _money(rng):
    return rng.choice([rng.randint(1, 1000), rng.randint(5, 50) * 10])


TOOLS = {
    "get_weather": (
        _tool("get_weather", "Get the current weather for a city.", {"city": ("string", "City name"), "unit": (UNITS, "Temperature unit")}),
        lambda r, c: {"city": r.choice(CITIES), "unit": r.choice(UNITS)},
        ["What's the weather in {city} in {unit}?", "How warm is it in {city} right now? Use {unit}.", "weather {city} ({unit})", "Can you check the current weather in {city}, in {unit} please?"],
        ["I'm heading to {city} - what's it like outside there at the moment ({unit})?", "Tell me today's conditions in {city}, temperatures in {unit}."],
        lambda a, r: {"temperature": r.randint(-5, 35), "condition": r.choice(["sunny", "cloudy", "rainy", "windy"])},
        lambda a, res: f"It is {res['temperature']} degrees {a['unit']} and {res['condition']} in {a['city']} right now.",
    ),
    "read_file": (
        _tool("read_file", "Read a text file and return its contents.", {"path": ("string", "Path of the file")}),
        lambda r, c: {"path": r.choice(["src/", "lib/", "", "tests/", "app/"]) + r.choice(c.words(r, 1)) + r.choice([".py", ".txt", ".json", ".md"])},
        ["Read the file {path} for me.", "Show me what's in {path}.", "open {path}", "Can you read {path}?"],
        ["I'd like to see the contents of {path}.", "Print out {path} please."],
        lambda a, r: {"content": f"# {r.choice(WORDS)} module\n"},
        lambda a, res: f"The file {a['path']} contains:\n\n{fence(res['content'].rstrip(), 'text')}",
    ),
    "search_code": (
        _tool("search_code", "Search the repository for a text pattern.", {"pattern": ("string", "Text or regex to find"), "path": ("string", "Directory to search in")}),
        lambda r, c: {"pattern": r.choice(c.words(r, 1)), "path": r.choice(["src", "lib", "tests", "."])},
        ["Search for {pattern} in {path}.", "Find where `{pattern}` is used under {path}.", "grep {pattern} in {path}", "Look for occurrences of {pattern} in the {path} directory."],
        ["Which files in {path} mention {pattern}?", "Hunt down every use of `{pattern}` inside {path}."],
        lambda a, r: {"matches": [f"{a['path']}/{r.choice(WORDS)}.py:{r.randint(1, 300)}" for _ in range(r.randint(1, 3))]},
        lambda a, res: f"`{a['pattern']}` appears in: " + ", ".join(res["matches"]) + ".",
    ),
    "run_command": (
        _tool("run_command", "Run a shell command and return its output.", {"command": ("string", "The command line")}),
        lambda r, c: {"command": r.choice(["ls -la", "git status", "make test", "pytest -q", "df -h", "python3 --version", "git log --oneline -5", "uname -a"])},
        ["Run `{command}`.", "Please execute {command} and show me the output.", "run {command}", "Can you run the command `{command}`?"],
        ["What does `{command}` print on this machine?", "Go ahead and execute: {command}"],
        lambda a, r: {"exit_code": 0, "stdout": "ok"},
        lambda a, res: f"`{a['command']}` finished with exit code {res['exit_code']} and printed: {res['stdout']}",
    ),
    "convert_currency": (
        _tool("convert_currency", "Convert an amount between currencies.", {"amount": ("number", "Amount to convert"), "from_currency": ("string", "ISO code"), "to_currency": ("string", "ISO code")}),
        lambda r, c: dict(zip(["amount", "from_currency", "to_currency"], [_money(r)] + r.sample(CURRENCIES, 2))),
        ["Convert {amount} {from_currency} to {to_currency}.", "How much is {amount} {from_currency} in {to_currency}?", "{amount} {from_currency} to {to_currency}", "What do I get for {amount} {from_currency} in {to_currency}?"],
        ["If I exchange {amount} {from_currency}, how many {to_currency} is that?", "Please turn {amount} {from_currency} into {to_currency}."],
        lambda a, r: {"result": round(a["amount"] * r.uniform(0.5, 1.5), 2)},
        lambda a, res: f"{a['amount']} {a['from_currency']} is {res['result']} {a['to_currency']}.",
    ),
    "send_email": (
        _tool("send_email", "Send an email.", {"to": ("string", "Recipient address"), "subject": ("string", "Subject line"), "body": ("string", "Message text")}),
        lambda r, c: {"to": f"{r.choice(FIRST).lower()}@{r.choice(DOMAINS)}", "subject": r.choice(["Meeting", "Report", "Status update", "Lunch", "Release notes"]), "body": r.choice(["See you at 3pm.", "The build is green.", "Please review the draft.", "Thanks for your help!"])},
        ["Send an email to {to} with subject \"{subject}\" saying \"{body}\".", "Email {to}: subject {subject}, body: {body}", "Please write to {to} (subject: {subject}) and say: {body}"],
        ["Drop {to} a note titled \"{subject}\" that says \"{body}\".", "Could you mail {to}? Subject \"{subject}\", text \"{body}\"."],
        lambda a, r: {"status": "sent"},
        lambda a, res: f"Done: the email \"{a['subject']}\" was sent to {a['to']}.",
    ),
    "create_event": (
        _tool("create_event", "Create a calendar event.", {"title": ("string", "Event title"), "date": ("string", "Date as YYYY-MM-DD"), "time": ("string", "Time as HH:MM")}),
        lambda r, c: {"title": r.choice(["Standup", "Dentist", "Team lunch", "Code review", "1:1 with " + r.choice(FIRST)]), "date": f"2025-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}", "time": f"{r.randint(8, 18):02d}:{r.choice(['00', '15', '30', '45'])}"},
        ["Create an event \"{title}\" on {date} at {time}.", "Schedule {title} for {date} at {time}.", "add {title} to my calendar, {date} {time}", "Put \"{title}\" in the calendar on {date} at {time}, please."],
        ["Book {title} in my calendar for {date}, starting {time}.", "I have {title} at {time} on {date}; add it to the calendar."],
        lambda a, r: {"event_id": r.randint(1000, 9999)},
        lambda a, res: f"\"{a['title']}\" is on your calendar for {a['date']} at {a['time']} (event {res['event_id']}).",
    ),
    "get_stock_price": (
        _tool("get_stock_price", "Get the latest price of a stock.", {"symbol": ("string", "Ticker symbol")}),
        lambda r, c: {"symbol": r.choice(["AAPL", "MSFT", "GOOG", "AMZN", "NVDA", "TSLA", "IBM", "ORCL", "INTC", "AMD"])},
        ["What's the price of {symbol}?", "Get me the current {symbol} stock price.", "{symbol} price?", "How much is {symbol} trading at?"],
        ["Where is {symbol} trading today?", "Check the latest quote for {symbol}."],
        lambda a, r: {"price": round(r.uniform(10, 900), 2)},
        lambda a, res: f"{a['symbol']} is trading at {res['price']}.",
    ),
    "calculate": (
        _tool("calculate", "Evaluate an arithmetic expression.", {"expression": ("string", "The expression")}),
        lambda r, c: {"expression": f"{r.randint(2, 999)} {r.choice(['+', '-', '*', '/'])} {r.randint(2, 99)}"},
        ["Calculate {expression}.", "What is {expression}?", "compute {expression}", "Use the calculator for {expression}."],
        ["Work out {expression} for me.", "I need the value of {expression}."],
        lambda a, r: {"result": r.randint(0, 10000)},
        lambda a, res: f"{a['expression']} = {res['result']}.",
    ),
    "translate": (
        _tool("translate", "Translate text into another language.", {"text": ("string", "Text to translate"), "target_language": ("string", "Language name")}),
        lambda r, c: {"text": r.choice(["Good morning", "Where is the station?", "Thank you very much", "The meeting is at noon", "I like this song"]), "target_language": r.choice(LANGS)},
        ["Translate \"{text}\" into {target_language}.", "How do you say \"{text}\" in {target_language}?", "translate to {target_language}: {text}"],
        ["Render \"{text}\" in {target_language}, please.", "What's \"{text}\" in {target_language}?"],
        lambda a, r: {"translation": "..."},
        lambda a, res: f"In {a['target_language']}: {res['translation']}",
    ),
    "set_timer": (
        _tool("set_timer", "Start a countdown timer.", {"minutes": ("integer", "Duration in minutes"), "label": ("string", "What the timer is for")}),
        lambda r, c: {"minutes": r.randint(1, 90), "label": r.choice(["tea", "pasta", "break", "laundry", "meeting", "oven"])},
        ["Set a {minutes} minute timer for {label}.", "Start a timer: {minutes} minutes, {label}.", "timer {minutes} min {label}"],
        ["Remind me in {minutes} minutes about the {label} with a timer.", "Count down {minutes} minutes for my {label}."],
        lambda a, r: {"status": "started"},
        lambda a, res: f"Your {a['minutes']} minute {a['label']} timer has started.",
    ),
    "create_issue": (
        _tool("create_issue", "Open an issue in the bug tracker.", {"title": ("string", "Issue title"), "priority": (["low", "medium", "high"], "Priority")}),
        lambda r, c: {"title": r.choice(["Crash on startup", "Slow search", "Typo in docs", "Login fails", "Memory leak in " + r.choice(c.words(r, 1))]), "priority": r.choice(["low", "medium", "high"])},
        ["Open an issue \"{title}\" with {priority} priority.", "File a {priority} priority bug: {title}", "create issue: {title} ({priority})"],
        ["Please log a ticket called \"{title}\", priority {priority}.", "We need a {priority}-priority issue for \"{title}\"."],
        lambda a, r: {"issue": r.randint(1, 500)},
        lambda a, res: f"Opened issue #{res['issue']}: \"{a['title']}\" ({a['priority']} priority).",
    ),
}
NO_TOOL = [
    ("Hi!", "Hello! How can I help you today?"),
    ("Thanks, that's all.", "You're welcome!"),
    ("What can you do?", "I can call the tools listed above for you, or answer short questions."),
    ("Hello, who are you?", "I'm a small assistant. I can use the available tools to help you."),
]


def gen_tool_schema(rng, ctx):
    """A made-up tool (so the model learns to read schemas, not memorize them)."""
    verb = rng.choice(["get", "set", "list", "find", "update", "delete", "create", "check", "fetch", "compute"])
    noun = rng.choice(ctx.words(rng, 1) + WORDS)
    name = f"{verb}_{noun}"
    pnames = list(dict.fromkeys(ctx.words(rng, rng.randint(1, 3))))
    params = {p: (rng.choice(["string", "integer"]), p.replace("_", " ")) for p in pnames}
    schema = _tool(name, f"{verb.capitalize()} a {noun}.", params)

    def args(r, c):
        return {p: (r.randint(0, 999) if t == "integer" else r.choice(c.words(r, 1) + CITIES)) for p, (t, _) in params.items()}

    return name, schema, args


def task_tool(rng, ctx, style):
    names = sorted(TOOLS)
    mode = rng.random() if style == "train" else 0.0
    sysmsg = rng.choice([None, "You are a helpful assistant.", "You are a helpful assistant with access to tools."]) if style == "train" else "You are a helpful assistant."
    if mode < 0.55 or (style == "train" and mode < 0.8):
        synthetic = style == "train" and 0.55 <= mode < 0.8
        if synthetic:
            name, schema, argf = gen_tool_schema(rng, ctx)
            a = argf(rng, ctx)
            if not a:
                return None
            desc = ", ".join(f"{k} {v}" for k, v in a.items())
            user = rng.choice(["Call {n} with {d}.", "Please use {n} ({d}).", "Use the {n} tool: {d}", "I need {n} for {d}."]).format(n=name, d=desc)
            others = rng.sample(names, rng.randint(0, 3))
            tools = [schema] + [TOOLS[n][0] for n in others]
        else:
            name = rng.choice(names)
            schema, argf, ph_train, ph_eval, _, _ = TOOLS[name]
            a = argf(rng, ctx)
            if style == "train" and rng.random() < 0.75:
                user = phrasings.tool_request(rng, name, a)
            else:
                user = rng.choice(ph_train if style == "train" else ph_eval).format(**a)
            others = rng.sample([n for n in names if n != name], rng.randint(0, 3))
            tools = [schema] + [TOOLS[n][0] for n in others]
        rng.shuffle(tools)
        msgs = ([{"role": "system", "content": sysmsg}] if sysmsg else []) + [
            {"role": "user", "content": vary(rng, user, style)},
            {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": name, "arguments": a}}]},
        ]
        return {"kind": "tool_call", "messages": msgs, "tools": tools, "reason": f"The {name} tool answers this; I call it with the values from the request."}
    if mode < 0.95:  # answer from a tool result
        name = rng.choice(names)
        schema, argf, ph_train, _, resf, ansf = TOOLS[name]
        a = argf(rng, ctx)
        res = resf(a, rng)
        tools = [schema] + [TOOLS[n][0] for n in rng.sample([n for n in names if n != name], rng.randint(0, 2))]
        rng.shuffle(tools)
        msgs = ([{"role": "system", "content": sysmsg}] if sysmsg else []) + [
            {"role": "user", "content": phrasings.tool_request(rng, name, a) if rng.random() < 0.5 else rng.choice(ph_train).format(**a)},
            {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": name, "arguments": a}}]},
            {"role": "tool", "content": json.dumps(res, ensure_ascii=False)},
            {"role": "assistant", "content": ansf(a, res)},
        ]
        return {"kind": "tool_answer", "messages": msgs, "tools": tools, "reason": "The tool returned its result; I report it to the user."}
    q, ans = rng.choice(NO_TOOL)
    tools = [TOOLS[n][0] for n in rng.sample(names, rng.randint(1, 3))]
    msgs = ([{"role": "system", "content": sysmsg}] if sysmsg else []) + [{"role": "user", "content": q}, {"role": "assistant", "content": ans}]
    return {"kind": "chat", "messages": msgs, "tools": tools, "reason": "No tool is needed for this."}


# ---------------------------------------------------------------- explanations

EXPLAIN_TRAIN = ["What does `{fn}` do?", "Explain the function {fn} briefly.", "In one sentence, what is {fn} for?", "what does {fn} do"]
EXPLAIN_EVAL = ["Summarize the purpose of {fn} in a sentence."]
CHAT = [
    ("Who are you?", "I'm a small demonstration model trained by the Rapid project. I can do simple code edits, JSON transforms and tool calls."),
    ("Hello", "Hello! How can I help you?"),
    ("Are you a general assistant?", "No. I'm a tiny demonstration model: I handle simple file edits, JSON transforms, extraction and tool calls, but I'm not a general assistant."),
    ("What can you do?", "I can rename identifiers in a file, change values, transform and extract JSON, and call tools you describe to me."),
    ("Thanks!", "You're welcome!"),
]


def task_explain(rng, ctx, style):
    text, tree = ctx.pick(rng, 50, 250)
    if text is None:
        return None
    if rng.random() < 0.15:
        q, a = rng.choice(CHAT)
        return {"kind": "chat", "messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}], "reason": "A short reply is enough."}
    fns = []
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            d = ast.get_docstring(n)
            if d:
                first = d.strip().split("\n\n")[0].replace("\n", " ")
                first = re.split(r"(?<=\.)\s", first)[0].strip()
                if 15 <= len(first) <= 200 and first[0].isalpha():
                    fns.append((n, first))
    if not fns:
        return None
    node, first = rng.choice(fns)
    src = ast.get_source_segment(text, node)
    if not src or src.count("\n") > 60:
        return None
    ind = len(text.split("\n")[node.lineno - 1]) - len(text.split("\n")[node.lineno - 1].lstrip())
    src = "\n".join(l[ind:] if l[:ind].strip() == "" else l for l in (" " * ind + src).split("\n"))
    q = rng.choice(EXPLAIN_TRAIN if style == "train" else EXPLAIN_EVAL).format(fn=node.name)
    sentence = first[0].upper() + first[1:]
    if not sentence.endswith("."):
        sentence += "."
    ans = f"`{node.name}`: {sentence}"
    return {"kind": "explain", "messages": [{"role": "user", "content": with_code(rng, vary(rng, q, style), src, style)}, {"role": "assistant", "content": ans}], "reason": "The docstring says what it does."}


# ---------------------------------------------------------------- mixes

TRAIN_MIX = [(task_rename, 30), (task_value, 8), (task_import, 6), (task_comment, 6), (task_json, 18), (task_extract, 5), (task_tool, 22), (task_explain, 5)]


def parse_mix(spec):
    """'rename=40,json=24,...' -> a mix like TRAIN_MIX (tasks not named keep their
    default weight). Raises ValueError on an unknown task or a bad weight."""
    byname = {f.__name__[5:]: w for f, w in TRAIN_MIX}
    for part in filter(None, spec.split(",")):
        k, _, v = part.partition("=")
        if k not in byname:
            raise ValueError(f"unknown task {k!r} in --mix (tasks: {', '.join(byname)})")
        byname[k] = float(v)
        if byname[k] < 0:
            raise ValueError(f"negative weight for {k} in --mix")
    return [(f, byname[f.__name__[5:]]) for f, _ in TRAIN_MIX]


def make_examples(ctx, n, seed, style="train", mix=None):
    rng = random.Random(seed)
    mix = mix or TRAIN_MIX
    fns = [f for f, _ in mix]
    ws = [w for _, w in mix]
    out = []
    tries = 0
    while len(out) < n and tries < n * 20:
        tries += 1
        f = rng.choices(fns, ws)[0]
        try:
            ex = f(rng, ctx, style)
        except (ValueError, KeyError, IndexError, RecursionError):
            ex = None
        if ex:
            ex.setdefault("tools", None)
            out.append(ex)
    return out


def eval_sets(ctx, seed=7):
    """The evaluation prompts: written differently from the training phrasings, on
    held-out files (ctx built from held-out files)."""
    rng = random.Random(seed)

    def many(fn, n, **kw):
        res, tries = [], 0
        while len(res) < n and tries < n * 50:
            tries += 1
            ex = fn(rng, ctx, "eval")
            if ex and (not kw.get("kind") or ex["kind"] == kw["kind"]):
                res.append(ex)
        return res

    return {
        "rename": many(task_rename, 40),
        "json": many(task_json, 60),
        "tool_call": many(task_tool, 30, kind="tool_call"),
        "edit": many(task_value, 20),
    }


def check_eval_disjoint(samples=4000):
    """The evaluation phrasings never come out of the training grammars (phrasings.py).
    Returns the number of distinct training phrasings sampled."""
    pairs = []
    for t in RENAME_EVAL:
        pairs.append(("rename", t.format(old="old_name", new="new_name"), {"o": "old_name", "n": "new_name"}, ("o", "n")))
    v = {"name": "LIMIT", "val": "42", "old": "7"}
    pairs += [("value", t.format(**v), v, ("name", "val", "old")) for t in VALUE_EVAL]
    pairs += [("import", t.format(mod="json"), {"mod": "json"}, ()) for t in IMPORT_EVAL]
    c = {"text": "TODO: add tests", "fn": "parse"}
    pairs += [("comment", t.format(**c), c, ()) for t in COMMENT_EVAL]
    j = {"a": "age", "b": "years", "v": 30, "keys": "`id`, `age`"}
    for op, ts in JSON_EVAL.items():
        q = ("a", "b") if op in ("rename", "drop") else ()
        pairs += [("json:" + op, t.format(**j), {k: j[k] for k in re.findall(r"{(\w+)}", t)}, q) for t in ts]
    rng = random.Random(0)
    for name, (_, argf, _, ph_eval, _, _) in TOOLS.items():
        a = argf(rng, Files([]))
        pairs += [("tool:" + name, t.format(**a), a, ()) for t in ph_eval]
    return phrasings.check_disjoint(pairs, samples)


if __name__ == "__main__":
    import os
    import sys

    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.__file__)
    texts = []
    for dp, dn, fn in os.walk(root):
        dn.sort()
        for f in sorted(fn):
            if f.endswith(".py"):
                try:
                    texts.append(open(os.path.join(dp, f), encoding="utf-8").read())
                except Exception:
                    pass
        if len(texts) > 3000:
            break
    ctx = Files(texts)
    print(f"{len(ctx.items)} usable files, vocab {len(ctx.vocab)}")
    import time

    t = time.time()
    exs = make_examples(ctx, 2000, 1)
    print(f"2000 examples in {time.time() - t:.1f}s")
    kinds = {}
    for e in exs:
        kinds[e["kind"]] = kinds.get(e["kind"], 0) + 1
    print(kinds)
    ev = eval_sets(ctx)
    print({k: len(v) for k, v in ev.items()})
    from common import split_example

    for e in [exs[i] for i in range(0, 2000, 250)] + [ev["tool_call"][0], ev["json"][0]]:
        p, t = split_example(e["messages"], e.get("tools"), thinking=False)
        print("=" * 60, e["kind"])
        print(p[-700:])
        print("--- target:")
        print(t[:400])
