"""Training phrasings for the synthetic tasks: many ways users ask for one thing.

A tiny model learns an instruction from the words it has seen used for it. A dozen
fixed sentences per task teach it those sentences, not the task: on the held-out
evaluation prompts (worded differently, tasks.*_EVAL) it copied the input back
unchanged. So each task here has a small grammar, and compose() builds a request
from its parts:

  intent     a verb phrase in the base form, with slots ("rename {o} to {n}")
  scope      appended to the intent ("everywhere", "in each record")
  ask        how the verb phrase is put: plain or polite imperative, a question
             ("could you ... ?"), a wish ("I need you to ...")
  statement  whole sentences that are not built on a verb ("{o} should be {n}")
  tail       what to give back ("Return the whole file.") as a clause or a sentence

Identifiers get one quoting style per request (`x`, x, "x", 'x'); then the users'
surface variation: all lowercase, no final period.

The evaluation phrasings are written separately and must never come out of these
grammars: check_disjoint() samples the grammars and asserts it (run by tasks.py's
self-check and by stage 3 before training).

Standard library only.
"""

import re

PLAIN = ["", "", "", "Please ", "please ", "Now ", "OK, ", "Hey, ", "Quick one: ", "Next, ", "Task: ", "Kindly "]
QUESTION = ["Can you ", "Could you ", "Would you ", "Can you please ", "Could you please ", "Will you ", "can you ", "could you "]
QWORDS = {"what", "what's", "how", "which", "where", "who", "is", "are", "can", "does"}
WISH = ["I need you to ", "I'd like you to ", "I want you to ", "Help me ", "I need to ", "We need to ", "Your job: ", "Let's "]


class Grammar:
    def __init__(self, intents, scopes=("",), statements=(), tails=("",), and_tails=()):
        self.intents = list(intents)
        self.scopes = list(scopes)
        self.statements = list(statements)
        self.tails = list(tails)
        self.and_tails = list(and_tails)


def quote_style(rng):
    return rng.choice(["`{}`", "`{}`", "`{}`", "{}", "{}", '"{}"', "'{}'"])


def _cap(t):
    """Capitalize a template's first letter unless it starts with a slot."""
    return t[0].upper() + t[1:] if t[:1].isalpha() else t


def compose(rng, g, quoted=(), **slots):
    """One request from grammar g. Slots named in `quoted` get the request's quoting
    style; the others are inserted as they are."""
    q = quote_style(rng)
    vals = {k: (q.format(v) if k in quoted else v) for k, v in slots.items()}
    if g.statements and rng.random() < 0.3:
        s = rng.choice(g.statements)
        end = "?" if s.split(" ", 1)[0].lower() in QWORDS else "."
    else:
        body = rng.choice(g.intents) + rng.choice(g.scopes)
        r = rng.random()
        if r < 0.45:
            s, end = rng.choice(PLAIN) + body, "."
        elif r < 0.75:
            s, end = rng.choice(QUESTION) + body, "?"
        else:
            s, end = rng.choice(WISH) + body, "."
        if g.and_tails and rng.random() < 0.35:
            s += rng.choice(g.and_tails)
    s = _cap(s).format(**vals) + end
    tail = rng.choice(g.tails)
    if tail:
        s = s + " " + tail.format(**vals) if rng.random() < 0.85 else tail.format(**vals) + " " + s
    if rng.random() < 0.15:
        s = _lower_outside(s, [str(v) for v in vals.values()])
    if rng.random() < 0.2 and s.endswith("."):
        s = s[:-1]
    return s


def _lower_outside(s, keep):
    """Lowercase s except the given substrings (slot values keep their case)."""
    keep = [k for k in keep if k]
    if not keep:
        return s.lower()
    pat = re.compile("|".join(re.escape(k) for k in sorted(set(keep), key=len, reverse=True)))
    out, pos = [], 0
    for m in pat.finditer(s):
        out.append(s[pos : m.start()].lower())
        out.append(m.group(0))
        pos = m.end()
    out.append(s[pos:].lower())
    return "".join(out)


