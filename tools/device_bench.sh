#!/usr/bin/env bash
# tools/device_bench.sh - builds Rapid (CPU backend) on a machine that lacks its
# build dependencies and cannot download them, then runs the CPU benchmarks there.
# Made for the GPU host that the `device` tool lends (Ubuntu 24.04, 16 cores, no
# internet, no -dev packages): its CPU is a quieter and larger measuring machine
# than the 2-core VM the project is developed on.
#
# The dependencies travel as Debian 12 packages in DEBDIR, fetched on the
# development machine with
#   apt-get download libmicrohttpd-dev libmicrohttpd12 libjansson-dev libjansson4 \
#     libpcre2-dev libpcre2-8-0 libutf8proc-dev libutf8proc2 libxxhash-dev libxxhash0 \
#     libcurl4-openssl-dev libcurl4 pkgconf pkgconf-bin libpkgconf3
# and are unpacked under /tmp/rapid-sys (never over /), their pkg-config files
# pointed there; the system's own libcurl is used when it has one.
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
sys=/tmp/rapid-sys
lib=$sys/usr/lib/x86_64-linux-gnu

has() { case ",$steps," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }

{
    date -u
    lscpu
    free -g
    nproc
    cat /proc/loadavg
} > "$out/machine.txt" 2>&1

# unpack the packages; the system's libcurl.so.4, if any, instead of Debian's
mkdir -p "$sys"
syscurl=$(ls /usr/lib/x86_64-linux-gnu/libcurl.so.4 2>/dev/null || true)
for d in "$debs"/*.deb; do
    case "$d" in *"/libcurl4_"*) [ -n "$syscurl" ] && continue ;; esac
    dpkg-deb -x "$d" "$sys"
done
[ -n "$syscurl" ] && ln -sf "$syscurl" "$lib/libcurl.so"
for pc in "$lib"/pkgconfig/*.pc "$sys"/usr/share/pkgconfig/*.pc; do
    [ -f "$pc" ] && sed -i -e "s|=/usr|=$sys/usr|" -e "/^Requires.private:/d" "$pc"
done
export PKG_CONFIG_PATH=$lib/pkgconfig:$sys/usr/share/pkgconfig
export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
pkgconf=$(command -v pkg-config || echo "$sys/usr/bin/pkgconf")
threads=$(nproc)

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
