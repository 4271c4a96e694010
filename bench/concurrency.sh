#!/usr/bin/env bash
# bench/concurrency.sh - concurrency and long-prompt interference of `rapid serve`
# under several configurations, a fresh server per configuration.
#
# Usage:
#   bench/concurrency.sh [--runs N] [--out DIR] [--scenario LIST] [--model PATH] LABEL='SERVER FLAGS' ...
# e.g.
#   bench/concurrency.sh --runs 3 'default=' 'nospec=--no-spec-decode'
#
# Per configuration: a fresh server on the bundled model, or on PATH with --model
# (`rapid serve [PATH] FLAGS --port 0`
# with a fresh cache directory), one unrecorded pass of the scenarios (so the KV pool's
# pages and the caches are warm: the first touch of the pool's memory costs page faults),
# then `rapid bench --runs N --scenario LIST` (default concurrency,interference), whose
# progress lines (aggregate and per-stream decode, the ratio to one stream, the
# server's forward time by batch size, the pauses of the interference scenario) go to
# DIR/LABEL.log with the load average before and after; the result file is
# DIR/LABEL.json, the server's log DIR/LABEL.server.log.
set -euo pipefail
cd "$(dirname "$0")/.."

runs=3
out=bench/results/$(date -u +%Y-%m-%dT%H%M%SZ)-concurrency
scenario=concurrency,interference
model=
configs=()
while [ $# -gt 0 ]; do
    case "$1" in
        --runs) runs=${2:?}; shift 2 ;;
        --out) out=${2:?}; shift 2 ;;
        --scenario) scenario=${2:?}; shift 2 ;;
        --model) model=${2:?}; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
        *=*) configs+=("$1"); shift ;;
        *) echo "bench/concurrency.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
[ ${#configs[@]} -gt 0 ] || { echo "bench/concurrency.sh: no configuration given" >&2; exit 2; }
mkdir -p "$out"
name=rapid-tiny
[ -z "$model" ] || name=$(basename "$model")
tmp=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT

for cfg in "${configs[@]}"; do
    label=${cfg%%=*}
    flags=${cfg#*=}
    rm -rf "$tmp/kv"
    # shellcheck disable=SC2086
    build/rapid serve $model --port 0 --cache-dir "$tmp/kv" -q $flags >"$out/$label.server.log" 2>&1 &
    pid=$!
    for _ in $(seq 100); do grep -q 'listening on' "$out/$label.server.log" && break; sleep 0.1; done
    url=$(grep -o 'http://[0-9.]*:[0-9]*' "$out/$label.server.log" | head -1)
    [ -n "$url" ] || { echo "bench/concurrency.sh: the server did not start (see $out/$label.server.log)" >&2; exit 1; }
    {
        echo "== $label: rapid serve $flags ($(git rev-parse --short HEAD 2>/dev/null || echo '?'))"
        echo "load before: $(cat /proc/loadavg)"
    } | tee "$out/$label.log"
    build/rapid bench --base-url "$url" --model "${name}" --out "$tmp/warm.json" --scenario "$scenario" --runs 1 \
        --warmup 2 -q
    build/rapid bench --base-url "$url" --model "${name}" --out "$out/$label.json" --scenario "$scenario" \
        --runs "$runs" --label "$label" --meta "flags=$flags" 2>&1 | tee -a "$out/$label.log"
    echo "load after: $(cat /proc/loadavg)" | tee -a "$out/$label.log"
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    pid=
done