# ---------------------------------------------------------------- whole-file edits

FILE_TAILS = [
    "", "Return the whole file.", "Give me the full file.", "Send back the complete file.", "I need the entire file back.",
    "Show me all of it.", "Reply with the full updated module.", "Output the full source.", "Full file please.",
    "Return everything, not only the changed lines.", "Just the file, no explanation.", "Print the whole updated file.",
    "Give the complete code.", "Return the full code in one block.", "Answer with the updated file.", "The whole file, please.",
    "Don't leave anything out.", "Keep everything else the same.", "Leave the rest unchanged and return all of it.",
]
FILE_AND = [" and return the whole file", " and give me the full file back", " and show me the result", " and send the updated file",
            " and return the complete code", " and output everything", " and paste the full file back"]

RENAME = Grammar(
    intents=[
        "rename {o} to {n}", "rename the identifier {o} to {n}", "rename the variable {o} to {n}", "rename {o} as {n}",
        "change the name {o} to {n}", "change {o} to {n}", "change every {o} to {n}", "replace {o} with {n}",
        "replace every occurrence of {o} with {n}", "replace all uses of {o} with {n}", "replace the name {o} by {n}",
        "call {o} {n} instead", "use the name {n} instead of {o}", "use {n} in place of {o}", "switch {o} to {n}",
        "turn {o} into {n}", "refactor {o} into {n}", "rename symbol {o} -> {n}", "do a find-and-replace of {o} with {n}",
        "give {o} the new name {n}", "substitute {n} for {o}", "update the name {o} to {n}", "rename all {o} to {n}",
        "change all occurrences of {o} to {n}", "rename references to {o} so they say {n}",
    ],
    scopes=["", "", " everywhere", " throughout", " throughout the file", " across the file", " in the whole file",
            " in every place", " wherever it appears", " in this module", " in the code", " in the code below",
            " in all places", " across the entire module", " in this file", " consistently"],
    statements=[
        "{o} should be called {n}", "{o} should be renamed to {n}", "I'd like {o} to be named {n}", "{o} needs a better name: {n}",
        "the name {o} is confusing, use {n}", "{o} -> {n}", "{o} => {n} everywhere", "please make it {n} instead of {o}",
        "we renamed {o} to {n}; update this file", "new name for {o}: {n}", "rename: {o} to {n}", "{o} is now called {n}",
        "I prefer {n} over {o} as a name", "everything called {o} must be called {n}",
    ],
    tails=FILE_TAILS, and_tails=FILE_AND,
)

VALUE = Grammar(
    intents=[
        "set {name} to {val}", "change the value of {name} to {val}", "change {name} from {old} to {val}", "make {name} equal {val}",
        "update {name} to {val}", "assign {val} to {name}", "replace the value of {name} with {val}", "change {name} = {old} to {name} = {val}",
        "bump {name} to {val}", "give {name} the value {val}", "edit the assignment to {name} so it is {val}", "put {val} in {name}",
        "switch {name} to {val}", "set the constant {name} to {val}", "use {val} for {name}",
    ],
    scopes=["", "", " in this file", " in the code", " instead of {old}", " (it is {old} now)"],
    statements=["{name} should be {val}", "{name} must be {val} rather than {old}", "the value of {name} is wrong, it should be {val}",
                "{name}: {old} -> {val}", "I want {name} to be {val}", "{name} needs to be {val} now", "new value for {name}: {val}"],
    tails=FILE_TAILS, and_tails=FILE_AND,
)

IMPORT = Grammar(
    intents=["add import {mod}", "add `import {mod}` after the existing imports", "add an import of {mod}", "import {mod} too",
             "insert the line `import {mod}` below the last import", "put `import {mod}` with the other imports",
             "add the {mod} module to the imports", "add a line importing {mod}"],
    scopes=["", "", " after the other imports", " below the imports", " at the end of the import block", " in this file"],
    statements=["this file needs `import {mod}` after its imports", "missing import: {mod} (add it after the last import)",
                "{mod} is not imported yet; add it after the existing imports"],
    tails=FILE_TAILS, and_tails=FILE_AND,
)

