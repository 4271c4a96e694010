#!/usr/bin/env bash
# bench/spec_bench.sh - decode speed with speculative decoding (the default) against
# --no-spec-decode, task by task, through `rapid run`: same binary, same model, same
# prompt, runs alternating (on, off, then off, on, ...) so drift on a shared machine
# favours neither. Decode speed is the stats line's "generated: N tokens, X tok/s"
# (tokens after the first over the time after it). The text must be the same in both
# (speculation only changes speed): the script checks it and fails otherwise.
#
# With --cpu it also compares decode CPU time (user + system) per token: each run's
# CPU time less that of the same prompt with -n 1 (loading and prefill, the same with
# and without speculation). With --threads 1 that is the work a step does whatever
# the neighbours on a shared machine do to wall time (they still share caches).
#
# Usage: bench/spec_bench.sh [--runs N] [--threads T] [--rapid PATH] [--model PATH]
#                            [--only ID,ID] [--spec 'FLAGS'] [--out FILE] [--cpu]
#   --runs N      runs per configuration and task (default 3); each side's median is used
#   --threads T   rapid run --threads (default: all cores)
#   --spec FLAGS  flags of the speculative side (default: none, i.e. auto), split into
#                 words as the shell would (quotes kept together), e.g.
#                 --spec "--speculative-config '{\"num_speculative_tokens\": 64}'"
#   --out FILE    also write the table (markdown) there
#   --cpu         also the decode speed in tokens per CPU second (best with --threads 1)
#
# Tasks (rapid-tiny; -n is the cap, a reply may end sooner):
#   edit_file117  rename `args` to `opts` across tests/data/edit/stage1.py (117 lines), whole file back
#   edit_file150  rename `main_m` to `model` across tests/data/edit/stage2_head150.py
#   edit_small    change a value in a 13-line function, whole file back
#   json_rename   rename a key in every object of a JSON array
#   json_extract  extract fields into a JSON object
#   prose_raw     free text: raw continuation, sampled (temperature 0.9, seed 5): nothing to copy
#   chat_greedy   a chat question answered greedily (the tiny model falls into loops here)
set -euo pipefail
cd "$(dirname "$0")/.."

runs=3
threads=
rapid=build/rapid
model=
only=
spec=
spec_args=()
out=
cpu=
while [ $# -gt 0 ]; do
    case "$1" in
    --runs) runs=$2; shift 2 ;;
    --threads) threads="--threads $2"; shift 2 ;;
    --rapid) rapid=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    --spec)
        spec=$2
        # the flags as words, quotes honoured (a JSON argument stays one word)
        if ! eval "spec_args=($2)"; then
            echo "spec_bench.sh: cannot split --spec '$2' into words" >&2
            exit 2
        fi
        shift 2
        ;;
    --out) out=$2; shift 2 ;;
    --cpu) cpu=1; shift ;;
    *) echo "spec_bench.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

snippet='```python
def mean(values):
    total = 0
    for v in values:
        total += v
    return total / len(values)


def variance(values):
    m = mean(values)
    total = 0
    for v in values:
        total += (v - m) ** 2
    return total / len(values)
```'
{ printf 'Rename `args` to `opts` everywhere in this file and return the whole file.\n\n```python\n'
  cat tests/data/edit/stage1.py; printf '```'; } > "$tmp/edit_file117.txt"
{ printf 'Rename `main_m` to `model` everywhere in this file and return the whole file.\n\n```python\n'
  cat tests/data/edit/stage2_head150.py; printf '```'; } > "$tmp/edit_file150.txt"
printf 'Change the value 0 to 0.0 in this file and return the whole file.\n\n%s' "$snippet" > "$tmp/edit_small.txt"
printf 'Rename the key `name` to `title` in every object.\n\n```json\n[{"id": 1, "name": "a", "tags": ["x", "y"]}, {"id": 2, "name": "b", "tags": []}, {"id": 3, "name": "c", "tags": ["z"]}, {"id": 4, "name": "d", "tags": ["x"]}]\n```' > "$tmp/json_rename.txt"
printf 'Extract the name, the age and the city as a JSON object: "Maria Lopez is 34 and lives in Porto; her brother Joao is 29."' > "$tmp/json_extract.txt"
printf 'The history of computing' > "$tmp/prose_raw.txt"
printf 'Tell me everything you know about Python decorators.' > "$tmp/chat_greedy.txt"

tasks="edit_file117 edit_file150 edit_small json_rename json_extract prose_raw chat_greedy"
flags_of() {
    case "$1" in
    edit_file117 | edit_file150) echo "-n 2600" ;;
    edit_small) echo "-n 300" ;;
    json_rename | json_extract) echo "-n 300" ;;
    prose_raw) echo "--raw -n 400 --temp 0.9 --seed 5" ;;
    chat_greedy) echo "-n 400" ;;
    esac
}

