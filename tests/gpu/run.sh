#!/usr/bin/env bash
# tests/gpu/run.sh - the CUDA backend's tests, on a machine with an NVIDIA GPU (the
# `device` tool's H200: Ubuntu 24.04, no -dev packages, no Node.js): builds Rapid with
# CUDA, then runs
#   ops        the op harness (tests/unit/backend/test_backend_ops.c), every op and weight
#              type on CUDA against the CPU's scalar kernels, then again with BF16 on the
#              tensor cores (RP_CUDA_BF16_MMA=1: the row tiles a warp takes chosen per
#              launch, then 1 and 2 forced; three parts);
#              RP_TEST_REQUIRE_DEVICE=1 makes a missing GPU a failure, not a skip
#   sanitizer  the op harness under compute-sanitizer (memcheck, then racecheck)
#   unit       the unit and long tiers with every model-level test on CUDA (RP_TEST_DEVICE=cuda:
#              fidelity against the transformers fixtures, determinism in and out of batches,
#              chunking and verification spans, the engine, the server's wire tests)
#   http       every route of `rapid serve --device cuda` (tests/gpu/http_check.py)
# each logged to OUT/STEP.log, and prints one summary line per step.
#
# Usage: tests/gpu/run.sh DEBDIR OUT [STEPS]   (STEPS: comma list, default all: build,ops,
#        sanitizer,unit,http). DEBDIR holds the Debian packages tools/device_env.sh names.
set -uo pipefail
cd "$(dirname "$0")/../.."
debs=${1:?DEBDIR}
out=${2:?OUT}
steps=${3:-build,ops,sanitizer,unit,http}
mkdir -p "$out"
has() { case ",$steps," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
. tools/device_env.sh "$debs"
jobs=$(nproc)
status=0
summary() { echo "gpu-tests: $1: $2" | tee -a "$out/summary.txt"; }

{
    date -u
    nvidia-smi
    nvcc --version
} > "$out/machine.txt" 2>&1

if has build; then
    rm -f build-gpu/CMakeCache.txt # pkg-config's answers are cached there: the packages may have moved
    if cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DRP_CUDA=ON -DRP_WERROR=ON \
        -DPKG_CONFIG_EXECUTABLE="$RP_PKGCONF" > "$out/build.log" 2>&1 &&
        cmake --build build-gpu -j "$jobs" >> "$out/build.log" 2>&1; then
        summary build ok
    else
        summary build FAILED
        tail -40 "$out/build.log"
        exit 1
    fi
fi
ops=build-gpu/tests/backend_test_backend_ops

if has ops; then # the default numerics, then BF16 on the tensor cores: 2 parts (RT chosen per
    # launch, then each RT forced: RT must never change a result), 3 parts
    for v in "RP_CUDA_BF16_MMA=0" "RP_CUDA_BF16_MMA=1" "RP_CUDA_BF16_MMA=1 RP_CUDA_TC_RT=1" \
        "RP_CUDA_BF16_MMA=1 RP_CUDA_TC_RT=2" "RP_CUDA_BF16_MMA=1 RP_CUDA_TC_PARTS=3"; do
        log="$out/ops-$(echo "$v" | sed 's/RP_CUDA_//g; s/[ =]/-/g' | tr 'A-Z_' 'a-z-').log"
        if env $v RP_TEST_REQUIRE_DEVICE=1 timeout 120 "$ops" > "$log" 2>&1; then
            summary "ops ($v)" "ok ($(grep -c '\[       OK \]' "$log") tests passed)"
        else
            summary "ops ($v)" FAILED
            status=1
            grep -B2 -A6 'FAILED\|ERROR' "$log" | head -60
        fi
    done
fi

if has sanitizer; then
    san=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
    for tool in memcheck racecheck; do
        if RP_TEST_REQUIRE_DEVICE=1 timeout "${RP_SANITIZER_TIMEOUT:-400}" "$san" --tool "$tool" --error-exitcode 9 "$ops" \
            > "$out/sanitizer-$tool.log" 2>&1; then
            summary "sanitizer $tool" "ok ($(tail -1 "$out/sanitizer-$tool.log"))"
        else
            summary "sanitizer $tool" FAILED
            status=1
            grep -m 20 -A8 '=========' "$out/sanitizer-$tool.log" | head -60
        fi
    done
fi

if has unit; then
    if (cd build-gpu && RP_TEST_DEVICE=cuda timeout 360 ctest -j 4 -L 'unit|long' --timeout 150 --output-on-failure \
        > "$out/unit.log" 2>&1); then
        summary unit "ok ($(grep 'tests passed' "$out/unit.log"))"
    else
        summary unit "FAILED ($(grep 'tests passed' "$out/unit.log"))"
        status=1
        grep -A3 'FAILED\|Failed' "$out/unit.log" | head -80
    fi
fi

if has http; then
    if timeout 150 python3 tests/gpu/http_check.py build-gpu/rapid cuda > "$out/http.log" 2>&1; then
        summary http "ok ($(tail -1 "$out/http.log"))"
    else
        summary http "FAILED ($(tail -1 "$out/http.log"))"
        status=1
        grep FAIL "$out/http.log" | head -20
    fi
fi
exit $status