COMMENT = Grammar(
    intents=["add the comment `# {text}` above `def {fn}`", "put a comment `# {text}` right above the definition of {fn}",
             "insert `# {text}` just before the function {fn}", "write `# {text}` on the line above def {fn}",
             "add a `# {text}` comment before {fn}", "annotate the function {fn} with the comment `# {text}` above it",
             "place the comment `# {text}` on top of {fn}"],
    scopes=["", "", " at the same indentation", " on its own line"],
    statements=["above def {fn} there should be a comment `# {text}`", "{fn} needs a `# {text}` comment on the line above it"],
    tails=FILE_TAILS, and_tails=FILE_AND,
)

# ---------------------------------------------------------------- JSON

JSON_SCOPES = ["", "", " in every object", " in each record", " in all items", " for every entry", " in the JSON", " in this data",
               " in the list", " across all the records", " in each element"]
JSON_TAILS = ["", "", "Return the JSON.", "Give me the result as JSON.", "Output JSON only.", "Reply with the updated JSON.",
              "Return the new array.", "Just the JSON please.", "Answer in JSON.", "Show me the resulting JSON."]
JSON_AND = [" and return the JSON", " and give me the result", " and output the new JSON", " and show the result"]

JSON = {
    "rename": Grammar(
        intents=["rename the key {a} to {b}", "rename {a} to {b}", "change the key {a} to {b}", "rename the field {a} as {b}",
                 "use {b} as the key instead of {a}", "replace the key {a} with {b}", "call the {a} field {b}", "rename property {a} -> {b}",
                 "change the field name {a} to {b}", "switch the key name {a} to {b}", "turn the {a} key into {b}", "relabel {a} as {b}"],
        scopes=JSON_SCOPES,
        statements=["{a} should be called {b}", "the {a} key must be named {b}", "I want the {a} field to be called {b}",
                    "key {a} -> {b}", "{a} is now {b}, update the keys", "new name for the {a} key: {b}"],
        tails=JSON_TAILS, and_tails=JSON_AND,
    ),
    "keep": Grammar(
        intents=["keep only {keys}", "keep just the keys {keys}", "only keep the fields {keys}", "remove every key except {keys}",
                 "drop all fields but {keys}", "reduce each record to {keys}", "trim the objects to {keys}", "select only {keys}",
                 "leave only {keys}", "delete everything except {keys}", "keep the fields {keys} and nothing else",
                 "cut each object down to {keys}", "return only the fields {keys}"],
        scopes=JSON_SCOPES,
        statements=["I only need {keys}", "only {keys} should remain", "just {keys}, drop the rest", "fields to keep: {keys}",
                    "everything but {keys} can go"],
        tails=JSON_TAILS, and_tails=JSON_AND,
    ),
    "drop": Grammar(
        intents=["remove {a}", "remove the key {a}", "delete the {a} field", "drop the field {a}", "get rid of {a}", "strip out {a}",
                 "omit {a}", "exclude the {a} key", "remove the property {a}", "eliminate {a}", "delete {a}", "drop {a}",
                 "take {a} away", "cut the {a} field"],
        scopes=JSON_SCOPES,
        statements=["{a} is not needed", "I no longer want {a}", "the {a} field must go", "no {a} please", "{a} should be removed",
                    "we don't use {a} any more, remove it", "without {a}, please"],
        tails=JSON_TAILS, and_tails=JSON_AND,
    ),
    "filter": Grammar(
        intents=["keep only the records where {a} is greater than {v}", "filter to the items with {a} > {v}",
                 "select the entries whose {a} is more than {v}", "remove the records with {a} of {v} or less",
                 "find the items with {a} over {v}", "return the rows where {a} exceeds {v}", "give me everything with {a} larger than {v}",
                 "filter the list by {a} > {v}", "keep the objects whose {a} is bigger than {v}", "show only entries with {a} above {v}",
                 "list the records having {a} > {v}", "drop every record whose {a} is at most {v}"],
        scopes=["", "", " in this list", " from the data", " from this array"],
        statements=["only the records with {a} greater than {v}", "I want the items where {a} > {v}", "which entries have {a} more than {v}",
                    "filter: {a} > {v}", "entries with {a} bigger than {v} only"],
        tails=JSON_TAILS,
    ),
    "sort": Grammar(
        intents=["sort the records by {a} in ascending order", "sort by {a} ascending", "order the list by {a}, smallest first",
                 "sort the items by {a}, lowest first", "arrange the records in increasing order of {a}", "put the items in ascending {a} order",
                 "sort on {a}", "order by {a} ascending", "reorder the array by {a}, smallest to largest", "sort this by {a} (ascending)",
                 "rank the entries by {a}, least first", "sort these objects by increasing {a}"],
        scopes=["", "", " please", " in the array", " in this list"],
        statements=["ascending order of {a}, please", "the list should be sorted by {a}, smallest first", "I want it ordered by {a} ascending",
                    "sort key: {a}, ascending"],
        tails=JSON_TAILS,
    ),
    "sortdesc": Grammar(
        intents=["sort the records by {a}, largest first", "order the items by {a} in descending order", "sort by {a} descending",
                 "sort the list by {a}, highest first", "arrange the records in decreasing order of {a}", "order by {a} descending",
                 "reorder the array by {a}, largest to smallest", "rank the entries by {a}, biggest first", "sort these objects by decreasing {a}"],
        scopes=["", "", " please", " in the array"],
        statements=["descending order of {a}, please", "the list should be sorted by {a}, largest first", "sort key: {a}, descending"],
        tails=JSON_TAILS,
    ),
    "pluck": Grammar(
        intents=["give me a JSON array of all the {a} values", "list every {a} as a JSON array", "extract the {a} of each record into an array",
                 "pull out the {a} values", "return an array with each {a}", "make a list of the {a} values", "get all the {a} values as a list",
                 "gather every {a} into an array", "extract {a} from each item", "map each record to its {a}", "output just the {a} values, in order",
                 "grab the {a} of every object"],
        scopes=["", "", " in order", " from this data", " from the records"],
        statements=["all the {a} values as a JSON array", "I need every {a} in a list", "just the {a} of each entry, as an array",
                    "a list of the {a} values, please"],
        tails=["", "", "Answer in JSON.", "JSON array only.", "Return the array."],
    ),
    "index": Grammar(
        intents=["turn this list into an object keyed by id (as a string), without the id field inside",
                 "convert the array to a dict mapping each id (string) to the rest of the record",
                 "index the records by id: an object from id (string) to the record without its id",
                 "key the entries by their id (as strings) and drop id from the values",
                 "make an object whose keys are the ids as strings and whose values are the records minus id"],
        tails=JSON_TAILS,
    ),
    "lookup": Grammar(
        intents=["tell me the {a} of the record with id {v}", "find the record whose id is {v} and give me its {a}",
                 "get the {a} for id {v}", "look at the entry with id {v}: what is its {a}", "return the {a} of item {v}",
                 "fetch the {a} of the object whose id is {v}", "read off the {a} of record {v}"],
        statements=["what is the {a} of the record with id {v}", "the {a} for id {v}, please", "id {v}: which {a} does it have",
                    "I need the {a} of entry {v}"],
        tails=["Answer with the JSON value.", "Reply with just the JSON value.", "As JSON.", "JSON value only.", "Give the value as JSON."],
    ),
    "count": Grammar(
        intents=["count the entries where {a} is true", "tell me how many records have {a} set to true", "count how many items have {a} true",
                 "count the objects with {a} = true", "give me the number of records where {a} is true"],
        statements=["how many records have {a} set to true", "the number of entries with {a} true", "how many items are {a}"],
        tails=["Answer as a JSON number.", "Reply with a JSON number.", "Just the number (JSON).", "As a JSON number."],
    ),
}

