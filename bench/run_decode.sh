#!/usr/bin/env bash
# Single-stream decode speed of a ~0.5B Qwen2-shaped model (random weights) in
# BF16, Q8_0 and Q4_0, each next to this machine's memory-read ceiling measured
# in the same run: read-bandwidth readings taken before and after each decode run,
# their median as the ceiling (see bench/decode_bench.c). Prints the load average
# at the start and the end of each type's measurement: on a shared machine a busy
# run shows there. Usage: bench/run_decode.sh [THREADS] [RUNS]   (default: all cores, 5 runs)
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:-$(nproc)}
runs=${2:-5}
model=bench/models/qwen2-0.5b-random
[ -f "$model/model.safetensors" ] || python3 bench/make_bench_model.py "$model"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" --target decode-bench >/dev/null
echo "# $(date -u '+%Y-%m-%d %H:%M') $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, threads $threads," \
    "commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
for q in "" "--quant q8" "--quant q4"; do
    # shellcheck disable=SC2086
    build/bench/decode-bench "$model" $q --threads "$threads" -n 64 --runs "$runs" 2>/dev/null
done
