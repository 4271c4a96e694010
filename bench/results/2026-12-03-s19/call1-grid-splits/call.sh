#!/usr/bin/env bash
# session 19, call 1: the tensor-core kernel streaming item after item (RP_CUDA_TC_GRID=-1)
# against a block an item; the K-splits swept per op; one decode step's kernels timed by ncu
set -uo pipefail
L=$OUT/logs; mkdir -p $L
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
(python3 bench/make_bench_model.py /tmp/qwen2.5-7b-random --shape 7b > $L/make_model.log 2>&1; echo done > /tmp/model.done) &
tests/gpu/run.sh .device/debs $L/gpu build || exit 1
el build
RP_TEST_REQUIRE_DEVICE=1 timeout 120 build-gpu/tests/backend_test_backend_ops > $L/ops.log 2>&1; el "ops rc $? $(grep -c '\[       OK \]' $L/ops.log) ok, $(grep -c 'FAILED \]' $L/ops.log) failed"
grep -B2 -A8 "FAILED\|ERROR\]" $L/ops.log | head -30
build-gpu/bench/gpu-bw-bench --gib 8 --runs 10 | tail -1
for g in 0 -1; do for s in 0 1 2 4 8; do
  RP_CUDA_TC_GRID=$g RP_CUDA_SPLITS=$s timeout 60 build-gpu/bench/matmul-op-bench --runs 12 --ns 1,8,16 > $L/mob-g$g-s$s.log 2>&1
  echo "g$g s$s: $(grep '^|' $L/mob-g$g-s$s.log | grep -v '^| op\|---' | awk -F'|' '{printf "%s%s%s;", $2, $4, $5}')"
done; el "sweep g$g"; done
while [ ! -f /tmp/model.done ]; do sleep 2; done
el model
m=/tmp/qwen2.5-7b-random
for g in 0 -1; do
  RP_CUDA_TC_GRID=$g timeout 100 build-gpu/bench/step-bench $m --device cuda --batch 1 --ctx 512 --steps 40 > $L/step-g$g.log 2>&1
  RP_CUDA_TC_GRID=$g timeout 120 build-gpu/bench/verify-bench $m --device cuda --ctx 512 --max 16 --reps 15 > $L/verify-g$g.log 2>&1
  el "g$g: $(grep '^| 1 |' $L/step-g$g.log)"; grep "^ *[0-9]" $L/verify-g$g.log | awk '$1==1||$1==2||$1==4||$1==8||$1==16' | head -8
done
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || find /opt /usr/local -name ncu -type f 2>/dev/null | head -1)
left=$(( 560 - ($(date +%s) - t0) ))
el "ncu $NCU, $left s left"
[ $left -gt 60 ] && RP_CUDA_GRAPHS=0 timeout $left $NCU --clock-control none --metrics gpu__time_duration.sum --csv build-gpu/bench/step-bench $m --device cuda --batch 1 --ctx 512 --steps 3 > $L/ncu-step.csv 2> $L/ncu-step.err
el "ncu rc $? $(wc -l < $L/ncu-step.csv) lines"
gzip -f $L/ncu-step.csv
