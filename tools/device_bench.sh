#!/usr/bin/env bash
# tools/device_bench.sh - builds Rapid (CPU backend) on a machine that lacks its
# build dependencies and cannot download them, then runs the CPU benchmarks there.
# Made for the GPU host that the `device` tool lends (Ubuntu 24.04, 16 cores, no
# internet, no -dev packages): its CPU is a quieter and larger measuring machine
# than the 2-core VM the project is developed on.
#
# The dependencies travel as Debian 12 packages in DEBDIR (tools/device_env.sh says
# which, and unpacks them).
#
# Usage: tools/device_bench.sh DEBDIR OUTDIR [STEPS]
#   STEPS: comma list of build,decode,step,conc,spec (default: all), each logged to
#   OUTDIR/STEP.log, the machine's description to OUTDIR/machine.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
debs=${1:?DEBDIR}
out=${2:?OUTDIR}
steps=${3:-build,decode,step,conc,spec}
mkdir -p "$out"

has() { case ",$steps," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }

{
    date -u
    lscpu
    free -g
    nproc
    cat /proc/loadavg
} > "$out/machine.txt" 2>&1

. tools/device_env.sh "$debs"
pkgconf=$RP_PKGCONF
threads=$(nproc)
export RAPID_DEVICE=cpu # these are the CPU's figures (a CUDA build would default to the GPU)

if has build; then
    gen=()
    command -v make >/dev/null || gen=(-G Ninja)
    { cmake -S . -B build "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DRP_TESTS=OFF \
        -DPKG_CONFIG_EXECUTABLE="$pkgconf" &&
        cmake --build build -j "$threads" --target rapid decode-bench step-bench; } > "$out/build.log" 2>&1 ||
        { echo "build failed (build.log)"; tail -30 "$out/build.log"; exit 1; }
fi

# single-stream decode against the memory-read ceiling (issue 2), all cores
has decode && timeout 180 bench/run_decode.sh "$threads" 5 > "$out/decode.log" 2>&1

# one decode step's cost against the number of sequences in it (issue 7)
if has step; then
    for t in 4 "$threads"; do
        echo "## rapid-tiny bf16, $t threads"
        timeout 45 build/bench/step-bench models/rapid-tiny --threads "$t" --steps 100
    done > "$out/step.log" 2>&1
    [ -f bench/models/qwen2-0.5b-random/model.safetensors ] ||
        python3 bench/make_bench_model.py bench/models/qwen2-0.5b-random
    for q in "" "--quant q8"; do
        echo "## qwen2-0.5b-random $q, $threads threads"
        # shellcheck disable=SC2086
        timeout 60 build/bench/step-bench bench/models/qwen2-0.5b-random --threads "$threads" --steps 20 $q
    done >> "$out/step.log" 2>&1
fi

# aggregate decode of 1, 4, 16 streams through the server (issue 7)
# (one archive: the device tool brings back at most 8 files)
if has conc; then
    timeout 150 bench/concurrency.sh --runs 2 --out "$out/conc" --scenario concurrency \
        'default=' 'nospec=--no-spec-decode' > "$out/conc.log" 2>&1
    tar czf "$out/conc.tgz" -C "$out" conc && rm -rf "$out/conc"
fi

# speculation against plain decoding, task by task (issue 8)
has spec && timeout 150 bench/spec_bench.sh --runs 3 --out "$out/spec.md" > "$out/spec.log" 2>&1
cat /proc/loadavg >> "$out/machine.txt"
exit 0