# ---------------------------------------------------------------- tools
# Per tool: verb phrases and statements with the tool's argument slots; quoting is not
# used (the arguments are values, not identifiers).

TOOL = {
    "get_weather": Grammar(
        intents=["check the weather in {city} in {unit}", "get the current weather for {city} ({unit})", "look up the weather in {city}, in {unit}",
                 "tell me the weather in {city} in {unit}", "find out how hot it is in {city} in {unit}", "give me the {city} weather in {unit}",
                 "fetch today's weather for {city}, {unit} please", "see what the temperature is in {city} (in {unit})"],
        statements=["what's the weather in {city} in {unit}", "how warm is it in {city} right now, in {unit}", "weather {city} ({unit})",
                    "is it cold in {city}? Tell me in {unit}", "I wonder what the weather is like in {city} ({unit})",
                    "current conditions in {city}, {unit}", "{city} weather now, in {unit}"],
    ),
    "read_file": Grammar(
        intents=["read the file {path}", "show me what's in {path}", "open {path}", "read {path} for me", "display the contents of {path}",
                 "cat {path}", "load {path} and show it", "print the file {path}", "fetch the contents of {path}"],
        statements=["what's in {path}", "contents of {path}, please", "I want to read {path}", "{path} - what does it contain",
                    "let me see {path}"],
    ),
    "search_code": Grammar(
        intents=["search for {pattern} in {path}", "find where {pattern} is used under {path}", "grep {pattern} in {path}",
                 "look for occurrences of {pattern} in the {path} directory", "search {path} for {pattern}", "find every mention of {pattern} in {path}",
                 "locate {pattern} inside {path}", "scan {path} for the text {pattern}", "find all references to {pattern} in {path}"],
        statements=["where is {pattern} used in {path}", "which files under {path} contain {pattern}", "occurrences of {pattern} in {path}",
                    "I need to know where {pattern} shows up in {path}"],
    ),
    "run_command": Grammar(
        intents=["run `{command}`", "execute {command} and show me the output", "run the command `{command}`", "execute `{command}`",
                 "run {command} in the shell", "launch `{command}` and tell me what it prints", "type `{command}` in the terminal",
                 "invoke {command}"],
        statements=["what does `{command}` output", "the output of `{command}`, please", "I need the result of running {command}",
                    "shell: {command}"],
    ),
    "convert_currency": Grammar(
        intents=["convert {amount} {from_currency} to {to_currency}", "change {amount} {from_currency} into {to_currency}",
                 "tell me what {amount} {from_currency} is in {to_currency}", "exchange {amount} {from_currency} to {to_currency}",
                 "work out {amount} {from_currency} in {to_currency}", "express {amount} {from_currency} in {to_currency}"],
        statements=["how much is {amount} {from_currency} in {to_currency}", "{amount} {from_currency} to {to_currency}",
                    "what do I get for {amount} {from_currency} in {to_currency}", "{amount} {from_currency} = ? {to_currency}",
                    "how many {to_currency} are {amount} {from_currency}"],
    ),
    "send_email": Grammar(
        intents=["send an email to {to} with subject \"{subject}\" saying \"{body}\"", "email {to}: subject {subject}, body: {body}",
                 "write to {to} (subject: {subject}) and say: {body}", "send {to} a message titled \"{subject}\": \"{body}\"",
                 "mail {to} with the subject \"{subject}\" and the text \"{body}\"", "shoot {to} an email, subject \"{subject}\", body \"{body}\""],
        statements=["email to {to}, subject \"{subject}\", message \"{body}\"", "I want to tell {to} \"{body}\" by email, subject \"{subject}\"",
                    "new mail for {to}: \"{subject}\" / \"{body}\""],
    ),
    "create_event": Grammar(
        intents=["create an event \"{title}\" on {date} at {time}", "schedule {title} for {date} at {time}", "add {title} to my calendar, {date} {time}",
                 "put \"{title}\" in the calendar on {date} at {time}", "set up \"{title}\" on {date} at {time}", "make a calendar entry \"{title}\", {date}, {time}",
                 "block {date} at {time} for {title}"],
        statements=["{title} on {date} at {time} - add it to my calendar", "calendar: \"{title}\", {date} {time}",
                    "I've got {title} on {date} at {time}, save it in the calendar"],
    ),
    "get_stock_price": Grammar(
        intents=["get me the current {symbol} stock price", "look up the price of {symbol}", "check the {symbol} share price",
                 "tell me what {symbol} is trading at", "fetch the latest {symbol} quote", "find the stock price of {symbol}"],
        statements=["what's the price of {symbol}", "{symbol} price?", "how much is {symbol} trading at", "how is {symbol} doing today, price-wise",
                    "current {symbol} quote"],
    ),
    "calculate": Grammar(
        intents=["calculate {expression}", "compute {expression}", "use the calculator for {expression}", "evaluate {expression}",
                 "figure out {expression}", "do the math: {expression}", "tell me the result of {expression}"],
        statements=["what is {expression}", "{expression} = ?", "how much is {expression}", "the result of {expression}, please"],
    ),
    "translate": Grammar(
        intents=["translate \"{text}\" into {target_language}", "translate to {target_language}: {text}", "put \"{text}\" into {target_language}",
                 "give me \"{text}\" in {target_language}", "convert \"{text}\" to {target_language}", "say \"{text}\" in {target_language}"],
        statements=["how do you say \"{text}\" in {target_language}", "\"{text}\" in {target_language}", "{target_language} for \"{text}\"",
                    "I need \"{text}\" translated into {target_language}"],
    ),
    "set_timer": Grammar(
        intents=["set a {minutes} minute timer for {label}", "start a timer: {minutes} minutes, {label}", "set a timer for {minutes} minutes ({label})",
                 "start a {minutes}-minute {label} timer", "time {minutes} minutes for the {label}", "run a timer of {minutes} min for {label}"],
        statements=["timer {minutes} min {label}", "{minutes} minutes for the {label}, start the timer", "I need a {minutes} minute timer for my {label}"],
    ),
    "create_issue": Grammar(
        intents=["open an issue \"{title}\" with {priority} priority", "file a {priority} priority bug: {title}", "create an issue: {title} ({priority})",
                 "report a bug \"{title}\", priority {priority}", "open a {priority}-priority ticket for \"{title}\"", "log an issue titled \"{title}\" ({priority} priority)"],
        statements=["new issue: \"{title}\", {priority} priority", "bug report: {title} - priority {priority}", "we need a ticket for \"{title}\" at {priority} priority"],
    ),
}
TOOL_TAILS = ["", "", "", "Thanks.", "Thanks!", "Please.", "Quickly, please.", "Use the tools if needed."]
for _g in TOOL.values():
    _g.tails = TOOL_TAILS


