#!/usr/bin/env bash
# bench/run.sh - compares configurations of `rapid serve` with `rapid bench`,
# a fresh server per run.
#
# Usage:
#   bench/run.sh [options] LABEL='SERVER FLAGS' LABEL='SERVER FLAGS' ...
# e.g.
#   bench/run.sh --runs 3 --scenario tasks 'threads1=--threads 1' 'threads2=--threads 2'
#   bench/run.sh 'bf16=' 'q8=--quant q8'
#
# Options:
#   --runs N          runs per configuration (default 3)
#   --scenario LIST   rapid bench scenarios (default tasks): tasks,concurrency,agent,prefill,tools
#   --model PATH      the model served (default: the bundled models/rapid-tiny)
#   --out DIR         where results go (default bench/results/<UTC date-time>)
#   --only IDS        only these tasks (comma-separated ids of bench/tasks.json)
#   --rapid PATH      the rapid binary (default build/rapid)
#   --bench-args 'A'  more arguments for rapid bench (e.g. '--concurrency 1,4')
#   --seed N          prompt nonces (default: one random seed shared by every run)
#
# For run r = 1..N the configurations go in rotated order (A B, then B A, ...), so
# drift on a shared machine does not favour one of them. Each measurement:
#   1. a fresh cache directory, and a fresh server: `rapid serve [MODEL] FLAGS --port 0`
#      (plus --cache-dir DIR only when `rapid serve --help` lists it), waited for until
#      it prints "rapid: listening on http://HOST:PORT";
#   2. `rapid bench --runs 1 --warmup 2 --seed S --label LABEL --meta ...` (two warm-up
#      requests, then the scenarios; the agent scenario gets a --restart-cmd that
#      restarts the server on the same port and cache directory);
#   3. SIGTERM to the server.
# The runs of each configuration are merged into DIR/LABEL.json (rapid bench merge) with
# versions, flags, git commit and machine recorded; with two or more configurations the
# first is compared with each other one: DIR/compare-B.txt, .md and .svg. Server logs are
# kept in DIR/logs/.
set -euo pipefail
cd "$(dirname "$0")/.."

runs=3
scenario=tasks
model=
out=
only=
rapid=build/rapid
bench_args=
seed=$(( (RANDOM << 16) | RANDOM ))
configs=()

die() { echo "bench/run.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
    case "$1" in
        --runs) runs=${2:?}; shift 2 ;;
        --scenario) scenario=${2:?}; shift 2 ;;
        --model) model=${2:?}; shift 2 ;;
        --out) out=${2:?}; shift 2 ;;
        --only) only=${2:?}; shift 2 ;;
        --rapid) rapid=${2:?}; shift 2 ;;
        --bench-args) bench_args=${2:?}; shift 2 ;;
        --seed) seed=${2:?}; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
        -*) die "unknown option $1 (see --help)" ;;
        *=*) configs+=("$1"); shift ;;
        *) die "a configuration is LABEL='FLAGS', got '$1'" ;;
    esac