# One run: prints "TOKENS TOK_PER_S CPU_SECONDS", keeps the text in $tmp/text.$2.
# Side "base" is the prompt alone (-n 1, no speculation): loading and prefill.
run_one() {
    local task=$1 side=$2 flags extra=(--no-spec-decode)
    flags=$(flags_of "$task")
    if [ "$side" = on ]; then extra=("${spec_args[@]}"); fi
    if [ "$side" = base ]; then flags="$(echo "$flags" | sed 's/-n [0-9]*//') -n 1"; fi
    local TIMEFORMAT='%3U %3S'
    # shellcheck disable=SC2086
    if ! { time "$rapid" run $model -f "$tmp/$task.txt" $flags $threads "${extra[@]}" > "$tmp/text.$side" 2> "$tmp/err.$side"; } 2> "$tmp/cpu.$side"; then
        echo "spec_bench.sh: $task ($side): rapid run failed:" >&2
        tail -3 "$tmp/err.$side" >&2
        return 1
    fi
    local c
    c=$(awk 'NF == 2 {c = $1 + $2} END {print c}' "$tmp/cpu.$side")
    grep -o 'generated: [0-9]* tokens, [0-9.]* tok/s' "$tmp/err.$side" | awk -v c="$c" '{print $2, $4, c}'
}

median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "binary: $rapid ($("$rapid" --version 2>/dev/null | head -1 || echo ?); source tree at $(git rev-parse --short HEAD 2>/dev/null || echo ?)), spec side: ${spec:-auto (default)}, runs: $runs"
table="| task | tokens | decode tok/s, speculation | decode tok/s, --no-spec-decode | ratio | accepted/drafted (last run) |
|---|---|---|---|---|---|"
if [ -n "$cpu" ]; then
    table="| task | tokens | decode tok/s, speculation | decode tok/s, --no-spec-decode | ratio | tok per CPU s, speculation | tok per CPU s, off | CPU ratio | accepted/drafted (last run) |
|---|---|---|---|---|---|---|---|---|"
fi
ratios=
cpu_ratios=
for task in $tasks; do
    if [ -n "$only" ] && ! echo ",$only," | grep -q ",$task,"; then
        continue
    fi
    : > "$tmp/on.tps"
    : > "$tmp/off.tps"
    : > "$tmp/on.cpu"
    : > "$tmp/off.cpu"
    : > "$tmp/base.cpu"
    for r in $(seq 1 "$runs"); do
        if [ $((r % 2)) -eq 1 ]; then order="on off"; else order="off on"; fi
        if [ -n "$cpu" ]; then order="$order base"; fi
        for side in $order; do
            # (run_one's failure ends the script: an assignment keeps its status for set -e)
            res=$(run_one "$task" "$side")
            set -- $res
            echo "$3" >> "$tmp/$side.cpu"
            if [ "$side" != base ]; then
                echo "$2" >> "$tmp/$side.tps"
                echo "$1" > "$tmp/$side.n"
            fi
        done
        if ! cmp -s "$tmp/text.on" "$tmp/text.off"; then
            echo "spec_bench.sh: $task: the text differs with speculation" >&2
            exit 1
        fi
    done
    on=$(median < "$tmp/on.tps")
    off=$(median < "$tmp/off.tps")
    ratio=$(awk -v a="$on" -v b="$off" 'BEGIN {printf "%.2f", a / b}')
    ratios="$ratios $ratio"
    counts=$(grep -o 'spec accepted/drafted: [^|]*' "$tmp/err.on" | sed 's/spec accepted\/drafted: //; s/ *$//')
    row="| $task | $(cat "$tmp/on.n") | $on | $off | ${ratio}x | ${counts:-none} |"
    if [ -n "$cpu" ]; then
        # tokens after the first over the CPU seconds past the prompt's (medians)
        base=$(median < "$tmp/base.cpu")
        n=$(cat "$tmp/on.n")
        con=$(median < "$tmp/on.cpu" | awk -v b="$base" -v n="$n" '{d = $1 - b; printf "%.1f", (d > 0 ? (n - 1) / d : 0)}')
        coff=$(median < "$tmp/off.cpu" | awk -v b="$base" -v n="$n" '{d = $1 - b; printf "%.1f", (d > 0 ? (n - 1) / d : 0)}')
        cratio=$(awk -v a="$con" -v b="$coff" 'BEGIN {printf "%.2f", (b > 0 ? a / b : 0)}')
        cpu_ratios="$cpu_ratios $cratio"
        row="| $task | $n | $on | $off | ${ratio}x | $con | $coff | ${cratio}x | ${counts:-none} |"
    fi
    table="$table
$row"
    echo "$row"
done
med=$(echo $ratios | tr ' ' '\n' | median)
summary="median ratio over the tasks: ${med}x"
if [ -n "$cpu" ]; then
    summary="$summary (CPU time: $(echo $cpu_ratios | tr ' ' '\n' | median)x)"
fi
echo "$summary; load after: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ -n "$out" ]; then
    printf '%s\n\n%s\n' "$table" "$summary" > "$out"
fi