def tool_request(rng, name, args):
    g = TOOL[name]
    return compose(rng, g, **{k: str(v) for k, v in args.items()})


def train(rng, task, quoted=(), **slots):
    """A training request for `task` (rename, value, import, comment, json:<op>)."""
    if task.startswith("json:"):
        return compose(rng, JSON[task[5:]], quoted, **slots)
    return compose(rng, {"rename": RENAME, "value": VALUE, "import": IMPORT, "comment": COMMENT}[task], quoted, **slots)


def check_disjoint(pairs, samples=4000, seed=0):
    """Assert that no evaluation phrasing can come out of the training grammars:
    pairs is [(task, eval_text, slots, quoted)], eval_text an evaluation phrasing filled
    with the same values as slots; each grammar is sampled `samples` times and compared
    after lowercasing and dropping punctuation and quotes. Returns the number of distinct training phrasings seen."""
    import random

    rng = random.Random(seed)

    def norm(s):
        return re.sub(r"[^a-z0-9_ ]+", "", s.lower()).split()

    seen = 0
    for task, text, slots, quoted in pairs:
        evals = {" ".join(norm(text))}
        outs = set()
        for _ in range(samples):
            if task.startswith("tool:"):
                s = tool_request(rng, task[5:], slots)
            else:
                s = train(rng, task, quoted, **slots)
            outs.add(" ".join(norm(s)))
        hit = outs & evals
        assert not hit, f"training grammar {task} produces an evaluation phrasing: {hit}"
        seen += len(outs)
    return seen