done
[ ${#configs[@]} -ge 1 ] || die "give at least one configuration LABEL='FLAGS' (see --help)"
[[ $runs =~ ^[1-9][0-9]*$ ]] || die "--runs needs a positive integer"
for c in "${configs[@]}"; do
    [[ ${c%%=*} =~ ^[A-Za-z0-9_.-]+$ ]] || die "label '${c%%=*}' must be letters, digits, '.', '_' or '-'"
done
if [ ! -x "$rapid" ]; then
    cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
    cmake --build build -j "$(nproc)" --target rapid >/dev/null
fi
out=${out:-bench/results/$(date -u +%Y%m%d-%H%M%S)}
mkdir -p "$out/runs" "$out/logs"
tmp=$(mktemp -d)
server_pidfile=$tmp/server.pid
cache_flag=
# (the help is read whole first: `| grep -q` under pipefail fails when grep exits before
# the last write of the help, whose writer then dies of SIGPIPE)
serve_help=$("$rapid" serve --help 2>&1 || true)
case $serve_help in *--cache-dir*) cache_flag=yes ;; esac

stop_server() {
    local pid
    pid=$(cat "$server_pidfile" 2>/dev/null || true)
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid"
        for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
    fi
    rm -f "$server_pidfile"
}
trap 'stop_server; rm -rf "$tmp"' EXIT

# start_server LOG PORT CACHE FLAGS...: starts rapid serve, waits for its address, prints it.
start_server() {
    local log=$1 port=$2 cache=$3
    shift 3
    local args=(serve)
    [ -n "$model" ] && args+=("$model")
    args+=("$@" --port "$port")
    [ -n "$cache_flag" ] && args+=(--cache-dir "$cache")
    echo "# $rapid ${args[*]}" >>"$log"
    "$rapid" "${args[@]}" >>"$log" 2>&1 &
    echo $! >"$server_pidfile"
    local pid=$!
    for _ in $(seq 1 1200); do
        if grep -q 'rapid: listening on http://' "$log"; then
            grep -o 'listening on http://[^ ]*' "$log" | tail -1 | sed 's/^listening on //'
            return 0
        fi
        kill -0 "$pid" 2>/dev/null || { echo "bench/run.sh: the server exited; its log:" >&2; cat "$log" >&2; return 1; }
        sleep 0.1
    done
    echo "bench/run.sh: the server did not start within 120 s (log: $log)" >&2
    return 1
}

commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD -- . ':!bench/results' 2>/dev/null || commit="$commit+dirty" # results do not count
version=$("$rapid" --version)
n=${#configs[@]}
echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) $version ($commit), $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores," \
     "load $(cut -d' ' -f1-3 /proc/loadavg); runs $runs, scenario $scenario, seed $seed; results in $out"
for ((r = 0; r < runs; r++)); do
    for ((i = 0; i < n; i++)); do
        pos=$(( (i + r) % n ))
        label=${configs[$pos]%%=*}
        flags=${configs[$pos]#*=}
        log=$out/logs/$label.run$((r + 1)).log
        cache=$tmp/cache.$label.$r
        mkdir -p "$cache"
        # shellcheck disable=SC2086
        url=$(start_server "$log" 0 "$cache" $flags)
        port=${url##*:}
        # The agent scenario's restart: same flags, port and cache directory.
        restart=$tmp/restart.sh
        {
            echo '#!/usr/bin/env bash'
            echo "set -e; pid=\$(cat '$server_pidfile'); kill -TERM \$pid"
            echo "for _ in \$(seq 1 100); do kill -0 \$pid 2>/dev/null || break; sleep 0.1; done"
            printf '%q ' "$rapid" serve ${model:+"$model"} $flags --port "$port"
            [ -n "$cache_flag" ] && printf '%q ' --cache-dir "$cache"
            echo ">>'$log' 2>&1 & echo \$! >'$server_pidfile'"
        } >"$restart"
        chmod +x "$restart"
        echo "## run $((r + 1))/$runs, $label (${flags:-no flags}) at $url"
        file=$out/runs/$label.run$((r + 1)).json
        # shellcheck disable=SC2086
        "$rapid" bench --base-url "$url" --model "${model:-rapid-tiny}" --scenario "$scenario" --runs 1 \
            --warmup 2 --seed "$seed" --label "$label" --out "$file" --restart-cmd "$restart" \
            ${only:+--only "$only"} \
            --meta "server_flags=$flags" --meta "server_model=${model:-models/rapid-tiny (bundled)}" \
            --meta "rapid=$version" --meta "git_commit=$commit" --meta "run=$((r + 1))/$runs" \
            --meta "order=$((i + 1))/$n" --meta "cache_dir=${cache_flag:+passed}${cache_flag:-not supported}" \
            --meta "driver=bench/run.sh" $bench_args || echo "bench/run.sh: rapid bench reported failures (see $file)"
        stop_server
    done
done
for c in "${configs[@]}"; do
    label=${c%%=*}
    files=()
    for ((r = 1; r <= runs; r++)); do
        [ -f "$out/runs/$label.run$r.json" ] && files+=("$out/runs/$label.run$r.json")
    done
    "$rapid" bench merge --out "$out/$label.json" "${files[@]}"
done
a=${configs[0]%%=*}
for ((i = 1; i < n; i++)); do
    b=${configs[$i]%%=*}
    "$rapid" bench compare "$out/$a.json" "$out/$b.json" --md "$out/compare-$b.md" --svg "$out/compare-$b.svg" \
        | tee "$out/compare-$b.txt"
done
